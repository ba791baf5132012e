// tests/models/test_qwen3_pictures.cpp: the image side of the Qwen3-VL / Qwen3-Omni / Qwen3.5 processors
// (families/qwen/image_processor.hpp) against tests/reference/qwen3_vision_preprocess.py (NumPy + Pillow re-statements of
// Hugging Face's Qwen2VLImageProcessor and MaxText's pre_process_qwen3_image): three pictures through Hugging Face's
// resize (plain rounding, shrinking over max_pixels, growing under min_pixels) bit for bit, the real model's sizes for
// both pipelines, and the refusals.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/families/qwen/image_processor.hpp"
#include "maxtext/io/image.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

TEST_CASE("Qwen3 preprocessing: Hugging Face's smart resize, BICUBIC and patches bit for bit, MaxText's two resizes",
          "[models][qwen3][vision][image]") {
  const std::string dir = test::fixtures_dir() + "/qwen3_vision_preprocess";
  io::Qwen3Preprocess hf;
  hf.how = io::Qwen3ImageProcessing::hf;
  hf.min_pixels = 2048;  // the fixture's small budgets (meta.json)
  hf.max_pixels = 6144;
  const AnyTensor grids = test::npy(dir + "/grid_thw.npy");
  for (int i = 0; i < 3; ++i) {
    INFO("picture " << i);
    const io::Qwen3Patches p = io::qwen3_preprocess(io::read_image(dir + "/img_" + std::to_string(i) + ".png"), hf);
    CHECK(p.t == grids.element(i * 3));
    CHECK(p.h == grids.element(i * 3 + 1));
    CHECK(p.w == grids.element(i * 3 + 2));
    const AnyTensor want = test::npy(dir + "/pixel_values_" + std::to_string(i) + ".npy");
    REQUIRE(want.shape == std::vector<std::int64_t>{p.pixel_values.dim(0), p.pixel_values.dim(1)});
    const auto w = want.to<float, 2>({p.pixel_values.dim(0), p.pixel_values.dim(1)});
    CHECK(std::equal(p.pixel_values.data(), p.pixel_values.data() + p.pixel_values.size(), w.data()));
  }
  // The real model's sizes (meta.json: Qwen3.5's preprocessor_config.json, MaxText's processor_qwen3_omni.py): W x H
  // -> H' x W' for Hugging Face's one resize, and MaxText's first (factor 28) and second (factor 32) resizes.
  struct Case {
    std::int64_t w, h, hf_h, hf_w, mt1_h, mt1_w, mt_h, mt_w;
  };
  const std::vector<Case> cases = {{640, 480, 480, 640, 476, 644, 480, 640},
                                   {1920, 1080, 1088, 1920, 1092, 1932, 1088, 1920},
                                   {100, 2000, 1984, 96, 1988, 112, 1984, 128}};
  for (const Case& c : cases) {
    INFO(c.w << " x " << c.h);
    CHECK(io::qwen3_smart_resize(c.h, c.w, 32, 65536, 16777216) == std::pair<std::int64_t, std::int64_t>{c.hf_h, c.hf_w});
    const auto [h1, w1] = io::qwen3_smart_resize(c.h, c.w, 28, 3136, 12845056);
    CHECK(std::pair{h1, w1} == std::pair<std::int64_t, std::int64_t>{c.mt1_h, c.mt1_w});
    CHECK(io::qwen3_smart_resize(h1, w1, 32, 3136, 12845056) == std::pair<std::int64_t, std::int64_t>{c.mt_h, c.mt_w});
  }
  // MaxText's path on a picture: two resizes, its own normalisation ((v - 127.5) / 127.5, which equals Hugging Face's
  // for every byte value), the same patch order.
  io::Qwen3Preprocess mt;
  mt.patch = 4;
  const io::Image img = io::read_image(dir + "/img_1.png");  // 90 x 130
  const io::Qwen3Patches a = io::qwen3_preprocess(img, mt);
  const auto [h1, w1] = io::qwen3_smart_resize(130, 90, 28, 3136, 12845056);
  const auto [h2, w2] = io::qwen3_smart_resize(h1, w1, 8, 3136, 12845056);
  CHECK(a.height == h2);
  CHECK(a.width == w2);
  CHECK(a.pixel_values.dim(0) == (h2 / 4) * (w2 / 4));
  for (int v = 0; v < 256; ++v) {
    CHECK((static_cast<float>(v) - 127.5f) / 127.5f == static_cast<float>((static_cast<double>(v) / 255.0 - 0.5) / 0.5));
  }
  // Refusals, by name.
  CHECK_THROWS_WITH(io::qwen3_smart_resize(10, 2010, 32, 65536, 16777216), Catch::Contains("aspect ratio is above 200"));
  CHECK_THROWS_WITH(io::parse_qwen3_image_processing("llamacpp"), Catch::Contains("llamacpp is not implemented"));
}
