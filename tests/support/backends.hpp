// tests/support/backends.hpp: the backend a test program runs its layers and models on. The same test sources
// are compiled once per backend (tests/CMakeLists.txt): the CPU backend by default, the scalar reference backend
// with MAXTEXT_TEST_BACKEND_REFERENCE, the simulated device (host-inaccessible memory) with
// MAXTEXT_TEST_BACKEND_SIMDEVICE, the CUDA backend with MAXTEXT_TEST_BACKEND_CUDA (nvcc; a test skips, exit 77,
// when no GPU is usable). Tests move host data in and out with to_backend / to_host, never by pointer.
// MAXTEXT_TEST_DEFAULT_BACKEND is defined for the CPU build only (tests of the CLI, which runs on the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/params.hpp"

#if defined(MAXTEXT_TEST_BACKEND_REFERENCE)
#include "maxtext/backend/reference/backend.hpp"
#elif defined(MAXTEXT_TEST_BACKEND_SIMDEVICE)
#include "support/device_sim.hpp"
#elif defined(MAXTEXT_TEST_BACKEND_CUDA)
#include "maxtext/backend/cuda/backend.cuh"
#include "support/test_support.hpp"
#else
#include "maxtext/backend/cpu/backend.hpp"
#define MAXTEXT_TEST_DEFAULT_BACKEND 1
#endif

namespace maxtext::test {

#if defined(MAXTEXT_TEST_BACKEND_REFERENCE)
using Backend = reference::Backend;
inline constexpr bool kDefaultBackend = false;
#elif defined(MAXTEXT_TEST_BACKEND_SIMDEVICE)
using Backend = SimDeviceBackend;
inline constexpr bool kDefaultBackend = false;
#elif defined(MAXTEXT_TEST_BACKEND_CUDA)
/// The CUDA backend on device 0; constructing it skips the running test when no GPU is usable.
struct CudaTestBackend : cuda::Backend {
  CudaTestBackend() : cuda::Backend(device_or_skip()) {}
  static cuda::Options device_or_skip() {
    if (!cuda::available()) skip("no usable CUDA device (cudaGetDeviceCount failed or found none)");
    return {};
  }
};
using Backend = CudaTestBackend;
inline constexpr bool kDefaultBackend = false;
#else
using Backend = cpu::Backend;
inline constexpr bool kDefaultBackend = true;
#endif

/// A copy of a host tensor in the backend's memory (the same tensor when the backend works in host memory).
template <class B, class T, int R>
Tensor<T, R> to_backend(const B& be, const Tensor<T, R>& host) {
  return layers::upload(be, host);
}
template <class B, class T>
Tensor<T, 1> to_backend(const B& be, const std::vector<T>& host) {
  Tensor<T, 1> h({static_cast<std::int64_t>(host.size())});
  for (std::size_t i = 0; i < host.size(); ++i) h.data()[i] = host[i];
  return layers::upload(be, h);
}
/// A host copy of a backend tensor.
template <class B, class T, int R>
Tensor<T, R> to_host(const B& be, const Tensor<T, R>& t) {
  return layers::download(be, t);
}

}  // namespace maxtext::test
