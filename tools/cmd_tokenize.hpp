// tools/cmd_tokenize.hpp: the `maxtext` tool's text side: configs taken from weights files (GGUF metadata, llama2.c
// header, config.json beside Hugging Face safetensors), tokenizers, `maxtext tokenize`, and prompt text for
// `maxtext generate --prompt`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/weights.hpp"
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

/// `maxtext tokenize --weights FILE [--tokenizer FILE] --text "..."`: the ids (BOS included) comma-separated.
inline int run_tokenize(const std::string& weights, const std::string& tokenizer_file, const std::string& text,
                        std::int64_t vocab_size) {
  const auto tk = open_cli_tokenizer(weights, tokenizer_file, vocab_size);
  const auto ids = tk->encode(text);
  for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
  std::cout << "\n";
  return 0;
}

/// Prints generated text as it comes (piece by piece, after the prompt's last token).
class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tk, std::int32_t last_prompt_token) : tk_(tk), prev_(last_prompt_token) {}
  void operator()(std::int32_t token) {
    const std::string s = tk_.piece(prev_, token);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    prev_ = token;
  }

 private:
  const tokenizer::Tokenizer& tk_;
  std::int32_t prev_;
};

}  // namespace maxtext::cli
