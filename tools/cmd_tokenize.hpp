// tools/cmd_tokenize.hpp: the `maxtext` tool's text side: configs taken from weights files (GGUF metadata, llama2.c
// header, config.json beside Hugging Face safetensors), tokenizers, and `maxtext tokenize` / `detokenize`
// (generated text streams through models/text_stream.hpp).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

namespace maxtext::cli {

/// The config of a model given only its weights (plus `key=value` overrides); UnsupportedError for weights that do
/// not carry one (MaxText safetensors need --config).
inline Config config_from_weights(const std::string& weights, const std::vector<std::string>& overrides) {
  std::optional<Config> c = io::read_weights_config(weights);
  MAXTEXT_CHECK(c.has_value(), ArgumentError, "--weights ", weights,
                ": MaxText safetensors carry no model configuration; give --config");
  for (const auto& o : overrides) io::apply_override(*c, o);
  c->derive();
  c->validate();
  return *c;
}

/// The tokenizer for the command line: --tokenizer FILE, else the one the weights carry or have beside them.
inline std::unique_ptr<tokenizer::Tokenizer> open_cli_tokenizer(const std::string& weights, const std::string& tokenizer_file,
                                                                std::int64_t vocab_size) {
  return tokenizer::load_tokenizer(weights, tokenizer_file, vocab_size);
}

/// "on" / "off" (also true/false, 1/0) for option --`name`.
inline bool on_off(const std::string& v, const char* name) {
  if (v == "on" || v == "true" || v == "1") return true;
  if (v == "off" || v == "false" || v == "0") return false;
  MAXTEXT_THROW(ArgumentError, "--", name, " takes on or off, not '", v, "'");
}

/// The whole of a text file, byte for byte.
inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MAXTEXT_CHECK(f.good(), IoError, "--text-file ", path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// `maxtext tokenize (--weights FILE | --tokenizer PATH) --text "..." [--add-special on|off]`: the ids comma-separated
/// on one line (add_special: the post-processor's special tokens / BOS, the tokenizer's default rule when on).
inline int run_tokenize(const std::string& weights, const std::string& tokenizer_file, const std::string& text,
                        std::int64_t vocab_size, bool add_special = true) {
  const auto tk = open_cli_tokenizer(weights, tokenizer_file, vocab_size);
  const auto ids = add_special ? tk->encode(text) : tk->encode(text, false);
  for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
  std::cout << "\n";
  return 0;
}

/// `maxtext detokenize (--weights FILE | --tokenizer PATH) --ids 1,2,3 [--skip-special on|off]`: the text on stdout,
/// nothing added.
inline int run_detokenize(const std::string& weights, const std::string& tokenizer_file, const std::string& ids_csv,
                          std::int64_t vocab_size, bool skip_special = true) {
  std::vector<std::int32_t> ids;
  std::size_t pos = 0;
  while (pos < ids_csv.size()) {
    const std::size_t comma = std::min(ids_csv.find(',', pos), ids_csv.size());
    const std::string item = ids_csv.substr(pos, comma - pos);
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MAXTEXT_CHECK(used == item.size() && !item.empty() && v >= INT32_MIN && v <= INT32_MAX, ArgumentError,
                  "--ids: '", item, "' is not a token id");
    ids.push_back(static_cast<std::int32_t>(v));
    pos = comma + 1;
  }
  const auto tk = open_cli_tokenizer(weights, tokenizer_file, vocab_size);
  const std::string text = tk->decode(ids, skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace maxtext::cli
