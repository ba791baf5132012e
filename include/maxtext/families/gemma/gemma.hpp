// families/gemma/gemma.hpp: MaxText models/gemma.py GemmaDecoderLayer, and the norm-attention-norm-MLP body the Gemma 2 and
// Gemma 3 layers share (families/gemma/gemma2.hpp, families/gemma/gemma3.hpp); spec decoder.md.
//
//   a   = Attention(RMSNorm_pre(x));          [a = RMSNorm_post_attn(a)]     pre_self_attention_norm, self_attention
//   h   = a + x
//   m   = MlpBlock(RMSNorm_pre_ffw(h));       [m = RMSNorm_post_ffw(m)]      pre_ffw_norm, mlp
//   out = m + h
//
// The bracketed post norms exist in Gemma 2 / 3 (use_post_attn_norm, use_post_ffw_norm); gemma.py never builds them.
// The Gemma block passes no attention type, window or soft cap: global causal attention, and no query scalar, so the
// 1/sqrt(head_dim) lives in the query kernel (MaxText's converter folds it in; the HF/GGUF importers do the same).
// MaxText's Gemma parameters are "folded": the RMSNorm scales hold 1 + w of the original (1 + w) norms, and the
// embedding table holds E * sqrt(emb_dim); the forward pass here is therefore a plain RMSNorm and a plain lookup.
// The tied output head (logits_via_embedding) divides by sqrt(emb_dim) again (normalize_embedding_logits).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

namespace detail {

/// One Gemma "sandwich" block: pre norm, attention, optional post norm, residual; pre-FFW norm, MLP, optional post
/// norm, residual. Parameter names take `suffix` (Gemma 2: "_local" / "_global"; Gemma / Gemma 3: "").
template <TensorPolicy P>
class GemmaBlock {
 public:
  using A = typename P::act_t;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_norm, post_self_attention_norm, pre_ffw_norm, post_ffw_norm;
    typename Attention<P>::Params self_attention;
    typename MlpBlock<P>::Params mlp;
  };

  GemmaBlock() = default;
  GemmaBlock(const Config& c, const AttentionArgs& args, bool post_attn_norm, bool post_ffw_norm, std::string suffix)
      : suffix_(std::move(suffix)),
        post_attn_(post_attn_norm),
        post_ffw_(post_ffw_norm),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, args),
        mlp_(block_mlp<P>(c)) {}

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const Attention<P>& attention() const { return attn_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_norm" + suffix_, norm_, p.pre_self_attention_norm);
    visit_child(v, "self_attention" + suffix_, attn_, p.self_attention);
    if (post_attn_) visit_child(v, "post_self_attention_norm" + suffix_, norm_, p.post_self_attention_norm);
    visit_child(v, "pre_ffw_norm" + suffix_, norm_, p.pre_ffw_norm);
    visit_child(v, "mlp" + suffix_, mlp_, p.mlp);
    if (post_ffw_) visit_child(v, "post_ffw_norm" + suffix_, norm_, p.post_ffw_norm);
  }

  /// x [B*T, D] in place; `attn_name` / `mlp_name` are the capture names of the sub-module outputs (before the post
  /// norms, as MaxText's modules return them).
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x, const std::string& attn_name,
               const std::string& mlp_name) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    norm_.forward(ctx, p.pre_self_attention_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(attn_name, View<const A, 2>(a));
    if (post_attn_) norm_.forward(ctx, p.post_self_attention_norm, a, a);
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // attention_lnx += inputs
    norm_.forward(ctx, p.pre_ffw_norm, x, lnx);
    mlp_.forward(ctx, p.mlp, lnx, a);
    ctx.sow(mlp_name, View<const A, 2>(a));
    if (post_ffw_) norm_.forward(ctx, p.post_ffw_norm, a, a);
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // next_layer_addition = mlp_lnx + residual
  }

 private:
  std::string suffix_;
  bool post_attn_ = false, post_ffw_ = false;
  RMSNorm<P> norm_;  ///< every norm of the block has the same shape and epsilon
  Attention<P> attn_;
  MlpBlock<P> mlp_;
};

}  // namespace detail

/// MaxText GemmaDecoderLayer (decoder_block "gemma"): global attention, GeGLU MLP (mlp_activations from the config).
template <TensorPolicy P>
class GemmaDecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "gemma";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  using Params = typename detail::GemmaBlock<P>::Params;

  GemmaDecoderLayer() = default;
  GemmaDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)), block_(c, attention_args(c), false, false, "") {}

  /// What gemma.py passes to Attention: config heads and the two f32 flags; global attention, no cap, no scalar.
  static AttentionArgs attention_args(const Config& c) { return AttentionArgs::basic(c); }

  CacheSpec cache_spec() const { return block_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return block_.attention(); }

  template <class V>
  void visit(V& v, Params& p) const {
    block_.visit(v, p);
  }

  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    block_.forward(ctx, p, cache, x, info_.attention, info_.mlp);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  detail::GemmaBlock<P> block_;
};

}  // namespace maxtext::layers
