// bench/micro.cpp: Google Benchmark microbenchmarks of the CPU backend's kernels at the shapes of the benchmark
// models (stories110M-shaped: D 768, F 2048; 1B-class: D 2048, F 5632, 16/4 heads of 128), next to OpenBLAS's
// cblas_sgemm on the same f32 operands. Counters: FLOP/s (items) and weight bytes/s.
//   bench_micro --benchmark_filter=gemm          # only the matrix products
// The MoE block's microbenchmark lives with the DeepSeek layers.
#include <array>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/layers/kv_quant.hpp"
#include "maxtext/layers/rotary.hpp"

#if defined(MAXTEXT_BENCH_OPENBLAS)
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

using namespace maxtext;

namespace {

std::vector<float> randn(std::int64_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = nd(g);
  return v;
}

template <class W>
Matrix<W> weight(std::int64_t N, std::int64_t K) {
  const auto f = randn(N * K, 7);
  Matrix<W> m;
  m.rows = N;
  m.cols = K;
  if constexpr (std::is_same_v<W, q8_0>) {
    m.data = Tensor<q8_0, 2>({N, K / 32});
    for (std::int64_t n = 0; n < N; ++n) io::detail::quantize_q8_0_row(&f[static_cast<std::size_t>(n * K)], &m.data(n, 0), K);
  } else {
    m.data = Tensor<W, 2>({N, K});
    for (std::int64_t i = 0; i < N * K; ++i) m.data.data()[i] = from_float<W>(f[static_cast<std::size_t>(i)]);
  }
  return m;
}

/// Args: M, N, K, threads. Int8Act: Q8_0 with 8-bit activations (cpu::Options::int8_activations).
template <class W, class A, bool Int8Act = false>
void BM_gemm(benchmark::State& st) {
  const std::int64_t M = st.range(0), N = st.range(1), K = st.range(2);
  cpu::Backend be(cpu::Options{static_cast<int>(st.range(3)), Int8Act});
  const Matrix<W> w = be.prepare(weight<W>(N, K));
  const auto xf = randn(M * K, 3);
  Tensor<A, 2> x({M, K});
  for (std::int64_t i = 0; i < M * K; ++i) x.data()[i] = from_float<A>(xf[static_cast<std::size_t>(i)]);
  Tensor<A, 2> y({M, N});
  for (auto _ : st) {
    be.matmul(View<const A, 2>(x.view()), w, y.view());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["weightB/s"] = benchmark::Counter(static_cast<double>(w.data.size()) * sizeof(W),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

/// The timed loop of the ggml benchmarks: M x K random activations (st.range(0) rows) times `raw` as the backend
/// prepares it; FLOP/s and the file bytes read per second.
void time_ggml(benchmark::State& st, cpu::Backend& be, const Matrix<ggml_byte>& raw) {
  const std::int64_t M = st.range(0), N = raw.rows, K = raw.cols;
  const Matrix<ggml_byte> w = be.prepare(raw);
  const auto xf = randn(M * K, 3);
  Tensor<float, 2> x({M, K});
  for (std::int64_t i = 0; i < M * K; ++i) x.data()[i] = xf[static_cast<std::size_t>(i)];
  Tensor<float, 2> y({M, N});
  for (auto _ : st) {
    be.matmul(View<const float, 2>(x.view()), w, y.view());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["weightB/s"] = benchmark::Counter(static_cast<double>(raw.data.size()),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

/// Runtime-typed ggml blocks (the file's rows as they lie, gemm::wrap_ggml): random quants with small fp16 scales.
/// Args: M, N, K, threads; Type: the ggml block type; Int8Act: 8-bit activations (integer panels for prefill).
template <quant::BlockType Type, bool Int8Act>
void BM_gemm_ggml(benchmark::State& st) {
  const std::int64_t N = st.range(1), K = st.range(2);
  cpu::Backend be(cpu::Options{static_cast<int>(st.range(3)), Int8Act});
  const quant::BlockFormat& f = quant::block_format(Type);
  Matrix<ggml_byte> raw;
  raw.rows = N;
  raw.cols = K;
  raw.ggml_type = static_cast<std::uint32_t>(Type);
  raw.data = Tensor<ggml_byte, 2>({N, K / f.block * f.bytes});
  std::mt19937 g(7);
  std::uniform_real_distribution<float> scale(-0.01f, 0.01f);
  auto* bytes = reinterpret_cast<std::byte*>(raw.data.data());
  for (std::int64_t i = 0; i < raw.data.size(); ++i) bytes[i] = static_cast<std::byte>(g() & 0xff);
  for (std::int64_t b = 0; b < N * K / f.block; ++b) {
    for (int off : f.fp16_scales) {
      if (off < 0) continue;
      const std::uint16_t h = fp16(scale(g)).bits;
      std::memcpy(bytes + b * f.bytes + off, &h, 2);
    }
  }
  time_ggml(st, be, raw);
}

/// F16 rows as a GGUF file holds them (ggml type 1, read in place): decode, a verify pass or a few conversations'
/// rows (direct products, qblock::dot_float_rows) and prefill (panels widened to f32). Args: M, N, K, threads.
void BM_gemm_ggml_f16(benchmark::State& st) {
  const std::int64_t N = st.range(1), K = st.range(2);
  cpu::Backend be(cpu::Options{static_cast<int>(st.range(3)), false});
  Matrix<ggml_byte> raw;
  raw.rows = N;
  raw.cols = K;
  raw.ggml_type = 1;  // F16
  raw.data = Tensor<ggml_byte, 2>({N, K * 2});
  const auto wf = randn(N * K, 7);
  auto* h = reinterpret_cast<std::uint16_t*>(raw.data.data());
  for (std::int64_t i = 0; i < N * K; ++i) h[i] = fp16(0.05f * wf[static_cast<std::size_t>(i)]).bits;
  time_ggml(st, be, raw);
}

#if defined(MAXTEXT_BENCH_OPENBLAS)
void BM_gemm_openblas(benchmark::State& st) {
  const std::int64_t M = st.range(0), N = st.range(1), K = st.range(2);
  openblas_set_num_threads(static_cast<int>(st.range(3)));
  const auto w = randn(N * K, 7), x = randn(M * K, 3);
  std::vector<float> y(static_cast<std::size_t>(M * N));
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.0f, x.data(), static_cast<int>(K), w.data(), static_cast<int>(K), 0.0f, y.data(), static_cast<int>(N));
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["weightB/s"] = benchmark::Counter(static_cast<double>(N * K) * 4, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

void gemm_shapes(benchmark::internal::Benchmark* b) {
  // (N, K) of the projections: 110M-shaped (D 768, F 2048) and 1B-class (D 2048, kv 512, F 5632), plus logits.
  const std::int64_t nk[][2] = {{768, 768},   {2048, 768},  {768, 2048},  {2048, 2048},
                                {512, 2048},  {5632, 2048}, {2048, 5632}, {32000, 2048}};
  for (std::int64_t M : {1, 128, 512}) {
    for (const auto& s : nk) {
      if (M > 1 && s[0] == 32000) continue;  // logits are computed for the last token only
      for (std::int64_t t : {1, 2}) b->Args({M, s[0], s[1], t});
    }
  }
  b->ArgNames({"M", "N", "K", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_gemm, float, float)->Apply(gemm_shapes);
BENCHMARK_TEMPLATE(BM_gemm, bf16, bf16)->Apply(gemm_shapes);
BENCHMARK_TEMPLATE(BM_gemm, q8_0, float)->Apply(gemm_shapes);
BENCHMARK_TEMPLATE(BM_gemm, q8_0, float, true)->Apply(gemm_shapes);
void ggml_shapes(benchmark::internal::Benchmark* b) {  // the 1B-class projections: decode, a short prompt, prefill
  for (std::int64_t M : {1, 8, 512}) {
    for (const auto& s : {std::array<std::int64_t, 2>{2048, 2048}, {5632, 2048}, {2048, 5632}}) {
      for (std::int64_t t : {1, 2}) b->Args({M, s[0], s[1], t});
    }
  }
  b->ArgNames({"M", "N", "K", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK_TEMPLATE(BM_gemm_ggml, quant::BlockType::q4_k, false)->Apply(ggml_shapes);
BENCHMARK_TEMPLATE(BM_gemm_ggml, quant::BlockType::q4_k, true)->Apply(ggml_shapes);
BENCHMARK_TEMPLATE(BM_gemm_ggml, quant::BlockType::q4_0, false)->Apply(ggml_shapes);
BENCHMARK_TEMPLATE(BM_gemm_ggml, quant::BlockType::q4_0, true)->Apply(ggml_shapes);
BENCHMARK_TEMPLATE(BM_gemm_ggml, quant::BlockType::q6_k, true)->Apply(ggml_shapes);
BENCHMARK_TEMPLATE(BM_gemm_ggml, quant::BlockType::q8_0, true)->Apply(ggml_shapes);
void f16_shapes(benchmark::internal::Benchmark* b) {  // the 1B-class projections at 1 to 128 rows
  for (std::int64_t M : {1, 8, 16, 32, 64, 128}) {
    for (const auto& s : {std::array<std::int64_t, 2>{2048, 2048}, {5632, 2048}, {2048, 5632}}) {
      for (std::int64_t t : {1, 2}) b->Args({M, s[0], s[1], t});
    }
  }
  b->ArgNames({"M", "N", "K", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_gemm_ggml_f16)->Apply(f16_shapes);
#if defined(MAXTEXT_BENCH_OPENBLAS)
BENCHMARK(BM_gemm_openblas)->Apply(gemm_shapes);
#endif

/// Attention over a cache of S keys. Args: T (queries), S (keys), query heads, kv heads, head dim, threads.
void BM_attention(benchmark::State& st) {
  const std::int64_t T = st.range(0), S = st.range(1), N = st.range(2), K = st.range(3), H = st.range(4);
  cpu::Backend be(cpu::Options{static_cast<int>(st.range(5))});
  const auto qf = randn(T * N * H, 1), kf = randn(S * K * H, 2), vf = randn(S * K * H, 3);
  Tensor<float, 4> q({1, T, N, H}), k({1, S, K, H}), v({1, S, K, H}), o({1, T, N, H});
  std::copy(qf.begin(), qf.end(), q.data());
  std::copy(kf.begin(), kf.end(), k.data());
  std::copy(vf.begin(), vf.end(), v.data());
  for (std::int64_t i = 0; i < q.size(); ++i) q.data()[i] /= std::sqrt(static_cast<float>(H));
  Tensor<std::int32_t, 1> q_start({1}), kv_len({1});
  q_start(0) = static_cast<std::int32_t>(S - T);
  kv_len(0) = static_cast<std::int32_t>(S);
  AttentionMask mask;
  mask.q_start = q_start.cview();
  mask.kv_len = kv_len.cview();
  for (auto _ : st) {
    be.attention(View<const float, 4>(q.view()), View<const float, 4>(k.view()), View<const float, 4>(v.view()), mask,
                 AttentionOptions{}, View<const float, 1>(), o.view());
    benchmark::DoNotOptimize(o.data());
  }
  // Causal: query t sees S - T + t + 1 keys.
  double pairs = 0;
  for (std::int64_t t = 0; t < T; ++t) pairs += static_cast<double>(S - T + t + 1);
  st.counters["FLOP/s"] = benchmark::Counter(pairs * static_cast<double>(N) * static_cast<double>(4 * H),
                                             benchmark::Counter::kIsIterationInvariantRate);
  st.counters["kvB/s"] = benchmark::Counter(static_cast<double>(2 * S * K * H) * 4, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_attention)
    ->ArgNames({"T", "S", "N", "K", "H", "threads"})
    ->Args({1, 128, 12, 12, 64, 1})
    ->Args({1, 512, 12, 12, 64, 1})
    ->Args({1, 2048, 12, 12, 64, 1})
    ->Args({1, 8192, 12, 12, 64, 1})
    ->Args({1, 512, 16, 4, 128, 1})
    ->Args({1, 4096, 16, 4, 128, 1})
    ->Args({1, 4096, 16, 4, 128, 2})
    ->Args({128, 128, 12, 12, 64, 1})
    ->Args({512, 512, 12, 12, 64, 1})
    ->Args({512, 512, 16, 4, 128, 1})
    ->Args({512, 512, 16, 4, 128, 2})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

/// One decode step's attention over a cache of S tokens, as a quantised-cache model runs it: the float16 cache
/// through the backend's kernel (Cache = fp16) against MaxText's int8 KVQuant cache read packed by
/// layers::attend_packed (Cache = std::int8_t; one scale per token, heads_and_dkv). Same queries, keys and values.
/// Each iteration attends the next of L layers' caches, as a decode step does, so that the caches come from DRAM
/// (model b's 12 layers at 4,096 tokens: 151 MB in float16, 77 MB in int8), not from the last level cache.
/// Args: S (keys), query heads, kv heads, head dim, layers, threads. Counter kvB/s: cache bytes read per second.
template <class Cache>
void BM_decode_cache(benchmark::State& st) {
  const std::int64_t S = st.range(0), N = st.range(1), K = st.range(2), H = st.range(3), L = st.range(4);
  const int threads = static_cast<int>(st.range(5));
  cpu::Backend be(cpu::Options{threads});
  auto qf = randn(N * H, 1);
  const auto kf = randn(S * K * H, 2), vf = randn(S * K * H, 3);
  for (auto& x : qf) x /= std::sqrt(static_cast<float>(H));
  Tensor<float, 4> q({1, 1, N, H}), o({1, 1, N, H});
  std::copy(qf.begin(), qf.end(), q.data());
  double bytes = 0;
  std::int64_t layer = 0;
  if constexpr (std::is_same_v<Cache, std::int8_t>) {
    const layers::KVQuant kq{layers::KVQuantType::int8, layers::KVQuantAxis::heads_and_dkv};
    const std::int64_t rb = kq.packed_row_bytes(K, H);
    std::vector<std::uint8_t> kp(static_cast<std::size_t>(L * S * rb)), vp(kp.size());
    for (std::int64_t s = 0; s < L * S; ++s) {
      kq.pack_row(kf.data() + s % S * K * H, K, H, kp.data() + s * rb);
      kq.pack_row(vf.data() + s % S * K * H, K, H, vp.data() + s * rb);
    }
    const layers::PackedAttentionArgs pa{K, H, H, true, 0, 0, 0.0f};
    for (auto _ : st) {
      const std::int64_t at = layer * S * rb;
      layer = (layer + 1) % L;
      layers::attend_packed(kq, pa, View<const float, 3>(q.data(), {1, N, H}), S - 1, S, kp.data() + at, rb,
                            vp.data() + at, rb, nullptr, View<float, 3>(o.data(), {1, N, H}), threads);
      benchmark::DoNotOptimize(o.data());
    }
    bytes = static_cast<double>(2 * S * rb);
  } else {
    std::vector<Tensor<Cache, 4>> k, v;
    for (std::int64_t l = 0; l < L; ++l) {
      k.emplace_back(std::array<std::int64_t, 4>{1, S, K, H});
      v.emplace_back(std::array<std::int64_t, 4>{1, S, K, H});
      for (std::int64_t i = 0; i < S * K * H; ++i) {
        k.back().data()[i] = from_float<Cache>(kf[static_cast<std::size_t>(i)]);
        v.back().data()[i] = from_float<Cache>(vf[static_cast<std::size_t>(i)]);
      }
    }
    Tensor<std::int32_t, 1> q_start({1}), kv_len({1});
    q_start(0) = static_cast<std::int32_t>(S - 1);
    kv_len(0) = static_cast<std::int32_t>(S);
    AttentionMask mask;
    mask.q_start = q_start.cview();
    mask.kv_len = kv_len.cview();
    for (auto _ : st) {
      const auto l = static_cast<std::size_t>(layer);
      layer = (layer + 1) % L;
      be.attention(View<const float, 4>(q.view()), View<const Cache, 4>(k[l].view()), View<const Cache, 4>(v[l].view()),
                   mask, AttentionOptions{}, View<const float, 1>(), o.view());
      benchmark::DoNotOptimize(o.data());
    }
    bytes = static_cast<double>(2 * S * K * H) * sizeof(Cache);
  }
  st.counters["kvB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}
void decode_cache_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"S", "N", "K", "H", "L", "threads"});
  for (std::int64_t S : {512, 1536, 4096}) {
    for (int t : {1, 2}) {
      b->Args({S, 12, 12, 64, 12, t});  // model b
      b->Args({S, 16, 4, 128, 16, t});  // model c
    }
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK_TEMPLATE(BM_decode_cache, fp16)->Apply(decode_cache_shapes);
BENCHMARK_TEMPLATE(BM_decode_cache, std::int8_t)->Apply(decode_cache_shapes);

/// RMSNorm rows. Args: M, D, threads.
template <class A>
void BM_rms_norm(benchmark::State& st) {
  const std::int64_t M = st.range(0), D = st.range(1);
  cpu::Backend be(cpu::Options{static_cast<int>(st.range(2))});
  const auto xf = randn(M * D, 1);
  Tensor<A, 2> x({M, D}), y({M, D});
  Tensor<A, 1> s({D});
  for (std::int64_t i = 0; i < M * D; ++i) x.data()[i] = from_float<A>(xf[static_cast<std::size_t>(i)]);
  for (std::int64_t i = 0; i < D; ++i) s(i) = from_float<A>(1.0f);
  for (auto _ : st) {
    be.rms_norm(View<const A, 2>(x.view()), View<const A, 1>(s.view()), 1e-5f, 0.0f, y.view());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["B/s"] = benchmark::Counter(static_cast<double>(2 * M * D) * sizeof(A), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_TEMPLATE(BM_rms_norm, float)->ArgNames({"M", "D", "threads"})->Args({1, 2048, 1})->Args({512, 2048, 1})->Args({512, 2048, 2});
BENCHMARK_TEMPLATE(BM_rms_norm, bf16)->ArgNames({"M", "D", "threads"})->Args({1, 2048, 1})->Args({512, 2048, 1});

/// Rotary embedding in place. Args: M, heads, head_dim, threads.
template <class A>
void BM_rotary(benchmark::State& st) {
  const std::int64_t M = st.range(0), Hn = st.range(1), d = st.range(2);
  cpu::Backend be(cpu::Options{static_cast<int>(st.range(3))});
  layers::RopeSpec rs;
  rs.head_dim = d;
  const RotaryTable table = layers::build_rotary_table(rs, 1024);
  const auto xf = randn(M * Hn * d, 1);
  Tensor<A, 3> x({M, Hn, d});
  for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = from_float<A>(xf[static_cast<std::size_t>(i)]);
  Tensor<std::int32_t, 1> pos({M});
  for (std::int64_t i = 0; i < M; ++i) pos(i) = static_cast<std::int32_t>(i % 1024);
  for (auto _ : st) {
    be.rotary(x.view(), pos.cview(), table);
    benchmark::DoNotOptimize(x.data());
  }
  st.counters["B/s"] = benchmark::Counter(static_cast<double>(2 * M * Hn * d) * sizeof(A), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_TEMPLATE(BM_rotary, float)->ArgNames({"M", "heads", "d", "threads"})->Args({1, 16, 128, 1})->Args({512, 16, 128, 1})->Args({512, 16, 128, 2});
BENCHMARK_TEMPLATE(BM_rotary, bf16)->ArgNames({"M", "heads", "d", "threads"})->Args({1, 16, 128, 1})->Args({512, 16, 128, 1});

}  // namespace

BENCHMARK_MAIN();
