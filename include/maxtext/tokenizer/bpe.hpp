// tokenizer/bpe.hpp: the BPE model of Hugging Face tokenizer.json files (model.type "BPE"): a vocabulary, ranked
// merges, and the options of byte-level (GPT-2) and SentencePiece-style vocabularies: byte_fallback (<0xNN> pieces for
// characters outside the vocabulary), ignore_merges (a word that is a piece is that piece), unk_token,
// continuing_subword_prefix / end_of_word_suffix. A word is split into characters; then, repeatedly, the adjacent pair
// with the lowest merge rank (the leftmost among equal ranks) is merged: a priority queue over a linked list of symbols,
// O(n log n) in the word's length. Results for short words are cached (bounded).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/tokenizer/unicode.hpp"

namespace maxtext::tokenizer {

/// Hash for unordered maps keyed by std::string that are looked up with std::string_view (no temporary strings).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  static constexpr std::size_t max_cached_word = 256;   ///< longer words (bytes) are not cached
  static constexpr std::size_t cache_capacity = 20000;  ///< the cache is emptied when it reaches this many words

  BpeModel() = default;

  /// `vocab`: piece -> id (ids unique); `merges`: pairs of pieces in rank order; `where` names the file in errors.
  BpeModel(std::vector<std::pair<std::string, std::int32_t>> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions opt, const std::string& where)
      : opt_(std::move(opt)) {
    std::int32_t max_id = -1;
    for (const auto& [piece, id] : vocab) {
      MAXTEXT_CHECK(id >= 0, ConfigError, "[tokenizer] ", where, ": model.vocab['", piece, "'] has negative id ", id);
      max_id = std::max(max_id, id);
    }
    MAXTEXT_CHECK(max_id < (1 << 28), ConfigError, "[tokenizer] ", where, ": model.vocab id ", max_id, " is too large");
    by_id_.assign(static_cast<std::size_t>(max_id + 1), std::string());
    std::vector<bool> used(by_id_.size(), false);
    index_.reserve(vocab.size() * 2);
    for (auto& [piece, id] : vocab) {
      MAXTEXT_CHECK(!used[static_cast<std::size_t>(id)], ConfigError, "[tokenizer] ", where, ": model.vocab: id ", id,
                    " is given to both '", by_id_[static_cast<std::size_t>(id)], "' and '", piece, "'");
      used[static_cast<std::size_t>(id)] = true;
      by_id_[static_cast<std::size_t>(id)] = piece;
      index_.emplace(std::move(piece), id);
    }
    merges_.reserve(merges.size() * 2);
    const std::string& pre = opt_.continuing_subword_prefix;
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const auto& [a, b] = merges[r];
      const std::int32_t ia = find(a), ib = find(b);
      MAXTEXT_CHECK(ia >= 0, ConfigError, "[tokenizer] ", where, ": model.merges[", r, "] names '", a, "', which is not in the vocabulary");
      MAXTEXT_CHECK(ib >= 0, ConfigError, "[tokenizer] ", where, ": model.merges[", r, "] names '", b, "', which is not in the vocabulary");
      const std::string joined = a + (!pre.empty() && b.compare(0, pre.size(), pre) == 0 ? b.substr(pre.size()) : b);
      const std::int32_t im = find(joined);
      MAXTEXT_CHECK(im >= 0, ConfigError, "[tokenizer] ", where, ": model.merges[", r, "] makes '", joined,
                    "', which is not in the vocabulary");
      merges_.emplace(key(ia, ib), Merge{static_cast<std::int32_t>(r), im});  // the first (lowest) rank of a pair wins
    }
    if (opt_.unk_token) {
      unk_ = find(*opt_.unk_token);
      MAXTEXT_CHECK(unk_ >= 0, ConfigError, "[tokenizer] ", where, ": model.unk_token '", *opt_.unk_token,
                    "' is not in the vocabulary");
    }
    if (opt_.byte_fallback) {
      static const char* hex = "0123456789ABCDEF";
      for (int b = 0; b < 256; ++b) {
        const char s[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        byte_ids_[static_cast<std::size_t>(b)] = find(s);
      }
    }
  }

  /// The id of `piece`, or -1.
  std::int32_t find(std::string_view piece) const {
    auto it = index_.find(piece);
    return it == index_.end() ? -1 : it->second;
  }
  /// The piece of `id` ("" for ids without one).
  const std::string& piece(std::int32_t id) const { return by_id_.at(static_cast<std::size_t>(id)); }
  std::int64_t size() const { return static_cast<std::int64_t>(by_id_.size()); }
  std::int32_t unk() const { return unk_; }
  const BpeOptions& options() const { return opt_; }

  /// Append the ids of one pre-tokenized word (valid UTF-8) to `out`.
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    if (opt_.ignore_merges) {
      const std::int32_t id = find(word);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    const bool cacheable = word.size() <= max_cached_word;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<std::int32_t> ids;
    merge_word(word, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.size() >= cache_capacity) cache_.clear();
      cache_.emplace(std::string(word), std::move(ids));
    }
  }

 private:
  struct Merge {
    std::int32_t rank, id;
  };
  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
    struct Sym {
      std::int32_t id;   // -1: a character outside the vocabulary
      int prev, next;
      std::size_t off, len;  // bytes of `word`
    };
    std::vector<Sym> sym;
    const std::string& pre = opt_.continuing_subword_prefix;
    const std::string& suf = opt_.end_of_word_suffix;
    for (std::size_t off = 0; off < word.size();) {
      std::size_t n = std::min(unicode::utf8_len(static_cast<unsigned char>(word[off])), word.size() - off);
      const bool first = off == 0, last = off + n == word.size();
      std::int32_t id;
      if ((first || pre.empty()) && (!last || suf.empty())) {
        id = find(word.substr(off, n));
      } else {
        id = find((first ? std::string() : pre) + std::string(word.substr(off, n)) + (last ? suf : std::string()));
      }
      const int idx = static_cast<int>(sym.size());
      sym.push_back({id, idx - 1, last ? -1 : idx + 1, off, n});
      off += n;
    }
    struct Cand {
      std::int32_t rank;
      int left;
      std::int32_t left_id, right_id, new_id;
    };
    auto later = [](const Cand& a, const Cand& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
    std::priority_queue<Cand, std::vector<Cand>, decltype(later)> queue(later);
    auto consider = [&](int l) {
      if (l < 0) return;
      const Sym& a = sym[static_cast<std::size_t>(l)];
      if (a.next < 0 || a.id < 0) return;
      const Sym& b = sym[static_cast<std::size_t>(a.next)];
      if (b.id < 0) return;
      auto it = merges_.find(key(a.id, b.id));
      if (it != merges_.end()) queue.push({it->second.rank, l, a.id, b.id, it->second.id});
    };
    for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i);
    while (!queue.empty()) {
      const Cand c = queue.top();
      queue.pop();
      Sym& a = sym[static_cast<std::size_t>(c.left)];
      if (a.len == 0 || a.id != c.left_id || a.next < 0) continue;  // stale
      Sym& b = sym[static_cast<std::size_t>(a.next)];
      if (b.id != c.right_id) continue;
      a.id = c.new_id;
      a.len += b.len;
      b.len = 0;
      a.next = b.next;
      if (b.next >= 0) sym[static_cast<std::size_t>(b.next)].prev = c.left;
      consider(a.prev);
      consider(c.left);
    }
    for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) {
      const Sym& s = sym[static_cast<std::size_t>(i)];
      if (s.id >= 0) {
        out.push_back(s.id);
        continue;
      }
      // A character outside the vocabulary: its bytes' <0xNN> pieces when all exist, else the unknown token.
      bool bytes_ok = opt_.byte_fallback;
      for (std::size_t k = 0; bytes_ok && k < s.len; ++k) {
        bytes_ok = byte_ids_[static_cast<unsigned char>(word[s.off + k])] >= 0;
      }
      if (bytes_ok) {
        for (std::size_t k = 0; k < s.len; ++k) out.push_back(byte_ids_[static_cast<unsigned char>(word[s.off + k])]);
      } else if (unk_ >= 0) {
        out.push_back(unk_);
      }
    }
  }

  BpeOptions opt_;
  StringMap<std::int32_t> index_;
  std::vector<std::string> by_id_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::int32_t unk_ = -1;
  std::array<std::int32_t, 256> byte_ids_{};
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<std::int32_t>> cache_;
};

}  // namespace maxtext::tokenizer
