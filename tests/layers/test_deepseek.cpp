// MLA (both q_lora_rank cases, both KV-cache forms), MoE routing, the routed/shared MoE blocks (dropless, capacity
// dropping, MaxText's inference quirk, metrics), both DeepSeek layer kinds against the PyTorch fixtures
// (tests/reference/deepseek_reference.py); YaRN against DeepSeek-V3's reference tables; the backend kernels added for
// them (moe_route, head_matmul) against closed forms; bad configurations and weights.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/layers/attention_mla.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;

namespace {

/// The MoE variant moe.py selects by decoder block, as the families' layers pass it (layers::MoeFamily): these
/// cases drive MaxText's bare MoE modules from the fixtures' configs.
layers::MoeFamily moe_family(const Config& c) {
  if (c.is("deepseek") || c.is("deepseek4")) return layers::MoeFamily::deepseek;
  if (c.is("gpt_oss")) return layers::MoeFamily::gpt_oss;
  if (c.is("llama4")) return layers::MoeFamily::llama4;
  if (c.is("gemma4")) return layers::MoeFamily::gemma4;
  return layers::MoeFamily::generic;
}

/// test::expect_close / expect_close_scaled that also print the measured error when MAXTEXT_TEST_REPORT is set.
template <class T>
void close(const T& actual, const AnyTensor& expected, testing::Tolerance tol, const std::string& name) {
  const AnyTensor a = [&] {
    if constexpr (std::is_same_v<T, AnyTensor>) {
      return actual;
    } else {
      return AnyTensor::from(actual);
    }
  }();
  if (std::getenv("MAXTEXT_TEST_REPORT")) std::printf("%s\n", testing::compare(a, expected, tol).message(name).c_str());
  test::expect_close(a, expected, tol, name);
}
[[maybe_unused]] void close_scaled(const AnyTensor& actual, const AnyTensor& expected, double tol, const std::string& name) {
  if (std::getenv("MAXTEXT_TEST_REPORT")) {
    const auto r = testing::compare_scaled(actual, expected, tol);
    std::printf("%s (bound %.3g)\n", r.message(name).c_str(), r.tol.atol);
  }
  test::expect_close_scaled(actual, expected, tol, name);
}

std::string fx(const std::string& c) { return test::fixtures_dir() + "/" + c + "/"; }

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(io::read_text_file(path)); }

Tensor<std::int32_t, 2> int_npy(const std::string& path) {
  const auto t = test::npy(path);
  return t.to<std::int32_t, 2>({t.shape[0], t.shape[1]});
}

/// MLA as a "layer" for models::run_layer: x <- MLA(x).
template <class P>
struct MlaAsLayer {
  using A = typename P::act_t;
  using Params = typename layers::MLA<P>::Params;
  layers::MLA<P> mla;
  layers::CacheSpec cache_spec() const { return mla.cache_spec(); }
  template <class V>
  void visit(V& v, Params& p) const {
    mla.visit(v, p);
  }
  void forward(const layers::Context<P>& ctx, const Params& p, layers::LayerCache<A>& cache, View<A, 2> x) const {
    ScratchScope s(ctx.scratch);
    View<A, 2> y = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
    mla.forward(ctx, p, View<const A, 2>(x), cache, y);
    ctx.be.copy(View<const A, 2>(y), x);
  }
};

/// A MoE block (RoutedMoE / RoutedAndSharedMoE) as a "layer": x <- block(x), metrics recorded.
template <class P, class Block>
struct BlockAsLayer {
  using A = typename P::act_t;
  using Params = typename Block::Params;
  Block block;
  layers::MoeMetrics* metrics = nullptr;
  layers::CacheSpec cache_spec() const { return {}; }
  template <class V>
  void visit(V& v, Params& p) const {
    block.visit(v, p);
  }
  void forward(const layers::Context<P>& ctx, const Params& p, layers::LayerCache<A>&, View<A, 2> x) const {
    ScratchScope s(ctx.scratch);
    View<A, 2> y = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
    block.forward(ctx, p, View<const A, 2>(x), y, metrics);
    ctx.be.copy(View<const A, 2>(y), x);
  }
};

Config config_from_keys(const nlohmann::json& keys) {
  Config c;
  c.dtype = "float32";
  for (auto it = keys.begin(); it != keys.end(); ++it) c.set(it.key(), it.value().get<std::string>());
  c.derive();
  c.validate();
  return c;
}

void run_mla_case(const std::string& name, bool latent) {
  const std::string d = fx(name);
  Config c = io::load_config(d + "config.yml");
  const auto meta = read_json(d + "meta.json");
  c.q_lora_rank = meta["q_lora_rank"].get<std::int64_t>();
  c.attn_logits_soft_cap = meta["soft_cap"].get<double>();
  c.mla_naive_kvcache = !latent;
  test::Backend be;
  MlaAsLayer<P32> layer{layers::MLA<P32>(c)};
  CHECK(layer.mla.softmax_scale() == Approx(meta["softmax_scale"].get<double>()).epsilon(1e-12));
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(d + "weights.safetensors"), be);
  const auto pos = int_npy(d + "positions.npy");
  Tensor<std::int32_t, 2> seg;
  const bool has_seg = meta["segment_ids"].get<bool>();
  if (has_seg) seg = int_npy(d + "segment_ids.npy");
  const auto y = models::run_layer<P32>(layer, params, be, test::npy(d + "x.npy"), has_seg ? &seg : nullptr, &pos);
  close(y, test::npy(d + "out.npy"), test::tol::f32_layer, name + (latent ? " (latent cache)" : " (expanded)"));
}

}  // namespace

// ---- rotary ----------------------------------------------------------------------------------------------------

TEST_CASE("YaRN frequencies follow the closed form at DeepSeek-V3's sizes (low 10, high 23)", "[layers][deepseek][rope]") {
  layers::RopeSpec s;
  s.kind = layers::RopeKind::yarn;
  s.head_dim = 64;
  s.max_timescale = 10000;
  s.rope_factor = 40;
  s.original_max_position_embeddings = 4096;
  const RotaryTable t = layers::build_rotary_table(s, 2);
  CHECK(t.layout == RopeLayout::interleaved_to_halves);
  CHECK_FALSE(t.round_sincos_to_input);
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(10000.0, -2.0 * i / 64.0);
    const double ramp = std::clamp((i - 10.0) / (23.0 - 10.0), 0.0, 1.0);
    const double f = base / 40.0 * ramp + base * (1.0 - ramp);
    INFO("pair " << i);
    CHECK(std::atan2(t.sin(1, i), t.cos(1, i)) == Approx(f).epsilon(2e-6));
  }
}

TEST_CASE("YaRN table equals DeepSeek-V3's reference rope_cos / rope_sin", "[layers][deepseek][rope][reference]") {
  const std::string d = test::require(test::reference_dir() + "/deepseek/v3_qlora32_b1", "DeepSeek reference case") + "/";
  const Config c = io::load_hf_deepseek_config(d + "config.json");
  layers::MLA<P32> mla(c);
  const RotaryTable& t = mla.host_rotary_table();
  const auto cos = test::npy(d + "rope_cos.npy"), sin = test::npy(d + "rope_sin.npy"), inv = test::npy(d + "rope_inv_freq_f64.npy");
  REQUIRE(t.cos.dim(0) == cos.shape[0]);
  REQUIRE(t.cos.dim(1) == cos.shape[1]);
  close(AnyTensor::from(t.cos), cos, {0.0, 2e-7}, "rope_cos");
  close(AnyTensor::from(t.sin), sin, {0.0, 2e-7}, "rope_sin");
  for (std::int64_t i = 0; i < inv.numel(); ++i) {
    CHECK(std::atan2(t.sin(1, i), t.cos(1, i)) == Approx(inv.element(i)).epsilon(1e-6));
  }
  CHECK(mla.softmax_scale() == Approx(0.2646422579642267).epsilon(1e-12));
}

// ---- MLA -------------------------------------------------------------------------------------------------------

TEST_CASE("MLA with q_lora_rank > 0 matches the torch fixture, both cache forms", "[layers][deepseek][mla]") {
  run_mla_case("deepseek_mla_qlora", false);
  run_mla_case("deepseek_mla_qlora", true);
}

TEST_CASE("MLA with q_lora_rank = 0, soft cap and segment ids matches the torch fixture, both cache forms",
          "[layers][deepseek][mla]") {
  run_mla_case("deepseek_mla_noqlora", false);
  run_mla_case("deepseek_mla_noqlora", true);
}

TEST_CASE("MLA cache widths: expanded N*(Hn+Hr) + N*Hv, latent r_kv + Hr", "[layers][deepseek][mla]") {
  Config c = io::load_config(fx("deepseek_mla_qlora") + "config.yml");
  layers::MLA<P32> e(c);
  CHECK(e.cache_spec() == layers::CacheSpec{2 * 12, 2 * 8});
  c.mla_naive_kvcache = false;
  layers::MLA<P32> l(c);
  CHECK(l.cache_spec() == layers::CacheSpec{16 + 4});
  // DeepSeek-V3's real sizes, per token and layer: 128*(192+128) = 40960 vs 512+64 = 576 values.
  Config v3 = io::load_config(::maxtext::test::config_dir() + "/models/deepseek3-671b.yml");
  v3.max_position_embeddings = 8;  // keep the rotary table small; widths do not depend on it
  v3.original_max_position_embeddings = 8;
  layers::MLA<P32> ve(v3);
  CHECK(ve.cache_spec() == layers::CacheSpec{128 * 192, 128 * 128});
  v3.mla_naive_kvcache = false;
  layers::MLA<P32> vl(v3);
  CHECK(vl.cache_spec() == layers::CacheSpec{576});
}

// ---- routing ---------------------------------------------------------------------------------------------------

// This case and the head_matmul / moe_route cases at the end move their tensors with to_backend / to_host, so they
// run on every backend (their tags are not among those the device builds leave out, tests/CMakeLists.txt).
TEST_CASE("MoE routing matches the reference: groups, bias, ties, score functions, weight rules", "[layers][moe][route]") {
  const std::string d = fx("moe_routing");
  const auto meta = read_json(d + "meta.json");
  test::Backend be;
  for (auto it = meta["cases"].begin(); it != meta["cases"].end(); ++it) {
    const std::string name = it.key();
    INFO("case " << name);
    const Config c = config_from_keys(it.value()["config"]);
    const auto s = layers::RoutedMoE<P32>::settings(c, 1, moe_family(c));
    const auto z = test::npy(d + name + "_z.npy");
    const std::int64_t M = z.shape[0], E = z.shape[1], k = it.value()["k"].get<std::int64_t>();
    const Tensor<float, 2> zt = z.to<float, 2>({M, E});
    Tensor<float, 1> bias;
    if (std::filesystem::exists(d + name + "_bias.npy")) bias = test::npy(d + name + "_bias.npy").to<float, 1>({E});
    const Tensor<float, 2> zd = test::to_backend(be, zt);
    const Tensor<float, 1> bd = bias.size() > 0 ? test::to_backend(be, bias) : Tensor<float, 1>();
    Tensor<std::int32_t, 2> idx({M, k}, be.memory());
    Tensor<float, 2> w({M, k}, be.memory());
    be.moe_route<float, float>(zd.cview(), bd.cview(), s.routing, idx.view(), w.view(), View<float, 2>());
    const auto eidx = test::npy(d + name + "_idx.npy");
    close(AnyTensor::from(test::to_host(be, idx)), eidx, {0.0, 0.0}, name + " experts");
    close(AnyTensor::from(test::to_host(be, w)), test::npy(d + name + "_w.npy"), test::tol::f32_layer, name + " weights");
  }
}

TEST_CASE("RoutedMoE settings follow MaxText's gating of the DeepSeek-V3 path", "[layers][moe][routing]") {
  Config c;
  c.decoder_block = "deepseek";
  c.model_name = "deepseek3-671b";
  c.routed_score_func = "sigmoid";
  c.n_routing_groups = 8;
  c.topk_routing_group = 4;
  c.num_experts = 256;
  c.num_experts_per_tok = 8;
  c.routed_scaling_factor = 2.5;
  auto s = layers::RoutedMoE<P32>::settings(c, 16, moe_family(c)).routing;
  CHECK(s.deepseek);
  CHECK(s.n_groups == 8);
  CHECK(s.normalize);
  CHECK(s.scale == 2.5f);
  CHECK_FALSE(s.softmax_weights);
  c.model_name = "deepseek2-16b";  // not deepseek3*: groups ignored, bias would enter the weights
  s = layers::RoutedMoE<P32>::settings(c, 16, moe_family(c)).routing;
  CHECK_FALSE(s.deepseek);
  CHECK(s.n_groups == 0);
  c.decoder_block = "mixtral";
  c.norm_topk_prob = true;
  s = layers::RoutedMoE<P32>::settings(c, 16, moe_family(c)).routing;
  CHECK(s.softmax_weights);
  CHECK(s.normalize);
  CHECK(s.scale == 1.0f);
}

// ---- MoE blocks ------------------------------------------------------------------------------------------------

namespace {
template <class Block>
void run_moe_case(const std::string& name, Block block) {
  const std::string d = fx(name);
  const auto meta = read_json(d + "meta.json");
  test::Backend be;
  layers::MoeMetrics metrics;
  BlockAsLayer<P32, Block> layer{std::move(block), &metrics};
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(d + "weights.safetensors"), be);
  const auto y = models::run_layer<P32>(layer, params, be, test::npy(d + "x.npy"));
  close(y, test::npy(d + "out.npy"), test::tol::f32_layer, name + ".out");
  // Routing: expert sets per token, weights, counts, dropping, load-balance loss, bias updates.
  const auto eidx = test::npy(d + "topk_indices.npy");
  const std::int64_t M = eidx.shape[0], k = eidx.shape[1];
  REQUIRE(metrics.tokens == M);
  REQUIRE(metrics.k == k);
  for (std::int64_t m = 0; m < M; ++m) {
    std::set<double> want, got;
    for (std::int64_t j = 0; j < k; ++j) {
      want.insert(eidx.element(m * k + j));
      got.insert(metrics.topk_indices[static_cast<std::size_t>(m * k + j)]);
    }
    INFO(name << " token " << m);
    CHECK(got == want);
  }
  const auto counts = test::npy(d + "expert_counts.npy");
  for (std::int64_t e = 0; e < counts.numel(); ++e) CHECK(metrics.expert_counts[static_cast<std::size_t>(e)] == counts.element(e));
  CHECK(metrics.dropped == meta["dropped"].get<std::int64_t>());
  if (meta.contains("moe_lb_loss")) {
    REQUIRE(metrics.has_load_balance_loss);
    CHECK(metrics.load_balance_loss == Approx(meta["moe_lb_loss"].get<double>()).epsilon(1e-5));
  } else {
    CHECK_FALSE(metrics.has_load_balance_loss);
  }
  if (std::filesystem::exists(d + "bias_updates.npy")) {
    const auto bu = test::npy(d + "bias_updates.npy");
    REQUIRE(static_cast<std::int64_t>(metrics.bias_updates.size()) == bu.numel());
    for (std::int64_t e = 0; e < bu.numel(); ++e) CHECK(metrics.bias_updates[static_cast<std::size_t>(e)] == Approx(bu.element(e)));
  }
}
}  // namespace

TEST_CASE("RoutedAndSharedMoE (DeepSeek-V3 routing, groups, shared expert) matches the fixture", "[layers][moe]") {
  const Config c = config_from_keys(read_json(fx("moe_deepseek") + "meta.json")["config"]);
  run_moe_case("moe_deepseek", layers::RoutedAndSharedMoE<P32>(c, moe_family(c)));
}

TEST_CASE("RoutedMoE (Mixtral softmax-over-top-k) matches the fixture", "[layers][moe]") {
  const Config c = config_from_keys(read_json(fx("moe_mixtral") + "meta.json")["config"]);
  run_moe_case("moe_mixtral", layers::RoutedMoE<P32>(layers::RoutedMoE<P32>::settings(c, c.mlp_dim, moe_family(c))));
}

TEST_CASE("Capacity-factor dropping (dense path, expert biases) matches the fixture", "[layers][moe][drop]") {
  const Config c = config_from_keys(read_json(fx("moe_drop") + "meta.json")["config"]);
  run_moe_case("moe_drop", layers::RoutedMoE<P32>(layers::RoutedMoE<P32>::settings(c, c.mlp_dim, moe_family(c))));
}

TEST_CASE("Dropping with model_call_mode=inference uses the full softmax as combine weights", "[layers][moe][drop]") {
  const Config c = config_from_keys(read_json(fx("moe_drop_inference") + "meta.json")["config"]);
  run_moe_case("moe_drop_inference", layers::RoutedMoE<P32>(layers::RoutedMoE<P32>::settings(c, c.mlp_dim, moe_family(c))));
}

TEST_CASE("The sparse (default) path ignores capacity_factor", "[layers][moe][drop]") {
  Config c = config_from_keys(read_json(fx("moe_drop") + "meta.json")["config"]);
  c.sparse_matmul = true;
  test::Backend be;
  layers::MoeMetrics metrics;
  BlockAsLayer<P32, layers::RoutedMoE<P32>> layer{layers::RoutedMoE<P32>(layers::RoutedMoE<P32>::settings(c, c.mlp_dim, moe_family(c))), &metrics};
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(fx("moe_drop") + "weights.safetensors"), be);
  (void)models::run_layer<P32>(layer, params, be, test::npy(fx("moe_drop") + "x.npy"));
  CHECK(metrics.dropped == 0);
  CHECK(metrics.expert_kept == metrics.expert_counts);
}

TEST_CASE("The gate bias is kept in f32: float32_gate_logits selects with it unrounded, also in bf16",
          "[layers][moe][routing]") {
  // A zero gate kernel gives every expert sigmoid(0) = 0.5, so the bias alone decides. Expert 7's bias exceeds the
  // others' by 2^-10, below bf16's spacing at 1.0 (2^-7). MaxText casts the f32 bias to the gate dtype: with
  // float32_gate_logits expert 7 wins (its group, then itself); with a bf16 gate the biases tie and the group and
  // expert top-k take the lowest indices (jax.lax.top_k), so expert 7 is not chosen.
  Config c = config_from_keys(read_json(fx("moe_deepseek") + "meta.json")["config"]);
  io::TensorMap w = io::read_safetensors(fx("moe_deepseek") + "weights.safetensors");
  Tensor<float, 2> zero({32, 8});
  for (std::int64_t i = 0; i < zero.size(); ++i) zero.data()[i] = 0.0f;
  Tensor<float, 1> bias({8});
  for (std::int64_t e = 0; e < 8; ++e) bias(e) = 1.0f;
  bias(7) = 1.0f + 1.0f / 1024.0f;
  w.tensors["MoeBlock_0.gate.kernel"] = AnyTensor::from(zero);
  w.tensors["MoeBlock_0.gate.bias"] = AnyTensor::from(bias);
  for (const bool f32_gate : {true, false}) {
    c.float32_gate_logits = f32_gate;
    test::Backend be;
    layers::MoeMetrics metrics;
    BlockAsLayer<PBf, layers::RoutedAndSharedMoE<PBf>> layer{layers::RoutedAndSharedMoE<PBf>(c, moe_family(c)), &metrics};
    const auto params = models::load_layer_params<PBf>(layer, w, be);
    (void)models::run_layer<PBf>(layer, params, be, test::npy(fx("moe_deepseek") + "x.npy"));
    REQUIRE(metrics.tokens > 0);
    for (std::int64_t m = 0; m < metrics.tokens; ++m) {
      std::set<std::int64_t> chosen;
      for (std::int64_t j = 0; j < metrics.k; ++j) {
        chosen.insert(metrics.topk_indices[static_cast<std::size_t>(m * metrics.k + j)]);
      }
      INFO("float32_gate_logits " << f32_gate << ", token " << m);
      CHECK(chosen == (f32_gate ? std::set<std::int64_t>{0, 7} : std::set<std::int64_t>{0, 1}));
    }
  }
}

// ---- layers ----------------------------------------------------------------------------------------------------

namespace {
template <template <class> class L, class P = P32>
void run_layer_case(const std::string& name, bool latent, testing::Tolerance tol = test::tol::f32_layer,
                    bool f32_gate = false) {
  const std::string d = fx(name);
  Config c = io::load_config(d + "config.yml");
  c.mla_naive_kvcache = !latent;
  c.float32_gate_logits = f32_gate;
  test::Backend be;
  L<P> layer(c, {0, "layer", "layer.attn", "layer.mlp"});
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(d + "weights.safetensors"), be);
  layers::Capture cap({"layer.attn", "layer.mlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(d + "x.npy"), nullptr, nullptr, &cap);
  const std::string tag = name + (latent ? " (latent)" : " (expanded)") + (std::is_same_v<P, P32> ? "" : " bf16");
  close(y, test::npy(d + "out.npy"), tol, tag + ".out");
  close(cap.at("layer.attn"), test::npy(d + "attn.npy"), tol, tag + ".attn");
  close(cap.at("layer.mlp"), test::npy(d + "mlp.npy"), tol, tag + ".mlp");
}
}  // namespace

TEST_CASE("DeepSeekDenseLayer matches the torch fixture, both cache forms", "[layers][deepseek]") {
  run_layer_case<layers::DeepSeekDenseLayer>("deepseek_dense_layer", false);
  run_layer_case<layers::DeepSeekDenseLayer>("deepseek_dense_layer", true);
}

TEST_CASE("DeepSeekMoELayer matches the torch fixture, both cache forms", "[layers][deepseek]") {
  run_layer_case<layers::DeepSeekMoELayer>("deepseek_moe_layer", false);
  run_layer_case<layers::DeepSeekMoELayer>("deepseek_moe_layer", true);
}

TEST_CASE("DeepSeek layers in bf16 stay within bf16 rounding of the f64 reference, both cache forms",
          "[layers][deepseek][bf16]") {
  // Every op output is rounded to bf16 (one ulp = 2^-7 relative at most): norms, the MLA projections and rotary,
  // attention, the expert products and the residual add accumulate ~10 roundings on values of magnitude ~2-5, so
  // 4 ulp relative + 0.05 absolute, as for the GPT-3 layer. The MoE fixture keeps every routing decision >= 0.03
  // from a tie (bf16 sigmoid scores have a resolution of 2^-8 = 3.9e-3 near 0.5-1), so the bf16 gate and the f32
  // gate (float32_gate_logits) both route like the f64 reference.
  const testing::Tolerance bf{4.0 / 128.0, 5e-2};
  run_layer_case<layers::DeepSeekDenseLayer, PBf>("deepseek_dense_layer", false, bf);
  run_layer_case<layers::DeepSeekDenseLayer, PBf>("deepseek_dense_layer", true, bf);
  run_layer_case<layers::DeepSeekMoELayer, PBf>("deepseek_moe_layer", false, bf, false);
  run_layer_case<layers::DeepSeekMoELayer, PBf>("deepseek_moe_layer", true, bf, true);
}

// ---- backend kernels -------------------------------------------------------------------------------------------

TEST_CASE("head_matmul equals per-head loops (f32 and bf16 weights, both orientations)", "[ops][mla]") {
  test::Backend be;
  const std::int64_t M = 3, H = 2, R = 5, C = 4, stride = 7, off = 2;  // W has H*stride rows of C columns
  Tensor<float, 2> wf({H * stride, C});
  for (std::int64_t i = 0; i < wf.size(); ++i) wf.data()[i] = std::sin(0.37f * static_cast<float>(i));
  Matrix<float> w{test::to_backend(be, wf), H * stride, C, nullptr};
  Tensor<bf16, 2> wb({H * stride, C});
  for (std::int64_t i = 0; i < wb.size(); ++i) wb.data()[i] = bf16(wf.data()[i]);
  Matrix<bf16> w16{test::to_backend(be, wb), H * stride, C, nullptr};
  Tensor<float, 3> xa({M, H, C}), xb({M, H, R});
  for (std::int64_t i = 0; i < xa.size(); ++i) xa.data()[i] = std::cos(0.11f * static_cast<float>(i));
  for (std::int64_t i = 0; i < xb.size(); ++i) xb.data()[i] = std::cos(0.23f * static_cast<float>(i));
  const Tensor<float, 3> xad = test::to_backend(be, xa), xbd = test::to_backend(be, xb);
  Tensor<float, 3> yad({M, H, R}, be.memory()), ybd({M, H, C}, be.memory()), ya16d({M, H, R}, be.memory());
  be.head_matmul(xad.cview(), w, stride, off, false, yad.view());   // y = x . W_h^T, W_h = R rows
  be.head_matmul(xbd.cview(), w, stride, off, true, ybd.view());    // y = x . W_h,   W_h = R rows
  be.head_matmul(xad.cview(), w16, stride, off, false, ya16d.view());
  const Tensor<float, 3> ya = test::to_host(be, yad), yb = test::to_host(be, ybd), ya16 = test::to_host(be, ya16d);
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t r = 0; r < R; ++r) {
        double s = 0, s16 = 0;
        for (std::int64_t c = 0; c < C; ++c) {
          s += double(xa(m, h, c)) * wf(h * stride + off + r, c);
          s16 += double(xa(m, h, c)) * static_cast<float>(wb(h * stride + off + r, c));
        }
        CHECK(ya(m, h, r) == Approx(s).margin(1e-6));
        CHECK(ya16(m, h, r) == Approx(s16).margin(1e-6));
      }
      for (std::int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (std::int64_t r = 0; r < R; ++r) s += double(xb(m, h, r)) * wf(h * stride + off + r, c);
        CHECK(yb(m, h, c) == Approx(s).margin(1e-6));
      }
    }
  }
}

TEST_CASE("moe_route closed forms: group limit, -inf fill, renormalisation", "[ops][moe]") {
  test::Backend be;
  // 8 experts in 4 groups; biased scores (sigmoid of z plus bias) favour groups 1 and 3.
  Tensor<float, 2> z({1, 8});
  const float zs[8] = {3.0f, -3.0f, 1.0f, 1.0f, -1.0f, -1.0f, 0.5f, 0.5f};
  for (int e = 0; e < 8; ++e) z(0, e) = zs[e];
  MoeRouting r;
  r.num_experts_per_tok = 3;
  r.score = Activation::sigmoid;
  r.deepseek = true;
  r.n_groups = 4;
  r.topk_groups = 2;
  r.normalize = true;
  r.normalize_eps = 1e-20f;
  r.scale = 2.0f;
  const Tensor<float, 2> zd = test::to_backend(be, z);
  Tensor<std::int32_t, 2> idxd({1, 3}, be.memory());
  Tensor<float, 2> wd({1, 3}, be.memory()), scd({1, 8}, be.memory());
  be.moe_route<float, float>(zd.cview(), View<const float, 1>(), r, idxd.view(), wd.view(), scd.view());
  Tensor<std::int32_t, 2> idx = test::to_host(be, idxd);
  const Tensor<float, 2> w = test::to_host(be, wd), sc = test::to_host(be, scd);
  // group scores: g0 = s(3)+s(-3) = 1, g1 = 2 s(1) = 1.462, g2 = 2 s(-1) = 0.538, g3 = 2 s(0.5) = 1.245
  CHECK(idx(0, 0) == 2);
  CHECK(idx(0, 1) == 3);
  CHECK(idx(0, 2) == 6);
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double tot = 2 * sig(1.0) + sig(0.5);
  CHECK(w(0, 0) == Approx(2.0 * sig(1.0) / tot).epsilon(1e-6));
  CHECK(w(0, 2) == Approx(2.0 * sig(0.5) / tot).epsilon(1e-6));
  CHECK(sc(0, 0) == Approx(sig(3.0)).epsilon(1e-6));
  // Only one group kept but k = 3 > its 2 experts: the third pick is the lowest-index masked (-inf) expert.
  r.topk_groups = 1;
  be.moe_route<float, float>(zd.cview(), View<const float, 1>(), r, idxd.view(), wd.view(), View<float, 2>());
  idx = test::to_host(be, idxd);
  CHECK(idx(0, 0) == 2);
  CHECK(idx(0, 1) == 3);
  CHECK(idx(0, 2) == 0);
}

// ---- bad input -------------------------------------------------------------------------------------------------

TEST_CASE("MLA and MoE refuse bad configurations with clear messages", "[layers][deepseek][errors]") {
  const Config base = io::load_config(fx("deepseek_moe_layer") + "config.yml");
  Config c = base;
  c.attention_type = "global";
  CHECK_THROWS_WITH(layers::MLA<P32>(c), Catch::Contains("attention_type must be \"mla\""));
  c = base;
  c.base_num_kv_heads = 1;
  c.derive();
  CHECK_THROWS_WITH(layers::MLA<P32>(c), Catch::Contains("num_query_heads (2) must equal num_kv_heads (1)"));
  c = base;
  c.qk_rope_head_dim = 3;
  CHECK_THROWS_WITH(layers::MLA<P32>(c), Catch::Contains("qk_rope_head_dim must be even"));
  c = base;
  c.n_routing_groups = 8;  // one expert per group: no top-2 inside a group
  c.topk_routing_group = 2;
  CHECK_THROWS_WITH(layers::DeepSeekMoELayer<P32>(c, {}), Catch::Contains(">= 2 experts per group"));
  c = base;
  c.routed_score_func = "bogus";
  CHECK_THROWS_AS(layers::DeepSeekMoELayer<P32>(c, {}), UnsupportedError);
  c = base;
  c.mlp_activations_limit = 10.0;  // MaxText clamps the DEEPSEEK block's routed SwiGLU too (DeepSeek-V4's form)
  {
    const layers::DeepSeekMoELayer<P32> clamped(c, {});
    CHECK(clamped.moe().routed().settings().clamped_glu);
    CHECK(clamped.moe().routed().settings().glu_form == ClampedGluForm::swiglu);
    CHECK(clamped.moe().routed().settings().glu_limit == 10.0f);
  }
  c = base;
  c.num_experts_per_tok = 9;
  CHECK_THROWS_WITH(layers::RoutedAndSharedMoE<P32>(c, moe_family(c)), Catch::Contains("num_experts_per_tok must be in [1, num_experts=8]"));
}

TEST_CASE("Missing or mis-shaped DeepSeek weights are reported by name", "[layers][deepseek][errors]") {
  const std::string d = fx("deepseek_moe_layer");
  const Config c = io::load_config(d + "config.yml");
  test::Backend be;
  layers::DeepSeekMoELayer<P32> layer(c, {0, "layer", "layer.attn", "layer.mlp"});
  auto w = io::read_safetensors(d + "weights.safetensors");
  auto missing = w;
  missing.tensors.erase("self_attention.wkv_b.kernel");
  CHECK_THROWS_WITH(models::load_layer_params<P32>(layer, missing, be),
                    Catch::Contains("missing tensor self_attention.wkv_b.kernel (expected [16,2,16])"));
  auto bad = w;
  bad.tensors["DeepSeekMoeBlock_0.MoeBlock_0.wi_0"] = w.tensors.at("DeepSeekMoeBlock_0.MoeBlock_0.wi_0").narrow(0, 0, 7);
  CHECK_THROWS_WITH(models::load_layer_params<P32>(layer, bad, be),
                    Catch::Contains("DeepSeekMoeBlock_0.MoeBlock_0.wi_0: expected shape [8,32,16], found [7,32,16]"));
}

TEST_CASE("A position outside the YaRN table is refused", "[layers][deepseek][errors]") {
  const std::string d = fx("deepseek_mla_qlora");
  const Config c = io::load_config(d + "config.yml");  // max_position_embeddings 64
  test::Backend be;
  MlaAsLayer<P32> layer{layers::MLA<P32>(c)};
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(d + "weights.safetensors"), be);
  Tensor<std::int32_t, 2> pos({2, 7});
  for (std::int64_t i = 0; i < pos.size(); ++i) pos.data()[i] = 60 + static_cast<std::int32_t>(i % 7);
  CHECK_THROWS_WITH(models::run_layer<P32>(layer, params, be, test::npy(d + "x.npy"), nullptr, &pos),
                    Catch::Contains("position 64 is outside the rotary table [0, 64)"));
}
