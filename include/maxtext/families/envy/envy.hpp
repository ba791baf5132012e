// families/envy/envy.hpp: MaxText models/envy.py EnvyDecoderLayer (decoder_block "envy"; read at MaxText e591f30);
// configs/models/envy-switch-{base,large,xxl}.yml.
//
//   h   = x + Attention(RMSNorm_pre(x))                      pre_self_attention_layer_norm, self_attention
//   f   = FFN(RMSNorm_post(h)); f = RMSNorm_post_ffw(f)     post_self_attention_layer_norm, MoeBlock_0 or mlp,
//   out = h + f                                              post_ffw_norm (with use_post_ffw_norm)
//
// Attention: the config's heads, global causal attention with the config's RoPE, q and k RMS-normalised per head with
// use_qk_norm, and queries times head_dim^-0.5 in the forward pass (query_pre_attn_scalar). FFN: layer i is a MoE
// layer when (i + 1) % interleave_moe_layer_step == 0 (decoders.py; EnvyScannableBlock the same within its cycle):
// RoutedMoE `MoeBlock_0` with MaxText's default routing (top-k of the gate logits, softmax over those k in f32), no
// shared expert; else the SwiGLU MlpBlock `mlp`. Scanned trees (`decoder.layers.layers_{j}`) are unstacked by
// families/envy/family.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/pre_post_norm.hpp"

namespace maxtext::layers {

/// decoders.py for ENVY: layer `i` (0-based) is a MoE layer.
inline bool envy_is_moe_layer(std::int64_t i, std::int64_t interleave_moe_layer_step) {
  return interleave_moe_layer_step > 0 && (i + 1) % interleave_moe_layer_step == 0;
}

/// MaxText EnvyDecoderLayer (decoder_block "envy"): the interleaved-MoE pre/post-norm layer (layers/pre_post_norm.hpp)
/// with RoutedMoE `MoeBlock_0` at MaxText's default routing and the optional post-FFN norm.
template <TensorPolicy P>
class EnvyDecoderLayer : public detail::InterleavedMoeDecoderLayer<P, RoutedMoE<P>, EnvyDecoderLayer<P>> {
 public:
  static constexpr const char* decoder_block_name = "envy";  ///< its line in core/decoder_blocks.hpp
  using Base = detail::InterleavedMoeDecoderLayer<P, RoutedMoE<P>, EnvyDecoderLayer<P>>;
  using typename Base::Params;
  using Base::Base;

  static constexpr const char* moe_name = "MoeBlock_0";
  static RoutedMoE<P> make_moe(const Config& c) { return RoutedMoE<P>(RoutedMoE<P>::settings(c, c.moe_mlp_dim)); }
  static bool moe_layer(std::int64_t i, const Config& c) { return envy_is_moe_layer(i, c.interleave_moe_layer_step); }
  static bool post_ffw_norm(const Config& c) { return c.use_post_ffw_norm; }
  /// What envy.py passes to Attention: the config's heads, use_qk_norm, query_pre_attn_scalar = head_dim^-0.5.
  static AttentionArgs attention_args(const Config& c, std::int64_t /*layer_index*/ = 0) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.use_qk_norm = c.use_qk_norm;
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    return a;
  }
};

}  // namespace maxtext::layers
