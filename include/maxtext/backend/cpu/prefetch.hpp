// backend/cpu/prefetch.hpp: the software prefetch hints of the CPU kernels, in one place. The kernels that stream
// weights (qblock, gemm) and the KV cache (attention) decide where and how far ahead to hint (see kPrefetch in
// qblock_impl.hpp and gemm.hpp, kAheadBlocks in attention.hpp); these helpers only issue the hints, for reading,
// into L1 (bytes_l2: into L2). A hint never faults, so a range may run past the end of an allocation.
#pragma once

#include <cstdint>

#include "maxtext/core/macros.hpp"

namespace maxtext::cpu::prefetch {

/// One hint per 64 bytes of [p, p + n), from p on (p need not be line-aligned: with an unaligned p the hints
/// touch the line of each 64-byte step). A plain loop: inlined with a constant n, it unrolls to the hints.
MAXTEXT_INLINE void bytes(const void* p, std::int64_t n) {
  const char* c = static_cast<const char*>(p);
  for (std::int64_t o = 0; o < n; o += 64) __builtin_prefetch(c + o, 0, 3);
}

/// bytes() into L2 only (prefetcht1). An L1 hint holds one of the core's few L1 miss buffers until its line
/// arrives, so a kernel that runs ahead of memory stalls its own loads on the hints; an L2 hint does not, and the
/// hardware's L1 prefetcher takes the lines on from L2. Measured on one Xeon core (AVX-512 VNNI, bench/speculative,
/// model c, one thread, 8-bit activations): decode 51 -> 38 ms on Q4_K_M, 70 -> 64 on Q8_0.
MAXTEXT_INLINE void bytes_l2(const void* p, std::int64_t n) {
  const char* c = static_cast<const char*>(p);
  for (std::int64_t o = 0; o < n; o += 64) __builtin_prefetch(c + o, 0, 2);
}

/// One hint per cache line that starts inside [p, p + n): for consecutive ranges (a loop stepping p by n) every
/// line gets exactly one hint, where bytes() would hint a line twice whenever p is not line-aligned.
MAXTEXT_INLINE void line_starts(const void* p, std::int64_t n) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (std::uintptr_t l = (a + 63) & ~std::uintptr_t{63}; l < a + static_cast<std::uintptr_t>(n); l += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(l), 0, 3);
}

/// line_starts() into L2 only (prefetcht1).
MAXTEXT_INLINE void line_starts_l2(const void* p, std::int64_t n) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (std::uintptr_t l = (a + 63) & ~std::uintptr_t{63}; l < a + static_cast<std::uintptr_t>(n); l += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(l), 0, 2);
}

/// bytes() for `count` rows of `n` bytes, `stride` bytes apart from row0.
MAXTEXT_INLINE void rows(const void* row0, std::int64_t stride, std::int64_t count, std::int64_t n) {
  const char* r = static_cast<const char*>(row0);
  for (std::int64_t j = 0; j < count; ++j, r += stride) bytes(r, n);
}

}  // namespace maxtext::cpu::prefetch
