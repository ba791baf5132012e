// The qwen2, qwen3_moe and qwen3_custom_moe decoder blocks (families/qwen/qwen2.hpp, families/qwen/qwen3.hpp Qwen3MoeDecoderLayer,
// families/qwen/qwen3_custom.hpp) against the
// PyTorch float64 fixtures of tests/reference/qwen_family_reference.py: the layers in f32 and bf16, 2-layer models
// (logits, activations, prefill + incremental decode, ragged rows), MaxText scanned trees, Hugging Face checkpoints
// (config.json + safetensors), GGUF files written here from the same numbers with llama.cpp's names and metadata
// keys, the registry and the model configs, and the errors for what MaxText cannot express.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/families/qwen/qwen2.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/families/qwen/qwen3_custom.hpp"
#include "maxtext/io/gguf.hpp"
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
using Qwen2 = models::Transformer<P32, layers::Qwen2DecoderLayer>;
using Qwen3Moe = models::Transformer<P32, layers::Qwen3MoeDecoderLayer>;
using Qwen3Custom = models::Transformer<P32, layers::Qwen3CustomMoeDecoderLayer>;

namespace {

// bf16 layers: every op output rounded to bf16 (2^-8 relative); norm -> attention (logits rounded) -> residual ->
// norm -> MLP / MoE -> residual accumulates ~8 roundings on values of magnitude ~2 (as test_llama_family.cpp). The
// MoE fixture keeps every routing decision >= 0.03 from a tie (meta.json min_routing_margin 0.16), far above the
// bf16 error of a gate logit (~0.01), so bf16 picks the same experts.
constexpr testing::Tolerance kBf16Layer{4.0 / 128.0, 0.06};

using test::cols;
using test::row_cols;

template <class P, template <class> class L>
void check_layer(const std::string& name, testing::Tolerance tol) {
  const std::string dir = test::fixture(name);
  const Config c = test::config_from_meta(test::read_meta(dir));
  test::Backend be;
  L<P> layer(c, {0, "layer", "layer.self_attention", "layer.mlp"});
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  const Tensor<std::int32_t, 2> pos = test::int_tensor(test::npy(dir + "/positions.npy"));
  layers::Capture cap({"layer.self_attention", "layer.mlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "/x.npy"), nullptr, &pos, &cap);
  test::expect_close(y, test::npy(dir + "/out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.self_attention"), test::npy(dir + "/attn.npy"), tol, name + ".self_attention");
  test::expect_close(cap.at("layer.mlp"), test::npy(dir + "/mlp.npy"), tol, name + ".mlp");
}

template <class Model>
Model load_model(const std::string& name, const std::string& file = "model.safetensors") {
  const std::string dir = test::fixture(name);
  const Config c = test::config_from_meta(test::read_meta(dir));
  Model m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  return m;
}

/// Logits and activations vs the fixture; prefill 4 tokens then one token per step vs the full forward; two rows at
/// different lengths decoded together vs single-row runs.
template <class Model>
void check_model(const std::string& name, const std::string& file = "model.safetensors") {
  const std::string dir = test::fixture(name);
  auto m = load_model<Model>(name, file);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, name + ".logits");
  for (const std::string a : {"token_embedder", "decoder.layers_0", "decoder.layers_1", "decoder.decoder_norm"}) {
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), test::tol::f32_logits, name + "." + a);
  }
  test::check_cached_decoding(m, tok, full, test::tol::decode_step, name);
}

std::string tmp_path(const std::string& name) {
  return (std::filesystem::current_path() / ("maxtext_test_qwen_" + std::to_string(::getpid()) + "_" + name)).string();
}

/// The fixture's Hugging Face checkpoint re-written as a GGUF file the way llama.cpp's converter names it (qwen2 /
/// qwen3moe: no rotary permutation, experts stacked [E, out, in]); returns the path. `gate_up_as`: the storage type
/// of the stacked gate / up expert tensors (e.g. Q8_0; their input dimension D = 32 is one block).
std::string write_gguf(const std::string& name, const std::string& arch, std::optional<DType> gate_up_as = std::nullopt) {
  const std::string hf = test::fixture(name) + "/hf";
  const io::TensorMap t = io::read_safetensors(hf + "/model.safetensors");
  nlohmann::json j = nlohmann::json::parse(io::read_text_file(hf + "/config.json"));
  io::GgufWriter w;
  auto u32 = [](std::int64_t v) { return io::GgufValue::of_u32(static_cast<std::uint32_t>(v)); };
  w.set("general.architecture", io::GgufValue::of_string(arch));
  const std::string p = arch + ".";
  const std::int64_t L = j["num_hidden_layers"], D = j["hidden_size"], N = j["num_attention_heads"];
  w.set(p + "block_count", u32(L));
  w.set(p + "context_length", u32(j["max_position_embeddings"].get<std::int64_t>()));
  w.set(p + "embedding_length", u32(D));
  w.set(p + "feed_forward_length", u32(j["intermediate_size"].get<std::int64_t>()));
  w.set(p + "attention.head_count", u32(N));
  w.set(p + "attention.head_count_kv", u32(j["num_key_value_heads"].get<std::int64_t>()));
  w.set(p + "rope.freq_base", io::GgufValue::of_f32(j["rope_theta"].get<float>()));
  w.set(p + "attention.layer_norm_rms_epsilon", io::GgufValue::of_f32(j["rms_norm_eps"].get<float>()));
  if (arch == "qwen3moe") {
    w.set(p + "attention.key_length", u32(j["head_dim"].get<std::int64_t>()));
    w.set(p + "attention.value_length", u32(j["head_dim"].get<std::int64_t>()));
    w.set(p + "expert_count", u32(j["num_experts"].get<std::int64_t>()));
    w.set(p + "expert_used_count", u32(j["num_experts_per_tok"].get<std::int64_t>()));
    w.set(p + "expert_feed_forward_length", u32(j["moe_intermediate_size"].get<std::int64_t>()));
  }
  w.add_tensor("token_embd.weight", t.at("model.embed_tokens.weight"));
  w.add_tensor("output_norm.weight", t.at("model.norm.weight"));
  w.add_tensor("output.weight", t.at("lm_head.weight"));
  const std::vector<std::pair<std::string, std::string>> names = {
      {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},   {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},   {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},       {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},       {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"}, {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},        {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"}};
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    for (const auto& [hn, gn] : names) {
      if (t.has(h + hn)) w.add_tensor(g + gn, t.at(h + hn));
    }
    if (arch != "qwen3moe") continue;
    const std::int64_t E = j["num_experts"];
    for (const auto& [hn, gn] : std::vector<std::pair<std::string, std::string>>{
             {"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}}) {
      const AnyTensor& e0 = t.at(h + "mlp.experts.0." + hn + ".weight");
      Tensor<float, 3> s({E, e0.shape[0], e0.shape[1]});
      for (std::int64_t e = 0; e < E; ++e) {
        const auto m = t.at(h + "mlp.experts." + std::to_string(e) + "." + hn + ".weight").to<float, 2>({e0.shape[0], e0.shape[1]});
        for (std::int64_t k = 0; k < m.size(); ++k) s.data()[e * m.size() + k] = m.data()[k];
      }
      w.add_tensor(g + gn + ".weight", AnyTensor::from(s), hn == "down_proj" ? std::nullopt : gate_up_as);
    }
  }
  const std::string path = tmp_path(name + (gate_up_as ? "_q8.gguf" : ".gguf"));
  w.write(path);
  return path;
}

template <class Model>
void check_hf_and_gguf(const std::string& name, const std::string& arch) {
  const std::string dir = test::fixture(name);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto ref = test::npy(dir + "/logits.npy");
  {
    const Config cfg = io::read_weights_config(dir + "/hf").value();
    const auto w = io::load_weights(dir + "/hf", cfg);
    CHECK(w.naming == io::WeightNaming::hf);
    Model m(cfg);
    m.load(w.tensors);
    test::expect_close(m.forward(tok), ref, test::tol::f32_logits, name + " from Hugging Face");
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
    const bool same = models::with_model_type<test::Backend>(cfg, []<class M>() { return std::is_same_v<M, Model>; });
    CHECK(same);
#endif
  }
  const std::string path = write_gguf(name, arch);
  {
    const Config cfg = io::read_weights_config(path).value();
    Model m(cfg);
    m.load(io::load_weights(path, cfg).tensors);
    test::expect_close(m.forward(tok), ref, test::tol::f32_logits, name + " from GGUF (" + arch + ")");
  }
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU: the same file through `maxtext logits`
  test::check_cli_logits(dir, "--weights " + path, test::tol::f32_logits);
#endif
  std::remove(path.c_str());
}

}  // namespace

TEST_CASE("Qwen2DecoderLayer (q/k/v bias, no out bias, query * head_dim^-0.5) matches the torch fixture",
          "[layers][qwen2]") {
  check_layer<P32, layers::Qwen2DecoderLayer>("qwen2_layer", test::tol::f32_layer);
  check_layer<PBf, layers::Qwen2DecoderLayer>("qwen2_layer", kBf16Layer);
}

TEST_CASE("Qwen3MoeDecoderLayer (qk-norm attention, moe_block with renormalised top-k) matches the torch fixture",
          "[layers][qwen3_moe]") {
  check_layer<P32, layers::Qwen3MoeDecoderLayer>("qwen3_moe_layer", test::tol::f32_layer);
  check_layer<PBf, layers::Qwen3MoeDecoderLayer>("qwen3_moe_layer", kBf16Layer);
}

TEST_CASE("Qwen3CustomMoeDecoderLayer (attention to attention_output_dim, latent norm, MoE on that width) matches the "
          "torch fixture", "[layers][qwen3_custom_moe]") {
  // attention_output_dim == emb_dim here: no layer_up_projection (the model fixture has one).
  check_layer<P32, layers::Qwen3CustomMoeDecoderLayer>("qwen3_custom_moe_layer", test::tol::f32_layer);
  check_layer<PBf, layers::Qwen3CustomMoeDecoderLayer>("qwen3_custom_moe_layer", kBf16Layer);
}

TEST_CASE("Qwen3-custom-MoE model (2 layers, attention_output_dim 32 < emb_dim 64, up projection) matches the torch "
          "model, unscanned and scanned, incremental and ragged decoding", "[models][qwen3_custom_moe]") {
  check_model<Qwen3Custom>("qwen3_custom_moe_model");
  check_model<Qwen3Custom>("qwen3_custom_moe_model", "model_scanned.safetensors");
}

TEST_CASE("qwen3_custom_moe: the model config loads with the parameter tree MaxText builds, bad widths are refused by "
          "name", "[models][registry][qwen3_custom_moe][errors]") {
  const Config c = io::load_config("", {"model_name=qwen3-custom-30b-a3b"});
  CHECK(c.is("qwen3_custom_moe"));
  CHECK(c.attention_output_dim == 768);
  Qwen3Custom m(c);
  {
    // qwen3_custom.py: q/k/v from D, out [N, H, Da], per-head q/k norms, pre/post norms (post unused) [D], latent_norm
    // [Da], gate [Da, E], experts wi_0/wi_1 [E, Da, F] and wo [E, F, Da], layer_up_projection [Da, D].
    const std::int64_t D = 2048, N = 16, K = 2, H = 256, Da = 768, F = 2048, E = 128, L = 48, V = 151936;
    const std::int64_t layer = D * N * H + 2 * D * K * H + N * H * Da + 2 * H + 2 * D + Da + Da * E + 3 * E * Da * F +
                               Da * D;
    CHECK(m.num_params() == 2 * V * D + L * layer + D);
  }
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
  Config c32 = c;
  c32.dtype = "float32";  // MaxText's default dtype is bfloat16
  const bool same = models::with_model_type<test::Backend>(c32, []<class M>() { return std::is_same_v<M, Qwen3Custom>; });
  CHECK(same);
#endif
  Config bad = test::config_from_meta(test::read_meta(test::fixture("qwen3_custom_moe_model")));
  bad.moe_expert_input_dim = 48;
  CHECK_THROWS_AS(bad.validate(), ConfigError);
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("attention_output_dim > 0 and equal to moe_expert_input_dim") &&
                                        Catch::Contains("found 32 and 48"));
  bad.attention_output_dim = -1;
  bad.moe_expert_input_dim = -1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("qwen3_custom_moe needs attention_output_dim > 0"));
  CHECK_THROWS_WITH(layers::Qwen3CustomMoeDecoderLayer<P32>(bad, {0, "layer", "layer.self_attention", "layer.mlp"}),
                    Catch::Contains("attention_output_dim (-1) must be > 0"));
  // A checkpoint without the up projection is named.
  const Config good = test::config_from_meta(test::read_meta(test::fixture("qwen3_custom_moe_model")));
  io::TensorMap t = io::read_safetensors(test::fixture("qwen3_custom_moe_model") + "/model.safetensors");
  t.tensors.erase("decoder.layers_1.layer_up_projection.kernel");
  Qwen3Custom mc(good);
  CHECK_THROWS_WITH(mc.load(t), Catch::Contains("decoder.layers_1.layer_up_projection.kernel"));
}

TEST_CASE("Qwen2 model (2 layers) matches the torch model, incremental and ragged decoding", "[models][qwen2]") {
  check_model<Qwen2>("qwen2_model");
}

TEST_CASE("Qwen3-MoE model (2 layers) matches the torch model, unscanned and scanned, incremental and ragged decoding",
          "[models][qwen3_moe]") {
  check_model<Qwen3Moe>("qwen3_moe_model");
  check_model<Qwen3Moe>("qwen3_moe_model", "model_scanned.safetensors");
}

TEST_CASE("Qwen2 from a Hugging Face checkpoint and from GGUF (qwen2) gives the reference logits", "[models][qwen2][hf]") {
  const Config cfg = io::config_from_hf_file(test::fixture("qwen2_model") + "/hf/config.json");
  CHECK(cfg.is("qwen2"));
  CHECK(cfg.attention_bias);
  CHECK_FALSE(cfg.use_qk_norm);
  check_hf_and_gguf<Qwen2>("qwen2_model", "qwen2");
}

TEST_CASE("Qwen3-MoE from a Hugging Face checkpoint and from GGUF (qwen3moe) gives the reference logits",
          "[models][qwen3_moe][hf]") {
  const Config cfg = io::config_from_hf_file(test::fixture("qwen3_moe_model") + "/hf/config.json");
  CHECK(cfg.is("qwen3_moe"));
  CHECK(cfg.use_qk_norm);
  CHECK(cfg.norm_topk_prob);
  CHECK(cfg.num_experts == 4);
  CHECK(cfg.num_experts_per_tok == 2);
  CHECK(cfg.moe_mlp_dim == 16);
  check_hf_and_gguf<Qwen3Moe>("qwen3_moe_model", "qwen3moe");
}

TEST_CASE("Qwen3-MoE from Hugging Face: the stacked copy of the per-expert tensors is let go once every expert is "
          "packed, and rebuilt exactly for a visitor", "[models][qwen3_moe][hf][memory]") {
  const std::string dir = test::fixture("qwen3_moe_model");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const Config cfg = io::read_weights_config(dir + "/hf").value();
  io::TensorMap want;  // the parameters as loaded, from a model that never ran
  {
    Qwen3Moe fresh(cfg);
    fresh.load(io::load_weights(dir + "/hf", cfg).tensors);
    want = fresh.export_params();
  }
  // Experts one tensor each: the importer stacks them (a copy), which the model then holds alone.
  Qwen3Moe m(cfg);
  m.load(io::load_weights(dir + "/hf", cfg).tensors);
  const Tensor<float, 3> first = m.forward(tok);
  test::expect_close(first, test::npy(dir + "/logits.npy"), test::tol::f32_logits, "qwen3_moe from Hugging Face");
  const auto& moe = std::get<0>(m.params().layers[0]).moe;
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)
  // The CPU backend packed every expert into panels of its own: the stacks are gone, the panels the one copy.
  CHECK(moe.wi_0.data.empty());
  CHECK(moe.wi_1.data.empty());
  CHECK(moe.wo.data.empty());
  // Visitors that read only shapes and counts leave them released and the packed experts in place.
  CHECK(m.num_params() > 0);
  std::int64_t expert_kernels = 0;
  for (const auto& [name, shape] : m.param_shapes()) {
    if (name.find("moe_block.wi_0") == std::string::npos) continue;
    expert_kernels += shape.size() == 4 ? shape[0] * shape[1] : shape[0];  // [layers, E, D, F] scanned, else [E, D, F]
  }
  CHECK(expert_kernels == cfg.num_experts * cfg.num_decoder_layers);
  CHECK(moe.wi_0.data.empty());
  CHECK(moe.wo.data.empty());
  CHECK(moe.prepared != nullptr);
  CHECK(moe.prepared->wi_0.size() == static_cast<std::size_t>(cfg.num_experts));
#else
  CHECK_FALSE(moe.wi_0.data.empty());  // a backend that does not pack keeps the stacks (the experts are views)
#endif
  // A visitor (here the exporter) sees the stacks rebuilt from the panels, to the bit; the next forward packs again.
  const io::TensorMap got = m.export_params();
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (const auto& [name, t] : want.tensors) {
    INFO(name);
    REQUIRE(got.tensors.count(name) == 1);
    const AnyTensor& g = got.tensors.at(name);
    REQUIRE(g.shape == t.shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      if (g.element(i) != t.element(i)) FAIL("element " << i << ": " << g.element(i) << " != " << t.element(i));
    }
  }
  const Tensor<float, 3> again = m.forward(tok);
  CHECK(std::memcmp(again.data(), first.data(), static_cast<std::size_t>(first.size()) * sizeof(float)) == 0);
}

TEST_CASE("Qwen2 / Qwen3-MoE: what MaxText cannot express and bad checkpoints are refused by name",
          "[models][qwen2][qwen3_moe][errors]") {
  const std::string q2 = test::fixture("qwen2_model") + "/hf/", qm = test::fixture("qwen3_moe_model") + "/hf/";
  nlohmann::json j2 = nlohmann::json::parse(io::read_text_file(q2 + "config.json"));
  j2["use_sliding_window"] = true;
  CHECK_THROWS_WITH(io::config_from_hf(j2, "c.json"), Catch::Contains("use_sliding_window"));
  nlohmann::json jm = nlohmann::json::parse(io::read_text_file(qm + "config.json"));
  auto bad = [&](const char* key, nlohmann::json v, const char* msg) {
    nlohmann::json b = jm;
    b[key] = std::move(v);
    CHECK_THROWS_AS(io::config_from_hf(b, "c.json"), UnsupportedError);
    CHECK_THROWS_WITH(io::config_from_hf(b, "c.json"), Catch::Contains(msg));
  };
  bad("norm_topk_prob", false, "norm_topk_prob = false");
  bad("decoder_sparse_step", 2, "decoder_sparse_step");
  bad("mlp_only_layers", nlohmann::json::array({1}), "mlp_only_layers");
  // Top-k above the expert count, missing expert hidden size.
  Config c = io::config_from_hf(jm, "c.json");
  c.num_experts_per_tok = 5;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("num_experts_per_tok must be in [1, num_experts=4], found 5"));
  c.num_experts_per_tok = 2;
  c.base_moe_mlp_dim = -1;
  c.derive();
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("qwen3_moe needs base_moe_mlp_dim > 0"));
  // A missing expert and a missing bias are named.
  const Config cm = io::config_from_hf(jm, "c.json");
  io::TensorMap raw = io::read_safetensors(qm + "model.safetensors");
  raw.tensors.erase("model.layers.1.mlp.experts.3.down_proj.weight");
  CHECK_THROWS_WITH(io::import_hf_names(raw, cm, false), Catch::Contains("model.layers.1.mlp.experts.3.down_proj.weight"));
  const Config c2 = io::config_from_hf(nlohmann::json::parse(io::read_text_file(q2 + "config.json")), "c.json");
  io::TensorMap raw2 = io::read_safetensors(q2 + "model.safetensors");
  raw2.tensors.erase("model.layers.0.self_attn.k_proj.bias");
  CHECK_THROWS_WITH(io::import_hf_names(raw2, c2, false), Catch::Contains("missing tensor model.layers.0.self_attn.k_proj.bias"));
  // An output-projection bias has no place in MaxText's qwen2 block.
  io::TensorMap raw3 = io::read_safetensors(q2 + "model.safetensors");
  raw3.add("model.layers.0.self_attn.o_proj.bias", raw3.tensors.at("model.norm.weight"));
  CHECK_THROWS_WITH(io::import_hf_names(raw3, c2, false), Catch::Contains("unexpected tensor model.layers.0.self_attn.o_proj.bias"));
}

TEST_CASE("Registry dispatches qwen2 / qwen3_moe, the qwen2.5 and qwen3-moe model configs load with the published "
          "parameter counts", "[models][registry][qwen2][qwen3_moe]") {
  const Config q7 = io::load_config("", {"model_name=qwen2.5-7b"});
  CHECK(q7.is("qwen2"));
  CHECK(q7.attention_bias);
  Qwen2 m7(q7);
  {
    const std::int64_t D = 3584, N = 28, K = 4, H = 128, F = 18944, L = 28, V = 152064;
    const std::int64_t layer = 2 * D * N * H + N * H + 2 * (D * K * H + K * H) + 3 * D * F + 2 * D;
    CHECK(m7.num_params() == 2 * V * D + L * layer + D);
    CHECK(std::fabs(static_cast<double>(m7.num_params()) / 7.62e9 - 1.0) < 0.01);  // Qwen2.5-7B: 7.61B
  }
  const Config q30 = io::load_config("", {"model_name=qwen3-30b-a3b"});
  CHECK(q30.is("qwen3_moe"));
  CHECK(q30.norm_topk_prob);
  Qwen3Moe m30(q30);
  {
    const std::int64_t D = 2048, N = 32, K = 4, H = 128, F = 768, E = 128, L = 48, V = 151936;
    const std::int64_t layer = 2 * D * N * H + 2 * D * K * H + 2 * H + D * E + 3 * E * D * F + 2 * D;
    CHECK(m30.num_params() == 2 * V * D + L * layer + D);
    CHECK(std::fabs(static_cast<double>(m30.num_params()) / 30.5e9 - 1.0) < 0.01);  // Qwen3-30B-A3B: 30.5B
  }
  for (const std::string name : {"qwen2.5-1.5b", "qwen2.5-14b", "qwen3-235b-a22b"}) {
    const Config c = io::load_config("", {"model_name=" + name});
    CHECK((c.is("qwen2") || c.is("qwen3_moe")));
  }
}

TEST_CASE("Qwen3-MoE from GGUF with Q8_0 stacked experts: the transposed expert views dequantise in place",
          "[models][qwen3_moe][gguf]") {
  // The same file with ffn_gate_exps / ffn_up_exps in Q8_0 ([E, F, D] blocks along D, viewed as [E, D, F]). A model
  // loading it (f32 policy: dequantised at load) must equal a model loading the dequantised tensors in f32 layout:
  // identical f32 weights, so the logits agree to f32 summation noise.
  const std::string name = "qwen3_moe_model";
  const std::string path = write_gguf(name, "qwen3moe", DType::q8_0);
  const io::GgufFile g = io::read_gguf(path);
  REQUIRE(g.tensors.at("blk.0.ffn_gate_exps.weight").dtype == DType::q8_0);
  const Config cfg = io::config_from_gguf(g);
  Qwen3Moe mq(cfg);
  mq.load(io::load_weights(path, cfg).tensors);
  io::TensorMap deq;
  for (const auto& [n, t] : g.tensors.tensors) {
    if (t.dtype != DType::q8_0) {
      deq.add(n, t);
      continue;
    }
    const std::int64_t K = t.shape.back();
    const auto m = io::to_matrix<float>(t, {0, 1, 2}, 2);  // [E*F, D], row-major as stored
    REQUIRE(m.dim(1) == K);
    deq.add(n, AnyTensor::from(m).reshaped(t.shape));
  }
  Qwen3Moe mf(cfg);
  mf.load(io::import_llama_cpp_names(deq, cfg, io::RopeLayout::half_split));
  const auto tok = test::int_tensor(test::npy(test::fixture(name) + "/tokens.npy"));
  const auto lq = mq.forward(tok);
  test::expect_close(lq, AnyTensor::from(mf.forward(tok)), test::tol::decode_step, "q8_0 experts vs their dequantised values");
  // And the quantised model stays near the f32 reference (Q8_0: 2^-8 relative per weight, summed over D = 32).
  test::expect_close(lq, test::npy(test::fixture(name) + "/logits.npy"), {0.05, 0.05}, "q8_0 experts vs the f32 reference");
  std::remove(path.c_str());
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext generate / logits: qwen2 / qwen3_moe from a Hugging Face directory and a MaxText checkpoint match the "
          "reference, every new block generates from a config with seeded init", "[models][qwen2][qwen3_moe][simple][cli]") {
  for (const std::string name : {"qwen2_model", "qwen3_moe_model"}) {
    test::check_cli_greedy(test::fixture(name), test::fixture(name) + "/hf");
  }
  // MaxText checkpoints (the fixture's config as a YAML file; unscanned and scanned trees) and the Hugging Face
  // directory through `maxtext logits`, against the reference's logits.
  test::check_cli_checkpoints(test::fixture("qwen2_model"), test::tol::f32_logits);
  test::check_cli_checkpoints(test::fixture("qwen3_moe_model"), test::tol::f32_logits);
  test::check_cli_checkpoints(test::fixture("qwen3_custom_moe_model"), test::tol::f32_logits, false);  // MaxText-only block
  const std::string tiny = " base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 base_mlp_dim=48 "
                           "base_num_decoder_layers=2 vocab_size=96 max_target_length=32 dtype=float32";
  for (const std::string& c : {"qwen2.5-7b.yml" + tiny, "qwen3-30b-a3b.yml" + tiny + " base_moe_mlp_dim=32 num_experts=8",
                              "qwen3-custom-30b-a3b.yml" + tiny + " base_moe_mlp_dim=32 num_experts=8 "
                                                                  "attention_output_dim=32 moe_expert_input_dim=32",
                              "qwen2.5-7b.yml" + tiny + " decoder_block=simple",
                              "qwen2.5-7b.yml" + tiny + " decoder_block=simple_mlp"}) {
    test::check_cli_generates_seeded(c);
  }
}
#endif
