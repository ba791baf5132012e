// layers/decoders.hpp: MaxText layers/decoders.py DecoderLayer (NNX: nnx_decoders.NNXDecoderLayer), the block of
// decoder_block "default"; spec decoder.md §DEFAULT.
// A parallel block: attention and MLP read the same normalised input and are summed before the residual add:
//   h = RMSNorm_pre(x);  out = x + (Mlp(h) + Attention(h))
// Attention is global causal with the config's RoPE, f32 flags and share_kv_projections; no soft cap.
#pragma once

#include <cstdint>
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

/// MaxText DecoderLayer (decoder_block "default"): pre_self_attention_norm, self_attention, mlp in parallel.
template <TensorPolicy P>
class DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "default";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_norm;
    typename Attention<P>::Params self_attention;
    typename MlpBlock<P>::Params mlp;
  };

  DecoderLayer() = default;
  DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, attention_args(c)),
        mlp_(detail::block_mlp<P>(c)) {}

  /// What DecoderLayer passes to Attention: config heads, f32 flags and share_kv_projections; global attention.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.share_kv_projections = c.share_kv_projections;
    return a;
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_norm", norm_, p.pre_self_attention_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "mlp", mlp_, p.mlp);
  }

  /// x [B*T, D] in place: the residual stream after this layer.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    norm_.forward(ctx, p.pre_self_attention_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    View<A, 2> m = ctx.scratch.template alloc<A, 2>({M, D});
    mlp_.forward(ctx, p.mlp, lnx, m);
    ctx.sow(info_.mlp, View<const A, 2>(m));
    ctx.be.add(View<const A, 2>(m), View<const A, 2>(a), m);  // next_layer_addition = mlp_lnx + attention_lnx
    ctx.be.add(View<const A, 2>(m), View<const A, 2>(x), x);  // layer_output = next_layer_addition + inputs
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  RMSNorm<P> norm_;
  Attention<P> attn_;
  MlpBlock<P> mlp_;
};

}  // namespace maxtext::layers
