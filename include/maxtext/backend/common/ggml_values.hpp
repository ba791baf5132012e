// backend/common/ggml_values.hpp: element k of a runtime-typed matrix row (Matrix<ggml_byte>: a GGUF file's F32,
// F16, BF16 or block-quantised row as it lies), decoded on its own, as __host__ __device__ code. The CUDA backend's
// product, embedding and per-head kernels read a GGUF file's blocks through it (backend/cuda/gemm.cuh, GgmlRows); the
// host unit test (tests/backend/test_ggml_values.cpp) checks it against the host decoder, so the values the GPU reads
// are the ones the CPU and reference backends read.
//
// core/ggml_quants.hpp decodes whole blocks on the host (quant::dequantize_any); this header decodes one element,
// which is what a GPU thread that owns one product term needs: it reads the element's quant bits and the scales of
// its (sub-)block, nothing else. The values equal quant::dequantize_any's bit for bit: the same f32 products in the
// same order, and where a product meets an add (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) the product is exact in f32 (fp16
// scale: 11 significant bits, sub-scale at most 6, quant at most 5), so a fused multiply-add, which nvcc forms by
// default, rounds alike. Bytes are read one at a time (little-endian, as GGUF stores them): rows need no alignment.
#pragma once

#include <cstdint>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext::ggml_values {

namespace detail {
MAXTEXT_HD inline std::uint32_t u8(const std::uint8_t* p, std::int64_t i) { return p[i]; }
MAXTEXT_HD inline std::uint32_t u16(const std::uint8_t* p) { return p[0] | (static_cast<std::uint32_t>(p[1]) << 8); }
MAXTEXT_HD inline std::uint32_t u32(const std::uint8_t* p) { return u16(p) | (u16(p + 2) << 16); }
MAXTEXT_HD inline float half(const std::uint8_t* p) { return fp16::to_float(static_cast<std::uint16_t>(u16(p))); }
/// The 4-bit non-linear codebook of IQ4_NL and IQ4_XS (llama.cpp's kvalues_iq4nl).
MAXTEXT_HD inline float iq4(std::uint32_t nibble) {
  constexpr std::int8_t v[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return static_cast<float>(v[nibble & 15u]);
}
/// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at `s`.
MAXTEXT_HD inline void k_scale_min(const std::uint8_t* s, std::int64_t j, int& sc, int& mn) {
  if (j < 4) {
    sc = static_cast<int>(u8(s, j) & 63u);
    mn = static_cast<int>(u8(s, j + 4) & 63u);
  } else {
    sc = static_cast<int>((u8(s, j + 4) & 0x0fu) | ((u8(s, j - 4) >> 2) & 0x30u));
    mn = static_cast<int>((u8(s, j + 4) >> 4) | ((u8(s, j) >> 2) & 0x30u));
  }
}
}  // namespace detail

/// Element k of a row of ggml type `type` starting at `row` (F32 0, F16 1, BF16 30, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7,
/// Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, IQ4_NL 20, IQ4_XS 23); NaN for any other type (callers
/// check the type on the host first: quant::checked_type_info).
MAXTEXT_HD inline float value(std::uint32_t type, const std::uint8_t* row, std::int64_t k) {
  using detail::half;
  using detail::u8;
  switch (type) {
    case 0: return maxtext::detail::bits_f32(detail::u32(row + 4 * k));
    case 1: return half(row + 2 * k);
    case 30: return maxtext::detail::bits_f32(detail::u16(row + 2 * k) << 16);
    case 2: {  // Q4_0, 18 bytes: d; element e in the low (e < 16) or high nibble of byte e % 16; q - 8
      const std::uint8_t* b = row + (k / 32) * 18;
      const std::int64_t e = k % 32;
      const int q = static_cast<int>((u8(b + 2, e % 16) >> (e < 16 ? 0 : 4)) & 15u);
      return half(b) * static_cast<float>(q - 8);
    }
    case 3: {  // Q4_1, 20 bytes: d, m; nibbles as Q4_0; d q + m
      const std::uint8_t* b = row + (k / 32) * 20;
      const std::int64_t e = k % 32;
      const int q = static_cast<int>((u8(b + 4, e % 16) >> (e < 16 ? 0 : 4)) & 15u);
      return half(b) * static_cast<float>(q) + half(b + 2);
    }
    case 6:
    case 7: {  // Q5_0 (22 bytes: d, qh, qs; q - 16) / Q5_1 (24 bytes: d, m, qh, qs; d q + m); bit e of qh is e's 5th
      const bool has_min = type == 7;
      const std::uint8_t* b = row + (k / 32) * (has_min ? 24 : 22);
      const std::int64_t e = k % 32;
      const std::uint8_t* p = b + (has_min ? 4 : 2);
      const std::uint32_t qh = detail::u32(p);
      const int q = static_cast<int>(((u8(p + 4, e % 16) >> (e < 16 ? 0 : 4)) & 15u) | (((qh >> e) & 1u) << 4));
      if (has_min) return half(b) * static_cast<float>(q) + half(b + 2);
      return half(b) * static_cast<float>(q - 16);
    }
    case 8: {  // Q8_0, 34 bytes: d; 32 int8
      const std::uint8_t* b = row + (k / 32) * 34;
      return static_cast<float>(static_cast<std::int8_t>(b[2 + k % 32])) * half(b);
    }
    case 10: {  // Q2_K, 84 bytes: scales[16] (scale low nibble, min high), qs[64] 2-bit, d, dmin
      const std::uint8_t* b = row + (k / 256) * 84;
      const std::int64_t e = k % 256, g = e / 16;
      const float dl = half(b + 80) * static_cast<float>(u8(b, g) & 15u);
      const float ml = half(b + 82) * static_cast<float>(u8(b, g) >> 4);
      const int q = static_cast<int>((u8(b + 16, (e / 128) * 32 + e % 32) >> (2 * ((e / 32) % 4))) & 3u);
      return dl * static_cast<float>(q) - ml;
    }
    case 11: {  // Q3_K, 110 bytes: hmask[32], qs[64] 2-bit, scales[12] (16 x 6-bit, biased by 32), d
      const std::uint8_t* b = row + (k / 256) * 110;
      const std::int64_t e = k % 256, g = e / 16;
      const std::uint32_t lo = (u8(b + 96, g % 8) >> (4 * (g / 8))) & 15u;
      const std::uint32_t hi = (u8(b + 96, 8 + g % 4) >> (2 * (g / 4))) & 3u;
      const float dl = half(b + 108) * static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32);
      const int low = static_cast<int>((u8(b + 32, (e / 128) * 32 + e % 32) >> (2 * ((e / 32) % 4))) & 3u);
      const bool high = ((u8(b, e % 32) >> (e / 32)) & 1u) != 0;
      return dl * static_cast<float>(low - (high ? 0 : 4));
    }
    case 12:
    case 13: {  // Q4_K (144 bytes) / Q5_K (176): d, dmin, scales[12], [qh[32]], qs[128]; sub-block j = e / 32
      const bool five = type == 13;
      const std::uint8_t* b = row + (k / 256) * (five ? 176 : 144);
      const std::int64_t e = k % 256, j = e / 32, l = e % 32;
      int s = 0, mn = 0;
      detail::k_scale_min(b + 4, j, s, mn);
      const float dj = half(b) * static_cast<float>(s);
      const float mj = half(b + 2) * static_cast<float>(mn);
      std::uint32_t q = (u8(b + (five ? 48 : 16), (j / 2) * 32 + l) >> (4 * (j % 2))) & 15u;
      if (five) q |= ((u8(b + 16, l) >> j) & 1u) << 4;
      return dj * static_cast<float>(q) - mj;
    }
    case 14: {  // Q6_K, 210 bytes: ql[128] low nibbles, qh[64] 2-bit highs, scales[16] int8, d; q - 32
      const std::uint8_t* b = row + (k / 256) * 210;
      const std::int64_t e = k % 256, h = e / 128, r = e % 128, s = r / 32;
      const std::uint32_t low = (u8(b, h * 64 + r % 64) >> (4 * (s / 2))) & 15u;
      const std::uint32_t high = (u8(b + 128, h * 32 + r % 32) >> (2 * s)) & 3u;
      const float dg = half(b + 208) * static_cast<float>(static_cast<std::int8_t>(b[192 + e / 16]));
      return dg * static_cast<float>(static_cast<int>(low | (high << 4)) - 32);
    }
    case 20: {  // IQ4_NL, 18 bytes: d; nibbles as Q4_0, through the codebook
      const std::uint8_t* b = row + (k / 32) * 18;
      const std::int64_t e = k % 32;
      return half(b) * detail::iq4(u8(b + 2, e % 16) >> (e < 16 ? 0 : 4));
    }
    case 23: {  // IQ4_XS, 136 bytes: d, scales_h (2 bits per sub-block), scales_l[4] (nibbles), qs[128]
      const std::uint8_t* b = row + (k / 256) * 136;
      const std::int64_t e = k % 256, j = e / 32, w = e % 32;
      const std::uint32_t lo = (u8(b + 4, j / 2) >> (4 * (j % 2))) & 15u;
      const std::uint32_t hi = (detail::u16(b + 2) >> (2 * j)) & 3u;
      const float dl = half(b) * static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32);
      return dl * detail::iq4(u8(b + 8, j * 16 + w % 16) >> (w < 16 ? 0 : 4));
    }
    default: return maxtext::detail::bits_f32(0x7fc00000u);
  }
}

/// A decoded value times its matrix's factor beyond the blocks (Matrix::value_scale): the product in double,
/// rounded once to f32, as quant::scaled_value has it.
MAXTEXT_HD inline float scaled(float v, double value_scale) {
  return value_scale == 1.0 ? v : static_cast<float>(static_cast<double>(v) * value_scale);
}

}  // namespace maxtext::ggml_values
