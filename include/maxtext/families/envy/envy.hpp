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
// families/checkpoint.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// decoders.py for ENVY: layer `i` (0-based) is a MoE layer.
inline bool envy_is_moe_layer(std::int64_t i, std::int64_t interleave_moe_layer_step) {
  return interleave_moe_layer_step > 0 && (i + 1) % interleave_moe_layer_step == 0;
}

/// MaxText EnvyDecoderLayer (decoder_block "envy").
template <TensorPolicy P>
class EnvyDecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "envy";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm, post_self_attention_layer_norm, post_ffw_norm;
    typename Attention<P>::Params self_attention;
    typename MlpBlock<P>::Params mlp;           ///< dense layers
    typename RoutedMoE<P>::Params MoeBlock_0;   ///< MoE layers
  };

  EnvyDecoderLayer() = default;
  EnvyDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        moe_layer_(envy_is_moe_layer(info_.index, c.interleave_moe_layer_step)),
        post_ffw_(c.use_post_ffw_norm),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, attention_args(c)) {
    if (moe_layer_) {
      moe_ = RoutedMoE<P>(RoutedMoE<P>::settings(c, c.moe_mlp_dim));
      // MaxText names the MoE FFN MoeBlock_0: its captures go there.
      if (info_.mlp == join_name(info_.name, "mlp")) info_.mlp = join_name(info_.name, "MoeBlock_0");
    } else {
      mlp_ = detail::block_mlp<P>(c);
    }
  }

  /// What envy.py passes to Attention: the config's heads, use_qk_norm, query_pre_attn_scalar = head_dim^-0.5.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.use_qk_norm = c.use_qk_norm;
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    return a;
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  bool is_moe_layer() const { return moe_layer_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", norm_, p.pre_self_attention_layer_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "post_self_attention_layer_norm", norm_, p.post_self_attention_layer_norm);
    if (moe_layer_) {
      visit_child(v, "MoeBlock_0", moe_, p.MoeBlock_0);
    } else {
      visit_child(v, "mlp", mlp_, p.mlp);
    }
    if (post_ffw_) visit_child(v, "post_ffw_norm", norm_, p.post_ffw_norm);
  }

  /// x [B*T, D] in place. Captures the attention and FFN outputs (the FFN before post_ffw_norm, as MaxText's modules
  /// return it; MoE layers also sow their routing under `<layer>.MoeBlock_0`) and the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    norm_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);  // intermediate_inputs = inputs + attention_lnx
    norm_.forward(ctx, p.post_self_attention_layer_norm, x, lnx);
    if (moe_layer_) {
      MoeMetrics local;
      MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
      moe_.forward(ctx, p.MoeBlock_0, View<const A, 2>(lnx), a, mt);
      if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    } else {
      mlp_.forward(ctx, p.mlp, lnx, a);
    }
    ctx.sow(info_.mlp, View<const A, 2>(a));
    if (post_ffw_) norm_.forward(ctx, p.post_ffw_norm, a, a);
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // layer_output = mlp_lnx + intermediate_inputs
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  bool moe_layer_ = false, post_ffw_ = false;
  RMSNorm<P> norm_;  ///< every norm of the layer (emb_dim, epsilon)
  Attention<P> attn_;
  MlpBlock<P> mlp_;
  RoutedMoE<P> moe_;
};

}  // namespace maxtext::layers
