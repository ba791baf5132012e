// core/mapped_pages.hpp: pages of a read-only file mapping are dropped from the resident set once packed, and read
// back unchanged; memory that is not a registered mapping is never touched.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/io/mapped_file.hpp"

using namespace maxtext;

namespace {

/// The rest of the line `field` (e.g. "Rss:", "VmFlags:") of the mapping that holds `p`, from /proc/self/smaps
/// (empty when not found).
std::string smaps_field(const void* p, const std::string& field) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(f, line)) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') != std::string::npos &&
        line.find('-') < line.find(' ')) {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && line.rfind(field, 0) == 0) return line.substr(field.size());
  }
  return {};
}

/// Resident kB of the mapping that holds `p` (-1 when not found).
long resident_kb(const void* p) {
  const std::string rss = smaps_field(p, "Rss:");
  return rss.empty() ? -1 : std::stol(rss);
}

std::string write_floats(const std::vector<float>& v) {
  const std::string path = "mapped_pages_test.bin";
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return path;
}

std::vector<float> pattern(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i % 251) - 125) / 64.0f;
  return v;
}

}  // namespace

TEST_CASE("Dropped pages of a read-only mapping leave the resident set and read back unchanged", "[io][mmap]") {
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t n = static_cast<std::size_t>(64 * page) / sizeof(float);
  const std::vector<float> v = pattern(n);
  const std::string path = write_floats(v);
  {
    auto file = io::MappedFile::open(path);
    const auto* p = reinterpret_cast<const float*>(file->data());
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += p[i];  // touch every page
    CHECK(sum != 0.0);
    const long before = resident_kb(p);
    REQUIRE(before >= 64 * page / 1024);
    // An unaligned range: only the whole pages inside it (62 of 64) are dropped.
    const std::size_t dropped = drop_mapped_pages(file->data() + 100, file->size() - 200);
    CHECK(dropped == static_cast<std::size_t>(62 * page));
    CHECK(resident_kb(p) <= 2 * page / 1024);
    CHECK(std::memcmp(p, v.data(), file->size()) == 0);  // faulted back in from the page cache
    // A range running past the mapping's end is not the mapping's: nothing is dropped.
    CHECK(drop_mapped_pages(file->data() + page, file->size()) == 0);
  }
  std::remove(path.c_str());
}

TEST_CASE("A mapped file asks for huge pages where the kernel has them, and reads the same", "[io][mmap]") {
  // The kernel marks a mapping advised MADV_HUGEPAGE with "hg" in its VmFlags. Without transparent huge pages built
  // in (no sysfs directory) the advice is refused and the mapping stays as it was.
  const bool thp = std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
  const std::vector<float> v = pattern(std::size_t{3} << 18);  // 3 MiB: room for one aligned 2 MiB page
  const std::string path = write_floats(v);
  {
    auto file = io::MappedFile::open(path);
    std::istringstream flags(smaps_field(file->data(), "VmFlags:"));
    std::vector<std::string> fl{std::istream_iterator<std::string>(flags), std::istream_iterator<std::string>()};
    REQUIRE(!fl.empty());  // the mapping is found
    const bool hg = std::find(fl.begin(), fl.end(), "hg") != fl.end();
    if (thp) {
      CHECK(hg);
    } else {
      WARN("no transparent huge pages in this kernel: the hint is not checked");
      CHECK(!hg);
    }
    CHECK(std::memcmp(file->data(), v.data(), file->size()) == 0);
  }
  std::remove(path.c_str());
}

TEST_CASE("Memory that is not a registered file mapping is never dropped", "[io][mmap]") {
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<float> heap = pattern(static_cast<std::size_t>(16 * page) / sizeof(float));
  const std::vector<float> copy = heap;
  CHECK(drop_mapped_pages(heap.data(), heap.size() * sizeof(float)) == 0);
  CHECK(heap == copy);
  CHECK(drop_mapped_pages(nullptr, 4096) == 0);
}

TEST_CASE("CPU prepare packs a mapped matrix, drops its pages, and products and gathers are unchanged", "[io][mmap]") {
  const std::int64_t N = 96, K = 256;  // 96 KiB of f32 weights
  const std::vector<float> v = pattern(static_cast<std::size_t>(N * K));
  const std::string path = write_floats(v);
  {
    auto file = io::MappedFile::open(path);
    auto* p = reinterpret_cast<float*>(const_cast<std::byte*>(file->data()));
    Matrix<float> mapped, heap;
    mapped.rows = heap.rows = N;
    mapped.cols = heap.cols = K;
    mapped.data = Tensor<float, 2>(View<float, 2>(p, {N, K}), file);
    heap.data = Tensor<float, 2>({N, K});
    std::memcpy(heap.data.data(), v.data(), v.size() * sizeof(float));

    cpu::Backend be(cpu::Options{1, false});
    for (std::size_t i = 0; i < v.size(); i += 1024) CHECK(p[i] == v[i]);  // resident before packing
    mapped = be.prepare(std::move(mapped));
    heap = be.prepare(std::move(heap));
    REQUIRE(mapped.packed);
    CHECK(resident_kb(p) <= 2 * ::sysconf(_SC_PAGESIZE) / 1024);

    Tensor<float, 2> x({3, K}), y1({3, N}), y2({3, N});
    for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(i % 17) - 8.0f;
    be.matmul(View<const float, 2>(x.view()), mapped, y1.view());
    be.matmul(View<const float, 2>(x.view()), heap, y2.view());
    CHECK(std::memcmp(y1.data(), y2.data(), static_cast<std::size_t>(y1.size()) * sizeof(float)) == 0);

    Tensor<std::int32_t, 1> ids({2});
    ids(0) = 5;
    ids(1) = 90;
    Tensor<float, 2> rows({2, K});
    be.embed(mapped, View<const std::int32_t, 1>(ids.view()), rows.view());
    CHECK(std::memcmp(&rows(0, 0), &v[5 * K], K * sizeof(float)) == 0);
    CHECK(std::memcmp(&rows(1, 0), &v[90 * K], K * sizeof(float)) == 0);
  }
  std::remove(path.c_str());
}
