// families/gemma4/gemma4.hpp: MaxText models/gemma4.py Gemma4DecoderLayer and Gemma4MoE (text part; read at MaxText e591f30).
//
//   a   = Attention(RMSNorm_pre(x));  a = RMSNorm_post_attn(a)        pre_self_attention_norm, self_attention
//   h   = a + x
//   m   = FFN(RMSNorm_pre_ffw(h), h); m = RMSNorm_post_ffw(m)         pre_ffw_norm, mlp
//   out = (m + h) * layer_scalar                                        layer_scalar [1]
//
// Attention: GEMMA4_ATTENTION_PATTERN is five local sliding-window layers, then one global layer (i % 6 == 5). Every
// layer normalises q and k per head (use_qk_norm, with scale) and v (use_v_norm; v_norm_with_scale is false in the
// ymls) and multiplies q by nothing (query_pre_attn_scalar 1: the qk norms set the scale). Global layers take
// global_num_kv_heads / global_head_dim when set, and share K = V (value = the key projection, before the norms)
// with share_kv_projections. RoPE: local layers rotate local_rope_proportion (1.0) of the head with
// local_rope_max_timescale; global layers global_rope_proportion (0.25) with global_rope_max_timescale, through
// Gemma4PartialRotaryEmbedding (model_name gemma4*: the first pairs (i, i + d/2) of the whole head rotate, with
// timescales over the full head_dim, the rest pass through; layers/rotary.hpp).
//
// FFN: MlpBlock(mlp_dim), or with num_experts > 1 Gemma4MoE:
//   shared = RMSNorm_post_1(MlpBlock_shared(lnx))                    moe_block.shared_experts (shared_experts * mlp_dim)
//   gate   = RMSNorm_noscale(h) * emb_dim^-0.5 * pre_forward_scale_2  (each product rounded to dtype)
//   routed = RMSNorm_post_2(RoutedMoE(RMSNorm_pre_2(h), gate))      moe_block.MoeBlock_0: gemma4 routing (moe.hpp)
//   m      = routed + shared
//
// Parameters are MaxText's "folded" Gemma form (families/gemma/gemma.hpp): norm scales hold 1 + w, the embedding E*sqrt(D).
// Scanned checkpoints (Gemma4ScannableBlock) are unstacked by families/gemma4/family.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
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

/// Length of GEMMA4_ATTENTION_PATTERN (5 local sliding-window layers, then 1 global).
inline constexpr std::int64_t kGemma4PatternLength = 6;

/// gemma4.get_attention_type: global for the last layer of each group of six.
inline AttentionType gemma4_attention_type(std::int64_t layer_index) {
  return layer_index % kGemma4PatternLength == kGemma4PatternLength - 1 ? AttentionType::global
                                                                        : AttentionType::local_sliding;
}

/// MaxText Gemma4MoE: a shared MLP on the pre-FFW-normed rows and routed experts on their own norm of the residual
/// stream, routed by a scale-free norm of it (see the file comment).
template <TensorPolicy P>
class Gemma4MoE {
 public:
  using A = typename P::act_t;
  struct Params {
    typename RoutedMoE<P>::Params MoeBlock_0;
    typename MlpBlock<P>::Params shared_experts;
    Tensor<A, 1> pre_forward_scale_2;  ///< [D] router input scale
    typename RMSNorm<P>::Params pre_feedforward_layernorm_2, post_feedforward_layernorm_1, post_feedforward_layernorm_2;
  };

  Gemma4MoE() = default;
  explicit Gemma4MoE(const Config& c)
      : D_(c.emb_dim),
        routed_(RoutedMoE<P>::settings(c, c.moe_mlp_dim, MoeFamily::gemma4)),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        gate_norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon), false}) {
    MAXTEXT_CHECK(c.moe_mlp_dim > 0, ConfigError, "[Gemma4MoE] base_moe_mlp_dim must be > 0, found ", c.base_moe_mlp_dim);
    MAXTEXT_CHECK(c.shared_experts >= 1 && c.mlp_dim > 0, ConfigError, "[Gemma4MoE] the shared expert has "
                  "shared_experts * mlp_dim hidden units: both must be > 0, found ", c.shared_experts, " and ", c.mlp_dim);
    MAXTEXT_CHECK(c.moe_expert_input_dim <= 0 || c.moe_expert_input_dim == c.emb_dim, ConfigError,
                  "[Gemma4MoE] the experts read the residual stream: moe_expert_input_dim must be emb_dim (", c.emb_dim,
                  ") or unset, found ", c.moe_expert_input_dim);
    // maxtext_utils.get_shared_expert_mlp_dim: Gemma 4's shared expert is mlp_dim wide (other blocks: moe_mlp_dim).
    shared_ = shared_expert_mlp<P>(c, c.emb_dim, c.shared_experts * c.mlp_dim);
  }
  const RoutedMoE<P>& routed() const { return routed_; }

  template <class V>
  void visit(V& v, Params& p) const {
    {
      Scope<V> s(v, "moe_block");
      visit_child(v, "MoeBlock_0", routed_, p.MoeBlock_0);
      visit_child(v, "shared_experts", shared_, p.shared_experts);
    }
    v.vector("pre_forward_scale_2", p.pre_forward_scale_2, {{D_}, Init::ones});
    visit_child(v, "pre_feedforward_layernorm_2", norm_, p.pre_feedforward_layernorm_2);
    visit_child(v, "post_feedforward_layernorm_1", norm_, p.post_feedforward_layernorm_1);
    visit_child(v, "post_feedforward_layernorm_2", norm_, p.post_feedforward_layernorm_2);
  }

  /// lnx = RMSNorm_pre_ffw(h) and h (the residual stream after attention), both [B*T, D] -> y [B*T, D] (y must alias
  /// neither).
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> lnx, View<const A, 2> h, View<A, 2> y,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const auto& be = ctx.be;
    const std::int64_t M = h.dim(0);
    View<A, 2> shared = ctx.scratch.template alloc<A, 2>({M, D_});
    shared_.forward(ctx, p.shared_experts, lnx, shared);
    norm_.forward(ctx, p.post_feedforward_layernorm_1, shared, shared);

    View<A, 2> xin = ctx.scratch.template alloc<A, 2>({M, D_});
    norm_.forward(ctx, p.pre_feedforward_layernorm_2, h, xin);
    View<A, 2> gate = ctx.scratch.template alloc<A, 2>({M, D_});
    typename RMSNorm<P>::Params none;
    gate_norm_.forward(ctx, none, h, gate);
    be.scale(gate, static_cast<float>(std::pow(static_cast<double>(D_), -0.5)));  // root_size, a Python scalar
    // * pre_forward_scale_2: the [D] vector broadcast over the rows (row stride 0)
    be.activation(View<const A, 2>(gate), Activation::linear,
                  View<const A, 2>(p.pre_forward_scale_2.data(), {M, D_}, {0, 1}), Activation::linear, gate);
    routed_.forward(ctx, p.MoeBlock_0, View<const A, 2>(xin), y, metrics, View<const A, 2>(gate));
    norm_.forward(ctx, p.post_feedforward_layernorm_2, y, y);
    be.add(View<const A, 2>(y), View<const A, 2>(shared), y);
  }

 private:
  std::int64_t D_ = 0;
  RoutedMoE<P> routed_;
  MlpBlock<P> shared_;
  RMSNorm<P> norm_;       ///< every scaled norm of the block (emb_dim, epsilon)
  RMSNorm<P> gate_norm_;  ///< gate_norm: with_scale=False
};

/// MaxText Gemma4DecoderLayer (decoder_block "gemma4").
template <TensorPolicy P>
class Gemma4DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "gemma4";  ///< its line in core/decoder_blocks.hpp
  /// Pictures' soft tokens merged at marked positions, each picture seen whole by its tokens in the sliding-window
  /// layers (bidirectional_mask; the global layers stay causal: attention_args).
  static constexpr MediaMerge media_merge = MediaMerge::bidirectional;
  using A = typename P::act_t;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_norm, post_self_attention_norm, pre_ffw_norm, post_ffw_norm;
    typename Attention<P>::Params self_attention;
    typename MlpBlock<P>::Params mlp;    ///< dense layers
    typename Gemma4MoE<P>::Params moe;   ///< num_experts > 1 (also named `mlp`)
    Tensor<A, 1> layer_scalar;           ///< [1]
  };

  Gemma4DecoderLayer() = default;
  Gemma4DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        moe_(c.num_experts > 1),
        post_attn_(c.use_post_attn_norm),
        post_ffw_(c.use_post_ffw_norm),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, attention_args(c, info_.index)) {
    if (moe_) {
      moe_block_ = Gemma4MoE<P>(c);
    } else {
      mlp_ = detail::block_mlp<P>(c);
    }
  }

  /// What gemma4.py passes to Attention for layer `i` (see the file comment).
  static AttentionArgs attention_args(const Config& c, std::int64_t i) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attention_type = gemma4_attention_type(i);
    a.sliding_window_size = c.sliding_window_size;
    a.attn_logits_soft_cap = c.attn_logits_soft_cap;
    a.use_qk_norm = true;
    a.use_v_norm = true;
    a.query_pre_attn_scalar = 1.0;
    a.media_bidirectional = a.attention_type == AttentionType::local_sliding;  // "only in sliding (local) layers"
    if (a.attention_type == AttentionType::global) {
      if (c.global_num_kv_heads > 0) a.num_kv_heads = c.global_num_kv_heads;
      if (c.global_head_dim > 0) a.head_dim = c.global_head_dim;
      a.share_kv_projections = c.share_kv_projections;
      a.partial_rotary_factor = c.global_rope_proportion;
      a.rope_max_timescale = c.global_rope_max_timescale > 0 ? c.global_rope_max_timescale : c.rope_max_timescale;
    } else {
      a.partial_rotary_factor = c.local_rope_proportion;
      a.rope_max_timescale = c.local_rope_max_timescale > 0 ? c.local_rope_max_timescale : c.rope_max_timescale;
    }
    return a;
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  bool is_moe_layer() const { return moe_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_norm", norm_, p.pre_self_attention_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    if (post_attn_) visit_child(v, "post_self_attention_norm", norm_, p.post_self_attention_norm);
    visit_child(v, "pre_ffw_norm", norm_, p.pre_ffw_norm);
    if (moe_) {
      visit_child(v, "mlp", moe_block_, p.moe);
    } else {
      visit_child(v, "mlp", mlp_, p.mlp);
    }
    if (post_ffw_) visit_child(v, "post_ffw_norm", norm_, p.post_ffw_norm);
    v.vector("layer_scalar", p.layer_scalar, {{1}, Init::ones});
  }

  /// x [B*T, D] in place. Captures the attention and FFN outputs (before their post norms, as MaxText's modules
  /// return them; MoE layers also sow their routing under the FFN's name) and the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    norm_.forward(ctx, p.pre_self_attention_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    if (post_attn_) norm_.forward(ctx, p.post_self_attention_norm, a, a);
    be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // attention_lnx += inputs
    norm_.forward(ctx, p.pre_ffw_norm, x, lnx);
    if (moe_) {
      MoeMetrics local;
      MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
      moe_block_.forward(ctx, p.moe, View<const A, 2>(lnx), View<const A, 2>(x), a, mt);
      if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    } else {
      mlp_.forward(ctx, p.mlp, lnx, a);
    }
    ctx.sow(info_.mlp, View<const A, 2>(a));
    if (post_ffw_) norm_.forward(ctx, p.post_ffw_norm, a, a);
    be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // next_layer_addition = mlp_lnx + residual
    // * layer_scalar: the [1] parameter read on the device, broadcast to every row (row stride 0)
    be.scale_rows(x, View<const A, 2>(p.layer_scalar.data(), {M, 1}, {0, 1}), Activation::linear);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  bool moe_ = false, post_attn_ = false, post_ffw_ = false;
  RMSNorm<P> norm_;  ///< every residual-stream norm of the layer (emb_dim, epsilon)
  Attention<P> attn_;
  MlpBlock<P> mlp_;
  Gemma4MoE<P> moe_block_;
};

}  // namespace maxtext::layers
