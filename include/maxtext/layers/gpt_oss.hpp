// layers/gpt_oss.hpp: MaxText models/gpt_oss.py GptOssDecoderLayer; spec decoder.md, moe.md, rope.md, attention.md.
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
// [0, inhomogeneous_layer_cycle_interval), stacked over num_layers / interval repetitions); io/checkpoint.hpp unstacks
// them into `decoder.layers_i`.
#pragma once

#include <cmath>
#include <cstdint>
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

namespace maxtext::layers {

/// Length of GPT_OSS_ATTENTION_PATTERN (local sliding, then global).
inline constexpr std::int64_t kGptOssPatternLength = 2;

/// gpt_oss.get_attention_type: local sliding for even layers, global for odd ones.
inline AttentionType gpt_oss_attention_type(std::int64_t layer_index) {
  return layer_index % kGptOssPatternLength == 0 ? AttentionType::local_sliding : AttentionType::global;
}

/// MaxText GptOssDecoderLayer (decoder_block "gpt_oss").
template <TensorPolicy P>
class GptOssDecoderLayer {
 public:
  using A = typename P::act_t;
  static constexpr const char* mlp_name = "GptOssMlp";
  static constexpr const char* attention_name = "GptOssAttention";
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename Attention<P>::Params GptOssAttention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename RoutedMoE<P>::Params GptOssMlp;
  };

  GptOssDecoderLayer() = default;
  GptOssDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, attention_args(c, info_.index)),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        moe_(RoutedMoE<P>::settings(c, c.mlp_dim)) {
    MAXTEXT_CHECK(c.mlp_dim > 0, ConfigError, "[GptOssDecoderLayer] mlp_dim (base_mlp_dim, the expert hidden size) must be > 0, found ",
                  c.mlp_dim);
    MAXTEXT_CHECK(c.moe_expert_input_dim <= 0 || c.moe_expert_input_dim == c.emb_dim, UnsupportedError,
                  "[GptOssDecoderLayer] moe_expert_input_dim (", c.moe_expert_input_dim, ") different from emb_dim (",
                  c.emb_dim, ") is not implemented");
  }

  /// What gpt_oss.py passes to Attention for layer `layer_index`.
  static AttentionArgs attention_args(const Config& c, std::int64_t layer_index) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attention_type = gpt_oss_attention_type(layer_index);
    a.sliding_window_size = c.sliding_window_size;
    a.use_bias_in_projections = c.attention_bias;
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    return a;
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  const RoutedMoE<P>& moe() const { return moe_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, "GptOssAttention", attn_, p.GptOssAttention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    visit_child(v, "GptOssMlp", moe_, p.GptOssMlp);
  }

  /// x [B*T, D] in place: the residual stream after this layer. With `metrics`, also reports the routing.
  /// Captures: the layer output, the attention and MLP outputs (+ routing metrics under the MLP name).
  void forward(const Context<P>& ctx, const Params& p, LayerCache<A>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.GptOssAttention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);  // intermediate_inputs = inputs + attention_lnx
    post_.forward(ctx, p.post_self_attention_layer_norm, x, lnx);
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    moe_.forward(ctx, p.GptOssMlp, View<const A, 2>(lnx), a, mt);
    if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    ctx.sow(info_.mlp, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // layer_output = mlp_lnx + intermediate_inputs
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  RMSNorm<P> pre_;
  Attention<P> attn_;
  RMSNorm<P> post_;
  RoutedMoE<P> moe_;
};

}  // namespace maxtext::layers
