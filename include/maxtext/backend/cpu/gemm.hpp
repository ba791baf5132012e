// backend/cpu/gemm.hpp: matrix products on weights packed once at load (cpu::Backend::prepare), for every
// row count: one register-tiled micro-kernel serves prefill (GEMM, M large) and decode (GEMV, M = 1..7).
//
// y[M, N] = x[M, K] . W[N, K]^T, accumulated in f32 and rounded once to Y (spec norms-dense-mlp.md, DenseGeneral).
//
// Packed layouts (kNR output features per panel, zero-padded past N):
//  - f32:  panel p holds W[p*kNR + j, k] at [k][j]: the inner loop broadcasts x[m, k] and FMAs kNR contiguous
//          weights into kMR x kNR register accumulators.
//  - bf16: pairs along k, [k/2][j][2], so that one 32-bit lane holds (W[j, 2i], W[j, 2i+1]): the operand order of
//          AVX512-BF16 vdpbf16ps (bf16 x bf16 products are exact in f32). Without those instructions, or with f32
//          activations, the same lane is split into two f32 vectors with a shift and a mask (exact).
//  - f16:  as f32, [k][j], in IEEE half precision (2 bytes per weight): each kW-wide vector is widened with
//          vcvtph2ps (exact) and FMA'd in the f32 order, so the result equals, bit for bit, that of the same weights
//          stored as f32. Prefill widens one panel slice into a per-thread f32 buffer and reuses it per row tile.
//  - Q8_0: per 32-wide k block, kNR fp16 scales then [32][kNR] int8 values: 34 bytes per 32 weights, as in GGUF.
//          Products use the exactly dequantised weights (d * q in f32) with f32 (or bf16) activations; prefill
//          dequantises one panel into a per-thread f32 buffer and reuses it for every row tile.
//  - Q8_0 with 8-bit activations (opt-in, cpu::Options::int8_activations): per 32-wide k block, kNR fp16 scales then
//          [8][kNR][4] bytes, each weight stored as q + 128 (unsigned), four consecutive k per 32-bit lane: the
//          operand layout of AVX512-VNNI vpdpbusd. The activations are quantised per 32-element block by llama.cpp's
//          Q8_0 rule (scale max|x| / 127, kept in f32); the integer block sums are exact, and
//          dot(q_w + 128, q_x) - 128 * sum(q_x) recovers dot(q_w, q_x). Same 34 bytes per 32 weights.
//  - ggml (runtime-typed rows: blocks such as Q4_K, Q6_K, Q4_0, IQ4_XS, Q8_0, or plain F32 / F16 / BF16 values):
//          not packed at all. The kernels read the file's own out-major rows (backend/cpu/qblock.hpp), so the
//          weights exist once, where the file mapping put them. Decode (M <= kGgmlRowsDirect; F32 / F16 / BF16
//          rows: M <= kFloatRowsDirect) takes one fused decode-and-dot per weight row and x row; more rows
//          dequantise a panel slice (kNR rows) into a per-thread f32 buffer, exactly, and run the f32 tiles.
//          F32 / F16 / BF16 rows are always exact (widened), whatever the 8-bit-activation flag.
//          With 8-bit activations, the types with one scale per 32 values (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
//          IQ4_NL, IQ4_XS) instead decode each panel slice into the Q8_0 int8 layout's integer operands (unsigned
//          quants [8][kNR][4] per 32-wide block, with an f32 scale and offset per row and block: decode_i8_panel)
//          and run vpdpbusd tiles on it, once per slice for up to kMCI8 rows of x.
// Threads split the panels (contiguous chunks), so each weight byte is read by one thread once per call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "maxtext/backend/cpu/parallel.hpp"
#include "maxtext/backend/cpu/prefetch.hpp"
#include "maxtext/backend/cpu/qblock.hpp"
#include "maxtext/backend/cpu/vec.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/matrix.hpp"

namespace maxtext::cpu::gemm {

using vec::fbatch;
using ubatch = xsimd::batch<std::uint32_t>;
inline constexpr std::int64_t kW = static_cast<std::int64_t>(vec::W);
/// Vectors per panel row and rows per register tile: 4 x 6 = 24 accumulators of the 32 AVX-512 registers; with
/// 16 registers (AVX2 and narrower) 2 x 4 = 8.
inline constexpr int kNV = kW >= 16 ? 4 : 2;
inline constexpr std::int64_t kNR = kNV * kW;
inline constexpr int kMR = kW >= 16 ? 6 : 4;

#if defined(__AVX512BF16__) && defined(__AVX512F__)
/// True when bf16 x bf16 products use vdpbf16ps (compile-time choice; the fallback is exact too).
inline constexpr bool kHasBf16Dot = true;
#else
inline constexpr bool kHasBf16Dot = false;
#endif

enum class PackKind : std::uint8_t { f32, bf16, q8_0, q8_0_i8, f16, ggml };

/// A weight laid out in panels for the micro-kernel (see the file comment). Immutable once built.
struct Packed {
  PackKind kind = PackKind::f32;
  std::int64_t rows = 0;  ///< N
  std::int64_t cols = 0;  ///< K
  std::int64_t panels = 0;
  std::size_t panel_bytes = 0;
  AlignedBuffer buf;
  /// PackKind::ggml: the out-major rows as they lie (row r at rows_data + r * row_bytes), their ggml type, and what
  /// keeps them alive.
  const std::byte* rows_data = nullptr;
  std::size_t row_bytes = 0;
  std::uint32_t ggml_type = 0;
  std::shared_ptr<const void> keep;
  /// PackKind::ggml: the activations are quantised to 8 bits per 32 values and the products are integer block sums
  /// (llama.cpp's arithmetic): for decode qblock::dot_q8_rows on a chunk of weight rows per call (the sums of dot_q8
  /// row by row); for prefill qblock::dot_q8_rows where the kernels prefer it, else integer panels (decode_i8_panel)
  /// where the type has one scale per 32 values, else exact f32 panels.
  bool int8 = false;
  /// PackKind::ggml: the values' factor beyond the blocks' (Matrix::value_scale): applied to each dequantised value
  /// (f32 rounding of the double product, as a decoded-and-scaled f32 weight has it), or to the direct kernels' sums.
  double value_scale = 1.0;

  const std::byte* panel(std::int64_t p) const { return buf.data() + static_cast<std::size_t>(p) * panel_bytes; }
  std::byte* panel(std::int64_t p) { return buf.data() + static_cast<std::size_t>(p) * panel_bytes; }
};

namespace detail {

inline std::int64_t pairs(std::int64_t K) { return (K + 1) / 2; }
inline std::size_t q8_block_bytes() { return static_cast<std::size_t>(kNR) * (2 + q8_0::block); }

template <class T>
inline float scalar(const T& v) {
  return to_float(v);
}

/// Decode (few rows) of exact Q8_0 converts every weight to f32 and keeps the core busy enough that the hardware
/// prefetcher alone falls behind: requesting the lines `kPrefetch` bytes ahead raised model c's one-thread decode by
/// about 16% (bench_e2e). The f32, bf16 and 8-bit-activation kernels gained nothing measurable and do not prefetch.
/// Past the panel's end this reaches the next panel, or nothing: prefetches never fault.
inline constexpr std::ptrdiff_t kPrefetch = 8192;
template <int R>
MAXTEXT_INLINE void prefetch_lines(const void* p, std::size_t bytes) {
  if constexpr (R <= 2) prefetch::bytes(static_cast<const char*>(p) + kPrefetch, static_cast<std::int64_t>(bytes));
}

/// bf16 pairs [K/2][kNR] (32-bit lanes) split into the even-k and odd-k f32 vectors and FMA'd: exact products.
template <int R, class X>
MAXTEXT_INLINE void tile_bf16_split(std::int64_t K, const X* x, std::int64_t ldx, const std::uint32_t* w,
                                    fbatch (&acc)[R][kNV]) {
  const ubatch hi_mask(0xffff0000u);
  const std::int64_t P = K / 2;
  for (std::int64_t i = 0; i < P; ++i) {
    fbatch a0[R], a1[R];
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      a0[r] = fbatch(scalar(x[r * ldx + 2 * i]));
      a1[r] = fbatch(scalar(x[r * ldx + 2 * i + 1]));
    }
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) {
      const ubatch u = ubatch::load_aligned(w + i * kNR + v * kW);
      const fbatch ev = xsimd::bitwise_cast<fbatch>(u << 16);
      const fbatch od = xsimd::bitwise_cast<fbatch>(u & hi_mask);
      MAXTEXT_UNROLL
      for (int r = 0; r < R; ++r) acc[r][v] = xsimd::fma(a1[r], od, xsimd::fma(a0[r], ev, acc[r][v]));
    }
  }
  if (K % 2 != 0) {  // last k pairs with the zero padding
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) {
      const ubatch u = ubatch::load_aligned(w + P * kNR + v * kW);
      const fbatch ev = xsimd::bitwise_cast<fbatch>(u << 16);
      MAXTEXT_UNROLL
      for (int r = 0; r < R; ++r) acc[r][v] = xsimd::fma(fbatch(scalar(x[r * ldx + K - 1])), ev, acc[r][v]);
    }
  }
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
/// bf16 activations x bf16 pairs with vdpbf16ps: two exact products per lane per instruction.
template <int R>
MAXTEXT_INLINE void tile_bf16_dot(std::int64_t K, const bf16* x, std::int64_t ldx, const std::uint32_t* w,
                                  fbatch (&acc)[R][kNV]) {
  static_assert(kW == 16, "vdpbf16ps path expects 512-bit batches");
  __m512 c[R][kNV];
  MAXTEXT_UNROLL
  for (int r = 0; r < R; ++r) {
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) c[r][v] = acc[r][v];
  }
  const std::int64_t P = K / 2;
  for (std::int64_t i = 0; i < P; ++i) {
    __m512i b[kNV];
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) b[v] = _mm512_load_si512(w + i * kNR + v * kW);
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      std::uint32_t pair;
      std::memcpy(&pair, x + r * ldx + 2 * i, 4);
      const __m512i a = _mm512_set1_epi32(static_cast<int>(pair));
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], (__m512bh)a, (__m512bh)b[v]);
    }
  }
  if (K % 2 != 0) {
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      const std::uint32_t pair = x[r * ldx + K - 1].bits;  // (x[K-1], 0): the padding weight is 0 too
      const __m512i a = _mm512_set1_epi32(static_cast<int>(pair));
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) {
        c[r][v] = _mm512_dpbf16_ps(c[r][v], (__m512bh)a, (__m512bh)_mm512_load_si512(w + P * kNR + v * kW));
      }
    }
  }
  MAXTEXT_UNROLL
  for (int r = 0; r < R; ++r) {
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) acc[r][v] = c[r][v];
  }
}
#endif

/// kW int8 values to f32 (exact).
MAXTEXT_INLINE fbatch load_i8(const std::int8_t* q) {
#if defined(__AVX512F__)
  static_assert(kW == 16, "xsimd's default batch is 512-bit under AVX-512");
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
#elif defined(__AVX2__)
  static_assert(kW == 8, "xsimd's default batch is 256-bit under AVX2");
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
#else
  alignas(64) float t[kW];
  for (std::int64_t i = 0; i < kW; ++i) t[i] = static_cast<float>(q[i]);
  return fbatch::load_aligned(t);
#endif
}
/// kW fp16 scales to f32 (exact).
MAXTEXT_INLINE fbatch load_f16(const fp16* h) {
#if defined(__AVX512F__)
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
#elif defined(__AVX2__) && defined(__F16C__)
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
#else
  alignas(64) float t[kW];
  for (std::int64_t i = 0; i < kW; ++i) t[i] = static_cast<float>(h[i]);
  return fbatch::load_aligned(t);
#endif
}

/// kW weights of a [K][kNR] panel as f32: f32 as they are, fp16 widened (exact).
MAXTEXT_INLINE fbatch load_dense(const float* w) { return fbatch::load_aligned(w); }
MAXTEXT_INLINE fbatch load_dense(const fp16* w) { return load_f16(w); }

/// Broadcast-FMA a row tile over f32 or fp16 weights [K][kNR] (a panel or a dequantised panel). fp16 weights are
/// widened per vector, so both types run the same operations in the same order.
template <int R, class X, class Wv>
MAXTEXT_INLINE void tile_dense(std::int64_t K, const X* x, std::int64_t ldx, const Wv* w, fbatch (&acc)[R][kNV]) {
  for (std::int64_t k = 0; k < K; ++k) {
    fbatch b[kNV];
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) b[v] = load_dense(w + k * kNR + v * kW);
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      const fbatch a(scalar(x[r * ldx + k]));
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) acc[r][v] = xsimd::fma(a, b[v], acc[r][v]);
    }
  }
}

/// Q8_0 panel straight from its blocks (few rows): per block, sum q*x in f32, then scale by d once.
template <int R, class X>
MAXTEXT_INLINE void tile_q8(std::int64_t K, const X* x, std::int64_t ldx, const std::byte* panel,
                            fbatch (&acc)[R][kNV]) {
  const std::size_t bb = q8_block_bytes();
  for (std::int64_t kb = 0; kb < K / q8_0::block; ++kb) {
    const std::byte* blk = panel + static_cast<std::size_t>(kb) * bb;
    const auto* d = reinterpret_cast<const fp16*>(blk);
    const auto* q = reinterpret_cast<const std::int8_t*>(blk + kNR * 2);
    prefetch_lines<R>(blk, bb);
    fbatch s[R][kNV];
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) s[r][v] = fbatch(0.0f);
    }
    for (int i = 0; i < q8_0::block; ++i) {
      const std::int64_t k = kb * q8_0::block + i;
      fbatch a[R];
      MAXTEXT_UNROLL
      for (int r = 0; r < R; ++r) a[r] = fbatch(scalar(x[r * ldx + k]));
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) {
        const fbatch wv = load_i8(q + i * kNR + v * kW);
        MAXTEXT_UNROLL
        for (int r = 0; r < R; ++r) s[r][v] = xsimd::fma(a[r], wv, s[r][v]);
      }
    }
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) {
      const fbatch dv = load_f16(d + v * kW);
      MAXTEXT_UNROLL
      for (int r = 0; r < R; ++r) acc[r][v] = xsimd::fma(s[r][v], dv, acc[r][v]);
    }
  }
}

using ibatch = xsimd::batch<std::int32_t>;
static_assert(ibatch::size == fbatch::size, "int32 and float batches have the same lanes");

/// Rows of activations quantised to 8 bits per 32-element block (see quantize_row): values q [rows][ldq], and per
/// block its scale d and off * sum(q) [rows][ldb] (off = 128 for the Q8_0 panels).
struct QuantRows {
  const std::int8_t* q = nullptr;
  const float* d = nullptr;
  const std::int32_t* c = nullptr;
  std::int64_t ldq = 0, ldb = 0;
  const float* e = nullptr;  ///< d * sum(q) per block (runtime-typed blocks with offsets), or null

  QuantRows at_row(std::int64_t r) const {
    return {q + r * ldq, d + r * ldb, c + r * ldb, ldq, ldb, e == nullptr ? nullptr : e + r * ldb};
  }
};

/// Quantise one row of K (a multiple of 32) activations: per block d = max|x| / 127, q = round-to-nearest-even(x / d)
/// computed as x * (1 / d) (llama.cpp's Q8_0 rule, with the scale kept in f32 instead of fp16); an all-zero block
/// has d = 0 and q = 0, and so does a block whose 1 / d overflows (max|x| below ~3.7e-37) in q.
/// c = off * sum(q) per block; where `e` is given, also e = d * sum(q).
template <class X>
inline void quantize_row(const X* x, std::int64_t K, std::int8_t* q, float* d, std::int32_t* c,
                         std::int32_t off = 128, float* e = nullptr) {
  constexpr int B = q8_0::block;
  alignas(64) float t[B];
  alignas(64) std::int32_t qi[B];
  for (std::int64_t kb = 0; kb < K / B; ++kb) {
    const X* xb = x + kb * B;
    for (int i = 0; i < B; ++i) t[i] = scalar(xb[i]);
    fbatch amax(0.0f);
    for (int i = 0; i < B; i += static_cast<int>(kW)) amax = xsimd::max(amax, xsimd::abs(fbatch::load_aligned(t + i)));
    const float dk = vec::hmax(amax) / 127.0f, id = qblock::inverse_scale(dk);
    ibatch sum(0);
    for (int i = 0; i < B; i += static_cast<int>(kW)) {
      ibatch v = xsimd::nearbyint_as_int(fbatch::load_aligned(t + i) * fbatch(id));
      v = xsimd::min(xsimd::max(v, ibatch(-127)), ibatch(127));
      v.store_aligned(qi + i);
      sum += v;
    }
    for (int i = 0; i < B; ++i) q[kb * B + i] = static_cast<std::int8_t>(qi[i]);
    d[kb] = dk;
    const std::int32_t total = xsimd::hadd(sum);
    c[kb] = off * total;
    if (e != nullptr) e[kb] = dk * static_cast<float>(total);
  }
}

/// acc + per lane the dot product of its 4 unsigned weight bytes with the 4 signed activation bytes `a4` (exact).
MAXTEXT_INLINE ibatch dot4(ibatch acc, ibatch w, std::int32_t a4) {
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
  static_assert(kW == 16, "vpdpbusd path expects 512-bit batches");
  return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(a4));
#else
  const ibatch byte(0xff);
  MAXTEXT_UNROLL
  for (int i = 0; i < 4; ++i) {
    const std::int32_t ai = static_cast<std::int8_t>(static_cast<std::uint32_t>(a4) >> (8 * i));
    acc += ((w >> (8 * i)) & byte) * ibatch(ai);
  }
  return acc;
#endif
}

/// Q8_0 (offset layout) times 8-bit activations over `nb` blocks from block kb0, vectors [v0, v0 + NV) of the panel:
/// exact int32 sums per block, then acc += (float)sum * (d_w * d_x).
template <int R, int NV>
MAXTEXT_INLINE void tile_q8_i8(std::int64_t nb, std::int64_t kb0, const QuantRows& x, const std::byte* panel, int v0,
                               fbatch (&acc)[R][kNV]) {
  const std::size_t bb = q8_block_bytes();
  constexpr int groups = q8_0::block / 4;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = panel + static_cast<std::size_t>(b) * bb;
    const auto* d = reinterpret_cast<const fp16*>(blk);
    const auto* w = reinterpret_cast<const std::int32_t*>(blk + kNR * 2);
    const std::int64_t kb = kb0 + b;
    ibatch s[R][NV];
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      MAXTEXT_UNROLL
      for (int v = 0; v < NV; ++v) s[r][v] = ibatch(0);
    }
    for (int g = 0; g < groups; ++g) {
      ibatch wv[NV];
      MAXTEXT_UNROLL
      for (int v = 0; v < NV; ++v) wv[v] = ibatch::load_aligned(w + g * kNR + (v0 + v) * kW);
      MAXTEXT_UNROLL
      for (int r = 0; r < R; ++r) {
        std::int32_t a4;
        std::memcpy(&a4, x.q + r * x.ldq + kb * q8_0::block + 4 * g, 4);
        MAXTEXT_UNROLL
        for (int v = 0; v < NV; ++v) s[r][v] = dot4(s[r][v], wv[v], a4);
      }
    }
    fbatch dw[NV];
    MAXTEXT_UNROLL
    for (int v = 0; v < NV; ++v) dw[v] = load_f16(d + (v0 + v) * kW);
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      const fbatch dx(x.d[r * x.ldb + kb]);
      const ibatch c(x.c[r * x.ldb + kb]);
      MAXTEXT_UNROLL
      for (int v = 0; v < NV; ++v) {
        acc[r][v0 + v] = xsimd::fma(xsimd::batch_cast<float>(s[r][v] - c), dw[v] * dx, acc[r][v0 + v]);
      }
    }
  }
}

/// Dequantise one Q8_0 panel to f32 [K][kNR] (exact: fp16 scale times int8 fits f32).
inline void dequant_q8_panel(std::int64_t K, const std::byte* panel, float* out) {
  const std::size_t bb = q8_block_bytes();
  for (std::int64_t kb = 0; kb < K / q8_0::block; ++kb) {
    const std::byte* blk = panel + static_cast<std::size_t>(kb) * bb;
    const auto* d = reinterpret_cast<const fp16*>(blk);
    const auto* q = reinterpret_cast<const std::int8_t*>(blk + kNR * 2);
    fbatch dv[kNV];
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) dv[v] = load_f16(d + v * kW);
    for (int i = 0; i < q8_0::block; ++i) {
      float* o = out + (kb * q8_0::block + i) * kNR;
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) (load_i8(q + i * kNR + v * kW) * dv[v]).store_aligned(o + v * kW);
    }
  }
}

#if defined(__AVX__)
/// dst[c * ldd + r] = src[r * lds + c] for r, c < 8: eight rows of eight floats written as eight columns, in registers.
MAXTEXT_INLINE void transpose_8x8(const float* src, std::int64_t lds, float* dst, std::int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  for (int i = 0; i < 8; i += 4) {
    for (int h = 0; h < 2; ++h) {
      r[i + 2 * h] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(1, 0, 1, 0));      // a b c d, column 0 / 2
      r[i + 2 * h + 1] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(3, 2, 3, 2));  // column 1 / 3
    }
  }
  // r[0..3]: columns 0, 1, 2, 3 (| 4, 5, 6, 7) of rows 0-3; r[4..7] the same of rows 4-7.
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
  }
}
#endif

/// Dequantise rows [n0, n0 + kNR) x columns [k0, k0 + kc) of a runtime-typed weight into the f32 panel layout
/// [kc][kNR] (exact; rows past the weight's end are zero). k0 and kc are multiples of the block. `rows` holds kW
/// rows of kc values: each group of kW weight rows is decoded there, then written k-major, so that the panel is
/// written line by line (a row-at-a-time scatter touched kc cache lines per row, far more than L1 holds).
inline void dequant_ggml_panel(const Packed& p, std::int64_t pi, std::int64_t k0, std::int64_t kc, float* out,
                               float* rows) {
  const quant::TypeInfo& f = quant::checked_type_info(p.ggml_type);
  const std::int64_t n0 = pi * kNR, nb = std::min(kNR, p.rows - n0);
  const std::size_t off = static_cast<std::size_t>(k0 / f.block * f.bytes);
  for (std::int64_t g = 0; g < kNR; g += kW) {
    for (std::int64_t j = 0; j < kW; ++j) {
      float* r = rows + j * kc;
      if (g + j >= nb) {
        std::fill(r, r + kc, 0.0f);
        continue;
      }
      qblock::dequantize_any(p.ggml_type, p.rows_data + static_cast<std::size_t>(n0 + g + j) * p.row_bytes + off, r, kc);
      quant::scale_values(r, kc, p.value_scale);
    }
    std::int64_t k = 0;
#if defined(__AVX__)
    static_assert(kW % 8 == 0, "the panel's vector width is a multiple of 8 floats");
    for (; k + 8 <= kc; k += 8) {
      for (std::int64_t j = 0; j < kW; j += 8) transpose_8x8(rows + j * kc + k, kc, out + k * kNR + g + j, kNR);
    }
#endif
    for (; k < kc; ++k) {
      float* o = out + k * kNR + g;
      MAXTEXT_UNROLL
      for (std::int64_t j = 0; j < kW; ++j) o[j] = rows[j * kc + k];
    }
  }
}

// ---- 8-bit-activation GEMM on runtime-typed blocks ----------------------------------------------------------------
// Block types whose values are one scale (and, for some, one offset) per 32 weights times an integer quant:
//   w = a * (u - off) + b,   u in 0..255 (unsigned), off a per-type constant, b = 0 unless the type has mins.
// With activations x ~= d_x * q_x per 32-value group (quantize_row), each group contributes
//   d_x * ( a * (sum u q_x - off * sum q_x) + b * sum q_x )
// where the two integer sums are exact: the first is vpdpbusd's (unsigned by signed bytes), the second is known
// from the quantisation (QuantRows::c = off * sum q_x, QuantRows::e = d_x * sum q_x). Prefill decodes each panel
// slice (kNR weight rows, one K block) once into the Q8_0-like operand layout below and runs vpdpbusd tiles on it,
// for every row tile of the row block; Q2_K, Q3_K and Q6_K (a scale per 16 values) keep the f32 panels.

/// How a runtime-typed block type enters the integer GEMM: `ok` when it has one scale per 32 values, `off` the
/// offset that makes its quants unsigned, `min` when it also has an offset b per 32 values.
struct GgmlI8Kind {
  bool ok = false;
  bool min = false;
  std::int32_t off = 0;
};

inline GgmlI8Kind ggml_i8_kind(std::uint32_t type) {
  switch (static_cast<quant::BlockType>(type)) {
    case quant::BlockType::q4_0: return {true, false, 8};
    case quant::BlockType::q5_0: return {true, false, 16};
    case quant::BlockType::q8_0:
    case quant::BlockType::iq4_nl:
    case quant::BlockType::iq4_xs: return {true, false, 128};
    case quant::BlockType::q4_1:
    case quant::BlockType::q5_1:
    case quant::BlockType::q4_k:
    case quant::BlockType::q5_k: return {true, true, 0};
    default: return {};
  }
}

/// Bytes of one 32-wide k block of the integer panel: kNR f32 scales a, kNR f32 offsets b, then [8][kNR][4] bytes
/// u (four consecutive k per 32-bit lane, vpdpbusd's operand order).
inline constexpr std::size_t kI8BlockBytes = static_cast<std::size_t>(kNR) * (4 + 4 + 32);

/// One block of type t as unsigned quants u[0 .. block) and per 32 values a and b (w = a * (u - off) + b, off from
/// ggml_i8_kind). The scales are the scalar decoder's (exact products of fp16 and small integers).
inline void decode_u8(quant::BlockType t, const std::byte* blk, std::uint8_t* u, float* a, float* b) {
  using quant::BlockType;
  switch (t) {
#if defined(__AVX2__)
    case BlockType::q4_0:
    case BlockType::q4_1: {  // [d][m?][16 B]: element l in the low nibble of byte l, element l + 16 in the high
      const int hdr = t == BlockType::q4_1 ? 4 : 2;
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + hdr));
      const __m128i m4 = _mm_set1_epi8(15);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(u), _mm_and_si128(q, m4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(u + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m4));
      a[0] = qblock::detail::half(blk);
      b[0] = t == BlockType::q4_1 ? qblock::detail::half(blk + 2) : 0.0f;
      return;
    }
    case BlockType::q8_0: {  // q + 128 == q ^ 0x80 as bytes
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u), _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))));
      a[0] = qblock::detail::half(blk);
      b[0] = 0.0f;
      return;
    }
    case BlockType::iq4_nl:
    case BlockType::iq4_xs: {  // codebook value + 128 by a byte shuffle; 16 bytes per 32 values
      alignas(16) std::uint8_t tab[16];
      for (int i = 0; i < 16; ++i) tab[i] = static_cast<std::uint8_t>(quant::detail::kIq4Values[i] + 128);
      const __m128i lut = _mm_load_si128(reinterpret_cast<const __m128i*>(tab));
      const __m128i m4 = _mm_set1_epi8(15);
      const bool xs = t == BlockType::iq4_xs;
      const int groups = xs ? 8 : 1;
      const float d = qblock::detail::half(blk);
      std::uint16_t sh = 0;
      if (xs) std::memcpy(&sh, blk + 2, 2);
      for (int j = 0; j < groups; ++j) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (xs ? 8 + 16 * j : 2)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(u + 32 * j), _mm_shuffle_epi8(lut, _mm_and_si128(q, m4)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(u + 32 * j + 16),
                         _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4)));
        const int ls = xs ? (((qblock::detail::u8(blk + 4, j / 2) >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4))
                          : 32;
        a[j] = xs ? d * static_cast<float>(ls - 32) : d;
        b[j] = 0.0f;
      }
      return;
    }
    case BlockType::q4_k:
    case BlockType::q5_k: {  // sub-block j: the low (j even) or high (j odd) nibbles of bytes 32 * (j / 2) .. + 31
      const bool five = t == BlockType::q5_k;
      const float d = qblock::detail::half(blk), dmin = qblock::detail::half(blk + 2);
      const std::byte* qs = blk + (five ? 48 : 16);
      const __m256i m4 = _mm256_set1_epi8(15);
      const __m256i qh = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)) : _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * i));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (five) {  // bit j of qh[l] is bit 4 of element l of sub-block j
          const auto bit4 = [&](int j) {
            const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << j));
            return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m), m), _mm256_set1_epi8(16));
          };
          lo = _mm256_or_si256(lo, bit4(2 * i));
          hi = _mm256_or_si256(hi, bit4(2 * i + 1));
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 64 * i), lo);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 64 * i + 32), hi);
      }
      for (int j = 0; j < 8; ++j) {
        int sc = 0, mn = 0;
        quant::detail::k_scale_min(blk + 4, j, sc, mn);
        a[j] = d * static_cast<float>(sc);
        b[j] = -(dmin * static_cast<float>(mn));
      }
      return;
    }
#endif
    default: {  // the portable decoder's integers (and every type on machines without AVX2)
      qblock::detail::IntBlock ib;
      qblock::detail::decode_int(t, blk, ib);
      const std::int32_t off = ggml_i8_kind(static_cast<std::uint32_t>(t)).off;
      const int n = static_cast<int>(quant::block_format(t).block);
      for (int e = 0; e < n; ++e) u[e] = static_cast<std::uint8_t>(ib.q[e] + off);
      for (int g = 0; g < n / 32; ++g) {
        a[g] = ib.a[2 * g];
        b[g] = ib.b[2 * g] == 0.0f ? 0.0f : ib.b[2 * g];
      }
      return;
    }
  }
}

#if defined(__AVX512F__)
/// w[l * kNR + j] = 32-bit word l of the 32 bytes at rows + j * ld, for the 16 rows j and the 8 words l: two 8 x 8
/// transposes of 32-bit words side by side (rows 0-7 in the low 256 bits, 8-15 in the high), with unpacks and a
/// two-source permute in place of 128 four-byte copies: model c's one-thread Q4_0 prefill of 128 tokens went from
/// 291 to 327 tokens/s (decode_i8_panel from 41% to 33% of the time). (Hinting the next panel's weight rows into L2
/// first measured no faster.)
inline void transpose_i8_block(const std::uint8_t* rows, std::int64_t ld, std::int32_t* w) {
  static_assert(kW == 16);
  __m512i z[8], a[8], b[8];
  for (int i = 0; i < 8; ++i) {
    const auto* lo = reinterpret_cast<const __m256i*>(rows + i * ld);
    const auto* hi = reinterpret_cast<const __m256i*>(rows + (i + 8) * ld);
    z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(lo)), _mm256_loadu_si256(hi), 1);
  }
  for (int i = 0; i < 8; i += 2) {  // per 128-bit lane: [r_i w0, r_i+1 w0, r_i w1, r_i+1 w1], then words 2, 3
    a[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
    a[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // per 128-bit lane: word 0 (1, 2, 3) of rows i .. i+3
    b[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
    b[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
    b[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
    b[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
  // Lanes of b[m] (rows 0-3) and b[m + 4] (rows 4-7): [word m | word m+4] of rows 0-3 and 8-11, of 4-7 and 12-15.
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int m = 0; m < 4; ++m) {
    _mm512_storeu_si512(w + m * kNR, _mm512_permutex2var_epi64(b[m], first, b[m + 4]));
    _mm512_storeu_si512(w + (m + 4) * kNR, _mm512_permutex2var_epi64(b[m], second, b[m + 4]));
  }
}
#endif

/// Decode rows [n0, n0 + kNR) x columns [k0, k0 + kc) of a runtime-typed weight (a type ggml_i8_kind accepts) into
/// the integer panel layout (kc / 32 blocks of kI8BlockBytes; rows past the weight's end have u = 0, a = b = 0).
/// `rows` holds kW rows of kc bytes and `ab` 2 * kW * kc / 32 floats: kW weight rows are decoded there, then
/// written into the panel block by block. The weight's value_scale multiplies a and b.
inline void decode_i8_panel(const Packed& p, std::int64_t pi, std::int64_t k0, std::int64_t kc, std::byte* out,
                            std::uint8_t* rows, float* ab) {
  const auto t = static_cast<quant::BlockType>(p.ggml_type);
  const quant::TypeInfo& f = quant::checked_type_info(p.ggml_type);
  const std::int64_t n0 = pi * kNR, nb = std::min(kNR, p.rows - n0), groups = kc / 32;
  const std::size_t off = static_cast<std::size_t>(k0 / f.block * f.bytes);
  const auto vs = static_cast<float>(p.value_scale);
  float* av = ab;
  float* bv = ab + kW * groups;
  for (std::int64_t g = 0; g < kNR; g += kW) {
    for (std::int64_t j = 0; j < kW; ++j) {
      std::uint8_t* r = rows + j * kc;
      float* aj = av + j * groups;
      float* bj = bv + j * groups;
      if (g + j >= nb) {
        std::fill(r, r + kc, std::uint8_t{0});
        std::fill(aj, aj + groups, 0.0f);
        std::fill(bj, bj + groups, 0.0f);
        continue;
      }
      const std::byte* src = p.rows_data + static_cast<std::size_t>(n0 + g + j) * p.row_bytes + off;
      for (std::int64_t e = 0; e < kc; e += f.block, src += f.bytes) decode_u8(t, src, r + e, aj + e / 32, bj + e / 32);
      if (p.value_scale != 1.0) {
        for (std::int64_t q = 0; q < groups; ++q) {
          aj[q] *= vs;
          bj[q] *= vs;
        }
      }
    }
    for (std::int64_t q = 0; q < groups; ++q) {
      std::byte* blk = out + static_cast<std::size_t>(q) * kI8BlockBytes;
      auto* a = reinterpret_cast<float*>(blk);
      auto* b = a + kNR;
      auto* w = reinterpret_cast<std::int32_t*>(blk + kNR * 8);
      for (std::int64_t j = 0; j < kW; ++j) {
        a[g + j] = av[j * groups + q];
        b[g + j] = bv[j * groups + q];
      }
#if defined(__AVX512F__)
      transpose_i8_block(rows + 32 * q, kc, w + g);
#else
      for (int l = 0; l < 8; ++l) {
        MAXTEXT_UNROLL
        for (std::int64_t j = 0; j < kW; ++j) std::memcpy(w + l * kNR + g + j, rows + j * kc + 32 * q + 4 * l, 4);
      }
#endif
    }
  }
}

/// The integer panel (decode_i8_panel) times 8-bit activations over `nb` 32-wide blocks from block kb0, vectors
/// [v0, v0 + NV) of the panel: exact int32 sums per block, then acc += (float)(sum - off * sum q_x) * (a * d_x)
/// (+ b * d_x * sum q_x for the types with offsets).
template <int R, int NV, bool kMin>
MAXTEXT_INLINE void tile_ggml_i8(std::int64_t nb, std::int64_t kb0, const QuantRows& x, const std::byte* panel, int v0,
                                 fbatch (&acc)[R][kNV]) {
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = panel + static_cast<std::size_t>(b) * kI8BlockBytes;
    const auto* a = reinterpret_cast<const float*>(blk);
    const auto* w = reinterpret_cast<const std::int32_t*>(blk + kNR * 8);
    const std::int64_t kb = kb0 + b;
    ibatch s[R][NV];
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      MAXTEXT_UNROLL
      for (int v = 0; v < NV; ++v) s[r][v] = ibatch(0);
    }
    for (int g = 0; g < 8; ++g) {
      ibatch wv[NV];
      MAXTEXT_UNROLL
      for (int v = 0; v < NV; ++v) wv[v] = ibatch::load_aligned(w + g * kNR + (v0 + v) * kW);
      MAXTEXT_UNROLL
      for (int r = 0; r < R; ++r) {
        std::int32_t a4;
        std::memcpy(&a4, x.q + r * x.ldq + kb * 32 + 4 * g, 4);
        MAXTEXT_UNROLL
        for (int v = 0; v < NV; ++v) s[r][v] = dot4(s[r][v], wv[v], a4);
      }
    }
    fbatch av[NV], bv[NV];
    MAXTEXT_UNROLL
    for (int v = 0; v < NV; ++v) {
      av[v] = fbatch::load_aligned(a + (v0 + v) * kW);
      if constexpr (kMin) bv[v] = fbatch::load_aligned(a + kNR + (v0 + v) * kW);
    }
    MAXTEXT_UNROLL
    for (int r = 0; r < R; ++r) {
      const fbatch dx(x.d[r * x.ldb + kb]);
      if constexpr (kMin) {
        const fbatch ex(x.e[r * x.ldb + kb]);
        MAXTEXT_UNROLL
        for (int v = 0; v < NV; ++v) {
          acc[r][v0 + v] = xsimd::fma(xsimd::batch_cast<float>(s[r][v]), av[v] * dx, acc[r][v0 + v]);
          acc[r][v0 + v] = xsimd::fma(bv[v], ex, acc[r][v0 + v]);
        }
      } else {
        const ibatch c(x.c[r * x.ldb + kb]);
        MAXTEXT_UNROLL
        for (int v = 0; v < NV; ++v) {
          acc[r][v0 + v] = xsimd::fma(xsimd::batch_cast<float>(s[r][v] - c), av[v] * dx, acc[r][v0 + v]);
        }
      }
    }
  }
}

/// tile_ggml_i8 over the whole panel width: at once for few rows, else half the vectors at a time (the int32 block
/// sums of every row take registers too).
template <int R, bool kMin>
MAXTEXT_INLINE void tile_ggml_i8_all(std::int64_t nb, std::int64_t kb0, const QuantRows& x, const std::byte* panel,
                                     fbatch (&acc)[R][kNV]) {
  if constexpr (R <= 2 || kNV == 1) {
    tile_ggml_i8<R, kNV, kMin>(nb, kb0, x, panel, 0, acc);
  } else {
    tile_ggml_i8<R, kNV / 2, kMin>(nb, kb0, x, panel, 0, acc);
    tile_ggml_i8<R, kNV / 2, kMin>(nb, kb0, x, panel, kNV / 2, acc);
  }
}

/// Widen one fp16 panel slice [K][kNR] to f32 (exact).
inline void dequant_f16_panel(std::int64_t K, const fp16* panel, float* out) {
  for (std::int64_t i = 0; i < K * kNR; i += kW) load_f16(panel + i).store_aligned(out + i);
}

/// Round the tile to Y once, add the bias (rounded again, as DenseGeneral adds it after the product) and store
/// `ncols` (<= kNR) columns of R rows.
template <int R, class Y, class Bias>
MAXTEXT_INLINE void store_tile(fbatch (&acc)[R][kNV], Y* y, std::int64_t ldy, std::int64_t ncols, const Bias* bias) {
  MAXTEXT_UNROLL
  for (int r = 0; r < R; ++r) {
    Y* yr = y + r * ldy;
    if constexpr (std::is_same_v<Y, float>) {
      if (bias == nullptr && ncols == kNR) {
        MAXTEXT_UNROLL
        for (int v = 0; v < kNV; ++v) acc[r][v].store_unaligned(yr + v * kW);
        continue;
      }
    }
    alignas(64) float t[kNR];
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) vec::round<Y>(acc[r][v]).store_aligned(t + v * kW);
    if (bias != nullptr) {
      for (std::int64_t j = 0; j < ncols; ++j) t[j] = t[j] + to_float(bias[j]);
    }
    vec::from_f32(t, yr, ncols);
  }
}

/// f32 partial sums of a tile from / to memory; only `ncols` columns exist there.
template <int R>
MAXTEXT_INLINE void load_partial(fbatch (&acc)[R][kNV], const float* src, std::int64_t ld, std::int64_t ncols) {
  for (int r = 0; r < R; ++r) {
    if (ncols == kNR) {
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) acc[r][v] = fbatch::load_unaligned(src + r * ld + v * kW);
    } else {
      alignas(64) float t[kNR] = {};
      std::copy(src + r * ld, src + r * ld + ncols, t);
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) acc[r][v] = fbatch::load_aligned(t + v * kW);
    }
  }
}
template <int R>
MAXTEXT_INLINE void store_partial(fbatch (&acc)[R][kNV], float* dst, std::int64_t ld, std::int64_t ncols) {
  for (int r = 0; r < R; ++r) {
    if (ncols == kNR) {
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) acc[r][v].store_unaligned(dst + r * ld + v * kW);
    } else {
      alignas(64) float t[kNR];
      MAXTEXT_UNROLL
      for (int v = 0; v < kNV; ++v) acc[r][v].store_aligned(t + v * kW);
      std::copy(t, t + ncols, dst + r * ld);
    }
  }
}

/// Where one register tile's work lies: K range [k0, k0 + kc) of panel `pi`; `deq` is the panel dequantised to f32
/// (Q8_0 with many rows) or null. Partial sums of earlier K blocks come from / go to `part` (f32, row stride ldp);
/// the last K block rounds, adds the bias and stores to y.
struct TileJob {
  std::int64_t pi = 0, k0 = 0, kc = 0;
  const float* deq = nullptr;
  bool first = true, last = true;
  float* part = nullptr;
  std::int64_t ldp = 0;
  QuantRows xq{};  ///< the tile's rows of 8-bit activations (PackKind::q8_0_i8, and ggml with int8)
  const std::byte* i8 = nullptr;  ///< runtime-typed blocks decoded to the integer panel (decode_i8_panel), or null
  bool i8_min = false;            ///< that type has offsets b (GgmlI8Kind::min)
};

template <int R, class X, class Y, class Bias>
MAXTEXT_INLINE void run_tile(const Packed& p, const TileJob& j, const X* x, std::int64_t ldx, Y* y, std::int64_t ldy,
                             const Bias* bias) {
  const std::int64_t n0 = j.pi * kNR, ncols = std::min(kNR, p.rows - n0);
  fbatch acc[R][kNV];
  MAXTEXT_UNROLL
  for (int r = 0; r < R; ++r) {
    MAXTEXT_UNROLL
    for (int v = 0; v < kNV; ++v) {
      acc[r][v] = fbatch(0.0f);
    }
  }
  if (!j.first) load_partial<R>(acc, j.part + n0, j.ldp, ncols);
  const X* xk = x + j.k0;
  if (j.i8 != nullptr) {
    if (j.i8_min) {
      tile_ggml_i8_all<R, true>(j.kc / 32, j.k0 / 32, j.xq, j.i8, acc);
    } else {
      tile_ggml_i8_all<R, false>(j.kc / 32, j.k0 / 32, j.xq, j.i8, acc);
    }
  } else if (j.deq != nullptr) {
    tile_dense<R>(j.kc, xk, ldx, j.deq + j.k0 * kNR, acc);
  } else if (p.kind == PackKind::f32) {
    tile_dense<R>(j.kc, xk, ldx, reinterpret_cast<const float*>(p.panel(j.pi)) + j.k0 * kNR, acc);
  } else if (p.kind == PackKind::bf16) {
    const auto* w = reinterpret_cast<const std::uint32_t*>(p.panel(j.pi)) + (j.k0 / 2) * kNR;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    if constexpr (std::is_same_v<X, bf16>) {
      tile_bf16_dot<R>(j.kc, xk, ldx, w, acc);
    } else {
      tile_bf16_split<R>(j.kc, xk, ldx, w, acc);
    }
#else
    tile_bf16_split<R>(j.kc, xk, ldx, w, acc);
#endif
  } else if (p.kind == PackKind::f16) {
    tile_dense<R>(j.kc, xk, ldx, reinterpret_cast<const fp16*>(p.panel(j.pi)) + j.k0 * kNR, acc);
  } else if (p.kind == PackKind::q8_0) {
    tile_q8<R>(j.kc, xk, ldx, p.panel(j.pi) + static_cast<std::size_t>(j.k0 / q8_0::block) * q8_block_bytes(), acc);
  } else {
    const std::int64_t kb0 = j.k0 / q8_0::block, nb = j.kc / q8_0::block;
    const std::byte* pan = p.panel(j.pi) + static_cast<std::size_t>(kb0) * q8_block_bytes();
    if constexpr (R <= 2 || kNV == 1) {
      tile_q8_i8<R, kNV>(nb, kb0, j.xq, pan, 0, acc);
    } else {  // int32 block sums for every row take registers too: half the panel's vectors at a time
      tile_q8_i8<R, kNV / 2>(nb, kb0, j.xq, pan, 0, acc);
      tile_q8_i8<R, kNV / 2>(nb, kb0, j.xq, pan, kNV / 2, acc);
    }
  }
  if (!j.last) {
    store_partial<R>(acc, j.part + n0, j.ldp, ncols);
    return;
  }
  store_tile<R>(acc, y + n0, ldy, ncols, bias == nullptr ? bias : bias + n0);
}

template <int R, class X, class Y, class Bias>
void run_tile_dispatch(int rows, const Packed& p, const TileJob& j, const X* x, std::int64_t ldx, Y* y,
                       std::int64_t ldy, const Bias* bias) {
  if constexpr (R >= 1) {
    if (rows == R) {
      run_tile<R>(p, j, x, ldx, y, ldy, bias);
    } else {
      run_tile_dispatch<R - 1>(rows, p, j, x, ldx, y, ldy, bias);
    }
  }
}

}  // namespace detail

namespace detail {

/// The panels of an N x K weight of W, allocated and not yet filled (pack_panels fills them).
template <class W>
std::shared_ptr<Packed> packed_shell(std::int64_t N, std::int64_t K, bool int8_activations) {
  auto p = std::make_shared<Packed>();
  p->rows = N;
  p->cols = K;
  p->panels = (N + kNR - 1) / kNR;
  if constexpr (std::is_same_v<W, float>) {
    p->kind = PackKind::f32;
    p->panel_bytes = static_cast<std::size_t>(K * kNR) * sizeof(float);
  } else if constexpr (std::is_same_v<W, bf16>) {
    p->kind = PackKind::bf16;
    p->panel_bytes = static_cast<std::size_t>(detail::pairs(K) * kNR) * 4;
  } else if constexpr (std::is_same_v<W, fp16>) {
    p->kind = PackKind::f16;
    p->panel_bytes = static_cast<std::size_t>(K * kNR) * sizeof(fp16);
  } else {
    static_assert(std::is_same_v<W, q8_0>, "pack: float, bf16, fp16 or q8_0 weights");
    p->kind = int8_activations ? PackKind::q8_0_i8 : PackKind::q8_0;
    p->panel_bytes = static_cast<std::size_t>(K / q8_0::block) * detail::q8_block_bytes();
  }
  p->buf = AlignedBuffer(p->panel_bytes * static_cast<std::size_t>(p->panels));
  return p;
}

/// Lay rows [row0, row0 + n) of an out-major weight into their panels of `pk` (`w` points at row row0): row0 starts a
/// panel, and row0 + n ends one or is the last row.
template <class W>
void pack_panels(Packed& pk, const W* w, std::int64_t row0, std::int64_t n, int threads) {
  const std::int64_t K = pk.cols, end = row0 + n, first = row0 / kNR;
  MAXTEXT_DASSERT(row0 % kNR == 0 && (end % kNR == 0 || end == pk.rows) && end <= pk.rows);
  parallel_for((n + kNR - 1) / kNR, threads, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t pi = first + p0; pi < first + p1; ++pi) {
      std::byte* dst = pk.panel(pi);
      std::memset(dst, 0, pk.panel_bytes);
      const std::int64_t n0 = pi * kNR - row0, nb = std::min(kNR, end - pi * kNR);
      if constexpr (std::is_same_v<W, float>) {
        auto* o = reinterpret_cast<float*>(dst);
        for (std::int64_t j = 0; j < nb; ++j) {
          const float* row = w + (n0 + j) * K;
          for (std::int64_t k = 0; k < K; ++k) o[k * kNR + j] = row[k];
        }
      } else if constexpr (std::is_same_v<W, bf16>) {
        auto* o = reinterpret_cast<std::uint16_t*>(dst);
        for (std::int64_t j = 0; j < nb; ++j) {
          const bf16* row = w + (n0 + j) * K;
          for (std::int64_t k = 0; k < K; ++k) o[((k / 2) * kNR + j) * 2 + (k % 2)] = row[k].bits;
        }
      } else if constexpr (std::is_same_v<W, fp16>) {
        auto* o = reinterpret_cast<fp16*>(dst);
        for (std::int64_t j = 0; j < nb; ++j) {
          const fp16* row = w + (n0 + j) * K;
          for (std::int64_t k = 0; k < K; ++k) o[k * kNR + j] = row[k];
        }
      } else {
        const std::int64_t KB = K / q8_0::block;
        for (std::int64_t kb = 0; kb < KB; ++kb) {
          std::byte* blk = dst + static_cast<std::size_t>(kb) * detail::q8_block_bytes();
          auto* d = reinterpret_cast<fp16*>(blk);
          auto* q = reinterpret_cast<std::int8_t*>(blk + kNR * 2);
          auto* u = reinterpret_cast<std::uint8_t*>(blk + kNR * 2);
          for (std::int64_t j = 0; j < nb; ++j) {
            const q8_0& b = w[(n0 + j) * KB + kb];
            d[j] = b.d;
            for (int i = 0; i < q8_0::block; ++i) {
              if (pk.kind == PackKind::q8_0) {
                q[i * kNR + j] = b.qs[i];
              } else {  // [i/4][j][i%4], offset to unsigned
                u[((i / 4) * kNR + j) * 4 + i % 4] = static_cast<std::uint8_t>(static_cast<int>(b.qs[i]) + 128);
              }
            }
          }
        }
      }
    }
  });
}

}  // namespace detail

/// Pack an out-major weight [N, K] of float, bf16, fp16 or Q8_0 (K/32 blocks per row) once, on up to `threads` threads
/// (the backend's count: more than the cores would only contend). `int8_activations`: Q8_0 in the layout for 8-bit
/// activations and integer dot products (PackKind::q8_0_i8); ignored for other types.
template <class W>
std::shared_ptr<const Packed> pack(const W* w, std::int64_t N, std::int64_t K, bool int8_activations = false,
                                   int threads = 1) {
  auto p = detail::packed_shell<W>(N, K, int8_activations);
  detail::pack_panels(*p, w, 0, N, threads);
  return p;
}

/// Where pack_by_rows reads a weight's out-major rows: rows [r0, r1) into `out` (contiguous, (r1 - r0) rows of K
/// values, or of K/32 blocks for Q8_0).
template <class W>
using RowSource = std::function<void(std::int64_t r0, std::int64_t r1, W* out)>;

namespace detail {
template <class W>
std::shared_ptr<const Packed> pack_by_rows(const RowSource<W>& rows, std::int64_t N, std::int64_t K,
                                           bool int8_activations, int threads, std::int64_t granule,
                                           std::size_t chunk_bytes) {
  auto p = packed_shell<W>(N, K, int8_activations);
  const std::int64_t row_len = std::is_same_v<W, q8_0> ? K / q8_0::block : K;
  const auto row_bytes = static_cast<std::size_t>(std::max<std::int64_t>(row_len, 1)) * sizeof(W);
  // Chunks of whole panels and whole granules, about chunk_bytes each (at least one unit).
  const std::int64_t unit = std::lcm(std::max<std::int64_t>(granule, 1), kNR);
  const std::int64_t per = std::max<std::int64_t>(1, static_cast<std::int64_t>(chunk_bytes / row_bytes) / unit) * unit;
  std::vector<W> buf(static_cast<std::size_t>(std::min(per, N) * row_len));
  for (std::int64_t r0 = 0; r0 < N; r0 += per) {
    const std::int64_t r1 = std::min(N, r0 + per);
    rows(r0, r1, buf.data());
    pack_panels(*p, static_cast<const W*>(buf.data()), r0, r1 - r0, threads);
  }
  return p;
}
}  // namespace detail

/// Row `r` of the out-major weight that `pack` laid out in `p`, back in its own type (K values; Q8_0: K/32 blocks):
/// the panels hold every value exactly, so a matrix whose out-major copy was released (CpuBackend::release_rows)
/// still answers row reads (a head's rows for MLA's absorbed products, an export). The panel width is read from
/// the panel size, not from this translation unit's kNR.
template <class W>
void unpack_row(const Packed& p, std::int64_t r, W* out) {
  const std::int64_t K = p.cols;
  MAXTEXT_CHECK(r >= 0 && r < p.rows, ArgumentError, "[gemm] row ", r, " of a packed ", p.rows, " x ", K, " weight");
  if constexpr (std::is_same_v<W, float> || std::is_same_v<W, fp16>) {
    MAXTEXT_CHECK(p.kind == (std::is_same_v<W, float> ? PackKind::f32 : PackKind::f16), UnsupportedError,
                  "[gemm] unpack_row: the panels hold another type");
    const auto nr = static_cast<std::int64_t>(p.panel_bytes / (static_cast<std::size_t>(K) * sizeof(W)));
    const auto* src = reinterpret_cast<const W*>(p.panel(r / nr)) + r % nr;
    for (std::int64_t k = 0; k < K; ++k) out[k] = src[k * nr];
  } else if constexpr (std::is_same_v<W, bf16>) {
    MAXTEXT_CHECK(p.kind == PackKind::bf16, UnsupportedError, "[gemm] unpack_row: the panels hold another type");
    const auto nr = static_cast<std::int64_t>(p.panel_bytes / (static_cast<std::size_t>(detail::pairs(K)) * 4));
    const auto* src = reinterpret_cast<const std::uint16_t*>(p.panel(r / nr));
    const std::int64_t j = r % nr;
    for (std::int64_t k = 0; k < K; ++k) out[k].bits = src[((k / 2) * nr + j) * 2 + k % 2];
  } else {
    static_assert(std::is_same_v<W, q8_0>, "unpack_row: float, bf16, fp16 or q8_0 weights");
    MAXTEXT_CHECK(p.kind == PackKind::q8_0 || p.kind == PackKind::q8_0_i8, UnsupportedError,
                  "[gemm] unpack_row: the panels hold another type");
    const std::int64_t KB = K / q8_0::block;
    const std::size_t block_bytes = p.panel_bytes / static_cast<std::size_t>(KB);
    const auto nr = static_cast<std::int64_t>(block_bytes / (2 + q8_0::block));
    const std::int64_t j = r % nr;
    for (std::int64_t kb = 0; kb < KB; ++kb) {
      const std::byte* blk = p.panel(r / nr) + static_cast<std::size_t>(kb) * block_bytes;
      out[kb].d = reinterpret_cast<const fp16*>(blk)[j];
      const auto* q = reinterpret_cast<const std::int8_t*>(blk + nr * 2);
      const auto* u = reinterpret_cast<const std::uint8_t*>(blk + nr * 2);
      for (int i = 0; i < q8_0::block; ++i) {
        out[kb].qs[i] = p.kind == PackKind::q8_0 ? q[i * nr + j]
                                                 : static_cast<std::int8_t>(static_cast<int>(u[((i / 4) * nr + j) * 4 + i % 4]) - 128);
      }
    }
  }
}

/// A runtime-typed weight [N, K] (rows of `row_bytes` bytes of ggml type `type` at `rows`) for the kernels, without
/// a copy: `keep` holds the rows alive.
inline std::shared_ptr<const Packed> wrap_ggml(const std::byte* rows, std::size_t row_bytes, std::uint32_t type,
                                               std::int64_t N, std::int64_t K, std::shared_ptr<const void> keep,
                                               bool int8_activations = false, double value_scale = 1.0) {
  auto p = std::make_shared<Packed>();
  p->int8 = int8_activations;
  p->value_scale = value_scale;
  p->kind = PackKind::ggml;
  p->rows = N;
  p->cols = K;
  p->panels = (N + kNR - 1) / kNR;
  p->rows_data = rows;
  p->row_bytes = row_bytes;
  p->ggml_type = type;
  p->keep = std::move(keep);
  return p;
}

/// Rows of x up to which a runtime-typed weight is multiplied row by row (fused decode and dot, each weight block
/// decoded once for up to six of them (qblock::kExactDotRows), else four); above, panels are dequantised and the f32
/// tiles run. Eight, so that a verify pass of speculative decoding with up to 7 drafts takes decode's arithmetic
/// (each row's sums as a decode step's, to the bit) at a fraction of the panels' cost: model c's Q8_0, one thread,
/// 5 rows in 1.9 decode steps instead of 3.8 (bench/speculative).
inline constexpr std::int64_t kGgmlRowsDirect = 8;
/// The same for F32 / F16 / BF16 rows (qblock::dot_float_rows, all x rows in one pass over the weight rows). Widening
/// a panel costs about as much as reading the row again, so for a few rows (a short prompt) the direct products are
/// the quicker.
inline constexpr std::int64_t kFloatRowsDirect = qblock::kFloatDotRows;
/// Weight rows per qblock::dot_float_rows call in decode.
inline constexpr std::int64_t kFloatDecodeRows = 120;
/// The same with 8-bit activations (qblock::dot_q8_rows on a chunk of weight rows). Without VNNI the integer panel
/// tiles emulate vpdpbusd with 16-bit products, and up to 8 rows (a short prompt) are quicker row by row: 2.2-2.6x
/// on the 1B-class projections (bench/micro BM_gemm_ggml, M = 8, Q4_K and Q4_0, AVX2). With AVX-512 the kernels
/// decode each weight block once for up to 8 x rows (a verify pass of speculative decoding with up to 7 drafts), so
/// such a pass takes decode's arithmetic (each row's sums as a decode step's, to the bit) at about the cost of one
/// step: bench/qblock_bench with QBLOCK_BENCH_ROWS=8.
inline constexpr std::int64_t kGgmlI8RowsDirect = 8;

/// Whether this file packs weights of type W.
template <class W>
inline constexpr bool packable =
    std::is_same_v<W, float> || std::is_same_v<W, bf16> || std::is_same_v<W, fp16> || std::is_same_v<W, q8_0>;

/// Rows of x per cache block (kept in L2 while the thread's panels stream past) and K per block (so that one
/// panel slice, kKC x kNR, also stays in L2 while every row tile of the block uses it).
inline constexpr std::int64_t kMC = 16 * kMR;
/// Rows per block for runtime-typed blocks with 8-bit activations: each panel slice is decoded once per row block,
/// and the rows are bytes, so a larger block (kMCI8 x kKC bytes) still stays in L2 and the decoding is shared by
/// four times as many rows.
inline constexpr std::int64_t kMCI8 = 64 * kMR;
inline constexpr std::int64_t kKC = 1024;

/// Weight rows per qblock::dot_q8_rows call in matmul_q8_rows: their blocks stay in L1 / L2 while every x row passes.
inline constexpr std::int64_t kQ8RowsBlock = 32;
/// Weight rows per qblock::dot_q8_rows call in decode (up to kGgmlI8RowsDirect x rows): each call lays its x rows out
/// in the kernel's order first (Q4_K, Q5_K, IQ4_XS, Q8_0 on AVX-512), which 128 rows pay for better than 32 did.
inline constexpr std::int64_t kQ8DecodeRows = 128;

namespace detail {

/// Prefill on runtime-typed blocks with 8-bit activations through qblock::dot_q8_rows: every x row quantised once
/// (qblock::quantize_x, as for decode, so prompt and decoded tokens get the same products), then the threads split
/// the weight rows into blocks of kQ8RowsBlock, each multiplied with all x rows; rounding and bias as matmul's.
template <class X, class Y, class Bias>
void matmul_q8_rows(const Packed& p, const X* x, std::int64_t ldx, std::int64_t M, Y* y, std::int64_t ldy,
                    const Bias* bias, int threads) {
  const std::int64_t K = p.cols, N = p.rows;
  const auto bt = static_cast<quant::BlockType>(p.ggml_type);
  const int nt = 2 * M * N * K < (1 << 18) ? 1 : threads;
  const std::size_t qb = qblock::quantized_x_bytes(K), rows = static_cast<std::size_t>(M);
  std::byte* buf = thread_scratch(qb * rows + rows * sizeof(qblock::QuantizedX), 2);  // rows, then their views
  auto* xq = reinterpret_cast<qblock::QuantizedX*>(buf + qb * rows);
  parallel_for(M, M >= 4 * kMR ? nt : 1, [&](std::int64_t r0, std::int64_t r1) {
    float* xf = nullptr;  // an x row widened to f32 (bf16 x), in each thread's own scratch
    if constexpr (!std::is_same_v<X, float>) {
      xf = reinterpret_cast<float*>(thread_scratch(static_cast<std::size_t>(K) * sizeof(float), 4));
    }
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* row = nullptr;
      if constexpr (std::is_same_v<X, float>) {
        row = x + r * ldx;
      } else {
        vec::to_f32(x + r * ldx, xf, K);
        row = xf;
      }
      xq[r] = qblock::quantize_x(row, K, buf + qb * static_cast<std::size_t>(r));
    }
  });
  parallel_for(N, nt, [&](std::int64_t n0, std::int64_t n1) {
    auto* acc =
        reinterpret_cast<float*>(thread_scratch(static_cast<std::size_t>(M * kQ8RowsBlock) * sizeof(float), 1));
    for (std::int64_t b0 = n0; b0 < n1; b0 += kQ8RowsBlock) {
      const std::int64_t nb = std::min(kQ8RowsBlock, n1 - b0);
      qblock::dot_q8_rows(bt, p.rows_data + static_cast<std::size_t>(b0) * p.row_bytes, p.row_bytes, nb, xq, M, acc,
                          kQ8RowsBlock);
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t j = 0; j < nb; ++j) {
          float v = round_to<Y>(quant::scaled_value(acc[m * kQ8RowsBlock + j], p.value_scale));
          if (bias != nullptr) v = v + to_float(bias[b0 + j]);
          y[m * ldy + b0 + j] = from_float<Y>(v);
        }
      }
    }
  });
}

}  // namespace detail

/// y[M, N] (row stride ldy) = x[M, K] (row stride ldx) . W^T from a packed weight, rounded once to Y; with bias
/// (N values, or nullptr) y = round(round(x.W) + bias). X: float or bf16; Y: float, bf16 or fp16.
/// No allocation once the calling threads' scratch buffers have grown to the largest shape.
template <class X, class Y, class Bias = Y>
void matmul(const Packed& p, const X* x, std::int64_t ldx, std::int64_t M, Y* y, std::int64_t ldy,
            const Bias* bias, int threads) {
  if (M <= 0 || p.rows <= 0) return;
  const std::int64_t K = p.cols, N = p.rows;
  const bool floats = p.kind == PackKind::ggml && qblock::is_float_type(p.ggml_type);  // always exact
  const std::int64_t direct = floats ? kFloatRowsDirect : p.int8 ? kGgmlI8RowsDirect : kGgmlRowsDirect;
  if (p.kind == PackKind::ggml && M <= direct) {
    // Decode: x rows in f32 (the calling thread's scratch), then threads split the weight rows.
    const float* xf = nullptr;
    std::int64_t ldf = ldx;
    if constexpr (std::is_same_v<X, float>) {
      xf = x;
    } else {
      auto* buf = reinterpret_cast<float*>(thread_scratch(static_cast<std::size_t>(M * K) * sizeof(float), 4));
      for (std::int64_t m = 0; m < M; ++m) vec::to_f32(x + m * ldx, buf + m * K, K);
      xf = buf;
      ldf = K;
    }
    const int nt = 2 * M * N * K < (1 << 18) ? 1 : threads;
    const auto bt = static_cast<quant::BlockType>(p.ggml_type);
    const bool int8 = p.int8 && !floats;
    qblock::QuantizedX xq[std::max(kGgmlRowsDirect, kGgmlI8RowsDirect)];
    if (int8) {  // every x row quantised once, in the calling thread's scratch
      const std::size_t qb = qblock::quantized_x_bytes(K);
      std::byte* qbuf = thread_scratch(qb * static_cast<std::size_t>(M), 2);
      for (std::int64_t m = 0; m < M; ++m) xq[m] = qblock::quantize_x(xf + m * ldf, K, qbuf + static_cast<std::size_t>(m) * qb);
    }
    auto finish = [&](std::int64_t m, std::int64_t n, float a) {
      float v = round_to<Y>(quant::scaled_value(a, p.value_scale));
      if (bias != nullptr) v = v + to_float(bias[n]);
      y[m * ldy + n] = from_float<Y>(v);
    };
    parallel_for(N, nt, [&](std::int64_t n0, std::int64_t n1) {
      if (int8) {
        // kQ8DecodeRows weight rows per qblock::dot_q8_rows call (the same sums as dot_q8 row by row), not one dot_q8
        // call per row: model b's rows of K = 768 are three Q4_K blocks each, and its one-thread decode gained 5-7%.
        float accs[kGgmlI8RowsDirect * kQ8DecodeRows];
        for (std::int64_t c0 = n0; c0 < n1; c0 += kQ8DecodeRows) {
          const std::int64_t nc = std::min(kQ8DecodeRows, n1 - c0);
          qblock::dot_q8_rows(bt, p.rows_data + static_cast<std::size_t>(c0) * p.row_bytes, p.row_bytes, nc, xq, M,
                              accs, kQ8DecodeRows);
          for (std::int64_t m = 0; m < M; ++m) {
            for (std::int64_t j = 0; j < nc; ++j) finish(m, c0 + j, accs[m * kQ8DecodeRows + j]);
          }
        }
        return;
      }
      if (floats) {
        // kFloatDecodeRows weight rows per qblock::dot_float_rows call: tiles of weight rows share each x vector load.
        float accs[kFloatRowsDirect * kFloatDecodeRows];
        for (std::int64_t c0 = n0; c0 < n1; c0 += kFloatDecodeRows) {
          const std::int64_t nc = std::min(kFloatDecodeRows, n1 - c0);
          qblock::dot_float_rows(p.ggml_type, p.rows_data + static_cast<std::size_t>(c0) * p.row_bytes, p.row_bytes,
                                 nc, K, xf, ldf, static_cast<int>(M), accs, kFloatDecodeRows);
          for (std::int64_t m = 0; m < M; ++m) {
            for (std::int64_t j = 0; j < nc; ++j) finish(m, c0 + j, accs[m * kFloatDecodeRows + j]);
          }
        }
        return;
      }
      float acc[std::max(kGgmlRowsDirect, kGgmlI8RowsDirect)];
      for (std::int64_t n = n0; n < n1; ++n) {
        const std::byte* row = p.rows_data + static_cast<std::size_t>(n) * p.row_bytes;
        // One call for up to kExactDotRows rows (a verify pass of up to 5 drafts decodes each block once), else
        // four at a time.
        for (std::int64_t m = 0; m < M;) {
          const std::int64_t r = M - m <= qblock::kExactDotRows ? M - m : 4;
          qblock::dot_exact(bt, row, K, xf + m * ldf, ldf, static_cast<int>(r), acc + m);
          m += r;
        }
        for (std::int64_t m = 0; m < M; ++m) finish(m, n, acc[m]);
      }
    });
    return;
  }
  if (p.kind == PackKind::ggml && p.int8 && !floats &&
      qblock::dot_q8_rows_preferred(static_cast<quant::BlockType>(p.ggml_type), M)) {
    detail::matmul_q8_rows(p, x, ldx, M, y, ldy, bias, threads);
    return;
  }
  // Q8_0 with more rows than the direct kernel keeps in registers, and fp16 with more than two row tiles: widen
  // each panel slice to f32 once per row block (exact) instead of once per row tile.
  // Runtime-typed blocks with 8-bit activations and one scale per 32 values: integer panels (decode_i8_panel).
  const detail::GgmlI8Kind gi8 =
      p.kind == PackKind::ggml && p.int8 ? detail::ggml_i8_kind(p.ggml_type) : detail::GgmlI8Kind{};
  const bool deq = (p.kind == PackKind::q8_0 && M > 2) || (p.kind == PackKind::f16 && M > 2 * kMR) ||
                   (p.kind == PackKind::ggml && !gi8.ok);
  const std::int64_t mc = gi8.ok ? kMCI8 : kMC;
  // Few rows read each panel once: no K blocking. Many rows: K blocks with f32 partial sums (in y itself when Y
  // is f32, else in a buffer owned by the calling thread).
  const std::int64_t kc = (M <= 2 * kMR || K <= kKC) ? K : kKC;
  const std::int64_t nk = (K + kc - 1) / kc;
  float* part = nullptr;
  std::int64_t ldp = 0;
  if (nk > 1) {
    if constexpr (std::is_same_v<Y, float>) {
      part = y;
      ldp = ldy;
    } else {
      part = reinterpret_cast<float*>(thread_scratch(static_cast<std::size_t>(M * N) * sizeof(float), 2));
      ldp = N;
    }
  }
  // Enough work per thread to pay for waking it (a few microseconds).
  const int nt = 2 * M * N * K < (1 << 18) ? 1 : threads;
  // 8-bit activations: every row quantised once, into the calling thread's scratch, before the products.
  detail::QuantRows xq;
  if (p.kind == PackKind::q8_0_i8 || gi8.ok) {
    const std::int64_t nb = K / q8_0::block;
    const std::size_t qbytes = static_cast<std::size_t>(M * K + 63) / 64 * 64;
    std::byte* buf = thread_scratch(qbytes + static_cast<std::size_t>(M * nb) * 12, 4);
    auto* q = reinterpret_cast<std::int8_t*>(buf);
    auto* d = reinterpret_cast<float*>(buf + qbytes);
    auto* c = reinterpret_cast<std::int32_t*>(buf + qbytes + static_cast<std::size_t>(M * nb) * 4);
    auto* e = gi8.min ? reinterpret_cast<float*>(buf + qbytes + static_cast<std::size_t>(M * nb) * 8) : nullptr;
    const std::int32_t off = gi8.ok ? gi8.off : 128;
    parallel_for(M, M >= 4 * kMR ? nt : 1, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        detail::quantize_row(x + r * ldx, K, q + r * K, d + r * nb, c + r * nb, off, e == nullptr ? e : e + r * nb);
      }
    });
    xq = {q, d, c, K, nb, e};
  }
  parallel_for(p.panels, nt, [&](std::int64_t p0, std::int64_t p1) {
    float* dq = deq ? reinterpret_cast<float*>(thread_scratch(static_cast<std::size_t>(kc * kNR + kc * kW) * sizeof(float), 1))
                    : nullptr;
    // Integer panel, then kW decoded rows of kc bytes and their 2 * kW * kc / 32 scales.
    const std::size_t i8_panel = static_cast<std::size_t>(kc / 32) * detail::kI8BlockBytes;
    std::byte* i8 = gi8.ok ? thread_scratch(i8_panel + static_cast<std::size_t>(kc * kW + kc / 32 * kW * 8), 1)
                           : nullptr;
    for (std::int64_t m0 = 0; m0 < M; m0 += mc) {
      const std::int64_t mb = std::min(mc, M - m0);
      for (std::int64_t kb = 0; kb < nk; ++kb) {
        detail::TileJob j;
        j.k0 = kb * kc;
        j.kc = std::min(kc, K - j.k0);
        j.first = kb == 0;
        j.last = kb == nk - 1;
        j.ldp = ldp;
        for (std::int64_t pi = p0; pi < p1; ++pi) {
          j.pi = pi;
          if (gi8.ok) {
            detail::decode_i8_panel(p, pi, j.k0, j.kc, i8, reinterpret_cast<std::uint8_t*>(i8 + i8_panel),
                                    reinterpret_cast<float*>(i8 + i8_panel + static_cast<std::size_t>(kc * kW)));
            j.i8 = i8;
            j.i8_min = gi8.min;
          } else if (p.kind == PackKind::ggml) {
            detail::dequant_ggml_panel(p, pi, j.k0, j.kc, dq, dq + kc * kNR);
            j.deq = dq - j.k0 * kNR;
          } else if (deq && p.kind == PackKind::f16) {
            detail::dequant_f16_panel(j.kc, reinterpret_cast<const fp16*>(p.panel(pi)) + j.k0 * kNR, dq);
            j.deq = dq - j.k0 * kNR;
          } else if (deq) {
            detail::dequant_q8_panel(j.kc, p.panel(pi) + static_cast<std::size_t>(j.k0 / q8_0::block) *
                                                             detail::q8_block_bytes(),
                                     dq);
            j.deq = dq - j.k0 * kNR;  // run_tile indexes the dequantised slice from k0
          }
          for (std::int64_t r0 = m0; r0 < m0 + mb; r0 += kMR) {
            const int rows = static_cast<int>(std::min<std::int64_t>(kMR, m0 + mb - r0));
            j.part = part == nullptr ? nullptr : part + r0 * ldp;
            if (p.kind == PackKind::q8_0_i8 || gi8.ok) j.xq = xq.at_row(r0);
            if (!deq && p.kind == PackKind::q8_0) {
              detail::run_tile_dispatch<2>(rows, p, j, x + r0 * ldx, ldx, y + r0 * ldy, ldy, bias);
            } else {
              detail::run_tile_dispatch<kMR>(rows, p, j, x + r0 * ldx, ldx, y + r0 * ldy, ldy, bias);
            }
          }
        }
      }
    }
  });
}

// The entry points for the types the layers use, as plain functions: with MAXTEXT_SEPARATE_KERNELS they are compiled
// once (core/macros.hpp, MAXTEXT_KERNEL_API) and a translation unit that multiplies no longer instantiates the
// templates above for them; header-only, they are inline and forward to the templates. Overload resolution prefers
// them to the templates wherever the types match exactly; other types instantiate the templates as before.
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack(const float* w, std::int64_t N, std::int64_t K,
                                                      bool int8_activations = false, int threads = 1);
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack(const bf16* w, std::int64_t N, std::int64_t K,
                                                      bool int8_activations = false, int threads = 1);
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack(const fp16* w, std::int64_t N, std::int64_t K,
                                                      bool int8_activations = false, int threads = 1);
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack(const q8_0* w, std::int64_t N, std::int64_t K,
                                                      bool int8_activations = false, int threads = 1);
/// Pack an N x K weight whose out-major rows `rows` makes a chunk at a time (about `chunk_bytes` of rows, whole panels
/// and multiples of `granule` rows): the rows never exist whole beside the panels, so a weight that must be copied to
/// be laid out (a MaxText kernel [in, out], transposed) costs its panels and one chunk, not twice its size. The
/// panels are those pack() makes of the whole rows, byte for byte.
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack_by_rows(const RowSource<float>& rows, std::int64_t N,
                                                              std::int64_t K, bool int8_activations, int threads,
                                                              std::int64_t granule, std::size_t chunk_bytes);
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack_by_rows(const RowSource<bf16>& rows, std::int64_t N,
                                                              std::int64_t K, bool int8_activations, int threads,
                                                              std::int64_t granule, std::size_t chunk_bytes);
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack_by_rows(const RowSource<fp16>& rows, std::int64_t N,
                                                              std::int64_t K, bool int8_activations, int threads,
                                                              std::int64_t granule, std::size_t chunk_bytes);
MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack_by_rows(const RowSource<q8_0>& rows, std::int64_t N,
                                                              std::int64_t K, bool int8_activations, int threads,
                                                              std::int64_t granule, std::size_t chunk_bytes);
MAXTEXT_KERNEL_API void matmul(const Packed& p, const float* x, std::int64_t ldx, std::int64_t M, float* y,
                               std::int64_t ldy, const float* bias, int threads);
MAXTEXT_KERNEL_API void matmul(const Packed& p, const float* x, std::int64_t ldx, std::int64_t M, bf16* y,
                               std::int64_t ldy, const bf16* bias, int threads);
MAXTEXT_KERNEL_API void matmul(const Packed& p, const bf16* x, std::int64_t ldx, std::int64_t M, float* y,
                               std::int64_t ldy, const float* bias, int threads);
MAXTEXT_KERNEL_API void matmul(const Packed& p, const bf16* x, std::int64_t ldx, std::int64_t M, bf16* y,
                               std::int64_t ldy, const bf16* bias, int threads);

#if MAXTEXT_KERNEL_DEFINITIONS
#define MAXTEXT_GEMM_PACK(W)                                                                                   \
  MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack(const W* w, std::int64_t N, std::int64_t K,            \
                                                        bool int8_activations, int threads) {                  \
    return pack<W>(w, N, K, int8_activations, threads);                                                        \
  }
#define MAXTEXT_GEMM_PACK_BY_ROWS(W)                                                                           \
  MAXTEXT_KERNEL_API std::shared_ptr<const Packed> pack_by_rows(const RowSource<W>& rows, std::int64_t N,      \
                                                                std::int64_t K, bool int8_activations,         \
                                                                int threads, std::int64_t granule,             \
                                                                std::size_t chunk_bytes) {                     \
    return detail::pack_by_rows<W>(rows, N, K, int8_activations, threads, granule, chunk_bytes);               \
  }
#define MAXTEXT_GEMM_MATMUL(X, Y)                                                                              \
  MAXTEXT_KERNEL_API void matmul(const Packed& p, const X* x, std::int64_t ldx, std::int64_t M, Y* y,          \
                                 std::int64_t ldy, const Y* bias, int threads) {                               \
    matmul<X, Y, Y>(p, x, ldx, M, y, ldy, bias, threads);                                                      \
  }
MAXTEXT_GEMM_PACK(float)
MAXTEXT_GEMM_PACK(bf16)
MAXTEXT_GEMM_PACK(fp16)
MAXTEXT_GEMM_PACK(q8_0)
MAXTEXT_GEMM_PACK_BY_ROWS(float)
MAXTEXT_GEMM_PACK_BY_ROWS(bf16)
MAXTEXT_GEMM_PACK_BY_ROWS(fp16)
MAXTEXT_GEMM_PACK_BY_ROWS(q8_0)
MAXTEXT_GEMM_MATMUL(float, float)
MAXTEXT_GEMM_MATMUL(float, bf16)
MAXTEXT_GEMM_MATMUL(bf16, float)
MAXTEXT_GEMM_MATMUL(bf16, bf16)
#undef MAXTEXT_GEMM_PACK
#undef MAXTEXT_GEMM_PACK_BY_ROWS
#undef MAXTEXT_GEMM_MATMUL
#endif

}  // namespace maxtext::cpu::gemm
