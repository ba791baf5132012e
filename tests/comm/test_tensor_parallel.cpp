// Tensor parallelism (models/parallel.hpp) over ranks that are threads (comm/threads.hpp): for every block it
// splits, the fixture models' logits on 1, 2 and 4 ranks against the torch reference (logits.npy, written by
// tests/reference/*.py from Hugging Face / MaxText source, not from this library) and against one process; every
// rank's logits alike; incremental decoding equal to the full forward; 32 greedy tokens equal to one process's. A
// counting communicator proves two all-reduces per layer and one broadcast per step; stalled, failed and mismatched
// ranks end with a CommError naming the layer and the collective. Pipeline stages (each its own layers, whole) give
// one process's logits to the bit. The same split across processes (MPI): the
// `maxtext logits` test under mpirun (tests/CMakeLists.txt, tests/comm/mpi_logits.sh).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/mesh.hpp"
#include "maxtext/comm/threads.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_blocks.hpp"
#include "maxtext/models/parallel.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/split_model.hpp"
#include "maxtext_blocks_built.hpp"
#include "support/family_fixture.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

enum class Layout { tensor, expert, pipeline, mesh };

/// fn(r) on n threads at once; the first failure aborts `group` and is rethrown.
template <class Fn>
void on_threads(int n, comm::ThreadGroup& group, Fn fn) {
  std::vector<std::exception_ptr> err(static_cast<std::size_t>(n));
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r) {
    th.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        err[static_cast<std::size_t>(r)] = std::current_exception();
        group.abort(std::string("rank ") + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (auto& t : th) t.join();
  for (auto& e : err) {
    if (e) std::rethrow_exception(e);
  }
}

/// One model split over n thread ranks, each rank's model loaded from its slice of the fixture's tensors.
struct Split {
  Config cfg;
  std::unique_ptr<comm::ThreadGroup> group;
  std::vector<std::unique_ptr<comm::Counting>> counters;
  std::vector<std::unique_ptr<models::AnyModel>> ranks;

  Split(const Config& full_cfg, const io::TensorMap& full, int n,
        std::chrono::milliseconds timeout = std::chrono::seconds(60), Layout layout = Layout::tensor)
      : cfg(full_cfg), group(std::make_unique<comm::ThreadGroup>(n, timeout)) {
    models::AnyModelOptions o;
    o.threads = 1;
    if (layout == Layout::mesh) {
      // The config's mesh keys (two axes): each rank's model made as mpirun makes it (make_split_any_model: its
      // share, its slices, its sub-groups split from the world), all ranks at once.
      for (int r = 0; r < n; ++r) counters.push_back(std::make_unique<comm::Counting>(group->rank(r)));
      ranks.resize(static_cast<std::size_t>(n));
      on_threads(n, *group, [&](int r) {
        auto& m = ranks[static_cast<std::size_t>(r)];
        m = models::make_split_any_model(full_cfg, o, *counters[static_cast<std::size_t>(r)], full,
                                         models::NameScheme::maxtext, 1, MAXTEXT_BLOCKS_BUILT);
        m->set_replica_check(true);  // over each stage's ranks
      });
      for (auto& c : counters) c->clear();
      return;
    }
    const auto whole = models::make_built_any_model(full_cfg, o, MAXTEXT_BLOCKS_BUILT)->param_shapes();
    for (int r = 0; r < n; ++r) {
      const Config local = layout == Layout::tensor   ? models::tensor_parallel_config(full_cfg, n)
                           : layout == Layout::expert ? models::expert_parallel_config(full_cfg, r, n)
                                                      : models::pipeline_parallel_config(full_cfg, r, n);
      auto m = models::make_built_any_model(local, o, MAXTEXT_BLOCKS_BUILT);
      m->load(layout == Layout::pipeline ? models::stage_tensors(full, m->param_shapes(), whole)
                                         : models::rank_slice(full, m->param_shapes(), r, n));
      counters.push_back(std::make_unique<comm::Counting>(group->rank(r)));
      comm::Communicator* c = counters.back().get();
      m->set_comm_groups(layout == Layout::tensor   ? comm::Groups{c, c, nullptr}
                         : layout == Layout::expert ? comm::Groups{c, nullptr, c}
                                                    : comm::Groups{c, nullptr, nullptr, c});
      // Every layer's residual stream compared across the ranks (pipeline stages hold different layers: no replica).
      m->set_replica_check(layout != Layout::pipeline);
      ranks.push_back(std::move(m));
    }
  }
  int size() const { return static_cast<int>(ranks.size()); }

  /// Run fn(rank, model) on every rank at once; the first failure aborts the group and is rethrown.
  template <class Fn>
  void run(Fn fn) {
    on_threads(size(), *group, [&](int r) { fn(r, *ranks[static_cast<std::size_t>(r)]); });
  }
};

Tensor<float, 3> copy3(const Tensor<float, 3>& t) {
  Tensor<float, 3> c(t.shape());
  std::memcpy(c.data(), t.data(), static_cast<std::size_t>(t.size()) * sizeof(float));
  return c;
}

bool same_bits(const Tensor<float, 3>& a, const Tensor<float, 3>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

/// The counting tests' start: `cfg` split over a mesh of 4 thread ranks by two axes of 2 (MaxText's ici keys, fsdp
/// 1), each rank made as mpirun makes it, the replica check off (its all_gathers would count too), and each rank's
/// logits of `tok`.
struct TwoAxisRun {
  Split split;
  std::vector<Tensor<float, 3>> logits;
};
TwoAxisRun run_two_axes(Config cfg, const io::TensorMap& full, const Tensor<std::int32_t, 2>& tok, const char* axis_a,
                        const char* axis_b) {
  cfg.set(axis_a, "2");
  cfg.set(axis_b, "2");
  cfg.set("ici_fsdp_parallelism", "1");
  TwoAxisRun run{Split(cfg, full, 4, std::chrono::seconds(60), Layout::mesh), std::vector<Tensor<float, 3>>(4)};
  for (auto& m : run.split.ranks) m->set_replica_check(false);
  run.split.run([&](int r, models::AnyModel& m) {
    models::ForwardRequest q;
    q.tokens = &tok;
    run.logits[static_cast<std::size_t>(r)] = copy3(m.forward(q));
  });
  return run;
}

Tensor<std::int32_t, 2> first_cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({t.dim(0), n});
  for (std::int64_t b = 0; b < t.dim(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(b, c0 + i);
  }
  return s;
}

/// One forward pass of the tokens [1, 2] (a split model run without its ranks refuses it).
void forward_two_tokens(models::AnyModel& m) {
  Tensor<std::int32_t, 2> tok({1, 2});
  tok(0, 0) = 1;
  tok(0, 1) = 2;
  models::ForwardRequest q;
  q.tokens = &tok;
  (void)m.forward(q);
}

/// A fixture's config: meta.json's "config", or config.yml beside it.
Config fixture_config(const std::string& dir) {
  const auto meta = test::read_meta(dir);
  if (meta.contains("config")) return test::config_from_meta(meta);
  Config c = io::load_config(dir + "/config.yml");
  c.derive();
  return c;
}

/// Logits, incremental decoding and greedy tokens of `fixture` on 1, 2 and 4 ranks.
/// `mesh`: with Layout::mesh, the mesh keys (and the ranks are their product).
void check_fixture(const std::string& fixture, Layout layout = Layout::tensor, std::vector<int> rank_counts = {2, 4},
                   const std::vector<std::pair<std::string, std::string>>& mesh = {}) {
  const std::string dir = test::fixture(fixture);
  const Config cfg = fixture_config(dir);
  const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;  // canonical MaxText names
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const AnyTensor torch_logits = test::npy(dir + "/logits.npy");
  const std::int64_t T = tok.dim(1);

  // One process: the logits and greedy tokens the split runs must give.
  models::AnyModelOptions o1;
  o1.threads = 1;
  auto single = models::make_built_any_model(cfg, o1, MAXTEXT_BLOCKS_BUILT);
  single->load(full);
  models::ForwardRequest fr;
  fr.tokens = &tok;
  const Tensor<float, 3> one = copy3(single->forward(fr));
  test::expect_close(one, torch_logits, test::tol::f32_logits, fixture + ".single");
  models::GenerateOptions g;
  g.max_new_tokens = std::min<std::int64_t>(32, cfg.max_target_length - 4);
  g.sampling.temperature = 0.0;
  const std::vector<std::int32_t> prompt(tok.data(), tok.data() + 4);
  const auto greedy = single->generate({prompt}, g).tokens.at(0);
  REQUIRE(static_cast<std::int64_t>(greedy.size()) == g.max_new_tokens);

  Config split_cfg = cfg;
  for (const auto& [k, v] : mesh) split_cfg.set(k, v);
  for (const int n : rank_counts) {
    INFO(fixture << " on " << n << " ranks" << (mesh.empty() ? "" : " (" + comm::Mesh::from_config(split_cfg, n).describe() + ")"));
    Split s(split_cfg, full, n, std::chrono::seconds(60), layout);
    std::vector<Tensor<float, 3>> logits(static_cast<std::size_t>(n)), inc(static_cast<std::size_t>(n));
    std::vector<std::vector<std::int32_t>> tokens(static_cast<std::size_t>(n));
    s.run([&](int r, models::AnyModel& m) {
      models::ForwardRequest q;
      q.tokens = &tok;
      logits[static_cast<std::size_t>(r)] = copy3(m.forward(q));
      // Incremental: prefill 4, then one token per step, against the full forward's rows.
      auto cache = m.new_cache(tok.dim(0), T);
      Tensor<float, 3> steps({tok.dim(0), T, cfg.vocab_size});
      for (std::int64_t t0 = 0; t0 < T;) {
        const std::int64_t len = t0 == 0 ? 4 : 1;
        const auto part = first_cols(tok, t0, len);
        models::ForwardRequest st;
        st.tokens = &part;
        st.cache = cache.get();
        const auto l = m.forward(st);
        for (std::int64_t b = 0; b < tok.dim(0); ++b) {
          for (std::int64_t t = 0; t < len; ++t) {
            std::memcpy(&steps(b, t0 + t, 0), &l(b, t, 0), static_cast<std::size_t>(cfg.vocab_size) * sizeof(float));
          }
        }
        t0 += len;
      }
      inc[static_cast<std::size_t>(r)] = std::move(steps);
      tokens[static_cast<std::size_t>(r)] = m.generate({prompt}, g).tokens.at(0);
    });
    // Against the torch reference with the whole-model f32 bound, and against one process: the partial products are
    // the same f32 terms summed in another order (per rank, then across ranks). Each layer adds about one ulp of the
    // residual stream and the differences compound through the layers (Gemma 4's 14: 1 ulp after layer 0, 21 after
    // layer 9, 41 at the logits): 6 L eps max|logits|, and at least 1e-5 (~1e-6 on the 2-layer fixtures).
    float top = 0.0f;
    for (std::int64_t i = 0; i < one.size(); ++i) top = std::max(top, std::abs(one.data()[i]));
    const double depth_atol = std::max(1e-5, 6.0 * static_cast<double>(cfg.num_decoder_layers) * 1.1920929e-7 * top);
    test::expect_close(logits[0], torch_logits, test::tol::f32_logits, fixture + ".split");
    test::expect_close(logits[0], AnyTensor::from(one), {1e-5, depth_atol}, fixture + ".split vs one process");
    test::expect_close(inc[0], AnyTensor::from(logits[0]), test::tol::decode_step, fixture + ".incremental");
    // Pipeline stages run each layer whole with one process's kernels, on the same rows: the same bits.
    if (layout == Layout::pipeline) CHECK(same_bits(logits[0], one));
    for (int r = 1; r < n; ++r) {
      CHECK(same_bits(logits[static_cast<std::size_t>(r)], logits[0]));
      CHECK(same_bits(inc[static_cast<std::size_t>(r)], inc[0]));
      CHECK(tokens[static_cast<std::size_t>(r)] == tokens[0]);
    }
    CHECK(tokens[0] == greedy);
  }
}

}  // namespace

TEST_CASE("Tensor parallel: Llama-2 on 1, 2 and 4 ranks matches torch and one process", "[comm][tp][llama2]") {
  check_fixture("llama2_model");
}
TEST_CASE("Tensor parallel: Mistral on 2 and 4 ranks", "[comm][tp][mistral]") { check_fixture("mistral_model"); }
TEST_CASE("Tensor parallel: Qwen2 (q, k, v biases split with their heads) on 2 and 4 ranks", "[comm][tp][qwen2]") {
  check_fixture("qwen2_model");
}
TEST_CASE("Tensor parallel: Qwen3 (per-head qk norm) on 2 and 4 ranks", "[comm][tp][qwen3]") { check_fixture("qwen3_model"); }
TEST_CASE("Tensor parallel: Gemma on 2 and 4 ranks", "[comm][tp][gemma]") { check_fixture("gemma_model"); }
TEST_CASE("Tensor parallel: Gemma 2 (soft caps, post norms) on 2 and 4 ranks", "[comm][tp][gemma2]") {
  check_fixture("gemma2_model");
}
TEST_CASE("Tensor parallel: Gemma 3 (sliding and global layers, tied head) on 2 and 4 ranks", "[comm][tp][gemma3]") {
  check_fixture("gemma3_model");
}
TEST_CASE("Tensor parallel: Gemma 4 (global layers' own kv heads, K = V) and Gemma 4 small (per-layer inputs, KV "
          "sharing, double-wide MLP) on 2 and 4 ranks", "[comm][tp][gemma4]") {
  check_fixture("gemma4_model");           // global_num_kv_heads 1: kept by every rank
  check_fixture("gemma4_small_e2b_model");  // per-layer inputs whole on every rank; shared layers read their donor's slice
  check_fixture("gemma4_small_e4b_model", Layout::tensor, {2});
  // Global layers with 2 kv heads of their own on 2 ranks: each rank must keep the one its query heads read (a rank
  // holding both would pair its 2 query heads with kv heads 0 and 1, silently wrong). The model initialised alike.
  Config g = fixture_config(test::fixture("gemma4_model"));
  g.global_num_kv_heads = 2;
  g.set("ici_tensor_parallelism", "2");
  g.set("ici_fsdp_parallelism", "1");
  CHECK(models::tensor_parallel_config(g, 2).global_num_kv_heads == 1);
  CHECK(models::tensor_parallel_config(g, 4).global_num_kv_heads == 1);
  Config odd = g;
  odd.global_num_kv_heads = 3;
  CHECK_THROWS_WITH(models::tensor_parallel_config(odd, 2), Catch::Contains("global_num_kv_heads = 3 is not divisible"));
  const auto tok = test::int_tensor(test::npy(test::fixture("gemma4_model") + "/tokens.npy"));
  auto single = models::make_built_any_model(g, {}, MAXTEXT_BLOCKS_BUILT);
  single->init(5);
  models::ForwardRequest fr;
  fr.tokens = &tok;
  const Tensor<float, 3> one = copy3(single->forward(fr));
  comm::ThreadGroup pair(2);
  std::vector<Tensor<float, 3>> logits(2);
  on_threads(2, pair, [&](int r) {
    auto m = models::make_split_any_model(g, {}, pair.rank(r), std::nullopt, models::NameScheme::maxtext, 5,
                                          MAXTEXT_BLOCKS_BUILT);
    models::ForwardRequest q;
    q.tokens = &tok;
    logits[static_cast<std::size_t>(r)] = copy3(m->forward(q));
  });
  test::expect_close(logits[0], AnyTensor::from(one), {1e-5, 1e-5}, "gemma4, 2 global kv heads on 2 ranks");
  CHECK(same_bits(logits[0], logits[1]));
}
TEST_CASE("Tensor parallel: the simple, simple_mlp (ff_2 reduced over the ranks) and default blocks on 2 and 4 ranks",
          "[comm][tp]") {
  for (const char* f : {"simple_model", "simple_mlp_model", "default_model"}) check_fixture(f);
}
TEST_CASE("Tensor parallel: GPT-3 (fused [emb, 3, heads, head_dim] kernel, biases, learned positions) on 2 ranks",
          "[comm][tp][gpt3]") {
  check_fixture("gpt3_model", Layout::tensor, {2});  // 2 heads
  check_fixture("gpt3_model_sincap", Layout::tensor, {2});
}
TEST_CASE("Tensor parallel: OLMo 3 (qk norm over all heads, gathered) on 2 ranks", "[comm][tp][olmo3]") {
  check_fixture("olmo3_model", Layout::tensor, {2});
  // The norm's statistic is one process's: each rank gathers the others' heads (one all-gather per norm, q and k),
  // beside the two all-reduces per layer and the head's gather.
  const std::string dir = test::fixture("olmo3_model");
  const Config cfg = fixture_config(dir);
  const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Split s(cfg, full, 2);
  for (auto& m : s.ranks) m->set_replica_check(false);
  s.run([&](int, models::AnyModel& m) { forward_two_tokens(m); });
  const std::int64_t L = cfg.num_decoder_layers, H = cfg.head_dim;
  for (const auto& c : s.counters) {
    CHECK(c->tally("all_reduce").calls == 2 * L);
    CHECK(c->tally("all_gather").calls == 2 * L + 1);
    // per layer: 2 rows of 2 query heads and 2 rows of 1 kv head (this rank's), f32; then 2 rows of V / 2 logits
    CHECK(c->tally("all_gather").bytes == L * 2 * (cfg.num_query_heads / 2 + cfg.num_kv_heads / 2) * H * 4 +
                                              2 * cfg.vocab_size / 2 * 4);
  }
  // With fewer kv heads than ranks each rank would keep a copy of one: the gathered heads would not be the model's.
  CHECK_THROWS_WITH(models::tensor_parallel_config(cfg, 4),
                    Catch::Contains("OLMo 3's qk norm over all heads needs the kv heads split"));
}

TEST_CASE("Expert parallel: Mixtral's 4 experts on 2 and 4 ranks match torch and one process", "[comm][ep][mixtral]") {
  check_fixture("mixtral_model", Layout::expert);
}
TEST_CASE("Expert parallel: Qwen3-MoE on 2 and 4 ranks", "[comm][ep][qwen3_moe]") {
  check_fixture("qwen3_moe_model", Layout::expert);
}
TEST_CASE("Expert parallel: DeepSeek-V3 (MLA, shared experts, grouped routing) on 2 and 4 ranks", "[comm][ep][deepseek]") {
  check_fixture("deepseek_model", Layout::expert);
}
TEST_CASE("Expert parallel: gpt-oss (expert biases, clamped SwiGLU) on 2 and 4 ranks", "[comm][ep][gpt_oss]") {
  check_fixture("gpt_oss_model", Layout::expert);
}
TEST_CASE("Expert parallel: Llama 4 (top-1 scaled inputs, shared expert) on 2 and 4 ranks", "[comm][ep][llama4]") {
  check_fixture("llama4_model", Layout::expert);
}
TEST_CASE("Expert parallel: Gemma 4 MoE (per-expert scales) on 2 and 4 ranks", "[comm][ep][gemma4]") {
  check_fixture("gemma4_moe_model", Layout::expert);
}
TEST_CASE("Expert parallel: Qwen3-Next (Gated DeltaNet, gated shared expert) on 2 and 4 ranks", "[comm][ep][qwen3_next]") {
  check_fixture("qwen3_next_model", Layout::expert);
}
TEST_CASE("Expert parallel: DeepSeek-V4 (hash routing, compressed attention, hyper-connections, 6 experts) on 2 and 3 "
          "ranks", "[comm][ep][deepseek4]") {
  check_fixture("deepseek4_model", Layout::expert, {2, 3});
}
TEST_CASE("Expert parallel: envy and qwen3_custom_moe on 2 and 4 ranks", "[comm][ep][envy][qwen3_custom_moe]") {
  check_fixture("envy_model", Layout::expert);
  check_fixture("qwen3_custom_moe_model", Layout::expert);
}

// Tensor parallelism on MoE blocks: attention by heads (MLA's latent path whole on every rank), every expert (and
// shared expert) by its hidden columns, as MaxText's `tensor` axis shards the experts' `mlp` axis. Each expert's
// partial product stays in f32 until the ranks' sums are added.
TEST_CASE("Tensor parallel: Mixtral, Qwen3-MoE and gpt-oss (experts split by columns, expert biases once) on 2 and 4 "
          "ranks", "[comm][tp][moe][mixtral][qwen3_moe][gpt_oss]") {
  check_fixture("mixtral_model");
  check_fixture("qwen3_moe_model");
  check_fixture("gpt_oss_model");
}
TEST_CASE("Tensor parallel: DeepSeek-V3 (MLA heads with the latent cache whole, shared and routed experts by columns) "
          "on 2 ranks", "[comm][tp][moe][deepseek]") {
  check_fixture("deepseek_model", Layout::tensor, {2});  // 2 heads
}
TEST_CASE("Tensor parallel: Llama 4, Gemma 4 MoE, envy and qwen3_custom_moe on 2 and 4 ranks",
          "[comm][tp][moe][llama4][gemma4][envy][qwen3_custom_moe]") {
  check_fixture("llama4_model");
  check_fixture("gemma4_moe_model");
  check_fixture("envy_model");
  check_fixture("qwen3_custom_moe_model");
}

// Pipeline parallelism: every block whose fixture the torch references cover, on 2 stages and on as many as it has
// layers (up to 4; 3 where that splits unevenly), against torch and one process (the same bits: each layer runs whole).
TEST_CASE("Pipeline parallel: every decoder block on 2 to 4 stages matches torch and one process, to the bit",
          "[comm][pp]") {
  for (const char* f : {"default_model", "simple_model", "simple_mlp_model", "llama2_model", "llama2lti_model",
                        "mistral_model", "qwen2_model", "qwen3_model", "gemma_model", "gemma2_model", "olmo3_model",
                        "gpt3_model", "mixtral_model", "qwen3_moe_model", "qwen3_custom_moe_model", "envy_model",
                        "gpt_oss_model", "deepseek_model", "deepseek_mhc_model", "deepseek_mhc_lite_model"}) {
    const Config cfg = fixture_config(test::fixture(f));
    std::vector<int> n = {2};
    if (cfg.num_decoder_layers > 2) n.push_back(static_cast<int>(std::min<std::int64_t>(cfg.num_decoder_layers, 4)));
    check_fixture(f, Layout::pipeline, n);
  }
}
TEST_CASE("Pipeline parallel: sliding / chunked / NoPE layer patterns and recurrent caches keep their global indices",
          "[comm][pp]") {
  check_fixture("gemma3_model", Layout::pipeline, {2, 3, 4});  // 7 layers: 4 + 3, 3 + 2 + 2, 2 + 2 + 2 + 1
  check_fixture("gemma4_model", Layout::pipeline, {2, 3});
  check_fixture("gemma4_moe_model", Layout::pipeline, {2, 4});
  check_fixture("llama4_model", Layout::pipeline, {2, 3});
  check_fixture("qwen3_next_model", Layout::pipeline, {2});  // Gated DeltaNet states on both stages
  check_fixture("qwen3_5_model", Layout::pipeline, {2});
  check_fixture("deepseek4_model", Layout::pipeline, {2, 4});  // compressed attention, hyper-connection streams
}

TEST_CASE("Pipeline parallel: a picture's tokens attend to each other on every stage", "[comm][pp]") {
  // Gemma 3 merges soft tokens with bidirectional attention within each picture; the stages after the first receive
  // the residual stream, not the picture, and must still give its tokens their ranges (without them a picture's
  // tokens attend causally, which test_gemma3_multimodal shows changes the logits by up to 8.5). Against one process,
  // bit for bit, on 3 stages; the control: the picture changes the logits.
  const std::string dir = test::fixture("gemma3_model");
  const Config cfg = fixture_config(dir);
  const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Tensor<std::int32_t, 2> mask({tok.dim(0), tok.dim(1)});
  std::int64_t n = 0;
  for (std::int64_t b = 0; b < tok.dim(0); ++b) {
    for (std::int64_t t = 0; t < tok.dim(1); ++t) {
      mask(b, t) = t >= 2 && t < 6 ? 1 : 0;  // a four-token picture in every row
      n += mask(b, t);
    }
  }
  Tensor<float, 2> emb({n, cfg.emb_dim});
  for (std::int64_t i = 0; i < emb.size(); ++i) emb.data()[i] = 0.05f * static_cast<float>((i * 7919) % 41 - 20);
  models::ForwardRequest q;
  q.tokens = &tok;
  q.media_mask = &mask;
  q.media_embeddings = &emb;
  models::AnyModelOptions o1;
  o1.threads = 1;
  auto single = models::make_built_any_model(cfg, o1, MAXTEXT_BLOCKS_BUILT);
  single->load(full);
  const Tensor<float, 3> one = copy3(single->forward(q));
  Split s(cfg, full, 3, std::chrono::seconds(60), Layout::pipeline);
  std::vector<Tensor<float, 3>> logits(3);
  s.run([&](int r, models::AnyModel& m) { logits[static_cast<std::size_t>(r)] = copy3(m.forward(q)); });
  for (const auto& l : logits) CHECK(same_bits(l, one));
  models::ForwardRequest plain;
  plain.tokens = &tok;
  CHECK_FALSE(same_bits(copy3(single->forward(plain)), one));  // the picture's rows change the logits
}

TEST_CASE("Pipeline parallel: one send and one recv per stage boundary crossed, one broadcast of the logits, and MaxText's "
          "circular layout", "[comm][pp]") {
  const std::string dir = test::fixture("olmo3_model");  // 4 layers
  Config cfg = fixture_config(dir);
  REQUIRE(cfg.num_decoder_layers == 4);
  const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const std::int64_t M = tok.dim(0) * tok.dim(1), bytes = M * cfg.emb_dim * 4;
  auto pass = [&](Split& s) {
    s.run([&](int, models::AnyModel& m) {
      models::ForwardRequest q;
      q.tokens = &tok;
      (void)m.forward(q);
    });
  };
  {  // one run per stage: layers 0-1 | 2-3
    Split s(cfg, full, 2, std::chrono::seconds(60), Layout::pipeline);
    pass(s);
    CHECK(s.counters[0]->tally("send").calls == 1);
    CHECK(s.counters[0]->tally("send").bytes == bytes);
    CHECK(s.counters[0]->tally("recv").calls == 0);
    CHECK(s.counters[1]->tally("recv").calls == 1);
    CHECK(s.counters[1]->tally("send").calls == 0);
    for (const auto& c : s.counters) {
      CHECK(c->tally("all_reduce").calls == 0);
      CHECK(c->tally("broadcast").calls == 1);
      CHECK(c->tally("broadcast").bytes == M * cfg.vocab_size * 4);
    }
    const auto shapes0 = s.ranks[0]->param_shapes(), shapes1 = s.ranks[1]->param_shapes();
    CHECK(shapes0.count("decoder.layers_1.mlp.wo.kernel") == 1);
    CHECK(shapes0.count("decoder.layers_2.mlp.wo.kernel") == 0);
    CHECK(shapes0.count("decoder.logits_dense.kernel") == 0);
    CHECK(shapes1.count("token_embedder.embedding") == 0);
    CHECK(shapes1.count("decoder.layers_3.mlp.wo.kernel") == 1);
    CHECK(shapes1.count("decoder.logits_dense.kernel") == 1);
  }
  // MaxText's layout (num_layers_per_pipeline_stage = 1, num_pipeline_repeats derived: 2): layers 0, 2 | 1, 3.
  cfg.set("num_layers_per_pipeline_stage", "1");
  const Config c0 = models::pipeline_parallel_config(cfg, 0, 2);
  CHECK(c0.pipeline.chunk == 1);
  CHECK(c0.pipeline_owner(0) == 0);
  CHECK(c0.pipeline_owner(1) == 1);
  CHECK(c0.pipeline_owner(2) == 0);
  CHECK(c0.pipeline_owner(3) == 1);
  Split s(cfg, full, 2, std::chrono::seconds(60), Layout::pipeline);
  std::vector<Tensor<float, 3>> logits(2);
  s.run([&](int r, models::AnyModel& m) {
    models::ForwardRequest q;
    q.tokens = &tok;
    logits[static_cast<std::size_t>(r)] = copy3(m.forward(q));
  });
  CHECK(s.counters[0]->tally("send").calls == 2);
  CHECK(s.counters[0]->tally("recv").calls == 1);
  CHECK(s.counters[1]->tally("recv").calls == 2);
  CHECK(s.counters[1]->tally("send").calls == 1);
  test::expect_close(logits[0], test::npy(dir + "/logits.npy"), test::tol::f32_logits, "olmo3 circular pipeline");
  CHECK(same_bits(logits[0], logits[1]));
  CHECK(s.ranks[0]->param_shapes().count("decoder.layers_2.mlp.wo.kernel") == 1);
}

TEST_CASE("Pipeline parallel: layouts MaxText's keys do not describe, and what a stage cannot hold, refused by name",
          "[comm][pp]") {
  const Config llama = fixture_config(test::fixture("llama2_model"));  // 2 layers
  CHECK_THROWS_WITH(models::pipeline_parallel_config(llama, 0, 3), Catch::Contains("more than the 2 decoder layers") ||
                                                                       Catch::Contains("more stages than the 2"));
  Config c = llama;
  c.set("pipeline_parallel_layers", "1");
  CHECK_THROWS_WITH(models::pipeline_parallel_config(c, 0, 2), Catch::Contains("pipeline_parallel_layers = 1"));
  Config olmo = fixture_config(test::fixture("olmo3_model"));  // 4 layers
  olmo.set("num_layers_per_pipeline_stage", "3");
  CHECK_THROWS_WITH(models::pipeline_parallel_config(olmo, 0, 2),
                    Catch::Contains("num_layers_per_pipeline_stage (3)") && Catch::Contains("num_decoder_layers = 4"));
  Config reps = fixture_config(test::fixture("olmo3_model"));
  reps.set("num_pipeline_repeats", "2");
  CHECK(models::pipeline_parallel_config(reps, 1, 2).pipeline.chunk == 1);
  // Qwen3-Next's 4 layers on 4 stages: the last would hold only the full-attention layer 3, whose cache is not
  // recurrent while the others' are (a session would rewind them differently): refused, whichever stage asks.
  const Config next = fixture_config(test::fixture("qwen3_next_model"));
  CHECK_THROWS_WITH(models::pipeline_parallel_config(next, 0, 4),
                    Catch::Contains("stage 3 of 4 would hold only full-attention layers (layers 3)"));
  CHECK(models::pipeline_layers_label(models::pipeline_parallel_config(next, 1, 2), 1) == "layers 2-3");
  Config circ = fixture_config(test::fixture("olmo3_model"));
  circ.set("num_layers_per_pipeline_stage", "1");
  CHECK(models::pipeline_layers_label(models::pipeline_parallel_config(circ, 0, 2), 0) == "layers 0, 2");
  // MTP layers, per-layer inputs and KV-shared layers whose donor another stage holds.
  const Config mtp = fixture_config(test::fixture("mtp_llama2_model"));
  CHECK_THROWS_WITH(models::make_built_any_model(models::pipeline_parallel_config(mtp, 0, 2), {}, MAXTEXT_BLOCKS_BUILT),
                    Catch::Contains("mtp_num_layers = 2: MTP layers are not split across pipeline stages"));
  Config e2b = fixture_config(test::fixture("gemma4_small_e2b_model"));  // 10 layers, the last 4 KV-shared
  CHECK_THROWS_WITH(models::make_built_any_model(models::pipeline_parallel_config(e2b, 0, 2), {}, MAXTEXT_BLOCKS_BUILT),
                    Catch::Contains("per-layer inputs"));
  e2b.set("hidden_size_per_layer_input", "0");
  e2b.set("vocab_size_per_layer_input", "0");
  CHECK_THROWS_WITH(models::make_built_any_model(models::pipeline_parallel_config(e2b, 1, 2), {}, MAXTEXT_BLOCKS_BUILT),
                    Catch::Contains("layer 9 reads the keys and values of layer 4, which pipeline stage 0 holds"));
  // make_split_any_model: every rank refuses what any stage's model refuses (here stage 1's), before any waits.
  e2b.set("ici_pipeline_parallelism", "2");
  e2b.set("ici_fsdp_parallelism", "1");
  comm::ThreadGroup pair(2, std::chrono::seconds(5));
  std::vector<std::string> msgs(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      try {
        (void)models::make_split_any_model(e2b, {}, pair.rank(r), std::nullopt, models::NameScheme::maxtext, 1,
                                           MAXTEXT_BLOCKS_BUILT);
      } catch (const std::exception& e) {
        msgs[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  for (const auto& m : msgs) CHECK_THAT(m, Catch::Contains("layer 9 reads the keys and values of layer 4"));
  // A stage model without its pipeline group refuses to run.
  auto m = models::make_built_any_model(models::pipeline_parallel_config(llama, 1, 2), {}, MAXTEXT_BLOCKS_BUILT);
  m->init(1);
  CHECK_THROWS_WITH(forward_two_tokens(*m), Catch::Contains("this model is stage 1 of 2, but no pipeline group is set"));
  // Two kinds of parallelism in one mesh.
  Config both = llama;
  both.set("ici_tensor_parallelism", "2");
  both.set("ici_pipeline_parallelism", "2");
  both.set("ici_fsdp_parallelism", "1");
  comm::ThreadGroup g(4);
  CHECK(models::split_mesh(both, &g.rank(0)).size() == 4);  // tensor x pipeline: built (below)
  both.set("ici_pipeline_parallelism", "1");
  both.set("ici_expert_parallelism", "2");
  CHECK(models::split_mesh(both, &g.rank(0)).size() == 4);  // tensor x expert: built (below)
}

TEST_CASE("Pipeline parallel: a stalled stage ends the next one's wait, naming the layer and the transfer",
          "[comm][pp][faults]") {
  const std::string dir = test::fixture("llama2_model");
  const Config cfg = fixture_config(dir);
  const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Split s(cfg, full, 2, std::chrono::milliseconds(300), Layout::pipeline);
  std::string msg;
  try {
    s.run([&](int r, models::AnyModel& m) {
      if (r == 0) return;  // stalls: never sends layer 0's output
      models::ForwardRequest q;
      q.tokens = &tok;
      (void)m.forward(q);
    });
  } catch (const CommError& e) {
    msg = e.what();
  }
  CHECK_THAT(msg, Catch::Contains("decoder.layers_1: recv from pipeline stage 0") && Catch::Contains("did not complete"));
}

TEST_CASE("Expert parallel: one all-reduce of [tokens, emb_dim] per MoE layer, none for attention", "[comm][ep]") {
  const std::string dir = test::fixture("mixtral_model");
  const Config cfg = fixture_config(dir);
  const io::TensorMap full = io::read_safetensors(dir + "/model.safetensors");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Split s(cfg, full, 2, std::chrono::seconds(60), Layout::expert);
  for (auto& m : s.ranks) m->set_replica_check(false);
  const std::int64_t M = tok.dim(0) * tok.dim(1), L = cfg.num_decoder_layers;
  s.run([&](int, models::AnyModel& m) {
    models::ForwardRequest q;
    q.tokens = &tok;
    (void)m.forward(q);
  });
  for (const auto& c : s.counters) {
    CHECK(c->tally("all_reduce").calls == L);
    CHECK(c->tally("all_reduce").bytes == L * M * cfg.emb_dim * 4);
    CHECK(c->tally("broadcast").calls == 1);
  }
  CHECK_THROWS_WITH(models::expert_parallel_config(fixture_config(test::fixture("llama2_model")), 0, 2),
                    Catch::Contains("has no experts to split"));
  CHECK_THROWS_WITH(models::expert_parallel_config(cfg, 0, 3), Catch::Contains("num_experts = 4 is not divisible by the 3"));
}

TEST_CASE("Tensor parallel: two all-reduces of [tokens, emb_dim] per layer and one all-gather of the logits per step",
          "[comm][tp]") {
  const std::string dir = test::fixture("llama2_model");
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  const io::TensorMap full = io::read_safetensors(dir + "/model.safetensors");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Split s(cfg, full, 2);
  for (auto& m : s.ranks) m->set_replica_check(false);  // its all_gathers would count too
  const std::int64_t M = tok.dim(0) * tok.dim(1), L = cfg.num_decoder_layers;
  s.run([&](int, models::AnyModel& m) {
    models::ForwardRequest q;
    q.tokens = &tok;
    (void)m.forward(q);
  });
  for (const auto& c : s.counters) {
    CHECK(c->tally("all_reduce").calls == 2 * L);
    CHECK(c->tally("all_reduce").bytes == 2 * L * M * cfg.emb_dim * 4);
    // The untied head is split by vocabulary: each rank gives its V / 2 logits of every row, once.
    CHECK(c->tally("broadcast").calls == 0);
    CHECK(c->tally("all_gather").calls == 1);
    CHECK(c->tally("all_gather").bytes == M * cfg.vocab_size / 2 * 4);
  }
}

TEST_CASE("Tensor parallel: a MoE layer split by columns adds one all-reduce for its routed experts and one per shared "
          "expert", "[comm][tp][moe]") {
  // Mixtral: attention + routed experts per layer. Llama 4's fixture: layers alternate dense and MoE with a shared
  // expert (attention + routed + shared).
  for (const char* fixture : {"mixtral_model", "llama4_model"}) {
    INFO(fixture);
    const std::string dir = test::fixture(fixture);
    const Config cfg = fixture_config(dir);
    const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;
    const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
    Split s(cfg, full, 2);
    for (auto& m : s.ranks) m->set_replica_check(false);
    const std::int64_t M = tok.dim(0) * tok.dim(1), L = cfg.num_decoder_layers;
    std::int64_t moe_layers = L;
    if (std::string(fixture) == "llama4_model") {
      moe_layers = 0;
      for (std::int64_t i = 0; i < L; ++i) moe_layers += (i + 1) % cfg.interleave_moe_layer_step == 0 ? 1 : 0;
      REQUIRE(moe_layers > 0);
      REQUIRE(cfg.shared_experts == 1);
    }
    const std::int64_t shared = std::string(fixture) == "llama4_model" ? moe_layers : 0;
    const std::int64_t calls = 2 * L + shared;  // attention, the MLP or the routed experts, a shared expert
    s.run([&](int, models::AnyModel& m) {
      models::ForwardRequest q;
      q.tokens = &tok;
      (void)m.forward(q);
    });
    for (const auto& c : s.counters) {
      CHECK(c->tally("all_reduce").calls == calls);
      CHECK(c->tally("all_reduce").bytes == calls * M * cfg.emb_dim * 4);
    }
  }
}

TEST_CASE("Tensor parallel: an untied output head is split by vocabulary, a tied one stays whole", "[comm][tp]") {
  const Config llama = test::config_from_meta(test::read_meta(test::fixture("llama2_model")));
  for (const int n : {2, 4}) {
    const Config c = models::tensor_parallel_config(llama, n);
    CHECK(c.head_shards == n);
    auto m = models::make_built_any_model(c, {}, MAXTEXT_BLOCKS_BUILT);
    const auto shapes = m->param_shapes();
    CHECK(shapes.at("decoder.logits_dense.kernel") == std::vector<std::int64_t>{llama.emb_dim, llama.vocab_size / n});
    CHECK(shapes.at("token_embedder.embedding") == std::vector<std::int64_t>{llama.vocab_size, llama.emb_dim});
    // Without the communicator of its n ranks the split model refuses to run, naming the split.
    m->init(1);
    CHECK_THROWS_WITH(forward_two_tokens(*m), Catch::Contains("the output head holds 1/" + std::to_string(n) +
                                                              " of the vocabulary"));
  }
  // A vocabulary the ranks do not divide keeps the whole head (replicated, logits broadcast from rank 0).
  Config odd = llama;
  odd.vocab_size = 63;
  CHECK(models::tensor_parallel_config(odd, 2).head_shards == 1);
  const Config gemma3 = test::config_from_meta(test::read_meta(test::fixture("gemma3_model")));
  REQUIRE(gemma3.logits_via_embedding);
  CHECK(models::tensor_parallel_config(gemma3, 2).head_shards == 1);
}

TEST_CASE("Tensor parallel: a stalled rank ends the step on the others with the layer and the collective named",
          "[comm][tp][faults]") {
  const std::string dir = test::fixture("llama2_model");
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  const io::TensorMap full = io::read_safetensors(dir + "/model.safetensors");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Split s(cfg, full, 2, std::chrono::milliseconds(300));
  std::string msg;
  try {
    s.run([&](int r, models::AnyModel& m) {
      if (r == 1) return;  // stalls: never joins the step
      models::ForwardRequest q;
      q.tokens = &tok;
      (void)m.forward(q);
    });
  } catch (const CommError& e) {
    msg = e.what();
  }
  CHECK_THAT(msg, Catch::Contains("decoder.layers_0.attention") && Catch::Contains("all_reduce_sum") &&
                      Catch::Contains("rank(s) 1 did not arrive"));
}

TEST_CASE("Tensor parallel: a rank that fails ends the others' step at once, naming it", "[comm][tp][faults]") {
  const std::string dir = test::fixture("llama2_model");
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  const io::TensorMap full = io::read_safetensors(dir + "/model.safetensors");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Split s(cfg, full, 2);  // a 60 s timeout: the abort, not the timeout, must end rank 0's wait
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> msgs(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      try {
        if (r == 1) throw IoError("[weights] simulated failure on rank 1");
        models::ForwardRequest q;
        q.tokens = &tok;
        (void)s.ranks[0]->forward(q);
      } catch (const std::exception& e) {
        msgs[static_cast<std::size_t>(r)] = e.what();
        s.group->abort(std::string("rank ") + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (auto& t : th) t.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  CHECK_THAT(msgs[0], Catch::Contains("abandoned") && Catch::Contains("rank 1 failed") &&
                          Catch::Contains("simulated failure"));
}

TEST_CASE("Tensor parallel: ranks holding other weights or another config are refused before the first step",
          "[comm][tp][faults]") {
  const std::string dir = test::fixture("llama2_model");
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  const io::TensorMap full = io::read_safetensors(dir + "/model.safetensors");
  const io::TensorMap other = io::read_safetensors(test::fixture("mistral_model") + "/model.safetensors");
  comm::ThreadGroup g(3, std::chrono::seconds(30));
  std::vector<std::string> msgs(3);
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] {
      Config c = cfg;
      if (r == 1) c.set("max_target_length", "32");
      try {
        models::check_ranks_agree(g.rank(r), models::model_fingerprint(r == 2 ? other : full, c), "weights and config");
      } catch (const CommError& e) {
        msgs[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  for (const auto& m : msgs) CHECK_THAT(m, Catch::Contains("rank(s) 1, 2 hold other weights or another config"));
  // The same files and config agree.
  comm::ThreadGroup g2(2);
  std::vector<std::thread> th2;
  std::vector<int> ok(2, 0);
  for (int r = 0; r < 2; ++r) {
    th2.emplace_back([&, r] {
      models::check_ranks_agree(g2.rank(r), models::model_fingerprint(full, cfg), "weights and config");
      ok[static_cast<std::size_t>(r)] = 1;
    });
  }
  for (auto& t : th2) t.join();
  CHECK(ok == std::vector<int>{1, 1});
}

TEST_CASE("Tensor parallel: what does not split is refused by name", "[comm][tp]") {
  const Config llama = test::config_from_meta(test::read_meta(test::fixture("llama2_model")));
  // 4 query heads, 2 kv heads, mlp_dim: 3 ranks divide none of them.
  CHECK_THROWS_WITH(models::tensor_parallel_config(llama, 3), Catch::Contains("num_query_heads = 4 is not divisible by the 3"));
  Config other = llama;  // Gated DeltaNet's heads and conv channels are not split yet
  other.decoder_block = "qwen3_next";
  CHECK_THROWS_WITH(models::tensor_parallel_config(other, 2), Catch::Contains("decoder_block 'qwen3_next' is not split"));
  // Experts split by columns: their hidden size must divide too.
  Config moe = test::config_from_meta(test::read_meta(test::fixture("qwen3_moe_model")));
  CHECK(models::tensor_parallel_config(moe, 2).moe_mlp_dim == moe.moe_mlp_dim / 2);
  Config one = moe;  // one expert: the MoE layer is still built (moe_mlp_dim wide) and its output reduced
  one.num_experts = 1;
  one.num_experts_per_tok = 1;
  CHECK(models::tensor_parallel_config(one, 2).moe_mlp_dim == moe.moe_mlp_dim / 2);
  Config mix = test::config_from_meta(test::read_meta(test::fixture("llama2_model")));
  mix.decoder_block = "mixtral";  // experts mlp_dim wide: an unused moe_mlp_dim is left alone
  mix.num_experts = 4;
  mix.num_experts_per_tok = 2;
  mix.base_moe_mlp_dim = 3;
  mix.derive();
  CHECK(models::tensor_parallel_config(mix, 2).mlp_dim == mix.mlp_dim / 2);
  moe.base_moe_mlp_dim = 6;
  moe.derive();
  CHECK_THROWS_WITH(models::tensor_parallel_config(moe, 4), Catch::Contains("moe_mlp_dim = 6 is not divisible by the 4"));
  Config fused = llama;  // [emb, q heads + 2 kv heads, head_dim]: three pieces per rank (GPT-3's splits)
  fused.set("fused_qkv", "true");
  CHECK_THROWS_WITH(models::tensor_parallel_config(fused, 2), Catch::Contains("fused_qkv") &&
                                                                   Catch::Contains("decoder_block 'llama2'"));
  // A slice the file's tensor does not hold.
  io::TensorMap t;
  t.add("w", AnyTensor::from(Tensor<float, 2>({4, 6})));
  CHECK_THROWS_WITH(models::rank_slice(t, {{"w", {4, 4}}}, 0, 2), Catch::Contains("w: axis 1") &&
                                                                             Catch::Contains("does not split into 2"));
  CHECK_THROWS_WITH(models::rank_slice(t, {{"w", {2, 3}}}, 0, 2), Catch::Contains("more than one axis"));
}

using MeshKeys = std::vector<std::pair<std::string, std::string>>;

TEST_CASE("Tensor x pipeline: each stage's layers split by heads over its ranks match torch and one process",
          "[comm][axes][tp][pp]") {
  const MeshKeys two_by_two = {{"ici_tensor_parallelism", "2"}, {"ici_pipeline_parallelism", "2"}, {"ici_fsdp_parallelism", "1"}};
  check_fixture("llama2_model", Layout::mesh, {4}, two_by_two);  // untied head: split by vocabulary on the last stage
  check_fixture("qwen3_model", Layout::mesh, {4}, two_by_two);   // tied head: whole
  check_fixture("gemma2_model", Layout::mesh, {4}, two_by_two);
  check_fixture("olmo3_model", Layout::mesh, {4}, two_by_two);  // the heads gathered over each stage's ranks
  // 7 layers, sliding and global, on 3 stages (3 + 2 + 2) of 2 ranks each; and 2 stages of 4 ranks (4 query heads,
  // 2 kv heads: each kv head kept by the 2 ranks whose query heads read it).
  check_fixture("gemma3_model", Layout::mesh, {6},
                {{"ici_tensor_parallelism", "2"}, {"ici_pipeline_parallelism", "3"}, {"ici_fsdp_parallelism", "1"}});
  check_fixture("gemma3_model", Layout::mesh, {8},
                {{"ici_tensor_parallelism", "4"}, {"ici_pipeline_parallelism", "2"}, {"ici_fsdp_parallelism", "1"}});
}

TEST_CASE("Expert x pipeline: each stage's experts split over its ranks match torch and one process",
          "[comm][axes][ep][pp]") {
  const MeshKeys two_by_two = {{"ici_expert_parallelism", "2"}, {"ici_pipeline_parallelism", "2"}, {"ici_fsdp_parallelism", "1"}};
  check_fixture("mixtral_model", Layout::mesh, {4}, two_by_two);
  check_fixture("qwen3_moe_model", Layout::mesh, {4}, two_by_two);
  check_fixture("deepseek_model", Layout::mesh, {4}, two_by_two);  // 3 layers (2 + 1): dense first layer, MLA
  check_fixture("gpt_oss_model", Layout::mesh, {4}, two_by_two);
}

TEST_CASE("Tensor x expert (x pipeline): heads and expert columns over one axis, experts over the other, match torch "
          "and one process", "[comm][axes][tp][ep]") {
  const MeshKeys te = {{"ici_tensor_parallelism", "2"}, {"ici_expert_parallelism", "2"}, {"ici_fsdp_parallelism", "1"}};
  check_fixture("mixtral_model", Layout::mesh, {4}, te);
  check_fixture("qwen3_moe_model", Layout::mesh, {4}, te);
  check_fixture("deepseek_model", Layout::mesh, {4}, te);  // MLA's 2 heads over the tensor axis; shared experts too
  check_fixture("gpt_oss_model", Layout::mesh, {4}, te);   // expert output biases added once over both axes
  MeshKeys tep = te;
  tep.emplace_back("ici_pipeline_parallelism", "2");
  check_fixture("qwen3_moe_model", Layout::mesh, {8}, tep);
}

TEST_CASE("Tensor x expert: attention reduced over the tensor ranks, a MoE layer over both groups, the head gathered "
          "over the tensor ranks and broadcast over the expert ranks", "[comm][axes][tp][ep]") {
  const std::string dir = test::fixture("mixtral_model");  // 2 layers, both MoE; 4 experts
  const Config cfg = fixture_config(dir);
  const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto [s, logits] = run_two_axes(cfg, full, tok, "ici_tensor_parallelism", "ici_expert_parallelism");
  // Rank r = tensor r % 2 + 2 x expert r / 2: experts {0, 1} or {2, 3}, each on half of its hidden columns.
  CHECK(s.ranks[3]->param_shapes().at("decoder.layers_0.MoeBlock_0.wi_0") ==
        std::vector<std::int64_t>{cfg.num_experts / 2, cfg.emb_dim, cfg.mlp_dim / 2});
  const std::int64_t M = tok.dim(0) * tok.dim(1), D = cfg.emb_dim, L = cfg.num_decoder_layers;
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const auto& c = *s.counters[static_cast<std::size_t>(r)];
    // Per layer: attention over the tensor group; the MoE over the expert group, then over the tensor group.
    CHECK(c.tally("all_reduce").calls == 3 * L);
    CHECK(c.tally("all_reduce").bytes == 3 * L * M * D * 4);
    CHECK(c.tally("all_gather").calls == 1);  // the vocabulary-split head over the tensor group
    CHECK(c.tally("all_gather").bytes == M * cfg.vocab_size / 2 * 4);
    // Expert rank 0's gathered logits over each expert group: every rank samples from the same bytes.
    CHECK(c.tally("broadcast").calls == 1);
    CHECK(c.tally("broadcast").bytes == M * cfg.vocab_size * 4);
    CHECK(c.tally("send").calls + c.tally("recv").calls == 0);
    CHECK(same_bits(logits[static_cast<std::size_t>(r)], logits[0]));
  }
  test::expect_close(logits[0], test::npy(dir + "/logits.npy"), test::tol::f32_logits, "mixtral tensor x expert");
}

TEST_CASE("Tensor x pipeline: two all-reduces per layer within a stage, one transfer per boundary, logits gathered "
          "then broadcast", "[comm][mesh]") {
  const std::string dir = test::fixture("llama2_model");  // 2 layers: stage 0 layer 0, stage 1 layer 1
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  const io::TensorMap full = io::read_safetensors(dir + "/model.safetensors");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto [s, logits] = run_two_axes(cfg, full, tok, "ici_tensor_parallelism", "ici_pipeline_parallelism");
  // Ranks 0, 1: stage 0 (tensor 0, 1); ranks 2, 3: stage 1. Their groups are sub-groups of the world.
  CHECK(s.ranks[2]->param_shapes().count("decoder.layers_0.mlp.wo.kernel") == 0);
  CHECK(s.ranks[2]->param_shapes().at("decoder.layers_1.mlp.wo.kernel")[0] == cfg.mlp_dim / 2);
  CHECK(s.ranks[0]->param_shapes().count("decoder.logits_dense.kernel") == 0);
  const std::int64_t M = tok.dim(0) * tok.dim(1), D = cfg.emb_dim, V = cfg.vocab_size;
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const auto& c = *s.counters[static_cast<std::size_t>(r)];
    const bool last = r >= 2;
    CHECK(c.tally("all_reduce").calls == 2);  // the stage's one layer, over the stage's two ranks
    CHECK(c.tally("all_reduce").bytes == 2 * M * D * 4);
    CHECK(c.tally("send").calls == (last ? 0 : 1));
    CHECK(c.tally("recv").calls == (last ? 1 : 0));
    CHECK(c.tally((last ? "recv" : "send")).bytes == M * D * 4);
    CHECK(c.tally("all_gather").calls == (last ? 1 : 0));  // the vocabulary-split head, on the last stage
    if (last) CHECK(c.tally("all_gather").bytes == M * V / 2 * 4);
    CHECK(c.tally("broadcast").calls == 1);  // the last stage's logits to the stage before, per tensor coordinate
    CHECK(c.tally("broadcast").bytes == M * V * 4);
    CHECK(same_bits(logits[static_cast<std::size_t>(r)], logits[0]));
  }
  test::expect_close(logits[0], test::npy(dir + "/logits.npy"), test::tol::f32_logits, "llama2 tensor x pipeline");

  // Groups made by hand for a stage split by heads must name the stage's ranks (Groups::stage), which take its
  // logits and its replica check: without them the step is refused before any collective.
  Config plain = test::config_from_meta(test::read_meta(dir));
  const Config local = models::tensor_parallel_config(models::pipeline_parallel_config(plain, 0, 2), 2);
  auto m = models::make_built_any_model(local, {}, MAXTEXT_BLOCKS_BUILT);
  m->init(1);
  comm::ThreadGroup tensor(2), pipeline(2);
  m->set_comm_groups(comm::Groups{&tensor.rank(0), &tensor.rank(0), nullptr, &pipeline.rank(0)});
  CHECK_THROWS_WITH(forward_two_tokens(*m), Catch::Contains("stage 0 is split over 2 ranks") &&
                                                Catch::Contains("no stage group is set"));
}

TEST_CASE("Split models: batched prompts, speculative decoding and a session's turns give one process's tokens",
          "[comm][axes][tp][pp][ep]") {
  // Every rank makes the same calls, so what runs on top of forward passes (several rows of a batch with their own
  // lengths, drafts verified K + 1 at a time and rolled back, a session's cache kept between turns) runs split too.
  struct Case {
    const char* fixture;
    Layout layout;
    int ranks;
    MeshKeys mesh;
  };
  const std::vector<Case> cases = {
      {"llama2_model", Layout::tensor, 2, {}},
      {"llama2_model", Layout::pipeline, 2, {}},
      {"llama2_model", Layout::mesh, 4, {{"ici_tensor_parallelism", "2"}, {"ici_pipeline_parallelism", "2"}, {"ici_fsdp_parallelism", "1"}}},
      {"mixtral_model", Layout::mesh, 4, {{"ici_expert_parallelism", "2"}, {"ici_pipeline_parallelism", "2"}, {"ici_fsdp_parallelism", "1"}}},
  };
  for (const Case& c : cases) {
    const std::string dir = test::fixture(c.fixture);
    const Config cfg = fixture_config(dir);
    const io::TensorMap full = io::load_weights(dir + "/model.safetensors", cfg).tensors;
    models::GenerateOptions g;
    g.max_new_tokens = 12;
    g.sampling.temperature = 0.0;
    const std::vector<std::int32_t> p1 = {1, 2, 3, 1, 2}, p2 = {7, 9}, turn2 = {4, 5, 1};
    models::PromptLookupDrafter lookup;
    auto propose = [&](const std::vector<std::int32_t>& ctx, std::int64_t k) { return lookup.propose(ctx, k); };
    struct Got {
      std::vector<std::vector<std::int32_t>> batch;
      std::vector<std::int32_t> spec, turn_a, turn_b;
    };
    auto run_all = [&](models::AnyModel& m) {
      Got r;
      r.batch = m.generate({p1, p2}, g).tokens;
      r.spec = m.generate_speculative(p1, g, propose, {4}).tokens.at(0);
      auto s = m.new_session(64);
      r.turn_a = s->generate(p1, g).tokens.at(0);
      r.turn_b = s->generate(turn2, g).tokens.at(0);
      return r;
    };
    models::AnyModelOptions o1;
    o1.threads = 1;
    auto single = models::make_built_any_model(cfg, o1, MAXTEXT_BLOCKS_BUILT);
    single->load(full);
    const Got one = run_all(*single);
    CHECK(one.spec == one.batch.at(0));  // speculative decoding keeps greedy's tokens in one process too
    Config split_cfg = cfg;
    for (const auto& [k, v] : c.mesh) split_cfg.set(k, v);
    Split s(split_cfg, full, c.ranks, std::chrono::seconds(60), c.layout);
    std::vector<Got> got(static_cast<std::size_t>(c.ranks));
    s.run([&](int r, models::AnyModel& m) { got[static_cast<std::size_t>(r)] = run_all(m); });
    for (int r = 0; r < c.ranks; ++r) {
      INFO(c.fixture << " on " << c.ranks << " ranks (layout " << static_cast<int>(c.layout) << "), rank " << r);
      const Got& x = got[static_cast<std::size_t>(r)];
      CHECK(x.batch == one.batch);
      CHECK(x.spec == one.spec);
      CHECK(x.turn_a == one.turn_a);
      CHECK(x.turn_b == one.turn_b);
    }
  }
}

TEST_CASE("Communicator::split: sub-groups by color ranked by key, collectives within each, an abort reaching them",
          "[comm][mesh]") {
  comm::ThreadGroup g(4, std::chrono::seconds(20));
  std::vector<std::unique_ptr<comm::Communicator>> sub(4);
  std::vector<float> sums(4);
  on_threads(4, g, [&](int r) {
    // Colors: even and odd ranks; keys reverse the order.
    auto& c = sub[static_cast<std::size_t>(r)];
    c = g.rank(r).split(r % 2, -r, "test split");
    float x = static_cast<float>(r + 1);
    c->all_reduce_sum(&x, 1, "test sum");
    sums[static_cast<std::size_t>(r)] = x;
  });
  CHECK(sub[0]->size() == 2);
  CHECK(sub[0]->rank() == 1);  // key 0 after rank 2's -2
  CHECK(sub[2]->rank() == 0);
  CHECK(sub[3]->rank() == 0);
  CHECK(sums == std::vector<float>{4, 6, 4, 6});
  comm::Local one;
  CHECK(one.split(0, 0, "local")->size() == 1);
  CHECK_THROWS_WITH(one.split(-1, 0, "a bad color"), Catch::Contains("a bad color: split with color -1"));
  // A rank that fails aborts the world, and the sub-group its partner waits in.
  std::string msg;
  std::thread waiter([&] {
    try {
      float x = 1;
      sub[1]->all_reduce_sum(&x, 1, "decoder.layers_0.mlp: all_reduce");
    } catch (const CommError& e) {
      msg = e.what();
    }
  });
  g.abort("rank 3 failed: out of memory");
  waiter.join();
  CHECK_THAT(msg, Catch::Contains("decoder.layers_0.mlp: all_reduce") && Catch::Contains("rank 3 failed: out of memory"));
}

TEST_CASE("Mesh: MaxText's ici / dcn keys, -1 filled, tensor ranks fastest, unused axes refused by name", "[comm][mesh]") {
  Config c;
  c.set("ici_tensor_parallelism", "2");
  auto m = comm::Mesh::from_config(c, 2);  // ici_fsdp_parallelism -1 (base.yml) fills to 1
  CHECK(m.tensor == 2);
  CHECK(m.size() == 2);
  CHECK_THROWS_WITH(comm::Mesh::from_config(c, 1), Catch::Contains("ici_*_parallelism keys set multiply to 2") &&
                                                     Catch::Contains("launch it with mpirun -n 2"));
  CHECK_THROWS_WITH(comm::Mesh::from_config(c, 4), Catch::Contains("fsdp parallelism = 2") &&
                                                     Catch::Contains("-1 takes the ranks the others leave"));
  Config sp;
  sp.set("ici_sequence_parallelism", "2");
  CHECK_THROWS_WITH(comm::Mesh::from_config(sp, 2), Catch::Contains("ici_sequence_parallelism = 2: it splits training"));
  Config ar;
  ar.set("ici_autoregressive_parallelism", "2");
  ar.set("ici_fsdp_parallelism", "1");
  ar.set("ici_expert_parallelism", "-1");
  m = comm::Mesh::from_config(ar, 8);
  CHECK(m.tensor == 2);
  CHECK(m.expert == 4);
  CHECK(m.coords(5).tensor == 1);
  CHECK(m.coords(5).expert == 2);
  Config two;
  two.set("ici_tensor_parallelism", "-1");
  CHECK_THROWS_WITH(comm::Mesh::from_config(two, 2), Catch::Contains("ici_fsdp_parallelism and ici_tensor_parallelism are both -1"));
  Config dcn;
  dcn.set("num_slices", "2");
  dcn.set("ici_tensor_parallelism", "2");
  dcn.set("dcn_pipeline_parallelism", "2");
  m = comm::Mesh::from_config(dcn, 4);
  CHECK(m.tensor == 2);
  CHECK(m.pipeline == 2);
  CHECK(m.coords(3).pipeline == 1);
  Config bad;
  bad.set("ici_tensor_parallelism", "zwei");
  CHECK_THROWS_WITH(comm::Mesh::from_config(bad, 2), Catch::Contains("ici_tensor_parallelism: expected -1 or an integer"));
  Config one;
  CHECK(comm::Mesh::from_config(one, 1).size() == 1);
}
