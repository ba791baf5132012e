// The block-row kernels of backend/cpu/qblock.hpp against references built only from quant::dequantize_row (the
// scalar decoder) and long-double sums, on random blocks of every ggml type: random bytes with finite random fp16
// scales in [-2, 2] (a few subnormal), K = 512 and 4096 (and 96 for 32-value blocks: an odd number of blocks).
//
// Tolerances. dot_exact sums the exact products w*x (w the same f32 values as the scalar decoder) in f32, in lanes
// of at most K/64 terms (the portable path too) followed by a pairwise reduction of 64 lanes: any such order has
// |err| <= (K/64 + 6) * u * sum|w x| (u = 2^-24), i.e. <= 4.3e-6 * sum|w x| at K = 4096; 1e-5 leaves room, and a
// wrongly decoded value or a dropped block is far outside it. (The AVX2 path's addition chains are at most
// 20 + K/256 long: 36 at K = 4096, 22 at K = 512, both far inside the bound.) dot_q8's integer sums are exact; its float steps
// (scale products, one product per lane, the sum of the lanes, the min term) add a few roundings of terms bounded
// by a small multiple of sum|w x_q|, so 1e-5 of that is again a bound with room.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/qblock.hpp"
#include "support/ggml_blocks.hpp"

using namespace maxtext;
namespace qb = maxtext::cpu::qblock;

namespace {

using test::kGgmlBlockTypes;

/// `n` blocks of type t: fp16 scale fields uniform in [-2, 2], every 7th block's first scale subnormal.
std::vector<std::byte> random_blocks(quant::BlockType t, std::int64_t n, std::uint32_t seed) {
  return test::random_blocks(t, n, seed, 2.0f, true);
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<std::int64_t> sizes(quant::BlockType t) {
  std::vector<std::int64_t> k = {512, 4096};
  if (quant::block_format(t).block == 32) {  // tails after the Q8_0 kernel's 128-value steps: 3, 1 and 3 blocks
    k.push_back(96);
    k.push_back(160);
    k.push_back(480);
  }
  return k;
}

/// The long-double dot of decoded weights w with the quantised activations d * q, and the sum of the products'
/// magnitudes (the tolerance's scale).
struct Reference {
  long double ref = 0, mag = 0;
};
Reference q8_reference(const std::vector<float>& w, const qb::QuantizedX& x) {
  Reference r;
  for (std::int64_t k = 0; k < x.K; ++k) {
    const long double p = static_cast<long double>(w[static_cast<std::size_t>(k)]) *
                          (static_cast<long double>(x.d[k / 32]) * x.q[k]);
    r.ref += p;
    r.mag += std::fabs(p);
  }
  return r;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("qblock dequantize equals the scalar decoder bit for bit", "[qblock]") {
  for (auto t : kGgmlBlockTypes) {
    const quant::BlockFormat& f = quant::block_format(t);
    for (std::int64_t K : sizes(t)) {
      INFO(f.name << " K=" << K);
      const auto blocks = random_blocks(t, K / f.block, 17u + static_cast<std::uint32_t>(K));
      std::vector<float> want(static_cast<std::size_t>(K)), got(static_cast<std::size_t>(K) + 1, -1.0f);
      quant::dequantize_row(t, blocks.data(), want.data(), K);
      qb::dequantize(t, blocks.data(), got.data() + 1, K);  // unaligned destination
      std::int64_t bad = 0, first = -1;
      for (std::int64_t k = 0; k < K; ++k) {
        if (bits(want[k]) != bits(got[k + 1])) {
          if (first < 0) first = k;
          ++bad;
        }
      }
      INFO("first mismatch at " << first);
      CHECK(bad == 0);
      CHECK(got[0] == -1.0f);
    }
  }
}

TEST_CASE("qblock dot_exact against a long-double dot of the dequantised row", "[qblock]") {
  for (auto t : kGgmlBlockTypes) {
    const quant::BlockFormat& f = quant::block_format(t);
    for (std::int64_t K : sizes(t)) {
      const auto blocks = random_blocks(t, K / f.block, 5u + static_cast<std::uint32_t>(K));
      std::vector<float> w(static_cast<std::size_t>(K));
      quant::dequantize_row(t, blocks.data(), w.data(), K);
      const std::int64_t ldx = K + 16;
      const auto x = random_floats(static_cast<std::size_t>(qb::kExactDotRows * ldx), 99u);
      for (int M = 1; M <= qb::kExactDotRows; ++M) {
        INFO(f.name << " K=" << K << " M=" << M);
        float out[qb::kExactDotRows] = {};
        qb::dot_exact(t, blocks.data(), K, x.data(), ldx, M, out);
        for (int m = 0; m < M; ++m) {
          long double ref = 0, mag = 0;
          for (std::int64_t k = 0; k < K; ++k) {
            const long double p = static_cast<long double>(w[k]) * x[m * ldx + k];
            ref += p;
            mag += std::fabs(p);
          }
          INFO("m=" << m << " got " << out[m] << " want " << static_cast<double>(ref));
          CHECK(std::fabs(static_cast<long double>(out[m]) - ref) <= 1e-5L * mag + 1e-30L);
        }
      }
    }
  }
}

TEST_CASE("qblock quantize_x equals its scalar definition bit for bit", "[qblock]") {
  // The definition restated (qblock.hpp): d = max|x| / 127, q = nearbyint(x * (1/d)) (ties to even), 0 where d = 0
  // or 1/d overflows, s = sum q. Groups at many scales (subnormal, where 1/d overflows, to 1e29), an all-zero group, a
  // group of exact ties (max|x| = 127, so 1/d = 1 and x +- k.5 must round to even), a NaN (left out of max|x|), at an
  // odd address.
  const std::int64_t K = 32 * 40;
  auto x = random_floats(static_cast<std::size_t>(K), 91u);
  for (std::int64_t g = 0; g < K / 32; ++g)
    for (int i = 0; i < 32; ++i)
      x[static_cast<std::size_t>(32 * g + i)] *= std::ldexp(1.0f, static_cast<int>(g * 7 % 230) - 140);
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(32 + i)] = 0.0f;
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(64 + i)] = static_cast<float>(i % 2 ? i : -i) + 0.5f;
  x[64] = 127.0f;
  x[100] = std::nanf("");
  std::vector<std::byte> buf(qb::quantized_x_bytes(K) + 1);
  const qb::QuantizedX got = qb::quantize_x(x.data(), K, buf.data() + 1);
  for (std::int64_t g = 0; g < K / 32; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[static_cast<std::size_t>(32 * g + i)]));
    const float d = amax / 127.0f, id = d != 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
    INFO("group " << g << " max|x| " << amax);
    CHECK(bits(got.d[g]) == bits(d));
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float v = x[static_cast<std::size_t>(32 * g + i)] * id;
      if (std::isnan(v)) continue;  // (a NaN's byte is unspecified)
      const int want = static_cast<int>(std::nearbyint(v));
      sum += want;
      CHECK(got.q[32 * g + i] == want);
    }
    if (g != 100 / 32) CHECK(got.s[g] == sum);
  }
  CHECK(got.q[64 + 1] == 2);   // 1.5 -> 2
  CHECK(got.q[64 + 2] == -2);  // -2 + 0.5 = -1.5 -> -2
  CHECK(got.q[64 + 5] == 6);   // 5.5 -> 6
}

TEST_CASE("qblock dot_q8 against a long-double restatement with the same quantised activations", "[qblock]") {
  for (auto t : kGgmlBlockTypes) {
    const quant::BlockFormat& f = quant::block_format(t);
    for (std::int64_t K : sizes(t)) {
      INFO(f.name << " K=" << K);
      const auto blocks = random_blocks(t, K / f.block, 41u + static_cast<std::uint32_t>(K));
      std::vector<float> w(static_cast<std::size_t>(K));
      quant::dequantize_row(t, blocks.data(), w.data(), K);
      auto x = random_floats(static_cast<std::size_t>(K), 7u);
      for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;  // an all-zero group
      std::vector<std::byte> buf(qb::quantized_x_bytes(K));
      const qb::QuantizedX qx = qb::quantize_x(x.data(), K, buf.data());
      const auto [ref, mag] = q8_reference(w, qx);
      const float got = qb::dot_q8(t, blocks.data(), qx);
      INFO("got " << got << " want " << static_cast<double>(ref) << " mag " << static_cast<double>(mag));
      CHECK(std::fabs(static_cast<long double>(got) - ref) <= 1e-5L * mag + 1e-30L);
    }
  }
}

TEST_CASE("qblock dot_q8_rows equals dot_q8 row by row, bit for bit", "[qblock]") {
  // The multi-row kernels (prefill) share decoded blocks and loaded activations between rows; every product must
  // still be dot_q8's to the bit, so prompt and decoded tokens get the same sums. Row counts past the kernels' tiles
  // (two tiles of eight x rows and three more, odd remainders of weight rows), and K with an odd number of 32-value
  // blocks.
  for (auto t : kGgmlBlockTypes) {
    const quant::BlockFormat& f = quant::block_format(t);
    for (std::int64_t K : sizes(t)) {
      const std::int64_t N = 13, M = 19, ldo = N + 3;
      const std::size_t rb = static_cast<std::size_t>(K / f.block * f.bytes);
      const auto rows = random_blocks(t, N * K / f.block, 77u + static_cast<std::uint32_t>(K));
      const auto x = random_floats(static_cast<std::size_t>(M * K), 9u);
      const std::size_t qbytes = qb::quantized_x_bytes(K);
      std::vector<std::byte> buf(qbytes * static_cast<std::size_t>(M));
      std::vector<qb::QuantizedX> xq;
      for (std::int64_t m = 0; m < M; ++m) {
        xq.push_back(qb::quantize_x(x.data() + m * K, K, buf.data() + qbytes * static_cast<std::size_t>(m)));
      }
      for (const std::int64_t m_rows : {M, std::int64_t{1}, std::int64_t{2}, std::int64_t{5}, std::int64_t{8}}) {
        for (const std::int64_t n_rows : {N, std::int64_t{1}, std::int64_t{4}}) {
          std::vector<float> out(static_cast<std::size_t>(M * ldo), -7.0f);
          qb::dot_q8_rows(t, rows.data(), rb, n_rows, xq.data(), m_rows, out.data(), ldo);
          int bad = 0;
          for (std::int64_t m = 0; m < M; ++m) {
            for (std::int64_t n = 0; n < ldo; ++n) {
              const float got = out[static_cast<std::size_t>(m * ldo + n)];
              const float want = m < m_rows && n < n_rows ? qb::dot_q8(t, rows.data() + n * rb, xq[m]) : -7.0f;
              if (bits(got) != bits(want) && ++bad <= 3) {
                FAIL_CHECK(f.name << " K=" << K << " M=" << m_rows << " N=" << n_rows << ": out[" << m << "," << n
                                  << "] = " << got << ", dot_q8 " << want);
              }
            }
          }
          REQUIRE(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("qblock dot_q8 and dot_q8_rows with every quant at its largest and activations at +-127", "[qblock]") {
  // The integer kernels sum vpmaddubsw pair sums in 16 bits (up to 16 products of a 4-bit quant and an activation,
  // or 4 of a 6-bit one) before widening. Every quant bit set (4-bit quants 15, Q6_K 63, ..., the signed types' -1 and
  // the codebook's 113) against activations that all quantise to +-127 puts those sums at their bounds: an overflow
  // would be far outside dot_q8's tolerance, and dot_q8_rows must still equal dot_q8 to the bit. Every bit clear
  // gives the other extremes (the codebook's -127, whose products with +-127 make the largest signed pair sums).
  for (const std::byte fill : {std::byte{0xff}, std::byte{0x00}}) {
    for (auto t : kGgmlBlockTypes) {
      const quant::BlockFormat& f = quant::block_format(t);
      const std::int64_t K = 512, N = 3, M = 17;
      auto rows = random_blocks(t, N * K / f.block, 5u);
      for (std::int64_t b = 0; b < N * K / f.block; ++b) {  // every byte but the fp16 scale fields
        std::byte* blk = rows.data() + b * f.bytes;
        for (int i = 0; i < f.bytes; ++i) {
          const bool scale = (f.fp16_scales[0] >= 0 && (i == f.fp16_scales[0] || i == f.fp16_scales[0] + 1)) ||
                             (f.fp16_scales[1] >= 0 && (i == f.fp16_scales[1] || i == f.fp16_scales[1] + 1));
          if (!scale) blk[i] = fill;
        }
      }
      const std::size_t qbytes = qb::quantized_x_bytes(K), rb = static_cast<std::size_t>(K / f.block * f.bytes);
      std::vector<std::byte> buf(qbytes * M);
      std::vector<qb::QuantizedX> xq;
      for (std::int64_t m = 0; m < M; ++m) {  // all +1, all -1, then sign patterns
        std::vector<float> x(static_cast<std::size_t>(K));
        for (std::int64_t k = 0; k < K; ++k) x[k] = m == 0 ? 1.0f : m == 1 ? -1.0f : ((k / m) % 2 ? -1.0f : 1.0f);
        xq.push_back(qb::quantize_x(x.data(), K, buf.data() + qbytes * static_cast<std::size_t>(m)));
      }
      std::vector<float> out(static_cast<std::size_t>(M * N));
      qb::dot_q8_rows(t, rows.data(), rb, N, xq.data(), M, out.data(), N);
      for (std::int64_t n = 0; n < N; ++n) {
        std::vector<float> w(static_cast<std::size_t>(K));
        quant::dequantize_row(t, rows.data() + n * rb, w.data(), K);
        for (std::int64_t m = 0; m < M; ++m) {
          const auto [ref, mag] = q8_reference(w, xq[m]);
          const float got = qb::dot_q8(t, rows.data() + n * rb, xq[m]);
          INFO(f.name << " fill " << static_cast<int>(fill) << " row " << n << " x " << m << ": got " << got
                      << " want " << static_cast<double>(ref));
          CHECK(std::fabs(static_cast<long double>(got) - ref) <= 1e-5L * mag + 1e-30L);
          CHECK(bits(out[static_cast<std::size_t>(m * N + n)]) == bits(got));
        }
      }
    }
  }
}

TEST_CASE("qblock quantize_x follows the rule: d = max|x|/127, q = x / d to nearest (ties to even), sums per group",
          "[qblock]") {
  const std::int64_t K = 128;
  std::vector<float> x = random_floats(K, 3u);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                     // group 1: all zero
  for (int i = 0; i < 32; ++i) x[64 + i] = static_cast<float>(i % 5);  // group 2: exact values
  x[64] = 127.0f;                                                    // d = 1
  x[65] = 2.5f;                                                      // ties to even
  x[66] = -3.5f;
  x[67] = -127.0f;
  std::vector<std::byte> buf(qb::quantized_x_bytes(K));
  const qb::QuantizedX q = qb::quantize_x(x.data(), K, buf.data() + 1);  // an unaligned buffer start
  REQUIRE(q.K == K);
  for (const void* p : {static_cast<const void*>(q.q), static_cast<const void*>(q.d), static_cast<const void*>(q.s)}) {
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
    CHECK(static_cast<const std::byte*>(p) >= buf.data());
  }
  CHECK(reinterpret_cast<const std::byte*>(q.s + K / 32) <= buf.data() + buf.size());
  for (std::int64_t g = 0; g < K / 32; ++g) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * g + i]));
    CHECK(q.d[g] == amax / 127.0f);
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float v = x[32 * g + i];
      float r = v * (1.0f / q.d[g]);
      if (q.d[g] != 0.0f && r - std::floor(r) == 0.5f) r = 2.0f * std::round(r / 2.0f);  // a tie: to the even one
      const int want = q.d[g] == 0.0f ? 0 : static_cast<int>(std::round(r));
      CHECK(q.q[32 * g + i] == want);
      CHECK(std::fabs(q.d[g] * q.q[32 * g + i] - v) <= 0.5001f * q.d[g]);
      sum += q.q[32 * g + i];
    }
    CHECK(q.s[g] == sum);
  }
  CHECK(q.d[1] == 0.0f);
  CHECK(q.s[1] == 0);
  CHECK(q.q[32] == 0);
  CHECK(q.d[2] == 1.0f);
  CHECK(q.q[64] == 127);
  CHECK(q.q[65] == 2);  // ties to even, as gemm::detail::quantize_row (prefill): decode and prefill round alike
  CHECK(q.q[66] == -4);
  CHECK(q.q[67] == -127);
  CHECK(q.q[64 + 8] == 3);
}
