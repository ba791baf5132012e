// tools/cli_audio.cpp: `maxtext audio`, and --audio for `logits` / `generate` / `chat`: sound files (any format
// libsndfile reads, resampled to 16 kHz by libsoxr) through a Qwen3-Omni checkpoint's audio encoder (docs/audio.md):
// log-mel features as MaxText's processor computes them (padded to whole seconds; --audio-form hf: Hugging Face's, no
// padding, its encoder formulas), the encoder and projector (families/qwen/audio.hpp) into the text model's
// embedding space. `maxtext audio` writes the soft tokens (--out) and the features (--features-out); with a text
// model, each <|audio_pad|> marker of the prompt (after an <|audio_start|>; llama.cpp's <__media__> is rewritten to
// <|audio_start|><|audio_pad|><|audio_end|> when no --image is given) takes the next clip, at text positions, after
// the pictures of --image are expanded (families/qwen/sounds.hpp).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/qwen/sounds.hpp"
#include "maxtext/io/audio.hpp"
#include "maxtext/io/npy.hpp"

namespace maxtext::cli {

namespace {

using AudioPolicy = Policy<cpu::Backend, float>;
using Sounds = models::Qwen3OmniSounds<AudioPolicy>;

layers::AudioForm audio_form(const Args& a) {
  const std::string f = a.get("audio-form", "maxtext");
  MAXTEXT_CHECK(f == "maxtext" || f == "hf", ArgumentError, "--audio-form '", f,
                "': maxtext (MaxText's processor and encoder, the default) or hf (Hugging Face's)");
  return f == "hf" ? layers::AudioForm::hf : layers::AudioForm::maxtext;
}

std::unique_ptr<const Sounds> open_sounds(const Args& a) {
  MAXTEXT_CHECK(a.has("weights"), ArgumentError, a.command, " with --audio needs --weights (a Hugging Face Qwen3-Omni "
                "checkpoint with its audio encoder)");
  cpu::Options opt;
  opt.threads = static_cast<int>(a.integer("threads", 0));
  MAXTEXT_CHECK(opt.threads >= 0, ArgumentError, "--threads must be >= 0, found ", opt.threads);
  return std::make_unique<const Sounds>(cpu::Backend(opt), a.get("weights"), audio_form(a));
}

std::vector<std::string> audio_files(const Args& a) {
  auto files = a.all.count("audio") ? a.all.at("audio") : std::vector<std::string>{};
  MAXTEXT_CHECK(!files.empty(), ArgumentError, a.command, " needs --audio FILE (WAV, FLAC, Ogg, MP3, ...; repeat it for more)");
  return files;
}

/// Each file decoded, resampled and encoded: [tokens, output_dim] per clip.
std::vector<Tensor<float, 2>> encode_files(const Sounds& s, const std::vector<std::string>& files,
                                           std::vector<Tensor<float, 2>>* features = nullptr) {
  std::vector<Tensor<float, 2>> out;
  for (const auto& f : files) {
    const std::vector<float> x = io::load_audio(f, s.sampling_rate());
    Tensor<float, 2> feats = s.features(x);
    out.push_back(s.encode_features(feats));
    if (features != nullptr) features->push_back(std::move(feats));
  }
  return out;
}

/// The clips' rows one after another: [tokens of all, width].
Tensor<float, 2> concat_rows(const std::vector<Tensor<float, 2>>& clips) {
  std::int64_t n = 0;
  for (const auto& c : clips) n += c.dim(0);
  Tensor<float, 2> rows({n, clips.empty() ? 0 : clips.front().dim(1)});
  float* at = rows.data();
  for (const auto& c : clips) at = std::copy(c.data(), c.data() + c.size(), at);
  return rows;
}

/// Pictures (or none) and then the clips of --audio, for one prompt.
class PromptSoundsAndPictures final : public PromptPictures {
 public:
  PromptSoundsAndPictures(const Args& a, const Config& cfg, std::unique_ptr<PromptPictures> pictures)
      : pictures_(std::move(pictures)) {
    const auto files = audio_files(a);
    s_ = open_sounds(a);
    s_->check_text_model(cfg);
    MAXTEXT_CHECK(cfg.use_mrope, ArgumentError, "--audio: the text model (decoder_block '", cfg.decoder_block,
                  "') has no use_mrope: Qwen3-Omni's thinker is qwen3_moe with MRoPE");
    const auto t0 = std::chrono::steady_clock::now();
    clips_ = encode_files(*s_, files);
    const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const Tensor<float, 2> rows = concat_rows(clips_);
    if (a.has("audio-embeddings-out")) io::write_npy(a.get("audio-embeddings-out"), AnyTensor::from(rows));
    std::fprintf(stderr, "audio: %zu clip(s) encoded to %lld soft tokens in %.2f s (audio encoder loaded in %.2f s)\n",
                 files.size(), static_cast<long long>(rows.dim(0)), encode_s, s_->load_seconds());
  }
  std::int64_t count() const override { return pictures_ ? pictures_->count() : 0; }
  PromptImages expand(const std::vector<std::int32_t>& ids, bool all) const override {
    PromptImages p = pictures_ ? pictures_->expand(ids, all) : models::text_prompt(ids);
    MAXTEXT_CHECK(p.positions.dim(0) == 3, ArgumentError, "--audio with these pictures: sound goes to a Qwen3-Omni "
                  "model (its pictures come with MRoPE positions)");
    return s_->expand(p, clips_, all);
  }
  std::vector<std::size_t> crops() const override { return pictures_ ? pictures_->crops() : std::vector<std::size_t>{}; }

 private:
  std::unique_ptr<PromptPictures> pictures_;
  std::unique_ptr<const Sounds> s_;
  std::vector<Tensor<float, 2>> clips_;
};

}  // namespace

std::unique_ptr<PromptPictures> with_prompt_sounds(const Args& a, const Config& cfg,
                                                   std::unique_ptr<PromptPictures> pictures) {
  return std::make_unique<PromptSoundsAndPictures>(a, cfg, std::move(pictures));
}

int cmd_audio(const Args& a) {
  const auto files = audio_files(a);
  const auto s = open_sounds(a);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor<float, 2>> features;
  const auto clips = encode_files(*s, files, &features);
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (std::size_t f = 0; f < files.size(); ++f) {
    const Tensor<float, 2>& c = clips[f];
    double sum = 0.0, ss = 0.0;
    for (std::int64_t i = 0; i < c.size(); ++i) {
      sum += c.data()[i];
      ss += static_cast<double>(c.data()[i]) * c.data()[i];
    }
    const auto m = static_cast<double>(c.size());
    std::printf("%s: %lld frames -> %lld soft tokens of %lld, mean %.6g, rms %.6g\n", files[f].c_str(),
                static_cast<long long>(features[f].dim(1)), static_cast<long long>(c.dim(0)),
                static_cast<long long>(c.dim(1)), sum / m, std::sqrt(ss / m));
  }
  if (a.has("out")) {
    const Tensor<float, 2> rows = concat_rows(clips);
    io::write_npy(a.get("out"), AnyTensor::from(rows));
    std::printf("wrote %s [%lld, %lld] float32 (the clips' soft tokens in order)\n", a.get("out").c_str(),
                static_cast<long long>(rows.dim(0)), static_cast<long long>(rows.dim(1)));
  }
  if (a.has("features-out")) {
    MAXTEXT_CHECK(files.size() == 1, ArgumentError, "--features-out: one --audio file at a time (found ", files.size(), ")");
    io::write_npy(a.get("features-out"), AnyTensor::from(features[0]));
    std::printf("wrote %s [%lld, %lld] float32 (log-mel features)\n", a.get("features-out").c_str(),
                static_cast<long long>(features[0].dim(0)), static_cast<long long>(features[0].dim(1)));
  }
  std::fprintf(stderr, "audio: load %.2f s, features + encode %.2f s (%zu clips)\n", s->load_seconds(), encode_s,
               files.size());
  return 0;
}

}  // namespace maxtext::cli
