// Engram's n-gram hashing (layers/engram.hpp) and NumPy's generator (core/numpy_random.hpp) against
// tests/fixtures/engram_hash/cases.json, written by tests/reference/engram_reference.py with NumPy and sympy
// themselves: every value must be equal, there is no tolerance (integers).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/numpy_random.hpp"
#include "maxtext/layers/engram.hpp"
#include "support/family_fixture.hpp"

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
