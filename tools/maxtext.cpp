// tools/maxtext.cpp: the `maxtext` command-line program: logits and generate on any model the registry knows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/io/generation_config.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/generate.hpp"
#include "cli_common.hpp"
#include "maxtext_blocks_built.hpp"  // the models, compiled per decoder block in maxtext_blocks (tools/blocks/)
#include "cmd_tokenize.hpp"
#include "cmd_template.hpp"

#include "cmd_chat.hpp"
#include "cmd_compare.hpp"

namespace {

using namespace maxtext;

const char* kUsage = R"(usage: maxtext <command> [options] [key=value ...]

commands:
  logits    --config CFG [--weights FILE] --tokens 1,2,3[/4,5,6] [--incremental N] --out logits.npy
  generate  --config CFG [--weights FILE] --tokens 1,2,3[/...] --max-new-tokens N
            [--temperature T] [--top-k K] [--top-p P] [--seed S]
  generate  --weights FILE [--tokenizer FILE] --prompt "text" [--max-new-tokens N] [--stop STRING ...] [...]:
            streams the text
  chat      --weights FILE [--tokenizer FILE] [--system TEXT] [--max-new-tokens N] [--ctx-size N] [sampling]:
            a conversation, one user message per line of stdin until EOF; the KV cache is kept between turns
  tokenize  (--weights FILE | --tokenizer PATH) (--text "text" | --text-file FILE) [--add-special on|off]:
            prints the ids comma-separated (on, the default: with the special tokens / BOS the tokenizer adds)
  detokenize (--weights FILE | --tokenizer PATH) --ids 1,2,3 [--skip-special on|off]: writes the text to stdout
  info      --config CFG [--weights FILE]
)" MAXTEXT_TEMPLATE_USAGE MAXTEXT_COMPARE_USAGE R"(
common options:
  --config FILE      MaxText YAML (a model file such as configs/models/gpt3-52k.yml) or a Hugging Face config.json;
                     key=value overrides follow
  --weights FILE     MaxText safetensors, Hugging Face safetensors (file, index or directory, config.json beside),
                     GGUF (.gguf) or a llama2.c checkpoint (.bin); without it the model is initialised from --seed.
                     GGUF, llama2.c and Hugging Face weights carry their config: --config is then optional
  --tokenizer FILE   tokenizer for --prompt / tokenize: Hugging Face tokenizer.json (or a directory holding one),
                     .gguf, llama2.c tokenizer.bin, SentencePiece .model (default: the GGUF's own, or tokenizer.json /
                     tokenizer.model / tokenizer.bin / tok<vocab>.bin beside the weights)
  --weight-type T    store weights as float32 (default: dtype), bfloat16, float16 or q8_0 (float32 activations)
  --threads N        CPU threads (default: all cores)
  --int8-activations on|off
                     with --weight-type q8_0: quantise activations to 8 bits per 32-block and use integer dot
                     products (llama.cpp's Q8_0 arithmetic; faster, ~1% rms logit error). Default off: exact
  --seed S           seed for initialisation and sampling (default: init_weights_seed)

sampling (generate, chat; applied in this order, see docs/generation.md):
  --logit-bias ID=B[,ID=B]   add B to token ID's logit (B may be -inf to ban it)
  --repeat-penalty R         divide positive / multiply negative logits of tokens in the prompt and output (1: off)
  --frequency-penalty F      subtract F per earlier occurrence in the output (0: off)
  --presence-penalty P       subtract P from tokens already in the output (0: off)
  --temperature T            0 (default): greedy
  --top-k K, --top-p P, --min-p M
  --stop STRING              stop when the text contains STRING (repeatable; \n, \t, \\ are escapes); the text
                             ends before it. Text generation also stops at the end-of-sequence ids of the tokenizer
                             and of config.json / generation_config.json / GGUF metadata
)";

struct Args {
  std::string command;
  std::map<std::string, std::string> opt;
  std::map<std::string, std::vector<std::string>> all;  ///< every value of a repeated option, in order
  std::vector<std::string> overrides;

  bool has(const std::string& k) const { return opt.count(k) != 0; }
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = opt.find(k);
    return it == opt.end() ? d : it->second;
  }
  long long integer(const std::string& k, long long d) const {
    if (!has(k)) return d;
    try {
      std::size_t pos = 0;
      const long long v = std::stoll(get(k), &pos);
      if (pos == get(k).size()) return v;
    } catch (const std::exception&) {
    }
    MAXTEXT_THROW(ArgumentError, "--", k, ": expected an integer, found '", get(k), "'");
  }
  double number(const std::string& k, double d) const {
    if (!has(k)) return d;
    try {
      std::size_t pos = 0;
      const double v = std::stod(get(k), &pos);
      if (pos == get(k).size()) return v;
    } catch (const std::exception&) {
    }
    MAXTEXT_THROW(ArgumentError, "--", k, ": expected a number, found '", get(k), "'");
  }
};

Args parse_args(int argc, char** argv) {
  Args a;
  MAXTEXT_CHECK(argc >= 2, ArgumentError, "missing command");
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      std::string key = s.substr(2), value;
      const auto eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else {
        MAXTEXT_CHECK(i + 1 < argc, ArgumentError, "option --", key, " needs a value");
        value = argv[++i];
      }
      a.opt[key] = value;
      a.all[key].push_back(value);
    } else if (s.find('=') != std::string::npos) {
      a.overrides.push_back(s);
    } else {
      MAXTEXT_THROW(ArgumentError, "unexpected argument '", s, "'");
    }
  }
  return a;
}

Config make_config(const Args& a) {
  if (!a.has("config") && a.has("weights")) return cli::config_from_weights(a.get("weights"), a.overrides);
  const std::string path = a.get("config");
  if (io::ends_with(path, ".json")) {  // a Hugging Face config.json
    Config c = io::config_from_hf_file(path);
    for (const auto& o : a.overrides) io::apply_override(c, o);
    c.derive();
    c.validate();
    return c;
  }
  return io::load_config(path, a.overrides);
}

/// The model the config describes (any registered block; --weight-type, --threads, --int8-activations), with the
/// weights of --weights or initialised from --seed.
std::unique_ptr<models::AnyModel> open_model(const Config& cfg, const Args& a, bool load = true) {
  const std::string i8 = a.get("int8-activations", "off");
  MAXTEXT_CHECK(i8 == "on" || i8 == "off", ArgumentError, "--int8-activations: expected on or off, found '", i8, "'");
  MAXTEXT_CHECK(i8 == "off" || a.get("weight-type") == "q8_0", ArgumentError,
                "--int8-activations on applies to Q8_0 weights: add --weight-type q8_0");
  models::AnyModelOptions o;
  o.weight_type = a.get("weight-type");
  o.threads = static_cast<int>(a.integer("threads", 0));
  o.int8_activations = i8 == "on";
  auto model = models::make_built_any_model(cfg, o, MAXTEXT_BLOCKS_BUILT);
  if (!load) return model;
  if (a.has("weights")) {
    const auto w = io::load_weights(a.get("weights"), cfg);
    if (w.naming == io::WeightNaming::hf) model->set_name_scheme(models::NameScheme::hf);
    model->load(w.tensors);
  } else {
    model->init(static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed)));
  }
  return model;
}

int cmd_logits(const Args& a) {
  MAXTEXT_CHECK(a.has("tokens"), ArgumentError, "logits needs --tokens");
  MAXTEXT_CHECK(a.has("out"), ArgumentError, "logits needs --out FILE.npy");
  const Config cfg = make_config(a);
  const auto rows = cli::parse_token_rows(a.get("tokens"));
  const auto T = static_cast<std::int64_t>(rows[0].size()), Bn = static_cast<std::int64_t>(rows.size());
  for (const auto& r : rows) {
    MAXTEXT_CHECK(static_cast<std::int64_t>(r.size()) == T, ArgumentError, "--tokens: every row must have the same length");
  }
  const std::int64_t inc = a.integer("incremental", 0);
  MAXTEXT_CHECK(inc >= 0 && inc < T, ArgumentError, "--incremental must be in [0, ", T, "), found ", inc);
  const auto model = open_model(cfg, a);
  const auto cache = model->new_cache(Bn, T);
  Tensor<float, 3> out({Bn, T, cfg.vocab_size});
  auto run = [&](std::int64_t t0, std::int64_t len) {
    Tensor<std::int32_t, 2> tok({Bn, len});
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t = 0; t < len; ++t) tok(b, t) = rows[static_cast<std::size_t>(b)][static_cast<std::size_t>(t0 + t)];
    }
    models::ForwardRequest r;
    r.tokens = &tok;
    r.cache = cache.get();
    const Tensor<float, 3> l = model->forward(r);
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t = 0; t < len; ++t) {
        std::copy(&l(b, t, 0), &l(b, t, 0) + cfg.vocab_size, &out(b, t0 + t, 0));
      }
    }
  };
  run(0, T - inc);
  for (std::int64_t t = T - inc; t < T; ++t) run(t, 1);
  io::write_npy(a.get("out"), out);
  std::cout << "wrote " << a.get("out") << " [" << Bn << ", " << T << ", " << cfg.vocab_size << "] f32\n";
  return 0;
}

/// C escapes \n, \t, \r, \\ in a --stop value.
std::string unescape(const std::string& s) {
  std::string o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      o += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
    } else {
      o += s[i];
    }
  }
  return o;
}

/// The sampling and stop options shared by generate and chat.
models::GenerateOptions generate_options(const Args& a, const Config& cfg, std::int64_t default_max_new) {
  models::GenerateOptions go;
  go.max_new_tokens = a.integer("max-new-tokens", default_max_new);
  auto& sp = go.sampling;
  sp.temperature = static_cast<float>(a.number("temperature", 0.0));
  sp.top_k = a.integer("top-k", 0);
  sp.top_p = static_cast<float>(a.number("top-p", 1.0));
  sp.min_p = static_cast<float>(a.number("min-p", 0.0));
  sp.repetition_penalty = static_cast<float>(a.number("repeat-penalty", 1.0));
  sp.frequency_penalty = static_cast<float>(a.number("frequency-penalty", 0.0));
  sp.presence_penalty = static_cast<float>(a.number("presence-penalty", 0.0));
  sp.seed = static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed));
  if (a.has("logit-bias")) {
    std::stringstream ss(a.get("logit-bias"));
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto eq = item.find('=');
      std::size_t p1 = 0, p2 = 0;
      long long id = -1;
      double b = 0;
      try {
        id = std::stoll(item.substr(0, eq), &p1);
        b = std::stod(item.substr(eq + 1), &p2);
      } catch (const std::exception&) {
        p1 = 0;
      }
      MAXTEXT_CHECK(eq != std::string::npos && p1 == eq && p2 == item.size() - eq - 1 && id >= 0 && id < cfg.vocab_size,
                    ArgumentError, "--logit-bias: expected ID=BIAS with ID in [0, ", cfg.vocab_size, "), found '", item,
                    "'");
      sp.logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(b));
    }
  }
  sp.validate();
  if (a.all.count("stop")) {
    for (const auto& s : a.all.at("stop")) {
      MAXTEXT_CHECK(!s.empty(), ArgumentError, "--stop: empty string");
      go.stop_strings.push_back(unescape(s));
    }
  }
  return go;
}

/// Stop token set for text generation: the tokenizer's EOS and the ids the weights' files declare.
void add_eos_stops(models::GenerateOptions& go, const Args& a, const tokenizer::Tokenizer& tk, const Config& cfg) {
  std::vector<std::int32_t> ids = io::read_eos_token_ids(a.get("weights"));
  for (auto id : tk.eos_ids()) ids.push_back(id);
  for (auto id : ids) {
    if (id < cfg.vocab_size && std::find(go.stop_tokens.begin(), go.stop_tokens.end(), id) == go.stop_tokens.end()) {
      go.stop_tokens.push_back(id);
    }
  }
}

int cmd_generate(const Args& a) {
  MAXTEXT_CHECK(a.has("tokens") || a.has("prompt"), ArgumentError, "generate needs --tokens or --prompt");
  const Config cfg = make_config(a);
  std::unique_ptr<tokenizer::Tokenizer> tk;
  std::vector<std::vector<std::int32_t>> prompts;
  models::GenerateOptions go = generate_options(a, cfg, 32);
  if (a.has("prompt")) {
    MAXTEXT_CHECK(!a.has("tokens"), ArgumentError, "give --tokens or --prompt, not both");
    tk = cli::open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
    prompts.push_back(tk->encode(a.get("prompt")));
    add_eos_stops(go, a, *tk, cfg);  // text generation ends at an end-of-sequence token
  } else {
    MAXTEXT_CHECK(go.stop_strings.empty(), ArgumentError, "--stop needs --prompt (text, through a tokenizer)");
    prompts = cli::parse_token_rows(a.get("tokens"));
  }
  const auto model = open_model(cfg, a);
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
  return 0;
}

int cmd_chat(const Args& a) {
  MAXTEXT_CHECK(a.has("weights") || a.has("tokenizer"), ArgumentError, "chat needs --weights (and a tokenizer)");
  const Config cfg = make_config(a);
  const auto tk = cli::open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
  cli::ChatOptions co;
  co.gen = generate_options(a, cfg, 256);
  add_eos_stops(co.gen, a, *tk, cfg);
  co.system = a.get("system");
  co.render = cli::find_chat_renderer(a.get("weights"), a.get("tokenizer"));
  if (co.render) co.encode = [&tk](const std::string& text) { return tk->encode(text, false); };
  co.capacity = a.integer("ctx-size", std::min<std::int64_t>(cfg.max_target_length, 4096));
  co.interactive = ::isatty(STDIN_FILENO) != 0;
  MAXTEXT_CHECK(co.capacity > 0, ArgumentError, "--ctx-size must be > 0");
  const auto model = open_model(cfg, a);
  return cli::run_chat(*model, *tk, co, std::cin, std::cout, std::cerr);
}

int cmd_info(const Args& a) {
  const Config cfg = make_config(a);
  const auto model = open_model(cfg, a, false);
  std::cout << "decoder_block " << cfg.decoder_block << ", dtype " << cfg.dtype_canonical() << "\n"
            << "emb_dim " << cfg.emb_dim << ", heads " << cfg.num_query_heads << "/" << cfg.num_kv_heads
            << ", head_dim " << cfg.head_dim << ", mlp_dim " << cfg.mlp_dim << ", layers " << cfg.num_decoder_layers
            << ", vocab " << cfg.vocab_size << "\n"
            << "parameters " << model->num_params() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::cout << kUsage;
      return argc < 2 ? 2 : 0;
    }
    const Args a = parse_args(argc, argv);
    if (a.command == "logits") return cmd_logits(a);
    if (a.command == "generate") return cmd_generate(a);
    if (a.command == "chat") return cmd_chat(a);
    if (a.command == "info") return cmd_info(a);
    if (a.command == "tokenize" || a.command == "detokenize") {
      MAXTEXT_CHECK(a.has("weights") || a.has("tokenizer"), ArgumentError, a.command, " needs --weights or --tokenizer");
      std::int64_t vocab = 0;
      if (a.has("weights")) {
        const auto c = io::read_weights_config(a.get("weights"));
        if (c) vocab = c->vocab_size;
      }
      if (a.command == "detokenize") {
        MAXTEXT_CHECK(a.has("ids"), ArgumentError, "detokenize needs --ids");
        return cli::run_detokenize(a.get("weights"), a.get("tokenizer"), a.get("ids"), vocab,
                                   cli::on_off(a.get("skip-special", "on"), "skip-special"));
      }
      MAXTEXT_CHECK(a.has("text") != a.has("text-file"), ArgumentError, "tokenize needs one of --text and --text-file");
      const std::string text = a.has("text") ? a.get("text") : cli::read_text_file(a.get("text-file"));
      return cli::run_tokenize(a.get("weights"), a.get("tokenizer"), text, vocab,
                               cli::on_off(a.get("add-special", "on"), "add-special"));
    }
    if (a.command == "template") {
      MAXTEXT_CHECK(a.has("tokenizer") && a.has("messages"), ArgumentError, "template needs --tokenizer PATH and --messages FILE.json");
      return cli::run_template(a.get("tokenizer"), a.get("messages"), a.get("add-generation-prompt", "on"), a.get("tools"));
    }
    if (a.command == "compare") return maxtext_cli::cmd_compare(a, make_config);
    std::cerr << "maxtext: unknown command '" << a.command << "'\n" << kUsage;
    return 2;
  } catch (const maxtext::Error& e) {
    std::cerr << "maxtext: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "maxtext: error: " << e.what() << "\n";
    return 1;
  }
}
