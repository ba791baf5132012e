// bench/qwen3_next_decode.cpp: decode time per token of a Qwen3-Next-shaped model (families/qwen3_next/qwen3_next.hpp) against
// the context length, on the CPU backend with seeded weights. Three stacks of the same layers are timed:
//   gdn    every layer Gated DeltaNet (inhomogeneous_layer_cycle_interval > layers),
//   attn   every layer full attention (interval 1),
//   hybrid Qwen3-Next's 3 : 1 pattern (interval 4).
// The Gated DeltaNet keeps a fixed-size state per sequence, so its decode step should cost the same at every context,
// while attention reads the whole KV cache and grows linearly. Head sizes are Qwen3-Next-80B's (Gated DeltaNet
// Dk = Dv = 128, attention head_dim 256), head counts and widths scaled down to fit one core.
// Prints one JSON object per (stack, context): {"stack": ..., "context": n, "ms_per_token": x, "prefill_s": y}.
// --gdn-chunked 0 runs the Gated DeltaNet prompt token by token (cpu::Options::gdn_chunked) to compare prefill with
// the chunked form; --stacks picks stacks (default gdn,attn,hybrid). The stack "op" times the backend's
// gated_delta_rule alone at the 80B model's head counts (32 value heads of 128 x 128, 16 key heads) over a prompt of
// each context, the chunked form and the recurrence in turn (us per token, best of 3).
//   bench_qwen3_next [--threads N] [--contexts 512,2048,8192] [--steps 16] [--layers 4] [--gdn-chunked 1]
//                    [--stacks gdn,attn,hybrid]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/qwen3_next/qwen3_next.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/transformer.hpp"

#include "bench_args.hpp"

using namespace maxtext;
using Model = models::Transformer<Policy<cpu::Backend, float>, layers::Qwen3NextDecoderLayer>;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, steps = 16;
  bool chunked = true;
  std::string stacks = ",gdn,attn,hybrid,";  // comma-delimited, so that find(",name,") matches whole names
  const auto wanted = [&](const std::string& name) { return stacks.find("," + name + ",") != std::string::npos; };
  std::int64_t layers = 4;
  std::vector<std::int64_t> contexts = {512, 2048, 8192};
  std::string stack_list = "gdn,attn,hybrid";
  bench::Options o("bench_qwen3_next", "bench_qwen3_next [--threads T] [--steps N] [--gdn-chunked 0|1] "
                                       "[--stacks gdn,attn,hybrid] [--layers L] [--contexts 512,2048,8192]");
  o.number("--threads", threads)
      .number("--steps", steps)
      .number("--gdn-chunked", chunked)
      .text("--stacks", stack_list)
      .number("--layers", layers)
      .list("--contexts", contexts)
      .parse(argc, argv);
  stacks = "," + stack_list + ",";
  if (steps < 1 || layers < 1 || threads < 1 || contexts.empty()) {
    std::fprintf(stderr, "bench_qwen3_next: --steps, --layers and --threads must be >= 1, --contexts non-empty\n");
    return 2;
  }
  std::int64_t max_ctx = 0;
  for (auto c : contexts) max_ctx = std::max(max_ctx, c);
  const std::string shape =
      "decoder_block=qwen3_next partial_rotary_factor=0.25 rope_max_timescale=10000000 norm_topk_prob=true "
      "normalization_layer_epsilon=1e-6 gdn_conv_kernel_dim=4 "
      "base_emb_dim=512 base_num_query_heads=4 base_num_kv_heads=1 head_dim=256 base_moe_mlp_dim=256 "
      "base_mlp_dim=256 num_experts=8 num_experts_per_tok=2 vocab_size=4096 gdn_num_key_heads=2 "
      "gdn_num_value_heads=4 gdn_key_head_dim=128 gdn_value_head_dim=128 dtype=float32 scan_layers=false";
  for (const auto& [stack, interval] : std::vector<std::pair<std::string, std::int64_t>>{
           {"gdn", layers + 1}, {"attn", 1}, {"hybrid", 4}}) {
    if (!wanted(stack)) continue;
    std::vector<std::string> ov;
    std::stringstream ss(shape);
    std::string kv;
    while (ss >> kv) ov.push_back(kv);
    ov.push_back("base_num_decoder_layers=" + std::to_string(layers));
    ov.push_back("inhomogeneous_layer_cycle_interval=" + std::to_string(interval));
    ov.push_back("max_target_length=" + std::to_string(max_ctx + steps + 1));
    const Config cfg = io::load_config("", ov);
    cpu::Options opt;
    opt.threads = threads;
    opt.gdn_chunked = chunked;
    Model m(cfg, cpu::Backend(opt));
    m.init(7);
    std::mt19937 rng(3);
    for (const std::int64_t ctx : contexts) {
      Tensor<std::int32_t, 2> prompt({1, ctx});
      for (std::int64_t t = 0; t < ctx; ++t) prompt(0, t) = static_cast<std::int32_t>(rng() % 4096);
      auto cache = m.make_cache(1, ctx + steps + 1);
      models::ForwardOptions last;
      last.last_only = true;
      const auto t0 = std::chrono::steady_clock::now();
      m.forward(prompt, cache, last);
      const double prefill = seconds_since(t0);
      Tensor<std::int32_t, 2> tok({1, 1});
      const auto t1 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) {
        tok(0, 0) = static_cast<std::int32_t>(rng() % 4096);
        m.forward(tok, cache, last);
      }
      const double ms = 1e3 * seconds_since(t1) / steps;
      std::printf("{\"stack\": \"%s\", \"layers\": %lld, \"threads\": %d, \"gdn_chunked\": %d, \"context\": %lld, "
                  "\"ms_per_token\": %.3f, \"prefill_s\": %.3f}\n",
                  stack.c_str(), static_cast<long long>(layers), threads, chunked ? 1 : 0, static_cast<long long>(ctx), ms,
                  prefill);
      std::fflush(stdout);
    }
  }
  if (wanted("op")) {
    const GdnShape sh{.key_heads = 16, .value_heads = 32, .key_dim = 128, .value_dim = 128};
    const std::int64_t kd = sh.key_heads * sh.key_dim, vd = sh.value_heads * sh.value_dim, W = 2 * kd + vd;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const std::int64_t ctx : contexts) {
      Tensor<float, 2> qkv({ctx, W}), a({ctx, sh.value_heads}), b({ctx, sh.value_heads}), o({ctx, vd}),
          state({1, sh.state_width()});
      for (auto* t : {&qkv, &a, &b}) {
        for (std::int64_t i = 0; i < t->size(); ++i) t->data()[i] = normal(rng);
      }
      Tensor<float, 1> a_log({sh.value_heads}), dt({sh.value_heads});
      std::fill(a_log.data(), a_log.data() + sh.value_heads, -1.0f);
      std::fill(dt.data(), dt.data() + sh.value_heads, 0.5f);
      Tensor<std::int32_t, 1> start({1});
      start(0) = 0;
      const auto cols = [&](std::int64_t c0, std::int64_t n) { return View<const float, 2>(&qkv(0, c0), {ctx, n}, {W, 1}); };
      double us[2] = {0.0, 0.0};
      for (int form = 0; form < 2; ++form) {
        cpu::Options opt;
        opt.threads = threads;
        opt.gdn_chunked = form == 0;
        const cpu::Backend be(opt);
        double best = 1e30;
        for (int rep = 0; rep < 3; ++rep) {
          const auto t0 = std::chrono::steady_clock::now();
          be.gated_delta_rule(cols(0, kd), cols(kd, kd), cols(2 * kd, vd), a.cview(), b.cview(), a_log.cview(),
                              dt.cview(), sh, start.cview(), View<const std::int32_t, 1>(), state.view(), o.view());
          best = std::min(best, seconds_since(t0));
        }
        us[form] = 1e6 * best / static_cast<double>(ctx);
      }
      std::printf("{\"stack\": \"op\", \"threads\": %d, \"context\": %lld, \"chunked_us_per_token\": %.2f, "
                  "\"recurrent_us_per_token\": %.2f, \"speedup\": %.2f}\n",
                  threads, static_cast<long long>(ctx), us[0], us[1], us[1] / us[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}
