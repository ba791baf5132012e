// tools/cli_text.cpp: `maxtext generate` (token ids or streamed text), `tokenize` and `detokenize`.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli_args.hpp"
#include "cli_common.hpp"
#include "cli_generate_options.hpp"
#include "cmd_tokenize.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/text_stream.hpp"

namespace maxtext::cli {

int cmd_generate(const Args& a) {
  MAXTEXT_CHECK(a.has("tokens") || a.has("prompt"), ArgumentError, "generate needs --tokens or --prompt");
  const Config cfg = make_config(a);
  std::unique_ptr<tokenizer::Tokenizer> tk;
  std::vector<std::vector<std::int32_t>> prompts;
  models::GenerateOptions go = generate_options(a, cfg, 32);
  if (a.has("prompt")) {
    MAXTEXT_CHECK(!a.has("tokens"), ArgumentError, "give --tokens or --prompt, not both");
    tk = open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
    prompts.push_back(tk->encode(a.get("prompt")));
    add_eos_stops(go, a, *tk, cfg);  // text generation ends at an end-of-sequence token
  } else {
    MAXTEXT_CHECK(go.stop_strings.empty(), ArgumentError, "--stop needs --prompt (text, through a tokenizer)");
    prompts = parse_token_rows(a.get("tokens"));
  }
  const auto t_load = std::chrono::steady_clock::now();
  const auto model = open_model(cfg, a);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  if (tk) {
    // Text: the prompt as given, then the generated text as it comes (whole UTF-8 characters, stop strings cut).
    std::cout << a.get("prompt") << std::flush;
    go.decode = models::decoder_for(*tk);
    go.on_text = [](std::int64_t, std::string_view d) {
      std::fwrite(d.data(), 1, d.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  const auto res = model->generate(prompts, go);
  if (tk) std::cout << "\n";
  for (std::size_t b = 0; b < res.tokens.size(); ++b) {
    std::cout << "tokens[" << b << "]: ";
    for (std::size_t i = 0; i < res.tokens[b].size(); ++i) std::cout << (i ? "," : "") << res.tokens[b][i];
    std::cout << "\n";
  }
  if (tk) std::cout << "finish: " << models::to_string(res.finish[0]) << "\n";
  std::printf("prefill: %lld tokens in %.3f ms (%.1f tokens/s)\n", static_cast<long long>(res.prompt_tokens),
              res.prefill_seconds * 1e3, res.prefill_tokens_per_second());
  std::printf("decode: %lld steps in %.3f ms (%.1f tokens/s)\n", static_cast<long long>(res.decode_steps),
              res.decode_seconds * 1e3, res.decode_tokens_per_second());
  std::printf("load: %.3f s (weights read, imported and laid out for the backend)\n", load_seconds);
  return 0;
}

int cmd_tokenize(const Args& a) {
  MAXTEXT_CHECK(a.has("weights") || a.has("tokenizer"), ArgumentError, a.command, " needs --weights or --tokenizer");
  std::int64_t vocab = 0;
  if (a.has("weights")) {
    const auto c = io::read_weights_config(a.get("weights"));
    if (c) vocab = c->vocab_size;
  }
  if (a.command == "detokenize") {
    MAXTEXT_CHECK(a.has("ids"), ArgumentError, "detokenize needs --ids");
    return run_detokenize(a.get("weights"), a.get("tokenizer"), a.get("ids"), vocab,
                          on_off(a.get("skip-special", "on"), "skip-special"));
  }
  MAXTEXT_CHECK(a.has("text") != a.has("text-file"), ArgumentError, "tokenize needs one of --text and --text-file");
  const std::string text = a.has("text") ? a.get("text") : read_text_file(a.get("text-file"));
  return run_tokenize(a.get("weights"), a.get("tokenizer"), text, vocab, on_off(a.get("add-special", "on"), "add-special"));
}

}  // namespace maxtext::cli
