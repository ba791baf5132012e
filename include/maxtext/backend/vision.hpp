// backend/vision.hpp: the operations the vision encoders add (families/*/vision.hpp), for every backend: the
// reference version, and the CPU version (C++ compilers) or the CUDA version (nvcc). They are
// free functions found by argument-dependent lookup on the backend type (semantics: backend/reference/vision.hpp),
// so a text-only program compiles none of them and the decoder's Backend concept is unchanged; a backend that runs
// a vision tower satisfies BackendVision as well.
#pragma once

#include <cstdint>

#include "maxtext/backend/ops.hpp"
#include "maxtext/backend/reference/vision.hpp"
#include "maxtext/core/tensor.hpp"
#if defined(__CUDACC__)
// nvcc: the CUDA versions (the CPU backend's headers are not compiled by nvcc; a CUDA program that also runs a tower
// on the CPU includes backend/cpu/vision.hpp from a C++ unit).
#include "maxtext/backend/cuda/vision.cuh"
#else
#include "maxtext/backend/cpu/vision.hpp"
#endif

namespace maxtext {

template <class B>
concept BackendVision = requires(const B& b, View<const float, 2> x, View<const float, 1> s, View<float, 2> y,
                                  View<const float, 4> q, const AttentionMask& m, View<float, 4> o) {
  affine_layer_norm(b, x, s, s, 1e-6f, y);
  avg_pool_grid(b, x, std::int64_t{1}, std::int64_t{4}, std::int64_t{2}, y);
  full_attention(b, q, q, q, m, o);
};

}  // namespace maxtext
