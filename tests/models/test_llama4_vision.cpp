// tests/models/test_llama4_vision.cpp: Llama 4's vision model, adapter and projector (families/llama4/vision.hpp)
// against the float64 re-statement of MaxText's Llama4VisionModel + Llama4MultiModalProjector, cross-checked there
// with Hugging Face's formulation (tests/reference/llama4_vision_reference.py, fixture llama4_vision: 3 tiles of
// 84 x 84, a 6 x 6 patch grid shuffled to 3 x 3 tokens, 2 layers, head size 16), from MaxText's tree and from the
// Hugging Face layout, on the test's backend (CPU; CUDA in tests/cuda/test_cuda_llama4_vision.cu) and, in the CPU
// build, the reference backend.
// Tolerance: f32 against f64, as for Gemma 3's tower (test_gemma3_vision.cpp): the residual stream per layer within
// rtol 1e-5, atol 8e-6 (37 keys per softmax, f32 sums of 64-256 products); the adapter's and projector's outputs at
// test::tol::f32_logits (they follow every layer and two more products).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/llama4/vision.hpp"
#include "maxtext/io/gguf.hpp"
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

layers::Llama4VisionConfig config_of(const nlohmann::json& meta) {
  const auto& v = meta.at("vision");
  layers::Llama4VisionConfig c;
  c.image_size = v.at("image_size").get<std::int64_t>();
  c.patch_size = v.at("patch_size").get<std::int64_t>();
  c.num_channels = v.at("num_channels").get<std::int64_t>();
  c.hidden_size = v.at("hidden_size").get<std::int64_t>();
  c.intermediate_size = v.at("intermediate_size").get<std::int64_t>();
  c.num_layers = v.at("num_layers").get<std::int64_t>();
  c.num_heads = v.at("num_heads").get<std::int64_t>();
  c.rope_theta = v.at("rope_theta").get<double>();
  c.pixel_shuffle_ratio = v.at("pixel_shuffle_ratio").get<double>();
  c.projector_input_dim = v.at("projector_input_dim").get<std::int64_t>();
  c.projector_output_dim = v.at("projector_output_dim").get<std::int64_t>();
  c.emb_dim = v.at("emb_dim").get<std::int64_t>();
  c.eps = v.at("eps").get<float>();
  return c;
}

const std::string kModel = "vision_encoder.Llama4VisionModel_0";

template <class Be>
void check_tower(bool hf) {
  using P = Policy<Be, float>;
  const std::string dir = test::fixtures_dir() + "/llama4_vision";
  const auto meta = read_json(dir + "/meta.json");
  const layers::Llama4VisionConfig c =
      hf ? layers::Llama4VisionConfig::from_hf(read_json(dir + "/hf/config.json")) : config_of(meta);
  const layers::Llama4VisionConfig want = config_of(meta);
  CHECK(c.num_layers == want.num_layers);
  CHECK(c.emb_dim == want.emb_dim);
  CHECK(c.eps == want.eps);
  CHECK(c.tokens_per_tile() == 9);
  const layers::Llama4VisionEncoder<P> tower(c);
  Be be;
  const io::TensorMap tensors = hf ? io::llama4_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), c)
                                   : io::read_safetensors(dir + "/model.safetensors");
  const auto params = models::load_layer_params<P>(tower, tensors, be);
  const AnyTensor px = test::npy(dir + "/pixels.npy");
  const Tensor<float, 4> tiles = px.to<float, 4>({px.shape[0], px.shape[1], px.shape[2], px.shape[3]});
  const std::string enc = kModel + ".Llama4VisionEncoder_0";
  layers::Capture cap;
  cap.request(kModel + ".Llama4UnfoldConvolution_0");
  cap.request(kModel + ".layernorm_pre");
  for (std::int64_t i = 0; i < c.num_layers; ++i) cap.request(enc + ".layers_" + std::to_string(i));
  cap.request(kModel + ".layernorm_post");
  cap.request(kModel + ".Llama4VisionPixelShuffleMLP_0");
  const Tensor<float, 3> out = tower.encode(be, params, tiles, &cap);
  const std::string what = std::string("llama4_vision") + (hf ? " (hf)" : "") + " on " + Be::name;
  const testing::Tolerance stream{1e-5, 8e-6};
  test::expect_close(cap.at(kModel + ".Llama4UnfoldConvolution_0"), test::npy(dir + "/unfold.npy"), test::tol::f32_layer,
                     what + " unfold");
  test::expect_close(cap.at(kModel + ".layernorm_pre"), test::npy(dir + "/pre.npy"), stream, what + " layernorm_pre");
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    test::expect_close(cap.at(enc + ".layers_" + std::to_string(i)), test::npy(dir + "/layer_" + std::to_string(i) + ".npy"),
                       stream, what + " layer " + std::to_string(i));
  }
  test::expect_close(cap.at(kModel + ".layernorm_post"), test::npy(dir + "/post.npy"), stream, what + " layernorm_post");
  test::expect_close(cap.at(kModel + ".Llama4VisionPixelShuffleMLP_0"), test::npy(dir + "/adapter.npy"),
                     test::tol::f32_logits, what + " adapter");
  test::expect_close(out, test::npy(dir + "/out.npy"), test::tol::f32_logits, what + " out");
}

}  // namespace

TEST_CASE("Llama 4 vision model, adapter and projector (3 tiles, 6x6 patches shuffled to 3x3) match MaxText's, "
          "MaxText and HF weights", "[models][llama4][vision]") {
  check_tower<test::Backend>(false);
  check_tower<test::Backend>(true);
  if constexpr (test::kDefaultBackend) check_tower<reference::Backend>(true);
}

TEST_CASE("Llama 4 vision: the 2-D rotary table turns pairs by column then row, the class token not at all",
          "[models][llama4][vision]") {
  // Worked by hand from MaxText's LlamaVisionRotaryEmbedding: head size 16 -> freq_dim 8, rope_freq[j] =
  // theta^(-2j / 8) for j = 0..3; pairs 0..3 turn by (column + 1) * rope_freq[j], pairs 4..7 by (row + 1) *
  // rope_freq[j - 4]; the class token (the last row) by 0.
  layers::Llama4VisionConfig c;
  c.image_size = 56;  // 4 x 4 patches
  c.patch_size = 14;
  c.hidden_size = 32;
  c.num_heads = 2;  // head size 16
  c.intermediate_size = 4 * 32;
  c.num_layers = 1;
  c.projector_input_dim = 8;
  c.projector_output_dim = 8;
  c.emb_dim = 8;
  const layers::Llama4VisionEncoder<Policy<reference::Backend, float>> tower(c);
  const RotaryTable t = tower.rotary_table();
  REQUIRE(t.cos.dim(0) == 17);
  REQUIRE(t.cos.dim(1) == 8);
  CHECK(t.layout == RopeLayout::interleaved);
  // Row 6 is patch (row 1, column 2): pairs 0..3 turn by (2 + 1) * 10^(-j), pairs 4..7 by (1 + 1) * 10^(-(j - 4)).
  for (int i = 0; i < 8; ++i) {
    const double f = std::pow(10000.0, -2.0 * (i % 4) / 8.0);
    const double angle = (i < 4 ? 3.0 : 2.0) * f;
    CHECK(t.cos(6, i) == Approx(std::cos(angle)).margin(1e-6));
    CHECK(t.sin(6, i) == Approx(std::sin(angle)).margin(1e-6));
  }
  for (int i = 0; i < 8; ++i) {  // the class token (row 16)
    CHECK(t.cos(16, i) == 1.0f);
    CHECK(t.sin(16, i) == 0.0f);
  }
}

TEST_CASE("Llama 4 vision config: MaxText's keys and config.json, refusals by name", "[models][llama4][vision]") {
  Config cfg;
  cfg.emb_dim = 5120;
  const auto v = layers::Llama4VisionConfig::from_config(cfg);
  CHECK(v.tokens_per_tile() == 144);  // Scout / Maverick: 336 / 14 = 24 patches a side, shuffled by 2
  CHECK(v.head_dim() == 88);
  const auto refused = [&](const char* key, const char* value, const char* needle) {
    Config c = cfg;
    c.extra[key] = value;
    try {
      (void)layers::Llama4VisionConfig::from_config(c);
      FAIL("accepted " << key << " = " << value);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  refused("pixel_shuffle_ratio_for_vit", "0.3", "pixel_shuffle_ratio_for_vit");
  refused("intermediate_size_for_vit", "4096", "intermediate_size_for_vit");
  refused("tile_size_for_vit", "448", "tile_size_for_vit");
  refused("vision_output_dim_for_vit", "2048", "vision_output_dim_for_vit");
  refused("dtype_mm", "bfloat16", "dtype_mm");
  refused("hidden_size_for_vit", "abc", "hidden_size_for_vit");
  refused("num_hidden_layers_for_vit", "1000000000", "num_hidden_layers_for_vit (1000000000) is above 1024");
  refused("image_size_for_vit", "1000000", "image_size_for_vit (1000000) is above 4096");
  {
    Config c = cfg;
    c.normalization_layer_epsilon = -1e-5;
    CHECK_THROWS_WITH(layers::Llama4VisionConfig::from_config(c), Catch::Contains("normalization_layer_epsilon"));
  }
  nlohmann::json j = read_json(test::fixtures_dir() + "/llama4_vision/hf/config.json");
  j["vision_config"]["hidden_act"] = "silu";
  CHECK_THROWS_WITH(layers::Llama4VisionConfig::from_hf(j), Catch::Contains("hidden_act"));
  // A checkpoint missing a tensor, or holding a vision tensor the model has no place for, is refused naming it.
  const std::string dir = test::fixtures_dir() + "/llama4_vision";
  const auto c = layers::Llama4VisionConfig::from_hf(read_json(dir + "/hf/config.json"));
  io::TensorMap hf = io::read_safetensors(dir + "/hf/model.safetensors");
  io::TensorMap extra = hf;
  extra.add("vision_model.model.layers.0.self_attn.q_norm.weight", hf.at("vision_model.class_embedding"));
  CHECK_THROWS_WITH(io::llama4_vision_from_hf(extra, c), Catch::Contains("unexpected tensor vision_model.model.layers.0.self_attn.q_norm.weight"));
  io::TensorMap missing;
  for (const auto& [name, t] : hf.tensors) {
    if (name != "vision_model.layernorm_post.bias") missing.add(name, t);
  }
  CHECK_THROWS_WITH(io::llama4_vision_from_hf(missing, c), Catch::Contains("missing tensor vision_model.layernorm_post.bias"));
}

TEST_CASE("Llama 4 vision from llama.cpp's mmproj file equals the Hugging Face checkpoint's, bit for bit",
          "[models][llama4][vision][mmproj]") {
  // fixtures/llama4_mmproj (tests/reference/llama4_mmproj_fixture.py): a 3-layer model, and the mmproj file llama.cpp's
  // own converter wrote for it (convert_hf_to_gguf.py --mmproj --outtype f32, llama.cpp de3ff815), whose pre-MLP
  // norms are named attn_post_norm (its name table gives Llama 4's post_attention_layernorm Gemma 4's name).
  using P = Policy<test::Backend, float>;
  const std::string dir = test::fixtures_dir() + "/llama4_mmproj";
  const auto hc = layers::Llama4VisionConfig::from_hf(read_json(dir + "/hf/config.json"));
  io::Llama4Mmproj m = io::llama4_vision_from_mmproj(io::read_gguf(dir + "/mmproj.gguf"));
  const layers::Llama4VisionConfig& c = m.config;
  CHECK(c.num_layers == 3);
  CHECK(c.hidden_size == hc.hidden_size);
  CHECK(c.intermediate_size == hc.intermediate_size);
  CHECK(c.projector_input_dim == hc.projector_input_dim);
  CHECK(c.projector_output_dim == hc.projector_output_dim);
  CHECK(c.emb_dim == hc.emb_dim);
  CHECK(c.pixel_shuffle_ratio == hc.pixel_shuffle_ratio);
  CHECK(c.eps == hc.eps);
  {
    test::Backend be;
    const layers::Llama4VisionEncoder<P> tower(c);
    const auto from_gguf = models::load_layer_params<P>(tower, m.tensors, be);
    const auto from_hf =
        models::load_layer_params<P>(tower, io::llama4_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), hc), be);
    Tensor<float, 4> tiles({2, c.image_size, c.image_size, 3});
    for (std::int64_t i = 0; i < tiles.size(); ++i) tiles.data()[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
    const Tensor<float, 3> a = tower.encode(be, from_gguf, tiles), b = tower.encode(be, from_hf, tiles);
    REQUIRE(a.size() == b.size());
    CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
  }
  // Another projector's file, or one missing a tensor, is refused by name.
  io::GgufFile g = io::read_gguf(dir + "/mmproj.gguf");
  g.tensors.tensors.erase("v.blk.1.attn_q.bias");
  CHECK_THROWS_WITH(io::llama4_vision_from_mmproj(std::move(g)), Catch::Contains("missing tensor v.blk.1.attn_q.bias"));
  CHECK_THROWS_WITH(io::llama4_vision_from_mmproj(io::read_gguf(test::fixtures_dir() + "/gemma3_mm_model/mmproj.gguf")),
                    Catch::Contains("clip.projector_type 'gemma3' is not Llama 4's"));
}
