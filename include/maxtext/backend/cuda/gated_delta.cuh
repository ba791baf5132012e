// backend/cuda/gated_delta.cuh: the Gated DeltaNet kernels (families/qwen3_next/qwen3_next.hpp): the depthwise causal convolution
// with SiLU and the gated delta rule, token by token. Semantics: BackendGatedDeltaNet (backend/concepts.hpp); the
// reference backend defines them and the CPU backend runs the same arithmetic (the gates and the L2-norm factor come
// from backend/common/kernel_math.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/cuda/elementwise.cuh"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cuda::kernels {

/// The longest conv kernel the CUDA path takes (Config::validate bounds gdn_conv_kernel_dim by it).
inline constexpr int kGdnMaxConvKernel = 64;

/// One thread per (sequence b, channel c): the convolution over the step's T tokens (taps `dil` inputs apart), then
/// the channel's new conv state (the last (K-1)*dil inputs). The thread owns its state column, so it reads all of it
/// before writing.
template <class A>
__global__ void causal_conv1d(Rows<const A> x, const A* w, const std::int32_t* start, const std::int32_t* valid,
                              Rows<float> state, Rows<A> y, std::int64_t Bn, std::int64_t T, std::int64_t C,
                              std::int64_t K, std::int64_t dil) {
  const std::int64_t H = (K - 1) * dil;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < Bn * C;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / C, c = i % C;
    const bool fresh = start[b] == 0;
    const auto in = [&](std::int64_t s) -> float {
      if (s >= 0) return to_float(x.at(b * T + s, c));
      return fresh ? 0.0f : state.at(b, (H + s) * C + c);
    };
    for (std::int64_t t = 0; t < T; ++t) {
      float acc = 0.0f;
      for (std::int64_t j = 0; j < K; ++j) acc += in(t - H + j * dil) * to_float(w[j * C + c]);
      const float r = round_to<A>(acc);
      y.at(b * T + t, c) = from_float<A>(r * math::sigmoid(r));
    }
    const std::int64_t n = valid != nullptr ? valid[b] : T;
    float next[kGdnMaxConvKernel];
    for (std::int64_t j = 0; j < H; ++j) next[j] = in(n - H + j);
    for (std::int64_t j = 0; j < H; ++j) state.at(b, j * C + c) = next[j];
  }
}

/// One block per (sequence, value head), blockDim.x a power of two; thread j owns state columns j, j + blockDim.x,
/// ... (the delta rule updates each column on its own). Dynamic shared memory: 2 * Dk + 2 * blockDim.x floats.
template <class A>
__global__ void gated_delta_rule(Rows<const A> q, Rows<const A> k, Rows<const A> v, Rows<const A> a, Rows<const A> bt,
                                 const float* a_log, const float* dt_bias, GdnShape sh, const std::int32_t* start,
                                 const std::int32_t* valid, Rows<float> state, Rows<A> o, std::int64_t T) {
  extern __shared__ float smem[];
  const std::int64_t Dk = sh.key_dim, Dv = sh.value_dim, Hv = sh.value_heads, r = Hv / sh.key_heads;
  const std::int64_t bd = blockDim.x, tid = threadIdx.x;
  float* qn = smem;
  float* kn = smem + Dk;
  float* red = smem + 2 * Dk;
  const std::int64_t b = blockIdx.x / Hv, h = blockIdx.x % Hv, kc = (h / r) * Dk;
  float* S = &state.at(b, h * Dk * Dv);
  if (start[b] == 0) {
    for (std::int64_t i = tid; i < Dk * Dv; i += bd) S[i] = 0.0f;
  }
  __syncthreads();
  const std::int64_t n = valid != nullptr ? valid[b] : T;
  const float rsqrt_dk = 1.0f / sqrtf(static_cast<float>(Dk));
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t m = b * T + t;
    float sq = 0.0f, sk = 0.0f;
    for (std::int64_t i = tid; i < Dk; i += bd) {
      const float qv = to_float(q.at(m, kc + i)), kv = to_float(k.at(m, kc + i));
      qn[i] = qv;
      kn[i] = kv;
      sq += qv * qv;
      sk += kv * kv;
    }
    red[tid] = sq;
    red[bd + tid] = sk;
    __syncthreads();
    for (std::int64_t s = bd / 2; s > 0; s >>= 1) {
      if (tid < s) {
        red[tid] += red[tid + s];
        red[bd + tid] += red[bd + tid + s];
      }
      __syncthreads();
    }
    const float fq = kmath::gdn_l2_factor(red[0]) * rsqrt_dk, fk = kmath::gdn_l2_factor(red[bd]);
    __syncthreads();
    for (std::int64_t i = tid; i < Dk; i += bd) {
      qn[i] *= fq;
      kn[i] *= fk;
    }
    __syncthreads();
    float decay = 1.0f, beta = 0.0f;
    kmath::gdn_gates(to_float(a.at(m, h)), to_float(bt.at(m, h)), a_log[h], dt_bias[h], decay, beta);
    for (std::int64_t j = tid; j < Dv; j += bd) {
      if (t < n) {
        float ks = 0.0f;
        for (std::int64_t i = 0; i < Dk; ++i) ks += kn[i] * S[i * Dv + j];
        const float u = beta * (to_float(v.at(m, h * Dv + j)) - decay * ks);
        for (std::int64_t i = 0; i < Dk; ++i) S[i * Dv + j] = decay * S[i * Dv + j] + kn[i] * u;
      }
      float acc = 0.0f;
      for (std::int64_t i = 0; i < Dk; ++i) acc += qn[i] * S[i * Dv + j];
      o.at(m, h * Dv + j) = from_float<A>(acc);
    }
    __syncthreads();
  }
}

}  // namespace maxtext::cuda::kernels
