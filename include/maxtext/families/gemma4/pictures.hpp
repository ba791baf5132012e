// families/gemma4/pictures.hpp: pictures into a Gemma 4 model, as an application embeds them: the vision encoder
// loaded once from a Hugging Face Gemma4ForConditionalGeneration checkpoint, pictures preprocessed as MaxText's (or
// Hugging Face's) processor does (image_processor.hpp) and encoded to soft tokens (vision.hpp), and prompts whose
// <|image|> markers are expanded to each picture's tokens (MaxText's add_extra_tokens_for_images_gemma4) as a
// MediaPrompt for Session::sync / ForwardOptions. The soft tokens take the image tokens' places; the decoder lets a
// picture's tokens see each other (MaxText's bidirectional mask for Gemma 4).
//
//   models::Gemma4Pictures<Policy<cpu::Backend, float>> pics(cpu::Backend{}, "gemma-4-26B-A4B-it/");
//   const auto soft = pics.encode({io::read_image("cat.png")});
//   const models::MediaPrompt p = pics.expand(tokenizer.encode("<bos><|turn>user\n<|image|>what is it?..."), soft);
//   session.sync(p.ids, &p.mask, &p.embeddings);
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
#include "maxtext/families/gemma4/image_processor.hpp"
#include "maxtext/families/gemma4/vision.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::models {

/// A Gemma 4 checkpoint's config.json (model_type gemma4: the multimodal one); others refused by name.
inline nlohmann::json read_gemma4_config(const std::string& path) {
  return read_hf_model_config(path, "gemma4", "gemma4 pictures",
                              "Gemma 4's vision encoder comes with a Gemma4ForConditionalGeneration checkpoint "
                              "(model_type gemma4)");
}

/// Refuses image token ids that are negative or not three different ids.
inline void check_gemma4_image_tokens(const io::Gemma4ImageTokens& t, const std::string& where) {
  MAXTEXT_CHECK(t.begin >= 0 && t.end >= 0 && t.image >= 0, ArgumentError, "[gemma4 pictures] ", where,
                ": image token ids must be >= 0, found <|image> ", t.begin, ", <image|> ", t.end, ", <|image|> ", t.image);
  MAXTEXT_CHECK(t.begin != t.end && t.begin != t.image && t.end != t.image, ArgumentError, "[gemma4 pictures] ", where,
                ": the image token ids (<|image> ", t.begin, ", <image|> ", t.end, ", <|image|> ", t.image,
                ") must differ");
}

/// The image token ids of a Gemma 4 config.json: boi_token_id, eoi_token_id, image_token_id (Gemma4Config's defaults
/// when absent).
inline io::Gemma4ImageTokens gemma4_image_tokens(const nlohmann::json& j, const std::string& where) {
  io::Gemma4ImageTokens t;
  const auto get = [&](const char* key, std::int32_t& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    MAXTEXT_CHECK(j[key].is_number_integer() && j[key].get<std::int64_t>() >= 0 &&
                      j[key].get<std::int64_t>() <= std::numeric_limits<std::int32_t>::max(),
                  IoError, where, ": ", key, ": expected a token id, found ", j[key].dump());
    out = static_cast<std::int32_t>(j[key].get<std::int64_t>());
  };
  get("boi_token_id", t.begin);
  get("eoi_token_id", t.end);
  get("image_token_id", t.image);
  check_gemma4_image_tokens(t, where);
  return t;
}

/// Pictures encoded by Gemma4Pictures::encode: their soft tokens' rows, picture after picture.
struct Gemma4EncodedPictures {
  Tensor<float, 2> rows;             ///< [soft tokens of all pictures, emb_dim]
  std::vector<std::int64_t> tokens;  ///< soft tokens per picture
  std::int64_t count() const { return static_cast<std::int64_t>(tokens.size()); }
};

/// Gemma 4's vision encoder and image token ids, loaded once. P: the tower's policy (float activations: MaxText's
/// dtype_mm); the backend is the caller's (its threads).
template <class P>
class Gemma4Pictures {
 public:
  using B = typename P::backend;
  using Tower = layers::Gemma4VisionEncoder<P>;

  /// The vision encoder of a Hugging Face Gemma4ForConditionalGeneration checkpoint (a directory, a safetensors file
  /// or an index, with config.json beside it). With Hugging Face's preprocessing, max_soft_tokens is
  /// preprocessor_config.json's when it is there (280 otherwise).
  Gemma4Pictures(B be, const std::string& weights,
                 io::Gemma4ImageProcessing how = io::Gemma4ImageProcessing::maxtext)
      : be_(std::move(be)) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string cfg_path = hf_config_beside(weights);
    MAXTEXT_CHECK(!cfg_path.empty(), IoError, "[gemma4 pictures] no config.json beside ", weights,
                  " (a Hugging Face Gemma4ForConditionalGeneration directory, safetensors file or index)");
    const nlohmann::json j = read_gemma4_config(cfg_path);
    ids_ = gemma4_image_tokens(j, cfg_path);
    vc_ = layers::Gemma4VisionConfig::from_hf(j, cfg_path);
    const std::filesystem::path pp = std::filesystem::path(cfg_path).parent_path() / "preprocessor_config.json";
    if (std::filesystem::exists(pp)) {
      std::ifstream f(pp);
      const nlohmann::json pj = nlohmann::json::parse(f, nullptr, false);
      MAXTEXT_CHECK(!pj.is_discarded() && pj.is_object(), IoError, "[gemma4 pictures] ", pp.string(), ": not a JSON object");
      const nlohmann::json& ip = pj.contains("image_processor") && pj["image_processor"].is_object() ? pj["image_processor"] : pj;
      if (ip.contains("max_soft_tokens")) {
        MAXTEXT_CHECK(ip["max_soft_tokens"].is_number_integer() && ip["max_soft_tokens"].get<std::int64_t>() > 0 &&
                          ip["max_soft_tokens"].get<std::int64_t>() <= (1 << 16),
                      IoError, "[gemma4 pictures] ", pp.string(), ": max_soft_tokens: expected a count in [1, 65536], found ",
                      ip["max_soft_tokens"].dump());
        pre_.max_soft_tokens = ip["max_soft_tokens"].get<std::int64_t>();
      }
    }
    set_preprocessing(how);
    load(io::gemma4_vision_from_hf(io::read_safetensors_any(io::detail::resolve_weights_path(weights)), vc_), t0);
  }

  /// The vision encoder of a llama.cpp mmproj GGUF (clip, projector gemma4v), beside a text model whose tokenizer (or
  /// config.json) gives the image token ids (`ids`). MaxText's fixed size is 672 x 960 here (the file has none).
  Gemma4Pictures(B be, io::GgufFile mmproj, io::Gemma4ImageTokens ids,
                 io::Gemma4ImageProcessing how = io::Gemma4ImageProcessing::maxtext)
      : be_(std::move(be)), ids_(ids) {
    const auto t0 = std::chrono::steady_clock::now();
    check_gemma4_image_tokens(ids_, mmproj.path);
    io::Gemma4Mmproj m = io::gemma4_vision_from_mmproj(std::move(mmproj));
    vc_ = m.config;
    set_preprocessing(how);
    load(std::move(m.tensors), t0);
  }

  const io::Gemma4ImageTokens& image_tokens() const { return ids_; }
  const layers::Gemma4VisionConfig& config() const { return vc_; }
  const io::Gemma4Preprocess& preprocessing() const { return pre_; }
  double load_seconds() const { return load_seconds_; }

  /// Refuses a text model the tower does not fit: image token ids outside its vocabulary, another embedding width.
  void check_text_model(const Config& cfg) const {
    for (const std::int32_t id : {ids_.begin, ids_.end, ids_.image}) {
      MAXTEXT_CHECK(id < cfg.vocab_size, ArgumentError, "[gemma4 pictures] image token id ", id,
                    " outside the vocabulary of ", cfg.vocab_size);
    }
    MAXTEXT_CHECK(vc_.emb_dim == cfg.emb_dim, ArgumentError, "[gemma4 pictures] the vision encoder's projector gives rows "
                  "of ", vc_.emb_dim, "; the text model's emb_dim is ", cfg.emb_dim);
  }

  /// Pictures -> their soft tokens (the preprocessing, then the tower: pictures of one size in one pass).
  Gemma4EncodedPictures encode(const std::vector<io::Image>& images) const {
    MAXTEXT_CHECK(!images.empty(), ArgumentError, "[gemma4 pictures] no picture to encode");
    std::vector<Tensor<float, 3>> px;
    for (const auto& img : images) px.push_back(io::gemma4_preprocess(img, pre_));
    return encode_pixels(px);
  }

  /// Preprocessed pictures ([h, w, 3] each, float32 in [0, 1]) -> soft tokens; runs of pictures of one size go through
  /// the tower together. `capture` (one size only): the tower's values by MaxText's names.
  Gemma4EncodedPictures encode_pixels(const std::vector<Tensor<float, 3>>& px, layers::Capture* capture = nullptr) const {
    MAXTEXT_CHECK(!px.empty(), ArgumentError, "[gemma4 pictures] no picture to encode");
    Gemma4EncodedPictures out;
    std::int64_t total = 0;
    for (const auto& p : px) {
      MAXTEXT_CHECK(p.dim(2) == 3, ShapeError, "[gemma4 pictures] a picture must be [height, width, 3], found ", p.shape());
      vc_.check_grid(p.dim(0), p.dim(1));
      out.tokens.push_back(vc_.tokens_for(p.dim(0), p.dim(1)));
      total += out.tokens.back();
    }
    out.rows = Tensor<float, 2>({total, vc_.emb_dim});
    float* at = out.rows.data();
    for (std::size_t i = 0; i < px.size();) {
      std::size_t j = i + 1;
      while (j < px.size() && px[j].dim(0) == px[i].dim(0) && px[j].dim(1) == px[i].dim(1)) ++j;
      MAXTEXT_CHECK(capture == nullptr || (i == 0 && j == px.size()), ArgumentError,
                    "[gemma4 pictures] captures need pictures of one size");
      const std::int64_t h = px[i].dim(0), w = px[i].dim(1), per = h * w * 3;
      Tensor<float, 4> batch({static_cast<std::int64_t>(j - i), h, w, 3});
      for (std::size_t k = i; k < j; ++k) {
        std::copy(px[k].data(), px[k].data() + per, batch.data() + static_cast<std::int64_t>(k - i) * per);
      }
      const Tensor<float, 3> y = tower_->encode(be_, params_, batch, capture);
      at = std::copy(y.data(), y.data() + y.size(), at);
      i = j;
    }
    return out;
  }

  /// `prompt` with its <|image|> markers expanded to the pictures' tokens, marker i taking picture i of `pics`: at
  /// most pics.count() markers, exactly that many with `all`.
  MediaPrompt expand(const std::vector<std::int32_t>& prompt, const Gemma4EncodedPictures& pics, bool all = true) const {
    std::int64_t total = 0;
    for (const std::int64_t t : pics.tokens) total += t;
    MAXTEXT_CHECK(total == pics.rows.dim(0), ArgumentError, "[image] encoded pictures: token counts summing to ", total,
                  " for ", pics.rows.dim(0), " rows (Gemma4Pictures::encode's output)");
    const std::int64_t k = std::count(prompt.begin(), prompt.end(), ids_.image);
    MAXTEXT_CHECK(k <= pics.count() && (!all || k == pics.count()), ArgumentError, "[image] the prompt has ", k,
                  " <|image|> marker(s) for ", pics.count(), " picture(s): one marker per picture");
    const std::vector<std::int64_t> used(pics.tokens.begin(), pics.tokens.begin() + k);
    return media_prompt(io::gemma4_expand_image_tokens(prompt, used, ids_).ids, ids_.image,
                        View<const float, 2>(pics.rows.data(), {pics.rows.dim(0), pics.rows.dim(1)}));
  }

 private:
  /// The processor's settings from the encoder's; MaxText's fixed size checked against the model.
  void set_preprocessing(io::Gemma4ImageProcessing how) {
    pre_.how = how;
    pre_.height = vc_.image_height;
    pre_.width = vc_.image_width;
    pre_.patch = vc_.patch_size;
    pre_.pooling = vc_.pooling_kernel;
    if (how != io::Gemma4ImageProcessing::maxtext) return;
    try {
      vc_.check_grid(pre_.height, pre_.width);
    } catch (const Error& e) {
      throw ArgumentError(str("[gemma4 pictures] MaxText's processor resizes every picture to ", pre_.width, " x ",
                              pre_.height, " (W x H), which this model cannot take (", e.what(),
                              "): set vision_config.image_size, or use Hugging Face's preprocessing (hf)"));
    }
  }

  void load(const io::TensorMap& weights, std::chrono::steady_clock::time_point t0) {
    tower_ = std::make_unique<const Tower>(vc_);
    params_ = load_layer_params<P>(*tower_, weights, be_);
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  B be_;
  io::Gemma4ImageTokens ids_;
  layers::Gemma4VisionConfig vc_;
  io::Gemma4Preprocess pre_;
  std::unique_ptr<const Tower> tower_;
  typename Tower::Params params_;
  double load_seconds_ = 0.0;
};

}  // namespace maxtext::models
