// io/generation_config.hpp: the end-of-sequence token ids a model's files declare, for generation's stop token set.
//   * Hugging Face: `eos_token_id` in config.json and in generation_config.json beside the weights, each an integer,
//     a list of integers or null (transformers lets generation_config.json override config.json; instruction-tuned
//     models often list the end-of-turn token only there, e.g. Llama 3's [128001, 128008, 128009]). The union of both
//     files is returned, so neither one's ids are missed.
//   * GGUF: tokenizer.ggml.eos_token_id and tokenizer.ggml.eot_token_id (llama.cpp's end-of-turn id) when in range.
//   * llama2.c checkpoints and MaxText safetensors carry none (the tokenizer's eos() is the caller's to add).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/weights.hpp"

namespace maxtext::io {

/// `eos_token_id` of a config.json / generation_config.json object: absent or null -> {}, an integer, or a list of
/// integers; anything else is an IoError naming `where`.
inline std::vector<std::int32_t> eos_ids_from_json(const nlohmann::json& j, const std::string& where) {
  std::vector<std::int32_t> out;
  if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return out;
  const nlohmann::json& v = j["eos_token_id"];
  auto one = [&](const nlohmann::json& e) {
    MAXTEXT_CHECK(e.is_number_integer() && e.get<std::int64_t>() >= 0 && e.get<std::int64_t>() <= 0x7fffffff, IoError,
                  "[generation config] ", where, ": eos_token_id must be a non-negative integer or a list of them, found ",
                  e.dump());
    out.push_back(static_cast<std::int32_t>(e.get<std::int64_t>()));
  };
  if (v.is_array()) {
    for (const auto& e : v) one(e);
  } else {
    one(v);
  }
  return out;
}

/// The end-of-sequence ids declared by the files of `weights` (see the file comment), sorted, without duplicates.
inline std::vector<std::int32_t> read_eos_token_ids(const std::string& weights) {
  std::vector<std::int32_t> ids;
  if (weights.empty()) return ids;
  const std::string w = detail::resolve_weights_path(weights);
  if (!std::filesystem::exists(w)) return ids;
  if (ends_with(w, ".gguf") || detail::file_starts_with(w, "GGUF", 4)) {
    const GgufFile g = read_gguf(w);
    const GgufValue* toks = g.find("tokenizer.ggml.tokens");
    const std::int64_t n = toks && toks->is_array() ? static_cast<std::int64_t>(toks->strings.size()) : 0;
    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
      if (const GgufValue* v = g.find(key)) {
        const std::int64_t x = v->as_int(g.where(key));
        if (x >= 0 && x < n) ids.push_back(static_cast<std::int32_t>(x));
      }
    }
  } else {
    const auto dir = std::filesystem::path(w).parent_path();
    for (const char* f : {"config.json", "generation_config.json"}) {
      const auto p = dir / f;
      if (!std::filesystem::exists(p)) continue;
      std::ifstream in(p);
      std::stringstream ss;
      ss << in.rdbuf();
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(ss.str());
      } catch (const nlohmann::json::exception& e) {
        MAXTEXT_THROW(IoError, "[generation config] ", p.string(), ": not valid JSON: ", e.what());
      }
      const auto e = eos_ids_from_json(j, p.string());
      ids.insert(ids.end(), e.begin(), e.end());
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace maxtext::io
