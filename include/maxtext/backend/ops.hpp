// backend/ops.hpp: descriptors of the fused operations every backend implements (rotary tables, attention masks and
// options). Plain data; the tensors they hold live in the backend's memory.
#pragma once

#include <cstdint>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/core/config.hpp"
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
  /// MaxText's bidirectional_mask (Gemma 3 / Gemma 4 pictures): query (b, t) also sees every key of
  /// [bidir_begin(b, t), bidir_end(b, t)) (its picture's tokens, OR'ed to the terms above), nothing more where
  /// begin >= end. Both [B, T] or both empty. The range holds the query and lies within one segment (the caller
  /// checks), so the visible keys stay one contiguous range per query.
  View<const std::int32_t, 2> bidir_begin;
  View<const std::int32_t, 2> bidir_end;
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

/// Mixture-of-experts routing of one token (MaxText moe.py GateLogit score/bias + RoutedMoE.get_topk); spec moe.md.
/// From gate logits z [E] (in the gate dtype G) a backend's moe_route computes
///   s = softmax_E(z) if score_softmax, else act(z) with act = `score` (linear for routed_score_func ""); rounded to G;
///   b = s + bias (rounded to G) when a bias is given, else b = s;
///   selection: deepseek == true (model_name deepseek3* / deepseek4*): if n_groups > 0 the E experts form n_groups
///     contiguous groups, a group's score is the f32 sum of its two largest b, the topk_groups best groups are kept
///     and every other expert's b becomes -inf; idx = top_k(b, k); w = s[idx] (the unbiased scores).
///     deepseek == false: idx = top_k(b, k), w = b[idx] (a routing bias, if any, is part of the weights; groups are
///     ignored, as in MaxText).
///   top_k orders by value, descending; equal values (including -inf) in increasing expert index.
///   weights: if softmax_weights: w = round_A(softmax_j(w)) (f32 softmax over the k values);
///     if normalize: w = round_G(w / round_G(sum_j w + normalize_eps)); then if scale != 1: w = round_G(w * scale).
/// Outputs idx [M, k] (int32), w [M, k] (f32 values of G/A), and optionally the biased scores b [M, E] (f32) for
/// load-balance statistics.
struct MoeRouting {
  std::int64_t num_experts_per_tok = 1;  ///< k
  bool score_softmax = false;            ///< routed_score_func "softmax"
  Activation score = Activation::linear; ///< element-wise routed_score_func (sigmoid, sqrtsoftplus, ...)
  bool deepseek = false;                 ///< DeepSeek-V3 selection: bias for selection only, groups
  std::int64_t n_groups = 0;             ///< > 0: group-limited selection (deepseek only)
  std::int64_t topk_groups = 0;
  bool softmax_weights = false;          ///< softmax over the k selected values (non-DeepSeek blocks)
  bool normalize = false;                ///< w /= (sum_j w + normalize_eps)
  float normalize_eps = 0.0f;
  float scale = 1.0f;                    ///< routed_scaling_factor (DeepSeek blocks)
};


/// Manifold-constrained hyper-connections (MaxText layers/mhc.py; layers/mhc.hpp): how one token's k x k residual
/// mixing is formed. k streams; the full form normalises k x k logits with Sinkhorn-Knopp (`sinkhorn_iterations`
/// rounds, f32), the lite form (mHC-lite, `enable_mhc_lite`) mixes the k! permutation matrices with softmax weights.
struct MhcOptions {
  std::int64_t k = 1;
  bool lite = false;
  std::int64_t sinkhorn_iterations = 20;
};
/// The width of the residual-mapping projection: k * k (full) or k! (lite).
MAXTEXT_HD inline std::int64_t mhc_res_width(const MhcOptions& o) {
  if (!o.lite) return o.k * o.k;
  std::int64_t f = 1;
  for (std::int64_t i = 2; i <= o.k; ++i) f *= i;
  return f;
}
/// The learned scalars and biases of one mHC module, in backend memory (activation type): the three alpha scales
/// [1] and the biases pre_beta [k], post_beta [k], res_beta [k*k or k!].
template <class A>
struct MhcCoefficients {
  const A* pre_scale = nullptr;
  const A* post_scale = nullptr;
  const A* res_scale = nullptr;
  const A* pre_beta = nullptr;
  const A* post_beta = nullptr;
  const A* res_beta = nullptr;
};

/// Gated DeltaNet (MaxText qwen3.py Qwen3NextGatedDeltaNet; families/qwen3_next/qwen3_next.hpp): the head layout of its delta
/// rule. Value head h reads key head h / (value_heads / key_heads) (jnp.repeat); each value head keeps a state
/// [key_dim, value_dim] (row-major, f32) per sequence.
struct GdnShape {
  std::int64_t key_heads = 1;
  std::int64_t value_heads = 1;
  std::int64_t key_dim = 1;
  std::int64_t value_dim = 1;
  /// Floats of one sequence's recurrent state: value_heads * key_dim * value_dim.
  MAXTEXT_HD std::int64_t state_width() const { return value_heads * key_dim * value_dim; }
};

}  // namespace maxtext
