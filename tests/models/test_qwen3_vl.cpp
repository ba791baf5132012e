// tests/models/test_qwen3_vl.cpp: Qwen3-VL's text models from Hugging Face checkpoints (families/qwen/family.hpp:
// config.json model_type qwen3_vl / qwen3_vl_moe, text_config read as MaxText's qwen3 / qwen3_moe block with use_mrope;
// model.language_model.* and the MoE's 3-D expert tensors), with a picture's soft tokens and deepstack features at
// MRoPE's 3-D positions, against the float64 re-statement tests/reference/qwen3_vl_text_reference.py (fixtures
// qwen3_vl_model, qwen3_vl_moe_model: 2 layers of width 24, a 2 x 3 picture in a 30-token prompt, random rows).
// Tolerance: logits at test::tol::f32_logits; positions exact. Controls (meta.json): no deepstack moves the logits by
// 3.4 / 4.4, 1-D positions by 2.1 / 2.7, the MoE's gate and up halves swapped by 5.1.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/load.hpp"
#include "maxtext/families/qwen/pictures.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

using P = Policy<test::Backend, float>;

std::vector<std::int32_t> ints(const AnyTensor& a) {
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < a.numel(); ++i) out.push_back(static_cast<std::int32_t>(a.element(i)));
  return out;
}

Tensor<float, 2> floats2(const AnyTensor& a) { return a.to<float, 2>({a.shape[0], a.shape[1]}); }

AnyTensor rows_of(const Tensor<float, 3>& l) {
  Tensor<float, 2> out({l.dim(0) * l.dim(1), l.dim(2)});
  std::copy(l.data(), l.data() + l.size(), out.data());
  return AnyTensor::from(out);
}

template <class Model>
void check_model(const std::string& name, const std::string& block) {
  const std::string dir = test::fixtures_dir() + "/" + name, hf = dir + "/hf";
  const Config cfg = io::read_weights_config(hf).value();
  CHECK(cfg.decoder_block == block);
  CHECK(cfg.use_mrope);
  CHECK(cfg.mrope_section() == std::vector<std::int64_t>{2, 1, 1});
  CHECK(cfg.rope_max_timescale == 5e6);
  Model m(cfg);
  m.load(io::load_weights(hf, cfg).tensors);

  const std::vector<std::int32_t> ids = ints(test::npy(dir + "/tokens.npy"));
  const auto T = static_cast<std::int64_t>(ids.size());
  const Tensor<std::int32_t, 2> pos2 = models::qwen3_rope_index(ids, {{2, 3}}, models::Qwen3ImageTokens{80, 81, 82});
  CHECK(ints(AnyTensor::from(pos2)) == ints(test::npy(dir + "/positions.npy")));
  Tensor<std::int32_t, 2> tok({1, T}), mask({1, T});
  Tensor<std::int32_t, 3> pos({3, 1, T});
  for (std::int64_t t = 0; t < T; ++t) {
    tok(0, t) = ids[static_cast<std::size_t>(t)];
    mask(0, t) = ids[static_cast<std::size_t>(t)] == 82 ? 1 : 0;
    for (int r = 0; r < 3; ++r) pos(r, 0, t) = pos2(r, t);
  }
  const Tensor<float, 2> e = floats2(test::npy(dir + "/image_embeddings.npy"));
  const Tensor<float, 2> d0 = floats2(test::npy(dir + "/deepstack_0.npy")), d1 = floats2(test::npy(dir + "/deepstack_1.npy"));
  const std::int64_t n = e.dim(0), D = e.dim(1);
  Tensor<float, 2> rows({n, 3 * D});
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy(&e(i, 0), &e(i, 0) + D, &rows(i, 0));
    std::copy(&d0(i, 0), &d0(i, 0) + D, &rows(i, D));
    std::copy(&d1(i, 0), &d1(i, 0) + D, &rows(i, 2 * D));
  }
  models::ForwardOptions fo;
  fo.media_mask = &mask;
  fo.media_embeddings = &rows;
  fo.mrope_positions = &pos;
  test::expect_close(rows_of(m.forward(tok, fo)), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                     name + " logits with a picture and deepstack");
  fo.media_embeddings = &e;
  test::expect_close(rows_of(m.forward(tok, fo)), test::npy(dir + "/logits_no_deepstack.npy"), test::tol::f32_logits,
                     name + " logits with a picture");

  // transformers 5's spelling: rope_parameters (rope_theta inside), num_local_experts, and the experts transposed.
  nlohmann::json j = nlohmann::json::parse(io::read_text_file(hf + "/config.json"));
  nlohmann::json& t = j["text_config"];
  t["rope_parameters"] = t["rope_scaling"];
  t["rope_parameters"]["rope_theta"] = t["rope_theta"];
  t.erase("rope_scaling");
  t.erase("rope_theta");
  if (t.contains("num_experts")) {
    t["num_local_experts"] = t["num_experts"];
    t.erase("num_experts");
  }
  const Config c5 = io::config_from_hf(j, name + " (v5)");
  CHECK(c5.rope_max_timescale == 5e6);
  CHECK(c5.num_experts == cfg.num_experts);
  io::TensorMap raw = io::read_safetensors(hf + "/model.safetensors");
  if (cfg.is("qwen3_moe")) {
    io::TensorMap v5;
    for (const auto& [k, v] : raw.tensors) {
      const bool expert = k.find(".mlp.experts.") != std::string::npos;
      if (!expert) {
        v5.add(k, v);
        continue;
      }
      const Tensor<float, 3> a = v.template to<float, 3>({v.shape[0], v.shape[1], v.shape[2]});
      Tensor<float, 3> b({a.dim(0), a.dim(2), a.dim(1)});
      for (std::int64_t x = 0; x < a.dim(0); ++x) {
        for (std::int64_t y = 0; y < a.dim(1); ++y) {
          for (std::int64_t z = 0; z < a.dim(2); ++z) b(x, z, y) = a(x, y, z);
        }
      }
      v5.add(k, AnyTensor::from(b));
    }
    Model m5(cfg);
    m5.load(families::import_hf(v5, cfg, "v5", hf + "/config.json"));
    fo.media_embeddings = &rows;
    test::expect_close(rows_of(m5.forward(tok, fo)), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                       name + " logits, experts in transformers 5's layout");
    raw.tensors.erase("model.language_model.layers.0.mlp.experts.down_proj");
    raw.add("model.language_model.layers.0.mlp.experts.down_proj", AnyTensor::from(Tensor<float, 3>({4, 16, 16})));
    CHECK_THROWS_WITH(families::import_hf(raw, cfg, "bad", hf + "/config.json"),
                      Catch::Contains("layers.0.mlp.experts.down_proj: expected [4,16,24]") && Catch::Contains("found f32 [4,16,16]"));
  }
  raw = io::read_safetensors(hf + "/model.safetensors");
  raw.add("model.extra.weight", AnyTensor::from(Tensor<float, 1>({2})));
  CHECK_THROWS_WITH(families::import_hf(raw, cfg, "bad", hf + "/config.json"), Catch::Contains("unexpected tensor model.extra.weight"));
}

}  // namespace

TEST_CASE("Qwen3-VL (dense): the HF checkpoint's text model with a picture at MRoPE's 3-D positions and deepstack "
          "matches the float64 reference", "[models][qwen3_vl][multimodal]") {
  check_model<models::Transformer<P, layers::Qwen3DecoderLayer>>("qwen3_vl_model", "qwen3");
}

TEST_CASE("Qwen3-VL-MoE: the HF checkpoint's text model (3-D expert tensors, both layouts) with a picture and deepstack "
          "matches the float64 reference", "[models][qwen3_vl][multimodal]") {
  check_model<models::Transformer<P, layers::Qwen3MoeDecoderLayer>>("qwen3_vl_moe_model", "qwen3_moe");
}
