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

/// The decoder's final norm (decoders.py), which MaxText chooses by decoder block and the layer type names here as
/// `static constexpr FinalNorm final_norm` (models::Transformer reads it; default rms): RMSNorm, GPT-3's LayerNorm
/// with bias (gpt3), or Qwen3NextRMSNorm's x * rsqrt(mean(x^2) + eps) * (1 + w) (qwen3_next, qwen3_5).
enum class FinalNorm : std::uint8_t { rms, gpt3_layer_norm, rms_offset_one };

/// Whether a decoder takes media embeddings (pictures' soft tokens) merged at marked token positions, as MaxText's
/// decoders.py _apply_embedding does for its multimodal models (merge_mm_embeddings), and how their tokens attend:
/// the layer type names it as `static constexpr MediaMerge media_merge` (default none: refused). `bidirectional`:
/// each run of consecutive marked tokens (one picture) also sees itself whole (MaxText passes bidirectional_mask to
/// Gemma 3's and Gemma 4's layers); `causal`: the merged tokens attend like text (Llama 4).
enum class MediaMerge : std::uint8_t { none, causal, bidirectional };

}  // namespace maxtext::layers
