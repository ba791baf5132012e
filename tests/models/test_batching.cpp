// Batching (models/batching.hpp, ForwardOptions::first_slot, KVCache::rows): conversations whose decode steps run
// together in one forward pass over a shared cache get, token for token and bit for bit in their log-probabilities,
// what each gets alone in a session of its own; the passes really were shared (the scheduler's counts), idle slots in
// the middle of a pass come out as they were, passes hold at most max_rows rows, prompts prefilled in chunks give
// the same greedy tokens within rounding, and misuse is refused by name.
//
// Models: seeded fixture configs of every decoder block (support/fixture_models.hpp): keys and values, MLA's latent
// cache and Engram's history, Gated DeltaNet's recurrent states (whose passes split at idle slots instead), the
// DeepSeek-V4 compressed blocks, then every other block.
#include <cmath>
#include <cstdint>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/batching.hpp"
#include "maxtext/models/session.hpp"
#include "support/fixture_models.hpp"

using namespace maxtext;

namespace {

using Adapter = models::detail::AnyDraftModel;
using Scheduler = models::BatchScheduler<Adapter>;

constexpr int kConversations = 4;

/// Conversation k: two turns; the one in slot 1 answers turn 1 briefly, then waits until the others have answered
/// theirs, so that they decode with its slot idle between them (slots 2 and 3 always decode side by side).
std::vector<std::int32_t> turn(std::int64_t V, int k, int t) { return test::salted_ids(t == 0 ? 9 + k : 4, V, 3 + 5 * k + 11 * t); }
std::int64_t answer_length(int k, int t) { return t == 0 && k == 1 ? 2 : 6; }

struct TwoTurns {
  models::GenerateResult first, second;
};

void batched_equals_alone(const std::string& fixture, const std::string& dtype = "float32") {
  INFO(fixture << " " << dtype);
  const auto m = test::make_fixture_model(fixture, 11, dtype);
  const std::int64_t V = m->config().vocab_size;
  std::vector<TwoTurns> alone(kConversations), together(kConversations);
  for (int k = 0; k < kConversations; ++k) {
    auto s = m->new_session(64);
    alone[k].first = s->generate(turn(V, k, 0), test::greedy_with_logprobs(answer_length(k, 0)));
    alone[k].second = s->generate(turn(V, k, 1), test::greedy_with_logprobs(answer_length(k, 1)));
  }

  Adapter adapter(*m);
  models::BatchOptions bo;
  bo.wait_ms = 5000;  // a round waits for every conversation that is generating: the batches do not depend on pace
  models::BatchStats st;
  bool recurrent = false;
  {
    Scheduler sched(adapter, kConversations, 64, bo);
    std::latch others_answered(kConversations - 1);
    std::vector<std::unique_ptr<models::Session<Scheduler>>> sessions;
    for (int k = 0; k < kConversations; ++k) sessions.push_back(std::make_unique<models::Session<Scheduler>>(sched, 64));
    for (int k = 0; k < kConversations; ++k) sched.expect(k);  // batched from the first round, whatever the pace
    std::vector<std::thread> threads;
    for (int k = 0; k < kConversations; ++k) {
      threads.emplace_back([&, k] {
        auto& s = *sessions[static_cast<std::size_t>(k)];
        together[k].first = s.generate(turn(V, k, 0), test::greedy_with_logprobs(answer_length(k, 0)));
        sched.idle(k);  // slot k: the sessions took the slots in order
        if (k == 1) {
          others_answered.wait();
        } else {
          others_answered.count_down();
        }
        together[k].second = s.generate(turn(V, k, 1), test::greedy_with_logprobs(answer_length(k, 1)));
        sched.idle(k);
      });
    }
    for (auto& t : threads) t.join();
    st = sched.stats();
    recurrent = adapter.make_cache(1, 4).recurrent();
  }
  for (int k = 0; k < kConversations; ++k) {
    INFO("conversation " << k);
    test::require_same_generation(together[k].first, alone[k].first);
    test::require_same_generation(together[k].second, alone[k].second);
    CHECK(together[k].second.prompt_tokens == alone[k].second.prompt_tokens);  // turn 2 reused the slot's cache
  }
  // The decode steps shared passes; the idle middle slot rode along with a throw-away row, or (recurrent states,
  // which cannot forget it) split the pass.
  CHECK(st.max_rows >= 2);
  CHECK(st.decode_passes < st.decode_steps);
  if (recurrent) {
    CHECK(st.gap_rows == 0);
  } else {
    CHECK(st.gap_rows > 0);
  }
}

/// n conversations started together, one per slot of a scheduler over `adapter` with `bo`, conversation k generating
/// prompt(k) with `opt`: their results; `st` gets the scheduler's counts.
template <class Prompt>
std::vector<models::GenerateResult> run_together(Adapter& adapter, int n, const models::BatchOptions& bo,
                                                 Prompt&& prompt, const models::GenerateOptions& opt,
                                                 models::BatchStats& st) {
  std::vector<models::GenerateResult> out(static_cast<std::size_t>(n));
  Scheduler sched(adapter, n, 64, bo);
  std::vector<std::unique_ptr<models::Session<Scheduler>>> sessions;
  for (int k = 0; k < n; ++k) sessions.push_back(std::make_unique<models::Session<Scheduler>>(sched, 64));
  for (int k = 0; k < n; ++k) sched.expect(k);
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) {
    threads.emplace_back([&, k] {
      out[static_cast<std::size_t>(k)] = sessions[static_cast<std::size_t>(k)]->generate(prompt(k), opt);
      sched.idle(k);
    });
  }
  for (auto& t : threads) t.join();
  st = sched.stats();
  return out;
}

}  // namespace

TEST_CASE("batching: conversations run together get bit for bit what each gets alone, for every kind of cache",
          "[models][batching]") {
  batched_equals_alone("llama2_model");
  batched_equals_alone("llama2_model", "bfloat16");
  for (const std::string& f : test::cache_kind_fixtures()) {
    if (f != "llama2_model") batched_equals_alone(f);
  }
}

TEST_CASE("batching: every other decoder block too", "[models][batching]") {
  for (const std::string& f : test::other_block_fixtures()) batched_equals_alone(f);
}

TEST_CASE("batching: passes hold at most max_rows rows and prompts prefilled in chunks give the same greedy answers",
          "[models][batching]") {
  // Keys and values, MLA with MoE (experts see other row counts per chunk), recurrent states, sliding windows.
  for (const std::string fixture : {"llama2_model", "deepseek_model", "qwen3_next_model", "gemma3_model"}) {
    INFO(fixture);
    const auto m = test::make_fixture_model(fixture, 23);
    const std::int64_t V = m->config().vocab_size;
    constexpr int kN = 5;
    // Each prompt takes 4 rounds, so the conversations' answers (kNew tokens) overlap in time only if long enough.
    constexpr std::int64_t kPrompt = 20, kChunk = 6, kNew = 24;
    std::vector<models::GenerateResult> alone(kN);
    for (int k = 0; k < kN; ++k) {
      alone[k] = m->new_session(64)->generate(test::salted_ids(kPrompt, V, 40 + k), test::greedy_with_logprobs(kNew));
    }
    Adapter adapter(*m);
    models::BatchOptions bo;
    bo.wait_ms = 5000;
    bo.max_rows = 2;
    bo.prefill_chunk = kChunk;
    models::BatchStats st;
    const auto together = run_together(adapter, kN, bo, [&](int k) { return test::salted_ids(kPrompt, V, 40 + k); },
                                       test::greedy_with_logprobs(kNew), st);
    for (int k = 0; k < kN; ++k) {
      INFO("conversation " << k);
      REQUIRE(together[k].tokens.at(0) == alone[k].tokens.at(0));
      for (std::size_t i = 0; i < alone[k].logprobs[0].size(); ++i) {
        // A prefill in parts groups the same sums otherwise (row counts decide the kernels' products): f32 rounding.
        CHECK(std::abs(together[k].logprobs[0][i].logprob - alone[k].logprobs[0][i].logprob) < 1e-4);
      }
    }
    CHECK(st.max_rows == 2);
    CHECK(st.other_passes == kN * ((kPrompt + kChunk - 1) / kChunk));  // every prompt in 4 chunks
    CHECK(st.decode_steps == kN * (kNew - 1));                          // the first token from the prefill
  }
}

TEST_CASE("batching: prompts waiting in the same round share prefill passes and give the same greedy answers",
          "[models][batching]") {
  // Keys and values, MLA with MoE (padding rows reach the experts too), sliding windows; recurrent states run alone.
  for (const std::string fixture : {"llama2_model", "deepseek_model", "gemma3_model", "qwen3_next_model"}) {
    INFO(fixture);
    const auto m = test::make_fixture_model(fixture, 29);
    const std::int64_t V = m->config().vocab_size;
    constexpr int kN = 5;
    constexpr std::int64_t kNew = 6;
    auto prompt = [&](int k) { return test::salted_ids(11 + 3 * k, V, 60 + k); };  // 11..23 tokens: rows padded
    std::vector<models::GenerateResult> alone(kN);
    for (int k = 0; k < kN; ++k) alone[k] = m->new_session(64)->generate(prompt(k), test::greedy_with_logprobs(kNew));
    Adapter adapter(*m);
    models::BatchOptions bo;
    bo.wait_ms = 5000;  // the first round waits for every prompt
    bo.prefill_rows = 8;
    models::BatchStats st;
    const auto together = run_together(adapter, kN, bo, prompt, test::greedy_with_logprobs(kNew), st);
    const bool recurrent = adapter.make_cache(1, 4).recurrent();
    for (int k = 0; k < kN; ++k) {
      INFO("conversation " << k);
      const auto& ta = alone[k].tokens.at(0);
      const auto& tt = together[k].tokens.at(0);
      REQUIRE(tt.size() == ta.size());
      REQUIRE(tt.at(0) == ta.at(0));
      // Every step whose context is the same (the tokens before it equal): the distributions within rounding. Rows of
      // a pass over several prompts take that row count's products, f32 rounding of the prompt alone; a padded row
      // that wrote its padding into the cache, or a row read as another's, would move the next steps by far more.
      const auto& la = alone[k].logprobs.at(0);
      const auto& lt = together[k].logprobs.at(0);
      REQUIRE(lt.size() == la.size());
      for (std::size_t t = 0; t < la.size(); ++t) {
        if (t > 0 && tt[t - 1] != ta[t - 1]) break;
        INFO("step " << t);
        CHECK(std::abs(lt[t].logprob - la[t].logprob) < 1e-4);
      }
    }
    if (recurrent) {
      CHECK(st.prefill_batches == 0);  // a recurrent state would take the padding: each prompt alone
      CHECK(st.other_passes == kN);
    } else {
      CHECK(st.prefill_batches == 1);  // slots 0-4, 5 x 23 tokens within the budget of 512
      CHECK(st.batched_prompts == kN);
      CHECK(st.other_passes == 0);
    }
    CHECK(st.decode_steps == kN * (kNew - 1));
  }
}

TEST_CASE("batching: a pass over some slots of a shared cache leaves the others as they were", "[models][batching]") {
  const auto m = test::make_fixture_model("llama2_model", 5);
  const std::int64_t V = m->config().vocab_size;
  const auto a = test::salted_ids(7, V, 1), b = test::salted_ids(5, V, 2);
  auto shared = m->new_cache(3, 32);
  auto run = [&](const std::vector<std::int32_t>& ids, models::AnyCache* cache, std::int64_t slot) {
    Tensor<std::int32_t, 2> tok({1, static_cast<std::int64_t>(ids.size())});
    for (std::size_t i = 0; i < ids.size(); ++i) tok(0, static_cast<std::int64_t>(i)) = ids[i];
    models::ForwardRequest r;
    r.tokens = &tok;
    r.cache = cache;
    r.first_slot = slot;
    r.last_only = true;
    return m->forward(r);
  };
  run(a, shared.get(), 2);
  CHECK(shared->lengths() == std::vector<std::int32_t>{0, 0, 7});
  run(b, shared.get(), 0);
  CHECK(shared->lengths() == std::vector<std::int32_t>{5, 0, 7});
  // Slot 2 continues as a cache of its own would.
  const auto next = run({9}, shared.get(), 2);
  auto own = m->new_cache(1, 32);
  run(a, own.get(), -1);
  const auto want = run({9}, own.get(), -1);
  REQUIRE(next.dim(2) == want.dim(2));
  for (std::int64_t v = 0; v < V; ++v) REQUIRE(next(0, 0, v) == want(0, 0, v));
  CHECK(shared->lengths() == std::vector<std::int32_t>{5, 0, 8});

  // Refused by name: slots beyond the cache, slots without a cache.
  Tensor<std::int32_t, 2> two({2, 1});
  two(0, 0) = 1;
  two(1, 0) = 2;
  models::ForwardRequest r;
  r.tokens = &two;
  r.cache = shared.get();
  r.first_slot = 2;
  CHECK_THROWS_WITH(m->forward(r), Catch::Contains("first_slot 2 and 2 rows of tokens exceed the cache's 3 slots"));
  r.cache = nullptr;
  CHECK_THROWS_WITH(m->forward(r), Catch::Contains("first_slot names slots of a cache, and no cache was given"));
  CHECK(shared->lengths() == std::vector<std::int32_t>{5, 0, 8});
}

TEST_CASE("batching: the scheduler refuses what it cannot take", "[models][batching]") {
  const auto m = test::make_fixture_model("llama2_model", 5);
  Adapter adapter(*m);
  Scheduler sched(adapter, 2, 32);
  CHECK_THROWS_WITH(sched.make_cache(2, 16), Catch::Contains("a conversation takes one slot; a cache of 2 rows"));
  CHECK_THROWS_WITH(sched.make_cache(1, 64), Catch::Contains("a conversation of 64 tokens; the scheduler's slots hold 32"));
  models::BatchOptions no_rows;
  no_rows.prefill_rows = 0;
  CHECK_THROWS_WITH(Scheduler(adapter, 2, 32, no_rows), Catch::Contains("prefill_rows must be >= 1, found 0"));
  {
    auto c0 = sched.make_cache(1, 0);
    auto c1 = sched.make_cache(1, 16);
    CHECK(c0.slot() == 0);
    CHECK(c1.slot() == 1);
    CHECK(c0.capacity() == 32);
    CHECK(c1.capacity() == 16);
    CHECK_THROWS_WITH(sched.make_cache(1, 0), Catch::Contains("all 2 slots hold a conversation"));
    CHECK_THROWS_WITH(sched.expect(2), Catch::Contains("slot 2 outside [0, 2)"));
    CHECK_THROWS_WITH(c1.set_length(0, 17), Catch::Contains("length 17 outside [0, 16]"));
    CHECK_THROWS_WITH(c1.length(1), Catch::Contains("a conversation's cache has one row; row 1 asked for"));
    Tensor<std::int32_t, 2> two({2, 1});
    two(0, 0) = 1;
    two(1, 0) = 2;
    CHECK_THROWS_WITH(sched.forward(two, c0, {}), Catch::Contains("a conversation's pass has one row of tokens, found 2"));
    // A forward pass's error reaches the conversation that sent it, and the scheduler goes on.
    Tensor<std::int32_t, 2> bad({1, 1});
    bad(0, 0) = static_cast<std::int32_t>(m->config().vocab_size);
    models::ForwardOptions last;
    last.last_only = true;
    CHECK_THROWS_WITH(sched.forward(bad, c0, last), Catch::Contains("outside the vocabulary"));
    Tensor<std::int32_t, 2> ok({1, 1});
    ok(0, 0) = 3;
    CHECK(sched.forward(ok, c0, last).dim(2) == m->config().vocab_size);
    CHECK(c0.length(0) == 1);
    Scheduler other(adapter, 1, 32);
    CHECK_THROWS_WITH(other.forward(ok, c0, last), Catch::Contains("the cache was made by another scheduler"));
  }
  // Slots given back are taken again, emptied.
  auto again = sched.make_cache(1, 0);
  CHECK(again.slot() == 0);
  CHECK(again.length(0) == 0);
}
