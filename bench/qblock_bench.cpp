// bench/qblock_bench.cpp: one-thread GEMV (M = 1 activation row, and M = 4 for dot_exact) over a 4096 x 4096 weight
// matrix stored as ggml blocks, with the kernels of backend/cpu/qblock.hpp; prints GB/s of weight bytes read. The
// 8-bit-activation column calls dot_q8_rows on 128 weight rows at a time, as the library's decode does (gemm.hpp,
// kQ8DecodeRows): one dot_q8 call per row streamed Q4_0 from DRAM at about half the rate (20-21 GB/s against 37-39 on
// one Zen 4 core, 2026-11-30) while the hot rate hardly moved.
// "cold": the pass rotates over enough copies of the matrix (>= 256 MB) that it streams from DRAM; "hot": the same
// single matrix again and again (in L2/L3 when it fits). Yardstick: a plain f32 dot-GEMV (AVX-512 when available)
// over the same matrix dequantised (64 MB of f32 at 4096 x 4096), in GB/s of f32 bytes and in ms per GEMV.
//
// Build and run (not part of the CMake build):
//   g++-12 -O3 -march=native -std=c++20 -Wall -Wextra -Iinclude -isystem /usr/include/eigen3 bench/qblock_bench.cpp -o /tmp/qblock_bench
//   /tmp/qblock_bench [type name ...]   (e.g. Q4_K Q6_K; all types when none is given)
//   QBLOCK_BENCH_ROWS=8 /tmp/qblock_bench Q8_0   (dot_q8_rows with 1..8 x rows: a verify pass's products; a pass of
//                                                M = 1 and one of M rows alternated, medians: the machine's memory
//                                                bandwidth drifts by tens of percent over seconds)
//   QBLOCK_BENCH_HOT=1 ...                       (the rows table on one copy of the matrix: in cache when it fits,
//                                                e.g. QBLOCK_BENCH_N=256 QBLOCK_BENCH_K=2048 in L2: the kernels'
//                                                arithmetic alone)
//   QBLOCK_BENCH_N=2048 QBLOCK_BENCH_K=5632 ...   (another matrix shape)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/qblock.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // g++ 12.2 false positives in its AVX-512 intrinsics (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

using namespace maxtext;
namespace qb = maxtext::cpu::qblock;
using Clock = std::chrono::steady_clock;

namespace {

/// The matrix: 4096 x 4096, or QBLOCK_BENCH_N / QBLOCK_BENCH_K (a model's shapes: K = 5632 for model c's down
/// projection; multiples of 256).
std::int64_t env_size(const char* name) {
  const char* v = std::getenv(name);
  const long long n = v != nullptr ? std::atoll(v) : 4096;
  if (n < 256 || n % 256 != 0 || n > (1 << 16)) {
    std::fprintf(stderr, "%s: expected a multiple of 256 from 256 to 65536, found '%s'\n", name, v);
    std::exit(2);
  }
  return n;
}
const std::int64_t kN = env_size("QBLOCK_BENCH_N"), kK = env_size("QBLOCK_BENCH_K");
constexpr std::int64_t kCallRows = 128;  // weight rows per dot_q8_rows call, as gemm.hpp's decode (kQ8DecodeRows)
volatile float g_sink = 0.0f;

std::vector<std::byte> random_matrix(quant::BlockType t, std::uint32_t seed) {
  const quant::BlockFormat& f = quant::block_format(t);
  const std::int64_t n = kN * kK / f.block;
  std::vector<std::byte> b(static_cast<std::size_t>(n * f.bytes));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> sc(-0.01f, 0.01f);
  for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
  for (std::int64_t k = 0; k < n; ++k) {
    for (int off : f.fp16_scales) {
      if (off < 0) continue;
      const std::uint16_t h = fp16(sc(rng)).bits;
      std::memcpy(b.data() + k * f.bytes + off, &h, 2);
    }
  }
  return b;
}

/// Seconds per pass of `pass(i)` (i = pass number), the best of repeated timings of ~0.25 s each.
template <class F>
double time_pass(F&& pass) {
  pass(0);  // warm up
  double best = 1e30;
  int i = 1;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    int n = 0;
    double el = 0;
    do {
      pass(i++);
      ++n;
      el = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (el < 0.25);
    best = std::min(best, el / n);
  }
  return best;
}

float dot_f32(const float* w, const float* x, std::int64_t K) {
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::int64_t k = 0; k < K; k += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 32), _mm512_loadu_ps(x + k + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 48), _mm512_loadu_ps(x + k + 48), a3);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
  float a[16] = {};
  for (std::int64_t k = 0; k < K; k += 16) {
    for (int i = 0; i < 16; ++i) a[i] += w[k + i] * x[k + i];
  }
  float s = 0;
  for (float v : a) s += v;
  return s;
#endif
}

/// The verify pass's products (models/speculative.hpp): dot_q8_rows with M = 1..max_rows x rows on kCallRows weight
/// rows per call, as gemm.hpp's decode path, from DRAM (or from one copy with QBLOCK_BENCH_HOT); time per pass and
/// its ratio to M = 1. Decode reads each
/// weight once whatever M is, so a kernel that shares the decoded weight blocks between the rows keeps the ratio near
/// 1.
int rows_table(const quant::BlockType* all, int max_rows, int argc, char** argv, const std::vector<float>& x1) {
  std::vector<float> x(static_cast<std::size_t>(max_rows * kK));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x1[i % x1.size()] * (1.0f + 0.01f * static_cast<float>(i / kK));
  std::vector<std::byte> qbuf(qb::quantized_x_bytes(kK) * static_cast<std::size_t>(max_rows));
  std::vector<qb::QuantizedX> qx(static_cast<std::size_t>(max_rows));
  std::printf("dot_q8_rows, %dx%d matrix, one thread: median ms per pass (median ratio to M = 1, passes alternated)\n", static_cast<int>(kN),
              static_cast<int>(kK));
  for (int i = 0; i < 12; ++i) {
    const quant::BlockType t = all[i];
    const quant::BlockFormat& f = quant::block_format(t);
    bool want = argc < 2;
    for (int a = 1; a < argc; ++a) want |= std::string(argv[a]) == f.name;
    if (!want) continue;
    const std::size_t row_bytes = static_cast<std::size_t>(kK / f.block * f.bytes), mat_bytes = row_bytes * kN;
    const int copies = std::getenv("QBLOCK_BENCH_HOT") ? 1 : static_cast<int>((256u << 20) / mat_bytes + 1);
    std::vector<std::vector<std::byte>> mats;
    for (int c = 0; c < copies; ++c) mats.push_back(random_matrix(t, 100u + static_cast<std::uint32_t>(c)));
    std::printf("%-7s", f.name);
    auto pass = [&](int M, int i) {
      const std::byte* m = mats[static_cast<std::size_t>(i % copies)].data();
      for (int r = 0; r < M; ++r) {
        qx[static_cast<std::size_t>(r)] =
            qb::quantize_x(x.data() + r * kK, kK, qbuf.data() + qb::quantized_x_bytes(kK) * r);
      }
      std::vector<float> out(static_cast<std::size_t>(kCallRows * M));
      float s = 0;
      for (std::int64_t n = 0; n < kN; n += kCallRows) {
        qb::dot_q8_rows(t, m + n * row_bytes, row_bytes, kCallRows, qx.data(), M, out.data(), kCallRows);
        s += out[0];
      }
      g_sink = s;
    };
    auto timed = [&](int M, int i) {
      const auto t0 = Clock::now();
      pass(M, i);
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    auto median = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    // A pass of M = 1 and one of M rows alternated (the machine's memory bandwidth drifts over seconds): the median
    // of the M-row pass's times and of the pairs' ratios, over 0.5 s per M.
    int n = 0;
    for (int M = 1; M <= max_rows; ++M) {
      pass(1, n++);
      pass(M, n++);
      std::vector<double> tm, ratio;
      const auto t0 = Clock::now();
      while (std::chrono::duration<double>(Clock::now() - t0).count() < 0.5) {
        const double a = timed(1, n++), b = timed(M, n++);
        tm.push_back(b);
        ratio.push_back(b / a);
      }
      std::printf(" | M=%d %7.4f (%.2f)", M, median(tm) * 1e3, median(ratio));
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const quant::BlockType all[] = {quant::BlockType::q4_k, quant::BlockType::q6_k, quant::BlockType::q4_0,
                                  quant::BlockType::q8_0, quant::BlockType::q5_k, quant::BlockType::iq4_xs,
                                  quant::BlockType::iq4_nl, quant::BlockType::q4_1, quant::BlockType::q5_0,
                                  quant::BlockType::q5_1, quant::BlockType::q2_k, quant::BlockType::q3_k};
  std::vector<float> x(static_cast<std::size_t>(4 * kK));
  {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : x) v = u(rng);
  }
  std::vector<std::byte> qbuf(qb::quantized_x_bytes(kK));
  std::printf("%dx%d matrix, one thread; GB/s of weight bytes (cold: >= 256 MB of copies; hot: one copy)\n",
              static_cast<int>(kN), static_cast<int>(kK));
  if (const char* rows = std::getenv("QBLOCK_BENCH_ROWS")) return rows_table(all, std::atoi(rows), argc, argv, x);
  std::printf("%-7s %8s | %10s %10s | %10s %10s | %10s %10s | %10s\n", "type", "MB", "q8 cold", "q8 hot",
              "exact1 cold", "exact1 hot", "exact4 cold", "exact4 hot", "deq hot");
  std::vector<float> deq;  // the last matrix, dequantised, for the f32 yardstick
  for (auto t : all) {
    const quant::BlockFormat& f = quant::block_format(t);
    bool want = argc < 2;
    for (int a = 1; a < argc; ++a) want |= std::string(argv[a]) == f.name;
    if (!want) continue;
    const std::size_t row_bytes = static_cast<std::size_t>(kK / f.block * f.bytes);
    const std::size_t mat_bytes = row_bytes * kN;
    const int copies = static_cast<int>((256u << 20) / mat_bytes + 1);
    std::vector<std::vector<std::byte>> mats;
    for (int c = 0; c < copies; ++c) mats.push_back(random_matrix(t, 100u + static_cast<std::uint32_t>(c)));
    auto gb = [&](double s) { return static_cast<double>(mat_bytes) / s * 1e-9; };

    auto q8 = [&](bool cold) {
      return time_pass([&](int i) {
        const std::byte* m = mats[cold ? i % copies : 0].data();
        const qb::QuantizedX qx = qb::quantize_x(x.data(), kK, qbuf.data());
        // as the library's decode (gemm.hpp): dot_q8_rows on kCallRows weight rows per call
        float s = 0, out[kCallRows];
        for (std::int64_t n = 0; n < kN; n += kCallRows) {
          qb::dot_q8_rows(t, m + n * row_bytes, row_bytes, kCallRows, &qx, 1, out, kCallRows);
          s += out[0];
        }
        g_sink = s;
      });
    };
    auto exact = [&](bool cold, int M) {
      return time_pass([&](int i) {
        const std::byte* m = mats[cold ? i % copies : 0].data();
        float s = 0, out[4];
        for (std::int64_t n = 0; n < kN; ++n) {
          qb::dot_exact(t, m + n * row_bytes, kK, x.data(), kK, M, out);
          s += out[0];
        }
        g_sink = s;
      });
    };
    std::vector<float> rowbuf(static_cast<std::size_t>(kK));
    const double t_deq = time_pass([&](int) {
      const std::byte* m = mats[0].data();
      for (std::int64_t n = 0; n < kN; ++n) qb::dequantize(t, m + n * row_bytes, rowbuf.data(), kK);
      g_sink = rowbuf[7];
    });
    std::printf("%-7s %8.1f | %10.1f %10.1f | %10.1f %10.1f | %10.1f %10.1f | %10.1f\n", f.name, mat_bytes / 1048576.0,
                gb(q8(true)), gb(q8(false)), gb(exact(true, 1)), gb(exact(false, 1)), gb(exact(true, 4)),
                gb(exact(false, 4)), gb(t_deq));
    std::fflush(stdout);
    if (deq.empty()) {
      deq.resize(static_cast<std::size_t>(kN * kK));
      qb::dequantize(t, mats[0].data(), deq.data(), kN * kK);
    }
  }
  if (!deq.empty()) {
    const double s = time_pass([&](int) {
      float acc = 0;
      for (std::int64_t n = 0; n < kN; ++n) acc += dot_f32(deq.data() + n * kK, x.data(), kK);
      g_sink = acc;
    });
    std::printf("f32 yardstick (same matrix dequantised): %.1f GB/s of f32 bytes, %.2f ms per GEMV\n",
                static_cast<double>(kN * kK * 4) / s * 1e-9, s * 1e3);
  }
  return 0;
}
