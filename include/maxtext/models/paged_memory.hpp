// models/paged_memory.hpp: the memory of a paged KV cache (MaxText's page manager: pages of tokens_per_page tokens
// from one pool of num_pages, a page table per sequence), mapped by the processor's MMU so that every attention
// kernel reads a sequence's keys and values as one contiguous [S, width] row block, as it does without pages.
//
// Each cache buffer [B, S, width] is a reserved range of virtual memory. A sequence's page j (tokens [j*tpp,
// (j+1)*tpp)) of every buffer is mapped, with mmap(MAP_FIXED), onto pool page p of one memfd: the page table is the
// process's own. Until a page is written it is not mapped (reads see zeros, as in a fresh cache); memory is spent on
// the pool pages in use, not on batch x max_target_length. This is vAttention's design (Prabhu et al., 2024: dynamic
// KV-cache memory without a paged kernel) on Linux pages, rather than page tables read by the kernels (vLLM's
// PagedAttention, MaxText's Pallas kernel): the kernels, their numerics and their CUDA versions stay as they are.
//
// Prefix sharing: two sequences (of one cache, or of a cache and its clone) may map the same pool page, read-only,
// with a reference count; the first write into a shared page copies it into a page of its own (copy on write).
// Writes are announced (prepare_write) for the token range a pass writes; a write anywhere else into a shared page
// would fault, never corrupt another sequence.
//
// Constraints (refused by name, with the nearest valid value): a page of every buffer must be a whole number of the
// system's pages (4 KiB), so tokens_per_page is a multiple of 4096 / gcd(width * bytes, 4096) for each buffer; the
// mappings must fit the process's limit (/proc/sys/vm/max_map_count). Linux only, host memory only (the CPU and
// reference backends); elsewhere a paged cache is refused.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace maxtext::models {

/// How a KV cache is paged (KVCache's paged constructor; `attention: paged` with MaxText's pagedattn_* keys).
struct PagingOptions {
  /// Tokens per page (pagedattn_tokens_per_page); 0: the smallest valid size of at least 32 (MaxText's default)
  /// whose mappings fit the process's limit.
  std::int64_t tokens_per_page = 0;
  /// Pages in the pool (pagedattn_num_pages); 0: enough for every slot at full capacity (then memory is still spent
  /// only on pages in use, and no pass can run out of pages).
  std::int64_t pages = 0;
};

/// What a paged cache's pool holds now.
struct PagingStats {
  std::int64_t tokens_per_page = 0;
  std::int64_t pages = 0;        ///< in the pool
  std::int64_t pages_used = 0;   ///< mapped by at least one sequence
  std::int64_t pages_shared = 0; ///< mapped by more than one
  std::int64_t page_bytes = 0;   ///< one page of every buffer of every layer
  /// Memory the pool holds now, as the system counts it (the pool file's allocated blocks): pages_used x page_bytes
  /// once written. (A process's VmRSS counts a shared page once per mapping: use this, or PSS.)
  std::int64_t resident_bytes = 0;
  std::int64_t bytes_used() const { return pages_used * page_bytes; }
};

namespace detail {
/// An integer key of Config::extra (MaxText's pagedattn_* keys), or `dflt` when unset.
inline std::int64_t extra_int(const Config& cfg, const std::string& key, std::int64_t dflt) {
  const auto it = cfg.extra.find(key);
  if (it == cfg.extra.end() || it->second == "None" || it->second == "null") return dflt;
  std::size_t used = 0;
  std::int64_t n = 0;
  try {
    n = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MAXTEXT_CHECK(used == it->second.size() && used > 0, ConfigError, "[config] ", key, ": expected an integer, found '",
                it->second, "'");
  return n;
}
}  // namespace detail

/// The paging that `attention: paged` asks for: MaxText's pagedattn_tokens_per_page (32) and pagedattn_num_pages
/// (64) as its page manager reads them. pagedattn_max_pages_per_group (-1: max_target_length's pages; MaxText takes
/// the larger of the two) cannot bound a sequence below its capacity, so it is checked and needs nothing else.
inline PagingOptions paging_options(const Config& cfg) {
  PagingOptions o;
  // Unset, MaxText's 32 where it makes whole system pages of every buffer, else the smallest size above it that does
  // (0: the cache chooses); set, exactly that size or a refusal naming the key.
  o.tokens_per_page = cfg.origin.count("pagedattn_tokens_per_page") ? detail::extra_int(cfg, "pagedattn_tokens_per_page", 32) : 0;
  o.pages = detail::extra_int(cfg, "pagedattn_num_pages", 64);
  const std::int64_t group = detail::extra_int(cfg, "pagedattn_max_pages_per_group", -1);
  MAXTEXT_CHECK(o.tokens_per_page > 0 || !cfg.origin.count("pagedattn_tokens_per_page"), ConfigError,
                "[config] pagedattn_tokens_per_page must be > 0, found ", o.tokens_per_page);
  MAXTEXT_CHECK(o.pages > 0, ConfigError, "[config] pagedattn_num_pages must be > 0, found ", o.pages);
  MAXTEXT_CHECK(group == -1 || group > 0, ConfigError, "[config] pagedattn_max_pages_per_group must be -1 or > 0, "
                "found ", group);
  return o;
}

namespace detail {

/// The pool: one memfd holding, for each buffer k, `pages` chunks of page_bytes[k] (section k), reference counts and
/// a free list (lowest page first, so that a sequence's pages tend to be consecutive and their mappings merge).
/// Thread-safe (a cache and its clones may be used from different threads).
class PagePool {
 public:
  PagePool(std::vector<std::int64_t> page_bytes, std::int64_t pages) : page_bytes_(std::move(page_bytes)), pages_(pages) {
#if defined(__linux__)
    std::int64_t total = 0;
    for (auto b : page_bytes_) {
      section_.push_back(total);
      total += b * pages_;
    }
    fd_ = static_cast<int>(memfd_create("maxtext-kv-pages", MFD_CLOEXEC));
    MAXTEXT_CHECK(fd_ >= 0, ArgumentError, "[KVCache] paged cache: memfd_create failed: ", std::strerror(errno));
    if (ftruncate(fd_, static_cast<off_t>(total)) != 0) {
      const int e = errno;
      close(fd_);
      MAXTEXT_THROW(ArgumentError, "[KVCache] paged cache: cannot size the page pool to ", total, " bytes: ",
                    std::strerror(e));
    }
    refs_.assign(static_cast<std::size_t>(pages_), 0);
    for (std::int64_t p = pages_ - 1; p >= 0; --p) free_.push_back(static_cast<std::int32_t>(p));
#else
    MAXTEXT_THROW(UnsupportedError, "[KVCache] a paged cache needs Linux (memfd and mmap)");
#endif
  }
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;
  ~PagePool() {
#if defined(__linux__)
    if (fd_ >= 0) close(fd_);
#endif
  }

  int fd() const { return fd_; }
  std::int64_t pages() const { return pages_; }
  std::size_t buffers() const { return page_bytes_.size(); }
  std::int64_t page_bytes(std::size_t k) const { return page_bytes_[k]; }
  /// File offset of buffer k's chunk of page p.
  std::int64_t offset(std::size_t k, std::int32_t p) const { return section_[k] + page_bytes_[k] * p; }

  /// A free page, its count 1 (its contents zeros).
  std::int32_t acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    MAXTEXT_CHECK(!free_.empty(), ArgumentError, "[KVCache] the page pool's ", pages_, " pages (pagedattn_num_pages) "
                  "are all in use: give the cache more pages, or fewer or shorter sequences");
    const std::int32_t p = free_.back();
    free_.pop_back();
    refs_[static_cast<std::size_t>(p)] = 1;
    return p;
  }
  void retain(std::int32_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    ++refs_[static_cast<std::size_t>(p)];
  }
  /// One holder less; at none, the page's memory goes back to the system and the page to the free list.
  void release(std::int32_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--refs_[static_cast<std::size_t>(p)] > 0) return;
#if defined(__linux__)
    for (std::size_t k = 0; k < page_bytes_.size(); ++k) {
      // Punching a hole frees the memory and makes the page read zeros again; where the file system cannot, the page
      // keeps its old contents (harmless: a sequence reads only the tokens it wrote), so the result is not checked.
      [[maybe_unused]] int r = fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset(k, p)),
                                         static_cast<off_t>(page_bytes_[k]));
    }
#endif
    // Keep the free list sorted high to low (lowest on top).
    free_.insert(std::upper_bound(free_.begin(), free_.end(), p, [](std::int32_t a, std::int32_t b) { return a > b; }), p);
  }
  bool exhausted() {
    std::lock_guard<std::mutex> lock(mu_);
    return free_.empty();
  }
  int refs(std::int32_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    return refs_[static_cast<std::size_t>(p)];
  }
  PagingStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    PagingStats s;
    s.pages = pages_;
    for (int r : refs_) {
      s.pages_used += r > 0;
      s.pages_shared += r > 1;
    }
    for (auto b : page_bytes_) s.page_bytes += b;
#if defined(__linux__)
    struct stat st {};
    if (fstat(fd_, &st) == 0) s.resident_bytes = static_cast<std::int64_t>(st.st_blocks) * 512;
#endif
    return s;
  }

 private:
  std::vector<std::int64_t> page_bytes_, section_;
  std::int64_t pages_ = 0;
  int fd_ = -1;
  std::mutex mu_;
  std::vector<int> refs_;
  std::vector<std::int32_t> free_;
};

/// The virtual memory of one cache's paged buffers: buffer k is [batch, S, width_k] elements reserved at base(k),
/// sequence b's page j mapped onto a pool page (or not mapped). Used by one thread at a time (the cache's owner).
class PagedRegion {
 public:
  /// `row_bytes[k]`: bytes per token of buffer k; `capacity`: tokens per sequence (a multiple of tokens_per_page).
  PagedRegion(std::shared_ptr<PagePool> pool, std::vector<std::int64_t> row_bytes, std::int64_t batch,
              std::int64_t capacity, std::int64_t tokens_per_page)
      : pool_(std::move(pool)), row_bytes_(std::move(row_bytes)), batch_(batch), capacity_(capacity),
        tpp_(tokens_per_page), per_seq_(capacity / tokens_per_page) {
#if defined(__linux__)
    table_.assign(static_cast<std::size_t>(batch_ * per_seq_), -1);
    keep_.assign(static_cast<std::size_t>(batch_), 0);
    writable_.assign(table_.size(), 0);
    for (auto rb : row_bytes_) {
      const std::size_t bytes = static_cast<std::size_t>(batch_ * capacity_ * rb);
      void* p = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        unmap_all();
        MAXTEXT_THROW(ArgumentError, "[KVCache] paged cache: cannot reserve ", bytes, " bytes of address space: ",
                      std::strerror(e));
      }
      base_.push_back(static_cast<char*>(p));
    }
#endif
  }
  PagedRegion(const PagedRegion&) = delete;
  PagedRegion& operator=(const PagedRegion&) = delete;
  ~PagedRegion() {
    for (std::size_t i = 0; i < table_.size(); ++i) {
      if (table_[i] >= 0) pool_->release(table_[i]);
    }
    unmap_all();
  }

  char* base(std::size_t k) const { return base_[k]; }
  std::int64_t tokens_per_page() const { return tpp_; }
  const std::shared_ptr<PagePool>& pool() const { return pool_; }
  /// Pool page of sequence b's page j, or -1.
  std::int32_t page(std::int64_t b, std::int64_t j) const { return table_[index(b, j)]; }

  /// Make tokens [from, to) of sequence b writable: pages not mapped get a pool page of their own, shared ones are
  /// copied into one (copy on write), read-only ones held alone become writable.
  void prepare_write(std::int64_t b, std::int64_t from, std::int64_t to) {
    if (to <= from) return;
    keep_[static_cast<std::size_t>(b)] = std::max(keep_[static_cast<std::size_t>(b)], to);
    for (std::int64_t j = from / tpp_; j <= (to - 1) / tpp_ && j < per_seq_; ++j) {
      const std::size_t i = index(b, j);
      if (writable_[i]) continue;
      const std::int32_t old = table_[i];
      if (old < 0) {
        map(b, j, acquire(), true);
      } else if (pool_->refs(old) == 1) {
        for (std::size_t k = 0; k < row_bytes_.size(); ++k) protect(b, j, k, PROT_READ | PROT_WRITE);
        writable_[i] = 1;
      } else {
        const std::int32_t p = acquire();
        for (std::size_t k = 0; k < row_bytes_.size(); ++k) {  // the shared page's bytes into the new page, via the file
          const std::int64_t n = pool_->page_bytes(k);
          const char* src = at(b, j, k);
          for (std::int64_t done = 0; done < n;) {
            const ssize_t w = pwrite(pool_->fd(), src + done, static_cast<std::size_t>(n - done),
                                     static_cast<off_t>(pool_->offset(k, p) + done));
            MAXTEXT_CHECK(w > 0, ArgumentError, "[KVCache] paged cache: copying a shared page failed: ",
                          std::strerror(errno));
            done += w;
          }
        }
        map(b, j, p, true);
        pool_->release(old);
      }
    }
  }
  /// Sequence b keeps the pages of its first `keep` tokens; those wholly past them go back to the pool (reads there
  /// see zeros again).
  void clear(std::int64_t b, std::int64_t keep = 0) {
    for (std::int64_t j = (keep + tpp_ - 1) / tpp_; j < per_seq_; ++j) {
      const std::size_t i = index(b, j);
      if (table_[i] < 0) continue;
      pool_->release(table_[i]);
      table_[i] = -1;
      writable_[i] = 0;
      for (std::size_t k = 0; k < row_bytes_.size(); ++k) {
        void* p = mmap(at(b, j, k), static_cast<std::size_t>(pool_->page_bytes(k)), PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        MAXTEXT_CHECK(p != MAP_FAILED, ArgumentError, "[KVCache] paged cache: unmapping a page failed: ",
                      std::strerror(errno));
      }
    }
  }
  /// Sequence b may hold up to n tokens now (its length went to n): the pages wholly past them stay mapped, for it
  /// to write again without mapping them anew (a rewound or rolled-back sequence, a gap row, a conversation that
  /// starts over in its slot), until the pool runs out of free pages and takes them back (acquire).
  void set_keep(std::int64_t b, std::int64_t n) { keep_[static_cast<std::size_t>(b)] = n; }
  /// Sequence dst (of this region) maps sequence src's (of region `from`) pages for tokens [0, n), read-only in
  /// both; dst's own pages are released first. The pools must be the same.
  void share(PagedRegion& from, std::int64_t src, std::int64_t dst, std::int64_t n) {
    MAXTEXT_CHECK(from.pool_ == pool_ && from.tpp_ == tpp_, ArgumentError, "[KVCache] pages can be shared only "
                  "between caches of one pool");
    if (&from == this && src == dst) return;
    clear(dst);
    for (std::int64_t j = 0; j * tpp_ < n && j < per_seq_; ++j) {
      const std::size_t si = from.index(src, j);
      const std::int32_t p = from.table_[si];
      if (p < 0) continue;  // never written: reads zeros in both
      if (from.writable_[si]) {
        for (std::size_t k = 0; k < row_bytes_.size(); ++k) from.protect(src, j, k, PROT_READ);
        from.writable_[si] = 0;
      }
      pool_->retain(p);
      map(dst, j, p, false);
    }
    keep_[static_cast<std::size_t>(dst)] = n;
  }
  /// Pages sequence b maps.
  std::int64_t pages_of(std::int64_t b) const {
    std::int64_t n = 0;
    for (std::int64_t j = 0; j < per_seq_; ++j) n += table_[index(b, j)] >= 0;
    return n;
  }

 private:
  std::size_t index(std::int64_t b, std::int64_t j) const { return static_cast<std::size_t>(b * per_seq_ + j); }
  /// A free pool page; when there is none, this region's sequences first give back their pages wholly past the
  /// tokens they may hold (set_keep; a sequence being prepared holds up to the end of its write).
  std::int32_t acquire() {
    if (pool_->exhausted()) {
      for (std::int64_t s = 0; s < batch_; ++s) clear(s, keep_[static_cast<std::size_t>(s)]);
    }
    return pool_->acquire();
  }
  char* at(std::int64_t b, std::int64_t j, std::size_t k) const {
    return base_[k] + (b * capacity_ + j * tpp_) * row_bytes_[k];
  }
  void map(std::int64_t b, std::int64_t j, std::int32_t p, bool writable) {
#if defined(__linux__)
    for (std::size_t k = 0; k < row_bytes_.size(); ++k) {
      // MAP_POPULATE: the page's memory and page-table entries in one call, not a fault per system page on first
      // touch (maxtext serve, bench model b, 8 slots, 32 requests: 24k faults fewer, 9% more tokens/s).
      void* q = mmap(at(b, j, k), static_cast<std::size_t>(pool_->page_bytes(k)), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                     MAP_SHARED | MAP_FIXED | MAP_POPULATE, pool_->fd(), static_cast<off_t>(pool_->offset(k, p)));
      if (q == MAP_FAILED) {
        const int e = errno;
        pool_->release(p);
        MAXTEXT_THROW(ArgumentError, "[KVCache] paged cache: mapping a page failed (", std::strerror(e), e == ENOMEM ?
                      "; the process's map count limit /proc/sys/vm/max_map_count is reached: use larger pages, "
                      "pagedattn_tokens_per_page)" : ")");
      }
    }
#endif
    table_[index(b, j)] = p;
    writable_[index(b, j)] = writable ? 1 : 0;
  }
  void protect(std::int64_t b, std::int64_t j, std::size_t k, int prot) {
#if defined(__linux__)
    MAXTEXT_CHECK(mprotect(at(b, j, k), static_cast<std::size_t>(pool_->page_bytes(k)), prot) == 0, ArgumentError,
                  "[KVCache] paged cache: mprotect failed: ", std::strerror(errno));
#endif
  }
  void unmap_all() {
#if defined(__linux__)
    for (std::size_t k = 0; k < base_.size(); ++k) {
      munmap(base_[k], static_cast<std::size_t>(batch_ * capacity_ * row_bytes_[k]));
    }
#endif
    base_.clear();
  }

  std::shared_ptr<PagePool> pool_;
  std::vector<std::int64_t> row_bytes_;
  std::int64_t batch_, capacity_, tpp_, per_seq_;
  std::vector<char*> base_;
  std::vector<std::int32_t> table_;
  std::vector<std::uint8_t> writable_;
  std::vector<std::int64_t> keep_;  ///< per sequence: the tokens it may hold (its pages past them can be taken back)
};

/// The system's page size.
inline std::int64_t system_page_bytes() {
#if defined(__linux__)
  return static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
#else
  return 4096;
#endif
}
/// The process's limit on memory mappings (vm.max_map_count; 65530 when unreadable).
inline std::int64_t max_map_count() {
  std::ifstream f("/proc/sys/vm/max_map_count");
  std::int64_t n = 0;
  if (f >> n && n > 0) return n;
  return 65530;
}
/// The smallest tokens-per-page quantum that makes a page of every buffer (row_bytes each) whole system pages.
inline std::int64_t page_quantum(const std::vector<std::int64_t>& row_bytes) {
  const std::int64_t sys = system_page_bytes();
  std::int64_t q = 1;
  for (auto rb : row_bytes) q = std::lcm(q, sys / std::gcd(rb, sys));
  return q;
}

}  // namespace detail
}  // namespace maxtext::models
