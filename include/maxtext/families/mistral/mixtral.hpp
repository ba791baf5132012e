// families/mistral/mixtral.hpp: MaxText models/mixtral.py MixtralDecoderLayer; spec decoder.md §MIXTRAL, moe.md.
//
//   h   = x + Attention(RMSNorm_pre(x))          pre_self_attention_layer_norm, self_attention (GQA, default RoPE)
//   out = h + RoutedMoE(RMSNorm_post(h))         post_self_attention_layer_norm, MoeBlock_0 (F = mlp_dim)
//
// The attention is MaxText's generic Attention with what mixtral.py passes: config heads / head_dim and the two f32
// flags, global causal attention, no soft cap. Routing: softmax over the top-k raw gate logits.
// qwen3.py's Qwen3MoeDecoderLayer and gpt_oss.py's GptOssDecoderLayer have the same shape with other parameter names,
// attention arguments and MoE width: all three derive from detail::PrePostNormMoeDecoderLayer (layers/pre_post_norm.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/pre_post_norm.hpp"

namespace maxtext::layers {

namespace detail {

/// mixtral.py: generic Attention with the config's heads and f32 flags, global causal; MoE hidden size mlp_dim.
struct MixtralNames {
  static constexpr const char* layer = "MixtralDecoderLayer";
  static constexpr const char* attention = "self_attention";
  static constexpr const char* moe = "MoeBlock_0";
  static constexpr const char* hidden_key = "mlp_dim (base_mlp_dim)";
  static constexpr bool sow_norms = true;
  static constexpr MoeFamily moe_family = MoeFamily::generic;
  static std::int64_t hidden(const Config& c) { return c.mlp_dim; }
  static AttentionArgs attention_args(const Config& c, std::int64_t /*layer_index*/) { return AttentionArgs::basic(c); }
};

}  // namespace detail

/// MaxText MixtralDecoderLayer (decoder_block "mixtral").
template <TensorPolicy P>
class MixtralDecoderLayer : public detail::PrePostNormMoeDecoderLayer<P, detail::MixtralNames> {
 public:
  static constexpr const char* decoder_block_name = "mixtral";  ///< its line in core/decoder_blocks.hpp
  using Base = detail::PrePostNormMoeDecoderLayer<P, detail::MixtralNames>;
  using typename Base::Params;
  using Base::Base;
};

}  // namespace maxtext::layers
