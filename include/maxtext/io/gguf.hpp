// io/gguf.hpp: GGUF files (llama.cpp's model format, versions 1-3): header, typed metadata, tensor infos, and
// zero-copy tensors (F32, F16, BF16, Q8_0, plus the integer types); the other block-quantised types (Q4_0 ... Q6_K,
// IQ4_NL, IQ4_XS: core/ggml_quants.hpp) listed by read_gguf and dequantised to f32 on request
// (dequantize_block_tensors, as load_weights does); and a small writer for tests and tools.
// Layout: magic "GGUF", u32 version, tensor count, metadata count (u64; u32 in v1), the metadata key/values, the
// tensor infos (name, dims innermost-first, ggml type, data offset), padding to `general.alignment` (default 32),
// then the data section. Every malformed input raises IoError "[gguf] FILE: FIELD: what".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// GGUF metadata value types (the numbering is the file format's).
enum class GgufType : std::uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10, i64 = 11,
  f64 = 12
};

inline const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
  }
  return "?";
}

/// One metadata value. Scalars keep their exact value (integers in `i` or `u`, floats in `f`); arrays keep their
/// elements in the member matching the element type (`ints` for signed and unsigned integers and bools, `floats`,
/// `strings`, or `items` for nested arrays).
struct GgufValue {
  GgufType type = GgufType::u32;
  GgufType elem = GgufType::u8;  ///< element type when type == array
  std::int64_t i = 0;            ///< signed integers and bools
  std::uint64_t u = 0;           ///< unsigned integers
  double f = 0.0;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> items;

  static bool is_unsigned(GgufType t) {
    return t == GgufType::u8 || t == GgufType::u16 || t == GgufType::u32 || t == GgufType::u64;
  }
  static bool is_integer(GgufType t) {
    return is_unsigned(t) || t == GgufType::i8 || t == GgufType::i16 || t == GgufType::i32 || t == GgufType::i64;
  }
  static bool is_float(GgufType t) { return t == GgufType::f32 || t == GgufType::f64; }

  bool is_array() const { return type == GgufType::array; }
  /// Number of elements of an array (0 for scalars).
  std::size_t size() const {
    if (!is_array()) return 0;
    if (elem == GgufType::string) return strings.size();
    if (elem == GgufType::array) return items.size();
    if (is_float(elem)) return floats.size();
    return ints.size();
  }

  /// An integer scalar (any integer type or bool) as int64; throws when it is not one or does not fit.
  std::int64_t as_int(const std::string& where) const {
    if (is_unsigned(type)) {
      MAXTEXT_CHECK(u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), IoError, "[gguf] ", where,
                    ": value ", u, " is too large");
      return static_cast<std::int64_t>(u);
    }
    MAXTEXT_CHECK(is_integer(type) || type == GgufType::boolean, IoError, "[gguf] ", where,
                  ": expected an integer, found ", gguf_type_name(type));
    return i;
  }
  /// A number (integer or float scalar) as double.
  double as_float(const std::string& where) const {
    if (is_float(type)) return f;
    MAXTEXT_CHECK(is_integer(type), IoError, "[gguf] ", where, ": expected a number, found ", gguf_type_name(type));
    return is_unsigned(type) ? static_cast<double>(u) : static_cast<double>(i);
  }
  bool as_bool(const std::string& where) const {
    MAXTEXT_CHECK(type == GgufType::boolean, IoError, "[gguf] ", where, ": expected a bool, found ", gguf_type_name(type));
    return i != 0;
  }
  const std::string& as_string(const std::string& where) const {
    MAXTEXT_CHECK(type == GgufType::string, IoError, "[gguf] ", where, ": expected a string, found ",
                  gguf_type_name(type));
    return s;
  }

  // Constructors for writing.
  static GgufValue of_u32(std::uint32_t v) { GgufValue x; x.type = GgufType::u32; x.u = v; return x; }
  static GgufValue of_i32(std::int32_t v) { GgufValue x; x.type = GgufType::i32; x.i = v; return x; }
  static GgufValue of_u64(std::uint64_t v) { GgufValue x; x.type = GgufType::u64; x.u = v; return x; }
  static GgufValue of_f32(float v) { GgufValue x; x.type = GgufType::f32; x.f = v; return x; }
  static GgufValue of_bool(bool v) { GgufValue x; x.type = GgufType::boolean; x.i = v ? 1 : 0; return x; }
  static GgufValue of_string(std::string v) { GgufValue x; x.type = GgufType::string; x.s = std::move(v); return x; }
  static GgufValue of_strings(std::vector<std::string> v) {
    GgufValue x;
    x.type = GgufType::array;
    x.elem = GgufType::string;
    x.strings = std::move(v);
    return x;
  }
  static GgufValue of_f32s(const std::vector<float>& v) {
    GgufValue x;
    x.type = GgufType::array;
    x.elem = GgufType::f32;
    x.floats.assign(v.begin(), v.end());
    return x;
  }
  static GgufValue of_i32s(const std::vector<std::int32_t>& v) {
    GgufValue x;
    x.type = GgufType::array;
    x.elem = GgufType::i32;
    x.ints.assign(v.begin(), v.end());
    return x;
  }
};

/// ggml tensor types this reader maps to a DType (others are named in the error).
namespace detail {
struct GgmlType {
  std::uint32_t id;
  const char* name;
  std::int64_t block;   ///< elements per block (1 for scalars)
  std::int64_t bytes;   ///< bytes per block
  bool supported;
  DType dtype;
};
inline const GgmlType* ggml_type_info(std::uint32_t id) {
  static const GgmlType table[] = {
      {0, "F32", 1, 4, true, DType::f32},        {1, "F16", 1, 2, true, DType::f16},
      {2, "Q4_0", 32, 18, false, DType::u8},     {3, "Q4_1", 32, 20, false, DType::u8},
      {6, "Q5_0", 32, 22, false, DType::u8},     {7, "Q5_1", 32, 24, false, DType::u8},
      {8, "Q8_0", 32, 34, true, DType::q8_0},    {9, "Q8_1", 32, 36, false, DType::u8},
      {10, "Q2_K", 256, 84, false, DType::u8},   {11, "Q3_K", 256, 110, false, DType::u8},
      {12, "Q4_K", 256, 144, false, DType::u8},  {13, "Q5_K", 256, 176, false, DType::u8},
      {14, "Q6_K", 256, 210, false, DType::u8},  {15, "Q8_K", 256, 292, false, DType::u8},
      {16, "IQ2_XXS", 256, 66, false, DType::u8}, {17, "IQ2_XS", 256, 74, false, DType::u8},
      {18, "IQ3_XXS", 256, 98, false, DType::u8}, {19, "IQ1_S", 256, 50, false, DType::u8},
      {20, "IQ4_NL", 32, 18, false, DType::u8},  {21, "IQ3_S", 256, 110, false, DType::u8},
      {22, "IQ2_S", 256, 82, false, DType::u8},  {23, "IQ4_XS", 256, 136, false, DType::u8},
      {24, "I8", 1, 1, true, DType::i8},         {25, "I16", 1, 2, true, DType::i16},
      {26, "I32", 1, 4, true, DType::i32},       {27, "I64", 1, 8, true, DType::i64},
      {28, "F64", 1, 8, true, DType::f64},       {29, "IQ1_M", 256, 56, false, DType::u8},
      {30, "BF16", 1, 2, true, DType::bf16},     {39, "MXFP4", 32, 17, true, DType::u8},
  };
  for (const auto& t : table) {
    if (t.id == id) return &t;
  }
  return nullptr;
}
inline std::uint32_t ggml_type_of(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::q8_0: return 8;
    case DType::i8: return 24;
    case DType::i16: return 25;
    case DType::i32: return 26;
    case DType::i64: return 27;
    case DType::f64: return 28;
    case DType::bf16: return 30;
    default: break;
  }
  MAXTEXT_THROW(UnsupportedError, "[gguf] dtype ", dtype_name(t), " has no GGUF tensor type");
}
}  // namespace detail

/// Where one tensor lives in a GGUF file (as listed; dims innermost-first).
struct GgufTensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  ///< innermost first, as in the file
  std::uint32_t ggml_type = 0;
  std::uint64_t offset = 0;         ///< relative to the data section
};

/// A tensor in one of the block-quantised types of core/ggml_quants.hpp other than Q8_0 (which stays a zero-copy
/// q8_0 tensor): its blocks as they lie in the mapped file, validated for size but not yet decoded.
struct GgufBlockTensor {
  std::string name;
  std::vector<std::int64_t> shape;  ///< row-major (the file's dims reversed)
  quant::BlockType type = quant::BlockType::q4_0;
  const std::byte* data = nullptr;
  std::uint64_t bytes = 0;
  std::shared_ptr<const void> holder;  ///< keeps the mapping alive
};

/// A parsed GGUF file. `tensors` are zero-copy views into the mapping with row-major shapes (the file's dims
/// reversed: GGUF [ne0, ne1] = ne1 rows of ne0), named as in the file. Tensors in the other block types
/// (Q4_0 ... IQ4_XS) are in `block_tensors` instead until dequantize_block_tensors() decodes them into `tensors`.
struct GgufFile {
  std::string path;
  std::uint32_t version = 3;
  std::uint64_t alignment = 32;
  std::uint64_t data_offset = 0;  ///< absolute offset of the data section
  std::map<std::string, GgufValue> metadata;
  std::vector<std::string> metadata_order;
  std::vector<GgufTensorInfo> infos;
  TensorMap tensors;
  std::vector<GgufBlockTensor> block_tensors;
  /// The data section in the file's mapping (kept alive by the tensors' holders).
  const std::byte* data = nullptr;
  std::size_t data_bytes = 0;

  /// The row-major shape of tensor `name` as listed in the file (whatever its type), or nullopt.
  std::optional<std::vector<std::int64_t>> tensor_shape(const std::string& name) const {
    for (const auto& info : infos) {
      if (info.name != name) continue;
      std::vector<std::int64_t> shape;
      for (auto it = info.dims.rbegin(); it != info.dims.rend(); ++it) shape.push_back(static_cast<std::int64_t>(*it));
      return shape;
    }
    return std::nullopt;
  }

  /// The vocabulary size: the rows of token_embd.weight (whatever its type, block-quantised included), else the
  /// metadata key `<arch_prefix>vocab_size`.
  std::int64_t vocab_size(const std::string& arch_prefix) const {
    if (const auto shape = tensor_shape("token_embd.weight")) return shape->front();
    return get_int(arch_prefix + "vocab_size");
  }

  bool has(const std::string& key) const { return metadata.count(key) != 0; }
  const GgufValue* find(const std::string& key) const {
    auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : &it->second;
  }
  const GgufValue& at(const std::string& key) const {
    auto it = metadata.find(key);
    MAXTEXT_CHECK(it != metadata.end(), IoError, "[gguf] ", path, ": missing metadata key ", key);
    return it->second;
  }
  std::string where(const std::string& key) const { return path + ": " + key; }
  std::int64_t get_int(const std::string& key) const { return at(key).as_int(where(key)); }
  std::int64_t get_int(const std::string& key, std::int64_t dflt) const {
    const GgufValue* v = find(key);
    return v ? v->as_int(where(key)) : dflt;
  }
  double get_float(const std::string& key, double dflt) const {
    const GgufValue* v = find(key);
    return v ? v->as_float(where(key)) : dflt;
  }
  bool get_bool(const std::string& key, bool dflt) const {
    const GgufValue* v = find(key);
    return v ? v->as_bool(where(key)) : dflt;
  }
  std::string get_string(const std::string& key, const std::string& dflt = "") const {
    const GgufValue* v = find(key);
    return v ? v->as_string(where(key)) : dflt;
  }
};

/// llama.cpp's `attention.sliding_window_pattern`, a period n (n - 1 local or chunked layers, then 1 global) or one
/// flag per layer (1 = local): true when `v` says "period `period`" for a model of `layers` layers.
inline bool gguf_window_pattern_is(const GgufValue& v, std::int64_t layers, std::int64_t period, const std::string& key) {
  if (!v.is_array()) return v.as_int(key) == period;
  if (static_cast<std::int64_t>(v.ints.size()) != layers) return false;
  for (std::size_t i = 0; i < v.ints.size(); ++i) {
    if ((v.ints[i] != 0) != (static_cast<std::int64_t>(i) % period < period - 1)) return false;
  }
  return true;
}

namespace detail {

/// Bounds-checked little-endian reader over a byte range.
class GgufCursor {
 public:
  GgufCursor(const std::byte* base, std::size_t size, std::string path) : base_(base), size_(size), path_(std::move(path)) {}
  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return size_ - pos_; }
  void need(std::size_t n, const std::string& what) const {
    MAXTEXT_CHECK(n <= remaining(), IoError, "[gguf] ", path_, ": ", what, ": needs ", n, " bytes at offset ", pos_,
                  ", only ", remaining(), " remain (truncated file?)");
  }
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what, bool v1) {
    const std::uint64_t n = v1 ? read<std::uint32_t>(what + " (string length)") : read<std::uint64_t>(what + " (string length)");
    MAXTEXT_CHECK(n <= remaining(), IoError, "[gguf] ", path_, ": ", what, ": string of ", n, " bytes at offset ", pos_,
                  " runs past the end of the file (", remaining(), " bytes remain)");
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  const std::string& path() const { return path_; }

 private:
  const std::byte* base_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::string path_;
};

inline std::size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    default: return 0;
  }
}

inline GgufType gguf_type_checked(std::uint32_t raw, const std::string& path, const std::string& what) {
  MAXTEXT_CHECK(raw <= 12, IoError, "[gguf] ", path, ": ", what, ": unknown value type ", raw);
  return static_cast<GgufType>(raw);
}

inline void read_gguf_scalar(GgufCursor& c, GgufType t, GgufValue& v, const std::string& what) {
  switch (t) {
    case GgufType::u8: v.u = c.read<std::uint8_t>(what); break;
    case GgufType::i8: v.i = c.read<std::int8_t>(what); break;
    case GgufType::u16: v.u = c.read<std::uint16_t>(what); break;
    case GgufType::i16: v.i = c.read<std::int16_t>(what); break;
    case GgufType::u32: v.u = c.read<std::uint32_t>(what); break;
    case GgufType::i32: v.i = c.read<std::int32_t>(what); break;
    case GgufType::u64: v.u = c.read<std::uint64_t>(what); break;
    case GgufType::i64: v.i = c.read<std::int64_t>(what); break;
    case GgufType::f32: v.f = c.read<float>(what); break;
    case GgufType::f64: v.f = c.read<double>(what); break;
    case GgufType::boolean: {
      const std::uint8_t b = c.read<std::uint8_t>(what);
      MAXTEXT_CHECK(b <= 1, IoError, "[gguf] ", c.path(), ": ", what, ": bool value ", static_cast<int>(b), " is not 0 or 1");
      v.i = b;
      break;
    }
    default: MAXTEXT_THROW(IoError, "[gguf] ", c.path(), ": ", what, ": not a scalar type");
  }
}

inline GgufValue read_gguf_value(GgufCursor& c, GgufType t, const std::string& what, bool v1, int depth) {
  GgufValue v;
  v.type = t;
  if (t == GgufType::string) {
    v.s = c.read_string(what, v1);
    return v;
  }
  if (t != GgufType::array) {
    read_gguf_scalar(c, t, v, what);
    return v;
  }
  MAXTEXT_CHECK(depth < 8, IoError, "[gguf] ", c.path(), ": ", what, ": arrays nested deeper than 8 levels");
  v.elem = gguf_type_checked(c.read<std::uint32_t>(what + " (array type)"), c.path(), what + " (array type)");
  const std::uint64_t n = v1 ? c.read<std::uint32_t>(what + " (array length)") : c.read<std::uint64_t>(what + " (array length)");
  // Every element takes at least one byte (strings and arrays at least their length field): bound n by what is left.
  const std::size_t min_elem = v.elem == GgufType::string || v.elem == GgufType::array ? (v1 ? 4 : 8) : gguf_scalar_size(v.elem);
  MAXTEXT_CHECK(n <= c.remaining() / std::max<std::size_t>(min_elem, 1), IoError, "[gguf] ", c.path(), ": ", what,
                ": array of ", n, " ", gguf_type_name(v.elem), " elements runs past the end of the file (",
                c.remaining(), " bytes remain)");
  const auto count = static_cast<std::size_t>(n);
  if (v.elem == GgufType::string) {
    v.strings.reserve(count);
    for (std::size_t k = 0; k < count; ++k) v.strings.push_back(c.read_string(what + "[" + std::to_string(k) + "]", v1));
  } else if (v.elem == GgufType::array) {
    v.items.reserve(count);
    for (std::size_t k = 0; k < count; ++k) {
      v.items.push_back(read_gguf_value(c, GgufType::array, what + "[" + std::to_string(k) + "]", v1, depth + 1));
    }
  } else if (GgufValue::is_float(v.elem)) {
    v.floats.resize(count);
    for (std::size_t k = 0; k < count; ++k) {
      GgufValue e;
      read_gguf_scalar(c, v.elem, e, what);
      v.floats[k] = e.f;
    }
  } else {
    v.ints.resize(count);
    for (std::size_t k = 0; k < count; ++k) {
      GgufValue e;
      read_gguf_scalar(c, v.elem, e, what);
      v.ints[k] = GgufValue::is_unsigned(v.elem) ? static_cast<std::int64_t>(e.u) : e.i;
    }
  }
  return v;
}

}  // namespace detail

/// Parse a GGUF file (memory-mapped). Tensors of types F32, F16, BF16, F64, Q8_0 and the integer types become
/// zero-copy AnyTensor views; Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K, IQ4_NL and IQ4_XS tensors are listed in
/// `block_tensors` (sizes checked; decode them with dequantize_block_tensors); other ggml types (IQ2, IQ3, ...)
/// raise UnsupportedError naming the tensor.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API GgufFile read_gguf(const std::string& path) {
  auto file = MappedFile::open(path);
  GgufFile g;
  g.path = path;
  detail::GgufCursor c(file->data(), file->size(), path);
  c.need(4, "magic");
  MAXTEXT_CHECK(std::memcmp(file->data(), "GGUF", 4) == 0, IoError, "[gguf] ", path,
                ": magic: expected \"GGUF\", found bytes ",
                std::to_string(static_cast<int>(file->data()[0])), ",", std::to_string(static_cast<int>(c.remaining() > 1 ? file->data()[1] : std::byte{0})),
                ",...");
  (void)c.read<std::uint32_t>("magic");
  g.version = c.read<std::uint32_t>("version");
  MAXTEXT_CHECK(g.version >= 1 && g.version <= 3, IoError, "[gguf] ", path, ": version: expected 1, 2 or 3, found ", g.version);
  const bool v1 = g.version == 1;
  const std::uint64_t n_tensors = v1 ? c.read<std::uint32_t>("tensor count") : c.read<std::uint64_t>("tensor count");
  const std::uint64_t n_kv = v1 ? c.read<std::uint32_t>("metadata count") : c.read<std::uint64_t>("metadata count");
  // A key/value takes at least 12 bytes, a tensor info at least 24: counts beyond that cannot be real.
  MAXTEXT_CHECK(n_kv <= c.remaining() / 12, IoError, "[gguf] ", path, ": metadata count ", n_kv,
                " is impossible for a file of ", file->size(), " bytes");
  MAXTEXT_CHECK(n_tensors <= c.remaining() / 20, IoError, "[gguf] ", path, ": tensor count ", n_tensors,
                " is impossible for a file of ", file->size(), " bytes");
  for (std::uint64_t k = 0; k < n_kv; ++k) {
    const std::string key = c.read_string("metadata key #" + std::to_string(k), v1);
    const auto type = detail::gguf_type_checked(c.read<std::uint32_t>("metadata " + key + " (type)"), path,
                                                "metadata " + key + " (type)");
    GgufValue v = detail::read_gguf_value(c, type, "metadata " + key, v1, 0);
    MAXTEXT_CHECK(g.metadata.emplace(key, std::move(v)).second, IoError, "[gguf] ", path, ": metadata key ", key,
                  " appears twice");
    g.metadata_order.push_back(key);
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    const std::int64_t al = a->as_int(g.where("general.alignment"));
    MAXTEXT_CHECK(al > 0 && (al & (al - 1)) == 0 && al <= (1 << 20), IoError, "[gguf] ", path,
                  ": general.alignment: expected a power of two, found ", al);
    g.alignment = static_cast<std::uint64_t>(al);
  }
  std::set<std::string> names;
  for (std::uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo info;
    info.name = c.read_string("tensor info #" + std::to_string(k) + " (name)", v1);
    const std::string what = "tensor " + info.name;
    MAXTEXT_CHECK(names.insert(info.name).second, IoError, "[gguf] ", path, ": ", what, " appears twice");
    const std::uint32_t n_dims = c.read<std::uint32_t>(what + " (n_dims)");
    MAXTEXT_CHECK(n_dims >= 1 && n_dims <= 4, IoError, "[gguf] ", path, ": ", what, ": n_dims: expected 1 to 4, found ", n_dims);
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t e = v1 ? c.read<std::uint32_t>(what + " (dims)") : c.read<std::uint64_t>(what + " (dims)");
      info.dims.push_back(e);
    }
    info.ggml_type = c.read<std::uint32_t>(what + " (type)");
    info.offset = c.read<std::uint64_t>(what + " (offset)");
    g.infos.push_back(std::move(info));
  }
  const std::size_t header_end = c.pos();
  g.data_offset = (header_end + g.alignment - 1) / g.alignment * g.alignment;
  MAXTEXT_CHECK(g.data_offset <= file->size() || n_tensors == 0, IoError, "[gguf] ", path, ": data section at offset ",
                g.data_offset, " starts past the end of the file (", file->size(), " bytes)");
  const std::uint64_t data_size = g.data_offset <= file->size() ? file->size() - g.data_offset : 0;
  const std::byte* data = file->data() + std::min<std::uint64_t>(g.data_offset, file->size());
  g.data = data;
  g.data_bytes = static_cast<std::size_t>(data_size);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& info : g.infos) {
    const std::string what = "tensor " + info.name;
    const auto* ti = detail::ggml_type_info(info.ggml_type);
    MAXTEXT_CHECK(ti != nullptr, IoError, "[gguf] ", path, ": ", what, ": unknown ggml type ", info.ggml_type);
    const quant::BlockFormat* bf = ti->supported ? nullptr : quant::block_format(info.ggml_type);
    MAXTEXT_CHECK(ti->supported || bf != nullptr, UnsupportedError, "[gguf] ", path, ": ", what, ": ggml type ",
                  ti->name, " (", info.ggml_type, ") is not supported (supported: F32, F16, BF16, F64, Q8_0, Q4_0, "
                  "Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, I8-I64; MXFP4 for gpt-oss experts)");
    // Element count with overflow checks (every dim < 2^50 and the product too, zero dims counted as one).
    std::vector<std::int64_t> dims;
    for (auto d : info.dims) {
      MAXTEXT_CHECK(d < (std::uint64_t{1} << 50), IoError, "[gguf] ", path, ": ", what, ": dims ",
                    std::vector<std::uint64_t>(info.dims), " are too large");
      dims.push_back(static_cast<std::int64_t>(d));
    }
    const auto n = static_cast<std::uint64_t>(checked_numel(dims, "gguf", path + ": " + what));
    MAXTEXT_CHECK(static_cast<std::int64_t>(info.dims[0]) % ti->block == 0, IoError, "[gguf] ", path, ": ", what, ": ",
                  ti->name, " needs the innermost dim (", info.dims[0], ") to be a multiple of ", ti->block);
    const std::uint64_t bytes = n / static_cast<std::uint64_t>(ti->block) * static_cast<std::uint64_t>(ti->bytes);
    MAXTEXT_CHECK(info.offset % g.alignment == 0, IoError, "[gguf] ", path, ": ", what, ": data offset ", info.offset,
                  " is not a multiple of the alignment ", g.alignment);
    // The tensor is read in place: its first element must sit at an address its type may be loaded from (element
    // size for plain types, the fp16 scale for Q8_0; the other block types are u8 bytes). A power-of-two
    // general.alignment below that (1 or 2) would otherwise misalign f32 / f16 data.
    const std::uint64_t natural = AnyTensor::alignment_of(ti->dtype);
    MAXTEXT_CHECK((g.data_offset + info.offset) % natural == 0, IoError, "[gguf] ", path, ": ", what, ": data at file "
                  "offset ", g.data_offset + info.offset, " is not aligned to ", natural, " bytes, which its type ",
                  ti->name, " needs (general.alignment ", g.alignment, ")");
    MAXTEXT_CHECK(info.offset <= data_size && bytes <= data_size - info.offset, IoError, "[gguf] ", path, ": ", what,
                  ": data [", info.offset, ", ", info.offset + bytes, ") lies outside the data section of ", data_size,
                  " bytes (truncated file?)");
    ranges.emplace_back(info.offset, info.offset + bytes);
    if (bf != nullptr) {
      GgufBlockTensor b;
      b.name = info.name;
      for (auto it = info.dims.rbegin(); it != info.dims.rend(); ++it) b.shape.push_back(static_cast<std::int64_t>(*it));
      b.type = bf->type;
      b.data = data + info.offset;
      b.bytes = bytes;
      b.holder = file;
      g.block_tensors.push_back(std::move(b));
      continue;
    }
    AnyTensor t;
    t.dtype = ti->dtype;
    for (auto it = info.dims.rbegin(); it != info.dims.rend(); ++it) t.shape.push_back(static_cast<std::int64_t>(*it));
    if (info.ggml_type == 39) {
      // MXFP4: raw 17-byte blocks (e8m0 scale, 16 bytes of e2m1 pairs) as u8 [..., ne0 / 32, 17]; only the gpt-oss
      // importer (families/gpt_oss/import.hpp dequantize_ggml_mxfp4) reads them, load_weights refuses them elsewhere.
      t.shape.back() /= ti->block;
      t.shape.push_back(ti->bytes);
    }
    t.strides = AnyTensor::dense_strides(t.shape, t.dtype);
    t.data = data + info.offset;
    t.holder = file;
    t.source = path + ": " + info.name;
    g.tensors.add(info.name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    MAXTEXT_CHECK(ranges[i].first >= ranges[i - 1].second, IoError, "[gguf] ", path,
                  ": tensor data ranges overlap at data offset ", ranges[i].first);
  }
  for (const auto& [k, v] : g.metadata) {
    if (v.type == GgufType::string) g.tensors.metadata[k] = v.s;
  }
  return g;
}
#else
GgufFile read_gguf(const std::string& path);
#endif

/// Decode `b` into a new f32 tensor (row-major, b.shape). A block whose fp16 scale is NaN or infinite raises IoError
/// naming the file, the tensor and the block.
inline AnyTensor dequantize_block_tensor(const GgufBlockTensor& b, const std::string& path) {
  const quant::BlockFormat& f = quant::block_format(b.type);
  std::int64_t n = 1;
  for (auto d : b.shape) n *= d;
  MAXTEXT_CHECK(n % f.block == 0 && static_cast<std::uint64_t>(n / f.block * f.bytes) == b.bytes, IoError, "[gguf] ",
                path, ": tensor ", b.name, ": ", f.name, " data of ", b.bytes, " bytes does not hold ", n, " values");
  Tensor<float, 1> out(Shape<1>{n});
  for (std::int64_t k = 0; k < n / f.block; ++k) {
    const std::byte* blk = b.data + k * f.bytes;
    if (!quant::block_scales_finite(f, blk)) {
      const std::int64_t row_len = b.shape.back();
      MAXTEXT_THROW(IoError, "[gguf] ", path, ": tensor ", b.name, ": ", f.name, " block ", k, " (row ",
                    k * f.block / row_len, ", column ", k * f.block % row_len, ") has a NaN or infinite scale");
    }
    quant::dequantize_block(b.type, blk, out.data() + k * f.block);
  }
  AnyTensor t = AnyTensor::from(out, path + ": " + b.name + " (" + f.name + ", dequantised)");
  t.shape = b.shape;
  t.strides = AnyTensor::dense_strides(t.shape, DType::f32);
  return t;
}

/// Check every Q8_0 tensor's block scales (a NaN or infinite one raises IoError naming the tensor, block, row and
/// column); `drop_pages`: hand the pages read back (core/mapped_pages.hpp).
inline void check_q8_0_scales(const GgufFile& g, bool drop_pages) {
  const quant::BlockFormat& q8 = quant::block_format(quant::BlockType::q8_0);
  for (const auto& [name, t] : g.tensors.tensors) {
    if (t.dtype != DType::q8_0 || !t.is_contiguous()) continue;
    const std::int64_t nb = t.numel() / q8.block;
    // A branch-free pass over a run of blocks' scale exponents (the scale is each block's first two bytes); only a
    // run holding a NaN or infinite scale is walked again, to name the block.
    for (std::int64_t k0 = 0; k0 < nb; k0 += 4096) {
      const std::int64_t k1 = std::min<std::int64_t>(nb, k0 + 4096);
      unsigned finite = 1;
      for (std::int64_t k = k0; k < k1; ++k) {
        std::uint16_t h;
        std::memcpy(&h, t.data + k * q8.bytes, 2);
        finite &= static_cast<unsigned>((h & 0x7c00u) != 0x7c00u);
      }
      if (finite != 0) continue;
      for (std::int64_t k = k0; k < k1; ++k) {
        MAXTEXT_CHECK(quant::block_scales_finite(q8, t.data + k * q8.bytes), IoError, "[gguf] ", g.path, ": tensor ",
                      name, ": Q8_0 block ", k, " (row ", k * q8.block / t.shape.back(), ", column ",
                      k * q8.block % t.shape.back(), ") has a NaN or infinite scale");
      }
    }
    if (drop_pages) drop_mapped_pages(t.data, static_cast<std::size_t>(t.numel() / q8.block) * q8.bytes);
  }
}

/// `b` as it lies in the mapping: a runtime-typed (DType::ggml) view, for models that compute from the blocks
/// (ggml_byte weights). Every block's fp16 scales are checked: a NaN or infinite one raises IoError naming the file,
/// the tensor and the block.
inline AnyTensor block_tensor_view(const GgufBlockTensor& b, const std::string& path) {
  const quant::BlockFormat& f = quant::block_format(b.type);
  std::int64_t n = 1;
  for (auto d : b.shape) n *= d;
  MAXTEXT_CHECK(n % f.block == 0 && static_cast<std::uint64_t>(n / f.block * f.bytes) == b.bytes, IoError, "[gguf] ",
                path, ": tensor ", b.name, ": ", f.name, " data of ", b.bytes, " bytes does not hold ", n, " values");
  for (std::int64_t k = 0; k < n / f.block; ++k) {
    if (!quant::block_scales_finite(f, b.data + k * f.bytes)) {
      const std::int64_t row_len = b.shape.back();
      MAXTEXT_THROW(IoError, "[gguf] ", path, ": tensor ", b.name, ": ", f.name, " block ", k, " (row ",
                    k * f.block / row_len, ", column ", k * f.block % row_len, ") has a NaN or infinite scale");
    }
  }
  AnyTensor t;
  t.dtype = DType::ggml;
  t.ggml_type = static_cast<std::uint32_t>(b.type);
  t.shape = b.shape;
  t.strides = AnyTensor::dense_strides(t.shape, DType::ggml);
  t.data = b.data;
  t.holder = b.holder;
  t.source = path + ": " + b.name + " (" + f.name + ")";
  return t;
}

/// Whether `g` holds block-quantised tensors: any of `block_tensors` (Q4_0 ... IQ4_XS) or a Q8_0 tensor.
inline bool has_block_tensors(const GgufFile& g) {
  if (!g.block_tensors.empty()) return true;
  for (const auto& [name, t] : g.tensors.tensors) {
    if (t.dtype == DType::q8_0) return true;
  }
  return false;
}

/// Move every tensor of `g.block_tensors` into `g.tensors` as it lies (block_tensor_view), and relabel the contiguous
/// Q8_0 tensors, and the F32 / F16 / BF16 ones of two or more dimensions (the matrices), as the runtime-typed
/// (DType::ggml) views of the same bytes: the model computes from the file's own rows, and an importer treats every
/// matrix alike (a query scale rides as value_scale, rotary lanes are re-paired by whole rows: io/attention_kernels.hpp).
/// The Q8_0 tensors' scales are checked as dequantize_block_tensors does. `populate` false (a pipeline stage, which
/// reads only its own layers' tensors): the pages are not mapped ahead, and each block tensor's pages (Q8_0, Q4_K,
/// Q6_K, ...) are handed back once its scales are checked, so that the process keeps only what its model then reads.
inline void keep_block_tensors(GgufFile& g, bool populate = true) {
  // The model reads these pages where they lie: map them all now, in one call, rather than a page fault at a time
  // while the scales are checked and the first tokens run (llama.cpp maps its files with MAP_POPULATE alike).
  if (populate) populate_mapped_pages(g.data, g.data_bytes);
  for (const auto& b : g.block_tensors) {
    g.tensors.add(b.name, block_tensor_view(b, g.path));
    if (!populate) drop_mapped_pages(b.data, static_cast<std::size_t>(b.bytes));
  }
  g.block_tensors.clear();
  check_q8_0_scales(g, !populate);
  for (auto& [name, t] : g.tensors.tensors) {
    if (!t.is_contiguous()) continue;
    std::uint32_t type = 0;
    switch (t.dtype) {
      case DType::q8_0: type = static_cast<std::uint32_t>(quant::BlockType::q8_0); break;  // [d f16][32 x int8]
      case DType::f32: type = quant::kTypeF32; break;
      case DType::f16: type = quant::kTypeF16; break;
      case DType::bf16: type = quant::kTypeBF16; break;
      default: continue;
    }
    if (t.dtype != DType::q8_0 && t.rank() < 2) continue;  // norm scales and biases stay as they are
    t.dtype = DType::ggml;
    t.ggml_type = type;
    t.strides = AnyTensor::dense_strides(t.shape, DType::ggml);
    t.block_axis = -1;
  }
}

/// Decode every tensor of `g.block_tensors` to f32 into `g.tensors` (the block tensors are then dropped), and check
/// the scales of the Q8_0 tensors, which stay blocks: a NaN or infinite scale raises IoError naming the tensor.
inline void dequantize_block_tensors(GgufFile& g) {
  check_q8_0_scales(g, true);  // their pages are read again when packed
  for (const auto& b : g.block_tensors) {
    g.tensors.add(b.name, dequantize_block_tensor(b, g.path));
    drop_mapped_pages(b.data, b.bytes);  // decoded: the file's blocks are not read again
  }
  g.block_tensors.clear();
}

/// Builds a GGUF (version 3) file: metadata in insertion order, tensors with row-major shapes (written innermost
/// first) and data aligned to `alignment`.
class GgufWriter {
 public:
  explicit GgufWriter(std::uint64_t alignment = 32) : alignment_(alignment) {
    MAXTEXT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, ArgumentError,
                  "[gguf] alignment must be a power of two, found ", alignment);
    if (alignment != 32) set("general.alignment", GgufValue::of_u32(static_cast<std::uint32_t>(alignment)));
  }

  void set(const std::string& key, GgufValue v) {
    if (!meta_.count(key)) order_.push_back(key);
    meta_[key] = std::move(v);
  }
  /// Add a tensor (any layout; written contiguous). `as` converts floats to another storage type (f32, f16, bf16,
  /// or q8_0, which quantises 32-element blocks along the last axis as llama.cpp does); by default t's own dtype.
  void add_tensor(const std::string& name, const AnyTensor& t, std::optional<DType> as = std::nullopt) {
    MAXTEXT_CHECK(!names_.count(name), ArgumentError, "[gguf] tensor ", name, " added twice");
    MAXTEXT_CHECK(t.rank() >= 1 && t.rank() <= 4, ArgumentError, "[gguf] tensor ", name, ": rank ", t.rank(),
                  " (GGUF allows 1 to 4)");
    const DType target = as.value_or(t.dtype);
    (void)detail::ggml_type_of(target);
    Entry e;
    e.name = name;
    e.shape = t.shape;
    e.dtype = target;
    e.ggml_type = detail::ggml_type_of(target);
    e.bytes = encode(t, target, name);
    names_.insert(name);
    tensors_.push_back(std::move(e));
  }

  /// Add a tensor of ggml type `ggml_type` (any id, e.g. a block type of core/ggml_quants.hpp) whose data are `data`
  /// as given: nothing is checked, so tests can write malformed files too.
  void add_raw_tensor(const std::string& name, std::vector<std::int64_t> shape, std::uint32_t ggml_type,
                      std::vector<std::byte> data) {
    MAXTEXT_CHECK(!names_.count(name), ArgumentError, "[gguf] tensor ", name, " added twice");
    Entry e;
    e.name = name;
    e.shape = std::move(shape);
    e.ggml_type = ggml_type;
    e.bytes = std::move(data);
    names_.insert(name);
    tensors_.push_back(std::move(e));
  }

  /// The file's bytes.
  std::vector<std::byte> bytes() const {
    std::vector<std::byte> out;
    auto put = [&](const void* p, std::size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      out.insert(out.end(), b, b + n);
    };
    auto put_u32 = [&](std::uint32_t v) { put(&v, 4); };
    auto put_u64 = [&](std::uint64_t v) { put(&v, 8); };
    auto put_str = [&](const std::string& s) {
      put_u64(s.size());
      put(s.data(), s.size());
    };
    put("GGUF", 4);
    put_u32(3);
    put_u64(tensors_.size());
    put_u64(order_.size());
    for (const auto& k : order_) {
      put_str(k);
      put_value(out, meta_.at(k));
    }
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (const auto& e : tensors_) {
      put_str(e.name);
      put_u32(static_cast<std::uint32_t>(e.shape.size()));
      for (auto it = e.shape.rbegin(); it != e.shape.rend(); ++it) put_u64(static_cast<std::uint64_t>(*it));
      put_u32(e.ggml_type);
      put_u64(offset);
      offsets.push_back(offset);
      offset = (offset + e.bytes.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, std::byte{0});
    const std::size_t base = out.size();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(base + offsets[i], std::byte{0});
      out.insert(out.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
    }
    return out;
  }
  void write(const std::string& path) const {
    const auto b = bytes();
    write_file(path, b.data(), b.size());
  }

 private:
  struct Entry {
    std::string name;
    std::vector<std::int64_t> shape;
    DType dtype = DType::f32;
    std::uint32_t ggml_type = 0;
    std::vector<std::byte> bytes;
  };

  static void put_scalar(std::vector<std::byte>& out, GgufType t, std::int64_t i, std::uint64_t u, double f) {
    auto put = [&](const void* p, std::size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      out.insert(out.end(), b, b + n);
    };
    switch (t) {
      case GgufType::u8: { const auto v = static_cast<std::uint8_t>(u); put(&v, 1); break; }
      case GgufType::i8: { const auto v = static_cast<std::int8_t>(i); put(&v, 1); break; }
      case GgufType::u16: { const auto v = static_cast<std::uint16_t>(u); put(&v, 2); break; }
      case GgufType::i16: { const auto v = static_cast<std::int16_t>(i); put(&v, 2); break; }
      case GgufType::u32: { const auto v = static_cast<std::uint32_t>(u); put(&v, 4); break; }
      case GgufType::i32: { const auto v = static_cast<std::int32_t>(i); put(&v, 4); break; }
      case GgufType::u64: { put(&u, 8); break; }
      case GgufType::i64: { put(&i, 8); break; }
      case GgufType::f32: { const auto v = static_cast<float>(f); put(&v, 4); break; }
      case GgufType::f64: { put(&f, 8); break; }
      case GgufType::boolean: { const auto v = static_cast<std::uint8_t>(i != 0); put(&v, 1); break; }
      default: MAXTEXT_THROW(ArgumentError, "[gguf] not a scalar type");
    }
  }
  static void put_value(std::vector<std::byte>& out, const GgufValue& v) {
    auto put = [&](const void* p, std::size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      out.insert(out.end(), b, b + n);
    };
    const auto t = static_cast<std::uint32_t>(v.type);
    put(&t, 4);
    put_payload(out, v);
  }
  static void put_payload(std::vector<std::byte>& out, const GgufValue& v) {
    auto put = [&](const void* p, std::size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      out.insert(out.end(), b, b + n);
    };
    auto put_str = [&](const std::string& s) {
      const std::uint64_t n = s.size();
      put(&n, 8);
      put(s.data(), s.size());
    };
    if (v.type == GgufType::string) {
      put_str(v.s);
      return;
    }
    if (v.type != GgufType::array) {
      put_scalar(out, v.type, v.i, v.u, v.f);
      return;
    }
    const auto et = static_cast<std::uint32_t>(v.elem);
    put(&et, 4);
    const std::uint64_t n = v.size();
    put(&n, 8);
    if (v.elem == GgufType::string) {
      for (const auto& s : v.strings) put_str(s);
    } else if (v.elem == GgufType::array) {
      for (const auto& item : v.items) put_payload(out, item);
    } else if (GgufValue::is_float(v.elem)) {
      for (double f : v.floats) put_scalar(out, v.elem, 0, 0, f);
    } else {
      for (std::int64_t x : v.ints) put_scalar(out, v.elem, x, static_cast<std::uint64_t>(x), 0.0);
    }
  }

  static std::vector<std::byte> encode(const AnyTensor& t, DType target, const std::string& name) {
    const std::int64_t n = t.numel();
    const std::int64_t cols = t.shape.back();
    std::vector<std::byte> out;
    if (target == t.dtype && t.is_contiguous()) {
      const std::size_t bytes = static_cast<std::size_t>(n / dtype_block(t.dtype)) * dtype_size(t.dtype);
      out.resize(bytes);
      std::memcpy(out.data(), t.data, bytes);
      return out;
    }
    if (target == DType::q8_0) {
      MAXTEXT_CHECK(cols % q8_0::block == 0, ArgumentError, "[gguf] tensor ", name, ": Q8_0 needs the last dim (", cols,
                    ") to be a multiple of 32");
      Tensor<q8_0, 2> q = to_matrix<q8_0>(t, identity_perm(t.rank()), t.rank() - 1);
      out.resize(static_cast<std::size_t>(q.size()) * sizeof(q8_0));
      std::memcpy(out.data(), q.data(), out.size());
      return out;
    }
    out.resize(static_cast<std::size_t>(n) * dtype_size(target));
    for (std::int64_t k = 0; k < n; ++k) {
      const double v = t.element(k);
      std::byte* p = out.data() + static_cast<std::size_t>(k) * dtype_size(target);
      switch (target) {
        case DType::f32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
        case DType::f64: { std::memcpy(p, &v, 8); break; }
        case DType::f16: { const fp16 h(static_cast<float>(v)); std::memcpy(p, &h.bits, 2); break; }
        case DType::bf16: { const bf16 h(static_cast<float>(v)); std::memcpy(p, &h.bits, 2); break; }
        case DType::i8: { const auto x = static_cast<std::int8_t>(v); std::memcpy(p, &x, 1); break; }
        case DType::i16: { const auto x = static_cast<std::int16_t>(v); std::memcpy(p, &x, 2); break; }
        case DType::i32: { const auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); break; }
        case DType::i64: { const auto x = static_cast<std::int64_t>(v); std::memcpy(p, &x, 8); break; }
        default: MAXTEXT_THROW(ArgumentError, "[gguf] tensor ", name, ": cannot store as ", dtype_name(target));
      }
    }
    return out;
  }
  static std::vector<int> identity_perm(int r) {
    std::vector<int> p(static_cast<std::size_t>(r));
    for (int i = 0; i < r; ++i) p[static_cast<std::size_t>(i)] = i;
    return p;
  }

  std::uint64_t alignment_;
  std::map<std::string, GgufValue> meta_;
  std::vector<std::string> order_;
  std::vector<Entry> tensors_;
  std::set<std::string> names_;
};

}  // namespace maxtext::io
