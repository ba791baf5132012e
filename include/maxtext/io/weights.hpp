// io/weights.hpp: the weight-file formats, told apart: MaxText-named safetensors (single file or sharded index),
// Hugging Face safetensors (single, sharded, or a directory; config.json beside them), GGUF (.gguf), llama2.c
// checkpoints (.bin); and what a load returns (LoadedWeights). Reading a file for a model, which needs the model
// family's importer, is families/load.hpp (io::load_weights, io::read_weights_config).
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/core/macros.hpp"
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

/// Whether a checkpoint's tensors carry Hugging Face names (model.embed_tokens.weight, ...) rather than MaxText's.
inline bool has_hf_names(const TensorMap& t) {
  return t.has("model.embed_tokens.weight") || t.has("model.norm.weight") || t.has("lm_head.weight") ||
         t.has("language_model.model.embed_tokens.weight") || t.has("language_model.lm_head.weight") ||
         t.has("model.language_model.embed_tokens.weight") || t.has("thinker.model.embed_tokens.weight");
}

/// The format of `path` (by extension, then by magic bytes).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API WeightFormat detect_weight_format(const std::string& path_in) {
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
#else
WeightFormat detect_weight_format(const std::string& path_in);
#endif

/// Whether `t` holds a block-quantised runtime-typed matrix (Q8_0, Q4_K, Q6_K, ...): what 8-bit activations apply to
/// (a GGUF file's F32 / F16 / BF16 rows are always multiplied exactly).
inline bool has_block_matrices(const TensorMap& t) {
  for (const auto& [name, a] : t.tensors) {
    if (a.dtype == DType::ggml && quant::block_format(a.ggml_type) != nullptr) return true;
  }
  return false;
}

}  // namespace maxtext::io
