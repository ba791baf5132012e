// tests/models/test_qwen3_vision.cpp: the vision encoder of Qwen3-Omni and Qwen3.5 (families/qwen/vision.hpp) against
// the float64 re-statement of MaxText's Qwen3OmniMoeVisionEncoder + Qwen3OmniMoeVisionProjector, cross-checked there
// with Hugging Face's formulation (tests/reference/qwen3_vision_reference.py, fixture qwen3_vision: two pictures of
// 6 x 8 and 4 x 4 patches of 4 pixels (one frame repeated over the temporal patch of 2), merged 2 x 2, 3 blocks of
// width 32 with head size 8, deepstack mergers after blocks 0 and 2, a 4 x 4 position table interpolated to both
// grids), from MaxText's tree and from the Hugging Face layout, on the test's backend (CUDA in
// tests/cuda/test_cuda_qwen3_vision.cu) and, in the CPU build, the reference backend.
// Tolerance: f32 against f64, as the other towers: the residual stream per block within rtol 1e-5, atol 8e-6; the
// mergers' outputs at test::tol::f32_logits. The position embedding is MaxText's, rounded to bfloat16 (its fprop
// dtype): computed in float32 in MaxText's order here and there, so both round the same; that rounding alone moves
// the merged tokens by 6e-3 (meta.json), far outside the tolerance.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/qwen/vision.hpp"
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

/// Rows [r0, r0 + n) of a 2-D float tensor.
Tensor<float, 2> rows(const Tensor<float, 2>& x, std::int64_t r0, std::int64_t n) {
  Tensor<float, 2> y({n, x.dim(1)});
  std::copy(&x(r0, 0), &x(r0, 0) + n * x.dim(1), y.data());
  return y;
}

/// a and b stacked by rows.
AnyTensor stack(const AnyTensor& a, const AnyTensor& b) {
  const std::int64_t w = a.shape.back();
  const auto x = a.to<float, 2>({a.numel() / w, w}), y = b.to<float, 2>({b.numel() / w, w});
  Tensor<float, 2> z({x.dim(0) + y.dim(0), w});
  std::copy(x.data(), x.data() + x.size(), z.data());
  std::copy(y.data(), y.data() + y.size(), z.data() + x.size());
  return AnyTensor::from(z);
}

template <class Be>
void check_tower(bool hf) {
  using P = Policy<Be, float>;
  const std::string dir = test::fixtures_dir() + "/qwen3_vision";
  layers::Qwen3VisionConfig c = layers::Qwen3VisionConfig::from_hf(read_json(dir + "/hf/config.json"));
  CHECK(c.module == "Qwen3_5MoeVision");  // model_type qwen3_5_moe
  CHECK(c.num_layers == 3);
  CHECK(c.head_dim() == 8);
  CHECK(c.grid_side() == 4);
  CHECK(c.deepstack_layers == std::vector<std::int64_t>{0, 2});
  CHECK(c.out_hidden_size == 24);
  if (!hf) c.module = "Qwen3OmniMoeVision";  // the fixture's MaxText tree is Qwen3-Omni's
  const layers::Qwen3VisionEncoder<P> tower(c);
  Be be;
  const io::TensorMap tensors = hf ? io::qwen3_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), c)
                                   : io::read_safetensors(dir + "/model.safetensors");
  const auto params = models::load_layer_params<P>(tower, tensors, be);
  const AnyTensor pv = test::npy(dir + "/pixel_values.npy");
  const Tensor<float, 2> patches = pv.to<float, 2>({pv.shape[0], pv.shape[1]});
  const std::string enc = "vision_encoder." + c.module + "Encoder_0", proj = "vision_encoder." + c.module + "Projector_0";
  const std::int64_t grids[2][3] = {{1, 6, 8}, {1, 4, 4}};
  std::vector<layers::Capture> caps(2);
  std::vector<typename layers::Qwen3VisionEncoder<P>::Output> outs;
  std::int64_t r0 = 0;
  for (int i = 0; i < 2; ++i) {
    const std::int64_t T = grids[i][0] * grids[i][1] * grids[i][2];
    caps[static_cast<std::size_t>(i)].request(enc + ".patch_embed");
    caps[static_cast<std::size_t>(i)].request(enc + ".pos_embed_interpolate");
    for (int b = 0; b < 3; ++b) caps[static_cast<std::size_t>(i)].request(enc + ".blocks_" + std::to_string(b));
    outs.push_back(tower.encode(be, params, rows(patches, r0, T), grids[i][0], grids[i][1], grids[i][2],
                                &caps[static_cast<std::size_t>(i)]));
    r0 += T;
  }
  REQUIRE(r0 == patches.dim(0));
  const std::string what = std::string("qwen3_vision") + (hf ? " (hf)" : "") + " on " + Be::name;
  const auto both = [&](const std::string& name) { return stack(caps[0].at(name), caps[1].at(name)); };
  const testing::Tolerance stream{1e-5, 8e-6};
  test::expect_close(both(enc + ".patch_embed"), test::npy(dir + "/patch_embed.npy"), test::tol::f32_layer, what + " patches");
  test::expect_close(both(enc + ".pos_embed_interpolate"), test::npy(dir + "/pos.npy"), testing::Tolerance{0.0, 0.0},
                     what + " position embedding (bfloat16, bit for bit)");
  for (int b = 0; b < 3; ++b) {
    test::expect_close(both(enc + ".blocks_" + std::to_string(b)), test::npy(dir + "/block_" + std::to_string(b) + ".npy"),
                       stream, what + " block " + std::to_string(b));
  }
  for (int j = 0; j < 2; ++j) {
    test::expect_close(stack(AnyTensor::from(outs[0].deepstack[static_cast<std::size_t>(j)]),
                             AnyTensor::from(outs[1].deepstack[static_cast<std::size_t>(j)])),
                       test::npy(dir + "/deep_" + std::to_string(j) + ".npy"), test::tol::f32_logits,
                       what + " deepstack " + std::to_string(j));
  }
  test::expect_close(stack(AnyTensor::from(outs[0].tokens), AnyTensor::from(outs[1].tokens)),
                     test::npy(dir + "/merged.npy"), test::tol::f32_logits, what + " merged");
}

}  // namespace

TEST_CASE("Qwen3-Omni / Qwen3.5 vision encoder, deepstack mergers and projector (6x8 and 4x4 patches) match "
          "MaxText's, MaxText and HF weights", "[models][qwen3][vision]") {
  check_tower<test::Backend>(false);
  check_tower<test::Backend>(true);
  if constexpr (test::kDefaultBackend) check_tower<reference::Backend>(true);
}

TEST_CASE("Qwen3 vision: merge-window order and the rotary table, worked by hand", "[models][qwen3][vision]") {
  layers::Qwen3VisionConfig c;
  c.hidden_size = 32;
  c.num_heads = 2;  // head size 16: rows turn pairs 0..3, columns 4..7
  c.intermediate_size = 8;
  c.num_layers = 1;
  c.num_position_embeddings = 16;
  c.out_hidden_size = 8;
  const layers::Qwen3VisionEncoder<Policy<reference::Backend, float>> tower(c);
  // A 4 x 6 grid, windows of 2 x 2: token 0..3 = window (0, 0): (0,0) (0,1) (1,0) (1,1); token 4 = window (0, 1)'s first
  // = (0, 2); token 12 = window (1, 0)'s first = (2, 0); token 23 = the last window's last = (3, 5).
  CHECK(tower.coords(2, 4, 6) == std::pair<std::int64_t, std::int64_t>{1, 0});
  CHECK(tower.coords(4, 4, 6) == std::pair<std::int64_t, std::int64_t>{0, 2});
  CHECK(tower.coords(12, 4, 6) == std::pair<std::int64_t, std::int64_t>{2, 0});
  CHECK(tower.coords(23, 4, 6) == std::pair<std::int64_t, std::int64_t>{3, 5});
  const RotaryTable t = tower.rotary_table(1, 4, 6);
  REQUIRE(t.cos.dim(0) == 24);
  REQUIRE(t.cos.dim(1) == 8);
  CHECK(t.layout == RopeLayout::half_split);
  for (int i = 0; i < 8; ++i) {  // token 23 = (3, 5): pairs 0..3 turn by 3 theta^(-2i/8), pairs 4..7 by 5 theta^(-2(i-4)/8)
    const double angle = (i < 4 ? 3.0 : 5.0) * std::pow(10000.0, -2.0 * (i % 4) / 8.0);
    CHECK(t.cos(23, i) == Approx(std::cos(angle)).margin(1e-6));
    CHECK(t.sin(23, i) == Approx(std::sin(angle)).margin(1e-6));
  }
}

TEST_CASE("Qwen3 vision config and checkpoints: refusals by name", "[models][qwen3][vision]") {
  const std::string dir = test::fixtures_dir() + "/qwen3_vision";
  const nlohmann::json base = read_json(dir + "/hf/config.json");
  const auto refused = [&](const char* key, const nlohmann::json& value, const char* needle) {
    nlohmann::json j = base;
    j["vision_config"][key] = value;
    CHECK_THROWS_WITH(layers::Qwen3VisionConfig::from_hf(j), Catch::Contains(needle));
  };
  refused("hidden_act", "silu", "hidden_act");
  refused("num_position_embeddings", 15, "is not a square");
  refused("num_heads", 3, "divisible by 4");
  refused("deepstack_visual_indexes", nlohmann::json::array({5}), "layer 5 is not one of the 3 blocks");
  refused("depth", 100000, "num_hidden_layers_for_vit must be in [1, 1024]");
  refused("patch_size", "4", "expected an integer");
  CHECK_THROWS_WITH(layers::Qwen3VisionConfig::from_hf(nlohmann::json::object()), Catch::Contains("no vision_config"));
  const auto c = layers::Qwen3VisionConfig::from_hf(base);
  const io::TensorMap hf = io::read_safetensors(dir + "/hf/model.safetensors");
  io::TensorMap extra = hf;
  extra.add("model.visual.blocks.0.attn.q_norm.weight", hf.at("model.visual.merger.norm.weight"));
  CHECK_THROWS_WITH(io::qwen3_vision_from_hf(extra, c), Catch::Contains("unexpected tensor model.visual.blocks.0.attn.q_norm.weight"));
  io::TensorMap missing;
  for (const auto& [name, t] : hf.tensors) {
    if (name != "model.visual.blocks.2.attn.qkv.bias") missing.add(name, t);
  }
  CHECK_THROWS_WITH(io::qwen3_vision_from_hf(missing, c), Catch::Contains("missing tensor model.visual.blocks.2.attn.qkv.bias"));
  // A grid that is not whole merge windows, or patches that do not fit the grid, are refused by name.
  using P = Policy<reference::Backend, float>;
  const layers::Qwen3VisionEncoder<P> tower(c);
  reference::Backend be;
  const auto params = models::load_layer_params<P>(tower, io::qwen3_vision_from_hf(hf, c), be);
  CHECK_THROWS_WITH(tower.encode(be, params, Tensor<float, 2>({15, 96}), 1, 3, 5), Catch::Contains("whole 2 x 2 windows"));
  CHECK_THROWS_WITH(tower.encode(be, params, Tensor<float, 2>({15, 96}), 1, 4, 4), Catch::Contains("patches must be [n * 16, 96]"));
}
