// tests/fuzz/entry/q8_0.hpp: fuzz entry point for Q8_0 block decoding. The first byte picks a layout (rows 1-8,
// blocks per row 1-4, transposed view or not); the rest of the input fills the 34-byte blocks (fp16 scale, 32 int8),
// cycling when it is short. Every element is read (AnyTensor::element), and the tensor is converted to float, bf16
// and Q8_0 matrices as the model loaders do (to_matrix), transposed views included (which must be refused, not
// misread).
#pragma once

#include <cstring>
#include <vector>

#include "fuzz_common.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/io/convert.hpp"

namespace maxtext::fuzz {

inline void fuzz_q8_0(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return;
  const std::int64_t rows = 1 + (data[0] & 7), blocks = 1 + ((data[0] >> 3) & 3);
  const bool transposed = (data[0] & 0x20) != 0, three_d = (data[0] & 0x40) != 0;
  std::vector<q8_0> buf(static_cast<std::size_t>(rows * blocks));
  auto* bytes = reinterpret_cast<std::uint8_t*>(buf.data());
  const std::size_t n = buf.size() * sizeof(q8_0);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = size > 1 ? data[1 + i % (size - 1)] : 0;
  AnyTensor t;
  t.dtype = DType::q8_0;
  t.shape = three_d && rows % 2 == 0 ? std::vector<std::int64_t>{2, rows / 2, blocks * 32}
                                     : std::vector<std::int64_t>{rows, blocks * 32};
  t.strides = AnyTensor::dense_strides(t.shape, t.dtype);
  t.data = reinterpret_cast<const std::byte*>(buf.data());
  t.source = "fuzz q8_0";
  double acc = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) acc += t.element(i);
  std::vector<int> perm(static_cast<std::size_t>(t.rank()));
  for (int i = 0; i < t.rank(); ++i) perm[static_cast<std::size_t>(i)] = i;
  if (transposed) std::swap(perm.front(), perm.back());
  const AnyTensor v = t.permuted(perm);
  for (std::int64_t i = 0; i < v.numel(); ++i) acc += v.element(i);
  attempt([&] { (void)v.to<float, 1>({v.numel()}); });
  for (int r = 1; r < t.rank(); ++r) {
    attempt([&] { (void)io::to_matrix<float>(t, perm, r); });
    attempt([&] { (void)io::to_matrix<bf16>(t, perm, r); });
    attempt([&] { (void)io::to_matrix<q8_0>(t, perm, r); });
  }
  volatile double sink = acc;
  (void)sink;
}

}  // namespace maxtext::fuzz
