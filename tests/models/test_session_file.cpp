// Session files (models/session_file.hpp, Session::save / load, AnySession, `maxtext chat --session`): a
// conversation saved, then loaded by another model object with the same weights, goes on exactly as the original
// (bit-identical log-probabilities of every generated token, and only the new turn prefilled); damaged, foreign and
// mismatched files are refused by name and leave the session as it was.
//
// Models: seeded fixture configs of the blocks whose caches differ in kind: llama2 (keys and values; float32 and
// bfloat16), deepseek (MLA's latent cache, Engram's host history), qwen3_next (Gated DeltaNet's recurrent states),
// deepseek4 (compressed blocks), gemma3 (soft-token rows of a picture); then every other block's fixture config. The CLI test reads stories260K from
// ../shared (skipped when absent).
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "maxtext/families/load.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_blocks.hpp"
#include "maxtext/models/session_file.hpp"
#include "maxtext_blocks_built.hpp"
#include "support/command.hpp"
#include "support/fixture_config.hpp"
#include "support/fixture_models.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

using test::greedy_with_logprobs;
using test::require_same_generation;

std::unique_ptr<models::AnyModel> make_model(const std::string& name, std::uint64_t seed,
                                             const std::string& dtype = "float32") {
  return test::make_fixture_model(name, seed, dtype);
}

std::vector<std::int32_t> ids(std::int64_t n, std::int64_t vocab, std::int32_t salt) {
  return test::salted_ids(n, vocab, salt);
}

std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void write_bytes(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// Recomputes the trailing CRC-32 after an edit (so that what is tested is the check behind it).
void fix_crc(std::vector<std::byte>& b) {
  const std::size_t body = b.size() - 4;
  const auto c = static_cast<std::uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(body)));
  std::memcpy(b.data() + body, &c, 4);
}

/// A session file's JSON header (magic 8 bytes, version 4, header length 8, then the header).
nlohmann::json header_of(const std::vector<std::byte>& file) {
  std::uint64_t hl = 0;
  std::memcpy(&hl, file.data() + 12, 8);
  return nlohmann::json::parse(std::string(reinterpret_cast<const char*>(file.data()) + 20, hl));
}

/// A file made of a header written by hand and `payload` bytes, with a right CRC.
std::vector<std::byte> handmade(const nlohmann::json& header, std::size_t payload) {
  const std::string h = header.dump();
  std::vector<std::byte> b;
  auto put = [&](const void* p, std::size_t n) {
    const auto* q = static_cast<const std::byte*>(p);
    b.insert(b.end(), q, q + n);
  };
  put("MXSESS\r\n", 8);
  const std::uint32_t v = models::session_file::kVersion;
  const std::uint64_t hl = h.size();
  put(&v, 4);
  put(&hl, 8);
  put(h.data(), h.size());
  b.resize(b.size() + payload + 4);
  fix_crc(b);
  return b;
}

/// A session of `m` after one greedy turn, saved to `path`.
std::unique_ptr<models::AnySession> saved_after_one_turn(models::AnyModel& m, const std::string& path) {
  auto s = m.new_session(64);
  s->generate(ids(9, m.config().vocab_size, 3), greedy_with_logprobs(6));
  s->save(path);
  return s;
}

/// Save after one turn, go on in the original and in a session loaded by a second model with the same weights.
void round_trip(const std::string& fixture, const std::string& dtype = "float32") {
  INFO(fixture << " " << dtype);
  const auto a = make_model(fixture, 11, dtype), b = make_model(fixture, 11, dtype);
  const std::int64_t V = a->config().vocab_size;
  const auto turn1 = ids(9, V, 3), turn2 = ids(5, V, 17);
  const std::string path = "session_" + fixture + "_" + dtype + ".mxs";
  auto sa = a->new_session(64);
  const auto r1 = sa->generate(turn1, greedy_with_logprobs(6));
  sa->save(path, "{\"note\": \"app text\"}");
  const auto conversation = sa->tokens();
  const auto ra = sa->generate(turn2, greedy_with_logprobs(7));

  auto sb = b->new_session(64);
  CHECK(sb->load(path) == "{\"note\": \"app text\"}");
  CHECK(sb->tokens() == conversation);
  const auto rb = sb->generate(turn2, greedy_with_logprobs(7));
  require_same_generation(ra, rb);
  // Only the new turn (and the answer's last token, never run) is prefilled: the rest came from the file.
  CHECK(rb.prompt_tokens == static_cast<std::int64_t>(turn2.size()) + 1);
  CHECK(ra.prompt_tokens == rb.prompt_tokens);
  (void)r1;
  std::filesystem::remove(path);
}

}  // namespace

TEST_CASE("session files: a loaded conversation goes on bit for bit, prefilling only the new turn",
          "[models][session][session_file]") {
  round_trip("llama2_model");
  round_trip("llama2_model", "bfloat16");
  round_trip("deepseek_model");
  round_trip("deepseek_engram_model");
  round_trip("qwen3_next_model");
  round_trip("deepseek4_model");
}

TEST_CASE("session files: every other decoder block's cache round-trips too", "[models][session][session_file]") {
  for (const std::string& f : test::other_block_fixtures()) {
    round_trip(f);
  }
}

TEST_CASE("session files: the restored cache is what the next turn reads (a changed key changes the answer)",
          "[models][session][session_file]") {
  const auto a = make_model("llama2_model", 11);
  const std::int64_t V = a->config().vocab_size;
  saved_after_one_turn(*a, "control.mxs");
  auto bytes = file_bytes("control.mxs");
  // The decoded image, one cached key value of layer 0 changed, written back through the encoder.
  models::session_file::Layout L;
  {
    auto probe = a->new_session(64);
    probe->save("layout.mxs");  // an empty conversation: only its layout is used
    const auto raw = file_bytes("layout.mxs");
    const auto h = header_of(raw);
    const auto& lj = h.at("layout");
    L.decoder_block = lj.at("decoder_block");
    L.activations = lj.at("activations");
    L.cache_type = lj.at("cache_type");
    L.vocab_size = lj.at("vocab_size");
    L.emb_dim = lj.at("emb_dim");
    L.buffers = lj.at("buffers").get<std::vector<std::vector<std::int64_t>>>();
    L.states = lj.at("states").get<std::vector<std::vector<std::int64_t>>>();
  }
  auto im = models::session_file::decode(bytes, "control.mxs", L, 64);
  REQUIRE(im.cached > 2);
  float* k = reinterpret_cast<float*>(im.layers[0].buffers[0].data());
  k[1] += 4.0f;  // token 0's key, one coordinate
  models::session_file::write("control_changed.mxs", im);
  const auto turn2 = ids(5, V, 17);
  auto s1 = a->new_session(64), s2 = a->new_session(64);
  s1->load("control.mxs");
  s2->load("control_changed.mxs");
  const auto r1 = s1->generate(turn2, greedy_with_logprobs(4)), r2 = s2->generate(turn2, greedy_with_logprobs(4));
  CHECK(r1.logprobs[0][0].logprob != r2.logprobs[0][0].logprob);
  for (const char* f : {"control.mxs", "control_changed.mxs", "layout.mxs"}) std::filesystem::remove(f);
}

TEST_CASE("session files: pictures' soft-token rows are saved with their tokens", "[models][session][session_file]") {
  const auto a = make_model("gemma3_mm_model", 5), b = make_model("gemma3_mm_model", 5);
  const std::int64_t V = a->config().vocab_size, D = a->config().emb_dim;
  // Nine tokens, of which 2..5 are one picture's soft tokens (rows made up: the decoder takes any).
  const auto prompt = ids(9, V, 1);
  Tensor<std::int32_t, 2> mask({1, 9});
  Tensor<float, 2> rows({4, D});
  for (std::int64_t i = 0; i < 9; ++i) mask(0, i) = i >= 2 && i < 6 ? 1 : 0;
  for (std::int64_t i = 0; i < rows.size(); ++i) rows.data()[i] = static_cast<float>(((i * 37) % 17) - 8) / 8.0f;
  auto sa = a->new_session(64);
  sa->sync(prompt, &mask, &rows);
  sa->generate({}, greedy_with_logprobs(3));
  sa->save("pictures.mxs");
  const auto turn2 = ids(4, V, 5);
  const auto ra = sa->generate(turn2, greedy_with_logprobs(5));
  auto sb = b->new_session(64);
  sb->load("pictures.mxs");
  const auto rb = sb->generate(turn2, greedy_with_logprobs(5));
  require_same_generation(ra, rb);
  CHECK(rb.prompt_tokens == 5);
  // The rows came back: a sync with the same picture keeps the cache, another picture goes back to its start.
  auto sc = b->new_session(64);
  sc->load("pictures.mxs");
  std::vector<std::int32_t> whole = sc->tokens();
  Tensor<std::int32_t, 2> wmask({1, static_cast<std::int64_t>(whole.size())});
  for (std::int64_t i = 0; i < wmask.dim(1); ++i) wmask(0, i) = i >= 2 && i < 6 ? 1 : 0;
  CHECK(sc->sync(whole, &wmask, &rows) == static_cast<std::int64_t>(whole.size()));
  Tensor<float, 2> other = rows;
  other(1, 0) += 1.0f;
  CHECK(sc->sync(whole, &wmask, &other) == 2);
  std::filesystem::remove("pictures.mxs");
}

TEST_CASE("session files: damaged, foreign and mismatched files are refused by name, the session unchanged",
          "[models][session][session_file][errors]") {
  const auto a = make_model("llama2_model", 11);
  const std::int64_t V = a->config().vocab_size;
  const auto s = saved_after_one_turn(*a, "good.mxs");
  const auto good = file_bytes("good.mxs");
  auto target = a->new_session(64);
  target->generate(ids(4, V, 8), greedy_with_logprobs(2));
  const auto before = target->tokens();
  auto refused = [&](const std::vector<std::byte>& bytes, const std::string& what) {
    write_bytes("bad.mxs", bytes);
    CHECK_THROWS_WITH(target->load("bad.mxs"), Catch::Contains(what));
    CHECK(target->tokens() == before);
  };

  CHECK_THROWS_WITH(target->load("no_such_file.mxs"), Catch::Contains("no_such_file.mxs"));
  auto b = good;
  b[0] = std::byte{'X'};
  refused(b, "is not a maxtext session file");
  b = good;
  b[8] = std::byte{2};
  refused(b, "has format version 2; this library reads version 1");
  b = good;
  b[b.size() / 2] ^= std::byte{0x40};
  refused(b, "is damaged: CRC-32");
  b = good;
  b.back() ^= std::byte{1};
  refused(b, "is damaged: CRC-32");
  // Every cut of the file is refused as truncated or damaged, never read past its end.
  for (std::size_t cut = 0; cut < good.size(); cut += 1 + good.size() / 61) {
    INFO("cut at " << cut);
    write_bytes("bad.mxs", std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
    CHECK_THROWS_AS(target->load("bad.mxs"), IoError);
  }
  CHECK(target->tokens() == before);

  // A header whose counts promise more than the file holds (with a right CRC): refused before anything is allocated.
  const auto header = header_of(good);
  const std::size_t payload = good.size() - 20 - header.dump().size() - 4;
  auto h = header;
  h["tokens"] = 1'000'000'000'000LL;
  refused(handmade(h, payload), "header field 'tokens' = 1000000000000 outside [0, ");
  h = header;
  h["cached"] = static_cast<std::int64_t>(h["tokens"]) + 1;
  refused(handmade(h, payload), "header field 'cached' = ");
  h = header;
  h["layout"]["buffers"][1][0] = 12345;
  refused(handmade(h, payload), "layer 1 KV widths [12345");
  h = header;
  h["layout"]["decoder_block"] = "gemma3";
  refused(handmade(h, payload), "decoder_block gemma3 in the file, llama2 in this model");
  h = header;
  h.erase("probe");
  refused(handmade(h, payload), "the header has no 'probe'");
  refused(handmade(header, payload + 8), "the header describes");
  refused(handmade(nlohmann::json::array({1, 2}), payload), "format is not maxtext-session");
  h = header;
  h["segments"] = "yes";
  refused(handmade(h, payload), "header field 'segments' has the wrong type");

  // Another architecture, other weights, a session too small.
  Config c3 = test::fixture_model_config("llama2_model");
  c3.base_num_decoder_layers = 3;
  c3.derive();
  auto three = models::make_built_any_model(c3, {}, MAXTEXT_BLOCKS_BUILT);
  three->init(11);
  CHECK_THROWS_WITH(three->new_session(64)->load("good.mxs"), Catch::Contains("cached layers 2 in the file, 3 in this model"));
  const auto other = make_model("llama2_model", 12);
  auto so = other->new_session(64);
  CHECK_THROWS_WITH(so->load("good.mxs"), Catch::Contains("was saved with other weights"));
  CHECK(so->tokens().empty());
  CHECK_NOTHROW(so->load("good.mxs", /*verify=*/false));  // the caller's choice, documented
  CHECK(so->tokens() == s->tokens());
  CHECK_THROWS_WITH(a->new_session(8)->load("good.mxs"), Catch::Contains("this session's capacity is 8"));
  const auto bf = make_model("llama2_model", 11, "bfloat16");
  CHECK_THROWS_WITH(bf->new_session(64)->load("good.mxs"), Catch::Contains("activation type f32 in the file, bf16"));
  for (const char* f : {"good.mxs", "bad.mxs"}) std::filesystem::remove(f);
}

TEST_CASE("maxtext chat --session: a conversation saved after each turn goes on in a second run",
          "[models][session][session_file][cli]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.bin", "stories260K");
  std::filesystem::remove("chat_session.mxs");
  {
    std::ofstream("chat_ab.txt") << "Tell me a story about a cat.\nAnd the dog?\n";
    std::ofstream("chat_c.txt") << "Who won?\n";
    std::ofstream("chat_abc.txt") << "Tell me a story about a cat.\nAnd the dog?\nWho won?\n";
  }
  const std::string chat = test::cli_path() + " chat --threads 1 --weights " + dir + "/stories260K.bin --tokenizer " +
                           dir + "/tok512.bin --max-new-tokens 16";
  auto run = [](const std::string& cmd) { return test::run_command(cmd); };
  const std::string whole = run(chat + " < chat_abc.txt 2>/dev/null");
  const std::string first = run(chat + " --session chat_session.mxs < chat_ab.txt 2>/dev/null");
  REQUIRE(std::filesystem::exists("chat_session.mxs"));
  const std::string second = run(chat + " --session chat_session.mxs < chat_c.txt 2>&1");
  INFO(second);
  CHECK(second.find("note: restored 4 messages") != std::string::npos);
  // The third answer of one run equals the first answer of the run that restored the first two turns.
  REQUIRE(whole.rfind(first, 0) == 0);
  const std::string third = whole.substr(first.size());
  CHECK(second.find(third) != std::string::npos);
  // Its prefill is the new message only, not the whole conversation.
  const auto t = second.find("[turn 1: prefilled ");
  REQUIRE(t != std::string::npos);
  const long pre = std::stol(second.substr(t + 19));
  const long len = std::stol(second.substr(second.find(" of ", t) + 4));
  CHECK(pre < len / 2);
  CHECK_THROWS_WITH(
      [&] {
        std::ofstream("not_chat.mxs") << "this is not a session file at all\n";
        const std::string out = run(chat + " --session not_chat.mxs < chat_c.txt 2>&1; true");
        throw std::runtime_error(out);
      }(),
      Catch::Contains("is not a maxtext session file"));
  // An empty name and a directory that does not exist are refused before the model is read.
  CHECK(run(chat + " --session '' < chat_c.txt 2>&1; true").find("--session needs a file name") != std::string::npos);
  CHECK(run(chat + " --session /no/such/dir/s.mxs < chat_c.txt 2>&1; true").find("the directory /no/such/dir does not "
                                                                                 "exist") != std::string::npos);
  for (const char* f : {"chat_session.mxs", "chat_ab.txt", "chat_c.txt", "chat_abc.txt", "not_chat.mxs"}) {
    std::filesystem::remove(f);
  }
}
