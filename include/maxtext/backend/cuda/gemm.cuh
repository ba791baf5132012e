// backend/cuda/gemm.cuh: y[M,N] = x[M,K] . W[N,K]^T with f32 accumulation, rounded once to Y. Through cuBLASLt
// when x and W share a type (f32, bf16, f16) and Y is that type or f32 (CUBLAS_COMPUTE_32F: no TF32, no reduced
// precision); otherwise (Q8_0 weights, mixed types, a GGUF file's blocks) through the simple kernels below, which
// read each weight element through a weight_rows.cuh reader and accumulate in f32. Runtime-typed matrices with more
// than 8 rows of f32 activations are dequantised a slice of rows at a time (dequantize_rows) for cuBLASLt.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/backend/cuda/weight_rows.cuh"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cuda {

namespace detail {
template <class T>
constexpr cudaDataType_t lt_type() {
  if constexpr (std::is_same_v<T, float>) {
    return CUDA_R_32F;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return CUDA_R_16BF;
  } else {
    return CUDA_R_16F;
  }
}
template <class T>
inline constexpr bool lt_input = std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;
}  // namespace detail

/// Matrix products cuBLASLt runs for us: same-typed inputs, output of that type or f32.
template <class X, class W, class Y>
inline constexpr bool lt_supported = std::is_same_v<X, W> && detail::lt_input<X> && (std::is_same_v<Y, X> || std::is_same_v<Y, float>);

/// A cuBLASLt handle, its workspace and the algorithms chosen per problem (heuristic queried once per shape,
/// types, leading dimensions and pointer alignments).
class Gemm {
 public:
  Gemm(cudaStream_t stream, std::size_t workspace_bytes) : stream_(stream), ws_bytes_(workspace_bytes) {
    MAXTEXT_CUDA_CHECK(cublasLtCreate(&handle_));
    if (ws_bytes_ > 0) MAXTEXT_CUDA_CHECK(cudaMalloc(&ws_, ws_bytes_));
  }
  ~Gemm() {
    if (ws_) (void)cudaFree(ws_);
    (void)cublasLtDestroy(handle_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// y (row-major [M, N], row stride ldy) = x (row-major [M, K], ldx) . w (row-major [N, K], ldw)^T.
  /// cuBLASLt is column-major: this is y^T[N, M] = op_T(w as col-major [K, N]) * (x as col-major [K, M]).
  template <class X, class Y>
  void run(const X* x, std::int64_t ldx, const X* w, std::int64_t ldw, Y* y, std::int64_t ldy, std::int64_t M,
           std::int64_t N, std::int64_t K) {
    const cudaDataType_t tx = detail::lt_type<X>(), ty = detail::lt_type<Y>();
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    try {
      MAXTEXT_CUDA_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      MAXTEXT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      MAXTEXT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      MAXTEXT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&la, tx, static_cast<std::uint64_t>(K), static_cast<std::uint64_t>(N), ldw));
      MAXTEXT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&lb, tx, static_cast<std::uint64_t>(K), static_cast<std::uint64_t>(M), ldx));
      MAXTEXT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&lc, ty, static_cast<std::uint64_t>(N), static_cast<std::uint64_t>(M), ldy));
      const Key key{M, N, K, ldx, ldw, ldy, static_cast<int>(tx), static_cast<int>(ty), alignment(x), alignment(w), alignment(y)};
      const cublasLtMatmulAlgo_t algo = find_algo(key, op, la, lb, lc);
      const float alpha = 1.0f, beta = 0.0f;
      MAXTEXT_CUDA_CHECK(cublasLtMatmul(handle_, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &algo, ws_, ws_bytes_, stream_));
    } catch (...) {
      destroy(op, la, lb, lc);
      throw;
    }
    destroy(op, la, lb, lc);
  }

 private:
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int, int,
                         int, int>;
  static int alignment(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    int al = 256;
    while (al > 1 && a % static_cast<std::uintptr_t>(al) != 0) al /= 2;
    return al;
  }
  static void destroy(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c) {
    if (c) (void)cublasLtMatrixLayoutDestroy(c);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (op) (void)cublasLtMatmulDescDestroy(op);
  }
  cublasLtMatmulAlgo_t find_algo(const Key& key, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                                 cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = algos_.find(key);
    if (it != algos_.end()) return it->second;
    cublasLtMatmulPreference_t pref = nullptr;
    MAXTEXT_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    {
      const std::uint64_t ws = ws_bytes_;
      const std::uint32_t aa = static_cast<std::uint32_t>(std::get<9>(key)), ab = static_cast<std::uint32_t>(std::get<8>(key)),
                          ac = static_cast<std::uint32_t>(std::get<10>(key));
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac);
      if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoGetHeuristic(handle_, op, la, lb, lc, lc, pref, 1, &res, &found);
    }
    (void)cublasLtMatmulPreferenceDestroy(pref);
    MAXTEXT_CUDA_CHECK(st);
    MAXTEXT_CHECK(found > 0, DeviceError, "[cublasLt] no algorithm for the product [", std::get<0>(key), ",",
                  std::get<2>(key), "] x [", std::get<1>(key), ",", std::get<2>(key), "]^T");
    algos_.emplace(key, res.algo);
    return res.algo;
  }

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* ws_ = nullptr;
  std::size_t ws_bytes_ = 0;
  std::mutex mu_;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

namespace kernels {

/// Few rows (decode): one warp per output feature n, lanes over k, every x row (M <= 8) at once. `w` is a
/// weight_rows.cuh reader.
template <class X, class WR, class Y, int MaxM>
__global__ void gemv_rows(const X* x, std::int64_t ldx, WR w, Y* y, std::int64_t ldy, std::int64_t M, std::int64_t N,
                          std::int64_t K) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32; n < N; n += warps) {
    float acc[MaxM];
    for (int m = 0; m < MaxM; ++m) acc[m] = 0.0f;
    for (std::int64_t k = lane; k < K; k += 32) {
      const float wk = w(n, k);
      for (int m = 0; m < MaxM; ++m) {
        if (m < M) acc[m] += to_float(x[m * ldx + k]) * wk;
      }
    }
    for (int m = 0; m < MaxM; ++m) {
      if (m >= M) break;
      const float s = detail::warp_sum(acc[m]);
      if (lane == 0) y[m * ldy + n] = from_float<Y>(s);
    }
  }
}

/// Many rows: 16 x 16 output tiles, K in steps of 16 through shared memory (converted to f32 on load).
template <class X, class WR, class Y>
__global__ void gemm_tiled(const X* x, std::int64_t ldx, WR w, Y* y, std::int64_t ldy, std::int64_t M, std::int64_t N,
                           std::int64_t K) {
  constexpr int T = 16;
  __shared__ float xs[T][T + 1];
  __shared__ float ws[T][T + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const std::int64_t m = static_cast<std::int64_t>(blockIdx.y) * T + ty, n = static_cast<std::int64_t>(blockIdx.x) * T + tx;
  const std::int64_t wn = static_cast<std::int64_t>(blockIdx.x) * T + ty;  // the W row this thread loads
  float acc = 0.0f;
  for (std::int64_t k0 = 0; k0 < K; k0 += T) {
    const std::int64_t k = k0 + tx;
    xs[ty][tx] = (m < M && k < K) ? to_float(x[m * ldx + k]) : 0.0f;
    ws[ty][tx] = (wn < N && k < K) ? w(wn, k) : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < T; ++kk) acc += xs[ty][kk] * ws[tx][kk];
    __syncthreads();
  }
  if (m < M && n < N) y[m * ldy + n] = from_float<Y>(acc);
}

/// Per-head products (MLA absorbed form): grid (ceil(Ny/16), ceil(M/16), H), block 16 x 16. W_h = rows
/// [h * head_stride + row_offset, ...) of w; y[m,h,j] = sum_i x[m,h,i] * (transpose_w ? W_h[i, j] : W_h[j, i]).
template <class X, class WR, class Y>
__global__ void head_matmul(const X* x, std::int64_t xm, std::int64_t xh, WR w, std::int64_t head_stride,
                            std::int64_t row_offset, bool transpose_w, Y* y, std::int64_t ym, std::int64_t yh,
                            std::int64_t M, std::int64_t Kx, std::int64_t Ny) {
  constexpr int T = 16;
  __shared__ float xs[T][T + 1];
  __shared__ float ws[T][T + 1];  // ws[j][i]: the weight of input i for output j
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const std::int64_t h = blockIdx.z, r0 = h * head_stride + row_offset;
  const std::int64_t m = static_cast<std::int64_t>(blockIdx.y) * T + ty, j = static_cast<std::int64_t>(blockIdx.x) * T + tx;
  const std::int64_t jl = static_cast<std::int64_t>(blockIdx.x) * T + ty;  // the output this thread loads weights for
  float acc = 0.0f;
  for (std::int64_t i0 = 0; i0 < Kx; i0 += T) {
    const std::int64_t i = i0 + tx;
    xs[ty][tx] = (m < M && i < Kx) ? to_float(x[m * xm + h * xh + i]) : 0.0f;
    float wv = 0.0f;
    if (jl < Ny && i < Kx) {
      wv = transpose_w ? w(r0 + i, jl) : w(r0 + jl, i);
    }
    ws[ty][tx] = wv;
    __syncthreads();
    for (int kk = 0; kk < T; ++kk) acc += xs[ty][kk] * ws[tx][kk];
    __syncthreads();
  }
  if (m < M && j < Ny) y[m * ym + h * yh + j] = from_float<Y>(acc);
}

/// out[r, k] = w(n0 + r, k) for r < rows, k < K (row-major f32, row stride K): a slice of a runtime-typed matrix
/// decoded for cuBLASLt. (A template, as every kernel in these headers: one definition per program.)
template <class WR>
__global__ void dequantize_rows(WR w, float* out, std::int64_t n0, std::int64_t rows, std::int64_t K) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * K;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = w(n0 + i / K, i % K);
  }
}

}  // namespace kernels
}  // namespace maxtext::cuda
