// Tensor and expert parallelism on a backend whose memory the host cannot address: the CUDA backend
// (tests/cuda/test_cuda_tensor_parallel.cu, skips without a GPU) and the simulated device
// (test_tensor_parallel_simdevice, every CTest run). 2 and 4 ranks that are threads of this process (comm/threads.hpp)
// share the device, each holding its share of the fixture model there; their all-reduces go through host copies
// (layers::Context::all_reduce). The split logits against the torch reference (logits.npy, from tests/reference/) and
// against the same model unsplit on the device, every rank's logits alike, incremental decoding equal to the full
// forward, two all-reduces per layer.
// On the simulated device also a communicator that takes device memory (as comm::Nccl does): Context hands it the
// rows where they lie, no host copy, and the logits are bit for bit those of the host-copy path. The NCCL
// communicator itself: tests/cuda/test_cuda_nccl.cu.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
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

#if defined(MAXTEXT_TEST_BACKEND_SIMDEVICE)
/// A communicator that takes device memory, as comm::Nccl does: it reads and writes the simulated device's rows
/// itself (the host may touch them only inside an Unlocked scope) and counts the calls that came as device pointers.
class DeviceRowsComm final : public comm::Communicator {
 public:
  DeviceRowsComm(comm::Communicator& inner, test::SimDeviceMemory& sim) : inner_(inner), sim_(sim) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  bool device_memory() const override { return true; }
  void all_reduce_sum(float* data, std::size_t n, std::string_view what) override {
    if (!sim_.contains(data, n * sizeof(float))) return inner_.all_reduce_sum(data, n, what);
    ++device_calls;
    std::vector<float> host(n);
    {
      test::SimDeviceMemory::Unlocked u(sim_);
      std::memcpy(host.data(), data, n * sizeof(float));
    }
    inner_.all_reduce_sum(host.data(), n, what);
    test::SimDeviceMemory::Unlocked u(sim_);
    std::memcpy(data, host.data(), n * sizeof(float));
  }
  void all_gather(const void* l, std::size_t b, void* a, std::string_view w) override { inner_.all_gather(l, b, a, w); }
  void broadcast(void* d, std::size_t b, int r, std::string_view w) override { inner_.broadcast(d, b, r, w); }
  void send(const void* d, std::size_t b, int to, std::string_view w) override { inner_.send(d, b, to, w); }
  void recv(void* d, std::size_t b, int from, std::string_view w) override { inner_.recv(d, b, from, w); }
  void barrier(std::string_view w) override { inner_.barrier(w); }
  std::unique_ptr<comm::Communicator> split(int color, int key, std::string_view w) override {
    return inner_.split(color, key, w);  // not used: these tests split by heads only
  }
  std::string describe() const override { return inner_.describe() + " (device rows)"; }
  std::int64_t device_calls = 0;

 private:
  comm::Communicator& inner_;
  test::SimDeviceMemory& sim_;
};
#endif

struct SplitRun {
  std::vector<Tensor<float, 3>> logits, inc;  ///< per rank: the full forward, and prefill 4 + single steps
  std::vector<std::int64_t> reduces;          ///< per rank: all-reduces of the full forward
  std::int64_t device_calls = 0;              ///< rank 0's all-reduces of the full forward handed over as device rows
};

/// `full` split over n thread ranks sharing the device; device_rows: each rank's communicator takes device memory.
template <class Model>
SplitRun run_split(const io::TensorMap& full, const Config& cfg, Layout layout, int n,
                   const Tensor<std::int32_t, 2>& tok, bool device_rows = false) {
  comm::ThreadGroup group(n, std::chrono::seconds(120));
  std::vector<std::unique_ptr<comm::Counting>> counters;
  std::vector<std::unique_ptr<comm::Communicator>> wrappers;
  std::vector<std::unique_ptr<Model>> ranks;
  for (int r = 0; r < n; ++r) {
    const Config local = layout == Layout::tensor ? models::tensor_parallel_config(cfg, n)
                                                  : models::expert_parallel_config(cfg, r, n);
    auto m = std::make_unique<Model>(local);
    m->load(models::rank_slice(full, m->param_shapes(), r, n));
    comm::Communicator* inner = &group.rank(r);
#if defined(MAXTEXT_TEST_BACKEND_SIMDEVICE)
    if (device_rows) {
      wrappers.push_back(std::make_unique<DeviceRowsComm>(*inner, m->backend().sim()));
      inner = wrappers.back().get();
    }
#else
    REQUIRE_FALSE(device_rows);
#endif
    counters.push_back(std::make_unique<comm::Counting>(*inner));
    comm::Communicator* c = counters.back().get();
    m->set_comm_groups(layout == Layout::tensor ? comm::Groups{c, c, nullptr} : comm::Groups{c, nullptr, c});
    m->set_replica_check(true);  // the residual stream compared across the ranks after every layer
    ranks.push_back(std::move(m));
  }
  SplitRun out;
  out.logits.resize(static_cast<std::size_t>(n));
  out.inc.resize(static_cast<std::size_t>(n));
  out.reduces.resize(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> err(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const auto u = static_cast<std::size_t>(r);
      try {
        out.logits[u] = ranks[u]->forward(tok);
        out.reduces[u] = counters[u]->tally("all_reduce").calls;
#if defined(MAXTEXT_TEST_BACKEND_SIMDEVICE)
        if (device_rows && r == 0) out.device_calls = static_cast<DeviceRowsComm*>(wrappers[0].get())->device_calls;
#endif
        out.inc[u] = incremental(*ranks[u], tok, cfg.vocab_size);
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
  return out;
}

/// The fixture `name` on one device, then split over 2 and 4 thread ranks sharing it.
template <class Model>
void check_split(const std::string& name, Layout layout, const io::TensorMap& full, const Config& cfg) {
  const std::string dir = test::fixtures_dir() + "/" + name;
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const AnyTensor torch_logits = test::npy(dir + "/logits.npy");

  Model single(cfg);
  single.load(full);
  const Tensor<float, 3> one = single.forward(tok);
  test::expect_close(one, torch_logits, test::tol::f32_logits, name + ".one device");

  // Tensor parallelism: attention out and MLP wo per layer; experts: one per MoE layer (every layer here).
  const std::int64_t reduces = (layout == Layout::tensor ? 2 : 1) * cfg.num_decoder_layers;
  for (const int n : {2, 4}) {
    INFO(name << " on " << n << " ranks");
    const SplitRun run = run_split<Model>(full, cfg, layout, n, tok);
    // The partial products are the f32 terms of one device's products summed in another order (per rank, then across
    // ranks): ~1e-6 on logits of magnitude ~3, as on the CPU (tests/comm/test_tensor_parallel.cpp).
    test::expect_close(run.logits[0], torch_logits, test::tol::f32_logits, name + ".split");
    test::expect_close(run.logits[0], AnyTensor::from(one), {1e-5, 1e-5}, name + ".split vs one device");
    test::expect_close(run.inc[0], AnyTensor::from(run.logits[0]), test::tol::decode_step, name + ".incremental");
    CHECK(run.reduces[0] == reduces);
    for (std::size_t r = 1; r < run.logits.size(); ++r) {
      CHECK(same_bits(run.logits[r], run.logits[0]));
      CHECK(same_bits(run.inc[r], run.inc[0]));
    }
#if defined(MAXTEXT_TEST_BACKEND_SIMDEVICE)
    // The same split with a communicator that takes device memory: every all-reduce came as device rows (no host
    // copy in Context), and the sums are the same f32 additions in the same order, so the logits are the same bits.
    const SplitRun dev = run_split<Model>(full, cfg, layout, n, tok, true);
    CHECK(dev.device_calls == reduces);
    CHECK(same_bits(dev.logits[0], run.logits[0]));
    CHECK(same_bits(dev.inc[0], run.inc[0]));
#endif
  }
}

}  // namespace

TEST_CASE("Device tensor parallel: Llama-2 on 2 and 4 ranks sharing one device equals one device",
          "[comm][tp][llama2]") {
  const std::string dir = test::fixtures_dir() + "/llama2_model";
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  using M = models::Transformer<P32, layers::LlamaDecoderLayer>;
  check_split<M>("llama2_model", Layout::tensor, io::read_safetensors(dir + "/model.safetensors"), cfg);
}

TEST_CASE("Device tensor parallel: Qwen3 (per-head qk norm) on 2 and 4 ranks sharing one device",
          "[comm][tp][qwen3]") {
  const std::string dir = test::fixtures_dir() + "/qwen3_model";
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  using M = models::Transformer<P32, layers::Qwen3DecoderLayer>;
  check_split<M>("qwen3_model", Layout::tensor, io::read_safetensors(dir + "/model.safetensors"), cfg);
}

TEST_CASE("Device expert parallel: Mixtral's 4 experts on 2 and 4 ranks sharing one device",
          "[comm][ep][mixtral]") {
  const std::string dir = test::fixtures_dir() + "/mixtral_model";
  const Config cfg = io::load_config(dir + "/config.yml");
  check_split<models::Transformer<P32, layers::MixtralDecoderLayer>>(
      "mixtral_model", Layout::expert, io::load_weights(dir + "/model.safetensors", cfg).tensors, cfg);
}

TEST_CASE("Device tensor parallel: Mixtral's experts split by columns on 2 and 4 ranks sharing one device",
          "[comm][tp][moe][mixtral]") {
  // Each expert's partial product in f32 on the device, weighted into the accumulator, summed over the ranks.
  const std::string dir = test::fixtures_dir() + "/mixtral_model";
  const Config cfg = io::load_config(dir + "/config.yml");
  check_split<models::Transformer<P32, layers::MixtralDecoderLayer>>(
      "mixtral_model", Layout::tensor, io::load_weights(dir + "/model.safetensors", cfg).tensors, cfg);
}
