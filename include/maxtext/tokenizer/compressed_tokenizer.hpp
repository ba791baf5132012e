// tokenizer/compressed_tokenizer.hpp: MaxText layers/engram.py CompressedTokenizer: the many-to-one map from a
// tokenizer's ids to canonical ids that Engram hashes (so that "Apple", " apple" and "APPLE" share n-gram rows).
//
// For every id of the vocabulary (transformers' len(tokenizer): the model's ids and the added tokens):
//   text = decode([id]) with the special tokens kept;
//   key  = the raw token string, if text holds U+FFFD (a partial UTF-8 sequence);
//          else normalize(text), or text itself when that is empty;
//   the canonical id is the key's number in first-seen order (ids ascending).
// normalize is engram.py's normalizers.Sequence, built here from the same tokenizer.json components:
//   NFKC, NFD, StripAccents, Lowercase, Replace([ \t\r\n]+ -> " "), Replace(^ $ -> U+E000), Strip, Replace(U+E000 -> " ")
// so the Unicode work goes through libutf8proc and Oniguruma as for any tokenizer.json (hf_components.hpp); the
// components follow @huggingface/tokenizers where it and the Rust crate differ (docs/tokenizers.md).
// Computed once per tokenizer (DeepSeek-V3's 129,280 ids: well under a second) and handed to the model
// (models::Transformer::set_engram_vocab) with the tokenizer's pad token id.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/tokenizer/hf_components.hpp"
#include "maxtext/tokenizer/hf_tokenizer.hpp"

namespace maxtext::tokenizer {

/// CompressedTokenizer's table: lookup[id] = canonical id, `size` distinct canonical ids.
struct CompressedTokenTable {
  std::vector<std::int32_t> lookup;
  std::int64_t size = 0;
};

/// engram.py CompressedTokenizer._build_normalizer, as a tokenizer.json normalizer.
inline const hf::Normalizer& compressed_tokenizer_normalizer() {
  static const hf::Normalizer n = hf::make_normalizer(nlohmann::json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "NFKC"}, {"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
      {"type": "Replace", "pattern": {"Regex": "[ \t\r\n]+"}, "content": " "},
      {"type": "Replace", "pattern": {"Regex": "^ $"}, "content": "\uE000"},
      {"type": "Strip", "strip_left": true, "strip_right": true},
      {"type": "Replace", "pattern": {"String": "\uE000"}, "content": " "}]})"),
                                                     hf::Where{"engram CompressedTokenizer normalizer", ""});
  return n;
}

/// engram.py CompressedTokenizer._build_lookup_table over `tok`'s vocabulary.
inline CompressedTokenTable compressed_token_table(const HfTokenizer& tok) {
  const hf::Normalizer& normalize = compressed_tokenizer_normalizer();
  const std::int64_t V = tok.vocab_size();
  MAXTEXT_CHECK(V >= 1 && V <= (std::int64_t{1} << 28), ArgumentError, "[engram] a vocabulary of ", V,
                " tokens cannot be compressed");
  CompressedTokenTable t;
  t.lookup.resize(static_cast<std::size_t>(V));
  std::unordered_map<std::string, std::int32_t> ids;
  static const std::string replacement = "\xEF\xBF\xBD";  // U+FFFD
  for (std::int64_t id = 0; id < V; ++id) {
    const auto i = static_cast<std::int32_t>(id);
    const std::string text = tok.decode({i}, /*skip_special=*/false);
    std::string key;
    if (text.find(replacement) != std::string::npos) {
      key = tok.id_to_token(i).value_or(text);
    } else {
      key = normalize(text);
      if (key.empty()) key = text;
    }
    const auto [it, added] = ids.emplace(std::move(key), static_cast<std::int32_t>(ids.size()));
    t.lookup[static_cast<std::size_t>(id)] = it->second;
  }
  t.size = static_cast<std::int64_t>(ids.size());
  return t;
}

}  // namespace maxtext::tokenizer
