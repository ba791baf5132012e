// families/scan.hpp: MaxText's checkpoint names brought to the canonical form the models load (parameter paths joined
// by '.', unscanned `decoder.layers_3....`), and the scanned layout that several families share (a cycle of layers
// stacked on param_scan_axis). The families' own scanned layouts are in their family.hpp; families/checkpoint.hpp
// applies them. Spec weights-naming.md §Conventions.
#pragma once

#include <cstdint>
#include <string>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {


/// `params-decoder-layers_0-mlp-wi_0-kernel`, `params/decoder/...` or `params.decoder....` -> `decoder.layers_0....`.
/// DeepSeek-V4's non-Param variables live in collections named by their class (moe.py Tid2EidVar: the hash routing
/// table; MoEBiasVar: the routing bias), stripped the same way.
inline std::string normalize_maxtext_name(std::string n) {
  for (char& c : n) {
    if (c == '/' || c == '-') c = '.';
  }
  for (const char* pre : {"params.params.", "params.", "state.params.", "Tid2EidVar.", "MoEBiasVar."}) {
    const std::string p(pre);
    if (n.compare(0, p.size(), p) == 0) {
      n = n.substr(p.size());
      break;
    }
  }
  return n;
}

/// The scanned layout of the blocks that repeat a cycle of inhomogeneous_layer_cycle_interval (P) layers
/// (decoders.py: GPT-OSS's GptOssScannableBlock, Llama 4's Llama4ScannableBlock, OLMo 3's Olmo3ScannableBlock):
/// `decoder.layers.layers_j.X` (Qwen3-Next: `layer_j`, `sub`) for j in [0, P) stacks layers j, j + P, j + 2P, ... (num_layers / P repetitions, on
/// param_scan_axis; P must divide num_layers, Config::validate). Adds the per-layer views; false when `name` is not one. `block` names the block in
/// messages; `period` is P when the block fixes it (OLMo 3: len(OLMO3_ATTENTION_PATTERN) = 4), else
/// inhomogeneous_layer_cycle_interval.
inline bool canonicalize_cycle_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out,
                                       const char* block, std::int64_t period = 0, const char* sub = "layers_") {
  const std::string head = std::string("decoder.layers.") + sub;
  if (name.compare(0, head.size(), head) != 0) return false;
  const std::int64_t pattern = period > 0 ? period : cfg.inhomogeneous_layer_cycle_interval;
  const std::int64_t reps = pattern > 0 ? cfg.num_decoder_layers / pattern : 0;
  const std::size_t dot = name.find('.', head.size());
  const std::string digits = name.substr(head.size(), dot == std::string::npos ? std::string::npos : dot - head.size());
  MAXTEXT_CHECK(!digits.empty() && digits.size() < 10 && digits.find_first_not_of("0123456789") == std::string::npos &&
                    dot != std::string::npos,
                ShapeError, "[checkpoint] ", t.source, ": scanned ", block, " tensor ", name, " is not ", head, "<j>.<param>");
  const std::int64_t j = std::stoll(digits);
  MAXTEXT_CHECK(j < pattern, ShapeError, "[checkpoint] ", t.source, ": scanned ", block, " tensor ", name, ": sub-layer ", j,
                " outside [0, ", pattern, ") (inhomogeneous_layer_cycle_interval)");
  const int axis = static_cast<int>(cfg.param_scan_axis);
  MAXTEXT_CHECK(axis >= 0 && axis < t.rank() && t.shape[static_cast<std::size_t>(axis)] == reps, ShapeError,
                "[checkpoint] ", t.source, ": scanned ", block, " tensor ", name, " ", t.describe(), ": expected ", reps,
                " repetitions (num_decoder_layers / ",
                period > 0 ? std::to_string(period) : std::string("inhomogeneous_layer_cycle_interval"), ") on axis ", axis,
                " (param_scan_axis)");
  const std::string rest = name.substr(dot + 1);
  for (std::int64_t i = 0; i < reps; ++i) {
    AnyTensor s = t.select(axis, i);
    s.source = t.source + "[repetition " + std::to_string(i) + "]";
    out.add("decoder.layers_" + std::to_string(i * pattern + j) + "." + rest, std::move(s));
  }
  return true;
}

}  // namespace maxtext::io
