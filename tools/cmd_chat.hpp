// tools/cmd_chat.hpp: `maxtext chat`: an interactive conversation on stdin/stdout (one user message per line, until
// EOF; works non-interactively with piped input). Each turn renders the whole conversation to prompt text, encodes it,
// and keeps a session (models::Session behind models::AnyModel) so only the tokens past the cached prefix go through the model (the session rewinds to
// the common prefix when the new prompt's ids differ from the cached ones). The answer streams as it is generated.
//
// Prompt formatting is behind ChatRenderer: the model's Jinja chat template (tokenizer/chat_template.hpp), whose text
// is encoded without adding special tokens (the template writes them), as Hugging Face's apply_chat_template does.
// Without a chat template the built-in plain format is used (and a note is printed): one "role: content" line per message, and "assistant:" as the generation prompt; generation then also
// stops at "\nuser:" (the model starting the next turn by itself).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/text_stream.hpp"
#include "maxtext/tokenizer/chat_template.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

namespace maxtext::cli {

/// Renders a conversation (a JSON array of {"role": ..., "content": ...}) as prompt text; with
/// add_generation_prompt, ends with what opens the assistant's answer.
using ChatRenderer = std::function<std::string(const nlohmann::json& messages, bool add_generation_prompt)>;

/// The built-in fallback format: "role: content\n" per message, then "assistant:" with add_generation_prompt.
inline std::string plain_chat_format(const nlohmann::json& messages, bool add_generation_prompt) {
  std::string s;
  for (const auto& m : messages) s += m.at("role").get<std::string>() + ": " + m.at("content").get<std::string>() + "\n";
  if (add_generation_prompt) s += "assistant:";
  return s;
}

/// The model's chat template: from the tokenizer path when given (a GGUF, a tokenizer.json / tokenizer_config.json or
/// a directory), else from the weights (a GGUF's tokenizer.chat_template, or tokenizer_config.json beside Hugging Face
/// weights). Empty when neither has one; a template that is present but malformed is an error.
inline std::optional<tokenizer::ChatTemplate> find_cli_chat_template(const std::string& weights,
                                                                     const std::string& tokenizer_file) {
  std::optional<tokenizer::ChatTemplate> t;
  if (!tokenizer_file.empty()) t = tokenizer::find_chat_template(tokenizer_file);
  if (!t && !weights.empty()) t = tokenizer::find_chat_template(weights);
  return t;
}

/// find_cli_chat_template as a ChatRenderer (empty without a template).
inline ChatRenderer find_chat_renderer(const std::string& weights, const std::string& tokenizer_file) {
  std::optional<tokenizer::ChatTemplate> t = find_cli_chat_template(weights, tokenizer_file);
  if (!t) return {};
  return [t = std::move(*t)](const nlohmann::json& messages, bool add_generation_prompt) {
    return t.render(messages, add_generation_prompt);
  };
}

struct ChatOptions {
  models::GenerateOptions gen;  ///< sampling, max_new_tokens per turn, stop tokens and strings
  std::string system;           ///< a system message first, when not empty
  ChatRenderer render;          ///< empty: plain_chat_format (a note says so)
  /// Prompt text -> ids (default: the tokenizer's encode with its default BOS).
  std::function<std::vector<std::int32_t>(const std::string&)> encode;
  std::int64_t capacity = 0;  ///< tokens the conversation may hold (0: the model's max_target_length)
  bool interactive = false;   ///< print a "> " prompt to `err` before reading each line (stdin is a terminal)
  /// Each user line before it joins the conversation (--image: llama.cpp's <__media__> becomes the model's marker).
  std::function<std::string(std::string)> user_text;
  /// Pictures (--image): the rendered conversation's ids, whose markers take the pictures in order, expanded in place;
  /// mask [1, ids] and rows [n, emb_dim] of the soft tokens, and MRoPE's 3-D positions [3, ids] where the model takes
  /// them (Qwen pictures; else left empty). Empty: no pictures.
  std::function<void(std::vector<std::int32_t>& ids, Tensor<std::int32_t, 2>& mask, Tensor<float, 2>& rows,
                     Tensor<std::int32_t, 2>& positions)>
      pictures;
  /// Speculative decoding (--spec lookup|draft): the drafter each turn checks K + 1 tokens at a time against; empty:
  /// plain decoding. Each turn's statistics line then adds the drafts kept.
  models::DraftFn drafter;
  /// --spec mtp: drafts from the model's MTP layers (AnySession::generate_mtp_speculative) instead.
  bool mtp = false;
  models::SpeculativeOptions spec;
  /// --session FILE: the conversation is restored from FILE when it exists (its messages and its cache, so the next
  /// turn prefills only what it adds) and saved there after every turn (models/session_file.hpp).
  std::string session_file;
  /// The next user line into its argument, false at the end (default: std::getline on the input stream). Under
  /// mpirun rank 0 reads and broadcasts each line, so that every rank runs the same turns (cli_chat.cpp).
  std::function<bool(std::string&)> read_line;
};

inline std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

/// Run the conversation: user lines from `in`, answers to `out`, notes and per-turn statistics to `err`.
inline int run_chat(models::AnyModel& model, const tokenizer::Tokenizer& tk, ChatOptions opt, std::istream& in, std::ostream& out,
             std::ostream& err) {
  if (!opt.render) {
    err << "note: no chat template for this model; using the plain format (\"role: content\" lines, then "
           "\"assistant:\"; see docs/generation.md)\n";
    opt.render = plain_chat_format;
    opt.gen.stop_strings.push_back("\nuser:");
  }
  if (!opt.encode) opt.encode = [&tk](const std::string& text) { return tk.encode(text); };
  opt.gen.decode = models::decoder_for(tk);
  opt.gen.on_text = [&out](std::int64_t, std::string_view d) {
    out << d << std::flush;
    return true;
  };
  const std::unique_ptr<models::AnySession> sp = model.new_session(opt.capacity);
  models::AnySession& session = *sp;
  nlohmann::json messages = nlohmann::json::array();
  if (!opt.system.empty()) messages.push_back({{"role", "system"}, {"content", opt.system}});
  if (!opt.session_file.empty() && std::filesystem::exists(opt.session_file)) {
    const std::string app = session.load(opt.session_file);
    nlohmann::json saved;
    try {
      saved = nlohmann::json::parse(app);
    } catch (const nlohmann::json::exception&) {
      MAXTEXT_THROW(IoError, "[chat] ", opt.session_file, " was not saved by maxtext chat (its application text is "
                    "not the chat's messages)");
    }
    const auto is_message = [](const nlohmann::json& m) {
      return m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
             m["content"].is_string();
    };
    MAXTEXT_CHECK(saved.is_object() && saved.contains("messages") && saved["messages"].is_array() &&
                      std::all_of(saved["messages"].begin(), saved["messages"].end(), is_message),
                  IoError, "[chat] ", opt.session_file, " was not saved by maxtext chat (its application text holds no "
                  "list of {role, content} messages)");
    MAXTEXT_CHECK(opt.system.empty() || (!saved["messages"].empty() && saved["messages"][0]["role"] == "system" &&
                                         saved["messages"][0]["content"] == opt.system),
                  ArgumentError, "[chat] --system differs from the system message of the conversation in ",
                  opt.session_file, " (leave --system out to go on with it)");
    messages = saved["messages"];
    err << "note: restored " << messages.size() << " messages (" << session.length() << " tokens) from "
        << opt.session_file << "\n";
  }
  std::string line;
  int turn = 0;
  const std::int64_t max_new = opt.gen.max_new_tokens;
  for (;;) {
    if (opt.interactive) err << "> " << std::flush;
    if (!(opt.read_line ? opt.read_line(line) : static_cast<bool>(std::getline(in, line)))) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    ++turn;
    messages.push_back({{"role", "user"}, {"content", opt.user_text ? opt.user_text(line) : line}});
    std::vector<std::int32_t> ids = opt.encode(opt.render(messages, true));
    Tensor<std::int32_t, 2> mask, positions;
    Tensor<float, 2> rows;
    if (opt.pictures) opt.pictures(ids, mask, rows, positions);
    const bool media = !rows.empty() && rows.dim(0) > 0;
    MAXTEXT_CHECK(positions.empty() || opt.session_file.empty(), UnsupportedError, "[chat] --session with a picture "
                  "that takes MRoPE's 3-D positions (Qwen): session files do not keep them yet");
    MAXTEXT_CHECK(static_cast<std::int64_t>(ids.size()) < session.capacity(), ArgumentError, "[chat] the conversation (",
                  ids.size(), " tokens) no longer fits the context of ", session.capacity(),
                  " tokens (--ctx-size)");
    const std::int64_t reused = session.sync(ids, media ? &mask : nullptr, media ? &rows : nullptr,
                                             positions.empty() ? nullptr : &positions);
    models::GenerateOptions g = opt.gen;
    g.max_new_tokens = std::min(max_new, session.capacity() - session.length());
    models::SpeculativeStats st;
    const bool spec = opt.mtp || opt.drafter;
    const auto res = opt.mtp       ? session.generate_mtp_speculative({}, g, opt.spec, &st)
                     : opt.drafter ? session.generate_speculative({}, g, opt.drafter, opt.spec, &st)
                                   : session.generate({}, g);
    out << "\n" << std::flush;
    messages.push_back({{"role", "assistant"}, {"content", trim(res.text[0])}});
    if (!opt.session_file.empty()) session.save(opt.session_file, nlohmann::json{{"messages", messages}}.dump());
    const auto n = static_cast<long long>(res.tokens[0].size());
    char buf[256];
    std::snprintf(buf, sizeof buf, "%.1f", res.decode_tokens_per_second());
    err << "[turn " << turn << ": prefilled " << res.prompt_tokens << " new tokens of " << ids.size() << " (" << reused
        << " reused from the cache), generated " << n << " tokens (" << models::to_string(res.finish[0]) << "), "
        << buf << " tokens/s"
        << (spec ? ", " + std::to_string(st.total_accepted()) + " of " + std::to_string(st.total_drafted()) +
                              " drafts kept in " + std::to_string(st.verify_passes) + " passes"
                        : std::string())
        << "]\n"
        << std::flush;
  }
  return 0;
}

}  // namespace maxtext::cli
