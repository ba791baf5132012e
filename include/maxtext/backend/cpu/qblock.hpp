// backend/cpu/qblock.hpp: kernels that read ggml block-quantised weight rows (core/ggml_quants.hpp) directly, without
// a dequantised copy: dequantisation, f32 dot products against 1..4 activation rows, and dot products against
// activations quantised to int8 per 32-value group.
//
// Layouts (one block; elements e, all multi-byte fields little-endian):
//   Q4_0  [d f16][16 B: e and e+16 in the low / high nibble of byte e]            w = d*(q-8)
//   Q8_0  [d f16][32 x int8]                                                        w = q*d
//   Q4_K  [d][dmin][12 B: 8 six-bit scales, 8 six-bit mins][128 B nibbles]          w = d*sc_j*q - dmin*m_j
//         sub-block j (32 wide) is the low (j even) or high (j odd) nibble of bytes 32*(j/2) .. +31
//   Q5_K  as Q4_K with [32 B qh] before the nibbles: bit j of qh[l] is bit 4 of element l of sub-block j
//   Q6_K  [128 B ql][64 B qh][16 x int8 scale][d]                                   w = d*sc_{e/16}*(q-32)
//         element 128h + 32s + l: low 4 bits from ql[64h + (32s+l) % 64] (low nibble for s<2, high for s>=2),
//         high 2 bits from bits 2s..2s+1 of qh[32h + l]
//   IQ4_XS [d][u16: 2 high bits per sub-block scale][4 B: low scale nibbles][128 B] w = d*(ls_j-32)*kv[nibble]
//         sub-block j is 16 bytes: low nibbles are its elements 0..15, high nibbles 16..31
//
// dequantize and dot_exact decode each block into 16-float registers with the same rounding as the scalar decoder:
// the products of fp16 scale and small integer sub-scale are exact in f32 (at most 11 + 8 significant bits), and so
// is the product with the quant wherever an offset is subtracted afterwards (Q4_K / Q5_K: <= 11 + 6 + 5 bits), so a
// fused multiply-subtract rounds once, exactly like the scalar multiply then subtract; every other value is one
// rounded product, taken with the same operands. The 4-bit types with a single scale per 16 values (Q4_0, IQ4_NL,
// IQ4_XS) compute those products once per (sub-)block as a 16-entry table and pick from it (see "Table decoding").
//
// dot_q8 uses activations x ~= d_x[g] * q_x (g = 32-value group, q_x int8). Inside a group the weight block is an
// integer quant times a float scale per 16 or 32 values (plus a float offset for the "min" types), so
//   sum_{e in g} w_e * x_e = d_x[g] * sum_{halves h} ( a_h * sum_{e in h} q_e q_x,e  +  b_h * sum_{e in h} q_x,e ).
// The integer sums are exact (int32). AVX-512 VNNI's vpdpbusd multiplies unsigned by signed bytes, so signed weight
// quants are first made unsigned by an offset (q + 8, q + 32, q + 128) and the offset times the activation sum is
// subtracted again, in integers (for Q4_0 / IQ4_NL via the activation sums s that quantize_x stores). Each 32-bit
// lane then holds the exact sum of products; every 128-bit lane covers 16 (Q4_0 / IQ4_NL: 32) values that share one
// scale, so the float step multiplies a lane by its (scale * d_x) and accumulates.
//
// x86 machines with AVX2, FMA and F16C but not AVX-512 (F+BW+VL+DQ) get AVX2 versions for these types and Q4_1, Q5_0,
// Q5_1, Q2_K, Q3_K (8-float chunks; vpmaddubsw): "AVX2 paths", which AVX-512 machines run for those five. Else scalar.
//
// Compiling the kernels once. The vector kernels are large, and a header-only library compiles them again in every
// translation unit that calls them (about 10 s with g++ -O3, about 60 s under clang's AddressSanitizer, per unit).
// A program may compile them once instead: define MAXTEXT_SEPARATE_KERNELS in every translation unit, and also
// MAXTEXT_KERNELS_IMPLEMENTATION in exactly one, which then holds their definitions (qblock_impl.hpp); the others
// see the declarations below and call them. The instruction set is that unit's (its -march). This project's own
// programs build that way (CMake option MAXTEXT_SEPARATE_KERNELS, library maxtext_kernels); without the macro the
// header is self-contained as every other. The linkage macro, MAXTEXT_KERNEL_API, is core/macros.hpp's; the entry
// points of the matrix products (gemm.hpp), attention (attention.hpp) and the Eigen product (backend.hpp) for the
// types the layers use are compiled once the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/core/macros.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace maxtext::cpu::qblock {

using quant::BlockType;

/// One activation row quantised per 32-value group (llama.cpp's Q8_0 activations, with an f32 scale).
struct QuantizedX {                  // views into a caller-owned buffer, sized by quantized_x_bytes
  const std::int8_t* q = nullptr;    // K int8 values
  const float* d = nullptr;          // K/32 scales: x ~= d * q
  const std::int16_t* s = nullptr;   // K/32 sums of q within each group
  std::int64_t K = 0;
};

namespace detail {

inline constexpr std::size_t kAlign = 64;
inline constexpr std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

inline float half(const std::byte* p) {
#if defined(__F16C__)
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // exact, as the scalar conversion (both widen an fp16 without rounding)
#else
  return quant::detail::half_at(p);
#endif
}
inline std::uint8_t u8(const std::byte* p, std::int64_t i) { return static_cast<std::uint8_t>(p[i]); }

// ---------------------------------------------------------------------------------------------------------------
// Portable paths (every type).

/// Sum of `n` products in 64 independent lanes (short addition chains), then a pairwise reduction.
struct LaneSum {
  static constexpr int W = 64;
  float lane[W] = {};
  float total() const {
    float t[W];
    for (int i = 0; i < W; ++i) t[i] = lane[i];
    for (int w = W / 2; w >= 1; w /= 2) {
      for (int i = 0; i < w; ++i) t[i] += t[i + w];
    }
    return t[0];
  }
};

/// A block as integers: w_e = a[e/16] * q[e] + b[e/16]. Evaluated in f32 this is the scalar decoder's value bit for
/// bit: a is its (exact) scale product, and where b is a real offset the product a*q is exact, so only the add
/// rounds (with or without contraction to a fused multiply-add).
struct IntBlock {
  int q[256];
  float a[16];
  float b[16];
};

inline void decode_int(BlockType t, const std::byte* blk, IntBlock& ib) {
  for (int h = 0; h < 16; ++h) ib.b[h] = -0.0f;  // x + (-0) == x for every x, signed zeros included
  switch (t) {
    case BlockType::q4_0:
    case BlockType::q4_1:
    case BlockType::iq4_nl: {
      const bool min = t == BlockType::q4_1;
      const float d = half(blk);
      const std::byte* qs = blk + (min ? 4 : 2);
      for (int j = 0; j < 16; ++j) {
        const int lo = u8(qs, j) & 15, hi = u8(qs, j) >> 4;
        if (t == BlockType::iq4_nl) {
          ib.q[j] = quant::detail::kIq4Values[lo];
          ib.q[j + 16] = quant::detail::kIq4Values[hi];
        } else {
          ib.q[j] = min ? lo : lo - 8;
          ib.q[j + 16] = min ? hi : hi - 8;
        }
      }
      ib.a[0] = ib.a[1] = d;
      if (min) ib.b[0] = ib.b[1] = half(blk + 2);
      return;
    }
    case BlockType::q5_0:
    case BlockType::q5_1: {
      const bool min = t == BlockType::q5_1;
      const std::byte* p = blk + (min ? 4 : 2);
      std::uint32_t qh;
      std::memcpy(&qh, p, 4);
      for (int j = 0; j < 16; ++j) {
        const int lo = (u8(p + 4, j) & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (u8(p + 4, j) >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        ib.q[j] = min ? lo : lo - 16;
        ib.q[j + 16] = min ? hi : hi - 16;
      }
      ib.a[0] = ib.a[1] = half(blk);
      if (min) ib.b[0] = ib.b[1] = half(blk + 2);
      return;
    }
    case BlockType::q8_0:
      for (int j = 0; j < 32; ++j) ib.q[j] = static_cast<std::int8_t>(u8(blk + 2, j));
      ib.a[0] = ib.a[1] = half(blk);
      return;
    case BlockType::q2_k: {
      const float d = half(blk + 80), dmin = half(blk + 82);
      for (int g = 0; g < 16; ++g) {
        ib.a[g] = d * static_cast<float>(u8(blk, g) & 15);
        ib.b[g] = -(dmin * static_cast<float>(u8(blk, g) >> 4));
      }
      for (int h = 0; h < 2; ++h) {  // element 128h + 32s + l: bits 2s of byte 32h + l
        for (int s = 0; s < 4; ++s) {
          for (int l = 0; l < 32; ++l) ib.q[128 * h + 32 * s + l] = (u8(blk + 16, 32 * h + l) >> (2 * s)) & 3;
        }
      }
      return;
    }
    case BlockType::q3_k: {
      const std::byte* sc = blk + 96;
      const float d = half(blk + 108);
      for (int g = 0; g < 16; ++g) {
        const int lo = (u8(sc, g % 8) >> (4 * (g / 8))) & 15;
        const int hi = (u8(sc, 8 + g % 4) >> (2 * (g / 4))) & 3;
        ib.a[g] = d * static_cast<float>((lo | (hi << 4)) - 32);
      }
      for (int h = 0; h < 2; ++h) {  // as Q2_K, minus 4 where bit 4h + s of hmask[l] is clear
        for (int s = 0; s < 4; ++s) {
          for (int l = 0; l < 32; ++l) {
            const int low = (u8(blk + 32, 32 * h + l) >> (2 * s)) & 3;
            const int high = (u8(blk, l) >> (4 * h + s)) & 1;
            ib.q[128 * h + 32 * s + l] = low - 4 + 4 * high;
          }
        }
      }
      return;
    }
    case BlockType::q4_k:
    case BlockType::q5_k: {
      const bool five = t == BlockType::q5_k;
      const float d = half(blk), dmin = half(blk + 2);
      const std::byte* qs = blk + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        int s = 0, mn = 0;
        quant::detail::k_scale_min(blk + 4, j, s, mn);
        ib.a[2 * j] = ib.a[2 * j + 1] = d * static_cast<float>(s);
        ib.b[2 * j] = ib.b[2 * j + 1] = -(dmin * static_cast<float>(mn));
        for (int l = 0; l < 32; ++l) {
          int q = (u8(qs, (j / 2) * 32 + l) >> (4 * (j % 2))) & 15;
          if (five) q |= ((u8(blk + 16, l) >> j) & 1) << 4;
          ib.q[j * 32 + l] = q;
        }
      }
      return;
    }
    case BlockType::q6_k: {
      const float d = half(blk + 208);
      for (int g = 0; g < 16; ++g) ib.a[g] = d * static_cast<float>(static_cast<std::int8_t>(u8(blk + 192, g)));
      for (int h = 0; h < 2; ++h) {
        for (int s = 0; s < 4; ++s) {
          for (int l = 0; l < 32; ++l) {
            const int low = (u8(blk, h * 64 + (s % 2) * 32 + l) >> (4 * (s / 2))) & 15;
            const int high = (u8(blk + 128, h * 32 + l) >> (2 * s)) & 3;
            ib.q[128 * h + 32 * s + l] = (low | (high << 4)) - 32;
          }
        }
      }
      return;
    }
    case BlockType::iq4_xs: {
      const float d = half(blk);
      std::uint16_t sh;
      std::memcpy(&sh, blk + 2, 2);
      for (int j = 0; j < 8; ++j) {
        const int ls = ((u8(blk + 4, j / 2) >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
        ib.a[2 * j] = ib.a[2 * j + 1] = d * static_cast<float>(ls - 32);
        for (int l = 0; l < 16; ++l) {
          const int v = u8(blk + 8, j * 16 + l);
          ib.q[j * 32 + l] = quant::detail::kIq4Values[v & 15];
          ib.q[j * 32 + 16 + l] = quant::detail::kIq4Values[v >> 4];
        }
      }
      return;
    }
  }
}

/// Decodes one block into w[0 .. block): the scalar decoder's values (its own code for the 32-value types, where it
/// is the quicker; the loops over decode_int for the 256-value types, where they are several times quicker).
inline void decode_block(BlockType t, const std::byte* blk, float* w) {
  const std::int64_t n = quant::block_format(t).block;
  if (n == 32) return quant::dequantize_block(t, blk, w);
  IntBlock ib;
  decode_int(t, blk, ib);
  for (std::int64_t e = 0; e < n; ++e) w[e] = ib.a[e / 16] * static_cast<float>(ib.q[e]) + ib.b[e / 16];
}

}  // namespace detail

/// Exact dequantisation of `n` values (a multiple of the block) from the block row at `src`: the same bits as
/// quant::dequantize_row.
MAXTEXT_KERNEL_API void dequantize(BlockType t, const std::byte* src, float* dst, std::int64_t n);

/// The most x rows per dot_exact call: six rows' four accumulators and a block's decoding fit AVX-512's registers.
inline constexpr int kExactDotRows = 6;

/// out[m] = sum_k deq(row)[k] * x[m*ldx + k] for m < M (1..kExactDotRows), in f32; each block is decoded once for all
/// M rows (AVX2: for each pair of rows), and every row's sum is what it is with M = 1, bit for bit.
MAXTEXT_KERNEL_API void dot_exact(BlockType t, const std::byte* row, std::int64_t K, const float* x, std::int64_t ldx,
                                  int M, float* out);

// ---- float rows (F32, F16, BF16) of runtime-typed matrices ----
// A GGUF file's unquantised matrices, read where they lie in the mapping. Widening to f32 is exact; the dot products
// keep one f32 sum per (weight row, activation row) in the lanes of one vector register, added at the end. Vector
// paths: AVX-512, and AVX2 with FMA and F16C; elsewhere (and for the tail of a row) scalar loops.

/// Whether ggml type `type` is one of the float row types (F32, F16, BF16) rather than a block type.
inline bool is_float_type(std::uint32_t type) {
  return type == quant::kTypeF32 || type == quant::kTypeF16 || type == quant::kTypeBF16;
}

/// Exact widening of `n` values (any count) of a float row type at `src` to f32.
MAXTEXT_KERNEL_API void widen(std::uint32_t type, const std::byte* src, float* dst, std::int64_t n);

/// The most x rows per dot_float_rows / dot_float call (a verify pass of speculative decoding with up to 7 drafts).
inline constexpr int kFloatDotRows = 8;

/// out[m * ldo + j] = sum_k w_j[k] * x[m*ldx + k] for the `nrows` rows w_j of a float row type at `rows` (row_bytes
/// apart; any K) and m < M (1..kFloatDotRows), in f32. Every output's sum is what it is with M = 1 and nrows = 1, bit
/// for bit: one sum of kFrW lanes (16 with AVX-512, 8 with AVX2) per output over the vector body, the tail over 64
/// lanes. Each weight vector is widened once for the M rows and each x vector loaded once for a tile of weight rows.
MAXTEXT_KERNEL_API void dot_float_rows(std::uint32_t type, const std::byte* rows, std::size_t row_bytes,
                                       std::int64_t nrows, std::int64_t K, const float* x, std::int64_t ldx, int M,
                                       float* out, std::int64_t ldo);

/// dot_float_rows for one row: out[m] for m < M.
MAXTEXT_KERNEL_API void dot_float(std::uint32_t type, const std::byte* row, std::int64_t K, const float* x,
                                  std::int64_t ldx, int M, float* out);

/// Exact f32 values of `n` values of any runtime-typed row (block types: a multiple of the block) at `src`.
MAXTEXT_KERNEL_API void dequantize_any(std::uint32_t type, const std::byte* src, float* dst, std::int64_t n);

/// sum_k deq(row)[k] * d_x[k/32] * q_x[k]: integer sums of weight and activation quants per 16 or 32 values, then
/// one float step per group.
MAXTEXT_KERNEL_API float dot_q8(BlockType t, const std::byte* row, const QuantizedX& x);

/// out[m * ldo + n] = dot_q8(t, rows + n * row_bytes, x[m]) for m < M, n < N, bit for bit: the same sums, taken
/// for several rows of x and of the weight at once where a kernel shares the decoded blocks and the loaded
/// activations between them (prefill; on AVX-512 also decode and verify passes: up to 8 x rows per weight block
/// for Q8_0, Q4_K, Q5_K, IQ4_XS and Q6_K), and otherwise one dot_q8 after the other.
MAXTEXT_KERNEL_API void dot_q8_rows(BlockType t, const std::byte* rows, std::size_t row_bytes, std::int64_t N,
                                    const QuantizedX* x, std::int64_t M, float* out, std::int64_t ldo);

/// Whether dot_q8_rows is this machine's quicker way to multiply M activation rows (more than a decode step's) with
/// blocks of type t; where it is not, gemm::matmul keeps its own prefill panels.
MAXTEXT_KERNEL_API bool dot_q8_rows_preferred(BlockType t, std::int64_t M);

/// Bytes of one quantised activation row of K values (K a multiple of 32): q, d and s sections, each 64-byte
/// aligned, plus slack to align the start of an arbitrary buffer.
inline std::size_t quantized_x_bytes(std::int64_t K) {
  const auto k = static_cast<std::size_t>(K);
  return detail::kAlign + detail::round_up(k) + detail::round_up(k / 32 * sizeof(float)) +
         detail::round_up(k / 32 * sizeof(std::int16_t));
}

/// The factor q = x * inverse_scale(d) of a group with scale d = max|x| / 127: 1/d, or 0 where d = 0 or 1/d overflows
/// (max|x| below ~3.7e-37, which would otherwise send every q to infinity). Shared by quantize_x and the integer
/// prefill panels' gemm::detail::quantize_row.
inline float inverse_scale(float d) {
  const float inv = 1.0f / d;
  return d != 0.0f && inv <= std::numeric_limits<float>::max() ? inv : 0.0f;
}

/// Quantise x (K values, a multiple of 32) into `buf` (quantized_x_bytes(K) bytes): per group of 32,
/// d = max|x| / 127 and q = x * (1/d) rounded to nearest, ties to even (as llama.cpp's vectorised Q8_0 quantiser
/// and the integer prefill panels' gemm::detail::quantize_row round); q = 0 where d = 0 or where 1/d overflows (max|x|
/// below ~3.7e-37, which would otherwise send every q to infinity); s = sum of the group's q. NaN values are left
/// out of max|x|. The vector paths give this scalar definition's bytes, bit for bit, for finite x.
MAXTEXT_KERNEL_API QuantizedX quantize_x(const float* x, std::int64_t K, std::byte* buf);

}  // namespace maxtext::cpu::qblock

#if !defined(MAXTEXT_SEPARATE_KERNELS) || defined(MAXTEXT_KERNELS_IMPLEMENTATION)
#include "maxtext/backend/cpu/qblock_impl.hpp"
#endif
