// tokenizer/hf_tokenizer.hpp: Hugging Face tokenizer.json tokenizers (BPE models: byte-level GPT-2 style and
// SentencePiece style), as Hugging Face tokenizers / transformers encode and decode them:
//   added tokens are cut out of the raw text first (longest match, left to right; lstrip / rstrip eat the whitespace
//   beside them), then each remaining section is normalized, cut again at added tokens whose content is normalized,
//   pre-tokenized, and each piece goes through the BPE model; the post-processor adds the special tokens.
// Decoding maps ids to pieces (skipping special tokens on request), runs the decoder, replaces invalid UTF-8 by U+FFFD,
// and applies tokenizer_config.json's clean_up_tokenization_spaces (true when absent, as transformers.js does).
// Unsupported models, components and options are refused when the file is loaded, naming the file and the JSON path.
// Input text must be valid UTF-8 (ArgumentError naming the first bad byte otherwise).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/tokenizer/bpe.hpp"
#include "maxtext/tokenizer/hf_components.hpp"
#include "maxtext/tokenizer/spm.hpp"
#include "maxtext/tokenizer/unicode.hpp"

namespace maxtext::tokenizer {

/// An entry of tokenizer.json's added_tokens.
struct AddedToken {
  std::string content;
  std::int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

namespace hf::detail {

inline json read_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MAXTEXT_CHECK(f.good(), IoError, "[tokenizer] ", path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    MAXTEXT_THROW(ConfigError, "[tokenizer] ", path, ": not valid JSON: ", e.what());
  }
}

/// A byte trie of added-token contents: the longest acceptable token starting at a position.
class TokenTrie {
 public:
  void add(const std::string& s, std::size_t token) {
    if (s.empty()) return;
    if (nodes_.empty()) nodes_.push_back(-1);
    std::size_t n = 0;
    first_[static_cast<unsigned char>(s[0])] = true;
    for (unsigned char c : s) {
      const std::uint64_t k = (static_cast<std::uint64_t>(n) << 8) | c;
      auto it = edges_.find(k);
      if (it == edges_.end()) {
        it = edges_.emplace(k, nodes_.size()).first;
        nodes_.push_back(-1);
      }
      n = it->second;
    }
    if (nodes_[n] < 0) nodes_[n] = static_cast<std::int64_t>(token);
  }
  bool empty() const { return nodes_.empty(); }
  /// Longest match at text[i] that `accept(token, end)` allows: {token, end}, or {-1, i}.
  template <class Accept>
  std::pair<std::int64_t, std::size_t> match(std::string_view text, std::size_t i, Accept&& accept) const {
    std::pair<std::int64_t, std::size_t> best{-1, i};
    if (nodes_.empty() || !first_[static_cast<unsigned char>(text[i])]) return best;
    std::size_t n = 0;
    for (std::size_t j = i; j < text.size(); ++j) {
      auto it = edges_.find((static_cast<std::uint64_t>(n) << 8) | static_cast<unsigned char>(text[j]));
      if (it == edges_.end()) break;
      n = it->second;
      if (nodes_[n] >= 0 && accept(static_cast<std::size_t>(nodes_[n]), j + 1)) best = {nodes_[n], j + 1};
    }
    return best;
  }

 private:
  std::vector<std::int64_t> nodes_;  // token index at each node, -1 none
  std::unordered_map<std::uint64_t, std::size_t> edges_;
  bool first_[256] = {};
};

/// transformers' clean_up_tokenization: no space before . ? ! , and English contractions.
inline std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> rules[] = {{" .", "."},     {" ?", "?"},     {" !", "!"},
                                                              {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
                                                              {" 'm", "'m"},   {" 's", "'s"},   {" 've", "'ve"},
                                                              {" 're", "'re"}};
  for (const auto& [from, to] : rules) {
    const std::string f = from, t = to;
    std::string out;
    std::size_t prev = 0;
    for (std::size_t p = s.find(f); p != std::string::npos; p = s.find(f, p + f.size())) {
      out.append(s, prev, p - prev);
      out += t;
      prev = p + f.size();
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }
  return s;
}

/// The content of a tokenizer_config.json token entry: "text" or {"content": "text", ...}.
inline std::optional<std::string> token_content(const json* v) {
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() && v->contains("content") && (*v)["content"].is_string()) return (*v)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace hf::detail

/// A tokenizer.json tokenizer.
class HfTokenizer final : public Tokenizer {
 public:
  using json = nlohmann::json;

  /// Load `path` (a tokenizer.json, or a directory holding one), with tokenizer_config.json and generation_config.json
  /// from the same directory when present.
  static std::unique_ptr<HfTokenizer> from_file(const std::string& path);

  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  /// From parsed JSON: `tok` (tokenizer.json), `config` (tokenizer_config.json, may be {}), `generation`
  /// (generation_config.json, may be {}); `where` names the file in errors.
  HfTokenizer(const json& tok, const json& config, const std::string& where, const json& generation = json::object());

  /// Ids of `text`; `add_special` (default true) applies the post-processor's special tokens.
  std::vector<std::int32_t> encode(std::string_view text, std::optional<bool> add_special = std::nullopt) const override;
  /// Ids of a text pair (the post-processor's pair template).
  std::vector<std::int32_t> encode_pair(std::string_view a, std::string_view b, bool add_special = true) const;

  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special = true) const override;

  /// Raw bytes of `id` following `prev` in a stream (special tokens are empty; byte-level pieces may be partial UTF-8).
  std::string piece(std::int32_t prev, std::int32_t id) const override;
  /// Only whether the token starts the text (no predecessor, or a special one) changes its text.
  std::int64_t piece_context(std::int32_t prev) const override { return prev < 0 || special_ids_.count(prev) > 0; }

  std::int32_t bos() const override { return bos_; }
  /// tokenizer_config.json's pad_token (transformers' pad_token_id), or -1.
  std::int32_t pad() const { return pad_; }
  std::int32_t eos() const override { return eos_ids_.empty() ? -1 : eos_ids_.front(); }
  std::vector<std::int32_t> eos_ids() const override { return eos_ids_; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    auto it = added_by_content_.find(std::string(token));
    if (it != added_by_content_.end()) return added_[it->second].id;
    const std::int32_t id = model_->find(token);
    return id >= 0 ? std::optional<std::int32_t>(id) : std::nullopt;
  }
  std::optional<std::string> id_to_token(std::int32_t id) const override {
    if (id < 0 || id >= vocab_size_) return std::nullopt;
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return added_[it->second].content;
    if (id < model_->size() && !model_->piece(id).empty()) return model_->piece(id);
    return std::nullopt;
  }
  bool is_special(std::int32_t id) const override { return special_ids_.count(id) > 0; }

  /// With false, special tokens written in the text are tokenized as plain text (transformers' split_special_tokens).
  void set_parse_special(bool v) { parse_special_ = v; }
  bool parse_special() const { return parse_special_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const BpeModel& model() const { return *model_; }
  const std::string& path() const { return where_; }

 private:
  // ---- loading ----
  void load_model(const json& m, const hf::Where& w) {
    const std::string type = hf::get_string(m, "type", w);
    if (type != "BPE") hf::refuse(w / "type", "model type '" + type + "' (only BPE is implemented)");
    hf::only_fields(m, {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback",
                        "ignore_merges", "vocab", "merges"}, w);
    if (hf::opt(m, "dropout")) hf::refuse(w / "dropout", "BPE dropout");
    BpeOptions o;
    if (hf::opt(m, "unk_token")) o.unk_token = hf::get_string(m, "unk_token", w);
    o.byte_fallback = hf::get_bool_or(m, "byte_fallback", false, w);
    o.ignore_merges = hf::get_bool_or(m, "ignore_merges", false, w);
    o.fuse_unk = hf::get_bool_or(m, "fuse_unk", false, w);
    o.continuing_subword_prefix = hf::get_string_or(m, "continuing_subword_prefix", "", w);
    o.end_of_word_suffix = hf::get_string_or(m, "end_of_word_suffix", "", w);
    const json& v = hf::req(m, "vocab", w);
    if (!v.is_object()) hf::malformed(w / "vocab", "expected an object {piece: id}");
    std::vector<std::pair<std::string, std::int32_t>> vocab;
    vocab.reserve(v.size());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!it->is_number_integer()) hf::malformed(w / "vocab" / it.key(), "expected an integer id");
      const auto id = it->get<std::int64_t>();
      if (id < 0 || id >= (1 << 28)) hf::malformed(w / "vocab" / it.key(), "id " + std::to_string(id) + " out of range");
      vocab.emplace_back(it.key(), static_cast<std::int32_t>(id));
    }
    const json& mj = hf::get_array(m, "merges", w);
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(mj.size());
    for (std::size_t i = 0; i < mj.size(); ++i) {
      const json& e = mj[i];
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos) {
          hf::malformed(w / "merges" / i, "a merge must be two pieces separated by one space, found '" + s + "'");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        hf::malformed(w / "merges" / i, "a merge must be \"a b\" or [\"a\", \"b\"]");
      }
    }
    model_ = std::make_unique<BpeModel>(std::move(vocab), merges, o, w.str());
    vocab_size_ = model_->size();
  }

  void load_added(const json& tok, const hf::Where& root) {
    const json* a = hf::opt(tok, "added_tokens");
    if (!a) return;
    if (!a->is_array()) hf::malformed(root / "added_tokens", "expected an array");
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json& e = (*a)[i];
      const hf::Where w = root / "added_tokens" / i;
      AddedToken t;
      t.content = hf::get_string(e, "content", w);
      if (t.content.empty()) hf::malformed(w / "content", "empty added token");
      const json& id = hf::req(e, "id", w);
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= (1 << 28)) {
        hf::malformed(w / "id", "expected a non-negative integer id");
      }
      t.id = static_cast<std::int32_t>(id.get<std::int64_t>());
      t.special = hf::get_bool_or(e, "special", false, w);
      t.lstrip = hf::get_bool_or(e, "lstrip", false, w);
      t.rstrip = hf::get_bool_or(e, "rstrip", false, w);
      t.single_word = hf::get_bool_or(e, "single_word", false, w);
      t.normalized = hf::get_bool_or(e, "normalized", !t.special, w);
      MAXTEXT_CHECK(!added_by_id_.count(t.id), ConfigError, "[tokenizer] ", w.str(), ": id ", t.id, " is given to both '",
                    added_[added_by_id_[t.id]].content, "' and '", t.content, "'");
      MAXTEXT_CHECK(unicode::find_invalid_utf8(t.content) == std::string::npos, ConfigError, "[tokenizer] ", w.str(),
                    ": content is not valid UTF-8");
      added_by_id_[t.id] = added_.size();
      added_by_content_[t.content] = added_.size();
      if (t.special) special_ids_.insert(t.id);
      vocab_size_ = std::max<std::int64_t>(vocab_size_, t.id + 1);
      added_.push_back(std::move(t));
    }
  }

  void load_post_processor(const json& j, const hf::Where& w) {
    if (j.is_null()) return;
    const std::string type = hf::get_string(j, "type", w);
    if (type == "Sequence") {
      hf::only_fields(j, {"processors"}, w);
      const json& a = hf::get_array(j, "processors", w);
      for (std::size_t i = 0; i < a.size(); ++i) load_post_processor(a[i], w / "processors" / i);
      return;
    }
    if (type == "ByteLevel") {
      hf::only_fields(j, {"add_prefix_space", "trim_offsets", "use_regex"}, w);
      return;  // offsets only: the ids are unchanged
    }
    if (type != "TemplateProcessing") hf::refuse(w / "type", "post-processor '" + type + "'");
    hf::only_fields(j, {"single", "pair", "special_tokens"}, w);
    std::unordered_map<std::string, std::vector<std::int32_t>> specials;
    if (const json* st = hf::opt(j, "special_tokens")) {
      if (!st->is_object()) hf::malformed(w / "special_tokens", "expected an object");
      for (auto it = st->begin(); it != st->end(); ++it) {
        const hf::Where ws = w / "special_tokens" / it.key();
        const json& ids = hf::get_array(*it, "ids", ws);
        std::vector<std::int32_t> v;
        for (std::size_t k = 0; k < ids.size(); ++k) {
          if (!ids[k].is_number_integer()) hf::malformed(ws / "ids" / k, "expected an integer");
          const auto id = ids[k].get<std::int64_t>();
          if (id < 0 || id >= vocab_size_) hf::malformed(ws / "ids" / k, "id " + std::to_string(id) + " outside the vocabulary");
          v.push_back(static_cast<std::int32_t>(id));
        }
        specials[it.key()] = std::move(v);
      }
    }
    Template t;
    auto parse = [&](const char* key, std::vector<TemplateItem>& out, bool required) {
      const json* a = hf::opt(j, key);
      if (!a) {
        if (required) hf::malformed(w, std::string("missing field '") + key + "'");
        return;
      }
      if (!a->is_array()) hf::malformed(w / key, "expected an array");
      for (std::size_t i = 0; i < a->size(); ++i) {
        const hf::Where wi = w / key / i;
        const json& e = (*a)[i];
        if (const json* s = hf::opt(e, "SpecialToken")) {
          const std::string id = hf::get_string(*s, "id", wi / "SpecialToken");
          auto it = specials.find(id);
          if (it == specials.end()) hf::malformed(wi / "SpecialToken" / "id", "'" + id + "' is not in special_tokens");
          out.push_back({0, it->second});
        } else if (const json* q = hf::opt(e, "Sequence")) {
          const std::string id = hf::get_string(*q, "id", wi / "Sequence");
          if (id != "A" && id != "B") hf::malformed(wi / "Sequence" / "id", "expected \"A\" or \"B\", found '" + id + "'");
          out.push_back({id[0], {}});
        } else {
          hf::malformed(wi, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        }
      }
    };
    parse("single", t.single, true);
    parse("pair", t.pair, false);
    templates_.push_back(std::move(t));
  }

  void load_config(const json& cfg, const json& gen) {
    if (const json* c = hf::opt(cfg, "clean_up_tokenization_spaces")) clean_up_ = c->is_boolean() && c->get<bool>();
    if (auto b = hf::detail::token_content(hf::opt(cfg, "bos_token"))) bos_ = token_to_id(*b).value_or(-1);
    if (auto q = hf::detail::token_content(hf::opt(cfg, "pad_token"))) pad_ = token_to_id(*q).value_or(-1);
    auto add_eos = [&](std::int64_t id) {
      if (id >= 0 && id < vocab_size_ && std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) {
        eos_ids_.push_back(static_cast<std::int32_t>(id));
      }
    };
    if (auto e = hf::detail::token_content(hf::opt(cfg, "eos_token"))) {
      if (auto id = token_to_id(*e)) add_eos(*id);
    }
    if (const json* g = hf::opt(gen, "eos_token_id")) {
      if (g->is_number_integer()) add_eos(g->get<std::int64_t>());
      if (g->is_array()) {
        for (const auto& x : *g) {
          if (x.is_number_integer()) add_eos(x.get<std::int64_t>());
        }
      }
    }
    if (const json* a = hf::opt(cfg, "additional_special_tokens"); a && a->is_array()) {
      for (const auto& x : *a) {
        if (auto c = hf::detail::token_content(&x)) {
          if (auto id = token_to_id(*c)) special_ids_.insert(*id);
        }
      }
    }
  }

  void build_tries() {
    for (std::size_t i = 0; i < added_.size(); ++i) {
      const AddedToken& t = added_[i];
      if (t.normalized && normalizer_) {
        const std::string n = normalizer_(t.content);
        norm_trie_.add(n, i);
        added_by_content_.emplace(n, i);
      } else {
        raw_trie_.add(t.content, i);
      }
    }
  }

  // ---- encoding ----
  struct Section {
    std::string text;
    std::int32_t token = -1;
  };

  /// Cut `text` at added tokens of `trie`, then apply their lstrip / rstrip to the neighbouring text.
  std::vector<Section> split_added(const std::string& text, const hf::detail::TokenTrie& trie) const {
    std::vector<Section> out;
    std::vector<std::size_t> which;  // added_ index per token section
    auto accept = [&](std::size_t k, std::size_t begin, std::size_t end) {
      const AddedToken& t = added_[k];
      if (t.special && !parse_special_) return false;
      if (t.single_word) {
        if (begin > 0) {
          std::size_t b = begin - 1;
          while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
          std::size_t q = b;
          if (unicode::is_word_char(unicode::next_cp(text, q))) return false;
        }
        if (end < text.size()) {
          std::size_t q = end;
          if (unicode::is_word_char(unicode::next_cp(text, q))) return false;
        }
      }
      return true;
    };
    std::size_t start = 0;
    for (std::size_t i = 0; i < text.size();) {
      const auto [tok, end] = trie.match(text, i, [&](std::size_t k, std::size_t e) { return accept(k, i, e); });
      if (tok < 0) {
        ++i;
        continue;
      }
      if (i > start) out.push_back({text.substr(start, i - start), -1});
      out.push_back({std::string(), added_[static_cast<std::size_t>(tok)].id});
      which.push_back(static_cast<std::size_t>(tok));
      i = start = end;
    }
    if (start < text.size()) out.push_back({text.substr(start), -1});
    std::size_t w = 0;
    for (std::size_t s = 0; s < out.size(); ++s) {
      if (out[s].token < 0) continue;
      const AddedToken& t = added_[which[w++]];
      if (t.lstrip && s > 0 && out[s - 1].token < 0) out[s - 1].text.resize(unicode::trim_end_pos(out[s - 1].text));
      if (t.rstrip && s + 1 < out.size() && out[s + 1].token < 0) out[s + 1].text.erase(0, unicode::trim_start_pos(out[s + 1].text));
    }
    return out;
  }

  std::vector<std::int32_t> encode_text(std::string_view text) const {
    const std::size_t bad = unicode::find_invalid_utf8(text);
    MAXTEXT_CHECK(bad == std::string_view::npos, ArgumentError, "[tokenizer] ", where_, ": the text is not valid UTF-8 (byte ",
                  bad, " of ", text.size(), ")");
    std::vector<std::int32_t> ids;
    const std::vector<Section> sections = split_added(std::string(text), raw_trie_);
    for (std::size_t si = 0; si < sections.size(); ++si) {
      const Section& sec = sections[si];
      if (sec.token >= 0) {
        ids.push_back(sec.token);
        continue;
      }
      if (sec.text.empty()) continue;
      const std::string normalized = normalizer_ ? normalizer_(sec.text) : sec.text;
      if (normalized.empty()) continue;
      for (const Section& sub : split_added(normalized, norm_trie_)) {
        if (sub.token >= 0) {
          ids.push_back(sub.token);
          continue;
        }
        if (sub.text.empty()) continue;
        std::vector<std::string> pieces{sub.text};
        if (pre_tokenizer_) pre_tokenizer_(pieces, si);
        const std::size_t first = ids.size();
        for (const auto& p : pieces) model_->encode_word(p, ids);
        if (model_->options().fuse_unk && model_->unk() >= 0) {
          const std::int32_t unk = model_->unk();
          auto out = ids.begin() + static_cast<std::ptrdiff_t>(first);
          for (auto in = out; in != ids.end(); ++in) {
            if (*in == unk && out != ids.begin() + static_cast<std::ptrdiff_t>(first) && *(out - 1) == unk) continue;
            *out++ = *in;
          }
          ids.erase(out, ids.end());
        }
      }
    }
    return ids;
  }

  struct TemplateItem {
    char sequence;                   // 'A', 'B', or 0 for special ids
    std::vector<std::int32_t> ids;   // the special token's ids
  };
  struct Template {
    std::vector<TemplateItem> single, pair;
  };

  std::vector<std::int32_t> post_process(std::vector<std::int32_t> a, const std::vector<std::int32_t>* b, bool add_special) const {
    std::vector<std::int32_t> pair = b ? *b : std::vector<std::int32_t>();
    bool have_pair = b != nullptr;
    for (const Template& t : templates_) {
      const auto& items = have_pair ? t.pair : t.single;
      MAXTEXT_CHECK(!have_pair || !t.pair.empty(), UnsupportedError, "[tokenizer] ", where_,
                    ": the post-processor has no pair template");
      std::vector<std::int32_t> out;
      for (const TemplateItem& it : items) {
        if (it.sequence == 'A') {
          out.insert(out.end(), a.begin(), a.end());
        } else if (it.sequence == 'B') {
          out.insert(out.end(), pair.begin(), pair.end());
        } else if (add_special) {
          out.insert(out.end(), it.ids.begin(), it.ids.end());
        }
      }
      a = std::move(out);
      have_pair = false;
      pair.clear();
    }
    a.insert(a.end(), pair.begin(), pair.end());
    return a;
  }

  // ---- decoding ----
  const std::string& token_text(std::int32_t id) const {
    MAXTEXT_CHECK(id >= 0 && id < vocab_size_, ArgumentError, "[tokenizer] ", where_, ": token id ", id,
                  " outside the vocabulary [0, ", vocab_size_, ")");
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return added_[it->second].content;
    MAXTEXT_CHECK(id < model_->size() && !model_->piece(id).empty(), ArgumentError, "[tokenizer] ", where_, ": token id ", id,
                  " has no token (a gap in the vocabulary)");
    return model_->piece(id);
  }

  std::string decode_tokens(std::vector<std::string> toks, bool first, bool streaming) const {
    std::string s;
    if (!decoder_) {
      for (std::size_t i = 0; i < toks.size(); ++i) s += (i ? " " : "") + toks[i];
      return s;
    }
    hf::DecodeState st{first, streaming, false};
    decoder_(toks, st);
    for (const auto& t : toks) s += t;
    return s;
  }

  std::string where_;
  std::unique_ptr<BpeModel> model_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::int32_t, std::size_t> added_by_id_;
  std::unordered_map<std::string, std::size_t> added_by_content_;  // raw and normalized contents
  std::unordered_set<std::int32_t> special_ids_;
  hf::detail::TokenTrie raw_trie_, norm_trie_;
  hf::Normalizer normalizer_;
  hf::PreTokenizer pre_tokenizer_;
  hf::Decoder decoder_;
  std::vector<Template> templates_;
  std::int64_t vocab_size_ = 0;
  std::int32_t bos_ = -1, pad_ = -1;
  std::vector<std::int32_t> eos_ids_;
  bool clean_up_ = true;
  bool parse_special_ = true;
};

// The loading, encoding and decoding entry points are MAXTEXT_API (core/macros.hpp): in this project's programs they,
// with the JSON readers, the pre-tokenizers and the BPE model they use, are compiled once (maxtext_compiled). With them
// out of the class, `encode` is the class's key function there, so its virtual table is compiled once too.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::unique_ptr<HfTokenizer> HfTokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  if (fs::is_directory(p)) p /= "tokenizer.json";
  MAXTEXT_CHECK(fs::exists(p), IoError, "[tokenizer] ", p.string(), ": no such file");
  const json tok = hf::detail::read_json_file(p.string());
  json cfg = json::object(), gen = json::object();
  // A fixture may sit beside others as NAME.tokenizer.json with NAME.tokenizer_config.json.
  const std::string fname = p.filename().string();
  const std::string stem = fname.size() > 14 && fname.compare(fname.size() - 14, 14, "tokenizer.json") == 0
                               ? fname.substr(0, fname.size() - 14) : std::string();
  const fs::path cfg_path = p.parent_path() / (stem + "tokenizer_config.json");
  if (fs::exists(cfg_path)) cfg = hf::detail::read_json_file(cfg_path.string());
  const fs::path gen_path = p.parent_path() / "generation_config.json";
  if (fs::exists(gen_path)) gen = hf::detail::read_json_file(gen_path.string());
  return std::make_unique<HfTokenizer>(tok, cfg, p.string(), gen);
}

MAXTEXT_API HfTokenizer::HfTokenizer(const json& tok, const json& config, const std::string& where,
                                     const json& generation)
    : where_(where) {
  using hf::Where;
  const Where root{where, ""};
  MAXTEXT_CHECK(tok.is_object(), ConfigError, "[tokenizer] ", where, ": the top level must be a JSON object");
  for (const char* k : {"truncation", "padding"}) {
    if (hf::opt(tok, k)) hf::refuse(root / k, std::string("'") + k + "' (non-null)");
  }
  load_model(hf::req(tok, "model", root), root / "model");
  load_added(tok, root);
  normalizer_ = hf::make_normalizer(tok.value("normalizer", json()), root / "normalizer");
  pre_tokenizer_ = hf::make_pre_tokenizer(tok.value("pre_tokenizer", json()), root / "pre_tokenizer");
  load_post_processor(tok.value("post_processor", json()), root / "post_processor");
  decoder_ = hf::make_decoder(tok.value("decoder", json()), root / "decoder",
                              [this](const std::string& s) { return added_by_content_.count(s) > 0; });
  build_tries();
  load_config(config, generation);
}

MAXTEXT_API std::vector<std::int32_t> HfTokenizer::encode(std::string_view text, std::optional<bool> add_special) const {
  return post_process(encode_text(text), nullptr, add_special.value_or(true));
}

MAXTEXT_API std::vector<std::int32_t> HfTokenizer::encode_pair(std::string_view a, std::string_view b,
                                                               bool add_special) const {
  const auto ib = encode_text(b);
  return post_process(encode_text(a), &ib, add_special);
}

MAXTEXT_API std::string HfTokenizer::decode(const std::vector<std::int32_t>& ids, bool skip_special) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (std::int32_t id : ids) {
    const std::string& t = token_text(id);
    if (skip_special && special_ids_.count(id)) continue;
    toks.push_back(t);
  }
  std::string s = decode_tokens(std::move(toks), true, false);
  s = unicode::repair_utf8(s);
  return clean_up_ ? hf::detail::clean_up_tokenization(std::move(s)) : s;
}

MAXTEXT_API std::string HfTokenizer::piece(std::int32_t prev, std::int32_t id) const {
  const std::string& t = token_text(id);
  if (special_ids_.count(id)) return {};
  const bool first = prev < 0 || special_ids_.count(prev) > 0;
  if (!decoder_) return first ? t : " " + t;  // without a decoder, tokens are joined by spaces
  return decode_tokens({t}, first, true);
}
#endif

}  // namespace maxtext::tokenizer
