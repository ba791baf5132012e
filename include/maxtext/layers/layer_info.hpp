// layers/layer_info.hpp: where a decoder layer sits in the model, and the names its outputs are captured under.
#pragma once

#include <cstdint>
#include <string>

namespace maxtext::layers {

/// Names follow the naming scheme of the loaded weights (MaxText "decoder.layers_3", Hugging Face "model.layers.3").
/// A layer's own name stands for its output (the residual stream after it); `attention` and `mlp` for the outputs of
/// those sub-modules (before their residual add).
struct LayerInfo {
  std::int64_t index = 0;
  std::string name;
  std::string attention;
  std::string mlp;
};

}  // namespace maxtext::layers
