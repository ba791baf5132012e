// bf16 / fp16 conversions: round to nearest even, specials, subnormals (closed-form expectations).
#include <cmath>
#include <cstring>
#include <limits>

#include <catch2/catch.hpp>

#include "maxtext/core/dtype.hpp"

using namespace maxtext;

static float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_CASE("bf16 rounds to nearest, ties to even", "[core][dtype]") {
  CHECK(bf16(1.0f).bits == 0x3f80);
  CHECK(bf16(from_bits(0x3f808000u)).bits == 0x3f80);  // exactly half an ulp above 1: tie -> even (down)
  CHECK(bf16(from_bits(0x3f818000u)).bits == 0x3f82);  // tie above an odd mantissa -> up
  CHECK(bf16(from_bits(0x3f808001u)).bits == 0x3f81);  // just above the tie -> up
  CHECK(bf16(-2.5f).bits == 0xc020);
  CHECK(static_cast<float>(bf16(3.140625f)) == 3.140625f);
  CHECK(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(static_cast<float>(bf16(std::numeric_limits<float>::infinity()))));
  CHECK(bf16(from_bits(0x7f7fffffu)).bits == 0x7f80);  // FLT_MAX rounds up to inf
}

TEST_CASE("fp16 conversions are exact where representable and round to nearest even", "[core][dtype]") {
  CHECK(fp16(1.0f).bits == 0x3c00);
  CHECK(fp16(65504.0f).bits == 0x7bff);
  CHECK(fp16(65519.0f).bits == 0x7bff);   // below the rounding boundary
  CHECK(fp16(65520.0f).bits == 0x7c00);   // rounds to inf
  CHECK(fp16(1.0f + 1.0f / 2048.0f).bits == 0x3c00);  // tie -> even
  CHECK(fp16(1.0f + 3.0f / 2048.0f).bits == 0x3c02);  // tie above odd -> up
  CHECK(fp16(std::ldexp(1.0f, -24)).bits == 0x0001);  // smallest subnormal
  CHECK(fp16(std::ldexp(1.0f, -25)).bits == 0x0000);  // half of it: tie -> even (0)
  CHECK(fp16(std::ldexp(3.0f, -25)).bits == 0x0002);  // 1.5 subnormal ulps -> 2 (even)
  CHECK(fp16(-0.0f).bits == 0x8000);
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips
    const float f = fp16::to_float(static_cast<std::uint16_t>(h));
    REQUIRE(fp16(f).bits == h);
  }
}

TEST_CASE("fp8 e4m3 decodes DeepSeek's weight format", "[core][dtype]") {
  CHECK(static_cast<float>(fp8_e4m3{0x38}) == 1.0f);
  CHECK(static_cast<float>(fp8_e4m3{0x7e}) == 448.0f);
  CHECK(static_cast<float>(fp8_e4m3{0xb8}) == -1.0f);
  CHECK(static_cast<float>(fp8_e4m3{0x01}) == std::ldexp(1.0f, -9));
  CHECK(std::isnan(static_cast<float>(fp8_e4m3{0x7f})));
}
