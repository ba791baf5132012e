// tokenizer/regex.hpp: the regular expressions of tokenizer.json (Split / Replace patterns, ByteLevel's GPT-2 pattern)
// through Oniguruma (Debian libonig-dev), the engine Hugging Face's Rust tokenizers compile them with: Unicode
// properties (\p{L}), inline case-insensitive groups, lookahead. Patterns are compiled for UTF-8 with Oniguruma's
// default syntax; searches are thread-safe (one match region per call).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <oniguruma.h>

#include "maxtext/core/error.hpp"

namespace maxtext::tokenizer {

/// A compiled Oniguruma pattern over UTF-8 text.
class Regex {
 public:
  Regex() = default;
  /// Compile `pattern`; `where` names it in errors (file and JSON path).
  Regex(std::string_view pattern, const std::string& where) {
    init();
    OnigErrorInfo info{};
    regex_t* re = nullptr;
    const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
    const int rc = onig_new(&re, p, p + pattern.size(), ONIG_OPTION_CAPTURE_GROUP, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT,
                            &info);
    if (rc != ONIG_NORMAL) {
      OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(buf, rc, &info);
      MAXTEXT_THROW(ConfigError, "[tokenizer] ", where, ": invalid regular expression '", std::string(pattern),
                    "': ", reinterpret_cast<const char*>(buf));
    }
    re_ = std::shared_ptr<regex_t>(re, onig_free);
  }

  bool empty() const { return !re_; }

  /// Every non-overlapping non-empty match of the pattern in `text`, as [begin, end) byte offsets, left to right
  /// (an empty match moves the search on by one character, as JavaScript's matchAll does).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    if (!re_) return out;
    std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(onig_region_new(), [](OnigRegion* r) { onig_region_free(r, 1); });
    const auto* s = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = s + text.size();
    std::size_t pos = 0;
    while (pos <= text.size()) {
      const int r = onig_search(re_.get(), s, end, s + pos, end, region.get(), ONIG_OPTION_NONE);
      if (r == ONIG_MISMATCH) break;
      MAXTEXT_CHECK(r >= 0, ArgumentError, "[tokenizer] regular expression search failed (Oniguruma code ", r, ")");
      const auto b = static_cast<std::size_t>(region->beg[0]);
      const auto e = static_cast<std::size_t>(region->end[0]);
      if (e > b) {
        out.emplace_back(b, e);
        pos = e;
      } else {
        if (b >= text.size()) break;
        pos = b + char_len(static_cast<unsigned char>(text[b]));
      }
    }
    return out;
  }

  /// Copy of `text` with every match replaced by `content`.
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
  static std::size_t char_len(unsigned char lead) { return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }
  static void init() {
    static std::once_flag once;
    std::call_once(once, [] {
      OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
      onig_initialize(enc, 1);
    });
  }
  std::shared_ptr<regex_t> re_;
};

}  // namespace maxtext::tokenizer
