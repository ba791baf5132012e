// The DeepSeek Transformer (DeepSeekDenseLayer + DeepSeekMoELayer) against the PyTorch fixture model (both weight
// layouts, both KV-cache forms, prefill + incremental decode with batch 2), against DeepSeek-V3's own reference
// implementation (../shared/reference/deepseek/v3_qlora32_b1: Hugging Face naming + config.json), the `maxtext` CLI,
// FP8 block dequantisation, and bad checkpoints.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/layers/mhc.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using DeepSeek = models::Transformer<P32, layers::DeepSeekDenseLayer, layers::DeepSeekMoELayer>;

namespace {

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
void close_scaled(const AnyTensor& actual, const AnyTensor& expected, double tol, const std::string& name) {
  if (std::getenv("MAXTEXT_TEST_REPORT")) {
    const auto r = testing::compare_scaled(actual, expected, tol);
    std::printf("%s (bound %.3g)\n", r.message(name).c_str(), r.tol.atol);
  }
  test::expect_close_scaled(actual, expected, tol, name);
}

const std::string kDir = test::fixtures_dir() + "/deepseek_model/";
// Incremental vs full forward differ only in f32 summation order: logits of magnitude ~1 agree to a few ulps.
constexpr double kStepAbs = 1e-5;

Config fixture_config(bool latent) {
  Config c = io::load_config(kDir + "config.yml");
  c.mla_naive_kvcache = !latent;
  return c;
}

DeepSeek load_model(bool latent, const std::string& file = "model.safetensors") {
  const Config cfg = fixture_config(latent);
  DeepSeek m(cfg);
  m.load(io::load_weights(kDir + file, cfg).tensors);
  return m;
}

Tensor<std::int32_t, 2> token_rows(const AnyTensor& t) { return t.to<std::int32_t, 2>({t.shape[0], t.shape[1]}); }

Tensor<std::int32_t, 2> cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n, std::int64_t row = -1) {
  const std::int64_t r0 = row < 0 ? 0 : row, rows = row < 0 ? t.dim(0) : 1;
  Tensor<std::int32_t, 2> s({rows, n});
  for (std::int64_t b = 0; b < rows; ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(r0 + b, c0 + i);
  }
  return s;
}

/// Slice [B, T, ...] along T (axis 1) as a new f32 tensor.
AnyTensor time_slice(const AnyTensor& a, std::int64_t t0, std::int64_t n) { return a.narrow(1, t0, n); }

const char* form_name(bool latent) { return latent ? "latent cache" : "expanded cache"; }

}  // namespace

TEST_CASE("DeepSeek model logits and every layer's output match the torch model, both cache forms", "[models][deepseek]") {
  for (bool latent : {false, true}) {
    DeepSeek m = load_model(latent);
    layers::Capture cap;
    cap.request_all();
    models::ForwardOptions fo;
    fo.capture = &cap;
    const auto logits = m.forward(token_rows(test::npy(kDir + "tokens.npy")), fo);
    INFO(form_name(latent));
    close(logits, test::npy(kDir + "logits.npy"), test::tol::f32_logits, "logits");
    // The residual stream after several layers carries their accumulated f32 error: judged like the shared
    // reference suite, max |diff| <= 1e-5 * max(1, max |ref|) per activation.
    for (const char* n : {"token_embedder", "decoder.dense_layers_0", "decoder.moe_layers_0", "decoder.moe_layers_1",
                          "decoder.decoder_norm"}) {
      close_scaled(cap.at(n), test::npy(kDir + "act_" + n + ".npy"), 1e-5, n);
    }
    CHECK(cap.has("decoder.moe_layers_1.DeepSeekMoeBlock_0.topk_indices"));
    CHECK(cap.at("decoder.moe_layers_0.DeepSeekMoeBlock_0.expert_counts").numel() == 8);
  }
}

TEST_CASE("DeepSeek model loads MaxText's scanned layout (dense_layers / moe_layers) to the same logits", "[models][deepseek]") {
  DeepSeek a = load_model(false), b = load_model(false, "model_scanned.safetensors");
  const auto tok = token_rows(test::npy(kDir + "tokens.npy"));
  close(b.forward(tok), AnyTensor::from(a.forward(tok)), {0.0, 0.0}, "scanned vs unscanned");
}

TEST_CASE("DeepSeek incremental decoding (batch 2) reproduces the reference logits, both cache forms",
          "[models][deepseek][decode]") {
  const auto tok = token_rows(test::npy(kDir + "tokens.npy"));
  const auto ref = test::npy(kDir + "logits.npy");
  const std::int64_t T = tok.dim(1), P0 = 4;
  for (bool latent : {false, true}) {
    DeepSeek m = load_model(latent);
    auto cache = m.make_cache(tok.dim(0), T);
    INFO(form_name(latent));
    const auto pre = m.forward(cols(tok, 0, P0), cache);
    close(pre, time_slice(ref, 0, P0), test::tol::f32_logits, "prefill");
    for (std::int64_t t = P0; t < T; ++t) {
      const auto step = m.forward(cols(tok, t, 1), cache);
      close(step, time_slice(ref, t, 1), test::tol::f32_logits, "decode step " + std::to_string(t));
    }
    CHECK(cache.length(1) == T);
  }
}

TEST_CASE("DeepSeek batched decode with rows at different lengths matches single-row runs", "[models][deepseek][decode]") {
  const auto tok = token_rows(test::npy(kDir + "tokens.npy"));
  for (bool latent : {false, true}) {
    DeepSeek m = load_model(latent);
    std::vector<std::int32_t> lens{3, 6};
    auto cache = m.make_cache(2, 12);
    models::ForwardOptions fo;
    fo.row_lengths = &lens;
    fo.last_only = true;
    std::vector<Tensor<float, 3>> steps{m.forward(cols(tok, 0, 6), cache, fo)};
    for (int s = 0; s < 3; ++s) {
      Tensor<std::int32_t, 2> next({2, 1});
      next(0, 0) = tok(0, 3 + s);
      next(1, 0) = tok(1, 6 + s);
      models::ForwardOptions one;
      one.last_only = true;
      steps.push_back(m.forward(next, cache, one));
    }
    for (std::int64_t b = 0; b < 2; ++b) {
      const std::int64_t L = lens[static_cast<std::size_t>(b)] + 3;
      const auto ref = m.forward(cols(tok, 0, L, b));
      for (std::size_t s = 0; s < steps.size(); ++s) {
        const std::int64_t pos = lens[static_cast<std::size_t>(b)] - 1 + static_cast<std::int64_t>(s);
        for (std::int64_t v = 0; v < ref.dim(2); ++v) {
          INFO(form_name(latent) << " row " << b << " step " << s << " vocab " << v);
          REQUIRE(steps[s](b, 0, v) == Approx(ref(0, pos, v)).epsilon(1e-5).margin(kStepAbs));
        }
      }
    }
  }
}

TEST_CASE("The latent KV cache holds r_kv + Hr values per token and layer", "[models][deepseek][decode]") {
  DeepSeek e = load_model(false), l = load_model(true);
  const auto ce = e.make_cache(2, 16), cl = l.make_cache(2, 16);
  // fixture: N 2, Hn 8, Hr 4, Hv 8, r_kv 16, 3 layers, f32
  CHECK(ce.bytes() == 3 * 2 * 16 * (2 * 12 + 2 * 8) * 4);
  CHECK(cl.bytes() == 3 * 2 * 16 * (16 + 4) * 4);
}

TEST_CASE("Seeded DeepSeek initialisation, export and reload round-trip (stacked experts included)", "[models][deepseek][init]") {
  const Config cfg = fixture_config(false);
  DeepSeek a(cfg);
  a.init(5);
  auto p = a.export_params();
  const AnyTensor& wi = p.at("decoder.moe_layers_0.DeepSeekMoeBlock_0.MoeBlock_0.wi_0");
  REQUIRE(wi.shape == std::vector<std::int64_t>{8, 32, 16});
  double s2 = 0;
  for (std::int64_t i = 0; i < wi.numel(); ++i) s2 += wi.element(i) * wi.element(i);
  // MaxText initialises [E, D, F] expert kernels with fan_in = E * F: std = sqrt(1 / (8 * 16)).
  CHECK(std::sqrt(s2 / static_cast<double>(wi.numel())) == Approx(std::sqrt(1.0 / 128.0)).epsilon(0.1));
  const std::string path = "deepseek_export_roundtrip.safetensors";
  io::write_safetensors(path, p.tensors);
  DeepSeek b(cfg);
  b.load(io::load_weights(path, cfg).tensors);
  const auto tok = token_rows(test::npy(kDir + "tokens.npy"));
  close(b.forward(tok), AnyTensor::from(a.forward(tok)), {0.0, 0.0}, "reloaded");
  std::remove(path.c_str());
}

// ---- manifold-constrained hyper-connections (mHC; tests/reference/mhc_reference.py) -----------------------------

namespace {

/// The mappings of tests/fixtures/mhc_maps/<name>.safetensors on the test backend, in activation type A.
template <class A>
void check_mhc_maps(const std::string& name, const nlohmann::json& meta, double rtol, double atol) {
  const auto t = io::read_safetensors(test::fixtures_dir() + "/mhc_maps/" + name + ".safetensors");
  test::Backend be;
  MhcOptions o;
  o.k = meta.at("k").get<std::int64_t>();
  o.lite = meta.at("lite").get<bool>();
  o.sinkhorn_iterations = meta.at("sinkhorn_iterations").get<std::int64_t>();
  const std::int64_t M = meta.at("rows").get<std::int64_t>(), k = o.k, R = mhc_res_width(o);
  auto dev2 = [&](const std::string& n, std::int64_t cols) { return test::to_backend(be, t.at(n).to<A, 2>({M, cols})); };
  auto dev1 = [&](const std::string& n) { return test::to_backend(be, t.at(n).to<A, 1>({t.at(n).numel()})); };
  const auto hp = dev2("hp", k), hq = dev2("hq", k), hr = dev2("hr", R);
  const auto ps = dev1("pre_alpha_scale"), qs = dev1("post_alpha_scale"), rs = dev1("res_alpha_scale");
  const auto pb = dev1("pre_beta"), qb = dev1("post_beta"), rb = dev1("res_beta");
  Tensor<A, 2> pre = test::to_backend(be, Tensor<A, 2>({M, k})), post = test::to_backend(be, Tensor<A, 2>({M, k})),
               res = test::to_backend(be, Tensor<A, 2>({M, k * k}));
  const MhcCoefficients<A> c{ps.data(), qs.data(), rs.data(), pb.data(), qb.data(), rb.data()};
  be.mhc_maps(hp.cview(), hq.cview(), hr.cview(), c, o, pre.view(), post.view(), res.view());
  close(test::to_host(be, pre), t.at("pre"), {rtol, atol}, name + " pre");
  close(test::to_host(be, post), t.at("post"), {rtol, atol}, name + " post");
  close(test::to_host(be, res), t.at("res"), {rtol, atol}, name + " res");
}

struct MhcFixture {
  std::string dir;
  Config cfg;
};
MhcFixture mhc_fixture(const std::string& name) {
  MhcFixture f{test::fixtures_dir() + "/" + name + "/", {}};
  f.cfg = io::load_config(f.dir + "config.yml");
  return f;
}

}  // namespace

TEST_CASE("mHC mappings (pre / post sigmoids, Sinkhorn, mHC-lite permutations) match the torch reference",
          "[models][deepseek][mhc]") {
  const auto meta = test::read_meta(test::fixtures_dir() + "/mhc_maps");
  for (const auto& c : meta.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    INFO(name);
    // f32: a handful of f32 roundings through sigmoid / exp and up to 20 Sinkhorn rounds on values of magnitude <= 1.
    check_mhc_maps<float>(name, c, 1e-5, 1e-6);
    // bf16: the inputs are rounded to bf16 and every op after them too (MaxText's dtype arithmetic). The logits
    // r(r(scale * h) + beta) reach |6| here, so they carry up to 2^-8 * 6 ~ 0.023 absolute error, which a softmax or
    // sigmoid turns into that much relative error of its output (measured worst: 3.6e-2 relative on lite k=5's
    // 0.32, 7e-3 on the sigmoids): 4 bf16 ulps (2^-5) relative plus 2e-3 absolute for outputs near zero.
    check_mhc_maps<bf16>(name, c, 4.0 / 128.0, 2e-3);
  }
}

TEST_CASE("DeepSeek with mHC (k 4, Sinkhorn) and mHC-lite (k 3): logits and every layer's streams match torch",
          "[models][deepseek][mhc]") {
  for (const char* name : {"deepseek_mhc_model", "deepseek_mhc_lite_model"}) {
    const MhcFixture f = mhc_fixture(name);
    INFO(name);
    const std::int64_t k = f.cfg.mhc_expansion_rate;
    CHECK(k == (std::string(name) == "deepseek_mhc_model" ? 4 : 3));
    for (bool latent : {false, true}) {
      Config c = f.cfg;
      c.mla_naive_kvcache = !latent;
      DeepSeek m(c);
      m.load(io::load_weights(f.dir + "model.safetensors", c).tensors);
      layers::Capture cap;
      cap.request_all();
      models::ForwardOptions fo;
      fo.capture = &cap;
      const auto tok = token_rows(test::npy(f.dir + "tokens.npy"));
      const auto logits = m.forward(tok, fo);
      INFO(form_name(latent));
      close(logits, test::npy(f.dir + "logits.npy"), test::tol::f32_logits, "logits");
      // The k-stream residual after each layer ([B, T, k*D], as MaxText's [B, T, k, D] flattened).
      std::vector<std::string> acts{"token_embedder", "decoder.dense_layers_0", "decoder.moe_layers_0", "decoder.decoder_norm"};
      if (c.num_decoder_layers > 2) acts.push_back("decoder.moe_layers_1");
      for (const auto& n : acts) {
        const AnyTensor got = cap.at(n);
        const AnyTensor ref = test::npy(f.dir + "act_" + n + ".npy");
        REQUIRE(got.numel() == ref.numel());
        close_scaled(got.reshaped(ref.shape), ref, 1e-5, n);
      }
      // Incremental decode through the same streams.
      DeepSeek d(c);
      d.load(io::load_weights(f.dir + "model_scanned.safetensors", c).tensors);
      auto cache = d.make_cache(tok.dim(0), tok.dim(1));
      const std::int64_t P0 = 5;
      close(d.forward(cols(tok, 0, P0), cache), time_slice(test::npy(f.dir + "logits.npy"), 0, P0),
            test::tol::f32_logits, "scanned prefill");
      for (std::int64_t t = P0; t < tok.dim(1); ++t) {
        close(d.forward(cols(tok, t, 1), cache), time_slice(test::npy(f.dir + "logits.npy"), t, 1), test::tol::f32_logits,
              "scanned decode step " + std::to_string(t));
      }
    }
  }
}

TEST_CASE("run_layer takes one mHC layer on MaxText's [B, T, k, D] streams", "[models][deepseek][mhc]") {
  const MhcFixture f = mhc_fixture("deepseek_mhc_model");
  test::Backend be;
  Config c = f.cfg;
  c.mla_naive_kvcache = true;
  layers::DeepSeekMoELayer<P32> layer(c, {1, "decoder.moe_layers_0", "decoder.moe_layers_0.self_attention",
                                          "decoder.moe_layers_0.DeepSeekMoeBlock_0"});
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(f.dir + "model.safetensors"), be,
                                                     "decoder.moe_layers_0");
  const AnyTensor in = test::npy(f.dir + "act_decoder.dense_layers_0.npy");
  const std::int64_t k = c.mhc_expansion_rate, D = c.emb_dim;
  const auto y = models::run_layer<P32>(layer, params, be, in.reshaped({in.shape[0], in.shape[1], k, D}));
  close_scaled(AnyTensor::from(y), test::npy(f.dir + "act_decoder.moe_layers_0.npy"), 1e-5, "moe_layers_0 alone");
  // A single-stream input is refused by the module, naming the expected width.
  CHECK_THROWS_WITH(models::run_layer<P32>(layer, params, be, in.narrow(2, 0, D)),
                    Catch::Contains("expected width mhc_expansion_rate * emb_dim = 128"));
}

TEST_CASE("mHC parameters: seeded initialisation (MaxText's initialisers), export and reload", "[models][deepseek][mhc][init]") {
  const MhcFixture f = mhc_fixture("deepseek_mhc_model");
  DeepSeek a(f.cfg);
  a.init(3);
  auto p = a.export_params();
  const std::string pre = "decoder.moe_layers_1.mhc_mlp.";
  REQUIRE(p.at(pre + "res_alpha").shape == std::vector<std::int64_t>{4 * 32, 16});
  REQUIRE(p.at(pre + "res_beta").shape == std::vector<std::int64_t>{4, 4});
  REQUIRE(p.at(pre + "mhc_norm.scale").shape == std::vector<std::int64_t>{4 * 32});
  CHECK(p.at("decoder.dense_layers_0.mhc_attention.pre_alpha_scale").element(0) == Approx(0.01));  // default_scalar_init
  CHECK(p.at(pre + "post_beta").element(1) == 0.0);                                                 // default_bias_init
  const AnyTensor& ra = p.at(pre + "res_alpha");
  double s2 = 0;
  for (std::int64_t i = 0; i < ra.numel(); ++i) s2 += ra.element(i) * ra.element(i);
  // nd_dense_init(1.0, "fan_in", "normal"): std = sqrt(1 / (k * D)).
  CHECK(std::sqrt(s2 / static_cast<double>(ra.numel())) == Approx(std::sqrt(1.0 / 128.0)).epsilon(0.1));
  const std::string path = "deepseek_mhc_roundtrip.safetensors";
  io::write_safetensors(path, p.tensors);
  DeepSeek b(f.cfg);
  b.load(io::load_weights(path, f.cfg).tensors);
  const auto tok = token_rows(test::npy(f.dir + "tokens.npy"));
  close(b.forward(tok), AnyTensor::from(a.forward(tok)), {0.0, 0.0}, "reloaded");
  std::remove(path.c_str());
  // A lite model has k! residual weights.
  const MhcFixture l = mhc_fixture("deepseek_mhc_lite_model");
  DeepSeek c(l.cfg);
  c.init(4);
  auto q = c.export_params();
  CHECK(q.at("decoder.dense_layers_0.mhc_attention.res_alpha").shape == std::vector<std::int64_t>{3 * 32, 6});
  CHECK(q.at("decoder.dense_layers_0.mhc_attention.res_beta").shape == std::vector<std::int64_t>{6});
}

TEST_CASE("mHC configs and checkpoints that do not fit are refused by name", "[models][deepseek][mhc][errors]") {
  const MhcFixture f = mhc_fixture("deepseek_mhc_model");
  // Checkpoint without hyper-connection weights for an mHC config, and the reverse.
  {
    DeepSeek m(f.cfg);
    CHECK_THROWS_WITH(m.load(io::load_weights(kDir + "model.safetensors", f.cfg).tensors),
                      Catch::Contains("mhc_attention.pre_alpha") && Catch::Contains("missing"));
  }
  {
    Config c = f.cfg;
    c.mhc_expansion_rate = 1;
    DeepSeek m(c);
    CHECK_THROWS_WITH(m.load(io::load_weights(f.dir + "model.safetensors", c).tensors),
                      Catch::Contains("unexpected tensor decoder.dense_layers_0.mhc_attention"));
  }
  {  // Weights of another expansion rate: shapes named.
    Config c = f.cfg;
    c.mhc_expansion_rate = 2;
    DeepSeek m(c);
    CHECK_THROWS_WITH(m.load(io::load_weights(f.dir + "model.safetensors", c).tensors),
                      Catch::Contains("mhc_mlp.res_alpha") && Catch::Contains("128"));
  }
  {  // Other blocks have no hyper-connections (MaxText's other layers cannot take [B, S, k, D]).
    Config c = io::load_config(test::fixtures_dir() + "/mixtral_model/config.yml");
    c.mhc_expansion_rate = 2;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("mhc_expansion_rate = 2") && Catch::Contains("mixtral"));
  }
  {
    Config c = f.cfg;
    c.mhc_expansion_rate = 9;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("at most 8 streams"));
    c.mhc_expansion_rate = 6;
    c.enable_mhc_lite = true;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("at most 5 streams"));
    c = f.cfg;
    c.sinkhorn_iterations = 0;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("sinkhorn_iterations must be >= 1"));
    c = f.cfg;
    c.use_mhc_pallas_kernel = true;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("use_mhc_pallas_kernel=True requires enable_mhc_lite=True"));
    c = f.cfg;
    c.set("engram_layers", "[1]");
    CHECK_NOTHROW(c.validate());  // Engram with mHC runs (tests/models/test_deepseek_engram.cpp)
    c.set("engram_layers", "[1, 9]");
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("engram_layers: layer 9 is beyond the"));
    // A layer built from a config that skipped validate() checks the stream count itself.
    c = f.cfg;
    c.mhc_expansion_rate = 9;
    CHECK_THROWS_WITH((layers::DeepSeekDenseLayer<P32>(c, {0, "l", "l.self_attention", "l.mlp"})),
                      Catch::Contains("at most 8 streams"));
  }
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits (CLI) on the DeepSeek fixture, latent cache, --incremental", "[models][deepseek][cli]") {
  const std::string out = "deepseek_cli_logits.npy";
  const auto tok = token_rows(test::npy(kDir + "tokens.npy"));
  std::string ids;
  for (std::int64_t b = 0; b < tok.dim(0); ++b) {
    for (std::int64_t t = 0; t < tok.dim(1); ++t) ids += (t ? "," : (b ? "/" : "")) + std::to_string(tok(b, t));
  }
  const std::string cmd = ::maxtext::test::cli_path() + " logits --config " + kDir + "config.yml --weights " + kDir +
                          "model.safetensors --tokens " + ids + " --incremental 4 --out " + out +
                          " mla_naive_kvcache=false > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  close(test::npy(out), test::npy(kDir + "logits.npy"), test::tol::f32_logits, "cli logits");
  std::remove(out.c_str());
}
#endif

// ---- DeepSeek-V3's own reference implementation (shared reference case) -----------------------------------------

namespace {
const std::string kRef = "/deepseek/v3_qlora32_b1/";

void check_reference_case(bool latent) {
  const std::string d = test::require(test::reference_dir() + kRef, "DeepSeek reference case");
  const Config cfg = io::load_hf_deepseek_config(d + "config.json", {latent ? "mla_naive_kvcache=false" : "mla_naive_kvcache=true"});
  CHECK(cfg.model_name.rfind("deepseek3", 0) == 0);
  CHECK(cfg.n_routing_groups == 4);
  const auto w = io::load_weights(d + "model.safetensors", cfg);
  CHECK(w.naming == io::WeightNaming::hf);
  DeepSeek m(cfg);
  m.load(w.tensors);
  const auto prompt = token_rows(test::npy(d + "prompt_tokens.npy"));
  const auto dec = token_rows(test::npy(d + "decode_tokens.npy"));
  auto cache = m.make_cache(1, prompt.dim(1) + dec.dim(1));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions fo;
  fo.capture = &cap;
  const std::string tag = form_name(latent);
  const auto logits = m.forward(prompt, cache, fo);
  close_scaled(AnyTensor::from(logits), test::npy(d + "prefill_logits_f64.npy"), 1e-5, tag + " prefill logits");
  const std::pair<const char*, const char*> acts[] = {
      {"token_embedder", "embed_out"},
      {"decoder.dense_layers_0", "layer0_out"},
      {"decoder.dense_layers_0.self_attention", "layer0_attn_out"},
      {"decoder.dense_layers_0.mlp", "layer0_ffn_out"},
      {"decoder.moe_layers_0", "layer1_out"},
      {"decoder.moe_layers_0.self_attention", "layer1_attn_out"},
      {"decoder.moe_layers_0.DeepSeekMoeBlock_0", "layer1_ffn_out"},
      {"decoder.moe_layers_1", "layer2_out"}};
  for (const auto& [ours, theirs] : acts) {
    close_scaled(cap.at(ours), test::npy(d + theirs + "_f64.npy"), 1e-5, tag + " " + theirs);
  }
  // Routing of layer 1 (moe_layers_0): expert sets per token, and the weight of each chosen expert.
  const AnyTensor& idx = cap.at("decoder.moe_layers_0.DeepSeekMoeBlock_0.topk_indices");
  const AnyTensor& wts = cap.at("decoder.moe_layers_0.DeepSeekMoeBlock_0.topk_weights");
  const auto ridx = test::npy(d + "layer1_gate_indices.npy"), rw = test::npy(d + "layer1_gate_weights_f64.npy");
  const std::int64_t T = ridx.shape[0], k = ridx.shape[1];
  REQUIRE(idx.numel() == T * k);
  for (std::int64_t t = 0; t < T; ++t) {
    std::set<long> want, got;
    for (std::int64_t j = 0; j < k; ++j) {
      want.insert(static_cast<long>(ridx.element(t * k + j)));
      got.insert(static_cast<long>(idx.element(t * k + j)));
    }
    INFO(tag << " token " << t);
    REQUIRE(got == want);
    for (std::int64_t j = 0; j < k; ++j) {
      for (std::int64_t i = 0; i < k; ++i) {
        if (idx.element(t * k + j) == ridx.element(t * k + i)) {
          CHECK(std::fabs(wts.element(t * k + j) - rw.element(t * k + i)) <= 1e-5 * 2.5);
        }
      }
    }
  }
  // Decode: the 4 fixed tokens one at a time at positions 16..19 through the cache.
  const auto rdl = test::npy(d + "decode_logits_f64.npy");
  const auto rd0 = test::npy(d + "decode_layer0_out_f64.npy"), rd1 = test::npy(d + "decode_layer1_out_f64.npy");
  for (std::int64_t s = 0; s < dec.dim(1); ++s) {
    cap.clear_results();
    const auto step = m.forward(cols(dec, s, 1), cache, fo);
    const std::string st = tag + " decode step " + std::to_string(s);
    close_scaled(AnyTensor::from(step), time_slice(rdl, s, 1), 1e-5, st + " logits");
    close_scaled(cap.at("decoder.dense_layers_0"), time_slice(rd0, s, 1), 1e-5, st + " layer0_out");
    close_scaled(cap.at("decoder.moe_layers_0"), time_slice(rd1, s, 1), 1e-5, st + " layer1_out");
  }
  CHECK(cache.length(0) == 20);
}
}  // namespace

TEST_CASE("DeepSeek-V3 reference case (HF naming + config.json), expanded cache", "[models][deepseek][reference]") {
  check_reference_case(false);
}

TEST_CASE("DeepSeek-V3 reference case (HF naming + config.json), latent cache", "[models][deepseek][reference]") {
  check_reference_case(true);
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits (CLI) on the DeepSeek-V3 reference checkpoint", "[models][deepseek][reference][cli]") {
  const std::string d = test::require(test::reference_dir() + kRef, "DeepSeek reference case");
  const auto prompt = token_rows(test::npy(d + "prompt_tokens.npy")), dec = token_rows(test::npy(d + "decode_tokens.npy"));
  std::string ids;
  for (std::int64_t t = 0; t < prompt.dim(1); ++t) ids += (t ? "," : "") + std::to_string(prompt(0, t));
  for (std::int64_t t = 0; t < dec.dim(1); ++t) ids += "," + std::to_string(dec(0, t));
  const std::string out = "deepseek_ref_cli_logits.npy";
  const std::string cmd = ::maxtext::test::cli_path() + " logits --config " + d + "config.json --weights " + d +
                          "model.safetensors --tokens " + ids + " --incremental 4 --out " + out +
                          " mla_naive_kvcache=false > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const auto l = test::npy(out);
  close_scaled(l.narrow(1, 0, 16), test::npy(d + "prefill_logits_f64.npy"), 1e-5, "cli prefill logits");
  close_scaled(l.narrow(1, 16, 4), test::npy(d + "decode_logits_f64.npy"), 1e-5, "cli decode logits");
  std::remove(out.c_str());
}
#endif

// ---- FP8 -------------------------------------------------------------------------------------------------------

namespace {
/// e4m3fn by formula: sign, 4-bit exponent (bias 7), 3-bit mantissa; exponent 0 is subnormal (m * 2^-9).
double e4m3(std::uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, mant = b & 7;
  const double v = e == 0 ? mant * std::ldexp(1.0, -9) : (1.0 + mant / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -v : v;
}
}  // namespace

TEST_CASE("FP8 e4m3 weights with 128x128 block scales dequantise to the closed form", "[io][deepseek][fp8]") {
  const std::int64_t R = 130, C = 200;
  Tensor<fp8_e4m3, 2> w({R, C});
  for (std::int64_t i = 0; i < R * C; ++i) {
    std::uint8_t b = static_cast<std::uint8_t>((i * 37) & 0xff);
    if ((b & 0x7f) == 0x7f) b = 0x38;  // skip the NaN codes
    w.data()[i].bits = b;
  }
  Tensor<float, 2> s({2, 2});
  s(0, 0) = 0.5f;
  s(0, 1) = 3.0f;
  s(1, 0) = -0.25f;
  s(1, 1) = 1e-3f;
  io::TensorMap tm;
  tm.add("model.layers.0.mlp.down_proj.weight", AnyTensor::from(w, "w"));
  tm.add("model.layers.0.mlp.down_proj.weight_scale_inv", AnyTensor::from(s, "s"));
  const io::TensorMap dq = io::dequantize_fp8_checkpoint(tm);
  REQUIRE(dq.tensors.size() == 1);
  const AnyTensor& o = dq.at("model.layers.0.mlp.down_proj.weight");
  REQUIRE(o.dtype == DType::f32);
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t c = 0; c < C; ++c) {
      const double want = static_cast<double>(static_cast<float>(e4m3(w(r, c).bits) * s(r / 128, c / 128)));
      REQUIRE(o.element(r * C + c) == want);
    }
  }
  // Spot values of the format: 1.0, 2.0, the smallest subnormal, the largest finite, -1.0.
  for (auto [bits, val] : {std::pair<int, double>{0x38, 1.0}, {0x40, 2.0}, {0x01, 0.001953125}, {0x7e, 448.0}, {0xb8, -1.0}}) {
    fp8_e4m3 f;
    f.bits = static_cast<std::uint8_t>(bits);
    CHECK(static_cast<float>(f) == val);
  }
  // Missing scales and mis-shaped scales are errors naming the tensor.
  io::TensorMap no_scale;
  no_scale.add("model.layers.0.mlp.down_proj.weight", AnyTensor::from(w, "w"));
  CHECK_THROWS_WITH(io::dequantize_fp8_checkpoint(no_scale),
                    Catch::Contains("model.layers.0.mlp.down_proj.weight_scale_inv (its block scales) is missing"));
  io::TensorMap bad_scale;
  bad_scale.add("x.weight", AnyTensor::from(w, "x.weight"));
  bad_scale.add("x.weight_scale_inv", AnyTensor::from(Tensor<float, 2>({1, 2}), "s"));
  CHECK_THROWS_WITH(io::dequantize_fp8_checkpoint(bad_scale), Catch::Contains("expected a float tensor [2, 2]"));
}

TEST_CASE("An FP8 HF DeepSeek weight reaches the model dequantised and transposed", "[io][deepseek][fp8]") {
  const std::string d = test::require(test::reference_dir() + kRef, "DeepSeek reference case");
  const Config cfg = io::load_hf_deepseek_config(d + "config.json");
  io::TensorMap raw = io::read_safetensors(d + "model.safetensors");
  // Replace layer 0's down_proj [64, 128] by an FP8 copy with one scale block per 128x128 tile.
  const std::string n = "model.layers.0.mlp.down_proj.weight";
  Tensor<fp8_e4m3, 2> q({64, 128});
  for (std::int64_t i = 0; i < q.size(); ++i) q.data()[i].bits = static_cast<std::uint8_t>((i * 11 + 3) % 0x7e);
  Tensor<float, 2> sc({1, 1});
  sc(0, 0) = 0.0625f;
  raw.tensors.erase(n);
  raw.add(n, AnyTensor::from(q, n));
  raw.add(n + "_scale_inv", AnyTensor::from(sc, n + "_scale_inv"));
  const io::TensorMap canon = io::canonicalize_hf_deepseek(raw, cfg);
  const AnyTensor& k = canon.at("decoder.dense_layers_0.mlp.wo.kernel");  // MaxText [F, D] = HF [D, F]^T
  REQUIRE(k.shape == std::vector<std::int64_t>{128, 64});
  for (std::int64_t f = 0; f < 128; ++f) {
    for (std::int64_t dd = 0; dd < 64; ++dd) REQUIRE(k.element(f * 64 + dd) == e4m3(q(dd, f).bits) * 0.0625);
  }
  DeepSeek m(cfg);
  m.load(canon);  // every tensor consumed: the FP8 scale was folded into the weight
  CHECK(m.num_params() > 0);
}

// ---- bad checkpoints / configs ----------------------------------------------------------------------------------

TEST_CASE("HF DeepSeek configs MaxText cannot express are refused, bad checkpoints named", "[io][deepseek][errors]") {
  const std::string d = test::require(test::reference_dir() + kRef, "DeepSeek reference case");
  nlohmann::json j = nlohmann::json::parse(io::read_text_file(d + "config.json"));
  auto refuse = [&](nlohmann::json jj, const std::string& msg) {
    CHECK_THROWS_WITH(io::config_from_hf_deepseek(jj), Catch::Contains(msg));
  };
  auto j1 = j;
  j1["topk_method"] = "group_limited_greedy";
  refuse(j1, "max-per-group routing");
  auto j2 = j;
  j2["rope_scaling"]["mscale_all_dim"] = 0.5;
  refuse(j2, "mscale_all_dim");
  auto j3 = j;
  j3["norm_topk_prob"] = false;
  refuse(j3, "norm_topk_prob");
  auto j4 = j;
  j4.erase("kv_lora_rank");
  refuse(j4, "missing key 'kv_lora_rank'");
  auto j5 = j;
  j5["model_type"] = "llama";
  refuse(j5, "model_type: expected deepseek_v2, deepseek_v3 or mixtral");

  const Config cfg = io::load_hf_deepseek_config(d + "config.json");
  io::TensorMap raw = io::read_safetensors(d + "model.safetensors");
  raw.tensors.erase("model.layers.2.mlp.experts.5.up_proj.weight");
  CHECK_THROWS_WITH(io::canonicalize_hf_deepseek(raw, cfg),
                    Catch::Contains("missing expert tensor model.layers.2.mlp.experts.5.up_proj.weight"));
  io::TensorMap raw2 = io::read_safetensors(d + "model.safetensors");
  raw2.tensors.erase("model.layers.1.self_attn.kv_b_proj.weight");
  DeepSeek m(cfg);
  CHECK_THROWS_WITH(m.load(io::canonicalize_hf_deepseek(raw2, cfg)),
                    Catch::Contains("missing tensor decoder.moe_layers_0.self_attention.wkv_b.kernel"));
}

TEST_CASE("HF config.json mapping: DeepSeek-V2-Lite and DeepSeek-V3 keys", "[io][deepseek][hf]") {
  // DeepSeek-V2-Lite's config.json (the keys that matter).
  const nlohmann::json v2 = nlohmann::json::parse(R"({
    "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
    "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 64,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "scoring_func": "softmax", "topk_method": "greedy", "n_group": 1, "topk_group": 1, "norm_topk_prob": false,
    "routed_scaling_factor": 1.0, "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
    "vocab_size": 102400, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
  Config c = io::config_from_hf_deepseek(v2);
  c.derive();
  CHECK(c.decoder_block == "deepseek");
  CHECK(c.model_name.rfind("deepseek3", 0) != 0);  // V2 routing: no bias-only-for-selection path
  CHECK(c.q_lora_rank == 0);
  CHECK(c.routed_score_func == "softmax");
  CHECK_FALSE(c.routed_bias);
  CHECK(c.n_routing_groups == -1);
  CHECK(c.mscale == 0.707);
  CHECK(c.dtype == "bfloat16");
  CHECK(c.moe_mlp_dim == 1408);
  CHECK(c.shared_experts == 2);
  // MaxText's deepseek2-16b has the same forward keys.
  const Config y = io::load_config(::maxtext::test::config_dir() + "/models/deepseek2-16b.yml");
  for (const char* k : {"base_emb_dim", "base_mlp_dim", "base_moe_mlp_dim", "base_num_decoder_layers", "first_num_dense_layers",
                        "num_experts", "num_experts_per_tok", "shared_experts", "routed_score_func", "routed_bias",
                        "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                        "rope_type", "rope_factor", "original_max_position_embeddings", "max_position_embeddings",
                        "mscale", "vocab_size", "normalization_layer_epsilon"}) {
    INFO(k);
    CHECK(c.get(k) == y.get(k));
  }
  CHECK(layers::mla_softmax_scale(c) == Approx(0.114721).epsilon(1e-5));  // mla.md
  // DeepSeek-V3 (HF routes within 4 of 8 groups: MaxText's deepseek3-671b plus n_routing_groups=8/4).
  nlohmann::json v3 = v2;
  v3["model_type"] = "deepseek_v3";
  v3["scoring_func"] = "sigmoid";
  v3["topk_method"] = "noaux_tc";
  v3["norm_topk_prob"] = true;
  v3["n_group"] = 8;
  v3["topk_group"] = 4;
  v3["routed_scaling_factor"] = 2.5;
  v3["q_lora_rank"] = 1536;
  v3["rope_scaling"]["mscale"] = 1.0;
  v3["rope_scaling"]["mscale_all_dim"] = 1.0;
  Config c3 = io::config_from_hf_deepseek(v3);
  c3.derive();
  CHECK(c3.model_name.rfind("deepseek3", 0) == 0);
  CHECK(c3.routed_bias);
  CHECK(c3.n_routing_groups == 8);
  CHECK(c3.topk_routing_group == 4);
  CHECK(layers::mla_softmax_scale(c3) == Approx(0.135234).epsilon(1e-5));  // mla.md, DeepSeek-V3
}
