// backend/cpu/vision.hpp: the vision encoders' operations on the CPU backend (definitions and semantics:
// backend/reference/vision.hpp). Rows are split across the backend's threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cpu {

/// LayerNorm with a plain scale (flax nnx.LayerNorm, torch LayerNorm): mean and biased variance summed in f64 (the
/// variance from the centred values), then y = (x - mean) * rsqrt(var + eps) * scale + bias in f32. y may alias x.
inline void affine_layer_norm(const Backend& be, View<const float, 2> x, View<const float, 1> scale,
                              View<const float, 1> bias, float eps, View<float, 2> y) {
  const std::int64_t M = x.dim(0), D = x.dim(1);
  MAXTEXT_DASSERT(scale.dim(0) == D && (bias.empty() || bias.dim(0) == D) && y.dim(0) == M && y.dim(1) == D);
  const bool has_bias = !bias.empty();
#pragma omp parallel for num_threads(be.threads()) schedule(static) if (M * D >= (1 << 16))
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = &x(m, 0);
    float* yr = &y(m, 0);
    double s = 0.0;
    for (std::int64_t i = 0; i < D; ++i) s += xr[i];
    const double mean = s / static_cast<double>(D);
    double v = 0.0;
    for (std::int64_t i = 0; i < D; ++i) v += (xr[i] - mean) * (xr[i] - mean);
    const float meanf = static_cast<float>(mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(D) + static_cast<double>(eps)));
    for (std::int64_t i = 0; i < D; ++i) {
      yr[i] = (xr[i] - meanf) * inv * scale(i) + (has_bias ? bias(i) : 0.0f);
    }
  }
}

/// k x k average pooling of n grids of S x S rows (reference/vision.hpp): the window's rows summed in the same
/// order, then scaled by 1 / k^2.
inline void avg_pool_grid(const Backend& be, View<const float, 2> x, std::int64_t n, std::int64_t S, std::int64_t k,
                          View<float, 2> y) {
  MAXTEXT_CHECK(k > 0 && S % k == 0 && x.dim(0) == n * S * S && y.dim(0) == n * (S / k) * (S / k) &&
                    y.dim(1) == x.dim(1),
                ShapeError, "[avg_pool_grid] x ", x.dim(0), " rows for ", n, " grids of ", S, "x", S, ", window ", k,
                ", y ", y.dim(0), " rows");
  const std::int64_t So = S / k, D = x.dim(1), rows = n * So * So;
  const float inv = 1.0f / static_cast<float>(k * k);
#pragma omp parallel for num_threads(be.threads()) schedule(static) if (rows * D * k * k >= (1 << 16))
  for (std::int64_t out = 0; out < rows; ++out) {
    const std::int64_t b = out / (So * So), oy = (out / So) % So, ox = out % So;
    float* yr = &y(out, 0);
    for (std::int64_t d = 0; d < D; ++d) yr[d] = 0.0f;
    for (std::int64_t wy = 0; wy < k; ++wy) {
      for (std::int64_t wx = 0; wx < k; ++wx) {
        const float* xr = &x((b * S + oy * k + wy) * S + ox * k + wx, 0);
        for (std::int64_t d = 0; d < D; ++d) yr[d] += xr[d];
      }
    }
    for (std::int64_t d = 0; d < D; ++d) yr[d] *= inv;
  }
}

}  // namespace maxtext::cpu
