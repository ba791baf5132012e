// .npy / .npz / tensor-file round trips for every dtype, files written by NumPy itself (tests/reference/
// npz_fixtures.py: np.savez, np.savez_compressed, Zip64 records, Fortran order, bf16 as ml_dtypes saves it), files we
// write read back by NumPy, and malformed archives (bad zip, CRC mismatch, unsupported compression, truncation).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "maxtext/io/npy.hpp"
#include "maxtext/io/npz.hpp"
#include "maxtext/io/tensor_files.hpp"
#include "maxtext/io/zip.hpp"
#include "support/test_support.hpp"

using namespace maxtext;
namespace fs = std::filesystem;

namespace {

const std::string kNpz = test::fixtures_dir() + "/npz/";

/// The closed form of tests/reference/npz_fixtures.py: element at flat row-major index i.
double expected_value(DType dt, std::int64_t i, bool u8_shift = true) {
  if (dt == DType::boolean) return i % 3 == 0 ? 1.0 : 0.0;
  if (dtype_is_int(dt)) return static_cast<double>(i % 13 - 6) + (dt == DType::u8 && u8_shift ? 6.0 : 0.0);
  return static_cast<double>(i % 13) * 0.25 - 1.5;
}

/// A tensor of dtype `dt` and `shape` holding expected_value(i), as raw bytes owned by the tensor.
AnyTensor make(DType dt, std::vector<std::int64_t> shape) {
  AnyTensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.strides = AnyTensor::dense_strides(t.shape, dt);
  const std::size_t es = dtype_size(dt), n = static_cast<std::size_t>(t.numel());
  auto buf = std::shared_ptr<std::byte[]>(new std::byte[n * es + 1]);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = expected_value(dt, static_cast<std::int64_t>(i));
    std::byte* p = buf.get() + i * es;
    switch (dt) {
      case DType::f64: { std::memcpy(p, &v, 8); break; }
      case DType::f32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::f16: { const auto b = fp16(static_cast<float>(v)).bits; std::memcpy(p, &b, 2); break; }
      case DType::bf16: { const auto b = bf16(static_cast<float>(v)).bits; std::memcpy(p, &b, 2); break; }
      case DType::i64: { const auto x = static_cast<std::int64_t>(v); std::memcpy(p, &x, 8); break; }
      case DType::i32: { const auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); break; }
      case DType::i16: { const auto x = static_cast<std::int16_t>(v); std::memcpy(p, &x, 2); break; }
      case DType::i8: { const auto x = static_cast<std::int8_t>(v); std::memcpy(p, &x, 1); break; }
      case DType::u8: case DType::boolean: { const auto x = static_cast<std::uint8_t>(v); std::memcpy(p, &x, 1); break; }
      default: FAIL("unexpected dtype");
    }
  }
  t.data = buf.get();
  t.holder = std::shared_ptr<const void>(buf, buf.get());
  t.source = std::string(dtype_name(dt));
  return t;
}

void check_values(const AnyTensor& t, DType dt, const std::vector<std::int64_t>& shape, const std::string& what) {
  INFO(what << ": " << t.describe());
  REQUIRE(t.dtype == dt);
  REQUIRE(t.shape == shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    INFO("element " << i);
    REQUIRE(t.element(i) == expected_value(dt, i));
  }
}

const std::vector<DType> kAll = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64,
                                 DType::i32, DType::i16, DType::i8,  DType::u8,   DType::boolean};

std::vector<char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& path, const std::vector<char>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}
std::size_t find_sig(const std::vector<char>& b, const char* sig, std::size_t from = 0) {
  for (std::size_t i = from; i + 4 <= b.size(); ++i) {
    if (std::memcmp(b.data() + i, sig, 4) == 0) return i;
  }
  FAIL("signature not found");
  return 0;
}
/// A temporary path unique to this process (CTest runs test cases of one program in parallel).
std::string tmp(const std::string& name) {
  return (fs::current_path() / ("maxtext_npz_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

/// NumPy's interpreter, when it and numpy are installed.
bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE(".npy round trip for every dtype, C and Fortran order", "[io][npy]") {
  for (DType dt : kAll) {
    const AnyTensor a = make(dt, {2, 3, 4});
    for (bool fortran : {false, true}) {
      const std::string p = tmp("rt.npy");
      io::write_npy(p, a, fortran);
      const AnyTensor r = io::read_npy(p);
      check_values(r, dt, {2, 3, 4}, std::string(dtype_name(dt)) + (fortran ? " fortran" : " C"));
      CHECK(r.is_contiguous() == !fortran);
      std::remove(p.c_str());
    }
  }
  // A strided view (transpose) is gathered in logical order.
  const AnyTensor a = make(DType::f32, {3, 5});
  const std::string p = tmp("t.npy");
  io::write_npy(p, a.permuted({1, 0}));
  const AnyTensor t = io::read_npy(p);
  REQUIRE(t.shape == std::vector<std::int64_t>{5, 3});
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 3; ++j) CHECK(t.element(i * 3 + j) == expected_value(DType::f32, j * 5 + i));
  }
  std::remove(p.c_str());
}

TEST_CASE(".npy edge cases: 0-d, empty, format 2.0 header", "[io][npy]") {
  const std::string p = tmp("edge.npy");
  io::write_npy(p, make(DType::f64, {}));
  auto s = io::read_npy(p);
  CHECK(s.shape.empty());
  CHECK(s.element(0) == expected_value(DType::f64, 0));
  io::write_npy(p, make(DType::i32, {0, 3}));
  CHECK(io::read_npy(p).shape == std::vector<std::int64_t>{0, 3});
  // A header past 65535 bytes needs format 2.0 (4-byte header length): rank 30000 of ones.
  AnyTensor big = make(DType::f32, std::vector<std::int64_t>(30000, 1));
  io::write_npy(p, big);
  const auto bytes = slurp(p);
  CHECK(bytes[6] == 2);
  CHECK((bytes.size() - 4) % 64 == 0);  // data aligned to 64 like NumPy
  auto r = io::read_npy(p);
  CHECK(r.rank() == 30000);
  CHECK(r.element(0) == expected_value(DType::f32, 0));
  std::remove(p.c_str());
}

TEST_CASE(".npy files written by NumPy: Fortran order, f16, bf16 as ml_dtypes saves it", "[io][npy][interop]") {
  check_values(io::read_npy(kNpz + "fortran.npy"), DType::f32, {3, 4, 2}, "fortran.npy");
  CHECK_FALSE(io::read_npy(kNpz + "fortran.npy").is_contiguous());
  check_values(io::read_npy(kNpz + "f16.npy"), DType::f16, {5}, "f16.npy");
  check_values(io::read_npy(kNpz + "bf16_V2.npy"), DType::bf16, {2, 4}, "bf16 '<V2'");
  check_values(io::read_npy(kNpz + "bf16_name.npy"), DType::bf16, {2, 4}, "bf16 'bfloat16'");
  // Our bf16 writes '<V2', as np.save does for ml_dtypes.bfloat16.
  const std::string p = tmp("bf.npy");
  io::write_npy(p, make(DType::bf16, {2, 4}));
  const auto mine = slurp(p), theirs = slurp(kNpz + "bf16_V2.npy");
  CHECK(std::string(mine.begin(), mine.end()) == std::string(theirs.begin(), theirs.end()));
  std::remove(p.c_str());
}

TEST_CASE(".npz files written by np.savez, np.savez_compressed and with Zip64 records", "[io][npz][interop]") {
  for (const char* f : {"savez.npz", "savez_compressed.npz", "zip64.npz"}) {
    INFO(f);
    const io::TensorMap m = io::read_npz(kNpz + f);
    CHECK(m.tensors.size() == 14);
    check_values(m.at("f64"), DType::f64, {2, 3}, "f64");
    check_values(m.at("f32"), DType::f32, {3, 4}, "f32");
    check_values(m.at("f16"), DType::f16, {5}, "f16");
    check_values(m.at("i64"), DType::i64, {2, 2}, "i64");
    check_values(m.at("i32"), DType::i32, {7}, "i32");
    check_values(m.at("i16"), DType::i16, {3}, "i16");
    check_values(m.at("i8"), DType::i8, {4}, "i8");
    check_values(m.at("u8"), DType::u8, {2, 3}, "u8");
    check_values(m.at("bool"), DType::boolean, {5}, "bool");
    check_values(m.at("scalar"), DType::f32, {}, "scalar");
    check_values(m.at("empty"), DType::f32, {0, 3}, "empty");
    check_values(m.at("fortran"), DType::f32, {3, 4, 2}, "fortran");
    check_values(m.at("bf16_void"), DType::bf16, {2, 4}, "bf16 '|V2'");
    check_values(m.at("decoder/layers_0.mlp"), DType::f32, {1, 2, 3}, "name with / and .");
  }
  // The Zip64 fixture really exercises the Zip64 paths: saturated central-directory fields and a Zip64 end record.
  const auto z = slurp(kNpz + "zip64.npz");
  CHECK(find_sig(z, "PK\x06\x06") > 0);
  const io::ZipReader zr = io::ZipReader::open(kNpz + "zip64.npz");
  bool saw_64_offset = false;
  for (const auto& e : zr.entries()) saw_64_offset = saw_64_offset || e.local_offset > 64;
  CHECK(saw_64_offset);
}

TEST_CASE(".npz round trip for every dtype: stored, deflated, forced Zip64", "[io][npz]") {
  std::map<std::string, AnyTensor> in;
  for (DType dt : kAll) in[std::string("t_") + std::string(dtype_name(dt))] = make(dt, {3, 7});
  in["nested/name.with.dots"] = make(DType::f32, {1, 4});
  in["scalar"] = make(DType::f64, {});
  for (bool compress : {false, true}) {
    for (bool z64 : {false, true}) {
      INFO("compress " << compress << " zip64 " << z64);
      const std::string p = tmp("rt.npz");
      io::write_npz(p, in, {compress, z64});
      const io::TensorMap out = io::read_npz(p);
      REQUIRE(out.tensors.size() == in.size());
      for (const auto& [name, t] : in) check_values(out.at(name), t.dtype, t.shape, name);
      std::remove(p.c_str());
    }
  }
  // Deflate really compresses (a constant array) and stored members are zero-copy when aligned.
  std::map<std::string, AnyTensor> zeros{{"z", AnyTensor::from(Tensor<float, 1>::full({4096}, 0.0f))}};
  CHECK(io::npz_bytes(zeros, {true, false}).size() < 1000);
  CHECK(io::npz_bytes(zeros, {false, false}).size() > 4096 * 4);
}

TEST_CASE("NumPy reads the .npz and .npy files we write", "[io][npz][interop]") {
  if (!have_numpy()) test::skip("/usr/bin/python3 with numpy not available");
  std::map<std::string, AnyTensor> in;
  for (DType dt : kAll) in[std::string(dtype_name(dt))] = make(dt, {2, 5});
  const std::string dir = tmp("numpy_reads");
  fs::create_directories(dir);
  io::write_npz(dir + "/stored.npz", in, {false, false});
  io::write_npz(dir + "/deflated.npz", in, {true, false});
  io::write_npz(dir + "/zip64.npz", in, {false, true});
  io::write_npy(dir + "/fortran.npy", make(DType::f32, {3, 4, 2}), true);
  const std::string script = R"PY(
import sys, zipfile, numpy as np
d = sys.argv[1]
def expect(name, shape, n=None):
    i = np.arange(int(np.prod(shape)))
    if name == 'bool': return ((i % 3) == 0).reshape(shape)
    if name in ('i64', 'i32', 'i16', 'i8'): return ((i % 13) - 6).reshape(shape)
    if name == 'u8': return (i % 13).reshape(shape)
    return ((i % 13) * 0.25 - 1.5).reshape(shape)
for f in ('stored', 'deflated', 'zip64'):
    path = f'{d}/{f}.npz'
    assert zipfile.ZipFile(path).testzip() is None, f  # every CRC checks out
    z = np.load(path)
    assert sorted(z.files) == sorted(['f64','f32','f16','bf16','i64','i32','i16','i8','u8','bool']), z.files
    for k in z.files:
        a = z[k]
        if k == 'bf16':
            assert a.dtype == np.dtype('V2'), a.dtype
            a = (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        assert a.shape == (2, 5), (f, k, a.shape)
        assert np.array_equal(a, expect(k, (2, 5))), (f, k, a)
a = np.load(f'{d}/fortran.npy')
assert a.flags.f_contiguous and not a.flags.c_contiguous
assert np.array_equal(a, expect('f32', (3, 4, 2)))
print('numpy ok')
)PY";
  {
    std::ofstream f(dir + "/check.py");
    f << script;
  }
  const std::string cmd = "/usr/bin/python3 " + dir + "/check.py " + dir;
  CHECK(std::system(cmd.c_str()) == 0);
  fs::remove_all(dir);
}

TEST_CASE("Malformed .npz files raise clear errors", "[io][npz][errors]") {
  const std::string p = tmp("bad.npz");
  const auto good = slurp(kNpz + "savez.npz");
  auto expect_error = [&](const std::vector<char>& bytes, const std::string& what) {
    spit(p, bytes);
    CHECK_THROWS_AS(io::read_npz(p), IoError);
    CHECK_THROWS_WITH(io::read_npz(p), Catch::Contains(what) && Catch::Contains(p));
  };
  SECTION("not a zip at all") {
    expect_error(std::vector<char>(100, 'x'), "not a zip file");
    expect_error({}, "not a zip file");
  }
  SECTION("truncated: the end record is gone") {
    expect_error(std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)),
                 "no end-of-central-directory record; truncated file?");
  }
  SECTION("central directory outside the file") {
    auto b = good;
    const std::size_t e = find_sig(b, "PK\x05\x06");
    const std::uint32_t off = 0x7fffffff;
    std::memcpy(b.data() + e + 16, &off, 4);
    expect_error(b, "central directory");
  }
  SECTION("CRC mismatch in a stored member") {
    auto b = good;
    const std::size_t cd = find_sig(b, "PK\x01\x02");
    const std::size_t local = 0;  // the first member's local header
    std::uint16_t nlen, xlen;
    std::memcpy(&nlen, b.data() + local + 26, 2);
    std::memcpy(&xlen, b.data() + local + 28, 2);
    std::uint32_t size;
    std::memcpy(&size, b.data() + cd + 24, 4);
    b[local + 30 + nlen + xlen + size - 1] ^= 0x55;  // last data byte of the first member
    expect_error(b, "CRC-32 mismatch");
  }
  SECTION("unsupported compression method") {
    auto b = good;
    const std::size_t cd = find_sig(b, "PK\x01\x02");
    b[cd + 10] = 12;  // bzip2
    expect_error(b, "unsupported compression method 12 (bzip2)");
  }
  SECTION("encrypted member") {
    auto b = good;
    const std::size_t cd = find_sig(b, "PK\x01\x02");
    b[cd + 8] |= 1;
    expect_error(b, "encrypted members are not supported");
  }
  SECTION("corrupt deflate stream") {
    auto b = slurp(kNpz + "savez_compressed.npz");
    for (std::size_t i = 60; i < 90; ++i) b[i] = static_cast<char>(0xff);  // inside the first member's deflate data
    spit(p, b);
    CHECK_THROWS_AS(io::read_npz(p), IoError);
    CHECK_THROWS_WITH(io::read_npz(p), Catch::Contains("member '") &&
                                           (Catch::Contains("corrupt deflate stream") || Catch::Contains("CRC-32")));
  }
  SECTION("a member that is not .npy, and a .npy member with garbage") {
    io::ZipWriter z;
    const char text[] = "hello";
    z.add("notes.txt", text, 5, false);
    const auto zb = z.finish();
    expect_error(std::vector<char>(reinterpret_cast<const char*>(zb.data()), reinterpret_cast<const char*>(zb.data()) + zb.size()),
                 "member 'notes.txt' is not a .npy array");
    io::ZipWriter z2;
    z2.add("x.npy", text, 5, true);
    const auto zb2 = z2.finish();
    expect_error(std::vector<char>(reinterpret_cast<const char*>(zb2.data()), reinterpret_cast<const char*>(zb2.data()) + zb2.size()),
                 "not a .npy file (bad magic)");
  }
  SECTION("a member truncated by a lying directory size") {
    auto b = good;
    const std::size_t cd = find_sig(b, "PK\x01\x02");
    const std::uint32_t big = 0x00ffffff;
    std::memcpy(b.data() + cd + 20, &big, 4);
    std::memcpy(b.data() + cd + 24, &big, 4);
    expect_error(b, "lies outside the file");
  }
  std::remove(p.c_str());
}

TEST_CASE("Malformed .npy headers raise clear errors", "[io][npy][errors]") {
  const std::string p = tmp("bad.npy");
  auto with_header = [&](const std::string& dict, std::size_t data_bytes) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64 != 0) h.push_back(' ');
    h.push_back('\n');
    std::vector<char> b = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    b.push_back(static_cast<char>(h.size() & 0xff));
    b.push_back(static_cast<char>(h.size() >> 8));
    b.insert(b.end(), h.begin(), h.end());
    b.resize(b.size() + data_bytes, 0);
    spit(p, b);
  };
  with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8);
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("big-endian dtype '>f4'"));
  with_header("{'descr': '<V1', 'fortran_order': False, 'shape': (2,), }", 2);
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("1-byte ml_dtypes type"));
  with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16);
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("unsupported dtype '<c8'"));
  with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8);
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("structured"));
  with_header("{'descr': '<f4', 'shape': (2,), }", 8);
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("header lacks 'fortran_order'"));
  with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8);
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("bad shape"));
  with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }", 59);
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("data needs 60 bytes for f32 [3,5], file has 59 (truncated file?)"));
  std::remove(p.c_str());
}

TEST_CASE("Tensor files: a directory of .npy, safetensors, FILE:NAME specs", "[io][tensors]") {
  std::map<std::string, AnyTensor> in{{"decoder/layers_0", make(DType::f32, {2, 3})}, {"logits", make(DType::bf16, {4})},
                                      {"tokens", make(DType::i32, {1, 5})}};
  const std::string dir = tmp("dir");
  fs::remove_all(dir);
  io::write_tensors(dir, in);
  CHECK(fs::is_regular_file(dir + "/decoder/layers_0.npy"));
  const io::TensorMap d = io::read_tensors(dir);
  REQUIRE(d.tensors.size() == 3);
  for (const auto& [name, t] : in) check_values(d.at(name), t.dtype, t.shape, "dir " + name);
  const std::string st = tmp("t.safetensors");
  io::write_tensors(st, in);
  const io::TensorMap s = io::read_tensors(st);
  for (const auto& [name, t] : in) check_values(s.at(name), t.dtype, t.shape, "safetensors " + name);
  // Every dtype through safetensors and through a directory of .npy.
  std::map<std::string, AnyTensor> all;
  for (DType dt : kAll) all[std::string(dtype_name(dt))] = make(dt, {2, 3});
  const std::string st_all = tmp("all.safetensors"), dir_all = tmp("all_dir");
  io::write_tensors(st_all, all);
  io::write_tensors(dir_all, all);
  for (const auto& src : {io::read_tensors(st_all), io::read_tensors(dir_all)}) {
    REQUIRE(src.tensors.size() == kAll.size());
    for (const auto& [name, t] : all) check_values(src.at(name), t.dtype, t.shape, "all dtypes " + name);
  }
  std::remove(st_all.c_str());
  fs::remove_all(dir_all);
  const std::string nz = tmp("t.npz");
  io::write_tensors(nz, in, /*compress=*/true);
  check_values(io::read_tensor(nz + ":decoder/layers_0"), DType::f32, {2, 3}, "npz spec");
  check_values(io::read_tensor(st + ":logits"), DType::bf16, {4}, "safetensors spec");
  check_values(io::read_tensor(dir + ":tokens"), DType::i32, {1, 5}, "dir spec");
  check_values(io::read_tensor(dir + "/tokens.npy"), DType::i32, {1, 5}, "npy");
  CHECK_THROWS_WITH(io::read_tensor(nz + ":nope"), Catch::Contains("no tensor 'nope'; it holds: decoder/layers_0, logits, tokens"));
  CHECK_THROWS_WITH(io::read_tensors(tmp("missing.npz")), Catch::Contains("no such file"));
  const std::string odd = tmp("x.bin");
  spit(odd, {'a'});
  CHECK_THROWS_WITH(io::read_tensors(odd), Catch::Contains("unknown format"));
  fs::remove_all(dir);
  for (const auto& f : {st, nz, odd}) std::remove(f.c_str());
}
