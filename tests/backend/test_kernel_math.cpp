// The __host__ __device__ arithmetic of backend/common/kernel_math.hpp (what the CUDA kernels run), checked on the
// CPU against the definitions it implements: the mask predicate of attention.md §2 by brute force, the online /
// split softmax against a direct double softmax, the rotary pairs against the reference backend, the sampling
// bisection against the reference backend's sort.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/core/dtype.hpp"

using namespace maxtext;

TEST_CASE("key_range is the position terms of the attention mask", "[backend][kmath]") {
  for (int causal = 0; causal < 2; ++causal) {
    for (std::int64_t window : {0, 1, 3, 7}) {
      for (std::int64_t chunk : {0, 1, 4, 5}) {
        for (std::int64_t kv_len : {0, 1, 9, 16}) {
          for (std::int64_t qi = 0; qi < 16; ++qi) {
            const auto r = kmath::key_range(qi, kv_len, causal != 0, window, chunk);
            for (std::int64_t s = 0; s < 20; ++s) {
              // attention.md §2: the key must exist; causal s <= q; window q - W < s <= q; chunk same block, s <= q.
              bool want = s < kv_len;
              if (causal) want = want && s <= qi;
              if (window > 0) want = want && qi - window < s && s <= qi;
              if (chunk > 0) want = want && qi / chunk == s / chunk && s <= qi;
              INFO("causal " << causal << " W " << window << " C " << chunk << " kv_len " << kv_len << " q " << qi << " s " << s);
              REQUIRE((s >= r.lo && s < r.hi) == want);
            }
          }
        }
      }
    }
  }
  CHECK(kmath::segment_allows(2, 2));
  CHECK_FALSE(kmath::segment_allows(1, 2));
  CHECK_FALSE(kmath::segment_allows(-1, -1));  // negative key segments never attend
}

TEST_CASE("attention_logit rounds and soft-caps per the fp32 flags", "[backend][kmath]") {
  const float dot = 3.14159265f;
  CHECK(kmath::attention_logit<float>(dot, 0.0f, false, false) == dot);
  CHECK(kmath::attention_logit<bf16>(dot, 0.0f, false, false) == round_to<bf16>(dot));
  CHECK(kmath::attention_logit<bf16>(dot, 0.0f, true, false) == dot);
  // logits in f32 after a bf16 product: soft cap of the rounded product, not rounded again
  CHECK(kmath::attention_logit<bf16>(dot, 2.0f, false, true) == math::soft_cap(round_to<bf16>(dot), 2.0f));
  CHECK(kmath::attention_logit<bf16>(dot, 2.0f, false, false) ==
        round_to<bf16>(math::soft_cap(round_to<bf16>(dot), 2.0f)));
}

namespace {
/// sum_s softmax(l)_s * v_s in double, with an optional sink column.
double direct_softmax_avg(const std::vector<float>& l, const std::vector<float>& v, bool sink, float sink_logit) {
  double mx = sink ? sink_logit : -HUGE_VAL;
  for (float x : l) mx = std::max<double>(mx, x);
  double den = sink ? std::exp(sink_logit - mx) : 0.0, num = 0.0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    const double e = std::exp(l[i] - mx);
    den += e;
    num += e * v[i];
  }
  return num / den;
}
}  // namespace

TEST_CASE("Online softmax in tiles and merged splits equals the direct softmax", "[backend][kmath]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + rng() % 70;
    std::vector<float> l(n), v(n);
    for (auto& x : l) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    const bool sink = trial % 3 == 0;
    const float sink_logit = nd(rng);
    const double want = direct_softmax_avg(l, v, sink, sink_logit);

    // (a) tiles of `tile` keys, as the prefill kernel: raise the max per tile, then add the tile's weights.
    const std::size_t tile = 1 + rng() % 9;
    kmath::SoftmaxState st = kmath::softmax_init();
    float acc = 0.0f;
    for (std::size_t t0 = 0; t0 < n; t0 += tile) {
      float mx = kmath::neg_inf();
      for (std::size_t s = t0; s < std::min(n, t0 + tile); ++s) mx = std::max(mx, l[s]);
      acc *= kmath::softmax_rescale(st, mx);
      for (std::size_t s = t0; s < std::min(n, t0 + tile); ++s) acc += kmath::softmax_weight(st, l[s]) * v[s];
    }
    if (sink) acc *= kmath::softmax_add_sink(st, sink_logit);
    REQUIRE_FALSE(kmath::softmax_empty(st));
    CHECK(acc / st.l == Approx(want).epsilon(1e-5).margin(1e-5));

    // (b) splits of the key range, each key-at-a-time, merged as the decode kernel's combine step.
    const std::size_t splits = 1 + rng() % 5;
    std::vector<kmath::SoftmaxState> part(splits, kmath::softmax_init());
    std::vector<float> pacc(splits, 0.0f);
    for (std::size_t p = 0; p < splits; ++p) {
      for (std::size_t s = n * p / splits; s < n * (p + 1) / splits; ++s) {
        pacc[p] *= kmath::softmax_rescale(part[p], l[s]);
        pacc[p] += kmath::softmax_weight(part[p], l[s]) * v[s];
      }
    }
    float M = kmath::neg_inf();
    for (const auto& p : part) M = std::max(M, p.m);
    kmath::SoftmaxState all{M, 0.0f};
    float merged = 0.0f;
    for (std::size_t p = 0; p < splits; ++p) {
      const float f = kmath::softmax_merge_factor(part[p].m, M);  // empty splits (m = -inf) weigh 0
      all.l += f * part[p].l;
      merged += f * pacc[p];
    }
    if (sink) merged *= kmath::softmax_add_sink(all, sink_logit);
    CHECK(merged / all.l == Approx(want).epsilon(1e-5).margin(1e-5));
  }
  // Nothing accumulated: empty, and a sink alone gives a zero numerator over a positive denominator.
  kmath::SoftmaxState e = kmath::softmax_init();
  CHECK(kmath::softmax_empty(e));
  CHECK(kmath::softmax_add_sink(e, 0.5f) == 0.0f);
  CHECK(e.l == 1.0f);
  CHECK_FALSE(kmath::softmax_empty(e));
}

TEST_CASE("rotate_pair and rotary_lanes reproduce the reference backend's rotary", "[backend][kmath]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  const std::int64_t M = 3, H = 2, d = 10, r = 8, half = r / 2, P = 5;
  for (RopeLayout layout : {RopeLayout::half_split, RopeLayout::interleaved, RopeLayout::interleaved_to_halves}) {
    for (int rounded = 0; rounded < 2; ++rounded) {
      RotaryTable t;
      t.rot_dims = r;
      t.layout = layout;
      t.round_sincos_to_input = rounded != 0;
      t.post_scale = layout == RopeLayout::interleaved_to_halves ? 1.25f : 1.0f;
      t.cos = Tensor<float, 2>({P, half});
      t.sin = Tensor<float, 2>({P, half});
      for (std::int64_t p = 0; p < P; ++p) {
        for (std::int64_t i = 0; i < half; ++i) {
          t.cos(p, i) = std::cos(0.3f * static_cast<float>(p * (i + 1)));
          t.sin(p, i) = std::sin(0.3f * static_cast<float>(p * (i + 1)));
        }
      }
      Tensor<bf16, 3> x({M, H, d});
      for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = bf16(ud(rng));
      Tensor<std::int32_t, 1> pos({M});
      for (std::int64_t m = 0; m < M; ++m) pos(m) = static_cast<std::int32_t>(m + 1);
      Tensor<bf16, 3> want({M, H, d});
      std::copy(x.data(), x.data() + x.size(), want.data());
      reference::Backend().rotary<bf16>(want, pos, t);
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t h = 0; h < H; ++h) {
          std::vector<float> out(static_cast<std::size_t>(d));
          for (std::int64_t i = r; i < d; ++i) out[static_cast<std::size_t>(i)] = static_cast<float>(x(m, h, i));
          for (std::int64_t i = 0; i < half; ++i) {
            const auto ln = kmath::rotary_lanes(layout, i, half);
            float c = t.cos(pos(m), i), s = t.sin(pos(m), i);
            if (t.round_sincos_to_input) {
              c = round_to<bf16>(c);
              s = round_to<bf16>(s);
            }
            kmath::rotate_pair<bf16>(layout, t.round_sincos_to_input, t.post_scale, static_cast<float>(x(m, h, ln.in_a)),
                                     static_cast<float>(x(m, h, ln.in_b)), c, s, out[static_cast<std::size_t>(ln.out_a)],
                                     out[static_cast<std::size_t>(ln.out_b)]);
          }
          for (std::int64_t i = 0; i < d; ++i) {
            INFO("layout " << static_cast<int>(layout) << " rounded " << rounded << " lane " << i);
            REQUIRE(bf16(out[static_cast<std::size_t>(i)]).bits == want(m, h, i).bits);
          }
        }
      }
    }
  }
}

TEST_CASE("Q8_0 elements dequantise as d * q", "[backend][kmath]") {
  q8_0 blk[2];
  blk[0].d = fp16(0.5f);
  blk[1].d = fp16(-0.25f);
  for (int i = 0; i < 32; ++i) {
    blk[0].qs[i] = static_cast<std::int8_t>(i - 16);
    blk[1].qs[i] = static_cast<std::int8_t>(3 * i - 40);
  }
  CHECK(kmath::q8_0_at(blk, 0) == -8.0f);
  CHECK(kmath::q8_0_at(blk, 31) == 7.5f);
  CHECK(kmath::q8_0_at(blk, 32 + 5) == -0.25f * (15 - 40));
  CHECK(kmath::weight_at(blk, 33) == kmath::q8_0_at(blk, 33));
}

TEST_CASE("ordered_bits is monotone and sample keys sort as the sampler", "[backend][kmath]") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs{-inf, -3e38f, -1.5f, -1e-40f, -0.0f, 0.0f, 1e-40f, 1.0f, 1.0000001f, 3e38f, inf};
  for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
    CHECK(kmath::ordered_bits(xs[i]) <= kmath::ordered_bits(xs[i + 1]));
    CHECK(kmath::ordered_float(kmath::ordered_bits(xs[i])) == xs[i]);
  }
  CHECK(kmath::ordered_bits(-0.0f) == kmath::ordered_bits(0.0f));
  // larger logit first; equal logits: the lower id first
  CHECK(kmath::sample_key(2.0f, 7) > kmath::sample_key(1.0f, 0));
  CHECK(kmath::sample_key(1.0f, 3) > kmath::sample_key(1.0f, 4));
  CHECK(kmath::sample_key_id(kmath::sample_key(-5.0f, 123456)) == 123456);
}

namespace {
/// The host form of the reductions the CUDA sampling kernel performs with a thread block.
struct HostRowReducer {
  const float* l;
  std::int64_t n;
  bool any_nan() const {
    return std::any_of(l, l + n, [](float v) { return std::isnan(v); });
  }
  std::uint64_t max_key() const {
    std::uint64_t k = 0;
    for (std::int64_t i = 0; i < n; ++i) k = std::max(k, kmath::sample_key(l[i], static_cast<std::int32_t>(i)));
    return k;
  }
  std::int64_t count_ge(std::uint64_t t) const {
    std::int64_t c = 0;
    for (std::int64_t i = 0; i < n; ++i) c += kmath::sample_key(l[i], static_cast<std::int32_t>(i)) >= t;
    return c;
  }
  double mass_ge(std::uint64_t t, double m, double temp) const {
    double s = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (kmath::sample_key(l[i], static_cast<std::int32_t>(i)) >= t) s += std::exp((l[i] - m) / temp);
    }
    return s;
  }
};
}  // namespace

TEST_CASE("Sampling by bisection draws the token of the reference backend's sort", "[backend][kmath][sampling]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  reference::Backend ref;
  int draws = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::int64_t V = 1 + static_cast<std::int64_t>(rng() % 300);
    Tensor<float, 2> logits({1, V});
    for (std::int64_t i = 0; i < V; ++i) {
      float v = nd(rng);
      if (trial % 4 == 1) v = std::round(v);  // many ties
      logits(0, i) = v;
    }
    for (float temp : {0.0f, 0.7f, 1.0f, 2.5f}) {
      for (std::int64_t top_k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{5}, V}) {
        for (float top_p : {1.0f, 0.9f, 0.3f}) {
          const SampleOptions o{temp, top_k, top_p};
          Tensor<float, 1> u({1});
          u(0) = ud(rng);
          Tensor<std::int32_t, 1> want({1});
          ref.sample(logits.cview(), o, u.cview(), want.view());
          HostRowReducer r{logits.data(), V};
          INFO("V " << V << " T " << temp << " top_k " << top_k << " top_p " << top_p << " u " << u(0));
          REQUIRE(kmath::sample_by_bisection(r, V, o, u(0)) == want(0));
          ++draws;
        }
      }
    }
  }
  CHECK(draws == 60 * 4 * 4 * 3);
  // A NaN anywhere: -1 from both.
  Tensor<float, 2> bad = Tensor<float, 2>::full({1, 4}, 1.0f);
  bad(0, 2) = std::numeric_limits<float>::quiet_NaN();
  HostRowReducer r{bad.data(), 4};
  CHECK(kmath::sample_by_bisection(r, 4, SampleOptions{}, 0.5f) == -1);
}

TEST_CASE("moe_route_row (the CUDA routing kernel's body) routes as the reference backend", "[backend][kmath][moe]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  reference::Backend ref;
  const std::int64_t M = 20, E = 32;
  Tensor<float, 2> z({M, E});
  Tensor<float, 1> bias({E});
  for (std::int64_t i = 0; i < z.size(); ++i) z.data()[i] = nd(rng);
  for (std::int64_t m = 0; m < 3; ++m) {
    for (std::int64_t e = 0; e < E; e += 2) z(m, e) = 1.0f;  // ties
  }
  for (std::int64_t e = 0; e < E; ++e) bias(e) = 0.1f * nd(rng);
  for (int variant = 0; variant < 4; ++variant) {
    MoeRouting r;
    r.num_experts_per_tok = 2 + variant;
    r.score_softmax = variant == 2;
    r.score = variant == 1 || variant == 3 ? Activation::sigmoid : Activation::linear;
    r.deepseek = variant == 1 || variant == 2;
    r.n_groups = variant == 1 ? 8 : 0;
    r.topk_groups = variant == 1 ? 3 : 0;
    r.softmax_weights = variant == 0;
    r.normalize = variant == 1 || variant == 3;
    r.normalize_eps = variant == 1 ? 1e-20f : 0.0f;
    r.scale = variant == 1 ? 2.5f : 1.0f;
    const bool use_bias = variant == 1 || variant == 3;
    const std::int64_t k = r.num_experts_per_tok;
    Tensor<std::int32_t, 2> idx({M, k});
    Tensor<float, 2> w({M, k}), sc({M, E});
    ref.moe_route<float, float>(z.cview(), use_bias ? bias.cview() : View<const float, 1>(), r, idx.view(), w.view(), sc.view());
    std::vector<float> s(static_cast<std::size_t>(E)), b(static_cast<std::size_t>(E)), scores(static_cast<std::size_t>(E));
    std::vector<std::int32_t> ki(static_cast<std::size_t>(k));
    std::vector<float> kw(static_cast<std::size_t>(k));
    for (std::int64_t m = 0; m < M; ++m) {
      kmath::moe_route_row<float, float>(&z(m, 0), use_bias ? bias.data() : nullptr, r, E, s.data(), b.data(), ki.data(),
                                         kw.data(), scores.data());
      for (std::int64_t j = 0; j < k; ++j) {
        INFO("variant " << variant << " token " << m << " choice " << j);
        REQUIRE(ki[static_cast<std::size_t>(j)] == idx(m, j));
        CHECK(kw[static_cast<std::size_t>(j)] == Approx(w(m, j)).epsilon(1e-6).margin(1e-6));
      }
      // Scores = sigmoid (f32 here, double in the reference) + bias may cancel: judged against the terms' size.
      for (std::int64_t e = 0; e < E; ++e) CHECK(scores[static_cast<std::size_t>(e)] == Approx(sc(m, e)).epsilon(1e-6).margin(1e-6));
    }
  }
}
