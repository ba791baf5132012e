// backend/cpu/vec.hpp: xsimd helpers for the CPU kernels: row conversion to/from f32, rounding to a narrow
// type inside registers, dot products and horizontal sums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "maxtext/core/dtype.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace maxtext::cpu::vec {

using fbatch = xsimd::batch<float>;
using ibatch = xsimd::batch<std::int32_t>;
inline constexpr std::size_t W = fbatch::size;

/// Convert n elements of T to f32 (exact).
template <class T>
inline void to_f32(const T* src, float* dst, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else if constexpr (std::is_same_v<T, bf16>) {
    const auto* s = reinterpret_cast<const std::uint16_t*>(src);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t u = static_cast<std::uint32_t>(s[i]) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      dst[i] = f;
    }
  } else if constexpr (std::is_same_v<T, fp16>) {
    // The hardware conversion (exact, as fp16::operator float) where compiled in: an f16 KV cache is converted row
    // by row as attention reads it, and the scalar bit manipulation measured slower than the f32 cache's reads.
    std::int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    }
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
#endif
    for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  }
}

/// One batch of W values of T at p as f32 (exact), converted in registers: f16 by vcvtph2ps, bf16 by a shift, int8
/// (the codes of a quantised KV cache) by sign extension and vcvtdq2ps; anything else through a buffer.
template <class T>
MAXTEXT_INLINE fbatch load_f32(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return fbatch::load_unaligned(p);
#if defined(__AVX512F__)  // 16-float batches
  } else if constexpr (std::is_same_v<T, fp16> && W == 16) {
    return fbatch(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  } else if constexpr (std::is_same_v<T, bf16> && W == 16) {
    return fbatch(_mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16)));
  } else if constexpr (std::is_same_v<T, std::int8_t> && W == 16) {
    return fbatch(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#elif defined(__AVX2__)  // 8-float batches
#if defined(__F16C__)
  } else if constexpr (std::is_same_v<T, fp16> && W == 8) {
    return fbatch(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#endif
  } else if constexpr (std::is_same_v<T, bf16> && W == 8) {
    return fbatch(_mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16)));
  } else if constexpr (std::is_same_v<T, std::int8_t> && W == 8) {
    return fbatch(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#endif
  } else {
    alignas(64) float tmp[W];
    to_f32(p, tmp, static_cast<std::int64_t>(W));
    return fbatch::load_aligned(tmp);
  }
}

/// Convert n f32 values to T, rounding to nearest even.
template <class T>
inline void from_f32(const float* src, T* dst, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else if constexpr (std::is_same_v<T, bf16>) {
    auto* d = reinterpret_cast<std::uint16_t*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = bf16::round_bits(src[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = T(src[i]);
  }
}

/// Round every lane to T's precision (identity for float). bf16 is done in-register; other types per lane.
template <class T>
inline fbatch round(fbatch v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return v;
  } else if constexpr (std::is_same_v<T, bf16>) {
    ibatch u = xsimd::bitwise_cast<ibatch>(v);
    const ibatch lsb = (u >> 16) & ibatch(1);
    ibatch r = (u + ibatch(0x7fff) + lsb) & ibatch(static_cast<std::int32_t>(0xffff0000u));
    const auto is_nan = v != v;
    return xsimd::select(is_nan, v, xsimd::bitwise_cast<fbatch>(r));
  } else {
    alignas(64) float tmp[W];
    v.store_aligned(tmp);
    for (std::size_t i = 0; i < W; ++i) tmp[i] = round_to<T>(tmp[i]);
    return fbatch::load_aligned(tmp);
  }
}

inline float hsum(fbatch v) { return xsimd::hadd(v); }
/// Largest lane (xsimd 8.1 has no max reduction).
inline float hmax(fbatch v) {
#if defined(__AVX512F__)
  return _mm512_reduce_max_ps(v);
#else
  alignas(64) float t[W];
  v.store_aligned(t);
  float m = t[0];
  for (std::size_t i = 1; i < W; ++i) m = m > t[i] ? m : t[i];
  return m;
#endif
}

/// sum_i a[i] * b[i] over f32 rows, four accumulators to hide FMA latency.
inline float dot(const float* a, const float* b, std::int64_t n) {
  fbatch s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
  std::int64_t i = 0;
  constexpr std::int64_t w = static_cast<std::int64_t>(W);
  for (; i + 4 * w <= n; i += 4 * w) {
    s0 = xsimd::fma(fbatch::load_unaligned(a + i), fbatch::load_unaligned(b + i), s0);
    s1 = xsimd::fma(fbatch::load_unaligned(a + i + w), fbatch::load_unaligned(b + i + w), s1);
    s2 = xsimd::fma(fbatch::load_unaligned(a + i + 2 * w), fbatch::load_unaligned(b + i + 2 * w), s2);
    s3 = xsimd::fma(fbatch::load_unaligned(a + i + 3 * w), fbatch::load_unaligned(b + i + 3 * w), s3);
  }
  for (; i + w <= n; i += w) s0 = xsimd::fma(fbatch::load_unaligned(a + i), fbatch::load_unaligned(b + i), s0);
  float s = hsum((s0 + s1) + (s2 + s3));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// y[i] += a * x[i]
inline void axpy(float a, const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  constexpr std::int64_t w = static_cast<std::int64_t>(W);
  const fbatch av(a);
  for (; i + w <= n; i += w) {
    xsimd::fma(av, fbatch::load_unaligned(x + i), fbatch::load_unaligned(y + i)).store_unaligned(y + i);
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

/// y[i] *= a
inline void scale(float a, float* y, std::int64_t n) {
  std::int64_t i = 0;
  constexpr std::int64_t w = static_cast<std::int64_t>(W);
  const fbatch av(a);
  for (; i + w <= n; i += w) (fbatch::load_unaligned(y + i) * av).store_unaligned(y + i);
  for (; i < n; ++i) y[i] *= a;
}

/// Threads the backend may use right now (1 inside an already-parallel region).
inline int max_threads() {
#if defined(_OPENMP)
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace maxtext::cpu::vec
