// backend/cpu/elementwise.hpp: vectorised row kernels for the CPU backend's element-wise ops (spec
// norms-dense-mlp.md, MlpBlock steps 2-3). Same rounding steps as the scalar definitions in common/math.hpp.
#pragma once

#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/cpu/vec.hpp"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cpu::elementwise {

/// f0[i] = round(round(act0(f0[i])) * round(act1(f1[i]))) (or round(act0(f0[i])) with f1 null), in place on f32 rows
/// holding values of A. SiLU (x * sigmoid(x), the exp vectorised) with a linear second operand is the Llama MLP.
template <class A>
inline void glu_row(float* f0, Activation a0, const float* f1, Activation a1, std::int64_t n, bool round_each = true) {
  std::int64_t i = 0;
  if (a0 == Activation::silu && (f1 == nullptr || a1 == Activation::linear)) {
    using vec::fbatch;
    constexpr auto w = static_cast<std::int64_t>(vec::W);
    const fbatch one(1.0f);
    for (; i + w <= n; i += w) {
      const fbatch x = fbatch::load_unaligned(f0 + i);
      fbatch v = x * (one / (one + xsimd::exp(-x)));
      if (round_each) v = vec::round<A>(v);
      if (f1 != nullptr) {  // f1 already holds values of A
        v = v * fbatch::load_unaligned(f1 + i);
        if (round_each) v = vec::round<A>(v);
      }
      v.store_unaligned(f0 + i);
    }
  }
  for (; i < n; ++i) {
    float v = math::activate(a0, f0[i]);
    if (round_each) v = round_to<A>(v);
    if (f1 != nullptr) {
      float w = math::activate(a1, f1[i]);
      if (round_each) w = round_to<A>(w);
      v = round_each ? round_to<A>(v * w) : v * w;
    }
    f0[i] = v;
  }
}

}  // namespace maxtext::cpu::elementwise
