// Prefill (many activation rows) on runtime-typed ggml blocks (cpu::gemm::wrap_ggml, PackKind::ggml), against
// references built from the scalar decoder only (quant::dequantize_row, qblock's portable decode_int) and long-double
// sums, on random blocks of every ggml type.
//
// With 8-bit activations, the types with one scale per 32 values (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, IQ4_NL,
// IQ4_XS) take the integer panels: y = sum over 32-value groups g of d_x,g * sum_{e in g} w_e q_x,e, with the
// activations quantised by the documented rule (d = max|x| / 127, q = x * (1 / d) rounded to nearest, ties to
// even). The integer sums are exact; the float steps per group (a * d_x, one fused multiply-add, and for the types
// with offsets b, d_x * sum(q_x) and a second one) and the K/32-term accumulation add at most (K/32 + 8) roundings of
// terms bounded by mag = sum_g d_x,g * sum_e (|a_e q_e| + |b_e|) |q_x,e| (a, b, q the block's integer form
// w = a q + b), so |err| <= 2 (K/32 + 8) 2^-24 mag: a wrong quant, scale or offset, or a dropped group is far outside.
// The other types (a scale per 16 values) and every type without 8-bit activations take exact f32 panels: the sum
// of the exact products w x in f32, |err| <= (K + 8) 2^-24 sum |w x|. F32 / F16 / BF16 rows (a file's unquantised
// matrices read in place) are always exact, decode and prefill alike, under the same bound.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/gemm.hpp"
#include "support/ggml_blocks.hpp"

using namespace maxtext;
namespace gm = maxtext::cpu::gemm;
namespace qb = maxtext::cpu::qblock;

namespace {

using test::kGgmlBlockTypes;

/// N rows of K values of type t: random bytes, fp16 scale fields uniform in [-1, 1].
std::vector<std::byte> random_rows(quant::BlockType t, std::int64_t N, std::int64_t K, std::uint32_t seed) {
  return test::random_blocks(t, N * K / quant::block_format(t).block, seed, 1.0f, false);
}

/// The documented activation rule for one 32-value group.
void quantize_group(const float* x, std::int8_t* q, float& d, int& sum) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  sum = 0;
  for (int i = 0; i < 32; ++i) {
    q[i] = static_cast<std::int8_t>(std::nearbyint(x[i] * id));
    sum += q[i];
  }
}

void check(quant::BlockType t, std::int64_t M, std::int64_t N, std::int64_t K, bool int8, int threads, double vs,
           std::uint32_t seed) {
  const quant::BlockFormat& f = quant::block_format(t);
  INFO(f.name << " M=" << M << " N=" << N << " K=" << K << " int8=" << int8 << " threads=" << threads
              << " value_scale=" << vs);
  const std::size_t row_bytes = static_cast<std::size_t>(K / f.block * f.bytes);
  const auto rows = random_rows(t, N, K, seed);
  const auto p = gm::wrap_ggml(rows.data(), row_bytes, static_cast<std::uint32_t>(t), N, K, nullptr, int8, vs);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::int64_t ldx = K + 3, ldy = N + 5;
  std::vector<float> x(static_cast<std::size_t>(M * ldx)), y(static_cast<std::size_t>(M * ldy), 12345.0f);
  for (auto& v : x) v = u(rng);
  for (std::int64_t k = 0; k < 32 && K >= 64; ++k) x[static_cast<std::size_t>(k)] = 0.0f;  // an all-zero group
  gm::matmul<float, float>(*p, x.data(), ldx, M, y.data(), ldy, static_cast<const float*>(nullptr), threads);

  // 8-bit activations: integer block sums, row by row (qblock::dot_q8) for few rows and on every type, in integer
  // panels for more rows on the types with one scale per 32 values; the others' panels are exact.
  const bool integer =
      int8 && (M <= gm::kGgmlI8RowsDirect || qb::dot_q8_rows_preferred(t, M) ||
                 gm::detail::ggml_i8_kind(static_cast<std::uint32_t>(t)).ok);
  std::vector<float> w(static_cast<std::size_t>(K));
  std::vector<std::int8_t> xq(static_cast<std::size_t>(K));
  std::vector<float> xd(static_cast<std::size_t>(K / 32));
  std::vector<int> xs(static_cast<std::size_t>(K / 32));
  qb::detail::IntBlock ib;
  int bad = 0;
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xm = x.data() + m * ldx;
    for (std::int64_t g = 0; g < K / 32; ++g) {
      quantize_group(xm + 32 * g, &xq[static_cast<std::size_t>(32 * g)], xd[static_cast<std::size_t>(g)],
                     xs[static_cast<std::size_t>(g)]);
    }
    for (std::int64_t n = 0; n < N; ++n) {
      const std::byte* row = rows.data() + static_cast<std::size_t>(n) * row_bytes;
      quant::dequantize_row(t, row, w.data(), K);
      long double ref = 0, mag = 0;
      if (integer) {
        for (std::int64_t b = 0; b < K / f.block; ++b) {
          qb::detail::decode_int(t, row + b * f.bytes, ib);
          for (std::int64_t e = 0; e < f.block; ++e) {
            const std::int64_t k = b * f.block + e;
            const long double dx = xd[static_cast<std::size_t>(k / 32)];
            const long double a = ib.a[e / 16], bo = ib.b[e / 16];
            const long double qx = xq[static_cast<std::size_t>(k)];
            ref += dx * (a * ib.q[e] + bo) * qx;
            mag += dx * (std::fabs(a * ib.q[e]) + std::fabs(bo)) * std::fabs(qx);
          }
        }
      } else {
        for (std::int64_t k = 0; k < K; ++k) {
          ref += static_cast<long double>(w[static_cast<std::size_t>(k)]) * xm[k];
          mag += std::fabs(static_cast<long double>(w[static_cast<std::size_t>(k)]) * xm[k]);
        }
      }
      ref *= vs;
      mag *= std::fabs(vs);
      const long double steps = integer ? 2.0L * (static_cast<long double>(K) / 32 + 8) : static_cast<long double>(K + 8);
      const long double tol = steps * std::ldexp(1.0L, -24) * mag + 1e-30L;
      const float got = y[static_cast<std::size_t>(m * ldy + n)];
      if (std::fabs(static_cast<long double>(got) - ref) > tol && ++bad <= 3) {
        FAIL_CHECK("y[" << m << "," << n << "] = " << got << ", reference " << static_cast<double>(ref)
                        << ", tolerance " << static_cast<double>(tol));
      }
    }
    for (std::int64_t n = N; n < ldy; ++n) REQUIRE(y[static_cast<std::size_t>(m * ldy + n)] == 12345.0f);
  }
  REQUIRE(bad == 0);
}

}  // namespace

TEST_CASE("Runtime-typed blocks, many rows: 8-bit activations follow the integer definition", "[backend][cpu][gemm]") {
  std::uint32_t seed = 7;
  for (auto t : kGgmlBlockTypes) {
    // M = 2, 5 and 8: decode's kernels (dot_q8_rows, one row after the other or several at once); 13 and 40: panels
    // (or dot_q8_rows where this machine prefers it).
    for (const auto& [M, N, K] :
         std::vector<std::array<std::int64_t, 3>>{{2, 33, 256}, {5, 64, 256}, {8, 64, 512}, {13, 70, 512}, {40, 130, 256}}) {
      check(t, M, N, K, true, (seed % 2) + 1, 1.0, seed);
      ++seed;
    }
  }
}

TEST_CASE("Runtime-typed blocks, many rows: K blocks, row blocks, threads and a value scale", "[backend][cpu][gemm]") {
  // K past the cache block (partial sums kept in y between K blocks) and M past the integer row block.
  for (auto t : {quant::BlockType::q4_k, quant::BlockType::q4_0, quant::BlockType::iq4_xs, quant::BlockType::q6_k}) {
    check(t, gm::kMCI8 + 7, 67, gm::kKC + 256, true, 2, 1.0, 31);
    check(t, 3 * gm::kMR + 1, 64, gm::kKC + 512, true, 1, 0.125, 32);
  }
  check(quant::BlockType::q5_k, 2 * gm::kMR + 3, 65, 2 * gm::kKC, true, 2, 0.3, 33);
}

TEST_CASE("Runtime-typed blocks, many rows: exact products without 8-bit activations", "[backend][cpu][gemm]") {
  std::uint32_t seed = 50;
  for (auto t : kGgmlBlockTypes) {
    check(t, 9, 70, 512, false, (seed % 2) + 1, 1.0, seed);
    ++seed;
  }
  check(quant::BlockType::q4_k, gm::kMC + 3, 66, gm::kKC + 256, false, 2, 0.125, 60);
}

namespace {

using test::random_float_rows;

/// F32 / F16 / BF16 rows read where they lie: decode (M <= kFloatRowsDirect, qblock::dot_float_rows) and panels (more rows)
/// are the exact products in f32 whatever the 8-bit-activation flag, |err| <= (K + 8) 2^-24 sum |w x| against a
/// long-double sum of the widened values (quant::dequantize_any, the scalar widening).
void check_float(std::uint32_t type, std::int64_t M, std::int64_t N, std::int64_t K, bool int8, int threads,
                 std::uint32_t seed) {
  INFO("type " << type << " M=" << M << " N=" << N << " K=" << K << " int8=" << int8 << " threads=" << threads);
  const auto row_bytes = static_cast<std::size_t>(quant::row_bytes(type, K));
  const auto rows = random_float_rows(type, N, K, seed);
  const auto p = gm::wrap_ggml(rows.data(), row_bytes, type, N, K, nullptr, int8);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::int64_t ldx = K + 3, ldy = N + 5;
  std::vector<float> x(static_cast<std::size_t>(M * ldx)), y(static_cast<std::size_t>(M * ldy), 12345.0f);
  for (auto& v : x) v = u(rng);
  gm::matmul<float, float>(*p, x.data(), ldx, M, y.data(), ldy, static_cast<const float*>(nullptr), threads);
  std::vector<float> w(static_cast<std::size_t>(K));
  int bad = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    quant::dequantize_any(type, rows.data() + static_cast<std::size_t>(n) * row_bytes, w.data(), K);
    for (std::int64_t m = 0; m < M; ++m) {
      long double ref = 0, mag = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const long double t = static_cast<long double>(w[static_cast<std::size_t>(k)]) * x[static_cast<std::size_t>(m * ldx + k)];
        ref += t;
        mag += std::fabs(t);
      }
      const long double tol = static_cast<long double>(K + 8) * std::ldexp(1.0L, -24) * mag + 1e-30L;
      const float got = y[static_cast<std::size_t>(m * ldy + n)];
      if (std::fabs(static_cast<long double>(got) - ref) > tol && ++bad <= 3) {
        FAIL_CHECK("y[" << m << "," << n << "] = " << got << ", reference " << static_cast<double>(ref)
                        << ", tolerance " << static_cast<double>(tol));
      }
    }
  }
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t n = N; n < ldy; ++n) REQUIRE(y[static_cast<std::size_t>(m * ldy + n)] == 12345.0f);
  }
  REQUIRE(bad == 0);
}

}  // namespace

TEST_CASE("Runtime-typed F32 / F16 / BF16 rows: widening is exact, products are exact f32 sums", "[backend][cpu][gemm]") {
  for (const std::uint32_t type : {quant::kTypeF32, quant::kTypeF16, quant::kTypeBF16}) {
    // qblock::widen equals the scalar widening bit for bit, at any count (vector body and tail).
    for (const std::int64_t n : {1, 31, 32, 96, 257}) {
      const auto src = random_float_rows(type, 1, n, 3);
      std::vector<float> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
      qb::widen(type, src.data(), a.data(), n);
      quant::dequantize_any(type, src.data(), b.data(), n);
      REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
    std::uint32_t seed = 70;
    // K a multiple of 32, and K with a tail; decode rows (1..8), panels (more), K blocks, threads, the int8 flag.
    for (const auto& [M, N, K] : std::vector<std::array<std::int64_t, 3>>{
             {1, 70, 256}, {2, 33, 100}, {3, 64, 257}, {4, 65, 512}, {7, 40, 96}, {8, 20, 64}, {9, 70, 160}, {40, 67, 99},
             {gm::kMC + 3, 66, gm::kKC + 64}}) {
      check_float(type, M, N, K, seed % 3 == 0, static_cast<int>(seed % 2) + 1, seed);
      ++seed;
    }
  }
}

namespace {

/// M rows of x through one matmul against the same rows one at a time (decode steps): equal bit for bit, with bf16
/// or f32 x and y, a bias and the weight's value scale.
template <class X, class Y>
void check_rows_equal_steps(const gm::Packed& p, std::int64_t M, std::int64_t N, std::int64_t K, bool with_bias,
                            int threads, std::uint32_t seed) {
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<X> x(static_cast<std::size_t>(M * K));
  for (auto& v : x) v = from_float<X>(u(rng));
  std::vector<Y> bias(static_cast<std::size_t>(N));
  for (auto& v : bias) v = from_float<Y>(u(rng));
  const Y* b = with_bias ? bias.data() : nullptr;
  std::vector<Y> prompt(static_cast<std::size_t>(M * N)), step(static_cast<std::size_t>(N));
  gm::matmul<X, Y, Y>(p, x.data(), K, M, prompt.data(), N, b, threads);
  int bad = 0;
  for (std::int64_t m = 0; m < M; ++m) {
    gm::matmul<X, Y, Y>(p, x.data() + m * K, K, 1, step.data(), N, b, threads);
    for (std::int64_t n = 0; n < N; ++n) {
      const float got = to_float(prompt[static_cast<std::size_t>(m * N + n)]), want = to_float(step[static_cast<std::size_t>(n)]);
      if (std::memcmp(&got, &want, sizeof(float)) != 0 && ++bad <= 3) {
        FAIL_CHECK("y[" << m << "," << n << "] = " << got << " in the prompt, " << want << " as a decode step");
      }
    }
  }
  REQUIRE(bad == 0);
}

/// A prompt's rows through qblock::dot_q8_rows (where this machine prefers it) against the same rows one at a time
/// through the decode path: the same activation rounding and the same integer and float steps, so the outputs must
/// be equal bit for bit, with bf16 or f32 x and y, a bias and a value scale.
template <class X, class Y>
void check_prompt_equals_decode(quant::BlockType t, std::int64_t M, std::int64_t N, std::int64_t K, bool with_bias,
                                int threads, std::uint32_t seed, bool int8 = true) {
  const quant::BlockFormat& f = quant::block_format(t);
  INFO(f.name << " M=" << M << " N=" << N << " K=" << K << " bias=" << with_bias << " threads=" << threads
              << " int8=" << int8);
  const std::size_t row_bytes = static_cast<std::size_t>(K / f.block * f.bytes);
  const auto rows = random_rows(t, N, K, seed);
  const auto p = gm::wrap_ggml(rows.data(), row_bytes, static_cast<std::uint32_t>(t), N, K, nullptr, int8, 0.3);
  check_rows_equal_steps<X, Y>(*p, M, N, K, with_bias, threads, seed);
}

/// F32 / F16 / BF16 rows read in place: the same comparison.
void check_float_rows_equal_steps(std::uint32_t type, std::int64_t M, std::int64_t N, std::int64_t K, int threads,
                                  std::uint32_t seed) {
  INFO("type " << type << " M=" << M << " N=" << N << " K=" << K << " threads=" << threads);
  const auto rows = test::random_float_rows(type, N, K, seed);
  const auto p = gm::wrap_ggml(rows.data(), static_cast<std::size_t>(quant::row_bytes(type, K)), type, N, K, nullptr);
  check_rows_equal_steps<float, float>(*p, M, N, K, true, threads, seed);
}

}  // namespace

TEST_CASE("Runtime-typed blocks, 8-bit activations: prompt rows equal decode steps where dot_q8_rows runs",
          "[backend][cpu][gemm]") {
  std::uint32_t seed = 90;
  int checked = 0;
  for (auto t : kGgmlBlockTypes) {
    const std::int64_t M = gm::kGgmlI8RowsDirect + 5;  // past the decode rows: the prefill path
    if (!qb::dot_q8_rows_preferred(t, M)) continue;    // (elsewhere the panels: not the decode arithmetic)
    check_prompt_equals_decode<float, float>(t, M, 2 * gm::kQ8RowsBlock + 7, 512, false, 2, seed++);
    check_prompt_equals_decode<bf16, bf16>(t, M + 4, 37, 256, true, 1, seed++);
    check_prompt_equals_decode<bf16, float>(t, 3, 33, 256, true, 2, seed++);  // decode rows compare with themselves
    ++checked;
  }
  if (checked == 0) WARN("no block type takes qblock::dot_q8_rows on this machine (the VNNI panels): nothing compared");
}

TEST_CASE("Runtime-typed blocks: a verify pass's rows (up to the decode rows) equal decode steps, bit for bit",
          "[backend][cpu][gemm]") {
  // Speculative decoding checks K drafts in one pass of K + 1 rows and keeps a token only where it is the argmax of
  // the logits that plain decoding would have computed: up to kGgmlRowsDirect (exact) / kGgmlI8RowsDirect (8-bit
  // activations) rows, the products are decode's, row for row, whatever the kernels share between the rows. K with a
  // tail past the four-block steps of the Q8_0 kernel (and with an odd block), chunks of weight rows past
  // kQ8DecodeRows.
  std::uint32_t seed = 400;
  for (auto t : kGgmlBlockTypes) {
    const bool b32 = quant::block_format(t).block == 32;
    for (const std::int64_t M : {std::int64_t{2}, std::int64_t{5}, gm::kGgmlRowsDirect}) {
      check_prompt_equals_decode<float, float>(t, M, gm::kQ8DecodeRows + 9, b32 ? 416 : 512, M == 5, 2, seed++, true);
      check_prompt_equals_decode<bf16, float>(t, M, 37, b32 ? 160 : 256, true, 1, seed++, false);
    }
    // The exact products' one pass of kExactDotRows rows, and the split past it (7 = 4 + 3).
    for (const std::int64_t M : {std::int64_t{qb::kExactDotRows}, std::int64_t{7}}) {
      check_prompt_equals_decode<float, float>(t, M, 29, b32 ? 160 : 256, false, 1, seed++, false);
    }
    check_prompt_equals_decode<float, float>(t, gm::kGgmlI8RowsDirect, 21, 256, false, 1, seed++, true);
  }
  for (const std::uint32_t type : {quant::kTypeF32, quant::kTypeF16, quant::kTypeBF16}) {
    for (const std::int64_t M : {std::int64_t{2}, std::int64_t{3}, std::int64_t{5}, gm::kFloatRowsDirect}) {
      check_float_rows_equal_steps(type, M, 41, M == 3 ? 200 : 256, static_cast<int>(M % 2) + 1, seed++);
    }
    // Past one dot_float_rows call (gm::kFloatDecodeRows weight rows), split between two threads, K with a tail past
    // the vector width (203), and the tiles of 6 and 7 rows.
    for (const std::int64_t M : {std::int64_t{6}, std::int64_t{7}}) {
      check_float_rows_equal_steps(type, M, 2 * gm::kFloatDecodeRows + 7, 203, 2, seed++);
    }
  }
}

TEST_CASE("Integer prefill's activation rows: groups too small to scale get q = 0, as qblock::quantize_x gives",
          "[backend][cpu][gemm]") {
  // gemm::detail::quantize_row and qblock::quantize_x share the rule (qblock::inverse_scale): a group whose 1/d
  // overflows (max|x| below ~3.7e-37) is quantised to zeros; without it the products clamp infinities to +-127.
  const std::int64_t K = 32 * 4;
  std::vector<float> x(static_cast<std::size_t>(K));
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(g);
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(32 + i)] *= std::ldexp(1.0f, -140);  // subnormal group
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(64 + i)] = 0.0f;                     // all-zero group
  std::vector<std::int8_t> q(static_cast<std::size_t>(K));
  std::vector<float> d(static_cast<std::size_t>(K / 32));
  std::vector<std::int32_t> c(static_cast<std::size_t>(K / 32));
  gm::detail::quantize_row(x.data(), K, q.data(), d.data(), c.data());
  std::vector<std::byte> buf(qb::quantized_x_bytes(K));
  const qb::QuantizedX ref = qb::quantize_x(x.data(), K, buf.data());
  for (std::int64_t i = 0; i < K; ++i) {
    INFO("value " << i);
    CHECK(static_cast<int>(q[static_cast<std::size_t>(i)]) == static_cast<int>(ref.q[i]));
  }
  for (int i = 32; i < 96; ++i) CHECK(q[static_cast<std::size_t>(i)] == 0);
  CHECK(c[1] == 0);
  CHECK(d[0] > 0.0f);
}
