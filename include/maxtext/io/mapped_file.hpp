// io/mapped_file.hpp: read-only memory-mapped files (POSIX), shared so tensors can keep them alive.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/mapped_pages.hpp"

namespace maxtext::io {

/// A whole file mapped read-only (and registered as such: core/mapped_pages.hpp). Empty files map to a null pointer
/// with size 0.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    MAXTEXT_CHECK(fd_ >= 0, IoError, "[io] ", path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      MAXTEXT_THROW(IoError, "[io] ", path, ": not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (p == MAP_FAILED) {
        ::close(fd_);
        MAXTEXT_THROW(IoError, "[io] ", path, ": mmap failed: ", std::strerror(errno));
      }
      data_ = static_cast<const std::byte*>(p);
#if defined(MADV_HUGEPAGE)
      // Huge pages where the kernel can: pages read from disk through a mapping so marked come into the page cache
      // as 2 MiB folios (on file systems with large folios: ext4 since Linux 6.16, xfs, btrfs) and are mapped with
      // one page-table entry each. A decode step streams every weight once, and one core streams 2 MiB pages
      // markedly faster than 4 KiB ones (docs/performance.md). Pages already cached in small folios keep them; the
      // hint fails harmlessly where transparent huge pages are not built in.
      (void)::madvise(p, size_, MADV_HUGEPAGE);
#endif
      register_readonly_mapping(data_, size_);  // its pages may be dropped once read (core/mapped_pages.hpp)
    }
  }
  ~MappedFile() {
    if (data_) {
      unregister_readonly_mapping(data_);
      ::munmap(const_cast<std::byte*>(data_), size_);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  static std::shared_ptr<const MappedFile> open(const std::string& path) {
    return std::make_shared<const MappedFile>(path);
  }

 private:
  std::string path_;
  int fd_ = -1;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Write `bytes` to `path` atomically enough for tests and tools (write then rename).
inline void write_file(const std::string& path, const void* data, std::size_t bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MAXTEXT_CHECK(f.good(), IoError, "[io] ", path, ": cannot open for writing");
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    MAXTEXT_CHECK(f.good(), IoError, "[io] ", path, ": write failed");
  }
  MAXTEXT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, IoError, "[io] ", path, ": rename failed: ",
                std::strerror(errno));
}

/// Read a whole (small) file into memory.
inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MAXTEXT_CHECK(f.good(), IoError, "[io] ", path, ": cannot open");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// The readers' guard on a shape read from a file (npy, safetensors, GGUF): every extent non-negative and below 2^50,
/// and the product of the extents at most 2^50, with zero extents counted as one. Counting them as one matters: a
/// (0, 2^40, 2^40) tensor holds no element, yet its row-major strides (AnyTensor::dense_strides) multiply the later
/// extents and would overflow. Returns the element count.
inline std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const char* format, const std::string& where) {
  constexpr std::int64_t cap = std::int64_t{1} << 50;
  std::int64_t nonzero = 1;
  bool empty = false;
  for (const std::int64_t d : shape) {
    MAXTEXT_CHECK(d >= 0 && d < cap, IoError, "[", format, "] ", where, ": shape ", shape, ": extent ", d,
                  " is out of range [0, 2^50)");
    if (d == 0) {
      empty = true;
      continue;
    }
    MAXTEXT_CHECK(nonzero <= cap / d, IoError, "[", format, "] ", where, ": shape ", shape,
                  " is too large (the product of its extents exceeds 2^50)");
    nonzero *= d;
  }
  return empty ? 0 : nonzero;
}

}  // namespace maxtext::io
