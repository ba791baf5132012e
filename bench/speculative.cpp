// bench/speculative.cpp: what speculative decoding (models/speculative.hpp) rests on, measured on a Llama model on the
// CPU backend, one JSON object per line:
//   1. "decode@C": one decode step (one row) after a context of C tokens;
//   2. "verify K+1 @C": the verify pass over K + 1 rows (K = 1..--k-max) at the same context, and its ratio to (1):
//      decode is bound by reading the weights, so K + 1 rows cost little more than one, and each accepted draft is
//      a step saved;
//   3. with --prompt (a GGUF file that carries its tokenizer): greedy generation of --tokens tokens, plain and with
//      prompt-lookup drafts, tokens/s of each, the speed-up and the acceptance (the tokens are checked equal).
// The cache is set back after every measured pass, so each one runs at the same context.
//
//   bench_speculative --weights model.gguf [--threads 1] [--context 512] [--k-max 4] [--reps 5] [--int8-activations 1]
//   bench_speculative --dim 768 --layers 12 --heads 12 --hidden 2048 [--weight-type f32|bf16]   (seeded weights)
//   bench_speculative --weights stories260K.gguf --prompt "Once upon a time" --tokens 128
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/transformer.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

#include "bench_args.hpp"

using namespace maxtext;

namespace {

struct Args {
  std::string weights, wtype = "f32", prompt;
  std::int64_t dim = 768, layers = 12, heads = 12, kv_heads = 0, hidden = 2048, vocab = 32000;
  std::int64_t context = 512, k_max = 4, tokens = 128;
  int threads = 1, reps = 5;
  bool int8 = false;  // cpu::Options::int8_activations (llama.cpp's arithmetic for quantised files)
};

Args parse(int argc, char** argv) {
  Args a;
  bench::Options o("bench_speculative",
                   "bench_speculative [--weights FILE.gguf | --dim D --layers L --heads H --kv-heads K --hidden F "
                   "--vocab V --weight-type f32|bf16] [--threads N] [--context C] [--k-max K] [--reps R] "
                   "[--prompt TEXT --tokens N] [--int8-activations 0|1]");
  o.text("--weights", a.weights)
      .text("--weight-type", a.wtype)
      .text("--prompt", a.prompt)
      .number("--dim", a.dim)
      .number("--layers", a.layers)
      .number("--heads", a.heads)
      .number("--kv-heads", a.kv_heads)
      .number("--hidden", a.hidden)
      .number("--vocab", a.vocab)
      .number("--context", a.context)
      .number("--k-max", a.k_max)
      .number("--tokens", a.tokens)
      .number("--threads", a.threads)
      .number("--reps", a.reps)
      .number("--int8-activations", a.int8)
      .parse(argc, argv);
  if (a.k_max < 1 || a.context < 1 || a.reps < 1 || a.tokens < 2) o.fail("--k-max, --context, --reps >= 1, --tokens >= 2");
  if (!a.prompt.empty() && a.weights.empty()) o.fail("--prompt needs --weights (a GGUF file with its tokenizer)");
  if (a.weights.empty() && a.wtype != "f32" && a.wtype != "bf16") {
    o.fail("--weight-type must be f32 or bf16 (seeded weights), found '" + a.wtype + "'");
  }
  return a;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void report(const Args& a, const std::string& test, std::int64_t rows, double seconds, double ratio) {
  std::printf("{\"impl\": \"maxtext\", \"weights\": \"%s\", \"int8_activations\": %s, \"threads\": %d, "
              "\"test\": \"%s\", \"rows\": %lld, \"ms\": %.3f, \"ratio_to_decode\": %.3f}\n",
              a.weights.empty() ? a.wtype.c_str() : a.weights.c_str(), a.int8 ? "true" : "false", a.threads,
              test.c_str(),
              static_cast<long long>(rows), seconds * 1e3, ratio);
  std::fflush(stdout);
}

template <class Model>
void run(const Args& a, Model& model) {
  const std::int64_t V = model.config().vocab_size;
  std::mt19937 g(1234);
  std::uniform_int_distribution<std::int32_t> tok(3, static_cast<std::int32_t>(V - 1));
  auto tokens = [&](std::int64_t n) {
    Tensor<std::int32_t, 2> t({1, n});
    for (std::int64_t i = 0; i < n; ++i) t(0, i) = tok(g);
    return t;
  };
  auto cache = model.make_cache(1, a.context + a.k_max + 1);
  models::ForwardOptions last;
  last.last_only = true;
  model.forward(tokens(a.context), cache, last);
  const auto C = static_cast<std::int32_t>(a.context);
  // Best of reps; every pass starts at context C (the cache set back after it), as a verify pass after a rollback.
  auto best = [&](std::int64_t rows) {
    models::ForwardOptions all;  // a verify pass needs every row's logits
    const auto t = tokens(rows);
    model.forward(t, cache, rows == 1 ? last : all);  // warm-up
    cache.set_length(0, C);
    double b = 1e30;
    for (int r = 0; r < a.reps; ++r) {
      const double t0 = now();
      model.forward(t, cache, rows == 1 ? last : all);
      b = std::min(b, now() - t0);
      cache.set_length(0, C);
    }
    return b;
  };
  const double decode = best(1);
  report(a, "decode@" + std::to_string(a.context), 1, decode, 1.0);
  for (std::int64_t k = 1; k <= a.k_max; ++k) {
    const double v = best(k + 1);
    report(a, "verify " + std::to_string(k + 1) + " @" + std::to_string(a.context), k + 1, v, v / decode);
  }
}

template <class Model>
void run_prompt(const Args& a, Model& model) {
  const auto tk = tokenizer::load_tokenizer(a.weights);
  const auto prompt = tk->encode(a.prompt);
  models::GenerateOptions opt;
  opt.max_new_tokens = a.tokens;
  double plain_s = 1e30, spec_s = 1e30;
  models::GenerateResult plain, spec;
  models::SpeculativeStats st;
  for (int r = 0; r < a.reps; ++r) {
    plain = models::generate(model, {prompt}, opt);
    plain_s = std::min(plain_s, plain.prefill_seconds + plain.decode_seconds);
    models::PromptLookupDrafter lookup;
    models::SpeculativeOptions so;
    so.draft_max = a.k_max;
    spec = models::generate_speculative(model, prompt, opt, lookup, so, &st);
    spec_s = std::min(spec_s, spec.prefill_seconds + spec.decode_seconds);
  }
  const auto n = static_cast<double>(plain.tokens[0].size());
  std::printf("{\"impl\": \"maxtext\", \"weights\": \"%s\", \"threads\": %d, \"test\": \"lookup e2e\", "
              "\"tokens\": %lld, \"plain_tokens_per_s\": %.2f, \"speculative_tokens_per_s\": %.2f, \"speedup\": %.3f, "
              "\"acceptance\": %.3f, \"verify_passes\": %lld, \"same_tokens\": %s}\n",
              a.weights.c_str(), a.threads, static_cast<long long>(n), n / plain_s, n / spec_s, plain_s / spec_s,
              st.acceptance_rate(), static_cast<long long>(st.verify_passes),
              spec.tokens[0] == plain.tokens[0] ? "true" : "false");
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    using B = cpu::Backend;
    cpu::Options opt;
    opt.threads = a.threads;
    opt.int8_activations = a.int8;
    const cpu::Backend be(opt);
    if (!a.weights.empty()) {
      Config cfg = io::read_weights_config(a.weights).value();
      MAXTEXT_CHECK(cfg.is("llama2"), UnsupportedError, "[bench_speculative] decoder_block ", cfg.decoder_block,
                    ": llama files only");
      cfg.max_target_length = std::max<std::int64_t>(cfg.max_target_length, a.context + a.tokens + a.k_max + 64);
      cfg.dtype = "float32";
      models::Transformer<Policy<B, ggml_byte, float>, layers::LlamaDecoderLayer> model(cfg, be);
      model.load(io::load_weights(a.weights, cfg, true).tensors);
      run(a, model);
      if (!a.prompt.empty()) run_prompt(a, model);
      return 0;
    }
    Config cfg;
    cfg.decoder_block = "llama2";
    cfg.base_emb_dim = a.dim;
    cfg.base_num_decoder_layers = a.layers;
    cfg.base_num_query_heads = a.heads;
    cfg.base_num_kv_heads = a.kv_heads > 0 ? a.kv_heads : a.heads;
    cfg.base_mlp_dim = a.hidden;
    cfg.vocab_size = a.vocab;
    cfg.max_target_length = a.context + a.k_max + 64;
    if (a.wtype == "f32") {
      cfg.dtype = "float32";
      cfg.derive();
      models::Transformer<Policy<B, float>, layers::LlamaDecoderLayer> model(cfg, be);
      model.init(1);
      run(a, model);
    } else if (a.wtype == "bf16") {
      cfg.dtype = "bfloat16";
      cfg.derive();
      models::Transformer<Policy<B, bf16>, layers::LlamaDecoderLayer> model(cfg, be);
      model.init(1);
      run(a, model);
    } else {
      throw std::invalid_argument("--weight-type must be f32 or bf16 (seeded weights), found '" + a.wtype + "'");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_speculative: %s\n", e.what());
    return 1;
  }
  return 0;
}
