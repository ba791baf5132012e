// GGUF block types (core/ggml_quants.hpp and their reading in io/gguf.hpp): every type's dequantisation equals
// gguf-py's NumPy reference (tests/reference/ggml_quants_fixtures.py -> tests/fixtures/ggml_quants/blocks.gguf) bit
// for bit, on blocks from gguf-py's quantiser and on random blocks; files mixing types per tensor load; malformed
// block tensors (inner dim not a multiple of the block, truncated data, NaN/inf scales, unsupported types) raise
// errors naming the file and the tensor.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/io/gguf.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

std::string tmp_path(const std::string& name) {
  return (std::filesystem::current_path() / ("maxtext_test_quants_" + std::to_string(::getpid()) + "_" + name)).string();
}
std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
/// Bits of every element of an f32 tensor (contiguous).
std::vector<std::uint32_t> bits_of(const AnyTensor& t) {
  REQUIRE(t.dtype == DType::f32);
  REQUIRE(t.is_contiguous());
  std::vector<std::uint32_t> out(static_cast<std::size_t>(t.numel()));
  std::memcpy(out.data(), t.data, out.size() * 4);
  return out;
}
/// `n` blocks of type `t` with every byte pseudo-random and every fp16 scale 0.5 (finite).
std::vector<std::byte> some_blocks(quant::BlockType t, std::int64_t n) {
  const quant::BlockFormat& f = quant::block_format(t);
  std::vector<std::byte> b(static_cast<std::size_t>(n * f.bytes));
  std::uint32_t s = 12345;
  for (auto& x : b) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<std::byte>(s >> 24);
  }
  for (std::int64_t k = 0; k < n; ++k) {
    for (int off : f.fp16_scales) {
      if (off < 0) continue;
      const std::uint16_t half = 0x3800;  // 0.5
      std::memcpy(b.data() + k * f.bytes + off, &half, 2);
    }
  }
  return b;
}
std::string write_file(const io::GgufWriter& w, const std::string& name) {
  const std::string p = tmp_path(name);
  w.write(p);
  return p;
}
template <class E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("ggml quants: every block type dequantises bit-exactly as gguf-py's NumPy reference", "[quant][gguf]") {
  const std::string path = test::fixtures_dir() + "/ggml_quants/blocks.gguf";
  const io::GgufFile g = io::read_gguf(path);
  std::set<std::string> seen;
  for (const auto& b : g.block_tensors) {
    INFO(b.name);
    const AnyTensor got = io::dequantize_block_tensor(b, path);
    const AnyTensor& want = g.tensors.at(b.name + ".f32");
    REQUIRE(got.shape == want.shape);
    const auto gb = bits_of(got);
    const auto wb = bits_of(want);
    std::size_t mismatches = 0, first = gb.size();
    for (std::size_t i = 0; i < gb.size(); ++i) {
      if (gb[i] != wb[i]) {
        if (mismatches++ == 0) first = i;
      }
    }
    INFO("first mismatch at " << first);
    CHECK(mismatches == 0);
    seen.insert(b.name);
  }
  // Q8_0 stays a zero-copy q8_0 tensor; its blocks decode the same through quant:: and AnyTensor::element.
  const AnyTensor& q8 = g.tensors.at("Q8_0");
  REQUIRE(q8.dtype == DType::q8_0);
  const auto want = bits_of(g.tensors.at("Q8_0.f32"));
  std::vector<float> row(static_cast<std::size_t>(q8.numel()));
  quant::dequantize_row(quant::BlockType::q8_0, q8.data, row.data(), q8.numel());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    bad += f32_bits(row[i]) != want[i];
    bad += f32_bits(static_cast<float>(q8.element(static_cast<std::int64_t>(i)))) != want[i];
  }
  CHECK(bad == 0);
  seen.insert("Q8_0");
  const std::set<std::string> all = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
                                     "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};
  CHECK(seen == all);
}

TEST_CASE("ggml quants: a file mixing block types per tensor loads, decoded or kept as blocks", "[quant][gguf]") {
  io::GgufWriter w;
  w.set("general.architecture", io::GgufValue::of_string("llama"));
  w.add_raw_tensor("blk.0.ffn_down.weight", {3, 512}, 14, some_blocks(quant::BlockType::q6_k, 6));
  w.add_raw_tensor("blk.0.ffn_up.weight", {2, 256}, 12, some_blocks(quant::BlockType::q4_k, 2));
  w.add_raw_tensor("blk.0.attn_q.weight", {4, 64}, 2, some_blocks(quant::BlockType::q4_0, 8));
  Tensor<float, 1> norm(Shape<1>{64});
  for (int i = 0; i < 64; ++i) norm.data()[i] = 1.0f + 0.01f * static_cast<float>(i);
  w.add_tensor("blk.0.attn_norm.weight", AnyTensor::from(norm));
  const std::string p = write_file(w, "mixed.gguf");
  io::GgufFile g = io::read_gguf(p);
  CHECK(g.block_tensors.size() == 3);
  CHECK(g.tensors.has("blk.0.attn_norm.weight"));
  CHECK_FALSE(g.tensors.has("blk.0.ffn_down.weight"));
  CHECK(g.tensor_shape("blk.0.ffn_down.weight") == std::vector<std::int64_t>{3, 512});
  io::dequantize_block_tensors(g);
  CHECK(g.block_tensors.empty());
  const AnyTensor& down = g.tensors.at("blk.0.ffn_down.weight");
  CHECK(down.dtype == DType::f32);
  CHECK(down.shape == std::vector<std::int64_t>{3, 512});
  // Row 1 of the Q6_K tensor is blocks 2 and 3 of the data.
  const auto blocks = some_blocks(quant::BlockType::q6_k, 6);
  std::vector<float> want(256);
  quant::dequantize_block(quant::BlockType::q6_k, blocks.data() + 2 * 210, want.data());
  for (int i = 0; i < 256; ++i) CHECK(down.element(512 + i) == want[static_cast<std::size_t>(i)]);
  CHECK(g.tensors.at("blk.0.attn_q.weight").shape == std::vector<std::int64_t>{4, 64});
  CHECK(g.tensors.at("blk.0.attn_norm.weight").dtype == DType::f32);

  // Kept as blocks instead (runtime-typed weights): views of the mapping with their ggml type; element access, a row
  // slice and the row-major f32 conversion decode exactly what dequantize_block_tensors gave.
  io::GgufFile k = io::read_gguf(p);
  io::keep_block_tensors(k);
  CHECK(k.block_tensors.empty());
  const AnyTensor& kd = k.tensors.at("blk.0.ffn_down.weight");
  CHECK(kd.dtype == DType::ggml);
  CHECK(kd.ggml_type == 14);
  CHECK(kd.shape == std::vector<std::int64_t>{3, 512});
  CHECK(kd.describe() == "Q6_K [3,512]");
  for (int i = 0; i < 256; ++i) CHECK(kd.element(512 + i) == want[static_cast<std::size_t>(i)]);
  const AnyTensor row1 = kd.select(0, 1);
  for (int i = 0; i < 256; ++i) CHECK(row1.element(i) == want[static_cast<std::size_t>(i)]);
  const Tensor<float, 2> f = io::to_matrix<float>(kd, {0, 1}, 1);
  for (int i = 0; i < 3 * 512; ++i) CHECK(f.data()[i] == static_cast<float>(down.element(i)));
  const io::GgmlMatrix gm = io::ggml_matrix(kd, {0, 1}, 1);  // the file's rows: a view, no copy
  CHECK(gm.type == 14);
  CHECK(reinterpret_cast<const std::byte*>(gm.data.data()) == kd.data);
  CHECK(gm.data.shape() == Shape<2>{3, 2 * 210});
  const io::GgmlMatrix tr = io::ggml_matrix(kd, {1, 0}, 1);  // columns as rows: blocks cannot be; decoded to F32
  CHECK(tr.type == quant::kTypeF32);
  CHECK(reinterpret_cast<const float*>(tr.data.data())[1 * 3 + 2] == static_cast<float>(down.element(2 * 512 + 1)));
  // A view starting inside a block is refused by name.
  CHECK_THAT(error_of<UnsupportedError>([&] { (void)kd.narrow(1, 100, 256); }),
             Catch::Contains("Q6_K") && Catch::Contains("block boundary"));
  std::filesystem::remove(p);
}

TEST_CASE("ggml quants: malformed block tensors raise errors naming the tensor", "[quant][gguf]") {
  SECTION("inner dim not a multiple of the block") {
    io::GgufWriter w;
    w.add_raw_tensor("bad.weight", {2, 100}, 12, some_blocks(quant::BlockType::q4_k, 1));
    const std::string p = write_file(w, "notmultiple.gguf");
    const std::string e = error_of<IoError>([&] { io::read_gguf(p); });
    CHECK_THAT(e, Catch::Contains("bad.weight") && Catch::Contains("Q4_K") && Catch::Contains("(100)") &&
                      Catch::Contains("multiple of 256"));
    std::filesystem::remove(p);
  }
  SECTION("truncated data") {
    io::GgufWriter w;
    w.add_raw_tensor("cut.weight", {4, 256}, 14, some_blocks(quant::BlockType::q6_k, 4));
    auto bytes = w.bytes();
    bytes.resize(bytes.size() - 100);
    const std::string p = tmp_path("truncated.gguf");
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                             static_cast<std::streamsize>(bytes.size()));
    const std::string e = error_of<IoError>([&] { io::read_gguf(p); });
    CHECK_THAT(e, Catch::Contains("cut.weight") && Catch::Contains("truncated"));
    std::filesystem::remove(p);
  }
  SECTION("NaN or infinite scales") {
    struct Case {
      quant::BlockType type;
      std::uint32_t id;
      int field;  // index into fp16_scales
      std::uint16_t bits;
    };
    for (const Case c : {Case{quant::BlockType::q4_k, 12, 0, 0x7e00}, Case{quant::BlockType::q4_k, 12, 1, 0xfc00},
                         Case{quant::BlockType::q6_k, 14, 0, 0x7c00}, Case{quant::BlockType::q4_0, 2, 0, 0x7e01},
                         Case{quant::BlockType::q2_k, 10, 1, 0x7c00}, Case{quant::BlockType::iq4_xs, 23, 0, 0xfe00}}) {
      const quant::BlockFormat& f = quant::block_format(c.type);
      INFO(f.name);
      auto blocks = some_blocks(c.type, 6);
      std::memcpy(blocks.data() + 5 * f.bytes + f.fp16_scales[c.field], &c.bits, 2);  // the last block
      io::GgufWriter w;
      w.add_raw_tensor("nan.weight", {2, 3 * f.block}, c.id, blocks);
      const std::string p = write_file(w, "nan.gguf");
      io::GgufFile g = io::read_gguf(p);  // the scales are checked when decoding
      const std::string e = error_of<IoError>([&] { io::dequantize_block_tensors(g); });
      CHECK_THAT(e, Catch::Contains("nan.weight") && Catch::Contains(f.name) && Catch::Contains("block 5") &&
                        Catch::Contains("row 1") && Catch::Contains("NaN or infinite scale"));
      io::GgufFile k = io::read_gguf(p);  // kept as blocks: checked as well
      const std::string ek = error_of<IoError>([&] { io::keep_block_tensors(k); });
      CHECK_THAT(ek, Catch::Contains("nan.weight") && Catch::Contains(f.name) && Catch::Contains("block 5") &&
                         Catch::Contains("row 1") && Catch::Contains("NaN or infinite scale"));
      std::filesystem::remove(p);
    }
  }
  SECTION("NaN scale in a Q8_0 tensor (kept as blocks)") {
    auto blocks = some_blocks(quant::BlockType::q8_0, 4);
    const std::uint16_t nan = 0x7e00;
    std::memcpy(blocks.data() + 3 * 34, &nan, 2);
    io::GgufWriter w;
    w.add_raw_tensor("q8.weight", {2, 64}, 8, blocks);
    const std::string p = write_file(w, "q8nan.gguf");
    io::GgufFile g = io::read_gguf(p);
    const std::string e = error_of<IoError>([&] { io::dequantize_block_tensors(g); });
    CHECK_THAT(e, Catch::Contains("q8.weight") && Catch::Contains("Q8_0 block 3") && Catch::Contains("row 1") &&
                      Catch::Contains("NaN or infinite scale"));
    std::filesystem::remove(p);
  }
  SECTION("block types this reader does not decode") {
    io::GgufWriter w;
    w.add_raw_tensor("iq2.weight", {1, 256}, 16, std::vector<std::byte>(66));  // IQ2_XXS
    const std::string p = write_file(w, "iq2.gguf");
    const std::string e = error_of<UnsupportedError>([&] { io::read_gguf(p); });
    CHECK_THAT(e, Catch::Contains("iq2.weight") && Catch::Contains("IQ2_XXS") && Catch::Contains("Q4_K"));
    std::filesystem::remove(p);
  }
}
