// families/gpt_oss/gpt_oss.hpp: MaxText models/gpt_oss.py GptOssDecoderLayer; spec decoder.md, moe.md, rope.md, attention.md.
//
// x + GptOssAttention(RMSNorm(x)), then + GptOssMlp(RMSNorm(h)), with MaxText's parameter names
// `pre_self_attention_layer_norm`, `GptOssAttention`, `post_self_attention_layer_norm`, `GptOssMlp`.
//  * Attention: GPT_OSS_ATTENTION_PATTERN = (LOCAL_SLIDING, GLOBAL) by layer index, so even layers attend to the last
//    sliding_window_size keys (128 in the gpt-oss ymls) and odd layers to all; q/k/v/out projections with biases
//    (attention_bias: `query.bias` [N, H], `key.bias` / `value.bias` [K, H], `out.bias` [D]); a learned logit per
//    query head (`sinks` [N], attention_sink) joins each softmax denominator; queries scaled by head_dim^-0.5 in the
//    forward pass (query kernel not depth-scaled); the rotary embedding is config.rope_type, YaRN in the ymls
//    (half-split input, no truncation, attention scaling 0.1 ln(factor) + 1 on the rotated q and k).
//  * MLP: RoutedMoE with hidden size mlp_dim (gpt_oss.py passes config.mlp_dim, not moe_mlp_dim), router bias
//    (`gate.bias`, routed_bias), expert biases (`wi_0_bias`, `wi_1_bias` [E, F], `wo_bias` [E, D], mlp_bias), top-k of
//    the biased router logits with a softmax over those k, and the clamped SwiGLU of moe.py apply_ffn_activation:
//    g = min(w0, limit), u = clip(w1, -limit, limit), act(g * 1.702) * g * (u + 1) (limit = mlp_activations_limit).
// Scanned MaxText checkpoints store the layers as `decoder.layers.layers_{j}` (GptOssScannableBlock: j in
// [0, inhomogeneous_layer_cycle_interval), stacked over num_layers / interval repetitions); families/gpt_oss/family.hpp unstacks
// them into `decoder.layers_i`.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/mistral/mixtral.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// Length of GPT_OSS_ATTENTION_PATTERN (local sliding, then global).
inline constexpr std::int64_t kGptOssPatternLength = 2;

/// gpt_oss.get_attention_type: local sliding for even layers, global for odd ones.
inline AttentionType gpt_oss_attention_type(std::int64_t layer_index) {
  return layer_index % kGptOssPatternLength == 0 ? AttentionType::local_sliding : AttentionType::global;
}

namespace detail {

/// gpt_oss.py: GptOssAttention (the pattern above, biases, sinks, head_dim^-0.5 query scale) and GptOssMlp, a
/// RoutedMoE of hidden size mlp_dim.
struct GptOssNames {
  static constexpr const char* layer = "GptOssDecoderLayer";
  static constexpr const char* attention = "GptOssAttention";
  static constexpr const char* moe = "GptOssMlp";
  static constexpr const char* hidden_key = "mlp_dim (base_mlp_dim)";
  static constexpr bool sow_norms = false;
  static constexpr MoeFamily moe_family = MoeFamily::gpt_oss;
  static std::int64_t hidden(const Config& c) { return c.mlp_dim; }
  /// What gpt_oss.py passes to Attention for layer `layer_index`.
  static AttentionArgs attention_args(const Config& c, std::int64_t layer_index) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attention_type = gpt_oss_attention_type(layer_index);
    a.sliding_window_size = c.sliding_window_size;
    a.use_bias_in_projections = c.attention_bias;
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    return a;
  }
};

}  // namespace detail

/// MaxText GptOssDecoderLayer (decoder_block "gpt_oss").
template <TensorPolicy P>
class GptOssDecoderLayer : public detail::PrePostNormMoeDecoderLayer<P, detail::GptOssNames> {
 public:
  static constexpr const char* decoder_block_name = "gpt_oss";  ///< its line in core/decoder_blocks.hpp
  using Base = detail::PrePostNormMoeDecoderLayer<P, detail::GptOssNames>;
  using typename Base::Params;
  using Base::Base;
  static constexpr const char* attention_name = detail::GptOssNames::attention;
};

}  // namespace maxtext::layers
