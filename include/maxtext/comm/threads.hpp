// comm/threads.hpp: a communicator whose ranks are threads of one process (comm/communicator.hpp). It runs a split
// model without MPI: the tests check tensor parallelism with it under CTest and ThreadSanitizer, and a program can
// use it to try a layout before it launches processes. Sums are taken in rank order, so every rank gets the same
// bits; a rank that does not arrive within the timeout, or one that fails (abort()), ends the collective on every
// rank with a CommError naming the collective and the ranks that are missing.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/core/error.hpp"

namespace maxtext::comm {

class ThreadGroup {
 public:
  /// `n` ranks; a collective that waits longer than `timeout` for the others fails on every rank.
  explicit ThreadGroup(int n, std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : n_(n), timeout_(timeout), posted_(static_cast<std::size_t>(n)), here_(static_cast<std::size_t>(n), 0) {
    MAXTEXT_CHECK(n >= 1 && n <= 4096, ArgumentError, "[comm] ThreadGroup: expected 1 to 4096 ranks, found ", n);
    for (int r = 0; r < n; ++r) members_.push_back(std::unique_ptr<Member>(new Member(*this, r)));
  }
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return n_; }
  /// The communicator of rank r (use it from one thread at a time).
  Communicator& rank(int r) {
    MAXTEXT_CHECK(r >= 0 && r < n_, ArgumentError, "[comm] ThreadGroup: rank ", r, " outside [0, ", n_, ")");
    return *members_[static_cast<std::size_t>(r)];
  }
  /// End every pending and later collective with a CommError carrying `why` (a rank that failed calls this, so
  /// that the others do not wait for it until the timeout).
  void abort(const std::string& why) {
    std::vector<std::shared_ptr<ThreadGroup>> children;
    {
      std::lock_guard<std::mutex> lk(m_);
      if (aborted_.empty()) aborted_ = why.empty() ? std::string("aborted") : why;
      cv_.notify_all();
      for (const auto& [k, c] : children_) children.push_back(c);
    }
    for (const auto& c : children) c->abort(why);  // and every sub-group's (split)
  }

 private:
  struct Posted {
    const void* ptr = nullptr;
    std::size_t bytes = 0;
  };

  class Member final : public Communicator {
   public:
    Member(ThreadGroup& g, int r) : g_(g), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return g_.n_; }
    void all_reduce_sum(float* data, std::size_t n, std::string_view what) override {
      g_.post(r_, data, n * sizeof(float), what, "all_reduce_sum");
      // Every rank sums the same operands in rank order into its own buffer, then all wait until everyone has read.
      tmp_.assign(n, 0.0f);
      for (int s = 0; s < g_.n_; ++s) {
        const auto* src = static_cast<const float*>(g_.posted_[static_cast<std::size_t>(s)].ptr);
        for (std::size_t i = 0; i < n; ++i) tmp_[i] += src[i];
      }
      g_.barrier(r_, what, "all_reduce_sum");
      if (n) std::memcpy(data, tmp_.data(), n * sizeof(float));
    }
    void all_gather(const void* local, std::size_t bytes, void* all, std::string_view what) override {
      g_.post(r_, local, bytes, what, "all_gather");
      for (int s = 0; s < g_.n_; ++s) {
        if (bytes) std::memcpy(static_cast<char*>(all) + static_cast<std::size_t>(s) * bytes,
                               g_.posted_[static_cast<std::size_t>(s)].ptr, bytes);
      }
      g_.barrier(r_, what, "all_gather");
    }
    void broadcast(void* data, std::size_t bytes, int root, std::string_view what) override {
      MAXTEXT_CHECK(root >= 0 && root < g_.n_, CommError, "[comm] ", what, ": broadcast from rank ", root,
                    " of a group of ", g_.n_);
      g_.post(r_, data, bytes, what, "broadcast");
      if (r_ != root && bytes) std::memcpy(data, g_.posted_[static_cast<std::size_t>(root)].ptr, bytes);
      g_.barrier(r_, what, "broadcast");
    }
    void send(const void* data, std::size_t bytes, int to, std::string_view what) override {
      g_.send(r_, to, data, bytes, what);
    }
    void recv(void* data, std::size_t bytes, int from, std::string_view what) override {
      g_.recv(r_, from, data, bytes, what);
    }
    void barrier(std::string_view what) override { g_.barrier(r_, what, "barrier"); }
    /// The ranks' colors and keys gathered; those of this rank's color join one new ThreadGroup (made by the first
    /// of them to ask, kept by this group), ranked by key, then by rank.
    std::unique_ptr<Communicator> split(int color, int key, std::string_view what) override {
      check_color(color, what);
      const std::int64_t mine[2] = {color, key};
      std::vector<std::int64_t> all(2 * static_cast<std::size_t>(g_.n_));
      all_gather(mine, sizeof mine, all.data(), what);
      std::vector<std::pair<std::int64_t, int>> members;  // (key, rank) of this color
      for (int s = 0; s < g_.n_; ++s) {
        if (all[2 * static_cast<std::size_t>(s)] == color) members.emplace_back(all[2 * static_cast<std::size_t>(s) + 1], s);
      }
      std::sort(members.begin(), members.end());
      int sub = 0;
      while (members[static_cast<std::size_t>(sub)].second != r_) ++sub;
      auto child = g_.child(splits_++, color, static_cast<int>(members.size()));
      return std::make_unique<SubGroup>(std::move(child), sub);
    }
    std::string describe() const override {
      return "threads, rank " + std::to_string(r_) + " of " + std::to_string(g_.n_);
    }

   private:
    ThreadGroup& g_;
    int r_;
    std::uint64_t splits_ = 0;  ///< splits this rank made: every rank makes the same ones, in the same order
    std::vector<float> tmp_;
  };

  /// A rank of a sub-group (split): its ThreadGroup kept alive while the rank is.
  class SubGroup final : public Communicator {
   public:
    SubGroup(std::shared_ptr<ThreadGroup> g, int r) : g_(std::move(g)), c_(g_->rank(r)) {}
    int rank() const override { return c_.rank(); }
    int size() const override { return c_.size(); }
    void all_reduce_sum(float* d, std::size_t n, std::string_view w) override { c_.all_reduce_sum(d, n, w); }
    void all_gather(const void* l, std::size_t b, void* a, std::string_view w) override { c_.all_gather(l, b, a, w); }
    void broadcast(void* d, std::size_t b, int root, std::string_view w) override { c_.broadcast(d, b, root, w); }
    void send(const void* d, std::size_t b, int to, std::string_view w) override { c_.send(d, b, to, w); }
    void recv(void* d, std::size_t b, int from, std::string_view w) override { c_.recv(d, b, from, w); }
    void barrier(std::string_view w) override { c_.barrier(w); }
    std::unique_ptr<Communicator> split(int color, int key, std::string_view w) override { return c_.split(color, key, w); }
    std::string describe() const override { return c_.describe() + " (a sub-group)"; }

   private:
    std::shared_ptr<ThreadGroup> g_;
    Communicator& c_;
  };

  /// The sub-group of split number `seq`'s color `color` (`n` ranks), made by the first of its ranks to ask; a group
  /// aborted before inherits the reason.
  std::shared_ptr<ThreadGroup> child(std::uint64_t seq, int color, int n) {
    std::lock_guard<std::mutex> lk(m_);
    auto& c = children_[{seq, color}];
    if (!c) {
      c = std::make_shared<ThreadGroup>(n, timeout_);
      if (!aborted_.empty()) c->aborted_ = aborted_;
    }
    return c;
  }

  [[noreturn]] void fail_locked(std::string msg) {
    if (aborted_.empty()) aborted_ = msg;
    cv_.notify_all();
    throw CommError(msg);
  }
  [[noreturn]] void throw_aborted(int r, std::string_view what, const char* op) const {
    throw CommError("[comm] rank " + std::to_string(r) + ": " + std::string(what) + ": " + op + " abandoned: " + aborted_);
  }

  /// Wait until all ranks arrive (generation barrier), or fail on timeout / abort.
  void wait_all(std::unique_lock<std::mutex>& lk, int r, std::string_view what, const char* op) {
    if (!aborted_.empty()) throw_aborted(r, what, op);
    here_[static_cast<std::size_t>(r)] = 1;
    const std::uint64_t gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      std::fill(here_.begin(), here_.end(), 0);
      ++gen_;
      cv_.notify_all();
      return;
    }
    const bool done = cv_.wait_for(lk, timeout_, [&] { return gen_ != gen || !aborted_.empty(); });
    if (gen_ != gen) return;
    if (!aborted_.empty()) throw_aborted(r, what, op);
    (void)done;
    std::string missing;
    for (int s = 0; s < n_; ++s) {
      if (!here_[static_cast<std::size_t>(s)]) missing += (missing.empty() ? "" : ", ") + std::to_string(s);
    }
    fail_locked("[comm] rank " + std::to_string(r) + ": " + std::string(what) + ": " + op + " did not complete in " +
                std::to_string(timeout_.count()) + " ms: rank(s) " + missing + " did not arrive (stalled or dead)");
  }

  void post(int r, const void* ptr, std::size_t bytes, std::string_view what, const char* op) {
    std::unique_lock<std::mutex> lk(m_);
    posted_[static_cast<std::size_t>(r)] = {ptr, bytes};
    wait_all(lk, r, what, op);
    for (int s = 0; s < n_; ++s) {
      const std::size_t b = posted_[static_cast<std::size_t>(s)].bytes;
      if (b != bytes) {
        fail_locked("[comm] " + std::string(what) + ": " + op + ": rank " + std::to_string(r) + " gave " +
                    std::to_string(bytes) + " bytes, rank " + std::to_string(s) + " gave " + std::to_string(b));
      }
    }
  }
  void barrier(int r, std::string_view what, const char* op) {
    std::unique_lock<std::mutex> lk(m_);
    wait_all(lk, r, what, op);
  }

  void send(int from, int to, const void* data, std::size_t bytes, std::string_view what) {
    MAXTEXT_CHECK(to >= 0 && to < n_ && to != from, CommError, "[comm] ", what, ": send from rank ", from, " to rank ",
                  to, " of a group of ", n_);
    std::lock_guard<std::mutex> lk(m_);
    if (!aborted_.empty()) throw_aborted(from, what, "send");
    const auto* p = static_cast<const char*>(data);
    mail_[{from, to}].emplace_back(p, p + bytes);
    cv_.notify_all();
  }
  void recv(int to, int from, void* data, std::size_t bytes, std::string_view what) {
    MAXTEXT_CHECK(from >= 0 && from < n_ && from != to, CommError, "[comm] ", what, ": recv on rank ", to,
                  " from rank ", from, " of a group of ", n_);
    std::unique_lock<std::mutex> lk(m_);
    auto& box = mail_[{from, to}];
    const bool ok = cv_.wait_for(lk, timeout_, [&] { return !box.empty() || !aborted_.empty(); });
    if (!aborted_.empty()) throw_aborted(to, what, "recv");
    if (!ok) {
      fail_locked("[comm] rank " + std::to_string(to) + ": " + std::string(what) + ": recv from rank " +
                  std::to_string(from) + " did not complete in " + std::to_string(timeout_.count()) + " ms");
    }
    std::vector<char> msg = std::move(box.front());
    box.pop_front();
    if (msg.size() != bytes) {
      fail_locked("[comm] " + std::string(what) + ": rank " + std::to_string(to) + " expected " + std::to_string(bytes) +
                  " bytes from rank " + std::to_string(from) + ", which sent " + std::to_string(msg.size()));
    }
    if (bytes) std::memcpy(data, msg.data(), bytes);
  }

  const int n_;
  const std::chrono::milliseconds timeout_;
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t gen_ = 0;
  std::string aborted_;
  std::vector<Posted> posted_;
  std::vector<char> here_;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> mail_;
  std::vector<std::unique_ptr<Member>> members_;
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<ThreadGroup>> children_;  ///< sub-groups (split)
};

}  // namespace maxtext::comm
