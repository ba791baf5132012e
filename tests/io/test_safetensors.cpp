// safetensors: round trip for every dtype, sharded index, and malformed files rejected with clear messages.
#include <cstring>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "maxtext/io/safetensors.hpp"

using namespace maxtext;

namespace {
void write_raw(const std::string& path, const std::string& header, std::size_t data_bytes, bool lie_length = false) {
  std::ofstream f(path, std::ios::binary);
  std::uint64_t n = header.size() + (lie_length ? 1000 : 0);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  std::string zeros(data_bytes, '\0');
  f << zeros;
}
std::string error_of(const std::string& path) {
  try {
    io::read_safetensors(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("safetensors round trip for f32, f16, bf16, i32 and strided tensors", "[io][safetensors]") {
  Tensor<float, 2> a({2, 3});
  for (int i = 0; i < 6; ++i) a.data()[i] = 0.25f * static_cast<float>(i) - 0.5f;
  Tensor<fp16, 1> h({3});
  Tensor<bf16, 1> b({3});
  Tensor<std::int32_t, 1> n({2});
  for (int i = 0; i < 3; ++i) {
    h(i) = fp16(1.5f * static_cast<float>(i));
    b(i) = bf16(-2.0f * static_cast<float>(i));
  }
  n(0) = -7;
  n(1) = 9;
  std::map<std::string, AnyTensor> m{{"a", AnyTensor::from(a)}, {"a_t", AnyTensor::from(a).permuted({1, 0})},
                                     {"h", AnyTensor::from(h)}, {"b", AnyTensor::from(b)}, {"n", AnyTensor::from(n)}};
  io::write_safetensors("rt.safetensors", m, {{"format", "test"}});
  const auto r = io::read_safetensors("rt.safetensors");
  CHECK(r.metadata.at("format") == "test");
  CHECK(r.at("a").dtype == DType::f32);
  CHECK(r.at("a").element(5) == 0.75);
  CHECK(r.at("a_t").shape == std::vector<std::int64_t>{3, 2});
  CHECK(r.at("a_t").element(1) == a(1, 0));
  CHECK(r.at("h").dtype == DType::f16);
  CHECK(r.at("h").element(2) == 3.0);
  CHECK(r.at("b").element(2) == -4.0);
  CHECK(r.at("n").element(0) == -7.0);
  std::remove("rt.safetensors");
}

TEST_CASE("Sharded checkpoints load through model.safetensors.index.json", "[io][safetensors]") {
  Tensor<float, 1> a = Tensor<float, 1>::full({4}, 1.0f), b = Tensor<float, 1>::full({2}, 2.0f);
  io::write_safetensors("shard-1.safetensors", {{"x.a", AnyTensor::from(a)}});
  io::write_safetensors("shard-2.safetensors", {{"x.b", AnyTensor::from(b)}});
  {
    std::ofstream f("idx.index.json");
    f << R"({"metadata": {}, "weight_map": {"x.a": "shard-1.safetensors", "x.b": "shard-2.safetensors"}})";
  }
  const auto m = io::read_safetensors_any("idx.index.json");
  CHECK(m.at("x.b").element(1) == 2.0);
  {
    std::ofstream f("idx.index.json");
    f << R"({"weight_map": {"x.a": "shard-2.safetensors"}})";
  }
  CHECK_THROWS_WITH(io::read_safetensors_any("idx.index.json"), Catch::Contains("x.a' is mapped to shard-2.safetensors but"));
  {
    std::ofstream f("idx.index.json");
    f << R"({"weight_map": {"x.a": "../etc/passwd"}})";
  }
  CHECK_THROWS_WITH(io::read_safetensors_any("idx.index.json"), Catch::Contains("must be a plain file name"));
  for (auto p : {"shard-1.safetensors", "shard-2.safetensors", "idx.index.json"}) std::remove(p);
}

TEST_CASE("Malformed safetensors files are rejected with the file and tensor named", "[io][safetensors][errors]") {
  write_raw("bad.safetensors", R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})", 8);
  CHECK_THAT(error_of("bad.safetensors"), Catch::Contains("bad.safetensors: w: data_offsets [0, 16) outside the data section"));
  write_raw("bad.safetensors", R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 16);
  CHECK_THAT(error_of("bad.safetensors"), Catch::Contains("needs 16 bytes, data_offsets give 12"));
  write_raw("bad.safetensors", R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}})", 16);
  CHECK_THAT(error_of("bad.safetensors"), Catch::Contains("unsupported dtype 'Q4'"));
  write_raw("bad.safetensors", R"({"w": {"dtype": "F32", "shape": [2]})", 16);
  CHECK_THAT(error_of("bad.safetensors"), Catch::Contains("not valid JSON"));
  write_raw("bad.safetensors", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 0, true);
  CHECK_THAT(error_of("bad.safetensors"), Catch::Contains("exceeds the file size"));
  write_raw("bad.safetensors",
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            16);
  CHECK_THAT(error_of("bad.safetensors"), Catch::Contains("overlap"));
  { std::ofstream f("bad.safetensors", std::ios::binary); f << "abc"; }
  CHECK_THAT(error_of("bad.safetensors"), Catch::Contains("file too short"));
  CHECK_THAT(error_of("does-not-exist.safetensors"), Catch::Contains("cannot open"));
  std::remove("bad.safetensors");
}

TEST_CASE("safetensors data misaligned by the header length are read from an aligned copy", "[io][safetensors]") {
  // The format lets the header have any length: 8 + 57 bytes puts the f32 data at an odd file offset. Typed reads
  // from there would be misaligned (undefined behaviour, found by the fuzzer's sibling GGUF case); the reader copies.
  const std::string path = "misaligned.safetensors";
  std::string header = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  while ((8 + header.size()) % 2 == 0) header += ' ';
  {
    std::ofstream f(path, std::ios::binary);
    const std::uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header;
    const float v[3] = {1.5f, -2.0f, 3.25f};
    f.write(reinterpret_cast<const char*>(v), sizeof(v));
  }
  const io::TensorMap m = io::read_safetensors(path);
  const AnyTensor& a = m.at("a");
  CHECK(reinterpret_cast<std::uintptr_t>(a.data) % alignof(float) == 0);
  CHECK(a.element(0) == 1.5);
  CHECK(a.element(1) == -2.0);
  CHECK(a.element(2) == 3.25);
  CHECK(a.to<float, 1>({3})(2) == 3.25f);
  std::remove(path.c_str());
}

TEST_CASE("native_weight_type: the storage that keeps every matrix of a file as it is", "[io][weights]") {
  auto t = [](DType d, std::vector<std::int64_t> shape) {
    AnyTensor a;
    a.dtype = d;
    a.shape = std::move(shape);
    return a;
  };
  io::TensorMap m;
  CHECK(io::native_weight_type(m).empty());
  m.add("norm.scale", t(DType::f32, {64}));  // vectors do not count: they are stored in the activation type
  CHECK(io::native_weight_type(m).empty());
  m.add("embed", t(DType::f16, {100, 64}));
  m.add("experts", t(DType::f16, {4, 64, 32}));
  CHECK(io::native_weight_type(m) == "float16");
  m.add("router", t(DType::f32, {64, 4}));  // a float32 matrix beside them: keeping f16 would round it
  CHECK(io::native_weight_type(m).empty());
  io::TensorMap q;
  q.add("w", t(DType::q8_0, {64, 64}));
  q.add("bias", t(DType::f32, {64}));
  CHECK(io::native_weight_type(q) == "q8_0");
  q.add("v", t(DType::f16, {64, 64}));
  CHECK(io::native_weight_type(q).empty());
  io::TensorMap b;
  b.add("w", t(DType::bf16, {8, 8}));
  CHECK(io::native_weight_type(b) == "bfloat16");
  io::TensorMap f;
  f.add("w", t(DType::f32, {8, 8}));
  CHECK(io::native_weight_type(f).empty());
}
