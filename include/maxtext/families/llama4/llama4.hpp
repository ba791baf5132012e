// families/llama4/llama4.hpp: MaxText models/llama4.py Llama4DecoderLayer (decoder_block "llama4", text only);
// configs/models/llama4-17b-16e.yml (Scout), llama4-17b-128e.yml (Maverick).
//
//   h   = x + Attention(RMSNorm_pre(x))       pre_self_attention_layer_norm, self_attention
//   out = h + FFN(RMSNorm_post(h))            post_self_attention_layer_norm, then `Llama4MoEBlock_0` or `mlp`
//
// What varies with the layer index i (llama4.py determine_is_nope_layer / determine_is_moe_layer):
//  - NoPE layers, (i + 1) % nope_layer_interval == 0 (interval > 0): global attention without RoPE, queries scaled by
//    the temperature-tuning factor 1 + 0.1 * log(floor((pos + 1) / 8192) + 1) when temperature_tuning;
//    the others: chunked attention (chunk_attn_window_size) with the config's RoPE (Llama-3.1 in the ymls) and, with
//    use_qk_norm, an L2 norm of q and k after RoPE (no scale; layers/attentions.hpp).
//  - MoE layers, (i + 1) % interleave_moe_layer_step == 0 (step > 0): RoutedAndSharedMoE `Llama4MoEBlock_0` with
//    Llama 4 routing (top-1 of the raw gate logits, the expert input scaled by sigmoid(logit), weight 1; moe.hpp)
//    plus the shared expert; the others: a dense SwiGLU MlpBlock `mlp` of width mlp_dim.
// Queries are scaled by head_dim^-0.5 in the forward pass (query_pre_attn_scalar), as in qwen3.
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

/// llama4.py determine_is_nope_layer: layer `i` (0-based) has no rotary embedding.
inline bool llama4_is_nope_layer(std::int64_t i, std::int64_t nope_layer_interval) {
  return nope_layer_interval > 0 && (i + 1) % nope_layer_interval == 0;
}
/// llama4.py determine_is_moe_layer: layer `i` (0-based) is a MoE layer.
inline bool llama4_is_moe_layer(std::int64_t i, std::int64_t interleave_moe_layer_step) {
  return interleave_moe_layer_step > 0 && (i + 1) % interleave_moe_layer_step == 0;
}

/// MaxText Llama4DecoderLayer (decoder_block "llama4"): the interleaved-MoE pre/post-norm layer
/// (layers/pre_post_norm.hpp) with RoutedAndSharedMoE `Llama4MoEBlock_0` at Llama 4's routing, no post-FFN norm.
template <TensorPolicy P>
class Llama4DecoderLayer
    : public detail::InterleavedMoeDecoderLayer<P, RoutedAndSharedMoE<P>, Llama4DecoderLayer<P>> {
 public:
  static constexpr const char* decoder_block_name = "llama4";  ///< its line in core/decoder_blocks.hpp
  static constexpr MediaMerge media_merge = MediaMerge::causal;  ///< pictures' soft tokens merged, attending as text
  using Base = detail::InterleavedMoeDecoderLayer<P, RoutedAndSharedMoE<P>, Llama4DecoderLayer<P>>;
  using typename Base::Params;
  using Base::Base;

  /// Dense layers; MoE layers capture under Llama4MoEBlock_0 (MaxText names).
  static constexpr const char* mlp_name = "mlp";
  static constexpr const char* hf_mlp_name = "feed_forward";  ///< transformers' name, dense and MoE layers alike
  static constexpr const char* moe_name = "Llama4MoEBlock_0";
  static RoutedAndSharedMoE<P> make_moe(const Config& c) { return RoutedAndSharedMoE<P>(c, MoeFamily::llama4); }
  static bool moe_layer(std::int64_t i, const Config& c) { return llama4_is_moe_layer(i, c.interleave_moe_layer_step); }
  static bool post_ffw_norm(const Config& /*c*/) { return false; }

  /// What llama4.py passes for layer `i`: config heads, f32 flags, use_qk_norm (the L2 norm on RoPE layers),
  /// query_pre_attn_scalar = head_dim^-0.5, NoPE + global + temperature tuning or chunked attention.
  static AttentionArgs attention_args(const Config& c, std::int64_t i) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.use_qk_norm = c.use_qk_norm;
    a.qk_norm_l2 = true;  // Llama 4's qk norm is L2
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    a.is_nope_layer = llama4_is_nope_layer(i, c.nope_layer_interval);
    a.attention_type = a.is_nope_layer ? AttentionType::global : AttentionType::chunk;
    a.temperature_tuning = c.temperature_tuning;
    a.temperature_tuning_scale = 0.1;
    a.temperature_tuning_floor_scale = 8192.0;
    return a;
  }
};

}  // namespace maxtext::layers
