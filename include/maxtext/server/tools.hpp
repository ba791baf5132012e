// server/tools.hpp: tool calls in a model's own syntax: which syntax a chat template teaches, the calls parsed out of
// an answer, and the grammar that makes a model call a tool (tool_choice required, or a named function).
//
// One syntax so far, the one most open chat templates write (Qwen2.5, Qwen3, Hermes, and the many fine-tunes that copy
// them): each call is a JSON object {"name": ..., "arguments": {...}} between <tool_call> and </tool_call> lines, after
// the answer's text. A template is taken to use it when its source renders `tools` and writes "<tool_call>". Other
// templates (Llama 3.1's JSON, DeepSeek-V3's <｜tool▁calls▁begin｜>, GPT-OSS's channels) are refused by name for
// requests with tools until their syntax is added here.
//
// The grammar: the call's JSON follows a JSON Schema that allows exactly the tools offered ({"name": {"const": N},
// "arguments": <the tool's parameters>}, one alternative per tool), compiled by models/json_schema.hpp, between the
// <tool_call> lines, with at most one space between its tokens; with parallel_tool_calls, one or more calls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/models/json_schema.hpp"
#include "maxtext/server/openai.hpp"

namespace maxtext::server {

enum class ToolFormat : std::uint8_t {
  none,    ///< the template teaches no tool-call syntax the server reads
  hermes,  ///< <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
};

inline const char* to_string(ToolFormat f) { return f == ToolFormat::hermes ? "hermes" : "none"; }

/// The tool-call syntax a chat template's source teaches.
inline ToolFormat tool_format_of(std::string_view template_source) {
  const bool renders_tools = template_source.find("tools") != std::string_view::npos;
  if (renders_tools && template_source.find("<tool_call>") != std::string_view::npos) return ToolFormat::hermes;
  return ToolFormat::none;
}

inline constexpr std::string_view kHermesOpen = "<tool_call>";
inline constexpr std::string_view kHermesClose = "</tool_call>";

/// An answer split into its text and its tool calls.
struct ParsedAnswer {
  std::string content;          ///< the text before the first call (trailing blanks dropped when there are calls)
  std::vector<ToolCall> calls;  ///< ids call_<first_id>, call_<first_id + 1>, ...
};

/// Where the first call starts in `text` (npos: none), for streaming: text before it can be sent as content.
inline std::size_t tool_call_start(std::string_view text, ToolFormat f) {
  return f == ToolFormat::hermes ? text.find(kHermesOpen) : std::string_view::npos;
}

/// How many bytes at the end of `text` could be the start of a call's opening marker (held back while streaming).
inline std::size_t tool_marker_prefix(std::string_view text, ToolFormat f) {
  if (f != ToolFormat::hermes) return 0;
  for (std::size_t n = std::min(text.size(), kHermesOpen.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == kHermesOpen.substr(0, n)) return n;
  }
  return 0;
}

/// The calls in an answer written in syntax `f` for the tools offered. A call whose JSON does not parse, names a tool
/// that was not offered or lacks its arguments object is not a call: the whole answer then stays text, as the model
/// wrote it (the client sees what went wrong). The one exception: a last call that the answer's end cut short (no
/// closing line, JSON incomplete: max_tokens) after complete ones is dropped, and the complete calls are kept.
inline ParsedAnswer parse_tool_calls(const std::string& text, ToolFormat f, const Json& tools, std::uint64_t first_id) {
  ParsedAnswer out;
  out.content = text;
  const std::size_t start = tool_call_start(text, f);
  if (start == std::string::npos) return out;
  std::vector<ToolCall> calls;
  std::size_t pos = start;
  while (pos < text.size()) {
    const std::size_t ws = text.find_first_not_of(" \t\r\n", pos);
    if (ws == std::string::npos) break;
    if (text.compare(ws, kHermesOpen.size(), kHermesOpen) != 0) return out;  // text after the calls: not a call list
    const std::size_t body = ws + kHermesOpen.size();
    const std::size_t end = text.find(kHermesClose, body);
    const std::string_view js = std::string_view(text).substr(body, end == std::string::npos ? std::string::npos : end - body);
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(js, nullptr, false);
    if (end == std::string::npos && !calls.empty() && j.is_discarded()) break;  // a last call cut by max_tokens
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("arguments") ||
        !j["arguments"].is_object()) {
      return out;
    }
    const std::string name = j["name"].get<std::string>();
    bool offered = false;
    for (const auto& t : tools) offered = offered || t["function"]["name"] == name;
    if (!offered) return out;
    calls.push_back({str("call_", first_id + calls.size()), name, j["arguments"].dump()});
    if (end == std::string::npos) break;  // the generation ended inside the closing line (max_tokens): kept as read
    pos = end + kHermesClose.size();
  }
  if (calls.empty()) return out;
  out.calls = std::move(calls);
  out.content = text.substr(0, start);
  while (!out.content.empty() && (out.content.back() == '\n' || out.content.back() == ' ')) out.content.pop_back();
  return out;
}

/// A GBNF grammar whose sentences are calls in syntax `f` to the tools offered (`only`: to that one tool), one or
/// (with `parallel`) more. Throws RequestError 400 naming the tool whose parameters schema cannot be compiled.
inline std::string tool_call_grammar(ToolFormat f, const Json& tools, const std::string& only, bool parallel) {
  MAXTEXT_CHECK(f == ToolFormat::hermes, ArgumentError, "[tools] no grammar for tool format ", to_string(f));
  nlohmann::ordered_json any = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const auto& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    nlohmann::ordered_json call = {
        {"type", "object"},
        {"properties", {{"name", {{"const", name}}}, {"arguments", fn["parameters"]}}},
        {"required", {"name", "arguments"}},
        {"additionalProperties", false}};
    try {  // each tool alone first, so that a refusal names the tool
      (void)models::grammar::json_schema_to_gbnf(call);
    } catch (const Error& e) {
      bad_request(str("tools[", i, "].function.parameters"), str("tool '", name, "': its parameters schema cannot be used: ", e.what()));
    }
    any.push_back(call);
  }
  std::string gbnf = models::grammar::json_schema_to_gbnf(any.size() == 1 ? any[0] : nlohmann::ordered_json{{"anyOf", any}});
  // The schema's start rule becomes the call's JSON; nothing in the compiled grammar refers to "root" (the compiler
  // names its own rules apart from it), and its rule names never hold '_', so "tool_call_json" is free.
  MAXTEXT_CHECK(gbnf.rfind("root ::= ", 0) == 0, ArgumentError, "[tools] unexpected grammar from the schema compiler");
  gbnf = "tool_call_json ::= " + gbnf.substr(9);
  // Between a call's JSON tokens, at most one space (the schema compiler allows up to 20 blanks): a call is read by a
  // program, and a model cannot spend its tokens on blanks.
  const std::string ws_rule = "\nws ::= [ \\t\\n]{0,20}\n";
  const std::size_t ws_at = gbnf.find(ws_rule);
  MAXTEXT_CHECK(ws_at != std::string::npos, ArgumentError, "[tools] the schema compiler's blank rule was not found");
  gbnf.replace(ws_at, ws_rule.size(), "\nws ::= \" \"?\n");
  const std::string one = R"("<tool_call>\n" tool_call_json "\n</tool_call>")";
  return str("root ::= ", one, parallel ? str(" ( \"\\n\" ", one, " )*") : std::string(), "\n", gbnf);
}

}  // namespace maxtext::server
