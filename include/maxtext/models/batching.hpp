// models/batching.hpp: many conversations on one model, their decode steps batched into one forward pass.
//
//   models::BatchScheduler<Model> sched(model, /*slots=*/8, /*capacity=*/2048);
//   // on each conversation's own thread:
//   models::Session<models::BatchScheduler<Model>> chat(sched);   // takes a free slot of the shared cache
//   auto r = chat.generate(ids, opt);                              // as a Session over the model itself
//   sched.idle(chat_slot);                                         // optional: this conversation sends no more steps
//
// On a CPU a decode step reads every weight for one token, so a pass over eight conversations' next tokens costs
// little more than a pass over one (bench model b, f32, 2 threads: 12.4 ms for one row, 22.6 ms for eight, 70 ms for
// 32). The scheduler is the Model a Session takes (config / make_cache / forward): each Session gets one slot of a
// cache the scheduler holds for all of them (`slots` x `capacity` tokens, allocated once), and its forward passes
// are handed to the scheduler's thread, which runs them in rounds:
//   - a round starts when every conversation of the last round has sent its next step (or said idle()), or when the
//     oldest waiting step has waited BatchOptions::wait_ms (a conversation busy elsewhere, e.g. a slow client, does
//     not hold the others back for longer);
//   - the decode steps (one token, last_only, nothing else) of the round run as one pass over the slots that sent
//     them, up to BatchOptions::max_rows (8) rows a pass (ForwardOptions::first_slot: the slots in between, when a
//     few are idle, take a throw-away token that their length then forgets; a recurrent cache, whose states cannot
//     forget, and long idle runs split the pass);
//   - then the other passes, each alone over its slot: a prompt's prefill (whole, or BatchOptions::prefill_chunk
//     tokens of it per round, the rest in the next rounds), or anything else (pictures, positions, captures) whole;
//     one a round, or with prefill_chunk as many as its budget of tokens takes (short prompts arriving together are
//     all prefilled in one round); with BatchOptions::prefill_rows > 1, the prompts waiting in consecutive slots
//     share passes, their rows padded to the longest.
// Up to max_rows rows a pass, every row is computed as it would be alone: the kernels give each row a decode step's
// arithmetic (tests/models/test_batching.cpp checks that the tokens and log-probabilities of conversations run
// together equal those of each run alone, bit for bit, for every decoder block's fixture), so batching changes speed,
// never answers.
//
// The model's forward passes all run on the scheduler's thread (one set of per-thread kernel scratch and OpenMP
// team). Works over models::Transformer and over AnyModel (models::detail::AnyDraftModel); server::Engine uses it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

struct BatchOptions {
  /// The longest a round waits for the conversations of the last round to send their next step (milliseconds).
  double wait_ms = 20;
  /// Idle slots between two slots of a decode pass that are run with a throw-away token rather than splitting the
  /// pass in two (each such row costs about a seventh of a pass on the bench models; a second pass reads the weights
  /// again).
  std::int64_t max_gap = 4;
  /// The most rows of one decode pass (idle rows included); a round with more decode steps runs several passes.
  /// Eight is where the CPU kernels still give each row a decode step's own arithmetic (backend/cpu/gemm.hpp,
  /// kGgmlRowsDirect / kFloatRowsDirect): up to it a batched row is bit for bit the row alone. Above it the rows take
  /// the packed-panel products, whose sums are grouped otherwise (bench model b: logits within 4e-6 of the row alone),
  /// for about 30% more tokens per second at 32 rows.
  std::int64_t max_rows = 8;
  /// The most tokens of a prompt one round prefills (0: the whole prompt in one pass, the default). With chunks a long
  /// prompt delays the others' steps by one chunk's pass, not by the whole prompt; its logits are then those of a
  /// prefill in parts (the same for the same prompt and chunking, within rounding of a prefill in one pass).
  std::int64_t prefill_chunk = 0;
  /// Prefix sharing: a prompt whose first tokens another slot holds (the same system prompt, a conversation that
  /// continues in another slot) takes those tokens' cache rows from it rather than running them (the pages
  /// themselves in a paged cache, a copy of the rows otherwise), when at least this many tokens are saved; 0: never.
  /// Its logits are then those of the other slot's prefill (within rounding of a prefill of its own, as for chunks).
  std::int64_t share_min = 16;
  /// The most prompts one pass prefills together. Prompts that wait in the same round (whole, only tokens, in
  /// consecutive slots) run as one pass whose rows are padded to the longest (ForwardOptions::row_lengths), up to
  /// max(prefill_chunk, 512) tokens of rows x longest; each row's logits are then those of its own prefill within f32
  /// rounding (the row count decides the kernels' products, as for max_rows above 8). 1 (the default): each prompt
  /// alone, its logits those of a prefill of its own to the bit. A recurrent cache's prompts always run alone.
  std::int64_t prefill_rows = 1;
};

/// What the scheduler did (for tests, /health and benchmarks).
struct BatchStats {
  std::int64_t rounds = 0;        ///< rounds run
  std::int64_t decode_passes = 0;  ///< forward passes over decode steps
  std::int64_t decode_steps = 0;   ///< decode steps they ran (one token of one conversation each)
  std::int64_t gap_rows = 0;       ///< throw-away rows of idle slots inside decode passes
  std::int64_t other_passes = 0;   ///< passes run alone (prefills or their chunks, and the rest)
  std::int64_t max_rows = 0;       ///< the most decode steps one pass ran
  std::int64_t shares = 0;         ///< prompts that took their first tokens' rows from another slot
  std::int64_t shared_tokens = 0;  ///< tokens those prompts did not run
  std::int64_t prefill_batches = 0;  ///< passes that prefilled several prompts together (BatchOptions::prefill_rows)
  std::int64_t batched_prompts = 0;  ///< prompts those passes prefilled
};

template <class Model>
class BatchScheduler {
 public:
  using SharedCache = std::decay_t<decltype(std::declval<const Model&>().make_cache(1, 1))>;

  /// One slot of the shared cache: what make_cache gives a Session. Move-only; gives its slot back when destroyed.
  class Cache {
   public:
    Cache(Cache&& o) noexcept : s_(std::exchange(o.s_, nullptr)), slot_(o.slot_), capacity_(o.capacity_) {}
    Cache& operator=(Cache&& o) noexcept {
      if (this != &o) {
        if (s_) s_->release(slot_);
        s_ = std::exchange(o.s_, nullptr);
        slot_ = o.slot_;
        capacity_ = o.capacity_;
      }
      return *this;
    }
    Cache(const Cache&) = delete;
    Cache& operator=(const Cache&) = delete;
    ~Cache() {
      if (s_) s_->release(slot_);
    }
    std::int32_t length(std::int64_t b) const {
      check_row(b);
      std::lock_guard<std::mutex> lock(s_->cache_mu_);
      return s_->cache_.length(slot_);
    }
    void set_length(std::int64_t b, std::int32_t n) {
      check_row(b);
      MAXTEXT_CHECK(n >= 0 && n <= capacity_, ArgumentError, "[batching] length ", n, " outside [0, ", capacity_, "]");
      std::lock_guard<std::mutex> lock(s_->cache_mu_);
      s_->cache_.set_length(slot_, n);
      s_->forget(slot_, n);
    }
    std::int64_t capacity() const { return capacity_; }
    bool recurrent() const {
      std::lock_guard<std::mutex> lock(s_->cache_mu_);
      return s_->cache_.recurrent();
    }
    /// The slot of the shared cache this conversation holds.
    std::int64_t slot() const { return slot_; }

   private:
    friend class BatchScheduler;
    Cache(BatchScheduler* s, std::int64_t slot, std::int64_t capacity) : s_(s), slot_(slot), capacity_(capacity) {}
    void check_row(std::int64_t b) const {
      MAXTEXT_CHECK(b == 0, ArgumentError, "[batching] a conversation's cache has one row; row ", b, " asked for");
    }
    BatchScheduler* s_;
    std::int64_t slot_;
    std::int64_t capacity_;
  };

  /// `slots` conversations of up to `capacity` tokens (0: the config's max_target_length) over `model`, which must
  /// outlive the scheduler; the Sessions made over it must not.
  BatchScheduler(Model& model, std::int64_t slots, std::int64_t capacity = 0, BatchOptions opt = {})
      : model_(model),
        opt_(opt),
        capacity_(capacity > 0 ? capacity : model.config().max_target_length),
        cache_(model.make_cache(slots, capacity_)),
        taken_(static_cast<std::size_t>(slots), false),
        expected_(static_cast<std::size_t>(slots), false),
        seen_(static_cast<std::size_t>(slots)),
        plain_(static_cast<std::size_t>(slots), true) {
    MAXTEXT_CHECK(slots >= 1, ArgumentError, "[batching] slots must be >= 1, found ", slots);
    MAXTEXT_CHECK(opt_.wait_ms >= 0 && opt_.max_gap >= 0 && opt_.prefill_chunk >= 0 && opt_.share_min >= 0,
                  ArgumentError, "[batching] wait_ms, max_gap, prefill_chunk and share_min must be >= 0");
    MAXTEXT_CHECK(opt_.max_rows >= 1, ArgumentError, "[batching] max_rows must be >= 1, found ", opt_.max_rows);
    MAXTEXT_CHECK(opt_.prefill_rows >= 1, ArgumentError, "[batching] prefill_rows must be >= 1, found ",
                  opt_.prefill_rows);
    thread_ = std::thread([this] { loop(); });
  }
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;
  ~BatchScheduler() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  const Config& config() const { return model_.config(); }
  std::int64_t slots() const { return static_cast<std::int64_t>(taken_.size()); }

  /// The lowest free slot, for a conversation of up to `capacity` tokens (0: the scheduler's); `batch` must be 1.
  Cache make_cache(std::int64_t batch, std::int64_t capacity = 0) {
    MAXTEXT_CHECK(batch == 1, ArgumentError, "[batching] a conversation takes one slot; a cache of ", batch,
                  " rows asked for");
    if (capacity <= 0) capacity = capacity_;
    MAXTEXT_CHECK(capacity <= capacity_, ArgumentError, "[batching] a conversation of ", capacity,
                  " tokens; the scheduler's slots hold ", capacity_);
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t s = 0; s < taken_.size(); ++s) {
      if (taken_[s]) continue;
      taken_[s] = true;
      {
        std::lock_guard<std::mutex> c(cache_mu_);
        cache_.set_length(static_cast<std::int64_t>(s), 0);
        forget(static_cast<std::int64_t>(s), 0);
      }
      return Cache(this, static_cast<std::int64_t>(s), capacity);
    }
    MAXTEXT_THROW(ArgumentError, "[batching] all ", taken_.size(), " slots hold a conversation");
  }

  /// One forward pass of a conversation (Session calls it): queued for the scheduler's thread, which runs it in the
  /// next round, batched with the other conversations' decode steps when it is one.
  Tensor<float, 3> forward(const Tensor<std::int32_t, 2>& tokens, Cache& cache, const ForwardOptions& fo = {}) {
    MAXTEXT_CHECK(cache.s_ == this, ArgumentError, "[batching] the cache was made by another scheduler");
    MAXTEXT_CHECK(tokens.dim(0) == 1, ArgumentError, "[batching] a conversation's pass has one row of tokens, found ",
                  tokens.dim(0));
    MAXTEXT_CHECK(fo.first_slot < 0 && fo.row_lengths == nullptr && fo.hidden_out == nullptr, ArgumentError,
                  "[batching] a conversation's pass takes no first_slot, row_lengths or hidden_out (ForwardOptions)");
    Job job;
    job.tokens = &tokens;
    job.fo = &fo;
    job.slot = cache.slot_;
    const bool plain = fo.last_only && fo.positions == nullptr && fo.segment_ids == nullptr && fo.capture == nullptr &&
                       fo.media_mask == nullptr && fo.media_embeddings == nullptr && fo.mrope_positions == nullptr;
    job.decode = plain && tokens.dim(1) == 1;
    job.plain = plain;
    job.chunked = plain && opt_.prefill_chunk > 0 && tokens.dim(1) > opt_.prefill_chunk;
    job.at = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    MAXTEXT_CHECK(!quit_, ArgumentError, "[batching] the scheduler is stopping");
    queue_.push_back(&job);
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return job.done; });
    if (job.err) std::rethrow_exception(job.err);
    return std::move(job.out);
  }

  /// The conversation in `slot` is about to send a step: the next round waits for it (at most wait_ms), as for the
  /// conversations of the last round. For conversations that start together, so that their steps are batched from
  /// the first round on whatever the threads' pace.
  void expect(std::int64_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    MAXTEXT_CHECK(slot >= 0 && slot < slots(), ArgumentError, "[batching] slot ", slot, " outside [0, ", slots(), ")");
    expected_[static_cast<std::size_t>(slot)] = true;
  }

  /// The conversation in `slot` sends no more steps for now (its answer ended): the next round does not wait for it.
  void idle(std::int64_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    if (slot >= 0 && slot < slots()) expected_[static_cast<std::size_t>(slot)] = false;
    cv_.notify_all();
  }

  /// The shared cache's bytes (KVCache::bytes: a paged cache's pages in use) and, when paged, its pool.
  std::int64_t cache_bytes() const {
    std::lock_guard<std::mutex> c(cache_mu_);
    return cache_.bytes();
  }
  PagingStats paging_stats() const {
    std::lock_guard<std::mutex> c(cache_mu_);
    if constexpr (requires { cache_.paging_stats(); }) {
      return cache_.paging_stats();
    } else {
      return cache_.get()->paging_stats();
    }
  }

  BatchStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    BatchStats s = stats_;
    s.shares = shares_.load();
    s.shared_tokens = shared_tokens_.load();
    return s;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Job {
    const Tensor<std::int32_t, 2>* tokens = nullptr;
    const ForwardOptions* fo = nullptr;
    std::int64_t slot = 0;
    bool decode = false;
    bool chunked = false;    // a plain prefill longer than a chunk: run a chunk per round
    bool plain = false;      // only tokens (last_only, nothing else): its prefix may come from another slot
    std::int64_t fed = 0;    // tokens of it run (or shared) so far
    Clock::time_point at;
    Tensor<float, 3> out;
    std::exception_ptr err;
    bool done = false;
  };

  void release(std::int64_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    taken_[static_cast<std::size_t>(slot)] = false;
    expected_[static_cast<std::size_t>(slot)] = false;
    cv_.notify_all();
  }

  /// Whether every conversation of the last round has a step queued.
  bool all_expected_here() const {
    std::vector<bool> here(expected_.size(), false);
    for (const Job* j : queue_) here[static_cast<std::size_t>(j->slot)] = true;
    for (std::size_t s = 0; s < expected_.size(); ++s) {
      if (expected_[s] && !here[s]) return false;
    }
    return true;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (queue_.empty()) return;  // quitting, nothing left
      // The last round's conversations get wait_ms from its end (or from the oldest step, if later) to come back.
      const auto deadline = std::max(queue_.front()->at, round_end_) +
                            std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double, std::milli>(opt_.wait_ms));
      cv_.wait_until(lock, deadline, [&] { return quit_ || all_expected_here(); });
      // The round: every decode step queued, then the oldest other pass.
      std::vector<Job*> decodes;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->decode) {
          decodes.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      std::fill(expected_.begin(), expected_.end(), false);
      for (const Job* j : decodes) expected_[static_cast<std::size_t>(j->slot)] = true;
      ++stats_.rounds;
      lock.unlock();
      BatchStats st;
      if (!decodes.empty()) run_decodes(decodes, st);
      lock.lock();
      finish(decodes, st);
      // Then the prompts that can share passes (prefill_rows), and the other passes, oldest first: one, or with
      // prefill_chunk as many as fit its budget of tokens.
      if (opt_.prefill_rows > 1) run_prefill_batches(lock);
      std::int64_t budget = opt_.prefill_chunk;
      for (;;) {
        auto it = std::find_if(queue_.begin(), queue_.end(), [](const Job* j) { return !j->decode; });
        if (it == queue_.end()) break;
        Job* other = *it;
        queue_.erase(it);
        expected_[static_cast<std::size_t>(other->slot)] = true;
        const std::int64_t before = other->fed;
        lock.unlock();
        const bool whole = run_other(*other);
        lock.lock();
        ++stats_.other_passes;
        budget -= other->chunked ? other->fed - before : other->tokens->dim(1);
        if (!whole) {
          queue_.push_front(other);  // its next chunk leads the next round
          break;
        }
        other->done = true;
        done_cv_.notify_all();
        if (budget <= 0) break;
      }
      round_end_ = Clock::now();
    }
  }

  void finish(const std::vector<Job*>& jobs, const BatchStats& st) {  // under mu_
    stats_.decode_passes += st.decode_passes;
    stats_.decode_steps += st.decode_steps;
    stats_.gap_rows += st.gap_rows;
    stats_.max_rows = std::max(stats_.max_rows, st.max_rows);
    for (Job* j : jobs) j->done = true;
    if (!jobs.empty()) done_cv_.notify_all();
  }

  /// Runs a pass alone, or the next chunk of a long prefill; returns whether the job is over.
  bool run_other(Job& j) {
    try {
      std::lock_guard<std::mutex> c(cache_mu_);
      ForwardOptions fo = *j.fo;
      fo.first_slot = j.slot;
      const std::int64_t T = j.tokens->dim(1);
      const std::int64_t start = cache_.length(j.slot);
      if (j.plain) share_prefix(j);
      if (!j.chunked && j.fed == 0) {
        j.out = model_.forward(*j.tokens, cache_, fo);
        record(j.slot, start, j.tokens->data(), T, j.plain);
        return true;
      }
      const std::int64_t from = cache_.length(j.slot);
      const std::int64_t n = j.chunked ? std::min(opt_.prefill_chunk, T - j.fed) : T - j.fed;
      Tensor<std::int32_t, 2> part({1, n});
      std::copy(j.tokens->data() + j.fed, j.tokens->data() + j.fed + n, part.data());
      Tensor<float, 3> out = model_.forward(part, cache_, fo);
      record(j.slot, from, part.data(), n, j.plain);
      j.fed += n;
      if (j.fed < T) return false;
      j.out = std::move(out);
    } catch (...) {
      j.err = std::current_exception();  // the chunks before stay in the cache, as a failed whole pass's rows would
    }
    return true;
  }

  /// The round's waiting prompts (whole, only tokens) in runs of consecutive slots, a run per pass
  /// (BatchOptions::prefill_rows); the ones no run takes go back to the queue to run alone. Called and returns under
  /// mu_, released around the passes.
  void run_prefill_batches(std::unique_lock<std::mutex>& lock) {
    std::vector<Job*> cand;
    for (Job* j : queue_) {
      if (!j->decode && j->plain && !j->chunked && j->fed == 0) cand.push_back(j);
    }
    if (cand.size() < 2) return;
    for (Job* j : cand) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), j));
      expected_[static_cast<std::size_t>(j->slot)] = true;
    }
    std::sort(cand.begin(), cand.end(), [](const Job* a, const Job* b) { return a->slot < b->slot; });
    lock.unlock();
    std::vector<Job*> alone, ran;
    std::int64_t passes = 0;
    {
      std::lock_guard<std::mutex> c(cache_mu_);
      if (cache_.recurrent()) {
        alone = cand;
      } else {
        for (Job* j : cand) share_prefix(*j);
        const std::int64_t budget = std::max<std::int64_t>(opt_.prefill_chunk, 512);
        auto rest = [](const Job* j) { return j->tokens->dim(1) - j->fed; };
        auto fits = [&](std::size_t i, std::size_t k, std::int64_t T) {  // rows [i, k) padded to T
          if (static_cast<std::int64_t>(k - i) * T > budget) return false;
          for (std::size_t q = i; q < k; ++q) {
            if (cache_.length(cand[q]->slot) + T > cache_.capacity()) return false;
          }
          return true;
        };
        std::size_t i = 0;
        while (i < cand.size()) {
          std::size_t k = i + 1;
          std::int64_t T = rest(cand[i]);
          while (k < cand.size() && cand[k]->slot == cand[k - 1]->slot + 1 &&
                 static_cast<std::int64_t>(k + 1 - i) <= opt_.prefill_rows &&
                 fits(i, k + 1, std::max(T, rest(cand[k])))) {
            T = std::max(T, rest(cand[k]));
            ++k;
          }
          if (k - i >= 2) {
            run_prefill_pass(cand, i, k, T);
            for (std::size_t q = i; q < k; ++q) ran.push_back(cand[q]);
            ++passes;
          } else {
            alone.push_back(cand[i]);
          }
          i = k;
        }
      }
    }
    lock.lock();
    stats_.prefill_batches += passes;
    stats_.batched_prompts += static_cast<std::int64_t>(ran.size());
    for (Job* j : ran) j->done = true;
    if (!ran.empty()) done_cv_.notify_all();
    // The rest run alone, oldest first, before the prompts that came since.
    std::sort(alone.begin(), alone.end(), [](const Job* a, const Job* b) { return a->at > b->at; });
    for (Job* j : alone) queue_.push_front(j);
  }

  /// Prompts cand[i, k) (consecutive slots) prefilled in one pass of rows padded to T tokens (under cache_mu_).
  void run_prefill_pass(const std::vector<Job*>& cand, std::size_t i, std::size_t k, std::int64_t T) {
    const auto B = static_cast<std::int64_t>(k - i);
    Tensor<std::int32_t, 2> tok = Tensor<std::int32_t, 2>::zeros({B, T});
    std::vector<std::int32_t> lengths(static_cast<std::size_t>(B));
    std::vector<std::int64_t> starts(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      const Job& j = *cand[i + static_cast<std::size_t>(b)];
      const std::int64_t n = j.tokens->dim(1) - j.fed;
      std::copy(j.tokens->data() + j.fed, j.tokens->data() + j.fed + n, &tok(b, 0));
      lengths[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(n);
      starts[static_cast<std::size_t>(b)] = cache_.length(j.slot);
    }
    try {
      ForwardOptions fo;
      fo.last_only = true;
      fo.first_slot = cand[i]->slot;
      fo.row_lengths = &lengths;
      Tensor<float, 3> out = model_.forward(tok, cache_, fo);
      for (std::int64_t b = 0; b < B; ++b) {
        Job& j = *cand[i + static_cast<std::size_t>(b)];
        const auto ub = static_cast<std::size_t>(b);
        record(j.slot, starts[ub], j.tokens->data() + j.fed, lengths[ub], true);
        j.fed = j.tokens->dim(1);
        j.out = row_of(out, b);
      }
    } catch (...) {
      for (std::size_t q = i; q < k; ++q) cand[q]->err = std::current_exception();
    }
  }

  /// Row r of a pass's last-token logits [B, 1, V], as a conversation's own pass gives them: [1, 1, V].
  static Tensor<float, 3> row_of(const Tensor<float, 3>& out, std::int64_t r) {
    const std::int64_t V = out.dim(2);
    Tensor<float, 3> row({1, 1, V});
    std::copy(&out(r, 0, 0), &out(r, 0, 0) + V, row.data());
    return row;
  }

  /// Prefix sharing (BatchOptions::share_min), under cache_mu_: the slot whose cached tokens go furthest into this
  /// prompt lends them (all but its last token, whose logits the pass must give).
  void share_prefix(Job& j) {
    const std::int64_t s = j.slot, L = cache_.length(s), T = j.tokens->dim(1);
    const auto us = static_cast<std::size_t>(s);
    if (opt_.share_min <= 0 || T - j.fed < 2 || !plain_[us] || static_cast<std::int64_t>(seen_[us].size()) != L) return;
    const std::int32_t* rest = j.tokens->data() + j.fed;
    const std::int64_t n = T - j.fed, want = L + n - 1;
    std::int64_t best = L, donor = -1;
    for (std::int64_t d = 0; d < slots(); ++d) {
      const auto ud = static_cast<std::size_t>(d);
      const auto& h = seen_[ud];
      if (d == s || !plain_[ud] || static_cast<std::int64_t>(h.size()) != cache_.length(d) ||
          static_cast<std::int64_t>(h.size()) <= best) {
        continue;
      }
      std::int64_t m = 0;
      const std::int64_t lim = std::min<std::int64_t>(static_cast<std::int64_t>(h.size()), want);
      while (m < lim && h[static_cast<std::size_t>(m)] == (m < L ? seen_[us][static_cast<std::size_t>(m)] : rest[m - L])) ++m;
      if (m > best) {
        best = m;
        donor = d;
      }
    }
    if (donor < 0 || best - L < opt_.share_min) return;
    if constexpr (requires { cache_.share_prefix(model_.backend(), cache_, donor, s, best); }) {
      if (!cache_.can_share(donor, best)) return;
      cache_.share_prefix(model_.backend(), cache_, donor, s, best);
    } else {
      if (!cache_.can_share(donor, best)) return;
      cache_.share_prefix(donor, s, best);
    }
    const auto& h = seen_[static_cast<std::size_t>(donor)];
    seen_[us].assign(h.begin(), h.begin() + best);
    j.fed += best - L;
    ++shares_;
    shared_tokens_ += best - L;
  }
  /// Slot s's cache now holds `n` tokens from `from` on (under cache_mu_): its token history for prefix sharing.
  void record(std::int64_t s, std::int64_t from, const std::int32_t* ids, std::int64_t n, bool plain) {
    auto& h = seen_[static_cast<std::size_t>(s)];
    if (static_cast<std::int64_t>(h.size()) < from) plain = false;  // tokens it did not see: no history
    if (!plain) {
      plain_[static_cast<std::size_t>(s)] = false;
      return;
    }
    h.resize(static_cast<std::size_t>(from));
    h.insert(h.end(), ids, ids + n);
  }
  /// Slot s went back to n tokens (under cache_mu_).
  void forget(std::int64_t s, std::int64_t n) {
    auto& h = seen_[static_cast<std::size_t>(s)];
    if (static_cast<std::int64_t>(h.size()) > n) h.resize(static_cast<std::size_t>(n));
    if (n == 0) plain_[static_cast<std::size_t>(s)] = true;
  }

  /// The round's decode steps as few passes as the gaps allow (under cache_mu_: the slots' lengths change).
  void run_decodes(std::vector<Job*>& jobs, BatchStats& st) {
    std::sort(jobs.begin(), jobs.end(), [](const Job* a, const Job* b) { return a->slot < b->slot; });
    std::lock_guard<std::mutex> c(cache_mu_);
    const bool recurrent = cache_.recurrent();
    std::size_t i = 0;
    while (i < jobs.size()) {
      // A run of slots [first, last]: extended over idle slots while the gap is short, the cache can forget the
      // throw-away row (not recurrent) and the idle slot has room for it.
      std::size_t k = i + 1;
      while (k < jobs.size()) {
        const std::int64_t from = jobs[k - 1]->slot + 1, to = jobs[k]->slot;  // idle slots [from, to)
        bool ok = to - jobs[i]->slot < opt_.max_rows && (to == from || (!recurrent && to - from <= opt_.max_gap));
        for (std::int64_t s = from; ok && s < to; ++s) ok = cache_.length(s) < cache_.capacity();
        if (!ok) break;
        ++k;
      }
      run_pass(jobs, i, k, st);
      i = k;
    }
  }

  /// One pass over jobs [i, k) (consecutive slots but for idle ones in between).
  void run_pass(std::vector<Job*>& jobs, std::size_t i, std::size_t k, BatchStats& st) {
    const std::int64_t first = jobs[i]->slot, rows = jobs[k - 1]->slot - first + 1;
    Tensor<std::int32_t, 2> tok = Tensor<std::int32_t, 2>::zeros({rows, 1});
    std::vector<std::pair<std::int64_t, std::int32_t>> gaps;  // idle slots and the lengths they go back to
    std::size_t q = i;
    for (std::int64_t r = 0; r < rows; ++r) {
      if (q < k && jobs[q]->slot == first + r) {
        tok(r, 0) = (*jobs[q]->tokens)(0, 0);
        ++q;
      } else {
        gaps.emplace_back(first + r, cache_.length(first + r));
      }
    }
    try {
      ForwardOptions fo;
      fo.last_only = true;
      fo.first_slot = first;
      Tensor<float, 3> out;
      try {
        out = model_.forward(tok, cache_, fo);
      } catch (...) {
        for (const auto& [s, n] : gaps) cache_.set_length(s, n);
        throw;
      }
      for (const auto& [s, n] : gaps) cache_.set_length(s, n);
      for (std::size_t j = i; j < k; ++j) {
        const std::int64_t s = jobs[j]->slot;
        record(s, cache_.length(s) - 1, jobs[j]->tokens->data(), 1, true);
      }
      for (std::size_t j = i; j < k; ++j) jobs[j]->out = row_of(out, jobs[j]->slot - first);
    } catch (...) {
      for (std::size_t j = i; j < k; ++j) jobs[j]->err = std::current_exception();
    }
    ++st.decode_passes;
    st.decode_steps += static_cast<std::int64_t>(k - i);
    st.gap_rows += static_cast<std::int64_t>(gaps.size());
    st.max_rows = std::max(st.max_rows, static_cast<std::int64_t>(k - i));
  }

  Model& model_;
  BatchOptions opt_;
  std::int64_t capacity_;
  SharedCache cache_;
  mutable std::mutex cache_mu_;  // the shared cache's slots: lengths and passes
  mutable std::mutex mu_;        // the queue, the slots taken, the expectations, the stats
  std::condition_variable cv_, done_cv_;
  std::deque<Job*> queue_;
  std::vector<bool> taken_, expected_;
  std::vector<std::vector<std::int32_t>> seen_;  // under cache_mu_: each slot's cached token ids (prefix sharing)
  std::vector<bool> plain_;                      // under cache_mu_: whether seen_ holds them (only plain passes ran)
  std::atomic<std::int64_t> shares_{0}, shared_tokens_{0};
  BatchStats stats_;
  Clock::time_point round_end_{};
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace maxtext::models
