// tokenizer/spm.hpp: SentencePiece-style BPE over a scored vocabulary (pieces with U+2581 for spaces, scores, byte
// fallback pieces <0xHH>), encoding exactly as llama.cpp's SPM tokenizer does for `llama` vocabularies:
//   * user-defined pieces (and, with parse_special, control pieces) are cut out of the text first, longest first;
//   * each remaining fragment gets a leading space when it starts the text or follows a special piece
//     (add_space_prefix), spaces become U+2581, and the fragment is split into UTF-8 characters (a lead byte's length
//     decides, so stray continuation bytes stand alone);
//   * adjacent symbols whose concatenation is a piece are merged, always the pair with the highest piece score
//     first, and among equal scores the leftmost pair;
//   * a final symbol that is not a piece is emitted as its bytes' <0xHH> pieces.
// Vocabularies come from GGUF metadata (tokenizer.ggml.*) or a llama2.c tokenizer.bin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/llama2c.hpp"

namespace maxtext::tokenizer {

/// Token types as GGUF stores them (tokenizer.ggml.token_type).
enum class TokenType : std::int32_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

/// What a tokenizer offers the generation loop and the CLI.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Token ids of `text`; BOS first when `add_bos` (the vocabulary's default when not given).
  virtual std::vector<std::int32_t> encode(std::string_view text, std::optional<bool> add_bos = std::nullopt) const = 0;
  /// The text of `id` when it follows `prev` in a stream (prev = -1 at the start): byte pieces are raw bytes,
  /// control tokens are empty, and a leading space right after BOS is dropped (SentencePiece / llama2.c decoding).
  virtual std::string piece(std::int32_t prev, std::int32_t id) const = 0;
  /// What of `prev` piece() depends on: piece(a, id) == piece(b, id) for every id whenever piece_context(a) ==
  /// piece_context(b). The default, `prev` itself, is always right; each tokenizer says which predecessors change
  /// pieces (BOS, special tokens, the start), so that a caller asking for the whole vocabulary's pieces at each step
  /// (constrained generation, models/constrained.hpp) asks again only when this changes.
  virtual std::int64_t piece_context(std::int32_t prev) const { return prev; }
  virtual std::int32_t bos() const = 0;
  virtual std::int32_t eos() const = 0;
  virtual std::int64_t vocab_size() const = 0;

  /// Decode a whole sequence (as `piece` does token by token); with `skip_special` false, special (control) tokens
  /// are written as their text instead of being dropped.
  virtual std::string decode(const std::vector<std::int32_t>& ids, bool skip_special = true) const {
    std::string out;
    std::int32_t prev = -1;
    for (std::int32_t id : ids) {
      if (!skip_special && is_special(id)) {
        out += id_to_token(id).value_or(std::string());
      } else {
        out += piece(prev, id);
      }
      prev = id;
    }
    return out;
  }
  /// The id of a token's text (a piece as the vocabulary writes it), if any.
  virtual std::optional<std::int32_t> token_to_id(std::string_view) const { return std::nullopt; }
  /// The text of token `id` as the vocabulary writes it, if any.
  virtual std::optional<std::string> id_to_token(std::int32_t) const { return std::nullopt; }
  /// Whether `id` is a special (control) token: skipped when decoding with skip_special.
  virtual bool is_special(std::int32_t id) const { return id >= 0 && (id == bos() || id == eos()); }
  /// Every id that ends generation (eos() first).
  virtual std::vector<std::int32_t> eos_ids() const {
    return eos() >= 0 ? std::vector<std::int32_t>{eos()} : std::vector<std::int32_t>{};
  }
};

/// The SentencePiece BPE vocabulary and its encoder.
class SpmTokenizer final : public Tokenizer {
 public:
  struct Token {
    std::string text;  ///< the piece, U+2581 for spaces
    float score = 0.0f;
    TokenType type = TokenType::normal;
  };

  SpmTokenizer() = default;

  /// Build from pieces, scores and types (types may be empty: inferred as llama2.c vocabularies need).
  SpmTokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::vector<TokenType> types,
               std::int32_t bos, std::int32_t eos, std::int32_t unk, std::string where);

  /// From GGUF metadata: tokenizer.ggml.model must be "llama" (SentencePiece BPE).
  static SpmTokenizer from_gguf(const io::GgufFile& g);

  /// From a llama2.c tokenizer.bin (pieces with plain spaces; BOS 1, EOS 2, <unk> 0; <0xHH> pieces are bytes).
  static SpmTokenizer from_llama2c(const std::string& path, std::int64_t expected_vocab = 0);

  std::vector<std::int32_t> encode(std::string_view text, std::optional<bool> add_bos = std::nullopt) const override {
    return encode_ex(text, add_bos.value_or(add_bos_), false);
  }

  /// encode with llama.cpp's parse_special (control pieces such as "<s>" in the text become their ids).
  std::vector<std::int32_t> encode_ex(std::string_view text, bool add_bos, bool parse_special) const;

  std::string piece(std::int32_t prev, std::int32_t id) const override;
  /// Only a BOS before the token changes its text (the leading space dropped).
  std::int64_t piece_context(std::int32_t prev) const override {
    return prev >= 0 && prev == bos_ && add_space_prefix_;
  }

  std::int32_t bos() const override { return bos_; }
  std::int32_t eos() const override { return eos_; }
  std::optional<std::int32_t> token_to_id(std::string_view t) const override {
    const std::int32_t id = find(t);
    return id >= 0 ? std::optional<std::int32_t>(id) : std::nullopt;
  }
  std::optional<std::string> id_to_token(std::int32_t id) const override {
    if (id < 0 || id >= static_cast<std::int32_t>(tokens_.size())) return std::nullopt;
    return tokens_[static_cast<std::size_t>(id)].text;
  }
  bool is_special(std::int32_t id) const override {
    if (id < 0 || id >= static_cast<std::int32_t>(tokens_.size())) return false;
    const TokenType t = tokens_[static_cast<std::size_t>(id)].type;
    return t == TokenType::control || t == TokenType::unknown || t == TokenType::unused;
  }
  std::int32_t unk() const { return unk_; }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(tokens_.size()); }
  const Token& token(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  bool add_bos() const { return add_bos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  void set_add_bos(bool v) { add_bos_ = v; }
  void set_add_space_prefix(bool v) { add_space_prefix_ = v; }

  /// The byte of a "<0xHH>" piece, or -1.
  static int parse_byte_piece(const std::string& s) {
    if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int h = hex(s[3]), l = hex(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }

 private:
  std::int32_t find(std::string_view s) const {
    auto it = index_.find(std::string(s));
    return it == index_.end() ? -1 : it->second;
  }
  std::int32_t byte_token(unsigned char b) const {
    static const char* hex = "0123456789ABCDEF";
    const char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
    std::int32_t id = find(buf);
    if (id < 0) id = find(std::string(1, static_cast<char>(b)));
    MAXTEXT_CHECK(id >= 0, ArgumentError, "[tokenizer] ", where_, ": byte 0x", hex[b >> 4], hex[b & 15],
                  " has no piece and no byte-fallback token");
    return id;
  }

  /// BPE over one fragment (already space-escaped): llama.cpp's symbol list + priority queue.
  void bpe(const std::string& text, std::vector<std::int32_t>& out) const {
    struct Sym {
      int prev, next;
      std::size_t off, n;
    };
    std::vector<Sym> sym;
    for (std::size_t off = 0; off < text.size();) {
      static const std::size_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
      const std::size_t len = std::min(lens[static_cast<unsigned char>(text[off]) >> 4], text.size() - off);
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
      off += len;
    }
    struct Bigram {
      int left, right;
      float score;
      std::size_t size;
    };
    // Highest score first; equal scores: smaller left index first.
    auto worse = [](const Bigram& a, const Bigram& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const std::size_t n = sym[static_cast<std::size_t>(l)].n + sym[static_cast<std::size_t>(r)].n;
      const std::int32_t id = find(std::string_view(text).substr(sym[static_cast<std::size_t>(l)].off, n));
      if (id < 0) return;
      queue.push({l, r, tokens_[static_cast<std::size_t>(id)].score, n});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Sym& l = sym[static_cast<std::size_t>(b.left)];
      Sym& r = sym[static_cast<std::size_t>(b.right)];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale: a side was merged since
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[static_cast<std::size_t>(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[static_cast<std::size_t>(i)].next) {
      const Sym& s = sym[static_cast<std::size_t>(i)];
      const std::string_view piece = std::string_view(text).substr(s.off, s.n);
      const std::int32_t id = find(piece);
      if (id >= 0) {
        out.push_back(id);
      } else {
        // Merged symbols are always pieces; only single characters can be missing: emit their bytes.
        for (unsigned char c : piece) out.push_back(byte_token(c));
      }
    }
  }

  std::vector<Token> tokens_;
  std::unordered_map<std::string, std::int32_t> index_;
  std::vector<std::int32_t> specials_;  // user-defined/control/unknown ids, longest text first
  std::int32_t bos_ = 1, eos_ = 2, unk_ = 0;
  bool add_bos_ = true, add_eos_ = false, add_space_prefix_ = true;
  std::string where_;
};

// The loading and encoding entry points are MAXTEXT_API (core/macros.hpp): compiled once in this project's programs.
// `piece` is then the class's key function there, so its virtual table is compiled once too.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API SpmTokenizer::SpmTokenizer(std::vector<std::string> pieces, std::vector<float> scores,
                                       std::vector<TokenType> types, std::int32_t bos, std::int32_t eos,
                                       std::int32_t unk, std::string where)
    : bos_(bos), eos_(eos), unk_(unk), where_(std::move(where)) {
  MAXTEXT_CHECK(!pieces.empty(), IoError, "[tokenizer] ", where_, ": empty vocabulary");
  MAXTEXT_CHECK(scores.empty() || scores.size() >= pieces.size(), IoError, "[tokenizer] ", where_, ": ", scores.size(),
                " scores for ", pieces.size(), " pieces");
  MAXTEXT_CHECK(types.empty() || types.size() >= pieces.size(), IoError, "[tokenizer] ", where_, ": ", types.size(),
                " token types for ", pieces.size(), " pieces");
  tokens_.resize(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    Token& t = tokens_[i];
    t.text = pieces[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : std::move(pieces[i]);
    t.score = scores.empty() ? 0.0f : scores[i];
    t.type = types.empty() ? TokenType::normal : types[i];
    // Later duplicates win, as in llama.cpp releases that accepted them.
    index_[t.text] = static_cast<std::int32_t>(i);
    if (t.type == TokenType::byte) {
      const int b = parse_byte_piece(t.text);
      MAXTEXT_CHECK(b >= 0, IoError, "[tokenizer] ", where_, ": token ", i, " has type byte but text '", t.text,
                    "' is not <0xHH>");
    }
  }
  auto valid = [&](std::int32_t id) { return id >= 0 && id < static_cast<std::int32_t>(tokens_.size()); };
  if (!valid(bos_)) bos_ = -1;
  if (!valid(eos_)) eos_ = -1;
  if (!valid(unk_)) unk_ = -1;
  add_bos_ = bos_ >= 0;  // from_gguf applies tokenizer.ggml.add_bos_token after construction
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const TokenType ty = tokens_[i].type;
    if (ty == TokenType::user_defined || ty == TokenType::control || ty == TokenType::unknown) {
      specials_.push_back(static_cast<std::int32_t>(i));
    }
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](std::int32_t a, std::int32_t b) {
    return tokens_[static_cast<std::size_t>(a)].text.size() > tokens_[static_cast<std::size_t>(b)].text.size();
  });
}

MAXTEXT_API SpmTokenizer SpmTokenizer::from_gguf(const io::GgufFile& g) {
  const std::string model = g.get_string("tokenizer.ggml.model");
  MAXTEXT_CHECK(!model.empty(), IoError, "[tokenizer] ", g.path, ": no tokenizer.ggml.model (the file has no tokenizer)");
  MAXTEXT_CHECK(model == "llama", UnsupportedError, "[tokenizer] ", g.path, ": tokenizer.ggml.model '", model,
                "' is not supported (llama = SentencePiece BPE)");
  const io::GgufValue& toks = g.at("tokenizer.ggml.tokens");
  MAXTEXT_CHECK(toks.is_array() && toks.elem == io::GgufType::string, IoError, "[tokenizer] ", g.path,
                ": tokenizer.ggml.tokens must be an array of strings");
  std::vector<float> scores;
  if (const io::GgufValue* s = g.find("tokenizer.ggml.scores")) {
    MAXTEXT_CHECK(s->is_array() && (s->elem == io::GgufType::f32 || s->elem == io::GgufType::i32), IoError, "[tokenizer] ",
                  g.path, ": tokenizer.ggml.scores must be an array of f32");
    if (s->elem == io::GgufType::f32) {
      for (double v : s->floats) scores.push_back(static_cast<float>(v));
    } else {
      for (auto v : s->ints) scores.push_back(static_cast<float>(v));
    }
  }
  std::vector<TokenType> types;
  if (const io::GgufValue* t = g.find("tokenizer.ggml.token_type")) {
    MAXTEXT_CHECK(t->is_array() && t->elem == io::GgufType::i32, IoError, "[tokenizer] ", g.path,
                  ": tokenizer.ggml.token_type must be an array of i32");
    for (auto v : t->ints) types.push_back(v >= 0 && v <= 6 ? static_cast<TokenType>(v) : TokenType::undefined);
  }
  auto id = [&](const char* key, std::int32_t dflt) {
    const io::GgufValue* v = g.find(key);
    if (!v) return dflt;
    const std::int64_t x = v->as_int(g.where(key));
    // llama.cpp ignores ids outside the vocabulary (some converters write 0xFFFFFFFF for "none").
    return x >= 0 && x < static_cast<std::int64_t>(toks.strings.size()) ? static_cast<std::int32_t>(x) : dflt;
  };
  SpmTokenizer tk(toks.strings, std::move(scores), std::move(types), id("tokenizer.ggml.bos_token_id", 1),
                  id("tokenizer.ggml.eos_token_id", 2), id("tokenizer.ggml.unknown_token_id", 0), g.path);
  tk.add_bos_ = g.get_bool("tokenizer.ggml.add_bos_token", true);
  tk.add_eos_ = g.get_bool("tokenizer.ggml.add_eos_token", false);
  tk.add_space_prefix_ = g.get_bool("tokenizer.ggml.add_space_prefix", true);
  MAXTEXT_CHECK(!tk.add_bos_ || tk.bos_ >= 0, IoError, "[tokenizer] ", g.path, ": add_bos_token is set but there is no BOS");
  MAXTEXT_CHECK(!tk.add_eos_ || tk.eos_ >= 0, IoError, "[tokenizer] ", g.path, ": add_eos_token is set but there is no EOS");
  return tk;
}

MAXTEXT_API SpmTokenizer SpmTokenizer::from_llama2c(const std::string& path, std::int64_t expected_vocab) {
  io::Llama2cVocab v = io::read_llama2c_tokenizer(path, expected_vocab);
  std::vector<TokenType> types(v.pieces.size(), TokenType::normal);
  for (std::size_t i = 0; i < v.pieces.size(); ++i) {
    std::string& p = v.pieces[i];
    if (parse_byte_piece(p) >= 0) {
      types[i] = TokenType::byte;
    } else {
      std::string q;
      for (char c : p) q += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
      p = std::move(q);
    }
  }
  if (types.size() > 0) types[0] = TokenType::unknown;
  if (types.size() > 1) types[1] = TokenType::control;
  if (types.size() > 2) types[2] = TokenType::control;
  return SpmTokenizer(std::move(v.pieces), std::move(v.scores), std::move(types), 1, 2, 0, path);
}

MAXTEXT_API std::vector<std::int32_t> SpmTokenizer::encode_ex(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<std::int32_t> out;
  if (add_bos) {
    MAXTEXT_CHECK(bos_ >= 0, ArgumentError, "[tokenizer] ", where_, ": no BOS token to add");
    out.push_back(bos_);
  }
  struct Fragment {
    std::size_t begin, len;
    std::int32_t token;  // -1: raw text
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({0, text.size(), -1});
  for (std::int32_t sid : specials_) {
    const Token& st = tokens_[static_cast<std::size_t>(sid)];
    if (!parse_special && st.type != TokenType::user_defined) continue;
    const std::string& pat = st.text;
    std::vector<Fragment> next;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::size_t pos = f.begin;
      const std::size_t end = f.begin + f.len;
      for (;;) {
        const std::size_t m = text.substr(0, end).find(pat, pos);
        if (m == std::string_view::npos) break;
        if (m > pos) next.push_back({pos, m - pos, -1});
        next.push_back({m, pat.size(), sid});
        pos = m + pat.size();
      }
      if (pos < end) next.push_back({pos, end - pos, -1});
    }
    frags = std::move(next);
  }
  bool prev_special = true;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string s;
    if (add_space_prefix_ && prev_special) s = " ";
    s.append(text.substr(f.begin, f.len));
    std::string escaped;
    escaped.reserve(s.size() + 8);
    for (char c : s) {
      if (c == ' ') {
        escaped += "\xe2\x96\x81";
      } else {
        escaped += c;
      }
    }
    bpe(escaped, out);
    prev_special = false;
  }
  if (add_bos && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

MAXTEXT_API std::string SpmTokenizer::piece(std::int32_t prev, std::int32_t id) const {
  MAXTEXT_CHECK(id >= 0 && id < static_cast<std::int32_t>(tokens_.size()), ArgumentError, "[tokenizer] token id ", id,
                " outside the vocabulary [0, ", tokens_.size(), ")");
  const Token& t = tokens_[static_cast<std::size_t>(id)];
  switch (t.type) {
    case TokenType::control:
    case TokenType::unknown:
    case TokenType::unused:
    case TokenType::undefined:
      return {};
    case TokenType::byte:
      return std::string(1, static_cast<char>(parse_byte_piece(t.text)));
    case TokenType::user_defined:
      return t.text;
    case TokenType::normal:
      break;
  }
  std::string s;
  for (std::size_t i = 0; i < t.text.size();) {
    if (t.text.compare(i, 3, "\xe2\x96\x81") == 0) {
      s += ' ';
      i += 3;
    } else {
      s += t.text[i++];
    }
  }
  if (prev >= 0 && prev == bos_ && add_space_prefix_ && !s.empty() && s[0] == ' ') s.erase(0, 1);
  return s;
}
#endif

}  // namespace maxtext::tokenizer
