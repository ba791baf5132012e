// families/llama4/pictures.hpp: pictures into a Llama 4 model, as an application embeds them: the vision model loaded
// once from a Hugging Face Llama4ForConditionalGeneration checkpoint (or llama.cpp's mmproj file of it), pictures cut into tiles as MaxText's processor
// does (image_processor.hpp) and encoded to soft tokens (vision.hpp), and prompts whose <|image|> markers are expanded
// to each picture's tokens (MaxText's add_extra_tokens_for_images_llama4) as a MediaPrompt for Session::sync /
// ForwardOptions. The soft tokens take the <|patch|> positions, tile by tile; attention stays causal.
//
//   models::Llama4Pictures<Policy<cpu::Backend, float>> pics(cpu::Backend{}, "Llama-4-Scout-17B-16E-Instruct/");
//   const auto soft = pics.encode({io::read_image("cat.png")});
//   const models::MediaPrompt p = pics.expand(tokenizer.encode("<|begin_of_text|>...<|image|>what is it?..."), soft);
//   session.sync(p.ids, &p.mask, &p.embeddings);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/llama4/image_processor.hpp"
#include "maxtext/families/llama4/vision.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::models {

/// A Llama 4 checkpoint's config.json (model_type llama4: the multimodal one); others refused by name.
inline nlohmann::json read_llama4_config(const std::string& path) {
  return read_hf_model_config(path, "llama4", "llama4 pictures",
                              "Llama 4's vision model comes with a Llama4ForConditionalGeneration checkpoint "
                              "(model_type llama4)");
}

/// Refuses image token ids that are negative or not six different ids (a picture's tokens could not be told apart).
inline void check_llama4_image_tokens(const io::Llama4ImageTokens& t, const std::string& where) {
  const std::int32_t ids[] = {t.begin, t.end, t.image, t.patch, t.tile_x, t.tile_y};
  for (std::size_t i = 0; i < 6; ++i) {
    MAXTEXT_CHECK(ids[i] >= 0, ArgumentError, "[llama4 pictures] ", where, ": image token id ", ids[i], " is negative");
    for (std::size_t k = 0; k < i; ++k) {
      MAXTEXT_CHECK(ids[i] != ids[k], ArgumentError, "[llama4 pictures] ", where, ": the image token ids (<|image_start|> ",
                    t.begin, ", <|image_end|> ", t.end, ", <|image|> ", t.image, ", <|patch|> ", t.patch,
                    ", <|tile_x_separator|> ", t.tile_x, ", <|tile_y_separator|> ", t.tile_y, ") must all differ");
    }
  }
}

/// The image token ids of a Llama 4 config.json: boi_token_index (<|image_start|>), eoi_token_index (<|image_end|>)
/// and image_token_index (<|patch|>); the others are the tokenizer's (MaxText's constants by default).
inline io::Llama4ImageTokens llama4_image_tokens(const nlohmann::json& j, const std::string& where,
                                                 io::Llama4ImageTokens t = {}) {
  const auto get = [&](const char* key, std::int32_t& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    MAXTEXT_CHECK(j[key].is_number_integer() && j[key].get<std::int64_t>() >= 0 &&
                      j[key].get<std::int64_t>() <= std::numeric_limits<std::int32_t>::max(),
                  IoError, where, ": ", key, ": expected a token id, found ", j[key].dump());
    out = static_cast<std::int32_t>(j[key].get<std::int64_t>());
  };
  get("boi_token_index", t.begin);
  get("eoi_token_index", t.end);
  get("image_token_index", t.patch);
  check_llama4_image_tokens(t, where);
  return t;
}

/// Pictures encoded by Llama4Pictures::encode: every tile's soft tokens, and each picture's tile grid.
struct Llama4EncodedPictures {
  Tensor<float, 3> tokens;  ///< [tiles of all pictures, tokens per tile, emb_dim], picture by picture
  std::vector<std::pair<std::int64_t, std::int64_t>> grids;  ///< (ratio_h, ratio_w) per picture
  std::vector<std::int64_t> tiles;                            ///< tiles per picture (ratio_h * ratio_w, + 1 if > 1)
  std::int64_t count() const { return static_cast<std::int64_t>(grids.size()); }
};

/// Llama 4's vision model and image token ids, loaded once. P: the tower's policy (float activations: MaxText's
/// dtype_mm); the backend is the caller's (its threads).
template <class P>
class Llama4Pictures {
 public:
  using B = typename P::backend;
  using Tower = layers::Llama4VisionEncoder<P>;

  /// The vision model of a Hugging Face Llama4ForConditionalGeneration checkpoint (a directory, a safetensors file
  /// or an index, with config.json beside it). `ids`: the image token ids when the tokenizer gives them (those of
  /// config.json then still win); MaxText's constants otherwise.
  explicit Llama4Pictures(B be, const std::string& weights, io::Llama4ImageTokens ids = {}) : be_(std::move(be)) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string cfg_path = hf_config_beside(weights);
    MAXTEXT_CHECK(!cfg_path.empty(), IoError, "[llama4 pictures] no config.json beside ", weights,
                  " (a Hugging Face Llama4ForConditionalGeneration directory, safetensors file or index)");
    const nlohmann::json j = read_llama4_config(cfg_path);
    ids_ = llama4_image_tokens(j, cfg_path, ids);
    vc_ = layers::Llama4VisionConfig::from_hf(j, cfg_path);
    load(io::llama4_vision_from_hf(io::read_safetensors_any(io::detail::resolve_weights_path(weights)), vc_), t0);
  }

  /// The vision model of a llama.cpp mmproj GGUF (clip, projector llama4), beside a text model whose tokenizer gives
  /// the image token ids (`ids`; per_tile is the model's).
  Llama4Pictures(B be, io::GgufFile mmproj, io::Llama4ImageTokens ids) : be_(std::move(be)), ids_(ids) {
    const auto t0 = std::chrono::steady_clock::now();
    check_llama4_image_tokens(ids_, mmproj.path);
    io::Llama4Mmproj m = io::llama4_vision_from_mmproj(std::move(mmproj));
    vc_ = m.config;
    load(std::move(m.tensors), t0);
  }

  const io::Llama4ImageTokens& image_tokens() const { return ids_; }
  const layers::Llama4VisionConfig& config() const { return vc_; }
  double load_seconds() const { return load_seconds_; }
  /// MaxText's processor's tile limit (LLAMA4_TILES_NUM).
  std::int64_t max_tiles() const { return max_tiles_; }
  void set_max_tiles(std::int64_t n) {
    MAXTEXT_CHECK(n > 0, ArgumentError, "[llama4 pictures] max tiles must be > 0, found ", n);
    max_tiles_ = n;
  }

  /// Refuses a text model the tower does not fit: image token ids outside its vocabulary, another embedding width.
  void check_text_model(const Config& cfg) const {
    for (const std::int32_t id : {ids_.begin, ids_.end, ids_.image, ids_.patch, ids_.tile_x, ids_.tile_y}) {
      MAXTEXT_CHECK(id < cfg.vocab_size, ArgumentError, "[llama4 pictures] image token id ", id,
                    " outside the vocabulary of ", cfg.vocab_size);
    }
    MAXTEXT_CHECK(vc_.emb_dim == cfg.emb_dim, ArgumentError, "[llama4 pictures] the vision model's projector gives rows "
                  "of ", vc_.emb_dim, "; the text model's emb_dim is ", cfg.emb_dim);
  }

  /// Pictures -> their tiles' soft tokens (MaxText's preprocessing, then the tower, all tiles in one pass).
  Llama4EncodedPictures encode(const std::vector<io::Image>& images) const {
    MAXTEXT_CHECK(!images.empty(), ArgumentError, "[llama4 pictures] no picture to encode");
    const std::int64_t S = vc_.image_size;
    std::vector<io::Llama4Tiles> cut;
    Llama4EncodedPictures out;
    std::int64_t total = 0;
    for (const auto& img : images) {
      cut.push_back(io::llama4_preprocess(img, S, max_tiles_));
      out.grids.emplace_back(cut.back().ratio_h, cut.back().ratio_w);
      out.tiles.push_back(cut.back().tiles.dim(0));
      total += cut.back().tiles.dim(0);
    }
    Tensor<float, 4> tiles({total, S, S, 3});
    float* at = tiles.data();
    for (const auto& c : cut) at = std::copy(c.tiles.data(), c.tiles.data() + c.tiles.size(), at);
    out.tokens = encode_tiles(tiles);
    return out;
  }

  /// Preprocessed tiles [n, S, S, 3] -> soft tokens [n, tokens per tile, emb_dim]; `capture`: the tower's
  /// intermediate values by MaxText's names. Without captures the tiles go through the tower at most
  /// kTilesPerPass at a time, so that a request's pictures need one pass's scratch (about 50 MB a tile at Llama 4's
  /// sizes), not all of theirs.
  static constexpr std::int64_t kTilesPerPass = 16;
  Tensor<float, 3> encode_tiles(const Tensor<float, 4>& tiles, layers::Capture* capture = nullptr) const {
    const std::int64_t n = tiles.dim(0);
    if (capture != nullptr || n <= kTilesPerPass) return tower_->encode(be_, params_, tiles, capture);
    const std::int64_t S = tiles.dim(1), per = S * tiles.dim(2) * tiles.dim(3);
    Tensor<float, 3> out({n, vc_.tokens_per_tile(), vc_.emb_dim});
    const std::int64_t rows = vc_.tokens_per_tile() * vc_.emb_dim;
    for (std::int64_t t0 = 0; t0 < n; t0 += kTilesPerPass) {
      const std::int64_t m = std::min(kTilesPerPass, n - t0);
      Tensor<float, 4> part({m, S, tiles.dim(2), tiles.dim(3)});
      std::copy(tiles.data() + t0 * per, tiles.data() + (t0 + m) * per, part.data());
      const Tensor<float, 3> y = tower_->encode(be_, params_, part, nullptr);
      std::copy(y.data(), y.data() + m * rows, out.data() + t0 * rows);
    }
    return out;
  }

  /// `prompt` with its <|image|> markers expanded to the pictures' tokens, marker i taking picture i of `pics`: at
  /// most pics.count() markers, exactly that many with `all`.
  MediaPrompt expand(const std::vector<std::int32_t>& prompt, const Llama4EncodedPictures& pics, bool all = true) const {
    const std::int64_t count = pics.count();
    std::int64_t all_tiles = 0;
    for (const std::int64_t t : pics.tiles) all_tiles += t;
    MAXTEXT_CHECK(pics.tiles.size() == pics.grids.size() && all_tiles == pics.tokens.dim(0), ArgumentError,
                  "[image] encoded pictures: ", pics.grids.size(), " grids, ", pics.tiles.size(), " tile counts summing to ",
                  all_tiles, ", for ", pics.tokens.dim(0), " encoded tiles (Llama4Pictures::encode's output)");
    const std::int64_t k = std::count(prompt.begin(), prompt.end(), ids_.image);
    MAXTEXT_CHECK(k <= count && (!all || k == count), ArgumentError, "[image] the prompt has ", k,
                  " <|image|> marker(s) for ", count, " picture(s): one marker per picture");
    MAXTEXT_CHECK(pics.tokens.dim(1) == ids_.per_tile, ArgumentError, "[image] ", pics.tokens.dim(1),
                  " soft tokens per tile; the prompt holds ", ids_.per_tile);
    const std::vector<std::pair<std::int64_t, std::int64_t>> grids(pics.grids.begin(), pics.grids.begin() + k);
    std::int64_t tiles = 0;
    for (std::int64_t i = 0; i < k; ++i) tiles += pics.tiles[static_cast<std::size_t>(i)];
    return media_prompt(io::llama4_expand_image_tokens(prompt, grids, ids_), ids_.patch,
                        View<const float, 2>(pics.tokens.data(), {tiles * pics.tokens.dim(1), pics.tokens.dim(2)}));
  }

 private:
  void load(const io::TensorMap& weights, std::chrono::steady_clock::time_point t0) {
    ids_.per_tile = vc_.tokens_per_tile();
    tower_ = std::make_unique<const Tower>(vc_);
    params_ = load_layer_params<P>(*tower_, weights, be_);
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  B be_;
  io::Llama4ImageTokens ids_;
  layers::Llama4VisionConfig vc_;
  std::int64_t max_tiles_ = 16;
  std::unique_ptr<const Tower> tower_;
  typename Tower::Params params_;
  double load_seconds_ = 0.0;
};

}  // namespace maxtext::models
