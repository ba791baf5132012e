// families/gemma/family.hpp: the Gemma family (MaxText's gemma, gemma2 and gemma3 blocks) as the format-level code
// sees it (families/families.hpp): config.json types gemma, gemma2, gemma3_text (and gemma3, refused with a message),
// llama.cpp's gemma / gemma2 / gemma3 GGUF files, and Gemma 3's scanned tree (blocks of six layers plus a remainder).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/gemma/gemma.hpp"
#include "maxtext/families/gemma/gemma2.hpp"
#include "maxtext/families/gemma/gemma3.hpp"
#include "maxtext/families/gemma/import.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// Gemma 3's scanned layout (decoders.py _apply_gemma3_scanned_blocks): `decoder.layers.layers_j.X` stacks layers
/// j, j+6, j+12, ... (num_layers // 6 of them, on param_scan_axis); `decoder.layers_remainder.layers_r.X` is layer
/// (num_layers // 6) * 6 + r, unstacked. Adds the per-layer views to `out`; false when `name` is neither.
inline bool canonicalize_gemma3_scanned(const std::string& name, const AnyTensor& t, const Config& cfg,
                                        TensorMap& out) {
  constexpr std::int64_t pattern = 6;  // len(GEMMA3_ATTENTION_PATTERN)
  const std::int64_t reps = cfg.num_decoder_layers / pattern, rem = cfg.num_decoder_layers % pattern;
  auto sub_index = [&](const std::string& pre, std::int64_t limit, std::string& rest) -> std::int64_t {
    const std::string head = pre + "layers_";
    if (name.compare(0, head.size(), head) != 0) return -1;
    const std::size_t dot = name.find('.', head.size());
    const std::string digits =
        name.substr(head.size(), dot == std::string::npos ? std::string::npos : dot - head.size());
    MAXTEXT_CHECK(
        !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && dot != std::string::npos,
        ShapeError, "[checkpoint] ", t.source, ": scanned Gemma 3 tensor ", name, " is not ", head, "<j>.<param>");
    const std::int64_t j = std::stoll(digits);
    MAXTEXT_CHECK(j < limit, ShapeError, "[checkpoint] ", t.source, ": scanned Gemma 3 tensor ", name, ": sub-layer ",
                  j, " outside [0, ", limit, ") for num_decoder_layers ", cfg.num_decoder_layers);
    rest = name.substr(dot + 1);
    return j;
  };
  std::string rest;
  if (const std::int64_t j = sub_index("decoder.layers.", pattern, rest); j >= 0) {
    const int axis = static_cast<int>(cfg.param_scan_axis);
    MAXTEXT_CHECK(axis >= 0 && axis < t.rank() && t.shape[static_cast<std::size_t>(axis)] == reps, ShapeError,
                  "[checkpoint] ", t.source, ": scanned Gemma 3 tensor ", name, " ", t.describe(), ": expected ", reps,
                  " repetitions (num_decoder_layers // 6) on axis ", axis, " (param_scan_axis)");
    for (std::int64_t i = 0; i < reps; ++i) {
      AnyTensor s = t.select(axis, i);
      s.source = t.source + "[repetition " + std::to_string(i) + "]";
      out.add("decoder.layers_" + std::to_string(i * pattern + j) + "." + rest, std::move(s));
    }
    return true;
  }
  if (const std::int64_t r = sub_index("decoder.layers_remainder.", rem, rest); r >= 0) {
    out.add("decoder.layers_" + std::to_string(reps * pattern + r) + "." + rest, t);
    return true;
  }
  return false;
}

}  // namespace maxtext::io

namespace maxtext::families {

using io::TensorMap;

struct Gemma {
  static constexpr std::array<std::string_view, 3> blocks{"gemma", "gemma2", "gemma3"};
  static constexpr std::array<std::string_view, 4> hf_model_types{"gemma", "gemma2", "gemma3_text", "gemma3"};
  static constexpr std::array<std::string_view, 3> gguf_architectures{"gemma", "gemma2", "gemma3"};

  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    return io::config_from_hf_gemma(j, where);
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_gemma(g); }

  /// The embedding scaled (blocks: as value_scale), the norms already 1 + w.
  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    return io::import_gguf_gemma(g.tensors, cfg, where);
  }
  /// Norms 1 + w, the embedding and query scales folded in (the query scale from config.json).
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where,
                             const std::string& config_json) {
    const nlohmann::json j =
        config_json.empty() ? nlohmann::json() : nlohmann::json::parse(io::read_text_file(config_json));
    return io::import_hf_gemma(raw, cfg, io::hf_gemma_query_scale(j, cfg), where);
  }

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return cfg.is("gemma3") && io::canonicalize_gemma3_scanned(name, t, cfg, out);
  }
};

}  // namespace maxtext::families
