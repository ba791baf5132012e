// core/mapped_pages.hpp: one copy of the weights in memory. Read-only file mappings (io/mapped_file.hpp) register
// here; once a backend has packed a matrix that is a view of such a mapping (or a loader has checked or decoded its
// bytes), the pages it read are handed back to the kernel with madvise(MADV_DONTNEED). They stay in the page cache,
// so a later read (a row gather, an export) faults them back in from there, with the file's contents: a private,
// read-only, never-written mapping has no copy-on-write pages to lose. Anything not inside a registered mapping
// (heap memory, a writable or device buffer) is never touched. Also glibc's malloc_trim, to return the heap freed by
// loading's temporaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace maxtext {

namespace detail {
struct MappedRanges {
  std::mutex mu;
  std::map<std::uintptr_t, std::size_t> ranges;  ///< start -> bytes of each registered read-only file mapping
};
inline MappedRanges& mapped_ranges() {
  static MappedRanges r;
  return r;
}
}  // namespace detail

/// Record [p, p + bytes) as a read-only, private file mapping whose pages may be dropped and re-read (MappedFile).
inline void register_readonly_mapping(const void* p, std::size_t bytes) {
  if (!p || bytes == 0) return;
  auto& r = detail::mapped_ranges();
  std::lock_guard<std::mutex> lock(r.mu);
  r.ranges[reinterpret_cast<std::uintptr_t>(p)] = bytes;
}
/// Forget a mapping registered at p (before it is unmapped).
inline void unregister_readonly_mapping(const void* p) {
  auto& r = detail::mapped_ranges();
  std::lock_guard<std::mutex> lock(r.mu);
  r.ranges.erase(reinterpret_cast<std::uintptr_t>(p));
}

/// Whether `p` lies inside a registered read-only file mapping (its pages can be dropped and read again).
inline bool in_readonly_mapping(const void* p) {
  if (!p) return false;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto& r = detail::mapped_ranges();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ranges.upper_bound(a);
  if (it == r.ranges.begin()) return false;
  --it;
  return a >= it->first && a < it->first + it->second;
}

/// Drop from this process's resident set the whole pages of [p, p + bytes) that lie inside one registered read-only
/// file mapping; returns the bytes advised (0 when the range is not a registered mapping's, or on a platform without
/// madvise). The contents read the same afterwards.
inline std::size_t drop_mapped_pages(const void* p, std::size_t bytes) {
#if defined(MADV_DONTNEED)
  if (!p || bytes == 0) return 0;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto& r = detail::mapped_ranges();
  std::lock_guard<std::mutex> lock(r.mu);  // held across madvise: the mapping cannot be unmapped meanwhile
  auto it = r.ranges.upper_bound(a);
  if (it == r.ranges.begin()) return 0;
  --it;
  const std::uintptr_t m0 = it->first, m1 = it->first + it->second;
  if (a < m0 || a >= m1 || bytes > m1 - a) return 0;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t lo = (a + page - 1) / page * page, hi = (a + bytes) / page * page;  // whole pages only
  if (hi <= lo) return 0;
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0) return 0;
  return hi - lo;
#else
  (void)p;
  (void)bytes;
  return 0;
#endif
}

/// Map the pages of [p, p + bytes) into this process's page tables now (madvise MADV_POPULATE_READ, Linux 5.14+),
/// reading them into the page cache where they are not: one call instead of a page fault per page (or per
/// fault-around group) when a model then reads a mapped file where it lies. Returns whether the kernel did it;
/// elsewhere, on an older kernel, or for a range over half the machine's memory (which would only push other pages
/// out), nothing happens and the pages fault in as they are read.
inline bool populate_mapped_pages(const void* p, std::size_t bytes) {
#if defined(MADV_POPULATE_READ)
  if (!p || bytes == 0) return false;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const long phys = ::sysconf(_SC_PHYS_PAGES);
  if (phys > 0 && bytes / page > static_cast<std::uintptr_t>(phys) / 2) return false;
  const std::uintptr_t lo = a / page * page, hi = (a + bytes + page - 1) / page * page;
  return ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_READ) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

/// Return the heap pages that loading's temporaries freed to the system (glibc; elsewhere nothing).
inline void trim_heap() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

}  // namespace maxtext
