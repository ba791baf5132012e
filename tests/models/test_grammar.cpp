// GBNF grammars and the matcher (models/grammar.hpp). The expectations come from the grammar's meaning, worked out by
// hand for small grammars (which texts are whole sentences, which are prefixes, which are refused), and, for a JSON
// grammar written from RFC 8259, from an independent parser: nlohmann::json::accept decides, for valid documents and
// for thousands of corrupted ones, whether the text is JSON, and the matcher must agree; every prefix of a valid
// document must be allowed. Refusals name the line and column. JSON Schemas compiled to grammars (json_schema.hpp):
// documents the schema accepts and documents it refuses, worked out by hand from the schema's meaning (each also
// checked to be JSON by nlohmann::json), and the keywords it refuses by name.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "maxtext/models/grammar.hpp"
#include "maxtext/models/json_schema.hpp"

using namespace maxtext;
namespace gr = maxtext::models::grammar;

namespace {

enum class Verdict { refused, prefix, complete };

std::shared_ptr<const gr::Grammar> grammar(std::string_view text) {
  return std::make_shared<const gr::Grammar>(gr::Grammar::parse(text));
}

Verdict run(const std::shared_ptr<const gr::Grammar>& g, std::string_view text) {
  gr::Matcher m(g);
  if (!m.accept(text)) return Verdict::refused;
  return m.complete() ? Verdict::complete : Verdict::prefix;
}

void refused_with(std::string_view text, const std::string& what) {
  INFO(text);
  REQUIRE_THROWS_AS(gr::Grammar::parse(text), ArgumentError);
  REQUIRE_THROWS_WITH(gr::Grammar::parse(text), Catch::Contains(what));
}

// RFC 8259, section 2-7, as GBNF (strings: any code point but '"', '\' and controls, or an escape).
const char* kJson = R"G(root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n\r]*
)G";

/// A random JSON document. Two things nlohmann::json refuses that the grammar cannot see stay out of reach of one
/// corruption: \u escapes of surrogates (none are written) and numbers beyond double's range (exponents of one
/// digit).
std::string random_json(std::mt19937& g, int depth) {
  auto pick = [&](int n) { return static_cast<int>(g() % static_cast<unsigned>(n)); };
  auto ws = [&]() {
    static const char* kWs[] = {"", "", " ", "\n", "\t ", "\r\n"};
    return std::string(kWs[pick(6)]);
  };
  const int kind = depth > 2 ? 2 + pick(4) : pick(6);
  switch (kind) {
    case 0: {
      std::string s = "{" + ws();
      const int n = pick(3);
      for (int i = 0; i < n; ++i) {
        s += (i ? ws() + "," + ws() : "") + "\"k" + std::to_string(pick(100)) + "\"" + ws() + ":" + ws() +
             random_json(g, depth + 1);
      }
      return s + ws() + "}";
    }
    case 1: {
      std::string s = "[" + ws();
      const int n = pick(4);
      for (int i = 0; i < n; ++i) s += (i ? ws() + "," + ws() : "") + random_json(g, depth + 1);
      return s + ws() + "]";
    }
    case 2: {
      static const char* kStr[] = {"\"\"", "\"abc\"", "\"a\\\"b\"", "\"\\u00e9t\\u00e9\"", "\"\\\\/\\b\\f\\n\\r\\t\"",
                                   "\"\xC3\xA9\xE3\x81\x82\"", "\"x y\""};
      return kStr[pick(7)];
    }
    case 3: {
      static const char* kNum[] = {"0", "-0", "12", "-3.25", "1e5", "2E-3", "6.02e+3", "-0.5"};
      return kNum[pick(8)];
    }
    case 4: {
      static const char* kLit[] = {"true", "false", "null"};
      return kLit[pick(3)];
    }
    default:
      return "[" + ws() + "]";
  }
}

}  // namespace

TEST_CASE("grammar: an arithmetic grammar takes sentences and their prefixes and refuses the rest", "[grammar]") {
  const auto g = grammar(R"G(
# arithmetic
root ::= expr
expr ::= term ([-+*/] term)*
term ::= num | "(" ws expr ")" ws
num  ::= [0-9]+ ws
ws   ::= [ \t\n]*
)G");
  CHECK(run(g, "1+2") == Verdict::complete);
  CHECK(run(g, "12 *(3 -4)") == Verdict::complete);
  CHECK(run(g, "12 * 3") == Verdict::refused);  // no ws after an operator in this grammar
  CHECK(run(g, "(((7)))") == Verdict::complete);
  CHECK(run(g, "") == Verdict::prefix);
  CHECK(run(g, "1+") == Verdict::prefix);
  CHECK(run(g, "(1") == Verdict::prefix);
  CHECK(run(g, "1++") == Verdict::refused);
  CHECK(run(g, "()") == Verdict::refused);
  CHECK(run(g, "a") == Verdict::refused);
  CHECK(run(g, "1)") == Verdict::refused);
}

TEST_CASE("grammar: repetitions *, +, ?, {m}, {m,}, {m,n} on characters, literals and groups", "[grammar]") {
  const auto a24 = grammar(R"G(root ::= "a"{2,4})G");
  CHECK(run(a24, "") == Verdict::prefix);
  CHECK(run(a24, "a") == Verdict::prefix);
  CHECK(run(a24, "aa") == Verdict::complete);
  CHECK(run(a24, "aaa") == Verdict::complete);
  CHECK(run(a24, "aaaa") == Verdict::complete);
  CHECK(run(a24, "aaaaa") == Verdict::refused);
  const auto ab3 = grammar(R"G(root ::= "ab"{3})G");
  CHECK(run(ab3, "ababab") == Verdict::complete);
  CHECK(run(ab3, "abab") == Verdict::prefix);
  CHECK(run(ab3, "abababa") == Verdict::refused);
  CHECK(run(ab3, "abb") == Verdict::refused);
  const auto d2 = grammar(R"G(root ::= [0-9]{2,} "x")G");
  CHECK(run(d2, "1x") == Verdict::refused);
  CHECK(run(d2, "12x") == Verdict::complete);
  CHECK(run(d2, "123456x") == Verdict::complete);
  const auto opt = grammar(R"G(root ::= "x"? "y"+ ("," "z")*)G");
  CHECK(run(opt, "y") == Verdict::complete);
  CHECK(run(opt, "xyy,z,z") == Verdict::complete);
  CHECK(run(opt, "x") == Verdict::prefix);
  CHECK(run(opt, "xx") == Verdict::refused);
  CHECK(run(opt, "y,") == Verdict::prefix);
  CHECK(run(opt, "y,,") == Verdict::refused);
  const auto zero = grammar(R"G(root ::= "a"{0} "b"{0,2} "c")G");
  CHECK(run(zero, "c") == Verdict::complete);
  CHECK(run(zero, "bbc") == Verdict::complete);
  CHECK(run(zero, "bbb") == Verdict::refused);
  CHECK(run(zero, "ac") == Verdict::refused);
}

TEST_CASE("grammar: classes, negation, escapes, any code point, UTF-8 split across pieces", "[grammar]") {
  const auto line = grammar(R"G(root ::= [^\n]+ "\n")G");
  CHECK(run(line, "abc\n") == Verdict::complete);
  CHECK(run(line, "\n") == Verdict::refused);
  CHECK(run(line, "ab") == Verdict::prefix);
  const auto hex = grammar(R"G(root ::= [a-c\x41-\x43]+)G");
  CHECK(run(hex, "aBCb") == Verdict::complete);
  CHECK(run(hex, "aD") == Verdict::refused);
  CHECK(run(grammar(R"G(root ::= "\u00e9t\u00e9 \U0001F600")G"), "\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80") == Verdict::complete);
  CHECK(run(grammar(R"G(root ::= "<" . ">")G"), "<\xC3\xA9>") == Verdict::complete);
  CHECK(run(grammar(R"G(root ::= "<" . ">")G"), "<>") == Verdict::prefix);  // '.' took the '>'
  CHECK(run(grammar(R"G(root ::= "<" . ">")G"), "<>>") == Verdict::complete);
  CHECK(run(grammar(R"G(root ::= "<" . ">")G"), "<ab") == Verdict::refused);
  CHECK(run(grammar(R"G(root ::= "\"\\\[\]\t")G"), "\"\\[]\t") == Verdict::complete);

  const auto kana = grammar("root ::= [\xE3\x81\x81-\xE3\x82\x9F]+");  // [ぁ-ゟ]+ written in UTF-8
  CHECK(run(kana, "\xE3\x81\x82\xE3\x81\x84") == Verdict::complete);   // あい
  CHECK(run(kana, "a") == Verdict::refused);
  gr::Matcher m(kana);
  CHECK(m.accept("\xE3"));   // the first byte of あ (E3 81 82): U+3000..U+3FFF may still be a kana
  CHECK_FALSE(m.complete());
  CHECK_FALSE(m.allows("\x80\x80"));  // U+3000 is not a kana
  CHECK(m.accept("\x81\x82"));
  CHECK(m.complete());
  CHECK_FALSE(m.allows("\xE4"));  // U+4000..U+4FFF: none is a kana
  CHECK_FALSE(m.allows("\xFF"));  // not UTF-8
  CHECK_FALSE(m.allows("\x82"));  // a continuation byte without a start
  CHECK(m.complete());            // a refused piece changes nothing
  const auto not_a = grammar("root ::= [^a]");
  gr::Matcher n(not_a);
  CHECK(n.allows("\xC3"));  // U+00C0..U+00FF, none excluded
  CHECK_FALSE(n.allows("a"));
}

// Found by `maxtext serve` on stories260K: a JSON-schema request streamed F0 80 81 BB, an overlong form of '{', one
// byte-fallback token at a time, and the matcher took it as the object's brace. Only well-formed UTF-8 (RFC 3629)
// may pass: no overlong forms, no UTF-16 surrogates, nothing past U+10FFFF, whole or split across pieces.
TEST_CASE("grammar: overlong forms, surrogates and code points past U+10FFFF are refused", "[grammar]") {
  const auto brace = grammar(R"G(root ::= "{" [^\x00]* )G");
  CHECK(run(brace, "{") == Verdict::complete);
  for (const char* bad : {"\xC1\xBB", "\xE0\x81\xBB", "\xF0\x80\x81\xBB"}) {  // '{' as 2, 3 and 4 bytes
    INFO("overlong form of length " << std::string(bad).size());
    gr::Matcher m(brace);
    CHECK_FALSE(m.allows(bad));
    bool took = true;
    for (const char* p = bad; *p != '\0' && took; ++p) took = m.accept(std::string(1, *p));  // byte by byte
    CHECK_FALSE(took);
  }
  const auto any = grammar(R"G(root ::= [^\x00]+ )G");
  CHECK(run(any, "\xED\x9F\xBF") == Verdict::complete);  // U+D7FF
  CHECK(run(any, "\xED\xA0\x80") == Verdict::refused);   // U+D800, a surrogate
  CHECK(run(any, "\xF4\x8F\xBF\xBF") == Verdict::complete);  // U+10FFFF
  CHECK(run(any, "\xF4\x90\x80\x80") == Verdict::refused);   // U+110000
  CHECK(run(any, "\xF5\x80\x80\x80") == Verdict::refused);
  gr::Matcher m(grammar(R"G(root ::= [\x00-\u07FF] )G"));
  CHECK_FALSE(m.allows("\xE0"));  // a 3-byte lead starts only U+0800 and above
  refused_with("root ::= \"\xC0\xBB\"", "invalid UTF-8");
  refused_with("root ::= \"\xED\xA0\x80\"", "invalid UTF-8");
}

TEST_CASE("grammar: newlines continue a rule after | and inside groups, comments anywhere", "[grammar]") {
  const auto g = grammar("root ::= \"a\" |  # first\n   \"b\" | item\nitem ::= ( \"x\"\n  | \"y\" # inside\n )\n\n");
  CHECK(run(g, "a") == Verdict::complete);
  CHECK(run(g, "b") == Verdict::complete);
  CHECK(run(g, "y") == Verdict::complete);
  CHECK(run(g, "ab") == Verdict::refused);
  CHECK(run(grammar("root ::= \"\" | \"q\""), "") == Verdict::complete);
  CHECK(run(grammar("root ::= a b\na ::= \"\" | \"x\"\nb ::= \"y\"?"), "") == Verdict::complete);
  CHECK(run(grammar("root ::= Some_Name-2\nSome_Name-2 ::= \"k\""), "k") == Verdict::complete);
}

TEST_CASE("grammar: refusals name what is wrong, with its line and column", "[grammar]") {
  refused_with("root = \"a\"", "line 1, column 6: expected '::=' after rule name 'root'");
  refused_with("root ::= \"a", "line 1, column 12: unterminated literal");
  refused_with("root ::= [a-", "unterminated character class");
  refused_with("root ::= \"\\q\"", "line 1, column 11: unknown escape '\\q'");
  refused_with("root ::= \"\\x4\"", "expected 2 hexadecimal digits");
  refused_with("root ::= \"\\U00110000\"", "code point above U+10FFFF");
  refused_with("root ::= item", "line 1, column 10: rule 'item' is used but not defined");
  refused_with("item ::= \"a\"", "no rule named 'root'");
  refused_with("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
  refused_with("root ::= root \"a\"", "left recursion: rule 'root' can reach itself");
  refused_with("root ::= a \"x\"\na ::= b\nb ::= \"\" | a \"y\"", "left recursion");
  refused_with("root ::= \"x\"? root", "left recursion");
  refused_with("root ::= \"a\"{3,2}", "repetition {3,2}: the maximum is below the minimum");
  refused_with("root ::= \"a\"{1001}", "repetition count above 1000");
  refused_with("root ::= \"a\"{1,", "expected a number in a repetition");
  refused_with("root ::= []", "empty character class");
  refused_with("root ::= [z-a]", "range end below its start");
  refused_with("root ::= (\"a\"", "expected ')'");
  refused_with("root ::= \"a\" )", "expected the end of the line after rule 'root'");
  refused_with("root ::= \"a\" ! \"b\"", "line 1, column 14: unexpected character '!'");
  refused_with("root ::= \"\xFF\"", "invalid UTF-8");
  refused_with("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')'), "groups nested deeper than 256");
  std::string many = "root ::= ";
  for (int i = 0; i < 1100; ++i) many += "\"a\"{1000} ";
  refused_with(many, "elements once repetitions are expanded");
  CHECK_THROWS_WITH(gr::Matcher(grammar("root ::= \"a\""), "start"), Catch::Contains("no rule named 'start'"));
}

TEST_CASE("grammar: a JSON grammar agrees with nlohmann::json on valid and corrupted documents", "[grammar]") {
  const auto g = grammar(kJson);
  std::mt19937 rng(2026);
  const std::string alphabet = "{}[]\",:0123456789.-+eE \n\ttrufalsn\\/bx\xC3\xA9";
  int valid = 0, invalid = 0;
  for (int i = 0; i < 600; ++i) {
    const std::string doc = random_json(rng, 0);
    INFO(doc);
    REQUIRE(nlohmann::json::accept(doc));
    // every prefix is allowed, the whole is complete
    gr::Matcher m(g);
    for (char c : doc) REQUIRE(m.accept(std::string(1, c)));
    REQUIRE(m.complete());
    ++valid;
    for (int k = 0; k < 8; ++k) {
      std::string bad = doc;
      const std::size_t at = rng() % (bad.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          bad.insert(at, 1, c);
          break;
        case 1:
          if (at < bad.size()) bad.erase(at, 1);
          break;
        default:
          if (at < bad.size()) bad[at] = c;
      }
      INFO(bad);
      const bool json = nlohmann::json::accept(bad);
      CHECK((run(g, bad) == Verdict::complete) == json);
      invalid += json ? 0 : 1;
    }
  }
  CHECK(valid == 600);
  CHECK(invalid > 1000);  // the corruptions reach both verdicts
}

TEST_CASE("grammar: allowed_tokens marks the vocabulary's pieces the grammar takes next", "[grammar]") {
  const auto g = grammar(R"G(root ::= "{\"n\":" [0-9]+ "}")G");
  const std::vector<std::string> pieces = {"{", "{\"", "\"n", "x", "", "}", "1", "23}", "\xE3", ":", "{\"n\":7}"};
  gr::Matcher m(g);
  CHECK(gr::allowed_tokens(m, pieces) ==
        std::vector<bool>{true, true, false, false, false, false, false, false, false, false, true});
  REQUIRE(m.accept("{\"n\":1"));
  CHECK(gr::allowed_tokens(m, pieces) ==
        std::vector<bool>{false, false, false, false, false, true, true, true, false, false, false});
  REQUIRE(m.accept("}"));
  CHECK(m.complete());
  CHECK_FALSE(m.can_continue());
  CHECK(gr::allowed_tokens(m, pieces) == std::vector<bool>(pieces.size(), false));
}

TEST_CASE("grammar: the token trie gives allowed_tokens' answers in one walk, and leaves the arena as it was",
          "[grammar]") {
  // A JSON grammar (json_schema.hpp's, from a schema with strings, integers in a range, enums and arrays), a vocabulary
  // of random pieces over JSON's characters and multi-byte UTF-8 split at every byte (duplicates, empty pieces and
  // prefixes of one another included), and the matcher's states along documents: per-token allows() is the oracle.
  const auto g = gr::grammar_from_json_schema(nlohmann::ordered_json::parse(R"G({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12}, "n": {"type": "integer", "minimum": -5, "maximum": 250},
      "tags": {"type": "array", "items": {"enum": ["a", "bc", "\u00e9t\u00e9"]}}}, "required": ["name"]})G"));
  std::mt19937_64 rng(11);
  const std::vector<std::string> atoms = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "b", "c", "n", "m",
                                          "e", "t", "0", "1", "2", "5", "9", "-", "\xC3", "\xA9", "\xE3\x81",
                                          "\x82", "\"name\"", "\"n\"", "\"tags\"", "\\", "x"};
  std::vector<std::string> vocab = {"", "{", "{", "\"", "\"name\": \"", "\xC3\xA9", "\xC3"};
  for (int i = 0; i < 3000; ++i) {
    std::string p;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) p += atoms[rng() % atoms.size()];
    vocab.push_back(p);
  }
  const gr::TokenTrie trie(vocab);
  CHECK(trie.vocab_size() == vocab.size());
  CHECK(trie.num_nodes() < 1 + std::accumulate(vocab.begin(), vocab.end(), std::size_t{0},
                                               [](std::size_t a, const std::string& p) { return a + p.size(); }));
  const std::vector<std::string> docs = {R"({"name": "b\u00e9", "n": 250, "tags": ["a", "\u00e9t\u00e9"]})",
                                         R"({ "name":"x" ,"n":-5 })", R"({"name": "", "tags": []})"};
  int states = 0;
  for (const std::string& doc : docs) {
    gr::Matcher m(g);
    for (std::size_t i = 0; i <= doc.size(); ++i) {
      INFO(doc.substr(0, i));
      const std::size_t arena = m.num_nodes();
      const auto walk = gr::allowed_tokens(m, trie);
      CHECK(m.num_nodes() == arena);
      CHECK(walk == gr::allowed_tokens(m, vocab));
      ++states;
      if (i < doc.size()) REQUIRE(m.accept(doc.substr(i, 1)));  // byte by byte: split UTF-8 characters too
    }
    CHECK(m.complete());
  }
  CHECK(states > 100);
  // mask_logits from the trie equals mask_logits from the pieces.
  gr::Matcher m(g);
  REQUIRE(m.accept("{\"name\": \"ab"));
  std::vector<float> a(vocab.size(), 0.5f), b(vocab.size(), 0.5f);
  gr::mask_logits(m, vocab, {0}, a.data(), static_cast<std::int64_t>(a.size()));
  gr::mask_logits(m, trie, {0}, b.data(), static_cast<std::int64_t>(b.size()));
  CHECK(a == b);
}

TEST_CASE("grammar: deep nesting costs one node per level, and allows() or a refused accept() leaves none behind",
          "[grammar]") {
  // "(" may open a pair or stand alone, so after n of them the open pairs are any number up to n: 3 (n + 1) stacks
  // (the three alternatives of root on top of each), each as deep as its pairs. Stored apart they would be 3 n^2 / 2
  // positions; shared, the arena grows by a few nodes per "(".
  const auto g = grammar(R"G(root ::= "(" root ")" | "(" root | "x")G");
  gr::Matcher m(g);
  const int n = 300;  // 903 stacks: within kMaxStacks
  for (int i = 0; i < 3 * n; ++i) REQUIRE(m.accept(i < n ? "(" : i == n ? "x" : ")") == (i <= 2 * n));
  CHECK(m.complete());  // n "(", "x", then n ")": every pair closed
  CHECK(m.num_nodes() <= static_cast<std::size_t>(8 * n + 4096));
  const std::size_t nodes = m.num_nodes();
  CHECK_FALSE(m.allows(")"));  // all closed: nothing left to close
  CHECK_FALSE(m.accept("x"));
  CHECK(m.num_nodes() == nodes);

  gr::Matcher open(g);
  for (int i = 0; i < n; ++i) REQUIRE(open.accept("("));
  CHECK(open.num_stacks() == static_cast<std::size_t>(3 * (n + 1)));
  const std::size_t before = open.num_nodes();
  CHECK(open.allows("x)))"));
  CHECK(open.num_nodes() == before);
  REQUIRE(open.accept("x"));
  for (int i = 0; i < n; ++i) REQUIRE(open.accept(")"));
  CHECK(open.complete());
  CHECK_FALSE(open.accept(")"));
}

TEST_CASE("grammar: a long text keeps the arena small (nodes no stack reaches are dropped)", "[grammar]") {
  const auto g = grammar(R"G(root ::= ( [a-z]+ " " )* "."
)G");
  gr::Matcher m(g);
  std::size_t most = 0;
  for (int i = 0; i < 200000; ++i) {
    REQUIRE(m.accept(i % 7 == 6 ? " " : "w"));
    most = std::max(most, m.num_nodes());
  }
  REQUIRE(m.accept(" ."));
  CHECK(m.complete());
  CHECK(most <= 8192);  // collected once past 4096 + twice the live nodes (a handful here)
}

TEST_CASE("grammar: an enum of 1000 values is followed, a grammar too ambiguous to follow is refused by name",
          "[grammar]") {
  nlohmann::ordered_json schema = {{"enum", nlohmann::ordered_json::array()}};
  for (int i = 0; i < 1000; ++i) schema["enum"].push_back("v" + std::to_string(i));
  const auto g = grammar(gr::json_schema_to_gbnf(schema));
  CHECK(run(g, "\"v999\"") == Verdict::complete);
  CHECK(run(g, "\"v99") == Verdict::prefix);
  CHECK(run(g, "\"v1000\"") == Verdict::refused);
  gr::Matcher m(g);
  REQUIRE(m.accept("\"v"));
  CHECK(m.num_stacks() == 1000);

  // 1025 alternatives open at once: more stacks than kMaxStacks.
  std::string wide = "root ::= [a] (";
  for (int i = 0; i < 1025; ++i) wide += (i ? " | \"" : "\"") + std::to_string(i) + "\"";
  wide += ")\n";
  gr::Matcher w(grammar(wide));
  REQUIRE_THROWS_WITH(w.accept("a"), Catch::Contains("more than 1024 parse stacks") &&
                                         Catch::Contains("too ambiguous"));
  // 256 stacks, each opening 256 alternatives for every letter: more stacks made for one code point than kMaxStepWork.
  std::string alts;
  for (int i = 0; i < 256; ++i) alts += i ? " | [a]" : "[a]";
  gr::Matcher u(grammar("root ::= x x x \"z\"\nx ::= y \"z\"\ny ::= (" + alts + ")*\n"));
  REQUIRE_THROWS_WITH(u.accept("a"), Catch::Contains("parse stacks made for one character") &&
                                         Catch::Contains("rule 'y"));
  CHECK(u.allows(""));  // the refused text left the matcher as it was
}

TEST_CASE("grammar: mask_logits leaves the allowed tokens and end-of-sequence only where the text is complete",
          "[grammar]") {
  const auto g = grammar(R"G(root ::= "a"+ )G");
  const std::vector<std::string> pieces = {"", "a", "aa", "b", "ab"};  // token 0: the end-of-sequence token
  const float inf = std::numeric_limits<float>::infinity();
  gr::Matcher m(g);
  std::vector<float> l = {1, 2, 3, 4, 5};
  gr::mask_logits(m, pieces, {0}, l.data(), 5);
  CHECK(l == std::vector<float>{-inf, 2, 3, -inf, -inf});  // nothing generated yet: no end
  REQUIRE(m.accept("a"));
  l = {1, 2, 3, 4, 5};
  gr::mask_logits(m, pieces, {0}, l.data(), 5);
  CHECK(l == std::vector<float>{1, 2, 3, -inf, -inf});
  CHECK_THROWS_WITH(gr::mask_logits(m, pieces, {0}, l.data(), 6), Catch::Contains("5 token pieces for 6 logits"));
}

namespace {

void schema_takes(const nlohmann::ordered_json& schema, const std::vector<std::string>& yes,
                  const std::vector<std::string>& no) {
  const auto g = gr::grammar_from_json_schema(schema);
  INFO(gr::json_schema_to_gbnf(schema));
  for (const auto& d : yes) {
    INFO("accepted: " << d);
    REQUIRE(nlohmann::json::accept(d));
    CHECK(run(g, d) == Verdict::complete);
  }
  for (const auto& d : no) {
    INFO("refused: " << d);
    CHECK(run(g, d) != Verdict::complete);
  }
}

void schema_refused(const std::string& schema, const std::string& what) {
  INFO(schema);
  REQUIRE_THROWS_AS(gr::json_schema_to_gbnf(nlohmann::ordered_json::parse(schema)), ArgumentError);
  REQUIRE_THROWS_WITH(gr::json_schema_to_gbnf(nlohmann::ordered_json::parse(schema)), Catch::Contains(what));
}

}  // namespace

TEST_CASE("json schema: objects with required, optional and no other properties, lengths, items, enums",
          "[grammar][json_schema]") {
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "object", "title": "Person",
      "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 5, "description": "d"},
                     "age": {"type": "integer"},
                     "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
      "required": ["name", "age"], "additionalProperties": false})G"),
               {R"G({"name":"Al","age":30})G", R"G({ "name": "Al", "age": -3, "tags": ["a", "b"] })G",
                R"G({"name":"x\u00e9","age":0,"tags":[]})G", "{\"name\":\"\xC3\xA9t\xC3\xA9\",\"age\":7}"},
               {R"G({"age":30,"name":"Al"})G",  // the listed order is the grammar's order
                R"G({"name":"","age":1})G", R"G({"name":"toolong","age":1})G", R"G({"name":"Al"})G",
                R"G({"name":"Al","age":1.5})G", R"G({"name":"Al","age":1,"x":1})G",
                R"G({"name":"Al","age":1,"tags":["c"]})G", R"G({"name":"Al","age":1,"tags":["a","a","b"]})G",
                R"G({"name":"Al","age":01})G", R"G(["Al",1])G"});
  // Optional properties anywhere in the list, and other members after them by default.
  schema_takes(nlohmann::ordered_json::parse(R"G({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"},
      "c": {"type": "number"}}, "required": ["b"]})G"),
               {R"G({"b":null})G", R"G({"a":true,"b":null,"c":2.5e3})G", R"G({"b":null,"c":-0.5})G",
                R"G({"b":null,"zz":[1,{"q":"r"}]})G"},
               {R"G({})G", R"G({"a":true})G", R"G({"a":true,"c":1,"b":null})G", R"G({"b":null,})G"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "array", "items": {"type": "integer"}, "minItems": 2,
      "maxItems": 3})G"),
               {"[1,2]", "[1, 2, 3]"}, {"[1]", "[1,2,3,4]", "[]", "[1,\"2\"]"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"enum": ["red", 3, null, {"k": [true]}]})G"),
               {R"G("red")G", "3", "null", R"G({"k":[true]})G"}, {R"G("blue")G", "4"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"const": "v1"})G"), {R"G("v1")G"}, {R"G("v2")G"});
}

TEST_CASE("json schema: anyOf, oneOf, lists of types, allOf of one, local $ref and recursion",
          "[grammar][json_schema]") {
  schema_takes(nlohmann::ordered_json::parse(R"G({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]})G"),
               {R"G("ab")G", "null"}, {"1", R"G("abc")G"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": ["integer", "boolean"]})G"), {"12", "false"},
               {"1.5", "null"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"oneOf": [{"type": "integer"}, {"type": "string"}]})G"),
               {"1", R"G("x")G"}, {"[]"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"allOf": [{"$ref": "#/definitions/pos"}],
      "definitions": {"pos": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}}})G"),
               {"[1,2]"}, {"[1]"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"], "additionalProperties": false}}, "$ref": "#/$defs/node"})G"),
               {R"G({"v":1,"next":null})G", R"G({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})G"},
               {R"G({"v":1,"next":{"v":2}})G", R"G({"v":1})G"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "object", "properties": {"kids": {"type": "array",
      "items": {"$ref": "#"}}}, "required": ["kids"], "additionalProperties": false})G"),
               {R"G({"kids":[]})G", R"G({"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]})G"}, {R"G({"kids":[{}]})G"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "object", "additionalProperties": {"type": "integer"}})G"),
               {"{}", R"G({"a":1,"b":2})G"}, {R"G({"a":"1"})G"});
  schema_takes(nlohmann::ordered_json::parse("true"), {"[1,{\"a\":null}]"}, {"[1,"});
}

TEST_CASE("json schema: integer bounds take exactly the integers within them, checked against arithmetic",
          "[grammar][json_schema]") {
  constexpr std::int64_t kMax = 9999999999999999;  // the grammar's integers: at most 16 digits
  struct Range {
    std::int64_t lo, hi;
  };
  const std::vector<Range> ranges = {{0, 0},    {0, 9},       {0, 10},     {5, 123},      {-7, 7},    {-120, -3},
                                     {-1, 0},   {100, 100},   {99, 1001},  {-1000, -999}, {1, kMax},  {-kMax, -1},
                                     {-kMax, kMax}, {19, 91}, {250, 3999}, {-40960, 65535}};
  std::mt19937_64 rng(7);
  for (const auto& r : ranges) {
    nlohmann::ordered_json schema = {{"type", "integer"}, {"minimum", r.lo}, {"maximum", r.hi}};
    const auto g = gr::grammar_from_json_schema(schema);
    INFO("[" << r.lo << ", " << r.hi << "]: " << gr::json_schema_to_gbnf(schema));
    std::vector<std::int64_t> probe;
    for (std::int64_t d = -40; d <= 40; ++d) {
      for (const std::int64_t at : {r.lo, r.hi, std::int64_t{0}}) {
        const std::int64_t x = at + d;
        if (x >= -kMax && x <= kMax) probe.push_back(x);
      }
    }
    for (std::int64_t p = 1; p <= kMax; p *= 10) {  // around each power of ten, both signs
      for (const std::int64_t x : {p - 1, p, p + 1, -p + 1, -p, -p - 1}) {
        if (x >= -kMax && x <= kMax) probe.push_back(x);
      }
    }
    const double span = static_cast<double>(r.hi) - static_cast<double>(r.lo) + 100.0;
    for (int i = 0; i < 300; ++i) {
      const double u = std::uniform_real_distribution<double>(-0.5, 1.5)(rng);
      const double x = std::clamp(static_cast<double>(r.lo) + u * span, -static_cast<double>(kMax),
                                  static_cast<double>(kMax) - 1.0);
      probe.push_back(static_cast<std::int64_t>(x));
    }
    for (const std::int64_t x : probe) {
      INFO(x);
      CHECK((run(g, std::to_string(x)) == Verdict::complete) == (x >= r.lo && x <= r.hi));
    }
    for (const char* bad : {"-0", "007", "+5", "1.0", "1e2", " 5", "--1", "00"}) {
      INFO(bad);
      CHECK(run(g, bad) != Verdict::complete);
    }
  }
  // Exclusive and fractional bounds: the integers strictly inside, or at least / at most the bound rounded inward.
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 7})G"),
               {"4", "5", "6"}, {"3", "7", "2", "8", "-4"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "integer", "minimum": -2.5, "maximum": 1.5})G"),
               {"-2", "-1", "0", "1"}, {"-3", "2"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "integer", "exclusiveMinimum": -0.5, "exclusiveMaximum": 2.0})G"),
               {"0", "1"}, {"-1", "2"});
  // One side only: the other reaches the grammar's 16 digits; an object's property.
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "integer", "minimum": 18})G"),
               {"18", "99", "100", "9999999999999999"}, {"17", "0", "-5", "10000000000000000"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "object", "properties": {"age": {"type": "integer",
      "minimum": 0, "maximum": 150}}, "required": ["age"], "additionalProperties": false})G"),
               {R"({"age": 0})", R"({"age": 150})", R"({ "age":42 })"}, {R"({"age": 151})", R"({"age": -1})"});
  // Bounds past the grammar's integers are clamped to them; integral bounds are taken exactly.
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "integer", "maximum": 18446744073709551615,
      "minimum": -9223372036854775808})G"), {"9999999999999999", "-9999999999999999", "0"}, {"10000000000000000"});
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "integer", "minimum": 9007199254740993,
      "maximum": 9007199254740995})G"), {"9007199254740993", "9007199254740995"}, {"9007199254740992",
      "9007199254740996"});
}

TEST_CASE("json schema: a string's pattern takes exactly the strings std::regex (ECMAScript) finds it in",
          "[grammar][json_schema]") {
  // The oracle is the standard library's ECMAScript regex (search: a pattern is found anywhere unless anchored), on
  // random strings over an alphabet that JSON writes unescaped (so the grammar's string text is the string itself).
  const std::vector<std::string> patterns = {
      "^[a-c]+$", "ab", "^a(b|c)*d?$", R"(^\d{2,3}-\w+$)", "x.y", "^(?:ab|ba){1,3}$", "^[^a-c]*$", R"(^\s?[A-Z])",
      R"(\.\d)", "^a{2,}b", "^(a|)$", R"(^[\w.-]+@[\w-]+\.[a-z]{2,3}$)", "c$", R"(^-?\d+(\.\d+)?$)",
      R"(^[^\d\s]{0,2}$)", R"(^[\]a-]+$)", "^a{0}b$", "b{1,1}", "^(ab)?$", "^[.]$", "^(?:[0-9]{2})-x*?$",
      R"(^\x41\u0062[\x30-\x32]$)", "^[^]b", "^(a+|b+)+$", R"(^\W\D\S$)", "^(((a)))b$"};
  const std::string alphabet = "abcdxyzABZ0129 .-_@{},]";
  std::mt19937_64 rng(5);
  for (const std::string& p : patterns) {
    nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", p}};
    const auto g = gr::grammar_from_json_schema(schema);
    const std::regex re(p, std::regex::ECMAScript);
    INFO(p << "\n" << gr::json_schema_to_gbnf(schema));
    int matched = 0, total = 0;
    std::vector<std::string> texts = {"", "a", "ab", "abc", "12-x", "x@y.zz", "-1.5", "aa", "aab", "ba", "ab.cd"};
    for (int i = 0; i < 400; ++i) {
      std::string t;
      const int n = static_cast<int>(rng() % 7);
      for (int k = 0; k < n; ++k) t += alphabet[rng() % alphabet.size()];
      texts.push_back(t);
    }
    for (const std::string& t : texts) {
      const bool want = std::regex_search(t, re);
      INFO("'" << t << "' should " << (want ? "match" : "not match"));
      CHECK((run(g, "\"" + t + "\"") == Verdict::complete) == want);
      matched += want;
      ++total;
    }
    (void)matched;
  }
  // A named group is a group (std::regex has none to compare with).
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "string", "pattern": "^(?<y>[0-9]{2})-(?<m>a|b)$"})G"),
               {R"("12-a")", R"("99-b")"}, {R"("1-a")", R"("12-c")"});
  // Characters JSON must escape: written as their short escapes, not raw.
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "string", "pattern": "^a\"b\\\\c\\n$"})G"),
               {R"("a\"b\\c\n")"}, {"\"a\"b\\c\n\""});
  schema_takes(nlohmann::ordered_json::parse(R"G({"pattern": "^[^x]$"})G"), {R"("\"")", R"("\n")", R"("y")", R"("é")"},
               {R"("x")", R"("\u0001")"});
}

TEST_CASE("json schema: keywords the grammar would not enforce are refused by name, with their path",
          "[grammar][json_schema]") {
  schema_refused(R"G({"type": "string", "pattern": "(a)\\1"})G", "#/pattern: backreferences (\\1) are not supported");
  schema_refused(R"G({"type": "string", "pattern": "a(?=b)"})G", "#/pattern: lookaround");
  schema_refused(R"G({"type": "string", "pattern": "\\bword"})G", "#/pattern: word boundaries");
  schema_refused(R"G({"type": "string", "pattern": "^a|b$"})G", "^ or $ beside a top-level '|'");
  schema_refused(R"G({"type": "string", "pattern": "a^b"})G", "the anchor '^' away from the pattern's start or end");
  schema_refused(R"G({"type": "string", "pattern": "a{2,1}"})G", "the bound below");
  schema_refused(R"G({"type": "string", "pattern": "a{5000}"})G", "a repetition bound above 1000");
  schema_refused(R"G({"type": "string", "pattern": "(ab"})G", "a '(' without its ')'");
  schema_refused(R"G({"type": "string", "pattern": "[ab"})G", "a '[' without its ']'");
  schema_refused(R"G({"type": "string", "pattern": "a**"})G", "a quantifier after a quantifier");
  schema_refused(R"G({"type": "string", "pattern": "[]"})G", "a class that no character of a JSON string matches");
  schema_refused(R"G({"type": "string", "pattern": "\\p{L}"})G", "the escape \\p is not supported");
  schema_refused(R"G({"type": "string", "pattern": "a", "maxLength": 3})G", "pattern together with minLength");
  schema_refused(R"G({"type": "integer", "pattern": "1"})G", "pattern is enforced for type string alone");
  schema_refused(R"G({"properties": {"n": {"type": "number", "minimum": 0}}})G",
                 "#/properties/n: minimum, maximum, exclusiveMinimum and exclusiveMaximum are enforced for type "
                 "integer alone");
  schema_refused(R"G({"type": ["integer", "null"], "maximum": 3})G", "enforced for type integer alone");
  schema_refused(R"G({"type": "integer", "enum": [1, 2], "maximum": 3})G", "beside enum / const");
  schema_refused(R"G({"type": "integer", "minimum": 5, "maximum": 4.5})G",
                 "#: no integer the grammar writes (at most 16 digits) lies within the bounds");
  schema_refused(R"G({"type": "integer", "minimum": "0"})G", "#/minimum: expected a number");
  schema_refused(R"G({"type": "integer", "multipleOf": 2})G", "keyword 'multipleOf' is not supported");
  schema_refused(R"G({"type": "array", "uniqueItems": true})G", "keyword 'uniqueItems'");
  schema_refused(R"G({"type": "text"})G", "#/type: unknown type 'text'");
  schema_refused(R"G({"$ref": "https://example.com/s.json"})G", "is not a local definition");
  schema_refused(R"G({"$ref": "#/$defs/missing"})G", "'#/$defs/missing' is not a local definition");
  // A pattern repeating without bound what can match nothing (found by fuzz_json_schema): the grammar would loop
  // without reading; bounded repetitions and '?' of such parts stay.
  schema_refused(R"G({"type": "string", "pattern": "()+"})G",
                 "#/pattern: '+' repeats a part that can match the empty string");
  schema_refused(R"G({"pattern": "x(a*|b)*"})G", "'*' repeats a part that can match the empty string");
  schema_refused(R"G({"pattern": "^(a?b?){2,}$"})G", "'{2,}' repeats a part that can match the empty string");
  schema_takes(nlohmann::ordered_json::parse(R"G({"type": "string", "pattern": "^(a*){2,3}(b|)?(c*d)+$"})G"),
               {"\"aacd\"", "\"bccdd\"", "\"d\""}, {"\"b\"", "\"aac\""});
  // Left recursion (found by fuzz_json_schema): a definition reaching itself before any "{" or "[" matches no value.
  schema_refused(R"G({"$ref": "#"})G", "#/$ref: '#' refers to itself before any value is read (left recursion)");
  schema_refused(R"G({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})G",
                 "#/$defs/a/anyOf/0/$ref: '#/$defs/a' refers to itself before any value is read");
  schema_refused(R"G({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"oneOf": [{"type": "null"},
      {"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/b"})G", "'#/$defs/b' refers to itself before any value is read");
  schema_refused(R"G({"properties": {"a": {}}, "required": ["b"]})G", "'b' is required but not in properties");
  schema_refused(R"G({"items": false})G", "#/items: the schema false accepts no value");
  schema_refused(R"G({"allOf": [{"type": "string"}, {"maxLength": 3}]})G", "only an allOf of one schema");
  schema_refused(R"G({"type": "array", "minItems": 3, "maxItems": 2})G", "maxItems below minItems");
  schema_refused(R"G({"type": "string", "maxLength": 5000})G", "#/maxLength: above 1000");
  schema_refused(R"G({"enum": []})G", "#/enum: expected a non-empty array");
  schema_refused(R"G(3)G", "a schema must be an object or a boolean, found number");
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += R"G({"items": )G";
  deep += "{}" + std::string(200, '}');
  schema_refused(deep, "schemas nested deeper than 128");
}

TEST_CASE("grammar_from_text: GBNF or a JSON Schema's text, refusals led by the option that carried it",
          "[grammar][json_schema]") {
  const auto g = gr::grammar_from_text(gr::GrammarText::gbnf, "root ::= \"yes\" | \"no\"", "--grammar");
  CHECK(run(g, "no") == Verdict::complete);
  CHECK(run(g, "\"a\"") == Verdict::refused);
  const auto s = gr::grammar_from_text(gr::GrammarText::json_schema, R"({"enum": ["a", "b"]})", "--json-schema");
  CHECK(run(s, "\"a\"") == Verdict::complete);
  CHECK(run(s, "no") == Verdict::refused);
  CHECK_THROWS_WITH(gr::grammar_from_text(gr::GrammarText::json_schema, "{\"type\": ", "json_schema="),
                    Catch::StartsWith("json_schema=: not valid JSON: "));
  CHECK_THROWS_WITH(gr::grammar_from_text(gr::GrammarText::json_schema, R"({"type": "text"})",
                                          "--json-schema-file s.json"),
                    Catch::StartsWith("--json-schema-file s.json: ") && Catch::Contains("#/type: unknown type 'text'"));
  CHECK_THROWS_WITH(gr::grammar_from_text(gr::GrammarText::gbnf, "root ::= (", "grammar="),
                    Catch::StartsWith("grammar=: "));
}

namespace {

// Independent validators of the enforced formats, from RFC 3339 section 5.6 (with the grammar's stated limits: seconds
// 00-59, one to nine fraction digits, upper-case T and Z) and RFC 4122's textual UUID: a regular expression for the
// shape, then arithmetic for the calendar.
bool valid_date(const std::string& s) {
  static const std::regex re(R"(^([0-9]{4})-([0-9]{2})-([0-9]{2})$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  if (mo < 1 || mo > 12) return false;
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return d >= 1 && d <= days[mo - 1];
}
bool valid_time(const std::string& s) {
  static const std::regex re(R"(^([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?(Z|[+-]([0-9]{2}):([0-9]{2}))$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  if (std::stoi(m[1]) > 23 || std::stoi(m[2]) > 59 || std::stoi(m[3]) > 59) return false;
  return m[6].length() == 0 || (std::stoi(m[6]) <= 23 && std::stoi(m[7]) <= 59);
}
bool valid_date_time(const std::string& s) {
  return s.size() > 11 && s[10] == 'T' && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
}
bool valid_uuid(const std::string& s) {
  static const std::regex re("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  return std::regex_match(s, re);
}

std::string two(int v) { return (v < 10 ? "0" : "") + std::to_string(v); }

}  // namespace

TEST_CASE("json schema: formats date, time, date-time and uuid take exactly what RFC 3339 / 4122 validators take",
          "[grammar][json_schema]") {
  const auto g_of = [](const char* f) {
    return std::make_shared<const gr::Grammar>(gr::Grammar::parse(gr::json_schema_to_gbnf(
        nlohmann::ordered_json::parse(std::string(R"({"type": "string", "format": ")") + f + "\"}"))));
  };
  const auto date = g_of("date"), time = g_of("time"), date_time = g_of("date-time"), uuid = g_of("uuid");
  const auto agrees = [](const std::shared_ptr<const gr::Grammar>& g, const std::string& s, bool valid) {
    INFO(s);
    CHECK((run(g, "\"" + s + "\"") == Verdict::complete) == valid);
    return valid;
  };
  std::mt19937 rng(20261204);
  const auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // Every month and day (0-13, 0-32) of leap and common years, centuries among them.
  int valid = 0, total = 0;
  for (const int y : {0, 4, 1600, 1900, 2000, 2023, 2024, 2100, 9996}) {
    for (int mo = 0; mo <= 13; ++mo) {
      for (int d = 0; d <= 32; ++d) {
        const std::string year = std::to_string(y);
        const std::string s = std::string(4 - year.size(), '0') + year + "-" + two(mo) + "-" + two(d);
        valid += agrees(date, s, valid_date(s));
        ++total;
      }
    }
  }
  CHECK(valid == 9 * 365 + 6);  // six leap years among the nine: 0, 4, 1600, 2000, 2024, 9996 (not 1900, 2023, 2100)
  for (const char* s : {"2024-1-05", "20240-01-05", "2024/01/05", "2024-01-05 ", "", "2024-02-29T"}) {
    agrees(date, s, false);
  }
  // Times and date-times: hours, minutes, seconds one past their range, fractions of 0-10 digits, offsets.
  for (int i = 0; i < 3000; ++i) {
    std::string t = two(pick(0, 24)) + ":" + two(pick(0, 60)) + ":" + two(pick(0, 60));
    const int frac = pick(-3, 10);
    if (frac >= 0) t += "." + std::string(static_cast<std::size_t>(frac), static_cast<char>('0' + pick(0, 9)));
    const int off = pick(0, 4);
    t += off == 0   ? "Z"
         : off == 1 ? "z"
         : off == 2 ? ""
                    : (off == 3 ? "+" : "-") + two(pick(0, 24)) + ":" + two(pick(0, 60));
    valid += agrees(time, t, valid_time(t));
    const std::string dt = std::to_string(pick(1990, 2030)) + "-" + two(pick(1, 12)) + "-" + two(pick(1, 31)) + "T" + t;
    agrees(date_time, dt, valid_date_time(dt));
  }
  // UUIDs: the right shape, then one character or one group length changed.
  const char* hex = "0123456789abcdefABCDEF";
  for (int i = 0; i < 2000; ++i) {
    std::string u;
    for (const int n : {8, 4, 4, 4, 12}) {
      const int len = pick(0, 9) == 0 ? n + pick(-1, 1) : n;
      if (!u.empty()) u += '-';
      for (int k = 0; k < len; ++k) u += hex[pick(0, 21)];
    }
    if (pick(0, 4) == 0) u[static_cast<std::size_t>(pick(0, static_cast<int>(u.size()) - 1))] = "g-Z0"[pick(0, 3)];
    agrees(uuid, u, valid_uuid(u));
  }
  CHECK(total == 9 * 14 * 33);
  // Other formats are annotations; the enforced ones refuse the keywords they would override.
  CHECK(run(g_of("email"), "\"not an address\"") == Verdict::complete);
  CHECK_NOTHROW(gr::json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "integer", "format": "int32"})")));
  schema_refused(R"({"type": "string", "format": "date", "maxLength": 8})",
                 "#: format date together with pattern / minLength / maxLength is not supported");
  // A property named like a format rule keeps its own rule.
  const auto named = std::make_shared<const gr::Grammar>(gr::Grammar::parse(gr::json_schema_to_gbnf(
      nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"fmt-date": {"type": "string", "format":
        "uuid"}, "d": {"type": "string", "format": "date"}}, "required": ["fmt-date", "d"],
        "additionalProperties": false})"))));
  CHECK(run(named, R"({"fmt-date": "123e4567-e89b-12d3-a456-426614174000", "d": "2024-02-29"})") == Verdict::complete);
  CHECK(run(named, R"({"fmt-date": "2024-02-29", "d": "2024-02-29"})") == Verdict::refused);
}
