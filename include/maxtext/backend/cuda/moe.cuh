// backend/cuda/moe.cuh: mixture-of-experts kernels (moe.md): routing (kmath::moe_route_row per token), the per-expert
// row gather and weighted scatter-add the MoE layers use, and the token permutation (dropless): assignments (t, j)
// grouped by expert in a stable order (expert, then t, then j) — the order the CPU and reference backends produce —
// and the weighted sum back. Simple passes: per-expert counts, a prefix sum, per-expert stable ranks by a block scan over
// the assignments in order, a row gather; O(E * M * k) flag tests, negligible next to the experts' products.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cuda::kernels {

/// grid (E), block 256: counts[e] = number of assignments to expert e. ids: [M, k] with row stride ld.
template <int Threads>
__global__ void __launch_bounds__(Threads) moe_count(const std::int32_t* ids, std::int64_t ld, std::int64_t M, std::int64_t k,
                                                     std::int32_t* counts) {
  __shared__ long long red[32];
  const std::int32_t e = static_cast<std::int32_t>(blockIdx.x);
  long long c = 0;
  for (std::int64_t a = threadIdx.x; a < M * k; a += blockDim.x) c += ids[(a / k) * ld + a % k] == e ? 1 : 0;
  c = detail::block_reduce<0>(c, red);
  if (threadIdx.x == 0) counts[e] = static_cast<std::int32_t>(c);
}

/// grid (1), block 1: offsets[0..E] = exclusive prefix sum of counts (E is small: experts, not tokens).
template <int Unused>
__global__ void moe_offsets(const std::int32_t* counts, std::int64_t E, std::int32_t* offsets) {
  std::int32_t s = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    offsets[e] = s;
    s += counts[e];
  }
  offsets[E] = s;
}

/// grid (E), block Threads: slot[t, j] for the assignments of expert e, in assignment order (a = t * k + j), by a
/// block-wide exclusive scan of the match flags over consecutive windows of Threads assignments.
template <int Threads>
__global__ void __launch_bounds__(Threads) moe_slots(const std::int32_t* ids, std::int64_t ld, std::int64_t M, std::int64_t k,
                                                     const std::int32_t* offsets, std::int32_t* slot, std::int64_t slot_ld) {
  __shared__ std::int32_t scan[Threads];
  const std::int32_t e = static_cast<std::int32_t>(blockIdx.x);
  std::int32_t base = offsets[e];
  for (std::int64_t a0 = 0; a0 < M * k; a0 += Threads) {
    const std::int64_t a = a0 + threadIdx.x;
    const bool hit = a < M * k && ids[(a / k) * ld + a % k] == e;
    scan[threadIdx.x] = hit ? 1 : 0;
    __syncthreads();
    for (int off = 1; off < Threads; off <<= 1) {  // Hillis-Steele inclusive scan
      const std::int32_t add = threadIdx.x >= static_cast<unsigned>(off) ? scan[threadIdx.x - off] : 0;
      __syncthreads();
      scan[threadIdx.x] += add;
      __syncthreads();
    }
    if (hit) slot[(a / k) * slot_ld + a % k] = base + scan[threadIdx.x] - 1;
    base += scan[Threads - 1];
    __syncthreads();
  }
}

/// rows[slot[t, j], :] = x[t, :] for every assignment.
template <class A>
__global__ void moe_gather(const A* x, std::int64_t ldx, const std::int32_t* slot, std::int64_t slot_ld, std::int64_t M,
                           std::int64_t k, A* rows, std::int64_t ldr, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * k * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t a = i / D, c = i % D, t = a / k, j = a % k;
    rows[slot[t * slot_ld + j] * ldr + c] = x[t * ldx + c];
  }
}

/// out[t, c] = round_A(sum_j w[t, j] * rows[slot[t, j], c]), summed in f32 in choice order.
template <class A>
__global__ void moe_combine(const A* rows, std::int64_t ldr, const std::int32_t* slot, std::int64_t slot_ld, const float* w,
                            std::int64_t ldw, std::int64_t M, std::int64_t k, A* out, std::int64_t ldo, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / D, c = i % D;
    float acc = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) acc += w[t * ldw + j] * to_float(rows[slot[t * slot_ld + j] * ldr + c]);
    out[t * ldo + c] = from_float<A>(acc);
  }
}

/// One thread per token: kmath::moe_route_row (host-tested against the CPU backend) with [E] scratch rows s, b.
template <class G, class A>
__global__ void moe_route(const G* z, std::int64_t ldz, const G* bias, MoeRouting r, std::int64_t M, std::int64_t E,
                          float* scratch, std::int32_t* idx, std::int64_t ld_idx, float* w, std::int64_t ldw, float* scores,
                          std::int64_t ld_scores) {
  for (std::int64_t m = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; m < M;
       m += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float* s = scratch + m * 2 * E;
    kmath::moe_route_row<G, A>(z + m * ldz, bias, r, E, s, s + E, idx + m * ld_idx, w + m * ldw,
                               scores != nullptr ? scores + m * ld_scores : nullptr);
  }
}

/// y[i, :] = x[rows[i], :].
template <class A>
__global__ void gather_rows(const A* x, std::int64_t ldx, const std::int32_t* rows, A* y, std::int64_t ldy, std::int64_t n,
                            std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    y[r * ldy + c] = x[rows[r] * ldx + c];
  }
}

/// acc[rows[i], :] += w[i] * y[i, :]; rows are distinct within a call, so every element has one writer.
template <class A>
__global__ void scatter_add_rows(const A* y, std::int64_t ldy, const std::int32_t* rows, const float* w, float* acc,
                                 std::int64_t lda, std::int64_t n, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    acc[rows[r] * lda + c] += w[r] * to_float(y[r * ldy + c]);
  }
}

}  // namespace maxtext::cuda::kernels
