// The NCCL communicator (comm/nccl.cuh). One rank: every collective on device and on host memory, and the faults it
// must name. Two processes sharing the one GPU: this program starts two copies of itself, each claiming its own host
// for NCCL (NCCL_HOSTID; NCCL refuses two ranks of one host on one GPU), so that NCCL runs a real two-rank clique over
// its network transport; each copy holds half of the Llama-2 fixture's heads and MLP columns, and rank 0 compares the
// split logits with the same model on one GPU and with the torch reference. Skips (exit 77) without a GPU.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include <catch2/catch.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/nccl.cuh"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/models/parallel.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/family_fixture.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

extern char** environ;

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using Llama = models::Transformer<P32, layers::LlamaDecoderLayer>;

namespace {

void need_gpu() {
  if (!cuda::available()) test::skip("no usable CUDA device (cudaGetDeviceCount failed or found none)");
}

std::vector<float> to_host(const float* d, std::size_t n) {
  std::vector<float> h(n);
  REQUIRE(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

std::string hex(const comm::Nccl::Id& id) {
  std::string s;
  for (std::size_t i = 0; i < sizeof id.internal; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(id.internal[i]));
    s += b;
  }
  return s;
}

comm::Nccl::Id from_hex(const std::string& s) {
  comm::Nccl::Id id{};
  REQUIRE(s.size() == 2 * sizeof id.internal);
  for (std::size_t i = 0; i < sizeof id.internal; ++i) {
    id.internal[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  }
  return id;
}

/// One copy of the two-process test: rank `rank` of the clique `id`.
void two_process_rank(int rank, const comm::Nccl::Id& id) {
  comm::Nccl nccl(id, rank, 2, 0, std::chrono::seconds(120));
  CHECK(nccl.describe() == "NCCL, rank " + std::to_string(rank) + " of 2 on CUDA device 0");

  // Collectives between the two processes, on device and host memory.
  std::vector<float> host = {1.0f + static_cast<float>(rank), 10.0f, -0.5f};
  nccl.all_reduce_sum(host.data(), host.size(), "test: host all_reduce");
  CHECK(host == std::vector<float>{3.0f, 20.0f, -1.0f});
  float* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, 4 * sizeof(float)) == cudaSuccess);
  const float mine[4] = {static_cast<float>(rank), 2.0f, 0.25f, static_cast<float>(10 * rank)};
  REQUIRE(cudaMemcpy(dev, mine, sizeof mine, cudaMemcpyHostToDevice) == cudaSuccess);
  nccl.all_reduce_sum(dev, 4, "test: device all_reduce");
  CHECK(to_host(dev, 4) == std::vector<float>{1.0f, 4.0f, 0.5f, 10.0f});
  REQUIRE(cudaFree(dev) == cudaSuccess);
  const std::int64_t tag = 100 + rank;
  std::int64_t both[2] = {0, 0};
  nccl.all_gather(&tag, sizeof tag, both, "test: all_gather");
  CHECK((both[0] == 100 && both[1] == 101));
  std::int64_t from0 = rank == 0 ? 42 : -1;
  nccl.broadcast(&from0, sizeof from0, 0, "test: broadcast");
  CHECK(from0 == 42);
  std::int32_t p2p = rank == 0 ? 7 : 0;
  if (rank == 0) nccl.send(&p2p, sizeof p2p, 1, "test: send");
  if (rank == 1) nccl.recv(&p2p, sizeof p2p, 0, "test: recv");
  CHECK(p2p == 7);
  nccl.barrier("test: barrier");

  // Llama-2 split by heads and MLP columns: the row-parallel products reduced by NCCL on the device.
  const std::string dir = test::fixtures_dir() + "/llama2_model";
  const Config cfg = test::config_from_meta(test::read_meta(dir));
  const io::TensorMap full = io::read_safetensors(dir + "/model.safetensors");
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Tensor<float, 3> one;
  if (rank == 0) {
    Llama single(cfg);
    single.load(full);
    one = single.forward(tok);
  }
  Llama m(models::tensor_parallel_config(cfg, 2));
  m.load(models::rank_slice(full, m.param_shapes(), rank, 2));
  comm::Counting counted(nccl);
  CHECK(counted.device_memory());
  m.set_communicator(&counted);
  m.set_replica_check(true);  // the residual stream's hashes all-gathered through NCCL after every layer
  const Tensor<float, 3> split = m.forward(tok);
  CHECK(counted.tally("all_reduce").calls == 2 * cfg.num_decoder_layers);
  CHECK(counted.tally("broadcast").calls == 0);  // the head split by vocabulary: the logits are all-gathered
  // Both ranks hold rank 0's logits: compare bit for bit through NCCL too.
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(split.data());
  for (std::size_t i = 0; i < static_cast<std::size_t>(split.size()) * sizeof(float); ++i) {
    h = (h ^ b[i]) * 1099511628211ull;
  }
  std::uint64_t hashes[2] = {0, 0};
  nccl.all_gather(&h, sizeof h, hashes, "test: logits hashes");
  CHECK(hashes[0] == hashes[1]);
  if (rank == 0) {
    // The same bounds as the thread ranks' split (test_cuda_tensor_parallel.cu): f32 terms summed in another order.
    test::expect_close(split, test::npy(dir + "/logits.npy"), test::tol::f32_logits, "llama2 split over NCCL");
    test::expect_close(split, AnyTensor::from(one), {1e-5, 1e-5}, "llama2 split over NCCL vs one GPU");
  }
}

}  // namespace

TEST_CASE("NCCL, one rank: every collective on device and host memory, bad peers and devices refused by name",
          "[cuda][nccl]") {
  need_gpu();
  comm::Nccl nccl(comm::Nccl::new_id(), 0, 1, 0, std::chrono::seconds(60));
  CHECK(nccl.size() == 1);
  CHECK(nccl.device_memory());
  float* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, 3 * sizeof(float)) == cudaSuccess);
  const float v[3] = {1.5f, -2.0f, 3.25f};
  REQUIRE(cudaMemcpy(dev, v, sizeof v, cudaMemcpyHostToDevice) == cudaSuccess);
  nccl.all_reduce_sum(dev, 3, "test: device all_reduce");
  CHECK(to_host(dev, 3) == std::vector<float>{1.5f, -2.0f, 3.25f});
  std::vector<float> host = {4.0f, 5.0f};
  nccl.all_reduce_sum(host.data(), 2, "test: host all_reduce");
  CHECK(host == std::vector<float>{4.0f, 5.0f});
  std::uint32_t mine = 0xabcdef01u, all = 0;
  nccl.all_gather(&mine, sizeof mine, &all, "test: all_gather");
  CHECK(all == mine);
  nccl.broadcast(dev, 3 * sizeof(float), 0, "test: device broadcast");
  CHECK(to_host(dev, 3) == std::vector<float>{1.5f, -2.0f, 3.25f});
  nccl.barrier("test: barrier");
  REQUIRE(cudaFree(dev) == cudaSuccess);
  CHECK_THROWS_WITH(nccl.send(&mine, sizeof mine, 0, "decoder.layers_1: send"),
                    Catch::Contains("decoder.layers_1: send") && Catch::Contains("(itself)"));
  CHECK_THROWS_WITH(nccl.broadcast(&mine, sizeof mine, 3, "logits"),
                    Catch::Contains("logits: broadcast with rank 3 of 1"));
  CHECK_THROWS_AS(comm::Nccl(comm::Nccl::new_id(), 0, 1, cuda::device_count() + 3), DeviceError);
}

TEST_CASE("NCCL, two processes sharing the GPU: Llama-2 split by heads equals one GPU and torch",
          "[cuda][nccl][nccl_two_processes]") {
  if (const char* r = std::getenv("MAXTEXT_NCCL_TEST_RANK")) {  // one of the two copies started below
    two_process_rank(std::atoi(r), from_hex(std::getenv("MAXTEXT_NCCL_TEST_ID")));
    return;
  }
  need_gpu();
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);  // both copies and this process's bootstrap answer on loopback
  const comm::Nccl::Id id = comm::Nccl::new_id();  // this process answers the ranks' first contact: it waits below
  const std::string self = "/proc/self/exe";
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
    env_s.push_back("MAXTEXT_NCCL_TEST_RANK=" + std::to_string(r));
    env_s.push_back("MAXTEXT_NCCL_TEST_ID=" + hex(id));
    env_s.push_back("NCCL_HOSTID=maxtext-nccl-test-rank-" + std::to_string(r));
    std::vector<char*> env;
    for (auto& s : env_s) env.push_back(s.data());
    env.push_back(nullptr);
    std::string exe = self, spec = "[nccl_two_processes]";
    char* argv[] = {exe.data(), spec.data(), nullptr};
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, env.data()) == 0);
    pids.push_back(pid);
  }
  // Each copy ends by itself (its collectives fail after 120 s); the deadline here only guards against a hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  std::vector<int> codes(pids.size(), -1);
  for (std::size_t done = 0; done < pids.size();) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        ++done;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (codes[i] == -1) kill(pids[i], SIGKILL);
      }
      FAIL("the two NCCL ranks did not finish in 300 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO("exit codes of the two ranks (Catch's output of each is above)");
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}
