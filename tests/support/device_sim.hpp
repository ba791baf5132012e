// tests/support/device_sim.hpp: a test double for a backend whose memory the host cannot touch. The reference
// backend's kernels run on "device" buffers that are mapped PROT_NONE except while a backend operation runs, so a
// layer or model that dereferences backend memory on the host faults (and the SIGSEGV handler names the buffer),
// and every operation checks that its tensor operands live in device memory and that copies name the right
// direction. Runs the same layer and model tests as the CPU backend (tests/CMakeLists.txt: *_simdevice programs).
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::test {

/// Page-granular buffers, inaccessible to the host except inside SimDeviceMemory::Unlocked scopes.
class SimDeviceMemory final : public MemoryResource {
 public:
  SimDeviceMemory() { install_handler(); }
  ~SimDeviceMemory() override = default;

  void* allocate(std::size_t bytes) override {
    const std::size_t size = round_pages(bytes == 0 ? 1 : bytes);
    void* p = ::mmap(nullptr, size, unlocked_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MAXTEXT_CHECK(p != MAP_FAILED, DeviceError, "[sim device] mmap of ", size, " bytes failed");
    std::lock_guard<std::mutex> g(mu_);
    regions_[reinterpret_cast<std::uintptr_t>(p)] = size;
    std::lock_guard<std::mutex> r(registry_mutex());  // instances on several threads (thread ranks) share it
    registry().insert({reinterpret_cast<std::uintptr_t>(p), size});
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = regions_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == regions_.end()) return;
    ::munmap(p, it->second);
    std::lock_guard<std::mutex> r(registry_mutex());
    registry().erase(it->first);
    regions_.erase(it);
  }
  bool host_accessible() const override { return false; }

  /// True when [p, p + bytes) lies inside one device buffer.
  bool contains(const void* p, std::size_t bytes = 1) const {
    std::lock_guard<std::mutex> g(mu_);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = regions_.upper_bound(a);
    if (it == regions_.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
  }
  std::size_t buffers() const {
    std::lock_guard<std::mutex> g(mu_);
    return regions_.size();
  }

  /// Device buffers readable and writable for the lifetime of the guard (the simulated kernel launch).
  class Unlocked {
   public:
    explicit Unlocked(SimDeviceMemory& m) : m_(m) {
      if (m_.unlocked_++ == 0) m_.protect(PROT_READ | PROT_WRITE);
    }
    ~Unlocked() {
      if (--m_.unlocked_ == 0) m_.protect(PROT_NONE);
    }
    Unlocked(const Unlocked&) = delete;
    Unlocked& operator=(const Unlocked&) = delete;

   private:
    SimDeviceMemory& m_;
  };

 private:
  static std::size_t round_pages(std::size_t b) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (b + page - 1) / page * page;
  }
  void protect(int prot) {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [addr, size] : regions_) ::mprotect(reinterpret_cast<void*>(addr), size, prot);
  }

  // Every live buffer of every instance, for the fault handler (looked up without locking: the handler only reads,
  // and a fault ends the process). Changes hold registry_mutex(): instances may live on several threads.
  static std::map<std::uintptr_t, std::size_t>& registry() {
    static std::map<std::uintptr_t, std::size_t> r;
    return r;
  }
  static std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
  }
  static void on_fault(int sig, siginfo_t* info, void*) {
    const auto a = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (const auto& [base, size] : registry()) {
      if (a >= base && a < base + size) {
        char msg[200];
        const int n = std::snprintf(msg, sizeof msg,
                                    "\n[sim device] host code dereferenced simulated device memory at %p (buffer of %zu "
                                    "bytes): a layer or model reads backend memory without backend.copy()\n",
                                    info->si_addr, size);
        if (n > 0) (void)!::write(2, msg, static_cast<std::size_t>(n));
        break;
      }
    }
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
  static void install_handler() {
    static const bool once = [] {
      struct sigaction sa;
      std::memset(&sa, 0, sizeof sa);
      sa.sa_sigaction = &SimDeviceMemory::on_fault;
      sa.sa_flags = SA_SIGINFO;
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGSEGV, &sa, nullptr);
      ::sigaction(SIGBUS, &sa, nullptr);
      return true;
    }();
    (void)once;
  }

  mutable std::mutex mu_;
  std::map<std::uintptr_t, std::size_t> regions_;
  int unlocked_ = 0;
};

/// The reference backend behind a simulated device boundary (see the file comment).
class SimDeviceBackend {
 public:
  static constexpr const char* name = "sim-device";

  SimDeviceBackend() : sim_(std::make_shared<SimDeviceMemory>()), mem_(sim_) {}

  const std::shared_ptr<MemoryResource>& memory() const { return mem_; }
  SimDeviceMemory& sim() const { return *sim_; }

  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) const {
    if (bytes == 0) return;
    const bool dd = sim_->contains(dst, bytes), sd = sim_->contains(src, bytes);
    const bool want_dd = kind == CopyKind::host_to_device || kind == CopyKind::device_to_device;
    const bool want_sd = kind == CopyKind::device_to_host || kind == CopyKind::device_to_device;
    MAXTEXT_CHECK(dd == want_dd && sd == want_sd, ArgumentError, "[sim device] copy of ", bytes, " bytes declared ",
                  kind_name(kind), " but the destination is in ", dd ? "device" : "host", " memory and the source in ",
                  sd ? "device" : "host", " memory");
    SimDeviceMemory::Unlocked u(*sim_);
    std::memmove(dst, src, bytes);
  }
  void synchronize() const {}

  template <class W>
  Matrix<W> prepare(Matrix<W> m) const {
    require("prepare", m);
    return m;
  }

#define MAXTEXT_SIM_OP(op)                          \
  template <class... Args>                          \
  void op(Args&&... args) const {                   \
    (require(#op, args), ...);                      \
    SimDeviceMemory::Unlocked u(*sim_);             \
    ref_.op(std::forward<Args>(args)...);           \
  }
  MAXTEXT_SIM_OP(matmul)
  MAXTEXT_SIM_OP(rms_norm)
  MAXTEXT_SIM_OP(layer_norm)
  MAXTEXT_SIM_OP(add)
  MAXTEXT_SIM_OP(activation)
  MAXTEXT_SIM_OP(scale)
  MAXTEXT_SIM_OP(soft_cap)
  MAXTEXT_SIM_OP(scale_rows)
  MAXTEXT_SIM_OP(convert)
  MAXTEXT_SIM_OP(embed)
  MAXTEXT_SIM_OP(rotary)
  MAXTEXT_SIM_OP(attention)
  MAXTEXT_SIM_OP(softmax)
  MAXTEXT_SIM_OP(sample)
  MAXTEXT_SIM_OP(moe_permute)
  MAXTEXT_SIM_OP(moe_unpermute)
  MAXTEXT_SIM_OP(gather_rows)
  MAXTEXT_SIM_OP(scatter_add_rows)
  MAXTEXT_SIM_OP(clamped_glu)
  MAXTEXT_SIM_OP(head_matmul)
  MAXTEXT_SIM_OP(mhc_maps)
  MAXTEXT_SIM_OP(stream_sum)
  MAXTEXT_SIM_OP(stream_mix)
  MAXTEXT_SIM_OP(causal_conv1d)
  MAXTEXT_SIM_OP(engram_gate)
  MAXTEXT_SIM_OP(gated_delta_rule)
  MAXTEXT_SIM_OP(compress_pool)
  MAXTEXT_SIM_OP(indexer_topk)
  MAXTEXT_SIM_OP(compressed_attention)
#undef MAXTEXT_SIM_OP
  /// moe_route is called with explicit template arguments (gate dtype G, activation type A).
  template <class G, class A = G>
  void moe_route(View<const G, 2> z, View<const G, 1> bias, const MoeRouting& r, View<std::int32_t, 2> idx,
                 View<float, 2> w, View<float, 2> scores) const {
    require("moe_route", z);
    require("moe_route", bias);
    require("moe_route", idx);
    require("moe_route", w);
    require("moe_route", scores);
    SimDeviceMemory::Unlocked u(*sim_);
    ref_.moe_route<G, A>(z, bias, r, idx, w, scores);
  }
  /// Strided device-to-device copy (the View overload of copy).
  template <class T, int R>
  void copy(View<const T, R> src, View<T, R> dst) const {
    require("copy", src);
    require("copy", dst);
    SimDeviceMemory::Unlocked u(*sim_);
    ref_.copy(src, dst);
  }

 private:
  static const char* kind_name(CopyKind k) {
    switch (k) {
      case CopyKind::host_to_device: return "host_to_device";
      case CopyKind::device_to_host: return "device_to_host";
      case CopyKind::device_to_device: return "device_to_device";
      case CopyKind::host_to_host: return "host_to_host";
    }
    return "?";
  }
  void require_ptr(const char* op, const void* p) const {
    MAXTEXT_CHECK(p == nullptr || sim_->contains(p), ArgumentError, "[sim device] ", op,
                  ": an operand points to host memory (", p, "); backend operations take backend memory only");
  }
  template <class T, int R>
  void require(const char* op, const View<T, R>& v) const {
    if (!v.empty()) require_ptr(op, v.data());
  }
  template <class W>
  void require(const char* op, const Matrix<W>& m) const {
    require_ptr(op, m.data.data());
  }
  template <class A>
  void require(const char* op, const MhcCoefficients<A>& c) const {
    for (const A* p : {c.pre_scale, c.post_scale, c.res_scale, c.pre_beta, c.post_beta, c.res_beta}) require_ptr(op, p);
  }
  void require(const char* op, const RotaryTable& t) const {
    require_ptr(op, t.cos.data());
    require_ptr(op, t.sin.data());
  }
  void require(const char* op, const AttentionMask& m) const {
    require(op, m.q_start);
    require(op, m.kv_len);
    require(op, m.q_segment);
    require(op, m.kv_segment);
  }
  template <class T>
  void require(const char*, const T&) const {}  // scalars and option structs

  reference::Backend ref_;
  std::shared_ptr<SimDeviceMemory> sim_;
  std::shared_ptr<MemoryResource> mem_;
};

}  // namespace maxtext::test

static_assert(::maxtext::Backend<::maxtext::test::SimDeviceBackend>, "SimDeviceBackend must satisfy the Backend concept");
static_assert(::maxtext::BackendMoE<::maxtext::test::SimDeviceBackend>, "SimDeviceBackend must provide the MoE kernels");
static_assert(::maxtext::BackendHeadMatmul<::maxtext::test::SimDeviceBackend>, "SimDeviceBackend must provide head_matmul");
static_assert(::maxtext::BackendHyperConnections<::maxtext::test::SimDeviceBackend>, "SimDeviceBackend must provide the mHC stream ops");
static_assert(::maxtext::BackendGatedDeltaNet<::maxtext::test::SimDeviceBackend>, "SimDeviceBackend must provide the Gated DeltaNet ops");
static_assert(::maxtext::BackendEngram<::maxtext::test::SimDeviceBackend>, "SimDeviceBackend must provide the Engram gate");
static_assert(::maxtext::BackendCompressedAttention<::maxtext::test::SimDeviceBackend>,
              "SimDeviceBackend must provide the compressed-attention ops");
