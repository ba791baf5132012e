// tools/cli_text.cpp: `maxtext generate` (token ids or streamed text), `tokenize` and `detokenize`.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli_args.hpp"
#include "cli_common.hpp"
#include "cli_generate_options.hpp"
#include "cli_spec.hpp"
#include "cmd_tokenize.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/constrained.hpp"
#include "maxtext/models/grammar.hpp"
#include "maxtext/models/json_schema.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/text_stream.hpp"

namespace maxtext::cli {

/// llama.cpp's media marker `<__media__>` (mtmd) rewritten to the model's own picture marker; the text must hold one
/// marker per --image (for a chat, over its messages).
std::string with_image_markers(const Args& a, std::string text, const PromptPictures* pictures, std::size_t* next) {
  const std::string marker = image_marker_text(a);
  if (marker.empty()) return text;
  const std::string mtmd = "<__media__>";
  for (std::size_t at = text.find(mtmd); at != std::string::npos; at = text.find(mtmd, at + marker.size())) {
    text.replace(at, mtmd.size(), marker);
  }
  const std::vector<std::size_t> crops = pictures != nullptr ? pictures->crops() : std::vector<std::size_t>{};
  if (crops.empty()) return text;
  std::size_t k = 0;
  for (std::size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + marker.size())) ++k;
  const std::size_t first = next != nullptr ? *next : 0;
  MAXTEXT_CHECK(first + k <= crops.size(), ArgumentError, "[image] ", first + k, " picture marker(s) for ",
                crops.size(), " --image file(s): one marker per picture");
  if (next != nullptr) *next = first + k;
  return with_pan_and_scan(a, std::move(text),
                           std::vector<std::size_t>(crops.begin() + static_cast<std::ptrdiff_t>(first),
                                                    crops.begin() + static_cast<std::ptrdiff_t>(first + k)));
}

PromptImages encode_prompt_images(const Args& a, const Config& cfg, const std::vector<std::int32_t>& prompt) {
  return open_prompt_pictures(a, cfg)->expand(prompt, true);
}

models::DraftFn SpecChoice::function() {
  if (kind == "lookup") {
    return [this](const std::vector<std::int32_t>& c, std::int64_t k) { return lookup.propose(c, k); };
  }
  if (kind == "draft") return draft->as_function();
  return {};
}

std::unique_ptr<SpecChoice> open_spec(const Args& a, const Config& cfg, std::int64_t draft_capacity) {
  auto sc = std::make_unique<SpecChoice>();
  const std::string spec = a.get("spec");
  sc->kind = spec;
  MAXTEXT_CHECK(spec.empty() || spec == "lookup" || spec == "draft" || spec == "mtp", ArgumentError,
                "--spec: expected lookup (prompt lookup), draft (a draft model, --draft FILE) or mtp (the model's "
                "multi-token prediction layers), found '", spec, "'");
  MAXTEXT_CHECK(spec != "mtp" || cfg.mtp_num_layers > 0, ArgumentError, "--spec mtp: the model has no MTP layers "
                "(mtp_num_layers = 0; DeepSeek-V3 checkpoints carry one: num_nextn_predict_layers)");
  MAXTEXT_CHECK(spec == "draft" || !a.has("draft"), ArgumentError, "--draft FILE needs --spec draft");
  MAXTEXT_CHECK(spec == "draft" || !a.has("draft-int8-activations"), ArgumentError,
                "--draft-int8-activations needs --spec draft");
  MAXTEXT_CHECK(spec != "draft" || a.has("draft"), ArgumentError, "--spec draft needs --draft FILE (the draft model)");
  MAXTEXT_CHECK(!spec.empty() || !a.has("draft-max"), ArgumentError, "--draft-max needs --spec lookup, draft or mtp");
  sc->options.draft_max = a.integer("draft-max", 4);
  MAXTEXT_CHECK(spec == "mtp" || !a.has("mtp-hidden"), ArgumentError, "--mtp-hidden needs --spec mtp");
  sc->options.mtp_hidden = mtp_hidden_option(a);
  MAXTEXT_CHECK(sc->options.draft_max >= 1, ArgumentError, "--draft-max must be >= 1, found ", sc->options.draft_max);
  if (spec == "draft") {  // its own file, config and weight type; the model's thread count
    Args da;
    da.command = a.command;
    da.opt["weights"] = a.get("draft");
    if (a.has("threads")) da.opt["threads"] = a.get("threads");
    // The draft's arithmetic never changes the output (the model checks every draft), only how many are accepted:
    // by default its products take 8-bit activations where its weights allow, as llama.cpp's drafts do.
    const std::string di8 = a.get("draft-int8-activations", "auto");
    MAXTEXT_CHECK(di8 == "on" || di8 == "off" || di8 == "auto", ArgumentError,
                  "--draft-int8-activations: expected on, off or auto (the default: on where the draft's weights are "
                  "Q8_0 or a GGUF file's blocks), found '", di8, "'");
    da.opt["int8-activations"] = di8;
    const Config dcfg = make_config(da);
    MAXTEXT_CHECK(dcfg.vocab_size <= cfg.vocab_size, ArgumentError, "--draft ", a.get("draft"), ": vocab_size ",
                  dcfg.vocab_size, " is larger than the model's ", cfg.vocab_size,
                  " (a draft model shares the model's tokenizer)");
    sc->draft_model = open_model(dcfg, da, true, "--draft-int8-activations");
    sc->draft = std::make_unique<models::AnyModelDrafter>(*sc->draft_model, draft_capacity);
  }
  return sc;
}

/// --grammar GBNF, --grammar-file FILE, --json-schema JSON, --json-schema-file FILE (generate, as llama.cpp's
/// programs name them): the grammar the generated text follows (a JSON Schema compiled to one), or nullptr. One of
/// them at most; a grammar or schema the compiler refuses is refused with the option that gave it.
std::shared_ptr<const models::grammar::Grammar> open_grammar(const Args& a) {
  std::string given;
  for (const char* name : {"grammar", "grammar-file", "json-schema", "json-schema-file"}) {
    if (!a.has(name)) continue;
    MAXTEXT_CHECK(given.empty(), ArgumentError, "give one of --grammar, --grammar-file, --json-schema and "
                  "--json-schema-file, found ", given, " and --", name);
    given = std::string("--") + name;
  }
  if (given.empty()) return nullptr;
  const bool file = given.size() > 5 && given.compare(given.size() - 5, 5, "-file") == 0;
  const std::string what = file ? given + " " + a.get(given.substr(2)) : given;
  std::string text = a.get(given.substr(2));
  if (file) {  // a grammar or schema of more than 16 MiB is no grammar (the compiler's bounds are far below)
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(text, ec);
    MAXTEXT_CHECK(!ec, ArgumentError, what, ": cannot read it (", ec.message(), ")");
    MAXTEXT_CHECK(bytes <= (std::uintmax_t{16} << 20), ArgumentError, what, ": ", bytes, " bytes, more than the 16 MiB "
                  "a grammar or schema file may have");
    text = io::read_text_file(text);
  }
  return models::grammar::grammar_from_text(given.rfind("--grammar", 0) == 0 ? models::grammar::GrammarText::gbnf
                                                                              : models::grammar::GrammarText::json_schema,
                                            text, what);
}

int cmd_generate(const Args& a) {
  MAXTEXT_CHECK(a.has("tokens") || a.has("prompt"), ArgumentError, "generate needs --tokens or --prompt");
  const Config cfg = make_config(a);
  std::unique_ptr<tokenizer::Tokenizer> tk;
  std::vector<std::vector<std::int32_t>> prompts;
  models::GenerateOptions go = generate_options(a, cfg, 32);
  const bool images = has_media(a);
  check_media_options(a);
  std::string prompt_text = a.get("prompt");
  MAXTEXT_CHECK(!(a.has("prompt") && a.has("tokens")), ArgumentError, "give --tokens or --prompt, not both");
  // Pictures (--image): decoded and encoded once, before the text (pan-and-scan's crops change the prompt's text).
  std::unique_ptr<PromptPictures> pictures;
  if (images) {
    MAXTEXT_CHECK(!a.has("spec"), UnsupportedError, "--image / --audio with --spec: speculative decoding takes no pictures or sound yet");
    MAXTEXT_CHECK(a.has("prompt") || !a.has("pan-and-scan"), ArgumentError, "--pan-and-scan needs --prompt (the text "
                  "that introduces the crops goes through the tokenizer)");
    pictures = open_prompt_pictures(a, cfg);
  }
  if (a.has("prompt")) {
    tk = open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
    if (images) prompt_text = with_image_markers(a, prompt_text, pictures.get());
    prompts.push_back(tk->encode(prompt_text));
    add_eos_stops(go, a, *tk, cfg);  // text generation ends at an end-of-sequence token
  } else {
    MAXTEXT_CHECK(go.stop_strings.empty(), ArgumentError, "--stop needs --prompt (text, through a tokenizer)");
    prompts = parse_token_rows(a.get("tokens"));
  }
  // Pictures (--image): the markers expanded to the model's image tokens, the soft tokens merged at the prefill.
  PromptImages media;
  Tensor<std::int32_t, 3> media_positions;  // MRoPE's [3, 1, T] (Qwen pictures)
  if (images) {
    MAXTEXT_CHECK(prompts.size() == 1, ArgumentError, "--image: one prompt at a time, found ", prompts.size(),
                  " rows in --tokens");
    media = pictures->expand(prompts[0], true);
    prompts[0] = media.ids;
    go.media_mask = &media.mask;
    go.media_embeddings = &media.embeddings;
    if (!media.positions.empty()) {
      media_positions = Tensor<std::int32_t, 3>({3, 1, media.positions.dim(1)});
      std::copy(media.positions.data(), media.positions.data() + media.positions.size(), media_positions.data());
      go.media_positions = &media_positions;
    }
  }
  // A grammar (--grammar, --json-schema, ...): the text follows it (models::generate_constrained); text only, one
  // prompt, without speculation or pictures (not combined yet).
  const auto grammar = open_grammar(a);
  MAXTEXT_CHECK(!grammar || tk, ArgumentError, "--grammar / --json-schema need --prompt (text, through a tokenizer)");
  MAXTEXT_CHECK(!grammar || !a.has("spec"), UnsupportedError, "--grammar / --json-schema with --spec: constrained "
                "speculative decoding is not implemented yet");
  MAXTEXT_CHECK(!grammar || !images, UnsupportedError, "--grammar / --json-schema with --image: not implemented yet");
  // Speculative decoding (--spec lookup|draft|mtp): one prompt; greedy, the tokens plain greedy decoding gives;
  // sampled, tokens distributed as plain sampling's (the rejection rule).
  MAXTEXT_CHECK(!a.has("spec") || prompts.size() == 1, ArgumentError, "--spec: one prompt at a time, found ",
                prompts.size(), " rows in --tokens");
  const auto t_load = std::chrono::steady_clock::now();
  // The draft model (--spec draft) is loaded before any text is printed, so that what loading reports comes first.
  const auto sc = open_spec(a, cfg, static_cast<std::int64_t>(prompts[0].size()) + go.max_new_tokens +
                                        a.integer("draft-max", 4) + 1);
  const auto model = open_model(cfg, a);
  const std::string& spec = sc->kind;
  const models::SpeculativeOptions& so = sc->options;
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  if (tk) {
    // Text: the prompt as given, then the generated text as it comes (whole UTF-8 characters, stop strings cut).
    std::cout << prompt_text << std::flush;
    go.decode = models::decoder_for(*tk);
    go.on_text = [](std::int64_t, std::string_view d) {
      std::fwrite(d.data(), 1, d.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  models::GenerateResult res;
  models::SpeculativeStats st;
  if (grammar) {
    models::detail::AnyDraftModel adapter(*model);  // make_cache / forward over the model's virtual interface
    res = models::generate_constrained(adapter, *tk, prompts[0], go, grammar);
  } else if (spec.empty()) {
    res = model->generate(prompts, go);
  } else {
    if (spec == "mtp") {
      res = model->generate_mtp_speculative(prompts[0], go, so, &st);
    } else {
      res = model->generate_speculative(prompts[0], go, sc->function(), so, &st);
    }
  }
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
  if (!spec.empty()) {
    std::printf("speculative: %s, draft-max %lld: %lld verify passes, %lld of %lld drafts accepted (%.1f%%); "
                "accepted/drafted per position:",
                spec.c_str(), static_cast<long long>(so.draft_max), static_cast<long long>(st.verify_passes),
                static_cast<long long>(st.total_accepted()), static_cast<long long>(st.total_drafted()),
                100.0 * st.acceptance_rate());
    for (std::size_t i = 0; i < st.drafted.size(); ++i) {
      std::printf(" %lld/%lld", static_cast<long long>(st.accepted[i]), static_cast<long long>(st.drafted[i]));
    }
    std::printf("\n");
  }
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
