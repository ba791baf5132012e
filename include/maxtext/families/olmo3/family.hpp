// families/olmo3/family.hpp: the OLMo 3 family as the format-level code sees it (families/families.hpp): config.json
// type olmo3, llama.cpp's olmo2 GGUF files (its converter's name for Olmo3ForCausalLM), and the scanned cycle of four
// layers (Olmo3ScannableBlock, len(OLMO3_ATTENTION_PATTERN)).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/families/olmo3/import.hpp"
#include "maxtext/families/olmo3/olmo3.hpp"
#include "maxtext/families/scan.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Olmo3 {
  static constexpr std::array<std::string_view, 1> blocks{"olmo3"};
  static constexpr std::array<std::string_view, 1> hf_model_types{"olmo3"};
  static constexpr std::array<std::string_view, 1> gguf_architectures{"olmo2"};

  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    return io::config_from_hf_olmo(j, where);
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_olmo(g); }

  /// llama.cpp's olmo2 names; without output.weight the head is tied.
  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    return io::import_olmo3_names(g.tensors, cfg, false, !g.tensors.has("output.weight"), where);
  }
  /// Olmo3ForCausalLM names; tied as config.json says (without one: when lm_head.weight is absent).
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where,
                             const std::string& config_json) {
    const bool tied = config_json.empty() ? !raw.has("lm_head.weight") : io::hf_tied_embeddings(config_json);
    return io::import_olmo3_names(raw, cfg, true, tied, where);
  }

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return io::canonicalize_cycle_scanned(name, t, cfg, out, "OLMo 3", 4);
  }
};

}  // namespace maxtext::families
