// families/gemma4/family.hpp: the Gemma 4 family (MaxText's gemma4 block, and gemma4_small for E2B / E4B) as the
// format-level code sees it (families/families.hpp): config.json types gemma4 / gemma4_text, llama.cpp's gemma4 GGUF
// files (gemma4 only), and the scanned tree of blocks of five local layers and one global layer.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/gemma4/gemma4.hpp"
#include "maxtext/families/gemma4/gemma4_small.hpp"
#include "maxtext/families/gemma4/import.hpp"
#include "maxtext/families/hooks.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// Gemma 4's scanned layout (decoders.py _apply_gemma4_scanned_blocks, gemma4.py Gemma4ScannableBlock; the tree
/// MaxText's checkpoint converter writes, param_mapping.py GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING): num_layers // 6 blocks
/// stacked by nn.scan on param_scan_axis, each holding `local_layers` (its five sliding-window layers, stacked again by
/// nnx_scan.create_scanned_layers on param_scan_axis, so right after the block axis) and `global_layer`:
/// `decoder.scanned_blocks.local_layers.X` [.., blocks, 5, ..] is layer 6b + j, `decoder.scanned_blocks.global_layer.X`
/// [.., blocks, ..] is layer 6b + 5, and `decoder.layers_remainder.layers_r.X` the unscanned layer 6 * blocks + r.
/// Adds the per-layer views to `out`; false when `name` is none of these.
inline bool canonicalize_gemma4_scanned(const std::string& name, const AnyTensor& t, const Config& cfg,
                                        TensorMap& out) {
  constexpr std::int64_t pattern = 6;  // len(GEMMA4_ATTENTION_PATTERN)
  const std::int64_t blocks = cfg.num_decoder_layers / pattern, rem = cfg.num_decoder_layers % pattern;
  const std::string where = "[checkpoint] " + t.source + ": scanned Gemma 4 tensor " + name;
  const std::string rpre = "decoder.layers_remainder.layers_";
  if (name.compare(0, rpre.size(), rpre) == 0) {
    const std::size_t dot = name.find('.', rpre.size());
    const std::string digits =
        name.substr(rpre.size(), dot == std::string::npos ? std::string::npos : dot - rpre.size());
    MAXTEXT_CHECK(!digits.empty() && digits.size() < 10 &&
                      digits.find_first_not_of("0123456789") == std::string::npos && dot != std::string::npos,
                  ShapeError, where, " is not ", rpre, "<r>.<param>");
    const std::int64_t r = std::stoll(digits);
    MAXTEXT_CHECK(r < rem, ShapeError, where, ": remainder layer ", r, " outside [0, ", rem, ") (num_decoder_layers ",
                  cfg.num_decoder_layers, " % 6)");
    out.add("decoder.layers_" + std::to_string(blocks * pattern + r) + "." + name.substr(dot + 1), t);
    return true;
  }
  const std::string pre = "decoder.scanned_blocks.";
  if (name.compare(0, pre.size(), pre) != 0) return false;
  const int axis = static_cast<int>(cfg.param_scan_axis);
  const std::string rest = name.substr(pre.size());
  const bool local = rest.compare(0, 13, "local_layers.") == 0, global = rest.compare(0, 13, "global_layer.") == 0;
  MAXTEXT_CHECK(local || global, ShapeError, where, " is neither ", pre, "local_layers.<param> nor ", pre,
                "global_layer.<param>");
  const std::string leaf = rest.substr(13);
  MAXTEXT_CHECK(blocks > 0 && axis >= 0 && axis + (local ? 1 : 0) < t.rank() &&
                    t.shape[static_cast<std::size_t>(axis)] == blocks &&
                    (!local || t.shape[static_cast<std::size_t>(axis + 1)] == pattern - 1),
                ShapeError, where, " ", t.describe(), ": expected ", blocks,
                " blocks (num_decoder_layers // 6) on axis ", axis, " (param_scan_axis)",
                local ? " followed by the block's 5 local layers" : "");
  for (std::int64_t b = 0; b < blocks; ++b) {
    const AnyTensor tb = t.select(axis, b);
    for (std::int64_t j = 0; j < (local ? pattern - 1 : 1); ++j) {
      AnyTensor s = local ? tb.select(axis, j) : tb;
      const std::int64_t layer = b * pattern + (local ? j : pattern - 1);
      s.source = t.source + "[block " + std::to_string(b) + (local ? ", local layer " + std::to_string(j) : "") + "]";
      out.add("decoder.layers_" + std::to_string(layer) + "." + leaf, std::move(s));
    }
  }
  return true;
}

}  // namespace maxtext::io

namespace maxtext::families {

using io::TensorMap;

struct Gemma4 {
  static constexpr std::array<std::string_view, 2> blocks{"gemma4", "gemma4_small"};
  static constexpr std::array<std::string_view, 2> hf_model_types{"gemma4", "gemma4_text"};
  static constexpr std::array<std::string_view, 1> gguf_architectures{"gemma4"};

  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    return io::config_from_hf_gemma4(j, where);
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_gemma4(g); }

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    MAXTEXT_CHECK(!cfg.is("gemma4_small"), UnsupportedError, "[gguf] ", g.path,
                  ": decoder_block gemma4_small (Gemma 4 "
                  "E2B / E4B) is read from Hugging Face files, not GGUF yet");
    require_gguf_architecture(g, cfg, "gemma4");
    return io::import_gguf_gemma4(g.tensors, cfg, where);
  }
  /// The text model, as MaxText's converter maps it.
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where, const std::string&) {
    return io::import_hf_gemma4(raw, cfg, where);
  }

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return cfg.is("gemma4") && io::canonicalize_gemma4_scanned(name, t, cfg, out);
  }
};

}  // namespace maxtext::families
