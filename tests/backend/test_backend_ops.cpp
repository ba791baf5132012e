// Every operation of the Backend concept on the CPU backend against the scalar reference backend, on random
// inputs in f32 and bf16 (and f16 / Q8_0 weights for products), plus closed forms that hold whatever the backend:
// a fully masked attention row is the plain average of the values, sinks turn it to zero, MoE permutation
// round-trips, sampling frequencies follow the softmax.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/io/convert.hpp"
#include "support/attention_mask.hpp"
#include "support/op_checks.hpp"

using namespace maxtext;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(1234);
  return r;
}

template <class T, int R>
Tensor<T, R> random_tensor(const Shape<R>& shape, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  Tensor<T, R> t(shape);
  for (std::int64_t i = 0; i < t.size(); ++i) t.data()[i] = from_float<T>(nd(rng()));
  return t;
}
template <class T, int R>
Tensor<T, R> copy_of(const Tensor<T, R>& t) {
  Tensor<T, R> c(t.shape());
  std::copy(t.data(), t.data() + t.size(), c.data());
  return c;
}

using test::expect_near;
using test::ulp_rel;

cpu::Backend cpu_be(cpu::Options{2});
reference::Backend ref_be;

}  // namespace

TEMPLATE_TEST_CASE("matmul: CPU equals the reference", "[backend][ops]", float, bf16) {
  rng().seed(1001);  // each case draws the same data whatever runs before it
  using A = TestType;
  for (std::int64_t M : {1, 3, 17}) {  // the CPU backend takes its matrix-vector path below 4 rows
    const std::int64_t K = 64, N = 40;
    const auto x = random_tensor<A, 2>({M, K});
    const auto bias = random_tensor<A, 1>({N});
    Matrix<A> w;
    w.rows = N;
    w.cols = K;
    w.data = random_tensor<A, 2>({N, K}, 0.2f);
    Tensor<A, 2> yc({M, N}), yr({M, N});
    cpu_be.matmul(x.cview(), w, yc.view(), bias.cview());
    ref_be.matmul(x.cview(), w, yr.view(), bias.cview());
    // f32: sums of 64 products in another order (CPU f32, reference f64): ~sqrt(64) ulp of the terms' scale.
    // bf16: one rounding of the product and one of the bias add, each may land on the other side: 2 ulp.
    expect_near(yc, yr, std::is_same_v<A, float> ? 1e-5 : 2 * ulp_rel<A>(), 0.5, "matmul M=" + std::to_string(M));
    Tensor<float, 2> fc({M, N}), fr({M, N});  // f32 output (logits) from A inputs
    cpu_be.matmul(x.cview(), w, fc.view());
    ref_be.matmul(x.cview(), w, fr.view());
    expect_near(fc, fr, 1e-5, 0.5, "matmul to f32");
  }
}

TEST_CASE("matmul with f16, bf16 and Q8_0 weights on f32 activations: CPU equals the reference", "[backend][ops]") {
  rng().seed(1002);  // each case draws the same data whatever runs before it
  const std::int64_t M = 9, K = 64, N = 24;
  const auto x = random_tensor<float, 2>({M, K});
  const auto wf = random_tensor<float, 2>({N, K}, 0.3f);
  Tensor<float, 2> yc({M, N}), yr({M, N});
  auto run = [&](const auto& w, const char* what) {
    cpu_be.matmul(x.cview(), w, yc.view());
    ref_be.matmul(x.cview(), w, yr.view());
    expect_near(yc, yr, 1e-5, 0.5, what);
  };
  Matrix<fp16> wh{io::to_matrix<fp16>(AnyTensor::from(wf), {0, 1}, 1), N, K, nullptr};
  Matrix<bf16> wb{io::to_matrix<bf16>(AnyTensor::from(wf), {0, 1}, 1), N, K, nullptr};
  Matrix<q8_0> wq{io::to_matrix<q8_0>(AnyTensor::from(wf), {0, 1}, 1), N, K, nullptr};
  run(wh, "f16 weights");
  run(wb, "bf16 weights");
  run(wq, "q8_0 weights");
}

TEMPLATE_TEST_CASE("norms: CPU equals the reference", "[backend][ops]", float, bf16) {
  rng().seed(1003);  // each case draws the same data whatever runs before it
  using A = TestType;
  const std::int64_t M = 5, D = 48;
  auto x = random_tensor<A, 2>({M, D}, 2.0f);
  for (std::int64_t i = 0; i < D; ++i) x(1, i) = from_float<A>(3.0f + 0.01f * static_cast<float>(i));  // large mean
  const auto s = random_tensor<A, 1>({D}), b = random_tensor<A, 1>({D});
  Tensor<A, 2> yc({M, D}), yr({M, D});
  cpu_be.rms_norm(x.cview(), s.cview(), 1e-6f, 0.0f, yc.view());
  ref_be.rms_norm(x.cview(), s.cview(), 1e-6f, 0.0f, yr.view());
  expect_near(yc, yr, std::is_same_v<A, float> ? 1e-6 : ulp_rel<A>(), 0.1, "rms_norm");
  cpu_be.rms_norm(x.cview(), s.cview(), 1e-5f, 1.0f, yc.view());
  ref_be.rms_norm(x.cview(), s.cview(), 1e-5f, 1.0f, yr.view());
  expect_near(yc, yr, std::is_same_v<A, float> ? 1e-6 : ulp_rel<A>(), 0.1, "rms_norm offset 1");
  cpu_be.rms_norm(x.cview(), View<const A, 1>(), 1e-5f, 0.0f, yc.view());
  ref_be.rms_norm(x.cview(), View<const A, 1>(), 1e-5f, 0.0f, yr.view());
  expect_near(yc, yr, std::is_same_v<A, float> ? 1e-6 : ulp_rel<A>(), 0.1, "rms_norm without scale");
  // Gpt3LayerNorm: statistics in A, five roundings in a chain; a one-ulp flip of mean or rsqrt moves every output.
  cpu_be.layer_norm(x.cview(), s.cview(), b.cview(), 1e-5f, yc.view());
  ref_be.layer_norm(x.cview(), s.cview(), b.cview(), 1e-5f, yr.view());
  expect_near(yc, yr, std::is_same_v<A, float> ? 1e-5 : 3 * ulp_rel<A>(), 0.5, "layer_norm");
  cpu_be.layer_norm(x.cview(), s.cview(), View<const A, 1>(), 1e-5f, yc.view());
  ref_be.layer_norm(x.cview(), s.cview(), View<const A, 1>(), 1e-5f, yr.view());
  expect_near(yc, yr, std::is_same_v<A, float> ? 1e-5 : 3 * ulp_rel<A>(), 0.5, "layer_norm without bias");
  cpu_be.layer_norm(x.cview(), s.cview(), b.cview(), 1e-5f, yc.view(), true);  // reductions_in_fp32
  ref_be.layer_norm(x.cview(), s.cview(), b.cview(), 1e-5f, yr.view(), true);
  expect_near(yc, yr, std::is_same_v<A, float> ? 1e-5 : 3 * ulp_rel<A>(), 0.5, "layer_norm, statistics in f32");
}

TEMPLATE_TEST_CASE("element-wise ops: CPU equals the reference", "[backend][ops]", float, bf16) {
  rng().seed(1004);  // each case draws the same data whatever runs before it
  using A = TestType;
  const std::int64_t M = 4, D = 37;
  const auto a = random_tensor<A, 2>({M, D}, 2.0f), b = random_tensor<A, 2>({M, D}, 2.0f);
  Tensor<A, 2> yc({M, D}), yr({M, D});
  const double tol = std::is_same_v<A, float> ? 1e-6 : ulp_rel<A>();
  cpu_be.add(a.cview(), b.cview(), yc.view());
  ref_be.add(a.cview(), b.cview(), yr.view());
  expect_near(yc, yr, 0.0, 1.0, "add");  // one rounding of an exact f32 sum: identical
  for (Activation act : {Activation::linear, Activation::relu, Activation::gelu, Activation::gelu_exact, Activation::silu,
                         Activation::sigmoid, Activation::tanh, Activation::softplus, Activation::sqrtsoftplus}) {
    cpu_be.activation(a.cview(), act, View<const A, 2>(), Activation::linear, yc.view());
    ref_be.activation(a.cview(), act, View<const A, 2>(), Activation::linear, yr.view());
    // Judged against the inputs' scale (1): the f32 GELU forms cancel (1 + tanh(x) -> 0) for x << 0, where the
    // output is tiny and its f32 relative error large in any f32 implementation (MaxText's included).
    expect_near(yc, yr, 2 * tol, 1.0, std::string("activation ") + std::string(activation_name(act)));
    cpu_be.activation(a.cview(), act, b.cview(), Activation::linear, yc.view());
    ref_be.activation(a.cview(), act, b.cview(), Activation::linear, yr.view());
    expect_near(yc, yr, 4 * tol, 1.0, std::string("gated activation ") + std::string(activation_name(act)));
    cpu_be.activation(a.cview(), act, b.cview(), Activation::silu, yc.view(), false);  // activations_in_float32
    ref_be.activation(a.cview(), act, b.cview(), Activation::silu, yr.view(), false);
    expect_near(yc, yr, 4 * tol, 1.0, std::string("f32 gated activation ") + std::string(activation_name(act)));
  }
  auto xc = copy_of(a), xr = copy_of(a);
  cpu_be.scale(xc.view(), 2.8284271f, true);
  ref_be.scale(xr.view(), 2.8284271f, true);
  expect_near(xc, xr, 0.0, 1.0, "scale (divide)");
  cpu_be.scale(xc.view(), 0.3f);
  ref_be.scale(xr.view(), 0.3f);
  expect_near(xc, xr, 0.0, 1.0, "scale");
  cpu_be.soft_cap(xc.view(), 1.5f);
  ref_be.soft_cap(xr.view(), 1.5f);
  expect_near(xc, xr, tol, 1e-2, "soft_cap");
  // scale_rows: row m times round(sigmoid(g[m])), computed on the backend (Qwen3-Next's shared-expert gate).
  const auto gate = random_tensor<A, 2>({M, 1}, 2.0f);
  auto gc = copy_of(a), gr = copy_of(a);
  cpu_be.scale_rows(gc.view(), gate.cview(), Activation::sigmoid);
  ref_be.scale_rows(gr.view(), gate.cview(), Activation::sigmoid);
  expect_near(gc, gr, 2 * tol, 1.0, "scale_rows");
  const float f2 = round_to<A>(1.0f / (1.0f + std::exp(-to_float(gate(2, 0)))));
  CHECK(to_float(gr(2, 3)) == Approx(to_float(from_float<A>(to_float(a(2, 3)) * f2))).epsilon(2 * tol));
  const auto gate32 = random_tensor<float, 2>({M, 1}, 2.0f);  // f32 routing weights (Llama 4's expert inputs)
  cpu_be.scale_rows(gc.view(), gate32.cview(), Activation::sigmoid);
  ref_be.scale_rows(gr.view(), gate32.cview(), Activation::sigmoid);
  expect_near(gc, gr, 4 * tol, 1.0, "scale_rows (f32 gate)");
  Tensor<float, 2> fc({M, D}), fr({M, D});
  cpu_be.convert(a.cview(), fc.view());
  ref_be.convert(a.cview(), fr.view());
  expect_near(fc, fr, 0.0, 1.0, "convert");
  // strided copy: a transposed view
  Tensor<A, 2> tc({D, M}), tr({D, M});
  cpu_be.copy(a.cview().transpose(0, 1), tc.view());
  ref_be.copy(a.cview().transpose(0, 1), tr.view());
  expect_near(tc, tr, 0.0, 1.0, "copy");
  CHECK(to_float(tc(5, 2)) == to_float(a(2, 5)));
}

TEMPLATE_TEST_CASE("embed and rotary: CPU equals the reference", "[backend][ops]", float, bf16) {
  rng().seed(1005);  // each case draws the same data whatever runs before it
  using A = TestType;
  Matrix<A> table;
  table.rows = 11;
  table.cols = 12;
  table.data = random_tensor<A, 2>({11, 12});
  Tensor<std::int32_t, 1> ids({4});
  ids(0) = 3, ids(1) = 0, ids(2) = 10, ids(3) = 3;
  Tensor<A, 2> ec({4, 12}), er({4, 12});
  cpu_be.embed(table, ids.cview(), ec.view());
  ref_be.embed(table, ids.cview(), er.view());
  expect_near(ec, er, 0.0, 1.0, "embed");

  const std::int64_t M = 6, H = 3, d = 16;
  for (RopeLayout layout : {RopeLayout::half_split, RopeLayout::interleaved, RopeLayout::interleaved_to_halves}) {
    for (std::int64_t r : {d, std::int64_t{8}}) {  // full and partial rotary
      RotaryTable t;
      t.rot_dims = r;
      t.layout = layout;
      t.round_sincos_to_input = layout == RopeLayout::half_split;
      t.post_scale = layout == RopeLayout::interleaved_to_halves ? 1.3f : 1.0f;
      t.cos = Tensor<float, 2>({20, r / 2});
      t.sin = Tensor<float, 2>({20, r / 2});
      for (std::int64_t p = 0; p < 20; ++p) {
        for (std::int64_t i = 0; i < r / 2; ++i) {
          const float ang = static_cast<float>(p) / std::pow(10000.0f, 2.0f * static_cast<float>(i) / static_cast<float>(r));
          t.cos(p, i) = std::cos(ang);
          t.sin(p, i) = std::sin(ang);
        }
      }
      Tensor<std::int32_t, 1> pos({M});
      for (std::int64_t m = 0; m < M; ++m) pos(m) = static_cast<std::int32_t>(3 * m + 1);
      auto xc = random_tensor<A, 3>({M, H, d});
      auto xr = copy_of(xc);
      cpu_be.rotary(xc.view(), pos.cview(), t);
      ref_be.rotary(xr.view(), pos.cview(), t);
      expect_near(xc, xr, std::is_same_v<A, float> ? 1e-6 : ulp_rel<A>(), 0.1,
                  "rotary layout " + std::to_string(static_cast<int>(layout)) + " r " + std::to_string(r));
    }
  }
}

namespace {
struct AttnCase {
  AttnCase(std::int64_t b, std::int64_t t, std::int64_t n, std::int64_t k, std::int64_t dq, std::int64_t dv, std::int64_t s)
      : B(b), T(t), N(n), K(k), Dq(dq), Dv(dv), S(s) {}
  std::int64_t B, T, N, K, Dq, Dv, S;
  bool causal = true;
  std::int64_t window = 0, chunk = 0;
  bool segments = false, sinks = false;
  float soft_cap = 0.0f;
  bool f32_qk = false, f32_logits = false;
  std::vector<std::int32_t> q_start, kv_len;
  // f32: the f32 softmax and the double two-pass softmax differ by ~30 f32 ulp over a few keys (exp and rounding
  // errors). Each output is a sum over the keys in 8 or 16 f32 lanes, so its rounding error grows about as keys / 16
  // ulp of the values' size: several hundred keys need ~4x more (1.4e-5 seen with clang -O1 at 578 keys).
  double f32_rel = 1e-5;
};

/// One decode step in three rows at cache lengths 1, 8 and 16 (GQA 1, head size 16).
AttnCase decode_rows() {
  AttnCase c{3, 1, 4, 4, 16, 16, 16};
  c.q_start = {0, 7, 15};
  c.kv_len = {1, 8, 16};
  return c;
}

/// A case's cache lengths and segment ids (keys 0-4 in segment 1, 5-8 in 2, 12 in none (-1), the rest in 3; each
/// query in its position's segment), and the AttentionMask over them.
struct CaseMask {
  Tensor<std::int32_t, 1> q_start, kv_len;
  Tensor<std::int32_t, 2> qseg, kseg;
  AttentionMask mask;
  explicit CaseMask(const AttnCase& c) : q_start({c.B}), kv_len({c.B}), qseg({c.B, c.T}), kseg({c.B, c.S}) {
    for (std::int64_t b = 0; b < c.B; ++b) {
      q_start(b) = c.q_start[static_cast<std::size_t>(b)];
      kv_len(b) = c.kv_len[static_cast<std::size_t>(b)];
      for (std::int64_t s = 0; s < c.S; ++s) kseg(b, s) = static_cast<std::int32_t>(s < 5 ? 1 : (s < 9 ? 2 : (s == 12 ? -1 : 3)));
      for (std::int64_t t = 0; t < c.T; ++t) qseg(b, t) = kseg(b, std::min(c.S - 1, q_start(b) + t));
    }
    mask = test::attention_mask(q_start.cview(), kv_len.cview(), qseg.cview(), kseg.cview(),
                                {c.segments, c.causal, c.window, c.chunk});
  }
  CaseMask(const CaseMask&) = delete;  // mask views the tensors above
  CaseMask& operator=(const CaseMask&) = delete;
};

template <class A>
void check_attention(const AttnCase& c, const std::string& what) {
  const auto q = random_tensor<A, 4>({c.B, c.T, c.N, c.Dq}, 1.5f);
  const auto k = random_tensor<A, 4>({c.B, c.S, c.K, c.Dq}, 1.5f);
  const auto v = random_tensor<A, 4>({c.B, c.S, c.K, c.Dv});
  const auto sinks = random_tensor<A, 1>({c.N});
  const CaseMask cm(c);
  const AttentionMask& mask = cm.mask;
  AttentionOptions opt;
  opt.soft_cap = c.soft_cap;
  opt.float32_qk_product = c.f32_qk;
  opt.float32_logits = c.f32_logits;
  Tensor<A, 4> oc({c.B, c.T, c.N, c.Dv}), orf({c.B, c.T, c.N, c.Dv});
  const View<const A, 1> sk = c.sinks ? sinks.cview() : View<const A, 1>();
  cpu_be.attention(q.cview(), k.cview(), v.cview(), mask, opt, sk, oc.view());
  ref_be.attention(q.cview(), k.cview(), v.cview(), mask, opt, sk, orf.view());
  // bf16: logits are rounded to bf16 by both before the softmax, the output once: a rounding flip, 1-2 ulp.
  expect_near(oc, orf, std::is_same_v<A, float> ? c.f32_rel : 2 * ulp_rel<A>(), 0.3, what);
}
}  // namespace

TEMPLATE_TEST_CASE("attention: CPU equals the reference (masks, GQA, caps, sinks, decode)", "[backend][ops][attention]",
                   float, bf16) {
  rng().seed(1006);  // each case draws the same data whatever runs before it
  using A = TestType;
  AttnCase base{2, 6, 4, 2, 8, 8, 16};
  base.q_start = {0, 3};
  base.kv_len = {6, 9};
  check_attention<A>(base, "causal prefill, GQA 2");
  AttnCase c = base;
  c.segments = true;
  check_attention<A>(c, "segments");
  c = base;
  c.window = 3;
  check_attention<A>(c, "sliding window 3");
  c = base;
  c.chunk = 4;
  check_attention<A>(c, "chunk 4");
  c = base;
  c.soft_cap = 2.0f;
  check_attention<A>(c, "soft cap");
  c.f32_logits = true;
  check_attention<A>(c, "soft cap, f32 logits");
  c.f32_qk = true;
  check_attention<A>(c, "soft cap, f32 qk product");
  c = base;
  c.sinks = true;
  check_attention<A>(c, "sinks");
  c = base;
  c.Dv = 5;
  c.N = 6;
  c.K = 1;
  check_attention<A>(c, "MQA, Dv != Dq");
  AttnCase dec = decode_rows();
  check_attention<A>(dec, "decode step");
  dec.segments = true;  // row 2's query is in segment 3; keys 12 (segment -1) is never visible
  check_attention<A>(dec, "decode step with segments");
  // Enough work for both threads: one query, so the kv heads are split into chunks ([0, 3) and [3, 5)).
  AttnCase lng{1, 1, 10, 5, 32, 32, 600};
  lng.q_start = {577};
  lng.kv_len = {578};
  lng.f32_rel = 4e-5;
  check_attention<A>(lng, "decode step, long cache, heads in two chunks");
  lng.segments = true;
  check_attention<A>(lng, "decode step, long cache, heads in two chunks, segments");
  // The one-query kernel for many queries on both threads (a soft cap keeps it from the tiled kernel).
  AttnCase capped{1, 40, 4, 2, 32, 32, 300};
  capped.q_start = {250};
  capped.kv_len = {290};
  capped.soft_cap = 2.0f;
  check_attention<A>(capped, "soft cap, 40 queries over 290 keys, two threads");
  AttnCase nc = base;
  nc.causal = false;
  check_attention<A>(nc, "bidirectional");
  // Four query heads per key load (AVX-512: block_logits4 when G is a multiple of 4; the last, partial key block
  // per head): G = 4, and G = 8 (two groups of four) with a soft cap, over two rows of different lengths.
  AttnCase g4{1, 1, 8, 2, 32, 32, 120};
  g4.q_start = {100};
  g4.kv_len = {101};
  g4.f32_rel = 2e-5;
  check_attention<A>(g4, "decode step, GQA 4");
  AttnCase g8{2, 1, 16, 2, 64, 64, 200};
  g8.q_start = {150, 40};
  g8.kv_len = {151, 41};
  g8.soft_cap = 2.0f;
  g8.f32_rel = 2e-5;
  check_attention<A>(g8, "decode step, GQA 8, soft cap");
}

namespace {
/// Attention with a cache of type KV under f32 activations. The oracle: the same backend with an f32 cache holding
/// the KV-rounded keys and values (every kernel reads cache rows as f32, so the results must be identical to the
/// bit), and the reference backend within the f32 tolerance.
template <class KV>
void check_narrow_cache(const AttnCase& c, const std::string& what) {
  const auto q = random_tensor<float, 4>({c.B, c.T, c.N, c.Dq}, 1.5f);
  const auto kw = random_tensor<KV, 4>({c.B, c.S, c.K, c.Dq}, 1.5f);
  const auto vw = random_tensor<KV, 4>({c.B, c.S, c.K, c.Dv});
  Tensor<float, 4> kf(kw.shape()), vf(vw.shape());
  for (std::int64_t i = 0; i < kf.size(); ++i) kf.data()[i] = to_float(kw.data()[i]);
  for (std::int64_t i = 0; i < vf.size(); ++i) vf.data()[i] = to_float(vw.data()[i]);
  const auto sinks = random_tensor<float, 1>({c.N});
  const CaseMask cm(c);
  const AttentionMask& mask = cm.mask;
  AttentionOptions opt;
  opt.soft_cap = c.soft_cap;
  const View<const float, 1> sk = c.sinks ? sinks.cview() : View<const float, 1>();
  Tensor<float, 4> narrow_cpu({c.B, c.T, c.N, c.Dv}), f32_cpu(narrow_cpu.shape()), narrow_ref(narrow_cpu.shape()),
      f32_ref(narrow_cpu.shape());
  cpu_be.attention(q.cview(), kw.cview(), vw.cview(), mask, opt, sk, narrow_cpu.view());
  cpu_be.attention(q.cview(), kf.cview(), vf.cview(), mask, opt, sk, f32_cpu.view());
  ref_be.attention(q.cview(), kw.cview(), vw.cview(), mask, opt, sk, narrow_ref.view());
  ref_be.attention(q.cview(), kf.cview(), vf.cview(), mask, opt, sk, f32_ref.view());
  std::int64_t cpu_diff = 0, ref_diff = 0;
  for (std::int64_t i = 0; i < narrow_cpu.size(); ++i) {
    cpu_diff += narrow_cpu.data()[i] != f32_cpu.data()[i];
    ref_diff += narrow_ref.data()[i] != f32_ref.data()[i];
  }
  INFO(what);
  CHECK(cpu_diff == 0);
  CHECK(ref_diff == 0);
  expect_near(narrow_cpu, narrow_ref, c.f32_rel, 0.3, what + ": CPU vs reference");
}
}  // namespace

TEMPLATE_TEST_CASE("attention over an f16 / bf16 cache with f32 activations: rows read as the cache holds them",
                   "[backend][ops][attention]", fp16, bf16) {
  rng().seed(1008);  // each case draws the same data whatever runs before it
  using KV = TestType;
  AttnCase base{2, 6, 4, 2, 12, 12, 16};  // head size 12, not a multiple of a batch: the per-key kernel
  base.q_start = {0, 3};
  base.kv_len = {6, 9};
  check_narrow_cache<KV>(base, "causal prefill, GQA 2, head size 12");
  base.segments = true;
  base.sinks = true;
  check_narrow_cache<KV>(base, "segments and sinks");
  check_narrow_cache<KV>(decode_rows(), "decode step");
  // Whole key blocks ahead of the current one: the decode kernel's prefetch hints over a 2-byte cache.
  AttnCase lng{1, 1, 8, 2, 64, 64, 600};
  lng.q_start = {577};
  lng.kv_len = {578};
  lng.f32_rel = 4e-5;
  check_narrow_cache<KV>(lng, "decode step, 578 keys");
  // The query-tiled prefill kernel (T >= kTiledMinRows, head sizes multiples of 16, no soft cap) ...
  AttnCase tiled{1, 40, 4, 2, 32, 32, 300};
  tiled.q_start = {250};
  tiled.kv_len = {290};
  tiled.f32_rel = 4e-5;
  check_narrow_cache<KV>(tiled, "tiled prefill, 40 queries over 290 keys");
  // ... and, with a soft cap, the one-query kernel for the same queries.
  tiled.soft_cap = 2.0f;
  check_narrow_cache<KV>(tiled, "soft cap, 40 queries over 290 keys");
}

TEST_CASE("attention: fully masked rows average the values, with sinks they are zero", "[backend][ops][attention]") {
  rng().seed(1007);  // each case draws the same data whatever runs before it
  for (int which = 0; which < 2; ++which) {
    const std::int64_t S = 4, D = 3;
    Tensor<float, 4> q = random_tensor<float, 4>({1, 1, 1, D}), k = random_tensor<float, 4>({1, S, 1, D}),
                     v = random_tensor<float, 4>({1, S, 1, D});
    Tensor<std::int32_t, 1> qs = Tensor<std::int32_t, 1>::full({1}, 3), kl = Tensor<std::int32_t, 1>::full({1}, 4);
    Tensor<std::int32_t, 2> qseg = Tensor<std::int32_t, 2>::full({1, 1}, 7), kseg = Tensor<std::int32_t, 2>::full({1, S}, 1);
    AttentionMask m;  // segment 7 sees no key
    m.q_start = qs.cview();
    m.kv_len = kl.cview();
    m.q_segment = qseg.cview();
    m.kv_segment = kseg.cview();
    Tensor<float, 1> sinks = Tensor<float, 1>::full({1}, 0.25f);
    const View<const float, 1> sk = which ? sinks.cview() : View<const float, 1>();
    Tensor<float, 4> oc({1, 1, 1, D}), orf({1, 1, 1, D});
    cpu_be.attention(q.cview(), k.cview(), v.cview(), m, AttentionOptions{}, sk, oc.view());
    ref_be.attention(q.cview(), k.cview(), v.cview(), m, AttentionOptions{}, sk, orf.view());
    for (std::int64_t d = 0; d < D; ++d) {
      double mean = 0.0;
      for (std::int64_t s = 0; s < S; ++s) mean += v(0, s, 0, d) / static_cast<double>(S);
      const double want = which ? 0.0 : mean;
      CHECK(oc(0, 0, 0, d) == Approx(want).margin(1e-6));
      CHECK(orf(0, 0, 0, d) == Approx(want).margin(1e-6));
    }
  }
}

TEMPLATE_TEST_CASE("softmax: CPU equals the reference and rows sum to one", "[backend][ops]", float, bf16) {
  rng().seed(1008);  // each case draws the same data whatever runs before it
  using A = TestType;
  const auto x = random_tensor<A, 2>({3, 50}, 4.0f);
  Tensor<float, 2> yc({3, 50}), yr({3, 50});
  cpu_be.softmax(x.cview(), yc.view());
  ref_be.softmax(x.cview(), yr.view());
  expect_near(yc, yr, 1e-5, 1e-3, "softmax");
  for (std::int64_t r = 0; r < 3; ++r) {
    double s = 0;
    for (std::int64_t i = 0; i < 50; ++i) s += yr(r, i);
    CHECK(s == Approx(1.0).epsilon(1e-6));
  }
}

TEST_CASE("sample: CPU equals the reference, frequencies follow the softmax", "[backend][ops][sampling]") {
  rng().seed(1009);  // each case draws the same data whatever runs before it
  const std::int64_t B = 64, V = 200;
  auto logits = random_tensor<float, 2>({B, V}, 2.0f);
  for (std::int64_t i = 0; i < V; i += 7) logits(3, i) = 1.0f;  // ties
  Tensor<float, 1> u({B});
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (std::int64_t b = 0; b < B; ++b) u(b) = ud(rng());
  for (const SampleOptions o : {SampleOptions{0.0f, 0, 1.0f}, SampleOptions{1.0f, 0, 1.0f}, SampleOptions{0.8f, 40, 1.0f},
                                SampleOptions{1.2f, 0, 0.9f}, SampleOptions{0.5f, 10, 0.5f}, SampleOptions{1.0f, 1, 1.0f}}) {
    Tensor<std::int32_t, 1> ic({B}), ir({B});
    cpu_be.sample(logits.cview(), o, u.cview(), ic.view());
    ref_be.sample(logits.cview(), o, u.cview(), ir.view());
    for (std::int64_t b = 0; b < B; ++b) {
      INFO("row " << b << " T " << o.temperature << " k " << o.top_k << " p " << o.top_p);
      REQUIRE(ic(b) == ir(b));
      REQUIRE((ir(b) >= 0 && ir(b) < V));
    }
  }
  // A stratified grid of u over one row of 4 logits reproduces softmax(l / T) to within the grid's resolution.
  Tensor<float, 2> row({1, 4});
  const float l[4] = {0.0f, 1.0f, 2.0f, -1.0f};
  for (int i = 0; i < 4; ++i) row(0, i) = l[i];
  const int n = 4000;
  std::vector<int> count(4, 0);
  Tensor<float, 1> uu({1});
  Tensor<std::int32_t, 1> id({1});
  for (int i = 0; i < n; ++i) {
    uu(0) = (static_cast<float>(i) + 0.5f) / static_cast<float>(n);
    ref_be.sample(row.cview(), SampleOptions{2.0f, 0, 1.0f}, uu.cview(), id.view());
    ++count[static_cast<std::size_t>(id(0))];
  }
  double z = 0;
  for (float x : l) z += std::exp(x / 2.0);
  for (int i = 0; i < 4; ++i) CHECK(count[static_cast<std::size_t>(i)] / static_cast<double>(n) == Approx(std::exp(l[i] / 2.0) / z).margin(1.0 / n));
}

TEMPLATE_TEST_CASE("MoE permute / unpermute: CPU equals the reference and round-trips", "[backend][ops][moe]", float, bf16) {
  rng().seed(1010);  // each case draws the same data whatever runs before it
  using A = TestType;
  const std::int64_t M = 7, k = 3, E = 5, D = 6;
  const auto x = random_tensor<A, 2>({M, D});
  Tensor<std::int32_t, 2> experts({M, k});
  for (std::int64_t t = 0; t < M; ++t) {
    for (std::int64_t j = 0; j < k; ++j) experts(t, j) = static_cast<std::int32_t>((t * 2 + j * 3) % E);
  }
  Tensor<A, 2> rc({M * k, D}), rr({M * k, D});
  Tensor<std::int32_t, 2> sc({M, k}), sr({M, k});
  Tensor<std::int32_t, 1> oc({E + 1}), orf({E + 1});
  cpu_be.moe_permute(x.cview(), experts.cview(), E, rc.view(), sc.view(), oc.view());
  ref_be.moe_permute(x.cview(), experts.cview(), E, rr.view(), sr.view(), orf.view());
  expect_near(rc, rr, 0.0, 1.0, "permuted rows");
  for (std::int64_t e = 0; e <= E; ++e) CHECK(oc(e) == orf(e));
  for (std::int64_t t = 0; t < M; ++t) {
    for (std::int64_t j = 0; j < k; ++j) {
      CHECK(sc(t, j) == sr(t, j));
      const std::int32_t e = experts(t, j);
      CHECK((sr(t, j) >= orf(e) && sr(t, j) < orf(e + 1)));  // the row lies in its expert's group
    }
  }
  CHECK(orf(E) == M * k);
  // Weights summing to one bring every token back.
  Tensor<float, 2> w({M, k});
  for (std::int64_t t = 0; t < M; ++t) {
    w(t, 0) = 0.5f;
    w(t, 1) = 0.25f;
    w(t, 2) = 0.25f;
  }
  Tensor<A, 2> yc({M, D}), yr({M, D});
  cpu_be.moe_unpermute(rc.cview(), sc.cview(), w.cview(), yc.view());
  ref_be.moe_unpermute(rr.cview(), sr.cview(), w.cview(), yr.view());
  expect_near(yc, yr, 0.0, 1.0, "unpermute");
  expect_near(yr, x, 0.0, 1.0, "round trip");
}

namespace {
/// Routing configurations of the MaxText blocks (moe.md): Mixtral, DeepSeek-V3 (groups), DeepSeek-V2, biased
/// non-DeepSeek.
std::vector<MoeRouting> routings() {
  std::vector<MoeRouting> rs;
  MoeRouting mixtral;
  mixtral.num_experts_per_tok = 2;
  mixtral.softmax_weights = true;
  rs.push_back(mixtral);
  MoeRouting v3;
  v3.num_experts_per_tok = 4;
  v3.score = Activation::sigmoid;
  v3.deepseek = true;
  v3.n_groups = 4;
  v3.topk_groups = 2;
  v3.normalize = true;
  v3.normalize_eps = 1e-20f;
  v3.scale = 2.5f;
  rs.push_back(v3);
  MoeRouting v2;
  v2.num_experts_per_tok = 3;
  v2.score_softmax = true;
  v2.deepseek = true;
  rs.push_back(v2);
  MoeRouting biased;
  biased.num_experts_per_tok = 2;
  biased.score = Activation::sigmoid;
  biased.normalize = true;
  rs.push_back(biased);
  return rs;
}
}  // namespace

TEMPLATE_TEST_CASE("moe_route, gather_rows, scatter_add_rows: CPU equals the reference", "[backend][ops][moe]", float, bf16) {
  rng().seed(1011);  // each case draws the same data whatever runs before it
  using G = TestType;
  const std::int64_t M = 9, E = 16;
  const auto z = random_tensor<G, 2>({M, E}, 2.0f);
  const auto bias = random_tensor<G, 1>({E}, 0.3f);
  for (const MoeRouting& r : routings()) {
    const std::int64_t k = r.num_experts_per_tok;
    Tensor<std::int32_t, 2> ic({M, k}), ir({M, k});
    Tensor<float, 2> wc({M, k}), wr({M, k}), sc({M, E}), sr({M, E});
    const View<const G, 1> b = r.score != Activation::linear ? bias.cview() : View<const G, 1>();
    cpu_be.moe_route<G, G>(z.cview(), b, r, ic.view(), wc.view(), sc.view());
    ref_be.moe_route<G, G>(z.cview(), b, r, ir.view(), wr.view(), sr.view());
    for (std::int64_t i = 0; i < ic.size(); ++i) REQUIRE(ic.data()[i] == ir.data()[i]);
    expect_near(wc, wr, std::is_same_v<G, float> ? 1e-6 : ulp_rel<G>(), 0.1, "routing weights");
    // Scores are sigmoid(z) + bias: judged against the size of those terms (0.5), as the sum may cancel.
    expect_near(sc, sr, std::is_same_v<G, float> ? 1e-6 : ulp_rel<G>(), 0.5, "routing scores");
  }
  const auto x = random_tensor<G, 2>({M, 8});
  Tensor<std::int32_t, 1> rows({4});
  rows(0) = 7, rows(1) = 0, rows(2) = 3, rows(3) = 8;
  Tensor<G, 2> gc({4, 8}), gr({4, 8});
  cpu_be.gather_rows(x.cview(), rows.cview(), gc.view());
  ref_be.gather_rows(x.cview(), rows.cview(), gr.view());
  expect_near(gc, gr, 0.0, 1.0, "gather_rows");
  Tensor<float, 1> w({4});
  for (int i = 0; i < 4; ++i) w(i) = 0.25f * static_cast<float>(i + 1);
  auto ac = random_tensor<float, 2>({M, 8});
  auto ar = copy_of(ac);
  cpu_be.scatter_add_rows(gc.cview(), rows.cview(), w.cview(), ac.view());
  ref_be.scatter_add_rows(gr.cview(), rows.cview(), w.cview(), ar.view());
  expect_near(ac, ar, 1e-6, 1.0, "scatter_add_rows");
}

TEMPLATE_TEST_CASE("head_matmul: CPU equals the reference", "[backend][ops][mla]", float, bf16) {
  rng().seed(1012);  // each case draws the same data whatever runs before it
  using A = TestType;
  const std::int64_t M = 5, H = 3, stride = 20, off = 4, R = 6, C = 32;  // per head: R rows of C columns
  Matrix<A> w{random_tensor<A, 2>({H * stride, C}, 0.3f), H * stride, C, nullptr};
  const auto xa = random_tensor<A, 3>({M, H, C});
  Tensor<A, 3> yc({M, H, R}), yr({M, H, R});
  cpu_be.head_matmul(xa.cview(), w, stride, off, false, yc.view());
  ref_be.head_matmul(xa.cview(), w, stride, off, false, yr.view());
  expect_near(yc, yr, std::is_same_v<A, float> ? 1e-5 : ulp_rel<A>(), 0.5, "head_matmul");
  const auto xb = random_tensor<A, 3>({M, H, R});
  Tensor<A, 3> zc({M, H, C}), zr({M, H, C});
  cpu_be.head_matmul(xb.cview(), w, stride, off, true, zc.view());
  ref_be.head_matmul(xb.cview(), w, stride, off, true, zr.view());
  expect_near(zc, zr, std::is_same_v<A, float> ? 1e-5 : ulp_rel<A>(), 0.5, "head_matmul transposed");
}

TEMPLATE_TEST_CASE("mHC stream ops (mhc_maps, stream_sum, stream_mix): CPU equals the reference", "[backend][ops][mhc]",
                   float, bf16) {
  rng().seed(1013);  // each case draws the same data whatever runs before it
  using A = TestType;
  const std::int64_t M = 6, D = 37;
  const double tol = std::is_same_v<A, float> ? 1e-5 : ulp_rel<A>();
  for (const std::int64_t k : {2, 4}) {
    for (const bool lite : {false, true}) {
      MhcOptions o;
      o.k = k;
      o.lite = lite;
      o.sinkhorn_iterations = 20;
      const std::int64_t R = mhc_res_width(o);
      INFO("k " << k << (lite ? " lite" : " Sinkhorn"));
      const auto hp = random_tensor<A, 2>({M, k}, 2.0f), hq = random_tensor<A, 2>({M, k}, 2.0f),
                 hr = random_tensor<A, 2>({M, R}, 2.0f);
      const auto sc = random_tensor<A, 1>({3}, 1.0f), pb = random_tensor<A, 1>({k}), qb = random_tensor<A, 1>({k}),
                 rb = random_tensor<A, 1>({R});
      const MhcCoefficients<A> c{sc.data(), sc.data() + 1, sc.data() + 2, pb.data(), qb.data(), rb.data()};
      Tensor<A, 2> pc({M, k}), pr({M, k}), qc({M, k}), qr({M, k}), rc({M, k * k}), rr({M, k * k});
      cpu_be.mhc_maps(hp.cview(), hq.cview(), hr.cview(), c, o, pc.view(), qc.view(), rc.view());
      ref_be.mhc_maps(hp.cview(), hq.cview(), hr.cview(), c, o, pr.view(), qr.view(), rr.view());
      // The same roundings in f32 (CPU) and double (reference): a bf16 result may land one ulp apart.
      expect_near(pc, pr, tol, 1.0, "pre");
      expect_near(qc, qr, tol, 1.0, "post");
      expect_near(rc, rr, tol, 0.1, "res");
      // Every mapping is doubly stochastic to Sinkhorn's precision (lite: exactly, up to rounding of the weights).
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t i = 0; i < k; ++i) {
          double row = 0, col = 0;
          for (std::int64_t j = 0; j < k; ++j) {
            row += to_float(rr(m, i * k + j));
            col += to_float(rr(m, j * k + i));
          }
          CHECK(row == Approx(1.0).margin(std::is_same_v<A, float> ? 1e-3 : 0.03));
          CHECK(col == Approx(1.0).margin(std::is_same_v<A, float> ? 1e-3 : 0.03));
        }
      }
      const auto x = random_tensor<A, 2>({M, k * D}), f = random_tensor<A, 2>({M, D});
      Tensor<A, 2> sc_({M, D}), sr({M, D});
      cpu_be.stream_sum(x.cview(), pr.cview(), sc_.view());
      ref_be.stream_sum(x.cview(), pr.cview(), sr.view());
      expect_near(sc_, sr, tol, 1.0, "weighted stream_sum");
      cpu_be.stream_sum(x.cview(), View<const A, 2>(), sc_.view());
      ref_be.stream_sum(x.cview(), View<const A, 2>(), sr.view());
      expect_near(sc_, sr, tol, 1.0, "stream_sum");
      CHECK(to_float(sr(1, 3)) == Approx([&] {
              double s = 0;
              for (std::int64_t i = 0; i < k; ++i) s += to_float(x(1, i * D + 3));
              return s;
            }()).epsilon(tol));
      Tensor<A, 2> yc({M, k * D}), yr({M, k * D});
      cpu_be.stream_mix(x.cview(), rr.cview(), f.cview(), qr.cview(), yc.view());
      ref_be.stream_mix(x.cview(), rr.cview(), f.cview(), qr.cview(), yr.view());
      expect_near(yc, yr, 2 * tol, 1.0, "stream_mix");
    }
  }
}

TEMPLATE_TEST_CASE("Engram gate (engram_gate): CPU equals the reference, and the gate is the formula's",
                   "[backend][ops][engram]", float, bf16) {
  rng().seed(1019);  // each case draws the same data whatever runs before it
  using A = TestType;
  const double tol = std::is_same_v<A, float> ? 1e-5 : ulp_rel<A>();
  for (const std::int64_t G : {1, 4}) {
    INFO(G << " streams");
    const std::int64_t M = 5, D = 67;
    auto q = random_tensor<A, 2>({M, G * D}), k = random_tensor<A, 2>({M, G * D});
    const auto v = random_tensor<A, 2>({M, D});
    for (std::int64_t d = 0; d < D; ++d) q(2, d) = from_float<A>(0.0f);  // a zero dot product: sign 0, gate 1/2
    Tensor<A, 2> yc({M, G * D}), yr({M, G * D});
    cpu_be.engram_gate(q.cview(), k.cview(), v.cview(), yc.view());
    ref_be.engram_gate(q.cview(), k.cview(), v.cview(), yr.view());
    expect_near(yc, yr, tol, 1.0, "engram_gate");
    // Row 1, last stream, from the formula in double: sigmoid(sign(s) sqrt(max(|s|, 1e-6))), s = q.k / sqrt(D).
    const std::int64_t g = G - 1;
    double dot = 0;
    for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(to_float(q(1, g * D + d))) * to_float(k(1, g * D + d));
    const double s = dot / std::sqrt(static_cast<double>(D));
    const double gate = 1.0 / (1.0 + std::exp(-(s > 0 ? 1.0 : -1.0) * std::sqrt(std::max(std::fabs(s), 1e-6))));
    const double bound = std::is_same_v<A, float> ? 1e-5 : 0.02;  // bf16: the gate's four ops each round (2^-9)
    CHECK(to_float(yr(1, g * D + 5)) == Approx(gate * to_float(v(1, 5))).margin(bound));
    CHECK(to_float(yr(2, 7)) == Approx(0.5 * to_float(v(2, 7))).margin(bound * 0.1));
  }
}

namespace {
/// An int32 vector as a backend tensor (start / valid lengths of the Gated DeltaNet ops).
Tensor<std::int32_t, 1> ints(std::vector<std::int32_t> v) {
  Tensor<std::int32_t, 1> t({static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data());
  return t;
}
}  // namespace

TEMPLATE_TEST_CASE("causal_conv1d with dilation (Engram's ShortConv): CPU equals the reference, and both equal the "
                   "undilated conv with the kernel spread over (K-1)*d+1 taps", "[backend][ops][gdn]", float, bf16) {
  rng().seed(1033);
  using A = TestType;
  const double tol = std::is_same_v<A, float> ? 2e-5 : 2 * ulp_rel<A>();
  const std::int64_t Bn = 2, T = 5, C = 300, K = 4, d = 3, H = (K - 1) * d;  // T < H: steps read the state
  const auto zero_start = ints({0, 0}), cont = ints({5, 2}), valid = ints({5, 2});
  const auto w = random_tensor<A, 1>({K * C}, 0.5f);
  Tensor<A, 1> spread({(H + 1) * C});  // tap i at i*d, zeros between
  for (std::int64_t i = 0; i < spread.size(); ++i) spread.data()[i] = from_float<A>(0.0f);
  for (std::int64_t i = 0; i < K; ++i) std::copy(&w(i * C), &w(i * C) + C, &spread(i * d * C));
  Tensor<float, 2> sc({Bn, H * C}), sr({Bn, H * C}), ss({Bn, H * C});
  Tensor<A, 2> yc({Bn * T, C}), yr({Bn * T, C}), ys({Bn * T, C});
  for (int step = 0; step < 3; ++step) {
    const auto x = random_tensor<A, 2>({Bn * T, C});
    const auto& st = step == 0 ? zero_start : cont;
    cpu_be.causal_conv1d(x.cview(), w.cview(), st.cview(), valid.cview(), sc.view(), yc.view(), d);
    ref_be.causal_conv1d(x.cview(), w.cview(), st.cview(), valid.cview(), sr.view(), yr.view(), d);
    ref_be.causal_conv1d(x.cview(), spread.cview(), st.cview(), valid.cview(), ss.view(), ys.view());
    expect_near(yc, yr, tol, 1.0, "dilated causal_conv1d step " + std::to_string(step));
    expect_near(sc, sr, 1e-6, 1.0, "dilated conv state step " + std::to_string(step));
    expect_near(yr, ys, tol, 1.0, "dilated vs spread kernel step " + std::to_string(step));
    expect_near(sr, ss, 0.0, 0.0, "dilated vs spread state step " + std::to_string(step));
  }
}

TEMPLATE_TEST_CASE("Gated DeltaNet ops (causal_conv1d, gated_delta_rule): CPU equals the reference, steps continue "
                   "the state, padding leaves it alone", "[backend][ops][gdn]", float, bf16) {
  rng().seed(1029);
  using A = TestType;
  const double tol = std::is_same_v<A, float> ? 2e-5 : 2 * ulp_rel<A>();
  const std::int64_t Bn = 2, T = 7, C = 40, K = 4;
  const GdnShape sh{.key_heads = 2, .value_heads = 4, .key_dim = 8, .value_dim = 12};
  const std::int64_t kd = sh.key_heads * sh.key_dim, vd = sh.value_heads * sh.value_dim;
  const auto zero_start = ints({0, 0}), cont = ints({7, 3}), valid = ints({7, 4});
  const auto w = random_tensor<A, 1>({K * C}, 0.5f);
  const auto a_log = random_tensor<float, 1>({sh.value_heads}, 0.5f), dt = random_tensor<float, 1>({sh.value_heads}, 0.5f);

  // Conv: a first step from zeros (row 1 padded after 4 tokens), then a continuation step; CPU vs reference.
  const auto x1 = random_tensor<A, 2>({Bn * T, C}), x2 = random_tensor<A, 2>({Bn * T, C});
  Tensor<float, 2> sc({Bn, (K - 1) * C}), sr({Bn, (K - 1) * C});
  std::fill(sc.data(), sc.data() + sc.size(), std::nanf(""));  // a fresh sequence must not read its state
  std::fill(sr.data(), sr.data() + sr.size(), std::nanf(""));
  Tensor<A, 2> yc({Bn * T, C}), yr({Bn * T, C});
  for (int step = 0; step < 2; ++step) {
    const auto& x = step == 0 ? x1 : x2;
    const auto& st = step == 0 ? zero_start : cont;
    cpu_be.causal_conv1d(x.cview(), w.cview(), st.cview(), valid.cview(), sc.view(), yc.view());
    ref_be.causal_conv1d(x.cview(), w.cview(), st.cview(), valid.cview(), sr.view(), yr.view());
    expect_near(yc, yr, tol, 1.0, "causal_conv1d step " + std::to_string(step));
    expect_near(sc, sr, 1e-6, 1.0, "conv state step " + std::to_string(step));
  }
  // Closed form: after the first step the state of row 1 holds its inputs 1..3 (4 valid tokens, K - 1 = 3 kept).
  {
    Tensor<float, 2> s({Bn, (K - 1) * C});
    Tensor<A, 2> y({Bn * T, C});
    ref_be.causal_conv1d(x1.cview(), w.cview(), zero_start.cview(), valid.cview(), s.view(), y.view());
    for (std::int64_t j = 0; j < K - 1; ++j) CHECK(s(1, j * C + 5) == to_float(x1(T + 1 + j, 5)));
    // y[0, t=0, c] = silu(x[0, 0, c] * w[K-1, c]): only the last tap sees the sequence.
    const float r = round_to<A>(to_float(x1(0, 9)) * to_float(w((K - 1) * C + 9)));
    CHECK(to_float(y(0, 9)) == Approx(round_to<A>(r / (1.0f + std::exp(-r)))).epsilon(tol));
  }

  // Delta rule: q/k as strided column blocks of one [M, 2kd + vd] matrix, as the layer passes them.
  const auto qkv = random_tensor<A, 2>({Bn * T, 2 * kd + vd}), a = random_tensor<A, 2>({Bn * T, sh.value_heads}),
             b = random_tensor<A, 2>({Bn * T, sh.value_heads}, 2.0f);
  const auto blk = [&](std::int64_t c0, std::int64_t n) {
    return View<const A, 2>(qkv.data() + c0, {Bn * T, n}, {2 * kd + vd, 1});
  };
  Tensor<float, 2> hc({Bn, sh.state_width()}), hr({Bn, sh.state_width()});
  std::fill(hc.data(), hc.data() + hc.size(), std::nanf(""));
  std::fill(hr.data(), hr.data() + hr.size(), std::nanf(""));
  Tensor<A, 2> oc({Bn * T, vd}), orr({Bn * T, vd});
  for (int step = 0; step < 2; ++step) {
    const auto& st = step == 0 ? zero_start : cont;
    cpu_be.gated_delta_rule(blk(0, kd), blk(kd, kd), blk(2 * kd, vd), a.cview(), b.cview(), a_log.cview(), dt.cview(), sh,
                            st.cview(), valid.cview(), hc.view(), oc.view());
    ref_be.gated_delta_rule(blk(0, kd), blk(kd, kd), blk(2 * kd, vd), a.cview(), b.cview(), a_log.cview(), dt.cview(), sh,
                            st.cview(), valid.cview(), hr.view(), orr.view());
    expect_near(oc, orr, tol, 0.1, "gated_delta_rule step " + std::to_string(step));
    expect_near(hc, hr, 1e-5, 0.1, "recurrent state step " + std::to_string(step));
  }
  // Padding tokens leave the state alone: row 1 run with 4 valid tokens equals a run over its first 4 tokens only.
  {
    Tensor<float, 2> s7({1, sh.state_width()}), s4({1, sh.state_width()});
    const auto one = ints({0}), four = ints({4});
    const auto rows_of = [&](const Tensor<A, 2>& t, std::int64_t r0, std::int64_t n) {
      return View<const A, 2>(&t(r0, 0), {n, t.dim(1)}, {t.dim(1), 1});
    };
    const auto qkv7 = rows_of(qkv, T, T), qkv4 = rows_of(qkv, T, 4);
    const auto part = [&](View<const A, 2> q, std::int64_t c0, std::int64_t n) {
      return View<const A, 2>(q.data() + c0, {q.dim(0), n}, {q.stride(0), 1});
    };
    Tensor<A, 2> o7({T, vd}), o4({4, vd});
    ref_be.gated_delta_rule(part(qkv7, 0, kd), part(qkv7, kd, kd), part(qkv7, 2 * kd, vd), rows_of(a, T, T),
                            rows_of(b, T, T), a_log.cview(), dt.cview(), sh, one.cview(), four.cview(), s7.view(), o7.view());
    ref_be.gated_delta_rule(part(qkv4, 0, kd), part(qkv4, kd, kd), part(qkv4, 2 * kd, vd), rows_of(a, T, 4),
                            rows_of(b, T, 4), a_log.cview(), dt.cview(), sh, one.cview(), View<const std::int32_t, 1>(),
                            s4.view(), o4.view());
    expect_near(s7, s4, 0.0, 1.0, "state after padding");
    for (std::int64_t i = 0; i < 4 * vd; ++i) CHECK(to_float(o7.data()[i]) == to_float(o4.data()[i]));
  }
}

TEMPLATE_TEST_CASE("Gated DeltaNet chunked prefill: the CPU's chunked form (prompts of 16+ tokens, chunks of 64) equals "
                   "the reference recurrence, a split prompt and token-by-token steps", "[backend][ops][gdn]", float, bf16) {
  rng().seed(2029);
  using A = TestType;
  using Cpu = std::decay_t<decltype(cpu_be)>;
  // f32: the chunked form sums the same terms in another order (state 1e-5 relative, as for the conv state above).
  // bf16: the outputs are rounded once from f32 values that differ by ~1e-6, so at most one bf16 step apart.
  const double tol = std::is_same_v<A, float> ? 2e-5 : 2 * ulp_rel<A>();
  const std::int64_t Bn = 2, T = 150;  // three chunks, the last one partial
  REQUIRE(T > 2 * Cpu::kGdnChunk);
  const GdnShape sh{.key_heads = 2, .value_heads = 4, .key_dim = 16, .value_dim = 24};
  const std::int64_t kd = sh.key_heads * sh.key_dim, vd = sh.value_heads * sh.value_dim, W = 2 * kd + vd;
  // Slow decays (exp(a_log) ~ 0.14, decay ~ 0.9 per token) so that the state carries across chunks.
  auto a_log = random_tensor<float, 1>({sh.value_heads}, 0.3f);
  for (std::int64_t h = 0; h < sh.value_heads; ++h) a_log(h) -= 2.0f;
  const auto dt = random_tensor<float, 1>({sh.value_heads}, 0.5f);
  const auto qkv = random_tensor<A, 2>({Bn * T, W}), a = random_tensor<A, 2>({Bn * T, sh.value_heads}),
             b = random_tensor<A, 2>({Bn * T, sh.value_heads}, 2.0f);
  const auto blk = [&](const Tensor<A, 2>& t, std::int64_t r0, std::int64_t rows, std::int64_t c0, std::int64_t n) {
    return View<const A, 2>(&t(r0, c0), {rows, n}, {t.dim(1), 1});
  };
  const auto run = [&](const auto& be, std::int64_t r0, std::int64_t rows, const Tensor<std::int32_t, 1>& st,
                       const Tensor<std::int32_t, 1>* valid, Tensor<float, 2>& state, Tensor<A, 2>& out) {
    be.gated_delta_rule(blk(qkv, r0, rows, 0, kd), blk(qkv, r0, rows, kd, kd), blk(qkv, r0, rows, 2 * kd, vd),
                        blk(a, r0, rows, 0, sh.value_heads), blk(b, r0, rows, 0, sh.value_heads), a_log.cview(), dt.cview(),
                        sh, st.cview(), valid != nullptr ? valid->cview() : View<const std::int32_t, 1>(), state.view(),
                        out.view());
  };
  // Two sequences from zero, the second padded after 97 tokens; then a step continuing both states.
  Tensor<float, 2> hc({Bn, sh.state_width()}), hr({Bn, sh.state_width()});
  Tensor<A, 2> oc({Bn * T, vd}), orr({Bn * T, vd});
  const auto zero = ints({0, 0}), valid = ints({150, 97}), cont = ints({150, 97});
  run(cpu_be, 0, Bn * T, zero, &valid, hc, oc);
  run(ref_be, 0, Bn * T, zero, &valid, hr, orr);
  expect_near(oc, orr, tol, 0.1, "chunked outputs");
  expect_near(hc, hr, 1e-5, 0.1, "chunked state");
  run(cpu_be, 0, Bn * T, cont, nullptr, hc, oc);
  run(ref_be, 0, Bn * T, cont, nullptr, hr, orr);
  expect_near(oc, orr, tol, 0.1, "chunked continuation outputs");
  expect_near(hc, hr, 1e-5, 0.1, "chunked continuation state");
  // Sequence 0 as a split prompt (70 + 80 tokens, both chunked), and its first 40 tokens one step at a time
  // (the recurrence): the same outputs and state as the reference over the whole prompt.
  Tensor<float, 2> s1({1, sh.state_width()}), sref({1, sh.state_width()});
  Tensor<A, 2> o1({T, vd}), oref({T, vd});
  run(ref_be, 0, T, ints({0}), nullptr, sref, oref);
  {
    Tensor<A, 2> p1({70, vd}), p2({80, vd});
    run(cpu_be, 0, 70, ints({0}), nullptr, s1, p1);
    run(cpu_be, 70, 80, ints({70}), nullptr, s1, p2);
    std::copy(p1.data(), p1.data() + p1.size(), o1.data());
    std::copy(p2.data(), p2.data() + p2.size(), o1.data() + p1.size());
    expect_near(o1, oref, tol, 0.1, "split prompt outputs");
    expect_near(s1, sref, 1e-5, 0.1, "split prompt state");
  }
  {
    Tensor<float, 2> s2({1, sh.state_width()}), s40({1, sh.state_width()});
    Tensor<A, 2> step({1, vd}), o40({40, vd}), ochunk({40, vd});
    for (std::int64_t t = 0; t < 40; ++t) {
      run(cpu_be, t, 1, ints({static_cast<std::int32_t>(t)}), nullptr, s2, step);
      std::copy(step.data(), step.data() + vd, o40.data() + t * vd);
    }
    run(cpu_be, 0, 40, ints({0}), nullptr, s40, ochunk);  // 40 tokens: one chunk
    expect_near(o40, ochunk, tol, 0.1, "token by token vs chunked outputs");
    expect_near(s2, s40, 1e-5, 0.1, "token by token vs chunked state");
  }
}
