// tests/support/test_support.hpp: locations of fixtures and shared model files, skipping, and tolerance checks.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <catch2/catch.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/testing/compare.hpp"

namespace maxtext::test {

/// Paths are found relative to the running test program (CMake compiles in relative paths from the program's folder
/// to the source tree, ../shared and the `maxtext` program: MAXTEXT_TEST_*_FROM_EXE), never as absolute paths, so
/// that a test's object file is the same in every checkout and a compiler cache (ccache, scripts/build.sh) can reuse
/// it in a fresh clone.
inline std::string from_exe(const char* relative) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path() / relative).lexically_normal().string();
}
/// The checkout the test program was built from.
inline std::string source_dir() { return from_exe(MAXTEXT_TEST_ROOT_FROM_EXE); }
/// Committed fixtures (tests/fixtures), written by the PyTorch scripts in tests/reference.
inline std::string fixtures_dir() { return source_dir() + "/tests/fixtures"; }
/// The model configs (configs/); catch_main.cpp also points $MAXTEXT_CONFIG_DIR here when it is unset, for the
/// library's own search by model_name.
inline std::string config_dir() { return source_dir() + "/configs"; }
/// The `maxtext` program of the same build.
inline std::string cli_path() { return from_exe(MAXTEXT_TEST_CLI_FROM_EXE); }

/// ../shared next to the checkout, or $MAXTEXT_SHARED_DIR.
inline std::string shared_dir() {
  if (const char* e = std::getenv("MAXTEXT_SHARED_DIR")) return e;
  return from_exe(MAXTEXT_TEST_SHARED_FROM_EXE);
}
/// Real model files: $MAXTEXT_MODELS_DIR or <shared>/models.
inline std::string models_dir() {
  if (const char* e = std::getenv("MAXTEXT_MODELS_DIR")) return e;
  return shared_dir() + "/models";
}
/// Independent reference cases: $MAXTEXT_REFERENCE_DIR or <shared>/reference.
inline std::string reference_dir() {
  if (const char* e = std::getenv("MAXTEXT_REFERENCE_DIR")) return e;
  return shared_dir() + "/reference";
}

/// Catch2 v2 has no SKIP: print why and exit 77, which CTest reports as skipped (SKIP_RETURN_CODE 77).
[[noreturn]] inline void skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::error_code ec;  // leave the per-process scratch directory made by catch_main.cpp
  const auto dir = std::filesystem::current_path(ec);
  if (!ec && dir.filename().string().rfind("maxtext-test-", 0) == 0) {
    std::filesystem::current_path(dir.parent_path(), ec);
    std::filesystem::remove_all(dir, ec);
  }
  std::_Exit(77);
}
/// Skip the test unless `path` exists.
inline std::string require(const std::string& path, const std::string& what) {
  if (!std::filesystem::exists(path)) skip(what + " not found at " + path + " (set the environment variable to point at it)");
  return path;
}

inline AnyTensor npy(const std::string& path) { return io::read_npy(path); }

/// CHECK that `actual` is within `tol` of `expected`, printing the worst element when not.
inline void expect_close(const AnyTensor& actual, const AnyTensor& expected, testing::Tolerance tol,
                         const std::string& name) {
  const auto r = testing::compare(actual, expected, tol);
  INFO(r.message(name));
  CHECK(r.ok());
}
template <class T, int R>
void expect_close(const Tensor<T, R>& actual, const AnyTensor& expected, testing::Tolerance tol, const std::string& name) {
  expect_close(AnyTensor::from(actual), expected, tol, name);
}
/// The shared reference suite's criterion: max |a - e| <= tol * max(1, max |e|) against the f64 outputs.
inline void expect_close_scaled(const AnyTensor& actual, const AnyTensor& expected, double tol, const std::string& name) {
  const auto r = testing::compare_scaled(actual, expected, tol);
  INFO(r.message(name));
  CHECK(r.ok());
}

}  // namespace maxtext::test
