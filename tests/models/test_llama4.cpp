// The llama4 decoder block (families/llama4/llama4.hpp) against the PyTorch float64 fixtures of
// tests/reference/llama4_reference.py: a dense layer with chunked attention, Llama-3.1 RoPE and the L2 qk norm, and a
// MoE layer with NoPE attention whose temperature-tuning factor changes inside the rows (positions around 8192), in
// f32 and bf16; an 8-layer model cycling dense / MoE and RoPE / NoPE (logits, activations, prefill + incremental
// decode, ragged rows) from unscanned and scanned (Llama4ScannableBlock) MaxText trees; the model configs and their
// parameter counts; the registry and the CLI; and the errors for what MaxText's llama4 cannot express.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "maxtext/families/llama4/import.hpp"
#include "maxtext/families/llama4/llama4.hpp"
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
using Llama4 = models::Transformer<P32, layers::Llama4DecoderLayer>;

namespace {

// bf16 layer: every op rounded to bf16 (2^-8 relative); norm -> attention (RoPE, L2 norm or temperature factor) ->
// residual -> norm -> MLP, or MoE (the sigmoid factor and the scaled input rounded too) plus the shared MLP ->
// residual: ~10 roundings on values of magnitude ~2, as the qwen3_moe bound. Routing: the layer fixture keeps the
// top-1 decision >= 0.03 from a tie (meta min_routing_margin), above the bf16 error of a gate logit (~0.01).
constexpr testing::Tolerance kBf16Layer{4.0 / 128.0, 0.06};

template <class P>
void check_layer(const std::string& name, testing::Tolerance tol) {
  const std::string dir = test::fixture(name);
  const auto meta = test::read_meta(dir);
  const Config c = test::config_from_meta(meta);
  const std::int64_t index = meta.at("layer_index").get<std::int64_t>();
  test::Backend be;
  layers::Llama4DecoderLayer<P> layer(c, {index, "layer", "layer.self_attention", "layer.mlp"});
  const bool nope = layers::llama4_is_nope_layer(index, c.nope_layer_interval);
  CHECK(layer.attention().args().is_nope_layer == nope);
  CHECK(layer.attention().args().attention_type == (nope ? layers::AttentionType::global : layers::AttentionType::chunk));
  CHECK(layer.is_moe_layer() == layers::llama4_is_moe_layer(index, c.interleave_moe_layer_step));
  const std::string mlp = layer.info().mlp;
  CHECK(mlp == (layer.is_moe_layer() ? "layer.Llama4MoEBlock_0" : "layer.mlp"));
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  const Tensor<std::int32_t, 2> pos = test::int_tensor(test::npy(dir + "/positions.npy"));
  layers::Capture cap({"layer.self_attention", mlp});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "/x.npy"), nullptr, &pos, &cap);
  test::expect_close(y, test::npy(dir + "/out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.self_attention"), test::npy(dir + "/attn.npy"), tol, name + ".self_attention");
  test::expect_close(cap.at(mlp), test::npy(dir + "/mlp.npy"), tol, name + ".mlp");
}

template <class Model>
void check_model(const std::string& name, const std::string& file, const std::vector<std::string>& overrides = {}) {
  const std::string dir = test::fixture(name);
  Config c = test::config_from_meta(test::read_meta(dir));
  for (const auto& o : overrides) io::apply_override(c, o);
  Model m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, name + ".logits");
  for (std::int64_t i = 0; i < c.num_decoder_layers; ++i) {
    const std::string a = "decoder.layers_" + std::to_string(i);
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), test::tol::f32_logits, name + "." + a);
  }
  test::expect_close(cap.at("decoder.decoder_norm"), test::npy(dir + "/act_decoder.decoder_norm.npy"),
                     test::tol::f32_logits, name + ".decoder_norm");
  test::check_cached_decoding(m, tok, full, test::tol::decode_step, name);
}

}  // namespace

TEST_CASE("Llama4DecoderLayer: a dense layer (chunked attention, Llama-3.1 RoPE, L2 qk norm) and a MoE layer (NoPE, "
          "temperature tuning, top-1 sigmoid-scaled expert input + shared expert) match the torch fixtures",
          "[layers][llama4]") {
  check_layer<P32>("llama4_layer_dense_rope", test::tol::f32_layer);
  check_layer<P32>("llama4_layer_moe_nope", test::tol::f32_layer);
  check_layer<PBf>("llama4_layer_dense_rope", kBf16Layer);
  check_layer<PBf>("llama4_layer_moe_nope", kBf16Layer);
}

TEST_CASE("Llama 4 model (8 layers: dense/MoE x RoPE/NoPE) matches the torch model, unscanned and scanned, incremental "
          "and ragged decoding", "[models][llama4]") {
  check_model<Llama4>("llama4_model", "model.safetensors");
  check_model<Llama4>("llama4_model", "model_scanned.safetensors", {"scan_layers=true"});
}

TEST_CASE("Llama 4 takes media embeddings as MaxText merges them: the merged tokens attend as text",
          "[models][llama4][multimodal]") {
  const std::string dir = test::fixture("llama4_model");
  const Config c = test::config_from_meta(test::read_meta(dir));
  Llama4 m(c);
  m.load(io::load_weights(dir + "/model.safetensors", c).tensors);
  test::check_media_merge(m, test::int_tensor(test::npy(dir + "/tokens.npy")), false, "llama4");
}

TEST_CASE("llama4: the Scout and Maverick configs load with the parameter trees MaxText builds, and what llama4 cannot "
          "express is refused by name", "[models][registry][llama4][errors]") {
  // llama4.py: q/o [D, N*H], k/v [D, K*H], pre/post norms; MoE layers: gate [D, E], experts 3 x [E, D, Fm], shared
  // expert 3 x [D, Fm]; dense layers: 3 x [D, F]. Embedding and output head untied.
  const std::int64_t D = 5120, N = 40, K = 8, H = 128, V = 202048, L = 48, Fm = 8192;
  const std::int64_t attn = 2 * D * N * H + 2 * D * K * H + 2 * D;
  const std::int64_t moe = D * 16 + 3 * 16 * D * Fm + 3 * D * Fm;
  const Config scout = io::load_config("", {"model_name=llama4-17b-16e"});
  CHECK(scout.is("llama4"));
  CHECK(Llama4(scout).num_params() == 2 * V * D + L * (attn + moe) + D);
  // Published: 109B in total for Llama-4-Scout-17B-16E with its vision encoder; the text part is 107.8B.
  CHECK(std::fabs(static_cast<double>(Llama4(scout).num_params()) / 107.8e9 - 1.0) < 0.005);
  const Config maverick = io::load_config("", {"model_name=llama4-17b-128e"});
  const std::int64_t moe128 = D * 128 + 3 * 128 * D * Fm + 3 * D * Fm, dense = 3 * D * 16384;
  CHECK(Llama4(maverick).num_params() == 2 * V * D + (L / 2) * (2 * attn + moe128 + dense) + D);
  CHECK(std::fabs(static_cast<double>(Llama4(maverick).num_params()) / 400e9 - 1.0) < 0.01);  // 400B published
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
  Config c32 = scout;
  c32.dtype = "float32";
  const bool same = models::with_model_type<test::Backend>(c32, []<class M>() { return std::is_same_v<M, Llama4>; });
  CHECK(same);
#endif
  const Config good = test::config_from_meta(test::read_meta(test::fixture("llama4_model")));
  Config bad = good;
  bad.num_experts_per_tok = 2;
  CHECK_THROWS_WITH(Llama4(bad), Catch::Contains("defined for num_experts_per_tok = 1, found 2"));
  bad = good;
  bad.chunk_attn_window_size = 0;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("llama4 needs chunk_attn_window_size > 0"));
  bad = good;
  bad.scan_layers = true;
  bad.inhomogeneous_layer_cycle_interval = 2;  // not a multiple of nope_layer_interval 4
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("must divide num_decoder_layers (8) and be a multiple of "
                                                    "nope_layer_interval (4)"));
  // Another architecture's GGUF under a llama4 config: refused by name, not read with llama4's tensor names.
  CHECK_THROWS_WITH(io::load_weights(test::fixture("gemma_model") + "/model.gguf", good),
                    Catch::Contains("decoder_block llama4 reads GGUF architecture llama4, found 'gemma'"));
  // Another family's Hugging Face file under a llama4 config: every tensor Llama 4 needs is named as missing.
  CHECK_THROWS_WITH(io::load_weights(test::fixture("qwen3_moe_model") + "/hf", good),
                    Catch::Contains("missing tensor model.layers.1.feed_forward.experts.gate_up_proj"));
  // A dense layer's checkpoint where the cycle says MoE: the missing router is named.
  io::TensorMap t = io::read_safetensors(test::fixture("llama4_model") + "/model.safetensors");
  t.tensors.erase("decoder.layers_5.Llama4MoEBlock_0.MoeBlock_0.gate.kernel");
  Llama4 m(good);
  CHECK_THROWS_WITH(m.load(t), Catch::Contains("decoder.layers_5.Llama4MoEBlock_0.MoeBlock_0.gate.kernel"));
}

TEST_CASE("Llama 4 from Hugging Face: Llama4ForCausalLM with MaxText's LLaMA-3 scaling gives the MaxText logits, a "
          "Llama4ForConditionalGeneration file with Scout-style rope_scaling matches transformers' model",
          "[models][llama4][hf]") {
  // llama4_model/hf: the MaxText fixture's weights under HF names (tests/reference/llama4_reference.py checks that
  // its transformers re-statement gives the MaxText logits on them, to 3e-10).
  const Config fixture = test::config_from_meta(test::read_meta(test::fixture("llama4_model")));
  const Config c = *io::read_weights_config(test::fixture("llama4_model") + "/hf");
  CHECK(c.is("llama4"));
  CHECK(c.nope_layer_interval == fixture.nope_layer_interval);
  CHECK(c.interleave_moe_layer_step == fixture.interleave_moe_layer_step);
  CHECK(c.chunk_attn_window_size == fixture.chunk_attn_window_size);
  CHECK(c.moe_mlp_dim == fixture.moe_mlp_dim);
  CHECK(c.mlp_dim == fixture.mlp_dim);
  CHECK((c.use_qk_norm && c.temperature_tuning && c.rope_use_scale && c.rope_type == "llama3.1"));
  check_model<Llama4>("llama4_model", "hf");
  {
    // Under transformers' names (what `maxtext logits` / `compare` use for an HF checkpoint), the FFN of a dense and of
    // a MoE layer is `feed_forward`, as in Llama4TextDecoderLayer; the layer outputs are the MaxText fixture's.
    const std::string dir = test::fixture("llama4_model");
    Llama4 m(c, Llama4::B(), models::NameScheme::hf);
    m.load(io::load_weights(dir + "/hf", c).tensors);
    layers::Capture cap;
    cap.request_all();
    models::ForwardOptions opt;
    opt.capture = &cap;
    m.forward(test::int_tensor(test::npy(dir + "/tokens.npy")), opt);
    for (std::int64_t i = 0; i < c.num_decoder_layers; ++i) {
      const std::string h = "model.layers." + std::to_string(i);
      CHECK(cap.has(h + ".self_attn"));
      CHECK(cap.has(h + ".feed_forward"));
      CHECK_FALSE(cap.has(h + ".Llama4MoEBlock_0"));
      CHECK_FALSE(cap.has(h + ".mlp"));
      test::expect_close(cap.at(h), test::npy(dir + "/act_decoder.layers_" + std::to_string(i) + ".npy"),
                         test::tol::f32_logits, h);
    }
  }
  // llama4_hf_rope: language_model.* names beside stand-in vision tensors (ignored), rope_scaling factor 16, low =
  // high = 1, original context 64. MaxText's fixed scaling would move these logits by 0.10 (meta.json).
  const std::string dir = test::fixture("llama4_hf_rope");
  CHECK(test::read_meta(dir).at("logits_max_change_under_maxtext_rope_scaling").get<double>() > 0.05);
  const Config r = *io::read_weights_config(dir + "/hf");
  CHECK(r.llama3_rope_factor == 16.0);
  CHECK(r.llama3_rope_low_freq_factor == 1.0);
  CHECK(r.llama3_rope_high_freq_factor == 1.0);
  CHECK(r.llama3_rope_original_context == 64.0);
  Llama4 m(r);
  m.load(io::load_weights(dir + "/hf", r).tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto full = m.forward(tok);
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, "llama4_hf_rope.logits");
  test::check_cached_decoding(m, tok, full, test::tol::decode_step, "llama4_hf_rope");
}

TEST_CASE("Llama 4 from Hugging Face: what MaxText's llama4 cannot express, and malformed files, are refused by name",
          "[models][llama4][hf][errors]") {
  const nlohmann::json good = nlohmann::json::parse(io::read_text_file(test::fixture("llama4_hf_rope") + "/hf/config.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    nlohmann::json j = good;
    edit(j["text_config"]);
    CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains(what));
  };
  refused([](auto& t) { t["num_experts_per_tok"] = 2; }, "num_experts_per_tok 2: MaxText's Llama 4 routing");
  refused([](auto& t) { t["no_rope_layers"][1] = 0; }, "no_rope_layers: layer 5 uses RoPE");
  refused([](auto& t) { t["moe_layers"] = {1, 2}; }, "moe_layers [1,2]");
  refused([](auto& t) { t["layer_types"][0] = "full_attention"; }, "layer_types[0] is \"full_attention\"");
  refused([](auto& t) { t["attn_scale"] = 0.2; }, "fixed at 0.1 / 8192");
  refused([](auto& t) { t["attention_bias"] = true; }, "attention_bias = true");
  refused([](auto& t) { t["rope_scaling"]["rope_type"] = "yarn"; }, "rope_scaling type 'yarn'");
  refused([](auto& t) { t["rope_scaling"].erase("high_freq_factor"); }, "rope_scaling.high_freq_factor is missing");
  refused([](auto& t) { t["rope_scaling"]["high_freq_factor"] = 0.5; }, "high_freq_factor >= low_freq_factor");
  refused([](auto& t) { t["no_rope_layers"] = {1, 1}; }, "no_rope_layers: expected a list of 8 entries");
  refused([](auto& t) { t["num_hidden_layers"] = std::int64_t{1} << 40; }, "num_hidden_layers in [1, 4096]");
  nlohmann::json no_text = good;
  no_text.erase("text_config");
  CHECK_THROWS_WITH(io::config_from_hf(no_text, "config.json"), Catch::Contains("model_type llama4 needs a text_config"));
  // Without rope_scaling: MaxText's Maverick setting (rope_use_scale false).
  nlohmann::json plain = good;
  plain["text_config"]["rope_scaling"] = nullptr;
  CHECK_FALSE(io::config_from_hf(plain, "config.json").rope_use_scale);

  const std::string dir = test::fixture("llama4_hf_rope") + "/hf";
  const Config c = *io::read_weights_config(dir);
  const io::TensorMap raw = io::read_safetensors_any(dir + "/model.safetensors");
  const std::string x = "language_model.model.layers.1.feed_forward.";
  io::TensorMap t = raw;
  t.tensors.erase(x + "experts.gate_up_proj");
  t.tensors.erase("language_model.model.layers.0.self_attn.q_proj.weight");
  CHECK_THROWS_WITH(io::import_hf_llama4(t, c), Catch::Contains("missing tensor " + x + "experts.gate_up_proj") &&
                                                  Catch::Contains("missing tensor language_model.model.layers.0.self_attn.q_proj.weight"));
  t = raw;
  t.tensors.at(x + "experts.gate_up_proj") = t.tensors.at(x + "experts.down_proj");
  CHECK_THROWS_WITH(io::import_hf_llama4(t, c), Catch::Contains(x + "experts.gate_up_proj: expected shape"));
  t = raw;
  t.tensors.emplace("language_model.model.layers.0.feed_forward.router.weight", t.tensors.at(x + "router.weight"));
  CHECK_THROWS_WITH(io::import_hf_llama4(t, c),
                    Catch::Contains("unexpected tensor language_model.model.layers.0.feed_forward.router.weight"));
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits / generate: llama4 from MaxText and Hugging Face checkpoints and from the model configs "
          "with seeded init", "[models][llama4][cli]") {
  test::check_cli_checkpoints(test::fixture("llama4_model"), test::tol::f32_logits);  // model, model_scanned and hf/
  test::check_cli_logits(test::fixture("llama4_hf_rope"), "--weights " + test::fixture("llama4_hf_rope") + "/hf", test::tol::f32_logits);
  const std::string tiny = " base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 base_mlp_dim=64 "
                           "base_moe_mlp_dim=32 num_experts=4 base_num_decoder_layers=4 vocab_size=96 "
                           "max_target_length=32 chunk_attn_window_size=4 dtype=float32";
  for (const std::string c : {"llama4-17b-16e.yml", "llama4-17b-128e.yml"}) test::check_cli_generates_seeded(c + tiny);
}
#endif
