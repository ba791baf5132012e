// Sampling: greedy ties, temperature / top-k / top-p semantics and seeded reproducibility (closed forms, frequencies).
#include <array>
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/models/sampling.hpp"

using namespace maxtext;
using models::Sampler;
using models::SamplingParams;

TEST_CASE("Greedy picks the argmax, lowest id on ties", "[sampling]") {
  const std::vector<float> l{0.5f, 2.0f, -1.0f, 2.0f};
  Sampler s({});
  CHECK(s.sample(l.data(), 4) == 1);
  const std::vector<float> nan{0.0f, NAN};
  CHECK_THROWS_AS(s.sample(nan.data(), 2), ArgumentError);
}

TEST_CASE("Temperature sampling follows softmax(logits / T)", "[sampling]") {
  const std::vector<float> l{0.0f, std::log(2.0f), std::log(5.0f)};  // probabilities 1/8, 2/8, 5/8 at T = 1
  Sampler s({1.0f, 0, 1.0f, 123});
  std::array<int, 3> n{};
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++n[static_cast<std::size_t>(s.sample(l.data(), 3))];
  // 5 sigma of a binomial with p = 1/8 over 40000 draws is ~0.008
  CHECK(n[0] / double(draws) == Approx(0.125).margin(0.01));
  CHECK(n[1] / double(draws) == Approx(0.25).margin(0.011));
  CHECK(n[2] / double(draws) == Approx(0.625).margin(0.012));
}

TEST_CASE("top-k and top-p restrict the candidates", "[sampling]") {
  const std::vector<float> l{1.0f, 3.0f, 2.0f, 0.0f};
  Sampler k1({5.0f, 1, 1.0f, 1});
  for (int i = 0; i < 100; ++i) REQUIRE(k1.sample(l.data(), 4) == 1);
  Sampler k2({5.0f, 2, 1.0f, 2});
  for (int i = 0; i < 200; ++i) {
    const int t = k2.sample(l.data(), 4);
    REQUIRE((t == 1 || t == 2));
  }
  // At T = 1 the probabilities are ~[0.087, 0.644, 0.237, 0.032]: top_p 0.5 keeps only token 1.
  Sampler p({1.0f, 0, 0.5f, 3});
  for (int i = 0; i < 200; ++i) REQUIRE(p.sample(l.data(), 4) == 1);
  // top_p 0.8 keeps tokens 1 and 2 (0.644 + 0.237 = 0.881 >= 0.8).
  Sampler p2({1.0f, 0, 0.8f, 4});
  for (int i = 0; i < 300; ++i) {
    const int t = p2.sample(l.data(), 4);
    REQUIRE((t == 1 || t == 2));
  }
}

TEST_CASE("Seeded sampling is reproducible and bad parameters are refused", "[sampling]") {
  const std::vector<float> l{0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  Sampler a({0.9f, 0, 1.0f, 77}), b({0.9f, 0, 1.0f, 77});
  for (int i = 0; i < 50; ++i) REQUIRE(a.sample(l.data(), 5) == b.sample(l.data(), 5));
  CHECK_THROWS_AS(Sampler({-1.0f, 0, 1.0f, 0}), ArgumentError);
  CHECK_THROWS_AS(Sampler({1.0f, -2, 1.0f, 0}), ArgumentError);
  CHECK_THROWS_AS(Sampler({1.0f, 0, 0.0f, 0}), ArgumentError);
}
