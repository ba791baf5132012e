// models/media.hpp: a prompt with pictures (or other media) as the decoder takes them: the token ids with each
// picture's placeholders, where the soft tokens are, and their rows in the text model's embedding space
// (ForwardOptions / Session media_mask and media_embeddings; MaxText's multimodal merge). A family's picture code
// (families/gemma/pictures.hpp) makes one; sessions and the server (server/engine.hpp) take it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::models {

struct MediaPrompt {
  std::vector<std::int32_t> ids;  ///< the prompt, each picture's marker expanded to its image tokens
  Tensor<std::int32_t, 2> mask;   ///< [1, ids.size()]: 1 at the soft tokens
  Tensor<float, 2> embeddings;    ///< [soft tokens, emb_dim]: the soft tokens' rows, in order
  /// [3, ids.size()]: MRoPE's 3-D positions of the ids from 0 (Qwen pictures: qwen3_rope_index), or empty (the model
  /// takes text positions). Session::append / sync and GenerateOptions::media_positions take them.
  Tensor<std::int32_t, 2> positions;
};

/// A MediaPrompt of expanded `ids` whose `soft` ids take the first rows of `rows` [>= count, width] (host), in order.
inline MediaPrompt media_prompt(std::vector<std::int32_t> ids, std::int32_t soft, View<const float, 2> rows) {
  MediaPrompt out;
  const std::int64_t T = static_cast<std::int64_t>(ids.size()), width = rows.dim(1);
  const std::int64_t n = std::count(ids.begin(), ids.end(), soft);
  MAXTEXT_CHECK(n <= rows.dim(0), ArgumentError, "[image] the prompt holds ", n, " soft tokens for ", rows.dim(0),
                " encoded rows");
  out.ids = std::move(ids);
  out.mask = Tensor<std::int32_t, 2>({1, T});
  for (std::int64_t t = 0; t < T; ++t) out.mask(0, t) = out.ids[static_cast<std::size_t>(t)] == soft ? 1 : 0;
  out.embeddings = Tensor<float, 2>({n, width});
  std::copy(rows.data(), rows.data() + n * width, out.embeddings.data());
  return out;
}

/// The config.json of a Hugging Face checkpoint given as a directory, a safetensors file or an index (beside it);
/// empty when there is none.
inline std::string hf_config_beside(const std::string& weights) {
  namespace fs = std::filesystem;
  const fs::path p(weights);
  const fs::path cfg = fs::is_directory(p) ? p / "config.json" : p.parent_path() / "config.json";
  return fs::exists(cfg) ? cfg.string() : std::string();
}

/// A checkpoint's config.json whose model_type is `model_type` (the multimodal one); others refused by name (`what`
/// names the caller and `needs` what it reads, in the message).
inline nlohmann::json read_hf_model_config(const std::string& path, const std::string& model_type,
                                           const std::string& what, const std::string& needs) {
  std::ifstream f(path);
  MAXTEXT_CHECK(f.good(), IoError, "[", what, "] cannot read ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(IoError, "[", what, "] ", path, ": not JSON (", e.what(), ")");
  }
  const std::string type = j.is_object() && j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>() : std::string();
  MAXTEXT_CHECK(type == model_type, UnsupportedError, "[", what, "] ", path, " has model_type '", type, "'; ", needs);
  return j;
}

}  // namespace maxtext::models
