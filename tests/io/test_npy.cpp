// .npy: round trip and malformed files.
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "maxtext/io/npy.hpp"

using namespace maxtext;

TEST_CASE(".npy round trip for f32, f64, i32 and a transposed view", "[io][npy]") {
  Tensor<float, 3> a({2, 3, 4});
  for (int i = 0; i < 24; ++i) a.data()[i] = static_cast<float>(i) * 0.5f;
  io::write_npy("a.npy", a);
  auto r = io::read_npy("a.npy");
  CHECK(r.shape == std::vector<std::int64_t>{2, 3, 4});
  CHECK(r.element(23) == 11.5);
  io::write_npy("t.npy", AnyTensor::from(a).permuted({2, 1, 0}));
  auto t = io::read_npy("t.npy");
  CHECK(t.shape == std::vector<std::int64_t>{4, 3, 2});
  CHECK(t.element(1) == a(1, 0, 0));
  Tensor<double, 1> d = Tensor<double, 1>::full({1}, 0.1);
  io::write_npy("d.npy", d);
  CHECK(io::read_npy("d.npy").element(0) == 0.1);
  for (auto p : {"a.npy", "t.npy", "d.npy"}) std::remove(p);
}

TEST_CASE("Malformed .npy files are rejected", "[io][npy][errors]") {
  { std::ofstream f("bad.npy", std::ios::binary); f << "NUMPY"; }
  CHECK_THROWS_WITH(io::read_npy("bad.npy"), Catch::Contains("not a .npy file"));
  Tensor<float, 1> a = Tensor<float, 1>::full({100}, 1.0f);
  io::write_npy("bad.npy", a);
  std::filesystem::resize_file("bad.npy", 200);
  CHECK_THROWS_WITH(io::read_npy("bad.npy"), Catch::Contains("truncated file"));
  std::remove("bad.npy");
}

TEST_CASE(".npy shapes: an empty axis does not let the later extents overflow the strides", "[io][npy][errors]") {
  auto npy = [](const std::string& shape, bool fortran) {
    std::string h = std::string("{'descr': '<f4', 'fortran_order': ") + (fortran ? "True" : "False") +
                    ", 'shape': " + shape + ", }";
    h += std::string(63 - (10 + h.size()) % 64, ' ') + "\n";
    std::string b = "\x93NUMPY\x01";
    b.push_back('\0');
    b.push_back(static_cast<char>(h.size() & 0xff));
    b.push_back(static_cast<char>(h.size() >> 8));
    return b + h;
  };
  const auto parse = [](const std::string& b) {
    return io::parse_npy(reinterpret_cast<const std::byte*>(b.data()), b.size(), nullptr, "x.npy");
  };
  // 2^40 * 2^40 = 2^80: the product of the extents, zeros counted as one, must stay below 2^50.
  CHECK_THROWS_WITH(parse(npy("(0, 1099511627776, 1099511627776)", false)),
                    Catch::Contains("x.npy") && Catch::Contains("product of its extents exceeds 2^50"));
  CHECK_THROWS_WITH(parse(npy("(1099511627776, 1099511627776, 0)", true)), Catch::Contains("exceeds 2^50"));
  CHECK_THROWS_WITH(parse(npy("(1125899906842624,)", false)), Catch::Contains("out of range [0, 2^50)"));
  // An empty tensor of sensible extents still loads, with strides.
  const AnyTensor e = parse(npy("(0, 3, 4)", false));
  CHECK(e.numel() == 0);
  CHECK(e.strides == std::vector<std::int64_t>{12, 4, 1});
}
