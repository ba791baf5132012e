// MoE block timing: the grouped-by-expert computation costs in proportion to the experts that receive tokens
// (active), not to the experts that exist (total). Routing is steered with the gate bias so that exactly
// `active` experts can win the top-k; tokens, top-k and sizes are fixed.
//   BM_MoE_TotalExperts/E    : active = 8, total E = 8 .. 256  -> time ~flat (only the gate's E columns grow)
//   BM_MoE_ActiveExperts/A   : total = 256, active A = 2 .. 128 -> time grows with A
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/random.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/params.hpp"

namespace {

using namespace maxtext;
using P = Policy<cpu::Backend, float>;

constexpr std::int64_t kTokens = 256, kDim = 256, kHidden = 512, kTopK = 2;

struct MoeCase {
  cpu::Backend be{cpu::Options{1}};
  layers::RoutedMoE<P> moe;
  layers::RoutedMoE<P>::Params params;
  Scratch scratch;
  layers::StepInfo step;
  Tensor<float, 2> x, y;

  MoeCase(std::int64_t experts, std::int64_t active) {
    Config c;
    c.decoder_block = "mixtral";
    c.dtype = "float32";
    c.base_emb_dim = kDim;
    c.num_experts = experts;
    c.num_experts_per_tok = kTopK;
    c.routed_bias = true;
    c.derive();
    moe = layers::RoutedMoE<P>(layers::RoutedMoE<P>::settings(c, kHidden));
    layers::ParamInitializer<P> init(be, 7);
    moe.visit(init, params);
    // Steer routing: experts [0, active) get a large gate bias, the others cannot enter the top-k.
    for (std::int64_t e = 0; e < experts; ++e) params.gate.bias(e) = e < active ? 20.0f : -20.0f;
    x = Tensor<float, 2>({kTokens, kDim});
    y = Tensor<float, 2>({kTokens, kDim});
    Rng rng(11);
    for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(rng.normal());
    step.batch = 1;
    step.length = kTokens;
    step.start = {0};
  }
  layers::MoeMetrics run() {
    layers::MoeMetrics m;
    scratch.reset();
    layers::Context<P> ctx{be, scratch, step, nullptr};
    moe.forward(ctx, params, x.cview(), y.view(), &m);
    return m;
  }
};

void report(benchmark::State& state, const layers::MoeMetrics& m, std::int64_t experts) {
  std::int64_t active = 0;
  for (auto n : m.expert_kept) active += n > 0;
  state.counters["total_experts"] = static_cast<double>(experts);
  state.counters["active_experts"] = static_cast<double>(active);
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(kTokens), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MoE_TotalExperts(benchmark::State& state) {
  const std::int64_t E = state.range(0);
  MoeCase c(E, 8);
  layers::MoeMetrics m = c.run();
  for (auto _ : state) {
    m = c.run();
    benchmark::DoNotOptimize(c.y.data());
  }
  report(state, m, E);
}
BENCHMARK(BM_MoE_TotalExperts)->Arg(8)->Arg(32)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond);

void BM_MoE_ActiveExperts(benchmark::State& state) {
  const std::int64_t A = state.range(0);
  MoeCase c(256, A);
  layers::MoeMetrics m = c.run();
  for (auto _ : state) {
    m = c.run();
    benchmark::DoNotOptimize(c.y.data());
  }
  report(state, m, 256);
}
BENCHMARK(BM_MoE_ActiveExperts)->Arg(2)->Arg(8)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
