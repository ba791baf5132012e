// tests/support/decode_checks.hpp: token slicing and the cached-decoding check that the model-family tests share:
// a model decoded with its KV cache (prefill, then one token per step; and two rows of different prompt lengths
// decoded together) must give the logits of the full forward pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/transformer.hpp"
#include "maxtext/testing/compare.hpp"
#include "support/family_fixture.hpp"
#include "support/test_support.hpp"

namespace maxtext::test {

/// Columns [c0, c0 + n) of every row of a [B, T] token tensor.
inline Tensor<std::int32_t, 2> cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({t.dim(0), n});
  for (std::int64_t b = 0; b < t.dim(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(b, c0 + i);
  }
  return s;
}

/// Columns [c0, c0 + n) of row b, as a [1, n] tensor.
inline Tensor<std::int32_t, 2> row_cols(const Tensor<std::int32_t, 2>& t, std::int64_t b, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({1, n});
  for (std::int64_t i = 0; i < n; ++i) s(0, i) = t(b, c0 + i);
  return s;
}

/// `full` = m.forward(tok) for tokens [B >= 2, T >= 8]. Checks, within `tol`:
///   - prefill of the first 4 tokens, then one token per step up to T, against the full forward's positions;
///   - ragged rows: row 0 with a 2-token prompt and row 1 with a 5-token prompt (right-padded, `row_lengths`) prefilled
///     together, then 3 decode steps of both rows, against single-row full forwards of each row's tokens.
/// Sliding-window models pass their window during these steps when the fixture's window is short (the fixtures use
/// windows of 3-4).
template <class Model>
void check_cached_decoding(Model& m, const Tensor<std::int32_t, 2>& tok, const Tensor<float, 3>& full,
                           testing::Tolerance tol, const std::string& name) {
  REQUIRE(tok.dim(0) >= 2);
  REQUIRE(tok.dim(1) >= 8);
  const std::int64_t T = tok.dim(1), P0 = 4;
  auto cache = m.make_cache(tok.dim(0), T);
  expect_close(m.forward(cols(tok, 0, P0), cache), AnyTensor::from(full).narrow(1, 0, P0), tol, name + ".prefill");
  for (std::int64_t t = P0; t < T; ++t) {
    expect_close(m.forward(cols(tok, t, 1), cache), AnyTensor::from(full).narrow(1, t, 1), tol,
                 name + ".step " + std::to_string(t));
  }
  const std::vector<std::int32_t> lens{2, 5};
  constexpr int kSteps = 3;
  auto rc = m.make_cache(2, 16);
  models::ForwardOptions fo;
  fo.row_lengths = &lens;
  fo.last_only = true;
  std::vector<Tensor<float, 3>> steps{m.forward(cols(tok, 0, 5), rc, fo)};
  for (int s = 0; s < kSteps; ++s) {
    Tensor<std::int32_t, 2> next({2, 1});
    next(0, 0) = tok(0, lens[0] + s);
    next(1, 0) = tok(1, lens[1] + s);
    models::ForwardOptions one;
    one.last_only = true;
    steps.push_back(m.forward(next, rc, one));
  }
  CHECK(rc.length(0) == lens[0] + kSteps);
  CHECK(rc.length(1) == lens[1] + kSteps);
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t n = lens[static_cast<std::size_t>(b)];
    const auto ref = AnyTensor::from(m.forward(row_cols(tok, b, 0, n + kSteps)));
    for (std::size_t s = 0; s < steps.size(); ++s) {
      expect_close(AnyTensor::from(steps[s]).narrow(0, b, 1), ref.narrow(1, n - 1 + static_cast<std::int64_t>(s), 1),
                   tol, name + ".ragged row " + std::to_string(b) + " step " + std::to_string(s));
    }
  }
}

/// Tolerance for layer `i`'s output (i = num_decoder_layers: the final norm and the logits).
using LayerTolerance = std::function<testing::Tolerance(std::int64_t)>;

/// A model fixture of tests/reference/*_reference.py (tokens.npy, logits.npy, act_decoder.layers_<i>.npy,
/// act_decoder.decoder_norm.npy) through `m`, loaded by the caller: the logits, every layer's output and the final
/// norm within tol(i); then, with `cached`, check_cached_decoding. Returns everything the forward pass captured.
template <class Model>
layers::Capture check_model_fixture(Model& m, const std::string& dir, const std::string& name, const LayerTolerance& tol,
                                    bool cached = true) {
  const std::int64_t L = m.config().num_decoder_layers;
  const auto tok = int_tensor(npy(dir + "/tokens.npy"));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  expect_close(full, npy(dir + "/logits.npy"), tol(L), name + ".logits");
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string a = "decoder.layers_" + std::to_string(i);
    expect_close(cap.at(a), npy(dir + "/act_" + a + ".npy"), tol(i), name + "." + a);
  }
  expect_close(cap.at("decoder.decoder_norm"), npy(dir + "/act_decoder.decoder_norm.npy"), tol(L), name + ".decoder_norm");
  if (cached) check_cached_decoding(m, tok, full, tol::decode_step, name);
  return cap;
}

}  // namespace maxtext::test
