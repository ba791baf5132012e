// families/qwen/family.hpp: the Qwen family (MaxText's qwen2, qwen3, qwen3_moe and qwen3_custom_moe blocks) as the
// format-level code sees it (families/families.hpp): config.json types qwen2 / qwen3 / qwen3_moe and llama.cpp's
// qwen2 / qwen3 / qwen3moe GGUF files through the Llama-style readers (families/llama2/import.hpp); qwen3_custom_moe
// reads MaxText checkpoints only.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/llama2/family.hpp"
#include "maxtext/families/qwen/qwen2.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/families/qwen/qwen3_custom.hpp"
#include "maxtext/io/gguf.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Qwen : LlamaStyle {
  static constexpr std::array<std::string_view, 4> blocks{"qwen2", "qwen3", "qwen3_moe", "qwen3_custom_moe"};
  static constexpr std::array<std::string_view, 3> hf_model_types{"qwen2", "qwen3", "qwen3_moe"};
  static constexpr std::array<std::string_view, 3> gguf_architectures{"qwen2", "qwen3", "qwen3moe"};

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    refuse_custom(cfg, where);
    return LlamaStyle::import_gguf(g, cfg, where);
  }
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where,
                             const std::string& config_json) {
    refuse_custom(cfg, where);
    return LlamaStyle::import_hf(raw, cfg, where, config_json);
  }
  static TensorMap import_llama2c(const TensorMap& tensors, const Config& cfg, const std::string& where) {
    refuse_custom(cfg, where);
    return LlamaStyle::import_llama2c(tensors, cfg, where);
  }

 private:
  static void refuse_custom(const Config& cfg, const std::string& where) {
    MAXTEXT_CHECK(!cfg.is("qwen3_custom_moe"), UnsupportedError, "[weights] ", where, ": decoder_block ",
                  cfg.decoder_block,
                  " reads MaxText checkpoints only (no Hugging Face / GGUF / llama2.c importer for it)");
  }
};

}  // namespace maxtext::families
