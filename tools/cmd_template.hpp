// tools/cmd_template.hpp: `maxtext template`: a chat prompt rendered from a model's chat template
// (include/maxtext/tokenizer/chat_template.hpp), printed as is.
#pragma once

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "maxtext/core/error.hpp"
#include "maxtext/tokenizer/chat_template.hpp"

namespace maxtext::cli {

inline tokenizer::Json read_json_file(const std::string& path, const std::string& option) {
  std::ifstream f(path, std::ios::binary);
  MAXTEXT_CHECK(f.good(), IoError, option, " ", path, ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    return tokenizer::Json::parse(ss.str());
  } catch (const std::exception& e) {
    MAXTEXT_THROW(IoError, option, " ", path, ": invalid JSON: ", e.what());
  }
}

/// `maxtext template`: writes the rendered prompt to stdout, nothing before or after it.
inline int run_template(const std::string& tokenizer_path, const std::string& messages_file, const std::string& gen,
                        const std::string& tools_file) {
  MAXTEXT_CHECK(gen == "on" || gen == "off", ArgumentError, "--add-generation-prompt: expected on or off, found '", gen, "'");
  const tokenizer::Json messages = read_json_file(messages_file, "--messages");
  MAXTEXT_CHECK(messages.is_array(), ArgumentError, "--messages ", messages_file,
                ": expected a JSON list of {\"role\", \"content\"} objects");
  const tokenizer::ChatTemplate t = tokenizer::load_chat_template(tokenizer_path);
  tokenizer::ChatOptions o;
  o.add_generation_prompt = gen == "on";
  if (!tools_file.empty()) o.tools = read_json_file(tools_file, "--tools");
  const std::string out = t.render(messages, o);
  std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
  std::cout.flush();
  return 0;
}

}  // namespace maxtext::cli
