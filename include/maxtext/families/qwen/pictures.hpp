// families/qwen/pictures.hpp: pictures into a Qwen3.5 / Qwen3-VL / Qwen3-Omni model, as an application embeds them: the
// vision encoder loaded once from the Hugging Face checkpoint, each picture preprocessed as MaxText's (or Hugging
// Face's) processor does (image_processor.hpp) and encoded (vision.hpp) to its soft tokens and deepstack features, and
// prompts whose <|image_pad|> markers (each after a <|vision_start|>) are expanded to each picture's tokens as a
// MediaPrompt: the soft tokens' rows (deepstack features after them), and MRoPE's 3-D positions of every id
// (qwen3_rope_index: MaxText's get_rope_index), which the text model's rotary embedding takes.
//
//   models::Qwen3Pictures<Policy<cpu::Backend, float>> pics(cpu::Backend{}, "Qwen3.5-35B-A3B/");
//   const auto out = pics.encode({io::read_image("cat.png")});   // out[0].tokens: [merged tokens, text width]
//   const models::MediaPrompt p = pics.expand(tokenizer.encode("...<|vision_start|><|image_pad|><|vision_end|>..."), out);
//   session.sync(p.ids, &p.mask, &p.embeddings, &p.positions);
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
#include "maxtext/families/qwen/checkpoint_json.hpp"
#include "maxtext/families/qwen/image_processor.hpp"
#include "maxtext/families/qwen/vision.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::models {

/// The ids a Qwen3 prompt marks pictures with (config.json vision_start_token_id, vision_end_token_id, image_token_id;
/// Qwen3.5's when absent).
struct Qwen3ImageTokens {
  std::int32_t vision_start = 248053;  ///< <|vision_start|>
  std::int32_t vision_end = 248054;    ///< <|vision_end|>
  std::int32_t image = 248056;         ///< <|image_pad|>
};

/// A picture's grid of merged tokens (a picture is one frame: MaxText's grid_t 1).
struct Qwen3Grid {
  std::int64_t h = 0, w = 0;
  std::int64_t tokens() const { return h * w; }
};

/// MRoPE's 3-D positions [3, ids.size()] (temporal, height, width) of a prompt whose pictures are expanded (each a run
/// of `tk.image` ids right after a `tk.vision_start`, run i of grids[i].tokens() ids), as MaxText's get_rope_index
/// (multimodal/processor_qwen3_omni.py, images) gives them from 0: a text id at the next position p (all three
/// rows), a picture's token (row r, column c of its merged grid, row-major) at (p, p + r, p + c), and the next position
/// after the picture p + max(h, w), the largest position so far + 1.
inline Tensor<std::int32_t, 2> qwen3_rope_index(const std::vector<std::int32_t>& ids, const std::vector<Qwen3Grid>& grids,
                                               const Qwen3ImageTokens& tk) {
  const auto T = static_cast<std::int64_t>(ids.size());
  Tensor<std::int32_t, 2> pos({3, T});
  std::int64_t next = 0;
  std::size_t k = 0;
  for (std::int64_t i = 0; i < T;) {
    if (ids[static_cast<std::size_t>(i)] != tk.image) {
      for (std::int64_t r = 0; r < 3; ++r) pos(r, i) = static_cast<std::int32_t>(next);
      ++next;
      ++i;
      continue;
    }
    MAXTEXT_CHECK(i > 0 && ids[static_cast<std::size_t>(i - 1)] == tk.vision_start, ArgumentError, "[qwen3 pictures] the "
                  "image tokens at ", i, " do not follow a <|vision_start|> (", tk.vision_start, "): a picture is "
                  "<|vision_start|>, its image tokens, <|vision_end|>");
    MAXTEXT_CHECK(k < grids.size(), ArgumentError, "[qwen3 pictures] the prompt holds more pictures than the ",
                  grids.size(), " grid(s) given");
    const Qwen3Grid g = grids[k++];
    std::int64_t n = 0;
    while (i + n < T && ids[static_cast<std::size_t>(i + n)] == tk.image) ++n;
    MAXTEXT_CHECK(n == g.tokens(), ArgumentError, "[qwen3 pictures] picture ", k - 1, " holds ", n, " image tokens; its ",
                  g.h, " x ", g.w, " grid of merged tokens needs ", g.tokens());
    for (std::int64_t r = 0; r < g.h; ++r) {
      for (std::int64_t c = 0; c < g.w; ++c) {
        const std::int64_t at = i + r * g.w + c;
        pos(0, at) = static_cast<std::int32_t>(next);
        pos(1, at) = static_cast<std::int32_t>(next + r);
        pos(2, at) = static_cast<std::int32_t>(next + c);
      }
    }
    next += std::max(g.h, g.w);
    i += n;
  }
  MAXTEXT_CHECK(k == grids.size(), ArgumentError, "[qwen3 pictures] ", grids.size(), " grid(s) given for ", k,
                " picture(s) in the prompt");
  return pos;
}

/// Whether a config.json model_type carries the Qwen3 vision encoder (Qwen3.5, Qwen3-VL, Qwen3-Omni).
inline bool is_qwen3_vision_model_type(const std::string& t) {
  return t == "qwen3_5_moe" || t == "qwen3_5" || t == "qwen3_vl" || t == "qwen3_vl_moe" || t == "qwen3_omni_moe";
}

/// The Qwen3 vision encoder of a checkpoint, loaded once. P: the encoder's policy (float activations).
template <class P>
class Qwen3Pictures {
 public:
  using B = typename P::backend;
  using Tower = layers::Qwen3VisionEncoder<P>;
  using Output = typename Tower::Output;

  /// The vision encoder of a Hugging Face Qwen3.5 / Qwen3-VL / Qwen3-Omni checkpoint (a directory, a safetensors file
  /// or an index, with config.json beside it). Hugging Face's pixel budget from preprocessor_config.json when it is
  /// there (min_pixels / max_pixels, or size.shortest_edge / longest_edge), Qwen3.5's otherwise.
  Qwen3Pictures(B be, const std::string& weights, io::Qwen3ImageProcessing how = io::Qwen3ImageProcessing::maxtext)
      : be_(std::move(be)) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string cfg_path = hf_config_beside(weights);
    MAXTEXT_CHECK(!cfg_path.empty(), IoError, "[qwen3 pictures] no config.json beside ", weights,
                  " (a Hugging Face Qwen3.5 / Qwen3-VL / Qwen3-Omni directory, safetensors file or index)");
    const nlohmann::json j = read_json_object(cfg_path, "qwen3 pictures");
    const std::string type = j.value("model_type", std::string());
    MAXTEXT_CHECK(is_qwen3_vision_model_type(type), UnsupportedError, "[qwen3 pictures] ", cfg_path, " has model_type '",
                  type, "'; the Qwen3 vision encoder comes with qwen3_5_moe, qwen3_5, qwen3_vl(_moe) or qwen3_omni_moe");
    vc_ = layers::Qwen3VisionConfig::from_hf(j, cfg_path);
    const auto id = [&](const char* key, std::int32_t& out) { read_token_id(j, key, out, cfg_path, "qwen3 pictures"); };
    id("vision_start_token_id", ids_.vision_start);
    id("vision_end_token_id", ids_.vision_end);
    id("image_token_id", ids_.image);
    MAXTEXT_CHECK(ids_.vision_start != ids_.image && ids_.vision_end != ids_.image && ids_.vision_start != ids_.vision_end,
                  IoError, "[qwen3 pictures] ", cfg_path, ": vision_start_token_id ", ids_.vision_start,
                  ", vision_end_token_id ", ids_.vision_end, " and image_token_id ", ids_.image, " must differ");
    pre_.how = how;
    pre_.patch = vc_.patch_size;
    pre_.temporal_patch = vc_.temporal_patch_size;
    pre_.merge = vc_.spatial_merge_size;
    MAXTEXT_CHECK(vc_.num_channels == 3, UnsupportedError, "[qwen3 pictures] ", cfg_path, ": vision_config.in_channels ",
                  vc_.num_channels, ": pictures are RGB (3)");
    const std::filesystem::path pp = std::filesystem::path(cfg_path).parent_path() / "preprocessor_config.json";
    if (std::filesystem::exists(pp)) {
      const nlohmann::json pj = read_json_object(pp.string(), "qwen3 pictures");
      const auto get = [&](const nlohmann::json& o, const char* key, std::int64_t& out) {
        if (!o.contains(key) || o[key].is_null()) return;
        MAXTEXT_CHECK(o[key].is_number_integer() && o[key].get<std::int64_t>() > 0, IoError, "[qwen3 pictures] ",
                      pp.string(), ": ", key, ": expected a positive integer, found ", o[key].dump());
        out = o[key].get<std::int64_t>();
      };
      get(pj, "min_pixels", pre_.min_pixels);
      get(pj, "max_pixels", pre_.max_pixels);
      if (pj.contains("size") && pj["size"].is_object()) {
        get(pj["size"], "shortest_edge", pre_.min_pixels);
        get(pj["size"], "longest_edge", pre_.max_pixels);
      }
      MAXTEXT_CHECK(pre_.min_pixels <= pre_.max_pixels, IoError, "[qwen3 pictures] ", pp.string(), ": min_pixels ",
                    pre_.min_pixels, " above max_pixels ", pre_.max_pixels);
    }
    tower_ = std::make_unique<const Tower>(vc_);
    params_ = load_layer_params<P>(
        *tower_, io::qwen3_vision_from_hf(io::read_safetensors_any(io::detail::resolve_weights_path(weights)), vc_), be_);
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  const layers::Qwen3VisionConfig& config() const { return vc_; }
  const Qwen3ImageTokens& image_tokens() const { return ids_; }
  /// Refuses a text model whose width is not the projector's (out_hidden_size) or whose vocabulary lacks the image ids.
  void check_text_model(const Config& cfg) const {
    MAXTEXT_CHECK(cfg.emb_dim == vc_.out_hidden_size, ArgumentError, "[qwen3 pictures] the vision encoder projects to ",
                  vc_.out_hidden_size, " (out_hidden_size), the text model's emb_dim is ", cfg.emb_dim);
    MAXTEXT_CHECK(cfg.use_mrope, ArgumentError, "[qwen3 pictures] the text model (decoder_block '", cfg.decoder_block,
                  "') has no use_mrope: its pictures' tokens take MRoPE's 3-D positions");
    for (const std::int32_t t : {ids_.vision_start, ids_.vision_end, ids_.image}) {
      MAXTEXT_CHECK(t < cfg.vocab_size, ArgumentError, "[qwen3 pictures] image token id ", t, " is outside the text "
                    "model's vocabulary of ", cfg.vocab_size);
    }
  }
  const io::Qwen3Preprocess& preprocessing() const { return pre_; }
  double load_seconds() const { return load_seconds_; }

  /// Each picture preprocessed (`how`: the processor, the loader's by default) and encoded on its own.
  std::vector<Output> encode(const std::vector<io::Image>& images) const { return encode(images, pre_.how); }
  std::vector<Output> encode(const std::vector<io::Image>& images, io::Qwen3ImageProcessing how) const {
    MAXTEXT_CHECK(!images.empty(), ArgumentError, "[qwen3 pictures] no picture to encode");
    io::Qwen3Preprocess o = pre_;
    o.how = how;
    std::vector<Output> out;
    for (const auto& img : images) {
      const io::Qwen3Patches p = io::qwen3_preprocess(img, o);
      out.push_back(tower_->encode(be_, params_, p.pixel_values, p.t, p.h, p.w));
    }
    return out;
  }

  /// `prompt` with its <|image_pad|> markers (each right after a <|vision_start|>) expanded to the pictures' tokens,
  /// marker i taking picture i of `pics` (at most pics.size() markers, exactly that many with `all`): the soft tokens'
  /// rows, each followed by its deepstack features ([n, (1 + k) * width]: ForwardOptions::media_embeddings), and the
  /// ids' MRoPE positions (qwen3_rope_index).
  MediaPrompt expand(const std::vector<std::int32_t>& prompt, const std::vector<Output>& pics, bool all = true) const {
    const std::int64_t k = std::count(prompt.begin(), prompt.end(), ids_.image);
    MAXTEXT_CHECK(k <= static_cast<std::int64_t>(pics.size()) && (!all || k == static_cast<std::int64_t>(pics.size())),
                  ArgumentError, "[image] the prompt has ", k, " <|image_pad|> marker(s) for ", pics.size(),
                  " picture(s): one marker per picture");
    const std::int64_t m = vc_.spatial_merge_size, E = vc_.out_hidden_size;
    const std::size_t deep = vc_.deepstack_layers.size();
    std::vector<std::int32_t> ids;
    std::vector<Qwen3Grid> grids;
    std::int64_t rows = 0;
    std::size_t next = 0;
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] != ids_.image) {
        ids.push_back(prompt[i]);
        continue;
      }
      const Output& o = pics[next++];
      MAXTEXT_CHECK(o.grid_h % m == 0 && o.grid_w % m == 0 && o.tokens.dim(0) == o.grid_h / m * (o.grid_w / m) &&
                        o.tokens.dim(1) == E && o.deepstack.size() == deep,
                    ArgumentError, "[image] picture ", next - 1, ": an encoder output of ", o.tokens.shape(), " with ",
                    o.deepstack.size(), " deepstack feature(s) for a ", o.grid_h, " x ", o.grid_w, " patch grid "
                    "(Qwen3Pictures::encode's output)");
      grids.push_back({o.grid_h / m, o.grid_w / m});
      ids.insert(ids.end(), static_cast<std::size_t>(o.tokens.dim(0)), ids_.image);
      rows += o.tokens.dim(0);
    }
    MediaPrompt out;
    out.positions = qwen3_rope_index(ids, grids, ids_);
    const auto T = static_cast<std::int64_t>(ids.size());
    out.mask = Tensor<std::int32_t, 2>({1, T});
    for (std::int64_t t = 0; t < T; ++t) out.mask(0, t) = ids[static_cast<std::size_t>(t)] == ids_.image ? 1 : 0;
    const std::int64_t W = E * static_cast<std::int64_t>(1 + deep);
    out.embeddings = Tensor<float, 2>({rows, W});
    std::int64_t r = 0;
    for (std::size_t p = 0; p < next; ++p) {
      const Output& o = pics[p];
      for (std::int64_t q = 0; q < o.tokens.dim(0); ++q, ++r) {
        std::copy(&o.tokens(q, 0), &o.tokens(q, 0) + E, &out.embeddings(r, 0));
        for (std::size_t j = 0; j < deep; ++j) {
          std::copy(&o.deepstack[j](q, 0), &o.deepstack[j](q, 0) + E,
                    &out.embeddings(r, E * static_cast<std::int64_t>(1 + j)));
        }
      }
    }
    out.ids = std::move(ids);
    return out;
  }

  /// Patches [n * t h w, C tp p p] of n pictures of one grid -> their output; `capture`: the encoder's values by
  /// MaxText's names.
  Output encode_patches(const Tensor<float, 2>& patches, std::int64_t t, std::int64_t h, std::int64_t w,
                        layers::Capture* capture = nullptr) const {
    return tower_->encode(be_, params_, patches, t, h, w, capture);
  }

 private:
  B be_;
  Qwen3ImageTokens ids_;
  layers::Qwen3VisionConfig vc_;
  io::Qwen3Preprocess pre_;
  std::unique_ptr<const Tower> tower_;
  typename Tower::Params params_;
  double load_seconds_ = 0.0;
};

}  // namespace maxtext::models
