// layers/pre_post_norm.hpp: the shared body of MaxText's pre/post-RMSNorm decoder layers, dense and routed-MoE.
//
//   h   = x + Attention(RMSNorm_pre(x))          pre_self_attention_layer_norm, self_attention
//   out = h + FFN(RMSNorm_post(h))               post_self_attention_layer_norm, mlp (MlpBlock) or the routed MoE
//
// The dense body serves llama2.py, mistral.py, qwen2 / qwen3.py's dense layer (families/llama2, mistral, qwen); the
// MoE body mixtral.py, qwen3.py's Qwen3MoeDecoderLayer and gpt_oss.py. `block_mlp` is the MlpBlock those blocks and
// MaxText's generic DecoderLayer (layers/decoders.hpp), gemma4, llama4, olmo3 and envy build. The family headers only
// choose attention arguments and parameter names.
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
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

namespace detail {

/// MlpBlock as the llama2 / mistral / qwen3 / default blocks build it: mlp_dim, mlp_activations, no bias, no pre-norm.
template <TensorPolicy P>
MlpBlock<P> block_mlp(const Config& c) {
  return MlpBlock<P>(typename MlpBlock<P>::Config{c.emb_dim, c.mlp_dim, parse_activations(c.mlp_activations), false,
                                                  false, NormKind::rms,
                                                  static_cast<float>(c.normalization_layer_epsilon), c.fused_mlp,
                                                  c.activations_in_float32});
}

/// The common body of the pre/post-RMSNorm layers; the public classes only choose the attention arguments.
template <TensorPolicy P>
class PrePostNormDecoderLayer {
 public:
  using A = typename P::act_t;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename Attention<P>::Params self_attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename MlpBlock<P>::Params mlp;
  };

  PrePostNormDecoderLayer() = default;
  PrePostNormDecoderLayer(const Config& c, LayerInfo info, const AttentionArgs& args)
      : info_(std::move(info)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, args),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        mlp_(block_mlp<P>(c)) {}

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    visit_child(v, "mlp", mlp_, p.mlp);
  }

  /// x [B*T, D] in place: the residual stream after this layer.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);  // intermediate_inputs = inputs + attention_lnx
    post_.forward(ctx, p.post_self_attention_layer_norm, x, lnx);
    mlp_.forward(ctx, p.mlp, lnx, a);
    ctx.sow(info_.mlp, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // layer_output = mlp_lnx + intermediate_inputs
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  RMSNorm<P> pre_;
  Attention<P> attn_;
  RMSNorm<P> post_;
  MlpBlock<P> mlp_;
};


/// The pre/post-RMSNorm layer with a routed MoE that mixtral.py, qwen3.py's Qwen3MoeDecoderLayer and gpt_oss.py share:
///   h = x + Attention(RMSNorm_pre(x)),  out = h + RoutedMoE(RMSNorm_post(h)).
/// `Names` supplies what differs: the layer's name for messages (`layer`), the parameter names of the attention and
/// the MoE (`attention`, `moe`), the MoE's variant (`moe_family`), the MoE's hidden size and the key it comes from (`hidden`, `hidden_key`), the
/// attention arguments, and whether the two norm outputs are captured (`sow_norms`, Mixtral's intermediates).
template <TensorPolicy P, class Names>
class PrePostNormMoeDecoderLayer {
 public:
  using A = typename P::act_t;
  static constexpr const char* mlp_name = Names::moe;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename Attention<P>::Params attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename RoutedMoE<P>::Params moe;
  };

  PrePostNormMoeDecoderLayer() = default;
  PrePostNormMoeDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, Names::attention_args(c, info_.index)),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        moe_(RoutedMoE<P>::settings(c, Names::hidden(c), Names::moe_family)) {
    MAXTEXT_CHECK(Names::hidden(c) > 0, ConfigError, "[", Names::layer, "] ", Names::hidden_key,
                  " (the expert hidden size) must be > 0, found ", Names::hidden(c));
    MAXTEXT_CHECK(c.moe_expert_input_dim <= 0 || c.moe_expert_input_dim == c.emb_dim, UnsupportedError, "[",
                  Names::layer, "] moe_expert_input_dim (", c.moe_expert_input_dim, ") different from emb_dim (",
                  c.emb_dim, ") is not implemented");
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  const RoutedMoE<P>& moe() const { return moe_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, Names::attention, attn_, p.attention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    visit_child(v, Names::moe, moe_, p.moe);
  }

  /// x [B*T, D] in place: the residual stream after this layer. With `metrics`, also reports the routing.
  /// Captures: the layer output, the attention and MoE outputs (+ routing metrics under the MoE's name), and with
  /// Names::sow_norms the two norm outputs.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    if constexpr (Names::sow_norms) ctx.sow(info_.name, "pre_self_attention_layer_norm", View<const A, 2>(lnx));
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);  // intermediate_inputs = inputs + attention_lnx
    post_.forward(ctx, p.post_self_attention_layer_norm, x, lnx);
    if constexpr (Names::sow_norms) ctx.sow(info_.name, "post_self_attention_layer_norm", View<const A, 2>(lnx));
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    moe_.forward(ctx, p.moe, View<const A, 2>(lnx), a, mt);
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

/// The pre/post-RMSNorm layer whose FFN is a routed MoE on some layers and a dense MlpBlock (block_mlp) on the others,
/// llama4.py's and envy.py's shape:
///   h = x + Attention(RMSNorm_pre(x)),  f = FFN(RMSNorm_post(h)),  [f = RMSNorm_post_ffw(f)],  out = h + f.
/// `Moe` is the MoE module (RoutedMoE, RoutedAndSharedMoE); the layer class `Layer` (which derives from this one)
/// supplies, as static members: `moe_name` (the MoE's parameter and capture name), `make_moe(c)`,
/// `moe_layer(index, c)` (which layers have it), `post_ffw_norm(c)` and `attention_args(c, index)`.
/// Every norm is an RMSNorm of emb_dim with the config's epsilon.
template <TensorPolicy P, class Moe, class Layer>
class InterleavedMoeDecoderLayer {
 public:
  using A = typename P::act_t;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm, post_self_attention_layer_norm, post_ffw_norm;
    typename Attention<P>::Params self_attention;
    typename MlpBlock<P>::Params mlp;  ///< dense layers
    typename Moe::Params moe;          ///< MoE layers
  };

  InterleavedMoeDecoderLayer() = default;
  InterleavedMoeDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        moe_layer_(Layer::moe_layer(info_.index, c)),
        post_ffw_(Layer::post_ffw_norm(c)),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, Layer::attention_args(c, info_.index)) {
    if (moe_layer_) {
      moe_ = Layer::make_moe(c);
      // MaxText's tree names the two FFNs apart (`mlp` and the MoE's name): the MoE layer's captures go to the latter.
      if (info_.mlp == join_name(info_.name, "mlp")) info_.mlp = join_name(info_.name, Layer::moe_name);
    } else {
      mlp_ = block_mlp<P>(c);
    }
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
      visit_child(v, Layer::moe_name, moe_, p.moe);
    } else {
      visit_child(v, "mlp", mlp_, p.mlp);
    }
    if (post_ffw_) visit_child(v, "post_ffw_norm", norm_, p.post_ffw_norm);
  }

  /// x [B*T, D] in place. Captures the attention and FFN outputs (the FFN before post_ffw_norm, as MaxText's modules
  /// return it; MoE layers also sow their routing under the FFN's name) and the layer output.
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
      moe_.forward(ctx, p.moe, View<const A, 2>(lnx), a, mt);
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
  Moe moe_;
};

}  // namespace detail

}  // namespace maxtext::layers
