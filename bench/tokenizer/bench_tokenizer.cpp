// bench/tokenizer/bench_tokenizer.cpp: tokenizer throughput: `bench_tokenizer TOKENIZER TEXT_FILE [REPEATS]` encodes the
// file (one call) REPEATS times after one warm-up and prints `MB/s tokens bytes` for the best run. TOKENIZER is anything
// open_tokenizer takes (tokenizer.json, a directory, GGUF). Run by bench/tokenizer/compare.mjs beside the JS oracles.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "maxtext/tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_tokenizer TOKENIZER TEXT_FILE [REPEATS]\n");
    return 2;
  }
  try {
    const auto tk = maxtext::tokenizer::open_tokenizer(argv[1]);
    std::ifstream f(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
    std::size_t n = tk->encode(text, false).size();  // warm-up (fills the word cache, as a long-running process would)
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      n = tk->encode(text, false).size();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%.3f %zu %zu\n", static_cast<double>(text.size()) / best / 1e6, n, text.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
}
