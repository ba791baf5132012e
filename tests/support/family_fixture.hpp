// tests/support/family_fixture.hpp: what the decoder-family tests (tests/models/test_*.cpp) share to read their
// PyTorch fixtures: the fixture directory of a case, token ids as int32 [B, T], and the bound between incremental
// decoding and the full forward pass.
#pragma once

#include <cstdint>
#include <string>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/testing/compare.hpp"
#include "support/test_support.hpp"

namespace maxtext::test {

/// tests/fixtures/<name>
inline std::string fixture(const std::string& name) { return fixtures_dir() + "/" + name; }

/// A fixture's token ids (tokens.npy, positions.npy: int32 or int64 [B, T]) as int32 [B, T].
inline Tensor<std::int32_t, 2> int_tensor(const AnyTensor& a) { return a.to<std::int32_t, 2>({a.shape[0], a.shape[1]}); }

namespace tol {
/// Incremental (KV-cache) decoding vs the full forward pass: the same f32 math summed in another order, 1e-5 on
/// logits of magnitude ~3.
inline constexpr testing::Tolerance decode_step{1e-5, 1e-5};
}  // namespace tol

}  // namespace maxtext::test
