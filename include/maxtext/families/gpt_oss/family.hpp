// families/gpt_oss/family.hpp: the gpt-oss family as the format-level code sees it (families/families.hpp): config.json
// type gpt_oss (MXFP4 experts dequantised), llama.cpp's gpt-oss GGUF files (the only family whose GGUF files may hold
// MXFP4 tensors) and the scanned cycle of inhomogeneous_layer_cycle_interval layers (GptOssScannableBlock).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/families/gpt_oss/gpt_oss.hpp"
#include "maxtext/families/gpt_oss/import.hpp"
#include "maxtext/families/scan.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::families {

using io::TensorMap;

struct GptOss {
  static constexpr std::array<std::string_view, 1> blocks{"gpt_oss"};
  static constexpr std::array<std::string_view, 1> hf_model_types{"gpt_oss"};
  static constexpr std::array<std::string_view, 1> gguf_architectures{"gpt-oss"};
  static constexpr bool gguf_mxfp4_experts = true;

  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    return io::config_from_hf_gpt_oss(j, where);
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_gpt_oss(g); }

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    return io::import_gguf_gpt_oss(g.tensors, cfg, where);
  }
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where, const std::string&) {
    return io::import_hf_gpt_oss(raw, cfg, where);
  }

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return io::canonicalize_cycle_scanned(name, t, cfg, out, "GPT-OSS");
  }
};

}  // namespace maxtext::families
