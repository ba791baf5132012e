// layers/qwen3.hpp: MaxText models/qwen3.py Qwen3DecoderLayer (AttentionWithNorm + MlpBlock); spec decoder.md,
// configs.md §qwen3.
// Pre/post RMSNorm like llama2 (same parameter names); attention with use_qk_norm = config.use_qk_norm (per-head
// RMSNorm `query_norm` / `key_norm` with scale [head_dim], epsilon normalization_layer_epsilon, 1e-6 in the qwen3
// ymls) and query_pre_attn_scalar = head_dim^-0.5 applied to q in the forward pass (so the query kernel is not
// depth-scaled at init and Hugging Face weights load unscaled). No soft cap; global attention.
#pragma once

#include <cmath>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/llama2.hpp"

namespace maxtext::layers {

/// MaxText Qwen3DecoderLayer (decoder_block "qwen3", dense MLP).
template <TensorPolicy P>
class Qwen3DecoderLayer : public detail::PrePostNormDecoderLayer<P> {
 public:
  using Base = detail::PrePostNormDecoderLayer<P>;
  using typename Base::Params;

  Qwen3DecoderLayer() = default;
  Qwen3DecoderLayer(const Config& c, LayerInfo info) : Base(c, std::move(info), attention_args(c)) {}

  /// What qwen3.py's AttentionWithNorm passes: config heads, f32 flags, use_qk_norm, query_pre_attn_scalar.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.use_qk_norm = c.use_qk_norm;
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    return a;
  }
};

}  // namespace maxtext::layers
