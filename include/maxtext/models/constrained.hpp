// models/constrained.hpp: generation constrained by a grammar (models/grammar.hpp; a JSON Schema compiles to one,
// models/json_schema.hpp). Each step, the tokens whose text the grammar cannot take next get logit -inf, the sampler
// chooses among the others (temperature, top-k, top-p, penalties as in generate()), and the chosen token's text is fed
// to the matcher. The end-of-sequence tokens (GenerateOptions::stop_tokens) are allowed only where the text is a
// whole sentence of the grammar, so a generation that stops on them is always complete.
//
//   auto g = models::grammar::grammar_from_json_schema(schema);
//   auto r = models::generate_constrained(model, tk, tk.encode(prompt), opt, g);   // r.text[0] follows the schema
//   auto a = models::generate_constrained(session, tk, tk.encode(turn, false), opt, g);  // a conversation's answer
//
// A token's text is the tokenizer's piece(prev, id): the bytes it adds after `prev` (byte-fallback pieces may be part
// of a UTF-8 character; the matcher takes those). The generation ends with FinishReason::stop_token when the grammar's
// sentence is complete and nothing may follow it, even without an end-of-sequence token. A step where the grammar
// needs text that no token of the vocabulary starts with is refused by name. Log-probabilities (opt.logprobs) are
// those of the constrained distribution (the masked logits), the one tokens are drawn from.
//
// Cost: each step walks the vocabulary's trie (grammar::TokenTrie, made once and again only when the pieces change)
// with the matcher: a prefix the grammar refuses rules out every token under it. On Llama 3's 128k tokens and a JSON
// schema: 0.1-3 ms a step where few tokens fit, ~50 ms inside a string where nearly all do (one matcher run per token
// took 17-280 ms). The pieces are asked of the tokenizer (16 ms for 128k tokens) at the first step and again only where
// the token before changes them (Tokenizer::piece_context: after BOS or a special token).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/grammar.hpp"
#include "maxtext/models/session.hpp"

namespace maxtext::models {

namespace detail {

/// The decode loop of constrained generation, after the prefill: `logits` [V] are those after the context (whose
/// last token is `prev`). Each step masks them to the tokens the matcher takes (end-of-sequence only on a whole
/// sentence), lets `row` choose, feeds the choice's text to the matcher and hands the token to `took(t)`; while the
/// row goes on, `next()` returns the logits after it (a std::pair<const float*, std::int64_t>).
template <class Tok, class Took, class Next>
void constrained_steps(const Tok& tk, std::int32_t prev, const GenerateOptions& opt, grammar::Matcher& matcher,
                       RowDecoder& row, GenerateResult& res, const float* logits, std::int64_t V, Took&& took,
                       Next&& next) {
  std::int64_t tk_vocab = std::numeric_limits<std::int64_t>::max();
  if constexpr (requires { tk.vocab_size(); }) tk_vocab = static_cast<std::int64_t>(tk.vocab_size());
  std::vector<float> masked;
  std::vector<std::string> pieces, fresh;
  grammar::TokenTrie trie;  // the vocabulary's trie, made again only when the pieces change (they may depend on prev)
  std::int64_t context = 0;
  for (;;) {
    // The pieces are asked again only when prev may change them (Tokenizer::piece_context; every step without it).
    std::int64_t c = prev;
    if constexpr (requires { tk.piece_context(prev); }) c = tk.piece_context(prev);
    if (static_cast<std::int64_t>(pieces.size()) != V || c != context) {  // the first step, or another context
      context = c;
      fresh.resize(static_cast<std::size_t>(V));
      for (std::int64_t t = 0; t < V; ++t) {
        // Ids past the tokenizer's vocabulary (a model's padded embedding rows, as Qwen's 151936 over 151669 tokens)
        // have no text: an empty piece, never allowed.
        const auto u = static_cast<std::size_t>(t);
        fresh[u] = t < tk_vocab ? tk.piece(prev, static_cast<std::int32_t>(t)) : std::string();
      }
      if (fresh != pieces) {
        pieces.swap(fresh);
        trie = grammar::TokenTrie(pieces);
      }
    }
    masked.assign(logits, logits + V);
    grammar::mask_logits(matcher, trie, opt.stop_tokens, masked.data(), V);
    const bool any = std::any_of(masked.begin(), masked.end(),
                                 [](float x) { return x != -std::numeric_limits<float>::infinity(); });
    if (!any) {
      if (matcher.complete()) {  // a whole sentence that nothing may follow, and no end-of-sequence token to say so
        row.finish(0, res, FinishReason::stop_token);
        break;
      }
      MAXTEXT_THROW(ArgumentError, "[constrained] no token of the vocabulary continues the text here (after ",
                    res.tokens[0].size(), " generated tokens): the grammar needs text that no token starts with");
    }
    const std::int32_t t = row.step(masked.data(), V, 0, res);
    if (std::find(opt.stop_tokens.begin(), opt.stop_tokens.end(), t) == opt.stop_tokens.end()) {
      const bool accepted = matcher.accept(pieces[static_cast<std::size_t>(t)]);
      MAXTEXT_CHECK(accepted, ArgumentError, "[constrained] internal: token ", t, " was allowed but not taken");
    }
    took(t);
    prev = t;
    if (row.done()) break;
    if (opt.stop.stop_requested()) {
      row.finish(0, res, FinishReason::cancelled);
      break;
    }
    std::tie(logits, V) = next();
    ++res.decode_steps;
  }
}

}  // namespace detail

/// Greedy or sampled generation of one prompt whose generated text follows grammar `g` (its start rule `root`).
/// `tk`: anything with `std::string piece(std::int32_t prev, std::int32_t id) const` (tokenizer::Tokenizer); with a
/// `vocab_size()`, ids at or past it (a model's padded embedding rows) are never chosen.
template <class Model, class Tok>
GenerateResult generate_constrained(Model& model, const Tok& tk, const std::vector<std::int32_t>& prompt,
                                    const GenerateOptions& opt, std::shared_ptr<const grammar::Grammar> g,
                                    std::int64_t cache_capacity = 0) {
  MAXTEXT_CHECK(!prompt.empty(), ArgumentError, "[constrained] empty prompt (a BOS token at least is needed)");
  MAXTEXT_CHECK(opt.max_new_tokens >= 0, ArgumentError, "[constrained] max_new_tokens must be >= 0");
  MAXTEXT_CHECK(opt.top_logprobs >= 0, ArgumentError, "[constrained] top_logprobs must be >= 0");
  grammar::Matcher matcher(std::move(g));
  const auto P = static_cast<std::int64_t>(prompt.size());
  if (cache_capacity <= 0) cache_capacity = P + opt.max_new_tokens;
  MAXTEXT_CHECK(P + opt.max_new_tokens <= cache_capacity, ArgumentError, "[constrained] prompt (", P,
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
  auto t0 = clock::now();
  Tensor<float, 3> logits = model.forward(tok, cache, last);
  res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  auto t1 = clock::now();
  Tensor<std::int32_t, 2> next({1, 1});
  detail::constrained_steps(
      tk, prompt.back(), opt, matcher, row, res, &logits(0, 0, 0), logits.dim(2), [&](std::int32_t t) { next(0, 0) = t; },
      [&] {
        logits = model.forward(next, cache, last);
        return std::pair<const float*, std::int64_t>(&logits(0, 0, 0), logits.dim(2));
      });
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

/// generate_constrained over a conversation (models/session.hpp): `new_tokens` join the session, then its answer
/// follows grammar `g`, each step run over the session's cache (only the tokens it has not cached are prefilled);
/// the generated tokens join the conversation, as Session::generate's do. The whole conversation is the context of
/// the repetition penalty. Greedy: the tokens generate_constrained gives on the whole conversation; sampled, with the
/// same seed, the same tokens too.
template <class Model, class Tok>
GenerateResult generate_constrained(Session<Model>& session, const Tok& tk, const std::vector<std::int32_t>& new_tokens,
                                    const GenerateOptions& opt, std::shared_ptr<const grammar::Grammar> g) {
  MAXTEXT_CHECK(opt.max_new_tokens >= 0, ArgumentError, "[constrained] max_new_tokens must be >= 0");
  MAXTEXT_CHECK(opt.top_logprobs >= 0, ArgumentError, "[constrained] top_logprobs must be >= 0");
  grammar::Matcher matcher(std::move(g));
  MAXTEXT_CHECK(opt.media_positions == nullptr, UnsupportedError, "[constrained] pictures with MRoPE's 3-D positions "
                "(media_positions) are not supported with a grammar yet");
  session.append(new_tokens, opt.media_mask, opt.media_embeddings);
  MAXTEXT_CHECK(session.length() > 0, ArgumentError, "[constrained] empty conversation (a BOS token at least is needed)");
  MAXTEXT_CHECK(session.length() + opt.max_new_tokens <= session.capacity(), ArgumentError, "[constrained] ",
                session.length(), " tokens + max_new_tokens ", opt.max_new_tokens, " exceed the session's capacity ",
                session.capacity());
  GenerateResult res;
  detail::init_result(res, 1);
  detail::RowDecoder row(opt, opt.sampling, session.tokens());
  if (opt.max_new_tokens == 0 || opt.stop.stop_requested()) {
    row.finish(0, res, opt.max_new_tokens == 0 ? FinishReason::length : FinishReason::cancelled);
    return res;
  }
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const std::vector<float>* l = &session.logits(&res.prompt_tokens);
  res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  auto t1 = clock::now();
  detail::constrained_steps(
      tk, session.tokens().back(), opt, matcher, row, res, l->data(), static_cast<std::int64_t>(l->size()),
      [&](std::int32_t t) { session.append({t}); },
      [&] {
        l = &session.logits();
        return std::pair<const float*, std::int64_t>(l->data(), static_cast<std::int64_t>(l->size()));
      });
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace maxtext::models
