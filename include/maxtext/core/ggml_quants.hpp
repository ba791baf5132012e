// core/ggml_quants.hpp: the block-quantised tensor types of GGUF files (llama.cpp's ggml types Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS): their byte layouts and their dequantisation to f32,
// written from the format definitions (ggml-common.h's block structs; gguf-py's quants.py is the NumPy reference).
// The values equal gguf-py's NumPy dequantisation bit for bit: products are taken in NumPy's order, and in the types
// that add an offset (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) every product is exact in f32 (fp16 scale: 11 significant bits,
// sub-scale at most 6, quant at most 5), so only the add rounds and a fused multiply-add gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext::quant {

/// The ggml block types this header decodes (the numbering is GGUF's tensor type id).
enum class BlockType : std::uint32_t {
  q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14,
  iq4_nl = 20, iq4_xs = 23
};

/// Elements and bytes per block, and where the block's fp16 scales lie (byte offsets; -1 ends the list).
struct BlockFormat {
  BlockType type;
  const char* name;
  std::int64_t block;  ///< elements per block
  std::int64_t bytes;  ///< bytes per block
  int fp16_scales[2];  ///< byte offsets of the block's fp16 scale fields (d, and m or dmin), -1 when absent
};

/// The format of ggml tensor type `ggml_type`, or nullptr when it is not one of the block types above.
inline const BlockFormat* block_format(std::uint32_t ggml_type) {
  static const BlockFormat table[] = {
      {BlockType::q4_0, "Q4_0", 32, 18, {0, -1}},    {BlockType::q4_1, "Q4_1", 32, 20, {0, 2}},
      {BlockType::q5_0, "Q5_0", 32, 22, {0, -1}},    {BlockType::q5_1, "Q5_1", 32, 24, {0, 2}},
      {BlockType::q8_0, "Q8_0", 32, 34, {0, -1}},    {BlockType::q2_k, "Q2_K", 256, 84, {80, 82}},
      {BlockType::q3_k, "Q3_K", 256, 110, {108, -1}}, {BlockType::q4_k, "Q4_K", 256, 144, {0, 2}},
      {BlockType::q5_k, "Q5_K", 256, 176, {0, 2}},   {BlockType::q6_k, "Q6_K", 256, 210, {208, -1}},
      {BlockType::iq4_nl, "IQ4_NL", 32, 18, {0, -1}}, {BlockType::iq4_xs, "IQ4_XS", 256, 136, {0, -1}},
  };
  for (const auto& f : table) {
    if (static_cast<std::uint32_t>(f.type) == ggml_type) return &f;
  }
  return nullptr;
}
inline const BlockFormat& block_format(BlockType t) { return *block_format(static_cast<std::uint32_t>(t)); }

/// True when every fp16 scale of the block at `blk` is finite (llama.cpp refuses NaN/inf scales too).
inline bool block_scales_finite(const BlockFormat& f, const std::byte* blk) {
  for (int off : f.fp16_scales) {
    if (off < 0) continue;
    std::uint16_t h;
    std::memcpy(&h, blk + off, 2);
    if ((h & 0x7c00u) == 0x7c00u) return false;
  }
  return true;
}

namespace detail {

inline float half_at(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16::to_float(h);
}
inline std::uint8_t byte_at(const std::byte* p, std::int64_t i) { return static_cast<std::uint8_t>(p[i]); }

/// The 4-bit non-linear codebook of IQ4_NL and IQ4_XS.
inline constexpr std::int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

/// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at `s`.
inline void k_scale_min(const std::byte* s, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = byte_at(s, j) & 63;
    mn = byte_at(s, j + 4) & 63;
  } else {
    sc = (byte_at(s, j + 4) & 0x0f) | ((byte_at(s, j - 4) >> 2) & 0x30);
    mn = (byte_at(s, j + 4) >> 4) | ((byte_at(s, j) >> 2) & 0x30);
  }
}

}  // namespace detail

/// Dequantise one block (block_format(t).block values) at `blk` into `y`.
MAXTEXT_API void dequantize_block(BlockType t, const std::byte* blk, float* y);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void dequantize_block(BlockType t, const std::byte* blk, float* y) {
  using detail::byte_at;
  using detail::half_at;
  switch (t) {
    case BlockType::q4_0: {  // d; 16 bytes: element j in the low nibble of byte j, j+16 in its high nibble; q - 8
      const float d = half_at(blk);
      const std::byte* qs = blk + 2;
      for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>((byte_at(qs, j) & 0x0f) - 8);
        y[j + 16] = d * static_cast<float>((byte_at(qs, j) >> 4) - 8);
      }
      return;
    }
    case BlockType::q4_1: {  // d, m; nibbles as Q4_0; d * q + m
      const float d = half_at(blk);
      const float m = half_at(blk + 2);
      const std::byte* qs = blk + 4;
      for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(byte_at(qs, j) & 0x0f) + m;
        y[j + 16] = d * static_cast<float>(byte_at(qs, j) >> 4) + m;
      }
      return;
    }
    case BlockType::q5_0:
    case BlockType::q5_1: {  // d, [m], 32 high bits (bit j for element j), nibbles as Q4_0
      const bool has_min = t == BlockType::q5_1;
      const float d = half_at(blk);
      const float m = has_min ? half_at(blk + 2) : 0.0f;
      const std::byte* p = blk + (has_min ? 4 : 2);
      std::uint32_t qh;
      std::memcpy(&qh, p, 4);
      const std::byte* qs = p + 4;
      for (int j = 0; j < 16; ++j) {
        const int lo = (byte_at(qs, j) & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (byte_at(qs, j) >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        if (has_min) {
          y[j] = d * static_cast<float>(lo) + m;
          y[j + 16] = d * static_cast<float>(hi) + m;
        } else {
          y[j] = d * static_cast<float>(lo - 16);
          y[j + 16] = d * static_cast<float>(hi - 16);
        }
      }
      return;
    }
    case BlockType::q8_0: {  // d; 32 int8
      const float d = half_at(blk);
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(byte_at(blk + 2, j))) * d;
      return;
    }
    case BlockType::q2_k: {  // scales[16] (low nibble scale, high nibble min), qs[64] 2-bit, d, dmin
      const std::byte* sc = blk;
      const std::byte* qs = blk + 16;
      const float d = half_at(blk + 80);
      const float dmin = half_at(blk + 82);
      float dl[16], ml[16];
      for (int g = 0; g < 16; ++g) {
        dl[g] = d * static_cast<float>(byte_at(sc, g) & 0x0f);
        ml[g] = dmin * static_cast<float>(byte_at(sc, g) >> 4);
      }
      for (int e = 0; e < 256; ++e) {  // e = half*128 + shift*32 + l reads bits 2*shift of qs[half*32 + l]
        const int half = e / 128, s = (e / 32) % 4, l = e % 32;
        const int q = (byte_at(qs, half * 32 + l) >> (2 * s)) & 3;
        y[e] = dl[e / 16] * static_cast<float>(q) - ml[e / 16];
      }
      return;
    }
    case BlockType::q3_k: {  // hmask[32], qs[64] 2-bit, scales[12] (16 x 6-bit, biased by 32), d
      const std::byte* hm = blk;
      const std::byte* qs = blk + 32;
      const std::byte* sc = blk + 96;
      const float d = half_at(blk + 108);
      float dl[16];
      for (int g = 0; g < 16; ++g) {
        const int lo = (byte_at(sc, g % 8) >> (4 * (g / 8))) & 0x0f;
        const int hi = (byte_at(sc, 8 + g % 4) >> (2 * (g / 4))) & 0x03;
        dl[g] = d * static_cast<float>((lo | (hi << 4)) - 32);
      }
      for (int e = 0; e < 256; ++e) {  // low bits as Q2_K; the high bit of element e is bit e/32 of hmask[e%32]
        const int half = e / 128, s = (e / 32) % 4, l = e % 32;
        const int low = (byte_at(qs, half * 32 + l) >> (2 * s)) & 3;
        const int high = (byte_at(hm, l) >> (e / 32)) & 1;
        y[e] = dl[e / 16] * static_cast<float>(low - (high ? 0 : 4));
      }
      return;
    }
    case BlockType::q4_k:
    case BlockType::q5_k: {  // d, dmin, scales[12] (8 x 6-bit scale + min), [qh[32]], qs[128]
      const bool five = t == BlockType::q5_k;
      const float d = half_at(blk);
      const float dmin = half_at(blk + 2);
      const std::byte* sc = blk + 4;
      const std::byte* qh = blk + 16;
      const std::byte* qs = blk + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {  // sub-block j: the low (j even) or high (j odd) nibbles of qs[(j/2)*32 + l]
        int s = 0, mn = 0;
        detail::k_scale_min(sc, j, s, mn);
        const float dj = d * static_cast<float>(s);
        const float mj = dmin * static_cast<float>(mn);
        for (int l = 0; l < 32; ++l) {
          int q = (byte_at(qs, (j / 2) * 32 + l) >> (4 * (j % 2))) & 0x0f;
          if (five) q |= ((byte_at(qh, l) >> j) & 1) << 4;
          y[j * 32 + l] = dj * static_cast<float>(q) - mj;
        }
      }
      return;
    }
    case BlockType::q6_k: {  // ql[128] low nibbles, qh[64] 2-bit highs, scales[16] int8, d; q - 32
      const std::byte* ql = blk;
      const std::byte* qh = blk + 128;
      const std::byte* sc = blk + 192;
      const float d = half_at(blk + 208);
      float dg[16];
      for (int g = 0; g < 16; ++g) dg[g] = d * static_cast<float>(static_cast<std::int8_t>(byte_at(sc, g)));
      for (int half = 0; half < 2; ++half) {  // element half*128 + s*32 + l
        for (int s = 0; s < 4; ++s) {
          for (int l = 0; l < 32; ++l) {
            const int r = s * 32 + l;
            const int low = (byte_at(ql, half * 64 + r % 64) >> (4 * (s / 2))) & 0x0f;
            const int high = (byte_at(qh, half * 32 + l) >> (2 * s)) & 0x03;
            y[half * 128 + r] = dg[(half * 128 + r) / 16] * static_cast<float>((low | (high << 4)) - 32);
          }
        }
      }
      return;
    }
    case BlockType::iq4_nl: {  // d; nibbles as Q4_0, mapped through the codebook
      const float d = half_at(blk);
      const std::byte* qs = blk + 2;
      for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(detail::kIq4Values[byte_at(qs, j) & 0x0f]);
        y[j + 16] = d * static_cast<float>(detail::kIq4Values[byte_at(qs, j) >> 4]);
      }
      return;
    }
    case BlockType::iq4_xs: {  // d, scales_h (u16: 2 bits per sub-block), scales_l[4] (nibbles), qs[128]
      const float d = half_at(blk);
      std::uint16_t sh;
      std::memcpy(&sh, blk + 2, 2);
      const std::byte* sl = blk + 4;
      const std::byte* qs = blk + 8;
      for (int j = 0; j < 8; ++j) {  // sub-block j: 16 bytes, low nibbles then high nibbles
        const int lo = (byte_at(sl, j / 2) >> (4 * (j % 2))) & 0x0f;
        const int hi = (sh >> (2 * j)) & 3;
        const float dl = d * static_cast<float>((lo | (hi << 4)) - 32);
        for (int l = 0; l < 16; ++l) {
          const int b = byte_at(qs, j * 16 + l);
          y[j * 32 + l] = dl * static_cast<float>(detail::kIq4Values[b & 0x0f]);
          y[j * 32 + 16 + l] = dl * static_cast<float>(detail::kIq4Values[b >> 4]);
        }
      }
      return;
    }
  }
}
#endif

/// Dequantise `n` values (a multiple of the block size) stored as consecutive blocks at `src` into `dst`.
inline void dequantize_row(BlockType t, const std::byte* src, float* dst, std::int64_t n) {
  const BlockFormat& f = block_format(t);
  for (std::int64_t b = 0; b < n / f.block; ++b) dequantize_block(t, src + b * f.bytes, dst + b * f.block);
}

/// ggml type ids of the unquantised types a runtime-typed matrix may also hold.
inline constexpr std::uint32_t kTypeF32 = 0, kTypeF16 = 1, kTypeBF16 = 30;

/// Any ggml type a runtime-typed matrix (ggml_byte storage) holds: F32, F16, BF16 or a block type above.
struct TypeInfo {
  std::uint32_t id;
  const char* name;
  std::int64_t block;  ///< elements per block (1 for the scalar types)
  std::int64_t bytes;  ///< bytes per block
};
/// The TypeInfo of ggml type `ggml_type`, or nullptr when a runtime-typed matrix cannot hold it.
inline const TypeInfo* type_info(std::uint32_t ggml_type) {
  static const TypeInfo scalars[] = {{kTypeF32, "F32", 1, 4}, {kTypeF16, "F16", 1, 2}, {kTypeBF16, "BF16", 1, 2}};
  for (const auto& s : scalars) {
    if (s.id == ggml_type) return &s;
  }
  static const TypeInfo blocks[] = {
      {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},  {7, "Q5_1", 32, 24},
      {8, "Q8_0", 32, 34},    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144},
      {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210}, {20, "IQ4_NL", 32, 18}, {23, "IQ4_XS", 256, 136},
  };
  for (const auto& b : blocks) {
    if (b.id == ggml_type) return &b;
  }
  return nullptr;
}
/// type_info, or an UnsupportedError naming the type.
inline const TypeInfo& checked_type_info(std::uint32_t ggml_type) {
  const TypeInfo* t = type_info(ggml_type);
  MAXTEXT_CHECK(t != nullptr, UnsupportedError, "[ggml] tensor type ", ggml_type, " is not one of F32, F16, BF16, Q4_0, "
                "Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS");
  return *t;
}
/// Bytes of one row of `cols` values of ggml type `ggml_type` (cols a multiple of its block).
inline std::int64_t row_bytes(std::uint32_t ggml_type, std::int64_t cols) {
  const TypeInfo& t = checked_type_info(ggml_type);
  return cols / t.block * t.bytes;
}

/// A decoded value times its matrix's factor beyond the blocks (Matrix::value_scale, AnyTensor::value_scale): the
/// product in double, rounded once to f32, as the f32 weight decoded and then scaled has it.
inline float scaled_value(float v, double value_scale) {
  return static_cast<float>(static_cast<double>(v) * value_scale);
}

/// scaled_value for `n` decoded values in place (nothing to do for a factor of 1).
inline void scale_values(float* v, std::int64_t n, double value_scale) {
  if (value_scale == 1.0) return;
  for (std::int64_t i = 0; i < n; ++i) v[i] = scaled_value(v[i], value_scale);
}

/// Dequantise (or widen) `n` values of ggml type `ggml_type` stored from `src` into `dst` (exact).
MAXTEXT_API void dequantize_any(std::uint32_t ggml_type, const std::byte* src, float* dst, std::int64_t n);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void dequantize_any(std::uint32_t ggml_type, const std::byte* src, float* dst, std::int64_t n) {
  switch (ggml_type) {
    case kTypeF32: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); return;
    case kTypeF16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = detail::half_at(src + 2 * i);
      return;
    case kTypeBF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
        std::memcpy(dst + i, &u, 4);
      }
      return;
    default: dequantize_row(static_cast<BlockType>(checked_type_info(ggml_type).id), src, dst, n);
  }
}
#endif

}  // namespace maxtext::quant
