// tests/tools/test_cli_audio.cpp: `maxtext audio` and --audio for logits / generate (tools/cli_audio.cpp) against the
// float64 fixtures: qwen3_omni_audio (tests/reference/qwen3_omni_audio_reference.py: the features and the encoder's
// soft tokens of two clips, MaxText's form and Hugging Face's) and qwen3_omni_mm_model
// (tests/reference/qwen3_omni_thinker_reference.py: a Qwen3-Omni thinker with a clip and a picture in the prompt).
// Tolerances as the library's tests: features within one float32 step (2.4e-7), soft tokens at test::tol::f32_logits.
// The logits come through the program's own encoders, whose rows differ from the float64 ones by ~2e-6: bound
// 1e-5 x max(1, max |logit|), as the Qwen3.5 pictures' CLI test; the greedy tokens exactly.
#include <catch2/catch.hpp>

#include <cstdio>
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

std::string temp(const std::string& name) {
  return (std::filesystem::current_path() / ("cli_audio_" + std::to_string(::getpid()) + "_" + name)).string();
}

void need_audio() {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  const std::string probe = test::run_cli_failing("audio");
  if (probe.find("audio is not compiled") != std::string::npos) test::skip("audio is not compiled into the program");
}

}  // namespace

TEST_CASE("maxtext audio: sound files to Qwen3-Omni soft tokens and features equal the float64 reference",
          "[cli][audio]") {
  need_audio();
  const std::string dir = test::fixtures_dir() + "/qwen3_omni_audio";
  const std::string out = temp("tokens.npy"), feats = temp("features.npy");
  std::string text = test::run_cli("audio --weights " + dir + "/hf --audio " + dir + "/audio.wav --out " + out +
                                   " --features-out " + feats);
  CHECK(text.find("200 frames -> 26 soft tokens of 24") != std::string::npos);
  test::expect_close(io::read_npy(out), test::npy(dir + "/encoder_out.npy"), test::tol::f32_logits, "audio --out");
  test::expect_close(io::read_npy(feats), test::npy(dir + "/features.npy"), testing::Tolerance{0.0, 2.4e-7},
                     "audio --features-out");
  text = test::run_cli("audio --weights " + dir + "/hf --audio-form hf --audio " + dir + "/audio_2.wav --out " + out);
  CHECK(text.find("77 frames -> 10 soft tokens of 24") != std::string::npos);
  test::expect_close(io::read_npy(out), test::npy(dir + "/encoder_out_hf_2.npy"), test::tol::f32_logits,
                     "audio --audio-form hf --out");
  text = test::run_cli("audio --weights " + dir + "/hf --audio " + dir + "/audio.wav --audio " + dir +
                       "/audio_2.wav --out " + out);
  CHECK(io::read_npy(out).shape == std::vector<std::int64_t>{39, 24});  // 26 + 13 tokens, in order
  std::remove(out.c_str());
  std::remove(feats.c_str());

  // Refusals, by name.
  std::string t = test::run_cli_failing("audio --weights " + dir + "/hf");
  CHECK(t.find("audio needs --audio FILE") != std::string::npos);
  t = test::run_cli_failing("audio --weights " + dir + "/hf --audio " + dir + "/no-such.wav");
  CHECK(t.find("no-such.wav] cannot open the sound file") != std::string::npos);
  t = test::run_cli_failing("audio --weights " + dir + "/hf --audio " + dir + "/meta.json");
  CHECK(t.find("meta.json] not a sound file libsndfile can read") != std::string::npos);
  t = test::run_cli_failing("audio --weights " + dir + "/hf --audio " + dir + "/audio.wav --audio-form whisper");
  CHECK(t.find("--audio-form 'whisper'") != std::string::npos);
  t = test::run_cli_failing("audio --weights " + dir + "/hf --audio " + dir + "/audio.wav --audio-fromat hf");
  CHECK(t.find("unknown option --audio-fromat (did you mean --audio-form?") != std::string::npos);
  t = test::run_cli_failing("audio --weights " + test::fixtures_dir() + "/qwen3_5_mm_model/hf --audio " + dir + "/audio.wav");
  CHECK(t.find("no thinker_config.audio_config") != std::string::npos);
}

TEST_CASE("maxtext logits|generate --audio [--image]: a Qwen3-Omni checkpoint's clip and picture enter its thinker "
          "as the float64 reference merges them", "[cli][audio][qwen3_omni]") {
  need_audio();
  const std::string dir = test::fixtures_dir() + "/qwen3_omni_mm_model";
  const std::string w = " --weights " + dir + "/hf --image-preprocess hf";
  const std::string media = " --audio " + dir + "/audio.wav --image " + dir + "/image.png";
  const std::string out = temp("logits.npy");
  // <|audio_start|> 100 <|audio_pad|> 102 <|audio_end|> 101, <|vision_start|> 103 <|image_pad|> 105 <|vision_end|> 104.
  const std::string tokens = " --tokens 48,14,81,15,100,102,101,54,11,56,103,105,104,21,16,33,77,69,42";
  test::run_cli("logits" + w + tokens + media + " --out " + out);
  test::expect_close_scaled(io::read_npy(out), test::npy(dir + "/logits.npy").reshaped({1, 42, 128}), 1e-5,
                            "qwen3-omni logits --audio --image");
  const std::string text = test::run_cli("generate" + w + tokens + media + " --max-new-tokens 4");
  CHECK(text.find("tokens[0]: 0,48,48,48") != std::string::npos);
  // Sound alone: text positions.
  test::run_cli("logits --weights " + dir + "/hf --tokens 48,14,81,15,100,102,101,54,11,56,21,16,33,77,69,42 --audio " +
                dir + "/audio.wav --out " + out);
  test::expect_close_scaled(io::read_npy(out), test::npy(dir + "/logits_audio_only.npy").reshaped({1, 28, 128}), 1e-5,
                            "qwen3-omni logits --audio");
  std::remove(out.c_str());

  std::string t = test::run_cli_failing("generate --weights " + dir + "/hf --tokens 1,2,3 --audio " + dir + "/audio.wav");
  CHECK(t.find("the prompt has 0 <|audio_pad|> marker(s) for 1 clip(s)") != std::string::npos);
  t = test::run_cli_failing("generate --weights " + dir + "/hf --tokens 1,102,101 --audio " + dir + "/audio.wav");
  CHECK(t.find("does not follow an <|audio_start|>") != std::string::npos);
  t = test::run_cli_failing("generate --weights " + dir + "/hf --tokens 1,2 --audio-form hf");
  CHECK(t.find("--audio-form needs --audio") != std::string::npos);
  t = test::run_cli_failing("generate --weights " + test::fixtures_dir() + "/qwen3_5_mm_model/hf --tokens 1,2 --audio " + dir +
                  "/audio.wav");
  CHECK(t.find("no thinker_config.audio_config") != std::string::npos);
}
