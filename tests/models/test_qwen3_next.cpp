// The qwen3_next decoder block (families/qwen3_next/qwen3_next.hpp) against the PyTorch float64 fixtures of
// tests/reference/qwen3_next_reference.py (MaxText e591f30 qwen3.py): a Gated DeltaNet layer (its delta-rule output
// too) and a gated full-attention layer, in f32 and bf16; a 4-layer model (3 Gated DeltaNet layers, then full
// attention) from unscanned and scanned (`layer_j`) trees: logits, activations, the recurrent and conv states and the
// KV cache after the prompt, incremental and ragged decoding, a prompt split in two; sessions on a recurrent cache;
// and the errors for what the block cannot do. The same for qwen3_5 (Qwen3.5's text decoder: Qwen3-Next's layers with
// MaxText's multimodal rotary embedding at text positions) from tests/reference/qwen3_5_reference.py, whose Hugging
// Face checkpoint has Qwen3.5's own layout.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/checkpoint.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/families/qwen3_next/import.hpp"
#include "maxtext/families/qwen3_next/qwen3_5.hpp"
#include "maxtext/families/qwen3_next/qwen3_next.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/layers/rotary.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/session.hpp"
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
using Qwen3Next = models::Transformer<P32, layers::Qwen3NextDecoderLayer>;

namespace {

// bf16 layer: every MaxText op rounded to bf16 (2^-8 relative) through norm -> projections -> conv -> delta rule (f32
// inside, one rounding) -> gated norm -> out projection -> residual -> norm -> MoE + gated shared expert -> residual,
// ~12 roundings on values of magnitude ~2, as the other MoE blocks' bound. Routing: the layer fixtures keep the top-k
// decisions >= 0.03 from a tie (meta min_routing_margin), above the bf16 error of a gate logit (~0.01).
constexpr testing::Tolerance kBf16Layer{4.0 / 128.0, 0.06};
// The Gated DeltaNet's gated RMSNorm divides each head's delta-rule output by its RMS, which is small here (q is
// scaled by Dk^-0.5 after the L2 norm: outputs of RMS ~0.05-0.1 in the fixture), so it magnifies the absolute
// rounding error of its input 10-20x: f32 1e-5 relative + 5e-6 absolute (the other f32 layers: 2e-6), bf16
// 2^-5 relative + 0.12 absolute (twice the other bf16 layers' 0.06; measured 0.087 at the worst element).
constexpr testing::Tolerance kF32Gdn{1e-5, 5e-6};
// The whole models' layer outputs: tol::f32_logits with 2e-5 absolute instead of 1e-5, since the Gated DeltaNet
// layers' error (above: magnified 10-20x by the gated norm) stays in the residual stream. Measured: 1.24e-5 on one of
// 704 outputs (0.0134) of qwen3_5's layer 3 on the 2-core AVX2 machine with g++ 12 -O3. The logits keep f32_logits.
constexpr testing::Tolerance kF32ModelLayer{1e-4, 2e-5};
constexpr testing::Tolerance kBf16Gdn{4.0 / 128.0, 0.12};
// The full-attention layer's cached keys and values, after three Gated DeltaNet layers: the same residual-stream
// error as kF32ModelLayer, then the per-head key norm divides by each projected head's RMS (the cached keys and
// values have RMS ~1 in the fixture, the residual stream ~2), so twice its absolute bound. Measured: 1.97e-5 on one of
// 1408 keys of qwen3_5's layer 3 with g++ 12 -O1 (the test command's level for this unit: no fused multiply-adds),
// under 1.2e-5 at -O3.
constexpr testing::Tolerance kF32AttentionCache{1e-4, 4e-5};

template <class P>
void check_layer(const std::string& name, testing::Tolerance tol) {
  const std::string dir = test::fixture(name);
  const auto meta = test::read_meta(dir);
  const Config c = test::config_from_meta(meta);
  const std::int64_t index = meta.at("layer_index").get<std::int64_t>();
  test::Backend be;
  layers::Qwen3NextDecoderLayer<P> layer(c, {index, "layer", "layer.attention", "layer.mlp"});
  const bool full = layers::qwen3_next_is_full_attention(index, c.inhomogeneous_layer_cycle_interval);
  CHECK(layer.is_full_attention() == full);
  CHECK(layer.cache_spec().size() == (full ? 2u : 0u));
  CHECK(layer.state_spec().size() == (full ? 0u : 2u));
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  const Tensor<std::int32_t, 2> pos = test::int_tensor(test::npy(dir + "/positions.npy"));
  layers::Capture cap({"layer.attention", "layer.attention.core", "layer.mlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "/x.npy"), nullptr, &pos, &cap);
  test::expect_close(y, test::npy(dir + "/out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.attention"), test::npy(dir + "/attn.npy"), tol, name + ".attention");
  test::expect_close(cap.at("layer.mlp"), test::npy(dir + "/mlp.npy"), tol, name + ".mlp");
  CHECK(cap.has("layer.attention.core") == !full);
  if (!full) test::expect_close(cap.at("layer.attention.core"), test::npy(dir + "/core.npy"), tol, name + ".core");
}

/// A layer's recurrent state [B, Hv*Dk*Dv] or conv state [B, (Kc-1)*C] on the host, shaped as the fixture's.
AnyTensor state_of(const test::Backend& be, models::KVCache<P32>& cache, std::size_t layer, std::size_t which,
                   std::vector<std::int64_t> shape) {
  return AnyTensor::from(test::to_host(be, cache.layer(layer).states.at(which))).reshaped(std::move(shape));
}

void check_model(const std::string& file, const std::vector<std::string>& overrides = {},
                 const std::string& fixture = "qwen3_next_model") {
  const std::string dir = test::fixture(fixture);
  Config c = test::config_from_meta(test::read_meta(dir));
  for (const auto& o : overrides) io::apply_override(c, o);
  Qwen3Next m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const std::int64_t Bn = tok.dim(0), T = tok.dim(1);
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  auto cache = m.make_cache(Bn, T);
  const auto full = m.forward(tok, cache, opt);
  const std::string name = fixture + "(" + file + ")";
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, name + ".logits");
  for (std::int64_t i = 0; i < c.num_decoder_layers; ++i) {
    const std::string a = "decoder.layers_" + std::to_string(i);
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), kF32ModelLayer, name + "." + a);
  }
  test::expect_close(cap.at("decoder.decoder_norm"), test::npy(dir + "/act_decoder.decoder_norm.npy"),
                     test::tol::f32_logits, name + ".decoder_norm");
  // The cache after the prompt: Gated DeltaNet layers' recurrent state [B,Hv,Dk,Dv] and conv state (the last Kc-1
  // pre-conv rows, [B,Kc-1,conv_dim]); the attention layer's keys (after norm + RoPE) and values.
  const std::int64_t Hv = c.gdn_num_value_heads, Dk = c.gdn_key_head_dim, Dv = c.gdn_value_head_dim,
                     C = 2 * c.gdn_num_key_heads * Dk + Hv * Dv, Kc = c.gdn_conv_kernel_dim;
  test::Backend be;
  for (std::int64_t i = 0; i < c.num_decoder_layers; ++i) {
    const std::string l = "decoder.layers_" + std::to_string(i);
    const auto li = static_cast<std::size_t>(i);
    if (layers::qwen3_next_is_full_attention(i, c.inhomogeneous_layer_cycle_interval)) {
      const AnyTensor k = AnyTensor::from(test::to_host(be, cache.layer(li).buffers.at(0)));
      const AnyTensor v = AnyTensor::from(test::to_host(be, cache.layer(li).buffers.at(1)));
      const std::vector<std::int64_t> kv{Bn, T, c.num_kv_heads, c.head_dim};
      test::expect_close(k.reshaped(kv), test::npy(dir + "/cached_key_" + l + ".npy"), kF32AttentionCache,
                         name + ".cached_key " + l);
      test::expect_close(v.reshaped(kv), test::npy(dir + "/cached_value_" + l + ".npy"), kF32AttentionCache,
                         name + ".cached_value " + l);
      CHECK(cache.layer(li).states.empty());
    } else {
      test::expect_close(state_of(be, cache, li, 0, {Bn, Hv, Dk, Dv}), test::npy(dir + "/state_" + l + ".npy"),
                         test::tol::f32_logits, name + ".state " + l);
      test::expect_close(state_of(be, cache, li, 1, {Bn, Kc - 1, C}), test::npy(dir + "/conv_state_" + l + ".npy"),
                         test::tol::f32_logits, name + ".conv_state " + l);
      CHECK(cache.layer(li).buffers.empty());
    }
  }
  CHECK(cache.recurrent());
  // Prefill of 4 tokens then one per step, and two right-padded rows decoded together (row_lengths).
  test::check_cached_decoding(m, tok, full, test::tol::decode_step, name);
  // The prompt in two chunks (5 + 6 tokens): the second continues the first chunk's states.
  auto split = m.make_cache(Bn, T);
  const auto first = m.forward(test::cols(tok, 0, 5), split);
  const auto second = m.forward(test::cols(tok, 5, T - 5), split);
  test::expect_close(first, AnyTensor::from(full).narrow(1, 0, 5), test::tol::decode_step, name + ".split first");
  test::expect_close(second, AnyTensor::from(full).narrow(1, 5, T - 5), test::tol::decode_step, name + ".split second");
}

}  // namespace

TEST_CASE("Qwen3NextDecoderLayer: a Gated DeltaNet layer and a gated full-attention layer (each with the MoE and its "
          "sigmoid-gated shared expert) match the torch fixtures", "[layers][qwen3_next]") {
  check_layer<P32>("qwen3_next_gdn_layer", kF32Gdn);
  check_layer<P32>("qwen3_next_attn_layer", test::tol::f32_layer);
  check_layer<PBf>("qwen3_next_gdn_layer", kBf16Gdn);
  check_layer<PBf>("qwen3_next_attn_layer", kBf16Layer);
}

TEST_CASE("Qwen3-Next model: 3 Gated DeltaNet layers + full attention match the torch model, unscanned and scanned "
          "(logits, activations, recurrent / conv states, KV cache, incremental, ragged and split decoding)",
          "[models][qwen3_next]") {
  check_model("model.safetensors");
  check_model("model_scanned.safetensors", {"scan_layers=true"});
}

TEST_CASE("qwen3_next from a Hugging Face checkpoint (Qwen3NextForCausalLM names and config.json) gives the MaxText "
          "model's logits, and what the block cannot express is refused by name", "[models][qwen3_next][hf]") {
  const std::string dir = test::fixture("qwen3_next_model");
  const Config c = io::config_from_hf_file(dir + "/hf/config.json");
  CHECK(c.is("qwen3_next"));
  CHECK(c.inhomogeneous_layer_cycle_interval == 4);
  CHECK(c.gdn_num_value_heads == 4);
  CHECK(c.partial_rotary_factor == 0.25);
  Qwen3Next m(c);
  m.load(io::load_weights(dir + "/hf/model.safetensors", c).tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  test::expect_close(m.forward(tok), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "hf logits");
  const nlohmann::json base = nlohmann::json::parse(io::read_text_file(dir + "/hf/config.json"));
  const auto refused = [&](const char* key, nlohmann::json value, const std::string& expect) {
    nlohmann::json j = base;
    j[key] = std::move(value);
    INFO(key);
    CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains(expect));
  };
  refused("mlp_only_layers", {1}, "mlp_only_layers");
  refused("shared_expert_intermediate_size", 64, "shared_expert_intermediate_size");
  refused("attention_bias", true, "attention_bias");
  refused("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "rope_scaling");
  refused("layer_types", {"full_attention", "linear_attention", "linear_attention", "full_attention"}, "layer_types[0]");
  refused("decoder_sparse_step", 2, "decoder_sparse_step");
  // A missing expert and an unexpected tensor are named.
  io::TensorMap t = io::read_safetensors(dir + "/hf/model.safetensors");
  t.tensors.erase("model.layers.1.mlp.experts.2.up_proj.weight");
  CHECK_THROWS_WITH(io::import_hf_qwen3_next(t, c), Catch::Contains("model.layers.1.mlp.experts.2.up_proj.weight"));
  io::TensorMap u = io::read_safetensors(dir + "/hf/model.safetensors");
  u.add("model.layers.0.linear_attn.extra", u.tensors.at("model.norm.weight"));
  CHECK_THROWS_WITH(io::import_hf_qwen3_next(u, c), Catch::Contains("unexpected tensor model.layers.0.linear_attn.extra"));
}

TEST_CASE("qwen3_next: a recurrent cache restarts instead of rewinding, and sessions run the conversation again",
          "[models][qwen3_next][session]") {
  const std::string dir = test::fixture("qwen3_next_model");
  const Config c = test::config_from_meta(test::read_meta(dir));
  Qwen3Next m(c);
  m.load(io::load_weights(dir + "/model.safetensors", c).tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto row0 = test::row_cols(tok, 0, 0, tok.dim(1));
  const auto ref = m.forward(row0);
  // Going back to an earlier nonzero length is refused by name (the state summarises all 6 tokens); the failed step
  // restarts the row (length 0).
  auto cache = m.make_cache(1, 16);
  m.forward(test::cols(row0, 0, 6), cache);
  cache.set_length(0, 4);
  try {
    m.forward(test::cols(row0, 4, 1), cache);
    FAIL("rewinding a recurrent cache was accepted");
  } catch (const ArgumentError& e) {
    CHECK(std::string(e.what()).find("cannot go back to an earlier length") != std::string::npos);
  }
  CHECK(cache.length(0) == 0);
  // Length 0 restarts the row: the states are not read.
  cache.reset(0);
  test::expect_close(m.forward(row0, cache), AnyTensor::from(ref), test::tol::decode_step, "restarted row");
  // A session rewinds by running the conversation again (its logits equal the full forward's at that point).
  models::Session<Qwen3Next> s(m, 16);
  std::vector<std::int32_t> ids(row0.data(), row0.data() + row0.size());
  s.append(std::vector<std::int32_t>(ids.begin(), ids.begin() + 8));
  (void)s.logits();
  s.sync(std::vector<std::int32_t>(ids.begin(), ids.begin() + 5));  // rewinds 8 -> 5
  const auto& l5 = s.logits();
  Tensor<float, 3> got({1, 1, static_cast<std::int64_t>(l5.size())});
  std::copy(l5.begin(), l5.end(), got.data());
  test::expect_close(AnyTensor::from(got), AnyTensor::from(ref).narrow(1, 4, 1), test::tol::decode_step, "session rewind");
  // All-ones segment ids (MaxText dumps) change nothing; a padding id is refused before the cache is touched, which
  // stays usable.
  Tensor<std::int32_t, 2> seg({1, 4});
  std::fill(seg.data(), seg.data() + 4, 1);
  models::ForwardOptions fo;
  fo.segment_ids = &seg;
  test::expect_close(m.forward(test::cols(row0, 0, 4), fo), AnyTensor::from(ref).narrow(1, 0, 4), test::tol::decode_step,
                     "all-ones segment ids");
  auto sc = m.make_cache(1, 16);
  m.forward(test::cols(row0, 0, 4), sc);
  seg(0, 3) = 0;
  CHECK_THROWS_WITH(m.forward(test::cols(row0, 4, 4), sc, fo), Catch::Contains("segment id 0"));
  CHECK(sc.length(0) == 4);
  test::expect_close(m.forward(test::cols(row0, 4, 4), sc), AnyTensor::from(ref).narrow(1, 4, 4), test::tol::decode_step,
                     "after a refused step");
}

TEST_CASE("qwen3_next: the registry builds the block, and inconsistent Gated DeltaNet keys are refused by name",
          "[models][registry][qwen3_next][errors]") {
  // The 80B config: MaxText's parameter tree (qwen3.py) counted independently. Gated DeltaNet layers: qkvz
  // [D, 2*16*128 + 2*32*128], ba [D, 64], conv [4, 1, 8192], A_log and dt_bias [32], norm [128], out [4096, D];
  // full-attention layers: query [D, 16, 512], key / value [D, 2, 256], out [4096, D], qk norms [256]; every layer: two
  // norms, gate [D, 512], experts 3 x [512, D, 512], shared expert 3 x [D, 512] and its gate [D, 1].
  {
    const Config big = io::load_config("", {"model_name=qwen3-next-80b-a3b"});
    CHECK(big.is("qwen3_next"));
    const std::int64_t D = 2048, V = 151936;
    const std::int64_t gdn = D * 12288 + D * 64 + 4 * 8192 + 2 * 32 + 128 + 4096 * D;
    const std::int64_t attn = D * 16 * 512 + 2 * D * 2 * 256 + 4096 * D + 2 * 256;
    const std::int64_t moe = D * 512 + 3 * 512 * D * 512 + 3 * D * 512 + D;
    CHECK(Qwen3Next(big).num_params() == 2 * V * D + 36 * gdn + 12 * attn + 48 * (moe + 2 * D) + D);
    // Published: 80B parameters in total (Qwen3-Next-80B-A3B).
    CHECK(std::fabs(static_cast<double>(Qwen3Next(big).num_params()) / 80e9 - 1.0) < 0.01);
  }
  const std::string dir = test::fixture("qwen3_next_model");
  const Config base = test::config_from_meta(test::read_meta(dir));
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry lists every block: checked once, on the CPU
  bool built = false;
  models::dispatch_block<P32>(base, [&]<class M>() { built = std::is_same_v<M, Qwen3Next>; });
  CHECK(built);
#endif
  const auto refused = [&](const std::string& override_, const std::string& key) {
    Config c = base;
    io::apply_override(c, override_);
    try {
      Qwen3Next m(c);
      FAIL("accepted " << override_);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(key) != std::string::npos);
    }
  };
  refused("gdn_num_value_heads=3", "gdn_num_value_heads");
  refused("partial_rotary_factor=0.2", "partial_rotary_factor");  // int(16 * 0.2) = 3 lanes: odd
  refused("use_qk_norm_in_gdn=false", "use_qk_norm_in_gdn");
  refused("use_qk_norm=true", "use_qk_norm");
  refused("gdn_conv_kernel_dim=0", "gdn_conv_kernel_dim");
  refused("rope_type=yarn", "rope_type");
  {
    Config c = base;
    io::apply_override(c, "scan_layers=true");
    io::apply_override(c, "base_num_decoder_layers=6");
    CHECK_THROWS_WITH(Qwen3Next(c), Catch::Contains("inhomogeneous_layer_cycle_interval"));
  }
  // A scanned tree whose sub-layer index lies outside the cycle names the tensor.
  io::TensorMap bad;
  Tensor<float, 2> t({32, 1});
  bad.add("decoder.layers.layer_7.input_layernorm.scale", AnyTensor::from(t, "bad.safetensors"));
  Config sc = base;
  io::apply_override(sc, "scan_layers=true");
  CHECK_THROWS_WITH(io::canonicalize_maxtext(bad, sc), Catch::Contains("layer_7"));
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits / generate: qwen3_next from MaxText checkpoints (the last tokens decoded through the "
          "recurrent cache) and from the 80B config with seeded init", "[models][qwen3_next][cli]") {
  test::check_cli_checkpoints(test::fixture("qwen3_next_model"), test::tol::f32_logits);  // model, scanned and hf/
  test::check_cli_checkpoints(test::fixture("qwen3_5_model"), test::tol::f32_logits);
  test::check_cli_generates_seeded(
      "qwen3-next-80b-a3b.yml base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 "
      "base_moe_mlp_dim=32 base_mlp_dim=32 num_experts=4 num_experts_per_tok=2 base_num_decoder_layers=4 "
      "vocab_size=96 max_target_length=32 gdn_num_key_heads=2 gdn_num_value_heads=4 gdn_key_head_dim=16 "
      "gdn_value_head_dim=16 dtype=float32");
}
#endif

TEST_CASE("Qwen3.5 (qwen3_5: Qwen3-Next layers, multimodal RoPE at text positions) matches the torch model, unscanned "
          "and scanned: logits, activations, states, KV cache, incremental, ragged and split decoding",
          "[models][qwen3_5]") {
  const Config c = test::config_from_meta(test::read_meta(test::fixture("qwen3_5_model")));
  CHECK(c.is("qwen3_5"));
  CHECK(c.use_mrope);
  const layers::RopeSpec rope = layers::select_rope(c, {c.head_dim, "", 0.0, 0.0, false, false});
  CHECK(rope.kind == layers::RopeKind::mrope);
  CHECK(rope.rot_dims == 8);
  check_model("model.safetensors", {}, "qwen3_5_model");
  check_model("model_scanned.safetensors", {"scan_layers=true"}, "qwen3_5_model");
}

TEST_CASE("qwen3_5 from Hugging Face: Qwen3.5's layout (Qwen3_5MoeForConditionalGeneration, model.language_model., "
          "separate q/k/v, z, b, a projections, 3-D experts, nested text_config) gives the MaxText model's logits, and "
          "what the block cannot express is refused by name", "[models][qwen3_5][hf]") {
  const std::string dir = test::fixture("qwen3_5_model");
  const Config c = io::config_from_hf_file(dir + "/hf/config.json");
  CHECK(c.is("qwen3_5"));
  CHECK(c.use_mrope);
  CHECK(c.mrope_section() == std::vector<std::int64_t>{2, 1, 1});
  CHECK(c.partial_rotary_factor == 0.25);
  Qwen3Next m(c);
  m.load(io::load_weights(dir + "/hf/model.safetensors", c).tensors);  // its vision and mtp tensors are not read
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  test::expect_close(m.forward(tok), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "qwen3_5 hf logits");
  const nlohmann::json base = nlohmann::json::parse(io::read_text_file(dir + "/hf/config.json"));
  const auto refused = [&](const std::string& expect, const auto& edit) {
    nlohmann::json j = base;
    edit(j);
    INFO(expect);
    CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains(expect));
  };
  refused("dense Qwen3.5", [](nlohmann::json& j) { j["model_type"] = "qwen3_5"; });
  refused("rope_type 'yarn'", [](nlohmann::json& j) { j["text_config"]["rope_parameters"]["rope_type"] = "yarn"; });
  refused("mrope_section", [](nlohmann::json& j) { j["text_config"]["rope_parameters"]["mrope_section"] = {2, 2, 1}; });
  refused("tie_word_embeddings", [](nlohmann::json& j) { j["tie_word_embeddings"] = true; });
  refused("mlp_only_layers", [](nlohmann::json& j) { j["text_config"]["mlp_only_layers"] = {0}; });
  // A missing half of a split projection and a misshapen expert tensor are named.
  io::TensorMap t = io::read_safetensors(dir + "/hf/model.safetensors");
  t.tensors.erase("model.language_model.layers.2.linear_attn.in_proj_z.weight");
  CHECK_THROWS_WITH(io::import_hf_qwen3_next(t, c), Catch::Contains("model.language_model.layers.2.linear_attn.in_proj_z.weight"));
  io::TensorMap u = io::read_safetensors(dir + "/hf/model.safetensors");
  u.tensors.insert_or_assign("model.language_model.layers.1.mlp.experts.down_proj",
                             u.tensors.at("model.language_model.layers.1.mlp.experts.gate_up_proj"));
  CHECK_THROWS_WITH(io::import_hf_qwen3_next(u, c), Catch::Contains("model.language_model.layers.1.mlp.experts.down_proj"));
}

TEST_CASE("qwen3_5 / use_mrope: the Qwen3.5 ymls build with their published sizes, and MRoPE keys are checked by name",
          "[models][qwen3_5][errors]") {
  // MaxText's parameter tree of the 397B text decoder, counted independently (as for the 80B above): Gated DeltaNet
  // qkvz [D, 2*16*128 + 2*64*128], ba [D, 128], conv [4, 1, 12288], A_log / dt_bias [64], norm [128], out [8192, D];
  // attention query [D, 32, 512], key / value [D, 2, 256], out [8192, D], qk norms [256]; MoE gate [D, 512], experts
  // 3 x [512, D, 1024], shared 3 x [D, 1024] and its gate [D, 1]; 45 + 15 layers.
  {
    const Config big = io::load_config("", {"model_name=qwen3.5-397b-a17b"});
    CHECK(big.is("qwen3_5"));
    CHECK(big.use_mrope);
    const std::int64_t D = 4096, V = 248320;
    const std::int64_t gdn = D * 20480 + D * 128 + 4 * 12288 + 2 * 64 + 128 + 8192 * D;
    const std::int64_t attn = D * 32 * 512 + 2 * D * 2 * 256 + 8192 * D + 2 * 256;
    const std::int64_t moe = D * 512 + 3 * 512 * D * 1024 + 3 * D * 1024 + D;
    const std::int64_t n = Qwen3Next(big).num_params();
    CHECK(n == 2 * V * D + 45 * gdn + 15 * attn + 60 * (moe + 2 * D) + D);
    CHECK(std::fabs(static_cast<double>(n) / 397e9 - 1.0) < 0.01);  // published: 397B in total
    const layers::RopeSpec rope = layers::select_rope(big, {big.head_dim, "", 0.0, 0.0, false, false});
    CHECK(rope.kind == layers::RopeKind::mrope);
    CHECK(rope.rot_dims == 64);
  }
  {
    const Config small = io::load_config("", {"model_name=qwen3.5-35b-a3b"});
    // Published: 35B in total with the vision encoder; the text decoder alone is 34.66B.
    CHECK(std::fabs(static_cast<double>(Qwen3Next(small).num_params()) / 35e9 - 1.0) < 0.015);
  }
  const Config base = test::config_from_meta(test::read_meta(test::fixture("qwen3_5_model")));
  const auto refused = [&](const std::vector<std::string>& overrides, const std::string& key) {
    Config c = base;
    try {
      for (const auto& o : overrides) io::apply_override(c, o);
      c.validate();
      Qwen3Next m(c);
      FAIL("accepted " << overrides.front());
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(key) != std::string::npos);
    }
  };
  refused({"mrope_section=[2,2,1]"}, "mrope_section");
  refused({"mrope_section=[4,4]"}, "three entries");
  refused({"mrope_section=[a,1,1]"}, "mrope_section");
  refused({"use_multimodal=true"}, "use_multimodal");
  // MaxText passes use_mrope to the Qwen family's attention only; another block would ignore it, so it is refused.
  Config llama = io::load_config("", {"model_name=llama2-7b"});
  io::apply_override(llama, "use_mrope=true");
  CHECK_THROWS_WITH(llama.validate(), Catch::Contains("use_mrope"));
}
