// families/qwen/sounds.hpp: sound into a Qwen3-Omni model, as an application embeds it: the audio encoder loaded once
// from the checkpoint, each clip turned into log-mel features (audio_processor.hpp) and encoded (audio.hpp) to its
// soft tokens, and prompts whose <|audio_pad|> markers (each after an <|audio_start|>) are expanded to each clip's
// tokens as a MediaPrompt. Sound takes text positions: MaxText's and Hugging Face's get_rope_index give an audio span
// (outside a video) consecutive positions on all three MRoPE rows, and the text after it goes on from there.
//
//   models::Qwen3OmniSounds<Policy<cpu::Backend, float>> snd(cpu::Backend{}, "Qwen3-Omni-30B-A3B-Instruct/");
//   const auto clip = snd.encode(io::load_audio("question.wav"));   // [tokens, text width]
//   const models::MediaPrompt p = snd.expand(models::text_prompt(ids), {clip});
//   session.sync(p.ids, &p.mask, &p.embeddings, &p.positions);
//
// Prompts with pictures too: expand the pictures first (Qwen3Pictures::expand), then the sound of that MediaPrompt;
// the sound's rows are padded with zeros to the pictures' width (their deepstack columns: deepstack adds only at the
// pictures' tokens, as Hugging Face's visual_pos_masks does).
//
// MaxText's processor pads the sound to whole seconds (13 tokens a second, AudioForm::maxtext, the default) and its
// encoder follows MaxText's formulas; AudioForm::hf is Hugging Face's (no padding, exact gelu, its attention windows).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/qwen/audio.hpp"
#include "maxtext/families/qwen/audio_processor.hpp"
#include "maxtext/families/qwen/checkpoint_json.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::models {

/// The ids a Qwen3-Omni prompt marks sound with (config.json thinker_config audio_start_token_id, audio_end_token_id,
/// audio_token_id; Qwen3-Omni's when absent).
struct Qwen3AudioTokens {
  std::int32_t audio_start = 151669;  ///< <|audio_start|>
  std::int32_t audio_end = 151670;    ///< <|audio_end|>
  std::int32_t audio = 151675;        ///< <|audio_pad|>
};

/// A text-only prompt as a MediaPrompt: no soft tokens, text positions 0..T-1 on the three MRoPE rows.
inline MediaPrompt text_prompt(std::vector<std::int32_t> ids) {
  MediaPrompt p;
  const auto T = static_cast<std::int64_t>(ids.size());
  p.ids = std::move(ids);
  p.mask = Tensor<std::int32_t, 2>({1, T});
  for (std::int64_t t = 0; t < T; ++t) p.mask(0, t) = 0;
  p.embeddings = Tensor<float, 2>({0, 1});
  p.positions = Tensor<std::int32_t, 2>({3, T});
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t t = 0; t < T; ++t) p.positions(r, t) = static_cast<std::int32_t>(t);
  }
  return p;
}

/// The Qwen3-Omni audio encoder of a checkpoint, loaded once. P: the encoder's policy (float activations).
template <class P>
class Qwen3OmniSounds {
 public:
  using B = typename P::backend;
  using Tower = layers::Qwen3OmniAudioEncoder<P>;

  /// The audio encoder of a Hugging Face Qwen3-Omni checkpoint (a directory, a safetensors file or an index, with
  /// config.json beside it: thinker_config.audio_config and the audio token ids; thinker.audio_tower.* tensors, or a
  /// MaxText tree's audio_encoder.*). The feature extractor's settings from preprocessor_config.json when it is there.
  Qwen3OmniSounds(B be, const std::string& weights, layers::AudioForm form = layers::AudioForm::maxtext)
      : be_(std::move(be)) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string cfg_path = hf_config_beside(weights);
    MAXTEXT_CHECK(!cfg_path.empty(), IoError, "[qwen3-omni audio] no config.json beside ", weights,
                  " (a Hugging Face Qwen3-Omni directory, safetensors file or index)");
    const nlohmann::json j = read_json_object(cfg_path, "qwen3-omni audio");
    ac_ = layers::Qwen3OmniAudioConfig::from_hf(j, cfg_path);
    ac_.form = form;
    ac_.validate();
    const auto id = [&](const char* key, std::int32_t& out) { read_token_id(j, key, out, cfg_path, "qwen3-omni audio"); };
    id("audio_start_token_id", ids_.audio_start);
    id("audio_end_token_id", ids_.audio_end);
    id("audio_token_id", ids_.audio);
    MAXTEXT_CHECK(ids_.audio_start != ids_.audio && ids_.audio_end != ids_.audio && ids_.audio_start != ids_.audio_end,
                  IoError, "[qwen3-omni audio] ", cfg_path, ": audio_start_token_id ", ids_.audio_start,
                  ", audio_end_token_id ", ids_.audio_end, " and audio_token_id ", ids_.audio, " must differ");
    const std::filesystem::path pp = std::filesystem::path(cfg_path).parent_path() / "preprocessor_config.json";
    if (std::filesystem::exists(pp)) {
      const nlohmann::json pj = read_json_object(pp.string(), "qwen3-omni audio");
      mel_ = LogMelConfig::from_hf(pj, pp.string());
    }
    MAXTEXT_CHECK(mel_.num_mel_bins == ac_.num_mel_bins, IoError, "[qwen3-omni audio] ", pp.string(), ": feature_size ",
                  mel_.num_mel_bins, " but the encoder takes num_mel_bins ", ac_.num_mel_bins);
    tower_ = std::make_unique<const Tower>(ac_);
    const io::TensorMap raw = io::read_safetensors_any(io::detail::resolve_weights_path(weights));
    io::TensorMap mine;
    if (raw.has("audio_encoder.Qwen3OmniAudioEncoder_0.conv2d1.kernel")) {  // a MaxText tree
      for (const auto& [name, t] : raw.tensors) {
        if (name.rfind("audio_encoder.", 0) == 0) mine.add(name, t);
      }
    } else {
      mine = io::qwen3_omni_audio_from_hf(raw, ac_);
    }
    params_ = load_layer_params<P>(*tower_, mine, be_);
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  const layers::Qwen3OmniAudioConfig& config() const { return ac_; }
  const LogMelConfig& feature_config() const { return mel_; }
  const Qwen3AudioTokens& audio_tokens() const { return ids_; }
  double load_seconds() const { return load_seconds_; }
  std::int64_t sampling_rate() const { return mel_.sampling_rate; }

  /// Refuses a text model whose width is not the projector's (output_dim) or whose vocabulary lacks the audio ids.
  void check_text_model(const Config& cfg) const {
    MAXTEXT_CHECK(cfg.emb_dim == ac_.output_dim, ArgumentError, "[qwen3-omni audio] the audio encoder projects to ",
                  ac_.output_dim, " (output_dim), the text model's emb_dim is ", cfg.emb_dim);
    for (const std::int32_t t : {ids_.audio_start, ids_.audio_end, ids_.audio}) {
      MAXTEXT_CHECK(t < cfg.vocab_size, ArgumentError, "[qwen3-omni audio] audio token id ", t, " is outside the text "
                    "model's vocabulary of ", cfg.vocab_size);
    }
  }

  /// Samples (mono, at sampling_rate(): io::load_audio(path, sampling_rate())) -> log-mel features [mel, frames]
  /// (MaxText's form: padded to whole seconds).
  Tensor<float, 2> features(const std::vector<float>& samples) const {
    return log_mel_features(samples, mel_, ac_.form == layers::AudioForm::maxtext ? AudioPadding::whole_seconds
                                                                                 : AudioPadding::none);
  }
  /// Samples -> the soft tokens [tokens, output_dim]; `capture`: the encoder's values by MaxText's names.
  Tensor<float, 2> encode(const std::vector<float>& samples, layers::Capture* capture = nullptr) const {
    return tower_->encode(be_, params_, features(samples), capture);
  }
  Tensor<float, 2> encode_features(const Tensor<float, 2>& features, layers::Capture* capture = nullptr) const {
    return tower_->encode(be_, params_, features, capture);
  }

  /// `prompt` (text_prompt(ids), or a Qwen3Pictures::expand result) with its <|audio_pad|> markers (each right after
  /// an <|audio_start|>) expanded to the clips' soft tokens, marker i taking clip i of `clips` ([tokens, output_dim]
  /// each; at most clips.size() markers, exactly that many with `all`). Each clip's tokens take the marker's position
  /// and the next ones on all three rows; every later position moves up by the clip's length - 1.
  MediaPrompt expand(const MediaPrompt& prompt, const std::vector<Tensor<float, 2>>& clips, bool all = true) const {
    const auto T = static_cast<std::int64_t>(prompt.ids.size());
    const std::int64_t k = std::count(prompt.ids.begin(), prompt.ids.end(), ids_.audio);
    MAXTEXT_CHECK(k <= static_cast<std::int64_t>(clips.size()) && (!all || k == static_cast<std::int64_t>(clips.size())),
                  ArgumentError, "[audio] the prompt has ", k, " <|audio_pad|> marker(s) for ", clips.size(),
                  " clip(s): one marker per clip");
    MAXTEXT_CHECK(prompt.mask.dim(0) == 1 && prompt.mask.dim(1) == T && prompt.positions.dim(0) == 3 &&
                      prompt.positions.dim(1) == T,
                  ArgumentError, "[audio] the prompt's mask must be [1, ", T, "] and its positions [3, ", T,
                  "] (models::text_prompt or Qwen3Pictures::expand), found ", prompt.mask.shape(), " and ",
                  prompt.positions.shape());
    std::int64_t soft = 0;
    for (std::int64_t t = 0; t < T; ++t) soft += prompt.mask(0, t) != 0 ? 1 : 0;
    MAXTEXT_CHECK(soft == 0 || prompt.embeddings.dim(0) == soft, ArgumentError,
                  "[audio] the prompt marks ", soft, " soft tokens but holds ", prompt.embeddings.shape(), " rows");
    const std::int64_t E = ac_.output_dim, W = soft > 0 ? std::max(E, prompt.embeddings.dim(1)) : E;
    MAXTEXT_CHECK(soft == 0 || prompt.embeddings.dim(1) % E == 0, ArgumentError, "[audio] the prompt's rows are ",
                  prompt.embeddings.dim(1), " wide: not a multiple of the text width ", E);
    std::int64_t added = 0;
    for (std::int64_t c = 0; c < k; ++c) {
      const Tensor<float, 2>& clip = clips[static_cast<std::size_t>(c)];
      MAXTEXT_CHECK(clip.dim(0) > 0 && clip.dim(1) == E, ArgumentError, "[audio] clip ", c, ": soft tokens ",
                    clip.shape(), ", expected [tokens > 0, ", E, "] (Qwen3OmniSounds::encode's output)");
      added += clip.dim(0);
    }
    const std::int64_t To = T - k + added;
    MediaPrompt out;
    out.ids.reserve(static_cast<std::size_t>(To));
    out.mask = Tensor<std::int32_t, 2>({1, To});
    out.positions = Tensor<std::int32_t, 2>({3, To});
    out.embeddings = Tensor<float, 2>({soft + added, W});
    std::int64_t o = 0, row = 0, prow = 0, shift = 0, next_clip = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int32_t id = prompt.ids[static_cast<std::size_t>(t)];
      if (id != ids_.audio) {
        out.ids.push_back(id);
        out.mask(0, o) = prompt.mask(0, t);
        for (std::int64_t r = 0; r < 3; ++r) out.positions(r, o) = static_cast<std::int32_t>(prompt.positions(r, t) + shift);
        if (prompt.mask(0, t) != 0) {
          std::copy(&prompt.embeddings(prow, 0), &prompt.embeddings(prow, 0) + prompt.embeddings.dim(1), &out.embeddings(row, 0));
          ++prow;
          ++row;
        }
        ++o;
        continue;
      }
      MAXTEXT_CHECK(t > 0 && prompt.ids[static_cast<std::size_t>(t - 1)] == ids_.audio_start, ArgumentError,
                    "[audio] the <|audio_pad|> at ", t, " does not follow an <|audio_start|> (", ids_.audio_start,
                    "): a clip is <|audio_start|><|audio_pad|><|audio_end|>");
      MAXTEXT_CHECK(prompt.mask(0, t) == 0 && prompt.positions(0, t) == prompt.positions(1, t) &&
                        prompt.positions(0, t) == prompt.positions(2, t),
                    ArgumentError, "[audio] the <|audio_pad|> at ", t, " is already expanded (a soft token or a 3-D "
                    "position): give each clip's single marker");
      const Tensor<float, 2>& clip = clips[static_cast<std::size_t>(next_clip++)];
      const std::int64_t p = prompt.positions(0, t) + shift;
      for (std::int64_t j = 0; j < clip.dim(0); ++j, ++o, ++row) {
        out.ids.push_back(ids_.audio);
        out.mask(0, o) = 1;
        for (std::int64_t r = 0; r < 3; ++r) out.positions(r, o) = static_cast<std::int32_t>(p + j);
        std::copy(&clip(j, 0), &clip(j, 0) + E, &out.embeddings(row, 0));
        std::fill(&out.embeddings(row, 0) + E, &out.embeddings(row, 0) + W, 0.0f);
      }
      shift += clip.dim(0) - 1;
    }
    if (soft + added == 0) out.embeddings = Tensor<float, 2>({0, E});
    return out;
  }

 private:
  B be_;
  Qwen3AudioTokens ids_;
  layers::Qwen3OmniAudioConfig ac_;
  LogMelConfig mel_;
  std::unique_ptr<const Tower> tower_;
  typename Tower::Params params_;
  double load_seconds_ = 0.0;
};

}  // namespace maxtext::models
