// families/mistral/family.hpp: the Mistral family (MaxText's mistral and mixtral blocks) as the format-level code sees
// it (families/families.hpp): config.json type mistral and llama.cpp / llama2.c files through the Llama-style readers
// (families/llama2/import.hpp); Mixtral's config.json is read by the DeepSeek family, whose Hugging Face importer maps
// Mixtral's experts too.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "maxtext/core/config.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/families/llama2/family.hpp"
#include "maxtext/families/mistral/mistral.hpp"
#include "maxtext/families/mistral/mixtral.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Mistral : LlamaStyle {
  static constexpr std::array<std::string_view, 2> blocks{"mistral", "mixtral"};
  static constexpr std::array<std::string_view, 1> hf_model_types{"mistral"};

  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where,
                             const std::string& config_json) {
    if (cfg.is("mixtral")) return io::canonicalize_hf_deepseek(raw, cfg);
    return LlamaStyle::import_hf(raw, cfg, where, config_json);
  }
};

}  // namespace maxtext::families
