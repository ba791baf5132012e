// Views, tensors and the scratch arena.
#include <catch2/catch.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/tensor.hpp"

using namespace maxtext;

TEST_CASE("Views index, slice, transpose and reshape", "[core][tensor]") {
  Tensor<float, 3> t({2, 3, 4});
  for (std::int64_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i);
  View<float, 3> v = t;
  CHECK(v(1, 2, 3) == 23.0f);
  CHECK(v[1](0, 1) == 13.0f);
  CHECK(v.narrow(2, 1, 2)(0, 0, 1) == 2.0f);
  CHECK(v.transpose(0, 2)(3, 2, 1) == 23.0f);
  CHECK_FALSE(v.transpose(0, 2).is_contiguous());
  CHECK(v.reshape<2>({6, 4})(5, 3) == 23.0f);
  CHECK_THROWS_AS(v.reshape<2>({5, 4}), ShapeError);
  CHECK_THROWS_AS(v.transpose(0, 1).reshape<1>({24}), ShapeError);
  CHECK(v.select(1, 2)(1, 3) == 23.0f);
  CHECK(v.flatten_rows()(5, 3) == 23.0f);
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
}

TEST_CASE("AnyTensor permutes, selects and converts without surprises", "[core][tensor]") {
  Tensor<float, 2> t({2, 3});
  for (int i = 0; i < 6; ++i) t.data()[i] = static_cast<float>(i) + 0.5f;
  AnyTensor a = AnyTensor::from(t);
  const AnyTensor tr = a.permuted({1, 0});
  CHECK(tr.shape == std::vector<std::int64_t>{3, 2});
  CHECK(tr.element(1) == 3.5);  // [0,1] of the transpose = [1,0] of t
  auto b = tr.to<bf16, 2>({3, 2});
  CHECK(static_cast<float>(b(2, 1)) == 5.5f);
  CHECK(a.select(0, 1).element(2) == 5.5);
  CHECK_THROWS_AS(a.reshaped({4}), ShapeError);
}

TEST_CASE("Scratch reuses memory across passes and keeps live buffers stable", "[core][tensor]") {
  Scratch s;
  auto a = s.alloc<float, 1>({100});
  a(0) = 1.0f;
  {
    ScratchScope scope(s);
    auto big = s.alloc<float, 1>({1 << 20});  // forces a second chunk
    big(0) = 2.0f;
    CHECK(a(0) == 1.0f);
  }
  s.reset();
  const auto cap = s.capacity();
  for (int pass = 0; pass < 3; ++pass) {
    s.reset();
    (void)s.alloc<float, 1>({100});
    (void)s.alloc<float, 1>({1 << 20});
  }
  CHECK(s.capacity() == cap);  // steady state allocates nothing new
}
