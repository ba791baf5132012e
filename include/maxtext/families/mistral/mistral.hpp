// families/mistral/mistral.hpp: MaxText models/mistral.py MistralDecoderLayer; spec decoder.md §LLAMA2 and MISTRAL.
// The same math as LlamaDecoderLayer without the attention soft cap. MaxText's mistral block passes no attention
// type or window to Attention, so Mistral's sliding window is NOT applied (attention is global causal even when the
// config sets sliding_window_size / attention_type): we follow MaxText.
#pragma once

#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/layer_info.hpp"

namespace maxtext::layers {

/// MaxText MistralDecoderLayer (decoder_block "mistral").
template <TensorPolicy P>
class MistralDecoderLayer : public detail::PrePostNormDecoderLayer<P> {
 public:
  static constexpr const char* decoder_block_name = "mistral";  ///< its line in core/decoder_blocks.hpp
  using Base = detail::PrePostNormDecoderLayer<P>;
  using typename Base::Params;

  MistralDecoderLayer() = default;
  MistralDecoderLayer(const Config& c, LayerInfo info) : Base(c, std::move(info), attention_args(c)) {}

  /// What mistral.py passes to Attention: config heads and f32 flags only (no soft cap, no sliding window).
  static AttentionArgs attention_args(const Config& c) { return AttentionArgs::basic(c); }
};

}  // namespace maxtext::layers
