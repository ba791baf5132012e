// io/weights.hpp: open a weights file of any supported format and return its tensors in canonical MaxText naming,
// plus what the file says about the model (a Config, when it carries one) and the naming scheme it used.
// Formats: MaxText-named safetensors (single file or sharded index), Hugging Face safetensors (single, sharded, or a
// directory; config.json beside them), GGUF (.gguf), llama2.c checkpoints (.bin).
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/checkpoint.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/hf_deepseek.hpp"
#include "maxtext/io/hf_gemma.hpp"
#include "maxtext/io/llama2c.hpp"
#include "maxtext/io/model_import.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

enum class WeightNaming : std::uint8_t { maxtext, hf };
enum class WeightFormat : std::uint8_t { maxtext_safetensors, hf_safetensors, gguf, llama2c };

struct LoadedWeights {
  TensorMap tensors;            ///< canonical MaxText names, unscanned
  WeightNaming naming = WeightNaming::maxtext;  ///< hf: the file used Hugging Face names (capture with HF names)
  WeightFormat format = WeightFormat::maxtext_safetensors;
  std::string path;
  /// The storage that keeps the file's matrices as the file stores them (native_weight_type of its tensors before
  /// import: "float16", "bfloat16", "q8_0" or ""). Matrices the importer rescales (queries folded with
  /// 1/sqrt(head_dim), Gemma's embedding with sqrt(emb_dim)) are float32 in `tensors` and round once to it.
  std::string file_weight_type;
};

inline bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

namespace detail {
inline bool file_starts_with(const std::string& path, const char* magic, std::size_t n) {
  std::ifstream f(path, std::ios::binary);
  std::string buf(n, '\0');
  if (!f.read(buf.data(), static_cast<std::streamsize>(n))) return false;
  return std::memcmp(buf.data(), magic, n) == 0;
}
/// A directory holding a Hugging Face checkpoint: its index or single safetensors file.
inline std::string resolve_weights_path(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return path;
  for (const char* f : {"model.safetensors.index.json", "model.safetensors"}) {
    const auto p = std::filesystem::path(path) / f;
    if (std::filesystem::exists(p)) return p.string();
  }
  MAXTEXT_THROW(IoError, "[weights] ", path, ": directory has neither model.safetensors.index.json nor model.safetensors");
}
inline std::string config_json_beside(const std::string& weights) {
  const auto p = std::filesystem::path(weights).parent_path() / "config.json";
  return std::filesystem::exists(p) ? p.string() : std::string();
}
}  // namespace detail

/// The format of `path` (by extension, then by magic bytes).
inline WeightFormat detect_weight_format(const std::string& path_in) {
  const std::string path = detail::resolve_weights_path(path_in);
  MAXTEXT_CHECK(std::filesystem::exists(path), IoError, "[weights] ", path, ": no such file");
  if (ends_with(path, ".gguf") || detail::file_starts_with(path, "GGUF", 4)) return WeightFormat::gguf;
  if (ends_with(path, ".bin")) return WeightFormat::llama2c;
  if (ends_with(path, ".safetensors") || ends_with(path, ".json")) {
    const TensorMap raw = read_safetensors_any(path);
    return has_hf_names(raw) ? WeightFormat::hf_safetensors : WeightFormat::maxtext_safetensors;
  }
  MAXTEXT_THROW(UnsupportedError, "[weights] ", path, ": unknown weights format (expected .gguf, a llama2.c .bin, "
                ".safetensors, a model.safetensors.index.json, or a directory holding one)");
}

/// The model configuration the weights carry: GGUF metadata, the llama2.c header, or the config.json beside
/// Hugging Face safetensors. nullopt for MaxText safetensors (they need a MaxText YAML config).
inline std::optional<Config> read_weights_config(const std::string& path_in) {
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

/// Whether the GGUF importer for `cfg` passes runtime-typed blocks (Q4_K, Q6_K, ...) through to the model: the
/// Llama-family one (llama, mistral, qwen2, qwen3 dense files), the Gemma one (gemma, gemma2, gemma3: the embedding
/// normalizer and query scale ride as value_scale, io/hf_gemma.hpp) and OLMo 3's (olmo2 files: views only). Others
/// decode them to f32 at load. Keep in step with tools/blocks/CMakeLists.txt's _maxtext_policy_blocks_ggmlw.
inline bool gguf_keeps_blocks(const Config& cfg) {
#define MAXTEXT_KEEPS_BLOCKS(name) cfg.is(#name) ||
  return MAXTEXT_GGUF_KEEPS_BLOCKS(MAXTEXT_KEEPS_BLOCKS) false;  // the list: core/decoder_blocks.hpp
#undef MAXTEXT_KEEPS_BLOCKS
}

/// Whether `t` holds a block-quantised runtime-typed matrix (Q8_0, Q4_K, Q6_K, ...): what 8-bit activations apply to
/// (a GGUF file's F32 / F16 / BF16 rows are always multiplied exactly).
inline bool has_block_matrices(const TensorMap& t) {
  for (const auto& [name, a] : t.tensors) {
    if (a.dtype == DType::ggml && quant::block_format(a.ggml_type) != nullptr) return true;
  }
  return false;
}

/// Read `path` for the model `cfg` and return its tensors in canonical MaxText naming (unscanned). GGUF, llama2.c
/// and Hugging Face tensors are mapped (io/model_import.hpp); MaxText safetensors are canonicalised.
/// `keep_blocks`: a GGUF file's block-quantised tensors (Q4_K, Q6_K, Q4_0, ...) stay as they lie in the file
/// (DType::ggml views), and so do its F32 / F16 / BF16 matrices, for a model with runtime-typed weights (ggml_byte;
/// file_weight_type "ggml"), where the importer supports it (gguf_keeps_blocks): the model then reads the file's
/// mapping as it is, with no second copy. A file without blocks whose model ties its head (logits_via_embedding) is
/// not kept (see below). Otherwise, and by default, blocks are decoded to f32.
inline LoadedWeights load_weights(const std::string& path_in, const Config& cfg, bool keep_blocks = false) {
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
      if (is_gemma_block(cfg)) {  // io/hf_gemma.hpp: embedding scaled (blocks: as value_scale), norms already 1 + w
        w.tensors = import_gguf_gemma(g.tensors, cfg, "gguf " + path);
        return w;
      }
      if (cfg.is("olmo3")) {  // llama.cpp's olmo2 names (io/model_import.hpp import_olmo3_names)
        w.tensors = import_olmo3_names(g.tensors, cfg, false, !g.tensors.has("output.weight"), "gguf " + path);
        return w;
      }
      if (cfg.is("gpt_oss")) {  // io/hf_gpt_oss.hpp
        w.tensors = import_gguf_gpt_oss(g.tensors, cfg, "gguf " + path);
        return w;
      }
      MAXTEXT_CHECK(!cfg.is("gemma4_small"), UnsupportedError, "[gguf] ", path, ": decoder_block gemma4_small (Gemma 4 "
                    "E2B / E4B) is read from Hugging Face files, not GGUF yet");
      if (cfg.is("gemma4")) {  // io/hf_gemma4.hpp
        MAXTEXT_CHECK(g.get_string("general.architecture") == "gemma4", UnsupportedError, "[gguf] ", path,
                      ": decoder_block gemma4 reads GGUF architecture gemma4, found '",
                      g.get_string("general.architecture"), "'");
        w.tensors = import_gguf_gemma4(g.tensors, cfg, "gguf " + path);
        return w;
      }
      if (cfg.is_qwen3_hybrid()) {  // io/hf_qwen3_next.hpp
        const std::string want = cfg.is("qwen3_5") ? "qwen35moe" : "qwen3next";
        MAXTEXT_CHECK(g.get_string("general.architecture") == want, UnsupportedError, "[gguf] ", path, ": decoder_block ",
                      cfg.decoder_block, " reads GGUF architecture ", want, ", found '",
                      g.get_string("general.architecture"), "'");
        w.tensors = import_gguf_qwen3_next(g.tensors, cfg, "gguf " + path);
        return w;
      }
      if (cfg.is("llama4")) {  // io/hf_llama4.hpp
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
      if (cfg.is("deepseek") || cfg.is("mixtral")) {  // DeepSeek-V2/V3 (FP8 included) and Mixtral: io/hf_deepseek.hpp
        w.tensors = canonicalize_hf_deepseek(raw, cfg);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is("gpt_oss")) {  // io/hf_gpt_oss.hpp (MXFP4 experts dequantised)
        w.tensors = import_hf_gpt_oss(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is("llama4")) {  // io/hf_llama4.hpp (text model; the vision tower is ignored)
        w.tensors = import_hf_llama4(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is("gemma4") || cfg.is("gemma4_small")) {  // io/hf_gemma4.hpp (text model; MaxText's converter's mapping)
        w.tensors = import_hf_gemma4(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      if (cfg.is_qwen3_hybrid()) {  // io/hf_qwen3_next.hpp (Qwen3-Next and Qwen3.5 names)
        w.tensors = import_hf_qwen3_next(raw, cfg, "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      const std::string cj = detail::config_json_beside(path);
      if (is_gemma_block(cfg)) {  // io/hf_gemma.hpp: norms 1 + w, embedding and query scales folded in
        const nlohmann::json j = cj.empty() ? nlohmann::json() : nlohmann::json::parse(read_text_file(cj));
        w.tensors = import_hf_gemma(raw, cfg, hf_gemma_query_scale(j, cfg), "hf " + path);
        w.naming = WeightNaming::hf;
        return w;
      }
      const bool tied = cj.empty() ? !raw.has("lm_head.weight") : hf_tied_embeddings(cj);
      if (cfg.is("olmo3")) {  // Olmo3ForCausalLM names (io/model_import.hpp import_olmo3_names)
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

}  // namespace maxtext::io
