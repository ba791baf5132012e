// models/sampling.hpp: choosing the next token from logits: greedy, temperature, top-k, top-p, min-p, with logit
// bias and repetition / frequency / presence penalties, and a seeded generator so runs are reproducible.
//
// Order of application (Hugging Face's: logits processors first, then the warpers, temperature first among them):
//   1. logit bias          l[id] += bias                                  (tokens outside the vocabulary: an error)
//   2. repetition penalty  for each distinct id seen (context and generated tokens): l > 0 ? l / r : l * r
//   3. frequency/presence  l[id] -= frequency * count(id) + presence * (count(id) > 0), counts over the tokens this
//                          sampler generated (not the context), as OpenAI's API and vLLM define them
//   -- temperature 0 stops here: greedy argmax of the processed logits (lowest id on ties)
//   4. temperature         p = softmax(l / T)
//   5. top-k               keep the k largest (ties by lower id)
//   6. top-p               keep the smallest prefix (by p, descending) whose mass reaches top_p
//   7. min-p               keep tokens with p >= min_p * max(p)
//   8. draw                from the kept tokens, renormalised
// Steps 5-7 all keep a prefix of the same ordering, so their order among themselves does not matter (min-p compares
// with the largest probability, which every prefix keeps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/random.hpp"

namespace maxtext::models {

struct SamplingParams {
  float temperature = 0.0f;  ///< 0: greedy (argmax, lowest id on ties)
  std::int64_t top_k = 0;    ///< > 0: keep the k most likely tokens
  float top_p = 1.0f;        ///< < 1: keep the smallest set whose probability reaches top_p
  std::uint64_t seed = 0;
  float min_p = 0.0f;               ///< > 0: keep tokens whose probability is >= min_p times the largest
  float repetition_penalty = 1.0f;  ///< > 1 discourages tokens already seen (context + generated)
  float frequency_penalty = 0.0f;   ///< subtracted once per earlier occurrence among the generated tokens
  float presence_penalty = 0.0f;    ///< subtracted once if the token was generated before
  std::vector<std::pair<std::int32_t, float>> logit_bias{};  ///< (token id, additive bias); -inf bans a token

  void validate() const;
  /// True when steps 1-3 change anything.
  bool processes_logits() const {
    return !logit_bias.empty() || repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
};

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void SamplingParams::validate() const {
  MAXTEXT_CHECK(temperature >= 0.0f && std::isfinite(temperature), ArgumentError,
                "[sampling] temperature must be >= 0, found ", temperature);
  MAXTEXT_CHECK(top_k >= 0, ArgumentError, "[sampling] top_k must be >= 0, found ", top_k);
  MAXTEXT_CHECK(top_p > 0.0f && top_p <= 1.0f, ArgumentError, "[sampling] top_p must be in (0, 1], found ", top_p);
  MAXTEXT_CHECK(min_p >= 0.0f && min_p <= 1.0f, ArgumentError, "[sampling] min_p must be in [0, 1], found ", min_p);
  MAXTEXT_CHECK(repetition_penalty > 0.0f && std::isfinite(repetition_penalty), ArgumentError,
                "[sampling] repetition_penalty must be > 0, found ", repetition_penalty);
  MAXTEXT_CHECK(std::isfinite(frequency_penalty) && std::isfinite(presence_penalty), ArgumentError,
                "[sampling] frequency_penalty and presence_penalty must be finite, found ", frequency_penalty, " and ",
                presence_penalty);
  for (const auto& [id, b] : logit_bias) {
    MAXTEXT_CHECK(id >= 0, ArgumentError, "[sampling] logit_bias token id ", id, " is negative");
    MAXTEXT_CHECK(!std::isnan(b) && b != std::numeric_limits<float>::infinity(), ArgumentError,
                  "[sampling] logit_bias for token ", id, " must be finite or -inf, found ", b);
  }
}
#endif

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
  explicit Sampler(SamplingParams p) : p_(std::move(p)), rng_(p_.seed ^ 0x5deece66dull) { p_.validate(); }

  const SamplingParams& params() const { return p_; }

  /// Tokens before the generation (prompt, earlier turns): they count for the repetition penalty only.
  void add_context(const std::vector<std::int32_t>& ids) {
    for (std::int32_t id : ids) seen_.emplace(id, 0);
  }
  /// Record a generated token (sample() records the tokens it returns).
  void accept(std::int32_t id) { ++seen_[id]; }
  /// Forget the context and the generated tokens (the random stream continues).
  void clear_history() { seen_.clear(); }

  /// Steps 1-3 on a copy of the logits: what the draw sees before temperature.
  void process(const float* logits, std::int64_t n, std::vector<float>& out) const {
    out.assign(logits, logits + n);
    for (const auto& [id, b] : p_.logit_bias) {
      MAXTEXT_CHECK(id < n, ArgumentError, "[sampling] logit_bias token id ", id, " is outside the vocabulary [0, ", n, ")");
      out[static_cast<std::size_t>(id)] += b;
    }
    if (p_.repetition_penalty == 1.0f && p_.frequency_penalty == 0.0f && p_.presence_penalty == 0.0f) return;
    for (const auto& [id, count] : seen_) {
      if (id < 0 || id >= n) continue;
      float& l = out[static_cast<std::size_t>(id)];
      if (p_.repetition_penalty != 1.0f) l = l > 0.0f ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      if (count > 0) l -= p_.frequency_penalty * static_cast<float>(count) + p_.presence_penalty;
    }
  }

  /// Speculative sampling against a drafted token (a drafter that proposes one token, a point mass q = [draft]):
  /// the rejection rule keeps `draft` with probability min(1, p(draft) / q(draft)) = p(draft), p being the
  /// distribution sample() draws from (after steps 1-3, temperature, top-k / top-p / min-p), and otherwise draws from
  /// the residual max(0, p - q), normalised: p without `draft`. The token returned is distributed exactly as
  /// sample()'s (p(x) = p(d) [x = d] + (1 - p(d)) p(x) / (1 - p(d)) [x != d]), so speculative decoding keeps the
  /// model's distribution whatever the draft. Records the token; `accepted` says whether it is the draft. At
  /// temperature 0: the draft is kept when it is the argmax, and the argmax is returned either way.
  std::int32_t sample_against_draft(const float* logits, std::int64_t n, std::int32_t draft, bool& accepted) {
    MAXTEXT_CHECK(n > 0, ArgumentError, "[sampling] empty logits row");
    if (p_.processes_logits()) {
      process(logits, n, work_);
      logits = work_.data();
    }
    std::int32_t t = 0;
    if (p_.temperature == 0.0f) {
      t = argmax(logits, n);
    } else {
      const std::int64_t keep = distribution(logits, n);
      double total = 0, pd = 0;
      for (std::int64_t i = 0; i < keep; ++i) {
        total += prob_[static_cast<std::size_t>(i)];
        if (idx_[static_cast<std::size_t>(i)] == draft) pd = prob_[static_cast<std::size_t>(i)];
      }
      if (pd > 0 && rng_.uniform() * total < pd) {
        t = draft;
      } else {  // the residual: every kept token but the draft, by its probability
        const double r = rng_.uniform() * (total - pd);
        double c = 0;
        t = -1;
        for (std::int64_t i = 0; i < keep && t < 0; ++i) {
          if (idx_[static_cast<std::size_t>(i)] == draft) continue;
          c += prob_[static_cast<std::size_t>(i)];
          if (r < c) t = idx_[static_cast<std::size_t>(i)];
        }
        for (std::int64_t i = keep - 1; i >= 0 && t < 0; --i) {  // r at the top edge (rounding): the last non-draft
          if (idx_[static_cast<std::size_t>(i)] != draft) t = idx_[static_cast<std::size_t>(i)];
        }
        if (t < 0) t = draft;  // only the draft is kept: p(draft) = 1
      }
    }
    accepted = t == draft;
    accept(t);
    return t;
  }

  /// Draw a token from one row of logits (and record it as generated).
  std::int32_t sample(const float* logits, std::int64_t n) {
    MAXTEXT_CHECK(n > 0, ArgumentError, "[sampling] empty logits row");
    if (p_.processes_logits()) {
      process(logits, n, work_);
      logits = work_.data();
    }
    const std::int32_t t = draw(logits, n);
    accept(t);
    return t;
  }

 private:
  std::int32_t draw(const float* logits, std::int64_t n) {
    if (p_.temperature == 0.0f) return argmax(logits, n);
    const std::int64_t keep = distribution(logits, n);
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
  /// The tokens a draw at temperature > 0 chooses from: idx_[0, keep) by decreasing logit (ties: lower id first) with
  /// their unnormalised probabilities prob_[0, keep) after temperature, top-k, top-p and min-p; returns keep.
  std::int64_t distribution(const float* logits, std::int64_t n);

  SamplingParams p_;
  Rng rng_;
  std::unordered_map<std::int32_t, std::int32_t> seen_;  // id -> times generated (0: only in the context)
  std::vector<float> work_;
  std::vector<std::int32_t> idx_;
  std::vector<double> prob_;
};

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::int64_t Sampler::distribution(const float* logits, std::int64_t n) {
  idx_.resize(static_cast<std::size_t>(n));
  std::iota(idx_.begin(), idx_.end(), 0);
  // Sort candidates by logit (descending, ties by id), keeping only the top_k when set.
  const std::int64_t k = (p_.top_k > 0 && p_.top_k < n) ? p_.top_k : n;
  auto cmp = [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  for (std::int64_t i = 0; i < n; ++i) {
    MAXTEXT_CHECK(!std::isnan(logits[i]), ArgumentError, "[sampling] logit ", i, " is NaN");
  }
  if (k < n) {
    std::partial_sort(idx_.begin(), idx_.begin() + k, idx_.end(), cmp);
  } else {
    std::sort(idx_.begin(), idx_.end(), cmp);
  }
  prob_.resize(static_cast<std::size_t>(k));
  const double m = logits[idx_[0]];
  MAXTEXT_CHECK(m > -std::numeric_limits<double>::infinity(), ArgumentError,
                "[sampling] every token has logit -inf (all banned by logit_bias?)");
  double sum = 0;
  for (std::int64_t i = 0; i < k; ++i) {
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
  if (p_.min_p > 0.0f) {
    // prob_[0] is the largest (exp(0) = 1), so the bound is min_p itself in these unnormalised units.
    std::int64_t j = 1;
    while (j < keep && prob_[static_cast<std::size_t>(j)] >= static_cast<double>(p_.min_p) * prob_[0]) ++j;
    keep = j;
  }
  return keep;
}
#endif

/// Log-probabilities of one row of raw logits (log-softmax in double): the model's own distribution, before any
/// sampling step.
struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;                                 ///< log p(token)
  std::vector<std::pair<std::int32_t, float>> top;  ///< the most likely tokens, descending (ties: lower id first)
};

MAXTEXT_API TokenLogprob token_logprob(const float* logits, std::int64_t n, std::int32_t token, std::int64_t top_k);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API TokenLogprob token_logprob(const float* logits, std::int64_t n, std::int32_t token, std::int64_t top_k) {
  MAXTEXT_CHECK(token >= 0 && token < n, ArgumentError, "[sampling] token ", token, " outside [0, ", n, ")");
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  const double lse = m + std::log(s);
  TokenLogprob r;
  r.token = token;
  r.logprob = static_cast<float>(logits[token] - lse);
  const std::int64_t k = std::min(top_k, n);
  if (k > 0) {
    std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int32_t id = idx[static_cast<std::size_t>(i)];
      r.top.emplace_back(id, static_cast<float>(logits[id] - lse));
    }
  }
  return r;
}
#endif

}  // namespace maxtext::models
