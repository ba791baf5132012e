// tests/support/mtp_fixture.hpp: what the multi-token prediction tests share (test_mtp.cpp, test_mtp_qwen3_next.cpp):
// a fixture folder, its tokens, and the check of the raw hidden state the MTP layers read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/test_support.hpp"

namespace maxtext::test::mtp {

/// tests/fixtures/<name>/ (with the trailing slash).
inline std::string dir(const std::string& name) { return fixtures_dir() + "/" + name + "/"; }

/// The fixture's tokens.npy as [B, T] ids.
inline Tensor<std::int32_t, 2> tokens_of(const std::string& name) {
  const AnyTensor t = npy(dir(name) + "tokens.npy");
  return t.to<std::int32_t, 2>({t.shape[0], t.shape[1]});
}

/// The first n tokens of the fixture's first row (a prompt).
inline std::vector<std::int32_t> prompt_of(const std::string& name, std::int64_t n) {
  const auto tok = tokens_of(name);
  REQUIRE(tok.dim(1) >= n);
  return std::vector<std::int32_t>(tok.data(), tok.data() + n);
}

/// The raw hidden state (the last layer's output before the final norm, which MaxText hands the MTP block) against
/// the fixture's hidden.npy, within 1e-5 of its scale (f32 through the main layers).
template <class M>
void check_raw_hidden(M& m, const Tensor<std::int32_t, 2>& tok, const std::string& name) {
  Tensor<float, 2> h;
  models::ForwardOptions fo;
  fo.hidden_out = &h;
  (void)m.forward(tok, fo);
  const AnyTensor hr = npy(dir(name) + "hidden.npy");
  expect_close_scaled(AnyTensor::from(h), hr.reshaped({h.dim(0), h.dim(1)}), 1e-5, "hidden");
}

/// Greedy speculative decoding with `drafter` (at most K drafts a pass) gives the tokens of plain greedy decoding
/// (`plain`) and drafts something; returns the statistics for the caller's own checks.
template <class M, class Drafter>
models::SpeculativeStats check_speculation_is_plain(M& m, const std::vector<std::int32_t>& prompt,
                                                    const models::GenerateOptions& opt, Drafter& drafter, std::int64_t K,
                                                    const std::vector<std::int32_t>& plain) {
  models::SpeculativeOptions so;
  so.draft_max = K;
  models::SpeculativeStats st;
  const auto r = models::generate_speculative(m, prompt, opt, drafter, so, &st);
  CHECK(r.tokens[0] == plain);
  CHECK(st.total_drafted() > 0);
  return st;
}

}  // namespace maxtext::test::mtp
