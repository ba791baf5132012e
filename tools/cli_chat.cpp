// tools/cli_chat.cpp: `maxtext chat` (a conversation through the model's chat template, the KV cache kept between
// turns) and `maxtext template` (the rendered chat prompt).
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include <unistd.h>

#include "cli_args.hpp"
#include "cli_generate_options.hpp"
#include "cmd_chat.hpp"
#include "cmd_template.hpp"
#include "cmd_tokenize.hpp"
#include "maxtext/models/any_model.hpp"

namespace maxtext::cli {

int cmd_chat(const Args& a) {
  MAXTEXT_CHECK(a.has("weights") || a.has("tokenizer"), ArgumentError, "chat needs --weights (and a tokenizer)");
  const Config cfg = make_config(a);
  const auto tk = open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
  ChatOptions co;
  co.gen = generate_options(a, cfg, 256);
  add_eos_stops(co.gen, a, *tk, cfg);
  co.system = a.get("system");
  co.render = find_chat_renderer(a.get("weights"), a.get("tokenizer"));
  if (co.render) co.encode = [&tk](const std::string& text) { return tk->encode(text, false); };
  co.capacity = a.integer("ctx-size", std::min<std::int64_t>(cfg.max_target_length, 4096));
  co.interactive = ::isatty(STDIN_FILENO) != 0;
  MAXTEXT_CHECK(co.capacity > 0, ArgumentError, "--ctx-size must be > 0");
  const auto model = open_model(cfg, a);
  return run_chat(*model, *tk, co, std::cin, std::cout, std::cerr);
}

int cmd_template(const Args& a) {
  MAXTEXT_CHECK(a.has("tokenizer") && a.has("messages"), ArgumentError,
                "template needs --tokenizer PATH and --messages FILE.json");
  return run_template(a.get("tokenizer"), a.get("messages"), a.get("add-generation-prompt", "on"), a.get("tools"));
}

}  // namespace maxtext::cli
