// backend/cuda/elementwise.cuh: element-wise, normalisation, gather, rotary and row-softmax kernels. Each mirrors
// the CPU backend's operation of the same name (semantics: backend/concepts.hpp, docs/backends.md); the shared
// arithmetic comes from backend/common (math.hpp, kernel_math.hpp). 2-D operands are rows with a row stride and
// unit column stride.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cuda::kernels {

/// A 2-D operand: base pointer and row stride (elements); columns are contiguous.
template <class T>
struct Rows {
  T* p;
  std::int64_t ld;
  __device__ T& at(std::int64_t r, std::int64_t c) const { return p[r * ld + c]; }
};

template <class A>
__global__ void add(Rows<const A> a, Rows<const A> b, Rows<A> y, std::int64_t M, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    y.at(r, c) = from_float<A>(to_float(a.at(r, c)) + to_float(b.at(r, c)));
  }
}

/// y = round(round(act0(h0)) * round(act1(h1))), h1 optional (p == nullptr); round_each = false: only y rounded.
template <class A>
__global__ void activation(Rows<const A> h0, Activation a0, Rows<const A> h1, Activation a1, Rows<A> y, std::int64_t M,
                           std::int64_t D, bool round_each) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    float v = math::activate(a0, to_float(h0.at(r, c)));
    if (round_each) v = round_to<A>(v);
    if (h1.p != nullptr) {
      float w = math::activate(a1, to_float(h1.at(r, c)));
      if (round_each) w = round_to<A>(w);
      v = round_each ? round_to<A>(v * w) : v * w;
    }
    y.at(r, c) = from_float<A>(v);
  }
}

/// The clamped SwiGLUs (backend/common/math.hpp clamped_swiglu, each op rounded to A); alpha already rounded.
template <class A>
__global__ void clamped_glu(Rows<const A> h0, Rows<const A> h1, Activation a0, float alpha, float limit, Rows<A> y,
                            std::int64_t M, std::int64_t D, ClampedGluForm form) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    const auto rnd = [](float v) { return round_to<A>(v); };
    y.at(r, c) = from_float<A>(math::clamped_swiglu(to_float(h0.at(r, c)), to_float(h1.at(r, c)), a0, alpha, limit, rnd, form));
  }
}

/// x = round(x * f) or round(x / f); f already rounded to A on the host.
template <class A>
__global__ void scale(Rows<A> x, float f, bool divide, std::int64_t M, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    const float v = to_float(x.at(r, c));
    x.at(r, c) = from_float<A>(divide ? v / f : v * f);
  }
}

/// x[r, :] = round(x[r, :] * round(act(g[r, 0]))).
template <class A, class G>
__global__ void scale_rows(Rows<A> x, Rows<const G> g, Activation act, std::int64_t M, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    const float f = round_to<A>(math::activate(act, to_float(g.at(r, 0))));
    x.at(r, c) = from_float<A>(to_float(x.at(r, c)) * f);
  }
}

template <class A>
__global__ void soft_cap(Rows<A> x, float cap, std::int64_t M, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    x.at(r, c) = from_float<A>(math::soft_cap(to_float(x.at(r, c)), cap));
  }
}

template <class X, class Y>
__global__ void convert(Rows<const X> x, Rows<Y> y, std::int64_t M, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    y.at(r, c) = from_float<Y>(to_float(x.at(r, c)));
  }
}

/// y = round_Y(y + bias[c]) (DenseGeneral's bias, added after the product was rounded).
template <class Y, class Bias>
__global__ void add_bias(Rows<Y> y, const Bias* bias, std::int64_t M, std::int64_t N) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * N;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / N, c = i % N;
    y.at(r, c) = from_float<Y>(to_float(y.at(r, c)) + to_float(bias[c]));
  }
}

/// dst = src for views of rank R with arbitrary strides (any axis).
template <class T, int R>
__global__ void strided_copy(const T* src, detail::Strides<R> s, T* dst, detail::Strides<R> d, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t rem = i, so = 0, doff = 0;
    for (int a = R - 1; a >= 0; --a) {
      const std::int64_t idx = rem % s.shape[a];
      rem /= s.shape[a];
      so += idx * s.stride[a];
      doff += idx * d.stride[a];
    }
    dst[doff] = src[so];
  }
}

/// y[m, :] = round_A(table[ids[m], :]); `table` a weight_rows.cuh reader.
template <class WR, class A>
__global__ void embed(WR table, const std::int32_t* ids, Rows<A> y, std::int64_t M, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / D, c = i % D;
    y.at(r, c) = from_float<A>(table(ids[r], c));
  }
}

/// Rotary embedding of x [M, H, d] in place: one block per (m, h), one thread per pair. Every pair is read before
/// any is written (the YaRN layout writes lanes that other pairs read).
template <class A>
__global__ void rotary(A* x, std::int64_t sm, std::int64_t sh, std::int64_t H, const std::int32_t* pos, const float* cos,
                       const float* sin, std::int64_t half, RopeLayout layout, bool round_sincos, float post_scale) {
  const std::int64_t m = blockIdx.x / H, h = blockIdx.x % H, i = threadIdx.x;
  A* xp = x + m * sm + h * sh;
  float oa = 0.0f, ob = 0.0f;
  kmath::RotaryLanes ln{0, 0, 0, 0};
  if (i < half) {
    ln = kmath::rotary_lanes(layout, i, half);
    const std::int64_t p = pos[m];
    float c = cos[p * half + i], s = sin[p * half + i];
    if (round_sincos) {
      c = round_to<A>(c);
      s = round_to<A>(s);
    }
    kmath::rotate_pair<A>(layout, round_sincos, post_scale, to_float(xp[ln.in_a]), to_float(xp[ln.in_b]), c, s, oa, ob);
  }
  __syncthreads();
  if (i < half) {
    xp[ln.out_a] = from_float<A>(oa);
    xp[ln.out_b] = from_float<A>(ob);
  }
}

/// RMSNorm, one block per row: r = round_A(x / sqrt(mean(x^2) + eps)); y = round_A(r * round_A(scale + offset)).
template <class A, class S>
__global__ void rms_norm(Rows<const A> x, const S* scale, float eps, float offset, Rows<A> y, std::int64_t D) {
  __shared__ float red[32];
  const std::int64_t r = blockIdx.x;
  float ss = 0.0f;
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = to_float(x.at(r, i));
    ss += v * v;
  }
  ss = detail::block_reduce<0>(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = round_to<A>(to_float(x.at(r, i)) * inv);
    if (scale != nullptr) v = round_to<A>(v * round_to<A>(to_float(scale[i]) + offset));
    y.at(r, i) = from_float<A>(v);
  }
}

/// Gpt3LayerNorm, one block per row, statistics in A (sums in double, as the CPU backend); stats_in_f32: the
/// statistics path unrounded (reductions_in_fp32).
template <class A>
__global__ void layer_norm(Rows<const A> x, const A* scale, const A* bias, float eps, Rows<A> y, std::int64_t D,
                           bool stats_in_f32) {
  __shared__ double red[32];
  const std::int64_t r = blockIdx.x;
  const auto rs = [stats_in_f32](float v) { return stats_in_f32 ? v : round_to<A>(v); };
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) s += to_float(x.at(r, i));
  s = detail::block_reduce<0>(s, red);
  const float mean = rs(static_cast<float>(s / static_cast<double>(D)));
  double v = 0.0;
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float c = rs(to_float(x.at(r, i)) - mean);
    v += static_cast<double>(rs(c * c));
  }
  v = detail::block_reduce<0>(v, red);
  const float var = rs(static_cast<float>(v / static_cast<double>(D)));
  const float inv = rs(1.0f / sqrtf(rs(var + eps)));
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float o = round_to<A>(rs(to_float(x.at(r, i)) - mean) * inv);
    o = round_to<A>(o * round_to<A>(to_float(scale[i]) + 1.0f));
    if (bias != nullptr) o = round_to<A>(o + to_float(bias[i]));
    y.at(r, i) = from_float<A>(o);
  }
}

/// Row softmax in f32, one block per row, y may alias x.
template <class X, class Y>
__global__ void softmax(Rows<const X> x, Rows<Y> y, std::int64_t D) {
  __shared__ float red[32];
  const std::int64_t r = blockIdx.x;
  float mx = kmath::neg_inf();
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) mx = fmaxf(mx, to_float(x.at(r, i)));
  mx = detail::block_reduce<1>(mx, red);
  float sum = 0.0f;
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) sum += expf(to_float(x.at(r, i)) - mx);
  sum = detail::block_reduce<0>(sum, red);
  __syncthreads();  // every thread has read x before any writes y (aliasing)
  for (std::int64_t i = threadIdx.x; i < D; i += blockDim.x) y.at(r, i) = from_float<Y>(expf(to_float(x.at(r, i)) - mx) / sum);
}


// ---- manifold-constrained hyper-connections (layers/mhc.hpp) -------------------------------------------------
/// One thread per token: kmath::mhc_maps_row (the CPU backend runs the same function).
template <class A>
__global__ void mhc_maps(Rows<const A> hp, Rows<const A> hq, Rows<const A> hr, MhcCoefficients<A> c, MhcOptions o,
                         Rows<A> pre, Rows<A> post, Rows<A> res, std::int64_t M) {
  for (std::int64_t m = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; m < M;
       m += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    kmath::mhc_maps_row<A>(o, c, &hp.at(m, 0), &hq.at(m, 0), &hr.at(m, 0), &pre.at(m, 0), &post.at(m, 0), &res.at(m, 0));
  }
}

/// y(m, d) = round(sum_s w(m, s) x(m, s*D + d)), w.p == nullptr: weights 1. One thread per output element.
template <class A>
__global__ void stream_sum(Rows<const A> x, Rows<const A> w, Rows<A> y, std::int64_t M, std::int64_t D, std::int64_t k) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t m = i / D, d = i % D;
    float acc = 0.0f;
    for (std::int64_t s = 0; s < k; ++s) acc += (w.p ? to_float(w.at(m, s)) : 1.0f) * to_float(x.at(m, s * D + d));
    y.at(m, d) = from_float<A>(acc);
  }
}

/// y(m, j*D + d) = r(r(sum_i res(m, i*k + j) x(m, i*D + d)) + r(f(m, d) post(m, j))). One thread per output element.
template <class A>
__global__ void stream_mix(Rows<const A> x, Rows<const A> res, Rows<const A> f, Rows<const A> post, Rows<A> y,
                           std::int64_t M, std::int64_t D, std::int64_t k) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * k * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t m = i / (k * D), j = (i / D) % k, d = i % D;
    float acc = 0.0f;
    for (std::int64_t s = 0; s < k; ++s) acc += to_float(res.at(m, s * k + j)) * to_float(x.at(m, s * D + d));
    y.at(m, j * D + d) = from_float<A>(round_to<A>(acc) + round_to<A>(to_float(f.at(m, d)) * to_float(post.at(m, j))));
  }
}

/// Engram's gated value: one warp per (row m, stream g) sums q.k over the stream's D features (f32), every lane
/// evaluates kmath::engram_gate and writes its features of y(m, g*D + d) = r(gate v(m, d)).
template <class A>
__global__ void engram_gate(Rows<const A> q, Rows<const A> k, Rows<const A> v, Rows<A> y, std::int64_t M,
                            std::int64_t G, std::int64_t D) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float sqrt_d = sqrtf(static_cast<float>(D));
  for (std::int64_t w = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; w < M * G; w += warps) {
    const std::int64_t m = w / G, g = w % G;
    float dot = 0.0f;
    for (std::int64_t d = lane; d < D; d += 32) dot += to_float(q.at(m, g * D + d)) * to_float(k.at(m, g * D + d));
    const float gate = kmath::engram_gate<A>(detail::warp_sum(dot), sqrt_d);
    for (std::int64_t d = lane; d < D; d += 32) y.at(m, g * D + d) = from_float<A>(gate * to_float(v.at(m, d)));
  }
}

}  // namespace maxtext::cuda::kernels
