// tests/support/cli.hpp: running the `maxtext` program (test::cli_path()) from a test: its output, the greedy token a
// fixture's reference logits imply, and `maxtext logits` on a fixture against those logits (the model-family tests'
// CLI checks: MaxText checkpoints, Hugging Face directories, GGUF files).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"

namespace maxtext::test {

/// Runs `maxtext ARGS` with stdout and stderr captured in a file of the working directory; returns what it printed
/// (empty on a non-zero exit, which fails the check; the command and its output are logged with the failure).
inline std::string run_cli(const std::string& args) {
  const std::string out =
      (std::filesystem::current_path() / ("maxtext_test_cli_" + std::to_string(::getpid()) + ".txt")).string();
  const std::string cmd = ::maxtext::test::cli_path() + " " + args + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string text = io::read_text_file(out);
  std::remove(out.c_str());
  INFO(cmd << "\n" << text);
  CHECK(rc == 0);
  return rc == 0 ? text : std::string();
}

/// Runs `maxtext ARGS` as run_cli(args) does, for a run that may fail: its output whatever the exit status, which
/// `rc` receives.
inline std::string run_cli(const std::string& args, int& rc) {
  const std::string out =
      (std::filesystem::current_path() / ("maxtext_test_cli_" + std::to_string(::getpid()) + ".txt")).string();
  rc = std::system((::maxtext::test::cli_path() + " " + args + " > " + out + " 2>&1").c_str());
  std::string text = io::read_text_file(out);
  std::remove(out.c_str());
  return text;
}

/// Runs `maxtext ARGS`, which must fail (a refusal a test checks the message of): its output, logged with a failure.
inline std::string run_cli_failing(const std::string& args) {
  int rc = 0;
  std::string text = run_cli(args, rc);
  INFO(args << "\n" << text);
  CHECK(rc != 0);
  return text;
}

/// `maxtext generate --weights WEIGHTS --max-new-tokens 1` on the first 5 tokens of row 0 of the fixture's tokens.npy
/// must print the greedy token of its reference (the argmax of logits.npy at position 4).
inline void check_cli_greedy(const std::string& fixture_dir, const std::string& weights) {
  const AnyTensor tok = npy(fixture_dir + "/tokens.npy");
  const AnyTensor ref = npy(fixture_dir + "/logits.npy");
  REQUIRE(tok.shape.size() == 2);
  REQUIRE(tok.shape[1] >= 5);
  std::string ids;
  for (std::int64_t t = 0; t < 5; ++t) ids += (t ? "," : "") + std::to_string(static_cast<std::int64_t>(tok.element(t)));
  std::int64_t best = 0;
  const std::int64_t V = ref.shape[2];
  for (std::int64_t v = 1; v < V; ++v) {
    if (ref.element(4 * V + v) > ref.element(4 * V + best)) best = v;
  }
  const std::string text = run_cli("generate --weights " + weights + " --tokens " + ids + " --max-new-tokens 1");
  CHECK(text.find("tokens[0]: " + std::to_string(best) + "\n") != std::string::npos);
}

/// `maxtext generate` with seeded weights from a model file of configs/models (`yml_and_overrides`: "name.yml
/// key=value ..."): two prompt rows, 4 new tokens; both rows must generate.
inline void check_cli_generates_seeded(const std::string& yml_and_overrides) {
  const std::string text = run_cli("generate --config " + ::maxtext::test::config_dir() + "/models/" +
                                   yml_and_overrides + " --tokens 1,2,3/4,5 --max-new-tokens 4 --seed 3");
  CHECK(text.find("tokens[1]: ") != std::string::npos);
}

/// Writes a fixture's config (meta.json's "config") as a MaxText YAML file at `path` (one `key: value` line each; JSON
/// scalars, strings and lists are YAML flow values) and returns `path`: the `--config` of a MaxText checkpoint.
inline std::string write_fixture_yml(const std::string& dir, const std::string& path) {
  const nlohmann::json meta = read_meta(dir);  // kept alive: a range-for over a temporary's member would dangle
  std::ofstream f(path);
  for (const auto& [k, v] : meta.at("config").items()) f << k << ": " << v.dump() << "\n";
  REQUIRE(f.good());
  return path;
}

/// `maxtext logits ARGS` on every row of the fixture's tokens.npy (the last 3 positions decoded one at a time through
/// the KV cache), compared with its `reference` (default logits.npy) within `tol`.
inline void check_cli_logits(const std::string& dir, const std::string& args, testing::Tolerance tol,
                             const std::string& reference = "logits.npy") {
  const AnyTensor tok = npy(dir + "/tokens.npy");
  REQUIRE(tok.shape.size() == 2);
  std::string ids;
  for (std::int64_t b = 0; b < tok.shape[0]; ++b) {
    for (std::int64_t t = 0; t < tok.shape[1]; ++t) {
      ids += (t ? "," : (b ? "/" : "")) + std::to_string(static_cast<std::int64_t>(tok.element(b * tok.shape[1] + t)));
    }
  }
  const std::string out =
      (std::filesystem::current_path() / ("maxtext_test_cli_logits_" + std::to_string(::getpid()) + ".npy")).string();
  const std::string text = run_cli("logits " + args + " --tokens " + ids + " --incremental 3 --out " + out);
  if (text.empty()) return;  // run_cli failed the check and logged why
  expect_close(npy(out), npy(dir + "/" + reference), tol, "maxtext logits " + args);
  std::remove(out.c_str());
}

/// A fixture's MaxText checkpoint through the CLI (`--config` = its config written as a YAML file; model.safetensors,
/// and model_scanned.safetensors with scan_layers=true when present) and, with `hf`, its Hugging Face directory (hf/),
/// each through `maxtext logits` against the fixture's logits.npy.
inline void check_cli_checkpoints(const std::string& dir, testing::Tolerance tol, bool hf = true) {
  const std::string yml = write_fixture_yml(
      dir, (std::filesystem::current_path() / ("maxtext_test_cli_" + std::to_string(::getpid()) + ".yml")).string());
  check_cli_logits(dir, "--config " + yml + " --weights " + dir + "/model.safetensors", tol);
  if (std::filesystem::exists(dir + "/model_scanned.safetensors")) {
    check_cli_logits(dir, "--config " + yml + " --weights " + dir + "/model_scanned.safetensors scan_layers=true", tol);
  }
  if (hf) check_cli_logits(dir, "--weights " + dir + "/hf", tol);
  std::remove(yml.c_str());
}

}  // namespace maxtext::test
