// Sampling: greedy ties, temperature / top-k / top-p / min-p semantics, logit bias and repetition / frequency /
// presence penalties, log-probabilities, and seeded reproducibility. Expectations are closed forms worked by hand (in
// the comments) and draw frequencies checked with a chi-square bound at p = 1e-6.
#include <array>
#include <cmath>
#include <limits>
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

namespace {

/// Pearson's chi-square of `counts` against `expected` probabilities (zero-probability categories must have no draws).
/// Critical values at p = 1e-6 for 1..6 degrees of freedom (regularised upper incomplete gamma, solved numerically).
bool chi_square_ok(const std::vector<int>& counts, const std::vector<double>& expected) {
  static const double crit[] = {0, 23.93, 27.63, 30.66, 33.38, 35.89, 38.26};
  double n = 0, stat = 0;
  for (int c : counts) n += c;
  int df = -1;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0.0) {
      if (counts[i] != 0) return false;
      continue;
    }
    const double e = n * expected[i];
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  INFO("chi-square " << stat << " with " << df << " degrees of freedom");
  CHECK(df >= 1);
  CHECK(df <= 6);
  return stat < crit[df];
}

SamplingParams params(float temperature, std::int64_t top_k, float top_p, std::uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

}  // namespace

TEST_CASE("Logit bias and repetition / frequency / presence penalties follow their closed forms", "[sampling]") {
  const std::vector<float> l{2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{4, 1.5f}};
  Sampler s(p);
  s.add_context({0, 1});  // context: repetition penalty only
  s.accept(3);            // generated: 3 twice, 1 once
  s.accept(3);
  s.accept(1);
  std::vector<float> out;
  s.process(l.data(), 5, out);
  // id 0: seen in context, positive: 2 / 2 = 1; no generated occurrence.
  // id 1: negative: -1 * 2 = -2; generated once: -2 - 0.5 * 1 - 0.25 = -2.75.
  // id 2: unseen: 0.5. id 3: 3 / 2 = 1.5; generated twice: 1.5 - 0.5 * 2 - 0.25 = 0.25. id 4: -2 + 1.5 = -0.5.
  const std::vector<float> expect{1.0f, -2.75f, 0.5f, 0.25f, -0.5f};
  for (std::size_t i = 0; i < 5; ++i) CHECK(out[i] == Approx(expect[i]).margin(1e-6));
  // Greedy sees the processed logits: 0 wins (3 without the penalties).
  CHECK(s.sample(l.data(), 5) == 0);
  CHECK(Sampler({}).sample(l.data(), 5) == 3);
  // A bias of -inf bans a token; a bias for a token outside the vocabulary is refused.
  SamplingParams ban;
  ban.logit_bias = {{3, -std::numeric_limits<float>::infinity()}};
  CHECK(Sampler(ban).sample(l.data(), 5) == 0);
  ban.temperature = 1.0f;
  Sampler sb(ban);
  for (int i = 0; i < 300; ++i) REQUIRE(sb.sample(l.data(), 5) != 3);
  SamplingParams far;
  far.logit_bias = {{5, 1.0f}};
  CHECK_THROWS_AS(Sampler(far).sample(l.data(), 5), ArgumentError);
}

TEST_CASE("Penalised sampling draws from softmax of the processed logits", "[sampling]") {
  // Expected: softmax([1, -2.75, 0.5, 0.25, -0.5] / 0.8) (the processed logits of the closed-form case above).
  const std::vector<float> l{2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<double> proc{1.0, -2.75, 0.5, 0.25, -0.5};
  std::vector<double> expect(5);
  double z = 0;
  for (std::size_t i = 0; i < 5; ++i) z += expect[i] = std::exp(proc[i] / 0.8);
  for (auto& e : expect) e /= z;
  std::vector<int> n(5, 0);
  for (int i = 0; i < 20000; ++i) {
    SamplingParams p = params(0.8f, 0, 1.0f, static_cast<std::uint64_t>(1000 + i));
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.logit_bias = {{4, 1.5f}};
    Sampler s(p);
    s.add_context({0, 1});
    s.accept(3);
    s.accept(3);
    s.accept(1);
    ++n[static_cast<std::size_t>(s.sample(l.data(), 5))];
  }
  CHECK(chi_square_ok(n, expect));
}

TEST_CASE("min-p keeps tokens within min_p of the most likely, after temperature and top-k", "[sampling]") {
  // p = [0.5, 0.3, 0.15, 0.05] at T = 1; min_p 0.2 -> threshold 0.1 keeps ids 0..2, renormalised over 0.95.
  const std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p = params(1.0f, 0, 1.0f, 11);
  p.min_p = 0.2f;
  Sampler s(p);
  std::vector<int> n(4, 0);
  for (int i = 0; i < 30000; ++i) ++n[static_cast<std::size_t>(s.sample(l.data(), 4))];
  CHECK(chi_square_ok(n, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0}));

  // Logits ln 2^i (i = 0..4) at T = 2: p ~ 2^(i/2) = [1, 1.414, 2, 2.828, 4]. top_k 3 keeps ids 4, 3, 2; min_p 0.6
  // keeps p >= 0.6 * 4 = 2.4: ids 4 and 3, in proportion 4 : 2.828.
  std::vector<float> l2;
  for (int i = 0; i < 5; ++i) l2.push_back(static_cast<float>(i) * std::log(2.0f));
  SamplingParams q = params(2.0f, 3, 1.0f, 12);
  q.min_p = 0.6f;
  Sampler s2(q);
  std::vector<int> n2(5, 0);
  for (int i = 0; i < 30000; ++i) ++n2[static_cast<std::size_t>(s2.sample(l2.data(), 5))];
  const double a = 4.0, b = 2.0 * std::sqrt(2.0);
  CHECK(chi_square_ok(n2, {0, 0, 0, b / (a + b), a / (a + b)}));
}

TEST_CASE("Plain temperature sampling passes the chi-square bound", "[sampling]") {
  const std::vector<float> l{0.0f, std::log(2.0f), std::log(5.0f)};  // 1/8, 2/8, 5/8
  Sampler s(params(1.0f, 0, 1.0f, 99));
  std::vector<int> n(3, 0);
  for (int i = 0; i < 40000; ++i) ++n[static_cast<std::size_t>(s.sample(l.data(), 3))];
  CHECK(chi_square_ok(n, {0.125, 0.25, 0.625}));
}

TEST_CASE("Seeded sampling with penalties is reproducible, new parameters are validated", "[sampling]") {
  const std::vector<float> l{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.45f};
  SamplingParams p = params(1.3f, 4, 0.95f, 5);
  p.min_p = 0.05f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.1f;
  p.logit_bias = {{2, 0.7f}};
  Sampler a(p), b(p);
  a.add_context({1, 2});
  b.add_context({1, 2});
  for (int i = 0; i < 200; ++i) REQUIRE(a.sample(l.data(), 6) == b.sample(l.data(), 6));
  auto bad = [](auto edit) {
    SamplingParams q;
    edit(q);
    return q;
  };
  CHECK_THROWS_AS(Sampler(bad([](SamplingParams& q) { q.min_p = 1.5f; })), ArgumentError);
  CHECK_THROWS_AS(Sampler(bad([](SamplingParams& q) { q.repetition_penalty = 0.0f; })), ArgumentError);
  CHECK_THROWS_AS(Sampler(bad([](SamplingParams& q) { q.frequency_penalty = NAN; })), ArgumentError);
  CHECK_THROWS_AS(Sampler(bad([](SamplingParams& q) { q.logit_bias = {{-1, 1.0f}}; })), ArgumentError);
  CHECK_THROWS_AS(Sampler(bad([](SamplingParams& q) { q.logit_bias = {{1, INFINITY}}; })), ArgumentError);
}

TEST_CASE("token_logprob is log-softmax of the raw logits with the top alternatives", "[sampling]") {
  const std::vector<float> l{0.0f, std::log(2.0f), std::log(5.0f), 0.0f};  // 1/9, 2/9, 5/9, 1/9
  const auto r = models::token_logprob(l.data(), 4, 1, 3);
  CHECK(r.token == 1);
  CHECK(r.logprob == Approx(std::log(2.0 / 9.0)).margin(1e-6));
  REQUIRE(r.top.size() == 3);
  CHECK(r.top[0].first == 2);
  CHECK(r.top[0].second == Approx(std::log(5.0 / 9.0)).margin(1e-6));
  CHECK(r.top[1].first == 1);
  CHECK(r.top[2].first == 0);  // tie with id 3: the lower id
  CHECK(r.top[2].second == Approx(std::log(1.0 / 9.0)).margin(1e-6));
  CHECK(models::token_logprob(l.data(), 4, 3, 0).top.empty());
}
