// llama2.c checkpoints and tokenizer.bin: stories260K read zero-copy with the header's shapes, its weights equal to
// the GGUF conversion's bit for bit (the model README), and malformed files rejected naming the file and field.
#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/io/gguf.hpp"
#include "maxtext/io/llama2c.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {
std::string tmp_path(const std::string& name) {
  return (std::filesystem::current_path() / ("maxtext_test_llama2c_" + std::to_string(::getpid()) + "_" + name)).string();
}
std::string write_tmp(const std::string& name, const std::string& bytes) {
  const std::string p = tmp_path(name);
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
std::string header(std::vector<std::int32_t> h) { return std::string(reinterpret_cast<const char*>(h.data()), h.size() * 4); }
}  // namespace

TEST_CASE("llama2.c: stories260K.bin header and tensors equal the GGUF's bit for bit", "[io][llama2c]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.bin", "stories260K.bin");
  const io::Llama2cCheckpoint ck = io::read_llama2c(dir + "/stories260K.bin");
  const io::Llama2cHeader& h = ck.header;
  CHECK(h.version == 0);
  CHECK(h.dim == 64);
  CHECK(h.hidden_dim == 172);
  CHECK(h.n_layers == 5);
  CHECK(h.n_heads == 8);
  CHECK(h.n_kv_heads == 4);
  CHECK(h.vocab_size == 512);
  CHECK(h.seq_len == 512);
  CHECK(h.shared_classifier);
  CHECK_FALSE(ck.tensors.has("output.weight"));
  CHECK(ck.tensors.tensors.size() == 2 + 9 * 5);
  const io::GgufFile g = io::read_gguf(dir + "/stories260K.gguf");
  std::int64_t compared = 0;
  for (const auto& [name, t] : ck.tensors.tensors) {
    INFO(name);
    const AnyTensor& u = g.tensors.at(name);
    REQUIRE(t.shape == u.shape);
    REQUIRE(t.is_contiguous());
    CHECK(std::memcmp(t.data, u.data, static_cast<std::size_t>(t.numel()) * 4) == 0);
    compared += t.numel();
  }
  CHECK(compared == 260032);  // the README's parameter count
  // The GGUF's untied output.weight is a copy of the embedding.
  CHECK(std::memcmp(g.tensors.at("output.weight").data, ck.tensors.at("token_embd.weight").data, 512 * 64 * 4) == 0);
}

TEST_CASE("llama2.c: tok512.bin", "[io][llama2c]") {
  const std::string path = test::require(test::models_dir() + "/stories260K/tok512.bin", "tok512.bin");
  const io::Llama2cVocab v = io::read_llama2c_tokenizer(path, 512);
  CHECK(v.max_token_length == 7);
  REQUIRE(v.pieces.size() == 512);
  CHECK(v.pieces[0] == "<unk>");
  CHECK(v.pieces[1] == "\n<s>\n");
  CHECK(v.pieces[2] == "\n</s>\n");
  CHECK(v.pieces[3] == "<0x00>");
  CHECK(v.pieces[258] == "<0xFF>");
  CHECK(v.scores[259] == 0.0f);
  CHECK(v.scores[260] == -1.0f);
  CHECK_THROWS_WITH(io::read_llama2c_tokenizer(path, 32000), Catch::Contains("expected 32000 tokens"));
}

TEST_CASE("llama2.c: malformed checkpoints raise IoError", "[io][llama2c][malformed]") {
  // A tiny valid model: dim 4, hidden 8, 1 layer, 2 heads, 1 kv head, vocab 3, seq_len 2.
  const std::int64_t floats = 3 * 4 + 4 + 16 + 2 * 2 * 4 + 16 + 4 + 3 * 8 * 4 + 4 + 2 * 1 * 2;
  const std::string body(static_cast<std::size_t>(floats) * 4, '\0');
  const std::string ok = write_tmp("ok.bin", header({4, 8, 1, 2, 1, 3, 2}) + body);
  CHECK(io::read_llama2c(ok).tensors.has("blk.0.attn_k.weight"));
  CHECK(io::read_llama2c(ok).tensors.at("blk.0.attn_k.weight").shape == std::vector<std::int64_t>{2, 4});
  // Negative vocab: a classifier (vocab x dim) follows.
  const std::string untied = write_tmp("untied.bin", header({4, 8, 1, 2, 1, -3, 2}) + body + std::string(3 * 4 * 4, '\0'));
  CHECK(io::read_llama2c(untied).tensors.has("output.weight"));
  const std::string trunc = write_tmp("trunc.bin", header({4, 8, 1, 2, 1, 3, 2}) + body.substr(4));
  CHECK_THAT(error_of([&] { io::read_llama2c(trunc); }), Catch::Contains("trunc.bin") && Catch::Contains("file size"));
  const std::string neg = write_tmp("neg.bin", header({4, -8, 1, 2, 1, 3, 2}) + body);
  CHECK_THAT(error_of([&] { io::read_llama2c(neg); }), Catch::Contains("neg.bin") && Catch::Contains("hidden_dim"));
  const std::string heads = write_tmp("heads.bin", header({4, 8, 1, 3, 2, 3, 2}) + body);
  CHECK_THAT(error_of([&] { io::read_llama2c(heads); }), Catch::Contains("inconsistent"));
  const std::string shortf = write_tmp("short.bin", "abc");
  CHECK_THAT(error_of([&] { io::read_llama2c(shortf); }), Catch::Contains("header"));
  std::string v2 = header({0x616b3432, 2});
  v2.resize(300, '\0');
  CHECK_THAT(error_of([&] { io::read_llama2c(write_tmp("v2.bin", v2)); }), Catch::Contains("version"));
  // Huge dims cannot overflow the size computation.
  const std::string huge = write_tmp("huge.bin", header({1 << 24, 1 << 24, 1 << 24, 1 << 12, 1 << 12, 1 << 24, 1 << 24}) + body);
  CHECK_THAT(error_of([&] { io::read_llama2c(huge); }), Catch::Contains("file size"));
}

TEST_CASE("llama2.c: malformed tokenizer.bin raises IoError", "[io][llama2c][malformed]") {
  auto rec = [](float score, std::int32_t len, const std::string& s) {
    std::string r(8, '\0');
    std::memcpy(r.data(), &score, 4);
    std::memcpy(r.data() + 4, &len, 4);
    return r + s;
  };
  const std::string maxlen = header({4});
  CHECK(io::read_llama2c_tokenizer(write_tmp("tok_ok.bin", maxlen + rec(0, 2, "ab") + rec(-1, 1, "c"))).pieces.size() == 2);
  CHECK_THAT(error_of([&] { io::read_llama2c_tokenizer(write_tmp("tok_len.bin", maxlen + rec(0, 50, "ab"))); }),
             Catch::Contains("tok_len.bin") && Catch::Contains("token 0") && Catch::Contains("past the end"));
  CHECK_THAT(error_of([&] { io::read_llama2c_tokenizer(write_tmp("tok_neg.bin", maxlen + rec(0, -1, ""))); }),
             Catch::Contains("length -1"));
  CHECK_THAT(error_of([&] { io::read_llama2c_tokenizer(write_tmp("tok_rec.bin", maxlen + rec(0, 1, "a") + "xyz")); }),
             Catch::Contains("token 1") && Catch::Contains("truncated"));
  CHECK_THAT(error_of([&] { io::read_llama2c_tokenizer(write_tmp("tok_max.bin", maxlen + rec(0, 5, "abcde"))); }),
             Catch::Contains("max_token_length"));
  CHECK_THAT(error_of([&] { io::read_llama2c_tokenizer(write_tmp("tok_hdr.bin", "ab")); }), Catch::Contains("header"));
}
