// testing/catch2.hpp: Catch2 (v2) matchers for users' own numerics tests, built on testing/compare.hpp:
//
//   #include <maxtext/testing/catch2.hpp>
//   CHECK_THAT(y, maxtext::testing::IsCloseTo("ref/out.npy", 1e-5, 1e-6));            // a .npy file
//   CHECK_THAT(y, maxtext::testing::IsCloseTo("dump.npz:decoder.layers_0", 1e-4));    // FILE:NAME (npz, safetensors, dir)
//   CHECK_THAT(y, maxtext::testing::IsCloseTo(expected_tensor, 1e-5, 1e-6));          // AnyTensor or Tensor<T, R>
//   CHECK_THAT(y, maxtext::testing::IsCloseToScaled("ref/out_f64.npy", 1e-5));        // max|d| <= tol*max(1, max|ref|)
//
// `y` may be an AnyTensor or any Tensor<T, R>. On failure the message names how many elements are outside the
// tolerance, the worst one (index, actual vs expected) and the max abs/rel errors, e.g.
//   f32 [2,12,48] is close to out.npy: 3/1152 outside (rtol 1e-05, atol 1e-06); worst [1,7,30]: 0.5195 vs 0.5117; ...
// The element criterion is numpy.isclose's: |actual - expected| <= atol + rtol * |expected|; shapes must be equal.
// This header needs Catch2 v2 (<catch2/catch.hpp>, Debian's catch2 package) on the include path.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <utility>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/tensor_files.hpp"
#include "maxtext/testing/compare.hpp"

namespace maxtext::testing {

namespace detail {
inline AnyTensor as_any(const AnyTensor& t) { return t; }
template <class T, int R>
AnyTensor as_any(const Tensor<T, R>& t) {
  return AnyTensor::from(t);
}
}  // namespace detail

/// Matcher behind IsCloseTo / IsCloseToScaled. Accepts AnyTensor and Tensor<T, R> arguments.
class IsCloseToMatcher : public Catch::MatcherBase<AnyTensor> {
 public:
  /// `scaled` > 0 selects the reference-suite criterion max|a - e| <= scaled * max(1, max|e|) instead of `tol`.
  IsCloseToMatcher(AnyTensor expected, std::string what, Tolerance tol, double scaled = 0)
      : expected_(std::move(expected)), what_(std::move(what)), tol_(tol), scaled_(scaled) {}

  bool match(const AnyTensor& actual) const override {
    report_ = scaled_ > 0 ? compare_scaled(actual, expected_, scaled_) : compare(actual, expected_, tol_);
    matched_ = true;
    return report_.ok();
  }
  template <class T, int R>
  bool match(const Tensor<T, R>& actual) const {
    return match(AnyTensor::from(actual));
  }
  /// The report of the last match (count outside, worst element, max errors).
  const CompareReport& report() const { return report_; }

  std::string describe() const override {
    const std::string d = "is close to " + what_;
    return matched_ ? report_.message(d) : d;
  }

 private:
  AnyTensor expected_;
  std::string what_;
  Tolerance tol_;
  double scaled_;
  mutable CompareReport report_;
  mutable bool matched_ = false;
};

/// Close to a tensor within |a - e| <= atol + rtol * |e| elementwise.
inline IsCloseToMatcher IsCloseTo(const AnyTensor& expected, double rtol = 1e-5, double atol = 1e-6) {
  return IsCloseToMatcher(expected, expected.source.empty() ? expected.describe() : expected.source, {rtol, atol});
}
template <class T, int R>
IsCloseToMatcher IsCloseTo(const Tensor<T, R>& expected, double rtol = 1e-5, double atol = 1e-6) {
  return IsCloseTo(AnyTensor::from(expected), rtol, atol);
}
/// Close to the tensor in `spec`: `file.npy` or `FILE:NAME` (an .npz, safetensors file or directory of .npy).
inline IsCloseToMatcher IsCloseTo(const std::string& spec, double rtol = 1e-5, double atol = 1e-6) {
  return IsCloseToMatcher(io::read_tensor(spec), spec, {rtol, atol});
}
inline IsCloseToMatcher IsCloseTo(const char* spec, double rtol = 1e-5, double atol = 1e-6) {
  return IsCloseTo(std::string(spec), rtol, atol);
}

/// The reference suite's criterion: max |a - e| <= tol * max(1, max |e|) over the whole tensor.
inline IsCloseToMatcher IsCloseToScaled(const AnyTensor& expected, double tol) {
  return IsCloseToMatcher(expected, expected.source.empty() ? expected.describe() : expected.source, {}, tol);
}
template <class T, int R>
IsCloseToMatcher IsCloseToScaled(const Tensor<T, R>& expected, double tol) {
  return IsCloseToScaled(AnyTensor::from(expected), tol);
}
inline IsCloseToMatcher IsCloseToScaled(const std::string& spec, double tol) {
  return IsCloseToMatcher(io::read_tensor(spec), spec, {}, tol);
}
inline IsCloseToMatcher IsCloseToScaled(const char* spec, double tol) { return IsCloseToScaled(std::string(spec), tol); }

}  // namespace maxtext::testing

namespace Catch {
/// Tensors print as their dtype and shape in Catch2 messages.
template <>
struct StringMaker<maxtext::AnyTensor> {
  static std::string convert(const maxtext::AnyTensor& t) { return t.describe(); }
};
template <class T, int R>
struct StringMaker<maxtext::Tensor<T, R>> {
  static std::string convert(const maxtext::Tensor<T, R>& t) { return maxtext::AnyTensor::from(t).describe(); }
};
}  // namespace Catch
