// backend/ops.hpp: descriptors of the fused operations every backend implements (rotary tables, attention masks and
// options). Plain data; the tensors they hold live in the backend's memory.
#pragma once

#include <cstdint>

#include "maxtext/core/tensor.hpp"

namespace maxtext {

enum class CopyKind : std::uint8_t { host_to_device, device_to_host, device_to_device, host_to_host };

/// How rotary embeddings pair the lanes of a head. Spec: rope.md.
enum class RopeLayout : std::uint8_t {
  half_split,         ///< pairs (i, i + r/2), output in place: MaxText default RoPE, HF "rotate_half"
  interleaved,        ///< pairs (2i, 2i+1), output in place: LLaMA-3.1 RoPE, llama2.c, GGUF
  interleaved_to_halves,  ///< reads pairs (2i, 2i+1), writes [re_0..re_{r/2-1}, im_0..im_{r/2-1}]: MaxText YaRN
};

/// Precomputed rotary angles: cos/sin [max_positions, rot_dims/2] in f32, indexed by integer position.
/// Lanes [rot_dims, head_dim) pass through unchanged (partial rotary).
struct RotaryTable {
  Tensor<float, 2> cos;
  Tensor<float, 2> sin;
  std::int64_t rot_dims = 0;
  RopeLayout layout = RopeLayout::half_split;
  /// Default RoPE casts sin/cos to the input dtype before rotating; LLaMA-3.1 RoPE and YaRN keep them in f32.
  bool round_sincos_to_input = true;
  /// Multiplies the rotated output (YaRN's `rope_attention_scaling`); 1 = off.
  float post_scale = 1.0f;

  std::int64_t max_positions() const { return cos.empty() ? 0 : cos.dim(0); }
};

/// Which keys a query may see. Query t of batch row b sits at cache index q_start[b] + t; key s exists iff
/// s < kv_len[b]. Spec: attention.md §2 (causal, segment ids, sliding window, chunk), evaluated on cache indices.
struct AttentionMask {
  View<const std::int32_t, 1> q_start;     ///< [B]
  View<const std::int32_t, 1> kv_len;      ///< [B]
  View<const std::int32_t, 2> q_segment;   ///< [B, T] or empty (no segment term)
  View<const std::int32_t, 2> kv_segment;  ///< [B, S] or empty
  bool causal = true;                      ///< key index <= query index
  std::int64_t sliding_window = 0;         ///< > 0: also query index - W < key index
  std::int64_t chunk = 0;                  ///< > 0: floor(query/C) == floor(key/C)
};

/// Numerics knobs of AttentionOp. Spec: attention.md §1.
struct AttentionOptions {
  float soft_cap = 0.0f;             ///< > 0: logit = cap * tanh(logit / cap)
  bool float32_qk_product = false;   ///< keep q.k in f32 (else rounded to the activation dtype)
  bool float32_logits = false;       ///< keep logits in f32 for the softmax
};

/// Token sampling from one row of f32 logits (the rule of models::Sampler, spelled out in docs/backends.md):
/// temperature 0 = argmax (lowest id on ties); otherwise candidates ordered by (logit desc, id asc), the first
/// top_k kept (0 = all), probabilities p_i = exp((l_i - l_max) / temperature), the shortest prefix whose share of
/// the kept mass reaches top_p kept, and the token whose cumulative mass first exceeds u * (kept mass) returned,
/// u being the row's uniform draw in [0, 1).
struct SampleOptions {
  float temperature = 0.0f;
  std::int64_t top_k = 0;
  float top_p = 1.0f;
};

}  // namespace maxtext
