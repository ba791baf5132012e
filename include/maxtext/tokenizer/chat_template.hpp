// tokenizer/chat_template.hpp: chat prompts from a model's Jinja chat template (Hugging Face tokenizer_config.json
// `chat_template`, or GGUF `tokenizer.chat_template`), rendered by jinja.hpp exactly as @huggingface/jinja renders
// them for transformers.js. The render context: messages, add_generation_prompt, tools and documents (null unless
// given), the special tokens the config names (bos_token, eos_token, unk_token, pad_token, as text), then any extra
// variables (e.g. enable_thinking). See docs/chat-templates.md.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/tokenizer/jinja.hpp"

namespace maxtext::tokenizer {

using Json = jinja::Json;

/// Options of one chat render beyond the messages.
struct ChatOptions {
  bool add_generation_prompt = false;                 ///< end with the header of an assistant turn
  Json tools = nullptr;                     ///< a list of tool (function) schemas, or null
  Json extra = Json::object();    ///< more template variables (e.g. {"enable_thinking": false})
};

/// A chat template and the special-token text it refers to.
class ChatTemplate {
 public:
  /// `special_tokens`: a JSON object of token texts (bos_token, eos_token, ...); `name` appears in error messages.
  explicit ChatTemplate(std::string source, Json special_tokens = Json::object(),
                        std::string name = "chat_template")
      : template_(std::move(source), std::move(name)), special_(std::move(special_tokens)) {
    MAXTEXT_CHECK(special_.is_object(), ArgumentError, "[chat_template] special tokens must be a JSON object");
  }

  /// The prompt for `messages` (a JSON list of {"role", "content", ...} objects).
  std::string render(const Json& messages, bool add_generation_prompt) const {
    ChatOptions o;
    o.add_generation_prompt = add_generation_prompt;
    return render(messages, o);
  }
  std::string render(const Json& messages, const ChatOptions& options) const {
    return template_.render(context(messages, options));
  }

  /// The variables render() passes to the template.
  Json context(const Json& messages, const ChatOptions& options) const {
    MAXTEXT_CHECK(messages.is_array(), ArgumentError, "[chat_template] messages must be a JSON list, found ",
                  messages.type_name());
    for (std::size_t i = 0; i < messages.size(); ++i) {
      MAXTEXT_CHECK(messages[i].is_object(), ArgumentError, "[chat_template] messages[", i,
                    "] must be an object with \"role\" and \"content\", found ", messages[i].type_name());
    }
    MAXTEXT_CHECK(options.tools.is_null() || options.tools.is_array(), ArgumentError,
                  "[chat_template] tools must be a JSON list or null, found ", options.tools.type_name());
    MAXTEXT_CHECK(options.extra.is_object() || options.extra.is_null(), ArgumentError,
                  "[chat_template] extra variables must be a JSON object");
    Json ctx = Json::object();
    ctx["messages"] = messages;
    ctx["add_generation_prompt"] = options.add_generation_prompt;
    ctx["tools"] = options.tools;
    ctx["documents"] = nullptr;
    for (auto it = special_.begin(); it != special_.end(); ++it) ctx[it.key()] = it.value();
    if (options.extra.is_object()) {
      for (auto it = options.extra.begin(); it != options.extra.end(); ++it) ctx[it.key()] = it.value();
    }
    return ctx;
  }

  const std::string& source() const { return template_.source(); }
  const Json& special_tokens() const { return special_; }
  /// A special token's text ("" when the config names none).
  std::string token(const std::string& key) const {
    auto it = special_.find(key);
    return it != special_.end() && it->is_string() ? it->get<std::string>() : "";
  }
  std::string bos_token() const { return token("bos_token"); }
  std::string eos_token() const { return token("eos_token"); }

 private:
  jinja::Template template_;
  Json special_;
};

namespace detail {

inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MAXTEXT_CHECK(f.good(), IoError, "[chat_template] cannot open ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool is_gguf_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

}  // namespace detail

/// The chat template of a Hugging Face tokenizer_config.json (already parsed; `where` names it in errors):
/// `chat_template` as a string, or a list of {"name", "template"} from which "default" is taken; the special tokens
/// bos/eos/unk/pad as strings or {"content": ...} objects.
inline ChatTemplate chat_template_from_config(const nlohmann::json& config, const std::string& where) {
  MAXTEXT_CHECK(config.is_object(), IoError, "[chat_template] ", where, ": expected a JSON object");
  auto it = config.find("chat_template");
  MAXTEXT_CHECK(it != config.end() && !it->is_null(), IoError, "[chat_template] ", where, ": no chat_template");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    std::string names;
    bool found = false;
    for (const auto& t : *it) {
      MAXTEXT_CHECK(t.is_object() && t.contains("name") && t.contains("template") && t["name"].is_string() &&
                        t["template"].is_string(),
                    IoError, "[chat_template] ", where, ": chat_template list entries must be {\"name\", \"template\"} strings");
      names += (names.empty() ? "" : ", ") + t["name"].get<std::string>();
      if (t["name"] == "default" && !found) {
        source = t["template"].get<std::string>();
        found = true;
      }
    }
    MAXTEXT_CHECK(found, IoError, "[chat_template] ", where, ": chat_template has no \"default\" entry (has: ",
                  names, ")");
  } else {
    MAXTEXT_THROW(IoError, "[chat_template] ", where, ": chat_template: expected a string or a list, found ",
                  it->type_name());
  }
  Json special = Json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto t = config.find(key);
    if (t == config.end()) continue;
    if (t->is_string()) special[key] = *t;
    if (t->is_object() && t->contains("content") && (*t)["content"].is_string()) special[key] = (*t)["content"];
  }
  return ChatTemplate(std::move(source), std::move(special), where);
}

/// The chat template of a GGUF file: `tokenizer.chat_template`, with bos/eos text taken from the vocabulary
/// (tokenizer.ggml.tokens at tokenizer.ggml.bos_token_id / eos_token_id).
inline ChatTemplate chat_template_from_gguf(const std::string& path) {
  const io::GgufFile g = io::read_gguf(path);
  const io::GgufValue* t = g.find("tokenizer.chat_template");
  MAXTEXT_CHECK(t != nullptr, IoError, "[chat_template] ", path, ": the GGUF has no tokenizer.chat_template");
  const std::string source = t->as_string(g.where("tokenizer.chat_template"));
  Json special = Json::object();
  const io::GgufValue* toks = g.find("tokenizer.ggml.tokens");
  for (const auto& [key, meta] : {std::pair<const char*, const char*>{"bos_token", "tokenizer.ggml.bos_token_id"},
                                  {"eos_token", "tokenizer.ggml.eos_token_id"},
                                  {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                  {"pad_token", "tokenizer.ggml.padding_token_id"}}) {
    if (!g.has(meta)) continue;
    const std::int64_t id = g.get_int(meta);
    MAXTEXT_CHECK(toks && toks->is_array() && toks->elem == io::GgufType::string, IoError, "[chat_template] ", path,
                  ": ", meta, " is set but tokenizer.ggml.tokens is not a list of strings");
    MAXTEXT_CHECK(id >= 0 && static_cast<std::size_t>(id) < toks->strings.size(), IoError, "[chat_template] ", path, ": ",
                  meta, " = ", id, " is outside the vocabulary of ", toks->strings.size(), " tokens");
    special[key] = toks->strings[static_cast<std::size_t>(id)];
  }
  return ChatTemplate(source, std::move(special), path + ": tokenizer.chat_template");
}

/// The chat template for `path`: a GGUF file; a tokenizer_config.json (or any JSON with a chat_template key); a
/// tokenizer.json (or other file) with tokenizer_config.json beside it; or a directory holding tokenizer_config.json.
inline ChatTemplate load_chat_template(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MAXTEXT_CHECK(fs::exists(path, ec), IoError, "[chat_template] ", path, ": no such file or directory");
  std::string config_path;
  if (fs::is_directory(path, ec)) {
    config_path = (fs::path(path) / "tokenizer_config.json").string();
    MAXTEXT_CHECK(fs::exists(config_path, ec), IoError, "[chat_template] ", path, ": no tokenizer_config.json in the directory");
  } else if (detail::is_gguf_file(path)) {
    return chat_template_from_gguf(path);
  } else {
    // A tokenizer.json is not read (large, and it holds no template); another JSON file may be a config itself.
    if (fs::path(path).extension() == ".json" && fs::path(path).filename() != "tokenizer.json") {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(detail::read_text_file(path));
      } catch (const nlohmann::json::exception& e) {
        MAXTEXT_THROW(IoError, "[chat_template] ", path, ": invalid JSON: ", e.what());
      }
      if (j.is_object() && j.contains("chat_template")) return chat_template_from_config(j, path);
    }
    config_path = (fs::path(path).parent_path() / "tokenizer_config.json").string();
    MAXTEXT_CHECK(fs::exists(config_path, ec), IoError, "[chat_template] ", path,
                  ": no chat_template in it and no tokenizer_config.json beside it");
  }
  nlohmann::json j;  // key order does not matter here (and a sorted map parses large configs fast)
  try {
    j = nlohmann::json::parse(detail::read_text_file(config_path));
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(IoError, "[chat_template] ", config_path, ": invalid JSON: ", e.what());
  }
  return chat_template_from_config(j, config_path);
}

/// The chat template at `path` (as load_chat_template reads it) when there is one; nullopt when the source holds none:
/// a GGUF without tokenizer.chat_template, a file or directory without tokenizer_config.json, or a config without a
/// chat_template key. A template that is present but malformed still throws.
inline std::optional<ChatTemplate> find_chat_template(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return std::nullopt;
  if (!fs::is_directory(path, ec) && detail::is_gguf_file(path)) {
    if (io::read_gguf(path).find("tokenizer.chat_template") == nullptr) return std::nullopt;
    return chat_template_from_gguf(path);
  }
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  const fs::path config_path = dir / "tokenizer_config.json";
  if (!fs::exists(config_path, ec)) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(detail::read_text_file(config_path.string()));
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(IoError, "[chat_template] ", config_path.string(), ": invalid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null()) return std::nullopt;
  return chat_template_from_config(j, config_path.string());
}

}  // namespace maxtext::tokenizer
