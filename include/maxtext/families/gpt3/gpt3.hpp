// families/gpt3/gpt3.hpp: MaxText models/gpt3.py Gpt3MultiHeadAttention and Gpt3DecoderLayer (Gpt3LayerNorm lives in
// normalizations.hpp); spec attention.md §4, decoder.md §GPT3.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attention_op.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// Multi-head attention of GPT-3: q, k, v projections with biases (fused `qkv_proj` [D, 3, N, H] or separate),
/// q divided by sqrt(head_dim) in the forward pass, no rotary embedding, causal + segment mask, output projection
/// with bias.
template <TensorPolicy P>
class Gpt3MultiHeadAttention {
 public:
  using A = typename P::act_t;
  struct Params {
    typename DenseGeneral<P>::Params qkv, query, key, value, out;
  };

  Gpt3MultiHeadAttention() = default;
  /// `name`: capture prefix of this module's sub-outputs (qkv_proj or query/key/value before the 1/sqrt(head_dim)
  /// scaling, attention_op [B, T, N, H], out); empty = names relative to the module.
  explicit Gpt3MultiHeadAttention(const Config& c, std::string name = {})
      : D_(c.emb_dim), N_(c.num_query_heads), H_(c.head_dim), fused_(c.fused_qkv), name_(std::move(name)) {
    MAXTEXT_CHECK(c.num_query_heads == c.num_kv_heads, ConfigError,
                  "[Gpt3MultiHeadAttention] num_query_heads (", c.num_query_heads, ") must equal num_kv_heads (",
                  c.num_kv_heads, ")");
    const Init init = Init::normal;  // nd_dense_init(1.0, "fan_in", "normal"), no query scaling at init
    if (fused_) {
      qkv_ = DenseGeneral<P>({{D_}, {3, N_, H_}, true, init});
    } else {
      proj_ = DenseGeneral<P>({{D_}, {N_, H_}, true, init});
    }
    out_ = DenseGeneral<P>({{N_, H_}, {D_}, true, init});
    AttentionOptions opt;
    opt.float32_qk_product = c.float32_qk_product;
    opt.float32_logits = c.float32_logits;
    op_ = AttentionOp<P>({N_, N_, H_, H_, true, 0, 0, opt, kv_quant_options(c)});
  }
  CacheSpec cache_spec() const { return op_.cache_spec(); }

  template <class V>
  void visit(V& v, Params& p) const {
    if (fused_) {
      visit_child(v, "qkv_proj", qkv_, p.qkv);
    } else {
      visit_child(v, "query", proj_, p.query);
      visit_child(v, "key", proj_, p.key);
      visit_child(v, "value", proj_, p.value);
    }
    visit_child(v, "out", out_, p.out);
  }

  /// x [B*T, D] -> y [B*T, D] (y must not alias x).
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, CacheFor<P>& cache, View<A, 2> y) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), NH = N_ * H_;
    View<A, 3> q, k, v;
    if (fused_) {
      View<A, 2> qkv = ctx.scratch.template alloc<A, 2>({M, 3 * NH});
      qkv_.forward(ctx, p.qkv, x, qkv);
      ctx.sow(name_, "qkv_proj", View<const A, 2>(qkv), {ctx.step.batch, ctx.step.length, 3, N_, H_});
      q = View<A, 3>(qkv.data(), {M, N_, H_}, {3 * NH, H_, 1});
      k = View<A, 3>(qkv.data() + NH, {M, N_, H_}, {3 * NH, H_, 1});
      v = View<A, 3>(qkv.data() + 2 * NH, {M, N_, H_}, {3 * NH, H_, 1});
    } else {
      q = ctx.scratch.template alloc<A, 3>({M, N_, H_});
      k = ctx.scratch.template alloc<A, 3>({M, N_, H_});
      v = ctx.scratch.template alloc<A, 3>({M, N_, H_});
      proj_.forward(ctx, p.query, x, rows(q));
      proj_.forward(ctx, p.key, x, rows(k));
      proj_.forward(ctx, p.value, x, rows(v));
      if (ctx.capture != nullptr) {
        const std::vector<std::int64_t> shape{ctx.step.batch, ctx.step.length, N_, H_};
        ctx.sow(name_, "query", View<const A, 2>(rows(q)), shape);
        ctx.sow(name_, "key", View<const A, 2>(rows(k)), shape);
        ctx.sow(name_, "value", View<const A, 2>(rows(v)), shape);
      }
    }
    // query /= sqrt(head_dim), the divisor cast to dtype first (gpt3.py depth_scaling).
    ctx.be.scale(rows(q), std::sqrt(static_cast<float>(H_)), true);
    View<A, 3> o = ctx.scratch.template alloc<A, 3>({M, N_, H_});
    op_.forward(ctx, q, k, v, cache, View<const A, 1>(), o);
    ctx.sow(name_, "attention_op", View<const A, 2>(rows(o)), {ctx.step.batch, ctx.step.length, N_, H_});
    // Split by heads (models/parallel.hpp): each rank's product over its heads is a partial sum, added over the ranks
    // in f32 before the one rounding.
    out_.forward_reduced(ctx, p.out, View<const A, 2>(rows(o)), y, "out");
    ctx.sow(name_, "out", View<const A, 2>(y));
  }

 private:
  /// [M, heads, d] with contiguous heads -> [M, heads*d] rows.
  static View<A, 2> rows(View<A, 3> t) { return View<A, 2>(t.data(), {t.dim(0), t.dim(1) * t.dim(2)}, {t.stride(0), 1}); }

  std::int64_t D_ = 0, N_ = 0, H_ = 0;
  bool fused_ = true;
  std::string name_;
  DenseGeneral<P> qkv_, proj_, out_;
  AttentionOp<P> op_;
};

/// GPT-3 decoder layer: h = x + Attn(LN(x)); out = h + Mlp(h), the MLP with its own Gpt3LayerNorm pre-norm,
/// biases and `mlp_activations` (gelu, tanh form).
template <TensorPolicy P>
class Gpt3DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "gpt3";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  static constexpr FinalNorm final_norm = FinalNorm::gpt3_layer_norm;  ///< decoders.py: gpt3's decoder_norm
  struct Params {
    typename Gpt3LayerNorm<P>::Params pre_self_attention_norm;
    typename Gpt3MultiHeadAttention<P>::Params self_attention;
    typename MlpBlock<P>::Params mlp;
  };

  Gpt3DecoderLayer() = default;
  Gpt3DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon), true}),
        attn_(c, info_.attention),
        mlp_(mlp_config(c, info_.mlp)) {}

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_norm", norm_, p.pre_self_attention_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "mlp", mlp_, p.mlp);
  }

  /// x [B*T, D] in place: the residual stream after this layer. Captures (names under info().name): the layer
  /// output, pre_self_attention_norm, self_attention (and its qkv_proj | query/key/value, attention_op, out), mlp
  /// (and mlp.mlp_layer_norm).
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    norm_.forward(ctx, p.pre_self_attention_norm, x, lnx);
    ctx.sow(info_.name, "pre_self_attention_norm", View<const A, 2>(lnx));
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // attention_lnx += inputs
    View<A, 2> m = lnx;
    mlp_.forward(ctx, p.mlp, x, m);
    ctx.sow(info_.mlp, View<const A, 2>(m));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(m), x);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  static typename MlpBlock<P>::Config mlp_config(const Config& c, std::string name) {
    typename MlpBlock<P>::Config m{c.emb_dim, c.mlp_dim, parse_activations(c.mlp_activations), true, true,
                                   NormKind::gpt3, static_cast<float>(c.normalization_layer_epsilon), c.fused_mlp,
                                   c.activations_in_float32};
    m.name = std::move(name);
    return m;
  }

  LayerInfo info_;
  Gpt3LayerNorm<P> norm_;
  Gpt3MultiHeadAttention<P> attn_;
  MlpBlock<P> mlp_;
};

}  // namespace maxtext::layers
