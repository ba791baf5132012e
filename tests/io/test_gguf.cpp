// GGUF: the real model files (metadata, shapes, alignment), writer/reader round trip for every metadata type and the
// F32/F16/BF16/Q8_0 tensor types, and malformed files (every truncation, absurd counts, bad offsets, unknown types)
// rejected with an IoError naming the file and the field. Run under ASan/UBSan too (MAXTEXT_SANITIZE).
#include <cmath>
#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/io/gguf.hpp"
#include "support/test_support.hpp"

using namespace maxtext;
using io::GgufType;
using io::GgufValue;

namespace {

std::string tmp_path(const std::string& name) {
  return (std::filesystem::current_path() / ("maxtext_test_gguf_" + std::to_string(::getpid()) + "_" + name)).string();
}
void write_bytes(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
/// The message of the IoError that reading `bytes` raises ("no error" when none).
std::string read_error(const std::vector<std::byte>& bytes, const std::string& name = "bad.gguf") {
  const std::string p = tmp_path(name);
  write_bytes(p, bytes);
  try {
    io::read_gguf(p);
  } catch (const IoError& e) {
    return e.what();
  } catch (const UnsupportedError& e) {
    return std::string("unsupported: ") + e.what();
  }
  return "no error";
}
std::size_t find_bytes(const std::vector<std::byte>& b, const std::string& s) {
  for (std::size_t i = 0; i + s.size() <= b.size(); ++i) {
    if (std::memcmp(b.data() + i, s.data(), s.size()) == 0) return i;
  }
  FAIL("marker " << s << " not found");
  return 0;
}
template <class T>
void poke(std::vector<std::byte>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

/// A small valid file: a few metadata values and two tensors.
std::vector<std::byte> sample_file() {
  io::GgufWriter w;
  w.set("general.architecture", GgufValue::of_string("llama"));
  w.set("sample.count", GgufValue::of_u32(7));
  w.set("sample.flag", GgufValue::of_bool(true));
  w.set("sample.names", GgufValue::of_strings({"alpha", "beta", "gamma"}));
  Tensor<float, 2> a({2, 32});
  for (int i = 0; i < 64; ++i) a.data()[i] = 0.125f * static_cast<float>(i - 30);
  w.add_tensor("weight_a", AnyTensor::from(a));
  w.add_tensor("weight_b", AnyTensor::from(a), DType::f16);
  return w.bytes();
}

}  // namespace

TEST_CASE("GGUF: stories260K.gguf metadata, tensors and alignment", "[io][gguf]") {
  const std::string path = test::require(test::models_dir() + "/stories260K/stories260K.gguf", "stories260K.gguf");
  const io::GgufFile g = io::read_gguf(path);
  CHECK(g.version == 3);
  CHECK(g.alignment == 32);
  CHECK(g.data_offset % 32 == 0);
  CHECK(g.get_string("general.architecture") == "llama");
  CHECK(g.get_int("llama.embedding_length") == 64);
  CHECK(g.get_int("llama.feed_forward_length") == 172);
  CHECK(g.get_int("llama.attention.head_count") == 8);
  CHECK(g.get_int("llama.attention.head_count_kv") == 4);
  CHECK(g.get_int("llama.block_count") == 5);
  CHECK(g.get_int("llama.context_length") == 2048);
  CHECK(static_cast<float>(g.get_float("llama.attention.layer_norm_rms_epsilon", 0)) == 1e-5f);
  CHECK(g.at("tokenizer.ggml.tokens").size() == 512);
  CHECK(g.at("tokenizer.ggml.tokens").strings[1] == "<s>");
  CHECK(g.at("tokenizer.ggml.scores").elem == GgufType::f32);
  CHECK(g.at("tokenizer.ggml.token_type").ints[3] == 6);  // <0x00> is a byte token
  CHECK(g.tensors.tensors.size() == 48);
  const AnyTensor& k = g.tensors.at("blk.0.attn_k.weight");
  CHECK(k.dtype == DType::f32);
  CHECK(k.shape == std::vector<std::int64_t>{32, 64});  // GGUF dims [64, 32]: 32 rows of 64
  CHECK(g.tensors.at("token_embd.weight").shape == std::vector<std::int64_t>{512, 64});
  CHECK(g.tensors.at("blk.4.ffn_down.weight").shape == std::vector<std::int64_t>{64, 172});
  // Zero-copy: the data pointers lie inside one mapping, at aligned offsets.
  for (const auto& info : g.infos) CHECK(info.offset % 32 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(k.data) % 32 == 0);
}

TEST_CASE("GGUF: llama-2-tiny-random.gguf has F16 tensors and the Llama-2 vocabulary", "[io][gguf]") {
  const std::string path = test::require(test::models_dir() + "/llama-2-tiny-random/llama-2-tiny-random.gguf",
                                         "llama-2-tiny-random.gguf");
  const io::GgufFile g = io::read_gguf(path);
  CHECK(g.metadata.size() == 18);
  CHECK(g.tensors.tensors.size() == 12);  // its README's table lists 12 (the "11 tensors" in its heading is a miscount)
  CHECK(g.data_offset == 724416);  // documented in the model's README
  CHECK(g.get_int("general.file_type") == 1);
  CHECK(g.tensors.at("token_embd.weight").dtype == DType::f16);
  CHECK(g.tensors.at("token_embd.weight").shape == std::vector<std::int64_t>{32000, 8});
  CHECK(g.tensors.at("blk.0.attn_norm.weight").dtype == DType::f32);
  CHECK(g.tensors.at("blk.0.ffn_down.weight").shape == std::vector<std::int64_t>{8, 32});
  CHECK(g.at("tokenizer.ggml.tokens").strings[29889] == ".");
  CHECK(g.get_int("tokenizer.ggml.bos_token_id") == 1);
  CHECK_FALSE(g.has("general.alignment"));
  // RMSNorm weights are all 1.0 in this file (its README).
  const AnyTensor& n = g.tensors.at("output_norm.weight");
  for (std::int64_t i = 0; i < n.numel(); ++i) CHECK(n.element(i) == 1.0);
}

TEST_CASE("GGUF: writer/reader round trip of every metadata type and tensor type", "[io][gguf]") {
  io::GgufWriter w(64);
  GgufValue u8v; u8v.type = GgufType::u8; u8v.u = 250;
  GgufValue i8v; i8v.type = GgufType::i8; i8v.i = -100;
  GgufValue u16v; u16v.type = GgufType::u16; u16v.u = 65000;
  GgufValue i16v; i16v.type = GgufType::i16; i16v.i = -30000;
  GgufValue i64v; i64v.type = GgufType::i64; i64v.i = -(std::int64_t{1} << 40);
  GgufValue f64v; f64v.type = GgufType::f64; f64v.f = 0.1;
  GgufValue nested;
  nested.type = GgufType::array;
  nested.elem = GgufType::array;
  nested.items = {GgufValue::of_i32s({1, 2}), GgufValue::of_strings({"x"})};
  w.set("k.u8", u8v);
  w.set("k.i8", i8v);
  w.set("k.u16", u16v);
  w.set("k.i16", i16v);
  w.set("k.u32", GgufValue::of_u32(4000000000u));
  w.set("k.i32", GgufValue::of_i32(-7));
  w.set("k.f32", GgufValue::of_f32(1.5f));
  w.set("k.bool", GgufValue::of_bool(false));
  w.set("k.string", GgufValue::of_string("héllo"));
  w.set("k.u64", GgufValue::of_u64(std::uint64_t{1} << 50));
  w.set("k.i64", i64v);
  w.set("k.f64", f64v);
  w.set("k.f32s", GgufValue::of_f32s({0.5f, -2.0f}));
  w.set("k.strings", GgufValue::of_strings({"", "a b", "<0x0A>"}));
  w.set("k.nested", nested);

  Tensor<float, 2> f({3, 64});
  for (std::int64_t i = 0; i < f.size(); ++i) f.data()[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  Tensor<std::int32_t, 1> ints({5});
  for (int i = 0; i < 5; ++i) ints(i) = i * 1000 - 2000;
  w.add_tensor("t.f32", AnyTensor::from(f));
  w.add_tensor("t.f16", AnyTensor::from(f), DType::f16);
  w.add_tensor("t.bf16", AnyTensor::from(f), DType::bf16);
  w.add_tensor("t.q8_0", AnyTensor::from(f), DType::q8_0);
  w.add_tensor("t.transposed", AnyTensor::from(f).permuted({1, 0}));  // written contiguous [64, 3]
  w.add_tensor("t.i32", AnyTensor::from(ints));
  const std::string path = tmp_path("roundtrip.gguf");
  w.write(path);

  const io::GgufFile g = io::read_gguf(path);
  CHECK(g.alignment == 64);
  CHECK(g.at("k.u8").u == 250);
  CHECK(g.at("k.i8").i == -100);
  CHECK(g.at("k.u16").u == 65000);
  CHECK(g.at("k.i16").i == -30000);
  CHECK(g.get_int("k.u32") == 4000000000LL);
  CHECK(g.get_int("k.i32") == -7);
  CHECK(g.get_float("k.f32", 0) == 1.5);
  CHECK(g.get_bool("k.bool", true) == false);
  CHECK(g.get_string("k.string") == "héllo");
  CHECK(g.at("k.u64").u == (std::uint64_t{1} << 50));
  CHECK(g.get_int("k.i64") == -(std::int64_t{1} << 40));
  CHECK(g.get_float("k.f64", 0) == 0.1);
  CHECK(g.at("k.f32s").floats == std::vector<double>{0.5, -2.0});
  CHECK(g.at("k.strings").strings == std::vector<std::string>{"", "a b", "<0x0A>"});
  REQUIRE(g.at("k.nested").items.size() == 2);
  CHECK(g.at("k.nested").items[0].ints == std::vector<std::int64_t>{1, 2});
  CHECK(g.at("k.nested").items[1].strings == std::vector<std::string>{"x"});
  CHECK(g.metadata_order.front() == "general.alignment");
  CHECK_THROWS_AS(g.at("k.string").as_int("k.string"), IoError);

  for (const auto& info : g.infos) CHECK(info.offset % 64 == 0);
  const AnyTensor& tf = g.tensors.at("t.f32");
  const AnyTensor& th = g.tensors.at("t.f16");
  const AnyTensor& tb = g.tensors.at("t.bf16");
  const AnyTensor& tq = g.tensors.at("t.q8_0");
  const AnyTensor& tt = g.tensors.at("t.transposed");
  CHECK(tf.shape == std::vector<std::int64_t>{3, 64});
  CHECK(th.dtype == DType::f16);
  CHECK(tb.dtype == DType::bf16);
  CHECK(tq.dtype == DType::q8_0);
  CHECK(tt.shape == std::vector<std::int64_t>{64, 3});
  for (std::int64_t i = 0; i < f.size(); ++i) {
    const float x = f.data()[i];
    CHECK(tf.element(i) == x);
    CHECK(th.element(i) == static_cast<float>(fp16(x)));
    CHECK(tb.element(i) == static_cast<float>(bf16(x)));
    // Q8_0: per block of 32, d = amax/127, q = round(x/d), stored d' = fp16(d): |x - d' q| <= d/2 + 127 |d - d'|,
    // and |d - d'| <= 2^-11 d, so the error stays below 0.57 d.
    const std::int64_t row = i / 64, blk = (i % 64) / 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(f.data()[row * 64 + blk * 32 + j]));
    CHECK(std::fabs(tq.element(i) - x) <= amax / 127.0f * 0.57f + 1e-6f);
    CHECK(tt.element((i % 64) * 3 + i / 64) == x);
  }
  CHECK(g.tensors.at("t.i32").element(4) == 2000.0);
}

TEST_CASE("GGUF: a Q8_0 matrix viewed transposed keeps its blocks (AnyTensor block_axis)", "[io][gguf]") {
  Tensor<float, 2> f({4, 64});
  for (std::int64_t i = 0; i < f.size(); ++i) f.data()[i] = static_cast<float>(i % 37) - 18.0f;
  io::GgufWriter w;
  w.add_tensor("q", AnyTensor::from(f), DType::q8_0);
  const std::string path = tmp_path("q8.gguf");
  w.write(path);
  const io::GgufFile g = io::read_gguf(path);
  const AnyTensor& q = g.tensors.at("q");  // [4, 64] out-major, blocks along 64
  const AnyTensor k = q.permuted({1, 0});  // MaxText-style [in=64, out=4]
  CHECK(k.block_axis == 0);
  CHECK_FALSE(k.is_contiguous());
  for (std::int64_t r = 0; r < 64; ++r) {
    for (std::int64_t c = 0; c < 4; ++c) CHECK(k.element(r * 4 + c) == q.element(c * 64 + r));
  }
  // Back to out-major: kept quantised without a copy of the values, or dequantised row by row.
  const Tensor<q8_0, 2> back = io::to_matrix<q8_0>(k, {1, 0}, 1);
  CHECK(std::memcmp(back.data(), q.data, sizeof(q8_0) * 8) == 0);
  const Tensor<float, 2> deq = io::to_matrix<float>(k, {1, 0}, 1);
  for (std::int64_t i = 0; i < 256; ++i) CHECK(deq.data()[i] == q.element(i));
  // Selecting on the blocked axis is refused; on the other axis the blocks stay.
  CHECK_THROWS_AS(k.select(0, 1), UnsupportedError);
  const AnyTensor col = k.select(1, 2);  // row 2 of the matrix, 64 values
  CHECK(col.block_axis == -1);
  for (std::int64_t r = 0; r < 64; ++r) CHECK(col.element(r) == q.element(2 * 64 + r));
}

TEST_CASE("GGUF: Q8_0 rows and block columns regroup by AnyTensor::narrow / concat without dequantising",
          "[io][gguf]") {
  Tensor<float, 2> f({6, 64});
  for (std::int64_t i = 0; i < f.size(); ++i) f.data()[i] = static_cast<float>((i * 7) % 41) - 20.0f;
  io::GgufWriter w;
  w.add_tensor("q", AnyTensor::from(f), DType::q8_0);
  const std::string path = tmp_path("q8cat.gguf");
  w.write(path);
  const io::GgufFile g = io::read_gguf(path);
  const AnyTensor& q = g.tensors.at("q");  // rows 0-5, blocks along 64
  // Per group h of 2: [rows 2h, 2h+1 of part a | row h of part b], as put_grouped_qkvz regroups q | k | v and z.
  const AnyTensor a = q.narrow(0, 0, 4).reshaped({2, 2, 64}), b = q.narrow(0, 4, 2).reshaped({2, 1, 64});
  const AnyTensor c = AnyTensor::concat({a, b}, 1, "a + b");
  CHECK(c.dtype == DType::q8_0);
  CHECK(c.shape == std::vector<std::int64_t>{2, 3, 64});
  const std::int64_t order[6] = {0, 1, 4, 2, 3, 5};
  for (std::int64_t r = 0; r < 6; ++r) {
    CHECK(std::memcmp(c.data + r * 2 * sizeof(q8_0), q.data + order[r] * 2 * sizeof(q8_0), 2 * sizeof(q8_0)) == 0);
  }
  // Along the blocked axis: whole blocks (a Qwen3.5 ssm_out's value-head columns put back in order).
  const AnyTensor cols = AnyTensor::concat({q.narrow(1, 32, 32), q.narrow(1, 0, 32)}, 1, "columns swapped");
  CHECK(cols.shape == std::vector<std::int64_t>{6, 64});
  for (std::int64_t r = 0; r < 6; ++r) {
    for (std::int64_t j = 0; j < 64; ++j) CHECK(cols.element(r * 64 + j) == q.element(r * 64 + (j + 32) % 64));
  }
  // Inside a block, or with the blocks on another axis than the last: refused by name.
  CHECK_THROWS_WITH(q.narrow(1, 16, 32), Catch::Contains("narrows only at block boundaries"));
  CHECK_THROWS_WITH(AnyTensor::concat({q.permuted({1, 0}), q.permuted({1, 0})}, 0, "y"),
                    Catch::Contains("concatenates whole blocks only"));
}

TEST_CASE("GGUF: malformed headers raise IoError naming the file and the field", "[io][gguf][malformed]") {
  const std::vector<std::byte> good = sample_file();
  REQUIRE(read_error(good) == "no error");
  {
    auto b = good;
    b[0] = std::byte{'X'};
    const std::string e = read_error(b);
    CHECK_THAT(e, Catch::Contains("bad.gguf") && Catch::Contains("magic"));
  }
  {
    auto b = good;
    poke<std::uint32_t>(b, 4, 99);
    CHECK_THAT(read_error(b), Catch::Contains("version") && Catch::Contains("99"));
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, 8, std::uint64_t{1} << 60);
    CHECK_THAT(read_error(b), Catch::Contains("tensor count"));
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, 16, std::uint64_t{1} << 60);
    CHECK_THAT(read_error(b), Catch::Contains("metadata count"));
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, 24, std::uint64_t{1} << 62);  // first key's length
    CHECK_THAT(read_error(b), Catch::Contains("metadata key #0") && Catch::Contains("past the end"));
  }
  {
    // The array length of sample.names: key, u32 type (9), u32 element type, u64 count.
    auto b = good;
    const std::size_t at = find_bytes(b, "sample.names") + std::strlen("sample.names") + 8;
    poke<std::uint64_t>(b, at, std::uint64_t{1} << 61);
    CHECK_THAT(read_error(b), Catch::Contains("sample.names") && Catch::Contains("array of"));
  }
  {
    auto b = good;  // a string element's length inside the array
    const std::size_t at = find_bytes(b, "alpha") - 8;
    poke<std::uint64_t>(b, at, std::uint64_t{1} << 40);
    CHECK_THAT(read_error(b), Catch::Contains("sample.names[0]"));
  }
  {
    auto b = good;  // metadata value type
    const std::size_t at = find_bytes(b, "sample.count") + std::strlen("sample.count");
    poke<std::uint32_t>(b, at, 77);
    CHECK_THAT(read_error(b), Catch::Contains("sample.count") && Catch::Contains("unknown value type 77"));
  }
  {
    auto b = good;  // bool must be 0 or 1
    const std::size_t at = find_bytes(b, "sample.flag") + std::strlen("sample.flag") + 4;
    b[at] = std::byte{2};
    CHECK_THAT(read_error(b), Catch::Contains("sample.flag") && Catch::Contains("bool"));
  }
  {
    io::GgufWriter w;  // duplicate key: x.b renamed to x.a
    w.set("x.a", GgufValue::of_u32(1));
    w.set("x.b", GgufValue::of_u32(2));
    auto d = w.bytes();
    const std::size_t kb = find_bytes(d, "x.b");
    d[kb + 2] = std::byte{'a'};
    CHECK_THAT(read_error(d), Catch::Contains("x.a") && Catch::Contains("twice"));
  }
  {
    io::GgufWriter w;
    w.set("general.alignment", GgufValue::of_u32(48));
    CHECK_THAT(read_error(w.bytes()), Catch::Contains("general.alignment") && Catch::Contains("power of two"));
  }
}

TEST_CASE("GGUF: malformed tensor infos raise IoError naming the tensor", "[io][gguf][malformed]") {
  const std::vector<std::byte> good = sample_file();
  // Tensor info of weight_b: name, u32 n_dims (2), 2 x u64 dims, u32 type, u64 offset.
  const std::size_t info = find_bytes(good, "weight_b") + std::strlen("weight_b");
  const std::size_t type_at = info + 4 + 16, offset_at = type_at + 4;
  {
    auto b = good;
    poke<std::uint32_t>(b, info, 9);
    CHECK_THAT(read_error(b), Catch::Contains("weight_b") && Catch::Contains("n_dims"));
  }
  {
    auto b = good;
    poke<std::uint32_t>(b, type_at, 1234);
    CHECK_THAT(read_error(b), Catch::Contains("weight_b") && Catch::Contains("unknown ggml type 1234"));
  }
  {
    auto b = good;
    poke<std::uint32_t>(b, type_at, 16);  // IQ2_XXS: known, not supported
    const std::string e = read_error(b);
    CHECK_THAT(e, Catch::Contains("unsupported") && Catch::Contains("IQ2_XXS") && Catch::Contains("weight_b"));
  }
  {
    auto b = good;
    poke<std::uint32_t>(b, type_at, 12);  // Q4_K (core/ggml_quants.hpp) needs the innermost dim (32) in 256-blocks
    const std::string e = read_error(b);
    CHECK_THAT(e, Catch::Contains("Q4_K") && Catch::Contains("weight_b") && Catch::Contains("multiple of 256"));
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, offset_at, 4);
    CHECK_THAT(read_error(b), Catch::Contains("weight_b") && Catch::Contains("not a multiple of the alignment"));
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, offset_at, std::uint64_t{1} << 40);
    CHECK_THAT(read_error(b), Catch::Contains("weight_b") && Catch::Contains("outside the data section"));
  }
  {
    auto b = good;  // both tensors at offset 0: overlapping data
    poke<std::uint64_t>(b, offset_at, 0);
    CHECK_THAT(read_error(b), Catch::Contains("overlap"));
  }
  {
    auto b = good;  // huge dims overflow
    poke<std::uint64_t>(b, info + 4, std::uint64_t{1} << 62);
    CHECK_THAT(read_error(b), Catch::Contains("weight_b") && Catch::Contains("too large"));
  }
  {
    auto b = good;  // Q8_0 needs the innermost dim to be a multiple of 32
    poke<std::uint32_t>(b, type_at, 8);
    poke<std::uint64_t>(b, info + 4, 31);
    CHECK_THAT(read_error(b), Catch::Contains("weight_b") && Catch::Contains("multiple of 32"));
  }
  {
    auto b = good;  // duplicate tensor name
    const std::size_t at = find_bytes(b, "weight_b");
    b[at + 7] = std::byte{'a'};
    CHECK_THAT(read_error(b), Catch::Contains("weight_a") && Catch::Contains("twice"));
  }
}

TEST_CASE("GGUF: every truncation of a valid file raises IoError, never a crash", "[io][gguf][malformed]") {
  const std::vector<std::byte> good = sample_file();
  std::size_t errors = 0;
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string e = read_error(cut, "truncated.gguf");
    INFO("truncated to " << n << " of " << good.size() << " bytes: " << e);
    CHECK(e != "no error");
    CHECK_THAT(e, Catch::Contains("truncated.gguf"));
    errors += e != "no error";
  }
  CHECK(errors == good.size());
}

TEST_CASE("GGUF: missing files and non-GGUF files", "[io][gguf][malformed]") {
  CHECK_THROWS_WITH(io::read_gguf(tmp_path("does-not-exist.gguf")), Catch::Contains("cannot open"));
  std::vector<std::byte> text(64, std::byte{'a'});
  CHECK_THAT(read_error(text), Catch::Contains("magic"));
}
