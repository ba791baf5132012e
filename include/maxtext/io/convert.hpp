// io/convert.hpp: typed, fast conversion of file tensors (AnyTensor, any layout) into contiguous host tensors:
// dtype conversion with round-to-nearest-even, transposition into the out-major matrix layout, Q8_0 (de)quantisation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::io {

namespace detail {

template <class S>
inline float load_as_float(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return *p;
  } else if constexpr (std::is_same_v<S, double>) {
    return static_cast<float>(*p);
  } else {
    return static_cast<float>(*p);
  }
}

template <class D>
inline D store_from_float(float v) {
  if constexpr (std::is_same_v<D, float>) {
    return v;
  } else {
    return D(v);
  }
}

/// dst[n*ldd + k] = src[n*sn + k*sk] for a 2-D strided source (ldd: the destination's row stride, K by default),
/// blocked so transposes stay cache friendly.
template <class S, class D>
void copy_2d(const S* src, std::int64_t N, std::int64_t K, std::int64_t sn, std::int64_t sk, D* dst,
             std::int64_t ldd = -1) {
  if (ldd < 0) ldd = K;
  if (sk == 1) {
    for (std::int64_t n = 0; n < N; ++n) {
      const S* s = src + n * sn;
      D* d = dst + n * ldd;
      if constexpr (std::is_same_v<S, D>) {
        std::memcpy(static_cast<void*>(d), s, static_cast<std::size_t>(K) * sizeof(D));
      } else {
        for (std::int64_t k = 0; k < K; ++k) d[k] = store_from_float<D>(load_as_float(s + k));
      }
    }
    return;
  }
  constexpr std::int64_t T = 32;
  for (std::int64_t n0 = 0; n0 < N; n0 += T) {
    for (std::int64_t k0 = 0; k0 < K; k0 += T) {
      const std::int64_t n1 = std::min(N, n0 + T), k1 = std::min(K, k0 + T);
      for (std::int64_t n = n0; n < n1; ++n) {
        for (std::int64_t k = k0; k < k1; ++k) {
          if constexpr (std::is_same_v<S, D>) {
            dst[n * ldd + k] = src[n * sn + k * sk];
          } else {
            dst[n * ldd + k] = store_from_float<D>(load_as_float(src + n * sn + k * sk));
          }
        }
      }
    }
  }
}

/// Try to express axes [a, b) of t as one axis: returns its stride, or -1 when they do not merge.
inline std::int64_t merged_stride(const AnyTensor& t, int a, int b) {
  std::int64_t stride = -1, expect = -1;
  for (int i = b - 1; i >= a; --i) {
    const auto u = static_cast<std::size_t>(i);
    if (t.shape[u] == 1) continue;
    if (stride < 0) {
      stride = t.strides[u];
      expect = t.strides[u] * t.shape[u];
    } else {
      if (t.strides[u] != expect) return -1;
      expect *= t.shape[u];
    }
  }
  return stride < 0 ? 1 : stride;
}

inline void quantize_q8_0_row(const float* x, q8_0* out, std::int64_t K) {
  for (std::int64_t b = 0; b < K / q8_0::block; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < q8_0::block; ++i) amax = std::max(amax, std::fabs(x[b * q8_0::block + i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp16(d);
    for (int i = 0; i < q8_0::block; ++i) {
      out[b].qs[i] = static_cast<std::int8_t>(std::lround(x[b * q8_0::block + i] * id));
    }
  }
}

}  // namespace detail

/// Hand back to the kernel (core/mapped_pages.hpp) the pages of a read-only mapped file that `t` spans, once a copy
/// of it has been made (a transposed kernel, a rank's slice of columns, a dtype conversion): the copy is then its one
/// resident copy, and a later reader of `t` faults what it reads back in from the page cache, with the same bytes.
/// Heap tensors, and views with negative strides, are left alone.
inline void drop_source_pages(const AnyTensor& t) {
  if (t.data == nullptr || t.numel() == 0) return;
  std::int64_t last = 0;  // storage units from `data` to the last one the view reads
  const int blocked = t.dtype == DType::ggml ? -1 : t.blocked_axis();
  for (int i = 0; i < t.rank(); ++i) {
    const auto u = static_cast<std::size_t>(i);
    if (t.strides[u] < 0) return;
    const std::int64_t extent = i == blocked ? t.shape[u] / dtype_block(t.dtype) : t.shape[u];
    last += (extent - 1) * t.strides[u];
  }
  std::size_t bytes = 0;
  if (t.dtype == DType::ggml) {  // element offsets: the block holding the last one ends the span
    const quant::TypeInfo& f = quant::checked_type_info(t.ggml_type);
    bytes = static_cast<std::size_t>(last / f.block + 1) * f.bytes;
  } else {
    bytes = static_cast<std::size_t>(last + 1) * dtype_size(t.dtype);
  }
  drop_mapped_pages(t.data, bytes);
}

/// Convert a rank-2 logical view of `t` (rows = `n_axes_rows` leading axes after permutation `perm`, cols = the rest)
/// into a contiguous [N, K] host tensor of D. `perm` lists t's axes in the order [row axes..., col axes...].
/// Q8_0 targets are quantised per 32-element block along K (llama.cpp's rounding); Q8_0 sources need rows of
/// contiguous blocks.
template <class D>
Tensor<D, 2> to_matrix(const AnyTensor& src, const std::vector<int>& perm, int n_row_axes) {
  const AnyTensor t = src.permuted(perm);
  std::int64_t N = 1, K = 1;
  for (int i = 0; i < t.rank(); ++i) (i < n_row_axes ? N : K) *= t.shape[static_cast<std::size_t>(i)];
  if constexpr (std::is_same_v<D, q8_0>) {
    MAXTEXT_CHECK(K % q8_0::block == 0, ShapeError, "[weights] ", src.source, ": Q8_0 needs the input dimension (", K,
                  ") to be a multiple of 32");
    Tensor<q8_0, 2> out({N, K / q8_0::block});
    if (t.dtype == DType::q8_0) {
      const std::int64_t sn = detail::merged_stride(t, 0, n_row_axes);
      MAXTEXT_CHECK(sn >= 0 && t.block_axis < 0 && t.strides.back() == 1 && n_row_axes == t.rank() - 1,
                    UnsupportedError, "[weights] ", src.source,
                    ": Q8_0 tensor cannot be re-laid out (its blocks must run along the input dimension)");
      const auto* s = reinterpret_cast<const q8_0*>(t.data);
      for (std::int64_t n = 0; n < N; ++n) std::memcpy(&out(n, 0), s + n * sn, sizeof(q8_0) * static_cast<std::size_t>(K / 32));
      return out;
    }
    Tensor<float, 2> f = to_matrix<float>(src, perm, n_row_axes);
    for (std::int64_t n = 0; n < N; ++n) detail::quantize_q8_0_row(&f(n, 0), &out(n, 0), K);
    return out;
  } else {
    Tensor<D, 2> out({N, K});
    const std::int64_t sn = detail::merged_stride(t, 0, n_row_axes);
    const std::int64_t sk = detail::merged_stride(t, n_row_axes, t.rank());
    if (sn >= 0 && sk >= 0 && t.dtype != DType::q8_0) {
      auto run = [&](auto* s) { detail::copy_2d(s, N, K, sn, sk, out.data()); };
      switch (t.dtype) {
        case DType::f32: run(reinterpret_cast<const float*>(t.data)); return out;
        case DType::f64: run(reinterpret_cast<const double*>(t.data)); return out;
        case DType::bf16: run(reinterpret_cast<const bf16*>(t.data)); return out;
        case DType::f16: run(reinterpret_cast<const fp16*>(t.data)); return out;
        case DType::f8_e4m3: run(reinterpret_cast<const fp8_e4m3*>(t.data)); return out;
        default: break;
      }
    }
    if (t.dtype == DType::q8_0 && sn >= 0 && t.block_axis < 0 && t.strides.back() == 1 && n_row_axes == t.rank() - 1) {
      // Dequantise whole rows of blocks.
      const auto* s = reinterpret_cast<const q8_0*>(t.data);
      for (std::int64_t n = 0; n < N; ++n) {
        for (std::int64_t b = 0; b < K / q8_0::block; ++b) {
          const q8_0& blk = s[n * sn + b];
          const float d = static_cast<float>(blk.d);
          for (int i = 0; i < q8_0::block; ++i) {
            out.data()[n * K + b * q8_0::block + i] = detail::store_from_float<D>(d * static_cast<float>(blk.qs[i]));
          }
        }
      }
      return out;
    }
    if (t.dtype == DType::ggml && sn >= 0 && sk == 1) {  // whole rows of blocks, each decoded once
      const quant::TypeInfo& f = quant::checked_type_info(t.ggml_type);
      if (K % f.block == 0 && sn % f.block == 0) {
        std::vector<float> row(static_cast<std::size_t>(K));
        for (std::int64_t n = 0; n < N; ++n) {
          quant::dequantize_any(t.ggml_type, t.data + t.byte_offset(n * sn), row.data(), K);
          for (std::int64_t k = 0; k < K; ++k) {
            const float v = quant::scaled_value(row[static_cast<std::size_t>(k)], t.value_scale);
            out.data()[n * K + k] = detail::store_from_float<D>(v);
          }
        }
        return out;
      }
    }
    MAXTEXT_CHECK(dtype_is_float(t.dtype) || t.dtype == DType::q8_0 || t.dtype == DType::ggml, IoError, "[weights] ",
                  src.source, ": expected a floating-point tensor, found ", dtype_name(t.dtype));
    for (std::int64_t i = 0; i < N * K; ++i) out.data()[i] = detail::store_from_float<D>(static_cast<float>(t.element(i)));
    return out;
  }
}

/// The rows to_matrix_rows can cut the rank-2 view of `src` into (to_matrix's rows after `perm`: the first
/// `n_row_axes` axes): a multiple of this count (the row axes after the first), or -1 where the rows cannot be cut
/// (a Q8_0 or runtime-typed source: to_matrix copies it whole).
inline std::int64_t row_granule(const AnyTensor& src, const std::vector<int>& perm, int n_row_axes) {
  if (!dtype_is_float(src.dtype) || dtype_block(src.dtype) != 1 || n_row_axes < 1 ||
      static_cast<std::size_t>(n_row_axes) > perm.size() || perm.size() != src.shape.size()) {
    return -1;
  }
  std::int64_t g = 1;
  for (int i = 1; i < n_row_axes; ++i) g *= src.shape[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
  return g > 0 ? g : -1;
}

/// Rows [r0, r1) of the [N, K] matrix to_matrix<D>(src, perm, n_row_axes) makes, the same values converted the same
/// way, written to `out` ((r1 - r0) rows of K values, K/32 blocks for Q8_0); r0 and r1 are multiples of
/// row_granule(src, perm, n_row_axes) (r1 may be N). The pages of a mapped file that the rows were read from are
/// then handed back (drop_source_pages), so that copying a matrix a few rows at a time never holds its source whole.
template <class D>
void to_matrix_rows(const AnyTensor& src, const std::vector<int>& perm, int n_row_axes, std::int64_t r0,
                    std::int64_t r1, D* out, std::size_t slab_bytes = std::size_t{4} << 20) {
  const std::int64_t g = row_granule(src, perm, n_row_axes);
  MAXTEXT_CHECK(g > 0 && r0 % g == 0 && (r1 - r0) % g == 0 && r0 <= r1, ArgumentError, "[weights] ", src.source,
                ": rows [", r0, ", ", r1, ") cannot be cut from ", src.shape, " in steps of ", g);
  const AnyTensor rows = src.permuted(perm).narrow(0, r0 / g, (r1 - r0) / g);
  if constexpr (!std::is_same_v<D, q8_0>) {
    // A strided source (a MaxText kernel [in, out]: each row's values lie one input row apart) is read in slabs of
    // whole source rows, about slab_bytes each, and each slab's pages are handed back before the next: a file mapped
    // in large folios maps megabytes around every value read, so dropping the pages once per chunk of rows would
    // leave the whole source mapped while the chunk is read.
    const std::int64_t N = r1 - r0, K = rows.numel() / std::max<std::int64_t>(N, 1);
    const std::int64_t sn = detail::merged_stride(rows, 0, n_row_axes);
    const std::int64_t sk = detail::merged_stride(rows, n_row_axes, rows.rank());
    // Rows that lie contiguous (sk == 1: a rank's columns of an out-major matrix, a conversion) are copied in one pass
    // straight into `out`, their pages handed back once.
    if (N > 0 && K > 0 && sn >= 0 && sk >= 1) {
      const std::size_t esize = dtype_size(rows.dtype);
      const std::int64_t slab =
          sk == 1 ? K
                  : std::max<std::int64_t>(1, static_cast<std::int64_t>(slab_bytes / (static_cast<std::size_t>(sk) * esize)));
      auto run = [&](const auto* s) {
        for (std::int64_t k0 = 0; k0 < K; k0 += slab) {
          const std::int64_t kn = std::min(slab, K - k0);
          detail::copy_2d(s + k0 * sk, N, kn, sn, sk, out + k0, K);
          const std::int64_t last = (kn - 1) * sk + (N - 1) * sn;  // elements from the slab's first to its last
          drop_mapped_pages(s + k0 * sk, static_cast<std::size_t>(last + 1) * esize);
        }
      };
      switch (rows.dtype) {
        case DType::f32: run(reinterpret_cast<const float*>(rows.data)); return;
        case DType::f64: run(reinterpret_cast<const double*>(rows.data)); return;
        case DType::bf16: run(reinterpret_cast<const bf16*>(rows.data)); return;
        case DType::f16: run(reinterpret_cast<const fp16*>(rows.data)); return;
        case DType::f8_e4m3: run(reinterpret_cast<const fp8_e4m3*>(rows.data)); return;
        default: break;
      }
    }
  }
  std::vector<int> identity(perm.size());
  for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int>(i);
  const Tensor<D, 2> part = to_matrix<D>(rows, identity, n_row_axes);
  if (part.size() > 0) std::memcpy(static_cast<void*>(out), part.data(), static_cast<std::size_t>(part.size()) * sizeof(D));
  drop_source_pages(rows);
}

/// Flatten any float tensor into a contiguous 1-D tensor of D.
template <class D>
Tensor<D, 1> to_vector(const AnyTensor& t) {
  return t.to<D, 1>({t.numel()});
}

/// Zero-copy view of `t` as a contiguous [N, K] tensor of D when it already is one (same dtype, out-major,
/// aligned); empty otherwise.
template <class D>
Tensor<D, 2> view_matrix(const AnyTensor& t, const std::vector<int>& perm, int n_row_axes) {
  static_assert(!std::is_same_v<D, ggml_byte>, "runtime-typed matrices: ggml_matrix");
  if (t.dtype != dtype_of<D>) return {};
  const AnyTensor p = t.permuted(perm);
  if (!p.is_contiguous()) return {};
  if (reinterpret_cast<std::uintptr_t>(p.data) % alignof(D) != 0) return {};
  std::int64_t N = 1, K = 1;
  for (int i = 0; i < p.rank(); ++i) (i < n_row_axes ? N : K) *= p.shape[static_cast<std::size_t>(i)];
  const std::int64_t kcols = K / dtype_block(dtype_of<D>);
  return Tensor<D, 2>(View<D, 2>(const_cast<D*>(reinterpret_cast<const D*>(p.data)), {N, kcols}), p.holder);
}

/// A matrix in a runtime-typed layout (ggml_byte storage): rows of blocks of one ggml type.
struct GgmlMatrix {
  Tensor<ggml_byte, 2> data;  ///< [N, row bytes]
  std::uint32_t type = quant::kTypeF32;
  double value_scale = 1.0;   ///< AnyTensor::value_scale of block sources (1 for the rest)
};

/// The rank-2 view of `t` (as to_matrix: rows = the first `n_row_axes` axes after `perm`) in the file's own type:
/// GGUF blocks (Q4_K, Q6_K, ...; Q8_0) and F32 / F16 / BF16 stay as they are, zero-copy when the rows are the file's
/// rows, else with whole rows of blocks copied (a row permutation). Other dtypes become F32. Blocks whose rows
/// would split a block (an input axis permuted inside a row) are decoded to F32, the one layout every kernel reads.
inline GgmlMatrix ggml_matrix(const AnyTensor& src, const std::vector<int>& perm, int n_row_axes) {
  const AnyTensor t = src.permuted(perm);
  std::int64_t N = 1, K = 1;
  for (int i = 0; i < t.rank(); ++i) (i < n_row_axes ? N : K) *= t.shape[static_cast<std::size_t>(i)];
  GgmlMatrix m;
  auto as_bytes = [&](const auto& typed, std::uint32_t type) {
    using T = typename std::decay_t<decltype(typed)>::value_type;
    const std::int64_t rb = quant::row_bytes(type, K);
    m.data = Tensor<ggml_byte, 2>(View<ggml_byte, 2>(reinterpret_cast<ggml_byte*>(const_cast<std::remove_const_t<T>*>(typed.data())), {N, rb}),
                                  typed.holder());
    m.type = type;
    return m;
  };
  auto typed = [&]<class T>(std::uint32_t type) {
    Tensor<T, 2> v = view_matrix<T>(src, perm, n_row_axes);
    if (v.empty()) v = to_matrix<T>(src, perm, n_row_axes);
    return as_bytes(v, type);
  };
  switch (t.dtype) {
    case DType::f16: return typed.template operator()<fp16>(quant::kTypeF16);
    case DType::bf16: return typed.template operator()<bf16>(quant::kTypeBF16);
    case DType::q8_0: return typed.template operator()<q8_0>(8);
    case DType::ggml: {
      const quant::TypeInfo& f = quant::checked_type_info(t.ggml_type);
      const std::int64_t sn = detail::merged_stride(t, 0, n_row_axes), sk = detail::merged_stride(t, n_row_axes, t.rank());
      if (sk == 1 && sn >= 0 && K % f.block == 0 && sn % f.block == 0) {
        const std::int64_t rb = quant::row_bytes(t.ggml_type, K);
        m.type = t.ggml_type;
        m.value_scale = t.value_scale;
        if (sn == K || N == 1) {  // the file's rows: a view
          m.data = Tensor<ggml_byte, 2>(View<ggml_byte, 2>(reinterpret_cast<ggml_byte*>(const_cast<std::byte*>(t.data)), {N, rb}),
                                        t.holder);
        } else {  // rows picked or re-ordered: copy whole rows of blocks
          m.data = Tensor<ggml_byte, 2>({N, rb});
          for (std::int64_t n = 0; n < N; ++n) {
            std::memcpy(m.data.data() + n * rb, t.data + t.byte_offset(n * sn), static_cast<std::size_t>(rb));
          }
        }
        return m;
      }
      // Rows that are not the file's rows of values (an inner axis permuted): F16 / BF16 values stay in their type
      // (exact) unless a factor rides along; everything else is decoded to F32.
      if (t.value_scale == 1.0 && t.ggml_type == quant::kTypeF16) return typed.template operator()<fp16>(quant::kTypeF16);
      if (t.value_scale == 1.0 && t.ggml_type == quant::kTypeBF16) return typed.template operator()<bf16>(quant::kTypeBF16);
      return typed.template operator()<float>(quant::kTypeF32);
    }
    default: return typed.template operator()<float>(quant::kTypeF32);
  }
}

}  // namespace maxtext::io
