// The generic Attention layer against the PyTorch fixtures (tests/reference/attention_reference.py), for every
// option; incremental decoding (prefill + single steps) and ragged batches against the full forward; the f32 flags
// in bf16 on a closed-form case; bad input.
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/models/kv_cache.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "support/backends.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;
/// f32 activations over a narrower KV cache (Policy's fifth parameter).
using P32CacheF16 = Policy<test::Backend, float, float, float, fp16>;
using P32CacheBf16 = Policy<test::Backend, float, float, float, bf16>;

namespace {

layers::AttentionArgs args_from_meta(const nlohmann::json& m) {
  const auto& j = m.at("args");
  layers::AttentionArgs a;
  a.num_query_heads = j.at("num_query_heads");
  a.num_kv_heads = j.at("num_kv_heads");
  a.head_dim = j.at("head_dim");
  a.attention_type = layers::parse_attention_type(j.value("attention_type", std::string("global")));
  a.float32_qk_product = j.value("float32_qk_product", false);
  a.float32_logits = j.value("float32_logits", false);
  a.attn_logits_soft_cap = j.value("attn_logits_soft_cap", 0.0);
  a.sliding_window_size = j.value("sliding_window_size", std::int64_t{0});
  a.use_qk_norm = j.value("use_qk_norm", false);
  a.query_pre_attn_scalar = j.value("query_pre_attn_scalar", 0.0);
  a.use_bias_in_projections = j.value("use_bias_in_projections", false);
  a.share_kv_projections = j.value("share_kv_projections", false);
  a.temperature_tuning = j.value("temperature_tuning", false);
  a.temperature_tuning_scale = j.value("temperature_tuning_scale", 0.1);
  a.temperature_tuning_floor_scale = j.value("temperature_tuning_floor_scale", 8192.0);
  a.is_nope_layer = j.value("is_nope_layer", false);
  a.rope_type = j.value("rope_type", std::string());
  a.use_v_norm = j.value("use_v_norm", false);
  a.rope_max_timescale = j.value("rope_max_timescale", 0.0);
  a.partial_rotary_factor = j.value("partial_rotary_factor", 0.0);
  return a;
}

Tensor<std::int32_t, 2> int2(const AnyTensor& a) { return a.to<std::int32_t, 2>({a.shape[0], a.shape[1]}); }

/// One fixture: the layer, its parameters and inputs.
template <class P>
struct Case {
  using A = typename P::act_t;
  std::string name, dir;
  nlohmann::json meta;
  Config config;
  layers::AttentionArgs args;
  test::Backend be;
  layers::Attention<P> attn;
  typename layers::Attention<P>::Params params;
  AnyTensor x, expected;
  Tensor<std::int32_t, 2> pos, seg;
  bool has_seg = false;
  std::int64_t B = 0, T = 0, D = 0;

  explicit Case(const std::string& n, void (*tweak)(layers::AttentionArgs&) = nullptr)
      : name(n), dir(test::fixtures_dir() + "/" + n), meta(test::read_meta(dir)), config(test::config_from_meta(meta)),
        args(args_from_meta(meta)) {
    // What attentions.py decides by decoder block, a family's layer sets in AttentionArgs (Llama 4's L2 qk norm,
    // Qwen2's out projection without bias, Qwen3-Next's gated attention): the fixtures are MaxText's bare Attention.
    args.qk_norm_l2 = config.is("llama4");
    args.out_bias = !config.is("qwen2");
    args.qwen3_next_gated = config.is_qwen3_hybrid();
    if (tweak) tweak(args);
    attn = layers::Attention<P>(config, args);
    const io::TensorMap w = io::read_safetensors(dir + "/weights.safetensors");
    layers::ParamLoader<P> loader(w, be);
    attn.visit(loader, params);
    loader.finish();
    x = test::npy(dir + "/x.npy");
    expected = test::npy(dir + "/out.npy");
    pos = int2(test::npy(dir + "/positions.npy"));
    has_seg = std::filesystem::exists(dir + "/segment_ids.npy");
    if (has_seg) seg = int2(test::npy(dir + "/segment_ids.npy"));
    B = x.shape[0];
    T = x.shape[1];
    D = x.shape[2];
  }
};

/// Drives one Attention layer over a KV cache: each call processes tokens [t0[b], t0[b] + n) of every row b, which
/// must be the row's cache length (rows may be at different lengths).
template <class P>
class Driver {
 public:
  using A = typename P::act_t;
  Driver(Case<P>& c, std::int64_t capacity) : c_(c), cache_(c.be, c.B, capacity, {c.attn.cache_spec()}) {}
  models::KVCache<P>& cache() { return cache_; }

  /// Returns the outputs [B, n, D] (f32).
  Tensor<float, 3> run(const std::vector<std::int64_t>& t0, std::int64_t n) {
    const std::int64_t Bn = c_.B, D = c_.D;
    Scratch scratch;
    layers::StepInfo st;
    st.batch = Bn;
    st.length = n;
    st.start = cache_.lengths();
    std::vector<std::int32_t> pos, len, seg;
    Tensor<A, 2> xs({Bn * n, D});
    Tensor<float, 2> xall = c_.x.template to<float, 2>({Bn * c_.T, D});
    for (std::int64_t b = 0; b < Bn; ++b) {
      REQUIRE(st.start[static_cast<std::size_t>(b)] == t0[static_cast<std::size_t>(b)]);
      len.push_back(static_cast<std::int32_t>(t0[static_cast<std::size_t>(b)] + n));
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t t = t0[static_cast<std::size_t>(b)] + i;
        pos.push_back(c_.pos(b, t));
        if (c_.has_seg) seg.push_back(c_.seg(b, t));
        for (std::int64_t d = 0; d < D; ++d) xs(b * n + i, d) = from_float<A>(xall(b * c_.T + t, d));
      }
    }
    st.positions = View<const std::int32_t, 1>(pos.data(), {Bn * n});
    st.host_positions = pos;
    st.q_start = View<const std::int32_t, 1>(st.start.data(), {Bn});
    st.kv_len = View<const std::int32_t, 1>(len.data(), {Bn});
    if (c_.has_seg) {
      for (std::int64_t b = 0; b < Bn; ++b) {
        for (std::int64_t i = 0; i < n; ++i) cache_.segments()(b, st.start[static_cast<std::size_t>(b)] + i) = seg[static_cast<std::size_t>(b * n + i)];
      }
      st.segment_ids = View<const std::int32_t, 2>(seg.data(), {Bn, n});
      st.kv_segment_ids = cache_.segments().cview();
    }
    Tensor<A, 2> y({Bn * n, D});
    layers::Context<P> ctx{c_.be, scratch, st, nullptr};
    c_.attn.forward(ctx, c_.params, xs.cview(), cache_.layer(0), y.view());
    for (std::int64_t b = 0; b < Bn; ++b) cache_.set_length(b, len[static_cast<std::size_t>(b)]);
    Tensor<float, 3> out({Bn, n, D});
    for (std::int64_t i = 0; i < out.size(); ++i) out.data()[i] = to_float(y.data()[i]);
    return out;
  }

 private:
  Case<P>& c_;
  models::KVCache<P> cache_;
};

/// Rows [t0, t0+n) of a [B, T, D] tensor, or one batch row.
AnyTensor rows(const AnyTensor& t, std::int64_t t0, std::int64_t n, std::int64_t b = -1) {
  AnyTensor r = t.narrow(1, t0, n);
  return b < 0 ? r : r.narrow(0, b, 1);
}

const std::vector<std::string> kFixtures = {
    "attn_gqa_sliding_sinks_softcap", "attn_global_sinks_softcap_mqa", "attn_chunk",
    "attn_yarn_partial",              "attn_yarn_concat",              "attn_partial_rope",
    "attn_yarn_pairwise",
    "attn_llama31_fused_bias",        "attn_linear_scaling_local_theta", "attn_qk_norm_qwen3",
    "attn_qk_norm_noscale",           "attn_qk_norm_global_olmo3",     "attn_nope_temperature",
    "attn_llama4_l2_chunk",           "attn_share_kv_vnorm_bias",      "attn_q_scalar_segments",
    "attn_sliding_segments_sinks"};

// Incremental vs full forward differ only in f32 summation order (one-row vs many-row products): same tolerance.
constexpr testing::Tolerance kF32 = test::tol::f32_layer;

}  // namespace

TEST_CASE("Attention matches the torch fixture for every option (f32, full sequence)", "[layers][attention]") {
  for (const auto& name : kFixtures) {
    Case<P32> c(name);
    Driver<P32> d(c, c.T);
    test::expect_close(d.run({0, 0}, c.T), c.expected, kF32, name + " full");
  }
}

TEST_CASE("Attention with attention_type full (no causal term, segment ids kept) matches the torch fixture",
          "[layers][attention]") {
  // Full-sequence only: a bidirectional layer cannot be decoded token by token.
  Case<P32> c("attn_full_segments");
  Driver<P32> d(c, c.T);
  test::expect_close(d.run({0, 0}, c.T), c.expected, kF32, "attn_full_segments full");
}

TEST_CASE("Attention: prefill then single steps equal the full forward for every option and attention type",
          "[layers][attention][decode]") {
  for (const auto& name : kFixtures) {
    Case<P32> c(name);
    Driver<P32> d(c, c.T);
    const std::int64_t P0 = 4;
    test::expect_close(d.run({0, 0}, P0), rows(c.expected, 0, P0), kF32, name + " prefill");
    for (std::int64_t t = P0; t < c.T; ++t) {
      test::expect_close(d.run({t, t}, 1), rows(c.expected, t, 1), kF32, name + " step " + std::to_string(t));
    }
  }
}

TEST_CASE("Attention: batched decode with rows at different lengths", "[layers][attention][decode]") {
  for (const auto& name : kFixtures) {
    Case<P32> c(name);
    Driver<P32> d(c, c.T);
    // Prefill 6 tokens in both rows, then keep only 3 in row 0 (as Transformer::forward does for right padding):
    // its cache entries 3..5 are stale and must be overwritten / ignored.
    (void)d.run({0, 0}, 6);
    d.cache().set_length(0, 3);
    for (std::int64_t i = 0; i < 3; ++i) {
      const auto y = d.run({3 + i, 6 + i}, 1);
      const AnyTensor ya = AnyTensor::from(y);
      test::expect_close(ya.narrow(0, 0, 1), rows(c.expected, 3 + i, 1, 0), kF32, name + " row 0 at " + std::to_string(3 + i));
      test::expect_close(ya.narrow(0, 1, 1), rows(c.expected, 6 + i, 1, 1), kF32, name + " row 1 at " + std::to_string(6 + i));
    }
  }
}

TEST_CASE("Attention in bf16 stays within bf16 rounding of the f64 reference", "[layers][attention][bf16]") {
  // bf16 activations and weights (x, kernels rounded: 2^-9 relative each), projections, q.k logits and the output
  // rounded to bf16 (eps 2^-8). Logits of magnitude <= ~4 carry an absolute rounding error up to 2^-6, which moves
  // the softmax weights by ~1.5% of |v| ~ 1; through the output projection that is ~0.02 absolute. So 4 ulp
  // relative plus 0.04 absolute; the f32-logit variant below must do at least as well on the logits' part.
  for (const auto& name : kFixtures) {
    Case<PBf> c(name);
    Driver<PBf> d(c, c.T);
    test::expect_close(d.run({0, 0}, c.T), c.expected, {4.0 / 128.0, 0.04}, name + " bf16");
    Case<PBf> cf(name, [](layers::AttentionArgs& a) {
      a.float32_qk_product = true;
      a.float32_logits = true;
    });
    Driver<PBf> df(cf, cf.T);
    test::expect_close(df.run({0, 0}, cf.T), cf.expected, {4.0 / 128.0, 0.04}, name + " bf16 f32 logits");
  }
}

namespace {
/// One fixture with f32 activations over a cache of type KV, against the f64 torch fixture (unrounded keys and
/// values) and against itself decoded token by token.
template <class PN>
void check_narrow_cache(const std::string& name, testing::Tolerance vs_fixture) {
  Case<PN> c(name);
  Driver<PN> d(c, c.T);
  const Tensor<float, 3> full = d.run({0, 0}, c.T);
  test::expect_close(full, c.expected, vs_fixture, name + " full");
  // Every attention reads keys and values as the cache holds them, prefill included: prefill then single steps
  // equal the full forward up to f32 summation order.
  Driver<PN> inc(c, c.T);
  const std::int64_t P0 = 4;
  test::expect_close(inc.run({0, 0}, P0), rows(AnyTensor::from(full), 0, P0), kF32, name + " prefill");
  for (std::int64_t t = P0; t < c.T; ++t) {
    test::expect_close(inc.run({t, t}, 1), rows(AnyTensor::from(full), t, 1), kF32, name + " step " + std::to_string(t));
  }
  // The cache really is narrower: half the bytes of an f32 one, and outputs that differ from the f32 cache's.
  Case<P32> c32(name);
  Driver<P32> d32(c32, c32.T);
  const Tensor<float, 3> wide = d32.run({0, 0}, c32.T);
  CHECK(2 * d.cache().bytes() == d32.cache().bytes());
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < full.size(); ++i) differ += full.data()[i] != wide.data()[i];
  INFO(name << ": " << differ << " of " << full.size() << " outputs differ from the f32 cache's");
  CHECK(differ > 0);
}
}  // namespace

TEST_CASE("Attention over an f16 / bf16 KV cache with f32 activations: within the cache's rounding of the fixture",
          "[layers][attention][kv_cache]") {
  // Only the cached keys and values are rounded (unit roundoff u = 2^-11 in f16, 2^-8 in bf16). An output row is
  // a softmax-weighted mean of value rows (error <= u |v|) through the output projection, plus the effect of the
  // logits' error: |dl| <= u sum_i |q_i k_i|, a few u for these fixtures' logits (sum |q_i k_i| <= ~8), which moves
  // each softmax weight by at most ~2 |dl| relative. So the error is a few u of the outputs (~1); the check allows
  // 8 u relative plus 8 u absolute, a margin over the measured 2.1 u (both types), not a proven bound.
  for (const auto& name : kFixtures) {
    check_narrow_cache<P32CacheF16>(name, {8.0 / 2048.0, 8.0 / 2048.0});
    check_narrow_cache<P32CacheBf16>(name, {8.0 / 256.0, 8.0 / 256.0});
  }
}

TEST_CASE("float32_qk_product / float32_logits in bf16: the logit rounding point (closed form)", "[layers][attention][bf16]") {
  // One query q = [1, 1, 1], keys k0 = [64, 32, 4.375], k1 = [64, 32, 4] (all exact in bf16), values 1 and 0.
  // q.k0 = 100.375 exactly in f32; rounded to bf16 (spacing 0.5 at 100) it becomes 100.5.
  // out = e^{l0 - l1} / (1 + e^{l0 - l1}): f32 logits 0.59267 (bf16 0.59375); bf16 logits 0.62246 (bf16 0.62109).
  // float32_logits alone casts *after* the bf16 product, so it keeps the bf16 rounding (MaxText apply_attention_dot).
  test::Backend be;
  auto run = [&](bool qk32, bool logits32) {
    std::vector<bf16> q = {bf16(1.f), bf16(1.f), bf16(1.f)};
    std::vector<bf16> k = {bf16(64.f), bf16(32.f), bf16(4.375f), bf16(64.f), bf16(32.f), bf16(4.f)};
    std::vector<bf16> v = {bf16(1.f), bf16(0.f)};
    std::vector<bf16> o(1);
    std::vector<std::int32_t> start = {1}, len = {2};
    AttentionMask m;
    m.q_start = View<const std::int32_t, 1>(start.data(), {1});
    m.kv_len = View<const std::int32_t, 1>(len.data(), {1});
    AttentionOptions opt;
    opt.float32_qk_product = qk32;
    opt.float32_logits = logits32;
    be.attention(View<const bf16, 4>(q.data(), {1, 1, 1, 3}), View<const bf16, 4>(k.data(), {1, 2, 1, 3}),
                 View<const bf16, 4>(v.data(), {1, 2, 1, 1}), m, opt, View<const bf16, 1>(), View<bf16, 4>(o.data(), {1, 1, 1, 1}));
    return static_cast<float>(o[0]);
  };
  const double f32w = std::exp(0.375) / (1 + std::exp(0.375)), bfw = std::exp(0.5) / (1 + std::exp(0.5));
  CHECK(run(false, false) == Approx(bfw).margin(1.0 / 256));
  CHECK(run(false, true) == Approx(bfw).margin(1.0 / 256));
  CHECK(run(true, false) == Approx(f32w).margin(1.0 / 256));
  CHECK(run(true, true) == Approx(f32w).margin(1.0 / 256));
  CHECK(std::fabs(run(true, false) - run(false, false)) > 0.02);
}

TEST_CASE("Attention rotary selection follows MaxText's init_rotary_embedding", "[layers][attention][rope]") {
  Config c;
  c.base_emb_dim = 32;
  c.base_num_query_heads = 4;
  c.base_num_kv_heads = 2;
  c.head_dim = 16;
  c.derive();
  layers::AttentionArgs a;
  a.num_query_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  auto kind = [&](const Config& cc, const layers::AttentionArgs& aa) { return layers::Attention<P32>(cc, aa).rope(); };
  CHECK(kind(c, a).kind == layers::RopeKind::default_rope);
  Config l31 = c;
  l31.model_name = "llama3.1-8b";
  CHECK(kind(l31, a).kind == layers::RopeKind::llama31);
  Config l33 = c;
  l33.model_name = "llama3.3-70b";  // default RoPE: the name does not start with llama3.1
  CHECK(kind(l33, a).kind == layers::RopeKind::default_rope);
  Config y = c;
  y.rope_type = "YaRN";  // lower-cased by MaxText
  layers::AttentionArgs ap = a;
  ap.partial_rotary_factor = 0.5;
  CHECK(kind(y, ap).kind == layers::RopeKind::yarn);  // YaRN wins over a partial factor
  CHECK(kind(c, ap).rot_dims == 8);
  layers::AttentionArgs local = a;
  local.attention_type = layers::AttentionType::local_sliding;
  local.sliding_window_size = 4;
  Config g3 = c;
  g3.model_name = "gemma3-4b";
  g3.rope_linear_scaling_factor = 8.0;
  g3.local_rope_max_timescale = 10000;
  g3.rope_max_timescale = 1000000;
  CHECK(kind(g3, local).linear_scaling == 1.0);
  CHECK(kind(g3, local).max_timescale == 10000);
  CHECK(kind(g3, a).linear_scaling == 8.0);
  CHECK(kind(g3, a).max_timescale == 1000000);
  layers::AttentionArgs nope = a;
  nope.is_nope_layer = true;
  CHECK(kind(c, nope).kind == layers::RopeKind::none);
  CHECK(layers::Attention<P32>(c, nope).max_positions() == 0);
  CHECK(layers::is_nope_layer(3, 4));
  CHECK_FALSE(layers::is_nope_layer(2, 4));
  CHECK_FALSE(layers::is_nope_layer(3, -1));
  // YaRN tables stop at max_position_embeddings.
  y.max_target_length = 4096;
  y.max_position_embeddings = 1000;
  CHECK(layers::Attention<P32>(y, a).max_positions() == 1000);
}

/// A matrix's out-major values: the CPU backend keeps only the packed panels of an initialised kernel.
template <class B, class W>
Tensor<W, 2> rows_of(const B& be, const Matrix<W>& m) {
  if constexpr (requires { be.unpacked(m); }) {
    return be.unpacked(m);
  } else {
    return m.data;
  }
}

TEST_CASE("Attention init: query kernel divided by sqrt(head_dim) only without qk-norm / query scalar",
          "[layers][attention][init]") {
  Case<P32> base("attn_chunk");
  auto qstd = [](const Config& c, const layers::AttentionArgs& a) {
    layers::Attention<P32> attn(c, a);
    typename layers::Attention<P32>::Params p;
    test::Backend be;
    layers::ParamInitializer<P32> ini(be, 7);
    attn.visit(ini, p);
    double s = 0;
    const auto k = rows_of(be, p.query.kernel);
    for (std::int64_t i = 0; i < k.size(); ++i) s += static_cast<double>(k.data()[i]) * k.data()[i];
    return std::sqrt(s / static_cast<double>(k.size()));
  };
  // nd_dense_init(1, fan_in, normal): std 1/sqrt(D) = 0.177; / sqrt(8) = 0.0625. 256 samples: ~5% sampling error.
  const double plain = qstd(base.config, base.args);
  CHECK(plain == Approx(1.0 / std::sqrt(32.0) / std::sqrt(8.0)).epsilon(0.15));
  layers::AttentionArgs s = base.args;
  s.query_pre_attn_scalar = 0.5;
  CHECK(qstd(base.config, s) == Approx(1.0 / std::sqrt(32.0)).epsilon(0.15));
  Config qk = base.config;
  qk.use_qk_norm = true;  // the init reads config.use_qk_norm
  CHECK(qstd(qk, base.args) == Approx(1.0 / std::sqrt(32.0)).epsilon(0.15));
  // Sinks initialise to zeros, qk-norm scales to ones.
  Config sk = base.config;
  sk.attention_sink = true;
  layers::Attention<P32> attn(sk, base.args);
  typename layers::Attention<P32>::Params p;
  test::Backend be;
  layers::ParamInitializer<P32> ini(be, 1);
  attn.visit(ini, p);
  REQUIRE(p.sinks.size() == 4);
  for (std::int64_t i = 0; i < 4; ++i) CHECK(p.sinks(i) == 0.0f);
}

TEST_CASE("Attention rejects bad configurations and inputs with clear messages", "[layers][attention][errors]") {
  Case<P32> c("attn_gqa_sliding_sinks_softcap");
  auto expect_msg = [](auto&& f, const std::string& needle) {
    try {
      f();
      FAIL("expected an exception mentioning: " << needle);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  expect_msg([&] {
    layers::AttentionArgs a = c.args;
    a.num_kv_heads = 3;
    layers::Attention<P32> x(c.config, a);
  }, "must be a multiple of num_kv_heads (3)");
  expect_msg([&] {
    layers::AttentionArgs a = c.args;
    a.sliding_window_size = 0;
    layers::Attention<P32> x(c.config, a);
  }, "Sliding_window_size must be set");
  expect_msg([&] {
    layers::AttentionArgs a = c.args;
    a.attention_type = layers::AttentionType::chunk;
    layers::Attention<P32> x(c.config, a);
  }, "chunk_attn_window_size > 0");
  expect_msg([&] { (void)layers::parse_attention_type("sparse"); }, "found 'sparse'");
  expect_msg([&] {
    layers::AttentionArgs a = c.args;
    a.partial_rotary_factor = 0.1;  // 0.8 lanes
    layers::Attention<P32> x(c.config, a);
  }, "partial_rotary_factor");
  // A position beyond the rotary table (max_target_length = 64 in the fixture config).
  expect_msg([&] {
    c.pos(1, 5) = 64;
    Driver<P32> d(c, c.T);
    (void)d.run({0, 0}, c.T);
  }, "position 64 of token [1,5] is outside the rotary table: expected 0 <= position < 64");
  c.pos(1, 5) = 5;
  // Inputs of the wrong width.
  expect_msg([&] {
    Scratch s;
    layers::StepInfo st;
    st.batch = 1;
    st.length = 2;
    Tensor<float, 2> x({2, 31}), y({2, 31});
    models::KVCache<P32> cache(c.be, 1, 4, {c.attn.cache_spec()});
    layers::Context<P32> ctx{c.be, s, st, nullptr};
    c.attn.forward(ctx, c.params, x.cview(), cache.layer(0), y.view());
  }, "inputs have 31 features and outputs 31: expected emb_dim 32");
  // Weights: a value kernel where share_kv_projections expects none, and a missing sinks vector.
  expect_msg([&] {
    layers::AttentionArgs a = c.args;
    a.share_kv_projections = true;
    layers::Attention<P32> attn(c.config, a);
    typename layers::Attention<P32>::Params p;
    const io::TensorMap w = io::read_safetensors(c.dir + "/weights.safetensors");
    layers::ParamLoader<P32> loader(w, c.be);
    attn.visit(loader, p);
    loader.finish();
  }, "unexpected tensor value.kernel");
  expect_msg([&] {
    io::TensorMap w = io::read_safetensors(c.dir + "/weights.safetensors");
    w.tensors.erase("sinks");
    w.tensors["key.kernel"] = w.at("query.kernel");
    typename layers::Attention<P32>::Params p;
    layers::ParamLoader<P32> loader(w, c.be);
    c.attn.visit(loader, p);
    loader.finish();
  }, "key.kernel: expected shape [32,2,8], found [32,4,8]");
}

namespace {
/// Rotate one head x [d] at position p with `spec` through the backend.
std::vector<float> rotate(const layers::RopeSpec& spec, std::vector<float> x, std::int32_t p) {
  test::Backend be;
  const RotaryTable t = layers::build_rotary_table(spec, 64);
  std::vector<std::int32_t> pos = {p};
  be.rotary(View<float, 3>(x.data(), {1, 1, static_cast<std::int64_t>(x.size())}), View<const std::int32_t, 1>(pos.data(), {1}), t);
  return x;
}
}  // namespace

TEST_CASE("Rotary layouts: YaRN interleaved / pairwise / concatenated and default vs LLaMA pairing agree up to lane order",
          "[layers][rope]") {
  const std::int64_t d = 16, h = d / 2;
  std::vector<float> x(static_cast<std::size_t>(d)), deint(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < d; ++i) x[static_cast<std::size_t>(i)] = std::sin(0.7f * static_cast<float>(i) + 0.3f);
  for (std::int64_t i = 0; i < h; ++i) {  // (x[2i], x[2i+1]) pairs -> halves
    deint[static_cast<std::size_t>(i)] = x[static_cast<std::size_t>(2 * i)];
    deint[static_cast<std::size_t>(h + i)] = x[static_cast<std::size_t>(2 * i + 1)];
  }
  layers::RopeSpec y;
  y.kind = layers::RopeKind::yarn;
  y.head_dim = d;
  y.rope_factor = 4;
  y.original_max_position_embeddings = 32;
  const auto halves = rotate(y, x, 37);  // interleaved in, [re..., im...] out
  layers::RopeSpec yp = y;
  yp.yarn_pairwise = true;
  const auto pairwise = rotate(yp, x, 37);  // interleaved in, interleaved out
  layers::RopeSpec yc = y;
  yc.interleaved = false;
  const auto concat = rotate(yc, deint, 37);  // halves in, halves out
  for (std::int64_t i = 0; i < h; ++i) {
    const auto u = static_cast<std::size_t>(i);
    CHECK(pairwise[2 * u] == Approx(halves[u]).margin(1e-6));
    CHECK(pairwise[2 * u + 1] == Approx(halves[h + u]).margin(1e-6));
  }
  for (std::int64_t i = 0; i < d; ++i) CHECK(concat[static_cast<std::size_t>(i)] == Approx(halves[static_cast<std::size_t>(i)]).margin(1e-6));
  // A rotation: norms of each pair are kept, and position 0 is the identity.
  const auto zero = rotate(y, x, 0);
  for (std::int64_t i = 0; i < h; ++i) {
    CHECK(zero[static_cast<std::size_t>(i)] == Approx(x[static_cast<std::size_t>(2 * i)]).margin(1e-7));
    const double n0 = std::hypot(x[static_cast<std::size_t>(2 * i)], x[static_cast<std::size_t>(2 * i + 1)]);
    CHECK(std::hypot(halves[static_cast<std::size_t>(i)], halves[static_cast<std::size_t>(h + i)]) == Approx(n0).epsilon(1e-6));
  }
  // LLaMA RoPE without the 3.1 scaling rotates interleaved pairs by the default RoPE's half-split angles (f32).
  layers::RopeSpec def;
  def.head_dim = d;
  layers::RopeSpec l31 = def;
  l31.kind = layers::RopeKind::llama31;
  l31.llama31_use_scale = false;
  const auto a = rotate(def, deint, 11), b = rotate(l31, x, 11);
  for (std::int64_t i = 0; i < h; ++i) {
    CHECK(b[static_cast<std::size_t>(2 * i)] == Approx(a[static_cast<std::size_t>(i)]).margin(1e-6));
    CHECK(b[static_cast<std::size_t>(2 * i + 1)] == Approx(a[static_cast<std::size_t>(h + i)]).margin(1e-6));
  }
  // LLaMA-3 scaling with other parameters than MaxText's 8 / 1 / 4 / 8192 (the llama3_rope_* keys): Llama 3.2's
  // factor 32 (an interpolated band) and Llama 4 Scout's 16 / 1 / 1 (none), against the pair angles computed here in
  // double as transformers' _compute_llama3_parameters does, at position 37 with base 500000 (wavelengths 6.3 ..
  // 6.6e5: every band populated).
  for (const auto& [factor, lo, hi] : std::vector<std::tuple<double, double, double>>{{32, 1, 4}, {16, 1, 1}}) {
    layers::RopeSpec s = l31;
    s.max_timescale = 500000.0;
    s.llama31_use_scale = true;
    s.llama31_factor = factor;
    s.llama31_low_freq_factor = lo;
    s.llama31_high_freq_factor = hi;
    const auto r = rotate(s, x, 37);
    for (std::int64_t i = 0; i < h; ++i) {
      const double f = 1.0 / std::pow(500000.0, static_cast<double>(2 * i) / static_cast<double>(d));
      const double wl = 2.0 * M_PI / f;
      double nf = wl > 8192.0 / lo ? f / factor : f;
      if (!(wl < 8192.0 / hi) && !(wl > 8192.0 / lo)) {
        const double sm = (8192.0 / wl - lo) / (hi - lo);
        nf = (1.0 - sm) * nf / factor + sm * nf;
      }
      const double c = std::cos(37.0 * nf), sn = std::sin(37.0 * nf);
      const double x0 = x[static_cast<std::size_t>(2 * i)], x1 = x[static_cast<std::size_t>(2 * i + 1)];
      INFO("factor " << factor << " high_freq_factor " << hi << " pair " << i);
      CHECK(r[static_cast<std::size_t>(2 * i)] == Approx(x0 * c - x1 * sn).margin(2e-6));
      CHECK(r[static_cast<std::size_t>(2 * i + 1)] == Approx(x1 * c + x0 * sn).margin(2e-6));
    }
  }
  // rope_pairwise needs rope_interleave.
  layers::RopeSpec bad = yp;
  bad.interleaved = false;
  CHECK_THROWS_WITH(layers::build_rotary_table(bad, 4), Catch::Contains("rope_pairwise=true requires rope_interleave=true"));
}
