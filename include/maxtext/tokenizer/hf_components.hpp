// tokenizer/hf_components.hpp: the normalizers, pre-tokenizers and decoders of Hugging Face tokenizer.json files, built
// from their JSON. Semantics follow Hugging Face tokenizers (the Rust crate's definitions) and, where the two differ on
// the components real files use, the oracle our tests compare with (@huggingface/tokenizers, transformers.js's port):
// String.trim whitespace for Strip, all marks for StripAccents, Metaspace "first" meaning the first added-token section.
// Anything not implemented is refused when the file is loaded, naming the file and the JSON path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/tokenizer/regex.hpp"
#include "maxtext/tokenizer/unicode.hpp"

namespace maxtext::tokenizer::hf {

using json = nlohmann::json;

/// Where a JSON value sits: the file and a JSON pointer, for error messages.
struct Where {
  std::string file, path;
  Where operator/(const std::string& key) const { return {file, path + "/" + key}; }
  Where operator/(std::size_t i) const { return {file, path + "/" + std::to_string(i)}; }
  std::string str() const { return file + ": " + (path.empty() ? "/" : path); }
};

[[noreturn]] inline void refuse(const Where& w, const std::string& what) {
  MAXTEXT_THROW(UnsupportedError, "[tokenizer] ", w.str(), ": ", what, " is not supported");
}
[[noreturn]] inline void malformed(const Where& w, const std::string& what) {
  MAXTEXT_THROW(ConfigError, "[tokenizer] ", w.str(), ": ", what);
}

/// j[key] when present and not null, else nullptr.
inline const json* opt(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}
inline const json& req(const json& j, const char* key, const Where& w) {
  const json* v = opt(j, key);
  if (!v) malformed(w, std::string("missing field '") + key + "'");
  return *v;
}
inline std::string get_string(const json& j, const char* key, const Where& w) {
  const json& v = req(j, key, w);
  if (!v.is_string()) malformed(w / key, "expected a string, found " + v.dump().substr(0, 60));
  return v.get<std::string>();
}
inline std::string get_string_or(const json& j, const char* key, const std::string& dflt, const Where& w) {
  return opt(j, key) ? get_string(j, key, w) : dflt;
}
inline bool get_bool_or(const json& j, const char* key, bool dflt, const Where& w) {
  const json* v = opt(j, key);
  if (!v) return dflt;
  if (!v->is_boolean()) malformed(w / key, "expected true or false, found " + v->dump().substr(0, 60));
  return v->get<bool>();
}
inline std::int64_t get_int_or(const json& j, const char* key, std::int64_t dflt, const Where& w) {
  const json* v = opt(j, key);
  if (!v) return dflt;
  if (!v->is_number_integer()) malformed(w / key, "expected an integer, found " + v->dump().substr(0, 60));
  return v->get<std::int64_t>();
}
inline const json& get_array(const json& j, const char* key, const Where& w) {
  const json& v = req(j, key, w);
  if (!v.is_array()) malformed(w / key, "expected an array");
  return v;
}
/// Fields of `j` outside `known` are refused (an option we do not implement must not be silently ignored).
inline void only_fields(const json& j, std::initializer_list<const char*> known, const Where& w) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = it.key() == "type";
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) refuse(w / it.key(), "option '" + it.key() + "'");
  }
}

/// A pattern: {"String": "..."} (literal) or {"Regex": "..."} (Oniguruma).
class Pattern {
 public:
  Pattern() = default;
  Pattern(const json& j, const Where& w) {
    if (!j.is_object()) malformed(w, "a pattern must be {\"String\": ...} or {\"Regex\": ...}");
    if (const json* s = opt(j, "String")) {
      if (!s->is_string()) malformed(w / "String", "expected a string");
      literal_ = s->get<std::string>();
      is_literal_ = true;
    } else if (const json* r = opt(j, "Regex")) {
      if (!r->is_string()) malformed(w / "Regex", "expected a string");
      regex_ = Regex(r->get<std::string>(), (w / "Regex").str());
    } else {
      malformed(w, "a pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
  }
  /// Non-empty, non-overlapping matches in `text`, left to right.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const {
    if (!is_literal_) return regex_.find_all(text);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    if (literal_.empty()) return out;
    for (std::size_t p = text.find(literal_); p != std::string_view::npos; p = text.find(literal_, p + literal_.size())) {
      out.emplace_back(p, p + literal_.size());
    }
    return out;
  }
  std::string replace_all(std::string_view text, std::string_view content) const {
    std::string out;
    std::size_t prev = 0;
    for (const auto& [b, e] : find_all(text)) {
      out.append(text.substr(prev, b - prev));
      out.append(content);
      prev = e;
    }
    out.append(text.substr(prev));
    return out;
  }

 private:
  bool is_literal_ = false;
  std::string literal_;
  Regex regex_;
};

// ---- normalizers ---------------------------------------------------------------------------------------------------

using Normalizer = std::function<std::string(std::string)>;

/// The normalizer of `j` (null: none).
inline Normalizer make_normalizer(const json& j, const Where& w) {
  if (j.is_null()) return {};
  const std::string type = get_string(j, "type", w);
  using unicode::Form;
  auto form = [&](Form f) -> Normalizer {
    only_fields(j, {}, w);
    return [f](std::string s) { return unicode::normalize(s, f); };
  };
  if (type == "NFC") return form(Form::nfc);
  if (type == "NFD") return form(Form::nfd);
  if (type == "NFKC") return form(Form::nfkc);
  if (type == "NFKD") return form(Form::nfkd);
  if (type == "Lowercase") {
    only_fields(j, {}, w);
    return [](std::string s) { return unicode::lowercase(s); };
  }
  if (type == "StripAccents") {
    only_fields(j, {}, w);
    return [](std::string s) { return unicode::strip_marks(s); };
  }
  if (type == "Strip") {
    only_fields(j, {"strip_left", "strip_right"}, w);
    const bool l = get_bool_or(j, "strip_left", false, w), r = get_bool_or(j, "strip_right", false, w);
    return [l, r](std::string s) {
      std::string_view v = s;
      if (r) v = unicode::trim_end(v);
      if (l) v = unicode::trim_start(v);
      return std::string(v);
    };
  }
  if (type == "Replace") {
    only_fields(j, {"pattern", "content"}, w);
    auto p = std::make_shared<Pattern>(req(j, "pattern", w), w / "pattern");
    const std::string content = get_string_or(j, "content", "", w);
    return [p, content](std::string s) { return p->replace_all(s, content); };
  }
  if (type == "Prepend") {
    only_fields(j, {"prepend"}, w);
    const std::string pre = get_string(j, "prepend", w);
    return [pre](std::string s) { return s.empty() ? s : pre + s; };
  }
  if (type == "Sequence") {
    only_fields(j, {"normalizers"}, w);
    const json& a = get_array(j, "normalizers", w);
    std::vector<Normalizer> parts;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (Normalizer n = make_normalizer(a[i], w / "normalizers" / i)) parts.push_back(std::move(n));
    }
    return [parts](std::string s) {
      for (const auto& n : parts) s = n(std::move(s));
      return s;
    };
  }
  refuse(w / "type", "normalizer '" + type + "'");
}

// ---- pre-tokenizers ------------------------------------------------------------------------------------------------

/// How the pieces a pattern matches (the delimiters) are kept.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

inline SplitBehavior parse_behavior(const json& j, const Where& w, SplitBehavior dflt) {
  const std::string b = get_string_or(j, "behavior", "", w);
  if (b.empty()) return dflt;
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  refuse(w / "behavior", "split behavior '" + b + "'");
}

/// Split `s` at `matches` (sorted, non-overlapping) and apply `behavior`; pieces are appended to `out` (never empty).
inline void split_pieces(const std::string& s, const std::vector<std::pair<std::size_t, std::size_t>>& matches, bool invert,
                         SplitBehavior behavior, std::vector<std::string>& out) {
  struct Seg {
    std::size_t b, e;
    bool delim;
  };
  std::vector<Seg> segs;
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < s.size()) segs.push_back({prev, s.size(), invert});
  std::vector<std::pair<std::size_t, std::size_t>> res;
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Seg& g : segs) {
        if (!g.delim) res.emplace_back(g.b, g.e);
      }
      break;
    case SplitBehavior::isolated:
      for (const Seg& g : segs) res.emplace_back(g.b, g.e);
      break;
    case SplitBehavior::merged_with_previous: {
      // A delimiter joins the piece before it (the first of a run of delimiters only; later ones stand alone).
      bool prev_delim = false;
      for (const Seg& g : segs) {
        if (g.delim && !prev_delim && !res.empty()) {
          res.back().second = g.e;
        } else {
          res.emplace_back(g.b, g.e);
        }
        prev_delim = g.delim;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      // Mirror image: a delimiter joins the piece after it (the last of a run of delimiters only).
      bool next_delim = false;
      std::vector<std::pair<std::size_t, std::size_t>> rev;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->delim && !next_delim && !rev.empty()) {
          rev.back().first = it->b;
        } else {
          rev.emplace_back(it->b, it->e);
        }
        next_delim = it->delim;
      }
      res.assign(rev.rbegin(), rev.rend());
      break;
    }
    case SplitBehavior::contiguous: {
      // Runs of delimiters become one piece; so do runs of non-delimiters.
      bool prev_delim = false;
      for (std::size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].delim == prev_delim) {
          res.back().second = segs[i].e;
        } else {
          res.emplace_back(segs[i].b, segs[i].e);
        }
        prev_delim = segs[i].delim;
      }
      break;
    }
  }
  for (const auto& [b, e] : res) {
    if (e > b) out.push_back(s.substr(b, e - b));
  }
}

/// A pre-tokenizer maps the pieces of one added-token section (`section` is its index) to finer pieces.
using PreTokenizer = std::function<void(std::vector<std::string>& pieces, std::size_t section)>;

namespace detail {
inline PreTokenizer per_piece(std::function<void(const std::string&, std::size_t, std::vector<std::string>&)> f) {
  return [f = std::move(f)](std::vector<std::string>& pieces, std::size_t section) {
    std::vector<std::string> out;
    out.reserve(pieces.size());
    for (const auto& p : pieces) f(p, section, out);
    pieces = std::move(out);
  };
}
inline PreTokenizer pattern_split(std::shared_ptr<Regex> re, bool invert, SplitBehavior behavior) {
  return per_piece([re, invert, behavior](const std::string& p, std::size_t, std::vector<std::string>& out) {
    split_pieces(p, re->find_all(p), invert, behavior, out);
  });
}
}  // namespace detail

/// The pre-tokenizer of `j` (null: none).
inline PreTokenizer make_pre_tokenizer(const json& j, const Where& w) {
  if (j.is_null()) return {};
  const std::string type = get_string(j, "type", w);
  if (type == "Sequence") {
    only_fields(j, {"pretokenizers"}, w);
    const json& a = get_array(j, "pretokenizers", w);
    std::vector<PreTokenizer> parts;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (PreTokenizer p = make_pre_tokenizer(a[i], w / "pretokenizers" / i)) parts.push_back(std::move(p));
    }
    return [parts](std::vector<std::string>& pieces, std::size_t section) {
      for (const auto& p : parts) p(pieces, section);
    };
  }
  if (type == "Split") {
    only_fields(j, {"pattern", "behavior", "invert"}, w);
    auto pat = std::make_shared<Pattern>(req(j, "pattern", w), w / "pattern");
    const bool invert = get_bool_or(j, "invert", false, w);
    const SplitBehavior b = parse_behavior(j, w, SplitBehavior::isolated);
    if (!opt(j, "behavior")) malformed(w, "missing field 'behavior'");
    return detail::per_piece([pat, invert, b](const std::string& p, std::size_t, std::vector<std::string>& out) {
      split_pieces(p, pat->find_all(p), invert, b, out);
    });
  }
  if (type == "ByteLevel") {
    only_fields(j, {"add_prefix_space", "trim_offsets", "use_regex"}, w);
    const bool prefix = get_bool_or(j, "add_prefix_space", false, w);
    const bool use_regex = get_bool_or(j, "use_regex", true, w);
    std::shared_ptr<Regex> re;
    if (use_regex) {
      re = std::make_shared<Regex>(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                                   (w / "use_regex").str());
    }
    return detail::per_piece([prefix, re](const std::string& p0, std::size_t, std::vector<std::string>& out) {
      const std::string p = prefix && (p0.empty() || p0[0] != ' ') ? " " + p0 : p0;
      if (!re) {
        out.push_back(unicode::byte_level_encode(p));
        return;
      }
      for (const auto& [b, e] : re->find_all(p)) out.push_back(unicode::byte_level_encode(std::string_view(p).substr(b, e - b)));
    });
  }
  if (type == "Metaspace") {
    only_fields(j, {"replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}, w);
    const std::string rep = get_string_or(j, "replacement", "\xE2\x96\x81", w);
    std::string scheme = "always";
    if (opt(j, "prepend_scheme")) {
      scheme = get_string(j, "prepend_scheme", w);
    } else if (opt(j, "add_prefix_space")) {
      scheme = get_bool_or(j, "add_prefix_space", true, w) ? "always" : "never";
    }
    if (scheme != "always" && scheme != "first" && scheme != "never") refuse(w / "prepend_scheme", "prepend_scheme '" + scheme + "'");
    const bool split = get_bool_or(j, "split", true, w);
    return detail::per_piece([rep, scheme, split](const std::string& p, std::size_t section, std::vector<std::string>& out) {
      std::string s;
      for (char c : p) {
        if (c == ' ') {
          s += rep;
        } else {
          s += c;
        }
      }
      if (s.compare(0, rep.size(), rep) != 0 && (scheme == "always" || (scheme == "first" && section == 0))) s = rep + s;
      if (!split) {
        out.push_back(std::move(s));
        return;
      }
      std::vector<std::pair<std::size_t, std::size_t>> m;
      for (std::size_t q = s.find(rep); q != std::string::npos; q = s.find(rep, q + rep.size())) m.emplace_back(q, q + rep.size());
      split_pieces(s, m, false, SplitBehavior::merged_with_next, out);
    });
  }
  if (type == "Digits") {
    only_fields(j, {"individual_digits"}, w);
    const bool single = get_bool_or(j, "individual_digits", false, w);
    auto re = std::make_shared<Regex>(single ? R"(\p{N})" : R"(\p{N}+)", w.str());
    return detail::pattern_split(re, false, SplitBehavior::isolated);  // each digit, or each run of digits, alone
  }
  if (type == "Punctuation") {
    only_fields(j, {"behavior"}, w);
    const SplitBehavior b = parse_behavior(j, w, SplitBehavior::isolated);
    auto re = std::make_shared<Regex>(R"([\p{P}!-/:-@\[-`{-~])", w.str());
    return detail::pattern_split(re, false, b);
  }
  if (type == "Whitespace") {
    only_fields(j, {}, w);
    auto re = std::make_shared<Regex>(R"(\w+|[^\w\s]+)", w.str());
    return detail::pattern_split(re, true, SplitBehavior::removed);
  }
  if (type == "WhitespaceSplit") {
    only_fields(j, {}, w);
    return detail::per_piece([](const std::string& p, std::size_t, std::vector<std::string>& out) {
      std::size_t start = std::string::npos;
      for (std::size_t i = 0; i < p.size();) {
        const std::size_t at = i;
        const bool space = unicode::is_js_space(unicode::next_cp(p, i));
        if (space && start != std::string::npos) {
          out.push_back(p.substr(start, at - start));
          start = std::string::npos;
        } else if (!space && start == std::string::npos) {
          start = at;
        }
      }
      if (start != std::string::npos) out.push_back(p.substr(start));
    });
  }
  refuse(w / "type", "pre-tokenizer '" + type + "'");
}

// ---- decoders ------------------------------------------------------------------------------------------------------

/// What a decoder step knows besides the tokens: whether the first token starts the text (Metaspace drops its leading
/// space then), whether this is one piece of a stream (decoded token by token), and whether a Fuse step ran (then a
/// Strip step acts on the whole text: while streaming, only its start, on the first piece).
struct DecodeState {
  bool first = true;
  bool streaming = false;
  bool fused = false;
};

/// A decoder step maps token strings to strings. Strings may hold raw bytes (byte-level / byte-fallback decoding);
/// the caller repairs invalid UTF-8 at the end.
using Decoder = std::function<void(std::vector<std::string>& tokens, DecodeState& st)>;

/// The decoder of `j` (null: none). `is_added(token)` tells the ByteLevel decoder which tokens to pass unchanged.
inline Decoder make_decoder(const json& j, const Where& w, std::function<bool(const std::string&)> is_added) {
  if (j.is_null()) return {};
  const std::string type = get_string(j, "type", w);
  if (type == "Sequence") {
    only_fields(j, {"decoders"}, w);
    const json& a = get_array(j, "decoders", w);
    std::vector<Decoder> parts;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (Decoder d = make_decoder(a[i], w / "decoders" / i, is_added)) parts.push_back(std::move(d));
    }
    return [parts](std::vector<std::string>& t, DecodeState& st) {
      for (const auto& d : parts) d(t, st);
    };
  }
  if (type == "ByteLevel") {
    only_fields(j, {"add_prefix_space", "trim_offsets", "use_regex"}, w);
    return [is_added](std::vector<std::string>& t, DecodeState&) {
      std::vector<std::string> out;
      std::string run;
      bool have_run = false;
      for (auto& s : t) {
        if (is_added(s)) {
          if (have_run) out.push_back(std::move(run));
          run.clear();
          have_run = false;
          out.push_back(std::move(s));
        } else {
          run += unicode::byte_level_decode(s);
          have_run = true;
        }
      }
      if (have_run) out.push_back(std::move(run));
      t = std::move(out);
    };
  }
  if (type == "Metaspace") {
    only_fields(j, {"replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}, w);
    const std::string rep = get_string_or(j, "replacement", "\xE2\x96\x81", w);
    return [rep](std::vector<std::string>& t, DecodeState& st) {
      for (std::size_t i = 0; i < t.size(); ++i) {
        std::string s;
        for (std::size_t k = 0; k < t[i].size();) {
          if (t[i].compare(k, rep.size(), rep) == 0) {
            s += ' ';
            k += rep.size();
          } else {
            s += t[i][k++];
          }
        }
        if (i == 0 && st.first && !s.empty() && s[0] == ' ') s.erase(0, 1);
        t[i] = std::move(s);
      }
    };
  }
  if (type == "Replace") {
    only_fields(j, {"pattern", "content"}, w);
    auto p = std::make_shared<Pattern>(req(j, "pattern", w), w / "pattern");
    const std::string content = get_string_or(j, "content", "", w);
    return [p, content](std::vector<std::string>& t, DecodeState&) {
      for (auto& s : t) s = p->replace_all(s, content);
    };
  }
  if (type == "ByteFallback") {
    only_fields(j, {}, w);
    return [](std::vector<std::string>& t, DecodeState&) {
      std::vector<std::string> out;
      std::string bytes;
      auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
      for (auto& s : t) {
        const bool is_byte = s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && hex(s[3]) >= 0 && hex(s[4]) >= 0;
        if (is_byte) {
          bytes += static_cast<char>(hex(s[3]) * 16 + hex(s[4]));
          continue;
        }
        if (!bytes.empty()) out.push_back(std::exchange(bytes, {}));
        out.push_back(std::move(s));
      }
      if (!bytes.empty()) out.push_back(std::move(bytes));
      t = std::move(out);
    };
  }
  if (type == "Fuse") {
    only_fields(j, {}, w);
    return [](std::vector<std::string>& t, DecodeState& st) {
      std::string all;
      for (const auto& s : t) all += s;
      t.assign(1, std::move(all));
      st.fused = true;
    };
  }
  if (type == "Strip") {
    only_fields(j, {"content", "start", "stop"}, w);
    const std::string content = get_string(j, "content", w);
    std::size_t n = 0;
    for (std::size_t i = 0; i < content.size(); ++n) unicode::next_cp(content, i);
    if (n != 1) malformed(w / "content", "the Strip decoder's content must be one character");
    const auto start = static_cast<std::size_t>(std::max<std::int64_t>(0, get_int_or(j, "start", 0, w)));
    const auto stop = static_cast<std::size_t>(std::max<std::int64_t>(0, get_int_or(j, "stop", 0, w)));
    return [content, start, stop](std::vector<std::string>& t, DecodeState& st) {
      // Streaming after a Fuse: the piece is part of one text, so only its start (on the first piece) is stripped.
      const bool whole_text = st.streaming && st.fused;
      const std::size_t n_start = whole_text && !st.first ? 0 : start, n_stop = whole_text ? 0 : stop;
      for (auto& s : t) {
        std::size_t b = 0, e = s.size();
        for (std::size_t k = 0; k < n_start && s.compare(b, content.size(), content) == 0; ++k) b += content.size();
        for (std::size_t k = 0; k < n_stop && e >= b + content.size() && s.compare(e - content.size(), content.size(), content) == 0; ++k) {
          e -= content.size();
        }
        s = s.substr(b, e - b);
      }
    };
  }
  refuse(w / "type", "decoder '" + type + "'");
}

}  // namespace maxtext::tokenizer::hf
