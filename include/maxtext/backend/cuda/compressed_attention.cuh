// backend/cuda/compressed_attention.cuh: DeepSeek-V4's compressed attention (families/deepseek4/deepseek4.hpp), three kernels
// that evaluate, per output element, the host-tested functions of backend/common/kernel_math.hpp:
//  - compress_pool: one thread per (sequence, block, feature), kmath::compress_pool_feature;
//  - the indexer: one thread per (token, block) for the scores (kmath::indexer_score, -inf where the block is not
//    complete yet), then one thread per token for its top-k (kmath::topk_blocks over the scores row);
//  - compressed_attention: one warp per (token, head), lanes over the head dimension, an online softmax
//    (kmath::softmax_*) over the sliding-window keys then the blocks, the sink in the denominator.
// Semantics: BackendCompressedAttention (backend/concepts.hpp); the reference backend defines them and the CPU
// backend runs the same arithmetic. Operands are cache buffers with arbitrary batch / row strides (element units);
// the last axis is contiguous.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/cuda/attention.cuh"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/backend/cuda/elementwise.cuh"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cuda::kernels {

/// A 3-D operand [B, S, width]: base pointer, batch and row strides (elements); the last axis contiguous.
template <class T>
struct Rows3 {
  T* p;
  std::int64_t sb, ss;
  __device__ T* row(std::int64_t b, std::int64_t s) const { return p + b * sb + s * ss; }
};

/// Blocks [0, n) complete at cache index pos ((j+1)*r <= pos+1), at most S of them.
__device__ inline std::int64_t complete_blocks(std::int64_t pos, std::int64_t r, std::int64_t S) {
  const std::int64_t n = (pos + 1) / r;
  return n < S ? n : S;
}

/// out[b, i, c] (i < n, c < d): block first[b] + i of sequence b pooled at feature c when i < count[b], else 0.
/// kv and gate share their row stride (kv.ss); bias is [r, F] with rows F apart.
template <class A>
__global__ void compress_pool(Rows3<const A> kv, Rows3<const A> gate, const A* bias, std::int64_t F, std::int64_t r,
                              bool overlap, const std::int32_t* first, const std::int32_t* count, Rows3<A> out,
                              std::int64_t Bn, std::int64_t n, std::int64_t d) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < Bn * n * d;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = e / (n * d), i = (e / d) % n, c = e % d;
    float v = 0.0f;
    if (i < count[b]) {
      v = kmath::compress_pool_feature<A>(kv.row(b, 0), gate.row(b, 0), kv.ss, bias, F, r, overlap, d, first[b] + i, c);
    }
    out.row(b, i)[c] = from_float<A>(v);
  }
}

/// scores[m, j] for token m = b*T + t (cache index q_start[b] + t) and block j < S: the indexer score of a complete
/// block, -inf otherwise. q is [M, H, d] with token stride q_m and head stride q_h; w is [M, H].
template <class A>
__global__ void indexer_scores(const A* q, std::int64_t q_m, std::int64_t q_h, Rows<const A> w, Rows3<const A> blocks,
                               const std::int32_t* q_start, std::int64_t M, std::int64_t T, std::int64_t H,
                               std::int64_t d, std::int64_t S, std::int64_t r, float score_scale, float weight_scale,
                               Rows<float> scores) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < M * S;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t m = e / S, j = e % S, b = m / T, pos = q_start[b] + m % T;
    scores.at(m, j) = j < complete_blocks(pos, r, S)
                          ? kmath::indexer_score<A>(q + m * q_m, q_h, &w.at(m, 0), blocks.row(b, j), H, d, score_scale,
                                                    weight_scale)
                          : kmath::neg_inf();
  }
}

/// idx[m, :k]: the best k of token m's complete blocks by its scores row (score desc, block asc), then -1.
/// (A template, as moe_offsets, so that the header defines no non-inline kernel.)
template <int Unused>
__global__ void indexer_select(Rows<const float> scores, const std::int32_t* q_start, std::int64_t M, std::int64_t T,
                               std::int64_t S, std::int64_t r, Rows<std::int32_t> idx, std::int64_t k) {
  for (std::int64_t m = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; m < M;
       m += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t pos = q_start[m / T] + m % T;
    const float* sc = &scores.at(m, 0);
    kmath::topk_blocks(complete_blocks(pos, r, S), k, &idx.at(m, 0), [&](std::int64_t j) { return sc[j]; });
  }
}

/// Operands of one compressed_attention call (element strides; the head dimension is contiguous).
template <class A>
struct CompressedAttnArgs {
  const A* q;
  std::int64_t q_b, q_t, q_n;
  Rows3<const A> kv, blocks;
  A* o;
  std::int64_t o_b, o_t, o_n;
  std::int64_t B, T, N, d;
  const std::int32_t* q_start;
  std::int64_t window, r, Sb;
  const std::int32_t* selected;  ///< [M, k] rows sel_ld apart, or nullptr (every complete block)
  std::int64_t sel_ld, k;
  const A* sinks;  ///< [N] or nullptr
  bool f32_qk, f32_logits;
};

/// Warps per block of the compressed_attention kernel, and its dynamic shared memory (q and the numerator
/// accumulator of each warp, f32).
inline constexpr int kCompressedAttnWarps = 4;
inline std::size_t compressed_attention_smem_bytes(std::int64_t d) {
  return static_cast<std::size_t>(kCompressedAttnWarps * 2 * d) * sizeof(float);
}

/// One warp per (token m, head n); lane l owns the features l, l + 32, ... of q and of the accumulator.
template <class A>
__global__ void compressed_attention(CompressedAttnArgs<A> a) {
  extern __shared__ float smem[];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const std::int64_t warps = blockDim.x >> 5, d = a.d;
  float* qf = smem + warp * 2 * d;
  float* acc = qf + d;
  const std::int64_t items = a.B * a.T * a.N;
  for (std::int64_t wi = blockIdx.x * warps + warp; wi < items; wi += static_cast<std::int64_t>(gridDim.x) * warps) {
    const std::int64_t n = wi % a.N, m = wi / a.N, b = m / a.T, t = m % a.T, pos = a.q_start[b] + t;
    const A* qr = a.q + b * a.q_b + t * a.q_t + n * a.q_n;
    for (std::int64_t i = lane; i < d; i += 32) {
      qf[i] = to_float(qr[i]);
      acc[i] = 0.0f;
    }
    kmath::SoftmaxState st = kmath::softmax_init();
    const auto add = [&](const A* key) {
      DotAcc<A> part = 0;
      for (std::int64_t i = lane; i < d; i += 32) part += static_cast<DotAcc<A>>(qf[i]) * to_float(key[i]);
      const float dot = static_cast<float>(detail::warp_sum(part));
      const float l = kmath::attention_logit<A>(dot, 0.0f, a.f32_qk, a.f32_logits);
      const float c = kmath::softmax_rescale(st, l);
      const float e = kmath::softmax_weight(st, l);
      for (std::int64_t i = lane; i < d; i += 32) acc[i] = acc[i] * c + e * to_float(key[i]);
    };
    const kmath::KeyRange kr = kmath::key_range(pos, pos + 1, true, a.window, 0);
    for (std::int64_t s = kr.lo; s < kr.hi; ++s) add(a.kv.row(b, s));
    if (a.r > 0 && a.selected == nullptr) {
      const std::int64_t nb = complete_blocks(pos, a.r, a.Sb);
      for (std::int64_t j = 0; j < nb; ++j) add(a.blocks.row(b, j));
    } else if (a.r > 0) {
      for (std::int64_t i = 0; i < a.k; ++i) {
        const std::int32_t j = a.selected[m * a.sel_ld + i];
        if (j >= 0) add(a.blocks.row(b, j));
      }
    }
    const float c = a.sinks != nullptr ? kmath::softmax_add_sink(st, to_float(a.sinks[n])) : 1.0f;
    const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    A* orow = a.o + b * a.o_b + t * a.o_t + n * a.o_n;
    for (std::int64_t i = lane; i < d; i += 32) orow[i] = from_float<A>(acc[i] * c * inv);
  }
}

}  // namespace maxtext::cuda::kernels
