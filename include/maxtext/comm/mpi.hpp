// comm/mpi.hpp: the communicator over MPI (comm/communicator.hpp), written against the plain MPI-3 C API so that Open
// MPI (Debian's libopenmpi-dev) and MPICH both serve. Include it only where <mpi.h> is on the include path (the
// `maxtext` program built with MAXTEXT_MPI; CMake's find_package(MPI)); the rest of the library does not need it.
//
// Each collective is started non-blocking and waited for with a deadline: one that does not complete in time (a
// rank died, stalled, or runs another step) throws a CommError that names the layer, the collective and the rank;
// the program then ends the whole job (Mpi::abort_job, which the `maxtext` program calls on any error while split).
// Errors MPI itself reports (a peer's process gone) come back as codes (MPI_ERRORS_RETURN) and are thrown the same way.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/core/error.hpp"

namespace maxtext::comm {

class Mpi final : public Communicator {
 public:
  /// Joins MPI_COMM_WORLD (initialising MPI if the program has not: MPI_THREAD_FUNNELED, the model's worker threads
  /// never call MPI). `timeout`: how long one collective may take; 0 takes MAXTEXT_COMM_TIMEOUT_S (seconds) from the
  /// environment, else 600 s (collective_timeout).
  explicit Mpi(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) : timeout_(timeout) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", "startup");
      owns_ = true;
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup", "startup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    timeout_ = collective_timeout(timeout_);
  }
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;
  ~Mpi() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;      // a sub-group outliving MPI (a model kept past exit): nothing to free or abort
    if (failed_) abort_job(3);  // a rank that gave up must not leave the others waiting in a collective
    MPI_Comm_free(&comm_);
    if (owns_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return "MPI, " + who(); }
  /// End every rank of the job now (MPI_Abort): after an error on one rank the others would wait in a collective.
  void abort_job(int code) const { MPI_Abort(MPI_COMM_WORLD, code); }

  void all_reduce_sum(float* data, std::size_t n, std::string_view what) override {
    for (std::size_t off = 0; off < n; off += kChunk) {
      const int c = static_cast<int>(std::min(kChunk, n - off));
      MPI_Request req;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + off, c, MPI_FLOAT, MPI_SUM, comm_, &req), "all_reduce_sum", what);
      wait(req, "all_reduce_sum", what);
    }
  }
  void all_gather(const void* local, std::size_t bytes, void* all, std::string_view what) override {
    if (bytes > static_cast<std::size_t>(INT_MAX)) {
      fail(std::string(what) + ": all_gather of " + std::to_string(bytes) + " bytes per rank exceeds MPI's count");
    }
    MPI_Request req;
    check(MPI_Iallgather(local, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm_, &req),
          "all_gather", what);
    wait(req, "all_gather", what);
  }
  void broadcast(void* data, std::size_t bytes, int root, std::string_view what) override {
    check_peer(root, "broadcast", what);
    for (std::size_t off = 0; off < bytes || off == 0; off += kChunk) {
      const int c = static_cast<int>(std::min(kChunk, bytes - off));
      MPI_Request req;
      check(MPI_Ibcast(static_cast<char*>(data) + off, c, MPI_BYTE, root, comm_, &req), "broadcast", what);
      wait(req, "broadcast", what);
      if (bytes == 0) break;
    }
  }
  void send(const void* data, std::size_t bytes, int to, std::string_view what) override {
    check_peer(to, "send", what);
    for (std::size_t off = 0; off < bytes || off == 0; off += kChunk) {
      const int c = static_cast<int>(std::min(kChunk, bytes - off));
      MPI_Request req;
      check(MPI_Isend(static_cast<const char*>(data) + off, c, MPI_BYTE, to, kTag, comm_, &req), "send", what);
      wait(req, "send", what);
      if (bytes == 0) break;
    }
  }
  void recv(void* data, std::size_t bytes, int from, std::string_view what) override {
    check_peer(from, "recv", what);
    for (std::size_t off = 0; off < bytes || off == 0; off += kChunk) {
      const int c = static_cast<int>(std::min(kChunk, bytes - off));
      MPI_Request req;
      check(MPI_Irecv(static_cast<char*>(data) + off, c, MPI_BYTE, from, kTag, comm_, &req), "recv", what);
      wait(req, "recv", what);
      if (bytes == 0) break;
    }
  }
  void barrier(std::string_view what) override {
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), "barrier", what);
    wait(req, "barrier", what);
  }
  /// MPI_Comm_split: a sub-communicator with this one's timeout. Blocking (MPI-3 has no non-blocking split); the
  /// models call it after the ranks' fingerprints agree, so every rank is there.
  std::unique_ptr<Communicator> split(int color, int key, std::string_view what) override {
    check_color(color, what);
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split", what);
    return std::unique_ptr<Communicator>(new Mpi(sub, timeout_));
  }

 private:
  Mpi(MPI_Comm sub, std::chrono::milliseconds timeout) : timeout_(timeout), comm_(sub) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  }
  /// "rank 1 of 4", and a sub-group's rank in the job ("rank 1 of 2 (job rank 3)").
  std::string who() const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
           (world_rank_ >= 0 ? " (job rank " + std::to_string(world_rank_) + ")" : std::string());
  }

  static constexpr std::size_t kChunk = std::size_t{1} << 30;
  static constexpr int kTag = 50;

  [[noreturn]] void fail(const std::string& msg) {
    failed_ = true;
    throw CommError("[comm] " + who() + ": " + msg);
  }
  void check(int rc, const char* op, std::string_view what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail(std::string(what) + ": " + op + " failed: " + std::string(text, static_cast<std::size_t>(len)));
  }
  void check_peer(int r, const char* op, std::string_view what) {
    if (r < 0 || r >= size_) fail(std::string(what) + ": " + op + " with rank " + std::to_string(r) + " of " + std::to_string(size_));
  }
  /// Poll the request until it completes; past the deadline, fail naming the collective. Yields between polls: ranks
  /// may share cores (mpirun --oversubscribe), and a spinning rank would starve the one it waits for.
  void wait(MPI_Request& req, const char* op, std::string_view what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    int done = 0;
    for (std::int64_t polls = 0;; ++polls) {
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), op, what);
      if (done) return;
      if ((polls & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
        fail(std::string(what) + ": " + op + " did not complete in " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
             " s (another rank died, stalled or is at another step)");
      }
      std::this_thread::yield();
    }
  }

  std::chrono::milliseconds timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = -1;  ///< a sub-group's rank in MPI_COMM_WORLD (split); -1 for the job's own communicator
  bool owns_ = false;
  bool failed_ = false;
};

}  // namespace maxtext::comm
