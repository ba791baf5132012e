// tests/support/tolerance.hpp: tolerances per storage/compute type, as |a - e| <= atol + rtol * |e|.
//
// | case              | rtol  | atol | why                                                                  |
// |-------------------|-------|------|----------------------------------------------------------------------|
// | f32 layer         | 1e-5  | 1e-6 | ~100 f32 ulp: reductions summed in another order than the reference   |
// | f32 layer, CUDA   | 1e-5  | 2e-6 | cuBLASLt reduces in its own tiled / split-K order; an output that      |
// |                   |       |      | cancels to ~0.01 from terms of order 1 keeps ~10 ulp of those terms    |
// |                   |       |      | (measured on an H100: 1.6e-6 on 1 of 576 Gemma 3 global-layer outputs) |
// | f32 logits        | 1e-4  | 1e-5 | errors grow with depth; the whole-model bound                 |
// | bf16 layer        | 2^-7  | 1e-3 | one bf16 rounding of the output (eps(bf16) = 2^-7) relative to f32    |
// | f16 weights layer | 2^-10 | 1e-4 | one f16 rounding                                                     |
#pragma once

#include "maxtext/testing/compare.hpp"

namespace maxtext::test::tol {
#if defined(MAXTEXT_TEST_BACKEND_CUDA)
inline constexpr testing::Tolerance f32_layer{1e-5, 2e-6};
#else
inline constexpr testing::Tolerance f32_layer{1e-5, 1e-6};
#endif
inline constexpr testing::Tolerance f32_logits{1e-4, 1e-5};
inline constexpr testing::Tolerance bf16_layer{1.0 / 128.0, 1e-3};
inline constexpr testing::Tolerance f16_layer{1.0 / 1024.0, 1e-4};
}  // namespace maxtext::test::tol
