// tools/maxtext.cpp: the `maxtext` command-line program: logits and generate on any model the registry knows.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/registry.hpp"
#include "cli_common.hpp"
#include "cmd_tokenize.hpp"
#include "cmd_template.hpp"

#include "cmd_compare.hpp"

namespace {

using namespace maxtext;

const char* kUsage = R"(usage: maxtext <command> [options] [key=value ...]

commands:
  logits    --config CFG [--weights FILE] --tokens 1,2,3[/4,5,6] [--incremental N] --out logits.npy
  generate  --config CFG [--weights FILE] --tokens 1,2,3[/...] --max-new-tokens N
            [--temperature T] [--top-k K] [--top-p P] [--seed S]
  generate  --weights FILE [--tokenizer FILE] --prompt "text" [--max-new-tokens N] [...]: prints the text
  tokenize  --weights FILE [--tokenizer FILE] --text "text": prints the ids (BOS first), comma-separated
  info      --config CFG [--weights FILE]
)" MAXTEXT_TEMPLATE_USAGE MAXTEXT_COMPARE_USAGE R"(
common options:
  --config FILE      MaxText YAML (a model file such as configs/models/gpt3-52k.yml) or a Hugging Face config.json;
                     key=value overrides follow
  --weights FILE     MaxText safetensors, Hugging Face safetensors (file, index or directory, config.json beside),
                     GGUF (.gguf) or a llama2.c checkpoint (.bin); without it the model is initialised from --seed.
                     GGUF, llama2.c and Hugging Face weights carry their config: --config is then optional
  --tokenizer FILE   tokenizer for --prompt / tokenize: .gguf, llama2.c tokenizer.bin, SentencePiece .model
                     (default: the GGUF's own, or tokenizer.model / tokenizer.bin / tok<vocab>.bin beside the weights)
  --weight-type T    store weights as float32 (default: dtype), bfloat16, float16 or q8_0 (float32 activations)
  --threads N        CPU threads (default: all cores)
  --int8-activations on|off
                     with --weight-type q8_0: quantise activations to 8 bits per 32-block and use integer dot
                     products (llama.cpp's Q8_0 arithmetic; faster, ~1% rms logit error). Default off: exact
  --seed S           seed for initialisation and sampling (default: init_weights_seed)
)";

struct Args {
  std::string command;
  std::map<std::string, std::string> opt;
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

template <class Model>
void load_or_init(Model& model, const Args& a) {
  if (a.has("weights")) {
    const auto w = io::load_weights(a.get("weights"), model.config());
    if (w.naming == io::WeightNaming::hf) model.set_name_scheme(models::NameScheme::hf);
    model.load(w.tensors);
  } else {
    model.init(static_cast<std::uint64_t>(a.integer("seed", model.config().init_weights_seed)));
  }
}

cpu::Backend make_backend(const Args& a) {
  const std::string i8 = a.get("int8-activations", "off");
  MAXTEXT_CHECK(i8 == "on" || i8 == "off", ArgumentError, "--int8-activations: expected on or off, found '", i8, "'");
  MAXTEXT_CHECK(i8 == "off" || a.get("weight-type") == "q8_0", ArgumentError,
                "--int8-activations on applies to Q8_0 weights: add --weight-type q8_0");
  return cpu::Backend(cpu::Options{static_cast<int>(a.integer("threads", 0)), i8 == "on"});
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
  return models::with_model_type<cpu::Backend>(cfg, [&]<class Model>() {
    Model model(cfg, make_backend(a));
    load_or_init(model, a);
    auto cache = model.make_cache(Bn, T);
    Tensor<float, 3> out({Bn, T, cfg.vocab_size});
    auto run = [&](std::int64_t t0, std::int64_t len) {
      Tensor<std::int32_t, 2> tok({Bn, len});
      for (std::int64_t b = 0; b < Bn; ++b) {
        for (std::int64_t t = 0; t < len; ++t) tok(b, t) = rows[static_cast<std::size_t>(b)][static_cast<std::size_t>(t0 + t)];
      }
      Tensor<float, 3> l = model.forward(tok, cache);
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
  }, a.get("weight-type"));
}

int cmd_generate(const Args& a) {
  MAXTEXT_CHECK(a.has("tokens") || a.has("prompt"), ArgumentError, "generate needs --tokens or --prompt");
  const Config cfg = make_config(a);
  std::unique_ptr<tokenizer::Tokenizer> tk;
  std::vector<std::vector<std::int32_t>> prompts;
  std::int32_t go_stop_eos = -1;
  if (a.has("prompt")) {
    MAXTEXT_CHECK(!a.has("tokens"), ArgumentError, "give --tokens or --prompt, not both");
    tk = cli::open_cli_tokenizer(a.get("weights"), a.get("tokenizer"), cfg.vocab_size);
    prompts.push_back(tk->encode(a.get("prompt")));
    if (tk->eos() >= 0) go_stop_eos = tk->eos();
  } else {
    prompts = cli::parse_token_rows(a.get("tokens"));
  }
  models::GenerateOptions go;
  go.max_new_tokens = a.integer("max-new-tokens", 32);
  go.sampling.temperature = static_cast<float>(a.number("temperature", 0.0));
  go.sampling.top_k = a.integer("top-k", 0);
  go.sampling.top_p = static_cast<float>(a.number("top-p", 1.0));
  go.sampling.seed = static_cast<std::uint64_t>(a.integer("seed", cfg.init_weights_seed));
  if (go_stop_eos >= 0) go.stop_tokens.push_back(go_stop_eos);  // text generation ends at the end-of-sequence token
  return models::with_model_type<cpu::Backend>(cfg, [&]<class Model>() {
    Model model(cfg, make_backend(a));
    load_or_init(model, a);
    std::optional<cli::TextStream> stream;
    if (tk) {
      // Text: the prompt as given, then each generated piece as it comes.
      stream.emplace(*tk, prompts[0].back());
      std::cout << a.get("prompt") << std::flush;
      go.on_token = [&](std::int64_t, std::int32_t t) { (*stream)(t); };
    }
    const auto res = models::generate(model, prompts, go);
    if (tk) std::cout << "\n";
    for (std::size_t b = 0; b < res.tokens.size(); ++b) {
      std::cout << "tokens[" << b << "]: ";
      for (std::size_t i = 0; i < res.tokens[b].size(); ++i) std::cout << (i ? "," : "") << res.tokens[b][i];
      std::cout << "\n";
    }
    std::printf("prefill: %lld tokens in %.3f ms (%.1f tokens/s)\n", static_cast<long long>(res.prompt_tokens),
                res.prefill_seconds * 1e3, res.prefill_tokens_per_second());
    std::printf("decode: %lld steps in %.3f ms (%.1f tokens/s)\n", static_cast<long long>(res.decode_steps),
                res.decode_seconds * 1e3, res.decode_tokens_per_second());
    return 0;
  }, a.get("weight-type"));
}

int cmd_info(const Args& a) {
  const Config cfg = make_config(a);
  return models::with_model_type<cpu::Backend>(cfg, [&]<class Model>() {
    Model model(cfg, make_backend(a));
    std::cout << "decoder_block " << cfg.decoder_block << ", dtype " << cfg.dtype_canonical() << "\n"
              << "emb_dim " << cfg.emb_dim << ", heads " << cfg.num_query_heads << "/" << cfg.num_kv_heads
              << ", head_dim " << cfg.head_dim << ", mlp_dim " << cfg.mlp_dim << ", layers " << cfg.num_decoder_layers
              << ", vocab " << cfg.vocab_size << "\n"
              << "parameters " << model.num_params() << "\n";
    return 0;
  }, a.get("weight-type"));
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
    if (a.command == "info") return cmd_info(a);
    if (a.command == "tokenize") {
      MAXTEXT_CHECK(a.has("text"), ArgumentError, "tokenize needs --text");
      MAXTEXT_CHECK(a.has("weights") || a.has("tokenizer"), ArgumentError, "tokenize needs --weights or --tokenizer");
      std::int64_t vocab = 0;
      if (a.has("weights")) {
        const auto c = io::read_weights_config(a.get("weights"));
        if (c) vocab = c->vocab_size;
      }
      return cli::run_tokenize(a.get("weights"), a.get("tokenizer"), a.get("text"), vocab);
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
