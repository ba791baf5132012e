// The gemma4 decoder block (families/gemma4/gemma4.hpp) against the PyTorch float64 fixtures of
// tests/reference/gemma4_reference.py: a 14-layer dense model (two scanned blocks and two leftover layers) and a 6-layer Gemma4MoE model (five sliding-window
// layers, then a global layer with its own kv heads and head dim, K = V and Gemma 4's partial RoPE), from unscanned
// and Gemma4ScannableBlock-scanned MaxText trees (logits, every layer's output, prefill + incremental decode, ragged
// rows); the same weights in Hugging Face's Gemma 4 layout; sliding-window and global layers in bf16; the 26B and 31B configs and their parameter counts; the registry and the CLI; and the
// errors for inputs the block cannot take.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/gemma4/gemma4.hpp"
#include "maxtext/families/gemma4/import.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
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
#include "support/media_checks.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;
using Gemma4 = models::Transformer<P32, layers::Gemma4DecoderLayer>;
using Gemma4Bf = models::Transformer<PBf, layers::Gemma4DecoderLayer>;

namespace {

// Cached decoding against the full forward pass: the same f32 math summed in another order (decode rows through the
// one-row kernels, the full pass through GEMM panels). Through 14 layers and the final soft cap, 1e-5 absolute
// (tol::decode_step) was exceeded once: 1.11e-5 on one of 64 logits (-0.0717) of ragged row 1, step 3, on the 2-core
// AVX2 machine with g++ 12 -O3 (the logits are of magnitude ~3 there, so that is 4e-6 of their scale). 2e-5.
constexpr testing::Tolerance kDecodeStep{1e-5, 2e-5};

template <class Model>
void check_model(const std::string& name, const std::string& file, const std::vector<std::string>& overrides = {}) {
  const std::string dir = test::fixture(name);
  Config c = test::config_from_meta(test::read_meta(dir));
  for (const auto& o : overrides) io::apply_override(c, o);
  Model m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  test::check_model_fixture(m, dir, name, [](std::int64_t) { return test::tol::f32_logits; }, /*cached=*/false);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  test::check_cached_decoding(m, tok, m.forward(tok), kDecodeStep, name);
}

}  // namespace

TEST_CASE("Gemma 4 dense model (14 layers, 5 local : 1 global, K=V, partial RoPE) matches the torch model, unscanned "
          "and scanned, incremental and ragged decoding", "[models][gemma4]") {
  check_model<Gemma4>("gemma4_model", "model.safetensors");
  check_model<Gemma4>("gemma4_model", "model_scanned.safetensors", {"scan_layers=true"});
}

TEST_CASE("Gemma 4 takes media embeddings as MaxText merges them: each picture's tokens see the picture whole",
          "[models][gemma4][multimodal]") {
  const std::string dir = test::fixture("gemma4_model");
  const Config c = test::config_from_meta(test::read_meta(dir));
  Gemma4 m(c);
  m.load(io::load_weights(dir + "/model.safetensors", c).tensors);
  test::check_media_merge(m, test::int_tensor(test::npy(dir + "/tokens.npy")), true, "gemma4");
}

TEST_CASE("Gemma 4 MoE model (Gemma4MoE: shared expert, softmax routing, per-expert scale) matches the torch model, "
          "unscanned and scanned, incremental and ragged decoding", "[models][gemma4]") {
  check_model<Gemma4>("gemma4_moe_model", "model.safetensors");
  check_model<Gemma4>("gemma4_moe_model", "model_scanned.safetensors", {"scan_layers=true"});
}

namespace {

// bf16 layer: every op rounded to 2^-8 relative. Norm -> attention (q/k/v norms, RoPE) -> post norm -> residual ->
// norm -> GeGLU or Gemma4MoE (three norms, the scaled router input, softmax weights) -> post norm -> residual ->
// layer scalar: about 15 roundings on values of magnitude ~3, and the post norms rescale the sublayer outputs (and
// their rounding) to unit RMS, as in Gemma 3's bf16 bound. Routing: the fixture keeps every top-k decision >= 0.0077
// from a tie in f32; bf16 gate logits can flip a near-tie, which moves a token's output by at most the difference
// of two near-equally weighted experts.
constexpr testing::Tolerance kBf16Layer{4.0 / 128.0, 0.1};

/// Layer `i` of a model fixture on the bf16 policy, from the float64 output of layer i - 1 (model.safetensors'
/// `decoder.layers_i.*`), against the float64 output of layer i.
void check_bf16_layer(const std::string& name, std::int64_t i) {
  const std::string dir = test::fixture(name);
  const Config c = test::config_from_meta(test::read_meta(dir));
  test::Backend be;
  const std::string prefix = "decoder.layers_" + std::to_string(i);
  layers::Gemma4DecoderLayer<PBf> layer(c, {i, prefix, prefix + ".self_attention", prefix + ".mlp"});
  const auto params = models::load_layer_params<PBf>(layer, io::read_safetensors(dir + "/model.safetensors"), be, prefix);
  const AnyTensor x = test::npy(dir + "/act_decoder.layers_" + std::to_string(i - 1) + ".npy");
  Tensor<std::int32_t, 2> pos({x.shape[0], x.shape[1]});
  for (std::int64_t b = 0; b < x.shape[0]; ++b) {
    for (std::int64_t t = 0; t < x.shape[1]; ++t) pos(b, t) = static_cast<std::int32_t>(t);
  }
  const auto y = models::run_layer<PBf>(layer, params, be, x, nullptr, &pos);
  test::expect_close(y, test::npy(dir + "/act_" + prefix + ".npy"), kBf16Layer, name + "." + prefix + ".bf16");
}

}  // namespace

TEST_CASE("Gemma 4 layers in bfloat16 (sliding-window and global, dense and MoE) stay within the bf16 layer bound",
          "[models][gemma4][bf16]") {
  for (const std::string name : {"gemma4_model", "gemma4_moe_model"}) {
    check_bf16_layer(name, 1);  // sliding window, full RoPE
    check_bf16_layer(name, 5);  // global: own kv heads / head dim, K = V, partial RoPE
  }
}

TEST_CASE("gemma4: the 26B and 31B configs build the parameter trees MaxText does, the global layers' attention takes "
          "its own heads and RoPE, and bad input is refused by name", "[models][registry][gemma4][errors]") {
  // 31B: local layers q [D,N,H], k, v [D,K,H], o [N,H,D], q/k norms [H]; global layers q [D,N,GH], k [D,GK,GH] (no v:
  // K = V), o [N,GH,D], q/k norms [GH]; v norms without scale; 4 norms [D], GeGLU 3 x D x F and the layer scalar per
  // layer; tied embedding [V, D] and the final norm.
  const std::int64_t D = 5376, N = 32, K = 16, H = 256, GK = 4, GH = 512, F = 21504, V = 262144, L = 60;
  const std::int64_t local = 2 * D * N * H + 2 * D * K * H + 2 * H, global = 2 * D * N * GH + D * GK * GH + 2 * GH;
  const std::int64_t common = 4 * D + 3 * D * F + 1;
  const Config c31 = io::load_config("", {"model_name=gemma4-31b"});
  CHECK(c31.is("gemma4"));
  CHECK(Gemma4(c31).num_params() == V * D + D + (L / 6) * (5 * local + global) + L * common);
  // The text decoder counts 30.697B; the published size of gemma-4-31B is 30.7B.
  CHECK(std::fabs(static_cast<double>(Gemma4(c31).num_params()) / 30.7e9 - 1.0) < 0.005);
  // 26B: the MoE FFN: shared GeGLU 3 x D x mlp_dim, gate [D, E], experts 3 x E x D x Fm, per_expert_scale [E],
  // pre_forward_scale_2 [D] and three norms [D], instead of the dense MLP.
  const Config c26 = io::load_config("", {"model_name=gemma4-26b"});
  {
    const std::int64_t d = 2816, n = 16, k = 8, h = 256, gk = 2, gh = 512, f = 2112, fm = 704, e = 128, l = 30;
    const std::int64_t loc = 2 * d * n * h + 2 * d * k * h + 2 * h, glo = 2 * d * n * gh + d * gk * gh + 2 * gh;
    const std::int64_t ffn = 3 * d * f + d * e + 3 * e * d * fm + e + d + 3 * d;
    CHECK(Gemma4(c26).num_params() == V * d + d + (l / 6) * (5 * loc + glo) + l * (4 * d + ffn + 1));
    // The text decoder counts 25.233B; the published size of gemma-4-26B-A4B is 25.2B.
    CHECK(std::fabs(static_cast<double>(Gemma4(c26).num_params()) / 25.2e9 - 1.0) < 0.005);
  }
  // The global layer of each group of six: its own kv heads / head dim, K = V, Gemma 4's partial RoPE over the whole
  // head (a quarter of the pairs rotate, timescales from the full head dim); local layers rotate the whole head.
  {
    const auto g = layers::Gemma4DecoderLayer<P32>::attention_args(c31, 5);
    CHECK(g.attention_type == layers::AttentionType::global);
    CHECK((g.num_kv_heads == GK && g.head_dim == GH && g.share_kv_projections && g.use_v_norm));
    const auto l = layers::Gemma4DecoderLayer<P32>::attention_args(c31, 6);
    CHECK(l.attention_type == layers::AttentionType::local_sliding);
    CHECK((l.num_kv_heads == K && l.head_dim == H && !l.share_kv_projections));
    layers::RopeArgs ra;
    ra.dims = GH;
    ra.partial_rotary_factor = g.partial_rotary_factor;
    ra.rope_max_timescale = g.rope_max_timescale;
    const layers::RopeSpec s = layers::select_rope(c31, ra);
    CHECK((s.kind == layers::RopeKind::default_rope && s.rotated_pairs == 64 && s.rot_dims == 0 && s.max_timescale == 1e6));
    const RotaryTable t = layers::build_rotary_table(s, 3);
    CHECK(t.rot_dims == GH);
    CHECK(t.sin(2, 63) != 0.0f);
    CHECK((t.sin(2, 64) == 0.0f && t.cos(2, 64) == 1.0f && t.cos(2, 255) == 1.0f));
    // pair 1 rotates with timescale 1e6^(2/512), as MaxText's formula over the whole head dim
    CHECK(t.sin(1, 1) == std::sin(1.0f / (1.0f * std::pow(1e6f, 2.0f / 512.0f))));
  }
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
  Config f32 = c31;
  f32.dtype = "float32";
  const bool same = models::with_model_type<test::Backend>(f32, []<class M>() { return std::is_same_v<M, Gemma4>; });
  CHECK(same);
#endif
  const Config good = test::config_from_meta(test::read_meta(test::fixture("gemma4_moe_model")));
  Config bad = good;
  bad.sliding_window_size = 0;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("gemma4 needs sliding_window_size > 0"));
  bad = good;
  bad.global_num_kv_heads = 3;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("multiple of global_num_kv_heads (3)"));
  bad = good;
  bad.global_rope_proportion = 1.5;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("global_rope_proportion must be in (0, 1]"));
  bad = good;
  bad.float32_gate_logits = true;
  CHECK_THROWS_WITH(Gemma4(bad), Catch::Contains("gemma4 with float32_gate_logits=true"));
  bad = good;
  bad.routed_score_func = "sigmoid";
  CHECK_THROWS_WITH(Gemma4(bad), Catch::Contains("routed_score_func 'sigmoid' is not supported"));
  bad = good;
  bad.shared_experts = 0;
  CHECK_THROWS_WITH(Gemma4(bad), Catch::Contains("shared_experts * mlp_dim"));
  // A checkpoint without a MoE layer's per-expert scale, or with the scanned blocks of another layer count.
  const std::string dir = test::fixture("gemma4_moe_model");
  io::TensorMap t = io::read_safetensors(dir + "/model.safetensors");
  t.tensors.erase("decoder.layers_3.mlp.moe_block.MoeBlock_0.per_expert_scale");
  Gemma4 m(good);
  CHECK_THROWS_WITH(m.load(t), Catch::Contains("decoder.layers_3.mlp.moe_block.MoeBlock_0.per_expert_scale"));
  Config scanned = good;
  scanned.scan_layers = true;
  scanned.num_decoder_layers = scanned.base_num_decoder_layers = 12;
  CHECK_THROWS_WITH(io::load_weights(dir + "/model_scanned.safetensors", scanned),
                    Catch::Contains("expected 2 blocks (num_decoder_layers // 6) on axis 1"));
  // The dense fixture's scanned tree has two leftover layers (decoder.layers_remainder.layers_{0,1}); 13 layers leave one.
  Config dense = test::config_from_meta(test::read_meta(test::fixture("gemma4_model")));
  dense.scan_layers = true;
  dense.num_decoder_layers = dense.base_num_decoder_layers = 13;
  CHECK_THROWS_WITH(io::load_weights(test::fixture("gemma4_model") + "/model_scanned.safetensors", dense),
                    Catch::Contains("remainder layer 1 outside [0, 1)"));
}

TEST_CASE("Gemma 4 from Hugging Face: the MaxText fixtures in Gemma4ForConditionalGeneration's layout (as MaxText's "
          "converter maps it) give the MaxText logits", "[models][gemma4][hf]") {
  for (const std::string name : {"gemma4_model", "gemma4_moe_model"}) {
    const Config fixture = test::config_from_meta(test::read_meta(test::fixture(name)));
    const Config c = *io::read_weights_config(test::fixture(name) + "/hf");
    CHECK(c.is("gemma4"));
    CHECK((c.global_head_dim == fixture.global_head_dim && c.global_num_kv_heads == fixture.global_num_kv_heads));
    CHECK((c.share_kv_projections && !c.v_norm_with_scale && c.sliding_window_size == fixture.sliding_window_size));
    CHECK((c.global_rope_proportion == 0.25 && c.global_rope_max_timescale == 1e6 && c.local_rope_max_timescale == 1e4));
    CHECK(c.num_experts == fixture.num_experts);
    CHECK(c.moe_mlp_dim == fixture.moe_mlp_dim);
    check_model<Gemma4>(name, "hf");
  }
}

TEST_CASE("Gemma 4 from Hugging Face: what MaxText's gemma4 cannot express, and malformed files, are refused by name",
          "[models][gemma4][hf][errors]") {
  const std::string dir = test::fixture("gemma4_moe_model") + "/hf";
  const nlohmann::json good = nlohmann::json::parse(io::read_text_file(dir + "/config.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    nlohmann::json j = good;
    edit(j["text_config"]);
    CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains(what));
  };
  // Any of the small models' keys makes a gemma4_small config (test_gemma4_small.cpp), which has no K = V layers and
  // no MoE: this MoE fixture's config with one of them is refused by name.
  refused([](auto& t) { t["hidden_size_per_layer_input"] = 256; }, "lacks vocab_size_per_layer_input");
  refused([](auto& t) { t["hidden_size_per_layer_input"] = 256; t["vocab_size_per_layer_input"] = 64; },
          "attention_k_eq_v = true in a Gemma 4 small model");
  refused([](auto& t) { t["num_kv_shared_layers"] = 20; }, "attention_k_eq_v = true in a Gemma 4 small model");
  refused([](auto& t) { t["use_double_wide_mlp"] = true; }, "attention_k_eq_v = true in a Gemma 4 small model");
  refused([](auto& t) { t["use_double_wide_mlp"] = true; t["attention_k_eq_v"] = false; },
          "enable_moe_block = true in a Gemma 4 small model");
  refused([](auto& t) { t["layer_types"][0] = "full_attention"; }, "layer_types[0] is \"full_attention\"");
  refused([](auto& t) { t["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; },
          "rope_parameters.full_attention.rope_type 'yarn'");
  refused([](auto& t) { t["rope_parameters"].erase("sliding_attention"); }, "rope_parameters.sliding_attention is missing");
  refused([](auto& t) { t["tie_word_embeddings"] = false; }, "tie_word_embeddings = false");
  refused([](auto& t) { t["hidden_activation"] = "silu"; }, "hidden_activation 'silu'");
  nlohmann::json no_text = good;
  no_text.erase("text_config");
  CHECK_THROWS_WITH(io::config_from_hf(no_text, "config.json"), Catch::Contains("model_type gemma4 needs a text_config"));

  const Config c = *io::read_weights_config(dir);
  const io::TensorMap raw = io::read_safetensors_any(dir + "/model.safetensors");
  const std::string x = "model.language_model.layers.3.";
  io::TensorMap t = raw;
  t.tensors.erase(x + "router.per_expert_scale");
  t.tensors.erase("model.language_model.layers.5.self_attn.k_proj.weight");
  CHECK_THROWS_WITH(io::import_hf_gemma4(t, c), Catch::Contains("missing tensor " + x + "router.per_expert_scale") &&
                                                  Catch::Contains("missing tensor model.language_model.layers.5.self_attn.k_proj.weight"));
  t = raw;
  t.tensors.at(x + "experts.gate_up_proj") = t.tensors.at(x + "experts.down_proj");
  CHECK_THROWS_WITH(io::import_hf_gemma4(t, c), Catch::Contains(x + "experts.gate_up_proj: expected shape"));
  t = raw;  // a global layer with K = V has no v_proj
  t.tensors.emplace("model.language_model.layers.5.self_attn.v_proj.weight", t.tensors.at(x + "self_attn.v_proj.weight"));
  CHECK_THROWS_WITH(io::import_hf_gemma4(t, c),
                    Catch::Contains("unexpected tensor model.language_model.layers.5.self_attn.v_proj.weight"));
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits / generate: gemma4 from MaxText checkpoints and from the model configs with seeded init",
          "[models][gemma4][cli]") {
  test::check_cli_checkpoints(test::fixture("gemma4_model"), test::tol::f32_logits);  // model, model_scanned and hf/
  test::check_cli_checkpoints(test::fixture("gemma4_moe_model"), test::tol::f32_logits);
  const std::string tiny = " base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 global_head_dim=32 "
                           "global_num_kv_heads=1 base_mlp_dim=64 base_num_decoder_layers=6 vocab_size=96 "
                           "max_target_length=32 sliding_window_size=4 dtype=float32";
  test::check_cli_generates_seeded("gemma4-31b.yml" + tiny);
  test::check_cli_generates_seeded("gemma4-26b.yml" + tiny + " base_moe_mlp_dim=32 num_experts=4 num_experts_per_tok=2");
}
#endif
