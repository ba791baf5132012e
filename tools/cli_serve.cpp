// tools/cli_serve.cpp: `maxtext serve`: an OpenAI-compatible HTTP server over one model (tools/cmd_serve.hpp; the API
// and the slots are the library's, include/maxtext/server/). Compiled when cpp-httplib is found
// (-DMAXTEXT_CLI_SERVE=ON, the default then); without it maxtext.cpp refuses the command by name.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cli_generate_options.hpp"
#include "cmd_chat.hpp"
#include "cmd_serve.hpp"
#include "cmd_tokenize.hpp"
#include "maxtext/models/any_model.hpp"

namespace maxtext::cli {

int cmd_serve(const Args& a) {
  MAXTEXT_CHECK(a.has("weights") || a.has("tokenizer"), ArgumentError, "serve needs --weights (and a tokenizer)");
  block_stop_signals();  // before any thread exists (OpenMP's, the slots'): run_serve waits for them
  ServeOptions so;
  so.host = a.get("host", so.host);
  so.port = static_cast<int>(a.integer("port", so.port));
  MAXTEXT_CHECK(so.port >= 0 && so.port <= 65535, ArgumentError, "--port must be in [0, 65535], found ", so.port);
  const long long max_body = a.integer("max-body", static_cast<long long>(so.max_body));
  MAXTEXT_CHECK(max_body >= 1024 && max_body <= (1LL << 30), ArgumentError,
                "--max-body must be in [1024, 2^30] bytes, found ", max_body);
  so.max_body = static_cast<std::size_t>(max_body);
  // The key from --api-key (as llama-server takes it; but a command line shows in `ps`), --api-key-file or
  // $MAXTEXT_API_KEY.
  MAXTEXT_CHECK(!(a.has("api-key") && a.has("api-key-file")), ArgumentError, "give --api-key or --api-key-file, not both");
  if (a.has("api-key")) {
    so.api_key = trim(a.get("api-key"));
    MAXTEXT_CHECK(!so.api_key.empty(), ArgumentError, "--api-key: empty key");
  } else if (a.has("api-key-file")) {
    std::ifstream f(a.get("api-key-file"));
    MAXTEXT_CHECK(f.good(), IoError, "--api-key-file ", a.get("api-key-file"), ": cannot open");
    std::getline(f, so.api_key);
    so.api_key = trim(so.api_key);
    MAXTEXT_CHECK(!so.api_key.empty(), ArgumentError, "--api-key-file ", a.get("api-key-file"), ": empty key");
  } else if (const char* k = std::getenv("MAXTEXT_API_KEY"); k != nullptr && *k != '\0') {
    so.api_key = trim(k);
  }

  const Config cfg = make_config(a);
  const auto tk = open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
  server::EngineOptions eo;
  eo.slots = static_cast<int>(a.integer("parallel", 1));
  eo.queue = static_cast<int>(a.integer("queue", 16));
  eo.batching.max_rows = a.integer("batch-rows", eo.batching.max_rows);
  MAXTEXT_CHECK(eo.batching.max_rows >= 1 && eo.batching.max_rows <= 256, ArgumentError,
                "--batch-rows must be in [1, 256], found ", eo.batching.max_rows);
  eo.batching.prefill_chunk = a.integer("prefill-chunk", eo.batching.prefill_chunk);
  MAXTEXT_CHECK(eo.batching.prefill_chunk >= 0, ArgumentError, "--prefill-chunk must be >= 0 (0: whole prompts), found ",
                eo.batching.prefill_chunk);
  eo.batching.prefill_rows = a.integer("prefill-rows", eo.batching.prefill_rows);
  MAXTEXT_CHECK(eo.batching.prefill_rows >= 1 && eo.batching.prefill_rows <= 256, ArgumentError,
                "--prefill-rows must be in [1, 256], found ", eo.batching.prefill_rows);
  eo.ctx = a.integer("ctx-size", std::min<std::int64_t>(cfg.max_target_length, 4096));
  MAXTEXT_CHECK(eo.ctx > 1, ArgumentError, "--ctx-size must be > 1, found ", eo.ctx);
  eo.default_max_tokens = a.integer("max-new-tokens", 0);
  MAXTEXT_CHECK(eo.default_max_tokens >= 0, ArgumentError, "--max-new-tokens must be >= 0 (0: what the context leaves)");
  eo.model_id = a.get("alias");
  if (eo.model_id.empty()) {
    const std::string w = a.get("weights");
    eo.model_id = w.substr(w.find_last_of('/') == std::string::npos ? 0 : w.find_last_of('/') + 1);
  }
  models::GenerateOptions eos;
  add_eos_stops(eos, a, *tk, cfg);
  eo.stop_tokens = eos.stop_tokens;
  // The chat template (as `maxtext chat` finds it), also with tools: calls in the syntax it teaches.
  std::optional<tokenizer::ChatTemplate> found = find_cli_chat_template(a.get("weights"), a.get("tokenizer"));
  if (found) {
    auto t = std::make_shared<const tokenizer::ChatTemplate>(std::move(*found));
    eo.render = [t](const nlohmann::json& messages, bool add) { return t->render(messages, add); };
    eo.render_tools = [t](const nlohmann::json& messages, const nlohmann::json& tools, bool add) {
      tokenizer::ChatOptions o;
      o.add_generation_prompt = add;
      o.tools = tools;
      return t->render(messages, o);
    };
    eo.tool_format = server::tool_format_of(t->source());
    eo.encode_chat = [&tk](const std::string& text) { return tk->encode(text, false); };
  } else {
    std::cerr << "note: no chat template for this model; chat requests use the plain format (\"role: content\" "
                 "lines, then \"assistant:\"; see docs/generation.md)\n";
    eo.render = plain_chat_format;
    eo.chat_stop_strings.push_back("\nuser:");
  }
  // Pictures (image_url parts): the tower of --mmproj, or of a Gemma 3 / Llama 4 checkpoint that carries one
  // (cli_vision.cpp).
  std::shared_ptr<const PictureTower> tower = open_picture_tower(a, cfg);
  if (tower) {
    eo.pictures.marker = tower->marker();
    eo.pictures.expand = [tower](const std::vector<std::int32_t>& ids, const std::vector<server::Picture>& pictures) {
      std::vector<PictureFile> files;
      for (const auto& p : pictures) files.push_back({p.bytes, p.field});
      return tower->expand(ids, files);
    };
    std::cerr << "serve: pictures in chat requests (image_url data URLs) go through the vision tower\n";
  } else {
    MAXTEXT_CHECK(!a.has("image-preprocess"), ArgumentError, "serve --image-preprocess needs a vision tower (--mmproj, "
                  "or a Gemma 3 / Llama 4 checkpoint with one)");
  }
  const auto model = open_model(cfg, a);
  server::Engine engine(*model, *tk, eo);
  return run_serve(engine, so, std::cerr);
}

}  // namespace maxtext::cli
