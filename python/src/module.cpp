// python/src/module.cpp: the `maxtext_cpp._maxtext_cpp` extension: Config, Model (any registered decoder block and
// policy, chosen at run time), Cache, Tokenizer, read_tensors, and the maxtext_cpp.Error exceptions. This TU only
// converts between Python and the library; models are models::AnyModel objects, compiled in the maxtext_blocks
// library (tools/blocks/, one translation unit per decoder block). The GIL is released while the library computes and re-acquired for callbacks.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/mesh.hpp"
#include "maxtext/core/config_keys.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/families/checkpoint.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/io/tensor_files.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/constrained.hpp"
#include "maxtext/models/grammar.hpp"
#include "maxtext/models/json_schema.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/split_model.hpp"
#include "maxtext/models/weight_choice.hpp"
#include "maxtext/testing/reference_check.hpp"
#include "maxtext/tokenizer/compressed_tokenizer.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

namespace py = pybind11;

namespace maxtext::python {

/// The source tree's configs directory (config_dir.cpp, the one unit compiled with that absolute path).
const char* maxtext_python_config_dir();
/// The ranks mpirun started (world.cpp, compiled with MPI; the stub below without it).
std::shared_ptr<comm::Communicator> python_mpi_world();

#if defined(MAXTEXT_PYTHON_NO_MPI)
std::shared_ptr<comm::Communicator> python_mpi_world() {
  MAXTEXT_THROW(UnsupportedError, "[mpi_world] this module was built without MPI (apt-get install libopenmpi-dev "
                "openmpi-bin, then configure again: docs/distributed.md)");
}
#endif

namespace {

// ---- exceptions ------------------------------------------------------------------------------------------------
struct ErrorTypes {
  PyObject* base = nullptr;
  PyObject* config = nullptr;
  PyObject* shape = nullptr;
  PyObject* io = nullptr;
  PyObject* unsupported = nullptr;
  PyObject* device = nullptr;
  PyObject* argument = nullptr;
};
ErrorTypes g_errors;

PyObject* new_error(py::module_& m, const char* name, std::vector<PyObject*> bases, const char* doc) {
  py::tuple b(bases.size());
  for (std::size_t i = 0; i < bases.size(); ++i) b[i] = py::reinterpret_borrow<py::object>(bases[i]);
  const std::string full = std::string("maxtext_cpp.") + name;
  PyObject* t = PyErr_NewExceptionWithDoc(full.c_str(), doc, b.ptr(), nullptr);
  if (t == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(t));
  return t;
}

void register_errors(py::module_& m) {
  g_errors.base = new_error(m, "Error", {PyExc_Exception}, "Base of every error the maxtext-cpp library raises.");
  g_errors.config = new_error(m, "ConfigError", {g_errors.base, PyExc_ValueError},
                              "Inconsistent or unsupported configuration values (names the keys).");
  g_errors.shape = new_error(m, "ShapeError", {g_errors.base, PyExc_ValueError},
                             "A tensor whose shape does not match what a layer or a parameter expects.");
  g_errors.argument = new_error(m, "ArgumentError", {g_errors.base, PyExc_ValueError},
                                "Bad arguments (token ids out of range, wrong dtypes, bad sampling parameters, ...).");
  g_errors.io = new_error(m, "IoError", {g_errors.base, PyExc_OSError},
                          "A missing, truncated or malformed file, or a missing / mis-shaped tensor in weights.");
  g_errors.unsupported = new_error(m, "UnsupportedError", {g_errors.base, PyExc_NotImplementedError},
                                   "A MaxText feature this library does not implement.");
  g_errors.device = new_error(m, "DeviceError", {g_errors.base, PyExc_RuntimeError},
                              "A failure reported by an accelerator runtime.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      PyErr_SetString(g_errors.config, e.what());
    } catch (const ShapeError& e) {
      PyErr_SetString(g_errors.shape, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(g_errors.io, e.what());
    } catch (const UnsupportedError& e) {
      PyErr_SetString(g_errors.unsupported, e.what());
    } catch (const DeviceError& e) {
      PyErr_SetString(g_errors.device, e.what());
    } catch (const ArgumentError& e) {
      PyErr_SetString(g_errors.argument, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_errors.base, e.what());
    }
  });
}

// ---- arrays ------------------------------------------------------------------------------------------------------
std::string type_name(py::handle h) { return py::str(py::type::handle_of(h).attr("__name__")); }

DType dtype_of_array(const py::array& a, const std::string& name) {
  const py::dtype dt = a.dtype();
  const std::string dname = py::str(dt.attr("name"));
  const std::string order = py::str(dt.attr("byteorder"));
  MAXTEXT_CHECK(order != ">", ArgumentError, "[arrays] ", name, ": big-endian dtype ", dname,
                " (convert with arr.astype(arr.dtype.newbyteorder('<')))");
  if (dname == "bfloat16") return DType::bf16;  // ml_dtypes / jax
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 8) return DType::f64;
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'u' && size == 2) return DType::bf16;  // bfloat16 bits viewed as uint16
  if (kind == 'i' && size == 8) return DType::i64;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'i' && size == 2) return DType::i16;
  if (kind == 'i' && size == 1) return DType::i8;
  if (kind == 'u' && size == 1) return DType::u8;
  if (kind == 'b') return DType::boolean;
  MAXTEXT_THROW(ArgumentError, "[arrays] ", name, ": dtype ", dname,
                " is not supported (float64/32/16, bfloat16 or its uint16 bits, int64/32/16/8, uint8, bool)");
}

/// A NumPy array (or anything np.asarray accepts) as an AnyTensor that shares its memory; the array is kept alive
/// by the tensor (released with the GIL held).
AnyTensor to_any(py::handle obj, const std::string& name) {
  py::array a = py::array::ensure(obj);
  MAXTEXT_CHECK(a, ArgumentError, "[arrays] ", name, ": expected an array, found ", type_name(obj));
  const DType dt = dtype_of_array(a, name);
  const auto item = static_cast<std::int64_t>(a.itemsize());
  bool plain = true;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) plain = plain && a.strides(i) >= 0 && a.strides(i) % item == 0;
  if (!plain) a = py::module_::import("numpy").attr("ascontiguousarray")(a);
  AnyTensor t;
  t.dtype = dt;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    t.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
    t.strides.push_back(static_cast<std::int64_t>(a.strides(i)) / item);
  }
  t.data = static_cast<const std::byte*>(a.data());
  auto* keep = new py::object(a);
  t.holder = std::shared_ptr<const void>(keep, [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  t.source = name;
  return t;
}

py::dtype bf16_dtype() {
  try {
    return py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16"));
  } catch (const py::error_already_set&) {
    return py::dtype("uint16");  // the bits, as the docs say
  }
}

/// A host tensor as a NumPy array sharing its memory (Q8_0 and the other ggml blocks are dequantised to float32).
py::array to_numpy(const AnyTensor& t_in, bool writeable = true) {
  AnyTensor t = t_in;
  if (t.dtype == DType::q8_0 || t.dtype == DType::ggml) {
    std::int64_t rows = t.numel() / std::max<std::int64_t>(1, t.shape.back());
    Tensor<float, 2> f = t.to<float, 2>({rows, t.shape.back()});
    t = AnyTensor::from(f).reshaped(t_in.shape);
  }
  py::dtype dt;
  switch (t.dtype) {
    case DType::f64: dt = py::dtype::of<double>(); break;
    case DType::f32: dt = py::dtype::of<float>(); break;
    case DType::f16: dt = py::dtype("float16"); break;
    case DType::bf16: dt = bf16_dtype(); break;
    case DType::i64: dt = py::dtype::of<std::int64_t>(); break;
    case DType::i32: dt = py::dtype::of<std::int32_t>(); break;
    case DType::i16: dt = py::dtype::of<std::int16_t>(); break;
    case DType::i8: dt = py::dtype::of<std::int8_t>(); break;
    case DType::u8: dt = py::dtype::of<std::uint8_t>(); break;
    case DType::boolean: dt = py::dtype("bool"); break;
    case DType::f8_e4m3: {
      Tensor<float, 1> f = t.to<float, 1>({t.numel()});
      return to_numpy(AnyTensor::from(f).reshaped(t.shape), writeable);
    }
    case DType::q8_0: case DType::ggml: break;
  }
  const auto item = static_cast<std::int64_t>(dtype_size(t.dtype));
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end()), strides;
  for (auto s : t.strides) strides.push_back(static_cast<py::ssize_t>(s * item));
  auto* keep = new std::shared_ptr<const void>(t.holder);
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); });
  py::array a(dt, shape, strides, t.data, owner);
  if (!writeable) a.attr("flags").attr("writeable") = false;
  return a;
}

py::array to_numpy(const Tensor<float, 3>& t) { return to_numpy(AnyTensor::from(t)); }

bool is_mapping(py::handle h) { return py::isinstance<py::dict>(h) || (py::hasattr(h, "items") && py::hasattr(h, "keys")); }
bool is_path(py::handle h) { return py::isinstance<py::str>(h) || py::hasattr(h, "__fspath__"); }
std::string path_str(py::handle h) { return py::str(py::module_::import("os").attr("fspath")(h)); }

/// Nested mappings of arrays -> names joined by '.'.
void flatten(py::handle obj, const std::string& prefix, io::TensorMap& out, const char* what) {
  if (is_mapping(obj)) {
    for (auto item : obj.attr("items")()) {
      const auto kv = item.cast<py::tuple>();
      const std::string key = py::str(kv[0]);
      flatten(kv[1], prefix.empty() ? key : prefix + "." + key, out, what);
    }
    return;
  }
  MAXTEXT_CHECK(!prefix.empty(), ArgumentError, "[", what, "] expected a dict of arrays, found ", type_name(obj));
  out.add(prefix, to_any(obj, prefix));
}

/// Integer rows [B, T] from [T] or [B, T] integer arrays / lists.
/// hidden= / mtp_hidden=: 'raw' or 'normed' (models::MtpHidden), refused by name otherwise.
/// A speculative generation's statistics as Model.generate and Session.generate return them (result["speculative"]).
py::dict speculative_stats(const models::SpeculativeStats& st) {
  py::dict d;
  d["verify_passes"] = st.verify_passes;
  d["drafted"] = st.drafted;
  d["accepted"] = st.accepted;
  d["acceptance_rate"] = st.acceptance_rate();
  return d;
}

models::MtpHidden mtp_hidden_arg(const std::string& v, const char* where) {
  MAXTEXT_CHECK(v == "raw" || v == "normed", ArgumentError, "[", where, "] expected 'raw' (MaxText's) or 'normed' "
                "(through the final norm, as llama.cpp's MTP graphs) for the MTP layers' hidden state, found '", v, "'");
  return v == "normed" ? models::MtpHidden::normed : models::MtpHidden::raw;
}

Tensor<std::int32_t, 2> int_rows(py::handle obj, const char* what) {
  py::array a = py::array::ensure(obj);
  MAXTEXT_CHECK(a, ArgumentError, "[", what, "] expected an integer array [T] or [B, T], found ", type_name(obj));
  const char kind = a.dtype().kind();
  MAXTEXT_CHECK(kind == 'i' || kind == 'u', ArgumentError, "[", what, "] expected integers, found dtype ",
                std::string(py::str(a.dtype().attr("name"))));
  MAXTEXT_CHECK(a.ndim() == 1 || a.ndim() == 2, ShapeError, "[", what, "] expected [T] or [B, T], found ", a.ndim(),
                " dimensions");
  const AnyTensor t = to_any(a, what);
  const std::int64_t B = t.rank() == 2 ? t.shape[0] : 1, T = t.shape.back();
  MAXTEXT_CHECK(B > 0 && T > 0, ShapeError, "[", what, "] empty: shape ", t.shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.element(i);
    MAXTEXT_CHECK(v >= -2147483648.0 && v <= 2147483647.0, ArgumentError, "[", what, "] value ", v,
                  " does not fit in int32");
  }
  return t.to<std::int32_t, 2>({B, T});
}

std::optional<Tensor<std::int32_t, 2>> opt_rows(py::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  return int_rows(obj, what);
}

/// MRoPE's 3-D positions (ForwardOptions::mrope_positions): integers [3, B, T], or [3, T] for one row; None: none.
std::optional<Tensor<std::int32_t, 3>> opt_positions3(py::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  const AnyTensor t = to_any(obj, what);
  MAXTEXT_CHECK(!dtype_is_float(t.dtype), ArgumentError, "[", what, "] expected integers, found dtype ", dtype_name(t.dtype));
  MAXTEXT_CHECK((t.rank() == 2 || t.rank() == 3) && t.shape[0] == 3, ShapeError, "[", what, "] expected [3, B, T] or "
                "[3, T] (temporal, height, width), found shape ", t.shape);
  const std::int64_t B = t.rank() == 3 ? t.shape[1] : 1, T = t.shape.back();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.element(i);
    MAXTEXT_CHECK(v >= 0.0 && v <= 2147483647.0, ArgumentError, "[", what, "] value ", v, " is not a position");
  }
  return t.to<std::int32_t, 3>({3, B, T});
}

/// Media embeddings (a picture tower's soft tokens): float rows [n, emb_dim], or [pictures, tokens, emb_dim]
/// flattened to rows; None: no media.
std::optional<Tensor<float, 2>> opt_float_rows(py::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  const AnyTensor t = to_any(obj, what);
  MAXTEXT_CHECK(dtype_is_float(t.dtype), ArgumentError, "[", what, "] expected a float array, found dtype ",
                dtype_name(t.dtype));
  MAXTEXT_CHECK(t.rank() == 2 || t.rank() == 3, ShapeError, "[", what, "] expected [n, emb_dim] or [pictures, tokens, "
                "emb_dim], found shape ", t.shape);
  const std::int64_t D = t.shape.back();
  return t.to<float, 2>({t.numel() / std::max<std::int64_t>(D, 1), D});
}

// ---- config ------------------------------------------------------------------------------------------------------
std::vector<std::string> g_config_dirs;

std::string override_value(py::handle v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::string s = "[";
    bool first = true;
    for (auto e : v) {
      s += (first ? "" : ",") + std::string(py::str(e));
      first = false;
    }
    return s + "]";
  }
  if (v.is_none()) return "None";
  return py::str(v);
}

std::vector<std::string> overrides_arg(py::handle o) {
  std::vector<std::string> out;
  if (o.is_none()) return out;
  if (is_mapping(o)) {
    for (auto item : o.attr("items")()) {
      const auto kv = item.cast<py::tuple>();
      out.push_back(std::string(py::str(kv[0])) + "=" + override_value(kv[1]));
    }
    return out;
  }
  MAXTEXT_CHECK(!py::isinstance<py::str>(o), ArgumentError,
                "[config] overrides: expected a dict or a list of 'key=value' strings, found a string");
  for (auto e : o) out.push_back(py::str(e));
  return out;
}

/// The overrides on a config.json's or a weights file's config, checked as io::load_config checks a YAML config
/// (core/config_keys.hpp: every key read, refused by name, or inert).
Config finish_config(Config c, const std::vector<std::string>& ov) {
  for (const auto& o : ov) io::apply_override(c, o);
  c.derive();
  c.validate();
  check_config_keys(c);
  return c;
}

Config config_from_path(const std::string& path, const std::vector<std::string>& ov) {
  if (io::ends_with(path, ".json")) return finish_config(io::config_from_hf_file(path), ov);
  if (io::ends_with(path, ".yml") || io::ends_with(path, ".yaml") || path.empty()) {
    std::vector<std::string> dirs = g_config_dirs;  // then the source tree's configs (config_dir.cpp)
    dirs.emplace_back(maxtext_python_config_dir());
    return io::load_config(path, ov, io::config_search_dirs(dirs));
  }
  std::optional<Config> c = io::read_weights_config(path);
  MAXTEXT_CHECK(c.has_value(), ArgumentError, "[config] ", path,
                ": MaxText safetensors carry no model configuration; give a MaxText .yml or a config.json");
  return finish_config(*c, ov);
}

Config config_arg(py::handle c, py::handle weights) {
  if (py::isinstance<Config>(c)) return c.cast<Config>();
  if (!c.is_none()) {
    MAXTEXT_CHECK(is_path(c), ArgumentError, "[Model] config: expected a Config or a path, found ", type_name(c));
    return config_from_path(path_str(c), {});
  }
  MAXTEXT_CHECK(is_path(weights), ArgumentError,
                "[Model] no config: give config= (a Config, a MaxText .yml or a config.json) or weights= a GGUF, "
                "llama2.c or Hugging Face file that carries one");
  return config_from_path(path_str(weights), {});
}

// ---- weights -----------------------------------------------------------------------------------------------------
struct Weights {
  io::TensorMap tensors;
  bool hf = false;
  std::string file_weight_type;  ///< a path's: io::LoadedWeights::file_weight_type
};

/// Parameters from a dict: MaxText's tree ({'params': {'decoder': {...}}}, scanned or unscanned, or flat names with
/// '.', '/' or '-'), or Hugging Face names (a PyTorch state_dict converted to NumPy).
Weights weights_from_dict(py::handle d, const Config& cfg) {
  io::TensorMap raw;
  flatten(d, "", raw, "weights");
  Weights w;
  if (io::has_hf_names(raw)) {
    w.hf = true;
    if (cfg.is("deepseek") || cfg.is("mixtral")) {
      w.tensors = io::canonicalize_hf_deepseek(raw, cfg);
    } else if (cfg.is("gpt_oss")) {  // GptOssForCausalLM names (MXFP4 experts dequantised)
      w.tensors = io::import_hf_gpt_oss(raw, cfg, "weights dict");
    } else if (cfg.is("olmo3")) {  // Olmo3ForCausalLM names
      w.tensors = io::import_olmo3_names(raw, cfg, true, !raw.has("lm_head.weight"), "weights dict");
    } else {
      w.tensors = io::import_hf_names(raw, cfg, !raw.has("lm_head.weight"), "weights dict");
    }
    return w;
  }
  w.tensors = io::canonicalize_maxtext(raw, cfg);
  return w;
}

Weights weights_arg(py::handle obj, const Config& cfg, bool keep_blocks = false, bool populate = true) {
  if (is_path(obj)) {
    const std::string path = path_str(obj);
    py::gil_scoped_release nogil;
    io::LoadedWeights lw = io::load_weights(path, cfg, keep_blocks, populate);
    return {std::move(lw.tensors), lw.naming == io::WeightNaming::hf, lw.file_weight_type};
  }
  MAXTEXT_CHECK(is_mapping(obj), ArgumentError, "[weights] expected a path or a dict of arrays, found ", type_name(obj));
  return weights_from_dict(obj, cfg);
}

models::NameScheme scheme_arg(const std::string& s) {
  if (s == "maxtext") return models::NameScheme::maxtext;
  if (s == "hf") return models::NameScheme::hf;
  MAXTEXT_THROW(ArgumentError, "[Model] names: expected 'maxtext' or 'hf', found '", s, "'");
}

// ---- capture -----------------------------------------------------------------------------------------------------
/// capture=None: nothing; True or "all": everything a layer offers; a str or an iterable of names.
std::optional<layers::Capture> capture_arg(py::handle c) {
  if (c.is_none()) return std::nullopt;
  layers::Capture cap;
  if (py::isinstance<py::bool_>(c)) {
    if (!c.cast<bool>()) return std::nullopt;
    cap.request_all();
    return cap;
  }
  if (py::isinstance<py::str>(c)) {
    const std::string s = py::str(c);
    if (s == "all") {
      cap.request_all();
    } else {
      cap.request(s);
    }
    return cap;
  }
  for (auto e : c) cap.request(py::str(e));
  return cap;
}

py::dict captured(const layers::Capture& cap) {
  py::dict d;
  for (const auto& n : cap.order()) d[py::str(n)] = to_numpy(cap.at(n));
  return d;
}

// ---- model -------------------------------------------------------------------------------------------------------
struct PyModel {
  std::shared_ptr<comm::Communicator> comm;  ///< a split model's ranks (Model(comm=...)): outlives b
  std::unique_ptr<ModelBinding> b;
  bool names_fixed = false;

  void load(py::handle weights, bool allow_unused) { load_tensors(weights_arg(weights, b->config()), allow_unused); }
  void load_tensors(Weights w, bool allow_unused) {
    {
      py::gil_scoped_release nogil;
      if (!names_fixed) b->set_name_scheme(w.hf ? models::NameScheme::hf : models::NameScheme::maxtext);
      b->load(w.tensors, allow_unused);
    }
    w.tensors = io::TensorMap{};  // (with the GIL: it may hold NumPy arrays) the importer's temporaries go now,
    trim_heap();                  // and the heap they took back to the system (core/mapped_pages.hpp)
  }
};

/// A conversation with its own cache (Model.new_session): models::AnySession. The Model is kept alive by the binding.
struct PySession {
  std::unique_ptr<models::AnySession> s;
};

class PyTokenizer {
 public:
  explicit PyTokenizer(std::unique_ptr<tokenizer::Tokenizer> t) : t_(std::move(t)) {}
  const tokenizer::Tokenizer& get() const { return *t_; }

 private:
  std::unique_ptr<tokenizer::Tokenizer> t_;
};

py::str text(const std::string& s) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), "replace"));
}

/// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
std::size_t utf8_complete(const std::string& s) {
  std::size_t i = s.size(), back = 0;
  while (i > 0 && back < 4) {
    const auto c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0u) != 0x80u) {  // a lead byte (or ASCII)
      const std::size_t need = c < 0x80u ? 1 : (c >> 5) == 6u ? 2 : (c >> 4) == 14u ? 3 : (c >> 3) == 30u ? 4 : 1;
      return back + 1 >= need ? s.size() : i - 1;
    }
    --i;
    ++back;
  }
  return s.size();
}

/// Comparison rows as data.
py::list rows_data(const testing::CheckResult& r) {
  py::list rows;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    py::dict d;
    d["reference"] = row.theirs;
    d["ours"] = row.ours;
    d["shape"] = row.shape;
    d["pass"] = row.pass;
    d["first_divergence"] = static_cast<std::int64_t>(i) == r.first_failure;
    d["comparable"] = row.comparable;
    d["note"] = row.note;
    if (row.comparable) {
      d["max_abs"] = row.report.max_abs;
      d["max_rel"] = row.report.max_rel;
      d["outside"] = row.report.outside;
      d["count"] = row.report.count;
      if (row.report.worst >= 0) {
        d["worst_index"] = row.report.unravel(row.report.worst);
        d["worst_ours"] = row.report.worst_actual;
        d["worst_reference"] = row.report.worst_expected;
      }
    }
    if (row.logits) {
      const auto& L = *row.logits;
      d["kl"] = L.kl;
      d["kl_max"] = L.kl_max;
      d["kl_mean"] = L.kl_mean;
      d["top_k"] = L.k;
      d["top_k_overlap"] = L.overlap;
      d["top_k_overlap_mean"] = L.overlap_mean;
      d["top_k_overlap_min"] = L.overlap_min;
      d["top1_agree"] = L.top1_agree;
      d["positions"] = static_cast<std::int64_t>(L.kl.size());
    }
    rows.append(d);
  }
  return rows;
}

}  // namespace
}  // namespace maxtext::python

using namespace maxtext;
using namespace maxtext::python;

#if defined(MAXTEXT_PYTHON_VISION)
namespace maxtext::python {
void register_vision(py::module_& m);  // vision.cpp: images and Gemma 3's vision tower
}
#endif
#if defined(MAXTEXT_PYTHON_AUDIO)
namespace maxtext::python {
void register_audio(py::module_& m);  // audio.cpp: sound files, log-mel features, Qwen3-Omni's audio encoder
}
#endif

PYBIND11_MODULE(_maxtext_cpp, m) {
  m.doc() = "maxtext-cpp: MaxText's transformer layers in C++ (see docs/python.md)";
  register_errors(m);
#if defined(MAXTEXT_PYTHON_VISION)
  maxtext::python::register_vision(m);
#endif
#if defined(MAXTEXT_PYTHON_AUDIO)
  maxtext::python::register_audio(m);
#endif

  m.def("_set_config_dirs", [](std::vector<std::string> dirs) { g_config_dirs = std::move(dirs); },
        "Directories searched for configs/models/<model_name>.yml (after $MAXTEXT_CONFIG_DIR).");

  // ---- Config ----
  py::class_<Config> cfg(m, "Config", R"(A MaxText configuration.

Config(path=None, overrides=None): a MaxText .yml (base.yml defaults <- the file <- models/<model_name>.yml <-
overrides, as MaxText's pyconfig), a Hugging Face config.json, or a GGUF / llama2.c / Hugging Face weights file that
carries its configuration. overrides: a dict {key: value} or a list of "key=value" strings.
Every MaxText key this library models is an attribute; derived sizes (emb_dim, num_query_heads, ...) are read-only.)");
  cfg.def(py::init([](py::object path, py::object overrides) {
            const auto ov = overrides_arg(overrides);
            return config_from_path(path.is_none() ? std::string() : path_str(path), ov);
          }),
          py::arg("path") = py::none(), py::arg("overrides") = py::none());
#define MAXTEXT_PY_FIELD(type, k, dflt)                           \
  cfg.def_property(                                               \
      #k, [](const Config& c) { return c.k; },                    \
      [](Config& c, const type& v) {                              \
        c.k = v;                                                  \
        c.origin[#k] = "python";                                  \
        c.derive();                                               \
      });
  MAXTEXT_CONFIG_FIELDS(MAXTEXT_PY_FIELD)
#undef MAXTEXT_PY_FIELD
  cfg.def_readonly("emb_dim", &Config::emb_dim)
      .def_readonly("num_query_heads", &Config::num_query_heads)
      .def_readonly("num_kv_heads", &Config::num_kv_heads)
      .def_readonly("mlp_dim", &Config::mlp_dim)
      .def_readonly("moe_mlp_dim", &Config::moe_mlp_dim)
      .def_readonly("num_decoder_layers", &Config::num_decoder_layers)
      .def_readonly("extra", &Config::extra)
      .def(
          "set",
          [](Config& c, const std::string& key, py::handle value) {
            io::apply_override(c, key + "=" + override_value(value));
            c.derive();
          },
          py::arg("key"), py::arg("value"), "Set a key from a Python value (as a key=value override would).")
      .def("validate", [](const Config& c) { c.validate(); })
      .def("__getitem__",
           [](const Config& c, const std::string& key) -> std::string {
             if (Config::known(key)) return c.get(key);
             auto it = c.extra.find(key);
             if (it == c.extra.end()) throw py::key_error(key);
             return it->second;
           })
      .def("copy", [](const Config& c) { return Config(c); })
      .def("__repr__", [](const Config& c) {
        return str("Config(decoder_block='", c.decoder_block, "', dtype='", c.dtype, "', emb_dim=", c.emb_dim,
                   ", layers=", c.num_decoder_layers, ", heads=", c.num_query_heads, "/", c.num_kv_heads,
                   ", vocab_size=", c.vocab_size, ")");
      });

  // ---- Cache ----
  py::class_<CacheHandle, std::shared_ptr<CacheHandle>>(m, "Cache", "A KV cache made by Model.new_cache().")
      .def_property_readonly("batch", &CacheHandle::batch)
      .def_property_readonly("capacity", &CacheHandle::capacity)
      .def_property_readonly("lengths", &CacheHandle::lengths)
      .def_property_readonly("nbytes", &CacheHandle::bytes)
      .def("reset", &CacheHandle::reset, py::arg("row") = -1, "Forget every row (row=-1) or one row.")
      .def("set_length", &CacheHandle::set_length, py::arg("row"), py::arg("n"),
           "Keep the first n tokens of a row (a paged cache gives back the pages past them).")
      .def(
          "share_prefix",
          [](CacheHandle& c, const CacheHandle& from, std::int64_t src, std::int64_t dst, std::int64_t n) {
            c.share_prefix(from, src, dst, n);
          },
          py::arg("source"), py::arg("src_row"), py::arg("dst_row"), py::arg("n"),
          "Row dst_row becomes the first n tokens of row src_row of `source` (this cache or another of the same "
          "model): pages shared in a paged cache (copied when written), rows copied otherwise.")
      .def("pages_of", &CacheHandle::pages_of, py::arg("row"), "Pages a row of a paged cache maps (0: not paged).")
      .def_property_readonly(
          "paging",
          [](const CacheHandle& c) {
            const models::PagingStats s = c.paging_stats();
            py::dict d;
            d["tokens_per_page"] = s.tokens_per_page;
            d["pages"] = s.pages;
            d["pages_used"] = s.pages_used;
            d["pages_shared"] = s.pages_shared;
            d["page_bytes"] = s.page_bytes;
            return d;
          },
          "A paged cache's pool: tokens_per_page, pages, pages_used, pages_shared, page_bytes (zeros: not paged).");

  // ---- Tokenizer ----
  py::class_<PyTokenizer>(m, "Tokenizer", R"(Tokenizer(path=None, weights=None, vocab_size=0): a GGUF vocabulary, a
llama2.c tokenizer.bin or a SentencePiece .model; without path, the one the weights carry or have beside them.)")
      .def(py::init([](py::object path, py::object weights, std::int64_t vocab) {
             const std::string p = path.is_none() ? std::string() : path_str(path);
             const std::string w = weights.is_none() ? std::string() : path_str(weights);
             return PyTokenizer(tokenizer::load_tokenizer(w, p, vocab));
           }),
           py::arg("path") = py::none(), py::arg("weights") = py::none(), py::arg("vocab_size") = 0)
      .def(
          "encode",
          [](const PyTokenizer& t, const std::string& s, std::optional<bool> add_bos) { return t.get().encode(s, add_bos); },
          py::arg("text"), py::arg("add_bos") = py::none())
      .def("decode", [](const PyTokenizer& t, const std::vector<std::int32_t>& ids) { return text(t.get().decode(ids)); })
      .def("piece", [](const PyTokenizer& t, std::int32_t prev, std::int32_t id) { return py::bytes(t.get().piece(prev, id)); },
           py::arg("prev"), py::arg("id"), "The bytes of `id` following `prev` (-1 at the start).")
      .def(
          "compressed_token_table",
          [](const PyTokenizer& t) {
            const auto* hf = dynamic_cast<const tokenizer::HfTokenizer*>(&t.get());
            MAXTEXT_CHECK(hf != nullptr, ArgumentError, "[Tokenizer] compressed_token_table: MaxText's "
                          "CompressedTokenizer is built from a Hugging Face tokenizer.json, not this tokenizer");
            tokenizer::CompressedTokenTable table;
            {
              py::gil_scoped_release nogil;
              table = tokenizer::compressed_token_table(*hf);
            }
            py::array_t<std::int32_t> lookup(static_cast<py::ssize_t>(table.lookup.size()), table.lookup.data());
            return py::make_tuple(lookup, table.size);
          },
          R"((lookup, size): MaxText's Engram CompressedTokenizer table (engram.py) over this Hugging Face tokenizer's
vocabulary: lookup[id] is the canonical id of token id (NFKC, NFD, accents stripped, lower case, whitespace folded),
numbered in first-seen order; size is the number of canonical ids.)")
      .def_property_readonly("pad",
                             [](const PyTokenizer& t) {
                               const auto* hf = dynamic_cast<const tokenizer::HfTokenizer*>(&t.get());
                               return hf != nullptr ? hf->pad() : -1;
                             },
                             "The pad token id of a Hugging Face tokenizer (tokenizer_config.json pad_token), or -1.")
      .def_property_readonly("bos", [](const PyTokenizer& t) { return t.get().bos(); })
      .def_property_readonly("eos", [](const PyTokenizer& t) { return t.get().eos(); })
      .def_property_readonly("vocab_size", [](const PyTokenizer& t) { return t.get().vocab_size(); });

  // ---- ranks ----
  py::class_<comm::Communicator, std::shared_ptr<comm::Communicator>>(m, "Communicator",
                                                                       R"(The ranks a split model runs on (mpi_world()).)")
      .def_property_readonly("rank", &comm::Communicator::rank)
      .def_property_readonly("size", &comm::Communicator::size)
      .def("__repr__", [](const comm::Communicator& c) {
        return "maxtext_cpp.Communicator(rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) + ")";
      });
  m.def("mpi_world", &python_mpi_world, R"(The processes mpirun started (MPI_COMM_WORLD), for Model(comm=...): every
rank runs the same script and makes the same calls in the same order. MPI is initialised on the first call (or, when
mpi4py or the application initialised it, used as it is) and finalised when the process exits. Without mpirun: one rank.)");

  // ---- Model ----
  py::class_<PySession>(m, "Session", "A conversation with its own KV cache: Model.new_session(capacity=0).")
      .def_property_readonly("tokens", [](const PySession& ps) { return ps.s->tokens(); },
                             "The conversation's token ids (the prompt turns and the generated answers).")
      .def_property_readonly("capacity", [](const PySession& ps) { return ps.s->capacity(); })
      .def("__len__", [](const PySession& ps) { return ps.s->length(); })
      .def("rewind", [](PySession& ps, std::int64_t n) { ps.s->rewind(n); }, py::arg("n"),
           "Keep only the first n tokens.")
      .def(
          "sync",
          [](PySession& ps, const std::vector<std::int32_t>& ids) {
            py::gil_scoped_release nogil;
            return ps.s->sync(ids);
          },
          py::arg("ids"),
          "Make the conversation exactly `ids` (rewinds to the common prefix); returns that prefix's length.")
      .def(
          "generate",
          [](PySession& ps, py::object new_tokens, std::int64_t max_new_tokens, float temperature, std::int64_t top_k,
             float top_p, std::uint64_t seed, py::object stop_tokens, py::object tok_obj, py::object spec,
             std::int64_t draft_max, const std::string& mtp_hidden) {
            const PyTokenizer* tk = tok_obj.is_none() ? nullptr : &tok_obj.cast<const PyTokenizer&>();
            std::vector<std::int32_t> ids;
            if (py::isinstance<py::str>(new_tokens)) {
              MAXTEXT_CHECK(tk != nullptr, ArgumentError, "[Session.generate] text needs tokenizer=");
              ids = tk->get().encode(new_tokens.cast<std::string>(), ps.s->length() == 0);
            } else if (!new_tokens.is_none()) {
              ids = new_tokens.cast<std::vector<std::int32_t>>();
            }
            models::GenerateOptions go;
            go.max_new_tokens = max_new_tokens;
            go.sampling.temperature = temperature;
            go.sampling.top_k = top_k;
            go.sampling.top_p = top_p;
            go.sampling.seed = seed;
            if (!stop_tokens.is_none()) {
              go.stop_tokens = stop_tokens.cast<std::vector<std::int32_t>>();
            } else if (tk != nullptr && tk->get().eos() >= 0) {
              go.stop_tokens.push_back(tk->get().eos());
            }
            if (tk != nullptr) go.decode = models::decoder_for(tk->get());
            // spec='lookup' (prompt lookup over the conversation) or 'mtp' (the model's MTP layers, their caches kept
            // with the session's): speculative decoding of this turn.
            std::string kind;
            if (!spec.is_none()) {
              MAXTEXT_CHECK(py::isinstance<py::str>(spec), ArgumentError, "[Session.generate] spec=: expected 'lookup' "
                            "or 'mtp', found ", py::str(py::type::of(spec)).cast<std::string>());
              kind = spec.cast<std::string>();
              MAXTEXT_CHECK(kind == "lookup" || kind == "mtp", ArgumentError, "[Session.generate] spec='", kind,
                            "': expected 'lookup' or 'mtp'");
            }
            MAXTEXT_CHECK(mtp_hidden == "raw" || kind == "mtp", ArgumentError, "[Session.generate] mtp_hidden='",
                          mtp_hidden, "' needs spec='mtp'");
            models::SpeculativeOptions so;
            so.draft_max = draft_max;
            so.mtp_hidden = mtp_hidden_arg(mtp_hidden, "Session.generate");
            models::SpeculativeStats st;
            models::GenerateResult res;
            {
              py::gil_scoped_release nogil;
              if (kind == "mtp") {
                res = ps.s->generate_mtp_speculative(ids, go, so, &st);
              } else if (kind == "lookup") {
                models::PromptLookupDrafter lookup;
                res = ps.s->generate_speculative(
                    ids, go, [&](const std::vector<std::int32_t>& c, std::int64_t k) { return lookup.propose(c, k); },
                    so, &st);
              } else {
                res = ps.s->generate(ids, go);
              }
            }
            py::dict d;
            if (!kind.empty()) d["speculative"] = speculative_stats(st);
            d["tokens"] = res.tokens.at(0);
            if (tk != nullptr) d["text"] = text(res.text.at(0));
            d["prompt_tokens"] = res.prompt_tokens;
            d["finish"] = std::string(models::to_string(res.finish.at(0)));
            d["prefill_seconds"] = res.prefill_seconds;
            d["decode_seconds"] = res.decode_seconds;
            return d;
          },
          py::arg("new_tokens") = py::none(), py::arg("max_new_tokens") = 32, py::kw_only(),
          py::arg("temperature") = 0.0f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("seed") = 0,
          py::arg("stop_tokens") = py::none(), py::arg("tokenizer") = py::none(), py::arg("spec") = py::none(),
          py::arg("draft_max") = 4, py::arg("mtp_hidden") = "raw",
          R"(Append new_tokens (ids, or text with tokenizer=: BOS only at the conversation's start) and decode; the
answer joins the conversation. Returns {'tokens', 'text' (with a tokenizer), 'prompt_tokens' (the tokens this call
prefilled), 'finish', timings}. spec='lookup' (prompt lookup over the conversation) or spec='mtp' (the model's MTP
layers, whose caches then follow the conversation; mtp_hidden='normed' as llama.cpp's graphs): speculative decoding of
this turn, draft_max drafts per pass, the tokens plain decoding gives when greedy; the result adds 'speculative'
(verify_passes, drafted and accepted per draft position, acceptance_rate).)")
      .def(
          "save",
          [](PySession& ps, const std::string& path, const std::string& app) {
            py::gil_scoped_release nogil;
            ps.s->save(path, app);
          },
          py::arg("path"), py::arg("app") = "",
          R"(Write the conversation, its KV cache's rows and `app` (any text of the caller's) to the file `path`
(docs/generation.md, "Session files").)")
      .def(
          "load",
          [](PySession& ps, const std::string& path, bool verify) {
            std::string app;
            {
              py::gil_scoped_release nogil;
              app = ps.s->load(path, verify);
            }
            return text(app);
          },
          py::arg("path"), py::kw_only(), py::arg("verify") = true,
          R"(Replace the conversation with the one saved in `path`; returns its `app` text. A damaged file, another
model, other weights (verify=True: a 4-token probe computed again) or a conversation longer than the capacity is
refused by name, and the session is left as it was.)");

  py::class_<PyModel>(m, "Model", R"(A model of any decoder block the registry knows, on the policy the config's dtype
and `weight_type` name.

Model(config=None, weights=None, *, weight_type="", threads=0, int8_activations=False, names=None, seed=None,
allow_unused=False, kv_type="", comm=None). config: a Config or a path (None: taken from the weights file). weights: a path (MaxText or
Hugging Face safetensors, GGUF, llama2.c) or a dict of NumPy arrays (MaxText's parameter tree, scanned or not, or
Hugging Face names). weight_type "" reads a GGUF file's matrices where they lie, whatever their types (F32, F16, BF16,
Q8_0, block-quantised Q4_K_M, Q6_K, Q4_0, ...: 'ggml'), keeps another path's matrices in the file's type when they are
all F16, BF16 or Q8_0 (the same values in less memory; 'float32' widens them), else uses the config's dtype. Without weights, seed=
initialises with MaxText's initialisers; otherwise call load()/init().
names: 'maxtext' or 'hf' capture names (default: as the weights are named). kv_type: the KV cache's element type,
"" (the activations', as MaxText) or 'float16' (keys and values rounded to fp16 as they are written, llama.cpp's
default cache type: half the cache's memory and reads), for a GGUF file's matrices ('ggml') only; anything else is
refused by name. comm: the ranks (mpi_world()) over which the config's mesh splits the model (ici_tensor_parallelism:
heads and MLP columns; ici_expert_parallelism: experts; ici_pipeline_parallelism: layers, alone or with either; docs/distributed.md): each rank keeps its slices of the same
weights (or of the model initialised from seed, alike on every rank), every rank calls the same methods in the same
order, and each gets the same logits; a mesh that does not match comm's ranks is refused by name, as is a mesh of
several ranks without comm.)")
      .def(py::init([](py::object config, py::object weights, const std::string& weight_type, int threads,
                       bool int8_activations, py::object names, py::object seed, bool allow_unused,
                       const std::string& kv_type, py::object comm_obj) {
             const Config c = config_arg(config, weights);
             std::shared_ptr<comm::Communicator> world;
             if (!comm_obj.is_none()) world = comm_obj.cast<std::shared_ptr<comm::Communicator>>();
             comm::Mesh mesh;
             try {  // a mesh of several ranks (ici_tensor_parallelism, ...) needs comm= with as many ranks
               mesh = models::split_mesh(c, world.get());
             } catch (const Error& e) {
               if (world) throw;
               throw UnsupportedError(std::string("[Model] a model split over ranks runs under mpirun with "
                                                  "comm=maxtext_cpp.mpi_world() (or the maxtext program; "
                                                  "docs/distributed.md): ") +
                                      e.what());
             }
             ModelOptions o;
             o.weight_type = weight_type;
             o.threads = threads;
             o.int8_activations = int8_activations;
             o.kv_type = kv_type;
             if (mesh.size() > 1) {
               // This rank's share (heads and MLP columns, or experts) with its slices of the same files.
               std::optional<io::TensorMap> full;
               auto scheme = names.is_none() ? models::NameScheme::maxtext : scheme_arg(py::str(names));
               if (!weights.is_none()) {
                 // Pipeline stages keep their layers' matrices whole: a GGUF file's are read where they lie.
                 Weights w = weights_arg(weights, c, models::split_keeps_matrices_whole(mesh) && weight_type.empty() &&
                                                         is_path(weights) && models::read_matrices_in_place(c, weight_type),
                                         /*populate=*/false);
                 if (weight_type.empty() && is_path(weights)) o.weight_type = models::keep_file_weight_type(c, w.file_weight_type);
                 if (names.is_none() && w.hf) scheme = models::NameScheme::hf;
                 full = std::move(w.tensors);
               }
               models::check_int8_activations(int8_activations, o.weight_type, full ? &*full : nullptr, "",
                                              "[Model] int8_activations", "weight_type='q8_0'");
               const std::uint64_t s = seed.is_none() ? static_cast<std::uint64_t>(c.init_weights_seed)
                                                      : seed.cast<std::uint64_t>();
               auto pm = std::make_unique<PyModel>();
               pm->names_fixed = true;
               pm->comm = world;
               {
                 py::gil_scoped_release nogil;
                 pm->b = models::make_split_any_model(c, o, *world, std::move(full), scheme, s, MAXTEXT_BLOCKS_BUILT);
               }
               return pm;
             }
             // A path's matrices are kept as they are (a GGUF file's in place) unless weight_type says otherwise.
             std::optional<Weights> file;
             if (weight_type.empty() && is_path(weights)) {
               // A GGUF file's matrices (blocks, F32, F16, ...) stay where they lie where this module compiled the
               // runtime-typed model.
               file = weights_arg(weights, c, models::read_matrices_in_place(c, weight_type));
               o.weight_type = models::keep_file_weight_type(c, file->file_weight_type);
             }
             models::check_int8_activations(int8_activations, o.weight_type, file ? &file->tensors : nullptr,
                                            file ? py::str(weights).cast<std::string>() : std::string(),
                                            "[Model] int8_activations", "weight_type='q8_0'");
             auto pm = std::make_unique<PyModel>();
             pm->names_fixed = !names.is_none();
             if (pm->names_fixed) o.names = scheme_arg(py::str(names));
             {
               py::gil_scoped_release nogil;
               pm->b = make_binding(c, o);
             }
             if (file) {
               pm->load_tensors(std::move(*file), allow_unused);
             } else if (!weights.is_none()) {
               pm->load(weights, allow_unused);
             } else if (!seed.is_none()) {
               const auto s = seed.cast<std::uint64_t>();
               py::gil_scoped_release nogil;
               pm->b->init(s);
             }
             return pm;
           }),
           py::arg("config") = py::none(), py::arg("weights") = py::none(), py::kw_only(), py::arg("weight_type") = "",
           py::arg("threads") = 0, py::arg("int8_activations") = false, py::arg("names") = py::none(),
           py::arg("seed") = py::none(), py::arg("allow_unused") = false, py::arg("kv_type") = "",
           py::arg("comm") = py::none())
      .def_property_readonly("config", [](const PyModel& pm) { return pm.b->config(); })
      .def_property_readonly("loaded", [](const PyModel& pm) { return pm.b->loaded(); })
      .def_property_readonly("layer_names", [](const PyModel& pm) { return pm.b->layer_names(); })
      .def_property(
          "names", [](const PyModel& pm) { return pm.b->name_scheme() == models::NameScheme::hf ? "hf" : "maxtext"; },
          [](PyModel& pm, const std::string& s) {
            pm.b->set_name_scheme(scheme_arg(s));
            pm.names_fixed = true;
          })
      .def("__repr__", [](const PyModel& pm) { return "maxtext_cpp.Model(" + pm.b->type_name() + ")"; })
      .def("num_params", [](PyModel& pm) { return pm.b->num_params(); })
      .def_property_readonly("needs_engram_vocab", [](const PyModel& pm) { return pm.b->needs_engram_vocab(); },
                             "True for a model with Engram layers (engram_layers) whose canonical-token table is not set.")
      .def(
          "set_engram_vocab",
          [](PyModel& pm, py::object tok, py::object lookup, py::object size, py::object pad) {
            std::vector<std::int32_t> table;
            std::int64_t n = 0;
            std::int32_t pad_id = -1;
            if (!tok.is_none()) {
              MAXTEXT_CHECK(lookup.is_none() && size.is_none(), ArgumentError, "[set_engram_vocab] give a tokenizer or "
                            "lookup= and compressed_size=, not both");
              const auto* hf = dynamic_cast<const tokenizer::HfTokenizer*>(&tok.cast<const PyTokenizer&>().get());
              MAXTEXT_CHECK(hf != nullptr, ArgumentError, "[set_engram_vocab] the Engram layers hash a Hugging Face "
                            "tokenizer's canonical tokens: give a Tokenizer of a tokenizer.json");
              pad_id = pad.is_none() ? hf->pad() : pad.cast<std::int32_t>();
              MAXTEXT_CHECK(pad_id >= 0, ArgumentError, "[set_engram_vocab] the tokenizer has no pad_token (MaxText's "
                            "NgramHashMapping requires pad_token_id): give pad_token=");
              tokenizer::CompressedTokenTable t;
              {
                py::gil_scoped_release nogil;
                t = tokenizer::compressed_token_table(*hf);
              }
              table = std::move(t.lookup);
              n = t.size;
            } else {
              MAXTEXT_CHECK(!lookup.is_none() && !size.is_none() && !pad.is_none(), ArgumentError,
                            "[set_engram_vocab] give a tokenizer, or lookup=, compressed_size= and pad_token=");
              table = lookup.cast<std::vector<std::int32_t>>();
              n = size.cast<std::int64_t>();
              pad_id = pad.cast<std::int32_t>();
            }
            pm.b->set_engram_vocab(std::move(table), n, pad_id);
          },
          py::arg("tokenizer") = py::none(), py::kw_only(), py::arg("lookup") = py::none(),
          py::arg("compressed_size") = py::none(), py::arg("pad_token") = py::none(),
          R"(The canonical-token table the Engram layers hash with (deepseek.py builds it from the Hugging Face
tokenizer): from a Tokenizer (its compressed_token_table() and pad token; pad_token= overrides), or given as
lookup= (canonical id per token id), compressed_size= and pad_token=.)")
      .def("load", &PyModel::load, py::arg("weights"), py::arg("allow_unused") = false,
           "Load parameters from a path or a dict of arrays (missing, extra or mis-shaped tensors raise IoError).")
      .def(
          "init",
          [](PyModel& pm, py::object seed) {
            const auto s = seed.is_none() ? static_cast<std::uint64_t>(pm.b->config().init_weights_seed)
                                          : seed.cast<std::uint64_t>();
            py::gil_scoped_release nogil;
            pm.b->init(s);
          },
          py::arg("seed") = py::none())
      .def(
          "params",
          [](PyModel& pm) {
            io::TensorMap t;
            {
              py::gil_scoped_release nogil;
              t = pm.b->export_params();
            }
            py::dict d;
            for (const auto& [k, v] : t.tensors) d[py::str(k)] = to_numpy(v, false);
            return d;
          },
          "Every parameter by MaxText name (unscanned), as read-only arrays.")
      .def(
          "new_cache",
          [](PyModel& pm, std::int64_t batch, std::int64_t capacity, bool paged, std::int64_t tokens_per_page,
             std::int64_t pages) {
            MAXTEXT_CHECK(paged || (tokens_per_page == 0 && pages == 0), ArgumentError,
                          "[new_cache] tokens_per_page and pages are for a paged cache (paged=True)");
            if (!paged) return pm.b->new_cache(batch, capacity);
            return pm.b->new_paged_cache(batch, capacity > 0 ? capacity : pm.b->config().max_target_length,
                                         models::PagingOptions{tokens_per_page, pages});
          },
          py::arg("batch") = 1, py::arg("capacity") = 0, py::arg("paged") = false, py::arg("tokens_per_page") = 0,
          py::arg("pages") = 0,
          "A KV cache for `batch` rows of up to `capacity` tokens (0: max_target_length); paged=True: memory a page "
          "at a time from a pool of `pages` pages of `tokens_per_page` tokens (0: automatic), docs/serving.md. "
          "(The config's attention=paged makes every cache paged.)")
      .def(
          "new_session",
          [](PyModel& pm, std::int64_t capacity) { return PySession{pm.b->new_session(capacity)}; },
          py::arg("capacity") = 0, py::keep_alive<0, 1>(),
          R"(A conversation holding up to `capacity` tokens (0: max_target_length) whose KV cache is kept between
calls: each generate() prefills only the tokens it adds. Session.save(path) / load(path) write it to a file and read
it back (in this process or another with the same model).)")
      .def(
          "forward",
          [](PyModel& pm, py::handle tokens, py::handle positions, py::handle segment_ids, py::handle capture,
             std::shared_ptr<CacheHandle> cache, bool last_only, py::handle media_mask,
             py::handle media_embeddings, py::handle mrope_positions) -> py::object {
            const Tensor<std::int32_t, 2> tok = int_rows(tokens, "tokens");
            const auto pos = opt_rows(positions, "positions");
            const auto seg = opt_rows(segment_ids, "segment_ids");
            const auto mmask = opt_rows(media_mask, "media_mask");
            const auto memb = opt_float_rows(media_embeddings, "media_embeddings");
            auto cap = capture_arg(capture);
            ForwardRequest r;
            r.media_mask = mmask ? &*mmask : nullptr;
            r.media_embeddings = memb ? &*memb : nullptr;
            const auto pos3 = opt_positions3(mrope_positions, "mrope_positions");
            r.mrope_positions = pos3 ? &*pos3 : nullptr;
            r.tokens = &tok;
            r.positions = pos ? &*pos : nullptr;
            r.segment_ids = seg ? &*seg : nullptr;
            r.cache = cache.get();
            r.last_only = last_only;
            r.capture = cap ? &*cap : nullptr;
            Tensor<float, 3> logits;
            {
              py::gil_scoped_release nogil;
              logits = pm.b->forward(r);
            }
            if (!cap) return to_numpy(logits);
            return py::make_tuple(to_numpy(logits), captured(*cap));
          },
          py::arg("tokens"), py::arg("positions") = py::none(), py::arg("segment_ids") = py::none(), py::kw_only(),
          py::arg("capture") = py::none(), py::arg("cache") = nullptr, py::arg("last_only") = false,
          py::arg("media_mask") = py::none(), py::arg("media_embeddings") = py::none(),
          py::arg("mrope_positions") = py::none(),
          R"(Logits [B, T, V] float32 for tokens [B, T] (or [T]). positions / segment_ids: [B, T] integers (segment id 0 =
padding, as MaxText). capture: None, True (everything), or names (MaxText's or HF's module paths): then returns
(logits, {name: array}) in forward order. cache: a Cache from new_cache() to continue from (incremental decoding).
media_mask [B, T] (nonzero: a picture's soft token) with media_embeddings [n, emb_dim] (or Gemma3Vision.encode's
[pictures, 256, emb_dim]): the embeddings replace the marked tokens' (MaxText's multimodal merge; Gemma 3's pictures
attend to themselves whole); rows of (1 + k) * emb_dim carry k deepstack features added after layers 0..k-1
(Qwen3-VL / Qwen3-Omni). mrope_positions [3, B, T] (or [3, T]): MRoPE's 3-D positions instead of positions, needed
with pictures on a use_mrope model (Qwen3.5; Qwen3Vision.prompt makes them). docs/vision.md)")
      .def(
          "forward_mtp",
          [](PyModel& pm, py::handle tokens, const std::string& hidden) {
            const Tensor<std::int32_t, 2> tok = int_rows(tokens, "tokens");
            const models::MtpHidden h = mtp_hidden_arg(hidden, "forward_mtp");
            std::vector<Tensor<float, 3>> all;
            {
              py::gil_scoped_release nogil;
              all = pm.b->forward_with_mtp(tok, h);
            }
            py::list mtp;
            for (std::size_t k = 1; k < all.size(); ++k) mtp.append(to_numpy(all[k]));
            return py::make_tuple(to_numpy(all[0]), mtp);
          },
          py::arg("tokens"), py::arg("hidden") = "raw",
          R"((logits, [mtp_logits_1, ...]): MaxText's whole-sequence pass with its multi-token prediction block
(mtp_num_layers): the main logits [B, T, V] and each MTP layer k's, whose row t predicts token t + k + 1 from the
hidden state at t and the k tokens after it (MaxText's roll_and_mask: the last k rows read token id 0).
hidden='raw' (MaxText's) or 'normed': the hidden state the MTP layers read passes through the model's final norm
first, as llama.cpp's MTP graphs and vLLM's MTP drafters take it.)")
      .def(
          "run_layer",
          [](PyModel& pm, py::handle x, py::object layer, py::object weights, const std::string& prefix,
             const std::string& kind, py::handle positions, py::handle segment_ids, py::handle capture) -> py::object {
            LayerRequest r;
            r.x = to_any(x, "x");
            const auto pos = opt_rows(positions, "positions");
            const auto seg = opt_rows(segment_ids, "segment_ids");
            auto cap = capture_arg(capture);
            std::optional<Weights> w;
            if (!weights.is_none()) {
              w = weights_arg(weights, pm.b->config());
            } else {
              MAXTEXT_CHECK(!layer.is_none(), ArgumentError, "[run_layer] give layer= (an index into this model) or "
                            "weights= (the layer's parameters)");
              r.index = layer.cast<std::int64_t>();
            }
            r.weights = w ? &w->tensors : nullptr;
            r.prefix = prefix;
            r.kind = kind;
            r.positions = pos ? &*pos : nullptr;
            r.segment_ids = seg ? &*seg : nullptr;
            r.capture = cap ? &*cap : nullptr;
            Tensor<float, 3> y;
            {
              py::gil_scoped_release nogil;
              y = pm.b->run_layer(r);
            }
            if (!cap) return to_numpy(y);
            return py::make_tuple(to_numpy(y), captured(*cap));
          },
          py::arg("x"), py::arg("layer") = py::none(), py::kw_only(), py::arg("weights") = py::none(),
          py::arg("prefix") = "", py::arg("kind") = "decoder", py::arg("positions") = py::none(),
          py::arg("segment_ids") = py::none(), py::arg("capture") = py::none(),
          R"(One decoder layer on x [B, T, emb_dim] (full-sequence, positions default 0..T-1): layer i of this model, or a
layer whose parameters are weights[prefix.*] (kind: decoder, moe, gpt3_attention, gpt3_layernorm). Returns the
output [B, T, emb_dim] float32, or (output, {name: array}) with capture=.)")
      .def(
          "generate",
          [](PyModel& pm, py::object prompts, std::int64_t max_new_tokens, float temperature, std::int64_t top_k,
             float top_p, py::object seed, py::object stop_tokens, py::object tok_obj, py::object on_token,
             py::object stream, std::int64_t capacity, py::object spec, std::int64_t draft_max, py::handle media_mask,
             py::handle media_embeddings, const std::string& mtp_hidden, py::object grammar_text, py::object schema,
             py::handle media_positions) {
            const PyTokenizer* tk = tok_obj.is_none() ? nullptr : &tok_obj.cast<const PyTokenizer&>();
            std::vector<std::vector<std::int32_t>> rows;
            const bool texts = py::isinstance<py::str>(prompts) ||
                               (py::isinstance<py::list>(prompts) && py::len(prompts) > 0 &&
                                py::isinstance<py::str>(prompts.cast<py::list>()[0]));
            if (texts) {
              MAXTEXT_CHECK(tk != nullptr, ArgumentError, "[generate] text prompts need tokenizer=");
              if (py::isinstance<py::str>(prompts)) {
                rows.push_back(tk->get().encode(prompts.cast<std::string>()));
              } else {
                for (auto p : prompts) rows.push_back(tk->get().encode(p.cast<std::string>()));
              }
            } else {
              py::array a = py::array::ensure(prompts);
              if (a && a.dtype().kind() != 'O') {
                const auto t = int_rows(a, "prompts");
                for (std::int64_t b = 0; b < t.dim(0); ++b) rows.emplace_back(&t(b, 0), &t(b, 0) + t.dim(1));
              } else {
                for (auto p : prompts) {
                  const auto t = int_rows(p, "prompts");
                  rows.emplace_back(t.data(), t.data() + t.size());
                }
              }
            }
            models::GenerateOptions go;
            const auto mmask = opt_rows(media_mask, "media_mask");
            const auto memb = opt_float_rows(media_embeddings, "media_embeddings");
            go.media_mask = mmask ? &*mmask : nullptr;
            go.media_embeddings = memb ? &*memb : nullptr;
            const auto mpos = opt_positions3(media_positions, "media_positions");
            go.media_positions = mpos ? &*mpos : nullptr;
            go.max_new_tokens = max_new_tokens;
            go.sampling.temperature = temperature;
            go.sampling.top_k = top_k;
            go.sampling.top_p = top_p;
            go.sampling.seed = seed.is_none() ? static_cast<std::uint64_t>(pm.b->config().init_weights_seed)
                                              : seed.cast<std::uint64_t>();
            if (!stop_tokens.is_none()) {
              go.stop_tokens = stop_tokens.cast<std::vector<std::int32_t>>();
            } else if (tk != nullptr && tk->get().eos() >= 0) {
              go.stop_tokens.push_back(tk->get().eos());  // text generation ends at the end-of-sequence token
            }
            MAXTEXT_CHECK(stream.is_none() || (tk != nullptr && rows.size() == 1), ArgumentError,
                          "[generate] stream= needs tokenizer= and a single prompt (use on_token= for batches)");
            std::vector<std::int32_t> prev;
            for (const auto& r : rows) prev.push_back(r.empty() ? -1 : r.back());
            std::vector<std::string> texts_out(rows.size());
            std::string pending;  // streamed bytes not yet forming complete UTF-8
            if (!on_token.is_none() || tk != nullptr) {
              go.on_token = [&](std::int64_t b, std::int32_t t) {
                const auto u = static_cast<std::size_t>(b);
                std::string piece;
                if (tk != nullptr) {
                  piece = tk->get().piece(prev[u], t);
                  prev[u] = t;
                  texts_out[u] += piece;
                }
                if (on_token.is_none() && stream.is_none()) return;
                py::gil_scoped_acquire gil;
                if (!on_token.is_none()) on_token(b, t);
                if (!stream.is_none()) {
                  pending += piece;
                  const std::size_t n = utf8_complete(pending);
                  if (n > 0) {
                    stream(text(pending.substr(0, n)));
                    pending.erase(0, n);
                  }
                }
              };
            }
            models::GenerateResult res;
            models::SpeculativeStats st;
            // grammar= (GBNF text) or json_schema= (a dict or its JSON text): the text follows it.
            std::shared_ptr<const models::grammar::Grammar> g;
            if (!grammar_text.is_none() || !schema.is_none()) {
              MAXTEXT_CHECK(grammar_text.is_none() || schema.is_none(), ArgumentError,
                            "[generate] give grammar= or json_schema=, not both");
              MAXTEXT_CHECK(tk != nullptr && rows.size() == 1, ArgumentError,
                            "[generate] grammar= / json_schema= need tokenizer= and a single prompt");
              MAXTEXT_CHECK(spec.is_none() && go.media_mask == nullptr, UnsupportedError,
                            "[generate] grammar= / json_schema= with spec= or pictures: not implemented yet");
              if (!grammar_text.is_none()) {
                g = models::grammar::grammar_from_text(models::grammar::GrammarText::gbnf,
                                                       grammar_text.cast<std::string>(), "[generate] grammar=");
              } else {
                const std::string js = py::isinstance<py::str>(schema)
                                           ? schema.cast<std::string>()
                                           : py::module_::import("json").attr("dumps")(schema).cast<std::string>();
                g = models::grammar::grammar_from_text(models::grammar::GrammarText::json_schema, js,
                                                       "[generate] json_schema=");
              }
            }
            if (g) {
              models::detail::AnyDraftModel adapter(*pm.b);  // make_cache / forward over the model's interface
              py::gil_scoped_release nogil;
              res = models::generate_constrained(adapter, tk->get(), rows[0], go, g, capacity);
            } else if (spec.is_none()) {
              py::gil_scoped_release nogil;
              res = pm.b->generate(rows, go, capacity);
            } else {
              // spec='lookup' (prompt lookup) or a Model (a draft model that shares the tokenizer): greedy, one prompt.
              MAXTEXT_CHECK(rows.size() == 1, ArgumentError, "[generate] spec= takes one prompt, found ", rows.size());
              MAXTEXT_CHECK(capacity == 0, ArgumentError, "[generate] spec= sizes its own cache: leave capacity= unset");
              models::SpeculativeOptions so;
              so.draft_max = draft_max;
              so.mtp_hidden = mtp_hidden_arg(mtp_hidden, "generate");
              MAXTEXT_CHECK(mtp_hidden == "raw" || (py::isinstance<py::str>(spec) && spec.cast<std::string>() == "mtp"),
                            ArgumentError, "[generate] mtp_hidden='", mtp_hidden, "' needs spec='mtp'");
              if (py::isinstance<py::str>(spec)) {
                const auto kind = spec.cast<std::string>();
                MAXTEXT_CHECK(kind == "lookup" || kind == "mtp", ArgumentError, "[generate] spec='", kind,
                              "': expected 'lookup', 'mtp' or a draft Model");
                models::PromptLookupDrafter lookup;
                py::gil_scoped_release nogil;
                if (kind == "mtp") {
                  res = pm.b->generate_mtp_speculative(rows[0], go, so, &st);
                } else {
                  res = pm.b->generate_speculative(
                      rows[0], go,
                      [&](const std::vector<std::int32_t>& c, std::int64_t k) { return lookup.propose(c, k); }, so, &st);
                }
              } else {
                PyModel* draft = nullptr;
                try {
                  draft = &spec.cast<PyModel&>();
                } catch (const py::cast_error&) {
                  MAXTEXT_THROW(ArgumentError, "[generate] spec=: expected 'lookup', 'mtp' or a draft Model, found ",
                                py::str(py::type::of(spec)).cast<std::string>());
                }
                const auto cap = static_cast<std::int64_t>(rows[0].size()) + max_new_tokens + draft_max + 1;
                models::AnyModelDrafter drafter(*draft->b, cap);
                py::gil_scoped_release nogil;
                res = pm.b->generate_speculative(rows[0], go, drafter.as_function(), so, &st);
              }
            }
            if (!stream.is_none() && !pending.empty()) stream(text(pending));
            py::dict d;
            if (!spec.is_none()) d["speculative"] = speculative_stats(st);
            d["tokens"] = res.tokens;
            d["prompt_tokens"] = rows;
            if (tk != nullptr) {
              py::list tl;
              for (const auto& s : texts_out) tl.append(text(s));
              d["text"] = tl;
            }
            d["prefill_seconds"] = res.prefill_seconds;
            d["decode_seconds"] = res.decode_seconds;
            d["decode_steps"] = res.decode_steps;
            d["prefill_tokens_per_second"] = res.prefill_tokens_per_second();
            d["decode_tokens_per_second"] = res.decode_tokens_per_second();
            return d;
          },
          py::arg("prompts"), py::arg("max_new_tokens") = 32, py::kw_only(), py::arg("temperature") = 0.0f,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("seed") = py::none(), py::arg("stop_tokens") = py::none(),
          py::arg("tokenizer") = py::none(), py::arg("on_token") = py::none(), py::arg("stream") = py::none(),
          py::arg("capacity") = 0, py::arg("spec") = py::none(), py::arg("draft_max") = 4,
          py::arg("media_mask") = py::none(), py::arg("media_embeddings") = py::none(), py::arg("mtp_hidden") = "raw",
          py::arg("grammar") = py::none(), py::arg("json_schema") = py::none(), py::arg("media_positions") = py::none(),
          R"(Prefill + decode. prompts: token ids ([T], [B, T] or a list of lists) or text (a str or list of str, with
tokenizer=). temperature 0 = greedy. on_token(row, token) is called as each token is chosen; stream(text) gets the
text pieces of a single text prompt as they complete. Returns {'tokens': [[...]], 'text': [...] (with a tokenizer),
'prompt_tokens', timings}. Text generation stops at the tokenizer's EOS unless stop_tokens= is given.
spec='lookup' (prompt lookup), spec='mtp' (the model's multi-token prediction layers, one draft per layer) or
spec=draft_model (another Model sharing the tokenizer): greedy speculative decoding of one prompt, draft_max tokens
drafted and checked per pass; the same tokens, and result['speculative'] with
'verify_passes', 'drafted' and 'accepted' per draft position, 'acceptance_rate'. media_mask [B, T] with
media_embeddings: pictures' soft tokens merged at the prefill (see forward); media_positions [3, B, T]: their MRoPE
positions (use_mrope models: Qwen3Vision.prompt). mtp_hidden='normed' (spec='mtp'): the
MTP layers read the hidden state through the final norm, as llama.cpp's MTP graphs (see forward_mtp).
grammar= (GBNF text, as llama.cpp writes it) or json_schema= (a dict or JSON text): the generated text of the single
text prompt follows the grammar (constrained generation; greedy or sampled); not with spec= or pictures.)")
      .def(
          "compare",
          [](PyModel& pm, py::handle reference, py::handle tokens, py::handle input, py::object layer, py::object weights,
             const std::string& prefix, const std::string& kind, py::handle map, py::handle positions,
             py::handle segment_ids, py::object rtol, py::object atol, py::object scaled_tol, py::object max_kl_div,
             int top_k, bool report) -> py::object {
            io::TensorMap ref;
            if (is_path(reference)) {
              const std::string p = path_str(reference);
              py::gil_scoped_release nogil;
              ref = io::read_tensors(p);
            } else {
              flatten(reference, "", ref, "reference");
            }
            testing::NameMap nm;
            if (!map.is_none()) {
              if (is_path(map)) {
                nm = testing::NameMap::read(path_str(map));
              } else {
                for (auto item : map.attr("items")()) {
                  const auto kv = item.cast<py::tuple>();
                  nm.add(py::str(kv[0]), kv[1].is_none() ? std::string() : std::string(py::str(kv[1])));
                }
              }
            }
            auto tensor_or_name = [&](py::handle h, const char* what) -> py::object {
              if (py::isinstance<py::str>(h)) {
                const std::string n = py::str(h);
                MAXTEXT_CHECK(ref.has(n), ArgumentError, "[compare] ", what, ": '", n, "' is not a tensor of the reference");
                return to_numpy(ref.at(n));
              }
              return py::reinterpret_borrow<py::object>(h);
            };
            const auto pos = opt_rows(positions.is_none() ? positions : tensor_or_name(positions, "positions"), "positions");
            const auto seg =
                opt_rows(segment_ids.is_none() ? segment_ids : tensor_or_name(segment_ids, "segment_ids"), "segment_ids");
            layers::Capture cap(testing::wanted_names(ref, nm));
            testing::CheckOptions opt;
            opt.tol.rtol = rtol.is_none() ? 1e-4 : rtol.cast<double>();
            opt.tol.atol = atol.is_none() ? 1e-5 : atol.cast<double>();
            opt.scaled_tol = scaled_tol.is_none() ? 0.0 : scaled_tol.cast<double>();
            opt.max_kl_div = max_kl_div.is_none() ? -1.0 : max_kl_div.cast<double>();
            opt.top_k = top_k;
            MAXTEXT_CHECK(opt.tol.rtol >= 0 && opt.tol.atol >= 0 && opt.scaled_tol >= 0, ArgumentError,
                          "[compare] rtol, atol and scaled_tol must be >= 0");
            MAXTEXT_CHECK(scaled_tol.is_none() || (rtol.is_none() && atol.is_none()), ArgumentError,
                          "[compare] scaled_tol replaces rtol/atol: give one criterion");
            MAXTEXT_CHECK(top_k >= 1, ArgumentError, "[compare] top_k must be >= 1, found ", top_k);
            MAXTEXT_CHECK(max_kl_div.is_none() || opt.max_kl_div >= 0, ArgumentError, "[compare] max_kl_div must be >= 0");
            if (input.is_none()) {
              MAXTEXT_CHECK(!tokens.is_none(), ArgumentError,
                            "[compare] give tokens= (the whole model) or input= (one layer, with layer= or weights=)");
              const auto tok = int_rows(tensor_or_name(tokens, "tokens"), "tokens");
              ForwardRequest r;
              r.tokens = &tok;
              r.positions = pos ? &*pos : nullptr;
              r.segment_ids = seg ? &*seg : nullptr;
              r.capture = &cap;
              py::gil_scoped_release nogil;
              (void)pm.b->forward(r);
            } else {
              LayerRequest r;
              r.x = to_any(tensor_or_name(input, "input"), "input");
              std::optional<Weights> w;
              if (!weights.is_none()) {
                w = weights_arg(weights, pm.b->config());
              } else {
                MAXTEXT_CHECK(!layer.is_none(), ArgumentError, "[compare] input= needs layer= or weights=");
                r.index = layer.cast<std::int64_t>();
              }
              r.weights = w ? &w->tensors : nullptr;
              r.prefix = prefix;
              r.kind = kind;
              r.positions = pos ? &*pos : nullptr;
              r.segment_ids = seg ? &*seg : nullptr;
              r.capture = &cap;
              py::gil_scoped_release nogil;
              (void)pm.b->run_layer(r);
            }
            testing::CheckResult res;
            {
              py::gil_scoped_release nogil;
              res = testing::check_against_reference(cap, ref, nm, opt);
            }
            MAXTEXT_CHECK(!res.rows.empty(), ArgumentError, "[compare] none of the reference's ", ref.tensors.size(),
                          " tensors matched a captured activation; pass map= to translate their names (see "
                          "docs/reference-checking.md)");
            py::list rows = rows_data(res);
            if (!report) return rows;
            return py::make_tuple(rows, testing::format_report(res, opt));
          },
          py::arg("reference"), py::arg("tokens") = py::none(), py::kw_only(), py::arg("input") = py::none(),
          py::arg("layer") = py::none(), py::arg("weights") = py::none(), py::arg("prefix") = "",
          py::arg("kind") = "decoder", py::arg("map") = py::none(), py::arg("positions") = py::none(),
          py::arg("segment_ids") = py::none(), py::arg("rtol") = py::none(), py::arg("atol") = py::none(),
          py::arg("scaled_tol") = py::none(), py::arg("max_kl_div") = py::none(), py::arg("top_k") = 10,
          py::arg("report") = false,
          R"(`maxtext compare` as a function: run the model on tokens (or one layer on input=), capture every activation
the reference (an .npz / safetensors / .npy-directory path, or a dict of arrays) names (map: {theirs: ours or
None} or a map file), and compare. Returns one dict per compared tensor in forward order (reference, ours, shape,
max_abs, max_rel, worst_*, pass, first_divergence, and KL / top-k for logits); with report=True, (rows, text).
Criterion: |ours - ref| <= atol + rtol |ref| (defaults 1e-5, 1e-4), or scaled_tol, or max_kl_div for logits.
tokens / input / positions / segment_ids may name a tensor of the reference.)");

  m.def(
      "read_tensors",
      [](py::handle path) {
        const std::string p = path_str(path);
        io::TensorMap t;
        {
          py::gil_scoped_release nogil;
          t = io::read_tensors(p);
        }
        py::dict d;
        for (const auto& [k, v] : t.tensors) d[py::str(k)] = to_numpy(v, false);
        return d;
      },
      py::arg("path"),
      "Named tensors of an .npz, .npy, directory of .npy or safetensors file (read-only arrays, memory-mapped where "
      "possible; bfloat16 as ml_dtypes.bfloat16 when installed, else as uint16 bits).");
}
