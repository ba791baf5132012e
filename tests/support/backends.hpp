// tests/support/backends.hpp: the backend a test program runs its layers and models on. The same test sources
// are compiled once per backend (tests/CMakeLists.txt): the CPU backend by default, the scalar reference backend
// with MAXTEXT_TEST_BACKEND_REFERENCE, the simulated device (host-inaccessible memory) with
// MAXTEXT_TEST_BACKEND_SIMDEVICE. Tests move host data in and out with to_backend / to_host, never by pointer.
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
#else
#include "maxtext/backend/cpu/backend.hpp"
#endif

namespace maxtext::test {

#if defined(MAXTEXT_TEST_BACKEND_REFERENCE)
using Backend = reference::Backend;
inline constexpr bool kDefaultBackend = false;
#elif defined(MAXTEXT_TEST_BACKEND_SIMDEVICE)
using Backend = SimDeviceBackend;
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
