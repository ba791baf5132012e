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
