// tests/models/test_qwen3_omni_multimodal.cpp: Qwen3-Omni's thinker with sound and a picture: the Hugging Face
// checkpoint's text model read as MaxText's qwen3_moe block with use_mrope (families/qwen/family.hpp), its audio
// encoder (families/qwen/sounds.hpp) and vision encoder (families/qwen/pictures.hpp) from the same checkpoint, the
// prompt's <|audio_pad|> and <|image_pad|> markers expanded (sound at text positions, the picture at MRoPE's 3-D
// positions, deepstack after the first layers), against the float64 re-statement
// tests/reference/qwen3_omni_thinker_reference.py (fixture qwen3_omni_mm_model: a 2-layer MoE text model of width 24,
// a 0.77 s clip -> 13 soft tokens (MaxText: padded to 1 s), a 6 x 8-patch picture -> 12 soft tokens with two deepstack
// features, a 42-token prompt, four greedy decode steps; and the same prompt without the picture).
// Tolerances: logits and soft tokens at test::tol::f32_logits (f32 against f64, as the other models); ids, positions
// and greedy tokens exact. Controls (meta.json): no audio merge moves the logits by 5.8, no picture merge by 3.1, no
// deepstack by 2.4, 1-D positions by 1.5, the audio span at one position by 1.8, decode at T + k by 1.4.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "maxtext/families/load.hpp"
#include "maxtext/families/qwen/pictures.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/families/qwen/sounds.hpp"
#include "maxtext/io/audio.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

using P = Policy<test::Backend, float>;
using Model = models::Transformer<P, layers::Qwen3MoeDecoderLayer>;

std::string fixture() { return test::fixtures_dir() + "/qwen3_omni_mm_model"; }

std::vector<std::int32_t> ints(const AnyTensor& a) {
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < a.numel(); ++i) out.push_back(static_cast<std::int32_t>(a.element(i)));
  return out;
}

/// Logits [1, T, V] as [T, V] (the fixture's shape).
AnyTensor rows_of(const Tensor<float, 3>& l) {
  Tensor<float, 2> out({l.dim(0) * l.dim(1), l.dim(2)});
  std::copy(l.data(), l.data() + l.size(), out.data());
  return AnyTensor::from(out);
}

/// The prompt as a user writes it: each clip's and each picture's run of pad tokens as one marker.
std::vector<std::int32_t> unexpanded(const std::vector<std::int32_t>& ids) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if ((ids[i] == 102 || ids[i] == 105) && i > 0 && ids[i - 1] == ids[i]) continue;
    out.push_back(ids[i]);
  }
  return out;
}

Model load_model(Config* cfg_out = nullptr) {
  const std::string hf = fixture() + "/hf";
  const auto cfg = io::read_weights_config(hf);
  REQUIRE(cfg.has_value());
  if (cfg_out != nullptr) *cfg_out = *cfg;
  Model m(*cfg);
  m.load(io::load_weights(hf, *cfg).tensors);
  return m;
}

/// The whole prompt, from the files: the picture (MaxText's preprocessing is not the fixture's: its pixel rows are
/// encoded), the clip through the checkpoint's audio encoder, both expanded.
models::MediaPrompt prompt_from_files(const std::vector<std::int32_t>& ids) {
  const std::string dir = fixture();
  const models::Qwen3Pictures<P> pics(test::Backend{}, dir + "/hf", io::Qwen3ImageProcessing::hf);
  const AnyTensor pv = test::npy(dir + "/pixel_values.npy");
  const auto out = pics.encode_patches(pv.to<float, 2>({pv.shape[0], pv.shape[1]}), 1, 6, 8);
  const models::Qwen3OmniSounds<P> snd(test::Backend{}, dir + "/hf");
  const Tensor<float, 2> clip = snd.encode(io::load_audio(dir + "/audio.wav", snd.sampling_rate()));
  test::expect_close(AnyTensor::from(clip), test::npy(dir + "/audio_embeddings.npy"), test::tol::f32_logits,
                     "qwen3-omni: the clip's soft tokens");
  test::expect_close(AnyTensor::from(out.tokens), test::npy(dir + "/image_embeddings.npy"), test::tol::f32_logits,
                     "qwen3-omni: the picture's soft tokens");
  REQUIRE(out.deepstack.size() == 2);
  test::expect_close(AnyTensor::from(out.deepstack[1]), test::npy(dir + "/deepstack_1.npy"), test::tol::f32_logits,
                     "qwen3-omni: the picture's deepstack 1");
  const models::MediaPrompt with_picture = pics.expand(ids, {out});
  return snd.expand(with_picture, {clip});
}

}  // namespace

TEST_CASE("Qwen3-Omni: the thinker's text model is read from the Hugging Face checkpoint as qwen3_moe with MRoPE",
          "[models][qwen3_omni][multimodal]") {
  Config cfg;
  const Model m = load_model(&cfg);
  CHECK(cfg.decoder_block == "qwen3_moe");
  CHECK(cfg.use_mrope);
  CHECK(cfg.mrope_section() == std::vector<std::int64_t>{2, 1, 1});
  CHECK(cfg.emb_dim == 24);
  CHECK(cfg.num_experts == 4);
  CHECK(cfg.num_experts_per_tok == 2);
  CHECK(cfg.head_dim == 8);
  CHECK(cfg.rope_max_timescale == 1e6);
  // Audio only: the positions are plain text positions; the clip's rows merged at its pads.
  const std::string dir = fixture();
  const std::vector<std::int32_t> ids = ints(test::npy(dir + "/tokens_audio_only.npy"));
  const auto T = static_cast<std::int64_t>(ids.size());
  const models::Qwen3OmniSounds<P> snd(test::Backend{}, dir + "/hf");
  const models::MediaPrompt p =
      snd.expand(models::text_prompt(unexpanded(ids)), {snd.encode(io::load_audio(dir + "/audio.wav"))});
  REQUIRE(p.ids == ids);
  Tensor<std::int32_t, 2> tok({1, T});
  Tensor<std::int32_t, 3> pos({3, 1, T});
  for (std::int64_t t = 0; t < T; ++t) {
    tok(0, t) = ids[static_cast<std::size_t>(t)];
    for (int r = 0; r < 3; ++r) {
      CHECK(p.positions(r, t) == t);
      pos(r, 0, t) = p.positions(r, t);
    }
  }
  models::ForwardOptions fo;
  fo.media_mask = &p.mask;
  fo.media_embeddings = &p.embeddings;
  fo.mrope_positions = &pos;
  test::expect_close(rows_of(const_cast<Model&>(m).forward(tok, fo)), test::npy(dir + "/logits_audio_only.npy"),
                     test::tol::f32_logits, "qwen3-omni logits, audio only");
}

TEST_CASE("Qwen3-Omni with a clip and a picture: the prompt expanded from the files gives the float64 reference's "
          "ids, positions, logits and greedy tokens", "[models][qwen3_omni][multimodal]") {
  const std::string dir = fixture();
  Model m = load_model();
  const std::vector<std::int32_t> ids = ints(test::npy(dir + "/tokens.npy"));
  const auto T = static_cast<std::int64_t>(ids.size());
  const models::MediaPrompt p = prompt_from_files(unexpanded(ids));
  REQUIRE(p.ids == ids);
  CHECK(ints(AnyTensor::from(p.positions)) == ints(test::npy(dir + "/positions.npy")));
  REQUIRE(p.embeddings.dim(0) == 25);  // 13 audio rows, then 12 picture rows, in prompt order
  REQUIRE(p.embeddings.dim(1) == 72);  // each soft token and two deepstack features (zeros for sound)
  CHECK(p.embeddings(0, 30) == 0.0f);
  Tensor<std::int32_t, 2> tok({1, T});
  Tensor<std::int32_t, 3> pos({3, 1, T});
  for (std::int64_t t = 0; t < T; ++t) {
    tok(0, t) = ids[static_cast<std::size_t>(t)];
    for (int r = 0; r < 3; ++r) pos(r, 0, t) = p.positions(r, t);
  }
  models::ForwardOptions fo;
  fo.media_mask = &p.mask;
  fo.media_embeddings = &p.embeddings;
  fo.mrope_positions = &pos;
  test::expect_close(rows_of(m.forward(tok, fo)), test::npy(dir + "/logits.npy"), test::tol::f32_logits,
                     "qwen3-omni logits, audio and picture");

  // generate(): the reference's greedy tokens, decoded at the largest position + 1 + k.
  models::GenerateOptions go;
  go.max_new_tokens = 4;
  go.media_mask = &p.mask;
  go.media_embeddings = &p.embeddings;
  go.media_positions = &pos;
  const models::GenerateResult r = models::generate(m, {ids}, go, 64);
  CHECK(r.tokens[0] == ints(test::npy(dir + "/greedy.npy")));

  // A session: the same prompt, then the greedy tokens one by one against the decode logits.
  models::Session<Model> s(m, 64);
  s.append(p.ids, &p.mask, &p.embeddings, &p.positions);
  const std::vector<std::int32_t> greedy = ints(test::npy(dir + "/greedy.npy"));
  const AnyTensor dl = test::npy(dir + "/decode_logits.npy");
  const auto dw = dl.to<float, 2>({4, 128});
  for (std::int64_t k = 0; k < 3; ++k) {
    s.append({greedy[static_cast<std::size_t>(k)]});
    const std::vector<float> lk = s.logits();
    Tensor<float, 2> got({1, 128}), want({1, 128});
    for (std::int64_t v = 0; v < 128; ++v) {
      got(0, v) = lk[static_cast<std::size_t>(v)];
      want(0, v) = dw(k, v);
    }
    test::expect_close(AnyTensor::from(got), AnyTensor::from(want), test::tol::f32_logits,
                       "qwen3-omni decode step " + std::to_string(k));
  }
}

TEST_CASE("Qwen3-Omni: checkpoints the reader cannot take are refused by name", "[models][qwen3_omni][errors]") {
  const std::string dir = fixture();
  nlohmann::json j = nlohmann::json::parse(io::read_text_file(dir + "/hf/config.json"));
  j["thinker_config"]["text_config"]["rope_scaling"]["mrope_section"] = {2, 1};
  CHECK_THROWS_WITH(io::config_from_hf(j, "omni"), Catch::Contains("mrope_section: expected three integers"));
  j["thinker_config"]["text_config"]["rope_scaling"]["mrope_section"] = {2, 1, 1};
  j["thinker_config"]["text_config"]["rope_scaling"]["interleaved"] = false;
  j["thinker_config"]["text_config"]["rope_scaling"]["mrope_interleaved"] = false;
  CHECK_THROWS_WITH(io::config_from_hf(j, "omni"), Catch::Contains("interleaved = false"));
  j["thinker_config"].erase("text_config");
  CHECK_THROWS_WITH(io::config_from_hf(j, "omni"), Catch::Contains("without thinker_config.text_config"));
  // transformers >= 5's spelling (rope_parameters with rope_theta inside) reads the same.
  nlohmann::json k = nlohmann::json::parse(io::read_text_file(dir + "/hf/config.json"));
  nlohmann::json& t = k["thinker_config"]["text_config"];
  t["rope_parameters"] = t["rope_scaling"];
  t["rope_parameters"]["rope_theta"] = t["rope_theta"];
  t.erase("rope_scaling");
  t.erase("rope_theta");
  const Config c5 = io::config_from_hf(k, "omni5");
  CHECK(c5.rope_max_timescale == 1e6);
  CHECK(c5.mrope_section() == std::vector<std::int64_t>{2, 1, 1});
  // A tensor outside the thinker's known parts.
  io::TensorMap raw = io::read_safetensors(dir + "/hf/model.safetensors");
  raw.add("thinker.extra.weight", AnyTensor::from(Tensor<float, 1>({2})));
  const Config cfg = io::read_weights_config(dir + "/hf").value();
  CHECK_THROWS_WITH(families::import_hf(raw, cfg, "omni", dir + "/hf/config.json"),
                    Catch::Contains("unexpected tensor thinker.extra.weight"));
}
