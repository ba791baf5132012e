// bench/limits.cpp: the machine's limits for docs/performance.md, measured next to the other runs.
//   bench_limits triad THREADS            memory bandwidth: STREAM-like triad a = b + s*c over 3 x 128 MiB
//   bench_limits sgemm THREADS M N K      OpenBLAS cblas_sgemm (row-major x[M,K] . W[N,K]^T) FLOP/s
//   bench_limits fma THREADS              f32 FMA peak: 16 independent vector FMA chains per thread, no memory
//   bench_limits model THREADS T D F N K L V   OpenBLAS time for one prefill's matrix products of a Llama shape
//                                          (per layer q,k,v,o,gate,up,down at M=T; the logits at M=1)
// One JSON object per line.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cblas.h>
#include <xsimd/xsimd.hpp>
#include <omp.h>

extern "C" void openblas_set_num_threads(int);

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void triad(int threads) {
  const std::int64_t n = std::int64_t{32} << 20;  // 32 Mi floats = 128 MiB per array, 12x the L3
  std::vector<float> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n), 1.0f), c(static_cast<std::size_t>(n), 2.0f);
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    const double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    best = std::min(best, now() - t0);
  }
  std::printf("{\"kind\": \"triad\", \"threads\": %d, \"bytes_per_s\": %.6e, \"check\": %g}\n", threads,
              3.0 * 4.0 * static_cast<double>(n) / best, static_cast<double>(pa[n / 2]));
}

double sgemm_seconds(int M, int N, int K, int reps) {
  std::vector<float> x(static_cast<std::size_t>(M) * K, 0.5f), w(static_cast<std::size_t>(N) * K, 0.25f),
      y(static_cast<std::size_t>(M) * N);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.01f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.01f;
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, y.data(), N);
  };
  run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    run();
    best = std::min(best, now() - t0);
  }
  return best;
}

/// f32 FMA throughput with nothing else in the loop: 16 independent chains of the widest vectors, per thread.
void fma_peak(int threads) {
  using B = xsimd::batch<float>;
  constexpr int kChains = 16;
  const long iters = 50'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double total_flops = 0;
    const double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : total_flops)
    {
      B a[kChains];
      for (int i = 0; i < kChains; ++i) a[i] = B(1.0f + 1e-7f * static_cast<float>(i + omp_get_thread_num()));
      const B m(0.999999f), c(1e-7f);
      for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 16
        for (int i = 0; i < kChains; ++i) a[i] = xsimd::fma(a[i], m, c);
      }
      float sink = 0;
      for (int i = 0; i < kChains; ++i) sink += xsimd::hadd(a[i]);
      total_flops = 2.0 * kChains * static_cast<double>(B::size) * static_cast<double>(iters) + (sink == 12345.0f ? 1 : 0);
    }
    best = std::max(best, total_flops / (now() - t0));
  }
  std::printf("{\"kind\": \"fma_peak\", \"threads\": %d, \"lanes\": %d, \"flops_per_s\": %.6e}\n", threads,
              static_cast<int>(B::size), best);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_limits triad T | fma T | sgemm T M N K | model T tokens D F N K L V\n");
    return 2;
  }
  const std::string what = argv[1];
  const int threads = std::atoi(argv[2]);
  openblas_set_num_threads(threads);
  if (what == "triad") {
    triad(threads);
  } else if (what == "fma") {
    fma_peak(threads);
  } else if (what == "sgemm" && argc >= 6) {
    const int M = std::atoi(argv[3]), N = std::atoi(argv[4]), K = std::atoi(argv[5]);
    const double s = sgemm_seconds(M, N, K, 3);
    std::printf("{\"kind\": \"sgemm\", \"threads\": %d, \"M\": %d, \"N\": %d, \"K\": %d, \"flops_per_s\": %.6e}\n", threads,
                M, N, K, 2.0 * M * N * K / s);
  } else if (what == "model" && argc >= 10) {
    const int T = std::atoi(argv[3]), D = std::atoi(argv[4]), F = std::atoi(argv[5]), Nh = std::atoi(argv[6]),
              Kh = std::atoi(argv[7]), L = std::atoi(argv[8]), V = std::atoi(argv[9]);
    const int H = D / Nh;
    // (N, K, count per layer) of the projections.
    const int shapes[][3] = {{Nh * H, D, 1}, {Kh * H, D, 2}, {D, Nh * H, 1}, {F, D, 2}, {D, F, 1}};
    double total = 0, flops = 0;
    for (const auto& s : shapes) {
      const double t = sgemm_seconds(T, s[0], s[1], 2);
      total += t * s[2] * L;
      flops += 2.0 * T * s[0] * s[1] * s[2] * L;
    }
    total += sgemm_seconds(1, V, D, 3);
    flops += 2.0 * V * D;
    std::printf(
        "{\"kind\": \"model_gemm\", \"threads\": %d, \"tokens\": %d, \"D\": %d, \"F\": %d, \"heads\": %d, \"kv_heads\": %d, "
        "\"layers\": %d, \"vocab\": %d, \"seconds\": %.6e, \"flops\": %.6e, \"flops_per_s\": %.6e}\n",
        threads, T, D, F, Nh, Kh, L, V, total, flops, flops / total);
  } else {
    std::fprintf(stderr, "bench_limits: bad arguments\n");
    return 2;
  }
  return 0;
}
