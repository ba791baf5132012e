// tests/models/test_gemma3_vision.cpp: Gemma 3's vision encoder (families/gemma/vision.hpp) against the float64
// re-statement of MaxText's Gemma3VisionEncoderLayer + VisionEmbedder (tests/reference/gemma3_vision_reference.py,
// fixtures gemma3_vision_pool: 2 pictures, 1024 patches pooled 2x2 to 256, 2 blocks; gemma3_vision_nopool: 256
// patches, no pooling), from MaxText's tree and from the Hugging Face layout, on the test's backend (CPU; CUDA in
// tests/cuda/test_cuda_gemma3_vision.cu) and, in the CPU build, the reference backend.
// Tolerance: f32 against f64. Per block output rtol 1e-5 (as test::tol::f32_layer) and atol 8e-6 instead of 1e-6:
// the residual stream reaches |x| = 7 (one f32 ulp at 4-8 is 4.8e-7), the CPU attention sums 1024 keys with its
// vectorised f32 exp, and an output that cancels to ~0.003 keeps the absolute rounding of those terms (measured:
// 3.9e-6 at most, on 6 of 32768 values; the reference backend stays within 1e-6). The projected tokens, after every
// block and the pooling, at test::tol::f32_logits (errors grow with depth).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/gemma/vision.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

layers::Gemma3VisionConfig config_of(const nlohmann::json& meta) {
  const auto& v = meta.at("vision");
  layers::Gemma3VisionConfig c;
  c.image_size = v.at("image_size").get<std::int64_t>();
  c.patch_size = v.at("patch_size").get<std::int64_t>();
  c.num_channels = v.at("num_channels").get<std::int64_t>();
  c.hidden_size = v.at("hidden_size").get<std::int64_t>();
  c.intermediate_size = v.at("intermediate_size").get<std::int64_t>();
  c.num_layers = v.at("num_layers").get<std::int64_t>();
  c.num_heads = v.at("num_heads").get<std::int64_t>();
  c.tokens_per_image = v.at("mm_tokens_per_image").get<std::int64_t>();
  c.emb_dim = v.at("emb_dim").get<std::int64_t>();
  c.eps = v.at("eps").get<float>();
  return c;
}

template <class Be>
void check_tower(const std::string& name, bool hf) {
  using P = Policy<Be, float>;
  const std::string dir = test::fixtures_dir() + "/" + name;
  const auto meta = read_json(dir + "/meta.json");
  const layers::Gemma3VisionConfig c =
      hf ? layers::Gemma3VisionConfig::from_hf(read_json(dir + "/hf/config.json")) : config_of(meta);
  CHECK(c.num_layers == meta.at("vision").at("num_layers").get<std::int64_t>());
  CHECK(c.emb_dim == meta.at("vision").at("emb_dim").get<std::int64_t>());
  const layers::Gemma3VisionEncoder<P> tower(c);
  Be be;
  const io::TensorMap tensors = hf ? io::gemma3_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), c)
                                   : io::read_safetensors(dir + "/model.safetensors");
  const auto params = models::load_layer_params<P>(tower, tensors, be);
  const AnyTensor px = test::npy(dir + "/pixels.npy");
  const Tensor<float, 4> pixels = px.to<float, 4>({px.shape[0], px.shape[1], px.shape[2], px.shape[3]});
  const std::string enc = "vision_encoder.Gemma3VisionEncoderLayer_0", tr = enc + ".Transformer";
  layers::Capture cap;
  for (std::int64_t i = 0; i < c.num_layers; ++i) cap.request(tr + ".encoderblock_" + std::to_string(i));
  cap.request(tr + ".encoder_norm");
  cap.request(enc + ".VisionExit");
  const Tensor<float, 3> out = tower.encode(be, params, pixels, &cap);
  const std::string what = name + (hf ? " (hf)" : "") + " on " + Be::name;
  const testing::Tolerance stream{1e-5, 8e-6};
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    test::expect_close(cap.at(tr + ".encoderblock_" + std::to_string(i)),
                       test::npy(dir + "/block_" + std::to_string(i) + ".npy"), stream,
                       what + " block " + std::to_string(i));
  }
  test::expect_close(cap.at(tr + ".encoder_norm"), test::npy(dir + "/encoder_norm.npy"), stream,
                     what + " encoder_norm");
  test::expect_close(cap.at(enc + ".VisionExit"), test::npy(dir + "/exit.npy"), stream, what + " exit");
  test::expect_close(out, test::npy(dir + "/out.npy"), test::tol::f32_logits, what + " out");
}

}  // namespace

TEST_CASE("Gemma 3 vision tower (2 pictures, 1024 patches pooled to 256) matches MaxText's, MaxText and HF weights",
          "[models][gemma3][vision]") {
  check_tower<test::Backend>("gemma3_vision_pool", false);
  check_tower<test::Backend>("gemma3_vision_pool", true);
  if constexpr (test::kDefaultBackend) check_tower<reference::Backend>("gemma3_vision_pool", false);
}

TEST_CASE("Gemma 3 vision tower with as many patches as tokens (no pooling) matches MaxText's", "[models][gemma3][vision]") {
  check_tower<test::Backend>("gemma3_vision_nopool", false);
  check_tower<test::Backend>("gemma3_vision_nopool", true);
  if constexpr (test::kDefaultBackend) check_tower<reference::Backend>("gemma3_vision_nopool", true);
}

TEST_CASE("vision ops: full attention, affine LayerNorm and grid pooling against float64 loops", "[models][vision][backend]") {
  // Random inputs; the expectations are computed here in double from their definitions (backend/reference/vision.hpp).
  // full_attention at T = 40 (the tiled kernel) and T = 100 (the CPU's GEMM path), two sequences of 3 heads of 8.
  test::Backend be;
  Scratch scratch(be.memory());
  std::uint64_t seed = 12345;
  const auto uniform = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(seed >> 40) / static_cast<double>(1ull << 24)) * 2.0f - 1.0f;
  };
  const auto upload = [&](const std::vector<float>& h, std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    View<float, 2> d = scratch.alloc<float, 2>({n / shape.back(), shape.back()});
    be.copy(d.data(), h.data(), h.size() * sizeof(float), CopyKind::host_to_device);
    return d;
  };
  const auto download = [&](View<float, 2> d) {
    std::vector<float> h(static_cast<std::size_t>(d.dim(0) * d.dim(1)));
    be.copy(h.data(), d.data(), h.size() * sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    return h;
  };
  for (const std::int64_t T : {std::int64_t{40}, std::int64_t{100}}) {
    const std::int64_t n = 2, H = 3, d = 8, W = H * d;
    std::vector<float> qh(static_cast<std::size_t>(n * T * W)), kh(qh.size()), vh(qh.size());
    for (auto* vec : {&qh, &kh, &vh}) {
      for (float& x : *vec) x = uniform() * 1.5f;
    }
    View<float, 2> q = upload(qh, {n * T, W}), k = upload(kh, {n * T, W}), v = upload(vh, {n * T, W});
    View<float, 2> o = scratch.alloc<float, 2>({n * T, W});
    const auto four = [&](View<float, 2> r) { return View<float, 4>(r.data(), {n, T, H, d}, {T * W, W, d, 1}); };
    const std::vector<std::int32_t> zeros(2, 0), lens(2, static_cast<std::int32_t>(T));
    View<std::int32_t, 1> qs = scratch.alloc<std::int32_t, 1>({2}), kl = scratch.alloc<std::int32_t, 1>({2});
    be.copy(qs.data(), zeros.data(), 8, CopyKind::host_to_device);
    be.copy(kl.data(), lens.data(), 8, CopyKind::host_to_device);
    AttentionMask mask;
    mask.q_start = qs;
    mask.kv_len = kl;
    mask.causal = false;
    full_attention(be, View<const float, 4>(four(q)), View<const float, 4>(four(k)), View<const float, 4>(four(v)),
                   mask, four(o));
    const std::vector<float> got = download(o);
    double worst = 0.0;
    for (std::int64_t b = 0; b < n; ++b) {
      for (std::int64_t h = 0; h < H; ++h) {
        for (std::int64_t t = 0; t < T; ++t) {
          std::vector<double> p(static_cast<std::size_t>(T));
          double mx = -1e300, sum = 0.0;
          for (std::int64_t s2 = 0; s2 < T; ++s2) {
            double dot = 0.0;
            for (std::int64_t j = 0; j < d; ++j) {
              dot += static_cast<double>(qh[static_cast<std::size_t>((b * T + t) * W + h * d + j)]) *
                     kh[static_cast<std::size_t>((b * T + s2) * W + h * d + j)];
            }
            p[static_cast<std::size_t>(s2)] = dot;
            mx = std::max(mx, dot);
          }
          for (double& x : p) sum += (x = std::exp(x - mx));
          for (std::int64_t j = 0; j < d; ++j) {
            double acc = 0.0;
            for (std::int64_t s2 = 0; s2 < T; ++s2) {
              acc += p[static_cast<std::size_t>(s2)] / sum * vh[static_cast<std::size_t>((b * T + s2) * W + h * d + j)];
            }
            worst = std::max(worst, std::abs(acc - got[static_cast<std::size_t>((b * T + t) * W + h * d + j)]));
          }
        }
      }
    }
    INFO("T = " << T << ": max abs error " << worst);
    CHECK(worst < 2e-6);  // outputs are averages of values in [-1.5, 1.5]: a few f32 ulps
  }

  // affine_layer_norm (plain scale and bias) and avg_pool_grid (two 4x4 grids, window 2).
  const std::int64_t M = 32, D = 24;
  std::vector<float> xh(static_cast<std::size_t>(M * D)), sh(static_cast<std::size_t>(D)), bh(sh.size());
  for (float& x : xh) x = uniform() * 3.0f + 0.5f;
  for (float& x : sh) x = 1.0f + 0.3f * uniform();
  for (float& x : bh) x = 0.2f * uniform();
  View<float, 2> x = upload(xh, {M, D}), y = scratch.alloc<float, 2>({M, D});
  View<float, 2> sd = upload(sh, {1, D}), bd = upload(bh, {1, D});
  affine_layer_norm(be, View<const float, 2>(x), View<const float, 1>(sd.data(), {D}), View<const float, 1>(bd.data(), {D}),
                    1e-6f, y);
  std::vector<float> got = download(y);
  double worst = 0.0;
  for (std::int64_t m = 0; m < M; ++m) {
    double mean = 0.0, var = 0.0;
    for (std::int64_t i = 0; i < D; ++i) mean += xh[static_cast<std::size_t>(m * D + i)];
    mean /= D;
    for (std::int64_t i = 0; i < D; ++i) var += std::pow(xh[static_cast<std::size_t>(m * D + i)] - mean, 2.0);
    var /= D;
    for (std::int64_t i = 0; i < D; ++i) {
      const double want = (xh[static_cast<std::size_t>(m * D + i)] - mean) / std::sqrt(var + 1e-6) * sh[static_cast<std::size_t>(i)] +
                          bh[static_cast<std::size_t>(i)];
      worst = std::max(worst, std::abs(want - got[static_cast<std::size_t>(m * D + i)]));
    }
  }
  INFO("layer norm: max abs error " << worst);
  CHECK(worst < 2e-6);
  View<float, 2> pooled = scratch.alloc<float, 2>({8, D});
  avg_pool_grid(be, View<const float, 2>(x), 2, 4, 2, pooled);
  got = download(pooled);
  worst = 0.0;
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t oy = 0; oy < 2; ++oy) {
      for (std::int64_t ox = 0; ox < 2; ++ox) {
        for (std::int64_t i = 0; i < D; ++i) {
          double want = 0.0;
          for (std::int64_t wy = 0; wy < 2; ++wy) {
            for (std::int64_t wx = 0; wx < 2; ++wx) want += xh[static_cast<std::size_t>(((b * 4 + oy * 2 + wy) * 4 + ox * 2 + wx) * D + i)];
          }
          worst = std::max(worst, std::abs(want / 4 - got[static_cast<std::size_t>(((b * 2 + oy) * 2 + ox) * D + i)]));
        }
      }
    }
  }
  INFO("pooling: max abs error " << worst);
  CHECK(worst < 1e-6);
  CHECK_THROWS_AS(avg_pool_grid(be, View<const float, 2>(x), 2, 4, 3, pooled), ShapeError);
}

TEST_CASE("Gemma 3 vision tower refuses bad sizes, pictures and checkpoints by name", "[models][gemma3][vision]") {
  using P = Policy<test::Backend, float>;
  const std::string dir = test::fixtures_dir() + "/gemma3_vision_nopool";
  const auto meta = read_json(dir + "/meta.json");
  const layers::Gemma3VisionConfig c = config_of(meta);
  test::Backend be;
  const layers::Gemma3VisionEncoder<P> tower(c);
  const auto params = models::load_layer_params<P>(tower, io::read_safetensors(dir + "/model.safetensors"), be);
  const auto refused = [](auto&& f, const std::string& needle) {
    try {
      f();
      FAIL("not refused: expected '" << needle << "'");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  refused([&] { (void)tower.encode(be, params, Tensor<float, 4>({1, c.image_size + 2, c.image_size, 3})); },
          "pictures must be [n, 32, 32, 3]");
  layers::Gemma3VisionConfig bad = c;
  bad.image_size = 33;
  refused([&] { bad.validate(); }, "image_size_for_vit (33) must be a multiple of patch_size_for_vit (2)");
  bad = c;
  bad.tokens_per_image = 200;
  refused([&] { bad.validate(); }, "mm_tokens_per_image (200) must be a square");
  bad = c;
  bad.image_size = 40;  // a 20x20 grid cannot be pooled to 16x16
  refused([&] { bad.validate(); }, "cannot be pooled to 16x16");

  // MaxText keys: the tower's sizes from a config; what the tower does not implement is refused by name.
  Config cfg;
  for (const auto& [k, v] : meta.at("maxtext_config").items()) {
    cfg.set(k == "emb_dim" ? "base_emb_dim" : k, v.is_string() ? v.get<std::string>() : v.dump(), "meta.json");
  }
  cfg.derive();
  CHECK(layers::Gemma3VisionConfig::from_config(cfg).hidden_size == c.hidden_size);
  cfg.set("posemb_type_for_vit", "sincos2d");
  refused([&] { (void)layers::Gemma3VisionConfig::from_config(cfg); }, "posemb_type_for_vit 'sincos2d'");
  cfg.set("posemb_type_for_vit", "learn");
  cfg.set("conv_stride_for_vit", "1");
  refused([&] { (void)layers::Gemma3VisionConfig::from_config(cfg); }, "conv_stride_for_vit (1) must equal");

  // A Hugging Face checkpoint missing a tensor, or with one of the wrong shape.
  io::TensorMap hf = io::read_safetensors(dir + "/hf/model.safetensors");
  io::TensorMap missing;
  for (const auto& [name, t] : hf.tensors) {
    if (name.find("layers.0.mlp.fc2.bias") == std::string::npos) missing.add(name, t);
  }
  refused([&] { (void)io::gemma3_vision_from_hf(missing, c); },
          "missing tensor vision_tower.vision_model.encoder.layers.0.mlp.fc2.bias");
  layers::Gemma3VisionConfig wider = c;
  wider.emb_dim = c.emb_dim + 1;
  refused([&] { (void)io::gemma3_vision_from_hf(hf, wider); }, "mm_input_projection_weight: expected shape");
}
