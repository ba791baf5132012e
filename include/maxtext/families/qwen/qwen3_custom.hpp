// families/qwen/qwen3_custom.hpp: MaxText models/qwen3_custom.py Qwen3CustomMoeDecoderLayer (decoder_block
// "qwen3_custom_moe"); configs/models/qwen3-custom-30b-a3b.yml.
//
//   a   = Attention(RMSNorm_pre(x))        Qwen3's attention (qk RMSNorm, q * head_dim^-0.5) whose out projection
//                                          writes attention_output_dim (Da) features instead of emb_dim (D)
//   f   = RoutedMoE(RMSNorm_latent(a))     latent_norm [Da]; moe_block on width moe_expert_input_dim (= Da), hidden
//                                          size moe_mlp_dim, Qwen3's routing (top-k of the raw logits, softmax, norm)
//   out = x + Up(f)                        layer_up_projection [Da, D], absent when Da == D
//
// There is no residual around the attention: the MoE reads the normalised attention output and only the up-projected
// MoE output joins the residual stream. The layer also owns `post_self_attention_layer_norm` (qwen3.py's
// AttentionWithNorm builds it), which this block's forward never applies; it is in the parameter tree so that
// MaxText checkpoints load and save unchanged. Config checks (types.py): attention_output_dim > 0 and equal to
// moe_expert_input_dim.
#pragma once

#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// MaxText Qwen3CustomMoeDecoderLayer (decoder_block "qwen3_custom_moe").
template <TensorPolicy P>
class Qwen3CustomMoeDecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "qwen3_custom_moe";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  static constexpr const char* mlp_name = "moe_block";
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename Attention<P>::Params attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;  ///< loaded and exported, unused in the forward
    typename RMSNorm<P>::Params latent_norm;
    typename RoutedMoE<P>::Params moe;
    typename DenseGeneral<P>::Params layer_up_projection;
  };

  Qwen3CustomMoeDecoderLayer() = default;
  Qwen3CustomMoeDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        Da_(checked_width(c)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, attention_args(c)),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        latent_({Da_, static_cast<float>(c.normalization_layer_epsilon)}),
        moe_(RoutedMoE<P>::settings(c, c.moe_mlp_dim)),
        up_(Da_ != c.emb_dim) {
    MAXTEXT_CHECK(c.moe_mlp_dim > 0, ConfigError,
                  "[Qwen3CustomMoeDecoderLayer] moe_mlp_dim (base_moe_mlp_dim, the expert hidden size) must be > 0, "
                  "found ", c.moe_mlp_dim);
    if (up_) up_proj_ = DenseGeneral<P>({{Da_}, {c.emb_dim}, false, Init::truncated_normal});
  }

  /// Qwen3's attention arguments with the out projection narrowed to attention_output_dim.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = Qwen3DecoderLayer<P>::attention_args(c);
    a.output_dim = c.attention_output_dim;
    return a;
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  const RoutedMoE<P>& moe() const { return moe_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, "self_attention", attn_, p.attention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    visit_child(v, "latent_norm", latent_, p.latent_norm);
    visit_child(v, "moe_block", moe_, p.moe);
    if (up_) visit_child(v, "layer_up_projection", up_proj_, p.layer_up_projection);
  }

  /// x [B*T, D] in place. Captures the attention output [B*T, Da] under the attention's name, the branch added to
  /// the residual (after the up projection, [B*T, D]) under the MoE's name, and the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, Da_});
    attn_.forward(ctx, p.attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    View<A, 2> la = ctx.scratch.template alloc<A, 2>({M, Da_});
    latent_.forward(ctx, p.latent_norm, a, la);
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    View<A, 2> f = up_ ? a : lnx;  // the MoE output: [M, Da] (a is free again), or [M, D] directly when Da == D
    moe_.forward(ctx, p.moe, View<const A, 2>(la), f, mt);
    if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    if (up_) {
      up_proj_.forward(ctx, p.layer_up_projection, View<const A, 2>(f), lnx);
      f = lnx;
    }
    ctx.sow(info_.mlp, View<const A, 2>(f));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(f), x);  // layer_output = inputs + layer_output
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  static std::int64_t checked_width(const Config& c) {
    MAXTEXT_CHECK(c.attention_output_dim > 0 && c.attention_output_dim == c.moe_expert_input_dim, ConfigError,
                  "[Qwen3CustomMoeDecoderLayer] attention_output_dim (", c.attention_output_dim,
                  ") must be > 0 and equal to moe_expert_input_dim (", c.moe_expert_input_dim, ")");
    return c.attention_output_dim;
  }

  LayerInfo info_;
  std::int64_t Da_ = 0;
  RMSNorm<P> pre_;
  Attention<P> attn_;
  RMSNorm<P> post_;
  RMSNorm<P> latent_;
  RoutedMoE<P> moe_;
  bool up_ = false;
  DenseGeneral<P> up_proj_;
};

}  // namespace maxtext::layers
