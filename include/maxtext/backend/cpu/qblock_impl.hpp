// backend/cpu/qblock_impl.hpp: the definitions of the kernels that backend/cpu/qblock.hpp declares (see there for
// the layouts, the numerics, and how a program compiles them once). qblock.hpp includes this header itself; in a
// program built with MAXTEXT_SEPARATE_KERNELS only the translation unit that defines MAXTEXT_KERNELS_IMPLEMENTATION
// gets the definitions, and including this header elsewhere gives the declarations alone.
#pragma once

#include "maxtext/backend/cpu/qblock.hpp"

#if !defined(MAXTEXT_SEPARATE_KERNELS) || defined(MAXTEXT_KERNELS_IMPLEMENTATION)

#include "maxtext/backend/cpu/parallel.hpp"  // AlignedBuffer
#include "maxtext/backend/cpu/prefetch.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define MAXTEXT_QBLOCK_AVX512 1
#else
#define MAXTEXT_QBLOCK_AVX512 0
#endif
#if !MAXTEXT_QBLOCK_AVX512 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MAXTEXT_QBLOCK_AVX2 1  // x86 without AVX-512 (F+BW+VL+DQ): the AVX2 paths
#else
#define MAXTEXT_QBLOCK_AVX2 0
#endif
// The AVX2 kernels are compiled on AVX-512 machines too, for the five block types that have no AVX-512 kernels yet
// (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K): namespace detail::avx2, inline (the only vector path) where MAXTEXT_QBLOCK_AVX2.
#if MAXTEXT_QBLOCK_AVX2 || (MAXTEXT_QBLOCK_AVX512 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define MAXTEXT_QBLOCK_AVX2_KERNELS 1
#else
#define MAXTEXT_QBLOCK_AVX2_KERNELS 0
#endif

// g++ 12.2 reports its own AVX-512 intrinsics' deliberately undefined pass-through operands as (maybe-)uninitialized
// once they are inlined here (GCC bug 105593, fixed in 12.3); the top-level CMake flags silence it too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace maxtext::cpu::qblock {

namespace detail {

#if defined(__GNUC__)
#define MAXTEXT_QBLOCK_INLINE inline __attribute__((always_inline))
#define MAXTEXT_QBLOCK_FLATTEN __attribute__((flatten))  // every call inside inlined (the tile kernels' lambdas)
#define MAXTEXT_QBLOCK_LAMBDA_INLINE __attribute__((always_inline))
#else
#define MAXTEXT_QBLOCK_INLINE inline
#define MAXTEXT_QBLOCK_FLATTEN
#define MAXTEXT_QBLOCK_LAMBDA_INLINE
#endif
// Complete unrolling of the loops over accumulators, so that they live in registers (g++ 12 keeps a 5 x 4 tile's
// loops, and its accumulators on the stack, without it).
#if defined(__clang__)
#define MAXTEXT_QBLOCK_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define MAXTEXT_QBLOCK_UNROLL _Pragma("GCC unroll 32")
#else
#define MAXTEXT_QBLOCK_UNROLL
#endif

/// f(integral_constant<int, i>) for i = 0 .. N-1, unrolled (forced inline: clang would otherwise keep a call).
template <class F, int... I>
MAXTEXT_QBLOCK_INLINE void unroll_seq(F& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
MAXTEXT_QBLOCK_INLINE void unroll(F&& f) {
  unroll_seq(f, std::make_integer_sequence<int, N>{});
}

inline void dequantize_scalar(BlockType t, const std::byte* src, float* dst, std::int64_t n) {
  const quant::BlockFormat& f = quant::block_format(t);
  for (std::int64_t b = 0; b < n / f.block; ++b) decode_block(t, src + b * f.bytes, dst + b * f.block);
}

inline void dot_exact_scalar(BlockType t, const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx,
                             int M, float* out) {
  const quant::BlockFormat& f = quant::block_format(t);
  LaneSum acc[kExactDotRows];
  float w[256];
  for (std::int64_t b = 0; b < K / f.block; ++b) {
    decode_block(t, row + b * f.bytes, w);
    const std::int64_t k0 = b * f.block;
    for (int m = 0; m < M; ++m) {
      const float* xm = x + m * ldx + k0;
      for (std::int64_t e = 0; e < f.block; ++e) {
        float& a = acc[m].lane[(k0 + e) % LaneSum::W];
        a = std::fma(w[e], xm[e], a);
      }
    }
  }
  for (int m = 0; m < M; ++m) out[m] = acc[m].total();
}

inline float dot_q8_scalar(BlockType t, const std::byte* row, const QuantizedX& x) {
  const quant::BlockFormat& f = quant::block_format(t);
  IntBlock ib;
  float acc[8] = {};
  for (std::int64_t b = 0; b < x.K / f.block; ++b) {
    decode_int(t, row + b * f.bytes, ib);
    for (int g = 0; g < f.block / 32; ++g) {
      const std::int64_t k0 = b * f.block + g * 32;
      float part = 0.0f;
      for (int h = 0; h < 2; ++h) {  // 16-value halves: own scale a, offset b
        std::int32_t isum = 0, xsum = 0;
        for (int l = 0; l < 16; ++l) {
          isum += ib.q[g * 32 + h * 16 + l] * x.q[k0 + h * 16 + l];
          xsum += x.q[k0 + h * 16 + l];
        }
        part += ib.a[2 * g + h] * static_cast<float>(isum) + ib.b[2 * g + h] * static_cast<float>(xsum);
      }
      acc[(k0 / 32) % 8] += x.d[k0 / 32] * part;
    }
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

template <int I>
using ic = std::integral_constant<int, I>;

/// f(ic<MR>{}) for MR = mr (1 .. 8): the row counts of the multi-row kernels and the float-row tiles as constants.
template <class F>
MAXTEXT_QBLOCK_INLINE void with_rows(std::int64_t mr, F&& f) {
  switch (mr) {
    case 1: return f(ic<1>{});
    case 2: return f(ic<2>{});
    case 3: return f(ic<3>{});
    case 4: return f(ic<4>{});
    case 5: return f(ic<5>{});
    case 6: return f(ic<6>{});
    case 7: return f(ic<7>{});
    default: return f(ic<8>{});
  }
}

#if MAXTEXT_QBLOCK_AVX512 || MAXTEXT_QBLOCK_AVX2
// ---------------------------------------------------------------------------------------------------------------
// Pieces shared by the AVX-512 and AVX2 paths.

/// Software prefetch for the dot loops: one hint per 64 bytes of a kBytes step, kPrefetch bytes ahead. Once the
/// integer kernels run faster than one core's DRAM stream, the hardware prefetcher alone does not keep enough cache
/// misses in flight (a Q4_0 GEMV from DRAM measured ~8 GB/s without the hints, ~11.5 with them 4 KiB ahead; 1 KiB
/// gave ~10). A faster stream needs the hints further ahead: on a Zen 4 core (triad 42.5 GB/s) one-row decode from
/// DRAM (K = 2048) went from 30.5-33.2 to 33.9-34.2 GB/s on Q4_K, 33.5-34.1 to 38.8-40.1 on Q6_K and 27.2-32.9 to
/// 37.6-37.8 on Q4_0 with 8 KiB instead of 4 (12 and 16 KiB: no better, Q4_0 worse at 16). The hints go to L2
/// (prefetch::bytes_l2): L1 hints held the core's L1 miss buffers and slowed model c's Q4_K_M decode by a quarter on
/// a Xeon core (prefetch.hpp). A hint past the end of the row (into the next row, or past the matrix) is harmless:
/// it never faults.
inline constexpr int kPrefetch = 8192;
/// One hint per 64 bytes of the kBytes kPrefetch ahead of p.
template <int kBytes>
MAXTEXT_QBLOCK_INLINE void prefetch_ahead(const std::byte* p) {
  prefetch::bytes_l2(p + kPrefetch, kBytes);
}

/// One hint per cache line that the kBytes at p + kPrefetch start and the previous step's (kBytes before) did not.
template <int kBytes>
MAXTEXT_QBLOCK_INLINE void prefetch_lines_ahead(const std::byte* p) {
  prefetch::line_starts_l2(p + kPrefetch, kBytes);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

/// Q4_K / Q5_K: the 8 six-bit scales and mins as bytes (byte j = sub-block j).
inline void k_scales(const std::byte* s, std::uint64_t& sc, std::uint64_t& mn) {
  std::uint32_t w0, w1, w2;
  std::memcpy(&w0, s, 4);
  std::memcpy(&w1, s + 4, 4);
  std::memcpy(&w2, s + 8, 4);
  const std::uint32_t sc_lo = w0 & 0x3f3f3f3fu, mn_lo = w1 & 0x3f3f3f3fu;
  const std::uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
  const std::uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
  sc = sc_lo | (static_cast<std::uint64_t>(sc_hi) << 32);
  mn = mn_lo | (static_cast<std::uint64_t>(mn_hi) << 32);
}
inline __m256 bytes8_to_ps(std::uint64_t v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(v))));
}

/// IQ4_XS: the 8 six-bit sub-block scales (unbiased later) as bytes.
inline std::uint64_t iq4xs_scales(const std::byte* b) {
  std::uint16_t sh;
  std::uint32_t sl;
  std::memcpy(&sh, b + 2, 2);
  std::memcpy(&sl, b + 4, 4);
  std::uint64_t v = 0;
  for (int j = 0; j < 8; ++j) {
    const std::uint64_t ls = ((sl >> (4 * j)) & 15u) | (((static_cast<std::uint32_t>(sh) >> (2 * j)) & 3u) << 4);
    v |= ls << (8 * j);
  }
  return v;
}
#endif  // MAXTEXT_QBLOCK_AVX512 || MAXTEXT_QBLOCK_AVX2

#if MAXTEXT_QBLOCK_AVX512
// ---------------------------------------------------------------------------------------------------------------
// AVX-512 paths. A decoder D has kBlock, kBytes and run(blk, sink): it calls sink(chunk, w) for the 16-float
// chunks w of the block (values 16*chunk .. +15), chunk a compile-time constant.

inline __m512i zx16(const std::byte* p) {  // 16 bytes -> 16 x u32
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512 fl(__m512i v) { return _mm512_cvtepi32_ps(v); }
inline __m512i c32(int v) { return _mm512_set1_epi32(v); }

/// The 16 floats 0, 1, .., 15 shifted by `base`.
inline __m512 iota_ps(float base) {
  return _mm512_add_ps(_mm512_set1_ps(base),
                       _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/// Lane J of v in all 16 lanes. The per-sub-block factors of a block stay in a register and are spread with this
/// (one shuffle) rather than stored to a small stack array and re-read as broadcasts: the re-reads must wait for
/// the store to forward, and that measured ~25% slower for Q4_K.
template <int J>
MAXTEXT_QBLOCK_INLINE __m512 lane(__m512 v) {
  return _mm512_permutexvar_ps(_mm512_set1_epi32(J), v);
}

// Table decoding. A 4-bit quant has only 16 possible values, so rather than converting each of the 16 lanes of a
// chunk to float and scaling it (convert + multiply per chunk), a decoder computes the 16 possible decoded values
// of a (sub-)block once, with exactly the scalar decoder's operations, and then picks each lane's value with one
// vpermps whose index is the quant (vpermps reads only the low 4 bits of each index, so the high nibble of a byte
// needs no mask). Same operands, same single rounding: bit-identical values, about half the work per chunk.

struct DecQ4_0 {
  static constexpr int kBlock = 32, kBytes = 18;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m512 t = _mm512_mul_ps(_mm512_set1_ps(half(b)), iota_ps(-8.0f));  // d * (q - 8) for q = 0..15
    const __m512i z = zx16(b + 2);
    sink(ic<0>{}, _mm512_permutexvar_ps(z, t));
    sink(ic<1>{}, _mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), t));
  }
};

/// The IQ4 codebook as 16 floats, and as unsigned bytes (value + 128) in each 128-bit lane.
inline __m512 iq4_table_ps() {
  const auto& v = quant::detail::kIq4Values;
  return _mm512_setr_ps(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14],
                        v[15]);
}
inline __m128i iq4_table_u8() {
  const auto& v = quant::detail::kIq4Values;
  auto u = [&](int i) { return static_cast<char>(v[i] + 128); };
  return _mm_setr_epi8(u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7), u(8), u(9), u(10), u(11), u(12), u(13), u(14),
                       u(15));
}

struct DecIq4Nl {
  static constexpr int kBlock = 32, kBytes = 18;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m512 t = _mm512_mul_ps(_mm512_set1_ps(half(b)), iq4_table_ps());  // d * kv[q]
    const __m512i z = zx16(b + 2);
    sink(ic<0>{}, _mm512_permutexvar_ps(z, t));
    sink(ic<1>{}, _mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), t));
  }
};

struct DecQ8_0 {
  static constexpr int kBlock = 32, kBytes = 34;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m512 d = _mm512_set1_ps(half(b));
    const auto* q = reinterpret_cast<const __m128i*>(b + 2);
    sink(ic<0>{}, _mm512_mul_ps(fl(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d));
    sink(ic<1>{}, _mm512_mul_ps(fl(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d));
  }
};

/// Moves bit J of each 32-bit lane to bit 4 (other bits are masked off by the caller).
template <int J>
inline __m512i bit_to_4(__m512i v) {
  if constexpr (J <= 4) return _mm512_slli_epi32(v, 4 - J);
  else return _mm512_srli_epi32(v, J - 4);
}

template <bool kFive>
struct DecQ45K {
  static constexpr int kBlock = 256, kBytes = kFive ? 176 : 144;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    std::uint64_t sc, mn;
    k_scales(b + 4, sc, mn);
    // exact products d*sc_j, dmin*m_j in lanes 0-7
    const __m512 ds = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(half(b)), bytes8_to_ps(sc)));
    const __m512 ms = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(half(b + 2)), bytes8_to_ps(mn)));
    const std::byte* qs = b + (kFive ? 48 : 16);
    if constexpr (!kFive) {  // table decoding: sub-block j's 16 values d*sc_j*q - dmin*m_j, one fused op for all
      const __m512 iota = iota_ps(0.0f);
      unroll<4>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        const __m512 tlo = _mm512_fmsub_ps(lane<2 * i>(ds), iota, lane<2 * i>(ms));
        const __m512 thi = _mm512_fmsub_ps(lane<2 * i + 1>(ds), iota, lane<2 * i + 1>(ms));
        unroll<2>([&](auto c_) {
          constexpr int c = decltype(c_)::value;
          const __m512i z = zx16(qs + 32 * i + 16 * c);
          sink(ic<4 * i + c>{}, _mm512_permutexvar_ps(z, tlo));
          sink(ic<4 * i + 2 + c>{}, _mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), thi));
        });
      });
      return;
    }
    unroll<4>([&](auto i_) {
      constexpr int i = decltype(i_)::value;
      unroll<2>([&](auto c_) {
        constexpr int c = decltype(c_)::value;
        const __m512i z = zx16(qs + 32 * i + 16 * c);
        __m512i lo = _mm512_and_si512(z, c32(15)), hi = _mm512_srli_epi32(z, 4);
        if constexpr (kFive) {
          const __m512i qh = zx16(b + 16 + 16 * c);
          lo = _mm512_or_si512(lo, _mm512_and_si512(bit_to_4<2 * i>(qh), c32(16)));
          hi = _mm512_or_si512(hi, _mm512_and_si512(bit_to_4<2 * i + 1>(qh), c32(16)));
        }
        sink(ic<4 * i + c>{}, _mm512_fmsub_ps(lane<2 * i>(ds), fl(lo), lane<2 * i>(ms)));
        sink(ic<4 * i + 2 + c>{}, _mm512_fmsub_ps(lane<2 * i + 1>(ds), fl(hi), lane<2 * i + 1>(ms)));
      });
    });
  }
};

struct DecQ6K {
  static constexpr int kBlock = 256, kBytes = 210;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m512 dg = _mm512_mul_ps(_mm512_set1_ps(half(b + 208)),  // exact products d*sc_g
                                    fl(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)))));
    unroll<2>([&](auto h_) {
      constexpr int h = decltype(h_)::value;
      unroll<2>([&](auto c_) {
        constexpr int c = decltype(c_)::value;
        const __m512i a = zx16(b + 64 * h + 16 * c), bb = zx16(b + 64 * h + 32 + 16 * c);
        const __m512i qh = zx16(b + 128 + 32 * h + 16 * c);
        const __m512i m15 = c32(15), m48 = c32(48);
        const __m512i q0 = _mm512_or_si512(_mm512_and_si512(a, m15), _mm512_and_si512(_mm512_slli_epi32(qh, 4), m48));
        const __m512i q1 = _mm512_or_si512(_mm512_and_si512(bb, m15), _mm512_and_si512(_mm512_slli_epi32(qh, 2), m48));
        const __m512i q2 = _mm512_or_si512(_mm512_srli_epi32(a, 4), _mm512_and_si512(qh, m48));
        const __m512i q3 = _mm512_or_si512(_mm512_srli_epi32(bb, 4), _mm512_and_si512(_mm512_srli_epi32(qh, 2), m48));
        auto out = [&](auto chunk, __m512i q) {
          sink(chunk, _mm512_mul_ps(lane<decltype(chunk)::value>(dg), fl(_mm512_sub_epi32(q, c32(32)))));
        };
        out(ic<8 * h + c>{}, q0);
        out(ic<8 * h + 2 + c>{}, q1);
        out(ic<8 * h + 4 + c>{}, q2);
        out(ic<8 * h + 6 + c>{}, q3);
      });
    });
  }
};

struct DecIq4Xs {
  static constexpr int kBlock = 256, kBytes = 136;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m512 tbl = iq4_table_ps();
    const __m512 dl = _mm512_castps256_ps512(_mm256_mul_ps(  // exact products d*(ls_j - 32)
        _mm256_set1_ps(half(b)), _mm256_sub_ps(bytes8_to_ps(iq4xs_scales(b)), _mm256_set1_ps(32.0f))));
    unroll<8>([&](auto j_) {
      constexpr int j = decltype(j_)::value;
      const __m512i z = zx16(b + 8 + 16 * j);
      const __m512 t = _mm512_mul_ps(lane<j>(dl), tbl);  // table: d*(ls_j - 32) * kv[q]
      sink(ic<2 * j>{}, _mm512_permutexvar_ps(z, t));
      sink(ic<2 * j + 1>{}, _mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), t));
    });
  }
};

template <class D>
inline void dequantize_avx512(const std::byte* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / D::kBlock; ++b) {
    float* y = dst + b * D::kBlock;
    D::run(src + b * D::kBytes, [&](auto c, __m512 w) { _mm512_storeu_ps(y + 16 * decltype(c)::value, w); });
  }
}

/// Four accumulators per row; chunk c of a block goes to accumulator (c + base) % 4, so every lane adds K/64 terms.
template <class D, int M>
inline void dot_exact_avx512(const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx, float* out) {
  __m512 acc[M][4];
  MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) {
    MAXTEXT_QBLOCK_UNROLL for (int a = 0; a < 4; ++a) acc[m][a] = _mm512_setzero_ps();
  }
  const std::int64_t nb = K / D::kBlock;
  auto block = [&](std::int64_t b, auto base) {
    const float* xb = x + b * D::kBlock;
    // Prefetch for every row count: into L1, the hints measured slower with 2-4 rows (then bound by reading x:
    // M * 16 KiB at K = 4096, beyond L1); into L2 (prefetch_ahead), a verify pass of 2 rows on model c's Q8_0 took
    // 1.9 -> 1.X decode steps (bench/speculative).
    prefetch_ahead<D::kBytes>(row + b * D::kBytes);
    D::run(row + b * D::kBytes, [&](auto c_, __m512 w) {
      constexpr int c = decltype(c_)::value;
      constexpr int slot = (c + decltype(base)::value) % 4;
      unroll<M>([&](auto m) {
        acc[m][slot] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xb + m * ldx + 16 * c), acc[m][slot]);
      });
    });
  };
  std::int64_t b = 0;
  if constexpr (D::kBlock == 32) {
    for (; b + 1 < nb; b += 2) {
      block(b, ic<0>{});
      block(b + 1, ic<2>{});
    }
  }
  for (; b < nb; ++b) block(b, ic<0>{});
  MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) {
    out[m] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]), _mm512_add_ps(acc[m][2], acc[m][3])));
  }
}

template <class D>
inline void dot_exact_avx512_m(const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx, int M,
                               float* out) {
  switch (M) {
    case 1: return dot_exact_avx512<D, 1>(row, K, x, ldx, out);
    case 2: return dot_exact_avx512<D, 2>(row, K, x, ldx, out);
    case 3: return dot_exact_avx512<D, 3>(row, K, x, ldx, out);
    case 4: return dot_exact_avx512<D, 4>(row, K, x, ldx, out);
    case 5: return dot_exact_avx512<D, 5>(row, K, x, ldx, out);
    default: return dot_exact_avx512<D, 6>(row, K, x, ldx, out);
  }
}

// ---- dot_q8 ----

/// acc + per 32-bit lane sums of u8 x s8 products. Without VNNI: widened 16-bit products; the split of each 16-byte
/// segment among its four lanes differs from vpdpbusd's, the segment's total does not (all callers need only that).
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(acc, u, s);
#else
  const __m512i z = _mm512_setzero_si512();
  const __m512i ulo = _mm512_unpacklo_epi8(u, z), uhi = _mm512_unpackhi_epi8(u, z);
  const __m512i slo = _mm512_srai_epi16(_mm512_unpacklo_epi8(s, s), 8);
  const __m512i shi = _mm512_srai_epi16(_mm512_unpackhi_epi8(s, s), 8);
  return _mm512_add_epi32(acc, _mm512_add_epi32(_mm512_madd_epi16(ulo, slo), _mm512_madd_epi16(uhi, shi)));
#endif
}
/// Lane sums of (u - off) * s for unsigned u, exact: sum u*s - off * sum s.
inline __m512i dot_off(__m512i u, __m512i s, int off) {
  const __m512i z = _mm512_setzero_si512();
  return _mm512_sub_epi32(dpbusd(z, u, s), dpbusd(z, _mm512_set1_epi8(static_cast<char>(off)), s));
}
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
/// Index vector: lanes 4i..4i+3 pick a+i.
inline __m512i idx4(int a) {
  return _mm512_add_epi32(_mm512_set1_epi32(a), _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
}
inline float hsum(__m512 a, __m512 b) { return _mm512_reduce_add_ps(_mm512_add_ps(a, b)); }

/// 32-value blocks (Q4_0, IQ4_NL, Q8_0), two per 512-bit vector, from block `first` on. U(blk) gives the block's 32
/// unsigned bytes as a 256-bit vector and the offset to subtract.
template <int kBytes, int kOff, class U>
inline float dot_q8_b32(const std::byte* row, const QuantizedX& x, U&& ubytes, std::int64_t first = 0) {
  const std::int64_t nb = x.K / 32;
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  std::int64_t b = first;
  for (; b + 1 < nb; b += 2) {
    const std::byte* b0 = row + b * kBytes;
    prefetch_ahead<2 * kBytes>(b0);
    const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(ubytes(b0)), ubytes(b0 + kBytes), 1);
    const __m512i L = dot_off(u, load512(x.q + 32 * b), kOff);
    const __m512 f = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(half(b0) * x.d[b]),
                                          _mm512_set1_ps(half(b0 + kBytes) * x.d[b + 1]));
    acc[(b / 2) & 1] = _mm512_fmadd_ps(fl(L), f, acc[(b / 2) & 1]);
  }
  if (b < nb) {  // odd last block: lower half only
    const std::byte* b0 = row + b * kBytes;
    const __m512i u = _mm512_castsi256_si512(ubytes(b0));
    const __m512i xq = _mm512_castsi256_si512(load256(x.q + 32 * b));
    const __m512i L = _mm512_maskz_mov_epi32(0x00FF, dot_off(u, xq, kOff));
    acc[0] = _mm512_fmadd_ps(fl(L), _mm512_set1_ps(half(b0) * x.d[b]), acc[0]);
  }
  return hsum(acc[0], acc[1]);
}

/// Q4_0 / IQ4_NL bytes: [low nibbles | high nibbles] of the 16 quant bytes.
inline __m256i nib32(const std::byte* qs) {
  const __m256i z = _mm256_broadcastsi128_si256(load128(qs));
  return _mm256_and_si256(_mm256_mask_srli_epi16(z, 0xFF00, z, 4), _mm256_set1_epi8(15));
}

/// Q4_0 / IQ4_NL, four 18-byte blocks (72 bytes, 128 values) per step, with every per-block piece done for four
/// blocks at once by one shuffle instead of per-block scalar code:
///  * the blocks are read as one 64-byte vector and one 16-byte one (bytes 0-63 and 56-71, so nothing past the 72
///    bytes is touched); all fields sit at even offsets, so one 16-bit permute gathers the four 16-byte quant fields
///    into the four 128-bit lanes [qs0 qs1 qs2 qs3], and another the four fp16 scales into one 64-bit word. (Bytes
///    8-71 as a second 64-byte vector gave the same words: the narrow load took model c's one-thread Q4_0 decode
///    from 69-76 to 72-79 tokens/s in two alternated A/Bs, 2026-11-30; a 512-bit load takes both of a Zen 4 core's
///    load ports);
///  * the low nibbles of lane b are elements 0-15 of block b and the high nibbles elements 16-31, so the activations
///    are regrouped to match (two 128-bit-lane shuffles), and both vpdpbusd products land in lane b: each 128-bit
///    lane then holds the integer dot of one whole block;
///  * the weight offset (8, or 128 for the codebook bytes) times the block's activation sum s_b, which quantize_x has
///    already computed, is subtracted in integers: kOff*s_b/4 from each of the lane's four 32-bit parts;
///  * the float step is one multiply-add of the four blocks' (d_w * d_x), spread over their lanes, per step.
/// Two steps per iteration feed two accumulators, so the multiply-add chain does not serialise the loop.
/// M(v) maps 16 nibble values per lane to the unsigned weight bytes (identity for Q4_0, the codebook for IQ4_NL).
template <int kOff, class Map>
inline float dot_q8_4x18(const std::byte* row, const QuantizedX& x, Map&& map) {
  static_assert(kOff == 8 || kOff == 128);
  constexpr int kShift = kOff == 8 ? 1 : 5;  // log2(kOff / 4)
  // Word o of [qs0 qs1 qs2 qs3] is word 1 + 9*(o/8) + o%8 of the 72 bytes: from the first vector (words 0-31)
  // while below 32, else from the second (bytes 56-71: word w is its word w - 28; permutex2var's index + 32).
  alignas(64) static constexpr std::int16_t kQIdx[32] = {
      1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12, 13, 14, 15, 16, 17,
      19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 30, 31, 36, 37, 38, 39};
  const __m512i qidx = load512(kQIdx);
  const __m512i didx = _mm512_setr_epi32(0 | (9 << 16), 18 | (27 << 16), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i lane_b = idx4(0);  // 32-bit element i <- element i/4: lane b gets element b
  const __m512i m15 = _mm512_set1_epi8(15);
  const std::int64_t nb = x.K / 32;
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  auto step = [&](std::int64_t b, __m512& a) {
    const std::byte* p = row + b * 18;
    prefetch_ahead<72>(p);
    const __m512i v0 = load512(p), v1 = _mm512_castsi128_si512(load128(p + 56));
    const __m512i z = _mm512_permutex2var_epi16(v0, qidx, v1);  // [qs0 qs1 qs2 qs3]
    const __m512i lo = map(_mm512_and_si512(z, m15));
    const __m512i hi = map(_mm512_and_si512(_mm512_srli_epi16(z, 4), m15));
    const __m512i x0 = load512(x.q + 32 * b), x1 = load512(x.q + 32 * b + 64);  // [b0 lo, b0 hi, b1 lo, b1 hi]
    const __m512i xlo = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));  // elements 0-15 of blocks 0..3
    const __m512i xhi = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));  // elements 16-31
    const __m128i s4 = _mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.s + b)));
    const __m512i off = _mm512_slli_epi32(_mm512_permutexvar_epi32(lane_b, _mm512_castsi128_si512(s4)), kShift);
    const __m512i L = _mm512_sub_epi32(dpbusd(dpbusd(_mm512_setzero_si512(), lo, xlo), hi, xhi), off);
    const __m128 dw = _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(didx, v0)));
    const __m128 f4 = _mm_mul_ps(dw, _mm_loadu_ps(x.d + b));  // d_w * d_x of blocks b .. b+3
    a = _mm512_fmadd_ps(fl(L), _mm512_permutexvar_ps(lane_b, _mm512_castps128_ps512(f4)), a);
  };
  std::int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    step(b, acc[0]);
    step(b + 4, acc[1]);
  }
  if (b + 4 <= nb) {
    step(b, acc[0]);
    b += 4;
  }
  float tail = 0.0f;
  if (b < nb) {
    if constexpr (kOff == 8) {
      tail = dot_q8_b32<18, 8>(row, x, [](const std::byte* q) { return nib32(q + 2); }, b);
    } else {
      const __m256i tbl = _mm256_broadcastsi128_si256(iq4_table_u8());
      tail = dot_q8_b32<18, 128>(row, x, [&](const std::byte* q) { return _mm256_shuffle_epi8(tbl, nib32(q + 2)); }, b);
    }
  }
  return hsum(acc[0], acc[1]) + tail;
}

inline float dot_q8_q4_0(const std::byte* row, const QuantizedX& x) {
  return dot_q8_4x18<8>(row, x, [](__m512i v) { return v; });
}
inline float dot_q8_iq4_nl(const std::byte* row, const QuantizedX& x) {
  const __m512i tbl = _mm512_broadcast_i32x4(iq4_table_u8());  // codebook + 128: unsigned
  return dot_q8_4x18<128>(row, x, [&](__m512i v) { return _mm512_shuffle_epi8(tbl, v); });
}

// Q4_K and Q5_K for decode (dot_q8 and dot_q8_rows). The kernel these replaced turned every 16 lanes of vpdpbusd sums
// into floats and scaled them (convert, factor permute, multiply-add per vector: four of each per block), which made
// it bound by vector operations at ~33 GB/s from L2 on a Zen 4 core, below the DRAM stream. This one reads x in
// its own order, made once per x row and call (q4k_x_layout), so that the integer sums of each sub-block meet in one
// 128-bit lane and a block takes one convert and one multiply-add for its scale and min terms together.
//
// Weights: z0 = quant bytes 0-63 and z1 = 64-127; y0 takes 128-bit lanes 0 and 2 of each (bytes 32c .. 32c+15 in
// lane c), y1 lanes 1 and 3 (bytes 32c+16 .. 32c+31). The low nibbles of lane c are sub-block 2c, the high nibbles
// sub-block 2c+1 (its values 0-15 in y0, 16-31 in y1), so two vpdpbusd put all of sub-block 2c's partial sums in
// lane c of one vector (E) and 2c+1's in lane c of another (O).
//
// Activations, kLaidXBytes per 256 values: four 64-byte vectors whose lane c holds the x quants that meet lane c of
// lo(y0), lo(y1), hi(y0), hi(y1) (values 64c + 0-15, 16-31, 32-47, 48-63 of the block); then 16 floats, lanes 4c ..
// 4c+3 = [dx_2c, dx_2c+1, dx_2c, dx_2c+1]; then 16 int32, lanes 4c .. 4c+3 = [0, 0, -s_2c, -s_2c+1].
//
// Per lane c the folds give [I_2c, I_2c+1, *, *] (I_j: sub-block j's integer dot product), the blend puts the
// negated group sums in lanes 2 and 3, and the factors are [d sc_j dx_j, ..., dmin m_j dx_j, ...]: one multiply-add
// then adds sum_j d sc_j dx_j I_j - dmin m_j dx_j s_j to the lanes. Measured on one Zen 4 core (triad ~41 GB/s),
// K = 2048: 32.8 -> 52.7 GB/s with the rows in L2; from DRAM through dot_q8_rows 32-33 -> 39-42 GB/s (K = 5632: 33
// -> 39-42) with prefetch_lines_ahead, where prefetch_ahead's three hints per 144-byte block gave 31-35. (The other
// AVX-512 kernels measured no better with prefetch_lines_ahead, and keep prefetch_ahead.) Model c's Q4_K_M decode
// went from 55 to 62 tokens/s on one thread, 97 to 112 on two.
inline constexpr std::size_t kLaidXBytes = 384;

/// Q4_K / Q5_K: the scale bytes of k_scales, [sc_0 .. sc_7 | m_0 .. m_7], from a block's first 16 bytes.
inline __m128i k_scales_v(__m128i v) {
  const __m128i lo = _mm_srlv_epi32(
      _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)),
      _mm_setr_epi32(0, 0, 0, 4));  // words: scale bytes 0-3, 8-11, 4-7, 8-11 >> 4
  const __m128i hi = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
  return _mm_or_si128(_mm_and_si128(lo, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
                      _mm_and_si128(_mm_srli_epi32(hi, 2), _mm_set1_epi8(0x30)));
}

/// The high nibble of every byte of z (z >> 4 per byte): one affine byte transform where the CPU has GFNI, else a
/// shift and a mask.
inline __m512i high_nibbles(__m512i z) {
#if defined(__GFNI__)
  return _mm512_gf2p8affine_epi64_epi8(z, _mm512_set1_epi64(0x1020408000000000LL), 0);
#else
  return _mm512_and_si512(_mm512_srli_epi16(z, 4), _mm512_set1_epi8(15));
#endif
}

/// The laid-out kernels' step per block: E and O hold, in lane c, the partial sums of two sub-blocks; folded to
/// [I_a, I_b, I_a, I_b] per lane ([e0+e2, o0+o2, e1+e3, o1+o3] plus its halves swapped), lanes 2 and 3 replaced by
/// the layout's offset sums (xl + 320), then one multiply-add with the factors f.
inline __m512 laid_fold_fma(__m512i E, __m512i O, const std::byte* xl, __m512 f, __m512 acc) {
  const __m512i B = _mm512_add_epi32(_mm512_unpacklo_epi32(E, O), _mm512_unpackhi_epi32(E, O));
  const __m512i I = _mm512_add_epi32(B, _mm512_shuffle_epi32(B, _MM_PERM_BADC));
  return _mm512_fmadd_ps(fl(_mm512_mask_blend_epi32(0xCCCC, I, load512(xl + 320))), f, acc);
}

/// x laid out for one of the kernels below, kLaidXBytes per 256 values at out: the four 64-byte quant vectors that
/// quants(n0, n1, n2, n3, o) makes from the block's four natural ones, then 16 floats x.d[8b + pairs[i]] and 16 int32
/// -(x.s[8b + pairs[i]] << s_shift) in lanes 2 and 3 of each group of four (0 in lanes 0 and 1).
template <class Q>
inline void laid_x_layout(const QuantizedX& x, std::byte* out, __m512i pairs, int s_shift, Q&& quants) {
  for (std::int64_t b = 0; b < x.K / 256; ++b) {
    const std::int8_t* q = x.q + 256 * b;
    std::byte* o = out + static_cast<std::size_t>(b) * kLaidXBytes;
    quants(load512(q), load512(q + 64), load512(q + 128), load512(q + 192), o);
    _mm512_storeu_ps(o + 256, _mm512_permutexvar_ps(pairs, _mm512_castps256_ps512(_mm256_loadu_ps(x.d + 8 * b))));
    const __m256i s = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_sll_epi32(_mm256_cvtepi16_epi32(load128(x.s + 8 * b)),
                                                        _mm_cvtsi32_si128(s_shift)));
    _mm512_storeu_si512(o + 320, _mm512_maskz_permutexvar_epi32(0xCCCC, pairs, _mm512_castsi256_si512(s)));
  }
}

/// x in dot_q8_q45k_laid's order (kLaidXBytes per 256 values) at out.
inline void q4k_x_layout(const QuantizedX& x, std::byte* out) {
  // A 4 x 4 transpose of 16-byte pieces: piece p of 64-value chunk c -> lane c of vector p.
  laid_x_layout(x, out, _mm512_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7), 0,
                [](__m512i n0, __m512i n1, __m512i n2, __m512i n3, std::byte* o) {
                  const __m512i t0 = _mm512_shuffle_i64x2(n0, n1, 0x44), t1 = _mm512_shuffle_i64x2(n2, n3, 0x44);
                  const __m512i t2 = _mm512_shuffle_i64x2(n0, n1, 0xEE), t3 = _mm512_shuffle_i64x2(n2, n3, 0xEE);
                  _mm512_storeu_si512(o, _mm512_shuffle_i64x2(t0, t1, 0x88));
                  _mm512_storeu_si512(o + 64, _mm512_shuffle_i64x2(t0, t1, 0xDD));
                  _mm512_storeu_si512(o + 128, _mm512_shuffle_i64x2(t2, t3, 0x88));
                  _mm512_storeu_si512(o + 192, _mm512_shuffle_i64x2(t2, t3, 0xDD));
                });
}

/// The calling thread's buffer for laid-out x rows (q4k_x_layout, iq4xs_x_layout) of `bytes`: grown to the largest
/// size seen, then reused.
inline std::byte* laid_x_buffer(std::size_t bytes) {
  thread_local AlignedBuffer buf;
  buf.reserve(bytes);
  return buf.data();
}

/// Q8_0 rows for dot_q8 and dot_q8_rows (up to kSharedRows x rows per weight row: the verify pass of speculative
/// decoding): four blocks (128 values) per step, the work on the weight done once for all the x rows. The kernel
/// that this replaced (dot_q8_b32 per x row: two blocks per vector, eight int32 lanes per block turned into floats)
/// spent on every x row what it spent on the weight, so M rows cost about M decode steps (2.15x for M = 4 on one
/// Xeon core, bench/qblock_bench with QBLOCK_BENCH_ROWS).
///  * Weights: the four blocks' quants regrouped into W1 = [q0 lo16 | q1 lo16 | q2 lo16 | q3 lo16] and W2 (the high
///    16 of each), so that 128-bit lane c holds block c alone; signed, as they lie.
///  * x (q8_0_x_layout, once per call and x row): the same regrouping, offset to unsigned (q + 128, an xor), and the
///    four blocks' scales spread over their lanes. vpdpbusd takes the unsigned operand first, so the products are
///    (q_x + 128) q_w, and 128 times the weight's lane sums (the same for every x row) is subtracted in integers.
///  * Per x row and step: two vpdpbusd, one subtraction, one convert, one multiply (d_w d_x) and one multiply-add;
///    the rest is shared. Two accumulators per row, one per step parity. Blocks past the last whole step: the
///    two-block kernel (dot_q8_b32) from there.
/// Each int32 lane now sums 8 products of one block (before: 4), so Q8_0 results with 8-bit activations moved in
/// their last bits with this kernel; both orders are within dot_q8's bound (tests/backend/test_qblock_kernels.cpp).
inline constexpr int kSharedRows = 8;  // x rows per pass over a weight row (Q8_0, Q4_K, Q5_K, IQ4_XS, Q6_K)
inline constexpr std::size_t kQ8LaidBytes = 192;  // per 128 values: two quant vectors, 16 floats

inline std::size_t q8_0_laid_bytes(std::int64_t K) { return static_cast<std::size_t>(K / 128) * kQ8LaidBytes; }

inline __m512i spread4() { return _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3); }

/// x in dot_q8_rows_q8_0's order (kQ8LaidBytes per 128 values) at out.
inline void q8_0_x_layout(const QuantizedX& x, std::byte* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t s = 0; s < x.K / 128; ++s) {
    const __m512i a = load512(x.q + 128 * s), b = load512(x.q + 128 * s + 64);  // [x0 | x1], [x2 | x3]
    std::byte* o = out + static_cast<std::size_t>(s) * kQ8LaidBytes;
    _mm512_storeu_si512(o, _mm512_xor_si512(_mm512_shuffle_i64x2(a, b, 0x88), flip));
    _mm512_storeu_si512(o + 64, _mm512_xor_si512(_mm512_shuffle_i64x2(a, b, 0xDD), flip));
    _mm512_storeu_ps(o + 128, _mm512_permutexvar_ps(spread4(), _mm512_castps128_ps512(_mm_loadu_ps(x.d + 4 * s))));
  }
}

/// out[m * ldo] = dot_q8(row, x[m]) for m < MR, x[m] laid out at xl + m * xb (q8_0_x_layout).
template <int MR>
inline void dot_q8_rows_q8_0(const std::byte* row, const QuantizedX* x, const std::byte* xl, std::size_t xb,
                             float* out, std::int64_t ldo) {
  const std::int64_t ns = x[0].K / 128;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), zero = _mm512_setzero_si512();
  // Words 0, 17 (bytes 0, 34) of the first 64 bytes and 2, 19 (bytes 68, 102) of the next: the four scales.
  const __m512i didx = _mm512_setr_epi32(0 | (17 << 16), 34 | (51 << 16), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[MR][2];
  unroll<MR>([&](auto m) { acc[m][0] = acc[m][1] = _mm512_setzero_ps(); });
  auto step = [&](std::int64_t s, auto slot) MAXTEXT_QBLOCK_LAMBDA_INLINE {
    const std::byte* p = row + s * 136;
    prefetch_ahead<136>(p);
    const __m512i A = _mm512_inserti64x4(_mm512_castsi256_si512(load256(p + 2)), load256(p + 36), 1);
    const __m512i B = _mm512_inserti64x4(_mm512_castsi256_si512(load256(p + 70)), load256(p + 104), 1);
    const __m512i W1 = _mm512_shuffle_i64x2(A, B, 0x88), W2 = _mm512_shuffle_i64x2(A, B, 0xDD);
    const __m512i WS = dpbusd(dpbusd(zero, flip, W1), flip, W2);  // 128 x the weight's lane sums
    const __m128i d4 = _mm512_castsi512_si128(_mm512_permutex2var_epi16(load512(p), didx, load512(p + 64)));
    const __m512 DW = _mm512_permutexvar_ps(spread4(), _mm512_castps128_ps512(_mm_cvtph_ps(d4)));
    const std::size_t o = static_cast<std::size_t>(s) * kQ8LaidBytes;
    unroll<MR>([&](auto m) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      const std::byte* xm = xl + decltype(m)::value * xb + o;
      const __m512i L = _mm512_sub_epi32(dpbusd(dpbusd(zero, load512(xm), W1), load512(xm + 64), W2), WS);
      const __m512 f = _mm512_mul_ps(DW, _mm512_loadu_ps(reinterpret_cast<const float*>(xm + 128)));
      acc[m][decltype(slot)::value] = _mm512_fmadd_ps(fl(L), f, acc[m][decltype(slot)::value]);
    });
  };
  std::int64_t s = 0;
  for (; s + 2 <= ns; s += 2) {
    step(s, ic<0>{});
    step(s + 1, ic<1>{});
  }
  if (s < ns) step(s, ic<0>{});
  const bool tail = x[0].K % 128 != 0;
  unroll<MR>([&](auto m) {
    float t = 0.0f;
    if (tail) {
      t = dot_q8_b32<34, 128>(row, x[m], [](const std::byte* b) {
        return _mm256_xor_si256(load256(b + 2), _mm256_set1_epi8(static_cast<char>(0x80)));  // q + 128
      }, ns * 4);
    }
    out[decltype(m)::value * ldo] = hsum(acc[m][0], acc[m][1]) + t;
  });
}

/// Every weight row (N of them, row_bytes apart) against M x rows, kSharedRows at a time: out[m * ldo + n].
inline void q8_0_rows(const std::byte* rows, std::size_t row_bytes, std::int64_t N, const QuantizedX* x,
                      std::int64_t M, float* out, std::int64_t ldo) {
  const std::size_t xb = q8_0_laid_bytes(x[0].K);
  std::byte* xl = laid_x_buffer(std::max<std::size_t>(xb, 64) * static_cast<std::size_t>(M));
  for (std::int64_t m = 0; m < M; ++m) q8_0_x_layout(x[m], xl + xb * static_cast<std::size_t>(m));
  for (std::int64_t m0 = 0; m0 < M; m0 += kSharedRows) {
    const std::int64_t mr = std::min<std::int64_t>(kSharedRows, M - m0);
    with_rows(mr, [&](auto mr_) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      for (std::int64_t n = 0; n < N; ++n) {
        dot_q8_rows_q8_0<decltype(mr_)::value>(rows + static_cast<std::size_t>(n) * row_bytes, x + m0,
                                                xl + xb * static_cast<std::size_t>(m0), xb, out + m0 * ldo + n, ldo);
      }
    });
  }
}

inline float dot_q8_q8_0(const std::byte* row, const QuantizedX& x) {
  float out = 0.0f;
  q8_0_rows(row, 0, 1, &x, 1, &out, 1);
  return out;
}

/// out[m * ldo] = sum_k deq(row)[k] * d_x[k/32] * q_x[k] for a Q4_K row of nb blocks against MR x rows laid out in
/// q4k_x_layout's order at xl + m * xb, and: Q5_K (kFive): the same with the fifth bits added before the products
/// (bit j of qh byte l is that of sub-block j's value l: the lanes of y0 and y1 test bit 2c or 2c+1 of qh bytes
/// 0-15 or 16-31). The weight block is decoded once for all MR rows (the verify pass of speculative decoding), and
/// each row gets the operations it would get alone: the same sums to the bit for any MR.
template <bool kFive, int MR>
inline void dot_q8_q45k_laid(const std::byte* row, std::int64_t nb, const std::byte* xl, std::size_t xb, float* out,
                             std::int64_t ldo) {
  constexpr int kBytes = kFive ? 176 : 144, kQs = kFive ? 48 : 16;
  const __m512i m15 = _mm512_set1_epi8(15);
  // Per 128-bit lane c: the bit of sub-block 2c (2c + 1) in every byte.
  [[maybe_unused]] const __m512i bit_even = _mm512_setr_epi32(0x01010101, 0x01010101, 0x01010101, 0x01010101,
                                                              0x04040404, 0x04040404, 0x04040404, 0x04040404,
                                                              0x10101010, 0x10101010, 0x10101010, 0x10101010,
                                                              0x40404040, 0x40404040, 0x40404040, 0x40404040);
  [[maybe_unused]] const __m512i bit_odd = _mm512_add_epi8(bit_even, bit_even);
  const __m512i dmin_idx = _mm512_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1);
  const __m128i sm_idx = _mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
  __m512 acc[MR];
  unroll<MR>([&](auto m) { acc[m] = _mm512_setzero_ps(); });
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * kBytes;
    prefetch_lines_ahead<kBytes>(blk);
    // Factors, lanes 4c .. 4c+3: [d sc_2c, d sc_2c+1, dmin m_2c, dmin m_2c+1] (times each row's dx below).
    const __m128i v = load128(blk);  // d, dmin, the 12 scale bytes
    const __m512 dd = _mm512_permutexvar_ps(dmin_idx, _mm512_castps128_ps512(_mm_cvtph_ps(v)));
    const __m512 dsm = _mm512_mul_ps(dd, fl(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(k_scales_v(v), sm_idx))));
    const __m512i z0 = load512(blk + kQs), z1 = load512(blk + kQs + 64);
    const __m512i y0 = _mm512_shuffle_i64x2(z0, z1, 0x88), y1 = _mm512_shuffle_i64x2(z0, z1, 0xDD);
    __m512i h0 = high_nibbles(y0), h1 = high_nibbles(y1);
    __m512i l0 = _mm512_and_si512(y0, m15), l1 = _mm512_and_si512(y1, m15);
    if constexpr (kFive) {
      const __m512i q0 = _mm512_broadcast_i32x4(load128(blk + 16)), q1 = _mm512_broadcast_i32x4(load128(blk + 32));
      const __m512i s16 = _mm512_set1_epi8(16);
      l0 = _mm512_mask_add_epi8(l0, _mm512_test_epi8_mask(q0, bit_even), l0, s16);
      l1 = _mm512_mask_add_epi8(l1, _mm512_test_epi8_mask(q1, bit_even), l1, s16);
      h0 = _mm512_mask_add_epi8(h0, _mm512_test_epi8_mask(q0, bit_odd), h0, s16);
      h1 = _mm512_mask_add_epi8(h1, _mm512_test_epi8_mask(q1, bit_odd), h1, s16);
    }
    const __m512i zero = _mm512_setzero_si512();
    unroll<MR>([&](auto m) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      const std::byte* x = xl + decltype(m)::value * xb + static_cast<std::size_t>(b) * kLaidXBytes;
      const __m512 f = _mm512_mul_ps(dsm, _mm512_loadu_ps(reinterpret_cast<const float*>(x + 256)));
      const __m512i E = dpbusd(dpbusd(zero, l0, load512(x)), l1, load512(x + 64));
      const __m512i O = dpbusd(dpbusd(zero, h0, load512(x + 128)), h1, load512(x + 192));
      acc[m] = laid_fold_fma(E, O, x, f, acc[m]);  // lane c: sub-blocks 2c, 2c+1
    });
  }
  unroll<MR>([&](auto m) { out[decltype(m)::value * ldo] = _mm512_reduce_add_ps(acc[m]); });
}

// IQ4_XS for decode, on the same plan as dot_q8_q45k_laid. A block's 16 quant bytes per sub-block lie in order, so the
// 128-bit lanes of quant bytes 0-63 (64-127) are sub-blocks 0-3 (4-7): low nibbles their values 0-15, high nibbles
// 16-31, both mapped to the codebook + 128 by one byte shuffle each. Activations (kLaidXBytes per 256 values): four
// vectors whose lane c holds x values 32c + 0-15, 32c + 16-31, 128 + 32c + 0-15, 128 + 32c + 16-31; 16 floats, lanes
// 4c .. 4c+3 = [dx_c, dx_4+c, dx_c, dx_4+c]; 16 int32 [0, 0, -128 s_c, -128 s_4+c] (the codebook offset). The six-bit
// scales are unpacked in vectors, straight into the same lane order. The kernel it replaces (one sub-block pair per
// vector, dot_off's second vpdpbusd for the offset, a scalar loop for the scales) ran at ~22 GB/s on one Zen 4 core.

/// x in dot_q8_iq4xs's order (kLaidXBytes per 256 values) at out.
inline void iq4xs_x_layout(const QuantizedX& x, std::byte* out) {
  laid_x_layout(x, out, _mm512_setr_epi32(0, 4, 0, 4, 1, 5, 1, 5, 2, 6, 2, 6, 3, 7, 3, 7), 7,
                [](__m512i n0, __m512i n1, __m512i n2, __m512i n3, std::byte* o) {
                  _mm512_storeu_si512(o, _mm512_shuffle_i64x2(n0, n1, 0x88));
                  _mm512_storeu_si512(o + 64, _mm512_shuffle_i64x2(n0, n1, 0xDD));
                  _mm512_storeu_si512(o + 128, _mm512_shuffle_i64x2(n2, n3, 0x88));
                  _mm512_storeu_si512(o + 192, _mm512_shuffle_i64x2(n2, n3, 0xDD));
                });
}

/// out[m * ldo] = sum_k deq(row)[k] * d_x[k/32] * q_x[k] for an IQ4_XS row of nb blocks against MR x rows laid out
/// in iq4xs_x_layout's order at xl + m * xb; the block decoded once for all of them, each row's sums as alone.
template <int MR>
inline void dot_q8_iq4xs(const std::byte* row, std::int64_t nb, const std::byte* xl, std::size_t xb, float* out,
                         std::int64_t ldo) {
  const __m512i m15 = _mm512_set1_epi8(15);
  const __m512i tbl = _mm512_broadcast_i32x4(iq4_table_u8());  // codebook + 128: unsigned
  const __m512i sub = _mm512_setr_epi32(0, 4, 0, 4, 1, 5, 1, 5, 2, 6, 2, 6, 3, 7, 3, 7);  // each lane's sub-block
  const __m512i lo_shift = _mm512_slli_epi32(sub, 2), hi_shift = _mm512_slli_epi32(sub, 1);
  __m512 acc[MR];
  unroll<MR>([&](auto m) { acc[m] = _mm512_setzero_ps(); });
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * 136;
    prefetch_lines_ahead<136>(blk);
    std::uint32_t sl, sh;
    std::memcpy(&sl, blk + 4, 4);
    std::memcpy(&sh, blk + 2, 4);  // scales_h in the low 16 bits (the high 16, scales_l's first bytes, masked off)
    const __m512i lo = _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(sl)), lo_shift);
    const __m512i hi = _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(sh)), hi_shift);
    const __m512i ls = _mm512_or_si512(_mm512_and_si512(lo, c32(15)), _mm512_slli_epi32(_mm512_and_si512(hi, c32(3)), 4));
    const __m512 dl = _mm512_mul_ps(_mm512_set1_ps(half(blk)), fl(_mm512_sub_epi32(ls, c32(32))));
    const __m512i z0 = load512(blk + 8), z1 = load512(blk + 72);
    const __m512i w0 = _mm512_shuffle_epi8(tbl, _mm512_and_si512(z0, m15));
    const __m512i w1 = _mm512_shuffle_epi8(tbl, high_nibbles(z0));
    const __m512i w2 = _mm512_shuffle_epi8(tbl, _mm512_and_si512(z1, m15));
    const __m512i w3 = _mm512_shuffle_epi8(tbl, high_nibbles(z1));
    const __m512i zero = _mm512_setzero_si512();
    unroll<MR>([&](auto m) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      const std::byte* x = xl + decltype(m)::value * xb + static_cast<std::size_t>(b) * kLaidXBytes;
      const __m512 f = _mm512_mul_ps(dl, _mm512_loadu_ps(reinterpret_cast<const float*>(x + 256)));
      const __m512i E = dpbusd(dpbusd(zero, w0, load512(x)), w1, load512(x + 64));
      const __m512i F = dpbusd(dpbusd(zero, w2, load512(x + 128)), w3, load512(x + 192));
      acc[m] = laid_fold_fma(E, F, x, f, acc[m]);  // lane c: sub-blocks c, 4+c (offset terms -128 s)
    });
  }
  unroll<MR>([&](auto m) { out[decltype(m)::value * ldo] = _mm512_reduce_add_ps(acc[m]); });
}

/// f(layout, kernel) for the decode kernels that read x in their own order (kLaidXBytes per 256 values): layout(x,
/// out) writes it; kernel(ic<MR>, row, nb, laid x, xb, out, ldo) gives the row's dot products with MR x rows laid out
/// xb bytes apart (out[m * ldo]). False for the other types.
template <class F>
MAXTEXT_QBLOCK_INLINE bool with_laid_kernel(BlockType t, F&& f) {
  using X = const QuantizedX&;
  using L = const std::byte*;
  using Z = std::size_t;
  using I = std::int64_t;
  switch (t) {
    case BlockType::q4_k:
      f([](X x, std::byte* o) { q4k_x_layout(x, o); },
        [](auto mr, L r, I nb, L xl, Z xb, float* o, I ldo) MAXTEXT_QBLOCK_LAMBDA_INLINE {
          dot_q8_q45k_laid<false, decltype(mr)::value>(r, nb, xl, xb, o, ldo);
        });
      return true;
    case BlockType::q5_k:
      f([](X x, std::byte* o) { q4k_x_layout(x, o); },
        [](auto mr, L r, I nb, L xl, Z xb, float* o, I ldo) MAXTEXT_QBLOCK_LAMBDA_INLINE {
          dot_q8_q45k_laid<true, decltype(mr)::value>(r, nb, xl, xb, o, ldo);
        });
      return true;
    case BlockType::iq4_xs:
      f([](X x, std::byte* o) { iq4xs_x_layout(x, o); },
        [](auto mr, L r, I nb, L xl, Z xb, float* o, I ldo) MAXTEXT_QBLOCK_LAMBDA_INLINE {
          dot_q8_iq4xs<decltype(mr)::value>(r, nb, xl, xb, o, ldo);
        });
      return true;
    default: return false;
  }
}


/// Q6_K: vector i = 2h + p holds elements 128h + 64p .. +63 (s = 2p, 2p+1); scales per 16 values. MR x rows per
/// weight row (out[m * ldo]): the block decoded once for all of them, each row's sums as alone.
template <int MR>
inline void dot_q8_rows_q6k512(const std::byte* row, const QuantizedX* x, float* out, std::int64_t ldo) {
  const std::int64_t nb = x[0].K / 256;
  __m512 acc[MR][2];
  unroll<MR>([&](auto m) { acc[m][0] = acc[m][1] = _mm512_setzero_ps(); });
  const __m512i m15 = _mm512_set1_epi8(15), m48 = _mm512_set1_epi8(48);
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * 210;
    prefetch_ahead<210>(blk);
    const __m512 ds = _mm512_mul_ps(_mm512_set1_ps(half(blk + 208)), fl(_mm512_cvtepi8_epi32(load128(blk + 192))));
    __m512 f16[MR];
    unroll<MR>([&](auto m) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      f16[m] = _mm512_mul_ps(ds, _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(x[m].d + 8 * b))));
    });
    unroll<2>([&](auto h_) {
      constexpr int h = decltype(h_)::value;
      const __m512i ql = load512(blk + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(load256(blk + 128 + 32 * h));
      // p = 0: low nibbles, qh bits 0-1 (bytes 0-31) / 2-3 (bytes 32-63); p = 1: high nibbles, bits 4-5 / 6-7
      const __m512i q0 = _mm512_or_si512(
          _mm512_and_si512(ql, m15),
          _mm512_and_si512(_mm512_mask_slli_epi16(_mm512_slli_epi16(qh, 4), 0xFFFF0000u, qh, 2), m48));
      const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m15),
                                         _mm512_and_si512(_mm512_mask_srli_epi16(qh, 0xFFFF0000u, qh, 2), m48));
      unroll<MR>([&](auto m) MAXTEXT_QBLOCK_LAMBDA_INLINE {
        const std::int8_t* xq = x[m].q + 256 * b;
        const __m512i L0 = dot_off(q0, load512(xq + 128 * h), 32);
        const __m512i L1 = dot_off(q1, load512(xq + 128 * h + 64), 32);
        acc[m][0] = _mm512_fmadd_ps(fl(L0), _mm512_permutexvar_ps(idx4(8 * h), f16[m]), acc[m][0]);
        acc[m][1] = _mm512_fmadd_ps(fl(L1), _mm512_permutexvar_ps(idx4(8 * h + 4), f16[m]), acc[m][1]);
      });
    });
  }
  unroll<MR>([&](auto m) { out[decltype(m)::value * ldo] = hsum(acc[m][0], acc[m][1]); });
}

inline float dot_q8_q6k(const std::byte* row, const QuantizedX& x) {
  float out = 0.0f;
  dot_q8_rows_q6k512<1>(row, &x, &out, 1);
  return out;
}

#endif  // MAXTEXT_QBLOCK_AVX512

#if MAXTEXT_QBLOCK_AVX2_KERNELS
#if MAXTEXT_QBLOCK_AVX2
inline namespace avx2 {
#else
namespace avx2 {
#endif
// ---------------------------------------------------------------------------------------------------------------
// AVX2 (+FMA, +F16C) paths, for x86 machines without AVX-512. A decoder D calls sink(chunk, w) for the 8-float
// chunks w of the block (values 8*chunk .. +7). Shaped for Zen 3, where every lane-crossing shuffle (vpermps,
// vbroadcastss or vpmovzx from a register, vinserti128) costs about a cycle while in-lane integer ops, vpmovzx /
// vpmovsx from memory and broadcasts from memory are cheap: the decoders widen quants straight from memory
// (8 bytes -> 8 x i32), split nibbles in 32-bit lanes, and re-read per-sub-block factors as broadcasts (Lanes8).
// A 16-entry table pick (the AVX-512 trick) would take two vpermps and a blend per chunk, so they convert and
// scale instead.
//
// dot_q8 follows llama.cpp: vpmaddubsw multiplies unsigned by signed bytes into 16-bit pair sums, vpmaddwd with
// ones (or with 16-bit scales) widens them to exact 32-bit lane sums. The pair sums must not saturate: unsigned
// quants <= 63 times |q_x| <= 127 stay below 2*63*127; signed weights (Q8_0, the IQ4 codebook) go in as |w| <= 128
// times q_x with w's sign, <= 2*128*127 < 32767. vphaddd then folds the lanes of 8 groups into one exact integer
// per group, so the float step is one convert and one multiply-add per 8 groups (per-group multiply-adds with
// broadcast factors measured no faster, Q8_0 slower). The types with a scale per 16 values (Q2_K, Q3_K, Q6_K) first
// fold pair sums per sub-block in 16 bits (vphaddw, within the bounds each kernel states), then weight them by the
// scales with one vpmaddwd; so do Q4_0, Q4_1 and Q4_K, whose 4-bit quants leave room for 16-value sums.
//
// dot_q8_rows (prefill) takes most of these kernels for up to four x rows at once (MR): the weight block is decoded
// once into a small buffer that stays in L1, and each x row then does exactly the one-row kernel's integer and float
// steps, so a prompt's products equal decode's bit for bit (the one-row dot_q8 is the MR = 1 case of the same code).
// Every type but Q2_K and Q3_K takes tiles of eight x rows instead wherever eight remain (XTile8, below): lanes are
// x rows, so no horizontal sums, and each tile accumulator is one lane of the one-row kernel's, so still bit for bit.
//
// Types covered here: those of the AVX-512 paths, and Q4_1, Q5_0, Q5_1, Q2_K and Q3_K, which the AVX-512 paths do
// not have yet: machines with AVX-512 run these AVX2 kernels for those five (with_decoder, dot_q8).

inline __m256 fl(__m256i v) { return _mm256_cvtepi32_ps(v); }

/// p, opaque to the optimiser: it can no longer see where p points, so it keeps one register per pointer (instead of
/// spilled offsets) and reads through it from memory (instead of taking values out of vectors just stored there).
template <class T>
MAXTEXT_QBLOCK_INLINE T* opaque(T* p) {
#if defined(__GNUC__)
  __asm__("" : "+r"(p));
#endif
  return p;
}

/// 8 bytes at p as 8 x i32, unsigned / signed (vpmovzxbd / vpmovsxbd with a memory operand).
inline __m128i load64(const std::byte* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
inline __m256i zx8(const std::byte* p) { return _mm256_cvtepu8_epi32(load64(p)); }
inline __m256i sx8(const std::byte* p) { return _mm256_cvtepi8_epi32(load64(p)); }
inline __m256i c32(int v) { return _mm256_set1_epi32(v); }

/// The 8 floats of a vector, each re-read as a broadcast from memory (a plain load on Zen 3, where broadcasting
/// from a register is a lane-crossing shuffle).
struct Lanes8 {
  alignas(32) float v[8];
  explicit Lanes8(__m256 x) { _mm256_store_ps(v, x); }
  __m256 operator[](int j) const { return _mm256_broadcast_ss(v + j); }
};

/// Bit J of each 32-bit lane moved to bit 4 (other bits are masked off by the caller).
template <int J>
MAXTEXT_QBLOCK_INLINE __m256i bit_to_4(__m256i v) {
  if constexpr (J <= 4) return _mm256_slli_epi32(v, 4 - J);
  else return _mm256_srli_epi32(v, J - 4);
}

/// The same within each byte, by 16-bit shifts (the caller's byte mask drops what crosses into the next byte).
template <int J>
MAXTEXT_QBLOCK_INLINE __m256i bit_to_4_bytes(__m256i v) {
  if constexpr (J <= 4) return _mm256_slli_epi16(v, 4 - J);
  else return _mm256_srli_epi16(v, J - 4);
}

/// The IQ4 codebook + 128 (unsigned) in both 128-bit lanes.
inline __m256i iq4_table_u8x2() {
  const auto& v = quant::detail::kIq4Values;
  auto u = [&](int i) { return static_cast<char>(v[i] + 128); };
  const __m128i t = _mm_setr_epi8(u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7), u(8), u(9), u(10), u(11), u(12),
                                  u(13), u(14), u(15));
  return _mm256_broadcastsi128_si256(t);
}
/// kv[n] for nibbles n (0..15, one per 32-bit lane): vpshufb picks codebook byte n + 128 into byte 0 (index bytes
/// 1-3 have bit 7 set, so they read zero), and the 128 is taken off.
inline __m256i iq4_lookup(__m256i tbl, __m256i n) {
  return _mm256_sub_epi32(_mm256_shuffle_epi8(tbl, _mm256_or_si256(n, c32(static_cast<int>(0x80808000u)))), c32(128));
}

struct DecQ4_0 {
  static constexpr int kBlock = 32, kBytes = 18;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m256 d = _mm256_set1_ps(half(b));
    const __m256i z0 = zx8(b + 2), z1 = zx8(b + 10), m15 = c32(15), c8 = c32(8);
    // d * (q - 8), subtracting in integers: a fused d*q - 8d would give +0 where the scalar's d * 0 is -0 (d < 0)
    sink(ic<0>{}, _mm256_mul_ps(d, fl(_mm256_sub_epi32(_mm256_and_si256(z0, m15), c8))));
    sink(ic<1>{}, _mm256_mul_ps(d, fl(_mm256_sub_epi32(_mm256_and_si256(z1, m15), c8))));
    sink(ic<2>{}, _mm256_mul_ps(d, fl(_mm256_sub_epi32(_mm256_srli_epi32(z0, 4), c8))));
    sink(ic<3>{}, _mm256_mul_ps(d, fl(_mm256_sub_epi32(_mm256_srli_epi32(z1, 4), c8))));
  }
};

struct DecIq4Nl {
  static constexpr int kBlock = 32, kBytes = 18;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m256 d = _mm256_set1_ps(half(b));
    const __m256i z0 = zx8(b + 2), z1 = zx8(b + 10), m15 = c32(15), tbl = iq4_table_u8x2();
    sink(ic<0>{}, _mm256_mul_ps(d, fl(iq4_lookup(tbl, _mm256_and_si256(z0, m15)))));
    sink(ic<1>{}, _mm256_mul_ps(d, fl(iq4_lookup(tbl, _mm256_and_si256(z1, m15)))));
    sink(ic<2>{}, _mm256_mul_ps(d, fl(iq4_lookup(tbl, _mm256_srli_epi32(z0, 4)))));
    sink(ic<3>{}, _mm256_mul_ps(d, fl(iq4_lookup(tbl, _mm256_srli_epi32(z1, 4)))));
  }
};

struct DecQ8_0 {
  static constexpr int kBlock = 32, kBytes = 34;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m256 d = _mm256_set1_ps(half(b));
    sink(ic<0>{}, _mm256_mul_ps(d, fl(sx8(b + 2))));
    sink(ic<1>{}, _mm256_mul_ps(d, fl(sx8(b + 10))));
    sink(ic<2>{}, _mm256_mul_ps(d, fl(sx8(b + 18))));
    sink(ic<3>{}, _mm256_mul_ps(d, fl(sx8(b + 26))));
  }
};

template <bool kFive>
struct DecQ45K {
  static constexpr int kBlock = 256, kBytes = kFive ? 176 : 144;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    std::uint64_t sc, mn;
    k_scales(b + 4, sc, mn);
    const Lanes8 ds(_mm256_mul_ps(_mm256_set1_ps(half(b)), bytes8_to_ps(sc)));  // exact d*sc_j, dmin*m_j
    const Lanes8 ms(_mm256_mul_ps(_mm256_set1_ps(half(b + 2)), bytes8_to_ps(mn)));
    const std::byte* qs = b + (kFive ? 48 : 16);
    const __m256i m15 = c32(15), m16 = c32(16);
    unroll<4>([&](auto i_) {  // bytes 32i .. +31: sub-blocks 2i (low nibbles) and 2i+1 (high)
      constexpr int i = decltype(i_)::value;
      const __m256 alo = ds[2 * i], mlo = ms[2 * i], ahi = ds[2 * i + 1], mhi = ms[2 * i + 1];
      unroll<4>([&](auto k_) {  // elements 8k .. +7 of both
        constexpr int k = decltype(k_)::value;
        const __m256i z = zx8(qs + 32 * i + 8 * k);
        __m256i lo = _mm256_and_si256(z, m15), hi = _mm256_srli_epi32(z, 4);
        if constexpr (kFive) {
          const __m256i qh = zx8(b + 16 + 8 * k);
          lo = _mm256_or_si256(lo, _mm256_and_si256(bit_to_4<2 * i>(qh), m16));
          hi = _mm256_or_si256(hi, _mm256_and_si256(bit_to_4<2 * i + 1>(qh), m16));
        }
        sink(ic<8 * i + k>{}, _mm256_fmsub_ps(alo, fl(lo), mlo));
        sink(ic<8 * i + 4 + k>{}, _mm256_fmsub_ps(ahi, fl(hi), mhi));
      });
    });
  }
};

struct DecQ6K {
  static constexpr int kBlock = 256, kBytes = 210;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m256 d = _mm256_set1_ps(half(b + 208));
    const Lanes8 dg[2] = {Lanes8(_mm256_mul_ps(d, fl(sx8(b + 192)))),  // exact d*sc_g, g = 0-7, 8-15
                          Lanes8(_mm256_mul_ps(d, fl(sx8(b + 200))))};
    const __m256i m15 = c32(15), m48 = c32(48), o32 = c32(32);
    unroll<2>([&](auto h_) {
      constexpr int h = decltype(h_)::value;
      unroll<4>([&](auto k_) {  // elements 128h + 32s + 8k .. +7 for s = 0..3
        constexpr int k = decltype(k_)::value;
        const __m256i a = zx8(b + 64 * h + 8 * k), bb = zx8(b + 64 * h + 32 + 8 * k);
        const __m256i qh = zx8(b + 128 + 32 * h + 8 * k);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(a, m15), _mm256_and_si256(_mm256_slli_epi32(qh, 4), m48)),
            _mm256_or_si256(_mm256_and_si256(bb, m15), _mm256_and_si256(_mm256_slli_epi32(qh, 2), m48)),
            _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_and_si256(qh, m48)),
            _mm256_or_si256(_mm256_srli_epi32(bb, 4), _mm256_and_si256(_mm256_srli_epi32(qh, 2), m48))};
        unroll<4>([&](auto s_) {
          constexpr int s = decltype(s_)::value;
          // (q - 32) in integers, for the signed zeros (see DecQ4_0)
          sink(ic<16 * h + 4 * s + k>{}, _mm256_mul_ps(dg[h][2 * s + k / 2], fl(_mm256_sub_epi32(q[s], o32))));
        });
      });
    });
  }
};

struct DecIq4Xs {
  static constexpr int kBlock = 256, kBytes = 136;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m256i tbl = iq4_table_u8x2(), m15 = c32(15);
    const Lanes8 dl(_mm256_mul_ps(  // exact products d*(ls_j - 32)
        _mm256_set1_ps(half(b)), _mm256_sub_ps(bytes8_to_ps(iq4xs_scales(b)), _mm256_set1_ps(32.0f))));
    unroll<8>([&](auto j_) {  // sub-block j: 16 bytes, low nibbles elements 0-15, high nibbles 16-31
      constexpr int j = decltype(j_)::value;
      const __m256 a = dl[j];
      const __m256i z0 = zx8(b + 8 + 16 * j), z1 = zx8(b + 16 + 16 * j);
      sink(ic<4 * j>{}, _mm256_mul_ps(a, fl(iq4_lookup(tbl, _mm256_and_si256(z0, m15)))));
      sink(ic<4 * j + 1>{}, _mm256_mul_ps(a, fl(iq4_lookup(tbl, _mm256_and_si256(z1, m15)))));
      sink(ic<4 * j + 2>{}, _mm256_mul_ps(a, fl(iq4_lookup(tbl, _mm256_srli_epi32(z0, 4)))));
      sink(ic<4 * j + 3>{}, _mm256_mul_ps(a, fl(iq4_lookup(tbl, _mm256_srli_epi32(z1, 4)))));
    });
  }
};

/// Q4_1, Q5_0, Q5_1: 32 values, nibbles as Q4_0 (bytes 0-7 hold elements 0-7 and 16-23, bytes 8-15 elements 8-15
/// and 24-31); kFive adds bit e of the 32-bit word before them as bit 4 of element e. kMin: d * q + m (d * q is
/// exact, so one fused step rounds as the scalar decoder's sum does), else d * (q - 16), subtracting in integers.
template <bool kFive, bool kMin>
struct DecQ451 {
  static_assert(kFive || kMin, "Q4_0 has its own decoder");
  static constexpr int kBlock = 32, kBytes = 2 + (kMin ? 2 : 0) + (kFive ? 4 : 0) + 16;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m256 d = _mm256_set1_ps(half(b));
    const std::byte* qs = b + kBytes - 16;
    const __m256i z0 = zx8(qs), z1 = zx8(qs + 8), m15 = c32(15);
    __m256i q[4] = {_mm256_and_si256(z0, m15), _mm256_and_si256(z1, m15), _mm256_srli_epi32(z0, 4),
                    _mm256_srli_epi32(z1, 4)};
    if constexpr (kFive) {
      std::uint32_t h;
      std::memcpy(&h, qs - 4, 4);
      const __m256i hv = _mm256_set1_epi32(static_cast<int>(h)), iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      unroll<4>([&](auto c_) {  // elements 8c .. 8c + 7: bits 8c .. 8c + 7 of h
        constexpr int c = decltype(c_)::value;
        const __m256i bit = _mm256_and_si256(_mm256_srlv_epi32(hv, _mm256_add_epi32(iota, c32(8 * c))), c32(1));
        q[c] = _mm256_or_si256(q[c], _mm256_slli_epi32(bit, 4));
      });
    }
    unroll<4>([&](auto c_) {
      constexpr int c = decltype(c_)::value;
      if constexpr (kMin) sink(ic<c>{}, _mm256_fmadd_ps(d, fl(q[c]), _mm256_set1_ps(half(b + 2))));
      else sink(ic<c>{}, _mm256_mul_ps(d, fl(_mm256_sub_epi32(q[c], c32(16)))));
    });
  }
};

/// Q2_K: element e = 128h + 32s + l is bits 2s of qs[32h + l]; sub-block g = e / 16 has the scale d * (sc_g & 15)
/// and the min dmin * (sc_g >> 4), both exact, so each value is one fused scale * q - min as the scalar decoder's.
struct DecQ2K {
  static constexpr int kBlock = 256, kBytes = 84;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    const __m256 d = _mm256_set1_ps(half(b + 80)), dm = _mm256_set1_ps(half(b + 82));
    const __m256i s0 = zx8(b), s1 = zx8(b + 8), m15 = c32(15), m3 = c32(3);
    const Lanes8 dl[2] = {Lanes8(_mm256_mul_ps(d, fl(_mm256_and_si256(s0, m15)))),
                          Lanes8(_mm256_mul_ps(d, fl(_mm256_and_si256(s1, m15))))};
    const Lanes8 ml[2] = {Lanes8(_mm256_mul_ps(dm, fl(_mm256_srli_epi32(s0, 4)))),
                          Lanes8(_mm256_mul_ps(dm, fl(_mm256_srli_epi32(s1, 4))))};
    unroll<2>([&](auto h_) {
      constexpr int h = decltype(h_)::value;
      unroll<4>([&](auto k_) {  // bytes 32h + 8k .. +7 of qs: elements 128h + 32s + 8k .. +7, s = 0..3
        constexpr int k = decltype(k_)::value;
        const __m256i z = zx8(b + 16 + 32 * h + 8 * k);
        unroll<4>([&](auto s_) {
          constexpr int s = decltype(s_)::value, g = 2 * s + k / 2;  // sub-block 8h + g
          const __m256i q = _mm256_and_si256(_mm256_srli_epi32(z, 2 * s), m3);
          sink(ic<16 * h + 4 * s + k>{}, _mm256_fmsub_ps(dl[h][g], fl(q), ml[h][g]));
        });
      });
    });
  }
};

/// Q3_K: the 16 six-bit sub-block scales (biased by 32) as bytes: sub-blocks 0-7 in lo, 8-15 in hi. Scale g has
/// its low 4 bits in the low (g < 8) or high nibble of byte g % 8 and its high 2 bits at bit 2 * (g / 4) of byte
/// 8 + g % 4, so each 32-bit word of four scales is two masks and a shift of the packed words.
inline void q3k_scales(const std::byte* p, std::uint64_t& lo, std::uint64_t& hi) {
  std::uint32_t a0, a1, a2;
  std::memcpy(&a0, p, 4);
  std::memcpy(&a1, p + 4, 4);
  std::memcpy(&a2, p + 8, 4);
  const std::uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
  const std::uint32_t g0 = (a0 & m4) | ((a2 & m2) << 4), g1 = (a1 & m4) | (((a2 >> 2) & m2) << 4);
  const std::uint32_t g2 = ((a0 >> 4) & m4) | (((a2 >> 4) & m2) << 4), g3 = ((a1 >> 4) & m4) | (((a2 >> 6) & m2) << 4);
  lo = g0 | (static_cast<std::uint64_t>(g1) << 32);
  hi = g2 | (static_cast<std::uint64_t>(g3) << 32);
}

/// Q3_K: low bits as Q2_K, bit 4h + s of hmask[l] on top (clear: the value is 4 lower); sub-block scale
/// d * (sc_g - 32), an exact product, times the integer quant.
struct DecQ3K {
  static constexpr int kBlock = 256, kBytes = 110;
  template <class S>
  static MAXTEXT_QBLOCK_INLINE void run(const std::byte* b, S&& sink) {
    std::uint64_t lo, hi;
    q3k_scales(b + 96, lo, hi);
    const __m256 d = _mm256_set1_ps(half(b + 108)), c32f = _mm256_set1_ps(32.0f);
    const Lanes8 dl[2] = {Lanes8(_mm256_mul_ps(d, _mm256_sub_ps(bytes8_to_ps(lo), c32f))),
                          Lanes8(_mm256_mul_ps(d, _mm256_sub_ps(bytes8_to_ps(hi), c32f)))};
    const __m256i m3 = c32(3), one = c32(1), four = c32(4);
    unroll<2>([&](auto h_) {
      constexpr int h = decltype(h_)::value;
      unroll<4>([&](auto k_) {
        constexpr int k = decltype(k_)::value;
        const __m256i z = zx8(b + 32 + 32 * h + 8 * k), hb = zx8(b + 8 * k);
        unroll<4>([&](auto s_) {
          constexpr int s = decltype(s_)::value, g = 2 * s + k / 2;
          const __m256i top = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 4 * h + s), one), 2);
          const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(z, 2 * s), m3), top);
          sink(ic<16 * h + 4 * s + k>{}, _mm256_mul_ps(dl[h][g], fl(_mm256_sub_epi32(q, four))));
        });
      });
    });
  }
};

template <class D>
inline void dequantize_avx2(const std::byte* src, float* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / D::kBlock; ++b) {
    float* y = dst + b * D::kBlock;
    D::run(src + b * D::kBytes, [&](auto c, __m256 w) { _mm256_storeu_ps(y + 8 * decltype(c)::value, w); });
  }
}

inline float hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/// dot_exact with 16 registers: S accumulators per row (S = 4 for one row, 2 for more: 8 for M = 4, plus the
/// totals) restart every 256 values and are then added to the row's total, so an addition chain is at most
/// 256/(8S) + log2(S) + K/256 + 3 (the final reduction) <= 20 + K/256 long: within the AVX-512 path's K/64 + 6
/// from K = 1200 on, and short at any K.
template <class D, int M>
inline void dot_exact_avx2(const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx, float* out) {
  // Four accumulators per row whatever M, so that every row's sums are those of M = 1 (a verify pass's rows equal
  // decode steps, bit for bit); dot_exact_avx2_m takes at most two rows per call (4 x 4 accumulators would spill).
  constexpr int S = 4;
  constexpr int kPer = 256 / D::kBlock;  // blocks per 256 values
  static_assert((D::kBlock / 8) % S == 0);
  __m256 tot[M];
  MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) tot[m] = _mm256_setzero_ps();
  const std::int64_t nb = K / D::kBlock;
  for (std::int64_t b0 = 0; b0 < nb; b0 += kPer) {
    __m256 acc[M][S];
    MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) {
      MAXTEXT_QBLOCK_UNROLL for (int s = 0; s < S; ++s) acc[m][s] = _mm256_setzero_ps();
    }
    const std::int64_t b1 = std::min<std::int64_t>(nb, b0 + kPer);
    for (std::int64_t b = b0; b < b1; ++b) {
      const float* xr[M];
      for (int m = 0; m < M; ++m) {
        // g++ otherwise keeps each of the M * chunks addresses (or offsets) in its own register, spilled: hundreds of
        // stack accesses per block at M = 4.
        xr[m] = opaque(x + m * ldx + b * D::kBlock);
      }
      prefetch_ahead<D::kBytes>(row + b * D::kBytes);  // (into L2, as the AVX-512 path)
      D::run(row + b * D::kBytes, [&](auto c_, __m256 w) {
        constexpr int c = decltype(c_)::value;
        unroll<M>([&](auto m) {
          acc[m][c % S] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xr[m] + 8 * c), acc[m][c % S]);
        });
      });
    }
    MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) {
      __m256 a = acc[m][0];
      if constexpr (S == 4) a = _mm256_add_ps(_mm256_add_ps(a, acc[m][1]), _mm256_add_ps(acc[m][2], acc[m][3]));
      else a = _mm256_add_ps(a, acc[m][1]);
      tot[m] = _mm256_add_ps(tot[m], a);
    }
  }
  for (int m = 0; m < M; ++m) out[m] = hsum(tot[m]);
}

template <class D>
inline void dot_exact_avx2_m(const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx, int M,
                             float* out) {
  for (int m = 0; m < M; m += 2) {  // the second pair reads the weight row from L1
    if (M - m == 1) dot_exact_avx2<D, 1>(row, K, x + m * ldx, ldx, out + m);
    else dot_exact_avx2<D, 2>(row, K, x + m * ldx, ldx, out + m);
  }
}

// ---- dot_q8 ----

/// Per 32-bit lane sums of u8 x s8 products (each pair sum must fit in int16, see above).
inline __m256i dot_us(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
/// The same for signed weights w (-128..127) and activations x (-127..127): |w| times x with the sign of w.
inline __m256i dot_ss(__m256i w, __m256i x) { return dot_us(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)); }
/// 32 nibbles of a 16-byte field: [low nibbles | high nibbles].
inline __m256i nib32(const std::byte* p) {
  const __m256i z = _mm256_broadcastsi128_si256(load128(p));
  return _mm256_and_si256(_mm256_srlv_epi32(z, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(15));
}
/// The IQ4 codebook as signed bytes in both 128-bit lanes.
inline __m256i iq4_table_s8x2() { return _mm256_broadcastsi128_si256(load128(quant::detail::kIq4Values)); }
inline std::uint16_t u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline int hsum(__m256i v) {
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
}
/// Lane j = the sum of the 8 lanes of v[j], j = 0..7.
inline __m256i sum8x8(const __m256i* v) {
  // [v0 v1 v2 v3 | v0 v1 v2 v3]: each half holds the sums of its own four lanes of v0..v3
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/// 32-value blocks (Q5_0, Q5_1, IQ4_NL, Q8_0), four per step, MR x rows at a time (dot_q8_rows; MR = 1 is dot_q8,
/// so both give the same sums to the bit). wvec(blk) gives a block's weight quants as bytes (kSigned: signed, taken
/// as |w| times x with w's sign; else unsigned), decoded once per step for the MR rows into a buffer read back from
/// L1. Per x row, vpmaddubsw and vpmaddwd give each block's 8 lane sums of weight quant times activation quant; two
/// rounds of vphaddd fold four blocks into [b0 b1 b2 b3 | b0 b1 b2 b3] (each block's total split over the two
/// halves), kOff * s_b is subtracted as kOff/2 * s_b from each half, and the float step is one multiply-add with the
/// four (d_w * d_x), the four fp16 scales widened by one conversion. kMin (Q5_1: an fp16 min m after d) adds
/// m * d_x * s_b per block, four blocks in one multiply-add. Blocks past the last four take the scalar tail.
template <int kBytes, int kOff, bool kMin, bool kSigned, int MR, class W>
inline void dot_q8_rows_b32(const std::byte* row, std::int64_t nb, const QuantizedX* x, float* out, std::int64_t ldo,
                            W&& wvec) {
  constexpr int kShift = kOff == 16 ? 3 : 2;
  alignas(32) std::int8_t q[4][32];
  alignas(32) std::int8_t qa[kSigned ? 4 : 1][32];  // |w| for the signed types
  __m256 acc[MR];
  __m128 accm[MR];
  float tail[MR];
  for (int m = 0; m < MR; ++m) {
    acc[m] = _mm256_setzero_ps();
    accm[m] = _mm_setzero_ps();
    tail[m] = 0.0f;
  }
  auto fp16x4 = [](const std::byte* p) {
    return _mm_cvtph_ps(_mm_setr_epi16(static_cast<short>(u16(p)), static_cast<short>(u16(p + kBytes)),
                                       static_cast<short>(u16(p + 2 * kBytes)),
                                       static_cast<short>(u16(p + 3 * kBytes)), 0, 0, 0, 0));
  };
  auto ld = [](const std::int8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); };
  auto part = [&](int i, const std::int8_t* xq) {
    if constexpr (kSigned) return dot_us(ld(qa[i]), _mm256_sign_epi8(load256(xq), ld(q[i])));
    else return dot_us(ld(q[i]), load256(xq));
  };
  auto step = [&](std::int64_t b) {
    const std::byte* p = row + b * kBytes;
    if constexpr (MR == 1) prefetch_ahead<4 * kBytes>(p);
    unroll<4>([&](auto i_) {
      constexpr int i = decltype(i_)::value;
      const __m256i w = wvec(p + i * kBytes);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q[i]), w);
      if constexpr (kSigned) _mm256_store_si256(reinterpret_cast<__m256i*>(qa[i]), _mm256_abs_epi8(w));
    });
    const __m128 dw = fp16x4(p);
    [[maybe_unused]] __m128 mw;
    if constexpr (kMin) mw = fp16x4(p + 2);
    unroll<MR>([&](auto m_) {
      constexpr int m = decltype(m_)::value;
      const QuantizedX& xm = x[m];
      const std::int8_t* xq = xm.q + 32 * b;
      __m256i L = _mm256_hadd_epi32(_mm256_hadd_epi32(part(0, xq), part(1, xq + 32)),
                                    _mm256_hadd_epi32(part(2, xq + 64), part(3, xq + 96)));
      const __m128 dx = _mm_loadu_ps(xm.d + b);
      if constexpr (kOff != 0 || kMin) {
        const __m128i s4 = _mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(xm.s + b)));
        if constexpr (kOff != 0) L = _mm256_sub_epi32(L, _mm256_slli_epi32(_mm256_broadcastsi128_si256(s4), kShift));
        if constexpr (kMin) accm[m] = _mm_fmadd_ps(_mm_mul_ps(mw, dx), _mm_cvtepi32_ps(s4), accm[m]);
      }
      const __m128 f4 = _mm_mul_ps(dw, dx);
      acc[m] = _mm256_fmadd_ps(fl(L), _mm256_set_m128(f4, f4), acc[m]);
    });
  };
  std::int64_t b = 0;
  for (; b + 4 <= nb; b += 4) step(b);
  for (; b < nb; ++b) {
    const std::byte* p = row + b * kBytes;
    const __m256i w = wvec(p);
    for (int m = 0; m < MR; ++m) {
      const QuantizedX& xm = x[m];
      const __m256i xv = load256(xm.q + 32 * b);
      const int isum = hsum(kSigned ? dot_us(_mm256_abs_epi8(w), _mm256_sign_epi8(xv, w)) : dot_us(w, xv)) -
                       kOff * xm.s[b];
      tail[m] = std::fma(half(p) * xm.d[b], static_cast<float>(isum), tail[m]);  // explicit: B32Tile8 does the same
      if constexpr (kMin) tail[m] = std::fma(half(p + 2) * xm.d[b], static_cast<float>(xm.s[b]), tail[m]);
    }
  }
  for (int m = 0; m < MR; ++m) {
    const __m128 m2 = _mm_add_ps(accm[m], _mm_movehl_ps(accm[m], accm[m]));
    out[m * ldo] = hsum(acc[m]) + tail[m] + _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
  }
}

/// Lane j = the sum of the 16 words of p[j] (j = 0..7), where every 8 words of one 128-bit half sum below 2^15:
/// three rounds of vphaddw leave word j of each half the sum of p[j]'s 8 words there, one vpmaddwd adds the halves.
inline __m256i fold16x8(const __m256i* p) {
  const __m256i H = _mm256_hadd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3])),
                                      _mm256_hadd_epi16(_mm256_hadd_epi16(p[4], p[5]), _mm256_hadd_epi16(p[6], p[7])));
  const __m128i lo = _mm256_castsi256_si128(H), hi = _mm256_extracti128_si256(H, 1);
  return _mm256_madd_epi16(_mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi)),
                           _mm256_set1_epi16(1));
}

/// Q4_0 / Q4_1 (quants 0..15, nib32 of the 16 bytes after the block's fp16 fields), eight blocks per step, for MR
/// x rows at a time (dot_q8_rows; MR = 1 is dot_q8, so both give the same sums to the bit). The weight quants are
/// decoded once per step into a buffer read back from L1. Per x row, each block's vpmaddubsw pair sums fold in 16
/// bits by three rounds of vphaddw (a 16-value sum is at most 16 * 15 * 127 < 2^15) and one vpmaddwd into the block
/// totals [b0 b1 b2 b3 | b4 b5 b6 b7]; Q4_0's offset 8 s_b comes off in integers, and the float step is one
/// multiply-add with the eight d_w d_x (Q4_1: a second one adds the min terms m d_x s_b). Blocks past the last
/// eight take the scalar tail.
template <int kBytes, int kOff, bool kMin, int MR>
inline void nib_rows(const std::byte* row, std::int64_t nb, const QuantizedX* x, float* out, std::int64_t ldo) {
  static_assert(kOff == 0 || kOff == 8);
  constexpr int kQs = kMin ? 4 : 2;
  alignas(32) std::uint8_t q[8][32];
  __m256 acc[MR], accm[MR];
  float tail[MR];
  for (int m = 0; m < MR; ++m) {
    acc[m] = accm[m] = _mm256_setzero_ps();
    tail[m] = 0.0f;
  }
  auto fp16x8 = [](const std::byte* p) {
    auto h = [&](int i) { return static_cast<short>(u16(p + i * kBytes)); };
    return _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)));
  };
  auto ld = [](const std::uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); };
  std::int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const std::byte* p = row + b * kBytes;
    if constexpr (MR == 1) prefetch_ahead<8 * kBytes>(p);
    unroll<8>([&](auto i_) {
      constexpr int i = decltype(i_)::value;
      _mm256_store_si256(reinterpret_cast<__m256i*>(q[i]), nib32(p + i * kBytes + kQs));
    });
    const __m256 dw = fp16x8(p);
    [[maybe_unused]] __m256 mw;
    if constexpr (kMin) mw = fp16x8(p + 2);
    unroll<MR>([&](auto m_) {
      constexpr int m = decltype(m_)::value;
      const QuantizedX& xm = x[m];
      const std::int8_t* xq = xm.q + 32 * b;
      __m256i P[8];
      unroll<8>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        P[i] = _mm256_maddubs_epi16(ld(q[i]), load256(xq + 32 * i));
      });
      __m256i L = fold16x8(P);
      const __m256 dx = _mm256_loadu_ps(xm.d + b);
      if constexpr (kOff != 0 || kMin) {
        const __m256i s8 = _mm256_cvtepi16_epi32(load128(xm.s + b));
        if constexpr (kOff != 0) L = _mm256_sub_epi32(L, _mm256_slli_epi32(s8, 3));
        if constexpr (kMin) accm[m] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dx), fl(s8), accm[m]);
      }
      acc[m] = _mm256_fmadd_ps(fl(L), _mm256_mul_ps(dw, dx), acc[m]);
    });
  }
  for (; b < nb; ++b) {
    const std::byte* p = row + b * kBytes;
    const __m256i w = nib32(p + kQs);
    for (int m = 0; m < MR; ++m) {
      const QuantizedX& xm = x[m];
      const int isum = hsum(dot_us(w, load256(xm.q + 32 * b))) - kOff * xm.s[b];
      tail[m] = std::fma(half(p) * xm.d[b], static_cast<float>(isum), tail[m]);  // as Q4_0Tile8's
      if constexpr (kMin) tail[m] = std::fma(half(p + 2) * xm.d[b], static_cast<float>(xm.s[b]), tail[m]);
    }
  }
  for (int m = 0; m < MR; ++m) {
    float v = hsum(acc[m]) + tail[m];
    if constexpr (kMin) v += hsum(accm[m]);
    out[m * ldo] = v;
  }
}

inline float dot_q8_q4_0(const std::byte* row, const QuantizedX& x) {  // q in 0..15, offset 8 via s
  float out;
  nib_rows<18, 8, false, 1>(row, x.K / 32, &x, &out, 1);
  return out;
}
/// The weight quants of one block as bytes, for dot_q8_rows_b32: IQ4_NL (codebook values, signed), Q8_0 (signed),
/// Q5_0 / Q5_1 (0..31, below).
struct WIq4Nl {
  __m256i tbl = iq4_table_s8x2();
  __m256i operator()(const std::byte* b) const { return _mm256_shuffle_epi8(tbl, nib32(b + 2)); }
};
struct WQ8_0 {
  __m256i operator()(const std::byte* b) const { return load256(b + 2); }
};
/// dot_q8 through dot_q8_rows_b32 with one x row.
template <int kBytes, int kOff, bool kMin, bool kSigned, class W>
inline float dot_q8_b32(const std::byte* row, const QuantizedX& x, W&& wvec) {
  float out;
  dot_q8_rows_b32<kBytes, kOff, kMin, kSigned, 1>(row, x.K / 32, &x, &out, 1, wvec);
  return out;
}
inline float dot_q8_iq4_nl(const std::byte* row, const QuantizedX& x) {
  return dot_q8_b32<18, 0, false, true>(row, x, WIq4Nl{});
}
inline float dot_q8_q8_0(const std::byte* row, const QuantizedX& x) {
  return dot_q8_b32<34, 0, false, true>(row, x, WQ8_0{});
}
inline float dot_q8_q4_1(const std::byte* row, const QuantizedX& x) {  // q in 0..15, min via s
  float out;
  nib_rows<20, 0, true, 1>(row, x.K / 32, &x, &out, 1);
  return out;
}
/// 0xff in byte i where bit i of the 32-bit word at p is set, else 0: byte i takes source byte i / 8 (vpshufb within
/// each 128-bit half of the broadcast word) and keeps bit i % 8.
inline __m256i bits32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(v)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                                                0x0303030303030303ll));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}
/// Q5_0 / Q5_1 quants 0..31 as bytes in element order: nibbles (as Q4_0) plus bit 4 from the 32-bit word qh.
inline __m256i q5_bytes(const std::byte* qs, const std::byte* qh) {
  return _mm256_or_si256(nib32(qs), _mm256_and_si256(bits32(qh), _mm256_set1_epi8(16)));
}
struct WQ5_0 {
  __m256i operator()(const std::byte* b) const { return q5_bytes(b + 6, b + 2); }
};
struct WQ5_1 {
  __m256i operator()(const std::byte* b) const { return q5_bytes(b + 8, b + 4); }
};
inline float dot_q8_q5_0(const std::byte* row, const QuantizedX& x) {  // q in 0..31, offset 16 via s
  return dot_q8_b32<22, 16, false, false>(row, x, WQ5_0{});
}
inline float dot_q8_q5_1(const std::byte* row, const QuantizedX& x) {  // q in 0..31, min via s
  return dot_q8_b32<24, 0, true, false>(row, x, WQ5_1{});
}

/// Q2_K / Q3_K: w[j] (j = 0..7) are 16-bit pair sums of activation group j, whose 128-bit halves are the 16-value
/// sub-blocks 2j and 2j+1; each sub-block's total must fit in 16 bits. Three rounds of vphaddw fold them into
/// [t_0 t_2 .. t_14 | t_1 t_3 .. t_15] (sub-block totals), interleaving the halves pairs t_2j, t_2j+1, and one
/// vpmaddwd with the 16 sub-block scales (16-bit, in order) gives lane j = sc_2j t_2j + sc_2j+1 t_2j+1.
MAXTEXT_QBLOCK_INLINE __m256i subblock_dot(const __m256i* w, __m256i sc16) {
  const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(w[0], w[1]), _mm256_hadd_epi16(w[2], w[3])),
                                      _mm256_hadd_epi16(_mm256_hadd_epi16(w[4], w[5]), _mm256_hadd_epi16(w[6], w[7])));
  const __m128i lo = _mm256_castsi256_si128(h), hi = _mm256_extracti128_si256(h, 1);
  return _mm256_madd_epi16(_mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi)), sc16);
}

/// Q2_K / Q3_K low bits: element e = 128h + 32s + l is bits 2s of qs[32h + l]. Calls f(ic<j>, q) for activation
/// group j = 4h + s, q its 32 two-bit quants as bytes in element order.
template <class F>
MAXTEXT_QBLOCK_INLINE void two_bit_groups(const std::byte* qs, F&& f) {
  const __m256i m3 = _mm256_set1_epi8(3);
  unroll<2>([&](auto h_) {
    constexpr int h = decltype(h_)::value;
    const __m256i Q = load256(qs + 32 * h);
    unroll<4>([&](auto s_) {
      constexpr int s = decltype(s_)::value;
      f(ic<4 * h + s>{}, _mm256_and_si256(_mm256_srli_epi16(Q, 2 * s), m3));  // (bits from the next byte masked)
    });
  });
}

/// Q2_K: sub-blocks of 16 with 4-bit integer scales sc and mins m. Activation group j = 4h + s (32 values) is bits 2s
/// of qs[32h + l] and holds sub-blocks 2j, 2j+1 in its 128-bit halves. vpmaddubsw with x gives pair sums of q * q_x
/// (sub-block totals <= 16 * 3 * 127), vpmaddubsw of ones those of q_x (<= 16 * 127); subblock_dot weights them by
/// sc and m into exact per-group sums, scaled once per block by d * d_x and dmin * d_x.
inline float dot_q8_q2k(const std::byte* row, const QuantizedX& x) {
  const std::int64_t nb = x.K / 256;
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi8(1);
  const __m128i m15 = _mm_set1_epi8(15);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * 84;
    prefetch_ahead<84>(blk);
    const __m128i sc = load128(blk);
    const __m256i scl = _mm256_cvtepu8_epi16(_mm_and_si128(sc, m15));
    const __m256i scm = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m15));
    const std::int8_t* xq = x.q + 256 * b;
    __m256i P[8], X[8];
    two_bit_groups(blk + 16, [&](auto j_, __m256i q) {
      constexpr int j = decltype(j_)::value;
      const __m256i xv = load256(xq + 32 * j);
      P[j] = _mm256_maddubs_epi16(q, xv);
      X[j] = _mm256_maddubs_epi16(ones, xv);
    });
    const __m256 dx = _mm256_loadu_ps(x.d + 8 * b);
    acc = _mm256_fmadd_ps(fl(subblock_dot(P, scl)), _mm256_mul_ps(_mm256_set1_ps(half(blk + 80)), dx), acc);
    accm = _mm256_fmadd_ps(fl(subblock_dot(X, scm)), _mm256_mul_ps(_mm256_set1_ps(half(blk + 82)), dx), accm);
  }
  return hsum(acc) - hsum(accm);
}

/// Q3_K: as Q2_K with bit j of hmask[l] as bit 2 of the quant (group j = 4h + s), unsigned 0..7; the offset 4 is
/// taken off the 16-bit pair sums (vpmaddubsw of 4 and x: |q - 4| <= 4, so a sub-block total is <= 16 * 4 * 127), and
/// subblock_dot with the signed scales sc - 32 gives exact per-group sums, scaled by d * d_x.
inline float dot_q8_q3k(const std::byte* row, const QuantizedX& x) {
  const std::int64_t nb = x.K / 256;
  __m256 acc = _mm256_setzero_ps();
  const __m256i one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * 110;
    prefetch_ahead<110>(blk);
    std::uint64_t lo, hi;
    q3k_scales(blk + 96, lo, hi);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_sub_epi8(
        _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)), _mm_set1_epi8(32)));
    const __m256i H = load256(blk);
    const std::int8_t* xq = x.q + 256 * b;
    __m256i P[8];
    two_bit_groups(blk + 32, [&](auto j_, __m256i low) {
      constexpr int j = decltype(j_)::value;
      const __m256i xv = load256(xq + 32 * j);
      const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, j), one), 2);
      const __m256i q = _mm256_or_si256(low, top);
      P[j] = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xv), _mm256_maddubs_epi16(four, xv));
    });
    const __m256 f = _mm256_mul_ps(_mm256_set1_ps(half(blk + 108)), _mm256_loadu_ps(x.d + 8 * b));
    acc = _mm256_fmadd_ps(fl(subblock_dot(P, sc)), f, acc);
  }
  return hsum(acc);
}

/// Q4_K / Q5_K: sub-block j (quants 0..31) against activation group j; the min term from the group sums s. MR x
/// rows at a time (dot_q8_rows; MR = 1 is dot_q8, so both give the same sums to the bit): each weight block is
/// decoded once for them, its quants as bytes into a buffer read back from L1, and its scale products. Per x row the
/// group totals come from vpmaddubsw pair sums folded by three rounds of vphaddw (Q4_K: a 16-value sum is at most
/// 16 * 15 * 127 < 2^15) and one vpmaddwd, or for Q5_K (quants to 31) by vpmaddwd and vphaddd (sum8x8).
template <bool kFive, int MR>
inline void dot_q8_rows_q45k(const std::byte* row, std::int64_t nb, const QuantizedX* x, float* out,
                             std::int64_t ldo) {
  constexpr int kBytes = kFive ? 176 : 144;
  alignas(32) std::uint8_t q[256];
  __m256 acc[MR], accm[MR];
  for (int m = 0; m < MR; ++m) acc[m] = accm[m] = _mm256_setzero_ps();
  const __m256i m15 = _mm256_set1_epi8(15);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * kBytes;
    if constexpr (MR == 1) prefetch_ahead<kBytes>(blk);
    std::uint64_t sc, mn;
    k_scales(blk + 4, sc, mn);
    const __m256 ds = _mm256_mul_ps(_mm256_set1_ps(half(blk)), bytes8_to_ps(sc));
    const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(half(blk + 2)), bytes8_to_ps(mn));
    const std::byte* qs = blk + (kFive ? 48 : 16);
    [[maybe_unused]] __m256i qh;
    if constexpr (kFive) qh = load256(blk + 16);
    unroll<4>([&](auto i_) {  // bytes 32i .. +31: sub-blocks 2i (low nibbles), 2i+1 (high)
      constexpr int i = decltype(i_)::value;
      const __m256i z = load256(qs + 32 * i);
      __m256i lo = _mm256_and_si256(z, m15), hi = _mm256_and_si256(_mm256_srli_epi16(z, 4), m15);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, _mm256_and_si256(bit_to_4_bytes<2 * i>(qh), _mm256_set1_epi8(16)));
        hi = _mm256_or_si256(hi, _mm256_and_si256(bit_to_4_bytes<2 * i + 1>(qh), _mm256_set1_epi8(16)));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * i), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * i + 32), hi);
    });
    unroll<MR>([&](auto m_) {
      constexpr int m = decltype(m_)::value;
      const QuantizedX& xm = x[m];
      const __m256 dx = _mm256_loadu_ps(xm.d + 8 * b);
      accm[m] = _mm256_fmadd_ps(_mm256_mul_ps(dm, dx), fl(_mm256_cvtepi16_epi32(load128(xm.s + 8 * b))), accm[m]);
      const std::int8_t* xq = xm.q + 256 * b;
      __m256i L[8];
      unroll<8>([&](auto j_) {
        constexpr int j = decltype(j_)::value;
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32 * j));
        if constexpr (kFive) L[j] = dot_us(w, load256(xq + 32 * j));
        else L[j] = _mm256_maddubs_epi16(w, load256(xq + 32 * j));
      });
      __m256i T;
      if constexpr (kFive) {
        T = sum8x8(L);
      } else {  // word j of each 128-bit half: group j's sum over its values 0-15 (low half) or 16-31 (high half)
        T = fold16x8(L);
      }
      acc[m] = _mm256_fmadd_ps(fl(T), _mm256_mul_ps(ds, dx), acc[m]);
    });
  }
  for (int m = 0; m < MR; ++m) out[m * ldo] = hsum(acc[m]) - hsum(accm[m]);
}

template <bool kFive>
inline float dot_q8_q45k(const std::byte* row, const QuantizedX& x) {
  float out;
  dot_q8_rows_q45k<kFive, 1>(row, x.K / 256, &x, &out, 1);
  return out;
}

/// A Q6_K block's 256 quants (0..63) as bytes in value order: qb[j] = values 32j .. 32j+31 (j = 4h + s: low bits
/// from ql bytes 64h + 32(s & 1) .., low nibble for s < 2, high for s >= 2; high bits from qh bytes 128 + 32h ..).
inline void q6k_quants(const std::byte* blk, std::uint8_t (*qb)[32]) {
  const __m256i m15 = _mm256_set1_epi8(15), m48 = _mm256_set1_epi8(48);
  unroll<2>([&](auto h_) {
    constexpr int h = decltype(h_)::value;
    const __m256i a = load256(blk + 64 * h), bb = load256(blk + 64 * h + 32), qh = load256(blk + 128 + 32 * h);
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(a, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48)),
        _mm256_or_si256(_mm256_and_si256(bb, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m15), _mm256_and_si256(qh, m48)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bb, 4), m15),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48))};
    unroll<4>([&](auto s_) {
      constexpr int s = decltype(s_)::value;
      _mm256_store_si256(reinterpret_cast<__m256i*>(qb[4 * h + s]), q[s]);
    });
  });
}

/// Q6_K: group j = 4h + s (elements 128h + 32s ..) holds sub-blocks 2j, 2j+1 in its 128-bit halves; the offset 32
/// is taken off the 16-bit pair sums (vpmaddubsw of 32 and x), two rounds of vphaddw fold them to 8-value sums, and
/// vpmaddwd with the int8 scales (widened to 16 bits) gives exact sums of sc * (q - 32) * q_x, at most
/// 32*128*32*127 < 2^24 per group.
/// MR x rows at a time (dot_q8_rows; MR = 1 is dot_q8): each block's quants, as bytes in a buffer read back from
/// L1, and its scale vectors are made once for them.
template <int MR>
inline void dot_q8_rows_q6k(const std::byte* row, std::int64_t nb, const QuantizedX* x, float* out, std::int64_t ldo) {
  alignas(32) std::uint8_t qb[8][32];
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  const __m256i o32 = _mm256_set1_epi8(32);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * 210;
    if constexpr (MR == 1) prefetch_ahead<210>(blk);
    const __m128i sc = load128(blk + 192);
    q6k_quants(blk, qb);
    const __m256i sa = _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 1, 1, 3, 3, 5, 5, 7, 7)));
    const __m256i sb = _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(sc, _mm_setr_epi8(8, 8, 10, 10, 12, 12, 14, 14, 9, 9, 11, 11, 13, 13, 15, 15)));
    const __m256 d = _mm256_set1_ps(half(blk + 208));
    unroll<MR>([&](auto m_) {
      constexpr int m = decltype(m_)::value;
      const std::int8_t* xq = x[m].q + 256 * b;
      __m256i P[8];
      unroll<8>([&](auto j_) {
        constexpr int j = decltype(j_)::value;
        const __m256i xv = load256(xq + 32 * j);
        P[j] = _mm256_sub_epi16(
            _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(qb[j])), xv),
            _mm256_maddubs_epi16(o32, xv));
      });
      // Two rounds of vphaddw per four groups: [g0 g0 g1 g1 g2 g2 g3 g3] in each half (sums of 8 values of
      // sub-block 2g in the low half, 2g + 1 in the high; |sum| <= 4 * 2 * 32 * 127 < 2^15), then vpmaddwd with the
      // scales: [g0..g3 | g0..g3] per sub-block.
      const __m256i A = _mm256_hadd_epi16(_mm256_hadd_epi16(P[0], P[1]), _mm256_hadd_epi16(P[2], P[3]));
      const __m256i B = _mm256_hadd_epi16(_mm256_hadd_epi16(P[4], P[5]), _mm256_hadd_epi16(P[6], P[7]));
      const __m256i wa = _mm256_madd_epi16(A, sa), wb = _mm256_madd_epi16(B, sb);
      const __m256i L =
          _mm256_add_epi32(_mm256_permute2x128_si256(wa, wb, 0x20), _mm256_permute2x128_si256(wa, wb, 0x31));
      acc[m] = _mm256_fmadd_ps(fl(L), _mm256_mul_ps(d, _mm256_loadu_ps(x[m].d + 8 * b)), acc[m]);
    });
  }
  for (int m = 0; m < MR; ++m) out[m * ldo] = hsum(acc[m]);
}

/// Calls kernel(ic<MR>, m0, n) for the chunks of kMR x rows from m0 (MR = kMR, or 1..3 for the last) and every
/// weight row n inside each chunk: the chunk's x rows stay in L1 while the weight rows pass.
template <int kMR, class F>
inline void rows_in_chunks(std::int64_t N, std::int64_t M, F&& kernel) {
  static_assert(kMR == 4);
  for (std::int64_t m0 = 0; m0 < M; m0 += kMR) {
    const std::int64_t mr = std::min<std::int64_t>(kMR, M - m0);
    for (std::int64_t n = 0; n < N; ++n) {
      if (mr == kMR) kernel(ic<kMR>{}, m0, n);
      else if (mr == 3) kernel(ic<3>{}, m0, n);
      else if (mr == 2) kernel(ic<2>{}, m0, n);
      else kernel(ic<1>{}, m0, n);
    }
  }
}

inline float dot_q8_q6k(const std::byte* row, const QuantizedX& x) {
  float out;
  dot_q8_rows_q6k<1>(row, x.K / 256, &x, &out, 1);
  return out;
}

/// IQ4_XS: sub-block j (16 bytes: [low | high] nibbles through the codebook) against activation group j.
inline float dot_q8_iq4_xs(const std::byte* row, const QuantizedX& x) {
  const std::int64_t nb = x.K / 256;
  __m256 acc = _mm256_setzero_ps();
  const __m256i tbl = iq4_table_s8x2();
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = row + b * 136;
    prefetch_ahead<136>(blk);
    const __m256 ls = _mm256_sub_ps(bytes8_to_ps(iq4xs_scales(blk)), _mm256_set1_ps(32.0f));
    const __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(half(blk)), ls), _mm256_loadu_ps(x.d + 8 * b));
    const std::int8_t* xq = x.q + 256 * b;
    __m256i L[8];
    unroll<8>([&](auto j_) {
      constexpr int j = decltype(j_)::value;
      L[j] = dot_ss(_mm256_shuffle_epi8(tbl, nib32(blk + 8 + 16 * j)), load256(xq + 32 * j));
    });
    acc = _mm256_fmadd_ps(fl(sum8x8(L)), f, acc);
  }
  return hsum(acc);
}

// ---- eight x rows per weight row (dot_q8_rows on every type but Q2_K and Q3_K) ----

inline __m256i bcast32(const void* p) {  // the 32-bit word at p in every lane
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/// Eight x rows interleaved so that 32-bit lane r holds row r: a weight quad (four quants, broadcast) times the
/// eight rows' matching activation quads is one vpmaddubsw, and a block's eight row sums stay in the eight lanes of
/// one register, with no horizontal sums. Built once per eight x rows (tile8_x), then read for every weight row.
struct XTile8 {
  const std::int8_t* q = nullptr;   // [group g][quad k][row r][4] = x_r.q[32g + 4k .. +3]: 256 bytes per group
  const float* d = nullptr;         // [g][r] = x_r.d[g]
  const std::int32_t* s = nullptr;  // [g][r] = x_r.s[g]
  const std::int32_t* h = nullptr;  // [g][r] = the sums of x_r's values 32g .. +15 (low 16 bits) and +16 .. +31
};
inline constexpr std::size_t kTile8Bytes = 256 + 3 * 32;  // per 32-value group

/// Bytes of an XTile8 of K values (a multiple of 32).
inline std::size_t tile8_bytes(std::int64_t K) { return static_cast<std::size_t>(K / 32) * kTile8Bytes; }
/// The calling thread's buffer for two XTile8 of K values: grown to the largest K seen, then reused. Its own buffer,
/// not one of thread_scratch's slots: matmul_q8_rows holds slots 1 and 2 across the call.
inline std::byte* tile8_buffer(std::int64_t K) {
  thread_local AlignedBuffer buf;
  buf.reserve(2 * tile8_bytes(K));
  return buf.data();
}

/// The 8 x 8 transpose of 32-bit lanes: lane i of o[k] = lane k of r[i].
inline void transpose8x32(const __m256i* r, __m256i* o) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {  // rows i, i+1: lanes [0 0 1 1 | 4 4 5 5], [2 2 3 3 | 6 6 7 7]
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // rows i .. i+3: lane k | lane k+4, k = 0 .. 3
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    o[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
    o[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
  }
}

/// x[0..7] interleaved into buf (32-byte aligned, K/32 * kTile8Bytes): per group an 8 x 8 transpose of the rows'
/// 32-bit quads, and per eight groups one of their scales and one of their sums. kHalves: also XTile8::h (Q6_K).
template <bool kHalves>
inline XTile8 tile8_x(const QuantizedX* x, std::byte* buf) {
  const std::int64_t ng = x[0].K / 32;
  auto* q = reinterpret_cast<std::int8_t*>(buf);
  auto* d = reinterpret_cast<float*>(buf + 256 * ng);
  auto* s = reinterpret_cast<std::int32_t*>(buf + 288 * ng);
  auto* h = reinterpret_cast<std::int32_t*>(buf + 320 * ng);
  auto store = [](void* p, __m256i v) { _mm256_store_si256(static_cast<__m256i*>(p), v); };
  for (std::int64_t g = 0; g < ng; ++g) {
    __m256i r[8], o[8];
    for (int i = 0; i < 8; ++i) r[i] = load256(x[i].q + 32 * g);
    transpose8x32(r, o);
    for (int k = 0; k < 8; ++k) store(q + 256 * g + 32 * k, o[k]);
    if constexpr (kHalves) {
      const __m256i u8ones = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
      __m256i lo = _mm256_maddubs_epi16(u8ones, o[0]), hi = _mm256_maddubs_epi16(u8ones, o[4]);
      for (int k = 1; k < 4; ++k) {
        lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(u8ones, o[k]));
        hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(u8ones, o[k + 4]));
      }
      // lane r: [sum of the low half's 16 values | the high half's] as two 16-bit words (each at most 16 * 127)
      store(h + 8 * g, _mm256_or_si256(_mm256_and_si256(_mm256_madd_epi16(lo, ones), _mm256_set1_epi32(0xffff)),
                                       _mm256_slli_epi32(_mm256_madd_epi16(hi, ones), 16)));
    }
  }
  std::int64_t g = 0;
  for (; g + 8 <= ng; g += 8) {
    __m256i r[8], o[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_castps_si256(_mm256_loadu_ps(x[i].d + g));
    transpose8x32(r, o);
    for (int k = 0; k < 8; ++k) store(d + 8 * (g + k), o[k]);
    for (int i = 0; i < 8; ++i) r[i] = _mm256_cvtepi16_epi32(load128(x[i].s + g));
    transpose8x32(r, o);
    for (int k = 0; k < 8; ++k) store(s + 8 * (g + k), o[k]);
  }
  for (; g < ng; ++g) {
    for (int i = 0; i < 8; ++i) {
      d[8 * g + i] = x[i].d[g];
      s[8 * g + i] = x[i].s[g];
    }
  }
  return {q, d, s, h};
}

/// S[t], t < NT: lane r = sum_k w(k) . x_r[32g + 4k .. +3] over k = kFrom .. kTo-1 for x tile xt[t], with w(ic<k>)
/// the weight quad k broadcast to every lane, made once for the NT tiles. The word pair sums of up to eight quads add
/// in 16 bits: each word sums 2 (kTo - kFrom) products of an unsigned quant and an int8 activation.
template <int kFrom, int kTo, int NT, class W>
MAXTEXT_QBLOCK_INLINE void quads16(W&& w, const XTile8* xt, std::int64_t g, __m256i* S) {
  unroll<kTo - kFrom>([&](auto k_) MAXTEXT_QBLOCK_LAMBDA_INLINE {
    constexpr int k = kFrom + decltype(k_)::value;
    const __m256i wk = w(ic<k>{});
    unroll<NT>([&](auto t_) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      constexpr int t = decltype(t_)::value;
      const __m256i p = _mm256_maddubs_epi16(
          wk, _mm256_load_si256(reinterpret_cast<const __m256i*>(xt[t].q + 256 * g + 32 * k)));
      S[t] = k == kFrom ? p : _mm256_add_epi16(S[t], p);
    });
  });
}
/// The weight quads of a 32-value group from two registers: quads 0-3 in lo and 4-7 in hi, the same 16 bytes in
/// both 128-bit halves, so one vpshufd broadcasts a quad.
inline auto quads_of(__m256i lo, __m256i hi) {
  return [lo, hi](auto k_) MAXTEXT_QBLOCK_LAMBDA_INLINE {
    constexpr int k = decltype(k_)::value;
    return _mm256_shuffle_epi32(k < 4 ? lo : hi, (k & 3) * 0x55);
  };
}
/// The same from 32 quant bytes in memory: one broadcast load per quad.
inline auto quads_at(const std::uint8_t* q) {
  return [q](auto k_) MAXTEXT_QBLOCK_LAMBDA_INLINE { return bcast32(q + 4 * decltype(k_)::value); };
}

/// S[t] as quads16's, for signed weight quads (Q8_0 down to -128, the IQ4 codebook) of a 32-value group with quads
/// 0-3 in lo and 4-7 in hi (quads_of): each product is |w| times x with w's sign (vpsignb per tile; the broadcast quad
/// and its magnitude are shared by the NT tiles). A pair sum may reach 2 * 128 * 127, so every quad widens to 32 bits
/// at once: the sums are int32.
template <int kFrom, int kTo, int NT>
MAXTEXT_QBLOCK_INLINE void signed_quads32(__m256i lo, __m256i hi, const XTile8* xt, std::int64_t g, __m256i* S) {
  const auto w = quads_of(lo, hi), a = quads_of(_mm256_abs_epi8(lo), _mm256_abs_epi8(hi));
  unroll<kTo - kFrom>([&](auto k_) MAXTEXT_QBLOCK_LAMBDA_INLINE {
    constexpr int k = kFrom + decltype(k_)::value;
    const __m256i wk = w(ic<k>{}), ak = a(ic<k>{});
    unroll<NT>([&](auto t_) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      constexpr int t = decltype(t_)::value;
      const __m256i xk = _mm256_load_si256(reinterpret_cast<const __m256i*>(xt[t].q + 256 * g + 32 * k));
      const __m256i p =
          _mm256_madd_epi16(_mm256_maddubs_epi16(ak, _mm256_sign_epi8(xk, wk)), _mm256_set1_epi16(1));
      S[t] = k == kFrom ? p : _mm256_add_epi32(S[t], p);
    });
  });
}

/// Every accumulator of a row-tile kernel to zero.
template <std::size_t N, std::size_t M>
inline void zero_tiles(__m256 (&a)[N][M]) {
  for (auto& r : a) {
    for (auto& v : r) v = _mm256_setzero_ps();
  }
}
/// hsum(v) of lane r for eight vectors a[j] = row r's lane j, in hsum's order.
inline __m256 hsum_tile8(const __m256* a) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                       _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
}
inline void store_tile8(__m256 v, float* out, std::int64_t ldo) {
  alignas(32) float o[8];
  _mm256_store_ps(o, v);
  for (int r = 0; r < 8; ++r) out[r * ldo] = o[r];
}

/// Row-tile kernels T: T::dot<NT>(row, nb, xt, out) gives one weight row's products with NT tiles of eight x rows
/// (XTile8; lane r: x row r), out[t] for tile t. Its accumulator j holds, lane r, what lane j of the type's
/// dot_q8_rows kernel holds for x row r, and the end reduces them in hsum's order, so every row's result equals
/// dot_q8's to the bit. Two tiles share each broadcast weight quad (the kernels are bound by the vector pipes, and
/// a broadcast is a vector op); their sixteen accumulators then partly live in L1, which costs only loads and stores.

/// Q4_0 and Q4_1 (nib_rows<kBytes, kOff, kMin>): 16 products per 16-bit word, at most 16 * 15 * 127 < 2^15; Q4_0's
/// offset 8 comes off through the sums s, Q4_1's min terms go to their own eight accumulators. Blocks past the last
/// eight take nib_rows' tail steps.
template <int kBytes, int kOff, bool kMin>
struct Nib4Tile8 {
  static constexpr int kValues = 32, kQs = kMin ? 4 : 2;
  static constexpr bool kHalves = false;
  template <int NT>
  MAXTEXT_QBLOCK_INLINE static void sums(const std::byte* qs, const XTile8* xt, std::int64_t g, __m256i* L) {
    const __m256i z = _mm256_broadcastsi128_si256(load128(qs)), m15 = _mm256_set1_epi8(15);
    quads16<0, 8, NT>(quads_of(_mm256_and_si256(z, m15), _mm256_and_si256(_mm256_srli_epi16(z, 4), m15)), xt, g, L);
    unroll<NT>([&](auto t_) {
      constexpr int t = decltype(t_)::value;
      L[t] = _mm256_madd_epi16(L[t], _mm256_set1_epi16(1));
      if constexpr (kOff != 0) L[t] = _mm256_sub_epi32(L[t], _mm256_slli_epi32(load256(xt[t].s + 8 * g), 3));
    });
  }
  template <int NT>
  MAXTEXT_QBLOCK_FLATTEN static void dot(const std::byte* row, std::int64_t nb, const XTile8* xt, __m256* out) {
    alignas(32) float dw[8];
    [[maybe_unused]] alignas(32) float mw[8];
    __m256 acc[NT][8], accm[NT][8], tail[NT];
    zero_tiles(acc);
    zero_tiles(accm);
    for (auto& v : tail) v = _mm256_setzero_ps();
    std::int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      const std::byte* p = row + b * kBytes;
      unroll<8>([&](auto i_) { dw[decltype(i_)::value] = half(p + decltype(i_)::value * kBytes); });
      const float* wo = opaque(dw);
      [[maybe_unused]] const float* mo = nullptr;
      if constexpr (kMin) {
        unroll<8>([&](auto i_) { mw[decltype(i_)::value] = half(p + decltype(i_)::value * kBytes + 2); });
        mo = opaque(mw);
      }
      unroll<8>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        const std::int64_t g = b + i;
        __m256i L[NT];
        sums<NT>(p + i * kBytes + kQs, xt, g, L);
        const __m256 w = _mm256_set1_ps(wo[i]);
        unroll<NT>([&](auto t_) {
          constexpr int t = decltype(t_)::value;
          const __m256 dx = _mm256_loadu_ps(xt[t].d + 8 * g);
          acc[t][i] = _mm256_fmadd_ps(fl(L[t]), _mm256_mul_ps(w, dx), acc[t][i]);
          if constexpr (kMin) {
            accm[t][i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(mo[i]), dx), fl(load256(xt[t].s + 8 * g)),
                                         accm[t][i]);
          }
        });
      });
    }
    for (; b < nb; ++b) {
      const std::byte* p = row + b * kBytes;
      __m256i L[NT];
      sums<NT>(p + kQs, xt, b, L);
      for (int t = 0; t < NT; ++t) {
        const __m256 dx = _mm256_loadu_ps(xt[t].d + 8 * b);
        tail[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(half(p)), dx), fl(L[t]), tail[t]);
        if constexpr (kMin) {
          tail[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(half(p + 2)), dx), fl(load256(xt[t].s + 8 * b)),
                                    tail[t]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      out[t] = _mm256_add_ps(hsum_tile8(acc[t]), tail[t]);
      if constexpr (kMin) out[t] = _mm256_add_ps(out[t], hsum_tile8(accm[t]));
    }
  }
};
using Q4_0Tile8 = Nib4Tile8<18, 8, false>;
using Q4_1Tile8 = Nib4Tile8<20, 0, true>;

/// Q4_K / Q5_K (dot_q8_rows_q45k): accumulator j is sub-block j. Q5_K's quants reach 31, so its eight quads add in
/// two 16-bit sums of four (8 * 31 * 127 < 2^15). The min terms take a second pass over the row's scales.
template <bool kFive>
struct Q45_KTile8 {
  static constexpr int kValues = 256, kBytes = kFive ? 176 : 144;
  static constexpr bool kHalves = false;
  template <int NT>
  MAXTEXT_QBLOCK_FLATTEN static void dot(const std::byte* row, std::int64_t nb, const XTile8* xt, __m256* out) {
    alignas(32) float f[8];
    __m256 acc[NT][8];
    zero_tiles(acc);
    const __m256i m15 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::byte* blk = row + b * kBytes;
      const std::byte* qs = blk + (kFive ? 48 : 16);
      std::uint64_t sc, mn;
      k_scales(blk + 4, sc, mn);
      _mm256_store_ps(f, _mm256_mul_ps(_mm256_set1_ps(half(blk)), bytes8_to_ps(sc)));
      const float* fo = opaque(f);
      [[maybe_unused]] __m256i qh0, qh1;  // Q5_K: bit j of byte l is the fifth bit of sub-block j's value l
      if constexpr (kFive) {
        qh0 = _mm256_broadcastsi128_si256(load128(blk + 16));
        qh1 = _mm256_broadcastsi128_si256(load128(blk + 32));
      }
      unroll<4>([&](auto i_) {  // bytes 32i .. +31: sub-blocks 2i (low nibbles), 2i+1 (high), values 0-15 from the
        constexpr int i = decltype(i_)::value;  // first 16 bytes, 16-31 from the next
        const __m256i z0 = _mm256_broadcastsi128_si256(load128(qs + 32 * i));
        const __m256i z1 = _mm256_broadcastsi128_si256(load128(qs + 32 * i + 16));
        unroll<2>([&](auto h_) {
          constexpr int h = decltype(h_)::value, j = 2 * i + h;
          const std::int64_t g = 8 * b + j;
          __m256i lo = _mm256_and_si256(h ? _mm256_srli_epi16(z0, 4) : z0, m15);
          __m256i hi = _mm256_and_si256(h ? _mm256_srli_epi16(z1, 4) : z1, m15);
          __m256i L[NT];
          if constexpr (kFive) {
            const __m256i m16 = _mm256_set1_epi8(16);
            lo = _mm256_or_si256(lo, _mm256_and_si256(bit_to_4_bytes<j>(qh0), m16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(bit_to_4_bytes<j>(qh1), m16));
            __m256i S[NT];
            quads16<0, 4, NT>(quads_of(lo, hi), xt, g, L);
            quads16<4, 8, NT>(quads_of(lo, hi), xt, g, S);
            for (int t = 0; t < NT; ++t) {
              L[t] = _mm256_add_epi32(_mm256_madd_epi16(L[t], ones), _mm256_madd_epi16(S[t], ones));
            }
          } else {
            quads16<0, 8, NT>(quads_of(lo, hi), xt, g, L);
            for (int t = 0; t < NT; ++t) L[t] = _mm256_madd_epi16(L[t], ones);
          }
          const __m256 w = _mm256_set1_ps(fo[j]);
          unroll<NT>([&](auto t_) {
            constexpr int t = decltype(t_)::value;
            acc[t][j] = _mm256_fmadd_ps(fl(L[t]), _mm256_mul_ps(w, _mm256_loadu_ps(xt[t].d + 8 * g)), acc[t][j]);
          });
        });
      });
    }
    // the min terms: a second pass over the row's scales, per tile
    for (int t = 0; t < NT; ++t) {
      __m256 accm[8];
      for (auto& a : accm) a = _mm256_setzero_ps();
      for (std::int64_t b = 0; b < nb; ++b) {
        const std::byte* blk = row + b * kBytes;
        std::uint64_t sc, mn;
        k_scales(blk + 4, sc, mn);
        _mm256_store_ps(f, _mm256_mul_ps(_mm256_set1_ps(half(blk + 2)), bytes8_to_ps(mn)));
        const float* fo = opaque(f);
        unroll<8>([&](auto j_) {
          constexpr int j = decltype(j_)::value;
          const std::int64_t g = 8 * b + j;
          accm[j] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(fo[j]), _mm256_loadu_ps(xt[t].d + 8 * g)),
                                    _mm256_cvtepi32_ps(load256(xt[t].s + 8 * g)), accm[j]);
        });
      }
      out[t] = _mm256_sub_ps(hsum_tile8(acc[t]), hsum_tile8(accm));
    }
  }
};

/// Q6_K (dot_q8_rows_q6k): the same integer group sums (sc_2j . sum of (q - 32) x over sub-block 2j, plus
/// sc_2j+1 . the same over 2j+1, exact in int32). Quants reach 63: two quads per 16-bit word (4 * 63 * 127 < 2^15)
/// before vpmaddwd with the sub-block's scale; the offset comes off as 32 (sc_2j h_lo + sc_2j+1 h_hi), XTile8::h.
struct Q6_KTile8 {
  static constexpr int kValues = 256;
  static constexpr bool kHalves = true;
  template <int NT>
  MAXTEXT_QBLOCK_FLATTEN static void dot(const std::byte* row, std::int64_t nb, const XTile8* xt, __m256* out) {
    alignas(32) std::uint8_t qb[8][32];
    alignas(32) std::int16_t sc[16];
    __m256 acc[NT][8];
    zero_tiles(acc);
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::byte* blk = row + b * 210;
      q6k_quants(blk, qb);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sc), _mm256_cvtepi8_epi16(load128(blk + 192)));
      const __m256 d = _mm256_set1_ps(half(blk + 208));
      const std::uint8_t* qo = opaque(&qb[0][0]);
      const std::int16_t* so = opaque(sc);
      unroll<8>([&](auto j_) {
        constexpr int j = decltype(j_)::value;
        const std::int64_t g = 8 * b + j;
        const auto wq = quads_at(qo + 32 * j);
        const __m256i sa = _mm256_set1_epi16(so[2 * j]), sb = _mm256_set1_epi16(so[2 * j + 1]);
        __m256i P[4][NT];
        quads16<0, 2, NT>(wq, xt, g, P[0]);
        quads16<2, 4, NT>(wq, xt, g, P[1]);
        quads16<4, 6, NT>(wq, xt, g, P[2]);
        quads16<6, 8, NT>(wq, xt, g, P[3]);
        unroll<NT>([&](auto t_) {
          constexpr int t = decltype(t_)::value;
          const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(P[0][t], sa), _mm256_madd_epi16(P[1][t], sa));
          const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(P[2][t], sb), _mm256_madd_epi16(P[3][t], sb));
          const __m256i off = _mm256_madd_epi16(load256(xt[t].h + 8 * g), bcast32(so + 2 * j));
          const __m256i L = _mm256_sub_epi32(_mm256_add_epi32(lo, hi), _mm256_slli_epi32(off, 5));
          acc[t][j] = _mm256_fmadd_ps(fl(L), _mm256_mul_ps(d, _mm256_loadu_ps(xt[t].d + 8 * g)), acc[t][j]);
        });
      });
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum_tile8(acc[t]);
  }
};

/// IQ4_XS (dot_q8_iq4_xs): accumulator j is sub-block j. The codebook values are signed (-127 .. 113):
/// signed_quads32.
struct Iq4XsTile8 {
  static constexpr int kValues = 256;
  static constexpr bool kHalves = false;
  template <int NT>
  MAXTEXT_QBLOCK_FLATTEN static void dot(const std::byte* row, std::int64_t nb, const XTile8* xt, __m256* out) {
    alignas(32) float f[8];
    __m256 acc[NT][8];
    zero_tiles(acc);
    const __m256i tbl = iq4_table_s8x2(), m15 = _mm256_set1_epi8(15);
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::byte* blk = row + b * 136;
      const __m256 ls = _mm256_sub_ps(bytes8_to_ps(iq4xs_scales(blk)), _mm256_set1_ps(32.0f));
      _mm256_store_ps(f, _mm256_mul_ps(_mm256_set1_ps(half(blk)), ls));
      const float* fo = opaque(f);
      unroll<8>([&](auto j_) {
        constexpr int j = decltype(j_)::value;
        const std::int64_t g = 8 * b + j;
        const __m256i z = _mm256_broadcastsi128_si256(load128(blk + 8 + 16 * j));
        const __m256i lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(z, m15));  // values 0-15, both halves
        const __m256i hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(z, 4), m15));  // 16-31
        __m256i L[NT];
        signed_quads32<0, 8, NT>(lo, hi, xt, g, L);
        const __m256 s = _mm256_set1_ps(fo[j]);
        unroll<NT>([&](auto t_) {
          constexpr int t = decltype(t_)::value;
          acc[t][j] = _mm256_fmadd_ps(fl(L[t]), _mm256_mul_ps(s, _mm256_loadu_ps(xt[t].d + 8 * g)), acc[t][j]);
        });
      });
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum_tile8(acc[t]);
  }
};

/// The 32-value blocks of dot_q8_rows_b32 (Q5_0, Q5_1, Q8_0, IQ4_NL; wvec as there), in the order of its steps of
/// four blocks: for block i of a step, accumulator i sums values 0-15 and accumulator 4 + i values 16-31 (the two
/// halves of its vphaddd fold, each less kOff/2 * s), times dw_i dx_i; the min terms go to four accumulators, and
/// blocks past the last four to the tail, as there. Unsigned quants (0..31) add four quads per 16-bit word
/// (8 * 31 * 127 < 2^15); the signed ones (Q8_0, the codebook) go through signed_quads32.
template <int kBytes, int kOff, bool kMin, bool kSigned, class W>
struct B32Tile8 {
  static constexpr int kValues = 32;
  static constexpr bool kHalves = false;
  template <int NT>
  MAXTEXT_QBLOCK_FLATTEN static void dot(const std::byte* row, std::int64_t nb, const XTile8* xt, __m256* out) {
    constexpr int kShift = kOff == 16 ? 3 : 2;
    const W wvec{};
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NT][8], accm[NT][4], tail[NT];
    zero_tiles(acc);
    zero_tiles(accm);
    for (auto& v : tail) v = _mm256_setzero_ps();
    // L[t][h], lane r: the integer sum of block p's values 16h .. 16h+15 times x row r of tile t (group g)
    auto sums = [&](const std::byte* p, std::int64_t g, __m256i (*L)[2]) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      const __m256i w = wvec(p);
      const __m256i lo = _mm256_permute4x64_epi64(w, 0x44), hi = _mm256_permute4x64_epi64(w, 0xee);
      __m256i S[2][NT];
      if constexpr (kSigned) {
        signed_quads32<0, 4, NT>(lo, hi, xt, g, S[0]);
        signed_quads32<4, 8, NT>(lo, hi, xt, g, S[1]);
      } else {
        quads16<0, 4, NT>(quads_of(lo, hi), xt, g, S[0]);
        quads16<4, 8, NT>(quads_of(lo, hi), xt, g, S[1]);
      }
      for (int t = 0; t < NT; ++t) {
        L[t][0] = kSigned ? S[0][t] : _mm256_madd_epi16(S[0][t], ones);
        L[t][1] = kSigned ? S[1][t] : _mm256_madd_epi16(S[1][t], ones);
      }
      if constexpr (kOff != 0) {
        for (int t = 0; t < NT; ++t) {
          const __m256i o = _mm256_slli_epi32(load256(xt[t].s + 8 * g), kShift);
          L[t][0] = _mm256_sub_epi32(L[t][0], o);
          L[t][1] = _mm256_sub_epi32(L[t][1], o);
        }
      }
    };
    std::int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
      unroll<4>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        const std::int64_t g = b + i;
        const std::byte* p = row + g * kBytes;
        __m256i L[NT][2];
        sums(p, g, L);
        const __m256 dw = _mm256_set1_ps(half(p));
        [[maybe_unused]] __m256 mw;
        if constexpr (kMin) mw = _mm256_set1_ps(half(p + 2));
        for (int t = 0; t < NT; ++t) {
          const __m256 dx = _mm256_loadu_ps(xt[t].d + 8 * g), f = _mm256_mul_ps(dw, dx);
          acc[t][i] = _mm256_fmadd_ps(fl(L[t][0]), f, acc[t][i]);
          acc[t][4 + i] = _mm256_fmadd_ps(fl(L[t][1]), f, acc[t][4 + i]);
          if constexpr (kMin) {
            accm[t][i] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dx), fl(load256(xt[t].s + 8 * g)), accm[t][i]);
          }
        }
      });
    }
    for (; b < nb; ++b) {
      const std::byte* p = row + b * kBytes;
      __m256i L[NT][2];
      sums(p, b, L);
      for (int t = 0; t < NT; ++t) {
        const __m256 dx = _mm256_loadu_ps(xt[t].d + 8 * b);
        tail[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(half(p)), dx),
                                  fl(_mm256_add_epi32(L[t][0], L[t][1])), tail[t]);
        if constexpr (kMin) {
          tail[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(half(p + 2)), dx), fl(load256(xt[t].s + 8 * b)),
                                    tail[t]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) {  // (hsum(acc) + tail) + ((m0 + m2) + (m1 + m3)), as dot_q8_rows_b32 ends
      const __m256 m = _mm256_add_ps(_mm256_add_ps(accm[t][0], accm[t][2]), _mm256_add_ps(accm[t][1], accm[t][3]));
      out[t] = _mm256_add_ps(_mm256_add_ps(hsum_tile8(acc[t]), tail[t]), m);
    }
  }
};

/// NT tiles of eight x rows (xt[0 .. NT-1]) against N weight rows with a row-tile kernel T; weight row n's result
/// for x row r of tile t goes to out[(8t + r) * ldo + n].
template <class T, int NT>
inline void tile8_rows(const std::byte* rows, std::size_t row_bytes, std::int64_t N, std::int64_t nb,
                       const XTile8* xt, float* out, std::int64_t ldo) {
  for (std::int64_t n = 0; n < N; ++n) {
    __m256 o[NT];
    T::template dot<NT>(rows + static_cast<std::size_t>(n) * row_bytes, nb, xt, o);
    for (int t = 0; t < NT; ++t) store_tile8(o[t], out + 8 * t * ldo + n, ldo);
  }
}
}  // namespace avx2
#endif  // MAXTEXT_QBLOCK_AVX2_KERNELS

#if MAXTEXT_QBLOCK_AVX512 || MAXTEXT_QBLOCK_AVX2
/// Calls f with the vector decoder of block type t (std::type_identity<D>); false for the types that have none.
/// The decoders and the loops over them have the same names on both instruction sets; these pick the compiled one.
template <class F>
inline bool with_decoder(BlockType t, F&& f) {
  switch (t) {
    case BlockType::q4_0: f(std::type_identity<DecQ4_0>{}); return true;
    case BlockType::q8_0: f(std::type_identity<DecQ8_0>{}); return true;
    case BlockType::iq4_nl: f(std::type_identity<DecIq4Nl>{}); return true;
    case BlockType::q4_k: f(std::type_identity<DecQ45K<false>>{}); return true;
    case BlockType::q5_k: f(std::type_identity<DecQ45K<true>>{}); return true;
    case BlockType::q6_k: f(std::type_identity<DecQ6K>{}); return true;
    case BlockType::iq4_xs: f(std::type_identity<DecIq4Xs>{}); return true;
#if MAXTEXT_QBLOCK_AVX2_KERNELS  // (AVX2 decoders on both paths: the AVX-512 path has none for these yet)
    case BlockType::q4_1: f(std::type_identity<avx2::DecQ451<false, true>>{}); return true;
    case BlockType::q5_0: f(std::type_identity<avx2::DecQ451<true, false>>{}); return true;
    case BlockType::q5_1: f(std::type_identity<avx2::DecQ451<true, true>>{}); return true;
    case BlockType::q2_k: f(std::type_identity<avx2::DecQ2K>{}); return true;
    case BlockType::q3_k: f(std::type_identity<avx2::DecQ3K>{}); return true;
#endif
    default: return false;
  }
}
/// Whether D is one of the AVX2 decoders (8-float chunks), which the AVX2 loops run on either path.
template <class D>
inline constexpr bool kAvx2Decoder = false;
#if MAXTEXT_QBLOCK_AVX2_KERNELS
template <bool kFive, bool kMin>
inline constexpr bool kAvx2Decoder<avx2::DecQ451<kFive, kMin>> = true;
template <>
inline constexpr bool kAvx2Decoder<avx2::DecQ2K> = true;
template <>
inline constexpr bool kAvx2Decoder<avx2::DecQ3K> = true;
#endif
template <class D>
inline void dequantize_vec(const std::byte* src, float* dst, std::int64_t n) {
#if MAXTEXT_QBLOCK_AVX512
  if constexpr (!kAvx2Decoder<D>) return dequantize_avx512<D>(src, dst, n);
#endif
#if MAXTEXT_QBLOCK_AVX2_KERNELS
  if constexpr (MAXTEXT_QBLOCK_AVX2 || kAvx2Decoder<D>) avx2::dequantize_avx2<D>(src, dst, n);
#endif
}
template <class D>
inline void dot_exact_vec(const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx, int M, float* out) {
#if MAXTEXT_QBLOCK_AVX512
  if constexpr (!kAvx2Decoder<D>) return dot_exact_avx512_m<D>(row, K, x, ldx, M, out);
#endif
#if MAXTEXT_QBLOCK_AVX2_KERNELS
  if constexpr (MAXTEXT_QBLOCK_AVX2 || kAvx2Decoder<D>) avx2::dot_exact_avx2_m<D>(row, K, x, ldx, M, out);
#endif
}
#endif

}  // namespace detail

MAXTEXT_KERNEL_API void dequantize(BlockType t, const std::byte* src, float* dst, std::int64_t n) {
  MAXTEXT_DASSERT(n % quant::block_format(t).block == 0);
#if MAXTEXT_QBLOCK_AVX512 || MAXTEXT_QBLOCK_AVX2
  if (detail::with_decoder(t, [&](auto d) { detail::dequantize_vec<typename decltype(d)::type>(src, dst, n); })) return;
#endif
  detail::dequantize_scalar(t, src, dst, n);
}

MAXTEXT_KERNEL_API void dot_exact(BlockType t, const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx,
                                  int M, float* out) {
  MAXTEXT_DASSERT(M >= 1 && M <= kExactDotRows);
  MAXTEXT_DASSERT(K % quant::block_format(t).block == 0);
#if MAXTEXT_QBLOCK_AVX512 || MAXTEXT_QBLOCK_AVX2
  if (detail::with_decoder(t, [&](auto d) { detail::dot_exact_vec<typename decltype(d)::type>(row, K, x, ldx, M, out); })) {
    return;
  }
#endif
  detail::dot_exact_scalar(t, row, K, x, ldx, M, out);
}

namespace detail {

#if defined(__AVX512F__)
#define MAXTEXT_QBLOCK_FLOAT_ROWS 1
using FrVec = __m512;
inline constexpr int kFrW = 16;
inline FrVec fr_zero() { return _mm512_setzero_ps(); }
inline FrVec fr_load(const float* p) { return _mm512_loadu_ps(p); }
inline FrVec fr_fma(FrVec a, FrVec b, FrVec c) { return _mm512_fmadd_ps(a, b, c); }
inline FrVec fr_add(FrVec a, FrVec b) { return _mm512_add_ps(a, b); }
inline float fr_sum(FrVec a) { return _mm512_reduce_add_ps(a); }
inline void fr_store(float* p, FrVec a) { _mm512_storeu_ps(p, a); }
template <class T>
inline FrVec fr_widen(const std::byte* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, fp16>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {  // bf16: the high half of an f32
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MAXTEXT_QBLOCK_FLOAT_ROWS 1
using FrVec = __m256;
inline constexpr int kFrW = 8;
inline FrVec fr_zero() { return _mm256_setzero_ps(); }
inline FrVec fr_load(const float* p) { return _mm256_loadu_ps(p); }
inline FrVec fr_fma(FrVec a, FrVec b, FrVec c) { return _mm256_fmadd_ps(a, b, c); }
inline FrVec fr_add(FrVec a, FrVec b) { return _mm256_add_ps(a, b); }
inline float fr_sum(FrVec a) {
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}
inline void fr_store(float* p, FrVec a) { _mm256_storeu_ps(p, a); }
template <class T>
inline FrVec fr_widen(const std::byte* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (std::is_same_v<T, fp16>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
}
#else
#define MAXTEXT_QBLOCK_FLOAT_ROWS 0
#endif

#if MAXTEXT_QBLOCK_FLOAT_ROWS
/// Widen the first n / kFrW * kFrW values; returns how many.
template <class T>
inline std::int64_t widen_vec(const std::byte* src, float* dst, std::int64_t n) {
  const std::int64_t done = n / kFrW * kFrW;
  for (std::int64_t k = 0; k < done; k += kFrW) fr_store(dst + k, fr_widen<T>(src + k * static_cast<std::int64_t>(sizeof(T))));
  return done;
}

/// Weight rows per tile for M x rows (dot_tile): NR x M accumulators, M x vectors and a widened weight vector in the
/// vector registers (32 with AVX-512, 16 with AVX2; AVX2 with one weight row and 6-8 x rows relies on the x loads
/// folding into the multiply-adds), and at least eight independent sums (the FMA latency times its throughput) where
/// the registers allow.
template <int M>
inline constexpr int kTileRows = kFrW == 16 ? (M == 1 || M == 2 ? 8 : M == 3 ? 8 : M == 4 ? 6 : M == 5 ? 5 : M == 6 ? 4 : M == 7 ? 3 : 2)
                                            : (M == 1 ? 8 : M == 2 ? 4 : M == 3 ? 3 : M == 4 ? 2 : 1);

/// out[m * ldo + n] = sum over the first K / kFrW * kFrW values of w_n x_m, for NR weight rows (row_bytes apart) and M
/// x rows. One accumulator (kFrW lanes) per (weight row, x row), run over the values in
/// order: every output's sum is the same whatever NR and M, so a verify pass's rows equal decode steps to the bit.
/// Each x vector is loaded once for the NR rows and each weight vector widened once for the M rows, so a few x rows
/// cost FMAs rather than loads (4 x rows with four sums per row each, as before, took 1.6x one row's time from DRAM
/// on a Zen 4 core, bound by the 16 loads of x per 4 weight vectors). The next tile's rows are prefetched into L2 at
/// the same offsets.
template <class T, int NR, int M>
MAXTEXT_QBLOCK_INLINE void dot_tile(const std::byte* rows, std::size_t row_bytes, std::int64_t K, const float* x,
                                            std::int64_t ldx, float* out, std::int64_t ldo) {
  constexpr auto es = static_cast<std::int64_t>(sizeof(T));
  FrVec acc[NR][M];
  MAXTEXT_QBLOCK_UNROLL for (int n = 0; n < NR; ++n) {
    MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) acc[n][m] = fr_zero();
  }
  const std::int64_t done = K / kFrW * kFrW;
  const std::size_t ahead = static_cast<std::size_t>(NR) * row_bytes;
  for (std::int64_t k = 0; k < done; k += kFrW) {
    FrVec xv[M];
    MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) xv[m] = fr_load(x + m * ldx + k);
    MAXTEXT_QBLOCK_UNROLL for (int n = 0; n < NR; ++n) {
      const std::byte* w = rows + static_cast<std::size_t>(n) * row_bytes + k * es;
      prefetch::line_starts_l2(w + ahead, kFrW * es);
      const FrVec wv = fr_widen<T>(w);
      MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) acc[n][m] = fr_fma(wv, xv[m], acc[n][m]);
    }
  }
  MAXTEXT_QBLOCK_UNROLL for (int n = 0; n < NR; ++n) {
    MAXTEXT_QBLOCK_UNROLL for (int m = 0; m < M; ++m) out[m * ldo + n] = fr_sum(acc[n][m]);
  }
}

/// dot_tile over `nrows` weight rows: tiles of kTileRows<M>, the rest one row at a time (the same sums); returns how
/// many values of each row it summed.
template <class T, int M>
inline std::int64_t dot_rows_vec(const std::byte* rows, std::size_t row_bytes, std::int64_t nrows, std::int64_t K,
                                 const float* x, std::int64_t ldx, float* out, std::int64_t ldo) {
  constexpr int NR = kTileRows<M>;
  std::int64_t n = 0;
  for (; n + NR <= nrows; n += NR) {
    dot_tile<T, NR, M>(rows + static_cast<std::size_t>(n) * row_bytes, row_bytes, K, x, ldx, out + n, ldo);
  }
  for (; n < nrows; ++n) dot_tile<T, 1, M>(rows + static_cast<std::size_t>(n) * row_bytes, row_bytes, K, x, ldx, out + n, ldo);
  return K / kFrW * kFrW;
}
#endif

/// Calls f with the float row type's element type (float, fp16 or bf16) as a null pointer of it.
template <class F>
inline void with_float_type(std::uint32_t type, F&& f) {
  switch (type) {
    case quant::kTypeF32: f(static_cast<const float*>(nullptr)); return;
    case quant::kTypeF16: f(static_cast<const fp16*>(nullptr)); return;
    default: f(static_cast<const bf16*>(nullptr)); return;
  }
}

#if MAXTEXT_QBLOCK_AVX512 || MAXTEXT_QBLOCK_AVX2  // (the two paths' kernels have the same names)
/// f(kernel) with this path's one-row dot_q8 kernel of type t, a callable (row, x) -> float; false where the type
/// has none here (then f is not called).
template <class F>
MAXTEXT_QBLOCK_INLINE bool with_dot_q8_kernel(BlockType t, F&& f) {
  using X = const QuantizedX&;
  switch (t) {
    case BlockType::q4_0: f([](const std::byte* r, X x) { return dot_q8_q4_0(r, x); }); return true;
    case BlockType::q8_0: f([](const std::byte* r, X x) { return dot_q8_q8_0(r, x); }); return true;
    case BlockType::iq4_nl: f([](const std::byte* r, X x) { return dot_q8_iq4_nl(r, x); }); return true;
    case BlockType::q6_k: f([](const std::byte* r, X x) { return dot_q8_q6k(r, x); }); return true;
#if !MAXTEXT_QBLOCK_AVX512  // (AVX-512: Q4_K, Q5_K and IQ4_XS read x in their own order: with_laid_kernel)
    case BlockType::q4_k: f([](const std::byte* r, X x) { return dot_q8_q45k<false>(r, x); }); return true;
    case BlockType::q5_k: f([](const std::byte* r, X x) { return dot_q8_q45k<true>(r, x); }); return true;
    case BlockType::iq4_xs: f([](const std::byte* r, X x) { return dot_q8_iq4_xs(r, x); }); return true;
#endif
    default: return false;
  }
}
#endif

}  // namespace detail

MAXTEXT_KERNEL_API QuantizedX quantize_x(const float* x, std::int64_t K, std::byte* buf) {
  MAXTEXT_DASSERT(K % 32 == 0);
  using namespace detail;
  const auto k = static_cast<std::size_t>(K);
  const auto addr = reinterpret_cast<std::uintptr_t>(buf);
  std::byte* p = buf + (kAlign - addr % kAlign) % kAlign;
  auto* q = reinterpret_cast<std::int8_t*>(p);
  auto* d = reinterpret_cast<float*>(p + round_up(k));
  auto* s = reinterpret_cast<std::int16_t*>(p + round_up(k) + round_up(k / 32 * sizeof(float)));
  // Per group the same operations as the scalar definition: max|x| is exact in any order (vmaxps returns its second
  // operand when either is NaN, so with |x| first a NaN is left out, as std::fmax does), d and 1/d are the same
  // scalar divisions, and vcvtps2dq rounds x * (1/d) in the default mode, ties to even, as std::nearbyint. For
  // finite x the rounded values lie in [-127, 127] (|x| <= max|x|, and the roundings of d and 1/d stay far inside a
  // half unit at 127), so packing them to bytes is exact.
  for (std::int64_t g = 0; g < K / 32; ++g) {
    const float* xg = x + 32 * g;
#if MAXTEXT_QBLOCK_AVX512
    const __m512 a = _mm512_loadu_ps(xg), b = _mm512_loadu_ps(xg + 16);
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_max_ps(_mm512_abs_ps(b), _mm512_setzero_ps())));
#elif MAXTEXT_QBLOCK_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xg + 8 * i);
      m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
#else
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xg[i]));
#endif
    const float dg = amax / 127.0f, id = inverse_scale(dg);
#if MAXTEXT_QBLOCK_AVX512
    const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(id)));
    const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(id)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * g), _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * g + 16), _mm512_cvtepi32_epi8(qb));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
#elif MAXTEXT_QBLOCK_AVX2
    __m256i r[4];
    for (int i = 0; i < 4; ++i) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
    // packs per 128-bit lane: dwords [r0 0-3, r1 0-3, r2 0-3, r3 0-3 | the same of 4-7], then back in order
    const __m256i b8 = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * g),
                        _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const __m256i t = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
    __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4E));
    const int sum = _mm_cvtsi128_si32(_mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xB1)));
#else
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int v = static_cast<int>(std::nearbyint(xg[i] * id));  // the default rounding mode: ties to even
      q[32 * g + i] = static_cast<std::int8_t>(v);
      sum += v;
    }
#endif
    d[g] = dg;
    s[g] = static_cast<std::int16_t>(sum);
  }
  return QuantizedX{q, d, s, K};
}

MAXTEXT_KERNEL_API void widen(std::uint32_t type, const std::byte* src, float* dst, std::int64_t n) {
  MAXTEXT_DASSERT(is_float_type(type));
  std::int64_t done = 0;
#if MAXTEXT_QBLOCK_FLOAT_ROWS
  detail::with_float_type(type, [&](auto tag) {
    done = detail::widen_vec<std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>>(src, dst, n);
  });
#endif
  const auto es = static_cast<std::size_t>(quant::checked_type_info(type).bytes);
  quant::dequantize_any(type, src + static_cast<std::size_t>(done) * es, dst + done, n - done);
}

MAXTEXT_KERNEL_API void dot_float_rows(std::uint32_t type, const std::byte* rows, std::size_t row_bytes,
                                       std::int64_t nrows, std::int64_t K, const float* x, std::int64_t ldx, int M,
                                       float* out, std::int64_t ldo) {
  MAXTEXT_DASSERT(is_float_type(type) && M >= 1 && M <= kFloatDotRows);
  const auto es = static_cast<std::size_t>(quant::checked_type_info(type).bytes);
  std::int64_t done = 0;
  if (K == 0) {  // empty sums (the vector path would write them; the scalar one has nothing to run)
    for (int m = 0; m < M; ++m) std::fill(out + m * ldo, out + m * ldo + nrows, 0.0f);
    return;
  }
#if MAXTEXT_QBLOCK_FLOAT_ROWS
  detail::with_float_type(type, [&](auto tag) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
    detail::with_rows(M, [&](auto mr) {
      done = detail::dot_rows_vec<T, decltype(mr)::value>(rows, row_bytes, nrows, K, x, ldx, out, ldo);
    });
  });
#endif
  if (done == K) return;
  // The rest (all of it without a vector path) in chunks widened to f32, over 64 lane sums as the scalar block path.
  float w[256];
  for (std::int64_t j = 0; j < nrows; ++j) {
    const std::byte* row = rows + static_cast<std::size_t>(j) * row_bytes;
    detail::LaneSum acc[kFloatDotRows];
    for (std::int64_t k0 = done; k0 < K; k0 += 256) {
      const std::int64_t n = std::min<std::int64_t>(256, K - k0);
      quant::dequantize_any(type, row + static_cast<std::size_t>(k0) * es, w, n);
      for (int m = 0; m < M; ++m) {
        const float* xm = x + m * ldx + k0;
        for (std::int64_t e = 0; e < n; ++e) {
          float& a = acc[m].lane[(k0 + e) % detail::LaneSum::W];
          a = std::fma(w[e], xm[e], a);
        }
      }
    }
    for (int m = 0; m < M; ++m) out[m * ldo + j] = (done > 0 ? out[m * ldo + j] : 0.0f) + acc[m].total();
  }
}

MAXTEXT_KERNEL_API void dot_float(std::uint32_t type, const std::byte* row, std::int64_t K, const float* x,
                                  std::int64_t ldx, int M, float* out) {
  dot_float_rows(type, row, 0, 1, K, x, ldx, M, out, 1);
}

MAXTEXT_KERNEL_API void dequantize_any(std::uint32_t type, const std::byte* src, float* dst, std::int64_t n) {
  if (is_float_type(type)) return widen(type, src, dst, n);
  dequantize(static_cast<BlockType>(quant::checked_type_info(type).id), src, dst, n);
}

MAXTEXT_KERNEL_API float dot_q8(BlockType t, const std::byte* row, const QuantizedX& x) {
  MAXTEXT_DASSERT(x.K % quant::block_format(t).block == 0);
#if MAXTEXT_QBLOCK_AVX512 || MAXTEXT_QBLOCK_AVX2
  using namespace detail;
#if MAXTEXT_QBLOCK_AVX512
  {
    float dot = 0.0f;
    if (with_laid_kernel(t, [&](auto layout, auto kernel) MAXTEXT_QBLOCK_LAMBDA_INLINE {
          const std::size_t xb = static_cast<std::size_t>(x.K / 256) * kLaidXBytes;
          std::byte* xl = laid_x_buffer(xb);
          layout(x, xl);
          kernel(ic<1>{}, row, x.K / 256, xl, xb, &dot, 1);
        }))
      return dot;
  }
#endif
  float dot = 0.0f;
  if (with_dot_q8_kernel(t, [&](auto kernel) MAXTEXT_QBLOCK_LAMBDA_INLINE { dot = kernel(row, x); })) return dot;
  switch (t) {
#if MAXTEXT_QBLOCK_AVX2_KERNELS
    case BlockType::q4_1: return avx2::dot_q8_q4_1(row, x);
    case BlockType::q5_0: return avx2::dot_q8_q5_0(row, x);
    case BlockType::q5_1: return avx2::dot_q8_q5_1(row, x);
    case BlockType::q2_k: return avx2::dot_q8_q2k(row, x);
    case BlockType::q3_k: return avx2::dot_q8_q3k(row, x);
#endif
    default: break;
  }
#endif
  return detail::dot_q8_scalar(t, row, x);
}

MAXTEXT_KERNEL_API void dot_q8_rows(BlockType t, const std::byte* rows, std::size_t row_bytes, std::int64_t N,
                                    const QuantizedX* x, std::int64_t M, float* out, std::int64_t ldo) {
  if (M <= 0 || N <= 0) return;
#if MAXTEXT_QBLOCK_AVX2
  {
    using namespace detail;
    using std::false_type, std::true_type;
    const std::int64_t nb = x[0].K / 256, nb32 = x[0].K / 32;
    // kernel(ic<MR>, weight row, its MR x rows, their outputs): every weight row for every chunk of x rows from m
    auto run_from = [&](std::int64_t m, auto kernel) {
      rows_in_chunks<4>(N, M - m, [&](auto mr, std::int64_t m0, std::int64_t n) {
        kernel(mr, rows + static_cast<std::size_t>(n) * row_bytes, x + m + m0, out + (m + m0) * ldo + n);
      });
    };
    // tile8_rows<T> for every sixteen x rows (two tiles), then eight, then kernel for the rest
    auto run8 = [&](auto tile, auto kernel) {
      using T = typename decltype(tile)::type;
      const std::int64_t m8 = M / 8 * 8, K = x[0].K;
      if (m8 > 0) {
        std::byte* buf = tile8_buffer(K);
        for (std::int64_t m0 = 0; m0 < m8; m0 += 16) {
          XTile8 xt[2] = {tile8_x<T::kHalves>(x + m0, buf)};
          if (m0 + 16 <= m8) {
            xt[1] = tile8_x<T::kHalves>(x + m0 + 8, buf + tile8_bytes(K));
            tile8_rows<T, 2>(rows, row_bytes, N, K / T::kValues, xt, out + m0 * ldo, ldo);
          } else {
            tile8_rows<T, 1>(rows, row_bytes, N, K / T::kValues, xt, out + m0 * ldo, ldo);
          }
        }
      }
      run_from(m8, kernel);
    };
    auto b32 = [&](auto bytes, auto off, auto min, auto sgn, auto wvec) {
      constexpr int kB = decltype(bytes)::value, kO = decltype(off)::value;
      constexpr bool kM = decltype(min)::value, kS = decltype(sgn)::value;
      run8(std::type_identity<B32Tile8<kB, kO, kM, kS, decltype(wvec)>>{},
           [&](auto mr, const std::byte* r, const QuantizedX* xs, float* o) {
             dot_q8_rows_b32<kB, kO, kM, kS, decltype(mr)::value>(r, nb32, xs, o, ldo, wvec);
           });
    };
    switch (t) {
      case BlockType::q4_k:
        return run8(std::type_identity<Q45_KTile8<false>>{},
                    [&](auto mr, const std::byte* r, const QuantizedX* xs, float* o) {
                      dot_q8_rows_q45k<false, decltype(mr)::value>(r, nb, xs, o, ldo);
                    });
      case BlockType::q5_k:
        return run8(std::type_identity<Q45_KTile8<true>>{},
                    [&](auto mr, const std::byte* r, const QuantizedX* xs, float* o) {
                      dot_q8_rows_q45k<true, decltype(mr)::value>(r, nb, xs, o, ldo);
                    });
      case BlockType::q6_k:
        return run8(std::type_identity<Q6_KTile8>{},
                    [&](auto mr, const std::byte* r, const QuantizedX* xs, float* o) {
                      dot_q8_rows_q6k<decltype(mr)::value>(r, nb, xs, o, ldo);
                    });
      case BlockType::q4_0:
        return run8(std::type_identity<Q4_0Tile8>{},
                    [&](auto mr, const std::byte* r, const QuantizedX* xs, float* o) {
                      nib_rows<18, 8, false, decltype(mr)::value>(r, nb32, xs, o, ldo);
                    });
      case BlockType::iq4_xs:  // rows past the tiles: one dot_q8 after the other
        return run8(std::type_identity<Iq4XsTile8>{},
                    [&](auto mr, const std::byte* r, const QuantizedX* xs, float* o) {
                      for (int m = 0; m < decltype(mr)::value; ++m) o[m * ldo] = dot_q8_iq4_xs(r, xs[m]);
                    });
      case BlockType::q4_1:
        return run8(std::type_identity<Q4_1Tile8>{},
                    [&](auto mr, const std::byte* r, const QuantizedX* xs, float* o) {
                      nib_rows<20, 0, true, decltype(mr)::value>(r, nb32, xs, o, ldo);
                    });
      case BlockType::q5_0: return b32(ic<22>{}, ic<16>{}, false_type{}, false_type{}, WQ5_0{});
      case BlockType::q5_1: return b32(ic<24>{}, ic<0>{}, true_type{}, false_type{}, WQ5_1{});
      case BlockType::q8_0: return b32(ic<34>{}, ic<0>{}, false_type{}, true_type{}, WQ8_0{});
      case BlockType::iq4_nl: return b32(ic<18>{}, ic<0>{}, false_type{}, true_type{}, WIq4Nl{});
      default: break;
    }
  }
#endif
#if MAXTEXT_QBLOCK_AVX512
  {
    // Decode's (and a verify pass's) call for a chunk of weight rows: the type's kernel inlined into one loop, so a
    // row's final reduction overlaps the next row's loads (one call and one switch per chunk instead of per row).
    // Q8_0, Q4_K, Q5_K, IQ4_XS and Q6_K take up to kSharedRows x rows per pass over a weight row; the same kernels
    // as dot_q8 (MR = 1), so the same sums to the bit.
    using namespace detail;
    // Q4_K, Q5_K, IQ4_XS: each x row in the kernel's order once, for all N weight rows.
    const bool laid = with_laid_kernel(t, [&](auto layout, auto kernel) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      const std::int64_t nb = x[0].K / 256;
      const std::size_t xb = static_cast<std::size_t>(nb) * kLaidXBytes;
      std::byte* xl = laid_x_buffer(xb * static_cast<std::size_t>(M));
      for (std::int64_t m = 0; m < M; ++m) layout(x[m], xl + xb * static_cast<std::size_t>(m));
      for (std::int64_t m0 = 0; m0 < M; m0 += kSharedRows) {  // each weight block decoded once per kSharedRows rows
        with_rows(std::min<std::int64_t>(kSharedRows, M - m0), [&](auto mr) MAXTEXT_QBLOCK_LAMBDA_INLINE {
          const std::byte* xm = xl + xb * static_cast<std::size_t>(m0);
          for (std::int64_t n = 0; n < N; ++n) {
            kernel(mr, rows + static_cast<std::size_t>(n) * row_bytes, nb, xm, xb, out + m0 * ldo + n, ldo);
          }
        });
      }
    });
    if (laid) return;
    if (t == BlockType::q8_0) return q8_0_rows(rows, row_bytes, N, x, M, out, ldo);
    if (t == BlockType::q6_k) {
      for (std::int64_t m0 = 0; m0 < M; m0 += kSharedRows) {
        with_rows(std::min<std::int64_t>(kSharedRows, M - m0), [&](auto mr) MAXTEXT_QBLOCK_LAMBDA_INLINE {
          for (std::int64_t n = 0; n < N; ++n) {
            dot_q8_rows_q6k512<decltype(mr)::value>(rows + static_cast<std::size_t>(n) * row_bytes, x + m0,
                                                    out + m0 * ldo + n, ldo);
          }
        });
      }
      return;
    }
    const bool done = with_dot_q8_kernel(t, [&](auto kernel) MAXTEXT_QBLOCK_LAMBDA_INLINE {
      for (std::int64_t n = 0; n < N; ++n) {
        const std::byte* row = rows + static_cast<std::size_t>(n) * row_bytes;
        for (std::int64_t m = 0; m < M; ++m) out[m * ldo + n] = kernel(row, x[m]);
      }
    });
    if (done) return;
  }
#endif
  // Otherwise four x rows at a time against every weight row: the weight rows (a few KiB each) stay in L1 / L2 and
  // the x rows in L1.
  for (std::int64_t m0 = 0; m0 < M; m0 += 4) {
    const std::int64_t m1 = std::min<std::int64_t>(M, m0 + 4);
    for (std::int64_t n = 0; n < N; ++n) {
      const std::byte* row = rows + static_cast<std::size_t>(n) * row_bytes;
      for (std::int64_t m = m0; m < m1; ++m) out[m * ldo + n] = dot_q8(t, row, x[m]);
    }
  }
}

MAXTEXT_KERNEL_API bool dot_q8_rows_preferred(BlockType t, std::int64_t M) {
  (void)M;  // matmul asks only above its decode rows (gemm::kGgmlI8RowsDirect)
#if MAXTEXT_QBLOCK_AVX2
  // Without VNNI gemm's integer panels run a 16-bit emulation of vpdpbusd, slower than these kernels (model c, one
  // thread, 128 prompt tokens: Q4_K_M 14.5 -> 35 tokens/s with the four-row kernels, 49-66 with the tiles of eight
  // rows; Q4_0 14.2 -> 38.7, 56-73); Q6_K's and Q5_K's exact f32 panels are slower than their kernels too. Q2_K and
  // Q3_K have no multi-row kernel (one dot_q8 after the other) and keep the exact panels.
  return t != BlockType::q2_k && t != BlockType::q3_k;
#else
  (void)t;
  return false;  // the VNNI panels (AVX-512), or the portable code
#endif
}

}  // namespace maxtext::cpu::qblock

#undef MAXTEXT_QBLOCK_INLINE
#undef MAXTEXT_QBLOCK_UNROLL
#undef MAXTEXT_QBLOCK_FLATTEN
#undef MAXTEXT_QBLOCK_LAMBDA_INLINE
#undef MAXTEXT_QBLOCK_FLOAT_ROWS
#undef MAXTEXT_QBLOCK_AVX2_KERNELS
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // definitions
