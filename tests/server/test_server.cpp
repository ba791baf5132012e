// The OpenAI-compatible server's library side: request bodies checked and refused by name (server/openai.hpp), tool
// calls (server/tools.hpp: parsing, the call grammar, Qwen3's template end to end), and
// the engine (server/engine.hpp) on stories260K, a trained model. What the engine produces is compared with
// AnyModel::generate (the plain generation path, one prompt at a time, a fresh cache) and with
// models::generate_constrained for JSON-schema requests: greedy requests must give the same tokens, alone, after
// another request reused a slot's cache, and with eight threads at once on four slots. The HTTP side is tested with
// the official `openai` npm client (tests/server/openai_client.mjs).
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/load.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/constrained.hpp"
#include "maxtext/models/json_schema.hpp"
#include "maxtext/server/engine.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/server/openai.hpp"
#include "maxtext/server/tools.hpp"
#include "maxtext/tokenizer/chat_template.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"
#include "maxtext_blocks_built.hpp"  // the models of maxtext_blocks (tools/blocks/), as the CLI has them
#include "support/test_support.hpp"

using namespace maxtext;
using server::Json;

namespace {

/// The RequestError a body gets: its status, the field it names, and a piece of its message.
void refused(const std::function<void()>& f, int status, const std::string& param, const std::string& what) {
  try {
    f();
    FAIL("accepted; expected a refusal naming '" << param << "'");
  } catch (const server::RequestError& e) {
    INFO(e.what());
    CHECK(e.status() == status);
    CHECK(e.param() == param);
    CHECK_THAT(e.what(), Catch::Contains(what));
    const Json j = e.to_json();
    CHECK(j["error"]["message"] == e.what());
    CHECK(j["error"]["type"].is_string());
  }
}

void chat_refused(const std::string& body, const std::string& param, const std::string& what) {
  INFO(body);
  refused([&] { server::parse_chat_request(Json::parse(body)); }, 400, param, what);
}

void completion_refused(const std::string& body, const std::string& param, const std::string& what) {
  INFO(body);
  refused([&] { server::parse_completion_request(Json::parse(body)); }, 400, param, what);
}

const char* kUser = R"("messages": [{"role": "user", "content": "Hi"}])";

}  // namespace

TEST_CASE("server: chat requests are read field by field", "[server]") {
  const auto r = server::parse_chat_request(Json::parse(R"({
    "model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                               {"role": "user", "content": [{"type": "text", "text": "He"}, {"type": "text", "text": "llo"}]}],
    "temperature": 0, "top_p": 0.5, "max_completion_tokens": 7, "stop": ["\n", "END"], "seed": 42,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "logit_bias": {"3": -100, "5": 2.5},
    "logprobs": true, "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
    "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1, "user": "u1", "n": 1, "tool_choice": null})"));
  CHECK(r.endpoint == server::Endpoint::chat);
  CHECK(r.messages.size() == 2);
  CHECK(r.messages[0]["role"] == "system");  // developer is OpenAI's newer name for it
  CHECK(r.messages[1]["content"] == "Hello");
  CHECK(r.sampling.temperature == 0.0f);
  CHECK(r.sampling.top_p == 0.5f);
  CHECK(r.sampling.top_k == 40);
  CHECK(r.sampling.min_p == 0.05f);
  CHECK(r.sampling.repetition_penalty == 1.1f);
  CHECK(r.sampling.presence_penalty == 0.5f);
  CHECK(r.sampling.frequency_penalty == -0.5f);
  REQUIRE(r.sampling.logit_bias.size() == 2);
  CHECK(r.sampling.logit_bias[0].first == 3);
  CHECK(r.sampling.logit_bias[0].second == -std::numeric_limits<float>::infinity());  // -100 bans the token
  CHECK(r.sampling.logit_bias[1].second == 2.5f);
  CHECK(r.has_seed);
  CHECK(r.sampling.seed == 42u);
  CHECK(r.max_tokens == 7);
  CHECK(r.stop == std::vector<std::string>{"\n", "END"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 3);
  // Defaults as OpenAI's API: temperature 1, no limit but the context, no seed.
  const auto d = server::parse_chat_request(Json::parse(std::string("{") + kUser + "}"));
  CHECK(d.sampling.temperature == 1.0f);
  CHECK_FALSE(d.max_tokens.has_value());
  CHECK_FALSE(d.has_seed);
  CHECK(d.format == server::Format::text);
  const auto j = server::parse_chat_request(Json::parse(std::string("{") + kUser + R"(, "response_format": {"type":
      "json_schema", "json_schema": {"name": "n", "strict": true, "schema": {"type": "object", "properties":
      {"b": {"type": "string"}, "a": {"type": "integer"}}}}}})"));
  CHECK(j.format == server::Format::json_schema);
  CHECK(j.schema["properties"].begin().key() == "b");  // the schema's own order (it decides the grammar's)
}

TEST_CASE("server: base64 is decoded as RFC 4648 writes it, and anything else is refused", "[server][pictures]") {
  // RFC 4648, section 10's test vectors, padded and not.
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""}, {"Zg==", "f"}, {"Zm8=", "fo"}, {"Zm9v", "foo"}, {"Zm9vYg==", "foob"}, {"Zm9vYmE=", "fooba"},
      {"Zm9vYmFy", "foobar"}, {"Zg", "f"}, {"Zm8", "fo"}, {"Zm9vYmE", "fooba"}};
  for (const auto& [in, want] : vectors) {
    INFO(in);
    const auto got = server::detail::base64_decode(in);
    REQUIRE(got.has_value());
    CHECK(*got == want);
  }
  // Every byte value, through both 62 and 63 ('+' and '/'): "+/8=" is 0xFB 0xFF.
  CHECK(server::detail::base64_decode("+/8=") == std::string("\xFB\xFF"));
  CHECK(server::detail::base64_decode("AAECAwQFBgc=") == std::string("\x00\x01\x02\x03\x04\x05\x06\x07", 8));
  for (const char* bad : {"Z", "Zg=", "Zg===", "Z===", "=Zg=", "Zm9v!A==", "Zh==", "Zm9=", "Zm 9v", "Zg==Zg==", "-_8="}) {
    INFO(bad);
    CHECK_FALSE(server::detail::base64_decode(bad).has_value());
  }
}

TEST_CASE("server: pictures in user messages are image_url data URLs, each holding its place in the text",
          "[server][pictures]") {
  const auto r = server::parse_chat_request(Json::parse(R"({"messages": [
      {"role": "system", "content": "Look."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url":
          {"url": "data:image/png;base64,Zm9v"}}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": "ok"},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,YmFy",
          "detail": "high"}}]}]})"));
  REQUIRE(r.pictures.size() == 2);
  CHECK(r.pictures[0].bytes == "foo");
  CHECK(r.pictures[0].field == "messages[1].content[1].image_url");
  CHECK(r.pictures[1].bytes == "bar");
  CHECK(r.pictures[1].field == "messages[3].content[0].image_url");
  CHECK(r.messages[1]["content"] == "a<__media__>b");
  CHECK(r.messages[3]["content"] == "<__media__>");
  CHECK(server::parse_chat_request(Json::parse(std::string("{") + kUser + "}")).pictures.empty());

  const auto part = [](const std::string& image_url, const char* role = "user") {
    return str(R"({"messages": [{"role": ")", role, R"(", "content": [{"type": "image_url", "image_url": )", image_url,
               "}]}]}");
  };
  const std::string f = "messages[0].content[0].image_url";
  chat_refused(part(R"({"url": "https://example.com/cat.png"})"), f + ".url", "not a data URL");
  chat_refused(part(R"({"url": "data:image/gif;base64,Zm9v"})"), f + ".url", "media type 'image/gif'");
  chat_refused(part(R"({"url": "data:image/png,Zm9v"})"), f + ".url", "must be base64");
  chat_refused(part(R"({"url": "data:image/png;base64"})"), f + ".url", "without ','");
  chat_refused(part(R"({"url": "data:image/png;base64,Zm9v!"})"), f + ".url", "not base64");
  chat_refused(part(R"({"url": "data:image/png;base64,"})"), f + ".url", "the picture is empty");
  chat_refused(part(R"({"url": "data:image/png;base64,Zm9v", "detial": "low"})"), f + ".detial",
               "did you mean 'detail'?");
  chat_refused(part(R"({"url": "data:image/png;base64,Zm9v", "detail": "max"})"), f + ".detail",
               "expected auto, low or high");
  chat_refused(part(R"({"detail": "low"})"), f + ".url", "has no 'url'");
  chat_refused(part(R"("data:image/png;base64,Zm9v")"), f, "must be an object");
  chat_refused(part(R"({"url": "data:image/png;base64,Zm9v"})", "system"), "messages[0].content[0].type",
               "only user messages carry pictures");
  chat_refused(part(R"({"url": "data:image/png;base64,Zm9v"})", "assistant"), "messages[0].content[0].type",
               "only user messages carry pictures");
  chat_refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", f, "has no 'image_url'");
  chat_refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "text": "x", "image_url":
      {"url": "data:image/png;base64,Zm9v"}}]}]})", "messages[0].content[0].text", "unknown field");
}

TEST_CASE("server: a field that is unknown, mistyped, out of range or not honoured is refused by name", "[server]") {
  const std::string u = kUser;
  chat_refused("{" + u + R"(, "temprature": 0})", "temprature", "did you mean 'temperature'?");
  chat_refused("{" + u + R"(, "max_token": 5})", "max_token", "did you mean 'max_tokens'?");
  chat_refused("{" + u + R"(, "temperature": "hot"})", "temperature", "must be a number, found a string");
  chat_refused("{" + u + R"(, "temperature": 2.5})", "temperature", "must be in [0, 2]");
  chat_refused("{" + u + R"(, "top_p": 0})", "top_p", "must be > 0");
  chat_refused("{" + u + R"(, "max_tokens": 0})", "max_tokens", "must be in [1,");
  chat_refused("{" + u + R"(, "max_tokens": 2.5})", "max_tokens", "must be an integer");
  chat_refused("{" + u + R"(, "max_tokens": 3, "max_completion_tokens": 3})", "max_tokens", "not both");
  chat_refused("{" + u + R"(, "n": 2})", "n", "'n' must be 1");
  chat_refused("{" + u + R"(, "stop": 7})", "stop", "a string or an array of strings");
  chat_refused("{" + u + R"(, "stop": [""]})", "stop", "empty string");
  chat_refused("{" + u + R"(, "logit_bias": {"x": 1}})", "logit_bias", "'x' is not a token id");
  chat_refused("{" + u + R"(, "logit_bias": {"1": 101}})", "logit_bias.1", "must be in [-100, 100]");
  chat_refused("{" + u + R"(, "top_logprobs": 2})", "top_logprobs", "needs 'logprobs': true");
  chat_refused("{" + u + R"(, "top_logprobs": 21, "logprobs": true})", "top_logprobs", "must be in [0, 20]");
  chat_refused("{" + u + R"(, "stream_options": {"include_usage": true}})", "stream_options", "only allowed with");
  chat_refused("{" + u + R"(, "stream": true, "stream_options": {"include_usag": true}})", "stream_options.include_usag",
               "did you mean 'include_usage'?");
  chat_refused("{" + u + R"(, "store": true})", "store", "not supported");
  chat_refused("{" + u + R"(, "response_format": {"type": "xml"}})", "response_format.type",
               "expected text, json_object or json_schema");
  chat_refused("{" + u + R"(, "response_format": {"type": "json_schema"}})", "response_format.json_schema",
               "needs a 'json_schema' object");
  chat_refused("{" + u + R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})",
               "response_format.json_schema.name", "needs a 'name'");
  chat_refused(R"({"model": "m"})", "messages", "'messages' is required");
  chat_refused(R"({"messages": []})", "messages", "non-empty array");
  chat_refused(R"({"messages": [{"role": "function", "content": "x"}]})", "messages[0].role", "expected system, developer");
  chat_refused(R"({"messages": [{"role": "user"}]})", "messages[0].content", "has no 'content'");
  chat_refused(R"({"messages": [{"role": "user", "content": "a", "contnet": "b"}]})", "messages[0].contnet",
               "did you mean 'content'?");
  chat_refused(R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})",
               "messages[0].content[0].type", "the parts read are text and image_url");
  refused([] { server::parse_chat_request(Json::array()); }, 400, "", "must be a JSON object, found an array");

  completion_refused(R"({"prompt": "a", "suffix": "b"})", "suffix", "not supported");
  completion_refused(R"({"prompt": "a", "best_of": 2})", "best_of", "must be 1");
  completion_refused(R"({"prompt": "a", "logprobs": 6})", "logprobs", "must be in [0, 5]");
  completion_refused(R"({"prompt": "a", "echo": true, "stream": true})", "echo", "not supported with 'stream'");
  completion_refused(R"({"prompt": ["a", "b"]})", "prompt", "several prompts");
  completion_refused(R"({"prompt": [1, -2]})", "prompt[1]", "must be in [0,");
  completion_refused(R"({"prompt": {}})", "prompt", "a string, or an array of token ids");
  completion_refused(R"({"prmpt": "a"})", "prmpt", "did you mean 'prompt'?");

  const auto c = server::parse_completion_request(Json::parse(R"({"prompt": [1, 2, 3], "logprobs": 2, "echo": true})"));
  CHECK(c.has_prompt_ids);
  CHECK(c.prompt_ids == std::vector<std::int32_t>{1, 2, 3});
  CHECK(c.max_tokens == 16);  // OpenAI's default for completions
  CHECK(c.logprobs);
  CHECK(c.top_logprobs == 2);
  CHECK(c.echo);
}

TEST_CASE("server: responses and stream chunks have OpenAI's shape", "[server]") {
  auto r = server::parse_chat_request(Json::parse(std::string("{") + kUser + R"(, "logprobs": true, "top_logprobs": 1})"));
  server::Outcome o;
  o.text = "Hé";
  o.tokens = {5, 6};
  o.finish = models::FinishReason::stop_string;
  o.prompt_tokens = 4;
  o.cached_tokens = 1;
  o.logprobs = {{5, -0.5f, {{5, -0.5f}}}, {6, -1.0f, {{7, -0.25f}}}};
  o.token_text = {"H", "é"};
  o.top_text = {{"H"}, {"x"}};
  const Json j = server::response_json(r, o, "id1", "model1", 123);
  CHECK(j["object"] == "chat.completion");
  CHECK(j["choices"][0]["message"]["content"] == "Hé");
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["usage"]["prompt_tokens"] == 4);
  CHECK(j["usage"]["completion_tokens"] == 2);
  CHECK(j["usage"]["total_tokens"] == 6);
  CHECK(j["usage"]["prompt_tokens_details"]["cached_tokens"] == 1);
  const Json& lp = j["choices"][0]["logprobs"]["content"];
  REQUIRE(lp.size() == 2);
  CHECK(lp[1]["token"] == "é");
  CHECK(lp[1]["bytes"] == Json::array({0xC3, 0xA9}));
  CHECK(lp[1]["top_logprobs"][0]["token"] == "x");
  CHECK(lp[1]["top_logprobs"][0]["logprob"] == -0.25);
  const Json first = server::chunk_json(r, "id1", "model1", 123, "", true, nullptr);
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"] == Json{{"role", "assistant"}, {"content", ""}});
  CHECK(first["choices"][0]["finish_reason"].is_null());
  const Json last = server::chunk_json(r, "id1", "model1", 123, "", false, "length");
  CHECK(last["choices"][0]["delta"] == Json::object());
  CHECK(last["choices"][0]["finish_reason"] == "length");
  const Json usage = server::usage_chunk_json(r, "id1", "model1", 123, o);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["total_tokens"] == 6);

  auto c = server::parse_completion_request(Json::parse(R"({"prompt": "ab", "logprobs": 1, "echo": true})"));
  const Json t = server::response_json(c, o, "id2", "model1", 123, "ab");
  CHECK(t["object"] == "text_completion");
  CHECK(t["choices"][0]["text"] == "abHé");
  CHECK(t["choices"][0]["logprobs"]["tokens"] == Json::array({"H", "é"}));
  CHECK(t["choices"][0]["logprobs"]["text_offset"] == Json::array({2, 3}));  // after the echoed prompt, in bytes
  CHECK(t["choices"][0]["logprobs"]["top_logprobs"][1]["x"] == -0.25);
  CHECK(server::models_json("m", 1)["data"][0]["id"] == "m");
}

namespace {

struct Stories {
  Config cfg;
  std::unique_ptr<models::AnyModel> model;
  std::unique_ptr<tokenizer::Tokenizer> tk;
};

Stories& stories() {
  static Stories s = [] {
    const std::string dir = test::models_dir() + "/stories260K";
    test::require(dir + "/stories260K.bin", "stories260K");
    Stories st;
    st.cfg = io::read_weights_config(dir + "/stories260K.bin").value();
    st.model = models::make_built_any_model(st.cfg, {}, MAXTEXT_BLOCKS_BUILT);
    st.model->load(io::load_weights(dir + "/stories260K.bin", st.cfg).tensors);
    st.tk = tokenizer::load_tokenizer(dir + "/stories260K.bin", dir + "/tok512.bin", st.cfg.vocab_size);
    return st;
  }();
  return s;
}

std::string plain(const nlohmann::json& messages, bool add_generation_prompt) {
  std::string s;
  for (const auto& m : messages) s += m.at("role").get<std::string>() + ": " + m.at("content").get<std::string>() + "\n";
  return add_generation_prompt ? s + "assistant:" : s;
}

server::EngineOptions engine_options(int slots, int queue) {
  server::EngineOptions eo;
  eo.slots = slots;
  eo.queue = queue;
  eo.ctx = 256;
  eo.render = plain;
  eo.stop_tokens = {stories().tk->eos()};
  return eo;
}

server::Request completion(const std::string& prompt, std::int64_t max_tokens, const std::string& extra = "") {
  return server::parse_completion_request(Json::parse(str(R"({"prompt": )", Json(prompt).dump(), R"(, "max_tokens": )",
                                                          max_tokens, R"(, "temperature": 0)", extra, "}")));
}

/// The oracle: AnyModel::generate on the same ids, one prompt, a fresh cache.
models::GenerateResult plain_generate(const std::vector<std::int32_t>& ids, std::int64_t max_new,
                                      const std::vector<std::string>& stop = {}) {
  auto& s = stories();
  models::GenerateOptions go;
  go.max_new_tokens = max_new;
  go.stop_tokens = {s.tk->eos()};
  go.decode = models::decoder_for(*s.tk);
  go.stop_strings = stop;
  return s.model->generate({ids}, go);
}

}  // namespace

TEST_CASE("server engine: greedy requests equal plain generation, alone and after a slot's cache is reused",
          "[server][stories260K]") {
  auto& s = stories();
  server::Engine engine(*s.model, *s.tk, engine_options(1, 4));
  const std::vector<std::pair<std::string, std::int64_t>> prompts = {
      {"Once upon a time", 40}, {"Once upon a time, there was a dog", 30}, {"The cat sat on the mat.", 50},
      {"Once upon a time", 40}};
  for (const auto& [prompt, n] : prompts) {
    INFO(prompt);
    const auto ids = s.tk->encode(prompt);
    const auto want = plain_generate(ids, n);
    std::string streamed;
    const server::Outcome o = engine.run(completion(prompt, n), [&](std::string_view d) {
      streamed += d;
      return true;
    });
    CHECK(o.tokens == want.tokens[0]);
    CHECK(o.text == want.text[0]);
    CHECK(streamed == o.text);
    CHECK(o.finish == want.finish[0]);
    CHECK(o.prompt_tokens == static_cast<std::int64_t>(ids.size()));
  }
  // The one slot kept "Once upon a time" + its answer: the fourth request found its prompt there.
  const server::EngineStats st = engine.stats();
  CHECK(st.served == 4);
  CHECK(st.cached_tokens >= static_cast<std::int64_t>(s.tk->encode("Once upon a time").size()) - 1);

  // A chat: the plain format's prompt, with the stop string the CLI adds for it.
  auto eo = engine_options(1, 0);
  eo.chat_stop_strings = {"\nuser:"};
  server::Engine chat(*s.model, *s.tk, eo);
  const auto r = server::parse_chat_request(Json::parse(
      R"({"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 60, "temperature": 0,
          "stop": ["."]})"));
  const auto want = plain_generate(s.tk->encode("user: Tell me a story.\nassistant:"), 60, {".", "\nuser:"});
  const server::Outcome o = chat.run(r);
  CHECK(o.tokens == want.tokens[0]);
  CHECK(o.text == want.text[0]);
  CHECK(o.finish == want.finish[0]);
}

TEST_CASE("server engine: eight threads on four slots each get what they get alone", "[server][stories260K]") {
  auto& s = stories();
  auto eo = engine_options(4, 8);
  eo.batching.wait_ms = 5000;  // a round waits for every generating slot: batched passes whatever the machine's pace
  server::Engine engine(*s.model, *s.tk, eo);
  std::vector<std::string> prompts;
  for (const char* p : {"Once upon a time", "The dog", "Lily and Tom", "One day, a bird", "The sun was", "A big red",
                        "Tim liked to", "In the park"}) {
    prompts.push_back(p);
  }
  std::vector<std::vector<std::int32_t>> want;
  for (const auto& p : prompts) want.push_back(plain_generate(s.tk->encode(p), 48).tokens[0]);
  for (int round = 0; round < 2; ++round) {  // the second round finds the first's tokens in the slots
    std::vector<std::vector<std::int32_t>> got(prompts.size());
    std::vector<std::thread> threads;
    std::latch start(static_cast<std::ptrdiff_t>(prompts.size()));  // the requests arrive together
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        got[i] = engine.run(completion(prompts[i], 48)).tokens;
      });
    }
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      INFO("round " << round << ", prompt " << prompts[i]);
      CHECK(got[i] == want[i]);
    }
  }
  CHECK(engine.stats().served == 16);
  CHECK(engine.stats().refused_busy == 0);
  // The slots' decode steps ran together (models/batching.hpp), and the answers above are still each one's alone.
  const models::BatchStats b = engine.stats().batching;
  CHECK(b.max_rows >= 2);
  CHECK(b.decode_passes < b.decode_steps);
}

// The slots' steps interleave: a slot holds the model for one forward pass, not for its whole answer (as
// AnyModel::new_session's sessions would: they lock the model for a whole generate()). The test does not depend on
// timing: the long answer's text callback holds its slot's worker after the first piece (the worker waits for the
// callback's answer between two steps) until the short answer has ended. With turns per forward pass the short one
// runs meanwhile; with the model held per answer it could not, and the wait ends by its time limit (a failure, not a
// hang). The scheduler's round waits for the held slot at most BatchOptions::wait_ms, then goes on without it.
TEST_CASE("server engine: slots interleave their steps, so a short answer is not held back by a long one",
          "[server][stories260K]") {
  auto& s = stories();
  server::Engine engine(*s.model, *s.tk, engine_options(2, 0));
  std::mutex mu;
  std::condition_variable cv;
  bool long_started = false, short_done = false, waited_in_vain = false;
  int long_pieces = 0;
  std::thread long_one([&] {
    engine.run(completion("Once upon a time", 200, R"(, "logit_bias": {"2": -100})"), [&](std::string_view) {
      std::unique_lock<std::mutex> lock(mu);
      if (++long_pieces == 1) {
        long_started = true;
        cv.notify_all();
        if (!cv.wait_for(lock, std::chrono::seconds(120), [&] { return short_done; })) waited_in_vain = true;
      }
      return true;
    });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return long_started; });
  }
  const auto short_one = engine.run(completion("The dog", 8, R"(, "logit_bias": {"2": -100})"));
  int when = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    short_done = true;
    when = long_pieces;
  }
  cv.notify_all();
  long_one.join();
  INFO("the long answer had " << when << " of its 200 pieces when the short one (8 tokens) ended");
  CHECK(short_one.tokens.size() == 8);
  CHECK_FALSE(waited_in_vain);  // the short answer ended while the long one's worker waited between two steps
  CHECK(when == 1);
  CHECK(long_pieces > when);  // and the long answer went on afterwards
}

TEST_CASE("server engine: a full queue refuses with 503, cancellation ends a request, limits are checked",
          "[server][stories260K]") {
  auto& s = stories();
  server::Engine engine(*s.model, *s.tk, engine_options(1, 1));
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, release = false;
  // The first request holds the one slot: its first piece of text waits until released.
  std::thread holder([&] {
    engine.run(completion("Once upon a time", 20), [&](std::string_view) {
      std::unique_lock<std::mutex> lock(mu);
      started = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
      return true;
    });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started; });
  }
  std::thread waiter([&] { engine.run(completion("The dog", 5)); });  // waits: the queue's one place
  while (engine.stats().waiting < 1) std::this_thread::yield();
  refused([&] { engine.run(completion("A third", 5)); }, 503, "", "the server is busy: 1 requests running and 1 waiting");
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  holder.join();
  waiter.join();
  const server::EngineStats st = engine.stats();
  CHECK(st.served == 2);
  CHECK(st.refused_busy == 1);

  // Cancellation: by the text callback (a client gone) and by a stop token.
  int pieces = 0;
  const auto o = engine.run(completion("Once upon a time", 50), [&](std::string_view) { return ++pieces < 3; });
  CHECK(o.finish == models::FinishReason::cancelled);
  CHECK(o.tokens.size() < 50);
  // on_text runs on the caller's thread (the slot's own thread generates): what it throws ends the generation,
  // reaches the caller, and frees the slot.
  int seen = 0;
  CHECK_THROWS_WITH(engine.run(completion("Once upon a time", 50), [&](std::string_view) -> bool {
    if (++seen == 2) throw std::runtime_error("client write failed");
    return true;
  }), Catch::Contains("client write failed"));
  CHECK(seen == 2);
  CHECK(engine.stats().running == 0);
  std::stop_source stop;
  stop.request_stop();
  CHECK(engine.run(completion("Once upon a time", 50), {}, stop.get_token()).finish == models::FinishReason::cancelled);

  // Limits: the context (256 tokens per slot), token ids and logit_bias ids outside the vocabulary, a bad schema.
  refused([&] { engine.run(completion("Once upon a time", 300)); }, 400, "max_tokens", "exceed the context of 256 tokens");
  refused([&] { engine.run(server::parse_completion_request(Json::parse(R"({"prompt": [1, 512]})"))); }, 400,
          "prompt[1]", "token id 512 outside the vocabulary of 512");
  refused([&] { engine.run(completion("a", 5, R"(, "logit_bias": {"600": 1})")); }, 400, "logit_bias",
          "token id 600 outside the vocabulary");
  refused([&] {
    engine.run(completion("a", 5, R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x",
        "schema": {"type": "integer", "multipleOf": 2}}})"));
  }, 400, "response_format.json_schema.schema", "multipleOf");
  // Without max_tokens, a request takes what the context leaves.
  const auto all = engine.run(server::parse_chat_request(Json::parse(
      R"({"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "logit_bias": {"2": -100}})")));
  CHECK(all.finish == models::FinishReason::length);  // end-of-sequence (id 2) banned: it fills the slot
  CHECK(all.prompt_tokens + static_cast<std::int64_t>(all.tokens.size()) == 256);
}

TEST_CASE("server engine: JSON-schema requests follow the schema, as generate_constrained does", "[server][stories260K]") {
  auto& s = stories();
  server::Engine engine(*s.model, *s.tk, engine_options(1, 0));
  const Json schema = Json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false})");
  for (const char* prompt : {"Once upon a time", "Lily was"}) {
    INFO(prompt);
    const auto r = completion(prompt, 240, str(R"(, "response_format": {"type": "json_schema", "json_schema": {"name":
        "person", "schema": )", schema.dump(), "}}"));
    const server::Outcome o = engine.run(r);
    models::GenerateOptions go;
    go.max_new_tokens = 240;
    go.stop_tokens = {s.tk->eos()};
    go.decode = models::decoder_for(*s.tk);
    models::detail::AnyDraftModel m(*s.model);  // the oracle: plain AnyModel forward passes
    const auto want = models::generate_constrained(m, *s.tk, s.tk->encode(prompt), go,
                                                   models::grammar::grammar_from_json_schema(schema), 256);
    CHECK(o.tokens == want.tokens[0]);
    REQUIRE(o.finish == models::FinishReason::stop_token);  // a whole document within 240 tokens
    const auto doc = nlohmann::json::parse(o.text);          // throws if it is not JSON
    CHECK(doc.size() == 2);
    CHECK(doc.at("name").is_string());
    CHECK(doc.at("age").is_number_integer());
  }
  // The same request again: the slot's session already holds its prompt (and the first answer), so only the last
  // prompt token is run again; the answer is the same.
  const auto again = completion("Once upon a time", 240, str(R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "person", "schema": )", schema.dump(), "}}"));
  const server::Outcome first = engine.run(again), second = engine.run(again);
  CHECK(second.tokens == first.tokens);
  CHECK(second.cached_tokens == second.prompt_tokens - 1);
  // json_object: any JSON object.
  const auto any = engine.run(completion("Once upon a time", 240, R"(, "response_format": {"type": "json_object"})"));
  if (any.finish == models::FinishReason::stop_token) CHECK(nlohmann::json::parse(any.text).is_object());
}

// ---- tool calls (server/tools.hpp) ----

namespace {

const char* kWeatherTool = R"({"type": "function", "function": {"name": "get_weather", "description": "The weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days":
    {"type": "integer"}}, "required": ["city", "days"], "additionalProperties": false}}})";
const char* kTimeTool = R"({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": false}}})";

Json two_tools() { return Json::array({Json::parse(kWeatherTool), Json::parse(kTimeTool)}); }

}  // namespace

TEST_CASE("server tools: tools, tool_choice and tool messages are read, and refused by name", "[server][tools]") {
  const std::string u = kUser;
  const auto r = server::parse_chat_request(Json::parse(str(R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function":
          {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
    "tools": [)", kWeatherTool, ",", kTimeTool, R"(], "tool_choice": {"type": "function", "function": {"name": "get_time"}},
    "parallel_tool_calls": false})")));
  CHECK(r.tools.size() == 2);
  CHECK(r.tool_choice == server::ToolChoice::named);
  CHECK(r.tool_name == "get_time");
  CHECK_FALSE(r.parallel_tool_calls);
  // Hugging Face's message form: the arguments as an object, the tool's result with its id.
  CHECK(r.messages[1]["content"] == "");
  CHECK(r.messages[1]["tool_calls"][0]["function"]["arguments"] == nlohmann::json{{"city", "Paris"}, {"days", 2}});
  CHECK(r.messages[1]["tool_calls"][0]["id"] == "call_1");
  CHECK(r.messages[2] == nlohmann::json{{"role", "tool"}, {"content", "sunny"}, {"tool_call_id", "call_1"}});
  CHECK(server::parse_chat_request(Json::parse("{" + u + ", \"tools\": [" + kWeatherTool + "]}")).tool_choice ==
        server::ToolChoice::automatic);

  chat_refused("{" + u + R"(, "tools": [{"type": "code_interpreter"}]})", "tools[0].type", "must be \"function\"");
  chat_refused("{" + u + R"(, "tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools[0].function.name",
               "1 to 64 of");
  chat_refused("{" + u + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameter": {}}}]})",
               "tools[0].function.parameter", "did you mean 'parameters'?");
  chat_refused("{" + u + ", \"tools\": [" + kTimeTool + "," + kTimeTool + "]}", "tools[1].function.name",
               "two tools are named 'get_time'");
  chat_refused("{" + u + ", \"tools\": [" + kTimeTool + R"(], "tool_choice": "always"})", "tool_choice",
               "expected none, auto, required");
  chat_refused("{" + u + ", \"tools\": [" + kTimeTool +
                   R"(], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})",
               "tool_choice.function.name", "'get_weather', which is not in 'tools'");
  chat_refused("{" + u + R"(, "tool_choice": "required"})", "tool_choice", "needs 'tools'");
  chat_refused("{" + u + ", \"tools\": [" + kTimeTool + R"(], "response_format": {"type": "json_object"}})",
               "response_format", "cannot be combined with tool calls");
  chat_refused(R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].tool_call_id", "needs its 'tool_call_id'");
  chat_refused(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls",
               "only assistant messages");
  chat_refused(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
               "messages[0].tool_calls[0].function.name", "has no 'name'");
  chat_refused("{" + u + R"(, "functions": []})", "functions", "deprecated form of tools");
}

TEST_CASE("server tools: calls are parsed out of an answer, or the answer stays text", "[server][tools]") {
  using server::ToolFormat;
  const Json tools = two_tools();
  const auto one = server::parse_tool_calls(
      "Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 1}}\n"
      "</tool_call>",
      ToolFormat::hermes, tools, 7);
  CHECK(one.content == "Let me look.");
  REQUIRE(one.calls.size() == 1);
  CHECK(one.calls[0].id == "call_7");
  CHECK(one.calls[0].name == "get_weather");
  CHECK(Json::parse(one.calls[0].arguments) == Json{{"city", "Oslo"}, {"days", 1}});
  const auto two = server::parse_tool_calls(
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}\n</tool_call>\n",
      ToolFormat::hermes, tools, 0);
  CHECK(two.content.empty());
  REQUIRE(two.calls.size() == 2);
  CHECK(two.calls[1].id == "call_1");
  CHECK(two.calls[1].name == "get_weather");
  // max_tokens cut the answer inside a second call: the complete call is kept.
  const auto cut = server::parse_tool_calls(
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"argu",
      ToolFormat::hermes, tools, 0);
  REQUIRE(cut.calls.size() == 1);
  CHECK(cut.calls[0].arguments == R"({"zone":"UTC"})");
  // Not calls: the answer stays text as the model wrote it.
  for (const char* text : {"No tools needed.", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n",
                           "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",
                           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"UTC\"}\n</tool_call>",
                           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\nand more text"}) {
    INFO(text);
    const auto p = server::parse_tool_calls(text, ToolFormat::hermes, tools, 0);
    CHECK(p.calls.empty());
    CHECK(p.content == text);
  }
  CHECK(server::tool_marker_prefix("abc <tool_", ToolFormat::hermes) == 6);
  CHECK(server::tool_marker_prefix("abc <", ToolFormat::hermes) == 1);
  CHECK(server::tool_marker_prefix("abc", ToolFormat::hermes) == 0);
}

TEST_CASE("server tools: the call grammar takes exactly the offered tools with their arguments", "[server][tools]") {
  namespace gr = models::grammar;
  const Json tools = two_tools();
  auto run = [](const std::string& gbnf, const std::string& text) {
    gr::Matcher m(std::make_shared<const gr::Grammar>(gr::Grammar::parse(gbnf)));
    return m.accept(text) && m.complete();
  };
  const std::string any = server::tool_call_grammar(server::ToolFormat::hermes, tools, "", true);
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n</tool_call>";
  const std::string time = "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"zone\":\"CET\"}}\n</tool_call>";
  CHECK(run(any, weather));
  CHECK(run(any, time));
  CHECK(run(any, weather + "\n" + time));  // parallel calls
  CHECK_FALSE(run(any, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"PST\"}}\n</tool_call>"));
  CHECK_FALSE(run(any, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  CHECK_FALSE(run(any, "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(run(any, "Sure! " + time));
  const std::string named = server::tool_call_grammar(server::ToolFormat::hermes, tools, "get_time", false);
  CHECK(run(named, time));
  CHECK_FALSE(run(named, weather));
  CHECK_FALSE(run(named, time + "\n" + time));  // parallel_tool_calls false: one call
  Json bad = Json::array({Json::parse(kTimeTool)});
  bad[0]["function"]["parameters"] = Json{{"type", "integer"}, {"multipleOf", 2}};
  refused([&] { server::tool_call_grammar(server::ToolFormat::hermes, bad, "", false); }, 400,
          "tools[0].function.parameters", "tool 'get_time': its parameters schema cannot be used");
}

TEST_CASE("server tools: Qwen3's template renders the tools and the calls, the engine makes a required call",
          "[server][tools][tokenizers]") {
  const std::string dir = test::models_dir() + "/tokenizers/qwen3";
  test::require(dir + "/tokenizer_config.json", "Qwen3 tokenizer");
  const auto tmpl = tokenizer::find_chat_template(dir).value();
  CHECK(server::tool_format_of(tmpl.source()) == server::ToolFormat::hermes);
  for (const char* other : {"gemma3", "llama3"}) {  // their templates render no tools
    const auto t = tokenizer::find_chat_template(test::models_dir() + "/tokenizers/" + other);
    if (t) CHECK(server::tool_format_of(t->source()) == server::ToolFormat::none);
  }
  const auto tk = tokenizer::load_tokenizer("", dir, 151936);
  // A seeded small model over Qwen3's vocabulary: its text is noise, but a required call follows the grammar.
  Config cfg = io::load_config(test::config_dir() + "/models/llama2-7b.yml",
                               {"base_num_decoder_layers=1", "base_emb_dim=64", "base_num_query_heads=2",
                                "base_num_kv_heads=2", "head_dim=32", "base_mlp_dim=128", "dtype=float32",
                                "vocab_size=151936", "max_target_length=1024"});
  const auto model = models::make_built_any_model(cfg, {}, MAXTEXT_BLOCKS_BUILT);
  model->init(3);
  server::EngineOptions eo;
  eo.ctx = 1024;
  eo.stop_tokens = tk->eos_ids();
  eo.render = [&](const nlohmann::json& m, bool add) { return tmpl.render(m, add); };
  eo.render_tools = [&](const nlohmann::json& m, const nlohmann::json& tools, bool add) {
    tokenizer::ChatOptions o;
    o.add_generation_prompt = add;
    o.tools = tools;
    return tmpl.render(m, o);
  };
  eo.encode_chat = [&](const std::string& s) { return tk->encode(s, false); };
  eo.tool_format = server::tool_format_of(tmpl.source());
  server::Engine engine(*model, *tk, eo);

  const auto r = server::parse_chat_request(Json::parse(str(R"({"messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function":
          {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
      {"role": "user", "content": "And the time?"}],
    "tools": [)", kWeatherTool, ",", kTimeTool, R"(], "tool_choice": "required", "parallel_tool_calls": false,
    "temperature": 0, "max_tokens": 60})")));
  std::string prompt;
  const auto ids = engine.prompt_ids(r, &prompt);
  // The tools as the template's tojson writes them (this Jinja engine's objects keep their keys sorted).
  CHECK_THAT(prompt, Catch::Contains("<tools>\n{\"function\": {\"description\": \"The weather\", \"name\": \"get_weather\""));
  CHECK_THAT(prompt, Catch::Contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 1}}\n</tool_call>"));
  CHECK_THAT(prompt, Catch::Contains("<tool_response>\nrain\n</tool_response>"));
  std::string streamed;
  const server::Outcome o = engine.run(r, [&](std::string_view d) {
    streamed += d;
    return true;
  });
  INFO("answer: " << o.text << " tokens " << o.tokens.size());
  REQUIRE(o.tool_calls.size() == 1);  // one call (parallel_tool_calls false), then the grammar ends the answer
  CHECK(o.finish == models::FinishReason::stop_token);
  CHECK(o.text.empty());
  CHECK(streamed.empty());  // nothing of the call leaks into the streamed text
  CHECK(std::string(server::finish_reason(o)) == "tool_calls");
  for (const auto& c : o.tool_calls) {
    const Json args = Json::parse(c.arguments);
    if (c.name == "get_weather") {
      CHECK(args.at("city").is_string());
      CHECK(args.at("days").is_number_integer());
    } else {
      CHECK(c.name == "get_time");
      CHECK((args.at("zone") == "UTC" || args.at("zone") == "CET"));
    }
  }
  // The same grammar through generate_constrained gives the same tokens.
  models::GenerateOptions go;
  go.max_new_tokens = 60;
  go.stop_tokens = tk->eos_ids();
  go.decode = models::decoder_for(*tk);
  models::detail::AnyDraftModel m(*model);
  const auto g = std::make_shared<const models::grammar::Grammar>(models::grammar::Grammar::parse(
      server::tool_call_grammar(server::ToolFormat::hermes, r.tools, "", false)));
  CHECK(models::generate_constrained(m, *tk, ids, go, g, 1024).tokens[0] == o.tokens);

  // A template without a tool syntax refuses requests that may call tools, and serves tool_choice none.
  server::EngineOptions plain_eo = eo;
  plain_eo.tool_format = server::ToolFormat::none;
  server::Engine no_tools(*model, *tk, plain_eo);
  refused([&] { no_tools.run(r); }, 400, "tools", "teaches no tool-call syntax");
  auto none = r;
  none.tool_choice = server::ToolChoice::none;
  none.max_tokens = 4;
  CHECK(no_tools.run(none).tool_calls.empty());
}
