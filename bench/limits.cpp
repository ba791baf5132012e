// bench/limits.cpp: the machine's limits for docs/performance.md, measured next to the other runs.
//   bench_limits triad THREADS            memory bandwidth: STREAM-like triad a = b + s*c over 3 x 128 MiB, twice:
//                                          on the heap's default pages and on 2 MiB ones (MADV_HUGEPAGE)
//   bench_limits pagecache FILE...        put each file into the page cache in 2 MiB folios, as MappedFile asks for:
//                                          drop its cached pages, read it back through a mapping advised
//                                          MADV_HUGEPAGE; reports the bytes then mapped with 2 MiB pages
//   bench_limits sgemm THREADS M N K      OpenBLAS cblas_sgemm (row-major x[M,K] . W[N,K]^T) FLOP/s
//   bench_limits fma THREADS              f32 FMA peak: 16 independent vector FMA chains per thread, no memory
//   bench_limits model THREADS T D F N K L V   OpenBLAS time for one prefill's matrix products of a Llama shape
//                                          (per layer q,k,v,o,gate,up,down at M=T; the logits at M=1)
// One JSON object per line.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <fstream>
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

/// 2 MiB-aligned floats, advised MADV_HUGEPAGE when `huge`, else left to the kernel's default (4 KiB pages unless
/// transparent huge pages are "always").
struct Floats {
  float* p = nullptr;
  std::size_t bytes = 0;
  Floats(std::int64_t n, bool huge) : bytes((static_cast<std::size_t>(n) * 4 + (2u << 20) - 1) & ~std::size_t((2u << 20) - 1)) {
    p = static_cast<float*>(std::aligned_alloc(2u << 20, bytes));
    if (!p) std::abort();
    if (huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
  }
  ~Floats() { std::free(p); }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
};

void triad(int threads, bool huge) {
  const std::int64_t n = std::int64_t{32} << 20;  // 32 Mi floats = 128 MiB per array, 12x the L3
  Floats fa(n, huge), fb(n, huge), fc(n, huge);
  float* pa = fa.p;
  float* pb = fb.p;
  float* pc = fc.p;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {  // first touch by the threads that use the pages
    pa[i] = 0.0f;
    pb[i] = 1.0f;
    pc[i] = 2.0f;
  }
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    const double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    best = std::min(best, now() - t0);
  }
  std::printf("{\"kind\": \"triad\", \"threads\": %d, \"pages\": \"%s\", \"bytes_per_s\": %.6e, \"check\": %g}\n",
              threads, huge ? "2M" : "default", 3.0 * 4.0 * static_cast<double>(n) / best,
              static_cast<double>(pa[n / 2]));
}

/// kB of [p, p + bytes) mapped with 2 MiB pages (FilePmdMapped of its mapping in /proc/self/smaps), -1 if unknown.
long pmd_mapped_kb(const void* p) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && line.rfind("FilePmdMapped:", 0) == 0) return std::atol(line.c_str() + 14);
  }
  return -1;
}

/// Drop `path`'s clean cached pages (those no process maps) and read it back through a mapping advised
/// MADV_HUGEPAGE, so that its page cache holds 2 MiB folios where the file system supports them; every program that
/// maps the file afterwards (the library and llama.cpp alike) gets 2 MiB pages.
int pagecache(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size == 0) {
    std::fprintf(stderr, "bench_limits pagecache: %s: %s\n", path, fd < 0 ? std::strerror(errno) : "empty or unreadable");
    if (fd >= 0) ::close(fd);
    return 1;
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  const double t0 = now();
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "bench_limits pagecache: %s: mmap failed: %s\n", path, std::strerror(errno));
    ::close(fd);
    return 1;
  }
  const bool hinted = ::madvise(p, bytes, MADV_HUGEPAGE) == 0;
#if defined(MADV_POPULATE_READ)
  const bool populated = ::madvise(p, bytes, MADV_POPULATE_READ) == 0;
#else
  const bool populated = false;
#endif
  if (!populated) {  // touch every page instead
    volatile unsigned char sink = 0;
    for (std::size_t o = 0; o < bytes; o += 4096) sink = sink + static_cast<const unsigned char*>(p)[o];
  }
  const double secs = now() - t0;
  const long pmd = pmd_mapped_kb(p);
  std::printf("{\"kind\": \"page_cache\", \"file\": \"%s\", \"bytes\": %zu, \"hinted\": %s, \"seconds\": %.3f, "
              "\"pmd_mapped_bytes\": %lld}\n",
              path, bytes, hinted ? "true" : "false", secs, pmd < 0 ? -1LL : static_cast<long long>(pmd) * 1024);
  ::munmap(p, bytes);
  ::close(fd);
  return 0;
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
    std::fprintf(stderr,
                 "usage: bench_limits triad T | fma T | sgemm T M N K | model T tokens D F N K L V | pagecache FILE...\n");
    return 2;
  }
  const std::string what = argv[1];
  if (what == "pagecache") {
    int rc = 0;
    for (int i = 2; i < argc; ++i) rc |= pagecache(argv[i]);
    return rc;
  }
  const int threads = std::atoi(argv[2]);
  openblas_set_num_threads(threads);
  if (what == "triad") {
    triad(threads, false);
    triad(threads, true);
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
