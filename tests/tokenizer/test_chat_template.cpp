// tests/tokenizer/test_chat_template.cpp: jinja.hpp and chat_template.hpp against npm @huggingface/jinja 0.5.11.
// Fixtures (tests/fixtures/chat_templates/*.json) come from tests/reference/chat_template_fixtures.mjs: synthetic
// templates (one per construct, committed with the oracle's output or error) always run; the real Llama 3, Qwen3,
// DeepSeek-V3 and Gemma 3 templates are read from ../shared/models/tokenizers (skipped when absent).
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <catch2/catch.hpp>

#include "maxtext/io/gguf.hpp"
#include "maxtext/tokenizer/chat_template.hpp"
#include "support/command.hpp"
#include "support/test_support.hpp"

using namespace maxtext;
using maxtext::tokenizer::Json;
namespace jinja = maxtext::tokenizer::jinja;

namespace {

Json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return Json::parse(f);
}

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/chat_templates/" + name; }

std::string tokenizers_dir() { return test::models_dir() + "/tokenizers"; }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

using ::maxtext::test::command_output;

// Renders `source` with `context`; "ERROR: <message>" when the engine throws a maxtext::Error.
std::string render_or_error(const std::string& source, const Json& context, const std::string& name) {
  try {
    return jinja::Template(source, name).render(context);
  } catch (const Error& e) {
    return std::string("ERROR: ") + e.what();
  }
}

// Every case of one real model's fixture file: the template from ../shared, the oracle's output.
void check_model(const std::string& model) {
  const std::string cfg = tokenizers_dir() + "/" + model + "/tokenizer_config.json";
  test::require(cfg, "the " + model + " tokenizer_config.json (MAXTEXT_MODELS_DIR)");
  const tokenizer::ChatTemplate tmpl = tokenizer::load_chat_template(cfg);
  const Json fx = read_json(fixture(model + ".json"));
  REQUIRE(fx["cases"].size() >= 10);
  for (const auto& c : fx["cases"]) {
    INFO(model << ": " << c["name"].get<std::string>());
    tokenizer::ChatOptions o;
    o.add_generation_prompt = c["options"].value("add_generation_prompt", false);
    if (c["options"].contains("tools")) o.tools = c["options"]["tools"];
    if (c["options"].contains("extra")) o.extra = c["options"]["extra"];
    if (c.contains("error")) {
      INFO("oracle error: " << c["error"].get<std::string>());
      CHECK_THROWS_AS(tmpl.render(c["messages"], o), ArgumentError);
    } else {
      CHECK(tmpl.render(c["messages"], o) == c["expected"].get<std::string>());
    }
  }
}

}  // namespace

TEST_CASE("jinja: synthetic templates render as @huggingface/jinja renders them", "[jinja]") {
  const Json fx = read_json(fixture("synthetic.json"));
  REQUIRE(fx["cases"].size() >= 80);
  int errors = 0;
  for (const auto& c : fx["cases"]) {
    const std::string name = c["name"].get<std::string>();
    INFO(name << "\ntemplate: " << c["template"].get<std::string>());
    const std::string got = render_or_error(c["template"].get<std::string>(), c["context"], name);
    if (c.contains("error")) {
      INFO("oracle error: " << c["error"].get<std::string>());
      CHECK(got.rfind("ERROR: ", 0) == 0);
      ++errors;
    } else {
      CHECK(got == c["expected"].get<std::string>());
    }
  }
  CHECK(errors >= 15);
}

TEST_CASE("jinja: error messages name the construct and its line:column", "[jinja]") {
  auto message = [](const std::string& src, const Json& ctx = Json::object()) {
    try {
      (void)jinja::Template(src, "t").render(ctx);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Syntax errors: ConfigError at the offending token.
  CHECK_THROWS_AS(jinja::Template("a\n{{ x $ }}", "t"), ConfigError);
  CHECK(message("a\n{{ x $ }}") == "[jinja] t:2:6: unexpected character '$'");
  CHECK(message("line1\n  {% if x %}\nbody").find("t:2:3: {% if %} is not closed") != std::string::npos);
  CHECK(message("{{ 'abc }}").find("t:1:4: unterminated string literal") != std::string::npos);
  CHECK(message("{% for x in %}{% endfor %}").find("t:1:13:") != std::string::npos);
  CHECK(message("{{ f(a=1, 2) }}").find("positional argument follows keyword argument") != std::string::npos);
  // Constructs neither engine supports: UnsupportedError naming them.
  CHECK_THROWS_AS(jinja::Template("ok\n{% include 'x' %}", "t"), UnsupportedError);
  CHECK(message("ok\n{% include 'x' %}").find("t:2:1: unsupported statement {% include %}") != std::string::npos);
  CHECK(message("{% endfor %}").find("unknown statement {% endfor %}") != std::string::npos);
  // Runtime errors: ArgumentError at the expression.
  CHECK_THROWS_AS(jinja::Template("{{ raise_exception('boom') }}").render(Json::object()), ArgumentError);
  CHECK(message("\n  {{ raise_exception('Roles must alternate') }}") == "[jinja] t:2:6: raise_exception: Roles must alternate");
  CHECK(message("{{ 1 + none }}").find("t:1:6: cannot perform operation + on null values") != std::string::npos);
  CHECK(message("{{ 'x' | frobnicate }}").find("t:1:10: unknown StringValue filter: frobnicate") != std::string::npos);
  CHECK(message("{{ x is frobnicated }}").find("unsupported: test 'frobnicated'") != std::string::npos);
  CHECK(message("{{ s.format(1) }}", Json{{"s", "a"}}).find("cannot call something that is not a function: 's.format'") !=
        std::string::npos);
  // The render context cannot replace the built-in globals.
  CHECK(message("{{ true }}", Json{{"true", 0}}).find("context variable 'true' is already declared") != std::string::npos);
}

TEST_CASE("jinja: runaway templates stop with an error", "[jinja]") {
  jinja::Limits small;
  small.max_iterations = 1000;
  small.max_output = 1000;
  small.max_range = 100;
  CHECK_THROWS_AS(jinja::Template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(Json::object()),
                  ArgumentError);
  CHECK_THROWS_WITH(jinja::Template("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}", "t", small)
                        .render(Json::object()),
                    Catch::Contains("loop iterations"));
  CHECK_THROWS_WITH(jinja::Template("{% for i in range(99) %}0123456789abcdef{% endfor %}", "t", small).render(Json::object()),
                    Catch::Contains("rendered output exceeds 1000 bytes"));
  CHECK_THROWS_WITH(jinja::Template("{{ range(1000) | length }}", "t", small).render(Json::object()),
                    Catch::Contains("range() longer than 100"));
  CHECK_THROWS_WITH(jinja::Template("{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}"
                                    "{% endfor %}", "t", small).render(Json::object()),
                    Catch::Contains("'~' result larger than 1000 bytes"));
  CHECK_THROWS_WITH(jinja::Template("{% set ns = namespace(l=[1]) %}{% for i in range(20) %}{% set ns.l = ns.l + ns.l %}"
                                    "{% endfor %}", "t", small).render(Json::object()),
                    Catch::Contains("'+' result larger than 1000 elements"));
  // A copy renders as the original does (they share the parsed template).
  const jinja::Template a("{{ x ~ 1 }}");
  const jinja::Template b = a;
  CHECK(b.render(Json{{"x", "v"}}) == a.render(Json{{"x", "v"}}));
  CHECK_THROWS_WITH(jinja::Template("{{ [1, 2][::0] }}").render(Json::object()), Catch::Contains("slice step cannot be zero"));
  std::string deep(2000, '(');
  CHECK_THROWS_WITH(jinja::Template("{{ " + deep + "1" + std::string(2000, ')') + " }}"), Catch::Contains("nested too deeply"));
}

TEST_CASE("jinja: a namespace cannot contain itself or nest past max_depth (fuzz finding)", "[jinja]") {
  // The CI fuzz run of 2026-11-27 found `{% set ns.a = ns %}{{ ns | tojson }}` overflowing the stack (and the cycle
  // leaking). Namespaces are the only mutable value, so their assignment is where cycles and deep chains are refused.
  jinja::Limits small;
  small.max_depth = 50;
  const auto render = [&](const std::string& src) { return jinja::Template(src, "t", small).render(Json::object()); };
  CHECK_THROWS_WITH(render("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns | tojson }}"),
                    Catch::Contains("t:1:39: assigning 'a' would make the namespace contain itself"));
  CHECK_THROWS_WITH(render("{% set ns = namespace(a=1) %}{% set ns.a = [1, {'k': [ns]}] %}"),
                    Catch::Contains("would make the namespace contain itself"));
  // Two namespaces holding each other: the second assignment closes the cycle.
  CHECK_THROWS_WITH(render("{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = b %}"),
                    Catch::Contains("assigning 'y' would make the namespace contain itself"));
  // A chain grown one level per iteration stops at the limit, naming it.
  const std::string chain = "{% set ns = namespace(a=1) %}{% for i in range(N) %}{% set ns.a = namespace(a=ns.a) %}"
                            "{% endfor %}{{ ns | tojson | length }}";
  const auto with_n = [&](int n) { return std::regex_replace(chain, std::regex("N"), std::to_string(n)); };
  CHECK(render(with_n(49)) == jinja::Template(with_n(49)).render(Json::object()));  // 50 levels: allowed
  CHECK_THROWS_WITH(render(with_n(50)), Catch::Contains("deeper than 50 levels (Limits::max_depth)"));
  // Nesting through arrays counts too, and a value shared many times is walked once (this DAG has 2^40 paths).
  CHECK_THROWS_WITH(render("{% set ns = namespace(a=1) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}"),
                    Catch::Contains("deeper than 50 levels"));
  CHECK(render("{% set ns = namespace(a=1) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}"
               "{{ ns.a[0][1][0][0] | length }}") == "2");
  // Reassigning a key to a value built from its old value is no cycle.
  CHECK(render("{% set ns = namespace(a=[1]) %}{% set ns.a = ns.a + [2] %}{{ ns.a }}") == "[1, 2]");
  // The render context is bounded the same way.
  Json j = 1;
  for (int i = 0; i < 60; ++i) j = Json::array({j});
  CHECK_THROWS_WITH(jinja::Template("{{ x }}", "t", small).render(Json{{"x", j}}),
                    Catch::Contains("deeper than 50 levels"));
  // A cycle through a caller's captured scope is not refused, but freed when the render ends (LeakSanitizer checks).
  CHECK(render("{% set ns = namespace() %}{% macro m() %}{% set ns.c = caller %}{{ caller() }}{% endmacro %}"
               "{% call m() %}x{% endcall %}") == "x");
}

TEST_CASE("jinja: numbers print as JavaScript prints them", "[jinja]") {
  using detail_num = std::pair<double, const char*>;
  for (const auto& [v, s] : {detail_num{1, "1"}, {-2, "-2"}, {0.1 + 0.2, "0.30000000000000004"}, {1e21, "1e+21"},
                             {1.5e-7, "1.5e-7"}, {123456789012345680000.0, "123456789012345680000"}, {1e-6, "0.000001"},
                             {2.5, "2.5"}, {-0.0, "0"}}) {
    CHECK(jinja::detail::js_number(v) == s);
  }
}

TEST_CASE("chat template: Llama 3 matches the oracle", "[chat_template][shared]") { check_model("llama3"); }
TEST_CASE("chat template: Qwen3 (tools, tool calls, thinking) matches the oracle", "[chat_template][shared]") {
  check_model("qwen3");
}
TEST_CASE("chat template: DeepSeek-V3 (tool calls, tool outputs) matches the oracle", "[chat_template][shared]") {
  check_model("deepseek_v3");
}
TEST_CASE("chat template: Gemma 3 (content parts, raise_exception) matches the oracle", "[chat_template][shared]") {
  check_model("gemma3");
}

TEST_CASE("chat template: loaders read config files, directories and GGUF metadata", "[chat_template]") {
  namespace fs = std::filesystem;
  // A config with the list form of chat_template and {"content": ...} tokens.
  fs::create_directories("tk");
  write_file("tk/tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"},
    {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}],
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null})");
  write_file("tk/tokenizer.json", "{}");
  const Json msgs = Json::parse(R"([{"role": "user", "content": "hi"}])");
  for (const std::string p : {"tk", "tk/tokenizer_config.json", "tk/tokenizer.json"}) {
    INFO(p);
    const auto t = tokenizer::load_chat_template(p);
    CHECK(t.bos_token() == "<s>");
    CHECK(t.eos_token() == "</s>");
    CHECK(t.render(msgs, true) == "<s>[user]hi[assistant]");
    CHECK(t.render(msgs, false) == "<s>[user]hi");
  }
  write_file("none.json", R"({"bos_token": "x"})");
  CHECK_THROWS_AS(tokenizer::load_chat_template("none.json"), IoError);
  CHECK_THROWS_AS(tokenizer::load_chat_template("missing-dir"), IoError);
  fs::create_directories("nodefault");
  write_file("nodefault/tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  CHECK_THROWS_WITH(tokenizer::load_chat_template("nodefault"), Catch::Contains("no \"default\" entry (has: rag)"));
  const auto t = tokenizer::load_chat_template("tk");
  CHECK_THROWS_AS(t.render(Json::object(), true), ArgumentError);  // messages must be a list
  CHECK_THROWS_AS(t.render(Json::parse("[1]"), true), ArgumentError);

  // GGUF: the template from metadata, bos/eos text from the vocabulary.
  io::GgufWriter w;
  w.set("general.architecture", io::GgufValue::of_string("llama"));
  w.set("tokenizer.ggml.tokens", io::GgufValue::of_strings({"<unk>", "<|bos|>", "<|eos|>", "a"}));
  w.set("tokenizer.ggml.bos_token_id", io::GgufValue::of_u32(1));
  w.set("tokenizer.ggml.eos_token_id", io::GgufValue::of_u32(2));
  w.set("tokenizer.chat_template", io::GgufValue::of_string("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"));
  w.write("m.gguf");
  const auto g = tokenizer::load_chat_template("m.gguf");
  CHECK(g.bos_token() == "<|bos|>");
  CHECK(g.render(msgs, false) == "<|bos|>hi<|eos|>");
  io::GgufWriter w2;
  w2.set("general.architecture", io::GgufValue::of_string("llama"));
  w2.write("none.gguf");
  CHECK_THROWS_WITH(tokenizer::load_chat_template("none.gguf"), Catch::Contains("no tokenizer.chat_template"));
}

TEST_CASE("maxtext template: the CLI prints the rendered prompt", "[chat_template][cli]") {
  // A synthetic oracle case whose context is only `messages`: as a tokenizer_config.json, through the CLI.
  const Json fx = read_json(fixture("synthetic.json"));
  const Json* gen = nullptr;
  for (const auto& c : fx["cases"]) {
    if (c["name"] == "generation_tag") gen = &c;
  }
  REQUIRE(gen != nullptr);
  std::filesystem::create_directories("cli");
  Json cfg = Json::object();
  cfg["chat_template"] = (*gen)["template"];
  write_file("cli/tokenizer_config.json", cfg.dump());
  write_file("cli/messages.json", (*gen)["context"]["messages"].dump());
  int rc = 0;
  const std::string out =
      command_output(::maxtext::test::cli_path() + " template --tokenizer cli/tokenizer_config.json --messages cli/messages.json", rc);
  CHECK(rc == 0);
  CHECK(out == (*gen)["expected"].get<std::string>());
  const std::string bad = command_output(::maxtext::test::cli_path() + " template --tokenizer cli --messages nothere.json 2>&1", rc);
  CHECK(rc != 0);
  CHECK(bad.find("nothere.json") != std::string::npos);

  // The real Llama 3 template with and without the generation prompt, when ../shared is there.
  const std::string llama = tokenizers_dir() + "/llama3";
  if (!std::filesystem::exists(llama + "/tokenizer.json")) return;
  const Json lf = read_json(fixture("llama3.json"));
  for (const auto& c : lf["cases"]) {
    if (c["name"] != "system_user/gen" && c["name"] != "system_user/nogen") continue;
    write_file("cli/llama.json", c["messages"].dump());
    const bool gen_prompt = c["options"]["add_generation_prompt"].get<bool>();
    const std::string o = command_output(::maxtext::test::cli_path() + " template --tokenizer " + llama +
                                          "/tokenizer.json --messages cli/llama.json --add-generation-prompt " +
                                          (gen_prompt ? "on" : "off"),
                                      rc);
    CHECK(rc == 0);
    CHECK(o == c["expected"].get<std::string>());
  }
}
