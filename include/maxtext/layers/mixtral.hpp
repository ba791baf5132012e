// layers/mixtral.hpp: MaxText models/mixtral.py MixtralDecoderLayer; spec decoder.md §MIXTRAL, moe.md.
//
//   h   = x + Attention(RMSNorm_pre(x))          pre_self_attention_layer_norm, self_attention (GQA, default RoPE)
//   out = h + RoutedMoE(RMSNorm_post(h))         post_self_attention_layer_norm, MoeBlock_0 (F = mlp_dim)
//
// The attention is MaxText's generic Attention with what mixtral.py passes: config heads / head_dim and the two f32
// flags, global causal attention, no soft cap. Routing: softmax over the top-k raw gate logits.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

template <TensorPolicy P>
class MixtralDecoderLayer {
 public:
  using A = typename P::act_t;
  static constexpr const char* mlp_name = "MoeBlock_0";
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename Attention<P>::Params self_attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename RoutedMoE<P>::Params MoeBlock_0;
  };

  MixtralDecoderLayer() = default;
  MixtralDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, AttentionArgs::basic(c)),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        moe_(RoutedMoE<P>::settings(c, c.mlp_dim)) {
    MAXTEXT_CHECK(c.moe_expert_input_dim <= 0 || c.moe_expert_input_dim == c.emb_dim, UnsupportedError,
                  "[MixtralDecoderLayer] moe_expert_input_dim (", c.moe_expert_input_dim, ") different from emb_dim (",
                  c.emb_dim, ") is not implemented");
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  const RoutedMoE<P>& moe() const { return moe_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    visit_child(v, "MoeBlock_0", moe_, p.MoeBlock_0);
  }

  /// x [B*T, D] in place: the residual stream after this layer. With `metrics`, also reports the routing.
  /// Captures: the layer output, pre/post_self_attention_layer_norm, self_attention, MoeBlock_0 (+ routing metrics).
  void forward(const Context<P>& ctx, const Params& p, LayerCache<A>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    ctx.sow(info_.name, "pre_self_attention_layer_norm", View<const A, 2>(lnx));
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);  // intermediate_inputs = inputs + attention_lnx
    post_.forward(ctx, p.post_self_attention_layer_norm, x, lnx);
    ctx.sow(info_.name, "post_self_attention_layer_norm", View<const A, 2>(lnx));
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    moe_.forward(ctx, p.MoeBlock_0, View<const A, 2>(lnx), a, mt);
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
