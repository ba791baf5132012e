// families/gemma/gemma3.hpp: MaxText models/gemma3.py Gemma3DecoderLayer (text); spec decoder.md, rope.md §Selection.
//
// The Gemma sandwich block (families/gemma/gemma.hpp) with per-head query/key RMSNorm and the query multiplied by
// query_pre_attn_scalar in the forward pass (so the query kernel is NOT pre-scaled). The attention type follows the
// layer index: GEMMA3_ATTENTION_PATTERN is five local sliding-window layers then one global layer, so layer i is
// global when i % 6 == 5. Local layers use local_rope_max_timescale (10000) and no linear RoPE scaling; global layers
// use rope_max_timescale (1e6) with rope_linear_scaling_factor (8 in the 4b/12b/27b ymls) (layers/rotary.hpp).
// query_pre_attn_scalar: head_dim^-0.5 for gemma3-4b / gemma3-12b, (base_emb_dim // base_num_query_heads)^-0.5 for
// gemma3-27b; any other model_name is refused (Config::validate), as MaxText raises. A custom-sized Gemma 3 is
// therefore configured MaxText's way: model_name=gemma3-4b (or -27b) and the sizes as overrides, which win over the
// model file (`maxtext logits --config configs/models/gemma3-4b.yml ... base_emb_dim=32 ...`).
//
// Scanned MaxText checkpoints store Gemma 3 as `decoder.layers.layers_{0..5}` (each stacked over num_layers // 6
// repetitions) plus `decoder.layers_remainder.layers_{r}` for the num_layers % 6 leftover layers; families/gemma/family.hpp
// unstacks both into `decoder.layers_i`.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/gemma/gemma.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"

namespace maxtext::layers {

/// Length of GEMMA3_ATTENTION_PATTERN (5 local sliding-window layers, then 1 global).
inline constexpr std::int64_t kGemma3PatternLength = 6;

/// gemma3.get_attention_type: global for the last layer of each group of six.
inline AttentionType gemma3_attention_type(std::int64_t layer_index) {
  return layer_index % kGemma3PatternLength == kGemma3PatternLength - 1 ? AttentionType::global
                                                                        : AttentionType::local_sliding;
}

/// gemma3.get_query_pre_attn_scalar.
inline double gemma3_query_pre_attn_scalar(const Config& c) {
  if (c.model_name == "gemma3-4b" || c.model_name == "gemma3-12b") return std::pow(static_cast<double>(c.head_dim), -0.5);
  if (c.model_name == "gemma3-27b") {
    return std::pow(static_cast<double>(c.base_emb_dim / c.base_num_query_heads), -0.5);
  }
  MAXTEXT_THROW(ConfigError, "[Gemma3DecoderLayer] no query_pre_attn_scalar for model_name '", c.model_name,
                "' (MaxText knows gemma3-4b, gemma3-12b and gemma3-27b)");
}

/// MaxText Gemma3DecoderLayer (decoder_block "gemma3").
template <TensorPolicy P>
class Gemma3DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "gemma3";  ///< its line in core/decoder_blocks.hpp
  /// Pictures' soft tokens merged at marked positions, each picture seen whole by its tokens (bidirectional_mask).
  static constexpr MediaMerge media_merge = MediaMerge::bidirectional;
  using A = typename P::act_t;
  using Params = typename detail::GemmaBlock<P>::Params;

  Gemma3DecoderLayer() = default;
  Gemma3DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        block_(c, attention_args(c, info_.index), c.use_post_attn_norm, c.use_post_ffw_norm, "") {}

  /// What gemma3.py passes to Attention for layer `layer_index`.
  static AttentionArgs attention_args(const Config& c, std::int64_t layer_index) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attention_type = gemma3_attention_type(layer_index);
    a.sliding_window_size = c.sliding_window_size;
    a.attn_logits_soft_cap = c.attn_logits_soft_cap;
    a.use_qk_norm = true;
    a.query_pre_attn_scalar = gemma3_query_pre_attn_scalar(c);
    return a;
  }

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
