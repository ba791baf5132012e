// layers/qwen3.hpp: MaxText models/qwen3.py Qwen3DecoderLayer (AttentionWithNorm + MlpBlock); spec decoder.md,
// configs.md §qwen3.
// Pre/post RMSNorm like llama2 (same parameter names); attention with use_qk_norm = config.use_qk_norm (per-head
// RMSNorm `query_norm` / `key_norm` with scale [head_dim], epsilon normalization_layer_epsilon, 1e-6 in the qwen3
// ymls) and query_pre_attn_scalar = head_dim^-0.5 applied to q in the forward pass (so the query kernel is not
// depth-scaled at init and Hugging Face weights load unscaled). No soft cap; global attention.
// Qwen3MoeDecoderLayer (decoder_block "qwen3_moe") is the same attention followed by a RoutedMoE named `moe_block`
// (not MixtralDecoderLayer's `MoeBlock_0`) with hidden size moe_mlp_dim; routing as MaxText's non-DeepSeek get_topk:
// top-k of the raw gate logits, softmax over those k, divided by their sum when norm_topk_prob (a no-op after the
// softmax up to rounding).
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/llama2.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// MaxText Qwen3DecoderLayer (decoder_block "qwen3", dense MLP).
template <TensorPolicy P>
class Qwen3DecoderLayer : public detail::PrePostNormDecoderLayer<P> {
 public:
  using Base = detail::PrePostNormDecoderLayer<P>;
  using typename Base::Params;

  Qwen3DecoderLayer() = default;
  Qwen3DecoderLayer(const Config& c, LayerInfo info) : Base(c, std::move(info), attention_args(c)) {}

  /// What qwen3.py's AttentionWithNorm passes: config heads, f32 flags, use_qk_norm, query_pre_attn_scalar.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.use_qk_norm = c.use_qk_norm;
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    return a;
  }
};

/// MaxText Qwen3MoeDecoderLayer (decoder_block "qwen3_moe"): Qwen3 attention, then RoutedMoE `moe_block`.
template <TensorPolicy P>
class Qwen3MoeDecoderLayer {
 public:
  using A = typename P::act_t;
  static constexpr const char* mlp_name = "moe_block";
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename Attention<P>::Params self_attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename RoutedMoE<P>::Params moe_block;
  };

  Qwen3MoeDecoderLayer() = default;
  Qwen3MoeDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, Qwen3DecoderLayer<P>::attention_args(c)),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        moe_(RoutedMoE<P>::settings(c, c.moe_mlp_dim)) {
    MAXTEXT_CHECK(c.moe_mlp_dim > 0, ConfigError, "[Qwen3MoeDecoderLayer] moe_mlp_dim (base_moe_mlp_dim) must be > 0, found ",
                  c.moe_mlp_dim);
    MAXTEXT_CHECK(c.moe_expert_input_dim <= 0 || c.moe_expert_input_dim == c.emb_dim, UnsupportedError,
                  "[Qwen3MoeDecoderLayer] moe_expert_input_dim (", c.moe_expert_input_dim, ") different from emb_dim (",
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
    visit_child(v, "moe_block", moe_, p.moe_block);
  }

  /// x [B*T, D] in place: the residual stream after this layer. With `metrics`, also reports the routing.
  /// Captures: the layer output, self_attention, moe_block (+ routing metrics under the moe_block name).
  void forward(const Context<P>& ctx, const Params& p, LayerCache<A>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);  // intermediate_inputs = inputs + attention_lnx
    post_.forward(ctx, p.post_self_attention_layer_norm, x, lnx);
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    moe_.forward(ctx, p.moe_block, View<const A, 2>(lnx), a, mt);
    if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    ctx.sow(info_.mlp, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // layer_output = intermediate_inputs + mlp_lnx
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
