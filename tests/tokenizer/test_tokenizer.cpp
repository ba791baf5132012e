// Tokenizer: llama.cpp's ids for the Llama-2 vocabulary (tokenizer_examples.json), llama2.c's prompt ids for
// stories260K (reference/*.json) from both tok512.bin and the GGUF vocabulary, decoding (byte pieces, the space after
// BOS), and, where libsentencepiece is available, agreement with SentencePiece's own BPE encoder over the complete
// Llama-2 vocabulary on texts with whitespace runs, digits, CJK, emoji (byte fallback) and carriage returns.
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "maxtext/io/gguf.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"
#include "support/piece_checks.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {
nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}
std::string llama2_gguf() {
  return test::require(test::models_dir() + "/llama-2-tiny-random/llama-2-tiny-random.gguf", "llama-2-tiny-random.gguf");
}

// Texts covering what llama.cpp's SPM handling must get right.
const std::vector<std::string> kHardTexts = {
    "Hello world",
    "  leading and trailing spaces  ",
    "whitespace   runs\t\t and    more     spaces",
    "digits 0123456789 3.14159 2024-01-01 1,000,000",
    "CJK: 你好，世界！日本語のテキストです。한국어",
    "emoji 😀👍🏽 🚀 and rare letters 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "carriage\rreturn\r\nwindows\n\rmixed",
    "<s> and </s> are text here, <unk> too",
    "a",
    " ",
    "\n",
    "ÀÉÎÕÜ ß ñ ç ø å æ œ",
    "don't won't it's we'll they're I'm",
    "x=y+z*(a-b)/c; // code {braces} [brackets] <angle>",
};
}  // namespace

TEST_CASE("tokenizer: llama.cpp's ids for the Llama-2 vocabulary (tokenizer_examples.json)", "[tokenizer]") {
  const std::string gguf = llama2_gguf();
  const auto tk = tokenizer::SpmTokenizer::from_gguf(io::read_gguf(gguf));
  CHECK(tk.vocab_size() == 32000);
  CHECK(tk.bos() == 1);
  CHECK(tk.eos() == 2);
  CHECK(tk.add_bos());
  CHECK(tk.add_space_prefix());
  const auto cases = read_json(test::models_dir() + "/llama-2-tiny-random/tokenizer_examples.json");
  REQUIRE(cases.size() == 4);
  for (const auto& c : cases) {
    const std::string prompt = c["prompt"].get<std::string>();
    INFO(c["name"].get<std::string>());
    const auto ids = tk.encode(prompt);
    CHECK(std::vector<int>(ids.begin(), ids.end()) == c["ids"].get<std::vector<int>>());
    // llama.cpp's detokenisation keeps the space the encoder inserted; ours drops it after BOS (SentencePiece).
    const std::string detok = c["detok"].get<std::string>();
    CHECK(tk.decode(ids) == (detok.empty() ? detok : detok.substr(1)));
    CHECK(tk.decode(ids) == prompt);
  }
  // Without BOS, the dummy prefix still applies; with parse_special "<s>" becomes BOS.
  CHECK(tk.encode("Hello", false) == std::vector<std::int32_t>{15043});
  CHECK(tk.encode_ex("<s>Hello", false, true) == std::vector<std::int32_t>{1, 15043});
  CHECK(tk.encode_ex("<s>Hello", false, false).front() != 1);
}

TEST_CASE("tokenizer: llama2.c's prompt ids and texts for stories260K, from tok512.bin and from the GGUF", "[tokenizer]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/tok512.bin", "stories260K");
  const auto bin = tokenizer::open_tokenizer(dir + "/tok512.bin", 512);
  const auto gguf = tokenizer::open_tokenizer(dir + "/stories260K.gguf");
  for (const char* name : {"once_upon_a_time", "the_cat"}) {
    INFO(name);
    const auto r = read_json(dir + "/reference/" + name + ".json");
    const std::string prompt = r["prompt"].get<std::string>();
    const auto want = r["prompt_ids"].get<std::vector<int>>();
    const auto a = bin->encode(prompt);
    const auto b = gguf->encode(prompt);
    CHECK(std::vector<int>(a.begin(), a.end()) == want);
    CHECK(std::vector<int>(b.begin(), b.end()) == want);
    std::vector<std::int32_t> seq(want.begin(), want.end());
    for (int id : r["greedy_ids"].get<std::vector<int>>()) seq.push_back(id);
    CHECK(bin->decode(seq) == r["full_text"].get<std::string>());
    CHECK(gguf->decode(seq) == r["full_text"].get<std::string>());
    // greedy_text: the continuation decoded on its own keeps its leading space.
    const std::vector<std::int32_t> cont(seq.begin() + static_cast<std::ptrdiff_t>(want.size()), seq.end());
    CHECK(bin->decode(cont) == r["greedy_text"].get<std::string>());
  }
  // The two vocabularies are the same: identical encodings of harder texts too.
  for (const auto& t : kHardTexts) {
    INFO(t);
    CHECK(bin->encode(t) == gguf->encode(t));
    CHECK(bin->decode(bin->encode(t)) == t);  // byte fallback makes every text round-trip
  }
  // The byte fallback: a character outside the 512 pieces becomes its UTF-8 bytes (byte b is id b + 3), after the
  // dummy-prefix space (piece 410).
  const auto e = bin->encode("\xF0\x9F\x98\x80");
  CHECK(e == std::vector<std::int32_t>{1, 410, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3});
  CHECK(bin->piece(1, 0xF0 + 3) == "\xF0");
  CHECK(bin->piece(-1, 2).empty());  // control tokens decode to nothing
}

TEST_CASE("tokenizer: predecessors with the same piece_context give every token the same piece (Llama-2, stories260K)",
          "[tokenizer][constrained]") {
  test::check_piece_context(*tokenizer::open_tokenizer(llama2_gguf()), "Llama-2 GGUF");
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/tok512.bin", "stories260K");
  test::check_piece_context(*tokenizer::open_tokenizer(dir + "/tok512.bin", 512), "stories260K tok512.bin");
}

TEST_CASE("tokenizer: round trips and properties on the Llama-2 vocabulary", "[tokenizer]") {
  const auto tk = tokenizer::SpmTokenizer::from_gguf(io::read_gguf(llama2_gguf()));
  for (const auto& t : kHardTexts) {
    INFO(t);
    const auto ids = tk.encode(t);
    CHECK(ids.front() == 1);
    CHECK(tk.decode(ids) == t);
  }
  // Known llama.cpp encodings: "\n" alone is the dummy-prefix space then the newline byte; digits split one by one.
  CHECK(tk.encode("\n") == std::vector<std::int32_t>{1, 29871, 13});
  CHECK(tk.encode("2024") == std::vector<std::int32_t>{1, 29871, 29906, 29900, 29906, 29946});
  CHECK_THROWS_AS(tk.piece(-1, 32000), ArgumentError);
}

#if defined(MAXTEXT_WITH_SENTENCEPIECE)
namespace {
/// Minimal protobuf writer for a SentencePiece ModelProto (field numbers of sentencepiece_model.proto).
struct Proto {
  std::string out;
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire) { varint(static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire)); }
  void bytes(int field, const std::string& s) {
    tag(field, 2);
    varint(s.size());
    out += s;
  }
  void integer(int field, std::int64_t v) {
    tag(field, 0);
    varint(static_cast<std::uint64_t>(v));
  }
  void f32(int field, float v) {
    tag(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
  }
};
std::string model_proto_from_gguf(const io::GgufFile& g) {
  const auto& toks = g.at("tokenizer.ggml.tokens").strings;
  const auto& scores = g.at("tokenizer.ggml.scores").floats;
  const auto& types = g.at("tokenizer.ggml.token_type").ints;
  Proto m;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    Proto p;
    p.bytes(1, toks[i]);
    p.f32(2, static_cast<float>(scores[i]));
    p.integer(3, types[i]);  // NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6: same numbering
    m.bytes(1, p.out);
  }
  Proto trainer;
  trainer.integer(3, 2);    // model_type BPE
  trainer.integer(35, 1);   // byte_fallback
  trainer.integer(40, 0);   // unk_id
  trainer.integer(41, 1);   // bos_id
  trainer.integer(42, 2);   // eos_id
  trainer.integer(43, -1);  // pad_id
  m.bytes(2, trainer.out);
  Proto norm;
  norm.bytes(1, "identity");
  norm.integer(3, 1);  // add_dummy_prefix
  norm.integer(4, 0);  // remove_extra_whitespaces
  norm.integer(5, 1);  // escape_whitespaces
  m.bytes(3, norm.out);
  return m.out;
}
}  // namespace

TEST_CASE("tokenizer: agrees with libsentencepiece's BPE on the full Llama-2 vocabulary", "[tokenizer][sentencepiece]") {
  const io::GgufFile g = io::read_gguf(llama2_gguf());
  const auto tk = tokenizer::SpmTokenizer::from_gguf(g);
  sentencepiece::SentencePieceProcessor sp;
  const auto st = sp.LoadFromSerializedProto(model_proto_from_gguf(g));
  REQUIRE(st.ok());
  REQUIRE(sp.GetPieceSize() == 32000);
  auto texts = kHardTexts;
  for (const auto& c : read_json(test::models_dir() + "/llama-2-tiny-random/tokenizer_examples.json")) {
    texts.push_back(c["prompt"].get<std::string>());
  }
  for (const auto& t : texts) {
    if (t.empty()) continue;
    INFO(t);
    std::vector<int> ref;
    REQUIRE(sp.Encode(t, &ref).ok());
    const auto ours = tk.encode(t, false);
    CHECK(std::vector<int>(ours.begin(), ours.end()) == ref);
  }
}
#endif
