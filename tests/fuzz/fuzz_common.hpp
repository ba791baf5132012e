// tests/fuzz/fuzz_common.hpp: helpers shared by the fuzz entry points (tests/fuzz/entry/*.hpp), which the libFuzzer
// harnesses (fuzz_*.cpp) and the regression test (tests/io/test_fuzz_regressions.cpp) both call.
// An entry point takes arbitrary bytes and returns normally when the library either accepts them or refuses them
// with a maxtext::Error; any other exception, a crash, a sanitizer report, a hang or a huge allocation is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <unistd.h>

#include "maxtext/core/error.hpp"
#include "maxtext/io/mapped_file.hpp"

namespace maxtext::fuzz {

/// Runs `f`; a maxtext::Error (a clean refusal) is an accepted outcome. Returns whether `f` completed.
template <class F>
bool attempt(F&& f) {
  try {
    f();
    return true;
  } catch (const maxtext::Error&) {
    return false;
  }
}

/// A private directory for this process's temporary input files ($TMPDIR or /tmp), removed at exit.
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    dir_ = std::filesystem::path(t && *t ? t : "/tmp") / ("maxtext-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

/// The process's temporary directory (created on first use).
inline const std::filesystem::path& temp_dir() {
  static TempDir d;
  return d.path();
}

/// Writes `data` to `<temp dir>/<name>` (readers that take a path read the fuzz input from there) and returns the path.
inline std::string write_temp(const std::uint8_t* data, std::size_t size, const std::string& name) {
  const std::string p = (temp_dir() / name).string();
  io::write_file(p, data, size);
  return p;
}

/// The input as text.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace maxtext::fuzz
