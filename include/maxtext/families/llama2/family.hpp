// families/llama2/family.hpp: the Llama 2 family (MaxText's llama2 block, llama2lti on its layers, and the default
// block, whose parameter tree is llama2's) as the format-level code sees it (families/families.hpp): config.json type
// llama, llama.cpp's llama GGUF files and llama2.c checkpoints, all through the Llama-style readers of
// families/llama2/import.hpp that the mistral and qwen families share; a llama2lti checkpoint's learn-to-init factors
// are collapsed into kernels (families/llama2/lti.hpp).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "maxtext/core/config.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/llama2/import.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/llama2/lti.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/decoders.hpp"

namespace maxtext::families {

using io::TensorMap;

/// The hooks of the families whose files use the Llama-style names (llama2, mistral, qwen): Hugging Face configs by
/// config_from_hf_llama, GGUF metadata by config_from_gguf_llama, tensors by import_llama_cpp_names / import_hf_names.
struct LlamaStyle {
  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    return io::detail::config_from_hf_llama(j, where);
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_llama(g); }

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    return io::import_llama_cpp_names(g.tensors, cfg, io::gguf_rope_layout(g.get_string("general.architecture")),
                                      where);
  }
  /// Tied as config.json says (without one: when lm_head.weight is absent).
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where,
                             const std::string& config_json) {
    const bool tied = config_json.empty() ? !raw.has("lm_head.weight") : io::hf_tied_embeddings(config_json);
    return io::import_hf_names(raw, cfg, tied, where);
  }
  static TensorMap import_llama2c(const TensorMap& tensors, const Config& cfg, const std::string& where) {
    return io::import_llama_cpp_names(tensors, cfg, io::RopeLayout::interleaved, where);
  }
};

struct Llama2 : LlamaStyle {
  static constexpr std::array<std::string_view, 3> blocks{"default", "llama2", "llama2lti"};
  static constexpr std::array<std::string_view, 1> hf_model_types{"llama"};
  static constexpr std::array<std::string_view, 1> gguf_architectures{"llama"};

  /// Learn-to-init factors -> plain kernels, for decoder_block llama2lti or MaxText's own spelling of it (the llama2
  /// block with learn_to_init_mode: true).
  static void finish_maxtext(TensorMap& out, const Config& cfg) {
    const auto lti = cfg.extra.find("learn_to_init_mode");
    if (cfg.is("llama2lti") || (cfg.is("llama2") && lti != cfg.extra.end() && ::maxtext::detail::truthy(lti->second))) {
      io::collapse_lti_factors(out);
    }
  }
};

}  // namespace maxtext::families
