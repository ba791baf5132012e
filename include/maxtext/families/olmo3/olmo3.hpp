// families/olmo3/olmo3.hpp: MaxText models/olmo3.py Olmo3DecoderLayer (decoder_block "olmo3"); spec decoder.md,
// docs/numerics.md §OLMo 3.
//
// Post-norm only: no norm before attention or MLP; their outputs are normalised, then added to the residual:
//   h   = x + RMSNorm_post_attn(Attention(x))      attention, post_self_attention_layer_norm
//   out = h + RMSNorm_post_mlp(MlpBlock(h))         mlp, post_mlp_layer_norm
// Attention (module name `attention`, not `self_attention`): use_qk_norm from the config; with a model_name starting
// with "olmo3" MaxText's Attention normalises q and k over ALL heads together (GlobalRMSNorm, scales [N*H] / [K*H];
// layers/attentions.hpp); query_pre_attn_scalar = head_dim^-0.5 in the forward pass (the query kernel is not
// pre-scaled); q/k/v/out biases when attention_bias. OLMO3_ATTENTION_PATTERN: layer i is local sliding-window when
// i % 4 < 3, global when i % 4 == 3. One rotary embedding (config.rope_type: YaRN in olmo3-7b / olmo3-32b, default in
// olmo3-7b-pt) on every layer, local ones included, as MaxText (and Hugging Face) do; llama.cpp's olmo2 graph skips
// YaRN on sliding layers (docs/numerics.md).
//
// Scanned MaxText checkpoints store the block as Olmo3ScannableBlock: `decoder.layers.layers_{0..3}.X`, each stacked
// over num_layers / 4 repetitions on param_scan_axis; families/olmo3/family.hpp unstacks them into `decoder.layers_i`.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// Length of OLMO3_ATTENTION_PATTERN (3 local sliding-window layers, then 1 global); the yml's
/// inhomogeneous_layer_cycle_interval must equal it (Config::validate).
inline constexpr std::int64_t kOlmo3PatternLength = 4;

/// olmo3.get_attention_type: global for the last layer of each group of four.
inline AttentionType olmo3_attention_type(std::int64_t layer_index) {
  return layer_index % kOlmo3PatternLength == kOlmo3PatternLength - 1 ? AttentionType::global
                                                                      : AttentionType::local_sliding;
}

/// MaxText Olmo3DecoderLayer (decoder_block "olmo3").
template <TensorPolicy P>
class Olmo3DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "olmo3";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  /// The attention module's parameter name (captures `<layer>.attention`).
  static constexpr const char* attention_name = "attention";
  struct Params {
    typename Attention<P>::Params attention;
    typename RMSNorm<P>::Params post_self_attention_layer_norm;
    typename MlpBlock<P>::Params mlp;
    typename RMSNorm<P>::Params post_mlp_layer_norm;
  };

  Olmo3DecoderLayer() = default;
  Olmo3DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        attn_(c, attention_args(c, info_.index)),
        post_attn_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        mlp_(detail::block_mlp<P>(c)),
        post_mlp_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}) {}

  /// What olmo3.py passes to Attention for layer `layer_index`.
  static AttentionArgs attention_args(const Config& c, std::int64_t layer_index) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attention_type = olmo3_attention_type(layer_index);
    a.sliding_window_size = c.sliding_window_size;
    a.use_qk_norm = c.use_qk_norm;
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    a.use_bias_in_projections = c.attention_bias;
    return a;
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "attention", attn_, p.attention);
    visit_child(v, "post_self_attention_layer_norm", post_attn_, p.post_self_attention_layer_norm);
    visit_child(v, "mlp", mlp_, p.mlp);
    visit_child(v, "post_mlp_layer_norm", post_mlp_, p.post_mlp_layer_norm);
  }

  /// x [B*T, D] in place: the residual stream after this layer. Captures the layer output and the attention / MLP
  /// outputs after their post-norms (what is added to the residual).
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    View<A, 2> n = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.attention, View<const A, 2>(x), cache, a);
    post_attn_.forward(ctx, p.post_self_attention_layer_norm, a, n);  // attention_lnx = post_norm(attention(x))
    ctx.sow(info_.attention, View<const A, 2>(n));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(n), x);  // intermediate_inputs = inputs + attention_lnx
    mlp_.forward(ctx, p.mlp, x, a);
    post_mlp_.forward(ctx, p.post_mlp_layer_norm, a, n);  // mlp_lnx = post_mlp_norm(mlp(h))
    ctx.sow(info_.mlp, View<const A, 2>(n));
    ctx.be.add(View<const A, 2>(n), View<const A, 2>(x), x);  // layer_output = mlp_lnx + intermediate_inputs
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  Attention<P> attn_;
  RMSNorm<P> post_attn_;
  MlpBlock<P> mlp_;
  RMSNorm<P> post_mlp_;
};

}  // namespace maxtext::layers
