// families/deepseek4/family.hpp: the DeepSeek-V4 family as the format-level code sees it (families/families.hpp):
// MaxText checkpoints only, with its scanned tree of HCA / CSA layer pairs after the hash-routed layers.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/deepseek4/deepseek4.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// DeepSeek-V4's scanned layout (decoders.py _apply_deepseek4_scanned_blocks, deepseek4.py DeepSeek4ScannableBlock):
/// layers i < first_num_hash_layers stay `decoder.layers_i.X`; the rest are nn.scan'ed pairs named `scanned_blocks`
/// whose `layers_0` is an HCA layer (compress ratio 128) and `layers_1` a CSA layer (4), whatever compress_ratios
/// says: `decoder.scanned_blocks.layers_s.X` [.., (L - first_num_hash_layers) / 2, ..] (on param_scan_axis) stacks
/// layers first_num_hash_layers + 2 m + s. Such a checkpoint is refused unless compress_ratios matches that pattern.
inline bool canonicalize_deepseek4_scanned(const std::string& name, const AnyTensor& t, const Config& cfg,
                                           TensorMap& out) {
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
                t.describe(), ": expected ", reps,
                " blocks ((num_decoder_layers - first_num_hash_layers) / 2) on axis ", axis, " (param_scan_axis)");
  const std::string rest = name.substr(dot + 1);
  for (std::int64_t m = 0; m < reps; ++m) {
    AnyTensor v = t.select(axis, m);
    v.source = t.source + "[block " + std::to_string(m) + "]";
    out.add("decoder.layers_" + std::to_string(first + 2 * m + s) + "." + rest, std::move(v));
  }
  return true;
}

}  // namespace maxtext::io

namespace maxtext::families {

using io::TensorMap;

struct DeepSeek4 {
  static constexpr std::array<std::string_view, 1> blocks{"deepseek4"};

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return io::canonicalize_deepseek4_scanned(name, t, cfg, out);
  }
};

}  // namespace maxtext::families
