// families/qwen/qwen2.hpp: MaxText models/qwen2.py Qwen2DecoderLayer (AttentionWithNorm + MlpBlock); spec decoder.md.
// Pre/post RMSNorm like llama2 (same parameter names). What qwen2.py passes to Attention, beyond the config heads and
// f32 flags: use_qk_norm = config.use_qk_norm (false in the qwen2.5 ymls), use_bias_in_projections =
// config.attention_bias (true in the qwen2.5 ymls: `query.bias` [N, H], `key.bias` / `value.bias` [K, H]) and
// query_pre_attn_scalar = head_dim^-0.5 applied to q in the forward pass (so the query kernel is not depth-scaled at
// init and Hugging Face weights load unscaled). MaxText's Attention gives the output projection no bias when
// decoder_block is qwen2, whatever attention_bias says (Hugging Face's o_proj has none either). Global attention,
// no soft cap; a config's sliding window is not applied (qwen2.py passes no attention type).
#pragma once

#include <cmath>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/layer_info.hpp"

namespace maxtext::layers {

/// MaxText Qwen2DecoderLayer (decoder_block "qwen2").
template <TensorPolicy P>
class Qwen2DecoderLayer : public detail::PrePostNormDecoderLayer<P> {
 public:
  static constexpr const char* decoder_block_name = "qwen2";  ///< its line in core/decoder_blocks.hpp
  using Base = detail::PrePostNormDecoderLayer<P>;
  using typename Base::Params;

  Qwen2DecoderLayer() = default;
  Qwen2DecoderLayer(const Config& c, LayerInfo info) : Base(c, std::move(info), attention_args(c)) {}

  /// What qwen2.py's AttentionWithNorm passes: config heads, f32 flags, use_qk_norm, attention_bias,
  /// query_pre_attn_scalar = head_dim^-0.5.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.use_qk_norm = c.use_qk_norm;
    a.use_bias_in_projections = c.attention_bias;
    a.out_bias = false;  // Qwen2's o_proj has no bias
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    return a;
  }
};

}  // namespace maxtext::layers
