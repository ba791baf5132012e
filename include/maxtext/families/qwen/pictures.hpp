// families/qwen/pictures.hpp: pictures through the vision encoder of a Qwen3.5 / Qwen3-VL / Qwen3-Omni checkpoint, as an
// application embeds it: the encoder loaded once from the Hugging Face checkpoint, each picture preprocessed as
// MaxText's (or Hugging Face's) processor does (image_processor.hpp) and encoded (vision.hpp) to its soft tokens and
// deepstack features. Merging them into the text model needs MRoPE's 3-D positions for the picture's tokens, which
// the decoders do not take yet: this is the encoder for numerics and embeddings (`maxtext vision`, Python's
// Qwen3Vision).
//
//   models::Qwen3Pictures<Policy<cpu::Backend, float>> pics(cpu::Backend{}, "Qwen3.5-35B-A3B/");
//   const auto out = pics.encode({io::read_image("cat.png")});   // out[0].tokens: [merged tokens, text width]
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/qwen/image_processor.hpp"
#include "maxtext/families/qwen/vision.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/media.hpp"

namespace maxtext::models {

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
    std::ifstream f(cfg_path);
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    MAXTEXT_CHECK(!j.is_discarded() && j.is_object(), IoError, "[qwen3 pictures] ", cfg_path, ": not a JSON object");
    const std::string type = j.value("model_type", std::string());
    MAXTEXT_CHECK(is_qwen3_vision_model_type(type), UnsupportedError, "[qwen3 pictures] ", cfg_path, " has model_type '",
                  type, "'; the Qwen3 vision encoder comes with qwen3_5_moe, qwen3_5, qwen3_vl(_moe) or qwen3_omni_moe");
    vc_ = layers::Qwen3VisionConfig::from_hf(j, cfg_path);
    pre_.how = how;
    pre_.patch = vc_.patch_size;
    pre_.temporal_patch = vc_.temporal_patch_size;
    pre_.merge = vc_.spatial_merge_size;
    MAXTEXT_CHECK(vc_.num_channels == 3, UnsupportedError, "[qwen3 pictures] ", cfg_path, ": vision_config.in_channels ",
                  vc_.num_channels, ": pictures are RGB (3)");
    const std::filesystem::path pp = std::filesystem::path(cfg_path).parent_path() / "preprocessor_config.json";
    if (std::filesystem::exists(pp)) {
      std::ifstream pf(pp);
      const nlohmann::json pj = nlohmann::json::parse(pf, nullptr, false);
      MAXTEXT_CHECK(!pj.is_discarded() && pj.is_object(), IoError, "[qwen3 pictures] ", pp.string(), ": not a JSON object");
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

  /// Patches [n * t h w, C tp p p] of n pictures of one grid -> their output; `capture`: the encoder's values by
  /// MaxText's names.
  Output encode_patches(const Tensor<float, 2>& patches, std::int64_t t, std::int64_t h, std::int64_t w,
                        layers::Capture* capture = nullptr) const {
    return tower_->encode(be_, params_, patches, t, h, w, capture);
  }

 private:
  B be_;
  layers::Qwen3VisionConfig vc_;
  io::Qwen3Preprocess pre_;
  std::unique_ptr<const Tower> tower_;
  typename Tower::Params params_;
  double load_seconds_ = 0.0;
};

}  // namespace maxtext::models
