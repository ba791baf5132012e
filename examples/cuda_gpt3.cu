// A GPT-3 model on the GPU: the same `using Model = ...` as on the CPU with the CUDA backend in the policy.
//   example_cuda_gpt3 [config.yml [weights.safetensors]]
// Without arguments: MaxText's gpt3-52k configuration in bfloat16, seeded initialisation. Exits 77 without a GPU.
#include <cstdio>
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
  try {
    const std::string cfg_path = argc > 1 ? argv[1] : "";
    maxtext::Config cfg = maxtext::io::load_config(
        cfg_path, cfg_path.empty() ? std::vector<std::string>{"model_name=gpt3-52k", "dtype=bfloat16"}
                                   : std::vector<std::string>{"dtype=bfloat16"});
    Model model(cfg, maxtext::cuda::Backend(maxtext::cuda::Options{0}));
    if (argc > 2) {
      model.load(maxtext::io::load_weights(argv[2], cfg).tensors);
    } else {
      model.init(0);
    }
    maxtext::models::GenerateOptions opt;
    opt.max_new_tokens = 16;
    opt.sampling.temperature = 0.8f;
    opt.sampling.top_k = 40;
    opt.sampling.seed = 42;
    const auto r = maxtext::models::generate(model, {{1, 5, 9, 13}}, opt);
    std::printf("tokens:");
    for (int t : r.tokens[0]) std::printf(" %d", t);
    std::printf("\nprefill %.0f tokens/s, decode %.0f tokens/s\n", r.prefill_tokens_per_second(), r.decode_tokens_per_second());
  } catch (const maxtext::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
