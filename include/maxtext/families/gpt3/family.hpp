// families/gpt3/family.hpp: the GPT-3 family as the format-level code sees it (families/families.hpp): MaxText
// checkpoints only.
#pragma once

#include <array>
#include <string_view>

#include "maxtext/families/gpt3/gpt3.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Gpt3 {
  static constexpr std::array<std::string_view, 1> blocks{"gpt3"};
};

}  // namespace maxtext::families
