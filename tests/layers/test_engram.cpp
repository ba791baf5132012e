// Engram's n-gram hashing (layers/engram.hpp) and NumPy's generator (core/numpy_random.hpp) against
// tests/fixtures/engram_hash/cases.json, written by tests/reference/engram_reference.py with NumPy and sympy
// themselves: every value must be equal, there is no tolerance (integers). The Engram module against
// tests/fixtures/engram_module_*, written by tests/reference/engram_module_reference.py (PyTorch float64), in f32
// and bf16, whole and continued token by token.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/numpy_random.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/engram.hpp"
#include "maxtext/models/kv_cache.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "support/backends.hpp"
#include "support/family_fixture.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(test::fixture("engram_hash") + "/cases.json");
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
  }();
  return j;
}

layers::NgramHashSpec spec_of(const nlohmann::json& c) {
  layers::NgramHashSpec s;
  s.vocab_bases = c.at("bases").get<std::vector<std::int64_t>>();
  s.max_ngram_size = c.at("max_ngram").get<std::int64_t>();
  s.num_heads = c.at("heads").get<std::int64_t>();
  s.layer_ids = c.at("layers").get<std::vector<std::int64_t>>();
  s.compressed_vocab_size = c.at("vocab").get<std::int64_t>();
  s.pad_id = c.at("pad").get<std::int32_t>();
  s.seed = c.at("seed").get<std::int64_t>();
  return s;
}

Tensor<std::int32_t, 2> ids_of(const nlohmann::json& c) {
  const auto rows = c.at("ids").get<std::vector<std::vector<std::int32_t>>>();
  Tensor<std::int32_t, 2> t({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(rows[0].size())});
  for (std::size_t b = 0; b < rows.size(); ++b) {
    for (std::size_t s = 0; s < rows[b].size(); ++s) t(static_cast<std::int64_t>(b), static_cast<std::int64_t>(s)) = rows[b][s];
  }
  return t;
}

}  // namespace

TEST_CASE("numpy_random: SeedSequence pools, PCG64 outputs and int32 integers equal NumPy's default_rng",
          "[core][engram]") {
  for (const auto& g : cases().at("generators")) {
    const std::uint64_t seed = std::stoull(g.at("seed").get<std::string>());
    INFO("seed " << seed);
    const numpy_random::SeedSequence ss(seed);
    const auto pool = g.at("pool").get<std::vector<std::uint32_t>>();
    CHECK(std::vector<std::uint32_t>(ss.pool().begin(), ss.pool().end()) == pool);
    numpy_random::Pcg64 raw(seed);
    for (const auto& r : g.at("raw")) CHECK(raw.next64() == std::stoull(r.get<std::string>()));
    numpy_random::Pcg64 gen(seed);
    for (const auto& d : g.at("draws")) {
      const auto want = d.at("values").get<std::vector<std::int32_t>>();
      const auto got = numpy_random::integers_int32(gen, d.at("low").get<std::int32_t>(),
                                                    d.at("high").get<std::int32_t>(), want.size());
      CHECK(got == want);
    }
  }
  numpy_random::Pcg64 g(0);
  CHECK_THROWS_WITH(numpy_random::integers_int32(g, 3, 3, 1), Catch::Contains("low (3) must be below high (3)"));
}

TEST_CASE("Engram NgramHashMapping: multipliers, prime table sizes and hash indices equal the NumPy re-statement of "
          "MaxText's, exactly",
          "[layers][engram]") {
  for (const auto& c : cases().at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    INFO("case " << name);
    const layers::NgramHashMapping map(spec_of(c));
    const Tensor<std::int32_t, 2> ids = ids_of(c);
    for (const auto& l : c.at("layer_data")) {
      const std::int64_t layer = l.at("layer").get<std::int64_t>();
      INFO("layer " << layer);
      CHECK(map.multipliers(layer) == l.at("multipliers").get<std::vector<std::int32_t>>());
      CHECK(map.vocab_sizes(layer) == l.at("vocab_sizes").get<std::vector<std::int32_t>>());
      const auto want = l.at("hashes").get<std::vector<std::vector<std::vector<std::int32_t>>>>();
      const Tensor<std::int32_t, 3> got = map.hashes(layer, ids);
      REQUIRE(got.dim(2) == map.total_heads());
      std::int64_t mismatches = 0;
      for (std::int64_t b = 0; b < got.dim(0); ++b) {
        for (std::int64_t s = 0; s < got.dim(1); ++s) {
          for (std::int64_t h = 0; h < got.dim(2); ++h) {
            const auto u = [](std::int64_t i) { return static_cast<std::size_t>(i); };
            mismatches += got(b, s, h) != want[u(b)][u(s)][u(h)];
          }
        }
      }
      CHECK(mismatches == 0);
      // A row hashed in pieces, each with the ids before it as history (what decoding keeps), equals the whole row.
      const auto S = static_cast<std::size_t>(ids.dim(1));
      const auto H = static_cast<std::size_t>(map.total_heads());
      const std::span<const std::int32_t> row(&ids(1, 0), S);
      std::vector<std::int32_t> pieces(S * H);
      std::size_t at = 0;
      for (const std::size_t len : {std::size_t{1}, std::size_t{1}, std::size_t{5}, S - 7}) {
        map.hash_row(layer, row.subspan(0, at), row.subspan(at, len), pieces.data() + at * H);
        at += len;
      }
      CHECK(std::equal(pieces.begin(), pieces.end(), &got(1, 0, 0)));
    }
  }
}

TEST_CASE("Engram NgramHashMapping: keys it cannot use are refused by name", "[layers][engram][errors]") {
  const auto base = [] {
    layers::NgramHashSpec s;
    s.vocab_bases = {100, 200};
    s.max_ngram_size = 3;
    s.num_heads = 2;
    s.layer_ids = {1};
    s.compressed_vocab_size = 1000;
    return s;
  };
  const auto refused = [](layers::NgramHashSpec s) { return layers::NgramHashMapping(std::move(s)); };
  auto s = base();
  s.vocab_bases = {100};
  CHECK_THROWS_WITH(refused(s), Catch::Contains("engram_vocab_bases: expected a size for each order 2..3"));
  s = base();
  s.max_ngram_size = 1;
  CHECK_THROWS_WITH(refused(s), Catch::Contains("engram_max_ngram_size"));
  s = base();
  s.layer_ids = {1, 1};
  CHECK_THROWS_WITH(refused(s), Catch::Contains("engram_layers: layer 1 is listed twice"));
  s = base();
  s.seed = -1;
  CHECK_THROWS_WITH(refused(s), Catch::Contains("engram_seed"));
  s = base();
  s.compressed_vocab_size = 0;
  CHECK_THROWS_WITH(refused(s), Catch::Contains("compressed vocabulary size"));
  s = base();
  s.vocab_bases = {100, std::int64_t{1} << 40};
  CHECK_THROWS_WITH(refused(s), Catch::Contains("engram_vocab_bases: expected values in"));
  const layers::NgramHashMapping ok(base());
  CHECK_THROWS_WITH(ok.multipliers(2), Catch::Contains("layer 2 is not an Engram layer"));
}

// ---- the Engram module against tests/reference/engram_module_reference.py (PyTorch float64) ---------------------

namespace {

using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;

/// One module fixture: the layer built from meta.json, its weights, inputs and float64 output.
template <class P>
struct ModuleCase {
  using A = typename P::act_t;
  std::string dir;
  nlohmann::json meta;
  test::Backend be;
  layers::Engram<P> engram;
  typename layers::Engram<P>::Params params;
  AnyTensor h, out;
  Tensor<std::int32_t, 3> ids;
  std::int64_t B = 0, S = 0, C = 0;

  explicit ModuleCase(const std::string& name) : dir(test::fixture(name)), meta(test::read_meta(dir)) {
    typename layers::Engram<P>::Config c;
    c.emb_dim = meta.at("emb_dim");
    c.streams = meta.at("streams");
    c.head_dim = meta.at("head_dim");
    c.max_ngram_size = meta.at("max_ngram_size");
    c.kernel_size = meta.at("kernel_size");
    c.vocab_sizes = meta.at("vocab_sizes").get<std::vector<std::int32_t>>();
    c.epsilon = meta.at("epsilon");
    engram = layers::Engram<P>(c);
    params = models::load_layer_params<P>(engram, io::read_safetensors(dir + "/weights.safetensors"), be);
    h = test::npy(dir + "/h.npy");
    out = test::npy(dir + "/out.npy");
    const AnyTensor i = test::npy(dir + "/hash_ids.npy");
    ids = i.to<std::int32_t, 3>({i.shape[0], i.shape[1], i.shape[2]});
    B = h.shape[0];
    S = h.shape[1];
    C = h.shape[2];
  }
};

/// Runs the module over tokens [t0, t0 + n) of every row, continuing the conv state in `cache`; returns [B, n, C].
template <class P>
Tensor<float, 3> run_engram(ModuleCase<P>& c, models::KVCache<P>& cache, std::int64_t t0, std::int64_t n) {
  using A = typename P::act_t;
  const std::int64_t Bn = c.B, C = c.C, Ht = c.engram.heads();
  Scratch scratch(c.be.memory());
  layers::StepInfo st;
  st.batch = Bn;
  st.length = n;
  st.start.assign(static_cast<std::size_t>(Bn), static_cast<std::int32_t>(t0));
  View<std::int32_t, 1> q_start = scratch.alloc<std::int32_t, 1>({Bn});
  c.be.copy(q_start.data(), st.start.data(), st.start.size() * 4, CopyKind::host_to_device);
  st.q_start = q_start;
  const Tensor<float, 3> hall = c.h.template to<float, 3>({Bn, c.S, C});
  Tensor<A, 2> xh({Bn * n, C});
  std::vector<std::int32_t> ids;
  for (std::int64_t b = 0; b < Bn; ++b) {
    for (std::int64_t t = 0; t < n; ++t) {
      for (std::int64_t d = 0; d < C; ++d) xh(b * n + t, d) = from_float<A>(hall(b, t0 + t, d));
      for (std::int64_t j = 0; j < Ht; ++j) ids.push_back(c.ids(b, t0 + t, j));
    }
  }
  View<A, 2> x = scratch.alloc<A, 2>({Bn * n, C});
  c.be.copy(x.data(), xh.data(), static_cast<std::size_t>(xh.size()) * sizeof(A), CopyKind::host_to_device);
  View<A, 2> y = scratch.alloc<A, 2>({Bn * n, C});
  layers::Context<P> ctx{c.be, scratch, st, nullptr};
  c.engram.forward(ctx, c.params, View<const A, 2>(x), ids, cache.layer(0), y);
  Tensor<A, 2> yh({Bn * n, C});
  c.be.copy(yh.data(), y.data(), static_cast<std::size_t>(yh.size()) * sizeof(A), CopyKind::device_to_host);
  c.be.synchronize();
  Tensor<float, 3> r({Bn, n, C});
  for (std::int64_t i = 0; i < r.size(); ++i) r.data()[i] = to_float(yh.data()[i]);
  return r;
}

/// max over [B, n, C] of |got - want[:, t0:t0+n]| - rel * |want|.
double excess(const Tensor<float, 3>& got, const AnyTensor& want_any, std::int64_t t0, double rel) {
  const Tensor<double, 3> want = want_any.to<double, 3>({want_any.shape[0], want_any.shape[1], want_any.shape[2]});
  double worst = -1e300;
  for (std::int64_t b = 0; b < got.dim(0); ++b) {
    for (std::int64_t t = 0; t < got.dim(1); ++t) {
      for (std::int64_t d = 0; d < got.dim(2); ++d) {
        const double w = want(b, t0 + t, d);
        worst = std::max(worst, std::abs(static_cast<double>(got(b, t, d)) - w) - rel * std::abs(w));
      }
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("Engram module: prefill, token-by-token decode and a split prompt match the float64 re-statement",
          "[layers][engram]") {
  for (const char* name : {"engram_module_g2", "engram_module_g1"}) {
    INFO("fixture " << name);
    ModuleCase<P32> c(name);
    // f32: each output is a few dozen-term dot products, three RMSNorms and a K-tap convolution of O(1) values;
    // f32 rounding gives ~1e-6 relative, 2e-5 absolute leaves room for the sqrt / sigmoid of the gate.
    constexpr double abs_tol = 2e-5, rel_tol = 1e-5;
    {
      models::KVCache<P32> cache(c.be, c.B, c.S, {layers::CacheSpec{}}, {c.engram.state_spec()});
      CHECK(excess(run_engram(c, cache, 0, c.S), c.out, 0, rel_tol) <= abs_tol);
    }
    {  // 5 prompt tokens, then one token at a time: the conv state carries the last (K-1)*N inputs
      models::KVCache<P32> cache(c.be, c.B, c.S, {layers::CacheSpec{}}, {c.engram.state_spec()});
      CHECK(excess(run_engram(c, cache, 0, 5), c.out, 0, rel_tol) <= abs_tol);
      for (std::int64_t t = 5; t < c.S; ++t) {
        INFO("decode position " << t);
        CHECK(excess(run_engram(c, cache, t, 1), c.out, t, rel_tol) <= abs_tol);
      }
    }
    {  // a split prompt: 2 + (S - 2) tokens
      models::KVCache<P32> cache(c.be, c.B, c.S, {layers::CacheSpec{}}, {c.engram.state_spec()});
      CHECK(excess(run_engram(c, cache, 0, 2), c.out, 0, rel_tol) <= abs_tol);
      CHECK(excess(run_engram(c, cache, 2, c.S - 2), c.out, 2, rel_tol) <= abs_tol);
    }
  }
}

TEST_CASE("Engram module in bfloat16 stays within the rounding of its ops of the float64 re-statement",
          "[layers][engram]") {
  for (const char* name : {"engram_module_g2", "engram_module_g1"}) {
    INFO("fixture " << name);
    ModuleCase<PBf> c(name);
    // bf16 (8 significant bits, 2^-9 relative per rounding): inputs and weights are rounded, and a chain of about a
    // dozen rounded ops (projections, three norms, the gate's four ops, the product, the conv and its SiLU, the sum)
    // separates input and output; outputs are O(1)-O(4). 0.05 absolute plus 3% of the value covers that chain with
    // margin, while a missing term (a conv tap, a bias, the sign of the gate) changes outputs by 0.1 or more.
    models::KVCache<PBf> cache(c.be, c.B, c.S, {layers::CacheSpec{}}, {c.engram.state_spec()});
    CHECK(excess(run_engram(c, cache, 0, c.S), c.out, 0, 0.03) <= 0.05);
  }
}

TEST_CASE("Engram module: bad hash indices and a cache from another layer are refused by name",
          "[layers][engram][errors]") {
  ModuleCase<P32> c("engram_module_g2");
  models::KVCache<P32> cache(c.be, c.B, c.S, {layers::CacheSpec{}}, {c.engram.state_spec()});
  c.ids(1, 3, 2) = 17;  // head 2's table has 17 rows
  CHECK_THROWS_WITH(run_engram(c, cache, 0, c.S), Catch::Contains("hash index 17 of head 2") &&
                                                       Catch::Contains("outside its table of 17"));
  c.ids(1, 3, 2) = -1;
  CHECK_THROWS_WITH(run_engram(c, cache, 0, c.S), Catch::Contains("hash index -1 of head 2"));
  c.ids(1, 3, 2) = 0;
  models::KVCache<P32> other(c.be, c.B, c.S, {layers::CacheSpec{}}, {{7}});
  CHECK_THROWS_WITH(run_engram(c, other, 0, c.S), Catch::Contains("the cache was made for another layer"));
  // a continuation that skips tokens: the conv state follows 4 tokens, the step starts at 6
  CHECK_NOTHROW(run_engram(c, cache, 0, 4));
  CHECK_THROWS_WITH(run_engram(c, cache, 6, 2), Catch::Contains("continues at cache length 6 but its conv state follows 4"));
  typename layers::Engram<P32>::Config bad;
  bad.emb_dim = 8;
  bad.head_dim = 2;
  bad.vocab_sizes = {3, 5, 7};  // 3 sizes for 3-grams (orders 2 and 3): not one per head of each order
  CHECK_THROWS_WITH(layers::Engram<P32>(bad), Catch::Contains("one table size per head of each order"));
}
