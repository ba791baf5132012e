// tests/support/cli.hpp: running the `maxtext` program (MAXTEXT_CLI) from a test, and the greedy token a fixture's
// reference logits imply, for the model-family tests' `maxtext generate` checks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "support/test_support.hpp"

namespace maxtext::test {

/// Runs `maxtext ARGS` with stdout and stderr captured in a file of the working directory; returns what it printed
/// (empty on a non-zero exit, which fails the check; the command and its output are logged with the failure).
inline std::string run_cli(const std::string& args) {
  const std::string out =
      (std::filesystem::current_path() / ("maxtext_test_cli_" + std::to_string(::getpid()) + ".txt")).string();
  const std::string cmd = std::string(MAXTEXT_CLI) + " " + args + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string text = io::read_text_file(out);
  std::remove(out.c_str());
  INFO(cmd << "\n" << text);
  CHECK(rc == 0);
  return rc == 0 ? text : std::string();
}

/// For a fixture directory holding tokens.npy [B, T] and logits.npy [B, T, V] (the float64 reference's): sets `ids` to
/// the first 5 tokens of row 0 ("a,b,c,d,e") and returns the line `maxtext generate --max-new-tokens 1` prints when
/// its one greedy token is the argmax of the reference's logits at position 4 ("tokens[0]: ID\n").
inline std::string greedy_after_prompt(const std::string& dir, std::string& ids) {
  const AnyTensor tok = npy(dir + "/tokens.npy");
  const AnyTensor ref = npy(dir + "/logits.npy");
  REQUIRE(tok.shape.size() == 2);
  REQUIRE(tok.shape[1] >= 5);
  ids.clear();
  for (std::int64_t t = 0; t < 5; ++t) ids += (t ? "," : "") + std::to_string(static_cast<std::int64_t>(tok.element(t)));
  std::int64_t best = 0;
  const std::int64_t V = ref.shape[2];
  for (std::int64_t v = 1; v < V; ++v) {
    if (ref.element(4 * V + v) > ref.element(4 * V + best)) best = v;
  }
  return "tokens[0]: " + std::to_string(best) + "\n";
}

}  // namespace maxtext::test
