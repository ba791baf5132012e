// models/media.hpp: a prompt with pictures (or other media) as the decoder takes them: the token ids with each
// picture's placeholders, where the soft tokens are, and their rows in the text model's embedding space
// (ForwardOptions / Session media_mask and media_embeddings; MaxText's multimodal merge). A family's picture code
// (families/gemma/pictures.hpp) makes one; sessions and the server (server/engine.hpp) take it.
#pragma once

#include <cstdint>
#include <vector>

#include "maxtext/core/tensor.hpp"

namespace maxtext::models {

struct MediaPrompt {
  std::vector<std::int32_t> ids;  ///< the prompt, each picture's marker expanded to its image tokens
  Tensor<std::int32_t, 2> mask;   ///< [1, ids.size()]: 1 at the soft tokens
  Tensor<float, 2> embeddings;    ///< [soft tokens, emb_dim]: the soft tokens' rows, in order
};

}  // namespace maxtext::models
