// tests/support/piece_checks.hpp: Tokenizer::piece_context's contract, checked on a real vocabulary: predecessors
// with the same context give every token the same piece. The predecessors: the start (-1), BOS, EOS, every special
// token the vocabulary marks (up to 64) and 200 random ids; the tokens: every special one and 4000 random ones.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "maxtext/tokenizer/spm.hpp"

namespace maxtext::test {

inline void check_piece_context(const tokenizer::Tokenizer& tk, const std::string& name) {
  const auto V = static_cast<std::int32_t>(tk.vocab_size());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::int32_t> any(0, V - 1);
  std::vector<std::int32_t> prevs = {-1, tk.bos(), tk.eos()}, ids;
  for (std::int32_t id = 0; id < V; ++id) {
    if (!tk.is_special(id)) continue;
    ids.push_back(id);
    if (prevs.size() < 67) prevs.push_back(id);
  }
  for (int i = 0; i < 200; ++i) prevs.push_back(any(rng));
  for (int i = 0; i < 4000; ++i) ids.push_back(any(rng));
  std::map<std::int64_t, std::int32_t> first;  // context -> the first predecessor seen with it
  std::int64_t compared = 0;
  for (const std::int32_t p : prevs) {
    if (p >= V) continue;
    const auto [it, fresh] = first.emplace(tk.piece_context(p), p);
    if (fresh) continue;
    for (const std::int32_t id : ids) {
      if (tk.piece(p, id) != tk.piece(it->second, id)) {
        FAIL(name << ": token " << id << " has another piece after " << p << " than after " << it->second
                  << ", though both have piece_context " << it->first);
      }
      ++compared;
    }
  }
  // Every tokenizer here tells the start from the middle of a text: at least two contexts, and most predecessors
  // share one (else piece_context saves nothing).
  CHECK(first.size() >= 2);
  CHECK(first.size() <= 8);
  CHECK(compared > 0);
}

}  // namespace maxtext::test
