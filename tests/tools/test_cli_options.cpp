// tools/cli_options.hpp: the `maxtext` program refuses an option it does not know (with the nearest valid name), an
// option its command does not read, a repeated option and overrides for commands that build no config, before it
// runs anything; the refusals are checked on the table and, end to end, on the program (exit status and message).
// The grammar options of generate (--grammar, --json-schema, ...) are run end to end on stories260K.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli_options.hpp"
#include "support/cli.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

cli::Args args(std::vector<std::string> words) {
  std::vector<char*> argv;
  static std::string prog = "maxtext";
  argv.push_back(prog.data());
  for (auto& w : words) argv.push_back(w.data());
  return cli::parse_args(static_cast<int>(argv.size()), argv.data());
}

void refused(std::vector<std::string> words, const std::string& what) {
  INFO("maxtext " << words.front() << " ... should be refused with: " << what);
  REQUIRE_THROWS_AS(cli::check_options(args(words)), ArgumentError);
  REQUIRE_THROWS_WITH(cli::check_options(args(std::move(words))), Catch::Contains(what));
}

}  // namespace

TEST_CASE("edit distance and the nearest name", "[cli]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("temprature", "temperature") == 1);
  CHECK(edit_distance("top-p", "top-k") == 1);
  CHECK(edit_distance("tpo-k", "top-k") == 1);  // a transposition is one edit
  const std::vector<std::string> names = {"max-new-tokens", "temperature", "top-k", "top-p"};
  CHECK(nearest_name("max-new-token", names) == "max-new-tokens");
  CHECK(nearest_name("temprature", names) == "temperature");
  CHECK(nearest_name("xyz-unrelated-name", names).empty());
}

TEST_CASE("every command's documented options pass the check", "[cli]") {
  CHECK_NOTHROW(cli::check_options(args({"generate", "--config", "c.yml", "--tokens", "1,2", "--max-new-tokens", "4",
                                         "--temperature", "0.5", "--top-k", "3", "--top-p", "0.9", "--min-p", "0.1",
                                         "--seed", "1", "--stop", "a", "--stop", "b", "--logit-bias", "1=2",
                                         "--repeat-penalty", "1.1", "--frequency-penalty", "0.1",
                                         "--presence-penalty", "0.1", "--kv-type", "float16", "dtype=float32"})));
  CHECK_NOTHROW(cli::check_options(args({"generate", "--weights", "w.gguf", "--prompt", "p", "--spec", "draft",
                                         "--draft", "d.gguf", "--draft-max", "3"})));
  CHECK_NOTHROW(cli::check_options(args({"chat", "--weights", "w.gguf", "--spec", "draft", "--draft", "d.gguf",
                                         "--draft-max", "3"})));
  CHECK_NOTHROW(cli::check_options(args({"logits", "--weights", "w", "--tokens", "1,2", "--out", "o.npy", "--mtp", "1",
                                         "--mtp-hidden", "normed"})));
  CHECK_NOTHROW(cli::check_options(args({"generate", "--weights", "w.gguf", "--prompt", "p", "--spec", "mtp",
                                         "--mtp-hidden", "normed"})));
  CHECK_NOTHROW(cli::check_options(args({"chat", "--weights", "w.gguf", "--spec", "mtp", "--mtp-hidden", "normed"})));
  CHECK_NOTHROW(cli::check_options(args({"logits", "--weights", "w.gguf", "--tokens", "1", "--out", "o.npy",
                                         "--incremental", "1", "--threads", "1", "--weight-type", "ggml",
                                         "--int8-activations", "on"})));
  CHECK_NOTHROW(cli::check_options(args({"chat", "--weights", "w", "--tokenizer", "t", "--system", "s",
                                         "--ctx-size", "64", "--max-new-tokens", "8"})));
  CHECK_NOTHROW(cli::check_options(args({"serve", "--weights", "w", "--tokenizer", "t", "--host", "0.0.0.0", "--port",
                                         "0", "--parallel", "4", "--queue", "8", "--ctx-size", "512",
                                         "--max-new-tokens", "64", "--alias", "m", "--api-key", "k",
                                         "--max-body", "65536", "--threads", "2", "--kv-type", "float16"})));
  CHECK_NOTHROW(cli::check_options(args({"serve", "--weights", "w", "--api-key-file", "k"})));
  CHECK_NOTHROW(cli::check_options(args({"vision", "--weights", "w", "--image", "a.png", "--image", "b.jpg",
                                         "--image-preprocess", "hf", "--out", "t.npy", "--threads", "1"})));
  CHECK_NOTHROW(cli::check_options(args({"info", "--config", "c.yml", "num_decoder_layers=2"})));
  CHECK_NOTHROW(cli::check_options(args({"tokenize", "--tokenizer", "t", "--text", "a=b", "--add-special", "off"})));
  CHECK_NOTHROW(cli::check_options(args({"detokenize", "--tokenizer", "t", "--ids", "1,2", "--skip-special", "on"})));
  CHECK_NOTHROW(cli::check_options(args({"template", "--tokenizer", "t", "--messages", "m.json", "--tools", "x.json",
                                         "--add-generation-prompt", "off"})));
  CHECK_NOTHROW(cli::check_options(args({"compare", "--config", "c", "--reference", "r.npz", "--tokens", "1",
                                         "--map", "m", "--rtol", "1e-3", "--atol", "1e-4", "--max-kl-div", "0.1",
                                         "--top-k", "5", "--names", "hf", "--json", "o.json"})));
  CHECK_NOTHROW(cli::check_options(args({"compare", "--layer", "decoder", "--config", "c", "--weights", "w",
                                         "--input", "x.npy", "--prefix", "p", "--reference", "r", "--layer-index", "0",
                                         "--segment-ids", "s.npy", "--positions", "p.npy", "--scaled-tol", "1e-3"})));
}

TEST_CASE("unknown or unused or repeated options and stray overrides are refused by name", "[cli]") {
  refused({"generate", "--max-new-token", "4"}, "unknown option --max-new-token (did you mean --max-new-tokens?");
  refused({"generate", "--temprature", "0.5"}, "did you mean --temperature?");
  refused({"chat", "--sytem", "x"}, "did you mean --system?");
  refused({"generate", "--frobnicate", "1"}, "unknown option --frobnicate (it reads --config");
  refused({"info", "--seed", "3"}, "info: option --seed is not used by this command");
  refused({"chat", "--mtp", "1"}, "chat: option --mtp is not used by this command");
  refused({"generate", "--mtp", "1"}, "generate: option --mtp is not used by this command");
  refused({"chat", "--grammar", "root ::= \"a\""}, "chat: option --grammar is not used by this command");
  refused({"generate", "--draft-mx", "3"}, "did you mean --draft-max?");
  refused({"tokenize", "--tokenizer", "t", "--text", "a", "--max-new-tokens", "3"},
          "option --max-new-tokens is not used by this command");
  refused({"logits", "--prompt", "hi"}, "logits: option --prompt is not used");
  refused({"generate", "--seed", "1", "--seed", "2"}, "option --seed given 2 times");
  refused({"tokenize", "--tokenizer", "t", "--text", "a", "dtype=float32"},
          "tokenize takes no key=value config overrides (found 'dtype=float32')");
  refused({"generat", "--tokens", "1"}, "unknown command 'generat' (did you mean 'generate'?)");
  // serve: sampling comes with each request, not from the command line.
  refused({"serve", "--weights", "w", "--temperature", "0.5"}, "serve: option --temperature is not used by this command");
  refused({"serve", "--weights", "w", "--api-keyfile", "k"}, "did you mean --api-key-file?");
  refused({"serve", "--weights", "w", "--paralel", "2"}, "did you mean --parallel?");
  refused({"serv", "--weights", "w"}, "unknown command 'serv' (did you mean 'serve'?)");
  // vision: --image repeats; sampling, prompts and config overrides are not its business.
  refused({"vision", "--weights", "w", "--image", "a.png", "--prompt", "p"}, "vision: option --prompt is not used");
  refused({"vision", "--weights", "w", "--images", "a.png"}, "did you mean --image?");
  refused({"vision", "--weights", "w", "--image", "a.png", "--out", "a.npy", "--out", "b.npy"},
          "option --out given 2 times (only --stop, --image and --audio repeat)");
  refused({"vision", "--weights", "w", "--image", "a.png", "dtype=float32"}, "vision takes no key=value config overrides");
}

TEST_CASE("the program refuses a misspelled option before running anything", "[cli]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  const std::string cfg = test::config_dir() + "/models/gpt3-52k.yml";
  // Exit status and output of `maxtext ARGS` (run_cli requires exit 0).
  auto run = [](const std::string& a, int& rc) {
    const std::string out = (std::filesystem::current_path() / "cli_options_out.txt").string();
    rc = std::system((test::cli_path() + " " + a + " > " + out + " 2>&1").c_str());
    std::string text = io::read_text_file(out);
    std::remove(out.c_str());
    return text;
  };
  int rc = 0;
  const std::string out = run("generate --config " + cfg + " --tokens 1,2 --max-new-token 4 dtype=float32", rc);
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("maxtext: error:") &&
                      Catch::Contains("unknown option --max-new-token (did you mean --max-new-tokens?"));
  const std::string unused = run("info --config " + cfg + " --seed 3", rc);
  CHECK(rc != 0);
  CHECK_THAT(unused, Catch::Contains("info: option --seed is not used by this command"));
  // Config keys are checked too (core/config_keys.hpp): an unknown override names the nearest key.
  const std::string key = run("info --config " + cfg + " rope_typ=yarn", rc);
  CHECK(rc != 0);
  CHECK_THAT(key, Catch::Contains("unknown key 'rope_typ' (set in override); did you mean rope_type?"));
  // The same command spelled right runs.
  const std::string ok = test::run_cli("generate --config " + cfg + " --tokens 1,2 --max-new-tokens 2 dtype=float32");
  CHECK_THAT(ok, !Catch::Contains("error"));
}

TEST_CASE("serve refuses its batching options' bad values by name, before it listens", "[cli]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  const std::string model = test::models_dir() + "/stories260K/stories260K.gguf";
  test::require(model, "stories260K");
  CHECK_NOTHROW(cli::check_options(args({"serve", "--weights", "w", "--batch-rows", "32", "--prefill-chunk", "0",
                                         "--prefill-rows", "8"})));
  int rc = 0;
  const std::string probe = test::run_cli("serve --weights " + model + " --port 0 --prefill-rows 0", rc);
  if (probe.find("serve is not compiled") != std::string::npos) test::skip("serve is not compiled into the program");
  const std::pair<const char*, const char*> cases[] = {
      {"--prefill-rows 0", "--prefill-rows must be in [1, 256], found 0"},
      {"--prefill-rows 257", "--prefill-rows must be in [1, 256], found 257"},
      {"--batch-rows 0", "--batch-rows must be in [1, 256], found 0"},
      {"--prefill-chunk -1", "--prefill-chunk must be >= 0"},
  };
  for (const auto& [opt, what] : cases) {
    INFO(opt);
    const std::string out = test::run_cli("serve --weights " + model + " --port 0 " + opt, rc);
    CHECK(rc != 0);
    CHECK_THAT(out, Catch::Contains("maxtext: error:") && Catch::Contains(what));
    CHECK_THAT(out, !Catch::Contains("listening"));
  }
}

TEST_CASE("generate --grammar / --json-schema: the streamed text is a sentence of the grammar, and a bad grammar, "
          "schema or combination is refused with the option that gave it", "[cli][grammar]") {
  if (!std::filesystem::exists(test::cli_path())) test::skip("the maxtext program is not built");
  const std::string model = test::models_dir() + "/stories260K/stories260K.gguf";
  test::require(model, "stories260K");
  const std::string base = "generate --weights " + model + " --prompt x --max-new-tokens 24 ";
  // The line before "tokens[0]:" is the prompt, then the streamed text (a note on stderr, such as the weight type
  // kept, may come first); the text is checked by a regex (and by nlohmann::json for the schema), not by the matcher.
  auto text_of = [](const std::string& out) {
    const std::size_t end = out.find("\ntokens[0]:");
    REQUIRE(end != std::string::npos);
    const std::size_t nl = out.rfind('\n', end - 1);
    const std::size_t start = nl == std::string::npos ? 0 : nl + 1;
    const std::string line = out.substr(start, end - start);
    REQUIRE(line.rfind("x", 0) == 0);
    return line.substr(1);
  };
  {  // greedy, a grammar of two sentences
    const std::string out = test::run_cli(base + "--grammar 'root ::= \" yes\" | \" no\"'");
    const std::string t = text_of(out);
    CHECK((t == " yes" || t == " no"));
    CHECK_THAT(out, Catch::Contains("finish: stop_token"));
  }
  for (int seed = 1; seed <= 6; ++seed) {  // sampled: at most five letters, then a full stop, then nothing may follow
    const std::string out = test::run_cli(base + "--temperature 1.5 --seed " + std::to_string(seed) +
                                          " --grammar 'root ::= [a-c]{1,5} \".\"'");
    const std::string t = text_of(out);
    INFO(t);
    CHECK(std::regex_match(t, std::regex("[a-c]{1,5}\\.")));
    CHECK_THAT(out, Catch::Contains("finish: stop_token"));
  }
  {  // a JSON Schema from a file
    const std::string schema = (std::filesystem::current_path() / "cli_grammar_schema.json").string();
    { std::ofstream(schema) << R"({"enum": ["cat", "dog", "bird"]})"; }
    const std::string out = test::run_cli(base + "--json-schema-file " + schema);
    std::filesystem::remove(schema);
    const nlohmann::json v = nlohmann::json::parse(text_of(out));
    REQUIRE(v.is_string());
    CHECK((v == "cat" || v == "dog" || v == "bird"));
  }
  int rc = 0;
  auto refused_run = [&](const std::string& extra, const std::string& what) {
    const std::string out = test::run_cli(base + extra, rc);
    INFO(extra << "\n" << out);
    CHECK(rc != 0);
    CHECK_THAT(out, Catch::Contains(what));
  };
  refused_run("--grammar 'root ::= \"a\"' --json-schema '{}'",
              "give one of --grammar, --grammar-file, --json-schema and --json-schema-file, found --grammar and "
              "--json-schema");
  refused_run("--grammar 'root ::= (\"a\"'", "--grammar: [grammar] line 1, column");
  refused_run("--grammar 'start ::= \"a\"'", "--grammar: [grammar] no rule named 'root'");
  refused_run("--json-schema '{\"type\": \"strin'", "--json-schema: not valid JSON");
  refused_run("--json-schema '{\"type\": \"integer\", \"multipleOf\": 2}'",
              "--json-schema: [json_schema] #: keyword 'multipleOf' is not supported");
  refused_run("--grammar-file /nonexistent/g.gbnf", "--grammar-file /nonexistent/g.gbnf: cannot read it");
  refused_run("--spec lookup --grammar 'root ::= \"a\"'", "--grammar / --json-schema with --spec");
  const std::string tokens =
      test::run_cli("generate --weights " + model + " --tokens 1,2 --grammar 'root ::= \"a\"'", rc);
  CHECK(rc != 0);
  CHECK_THAT(tokens, Catch::Contains("--grammar / --json-schema need --prompt"));
}
