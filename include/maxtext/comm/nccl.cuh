// comm/nccl.cuh: the communicator over NCCL (comm/communicator.hpp) for ranks whose layers run on CUDA devices
// (issue 50; docs/distributed.md). NCCL moves the rows between the GPUs itself (NVLink, PCIe, InfiniBand or sockets,
// whatever it finds), so a split model's all-reduces never pass through the host. Include it only where <nccl.h> is on
// the include path and libnccl is linked (CMake's maxtext::nccl target); the rest of the library does not need it.
//
//   comm::Mpi world;                              // or any host communicator: ThreadGroup, Local
//   comm::Nccl gpus(world, /*device=*/0);         // bootstrapped over it: rank 0 makes NCCL's id, the others get it
//   model.set_communicator(&gpus);                // layers::Context hands it device rows as they lie
//
// Every collective takes device pointers (the model's rows) and host pointers too (the logits broadcast, the replica
// check's hashes, the ranks' fingerprints): host memory is staged through a device buffer of this communicator. The
// communicator is non-blocking inside (ncclConfig_t::blocking = 0) and each operation is waited for with a deadline
// (collective_timeout, MAXTEXT_COMM_TIMEOUT_S): a rank that died, stalled or runs another step makes the others throw a
// CommError naming the layer and the collective; the NCCL communicator is then aborted (ncclCommAbort) and refuses
// further use. Several ranks on one GPU are refused by NCCL itself ("Duplicate GPU detected") unless each process
// claims its own host (NCCL_HOSTID): the two-process test does so (tests/cuda/test_cuda_nccl.cu).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <memory>
#include <string_view>
#include <thread>

#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/comm/communicator.hpp"
#include "maxtext/core/error.hpp"

namespace maxtext::comm {

class Nccl final : public Communicator {
 public:
  using Id = ncclUniqueId;

  /// A new clique's id (ncclGetUniqueId): one process makes it and hands it to every rank; that process must stay
  /// alive until every rank has joined (it answers the ranks' first contact).
  static Id new_id() {
    Id id{};
    const ncclResult_t r = ncclGetUniqueId(&id);
    MAXTEXT_CHECK(r == ncclSuccess, CommError, "[comm] NCCL: ncclGetUniqueId failed: ", ncclGetErrorString(r),
                  " (NCCL needs a network interface for its bootstrap; NCCL_SOCKET_IFNAME names one)");
    return id;
  }

  /// Joins the clique `id` as rank `rank` of `ranks` on CUDA device `device`. Waits (up to the timeout) for every rank.
  Nccl(const Id& id, int rank, int ranks, int device, std::chrono::milliseconds timeout = std::chrono::milliseconds(0))
      : timeout_(collective_timeout(timeout)), rank_(rank), size_(ranks), device_(device) {
    init(id);
  }

  /// Bootstrapped over `host` (MPI, threads): rank 0 of `host` makes the id and broadcasts it; the NCCL ranks are
  /// `host`'s ranks. Every rank of `host` must call this at the same time.
  Nccl(Communicator& host, int device, std::chrono::milliseconds timeout = std::chrono::milliseconds(0))
      : timeout_(collective_timeout(timeout)), rank_(host.rank()), size_(host.size()), device_(device) {
    Id id{};
    if (host.rank() == 0) id = new_id();
    host.broadcast(&id, sizeof id, 0, "NCCL bootstrap: the clique's id");
    init(id);
  }

  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;
  ~Nccl() override {
    if (comm_ != nullptr) {
      (void)cudaSetDevice(device_);
      if (failed_) {
        (void)ncclCommAbort(comm_);
      } else {
        // Finalize flushes outstanding work; it completes at once here (every operation was waited for).
        ncclResult_t st = ncclCommFinalize(comm_);
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        while (st == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
          if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) break;
        }
        if (st == ncclSuccess) {
          (void)ncclCommDestroy(comm_);
        } else {
          (void)ncclCommAbort(comm_);
        }
      }
    }
    if (staging_ != nullptr) (void)cudaFree(staging_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  bool device_memory() const override { return true; }
  std::string describe() const override {
    return "NCCL, rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " on CUDA device " +
           std::to_string(device_);
  }

  void all_reduce_sum(float* data, std::size_t n, std::string_view what) override {
    begin("all_reduce", what);
    if (n == 0) return;
    const std::size_t bytes = n * sizeof(float);
    float* d = data;
    const bool host = !on_device(data);
    if (host) {
      d = static_cast<float*>(stage(bytes, what));
      copy(d, data, bytes, cudaMemcpyHostToDevice, what);
    }
    call(ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce", what);
    if (host) copy(data, d, bytes, cudaMemcpyDeviceToHost, what);
    wait("all_reduce", what);
  }

  void all_gather(const void* local, std::size_t bytes, void* all, std::string_view what) override {
    begin("all_gather", what);
    if (bytes == 0) return;
    const std::size_t total = bytes * static_cast<std::size_t>(size_);
    const void* src = local;
    void* dst = all;
    const bool host_src = !on_device(local), host_dst = !on_device(all);
    if (host_src || host_dst) {
      auto* buf = static_cast<char*>(stage(total + bytes, what));
      if (host_src) {
        copy(buf + total, local, bytes, cudaMemcpyHostToDevice, what);
        src = buf + total;
      }
      if (host_dst) dst = buf;
    }
    call(ncclAllGather(src, dst, bytes, ncclUint8, comm_, stream_), "ncclAllGather", what);
    if (host_dst) copy(all, dst, total, cudaMemcpyDeviceToHost, what);
    wait("all_gather", what);
  }

  void broadcast(void* data, std::size_t bytes, int root, std::string_view what) override {
    begin("broadcast", what);
    check_peer(root, "broadcast", what, false);
    if (bytes == 0) return;
    void* d = data;
    const bool host = !on_device(data);
    if (host) {
      d = stage(bytes, what);
      if (rank_ == root) copy(d, data, bytes, cudaMemcpyHostToDevice, what);
    }
    call(ncclBroadcast(d, d, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast", what);
    if (host && rank_ != root) copy(data, d, bytes, cudaMemcpyDeviceToHost, what);
    wait("broadcast", what);
  }

  void send(const void* data, std::size_t bytes, int to, std::string_view what) override {
    begin("send", what);
    check_peer(to, "send", what, true);
    if (bytes == 0) return;
    const void* d = data;
    if (!on_device(data)) {
      void* buf = stage(bytes, what);
      copy(buf, data, bytes, cudaMemcpyHostToDevice, what);
      d = buf;
    }
    call(ncclSend(d, bytes, ncclUint8, to, comm_, stream_), "ncclSend", what);
    wait("send", what);
  }

  void recv(void* data, std::size_t bytes, int from, std::string_view what) override {
    begin("recv", what);
    check_peer(from, "recv", what, true);
    if (bytes == 0) return;
    void* d = data;
    const bool host = !on_device(data);
    if (host) d = stage(bytes, what);
    call(ncclRecv(d, bytes, ncclUint8, from, comm_, stream_), "ncclRecv", what);
    if (host) copy(data, d, bytes, cudaMemcpyDeviceToHost, what);
    wait("recv", what);
  }

  /// NCCL has no barrier: an all-reduce of one float stands in (every rank must arrive for it to complete).
  void barrier(std::string_view what) override {
    begin("barrier", what);
    auto* d = static_cast<float*>(stage(sizeof(float), what));
    call(ncclAllReduce(d, d, 1, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce (barrier)", what);
    wait("barrier", what);
  }

  /// ncclCommSplit: a sub-communicator on the same device with this one's timeout, its own stream and staging. NCCL
  /// older than 2.18.1 has no split: refused by name.
  std::unique_ptr<Communicator> split(int color, int key, std::string_view what) override {
    check_color(color, what);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 1)
    begin("ncclCommSplit", what);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sub = nullptr;
    call(ncclCommSplit(comm_, color, key, &sub, &config), "ncclCommSplit", what);
    // Non-blocking, the split is an operation of this (the parent) communicator: `sub` is written once it completes.
    wait("ncclCommSplit", what);
    if (sub == nullptr) fail(std::string(what) + ": ncclCommSplit completed without a communicator");
    return std::unique_ptr<Communicator>(new Nccl(sub, device_, timeout_, what));
#else
    (void)key;
    throw UnsupportedError("[comm] " + describe() + ": " + std::string(what) + ": sub-groups need NCCL 2.18.1 or "
                           "newer (ncclCommSplit); this is NCCL " + std::to_string(NCCL_VERSION_CODE));
#endif
  }

 private:
  /// A sub-communicator ncclCommSplit is making: waits (up to the timeout) until it is ready.
  Nccl(ncclComm_t sub, int device, std::chrono::milliseconds timeout, std::string_view what)
      : timeout_(timeout), device_(device), comm_(sub) {
    try {
      cuda_call(cudaSetDevice(device_), "cudaSetDevice", what);
      cuda_call(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", what);
      wait("ncclCommSplit", what);
      call(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", what);
      call(ncclCommCount(comm_, &size_), "ncclCommCount", what);
    } catch (...) {  // no destructor runs for a constructor that throws (fail() has aborted the communicator)
      if (comm_ != nullptr) (void)ncclCommAbort(comm_);
      if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
      throw;
    }
  }

  void init(const Id& id) {
    MAXTEXT_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, ArgumentError, "[comm] NCCL: rank ", rank_, " of ", size_);
    const int devices = cuda::device_count();
    MAXTEXT_CHECK(device_ >= 0 && device_ < devices, DeviceError, "[comm] NCCL rank ", rank_, ": CUDA device ", device_,
                  " requested, ", devices, " usable CUDA device(s) found");
    cuda_call(cudaSetDevice(device_), "cudaSetDevice", "startup");
    cuda_call(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", "startup");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; wait() polls with the deadline
    call(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig", "startup");
    wait("join", "startup");
  }

  /// Every operation: the right device for this thread, and a communicator that has not failed before.
  void begin(const char* op, std::string_view what) {
    MAXTEXT_CHECK(!failed_, CommError, "[comm] ", describe(), ": ", what, ": ", op,
                  " on a communicator that failed earlier (the job must end)");
    cuda_call(cudaSetDevice(device_), "cudaSetDevice", what);
  }

  static bool on_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }

  /// A device buffer of at least `bytes` for host data (grown, never shrunk).
  void* stage(std::size_t bytes, std::string_view what) {
    if (bytes > staging_bytes_) {
      cuda_call(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", what);
      if (staging_ != nullptr) cuda_call(cudaFree(staging_), "cudaFree", what);
      staging_ = nullptr;
      staging_bytes_ = 0;
      cuda_call(cudaMalloc(&staging_, bytes), "cudaMalloc (staging for host data)", what);
      staging_bytes_ = bytes;
    }
    return staging_;
  }

  void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, std::string_view what) {
    cuda_call(cudaMemcpyAsync(dst, src, bytes, kind, stream_), "cudaMemcpyAsync", what);
  }

  void check_peer(int r, const char* op, std::string_view what, bool p2p) {
    MAXTEXT_CHECK(r >= 0 && r < size_ && !(p2p && r == rank_), CommError, "[comm] ", describe(), ": ", what, ": ", op,
                  " with rank ", r, p2p && r == rank_ ? " (itself)" : "", " of ", size_);
  }

  [[noreturn]] void fail(const std::string& msg) {
    if (comm_ != nullptr && !failed_) (void)ncclCommAbort(comm_);  // releases the kernels waiting for the others
    comm_ = nullptr;
    failed_ = true;
    throw CommError("[comm] " + describe() + ": " + msg);
  }
  void call(ncclResult_t r, const char* op, std::string_view what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
    fail(std::string(what) + ": " + op + " failed: " + ncclGetErrorString(r) +
         (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string()));
  }
  void cuda_call(cudaError_t e, const char* op, std::string_view what) {
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();
    fail(std::string(what) + ": " + op + " failed: " + cudaGetErrorString(e));
  }

  /// Poll NCCL's state and the stream until the operation completes; past the deadline, fail naming it. Yields
  /// between polls: ranks may share cores.
  void wait(const char* op, std::string_view what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      ncclResult_t st = ncclSuccess;
      call(ncclCommGetAsyncError(comm_, &st), "ncclCommGetAsyncError", what);
      if (st != ncclSuccess && st != ncclInProgress) call(st, op, what);
      if (st == ncclSuccess) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) cuda_call(e, op, what);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        fail(std::string(what) + ": " + op + " did not complete in " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
             " s (another rank died, stalled or is at another step)");
      }
      std::this_thread::yield();
    }
  }

  std::chrono::milliseconds timeout_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;
  std::size_t staging_bytes_ = 0;
  bool failed_ = false;
};

}  // namespace maxtext::comm
