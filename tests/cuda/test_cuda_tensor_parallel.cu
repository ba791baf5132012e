// Tensor and expert parallelism on the CUDA backend, without NCCL: 2 and 4 ranks that are threads of this process
// (comm/threads.hpp) share one GPU, each holding its share of the fixture model on the device; their all-reduces go
// through host copies (layers::Context::all_reduce). The split logits against the torch reference (logits.npy, from
// tests/reference/) and against the same model on one GPU, every rank's logits alike, incremental decoding equal to
// the full forward, and two all-reduces per layer. Skips (exit 77) without a GPU. The NCCL communicator:
// test_cuda_nccl.cu.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/threads.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/mistral/mixtral.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/parallel.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/family_fixture.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;

namespace {

enum class Layout { tensor, expert };

Tensor<std::int32_t, 2> cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({t.dim(0), n});
  for (std::int64_t b = 0; b < t.dim(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(b, c0 + i);
  }
  return s;
}

bool same_bits(const Tensor<float, 3>& a, const Tensor<float, 3>& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

/// Prefill 4 tokens, then one per step: the logits of every position, as the full forward gives them.
template <class Model>
Tensor<float, 3> incremental(Model& m, const Tensor<std::int32_t, 2>& tok, std::int64_t vocab) {
  const std::int64_t T = tok.dim(1);
  auto cache = m.make_cache(tok.dim(0), T);
  Tensor<float, 3> out({tok.dim(0), T, vocab});
  for (std::int64_t t0 = 0; t0 < T;) {
    const std::int64_t len = t0 == 0 ? 4 : 1;
    const auto l = m.forward(cols(tok, t0, len), cache);
    for (std::int64_t b = 0; b < tok.dim(0); ++b) {
      for (std::int64_t t = 0; t < len; ++t) {
        std::memcpy(&out(b, t0 + t, 0), &l(b, t, 0), static_cast<std::size_t>(vocab) * sizeof(float));
      }
    }
    t0 += len;
  }
  return out;
}

/// The fixture `name` on one GPU, then split over 2 and 4 thread ranks sharing it.
template <class Model>
void check_split(const std::string& name, Layout layout, io::TensorMap full, const Config& cfg) {
  const std::string dir = test::fixtures_dir() + "/" + name;
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const AnyTensor torch_logits = test::npy(dir + "/logits.npy");

  Model single(cfg);
  single.load(full);
  const Tensor<float, 3> one = single.forward(tok);
  test::expect_close(one, torch_logits, test::tol::f32_logits, name + ".one GPU");

  for (const int n : {2, 4}) {
    INFO(name << " on " << n << " ranks");
    comm::ThreadGroup group(n, std::chrono::seconds(120));
    std::vector<std::unique_ptr<comm::Counting>> counters;
    std::vector<std::unique_ptr<Model>> ranks;
    for (int r = 0; r < n; ++r) {
      const Config local = layout == Layout::tensor ? models::tensor_parallel_config(cfg, n)
                                                    : models::expert_parallel_config(cfg, r, n);
      auto m = std::make_unique<Model>(local);
      m->load(models::rank_slice(full, m->param_shapes(), r, n));
      counters.push_back(std::make_unique<comm::Counting>(group.rank(r)));
      comm::Communicator* c = counters.back().get();
      m->set_comm_groups(layout == Layout::tensor ? comm::Groups{c, c, nullptr} : comm::Groups{c, nullptr, c});
      m->set_replica_check(true);  // the residual stream compared across the ranks after every layer
      ranks.push_back(std::move(m));
    }
    std::vector<Tensor<float, 3>> logits(static_cast<std::size_t>(n)), inc(static_cast<std::size_t>(n));
    std::vector<std::int64_t> reduces(static_cast<std::size_t>(n));
    std::vector<std::exception_ptr> err(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        const auto u = static_cast<std::size_t>(r);
        try {
          logits[u] = ranks[u]->forward(tok);
          reduces[u] = counters[u]->tally("all_reduce").calls;
          inc[u] = incremental(*ranks[u], tok, cfg.vocab_size);
        } catch (const std::exception& e) {
          err[u] = std::current_exception();
          group.abort("rank " + std::to_string(r) + " failed: " + e.what());
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : err) {
      if (e) std::rethrow_exception(e);
    }
    // The partial products are the f32 terms of one GPU's products summed in another order (per rank, then across
    // ranks): ~1e-6 on logits of magnitude ~3, as on the CPU (tests/comm/test_tensor_parallel.cpp).
    test::expect_close(logits[0], torch_logits, test::tol::f32_logits, name + ".split");
    test::expect_close(logits[0], AnyTensor::from(one), {1e-5, 1e-5}, name + ".split vs one GPU");
    test::expect_close(inc[0], AnyTensor::from(logits[0]), test::tol::decode_step, name + ".incremental");
    // Tensor parallelism: attention out and MLP wo per layer; experts: one per MoE layer (every layer here).
    const std::int64_t per_layer = layout == Layout::tensor ? 2 : 1;
    CHECK(reduces[0] == per_layer * cfg.num_decoder_layers);
    for (int r = 1; r < n; ++r) {
      CHECK(same_bits(logits[static_cast<std::size_t>(r)], logits[0]));
      CHECK(same_bits(inc[static_cast<std::size_t>(r)], inc[0]));
    }
  }
}

}  // namespace

TEST_CASE("CUDA tensor parallel: Llama-2 on 2 and 4 ranks sharing one GPU by host copies equals one GPU",
          "[cuda][comm][tp][llama2]") {
  const std::string dir = test::fixtures_dir() + "/llama2_model";
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  check_split<models::Transformer<P32, layers::LlamaDecoderLayer>>("llama2_model", Layout::tensor,
                                                                   io::read_safetensors(dir + "/model.safetensors"), cfg);
}

TEST_CASE("CUDA tensor parallel: Qwen3 (per-head qk norm) on 2 and 4 ranks sharing one GPU equals one GPU",
          "[cuda][comm][tp][qwen3]") {
  const std::string dir = test::fixtures_dir() + "/qwen3_model";
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  check_split<models::Transformer<P32, layers::Qwen3DecoderLayer>>("qwen3_model", Layout::tensor,
                                                                   io::read_safetensors(dir + "/model.safetensors"), cfg);
}

TEST_CASE("CUDA expert parallel: Mixtral's 4 experts on 2 and 4 ranks sharing one GPU equals one GPU",
          "[cuda][comm][ep][mixtral]") {
  const std::string dir = test::fixtures_dir() + "/mixtral_model";
  const Config cfg = io::load_config(dir + "/config.yml");
  check_split<models::Transformer<P32, layers::MixtralDecoderLayer>>(
      "mixtral_model", Layout::expert, io::load_weights(dir + "/model.safetensors", cfg).tensors, cfg);
}
