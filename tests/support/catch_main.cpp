// The Catch2 v2 main shared by every test program. Each test process runs in a fresh working directory of its own,
// so tests that write scratch files ("bad.npy", "rt.safetensors", ...) never collide when CTest runs them in parallel
// and leave nothing behind: the directory is removed when the program ends normally.
// The library finds configs/models/<model_name>.yml through $MAXTEXT_CONFIG_DIR: unless it is set, it points at the
// checkout's configs/ (found relative to this program, support/test_support.hpp; no absolute path is compiled in).
#define CATCH_CONFIG_RUNNER
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

int main(int argc, char* argv[]) {
  namespace fs = std::filesystem;
  if (std::getenv("MAXTEXT_CONFIG_DIR") == nullptr) ::setenv("MAXTEXT_CONFIG_DIR", maxtext::test::config_dir().c_str(), 0);
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec) / ("maxtext-test-" + std::to_string(::getpid()));
  fs::create_directories(dir, ec);
  if (!ec) fs::current_path(dir, ec);
  Catch::Session session;
  int result = session.applyCommandLine(argc, argv);
  if (result == 0) {
    // A test spec that matches no test case fails (exit 2) instead of passing with nothing run: CTest runs each case
    // by name, and a renamed or mis-escaped name must not turn into a silent pass.
    auto& data = session.configData();
    data.warnings = static_cast<Catch::WarnAbout::What>(data.warnings | Catch::WarnAbout::NoTests);
    result = session.run();
  }
  if (!ec) {
    fs::current_path(fs::temp_directory_path(ec), ec);
    fs::remove_all(dir, ec);
  }
  return result;
}
