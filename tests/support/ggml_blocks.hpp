// Random GGUF block rows for the tests of the kernels that read them as they lie (qblock, the runtime-typed GEMM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/ggml_quants.hpp"

namespace maxtext::test {

/// Every block-quantised ggml type the kernels decode.
inline constexpr quant::BlockType kGgmlBlockTypes[] = {
    quant::BlockType::q4_0, quant::BlockType::q4_1, quant::BlockType::q5_0,  quant::BlockType::q5_1,
    quant::BlockType::q8_0, quant::BlockType::q2_k, quant::BlockType::q3_k,  quant::BlockType::q4_k,
    quant::BlockType::q5_k, quant::BlockType::q6_k, quant::BlockType::iq4_nl, quant::BlockType::iq4_xs};

/// `n` blocks of type t: random bytes, then each block's fp16 scale fields drawn uniformly from
/// [-scale_max, scale_max] (finite, so the decoded values are). With `subnormals`, every 7th block (k % 7 == 3) gets a
/// subnormal first scale instead, of either sign.
inline std::vector<std::byte> random_blocks(quant::BlockType t, std::int64_t n, std::uint32_t seed, float scale_max,
                                            bool subnormals) {
  const quant::BlockFormat& f = quant::block_format(t);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(-scale_max, scale_max);
  std::vector<std::byte> b(static_cast<std::size_t>(n * f.bytes));
  for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int i = 0; i < 2; ++i) {
      const int off = f.fp16_scales[i];
      if (off < 0) continue;
      std::uint16_t h = fp16(scale(rng)).bits;
      if (subnormals && i == 0 && k % 7 == 3) h = (k % 2) ? 0x8003 : 0x0001;
      std::memcpy(b.data() + k * f.bytes + off, &h, 2);
    }
  }
  return b;
}

/// N rows of K random values in [-1, 1] stored as ggml float type `type` (F32, F16 or BF16).
inline std::vector<std::byte> random_float_rows(std::uint32_t type, std::int64_t N, std::int64_t K, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::size_t es = type == quant::kTypeF32 ? 4 : 2;
  std::vector<std::byte> b(static_cast<std::size_t>(N * K) * es);
  for (std::size_t i = 0; i < static_cast<std::size_t>(N * K); ++i) {
    const float v = u(rng);
    if (type == quant::kTypeF32) {
      std::memcpy(b.data() + 4 * i, &v, 4);
    } else {
      const std::uint16_t h = type == quant::kTypeF16 ? fp16(v).bits : bf16(v).bits;
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

}  // namespace maxtext::test
