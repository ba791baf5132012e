// Speculative decoding (models/speculative.hpp): greedy output against plain greedy decoding (models::generate) of the
// same model, token for token, for a dense cache (llama2), sliding-window layers (gemma3, window 3, shorter than
// every draft run) and MLA's latent cache with a routed MoE (deepseek); drafts that are rejected at every draft
// position (an oracle drafter that spoils its j-th token, j cycling over 0..K), that are all accepted (the model as
// its own draft), from a differently seeded model, and from prompt lookup; the acceptance counts those drafters
// imply; stop tokens, max_new_tokens and log-probabilities as generate() gives them; refusals by name; and
// stories260K (a trained model) with prompt lookup, in the library and through `maxtext generate --spec` (lookup, and
// a draft model: the GGUF copy, and the model's own file), skipped when ../shared is absent.
//
// The expectations are plain greedy decoding's own tokens: speculative decoding must not change what is generated.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/gemma/gemma3.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/qwen3_next/qwen3_next.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/transformer.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"
#include "support/fixture_config.hpp"
#include "support/cli.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

using P32 = Policy<cpu::Backend, float>;
using Llama = models::Transformer<P32, layers::LlamaDecoderLayer>;
using Gemma3 = models::Transformer<P32, layers::Gemma3DecoderLayer>;
using DeepSeek = models::Transformer<P32, layers::DeepSeekDenseLayer, layers::DeepSeekMoELayer>;
using Qwen3Next = models::Transformer<P32, layers::Qwen3NextDecoderLayer>;

Config fixture_meta_config(const std::string& name) {
  return test::config_from_meta(test::read_meta(test::fixtures_dir() + "/" + name));
}

Config deepseek_config() {
  Config c = io::load_config(test::fixtures_dir() + "/deepseek_model/config.yml");
  c.derive();
  return c;
}

template <class M>
M seeded(const Config& c, std::uint64_t seed) {
  M m(c, cpu::Backend(cpu::Options{1}));
  m.init(seed);
  return m;
}

/// Proposes the tokens plain greedy decoding chose (`truth`, after the prompt), except that on its n-th call it
/// spoils the draft's (n mod (K + 1))-th token (K: no token spoilt), so that every draft position gets both
/// accepted and rejected drafts.
struct SpoilingOracle {
  std::vector<std::int32_t> truth;  // prompt + greedy tokens
  std::int64_t vocab = 0;
  std::int64_t calls = 0;
  std::int64_t K = 0;
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>& ctx, std::int64_t k) {
    const std::int64_t spoil = calls++ % (K + 1);
    std::vector<std::int32_t> d;
    for (std::int64_t i = 0; i < k && ctx.size() + i < truth.size(); ++i) {
      std::int32_t t = truth[ctx.size() + static_cast<std::size_t>(i)];
      if (i == spoil) t = static_cast<std::int32_t>((t + 1) % vocab);
      d.push_back(t);
    }
    return d;
  }
};

std::string run_maxtext(const std::string& args, int& rc) { return test::run_cli(args, rc); }
/// `maxtext ARGS` fails, saying `what`.
void refused(const std::string& args, const std::string& what) {
  int rc = 0;
  const std::string out = run_maxtext(args, rc);
  INFO(args << "\n" << out);
  CHECK(rc != 0);
  CHECK(out.find(what) != std::string::npos);
}

/// The line of `text` that starts with `prefix` (empty when none), the first line included (a build whose CLI notes
/// nothing on stderr before it).
std::string line_of(const std::string& text, const std::string& prefix) {
  const std::string all = "\n" + text;
  const auto at = all.find("\n" + prefix);
  if (at == std::string::npos) return {};
  return all.substr(at + 1, all.find('\n', at + 1) - at - 1);
}

models::GenerateOptions greedy(std::int64_t n) {
  models::GenerateOptions o;
  o.max_new_tokens = n;
  return o;
}

template <class M>
void check_speculative_equals_greedy(M& model, M& other, const std::vector<std::int32_t>& prompt, std::int64_t n) {
  const auto opt = greedy(n);
  const auto plain = models::generate(model, {prompt}, opt);
  REQUIRE(plain.tokens[0].size() == static_cast<std::size_t>(n));
  std::vector<std::int32_t> truth = prompt;
  truth.insert(truth.end(), plain.tokens[0].begin(), plain.tokens[0].end());
  const std::int64_t V = model.config().vocab_size;

  for (std::int64_t K : {1, 3, 4}) {
    INFO("draft_max " << K);
    models::SpeculativeOptions so;
    so.draft_max = K;
    {
      SpoilingOracle oracle{truth, V, 0, K};
      models::SpeculativeStats st;
      const auto r = models::generate_speculative(model, prompt, opt, oracle, so, &st);
      CHECK(r.tokens[0] == plain.tokens[0]);
      CHECK(r.finish[0] == plain.finish[0]);
      for (std::int64_t i = 0; i < K; ++i) {
        INFO("draft position " << i);
        CHECK(st.accepted[static_cast<std::size_t>(i)] > 0);  // accepted at i ...
        CHECK(st.drafted[static_cast<std::size_t>(i)] > st.accepted[static_cast<std::size_t>(i)]);  // ... and rejected
      }
      CHECK(r.decode_steps == st.verify_passes);
      CHECK(st.verify_passes < n - 1);  // fewer passes than plain decoding's n - 1 steps
    }
    {
      models::ModelDrafter<M> self(model, 64);  // the model as its own draft: every draft is accepted
      models::SpeculativeStats st;
      const auto r = models::generate_speculative(model, prompt, opt, self, so, &st);
      CHECK(r.tokens[0] == plain.tokens[0]);
      CHECK(st.total_drafted() > 0);
      CHECK(st.total_accepted() == st.total_drafted());
      // n tokens: the first from the prefill, then K + 1 per pass (K accepted + the bonus token) except the last.
      CHECK(st.verify_passes == (n - 1 + K) / (K + 1));
    }
    {
      models::ModelDrafter<M> stranger(other, 64);  // another random model: mostly rejected
      models::SpeculativeStats st;
      const auto r = models::generate_speculative(model, prompt, opt, stranger, so, &st);
      CHECK(r.tokens[0] == plain.tokens[0]);
      CHECK(st.total_accepted() < st.total_drafted());
    }
    {
      models::PromptLookupDrafter lookup(3, 1);
      models::SpeculativeStats st;
      const auto r = models::generate_speculative(model, prompt, opt, lookup, so, &st);
      CHECK(r.tokens[0] == plain.tokens[0]);
      CHECK(st.verify_passes + st.total_accepted() == n - 1);  // every pass yields 1 + its accepted drafts
    }
  }
}

}  // namespace

TEST_CASE("prompt lookup drafts what followed the latest occurrence of the longest recurring n-gram", "[speculative]") {
  models::PromptLookupDrafter d(3, 1);
  // ... 5 6 7 | 8 9 ... 5 6 7: the 3-gram 5 6 7 recurs, followed by 8 9 4.
  CHECK(d.propose({1, 5, 6, 7, 8, 9, 4, 2, 5, 6, 7}, 3) == std::vector<std::int32_t>{8, 9, 4});
  CHECK(d.propose({1, 5, 6, 7, 8, 9, 4, 2, 5, 6, 7}, 1) == std::vector<std::int32_t>{8});
  // Only a 1-gram recurs; its latest earlier occurrence (index 4) wins over the first (index 1).
  CHECK(d.propose({1, 3, 10, 11, 3, 12, 13, 3}, 2) == std::vector<std::int32_t>{12, 13});
  // A match near the end yields only the tokens there are.
  CHECK(d.propose({4, 4}, 5) == std::vector<std::int32_t>{4});
  CHECK(d.propose({1, 2, 3}, 4).empty());
  CHECK(d.propose({7}, 4).empty());
  models::PromptLookupDrafter two(3, 2);  // 1-grams are not enough
  CHECK(two.propose({1, 3, 10, 11, 3}, 2).empty());
  CHECK_THROWS_WITH(models::PromptLookupDrafter(1, 2), Catch::Contains("ngram_min <= ngram_max"));
  CHECK_THROWS_WITH(models::PromptLookupDrafter(3, 0), Catch::Contains("1 <= ngram_min"));
}

TEST_CASE("speculative greedy equals plain greedy: llama2 (dense cache)", "[speculative]") {
  const Config c = fixture_meta_config("llama2_model");
  Llama m = seeded<Llama>(c, 7), other = seeded<Llama>(c, 8);
  check_speculative_equals_greedy(m, other, {1, 5, 9, 2, 5, 9, 3}, 40);
}

TEST_CASE("speculative greedy equals plain greedy: gemma3 (sliding-window layers, window 3)", "[speculative]") {
  const Config c = fixture_meta_config("gemma3_model");
  REQUIRE(c.sliding_window_size == 3);
  Gemma3 m = seeded<Gemma3>(c, 7), other = seeded<Gemma3>(c, 8);
  check_speculative_equals_greedy(m, other, {2, 11, 4, 7, 11, 4, 9}, 40);
}

TEST_CASE("speculative greedy equals plain greedy: deepseek (MLA latent cache, routed MoE)", "[speculative]") {
  const Config c = deepseek_config();
  DeepSeek m = seeded<DeepSeek>(c, 7), other = seeded<DeepSeek>(c, 8);
  check_speculative_equals_greedy(m, other, {2, 9, 17, 30, 9, 17}, 40);
}

// Recurrent caches: the states are saved before each pass and put back when drafts are rejected, then the kept rows
// run again (models/speculative.hpp); a recurrent draft model starts over after a rejection.
TEST_CASE("speculative greedy equals plain greedy: qwen3_next (Gated DeltaNet recurrent and conv states)", "[speculative]") {
  Config c = io::load_config(test::fixtures_dir() + "/qwen3_next_model/config.yml");
  c.derive();
  Qwen3Next m = seeded<Qwen3Next>(c, 7), other = seeded<Qwen3Next>(c, 8);
  REQUIRE(m.make_cache(1, 8).recurrent());
  check_speculative_equals_greedy(m, other, {2, 9, 17, 30, 9, 17}, 40);
}

TEST_CASE("speculative greedy equals plain greedy: deepseek with Engram (its convolution's state)", "[speculative]") {
  const std::string d = test::fixtures_dir() + "/deepseek_engram_model/";
  Config c = io::load_config(d + "config.yml");
  c.derive();
  const auto meta = test::read_meta(d);
  const AnyTensor l = test::npy(d + "engram_lookup.npy");
  const Tensor<std::int32_t, 1> lt = l.to<std::int32_t, 1>({l.shape[0]});
  const std::vector<std::int32_t> lookup(lt.data(), lt.data() + lt.size());
  DeepSeek m = seeded<DeepSeek>(c, 7), other = seeded<DeepSeek>(c, 8);
  for (DeepSeek* x : {&m, &other}) {
    x->set_engram_vocab(lookup, meta.at("compressed_vocab").get<std::int64_t>(), meta.at("pad_token").get<std::int32_t>());
  }
  REQUIRE(m.make_cache(1, 8).recurrent());
  check_speculative_equals_greedy(m, other, {2, 9, 17, 30, 9, 17}, 40);
}

TEST_CASE("Session::generate_speculative over a recurrent cache (qwen3_next) equals Session::generate", "[speculative][session]") {
  Config c = io::load_config(test::fixtures_dir() + "/qwen3_next_model/config.yml");
  c.derive();
  Qwen3Next m = seeded<Qwen3Next>(c, 7);
  models::Session<Qwen3Next> plain(m, 96), spec(m, 96);
  models::PromptLookupDrafter lookup;
  for (const std::vector<std::int32_t>& t : {std::vector<std::int32_t>{1, 5, 9, 5, 9}, {3, 4, 5, 9}, {7}}) {
    const auto a = plain.generate(t, greedy(12));
    models::SpeculativeStats st;
    const auto b = spec.generate_speculative(t, greedy(12), lookup, {3}, &st);
    CHECK(b.tokens[0] == a.tokens[0]);
    CHECK(spec.tokens() == plain.tokens());
  }
}

TEST_CASE("speculative decoding keeps stop tokens, max_new_tokens and log-probabilities as generate() does",
          "[speculative]") {
  const Config c = fixture_meta_config("llama2_model");
  Llama m = seeded<Llama>(c, 7);
  const std::vector<std::int32_t> prompt{1, 5, 9, 2, 5, 9, 3};
  auto opt = greedy(30);
  const auto plain = models::generate(m, {prompt}, opt);
  // Stop at the 12th token's value: both stop at its first occurrence, with the same finish reason.
  opt.stop_tokens = {plain.tokens[0][11]};
  opt.logprobs = true;
  opt.top_logprobs = 2;
  const auto a = models::generate(m, {prompt}, opt);
  models::ModelDrafter<Llama> self(m, 64);
  const auto b = models::generate_speculative(m, prompt, opt, self, {4});
  CHECK(a.finish[0] == models::FinishReason::stop_token);
  CHECK(b.finish[0] == a.finish[0]);
  CHECK(b.tokens[0] == a.tokens[0]);
  REQUIRE(b.logprobs[0].size() == a.logprobs[0].size());
  for (std::size_t i = 0; i < a.logprobs[0].size(); ++i) {
    INFO("token " << i);
    CHECK(b.logprobs[0][i].token == a.logprobs[0][i].token);
    // A verify pass of up to 5 rows takes the one-query attention path and the same per-row products as a decode
    // step (backend/cpu/attention.hpp, kTiledMinRows): the logits, and so the log-probabilities, are the same bits.
    CHECK(b.logprobs[0][i].logprob == a.logprobs[0][i].logprob);
    REQUIRE(b.logprobs[0][i].top.size() == 2);
  }
  // max_new_tokens smaller than one pass's K + 1 tokens.
  opt = greedy(3);
  const auto p3 = models::generate(m, {prompt}, opt);
  const auto s3 = models::generate_speculative(m, prompt, opt, self, {4});
  CHECK(s3.tokens[0] == p3.tokens[0]);
  CHECK(s3.finish[0] == models::FinishReason::length);
  CHECK(models::generate_speculative(m, prompt, greedy(0), self).tokens[0].empty());
}

TEST_CASE("speculative decoding refuses draft_max 0, an empty prompt and a small cache by name", "[speculative]") {
  const Config c = fixture_meta_config("llama2_model");
  Llama m = seeded<Llama>(c, 7);
  models::PromptLookupDrafter lookup;
  CHECK_THROWS_WITH(models::generate_speculative(m, {1, 2}, greedy(4), lookup, {0}),
                    Catch::Contains("draft_max must be >= 1, found 0"));
  CHECK_THROWS_WITH(models::generate_speculative(m, {}, greedy(4), lookup), Catch::Contains("empty prompt"));
  CHECK_THROWS_WITH(models::generate_speculative(m, {1, 2}, greedy(40), lookup, {4}, nullptr, 16),
                    Catch::Contains("exceed the cache capacity 16"));
}

TEST_CASE("stories260K: speculative greedy with prompt lookup equals plain greedy", "[speculative][stories260K]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.bin", "stories260K");
  const Config cfg = io::read_weights_config(dir + "/stories260K.bin").value();
  Llama m(cfg, cpu::Backend(cpu::Options{1}));
  m.load(io::load_weights(dir + "/stories260K.bin", cfg).tensors);
  const auto tk = tokenizer::load_tokenizer(dir + "/stories260K.bin", dir + "/tok512.bin", 512);
  for (const char* text : {"Once upon a time", "The cat sat on the mat. The cat"}) {
    const auto prompt = tk->encode(text);
    const auto plain = models::generate(m, {prompt}, greedy(96));
    models::PromptLookupDrafter lookup;
    models::SpeculativeStats st;
    const auto r = models::generate_speculative(m, prompt, greedy(96), lookup, {4}, &st);
    INFO(text);
    CHECK(r.tokens[0] == plain.tokens[0]);
    std::printf("stories260K '%s': %lld tokens in %lld verify passes, %lld of %lld drafts accepted (%.0f%%)\n", text,
                static_cast<long long>(r.tokens[0].size()), static_cast<long long>(st.verify_passes),
                static_cast<long long>(st.total_accepted()), static_cast<long long>(st.total_drafted()),
                100.0 * st.acceptance_rate());
  }
}

TEST_CASE("maxtext generate --spec lookup|draft prints plain greedy's tokens, and refuses what it does not do",
          "[speculative][stories260K][cli]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.bin", "stories260K");
  const std::string base = "generate --threads 1 --max-new-tokens 80 --weights " + dir + "/stories260K.bin --tokenizer " +
                           dir + "/tok512.bin --prompt \"The cat sat on the mat. The cat\"";
  int rc = 0;
  const std::string plain = run_maxtext(base, rc);
  REQUIRE(rc == 0);
  const std::string tokens = line_of(plain, "tokens[0]: ");
  REQUIRE(!tokens.empty());
  for (const std::string& spec : {std::string(" --spec lookup"), std::string(" --spec lookup --draft-max 2"),
                                  " --spec draft --draft " + dir + "/stories260K.gguf --draft-max 3"}) {
    const std::string out = run_maxtext(base + spec, rc);
    INFO(spec << "\n" << out);
    CHECK(rc == 0);
    CHECK(line_of(out, "tokens[0]: ") == tokens);
    CHECK(out.find("\nspeculative: ") != std::string::npos);
    CHECK(out.find(plain.substr(0, plain.find('\n'))) != std::string::npos);  // the same streamed text
  }
  // The model's own file as the draft: every draft accepted.
  const std::string same = run_maxtext(base + " --spec draft --draft " + dir + "/stories260K.bin", rc);
  const std::string line = line_of(same, "speculative: ");
  INFO(line);
  CHECK(line.find("draft-max 4") != std::string::npos);
  const auto of = line.find(" of ");
  REQUIRE(of != std::string::npos);
  const auto acc = line.rfind(' ', of - 1);
  CHECK(line.substr(acc + 1, of - acc - 1) == line.substr(of + 4, line.find(' ', of + 4) - of - 4));

  refused(base + " --spec draft", "--spec draft needs --draft FILE");
  refused(base + " --draft " + dir + "/stories260K.gguf", "--draft FILE needs --spec draft");
  refused(base + " --draft-max 3", "--draft-max needs --spec lookup, draft or mtp");
  refused(base + " --spec lookup --draft-max 0", "--draft-max must be >= 1, found 0");
  refused(base + " --spec ngram", "--spec: expected lookup (prompt lookup), draft");
  refused("generate --threads 1 --weights " + dir + "/stories260K.bin --tokens 1,2/3,4 --spec lookup",
          "--spec: one prompt at a time, found 2 rows");
}

TEST_CASE("maxtext generate --spec draft: the draft's 8-bit activations change its drafts, not the tokens",
          "[speculative][cli]") {
  // Two quantisations of one seeded Llama (tests/fixtures/ggml_quants): Q6_K the model, Q4_K_M the draft. The draft's
  // products take 8-bit activations by default (auto) where its file holds blocks; on, off and auto give plain
  // greedy's tokens, and an F32 draft file takes them only when asked for by name (then refused, naming the file).
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  const std::string base = "generate --threads 1 --max-new-tokens 24 --weights " + dir + "/tiny-Q6_K.gguf --tokens 1,7,42,99";
  const std::string draft = " --spec draft --draft " + dir + "/tiny-Q4_K_M.gguf";
  int rc = 0;
  const std::string plain = run_maxtext(base, rc);
  REQUIRE(rc == 0);
  const std::string tokens = line_of(plain, "tokens[0]: ");
  REQUIRE(!tokens.empty());
  // A program built without the ggml weight type (-DMAXTEXT_BLOCK_POLICIES without it, as CI's sanitizer stage)
  // widens the files' blocks to float32: then the draft has no blocks, auto keeps its products exact and on is
  // refused.
  const bool blocks = plain.find("weights kept as ggml") != std::string::npos;
  for (const std::string& opt : {std::string(), std::string(" --draft-int8-activations on"),
                                 std::string(" --draft-int8-activations off"), std::string(" --draft-int8-activations auto")}) {
    if (!blocks && opt.find(" on") != std::string::npos) {
      refused(base + draft + opt, "--draft-int8-activations on: " + dir + "/tiny-Q4_K_M.gguf holds no Q8_0 or block");
      continue;
    }
    const std::string out = run_maxtext(base + draft + opt, rc);
    INFO(opt << "\n" << out);
    CHECK(rc == 0);
    CHECK(line_of(out, "tokens[0]: ") == tokens);
    CHECK(out.find("\nspeculative: ") != std::string::npos);
    const bool automatic = opt.empty() || opt.find("auto") != std::string::npos;
    CHECK((out.find("tiny-Q4_K_M.gguf: 8-bit activations on (auto)") != std::string::npos) == (automatic && blocks));
  }
  refused(base + " --draft-int8-activations on", "--draft-int8-activations needs --spec draft");
  refused(base + draft + " --draft-int8-activations yes", "--draft-int8-activations: expected on, off or auto");
  const std::string stories = test::models_dir() + "/stories260K";
  if (std::filesystem::exists(stories + "/stories260K.gguf")) {  // F32 rows: auto takes the exact products, on is refused
    const std::string sbase = "generate --threads 1 --max-new-tokens 8 --weights " + stories + "/stories260K.bin --tokens 1,2,3";
    const std::string out = run_maxtext(sbase + " --spec draft --draft " + stories + "/stories260K.gguf", rc);
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.find("8-bit activations on") == std::string::npos);
    refused(sbase + " --spec draft --draft " + stories + "/stories260K.gguf --draft-int8-activations on",
            "--draft-int8-activations on: " + stories + "/stories260K.gguf holds no Q8_0 or block-quantised matrix");
  }
}

namespace {
/// The distribution a draw at temperature `temp` with top-k `k` chooses from, written from SamplingParams' definition
/// (softmax of logits / temp over the k largest, ties by lower id), in double.
std::vector<double> sampling_distribution(const float* logits, std::int64_t V, double temp, std::int64_t k) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(V));
  for (std::int64_t i = 0; i < V; ++i) idx[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<std::size_t>(V), 0.0);
  double sum = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    const auto t = idx[static_cast<std::size_t>(i)];
    p[static_cast<std::size_t>(t)] = std::exp((logits[t] - logits[idx[0]]) / temp);
    sum += p[static_cast<std::size_t>(t)];
  }
  for (auto& x : p) x /= sum;
  return p;
}

/// Pearson's statistic of `counts` (n draws) against `p`, bins with an expected count under 5 pooled; `df` receives
/// the degrees of freedom.
double chi_square(const std::vector<std::int64_t>& counts, const std::vector<double>& p, std::int64_t n, std::int64_t& df) {
  double chi = 0, pooled_e = 0, pooled_o = 0;
  df = -1;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e < 5) {
      pooled_e += e;
      pooled_o += static_cast<double>(counts[i]);
      continue;
    }
    chi += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++df;
  }
  if (pooled_e > 0) {
    chi += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-9);
    ++df;
  }
  return chi;
}
/// The chi-square quantile at 1 - 0.001 (Wilson-Hilferty: z = 3.0902).
double chi_square_critical(std::int64_t df) {
  const double d = static_cast<double>(df), a = 2.0 / (9.0 * d);
  return d * std::pow(1.0 - a + 3.0902 * std::sqrt(a), 3.0);
}

struct FixedDrafter {  // the same tokens whatever the context: a deliberately poor draft
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>&, std::int64_t k) const {
    return {tokens.begin(), tokens.begin() + std::min<std::int64_t>(k, static_cast<std::int64_t>(tokens.size()))};
  }
};
}  // namespace

TEST_CASE("speculative sampling emits the model's distribution (chi-square at 0.001), poor draft or good", "[speculative]") {
  Llama m = seeded<Llama>(fixture_meta_config("llama2_model"), 7);
  const std::int64_t V = m.config().vocab_size, topk = 24;
  const double temp = 0.15;
  const std::vector<std::int32_t> prompt = {1, 5, 9};
  // Exact marginals of the 2nd and 3rd generated tokens: p(t2) = sum_t1 p(t1) p(t2 | t1), and so on.
  // Exact marginals of the 1st, 2nd and 3rd generated tokens at temperature t: p(t2) = sum_t1 p(t1) p(t2 | t1), ...
  struct Marginals {
    std::vector<double> p1, p2, p3;
  };
  auto marginals = [&](double t) {
    auto last_dist = [&](const std::vector<std::int32_t>& ids) {
      Tensor<std::int32_t, 2> tok({1, static_cast<std::int64_t>(ids.size())});
      for (std::size_t i = 0; i < ids.size(); ++i) tok(0, static_cast<std::int64_t>(i)) = ids[i];
      models::ForwardOptions fo;
      fo.last_only = true;
      const auto l = m.forward(tok, fo);
      return sampling_distribution(&l(0, 0, 0), V, t, topk);
    };
    Marginals r{last_dist(prompt), std::vector<double>(static_cast<std::size_t>(V), 0.0),
                std::vector<double>(static_cast<std::size_t>(V), 0.0)};
    for (std::int32_t a = 0; a < V; ++a) {
      if (r.p1[static_cast<std::size_t>(a)] == 0) continue;
      auto ctx = prompt;
      ctx.push_back(a);
      const auto pa = last_dist(ctx);
      for (std::int32_t b = 0; b < V; ++b) {
        const double pab = r.p1[static_cast<std::size_t>(a)] * pa[static_cast<std::size_t>(b)];
        if (pab == 0) continue;
        r.p2[static_cast<std::size_t>(b)] += pab;
        auto ctx2 = ctx;
        ctx2.push_back(b);
        const auto pb = last_dist(ctx2);
        for (std::int64_t c = 0; c < V; ++c) r.p3[static_cast<std::size_t>(c)] += pab * pb[static_cast<std::size_t>(c)];
      }
    }
    return r;
  };
  const Marginals truth = marginals(temp), wrong = marginals(0.2);
  const auto& p2 = truth.p2;
  const auto& p3 = truth.p3;
  // The most likely 2nd token, and the least likely one.
  const auto best2 = static_cast<std::int32_t>(std::max_element(p2.begin(), p2.end()) - p2.begin());
  std::int32_t never = 0;  // the token least likely at the 2nd and 3rd steps
  for (std::int32_t t = 1; t < V; ++t) {
    const auto i = static_cast<std::size_t>(t), j = static_cast<std::size_t>(never);
    if (p2[i] + p3[i] < p2[j] + p3[j]) never = t;
  }
  REQUIRE(never != best2);
  const std::int64_t N = 3000;
  auto run = [&](auto& drafter, const char* what) {
    INFO(what);
    std::vector<std::int64_t> c2(static_cast<std::size_t>(V), 0), c3(static_cast<std::size_t>(V), 0);
    std::int64_t accepted = 0, drafted = 0;
    for (std::int64_t s = 0; s < N; ++s) {
      models::GenerateOptions o = greedy(4);
      o.sampling.temperature = static_cast<float>(temp);
      o.sampling.top_k = topk;
      o.sampling.seed = static_cast<std::uint64_t>(s + 1);
      models::SpeculativeStats st;
      const auto r = models::generate_speculative(m, prompt, o, drafter, {2}, &st);
      REQUIRE(r.tokens[0].size() == 4);
      ++c2[static_cast<std::size_t>(r.tokens[0][1])];
      ++c3[static_cast<std::size_t>(r.tokens[0][2])];
      accepted += st.total_accepted();
      drafted += st.total_drafted();
    }
    CHECK(drafted > 0);
    std::int64_t df2 = 0, df3 = 0;
    const double x2 = chi_square(c2, p2, N, df2), x3 = chi_square(c3, p3, N, df3);
    INFO("chi-square 2nd token " << x2 << " (df " << df2 << ", critical " << chi_square_critical(df2) << "); 3rd "
                                  << x3 << " (df " << df3 << "); accepted " << accepted << " of " << drafted);
    CHECK(df2 > 5);
    CHECK(x2 < chi_square_critical(df2));
    CHECK(x3 < chi_square_critical(df3));
    // The test has the power to see a small error: the same counts are refused against the distribution at
    // temperature 0.2 instead of 0.15.
    std::int64_t dfw = 0;
    const double xw = chi_square(c2, wrong.p2, N, dfw);
    INFO("against the wrong temperature: " << xw << " (df " << dfw << ")");
    CHECK(xw > chi_square_critical(dfw));
    if (std::getenv("MAXTEXT_TEST_REPORT")) {
      std::printf("%s: chi-square 2nd token %.1f (df %lld), 3rd %.1f (df %lld), critical %.1f; %lld of %lld drafts kept\n",
                  what, x2, static_cast<long long>(df2), x3, static_cast<long long>(df3), chi_square_critical(df2),
                  static_cast<long long>(accepted), static_cast<long long>(drafted));
    }
    return static_cast<double>(accepted) / static_cast<double>(drafted);
  };
  INFO("poor draft " << never << ", good draft " << best2);
  FixedDrafter poor{{never, never}};
  const double poor_rate = run(poor, "the least likely token, drafted at every position");
  FixedDrafter good{{best2, best2}};
  CHECK(run(good, "the most likely 2nd token, drafted at every position") > poor_rate);
  models::PromptLookupDrafter lookup;
  run(lookup, "prompt lookup");
}

TEST_CASE("Session::generate_speculative equals Session::generate over several turns (greedy)", "[speculative][session]") {
  const Config c = fixture_meta_config("llama2_model");
  Llama m = seeded<Llama>(c, 7), other = seeded<Llama>(c, 8);
  const std::vector<std::vector<std::int32_t>> turns = {{1, 5, 9, 5, 9}, {3, 4, 5, 9}, {7}};
  for (int which = 0; which < 3; ++which) {
    INFO("drafter " << which);
    models::Session<Llama> plain(m, 64), spec(m, 64);
    models::PromptLookupDrafter lookup;
    models::ModelDrafter<Llama> self(m, 64), rival(other, 64);
    std::int64_t drafted = 0, accepted = 0;
    for (const auto& t : turns) {
      const auto a = plain.generate(t, greedy(10));
      models::SpeculativeStats st;
      models::SpeculativeOptions so;
      so.draft_max = 3;
      const auto b = which == 0   ? spec.generate_speculative(t, greedy(10), lookup, so, &st)
                     : which == 1 ? spec.generate_speculative(t, greedy(10), self, so, &st)
                                  : spec.generate_speculative(t, greedy(10), rival, so, &st);
      CHECK(b.tokens[0] == a.tokens[0]);
      CHECK(b.finish[0] == a.finish[0]);
      CHECK(spec.tokens() == plain.tokens());
      drafted += st.total_drafted();
      accepted += st.total_accepted();
    }
    CHECK(drafted > 0);
    if (which == 1) CHECK(accepted == drafted);  // the model as its own draft
    CHECK(spec.cached() == spec.length() - 1);
  }
}

namespace {
/// `maxtext chat` over three user lines: its answers (the output without the notes and per-turn statistics lines).
std::string chat_answers(const std::string& args, const std::string& in, int& rc) {
  const std::string out = test::run_cli("chat " + args + " < " + in, rc);
  std::string kept;
  std::size_t at = 0;
  while (at < out.size()) {
    const std::size_t end = std::min(out.find('\n', at), out.size());
    const std::string line = out.substr(at, end - at);
    if (line.rfind("[turn ", 0) != 0 && line.rfind("note: ", 0) != 0) kept += line + "\n";
    at = end + 1;
  }
  return kept;
}
std::string three_lines(const std::string& tag) {
  const std::string in =
      (std::filesystem::current_path() / ("chat_" + tag + "_in_" + std::to_string(::getpid()) + ".txt")).string();
  std::ofstream f(in);
  f << "Once upon a time\nTell me more about the dog\nAnd then?\n";
  return in;
}
}  // namespace

TEST_CASE("maxtext chat --spec lookup|draft answers as plain chat does, turn after turn", "[speculative][stories260K][cli]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.gguf", "stories260K");
  const std::string in = three_lines("spec");
  const std::string base = "--weights " + dir + "/stories260K.gguf --max-new-tokens 40";
  int rc = 0;
  const std::string plain = chat_answers(base, in, rc);
  REQUIRE(rc == 0);
  REQUIRE(plain.size() > 40);
  CHECK(chat_answers(base + " --spec lookup --draft-max 3", in, rc) == plain);
  CHECK(rc == 0);
  CHECK(chat_answers(base + " --spec draft --draft " + dir + "/stories260K.bin", in, rc) == plain);  // every draft kept
  CHECK(rc == 0);
  const std::string stats = test::run_cli("chat " + base + " --spec lookup < " + in, rc);
  CHECK(stats.find("drafts kept in") != std::string::npos);
  const std::string mtp = test::run_cli("chat " + base + " --spec mtp < " + in, rc);
  CHECK(rc != 0);
  CHECK(mtp.find("--spec mtp: the model has no MTP layers") != std::string::npos);
  std::remove(in.c_str());
}

TEST_CASE("maxtext chat --spec mtp answers as plain chat does, turn after turn (a GGUF file with a next-n layer)",
          "[speculative][mtp][cli]") {
  // llama.cpp's peer file of a DeepSeek-V3-shaped model with one next-n (MTP) layer and a 128-piece vocabulary.
  const std::string file = test::fixtures_dir() + "/llamacpp/deepseek2/model.gguf";
  const std::string in = three_lines("mtp");
  const std::string base = "--weights " + file + " --max-new-tokens 24 --threads 1";
  int rc = 0;
  const std::string plain = chat_answers(base, in, rc);
  REQUIRE(rc == 0);
  REQUIRE(plain.size() > 10);
  CHECK(chat_answers(base + " --spec mtp --draft-max 1", in, rc) == plain);
  CHECK(rc == 0);
  CHECK(chat_answers(base + " --spec mtp --mtp-hidden normed", in, rc) == plain);
  CHECK(rc == 0);
  const std::string stats = test::run_cli("chat " + base + " --spec mtp < " + in, rc);
  CHECK(rc == 0);
  CHECK(stats.find("drafts kept in") != std::string::npos);
  // Turns after the first prefill only what they add: the MTP layers follow the conversation's cache.
  const auto turn2 = stats.find("[turn 2: prefilled ");
  REQUIRE(turn2 != std::string::npos);
  long long prefilled = -1, of = -1, reused = -1;
  REQUIRE(std::sscanf(stats.c_str() + turn2, "[turn 2: prefilled %lld new tokens of %lld (%lld reused", &prefilled, &of,
                      &reused) == 3);
  // What the turn adds, the last answer's last token, and at most mtp_num_layers + 1 (here 2) positions the MTP layer
  // had taken past a common prefix that ends inside the last answer (MtpDrafter::rewind).
  CHECK(reused > 20);
  CHECK(prefilled <= of - reused + 3);
  std::remove(in.c_str());
}
