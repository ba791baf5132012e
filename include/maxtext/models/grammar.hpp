// models/grammar.hpp: grammars for constrained output. A grammar in GBNF, as llama.cpp writes it
// (grammars/README.md there), is parsed into rules over Unicode code points. A Matcher follows a text through the
// grammar: it takes the text's bytes as they come (a token may end inside a UTF-8 character) and says whether some
// bytes may come next, which tokens of a vocabulary may (allowed_tokens, mask_logits), and whether the text so far is
// a whole sentence of the grammar. Sampling under a grammar: mask_logits on each step's logits, then the sampler, then
// accept() the chosen token's text.
//
//   root   ::= object
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= "\"" [a-z]+ "\"" ws ":" ws [0-9]+ ws
//   ws     ::= [ \t\n]*
//
// The syntax: `name ::= alternatives`; alternatives separated by `|`; a sequence of items, each a literal ("..."), a
// class of code points ([a-z0-9_], negated [^\n]), `.` (any code point), a rule's name or a parenthesised group,
// optionally followed by `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`. Escapes: \n \r \t \\ \" \[ \] \xHH \uHHHH
// \UHHHHHHHH. `#` starts a comment. A rule ends at the end of its line, except after `|` and inside parentheses.
// Names are letters, digits, `-` and `_`. The start rule is `root`.
//
// Refused by name, with the line and column: a syntax error, an unknown escape, a rule used but not defined, a rule
// defined twice, no `root`, an empty class, a repetition {m,n} with m > n or a bound above kMaxRepeat, and left
// recursion (a rule that can reach itself without consuming a code point: the matcher would never stop expanding it).
//
// Matching: the matcher keeps the set of pushdown stacks the text so far leaves open (each stack: where to continue in
// each rule being matched, innermost on top), expanded until each top is a code-point class; a code point advances
// every stack whose top class takes it. Repetitions are lowered to generated rules (x* -> R ::= x R | empty), as
// llama.cpp does. A grammar ambiguous enough to pass kMaxStacks, kMaxStepWork or kMaxNodes is refused when it gets there
// (an ArgumentError from accept(), allows() or mask_logits).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"

namespace maxtext::models::grammar {

namespace utf8 {
/// The length of the character a byte starts (RFC 3629), or 0 for a byte that starts none: continuation bytes, the
/// overlong leads C0 / C1 and F5..FF.
inline int length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}
/// Whether `c` may follow `lead` as its first continuation byte: the ranges that exclude overlong forms (E0, F0),
/// the UTF-16 surrogates (ED) and code points past U+10FFFF (F4).
inline bool second_ok(unsigned char lead, unsigned char c) {
  if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
  if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
  if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
  if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
  return (c & 0xC0) == 0x80;
}
}  // namespace utf8

/// The largest m or n of a repetition {m,n}.
inline constexpr std::int64_t kMaxRepeat = 1000;
/// The most elements a grammar may have once its repetitions are lowered.
inline constexpr std::int64_t kMaxElements = 1 << 20;
/// The most stacks a matcher keeps (an `enum` of a JSON Schema keeps one per value while they share a prefix), the most
/// stacks it may make for one code point before they are deduplicated, and the most nodes its stacks' arena holds
/// (their distinct positions; a deep nesting costs one node per level). More means that the grammar is too ambiguous,
/// or the text nested too deeply in it, to follow: refused by name. They bound the work per code point of accept()
/// and allows() (mask_logits: one allows() per vocabulary entry).
inline constexpr std::size_t kMaxStacks = 1024;
inline constexpr std::size_t kMaxStepWork = 4 * kMaxStacks;
inline constexpr std::size_t kMaxNodes = 1 << 20;

/// One element of an alternative: a class of code points, or a rule.
struct Element {
  bool is_rule = false;
  std::int32_t rule = -1;
  bool negated = false;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;  ///< inclusive code-point ranges

  bool matches(std::uint32_t cp) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
    return in != negated;
  }
  /// Whether some code point of [lo, hi] matches.
  bool matches_some(std::uint32_t lo, std::uint32_t hi) const {
    if (!negated) {
      for (const auto& [a, b] : ranges) {
        if (a <= hi && b >= lo) return true;
      }
      return false;
    }
    // Negated: some code point of [lo, hi] lies outside every range.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> r = ranges;
    std::sort(r.begin(), r.end());
    std::uint32_t next = lo;  // the smallest code point of [lo, hi] not yet known to be covered
    for (const auto& [a, b] : r) {
      if (b < next) continue;
      if (a > next) return true;
      if (b >= hi) return false;
      next = b + 1;
    }
    return next <= hi;
  }
};

using Alternative = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Alternative> alternatives;
};

class Grammar {
 public:
  /// Parses GBNF text; throws ArgumentError "[grammar] line L, column C: ..." on what it refuses.
  static Grammar parse(std::string_view text);

  const std::vector<Rule>& rules() const { return rules_; }
  /// The rule called `name`, or -1.
  std::int32_t find(std::string_view name) const {
    const auto it = ids_.find(std::string(name));
    return it == ids_.end() ? -1 : it->second;
  }
  std::int32_t root() const { return find("root"); }

 private:
  friend class Parser;
  std::vector<Rule> rules_;
  std::map<std::string, std::int32_t> ids_;
};

/// The GBNF parser (Grammar::parse): recursive descent over the text, lowering repetitions into generated rules.
class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Grammar run() {
    skip(true);
    while (p_ < s_.size()) {
      parse_rule();
      skip(true);
    }
    for (const auto& [name, where] : used_) {
      if (defined_.count(name) == 0) fail_at(where, "rule '", name, "' is used but not defined");
    }
    MAXTEXT_CHECK(g_.find("root") >= 0, ArgumentError, "[grammar] no rule named 'root' (the start rule)");
    check_left_recursion();
    return std::move(g_);
  }

 private:
  template <class... T>
  [[noreturn]] void fail_at(std::size_t at, const T&... what) const {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    MAXTEXT_THROW(ArgumentError, "[grammar] line ", line, ", column ", col, ": ", what...);
  }
  template <class... T>
  [[noreturn]] void fail(const T&... what) const {
    fail_at(p_, what...);
  }

  bool at_end() const { return p_ >= s_.size(); }
  char peek(std::size_t k = 0) const { return p_ + k < s_.size() ? s_[p_ + k] : '\0'; }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  /// Spaces, tabs and comments; newlines too where `newlines`.
  void skip(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++p_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++p_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const std::size_t b = p_;
    while (!at_end() && name_char(peek())) ++p_;
    if (p_ == b) fail("expected a rule name");
    return std::string(s_.substr(b, p_ - b));
  }

  std::int32_t rule_id(const std::string& name) {
    const auto it = g_.ids_.find(name);
    if (it != g_.ids_.end()) return it->second;
    const auto id = static_cast<std::int32_t>(g_.rules_.size());
    g_.rules_.push_back(Rule{name, {}});
    g_.ids_.emplace(name, id);
    return id;
  }

  /// A generated rule for a group or a repetition of rule `parent`.
  std::int32_t new_rule(std::int32_t parent) {
    // '/' is not a name character: a generated name never meets a rule of the text.
    const std::string name = g_.rules_[static_cast<std::size_t>(parent)].name + "/" + std::to_string(++generated_);
    const std::int32_t id = rule_id(name);
    defined_.insert({name, p_});
    return id;
  }

  void count(std::size_t n) {
    elements_ += static_cast<std::int64_t>(n);
    if (elements_ > kMaxElements) fail("the grammar has more than ", kMaxElements, " elements once repetitions are expanded");
  }

  void parse_rule() {
    const std::size_t at = p_;
    const std::string name = parse_name();
    skip(false);
    if (!(peek() == ':' && peek(1) == ':' && peek(2) == '=')) fail("expected '::=' after rule name '", name, "'");
    p_ += 3;
    skip(false);
    if (!defined_.insert({name, at}).second) fail_at(at, "rule '", name, "' is defined twice");
    const std::int32_t id = rule_id(name);
    g_.rules_[static_cast<std::size_t>(id)].alternatives = parse_alternatives(id, false);
    if (!at_end() && peek() != '\n' && peek() != '\r') fail("expected the end of the line after rule '", name, "'");
  }

  /// alternatives := sequence ('|' sequence)*; inside a group, newlines are spaces.
  std::vector<Alternative> parse_alternatives(std::int32_t rule, bool nested) {
    std::vector<Alternative> alts;
    alts.push_back(parse_sequence(rule, nested));
    while (peek() == '|') {
      ++p_;
      skip(true);  // a newline after '|' continues the rule
      alts.push_back(parse_sequence(rule, nested));
    }
    return alts;
  }

  Alternative parse_sequence(std::int32_t rule, bool nested) {
    Alternative seq;
    for (;;) {
      skip(nested);
      if (at_end()) break;
      const char c = peek();
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      const std::size_t start = seq.size();
      if (c == '"') {
        ++p_;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("unterminated literal (a missing '\"')");
          const std::uint32_t cp = parse_char();
          seq.push_back(chars({{cp, cp}}, false));
        }
        ++p_;
      } else if (c == '[') {
        seq.push_back(parse_class());
      } else if (c == '.') {
        ++p_;
        seq.push_back(chars({}, true));  // any code point: nothing excluded
      } else if (c == '(') {
        if (++depth_ > kMaxDepth) fail("groups nested deeper than ", kMaxDepth);
        ++p_;
        const std::int32_t g = new_rule(rule);
        auto alts = parse_alternatives(g, true);
        skip(true);
        if (peek() != ')') fail("expected ')'");
        ++p_;
        --depth_;
        g_.rules_[static_cast<std::size_t>(g)].alternatives = std::move(alts);
        seq.push_back(ref(g));
      } else if (name_char(c)) {
        const std::size_t at = p_;
        const std::string n = parse_name();
        used_.emplace(n, at);
        seq.push_back(ref(rule_id(n)));
      } else {
        fail("unexpected character '", std::string(1, c), "'");
      }
      count(seq.size() - start);
      parse_repetition(rule, seq, start);
    }
    return seq;
  }

  /// An escape or a UTF-8 character inside a literal or a class.
  std::uint32_t parse_char() {
    if (peek() == '\\') {
      ++p_;
      const char e = peek();
      ++p_;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
          return static_cast<std::uint32_t>(e);
        case 'x':
          return parse_hex(2);
        case 'u':
          return parse_hex(4);
        case 'U':
          return parse_hex(8);
        default:
          p_ -= 2;
          fail("unknown escape '\\", std::string(1, e == '\0' ? ' ' : e), "'");
      }
    }
    const auto b = static_cast<unsigned char>(peek());
    const int n = utf8::length(b);
    if (n == 0 || p_ + static_cast<std::size_t>(n) > s_.size()) fail("invalid UTF-8");
    std::uint32_t cp = n == 1 ? b : b & (0x7Fu >> n);
    for (int i = 1; i < n; ++i) {
      const auto c = static_cast<unsigned char>(s_[p_ + static_cast<std::size_t>(i)]);
      if (i == 1 ? !utf8::second_ok(b, c) : (c & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (c & 0x3Fu);
    }
    p_ += static_cast<std::size_t>(n);
    return cp;
  }

  std::uint32_t parse_hex(int digits) {
    std::uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("expected ", digits, " hexadecimal digits");
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++p_;
    }
    if (v > 0x10FFFF) fail("code point above U+10FFFF");
    return v;
  }

  Element parse_class() {
    ++p_;  // '['
    bool neg = false;
    if (peek() == '^') {
      neg = true;
      ++p_;
    }
    std::vector<std::pair<std::uint32_t, std::uint32_t>> r;
    while (peek() != ']') {
      if (at_end() || peek() == '\n') fail("unterminated character class (a missing ']')");
      const std::uint32_t lo = parse_char();
      std::uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        ++p_;
        if (at_end()) fail("unterminated character class (a missing ']')");
        hi = parse_char();
        if (hi < lo) fail("range end below its start in a character class");
      }
      r.emplace_back(lo, hi);
    }
    ++p_;
    if (r.empty()) fail(neg ? "empty negated class [^] (use . for any code point)" : "empty character class []");
    return chars(std::move(r), neg);
  }

  static Element chars(std::vector<std::pair<std::uint32_t, std::uint32_t>> r, bool neg) {
    Element e;
    e.ranges = std::move(r);
    e.negated = neg;
    return e;
  }
  static Element ref(std::int32_t rule) {
    Element e;
    e.is_rule = true;
    e.rule = rule;
    return e;
  }

  std::int64_t parse_count() {
    if (!(peek() >= '0' && peek() <= '9')) fail("expected a number in a repetition {m,n}");
    std::int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail("repetition count above ", kMaxRepeat);
      ++p_;
    }
    return v;
  }

  /// A postfix operator on seq[start..]: the item is lowered into generated rules.
  void parse_repetition(std::int32_t rule, Alternative& seq, std::size_t start) {
    const char c = peek();
    std::int64_t lo = 0, hi = -1;  // hi -1: unbounded
    if (c == '*') {
      ++p_;
    } else if (c == '+') {
      lo = 1;
      ++p_;
    } else if (c == '?') {
      hi = 1;
      ++p_;
    } else if (c == '{') {
      ++p_;
      skip(false);
      lo = parse_count();
      skip(false);
      if (peek() == ',') {
        ++p_;
        skip(false);
        if (peek() != '}') hi = parse_count();
      } else {
        hi = lo;
      }
      skip(false);
      if (peek() != '}') fail("expected '}' after a repetition");
      ++p_;
      if (hi >= 0 && hi < lo) fail("repetition {", lo, ",", hi, "}: the maximum is below the minimum");
    } else {
      return;
    }
    // The item as one element: itself, or (several elements: a literal) a rule holding them.
    Element item;
    if (seq.size() - start == 1) {
      item = seq.back();
    } else {
      const std::int32_t g = new_rule(rule);
      g_.rules_[static_cast<std::size_t>(g)].alternatives = {Alternative(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.end())};
      item = ref(g);
    }
    seq.resize(start);
    count(static_cast<std::size_t>(lo) + 2);
    for (std::int64_t i = 0; i < lo; ++i) seq.push_back(item);
    if (hi < 0) {
      // R ::= item R | (empty)
      const std::int32_t r = new_rule(rule);
      g_.rules_[static_cast<std::size_t>(r)].alternatives = {{item, ref(r)}, {}};
      seq.push_back(ref(r));
    } else if (hi > lo) {
      // (hi - lo) optional items, nested: R_k ::= item R_{k-1} | (empty), R_1 ::= item | (empty)
      std::int32_t inner = -1;
      count(static_cast<std::size_t>(2 * (hi - lo)));
      for (std::int64_t k = 0; k < hi - lo; ++k) {
        const std::int32_t r = new_rule(rule);
        Alternative a{item};
        if (inner >= 0) a.push_back(ref(inner));
        g_.rules_[static_cast<std::size_t>(r)].alternatives = {std::move(a), {}};
        inner = r;
      }
      seq.push_back(ref(inner));
    }
  }

  /// Refuses a rule that can reach itself through the first elements of its alternatives (after rules that may
  /// match nothing): expanding it would never reach a code point.
  void check_left_recursion() const {
    const auto& rules = g_.rules_;
    const std::size_t n = rules.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& a : rules[r].alternatives) {
          const bool all = std::all_of(a.begin(), a.end(), [&](const Element& e) {
            return e.is_rule && nullable[static_cast<std::size_t>(e.rule)];
          });
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // left[r]: the rules r can start with.
    std::vector<std::vector<std::int32_t>> left(n);
    for (std::size_t r = 0; r < n; ++r) {
      for (const auto& a : rules[r].alternatives) {
        for (const auto& e : a) {
          if (!e.is_rule) break;
          left[r].push_back(e.rule);
          if (!nullable[static_cast<std::size_t>(e.rule)]) break;
        }
      }
    }
    // A cycle in `left` is left recursion: iterative depth-first search with colours.
    std::vector<char> colour(n, 0);  // 0 new, 1 on the path, 2 done
    for (std::size_t s = 0; s < n; ++s) {
      if (colour[s]) continue;
      std::vector<std::pair<std::size_t, std::size_t>> path{{s, 0}};
      colour[s] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i < left[r].size()) {
          const auto next = static_cast<std::size_t>(left[r][i++]);
          if (colour[next] == 1) {
            MAXTEXT_THROW(ArgumentError, "[grammar] left recursion: rule '", rules[next].name,
                          "' can reach itself without consuming a character");
          }
          if (colour[next] == 0) {
            colour[next] = 1;
            path.emplace_back(next, 0);
          }
        } else {
          colour[r] = 2;
          path.pop_back();
        }
      }
    }
  }

  std::string_view s_;
  std::size_t p_ = 0;
  Grammar g_;
  std::map<std::string, std::size_t> defined_;  // name -> where (generated rules too)
  std::multimap<std::string, std::size_t> used_;
  int generated_ = 0;
  std::int64_t elements_ = 0;
  int depth_ = 0;
  static constexpr int kMaxDepth = 256;
};

inline Grammar Grammar::parse(std::string_view text) { return Parser(text).run(); }

/// A vocabulary's pieces (each token's bytes) as a byte trie, for allowed_tokens on large vocabularies: tokens that
/// share a prefix share the matcher's steps over it, and a prefix the grammar refuses rules out every token under it
/// at once. A 128k-token vocabulary (Llama 3) of 831k bytes makes 275k nodes. Empty pieces are in no node (never
/// allowed).
class TokenTrie {
 public:
  TokenTrie() = default;
  explicit TokenTrie(const std::vector<std::string>& pieces) : pieces_(pieces.size()) {
    std::vector<std::int32_t> ids;
    for (std::size_t t = 0; t < pieces.size(); ++t) {
      if (!pieces[t].empty()) ids.push_back(static_cast<std::int32_t>(t));
    }
    // Sorted pieces: each shares its longest common prefix with the one before, so the nodes are made in one pass
    // (depth-first order), and the tokens of one piece lie together.
    std::sort(ids.begin(), ids.end(), [&](std::int32_t a, std::int32_t b) {
      return pieces[static_cast<std::size_t>(a)] < pieces[static_cast<std::size_t>(b)];
    });
    nodes_.push_back(Node{});
    std::vector<std::int32_t> path{0};  // path[k]: the node of the current piece's first k bytes
    std::vector<std::int32_t> last_child{-1};
    const std::string* prev = nullptr;
    for (const std::int32_t id : ids) {
      const std::string& p = pieces[static_cast<std::size_t>(id)];
      std::size_t common = 0;
      if (prev != nullptr) {
        while (common < p.size() && common < prev->size() && p[common] == (*prev)[common]) ++common;
      }
      path.resize(common + 1);
      last_child.resize(common + 1);
      for (std::size_t k = common; k < p.size(); ++k) {
        const auto n = static_cast<std::int32_t>(nodes_.size());
        nodes_.push_back(Node{-1, -1, static_cast<unsigned char>(p[k]), 0, 0});
        Node& parent = nodes_[static_cast<std::size_t>(path[k])];
        if (last_child[k] < 0) {
          parent.first_child = n;
        } else {
          nodes_[static_cast<std::size_t>(last_child[k])].next_sibling = n;
        }
        last_child[k] = n;
        path.push_back(n);
        last_child.push_back(-1);
      }
      Node& end = nodes_[static_cast<std::size_t>(path.back())];
      if (end.tokens_end == end.tokens_begin) end.tokens_begin = end.tokens_end = static_cast<std::int32_t>(tokens_.size());
      tokens_.push_back(id);
      ++end.tokens_end;
      prev = &p;
    }
  }

  /// Tokens of the vocabulary the trie was made from (its pieces.size()).
  std::size_t vocab_size() const { return pieces_; }
  std::size_t num_nodes() const { return nodes_.size(); }

 private:
  friend class Matcher;
  struct Node {
    std::int32_t first_child = -1, next_sibling = -1;
    unsigned char byte = 0;
    std::int32_t tokens_begin = 0, tokens_end = 0;  ///< tokens_[begin, end): the tokens whose piece ends here
  };
  std::vector<Node> nodes_;  ///< node 0: the empty prefix
  std::vector<std::int32_t> tokens_;
  std::size_t pieces_ = 0;
};

/// Follows a text through a grammar (see the top of this file).
///
/// The stacks share their storage: each is a node (its top position) of one arena whose nodes point to the node
/// below, and equal (position, below) pairs are one node, so that equal stacks are equal numbers. A step then costs
/// per stack a few lookups, not a copy of the stack. allows() and a refused accept() take back the nodes they made;
/// accept() drops nodes that no stack reaches any more once they outnumber the live ones. A Matcher is a value (copies
/// are independent); its const members change the arena in passing, so one Matcher is used by one thread at a time.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g, std::string_view start = "root") : g_(std::move(g)) {
    MAXTEXT_CHECK(g_ != nullptr, ArgumentError, "[grammar] no grammar");
    const std::int32_t r = g_->find(start);
    MAXTEXT_CHECK(r >= 0, ArgumentError, "[grammar] no rule named '", start, "'");
    std::size_t work = 0;
    for (std::size_t a = 0; a < g_->rules()[static_cast<std::size_t>(r)].alternatives.size(); ++a) {
      expand(push(kEmpty, Pos{r, static_cast<std::int32_t>(a), 0}), stacks_, work);
    }
    normalise(stacks_);
  }

  /// Takes `bytes` (UTF-8; the last character may be incomplete, the next call completes it) if the grammar allows
  /// them here; returns false and changes nothing if it does not (or if they are not UTF-8).
  bool accept(std::string_view bytes) {
    std::vector<Stack> st;
    std::string partial;
    const Rollback undo(*this);
    if (!advance(bytes, st, partial)) return false;
    undo.keep();
    stacks_ = std::move(st);
    partial_ = std::move(partial);
    if (nodes_.size() > 4096 + 2 * live_) collect();
    return true;
  }

  /// Whether accept(bytes) would succeed (nothing changes). Empty bytes are allowed while the text can go on.
  bool allows(std::string_view bytes) const {
    std::vector<Stack> st;
    std::string partial;
    const Rollback undo(*this);
    return advance(bytes, st, partial);
  }

  /// ok[t] = whether allows(piece of t) for every token of the trie's vocabulary (ok is resized to it), by one walk
  /// over the trie: each node is one step from its parent's state, and a refused prefix skips its whole subtree.
  /// Nothing changes (the arena nodes a subtree makes are taken back when the walk leaves it).
  void allowed(const TokenTrie& trie, std::vector<bool>& ok) const {
    ok.assign(trie.vocab_size(), false);
    if (trie.nodes_.empty()) return;
    const Rollback undo(*this);
    struct Frame {
      std::int32_t next;  ///< the next child to visit, or -1
      std::vector<Stack> st;
      std::string partial;
      std::size_t mark;  ///< the arena's size before this state was made
    };
    // The nodes a subtree made are taken back when the walk leaves it, once they are more than kSpare: below that
    // they stay for the siblings, whose states mostly make the same (position, below) pairs again. A node a live
    // frame's state holds is older than every mark above it, so taking back to a mark never removes one in use.
    constexpr std::size_t kSpare = 1024;
    const auto leave = [&](std::size_t mark) {
      if (nodes_.size() > mark + kSpare) truncate(mark);
    };
    std::vector<Frame> frames;
    frames.push_back(Frame{trie.nodes_[0].first_child, stacks_, partial_, nodes_.size()});
    while (!frames.empty()) {
      Frame& f = frames.back();
      if (f.next < 0) {
        leave(f.mark);
        frames.pop_back();
        continue;
      }
      const TokenTrie::Node& c = trie.nodes_[static_cast<std::size_t>(f.next)];
      f.next = c.next_sibling;
      const std::size_t mark = nodes_.size();
      std::vector<Stack> st;
      std::string partial;
      const char byte = static_cast<char>(c.byte);
      if (!advance_from(f.st, f.partial, std::string_view(&byte, 1), st, partial)) {
        leave(mark);
        continue;
      }
      for (std::int32_t i = c.tokens_begin; i < c.tokens_end; ++i) ok[static_cast<std::size_t>(trie.tokens_[static_cast<std::size_t>(i)])] = true;
      if (c.first_child >= 0) {
        frames.push_back(Frame{c.first_child, std::move(st), std::move(partial), mark});
      } else {
        leave(mark);
      }
    }
  }

  /// The text so far is a whole sentence of the start rule (generation may end here).
  bool complete() const {
    return partial_.empty() && std::any_of(stacks_.begin(), stacks_.end(), [](Stack s) { return s == kEmpty; });
  }
  /// Some code point may still come (the text is not at a dead end of the grammar).
  bool can_continue() const {
    return std::any_of(stacks_.begin(), stacks_.end(), [](Stack s) { return s != kEmpty; });
  }
  /// Stacks being followed (for tests and diagnostics).
  std::size_t num_stacks() const { return stacks_.size(); }
  /// Nodes the stacks' arena holds now (for tests and diagnostics).
  std::size_t num_nodes() const { return nodes_.size(); }

 private:
  struct Pos {
    std::int32_t rule, alt, idx;
    auto operator<=>(const Pos&) const = default;
  };
  using Stack = std::int32_t;  ///< the arena node on top of the stack, or kEmpty
  static constexpr Stack kEmpty = -1;
  struct Node {
    Pos pos;
    Stack below;
  };
  struct NodeKey {
    Pos pos;
    Stack below;
    bool operator==(const NodeKey&) const = default;
  };
  struct NodeHash {
    std::size_t operator()(const NodeKey& k) const noexcept {
      std::uint64_t h = 0x9E3779B97F4A7C15ull;
      for (const std::int32_t v : {k.pos.rule, k.pos.alt, k.pos.idx, k.below}) {
        h = (h ^ static_cast<std::uint32_t>(v)) * 0x100000001B3ull;
        h ^= h >> 29;
      }
      return static_cast<std::size_t>(h);
    }
  };

  /// Takes back the nodes made since it was built, unless keep() is called (also when an exception passes).
  class Rollback {
   public:
    explicit Rollback(const Matcher& m) : m_(m), size_(m.nodes_.size()) {}
    Rollback(const Rollback&) = delete;
    Rollback& operator=(const Rollback&) = delete;
    void keep() const { kept_ = true; }
    ~Rollback() {
      if (kept_) return;
      for (std::size_t i = size_; i < m_.nodes_.size(); ++i) m_.index_.erase(NodeKey{m_.nodes_[i].pos, m_.nodes_[i].below});
      m_.nodes_.resize(size_);
    }

   private:
    const Matcher& m_;
    std::size_t size_;
    mutable bool kept_ = false;
  };

  const Alternative& alt_of(const Pos& p) const {
    return g_->rules()[static_cast<std::size_t>(p.rule)].alternatives[static_cast<std::size_t>(p.alt)];
  }
  const Pos& top(Stack s) const { return nodes_[static_cast<std::size_t>(s)].pos; }
  Stack below(Stack s) const { return nodes_[static_cast<std::size_t>(s)].below; }
  /// The element the stack's top waits for (the stack is not empty and its top not at the end of its alternative).
  const Element& next_element(Stack s) const { return alt_of(top(s))[static_cast<std::size_t>(top(s).idx)]; }

  /// The stack `below` with `p` on top (one node for each distinct pair).
  Stack push(Stack below, Pos p) const {
    const auto [it, fresh] = index_.try_emplace(NodeKey{p, below}, static_cast<Stack>(nodes_.size()));
    if (fresh) {
      if (nodes_.size() >= kMaxNodes) {
        index_.erase(it);
        MAXTEXT_THROW(ArgumentError, "[grammar] the parse stacks hold more than ", kMaxNodes, " positions: the text "
                      "is nested too deeply in the grammar, or the grammar is too ambiguous, to follow");
      }
      nodes_.push_back(Node{p, below});
    }
    return it->second;
  }

  /// Expands `s` until the top of each stack it becomes is a code-point class (or the stack is empty: the start rule
  /// is matched), into `out`. `work` counts the stacks made in this step (at most kMaxStepWork). Iterative: a long
  /// chain of rules does not deepen the C++ stack.
  void expand(Stack s0, std::vector<Stack>& out, std::size_t& work) const {
    std::vector<Stack>& todo = todo_;  // empty between calls; kept for its capacity
    todo.assign(1, s0);
    while (!todo.empty()) {
      Stack s = todo.back();
      todo.pop_back();
      while (s != kEmpty && static_cast<std::size_t>(top(s).idx) >= alt_of(top(s)).size()) s = below(s);
      if (s == kEmpty || !next_element(s).is_rule) {
        out.push_back(s);
        continue;
      }
      const std::int32_t r = next_element(s).rule;
      Pos after = top(s);
      ++after.idx;  // continue after the rule once it is matched (not kept if that ends the alternative)
      const Stack base = static_cast<std::size_t>(after.idx) < alt_of(after).size() ? push(below(s), after) : below(s);
      const auto& alts = g_->rules()[static_cast<std::size_t>(r)].alternatives;
      work += alts.size();
      if (work > kMaxStepWork) {
        MAXTEXT_THROW(ArgumentError, "[grammar] more than ", kMaxStepWork, " parse stacks made for one character: "
                      "the grammar is too ambiguous to follow (rule '", g_->rules()[static_cast<std::size_t>(r)].name,
                      "')");
      }
      for (std::size_t a = 0; a < alts.size(); ++a) todo.push_back(push(base, Pos{r, static_cast<std::int32_t>(a), 0}));
    }
  }

  /// Sorts and deduplicates; refuses more than kMaxStacks stacks.
  static void normalise(std::vector<Stack>& st) {
    std::sort(st.begin(), st.end());
    st.erase(std::unique(st.begin(), st.end()), st.end());
    MAXTEXT_CHECK(st.size() <= kMaxStacks, ArgumentError, "[grammar] more than ", kMaxStacks,
                  " parse stacks: the grammar is too ambiguous to follow");
  }

  /// The stacks after code point cp (empty: rejected).
  std::vector<Stack> step(const std::vector<Stack>& from, std::uint32_t cp) const {
    std::vector<Stack> out;
    std::size_t work = 0;
    for (const Stack s : from) {
      if (s == kEmpty || !next_element(s).matches(cp)) continue;
      Pos p = top(s);
      ++p.idx;
      expand(static_cast<std::size_t>(p.idx) < alt_of(p).size() ? push(below(s), p) : below(s), out, work);
    }
    normalise(out);
    return out;
  }

  /// Keeps only the nodes the current stacks reach (numbered in the same order: a node's below comes before it).
  void collect() {
    std::vector<char> live(nodes_.size(), 0);
    for (const Stack s0 : stacks_) {
      for (Stack s = s0; s != kEmpty && !live[static_cast<std::size_t>(s)]; s = below(s)) live[static_cast<std::size_t>(s)] = 1;
    }
    std::vector<Stack> renumber(nodes_.size(), kEmpty);
    std::vector<Node> kept;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (!live[i]) continue;
      const Node& n = nodes_[i];
      renumber[i] = static_cast<Stack>(kept.size());
      kept.push_back(Node{n.pos, n.below == kEmpty ? kEmpty : renumber[static_cast<std::size_t>(n.below)]});
    }
    nodes_ = std::move(kept);
    index_.clear();
    for (std::size_t i = 0; i < nodes_.size(); ++i) index_.emplace(NodeKey{nodes_[i].pos, nodes_[i].below}, static_cast<Stack>(i));
    for (Stack& s : stacks_) s = s == kEmpty ? kEmpty : renumber[static_cast<std::size_t>(s)];
    live_ = nodes_.size();
  }

  /// Takes back the arena nodes from index `size` on (made by a state no longer used).
  void truncate(std::size_t size) const {
    for (std::size_t i = size; i < nodes_.size(); ++i) index_.erase(NodeKey{nodes_[i].pos, nodes_[i].below});
    if (size < nodes_.size()) nodes_.resize(size);
  }

  /// Runs `bytes` after the current state into (st, partial); false where the grammar or UTF-8 rejects them.
  bool advance(std::string_view bytes, std::vector<Stack>& st, std::string& partial) const {
    return advance_from(stacks_, partial_, bytes, st, partial);
  }

  /// Runs `bytes` after the state (from, from_partial) into (st, partial); false where the grammar or UTF-8 rejects
  /// them.
  bool advance_from(const std::vector<Stack>& from, const std::string& from_partial, std::string_view bytes,
                    std::vector<Stack>& st, std::string& partial) const {
    const std::vector<Stack>* cur = &from;  // stepped from without a copy; `st` holds the stacks once stepped
    partial = from_partial;
    partial.append(bytes);
    std::size_t i = 0;
    while (i < partial.size()) {
      const auto b = static_cast<unsigned char>(partial[i]);
      const int n = utf8::length(b);  // well-formed UTF-8 only: no overlong forms, surrogates or past U+10FFFF
      if (n == 0) return false;
      std::uint32_t cp = n == 1 ? b : b & (0x7Fu >> n);
      const std::size_t have = std::min(partial.size() - i, static_cast<std::size_t>(n));
      for (std::size_t k = 1; k < have; ++k) {
        const auto c = static_cast<unsigned char>(partial[i + k]);
        if (k == 1 ? !utf8::second_ok(b, c) : (c & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (c & 0x3Fu);
      }
      if (have < static_cast<std::size_t>(n)) {
        // An incomplete character: some code point it may become must be taken by some stack. With the lead byte
        // alone, the range is cut to the well-formed code points that lead starts (E0: U+0800.., ED: ..U+D7FF,
        // F0: U+10000.., F4: ..U+10FFFF); a valid second byte already keeps it there.
        const int missing = n - static_cast<int>(have);
        std::uint32_t lo = cp << (6 * missing), hi = lo | ((1u << (6 * missing)) - 1);
        if (have == 1 && n >= 3) {
          lo = std::max(lo, n == 3 ? 0x800u : 0x10000u);
          if (b == 0xED) hi = 0xD7FF;
          hi = std::min(hi, 0x10FFFFu);
        }
        const bool some = std::any_of(cur->begin(), cur->end(), [&](Stack s) {
          return s != kEmpty && next_element(s).matches_some(lo, hi);
        });
        if (!some) return false;
        if (cur != &st) st = *cur;
        partial.erase(0, i);
        return true;
      }
      st = step(*cur, cp);
      cur = &st;
      if (st.empty()) return false;
      i += static_cast<std::size_t>(n);
    }
    if (cur != &st) st = *cur;
    partial.clear();
    return true;
  }

  std::shared_ptr<const Grammar> g_;
  mutable std::vector<Node> nodes_;                                 ///< the stacks' arena
  mutable std::unordered_map<NodeKey, Stack, NodeHash> index_;      ///< (position, below) -> node
  mutable std::vector<Stack> todo_;                                 ///< expand()'s scratch
  std::size_t live_ = 0;                                            ///< nodes_ after the last collect()
  std::vector<Stack> stacks_;
  std::string partial_;  ///< the bytes of an incomplete last character
};

/// allowed[t]: whether the matcher can take token t's bytes (`pieces[t]`, as the tokenizer decodes the token alone)
/// now. An empty piece (a special token without text) is not allowed: it would not move the text on.
inline std::vector<bool> allowed_tokens(const Matcher& m, const std::vector<std::string>& pieces) {
  std::vector<bool> ok(pieces.size(), false);
  for (std::size_t t = 0; t < pieces.size(); ++t) ok[t] = !pieces[t].empty() && m.allows(pieces[t]);
  return ok;
}

/// allowed_tokens by one walk over the vocabulary's trie (the same answers; for large vocabularies).
inline std::vector<bool> allowed_tokens(const Matcher& m, const TokenTrie& trie) {
  std::vector<bool> ok;
  m.allowed(trie, ok);
  return ok;
}

/// Constrains one step's logits [n] to the grammar: a token the matcher cannot take now gets -inf; an end-of-sequence
/// token (`eos`) keeps its logit only where the text so far is complete. Sampling then picks an allowed token (the
/// sampler refuses a row whose every logit is -inf by name). `pieces[t]` is token t's text (allowed_tokens).
inline void mask_logits(const Matcher& m, const std::vector<std::string>& pieces, const std::vector<std::int32_t>& eos,
                        float* logits, std::int64_t n) {
  MAXTEXT_CHECK(static_cast<std::int64_t>(pieces.size()) >= n, ArgumentError, "[grammar] ", pieces.size(),
                " token pieces for ", n, " logits");
  const bool done = m.complete();
  for (std::int64_t t = 0; t < n; ++t) {
    const auto id = static_cast<std::int32_t>(t);
    const bool is_eos = std::find(eos.begin(), eos.end(), id) != eos.end();
    const bool ok = is_eos ? done : (!pieces[static_cast<std::size_t>(t)].empty() && m.allows(pieces[static_cast<std::size_t>(t)]));
    if (!ok) logits[t] = -std::numeric_limits<float>::infinity();
  }
}

/// mask_logits with the allowed tokens from the vocabulary's trie (the same result; one walk instead of one matcher
/// run per token).
inline void mask_logits(const Matcher& m, const TokenTrie& trie, const std::vector<std::int32_t>& eos, float* logits,
                        std::int64_t n) {
  MAXTEXT_CHECK(static_cast<std::int64_t>(trie.vocab_size()) >= n, ArgumentError, "[grammar] a trie of ",
                trie.vocab_size(), " tokens for ", n, " logits");
  std::vector<bool> ok;
  m.allowed(trie, ok);
  const bool done = m.complete();
  for (std::int64_t t = 0; t < n; ++t) {
    const auto id = static_cast<std::int32_t>(t);
    const bool is_eos = std::find(eos.begin(), eos.end(), id) != eos.end();
    if (!(is_eos ? done : ok[static_cast<std::size_t>(t)])) logits[t] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace maxtext::models::grammar
