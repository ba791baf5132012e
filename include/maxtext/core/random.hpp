// core/random.hpp: the library's deterministic random numbers (initialisation, sampling).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace maxtext {

/// Deterministic random numbers: splitmix64 streams keyed by (seed, parameter name), so a parameter's values do not
/// depend on which other parameters exist or on visiting order.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  static std::uint64_t hash(std::string_view s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(6.283185307179586 * u2);
    has_spare_ = true;
    return r * std::cos(6.283185307179586 * u2);
  }
  /// Standard normal truncated to [-2, 2] (rejection).
  double truncated_normal() {
    for (;;) {
      const double v = normal();
      if (v >= -2.0 && v <= 2.0) return v;
    }
  }

 private:
  std::uint64_t s_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace maxtext
