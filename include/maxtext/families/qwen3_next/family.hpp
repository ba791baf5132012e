// families/qwen3_next/family.hpp: the Qwen3-Next family (MaxText's qwen3_next block, and qwen3_5 on its layers) as
// the format-level code sees it (families/families.hpp): the Qwen3-Next and Qwen3.5 config.json types, llama.cpp's
// qwen3next / qwen35moe GGUF files (a dense qwen35 file is refused: MaxText's qwen3_5 block has an MoE in every
// layer), and the scanned cycle whose sub-layers are named `layer_j` (Qwen3NextScannableBlock).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/hooks.hpp"
#include "maxtext/families/qwen3_next/import.hpp"
#include "maxtext/families/qwen3_next/qwen3_5.hpp"
#include "maxtext/families/qwen3_next/qwen3_next.hpp"
#include "maxtext/families/scan.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Qwen3Next {
  static constexpr std::array<std::string_view, 2> blocks{"qwen3_next", "qwen3_5"};
  static constexpr std::array<std::string_view, 5> hf_model_types{"qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text",
                                                                  "qwen3_5", "qwen3_5_text"};
  static constexpr std::array<std::string_view, 2> gguf_architectures{"qwen3next", "qwen35moe"};
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 1> gguf_refused_architectures{
      {{"qwen35", "a dense Qwen3.5; MaxText's qwen3_5 block (models/qwen3_5.py) has an MoE in every layer"}}};

  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    return io::config_from_hf_qwen3_next(j, where);
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_qwen3_next(g); }

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    require_gguf_architecture(g, cfg, cfg.is("qwen3_5") ? "qwen35moe" : "qwen3next");
    return io::import_gguf_qwen3_next(g.tensors, cfg, where);
  }
  /// Qwen3-Next and Qwen3.5 names.
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where, const std::string&) {
    return io::import_hf_qwen3_next(raw, cfg, where);
  }

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return io::canonicalize_cycle_scanned(name, t, cfg, out, "Qwen3-Next", 0, "layer_");
  }
};

}  // namespace maxtext::families
