// bench/kv_memory.cpp: the KV-cache memory of many conversations that begin with one system prompt (issue 51's
// figure): C conversations of N tokens, the first S of them shared, run through models::BatchScheduler on a Llama
// GGUF file, with
//   - "ordinary": one cache of C x N tokens (rows of a common prefix copied between slots, BatchOptions::share_min),
//   - "paged": a paged cache (models/paged_memory.hpp; pages of the system prompt mapped by every slot, copied on
//     write),
//   - "paged-f16": the same with a float16 cache (the policy's KV type; llama.cpp's default cache type),
//   - "paged-int8", "paged-int4", "paged-fp8": the same with MaxText's quantised cache (quantize_kvcache,
//     kv_quant_dtype; layers/kv_quant.hpp), "int8": the ordinary cache quantised.
// For each: the cache's bytes as the library counts them (KVCache::bytes: every row reserved, or the pool's pages
// in use), the pool file's allocated memory, the process's memory growth while the conversations' caches are alive
// (PSS: a page mapped by several slots counted once), the tokens the
// scheduler lent instead of running, and the wall time. One JSON object per line; both in one run.
//
//   bench_kv_memory --weights model.gguf [--conversations 32] [--tokens 2048] [--shared 1000] [--threads 2]
//                   [--caches ordinary,paged,paged-f16,paged-int8]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/models/batching.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/transformer.hpp"

#include "bench_args.hpp"

using namespace maxtext;

namespace {

struct Args {
  std::string weights;
  std::int64_t conversations = 32, tokens = 2048, shared = 1000;
  int threads = 2;
  std::string caches = "ordinary,paged,paged-f16,paged-int8";
};

Args parse(int argc, char** argv) {
  Args a;
  bench::Options o("bench_kv_memory", "bench_kv_memory --weights FILE.gguf [--conversations C] [--tokens N] "
                                      "[--shared S] [--threads T] [--caches ordinary,paged,paged-f16,paged-int8,"
                                      "paged-int4,paged-fp8,int8]");
  o.text("--weights", a.weights)
      .number("--conversations", a.conversations)
      .number("--tokens", a.tokens)
      .number("--shared", a.shared)
      .number("--threads", a.threads)
      .text("--caches", a.caches)
      .parse(argc, argv);
  if (a.weights.empty()) o.fail("--weights is required");
  if (a.conversations < 1 || a.tokens < 2 || a.shared < 0 || a.shared >= a.tokens) {
    o.fail("--conversations >= 1, --tokens >= 2, 0 <= --shared < --tokens");
  }
  return a;
}

/// The process's proportional set size (Pss of /proc/self/smaps_rollup), bytes: its resident memory with a page
/// mapped at several addresses counted once (VmRSS counts such a page once per mapping, so a paged cache's shared
/// pages would count once per conversation).
std::int64_t pss() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Pss:", 0) == 0) return std::stoll(line.substr(4)) * 1024;
  }
  return 0;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class Model>
void run(const Args& a, Model& model, const std::string& kind) {
  const std::int64_t V = model.config().vocab_size;
  std::mt19937 g(7);
  std::uniform_int_distribution<std::int32_t> tok(3, static_cast<std::int32_t>(V - 1));
  std::vector<std::int32_t> system(static_cast<std::size_t>(a.shared));
  for (auto& t : system) t = tok(g);
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::int64_t c = 0; c < a.conversations; ++c) {
    auto p = system;
    while (static_cast<std::int64_t>(p.size()) < a.tokens - 1) p.push_back(tok(g));
    prompts.push_back(std::move(p));
  }
  const std::int64_t pss0 = pss();
  const double t0 = now();
  models::BatchOptions bo;
  bo.prefill_chunk = 512;
  models::BatchScheduler<Model> sched(model, a.conversations, a.tokens, bo);
  std::vector<std::unique_ptr<models::Session<models::BatchScheduler<Model>>>> sessions;
  for (std::int64_t c = 0; c < a.conversations; ++c) {
    sessions.push_back(std::make_unique<models::Session<models::BatchScheduler<Model>>>(sched, a.tokens));
  }
  models::GenerateOptions opt;
  opt.max_new_tokens = 1;  // prompt of N - 1 tokens + 1: every slot holds N tokens
  sessions[0]->generate(prompts[0], opt);  // the system prompt's first owner
  std::vector<std::thread> threads;
  for (std::int64_t c = 1; c < a.conversations; ++c) {
    threads.emplace_back([&, c] {
      sessions[static_cast<std::size_t>(c)]->generate(prompts[static_cast<std::size_t>(c)], opt);
      sched.idle(c);
    });
  }
  for (auto& t : threads) t.join();
  const double secs = now() - t0;
  const std::int64_t grown = pss() - pss0;
  const models::BatchStats st = sched.stats();
  const auto cache_bytes = sched.cache_bytes();
  const auto ps = sched.paging_stats();
  const double per_token = static_cast<double>(ps.page_bytes) / static_cast<double>(std::max<std::int64_t>(ps.tokens_per_page, 1));
  std::printf("{\"impl\": \"maxtext\", \"weights\": \"%s\", \"cache\": \"%s\", \"conversations\": %lld, \"tokens\": %lld, "
              "\"shared\": %lld, \"cache_bytes\": %lld, \"pool_resident_bytes\": %lld, \"pss_growth_bytes\": %lld, "
              "\"tokens_per_page\": %lld, \"pages_used\": %lld, \"pages_shared\": %lld, \"shares\": %lld, \"shared_tokens\": %lld, "
              "\"bytes_per_token\": %.0f, \"seconds\": %.1f}\n",
              a.weights.c_str(), kind.c_str(), static_cast<long long>(a.conversations),
              static_cast<long long>(a.tokens), static_cast<long long>(a.shared), static_cast<long long>(cache_bytes),
              static_cast<long long>(ps.resident_bytes), static_cast<long long>(grown), static_cast<long long>(ps.tokens_per_page),
              static_cast<long long>(ps.pages_used), static_cast<long long>(ps.pages_shared),
              static_cast<long long>(st.shares), static_cast<long long>(st.shared_tokens), per_token, secs);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    using B = cpu::Backend;
    cpu::Options opt;
    opt.threads = a.threads;
    const B be(opt);
    std::stringstream list(a.caches);
    std::string kind;
    while (std::getline(list, kind, ',')) {
      static const std::vector<std::string> kinds = {"ordinary", "paged", "paged-f16", "paged-int8", "paged-int4",
                                                     "paged-fp8", "int8"};
      MAXTEXT_CHECK(std::find(kinds.begin(), kinds.end(), kind) != kinds.end(), ArgumentError, "[bench_kv_memory] --caches: "
                    "unknown cache '", kind, "' (ordinary, paged, paged-f16, paged-int8, paged-int4, paged-fp8, int8)");
      Config cfg = io::read_weights_config(a.weights).value();
      MAXTEXT_CHECK(cfg.is("llama2"), UnsupportedError, "[bench_kv_memory] decoder_block ", cfg.decoder_block,
                    ": llama files only");
      cfg.max_target_length = std::max<std::int64_t>(cfg.max_target_length, a.tokens);
      cfg.dtype = "float32";
      if (kind.rfind("paged", 0) == 0) {
        cfg.set("attention", "paged");
        // The pool: every slot's own tokens plus one copy of the system prompt, in pages (the cache sizes pages).
        cfg.set("pagedattn_num_pages", std::to_string(a.conversations * (a.tokens / 16 + 2)));
      }
      const auto q = kind.find("int8") != std::string::npos ? "int8"
                     : kind.find("int4") != std::string::npos ? "int4"
                     : kind.find("fp8") != std::string::npos  ? "fp8" : "";
      if (*q) {
        cfg.set("quantize_kvcache", "true");
        cfg.set("kv_quant_dtype", q);
      }
      if (kind == "paged-f16") {
        models::Transformer<Policy<B, ggml_byte, float, float, fp16>, layers::LlamaDecoderLayer> model(cfg, be);
        model.load(io::load_weights(a.weights, cfg, true).tensors);
        run(a, model, kind);
      } else {
        models::Transformer<Policy<B, ggml_byte, float>, layers::LlamaDecoderLayer> model(cfg, be);
        model.load(io::load_weights(a.weights, cfg, true).tensors);
        run(a, model, kind);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kv_memory: %s\n", e.what());
    return 1;
  }
  return 0;
}
