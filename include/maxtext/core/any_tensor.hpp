// core/any_tensor.hpp: a type-erased, dynamic-rank, strided host tensor: what file readers hand out and what
// weight loading consumes. Transposes and layer slices of a file's tensor are strided views (no copy).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext {

/// Host tensor of any DType. Strides count storage units (elements; 34-byte blocks for Q8_0, whose blocked axis
/// must be contiguous and a multiple of 32). `source` names where it came from, for error messages.
/// The blocked axis of a Q8_0 tensor is the last one as stored; a permuted view may move it (`block_axis` tracks
/// where it went: a file's [out, in] Q8_0 matrix can be viewed as a MaxText [in, out] kernel without a copy).
/// DType::ggml (a runtime-typed ggml tensor, `ggml_type`: Q4_K, Q6_K, ...) counts strides in elements of the stored
/// tensor's row-major order; `data` points at the block holding element 0. Views (permutes, reshapes, layer and
/// expert slices) are free; a view starting inside a block, or element access, decodes blocks.
struct AnyTensor {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  const std::byte* data = nullptr;
  std::shared_ptr<const void> holder;
  std::string source;
  /// For block dtypes: the axis that runs along the blocks, -1 = the last axis. Ignored for scalar dtypes.
  int block_axis = -1;
  /// For DType::ggml: the ggml type id of the stored blocks (quant::type_info).
  std::uint32_t ggml_type = 0;
  /// For DType::ggml: the values are the blocks' times this factor (a scale an importer folded in, e.g. a query's
  /// 1/sqrt(head_dim), which fp16 block scales cannot always take exactly: the model applies it after decoding).
  double value_scale = 1.0;

  int rank() const { return static_cast<int>(shape.size()); }
  /// The blocked axis (block dtypes), or -1 for scalar dtypes.
  int blocked_axis() const {
    if (dtype_block(dtype) == 1) return -1;
    return block_axis < 0 ? rank() - 1 : block_axis;
  }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  bool is_contiguous() const {
    if (blocked_axis() >= 0 && blocked_axis() != rank() - 1) return false;
    std::int64_t acc = 1;
    for (int i = rank() - 1; i >= 0; --i) {
      const auto u = static_cast<std::size_t>(i);
      const std::int64_t extent = (i == rank() - 1) ? shape[u] / dtype_block(dtype) : shape[u];
      if (extent != 1 && strides[u] != acc) return false;
      acc *= extent;
    }
    return true;
  }
  std::string describe() const {
    if (dtype == DType::ggml) return str(quant::checked_type_info(ggml_type).name, " ", shape);
    return str(dtype_name(dtype), " ", shape);
  }
  /// Byte offset of storage offset `units` (elements; Q8_0: blocks). DType::ggml: element offset `units` must
  /// start a block.
  std::size_t byte_offset(std::int64_t units) const {
    if (dtype != DType::ggml) return static_cast<std::size_t>(units) * dtype_size(dtype);
    const quant::TypeInfo& f = quant::checked_type_info(ggml_type);
    MAXTEXT_CHECK(units % f.block == 0, UnsupportedError, "[AnyTensor] ", source, ": a ", f.name, " view must start at a "
                  "block boundary (", f.block, " values), not at element ", units);
    return static_cast<std::size_t>(units / f.block * f.bytes);
  }

  /// Contiguous row-major strides for `shape` (in storage units).
  static std::vector<std::int64_t> dense_strides(const std::vector<std::int64_t>& shape, DType dt) {
    std::vector<std::int64_t> st(shape.size());
    std::int64_t acc = 1;
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      const auto u = static_cast<std::size_t>(i);
      st[u] = acc;
      acc *= (i == static_cast<int>(shape.size()) - 1) ? shape[u] / dtype_block(dt) : shape[u];
    }
    return st;
  }
  /// Wrap an owning typed tensor (shares its buffer).
  template <class T, int R>
  static AnyTensor from(const Tensor<T, R>& t, std::string source = {}) {
    AnyTensor a;
    a.dtype = dtype_of<T>;
    const View<T, R> v = t.view();
    a.shape.assign(v.shape().begin(), v.shape().end());
    a.strides.assign(v.strides().begin(), v.strides().end());
    a.data = reinterpret_cast<const std::byte*>(t.data());
    a.holder = t.holder();
    a.source = std::move(source);
    return a;
  }

  /// Alignment an element of `dt` needs for typed access (Q8_0: its fp16 scale).
  static std::size_t alignment_of(DType dt) {
    if (dt == DType::q8_0) return 2;
    const std::size_t s = dtype_size(dt);
    return s >= 8 ? 8 : s;
  }
  /// Make this tensor own an aligned copy of its first `bytes` bytes when its data pointer is not aligned for typed
  /// access to its dtype (formats that place data at arbitrary byte offsets: zip members, old .npy headers,
  /// safetensors headers whose length is not a multiple of 8). Aligned data stays zero-copy.
  void ensure_aligned(std::size_t bytes) {
    const std::size_t a = alignment_of(dtype);
    if (a <= 1 || reinterpret_cast<std::uintptr_t>(data) % a == 0) return;
    auto buf = std::shared_ptr<std::byte[]>(new std::byte[bytes == 0 ? 1 : bytes]);
    if (bytes) std::memcpy(buf.get(), data, bytes);
    data = buf.get();
    holder = std::shared_ptr<const void>(buf, buf.get());
  }

  /// Permute axes (no copy): result axis i is this tensor's axis perm[i].
  AnyTensor permuted(const std::vector<int>& perm) const;
  /// Reshape a contiguous tensor (no copy).
  AnyTensor reshaped(std::vector<std::int64_t> new_shape) const;
  /// Fix `axis` at `index` (no copy): drops the axis.
  AnyTensor select(int axis, std::int64_t index) const {
    MAXTEXT_CHECK(axis >= 0 && axis < rank() && index >= 0 && index < shape[static_cast<std::size_t>(axis)],
                  ShapeError, "[AnyTensor::select] ", source, ": index ", index, " on axis ", axis, " of ", shape);
    MAXTEXT_CHECK(axis != blocked_axis(), UnsupportedError, "[AnyTensor::select] ", source,
                  ": cannot select on the blocked axis");
    const int blocked = blocked_axis();
    AnyTensor r = *this;
    if (blocked >= 0) {
      const int moved = blocked > axis ? blocked - 1 : blocked;  // the blocked axis after dropping `axis`
      r.block_axis = moved == rank() - 2 ? -1 : moved;
    }
    r.data = data + byte_offset(index * strides[static_cast<std::size_t>(axis)]);
    r.shape.erase(r.shape.begin() + axis);
    r.strides.erase(r.strides.begin() + axis);
    return r;
  }
  /// Restrict `axis` to [begin, begin+len) (no copy).
  AnyTensor narrow(int axis, std::int64_t begin, std::int64_t len) const {
    const auto u = static_cast<std::size_t>(axis);
    MAXTEXT_CHECK(axis >= 0 && axis < rank() && begin >= 0 && len >= 0 && begin + len <= shape[u], ShapeError,
                  "[AnyTensor::narrow] ", source, ": [", begin, ",", begin + len, ") on axis ", axis, " of ", shape);
    // The blocked axis narrows at block boundaries, when it is the last (contiguous) one.
    const std::int64_t blk = axis == blocked_axis() ? dtype_block(dtype) : 1;
    MAXTEXT_CHECK(blk == 1 || (axis == rank() - 1 && begin % blk == 0 && len % blk == 0), UnsupportedError,
                  "[AnyTensor::narrow] ", source, ": the blocked axis ", axis, " narrows only at block boundaries (",
                  blk, ") when it is the last one, not [", begin, ",", begin + len, ")");
    AnyTensor r = *this;
    r.data = data + byte_offset(begin / blk * strides[u]);
    r.shape[u] = len;
    return r;
  }

  /// Element `flat` (row-major logical order) converted to double. Works for every dtype, Q8_0 included.
  double element(std::int64_t flat) const {
    std::int64_t off = 0;
    std::int64_t last = 0;
    const int special = dtype == DType::q8_0 ? blocked_axis() : rank() - 1;
    for (int i = rank() - 1; i >= 0; --i) {
      const auto u = static_cast<std::size_t>(i);
      const std::int64_t idx = flat % shape[u];
      flat /= shape[u];
      if (i == special) {
        last = idx;
      } else {
        off += idx * strides[u];
      }
    }
    if (dtype == DType::ggml) {  // decode the block holding the element
      off += last * (rank() > 0 ? strides.back() : 0);
      const quant::TypeInfo& f = quant::checked_type_info(ggml_type);
      float v[256];
      quant::dequantize_any(ggml_type, data + (off / f.block) * f.bytes, v, f.block);
      return quant::scaled_value(v[off % f.block], value_scale);
    }
    if (dtype == DType::q8_0) {
      const auto b = static_cast<std::size_t>(special);
      const auto* blk = reinterpret_cast<const q8_0*>(data) + off + (last / q8_0::block) * strides[b];
      return static_cast<double>(static_cast<float>(blk->d)) * blk->qs[last % q8_0::block];
    }
    off += last * (rank() > 0 ? strides.back() : 0);
    const std::byte* p = data + static_cast<std::size_t>(off) * dtype_size(dtype);
    return load_scalar(dtype, p);
  }

  static double load_scalar(DType dt, const std::byte* p) {
    switch (dt) {
      case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
      case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
      case DType::f16: { std::uint16_t b; std::memcpy(&b, p, 2); return fp16::to_float(b); }
      case DType::bf16: { std::uint16_t b; std::memcpy(&b, p, 2); return static_cast<float>(bf16::from_bits(b)); }
      case DType::f8_e4m3: { fp8_e4m3 v; std::memcpy(&v, p, 1); return static_cast<float>(v); }
      case DType::i64: { std::int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
      case DType::i32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
      case DType::i16: { std::int16_t v; std::memcpy(&v, p, 2); return v; }
      case DType::i8: { std::int8_t v; std::memcpy(&v, p, 1); return v; }
      case DType::u8: case DType::boolean: { std::uint8_t v; std::memcpy(&v, p, 1); return v; }
      case DType::q8_0: case DType::ggml: break;
    }
    MAXTEXT_THROW(UnsupportedError, "[AnyTensor] element access for dtype ", dtype_name(dt));
  }

  /// Copy into a new contiguous host tensor of type T (any float/int dtype converts; floats round to nearest even).
  /// Q8_0 sources are dequantised. Shape must have numel() elements (it may differ from `shape`).
  template <class T, int R>
  Tensor<T, R> to(const Shape<R>& out_shape) const {
    MAXTEXT_CHECK(::maxtext::numel<R>(out_shape) == numel(), ShapeError, "[AnyTensor::to] ", source, ": ", describe(),
                  " does not fit shape ", out_shape);
    Tensor<T, R> out(out_shape);
    T* dst = out.data();
    const std::int64_t n = numel();
    if (dtype == dtype_of<T> && is_contiguous()) {
      std::memcpy(static_cast<void*>(dst), data, static_cast<std::size_t>(n) * sizeof(T));
      return out;
    }
    if (dtype == DType::f32 && is_contiguous()) {
      const float* src = reinterpret_cast<const float*>(data);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = cast_from_double<T>(src[i]);
      return out;
    }
    if (dtype == DType::ggml && is_contiguous()) {  // decode every block once
      const quant::TypeInfo& f = quant::checked_type_info(ggml_type);
      MAXTEXT_CHECK(n % f.block == 0, ShapeError, "[AnyTensor::to] ", source, ": ", n, " values are not whole ", f.name,
                    " blocks");
      std::vector<float> v(static_cast<std::size_t>(n));
      quant::dequantize_any(ggml_type, data, v.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        dst[i] = cast_from_double<T>(quant::scaled_value(v[static_cast<std::size_t>(i)], value_scale));
      }
      return out;
    }
    for (std::int64_t i = 0; i < n; ++i) dst[i] = cast_from_double<T>(element(i));
    return out;
  }

  /// Concatenate `parts` along `axis` into a new contiguous tensor of their common scalar dtype (a copy; what
  /// importers need when a file splits what MaxText keeps as one tensor). Shapes must agree off `axis`.
  static AnyTensor concat(const std::vector<AnyTensor>& parts, int axis, std::string source) {
    MAXTEXT_CHECK(!parts.empty(), ShapeError, "[AnyTensor::concat] ", source, ": nothing to concatenate");
    const AnyTensor& p0 = parts.front();
    const int r = p0.rank();
    MAXTEXT_CHECK(axis >= 0 && axis < r, ShapeError, "[AnyTensor::concat] ", source, ": axis ", axis, " of rank ", r);
    // Block dtypes (Q8_0) concatenate whole blocks: each part's blocks along its last axis, contiguous.
    const std::int64_t blk = dtype_block(p0.dtype);
    MAXTEXT_CHECK(p0.dtype != DType::ggml, UnsupportedError, "[AnyTensor::concat] ", source, ": ", p0.describe(),
                  " tensors do not concatenate (decode them first)");
    for (const auto& p : parts) {
      MAXTEXT_CHECK(blk == 1 || (p.blocked_axis() == r - 1 && p.strides.back() == 1), UnsupportedError,
                    "[AnyTensor::concat] ", source, ": block dtype ", dtype_name(p0.dtype), " concatenates whole "
                    "blocks only (blocks along the last axis, contiguous), not ", p.describe(), " with its blocks on axis ",
                    p.blocked_axis());
    }
    std::vector<std::int64_t> shape = p0.shape;
    shape[static_cast<std::size_t>(axis)] = 0;
    for (const auto& p : parts) {
      bool same = p.dtype == p0.dtype && p.rank() == r;
      for (int i = 0; same && i < r; ++i) same = i == axis || p.shape[static_cast<std::size_t>(i)] == p0.shape[static_cast<std::size_t>(i)];
      MAXTEXT_CHECK(same, ShapeError, "[AnyTensor::concat] ", source, ": ", p.source, " is ", p.describe(),
                    ", which does not concatenate with ", p0.describe(), " on axis ", axis);
      shape[static_cast<std::size_t>(axis)] += p.shape[static_cast<std::size_t>(axis)];
    }
    const std::size_t es = dtype_size(p0.dtype);
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    auto buf = std::shared_ptr<std::byte[]>(new std::byte[static_cast<std::size_t>(n / blk) * es + 1]);  // n / blk units
    AnyTensor out;
    out.dtype = p0.dtype;
    out.shape = shape;
    out.strides = dense_strides(shape, p0.dtype);
    out.data = buf.get();
    out.holder = std::shared_ptr<const void>(buf, buf.get());
    out.source = std::move(source);
    std::int64_t offset = 0;  // along `axis`
    const auto last = static_cast<std::size_t>(r - 1);
    for (const auto& p : parts) {
      if (p.numel() == 0) continue;
      // Row by row over every axis but the last; a row is one memcpy when the part's last axis is contiguous.
      const std::int64_t len = p.shape[last] / blk, rows = p.numel() / p.shape[last];  // len in storage units
      std::vector<std::int64_t> idx(last, 0);
      for (std::int64_t row = 0; row < rows; ++row) {
        std::int64_t src = 0, dst = axis == r - 1 ? offset / blk * out.strides[last] : 0;
        for (std::size_t u = 0; u < last; ++u) {
          src += idx[u] * p.strides[u];
          dst += (static_cast<int>(u) == axis ? idx[u] + offset : idx[u]) * out.strides[u];
        }
        std::byte* d = buf.get() + static_cast<std::size_t>(dst) * es;
        const std::byte* sp = p.data + static_cast<std::size_t>(src) * es;
        if (p.strides[last] == 1) {
          std::memcpy(d, sp, static_cast<std::size_t>(len) * es);
        } else {
          for (std::int64_t j = 0; j < len; ++j) std::memcpy(d + static_cast<std::size_t>(j) * es, sp + static_cast<std::size_t>(j * p.strides[last]) * es, es);
        }
        for (std::size_t i = last; i-- > 0;) {  // next row, row-major
          if (++idx[i] < p.shape[i]) break;
          idx[i] = 0;
        }
      }
      offset += p.shape[static_cast<std::size_t>(axis)];
    }
    return out;
  }

  template <class T>
  static T cast_from_double(double v) {
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, fp16>) {
      return T(static_cast<float>(v));
    } else {
      return static_cast<T>(v);
    }
  }
};

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API AnyTensor AnyTensor::reshaped(std::vector<std::int64_t> new_shape) const {
  std::int64_t n = 1;
  for (auto d : new_shape) n *= d;
  MAXTEXT_CHECK(n == numel(), ShapeError, "[AnyTensor::reshaped] ", source, ": cannot reshape ", shape, " to ",
                new_shape);
  MAXTEXT_CHECK(is_contiguous(), ShapeError, "[AnyTensor::reshaped] ", source, ": not contiguous");
  AnyTensor r = *this;
  r.shape = std::move(new_shape);
  r.strides = dense_strides(r.shape, dtype);
  return r;
}
#endif

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API AnyTensor AnyTensor::permuted(const std::vector<int>& perm) const {
  MAXTEXT_CHECK(static_cast<int>(perm.size()) == rank(), ShapeError, "[AnyTensor::permuted] ", source,
                ": permutation of rank ", perm.size(), " for a tensor of rank ", rank());
  std::vector<bool> seen(perm.size(), false);
  for (int p : perm) {
    MAXTEXT_CHECK(p >= 0 && p < rank() && !seen[static_cast<std::size_t>(p)], ShapeError, "[AnyTensor::permuted] ",
                  source, ": ", perm, " is not a permutation of ", rank(), " axes");
    seen[static_cast<std::size_t>(p)] = true;
  }
  const int blocked = blocked_axis();
  AnyTensor r = *this;
  for (std::size_t i = 0; i < perm.size(); ++i) {
    r.shape[i] = shape[static_cast<std::size_t>(perm[i])];
    r.strides[i] = strides[static_cast<std::size_t>(perm[i])];
    if (blocked >= 0 && perm[i] == blocked) r.block_axis = static_cast<int>(i) == rank() - 1 ? -1 : static_cast<int>(i);
  }
  return r;
}
#endif

}  // namespace maxtext
