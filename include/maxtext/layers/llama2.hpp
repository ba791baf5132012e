// layers/llama2.hpp: MaxText models/llama2.py LlamaDecoderLayer (pre-norm attention, post-attention norm, MLP), and
// the shared body of MaxText's pre/post-RMSNorm decoder layers (llama2, mistral, qwen3); spec decoder.md §LLAMA2.
//
//   h   = x + Attention(RMSNorm_pre(x))          pre_self_attention_layer_norm, self_attention
//   out = h + MlpBlock(RMSNorm_post(h))          post_self_attention_layer_norm, mlp
//
// The llama2 block passes attn_logits_soft_cap = config.attn_logits_soft_cap and the two f32 flags; attention is
// global causal whatever config.attention_type says (the block passes AttentionType.GLOBAL). RoPE follows the
// config (default, or LLaMA-3.1 when model_name / rope_type starts with "llama3.1", or YaRN).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
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

}  // namespace detail

/// MaxText LlamaDecoderLayer (decoder_block "llama2"): GQA attention with RoPE, RMSNorm pre/post, SwiGLU MLP.
template <TensorPolicy P>
class LlamaDecoderLayer : public detail::PrePostNormDecoderLayer<P> {
 public:
  using Base = detail::PrePostNormDecoderLayer<P>;
  using typename Base::Params;

  LlamaDecoderLayer() = default;
  LlamaDecoderLayer(const Config& c, LayerInfo info) : Base(c, std::move(info), attention_args(c)) {}

  /// What llama2.py passes to Attention: config heads, f32 flags and attn_logits_soft_cap; global attention.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attn_logits_soft_cap = c.attn_logits_soft_cap;
    return a;
  }
};

}  // namespace maxtext::layers
