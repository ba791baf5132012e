// The simulated device (tests/support/device_sim.hpp) must catch what it exists to catch, or the GPT-3 tests that
// run on it (test_gpt3_simdevice) prove nothing: a host read of backend memory kills the process with SIGSEGV,
// host memory handed to an operation and a copy declared in the wrong direction raise ArgumentError; and the
// host-only bf16_rounded_copy that Transformer used to call on device tables is one such host read.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include <catch2/catch.hpp>

#include "maxtext/layers/embeddings.hpp"
#include "maxtext/layers/params.hpp"
#include "support/device_sim.hpp"

using namespace maxtext;

namespace {
/// Run f in a child process: true when it faulted (killed by SIGSEGV/SIGBUS, or stopped by a sanitizer's fault
/// handler, which exits non-zero) instead of returning normally.
bool faults(const std::function<void()>& f) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGSEGV, SIG_DFL);  // die quietly: no Catch report from the child
    ::signal(SIGBUS, SIG_DFL);
    f();
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS;
  return WIFEXITED(status) && WEXITSTATUS(status) != 0;
}
}  // namespace

TEST_CASE("Simulated device memory faults on host access and works through the backend", "[backend][simdevice]") {
  test::SimDeviceBackend be;
  Tensor<float, 1> h({4});
  for (int i = 0; i < 4; ++i) h(i) = static_cast<float>(i + 1);
  const Tensor<float, 1> d = layers::upload(be, h);
  CHECK_FALSE(d.host_accessible());
  CHECK(be.sim().contains(d.data(), 16));
  // Reading or writing a device buffer from host code is fatal ...
  CHECK(faults([&] { std::printf("%f\n", static_cast<double>(d.data()[1])); }));
  CHECK(faults([&] { d.data()[0] = 5.0f; }));
  CHECK_FALSE(faults([] {}));  // the harness itself
  // ... while the backend's copies and operations reach it.
  const Tensor<float, 1> back = layers::download(be, d);
  CHECK(back(3) == 4.0f);
  Tensor<float, 2> y({1, 4}, be.memory());
  const View<const float, 2> d2(d.data(), {1, 4});
  be.add(d2, d2, y.view());
  CHECK(layers::download(be, y)(0, 2) == 6.0f);
}

TEST_CASE("Simulated device rejects host operands and mislabelled copies", "[backend][simdevice]") {
  test::SimDeviceBackend be;
  Tensor<float, 2> host_x = Tensor<float, 2>::full({2, 3}, 1.0f);
  Tensor<float, 2> dev_y({2, 3}, be.memory());
  CHECK_THROWS_WITH(be.add(host_x.cview(), host_x.cview(), dev_y.view()),
                    Catch::Contains("add: an operand points to host memory"));
  CHECK_THROWS_WITH(be.copy(dev_y.data(), host_x.data(), 24, CopyKind::device_to_device),
                    Catch::Contains("declared device_to_device but the destination is in device memory and the source in host"));
  CHECK_NOTHROW(be.copy(dev_y.data(), host_x.data(), 24, CopyKind::host_to_device));
}

TEST_CASE("A device embedding table is rounded through the backend, not dereferenced", "[backend][simdevice]") {
  test::SimDeviceBackend be;
  Matrix<float> m;
  m.rows = 2;
  m.cols = 2;
  Tensor<float, 2> t({2, 2});
  t(0, 0) = 1.0f + 1.0f / 1024.0f;  // not a bf16 value: rounds to 1
  t(0, 1) = 3.0f;
  t(1, 0) = -2.0f;
  t(1, 1) = 0.5f;
  m.data = layers::upload(be, t);
  CHECK(faults([&] { (void)layers::bf16_rounded_copy(m); }));  // the host-only form
  const Matrix<float> r = layers::bf16_rounded_copy(be, m);
  CHECK_FALSE(r.data.host_accessible());
  const Tensor<float, 2> rh = layers::download(be, r.data);
  CHECK(rh(0, 0) == 1.0f);
  CHECK(rh(0, 1) == 3.0f);
}
