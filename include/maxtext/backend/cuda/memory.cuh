// backend/cuda/memory.cuh: device memory for tensors, the KV cache and the scratch arena, from a stream-ordered
// pool (cudaMemPool + cudaMallocFromPoolAsync / cudaFreeAsync). Allocation and release are ordered on the
// backend's stream, so a buffer released while kernels that use it are still queued is reused only after them;
// the pool keeps freed memory (release threshold = unlimited) so steady-state decoding allocates nothing from the
// driver.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cuda {

/// A device, its stream and its memory pool. Owned through shared_ptr by the backend and by every tensor
/// allocated from it, so the stream outlives the last buffer.
class DeviceMemory final : public MemoryResource {
 public:
  explicit DeviceMemory(int device) : device_(device) {
    MAXTEXT_CUDA_CHECK(cudaSetDevice(device));
    MAXTEXT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    MAXTEXT_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    std::uint64_t keep = UINT64_MAX;
    MAXTEXT_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  ~DeviceMemory() override {
    // Destroying the pool with allocations outstanding defers the release until they are freed.
    (void)cudaStreamSynchronize(stream_);
    (void)cudaMemPoolDestroy(pool_);
    (void)cudaStreamDestroy(stream_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    // 256-byte granularity keeps every buffer aligned for vector loads and cuBLASLt's fastest kernels.
    bytes = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
    MAXTEXT_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool_, stream_));
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override {
    const cudaError_t e = cudaFreeAsync(p, stream_);
    if (e != cudaSuccess) {  // cannot throw here: report, and leave the buffer to the pool's teardown
      std::fprintf(stderr, "[cuda] cudaFreeAsync failed: %s\n", cudaGetErrorString(e));
      (void)cudaGetLastError();
    }
  }
  bool host_accessible() const override { return false; }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cudaMemPool_t pool() const { return pool_; }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
};

}  // namespace maxtext::cuda
