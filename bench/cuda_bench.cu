// Prefill and decode throughput of a GPT-3 model on the CUDA backend (seeded weights: speed does not depend on
// their values), in bf16 activations and weights; or of a Llama-family GGUF file computed from its blocks as they lie
// (Policy<cuda::Backend, ggml_byte, float>: the Q4_K_M, Q4_0, Q6_K, ... files bench/compare makes).
//   bench_cuda [emb_dim=1024] [layers=8] [heads=16] [batch=1] [prompt=512] [decode=128]
//   bench_cuda --gguf FILE [batch=1] [prompt=512] [decode=128]
// Prints tokens/s for the prefill (batch x prompt tokens) and for decoding (batch tokens per step). Exits 77
// without a GPU.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "maxtext/cuda.hpp"

namespace {

/// Batch x prompt tokens of seeded ids below `vocab`: a warm-up generation (pool, cuBLASLt heuristics, module
/// load), then the measured one.
template <class Model>
maxtext::models::GenerateResult run(Model& model, long B, long P, long N, long vocab) {
  std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(B));
  for (long b = 0; b < B; ++b) {
    for (long t = 0; t < P; ++t) {
      prompts[static_cast<std::size_t>(b)].push_back(static_cast<std::int32_t>((b * 31 + t * 7) % (vocab - 1) + 1));
    }
  }
  maxtext::models::GenerateOptions opt;
  opt.max_new_tokens = 4;
  (void)maxtext::models::generate(model, prompts, opt);
  opt.max_new_tokens = N;
  return maxtext::models::generate(model, prompts, opt);
}

int run_gguf(const std::string& path, long B, long P, long N) {
  using Model = maxtext::models::Transformer<maxtext::Policy<maxtext::cuda::Backend, maxtext::ggml_byte, float>,
                                             maxtext::layers::LlamaDecoderLayer>;
  maxtext::Config cfg = maxtext::io::read_weights_config(path).value();
  if (cfg.max_target_length < P + N + 1) cfg.max_target_length = P + N + 1;
  maxtext::io::LoadedWeights w = maxtext::io::load_weights(path, cfg, true);
  Model model(cfg);
  model.load(w.tensors);
  const auto r = run(model, B, P, N, cfg.vocab_size);
  std::printf("cuda gguf %s (%s weights) batch=%ld: prefill %ld tokens %.0f tokens/s, decode %.1f tokens/s\n", path.c_str(),
              w.file_weight_type.c_str(), B, P, r.prefill_tokens_per_second(), r.decode_tokens_per_second());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using Model = maxtext::models::Transformer<maxtext::Policy<maxtext::cuda::Backend, maxtext::bf16>,
                                             maxtext::layers::Gpt3DecoderLayer>;
  if (!maxtext::cuda::available()) {
    std::printf("SKIPPED: no usable CUDA device\n");
    return 77;
  }
  if (argc > 2 && std::string(argv[1]) == "--gguf") {
    auto garg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
    try {
      return run_gguf(argv[2], garg(3, 1), garg(4, 512), garg(5, 128));
    } catch (const maxtext::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  auto arg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
  const long D = arg(1, 1024), L = arg(2, 8), H = arg(3, 16), B = arg(4, 1), P = arg(5, 512), N = arg(6, 128);
  try {
    maxtext::Config cfg = maxtext::io::load_config(
        "", {"model_name=gpt3-52k", "dtype=bfloat16", "base_emb_dim=" + std::to_string(D),
             "base_num_decoder_layers=" + std::to_string(L), "base_num_query_heads=" + std::to_string(H),
             "base_num_kv_heads=" + std::to_string(H), "head_dim=" + std::to_string(D / H),
             "base_mlp_dim=" + std::to_string(4 * D), "max_target_length=" + std::to_string(P + N + 1)});
    Model model(cfg);
    model.init(1);
    const auto r = run(model, B, P, N, 1001);
    std::printf("cuda gpt3 emb=%ld layers=%ld heads=%ld batch=%ld: prefill %ld tokens %.0f tokens/s, decode %.0f tokens/s\n",
                D, L, H, B, P, r.prefill_tokens_per_second(), r.decode_tokens_per_second());
  } catch (const maxtext::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
