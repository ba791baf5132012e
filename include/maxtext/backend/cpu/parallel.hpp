// backend/cpu/parallel.hpp: the one way the CPU kernels split work across threads (OpenMP), and 64-byte aligned
// buffers that are allocated once and reused (per thread or per weight), so the decode loop allocates nothing.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace maxtext::cpu {

/// Run f(begin, end) over [0, n) in `threads` contiguous static chunks (one OpenMP team, no nesting: inside a
/// parallel region everything runs on the calling thread).
template <class F>
inline void parallel_for(std::int64_t n, int threads, F&& f) {
  if (n <= 0) return;
#if defined(_OPENMP)
  const std::int64_t nt = std::min<std::int64_t>(threads, n);
  if (nt > 1 && !omp_in_parallel()) {
#pragma omp parallel num_threads(static_cast<int>(nt))
    {
      const std::int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
      const std::int64_t b = n * tid / nth, e = n * (tid + 1) / nth;
      if (b < e) f(b, e);
    }
    return;
  }
#else
  (void)threads;
#endif
  f(std::int64_t{0}, n);
}

/// Owning 64-byte aligned byte buffer. Large buffers are 2 MiB aligned and advised for transparent huge pages:
/// weights streamed once per token then cost fewer TLB misses.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes) { allocate(bytes); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_), align_(o.align_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_;
      bytes_ = o.bytes_;
      align_ = o.align_;
      o.p_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  ~AlignedBuffer() { release(); }

  std::byte* data() const { return p_; }
  std::size_t size() const { return bytes_; }

  /// Grow to at least `bytes` (contents are not kept); never shrinks, so steady-state calls allocate nothing.
  void reserve(std::size_t bytes) {
    if (bytes > bytes_) allocate(bytes);
  }

 private:
  static constexpr std::size_t kHuge = std::size_t{2} << 20;
  void allocate(std::size_t bytes) {
    release();
    if (bytes == 0) return;
    align_ = bytes >= 2 * kHuge ? kHuge : 64;
    const std::size_t rounded = (bytes + align_ - 1) / align_ * align_;
    p_ = static_cast<std::byte*>(::operator new(rounded, std::align_val_t(align_)));
    bytes_ = rounded;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align_ == kHuge) (void)madvise(p_, rounded, MADV_HUGEPAGE);
#endif
  }
  void release() {
    if (p_) ::operator delete(p_, std::align_val_t(align_));
    p_ = nullptr;
    bytes_ = 0;
  }

  std::byte* p_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t align_ = 64;
};

/// A per-thread scratch buffer, grown on first use and then reused (kernels call it inside parallel regions).
/// Slots in use: 0 attention, 1 dequantised Q8_0 panels, 2 GEMM partial sums, 3 per-row kernels, 4 8-bit
/// activations; one kernel's buffer must not be another's that is still live.
inline std::byte* thread_scratch(std::size_t bytes, int slot = 0) {
  constexpr int kSlots = 5;
  thread_local AlignedBuffer bufs[kSlots];
  AlignedBuffer& b = bufs[static_cast<unsigned>(slot) % kSlots];
  b.reserve(bytes);
  return b.data();
}

/// A row of floats in a thread's scratch (indexable like the std::vector it replaces in the kernels).
class F32Row {
 public:
  F32Row() = default;
  F32Row(float* p, std::int64_t n) : p_(p), n_(n) {}
  float& operator[](std::int64_t i) const { return p_[i]; }
  float* data() const { return p_; }
  float* begin() const { return p_; }
  float* end() const { return p_ + n_; }
  std::int64_t size() const { return n_; }

 private:
  float* p_ = nullptr;
  std::int64_t n_ = 0;
};

/// `Count` rows of n floats each from the calling thread's reusable scratch: the per-row kernels (norms, rotary,
/// activations) allocate nothing once it has grown.
template <std::size_t Count>
inline std::array<F32Row, Count> thread_rows(std::int64_t n) {
  const std::int64_t stride = (n + 15) / 16 * 16;
  auto* p = reinterpret_cast<float*>(thread_scratch(static_cast<std::size_t>(stride) * Count * sizeof(float), 3));
  std::array<F32Row, Count> rows;
  for (std::size_t i = 0; i < Count; ++i) rows[i] = F32Row(p + static_cast<std::int64_t>(i) * stride, n);
  return rows;
}

}  // namespace maxtext::cpu
