// layers/params.hpp: how layers declare their parameters, once, for every use: loading from a checkpoint in MaxText
// naming, seeded initialisation with MaxText's initialisers, export back to MaxText naming, counting.
// A layer writes `template <class V> void visit(V& v, Params& p) const` calling v.matrix / v.table / v.vector
// with MaxText parameter names relative to the current scope; Scope guards push path components.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/random.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::layers {

/// Initial-value distributions of MaxText's initialisers (spec norms-dense-mlp.md §Initializers).
enum class Init : std::uint8_t { zeros, ones, normal, truncated_normal, constant };

/// A MaxText DenseGeneral-style kernel of shape in + out, stored as an out-major Matrix [prod(out), prod(in)].
/// Initialised as nd_dense_init(scale, "fan_in", dist) with fan_in = prod(in), then divided by `divisor`
/// (the generic Attention's query kernel uses sqrt(head_dim)).
/// With `batch` axes (MoE expert stacks, file shape batch + in + out, e.g. wi_0 [E, D, F]) the matrix is
/// [prod(batch) * prod(out), prod(in)]: the out-major matrices of each batch index stacked by rows.
/// `fan_in` > 0 overrides the initialiser's fan-in (MaxText initialises expert kernels [E, D, F] with fan_in E*F).
struct KernelSpec {
  std::vector<std::int64_t> in;
  std::vector<std::int64_t> out;
  Init dist = Init::truncated_normal;
  double scale = 1.0;
  double divisor = 1.0;
  std::vector<std::int64_t> batch = {};
  double fan_in = 0.0;
  /// false: keep the matrix as loaded, without the backend's prepare() (re-layout, packing); for stacked expert
  /// kernels, whose per-expert slices the layer prepares itself.
  bool prepare = true;
};

/// A small parameter (norm scale, bias, sinks) of any shape, stored flat in the activation type.
struct VectorSpec {
  std::vector<std::int64_t> shape;
  Init dist = Init::zeros;
  double stddev = 1.0;
  double value = 0.0;  ///< Init::constant's value (e.g. MaxText's default_scalar_init, 0.01)
};

/// Push a name component onto a visitor's path for the lifetime of the guard.
template <class V>
class Scope {
 public:
  Scope(V& v, std::string_view name) : v_(v) { v_.push(name); }
  ~Scope() { v_.pop(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  V& v_;
};

/// Visit a child module's parameters one level down the dotted path: `visit_child(v, "mlp", mlp_, p.mlp)` declares
/// everything `mlp_` declares under `<this module>.mlp`.
template <class V, class Module, class ModuleParams>
void visit_child(V& v, std::string_view name, const Module& child, ModuleParams& params) {
  Scope<V> s(v, name);
  child.visit(v, params);
}

/// Shared path handling for visitors.
class PathStack {
 public:
  void push(std::string_view n) { parts_.emplace_back(n); }
  void pop() { parts_.pop_back(); }
  std::string path(std::string_view leaf) const {
    std::string p;
    for (const auto& s : parts_) {
      if (s.empty()) continue;
      p += s;
      p += '.';
    }
    p += leaf;
    return p;
  }

 private:
  std::vector<std::string> parts_;
};

inline std::int64_t product(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{1}, std::multiplies<>());
}
inline std::vector<std::int64_t> concat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Copy a host tensor into backend memory (no copy when the backend works in host memory).
template <class B, class T, int R>
Tensor<T, R> upload(const B& be, Tensor<T, R> host) {
  if (be.memory()->host_accessible()) return host;
  Tensor<T, R> dev(host.shape(), be.memory());
  be.copy(dev.data(), host.data(), static_cast<std::size_t>(host.size()) * sizeof(T), CopyKind::host_to_device);
  return dev;
}
/// Copy a backend tensor to a new host tensor (shares it when already host-accessible).
template <class B, class T, int R>
Tensor<T, R> download(const B& be, const Tensor<T, R>& t) {
  if (t.host_accessible()) return t;
  Tensor<T, R> host(t.shape());
  be.copy(host.data(), t.data(), static_cast<std::size_t>(t.size()) * sizeof(T), CopyKind::device_to_host);
  be.synchronize();
  return host;
}

/// Lay a loaded matrix out for the backend; then, where the backend can (CpuBackend::release_rows), let go of an
/// out-major copy that the loader made only to be packed, so that the packed weight is the one copy in memory.
/// The freed copy goes back to the system at once (trim_heap): copies of a few MB, freed between packed buffers, would
/// otherwise stay in the heap as holes until loading ends (glibc serves them from the heap once its mmap threshold
/// has grown), about a quarter of the weights at the loader's peak on a 1B model.
template <class B, class W>
Matrix<W> prepare_loaded(const B& be, Matrix<W> m) {
  m = be.prepare(std::move(m));
  if constexpr (requires { be.release_rows(m); }) {
    const bool had_rows = !m.data.empty();
    be.release_rows(m);
    if (had_rows && m.data.empty()) trim_heap();
  }
  return m;
}

// ---------------------------------------------------------------------------------------------------------------
/// Loads parameters from a TensorMap in MaxText naming. Every problem (missing, mis-shaped, wrong dtype) is
/// collected and reported in one IoError; finish() also reports tensors nobody asked for.
template <TensorPolicy P>
class ParamLoader : public PathStack {
 public:
  using B = typename P::backend;
  using W = typename P::weight_t;
  using A = typename P::act_t;

  ParamLoader(const io::TensorMap& tensors, const B& be, std::string what = "weights")
      : tensors_(tensors), be_(be), what_(std::move(what)) {}

  void matrix(std::string_view leaf, Matrix<W>& m, const KernelSpec& s) {
    const std::string name = path(leaf);
    const AnyTensor* t = find(name, concat(s.batch, concat(s.in, s.out)));
    if (!t) return;
    const int nb = static_cast<int>(s.batch.size()), ni = static_cast<int>(s.in.size()),
              no = static_cast<int>(s.out.size());
    std::vector<int> perm;
    for (int i = 0; i < nb; ++i) perm.push_back(i);
    for (int i = 0; i < no; ++i) perm.push_back(nb + ni + i);
    for (int i = 0; i < ni; ++i) perm.push_back(nb + i);
    m = make_matrix(*t, perm, nb + no, product(s.batch) * product(s.out), product(s.in), name, s.prepare);
  }

  /// A table stored as [rows, cols] in the file (embeddings): no transpose. Tables are only gathered, so the backend
  /// does not lay them out for products (a tied output head prepares its own copy: models/transformer.hpp).
  void table(std::string_view leaf, Matrix<W>& m, std::int64_t rows, std::int64_t cols, const VectorSpec&) {
    const std::string name = path(leaf);
    const AnyTensor* t = find(name, {rows, cols});
    if (!t) return;
    m = make_matrix(*t, {0, 1}, 1, rows, cols, name, false);
  }

  /// A vector parameter, stored in the activation type or (T = float) in f32, e.g. the MoE gate bias.
  template <class T>
  void vector(std::string_view leaf, Tensor<T, 1>& v, const VectorSpec& s) {
    const std::string name = path(leaf);
    const AnyTensor* t = find(name, s.shape);
    if (!t) return;
    v = upload(be_, io::to_vector<T>(*t));
  }

  /// Throw one IoError listing every problem, including tensors that no parameter consumed.
  void finish(bool allow_unused = false) {
    if (!allow_unused) {
      for (const auto& [name, t] : tensors_.tensors) {
        if (!used_.count(name)) problems_.push_back("unexpected tensor " + name + " " + t.describe());
      }
    }
    if (problems_.empty()) return;
    std::string msg = "[" + what_ + "] " + std::to_string(problems_.size()) + " problem(s):";
    for (const auto& p : problems_) msg += "\n  " + p;
    throw IoError(msg);
  }
  const std::set<std::string>& used() const { return used_; }

 private:
  const AnyTensor* find(const std::string& name, const std::vector<std::int64_t>& shape) {
    auto it = tensors_.tensors.find(name);
    if (it == tensors_.tensors.end()) {
      problems_.push_back("missing tensor " + name + " (expected " + str(shape) + ")");
      return nullptr;
    }
    used_.insert(name);
    const AnyTensor& t = it->second;
    if (t.shape != shape) {
      problems_.push_back(name + ": expected shape " + str(shape) + ", found " + str(t.shape) +
                          (t.source.empty() ? "" : " (" + t.source + ")"));
      return nullptr;
    }
    if (!dtype_is_float(t.dtype) && t.dtype != DType::q8_0 && t.dtype != DType::ggml) {
      problems_.push_back(name + ": expected a floating-point tensor, found " + std::string(dtype_name(t.dtype)));
      return nullptr;
    }
    return &t;
  }

  Matrix<W> make_matrix(const AnyTensor& t, const std::vector<int>& perm, int n_row_axes, std::int64_t rows,
                        std::int64_t cols, const std::string& name, bool prepare = true) {
    Matrix<W> m;
    m.rows = rows;
    m.cols = cols;
    if constexpr (std::is_same_v<W, ggml_byte>) {  // runtime-typed: each matrix in the file's own type
      io::GgmlMatrix g = io::ggml_matrix(t, perm, n_row_axes);
      if (reinterpret_cast<const std::byte*>(g.data.data()) != t.data) io::drop_source_pages(t);  // copied: one copy
      m.ggml_type = g.type;
      m.value_scale = g.value_scale;
      m.data = upload(be_, std::move(g.data));
      return prepare ? prepare_loaded(be_, std::move(m)) : m;
    } else {
      if (dtype_block(dtype_of<W>) > 1 && cols % dtype_block(dtype_of<W>) != 0) {
        problems_.push_back(name + ": " + std::string(dtype_name(dtype_of<W>)) + " storage needs the input dimension (" +
                            std::to_string(cols) + ") to be a multiple of " + std::to_string(dtype_block(dtype_of<W>)));
        return m;
      }
      Tensor<W, 2> host = io::view_matrix<W>(t, perm, n_row_axes);
      if (host.empty()) {
        // A copy (transposed, converted, a rank's columns): where the backend packs rows as they come, it is made a
        // chunk at a time and never held whole beside the panels (a MaxText-layout head: its size, not twice it).
        using Rows = std::function<void(std::int64_t, std::int64_t, W*)>;
        if constexpr (requires(const Rows& f, std::int64_t n) { be_.template pack_rows<W>(n, n, n, f); }) {
          const std::int64_t granule = io::row_granule(t, perm, n_row_axes);
          if (prepare && granule > 0 && rows > 0 && cols > 0) {  // (an empty matrix: no panels, the old way)
            const Rows rows_of = [&](std::int64_t r0, std::int64_t r1, W* out) {
              io::to_matrix_rows<W>(t, perm, n_row_axes, r0, r1, out);
            };
            m = be_.template pack_rows<W>(rows, cols, granule, rows_of);
            trim_heap();
            return m;
          }
        }
        host = io::to_matrix<W>(t, perm, n_row_axes);
        io::drop_source_pages(t);  // the copy is the one resident copy (core/mapped_pages.hpp)
      }
      m.data = upload(be_, std::move(host));
      return prepare ? prepare_loaded(be_, std::move(m)) : m;
    }
  }

  const io::TensorMap& tensors_;
  const B& be_;
  std::string what_;
  std::set<std::string> used_;
  std::vector<std::string> problems_;
};

// ---------------------------------------------------------------------------------------------------------------
/// Seeded initialisation with MaxText's distributions (values differ from JAX's PRNG; the distributions match).
template <TensorPolicy P>
class ParamInitializer : public PathStack {
 public:
  using B = typename P::backend;
  using W = typename P::weight_t;
  using A = typename P::act_t;

  ParamInitializer(const B& be, std::uint64_t seed) : be_(be), seed_(seed) {}

  void matrix(std::string_view leaf, Matrix<W>& m, const KernelSpec& s) {
    const std::string name = path(leaf);
    const std::int64_t K = product(s.in), N = product(s.batch) * product(s.out);
    // variance scaling, mode fan_in: var = scale / fan_in; truncated normal is rescaled by its std (0.8796...).
    double std_dev = std::sqrt(s.scale / (s.fan_in > 0.0 ? s.fan_in : static_cast<double>(K)));
    if (s.dist == Init::truncated_normal) std_dev /= 0.87962566103423978;
    std_dev /= s.divisor;
    Tensor<float, 2> f({N, K});
    fill(name, f.data(), N * K, s.dist, std_dev);
    m = finish_matrix(f, N, K, s.prepare);
  }
  void table(std::string_view leaf, Matrix<W>& m, std::int64_t rows, std::int64_t cols, const VectorSpec& s) {
    const std::string name = path(leaf);
    Tensor<float, 2> f({rows, cols});
    fill(name, f.data(), rows * cols, s.dist, s.stddev);
    m = finish_matrix(f, rows, cols, false);  // gathered only, as ParamLoader::table
  }
  template <class T>
  void vector(std::string_view leaf, Tensor<T, 1>& v, const VectorSpec& s) {
    const std::string name = path(leaf);
    const std::int64_t n = product(s.shape);
    Tensor<float, 1> f({n});
    fill(name, f.data(), n, s.dist, s.dist == Init::constant ? s.value : s.stddev);
    Tensor<T, 1> h({n});
    for (std::int64_t i = 0; i < n; ++i) h(i) = from_float<T>(f(i));
    v = upload(be_, std::move(h));
  }

 private:
  void fill(const std::string& name, float* p, std::int64_t n, Init dist, double std_dev) {
    Rng rng(seed_ ^ Rng::hash(name));
    for (std::int64_t i = 0; i < n; ++i) {
      switch (dist) {
        case Init::zeros: p[i] = 0.0f; break;
        case Init::ones: p[i] = 1.0f; break;
        case Init::normal: p[i] = static_cast<float>(rng.normal() * std_dev); break;
        case Init::truncated_normal: p[i] = static_cast<float>(rng.truncated_normal() * std_dev); break;
        case Init::constant: p[i] = static_cast<float>(std_dev); break;  // the value (vector())
      }
    }
  }
  Matrix<W> finish_matrix(const Tensor<float, 2>& f, std::int64_t N, std::int64_t K, bool prepare = true) {
    Matrix<W> m;
    m.rows = N;
    m.cols = K;
    if constexpr (std::is_same_v<W, ggml_byte>) {  // runtime-typed weights initialise as F32 rows
      io::GgmlMatrix g = io::ggml_matrix(AnyTensor::from(f), {0, 1}, 1);
      m.ggml_type = g.type;
      m.data = upload(be_, std::move(g.data));
      return prepare ? prepare_loaded(be_, std::move(m)) : m;
    } else {
      MAXTEXT_CHECK(K % dtype_block(dtype_of<W>) == 0, ShapeError, "[init] ", dtype_name(dtype_of<W>),
                    " storage needs the input dimension (", K, ") to be a multiple of ", dtype_block(dtype_of<W>));
      m.data = upload(be_, io::to_matrix<W>(AnyTensor::from(f), {0, 1}, 1));
      return prepare ? prepare_loaded(be_, std::move(m)) : m;
    }
  }

  const B& be_;
  std::uint64_t seed_;
};

// ---------------------------------------------------------------------------------------------------------------
/// Exports parameters as host tensors in MaxText naming and layout (kernels [in..., out...] as strided views of the
/// out-major matrices; Q8_0 matrices are dequantised to f32). Needs host-accessible parameters.
template <TensorPolicy P>
class ParamExporter : public PathStack {
 public:
  using B = typename P::backend;
  using W = typename P::weight_t;
  using A = typename P::act_t;

  ParamExporter() = default;
  /// Parameters in memory the host cannot read are copied to host tensors through `be`.
  explicit ParamExporter(const B* be) : be_(be) {}

  void matrix(std::string_view leaf, Matrix<W>& m, const KernelSpec& s) {
    AnyTensor t = as_any(m);
    // t is [N, K] = [prod(batch) * prod(out), prod(in)]: view it as batch + out + in, then permute to
    // batch + in + out.
    t = t.reshaped(concat(s.batch, concat(s.out, s.in)));
    std::vector<int> perm;
    const int nb = static_cast<int>(s.batch.size()), no = static_cast<int>(s.out.size()),
              ni = static_cast<int>(s.in.size());
    for (int i = 0; i < nb; ++i) perm.push_back(i);
    for (int i = 0; i < ni; ++i) perm.push_back(nb + no + i);
    for (int i = 0; i < no; ++i) perm.push_back(nb + i);
    out.add(path(leaf), t.permuted(perm));
  }
  void table(std::string_view leaf, Matrix<W>& m, std::int64_t, std::int64_t, const VectorSpec&) {
    out.add(path(leaf), as_any(m));
  }
  template <class T>
  void vector(std::string_view leaf, Tensor<T, 1>& v, const VectorSpec& s) {
    MAXTEXT_CHECK(v.host_accessible() || be_, UnsupportedError, "[export] ", path(leaf),
                  ": parameter is not in host memory (export through the model, which knows its backend)");
    out.add(path(leaf), AnyTensor::from(v.host_accessible() ? v : download(*be_, v)).reshaped(s.shape));
  }

  io::TensorMap out;

 private:
  AnyTensor as_any(const Matrix<W>& dev) const {
    MAXTEXT_CHECK(dev.data.host_accessible() || dev.data.empty() || be_, UnsupportedError,
                  "[export] matrix is not in host memory");
    Matrix<W> m = dev;
    if (m.data.empty() && m.packed) {  // rows released after packing (CpuBackend::release_rows): rebuilt from the panels
      if constexpr (requires { be_->unpacked(dev); }) {
        MAXTEXT_CHECK(be_ != nullptr, UnsupportedError, "[export] a packed matrix without its rows: export through the "
                      "model, which knows its backend");
        m.data = be_->unpacked(dev);
      } else {
        MAXTEXT_THROW(UnsupportedError, "[export] a packed matrix without its rows, on a backend that cannot unpack it");
      }
    }
    if (!m.data.host_accessible()) m.data = download(*be_, m.data);
    if constexpr (std::is_same_v<W, ggml_byte>) {
      Tensor<float, 2> f({m.rows, m.cols});
      for (std::int64_t r = 0; r < m.rows; ++r) {
        float* fr = f.data() + r * m.cols;
        quant::dequantize_any(m.ggml_type, reinterpret_cast<const std::byte*>(m.data.data()) + r * m.storage_cols(), fr,
                              m.cols);
        quant::scale_values(fr, m.cols, m.value_scale);
      }
      return AnyTensor::from(f);
    } else if constexpr (std::is_same_v<W, q8_0>) {
      Tensor<float, 2> f({m.rows, m.cols});
      AnyTensor q = AnyTensor::from(m.data);
      q.shape = {m.rows, m.cols};
      for (std::int64_t i = 0; i < m.rows * m.cols; ++i) f.data()[i] = static_cast<float>(q.element(i));
      return AnyTensor::from(f);
    } else {
      return AnyTensor::from(m.data);
    }
  }

  const B* be_ = nullptr;
};

/// A visitor that reads only the parameters' specs (shapes, counts), never their values: a layer need not make its
/// values visitable for it (RoutedMoE then neither rebuilds released expert stacks nor drops its prepared experts).
template <class V>
concept SpecOnlyVisitor = requires { requires V::spec_only; };

/// The shape every parameter takes as a file tensor (batch + in + out for kernels, [rows, cols] for tables), by its
/// path, without touching the parameters: what a rank's model needs from a file holding the whole model
/// (models/parallel.hpp takes each rank's slice by comparing the two).
class ParamShapes final : public PathStack {
 public:
  static constexpr bool spec_only = true;
  template <class M>
  void matrix(std::string_view leaf, M&, const KernelSpec& s) {
    shapes[path(leaf)] = concat(s.batch, concat(s.in, s.out));
  }
  template <class M>
  void table(std::string_view leaf, M&, std::int64_t rows, std::int64_t cols, const VectorSpec&) {
    shapes[path(leaf)] = {rows, cols};
  }
  template <class T>
  void vector(std::string_view leaf, T&, const VectorSpec& s) {
    shapes[path(leaf)] = s.shape;
  }
  std::map<std::string, std::vector<std::int64_t>> shapes;
};

/// Counts parameters (elements) without touching them.
class ParamCounter final : public PathStack {
 public:
  static constexpr bool spec_only = true;
  template <class M>
  void matrix(std::string_view, M&, const KernelSpec& s) {
    count += product(s.batch) * product(s.in) * product(s.out);
  }
  template <class M>
  void table(std::string_view, M&, std::int64_t rows, std::int64_t cols, const VectorSpec&) {
    count += rows * cols;
  }
  template <class T>
  void vector(std::string_view, T&, const VectorSpec& s) {
    count += product(s.shape);
  }
  std::int64_t count = 0;
};

}  // namespace maxtext::layers
