// families/llama2/llama2.hpp: MaxText models/llama2.py LlamaDecoderLayer (pre-norm attention, post-attention norm, MLP), on
// the shared pre/post-RMSNorm body (layers/pre_post_norm.hpp); spec decoder.md §LLAMA2.
//
//   h   = x + Attention(RMSNorm_pre(x))          pre_self_attention_layer_norm, self_attention
//   out = h + MlpBlock(RMSNorm_post(h))          post_self_attention_layer_norm, mlp
//
// The llama2 block passes attn_logits_soft_cap = config.attn_logits_soft_cap and the two f32 flags; attention is
// global causal whatever config.attention_type says (the block passes AttentionType.GLOBAL). RoPE follows the
// config (default, or LLaMA-3.1 when model_name / rope_type starts with "llama3.1", or YaRN).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/pre_post_norm.hpp"

namespace maxtext::layers {

/// MaxText LlamaDecoderLayer (decoder_block "llama2"): GQA attention with RoPE, RMSNorm pre/post, SwiGLU MLP.
template <TensorPolicy P>
class LlamaDecoderLayer : public detail::PrePostNormDecoderLayer<P> {
 public:
  static constexpr const char* decoder_block_name = "llama2";  ///< its line in core/decoder_blocks.hpp
  using Base = detail::PrePostNormDecoderLayer<P>;
  using typename Base::Params;

  LlamaDecoderLayer() = default;
  LlamaDecoderLayer(const Config& c, LayerInfo info) : Base(c, std::move(info), attention_args(c)) {}

  /// What llama2.py passes to Attention: config heads, f32 flags and attn_logits_soft_cap; global attention.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attn_logits_soft_cap = c.attn_logits_soft_cap;
    return a;
  }
};

}  // namespace maxtext::layers
