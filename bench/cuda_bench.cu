// Prefill and decode throughput of a GPT-3 model on the CUDA backend (seeded weights: speed does not depend on
// their values), in bf16 activations and weights.
//   bench_cuda [emb_dim=1024] [layers=8] [heads=16] [batch=1] [prompt=512] [decode=128]
// Prints tokens/s for the prefill (batch x prompt tokens) and for decoding (batch tokens per step). Exits 77
// without a GPU.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "maxtext/cuda.hpp"

int main(int argc, char** argv) {
  using Model = maxtext::models::Transformer<maxtext::Policy<maxtext::cuda::Backend, maxtext::bf16>,
                                             maxtext::layers::Gpt3DecoderLayer>;
  if (!maxtext::cuda::available()) {
    std::printf("SKIPPED: no usable CUDA device\n");
    return 77;
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
    std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(B));
    for (long b = 0; b < B; ++b) {
      for (long t = 0; t < P; ++t) prompts[static_cast<std::size_t>(b)].push_back(static_cast<std::int32_t>((b * 31 + t * 7) % 1000 + 1));
    }
    maxtext::models::GenerateOptions opt;
    opt.max_new_tokens = 4;
    (void)maxtext::models::generate(model, prompts, opt);  // warm-up: pool, cuBLASLt heuristics, module load
    opt.max_new_tokens = N;
    const auto r = maxtext::models::generate(model, prompts, opt);
    std::printf("cuda gpt3 emb=%ld layers=%ld heads=%ld batch=%ld: prefill %ld tokens %.0f tokens/s, decode %.0f tokens/s\n",
                D, L, H, B, P, r.prefill_tokens_per_second(), r.decode_tokens_per_second());
  } catch (const maxtext::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
