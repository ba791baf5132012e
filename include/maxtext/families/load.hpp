// families/load.hpp: read a weights file of any supported format (io/weights.hpp) for a model of any family, and
// return its tensors in canonical MaxText naming, plus what the file says about the model (a Config, when it carries
// one) and the naming scheme it used. The family that owns the config's decoder_block maps the names (its
// families/<family>/family.hpp, through the family list families/families.hpp), or refuses a format it does not read
// by name; MaxText's own checkpoint layout is canonicalised by families/checkpoint.hpp.
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
#include "maxtext/families/families.hpp"
#include "maxtext/families/model_import.hpp"
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
/// mapping as it is, with no second copy (a head tied to the embedding adds its BF16-rounded table). Otherwise, and
/// by default, blocks are decoded to f32. `populate` (with keep_blocks): map the
/// kept pages now, as one process reads them all; false for a pipeline stage (models/parallel.hpp), which reads only
/// its own layers' pages: the others are not kept resident (io::keep_block_tensors).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API LoadedWeights load_weights(const std::string& path_in, const Config& cfg, bool keep_blocks = false,
                                       bool populate = true) {
  const std::string path = detail::resolve_weights_path(path_in);
  MAXTEXT_CHECK(std::filesystem::exists(path), IoError, "[weights] ", path, ": no such file");
  LoadedWeights w;
  w.path = path;
  w.format = detect_weight_format(path);
  switch (w.format) {
    case WeightFormat::gguf: {
      GgufFile g = read_gguf(path);
      if (!families::gguf_mxfp4_experts(cfg)) {
        for (const auto& info : g.infos) {
          MAXTEXT_CHECK(info.ggml_type != 39, UnsupportedError, "[gguf] ", path, ": tensor ", info.name,
                        ": ggml type MXFP4 is only supported for gpt-oss expert tensors");
        }
      }
      // A file of F32 / F16 / BF16 matrices only is read in place too. A head tied to the embedding then multiplies
      // by BF16 rows of the table's values rounded as MaxText's attend rounds them (layers/embeddings.hpp
      // bf16_rounded_copy; docs/numerics.md), the lookup reads the file's rows.
      if (keep_blocks && gguf_keeps_blocks(cfg)) {
        keep_block_tensors(g, populate);  // blocks and F32 / F16 / BF16 rows computed from as they lie (ggml_byte)
        w.file_weight_type = "ggml";
      } else {
        dequantize_block_tensors(g);  // Q4_K, Q6_K, ... become f32 (exact mode); the model stores its weight type
        w.file_weight_type = native_weight_type(g.tensors);
      }
      w.tensors = families::import_gguf(g, cfg, path);  // the family's names (families/<family>/family.hpp)
      return w;
    }
    case WeightFormat::llama2c: {
      const Llama2cCheckpoint ck = read_llama2c(path);
      w.tensors = families::import_llama2c(ck.tensors, cfg, path);
      return w;
    }
    case WeightFormat::hf_safetensors: {
      const TensorMap raw = read_safetensors_any(path);
      w.file_weight_type = native_weight_type(raw);
      w.tensors = families::import_hf(raw, cfg, path, detail::config_json_beside(path));
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
LoadedWeights load_weights(const std::string& path_in, const Config& cfg, bool keep_blocks = false,
                           bool populate = true);
#endif

}  // namespace maxtext::io
