// families/qwen/checkpoint_json.hpp: what the Qwen3 towers' loaders (pictures.hpp, sounds.hpp) read from a Hugging
// Face checkpoint's JSON files: a file as one JSON object, and a token id from config.json (Qwen3-Omni keeps its ids in
// thinker_config, Qwen3.5 / Qwen3-VL at the root).
#pragma once

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"

namespace maxtext::models {

/// `path` parsed as one JSON object; anything else is an IoError "[what] path: not a JSON object".
inline nlohmann::json read_json_object(const std::string& path, const char* what) {
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  MAXTEXT_CHECK(!j.is_discarded() && j.is_object(), IoError, "[", what, "] ", path, ": not a JSON object");
  return j;
}

/// config.json's `key` (in thinker_config when there is one) into `out` when present; not a token id: an IoError.
inline void read_token_id(const nlohmann::json& config, const char* key, std::int32_t& out, const std::string& path,
                          const char* what) {
  const nlohmann::json& th =
      config.contains("thinker_config") && config["thinker_config"].is_object() ? config["thinker_config"] : config;
  if (!th.contains(key) || th[key].is_null()) return;
  MAXTEXT_CHECK(th[key].is_number_integer() && th[key].get<std::int64_t>() >= 0 &&
                    th[key].get<std::int64_t>() <= std::numeric_limits<std::int32_t>::max(),
                IoError, "[", what, "] ", path, ": ", key, ": expected a token id, found ", th[key].dump());
  out = th[key].get<std::int32_t>();
}

}  // namespace maxtext::models
