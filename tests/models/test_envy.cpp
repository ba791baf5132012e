// The envy decoder block (families/envy/envy.hpp) against the PyTorch float64 fixture of tests/reference/envy_reference.py:
// a 4-layer model (dense / top-2 MoE cycle of 2, q/k norms, queries times head_dim^-0.5, post-FFW norms, tied head)
// from unscanned and EnvyScannableBlock-scanned MaxText trees (logits, every layer's output, prefill + incremental
// decode, ragged rows); dense and MoE layers in bf16; the Switch configs and their parameter counts; the registry and
// the CLI; and the errors for inputs the block cannot take.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/families/envy/envy.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/cli.hpp"
#include "support/decode_checks.hpp"
#include "support/family_fixture.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;
using Envy = models::Transformer<P32, layers::EnvyDecoderLayer>;

namespace {

void check_model(const std::string& file, const std::vector<std::string>& overrides = {}) {
  const std::string dir = test::fixture("envy_model");
  Config c = test::config_from_meta(test::read_meta(dir));
  for (const auto& o : overrides) io::apply_override(c, o);
  Envy m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  const auto cap = test::check_model_fixture(m, dir, "envy", [](std::int64_t) { return test::tol::f32_logits; });
  CHECK(cap.has("decoder.layers_1.MoeBlock_0"));  // the MoE layer's FFN output under MaxText's name
}

}  // namespace

TEST_CASE("Envy model (dense / top-2 MoE cycle, qk norms, post-FFW norms) matches the torch model, unscanned and "
          "scanned, incremental and ragged decoding", "[models][envy]") {
  check_model("model.safetensors");
  check_model("model_scanned.safetensors", {"scan_layers=true"});
}

// bf16 layer: every op rounds to 2^-8 relative: norm -> attention (q/k norms, RoPE, scalar) -> residual -> norm ->
// SwiGLU or the routed experts (softmax weights) -> post norm -> residual, about 12 roundings of O(1) values; the
// routing margins are >= 0.004 in f32, so bf16 gate logits may flip a near-tie, which moves a token's output by at
// most the difference of two near-equally weighted experts. As for the other MoE families' bf16 layers.
constexpr testing::Tolerance kBf16Layer{4.0 / 128.0, 0.1};

TEST_CASE("Envy layers in bfloat16 (dense and MoE) stay within the bf16 layer bound", "[models][envy][bf16]") {
  const std::string dir = test::fixture("envy_model");
  const Config c = test::config_from_meta(test::read_meta(dir));
  test::Backend be;
  const io::TensorMap tensors = io::read_safetensors(dir + "/model.safetensors");
  for (std::int64_t i : {2, 3}) {  // dense, MoE
    const std::string prefix = "decoder.layers_" + std::to_string(i);
    layers::EnvyDecoderLayer<PBf> layer(c, {i, prefix, prefix + ".self_attention", prefix + ".mlp"});
    CHECK(layer.is_moe_layer() == (i == 3));
    const auto params = models::load_layer_params<PBf>(layer, tensors, be, prefix);
    const AnyTensor x = test::npy(dir + "/act_decoder.layers_" + std::to_string(i - 1) + ".npy");
    const auto y = models::run_layer<PBf>(layer, params, be, x);
    test::expect_close(y, test::npy(dir + "/act_" + prefix + ".npy"), kBf16Layer, "envy." + prefix + ".bf16");
  }
}

TEST_CASE("envy: the Switch configs build the parameter trees MaxText does, and bad input is refused by name",
          "[models][registry][envy][errors]") {
  // Per layer: q, k, v [D, heads, H], o [N, H, D], q/k norms [H], 3 norms [D]; dense layers SwiGLU 3 x D x F, MoE
  // layers gate [D, E] and experts 3 x E x D x Fm; tied embedding [V, D] and the final norm.
  auto count = [](const Config& c) {
    const std::int64_t D = c.emb_dim, N = c.num_query_heads, K = c.num_kv_heads, H = c.head_dim, L = c.num_decoder_layers;
    const std::int64_t per = 2 * D * N * H + 2 * D * K * H + 2 * H + 3 * D;
    const std::int64_t dense = 3 * D * c.mlp_dim, moe = D * c.num_experts + 3 * c.num_experts * D * c.moe_mlp_dim;
    return c.vocab_size * D + D + L * per + (L / 2) * (dense + moe);
  };
  for (const char* name : {"envy-switch-base", "envy-switch-large", "envy-switch-xxl"}) {
    const Config c = io::load_config("", {std::string("model_name=") + name});
    CHECK(c.is("envy"));
    CHECK(Envy(c).num_params() == count(c));
  }
  const Config base = io::load_config("", {"model_name=envy-switch-base"});
  CHECK(base.head_dim == 128);  // base.yml's head_dim: the ymls leave it
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
  Config f32 = base;
  f32.dtype = "float32";
  const bool same = models::with_model_type<test::Backend>(f32, []<class M>() { return std::is_same_v<M, Envy>; });
  CHECK(same);
#endif
  const Config good = test::config_from_meta(test::read_meta(test::fixture("envy_model")));
  Config bad = good;
  bad.interleave_moe_layer_step = 0;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("envy needs interleave_moe_layer_step >= 1"));
  bad = good;
  bad.num_experts_per_tok = 5;
  CHECK_THROWS_WITH(Envy(bad), Catch::Contains("num_experts_per_tok must be in [1, num_experts=4]"));
  bad = good;
  bad.scan_layers = true;
  bad.inhomogeneous_layer_cycle_interval = 3;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("inhomogeneous_layer_cycle_interval (3) must divide num_decoder_layers"));
  // A checkpoint without a MoE layer's gate, or whose scanned tree stacks another number of cycles.
  const std::string dir = test::fixture("envy_model");
  io::TensorMap t = io::read_safetensors(dir + "/model.safetensors");
  t.tensors.erase("decoder.layers_3.MoeBlock_0.gate.kernel");
  Envy m(good);
  CHECK_THROWS_WITH(m.load(t), Catch::Contains("decoder.layers_3.MoeBlock_0.gate.kernel"));
  Config scanned = good;
  scanned.scan_layers = true;
  scanned.num_decoder_layers = scanned.base_num_decoder_layers = 6;
  CHECK_THROWS_WITH(io::load_weights(dir + "/model_scanned.safetensors", scanned), Catch::Contains("Envy"));
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits / generate: envy from MaxText checkpoints and from the model configs with seeded init",
          "[models][envy][cli]") {
  test::check_cli_checkpoints(test::fixture("envy_model"), test::tol::f32_logits, /*hf=*/false);  // model, scanned
  test::check_cli_generates_seeded("envy-switch-base.yml base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=4 "
                                   "base_mlp_dim=64 base_moe_mlp_dim=32 num_experts=4 base_num_decoder_layers=4 "
                                   "vocab_size=96 max_target_length=32 dtype=float32");
}
#endif
