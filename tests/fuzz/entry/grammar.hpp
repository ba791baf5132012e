// tests/fuzz/entry/grammar.hpp: fuzz entry point for GBNF grammars (models/grammar.hpp). The input is a grammar, then
// optionally a NUL byte and a text: the grammar is parsed, and the text is fed to a matcher in pieces of one to three
// bytes (each also asked first through allows(), and the vocabulary of allowed_tokens() asked after each), until the
// grammar refuses a piece.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "maxtext/models/grammar.hpp"

namespace maxtext::fuzz {

inline void fuzz_grammar(const std::uint8_t* data, std::size_t size) {
  namespace gr = maxtext::models::grammar;
  const std::string_view in = as_text(data, size);
  const std::size_t cut = in.find('\0');
  const std::string_view gtext = in.substr(0, cut);
  const std::string_view text = cut == std::string_view::npos ? std::string_view() : in.substr(cut + 1);
  std::shared_ptr<const gr::Grammar> g;
  if (!attempt([&] { g = std::make_shared<const gr::Grammar>(gr::Grammar::parse(gtext)); })) return;
  attempt([&] {
    gr::Matcher m(g);
    const std::vector<std::string> vocab = {"a", "{", "\"", " ", "\xE3\x81", "\x82", "12", ""};
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t n = std::min<std::size_t>(1 + static_cast<unsigned char>(text[i]) % 3, text.size() - i);
      const std::string_view piece = text.substr(i, n);
      const bool allowed = m.allows(piece);
      const bool took = m.accept(piece);
      if (allowed != took) std::abort();  // allows() must predict accept()
      if (!took) break;
      (void)m.complete();
      (void)gr::allowed_tokens(m, vocab);
      i += n;
    }
  });
}

}  // namespace maxtext::fuzz
