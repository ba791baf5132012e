// models/generate.hpp: prefill + autoregressive decoding for a batch of prompts of different lengths, with timing;
// sampling (models/sampling.hpp), stop token sets, stop strings, streamed text (models/text_stream.hpp) and
// per-token log-probabilities. See docs/generation.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/sampling.hpp"
#include "maxtext/models/text_stream.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

/// Why a row stopped.
enum class FinishReason : std::uint8_t {
  length,       ///< max_new_tokens reached
  stop_token,   ///< a token of stop_tokens was generated
  stop_string,  ///< the text reached one of stop_strings
  cancelled,    ///< on_text returned false, or GenerateOptions::stop was requested
};

inline const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::length:
      return "length";
    case FinishReason::stop_token:
      return "stop_token";
    case FinishReason::stop_string:
      return "stop_string";
    case FinishReason::cancelled:
      return "cancelled";
  }
  return "?";
}

struct GenerateOptions {
  std::int64_t max_new_tokens = 32;
  SamplingParams sampling;
  /// Generation of a row stops after it emits one of these (the token is kept in `tokens`; its text is not emitted).
  std::vector<std::int32_t> stop_tokens;
  /// Called with (row, token) as each token is chosen.
  std::function<void(std::int64_t, std::int32_t)> on_token;
  /// Cancellation from any thread: a token of a std::stop_source (or std::jthread). Checked before the prefill and
  /// before each decode step; once stop is requested, every row still running ends with FinishReason::cancelled,
  /// keeping the tokens it has (at most one forward pass runs after the request).
  std::stop_token stop{};

  // ---- text (needs `decode`) ----
  /// The tokenizer's decode (e.g. decoder_for(tokenizer)); needed by stop_strings, on_text and GenerateResult::text.
  DecodeFn decode{};
  /// A row stops when its text contains one of these; the text is cut before the match (the stop string is not part
  /// of the text); `tokens` keeps every generated token, including the one that completed the match.
  std::vector<std::string> stop_strings{};
  /// Called with (row, delta) for each piece of new text (UTF-8 complete, never part of a stop string); return false
  /// to stop that row (FinishReason::cancelled).
  std::function<bool(std::int64_t, std::string_view)> on_text{};

  // ---- log-probabilities (off by default: they cost a pass over the vocabulary per token) ----
  /// Record log p(token) under log-softmax of the raw logits (the model's distribution, before any sampling step).
  bool logprobs = false;
  /// With logprobs: also the this many most likely alternatives per position.
  std::int64_t top_logprobs = 0;

  // ---- media (pictures' soft tokens; ForwardOptions::media_mask) ----
  /// [B, longest prompt]: nonzero at the prompt positions whose embeddings are replaced by the rows of
  /// media_embeddings [n, emb_dim], in row-major order (0 beyond a prompt's length). The prefill merges them.
  const Tensor<std::int32_t, 2>* media_mask = nullptr;
  const Tensor<float, 2>* media_embeddings = nullptr;
  /// [3, B, longest prompt]: MRoPE's 3-D positions of the prompts (ForwardOptions::mrope_positions; use_mrope models,
  /// MediaPrompt::positions); the generated tokens continue each row at its largest prompt position + 1.
  const Tensor<std::int32_t, 3>* media_positions = nullptr;
};

struct GenerateResult {
  std::vector<std::vector<std::int32_t>> tokens;  ///< generated tokens per row (prompt excluded)
  std::vector<std::string> text;                  ///< per row, with `decode`: the streamed text (stop string excluded)
  std::vector<FinishReason> finish;               ///< per row
  std::vector<std::vector<TokenLogprob>> logprobs;  ///< per row and generated token, with `logprobs`
  std::int64_t prompt_tokens = 0;                 ///< tokens prefilled (sum of prompt lengths)
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

namespace detail {

/// One row's decoding state: its sampler, text stream and stop checks.
class RowDecoder {
 public:
  /// `context`: the tokens before the generation (all of them count for the repetition penalty; the last one anchors
  /// the text so the first generated token decodes in context).
  RowDecoder(const GenerateOptions& opt, SamplingParams sp, const std::vector<std::int32_t>& context);

  bool done() const { return done_; }

  /// Choose the next token from this row's logits; returns it. Sets done() when the row stops.
  std::int32_t step(const float* logits, std::int64_t V, std::int64_t row, GenerateResult& res) {
    return record(sampler_.sample(logits, V), logits, V, row, res);
  }
  /// step() for a row that verifies a drafted token (speculative decoding): the token chosen by the rejection rule
  /// (Sampler::sample_against_draft), distributed as step()'s; `accepted`: it is the draft.
  std::int32_t step_against(const float* logits, std::int64_t V, std::int64_t row, GenerateResult& res,
                            std::int32_t draft, bool& accepted) {
    return record(sampler_.sample_against_draft(logits, V, draft, accepted), logits, V, row, res);
  }

 private:
  std::int32_t record(std::int32_t t, const float* logits, std::int64_t V, std::int64_t row, GenerateResult& res);

 public:

  /// End the row (also called for rows still running when generation ends).
  void finish(std::int64_t row, GenerateResult& res, FinishReason why) {
    if (done_) return;
    done_ = true;
    const auto r = static_cast<std::size_t>(row);
    res.finish[r] = why;
    if (stream_) {
      if (why != FinishReason::cancelled) emit(row, stream_->finish());
      res.text[r] = stream_->text();
    }
  }

 private:
  bool emit(std::int64_t row, const std::string& delta) {
    if (delta.empty() || !opt_.on_text) return true;
    return opt_.on_text(row, delta);
  }

  const GenerateOptions& opt_;
  Sampler sampler_;
  std::optional<TextStreamer> stream_;
  bool done_ = false;
};

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::int32_t RowDecoder::record(std::int32_t t, const float* logits, std::int64_t V, std::int64_t row,
                                           GenerateResult& res) {
  const auto r = static_cast<std::size_t>(row);
  res.tokens[r].push_back(t);
  if (opt_.logprobs) res.logprobs[r].push_back(token_logprob(logits, V, t, opt_.top_logprobs));
  if (opt_.on_token) opt_.on_token(row, t);
  const bool stop_tok = std::find(opt_.stop_tokens.begin(), opt_.stop_tokens.end(), t) != opt_.stop_tokens.end();
  if (stop_tok) {
    finish(row, res, FinishReason::stop_token);
    return t;
  }
  if (stream_) {
    const std::string delta = stream_->push(t);
    if (!emit(row, delta)) {
      finish(row, res, FinishReason::cancelled);
      return t;
    }
    if (stream_->stopped()) {
      finish(row, res, FinishReason::stop_string);
      return t;
    }
  }
  if (static_cast<std::int64_t>(res.tokens[r].size()) >= opt_.max_new_tokens) finish(row, res, FinishReason::length);
  return t;
}
#endif

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API RowDecoder::RowDecoder(const GenerateOptions& opt, SamplingParams sp,
                                   const std::vector<std::int32_t>& context)
    : opt_(opt), sampler_(std::move(sp)) {
  if (sampler_.params().repetition_penalty != 1.0f) sampler_.add_context(context);
  MAXTEXT_CHECK(opt.decode || (opt.stop_strings.empty() && !opt.on_text), ArgumentError,
                "[generate] stop_strings and on_text need GenerateOptions::decode (the tokenizer's decode)");
  if (opt.decode) {
    std::vector<std::int32_t> anchor;
    if (!context.empty()) anchor.push_back(context.back());
    stream_.emplace(opt.decode, opt.stop_strings, std::move(anchor));
  }
}
#endif

MAXTEXT_API void init_result(GenerateResult& res, std::size_t rows);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void init_result(GenerateResult& res, std::size_t rows) {
  res.tokens.assign(rows, {});
  res.text.assign(rows, {});
  res.finish.assign(rows, FinishReason::length);
  res.logprobs.assign(rows, {});
}
#endif

}  // namespace detail

/// Prefill every prompt (right-padded into one batch), then decode all rows in lock-step, each at its own length.
/// Row b samples with seed `sampling.seed + b`.
template <class Model>
GenerateResult generate(Model& model, const std::vector<std::vector<std::int32_t>>& prompts, const GenerateOptions& opt,
                        std::int64_t cache_capacity = 0) {
  const auto Bn = static_cast<std::int64_t>(prompts.size());
  MAXTEXT_CHECK(Bn > 0, ArgumentError, "[generate] no prompts");
  MAXTEXT_CHECK(opt.max_new_tokens >= 0, ArgumentError, "[generate] max_new_tokens must be >= 0");
  MAXTEXT_CHECK(opt.top_logprobs >= 0, ArgumentError, "[generate] top_logprobs must be >= 0");
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
  detail::init_result(res, static_cast<std::size_t>(Bn));
  std::vector<detail::RowDecoder> rows;
  rows.reserve(static_cast<std::size_t>(Bn));
  for (std::int64_t b = 0; b < Bn; ++b) {
    SamplingParams sp = opt.sampling;
    sp.seed += static_cast<std::uint64_t>(b);
    rows.emplace_back(opt, std::move(sp), prompts[static_cast<std::size_t>(b)]);
  }
  auto finish_all = [&](FinishReason why) {
    for (std::int64_t b = 0; b < Bn; ++b) rows[static_cast<std::size_t>(b)].finish(b, res, why);
  };
  if (opt.max_new_tokens == 0 || opt.stop.stop_requested()) {
    finish_all(opt.max_new_tokens == 0 ? FinishReason::length : FinishReason::cancelled);
    return res;
  }
  auto cache = model.make_cache(Bn, cache_capacity);
  Tensor<std::int32_t, 2> tok({Bn, T});
  for (std::int64_t b = 0; b < Bn; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      const auto& p = prompts[static_cast<std::size_t>(b)];
      tok(b, t) = t < static_cast<std::int64_t>(p.size()) ? p[static_cast<std::size_t>(t)] : p.back();
    }
  }
  using clock = std::chrono::steady_clock;
  ForwardOptions fo;
  fo.last_only = true;
  fo.row_lengths = &lens;
  fo.media_mask = opt.media_mask;
  fo.media_embeddings = opt.media_embeddings;
  fo.mrope_positions = opt.media_positions;
  // With 3-D positions each row's generated tokens continue at its largest prompt position + 1 (MaxText's
  // mrope_position_deltas), one position each.
  Tensor<std::int32_t, 2> next_pos;
  if (opt.media_positions != nullptr) {
    const auto& mp = *opt.media_positions;
    MAXTEXT_CHECK(mp.dim(0) == 3 && mp.dim(1) == Bn && mp.dim(2) == T, ArgumentError, "[generate] media_positions has "
                  "shape ", mp.shape(), ", expected [3, ", Bn, ", ", T, "]");
    next_pos = Tensor<std::int32_t, 2>({Bn, 1});
    for (std::int64_t b = 0; b < Bn; ++b) {
      std::int32_t mx = -1;
      for (std::int64_t r = 0; r < 3; ++r) {
        for (std::int64_t t = 0; t < lens[static_cast<std::size_t>(b)]; ++t) mx = std::max(mx, mp(r, b, t));
      }
      next_pos(b, 0) = mx + 1;
    }
  }
  auto t0 = clock::now();
  Tensor<float, 3> logits = model.forward(tok, cache, fo);
  res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  const std::int64_t V = logits.dim(2);
  Tensor<std::int32_t, 2> next({Bn, 1});
  auto choose = [&]() {
    bool all_done = true;
    for (std::int64_t b = 0; b < Bn; ++b) {
      auto& row = rows[static_cast<std::size_t>(b)];
      if (row.done()) {
        next(b, 0) = res.tokens[static_cast<std::size_t>(b)].back();
        continue;
      }
      next(b, 0) = row.step(&logits(b, 0, 0), V, b, res);
      all_done = all_done && row.done();
    }
    return all_done;
  };
  bool finished = choose();
  ForwardOptions step;
  step.last_only = true;
  auto t1 = clock::now();
  while (!finished) {
    if (opt.stop.stop_requested()) {
      finish_all(FinishReason::cancelled);
      break;
    }
    if (opt.media_positions != nullptr) step.positions = &next_pos;
    logits = model.forward(next, cache, step);
    if (opt.media_positions != nullptr) {
      for (std::int64_t b = 0; b < Bn; ++b) ++next_pos(b, 0);
    }
    ++res.decode_steps;
    finished = choose();
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace maxtext::models
