// tests/models/test_qwen3_omni_audio.cpp: Qwen3-Omni's audio path: sound files (io/audio.hpp: libsndfile, libsoxr),
// the log-mel features (families/qwen/audio_processor.hpp) and the audio encoder + projector (families/qwen/audio.hpp)
// against the float64 re-statement tests/reference/qwen3_omni_audio_reference.py (fixture qwen3_omni_audio: two
// 16 kHz clips of 1.31 s and 0.77 s, a 2-layer encoder of width 32 with 4 heads, 8 conv channels, output 24; MaxText's
// semantics and Hugging Face's), on the test's backend and the reference backend.
// Tolerances:
//   - features: our double computation rounded to float32 against the oracle rounded to float32: the two double
//     values differ by ~1e-13 (FFT order), so the floats differ by at most one unit in the last place; the features
//     lie in [-2, 2], where that is 2.4e-7 (atol).
//   - encoder: f32 against f64, as the vision towers: the residual stream within rtol 1e-5, atol 8e-6 per layer; the
//     projector's output at test::tol::f32_logits. The controls in meta.json (no positions 4.0, one attention over all
//     tokens 1.7, HTK mel 1.6, no clamp 1.2, tanh vs erf gelu 1.9e-3) are all far outside.
#include <catch2/catch.hpp>

#include <sndfile.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/qwen/audio.hpp"
#include "maxtext/families/qwen/audio_processor.hpp"
#include "maxtext/families/qwen/sounds.hpp"
#include "maxtext/io/audio.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

std::string dir() { return test::fixtures_dir() + "/qwen3_omni_audio"; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

Tensor<float, 2> npy2(const std::string& path) {
  const AnyTensor t = test::npy(path);
  REQUIRE(t.rank() == 2);
  return t.to<float, 2>({t.shape[0], t.shape[1]});
}

/// Columns [0, n) of x.
Tensor<float, 2> first_columns(const Tensor<float, 2>& x, std::int64_t n) {
  Tensor<float, 2> y({x.dim(0), n});
  for (std::int64_t r = 0; r < x.dim(0); ++r) {
    for (std::int64_t c = 0; c < n; ++c) y(r, c) = x(r, c);
  }
  return y;
}

/// A sound file written by libsndfile (format e.g. SF_FORMAT_WAV | SF_FORMAT_PCM_16), channels interleaved.
std::vector<std::uint8_t> write_sound(const std::vector<float>& interleaved, int channels, int rate, int format) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("maxtext-test-sound-" + std::to_string(::getpid()) + ".wav")).string();
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  REQUIRE(f != nullptr);
  sf_command(f, SFC_SET_CLIPPING, nullptr, SF_TRUE);
  REQUIRE(sf_writef_float(f, interleaved.data(), static_cast<sf_count_t>(interleaved.size()) / channels) ==
          static_cast<sf_count_t>(interleaved.size()) / channels);
  sf_close(f);
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return bytes;
}

template <class Be>
using Tower = layers::Qwen3OmniAudioEncoder<Policy<Be, float>>;

template <class Be>
void check_encoder(bool hf_weights) {
  using P = Policy<Be, float>;
  layers::Qwen3OmniAudioConfig c = layers::Qwen3OmniAudioConfig::from_hf(read_json(dir() + "/hf/config.json"));
  CHECK(c.d_model == 32);
  CHECK(c.num_layers == 2);
  CHECK(c.n_window_infer == 100);
  CHECK(c.tokens(200) == 26);
  CHECK(c.tokens(130) == 17);
  CHECK(c.tokens(77) == 10);
  const Tower<Be> tower(c);
  Be be;
  const io::TensorMap tensors = hf_weights
                                    ? io::qwen3_omni_audio_from_hf(io::read_safetensors(dir() + "/hf/model.safetensors"), c)
                                    : io::read_safetensors(dir() + "/model.safetensors");
  const auto params = models::load_layer_params<P>(tower, tensors, be);
  const std::string what = std::string("qwen3-omni audio") + (hf_weights ? " (hf weights)" : "") + " on " + Be::name;
  const std::string enc = "audio_encoder.Qwen3OmniAudioEncoder_0";
  const testing::Tolerance stream{1e-5, 8e-6};

  // MaxText's semantics, from MaxText's features, with the intermediates by MaxText's names.
  layers::Capture cap;
  for (const char* n : {".conv_out", ".layers_0", ".layers_1", ".layernorm_post"}) cap.request(enc + n);
  const Tensor<float, 2> out = tower.encode(be, params, npy2(dir() + "/features.npy"), &cap);
  test::expect_close(cap.at(enc + ".conv_out"), test::npy(dir() + "/conv_out.npy"), stream, what + " conv_out");
  test::expect_close(cap.at(enc + ".layers_0"), test::npy(dir() + "/layer_0.npy"), stream, what + " layer 0");
  test::expect_close(cap.at(enc + ".layers_1"), test::npy(dir() + "/layer_1.npy"), stream, what + " layer 1");
  test::expect_close(cap.at(enc + ".layernorm_post"), test::npy(dir() + "/ln_post.npy"), stream, what + " ln_post");
  test::expect_close(AnyTensor::from(out), test::npy(dir() + "/encoder_out.npy"), test::tol::f32_logits, what + " out");
  test::expect_close(AnyTensor::from(tower.encode(be, params, npy2(dir() + "/features_2.npy"))),
                     test::npy(dir() + "/encoder_out_2.npy"), test::tol::f32_logits, what + " out (clip 2)");

  // Hugging Face's semantics: exact gelu, a partial last chunk, attention windows of n_window_infer frames.
  layers::Qwen3OmniAudioConfig h = c;
  h.form = layers::AudioForm::hf;
  const Tower<Be> hf_tower(h);
  test::expect_close(AnyTensor::from(hf_tower.encode(be, params, first_columns(npy2(dir() + "/features.npy"), 130))),
                     test::npy(dir() + "/encoder_out_hf.npy"), test::tol::f32_logits, what + " hf out (100 + 30 frames)");
  layers::Capture hcap;
  hcap.request(enc + ".conv_out");
  test::expect_close(AnyTensor::from(hf_tower.encode(be, params, npy2(dir() + "/features_hf_2.npy"), &hcap)),
                     test::npy(dir() + "/encoder_out_hf_2.npy"), test::tol::f32_logits, what + " hf out (77 frames)");
  test::expect_close(hcap.at(enc + ".conv_out"), test::npy(dir() + "/conv_out_hf_2.npy"), stream, what + " hf conv_out");
}

}  // namespace

TEST_CASE("qwen3-omni audio: sound files decode as soundfile does", "[qwen3_omni_audio]") {
  const io::Audio a = io::read_audio(dir() + "/audio.wav");
  CHECK(a.sample_rate == 16000);
  CHECK(a.channels == 1);
  REQUIRE(a.samples.size() == 20900);
  // int16 PCM over 32768, exactly (the reference's read_wav): every sample is a multiple of 2^-15 in [-1, 1).
  for (const float v : a.samples) {
    CHECK(v * 32768.0f == std::round(v * 32768.0f));
    CHECK(v >= -1.0f);
    CHECK(v < 1.0f);
  }
  CHECK(io::load_audio(dir() + "/audio_2.wav").size() == 12345);

  // Two channels of different amplitudes at 44.1 kHz: averaged to mono, then resampled to 16 kHz by soxr. A 440 Hz
  // sine stays that sine (amplitude (0.5 + 0.3) / 2) within 1e-3 away from the ends (soxr HQ: < 0.01 dB passband
  // ripple, int16 steps of 3e-5); a wrong rate, channel mix or scale is off by 0.1 or more.
  const int rate = 44100;
  const double pi = 3.14159265358979323846;
  std::vector<float> stereo;
  for (int i = 0; i < rate; ++i) {
    const double s = std::sin(2.0 * pi * 440.0 * i / rate);
    stereo.push_back(static_cast<float>(0.5 * s));
    stereo.push_back(static_cast<float>(0.3 * s));
  }
  const auto bytes = write_sound(stereo, 2, rate, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  const io::Audio st = io::decode_audio(bytes, "stereo.wav");
  CHECK(st.channels == 2);
  CHECK(st.sample_rate == rate);
  const std::vector<float> mono = io::resample_audio(st.samples, rate, 16000);
  REQUIRE(mono.size() == 16000);
  double worst = 0.0;
  for (int i = 400; i < 15600; ++i) {
    worst = std::max(worst, std::abs(mono[static_cast<std::size_t>(i)] - 0.4 * std::sin(2.0 * pi * 440.0 * i / 16000.0)));
  }
  CHECK(worst < 1e-3);
  INFO("resampled 44.1 kHz stereo sine, worst error " << worst);
  CHECK(io::resample_audio(mono, 16000, 16000) == mono);
}

TEST_CASE("qwen3-omni audio: bad sound files are refused by name", "[qwen3_omni_audio]") {
  const auto refused = [](const std::vector<std::uint8_t>& bytes, const std::string& needle, const io::AudioLimits& l = {}) {
    INFO("expecting '" << needle << "'");
    CHECK_THROWS_WITH(io::decode_audio(bytes, "bad.wav", l), Catch::Contains("bad.wav") && Catch::Contains(needle));
  };
  refused({}, "empty file");
  refused({'n', 'o', 't', ' ', 'a', ' ', 's', 'o', 'u', 'n', 'd'}, "not a sound file");
  std::vector<float> ramp(3000);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i % 100) / 200.0f;
  const auto wav = write_sound(ramp, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  REQUIRE(io::decode_audio(wav, "ok.wav").samples.size() == 3000);
  refused(std::vector<std::uint8_t>(wav.begin(), wav.begin() + 30), "not a sound file");  // header cut
  io::AudioLimits small;
  small.max_samples = 1000;
  refused(wav, "AudioLimits::max_samples", small);
  small = {};
  small.max_channels = 1;
  refused(write_sound(std::vector<float>(200, 0.1f), 2, 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16), "channels", small);
  std::vector<float> nan_samples(100, 0.25f);
  nan_samples[42] = std::numeric_limits<float>::quiet_NaN();
  refused(write_sound(nan_samples, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT), "not a finite number");
  // A WAV header with no data.
  refused(write_sound({}, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16), "no samples");
  CHECK_THROWS_WITH(io::read_audio("/nonexistent/no-such-file.wav"), Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(io::resample_audio(ramp, 0, 16000), Catch::Contains("rates must be"));
}

TEST_CASE("qwen3-omni audio: log-mel features match the float64 oracle", "[qwen3_omni_audio]") {
  const models::LogMelConfig c = models::LogMelConfig::from_hf(read_json(dir() + "/hf/preprocessor_config.json"));
  CHECK(c.num_mel_bins == 128);
  CHECK(c.f_max == 8000.0);
  const testing::Tolerance one_ulp{0.0, 2.4e-7};
  const auto a = io::load_audio(dir() + "/audio.wav");
  const auto b = io::load_audio(dir() + "/audio_2.wav");
  test::expect_close(AnyTensor::from(models::log_mel_features(a, c)), test::npy(dir() + "/features.npy"), one_ulp,
                     "features (MaxText: padded to 2 s)");
  test::expect_close(AnyTensor::from(models::log_mel_features(b, c)), test::npy(dir() + "/features_2.npy"), one_ulp,
                     "features 2 (MaxText: padded to 1 s)");
  test::expect_close(AnyTensor::from(models::log_mel_features(b, c, models::AudioPadding::none)),
                     test::npy(dir() + "/features_hf_2.npy"), one_ulp, "features 2 (HF: unpadded)");
  // HF's features of the first clip are MaxText's first 130 frames (the reference asserts it in float64).
  test::expect_close(AnyTensor::from(models::log_mel_features(a, c, models::AudioPadding::none)),
                     AnyTensor::from(first_columns(npy2(dir() + "/features.npy"), 130)), one_ulp, "features (HF)");
  // The filter bank's first filter starts at bin 1 (meta.json: mel_filter_first_nonzero_bin_of_filter0).
  const auto fb = models::mel_filter_bank(c);
  CHECK(fb[0] == 0.0);
  CHECK(fb[static_cast<std::size_t>(c.num_mel_bins)] > 0.0);

  CHECK_THROWS_WITH(models::log_mel_features(std::vector<float>(100, 0.0f), c, models::AudioPadding::none),
                    Catch::Contains("at least"));
  CHECK_THROWS_WITH(models::log_mel_features(std::vector<float>(20000, 0.0f), c, models::AudioPadding::whole_seconds, 1.0),
                    Catch::Contains("more than the limit"));
  nlohmann::json bad = read_json(dir() + "/hf/preprocessor_config.json");
  bad["dither"] = 0.5;
  CHECK_THROWS_WITH(models::LogMelConfig::from_hf(bad), Catch::Contains("dither"));
}

TEST_CASE("qwen3-omni audio: the encoder matches the float64 re-statement", "[qwen3_omni_audio]") {
  check_encoder<test::Backend>(false);
  check_encoder<test::Backend>(true);
  if constexpr (test::kDefaultBackend) check_encoder<reference::Backend>(false);
}

TEST_CASE("qwen3-omni audio: from the WAV file to the soft tokens", "[qwen3_omni_audio]") {
  using Be = test::Backend;
  using P = Policy<Be, float>;
  const auto c = layers::Qwen3OmniAudioConfig::from_hf(read_json(dir() + "/hf/config.json"));
  const Tower<Be> tower(c);
  Be be;
  const auto params = models::load_layer_params<P>(tower, io::read_safetensors(dir() + "/model.safetensors"), be);
  const models::LogMelConfig mel = models::LogMelConfig::from_hf(read_json(dir() + "/hf/preprocessor_config.json"));
  const auto feats = models::log_mel_features(io::load_audio(dir() + "/audio.wav"), mel);
  test::expect_close(AnyTensor::from(tower.encode(be, params, feats)), test::npy(dir() + "/encoder_out.npy"),
                     test::tol::f32_logits, "audio.wav -> soft tokens");

  // Bad input: the wrong number of mel bins, frames that are not whole chunks for MaxText's form, NaN, wrong weights.
  CHECK_THROWS_WITH(tower.encode(be, params, Tensor<float, 2>({64, 100})), Catch::Contains("num_mel_bins"));
  CHECK_THROWS_WITH(tower.encode(be, params, first_columns(feats, 130)), Catch::Contains("whole chunks"));
  Tensor<float, 2> nan = feats;
  nan(3, 7) = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(tower.encode(be, params, nan), Catch::Contains("not a finite number"));
  io::TensorMap hf = io::read_safetensors(dir() + "/hf/model.safetensors");
  hf.tensors.erase("thinker.audio_tower.proj2.bias");
  hf.add("thinker.audio_tower.extra.weight", AnyTensor::from(Tensor<float, 1>({3})));
  CHECK_THROWS_WITH(io::qwen3_omni_audio_from_hf(hf, c),
                    Catch::Contains("missing tensor thinker.audio_tower.proj2.bias") &&
                        Catch::Contains("unexpected tensor thinker.audio_tower.extra.weight"));
  nlohmann::json cfg = read_json(dir() + "/hf/config.json");
  cfg["thinker_config"]["audio_config"]["activation_function"] = "relu";
  CHECK_THROWS_WITH(layers::Qwen3OmniAudioConfig::from_hf(cfg), Catch::Contains("activation_function"));
  cfg["thinker_config"]["audio_config"]["activation_function"] = "gelu";
  cfg["thinker_config"]["audio_config"]["encoder_attention_heads"] = 5;
  CHECK_THROWS_WITH(layers::Qwen3OmniAudioConfig::from_hf(cfg), Catch::Contains("encoder_attention_heads_for_audio"));
}

TEST_CASE("qwen3-omni audio: a checkpoint's encoder, and prompts expanded with text positions", "[qwen3_omni_audio]") {
  using P = Policy<test::Backend, float>;
  const models::Qwen3OmniSounds<P> snd(test::Backend{}, dir() + "/hf");
  CHECK(snd.audio_tokens().audio_start == 151669);
  CHECK(snd.audio_tokens().audio == 151675);
  CHECK(snd.sampling_rate() == 16000);
  const Tensor<float, 2> clip = snd.encode(io::load_audio(dir() + "/audio.wav", snd.sampling_rate()));
  test::expect_close(AnyTensor::from(clip), test::npy(dir() + "/encoder_out.npy"), test::tol::f32_logits,
                     "Qwen3OmniSounds: audio.wav -> soft tokens");
  const models::Qwen3OmniSounds<P> hf(test::Backend{}, dir() + "/hf/model.safetensors", layers::AudioForm::hf);
  test::expect_close(AnyTensor::from(hf.encode(io::load_audio(dir() + "/audio_2.wav"))),
                     test::npy(dir() + "/encoder_out_hf_2.npy"), test::tol::f32_logits,
                     "Qwen3OmniSounds (HF form): audio_2.wav -> soft tokens");

  // Text, a clip of 26 tokens, text: every token at a text position, in order.
  const std::int32_t S = 151669, A = 151675, E = 151670;
  const models::MediaPrompt p = snd.expand(models::text_prompt({7, 8, S, A, E, 9}), {clip});
  REQUIRE(p.ids.size() == 31);
  CHECK(p.ids[2] == S);
  CHECK(p.ids[3] == A);
  CHECK(p.ids[28] == A);
  CHECK(p.ids[29] == E);
  for (std::int64_t t = 0; t < 31; ++t) {
    CHECK(p.mask(0, t) == (t >= 3 && t < 29 ? 1 : 0));
    for (int r = 0; r < 3; ++r) CHECK(p.positions(r, t) == t);
  }
  REQUIRE(p.embeddings.dim(0) == 26);
  REQUIRE(p.embeddings.dim(1) == 24);
  CHECK(p.embeddings(25, 23) == clip(25, 23));

  // After a picture (3-D positions, rows of 2 x 24 with a deepstack column block): the clip follows the largest
  // position, its rows are padded with zeros, later positions move up by 25.
  models::MediaPrompt pic;
  pic.ids = {7, 60, 62, 62, 61, S, A, E, 9};
  pic.mask = Tensor<std::int32_t, 2>({1, 9});
  for (int t = 0; t < 9; ++t) pic.mask(0, t) = 0;
  pic.mask(0, 2) = pic.mask(0, 3) = 1;
  pic.positions = Tensor<std::int32_t, 2>({3, 9});
  const std::int32_t rows3[3][9] = {{0, 1, 2, 2, 4, 5, 6, 7, 8}, {0, 1, 2, 2, 4, 5, 6, 7, 8}, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < 9; ++t) pic.positions(r, t) = rows3[r][t];
  }
  pic.embeddings = Tensor<float, 2>({2, 48});
  for (std::int64_t i = 0; i < pic.embeddings.size(); ++i) pic.embeddings.data()[i] = 1.0f + static_cast<float>(i);
  const models::MediaPrompt q = snd.expand(pic, {clip});
  REQUIRE(q.ids.size() == 34);
  REQUIRE(q.embeddings.dim(0) == 28);
  REQUIRE(q.embeddings.dim(1) == 48);
  CHECK(q.embeddings(1, 47) == pic.embeddings(1, 47));
  CHECK(q.embeddings(2, 0) == clip(0, 0));
  CHECK(q.embeddings(2, 24) == 0.0f);
  CHECK(q.positions(1, 3) == 2);
  CHECK(q.positions(2, 3) == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(q.positions(r, 6) == 6);    // the clip's first token
    CHECK(q.positions(r, 31) == 31);  // its last
    CHECK(q.positions(r, 32) == 32);  // <|audio_end|>: 7 + 25
    CHECK(q.positions(r, 33) == 33);
  }

  // Malformed prompts and mismatched models, by name.
  CHECK_THROWS_WITH(snd.expand(models::text_prompt({7, A, E}), {clip}), Catch::Contains("does not follow an <|audio_start|>"));
  CHECK_THROWS_WITH(snd.expand(models::text_prompt({S, A, E, S, A, E}), {clip}), Catch::Contains("2 <|audio_pad|> marker(s) for 1"));
  CHECK_THROWS_WITH(snd.expand(models::text_prompt({S, A, E}), {Tensor<float, 2>({4, 16})}), Catch::Contains("expected [tokens > 0, 24]"));
  CHECK_THROWS_WITH(snd.expand(p, {clip}), Catch::Contains("26 <|audio_pad|> marker(s) for 1"));
  Config text;
  text.emb_dim = 32;
  text.vocab_size = 200000;
  CHECK_THROWS_WITH(snd.check_text_model(text), Catch::Contains("output_dim"));
  text.emb_dim = 24;
  text.vocab_size = 1000;
  CHECK_THROWS_WITH(snd.check_text_model(text), Catch::Contains("outside the text model's vocabulary"));
}
