// Qwen3-Next and Qwen3.5 multi-token prediction: the mtp.* layer their Hugging Face checkpoints carry (vLLM's
// qwen3_next_mtp.py / qwen3_5_mtp.py; MaxText builds no MTP layer for these blocks) against
// tests/reference/qwen3_next_mtp_reference.py, a float64 re-statement written from vLLM's and transformers' source:
// (1 + w) norms of the embedding and of the hidden state, fc over [embedding; hidden], one full-attention decoder
// layer with the sparse MoE, mtp.norm and the shared head. Both conventions for the hidden state the layer reads
// (MaxText's raw one, and the final-normed one vLLM and llama.cpp hand it), speculative decoding with the MTP drafts
// over a model whose other layers keep recurrent (Gated DeltaNet) state, the CLI, and the refusals.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/families/qwen3_next/import.hpp"
#include "maxtext/families/qwen3_next/qwen3_next.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/mtp.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/cli.hpp"
#include "support/mtp_fixture.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

using P32 = Policy<cpu::Backend, float>;
using Qwen3Next = models::Transformer<P32, layers::Qwen3NextDecoderLayer>;

using test::mtp::dir;
using test::mtp::tokens_of;

Qwen3Next load(const std::string& name, Config* cfg_out = nullptr) {
  const Config cfg = io::config_from_hf_file(dir(name) + "config.json");
  if (cfg_out != nullptr) *cfg_out = cfg;
  Qwen3Next m(cfg, cpu::Backend(cpu::Options{1}));
  m.load(io::load_weights(dir(name) + "model.safetensors", cfg).tensors);  // every mtp.* tensor taken
  return m;
}

void close_logits(const Tensor<float, 3>& a, const std::string& file, const std::string& what) {
  // f32 through the main layers and one MTP layer: the model tolerance the other families' logits use.
  test::expect_close(AnyTensor::from(a), test::npy(file), test::tol::f32_logits, what);
}

void check_against_reference(const std::string& name, const std::string& block) {
  Config cfg;
  Qwen3Next m = load(name, &cfg);
  CHECK(cfg.is(block));
  REQUIRE(m.mtp_num_layers() == 1);  // config.json's mtp_num_hidden_layers
  const auto tok = tokens_of(name);
  const auto raw = m.forward_with_mtp(tok);
  close_logits(raw.logits, dir(name) + "logits.npy", "main logits");
  close_logits(raw.mtp_logits.at(0), dir(name) + "mtp_logits_1.npy", "mtp logits (raw hidden state)");
  const auto normed = m.forward_with_mtp(tok, {}, models::MtpHidden::normed);
  close_logits(normed.mtp_logits.at(0), dir(name) + "mtp_logits_1_normed.npy", "mtp logits (normed hidden state)");
  test::mtp::check_raw_hidden(m, tok, name);
}

/// Greedy speculative decoding with the MTP drafts gives plain greedy decoding's tokens, whichever hidden state the
/// drafter hands the layer; the main model's Gated DeltaNet states are rolled back after each rejection.
void check_speculative(const std::string& name) {
  Qwen3Next m = load(name);
  const std::vector<std::int32_t> prompt = test::mtp::prompt_of(name, 5);
  models::GenerateOptions opt;
  opt.max_new_tokens = 20;
  const auto plain = models::generate(m, {prompt}, opt);
  for (const auto hidden : {models::MtpHidden::raw, models::MtpHidden::normed}) {
    for (std::int64_t K : {1, 3}) {
      INFO("draft_max " << K << (hidden == models::MtpHidden::raw ? " raw" : " normed"));
      models::MtpDrafter<Qwen3Next> d(m, 64, hidden);
      const auto st = test::mtp::check_speculation_is_plain(m, prompt, opt, d, K, plain.tokens[0]);
      CHECK(st.drafted.size() >= 1);
      if (st.drafted.size() > 1) CHECK(st.drafted[1] == 0);  // one MTP layer: one draft per pass
    }
  }
}

}  // namespace

TEST_CASE("Qwen3-Next MTP layer (mtp.*) matches the float64 re-statement with the raw and the normed hidden state", "[mtp][qwen3_next]") {
  check_against_reference("mtp_qwen3_next_hf", "qwen3_next");
}

TEST_CASE("Qwen3.5 MTP layer (mtp.*, multimodal RoPE at text positions) matches the float64 re-statement",
          "[mtp][qwen3_5]") {
  check_against_reference("mtp_qwen3_5_hf", "qwen3_5");
}

TEST_CASE("speculative decoding with Qwen3-Next / Qwen3.5 MTP drafts equals plain greedy decoding",
          "[mtp][speculative][qwen3_next]") {
  check_speculative("mtp_qwen3_next_hf");
  check_speculative("mtp_qwen3_5_hf");
}

TEST_CASE("Qwen3-Next MTP: a checkpoint without its mtp.* tensors is refused by name, and mtp_num_layers=0 runs without",
          "[mtp][qwen3_next]") {
  const std::string d = dir("mtp_qwen3_next_hf");
  const Config cfg = io::config_from_hf_file(d + "config.json");
  const io::TensorMap raw = io::read_safetensors_any(d + "model.safetensors");
  io::TensorMap stripped, no_norm;
  for (const auto& [n, t] : raw.tensors) {
    if (n.rfind("mtp.", 0) != 0) stripped.add(n, t);
    if (n != "mtp.norm.weight") no_norm.add(n, t);
  }
  CHECK_THROWS_WITH(io::import_hf_qwen3_next(stripped, cfg),
                    Catch::Contains("mtp.fc.weight") && Catch::Contains("mtp_num_layers=0"));
  CHECK_THROWS_WITH(io::import_hf_qwen3_next(no_norm, cfg), Catch::Contains("missing tensor mtp.norm.weight"));
  Config off = cfg;
  off.mtp_num_layers = 0;
  Qwen3Next plain(off, cpu::Backend(cpu::Options{1}));
  plain.load(io::import_hf_qwen3_next(stripped, off));
  close_logits(plain.forward(tokens_of("mtp_qwen3_next_hf")), d + "logits.npy", "main logits without the MTP layer");
  Qwen3Next ignoring(off, cpu::Backend(cpu::Options{1}));
  ignoring.load(io::import_hf_qwen3_next(raw, off));  // mtp.* present but not asked for: not read
  CHECK(ignoring.mtp_num_layers() == 0);
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits --mtp 1 [--mtp-hidden normed] and generate --spec mtp on a Qwen3-Next checkpoint",
          "[mtp][qwen3_next][cli]") {
  const std::string d = dir("mtp_qwen3_next_hf");
  const auto tok = tokens_of("mtp_qwen3_next_hf");
  std::string row;
  for (std::int64_t t = 0; t < tok.dim(1); ++t) row += (t ? "," : "") + std::to_string(tok(0, t));
  const std::string npy =
      (std::filesystem::current_path() / ("mtp_q3n_cli_" + std::to_string(::getpid()) + ".npy")).string();
  int rc = 0;
  using test::run_cli;
  for (const std::string hidden : {"raw", "normed"}) {
    const std::string out =
        run_cli("logits --weights " + d + " --tokens " + row + " --mtp 1 --mtp-hidden " + hidden + " --out " + npy, rc);
    REQUIRE(rc == 0);
    const AnyTensor got = io::read_npy(npy);
    std::remove(npy.c_str());
    const std::string ref = hidden == "raw" ? "mtp_logits_1.npy" : "mtp_logits_1_normed.npy";
    test::expect_close(got, test::npy(d + ref).narrow(0, 0, 1), test::tol::f32_logits, "CLI MTP logits " + hidden);
  }
  const std::string prompt = " --tokens " + row.substr(0, row.find(',', row.find(',') + 1)) + " --max-new-tokens 16";
  const std::string plain = run_cli("generate --weights " + d + prompt, rc);
  REQUIRE(rc == 0);
  const std::string spec = run_cli("generate --weights " + d + prompt + " --spec mtp --draft-max 1", rc);
  REQUIRE(rc == 0);
  const auto tokens_line = [](const std::string& text) {
    const auto at = text.find("tokens[0]:");
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  CHECK(!tokens_line(plain).empty());
  CHECK(tokens_line(spec) == tokens_line(plain));
  CHECK(spec.find("speculative: mtp, draft-max 1:") != std::string::npos);
}
#endif
