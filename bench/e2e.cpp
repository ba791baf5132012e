// bench/e2e.cpp: end-to-end prefill and decode speed of a Llama model (layers::LlamaDecoderLayer; from a GGUF file
// also Gemma 3 and Qwen3-MoE, bench models d and e) on the CPU backend,
// reading the same GGUF file llama.cpp reads (its configuration from the metadata; F32 or Q8_0 tensors kept as they
// are, or converted at load to the policy's weight type, e.g. F32 -> bf16), or a MaxText-named safetensors file with
// the shape given on the command line (bench/make_models.py writes both). Prints one JSON object per measurement:
//   {"impl": "maxtext", "test": "pp128" | "pp512" | "tg@512", "weights": ..., "threads": n, "tokens_per_s": x, ...}
// Prefill: a fresh cache, T random tokens, logits for the last token only (as llama-bench). Decode: after a
// prefill of --context tokens, --decode single-token steps, each producing logits; the rate is steps / time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/families/gemma/gemma3.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/families/qwen3_next/qwen3_next.hpp"
#include "maxtext/models/transformer.hpp"

#include "bench_args.hpp"

using namespace maxtext;

namespace {

struct Args {
  std::string weights, name = "model", wtype = "f32";
  std::int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, hidden = 0, vocab = 32000, head_dim = 0;
  int threads = 1, reps = 2, decode = 16;
  bool int8_activations = false;  ///< cpu::Options::int8_activations (Q8_0 weights only)
  std::string kv_type = "act";    ///< KV-cache type: "act" (the activation type) or "f16" (--weight-type ggml only)
  std::string kv_quant;           ///< MaxText's quantize_kvcache with this kv_quant_dtype (int8, int4, fp8), or none
  std::int64_t context = 512;
  std::vector<std::int64_t> prompts = {128, 512};
};

Args parse(int argc, char** argv) {
  Args a;
  bench::Options o("e2e",
                   "e2e --weights F.gguf | (F.safetensors --dim D --layers L --heads N [--kv-heads K] --hidden F "
                   "[--vocab V] [--head-dim H]) [--weight-type f32|bf16|q8_0|ggml] [--threads T] [--prompts 128,512] "
                   "[--context 512] [--decode 16] [--reps 2] [--name NAME] [--int8-activations] [--kv-type act|f16] "
                   "[--kv-quant int8|int4|fp8]");
  o.text("--weights", a.weights)
      .text("--name", a.name)
      .text("--weight-type", a.wtype)
      .number("--dim", a.dim)
      .number("--layers", a.layers)
      .number("--heads", a.heads)
      .number("--kv-heads", a.kv_heads)
      .number("--hidden", a.hidden)
      .number("--vocab", a.vocab)
      .number("--head-dim", a.head_dim)
      .number("--threads", a.threads)
      .number("--reps", a.reps)
      .number("--decode", a.decode)
      .number("--context", a.context)
      .list("--prompts", a.prompts)
      .flag("--int8-activations", a.int8_activations)
      .text("--kv-type", a.kv_type)
      .text("--kv-quant", a.kv_quant)
      .parse(argc, argv);
  if (a.weights.empty()) o.fail("--weights is required");
  if (a.kv_heads <= 0) a.kv_heads = a.heads;
  if (a.head_dim <= 0 && a.heads > 0) a.head_dim = a.dim / a.heads;
  return a;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void report(const Args& a, const std::string& test, std::int64_t tokens, double seconds) {
  std::printf(
      "{\"impl\": \"%s\", \"model\": \"%s\", \"weights\": \"%s\", \"threads\": %d, \"test\": \"%s\", "
      "\"tokens\": %lld, \"seconds\": %.6f, \"tokens_per_s\": %.3f}\n",
      (std::string(a.int8_activations ? "maxtext-int8act" : "maxtext") + (a.kv_type == "f16" ? "-kvf16" : "") +
       (a.kv_quant.empty() ? "" : "-kv" + a.kv_quant)).c_str(),
      a.name.c_str(), a.wtype.c_str(), a.threads, test.c_str(), static_cast<long long>(tokens), seconds,
      static_cast<double>(tokens) / seconds);
  std::fflush(stdout);
}

template <class Model>
void run(const Args& a, const Config& cfg) {
  Model model(cfg, cpu::Backend(cpu::Options{a.threads, a.int8_activations}));
  {
    // ggml weights: a GGUF file's blocks (Q4_K, Q6_K, ...) computed from as they lie (io::load_weights keep_blocks)
    io::LoadedWeights w = io::load_weights(a.weights, cfg, std::is_same_v<typename Model::policy::weight_t, ggml_byte>);
    model.load(w.tensors);
  }
  trim_heap();  // as the CLI does after loading (core/mapped_pages.hpp)
  std::mt19937 g(1234);
  std::uniform_int_distribution<std::int32_t> tok(3, static_cast<std::int32_t>(a.vocab - 1));
  auto tokens = [&](std::int64_t n) {
    Tensor<std::int32_t, 2> t({1, n});
    for (std::int64_t i = 0; i < n; ++i) t(0, i) = tok(g);
    return t;
  };
  models::ForwardOptions last;
  last.last_only = true;
  const std::int64_t cap = std::max<std::int64_t>(a.context + a.decode, *std::max_element(a.prompts.begin(), a.prompts.end()));
  {  // warm-up: page in the weights, grow scratch buffers
    auto cache = model.make_cache(1, cap);
    model.forward(tokens(8), cache, last);
  }
  for (std::int64_t T : a.prompts) {
    double best = 1e30;
    for (int r = 0; r < a.reps; ++r) {
      auto cache = model.make_cache(1, cap);
      const auto t = tokens(T);
      const double t0 = now();
      model.forward(t, cache, last);
      best = std::min(best, now() - t0);
    }
    report(a, "pp" + std::to_string(T), T, best);
  }
  if (a.decode > 0) {
    double best = 1e30;
    for (int r = 0; r < std::max(1, a.reps - 1); ++r) {
      auto cache = model.make_cache(1, cap);
      model.forward(tokens(a.context), cache, last);
      const double t0 = now();
      for (int i = 0; i < a.decode; ++i) model.forward(tokens(1), cache, last);
      best = std::min(best, now() - t0);
    }
    report(a, "tg@" + std::to_string(a.context), a.decode, best);
  }
}

/// The decoder block the GGUF names: llama (llama2), gemma3, qwen3moe (qwen3_moe), qwen3next (qwen3_next).
template <class P>
void run_block(const Args& a, const Config& cfg) {
  if (cfg.is("gemma3")) return run<models::Transformer<P, layers::Gemma3DecoderLayer>>(a, cfg);
  if (cfg.is("qwen3_moe")) return run<models::Transformer<P, layers::Qwen3MoeDecoderLayer>>(a, cfg);
  if (cfg.is("qwen3_next")) return run<models::Transformer<P, layers::Qwen3NextDecoderLayer>>(a, cfg);
  MAXTEXT_CHECK(cfg.is("llama2"), UnsupportedError, "[e2e] decoder_block ", cfg.decoder_block,
                " is not benchmarked (llama2, gemma3, qwen3_moe, qwen3_next)");
  run<models::Transformer<P, layers::LlamaDecoderLayer>>(a, cfg);
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    Config cfg;
    if (auto c = io::read_weights_config(a.weights)) {
      cfg = *c;  // GGUF metadata
    } else {
      if (a.dim <= 0 || a.layers <= 0 || a.heads <= 0 || a.hidden <= 0) {
        std::fprintf(stderr, "e2e: MaxText safetensors need --dim, --layers, --heads and --hidden\n");
        return 2;
      }
      cfg.decoder_block = "llama2";
      cfg.base_emb_dim = a.dim;
      cfg.base_num_decoder_layers = a.layers;
      cfg.base_num_query_heads = a.heads;
      cfg.base_num_kv_heads = a.kv_heads;
      cfg.base_mlp_dim = a.hidden;
      cfg.head_dim = a.head_dim;
      cfg.vocab_size = a.vocab;
      cfg.normalization_layer_epsilon = 1e-5;
    }
    cfg.max_target_length = std::max<std::int64_t>(a.context + a.decode + 8, 1024);
    cfg.scan_layers = false;
    if (!a.kv_quant.empty()) {  // MaxText's quantised cache (kv_quant_dtype is checked by the model)
      cfg.set("quantize_kvcache", "true");
      cfg.set("kv_quant_dtype", a.kv_quant);
    }
    a.vocab = cfg.vocab_size;
    using B = cpu::Backend;
    if (a.kv_type != "act" && a.kv_type != "f16") {
      std::fprintf(stderr, "e2e: --kv-type must be act (the activation type) or f16\n");
      return 2;
    }
    if (a.kv_type == "f16" && a.wtype != "ggml") {
      std::fprintf(stderr, "e2e: --kv-type f16 is benchmarked with --weight-type ggml only\n");
      return 2;
    }
    if (a.wtype == "f32") {
      cfg.dtype = "float32";
      run_block<Policy<B, float>>(a, cfg);
    } else if (a.wtype == "bf16") {
      cfg.dtype = "bfloat16";
      run_block<Policy<B, bf16>>(a, cfg);
    } else if (a.wtype == "q8_0") {
      cfg.dtype = "float32";
      run_block<Policy<B, q8_0>>(a, cfg);
    } else if (a.wtype == "ggml") {  // every matrix in its GGUF type (Q4_K_M, Q4_0, Q6_K files); llama only
      cfg.dtype = "float32";
      MAXTEXT_CHECK(cfg.is("llama2"), UnsupportedError, "[e2e] --weight-type ggml is benchmarked on llama files only");
      if (a.kv_type == "f16") {  // f32 activations over an f16 KV cache (llama.cpp's default cache type)
        run<models::Transformer<Policy<B, ggml_byte, float, float, fp16>, layers::LlamaDecoderLayer>>(a, cfg);
      } else {
        run<models::Transformer<Policy<B, ggml_byte, float>, layers::LlamaDecoderLayer>>(a, cfg);
      }
    } else {
      std::fprintf(stderr, "e2e: --weight-type must be f32, bf16, q8_0 or ggml\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "e2e: %s\n", e.what());
    return 1;
  }
  return 0;
}
