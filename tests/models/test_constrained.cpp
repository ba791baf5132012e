// Generation constrained by a grammar (models/constrained.hpp) on a seeded llama2 model (the fixture config, vocab 64)
// with toy vocabularies: whatever the model's random preferences and the sampling seed, every generation that ends
// is a sentence of the grammar, checked independently of the matcher (std::regex for a small grammar; nlohmann::json
// and the schema's own rules for a JSON Schema); a generation cut by max_new_tokens is a prefix the grammar allows;
// end-of-sequence is only taken where the text is complete; a grammar that needs text no token starts with is
// refused by name (token-level masking has no lookahead: a token the grammar takes may lead where no token of the
// vocabulary continues, as in llama.cpp; the vocabularies here can always continue, except in that test).
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/models/constrained.hpp"
#include "maxtext/models/json_schema.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"

using namespace maxtext;
namespace gr = maxtext::models::grammar;

namespace {

using Llama = models::Transformer<Policy<cpu::Backend, float>, layers::LlamaDecoderLayer>;

/// Token i is pieces[i] wherever it stands; token 0 (empty) is the end-of-sequence token.
struct ToyTok {
  std::vector<std::string> pieces;
  std::string piece(std::int32_t, std::int32_t id) const { return pieces.at(static_cast<std::size_t>(id)); }
  std::string text(const std::vector<std::int32_t>& ids) const {
    std::string s;
    for (auto id : ids) s += pieces.at(static_cast<std::size_t>(id));
    return s;
  }
};

Llama model(std::uint64_t seed) {
  Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/llama2_model"));
  c.max_target_length = 512;
  c.derive();
  REQUIRE(c.vocab_size == 64);
  Llama m(c, cpu::Backend(cpu::Options{1}));
  m.init(seed);
  return m;
}

models::GenerateOptions sampled(std::uint64_t seed, std::int64_t n, float temperature = 1.0f) {
  models::GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.stop_tokens = {0};
  return o;
}

}  // namespace

TEST_CASE("constrained generation: every finished text is a sentence of the grammar, cut ones are prefixes",
          "[constrained][grammar]") {
  Llama m = model(7);
  ToyTok tk;
  tk.pieces = {"", "{", "}", "a", "b", "c", "ab", "x", "{a", "c}", "}}", "{{"};
  const std::string alphabet = "abcxyz{}";
  for (std::size_t i = tk.pieces.size(); i < 64; ++i) {  // the rest: 1-3 characters, mostly not allowed anywhere
    std::string p;
    for (std::size_t k = 0; k <= i % 3; ++k) p += alphabet[(i * 7 + k * 3) % alphabet.size()];
    tk.pieces.push_back(p);
  }
  const auto g = std::make_shared<const gr::Grammar>(gr::Grammar::parse(R"G(root ::= "{" [a-c]+ "}")G"));
  const std::regex sentence(R"(\{[abc]+\})");
  int finished = 0;
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    const auto r = models::generate_constrained(m, tk, {1, 2, 3}, sampled(seed, 12), g);
    const std::string text = tk.text(r.tokens[0]);
    INFO("seed " << seed << ": '" << text << "'");
    if (r.finish[0] == models::FinishReason::stop_token) {
      CHECK(r.tokens[0].back() == 0);  // the end-of-sequence token, taken only after a whole sentence
      CHECK(std::regex_match(text, sentence));
      ++finished;
    } else {
      CHECK(r.finish[0] == models::FinishReason::length);
      gr::Matcher fresh(g);
      CHECK(fresh.accept(text));  // a prefix of a sentence
    }
  }
  CHECK(finished > 10);
  // Greedy too; and without an end-of-sequence token, a sentence nothing may follow ends the generation.
  const auto greedy = models::generate_constrained(m, tk, {1, 2, 3}, sampled(0, 12, 0.0f), g);
  CHECK(std::regex_match(tk.text(greedy.tokens[0]), std::regex(R"(\{[abc]*\}?)")));
  auto no_eos = sampled(3, 20);
  no_eos.stop_tokens.clear();
  const auto fixed = std::make_shared<const gr::Grammar>(gr::Grammar::parse(R"G(root ::= "ab" "c")G"));
  const auto r = models::generate_constrained(m, tk, {1, 2}, no_eos, fixed);
  CHECK(tk.text(r.tokens[0]) == "abc");
  CHECK(r.finish[0] == models::FinishReason::stop_token);
}

TEST_CASE("constrained generation over a Session: each turn prefills only its tokens and equals a fresh run on the "
          "whole conversation", "[constrained][grammar][session]") {
  Llama m = model(7);
  ToyTok tk;
  tk.pieces = {"", "{", "}", "a", "b", "c", "ab", "x", "{a", "c}", "}}", "{{"};
  while (tk.pieces.size() < 64) tk.pieces.push_back("zz");
  const auto g = std::make_shared<const gr::Grammar>(gr::Grammar::parse(R"G(root ::= "{" [a-c]{1,4} "}")G"));
  const std::regex sentence(R"(\{[abc]{1,4}\})");
  for (std::uint64_t seed : {1u, 2u, 5u}) {
    INFO("seed " << seed);
    models::Session<Llama> s(m, 128);
    const std::vector<std::int32_t> turn1{1, 2, 3}, turn2{7, 4, 5};
    const auto r1 = models::generate_constrained(s, tk, turn1, sampled(seed, 12), g);
    CHECK(r1.prompt_tokens == 3);
    CHECK(r1.tokens[0] == models::generate_constrained(m, tk, turn1, sampled(seed, 12), g).tokens[0]);
    std::vector<std::int32_t> conv = turn1;
    conv.insert(conv.end(), r1.tokens[0].begin(), r1.tokens[0].end());
    CHECK(s.tokens() == conv);  // the answer joined the conversation
    const auto r2 = models::generate_constrained(s, tk, turn2, sampled(seed + 10, 12), g);
    CHECK(r2.prompt_tokens == 1 + 3);  // turn 1's last token, then turn 2's
    conv.insert(conv.end(), turn2.begin(), turn2.end());
    const auto fresh = models::generate_constrained(m, tk, conv, sampled(seed + 10, 12), g);
    CHECK(r2.tokens[0] == fresh.tokens[0]);
    CHECK(r2.finish[0] == fresh.finish[0]);
    for (const auto* r : {&r1, &r2}) {  // each answer a sentence (with the end-of-sequence token) or a cut prefix
      std::string text = tk.text(r->tokens[0]);
      INFO(text);
      if (r->finish[0] == models::FinishReason::stop_token) {
        CHECK(std::regex_match(text, sentence));
      } else {
        CHECK(gr::Matcher(g).accept(text));
      }
    }
  }
  // Too long for the session: refused by name before anything runs.
  models::Session<Llama> small(m, 8);
  CHECK_THROWS_WITH(models::generate_constrained(small, tk, {1, 2, 3}, sampled(0, 6), g),
                    Catch::Contains("exceed the session's capacity 8"));
}

TEST_CASE("constrained generation: a JSON Schema's documents, checked by nlohmann::json and the schema's rules",
          "[constrained][json_schema]") {
  Llama m = model(11);
  ToyTok tk;
  tk.pieces = {"", "{", "}", "\"", ":", ",", " ", "\n", "true", "false", "-", "0", "1", "2", "3", "4", "5", "6", "7",
               "8", "9", "\"ok\"", "\"n\"", "\"tag\"", "ab", "cd", "a", "b", "c", "d", "\"ab\"", "null", "[", "]",
               "{\"", "\": ", ", \"", "tr", "ue", "fa", "lse", "9}", "x", "y", "\t", "e", "E", ".", "+"};
  // Every character the documents need is also a token of its own, so that any allowed prefix can be continued.
  for (const char* c : {"o", "k", "n", "t", "g", "r", "u", "f", "l", "s"}) tk.pieces.push_back(c);
  while (tk.pieces.size() < 64) tk.pieces.push_back("zz");
  const auto schema = nlohmann::ordered_json::parse(R"G({"type": "object", "properties": {
      "ok": {"type": "boolean"}, "n": {"type": "integer"}, "tag": {"enum": ["ab", "cd"]}},
      "required": ["ok", "n", "tag"], "additionalProperties": false})G");
  const auto g = gr::grammar_from_json_schema(schema);
  int finished = 0;
  for (std::uint64_t seed = 0; seed < 12; ++seed) {
    const auto r = models::generate_constrained(m, tk, {1}, sampled(seed, 300), g);
    const std::string text = tk.text(r.tokens[0]);
    INFO("seed " << seed << ": " << text);
    if (r.finish[0] != models::FinishReason::stop_token) continue;
    ++finished;
    REQUIRE(nlohmann::json::accept(text));
    const auto j = nlohmann::ordered_json::parse(text);
    REQUIRE(j.is_object());
    CHECK(j.size() == 3);
    CHECK(j["ok"].is_boolean());
    CHECK(j["n"].is_number_integer());
    CHECK((j["tag"] == "ab" || j["tag"] == "cd"));
  }
  CHECK(finished >= 6);
}

TEST_CASE("constrained generation: text no token can start is refused by name", "[constrained][grammar]") {
  Llama m = model(7);
  ToyTok tk;
  tk.pieces.assign(64, "a");
  tk.pieces[0] = "";
  const auto g = std::make_shared<const gr::Grammar>(gr::Grammar::parse(R"G(root ::= "a" "q")G"));
  CHECK_THROWS_WITH(models::generate_constrained(m, tk, {1}, sampled(0, 8), g),
                    Catch::Contains("no token of the vocabulary continues the text here (after 1 generated tokens)"));
  CHECK(models::generate_constrained(m, tk, {1}, sampled(0, 0), g).tokens[0].empty());
}
