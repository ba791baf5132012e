// families/llama4/llama4.hpp: MaxText models/llama4.py Llama4DecoderLayer (decoder_block "llama4", text only);
// configs/models/llama4-17b-16e.yml (Scout), llama4-17b-128e.yml (Maverick).
//
//   h   = x + Attention(RMSNorm_pre(x))       pre_self_attention_layer_norm, self_attention
//   out = h + FFN(RMSNorm_post(h))            post_self_attention_layer_norm, then `Llama4MoEBlock_0` or `mlp`
//
// What varies with the layer index i (llama4.py determine_is_nope_layer / determine_is_moe_layer):
//  - NoPE layers, (i + 1) % nope_layer_interval == 0 (interval > 0): global attention without RoPE, queries scaled by
//    the temperature-tuning factor 1 + 0.1 * log(floor((pos + 1) / 8192) + 1) when temperature_tuning;
//    the others: chunked attention (chunk_attn_window_size) with the config's RoPE (Llama-3.1 in the ymls) and, with
//    use_qk_norm, an L2 norm of q and k after RoPE (no scale; layers/attentions.hpp).
//  - MoE layers, (i + 1) % interleave_moe_layer_step == 0 (step > 0): RoutedAndSharedMoE `Llama4MoEBlock_0` with
//    Llama 4 routing (top-1 of the raw gate logits, the expert input scaled by sigmoid(logit), weight 1; moe.hpp)
//    plus the shared expert; the others: a dense SwiGLU MlpBlock `mlp` of width mlp_dim.
// Queries are scaled by head_dim^-0.5 in the forward pass (query_pre_attn_scalar), as in qwen3.
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

/// llama4.py determine_is_nope_layer: layer `i` (0-based) has no rotary embedding.
inline bool llama4_is_nope_layer(std::int64_t i, std::int64_t nope_layer_interval) {
  return nope_layer_interval > 0 && (i + 1) % nope_layer_interval == 0;
}
/// llama4.py determine_is_moe_layer: layer `i` (0-based) is a MoE layer.
inline bool llama4_is_moe_layer(std::int64_t i, std::int64_t interleave_moe_layer_step) {
  return interleave_moe_layer_step > 0 && (i + 1) % interleave_moe_layer_step == 0;
}

/// MaxText Llama4DecoderLayer (decoder_block "llama4").
template <TensorPolicy P>
class Llama4DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "llama4";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  /// Dense layers; MoE layers capture under Llama4MoEBlock_0 (MaxText names).
  static constexpr const char* mlp_name = "mlp";
  static constexpr const char* hf_mlp_name = "feed_forward";  ///< transformers' name, dense and MoE layers alike
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm;
    typename Attention<P>::Params attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename MlpBlock<P>::Params mlp;                   ///< dense layers
    typename RoutedAndSharedMoE<P>::Params moe;         ///< MoE layers
  };

  Llama4DecoderLayer() = default;
  Llama4DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        moe_layer_(llama4_is_moe_layer(info_.index, c.interleave_moe_layer_step)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, attention_args(c, info_.index)),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}) {
    if (moe_layer_) {
      moe_ = RoutedAndSharedMoE<P>(c, MoeFamily::llama4);
      // MaxText's tree names the two FFNs apart (`mlp`, `Llama4MoEBlock_0`); transformers' (`feed_forward`) does not.
      if (info_.mlp == join_name(info_.name, mlp_name)) info_.mlp = join_name(info_.name, "Llama4MoEBlock_0");
    } else {
      mlp_ = detail::block_mlp<P>(c);
    }
  }

  /// What llama4.py passes for layer `i`: config heads, f32 flags, use_qk_norm (the L2 norm on RoPE layers),
  /// query_pre_attn_scalar = head_dim^-0.5, NoPE + global + temperature tuning or chunked attention.
  static AttentionArgs attention_args(const Config& c, std::int64_t i) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.use_qk_norm = c.use_qk_norm;
    a.qk_norm_l2 = true;  // Llama 4's qk norm is L2
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    a.is_nope_layer = llama4_is_nope_layer(i, c.nope_layer_interval);
    a.attention_type = a.is_nope_layer ? AttentionType::global : AttentionType::chunk;
    a.temperature_tuning = c.temperature_tuning;
    a.temperature_tuning_scale = 0.1;
    a.temperature_tuning_floor_scale = 8192.0;
    return a;
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  bool is_moe_layer() const { return moe_layer_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, "self_attention", attn_, p.attention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    if (moe_layer_) {
      visit_child(v, "Llama4MoEBlock_0", moe_, p.moe);
    } else {
      visit_child(v, "mlp", mlp_, p.mlp);
    }
  }

  /// x [B*T, D] in place. Captures the attention and FFN outputs (MoE layers: routing metrics under the FFN's name,
  /// `<layer>.Llama4MoEBlock_0` or, with Hugging Face names, `<layer>.feed_forward`) and the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.pre_self_attention_layer_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);  // intermediate_inputs = inputs + attention_lnx
    post_.forward(ctx, p.post_self_attention_layer_norm, x, lnx);
    if (moe_layer_) {
      MoeMetrics local;
      MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
      moe_.forward(ctx, p.moe, View<const A, 2>(lnx), a, mt);
      if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    } else {
      mlp_.forward(ctx, p.mlp, lnx, a);
    }
    ctx.sow(info_.mlp, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);  // layer_output = mlp_lnx + intermediate_inputs
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  bool moe_layer_ = false;
  RMSNorm<P> pre_;
  Attention<P> attn_;
  RMSNorm<P> post_;
  MlpBlock<P> mlp_;
  RoutedAndSharedMoE<P> moe_;
};

}  // namespace maxtext::layers
