// backend/reference/vision.hpp: the vision encoders' operations on the reference backend (the executable
// definition; backend/cpu/vision.hpp and backend/cuda/vision.cuh compute the same). Free functions found by
// argument-dependent lookup on the backend type, so that the vision towers add operations without changing the
// decoder's Backend concept (backend/vision.hpp states the concept).
//
//   affine_layer_norm(be, x [M,D], scale [D], bias [D] or empty, eps, y [M,D]): flax / PyTorch LayerNorm,
//     y = (x - mean) / sqrt(var + eps) * scale + bias with the biased variance; statistics in f64 here (the CPU and
//     CUDA versions in f32 / f64 sums: they agree to f32 rounding), f32 activations only (the towers run in
//     MaxText's dtype_mm, float32). y may alias x.
//   avg_pool_grid(be, x [n*Sh*Sw, D], n, Sh, Sw, k, y [n*(Sh/k)*(Sw/k), D]): each of n images' Sh x Sw grid of rows
//     (row-major; the overload without Sw: square grids)
//     averaged over k x k windows with stride k (nnx.avg_pool, VALID): the sum of the k*k rows in f32 order
//     (window row by row), divided by k*k.
//   full_attention(be, q [n,T,H,d], k [n,T,H,d], v [n,T,H,d], mask, out [n,T,H,d]): every query over every key of
//     its sequence (mask: no cache offset, not causal; q already scaled), out = softmax(q k^T) v per head, f32; the
//     backend's attention() is its definition (the CPU version computes it with matrix products).
#pragma once

#include <cmath>
#include <cstdint>

#include "maxtext/backend/ops.hpp"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::reference {

inline void affine_layer_norm(const Backend&, View<const float, 2> x, View<const float, 1> scale,
                              View<const float, 1> bias, float eps, View<float, 2> y) {
  const std::int64_t M = x.dim(0), D = x.dim(1);
  MAXTEXT_DASSERT(scale.dim(0) == D && (bias.empty() || bias.dim(0) == D) && y.dim(0) == M && y.dim(1) == D);
  for (std::int64_t m = 0; m < M; ++m) {
    double s = 0.0;
    for (std::int64_t i = 0; i < D; ++i) s += x(m, i);
    const double mean = s / static_cast<double>(D);
    double v = 0.0;
    for (std::int64_t i = 0; i < D; ++i) v += (x(m, i) - mean) * (x(m, i) - mean);
    const double inv = 1.0 / std::sqrt(v / static_cast<double>(D) + static_cast<double>(eps));
    for (std::int64_t i = 0; i < D; ++i) {
      const double o = (x(m, i) - mean) * inv * scale(i) + (bias.empty() ? 0.0 : static_cast<double>(bias(i)));
      y(m, i) = static_cast<float>(o);
    }
  }
}

inline void avg_pool_grid(const Backend&, View<const float, 2> x, std::int64_t n, std::int64_t Sh, std::int64_t Sw,
                          std::int64_t k, View<float, 2> y) {
  MAXTEXT_CHECK(k > 0 && Sh % k == 0 && Sw % k == 0 && x.dim(0) == n * Sh * Sw &&
                    y.dim(0) == n * (Sh / k) * (Sw / k) && y.dim(1) == x.dim(1),
                ShapeError, "[avg_pool_grid] x ", x.dim(0), " rows for ", n, " grids of ", Sh, "x", Sw, ", window ", k,
                ", y ", y.dim(0), " rows");
  const std::int64_t Ho = Sh / k, Wo = Sw / k, D = x.dim(1);
  const float inv = 1.0f / static_cast<float>(k * k);
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t oy = 0; oy < Ho; ++oy) {
      for (std::int64_t ox = 0; ox < Wo; ++ox) {
        const std::int64_t out = (b * Ho + oy) * Wo + ox;
        for (std::int64_t d = 0; d < D; ++d) {
          float s = 0.0f;
          for (std::int64_t wy = 0; wy < k; ++wy) {
            for (std::int64_t wx = 0; wx < k; ++wx) s += x((b * Sh + oy * k + wy) * Sw + ox * k + wx, d);
          }
          y(out, d) = s * inv;
        }
      }
    }
  }
}

inline void avg_pool_grid(const Backend& be, View<const float, 2> x, std::int64_t n, std::int64_t S, std::int64_t k,
                          View<float, 2> y) {
  avg_pool_grid(be, x, n, S, S, k, y);
}

inline void full_attention(const Backend& be, View<const float, 4> q, View<const float, 4> k, View<const float, 4> v,
                           const AttentionMask& mask, View<float, 4> out) {
  be.attention(q, k, v, mask, AttentionOptions{}, View<const float, 1>{}, out);
}

}  // namespace maxtext::reference
