// testing/catch2.hpp: the matchers users put in their own Catch2 tests, on tensors, .npy files and FILE:NAME specs,
// and the failure message (how many outside, the worst element). Also the compile check of catch2.hpp with Catch2.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "maxtext/io/npy.hpp"
#include "maxtext/io/npz.hpp"
#include "maxtext/testing/catch2.hpp"
#include "support/test_support.hpp"

using namespace maxtext;
using maxtext::testing::IsCloseTo;
using maxtext::testing::IsCloseToScaled;

namespace {
const std::string kModel = test::fixtures_dir() + "/gpt3_model/";

Tensor<float, 2> ramp(std::int64_t r, std::int64_t c, float scale = 1.0f) {
  Tensor<float, 2> t({r, c});
  for (std::int64_t i = 0; i < t.size(); ++i) t.data()[i] = scale * static_cast<float>(i) - 3.0f;
  return t;
}
}  // namespace

TEST_CASE("IsCloseTo accepts tensors, AnyTensors, .npy paths and FILE:NAME specs", "[testing][catch2]") {
  const Tensor<float, 2> a = ramp(3, 4);
  Tensor<float, 2> b = ramp(3, 4);
  b(1, 2) += 1e-6f;  // |diff| 1e-6 on a value of 3: inside rtol 1e-5
  CHECK_THAT(a, IsCloseTo(b));
  CHECK_THAT(AnyTensor::from(a), IsCloseTo(AnyTensor::from(b), 1e-5, 1e-6));
  const std::string p = (std::filesystem::current_path() / ("maxtext_catch2_ramp_" + std::to_string(::getpid()) + ".npy")).string();
  io::write_npy(p, AnyTensor::from(a));
  CHECK_THAT(b, IsCloseTo(p));
  CHECK_THAT(b, IsCloseToScaled(p, 1e-6));
  std::remove(p.c_str());
  // A whole-model dump entry, as a user's test would check one captured activation.
  const AnyTensor logits = io::read_npy(kModel + "logits.npy");
  CHECK_THAT(logits, IsCloseTo(kModel + "activations.npz:logits", 0.0, 0.0));
  const auto half = Tensor<double, 1>::full({2}, 0.5), more = Tensor<double, 1>::full({2}, 0.6);
  CHECK_THAT(AnyTensor::from(half), !IsCloseTo(more));
}

TEST_CASE("IsCloseTo's failure message names the count outside and the worst element", "[testing][catch2]") {
  const Tensor<float, 2> a = ramp(3, 4);
  Tensor<float, 2> b = ramp(3, 4);
  b(2, 1) += 0.5f;
  b(0, 3) += 0.01f;
  auto m = IsCloseTo(b, 1e-5, 1e-6);
  CHECK_FALSE(m.match(a));
  const std::string d = m.describe();
  INFO(d);
  CHECK(d.find("2/12 outside (rtol 1e-05, atol 1e-06)") != std::string::npos);
  CHECK(d.find("worst [2,1]: 6 vs 6.5") != std::string::npos);
  CHECK(m.report().outside == 2);
  auto shape = IsCloseTo(ramp(4, 3));
  CHECK_FALSE(shape.match(a));
  CHECK(shape.describe().find("shape mismatch: actual [3,4], expected [4,3]") != std::string::npos);
  CHECK(Catch::StringMaker<Tensor<float, 2>>::convert(a) == "f32 [3,4]");
  CHECK_THROWS_WITH(IsCloseTo(kModel + "activations.npz:nope"), Catch::Contains("no tensor 'nope'"));
}
