// models/json_schema.hpp: a JSON Schema compiled to a GBNF grammar (models/grammar.hpp), so that constrained output
// is a JSON document the schema accepts (response_format json_schema, tool arguments).
//
//   auto g = models::grammar::grammar_from_json_schema(nlohmann::ordered_json::parse(schema_text));
//   models::grammar::Matcher m(g);
//
// What the grammar enforces:
// - `type` (string, number, integer, boolean, null, object, array, or a list of them), `enum`, `const`;
// - objects: `properties` in the order the schema lists them, `required`, and `additionalProperties` (false: no other
//   key; absent or true: any other members after the listed ones; a schema: other members of that schema);
// - arrays: `items`, `minItems`, `maxItems`; strings: `minLength`, `maxLength` (in code points), `pattern` (an ECMA-262
//   subset: PatternCompiler below), and with `type: string` the formats `date`, `time`, `date-time` (RFC 3339: days per
//   month, February 29 in Gregorian leap years only, seconds 00-59, at most nine fraction digits, upper-case T and Z)
//   and `uuid` (8-4-4-4-12 hex digits);
// - integers (`type: integer` alone): `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (JSON numbers, as in
//   draft 6 and later), written out as digit ranges, within the integers the grammar writes (at most 16 digits);
// - `anyOf` and `oneOf` (a value of one of the schemas: oneOf's "exactly one" is not checked, as in llama.cpp),
//   `allOf` with one schema, local `$ref` (`#/$defs/...`, `#/definitions/...`, `#`), recursion included (a
//   definition that reaches itself before any "{" or "[" is read is refused: left recursion matches no value).
// Annotations are read and ignored: title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, and the other formats (`email`, `int32`, ...: annotations in JSON Schema 2020-12 unless a
// validator opts in). Every other keyword (multipleOf, uniqueItems, prefixItems, not, if/then/else, ...) is refused by
// name with the schema path where it stands, never ignored.
// Whitespace between tokens is at most 20 spaces, tabs or newlines at each place (a model cannot loop on blanks).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/models/grammar.hpp"

namespace maxtext::models::grammar {

namespace detail {

/// A GBNF literal for `text` (UTF-8 kept; quotes, backslashes and controls escaped).
inline std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

/// A JSON Schema `pattern` (an ECMA-262 regular expression) as GBNF over the text between a JSON string's quotes:
/// a string the grammar takes is one the pattern matches (searched anywhere unless anchored with ^ and $, as JSON
/// Schema reads patterns). Taken: literals and escapes (\t \n \r \f \v \0 \xHH \uHHHH, an escaped punctuation
/// character), `.`, classes with ranges and negation, \d \w \s \D \W \S, groups ( ) (?: ) (?<name> ), alternation,
/// * + ? {n} {n,} {n,m} (lazy forms too: the same strings), ^ at the start and $ at the end. Refused by name:
/// backreferences, lookaround, \b \B, \p{..}, anchors elsewhere, bounds above the grammar's kMaxRepeat, and an
/// unbounded repetition (* + {n,}) of a part that can match the empty string.
/// A character the JSON text must escape is written as its short escape (\" \\ \n \r \t \b \f) and other control
/// characters are left out: the grammar takes a subset of the pattern's strings, never a string outside it.
class PatternCompiler {
 public:
  PatternCompiler(std::string_view pattern, std::string path) : s_(pattern), path_(std::move(path)) {}

  std::string run() {
    bool start = false, end = false;
    std::string_view body = s_;
    if (!body.empty() && body.front() == '^') {
      start = true;
      body.remove_prefix(1);
    }
    if (!body.empty() && body.back() == '$' && !escaped_at(body, body.size() - 1)) {
      end = true;
      body.remove_suffix(1);
    }
    s_ = body;
    p_ = 0;
    const std::string expr = alternation(true).text;
    if (p_ != s_.size()) fail("unexpected '" + std::string(1, s_[p_]) + "'");
    if ((start || end) && top_alternation_) {
      fail("^ or $ beside a top-level '|' (write ^(a|b)$ for the anchored alternatives)");
    }
    return (start ? std::string() : "char* ") + "(" + expr + ")" + (end ? std::string() : " char*");
  }

 private:
  using Ranges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  /// GBNF text, and whether it matches the empty string.
  struct Expr {
    std::string text;
    bool nullable = false;
  };

  [[noreturn]] void fail(const std::string& what) const {
    MAXTEXT_THROW(ArgumentError, "[json_schema] ", path_, "/pattern: ", what);
  }
  static bool escaped_at(std::string_view t, std::size_t i) {  // an odd number of backslashes before t[i]
    std::size_t n = 0;
    while (n < i && t[i - 1 - n] == '\\') ++n;
    return n % 2 == 1;
  }
  bool more() const { return p_ < s_.size(); }
  char peek() const { return more() ? s_[p_] : '\0'; }

  Expr alternation(bool top = false) {
    if (++depth_ > 64) fail("groups nested deeper than 64");
    Expr out = concat();
    while (peek() == '|') {
      ++p_;
      if (top) top_alternation_ = true;
      const Expr b = concat();
      out.text += " | " + b.text;
      out.nullable = out.nullable || b.nullable;
    }
    --depth_;
    return out;
  }

  Expr concat() {
    Expr out{std::string(), true};
    while (more() && peek() != '|' && peek() != ')') {
      const Expr a = repeat();
      out.text += (out.text.empty() ? "" : " ") + a.text;
      out.nullable = out.nullable && a.nullable;
    }
    if (out.text.empty()) out.text = "\"\"";
    return out;
  }

  /// An unbounded repetition (* + {n,}) of what can match the empty string ("()*", "(a*)+", "(a|)*"): the grammar
  /// would loop without reading (left recursion), and "the same strings, without the empty ones" has no general
  /// GBNF form here.
  void refuse_unbounded_empty(const Expr& a, const std::string& quantifier) const {
    if (a.nullable) {
      fail("'" + quantifier + "' repeats a part that can match the empty string (write the repeated part so that it "
           "reads at least one character)");
    }
  }

  Expr repeat() {
    Expr e = atom();
    std::string& a = e.text;
    for (;;) {
      const char q = peek();
      if (q == '*' || q == '+' || q == '?') {
        ++p_;
        if (q != '?') refuse_unbounded_empty(e, std::string(1, q));
        a = "(" + a + ")" + std::string(1, q);
        e.nullable = e.nullable || q != '+';
      } else if (q == '{' && bounds_follow()) {
        ++p_;
        const std::int64_t lo = number();
        std::int64_t hi = lo;
        if (peek() == ',') {
          ++p_;
          hi = peek() == '}' ? -1 : number();
        }
        ++p_;  // '}'
        if (hi >= 0 && hi < lo) fail("{" + std::to_string(lo) + "," + std::to_string(hi) + "}: the bound below");
        if (hi < 0) refuse_unbounded_empty(e, "{" + std::to_string(lo) + ",}");
        e.nullable = e.nullable || lo == 0;
        a = "(" + a + "){" + std::to_string(lo) + (lo == hi ? "" : "," + (hi < 0 ? std::string() : std::to_string(hi))) + "}";
      } else {
        break;
      }
      if (peek() == '?') ++p_;  // lazy: the same strings
      if (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && bounds_follow())) {
        fail("a quantifier after a quantifier");
      }
      break;
    }
    return e;
  }

  /// Whether {n}, {n,} or {n,m} starts here (a '{' otherwise is a literal, as ECMA-262's Annex B reads it).
  bool bounds_follow() const {
    std::size_t i = p_ + 1, digits = 0;
    while (i < s_.size() && s_[i] >= '0' && s_[i] <= '9') ++i, ++digits;
    if (digits == 0) return false;
    if (i < s_.size() && s_[i] == ',') {
      ++i;
      while (i < s_.size() && s_[i] >= '0' && s_[i] <= '9') ++i;
    }
    return i < s_.size() && s_[i] == '}';
  }
  std::int64_t number() {
    std::int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      ++p_;
      if (v > kMaxRepeat) fail("a repetition bound above " + std::to_string(kMaxRepeat) + " (the grammar's bound)");
    }
    return v;
  }

  Expr atom() {
    const char c = peek();
    if (c == '(') {
      ++p_;
      if (peek() == '?') {
        if (s_.compare(p_, 2, "?:") == 0) {
          p_ += 2;
        } else if (s_.compare(p_, 2, "?<") == 0 && s_.compare(p_, 3, "?<=") != 0 && s_.compare(p_, 3, "?<!") != 0) {
          const std::size_t close = s_.find('>', p_);
          if (close == std::string_view::npos) fail("an unclosed group name");
          p_ = close + 1;
        } else {
          fail("lookaround ((?= (?! (?<= (?<!) is not supported");
        }
      }
      const Expr inner = alternation();
      if (peek() != ')') fail("a '(' without its ')'");
      ++p_;
      return {"(" + inner.text + ")", inner.nullable};
    }
    if (c == ')') fail("a ')' without its '('");
    if (c == '*' || c == '+' || c == '?') fail("a quantifier with nothing before it");
    if (c == '^' || c == '$') fail("the anchor '" + std::string(1, c) + "' away from the pattern's start or end");
    if (c == '[') return {set(klass(), false)};
    if (c == '.') {
      ++p_;
      return {set({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true)};
    }
    if (c == '\\') {
      ++p_;
      Ranges r;
      bool negated = false;
      if (class_escape(r, negated)) return {set(r, negated)};
      const std::uint32_t cp = char_escape();
      return {set({{cp, cp}}, false)};
    }
    const std::uint32_t cp = utf8_char();
    return {set({{cp, cp}}, false)};
  }

  /// \d \w \s and their negations into r (true), or false with nothing read.
  bool class_escape(Ranges& r, bool& negated) {
    const char e = peek();
    const char lower = static_cast<char>(e | 0x20);
    if (lower != 'd' && lower != 'w' && lower != 's') return false;
    ++p_;
    negated = e != lower;
    if (lower == 'd') r = {{'0', '9'}};
    if (lower == 'w') r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    if (lower == 's') {
      r = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
           {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    }
    return true;
  }

  /// The code point of an escape after '\' (not a class escape).
  std::uint32_t char_escape() {
    if (!more()) fail("a '\\' at the end");
    const char e = s_[p_++];
    switch (e) {
      case 't': return '\t';
      case 'n': return '\n';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0':
        if (peek() >= '0' && peek() <= '9') fail("an octal escape or backreference \\0" + std::string(1, peek()));
        return 0;
      case 'x': return hex(2);
      case 'u':
        if (peek() == '{') fail("\\u{...} (unicode mode) is not supported");
        return hex(4);
      default: break;
    }
    if (e >= '1' && e <= '9') fail("backreferences (\\" + std::string(1, e) + ") are not supported");
    if (e == 'b' || e == 'B') fail("word boundaries (\\" + std::string(1, e) + ") are not supported");
    if (e == 'p' || e == 'P' || e == 'k' || e == 'c') fail("the escape \\" + std::string(1, e) + " is not supported");
    const auto u = static_cast<unsigned char>(e);
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || u >= 0x80) {
      fail("the unknown escape \\" + std::string(1, e));
    }
    return u;  // an escaped punctuation character stands for itself
  }
  std::uint32_t hex(int n) {
    std::uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const char h = peek();
      const int d = h >= '0' && h <= '9' ? h - '0' : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10 : -1;
      if (d < 0) fail("a hex escape needs " + std::to_string(n) + " hex digits");
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++p_;
    }
    return v;
  }
  std::uint32_t utf8_char() {
    const auto b = static_cast<unsigned char>(s_[p_]);
    const int n = utf8::length(b);
    if (n == 0 || p_ + static_cast<std::size_t>(n) > s_.size()) fail("invalid UTF-8");
    std::uint32_t cp = n == 1 ? b : b & (0x7Fu >> n);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s_[p_ + static_cast<std::size_t>(k)]);
      if (k == 1 ? !utf8::second_ok(b, c) : (c & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (c & 0x3Fu);
    }
    p_ += static_cast<std::size_t>(n);
    return cp;
  }

  /// A class [...] (the '[' at p_): its ranges, and whether it is negated (as the first element of the pair).
  std::pair<Ranges, bool> klass_parse() {
    ++p_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++p_;
    }
    Ranges r;  // ECMA-262: [] is the empty class, [^] any character
    while (more() && peek() != ']') {
      std::uint32_t lo = 0;
      if (peek() == '\\') {
        ++p_;
        Ranges sub;
        bool neg = false;
        if (class_escape(sub, neg)) {
          if (neg) sub = complement(sub);
          r.insert(r.end(), sub.begin(), sub.end());
          continue;
        }
        lo = peek() == 'b' ? (++p_, 8u) : char_escape();  // [\b] is backspace
      } else {
        lo = utf8_char();
      }
      std::uint32_t hi = lo;
      if (peek() == '-' && p_ + 1 < s_.size() && s_[p_ + 1] != ']') {
        ++p_;
        if (peek() == '\\') {
          ++p_;
          Ranges sub;
          bool neg = false;
          if (class_escape(sub, neg)) fail("a class escape as the end of a range");
          hi = peek() == 'b' ? (++p_, 8u) : char_escape();
        } else {
          hi = utf8_char();
        }
        if (hi < lo) fail("a range out of order in a class");
      }
      r.emplace_back(lo, hi);
    }
    if (!more()) fail("a '[' without its ']'");
    ++p_;  // ']'
    return {r, negated};
  }
  Ranges klass() {
    auto [r, negated] = klass_parse();
    return negated ? complement(r) : r;
  }

  static Ranges normalised(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& [lo, hi] : r) {
      if (!out.empty() && lo <= out.back().second + 1) {
        out.back().second = std::max(out.back().second, hi);
      } else {
        out.emplace_back(lo, hi);
      }
    }
    return out;
  }
  static Ranges complement(const Ranges& r) {
    Ranges out;
    std::uint32_t next = 0;
    for (const auto& [lo, hi] : normalised(r)) {
      if (lo > next) out.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
    return out;
  }
  static std::string esc(std::uint32_t cp) {
    static const char* hexd = "0123456789abcdef";
    std::string out = cp > 0xFFFF ? "\\U" : "\\u";
    for (int sh = cp > 0xFFFF ? 28 : 12; sh >= 0; sh -= 4) out += hexd[(cp >> sh) & 15];
    return out;
  }

  /// GBNF for one character of the set (negated: of its complement) as the JSON text writes it: the characters it
  /// may hold unescaped as a class, '"' '\' and \b \f \n \r \t as their short escapes; other controls and surrogates
  /// are left out.
  std::string set(Ranges r, bool negated) {
    if (negated) r = complement(r);
    r = normalised(r);
    const auto has = [&](std::uint32_t cp) {
      return std::any_of(r.begin(), r.end(), [&](const auto& x) { return cp >= x.first && cp <= x.second; });
    };
    // The unescaped part: r minus controls (< 0x20), '"', '\', and the surrogates.
    const Ranges banned = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}};
    Ranges plain;
    for (const auto& [lo, hi] : r) {
      std::uint32_t a = lo;
      for (const auto& [blo, bhi] : banned) {
        if (bhi < a || blo > hi) continue;
        if (blo > a) plain.emplace_back(a, blo - 1);
        a = std::max(a, bhi + 1);
        if (a > hi) break;
      }
      if (a <= hi) plain.emplace_back(a, hi);
    }
    std::vector<std::string> alts;
    if (!plain.empty()) {
      std::string cls = "[";
      for (const auto& [lo, hi] : plain) cls += esc(lo) + (hi > lo ? "-" + esc(hi) : "");
      alts.push_back(cls + "]");
    }
    const std::pair<std::uint32_t, const char*> short_escapes[] = {
        {'"', R"("\\\"")"}, {'\\', R"("\\\\")"}, {'\b', R"("\\b")"}, {'\f', R"("\\f")"},
        {'\n', R"("\\n")"}, {'\r', R"("\\r")"},  {'\t', R"("\\t")"}};
    for (const auto& [cp, text] : short_escapes) {
      if (has(cp)) alts.emplace_back(text);
    }
    if (alts.empty()) fail("a class that no character of a JSON string matches");
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (std::size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string_view s_;
  std::string path_;
  std::size_t p_ = 0;
  int depth_ = 0;
  bool top_alternation_ = false;
};

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const nlohmann::ordered_json& root) : root_(root) {}

  std::string run() {
    rules_["ws"] = "[ \\t\\n]{0,20}";
    rules_["char"] = R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))";
    rules_["string"] = "\"\\\"\" char* \"\\\"\"";
    rules_["number"] = R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?)";
    rules_["integer"] = R"("-"? ("0" | [1-9] [0-9]{0,15}))";
    rules_["boolean"] = R"("true" | "false")";
    rules_["null"] = R"("null")";
    rules_["value"] = "object | array | string | number | boolean | null";
    rules_["object"] = R"("{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}")";
    rules_["array"] = R"("[" ws ( value ( ws "," ws value )* )? ws "]")";
    const std::string top = compile(root_, "#", "root");
    if (top != "root") rules_["root"] = top;
    std::string out;
    out += "root ::= " + rules_.at("root") + "\n";
    for (const auto& [name, body] : rules_) {
      if (name != "root") out += name + " ::= " + body + "\n";
    }
    return out;
  }

 private:
  [[noreturn]] static void refuse(const std::string& path, const std::string& what) {
    MAXTEXT_THROW(ArgumentError, "[json_schema] ", path, ": ", what);
  }

  /// A rule name for `hint` not used yet (names: letters, digits, '-').
  std::string fresh(const std::string& hint) {
    std::string base;
    for (const char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      base += ok ? c : '-';
    }
    if (base.empty() || kReserved.count(base) != 0) base = "s-" + base;
    std::string name = base;
    for (int i = 2; rules_.count(name) != 0 || pending_.count(name) != 0; ++i) name = base + "-" + std::to_string(i);
    pending_.insert(name);
    return name;
  }

  /// The rule matching `s` (at schema path `path`); `hint` names a new rule. Returns a rule name or a GBNF expression.
  std::string compile(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    struct Depth {
      int& d;
      explicit Depth(int& v) : d(++v) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxDepth) refuse(path, "schemas nested deeper than " + std::to_string(kMaxDepth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return "value";
      refuse(path, "the schema false accepts no value");
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean, found " + std::string(s.type_name()));
    static const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",
                                                       "$schema",  "$id",         "$comment", "deprecated",
                                                       "readOnly", "writeOnly",   "format",   "$defs",
                                                       "definitions"};
    static const std::set<std::string> kKnown = {"type",     "enum",     "const",    "properties", "required",
                                                 "additionalProperties", "items",    "minItems",   "maxItems",
                                                 "minLength", "maxLength", "anyOf",   "oneOf",      "allOf",
                                                 "$ref",     "minimum",  "maximum",  "exclusiveMinimum",
                                                 "exclusiveMaximum", "pattern"};
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (kAnnotations.count(k) == 0 && kKnown.count(k) == 0) {
        refuse(path, "keyword '" + k + "' is not supported (the grammar would not enforce it)");
      }
    }
    if (s.contains("pattern") && s.contains("type") && s["type"] != "string") {
      refuse(path, "pattern is enforced for type string alone (or with no type)");
    }
    const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                         s.contains("exclusiveMaximum");
    if (bounded && (!s.contains("type") || s["type"] != "integer" || s.contains("enum") || s.contains("const"))) {
      refuse(path, "minimum, maximum, exclusiveMinimum and exclusiveMaximum are enforced for type integer alone "
                   "(not for numbers, a list of types, or beside enum / const)");
    }
    if (s.contains("$ref")) {
      if (s.size() > 1) {
        for (const auto& [k, v] : s.items()) {
          (void)v;
          if (k != "$ref" && kAnnotations.count(k) == 0) refuse(path, "'$ref' beside '" + k + "' is not supported");
        }
      }
      return ref(s["$ref"], path);
    }
    if (s.contains("const")) return emit(hint, gbnf_literal(s["const"].dump()));
    if (s.contains("enum")) {
      const auto& e = s["enum"];
      if (!e.is_array() || e.empty()) refuse(path + "/enum", "expected a non-empty array");
      std::string body;
      for (const auto& v : e) body += (body.empty() ? "" : " | ") + gbnf_literal(v.dump());
      return emit(hint, body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const auto& alts = s[key];
      if (!alts.is_array() || alts.empty()) refuse(path + "/" + key, "expected a non-empty array of schemas");
      std::string body;
      for (std::size_t i = 0; i < alts.size(); ++i) {
        body += (i ? " | " : "") + compile(alts[i], path + "/" + key + "/" + std::to_string(i), hint + "-" + std::to_string(i));
      }
      return emit(hint, body);
    }
    if (s.contains("allOf")) {
      const auto& a = s["allOf"];
      if (!a.is_array() || a.size() != 1) refuse(path + "/allOf", "only an allOf of one schema is supported");
      return compile(a[0], path + "/allOf/0", hint);
    }
    if (!s.contains("type")) {
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
        return object(s, path, hint);
      }
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return array(s, path, hint);
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) return string(s, path, hint);
      return "value";
    }
    const auto& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) refuse(path + "/type", "an empty list of types");
      std::string body;
      for (std::size_t i = 0; i < t.size(); ++i) body += (i ? " | " : "") + of_type(s, t[i], path, hint + "-" + std::to_string(i));
      return emit(hint, body);
    }
    return of_type(s, t, path, hint);
  }

  std::string of_type(const nlohmann::ordered_json& s, const nlohmann::ordered_json& t, const std::string& path,
                      const std::string& hint) {
    if (!t.is_string()) refuse(path + "/type", "expected a type name or a list of them");
    const std::string type = t.get<std::string>();
    if (type == "object") return object(s, path, hint);
    if (type == "array") return array(s, path, hint);
    if (type == "string") return string(s, path, hint);
    if (type == "integer" && (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                              s.contains("exclusiveMaximum"))) {
      return integer(s, path, hint);
    }
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
    refuse(path + "/type", "unknown type '" + type + "' (string, number, integer, boolean, null, object, array)");
  }

  static std::int64_t count_of(const nlohmann::ordered_json& s, const char* key, const std::string& path) {
    const auto& v = s[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) refuse(path + "/" + key, "expected an integer >= 0");
    const auto n = v.get<std::int64_t>();
    if (n > kMaxRepeat) refuse(path + "/" + key, "above " + std::to_string(kMaxRepeat) + " (the grammar's bound)");
    return n;
  }

  static std::string repeat(std::int64_t lo, std::int64_t hi) {
    if (hi < 0) return "{" + std::to_string(lo) + ",}";
    return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  /// The largest magnitude the grammar's integers reach (16 digits, as the `integer` rule).
  static constexpr std::int64_t kMaxMagnitude = 9999999999999999;

  /// The integers in [lo, hi] from the schema's bounds (clamped to +-kMaxMagnitude); refused when there is none.
  std::string integer(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    constexpr std::int64_t kOut = kMaxMagnitude + 1;  // a bound beyond the grammar's integers, either side
    // The least (up = true: greatest) integer n with n >= v (n > v when exclusive; up: n <= v, n < v), clamped to
    // [-kOut, kOut]. Integral JSON values are taken exactly (a double holds 53 bits, the grammar's integers 54).
    auto integral = [&](const char* key, bool up, bool exclusive) -> std::int64_t {
      const auto& v = s[key];
      if (!v.is_number()) refuse(path + "/" + key, "expected a number");
      if (v.is_number_unsigned()) {
        const std::uint64_t u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(kOut)) return kOut;
        const auto x = static_cast<std::int64_t>(u);
        return exclusive ? (up ? x - 1 : x + 1) : x;
      }
      if (v.is_number_integer()) {
        const std::int64_t x = std::clamp(v.get<std::int64_t>(), -kOut, kOut);
        return exclusive ? (up ? x - 1 : x + 1) : x;
      }
      const double d = v.get<double>();
      const double r = up ? (exclusive ? std::ceil(d) - 1 : std::floor(d)) : (exclusive ? std::floor(d) + 1 : std::ceil(d));
      return static_cast<std::int64_t>(std::clamp(r, -static_cast<double>(kOut), static_cast<double>(kOut)));
    };
    std::int64_t lo = -kMaxMagnitude, hi = kMaxMagnitude;
    if (s.contains("minimum")) lo = std::max(lo, integral("minimum", false, false));
    if (s.contains("exclusiveMinimum")) lo = std::max(lo, integral("exclusiveMinimum", false, true));
    if (s.contains("maximum")) hi = std::min(hi, integral("maximum", true, false));
    if (s.contains("exclusiveMaximum")) hi = std::min(hi, integral("exclusiveMaximum", true, true));
    if (lo > hi) refuse(path, "no integer the grammar writes (at most 16 digits) lies within the bounds");
    return emit(hint, integer_range(lo, hi));
  }

  /// GBNF for the decimal integers (no leading zeros, "-" for negatives, no "-0") in [lo, hi].
  static std::string integer_range(std::int64_t lo, std::int64_t hi) {
    std::vector<std::string> alts;
    if (lo < 0) {  // "-" then the magnitudes [max(1, -hi), -lo]
      for (const std::string& a : magnitudes(std::max<std::int64_t>(1, -hi), -lo)) alts.push_back("\"-\" (" + a + ")");
    }
    if (hi >= 0) {
      for (const std::string& a : magnitudes(std::max<std::int64_t>(0, lo), hi)) alts.push_back(a);
    }
    std::string body;
    for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + ("(" + a + ")");
    return body;
  }

  /// Alternatives for the numbers [a, b] (0 <= a <= b) written in decimal: one digit-string range per length.
  static std::vector<std::string> magnitudes(std::int64_t a, std::int64_t b) {
    std::vector<std::string> out;
    const std::string A = std::to_string(a), B = std::to_string(b);
    for (std::size_t n = A.size(); n <= B.size(); ++n) {
      const std::string from = n == A.size() ? A : "1" + std::string(n - 1, '0');
      const std::string to = n == B.size() ? B : std::string(n, '9');
      out.push_back(digit_range(from, to));
    }
    return out;
  }

  /// GBNF for the digit strings of one length from `a` to `b` (a <= b, same length), in lexicographic order.
  static std::string digit_range(const std::string& a, const std::string& b) {
    if (a.empty()) return "\"\"";
    const std::size_t rest = a.size() - 1;
    auto any = [&](std::size_t n) { return n == 0 ? std::string() : " [0-9]{" + std::to_string(n) + "}"; };
    auto digits = [](char x, char y) {
      return x == y ? "\"" + std::string(1, x) + "\"" : "[" + std::string(1, x) + "-" + std::string(1, y) + "]";
    };
    if (a[0] == b[0]) {
      return rest == 0 ? digits(a[0], a[0]) : digits(a[0], a[0]) + " (" + digit_range(a.substr(1), b.substr(1)) + ")";
    }
    const bool low_full = a.substr(1) == std::string(rest, '0'), high_full = b.substr(1) == std::string(rest, '9');
    // a[0] with its tail up to 9...9; the digits strictly between with any tail; b[0] with its tail from 0...0. A
    // first or last digit whose tail covers everything joins the middle.
    const char mid_lo = low_full ? a[0] : static_cast<char>(a[0] + 1);
    const char mid_hi = high_full ? b[0] : static_cast<char>(b[0] - 1);
    std::vector<std::string> parts;
    if (!low_full) parts.push_back(digits(a[0], a[0]) + " (" + digit_range(a.substr(1), std::string(rest, '9')) + ")");
    if (mid_lo <= mid_hi) parts.push_back(digits(mid_lo, mid_hi) + any(rest));
    if (!high_full) parts.push_back(digits(b[0], b[0]) + " (" + digit_range(std::string(rest, '0'), b.substr(1)) + ")");
    std::string body;
    for (const std::string& p : parts) body += (body.empty() ? "" : " | ") + p;
    return body;
  }

  std::string string(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    if (s.contains("format") && s["format"].is_string()) {
      const std::string f = s["format"].get<std::string>();
      if (f == "date" || f == "time" || f == "date-time" || f == "uuid") {
        if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) {
          refuse(path, "format " + f + " together with pattern / minLength / maxLength is not supported");
        }
        define_formats();
        return emit(hint, "\"\\\"\" fmt-" + f + " \"\\\"\"");
      }
    }
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength")) {
        refuse(path, "pattern together with minLength / maxLength is not supported");
      }
      if (!s["pattern"].is_string()) refuse(path + "/pattern", "expected a string");
      return emit(hint, "\"\\\"\" " + PatternCompiler(s["pattern"].get<std::string>(), path).run() + " \"\\\"\"");
    }
    if (!s.contains("minLength") && !s.contains("maxLength")) return "string";
    const std::int64_t lo = s.contains("minLength") ? count_of(s, "minLength", path) : 0;
    const std::int64_t hi = s.contains("maxLength") ? count_of(s, "maxLength", path) : -1;
    if (hi >= 0 && hi < lo) refuse(path, "maxLength below minLength");
    return emit(hint, "\"\\\"\" char" + repeat(lo, hi) + " \"\\\"\"");
  }

  /// The enforced formats' rules (RFC 3339 dates and times, RFC 4122 UUIDs), defined once when a schema uses one.
  void define_formats() {
    if (rules_.count("fmt-date") != 0) return;
    const std::string d2 = "[0-9] [0-9]", leap4 = R"(("0" [48] | [2468] [048] | [13579] [26]))";
    // A Gregorian leap year: divisible by 4, and centuries only when divisible by 400 (the first two digits by 4).
    rules_["fmt-leap-year"] = d2 + " " + leap4 + R"( | ("0" [048] | [2468] [048] | [13579] [26]) "00")";
    rules_["fmt-date"] = "[0-9]{4} \"-\" (" +
                         std::string(R"(("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))") +
                         R"( | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30"))" +
                         R"( | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) | fmt-leap-year "-02-29")";
    const std::string hh = R"(([01] [0-9] | "2" [0-3]))", mm = "[0-5] [0-9]";
    rules_["fmt-time"] = hh + " \":\" " + mm + " \":\" " + mm + R"( ("." [0-9]{1,9})? ("Z" | [+-] )" + hh +
                         " \":\" " + mm + ")";
    rules_["fmt-date-time"] = "fmt-date \"T\" fmt-time";
    const std::string hex = "[0-9a-fA-F]";
    rules_["fmt-uuid"] =
        hex + "{8} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex + "{12}";
  }

  /// While alive: the schemas compiled inside come after a "{" or "[" has been read, so a $ref back to a definition
  /// being compiled is no longer left recursion (ref() below).
  struct Consumed {
    std::set<std::string>& open;
    std::set<std::string> saved;
    explicit Consumed(std::set<std::string>& o) : open(o), saved(std::move(o)) { open.clear(); }
    ~Consumed() { open = std::move(saved); }
  };

  std::string array(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    const Consumed consumed(open_);
    const std::string item = s.contains("items") ? compile(s["items"], path + "/items", hint + "-item") : "value";
    const std::int64_t lo = s.contains("minItems") ? count_of(s, "minItems", path) : 0;
    const std::int64_t hi = s.contains("maxItems") ? count_of(s, "maxItems", path) : -1;
    if (hi >= 0 && hi < lo) refuse(path, "maxItems below minItems");
    if (hi == 0) return emit(hint, "\"[\" ws \"]\"");
    // [ item (, item){lo-1, hi-1} ], optional as a whole when lo == 0
    const std::string more = "( ws \",\" ws " + item + " )" + repeat(lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    const std::string items = item + " " + more;
    return emit(hint, "\"[\" ws " + (lo == 0 ? "( " + items + " )?" : items) + " ws \"]\"");
  }

  std::string object(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    const Consumed consumed(open_);
    std::vector<std::pair<std::string, std::string>> props;  // (key literal, value rule)
    std::vector<bool> required;
    std::set<std::string> req;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse(path + "/required", "expected an array of property names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) refuse(path + "/required", "expected an array of property names");
        req.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) refuse(path + "/properties", "expected an object");
      for (const auto& [k, v] : s["properties"].items()) {
        const std::string value = compile(v, path + "/properties/" + k, hint + "-" + k);
        props.emplace_back(gbnf_literal(nlohmann::ordered_json(k).dump()), value);
        required.push_back(req.erase(k) > 0);
      }
    }
    if (!req.empty()) refuse(path + "/required", "'" + *req.begin() + "' is required but not in properties");
    std::string extra;  // the value rule of other members, or "" for none
    if (!s.contains("additionalProperties") || s["additionalProperties"] == true) {
      extra = "value";
    } else if (s["additionalProperties"] != false) {
      extra = compile(s["additionalProperties"], path + "/additionalProperties", hint + "-extra");
    }
    // Chains over the listed properties, in order: F_i (nothing written yet, at property i) and R_i (something
    // written: a comma comes first). Past the last property, the other members (if any), then "}".
    //   F_i ::= kv_i R_i+1 (required) | kv_i R_i+1 | F_i+1 (optional)
    //   R_i ::= ws "," ws kv_i R_i+1 (required) | ( ws "," ws kv_i )? R_i+1 (optional)
    const std::size_t n = props.size();
    const std::string name = fresh(hint);
    std::vector<std::string> f(n + 1), r(n + 1);
    for (std::size_t i = 0; i <= n; ++i) {
      f[i] = fresh(hint + "-f" + std::to_string(i));
      r[i] = fresh(hint + "-r" + std::to_string(i));
    }
    define(name, "\"{\" ws " + f[0]);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string kv = props[i].first + " ws \":\" ws " + props[i].second;
      if (required[i]) {
        define(f[i], kv + " " + r[i + 1]);
        define(r[i], "ws \",\" ws " + kv + " " + r[i + 1]);
      } else {
        define(f[i], kv + " " + r[i + 1] + " | " + f[i + 1]);
        define(r[i], "( ws \",\" ws " + kv + " )? " + r[i + 1]);
      }
    }
    const std::string close = "ws \"}\"";
    if (extra.empty()) {
      define(f[n], close);
      define(r[n], close);
    } else {
      const std::string kv = "string ws \":\" ws " + extra;
      define(f[n], "( " + kv + " ( ws \",\" ws " + kv + " )* )? " + close);
      define(r[n], "( ws \",\" ws " + kv + " )* " + close);
    }
    return name;
  }

  void define(const std::string& name, const std::string& body) {
    pending_.erase(name);
    rules_[name] = body;
  }

  std::string emit(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    define(name, body);
    return name;
  }

  std::string ref(const nlohmann::ordered_json& r, const std::string& path) {
    if (!r.is_string()) refuse(path + "/$ref", "expected a string");
    const std::string target = r.get<std::string>();
    const auto it = refs_.find(target);
    if (it != refs_.end()) {
      // A definition that reaches itself through $ref, anyOf, oneOf and allOf alone, before any "{" or "[": it
      // would match a value only by first matching that same value (left recursion; no validator can end it).
      if (open_.count(target) != 0) {
        refuse(path + "/$ref", "'" + target + "' refers to itself before any value is read (left recursion)");
      }
      return it->second;
    }
    const nlohmann::ordered_json* node = nullptr;
    std::string hint = "ref";
    if (target == "#") {
      node = &root_;
      hint = "root-ref";
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (target.rfind(p, 0) != 0) continue;
        const std::string key = target.substr(p.size());
        const std::string container = p.substr(2, p.size() - 3);
        if (root_.contains(container) && root_[container].contains(key)) node = &root_[container][key];
        hint = key;
      }
    }
    if (node == nullptr) refuse(path + "/$ref", "'" + target + "' is not a local definition (#/$defs/NAME, #/definitions/NAME or #)");
    // Named before it is compiled, so that a recursive schema refers to its own rule.
    const std::string name = fresh(hint);
    refs_[target] = name;
    open_.insert(target);
    const std::string body = compile(*node, target, name + "-body");
    open_.erase(target);
    define(name, body);
    return name;
  }

  static inline const std::set<std::string> kReserved = {"root",    "ws",       "char",     "string",   "number",
                                                        "integer", "boolean",  "null",     "value",    "object",
                                                        "array",   "fmt-date", "fmt-time", "fmt-uuid", "fmt-date-time",
                                                        "fmt-leap-year"};
  const nlohmann::ordered_json& root_;
  std::map<std::string, std::string> rules_;
  std::set<std::string> pending_;
  std::map<std::string, std::string> refs_;
  std::set<std::string> open_;  // $ref targets being compiled, with no "{" or "[" read since they began
  int depth_ = 0;
  static constexpr int kMaxDepth = 128;
};

}  // namespace detail

/// The GBNF text of a grammar whose sentences are the JSON documents `schema` accepts (see the top of this file);
/// throws ArgumentError naming the keyword and its path for what it does not enforce.
inline std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return detail::SchemaCompiler(schema).run();
}

/// The same, parsed: ready for a Matcher.
inline std::shared_ptr<const Grammar> grammar_from_json_schema(const nlohmann::ordered_json& schema) {
  return std::make_shared<const Grammar>(Grammar::parse(json_schema_to_gbnf(schema)));
}

/// What a caller was given as text: a GBNF grammar, or a JSON Schema (JSON text). The grammar it names, or an
/// ArgumentError that starts with `option` (the CLI option or keyword argument that carried the text) and says why.
enum class GrammarText { gbnf, json_schema };
inline std::shared_ptr<const Grammar> grammar_from_text(GrammarText kind, const std::string& text,
                                                        const std::string& option) {
  try {
    if (kind == GrammarText::gbnf) return std::make_shared<const Grammar>(Grammar::parse(text));
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      MAXTEXT_THROW(ArgumentError, "not valid JSON: ", e.what());
    }
    return grammar_from_json_schema(schema);
  } catch (const ArgumentError& e) {
    MAXTEXT_THROW(ArgumentError, option, ": ", e.what());
  }
}

}  // namespace maxtext::models::grammar
