// tests/fuzz/entry/chat_template.hpp: fuzz entry point for chat templates: the input is a Jinja template source,
// parsed and rendered with fixed messages (system, user, an assistant turn with a tool call, a tool result, user),
// tools, special tokens and add_generation_prompt, as ChatTemplate::render builds the context.
// The limits are tighter than the defaults (which bound a render at 10^7 loop iterations and 64 MiB of output) so that
// a template that merely reaches a limit does not read as a >1 s timeout; a template that is slow per iteration
// still does.
#pragma once

#include "fuzz_common.hpp"
#include "maxtext/tokenizer/chat_template.hpp"
#include "maxtext/tokenizer/jinja.hpp"

namespace maxtext::fuzz {

inline tokenizer::jinja::Limits fuzz_jinja_limits() {
  tokenizer::jinja::Limits l;
  l.max_depth = 200;
  l.max_output = 1u << 20;
  l.max_iterations = 20'000;
  l.max_range = 10'000;
  return l;
}

inline const tokenizer::Json& fuzz_chat_context() {
  static const tokenizer::Json ctx = [] {
    tokenizer::Json messages = tokenizer::Json::parse(R"([
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi! What is 2+2? \u00e9\u4f60"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4", "name": "add"},
      {"role": "assistant", "content": "<think>easy</think>It is 4."},
      {"role": "user", "content": "Thanks"}
    ])");
    tokenizer::Json tools = tokenizer::Json::parse(R"([{"type": "function", "function": {"name": "add",
      "description": "Add two numbers", "parameters": {"type": "object", "properties": {"a": {"type": "number"},
      "b": {"type": "number"}}, "required": ["a", "b"]}}}])");
    tokenizer::ChatTemplate t("", tokenizer::Json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    tokenizer::ChatOptions o;
    o.add_generation_prompt = true;
    o.tools = tools;
    o.extra = tokenizer::Json{{"enable_thinking", false}};
    return t.context(messages, o);
  }();
  return ctx;
}

inline void fuzz_chat_template(const std::uint8_t* data, std::size_t size) {
  const tokenizer::Json& ctx = fuzz_chat_context();
  attempt([&] {
    const tokenizer::jinja::Template t(std::string(as_text(data, size)), "fuzz", fuzz_jinja_limits());
    (void)t.render(ctx);
  });
}

}  // namespace maxtext::fuzz
