// families/deepseek/deepseek.hpp: MaxText models/deepseek.py DeepSeekDenseLayer and DeepSeekMoELayer; spec decoder.md
// §DEEPSEEK, mla.md, moe.md. Use as models::Transformer<P, DeepSeekDenseLayer, DeepSeekMoELayer>: the first
// first_num_dense_layers layers are dense (`dense_layers_i`), the rest MoE (`moe_layers_j`).
//
//   h   = x + MLA(RMSNorm_pre(x))                 pre_self_attention_layer_norm, self_attention
//   out = h + FFN(RMSNorm_post(h))                post_self_attention_layer_norm
//   FFN = MlpBlock(mlp_dim) "mlp" (dense) | RoutedAndSharedMoE "DeepSeekMoeBlock_0" (MoE)
//
// With mhc_expansion_rate k > 1 (layers/mhc.hpp) x is the [M, k*D] residual stream and both sub-blocks are wrapped
// in hyper-connections, `mhc_attention` and `mhc_mlp` (deepseek.py self_attention_with_norm_op and __call__):
//   h   = mhc_attention(x; branch = MLA(RMSNorm_pre(.)))
//   out = mhc_mlp(h;       branch = FFN(RMSNorm_post(.)))
//
// A layer listed in engram_layers first adds its Engram module (layers/engram.hpp; deepseek.py engram_op):
//   x  = x + Engram(RMSNorm_engram(x), hashes of the step's tokens)      `engram_layer_norm`, `engram`
// with the streams of x as Engram's branches. MaxText's Engram takes [B, S, G, D] only, so it runs with mHC; here a
// model without mHC (k = 1) runs it on its one stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attention_mla.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/engram.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/mhc.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

namespace detail {
inline void check_deepseek_config(const Config& c) {
  MAXTEXT_CHECK(c.moe_expert_input_dim <= 0 || c.moe_expert_input_dim == c.emb_dim, UnsupportedError,
                "[DeepSeek] moe_expert_input_dim (", c.moe_expert_input_dim, ") different from emb_dim (", c.emb_dim,
                ") needs projections this library does not implement");
}

/// The part shared by both DeepSeek layer kinds: pre-norm, MLA, residual, post-norm. Returns the post-norm input of
/// the FFN in `hn` and leaves the residual h in `x`.
template <TensorPolicy P>
class DeepSeekAttentionBlock {
 public:
  using A = typename P::act_t;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename MLA<P>::Params self_attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename ManifoldConstrainedHyperConnections<P>::Params mhc_attention;  ///< k > 1 only
    typename RMSNorm<P>::Params engram_layer_norm;                          ///< Engram layers only
    typename Engram<P>::Params engram;                                      ///< Engram layers only
  };
  DeepSeekAttentionBlock() = default;
  /// The block of global layer `layer` (an Engram layer when engram_layers lists it).
  DeepSeekAttentionBlock(const Config& c, std::int64_t layer)
      : pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c),
        streams_(c.mhc_expansion_rate),
        layer_(layer) {
    check_deepseek_config(c);
    if (streams_ > 1) mhc_ = ManifoldConstrainedHyperConnections<P>(c, c.emb_dim);
    const std::vector<std::int64_t> engram = c.engram_layers();
    if (std::find(engram.begin(), engram.end(), layer) != engram.end()) {
      engram_on_ = true;
      engram_norm_ = RMSNorm<P>({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)});
      engram_ = Engram<P>(Engram<P>::config_of(c, layer));
    }
  }
  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  /// An Engram layer keeps its convolution's state per sequence.
  StateSpec state_spec() const { return engram_on_ ? engram_.state_spec() : StateSpec{}; }
  bool has_engram() const { return engram_on_; }
  const MLA<P>& attention() const { return attn_; }
  /// mhc_expansion_rate: the residual stream is [M, streams * D].
  std::int64_t streams() const { return streams_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    if (streams_ > 1) visit_child(v, "mhc_attention", mhc_, p.mhc_attention);
    if (engram_on_) {
      visit_child(v, "engram_layer_norm", engram_norm_, p.engram_layer_norm);
      visit_child(v, "engram", engram_, p.engram);
    }
  }

  /// deepseek.py engram_op, before the attention: x [M, k*D] += Engram(RMSNorm_engram(x), hashes of the step's
  /// tokens) (the norm per stream, one scale). Captures `<layer>.engram`.
  void apply_engram(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
                    const LayerInfo& info) const {
    if (!engram_on_) return;
    const auto* ds = ctx.decoder;
    MAXTEXT_CHECK(ds != nullptr && ds->engram != nullptr && !ds->tokens.empty(), ArgumentError, "[DeepSeek] layer ",
                  layer_, " is an Engram layer (engram_layers): it needs the step's tokens and the model's compressed-"
                  "token table (models::Transformer::set_engram_vocab, from the tokenizer)");
    const std::vector<std::int32_t> hashes = ds->engram->step_hashes(layer_, ctx.step, ds->tokens, cache.history);
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = pre_.config().dim;
    View<A, 2> h = ctx.scratch.template alloc<A, 2>({M, x.dim(1)});
    engram_norm_.forward(ctx, p.engram_layer_norm, View<const A, 2>(View<A, 2>(x.data(), {M * streams_, D})),
                         View<A, 2>(h.data(), {M * streams_, D}));
    View<A, 2> e = ctx.scratch.template alloc<A, 2>({M, x.dim(1)});
    engram_.forward(ctx, p.engram, View<const A, 2>(h), hashes, cache, e);
    ctx.sow(info.name, "engram", View<const A, 2>(e));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(e), x);
  }

  /// mHC form: x [M, k*D] -> h [M, k*D] = mhc_attention(x) with MLA(RMSNorm_pre(.)) as the branch.
  void forward_mhc(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<const A, 2> x, View<A, 2> h,
                   const LayerInfo& info) const {
    mhc_.forward(ctx, p.mhc_attention, x, [&](View<const A, 2> in, View<A, 2> a) {
      ScratchScope scope(ctx.scratch);
      View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({in.dim(0), in.dim(1)});
      pre_.forward(ctx, p.pre_self_attention_layer_norm, in, lnx);
      ctx.sow(info.name, "pre_self_attention_layer_norm", View<const A, 2>(lnx));
      attn_.forward(ctx, p.self_attention, lnx, cache, a);
      ctx.sow(info.attention, View<const A, 2>(a));
    }, h);
  }
  /// The FFN's pre-norm on its own (the mHC form applies it to the pre-mapped streams).
  void post_norm(const Context<P>& ctx, const Params& p, View<const A, 2> in, View<A, 2> out, const LayerInfo& info) const {
    post_.forward(ctx, p.post_self_attention_layer_norm, in, out);
    ctx.sow(info.name, "post_self_attention_layer_norm", View<const A, 2>(out));
  }

  /// x [M, D] in place becomes h = x + MLA(norm(x)); hn = RMSNorm_post(h).
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x, View<A, 2> hn,
               const LayerInfo& info) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    ctx.sow(info.name, "pre_self_attention_layer_norm", View<const A, 2>(lnx));
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);
    post_.forward(ctx, p.post_self_attention_layer_norm, x, hn);
    ctx.sow(info.name, "post_self_attention_layer_norm", View<const A, 2>(hn));
  }

 private:
  RMSNorm<P> pre_, post_;
  MLA<P> attn_;
  std::int64_t streams_ = 1;
  ManifoldConstrainedHyperConnections<P> mhc_;
  std::int64_t layer_ = 0;
  bool engram_on_ = false;
  RMSNorm<P> engram_norm_;
  Engram<P> engram_;
};
}  // namespace detail

/// DeepSeek dense layer: MLA + MlpBlock(mlp_dim) named `mlp`.
template <TensorPolicy P>
class DeepSeekDenseLayer {
 public:
  static constexpr const char* decoder_block_name = "deepseek";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  static constexpr bool supports_mhc = true;
  struct Params {
    typename detail::DeepSeekAttentionBlock<P>::Params attn;
    typename MlpBlock<P>::Params mlp;
    typename ManifoldConstrainedHyperConnections<P>::Params mhc_mlp;  ///< k > 1 only
  };

  DeepSeekDenseLayer() = default;
  DeepSeekDenseLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        block_(c, info_.index),
        mlp_(typename MlpBlock<P>::Config{c.emb_dim, c.mlp_dim, parse_activations(c.mlp_activations), false, false,
                                          NormKind::rms, static_cast<float>(c.normalization_layer_epsilon),
                                          c.fused_mlp, c.activations_in_float32}) {
    if (block_.streams() > 1) mhc_ = ManifoldConstrainedHyperConnections<P>(c, c.emb_dim);
  }

  CacheSpec cache_spec() const { return block_.cache_spec(); }
  StateSpec state_spec() const { return block_.state_spec(); }
  const LayerInfo& info() const { return info_; }
  const MLA<P>& attention() const { return block_.attention(); }

  template <class V>
  void visit(V& v, Params& p) const {
    block_.visit(v, p.attn);
    visit_child(v, "mlp", mlp_, p.mlp);
    if (block_.streams() > 1) visit_child(v, "mhc_mlp", mhc_, p.mhc_mlp);
  }

  /// x [B*T, D] (mHC: [B*T, k*D]) in place: the residual stream after this layer. Captures: the layer output, its
  /// pre_self_attention_layer_norm, self_attention, post_self_attention_layer_norm and mlp outputs.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    block_.apply_engram(ctx, p.attn, cache, x, info_);
    if (block_.streams() > 1) {
      View<A, 2> h = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
      block_.forward_mhc(ctx, p.attn, cache, x, h, info_);
      mhc_.forward(ctx, p.mhc_mlp, View<const A, 2>(h), [&](View<const A, 2> in, View<A, 2> f) {
        block_.post_norm(ctx, p.attn, in, f, info_);
        mlp_.forward(ctx, p.mlp, View<const A, 2>(f), f);
        ctx.sow(info_.mlp, View<const A, 2>(f));
      }, x);
      ctx.sow(info_.name, View<const A, 2>(x));
      return;
    }
    View<A, 2> hn = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
    block_.forward(ctx, p.attn, cache, x, hn, info_);
    mlp_.forward(ctx, p.mlp, View<const A, 2>(hn), hn);
    ctx.sow(info_.mlp, View<const A, 2>(hn));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(hn), x);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  detail::DeepSeekAttentionBlock<P> block_;
  MlpBlock<P> mlp_;
  ManifoldConstrainedHyperConnections<P> mhc_;
};

/// DeepSeek MoE layer: MLA + RoutedAndSharedMoE named `DeepSeekMoeBlock_0`. Routing metrics are captured under
/// `<mlp name>.topk_indices` etc. (see sow_moe_metrics).
template <TensorPolicy P>
class DeepSeekMoELayer {
 public:
  static constexpr const char* decoder_block_name = "deepseek";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  static constexpr const char* mlp_name = "DeepSeekMoeBlock_0";
  static constexpr bool supports_mhc = true;
  struct Params {
    typename detail::DeepSeekAttentionBlock<P>::Params attn;
    typename RoutedAndSharedMoE<P>::Params DeepSeekMoeBlock_0;
    typename ManifoldConstrainedHyperConnections<P>::Params mhc_mlp;  ///< k > 1 only
  };

  DeepSeekMoELayer() = default;
  DeepSeekMoELayer(const Config& c, LayerInfo info) : info_(std::move(info)), block_(c, info_.index), moe_(c, MoeFamily::deepseek) {
    if (block_.streams() > 1) mhc_ = ManifoldConstrainedHyperConnections<P>(c, c.emb_dim);
  }

  CacheSpec cache_spec() const { return block_.cache_spec(); }
  StateSpec state_spec() const { return block_.state_spec(); }
  const LayerInfo& info() const { return info_; }
  const MLA<P>& attention() const { return block_.attention(); }
  const RoutedAndSharedMoE<P>& moe() const { return moe_; }

  template <class V>
  void visit(V& v, Params& p) const {
    block_.visit(v, p.attn);
    visit_child(v, "DeepSeekMoeBlock_0", moe_, p.DeepSeekMoeBlock_0);
    if (block_.streams() > 1) visit_child(v, "mhc_mlp", mhc_, p.mhc_mlp);
  }

  /// x [B*T, D] in place. With `metrics`, also reports the routing of this call. Captures: as the dense layer, with
  /// DeepSeekMoeBlock_0 (and its routing metrics, sow_moe_metrics) for mlp.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    block_.apply_engram(ctx, p.attn, cache, x, info_);
    if (block_.streams() > 1) {
      View<A, 2> h = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
      block_.forward_mhc(ctx, p.attn, cache, x, h, info_);
      mhc_.forward(ctx, p.mhc_mlp, View<const A, 2>(h), [&](View<const A, 2> in, View<A, 2> f) {
        ScratchScope inner(ctx.scratch);
        View<A, 2> hn = ctx.scratch.template alloc<A, 2>({in.dim(0), in.dim(1)});
        block_.post_norm(ctx, p.attn, in, hn, info_);
        moe_.forward(ctx, p.DeepSeekMoeBlock_0, View<const A, 2>(hn), f, mt);
        if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
        ctx.sow(info_.mlp, View<const A, 2>(f));
      }, x);
      ctx.sow(info_.name, View<const A, 2>(x));
      return;
    }
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> hn = ctx.scratch.template alloc<A, 2>({M, D});
    block_.forward(ctx, p.attn, cache, x, hn, info_);
    View<A, 2> m = ctx.scratch.template alloc<A, 2>({M, D});
    moe_.forward(ctx, p.DeepSeekMoeBlock_0, View<const A, 2>(hn), m, mt);
    if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    ctx.sow(info_.mlp, View<const A, 2>(m));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(m), x);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  detail::DeepSeekAttentionBlock<P> block_;
  RoutedAndSharedMoE<P> moe_;
  ManifoldConstrainedHyperConnections<P> mhc_;
};

}  // namespace maxtext::layers
