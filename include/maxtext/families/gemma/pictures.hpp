// families/gemma/pictures.hpp: pictures into a Gemma 3 model, as an application embeds them: the vision tower loaded
// once (from a Hugging Face Gemma3ForConditionalGeneration checkpoint, or a llama.cpp mmproj GGUF beside a text
// model), pictures preprocessed (image_processor.hpp) and encoded to soft tokens (vision.hpp), and prompts whose
// <start_of_image> markers are expanded to them (MaxText's add_extra_tokens_for_images_gemma3) as a MediaPrompt for
// Session::sync / ForwardOptions.
//
//   models::Gemma3Pictures<Policy<cpu::Backend, float>> pics(cpu::Backend{}, "gemma-3-4b-it/");
//   const auto soft = pics.encode({io::read_image("cat.png")});
//   const models::MediaPrompt p = pics.expand(tokenizer.encode("<start_of_turn>user\n<start_of_image> what is it?..."), soft);
//   session.sync(p.ids, &p.mask, &p.embeddings);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/gemma/image_processor.hpp"
#include "maxtext/families/gemma/vision.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::models {

/// A Gemma 3 checkpoint's config.json (model_type gemma3: the multimodal one); others refused by name.
inline nlohmann::json read_gemma3_config(const std::string& path) {
  return read_hf_model_config(path, "gemma3", "gemma3 pictures",
                              "the vision towers implemented are Gemma 3's (model_type gemma3, "
                              "Gemma3ForConditionalGeneration) and Llama 4's (model_type llama4)");
}

/// The image token ids of a Gemma 3 config.json (boi_token_index, eoi_token_index, image_token_index,
/// mm_tokens_per_image; Gemma3Config's defaults where absent). "\n\n" is MaxText's constant 108.
inline io::Gemma3ImageTokens gemma3_image_tokens(const nlohmann::json& j, const std::string& where) {
  io::Gemma3ImageTokens t;
  const auto get = [&](const char* key, auto& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    MAXTEXT_CHECK(j[key].is_number_integer() && j[key].get<std::int64_t>() >= 0, IoError, where, ": ", key,
                  ": expected a token id, found ", j[key].dump());
    out = static_cast<std::remove_reference_t<decltype(out)>>(j[key].get<std::int64_t>());
  };
  get("boi_token_index", t.begin);
  get("eoi_token_index", t.end);
  get("image_token_index", t.soft);
  get("mm_tokens_per_image", t.per_image);
  return t;
}

/// Gemma 3's vision tower and image token ids, loaded once. P: the tower's policy (float activations: MaxText's
/// dtype_mm); the backend is the caller's (its threads).
template <class P>
class Gemma3Pictures {
 public:
  using B = typename P::backend;
  using Tower = layers::Gemma3VisionEncoder<P>;

  /// The tower of a Hugging Face Gemma3ForConditionalGeneration checkpoint (a directory, a safetensors file or an
  /// index, with config.json beside it): its sizes and image token ids from config.json.
  Gemma3Pictures(B be, const std::string& weights, io::Gemma3ImageProcessing how = io::Gemma3ImageProcessing::maxtext)
      : be_(std::move(be)), how_(how) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string cfg_path = hf_config_beside(weights);
    MAXTEXT_CHECK(!cfg_path.empty(), IoError, "[gemma3 pictures] no config.json beside ", weights,
                  " (a Hugging Face Gemma3ForConditionalGeneration directory, safetensors file or index)");
    const nlohmann::json j = read_gemma3_config(cfg_path);
    ids_ = gemma3_image_tokens(j, cfg_path);
    vc_ = layers::Gemma3VisionConfig::from_hf(j, cfg_path);
    load(io::gemma3_vision_from_hf(io::read_safetensors_any(io::detail::resolve_weights_path(weights)), vc_), t0);
  }

  /// The tower of a llama.cpp mmproj GGUF (clip, projector gemma3), beside a text model whose tokenizer gives the
  /// image token ids (`ids`; per_image is the tower's).
  Gemma3Pictures(B be, io::GgufFile mmproj, io::Gemma3ImageTokens ids,
                 io::Gemma3ImageProcessing how = io::Gemma3ImageProcessing::maxtext)
      : be_(std::move(be)), how_(how), ids_(ids) {
    const auto t0 = std::chrono::steady_clock::now();
    io::Gemma3Mmproj m = io::gemma3_vision_from_mmproj(std::move(mmproj));
    vc_ = m.config;
    ids_.per_image = vc_.tokens_per_image;
    load(std::move(m.tensors), t0);
  }

  const io::Gemma3ImageTokens& image_tokens() const { return ids_; }
  const layers::Gemma3VisionConfig& config() const { return vc_; }
  double load_seconds() const { return load_seconds_; }

  /// Refuses a text model the tower does not fit: image token ids outside its vocabulary, another embedding width,
  /// a prompt's soft-token count other than the tower's.
  void check_text_model(const Config& cfg) const {
    MAXTEXT_CHECK(ids_.soft < cfg.vocab_size && ids_.begin < cfg.vocab_size && ids_.end < cfg.vocab_size &&
                      ids_.double_newline < cfg.vocab_size,
                  ArgumentError, "[gemma3 pictures] image token ids (", ids_.begin, ", ", ids_.end, ", ", ids_.soft,
                  ") outside the vocabulary of ", cfg.vocab_size);
    MAXTEXT_CHECK(vc_.tokens_per_image == ids_.per_image && vc_.emb_dim == cfg.emb_dim, ArgumentError,
                  "[gemma3 pictures] the tower gives [", vc_.tokens_per_image, ", ", vc_.emb_dim,
                  "] per picture; the prompt holds ", ids_.per_image, " soft tokens of the text model's emb_dim ",
                  cfg.emb_dim);
  }

  /// Pictures -> soft tokens [n, tokens per picture, emb_dim] (preprocessed as `how` says, then the tower).
  Tensor<float, 3> encode(const std::vector<io::Image>& images) const {
    const std::int64_t n = static_cast<std::int64_t>(images.size()), S = vc_.image_size;
    Tensor<float, 4> pixels({n, S, S, 3});
    for (std::int64_t i = 0; i < n; ++i) {
      const Tensor<float, 3> x = io::gemma3_preprocess(images[static_cast<std::size_t>(i)], S, how_);
      std::copy(x.data(), x.data() + x.size(), &pixels(i, 0, 0, 0));
    }
    return encode_pixels(pixels);
  }

  /// Preprocessed pixels [n, S, S, 3] -> soft tokens; `capture`: the tower's intermediate values by MaxText's names.
  Tensor<float, 3> encode_pixels(const Tensor<float, 4>& pixels, layers::Capture* capture = nullptr) const {
    return tower_->encode(be_, params_, pixels, capture);
  }

  /// `prompt` with its <start_of_image> markers expanded to the image tokens, marker i taking picture i of `soft`
  /// (encode's output): at most soft.dim(0) markers, exactly that many with `all`.
  MediaPrompt expand(const std::vector<std::int32_t>& prompt, const Tensor<float, 3>& soft, bool all = true) const {
    const std::int64_t count = soft.dim(0);
    std::int64_t k = 0;
    for (const std::int32_t id : prompt) k += id == ids_.begin ? 1 : 0;
    MAXTEXT_CHECK(k <= count && (!all || k == count), ArgumentError, "[image] the prompt has ", k,
                  " <start_of_image> marker(s) for ", count, " picture(s): one marker per picture");
    MAXTEXT_CHECK(soft.dim(1) == ids_.per_image, ArgumentError, "[image] ", soft.dim(1),
                  " soft tokens per picture; the prompt holds ", ids_.per_image);
    const io::Gemma3ImagePrompt p = io::gemma3_expand_image_tokens(prompt, k, ids_);
    return media_prompt(p.ids, ids_.soft, View<const float, 2>(soft.data(), {count * soft.dim(1), soft.dim(2)}));
  }

 private:
  void load(const io::TensorMap& weights, std::chrono::steady_clock::time_point t0) {
    tower_ = std::make_unique<const Tower>(vc_);
    params_ = load_layer_params<P>(*tower_, weights, be_);
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  B be_;
  io::Gemma3ImageProcessing how_;
  io::Gemma3ImageTokens ids_;
  layers::Gemma3VisionConfig vc_;
  std::unique_ptr<const Tower> tower_;
  typename Tower::Params params_;
  double load_seconds_ = 0.0;
};

}  // namespace maxtext::models
