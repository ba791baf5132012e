// backend/cuda/sampling.cuh: one token per row of logits, one thread block per row, without sorting: the block
// runs kmath::sample_by_bisection (host-tested against the reference backend's sort), whose questions ("how many
// candidates sort before key t", "how much probability mass do they hold") are block-wide reductions over the row.
// Each bisection step is a pass over the row (at most ~3 x 64 passes for top-k + top-p + the draw); greedy
// decoding is two passes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/backend/ops.hpp"

namespace maxtext::cuda::kernels {

/// The reductions kmath::sample_by_bisection asks for, over one row, by the whole block.
struct BlockRowReducer {
  const float* l;
  std::int64_t n;
  double* red_d;               // [32] shared
  unsigned long long* red_u;   // [32] shared
  long long* red_i;            // [32] shared

  __device__ bool any_nan() const {
    long long c = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) c += isnan(l[i]) ? 1 : 0;
    return detail::block_reduce<0>(c, red_i) > 0;
  }
  __device__ std::uint64_t max_key() const {
    unsigned long long k = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const unsigned long long v = kmath::sample_key(l[i], static_cast<std::int32_t>(i));
      k = v > k ? v : k;
    }
    return detail::block_reduce<1>(k, red_u);
  }
  __device__ std::int64_t count_ge(std::uint64_t t) const {
    long long c = 0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) c += kmath::sample_key(l[i], static_cast<std::int32_t>(i)) >= t ? 1 : 0;
    return detail::block_reduce<0>(c, red_i);
  }
  __device__ double mass_ge(std::uint64_t t, double m, double temp) const {
    double s = 0.0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      if (kmath::sample_key(l[i], static_cast<std::int32_t>(i)) >= t) s += exp((static_cast<double>(l[i]) - m) / temp);
    }
    return detail::block_reduce<0>(s, red_d);
  }
};

/// grid (B), block Threads (256): ids[b] = the SampleOptions draw from row b with uniform u[b] (u unused at
/// temperature 0).
template <int Threads>
__global__ void __launch_bounds__(Threads) sample(const float* logits, std::int64_t ld, std::int64_t V, SampleOptions o,
                                              const float* u, std::int32_t* ids) {
  __shared__ double red_d[32];
  __shared__ unsigned long long red_u[32];
  __shared__ long long red_i[32];
  const std::int64_t b = blockIdx.x;
  BlockRowReducer r{logits + b * ld, V, red_d, red_u, red_i};
  const float ub = (u != nullptr && o.temperature != 0.0f) ? u[b] : 0.0f;
  const std::int32_t id = kmath::sample_by_bisection(r, V, o, ub);
  if (threadIdx.x == 0) ids[b] = id;
}

}  // namespace maxtext::cuda::kernels
