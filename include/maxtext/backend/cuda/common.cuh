// backend/cuda/common.cuh: CUDA status checking (MAXTEXT_CUDA_CHECK -> DeviceError naming the call), device
// discovery that treats every runtime error as "no GPU", launch geometry and the warp / block reductions the
// kernels share. Compiled by the user's nvcc (the library stays header-only).
#pragma once

#if !defined(__CUDACC__)
#error "maxtext CUDA headers (.cuh) must be compiled by nvcc (a .cu translation unit)"
#endif

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "maxtext/core/error.hpp"

namespace maxtext::cuda {

/// Throw DeviceError("[cuda] <call> failed: <name> (<text>) at file:line") unless `status` is cudaSuccess.
inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a sticky-free error so the next call is not blamed for it
  throw DeviceError(str("[cuda] ", call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") at ",
                        file, ":", line));
}
inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(str("[cublasLt] ", call, " failed: ", cublasLtGetStatusName(status), " (",
                        cublasLtGetStatusString(status), ") at ", file, ":", line));
}

/// Number of usable CUDA devices; 0 when the runtime reports any error (no driver, no device, driver too old).
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}
/// True when at least one CUDA device can be used.
inline bool available() { return device_count() > 0; }

namespace detail {
inline constexpr int kThreads = 256;  ///< default block size of the element-wise kernels

/// Blocks for a grid-stride loop over n items (capped: every kernel loops).
inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return __shfl_sync(0xffffffffu, v, 0);
}
template <class T>
__device__ inline T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    const T w = __shfl_down_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return __shfl_sync(0xffffffffu, v, 0);
}

/// Sum (Op = 0) or maximum (Op = 1) over the block; every thread gets the result. `scratch` holds 32 T in shared
/// memory; the block size is a multiple of 32. Contains __syncthreads: call from every thread.
template <int Op, class T>
__device__ inline T block_reduce(T v, T* scratch) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  v = Op == 0 ? warp_sum(v) : warp_max(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < warps; ++w) r = Op == 0 ? r + scratch[w] : (scratch[w] > r ? scratch[w] : r);
  return r;
}

/// Shape and element strides of a view, passed to kernels by value (View itself stays a host type).
template <int R>
struct Strides {
  std::int64_t shape[R];
  std::int64_t stride[R];
};
template <class V>
Strides<V::rank> strides_of(const V& v) {
  Strides<V::rank> s{};
  for (int i = 0; i < V::rank; ++i) {
    s.shape[i] = v.dim(i);
    s.stride[i] = v.stride(i);
  }
  return s;
}
}  // namespace detail

}  // namespace maxtext::cuda

/// Evaluate a CUDA runtime or cuBLASLt call; on failure throw maxtext::DeviceError naming the call and its status.
#define MAXTEXT_CUDA_CHECK(call) ::maxtext::cuda::check((call), #call, __FILE__, __LINE__)
/// Check the launch of the kernel just issued (configuration errors surface here; faults at the next sync).
#define MAXTEXT_CUDA_LAUNCH_CHECK(kernel_name) \
  ::maxtext::cuda::check(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
