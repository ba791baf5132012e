// The CPU backend's kernels against simple double-precision references, on awkward shapes: row counts 1..7 and
// past a register tile, N and K that are not multiples of the panel / block sizes, K past the cache block, strided
// rows, bias, every weight type (f32, bf16, Q8_0) and activation type (f32, bf16), 1 and 2 threads.
//
// Tolerances are the worst-case bound of a float sum in any order, |err| <= K * u * sum_k |x_k w_k| (u = 2^-24),
// plus half an ulp of the output type for the one final rounding (and one more for a bias added after it).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/params.hpp"
#include "support/attention_mask.hpp"

using namespace maxtext;

namespace {

template <class T>
double ulp_half(double v) {
  if constexpr (std::is_same_v<T, float>) {
    return std::ldexp(std::abs(v), -24);
  } else if constexpr (std::is_same_v<T, bf16>) {
    return std::ldexp(std::abs(v), -8);
  } else {  // fp16: below 2^-14 the spacing is the subnormals' 2^-24
    return std::max(std::ldexp(std::abs(v), -11), std::ldexp(1.0, -25));
  }
}

template <class W>
Matrix<W> make_weight(std::int64_t N, std::int64_t K, std::mt19937& g, std::vector<double>& dequant) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf(static_cast<std::size_t>(N * K));
  for (auto& v : wf) v = nd(g);
  Matrix<W> m;
  m.rows = N;
  m.cols = K;
  dequant.assign(static_cast<std::size_t>(N * K), 0.0);
  if constexpr (std::is_same_v<W, q8_0>) {
    m.data = Tensor<q8_0, 2>({N, K / q8_0::block});
    for (std::int64_t n = 0; n < N; ++n) io::detail::quantize_q8_0_row(&wf[static_cast<std::size_t>(n * K)], &m.data(n, 0), K);
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t k = 0; k < K; ++k) {
        const q8_0& b = m.data(n, k / q8_0::block);
        dequant[static_cast<std::size_t>(n * K + k)] = static_cast<double>(static_cast<float>(b.d)) * b.qs[k % q8_0::block];
      }
    }
  } else {
    m.data = Tensor<W, 2>({N, K});
    for (std::int64_t i = 0; i < N * K; ++i) {
      m.data.data()[i] = from_float<W>(wf[static_cast<std::size_t>(i)]);
      dequant[static_cast<std::size_t>(i)] = to_float(m.data.data()[i]);
    }
  }
  return m;
}

/// Operands of one product: x [M, K] (row stride K + 3, normal values), y [M, N] (row stride N + 5, filled with a
/// sentinel that must survive past column N), a bias of N normal values; x and y are views into the buffers.
template <class X, class Y>
struct Operands {
  Tensor<X, 2> xbuf;
  Tensor<Y, 2> ybuf;
  Tensor<Y, 1> bias;
  View<const X, 2> x;
  View<Y, 2> y;
  std::int64_t ldy;

  Operands(std::int64_t M, std::int64_t N, std::int64_t K, std::mt19937& g)
      : xbuf({M, K + 3}), ybuf(Tensor<Y, 2>::full({M, N + 5}, from_float<Y>(12345.0f))), bias({N}), ldy(N + 5) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (std::int64_t i = 0; i < xbuf.size(); ++i) xbuf.data()[i] = from_float<X>(nd(g));
    for (std::int64_t n = 0; n < N; ++n) bias(n) = from_float<Y>(nd(g));
    x = View<const X, 2>(xbuf.data(), {M, K}, {K + 3, 1});
    y = View<Y, 2>(ybuf.data(), {M, N}, {ldy, 1});
  }
};

/// One case: x [M, K] with row stride K + pad, y [M, N] with row stride N + pad, optional bias.
template <class X, class W, class Y>
void check_matmul(std::int64_t M, std::int64_t N, std::int64_t K, bool with_bias, int threads, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<double> wd;
  Matrix<W> raw = make_weight<W>(N, K, g, wd);
  cpu::Backend be(cpu::Options{threads});
  Matrix<W> w = be.prepare(raw);
  REQUIRE(w.packed != nullptr);

  Operands<X, Y> op(M, N, K, g);
  auto& [xbuf, ybuf, bias, x, y, ldy] = op;
  be.matmul(x, w, y, with_bias ? View<const Y, 1>(bias.view()) : View<const Y, 1>());

  // The unpacked path of the same backend must agree within the same bound (it is the fallback for other layouts).
  Tensor<Y, 2> yu = Tensor<Y, 2>::zeros({M, N});
  be.matmul(x, raw, View<Y, 2>(yu.view()), with_bias ? View<const Y, 1>(bias.view()) : View<const Y, 1>());

  double worst = 0;
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t n = 0; n < N; ++n) {
      double s = 0, a = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(to_float(x(m, k))) * wd[static_cast<std::size_t>(n * K + k)];
        s += p;
        a += std::abs(p);
      }
      double tol = static_cast<double>(K) * std::ldexp(a, -24) + ulp_half<Y>(s) + 1e-30;
      if (with_bias) {
        s += to_float(bias(n));
        tol += ulp_half<Y>(s) + ulp_half<Y>(s - to_float(bias(n)));
      }
      const double got = to_float(y(m, n));
      worst = std::max(worst, std::abs(got - s) / tol);
      if (std::abs(got - s) > tol) {
        FAIL("y[" << m << "," << n << "] = " << got << ", reference " << s << ", tolerance " << tol << " (M=" << M
                  << " N=" << N << " K=" << K << ")");
      }
      const double gu = to_float(yu(m, n));
      if (std::abs(gu - s) > 2 * tol) FAIL("unpacked path y[" << m << "," << n << "] = " << gu << ", reference " << s);
    }
    // Padding past N in each output row is untouched.
    for (std::int64_t n = N; n < ldy; ++n) REQUIRE(to_float(ybuf(m, n)) == to_float(from_float<Y>(12345.0f)));
  }
  INFO("worst error / tolerance " << worst);
  SUCCEED();
}

template <class X, class W, class Y>
void sweep(const std::vector<std::int64_t>& Ks) {
  const std::vector<std::int64_t> Ms = {1, 2, 3, 4, 5, 6, 7, 13, 40};
  const std::vector<std::int64_t> Ns = {1, 17, 64, 65, 130};
  std::uint32_t seed = 1;
  for (auto M : Ms) {
    for (auto N : Ns) {
      for (auto K : Ks) {
        for (int threads : {1, 2}) {
          check_matmul<X, W, Y>(M, N, K, (seed % 3) == 0, threads, seed);
          ++seed;
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("Packed matmul: f32 weights, f32 activations, awkward shapes", "[backend][cpu][gemm]") {
  sweep<float, float, float>({1, 3, 31, 64, 77});
}

TEST_CASE("Packed matmul: bf16 weights with bf16 and f32 activations", "[backend][cpu][gemm]") {
  sweep<bf16, bf16, bf16>({1, 3, 31, 64, 77});
  sweep<float, bf16, float>({1, 3, 31, 64});
}

TEST_CASE("Packed matmul: fp16 weights with f32 and bf16 activations", "[backend][cpu][gemm]") {
  sweep<float, fp16, float>({1, 3, 31, 64, 77});
  sweep<bf16, fp16, bf16>({1, 3, 31, 64});
  sweep<float, fp16, fp16>({1, 31, 64});
}

TEST_CASE("Packed matmul: fp16 weights give the f32 kernel's bits for the same values", "[backend][cpu][gemm]") {
  // The fp16 panels are widened exactly and FMA'd in the f32 kernel's order (direct tiles for few rows, a widened
  // panel slice for many, K blocks past gemm::kKC), so storing a file's F16 weights as fp16 changes no output bit.
  std::mt19937 g(11);
  std::normal_distribution<float> nd;
  for (const auto& [M, N, K] : std::vector<std::array<std::int64_t, 3>>{
           {1, 70, 77}, {2, 130, 64}, {7, 65, 31}, {cpu::gemm::kMR * 2 + 1, 64, 96},
           {cpu::gemm::kMR * 3 + 1, 70, cpu::gemm::kKC + 129}, {1, 33, cpu::gemm::kKC + 5}}) {
    std::vector<double> wd;
    const Matrix<fp16> h = make_weight<fp16>(N, K, g, wd);
    Matrix<float> f;
    f.rows = N;
    f.cols = K;
    f.data = Tensor<float, 2>({N, K});
    for (std::int64_t i = 0; i < N * K; ++i) f.data.data()[i] = to_float(h.data.data()[i]);
    Tensor<float, 2> x({M, K});
    for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = nd(g);
    for (int threads : {1, 2}) {
      cpu::Backend be(cpu::Options{threads});
      const Matrix<fp16> hp = be.prepare(h);
      REQUIRE(static_cast<const cpu::gemm::Packed*>(hp.packed.get())->kind == cpu::gemm::PackKind::f16);
      Tensor<float, 2> yh({M, N}), yf({M, N});
      be.matmul(View<const float, 2>(x.view()), hp, yh.view());
      be.matmul(View<const float, 2>(x.view()), be.prepare(f), yf.view());
      for (std::int64_t i = 0; i < yh.size(); ++i) {
        INFO("M=" << M << " N=" << N << " K=" << K << " threads=" << threads << " i=" << i);
        REQUIRE(std::bit_cast<std::uint32_t>(yh.data()[i]) == std::bit_cast<std::uint32_t>(yf.data()[i]));
      }
    }
  }
}

TEST_CASE("Packed matmul: Q8_0 weights with f32 and bf16 activations", "[backend][cpu][gemm]") {
  sweep<float, q8_0, float>({32, 96});
  sweep<bf16, q8_0, bf16>({32, 64});
}

TEST_CASE("Packed matmul: K past the cache block and many rows", "[backend][cpu][gemm]") {
  // K > gemm::kKC with rows > 2 tiles exercises the K-blocked path (partial sums in y or in a scratch buffer).
  const std::int64_t K = cpu::gemm::kKC + 96 + 32;
  check_matmul<float, float, float>(cpu::gemm::kMR * 3 + 1, 70, K, true, 2, 7);
  check_matmul<bf16, bf16, bf16>(cpu::gemm::kMR * 3 + 1, 70, K + 1, true, 2, 8);
  check_matmul<float, q8_0, float>(cpu::gemm::kMC + 5, 70, K, false, 2, 9);
  check_matmul<float, bf16, float>(cpu::gemm::kMR * 4, 65, K + 1, false, 1, 10);
  check_matmul<float, fp16, float>(cpu::gemm::kMC + 5, 70, K + 1, true, 2, 11);
}

TEST_CASE("Packed matmul: results do not depend on the thread count", "[backend][cpu][gemm]") {
  std::mt19937 g(3);
  std::vector<double> wd;
  Matrix<float> raw = make_weight<float>(300, 200, g, wd);
  Tensor<float, 2> x({9, 200});
  std::normal_distribution<float> nd;
  for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = nd(g);
  Tensor<float, 2> y1({9, 300}), y2({9, 300});
  cpu::Backend b1(cpu::Options{1}), b2(cpu::Options{2});
  b1.matmul(View<const float, 2>(x.view()), b1.prepare(raw), y1.view());
  b2.matmul(View<const float, 2>(x.view()), b2.prepare(raw), y2.view());
  for (std::int64_t i = 0; i < y1.size(); ++i) REQUIRE(y1.data()[i] == y2.data()[i]);
}

// ---- Q8_0 weights with 8-bit activations (cpu::Options::int8_activations) -------------------------------------

namespace {

/// The documented rule, written out in scalar code: per 32-element block d = max|x| / 127 (f32), q = x * (1/d)
/// rounded to the nearest integer, ties to even (f32 arithmetic, as the rule states).
void quantize_block_ref(const float* x, std::int8_t* q, float& d) {
  float amax = 0.0f;
  for (int i = 0; i < q8_0::block; ++i) amax = std::max(amax, std::fabs(x[i]));
  d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < q8_0::block; ++i) q[i] = static_cast<std::int8_t>(std::nearbyint(x[i] * id));
}

/// y = x . W^T with Q8_0 weights packed for 8-bit activations, against (1) the integer definition evaluated in double:
/// sum over blocks of d_w * d_x * sum(q_w * q_x), within the f32 bound of a sum of K/32 terms each rounded twice
/// ((d_w * d_x) and the fused multiply-add), |err| <= (K/32 + 2) u sum_b |t_b| plus the output rounding; and (2) the
/// exact product of the dequantised weights, within the quantisation bound sum_b (d_x,b / 2) sum_k |w_k| plus that.
template <class X, class Y>
void check_int8_activations(std::int64_t M, std::int64_t N, std::int64_t K, bool with_bias, int threads,
                            std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<double> wd;
  Matrix<q8_0> raw = make_weight<q8_0>(N, K, g, wd);
  cpu::Backend be(cpu::Options{threads, true});
  Matrix<q8_0> w = be.prepare(raw);
  REQUIRE(w.packed != nullptr);
  REQUIRE(static_cast<const cpu::gemm::Packed*>(w.packed.get())->kind == cpu::gemm::PackKind::q8_0_i8);

  const std::int64_t nb = K / q8_0::block;
  Operands<X, Y> op(M, N, K, g);
  auto& [xbuf, ybuf, bias, x, y, ldy] = op;
  // Edge blocks: an all-zero block (scale 0) and a block of small integers whose largest magnitude is 127 (scale 1).
  if (nb >= 2) {
    for (int i = 0; i < q8_0::block; ++i) xbuf(0, i) = from_float<X>(0.0f);
    for (int i = 0; i < q8_0::block; ++i) xbuf(M - 1, q8_0::block + i) = from_float<X>(static_cast<float>((i * 37) % 255 - 127));
  }
  be.matmul(x, w, y, with_bias ? View<const Y, 1>(bias.view()) : View<const Y, 1>());

  std::vector<float> xf(static_cast<std::size_t>(K));
  std::vector<std::int8_t> xq(static_cast<std::size_t>(K));
  std::vector<float> xd(static_cast<std::size_t>(nb));
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t k = 0; k < K; ++k) xf[static_cast<std::size_t>(k)] = to_float(x(m, k));
    for (std::int64_t b = 0; b < nb; ++b) {
      quantize_block_ref(&xf[static_cast<std::size_t>(b * q8_0::block)], &xq[static_cast<std::size_t>(b * q8_0::block)],
                         xd[static_cast<std::size_t>(b)]);
    }
    for (std::int64_t n = 0; n < N; ++n) {
      double s = 0, a = 0, exact = 0, qbound = 0;
      for (std::int64_t b = 0; b < nb; ++b) {
        const q8_0& blk = raw.data(n, b);
        std::int64_t isum = 0;
        double wabs = 0;
        for (int i = 0; i < q8_0::block; ++i) {
          const std::int64_t k = b * q8_0::block + i;
          isum += static_cast<std::int64_t>(blk.qs[i]) * xq[static_cast<std::size_t>(k)];
          const double wk = wd[static_cast<std::size_t>(n * K + k)];
          exact += wk * xf[static_cast<std::size_t>(k)];
          wabs += std::abs(wk);
        }
        const double t = static_cast<double>(static_cast<float>(blk.d)) * xd[static_cast<std::size_t>(b)] * static_cast<double>(isum);
        s += t;
        a += std::abs(t);
        qbound += 0.5 * xd[static_cast<std::size_t>(b)] * wabs;
      }
      double tol = static_cast<double>(nb + 2) * std::ldexp(a, -24) + ulp_half<Y>(s) + 1e-30;
      if (with_bias) {
        s += to_float(bias(n));
        exact += to_float(bias(n));
        tol += ulp_half<Y>(s) + ulp_half<Y>(s - to_float(bias(n)));
      }
      const double got = to_float(y(m, n));
      if (std::abs(got - s) > tol) {
        FAIL("y[" << m << "," << n << "] = " << got << ", integer-dot reference " << s << ", tolerance " << tol
                  << " (M=" << M << " N=" << N << " K=" << K << " threads=" << threads << ")");
      }
      if (std::abs(got - exact) > qbound + 2 * tol) {
        FAIL("y[" << m << "," << n << "] = " << got << " is " << std::abs(got - exact)
                  << " from the exact product, more than the quantisation bound " << qbound);
      }
    }
    for (std::int64_t n = N; n < ldy; ++n) REQUIRE(to_float(ybuf(m, n)) == to_float(from_float<Y>(12345.0f)));
  }
  SUCCEED();
}

}  // namespace

TEST_CASE("Packed matmul: Q8_0 weights with 8-bit activations follow the integer-dot definition", "[backend][cpu][gemm]") {
  const std::vector<std::int64_t> Ms = {1, 2, 3, 5, 6, 7, 13, 40};
  const std::vector<std::int64_t> Ns = {1, 17, 64, 65, 130};
  std::uint32_t seed = 100;
  for (auto M : Ms) {
    for (auto N : Ns) {
      for (std::int64_t K : {32, 96}) {
        for (int threads : {1, 2}) {
          check_int8_activations<float, float>(M, N, K, (seed % 3) == 0, threads, seed);
          ++seed;
        }
      }
    }
  }
  check_int8_activations<bf16, bf16>(7, 65, 64, true, 2, 11);
  check_int8_activations<bf16, float>(1, 130, 96, false, 1, 12);
  // K past the cache block with many rows: K-blocked partial sums.
  check_int8_activations<float, float>(cpu::gemm::kMC + 5, 70, cpu::gemm::kKC + 128, true, 2, 13);
  check_int8_activations<bf16, bf16>(cpu::gemm::kMR * 3 + 1, 70, cpu::gemm::kKC + 64, false, 1, 14);
}

TEST_CASE("Q8_0 with 8-bit activations: an off backend keeps the exact products, and the choice is per weight",
          "[backend][cpu][gemm]") {
  // The activation rule only applies to weights prepared by a backend with the option set; the same backend type
  // without it packs the exact layout, whose products equal the dequantised weights' (checked above).
  std::mt19937 g(5);
  std::vector<double> wd;
  Matrix<q8_0> raw = make_weight<q8_0>(64, 64, g, wd);
  const cpu::Backend exact(cpu::Options{1}), fast(cpu::Options{1, true});
  CHECK_FALSE(exact.int8_activations());
  CHECK(fast.int8_activations());
  CHECK(static_cast<const cpu::gemm::Packed*>(exact.prepare(raw).packed.get())->kind == cpu::gemm::PackKind::q8_0);
  CHECK(static_cast<const cpu::gemm::Packed*>(fast.prepare(raw).packed.get())->kind == cpu::gemm::PackKind::q8_0_i8);
  // f32 and bf16 weights are not affected by the option.
  Matrix<float> rf = make_weight<float>(64, 64, g, wd);
  CHECK(static_cast<const cpu::gemm::Packed*>(fast.prepare(rf).packed.get())->kind == cpu::gemm::PackKind::f32);
}

// ---- attention ------------------------------------------------------------------------------------------------

namespace {

struct AttnCase {
  std::int64_t B = 1, T = 1, S = 1, N = 1, K = 1, Dq = 8, Dv = 8;
  std::vector<std::int32_t> q_start, kv_len;
  bool causal = true, segments = false, sinks = false;
  std::int64_t window = 0, chunk = 0;
  float soft_cap = 0.0f;
  /// Pictures (AttentionMask::bidir_begin / bidir_end): per batch row, step positions [t0, t1) whose queries also see
  /// each other's keys (cache indices q_start + t0 .. q_start + t1), whatever the causal and window terms say.
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> pictures;
  /// The cache range [begin, end) of query (b, t)'s picture; begin == end outside pictures.
  std::pair<std::int64_t, std::int64_t> picture(std::int64_t b, std::int64_t t) const {
    if (static_cast<std::size_t>(b) >= pictures.size()) return {0, 0};
    for (const auto& [t0, t1] : pictures[static_cast<std::size_t>(b)]) {
      if (t >= t0 && t < t1) return {q_start[static_cast<std::size_t>(b)] + t0, q_start[static_cast<std::size_t>(b)] + t1};
    }
    return {0, 0};
  }
};

/// Double-precision reference of spec attention.md §1-2 on the same (already rounded) inputs.
template <class A>
std::vector<double> attention_reference(const AttnCase& c, const Tensor<A, 4>& q, const Tensor<A, 4>& k,
                                        const Tensor<A, 4>& v, const Tensor<std::int32_t, 2>& qseg,
                                        const Tensor<std::int32_t, 2>& kseg, const Tensor<A, 1>& sinks) {
  std::vector<double> out(static_cast<std::size_t>(c.B * c.T * c.N * c.Dv), 0.0);
  const std::int64_t G = c.N / c.K;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t t = 0; t < c.T; ++t) {
      for (std::int64_t n = 0; n < c.N; ++n) {
        const std::int64_t kh = n / G, qi = c.q_start[static_cast<std::size_t>(b)] + t;
        const std::int64_t len = c.kv_len[static_cast<std::size_t>(b)];
        std::vector<double> l;
        std::vector<std::int64_t> idx;
        const auto [pb, pe] = c.picture(b, t);
        for (std::int64_t s = 0; s < len; ++s) {
          const bool in_picture = s >= pb && s < pe;  // OR'ed to the other terms (MaxText's bidirectional_mask)
          if (!in_picture && c.causal && s > qi) continue;
          if (!in_picture && c.window > 0 && s <= qi - c.window) continue;
          if (!in_picture && c.chunk > 0 && s / c.chunk != qi / c.chunk) continue;
          if (c.segments && (kseg(b, s) != qseg(b, t) || kseg(b, s) < 0)) continue;
          double d = 0;
          for (std::int64_t i = 0; i < c.Dq; ++i) d += static_cast<double>(to_float(q(b, t, n, i))) * to_float(k(b, s, kh, i));
          if (c.soft_cap > 0) d = c.soft_cap * std::tanh(d / c.soft_cap);
          l.push_back(d);
          idx.push_back(s);
        }
        double* o = &out[static_cast<std::size_t>(((b * c.T + t) * c.N + n) * c.Dv)];
        if (l.empty()) {
          if (!c.sinks && len > 0) {
            for (std::int64_t s = 0; s < len; ++s) {
              for (std::int64_t i = 0; i < c.Dv; ++i) o[i] += to_float(v(b, s, kh, i)) / static_cast<double>(len);
            }
          }
          continue;
        }
        double m = *std::max_element(l.begin(), l.end());
        if (c.sinks) m = std::max(m, static_cast<double>(to_float(sinks(n))));
        double den = c.sinks ? std::exp(to_float(sinks(n)) - m) : 0.0;
        for (double x : l) den += std::exp(x - m);
        for (std::size_t j = 0; j < l.size(); ++j) {
          const double p = std::exp(l[j] - m) / den;
          for (std::int64_t i = 0; i < c.Dv; ++i) o[i] += p * to_float(v(b, idx[j], kh, i));
        }
      }
    }
  }
  return out;
}

template <class A>
void check_attention(const AttnCase& c, int threads, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor<A, 4> q({c.B, c.T, c.N, c.Dq}), k({c.B, c.S, c.K, c.Dq}), v({c.B, c.S, c.K, c.Dv}), o({c.B, c.T, c.N, c.Dv});
  const float qs = 1.0f / std::sqrt(static_cast<float>(c.Dq));
  for (std::int64_t i = 0; i < q.size(); ++i) q.data()[i] = from_float<A>(nd(g) * qs * 2.0f);
  for (std::int64_t i = 0; i < k.size(); ++i) k.data()[i] = from_float<A>(nd(g));
  for (std::int64_t i = 0; i < v.size(); ++i) v.data()[i] = from_float<A>(nd(g));
  Tensor<std::int32_t, 2> qseg({c.B, c.T}), kseg({c.B, c.S});
  for (std::int64_t i = 0; i < qseg.size(); ++i) qseg.data()[i] = static_cast<std::int32_t>(g() % 2);
  for (std::int64_t i = 0; i < kseg.size(); ++i) kseg.data()[i] = static_cast<std::int32_t>(g() % 3) - 1;
  Tensor<A, 1> sinks({c.N});
  for (std::int64_t i = 0; i < c.N; ++i) sinks(i) = from_float<A>(nd(g));
  Tensor<std::int32_t, 1> q_start({c.B}), kv_len({c.B});
  for (std::int64_t b = 0; b < c.B; ++b) {
    q_start(b) = c.q_start[static_cast<std::size_t>(b)];
    kv_len(b) = c.kv_len[static_cast<std::size_t>(b)];
  }
  AttentionMask mask = test::attention_mask(q_start.cview(), kv_len.cview(), qseg.cview(), kseg.cview(),
                                            {c.segments, c.causal, c.window, c.chunk});
  Tensor<std::int32_t, 2> pic_begin({c.B, c.T}), pic_end({c.B, c.T});
  if (!c.pictures.empty()) {
    for (std::int64_t b = 0; b < c.B; ++b) {
      for (std::int64_t t = 0; t < c.T; ++t) {
        const auto [pb, pe] = c.picture(b, t);
        pic_begin(b, t) = static_cast<std::int32_t>(pb);
        pic_end(b, t) = static_cast<std::int32_t>(pe);
      }
    }
    mask.bidir_begin = pic_begin.cview();
    mask.bidir_end = pic_end.cview();
  }
  AttentionOptions opt;
  opt.soft_cap = c.soft_cap;
  opt.float32_qk_product = true;  // the f32 flow; bf16 rounding of logits is covered by the bf16 tolerance below
  opt.float32_logits = true;
  cpu::Backend be(cpu::Options{threads});
  be.attention(q.cview(), k.cview(), v.cview(), mask, opt, c.sinks ? sinks.cview() : View<const A, 1>(), o.view());
  if (c.T > 1 && c.T < cpu::attn::kTiledMinRows) {
    // A pass of a few queries (a verify pass of speculative decoding) gives each query's output to the bit as a
    // pass of that query alone (a decode step) would.
    for (std::int64_t t = 0; t < c.T; ++t) {
      Tensor<A, 4> q1({c.B, 1, c.N, c.Dq}), o1({c.B, 1, c.N, c.Dv});
      Tensor<std::int32_t, 1> qs1({c.B});
      Tensor<std::int32_t, 2> qseg1({c.B, 1}), pb1({c.B, 1}), pe1({c.B, 1});
      for (std::int64_t b = 0; b < c.B; ++b) {
        for (std::int64_t n = 0; n < c.N; ++n)
          for (std::int64_t d = 0; d < c.Dq; ++d) q1(b, 0, n, d) = q(b, t, n, d);
        qs1(b) = q_start(b) + static_cast<std::int32_t>(t);
        qseg1(b, 0) = qseg(b, t);
        pb1(b, 0) = c.pictures.empty() ? 0 : pic_begin(b, t);
        pe1(b, 0) = c.pictures.empty() ? 0 : pic_end(b, t);
      }
      AttentionMask m1 = test::attention_mask(qs1.cview(), kv_len.cview(), qseg1.cview(), kseg.cview(),
                                              {c.segments, c.causal, c.window, c.chunk});
      if (!c.pictures.empty()) {
        m1.bidir_begin = pb1.cview();
        m1.bidir_end = pe1.cview();
      }
      be.attention(q1.cview(), k.cview(), v.cview(), m1, opt, c.sinks ? sinks.cview() : View<const A, 1>(), o1.view());
      for (std::int64_t b = 0; b < c.B; ++b) {
        for (std::int64_t n = 0; n < c.N; ++n) {
          for (std::int64_t d = 0; d < c.Dv; ++d) {
            if (!(to_float(o1(b, 0, n, d)) == to_float(o(b, t, n, d)))) {
              FAIL("query " << t << " of " << c.T << ": out[" << b << "," << n << "," << d << "] = "
                            << to_float(o(b, t, n, d)) << ", alone " << to_float(o1(b, 0, n, d)) << " (S=" << c.S
                            << " N=" << c.N << " K=" << c.K << " Dq=" << c.Dq << " window=" << c.window
                            << " segments=" << c.segments << " cap=" << c.soft_cap << ")");
            }
          }
        }
      }
    }
  }
  const auto ref = attention_reference(c, q, k, v, qseg, kseg, sinks);
  // f32: softmax weights and sums carry ~S ulp of f32 (and the logits ~Dq/2); bf16: the f32 error plus one final
  // rounding of the output, half an ulp = up to 2^-8 relative (just below a power of two).
  const double rel = std::is_same_v<A, float> ? 2e-5 : std::ldexp(1.0, -8) + 2e-5;
  for (std::int64_t i = 0; i < o.size(); ++i) {
    const double r = ref[static_cast<std::size_t>(i)], got = to_float(o.data()[i]);
    if (std::abs(got - r) > rel * (std::abs(r) + 1e-2) + 1e-6) {
      FAIL("attention out[" << i << "] = " << got << ", reference " << r << " (T=" << c.T << " S=" << c.S << " N=" << c.N
                            << " K=" << c.K << " Dq=" << c.Dq << " window=" << c.window << " segments=" << c.segments
                            << " cap=" << c.soft_cap << " sinks=" << c.sinks << " chunk=" << c.chunk << ")");
    }
  }
  SUCCEED();
}

}  // namespace

TEST_CASE("Blocked attention matches a double-precision softmax", "[backend][cpu][attention]") {
  std::uint32_t seed = 100;
  for (std::int64_t D : {8, 16, 64, 72}) {
    for (auto [N, K] : {std::pair<std::int64_t, std::int64_t>{4, 4}, {4, 2}, {6, 1}}) {
      for (int threads : {1, 2}) {
        AttnCase dec;  // decode: one query at the end of a long cache, two rows of different lengths
        dec.B = 2, dec.T = 1, dec.S = 77, dec.N = N, dec.K = K, dec.Dq = D, dec.Dv = D;
        dec.q_start = {76, 40};
        dec.kv_len = {77, 41};
        check_attention<float>(dec, threads, seed++);
        check_attention<bf16>(dec, threads, seed++);
        AttnCase pre;  // prefill after a prefix, with the cache longer than the keys in use
        pre.B = 1, pre.T = 19, pre.S = 40, pre.N = N, pre.K = K, pre.Dq = D, pre.Dv = D;
        pre.q_start = {5};
        pre.kv_len = {24};
        check_attention<float>(pre, threads, seed++);
        check_attention<bf16>(pre, threads, seed++);
        AttnCase win = pre, cap = pre, snk = pre;
        win.window = 7;
        check_attention<float>(win, threads, seed++);
        cap.soft_cap = 3.0f;
        check_attention<float>(cap, threads, seed++);
        snk.sinks = true;
        check_attention<float>(snk, threads, seed++);
        AttnCase opts = pre;  // every mask and option at once
        opts.window = 7;
        opts.segments = true;
        opts.soft_cap = 3.0f;
        opts.sinks = true;
        check_attention<float>(opts, threads, seed++);
        AttnCase chunked = pre;
        chunked.chunk = 8;
        chunked.causal = false;
        chunked.Dv = D / 2 == 0 ? 1 : D / 2;
        check_attention<float>(chunked, threads, seed++);
        AttnCase masked = pre;  // segment ids that hide every key from some queries
        masked.segments = true;
        check_attention<float>(masked, threads, seed++);
        check_attention<bf16>(masked, threads, seed++);
        AttnCase pics = pre;  // two pictures in the step, one longer than the sliding window (Gemma 3's local layers)
        pics.pictures = {{{2, 5}, {7, 18}}};
        check_attention<float>(pics, threads, seed++);
        pics.window = 3;
        check_attention<float>(pics, threads, seed++);
        check_attention<bf16>(pics, threads, seed++);
        AttnCase verify;  // a verify pass: 5 queries after 250 keys, each row equal to its decode step
        verify.B = 2, verify.T = 5, verify.S = 300, verify.N = N, verify.K = K, verify.Dq = D, verify.Dv = D;
        verify.q_start = {250, 45};  // row 1: the last block is whole for some queries, partial for others
        verify.kv_len = {255, 50};
        check_attention<float>(verify, threads, seed++);
        check_attention<bf16>(verify, threads, seed++);
        verify.sinks = true;
        verify.segments = true;
        check_attention<float>(verify, threads, seed++);
        verify.segments = false;
        verify.window = 40;  // the queries start at different keys: one query per work item
        check_attention<float>(verify, threads, seed++);
        verify.window = 0;
        verify.soft_cap = 2.0f;
        verify.T = 2;
        verify.kv_len = {252, 47};
        check_attention<bf16>(verify, threads, seed++);
        AttnCase few = pics;  // fewer than 8 queries: the one-query path; a second row without pictures
        few.B = 2, few.T = 6, few.q_start = {5, 9}, few.kv_len = {11, 15};
        few.pictures = {{{1, 5}}, {}};
        check_attention<float>(few, threads, seed++);
      }
    }
  }
}

TEST_CASE("SwiGLU activation rows match the scalar definition", "[backend][cpu][activation]") {
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (std::int64_t F : {1, 15, 16, 37, 100}) {
    Tensor<float, 2> h0({3, F}), h1({3, F}), y({3, F});
    for (std::int64_t i = 0; i < h0.size(); ++i) {
      h0.data()[i] = nd(g);
      h1.data()[i] = nd(g);
    }
    h0(0, 0) = -100.0f;  // exp overflow side: silu -> -0
    cpu::Backend be(cpu::Options{1});
    be.activation(h0.cview(), Activation::silu, h1.cview(), Activation::linear, y.view());
    for (std::int64_t r = 0; r < 3; ++r) {
      for (std::int64_t i = 0; i < F; ++i) {
        const double x = h0(r, i), ref = x / (1.0 + std::exp(-x)) * h1(r, i);
        // two f32 roundings and exp to a few ulp
        REQUIRE(std::abs(y(r, i) - ref) <= 4e-7 * std::abs(ref) + 1e-30);
      }
    }
  }
}

namespace {

/// A weight packed and then stripped of its out-major rows (what the loader does with a copy it made: one copy in
/// memory) must give back every stored value bit for bit, and every product the same bits as with its rows.
template <class W>
void check_released_rows(bool int8_activations) {
  const std::int64_t N = 130, K = 96;  // N past two AVX-512 panels, not a multiple of any panel width
  std::mt19937 g(77);
  std::vector<double> wd;
  Matrix<W> raw = make_weight<W>(N, K, g, wd);
  std::vector<std::byte> bytes(static_cast<std::size_t>(raw.data.size()) * sizeof(W));
  std::memcpy(bytes.data(), raw.data.data(), bytes.size());
  cpu::Options opt{2};
  opt.int8_activations = int8_activations;
  cpu::Backend be(opt);
  Matrix<W> kept = be.prepare(raw);
  Matrix<W> released = kept;
  be.release_rows(released);  // the rows are shared (raw, kept): freeing them would free nothing, so they stay
  CHECK(!released.data.empty());
  raw = Matrix<W>();
  kept.data = Tensor<W, 2>(released.data.shape());  // kept: a copy of its own, so that `released` owns the original
  std::memcpy(kept.data.data(), bytes.data(), bytes.size());
  be.release_rows(released);
  REQUIRE(released.data.empty());
  CHECK(!released.empty());

  const Tensor<W, 2> back = be.unpacked(released);
  REQUIRE(back.size() == kept.data.size());
  CHECK(std::memcmp(back.data(), bytes.data(), bytes.size()) == 0);

  for (std::int64_t M : {1, 3, 40}) {
    INFO("M = " << M);
    Operands<float, float> op(M, N, K, g);
    Tensor<float, 2> y1 = Tensor<float, 2>::zeros({M, N}), y2 = Tensor<float, 2>::zeros({M, N});
    be.matmul(op.x, kept, View<float, 2>(y1.view()), View<const float, 1>(op.bias.view()));
    be.matmul(op.x, released, View<float, 2>(y2.view()), View<const float, 1>(op.bias.view()));
    CHECK(std::memcmp(y1.data(), y2.data(), static_cast<std::size_t>(M * N) * sizeof(float)) == 0);
    // A strided bias takes the product first and the bias after: the same two roundings as the fused bias.
    Tensor<float, 1> b2({2 * N});
    for (std::int64_t n = 0; n < N; ++n) b2(2 * n) = op.bias(n);
    Tensor<float, 2> y3 = Tensor<float, 2>::zeros({M, N});
    be.matmul(op.x, released, View<float, 2>(y3.view()), View<const float, 1>(b2.data(), {N}, {2}));
    CHECK(std::memcmp(y1.data(), y3.data(), static_cast<std::size_t>(M * N) * sizeof(float)) == 0);
  }
  // Per-head row reads (MLA's absorbed products) read the panels: the same bits as the rows.
  const std::int64_t H = 5, d = 26;  // heads of 26 rows: 5 x 26 = 130
  Tensor<float, 3> x({2, H, K}), h1({2, H, d}), h2({2, H, d});
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = nd(g);
  be.head_matmul(View<const float, 3>(x.view()), kept, d, 0, false, View<float, 3>(h1.view()));
  be.head_matmul(View<const float, 3>(x.view()), released, d, 0, false, View<float, 3>(h2.view()));
  CHECK(std::memcmp(h1.data(), h2.data(), static_cast<std::size_t>(h1.size()) * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("Packed weights without their rows: values and products bit for bit", "[backend][cpu][gemm]") {
  SECTION("f32") { check_released_rows<float>(false); }
  SECTION("bf16") { check_released_rows<bf16>(false); }
  SECTION("fp16") { check_released_rows<fp16>(false); }
  SECTION("q8_0") { check_released_rows<q8_0>(false); }
  SECTION("q8_0, 8-bit activations") { check_released_rows<q8_0>(true); }
}

namespace {

/// The bytes of a packed weight's panels.
template <class W>
std::vector<std::byte> panels_of(const Matrix<W>& m) {
  const auto& p = *static_cast<const cpu::gemm::Packed*>(m.packed.get());
  const std::size_t n = p.panel_bytes * static_cast<std::size_t>(p.panels);
  return std::vector<std::byte>(p.buf.data(), p.buf.data() + n);
}

/// Packing rows as a source makes them, a chunk at a time, gives the panels of the whole rows, for any chunk size and
/// granule (chunks of whole panels and whole granules; the last one short).
template <class W>
void check_pack_rows(bool int8_activations) {
  const std::int64_t N = 130, K = 96;
  std::mt19937 g(91);
  std::vector<double> wd;
  const Matrix<W> raw = make_weight<W>(N, K, g, wd);
  const std::int64_t row_len = raw.data.dim(1);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{5000}, std::size_t{1} << 24}) {
    for (const std::int64_t granule : {std::int64_t{1}, std::int64_t{2}, std::int64_t{13}, std::int64_t{65}}) {
      INFO("chunk bytes " << chunk << ", granule " << granule);
      cpu::Options opt{2};
      opt.int8_activations = int8_activations;
      opt.pack_chunk_bytes = chunk;
      cpu::Backend be(opt);
      const Matrix<W> whole = be.prepare(raw);
      std::vector<std::pair<std::int64_t, std::int64_t>> asked;
      const cpu::gemm::RowSource<W> rows = [&](std::int64_t r0, std::int64_t r1, W* out) {
        asked.emplace_back(r0, r1);
        std::memcpy(static_cast<void*>(out), raw.data.data() + r0 * row_len,
                    static_cast<std::size_t>((r1 - r0) * row_len) * sizeof(W));
      };
      const Matrix<W> m = be.pack_rows<W>(N, K, granule, rows);
      CHECK(m.data.empty());
      CHECK(!m.empty());
      CHECK(panels_of(m) == panels_of(whole));
      // Every row asked once, in order, cut at multiples of the granule; small chunks make several steps.
      REQUIRE(!asked.empty());
      std::int64_t next = 0;
      for (const auto& [r0, r1] : asked) {
        CHECK(r0 == next);
        CHECK(r0 % granule == 0);
        CHECK((r1 % granule == 0 || r1 == N));
        next = r1;
      }
      CHECK(next == N);
      // Chunks are whole panels and whole granules: several of them when such a unit is shorter than the weight.
      if (chunk == 1 && std::lcm(granule, cpu::gemm::kNR) < N) CHECK(asked.size() > 1);
      const Tensor<W, 2> back = be.unpacked(m);
      CHECK(std::memcmp(back.data(), raw.data.data(), static_cast<std::size_t>(raw.data.size()) * sizeof(W)) == 0);
    }
  }
}

}  // namespace

TEST_CASE("Packing a weight's rows as they are made: the panels of the whole, byte for byte", "[backend][cpu][gemm]") {
  SECTION("f32") { check_pack_rows<float>(false); }
  SECTION("bf16") { check_pack_rows<bf16>(false); }
  SECTION("fp16") { check_pack_rows<fp16>(false); }
  SECTION("q8_0") { check_pack_rows<q8_0>(false); }
  SECTION("q8_0, 8-bit activations") { check_pack_rows<q8_0>(true); }
}

TEST_CASE("The loader packs a copied kernel a chunk at a time: the panels of the whole copy",
          "[backend][cpu][gemm][io]") {
  // A kernel [in, out] as MaxText stores it, with two output axes ([emb, heads, head_dim]): the loader transposes it
  // to out-major rows. With 1 KiB chunks it is packed a few heads at a time; the panels must equal prepare() of
  // io::to_matrix (the whole copy), for f32 storage and for a conversion to bf16 and to Q8_0.
  const std::int64_t E = 64, H = 6, D = 24;
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor<float, 3> kernel({E, H, D});
  for (std::int64_t i = 0; i < kernel.size(); ++i) kernel.data()[i] = nd(g);
  io::TensorMap map;
  map.add("w", AnyTensor::from(kernel, "test kernel"));
  const layers::KernelSpec spec{{E}, {H, D}};
  const std::vector<int> perm = {1, 2, 0};
  CHECK(io::row_granule(map.at("w"), perm, 2) == D);
  auto check = [&](auto tag) {
    using W = decltype(tag);
    INFO(dtype_name(dtype_of<W>));
    cpu::Options opt{1};
    opt.pack_chunk_bytes = 1024;
    cpu::Backend be(opt);
    layers::ParamLoader<Policy<cpu::Backend, W, float>> loader(map, be);
    Matrix<W> m;
    loader.matrix("w", m, spec);
    loader.finish();
    REQUIRE(m.rows == H * D);
    REQUIRE(m.cols == E);
    CHECK(m.data.empty());  // panels only: the copy never existed whole
    Matrix<W> whole;
    whole.rows = H * D;
    whole.cols = E;
    whole.data = io::to_matrix<W>(map.at("w"), perm, 2);
    whole = be.prepare(whole);
    CHECK(panels_of(m) == panels_of(whole));
  };
  check(float{});
  check(bf16{});
  check(q8_0{});

  // io::to_matrix_rows on its own: rows cut at whole heads, read in slabs of a few source rows (the slab path of a
  // strided source), from f32 and bf16 files, equal the rows of the whole copy bit for bit.
  Tensor<bf16, 3> kb({E, H, D});
  for (std::int64_t i = 0; i < kb.size(); ++i) kb.data()[i] = bf16(kernel.data()[i]);
  for (const AnyTensor& src : {AnyTensor::from(kernel, "f32 kernel"), AnyTensor::from(kb, "bf16 kernel")}) {
    INFO(src.source);
    const Tensor<float, 2> whole = io::to_matrix<float>(src, perm, 2);
    for (const std::size_t slab : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 22}) {
      for (const auto& [r0, r1] : {std::pair<std::int64_t, std::int64_t>{0, H * D}, {D, 3 * D}, {5 * D, 6 * D}}) {
        INFO("slab bytes " << slab << ", rows " << r0 << ".." << r1);
        std::vector<float> part(static_cast<std::size_t>((r1 - r0) * E));
        io::to_matrix_rows<float>(src, perm, 2, r0, r1, part.data(), slab);
        CHECK(std::memcmp(part.data(), whole.data() + r0 * E, part.size() * sizeof(float)) == 0);
      }
    }
  }
  CHECK_THROWS_AS(io::to_matrix_rows<float>(map.at("w"), perm, 2, 1, D, std::vector<float>(1000).data()),
                  ArgumentError);  // not at a whole head
  // Rows that lie contiguous but one file row apart (a rank's half of an out-major [heads, head_dim, 2 emb] tensor),
  // copied and converted (bf16 to f32) straight into the chunk: the rows of the whole copy.
  Tensor<bf16, 3> om({H, D, 2 * E});
  for (std::int64_t i = 0; i < om.size(); ++i) om.data()[i] = bf16(nd(g));
  const AnyTensor half = AnyTensor::from(om, "out-major bf16").narrow(2, E, E);
  const std::vector<int> id = {0, 1, 2};
  const Tensor<float, 2> whole = io::to_matrix<float>(half, id, 2);
  for (const auto& [r0, r1] : {std::pair<std::int64_t, std::int64_t>{0, H * D}, {2 * D, 5 * D}}) {
    INFO("contiguous rows " << r0 << ".." << r1);
    std::vector<float> part(static_cast<std::size_t>((r1 - r0) * E));
    io::to_matrix_rows<float>(half, id, 2, r0, r1, part.data());
    CHECK(std::memcmp(part.data(), whole.data() + r0 * E, part.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("Packed weights without their rows: a view of a mapped file keeps its rows", "[backend][cpu][gemm]") {
  // Registered read-only mappings (io/mapped_file.hpp) cost nothing to keep: prepare handed their pages back.
  std::mt19937 g(5);
  std::vector<double> wd;
  Matrix<float> raw = make_weight<float>(20, 64, g, wd);
  const float* p = raw.data.data();
  register_readonly_mapping(p, static_cast<std::size_t>(raw.data.size()) * sizeof(float));
  cpu::Backend be(cpu::Options{1});
  Matrix<float> m = be.prepare(raw);
  raw = Matrix<float>();  // m is the only owner, yet its rows are the (pretend) file's
  be.release_rows(m);
  CHECK(m.data.data() == p);
  unregister_readonly_mapping(p);
}
