// tests/io/test_fuzz_regressions.cpp: every input under tests/fuzz/regressions/<harness>/ (crashes, leaks, timeouts
// and oversized allocations the fuzzers found, kept after the readers were fixed) goes through the same entry point
// as the libFuzzer harness tests/fuzz/fuzz_<harness>.cpp. The entry points accept an input or refuse it with a
// maxtext::Error (which they swallow); anything else (another exception type, a crash) fails here.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "entry/chat_template.hpp"
#include "entry/configs.hpp"
#include "entry/gguf.hpp"
#if defined(MAXTEXT_WITH_IMAGE)
#include "entry/image.hpp"
#endif
#if defined(MAXTEXT_WITH_AUDIO)
#include "entry/audio.hpp"
#endif
#include "entry/grammar.hpp"
#include "entry/server.hpp"
#include "entry/session.hpp"
#include "entry/llama2c.hpp"
#include "entry/npy.hpp"
#include "entry/q8_0.hpp"
#include "entry/quant_blocks.hpp"
#include "entry/safetensors.hpp"
#include "entry/tokenizers.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;
using Entry = std::function<void(const std::uint8_t*, std::size_t)>;

namespace {

const std::map<std::string, Entry>& entries() {
  using namespace maxtext::fuzz;
  static const std::map<std::string, Entry> m = {
      {"gguf", fuzz_gguf},
      {"safetensors", fuzz_safetensors},
      {"safetensors_index", fuzz_safetensors_index},
      {"npy", fuzz_npy},
      {"npz", fuzz_npz},
      {"llama2c", fuzz_llama2c},
      {"llama2c_tokenizer", fuzz_llama2c_tokenizer},
      {"hf_tokenizer", fuzz_hf_tokenizer},
#if defined(MAXTEXT_WITH_SENTENCEPIECE)
      {"spm_model", fuzz_spm_model},
#endif
      {"chat_template", fuzz_chat_template},
      {"grammar", fuzz_grammar},
      {"json_schema", fuzz_json_schema},
      {"openai_request", fuzz_openai_request},
#if defined(MAXTEXT_WITH_IMAGE)
      {"image", fuzz_image},
#endif
#if defined(MAXTEXT_WITH_AUDIO)
      {"audio", fuzz_audio},
#endif
      {"yaml_config", fuzz_yaml_config},
      {"hf_config", fuzz_hf_config},
      {"q8_0", fuzz_q8_0},
      {"quant_blocks", fuzz_quant_blocks},
      {"session_file", fuzz_session_file},
  };
  return m;
}

std::vector<std::uint8_t> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("fuzz regressions: every committed input is accepted or refused with maxtext::Error", "[io][fuzz]") {
  const fs::path dir = fs::path(::maxtext::test::source_dir()) / "tests/fuzz/regressions";
  REQUIRE(fs::is_directory(dir));
  std::size_t n = 0;
  for (const auto& sub : fs::directory_iterator(dir)) {
    if (!sub.is_directory()) continue;
    const std::string harness = sub.path().filename().string();
    const auto it = entries().find(harness);
#if !defined(MAXTEXT_WITH_SENTENCEPIECE)
    if (harness == "spm_model") continue;
#endif
    INFO("harness directory " << sub.path());
    REQUIRE(it != entries().end());
    for (const auto& f : fs::directory_iterator(sub.path())) {
      if (!f.is_regular_file() || f.path().extension() == ".md") continue;
      const auto bytes = slurp(f.path());
      INFO("input " << f.path());
      REQUIRE_NOTHROW(it->second(bytes.data(), bytes.size()));
      ++n;
    }
  }
  INFO(n << " regression inputs");
  CHECK(n > 0);
}

TEST_CASE("fuzz entry points: the empty input and a one-byte input are refused cleanly", "[io][fuzz]") {
  const std::uint8_t one[1] = {0x7f};
  for (const auto& [name, fn] : entries()) {
    INFO(name);
    REQUIRE_NOTHROW(fn(one, 0));
    REQUIRE_NOTHROW(fn(one, 1));
  }
}

// Found by fuzz_hf_config: a boolean key holding a number escaped config_from_hf as a nlohmann::json type_error.
TEST_CASE("config.json: keys of the wrong type are refused with IoError naming the key", "[io][fuzz][hf]") {
  const nlohmann::json base = nlohmann::json::parse(R"({"model_type": "qwen3", "hidden_size": 32,
    "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
    "vocab_size": 80, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0})");
  REQUIRE_NOTHROW(maxtext::io::config_from_hf(base, "base.json"));
  const std::pair<const char*, nlohmann::json> bad[] = {{"attention_bias", 48},
                                                        {"mlp_bias", "no"},
                                                        {"tie_word_embeddings", 1},
                                                        {"hidden_act", 3},
                                                        {"rope_scaling", "linear"},
                                                        {"rope_scaling", {{"rope_type", "linear"}, {"factor", "2"}}}};
  for (const auto& [key, value] : bad) {
    nlohmann::json j = base;
    j[key] = value;
    INFO(j.dump());
    REQUIRE_THROWS_AS(maxtext::io::config_from_hf(j, "bad.json"), maxtext::IoError);
    REQUIRE_THROWS_WITH(maxtext::io::config_from_hf(j, "bad.json"),
                        Catch::Contains("bad.json") && Catch::Contains(key));
  }
}

// Found while fuzzing YAML configs: a complex key (`? [a, b]`) escaped apply_yaml_node as yaml-cpp's
// TypedBadConversion.
TEST_CASE("YAML config: a key that is not a plain name is refused with ConfigError naming the file", "[io][fuzz][yaml]") {
  maxtext::Config cfg;
  REQUIRE_THROWS_AS(maxtext::io::apply_yaml_node(cfg, YAML::Load("? [a, b]\n: 1\n"), "bad.yml"), maxtext::ConfigError);
  REQUIRE_THROWS_WITH(maxtext::io::apply_yaml_node(cfg, YAML::Load("? {x: 1}\n: 1\n"), "bad.yml"),
                      Catch::Contains("bad.yml") && Catch::Contains("plain names"));
  REQUIRE_NOTHROW(maxtext::io::apply_yaml_node(cfg, YAML::Load("base_emb_dim: 8\n"), "good.yml"));
}

TEST_CASE("Shape guard: an empty outer axis before extents of 2^40 is refused by the npy, safetensors and GGUF readers "
          "with the file and shape named", "[io][fuzz][errors]") {
  // Before io::checked_numel these loaded, and only UBSan saw AnyTensor::dense_strides overflow int64.
  const fs::path dir = fs::path(::maxtext::test::source_dir()) / "tests/fuzz/regressions";
  const std::string npy = (dir / "npy" / "empty_axis_overflowing_strides.npy").string();
  const std::string st = (dir / "safetensors" / "empty_axis_overflowing_strides.safetensors").string();
  const std::string gguf = (dir / "gguf" / "empty_axis_overflowing_strides.gguf").string();
  CHECK_THROWS_WITH(maxtext::io::read_npy(npy), Catch::Contains(npy) && Catch::Contains("exceeds 2^50"));
  CHECK_THROWS_WITH(maxtext::io::read_safetensors(st),
                    Catch::Contains(st) && Catch::Contains("[0,1099511627776,1099511627776]") &&
                        Catch::Contains("exceeds 2^50"));
  CHECK_THROWS_WITH(maxtext::io::read_gguf(gguf), Catch::Contains("tensor t") && Catch::Contains("exceeds 2^50"));
}
