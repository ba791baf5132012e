// tests/support/op_checks.hpp: comparing one backend operation's output with the reference backend's, shared by the
// CPU backend's tests (tests/backend/test_backend_ops.cpp) and the CUDA backend's (tests/cuda/test_cuda_ops.cu), so
// that both judge by the same rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include <catch2/catch.hpp>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::test {

/// One unit in the last place of T at |x| (f32: 2^-23 relative, bf16: 2^-7, f16: 2^-10).
template <class T>
double ulp_rel() {
  if constexpr (std::is_same_v<T, bf16>) {
    return 1.0 / 128.0;
  } else if constexpr (std::is_same_v<T, fp16>) {
    return 1.0 / 1024.0;
  } else {
    return 1.0 / 8388608.0;
  }
}

/// |a - b| <= rel * max(|b|, scale) elementwise, `scale` being a typical magnitude of the output (so values
/// that cancel to near zero are judged against the size of the terms that cancelled).
template <class T, int R>
void expect_near(const Tensor<T, R>& a, const Tensor<T, R>& b, double rel, double scale, const std::string& what) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0.0;
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const double x = to_float(a.data()[i]), y = to_float(b.data()[i]);
    const double err = std::fabs(x - y) / std::max(std::fabs(y), scale);
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  INFO(what << ": worst relative error " << worst << " at flat index " << at << " (" << to_float(a.data()[at])
            << " vs " << to_float(b.data()[at]) << "), allowed " << rel);
  CHECK(worst <= rel);
}

}  // namespace maxtext::test
