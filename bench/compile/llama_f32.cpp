// bench/compile/llama_f32.cpp: the compile-time probe (bench/compile_time.sh): one translation unit that includes the
// umbrella header and instantiates one model (Llama, f32 on the CPU backend) with its forward pass and generation.
#include <cstdio>

#include "maxtext/maxtext.hpp"

int main() {
  using Model = maxtext::models::Transformer<maxtext::Policy<maxtext::cpu::Backend, float>,
                                             maxtext::layers::LlamaDecoderLayer>;
  maxtext::Config cfg;
  cfg.decoder_block = "llama2";
  cfg.emb_dim = 16;
  cfg.num_query_heads = 2;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 8;
  cfg.mlp_dim = 32;
  cfg.num_decoder_layers = 1;
  cfg.vocab_size = 32;
  cfg.dtype = "float32";
  cfg.derive();
  cfg.validate();
  Model model(cfg);
  model.init(0);
  maxtext::models::GenerateOptions opt;
  opt.max_new_tokens = 2;
  const auto r = maxtext::models::generate(model, {{1, 2, 3}}, opt);
  std::printf("%d\n", r.tokens[0].back());
  return 0;
}
