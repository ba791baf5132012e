// backend/concepts.hpp: what a backend must provide. Layers call nothing else, so a model type runs on any
// backend that satisfies `Backend`. The semantics of each operation are documented in docs/backends.md and on the
// CPU implementation (backend/cpu/backend.hpp); the reference backend is the executable definition.
//
// Conventions for every operation:
//  - tensors are Views into the backend's memory (memory()); the last axis of every operand is contiguous;
//  - A is the activation type (MaxText `dtype`), W the weight storage type, accumulation is in f32;
//  - outputs are rounded to their element type once per MaxText op (see each function's comment);
//  - operations may run asynchronously on the backend's stream; synchronize() waits for all of them;
//  - integer inputs (token ids, positions, segment ids) are int32 in backend memory.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext {

/// Device memory and transfers.
template <class B>
concept BackendMemory = requires(B& b, const B& cb, void* dst, const void* src, std::size_t n) {
  { cb.memory() } -> std::convertible_to<const std::shared_ptr<MemoryResource>&>;
  cb.copy(dst, src, n, CopyKind::host_to_device);
  cb.synchronize();
  { B::name } -> std::convertible_to<const char*>;
};

/// Matrix products: y = x . W^T (+ bias) with weights prepared once by the backend.
template <class B>
concept BackendLinear = requires(const B& b, Matrix<float> w, View<const float, 2> x, View<float, 2> y,
                                 View<const float, 1> bias) {
  { b.prepare(w) } -> std::same_as<Matrix<float>>;
  b.matmul(x, w, y, bias);
};

/// Norms and element-wise kernels.
template <class B>
concept BackendElementwise = requires(const B& b, View<const float, 2> x, View<float, 2> y, View<const float, 1> s,
                                      View<float, 3> x3, View<const std::int32_t, 1> ids, const RotaryTable& rt,
                                      const Matrix<float>& table) {
  b.rms_norm(x, s, 1e-6f, 0.0f, y);
  b.layer_norm(x, s, s, 1e-6f, y);
  b.add(x, x, y);
  b.activation(x, Activation::silu, x, Activation::linear, y);
  b.scale(y, 2.0f, false);
  b.scale_rows(y, x, Activation::sigmoid);
  b.soft_cap(y, 30.0f);
  b.convert(x, y);
  b.copy(x, y);
  b.embed(table, ids, y);
  b.rotary(x3, ids, rt);
};

/// The attention operation (MaxText AttentionOp) over cached keys/values.
template <class B>
concept BackendAttention = requires(const B& b, View<const float, 4> q, View<float, 4> o, const AttentionMask& m,
                                    const AttentionOptions& opt, View<const float, 1> sinks) {
  b.attention(q, q, q, m, opt, sinks, o);
};

/// Row reductions: softmax over the last axis, and drawing tokens from logits on the device.
template <class B>
concept BackendReduction = requires(const B& b, View<const float, 2> x, View<float, 2> y, const SampleOptions& so,
                                    View<const float, 1> u, View<std::int32_t, 1> ids) {
  b.softmax(x, y);
  b.sample(x, so, u, ids);
};

/// Mixture-of-experts token permutation: group the (token, choice) assignments by expert and back.
template <class B>
concept BackendMoePermutation = requires(const B& b, View<const float, 2> x, View<const std::int32_t, 2> experts,
                              View<float, 2> rows, View<std::int32_t, 2> slot, View<std::int32_t, 1> offsets,
                              View<const std::int32_t, 2> cslot, View<const float, 2> w, View<float, 2> y) {
  b.moe_permute(x, experts, std::int64_t{8}, rows, slot, offsets);
  b.moe_unpermute(x, cslot, w, y);
};

template <class B>
concept Backend = BackendMemory<B> && BackendLinear<B> && BackendElementwise<B> && BackendAttention<B> &&
                  BackendReduction<B> && BackendMoePermutation<B>;

/// Mixture-of-experts kernels (layers/moe.hpp): routing (MoeRouting in ops.hpp) and the row gather / weighted
/// scatter-add around each expert's matrix products:
///   moe_route(z [M,E], bias [E] or empty, routing, idx [M,k], w [M,k], scores [M,E] or empty);
///   gather_rows(x [M,D], rows [n], y [n,D]): y[i] = x[rows[i]];
///   scatter_add_rows(y [n,D], rows [n], w [n], acc [M,D] f32): acc[rows[i]] += w[i] * y[i] (rows distinct);
///   clamped_glu(h0 [n,F], h1 [n,F], act, alpha, limit, y [n,F], form = gpt_oss): the clamped SwiGLUs of GPT-OSS
///     and DeepSeek-V4 (math::clamped_swiglu, ClampedGluForm).
template <class B>
concept BackendMoE = requires(const B& b, View<const float, 2> z, View<const float, 1> bias, const MoeRouting& r,
                              View<std::int32_t, 2> idx, View<float, 2> w, View<const std::int32_t, 1> rows,
                              View<float, 2> y, View<const float, 1> wr) {
  b.moe_route(z, bias, r, idx, w, w);
  b.gather_rows(z, rows, y);
  b.scatter_add_rows(z, rows, wr, y);
  b.clamped_glu(z, z, Activation::sigmoid, 1.702f, 7.0f, y);
  b.clamped_glu(z, z, Activation::silu, 1.0f, 10.0f, y, ClampedGluForm::swiglu);
};

/// Per-head products with slices of one weight matrix (MLA's absorbed form, layers/attention_mla.hpp): for head h
/// the block W_h = rows [h*head_stride + row_offset, ...) of w;
///   transpose_w == false: y[m,h,:] = x[m,h,:] . W_h^T   (W_h has y.dim(2) rows of x.dim(2) columns);
///   transpose_w == true:  y[m,h,:] = x[m,h,:] . W_h     (W_h has x.dim(2) rows of y.dim(2) = w.cols columns).
/// Accumulated in f32, rounded once to y's type.
template <class B>
concept BackendHeadMatmul = requires(const B& b, View<const float, 3> x, const Matrix<float>& w, View<float, 3> y) {
  b.head_matmul(x, w, std::int64_t{0}, std::int64_t{0}, false, y);
};


/// Manifold-constrained hyper-connections (layers/mhc.hpp; MhcOptions in ops.hpp), on residual streams held as
/// [M, k*D] (stream s = columns [s*D, (s+1)*D)):
///   mhc_maps(hp [M,k], hq [M,k], hr [M,R], coefficients, options, pre [M,k], post [M,k], res [M,k*k]);
///   stream_sum(x [M,k*D], w [M,k] or empty, y [M,D]): the (weighted) sum of the streams, rounded once;
///   stream_mix(x [M,k*D], res [M,k*k], f [M,D], post [M,k], y [M,k*D]): residual mixing + post-mapped branch.
template <class B>
concept BackendHyperConnections = requires(const B& b, View<const float, 2> x, View<float, 2> y,
                                           const MhcCoefficients<float>& c, const MhcOptions& o) {
  b.mhc_maps(x, x, x, c, o, y, y, y);
  b.stream_sum(x, x, y);
  b.stream_mix(x, x, x, x, y);
};

/// DeepSeek's Engram (layers/engram.hpp; MaxText layers/engram.py), on G streams held as [M, G*D]:
///   engram_gate(q [M,G*D], k [M,G*D], v [M,D], y [M,G*D]): y(m, g*D + d) = r(gate(m,g) v(m,d)) with
///     gate(m,g) = kmath::engram_gate<A>(sum_d q(m,g*D+d) k(m,g*D+d), sqrt(D)) (the dot product in f32).
template <class B>
concept BackendEngram = requires(const B& b, View<const float, 2> x, View<float, 2> y) {
  b.engram_gate(x, x, x, y);
};

/// Gated DeltaNet (families/qwen3_next/qwen3_next.hpp; MaxText qwen3.py) on B sequences of T = M / B tokens (row m = b*T + t).
/// Sequence b continues its cached state when start[b] > 0 and starts from zeros when start[b] == 0; its tokens
/// t >= valid[b] (right padding; `valid` empty: all T) leave the state unchanged (MaxText zeroes k, v and g there).
/// start / valid are int32 [B] in backend memory, the states f32 [B, width] in backend memory.
///   causal_conv1d(x [M,C], w [Kc*C] (tap i of channel c at i*C + c), start, valid, state [B,H*C], y [M,C],
///                 dilation d = 1), H = (Kc-1)*d: the depthwise causal convolution with SiLU,
///     y[b,t,c] = round(silu(round(sum_i in(t-H+i*d, c) w[i,c]))), where in(s) = x[b,s,c] for s >= 0 and the state's
///     row H+s (oldest first) for s < 0; afterwards the state holds the last H inputs (before the convolution) of the
///     sequence. y must not alias x.
///   gated_delta_rule(q [M,Hk*Dk], k [M,Hk*Dk], v [M,Hv*Dv], a [M,Hv], b [M,Hv], a_log [Hv] f32, dt_bias [Hv] f32,
///                    shape, start, valid, state [B, Hv*Dk*Dv], o [M,Hv*Dv]): per value head h (key head h/(Hv/Hk)),
///     q <- l2norm(q) / sqrt(Dk), k <- l2norm(k) (x * rsqrt(sum x^2 + 1e-6)), beta = sigmoid(b),
///     g = -exp(a_log) softplus(a + dt_bias), then S <- e^g S; u = beta (v - k^T S); S <- S + k u^T; o = q^T S.
///     f32 throughout, o rounded once. Padding tokens give o = q^T S with S unchanged.
template <class B>
concept BackendGatedDeltaNet = requires(const B& b, View<const float, 2> x, View<const float, 1> w,
                                        View<const std::int32_t, 1> ids, View<float, 2> s, View<float, 2> y,
                                        const GdnShape& shape) {
  b.causal_conv1d(x, w, ids, ids, s, y);
  b.causal_conv1d(x, w, ids, ids, s, y, std::int64_t{2});
  b.gated_delta_rule(x, x, x, x, x, w, w, shape, ids, ids, s, y);
};

/// DeepSeek-V4's compressed attention (families/deepseek4/deepseek4.hpp; MaxText layers/attention_compressed.py) on B sequences
/// of T = M / B tokens (row m = b*T + t, at cache index p = q_start[b] + t). kv / gate / blocks are cache buffers
/// [B, S, width] in backend memory; q_start, first, count int32 [B] in backend memory.
///   compress_pool(kv [B,S,F], gate [B,S,F], bias [r,F], r, overlap, first, count, out [B,n,d]): out[b,i] (i <
///     count[b]; zeros beyond) is block j = first[b] + i of sequence b pooled by kmath::compress_pool_feature (HCA:
///     overlap false, F = d; CSA: overlap true, F = 2d). The blocks' tokens must be in kv / gate.
///   indexer_topk(q [M,H,d], w [M,H], blocks [B,S',d], q_start, r, score_scale, weight_scale, scores [M,S'] f32,
///                idx [M,k]): the blocks j with (j+1)*r <= p+1 are visible to token m; scores[m,j] =
///     kmath::indexer_score (-inf where not visible) and idx[m] = the min(k, visible) best j (score desc, j asc;
///     jax.lax.top_k's order), then -1.
///   compressed_attention(q [B,T,N,d], kv [B,S,d], blocks [B,S',d], q_start, window W, r, selected [M,k] or empty,
///                        sinks [N], options, out [B,T,N,d]): query (b,t,n) attends over the keys s of kv (keys are
///     the values) with p - W < s <= p (W <= 0: all s <= p) and, when r > 0, over blocks j: those listed in
///     selected[m] (entries >= 0), or every complete one ((j+1)*r <= p+1) when `selected` is empty. Logits q.k
///     through kmath::attention_logit (no scaling, no soft cap), the sink logit sinks[n] joins the denominator;
///     out rounded once.
template <class B>
concept BackendCompressedAttention = requires(const B& b, View<const float, 3> x3, View<const float, 2> x2,
                                              View<const std::int32_t, 1> ids, View<const std::int32_t, 2> sel,
                                              View<float, 3> y3, View<float, 2> s2, View<std::int32_t, 2> idx,
                                              View<const float, 4> q4, View<const float, 1> sinks,
                                              const AttentionOptions& opt, View<float, 4> o4) {
  b.compress_pool(x3, x3, x2, std::int64_t{4}, true, ids, ids, y3);
  b.indexer_topk(x3, x2, x3, ids, std::int64_t{4}, 1.0f, 1.0f, s2, idx);
  b.compressed_attention(q4, x3, x3, ids, std::int64_t{128}, std::int64_t{4}, sel, sinks, opt, o4);
};

/// Backends whose products read runtime-typed matrices (Matrix<ggml_byte>: GGUF blocks as the file has them) say
/// so with `static constexpr bool runtime_typed_weights = true` (the CPU, reference and CUDA backends); for any
/// other backend a GGUF file's blocks are decoded to f32 at load.
template <class B>
inline constexpr bool backend_has_runtime_typed_weights = requires {
  requires B::runtime_typed_weights;
};

}  // namespace maxtext
