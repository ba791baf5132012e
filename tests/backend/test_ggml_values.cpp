// The element decoder the CUDA kernels read GGUF rows through (backend/common/ggml_values.hpp), run on the host:
// every element of random rows of every runtime-typed matrix type (F32, F16, BF16 and the twelve block types) must
// equal the host block decoder's value (quant::dequantize_any, itself bit-exact against gguf-py's NumPy reference in
// test_ggml_quants) bit for bit, at odd addresses too; value_scale as quant::scaled_value; other types give NaN.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/common/ggml_values.hpp"
#include "maxtext/core/ggml_quants.hpp"
#include "support/ggml_blocks.hpp"

using namespace maxtext;

namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// Checks value() on every element of `rows` rows of `cols` values of type `type` stored at `bytes`, placed one byte
/// past an aligned address; returns the number of elements compared.
std::int64_t check_rows(std::uint32_t type, const std::vector<std::byte>& bytes, std::int64_t rows, std::int64_t cols) {
  const std::int64_t rb = quant::row_bytes(type, cols);
  REQUIRE(static_cast<std::int64_t>(bytes.size()) == rows * rb);
  std::vector<std::uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  std::vector<float> ref(static_cast<std::size_t>(cols));
  std::int64_t mismatches = 0, compared = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    quant::dequantize_any(type, bytes.data() + r * rb, ref.data(), cols);
    for (std::int64_t k = 0; k < cols; ++k) {
      const float v = ggml_values::value(type, shifted.data() + 1 + r * rb, k);
      if (bits(v) != bits(ref[static_cast<std::size_t>(k)])) {
        if (++mismatches <= 5) {
          UNSCOPED_INFO(quant::checked_type_info(type).name << " row " << r << " element " << k << ": " << v
                                                           << " vs the host decoder's " << ref[static_cast<std::size_t>(k)]);
        }
      }
      ++compared;
    }
  }
  CHECK(mismatches == 0);
  return compared;
}

}  // namespace

TEST_CASE("ggml_values: every block type's elements equal the host decoder's, bit for bit", "[ggml][kernel_math]") {
  for (const quant::BlockType t : test::kGgmlBlockTypes) {
    const quant::BlockFormat& f = quant::block_format(t);
    INFO(f.name);
    const std::int64_t cols = 2 * 256, rows = 24;  // 16 or 2 blocks a row
    const std::int64_t n_blocks = rows * cols / f.block;
    // Scales in [-2, 2] with subnormal ones, and in [-1, 1]; the other bytes random.
    CHECK(check_rows(static_cast<std::uint32_t>(t), test::random_blocks(t, n_blocks, 7u + static_cast<std::uint32_t>(t), 2.0f, true),
                     rows, cols) == rows * cols);
    check_rows(static_cast<std::uint32_t>(t), test::random_blocks(t, n_blocks, 91u + static_cast<std::uint32_t>(t), 1.0f, false),
               rows, cols);
  }
}

TEST_CASE("ggml_values: F32, F16 and BF16 rows, any bit pattern", "[ggml][kernel_math]") {
  std::mt19937 rng(5);
  for (const std::uint32_t type : {quant::kTypeF32, quant::kTypeF16, quant::kTypeBF16}) {
    INFO(quant::checked_type_info(type).name);
    const std::int64_t rows = 8, cols = 96;
    std::vector<std::byte> b(static_cast<std::size_t>(quant::row_bytes(type, cols) * rows));
    for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);  // NaNs, infinities, subnormals included
    // Compare bit patterns: the host decoder widens F16 NaNs with their payload, as fp16::to_float does.
    check_rows(type, b, rows, cols);
  }
}

TEST_CASE("ggml_values: value_scale and unknown types", "[ggml][kernel_math]") {
  for (const double s : {1.0, 0.125, 0.08838834764831845, -3.0}) {
    for (const float v : {0.0f, -1.5f, 3.0e-5f, 1234.5678f, 1.0e-40f}) {
      CHECK(bits(ggml_values::scaled(v, s)) == bits(quant::scaled_value(v, s)));
    }
  }
  const std::uint8_t row[256] = {};
  for (const std::uint32_t type : {4u, 5u, 9u, 15u, 16u, 39u, 1000u}) {  // removed, Q8_1, Q8_K, IQ2_XXS, MXFP4, ...
    INFO(type);
    CHECK(quant::type_info(type) == nullptr);
    CHECK(std::isnan(ggml_values::value(type, row, 0)));
  }
}
