// models/sampling.hpp: choosing the next token from logits: greedy, temperature, top-k, top-p, with a seeded
// generator so runs are reproducible.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/random.hpp"

namespace maxtext::models {

struct SamplingParams {
  float temperature = 0.0f;  ///< 0: greedy (argmax, lowest id on ties)
  std::int64_t top_k = 0;    ///< > 0: keep the k most likely tokens
  float top_p = 1.0f;        ///< < 1: keep the smallest set whose probability reaches top_p
  std::uint64_t seed = 0;

  void validate() const {
    MAXTEXT_CHECK(temperature >= 0.0f && std::isfinite(temperature), ArgumentError, "[sampling] temperature must be >= 0, found ",
                  temperature);
    MAXTEXT_CHECK(top_k >= 0, ArgumentError, "[sampling] top_k must be >= 0, found ", top_k);
    MAXTEXT_CHECK(top_p > 0.0f && top_p <= 1.0f, ArgumentError, "[sampling] top_p must be in (0, 1], found ", top_p);
  }
};

/// Index of the largest value; the lowest index wins ties. NaN logits are an error.
inline std::int32_t argmax(const float* logits, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    MAXTEXT_CHECK(!std::isnan(logits[i]), ArgumentError, "[sampling] logit ", i, " is NaN");
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(p), rng_(p.seed ^ 0x5deece66dull) { p_.validate(); }

  /// Draw a token from one row of logits.
  std::int32_t sample(const float* logits, std::int64_t n) {
    if (p_.temperature == 0.0f) return argmax(logits, n);
    idx_.resize(static_cast<std::size_t>(n));
    std::iota(idx_.begin(), idx_.end(), 0);
    // Sort candidates by logit (descending, ties by id), keeping only the top_k when set.
    const std::int64_t k = (p_.top_k > 0 && p_.top_k < n) ? p_.top_k : n;
    auto cmp = [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    if (k < n) {
      std::partial_sort(idx_.begin(), idx_.begin() + k, idx_.end(), cmp);
    } else {
      std::sort(idx_.begin(), idx_.end(), cmp);
    }
    prob_.resize(static_cast<std::size_t>(k));
    const double m = logits[idx_[0]];
    double sum = 0;
    for (std::int64_t i = 0; i < k; ++i) {
      MAXTEXT_CHECK(!std::isnan(logits[idx_[static_cast<std::size_t>(i)]]), ArgumentError, "[sampling] NaN logit");
      prob_[static_cast<std::size_t>(i)] = std::exp((logits[idx_[static_cast<std::size_t>(i)]] - m) / p_.temperature);
      sum += prob_[static_cast<std::size_t>(i)];
    }
    std::int64_t keep = k;
    if (p_.top_p < 1.0f) {
      double c = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        c += prob_[static_cast<std::size_t>(i)] / sum;
        if (c >= p_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    double total = 0;
    for (std::int64_t i = 0; i < keep; ++i) total += prob_[static_cast<std::size_t>(i)];
    const double r = rng_.uniform() * total;
    double c = 0;
    for (std::int64_t i = 0; i < keep; ++i) {
      c += prob_[static_cast<std::size_t>(i)];
      if (r < c) return idx_[static_cast<std::size_t>(i)];
    }
    return idx_[static_cast<std::size_t>(keep - 1)];
  }

 private:
  SamplingParams p_;
  Rng rng_;
  std::vector<std::int32_t> idx_;
  std::vector<double> prob_;
};

}  // namespace maxtext::models
