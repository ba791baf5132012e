// families/load.hpp: read a weights file of any supported format (io/weights.hpp) for a model of any family, and
// return its tensors in canonical MaxText naming, plus what the file says about the model (a Config, when it carries
// one) and the naming scheme it used. The family importers live in families/<family>/import.hpp (the Llama-style
// names that llama2, mistral and qwen share, and the config dispatch, in families/model_import.hpp); MaxText's own
// checkpoint layout in families/checkpoint.hpp.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/decoder_blocks.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/families/checkpoint.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/families/gemma/import.hpp"
#include "maxtext/families/gemma4/import.hpp"
#include "maxtext/families/gpt_oss/import.hpp"
#include "maxtext/families/llama4/import.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/families/qwen3_next/import.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/llama2c.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"

namespace maxtext::io {

/// The model configuration the weights carry: GGUF metadata, the llama2.c header, or the config.json beside
/// Hugging Face safetensors. nullopt for MaxText safetensors (they need a MaxText YAML config).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::optional<Config> read_weights_config(const std::string& path_in) {
  const std::string path = detail::resolve_weights_path(path_in);
  switch (detect_weight_format(path)) {
    case WeightFormat::gguf: return config_from_gguf(read_gguf(path));
    case WeightFormat::llama2c: return config_from_llama2c(read_llama2c(path).header);
    case WeightFormat::hf_safetensors: {
      const std::string cj = detail::config_json_beside(path);
      MAXTEXT_CHECK(!cj.empty(), IoError, "[weights] ", path, ": Hugging Face weights need a config.json beside them");
      return config_from_hf_file(cj);
    }
    case WeightFormat::maxtext_safetensors: return std::nullopt;
  }
  return std::nullopt;
}
#else
std::optional<Config> read_weights_config(const std::string& path_in);
#endif

/// Whether the GGUF importer for `cfg` passes runtime-typed blocks (Q4_K, Q6_K, ...) through to the model: the
/// Llama-family one (llama, mistral, qwen2, qwen3 dense files), the Gemma one (gemma, gemma2, gemma3: the embedding
/// normalizer and query scale ride as value_scale, families/gemma/import.hpp) and OLMo 3's (olmo2 files: views only). Others
/// decode them to f32 at load. Keep in step with tools/blocks/CMakeLists.txt's _maxtext_policy_blocks_ggmlw.
inline bool gguf_keeps_blocks(const Config& cfg) {
#define MAXTEXT_KEEPS_BLOCKS(name) cfg.is(#name) ||
  return MAXTEXT_GGUF_KEEPS_BLOCKS(MAXTEXT_KEEPS_BLOCKS) false;  // the list: core/decoder_blocks.hpp
#undef MAXTEXT_KEEPS_BLOCKS
}

/// Read `path` for the model `cfg` and return its tensors in canonical MaxText naming (unscanned). GGUF, llama2.c
/// and Hugging Face tensors are mapped (families/model_import.hpp); MaxText safetensors are canonicalised.
/// `keep_blocks`: a GGUF file's block-quantised tensors (Q4_K, Q6_K, Q4_0, ...) stay as they lie in the file
/// (DType::ggml views), and so do its F32 / F16 / BF16 matrices, for a model with runtime-typed weights (ggml_byte;
/// file_weight_type "ggml"), where the importer supports it (gguf_keeps_blocks): the model then reads the file's
/// mapping as it is, with no second copy. A file without blocks whose model ties its head (logits_via_embedding) is
/// not kept (see below). Otherwise, and by default, blocks are decoded to f32.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API LoadedWeights load_weights(const std::string& path_in, const Config& cfg, bool keep_blocks = false) {
  const std::string path = detail::resolve_weights_path(path_in);
  MAXTEXT_CHECK(std::filesystem::exists(path), IoError, "[weights] ", path, ": no such file");
  LoadedWeights w;
  w.path = path;
  w.format = detect_weight_format(path);
  MAXTEXT_CHECK(!cfg.is("qwen3_custom_moe") || w.format == WeightFormat::maxtext_safetensors, UnsupportedError,
                "[weights] ", path, ": decoder_block ", cfg.decoder_block,
                " reads MaxText checkpoints only (no Hugging Face / GGUF / llama2.c importer for it)");
  MAXTEXT_CHECK(!cfg.is_qwen3_hybrid() || w.format != WeightFormat::llama2c, UnsupportedError, "[weights] ", path,
                ": decoder_block ", cfg.decoder_block, " reads MaxText, Hugging Face and GGUF checkpoints, not llama2.c");
  MAXTEXT_CHECK(!cfg.is("llama4") || w.format != WeightFormat::llama2c, UnsupportedError, "[weights] ", path,
                ": decoder_block llama4 reads MaxText, Hugging Face and GGUF checkpoints, not llama2.c files");
  switch (w.format) {
    case WeightFormat::gguf: {
      GgufFile g = read_gguf(path);
      if (!cfg.is("gpt_oss")) {
        for (const auto& info : g.infos) {
          MAXTEXT_CHECK(info.ggml_type != 39, UnsupportedError, "[gguf] ", path, ": tensor ", info.name,
                        ": ggml type MXFP4 is only supported for gpt-oss expert tensors");
        }
      }
      // A file of F32 / F16 / BF16 matrices only is read in place too, unless the model ties its head to the
      // embedding: MaxText's tied head multiplies by a bf16-rounded copy of the table, which the file's rows are not
      // (docs/numerics.md); such a file keeps the packed policies and MaxText's numbers.
      if (keep_blocks && gguf_keeps_blocks(cfg) && (has_block_tensors(g) || !cfg.logits_via_embedding)) {
        keep_block_tensors(g);  // blocks and F32 / F16 / BF16 rows computed from as they lie (ggml_byte weights)
        w.file_weight_type = "ggml";
      } else {
        dequantize_block_tensors(g);  // Q4_K, Q6_K, ... become f32 (exact mode); the model stores its weight type
        w.file_weight_type = native_weight_type(g.tensors);
      }
      if (is_gemma_block(cfg)) {  // families/gemma/import.hpp: embedding scaled (blocks: as value_scale), norms already 1 + w
        w.tensors = import_gguf_gemma(g.tensors, cfg, "gguf " + path);
        return w;
      }
      if (cfg.is("olmo3")) {  // llama.cpp's olmo2 names (families/model_import.hpp import_olmo3_names)
        w.tensors = import_olmo3_names(g.tensors, cfg, false, !g.tensors.has("output.weight"), "gguf " + path);
        return w;
      }
      if (cfg.is("gpt_oss")) {  // families/gpt_oss/import.hpp
        w.tensors = import_gguf_gpt_oss(g.tensors, cfg, "gguf " + path);
        return w;
      }
      MAXTEXT_CHECK(!cfg.is("gemma4_small"), UnsupportedError, "[gguf] ", path, ": decoder_block gemma4_small (Gemma 4 "
                    "E2B / E4B) is read from Hugging Face files, not GGUF yet");
      if (cfg.is("gemma4")) {  // families/gemma4/import.hpp
        MAXTEXT_CHECK(g.get_string("general.architecture") == "gemma4", UnsupportedError, "[gguf] ", path,
                      ": decoder_block gemma4 reads GGUF architecture gemma4, found '",
                      g.get_string("general.architecture"), "'");
        w.tensors = import_gguf_gemma4(g.tensors, cfg, "gguf " + path);
        return w;
      }
      if (cfg.is_qwen3_hybrid()) {  // families/qwen3_next/import.hpp
        const std::string want = cfg.is("qwen3_5") ? "qwen35moe" : "qwen3next";
        MAXTEXT_CHECK(g.get_string("general.architecture") == want, UnsupportedError, "[gguf] ", path, ": decoder_block ",
                      cfg.decoder_block, " reads GGUF architecture ", want, ", found '",
                      g.get_string("general.architecture"), "'");
        w.tensors = import_gguf_qwen3_next(g.tensors, cfg, "gguf " + path);
        return w;
      }
      if (cfg.is("deepseek")) {  // families/deepseek/gguf.hpp
        MAXTEXT_CHECK(is_gguf_deepseek(g.get_string("general.architecture")), UnsupportedError, "[gguf] ", path,
                      ": decoder_block deepseek reads GGUF architecture deepseek2, found '",
                      g.get_string("general.architecture"), "'");
        w.tensors = import_gguf_deepseek(g.tensors, cfg, "gguf " + path);
        return w;
      }
      if (cfg.is("llama4")) {  // families/llama4/import.hpp
        MAXTEXT_CHECK(g.get_string("general.architecture") == "llama4", UnsupportedError, "[gguf] ", path,
                      ": decoder_block llama4 reads GGUF architecture llama4, found '",
                      g.get_string("general.architecture"), "'");
        w.tensors = import_gguf_llama4(g.tensors, cfg, "gguf " + path);
        return w;
      }
      w.tensors = import_llama_cpp_names(g.tensors, cfg, gguf_rope_layout(g.get_string("general.architecture")), "gguf " + path);
      return w;
    }
    case WeightFormat::llama2c: {
      const Llama2cCheckpoint ck = read_llama2c(path);
      w.tensors = import_llama_cpp_names(ck.tensors, cfg, RopeLayout::interleaved, "llama2c " + path);
      return w;
    }
    case WeightFormat::hf_safetensors: {
      const TensorMap raw = read_safetensors_any(path);
      w.file_weight_type = native_weight_type(raw);
      if (cfg.is("deepseek") || cfg.is("mixtral")) {  // DeepSeek-V2/V3 (FP8 included) and Mixtral: families/deepseek/import.hpp
        w.tensors = canonicalize_hf_deepseek(raw, cfg);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is("gpt_oss")) {  // families/gpt_oss/import.hpp (MXFP4 experts dequantised)
        w.tensors = import_hf_gpt_oss(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is("llama4")) {  // families/llama4/import.hpp (text model; the vision tower is ignored)
        w.tensors = import_hf_llama4(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is("gemma4") || cfg.is("gemma4_small")) {  // families/gemma4/import.hpp (text model; MaxText's converter's mapping)
        w.tensors = import_hf_gemma4(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is_qwen3_hybrid()) {  // families/qwen3_next/import.hpp (Qwen3-Next and Qwen3.5 names)
        w.tensors = import_hf_qwen3_next(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      const std::string cj = detail::config_json_beside(path);
      if (is_gemma_block(cfg)) {  // families/gemma/import.hpp: norms 1 + w, embedding and query scales folded in
        const nlohmann::json j = cj.empty() ? nlohmann::json() : nlohmann::json::parse(read_text_file(cj));
        w.tensors = import_hf_gemma(raw, cfg, hf_gemma_query_scale(j, cfg), "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      const bool tied = cj.empty() ? !raw.has("lm_head.weight") : hf_tied_embeddings(cj);
      if (cfg.is("olmo3")) {  // Olmo3ForCausalLM names (families/model_import.hpp import_olmo3_names)
        w.tensors = import_olmo3_names(raw, cfg, true, tied, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      w.tensors = import_hf_names(raw, cfg, tied, "hf " + path);
      w.naming = WeightNaming::hf;
      return w;
    }
    case WeightFormat::maxtext_safetensors: {
      TensorMap raw = read_safetensors_any(path);
      w.file_weight_type = native_weight_type(raw);
      w.tensors = canonicalize_maxtext(raw, cfg);
      return w;
    }
  }
  return w;
}
#else
LoadedWeights load_weights(const std::string& path_in, const Config& cfg, bool keep_blocks = false);
#endif

}  // namespace maxtext::io
