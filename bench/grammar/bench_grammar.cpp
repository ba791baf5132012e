// bench/grammar/bench_grammar.cpp: the cost of one constrained-generation step (models/constrained.hpp) on a real
// vocabulary, without a model: seeded random logits stand in for the model's, so the time is the constraint's alone.
//
//   bench_grammar TOKENIZER [STEPS=64] [SCHEMA.json]
//
// TOKENIZER is anything open_tokenizer takes (Llama 3's tokenizer.json: 128k tokens). The schema (default: an object
// with a bounded string, an integer range and an enum array) compiles to a grammar; each step masks the logits to the
// tokens the grammar takes, chooses greedily and feeds the matcher. Two runs over the same logits, in one process:
// - "pieces every step": the tokenizer seen only through piece() (as any duck-typed tokenizer is), so the
//   vocabulary's pieces are asked again each step, as before Tokenizer::piece_context;
// - "pieces cached": the tokenizer itself, whose piece_context lets the pieces be asked once.
// Both must choose the same tokens (checked). Prints ms per step for each and their ratio.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/models/constrained.hpp"
#include "maxtext/models/json_schema.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

using namespace maxtext;

namespace {

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 40},
  "age": {"type": "integer", "minimum": 0, "maximum": 120},
  "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 4}},
  "required": ["name", "age", "tags"], "additionalProperties": false})";

/// The tokenizer through piece() and vocab_size() alone: no piece_context, so every step asks for every piece.
struct PiecesOnly {
  const tokenizer::Tokenizer& tk;
  std::string piece(std::int32_t prev, std::int32_t id) const { return tk.piece(prev, id); }
  std::int64_t vocab_size() const { return tk.vocab_size(); }
};

template <class Tok>
double run(const Tok& tk, std::int64_t V, std::int32_t bos, const std::shared_ptr<const models::grammar::Grammar>& g,
           std::int64_t steps, std::vector<std::int32_t>& tokens) {
  models::GenerateOptions opt;
  opt.max_new_tokens = steps;
  opt.sampling.temperature = 0.0;
  models::GenerateResult res;
  models::detail::init_result(res, 1);
  const std::vector<std::int32_t> prompt = {bos};
  models::detail::RowDecoder row(opt, opt.sampling, prompt);
  models::grammar::Matcher matcher(g);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(static_cast<std::size_t>(V));
  for (auto& x : logits) x = nd(rng);
  tokens.clear();
  const auto t0 = std::chrono::steady_clock::now();
  models::detail::constrained_steps(
      tk, bos, opt, matcher, row, res, logits.data(), V, [&](std::int32_t t) { tokens.push_back(t); },
      [&] {
        for (auto& x : logits) x = nd(rng);
        return std::pair<const float*, std::int64_t>(logits.data(), V);
      });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 1e3 * s / static_cast<double>(std::max<std::size_t>(tokens.size(), 1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_grammar TOKENIZER [STEPS=64] [SCHEMA.json]\n");
    return 2;
  }
  try {
    const auto tk = tokenizer::open_tokenizer(argv[1]);
    const std::int64_t steps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 64;
    std::string schema = kSchema;
    if (argc > 3) {
      std::ifstream f(argv[3]);
      std::stringstream ss;
      ss << f.rdbuf();
      schema = ss.str();
    }
    const auto g = models::grammar::grammar_from_text(models::grammar::GrammarText::json_schema, schema, "schema");
    const std::int64_t V = tk->vocab_size();
    std::vector<std::int32_t> a, b;
    const double every = run(PiecesOnly{*tk}, V, tk->bos(), g, steps, a);
    const double cached = run(*tk, V, tk->bos(), g, steps, b);
    if (a != b) {
      std::fprintf(stderr, "bench_grammar: the two runs chose different tokens\n");
      return 1;
    }
    std::printf("vocabulary %lld tokens, %zu steps, text: %s\n", static_cast<long long>(V), a.size(),
                tk->decode(a).c_str());
    std::printf("%-20s %10s\n%-20s %10.2f\n%-20s %10.2f\n%-20s %10.2fx\n", "", "ms/step", "pieces every step", every,
                "pieces cached", cached, "ratio", every / cached);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar: %s\n", e.what());
    return 1;
  }
}
