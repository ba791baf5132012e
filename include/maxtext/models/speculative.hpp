// models/speculative.hpp: speculative decoding. A drafter proposes the next K tokens cheaply; the model checks all of
// them in one forward pass over its cache (K + 1 rows: the last accepted token and the drafts), keeps the drafts up to
// the first one it rejects, adds its own token there (or a bonus token after K accepted drafts), and rolls its cache
// back over the rejected rows. On a CPU, decode is bound by reading the weights, so a pass over K + 1
// rows costs little more than a pass over one: each accepted draft is a decode step saved.
//
//   models::PromptLookupDrafter lookup;                          // drafts from n-gram matches in the context
//   models::SpeculativeStats st;
//   auto r = models::generate_speculative(model, prompt, opt, lookup, {.draft_max = 4}, &st);
//
//   models::ModelDrafter<Small> small(small_model);             // or: a smaller model that shares the tokenizer
//   auto r2 = models::generate_speculative(model, prompt, opt, small);
//   models::MtpDrafter mtp(model);                                // or: the model's own MTP layers (models/mtp.hpp)
//
// The model's token is chosen at each verified row by the same RowDecoder as generate(), so stop tokens, stop
// strings, streaming, log-probabilities, penalties and cancellation behave as there. Greedy (temperature 0): a draft
// is kept when it is the model's argmax, and the tokens are those of plain greedy decoding whenever the verify
// pass's logits choose as the one-row decode steps' do (docs/generation.md states when they can differ). Sampling
// (temperature > 0, with top-k / top-p / min-p): each draft is kept by the rejection rule over the sampler's own
// distribution p (Sampler::sample_against_draft: kept with probability p(draft), else a token drawn from p without
// it), which emits tokens distributed exactly as generate()'s, whatever the drafter; the random draws differ from
// generate()'s, so a seed gives another (equally distributed) text.
//
// Rollback sets the cache's length back (KVCache::set_length), which every attention cache supports (the cache is
// contiguous per slot, as Session::rewind relies on). A recurrent cache (Gated DeltaNet: qwen3_next, qwen3_5; Engram's
// convolution) cannot go back by its length: its states are saved before each pass and put back when drafts are
// rejected, and the kept rows run again.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/sampling.hpp"

namespace maxtext::models {

struct SpeculativeOptions {
  /// K: the most tokens drafted per verify pass (>= 1). Fewer near max_new_tokens or when the drafter has fewer.
  std::int64_t draft_max = 4;
  /// Drafts from the model's MTP layers (generate_mtp_speculative): the hidden state they read (MtpHidden).
  MtpHidden mtp_hidden = MtpHidden::raw;
};

/// What a speculative generation did: per draft position i (0-based), how often a token was drafted there and how
/// often it was accepted (a draft at position i is checked only when those before it were accepted).
struct SpeculativeStats {
  std::int64_t verify_passes = 0;        ///< forward passes of the model after the prefill
  std::int64_t empty_drafts = 0;         ///< passes where the drafter proposed nothing (a plain decode step)
  std::vector<std::int64_t> drafted;     ///< [K]
  std::vector<std::int64_t> accepted;    ///< [K]
  std::int64_t total_drafted() const {
    std::int64_t n = 0;
    for (auto d : drafted) n += d;
    return n;
  }
  std::int64_t total_accepted() const {
    std::int64_t n = 0;
    for (auto a : accepted) n += a;
    return n;
  }
  /// Accepted / drafted (0 when nothing was drafted).
  double acceptance_rate() const {
    const auto d = total_drafted();
    return d > 0 ? static_cast<double>(total_accepted()) / static_cast<double>(d) : 0.0;
  }
};

/// Prompt lookup (n-gram drafting): the context's last n tokens (n from ngram_max down to ngram_min) are looked for
/// earlier in the context; at the latest earlier occurrence of the longest n that has one, the tokens that followed
/// it are the draft. No model: it pays on text that copies its context (code edits, quotes, summaries).
class PromptLookupDrafter {
 public:
  explicit PromptLookupDrafter(std::int64_t ngram_max = 3, std::int64_t ngram_min = 1)
      : max_(ngram_max), min_(ngram_min) {
    MAXTEXT_CHECK(ngram_min >= 1 && ngram_max >= ngram_min, ArgumentError,
                  "[speculative] prompt lookup needs 1 <= ngram_min <= ngram_max, found ngram_min ", ngram_min,
                  " and ngram_max ", ngram_max);
  }

  /// Up to k tokens to follow `context` (empty when no n-gram recurs).
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>& context, std::int64_t k) {
    const auto L = static_cast<std::int64_t>(context.size());
    for (std::int64_t n = std::min(max_, L - 1); n >= min_; --n) {
      const std::int32_t* tail = context.data() + (L - n);
      // Latest start s < L - n with context[s, s + n) == the tail and at least one token after it.
      for (std::int64_t s = L - n - 1; s >= 0; --s) {
        if (!std::equal(tail, tail + n, context.data() + s)) continue;
        const std::int64_t from = s + n, to = std::min(L, from + k);
        return std::vector<std::int32_t>(context.begin() + from, context.begin() + to);
      }
    }
    return {};
  }

 private:
  std::int64_t max_, min_;
};

/// Drafts with a second, cheaper model that shares the tokenizer (any block, any policy): its greedy choices, one
/// decode step per drafted token. It keeps its own cache and follows the context by its longest common prefix, as
/// Session::sync does, so a rejected draft costs it no recomputation of what came before. A draft model with a
/// recurrent cache (Gated DeltaNet) cannot go back to that prefix: it runs the context again from the start.
template <class DraftModel>
class ModelDrafter {
 public:
  /// `capacity`: the most tokens the draft's cache holds (default: the draft config's max_target_length).
  explicit ModelDrafter(DraftModel& model, std::int64_t capacity = 0)
      : model_(model), cache_(model.make_cache(1, capacity)) {}

  /// The draft model's vocabulary size (its logits' width).
  std::int64_t vocab_size() const { return model_.config().vocab_size; }

  /// Up to k greedy tokens after `context` (fewer when the draft's cache is full, or where the draft would choose
  /// a token id >= `target_vocab`, which the target could not take).
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>& context, std::int64_t k,
                                    std::int64_t target_vocab = -1) {
    MAXTEXT_CHECK(!context.empty(), ArgumentError, "[speculative] empty context");
    // The cache holds fed_[0, cached) ; keep its common prefix with the context, but at least one token to feed.
    std::size_t p = 0;
    const std::size_t cached = static_cast<std::size_t>(cache_.length(0));
    while (p < cached && p < context.size() && fed_[p] == context[p]) ++p;
    p = std::min(p, context.size() - 1);
    if (cache_.recurrent() && p < cached) p = 0;  // its states summarise all it ran: start over
    cache_.set_length(0, static_cast<std::int32_t>(p));
    fed_.assign(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(p));
    const auto room = cache_.capacity() - static_cast<std::int64_t>(context.size());
    k = std::min(k, room);
    std::vector<std::int32_t> out;
    if (k <= 0) return out;
    std::vector<std::int32_t> feed(context.begin() + static_cast<std::ptrdiff_t>(p), context.end());
    ForwardOptions fo;
    fo.last_only = true;
    while (static_cast<std::int64_t>(out.size()) < k) {
      Tensor<std::int32_t, 2> tok({1, static_cast<std::int64_t>(feed.size())});
      for (std::size_t i = 0; i < feed.size(); ++i) tok(0, static_cast<std::int64_t>(i)) = feed[i];
      const Tensor<float, 3> l = model_.forward(tok, cache_, fo);
      fed_.insert(fed_.end(), feed.begin(), feed.end());
      const std::int32_t t = argmax(&l(0, 0, 0), l.dim(2));
      if (target_vocab > 0 && t >= target_vocab) break;
      out.push_back(t);
      feed.assign(1, t);
    }
    return out;
  }

 private:
  DraftModel& model_;
  decltype(std::declval<DraftModel&>().make_cache(1, 1)) cache_;
  std::vector<std::int32_t> fed_;  ///< the tokens in the cache, in order
};

/// A drafter as a function (what AnyModel::generate_speculative takes): context, k -> up to k tokens.
using DraftFn = std::function<std::vector<std::int32_t>(const std::vector<std::int32_t>& context, std::int64_t k)>;

/// A DraftFn as a drafter class for generate_speculative.
struct FunctionDrafter {
  DraftFn fn;
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>& context, std::int64_t k) const {
    MAXTEXT_CHECK(static_cast<bool>(fn), ArgumentError, "[speculative] no drafter function");
    return fn(context, k);
  }
};

namespace detail {
template <class D>
concept TargetVocabAware = requires(D& d, const std::vector<std::int32_t>& c) { d.propose(c, 1, 1); };

/// A drafter that reads the model's hidden states (MtpDrafter): generate_speculative hands it the rows whose inputs
/// are final after the prefill and after each verify pass.
template <class D>
concept HiddenStateDrafter = requires(D& d, const Tensor<float, 2>& h, const std::vector<std::int32_t>& c) {
  d.observe(h, std::int64_t{0}, std::int64_t{0}, c);
};

template <class D>
std::vector<std::int32_t> draft_for(D& d, const std::vector<std::int32_t>& context, std::int64_t k,
                                    std::int64_t vocab) {
  std::vector<std::int32_t> out;
  if constexpr (TargetVocabAware<D>) {
    out = d.propose(context, k, vocab);
  } else {
    out = d.propose(context, k);
  }
  if (static_cast<std::int64_t>(out.size()) > k) out.resize(static_cast<std::size_t>(k));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= vocab) {  // a drafter's token the model has no embedding for: draft up to it
      out.resize(i);
      break;
    }
  }
  return out;
}
}  // namespace detail

namespace detail {
/// Checks shared by generate_speculative and Session::generate_speculative; `st` starts over with K positions.
inline void begin_speculative(const GenerateOptions& opt, const SpeculativeOptions& spec, SpeculativeStats& st) {
  MAXTEXT_CHECK(opt.max_new_tokens >= 0, ArgumentError, "[speculative] max_new_tokens must be >= 0");
  MAXTEXT_CHECK(opt.top_logprobs >= 0, ArgumentError, "[speculative] top_logprobs must be >= 0");
  MAXTEXT_CHECK(spec.draft_max >= 1, ArgumentError, "[speculative] draft_max must be >= 1, found ", spec.draft_max);
  MAXTEXT_CHECK(opt.media_mask == nullptr && opt.media_embeddings == nullptr, UnsupportedError,
                "[speculative] media input (pictures) is not supported with speculative decoding; use generate()");
  st = SpeculativeStats{};
  st.drafted.assign(static_cast<std::size_t>(spec.draft_max), 0);
  st.accepted.assign(static_cast<std::size_t>(spec.draft_max), 0);
}

/// The verify passes after the first token: `cache` holds context[0, n - 1), context.back() is the token `row` chose
/// last. Each pass feeds it and up to K drafts, keeps what the rule keeps and sets the cache back; the chosen tokens
/// join `context`. `hidden` receives the model's raw hidden states when the drafter reads them. Returns the tokens fed.
/// A recurrent cache (Gated DeltaNet, Engram's convolution) cannot be set back by its length: its states are saved
/// before each pass, and when drafts are rejected they are put back and the kept rows run again (one more, shorter
/// pass).
template <class Model, class Cache, class Drafter>
std::int64_t speculative_passes(Model& model, Cache& cache, std::vector<std::int32_t>& context, RowDecoder& row,
                                GenerateResult& res, const GenerateOptions& opt, Drafter& drafter,
                                const SpeculativeOptions& spec, SpeculativeStats& st, Tensor<float, 2>& hidden) {
  constexpr bool kHidden = HiddenStateDrafter<Drafter>;
  const std::int64_t V = model.config().vocab_size;
  const bool recurrent = cache.recurrent();
  std::int64_t fed = 0;
  while (!row.done()) {
    if (opt.stop.stop_requested()) {
      row.finish(0, res, FinishReason::cancelled);
      break;
    }
    const std::int64_t L = cache.length(0);  // == context.size() - 1
    const std::int64_t left = opt.max_new_tokens - static_cast<std::int64_t>(res.tokens[0].size());
    // K drafts then one more token of the model's: never past max_new_tokens or the cache.
    const std::int64_t k_max = std::min({spec.draft_max, left - 1, cache.capacity() - L - 1});
    std::vector<std::int32_t> draft;
    if (k_max > 0) draft = draft_for(drafter, context, k_max, V);
    const auto K = static_cast<std::int64_t>(draft.size());
    if (K == 0) ++st.empty_drafts;
    Tensor<std::int32_t, 2> feed({1, K + 1});
    feed(0, 0) = context.back();
    for (std::int64_t i = 0; i < K; ++i) feed(0, i + 1) = draft[static_cast<std::size_t>(i)];
    ForwardOptions verify;
    if constexpr (kHidden) verify.hidden_out = &hidden;
    decltype(cache.save_states(model.backend())) saved;
    if (recurrent && K > 0) saved = cache.save_states(model.backend());
    const Tensor<float, 3> logits = model.forward(feed, cache, verify);
    fed += K + 1;
    ++res.decode_steps;
    ++st.verify_passes;
    // Row i of the logits chooses the token after feed[i]; drafts are kept while they are that choice.
    std::int64_t accepted = 0;
    for (std::int64_t i = 0; i <= K; ++i) {
      bool match = false;
      const std::int32_t t = i < K ? row.step_against(&logits(0, i, 0), logits.dim(2), 0, res,
                                                      draft[static_cast<std::size_t>(i)], match)
                                   : row.step(&logits(0, i, 0), logits.dim(2), 0, res);
      context.push_back(t);
      if (i < K) {
        ++st.drafted[static_cast<std::size_t>(i)];
        if (match) ++st.accepted[static_cast<std::size_t>(i)];
      }
      if (!match || row.done()) break;
      ++accepted;
    }
    // The cache keeps the fed token and the accepted drafts; the token chosen last is fed by the next pass.
    if (recurrent && accepted < K) {  // states past the kept rows: back to the pass's start, the kept rows again
      cache.restore_states(model.backend(), saved);
      cache.set_length(0, static_cast<std::int32_t>(L));
      Tensor<std::int32_t, 2> kept({1, accepted + 1});
      for (std::int64_t i = 0; i <= accepted; ++i) kept(0, i) = feed(0, i);
      ForwardOptions again;
      again.last_only = true;
      (void)model.forward(kept, cache, again);
      fed += accepted + 1;
    }
    cache.set_length(0, static_cast<std::int32_t>(L + 1 + accepted));
    // The drafter takes the kept rows even after the last pass: a Session's drafter follows its cache across turns.
    if constexpr (kHidden) drafter.observe(hidden, L, accepted + 1, context);
  }
  return fed;
}
}  // namespace detail

/// Generation of one prompt (greedy or sampled) with drafts from `drafter` (PromptLookupDrafter, ModelDrafter, or any class with
/// `std::vector<std::int32_t> propose(const std::vector<std::int32_t>& context, std::int64_t k)`), verified by
/// `model` K + 1 rows at a time. The result is generate()'s for one row (tokens, text, finish reason, logprobs,
/// timings; decode_steps counts the verify passes). `stats` (optional) receives the acceptance per draft position.
/// `cache_capacity` defaults to prompt + max_new_tokens + draft_max.
template <class Model, class Drafter>
GenerateResult generate_speculative(Model& model, const std::vector<std::int32_t>& prompt, const GenerateOptions& opt,
                                    Drafter& drafter, const SpeculativeOptions& spec = {},
                                    SpeculativeStats* stats = nullptr, std::int64_t cache_capacity = 0) {
  MAXTEXT_CHECK(!prompt.empty(), ArgumentError, "[speculative] empty prompt (a BOS token at least is needed)");
  SpeculativeStats local;
  SpeculativeStats& st = stats ? *stats : local;
  detail::begin_speculative(opt, spec, st);
  const auto P = static_cast<std::int64_t>(prompt.size());
  if (cache_capacity <= 0) cache_capacity = P + opt.max_new_tokens + spec.draft_max;
  MAXTEXT_CHECK(P + opt.max_new_tokens <= cache_capacity, ArgumentError, "[speculative] prompt (", P,
                ") + max_new_tokens (", opt.max_new_tokens, ") exceed the cache capacity ", cache_capacity);
  GenerateResult res;
  detail::init_result(res, 1);
  res.prompt_tokens = P;
  detail::RowDecoder row(opt, opt.sampling, prompt);
  if (opt.max_new_tokens == 0 || opt.stop.stop_requested()) {
    row.finish(0, res, opt.max_new_tokens == 0 ? FinishReason::length : FinishReason::cancelled);
    return res;
  }
  auto cache = model.make_cache(1, cache_capacity);
  using clock = std::chrono::steady_clock;
  Tensor<std::int32_t, 2> tok({1, P});
  for (std::int64_t t = 0; t < P; ++t) tok(0, t) = prompt[static_cast<std::size_t>(t)];
  ForwardOptions last;
  last.last_only = true;
  Tensor<float, 2> hidden;  // the model's raw hidden states, for drafters that read them
  constexpr bool kHidden = detail::HiddenStateDrafter<Drafter>;
  if constexpr (kHidden) last.hidden_out = &hidden;
  auto t0 = clock::now();
  Tensor<float, 3> logits = model.forward(tok, cache, last);
  res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();

  std::vector<std::int32_t> context = prompt;  // the prompt and every token chosen; the cache holds all but the last
  context.push_back(row.step(&logits(0, 0, 0), logits.dim(2), 0, res));
  if constexpr (kHidden) {
    if (!row.done()) drafter.observe(hidden, 0, P, context);
  }
  auto t1 = clock::now();
  detail::speculative_passes(model, cache, context, row, res, opt, drafter, spec, st, hidden);
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace maxtext::models
