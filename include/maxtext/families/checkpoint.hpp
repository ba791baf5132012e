// families/checkpoint.hpp: bring a checkpoint's tensor names into the canonical form the models load: MaxText parameter
// paths joined by '.', unscanned (`decoder.layers_3....`). Spec weights-naming.md §Conventions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/families/llama2/lti.hpp"
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

/// Names of the scanned layer groups and how many layers each holds.
inline std::vector<std::pair<std::string, std::int64_t>> scanned_groups(const Config& cfg) {
  if (cfg.is("deepseek")) {
    return {{"dense_layers", cfg.first_num_dense_layers}, {"moe_layers", cfg.num_decoder_layers - cfg.first_num_dense_layers}};
  }
  return {{"layers", cfg.num_decoder_layers}};
}

/// Gemma 3's scanned layout (decoders.py _apply_gemma3_scanned_blocks): `decoder.layers.layers_j.X` stacks layers
/// j, j+6, j+12, ... (num_layers // 6 of them, on param_scan_axis); `decoder.layers_remainder.layers_r.X` is layer
/// (num_layers // 6) * 6 + r, unstacked. Adds the per-layer views to `out`; false when `name` is neither.
inline bool canonicalize_gemma3_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
  constexpr std::int64_t pattern = 6;  // len(GEMMA3_ATTENTION_PATTERN)
  const std::int64_t reps = cfg.num_decoder_layers / pattern, rem = cfg.num_decoder_layers % pattern;
  auto sub_index = [&](const std::string& pre, std::int64_t limit, std::string& rest) -> std::int64_t {
    const std::string head = pre + "layers_";
    if (name.compare(0, head.size(), head) != 0) return -1;
    const std::size_t dot = name.find('.', head.size());
    const std::string digits = name.substr(head.size(), dot == std::string::npos ? std::string::npos : dot - head.size());
    MAXTEXT_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && dot != std::string::npos,
                  ShapeError, "[checkpoint] ", t.source, ": scanned Gemma 3 tensor ", name, " is not ", head, "<j>.<param>");
    const std::int64_t j = std::stoll(digits);
    MAXTEXT_CHECK(j < limit, ShapeError, "[checkpoint] ", t.source, ": scanned Gemma 3 tensor ", name, ": sub-layer ", j,
                  " outside [0, ", limit, ") for num_decoder_layers ", cfg.num_decoder_layers);
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

/// Gemma 4's scanned layout (decoders.py _apply_gemma4_scanned_blocks, gemma4.py Gemma4ScannableBlock; the tree
/// MaxText's checkpoint converter writes, param_mapping.py GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING): num_layers // 6 blocks
/// stacked by nn.scan on param_scan_axis, each holding `local_layers` (its five sliding-window layers, stacked again by
/// nnx_scan.create_scanned_layers on param_scan_axis, so right after the block axis) and `global_layer`:
/// `decoder.scanned_blocks.local_layers.X` [.., blocks, 5, ..] is layer 6b + j, `decoder.scanned_blocks.global_layer.X`
/// [.., blocks, ..] is layer 6b + 5, and `decoder.layers_remainder.layers_r.X` the unscanned layer 6 * blocks + r.
/// Adds the per-layer views to `out`; false when `name` is none of these.
inline bool canonicalize_gemma4_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
  constexpr std::int64_t pattern = 6;  // len(GEMMA4_ATTENTION_PATTERN)
  const std::int64_t blocks = cfg.num_decoder_layers / pattern, rem = cfg.num_decoder_layers % pattern;
  const std::string where = "[checkpoint] " + t.source + ": scanned Gemma 4 tensor " + name;
  const std::string rpre = "decoder.layers_remainder.layers_";
  if (name.compare(0, rpre.size(), rpre) == 0) {
    const std::size_t dot = name.find('.', rpre.size());
    const std::string digits = name.substr(rpre.size(), dot == std::string::npos ? std::string::npos : dot - rpre.size());
    MAXTEXT_CHECK(!digits.empty() && digits.size() < 10 && digits.find_first_not_of("0123456789") == std::string::npos &&
                      dot != std::string::npos,
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
                ShapeError, where, " ", t.describe(), ": expected ", blocks, " blocks (num_decoder_layers // 6) on axis ",
                axis, " (param_scan_axis)", local ? " followed by the block's 5 local layers" : "");
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

/// DeepSeek's scanned layout with Engram layers (decoders.py _apply_interleaved_scanned_layers): an Engram layer i
/// stays unscanned as `decoder.{dense,moe}_layers_engram_i.X`; each run of the other layers a..b of a group (global
/// indices, split at the Engram layers) is its own scan, `decoder.{dense,moe}_layers_a_b.X` with b - a + 1 layers on
/// param_scan_axis. Both become the unscanned `decoder.dense_layers_i` / `decoder.moe_layers_(i - first_num_dense_layers)`.
inline bool canonicalize_deepseek_engram_scanned(const std::string& name, const AnyTensor& t, const Config& cfg,
                                                 TensorMap& out) {
  const std::int64_t dense = cfg.first_num_dense_layers, L = cfg.num_decoder_layers;
  for (const bool moe : {false, true}) {
    const std::string group = moe ? "moe_layers" : "dense_layers", head = "decoder." + group + "_";
    if (name.compare(0, head.size(), head) != 0) continue;
    const std::string where = "[checkpoint] " + t.source + ": scanned DeepSeek tensor " + name;
    const std::size_t dot = name.find('.', head.size());
    if (dot == std::string::npos) return false;
    const std::string key = name.substr(head.size(), dot - head.size()), rest = name.substr(dot + 1);
    const auto number = [&](const std::string& d) {
      MAXTEXT_CHECK(!d.empty() && d.size() < 10 && d.find_first_not_of("0123456789") == std::string::npos, ShapeError,
                    where, ": expected ", head, "<i>, ", head, "engram_<i> or ", head, "<a>_<b>");
      return std::stoll(d);
    };
    const auto target = [&](std::int64_t i) {
      MAXTEXT_CHECK(moe ? (i >= dense && i < L) : (i >= 0 && i < dense), ShapeError, where, ": layer ", i,
                    " is not a ", moe ? "MoE" : "dense", " layer (first_num_dense_layers ", dense, ", num_decoder_layers ",
                    L, ")");
      return "decoder." + group + "_" + std::to_string(moe ? i - dense : i) + "." + rest;
    };
    const std::string engram = "engram_";
    if (key.compare(0, engram.size(), engram) == 0) {
      out.add(target(number(key.substr(engram.size()))), t);
      return true;
    }
    const std::size_t us = key.find('_');
    if (us == std::string::npos) return false;  // decoder.<group>_<i>: already unscanned
    const std::int64_t a = number(key.substr(0, us)), b = number(key.substr(us + 1));
    const int axis = static_cast<int>(cfg.param_scan_axis);
    MAXTEXT_CHECK(b >= a && axis >= 0 && axis < t.rank() && t.shape[static_cast<std::size_t>(axis)] == b - a + 1,
                  ShapeError, where, " ", t.describe(), ": expected ", b - a + 1, " layers (", a, " to ", b, ") on axis ",
                  axis, " (param_scan_axis)");
    for (std::int64_t i = a; i <= b; ++i) {
      AnyTensor v = t.select(axis, i - a);
      v.source = t.source + "[layer " + std::to_string(i) + "]";
      out.add(target(i), std::move(v));
    }
    return true;
  }
  return false;
}

/// DeepSeek-V4's scanned layout (decoders.py _apply_deepseek4_scanned_blocks, deepseek4.py DeepSeek4ScannableBlock):
/// layers i < first_num_hash_layers stay `decoder.layers_i.X`; the rest are nn.scan'ed pairs named `scanned_blocks`
/// whose `layers_0` is an HCA layer (compress ratio 128) and `layers_1` a CSA layer (4), whatever compress_ratios
/// says: `decoder.scanned_blocks.layers_s.X` [.., (L - first_num_hash_layers) / 2, ..] (on param_scan_axis) stacks
/// layers first_num_hash_layers + 2 m + s. Such a checkpoint is refused unless compress_ratios matches that pattern.
inline bool canonicalize_deepseek4_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
  const std::string head = "decoder.scanned_blocks.layers_";
  if (name.compare(0, head.size(), head) != 0) return false;
  const std::string where = "[checkpoint] " + t.source + ": scanned DeepSeek-V4 tensor " + name;
  const std::size_t dot = name.find('.', head.size());
  const std::string digit = name.substr(head.size(), dot == std::string::npos ? std::string::npos : dot - head.size());
  MAXTEXT_CHECK((digit == "0" || digit == "1") && dot != std::string::npos, ShapeError, where, " is not ", head,
                "{0,1}.<param>");
  const std::int64_t s = digit == "1" ? 1 : 0, first = cfg.first_num_hash_layers, L = cfg.num_decoder_layers;
  const std::vector<std::int64_t> ratios = cfg.compress_ratios();
  MAXTEXT_CHECK((L - first) % 2 == 0, UnsupportedError, where, ": MaxText scans the ", L - first, " layers after the ",
                first, " hash-routed ones in pairs; an odd count leaves its last layer out of the scanned model");
  for (std::int64_t i = first; i < L; ++i) {
    const std::int64_t want = (i - first) % 2 == 0 ? 128 : 4;
    MAXTEXT_CHECK(static_cast<std::size_t>(i) < ratios.size() && ratios[static_cast<std::size_t>(i)] == want,
                  UnsupportedError, where, ": the scanned blocks are HCA (128) / CSA (4) pairs, but compress_ratios ",
                  ratios, " gives layer ", i, " another ratio; load the unscanned layout instead");
  }
  const std::int64_t reps = (L - first) / 2;
  int axis = static_cast<int>(cfg.param_scan_axis);
  // The routing bias is an MoEBiasVar, not an nnx.Param: the scan stacks it on axis 0 (nnx_scan.create_scanned_layers
  // puts every non-Param leaf there), so it arrives as [blocks, E].
  const std::string bias = "mlp.MoeBlock_0.gate.bias";
  if (name.size() > bias.size() && name.compare(name.size() - bias.size(), bias.size(), bias) == 0) axis = 0;
  MAXTEXT_CHECK(axis >= 0 && axis < t.rank() && t.shape[static_cast<std::size_t>(axis)] == reps, ShapeError, where, " ",
                t.describe(), ": expected ", reps, " blocks ((num_decoder_layers - first_num_hash_layers) / 2) on axis ",
                axis, " (param_scan_axis)");
  const std::string rest = name.substr(dot + 1);
  for (std::int64_t m = 0; m < reps; ++m) {
    AnyTensor v = t.select(axis, m);
    v.source = t.source + "[block " + std::to_string(m) + "]";
    out.add("decoder.layers_" + std::to_string(first + 2 * m + s) + "." + rest, std::move(v));
  }
  return true;
}

/// Canonicalise a MaxText-named checkpoint: normalise separators, strip `params`, and unstack scanned layers
/// (`decoder.layers.X` with the layer axis at `param_scan_axis`) into `decoder.layers_i.X` views (no copy); for
/// llama2lti, collapse learn-to-init attention factors into kernels (families/llama2/lti.hpp).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API TensorMap canonicalize_maxtext(const TensorMap& in, const Config& cfg) {
  TensorMap out;
  out.metadata = in.metadata;
  const auto groups = scanned_groups(cfg);
  const int axis = static_cast<int>(cfg.param_scan_axis);
  for (const auto& [raw, t] : in.tensors) {
    const std::string name = normalize_maxtext_name(raw);
    if (cfg.is("gemma3") && canonicalize_gemma3_scanned(name, t, cfg, out)) continue;
    if (cfg.is("gemma4") && canonicalize_gemma4_scanned(name, t, cfg, out)) continue;
    if (cfg.is("deepseek4") && canonicalize_deepseek4_scanned(name, t, cfg, out)) continue;
    if (cfg.is("deepseek") && !cfg.engram_layers().empty() && canonicalize_deepseek_engram_scanned(name, t, cfg, out)) {
      continue;
    }
    if (cfg.is("olmo3") && canonicalize_cycle_scanned(name, t, cfg, out, "OLMo 3", 4)) continue;
    if (cfg.is("gpt_oss") && canonicalize_cycle_scanned(name, t, cfg, out, "GPT-OSS")) continue;
    if (cfg.is("llama4") && canonicalize_cycle_scanned(name, t, cfg, out, "Llama 4")) continue;
    if (cfg.is("envy") && canonicalize_cycle_scanned(name, t, cfg, out, "Envy")) continue;
    // Qwen3NextScannableBlock names its sub-layers `layer_j` (not `layers_j`).
    if (cfg.is_qwen3_hybrid() && canonicalize_cycle_scanned(name, t, cfg, out, "Qwen3-Next", 0, "layer_")) continue;
    bool unstacked = false;
    for (const auto& [group, count] : groups) {
      const std::string pre = "decoder." + group + ".";
      if (name.compare(0, pre.size(), pre) != 0) continue;
      MAXTEXT_CHECK(axis >= 0 && axis < t.rank(), ShapeError, "[checkpoint] ", t.source, ": scanned tensor ", name, " ",
                    t.describe(), " has no layer axis ", axis, " (param_scan_axis)");
      MAXTEXT_CHECK(t.shape[static_cast<std::size_t>(axis)] == count, ShapeError, "[checkpoint] ", t.source, ": scanned tensor ",
                    name, " ", t.describe(), ": expected ", count, " layers on axis ", axis, ", found ",
                    t.shape[static_cast<std::size_t>(axis)]);
      const std::string rest = name.substr(pre.size());
      for (std::int64_t i = 0; i < count; ++i) {
        AnyTensor s = t.select(axis, i);
        s.source = t.source + "[layer " + std::to_string(i) + "]";
        out.add("decoder." + group + "_" + std::to_string(i) + "." + rest, std::move(s));
      }
      unstacked = true;
      break;
    }
    if (!unstacked) out.add(name, t);
  }
  // families/llama2/lti.hpp: learn-to-init factors -> plain kernels, for decoder_block llama2lti or MaxText's own spelling of it
  // (the llama2 block with learn_to_init_mode: true).
  const auto lti = cfg.extra.find("learn_to_init_mode");
  if (cfg.is("llama2lti") || (cfg.is("llama2") && lti != cfg.extra.end() && ::maxtext::detail::truthy(lti->second))) {
    collapse_lti_factors(out);
  }
  return out;
}
#else
TensorMap canonicalize_maxtext(const TensorMap& in, const Config& cfg);
#endif

}  // namespace maxtext::io
