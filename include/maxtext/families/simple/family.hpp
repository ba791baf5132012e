// families/simple/family.hpp: MaxText's test blocks simple and simple_mlp as the format-level code sees them
// (families/families.hpp): MaxText checkpoints only.
#pragma once

#include <array>
#include <string_view>

#include "maxtext/families/simple/simple_layer.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Simple {
  static constexpr std::array<std::string_view, 2> blocks{"simple", "simple_mlp"};
};

}  // namespace maxtext::families
