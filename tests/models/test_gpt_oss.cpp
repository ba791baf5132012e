// The gpt_oss decoder block (families/gpt_oss/gpt_oss.hpp) and its loaders (families/gpt_oss/import.hpp) against the PyTorch float64
// fixtures of tests/reference/gpt_oss_reference.py: a local and a global layer in f32 and bf16, a 4-layer model
// (logits, activations, prefill + incremental decode, ragged rows) from unscanned and scanned MaxText trees, the same
// model as a Hugging Face checkpoint and as a GGUF file written here with llama.cpp's gpt-oss names, an MXFP4 Hugging
// Face checkpoint (the script's own quantiser; dequantised values bit-exact, logits on the decoded weights), the
// clamped SwiGLU op on the CPU vs the reference backend, the model configs, and the errors for bad input.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/gpt_oss/gpt_oss.hpp"
#include "maxtext/families/gpt_oss/import.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
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
using GptOss = models::Transformer<P32, layers::GptOssDecoderLayer>;

namespace {

// bf16 layer: every op rounded to bf16 (2^-8 relative); norm -> attention (q/k/v/out with biases, YaRN, sinks) ->
// residual -> norm -> routed MoE (gate, two expert products with biases, the clamped SwiGLU's five rounded ops,
// the down product) -> residual: ~12 roundings on values of magnitude ~2-4, as the qwen3_moe bf16 bound with the
// extra SwiGLU ops. Routing: the fixture keeps every decision >= 0.03 from a tie (meta min_routing_margin), above the
// bf16 error of a gate logit (~0.01), so bf16 picks the same experts.
constexpr testing::Tolerance kBf16Layer{4.0 / 128.0, 0.08};

using test::cols;
using test::row_cols;
std::string tmp_path(const std::string& name) {
  return (std::filesystem::current_path() / ("maxtext_test_gpt_oss_" + std::to_string(::getpid()) + "_" + name)).string();
}

template <class E>
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL("expected an error containing: " << needle);
  } catch (const E& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

template <class P>
void check_layer(const std::string& name, testing::Tolerance tol) {
  const std::string dir = test::fixture(name);
  const auto meta = test::read_meta(dir);
  const Config c = test::config_from_meta(meta);
  const std::int64_t index = meta.at("layer_index").get<std::int64_t>();
  test::Backend be;
  layers::GptOssDecoderLayer<P> layer(c, {index, "layer", "layer.GptOssAttention", "layer.GptOssMlp"});
  CHECK(layer.attention().args().attention_type ==
        (index % 2 == 0 ? layers::AttentionType::local_sliding : layers::AttentionType::global));
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  const Tensor<std::int32_t, 2> pos = test::int_tensor(test::npy(dir + "/positions.npy"));
  layers::Capture cap({"layer.GptOssAttention", "layer.GptOssMlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "/x.npy"), nullptr, &pos, &cap);
  test::expect_close(y, test::npy(dir + "/out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.GptOssAttention"), test::npy(dir + "/attn.npy"), tol, name + ".GptOssAttention");
  test::expect_close(cap.at("layer.GptOssMlp"), test::npy(dir + "/mlp.npy"), tol, name + ".GptOssMlp");
}

GptOss load_model(const std::string& file) {
  const std::string dir = test::fixture("gpt_oss_model");
  Config c = test::config_from_meta(test::read_meta(dir));
  if (file.find("scanned") != std::string::npos) c.scan_layers = true;
  GptOss m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  return m;
}

/// Logits and every activation vs the fixture; prefill 4 tokens then one token per step vs the full forward (the
/// window of 4 is passed at steps 5-8); two rows at different lengths decoded together vs single-row runs.
void check_model(const std::string& file) {
  const std::string dir = test::fixture("gpt_oss_model");
  const std::string name = "gpt_oss " + file;
  auto m = load_model(file);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, name + ".logits");
  for (const std::string a : {"token_embedder", "decoder.layers_0", "decoder.layers_1", "decoder.layers_2",
                              "decoder.layers_3", "decoder.decoder_norm"}) {
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), test::tol::f32_logits, name + "." + a);
  }
  CHECK(cap.has("decoder.layers_0.GptOssAttention"));
  CHECK(cap.has("decoder.layers_0.GptOssMlp.topk_indices"));
  test::check_cached_decoding(m, tok, full, test::tol::decode_step, name);
}

/// The fixture's Hugging Face checkpoint written as llama.cpp's converter writes a gpt-oss GGUF (F32 tensors; gate and
/// up de-interleaved into [E, F, D] stacks, down [E, D, F], sinks as attn_sinks.weight); returns the path.
std::string write_gguf(const std::string& path) {
  const std::string hf = test::fixture("gpt_oss_model") + "/hf";
  const io::TensorMap t = io::read_safetensors(hf + "/model.safetensors");
  const nlohmann::json j = nlohmann::json::parse(io::read_text_file(hf + "/config.json"));
  io::GgufWriter w;
  auto u32 = [](std::int64_t v) { return io::GgufValue::of_u32(static_cast<std::uint32_t>(v)); };
  const std::string p = "gpt-oss.";
  const std::int64_t L = j["num_hidden_layers"], D = j["hidden_size"], F = j["intermediate_size"],
                     E = j["num_local_experts"];
  w.set("general.architecture", io::GgufValue::of_string("gpt-oss"));
  w.set(p + "block_count", u32(L));
  w.set(p + "context_length", u32(j["max_position_embeddings"].get<std::int64_t>()));
  w.set(p + "embedding_length", u32(D));
  w.set(p + "feed_forward_length", u32(F));
  w.set(p + "expert_feed_forward_length", u32(F));
  w.set(p + "attention.head_count", u32(j["num_attention_heads"].get<std::int64_t>()));
  w.set(p + "attention.head_count_kv", u32(j["num_key_value_heads"].get<std::int64_t>()));
  w.set(p + "attention.key_length", u32(j["head_dim"].get<std::int64_t>()));
  w.set(p + "attention.value_length", u32(j["head_dim"].get<std::int64_t>()));
  w.set(p + "attention.layer_norm_rms_epsilon", io::GgufValue::of_f32(j["rms_norm_eps"].get<float>()));
  w.set(p + "attention.sliding_window", u32(j["sliding_window"].get<std::int64_t>()));
  w.set(p + "rope.freq_base", io::GgufValue::of_f32(j["rope_theta"].get<float>()));
  w.set(p + "expert_count", u32(E));
  w.set(p + "expert_used_count", u32(j["num_experts_per_tok"].get<std::int64_t>()));
  const auto& rs = j["rope_scaling"];
  w.set(p + "rope.scaling.type", io::GgufValue::of_string("yarn"));
  w.set(p + "rope.scaling.factor", io::GgufValue::of_f32(rs["factor"].get<float>()));
  w.set(p + "rope.scaling.original_context_length", u32(rs["original_max_position_embeddings"].get<std::int64_t>()));
  w.set(p + "rope.scaling.yarn_beta_fast", io::GgufValue::of_f32(rs["beta_fast"].get<float>()));
  w.set(p + "rope.scaling.yarn_beta_slow", io::GgufValue::of_f32(rs["beta_slow"].get<float>()));
  w.add_tensor("token_embd.weight", t.at("model.embed_tokens.weight"));
  w.add_tensor("output_norm.weight", t.at("model.norm.weight"));
  w.add_tensor("output.weight", t.at("lm_head.weight"));
  const std::vector<std::pair<std::string, std::string>> names = {
      {"input_layernorm.weight", "attn_norm.weight"},     {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},       {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},       {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},       {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},  {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.sinks", "attn_sinks.weight"},           {"mlp.router.weight", "ffn_gate_inp.weight"},
      {"mlp.router.bias", "ffn_gate_inp.bias"},           {"mlp.experts.down_proj_bias", "ffn_down_exps.bias"}};
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    for (const auto& [hn, gn] : names) w.add_tensor(g + gn, t.at(h + hn));
    const auto gu = t.at(h + "mlp.experts.gate_up_proj").to<float, 3>({E, D, 2 * F});
    const auto gub = t.at(h + "mlp.experts.gate_up_proj_bias").to<float, 2>({E, 2 * F});
    const auto dn = t.at(h + "mlp.experts.down_proj").to<float, 3>({E, F, D});
    Tensor<float, 3> gate({E, F, D}), up({E, F, D}), down({E, D, F});
    Tensor<float, 2> gb({E, F}), ub({E, F});
    for (std::int64_t e = 0; e < E; ++e) {
      for (std::int64_t f = 0; f < F; ++f) {
        gb(e, f) = gub(e, 2 * f);
        ub(e, f) = gub(e, 2 * f + 1);
        for (std::int64_t d = 0; d < D; ++d) {
          gate(e, f, d) = gu(e, d, 2 * f);
          up(e, f, d) = gu(e, d, 2 * f + 1);
          down(e, d, f) = dn(e, f, d);
        }
      }
    }
    w.add_tensor(g + "ffn_gate_exps.weight", AnyTensor::from(gate));
    w.add_tensor(g + "ffn_up_exps.weight", AnyTensor::from(up));
    w.add_tensor(g + "ffn_down_exps.weight", AnyTensor::from(down));
    w.add_tensor(g + "ffn_gate_exps.bias", AnyTensor::from(gb));
    w.add_tensor(g + "ffn_up_exps.bias", AnyTensor::from(ub));
  }
  w.write(path);
  return path;
}

}  // namespace

TEST_CASE("GptOssDecoderLayer (local sliding layer 0, global layer 1) matches the torch fixtures in f32 and bf16",
          "[layers][gpt_oss]") {
  // atol 2e-6 rather than f32_layer's 1e-6: an output that cancels to ~0.005 keeps ~10 ulp of its order-1 terms, and
  // the rounding order is the compiler's (clang 14 -O1 with ASan: 1.24e-6 on 1 of 448 outputs; g++ 12: within 1e-6).
  constexpr testing::Tolerance kF32Layer{1e-5, 2e-6};
  check_layer<P32>("gpt_oss_layer", kF32Layer);
  check_layer<P32>("gpt_oss_layer_global", kF32Layer);
  check_layer<PBf>("gpt_oss_layer", kBf16Layer);
  check_layer<PBf>("gpt_oss_layer_global", kBf16Layer);
}

TEST_CASE("GPT-OSS model (4 layers) matches the torch model, unscanned and scanned, incremental and ragged decoding",
          "[models][gpt_oss]") {
  check_model("model.safetensors");
  check_model("model_scanned.safetensors");
}

TEST_CASE("GPT-OSS from a Hugging Face checkpoint and from a gpt-oss GGUF gives the reference logits", "[models][gpt_oss][hf]") {
  const std::string dir = test::fixture("gpt_oss_model");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto ref = test::npy(dir + "/logits.npy");
  const Config fixture = test::config_from_meta(test::read_meta(dir));
  {
    const Config cfg = io::read_weights_config(dir + "/hf").value();
    CHECK(cfg.is("gpt_oss"));
    CHECK(cfg.sliding_window_size == fixture.sliding_window_size);
    CHECK(cfg.mlp_activations_limit == fixture.mlp_activations_limit);
    CHECK(cfg.rope_factor == fixture.rope_factor);
    CHECK_FALSE(cfg.rope_truncate);
    CHECK(cfg.rope_attention_scaling);
    CHECK(cfg.num_experts == 4);
    CHECK(cfg.num_experts_per_tok == 2);
    const auto w = io::load_weights(dir + "/hf", cfg);
    CHECK(w.naming == io::WeightNaming::hf);
    GptOss m(cfg);
    m.load(w.tensors);
    test::expect_close(m.forward(tok), ref, test::tol::f32_logits, "gpt_oss from Hugging Face");
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)
    const bool same = models::with_model_type<test::Backend>(cfg, []<class M>() { return std::is_same_v<M, GptOss>; });
    CHECK(same);
#endif
  }
  const std::string path = write_gguf(tmp_path("model.gguf"));
  {
    Config cfg = io::read_weights_config(path).value();
    CHECK(cfg.is("gpt_oss"));
    CHECK(cfg.mlp_activations_limit == 7.0);  // llama.cpp's constant; the fixture clamps at 2
    CHECK_FALSE(cfg.rope_truncate);           // MaxText's gpt-oss yml (llama.cpp's YaRN truncates; see numerics.md)
    CHECK(cfg.sliding_window_size == fixture.sliding_window_size);
    cfg.mlp_activations_limit = fixture.mlp_activations_limit;
    GptOss m(cfg);
    m.load(io::load_weights(path, cfg).tensors);
    test::expect_close(m.forward(tok), ref, test::tol::f32_logits, "gpt_oss from GGUF (gpt-oss)");
  }
  std::remove(path.c_str());
}

TEST_CASE("GPT-OSS with MXFP4 experts: dequantised bit-exactly, logits of the decoded weights", "[models][gpt_oss][mxfp4]") {
  const std::string dir = test::fixture("gpt_oss_mxfp4");
  const io::TensorMap raw = io::read_safetensors(dir + "/hf/model.safetensors");
  const io::TensorMap dec = io::read_safetensors(dir + "/decoded_experts.safetensors");
  std::int64_t checked = 0, nonzero = 0;
  for (const std::string p : {"model.layers.0.mlp.experts.", "model.layers.1.mlp.experts."}) {
    for (const std::string n : {"gate_up_proj", "down_proj"}) {
      const AnyTensor d = io::dequantize_mxfp4(raw.at(p + n + "_blocks"), raw.at(p + n + "_scales"), p + n);
      const AnyTensor want = dec.at(p + n).permuted({0, 2, 1});  // decoded [E, in, out] -> [E, out, in]
      REQUIRE(d.shape == want.shape);
      for (std::int64_t i = 0; i < d.numel(); ++i) {
        const double a = d.element(i), b = want.element(i);
        if (a != b) FAIL_CHECK(p << n << " element " << i << ": " << a << " vs " << b);
        ++checked;
        nonzero += a != 0.0;
      }
    }
  }
  CHECK(checked == 2 * (4 * 64 * 32 + 4 * 32 * 32));
  CHECK(nonzero > checked / 2);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const Config cfg = io::read_weights_config(dir + "/hf").value();
  GptOss m(cfg);
  m.load(io::load_weights(dir + "/hf", cfg).tensors);
  test::expect_close(m.forward(tok), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "gpt_oss MXFP4 from Hugging Face");
  // bf16 weights (the configured weight type) from the same file: the loader converts the dequantised f32 values.
  Config cb = cfg;
  using GptOssBf16W = models::Transformer<Policy<test::Backend, bf16, float>, layers::GptOssDecoderLayer>;
  GptOssBf16W mb(cb);
  mb.load(io::load_weights(dir + "/hf", cb).tensors);
  test::expect_close(mb.forward(tok), test::npy(dir + "/logits.npy"), {0.05, 0.05}, "gpt_oss MXFP4 as bf16 weights");
}

TEST_CASE("GPT-OSS from a gpt-oss GGUF with llama.cpp MXFP4 experts (written by gguf-py) gives the reference logits",
          "[models][gpt_oss][mxfp4][gguf]") {
  const std::string dir = test::fixture("gpt_oss_gguf_mxfp4");
  const Config cfg = io::read_weights_config(dir + "/model.gguf").value();
  CHECK(cfg.is("gpt_oss"));
  CHECK(cfg.mlp_activations_limit == 7.0);
  const auto w = io::load_weights(dir + "/model.gguf", cfg);
  CHECK(w.tensors.at("decoder.layers_1.GptOssMlp.wo").dtype == DType::f32);
  GptOss m(cfg);
  m.load(w.tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  test::expect_close(m.forward(tok), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "gpt_oss MXFP4 GGUF");
  // MXFP4 tensors anywhere else are refused by name.
  Config other = cfg;
  other.decoder_block = "qwen3_moe";
  expect_error<UnsupportedError>([&] { (void)io::load_weights(dir + "/model.gguf", other); },
                                 "ggml type MXFP4 is only supported for gpt-oss expert tensors");
  const io::GgufFile g = io::read_gguf(dir + "/model.gguf");
  io::TensorMap bad = g.tensors;
  bad.tensors.at("blk.0.ffn_gate_exps.weight") = g.tensors.at("blk.0.ffn_down_exps.weight").narrow(0, 0, 3);
  expect_error<ShapeError>([&] { (void)io::import_gguf_gpt_oss(bad, cfg); },
                           "blk.0.ffn_gate_exps.weight: expected shape [4,32,1,17], found u8 [3,32,1,17]");
}

TEST_CASE("clamped SwiGLU: the CPU op equals the reference backend in f32 and bf16, and the definition at the clamps",
          "[backend][gpt_oss]") {
  reference::Backend ref;
  test::Backend be;
  const std::int64_t M = 3, F = 40;
  Tensor<float, 2> h0({M, F}), h1({M, F});
  for (std::int64_t i = 0; i < M * F; ++i) {
    h0.data()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 9.0);
    h1.data()[i] = static_cast<float>(std::cos(0.53 * static_cast<double>(i)) * 9.0);
  }
  // f32: the definition in double, then one f32 rounding per op (tolerance: a few f32 ulps).
  Tensor<float, 2> y({M, F}), yr({M, F});
  ref.clamped_glu(h0.cview(), h1.cview(), Activation::sigmoid, 1.702f, 7.0f, yr.view());
  for (std::int64_t i = 0; i < M * F; ++i) {
    const double g = std::min<double>(h0.data()[i], 7.0), u = std::clamp<double>(h1.data()[i], -7.0, 7.0);
    const double want = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
    CHECK(std::fabs(yr.data()[i] - want) <= 1e-5 * std::fabs(want) + 1e-6);
  }
  Tensor<bf16, 2> b0({M, F}), b1({M, F}), by({M, F}), bry({M, F});
  for (std::int64_t i = 0; i < M * F; ++i) {
    b0.data()[i] = bf16(h0.data()[i]);
    b1.data()[i] = bf16(h1.data()[i]);
  }
  ref.clamped_glu(b0.cview(), b1.cview(), Activation::sigmoid, 1.702f, 7.0f, bry.view());
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)
  be.clamped_glu(h0.cview(), h1.cview(), Activation::sigmoid, 1.702f, 7.0f, y.view());
  be.clamped_glu(b0.cview(), b1.cview(), Activation::sigmoid, 1.702f, 7.0f, by.view());
  for (std::int64_t i = 0; i < M * F; ++i) {
    CHECK(std::fabs(y.data()[i] - yr.data()[i]) <= 2e-6 * std::fabs(yr.data()[i]) + 1e-7);
    // bf16: the same rounded ops; the sigmoid's f32 value may differ by an ulp, which can move one bf16 rounding.
    CHECK(std::fabs(static_cast<float>(by.data()[i]) - static_cast<float>(bry.data()[i])) <=
          std::fabs(static_cast<float>(bry.data()[i])) / 128.0f + 1e-6f);
  }
#else
  (void)be;
#endif
}

TEST_CASE("GPT-OSS model configs load with the published parameter counts and the registry dispatches gpt_oss",
          "[models][registry][gpt_oss]") {
  for (const auto& [name, E, L, published] : std::vector<std::tuple<std::string, std::int64_t, std::int64_t, double>>{
           {"gpt-oss-20b", 32, 24, 20.91e9}, {"gpt-oss-120b", 128, 36, 116.83e9}}) {
    const Config c = io::load_config("", {"model_name=" + name, "dtype=float32"});
    CHECK(c.is("gpt_oss"));
    CHECK(c.attention_sink);
    CHECK(c.sliding_window_size == 128);
    CHECK(c.mlp_activations_limit == 7.0);
    CHECK(c.rope_type == "yarn");
    CHECK_FALSE(c.rope_truncate);
    CHECK(c.num_experts == E);
    GptOss m(c);
    const std::int64_t D = 2880, N = 64, K = 8, H = 64, F = 2880, V = 201088;
    const std::int64_t attn = D * N * H + N * H + 2 * (D * K * H + K * H) + N * H * D + D + N;
    const std::int64_t moe = D * E + E + 3 * E * D * F + 2 * E * F + E * D;
    CHECK(m.num_params() == 2 * V * D + D + L * (attn + moe + 2 * D));
    CHECK(std::fabs(static_cast<double>(m.num_params()) / published - 1.0) < 0.01);
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
    const bool same = models::with_model_type<test::Backend>(c, []<class M>() { return std::is_same_v<M, GptOss>; });
    CHECK(same);
#endif
  }
}

TEST_CASE("GPT-OSS: inconsistent configs, missing or misshapen tensors and bad MXFP4 data are refused by name",
          "[models][gpt_oss][errors]") {
  const std::string dir = test::fixture("gpt_oss_model");
  const Config good = test::config_from_meta(test::read_meta(dir));
  {
    Config c = good;
    c.num_experts_per_tok = 5;
    expect_error<ConfigError>([&] { c.validate(); }, "num_experts_per_tok must be in [1, num_experts=4], found 5");
    expect_error<ConfigError>([&] { GptOss m(c); }, "num_experts_per_tok must be in [1, num_experts=4], found 5");
  }
  {
    Config c = good;
    c.sliding_window_size = 65;
    expect_error<ConfigError>([&] { c.validate(); }, "sliding_window_size (65) is larger than the cache (max_target_length 64)");
    c.sliding_window_size = 0;
    expect_error<ConfigError>([&] { c.validate(); }, "decoder_block gpt_oss needs sliding_window_size > 0");
  }
  {
    Config c = good;
    c.mlp_activations_limit = -1.0;
    expect_error<ConfigError>([&] { c.validate(); }, "mlp_activations_limit, which must be > 0");
    expect_error<ConfigError>([&] { GptOss m(c); }, "mlp_activations_limit, which must be > 0");
  }
  {
    Config c = good;
    c.scan_layers = true;
    c.base_num_decoder_layers = 3;
    c.derive();
    expect_error<ConfigError>([&] { c.validate(); }, "inhomogeneous_layer_cycle_interval (2) must divide num_decoder_layers (3)");
    Config d = good;
    d.sparse_matmul = false;
    d.capacity_factor = 1.0;
    expect_error<ConfigError>([&] { d.validate(); }, "dropless only (capacity_factor=-1)");
  }
  // Scanned checkpoint with the wrong number of repetitions.
  {
    Config c = good;
    c.base_num_decoder_layers = 6;
    c.scan_layers = true;
    c.derive();
    expect_error<ShapeError>([&] { (void)io::load_weights(dir + "/model_scanned.safetensors", c); },
                             "expected 3 repetitions (num_decoder_layers / inhomogeneous_layer_cycle_interval) on axis 1");
  }
  // Hugging Face: missing and misshapen tensors, config keys MaxText cannot express.
  const std::string hf = dir + "/hf/";
  const nlohmann::json hj = nlohmann::json::parse(io::read_text_file(hf + "config.json"));
  const Config hc = io::config_from_hf(hj, "config.json");
  {
    io::TensorMap raw = io::read_safetensors(hf + "model.safetensors");
    raw.tensors.erase("model.layers.2.self_attn.sinks");
    expect_error<IoError>([&] { (void)io::import_hf_gpt_oss(raw, hc); }, "missing tensor model.layers.2.self_attn.sinks");
  }
  {
    io::TensorMap raw = io::read_safetensors(hf + "model.safetensors");
    raw.tensors.at("model.layers.1.mlp.experts.gate_up_proj") = raw.tensors.at("model.layers.1.mlp.experts.down_proj");
    expect_error<ShapeError>([&] { (void)io::import_hf_gpt_oss(raw, hc); },
                             "model.layers.1.mlp.experts.gate_up_proj: expected shape [4,32,64], found f32 [4,32,32]");
  }
  {
    io::TensorMap raw = io::read_safetensors(hf + "model.safetensors");
    raw.add("model.layers.0.mlp.experts.extra", raw.tensors.at("model.norm.weight"));
    expect_error<IoError>([&] { (void)io::import_hf_gpt_oss(raw, hc); }, "unexpected tensor model.layers.0.mlp.experts.extra");
  }
  {
    nlohmann::json j = hj;
    j["layer_types"][1] = "sliding_attention";
    expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "c.json"); }, "layer_types[1] is \"sliding_attention\"");
    j = hj;
    j["num_experts_per_tok"] = 9;
    expect_error<ConfigError>([&] { (void)io::config_from_hf(j, "c.json"); }, "num_experts_per_tok must be in [1, num_experts=4], found 9");
    j = hj;
    j["rope_scaling"]["attention_factor"] = 2.0;
    expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "c.json"); }, "no attention_factor / mscale");
    j = hj;
    j["quantization_config"] = {{"quant_method", "fp8"}};
    expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "c.json"); }, "quant_method 'fp8'");
    j = hj;
    j["sliding_window"] = 200000;
    expect_error<ConfigError>([&] { (void)io::config_from_hf(j, "c.json"); }, "is larger than the cache");
  }
  // MXFP4: wrong block / scale shapes, sizes that are not whole blocks, a NaN scale, a missing half of the pair.
  const std::string mx = test::fixture("gpt_oss_mxfp4") + "/hf/";
  const nlohmann::json mj = nlohmann::json::parse(io::read_text_file(mx + "config.json"));
  const Config mc = io::config_from_hf(mj, "config.json");
  const io::TensorMap mraw = io::read_safetensors(mx + "model.safetensors");
  const std::string x = "model.layers.0.mlp.experts.";
  {
    const AnyTensor& b = mraw.at(x + "gate_up_proj_blocks");
    const AnyTensor& s = mraw.at(x + "gate_up_proj_scales");
    expect_error<IoError>([&] { (void)io::dequantize_mxfp4(b.narrow(3, 0, 8), s, "w"); },
                          "w_blocks (");
    expect_error<IoError>([&] { (void)io::dequantize_mxfp4(b, s.narrow(1, 0, 3), "w"); }, "w_scales (");
    expect_error<IoError>([&] { (void)io::dequantize_mxfp4(s, s, "w"); }, "expected u8 [experts, rows, blocks, 16]");
    std::vector<std::uint8_t> bad(static_cast<std::size_t>(s.numel()), 127);
    bad[5] = 0xFF;
    Tensor<std::uint8_t, 3> st({s.shape[0], s.shape[1], s.shape[2]});
    std::memcpy(st.data(), bad.data(), bad.size());
    expect_error<IoError>([&] { (void)io::dequantize_mxfp4(b, AnyTensor::from(st, "s"), "w"); }, "is 0xFF (NaN");
  }
  {
    io::TensorMap raw = mraw;
    raw.tensors.erase(x + "down_proj_scales");
    expect_error<IoError>([&] { (void)io::import_hf_gpt_oss(raw, mc); }, "missing tensor " + x + "down_proj_scales");
  }
  {
    io::TensorMap raw = mraw;
    raw.tensors.at(x + "gate_up_proj_blocks") = raw.tensors.at(x + "down_proj_blocks");
    raw.tensors.at(x + "gate_up_proj_scales") = raw.tensors.at(x + "down_proj_scales");
    expect_error<ShapeError>([&] { (void)io::import_hf_gpt_oss(raw, mc); },
                             x + "gate_up_proj_blocks: expected shape [4,64,1,16], found u8 [4,32,1,16]");
  }
  {
    nlohmann::json j = mj;
    j["intermediate_size"] = 48;
    j["num_hidden_layers"] = 2;
    const Config c48 = io::config_from_hf(j, "c.json");
    expect_error<ShapeError>([&] { (void)io::import_hf_gpt_oss(mraw, c48); },
                             "*_blocks: MXFP4 needs hidden_size (32) and intermediate_size (48) to be multiples of 32");
  }
  // GGUF: an MXFP4 tensor type is named; gpt-oss metadata MaxText cannot express is refused.
  {
    const std::string path = write_gguf(tmp_path("bad.gguf"));
    io::GgufFile g = io::read_gguf(path);
    io::GgufWriter w;
    for (const auto& k : g.metadata_order) w.set(k, g.metadata.at(k));
    w.set("gpt-oss.attention.sliding_window_pattern", io::GgufValue::of_u32(3));
    for (const auto& [n, t] : g.tensors.tensors) w.add_tensor(n, t);
    w.write(path);
    expect_error<UnsupportedError>([&] { (void)io::read_weights_config(path); }, "attention.sliding_window_pattern 3");
    std::remove(path.c_str());
  }
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext generate / logits: gpt_oss from a Hugging Face directory (float and MXFP4 experts), an MXFP4 GGUF and "
          "a MaxText checkpoint (unscanned, scanned) match the reference, and it generates from gpt-oss-20b.yml with "
          "seeded init", "[models][gpt_oss][cli]") {
  for (const std::string name : {"gpt_oss_model", "gpt_oss_mxfp4"}) {
    test::check_cli_greedy(test::fixture(name), test::fixture(name) + "/hf");
  }
  test::check_cli_greedy(test::fixture("gpt_oss_gguf_mxfp4"), test::fixture("gpt_oss_gguf_mxfp4") + "/model.gguf");
  // MaxText checkpoints (the fixture's config as a YAML file; unscanned and scanned trees) and the Hugging Face
  // directory through `maxtext logits`, against the reference's logits.
  test::check_cli_checkpoints(test::fixture("gpt_oss_model"), test::tol::f32_logits);
  test::check_cli_generates_seeded("gpt-oss-20b.yml base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 "
                                   "head_dim=16 base_mlp_dim=32 base_moe_mlp_dim=32 num_experts=4 "
                                   "base_num_decoder_layers=2 vocab_size=96 max_target_length=32 sliding_window_size=4 "
                                   "dtype=float32");
}
#endif
