// Pictures through the OpenAI-compatible server's engine (server/engine.hpp, EngineOptions::pictures): a chat
// request's image_url parts (PNG bytes in data URLs) decoded, preprocessed and encoded by the library's Gemma 3 tower
// (families/gemma/pictures.hpp), their markers expanded, the soft tokens merged into the decoder. The oracle is the
// float64 re-statement behind the tiny multimodal Gemma 3 fixture (tests/reference/gemma3_multimodal_reference.py:
// its expanded prompt ids.npy and its greedy continuation, whose best-vs-second gaps are >= 0.54 in meta.json, far
// above float32's error). Also: a picture request reuses a slot's cached pictures only when they are the same
// pictures, and requests with pictures the engine cannot take are refused by name. The same for Llama 4's vision model
// (families/llama4/pictures.hpp) against tests/reference/llama4_multimodal_reference.py's fixture (gaps >= 0.055), and
// Gemma 4's vision encoder (families/gemma4/pictures.hpp) against tests/reference/gemma4_multimodal_reference.py's
// (gaps >= 0.034), through its chat template.
#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/gemma/pictures.hpp"
#include "maxtext/families/gemma4/pictures.hpp"
#include "maxtext/families/llama4/pictures.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/server/engine.hpp"
#include "maxtext/server/openai.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"
#include "maxtext_blocks_built.hpp"  // the models of maxtext_blocks (tools/blocks/), as the CLI has them
#include "support/test_support.hpp"

using namespace maxtext;
using server::Json;

namespace {

std::string fixture() { return test::fixtures_dir() + "/gemma3_mm_model"; }

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// Standard base64 with padding (RFC 4648, section 4), as clients write data URLs.
std::string base64(const std::string& bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += abc[(v >> k) & 63];
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8;
    for (int k = 18; k >= 6; k -= 6) out += abc[(v >> k) & 63];
    out += "=";
  }
  return out;
}

Json image_part(const std::string& png) {
  return Json{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64(png)}}}};
}
Json text_part(const std::string& t) { return Json{{"type", "text"}, {"text", t}}; }

/// A greedy chat request of one user message made of `parts`.
server::Request chat(const Json& parts, int max_tokens = 8) {
  const Json body = {{"messages", Json::array({{{"role", "user"}, {"content", parts}}})},
                     {"max_tokens", max_tokens},
                     {"temperature", 0}};
  return server::parse_chat_request(body);
}

std::vector<std::int32_t> ints(const AnyTensor& t) {
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<std::int32_t>(t.element(i)));
  return out;
}

/// What a request is refused with: its status, field and a piece of its message.
void refused(server::Engine& e, const server::Request& r, const std::string& param, const std::string& what) {
  try {
    (void)e.run(r);
    FAIL("accepted; expected a refusal naming '" << param << "'");
  } catch (const server::RequestError& err) {
    INFO(err.what());
    CHECK(err.status() == 400);
    CHECK(err.param() == param);
    CHECK_THAT(err.what(), Catch::Contains(what));
  }
}

}  // namespace

TEST_CASE("server engine: a chat request's pictures reach Gemma 3 as the float64 reference merges them",
          "[server][pictures][gemma]") {
  const std::string dir = fixture();
  const Config cfg = io::read_weights_config(dir + "/hf").value();
  if (!models::any_model_is_built(cfg, "")) test::skip("decoder_block gemma3 is not compiled into maxtext_blocks");
  auto model = models::make_built_any_model(cfg, {}, MAXTEXT_BLOCKS_BUILT);
  model->load(io::load_weights(dir + "/hf", cfg).tensors);
  const auto tk = tokenizer::load_tokenizer("", dir + "/chat_tokenizer", cfg.vocab_size);
  using Pictures = models::Gemma3Pictures<Policy<cpu::Backend, float>>;
  const auto pics = std::make_shared<const Pictures>(cpu::Backend{}, dir + "/hf");
  pics->check_text_model(cfg);

  server::EngineOptions eo;
  eo.slots = 1;
  eo.queue = 1;
  eo.ctx = 600;
  // The fixture's prompt is "<bos>" and the user's text, without a chat template: its ids are prompt_ids.npy.
  eo.render = [](const nlohmann::json& messages, bool) {
    return "<bos>" + messages.at(0).at("content").get<std::string>();
  };
  eo.encode_chat = [&tk](const std::string& text) { return tk->encode(text, false); };
  eo.stop_tokens = {1};
  std::atomic<int> expands{0};
  eo.pictures.marker = "<start_of_image>";
  eo.pictures.expand = [pics, &expands](const std::vector<std::int32_t>& ids,
                                        const std::vector<server::Picture>& pictures) {
    ++expands;
    std::vector<io::Image> images;
    for (const auto& p : pictures) {
      const auto* b = reinterpret_cast<const std::uint8_t*>(p.bytes.data());
      images.push_back(io::decode_image(std::span<const std::uint8_t>(b, p.bytes.size()), p.field));
    }
    return pics->expand(ids, pics->encode(images));
  };
  server::Engine engine(*model, *tk, eo);

  const std::string a = file_bytes(dir + "/image_a.png"), b = file_bytes(dir + "/image_b.png");
  const Json parts = Json::array({text_part("!%"), image_part(a), text_part("*#"), image_part(b), text_part("=-")});
  const std::vector<std::int32_t> want_ids = ints(test::npy(dir + "/ids.npy"));
  const std::vector<std::int32_t> greedy = ints(test::npy(dir + "/greedy.npy"));
  {
    const auto job = engine.admit(chat(parts));
    CHECK(job->prompt_ids() == want_ids);  // the markers expanded as add_extra_tokens_for_images_gemma3
    CHECK(job->prompt_text() == "<bos>!%<start_of_image>*#<start_of_image>=-");
    const server::Outcome o = job->run();
    CHECK(o.tokens == greedy);
    CHECK(o.prompt_tokens == static_cast<std::int64_t>(want_ids.size()));
    CHECK(o.cached_tokens == 0);
  }
  // The same pictures again: the slot's cache holds them (all of the prompt but the last token is reused).
  const server::Outcome again = engine.run(chat(parts));
  CHECK(again.tokens == greedy);
  CHECK(again.cached_tokens == static_cast<std::int64_t>(want_ids.size()) - 1);
  // The pictures swapped: the ids are the same, the soft tokens are not, so the cache is reused only up to the first
  // picture's soft tokens (Session::sync compares the rows too), and the answer is the swapped prompt's own.
  const Json swapped = Json::array({text_part("!%"), image_part(b), text_part("*#"), image_part(a), text_part("=-")});
  const server::Outcome s = engine.run(chat(swapped));
  CHECK(s.prompt_tokens == static_cast<std::int64_t>(want_ids.size()));
  CHECK(s.cached_tokens <= 6);  // <bos> ! % \n\n <start_of_image>: before the first soft token
  CHECK(expands == 3);
  {
    // The swapped prompt alone, from a fresh cache: the engine's answer must be the model's for it.
    const models::MediaPrompt p = pics->expand(tk->encode("<bos>!%<start_of_image>*#<start_of_image>=-", false),
                                               pics->encode({io::decode_image(std::span<const std::uint8_t>(
                                                                 reinterpret_cast<const std::uint8_t*>(b.data()), b.size())),
                                                             io::decode_image(std::span<const std::uint8_t>(
                                                                 reinterpret_cast<const std::uint8_t*>(a.data()), a.size()))}));
    models::GenerateOptions go;
    go.max_new_tokens = 8;
    go.stop_tokens = {1};
    go.media_mask = &p.mask;
    go.media_embeddings = &p.embeddings;
    const auto res = model->generate({p.ids}, go);
    CHECK(s.tokens == res.tokens[0]);
  }

  // Refusals, by name (400): a picture that is not PNG or JPEG, a text part that writes the marker itself, more
  // markers than the tower's pictures, and a model without a tower.
  const Json not_png = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64("GIF89a....")}}}};
  refused(engine, chat(Json::array({text_part("x"), not_png})),
          "messages", "messages[0].content[1].image_url");
  refused(engine, chat(Json::array({text_part("<__media__>"), image_part(a)})), "messages",
          "hold 2 <__media__> marker(s) for 1 picture(s)");
  refused(engine, chat(Json::array({text_part("<start_of_image>"), image_part(a)})), "messages",
          "the prompt has 2 <start_of_image> marker(s) for 1 picture(s)");
  auto plain = eo;
  plain.pictures = {};
  server::Engine text_only(*model, *tk, plain);
  refused(text_only, chat(parts), "messages[0].content[1].image_url", "takes no pictures");
  // A text-only request on the picture engine runs as the model does without pictures.
  const server::Outcome t = engine.run(chat(Json::array({text_part("!%*#=-")})));
  models::GenerateOptions go;
  go.max_new_tokens = 8;
  go.stop_tokens = {1};
  CHECK(t.tokens == model->generate({tk->encode("<bos>!%*#=-", false)}, go).tokens[0]);
}

TEST_CASE("server engine: a chat request's pictures reach Llama 4 as the float64 reference merges them",
          "[server][pictures][llama4]") {
  const std::string dir = test::fixtures_dir() + "/llama4_mm_model";
  const Config cfg = io::read_weights_config(dir + "/hf").value();
  if (!models::any_model_is_built(cfg, "")) test::skip("decoder_block llama4 is not compiled into maxtext_blocks");
  auto model = models::make_built_any_model(cfg, {}, MAXTEXT_BLOCKS_BUILT);
  model->load(io::load_weights(dir + "/hf", cfg).tensors);
  const auto tk = tokenizer::load_tokenizer(dir + "/hf", "", cfg.vocab_size);
  io::Llama4ImageTokens ids;  // this vocabulary's markers (the tokenizer's, as the program reads them)
  ids.image = *tk->token_to_id("<|image|>");
  ids.tile_x = *tk->token_to_id("<|tile_x_separator|>");
  ids.tile_y = *tk->token_to_id("<|tile_y_separator|>");
  using Pictures = models::Llama4Pictures<Policy<cpu::Backend, float>>;
  const auto pics = std::make_shared<const Pictures>(cpu::Backend{}, dir + "/hf", ids);
  pics->check_text_model(cfg);

  server::EngineOptions eo;
  eo.slots = 1;
  eo.queue = 1;
  eo.ctx = 200;
  // The fixture's prompt is <|begin_of_text|> and the user's text, without a chat template: its ids are ids.npy once
  // expanded.
  eo.render = [](const nlohmann::json& messages, bool) {
    return "<|begin_of_text|>" + messages.at(0).at("content").get<std::string>();
  };
  eo.encode_chat = [&tk](const std::string& text) { return tk->encode(text, false); };
  eo.stop_tokens = {2};
  eo.pictures.marker = "<|image|>";
  eo.pictures.expand = [pics](const std::vector<std::int32_t>& prompt, const std::vector<server::Picture>& pictures) {
    std::vector<io::Image> images;
    for (const auto& p : pictures) {
      const auto* b = reinterpret_cast<const std::uint8_t*>(p.bytes.data());
      images.push_back(io::decode_image(std::span<const std::uint8_t>(b, p.bytes.size()), p.field));
    }
    return pics->expand(prompt, pics->encode(images));
  };
  server::Engine engine(*model, *tk, eo);
  const std::string a = file_bytes(dir + "/image_a.png"), b = file_bytes(dir + "/image_b.png");
  const Json parts = Json::array({image_part(a), text_part("describe "), image_part(b), text_part("both")});
  const auto job = engine.admit(chat(parts));
  CHECK(job->prompt_ids() == ints(test::npy(dir + "/ids.npy")));  // expanded as add_extra_tokens_for_images_llama4
  CHECK(job->prompt_text() == "<|begin_of_text|><|image|>describe <|image|>both");
  const server::Outcome o = job->run();
  CHECK(o.tokens == ints(test::npy(dir + "/greedy.npy")));
  refused(engine, chat(Json::array({text_part("<|image|>"), image_part(a)})), "messages",
          "the prompt has 2 <|image|> marker(s) for 1 picture(s)");
}

TEST_CASE("server engine: a chat request's pictures reach Gemma 4 as the float64 reference merges them",
          "[server][pictures][gemma4]") {
  const std::string dir = test::fixtures_dir() + "/gemma4_mm_model";
  const Config cfg = io::read_weights_config(dir + "/hf").value();
  if (!models::any_model_is_built(cfg, "")) test::skip("decoder_block gemma4 is not compiled into maxtext_blocks");
  auto model = models::make_built_any_model(cfg, {}, MAXTEXT_BLOCKS_BUILT);
  model->load(io::load_weights(dir + "/hf", cfg).tensors);
  const auto tk = tokenizer::load_tokenizer(dir + "/hf", "", cfg.vocab_size);
  using Pictures = models::Gemma4Pictures<Policy<cpu::Backend, float>>;
  const auto pics = std::make_shared<const Pictures>(cpu::Backend{}, dir + "/hf");
  pics->check_text_model(cfg);

  server::EngineOptions eo;
  eo.slots = 1;
  eo.queue = 1;
  eo.ctx = 80;
  // The fixture's prompt is Gemma 4's turn format around the user's text (its tokenizer_config.json template).
  eo.render = [](const nlohmann::json& messages, bool) {
    return "<bos><|turn>user\n" + messages.at(0).at("content").get<std::string>() + "<turn|>\n<|turn>model\n";
  };
  eo.encode_chat = [&tk](const std::string& text) { return tk->encode(text, false); };
  eo.stop_tokens = {1};
  eo.pictures.marker = "<|image|>";
  eo.pictures.expand = [pics](const std::vector<std::int32_t>& prompt, const std::vector<server::Picture>& pictures) {
    std::vector<io::Image> images;
    for (const auto& p : pictures) {
      const auto* b = reinterpret_cast<const std::uint8_t*>(p.bytes.data());
      images.push_back(io::decode_image(std::span<const std::uint8_t>(b, p.bytes.size()), p.field));
    }
    return pics->expand(prompt, pics->encode(images));
  };
  server::Engine engine(*model, *tk, eo);
  const std::string a = file_bytes(dir + "/image_a.png"), b = file_bytes(dir + "/image_b.png");
  const Json parts = Json::array({image_part(a), text_part("what is "), image_part(b), text_part("this?")});
  const auto job = engine.admit(chat(parts));
  CHECK(job->prompt_ids() == ints(test::npy(dir + "/ids.npy")));  // expanded as add_extra_tokens_for_images_gemma4
  const server::Outcome o = job->run();
  CHECK(o.tokens == ints(test::npy(dir + "/greedy.npy")));
  refused(engine, chat(Json::array({text_part("<|image|>"), image_part(a)})), "messages",
          "the prompt has 2 <|image|> marker(s) for 1 picture(s)");
}
