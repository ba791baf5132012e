// families/envy/family.hpp: the Envy family as the format-level code sees it (families/families.hpp): MaxText
// checkpoints only, with the scanned cycle of inhomogeneous_layer_cycle_interval layers (EnvyScannableBlock).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/families/envy/envy.hpp"
#include "maxtext/families/scan.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Envy {
  static constexpr std::array<std::string_view, 1> blocks{"envy"};

  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return io::canonicalize_cycle_scanned(name, t, cfg, out, "Envy");
  }
};

}  // namespace maxtext::families
