// families/model_import.hpp: a maxtext::Config from the description a weights file carries: GGUF metadata, a
// Hugging Face config.json, a llama2.c header. Each family reads its own (families/<family>/family.hpp); this file
// dispatches over the family list (families/families.hpp) by GGUF architecture or config.json model_type, and
// refuses one that no family reads by name, with the list of those that are read.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/families/families.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// A Config from GGUF metadata: the family whose family.hpp names the file's general.architecture reads it. Weights
/// stay in the file's storage type unless the caller asks otherwise; activations default to float32.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API Config config_from_gguf(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  MAXTEXT_CHECK(!arch.empty(), IoError, "[gguf] ", g.path, ": general.architecture is missing");
  return families::config_from_gguf(g, arch);
}
#else
Config config_from_gguf(const GgufFile& g);
#endif

namespace detail {

/// The JSON types of the config.json keys that are read with a default when absent, checked before any is read: a
/// value of another type is an IoError naming the key (not a nlohmann::json type_error escaping the loader).
inline void check_hf_config_types(const nlohmann::json& j, const std::string& where) {
  auto check = [&](const nlohmann::json& o, const std::string& path, const char* key, char kind) {
    if (!o.contains(key) || o[key].is_null()) return;
    const nlohmann::json& v = o[key];
    const bool ok = kind == 'b' ? v.is_boolean() : kind == 's' ? v.is_string() : kind == 'n' ? v.is_number() : v.is_object();
    const char* want = kind == 'b' ? "a boolean" : kind == 's' ? "a string" : kind == 'n' ? "a number" : "an object";
    MAXTEXT_CHECK(ok, IoError, "[hf] ", where, ": ", path, key, ": expected ", want, ", found ", v.dump());
  };
  for (const char* k : {"attention_bias", "mlp_bias", "use_sliding_window", "norm_topk_prob", "tie_word_embeddings"}) {
    check(j, "", k, 'b');
  }
  check(j, "", "hidden_act", 's');
  check(j, "", "hidden_activation", 's');
  check(j, "", "decoder_sparse_step", 'n');
  check(j, "", "rope_scaling", 'o');
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const nlohmann::json& rs = j["rope_scaling"];
    for (const char* k : {"rope_type", "type"}) check(rs, "rope_scaling.", k, 's');
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      check(rs, "rope_scaling.", k, 'n');
    }
  }
}

/// config_from_hf without the type checks and the exception translation: the family whose family.hpp names the
/// model_type reads it.
inline Config config_from_hf_fields(const nlohmann::json& j, const std::string& where) {
  MAXTEXT_CHECK(j.is_object(), IoError, "[hf] ", where, ": config.json is not a JSON object");
  return families::config_from_hf(j, where);
}

}  // namespace detail

/// A Config from a Hugging Face config.json, read by the family that names its model_type (llama -> llama2, or
/// llama3.1 with LLaMA-3 rope_scaling; mistral; qwen2 / qwen3 / qwen3_moe; deepseek_v2 / deepseek_v3 / mixtral; the
/// Gemma, OLMo 3, gpt-oss, Llama 4 and Qwen3-Next / Qwen3.5 types). A malformed config is an IoError naming `where`
/// (and the key where one is to blame).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API Config config_from_hf(const nlohmann::json& j, const std::string& where) {
  MAXTEXT_CHECK(j.is_object(), IoError, "[hf] ", where, ": config.json is not a JSON object");
  detail::check_hf_config_types(j, where);
  try {
    return detail::config_from_hf_fields(j, where);
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(IoError, "[hf] ", where, ": a value of the wrong type: ", e.what());
  }
}
#else
Config config_from_hf(const nlohmann::json& j, const std::string& where);
#endif

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API Config config_from_hf_file(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(IoError, "[hf] ", path, ": not valid JSON: ", e.what());
  }
  return config_from_hf(j, path);
}
#else
Config config_from_hf_file(const std::string& path);
#endif

}  // namespace maxtext::io
