// Uses the installed maxtext package: one `using` gives a GPT-3 model type; sizes come from a runtime Config.
#include <cstdio>

#include <maxtext/maxtext.hpp>

int main() {
  using Model = maxtext::models::Transformer<maxtext::Policy<maxtext::cpu::Backend, float>,
                                             maxtext::layers::Gpt3DecoderLayer>;
  maxtext::Config cfg;
  cfg.decoder_block = "gpt3";
  cfg.dtype = "float32";
  cfg.base_emb_dim = 32;
  cfg.base_num_query_heads = cfg.base_num_kv_heads = 4;
  cfg.head_dim = 8;
  cfg.base_mlp_dim = 64;
  cfg.base_num_decoder_layers = 2;
  cfg.vocab_size = 100;
  cfg.mlp_activations = {"gelu"};
  cfg.trainable_position_size = 64;
  cfg.logits_via_embedding = true;
  Model model(cfg);
  model.init(/*seed=*/1);
  maxtext::models::GenerateOptions opt;
  opt.max_new_tokens = 8;
  const auto r = maxtext::models::generate(model, {{1, 2, 3}}, opt);
  std::printf("consumer: generated");
  for (int t : r.tokens[0]) std::printf(" %d", t);
  std::printf(" (%lld parameters)\n", static_cast<long long>(model.num_params()));
  return r.tokens[0].size() == 8 ? 0 : 1;
}
