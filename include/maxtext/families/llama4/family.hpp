// families/llama4/family.hpp: the Llama 4 family as the format-level code sees it (families/families.hpp):
// config.json types llama4 / llama4_text (the text model; the vision tower is not read here), llama.cpp's llama4 GGUF
// files and the scanned cycle of inhomogeneous_layer_cycle_interval layers (Llama4ScannableBlock).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/hooks.hpp"
#include "maxtext/families/llama4/import.hpp"
#include "maxtext/families/llama4/llama4.hpp"
#include "maxtext/families/scan.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Llama4 {
  static constexpr std::array<std::string_view, 1> blocks{"llama4"};
  static constexpr std::array<std::string_view, 2> hf_model_types{"llama4", "llama4_text"};
  static constexpr std::array<std::string_view, 1> gguf_architectures{"llama4"};

  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    return io::config_from_hf_llama4(j, where);
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_llama4(g); }

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    require_gguf_architecture(g, cfg, "llama4");
    return io::import_gguf_llama4(g.tensors, cfg, where);
  }
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where, const std::string&) {
    return io::import_hf_llama4(raw, cfg, where);
  }

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return io::canonicalize_cycle_scanned(name, t, cfg, out, "Llama 4");
  }
};

}  // namespace maxtext::families
