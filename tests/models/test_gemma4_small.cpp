// The gemma4_small decoder block (families/gemma4/gemma4_small.hpp: Gemma 4 E2B / E4B) against the PyTorch float64 fixtures
// of tests/reference/gemma4_small_reference.py: an E2B-shaped 10-layer model (period 5, per-layer inputs, layers 6-9
// reading the keys and values of layers 5 and 4, double-wide MLPs there) and an E4B-shaped 8-layer model (period 6,
// its own global kv-head count, layers 6-7 sharing with layer 4): logits, every layer's output and the per-layer
// inputs; prefill + incremental decode and ragged rows through a cache that holds no slot for the shared layers;
// the same weights in Hugging Face's Gemma 4 layout; the E2B / E4B configs and their parameter counts; the registry
// and the CLI; and the errors for inputs the block cannot take.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/gemma4/gemma4_small.hpp"
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
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;
using Small = models::Transformer<P32, layers::Gemma4SmallDecoderLayer>;
using SmallBf = models::Transformer<PBf, layers::Gemma4SmallDecoderLayer>;

namespace {

const char* const kCases[] = {"gemma4_small_e2b_model", "gemma4_small_e4b_model"};

template <class Model>
void check_model(const std::string& name, const std::string& file, const test::LayerTolerance& tol) {
  const std::string dir = test::fixture(name);
  const Config c = test::config_from_meta(test::read_meta(dir));
  Model m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  const auto cap = test::check_model_fixture(m, dir, name, tol, std::is_same_v<typename Model::A, float>);
  test::expect_close(cap.at("decoder.per_layer_embedder"), test::npy(dir + "/per_layer_inputs.npy"), tol(0),
                     name + ".per_layer_inputs");
}

}  // namespace

TEST_CASE("Gemma 4 small (E2B / E4B shapes: per-layer inputs, KV-shared layers) matches the torch model, with "
          "incremental and ragged decoding", "[models][gemma4_small]") {
  for (const char* name : kCases) check_model<Small>(name, "model.safetensors", [](std::int64_t) { return test::tol::f32_logits; });
}

// bf16 end to end (the layers cannot run alone here: shared layers need their donor's cache and every layer its
// per-layer input). Every op rounds to 2^-8 relative; one layer is ~20 roundings of O(1) values (norms, attention,
// GeGLU, the per-layer-input gate), which the post norms scale to each branch's size: measured 0.019 (E2B) and 0.028
// (E4B) max abs after layer 0, about 5-7 ulps. Those errors stay in the residual stream and later layers add their
// own (and attention partly amplifies them), so the bound grows with depth: 0.04 per layer, plus 6% relative.
TEST_CASE("Gemma 4 small in bfloat16 stays within a bf16 bound that grows with depth", "[models][gemma4_small][bf16]") {
  for (const char* name : kCases) {
    check_model<SmallBf>(name, "model.safetensors",
                         [](std::int64_t i) { return testing::Tolerance{0.06, 0.04 * static_cast<double>(i + 1)}; });
  }
}

TEST_CASE("Gemma 4 small: KV-shared layers keep no cache and read their donor's, as gemma4_small.py assigns them",
          "[models][gemma4_small]") {
  const Config e2b = test::config_from_meta(test::read_meta(test::fixture("gemma4_small_e2b_model")));
  // period 5: layers 4 and 9 are global; the last 4 layers share: 6, 7, 8 with layer 5 (local), 9 with layer 4
  const std::vector<std::int64_t> donors = {-1, -1, -1, -1, -1, -1, 5, 5, 5, 4};
  for (std::int64_t i = 0; i < 10; ++i) CHECK(layers::gemma4_small_kv_donor(e2b, i) == donors[static_cast<std::size_t>(i)]);
  CHECK(layers::gemma4_small_attention_type(e2b, 4) == layers::AttentionType::global);
  CHECK(layers::gemma4_small_attention_type(e2b, 5) == layers::AttentionType::local_sliding);
  Small m(e2b);
  auto cache = m.make_cache(1, 16);
  for (std::size_t i = 0; i < 10; ++i) CHECK(cache.layer(i).buffers.size() == (i < 6 ? 2u : 0u));
  // a shared layer run on its own has no donor to read
  test::Backend be;
  layers::Gemma4SmallDecoderLayer<P32> shared(e2b, {7, "decoder.layers_7", "", ""});
  const auto params = models::load_layer_params<P32>(
      shared, io::read_safetensors(test::fixture("gemma4_small_e2b_model") + "/model.safetensors"), be,
      "decoder.layers_7");
  const AnyTensor x = test::npy(test::fixture("gemma4_small_e2b_model") + "/act_decoder.layers_6.npy");
  CHECK_THROWS_WITH(models::run_layer<P32>(shared, params, be, x),
                    Catch::Contains("layer 7 reads the keys and values of layer 5 and its per-layer input: run it inside "
                                    "models::Transformer"));
}

TEST_CASE("gemma4_small: the E2B and E4B configs build the parameter trees MaxText does, and bad input is refused by "
          "name", "[models][registry][gemma4_small][errors]") {
  // E2B: 35 layers of period 5, the last 20 KV-shared (no k, v, k norm) with 2 * mlp_dim MLPs; per layer q [D,N,H],
  // o [N,H,D], q norm, 4 norms, the per-layer gate [D, Dp], projection [Dp, D] and its norm, the layer scalar; global
  // layers (i % 5 == 4) with head dim GH. PLE: table [V, L*Dp], projection [D, L*Dp], norm [Dp]; tied embedding, norm.
  auto count = [](const Config& c, std::int64_t period) {
    const std::int64_t D = c.emb_dim, N = c.num_query_heads, K = c.num_kv_heads, V = c.vocab_size, L = c.num_decoder_layers;
    const std::int64_t Dp = c.hidden_size_per_layer_input, first = L - c.num_kv_shared_layers;
    std::int64_t n = V * D + D + V * L * Dp + D * L * Dp + Dp;
    for (std::int64_t i = 0; i < L; ++i) {
      const std::int64_t H = i % period == period - 1 ? c.global_head_dim : c.head_dim;
      const bool shared = i >= first;
      const std::int64_t F = c.mlp_dim * (shared && c.use_double_wide_mlp ? 2 : 1);
      n += 2 * D * N * H + H + (shared ? 0 : 2 * D * K * H + H) + 4 * D + 3 * D * F + 2 * D * Dp + D + 1;
    }
    return n;
  };
  const Config e2b = io::load_config("", {"model_name=gemma4-e2b"});
  const Config e4b = io::load_config("", {"model_name=gemma4-e4b"});
  CHECK((e2b.is("gemma4_small") && e4b.is("gemma4_small")));
  CHECK(Small(e2b).num_params() == count(e2b, 5));
  CHECK(Small(e4b).num_params() == count(e4b, 6));
  // Without the embedding tables (token and per-layer), the "effective" sizes of the names: E2B 1.8B, E4B 3.9B
  // (computed from the ymls; the published cards give about 2B and 4B).
  auto effective = [](const Config& c) {
    return static_cast<double>(Small(c).num_params() - c.vocab_size * (c.emb_dim + c.num_decoder_layers * c.hidden_size_per_layer_input));
  };
  CHECK((effective(e2b) > 1.7e9 && effective(e2b) < 2.1e9));
  CHECK((effective(e4b) > 3.7e9 && effective(e4b) < 4.1e9));
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
  Config f32 = e2b;
  f32.dtype = "float32";
  const bool same = models::with_model_type<test::Backend>(f32, []<class M>() { return std::is_same_v<M, Small>; });
  CHECK(same);
#endif
  const Config good = test::config_from_meta(test::read_meta(test::fixture("gemma4_small_e2b_model")));
  Config bad = good;
  bad.num_kv_shared_layers = 10;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("num_kv_shared_layers (10) must be below num_decoder_layers (10)"));
  bad = good;
  bad.vocab_size_per_layer_input = 0;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("must both be > 0 (per-layer inputs) or both 0"));
  bad = good;
  bad.share_kv_projections = true;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("num_kv_shared_layers > 0 is not compatible with fused_qkv or "
                                                    "share_kv_projections"));
  bad = good;
  bad.num_experts = 4;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("gemma4_small has no MoE"));
  bad = good;
  bad.vocab_size_per_layer_input = 32;
  CHECK_THROWS_WITH(Small(bad), Catch::Contains("vocab_size_per_layer_input (32) must cover vocab_size (64)"));
  bad = good;
  bad.num_kv_shared_layers = 6;  // layers 4..9 share; layer 4 is the first global one: no earlier global donor
  CHECK_THROWS_WITH(Small(bad), Catch::Contains("layer 4 is KV-shared (num_kv_shared_layers = 6) but no earlier "
                                                "non-shared layer has its attention type (global)"));
  // A shared layer's checkpoint with its own key kernel, or without its per-layer gate.
  io::TensorMap t = io::read_safetensors(test::fixture("gemma4_small_e2b_model") + "/model.safetensors");
  t.tensors.emplace("decoder.layers_7.self_attention.key.kernel", t.tensors.at("decoder.layers_5.self_attention.key.kernel"));
  t.tensors.erase("decoder.layers_2.per_layer_input_gate.kernel");
  Small m(good);
  CHECK_THROWS_WITH(m.load(t), Catch::Contains("decoder.layers_7.self_attention.key.kernel") &&
                                   Catch::Contains("decoder.layers_2.per_layer_input_gate.kernel"));
}

TEST_CASE("Gemma 4 small from Hugging Face: the MaxText fixtures in Gemma4ForConditionalGeneration's layout (as "
          "MaxText's converter maps it) give the MaxText logits", "[models][gemma4_small][hf]") {
  for (const char* name : kCases) {
    const Config fixture = test::config_from_meta(test::read_meta(test::fixture(name)));
    const Config c = *io::read_weights_config(test::fixture(name) + "/hf");
    CHECK(c.is("gemma4_small"));
    // the pattern period, by model_name as MaxText picks it: gemma4-e2b (5) or gemma4-e4b (6)
    CHECK(layers::gemma4_small_pattern_length(c) == layers::gemma4_small_pattern_length(fixture));
    CHECK((c.hidden_size_per_layer_input == fixture.hidden_size_per_layer_input &&
           c.vocab_size_per_layer_input == fixture.vocab_size_per_layer_input &&
           c.num_kv_shared_layers == fixture.num_kv_shared_layers && c.use_double_wide_mlp == fixture.use_double_wide_mlp));
    CHECK((c.global_head_dim == fixture.global_head_dim && c.global_num_kv_heads == fixture.global_num_kv_heads));
    CHECK(!c.share_kv_projections);
    check_model<Small>(name, "hf", [](std::int64_t) { return test::tol::f32_logits; });
  }
}

TEST_CASE("Gemma 4 small from Hugging Face: what gemma4_small cannot express, and malformed files, are refused by name",
          "[models][gemma4_small][hf][errors]") {
  const std::string dir = test::fixture("gemma4_small_e2b_model") + "/hf";
  const nlohmann::json good = nlohmann::json::parse(io::read_text_file(dir + "/config.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    nlohmann::json j = good;
    edit(j["text_config"]);
    CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains(what));
  };
  refused([](auto& t) { t["attention_k_eq_v"] = true; }, "attention_k_eq_v = true in a Gemma 4 small model");
  refused([](auto& t) { t["enable_moe_block"] = true; }, "enable_moe_block = true in a Gemma 4 small model");
  refused([](auto& t) { t["layer_types"][3] = "full_attention"; }, "layer_types[3] is \"full_attention\"");
  refused([](auto& t) { t.erase("vocab_size_per_layer_input"); }, "vocab_size_per_layer_input");

  const Config c = *io::read_weights_config(dir);
  const io::TensorMap raw = io::read_safetensors_any(dir + "/model.safetensors");
  const std::string r = "model.language_model.";
  io::TensorMap t = raw;
  t.tensors.erase(r + "per_layer_model_projection.weight");
  t.tensors.erase(r + "layers.3.per_layer_projection.weight");
  CHECK_THROWS_WITH(io::import_hf_gemma4(t, c), Catch::Contains("missing tensor " + r + "per_layer_model_projection.weight") &&
                                                  Catch::Contains("missing tensor " + r + "layers.3.per_layer_projection.weight"));
  // A file may keep the shared layers' unused key / value projections (they are skipped); other extras are refused.
  t = raw;
  t.tensors.emplace(r + "layers.8.self_attn.k_proj.weight", t.tensors.at(r + "layers.5.self_attn.k_proj.weight"));
  t.tensors.emplace(r + "layers.8.self_attn.v_proj.weight", t.tensors.at(r + "layers.5.self_attn.v_proj.weight"));
  CHECK_NOTHROW(io::import_hf_gemma4(t, c));
  t.tensors.emplace(r + "layers.8.extra.weight", t.tensors.at(r + "layers.5.self_attn.v_proj.weight"));
  CHECK_THROWS_WITH(io::import_hf_gemma4(t, c), Catch::Contains("unexpected tensor " + r + "layers.8.extra.weight"));
  t = raw;
  t.tensors.at(r + "per_layer_model_projection.weight") = t.tensors.at(r + "embed_tokens.weight");
  Small m(c);
  CHECK_THROWS_WITH(m.load(io::import_hf_gemma4(t, c)),
                    Catch::Contains("decoder.per_layer_embedder.per_layer_model_projection.kernel: expected shape"));
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits / generate: gemma4_small from MaxText checkpoints and from the model configs with seeded "
          "init", "[models][gemma4_small][cli]") {
  // The E2B fixture's MaxText tree names model_name gemma4-e2b (its pattern), so a config file saying so would take
  // the real E2B sizes from configs/models/gemma4-e2b.yml, as MaxText does: it runs from hf/ only.
  test::check_cli_logits(test::fixture("gemma4_small_e2b_model"), "--weights " + test::fixture("gemma4_small_e2b_model") + "/hf",
                         test::tol::f32_logits);
  test::check_cli_checkpoints(test::fixture("gemma4_small_e4b_model"), test::tol::f32_logits);  // model and hf/
  const std::string tiny = " base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 global_head_dim=32 "
                           "base_mlp_dim=64 base_num_decoder_layers=10 vocab_size=96 hidden_size_per_layer_input=8 "
                           "vocab_size_per_layer_input=96 num_kv_shared_layers=4 max_target_length=32 "
                           "sliding_window_size=4 dtype=float32";
  test::check_cli_generates_seeded("gemma4-e2b.yml" + tiny);
  test::check_cli_generates_seeded("gemma4-e4b.yml" + tiny + " base_num_decoder_layers=8 num_kv_shared_layers=2");
}
#endif

TEST_CASE("KVCache is move-only, and clone() forks a sequence: each copy continues on its own (here with KV-shared "
          "layers, which hold no buffers)", "[models][gemma4_small][cache]") {
  static_assert(!std::is_copy_constructible_v<models::KVCache<P32>> && !std::is_copy_assignable_v<models::KVCache<P32>>);
  static_assert(std::is_nothrow_move_constructible_v<models::KVCache<P32>>);
  const std::string dir = test::fixture("gemma4_small_e2b_model");
  const Config c = test::config_from_meta(test::read_meta(dir));
  Small m(c);
  m.load(io::load_weights(dir + "/model.safetensors", c).tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const std::int64_t Bn = tok.dim(0), V = c.vocab_size;
  auto max_diff = [&](const Tensor<float, 3>& got, const Tensor<float, 3>& want, std::int64_t from) {
    double d = 0;
    for (std::int64_t i = 0; i < Bn; ++i) {
      for (std::int64_t t = 0; t < got.dim(1); ++t) {
        for (std::int64_t v = 0; v < V; ++v) d = std::max(d, std::fabs(static_cast<double>(got(i, t, v) - want(i, from + t, v))));
      }
    }
    return d;
  };
  const auto full = m.forward(tok);
  auto cache = m.make_cache(Bn, 16);
  m.forward(test::cols(tok, 0, 4), cache);
  auto fork = cache.clone(m.backend());
  m.forward(test::cols(tok, 4, 2), cache);
  // The fork takes other tokens at positions 4-5: with shared buffers they would replace the original's keys there.
  auto other = test::cols(tok, 4, 2);
  for (std::int64_t i = 0; i < other.size(); ++i) other.data()[i] = static_cast<std::int32_t>((other.data()[i] + 1) % V);
  const auto forked = m.forward(other, fork);
  const auto rest = m.forward(test::cols(tok, 6, 3), cache);
  CHECK(max_diff(rest, full, 6) < 1e-4);
  Tensor<std::int32_t, 2> alt({Bn, 6});
  for (std::int64_t i = 0; i < Bn; ++i) {
    for (std::int64_t j = 0; j < 6; ++j) alt(i, j) = j < 4 ? tok(i, j) : other(i, j - 4);
  }
  CHECK(max_diff(forked, m.forward(alt), 4) < 1e-4);
  CHECK((cache.length(0) == 9 && fork.length(0) == 6));
  models::KVCache<P32> moved = std::move(fork);
  CHECK(moved.length(1) == 6);
}
