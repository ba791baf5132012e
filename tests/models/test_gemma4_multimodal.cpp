// tests/models/test_gemma4_multimodal.cpp: Gemma 4 with pictures, as an application embeds them
// (families/gemma4/pictures.hpp): files preprocessed by MaxText's processor, encoded by the vision encoder, the prompt's
// <|image|> markers expanded (add_extra_tokens_for_images_gemma4) and the soft tokens merged into the decoder, a
// picture's tokens seeing each other in the sliding-window layers only (gemma4.py Gemma4DecoderLayer passes
// bidirectional_mask to its local layers; the global ones stay causal), against the float64 re-statement
// tests/reference/gemma4_multimodal_reference.py (fixture gemma4_mm_model: a 6-layer Gemma 4 with sliding window 3, a
// 2-layer encoder, two pictures of 6 soft tokens in a 45-token prompt).
// Tolerances: soft tokens and logits at test::tol::f32_logits (f32 against f64, as the text model's and the encoder's
// own tests); ids and masks exact. The controls: the merge without any picture mask, with the picture mask in every
// layer (Hugging Face's "vision" mode), and no merge at all each differ from the reference by far more (meta.json).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/gemma4/gemma4.hpp"
#include "maxtext/families/gemma4/pictures.hpp"
#include "maxtext/families/load.hpp"
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
using Model = models::Transformer<P, layers::Gemma4DecoderLayer>;

std::string fixture() { return test::fixtures_dir() + "/gemma4_mm_model"; }
void need_fixture() {
  if (!std::filesystem::exists(fixture() + "/meta.json")) test::skip("fixture gemma4_mm_model missing");
}

Model load_model() {
  const std::string hf = fixture() + "/hf";
  const auto cfg = io::read_weights_config(hf);
  REQUIRE(cfg.has_value());
  CHECK(cfg->decoder_block == "gemma4");
  CHECK(cfg->vocab_size == 64);
  CHECK(cfg->emb_dim == 40);
  Model m(*cfg);
  m.load(io::load_weights(hf, *cfg).tensors);
  return m;
}

std::vector<std::int32_t> ints(const AnyTensor& a) {
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < a.numel(); ++i) out.push_back(static_cast<std::int32_t>(a.element(i)));
  return out;
}

double max_abs_diff(const Tensor<float, 3>& a, const AnyTensor& b) {
  const auto y = b.to<float, 3>({b.shape[0], b.shape[1], b.shape[2]});
  REQUIRE(a.size() == y.size());
  double m = 0.0;
  for (std::int64_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a.data()[i]) - y.data()[i]));
  return m;
}

}  // namespace

TEST_CASE("Gemma 4 pictures: files preprocessed, encoded and expanded into a prompt as MaxText's processor does",
          "[models][gemma4][vision][multimodal]") {
  need_fixture();
  const std::string dir = fixture();
  const models::Gemma4Pictures<P> pics(test::Backend{}, dir + "/hf");
  const io::Gemma4ImageTokens& t = pics.image_tokens();
  CHECK(t.begin == 61);  // config.json's boi / eoi / image_token_id
  CHECK(t.end == 62);
  CHECK(t.image == 60);
  CHECK(pics.config().image_height == 24);  // vision_config.image_size: MaxText's fixed size for this tiny model
  CHECK(pics.config().image_width == 36);
  // MaxText's preprocessing of the two files, then the encoder: the reference's soft tokens.
  const std::vector<io::Image> images = {io::read_image(dir + "/image_a.png"), io::read_image(dir + "/image_b.png")};
  const AnyTensor want_px = test::npy(dir + "/pixels.npy");
  for (std::size_t i = 0; i < images.size(); ++i) {
    const Tensor<float, 3> px = io::gemma4_preprocess(images[i], pics.preprocessing());
    const std::int64_t n = px.size();
    const auto ref = want_px.to<float, 4>({2, 24, 36, 3});
    CHECK(std::equal(px.data(), px.data() + n, ref.data() + static_cast<std::int64_t>(i) * n));
  }
  const models::Gemma4EncodedPictures enc = pics.encode(images);
  CHECK(enc.tokens == std::vector<std::int64_t>{6, 6});
  test::expect_close(AnyTensor::from(enc.rows), test::npy(dir + "/image_tokens.npy"), test::tol::f32_logits,
                     "gemma4 pictures' soft tokens");
  // The prompt: each <|image|> (60) becomes <|image> + 6 x <|image|> + <image|>.
  const std::vector<std::int32_t> prompt = ints(test::npy(dir + "/prompt_ids.npy"));
  const models::MediaPrompt mp = pics.expand(prompt, enc);
  CHECK(mp.ids == ints(test::npy(dir + "/ids.npy")));
  CHECK(ints(AnyTensor::from(mp.mask)) == ints(test::npy(dir + "/image_mask.npy")));
  REQUIRE(mp.embeddings.dim(0) == 12);
  CHECK(std::equal(mp.embeddings.data(), mp.embeddings.data() + mp.embeddings.size(), enc.rows.data()));
  // One marker for two pictures: only with all = false; otherwise refused by name; begin / end ids in the text too.
  const auto first = std::find(prompt.begin(), prompt.end(), 60);
  const std::vector<std::int32_t> one(prompt.begin(), first + 1);
  CHECK(pics.expand(one, enc, false).embeddings.dim(0) == 6);
  CHECK(pics.expand(one, enc, false).ids.size() == one.size() + 7);
  CHECK_THROWS_WITH(pics.expand(one, enc, true), Catch::Contains("1 <|image|> marker(s) for 2 picture(s)"));
  std::vector<std::int32_t> with_begin = prompt;
  with_begin.insert(with_begin.begin() + 1, 61);
  CHECK_THROWS_WITH(pics.expand(with_begin, enc), Catch::Contains("already holds an image begin token (id 61)"));
  // Another family's checkpoint is refused by name, a vision_config the encoder cannot run too (the text fixture's
  // stub: 16 wide, 16 heads), and MaxText's fixed size where the position table cannot take it.
  CHECK_THROWS_WITH(models::Gemma4Pictures<P>(test::Backend{}, test::fixtures_dir() + "/llama4_mm_model/hf"),
                    Catch::Contains("has model_type 'llama4'"));
  CHECK_THROWS_WITH(models::Gemma4Pictures<P>(test::Backend{}, test::fixtures_dir() + "/gemma4_model/hf"),
                    Catch::Contains("divisible by 4"));
  CHECK_THROWS_WITH(models::Gemma4Pictures<P>(test::Backend{}, test::fixtures_dir() + "/gemma4_vision/hf"),
                    Catch::Contains("MaxText's processor resizes every picture to 960 x 672"));
  // Hugging Face's preprocessing keeps the aspect ratio (preprocessor_config.json: 6 soft tokens at most): picture a
  // (50 x 40) becomes 24 x 24 pixels, 4 soft tokens; picture b (36 x 24) keeps its size, 6. Pictures of two sizes go
  // through the encoder in two passes; each picture's rows are those of a pass of its own.
  const models::Gemma4Pictures<P> hf(test::Backend{}, dir + "/hf", io::Gemma4ImageProcessing::hf);
  CHECK(hf.preprocessing().max_soft_tokens == 6);
  const models::Gemma4EncodedPictures two = hf.encode(images);
  CHECK(two.tokens == std::vector<std::int64_t>{4, 6});
  const models::Gemma4EncodedPictures b_alone = hf.encode({images[1]});
  CHECK(std::equal(b_alone.rows.data(), b_alone.rows.data() + b_alone.rows.size(), two.rows.data() + 4 * 40));
  CHECK(hf.expand(prompt, two).ids.size() == prompt.size() + 2 * 2 + 4 + 6 - 2);
}

TEST_CASE("Gemma 4 preprocessing: MaxText's fixed size and Hugging Face's aspect-preserving size, byte for byte Pillow's",
          "[models][gemma4][vision][image]") {
  // fixtures/gemma4_preprocess (tests/reference/gemma4_preprocess.py: Pillow BICUBIC + NumPy as each processor does).
  const std::string dir = test::fixtures_dir() + "/gemma4_preprocess";
  io::Gemma4Preprocess mt;
  mt.height = 24;
  mt.width = 36;
  mt.patch = 4;
  io::Gemma4Preprocess hf = mt;
  hf.how = io::Gemma4ImageProcessing::hf;
  hf.max_soft_tokens = 6;
  for (const char* name : {"a", "b", "c", "d"}) {
    INFO(name);
    const io::Image img = io::read_image(dir + "/" + name + ".png");
    for (const auto& [o, file] : {std::pair{mt, "maxtext_"}, std::pair{hf, "hf_"}}) {
      const Tensor<float, 3> px = io::gemma4_preprocess(img, o);
      const AnyTensor want = test::npy(dir + "/" + file + name + ".npy");
      REQUIRE(want.shape == std::vector<std::int64_t>{px.dim(0), px.dim(1), 3});
      const auto w = want.to<float, 3>({px.dim(0), px.dim(1), 3});
      CHECK(std::equal(px.data(), px.data() + px.size(), w.data()));
    }
  }
  // The real model's sizes (patch 16, pooling 3, 280 soft tokens), from get_aspect_ratio_preserving_size (meta.json).
  const std::vector<std::array<std::int64_t, 4>> cases = {  // W, H -> W', H'
      {640, 480, 912, 672}, {1920, 1080, 1056, 576}, {480, 640, 672, 912}, {100, 2000, 144, 3552}, {3000, 40, 6912, 48}};
  for (const auto& c : cases) {
    const auto [h, w] = io::gemma4_hf_target_size(c[1], c[0], 16, 280 * 9, 3);
    CHECK(w == c[2]);
    CHECK(h == c[3]);
  }
  CHECK_THROWS_WITH(io::parse_gemma4_image_processing("llamacpp"), Catch::Contains("llamacpp is not implemented"));
  CHECK_THROWS_WITH(io::gemma4_hf_target_size(0, 10, 16, 2520, 3), Catch::Contains("must be > 0"));
}

TEST_CASE("Gemma 4 with pictures: the merged logits equal the float64 reference (picture mask in the sliding layers)",
          "[models][gemma4][multimodal]") {
  need_fixture();
  const std::string dir = fixture();
  const models::Gemma4Pictures<P> pics(test::Backend{}, dir + "/hf");
  const auto enc = pics.encode({io::read_image(dir + "/image_a.png"), io::read_image(dir + "/image_b.png")});
  const models::MediaPrompt mp = pics.expand(ints(test::npy(dir + "/prompt_ids.npy")), enc);
  const std::int64_t T = static_cast<std::int64_t>(mp.ids.size());
  Tensor<std::int32_t, 2> ids({1, T});
  std::copy(mp.ids.begin(), mp.ids.end(), ids.data());
  Model m = load_model();
  models::ForwardOptions fo;
  fo.media_mask = &mp.mask;
  fo.media_embeddings = &mp.embeddings;
  const Tensor<float, 3> got = m.forward(ids, fo);
  const AnyTensor want = test::npy(dir + "/logits.npy");
  test::expect_close(AnyTensor::from(got), want, test::tol::f32_logits, "gemma4 merged logits");
  CHECK(max_abs_diff(got, test::npy(dir + "/logits_text.npy")) > 1.0);  // the merge matters (5.5 in meta.json)

  // Incrementally through a Session: the prompt with both pictures, then the greedy tokens one at a time.
  const std::vector<std::int32_t> greedy = ints(test::npy(dir + "/greedy.npy"));
  models::GenerateOptions go;
  go.max_new_tokens = static_cast<std::int64_t>(greedy.size());
  go.media_mask = &mp.mask;
  go.media_embeddings = &mp.embeddings;
  CHECK(models::generate(m, {mp.ids}, go).tokens[0] == greedy);
  models::Session<Model> s(m, T + 16);
  models::GenerateOptions plain;
  plain.max_new_tokens = static_cast<std::int64_t>(greedy.size());
  s.sync(mp.ids, &mp.mask, &mp.embeddings);
  CHECK(s.generate({}, plain).tokens[0] == greedy);
}
