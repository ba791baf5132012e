// comm/communicator.hpp: the collectives a model split across ranks needs (issue 50; docs/distributed.md), beside the
// Backend concept. A rank is one process (MPI, comm/mpi.hpp) or one thread of a group (ThreadGroup, comm/threads.hpp);
// the layers see only this interface, so a program that never splits a model pays nothing (no communicator: the
// forward pass is the single-process one, byte for byte).
//
// Every operation works on host memory and takes `what`, the layer and the collective it serves
// ("decoder.layers_3.mlp: all_reduce"), which a fault message names. Results are identical on every rank: a sum is
// taken in rank order wherever the implementation controls the order (ThreadGroup), and the model takes rank 0's
// logits (broadcast) before any sampling, so that all ranks choose the same token whatever the reduction tree.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"

namespace maxtext {

/// A collective that failed: a rank died or stalled past the timeout, or the ranks disagree (files, configs).
class CommError : public Error {
 public:
  using Error::Error;
};

namespace comm {

class Communicator;

/// The collectives, as a concept (any type with these members can stand in) and as the virtual interface below that
/// models hold (one virtual call per collective, two per decoder layer and step: nothing beside the data moved).
template <class C>
concept Collectives = requires(C& c, float* f, const void* cp, void* p, std::size_t n, int r, std::string_view w) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_reduce_sum(f, n, w);
  c.all_gather(cp, n, p, w);
  c.broadcast(p, n, r, w);
  c.send(cp, n, r, w);
  c.recv(p, n, r, w);
  c.barrier(w);
  { c.split(r, r, w) } -> std::convertible_to<std::unique_ptr<Communicator>>;
};

/// A split's color, which MPI wants non-negative (MPI_UNDEFINED, a rank in no sub-group, is not used here).
inline void check_color(int color, std::string_view what) {
  MAXTEXT_CHECK(color >= 0, CommError, "[comm] ", what, ": split with color ", color, " (expected >= 0)");
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// data[0, n) summed element-wise over all ranks, in place; every rank ends with the same values.
  virtual void all_reduce_sum(float* data, std::size_t n, std::string_view what) = 0;
  /// Each rank gives `bytes` bytes at `local`; `all` receives size() * bytes, rank 0's first.
  virtual void all_gather(const void* local, std::size_t bytes, void* all, std::string_view what) = 0;
  /// `bytes` bytes of rank `root` copied to every rank's `data`.
  virtual void broadcast(void* data, std::size_t bytes, int root, std::string_view what) = 0;
  /// Point to point (pipeline stages): `bytes` bytes to rank `to`, or from rank `from`.
  virtual void send(const void* data, std::size_t bytes, int to, std::string_view what) = 0;
  virtual void recv(void* data, std::size_t bytes, int from, std::string_view what) = 0;
  virtual void barrier(std::string_view what) = 0;
  /// The ranks of this group that give the same `color` (>= 0), as a group of their own, ranked by `key` (ties in
  /// this group's order), as MPI_Comm_split makes them: the sub-groups of a mesh of two layouts (the tensor ranks of
  /// one pipeline stage; the stages of one tensor coordinate). A collective: every rank of this group calls it, and
  /// the new group must not outlive this one.
  virtual std::unique_ptr<Communicator> split(int color, int key, std::string_view what) = 0;
  /// Short description for messages ("MPI, rank 1 of 4", "threads, rank 0 of 2").
  virtual std::string describe() const = 0;
  /// Whether the collectives also take pointers to device memory (NCCL, comm/nccl.cuh): a layer on a GPU then hands
  /// its rows over as they lie instead of copying them through the host (layers::Context::all_reduce). Host pointers
  /// are taken by every communicator.
  virtual bool device_memory() const { return false; }
};

static_assert(Collectives<Communicator>);

/// The groups a split model's collectives run over (models::Transformer::set_comm_groups): `world`, every rank (rank
/// 0's logits broadcast to all, the replica check); `tensor`, the ranks that split heads and MLP columns (row-parallel
/// products); `expert`, the ranks that split the experts (MoE outputs); `pipeline`, the stages that split the layers
/// (rank s of it is stage s: the residual stream sent from stage to stage, the logits broadcast from the last).
/// `stage`, the ranks of one pipeline stage, which hold its residual stream replicated (the replica check; the
/// whole world when the layers are not split). nullptr: no such split. `owned`: sub-groups made for these
/// (Communicator::split), kept alive with the groups.
struct Groups {
  Communicator* world = nullptr;
  Communicator* tensor = nullptr;
  Communicator* expert = nullptr;
  Communicator* pipeline = nullptr;
  Communicator* stage = nullptr;
  std::vector<std::shared_ptr<Communicator>> owned{};
};

/// Each rank's row-major block [rows, w] at `local` gathered into `out` [rows, c.size() * w] on every rank, rank r's
/// block in columns [r * w, (r + 1) * w): a matrix split by columns made whole (a vocabulary-split head's logits, the
/// heads of a norm taken over all of them). One all_gather; a single row needs no reordering. `out` must not overlap
/// `local`.
template <class T>
void all_gather_columns(Communicator& c, const T* local, std::int64_t rows, std::int64_t w, T* out, std::string_view what) {
  const auto block = static_cast<std::size_t>(rows * w);
  if (rows == 1) {
    c.all_gather(local, block * sizeof(T), out, what);
    return;
  }
  const auto n = static_cast<std::int64_t>(c.size());
  std::vector<T> all(static_cast<std::size_t>(n) * block);
  c.all_gather(local, block * sizeof(T), all.data(), what);
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < rows; ++i) {
      std::memcpy(out + (i * n + r) * w, all.data() + (r * rows + i) * w, static_cast<std::size_t>(w) * sizeof(T));
    }
  }
}

/// How long one collective may wait for the others before it fails: `given` when positive, else MAXTEXT_COMM_TIMEOUT_S
/// (seconds) from the environment, else 600 s (the first step of a large model waits for every rank's weights).
inline std::chrono::milliseconds collective_timeout(std::chrono::milliseconds given = std::chrono::milliseconds(0)) {
  if (given.count() > 0) return given;
  const char* e = std::getenv("MAXTEXT_COMM_TIMEOUT_S");
  const long s = e ? std::strtol(e, nullptr, 10) : 0;
  return std::chrono::seconds(s > 0 ? s : 600);
}

/// How many ranks an MPI launcher (mpirun / mpiexec / srun) started this process among, from its environment: 1 when
/// none did. Programs use it to decide whether to join MPI at all, without an MPI library at hand.
inline int launched_ranks() {
  for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(k)) {
      const long n = std::strtol(v, nullptr, 10);
      if (n >= 1 && n <= (1 << 20)) return static_cast<int>(n);
    }
  }
  return 1;
}

/// The size-1 communicator: every collective is the identity. A model given none behaves as if given this one.
class Local final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, std::size_t, std::string_view) override {}
  void all_gather(const void* local, std::size_t bytes, void* all, std::string_view) override {
    if (bytes > 0 && local != all) std::memmove(all, local, bytes);
  }
  void broadcast(void*, std::size_t, int root, std::string_view what) override { check_peer(root, what); }
  void send(const void*, std::size_t, int to, std::string_view what) override { check_peer(to, what, true); }
  void recv(void*, std::size_t, int from, std::string_view what) override { check_peer(from, what, true); }
  void barrier(std::string_view) override {}
  std::unique_ptr<Communicator> split(int color, int, std::string_view what) override {
    check_color(color, what);
    return std::make_unique<Local>();
  }
  std::string describe() const override { return "one process"; }

 private:
  static void check_peer(int r, std::string_view what, bool p2p = false) {
    MAXTEXT_CHECK(r == 0 && !p2p, CommError, "[comm] ", what, ": rank ", r, " does not exist in a group of 1");
  }
};

/// Counts the collectives a forward pass issues, the bytes each moves and the time spent in them, then passes them on:
/// the proof of "two all-reduces per layer" (tests/comm), and the byte counts and the share of time in collectives
/// that bench/distributed.sh reports (`maxtext` with MAXTEXT_COMM_STATS=1).
class Counting final : public Communicator {
 public:
  struct Tally {
    std::int64_t calls = 0;
    std::int64_t bytes = 0;  ///< payload given by this rank (all_reduce: n * 4; all_gather: its share)
    double seconds = 0.0;    ///< wall time inside the collective (waiting for the others included)
  };
  explicit Counting(Communicator& inner) : inner_(inner), tallies_(std::make_shared<Tallies>()) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce_sum(float* data, std::size_t n, std::string_view what) override {
    Timer t(add("all_reduce", n * sizeof(float)));
    inner_.all_reduce_sum(data, n, what);
  }
  void all_gather(const void* local, std::size_t bytes, void* all, std::string_view what) override {
    Timer t(add("all_gather", bytes));
    inner_.all_gather(local, bytes, all, what);
  }
  void broadcast(void* data, std::size_t bytes, int root, std::string_view what) override {
    Timer t(add("broadcast", bytes));
    inner_.broadcast(data, bytes, root, what);
  }
  void send(const void* data, std::size_t bytes, int to, std::string_view what) override {
    Timer t(add("send", bytes));
    inner_.send(data, bytes, to, what);
  }
  void recv(void* data, std::size_t bytes, int from, std::string_view what) override {
    Timer t(add("recv", bytes));
    inner_.recv(data, bytes, from, what);
  }
  void barrier(std::string_view what) override {
    Timer t(add("barrier", 0));
    inner_.barrier(what);
  }
  /// The sub-group counted into the same tallies as this group (a step's collectives over every group, summed).
  std::unique_ptr<Communicator> split(int color, int key, std::string_view what) override {
    auto sub = inner_.split(color, key, what);
    Communicator& ref = *sub;
    return std::unique_ptr<Communicator>(new Counting(ref, std::move(sub), tallies_));
  }
  std::string describe() const override { return inner_.describe() + " (counted)"; }
  bool device_memory() const override { return inner_.device_memory(); }

  /// Per operation ("all_reduce", "all_gather", "broadcast", "send", "recv", "barrier"): this group's and its
  /// sub-groups' (split) together.
  const std::map<std::string, Tally, std::less<>>& tallies() const { return *tallies_; }
  Tally tally(std::string_view op) const {
    auto it = tallies_->find(op);
    return it == tallies_->end() ? Tally{} : it->second;
  }
  void clear() { tallies_->clear(); }

 private:
  struct Timer {
    explicit Timer(Tally& t) : t_(t), start_(std::chrono::steady_clock::now()) {}
    ~Timer() { t_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    Tally& t_;
    std::chrono::steady_clock::time_point start_;
  };
  using Tallies = std::map<std::string, Tally, std::less<>>;
  Counting(Communicator& inner, std::unique_ptr<Communicator> owned, std::shared_ptr<Tallies> tallies)
      : inner_(inner), owned_(std::move(owned)), tallies_(std::move(tallies)) {}
  Tally& add(const char* op, std::size_t bytes) {
    Tally& t = (*tallies_)[op];
    ++t.calls;
    t.bytes += static_cast<std::int64_t>(bytes);
    return t;
  }
  Communicator& inner_;
  std::unique_ptr<Communicator> owned_;  ///< a sub-group's inner communicator (split)
  std::shared_ptr<Tallies> tallies_;
};

}  // namespace comm
}  // namespace maxtext
