// server/openai.hpp: the OpenAI-compatible API as plain data, without HTTP: request bodies of /v1/chat/completions and
// /v1/completions parsed and checked into server::Request, and the response objects (whole, or the chunks of a
// server-sent-event stream) built from a generation's outcome. The HTTP side (`maxtext serve`, tools/cmd_serve.hpp)
// and the engine that runs requests (server/engine.hpp) sit on top; an application with its own HTTP stack can use
// these two headers alone.
//
// The fields follow OpenAI's API reference (chat completions and the legacy completions), with llama-server's
// sampling extensions top_k, min_p and repeat_penalty. A field is read, refused by name (n > 1, audio, a suffix,
// ...), or on the short list of fields that do not change the output (user, metadata, store: false,
// service_tier: auto|default). An unknown field is refused with the nearest known one ("did you mean 'temperature'?"):
// a misspelt option must not silently run with the defaults. A field set to null counts as absent, as in OpenAI's API.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/core/nearest.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/sampling.hpp"

namespace maxtext::server {

using Json = nlohmann::ordered_json;

/// A request the server refuses: the HTTP status and OpenAI's error object ({"error": {message, type, param,
/// code}}).
class RequestError : public Error {
 public:
  RequestError(int status, std::string type, std::string param, const std::string& message)
      : Error(message), status_(status), type_(std::move(type)), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  Json to_json() const {
    Json e = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
    if (!param_.empty()) e["param"] = param_;
    return Json{{"error", e}};
  }

 private:
  int status_;
  std::string type_, param_;
};

/// 400 invalid_request_error naming the field.
[[noreturn]] inline void bad_request(const std::string& param, const std::string& message) {
  throw RequestError(400, "invalid_request_error", param, message);
}

enum class Endpoint : std::uint8_t { chat, completion };

/// What response_format asks for.
enum class Format : std::uint8_t { text, json_object, json_schema };

/// tool_choice: none (the model answers in text), automatic ("auto": the model may call tools), required (it must
/// call one or more), named (it must call that one).
enum class ToolChoice : std::uint8_t { none, automatic, required, named };

/// A tool call the model made: its id, the function's name and its arguments as JSON text.
struct ToolCall {
  std::string id, name, arguments;
};

/// Where each picture of a chat request goes in its messages' text: the image part's place (llama.cpp's marker; the
/// engine rewrites it to the model's own, server::PictureInput::marker).
inline constexpr std::string_view kMediaMarker = "<__media__>";

/// A picture of a chat request: an image_url part's bytes, decoded from its base64 data URL, and the field it came
/// from (for the messages that name a bad picture).
struct Picture {
  std::string bytes;
  std::string field;  ///< e.g. "messages[1].content[0].image_url"
};

/// One request, checked: every field the server reads, in the library's types.
struct Request {
  Endpoint endpoint = Endpoint::chat;
  std::string model;             ///< as sent (the server answers with its own model id)
  nlohmann::json messages;       ///< chat: [{role, content}], content a string (text parts joined)
  std::vector<Picture> pictures;  ///< chat: the users' image parts in order; kMediaMarker holds each one's place
  std::string prompt;            ///< completion: the prompt text (unless prompt_ids)
  std::vector<std::int32_t> prompt_ids;  ///< completion: a prompt given as token ids
  bool has_prompt_ids = false;
  std::optional<std::int64_t> max_tokens;  ///< absent: the server's default
  models::SamplingParams sampling;         ///< temperature 1 and top_p 1 by default, as OpenAI's API
  bool has_seed = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage: a last chunk with the token counts
  bool logprobs = false;
  std::int64_t top_logprobs = 0;
  bool echo = false;  ///< completion: the prompt text before the generated text
  Format format = Format::text;
  Json schema;  ///< with Format::json_schema
  /// chat: the tools as OpenAI sends them ([{"type": "function", "function": {name, description, parameters}}]),
  /// checked; the template renders them, the output is parsed for calls (server/tools.hpp).
  Json tools = Json::array();
  ToolChoice tool_choice = ToolChoice::none;
  std::string tool_name;  ///< with ToolChoice::named
  bool parallel_tool_calls = true;
};

namespace detail {

inline std::string type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

[[noreturn]] inline void wrong_type(const std::string& field, const char* expected, const Json& v) {
  bad_request(field, str("'", field, "' must be ", expected, ", found ", type_name(v)));
}

inline double number_in(const Json& v, const std::string& field, double lo, double hi) {
  if (!v.is_number()) wrong_type(field, "a number", v);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) bad_request(field, str("'", field, "' must be in [", lo, ", ", hi, "], found ", x));
  return x;
}

inline std::int64_t integer_in(const Json& v, const std::string& field, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::floor(x) != x) wrong_type(field, "an integer", v);
    if (!(x >= static_cast<double>(lo) && x <= static_cast<double>(hi))) {
      bad_request(field, str("'", field, "' must be in [", lo, ", ", hi, "], found ", x));
    }
    return static_cast<std::int64_t>(x);
  }
  if (v.is_number_unsigned()) {
    const auto x = v.get<std::uint64_t>();
    if (x > static_cast<std::uint64_t>(hi) || (lo > 0 && x < static_cast<std::uint64_t>(lo))) bad_request(field, str("'", field, "' must be in [", lo, ", ", hi, "], found ", x));
    return static_cast<std::int64_t>(x);
  }
  if (!v.is_number_integer()) wrong_type(field, "an integer", v);
  const auto x = v.get<std::int64_t>();
  if (x < lo || x > hi) bad_request(field, str("'", field, "' must be in [", lo, ", ", hi, "], found ", x));
  return x;
}

inline bool boolean(const Json& v, const std::string& field) {
  if (!v.is_boolean()) wrong_type(field, "a boolean", v);
  return v.get<bool>();
}

inline std::string string(const Json& v, const std::string& field) {
  if (!v.is_string()) wrong_type(field, "a string", v);
  return v.get<std::string>();
}

/// Refuses the first member of `obj` that is not in `known`, naming the nearest known one.
inline void check_fields(const Json& obj, const std::vector<std::string>& known, const std::string& where) {
  for (const auto& [k, v] : obj.items()) {
    bool found = false;
    for (const auto& n : known) found = found || n == k;
    if (found) continue;
    const std::string near = nearest_name(k, known);
    bad_request(where.empty() ? k : where + "." + k,
                str("unknown field '", where.empty() ? k : where + "." + k, "'",
                    near.empty() ? std::string() : str(" (did you mean '", near, "'?)"), "; see docs/server.md"));
  }
}

/// The bytes of standard base64 (RFC 4648, section 4; the padding may be left out), or nullopt at the first
/// character outside the alphabet, a misplaced '=' or a length no encoder writes.
inline std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::size_t n = in.size();
  if (n % 4 == 0 && n >= 2 && in[n - 1] == '=') n -= in[n - 2] == '=' ? 2 : 1;  // padding: one or two '='
  if (n % 4 == 1) return std::nullopt;  // 6 bits cannot end a byte
  std::string out;
  out.reserve(n / 4 * 3 + 2);
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int v = value(in[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFFu));
    }
  }
  if ((acc & ((1u << bits) - 1u)) != 0) return std::nullopt;  // leftover bits an encoder leaves zero
  return out;
}

/// The picture of an image_url part: {"url": "data:image/png;base64,...", "detail": "auto"|"low"|"high"}. Only data
/// URLs are taken (the server fetches nothing from the network); PNG and JPEG, as the image reader decodes them.
inline Picture read_image_url(const Json& part, const std::string& pf) {
  const std::string f = pf + ".image_url";
  if (!part.contains("image_url")) bad_request(f, str("'", pf, "' has no 'image_url'"));
  const Json& iu = part["image_url"];
  if (!iu.is_object()) wrong_type(f, "an object", iu);
  check_fields(iu, {"url", "detail"}, f);
  if (iu.contains("detail")) {
    const std::string d = string(iu["detail"], f + ".detail");
    if (d != "auto" && d != "low" && d != "high") {
      bad_request(f + ".detail", str("'", f, ".detail' is '", d, "': expected auto, low or high"));
    }
  }
  if (!iu.contains("url")) bad_request(f + ".url", str("'", f, "' has no 'url'"));
  const std::string url = string(iu["url"], f + ".url");
  const std::string_view u(url);
  if (u.substr(0, 5) != "data:") {
    bad_request(f + ".url", str("'", f, ".url' is not a data URL (data:image/png;base64,...): the server fetches no "
                                "pictures from the network; send the file's bytes in the request"));
  }
  const std::size_t comma = u.find(',');
  if (comma == std::string_view::npos) bad_request(f + ".url", str("'", f, ".url': a data URL without ','"));
  const std::string_view head = u.substr(5, comma - 5);
  const std::size_t semi = head.find(';');
  const std::string_view type = head.substr(0, semi);
  if (type != "image/png" && type != "image/jpeg" && type != "image/jpg") {
    bad_request(f + ".url", str("'", f, ".url' has media type '", type, "': expected image/png or image/jpeg"));
  }
  if (semi == std::string_view::npos || head.substr(semi) != ";base64") {
    bad_request(f + ".url", str("'", f, ".url' must be base64 (data:", type, ";base64,...)"));
  }
  std::optional<std::string> bytes = base64_decode(u.substr(comma + 1));
  if (!bytes) bad_request(f + ".url", str("'", f, ".url': the data is not base64"));
  if (bytes->empty()) bad_request(f + ".url", str("'", f, ".url': the picture is empty"));
  return Picture{std::move(*bytes), f};
}

/// The text of a message's content: a string, or an array of parts joined: {"type": "text", "text": ...}, and, where
/// `pictures` is given (user messages), {"type": "image_url", ...}, whose place kMediaMarker holds in the text.
inline std::string content_text(const Json& c, const std::string& field, std::vector<Picture>* pictures = nullptr) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) wrong_type(field, "a string or an array of content parts", c);
  std::string s;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Json& part = c[i];
    const std::string pf = str(field, "[", i, "]");
    if (!part.is_object()) wrong_type(pf, "an object", part);
    const std::string type = part.contains("type") ? string(part["type"], pf + ".type") : "";
    if (type == "image_url" && pictures != nullptr) {
      check_fields(part, {"type", "image_url"}, pf);
      pictures->push_back(read_image_url(part, pf));
      s += kMediaMarker;
      continue;
    }
    if (type == "image_url") {
      bad_request(pf + ".type", str("'", pf, "' is a picture: only user messages carry pictures"));
    }
    check_fields(part, {"type", "text"}, pf);
    if (type != "text") {
      throw RequestError(400, "invalid_request_error", pf + ".type",
                         str("'", pf, ".type' is '", type, "': the parts read are text and image_url (audio and "
                                                           "files are not; see docs/server.md)"));
    }
    if (!part.contains("text")) bad_request(pf + ".text", str("'", pf, "' has no 'text'"));
    s += string(part["text"], pf + ".text");
  }
  return s;
}

/// The fields both endpoints read: sampling, stop, streaming, max_tokens.
inline void read_common(const Json& body, Request& r) {
  if (body.contains("model")) r.model = string(body["model"], "model");
  if (body.contains("n") && integer_in(body["n"], "n", 1, 128) != 1) {
    bad_request("n", "'n' must be 1: one choice per request (send several requests for several choices)");
  }
  if (body.contains("temperature")) r.sampling.temperature = static_cast<float>(number_in(body["temperature"], "temperature", 0, 2));
  else r.sampling.temperature = 1.0f;
  if (body.contains("top_p")) {
    r.sampling.top_p = static_cast<float>(number_in(body["top_p"], "top_p", 0, 1));
    if (r.sampling.top_p <= 0.0f) bad_request("top_p", "'top_p' must be > 0");
  }
  if (body.contains("top_k")) r.sampling.top_k = integer_in(body["top_k"], "top_k", 0, std::numeric_limits<std::int32_t>::max());
  if (body.contains("min_p")) r.sampling.min_p = static_cast<float>(number_in(body["min_p"], "min_p", 0, 1));
  if (body.contains("repeat_penalty")) {
    r.sampling.repetition_penalty = static_cast<float>(number_in(body["repeat_penalty"], "repeat_penalty", 1e-3, 100));
  }
  if (body.contains("presence_penalty")) {
    r.sampling.presence_penalty = static_cast<float>(number_in(body["presence_penalty"], "presence_penalty", -2, 2));
  }
  if (body.contains("frequency_penalty")) {
    r.sampling.frequency_penalty = static_cast<float>(number_in(body["frequency_penalty"], "frequency_penalty", -2, 2));
  }
  if (body.contains("seed")) {
    r.sampling.seed = static_cast<std::uint64_t>(
        integer_in(body["seed"], "seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
    r.has_seed = true;
  }
  if (body.contains("logit_bias")) {
    const Json& lb = body["logit_bias"];
    if (!lb.is_object()) wrong_type("logit_bias", "an object of token id -> bias", lb);
    for (const auto& [k, v] : lb.items()) {
      std::size_t pos = 0;
      long long id = -1;
      try {
        id = std::stoll(k, &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
      if (pos != k.size() || k.empty() || id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
        bad_request("logit_bias", str("'logit_bias' key '", k, "' is not a token id"));
      }
      const double b = number_in(v, str("logit_bias.", k), -100, 100);
      // OpenAI: -100 should ban the token, 100 select it only.
      r.sampling.logit_bias.emplace_back(static_cast<std::int32_t>(id),
                                         b <= -100 ? -std::numeric_limits<float>::infinity() : static_cast<float>(b));
    }
  }
  if (body.contains("stop")) {
    const Json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > 16) bad_request("stop", str("'stop' holds ", s.size(), " strings; at most 16"));
      for (std::size_t i = 0; i < s.size(); ++i) r.stop.push_back(string(s[i], str("stop[", i, "]")));
    } else {
      wrong_type("stop", "a string or an array of strings", s);
    }
    for (const auto& x : r.stop) {
      if (x.empty()) bad_request("stop", "'stop' holds an empty string");
    }
  }
  if (body.contains("stream")) r.stream = boolean(body["stream"], "stream");
  if (body.contains("stream_options")) {
    const Json& so = body["stream_options"];
    if (!so.is_object()) wrong_type("stream_options", "an object", so);
    check_fields(so, {"include_usage"}, "stream_options");
    if (!r.stream) bad_request("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (so.contains("include_usage") && !so["include_usage"].is_null()) {
      r.include_usage = boolean(so["include_usage"], "stream_options.include_usage");
    }
  }
  if (body.contains("store") && boolean(body["store"], "store")) {
    bad_request("store", "'store': true is not supported (the server keeps no completions)");
  }
  if (body.contains("service_tier")) {
    const std::string t = string(body["service_tier"], "service_tier");
    if (t != "auto" && t != "default") bad_request("service_tier", str("'service_tier' '", t, "': only auto or default"));
  }
  if (body.contains("user")) (void)string(body["user"], "user");
  if (body.contains("metadata") && !body["metadata"].is_object()) wrong_type("metadata", "an object", body["metadata"]);
}

/// The body without its null members (null means absent in OpenAI's API).
inline Json without_nulls(const Json& body) {
  if (!body.is_object()) throw RequestError(400, "invalid_request_error", "", str("the request body must be a JSON object, found ", type_name(body)));
  Json b = Json::object();
  for (const auto& [k, v] : body.items()) {
    if (!v.is_null()) b[k] = v;
  }
  return b;
}

inline void read_format(const Json& body, Request& r) {
  if (!body.contains("response_format")) return;
  const Json& f = body["response_format"];
  if (!f.is_object()) wrong_type("response_format", "an object", f);
  check_fields(f, {"type", "json_schema"}, "response_format");
  const std::string type = f.contains("type") ? string(f["type"], "response_format.type") : "";
  if (type == "text") {
    r.format = Format::text;
  } else if (type == "json_object") {
    r.format = Format::json_object;
  } else if (type == "json_schema") {
    if (!f.contains("json_schema") || !f["json_schema"].is_object()) {
      bad_request("response_format.json_schema", "'response_format' of type json_schema needs a 'json_schema' object");
    }
    const Json& js = f["json_schema"];
    check_fields(js, {"name", "description", "schema", "strict"}, "response_format.json_schema");
    if (!js.contains("name")) bad_request("response_format.json_schema.name", "'response_format.json_schema' needs a 'name'");
    (void)string(js["name"], "response_format.json_schema.name");
    if (js.contains("strict") && !js["strict"].is_null()) (void)boolean(js["strict"], "response_format.json_schema.strict");
    r.format = Format::json_schema;
    r.schema = js.contains("schema") && !js["schema"].is_null() ? js["schema"] : Json::object();
    if (!r.schema.is_object() && !r.schema.is_boolean()) {
      wrong_type("response_format.json_schema.schema", "a JSON Schema (an object)", r.schema);
    }
  } else {
    bad_request("response_format.type",
                str("'response_format.type' '", type, "': expected text, json_object or json_schema"));
  }
}

/// A function name as OpenAI allows it: 1-64 of [a-zA-Z0-9_-].
inline bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (const char c : n) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

inline void read_tools(const Json& body, Request& r) {
  if (body.contains("tools")) {
    const Json& ts = body["tools"];
    if (!ts.is_array()) wrong_type("tools", "an array of tools", ts);
    if (ts.size() > 128) bad_request("tools", str("'tools' holds ", ts.size(), " tools; at most 128"));
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const std::string tf = str("tools[", i, "]");
      const Json& t = ts[i];
      if (!t.is_object()) wrong_type(tf, "an object", t);
      check_fields(t, {"type", "function"}, tf);
      if (!t.contains("type") || !t["type"].is_string() || t["type"].get<std::string>() != "function") {
        bad_request(tf + ".type", str("'", tf, ".type' must be \"function\" (the one kind of tool)"));
      }
      if (!t.contains("function") || !t["function"].is_object()) {
        bad_request(tf + ".function", str("'", tf, "' needs a 'function' object"));
      }
      const Json& f = t["function"];
      check_fields(f, {"name", "description", "parameters", "strict"}, tf + ".function");
      const std::string name = f.contains("name") ? string(f["name"], tf + ".function.name") : "";
      if (!valid_function_name(name)) {
        bad_request(tf + ".function.name", str("'", tf, ".function.name' '", name, "': 1 to 64 of a-z, A-Z, 0-9, _ and -"));
      }
      for (const auto& other : r.tools) {
        if (other["function"]["name"] == name) bad_request(tf + ".function.name", str("two tools are named '", name, "'"));
      }
      Json fn = {{"name", name}};
      if (f.contains("description") && !f["description"].is_null()) {
        fn["description"] = string(f["description"], tf + ".function.description");
      }
      Json params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"]
                                                                            : Json{{"type", "object"}, {"properties", Json::object()}};
      if (!params.is_object()) wrong_type(tf + ".function.parameters", "a JSON Schema (an object)", params);
      fn["parameters"] = params;
      if (f.contains("strict") && !f["strict"].is_null()) (void)boolean(f["strict"], tf + ".function.strict");
      r.tools.push_back(Json{{"type", "function"}, {"function", fn}});
    }
  }
  r.tool_choice = r.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  if (body.contains("tool_choice")) {
    const Json& c = body["tool_choice"];
    if (c.is_string()) {
      const std::string v = c.get<std::string>();
      if (v == "none") r.tool_choice = ToolChoice::none;
      else if (v == "auto") r.tool_choice = ToolChoice::automatic;
      else if (v == "required") r.tool_choice = ToolChoice::required;
      else bad_request("tool_choice", str("'tool_choice' '", v, "': expected none, auto, required or {\"type\": \"function\", ...}"));
    } else if (c.is_object()) {
      check_fields(c, {"type", "function"}, "tool_choice");
      if (!c.contains("function") || !c["function"].is_object() || !c["function"].contains("name")) {
        bad_request("tool_choice.function", "'tool_choice' names a function as {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      check_fields(c["function"], {"name"}, "tool_choice.function");
      r.tool_name = string(c["function"]["name"], "tool_choice.function.name");
      r.tool_choice = ToolChoice::named;
      bool found = false;
      for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_name;
      if (!found) bad_request("tool_choice.function.name", str("'tool_choice' names '", r.tool_name, "', which is not in 'tools'"));
    } else {
      wrong_type("tool_choice", "a string or an object", c);
    }
    if (r.tools.empty() && r.tool_choice != ToolChoice::none) {
      bad_request("tool_choice", "'tool_choice' other than none needs 'tools'");
    }
  }
  if (body.contains("parallel_tool_calls")) r.parallel_tool_calls = boolean(body["parallel_tool_calls"], "parallel_tool_calls");
  if (!r.tools.empty() && r.tool_choice != ToolChoice::none && r.format != Format::text) {
    bad_request("response_format", "'response_format' other than text cannot be combined with tool calls (tool_choice none allows it)");
  }
}

/// One message of a chat request, as the chat templates take it: content as text (text parts joined; "" for an
/// assistant turn that only calls tools), an assistant's tool_calls with their arguments as JSON objects (Hugging
/// Face's convention), a tool result with its tool_call_id.
inline nlohmann::json read_message(const Json& m, const std::string& mf, std::vector<Picture>& pictures) {
  if (!m.is_object()) wrong_type(mf, "an object", m);
  check_fields(m, {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}, mf);
  if (!m.contains("role")) bad_request(mf + ".role", str("'", mf, "' has no 'role'"));
  std::string role = string(m["role"], mf + ".role");
  if (role == "developer") role = "system";  // OpenAI's newer name for the system message
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    bad_request(mf + ".role", str("'", mf, ".role' is '", role, "': expected system, developer, user, assistant or tool"));
  }
  const bool calls = role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
  if (m.contains("tool_calls") && !m["tool_calls"].is_null() && role != "assistant") {
    bad_request(mf + ".tool_calls", str("'", mf, "': only assistant messages carry tool_calls"));
  }
  const bool has_content = m.contains("content") && !m["content"].is_null();
  if (!has_content && !calls) bad_request(mf + ".content", str("'", mf, "' has no 'content'"));
  if (m.contains("name") && !m["name"].is_null()) (void)string(m["name"], mf + ".name");
  if (m.contains("refusal") && !m["refusal"].is_null() && role != "assistant") {
    bad_request(mf + ".refusal", str("'", mf, "': only assistant messages carry a refusal"));
  }
  nlohmann::json out = {
      {"role", role},
      {"content", has_content ? content_text(m["content"], mf + ".content", role == "user" ? &pictures : nullptr) : ""}};
  if (calls) {
    const Json& tc = m["tool_calls"];
    if (!tc.is_array()) wrong_type(mf + ".tool_calls", "an array", tc);
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t k = 0; k < tc.size(); ++k) {
      const std::string cf = str(mf, ".tool_calls[", k, "]");
      const Json& c = tc[k];
      if (!c.is_object()) wrong_type(cf, "an object", c);
      check_fields(c, {"id", "type", "function"}, cf);
      if (!c.contains("function") || !c["function"].is_object()) bad_request(cf + ".function", str("'", cf, "' needs a 'function'"));
      const Json& f = c["function"];
      check_fields(f, {"name", "arguments"}, cf + ".function");
      const std::string name = f.contains("name") ? string(f["name"], cf + ".function.name") : "";
      if (name.empty()) bad_request(cf + ".function.name", str("'", cf, ".function' has no 'name'"));
      const std::string args = f.contains("arguments") ? string(f["arguments"], cf + ".function.arguments") : "{}";
      nlohmann::json parsed = nlohmann::json::parse(args, nullptr, false);
      nlohmann::json call = {{"type", "function"},
                             {"function", {{"name", name}, {"arguments", parsed.is_discarded() ? nlohmann::json(args) : parsed}}}};
      if (c.contains("id") && !c["id"].is_null()) call["id"] = string(c["id"], cf + ".id");
      list.push_back(call);
    }
    out["tool_calls"] = list;
  }
  if (role == "tool") {
    if (!m.contains("tool_call_id") || m["tool_call_id"].is_null()) {
      bad_request(mf + ".tool_call_id", str("'", mf, "': a tool message needs its 'tool_call_id'"));
    }
    out["tool_call_id"] = string(m["tool_call_id"], mf + ".tool_call_id");
  } else if (m.contains("tool_call_id") && !m["tool_call_id"].is_null()) {
    bad_request(mf + ".tool_call_id", str("'", mf, "': only tool messages carry a tool_call_id"));
  }
  return out;
}

}  // namespace detail

/// The fields of a chat completion request this server reads or accepts (the first list of the refusal message).
inline const std::vector<std::string>& chat_fields() {
  static const std::vector<std::string> f = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
      "stream_options", "stop", "seed", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs",
      "top_logprobs", "response_format", "user", "metadata", "store", "service_tier", "top_k", "min_p",
      "repeat_penalty", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "audio",
      "modalities", "prediction", "reasoning_effort"};
  return f;
}

inline const std::vector<std::string>& completion_fields() {
  static const std::vector<std::string> f = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed",
      "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "echo", "suffix", "best_of", "user",
      "top_k", "min_p", "repeat_penalty", "response_format"};
  return f;
}

/// A /v1/chat/completions body, checked.
inline Request parse_chat_request(const Json& raw) {
  const Json body = detail::without_nulls(raw);
  detail::check_fields(body, chat_fields(), "");
  for (const char* f : {"functions", "function_call"}) {
    if (body.contains(f)) {
      throw RequestError(400, "invalid_request_error", f,
                         str("'", f, "' is OpenAI's deprecated form of tools: send 'tools' and 'tool_choice'"));
    }
  }
  for (const char* f : {"audio", "modalities", "prediction", "reasoning_effort"}) {
    if (body.contains(f)) throw RequestError(400, "invalid_request_error", f, str("'", f, "' is not supported"));
  }
  Request r;
  r.endpoint = Endpoint::chat;
  detail::read_common(body, r);
  if (!body.contains("messages")) bad_request("messages", "'messages' is required");
  const Json& ms = body["messages"];
  if (!ms.is_array() || ms.empty()) bad_request("messages", "'messages' must be a non-empty array");
  r.messages = nlohmann::json::array();
  for (std::size_t i = 0; i < ms.size(); ++i) r.messages.push_back(detail::read_message(ms[i], str("messages[", i, "]"), r.pictures));
  const bool has_max = body.contains("max_tokens"), has_mct = body.contains("max_completion_tokens");
  if (has_max && has_mct) {
    bad_request("max_tokens", "give 'max_tokens' or 'max_completion_tokens', not both");
  }
  if (has_max || has_mct) {
    const char* f = has_max ? "max_tokens" : "max_completion_tokens";
    r.max_tokens = detail::integer_in(body[f], f, 1, std::numeric_limits<std::int32_t>::max());
  }
  if (body.contains("logprobs")) r.logprobs = detail::boolean(body["logprobs"], "logprobs");
  if (body.contains("top_logprobs")) {
    r.top_logprobs = detail::integer_in(body["top_logprobs"], "top_logprobs", 0, 20);
    if (!r.logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  detail::read_format(body, r);
  detail::read_tools(body, r);
  return r;
}

/// A /v1/completions body, checked. `prompt`: a string, an array holding one string, or an array of token ids.
inline Request parse_completion_request(const Json& raw) {
  const Json body = detail::without_nulls(raw);
  detail::check_fields(body, completion_fields(), "");
  Request r;
  r.endpoint = Endpoint::completion;
  detail::read_common(body, r);
  if (!body.contains("prompt")) bad_request("prompt", "'prompt' is required");
  const Json& p = body["prompt"];
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt = p[0].get<std::string>();
  } else if (p.is_array() && !p.empty() && (p[0].is_number_integer() || p[0].is_number_unsigned())) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      r.prompt_ids.push_back(static_cast<std::int32_t>(
          detail::integer_in(p[i], str("prompt[", i, "]"), 0, std::numeric_limits<std::int32_t>::max())));
    }
    r.has_prompt_ids = true;
  } else if (p.is_array() && p.size() > 1) {
    bad_request("prompt", "'prompt' holds several prompts: send one per request");
  } else {
    detail::wrong_type("prompt", "a string, or an array of token ids", p);
  }
  r.max_tokens = body.contains("max_tokens")
                     ? detail::integer_in(body["max_tokens"], "max_tokens", 0, std::numeric_limits<std::int32_t>::max())
                     : 16;  // OpenAI's default for completions
  if (body.contains("logprobs")) {
    r.top_logprobs = detail::integer_in(body["logprobs"], "logprobs", 0, 5);
    r.logprobs = true;
  }
  if (body.contains("echo")) r.echo = detail::boolean(body["echo"], "echo");
  if (r.echo && r.stream) bad_request("echo", "'echo' is not supported with 'stream': true");
  if (body.contains("suffix")) bad_request("suffix", "'suffix' (insertion) is not supported");
  if (body.contains("best_of") && detail::integer_in(body["best_of"], "best_of", 1, 128) != 1) {
    bad_request("best_of", "'best_of' must be 1");
  }
  detail::read_format(body, r);
  return r;
}

/// What a generation produced, for the response builders.
struct Outcome {
  std::string text;
  std::vector<std::int32_t> tokens;
  models::FinishReason finish = models::FinishReason::length;
  std::int64_t prompt_tokens = 0;  ///< tokens of the prompt (cached or not)
  std::int64_t cached_tokens = 0;  ///< of which taken from a slot's cache
  std::vector<models::TokenLogprob> logprobs;
  std::vector<std::string> token_text;  ///< with logprobs: the text of each token of `tokens`
  std::vector<std::vector<std::string>> top_text;  ///< with logprobs: the text of each alternative
  std::vector<ToolCall> tool_calls;  ///< chat with tools: the calls parsed from the output (`text` is then what precedes them)
  double prefill_seconds = 0, decode_seconds = 0;
};

/// OpenAI's finish_reason: "stop" (an end-of-sequence token or a stop string), "length".
inline const char* finish_reason(models::FinishReason f) {
  return f == models::FinishReason::length ? "length" : "stop";
}

/// "tool_calls" when the answer calls tools, else finish_reason(o.finish).
inline const char* finish_reason(const Outcome& o) {
  return o.tool_calls.empty() || o.finish == models::FinishReason::length ? finish_reason(o.finish) : "tool_calls";
}

inline Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  Json list = Json::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    Json c = Json::object();
    if (with_index) c["index"] = i;  // stream deltas say which call they extend
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    list.push_back(c);
  }
  return list;
}

inline Json usage_json(const Outcome& o) {
  const auto n = static_cast<std::int64_t>(o.tokens.size());
  return Json{{"prompt_tokens", o.prompt_tokens},
              {"completion_tokens", n},
              {"total_tokens", o.prompt_tokens + n},
              {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

inline Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (const unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

/// Chat's logprobs object: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
inline Json chat_logprobs_json(const Outcome& o) {
  Json content = Json::array();
  for (std::size_t i = 0; i < o.logprobs.size(); ++i) {
    const auto& lp = o.logprobs[i];
    const std::string& t = o.token_text.at(i);
    Json top = Json::array();
    for (std::size_t k = 0; k < lp.top.size(); ++k) {
      const std::string& tt = o.top_text.at(i).at(k);
      top.push_back({{"token", tt}, {"logprob", lp.top[k].second}, {"bytes", bytes_of(tt)}});
    }
    content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return Json{{"content", content}, {"refusal", nullptr}};
}

/// The legacy completions' logprobs object: tokens, token_logprobs, top_logprobs (text -> logprob), text_offset.
inline Json completion_logprobs_json(const Outcome& o, std::size_t text_start) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offs = Json::array();
  std::size_t off = text_start;
  for (std::size_t i = 0; i < o.logprobs.size(); ++i) {
    const auto& lp = o.logprobs[i];
    tokens.push_back(o.token_text.at(i));
    lps.push_back(lp.logprob);
    Json top = Json::object();
    for (std::size_t k = 0; k < lp.top.size(); ++k) top[o.top_text.at(i).at(k)] = lp.top[k].second;
    tops.push_back(top);
    offs.push_back(off);
    off += o.token_text.at(i).size();
  }
  return Json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

/// Seconds since the epoch, as OpenAI's `created`.
inline std::int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// The whole response of a request (stream false).
inline Json response_json(const Request& r, const Outcome& o, const std::string& id, const std::string& model,
                          std::int64_t created, const std::string& prompt_text = {}) {
  if (r.endpoint == Endpoint::chat) {
    Json message = {{"role", "assistant"}, {"content", o.text}, {"refusal", nullptr}};
    if (!o.tool_calls.empty()) {
      if (o.text.empty()) message["content"] = nullptr;
      message["tool_calls"] = tool_calls_json(o.tool_calls, false);
    }
    Json choice = {{"index", 0},
                   {"message", message},
                   {"logprobs", r.logprobs ? chat_logprobs_json(o) : Json(nullptr)},
                   {"finish_reason", finish_reason(o)}};
    return Json{{"id", id},         {"object", "chat.completion"}, {"created", created},
                {"model", model},   {"choices", Json::array({choice})}, {"usage", usage_json(o)},
                {"system_fingerprint", nullptr}};
  }
  const std::string prefix = r.echo ? prompt_text : std::string();
  Json choice = {{"text", prefix + o.text},
                 {"index", 0},
                 {"logprobs", r.logprobs ? completion_logprobs_json(o, prefix.size()) : Json(nullptr)},
                 {"finish_reason", finish_reason(o.finish)}};
  return Json{{"id", id},       {"object", "text_completion"}, {"created", created},
              {"model", model}, {"choices", Json::array({choice})}, {"usage", usage_json(o)}};
}

/// One chunk of a streamed response: a piece of text (`delta`), the first chunk of a chat (`first`: the role), or the
/// last (`finish`: its finish_reason, finish_reason(outcome)).
inline Json chunk_json(const Request& r, const std::string& id, const std::string& model, std::int64_t created,
                       const std::string& delta, bool first, const char* finish) {
  if (r.endpoint == Endpoint::chat) {
    Json d = Json::object();
    if (first) d["role"] = "assistant";
    if (first || !delta.empty()) d["content"] = delta;
    Json choice = {{"index", 0}, {"delta", d}, {"logprobs", nullptr},
                   {"finish_reason", finish ? Json(finish) : Json(nullptr)}};
    return Json{{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
                {"model", model}, {"system_fingerprint", nullptr},     {"choices", Json::array({choice})}};
  }
  Json choice = {{"text", delta}, {"index", 0}, {"logprobs", nullptr},
                 {"finish_reason", finish ? Json(finish) : Json(nullptr)}};
  return Json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
              {"choices", Json::array({choice})}};
}

/// The chunk of a streamed chat that carries the answer's tool calls (each whole, with its index), then the last
/// chunk says finish_reason "tool_calls".
inline Json tool_calls_chunk_json(const std::string& id, const std::string& model, std::int64_t created,
                                  const std::vector<ToolCall>& calls) {
  Json choice = {{"index", 0}, {"delta", {{"tool_calls", tool_calls_json(calls, true)}}}, {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  return Json{{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
              {"model", model}, {"system_fingerprint", nullptr},     {"choices", Json::array({choice})}};
}

/// The usage chunk that ends a stream with stream_options.include_usage: no choices, the token counts.
inline Json usage_chunk_json(const Request& r, const std::string& id, const std::string& model, std::int64_t created,
                             const Outcome& o) {
  return Json{{"id", id},
              {"object", r.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array()},
              {"usage", usage_json(o)}};
}

/// GET /v1/models.
inline Json models_json(const std::string& id, std::int64_t created) {
  return Json{{"object", "list"},
              {"data", Json::array({Json{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "maxtext-cpp"}}})}};
}

}  // namespace maxtext::server
