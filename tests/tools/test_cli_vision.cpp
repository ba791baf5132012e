// tests/tools/test_cli_vision.cpp: `maxtext vision` (tools/cli_vision.cpp) end to end: two picture files (PNG 64x48,
// JPEG 37x23) through the tiny Gemma 3 checkpoint of fixtures/gemma3_vision_nopool/hf (image_size 32), with MaxText's
// and Hugging Face's preprocessing, against tests/reference/gemma3_vision_reference.py's image_tokens_*.npy (Pillow's
// decoding and resize, NumPy's normalisation, the float64 tower). Tolerance: test::tol::f32_logits, as the tower's
// own test for its projected tokens. Refusals: a checkpoint without a vision tower, a missing picture, a bad
// preprocessing name.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/npy.hpp"
#include "support/cli.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

/// Runs the program expecting a failure; returns what it printed.
std::string run_failing(const std::string& args) {
  const std::string out = (std::filesystem::current_path() / ("cli_vision_" + std::to_string(::getpid()) + ".txt")).string();
  const int rc = std::system((test::cli_path() + " " + args + " > " + out + " 2>&1").c_str());
  std::string text = io::read_text_file(out);
  std::remove(out.c_str());
  INFO(args << "\n" << text);
  CHECK(rc != 0);
  return text;
}

}  // namespace

TEST_CASE("maxtext vision: picture files to Gemma 3 soft tokens equal Pillow + the float64 tower", "[cli][vision]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  const std::string dir = test::fixtures_dir() + "/gemma3_vision_nopool", img = test::fixtures_dir() + "/images/";
  const std::string pics = " --image " + img + "png_rgb8_64x48.png --image " + img + "jpeg_rgb_q90_420_37x23.jpg";
  for (const char* how : {"maxtext", "hf"}) {
    const std::string out = (std::filesystem::current_path() / (std::string("vision_tokens_") + how + ".npy")).string();
    const std::string text =
        test::run_cli("vision --weights " + dir + "/hf" + pics + " --image-preprocess " + how + " --out " + out);
    CHECK(text.find("256 soft tokens of 32") != std::string::npos);
    test::expect_close(io::read_npy(out), test::npy(dir + "/image_tokens_" + how + ".npy"), test::tol::f32_logits,
                       std::string("vision tokens (") + how + ")");
    std::remove(out.c_str());
  }
  std::string t = run_failing("vision --weights " + test::fixtures_dir() + "/gemma3_model/hf --image " + img +
                              "png_rgb8_64x48.png");
  CHECK(t.find("has model_type 'gemma3_text'") != std::string::npos);
  t = run_failing("vision --weights " + dir + "/hf --image " + img + "no-such.png");
  CHECK(t.find("no-such.png: cannot open the file") != std::string::npos);
  t = run_failing("vision --weights " + dir + "/hf --image " + img + "png_rgb8_64x48.png --image-preprocess pil");
  CHECK(t.find("unknown Gemma 3 image preprocessing 'pil': expected maxtext or hf") != std::string::npos);
  t = run_failing("vision --weights " + dir + "/hf");
  CHECK(t.find("vision needs --image FILE") != std::string::npos);
}
