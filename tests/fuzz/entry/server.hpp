// tests/fuzz/entry/server.hpp: fuzz entry point for the OpenAI-compatible server's request bodies
// (server/openai.hpp). fuzz_openai_request: the first byte picks the endpoint (even: chat completions, odd:
// completions), the rest is the body (and, as a whole, a candidate for the data URLs' base64 decoder, checked
// against an encoder). A body is either refused with a RequestError (400, naming a field) or read;
// with tools, the last message's text is parsed as an answer with calls and the tools' call grammar is compiled;
// a body that is read gets its response and stream chunks built from a made-up outcome, and they must serialise
// (invalid UTF-8 replaced) and parse back.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "maxtext/server/openai.hpp"
#include "maxtext/server/tools.hpp"

namespace maxtext::fuzz {

/// Standard base64 without padding, written here from RFC 4648 (the oracle for base64_decode).
inline std::string base64_unpadded(const std::string& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : bytes) {
    acc = (acc << 8) | static_cast<unsigned char>(c);
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 63u];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63u];
  return out;
}

inline void fuzz_openai_request(const std::uint8_t* data, std::size_t size) {
  namespace sv = maxtext::server;
  if (size == 0) return;
  // The data URLs' base64: what decodes must be the text an encoder writes for those bytes (the decoder refuses the
  // rest: other characters, misplaced padding, stray low bits), so re-encoding gives the input back, padding aside.
  const std::string_view input = as_text(data + 1, size - 1);
  if (const auto bytes = sv::detail::base64_decode(input)) {
    std::string_view text = input;
    if (text.size() % 4 == 0) {
      while (!text.empty() && text.back() == '=') text.remove_suffix(1);
    }
    if (base64_unpadded(*bytes) != text) std::abort();
  }
  const bool chat = data[0] % 2 == 0;
  sv::Json body;
  try {
    body = sv::Json::parse(input);
  } catch (const sv::Json::exception&) {
    return;
  }
  sv::Request r;
  try {
    r = chat ? sv::parse_chat_request(body) : sv::parse_completion_request(body);
  } catch (const sv::RequestError& e) {
    if (e.status() != 400) std::abort();  // a body is refused as a bad request, nothing else
    (void)e.to_json().dump();
    return;
  }
  if (r.max_tokens && *r.max_tokens < 0) std::abort();
  for (const auto& p : r.pictures) {
    if (p.bytes.empty() || p.field.empty()) std::abort();  // a picture is never empty, and names its field
  }
  if (r.top_logprobs < 0 || r.top_logprobs > 20) std::abort();
  try {
    r.sampling.validate();
  } catch (const maxtext::Error&) {
    std::abort();  // the parser let through sampling parameters the sampler refuses
  }
  if (!r.tools.empty()) {
    // The model's answer is untrusted text too: the last message's content read as an answer with calls, and the
    // grammar of the tools' calls compiled and parsed (a schema it cannot use is a 400 naming the tool).
    const std::string answer = r.messages.back()["content"].get<std::string>();
    const auto parsed = sv::parse_tool_calls(answer, sv::ToolFormat::hermes, r.tools, 0);
    for (const auto& c : parsed.calls) {
      if (!sv::Json::parse(c.arguments).is_object()) std::abort();
    }
    try {
      const auto g = models::grammar::Grammar::parse(sv::tool_call_grammar(sv::ToolFormat::hermes, r.tools, "", true));
      (void)g;
    } catch (const sv::RequestError& e) {
      if (e.status() != 400) std::abort();
    }
  }
  sv::Outcome o;
  o.text = r.endpoint == sv::Endpoint::chat ? r.messages.back()["content"].get<std::string>() : r.prompt;
  o.tokens = {1, 2};
  o.prompt_tokens = 3;
  o.logprobs = {{1, -0.5f, {{1, -0.5f}}}, {2, -1.0f, {}}};
  o.token_text = {o.text.substr(0, 1), "\xE3"};
  o.top_text = {{"a"}, {}};
  const auto replace = sv::Json::error_handler_t::replace;
  for (const sv::Json& j : {sv::response_json(r, o, "id", "m", 1, o.text),
                            sv::chunk_json(r, "id", "m", 1, o.text, true, nullptr),
                            sv::chunk_json(r, "id", "m", 1, "", false, sv::finish_reason(o)),
                            sv::usage_chunk_json(r, "id", "m", 1, o)}) {
    const std::string s = j.dump(-1, ' ', false, replace);
    try {
      const sv::Json back = sv::Json::parse(s);
      if (back.is_discarded()) std::abort();
    } catch (const sv::Json::exception&) {
      std::abort();  // what the server would send does not parse
    }
  }
}

}  // namespace maxtext::fuzz
