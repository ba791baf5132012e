// backend/cuda/vision.cuh: the vision encoders' operations on the CUDA backend (definitions and semantics:
// backend/reference/vision.hpp): affine_layer_norm (one block per row, f64 sums) and avg_pool_grid (one thread per
// output element, the window summed in the reference's order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "maxtext/backend/cuda/backend.cuh"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cuda {

namespace kernels {

template <int Threads>
__device__ double vision_block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = Threads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

template <int Threads>
__global__ void affine_layer_norm(const float* x, std::int64_t ldx, const float* scale, const float* bias, float eps,
                                  float* y, std::int64_t ldy, std::int64_t D) {
  __shared__ double shared[Threads];
  const float* xr = x + static_cast<std::int64_t>(blockIdx.x) * ldx;
  float* yr = y + static_cast<std::int64_t>(blockIdx.x) * ldy;
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < D; i += Threads) s += xr[i];
  const double mean = vision_block_sum<Threads>(s, shared) / static_cast<double>(D);
  double v = 0.0;
  for (std::int64_t i = threadIdx.x; i < D; i += Threads) v += (xr[i] - mean) * (xr[i] - mean);
  const double var = vision_block_sum<Threads>(v, shared) / static_cast<double>(D);
  const float meanf = static_cast<float>(mean);
  const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  for (std::int64_t i = threadIdx.x; i < D; i += Threads) {
    yr[i] = (xr[i] - meanf) * inv * scale[i] + (bias != nullptr ? bias[i] : 0.0f);
  }
}

template <class T>
__global__ void avg_pool_grid(const T* x, std::int64_t ldx, std::int64_t n, std::int64_t Sh, std::int64_t Sw,
                              std::int64_t k, T* y, std::int64_t ldy, std::int64_t D) {
  const std::int64_t Ho = Sh / k, Wo = Sw / k, total = n * Ho * Wo * D;
  const float inv = 1.0f / static_cast<float>(k * k);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t out = i / D, d = i % D;
    const std::int64_t b = out / (Ho * Wo), oy = (out / Wo) % Ho, ox = out % Wo;
    float s = 0.0f;
    for (std::int64_t wy = 0; wy < k; ++wy) {
      for (std::int64_t wx = 0; wx < k; ++wx) s += x[((b * Sh + oy * k + wy) * Sw + ox * k + wx) * ldx + d];
    }
    y[out * ldy + d] = s * inv;
  }
}

}  // namespace kernels

inline void affine_layer_norm(const Backend& be, View<const float, 2> x, View<const float, 1> scale,
                              View<const float, 1> bias, float eps, View<float, 2> y) {
  if (x.dim(0) == 0) return;
  constexpr int kT = 256;
  kernels::affine_layer_norm<kT><<<static_cast<unsigned>(x.dim(0)), kT, 0, be.stream()>>>(
      x.data(), x.stride(0), scale.data(), bias.empty() ? nullptr : bias.data(), eps, y.data(), y.stride(0), x.dim(1));
  MAXTEXT_CUDA_LAUNCH_CHECK("affine_layer_norm");
}

inline void avg_pool_grid(const Backend& be, View<const float, 2> x, std::int64_t n, std::int64_t Sh, std::int64_t Sw,
                          std::int64_t k, View<float, 2> y) {
  MAXTEXT_CHECK(k > 0 && Sh % k == 0 && Sw % k == 0 && x.dim(0) == n * Sh * Sw &&
                    y.dim(0) == n * (Sh / k) * (Sw / k) && y.dim(1) == x.dim(1),
                ShapeError, "[avg_pool_grid] x ", x.dim(0), " rows for ", n, " grids of ", Sh, "x", Sw, ", window ", k,
                ", y ", y.dim(0), " rows");
  if (y.dim(0) == 0) return;
  kernels::avg_pool_grid<float><<<detail::grid_for(y.dim(0) * y.dim(1)), detail::kThreads, 0, be.stream()>>>(
      x.data(), x.stride(0), n, Sh, Sw, k, y.data(), y.stride(0), y.dim(1));
  MAXTEXT_CUDA_LAUNCH_CHECK("avg_pool_grid");
}

inline void avg_pool_grid(const Backend& be, View<const float, 2> x, std::int64_t n, std::int64_t S, std::int64_t k,
                          View<float, 2> y) {
  avg_pool_grid(be, x, n, S, S, k, y);
}

/// The tower's attention: the backend's attention kernel with the plain (non-causal) mask.
inline void full_attention(const Backend& be, View<const float, 4> q, View<const float, 4> k, View<const float, 4> v,
                           const AttentionMask& mask, View<float, 4> out) {
  be.attention(q, k, v, mask, AttentionOptions{}, View<const float, 1>{}, out);
}

}  // namespace maxtext::cuda
