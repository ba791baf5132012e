// tests/support/command.hpp: run a shell command from a test (the `maxtext` program, node, Python) and read what it
// printed. One helper for the tests that drive programs.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <catch2/catch.hpp>

namespace maxtext::test {

/// `cmd` through the shell: its standard output (append " 2>&1" for standard error too), and in `exit_code` its exit
/// status (the shell's: 127 when the program is missing; -1 when it did not exit normally).
inline std::string command_output(const std::string& cmd, int& exit_code) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

/// command_output that requires exit status 0; the output is shown when it is not.
inline std::string run_command(const std::string& cmd) {
  int rc = 0;
  std::string out = command_output(cmd, rc);
  INFO(cmd << "\n" << out);
  REQUIRE(rc == 0);
  return out;
}

}  // namespace maxtext::test
