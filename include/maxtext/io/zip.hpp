// io/zip.hpp: the subset of the ZIP container (PKWARE APPNOTE 6.3) that NumPy's .npz files use, read and written:
// stored (method 0) and deflate (method 8, through zlib) members, CRC-32 checks, and the Zip64 extensions NumPy
// relies on for large arrays (np.savez opens every member with force_zip64, and Python's zipfile switches the
// central directory and end record to Zip64 once a size or offset passes 4 GiB). Encryption, multi-disk archives
// and other compression methods are rejected with an IoError naming the file and the member.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/io/mapped_file.hpp"

namespace maxtext::io {

/// One member as the central directory describes it.
struct ZipEntry {
  std::string name;
  std::uint16_t method = 0;      ///< 0 stored, 8 deflate
  std::uint16_t flags = 0;       ///< general purpose bit flags
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t size = 0;        ///< uncompressed
  std::uint64_t local_offset = 0;
};

/// The bytes of one member: a view into the archive for stored members, an owned buffer for inflated ones.
struct ZipBytes {
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::shared_ptr<const void> holder;
};

namespace detail {
inline std::uint16_t zip_u16(const std::byte* p) {
  return static_cast<std::uint16_t>(static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8));
}
inline std::uint32_t zip_u32(const std::byte* p) {
  return static_cast<std::uint32_t>(zip_u16(p)) | (static_cast<std::uint32_t>(zip_u16(p + 2)) << 16);
}
inline std::uint64_t zip_u64(const std::byte* p) {
  return static_cast<std::uint64_t>(zip_u32(p)) | (static_cast<std::uint64_t>(zip_u32(p + 4)) << 32);
}
inline void zip_put16(std::vector<std::byte>& b, std::uint16_t v) {
  b.push_back(static_cast<std::byte>(v & 0xff));
  b.push_back(static_cast<std::byte>(v >> 8));
}
inline void zip_put32(std::vector<std::byte>& b, std::uint32_t v) {
  zip_put16(b, static_cast<std::uint16_t>(v & 0xffff));
  zip_put16(b, static_cast<std::uint16_t>(v >> 16));
}
inline void zip_put64(std::vector<std::byte>& b, std::uint64_t v) {
  zip_put32(b, static_cast<std::uint32_t>(v & 0xffffffffu));
  zip_put32(b, static_cast<std::uint32_t>(v >> 32));
}
inline void zip_put_bytes(std::vector<std::byte>& b, const void* p, std::size_t n) {
  const auto* s = static_cast<const std::byte*>(p);
  b.insert(b.end(), s, s + n);
}
constexpr std::uint32_t kZipLocal = 0x04034b50, kZipCentral = 0x02014b50, kZipEnd = 0x06054b50,
                        kZipEnd64 = 0x06064b50, kZipLocator64 = 0x07064b50;
constexpr std::uint32_t kZipMax32 = 0xffffffffu;
constexpr std::uint16_t kZipMax16 = 0xffffu;

/// CRC-32 of any length (zlib's crc32 takes 32-bit lengths).
inline std::uint32_t zip_crc32(const std::byte* p, std::size_t n) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    c = ::crc32(c, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(c);
}
}  // namespace detail

/// Read-only view of a ZIP archive held in memory (usually a MappedFile). Validates the directory up front.
class ZipReader {
 public:
  ZipReader(const std::byte* data, std::size_t size, std::shared_ptr<const void> holder, std::string where)
      : data_(data), size_(size), holder_(std::move(holder)), where_(std::move(where)) {
    parse_directory();
  }
  /// Map and parse the archive at `path`.
  static ZipReader open(const std::string& path) {
    auto f = MappedFile::open(path);
    return ZipReader(f->data(), f->size(), f, path);
  }

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const std::string& where() const { return where_; }

  /// The uncompressed bytes of `e`, CRC-checked. Stored members are zero-copy views into the archive.
  ZipBytes read(const ZipEntry& e) const {
    const std::string w = where_ + ": member '" + e.name + "'";
    MAXTEXT_CHECK((e.flags & 0x1u) == 0, IoError, "[zip] ", w, ": encrypted members are not supported");
    MAXTEXT_CHECK(e.method == 0 || e.method == 8, IoError, "[zip] ", w, ": unsupported compression method ", e.method,
                  " (", method_name(e.method), "): expected 0 (stored) or 8 (deflate)");
    MAXTEXT_CHECK(e.local_offset <= size_ && size_ - e.local_offset >= 30, IoError, "[zip] ", w,
                  ": local header at offset ", e.local_offset, " lies outside the file (", size_,
                  " bytes; truncated file?)");
    const std::byte* lh = data_ + e.local_offset;
    MAXTEXT_CHECK(detail::zip_u32(lh) == detail::kZipLocal, IoError, "[zip] ", w, ": bad local header signature at offset ",
                  e.local_offset);
    const std::uint64_t nlen = detail::zip_u16(lh + 26), xlen = detail::zip_u16(lh + 28);
    const std::uint64_t start = e.local_offset + 30 + nlen + xlen;
    MAXTEXT_CHECK(start <= size_ && e.compressed_size <= size_ - start, IoError, "[zip] ", w, ": data [", start, ", ",
                  start + e.compressed_size, ") lies outside the file (", size_, " bytes; truncated file?)");
    MAXTEXT_CHECK(nlen == e.name.size() && std::memcmp(lh + 30, e.name.data(), e.name.size()) == 0, IoError, "[zip] ", w,
                  ": the local header names another member");
    const std::byte* src = data_ + start;
    ZipBytes out;
    if (e.method == 0) {
      MAXTEXT_CHECK(e.compressed_size == e.size, IoError, "[zip] ", w, ": stored member has compressed size ",
                    e.compressed_size, " but size ", e.size);
      out.data = src;
      out.size = static_cast<std::size_t>(e.size);
      out.holder = holder_;
    } else {
      // Deflate expands at most ~1032:1; a larger claim is a corrupt (or hostile) directory, not a real member.
      MAXTEXT_CHECK(e.size <= e.compressed_size * 1032 + 1024, IoError, "[zip] ", w, ": uncompressed size ", e.size,
                    " is impossible for ", e.compressed_size, " deflated bytes");
      auto buf = std::shared_ptr<std::byte[]>(new std::byte[e.size == 0 ? 1 : static_cast<std::size_t>(e.size)]);
      inflate_raw(src, static_cast<std::size_t>(e.compressed_size), buf.get(), static_cast<std::size_t>(e.size), w);
      out.data = buf.get();
      out.size = static_cast<std::size_t>(e.size);
      out.holder = std::shared_ptr<const void>(buf, buf.get());
    }
    const std::uint32_t crc = detail::zip_crc32(out.data, out.size);
    MAXTEXT_CHECK(crc == e.crc32, IoError, "[zip] ", w, ": CRC-32 mismatch: the directory says 0x", hex(e.crc32),
                  ", the data gives 0x", hex(crc), " (corrupt file?)");
    return out;
  }

 private:
  static std::string hex(std::uint32_t v) {
    static const char* d = "0123456789abcdef";
    std::string s(8, '0');
    for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = d[v & 0xf];
    return s;
  }
  static const char* method_name(std::uint16_t m) {
    switch (m) {
      case 0: return "stored";
      case 8: return "deflate";
      case 9: return "deflate64";
      case 12: return "bzip2";
      case 14: return "lzma";
      case 93: return "zstd";
      case 95: return "xz";
      default: return "unknown";
    }
  }

  void inflate_raw(const std::byte* src, std::size_t n, std::byte* dst, std::size_t m, const std::string& w) const {
    z_stream zs{};
    MAXTEXT_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, IoError, "[zip] ", w, ": zlib inflateInit2 failed");
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(src));
    zs.next_out = reinterpret_cast<Bytef*>(dst);
    std::size_t in_left = n, out_left = m;  // not yet handed to zlib (its counters are 32-bit)
    int rc = Z_OK;
    do {
      if (zs.avail_in == 0 && in_left > 0) {
        zs.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, 1u << 30));
        in_left -= zs.avail_in;
      }
      if (zs.avail_out == 0 && out_left > 0) {
        zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out_left, 1u << 30));
        out_left -= zs.avail_out;
      }
      rc = ::inflate(&zs, Z_NO_FLUSH);
    } while (rc == Z_OK);
    const bool input_left = zs.avail_in > 0 || in_left > 0;
    const std::size_t produced = m - out_left - zs.avail_out;
    const char* msg = zs.msg;  // zlib's static strings
    inflateEnd(&zs);
    if (rc != Z_STREAM_END) {
      const char* why = msg ? msg
                            : (produced == m && input_left ? "it holds more data than the directory's size"
                                                           : "the stream ends early (truncated member?)");
      MAXTEXT_THROW(IoError, "[zip] ", w, ": corrupt deflate stream: ", why);
    }
    MAXTEXT_CHECK(produced == m, IoError, "[zip] ", w, ": inflated to ", produced, " bytes, the directory says ", m);
  }

  void parse_directory() {
    MAXTEXT_CHECK(size_ >= 22, IoError, "[zip] ", where_, ": not a zip file (", size_, " bytes, too short for the end record)");
    // The end-of-central-directory record sits in the last 22 + 65535 (comment) bytes.
    std::size_t eocd = std::string::npos;
    const std::size_t lo = size_ >= 22 + 65535 ? size_ - 22 - 65535 : 0;
    for (std::size_t p = size_ - 22 + 1; p-- > lo;) {
      if (detail::zip_u32(data_ + p) == detail::kZipEnd && p + 22 + detail::zip_u16(data_ + p + 20) <= size_) {
        eocd = p;
        break;
      }
    }
    MAXTEXT_CHECK(eocd != std::string::npos, IoError, "[zip] ", where_,
                  ": not a zip file (no end-of-central-directory record; truncated file?)");
    const std::byte* e = data_ + eocd;
    MAXTEXT_CHECK(detail::zip_u16(e + 4) == 0 && detail::zip_u16(e + 6) == 0, IoError, "[zip] ", where_,
                  ": multi-disk archives are not supported");
    std::uint64_t count = detail::zip_u16(e + 10), cd_size = detail::zip_u32(e + 12), cd_off = detail::zip_u32(e + 16);
    if (eocd >= 20 && detail::zip_u32(data_ + eocd - 20) == detail::kZipLocator64) {
      const std::uint64_t z64 = detail::zip_u64(data_ + eocd - 20 + 8);
      MAXTEXT_CHECK(z64 <= size_ && size_ - z64 >= 56 && detail::zip_u32(data_ + z64) == detail::kZipEnd64, IoError,
                    "[zip] ", where_, ": bad Zip64 end-of-central-directory record at offset ", z64);
      const std::byte* r = data_ + z64;
      count = detail::zip_u64(r + 32);
      cd_size = detail::zip_u64(r + 40);
      cd_off = detail::zip_u64(r + 48);
    }
    MAXTEXT_CHECK(cd_off <= size_ && cd_size <= size_ - cd_off, IoError, "[zip] ", where_, ": central directory [", cd_off,
                  ", ", cd_off + cd_size, ") lies outside the file (", size_, " bytes; truncated file?)");
    MAXTEXT_CHECK(count <= cd_size / 46, IoError, "[zip] ", where_, ": ", count, " entries cannot fit a ", cd_size,
                  "-byte central directory");
    std::uint64_t p = cd_off;
    const std::uint64_t end = cd_off + cd_size;
    for (std::uint64_t i = 0; i < count; ++i) {
      MAXTEXT_CHECK(end - p >= 46 && detail::zip_u32(data_ + p) == detail::kZipCentral, IoError, "[zip] ", where_,
                    ": bad central directory entry ", i, " at offset ", p);
      const std::byte* c = data_ + p;
      ZipEntry z;
      z.flags = detail::zip_u16(c + 8);
      z.method = detail::zip_u16(c + 10);
      z.crc32 = detail::zip_u32(c + 16);
      z.compressed_size = detail::zip_u32(c + 20);
      z.size = detail::zip_u32(c + 24);
      const std::uint64_t nlen = detail::zip_u16(c + 28), xlen = detail::zip_u16(c + 30), clen = detail::zip_u16(c + 32);
      const std::uint16_t disk = detail::zip_u16(c + 34);
      z.local_offset = detail::zip_u32(c + 42);
      MAXTEXT_CHECK(end - p - 46 >= nlen + xlen + clen, IoError, "[zip] ", where_, ": central directory entry ", i,
                    " overruns the directory");
      z.name.assign(reinterpret_cast<const char*>(c + 46), nlen);
      // Zip64 extra field: the 64-bit values of exactly those fields saturated at 0xFFFFFFFF, in this order.
      const bool need_size = z.size == detail::kZipMax32, need_csize = z.compressed_size == detail::kZipMax32,
                 need_off = z.local_offset == detail::kZipMax32;
      const std::byte* x = c + 46 + nlen;
      for (std::uint64_t q = 0; q + 4 <= xlen;) {
        const std::uint16_t id = detail::zip_u16(x + q), len = detail::zip_u16(x + q + 2);
        MAXTEXT_CHECK(q + 4 + len <= xlen, IoError, "[zip] ", where_, ": member '", z.name, "': malformed extra field");
        if (id == 0x0001) {
          std::uint64_t k = q + 4;
          auto take = [&](std::uint64_t& v) {
            MAXTEXT_CHECK(k + 8 <= q + 4 + len, IoError, "[zip] ", where_, ": member '", z.name,
                          "': Zip64 extra field too short");
            v = detail::zip_u64(x + k);
            k += 8;
          };
          if (need_size) take(z.size);
          if (need_csize) take(z.compressed_size);
          if (need_off) take(z.local_offset);
        }
        q += 4 + len;
      }
      MAXTEXT_CHECK(disk == 0 || disk == detail::kZipMax16, IoError, "[zip] ", where_, ": member '", z.name,
                    "' is on disk ", disk, ": multi-disk archives are not supported");
      entries_.push_back(std::move(z));
      p += 46 + nlen + xlen + clen;
    }
  }

  const std::byte* data_;
  std::size_t size_;
  std::shared_ptr<const void> holder_;
  std::string where_;
  std::vector<ZipEntry> entries_;
};

/// Builds a ZIP archive in memory. Members are stored or deflated (zlib level 6, raw deflate as in the format).
/// Zip64 records are written where a size or offset needs them, or for every member with `force_zip64`.
class ZipWriter {
 public:
  explicit ZipWriter(bool force_zip64 = false) : force_zip64_(force_zip64) {}

  /// Append a member named `name` holding `n` bytes.
  void add(const std::string& name, const void* data, std::size_t n, bool deflate) {
    MAXTEXT_CHECK(!name.empty() && name.size() < detail::kZipMax16, ArgumentError, "[zip] member name '", name,
                  "' must have 1 to 65534 bytes");
    ZipEntry e;
    e.name = name;
    e.method = deflate ? 8 : 0;
    e.flags = 0;
    for (unsigned char ch : name) {
      if (ch >= 0x80) e.flags |= 0x0800;  // bit 11: the name is UTF-8
    }
    e.size = n;
    e.crc32 = detail::zip_crc32(static_cast<const std::byte*>(data), n);
    std::vector<std::byte> packed;
    const std::byte* payload = static_cast<const std::byte*>(data);
    if (deflate) {
      packed = deflate_raw(static_cast<const std::byte*>(data), n, name);
      payload = packed.data();
    }
    e.compressed_size = deflate ? packed.size() : n;
    e.local_offset = buf_.size();
    const bool z64 = force_zip64_ || e.size >= detail::kZipMax32 || e.compressed_size >= detail::kZipMax32;
    detail::zip_put32(buf_, detail::kZipLocal);
    detail::zip_put16(buf_, z64 ? 45 : 20);
    detail::zip_put16(buf_, e.flags);
    detail::zip_put16(buf_, e.method);
    detail::zip_put16(buf_, 0);       // time 00:00
    detail::zip_put16(buf_, 0x0021);  // date 1980-01-01: reproducible archives
    detail::zip_put32(buf_, e.crc32);
    detail::zip_put32(buf_, z64 ? detail::kZipMax32 : static_cast<std::uint32_t>(e.compressed_size));
    detail::zip_put32(buf_, z64 ? detail::kZipMax32 : static_cast<std::uint32_t>(e.size));
    detail::zip_put16(buf_, static_cast<std::uint16_t>(name.size()));
    detail::zip_put16(buf_, z64 ? 20 : 0);
    detail::zip_put_bytes(buf_, name.data(), name.size());
    if (z64) {
      detail::zip_put16(buf_, 0x0001);
      detail::zip_put16(buf_, 16);
      detail::zip_put64(buf_, e.size);
      detail::zip_put64(buf_, e.compressed_size);
    }
    detail::zip_put_bytes(buf_, payload, static_cast<std::size_t>(e.compressed_size));
    entries_.push_back(std::move(e));
  }

  /// Append the central directory and end records; returns the whole archive.
  std::vector<std::byte> finish() {
    const std::uint64_t cd_off = buf_.size();
    for (const auto& e : entries_) {
      const bool big_size = force_zip64_ || e.size >= detail::kZipMax32 || e.compressed_size >= detail::kZipMax32;
      const bool big_off = force_zip64_ || e.local_offset >= detail::kZipMax32;
      const std::uint16_t xlen = static_cast<std::uint16_t>((big_size || big_off) ? 4 + (big_size ? 16 : 0) + (big_off ? 8 : 0) : 0);
      detail::zip_put32(buf_, detail::kZipCentral);
      detail::zip_put16(buf_, (3u << 8) | 45u);  // made by: UNIX, spec 4.5
      detail::zip_put16(buf_, xlen ? 45 : 20);
      detail::zip_put16(buf_, e.flags);
      detail::zip_put16(buf_, e.method);
      detail::zip_put16(buf_, 0);
      detail::zip_put16(buf_, 0x0021);
      detail::zip_put32(buf_, e.crc32);
      detail::zip_put32(buf_, big_size ? detail::kZipMax32 : static_cast<std::uint32_t>(e.compressed_size));
      detail::zip_put32(buf_, big_size ? detail::kZipMax32 : static_cast<std::uint32_t>(e.size));
      detail::zip_put16(buf_, static_cast<std::uint16_t>(e.name.size()));
      detail::zip_put16(buf_, xlen);
      detail::zip_put16(buf_, 0);          // comment
      detail::zip_put16(buf_, 0);          // disk
      detail::zip_put16(buf_, 0);          // internal attributes
      detail::zip_put32(buf_, 0644u << 16);  // external attributes: -rw-r--r--
      detail::zip_put32(buf_, big_off ? detail::kZipMax32 : static_cast<std::uint32_t>(e.local_offset));
      detail::zip_put_bytes(buf_, e.name.data(), e.name.size());
      if (xlen) {
        detail::zip_put16(buf_, 0x0001);
        detail::zip_put16(buf_, static_cast<std::uint16_t>(xlen - 4));
        if (big_size) {
          detail::zip_put64(buf_, e.size);
          detail::zip_put64(buf_, e.compressed_size);
        }
        if (big_off) detail::zip_put64(buf_, e.local_offset);
      }
    }
    const std::uint64_t cd_size = buf_.size() - cd_off, n = entries_.size();
    const bool z64 = force_zip64_ || n >= detail::kZipMax16 || cd_off >= detail::kZipMax32 || cd_size >= detail::kZipMax32;
    if (z64) {
      const std::uint64_t rec = buf_.size();
      detail::zip_put32(buf_, detail::kZipEnd64);
      detail::zip_put64(buf_, 44);  // size of the rest of this record
      detail::zip_put16(buf_, (3u << 8) | 45u);
      detail::zip_put16(buf_, 45);
      detail::zip_put32(buf_, 0);
      detail::zip_put32(buf_, 0);
      detail::zip_put64(buf_, n);
      detail::zip_put64(buf_, n);
      detail::zip_put64(buf_, cd_size);
      detail::zip_put64(buf_, cd_off);
      detail::zip_put32(buf_, detail::kZipLocator64);
      detail::zip_put32(buf_, 0);
      detail::zip_put64(buf_, rec);
      detail::zip_put32(buf_, 1);
    }
    detail::zip_put32(buf_, detail::kZipEnd);
    detail::zip_put16(buf_, 0);
    detail::zip_put16(buf_, 0);
    detail::zip_put16(buf_, z64 ? detail::kZipMax16 : static_cast<std::uint16_t>(n));
    detail::zip_put16(buf_, z64 ? detail::kZipMax16 : static_cast<std::uint16_t>(n));
    detail::zip_put32(buf_, z64 ? detail::kZipMax32 : static_cast<std::uint32_t>(cd_size));
    detail::zip_put32(buf_, z64 ? detail::kZipMax32 : static_cast<std::uint32_t>(cd_off));
    detail::zip_put16(buf_, 0);
    entries_.clear();
    return std::move(buf_);
  }

 private:
  static std::vector<std::byte> deflate_raw(const std::byte* src, std::size_t n, const std::string& name) {
    z_stream zs{};
    MAXTEXT_CHECK(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, IoError,
                  "[zip] member '", name, "': zlib deflateInit2 failed");
    std::vector<std::byte> out;
    std::vector<std::byte> chunk(1u << 20);
    std::size_t left = n;
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(src));
    int rc = Z_OK;
    do {
      const auto ci = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
      zs.avail_in = ci;
      const int flush = left == ci ? Z_FINISH : Z_NO_FLUSH;
      do {
        zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
        zs.avail_out = static_cast<uInt>(chunk.size());
        rc = ::deflate(&zs, flush);
        out.insert(out.end(), chunk.data(), chunk.data() + (chunk.size() - zs.avail_out));
      } while (zs.avail_out == 0);
      left -= ci - zs.avail_in;
    } while (rc != Z_STREAM_END && rc >= 0);
    deflateEnd(&zs);
    MAXTEXT_CHECK(rc == Z_STREAM_END, IoError, "[zip] member '", name, "': zlib deflate failed (", rc, ")");
    return out;
  }

  bool force_zip64_;
  std::vector<std::byte> buf_;
  std::vector<ZipEntry> entries_;
};

}  // namespace maxtext::io
