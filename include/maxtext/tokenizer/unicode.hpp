// tokenizer/unicode.hpp: the UTF-8 and Unicode pieces the Hugging Face tokenizers need: UTF-8 validation, decoding and
// lossy repair (U+FFFD for each maximal invalid subpart, as the WHATWG TextDecoder does), normalization forms and
// character categories through libutf8proc, the whitespace set of JavaScript's String.trim (what the oracle,
// @huggingface/tokenizers, strips), and GPT-2's byte <-> printable-character map used by byte-level BPE.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <utf8proc.h>

#include "maxtext/core/error.hpp"

namespace maxtext::tokenizer::unicode {

/// Length in bytes of the UTF-8 sequence starting with `lead` (1 for stray continuation / invalid bytes).
inline std::size_t utf8_len(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

/// Append code point `cp` as UTF-8.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace detail {
/// Length of the well-formed sequence at s[i], or 0 with `bad` = bytes of its maximal invalid subpart (>= 1).
inline std::size_t well_formed(std::string_view s, std::size_t i, std::size_t& bad, char32_t* cp = nullptr) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  bad = 1;
  if (c < 0x80) {
    if (cp) *cp = c;
    return 1;
  }
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  char32_t v = c & (need == 1 ? 0x1F : need == 2 ? 0x0F : 0x07);
  for (std::size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char x = b(i + k);
    if (x < lo || x > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
    v = (v << 6) | (x & 0x3F);
    bad = k + 1;
  }
  if (cp) *cp = v;
  return need + 1;
}
}  // namespace detail

/// Byte offset of the first invalid UTF-8 sequence in `s`, or npos when `s` is valid.
inline std::size_t find_invalid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t bad;
    const std::size_t n = detail::well_formed(s, i, bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

/// `s` with every maximal invalid subpart replaced by U+FFFD (WHATWG UTF-8 decode, replacement mode).
inline std::string repair_utf8(std::string_view s) {
  if (find_invalid_utf8(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    std::size_t bad;
    const std::size_t n = detail::well_formed(s, i, bad);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

/// Decode the code point at s[i] (valid UTF-8 assumed; invalid bytes come back as themselves) and advance i.
inline char32_t next_cp(std::string_view s, std::size_t& i) {
  std::size_t bad;
  char32_t cp = 0;
  const std::size_t n = detail::well_formed(s, i, bad, &cp);
  if (n == 0) {
    cp = static_cast<unsigned char>(s[i]);
    i += 1;
    return cp;
  }
  i += n;
  return cp;
}

enum class Form { nfc, nfd, nfkc, nfkd };

/// Unicode normalization of valid UTF-8 through libutf8proc.
inline std::string normalize(std::string_view s, Form f) {
  if (s.empty()) return {};
  int opt = UTF8PROC_STABLE;
  switch (f) {
    case Form::nfc: opt |= UTF8PROC_COMPOSE; break;
    case Form::nfd: opt |= UTF8PROC_DECOMPOSE; break;
    case Form::nfkc: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Form::nfkd: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &dst, static_cast<utf8proc_option_t>(opt));
  MAXTEXT_CHECK(n >= 0, ArgumentError, "[tokenizer] Unicode normalization failed: ", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> hold(dst, std::free);
  return std::string(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
}

/// Lowercase (utf8proc's simple mapping, plus U+0130 -> "i\u0307" as full case mapping has it).
inline std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const char32_t cp = next_cp(s, i);
    if (cp < 0x80) {
      out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else if (cp == 0x130) {
      out += "i\xCC\x87";
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  }
  return out;
}

/// True for marks (general categories Mn, Mc, Me).
inline bool is_mark(char32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

/// True for letters, marks, decimal digits and connector punctuation (a "word" character for single_word).
inline bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
         c == UTF8PROC_CATEGORY_PC;
}

/// `s` without its marks (the StripAccents normalizer; apply NFD first to split accents off their letters).
inline std::string strip_marks(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    const char32_t cp = next_cp(s, i);
    if (!is_mark(cp)) out.append(s.substr(start, i - start));
  }
  return out;
}

/// The whitespace of JavaScript's String.prototype.trim and \s (the oracle's): White_Space without U+0085, plus U+FEFF.
inline bool is_js_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

/// Byte offset after the leading whitespace of `s`.
inline std::size_t trim_start_pos(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    if (!is_js_space(next_cp(s, j))) break;
    i = j;
  }
  return i;
}
/// Byte length of `s` without its trailing whitespace.
inline std::size_t trim_end_pos(std::string_view s) {
  std::size_t end = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (!is_js_space(next_cp(s, i))) end = i;
  }
  return end;
}
inline std::string_view trim_start(std::string_view s) { return s.substr(trim_start_pos(s)); }
inline std::string_view trim_end(std::string_view s) { return s.substr(0, trim_end_pos(s)); }

/// GPT-2's byte-level alphabet: each byte as a printable character (as UTF-8), and back.
class ByteLevelMap {
 public:
  static const ByteLevelMap& get() {
    static const ByteLevelMap m;
    return m;
  }
  /// The UTF-8 text of byte `b`'s character.
  const std::string& encode(unsigned char b) const { return to_char_[b]; }
  /// The byte of code point `cp`, or -1 when `cp` is not in the alphabet.
  int decode(char32_t cp) const { return cp < from_cp_.size() ? from_cp_[cp] : -1; }

 private:
  ByteLevelMap() {
    from_cp_.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(to_char_[static_cast<std::size_t>(b)], cp);
      from_cp_[cp] = static_cast<std::int16_t>(b);
    }
  }
  std::array<std::string, 256> to_char_;
  std::array<std::int16_t, 324> from_cp_{};
};

/// Byte-level encoding of `s` (every byte to its alphabet character).
inline std::string byte_level_encode(std::string_view s) {
  const ByteLevelMap& m = ByteLevelMap::get();
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += m.encode(static_cast<unsigned char>(c));
  return out;
}

/// Byte-level decoding: alphabet characters back to bytes; other characters are kept as they are.
inline std::string byte_level_decode(std::string_view s) {
  const ByteLevelMap& m = ByteLevelMap::get();
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    const char32_t cp = next_cp(s, i);
    const int b = m.decode(cp);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  return out;
}

}  // namespace maxtext::tokenizer::unicode
