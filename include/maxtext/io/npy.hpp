// io/npy.hpp: NumPy .npy files (format 1.0/2.0/3.0, little-endian, C or Fortran order) to and from AnyTensor.
//
// dtypes: f8 f4 f2 i8 i4 i2 i1 u1 b1, and bfloat16. NumPy has no bfloat16: JAX / ml_dtypes arrays are saved by
// np.save with the descriptor '<V2' (a 2-byte void, since ml_dtypes' types use the 'V' kind), or 'bfloat16' when a
// tool writes str(dtype); both read as bf16, and bf16 is written as '<V2' (load it in Python with
// np.load(f).view(ml_dtypes.bfloat16)). 'float8_e4m3fn' reads as f8_e4m3. Other 1-byte void types (the float8
// family all save as '<V1') are ambiguous and rejected.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/mapped_file.hpp"

namespace maxtext::io {

namespace detail {
inline DType npy_dtype(const std::string& descr, const std::string& where) {
  // '<' little-endian, '|' not applicable, '=' native (little on every supported host).
  MAXTEXT_CHECK(!descr.empty() && descr[0] != '>', IoError, "[npy] ", where, ": big-endian dtype '", descr,
                "' is not supported (save with arr.astype(arr.dtype.newbyteorder('<')))");
  const std::string t = (descr[0] == '<' || descr[0] == '|' || descr[0] == '=') ? descr.substr(1) : descr;
  if (t == "f8") return DType::f64;
  if (t == "f4") return DType::f32;
  if (t == "f2") return DType::f16;
  if (t == "i8") return DType::i64;
  if (t == "i4") return DType::i32;
  if (t == "i2") return DType::i16;
  if (t == "i1") return DType::i8;
  if (t == "u1") return DType::u8;
  if (t == "b1") return DType::boolean;
  if (t == "V2" || t == "bfloat16") return DType::bf16;  // ml_dtypes' bfloat16 is saved as 2-byte void
  if (t == "float8_e4m3fn") return DType::f8_e4m3;
  if (t == "V1") {
    MAXTEXT_THROW(IoError, "[npy] ", where, ": dtype '", descr, "' is a 1-byte ml_dtypes type (float8_*, int4, ...) ",
                  "whose kind is not recorded by np.save: save it as float32 (arr.astype(np.float32))");
  }
  MAXTEXT_THROW(IoError, "[npy] ", where, ": unsupported dtype '", descr,
                "': expected one of f8 f4 f2 i8 i4 i2 i1 u1 b1 or bfloat16 (V2)");
}
inline std::string npy_descr(DType t) {
  switch (t) {
    case DType::f64: return "<f8";
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return "<V2";
    case DType::i64: return "<i8";
    case DType::i32: return "<i4";
    case DType::i16: return "<i2";
    case DType::i8: return "|i1";
    case DType::u8: return "|u1";
    case DType::boolean: return "|b1";
    default: break;
  }
  MAXTEXT_THROW(UnsupportedError, "[npy] dtype ", dtype_name(t), " cannot be written to .npy");
}
/// Value of `key` in the header dict text, e.g. 'descr': '<f4' -> <f4.
inline std::string npy_field(const std::string& h, const std::string& key, const std::string& where) {
  auto k = h.find("'" + key + "'");
  if (k == std::string::npos) k = h.find("\"" + key + "\"");
  MAXTEXT_CHECK(k != std::string::npos, IoError, "[npy] ", where, ": header lacks '", key, "': ", h);
  auto p = h.find(':', k);
  MAXTEXT_CHECK(p != std::string::npos, IoError, "[npy] ", where, ": malformed header: ", h);
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p < h.size() && (h[p] == '\'' || h[p] == '"')) {
    const auto e = h.find(h[p], p + 1);
    MAXTEXT_CHECK(e != std::string::npos, IoError, "[npy] ", where, ": malformed header: ", h);
    return h.substr(p + 1, e - p - 1);
  }
  if (p < h.size() && h[p] == '(') {
    const auto e = h.find(')', p);
    MAXTEXT_CHECK(e != std::string::npos, IoError, "[npy] ", where, ": malformed header: ", h);
    return h.substr(p + 1, e - p - 1);
  }
  MAXTEXT_CHECK(p >= h.size() || h[p] != '[', IoError, "[npy] ", where,
                ": structured (record) dtypes are not supported: ", h);
  auto e = h.find_first_of(",}", p);
  std::string v = h.substr(p, e == std::string::npos ? std::string::npos : e - p);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}
}  // namespace detail

/// Parse .npy bytes (e.g. one member of an .npz). `holder` keeps `data` alive; the result views into it (or owns an
/// aligned copy when `data` is misaligned for the dtype). Malformed or truncated input raises IoError naming `where`.
inline AnyTensor parse_npy(const std::byte* data, std::size_t size, std::shared_ptr<const void> holder,
                           const std::string& where) {
  MAXTEXT_CHECK(size >= 10 && std::memcmp(data, "\x93NUMPY", 6) == 0, IoError, "[npy] ", where,
                ": not a .npy file (bad magic)");
  const int major = static_cast<int>(data[6]);
  MAXTEXT_CHECK(major >= 1 && major <= 3, IoError, "[npy] ", where, ": unsupported format version ", major);
  std::size_t hlen = 0, pre = 0;
  if (major == 1) {
    std::uint16_t h;
    std::memcpy(&h, data + 8, 2);
    hlen = h;
    pre = 10;
  } else {
    MAXTEXT_CHECK(size >= 12, IoError, "[npy] ", where, ": truncated header");
    std::uint32_t h;
    std::memcpy(&h, data + 8, 4);
    hlen = h;
    pre = 12;
  }
  MAXTEXT_CHECK(hlen <= size - pre, IoError, "[npy] ", where, ": header length ", hlen, " exceeds the file (", size,
                " bytes; truncated file?)");
  const std::string h(reinterpret_cast<const char*>(data + pre), hlen);
  MAXTEXT_CHECK(h.find('{') != std::string::npos && h.find('}') != std::string::npos, IoError, "[npy] ", where,
                ": header is not a dict: ", h);
  AnyTensor t;
  t.source = where;
  t.dtype = detail::npy_dtype(detail::npy_field(h, "descr", where), where);
  const std::string fo = detail::npy_field(h, "fortran_order", where);
  MAXTEXT_CHECK(fo == "True" || fo == "False", IoError, "[npy] ", where, ": fortran_order must be True or False, found '",
                fo, "'");
  const bool fortran = fo == "True";
  const std::string shp = detail::npy_field(h, "shape", where);
  std::string cur;
  for (char c : shp + ",") {
    if (c == ',') {
      if (!cur.empty()) {
        std::size_t pos = 0;
        long long v = -1;
        try {
          v = std::stoll(cur, &pos);
        } catch (const std::exception&) {
          v = -1;
        }
        MAXTEXT_CHECK(v >= 0 && pos == cur.size(), IoError, "[npy] ", where, ": bad shape (", shp, ")");
        t.shape.push_back(v);
      }
      cur.clear();
    } else if (c != ' ' && c != 'L') {
      cur.push_back(c);
    }
  }
  const std::size_t bytes = static_cast<std::size_t>(checked_numel(t.shape, "npy", where)) * dtype_size(t.dtype);
  MAXTEXT_CHECK(bytes <= size - pre - hlen, IoError, "[npy] ", where, ": data needs ", bytes, " bytes for ",
                t.describe(), ", file has ", size - pre - hlen, " (truncated file?)");
  t.data = data + pre + hlen;
  t.holder = std::move(holder);
  if (fortran) {  // column-major: strides grow from the first axis
    t.strides.assign(t.shape.size(), 1);
    std::int64_t acc = 1;
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      t.strides[i] = acc;
      acc *= t.shape[i];
    }
  } else {
    t.strides = AnyTensor::dense_strides(t.shape, t.dtype);
  }
  t.ensure_aligned(bytes);  // zip members and old .npy headers padded to 16 bytes only
  return t;
}

/// Read a .npy file (memory-mapped).
inline AnyTensor read_npy(const std::string& path) {
  auto f = MappedFile::open(path);
  return parse_npy(f->data(), f->size(), f, path);
}

/// Serialise a tensor as .npy: format 1.0 (2.0 when the header exceeds 65535 bytes), C order by default or
/// Fortran (column-major) order; strided tensors are gathered. The data starts at a multiple of 64 bytes.
inline std::vector<std::byte> npy_bytes(const AnyTensor& t, bool fortran_order = false) {
  std::string shape = "(";
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    shape += std::to_string(t.shape[i]) + (t.shape.size() == 1 ? "," : (i + 1 < t.shape.size() ? ", " : ""));
  }
  shape += ")";
  std::string h = "{'descr': '" + detail::npy_descr(t.dtype) + "', 'fortran_order': " +
                  (fortran_order ? "True" : "False") + ", 'shape': " + shape + ", }";
  const bool v2 = h.size() + 11 + 64 > 65535;
  const std::size_t pre = v2 ? 12 : 10;
  while ((pre + h.size() + 1) % 64 != 0) h.push_back(' ');
  h.push_back('\n');
  const std::size_t es = dtype_size(t.dtype);
  const std::size_t bytes = static_cast<std::size_t>(t.numel()) * es;
  std::vector<std::byte> buf(pre + h.size() + bytes);
  std::memcpy(buf.data(), v2 ? "\x93NUMPY\x02\x00" : "\x93NUMPY\x01\x00", 8);
  if (v2) {
    const std::uint32_t hl = static_cast<std::uint32_t>(h.size());
    std::memcpy(buf.data() + 8, &hl, 4);
  } else {
    const std::uint16_t hl = static_cast<std::uint16_t>(h.size());
    std::memcpy(buf.data() + 8, &hl, 2);
  }
  std::memcpy(buf.data() + pre, h.data(), h.size());
  std::byte* out = buf.data() + pre + h.size();
  if (!fortran_order && t.is_contiguous()) {
    if (bytes) std::memcpy(out, t.data, bytes);
    return buf;
  }
  // Gather element by element: logical row-major order for C, first axis fastest for Fortran.
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rem = i, so = 0;
    if (fortran_order) {
      for (int d = 0; d < t.rank(); ++d) {
        const auto u = static_cast<std::size_t>(d);
        so += (rem % t.shape[u]) * t.strides[u];
        rem /= t.shape[u];
      }
    } else {
      for (int d = t.rank() - 1; d >= 0; --d) {
        const auto u = static_cast<std::size_t>(d);
        so += (rem % t.shape[u]) * t.strides[u];
        rem /= t.shape[u];
      }
    }
    std::memcpy(out + static_cast<std::size_t>(i) * es, t.data + static_cast<std::size_t>(so) * es, es);
  }
  return buf;
}

inline void write_npy(const std::string& path, const AnyTensor& t, bool fortran_order = false) {
  const auto b = npy_bytes(t, fortran_order);
  write_file(path, b.data(), b.size());
}
template <class T, int R>
void write_npy(const std::string& path, const Tensor<T, R>& t) {
  write_npy(path, AnyTensor::from(t));
}

}  // namespace maxtext::io
