// tests/fuzz/entry/grammar.hpp: fuzz entry points for GBNF grammars (models/grammar.hpp) and JSON Schemas compiled to
// them (models/json_schema.hpp). fuzz_grammar: the input is a grammar, then
// optionally a NUL byte and a text (its first 256 bytes): the grammar is parsed, and the text is fed to a matcher in pieces of one to three
// bytes (each also asked first through allows(), and the vocabulary of allowed_tokens() asked after each, per token
// and through its trie, which must agree), until the grammar refuses a piece.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "maxtext/models/grammar.hpp"
#include "maxtext/models/json_schema.hpp"

namespace maxtext::fuzz {

inline void fuzz_grammar(const std::uint8_t* data, std::size_t size) {
  namespace gr = maxtext::models::grammar;
  const std::string_view in = as_text(data, size);
  const std::size_t cut = in.find('\0');
  const std::string_view gtext = in.substr(0, cut);
  // At most kMaxText bytes of text: a matcher may spend up to its bounds (kMaxStacks, kMaxStepWork) on every code
  // point, ten times per piece here; a longer text finds nothing new but can pass libFuzzer's 1 s per input.
  constexpr std::size_t kMaxText = 256;
  const std::string_view text = cut == std::string_view::npos ? std::string_view() : in.substr(cut + 1, kMaxText);
  std::shared_ptr<const gr::Grammar> g;
  if (!attempt([&] { g = std::make_shared<const gr::Grammar>(gr::Grammar::parse(gtext)); })) return;
  attempt([&] {
    gr::Matcher m(g);
    const std::vector<std::string> vocab = {"a", "{", "\"", " ", "\xE3\x81", "\x82", "12", "", "ab", "a", "{\"", "\xE3"};
    const gr::TokenTrie trie(vocab);
    // A piece's work grows with the stacks the matcher keeps alive (up to kMaxStacks, each followed through the piece
    // and through the vocabulary's trie twice): the stacks summed over the pieces are held to kStackBudget, so that a
    // grammar that keeps hundreds of stacks alive ends its text early instead of passing libFuzzer's 1 s per input
    // (a 61 kB grammar of 900 alternatives with a 60-byte common prefix took 0.42 s alone with ASan, 0.14 s with the
    // budget; a busy CI machine stretches that). A grammar with a few dozen stacks still reads its whole text.
    constexpr std::size_t kStackBudget = 4096;
    std::size_t spent = 0;
    for (std::size_t i = 0; i < text.size();) {
      spent += m.num_stacks();
      if (spent > kStackBudget) break;
      const std::size_t n = std::min<std::size_t>(1 + static_cast<unsigned char>(text[i]) % 3, text.size() - i);
      const std::string_view piece = text.substr(i, n);
      const bool allowed = m.allows(piece);
      const bool took = m.accept(piece);
      if (allowed != took) std::abort();  // allows() must predict accept()
      if (!took) break;
      (void)m.complete();
      const std::size_t arena = m.num_nodes();
      if (gr::allowed_tokens(m, vocab) != gr::allowed_tokens(m, trie)) std::abort();  // the trie walk must agree
      if (m.num_nodes() != arena) std::abort();                                        // and leave no node behind
      i += n;
    }
  });
}

/// A JSON Schema (the whole input, as JSON): compiled to GBNF, which must then parse (a compiler output the parser
/// refuses is a finding), and a matcher started on it.
inline void fuzz_json_schema(const std::uint8_t* data, std::size_t size) {
  namespace gr = maxtext::models::grammar;
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(as_text(data, size));
  } catch (const nlohmann::json::exception&) {
    return;
  }
  std::string gbnf;
  if (!attempt([&] { gbnf = gr::json_schema_to_gbnf(schema); })) return;
  std::shared_ptr<const gr::Grammar> g;
  try {
    g = std::make_shared<const gr::Grammar>(gr::Grammar::parse(gbnf));
  } catch (const maxtext::Error&) {
    std::abort();  // the compiler wrote a grammar the parser refuses
  }
  attempt([&] {
    gr::Matcher m(g);
    (void)m.allows("{\"a\": [1, \"x\", null]}");
    (void)m.allows("\"abc\"");
  });
}

}  // namespace maxtext::fuzz
