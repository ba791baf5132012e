// tests/models/test_llama4_pictures.cpp: Llama 4's pictures as an application embeds them (families/llama4/pictures.hpp):
// files decoded, cut into tiles (MaxText's processor), encoded by the vision model and expanded into a prompt, against
// fixtures/llama4_mm_model (tests/reference/llama4_multimodal_reference.py). Tolerance: the soft tokens at
// test::tol::f32_logits (f32 against f64 after the whole tower, as in test_llama4_vision.cpp); ids and mask exact.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/families/llama4/pictures.hpp"
#include "maxtext/io/image.hpp"
#include "support/backends.hpp"
#include "support/family_fixture.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

TEST_CASE("Llama 4 pictures: files cut into tiles, encoded and expanded into a prompt as MaxText's processor does",
          "[models][llama4][vision][multimodal]") {
  // fixtures/llama4_mm_model (tests/reference/llama4_multimodal_reference.py): a 240 x 160 picture cut into 2 x 3
  // tiles of 84 plus a global tile, a 60 x 50 one in one tile, 9 soft tokens a tile; the prompt
  // <|begin_of_text|><|image|>describe <|image|>both expanded as add_extra_tokens_for_images_llama4. The merged
  // logits are checked through the program (tests/tools/test_cli_vision.cpp) and Python (python/tests/test_vision.py).
  const std::string dir = test::fixtures_dir() + "/llama4_mm_model";
  using P = Policy<test::Backend, float>;
  const models::Llama4Pictures<P> pics(test::Backend{}, dir + "/hf");
  const io::Llama4ImageTokens& t = pics.image_tokens();
  CHECK(t.begin == 56);  // config.json's boi / eoi / image_token_index
  CHECK(t.end == 57);
  CHECK(t.patch == 59);
  CHECK(t.per_tile == 9);
  const models::Llama4EncodedPictures enc =
      pics.encode({io::read_image(dir + "/image_a.png"), io::read_image(dir + "/image_b.png")});
  REQUIRE(enc.count() == 2);
  CHECK(enc.grids[0] == std::pair<std::int64_t, std::int64_t>{2, 3});
  CHECK(enc.grids[1] == std::pair<std::int64_t, std::int64_t>{1, 1});
  CHECK(enc.tiles == std::vector<std::int64_t>{7, 1});
  test::expect_close(AnyTensor::from(enc.tokens), test::npy(dir + "/image_tokens.npy"), test::tol::f32_logits,
                     "llama4 pictures' soft tokens");
  // The prompt: this vocabulary's <|image|> is 58 (MaxText's ids are Llama 4's real ones: the tokenizer's are given).
  io::Llama4ImageTokens ids = t;
  ids.image = 58;
  ids.tile_x = 60;
  ids.tile_y = 61;
  const models::Llama4Pictures<P> with_ids(test::Backend{}, dir + "/hf", ids);
  const auto prompt = test::int_tensor(test::npy(dir + "/prompt_ids.npy"));
  const std::vector<std::int32_t> p(prompt.data(), prompt.data() + prompt.size());
  const models::MediaPrompt mp = with_ids.expand(p, enc);
  const auto want_ids = test::int_tensor(test::npy(dir + "/ids.npy"));
  const auto want_mask = test::int_tensor(test::npy(dir + "/image_mask.npy"));
  REQUIRE(static_cast<std::int64_t>(mp.ids.size()) == want_ids.dim(1));
  CHECK(std::equal(mp.ids.begin(), mp.ids.end(), want_ids.data()));
  CHECK(std::equal(mp.mask.data(), mp.mask.data() + mp.mask.size(), want_mask.data()));
  REQUIRE(mp.embeddings.dim(0) == 72);
  CHECK(std::equal(mp.embeddings.data(), mp.embeddings.data() + mp.embeddings.size(), enc.tokens.data()));
  // One marker for two pictures: only with all = false (a chat's first turn); otherwise refused by name.
  const std::vector<std::int32_t> one(p.begin(), p.begin() + 11);  // up to "describe "
  CHECK(with_ids.expand(one, enc, false).embeddings.dim(0) == 63);
  CHECK_THROWS_WITH(with_ids.expand(one, enc, true), Catch::Contains("1 <|image|> marker(s) for 2 picture(s)"));
  CHECK_THROWS_WITH(models::Llama4Pictures<P>(test::Backend{}, test::fixtures_dir() + "/llama4_model/hf"),
                    Catch::Contains("has model_type 'llama4_text'"));
  // Ids that cannot be told apart, and encoded pictures whose counts disagree, are refused by name.
  io::Llama4ImageTokens same = ids;
  same.image = same.patch;
  CHECK_THROWS_WITH(models::Llama4Pictures<P>(test::Backend{}, dir + "/hf", same), Catch::Contains("must all differ"));
  models::Llama4EncodedPictures bad = enc;
  bad.tiles[0] = 9;
  CHECK_THROWS_WITH(with_ids.expand(p, bad), Catch::Contains("tile counts summing to 10, for 8 encoded tiles"));
  // More tiles than one pass takes: encoded in passes of Llama4Pictures::kTilesPerPass, as one pass would.
  Tensor<float, 4> many({40, 84, 84, 3});
  for (std::int64_t i = 0; i < many.size(); ++i) many.data()[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  layers::Capture whole;  // a capture keeps the tiles in one pass
  const Tensor<float, 3> passes = pics.encode_tiles(many), single = pics.encode_tiles(many, &whole);
  test::expect_close(AnyTensor::from(passes), AnyTensor::from(single), testing::Tolerance{1e-6, 1e-6},
                     "40 tiles in passes of 16 vs one pass");
}
