// Paged KV cache (models/paged_memory.hpp, KVCache's paged constructor) and prefix sharing (KVCache::share_prefix,
// BatchScheduler's share_min).
//
// What is checked, for every decoder block's fixture (support/fixture_models.hpp):
//   - a paged cache gives the logits of the ordinary cache, bit for bit, across page boundaries (same kernels, same
//     memory contents: only where the memory comes from differs);
//   - a slot that shares another's first n tokens (pages mapped twice, copied on the first write) continues exactly
//     as the ordinary cache does after running the other's tokens and going back to n: sharing is "copy, then
//     rewind", bit for bit; the lender's own continuation and a rewind of the lender into the shared pages leave the
//     borrower's rows untouched (copy on write);
//   - memory: pages in use, shared and given back are counted as they should be, a full pool is refused by name;
//   - `attention: paged` with MaxText's pagedattn_* keys, and page sizes the memory cannot map refused by name with
//     the nearest valid value;
//   - the scheduler lends a common prompt prefix between conversations: the same answers as each alone, bit for bit
//     (DeepSeek-V4: log-probabilities within 1e-4, its grouped projection sums a pass of a few rows otherwise).
#include <cmath>
#include <cstdint>
#include <filesystem>
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

/// The fixture's model with room for `ctx` tokens (configs as support/fixture_models.hpp makes them).
std::unique_ptr<models::AnyModel> model_with_context(const std::string& name, std::int64_t ctx,
                                                     const std::vector<std::pair<std::string, std::string>>& set = {}) {
  return test::make_fixture_model(name, 29, ctx, set);
}

/// Logits of `ids` run into row `row` of `cache` (its length on), one pass, last token only. Positions wrap at 29:
/// the cache indices cross pages of 32 tokens and more, and some fixtures' position tables are 32 long (both caches
/// get the same positions, which is all the comparisons need). DeepSeek-V4, whose compressed blocks are placed by
/// cache index, takes only the default positions (its rotary table is max_target_length long).
std::vector<float> run(models::AnyModel& m, models::AnyCache& cache, std::int64_t row, const std::vector<std::int32_t>& ids) {
  const bool wrap = m.config().decoder_block != "deepseek4";
  const auto n = static_cast<std::int64_t>(ids.size());
  Tensor<std::int32_t, 2> t({1, n}), pos({1, n});
  const std::int64_t start = cache.lengths().at(static_cast<std::size_t>(row));
  for (std::int64_t i = 0; i < n; ++i) {
    t(0, i) = ids[static_cast<std::size_t>(i)];
    pos(0, i) = static_cast<std::int32_t>((start + i) % 29);
  }
  models::ForwardRequest r;
  r.tokens = &t;
  if (wrap) r.positions = &pos;
  r.cache = &cache;
  r.last_only = true;
  r.first_slot = row;
  const Tensor<float, 3> out = m.forward(r);
  return std::vector<float>(out.data(), out.data() + out.size());
}

std::int32_t argmax(const std::vector<float>& v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// The checks of the header's first two points for one fixture.
void paged_equals_ordinary(const std::string& fixture) {
  INFO(fixture);
  // The page size the model's cache takes (a whole number of system pages per buffer) sets the lengths.
  std::int64_t tpp = 0;
  {
    const auto probe = model_with_context(fixture, 64);
    tpp = probe->new_paged_cache(1, 64, {})->paging_stats().tokens_per_page;
  }
  if (tpp == 0) {  // no buffer to page (every layer recurrent): nothing here to check
    SUCCEED("no paged buffers");
    return;
  }
  REQUIRE(tpp >= 32);
  const std::int64_t P = tpp + 5, ctx = 3 * tpp;  // the prompt crosses a page boundary; room for three pages
  const auto m = model_with_context(fixture, ctx);
  const std::int64_t V = m->config().vocab_size;
  auto plain = m->new_cache(3, ctx);
  auto paged = m->new_paged_cache(3, ctx, {});
  REQUIRE(paged->paging_stats().pages == 3 * 3);
  REQUIRE(paged->paging_stats().pages_used == 0);

  // Row 0: a prompt over two pages, then decode steps.
  const std::vector<std::int32_t> a = test::salted_ids(P, V, 5);
  REQUIRE(run(*m, *paged, 0, a) == run(*m, *plain, 0, a));
  CHECK(paged->pages_of(0) == 2);
  std::int32_t next = 1;
  for (int i = 0; i < 4; ++i) {
    const auto l = run(*m, *paged, 0, {next});
    REQUIRE(l == run(*m, *plain, 0, {next}));
    next = argmax(l);
  }
  const std::int64_t len0 = P + 4;

  // Row 1 borrows row 0's first n tokens (n inside page 1, so page 1 is shared, then copied when row 1 writes).
  const bool stateful = !paged->can_share(0, P - 3);
  const std::int64_t n = stateful ? len0 : P - 3;
  paged->share_prefix(*paged, 0, 1, n);
  plain->share_prefix(*plain, 0, 1, n);  // the ordinary cache copies the rows: the reference
  const auto shared = paged->paging_stats();
  CHECK(shared.pages_shared == 2);
  CHECK(shared.pages_used == 2);
  CHECK(paged->lengths()[1] == n);
  const std::vector<std::int32_t> b = test::salted_ids(6, V, 17);
  REQUIRE(run(*m, *paged, 1, b) == run(*m, *plain, 1, b));
  // Row 1's copy of page 1; DeepSeek-V4's compressors also write pooled blocks at row start / ratio, in page 0,
  // so that row copies page 0 as well.
  const bool blocks = m->config().decoder_block == "deepseek4";
  CHECK(paged->paging_stats().pages_used == (blocks ? 4 : 3));
  CHECK(paged->paging_stats().pages_shared == (blocks ? 0 : 1));

  // The lender goes on (writing its own copy of the shared page), then back into the shared page 0 and on with
  // other tokens: the borrower's rows are untouched.
  for (int i = 0; i < 3; ++i) {
    const auto l = run(*m, *paged, 0, {next});
    REQUIRE(l == run(*m, *plain, 0, {next}));
    next = argmax(l);
  }
  if (!paged->recurrent()) {
    paged->set_length(0, 3);
    plain->set_length(0, 3);
    const std::vector<std::int32_t> c = test::salted_ids(tpp, V, 23);
    REQUIRE(run(*m, *paged, 0, c) == run(*m, *plain, 0, c));
  }
  std::int32_t nb = 2;
  for (int i = 0; i < 3; ++i) {
    const auto l = run(*m, *paged, 1, {nb});
    REQUIRE(l == run(*m, *plain, 1, {nb}));
    nb = argmax(l);
  }

  // A clone shares every page; both go on alike.
  auto clone_rows = paged->lengths();
  paged->reset(2);
  CHECK(paged->pages_of(2) == 0);
  const auto before = paged->paging_stats().pages_used;
  paged->share_prefix(*paged, 1, 2, clone_rows[1]);
  CHECK(paged->paging_stats().pages_used == before);
  plain->share_prefix(*plain, 1, 2, clone_rows[1]);
  REQUIRE(run(*m, *paged, 2, {nb}) == run(*m, *plain, 2, {nb}));
  REQUIRE(run(*m, *paged, 1, {nb}) == run(*m, *plain, 1, {nb}));

  // Everything given back.
  paged->reset(-1);
  CHECK(paged->paging_stats().pages_used == 0);
  if (!paged->recurrent()) CHECK(paged->bytes() == 0);
}

}  // namespace

TEST_CASE("paged cache: each kind of cache gives the ordinary cache's logits and shares and copies pages exactly",
          "[models][paged]") {
  for (const std::string& f : test::cache_kind_fixtures()) paged_equals_ordinary(f);
}

TEST_CASE("paged cache: every other decoder block too", "[models][paged]") {
  for (const std::string& f : test::other_block_fixtures()) paged_equals_ordinary(f);
}

TEST_CASE("paged cache: pages in use are counted and given back and a full pool is refused by name", "[models][paged]") {
  const auto m = model_with_context("llama2_model", 1024);
  const std::int64_t V = m->config().vocab_size;
  auto c = m->new_paged_cache(4, 1024, {0, 5});
  const auto st = c->paging_stats();
  const std::int64_t tpp = st.tokens_per_page;
  REQUIRE(st.pages == 5);
  REQUIRE(st.page_bytes > 0);
  CHECK(c->capacity() % tpp == 0);
  run(*m, *c, 0, test::salted_ids(2 * tpp + 1, V, 3));  // 3 pages
  run(*m, *c, 1, test::salted_ids(tpp + 1, V, 4));      // 2 pages
  CHECK(c->paging_stats().pages_used == 5);
  CHECK(c->bytes() == 5 * st.page_bytes);
  try {
    run(*m, *c, 2, test::salted_ids(3, V, 5));
    FAIL("a full pool was not refused");
  } catch (const ArgumentError& e) {
    CHECK_THAT(e.what(), Catch::Contains("pagedattn_num_pages") && Catch::Contains("5 pages"));
  }
  // Going back keeps a sequence's pages (it will likely write there again) until the pool has no free page: then
  // the pages wholly past every sequence's length go back first. Length 0 (reset) gives back all of a sequence's.
  c->set_length(0, static_cast<std::int32_t>(2 * tpp));
  CHECK(c->pages_of(0) == 3);
  c->set_length(1, 0);
  CHECK(c->paging_stats().pages_used == 3);
  run(*m, *c, 2, test::salted_ids(3, V, 5));
  CHECK(c->paging_stats().pages_used == 4);
  run(*m, *c, 3, test::salted_ids(tpp + 1, V, 6));  // two pages: the last free one, then row 0's third
  CHECK(c->paging_stats().pages_used == 5);
  CHECK(c->pages_of(0) == 2);
  CHECK(c->pages_of(3) == 2);
  c->reset(0);
  CHECK(c->paging_stats().pages_used == 3);

  // Misuse.
  CHECK_THROWS_WITH(c->share_prefix(*c, 2, 1, 4), Catch::Contains("4 tokens of a slot holding 3"));
  CHECK(run(*m, *c, 0, test::salted_ids(2, V, 7)).size() == static_cast<std::size_t>(V));  // rows 2 and 3 kept theirs
  CHECK_THROWS_WITH(c->share_prefix(*c, 7, 1, 1), Catch::Contains("outside [0, 4)"));
  auto other = model_with_context("llama2_model", 1024);
  auto foreign = other->new_paged_cache(1, 1024, {});
  CHECK_THROWS_WITH(c->share_prefix(*foreign, 0, 1, 0), Catch::Contains("another model"));
}

TEST_CASE("paged cache: attention: paged takes MaxText's pagedattn keys and refuses page sizes the memory cannot map",
          "[models][paged]") {
  {
    const auto m = model_with_context("llama2_model", 256, {{"attention", "paged"}, {"pagedattn_num_pages", "7"}});
    auto c = m->new_cache(2, 256);
    const auto st = c->paging_stats();
    CHECK(st.pages == 7);
    CHECK(st.tokens_per_page >= 32);  // unset: MaxText's 32, or the smallest valid size above it
    // Same logits as the ordinary cache of a model without paging.
    const auto plain_model = model_with_context("llama2_model", 256);
    auto plain = plain_model->new_cache(2, 256);
    const auto ids = test::salted_ids(40, m->config().vocab_size, 9);
    CHECK(run(*m, *c, 1, ids) == run(*plain_model, *plain, 1, ids));
  }
  {
    // A pass without a cache (the whole sequence at once) keeps nothing: its cache is its own, not from the pool.
    const auto m = model_with_context("llama2_model", 256, {{"attention", "paged"}, {"pagedattn_num_pages", "1"}});
    Tensor<std::int32_t, 2> t({1, 256});
    const auto ids = test::salted_ids(256, m->config().vocab_size, 4);
    for (std::int64_t i = 0; i < 256; ++i) t(0, i) = ids[static_cast<std::size_t>(i)];
    models::ForwardRequest r;
    r.tokens = &t;
    r.last_only = true;
    CHECK_NOTHROW(m->forward(r));
    CHECK_THROWS_WITH(run(*m, *m->new_cache(1, 256), 0, ids), Catch::Contains("1 pages (pagedattn_num_pages)"));
  }
  // An explicit size must make whole system pages of every buffer: refused with the nearest valid value.
  const auto probe = model_with_context("llama2_model", 256);
  const std::int64_t q = probe->new_paged_cache(1, 256, {})->paging_stats().tokens_per_page;
  if (q > 1) {
    const auto bad = model_with_context("llama2_model", 256, {{"attention", "paged"}, {"pagedattn_tokens_per_page", "33"}});
    CHECK_THROWS_WITH(bad->new_cache(1, 256), Catch::Contains("pagedattn_tokens_per_page = 33") &&
                                                  Catch::Contains("nearest valid value"));
  }
  CHECK_THROWS_WITH(model_with_context("llama2_model", 256, {{"attention", "paged"}, {"pagedattn_num_pages", "0"}})->new_cache(1, 256),
                    Catch::Contains("pagedattn_num_pages must be > 0"));
  CHECK_THROWS_WITH(model_with_context("llama2_model", 256, {{"attention", "paged"}, {"pagedattn_num_pages", "lots"}})->new_cache(1, 256),
                    Catch::Contains("pagedattn_num_pages: expected an integer"));
  // Page sizes too small for the process's mapping limit are refused, not left to fail later.
  CHECK_THROWS_WITH(probe->new_paged_cache(100000, 256, {q, 0}), Catch::Contains("max_map_count"));
}

namespace {

/// Conversations that begin with the same system prompt, run through the scheduler (the first alone, then the
/// others together): each borrows the prompt's rows instead of running them, and answers as it does alone.
void shared_system_prompt(const std::string& fixture, bool paged) {
  INFO(fixture << (paged ? " paged" : " ordinary"));
  std::vector<std::pair<std::string, std::string>> set;
  if (paged) set = {{"attention", "paged"}, {"pagedattn_num_pages", "64"}};
  const auto m = model_with_context(fixture, 256, set);
  const std::int64_t V = m->config().vocab_size;
  constexpr int kN = 4;
  const std::vector<std::int32_t> system = test::salted_ids(40, V, 2);
  auto prompt = [&](int k) {
    auto p = system;
    for (auto t : test::salted_ids(5 + k, V, 31 + k)) p.push_back(t);
    return p;
  };
  std::vector<models::GenerateResult> alone(kN), together(kN);
  for (int k = 0; k < kN; ++k) alone[k] = m->new_session(256)->generate(prompt(k), test::greedy_with_logprobs(8));
  Adapter adapter(*m);
  models::BatchOptions bo;
  bo.wait_ms = 5000;
  bo.share_min = 8;
  models::BatchStats st;
  {
    Scheduler sched(adapter, kN, 256, bo);
    std::vector<std::unique_ptr<models::Session<Scheduler>>> sessions;
    for (int k = 0; k < kN; ++k) sessions.push_back(std::make_unique<models::Session<Scheduler>>(sched, 256));
    together[0] = sessions[0]->generate(prompt(0), test::greedy_with_logprobs(8));
    sched.idle(0);
    std::vector<std::thread> threads;
    for (int k = 1; k < kN; ++k) sched.expect(k);
    for (int k = 1; k < kN; ++k) {
      threads.emplace_back([&, k] {
        together[k] = sessions[static_cast<std::size_t>(k)]->generate(prompt(k), test::greedy_with_logprobs(8));
        sched.idle(k);
      });
    }
    for (auto& t : threads) t.join();
    st = sched.stats();
  }
  const bool recurrent = m->new_cache(1, 8)->recurrent();
  if (recurrent) {  // a state summarises a whole sequence: no prompt shares one
    CHECK(st.shares == 0);
  } else {
    CHECK(st.shares == kN - 1);
    CHECK(st.shared_tokens >= (kN - 1) * static_cast<std::int64_t>(system.size()));
  }
  // The lent rows come from the lender's prefill pass, the rest of the prompt runs in a pass of its own (5 to 8
  // rows); alone, the whole prompt is one pass. The products give a row the same arithmetic in passes of any size
  // but for DeepSeek-V4's grouped output projection (head_matmul: a row alone up to 8 rows, Eigen's blocked product
  // above), where the answers agree within rounding; the others bit for bit.
  const bool exact = m->config().decoder_block != "deepseek4";
  for (int k = 0; k < kN; ++k) {
    INFO("conversation " << k);
    REQUIRE(together[k].tokens.at(0) == alone[k].tokens.at(0));
    for (std::size_t i = 0; i < alone[k].logprobs[0].size(); ++i) {
      if (exact) {
        CHECK(together[k].logprobs[0][i].logprob == alone[k].logprobs[0][i].logprob);
      } else {
        CHECK(std::abs(together[k].logprobs[0][i].logprob - alone[k].logprobs[0][i].logprob) <= 1e-4);
      }
    }
  }
}

}  // namespace

TEST_CASE("paged cache: the scheduler lends a common system prompt's rows between conversations", "[models][paged]") {
  for (const bool paged : {true, false}) {
    for (const std::string f : {"llama2_model", "deepseek_model", "gemma3_model", "qwen3_next_model", "deepseek4_model"}) {
      shared_system_prompt(f, paged);
    }
  }
}
