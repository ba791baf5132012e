// models/generate.hpp: prefill + autoregressive decoding for a batch of prompts of different lengths, with timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/sampling.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

struct GenerateOptions {
  std::int64_t max_new_tokens = 32;
  SamplingParams sampling;
  /// Generation of a row stops after it emits one of these (the token is kept).
  std::vector<std::int32_t> stop_tokens;
  /// Called with (row, token) as each token is chosen (e.g. to stream text).
  std::function<void(std::int64_t, std::int32_t)> on_token;
};

struct GenerateResult {
  std::vector<std::vector<std::int32_t>> tokens;  ///< generated tokens per row (prompt excluded)
  std::int64_t prompt_tokens = 0;                 ///< sum of prompt lengths
  std::int64_t decode_steps = 0;                  ///< forward passes after the prefill
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0.0; }
  /// Generated tokens (all rows) per second of decoding, excluding the first token, which the prefill produces.
  double decode_tokens_per_second() const {
    std::int64_t n = 0;
    for (const auto& t : tokens) n += std::max<std::int64_t>(0, static_cast<std::int64_t>(t.size()) - 1);
    return decode_seconds > 0 ? n / decode_seconds : 0.0;
  }
};

/// Prefill every prompt (right-padded into one batch), then decode all rows in lock-step, each at its own length.
template <class Model>
GenerateResult generate(Model& model, const std::vector<std::vector<std::int32_t>>& prompts, const GenerateOptions& opt,
                        std::int64_t cache_capacity = 0) {
  const auto Bn = static_cast<std::int64_t>(prompts.size());
  MAXTEXT_CHECK(Bn > 0, ArgumentError, "[generate] no prompts");
  MAXTEXT_CHECK(opt.max_new_tokens >= 0, ArgumentError, "[generate] max_new_tokens must be >= 0");
  std::int64_t T = 0;
  std::vector<std::int32_t> lens;
  GenerateResult res;
  for (const auto& p : prompts) {
    MAXTEXT_CHECK(!p.empty(), ArgumentError, "[generate] empty prompt (a BOS token at least is needed)");
    T = std::max<std::int64_t>(T, static_cast<std::int64_t>(p.size()));
    lens.push_back(static_cast<std::int32_t>(p.size()));
    res.prompt_tokens += static_cast<std::int64_t>(p.size());
  }
  if (cache_capacity <= 0) cache_capacity = T + opt.max_new_tokens;
  MAXTEXT_CHECK(T + opt.max_new_tokens <= cache_capacity, ArgumentError, "[generate] prompt (", T, ") + max_new_tokens (",
                opt.max_new_tokens, ") exceed the cache capacity ", cache_capacity);
  auto cache = model.make_cache(Bn, cache_capacity);
  Tensor<std::int32_t, 2> tok({Bn, T});
  for (std::int64_t b = 0; b < Bn; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      const auto& p = prompts[static_cast<std::size_t>(b)];
      tok(b, t) = t < static_cast<std::int64_t>(p.size()) ? p[static_cast<std::size_t>(t)] : p.back();
    }
  }
  std::vector<Sampler> samplers;
  for (std::int64_t b = 0; b < Bn; ++b) {
    SamplingParams sp = opt.sampling;
    sp.seed += static_cast<std::uint64_t>(b);
    samplers.emplace_back(sp);
  }
  res.tokens.resize(static_cast<std::size_t>(Bn));
  if (opt.max_new_tokens == 0) return res;
  using clock = std::chrono::steady_clock;
  ForwardOptions fo;
  fo.last_only = true;
  fo.row_lengths = &lens;
  auto t0 = clock::now();
  Tensor<float, 3> logits = model.forward(tok, cache, fo);
  res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  const std::int64_t V = logits.dim(2);
  std::vector<bool> done(static_cast<std::size_t>(Bn), false);
  Tensor<std::int32_t, 2> next({Bn, 1});
  auto choose = [&]() {
    bool all_done = true;
    for (std::int64_t b = 0; b < Bn; ++b) {
      if (done[static_cast<std::size_t>(b)]) {
        next(b, 0) = res.tokens[static_cast<std::size_t>(b)].back();
        continue;
      }
      const std::int32_t t = samplers[static_cast<std::size_t>(b)].sample(&logits(b, 0, 0), V);
      res.tokens[static_cast<std::size_t>(b)].push_back(t);
      if (opt.on_token) opt.on_token(b, t);
      next(b, 0) = t;
      if (std::find(opt.stop_tokens.begin(), opt.stop_tokens.end(), t) != opt.stop_tokens.end() ||
          static_cast<std::int64_t>(res.tokens[static_cast<std::size_t>(b)].size()) >= opt.max_new_tokens) {
        done[static_cast<std::size_t>(b)] = true;
      }
      all_done = all_done && done[static_cast<std::size_t>(b)];
    }
    return all_done;
  };
  bool finished = choose();
  ForwardOptions step;
  step.last_only = true;
  auto t1 = clock::now();
  while (!finished) {
    logits = model.forward(next, cache, step);
    ++res.decode_steps;
    finished = choose();
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace maxtext::models
