// families/checkpoint.hpp: bring a MaxText checkpoint's tensor names into the canonical form the models load:
// MaxText parameter paths joined by '.', unscanned (`decoder.layers_3....`). The plain scanned stack is unstacked
// here; a family whose scanned tree differs (Gemma 3's and Gemma 4's blocks, the cycles of OLMo 3, GPT-OSS, Llama 4,
// Envy and Qwen3-Next, DeepSeek's groups and Engram runs, DeepSeek-V4's pairs) unstacks it in its family.hpp, and the
// llama2 family collapses learn-to-init factors there. Spec weights-naming.md §Conventions.
#pragma once

#include <cstdint>
#include <string>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/families/families.hpp"
#include "maxtext/families/scan.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// Canonicalise a MaxText-named checkpoint: normalise separators, strip `params`, and unstack scanned layers
/// (`decoder.layers.X` with the layer axis at `param_scan_axis`, or the family's own scanned tree) into
/// `decoder.layers_i.X` views (no copy); then the family's last step (llama2lti: learn-to-init factors collapsed into
/// kernels, families/llama2/lti.hpp).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API TensorMap canonicalize_maxtext(const TensorMap& in, const Config& cfg) {
  TensorMap out;
  out.metadata = in.metadata;
  const auto groups = families::scanned_groups(cfg);
  const int axis = static_cast<int>(cfg.param_scan_axis);
  for (const auto& [raw, t] : in.tensors) {
    const std::string name = normalize_maxtext_name(raw);
    if (families::unstack_scanned(name, t, cfg, out)) continue;
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
  families::finish_maxtext(out, cfg);
  return out;
}
#else
TensorMap canonicalize_maxtext(const TensorMap& in, const Config& cfg);
#endif

}  // namespace maxtext::io
