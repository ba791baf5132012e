// backend/cpu/vision.hpp: the vision encoders' operations on the CPU backend (definitions and semantics:
// backend/reference/vision.hpp). Rows are split across the backend's threads; full_attention runs on the packed GEMM.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/backend/cpu/gemm.hpp"
#include "maxtext/backend/cpu/vec.hpp"
#include "maxtext/backend/ops.hpp"
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

/// k x k average pooling of n grids of Sh x Sw rows (reference/vision.hpp): the window's rows summed in the same
/// order, then scaled by 1 / k^2.
inline void avg_pool_grid(const Backend& be, View<const float, 2> x, std::int64_t n, std::int64_t Sh, std::int64_t Sw,
                          std::int64_t k, View<float, 2> y) {
  MAXTEXT_CHECK(k > 0 && Sh % k == 0 && Sw % k == 0 && x.dim(0) == n * Sh * Sw &&
                    y.dim(0) == n * (Sh / k) * (Sw / k) && y.dim(1) == x.dim(1),
                ShapeError, "[avg_pool_grid] x ", x.dim(0), " rows for ", n, " grids of ", Sh, "x", Sw, ", window ", k,
                ", y ", y.dim(0), " rows");
  const std::int64_t Ho = Sh / k, Wo = Sw / k, D = x.dim(1), rows = n * Ho * Wo;
  const float inv = 1.0f / static_cast<float>(k * k);
#pragma omp parallel for num_threads(be.threads()) schedule(static) if (rows * D * k * k >= (1 << 16))
  for (std::int64_t out = 0; out < rows; ++out) {
    const std::int64_t b = out / (Ho * Wo), oy = (out / Wo) % Ho, ox = out % Wo;
    float* yr = &y(out, 0);
    for (std::int64_t d = 0; d < D; ++d) yr[d] = 0.0f;
    for (std::int64_t wy = 0; wy < k; ++wy) {
      for (std::int64_t wx = 0; wx < k; ++wx) {
        const float* xr = &x((b * Sh + oy * k + wy) * Sw + ox * k + wx, 0);
        for (std::int64_t d = 0; d < D; ++d) yr[d] += xr[d];
      }
    }
    for (std::int64_t d = 0; d < D; ++d) yr[d] *= inv;
  }
}

inline void avg_pool_grid(const Backend& be, View<const float, 2> x, std::int64_t n, std::int64_t S, std::int64_t k,
                          View<float, 2> y) {
  avg_pool_grid(be, x, n, S, S, k, y);
}

/// Attention of every query over every key of its own sequence (a vision tower's: no mask, no cache), q already
/// scaled: out = softmax(q k^T) v per sequence and head, [n, T, H, d] views (rows may be strided, the last axis
/// contiguous). For long sequences the tiled decoder kernel (backend/cpu/attention.hpp, built for causal prefill and
/// decode over a cache) leaves the CPU idle between its small tiles; here each head is two matrix products through
/// the packed GEMM (scores [T, T] = q_h k_h^T, then P v_h) and a vectorised softmax between them, as PyTorch's math
/// path does. f32 throughout; the scores of one head at a time are kept (T^2 floats). Anything else (a causal,
/// windowed or segmented mask, keys longer than the queries) goes to the backend's attention.
inline void full_attention(const Backend& be, View<const float, 4> q, View<const float, 4> k, View<const float, 4> v,
                           const AttentionMask& mask, View<float, 4> out) {
  const std::int64_t n = q.dim(0), T = q.dim(1), H = q.dim(2), d = q.dim(3);
  const bool plain = !mask.causal && mask.sliding_window <= 0 && mask.chunk <= 0 && mask.q_segment.empty() &&
                     mask.kv_segment.empty() && k.dim(1) == T && k.dim(2) == H && v.dim(3) == d;
  bool whole = plain;
  for (std::int64_t b = 0; whole && b < n; ++b) whole = mask.q_start(b) == 0 && mask.kv_len(b) == T;
  if (!whole || T < 64) {  // short sequences: the tiled kernel is as fast
    be.attention(q, k, v, mask, AttentionOptions{}, View<const float, 1>{}, out);
    return;
  }
  const int threads = be.threads();
  std::vector<float> kh(static_cast<std::size_t>(T * d)), vt(static_cast<std::size_t>(d * T));
  std::vector<float> scores(static_cast<std::size_t>(T * T));
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        const float* kr = &k(b, t, h, 0);
        const float* vr = &v(b, t, h, 0);
        std::copy(kr, kr + d, &kh[static_cast<std::size_t>(t * d)]);
        for (std::int64_t j = 0; j < d; ++j) vt[static_cast<std::size_t>(j * T + t)] = vr[j];
      }
      const auto kp = gemm::pack(kh.data(), T, d, false, threads);
      gemm::matmul(*kp, &q(b, 0, h, 0), q.stride(1), T, scores.data(), T, static_cast<const float*>(nullptr), threads);
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t r = 0; r < T; ++r) {
        float* row = &scores[static_cast<std::size_t>(r * T)];
        float mx = -std::numeric_limits<float>::infinity();
        for (std::int64_t i = 0; i < T; ++i) mx = std::max(mx, row[i]);
        const vec::fbatch vmx(mx);
        vec::fbatch vsum(0.0f);
        std::int64_t i = 0;
        for (; i + static_cast<std::int64_t>(vec::W) <= T; i += static_cast<std::int64_t>(vec::W)) {
          const vec::fbatch e = xsimd::exp(vec::fbatch::load_unaligned(row + i) - vmx);
          e.store_unaligned(row + i);
          vsum += e;
        }
        float sum = xsimd::hadd(vsum);
        for (; i < T; ++i) sum += (row[i] = std::exp(row[i] - mx));
        const float inv = 1.0f / sum;
        for (std::int64_t j = 0; j < T; ++j) row[j] *= inv;
      }
      const auto vp = gemm::pack(vt.data(), d, T, false, threads);
      gemm::matmul(*vp, scores.data(), T, T, &out(b, 0, h, 0), out.stride(1), static_cast<const float*>(nullptr),
                   threads);
    }
  }
}

}  // namespace maxtext::cpu
