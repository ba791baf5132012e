// Generation for applications: streamed text (models/text_stream.hpp) against decode() of the whole sequence, stop
// strings and stop tokens, log-probabilities against an independent log-softmax of full-sequence logits, sessions
// (models/session.hpp) against from-scratch runs, and `maxtext chat` on stories260K.
//
// Models: the 2-layer llama2 fixture config (tests/fixtures/llama2_model, vocab 64) with seeded weights, so the
// session checks need no shared files; the llama-2-tiny-random GGUF vocabulary (<0xHH> byte pieces, ids 3..258) and
// stories260K from ../shared/models (skipped when absent).
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/io/generation_config.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/text_stream.hpp"
#include "maxtext/models/transformer.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"
#include "support/command.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using models::FinishReason;
using models::TextStreamer;

namespace {

using Llama = models::Transformer<Policy<cpu::Backend, float>, layers::LlamaDecoderLayer>;

/// True when `s` is a sequence of complete, well-formed UTF-8 characters (checked by hand, independently of the
/// streamer's own tail test).
bool complete_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

/// True when byte position `pos` of `s` falls inside a well-formed multi-byte UTF-8 character (not at its start).
bool inside_character(const std::string& s, std::size_t pos) {
  for (std::size_t back = 1; back <= 3 && back <= pos; ++back) {
    const auto c = static_cast<unsigned char>(s[pos - back]);
    if ((c & 0xC0) == 0x80) continue;
    const std::size_t n = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC0 && c < 0xE0 ? 2 : 1;
    if (n <= back || pos - back + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[pos - back + k]) & 0xC0) != 0x80) return false;
    }
    return true;
  }
  return false;
}

/// A toy vocabulary: token i decodes to pieces[i] (some are single bytes of multi-byte characters).
struct ToyTokenizer {
  std::vector<std::string> pieces;
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string s;
    for (auto id : ids) s += pieces.at(static_cast<std::size_t>(id));
    return s;
  }
};

Llama tiny_model(std::uint64_t seed = 7) {
  Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/llama2_model"));
  Llama m(c, cpu::Backend(cpu::Options{1}));
  m.init(seed);
  return m;
}

Tensor<std::int32_t, 2> row(const std::vector<std::int32_t>& ids) {
  Tensor<std::int32_t, 2> t({1, static_cast<std::int64_t>(ids.size())});
  for (std::size_t i = 0; i < ids.size(); ++i) t(0, static_cast<std::int64_t>(i)) = ids[i];
  return t;
}

/// Last-position logits of a from-scratch forward of `ids`.
std::vector<float> fresh_last_logits(Llama& m, const std::vector<std::int32_t>& ids) {
  const Tensor<float, 3> l = m.forward(row(ids));
  const std::int64_t T = l.dim(1), V = l.dim(2);
  return std::vector<float>(&l(0, T - 1, 0), &l(0, T - 1, 0) + V);
}

void expect_logits_close(const std::vector<float>& a, const std::vector<float>& e) {
  REQUIRE(a.size() == e.size());
  double worst = 0;
  bool ok = true;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - e[i]);
    worst = std::max(worst, d);
    ok = ok && d <= test::tol::f32_logits.atol + test::tol::f32_logits.rtol * std::fabs(e[i]);
  }
  INFO("max |session - fresh| = " << worst);
  CHECK(ok);
}

using ::maxtext::test::run_command;

}  // namespace

TEST_CASE("TextStreamer: deltas are whole UTF-8 characters and add up to decode()", "[generate][stream]") {
  // "h", "é" as two byte tokens, "llo ", the 4 bytes of U+1F642 one by one, " wo", "rld".
  const ToyTokenizer tk{{"h", "\xC3", "\xA9", "llo ", "\xF0", "\x9F", "\x99", "\x82", " wo", "rld"}};
  const std::vector<std::int32_t> ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  TextStreamer s(models::decoder_for(tk));
  std::string all;
  std::vector<std::string> deltas;
  for (auto id : ids) deltas.push_back(s.push(id));
  deltas.push_back(s.finish());
  for (const auto& d : deltas) {
    INFO("delta '" << d << "'");
    CHECK(complete_utf8(d));
    all += d;
  }
  CHECK(all == tk.decode(ids));
  CHECK(s.text() == all);
  CHECK(deltas[1].empty());  // the lone lead byte of é is held
  CHECK(deltas[2] == "\xC3\xA9");
  CHECK(deltas[7] == "\xF0\x9F\x99\x82");

  // A truncated character at the end becomes U+FFFD on finish().
  TextStreamer t(models::decoder_for(tk));
  CHECK(t.push(0) == "h");
  CHECK(t.push(4).empty());
  CHECK(t.finish() == "\xEF\xBF\xBD");
}

TEST_CASE("TextStreamer: stop strings spanning tokens are cut, their possible starts held back", "[generate][stream]") {
  const ToyTokenizer tk{{"Hel", "lo, ", "Us", "er", ": hi", "Use", "ful", "\xC3", "\xA9"}};
  // "Hello, User: hi" with the stop string "User:": the text ends before it.
  TextStreamer s(models::decoder_for(tk), {"User:", "zzz"});
  CHECK(s.push(0) == "Hel");
  CHECK(s.push(1) == "lo, ");
  CHECK(s.push(2).empty());  // "Us" may start "User:"
  CHECK(s.push(3).empty());  // "User"
  CHECK(s.push(4).empty());  // "User: hi" matches: nothing more is emitted
  CHECK(s.stopped());
  CHECK(s.stop_index() == 0);
  CHECK(s.text() == "Hello, ");
  CHECK(s.push(0).empty());
  CHECK(s.finish().empty());

  // A held prefix that turns out not to be a stop string is released ("Use" + "ful").
  TextStreamer u(models::decoder_for(tk), {"User:"});
  CHECK(u.push(0) == "Hel");
  CHECK(u.push(5).empty());
  CHECK(u.push(6) == "Useful");
  CHECK(!u.stopped());
  // And at the end of the stream a partial match is released too.
  CHECK(u.push(2).empty());
  CHECK(u.finish() == "Us");
  CHECK(u.text() == "HelUsefulUs");

  // Stop strings with multi-byte characters, matched across byte tokens.
  TextStreamer v(models::decoder_for(tk), {"\xC3\xA9"});
  CHECK(v.push(0) == "Hel");
  CHECK(v.push(7).empty());
  CHECK(v.push(8).empty());
  CHECK(v.stopped());
  CHECK(v.text() == "Hel");
  CHECK_THROWS_AS(TextStreamer(models::decoder_for(tk), {""}), ArgumentError);
}

TEST_CASE("TextStreamer on the llama-2 GGUF vocabulary: byte-fallback pieces never split a code point",
          "[generate][stream][gguf]") {
  const std::string path = test::require(test::models_dir() + "/llama-2-tiny-random/llama-2-tiny-random.gguf",
                                         "llama-2-tiny-random.gguf");
  const auto tk = tokenizer::load_tokenizer(path);
  const auto byte = [](int b) { return static_cast<std::int32_t>(3 + b); };  // <0x00>..<0xFF> are ids 3..258
  const auto* spm = dynamic_cast<const tokenizer::SpmTokenizer*>(tk.get());
  REQUIRE(spm != nullptr);
  REQUIRE(spm->token(byte(0xC3)).text == "<0xC3>");
  // BOS, "▁The" etc. from the encoder, then é (C3 A9), 🙂 (F0 9F 99 82) and 中 (E4 B8 AD) spelled in byte pieces.
  std::vector<std::int32_t> ids = tk->encode("The cafe");
  for (int b : {0xC3, 0xA9, 0x20, 0xF0, 0x9F, 0x99, 0x82, 0xE4, 0xB8, 0xAD}) ids.push_back(byte(b));
  const auto tail = tk->encode("is open", false);  // "▁is ▁open"
  ids.insert(ids.end(), tail.begin(), tail.end());
  const std::vector<std::int32_t> context(ids.begin(), ids.begin() + 1);  // BOS
  TextStreamer s(models::decoder_for(*tk), {}, context);
  std::string all;
  for (std::size_t i = 1; i < ids.size(); ++i) {
    const std::string d = s.push(ids[i]);
    INFO("token " << i << " delta '" << d << "'");
    CHECK(complete_utf8(d));
    all += d;
  }
  all += s.finish();
  CHECK(all == tk->decode(ids));
  CHECK(all == "The cafe\xC3\xA9 \xF0\x9F\x99\x82\xE4\xB8\xAD is open");
}

TEST_CASE("Session: a new turn prefills only its tokens and matches a from-scratch run", "[generate][session]") {
  Llama m = tiny_model();
  models::Session<Llama> s(m);
  CHECK(s.capacity() == 64);  // the config's max_target_length
  const std::vector<std::int32_t> turn1{1, 5, 9, 13, 2, 40, 41, 7, 8, 22};
  const std::vector<std::int32_t> turn2{3, 17, 29, 31, 11, 6};
  models::GenerateOptions opt;
  opt.max_new_tokens = 5;
  const auto r1 = s.generate(turn1, opt);
  REQUIRE(r1.tokens[0].size() == 5);
  CHECK(r1.prompt_tokens == 10);
  CHECK(s.forwarded_tokens() == 10 + 4);  // the prompt, then one per decode step; the last token waits
  CHECK(s.length() == 15);
  CHECK(s.cached() == 14);

  // Turn 2: only turn 1's last token and the 6 new ones go through the model; the logits equal a fresh forward of
  // the whole conversation.
  s.append(turn2);
  std::int64_t ran = 0;
  const std::vector<float> l2 = s.logits(&ran);
  CHECK(ran == 1 + 6);
  CHECK(s.forwarded_tokens() == 14 + 7);
  std::vector<std::int32_t> conv = turn1;
  conv.insert(conv.end(), r1.tokens[0].begin(), r1.tokens[0].end());
  conv.insert(conv.end(), turn2.begin(), turn2.end());
  CHECK(s.tokens() == conv);
  expect_logits_close(l2, fresh_last_logits(m, conv));

  // Generating from the session equals generating from scratch on the whole conversation (seeded sampling).
  opt.sampling.temperature = 1.0f;
  opt.sampling.seed = 3;
  opt.max_new_tokens = 6;
  const auto r2 = s.generate({}, opt);
  CHECK(r2.prompt_tokens == 0);  // the logits were already there
  const auto fresh = models::generate(m, {conv}, opt);
  CHECK(r2.tokens[0] == fresh.tokens[0]);

  // Rewind to the end of turn 1's prompt and generate again: the same as a fresh run of turn 1.
  s.rewind(static_cast<std::int64_t>(turn1.size()));
  CHECK(s.length() == 10);
  CHECK(s.cached() == 10);
  const auto before = s.forwarded_tokens();
  const auto r3 = s.generate({}, opt);
  CHECK(r3.prompt_tokens == 1);  // the last prompt token is run again for its logits
  CHECK(s.forwarded_tokens() - before == 1 + 5);
  CHECK(r3.tokens[0] == models::generate(m, {turn1}, opt).tokens[0]);

  // sync() keeps the common prefix and feeds the rest.
  std::vector<std::int32_t> other = turn1;
  other.resize(7);
  other.push_back(60);
  CHECK(s.sync(other) == 7);
  CHECK(s.tokens() == other);
  expect_logits_close(s.logits(&ran), fresh_last_logits(m, other));
  CHECK(ran == 1);

  CHECK_THROWS_AS(s.rewind(100), ArgumentError);
  CHECK_THROWS_AS(s.append(std::vector<std::int32_t>(60, 1)), ArgumentError);
}

TEST_CASE("generate: stop strings, stop token sets, cancellation and log-probabilities", "[generate]") {
  Llama m = tiny_model(11);
  // Ids 0..31 decode to a letter (some with a space), ids 32..63 to the lead (even) or continuation (odd) byte of "é".
  ToyTokenizer tk;
  for (int i = 0; i < 64; ++i) {
    tk.pieces.push_back(i >= 32 ? std::string(i % 2 ? "\xA9" : "\xC3")
                                : std::string(1, static_cast<char>('a' + i % 26)) + (i % 3 ? "" : " "));
  }
  const std::vector<std::int32_t> prompt{1, 4, 9, 16, 25};
  models::GenerateOptions opt;
  opt.max_new_tokens = 24;
  opt.sampling.temperature = 1.0f;
  opt.sampling.seed = 5;
  opt.decode = models::decoder_for(tk);
  opt.logprobs = true;
  opt.top_logprobs = 3;
  // Random tokens may leave stray bytes of "é" (passed through as decode gives them); no delta boundary may fall
  // inside a well-formed character.
  std::string streamed;
  std::vector<std::size_t> cuts;
  opt.on_text = [&](std::int64_t, std::string_view d) {
    streamed += d;
    cuts.push_back(streamed.size());
    return true;
  };
  // The first seed (from 5) whose sample holds a well-formed "é" spelled in two tokens: the case the check is about.
  models::GenerateResult full;
  std::string text;
  for (int tries = 0; tries < 32 && text.find("\xC3\xA9") == std::string::npos; ++tries) {
    streamed.clear();
    cuts.clear();
    full = models::generate(m, {prompt}, opt);
    std::vector<std::int32_t> seq{prompt.back()};
    seq.insert(seq.end(), full.tokens[0].begin(), full.tokens[0].end());
    text = tk.decode(seq).substr(tk.decode({prompt.back()}).size());
    if (text.find("\xC3\xA9") == std::string::npos) ++opt.sampling.seed;
  }
  const auto& toks = full.tokens[0];
  REQUIRE(toks.size() == 24);
  CHECK(full.finish[0] == FinishReason::length);
  std::vector<std::int32_t> anchor_gen{prompt.back()};
  anchor_gen.insert(anchor_gen.end(), toks.begin(), toks.end());
  CHECK(full.text[0] == text);
  CHECK(streamed == text);
  for (std::size_t c : cuts) CHECK(!inside_character(text, c));
  REQUIRE(text.find("\xC3\xA9") != std::string::npos);

  // Log-probabilities: log-softmax of the logits of a full-sequence forward over prompt + generated tokens.
  std::vector<std::int32_t> seq = prompt;
  seq.insert(seq.end(), toks.begin(), toks.end());
  const Tensor<float, 3> l = m.forward(row(seq));
  REQUIRE(full.logprobs[0].size() == toks.size());
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const std::int64_t t = static_cast<std::int64_t>(prompt.size() + i) - 1, V = l.dim(2);
    double mx = -1e30, z = 0;
    for (std::int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(l(0, t, v)));
    for (std::int64_t v = 0; v < V; ++v) z += std::exp(l(0, t, v) - mx);
    const auto& lp = full.logprobs[0][i];
    CHECK(lp.token == toks[i]);
    CHECK(lp.logprob == Approx(l(0, t, toks[i]) - mx - std::log(z)).margin(2e-4));
    REQUIRE(lp.top.size() == 3);
    CHECK(lp.top[0].second >= lp.top[1].second);
    CHECK(lp.top[1].second >= lp.top[2].second);
    CHECK(lp.top[0].second == Approx(l(0, t, lp.top[0].first) - mx - std::log(z)).margin(2e-4));
    CHECK(lp.top[0].second >= lp.logprob);
  }

  // A stop string spanning the 6th and 7th generated tokens' text: the text ends before its first occurrence and
  // generation stops at the token that completes it.
  const std::string p6 = tk.decode({toks[5]}), p7 = tk.decode({toks[6]});
  const std::string stop = p6.substr(p6.size() - 1) + p7.substr(0, 1);
  const std::size_t at = text.find(stop);
  REQUIRE(at != std::string::npos);
  models::GenerateOptions so = opt;
  streamed.clear();
  so.stop_strings = {stop};
  const auto cut = models::generate(m, {prompt}, so);
  CHECK(cut.finish[0] == FinishReason::stop_string);
  CHECK(cut.text[0] == text.substr(0, at));
  CHECK(streamed == text.substr(0, at));
  // The stopping token is the first whose text reaches the end of the match.
  std::size_t need = 0;
  for (std::string acc; need < toks.size(); ++need) {
    acc = tk.decode(std::vector<std::int32_t>(anchor_gen.begin(), anchor_gen.begin() + static_cast<std::ptrdiff_t>(need) + 2))
              .substr(tk.decode({prompt.back()}).size());
    if (acc.size() >= at + stop.size()) break;
  }
  CHECK(cut.tokens[0] == std::vector<std::int32_t>(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(need) + 1));

  // A stop token set: the row ends at the first generated token in the set (kept in tokens, its text not emitted).
  models::GenerateOptions st = opt;
  st.stop_tokens = {toks[9], toks[4]};
  std::size_t first = 0;
  while (toks[first] != toks[9] && toks[first] != toks[4]) ++first;
  const auto r = models::generate(m, {prompt}, st);
  CHECK(r.finish[0] == FinishReason::stop_token);
  CHECK(r.tokens[0] == std::vector<std::int32_t>(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  std::vector<std::int32_t> upto(anchor_gen.begin(), anchor_gen.begin() + static_cast<std::ptrdiff_t>(first) + 1);
  CHECK(r.text[0] == tk.decode(upto).substr(tk.decode({prompt.back()}).size()));

  // on_text returning false cancels the row.
  models::GenerateOptions cc = opt;
  int calls = 0;
  cc.on_text = [&](std::int64_t, std::string_view) { return ++calls < 2; };
  const auto c = models::generate(m, {prompt}, cc);
  CHECK(c.finish[0] == FinishReason::cancelled);
  CHECK(calls == 2);
  CHECK(c.tokens[0].size() < toks.size());

  models::GenerateOptions nodec;
  nodec.stop_strings = {"x"};
  CHECK_THROWS_AS(models::generate(m, {prompt}, nodec), ArgumentError);
}

TEST_CASE("maxtext chat: two turns from stdin on stories260K, the second prefilling only new tokens",
          "[generate][session][cli][stories260K]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.bin", "stories260K");
  {
    std::ofstream("chat1.txt") << "Tell me a story about a cat.\n";
    std::ofstream("chat2.txt") << "Tell me a story about a cat.\nAnd the dog?\n";
  }
  const std::string chat = ::maxtext::test::cli_path() + " chat --threads 1 --weights " + dir + "/stories260K.bin --tokenizer " +
                           dir + "/tok512.bin --max-new-tokens 24 --system \"Be kind.\"";
  const std::string out = run_command(chat + " < chat2.txt 2>&1");
  INFO(out);
  CHECK(out.find("note: no chat template") != std::string::npos);
  // Per-turn statistics: "[turn N: prefilled P new tokens of L, ...]".
  auto stat = [&](int turn, const char* key) {
    const std::string tag = "[turn " + std::to_string(turn) + ": ";
    const auto p = out.find(tag);
    REQUIRE(p != std::string::npos);
    const auto k = out.find(key, p);
    REQUIRE(k != std::string::npos);
    return std::stol(out.substr(k + std::string(key).size()));
  };
  const long pre1 = stat(1, "prefilled "), len1 = stat(1, " of ");
  const long pre2 = stat(2, "prefilled "), len2 = stat(2, " of ");
  CHECK(pre1 == len1);  // nothing cached before turn 1
  CHECK(len2 > len1);
  // Turn 2 reuses at least turn 1's prompt from the cache (all but its last token, which may be run again).
  CHECK(pre2 <= len2 - len1 + 1);
  CHECK(out.find("[turn 3: ") == std::string::npos);

  // Turn 2's answer equals a from-scratch `maxtext generate` of the whole conversation in the documented plain format.
  const std::string one = run_command(chat + " < chat1.txt 2>/dev/null");
  const std::string two = run_command(chat + " < chat2.txt 2>/dev/null");
  REQUIRE(one.size() >= 1);
  REQUIRE(two.rfind(one, 0) == 0);
  const std::string answer1 = one.substr(0, one.size() - 1), answer2 = two.substr(one.size(), two.size() - one.size() - 1);
  CHECK(!answer2.empty());
  std::string a1 = answer1;
  while (!a1.empty() && (a1.front() == ' ' || a1.front() == '\n')) a1.erase(0, 1);
  while (!a1.empty() && (a1.back() == ' ' || a1.back() == '\n')) a1.pop_back();
  const std::string conv = "system: Be kind.\nuser: Tell me a story about a cat.\nassistant: " + a1 +
                           "\nuser: And the dog?\nassistant:";
  std::string quoted;
  for (char c : conv) {
    if (c == '"' || c == '\\' || c == '$' || c == '`') quoted += '\\';
    quoted += c;
  }
  const std::string gen = run_command(::maxtext::test::cli_path() + " generate --threads 1 --weights " + dir +
                                      "/stories260K.bin --tokenizer " + dir +
                                      "/tok512.bin --max-new-tokens 24 --stop '\\nuser:' --prompt \"" + quoted + "\"");
  INFO(gen);
  REQUIRE(gen.rfind(conv, 0) == 0);
  const auto end = gen.find("\ntokens[0]: ");
  REQUIRE(end != std::string::npos);
  CHECK(gen.substr(conv.size(), end - conv.size()) == answer2);
}

TEST_CASE("maxtext chat renders the model's chat template (Qwen3 tokenizer.json + tokenizer_config.json)",
          "[generate][session][cli][chat_template]") {
  const std::string tok = test::models_dir() + "/tokenizers/qwen3";
  test::require(tok + "/tokenizer_config.json", "the Qwen3 tokenizer");
  // A small seeded model of the Qwen3 architecture with the real vocabulary size.
  const std::string model = " --config " + test::config_dir() + "/models/qwen3-0.6b.yml base_num_decoder_layers=1 "
                            "base_emb_dim=32 base_num_query_heads=2 base_num_kv_heads=1 head_dim=16 base_mlp_dim=64 "
                            "dtype=float32 --threads 1 --seed 3 --tokenizer " + tok;
  std::ofstream("chat_tpl.txt") << "Hello there!\nAnd again?\n";
  const std::string out = run_command(::maxtext::test::cli_path() + " chat" + model +
                                      " --system \"Be brief.\" --max-new-tokens 3 < chat_tpl.txt 2>&1");
  INFO(out);
  CHECK(out.find("note: no chat template") == std::string::npos);
  const auto p = out.find("[turn 1: prefilled ");
  REQUIRE(p != std::string::npos);
  const long len1 = std::stol(out.substr(out.find(" of ", p) + 4));
  // Turn 1's prompt is the template's rendering of [system, user] with the generation prompt, encoded without added
  // special tokens: the same ids `maxtext template` + `maxtext tokenize --add-special off` give.
  std::ofstream("chat_tpl.json") << R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there!"}])";
  const std::string rendered = run_command(::maxtext::test::cli_path() + " template --tokenizer " + tok +
                                           " --messages chat_tpl.json --add-generation-prompt on");
  CHECK(rendered.find("<|im_start|>assistant\n") != std::string::npos);
  std::ofstream("chat_tpl_prompt.txt") << rendered;
  const std::string ids = run_command(::maxtext::test::cli_path() + " tokenize --tokenizer " + tok +
                                      " --add-special off --text-file chat_tpl_prompt.txt");
  CHECK(static_cast<long>(std::count(ids.begin(), ids.end(), ',')) + 1 == len1);
  CHECK(out.find("[turn 2: ") != std::string::npos);
}

TEST_CASE("eos_token_id from config.json / generation_config.json (int or list) and GGUF", "[generate][eos]") {
  CHECK(io::eos_ids_from_json(nlohmann::json::parse(R"({"eos_token_id": 2})"), "x").size() == 1);
  CHECK(io::eos_ids_from_json(nlohmann::json::parse(R"({"eos_token_id": [128001, 128009]})"), "x") ==
        std::vector<std::int32_t>{128001, 128009});
  CHECK(io::eos_ids_from_json(nlohmann::json::parse(R"({"eos_token_id": null})"), "x").empty());
  CHECK(io::eos_ids_from_json(nlohmann::json::parse(R"({"bos_token_id": 1})"), "x").empty());
  CHECK_THROWS_AS(io::eos_ids_from_json(nlohmann::json::parse(R"({"eos_token_id": "2"})"), "x"), IoError);
  CHECK_THROWS_AS(io::eos_ids_from_json(nlohmann::json::parse(R"({"eos_token_id": [1, -3]})"), "x"), IoError);
  // Files beside Hugging Face weights: the union of both.
  std::filesystem::create_directories("hf");
  std::ofstream("hf/model.safetensors") << "";
  std::ofstream("hf/config.json") << R"({"model_type": "llama", "eos_token_id": 128001})";
  CHECK(io::read_eos_token_ids("hf/model.safetensors") == std::vector<std::int32_t>{128001});
  std::ofstream("hf/generation_config.json") << R"({"eos_token_id": [128001, 128008, 128009]})";
  CHECK(io::read_eos_token_ids("hf/model.safetensors") == std::vector<std::int32_t>{128001, 128008, 128009});
  const std::string gguf = test::models_dir() + "/llama-2-tiny-random/llama-2-tiny-random.gguf";
  if (std::filesystem::exists(gguf)) CHECK(io::read_eos_token_ids(gguf) == std::vector<std::int32_t>{2});
}
