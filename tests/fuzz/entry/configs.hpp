// tests/fuzz/entry/configs.hpp: fuzz entry points for model configs: MaxText YAML files (apply_yaml_file) and
// key=value overrides (each line of the input), and Hugging Face config.json (config_from_hf_file, eos ids, tied
// embeddings). Every config that loads is also validated.
#pragma once

#include <sstream>

#include "fuzz_common.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/io/generation_config.hpp"
#include "maxtext/io/yaml_config.hpp"

namespace maxtext::fuzz {

inline void fuzz_yaml_config(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "input.yml");
  attempt([&] {
    Config cfg;
    io::apply_yaml_file(cfg, path);
    cfg.validate();
  });
  Config cfg;
  std::istringstream lines{std::string(as_text(data, size))};
  std::string line;
  while (std::getline(lines, line)) {
    attempt([&] { io::apply_override(cfg, line); });
  }
  attempt([&] { cfg.validate(); });
}

inline void fuzz_hf_config(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "config.json");
  attempt([&] { io::config_from_hf_file(path).validate(); });
  (void)io::hf_tied_embeddings(path);
  attempt([&] {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(as_text(data, size));
    } catch (const nlohmann::json::exception&) {
      return;
    }
    (void)io::eos_ids_from_json(j, path);
  });
}

}  // namespace maxtext::fuzz
