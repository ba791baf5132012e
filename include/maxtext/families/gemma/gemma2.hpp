// families/gemma/gemma2.hpp: MaxText models/gemma2.py Gemma2DecoderLayer; spec decoder.md.
//
// One MaxText layer is a PAIR of Gemma 2 layers: a local sliding-window block (parameters `*_local`) then a global
// block (`*_global`), each the Gemma sandwich of families/gemma/gemma.hpp (post norms per use_post_attn_norm /
// use_post_ffw_norm). The yml's base_num_decoder_layers is therefore half of the real layer count (gemma2-2b: 13 for
// 26 layers); Hugging Face layer 2i is MaxText layers_i *_local, layer 2i+1 its *_global half.
// Both attentions pass attn_logits_soft_cap; the local one sliding_window_size and the config's f32 flags, the global
// one float32_qk_product = float32_logits = True (hard-coded by gemma2.py). No query scalar: 1/sqrt(head_dim)-style
// scaling lives in the query kernel (MaxText's converter multiplies by query_pre_attn_scalar^-0.5 of the original
// model). The final-logit soft cap is applied by the tied head (models/transformer.hpp).
// The layer keeps both halves' keys and values in its cache slot: buffers {local K, local V, global K, global V}.
#pragma once

#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/gemma/gemma.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"

namespace maxtext::layers {

/// MaxText Gemma2DecoderLayer (decoder_block "gemma2"): a local + global pair.
template <TensorPolicy P>
class Gemma2DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "gemma2";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  struct Params {
    typename detail::GemmaBlock<P>::Params local, global;
  };

  Gemma2DecoderLayer() = default;
  Gemma2DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        local_(c, attention_args(c, AttentionType::local_sliding), c.use_post_attn_norm, c.use_post_ffw_norm, "_local"),
        global_(c, attention_args(c, AttentionType::global), c.use_post_attn_norm, c.use_post_ffw_norm, "_global") {}

  /// What gemma2.py passes to self_attention_local (local_sliding) and self_attention_global (global).
  static AttentionArgs attention_args(const Config& c, AttentionType type) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attention_type = type;
    a.attn_logits_soft_cap = c.attn_logits_soft_cap;
    if (type == AttentionType::local_sliding) {
      a.sliding_window_size = c.sliding_window_size;
    } else {
      a.float32_qk_product = true;
      a.float32_logits = true;
    }
    return a;
  }

  /// Local keys/values, then global keys/values.
  CacheSpec cache_spec() const {
    CacheSpec s = local_.cache_spec();
    for (auto w : global_.cache_spec()) s.push_back(w);
    return s;
  }
  const LayerInfo& info() const { return info_; }
  /// The global half's attention (its rotary table covers the same positions as the local one's).
  const Attention<P>& attention() const { return global_.attention(); }

  template <class V>
  void visit(V& v, Params& p) const {
    local_.visit(v, p.local);
    global_.visit(v, p.global);
  }

  /// x [B*T, D] in place. Captures: `<attention>_local` / `<mlp>_local` and `_global` for the sub-modules.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    const std::size_t nl = local_.cache_spec().size();
    MAXTEXT_CHECK(cache.buffers.size() == nl + global_.cache_spec().size(), ShapeError,
                  "[Gemma2DecoderLayer] the KV cache slot has ", cache.buffers.size(), " buffers, expected ",
                  nl + global_.cache_spec().size());
    CacheFor<P> lc, gc;
    for (std::size_t i = 0; i < cache.buffers.size(); ++i) (i < nl ? lc : gc).buffers.push_back(cache.buffers[i]);
    local_.forward(ctx, p.local, lc, x, info_.attention + "_local", info_.mlp + "_local");
    ctx.sow(info_.name, "local", View<const A, 2>(x));
    global_.forward(ctx, p.global, gc, x, info_.attention + "_global", info_.mlp + "_global");
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  detail::GemmaBlock<P> local_, global_;
};

}  // namespace maxtext::layers
