// tests/support/tolerance.hpp: tolerances per storage/compute type, as |a - e| <= atol + rtol * |e|.
//
// | case              | rtol  | atol | why                                                                  |
// |-------------------|-------|------|----------------------------------------------------------------------|
// | f32 layer         | 1e-5  | 1e-6 | ~100 f32 ulp: reductions summed in another order than the reference   |
// | f32 logits        | 1e-4  | 1e-5 | errors grow with depth; the whole-model bound                 |
// | bf16 layer        | 2^-7  | 1e-3 | one bf16 rounding of the output (eps(bf16) = 2^-7) relative to f32    |
// | f16 weights layer | 2^-10 | 1e-4 | one f16 rounding                                                     |
#pragma once

#include "maxtext/testing/compare.hpp"

namespace maxtext::test::tol {
inline constexpr testing::Tolerance f32_layer{1e-5, 1e-6};
inline constexpr testing::Tolerance f32_logits{1e-4, 1e-5};
inline constexpr testing::Tolerance bf16_layer{1.0 / 128.0, 1e-3};
inline constexpr testing::Tolerance f16_layer{1.0 / 1024.0, 1e-4};
}  // namespace maxtext::test::tol
