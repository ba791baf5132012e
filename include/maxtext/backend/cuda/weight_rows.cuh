// backend/cuda/weight_rows.cuh: the weight operand of the CUDA kernels that read a Matrix (products, embedding,
// per-head products): value (n, k) of an out-major matrix as f32. Stored types (f32, bf16, f16, Q8_0) convert one
// element (kmath::weight_at); runtime-typed matrices (Matrix<ggml_byte>: a GGUF file's F32 / F16 / BF16 rows or
// blocks as the file has them) decode one element (backend/common/ggml_values.hpp), so a Q4_K_M file's blocks are
// the only copy of its weights on the device too.
#pragma once

#include <cstdint>

#include "maxtext/backend/common/ggml_values.hpp"
#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/core/dtype.hpp"

namespace maxtext::cuda::kernels {

/// Rows of a stored type W: `row_units` storage elements per row (Q8_0: blocks).
template <class W>
struct WeightRows {
  const W* data;
  std::int64_t row_units;
  __device__ float operator()(std::int64_t n, std::int64_t k) const { return kmath::weight_at(data + n * row_units, k); }
};

/// Rows of a runtime-typed matrix: ggml type `type`, `row_bytes` bytes per row, each value times `value_scale`.
struct GgmlRows {
  const std::uint8_t* data;
  std::int64_t row_bytes;
  std::uint32_t type;
  double value_scale;
  __device__ float operator()(std::int64_t n, std::int64_t k) const {
    return ggml_values::scaled(ggml_values::value(type, data + n * row_bytes, k), value_scale);
  }
};

}  // namespace maxtext::cuda::kernels
