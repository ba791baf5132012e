// bench/soak.cpp: long runs in one process (docs/security.md §Long runs). A seeded llama2-block model (through
// models::AnyModel, as applications use it) runs
//   1. thousands of short sessions: a new Session each, a 4-9 token prompt, 8 sampled tokens with text streaming and
//      a stop string, then the session is dropped; every 16th round also a batched generate() of two prompts;
//   2. one long generation that fills a session's whole context (prompt + new tokens = capacity), then one more
//      turn, which must be refused with an ArgumentError naming the capacity (the context-overflow policy);
// and reports resident memory (VmRSS) after warm-up and at each tenth of phase 1, and the long generation's speed
// per quarter of the context. With --check it exits 1 when resident memory grows by more than 2 MiB (or 2%) between
// the end of warm-up and the end of phase 1, or when the overflow is not refused. Under AddressSanitizer the memory
// check is skipped (the sanitizer's quarantine holds freed memory); its leak checker runs at exit instead (CI
// registers a short run as the test `soak`).
//
//   bench_soak [--sessions N] [--warmup N] [--context C] [--threads T] [--check]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_blocks.hpp"
#include "maxtext/models/generate.hpp"

#include "bench_args.hpp"

MAXTEXT_ANY_MODEL_BUILT(::maxtext::models::any_model_policies::F32, ::maxtext::layers::LlamaDecoderLayer)

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MAXTEXT_SOAK_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MAXTEXT_SOAK_ASAN 1
#endif

namespace {

using namespace maxtext;
using clock_type = std::chrono::steady_clock;

/// Resident set size of this process in bytes (/proc/self/statm; 0 where it cannot be read).
std::int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  if (!(f >> pages >> resident)) return 0;
  return resident * 4096;
}

double mib(std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

struct Options {
  std::int64_t sessions = 20000;
  std::int64_t warmup = 200;
  std::int64_t context = 2048;
  int threads = 1;
  bool check = false;
};

Options parse(int argc, char** argv) {
  Options o;
  bench::Options opts("soak", "soak [--sessions N] [--warmup N] [--context C] [--threads T] [--check]");
  opts.number("--sessions", o.sessions)
      .number("--warmup", o.warmup)
      .number("--context", o.context)
      .number("--threads", o.threads)
      .flag("--check", o.check)
      .parse(argc, argv);
  if (!(o.sessions > 0 && o.warmup >= 0 && o.context >= 16 && o.threads > 0)) {
    opts.fail("--sessions > 0, --warmup >= 0, --context >= 16, --threads > 0 expected");
  }
  return o;
}

Config soak_config(std::int64_t context) {
  Config c;
  c.decoder_block = "llama2";
  c.model_name = "soak";
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.base_emb_dim = 128;
  c.base_mlp_dim = 256;
  c.base_num_query_heads = 4;
  c.base_num_kv_heads = 2;
  c.head_dim = 32;
  c.base_num_decoder_layers = 2;
  c.vocab_size = 512;
  c.max_target_length = context;
  c.mlp_activations = {"silu", "linear"};
  c.logits_via_embedding = false;
  c.derive();
  c.validate();
  return c;
}

// Token ids as text ("t12 "), so that streaming, stop strings and the text buffers are exercised.
std::string decode_ids(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (auto t : ids) s += "t" + std::to_string(t) + " ";
  return s;
}

int run(const Options& o) {
  const Config cfg = soak_config(o.context);
  models::AnyModelOptions mo;
  mo.threads = o.threads;
  const auto model = models::make_built_any_model(cfg, mo, "llama2 f32");
  model->init(1234);
  std::printf("soak: llama2 block, %lld parameters, context %lld, %d thread(s)\n",
              static_cast<long long>(model->num_params()), static_cast<long long>(cfg.max_target_length), o.threads);

  // ---- phase 1: short sessions ----
  std::int64_t generated = 0, texts = 0;
  auto one_round = [&](std::int64_t i) {
    std::vector<std::int32_t> prompt;
    for (std::int64_t k = 0; k < 4 + i % 6; ++k) prompt.push_back(static_cast<std::int32_t>((i * 31 + k * 7 + 1) % 512));
    models::GenerateOptions go;
    go.max_new_tokens = 8;
    go.sampling.temperature = 0.8f;
    go.sampling.top_k = 40;
    go.sampling.seed = static_cast<std::uint64_t>(i);
    go.decode = decode_ids;
    go.stop_strings = {"t7 "};
    go.on_text = [&](std::int64_t, std::string_view d) {
      texts += static_cast<std::int64_t>(d.size());
      return true;
    };
    const auto session = model->new_session(64);
    generated += static_cast<std::int64_t>(session->generate(prompt, go).tokens[0].size());
    if (i % 16 == 0) {
      const auto r = model->generate({prompt, {prompt.begin(), prompt.begin() + 2}}, go);
      generated += static_cast<std::int64_t>(r.tokens[0].size() + r.tokens[1].size());
    }
  };
  const auto t0 = clock_type::now();
  for (std::int64_t i = 0; i < o.warmup; ++i) one_round(i);
  const std::int64_t rss_warm = rss_bytes();
  std::printf("phase 1: %lld short sessions after %lld warm-up rounds; resident memory (MiB):\n",
              static_cast<long long>(o.sessions), static_cast<long long>(o.warmup));
  std::printf("  after warm-up  %8.2f\n", mib(rss_warm));
  std::int64_t rss_max = rss_warm;
  for (std::int64_t i = 0; i < o.sessions; ++i) {
    one_round(o.warmup + i);
    if ((i + 1) % std::max<std::int64_t>(1, o.sessions / 10) == 0 || i + 1 == o.sessions) {
      const std::int64_t r = rss_bytes();
      rss_max = std::max(rss_max, r);
      std::printf("  %6lld rounds  %8.2f\n", static_cast<long long>(i + 1), mib(r));
    }
  }
  const std::int64_t rss_end = rss_bytes();
  const double secs1 = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::printf("  %lld tokens generated, %lld bytes of text streamed, %.1f s; growth after warm-up %+.2f MiB "
              "(peak %+.2f)\n",
              static_cast<long long>(generated), static_cast<long long>(texts), secs1, mib(rss_end - rss_warm),
              mib(rss_max - rss_warm));

  // ---- phase 2: fill the context, then overflow it ----
  const std::int64_t C = cfg.max_target_length, P = 8;
  const auto session = model->new_session(C);
  std::vector<std::int32_t> prompt;
  for (std::int64_t k = 0; k < P; ++k) prompt.push_back(static_cast<std::int32_t>(k * 13 + 5));
  std::vector<double> stamps;
  models::GenerateOptions go;
  go.max_new_tokens = C - P;
  go.sampling.temperature = 1.0f;
  go.sampling.seed = 99;
  go.on_token = [&](std::int64_t, std::int32_t) {
    stamps.push_back(std::chrono::duration<double>(clock_type::now().time_since_epoch()).count());
  };
  const std::int64_t rss_before = rss_bytes();
  const auto res = session->generate(prompt, go);
  const std::int64_t rss_after = rss_bytes();
  std::printf("phase 2: one generation filling the context: %lld of %lld positions, finish %s\n",
              static_cast<long long>(session->length()), static_cast<long long>(C), models::to_string(res.finish[0]));
  for (int q = 0; q < 4; ++q) {
    const auto n = static_cast<std::int64_t>(stamps.size());
    const std::int64_t a = std::max<std::int64_t>(1, n * q / 4), b = n * (q + 1) / 4 - 1;
    if (b <= a) continue;
    const double tps = static_cast<double>(b - a) / (stamps[static_cast<std::size_t>(b)] - stamps[static_cast<std::size_t>(a)]);
    std::printf("  positions %5lld-%5lld  %9.1f tokens/s\n", static_cast<long long>(P + a), static_cast<long long>(P + b), tps);
  }
  std::printf("  resident memory %8.2f -> %8.2f MiB (the cache's pages are touched as it fills)\n", mib(rss_before),
              mib(rss_after));
  bool refused = false;
  try {
    models::GenerateOptions more;
    more.max_new_tokens = 1;
    (void)session->generate({1}, more);
  } catch (const ArgumentError& e) {
    refused = std::string(e.what()).find("capacity") != std::string::npos;
    std::printf("  one more turn: refused (%s)\n", e.what());
  }

  bool ok = true;
  if (o.check) {
#if defined(MAXTEXT_SOAK_ASAN)
    std::printf("check: memory growth not checked under AddressSanitizer (its leak checker runs at exit)\n");
#else
    const std::int64_t allowed = std::max<std::int64_t>(2 << 20, rss_warm / 50);
    const bool flat = rss_end - rss_warm <= allowed;
    std::printf("check: growth after warm-up %.2f MiB, allowed %.2f MiB: %s\n", mib(rss_end - rss_warm), mib(allowed),
                flat ? "flat" : "GROWING");
    ok = ok && flat;
#endif
    const bool full = session->length() == C && res.tokens[0].size() == static_cast<std::size_t>(C - P);
    std::printf("check: context filled %s, overflow refused %s\n", full ? "yes" : "NO", refused ? "yes" : "NO");
    ok = ok && full && refused;
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak: error: %s\n", e.what());
    return 2;
  }
}
