// families/qwen/qwen3.hpp: MaxText models/qwen3.py Qwen3DecoderLayer (AttentionWithNorm + MlpBlock); spec decoder.md,
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
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/mistral/mixtral.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// MaxText Qwen3DecoderLayer (decoder_block "qwen3", dense MLP).
template <TensorPolicy P>
class Qwen3DecoderLayer : public detail::PrePostNormDecoderLayer<P> {
 public:
  static constexpr const char* decoder_block_name = "qwen3";  ///< its line in core/decoder_blocks.hpp
  /// Qwen3-VL's pictures: soft tokens merged, attending as text (MRoPE's 3-D positions, deepstack rows: ForwardOptions).
  static constexpr MediaMerge media_merge = MediaMerge::causal;
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

namespace detail {

/// qwen3.py's Qwen3MoeDecoderLayer: Qwen3's attention, then a RoutedMoE named `moe_block` of hidden size moe_mlp_dim.
template <TensorPolicy P>
struct Qwen3MoeNames {
  static constexpr const char* layer = "Qwen3MoeDecoderLayer";
  static constexpr const char* attention = "self_attention";
  static constexpr const char* moe = "moe_block";
  static constexpr const char* hidden_key = "moe_mlp_dim (base_moe_mlp_dim)";
  static constexpr bool sow_norms = false;
  static constexpr MoeFamily moe_family = MoeFamily::generic;
  static std::int64_t hidden(const Config& c) { return c.moe_mlp_dim; }
  static AttentionArgs attention_args(const Config& c, std::int64_t /*layer_index*/) {
    return Qwen3DecoderLayer<P>::attention_args(c);
  }
};

}  // namespace detail

/// MaxText Qwen3MoeDecoderLayer (decoder_block "qwen3_moe"): Qwen3 attention, then RoutedMoE `moe_block`.
template <TensorPolicy P>
class Qwen3MoeDecoderLayer : public detail::PrePostNormMoeDecoderLayer<P, detail::Qwen3MoeNames<P>> {
 public:
  static constexpr const char* decoder_block_name = "qwen3_moe";  ///< its line in core/decoder_blocks.hpp
  /// Qwen3-Omni's / Qwen3-VL-MoE's pictures: merged as for Qwen3DecoderLayer.
  static constexpr MediaMerge media_merge = MediaMerge::causal;
  using Base = detail::PrePostNormMoeDecoderLayer<P, detail::Qwen3MoeNames<P>>;
  using typename Base::Params;
  using Base::Base;
};

}  // namespace maxtext::layers
