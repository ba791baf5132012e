// testing/compare.hpp: element-wise comparison of a tensor against a reference, with a report that names the worst
// element. Criterion per element: |actual - expected| <= atol + rtol * |expected| (numpy.isclose). No test framework
// needed; testing/catch2.hpp wraps it for Catch2.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"

namespace maxtext::testing {

struct Tolerance {
  double rtol = 1e-5;
  double atol = 1e-6;
};

struct CompareReport {
  std::vector<std::int64_t> shape_actual, shape_expected;
  std::int64_t count = 0;      ///< elements compared
  std::int64_t outside = 0;    ///< elements outside tolerance (NaN/inf mismatches included)
  std::int64_t worst = -1;     ///< flat index of the element with the largest excess over its tolerance
  double worst_actual = 0, worst_expected = 0;
  double max_abs = 0;          ///< max |a - e|
  double max_rel = 0;          ///< max |a - e| / |e| over elements with e != 0
  Tolerance tol;

  bool shape_ok() const { return shape_actual == shape_expected; }
  bool ok() const { return shape_ok() && outside == 0; }
  /// Multi-index of a flat index in the expected shape.
  std::vector<std::int64_t> unravel(std::int64_t flat) const {
    std::vector<std::int64_t> idx(shape_expected.size());
    for (int d = static_cast<int>(shape_expected.size()) - 1; d >= 0; --d) {
      const auto u = static_cast<std::size_t>(d);
      idx[u] = flat % shape_expected[u];
      flat /= shape_expected[u];
    }
    return idx;
  }
  /// e.g. "attn.out: 3/4096 outside (rtol 1e-05, atol 1e-06); worst [2,17]: 0.5195 vs 0.5117; max abs 0.0078"
  std::string message(const std::string& name) const {
    std::ostringstream os;
    os.precision(7);
    os << name << ": ";
    if (!shape_ok()) {
      os << "shape mismatch: actual " << str(shape_actual) << ", expected " << str(shape_expected);
      return os.str();
    }
    os << outside << "/" << count << " outside (rtol " << tol.rtol << ", atol " << tol.atol << ")";
    if (worst >= 0) os << "; worst " << str(unravel(worst)) << ": " << worst_actual << " vs " << worst_expected;
    os << "; max abs " << max_abs << ", max rel " << max_rel;
    return os.str();
  }
};

/// Compare any two float/int tensors of the same shape (any dtypes, any strides).
inline CompareReport compare(const AnyTensor& actual, const AnyTensor& expected, Tolerance tol) {
  CompareReport r;
  r.tol = tol;
  r.shape_actual = actual.shape;
  r.shape_expected = expected.shape;
  if (!r.shape_ok()) {
    r.outside = std::max(actual.numel(), expected.numel());
    return r;
  }
  r.count = expected.numel();
  double worst_excess = -1;
  for (std::int64_t i = 0; i < r.count; ++i) {
    const double a = actual.element(i), e = expected.element(i);
    const double diff = std::fabs(a - e);
    const double allowed = tol.atol + tol.rtol * std::fabs(e);
    bool bad;
    double excess;
    if (std::isnan(a) || std::isnan(e) || std::isinf(a) || std::isinf(e)) {
      bad = !(a == e || (std::isnan(a) && std::isnan(e)));
      excess = bad ? INFINITY : 0;
    } else {
      bad = diff > allowed;
      excess = diff - allowed;
      r.max_abs = std::max(r.max_abs, diff);
      if (e != 0) r.max_rel = std::max(r.max_rel, diff / std::fabs(e));
    }
    if (bad) ++r.outside;
    if (excess > worst_excess) {
      worst_excess = excess;
      r.worst = i;
      r.worst_actual = a;
      r.worst_expected = e;
    }
  }
  return r;
}

/// The reference suite's criterion: max |a - e| <= tol * max(1, max |e|).
inline CompareReport compare_scaled(const AnyTensor& actual, const AnyTensor& expected, double tol) {
  double m = 1.0;
  for (std::int64_t i = 0; i < expected.numel(); ++i) m = std::max(m, std::fabs(expected.element(i)));
  return compare(actual, expected, {0.0, tol * m});
}

}  // namespace maxtext::testing
