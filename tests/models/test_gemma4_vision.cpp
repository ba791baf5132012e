// tests/models/test_gemma4_vision.cpp: Gemma 4's vision encoder and projector (families/gemma4/vision.hpp) against
// the float64 re-statement of MaxText's Gemma4VisionEncoderLayer + Gemma4VisionProjector, cross-checked there with
// Hugging Face's formulation (tests/reference/gemma4_vision_reference.py, fixture gemma4_vision: 2 pictures of
// 24 x 36 pixels, a 6 x 9 patch grid pooled 3 x 3 to 2 x 3 soft tokens, 2 layers, head size 12), from MaxText's tree
// and from the Hugging Face layout, on the test's backend (CPU; CUDA in tests/cuda/test_cuda_gemma4_vision.cu) and, in
// the CPU build, the reference backend.
// Tolerance: f32 against f64. The residual stream per layer within rtol 1e-5, atol 3e-5: Gemma 4's post-attention and
// post-MLP norms rescale each branch to unit RMS whatever its size, so a branch's f32 rounding (sums of 48-80
// products, 54 keys per softmax, the q / k / v norms) lands at ~1e-5 of the stream's RMS (2.4 after layer 1), not of
// each entry: measured 1.6e-5 on an entry of -0.044 with clang -O1 (ASan), under 8e-6 with g++ -O3. Gemma 3's and
// Llama 4's towers, without post-norms, keep atol 8e-6. The pooled, standardised and projected outputs at
// test::tol::f32_logits (they follow every layer, a sqrt(D) scaling and two more products).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/gemma4/vision.hpp"
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

/// The fixture's sizes as MaxText's config keys give them.
Config maxtext_config(const nlohmann::json& meta) {
  const auto& v = meta.at("vision");
  Config c;
  c.emb_dim = v.at("emb_dim").get<std::int64_t>();
  c.normalization_layer_epsilon = v.at("eps").get<double>();
  c.v_norm_with_scale = false;
  const auto set = [&](const char* key, const std::string& value) { c.extra[key] = value; };
  set("image_size_for_vit", "[" + std::to_string(v.at("image_height").get<int>()) + ", " +
                                std::to_string(v.at("image_width").get<int>()) + "]");
  set("patch_size_for_vit", std::to_string(v.at("patch_size").get<int>()));
  set("conv_stride_for_vit", std::to_string(v.at("patch_size").get<int>()));
  set("hidden_size_for_vit", std::to_string(v.at("hidden_size").get<int>()));
  set("intermediate_size_for_vit", std::to_string(v.at("intermediate_size").get<int>()));
  set("num_hidden_layers_for_vit", std::to_string(v.at("num_layers").get<int>()));
  set("num_attention_heads_for_vit", std::to_string(v.at("num_heads").get<int>()));
  set("rope_theta_for_vit", std::to_string(v.at("rope_theta").get<double>()));
  set("vision_output_length", std::to_string(v.at("vision_output_length").get<int>()));
  set("num_position_embeddings_for_vit", std::to_string(v.at("num_position_embeddings").get<int>()));
  return c;
}

const std::string kEnc = "vision_encoder.Gemma4VisionEncoderLayer_0";

template <class Be>
void check_tower(bool hf) {
  using P = Policy<Be, float>;
  const std::string dir = test::fixtures_dir() + "/gemma4_vision";
  const auto meta = read_json(dir + "/meta.json");
  const layers::Gemma4VisionConfig c = hf ? layers::Gemma4VisionConfig::from_hf(read_json(dir + "/hf/config.json"))
                                          : layers::Gemma4VisionConfig::from_config(maxtext_config(meta));
  CHECK(c.num_layers == 2);
  CHECK(c.head_dim() == 12);
  CHECK(c.pooling_kernel == 3);
  CHECK(c.emb_dim == 40);
  CHECK(c.eps == 1e-6f);
  CHECK(c.num_position_embeddings == 16);
  CHECK(c.tokens_for(24, 36) == 6);
  const layers::Gemma4VisionEncoder<P> tower(c);
  Be be;
  const io::TensorMap tensors = hf ? io::gemma4_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), c)
                                   : io::read_safetensors(dir + "/model.safetensors");
  const auto params = models::load_layer_params<P>(tower, tensors, be);
  const AnyTensor px = test::npy(dir + "/pixels.npy");
  const Tensor<float, 4> pixels = px.to<float, 4>({px.shape[0], px.shape[1], px.shape[2], px.shape[3]});
  layers::Capture cap;
  cap.request(kEnc + ".vision_entry");
  for (std::int64_t i = 0; i < c.num_layers; ++i) cap.request(kEnc + ".layer_" + std::to_string(i));
  cap.request(kEnc + ".vision_exit");
  cap.request(kEnc);
  const Tensor<float, 3> out = tower.encode(be, params, pixels, &cap);
  const std::string what = std::string("gemma4_vision") + (hf ? " (hf)" : "") + " on " + Be::name;
  const testing::Tolerance stream{1e-5, 3e-5};
  test::expect_close(cap.at(kEnc + ".vision_entry"), test::npy(dir + "/entry.npy"), test::tol::f32_layer, what + " entry");
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    test::expect_close(cap.at(kEnc + ".layer_" + std::to_string(i)), test::npy(dir + "/layer_" + std::to_string(i) + ".npy"),
                       stream, what + " layer " + std::to_string(i));
  }
  test::expect_close(cap.at(kEnc + ".vision_exit"), test::npy(dir + "/pooled.npy"), test::tol::f32_logits, what + " pooled");
  test::expect_close(cap.at(kEnc), test::npy(dir + "/std.npy"), test::tol::f32_logits, what + " standardised");
  test::expect_close(out, test::npy(dir + "/out.npy"), test::tol::f32_logits, what + " out");
}

}  // namespace

TEST_CASE("Gemma 4 vision encoder and projector (2 pictures, 6x9 patches pooled to 2x3) match MaxText's, MaxText and "
          "HF weights", "[models][gemma4][vision]") {
  check_tower<test::Backend>(false);
  check_tower<test::Backend>(true);
  if constexpr (test::kDefaultBackend) check_tower<reference::Backend>(true);
}

TEST_CASE("Gemma 4 vision: the rotary table by coordinate, MaxText's timescales", "[models][gemma4][vision]") {
  // Worked from apply_multidimensional_rope: head size 12 -> each axis rotates 6 channels as rotate-half RoPE of width 6,
  // timescale_j = theta^(2j / 6) for j = 0..2; coordinate r turns pair j by r / timescale_j.
  layers::Gemma4VisionConfig c;
  c.hidden_size = 48;
  c.num_heads = 4;
  c.intermediate_size = 8;
  c.num_layers = 1;
  c.num_position_embeddings = 16;
  c.patch_size = 4;
  c.emb_dim = 8;
  const layers::Gemma4VisionEncoder<Policy<reference::Backend, float>> tower(c);
  const RotaryTable t = tower.rotary_table(9);
  REQUIRE(t.cos.dim(0) == 9);
  REQUIRE(t.cos.dim(1) == 3);
  CHECK(t.rot_dims == 6);
  CHECK(t.layout == RopeLayout::half_split);
  for (int j = 0; j < 3; ++j) {
    const double angle = 7.0 / std::pow(100.0, 2.0 * j / 6.0);
    CHECK(t.cos(7, j) == Approx(std::cos(angle)).margin(1e-6));
    CHECK(t.sin(7, j) == Approx(std::sin(angle)).margin(1e-6));
    CHECK(t.cos(0, j) == 1.0f);
    CHECK(t.sin(0, j) == 0.0f);
  }
}

TEST_CASE("Gemma 4 vision config: MaxText's keys and config.json, refusals by name", "[models][gemma4][vision]") {
  Config cfg;
  cfg.emb_dim = 5376;
  cfg.v_norm_with_scale = false;
  cfg.extra["image_size_for_vit"] = "[672, 960]";
  cfg.extra["vision_output_length"] = "280";
  const auto v = layers::Gemma4VisionConfig::from_config(cfg);
  CHECK(v.tokens_per_image() == 280);  // 42 x 60 patches of 16, pooled 3 x 3 (gemma4-31b.yml)
  CHECK(v.pooling_kernel == 3);
  CHECK(v.head_dim() == 72);
  const auto refused = [&](const char* key, const char* value, const char* needle) {
    Config c = cfg;
    c.extra[key] = value;
    try {
      (void)layers::Gemma4VisionConfig::from_config(c);
      FAIL("accepted " << key << " = " << value);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  refused("vision_output_length", "300", "vision_output_length 300 cannot pool 2520 patches");
  refused("conv_stride_for_vit", "14", "conv_stride_for_vit");
  refused("num_channels_for_vit", "1", "num_channels_for_vit");
  refused("dtype_mm", "bfloat16", "dtype_mm");
  refused("hidden_size_for_vit", "abc", "hidden_size_for_vit");
  refused("num_attention_heads_for_vit", "5", "divisible by 4");
  refused("image_size_for_vit", "[672, 960, 3]", "image_size_for_vit");
  refused("image_size_for_vit", "[670, 960]", "not a whole number of 16-pixel patches");
  refused("num_position_embeddings_for_vit", "40", "exceeds the position table");
  refused("num_hidden_layers_for_vit", "1000000000", "num_hidden_layers_for_vit (1000000000) is above 1024");
  {
    Config c = cfg;
    c.v_norm_with_scale = true;
    CHECK_THROWS_WITH(layers::Gemma4VisionConfig::from_config(c), Catch::Contains("v_norm_with_scale"));
  }
  const std::string dir = test::fixtures_dir() + "/gemma4_vision";
  const nlohmann::json base = read_json(dir + "/hf/config.json");
  const auto hf_refused = [&](const char* key, const nlohmann::json& value, const char* needle) {
    nlohmann::json j = base;
    j["vision_config"][key] = value;
    CHECK_THROWS_WITH(layers::Gemma4VisionConfig::from_hf(j), Catch::Contains(needle));
  };
  hf_refused("hidden_activation", "silu", "hidden_activation");
  hf_refused("use_clipped_linears", true, "use_clipped_linears");
  hf_refused("num_key_value_heads", 2, "num_key_value_heads");
  hf_refused("head_dim", 16, "head_dim");
  hf_refused("attention_bias", true, "attention_bias");
  hf_refused("patch_size", "4", "expected an integer");
  // A checkpoint missing a tensor, holding a vision tensor the model has no place for, or clipping, is refused by name.
  const auto c = layers::Gemma4VisionConfig::from_hf(base);
  const io::TensorMap hf = io::read_safetensors(dir + "/hf/model.safetensors");
  io::TensorMap extra = hf;
  extra.add("model.vision_tower.encoder.layers.0.self_attn.v_norm.weight", hf.at("model.vision_tower.std_bias"));
  CHECK_THROWS_WITH(io::gemma4_vision_from_hf(extra, c),
                    Catch::Contains("unexpected tensor model.vision_tower.encoder.layers.0.self_attn.v_norm.weight"));
  io::TensorMap missing;
  for (const auto& [name, t] : hf.tensors) {
    if (name != "model.vision_tower.encoder.layers.1.self_attn.k_norm.weight") missing.add(name, t);
  }
  CHECK_THROWS_WITH(io::gemma4_vision_from_hf(missing, c),
                    Catch::Contains("missing tensor model.vision_tower.encoder.layers.1.self_attn.k_norm.weight"));
  // Clipping bounds: open ones are accepted (they clip nothing), a finite one is refused naming it.
  Tensor<float, 1> open({1}), tight({1});
  open(0) = std::numeric_limits<float>::infinity();
  tight(0) = 3.5f;
  io::TensorMap bounds = hf;
  bounds.add("model.vision_tower.encoder.layers.0.self_attn.q_proj.input_max", AnyTensor::from(open));
  CHECK_NOTHROW(io::gemma4_vision_from_hf(bounds, c));
  bounds.add("model.vision_tower.encoder.layers.0.mlp.up_proj.output_max", AnyTensor::from(tight));
  CHECK_THROWS_WITH(io::gemma4_vision_from_hf(bounds, c),
                    Catch::Contains("model.vision_tower.encoder.layers.0.mlp.up_proj.output_max = 3.5"));
  // Without std_bias / std_scale (standardize false) the standardisation is the identity.
  io::TensorMap plain;
  for (const auto& [name, t] : hf.tensors) {
    if (name.find("std_") == std::string::npos) plain.add(name, t);
  }
  const io::TensorMap mapped = io::gemma4_vision_from_hf(plain, c);
  CHECK(mapped.at(kEnc + ".std_scale").to<float, 1>({48})(5) == 1.0f);
  CHECK(mapped.at(kEnc + ".std_bias").to<float, 1>({48})(5) == 0.0f);
}

TEST_CASE("Gemma 4 vision: pictures that do not fit are refused by name", "[models][gemma4][vision]") {
  using P = Policy<reference::Backend, float>;
  const std::string dir = test::fixtures_dir() + "/gemma4_vision";
  const auto c = layers::Gemma4VisionConfig::from_hf(read_json(dir + "/hf/config.json"));
  const layers::Gemma4VisionEncoder<P> tower(c);
  reference::Backend be;
  const auto params =
      models::load_layer_params<P>(tower, io::gemma4_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), c), be);
  CHECK_THROWS_WITH(tower.encode(be, params, Tensor<float, 4>({1, 24, 30, 3})),
                    Catch::Contains("not made of whole 12-pixel windows"));
  CHECK_THROWS_WITH(tower.encode(be, params, Tensor<float, 4>({1, 12, 72, 3})), Catch::Contains("exceeds the position table"));
  CHECK_THROWS_WITH(tower.encode(be, params, Tensor<float, 4>({1, 24, 36, 4})), Catch::Contains("[n, height, width, 3]"));
}

TEST_CASE("Gemma 4 vision from llama.cpp's mmproj file equals the Hugging Face checkpoint's, bit for bit",
          "[models][gemma4][vision][mmproj]") {
  // fixtures/gemma4_vision/mmproj.gguf (tests/reference/gemma4_mmproj_fixture.py): the file llama.cpp's own converter
  // wrote for hf/ (convert_hf_to_gguf.py --mmproj --outtype f32, llama.cpp de3ff815): the patch kernel as a
  // convolution's [D, 3, p, p], the position table [2, S, D], no activation key.
  using P = Policy<test::Backend, float>;
  const std::string dir = test::fixtures_dir() + "/gemma4_vision";
  const auto hc = layers::Gemma4VisionConfig::from_hf(read_json(dir + "/hf/config.json"));
  io::Gemma4Mmproj m = io::gemma4_vision_from_mmproj(io::read_gguf(dir + "/mmproj.gguf"));
  const layers::Gemma4VisionConfig& c = m.config;
  CHECK(c.num_layers == hc.num_layers);
  CHECK(c.hidden_size == hc.hidden_size);
  CHECK(c.intermediate_size == hc.intermediate_size);
  CHECK(c.num_heads == hc.num_heads);
  CHECK(c.patch_size == hc.patch_size);
  CHECK(c.pooling_kernel == hc.pooling_kernel);
  CHECK(c.num_position_embeddings == hc.num_position_embeddings);
  CHECK(c.emb_dim == hc.emb_dim);
  CHECK(c.eps == hc.eps);
  CHECK(c.rope_theta == hc.rope_theta);
  {
    test::Backend be;
    const layers::Gemma4VisionEncoder<P> tower(c);
    const auto from_gguf = models::load_layer_params<P>(tower, m.tensors, be);
    const auto from_hf =
        models::load_layer_params<P>(tower, io::gemma4_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), hc), be);
    const AnyTensor px = test::npy(dir + "/pixels.npy");
    const Tensor<float, 4> pixels = px.to<float, 4>({px.shape[0], px.shape[1], px.shape[2], px.shape[3]});
    const Tensor<float, 3> a = tower.encode(be, from_gguf, pixels), b = tower.encode(be, from_hf, pixels);
    REQUIRE(a.size() == b.size());
    CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
    test::expect_close(AnyTensor::from(a), test::npy(dir + "/out.npy"), test::tol::f32_logits, "gemma4 from mmproj");
  }
  // Another projector's file, or one missing a tensor, is refused by name.
  io::GgufFile g = io::read_gguf(dir + "/mmproj.gguf");
  g.tensors.tensors.erase("v.blk.1.ffn_post_norm.weight");
  CHECK_THROWS_WITH(io::gemma4_vision_from_mmproj(std::move(g)), Catch::Contains("missing tensor v.blk.1.ffn_post_norm.weight"));
  CHECK_THROWS_WITH(io::gemma4_vision_from_mmproj(io::read_gguf(test::fixtures_dir() + "/llama4_mmproj/mmproj.gguf")),
                    Catch::Contains("clip.projector_type 'llama4' is not Gemma 4's"));
}
