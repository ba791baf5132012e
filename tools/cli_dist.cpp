// tools/cli_dist.cpp: the `maxtext` program among the ranks an MPI launcher started (docs/distributed.md). Compiled
// where CMake finds MPI (MAXTEXT_MPI); maxtext.cpp holds the refusing versions for a program without it.
//
// Every rank runs the same command with the same arguments and reads the same files; each holds its share of the
// model (tools/cli_models.cpp open_model, models/parallel.hpp). Rank 0 writes the outputs: the others' stdout
// goes to /dev/null and their stderr carries only an error, named by rank. An error on any rank ends the whole job
// (MPI_Abort), since the others would wait for it in the next collective.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include "cli_args.hpp"
#include "maxtext/comm/mpi.hpp"

namespace maxtext::cli {

namespace {
std::unique_ptr<comm::Mpi> g_mpi;
std::unique_ptr<comm::Communicator> g_fault;
std::unique_ptr<comm::Counting> g_stats;  // MAXTEXT_COMM_STATS=1: collectives counted and timed, printed at the end
std::chrono::steady_clock::time_point g_start;
int g_err_fd = 2;  // a silenced rank's own stderr, kept for its error message

/// MAXTEXT_COMM_FAULT=kill:R:K or stall:R:K (tests/comm/mpi_cli.sh): rank R dies (SIGKILL) or stops answering at its
/// K-th collective, so that the tests see what the other ranks do about it. Unset: not in the path at all.
class FaultInjection final : public comm::Communicator {
 public:
  FaultInjection(comm::Communicator& inner, bool kill, int at)
      : inner_(inner), kill_(kill), at_(at), count_(std::make_shared<int>(0)) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string describe() const override { return inner_.describe(); }
  void all_reduce_sum(float* d, std::size_t n, std::string_view w) override {
    tick();
    inner_.all_reduce_sum(d, n, w);
  }
  void all_gather(const void* l, std::size_t b, void* a, std::string_view w) override {
    tick();
    inner_.all_gather(l, b, a, w);
  }
  void broadcast(void* d, std::size_t b, int r, std::string_view w) override {
    tick();
    inner_.broadcast(d, b, r, w);
  }
  void send(const void* d, std::size_t b, int t, std::string_view w) override {
    tick();
    inner_.send(d, b, t, w);
  }
  void recv(void* d, std::size_t b, int f, std::string_view w) override {
    tick();
    inner_.recv(d, b, f, w);
  }
  void barrier(std::string_view w) override {
    tick();
    inner_.barrier(w);
  }
  /// A sub-group's collectives count toward the same K (the split itself does not: MPI_Comm_split has no deadline,
  /// so a rank stalled there would hang the job instead of testing the timeout).
  std::unique_ptr<comm::Communicator> split(int color, int key, std::string_view w) override {
    auto sub = inner_.split(color, key, w);
    auto f = std::make_unique<FaultInjection>(*sub, kill_, at_);
    f->owned_ = std::move(sub);
    f->count_ = count_;
    return f;
  }

 private:
  void tick() {
    if (++*count_ != at_) return;
    if (kill_) std::raise(SIGKILL);
    for (;;) pause();  // stalled: alive, never arriving
  }
  comm::Communicator& inner_;
  bool kill_;
  int at_;
  std::shared_ptr<int> count_;                ///< collectives so far, over this group and its sub-groups
  std::unique_ptr<comm::Communicator> owned_;  ///< a sub-group's inner communicator
};

comm::Communicator* with_fault(comm::Mpi& mpi) {
  const char* f = std::getenv("MAXTEXT_COMM_FAULT");
  if (f == nullptr || *f == '\0') return &mpi;
  const std::string s(f);
  int r = -1, k = -1;
  const bool kill = s.rfind("kill:", 0) == 0, stall = s.rfind("stall:", 0) == 0;
  MAXTEXT_CHECK((kill || stall) && std::sscanf(s.c_str() + (kill ? 5 : 6), "%d:%d", &r, &k) == 2 && k >= 1,
                ArgumentError, "MAXTEXT_COMM_FAULT: expected kill:RANK:N or stall:RANK:N, found '", s, "'");
  if (r != mpi.rank()) return &mpi;
  g_fault = std::make_unique<FaultInjection>(mpi, kill, k);
  return g_fault.get();
}
}  // namespace

void join_world(const std::string& command) {
  const int n = comm::launched_ranks();
  if (n <= 1) return;
  MAXTEXT_CHECK(command == "generate" || command == "logits" || command == "chat", UnsupportedError, "maxtext ",
                command, " runs in one process; under mpirun (", n, " ranks) the commands that split a model are "
                "generate, logits and chat");
  g_mpi = std::make_unique<comm::Mpi>();
  comm::Communicator* c = with_fault(*g_mpi);
  if (const char* st = std::getenv("MAXTEXT_COMM_STATS"); st != nullptr && std::string(st) == "1") {
    g_stats = std::make_unique<comm::Counting>(*c);
    c = g_stats.get();
  }
  g_start = std::chrono::steady_clock::now();
  set_world(c);
  if (g_mpi->rank() != 0) {
    std::fflush(stdout);
    std::fflush(stderr);
    g_err_fd = dup(2);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
      close(null);
    }
  }
}

void fail_world(const std::string& message) {
  if (!g_mpi) {
    std::cerr << "maxtext: error: " << message << "\n";
    return;
  }
  const std::string line = "maxtext (rank " + std::to_string(g_mpi->rank()) + " of " + std::to_string(g_mpi->size()) +
                           "): error: " + message + "\n";
  std::fflush(stdout);
  if (write(g_err_fd, line.data(), line.size()) < 0) std::perror("maxtext");
  g_mpi->abort_job(1);  // does not return
}

void leave_world() {
  if (g_stats && g_mpi && g_mpi->rank() == 0) {
    const double run = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
    double in = 0.0;
    for (const auto& [op, t] : g_stats->tallies()) {
      std::fprintf(stderr, "collectives: %-10s %8lld calls %12.3f MB %9.3f s\n", op.c_str(),
                   static_cast<long long>(t.calls), static_cast<double>(t.bytes) / 1e6, t.seconds);
      in += t.seconds;
    }
    std::fprintf(stderr, "collectives: %.3f s of the run's %.3f s on rank 0 (%.1f%%; from joining the ranks, loading "
                 "included)\n", in, run, run > 0 ? 100.0 * in / run : 0.0);
  }
  set_world(nullptr);
  g_stats.reset();
  g_fault.reset();
  g_mpi.reset();
}

}  // namespace maxtext::cli
