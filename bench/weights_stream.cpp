// bench/weights_stream.cpp: the weight reads of one decode step of a block-quantised Llama GGUF (llama-quantize's
// Q4_K_M, Q4_0, Q6_K, ...) and nothing else: every layer's q, k, v, o, gate, up and down matrix and then the output
// matrix, in the order a step uses them, through qblock::dot_q8_rows on 32 rows at a time (as gemm.hpp's decode
// does) with one 8-bit activation row, on the library's own mapping of the file (io::read_gguf). Prints ms per step
// and GB/s of weight bytes, so that a step's time in bench_e2e can be split into the weights and the rest; and,
// for comparison in the same process, a plain read of the same bytes (512-bit loads, one hint per 64 bytes 8 KiB
// ahead, as the kernels hint). --gap-us N spins N microseconds of arithmetic before each matrix (nothing read), to
// see what restarting the stream after a step's other work costs. (docs/performance.md, "One-thread decode against
// the machine's read ceiling".)
//
// Build and run (not part of the CMake build):
//   g++-12 -O3 -march=native -std=c++20 -Wall -Wextra -Iinclude -isystem /usr/include/eigen3
//       bench/weights_stream.cpp -o /tmp/weights_stream                         (one command)
//   /tmp/weights_stream bench/.models/c/model-q4_0.gguf [--passes 30] [--gap-us 0]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/prefetch.hpp"
#include "maxtext/backend/cpu/qblock.hpp"
#include "maxtext/io/gguf.hpp"

#include "bench_args.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // g++ 12.2 false positives in its AVX-512 intrinsics (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

using namespace maxtext;
namespace qb = maxtext::cpu::qblock;
using Clock = std::chrono::steady_clock;

namespace {

volatile float g_sink = 0.0f;

struct Matrix {
  std::string name;
  quant::BlockType type;
  std::int64_t rows = 0, cols = 0;
  std::size_t row_bytes = 0;
  const std::byte* data = nullptr;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// About `us` microseconds of dependent arithmetic, no memory traffic.
void spin(int us) {
  if (us <= 0) return;
  const auto t0 = Clock::now();
  volatile double z = 1.0;
  while (seconds_since(t0) < us * 1e-6) {
    for (int j = 0; j < 50; ++j) z = z * 1.0000001 + 1e-9;
  }
}

/// Sum of the bytes as 64-bit words, 128 bytes a step, hints 8 KiB ahead (kPrefetch in qblock_impl.hpp).
std::uint64_t plain_read(const std::byte* p, std::size_t n) {
#if defined(__AVX512F__)
  __m512i a0 = _mm512_setzero_si512(), a1 = a0;
  std::size_t o = 0;
  for (; o + 128 <= n; o += 128) {
    cpu::prefetch::bytes(p + o + 8192, 128);
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + o));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + o + 64));
  }
  std::uint64_t s = static_cast<std::uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(a0, a1)));
#else
  std::uint64_t s = 0;
  std::size_t o = 0;
  for (; o + 8 <= n; o += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + o, 8);
    s += w;
  }
#endif
  for (; o < n; ++o) s += static_cast<std::uint64_t>(p[o]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [--passes N] [--gap-us N]\n", argv[0]);
    return 2;
  }
  int passes = 30, gap_us = 0;
  bench::Options o("weights_stream", "weights_stream MODEL.gguf [--passes N] [--gap-us N]");
  o.number("--passes", passes).number("--gap-us", gap_us).parse(argc, argv, 2);
  passes = std::max(3, passes);
  try {
    const io::GgufFile f = io::read_gguf(argv[1]);
    auto find = [&](const std::string& name) -> const io::GgufBlockTensor* {
      for (const auto& t : f.block_tensors) {
        if (t.name == name) return &t;
      }
      return nullptr;
    };
    std::vector<Matrix> step;
    auto add = [&](const std::string& name) {
      const io::GgufBlockTensor* t = find(name);
      if (t == nullptr) {
        throw std::runtime_error("weights_stream: " + f.path + ": no block-quantised tensor " + name +
                                 " (Q8_0 / F16 / F32 tensors are not measured here)");
      }
      Matrix m{name, t->type, t->shape.at(0), t->shape.at(1), 0, t->data};
      m.row_bytes = static_cast<std::size_t>(t->bytes / static_cast<std::uint64_t>(m.rows));
      step.push_back(m);
    };
    for (int l = 0; find("blk." + std::to_string(l) + ".attn_q.weight") != nullptr; ++l) {
      for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
        add("blk." + std::to_string(l) + "." + n + ".weight");
    }
    add(find("output.weight") != nullptr ? "output.weight" : "token_embd.weight");  // tied embeddings
    std::int64_t kmax = 0;
    std::size_t total = 0;
    for (const auto& m : step) {
      kmax = std::max(kmax, m.cols);
      total += m.row_bytes * static_cast<std::size_t>(m.rows);
    }
    std::vector<float> x(static_cast<std::size_t>(kmax));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    std::vector<std::byte> qbuf(qb::quantized_x_bytes(kmax));

    double spun = 0;
    auto kernels = [&] {
      float s = 0, out[32];
      for (const auto& m : step) {
        const auto g0 = Clock::now();
        spin(gap_us);
        spun += seconds_since(g0);
        const qb::QuantizedX qx = qb::quantize_x(x.data(), m.cols, qbuf.data());
        for (std::int64_t r = 0; r < m.rows; r += 32) {
          qb::dot_q8_rows(m.type, m.data + static_cast<std::size_t>(r) * m.row_bytes, m.row_bytes,
                          std::min<std::int64_t>(32, m.rows - r), &qx, 1, out, 32);
          s += out[0];
        }
      }
      g_sink = s;
    };
    auto reads = [&] {
      std::uint64_t s = 0;
      for (const auto& m : step) s += plain_read(m.data, m.row_bytes * static_cast<std::size_t>(m.rows));
      g_sink = static_cast<float>(s & 0xffff);
    };
    std::vector<double> tk, tr;
    for (int p = 0; p < passes; ++p) {  // alternated, so that both meet the same machine
      spun = 0;
      auto t0 = Clock::now();
      kernels();
      tk.push_back(seconds_since(t0) - spun);
      t0 = Clock::now();
      reads();
      tr.push_back(seconds_since(t0));
    }
    std::sort(tk.begin(), tk.end());
    std::sort(tr.begin(), tr.end());
    const double gb = static_cast<double>(total) * 1e-9;
    std::printf("%s: %zu matrices, %.1f MB of weights a step, %d passes, gap %d us\n", f.path.c_str(), step.size(),
                gb * 1e3, passes, gap_us);
    std::printf("dot_q8_rows: median %.3f ms (%.1f GB/s), best %.3f ms (%.1f GB/s)\n", tk[tk.size() / 2] * 1e3,
                gb / tk[tk.size() / 2], tk[0] * 1e3, gb / tk[0]);
    std::printf("plain read:  median %.3f ms (%.1f GB/s), best %.3f ms (%.1f GB/s)\n", tr[tr.size() / 2] * 1e3,
                gb / tr[tr.size() / 2], tr[0] * 1e3, gb / tr[0]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
