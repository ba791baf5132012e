// backend/cuda/attention.cuh: MaxText AttentionOp over the KV cache (attention.md §1-2), two kernels:
//  - prefill: a block takes 16 queries of one head and walks the union of their key ranges in tiles of 32 keys
//    staged in shared memory (f32); each warp owns 4 queries, each lane one key of the tile (q.k), and the tile is
//    folded into the queries' online softmax (kmath::softmax_*), so no [T, S] logit matrix exists;
//  - split-KV decode: the key range of each query is cut into `splits` chunks processed by separate blocks (a warp
//    per key, lanes over the head dimension), each writing a partial (max, sum, numerator) that a combine kernel
//    merges (kmath::softmax_merge_factor) — the parallelism a single query lacks comes from the keys.
// Masked keys are skipped; a row without any visible key is the plain average of its kv_len values (MaxText's
// replaced logits are then all equal), or 0 with sinks. The mask predicate, logit rounding, online softmax and
// merge are the host-tested functions of backend/common/kernel_math.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cuda::kernels {

/// The q.k accumulator: double for float activations, float otherwise. A float sum of Dq products of logits of
/// magnitude ~50 (unscaled queries, MLA's 576-wide heads) rounds at ~1e-5, which the output carries as a relative
/// error above the f32 tolerance; the reference backend sums in double, the CPU backend in 16 short lanes.
template <class A>
using DotAcc = std::conditional_t<std::is_same_v<A, float>, double, float>;

/// Operands of one attention call (element strides; the head dimension is contiguous). Keys and values are in the
/// cache type KV (A, or a narrower float type: Policy's KV), read as the cache holds them.
template <class A, class KV = A>
struct AttnArgs {
  const A* q;
  std::int64_t q_b, q_t, q_n;
  const KV* k;
  std::int64_t k_b, k_s, k_h;
  const KV* v;
  std::int64_t v_b, v_s, v_h;
  A* o;
  std::int64_t o_b, o_t, o_n;
  std::int64_t B, T, N, G, Dq, Dv;
  const std::int32_t* q_start;
  const std::int32_t* kv_len;
  const std::int32_t* q_seg;  ///< [B, T] rows or nullptr
  std::int64_t q_seg_ld;
  const std::int32_t* kv_seg;  ///< [B, S] rows or nullptr (no segment term)
  std::int64_t kv_seg_ld;
  bool causal;
  std::int64_t window, chunk;
  const std::int32_t* bidir_begin;  ///< [B, T] rows or nullptr: a picture's keys each query also sees
  const std::int32_t* bidir_end;
  std::int64_t bidir_ld;
  float soft_cap;
  bool f32_qk, f32_logits;
  const A* sinks;  ///< [N] or nullptr

  __device__ const A* qrow(std::int64_t b, std::int64_t t, std::int64_t n) const { return q + b * q_b + t * q_t + n * q_n; }
  __device__ const KV* krow(std::int64_t b, std::int64_t s, std::int64_t h) const { return k + b * k_b + s * k_s + h * k_h; }
  __device__ const KV* vrow(std::int64_t b, std::int64_t s, std::int64_t h) const { return v + b * v_b + s * v_s + h * v_h; }
  __device__ A* orow(std::int64_t b, std::int64_t t, std::int64_t n) const { return o + b * o_b + t * o_t + n * o_n; }
  __device__ float logit(float dot) const { return kmath::attention_logit<A>(dot, soft_cap, f32_qk, f32_logits); }
};

/// Where query (b, t) may look: its key range and segment.
struct QueryMask {
  kmath::KeyRange range;
  std::int32_t segment;
};
template <class A, class KV>
__device__ inline QueryMask query_mask(const AttnArgs<A, KV>& a, std::int64_t b, std::int64_t t) {
  const std::int64_t qi = a.q_start[b] + t;
  QueryMask m;
  m.range = kmath::key_range(qi, a.kv_len[b], a.causal, a.window, a.chunk);
  if (a.bidir_end != nullptr) {  // the picture's range holds the query: the union stays one range
    const std::int64_t bb = a.bidir_begin[b * a.bidir_ld + t];
    const std::int64_t be = a.bidir_end[b * a.bidir_ld + t] < a.kv_len[b] ? a.bidir_end[b * a.bidir_ld + t] : a.kv_len[b];
    if (bb < be) {
      m.range.lo = bb < m.range.lo ? bb : m.range.lo;
      m.range.hi = be > m.range.hi ? be : m.range.hi;
    }
  }
  m.segment = (a.kv_seg != nullptr && a.q_seg != nullptr) ? a.q_seg[b * a.q_seg_ld + t] : 0;
  return m;
}
template <class A, class KV>
__device__ inline bool key_visible(const AttnArgs<A, KV>& a, const QueryMask& m, std::int64_t b, std::int64_t s) {
  if (s < m.range.lo || s >= m.range.hi) return false;
  return a.kv_seg == nullptr || kmath::segment_allows(m.segment, a.kv_seg[b * a.kv_seg_ld + s]);
}

/// Output of a query that sees no key: the mean of v over [0, kv_len) (threads `first`, `first + step`, ... over d).
template <class A, class KV>
__device__ inline void write_uniform_average(const AttnArgs<A, KV>& a, std::int64_t b, std::int64_t t, std::int64_t n,
                                             int first, int step) {
  const std::int64_t len = a.kv_len[b], kh = n / a.G;
  A* out = a.orow(b, t, n);
  for (std::int64_t d = first; d < a.Dv; d += step) {
    float s = 0.0f;
    for (std::int64_t j = 0; j < len; ++j) s += to_float(a.vrow(b, j, kh)[d]);
    out[d] = from_float<A>(len > 0 ? s * (1.0f / static_cast<float>(len)) : 0.0f);
  }
}

inline constexpr int kPrefillQueries = 16;  ///< queries per block (4 warps x 4)
inline constexpr int kPrefillKeys = 32;     ///< keys per tile (one per lane)

/// Shared memory (bytes) of attention_prefill for head dimensions Dq, Dv.
inline std::size_t prefill_smem_bytes(std::int64_t Dq, std::int64_t Dv) {
  const std::int64_t floats = kPrefillQueries * Dq + kPrefillKeys * (Dq + 1) + kPrefillKeys * Dv + kPrefillQueries * Dv +
                              4 * kPrefillKeys;
  return static_cast<std::size_t>(floats) * sizeof(float);
}

/// grid (ceil(T / 16), N, B), block 128, dynamic shared memory prefill_smem_bytes(Dq, Dv).
template <class A, class KV>
__global__ void __launch_bounds__(128) attention_prefill(AttnArgs<A, KV> a) {
  constexpr int QT = kPrefillQueries, KT = kPrefillKeys, QW = QT / 4;
  extern __shared__ float smem[];
  const std::int64_t b = blockIdx.z, n = blockIdx.y, t0 = static_cast<std::int64_t>(blockIdx.x) * QT;
  const std::int64_t kh = n / a.G, Dq = a.Dq, Dv = a.Dv, ldk = Dq + 1;
  float* Qs = smem;                // [QT][Dq]
  float* Ks = Qs + QT * Dq;        // [KT][Dq + 1] (padded: lanes read different rows)
  float* Vs = Ks + KT * ldk;       // [KT][Dv]
  float* Acc = Vs + KT * Dv;       // [QT][Dv] numerators
  float* Es = Acc + QT * Dv;       // [4 warps][KT] weights of the current tile
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;

  for (std::int64_t i = threadIdx.x; i < QT * Dq; i += blockDim.x) {
    const std::int64_t t = t0 + i / Dq;
    Qs[i] = t < a.T ? to_float(a.qrow(b, t, n)[i % Dq]) : 0.0f;
  }
  for (std::int64_t i = threadIdx.x; i < QT * Dv; i += blockDim.x) Acc[i] = 0.0f;

  // Keys any query of the block may see, and this warp's queries' masks and running softmax.
  std::int64_t lo_all = INT64_MAX, hi_all = 0;
  for (int qq = 0; qq < QT; ++qq) {
    if (t0 + qq >= a.T) break;
    const QueryMask m = query_mask(a, b, t0 + qq);
    if (m.range.hi > m.range.lo) {
      lo_all = m.range.lo < lo_all ? m.range.lo : lo_all;
      hi_all = m.range.hi > hi_all ? m.range.hi : hi_all;
    }
  }
  QueryMask qm[QW];
  kmath::SoftmaxState st[QW];
  bool active[QW];
  for (int w = 0; w < QW; ++w) {
    const std::int64_t t = t0 + warp * QW + w;
    active[w] = t < a.T;
    if (active[w]) qm[w] = query_mask(a, b, t);
    st[w] = kmath::softmax_init();
  }
  __syncthreads();

  for (std::int64_t s0 = lo_all; s0 < hi_all; s0 += KT) {
    for (std::int64_t i = threadIdx.x; i < KT * Dq; i += blockDim.x) {
      const std::int64_t j = i / Dq, s = s0 + j;
      Ks[j * ldk + i % Dq] = s < hi_all ? to_float(a.krow(b, s, kh)[i % Dq]) : 0.0f;
    }
    for (std::int64_t i = threadIdx.x; i < KT * Dv; i += blockDim.x) {
      const std::int64_t j = i / Dv, s = s0 + j;
      Vs[i] = s < hi_all ? to_float(a.vrow(b, s, kh)[i % Dv]) : 0.0f;
    }
    __syncthreads();
    for (int w = 0; w < QW; ++w) {
      if (!active[w]) continue;  // warp-uniform
      const int qq = warp * QW + w;
      const std::int64_t s = s0 + lane;
      const bool visible = key_visible(a, qm[w], b, s);
      float logit = kmath::neg_inf();
      if (visible) {
        DotAcc<A> dot = 0;
        for (std::int64_t d = 0; d < Dq; ++d) dot += static_cast<DotAcc<A>>(Qs[qq * Dq + d]) * Ks[lane * ldk + d];
        logit = a.logit(static_cast<float>(dot));
      }
      const float corr = kmath::softmax_rescale(st[w], detail::warp_max(logit));
      const float e = visible ? expf(logit - st[w].m) : 0.0f;
      st[w].l += detail::warp_sum(e);
      Es[warp * KT + lane] = e;
      __syncwarp();
      for (std::int64_t d = lane; d < Dv; d += 32) {
        float acc = Acc[qq * Dv + d] * corr;
        for (int j = 0; j < KT; ++j) acc += Es[warp * KT + j] * Vs[j * Dv + d];
        Acc[qq * Dv + d] = acc;
      }
      __syncwarp();
    }
    __syncthreads();
  }

  for (int w = 0; w < QW; ++w) {
    if (!active[w]) continue;
    const int qq = warp * QW + w;
    const std::int64_t t = t0 + qq;
    const float corr = a.sinks != nullptr ? kmath::softmax_add_sink(st[w], to_float(a.sinks[n])) : 1.0f;
    if (kmath::softmax_empty(st[w])) {
      write_uniform_average(a, b, t, n, lane, 32);
      continue;
    }
    A* out = a.orow(b, t, n);
    const float inv = 1.0f / st[w].l;
    for (std::int64_t d = lane; d < Dv; d += 32) out[d] = from_float<A>(Acc[qq * Dv + d] * corr * inv);
  }
}

/// Shared memory (bytes) of attention_split.
inline std::size_t split_smem_bytes(std::int64_t Dq, std::int64_t Dv) {
  return static_cast<std::size_t>(Dq + 4 * Dv + 8) * sizeof(float);
}

/// Partial results of attention_split: per (query, head, split) the running max, the sum and Dv numerators.
__host__ __device__ inline std::int64_t split_record(std::int64_t Dv) { return Dv + 2; }

/// grid (B * T, N, splits), block 128 (4 warps), dynamic shared memory split_smem_bytes(Dq, Dv). Block (bt, n, c)
/// takes chunk c of the key range of query bt, head n; warps take keys in turn, lanes the head dimension.
template <class A, class KV>
__global__ void __launch_bounds__(128) attention_split(AttnArgs<A, KV> a, float* part) {
  extern __shared__ float smem[];
  const std::int64_t bt = blockIdx.x, n = blockIdx.y, c = blockIdx.z, splits = gridDim.z;
  const std::int64_t b = bt / a.T, t = bt % a.T, kh = n / a.G, Dq = a.Dq, Dv = a.Dv;
  float* Qs = smem;          // [Dq]
  float* Acc = Qs + Dq;      // [4][Dv]
  float* Ms = Acc + 4 * Dv;  // [4] maxima, [4] sums
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  for (std::int64_t d = threadIdx.x; d < Dq; d += blockDim.x) Qs[d] = to_float(a.qrow(b, t, n)[d]);
  for (std::int64_t d = threadIdx.x; d < 4 * Dv; d += blockDim.x) Acc[d] = 0.0f;
  const QueryMask qm = query_mask(a, b, t);
  const std::int64_t len = qm.range.hi - qm.range.lo;
  const std::int64_t c_lo = qm.range.lo + len * c / splits, c_hi = qm.range.lo + len * (c + 1) / splits;
  __syncthreads();

  kmath::SoftmaxState st = kmath::softmax_init();
  float* acc = Acc + warp * Dv;
  for (std::int64_t s = c_lo + warp; s < c_hi; s += 4) {
    if (!key_visible(a, qm, b, s)) continue;  // warp-uniform
    const KV* kp = a.krow(b, s, kh);
    DotAcc<A> dot = 0;
    for (std::int64_t d = lane; d < Dq; d += 32) dot += static_cast<DotAcc<A>>(Qs[d]) * to_float(kp[d]);
    const float logit = a.logit(static_cast<float>(detail::warp_sum(dot)));
    const float corr = kmath::softmax_rescale(st, logit);
    const float e = kmath::softmax_weight(st, logit);
    const KV* vp = a.vrow(b, s, kh);
    for (std::int64_t d = lane; d < Dv; d += 32) acc[d] = acc[d] * corr + e * to_float(vp[d]);
  }
  if (lane == 0) {
    Ms[warp] = st.m;
    Ms[4 + warp] = st.l;
  }
  __syncthreads();
  float M = Ms[0];
  for (int w = 1; w < 4; ++w) M = Ms[w] > M ? Ms[w] : M;
  float f[4], L = 0.0f;
  for (int w = 0; w < 4; ++w) {
    f[w] = kmath::softmax_merge_factor(Ms[w], M);
    L += f[w] * Ms[4 + w];
  }
  float* rec = part + ((bt * a.N + n) * splits + c) * split_record(Dv);
  for (std::int64_t d = threadIdx.x; d < Dv; d += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < 4; ++w) s += f[w] * Acc[w * Dv + d];
    rec[2 + d] = s;
  }
  if (threadIdx.x == 0) {
    rec[0] = M;
    rec[1] = L;
  }
}

/// grid (B * T, N), block 128: merge the splits of attention_split, add the sink, normalise, write.
template <class A, class KV>
__global__ void __launch_bounds__(128) attention_combine(AttnArgs<A, KV> a, const float* part, int splits) {
  const std::int64_t bt = blockIdx.x, n = blockIdx.y, b = bt / a.T, t = bt % a.T, Dv = a.Dv;
  const float* rec = part + (bt * a.N + n) * splits * split_record(Dv);
  float M = kmath::neg_inf();
  for (int c = 0; c < splits; ++c) M = rec[c * split_record(Dv)] > M ? rec[c * split_record(Dv)] : M;
  kmath::SoftmaxState st{M, 0.0f};
  for (int c = 0; c < splits; ++c) st.l += kmath::softmax_merge_factor(rec[c * split_record(Dv)], M) * rec[c * split_record(Dv) + 1];
  const float corr = a.sinks != nullptr ? kmath::softmax_add_sink(st, to_float(a.sinks[n])) : 1.0f;
  if (kmath::softmax_empty(st)) {
    write_uniform_average(a, b, t, n, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
    return;
  }
  A* out = a.orow(b, t, n);
  const float inv = 1.0f / st.l;
  for (std::int64_t d = threadIdx.x; d < Dv; d += blockDim.x) {
    float s = 0.0f;
    for (int c = 0; c < splits; ++c) s += kmath::softmax_merge_factor(rec[c * split_record(Dv)], M) * rec[c * split_record(Dv) + 2 + d];
    out[d] = from_float<A>(s * corr * inv);
  }
}

}  // namespace maxtext::cuda::kernels
