// MaxText's quantised KV cache (quantize_kvcache, kv_quant_dtype, kv_quant_axis; layers/kv_quant.hpp and
// layers/attention_op.hpp) in every decoder block.
//
// The numerics of the quantisation and of attention over such a cache are checked against the float64
// restatement of MaxText's KVQuant in tests/layers/test_kv_quant.cpp. Here, for every block's fixture model:
//   - a fresh prefill attends its keys and values as computed (MaxText's prefill), so its logits are the
//     unquantised model's, bit for bit, where every layer attends its own cache; a layer that reads another
//     layer's cache (Gemma 4's shared-KV layers) reads it dequantised, as decode steps do;
//   - decode steps read every key and value dequantised: the logits stay within the quantisation's bound of the
//     unquantised model's (int8: 2% of the logits' range, fp8 6%, int4 30%; see bound() below), and are the same
//     whether the tokens come one step at a time or several in one step (the rows read are the same bytes);
//   - the cache holds packed rows of one byte per value plus a scale (int4: half a byte), so it is smaller than the
//     float32 one (a quarter for int8 where the rows are wide, plus the 16-byte row padding on these tiny models);
//   - paging and prefix sharing move packed rows as they move any other (bit for bit against the ordinary cache);
//   - MLA and DeepSeek-V4's compressed attention refuse quantize_kvcache by name, and bad values are refused with
//     the nearest valid one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/layers/kv_quant.hpp"
#include "maxtext/models/any_model.hpp"
#include "support/fixture_models.hpp"

using namespace maxtext;

namespace {

using Settings = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<models::AnyModel> model_with(const std::string& name, const Settings& set) {
  return test::make_fixture_model(name, 29, 128, set);
}

/// Last-token logits of `ids` run into row `row` of `cache` in one step.
std::vector<float> run(models::AnyModel& m, models::AnyCache& cache, std::int64_t row, const std::vector<std::int32_t>& ids) {
  const auto n = static_cast<std::int64_t>(ids.size());
  Tensor<std::int32_t, 2> t({1, n});
  for (std::int64_t i = 0; i < n; ++i) t(0, i) = ids[static_cast<std::size_t>(i)];
  models::ForwardRequest r;
  r.tokens = &t;
  r.cache = &cache;
  r.last_only = true;
  r.first_slot = row;
  const Tensor<float, 3> out = m.forward(r);
  return std::vector<float>(out.data(), out.data() + out.size());
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}
double range(const std::vector<float>& a) {
  const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
  return static_cast<double>(*hi) - *lo;
}

/// How far decode logits may move, as a share of the unquantised logits' range. A dequantised value is within half
/// a step of the value (int8: 1/255 of its row's largest magnitude, int4: 1/15; fp8: 2^-4 relative) plus the bf16
/// roundings of scale and step (2^-8 relative each); through the attention, the output projection, the later
/// layers and the logits these tiny random models (2-4 layers) amplify that a few times: the bounds leave that
/// margin, and are an order of magnitude below the logits' own spread. Gemma 4 attends without the 1/sqrt(d) scale
/// (its queries and keys are RMS-normalised: q . k reaches head_dim), so the same relative error in a key moves its
/// logits sqrt(d) times more: measured 5.4% of the range at int8 (gemma4_small_e2b_model), bound 10%.
double bound(const std::string& type, const Config& c) {
  const double b = type == "int8" ? 0.02 : type == "fp8" ? 0.06 : 0.3;
  return c.decoder_block.rfind("gemma4", 0) == 0 ? 5 * b : b;
}

bool refuses(const std::string& fixture) {
  const Config c = test::fixture_model_config(fixture);
  return c.attention_type == "mla" || c.decoder_block == "deepseek4";
}

void check_fixture(const std::string& fixture, const std::string& type = "int8", const std::string& axis = "heads_and_dkv") {
  INFO(fixture << " " << type << " " << axis);
  const Settings quant = {{"quantize_kvcache", "true"}, {"kv_quant_dtype", type}, {"kv_quant_axis", axis}};
  if (refuses(fixture)) {
    CHECK_THROWS_WITH(model_with(fixture, quant), Catch::Contains("quantize_kvcache"));
    return;
  }
  const auto plain = model_with(fixture, {});
  const auto q = model_with(fixture, quant);
  const std::int64_t V = q->config().vocab_size, ctx = 96;

  // The cache is smaller (recurrent states, where a block has them, stay as they are).
  auto pc = plain->new_cache(2, ctx);
  auto qc = q->new_cache(2, ctx);
  const std::int64_t pb = pc->bytes(), qb = qc->bytes();
  INFO("cache bytes: " << qb << " quantised, " << pb << " float32");
  if (pb > 0) {
    CHECK(qb < pb);
  } else {  // no attention layer (the simple block): nothing cached, nothing changes
    CHECK(qb == 0);
  }

  // Prefill: the unquantised attention (bit for bit unless a layer reads another's cache).
  const std::vector<std::int32_t> prompt = test::salted_ids(21, V, 3);
  const auto lp = run(*plain, *pc, 0, prompt);
  const auto lq = run(*q, *qc, 0, prompt);
  const bool readers = q->config().num_kv_shared_layers > 0;
  if (readers) {
    CHECK(max_abs_diff(lq, lp) <= bound(type, q->config()) * range(lp));
  } else {
    CHECK(lq == lp);
  }

  // Decode: within the bound; the same step by step as in one step of several tokens.
  std::vector<std::int32_t> next;
  std::vector<float> dq, dp;
  std::int32_t tok = static_cast<std::int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
  for (int i = 0; i < 6; ++i) {
    next.push_back(tok);
    dp = run(*plain, *pc, 0, {tok});
    dq = run(*q, *qc, 0, {tok});
    const double d = max_abs_diff(dq, dp), r = range(dp);
    INFO("step " << i << ": max |quantised - float32| " << d << ", logits' range " << r);
    CHECK(d <= bound(type, q->config()) * r);
    tok = static_cast<std::int32_t>(std::max_element(dp.begin(), dp.end()) - dp.begin());
  }
  run(*q, *qc, 1, prompt);
  const auto together = run(*q, *qc, 1, next);
  double scale = 0;
  for (float v : dq) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  INFO("several tokens in one step against one at a time: " << max_abs_diff(together, dq));
  CHECK(max_abs_diff(together, dq) <= 1e-5 * scale);
}

}  // namespace

TEST_CASE("quantised KV cache: each kind of cache (int8)", "[models][kv_quant]") {
  for (const std::string& f : test::cache_kind_fixtures()) check_fixture(f);
}

TEST_CASE("quantised KV cache: every other decoder block (int8)", "[models][kv_quant]") {
  for (const std::string& f : test::other_block_fixtures()) check_fixture(f);
}

TEST_CASE("quantised KV cache: int4 and fp8 and a scale per head", "[models][kv_quant]") {
  for (const char* f : {"llama2_model", "qwen3_model", "gemma3_model"}) {
    check_fixture(f, "int4", "heads_and_dkv");
    check_fixture(f, "fp8", "heads_and_dkv");
    check_fixture(f, "int8", "dkv");
  }
}

TEST_CASE("quantised KV cache: paged and shared rows are the ordinary cache's, bit for bit", "[models][kv_quant][paged]") {
  const Settings quant = {{"quantize_kvcache", "true"}, {"max_target_length", "1024"}};
  const auto m = model_with("llama2_model", quant);
  const std::int64_t V = m->config().vocab_size, ctx = 1024;
  auto plain = m->new_cache(2, ctx);
  auto paged = m->new_paged_cache(2, ctx, {});
  const std::int64_t tpp = paged->paging_stats().tokens_per_page;
  REQUIRE(tpp > 0);
  const auto prompt = test::salted_ids(tpp + 9, V, 5);  // across a page boundary
  REQUIRE(run(*m, *paged, 0, prompt) == run(*m, *plain, 0, prompt));
  for (std::int32_t t : {3, 5, 7}) REQUIRE(run(*m, *paged, 0, {t}) == run(*m, *plain, 0, {t}));
  paged->share_prefix(*paged, 0, 1, tpp + 4);
  plain->share_prefix(*plain, 0, 1, tpp + 4);
  CHECK(paged->paging_stats().pages_shared == 2);
  for (std::int32_t t : {11, 13}) REQUIRE(run(*m, *paged, 1, {t}) == run(*m, *plain, 1, {t}));
  // The pool's pages hold packed rows: per token, packed_row_bytes(K, d) against 4 K d bytes per key or value.
  const auto f32 = model_with("llama2_model", {{"max_target_length", "1024"}})->new_paged_cache(1, ctx, {});
  INFO("page bytes " << paged->paging_stats().page_bytes << " quantised, " << f32->paging_stats().page_bytes
                     << " float32, tokens per page " << tpp << " and " << f32->paging_stats().tokens_per_page);
  const std::int64_t K = m->config().num_kv_heads, d = m->config().head_dim;
  CHECK(paged->paging_stats().page_bytes * f32->paging_stats().tokens_per_page * 4 * K * d ==
        f32->paging_stats().page_bytes * tpp * layers::KVQuant{}.packed_row_bytes(K, d));
}

TEST_CASE("quantised KV cache: bad settings refused by name", "[models][kv_quant]") {
  CHECK_THROWS_WITH(model_with("llama2_model", {{"quantize_kvcache", "true"}, {"kv_quant_dtype", "int16"}}),
                    Catch::Contains("kv_quant_dtype 'int16'") && Catch::Contains("did you mean 'int8'"));
  CHECK_THROWS_WITH(model_with("llama2_model", {{"quantize_kvcache", "true"}, {"kv_quant_axis", "dvk"}}),
                    Catch::Contains("kv_quant_axis 'dvk'") && Catch::Contains("did you mean 'dkv'"));
  CHECK_THROWS_WITH(model_with("llama2_model", {{"quantize_kvcache", "yes"}}),
                    Catch::Contains("quantize_kvcache: expected true or false, found 'yes'"));
  // Off, the other two keys change nothing (as in MaxText, where they are read only with quantize_kvcache).
  CHECK_NOTHROW(model_with("llama2_model", {{"quantize_kvcache", "false"}, {"kv_quant_dtype", "int4"}}));
}

TEST_CASE("quantised KV cache: a saved session goes on exactly and only into the same quantisation", "[models][kv_quant][session]") {
  const Settings int8 = {{"quantize_kvcache", "true"}, {"kv_quant_axis", "dkv"}};
  const auto m = model_with("llama2_model", int8);
  const auto same = model_with("llama2_model", int8);
  const std::int64_t V = m->config().vocab_size;
  const std::string path = "quantised_session.mxs";
  models::GenerateOptions go;
  go.max_new_tokens = 4;
  go.logprobs = true;
  auto s = m->new_session(96);
  s->generate(test::salted_ids(20, V, 3), go);
  s->save(path);
  const auto want = s->generate(test::salted_ids(3, V, 8), go);
  auto t = same->new_session(96);
  t->load(path);
  const auto got = t->generate(test::salted_ids(3, V, 8), go);
  CHECK(got.tokens == want.tokens);
  CHECK(got.logprobs.at(0).at(3).logprob == want.logprobs.at(0).at(3).logprob);
  // Another axis or no quantisation: refused by the layout check (rows of the same bytes could hold other scales).
  for (const Settings& other : {Settings{{"quantize_kvcache", "true"}}, Settings{}}) {
    const auto om = model_with("llama2_model", other);
    auto u = om->new_session(96);
    CHECK_THROWS_WITH(u->load(path), Catch::Contains("KV-cache type"));
  }
  std::remove(path.c_str());
}
