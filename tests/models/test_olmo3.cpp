// The olmo3 decoder block (families/olmo3/olmo3.hpp) and the llama2lti block (families/llama2/lti.hpp + the llama2 layer) against the
// PyTorch float64 fixtures of tests/reference/olmo3_reference.py and llama2lti_reference.py: olmo3 layers (local,
// global, default RoPE) in f32 and bf16; the 4-layer model (logits, activations, prefill + incremental decode, ragged
// rows) from unscanned and scanned MaxText trees, a Hugging Face Olmo3 checkpoint and a GGUF file written here with
// llama.cpp's olmo2 names and metadata (MaxText's YaRN-on-every-layer logits, not llama.cpp's); the learn-to-init
// student collapsed to llama2 kernels; the model configs; and the errors for inconsistent configs and checkpoints.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <type_traits>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "maxtext/families/checkpoint.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/llama2/lti.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/families/olmo3/olmo3.hpp"
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
#include "support/registry_params.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;
using Olmo3 = models::Transformer<P32, layers::Olmo3DecoderLayer>;
using Llama = models::Transformer<P32, layers::LlamaDecoderLayer>;

namespace {

// bf16 layers: every op output rounded to bf16 (2^-8 relative): attention (q/k norms, YaRN, logits rounded) -> post
// norm -> residual -> MLP -> post norm -> residual accumulates ~8 roundings on values of magnitude ~2, as the
// qwen2 / llama bf16 layer checks (test_qwen_family.cpp).
constexpr testing::Tolerance kBf16Layer{4.0 / 128.0, 0.06};

using test::cols;
using test::row_cols;

template <class E>
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL("no exception; expected one containing: " << needle);
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
  test::Backend be;
  const std::int64_t index = meta.at("layer_index").get<std::int64_t>();
  layers::Olmo3DecoderLayer<P> layer(c, {index, "layer", "layer.attention", "layer.mlp"});
  CHECK(layer.attention().args().attention_type ==
        (index % 4 == 3 ? layers::AttentionType::global : layers::AttentionType::local_sliding));
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  const Tensor<std::int32_t, 2> pos = test::int_tensor(test::npy(dir + "/positions.npy"));
  layers::Capture cap({"layer.attention", "layer.mlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "/x.npy"), nullptr, &pos, &cap);
  test::expect_close(y, test::npy(dir + "/out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.attention"), test::npy(dir + "/attn.npy"), tol, name + ".attention");
  test::expect_close(cap.at("layer.mlp"), test::npy(dir + "/mlp.npy"), tol, name + ".mlp");
}

template <class Model>
Model load_model(const std::string& name, const std::string& file) {
  const std::string dir = test::fixture(name);
  const Config c = test::config_from_meta(test::read_meta(dir));
  c.validate();
  Model m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  return m;
}

/// Logits and activations vs the fixture; prefill 4 tokens then one token per step vs the full forward; two rows at
/// different lengths decoded together vs single-row runs.
void check_model(const std::string& file) {
  const std::string name = "olmo3_model", dir = test::fixture(name);
  auto m = load_model<Olmo3>(name, file);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, name + ".logits " + file);
  for (const std::string a : {"token_embedder", "decoder.layers_0", "decoder.layers_1", "decoder.layers_2",
                              "decoder.layers_3", "decoder.layers_2.attention", "decoder.layers_3.attention",
                              "decoder.decoder_norm"}) {
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), test::tol::f32_logits, name + "." + a);
  }
  test::check_cached_decoding(m, tok, full, test::tol::decode_step, name);
}

std::string tmp_path(const std::string& name) {
  return (std::filesystem::current_path() / ("maxtext_test_olmo3_" + std::to_string(::getpid()) + "_" + name)).string();
}

nlohmann::json hf_json() { return nlohmann::json::parse(io::read_text_file(test::fixture("olmo3_model") + "/hf/config.json")); }

/// The fixture's Hugging Face checkpoint written as a GGUF file the way llama.cpp's converter names an
/// Olmo3ForCausalLM (architecture olmo2: q/k rows unpermuted, sliding window + per-layer pattern, YaRN keys).
/// `edit` may change the metadata before writing.
std::string write_gguf(const std::function<void(io::GgufWriter&, const std::string&)>& edit = {}) {
  const std::string hf = test::fixture("olmo3_model") + "/hf";
  const io::TensorMap t = io::read_safetensors(hf + "/model.safetensors");
  const nlohmann::json j = hf_json();
  io::GgufWriter w;
  auto u32 = [](std::int64_t v) { return io::GgufValue::of_u32(static_cast<std::uint32_t>(v)); };
  const std::string p = "olmo2.";
  w.set("general.architecture", io::GgufValue::of_string("olmo2"));
  const std::int64_t L = j["num_hidden_layers"];
  w.set(p + "block_count", u32(L));
  w.set(p + "context_length", u32(j["max_position_embeddings"].get<std::int64_t>()));
  w.set(p + "embedding_length", u32(j["hidden_size"].get<std::int64_t>()));
  w.set(p + "feed_forward_length", u32(j["intermediate_size"].get<std::int64_t>()));
  w.set(p + "attention.head_count", u32(j["num_attention_heads"].get<std::int64_t>()));
  w.set(p + "attention.head_count_kv", u32(j["num_key_value_heads"].get<std::int64_t>()));
  w.set(p + "rope.freq_base", io::GgufValue::of_f32(j["rope_theta"].get<float>()));
  w.set(p + "attention.layer_norm_rms_epsilon", io::GgufValue::of_f32(j["rms_norm_eps"].get<float>()));
  w.set(p + "attention.sliding_window", u32(j["sliding_window"].get<std::int64_t>()));
  io::GgufValue pattern;
  pattern.type = io::GgufType::array;
  pattern.elem = io::GgufType::boolean;
  for (const auto& lt : j["layer_types"]) pattern.ints.push_back(lt == "sliding_attention" ? 1 : 0);
  w.set(p + "attention.sliding_window_pattern", pattern);
  const auto& rs = j["rope_scaling"];
  w.set(p + "rope.scaling.type", io::GgufValue::of_string("yarn"));
  w.set(p + "rope.scaling.factor", io::GgufValue::of_f32(rs["factor"].get<float>()));
  w.set(p + "rope.scaling.original_context_length", u32(rs["original_max_position_embeddings"].get<std::int64_t>()));
  w.set(p + "rope.scaling.yarn_attn_factor", io::GgufValue::of_f32(rs["attention_factor"].get<float>()));
  w.set(p + "rope.scaling.yarn_beta_fast", io::GgufValue::of_f32(rs["beta_fast"].get<float>()));
  w.set(p + "rope.scaling.yarn_beta_slow", io::GgufValue::of_f32(rs["beta_slow"].get<float>()));
  w.add_tensor("token_embd.weight", t.at("model.embed_tokens.weight"));
  w.add_tensor("output_norm.weight", t.at("model.norm.weight"));
  w.add_tensor("output.weight", t.at("lm_head.weight"));
  const std::vector<std::pair<std::string, std::string>> names = {
      {"self_attn.q_proj.weight", "attn_q.weight"},     {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},     {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    for (const auto& [hn, gn] : names) w.add_tensor(g + gn, t.at(h + hn));
  }
  static int count = 0;
  const std::string path = tmp_path("olmo2_" + std::to_string(count++) + ".gguf");
  if (edit) edit(w, p);
  w.write(path);
  return path;
}

}  // namespace

TEST_CASE("Olmo3DecoderLayer (post-norms, qk-norm over all heads, YaRN or default RoPE, L/G windows) matches the "
          "torch fixture",
          "[layers][olmo3]") {
  for (const std::string name : {"olmo3_layer_local", "olmo3_layer_global", "olmo3_layer_default"}) {
    check_layer<P32>(name, test::tol::f32_layer);
    check_layer<PBf>(name, kBf16Layer);
  }
}

TEST_CASE("OLMo 3 model (4 layers L, L, L, G) matches the torch model, unscanned and scanned, incremental and ragged "
          "decoding",
          "[models][olmo3]") {
  check_model("model.safetensors");
  check_model("model_scanned.safetensors");
}

TEST_CASE("OLMo 3 from a Hugging Face checkpoint and from GGUF (llama.cpp olmo2) gives MaxText's logits",
          "[models][olmo3][hf][gguf]") {
  const std::string dir = test::fixture("olmo3_model");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto ref = test::npy(dir + "/logits.npy");
  {
    const Config cfg = io::read_weights_config(dir + "/hf").value();
    CHECK(cfg.is("olmo3"));
    CHECK(cfg.model_name == "olmo3");
    CHECK(cfg.use_qk_norm);
    CHECK(cfg.sliding_window_size == 3);
    CHECK(cfg.inhomogeneous_layer_cycle_interval == 4);
    CHECK(cfg.rope_type == "yarn");
    CHECK(cfg.rope_factor == 4.0);
    CHECK(cfg.original_max_position_embeddings == 16);
    CHECK(cfg.max_position_embeddings == 64);
    CHECK_FALSE(cfg.rope_interleave);
    CHECK(cfg.rope_attention_scaling);
    const auto w = io::load_weights(dir + "/hf", cfg);
    CHECK(w.naming == io::WeightNaming::hf);
    Olmo3 m(cfg);
    m.load(w.tensors);
    test::expect_close(m.forward(tok), ref, test::tol::f32_logits, "olmo3 from Hugging Face");
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
    const bool same = models::with_model_type<test::Backend>(cfg, []<class M>() { return std::is_same_v<M, Olmo3>; });
    CHECK(same);
#endif
  }
  const std::string path = write_gguf();
  {
    const Config cfg = io::read_weights_config(path).value();
    CHECK(cfg.is("olmo3"));
    CHECK(cfg.rope_type == "yarn");
    CHECK(cfg.rope_factor == 4.0);
    CHECK(cfg.sliding_window_size == 3);
    Olmo3 m(cfg);
    m.load(io::load_weights(path, cfg).tensors);
    const auto logits = m.forward(tok);
    test::expect_close(logits, ref, test::tol::f32_logits, "olmo3 from GGUF (olmo2)");
    // llama.cpp's olmo2 graph applies plain RoPE on sliding layers (YaRN only on global ones); MaxText, which the
    // loader follows, uses YaRN everywhere. The two differ by far more than the tolerance on this model.
    const auto lcpp = test::npy(dir + "/logits_llamacpp.npy");
    double max_diff = 0.0;
    for (std::int64_t i = 0; i < lcpp.numel(); ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits.data()[i]) - lcpp.element(i)));
    }
    CHECK(max_diff > 0.1);
  }
  std::remove(path.c_str());
}

TEST_CASE("OLMo 3: inconsistent configs and checkpoints are refused by name", "[models][olmo3][errors]") {
  const Config c = test::config_from_meta(test::read_meta(test::fixture("olmo3_model")));
  CHECK_NOTHROW(c.validate());
  Config bad = c;
  bad.sliding_window_size = 0;
  expect_error<ConfigError>([&] { bad.validate(); }, "decoder_block olmo3 needs sliding_window_size > 0");
  bad = c;
  bad.inhomogeneous_layer_cycle_interval = 1;
  expect_error<ConfigError>([&] { bad.validate(); }, "inhomogeneous_layer_cycle_interval must be 4");
  bad = c;
  bad.base_num_decoder_layers = 6;
  bad.derive();
  expect_error<ConfigError>([&] { bad.validate(); }, "num_decoder_layers (6) is not a multiple of the sliding-window pattern");

  // config.json
  auto j = hf_json();
  j["layer_types"][1] = "full_attention";
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "layer_types[1] = \"full_attention\"");
  j = hf_json();
  j["sliding_window"] = 128;
  expect_error<ConfigError>([&] { (void)io::config_from_hf(j, "x"); }, "sliding_window (128) is larger than the context");
  j = hf_json();
  j.erase("sliding_window");
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "needs a sliding window");
  j = hf_json();
  j["num_hidden_layers"] = 6;
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                      "sliding_attention", "sliding_attention"};
  expect_error<ConfigError>([&] { (void)io::config_from_hf(j, "x"); }, "num_hidden_layers (6) is not a multiple");
  j = hf_json();
  j["rope_scaling"]["attention_factor"] = 1.0;
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "attention_factor 1");
  j = hf_json();
  j["rope_scaling"]["factor"] = 8.0;
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); },
                                 "factor 8 differs from max_position_embeddings / original_max_position_embeddings = 4");
  j = hf_json();
  j["rope_scaling"]["rope_type"] = "dynamic";
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "rope type 'dynamic'");
  j = hf_json();
  j["attention_bias"] = true;
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "attention_bias = true");

  // Tensors: missing, wrongly shaped (a per-head q norm [H] instead of the global [N*H]), unexpected.
  const Config hc = io::config_from_hf(hf_json(), "x");
  const io::TensorMap hf = io::read_safetensors(test::fixture("olmo3_model") + "/hf/model.safetensors");
  io::TensorMap miss = hf;
  miss.tensors.erase("model.layers.2.post_feedforward_layernorm.weight");
  expect_error<IoError>([&] { (void)io::import_olmo3_names(miss, hc, true, false, "hf x"); },
                        "missing tensor model.layers.2.post_feedforward_layernorm.weight");
  io::TensorMap shape = hf;
  shape.tensors["model.layers.1.self_attn.q_norm.weight"] = hf.at("model.layers.1.self_attn.q_norm.weight").narrow(0, 0, 8);
  expect_error<ShapeError>([&] { (void)io::import_olmo3_names(shape, hc, true, false, "hf x"); },
                           "layers_1.attention.query_norm.scale): expected [32]");
  io::TensorMap extra = hf;
  extra.add("model.layers.0.input_layernorm.weight", hf.at("model.norm.weight"));
  expect_error<IoError>([&] { (void)io::import_olmo3_names(extra, hc, true, false, "hf x"); },
                        "unexpected tensor model.layers.0.input_layernorm.weight");
  // A MaxText tree with a wrongly shaped kernel: the loader names the parameter.
  io::TensorMap mt = io::canonicalize_maxtext(io::read_safetensors(test::fixture("olmo3_model") + "/model.safetensors"), c);
  mt.tensors["decoder.layers_3.attention.key.kernel"] = mt.at("decoder.layers_3.attention.value.kernel").narrow(1, 0, 1);
  expect_error<Error>([&] { Olmo3 m(c); m.load(mt); }, "decoder.layers_3.attention.key.kernel");
  // A scanned tree for another layer count.
  Config eight = c;
  eight.base_num_decoder_layers = 8;
  eight.derive();
  expect_error<ShapeError>(
      [&] { (void)io::canonicalize_maxtext(io::read_safetensors(test::fixture("olmo3_model") + "/model_scanned.safetensors"), eight); },
      "expected 2 repetitions (num_decoder_layers / 4)");

  // GGUF metadata
  auto gguf_error = [&](const std::function<void(io::GgufWriter&, const std::string&)>& edit, const std::string& needle) {
    const std::string path = write_gguf(edit);
    try {
      (void)io::read_weights_config(path);
      FAIL("no exception; expected one containing: " << needle);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
    std::remove(path.c_str());
  };
  gguf_error([](io::GgufWriter& w, const std::string& p) { w.set(p + "attention.sliding_window", io::GgufValue::of_u32(0)); },
             "OLMo 2 checkpoints (no window) have no MaxText block");
  gguf_error([](io::GgufWriter& w, const std::string& p) { w.set(p + "attention.sliding_window_pattern", io::GgufValue::of_u32(2)); },
             "attention.sliding_window_pattern 2: MaxText's olmo3 block uses a period of 4");
  gguf_error(
      [](io::GgufWriter& w, const std::string& p) {
        io::GgufValue v;
        v.type = io::GgufType::array;
        v.elem = io::GgufType::boolean;
        v.ints = {1, 1, 1, 1};
        w.set(p + "attention.sliding_window_pattern", v);
      },
      "attention.sliding_window_pattern[3] = true");
  gguf_error([](io::GgufWriter& w, const std::string& p) { w.set(p + "rope.freq_base_swa", io::GgufValue::of_f32(10000.0f)); },
             "rope.freq_base_swa 10000 differs from rope.freq_base");
  gguf_error([](io::GgufWriter& w, const std::string& p) { w.set(p + "attention.sliding_window", io::GgufValue::of_u32(100)); },
             "sliding_window (100) is larger than the context");
  gguf_error([](io::GgufWriter& w, const std::string& p) { w.set(p + "rope.scaling.type", io::GgufValue::of_string("linear")); },
             "rope.scaling.type 'linear' is not supported for olmo3");
}

TEST_CASE("OLMo 3 model ymls load, dispatch through the registry and have the published parameter counts",
          "[models][olmo3][registry]") {
  const Config c7 = io::load_config("", {"model_name=olmo3-7b"});
  CHECK(c7.is("olmo3"));
  CHECK(c7.model_name == "olmo3-7b");
  CHECK(c7.rope_type == "yarn");
  CHECK(c7.rope_factor == 8.0);
  CHECK(c7.sliding_window_size == 4096);
  CHECK_NOTHROW(c7.validate());
#if !defined(MAXTEXT_TEST_BACKEND_CUDA)  // CUDA tests do not link the CPU block library (registry_params.hpp)
  // Olmo-3-7B: 7.30B parameters (q/k norms over all heads: [N*H] each; untied head).
  {
    const std::int64_t D = 4096, N = 32, K = 32, H = 128, F = 11008, L = 32, V = 100278;
    const std::int64_t layer = 2 * D * N * H + 2 * D * K * H + N * H + K * H + 3 * D * F + 2 * D;
    const auto n = test::registry_num_params(c7);
    CHECK(n == 2 * V * D + L * layer + D);
  }
#endif
  const Config c32 = io::load_config("", {"model_name=olmo3-32b"});
  CHECK(c32.num_kv_heads == 8);
  CHECK_NOTHROW(c32.validate());
  const Config pt = io::load_config("", {"model_name=olmo3-7b-pt"});
  CHECK(pt.rope_type == "default");
  CHECK_NOTHROW(pt.validate());
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext generate / logits: olmo3 from a Hugging Face directory, a GGUF (olmo2) and a MaxText checkpoint "
          "(unscanned, scanned) match the reference, and it generates from olmo3-7b.yml with seeded init",
          "[models][olmo3][cli]") {
  test::check_cli_greedy(test::fixture("olmo3_model"), test::fixture("olmo3_model") + "/hf");
  // The GGUF loader follows MaxText (YaRN on every layer; see the GGUF test case), so the same greedy token.
  const std::string path = write_gguf();
  test::check_cli_greedy(test::fixture("olmo3_model"), path);
  std::remove(path.c_str());
  // MaxText checkpoints (the fixture's config as a YAML file; unscanned and scanned trees) and the Hugging Face
  // directory through `maxtext logits`, against the reference's logits.
  test::check_cli_checkpoints(test::fixture("olmo3_model"), test::tol::f32_logits);
  test::check_cli_generates_seeded("olmo3-7b.yml base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 "
                                   "base_mlp_dim=48 base_num_decoder_layers=4 vocab_size=96 max_target_length=32 "
                                   "sliding_window_size=4 dtype=float32");
}
#endif

// ----------------------------------------------------------------------------------------------------------------
// llama2lti

TEST_CASE("llama2lti: learn-to-init factors collapse to the kernels the torch reference computes (factorised and "
          "general map, unscanned and scanned)",
          "[models][llama2lti]") {
  const std::string dir = test::fixture("llama2lti_model");
  const Config c = test::config_from_meta(test::read_meta(dir));
  CHECK_NOTHROW(c.validate());
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  {
    Llama m(c);
    m.load(io::load_weights(dir + "/model.safetensors", c).tensors);
    test::expect_close(m.forward(tok), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "llama2lti unscanned");
  }
  {
    Config sc = c;
    sc.scan_layers = true;
    Llama m(sc);
    m.load(io::load_weights(dir + "/model_scanned.safetensors", sc).tensors);
    test::expect_close(m.forward(tok), test::npy(dir + "/logits_scanned.npy"), test::tol::f32_logits, "llama2lti scanned");
  }
  {  // MaxText's spelling: decoder_block llama2 with learn_to_init_mode (a key this library otherwise ignores).
    Config mc = c;
    mc.decoder_block = "llama2";
    mc.set("learn_to_init_mode", "true", "test");
    Llama m(mc);
    m.load(io::load_weights(dir + "/model.safetensors", mc).tensors);
    test::expect_close(m.forward(tok), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "llama2 learn_to_init_mode");
  }
  {  // The same logits as the plain llama2 block on the collapsed kernels.
    Config lc = c;
    lc.decoder_block = "llama2";
    Llama m(lc);
    m.load(io::load_weights(dir + "/model_plain.safetensors", lc).tensors);
    test::expect_close(m.forward(tok), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "llama2 on plain kernels");
  }
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)
  const bool same = models::with_model_type<test::Backend>(c, []<class M>() { return std::is_same_v<M, Llama>; });
  CHECK(same);
#endif
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits / generate: a llama2lti MaxText checkpoint (unscanned, scanned, and as llama2 with "
          "learn_to_init_mode) matches the reference",
          "[models][llama2lti][cli]") {
  const std::string dir = test::fixture("llama2lti_model");
  const std::string yml = test::write_fixture_yml(
      dir, (std::filesystem::current_path() / ("maxtext_test_lti_" + std::to_string(::getpid()) + ".yml")).string());
  test::check_cli_logits(dir, "--config " + yml + " --weights " + dir + "/model.safetensors", test::tol::f32_logits);
  test::check_cli_logits(dir, "--config " + yml + " --weights " + dir + "/model_scanned.safetensors scan_layers=true",
                         test::tol::f32_logits, "logits_scanned.npy");
  test::check_cli_logits(dir, "--config " + yml + " --weights " + dir + "/model.safetensors decoder_block=llama2 "
                              "learn_to_init_mode=true", test::tol::f32_logits);
  const std::string text = test::run_cli("generate --config " + yml + " --weights " + dir +
                                         "/model.safetensors --tokens 1,2,3 --max-new-tokens 4");
  CHECK(text.find("tokens[0]: ") != std::string::npos);
  std::remove(yml.c_str());
}
#endif

TEST_CASE("llama2lti: incomplete or inconsistent learn-to-init factors are refused by name", "[models][llama2lti][errors]") {
  const std::string dir = test::fixture("llama2lti_model");
  const Config c = test::config_from_meta(test::read_meta(dir));
  const io::TensorMap raw = io::read_safetensors(dir + "/model.safetensors");
  io::TensorMap t = raw;
  t.tensors.erase("decoder.layers_0.self_attention.key.B");
  expect_error<IoError>([&] { (void)io::canonicalize_maxtext(t, c); }, "missing tensor decoder.layers_0.self_attention.key.B");
  t = raw;
  t.tensors.erase("decoder.layers_1.self_attention.out.C");
  expect_error<IoError>([&] { (void)io::canonicalize_maxtext(t, c); },
                        "decoder.layers_1.self_attention.out.W has no teacher tensor decoder.layers_1.self_attention.out.C");
  t = raw;
  t.add("decoder.layers_0.self_attention.value.kernel", raw.at("decoder.layers_0.self_attention.value.C"));
  expect_error<IoError>([&] { (void)io::canonicalize_maxtext(t, c); },
                        "decoder.layers_0.self_attention.value.kernel and learn-to-init factors");
  t = raw;
  t.tensors["decoder.layers_0.self_attention.query.A"] = raw.at("decoder.layers_0.self_attention.query.A").narrow(0, 0, 5);
  expect_error<ShapeError>([&] { (void)io::canonicalize_maxtext(t, c); }, "query.A f32 [5,4]: expected [6 (teacher heads)");
  t = raw;
  t.tensors["decoder.layers_1.self_attention.key.W"] = raw.at("decoder.layers_1.self_attention.key.W").narrow(3, 0, 4);
  expect_error<Error>([&] { Llama m(c); m.load(io::canonicalize_maxtext(t, c)); }, "decoder.layers_1.self_attention.key.kernel");
}
