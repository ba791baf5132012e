// Multi-token prediction (models::Transformer's MTP layers, models/mtp.hpp) against tests/reference/mtp_reference.py,
// a float64 re-statement of MaxText's MultiTokenPredictionBlock written from multi_token_prediction.py / models.py:
// the main and every MTP layer's logits of a llama2 and a DeepSeek (MLA + routed MoE) model with two MTP layers, the
// acceptance rate MaxText reports, DeepSeek-V3's Hugging Face layout (the next-n layer stored as layer
// num_hidden_layers), incremental MTP (one row at a time over the layer's cache) against the whole-sequence pass, and
// speculative decoding with the MTP layers as drafter: greedy tokens equal to plain greedy decoding, and each
// first draft the whole-sequence MTP layer's choice. Refusals by name.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/mtp.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/cli.hpp"
#include "support/mtp_fixture.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

using P32 = Policy<cpu::Backend, float>;
using Llama = models::Transformer<P32, layers::LlamaDecoderLayer>;
using DeepSeek = models::Transformer<P32, layers::DeepSeekDenseLayer, layers::DeepSeekMoELayer>;
using LlamaBf = models::Transformer<Policy<cpu::Backend, bf16>, layers::LlamaDecoderLayer>;

using test::mtp::dir;
using test::mtp::tokens_of;

template <class M>
M load_fixture(const std::string& name, const std::string& dtype = "") {
  Config c = io::load_config(dir(name) + "config.yml");
  if (!dtype.empty()) c.dtype = dtype;
  M m(c, cpu::Backend(cpu::Options{1}));
  m.load(io::load_weights(dir(name) + "model.safetensors", m.config()).tensors);
  return m;
}

/// Every row of `a` [B, T, V] at t < T - skip against `ref` (the last `skip` positions of MTP layer k read MaxText's
/// padding token and are compared too, as MaxText computes them: skip = 0 compares all).
void close_logits(const Tensor<float, 3>& a, const std::string& file, const std::string& what) {
  test::expect_close(AnyTensor::from(a), test::npy(file), test::tol::f32_logits, what);
}

template <class M>
void check_against_reference(const std::string& name) {
  M m = load_fixture<M>(name);
  REQUIRE(m.mtp_num_layers() == 2);
  const auto tok = tokens_of(name);
  const auto out = m.forward_with_mtp(tok);
  close_logits(out.logits, dir(name) + "logits.npy", "main logits");
  REQUIRE(out.mtp_logits.size() == 2);
  std::ifstream f(dir(name) + "acceptance.json");
  const nlohmann::json acc = nlohmann::json::parse(f);
  for (std::int64_t k = 1; k <= 2; ++k) {
    INFO("MTP layer " << k);
    close_logits(out.mtp_logits[static_cast<std::size_t>(k - 1)], dir(name) + "mtp_logits_" + std::to_string(k) + ".npy",
                 "mtp logits");
    // Argmax agreement counts: exact unless a reference logit pair ties within the f32 error (none does here).
    CHECK(models::mtp_acceptance_rate(out.logits, out.mtp_logits[static_cast<std::size_t>(k - 1)], k) ==
          Approx(acc[std::to_string(k)].get<double>()).margin(1e-9));
  }
  test::mtp::check_raw_hidden(m, tok, name);
}

/// MTP layer 1 run one position at a time over its cache equals the whole-sequence pass (f32 summation order only).
template <class M>
void check_incremental(const std::string& name) {
  M m = load_fixture<M>(name);
  const auto tok = tokens_of(name);
  const std::int64_t B = tok.dim(0), T = tok.dim(1), D = m.config().emb_dim, V = m.config().vocab_size;
  const auto full = m.forward_with_mtp(tok);
  Tensor<float, 2> h;
  models::ForwardOptions fo;
  fo.hidden_out = &h;
  (void)m.forward(tok, fo);
  auto cache = m.make_mtp_cache(B, T);
  for (std::int64_t t = 0; t + 1 < T; ++t) {
    Tensor<float, 2> ht({B, D});
    Tensor<std::int32_t, 2> next({B, 1});
    for (std::int64_t b = 0; b < B; ++b) {
      std::copy(&h(b * T + t, 0), &h(b * T + t, 0) + D, &ht(b, 0));
      next(b, 0) = tok(b, t + 1);
    }
    const auto l = m.forward_mtp(1, ht, next, cache);
    for (std::int64_t b = 0; b < B; ++b) {
      double err = 0;
      for (std::int64_t v = 0; v < V; ++v) err = std::max(err, std::abs(double(l(b, 0, v)) - full.mtp_logits[0](b, t, v)));
      INFO("row " << b << " position " << t);
      CHECK(err <= 1e-5);
    }
  }
}

/// Wraps MtpDrafter and records each first draft with the context length it was made for.
template <class M>
struct RecordingDrafter {
  models::MtpDrafter<M> inner;
  std::vector<std::pair<std::size_t, std::int32_t>> first;
  std::vector<std::pair<std::int64_t, std::size_t>> sizes;  // (k asked, drafts given)
  void observe(const Tensor<float, 2>& h, std::int64_t at, std::int64_t rows, const std::vector<std::int32_t>& ctx) {
    inner.observe(h, at, rows, ctx);
  }
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>& ctx, std::int64_t k) {
    auto d = inner.propose(ctx, k);
    if (!d.empty()) first.emplace_back(ctx.size(), d[0]);
    sizes.emplace_back(k, d.size());
    return d;
  }
};

template <class M>
void check_speculative(const std::string& name) {
  M m = load_fixture<M>(name);
  const std::vector<std::int32_t> prompt = test::mtp::prompt_of(name, 5);
  models::GenerateOptions opt;
  opt.max_new_tokens = 24;
  const auto plain = models::generate(m, {prompt}, opt);
  std::vector<std::int32_t> truth = prompt;
  truth.insert(truth.end(), plain.tokens[0].begin(), plain.tokens[0].end());
  // The whole-sequence MTP layer 1 over the generated text: its choice at q predicts token q + 2.
  Tensor<std::int32_t, 2> seq({1, static_cast<std::int64_t>(truth.size())});
  for (std::size_t i = 0; i < truth.size(); ++i) seq(0, static_cast<std::int64_t>(i)) = truth[i];
  const auto full = m.forward_with_mtp(seq);
  const std::int64_t V = m.config().vocab_size;
  for (std::int64_t K : {1, 2, 4}) {
    INFO("draft_max " << K);
    RecordingDrafter<M> d{models::MtpDrafter<M>(m, 64), {}, {}};
    const auto st = test::mtp::check_speculation_is_plain(m, prompt, opt, d, K, plain.tokens[0]);
    // Every pass asked for drafts gets one per MTP layer (two), up to what it asked for.
    CHECK(st.drafted[0] + st.empty_drafts == st.verify_passes);
    for (const auto& [asked, given] : d.sizes) CHECK(given == static_cast<std::size_t>(std::min<std::int64_t>(asked, 2)));
    if (K >= 3) CHECK(st.drafted[2] == 0);
    REQUIRE(!d.first.empty());
    std::int64_t compared = 0;
    for (const auto& [n, t] : d.first) {
      const std::int64_t q = static_cast<std::int64_t>(n) - 2;
      const float* row = &full.mtp_logits[0](0, q, 0);
      std::vector<float> s(row, row + V);
      std::sort(s.begin(), s.end(), std::greater<>());
      if (s[0] - s[1] < 1e-3f) continue;  // a near tie: f32 order may choose either
      ++compared;
      CHECK(t == models::argmax(row, V));
    }
    CHECK(compared > 0);
  }
}

/// The drafts a session's MTP drafter offers after a turn (for the conversation's next token and the one after it)
/// against MaxText's whole-sequence block over the whole conversation: layer k at position q = n - 2 reads token q + k.
/// Near ties (f32 order may choose either) are skipped; returns how many drafts were compared.
template <class M>
std::int64_t check_following_drafts(M& m, models::Session<M>& s) {
  const std::vector<std::int32_t> ctx = s.tokens();
  REQUIRE(s.mtp_drafter() != nullptr);
  auto drafts = s.mtp_drafter()->propose(ctx, m.mtp_num_layers());
  REQUIRE(drafts.size() == static_cast<std::size_t>(m.mtp_num_layers()));
  std::vector<std::int32_t> seq = ctx;
  seq.push_back(drafts[0]);  // layer 2 reads draft 1 as its token
  Tensor<std::int32_t, 2> tok({1, static_cast<std::int64_t>(seq.size())});
  for (std::size_t i = 0; i < seq.size(); ++i) tok(0, static_cast<std::int64_t>(i)) = seq[i];
  const auto full = m.forward_with_mtp(tok);
  const std::int64_t V = m.config().vocab_size, q = static_cast<std::int64_t>(ctx.size()) - 2;
  std::int64_t compared = 0;
  for (std::size_t k = 0; k < drafts.size(); ++k) {
    const float* row = &full.mtp_logits[k](0, q, 0);
    std::vector<float> sorted(row, row + V);
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] < 1e-3f) continue;
    INFO("MTP layer " << k + 1 << " at position " << q);
    CHECK(drafts[k] == models::argmax(row, V));
    ++compared;
  }
  return compared;
}

/// A session drafting with its MTP layers over several turns, with plain turns, prompt-lookup turns, a rewind into an
/// answer and a save / load in between: every turn gives the tokens of a plain session fed the same turns, prefills
/// only what it adds (while the drafter follows), and the drafter's next drafts are the whole-sequence block's.
template <class M>
void check_session(const std::string& name) {
  M m = load_fixture<M>(name);
  const auto tok = tokens_of(name);
  auto ids = [&](std::int64_t from, std::int64_t n) {
    std::vector<std::int32_t> v;
    for (std::int64_t t = from; t < from + n; ++t) v.push_back(tok(0, t % tok.dim(1)));
    return v;
  };
  models::Session<M> spec(m, 64), plain(m, 64);  // the fixtures' max_target_length
  models::GenerateOptions opt;
  opt.max_new_tokens = 6;  // eight turns in 57 positions
  models::SpeculativeOptions so;
  so.draft_max = 2;
  std::int64_t drafted = 0, compared = 0;
  auto mtp_turn = [&](const std::vector<std::int32_t>& add, std::int64_t most_prefilled) {
    models::SpeculativeStats st;
    const auto r = spec.generate_mtp_speculative(add, opt, so, &st);
    const auto p = plain.generate(add, opt);
    CHECK(r.tokens[0] == p.tokens[0]);
    CHECK(spec.tokens() == plain.tokens());
    CHECK(r.prompt_tokens <= most_prefilled);
    drafted += st.total_drafted();
    compared += check_following_drafts(m, spec);
  };
  mtp_turn(ids(0, 5), 5);
  {
    INFO("a plain turn: the drafter takes its positions without running");
    const auto r = spec.generate(ids(5, 3), opt);
    CHECK(r.tokens[0] == plain.generate(ids(5, 3), opt).tokens[0]);
  }
  mtp_turn(ids(8, 4), 4 + 1);  // the last answer's last token and the turn
  {
    INFO("a rewind into the last answer: at most mtp_num_layers positions run again besides the cut's");
    const std::int64_t cut = spec.length() - 4;
    spec.rewind(cut);
    plain.rewind(cut);
    mtp_turn(ids(3, 3), 3 + 1 + m.mtp_num_layers());
  }
  {
    INFO("a turn with prompt lookup: the MTP drafter falls behind, the next MTP turn runs what it missed");
    models::PromptLookupDrafter lookup;
    const auto r = spec.generate_speculative(ids(1, 2), opt, lookup, so);
    CHECK(r.tokens[0] == plain.generate(ids(1, 2), opt).tokens[0]);
    const std::int64_t behind = spec.length();
    mtp_turn(ids(6, 2), behind + 2);
  }
  {
    INFO("a session loaded from bytes: no MTP caches in the file, the first MTP turn runs the conversation");
    const auto bytes = spec.save_bytes();
    models::Session<M> loaded(m, 64);
    loaded.load_bytes(bytes);
    models::SpeculativeStats st;
    const auto r = loaded.generate_mtp_speculative(ids(2, 3), opt, so, &st);
    CHECK(r.tokens[0] == plain.generate(ids(2, 3), opt).tokens[0]);
    CHECK(r.prompt_tokens == loaded.length() - static_cast<std::int64_t>(r.tokens[0].size()));
    compared += check_following_drafts(m, loaded);
    drafted += st.total_drafted();
  }
  {
    INFO("another conversation, its MTP layers switched to the normed hidden state, then loaded over this one: the "
         "session's drafter starts again from the loaded conversation");
    models::Session<M> other(m, 64), other_plain(m, 64);
    (void)other.generate_mtp_speculative(ids(7, 4), opt, so);
    (void)other_plain.generate(ids(7, 4), opt);
    models::SpeculativeOptions normed = so;
    normed.mtp_hidden = models::MtpHidden::normed;
    const auto r = other.generate_mtp_speculative(ids(4, 2), opt, normed);
    CHECK(r.tokens[0] == other_plain.generate(ids(4, 2), opt).tokens[0]);
    CHECK(r.prompt_tokens == other.length() - static_cast<std::int64_t>(r.tokens[0].size()));  // a new drafter
    const auto bytes = other.save_bytes();
    spec.load_bytes(bytes);  // spec's drafter holds its own conversation's positions: they must go
    plain.load_bytes(bytes);
    const auto again = spec.generate_mtp_speculative(ids(0, 2), opt, so);
    CHECK(again.tokens[0] == plain.generate(ids(0, 2), opt).tokens[0]);
    compared += check_following_drafts(m, spec);
  }
  CHECK(drafted > 0);
  CHECK(compared >= 4);
}

}  // namespace

TEST_CASE("a Session drafting with its MTP layers keeps them in step with the conversation (llama2)",
          "[mtp][speculative][session]") {
  check_session<Llama>("mtp_llama2_model");
}

TEST_CASE("a Session drafting with its MTP layers keeps them in step with the conversation (deepseek)",
          "[mtp][speculative][session]") {
  check_session<DeepSeek>("mtp_deepseek_model");
}

TEST_CASE("MTP drafter rewind: each layer keeps what its inputs still hold, the layer before it goes back with it",
          "[mtp][speculative]") {
  Llama m = load_fixture<Llama>("mtp_llama2_model");
  const auto tok = tokens_of("mtp_llama2_model");
  const std::int64_t T = tok.dim(1), D = m.config().emb_dim;
  REQUIRE(T >= 8);
  std::vector<std::int32_t> ctx(tok.data(), tok.data() + T);
  Tensor<float, 2> h;
  models::ForwardOptions fo;
  fo.hidden_out = &h;
  Tensor<std::int32_t, 2> row({1, T});
  for (std::int64_t t = 0; t < T; ++t) row(0, t) = ctx[static_cast<std::size_t>(t)];
  (void)m.forward(row, fo);
  models::MtpDrafter<Llama> d(m, 64);
  d.observe(h, 0, T, ctx);  // layer 1 takes positions 0 .. T-2, layer 2 0 .. T-3
  CHECK(d.observed_end() == T);
  CHECK(d.pending() == 1);
  // The conversation cut to T - 1 tokens, the model's cache kept whole: layer 1 loses position T - 2 (its token is
  // gone) and layer 2 position T - 3; rows a layer took are not kept, so the model hands positions from T - 3 again.
  CHECK(d.rewind(T, T - 1) == T - 3);
  CHECK(d.observed_end() == T - 3);
  CHECK(d.rewind(T - 3, T) == T - 3);  // nothing cut: nothing goes back
  CHECK_THROWS_WITH(d.rewind(T, T), Catch::Contains("rewind to ") && Catch::Contains("it follows"));
  Tensor<float, 2> tail({3, D});
  std::copy(h.data() + (T - 3) * D, h.data() + T * D, tail.data());
  CHECK_THROWS_WITH(d.append(tail, T - 2, 3), Catch::Contains("do not continue"));
  d.append(tail, T - 3, 3);
  d.catch_up(ctx);
  // The same drafts as a drafter that saw the sequence once.
  models::MtpDrafter<Llama> fresh(m, 64);
  fresh.observe(h, 0, T, ctx);
  CHECK(d.propose(ctx, 2) == fresh.propose(ctx, 2));
}

TEST_CASE("MTP logits (llama2, 2 MTP layers) match the float64 re-statement of MaxText's MTP block", "[mtp]") {
  check_against_reference<Llama>("mtp_llama2_model");
}

TEST_CASE("MTP logits (deepseek MLA + MoE, 2 MTP layers) match the float64 re-statement of MaxText's MTP block",
          "[mtp]") {
  check_against_reference<DeepSeek>("mtp_deepseek_model");
}

TEST_CASE("MTP logits in bf16 (llama2, 2 MTP layers) stay within bf16 rounding of the float64 re-statement", "[mtp]") {
  LlamaBf m = load_fixture<LlamaBf>("mtp_llama2_model", "bfloat16");
  const auto out = m.forward_with_mtp(tokens_of("mtp_llama2_model"));
  // bf16: every op of the 2 main layers and the MTP layers (its two norms, the projection, one decoder layer each)
  // rounds to 2^-8 relative; logits of magnitude ~3.5 through 2 to 4 layers. Measured on the CPU backend (AVX-512):
  // worst error 0.049 (main), 0.064 and 0.094 (MTP layers 1, 2). Bound: 2^-4 relative + 0.1 absolute (0.3 at the
  // largest logits, 3x the worst); a wrong op (a norm, the concatenation order, the projection's layout) moves
  // logits by O(1), as the f32 test's references differ from each other.
  const testing::Tolerance bf16_logits{1.0 / 16.0, 0.1};
  test::expect_close(AnyTensor::from(out.logits), test::npy(dir("mtp_llama2_model") + "logits.npy"), bf16_logits,
                     "bf16 main logits");
  for (std::int64_t k = 1; k <= 2; ++k) {
    test::expect_close(AnyTensor::from(out.mtp_logits[static_cast<std::size_t>(k - 1)]),
                       test::npy(dir("mtp_llama2_model") + "mtp_logits_" + std::to_string(k) + ".npy"), bf16_logits,
                       "bf16 mtp logits " + std::to_string(k));
  }
  if (std::getenv("MAXTEXT_TEST_REPORT")) {
    for (std::size_t k = 0; k <= 2; ++k) {
      const auto& l = k == 0 ? out.logits : out.mtp_logits[k - 1];
      const AnyTensor r = test::npy(dir("mtp_llama2_model") + (k == 0 ? std::string("logits.npy")
                                                                       : "mtp_logits_" + std::to_string(k) + ".npy"));
      double e = 0;
      for (std::int64_t i = 0; i < l.size(); ++i) e = std::max(e, std::abs(double(l.data()[i]) - r.element(i)));
      std::printf("bf16 %s: max |diff| %.3g\n", k == 0 ? "main" : ("mtp " + std::to_string(k)).c_str(), e);
    }
  }
}

TEST_CASE("MTP layer run one position at a time equals the whole-sequence pass", "[mtp]") {
  check_incremental<Llama>("mtp_llama2_model");
  check_incremental<DeepSeek>("mtp_deepseek_model");
}

TEST_CASE("speculative decoding with MTP drafts equals plain greedy decoding (llama2)", "[mtp][speculative]") {
  check_speculative<Llama>("mtp_llama2_model");
}

TEST_CASE("speculative decoding with MTP drafts equals plain greedy decoding (deepseek)", "[mtp][speculative]") {
  check_speculative<DeepSeek>("mtp_deepseek_model");
}

TEST_CASE("MTP: bad uses are refused by name", "[mtp]") {
  {
    Config c = io::load_config(dir("mtp_llama2_model") + "config.yml");
    c.decoder_block = "gemma3";
    c.mtp_num_layers = 1;
    CHECK_THROWS_AS(c.validate(), UnsupportedError);
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("mtp_num_layers = 1") && Catch::Contains("'gemma3'") &&
                                        Catch::Contains("deepseek"));
    c.decoder_block = "llama2";
    c.mtp_num_layers = -1;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("mtp_num_layers must be >= 0"));
  }
  Llama m = load_fixture<Llama>("mtp_llama2_model");
  const auto tok = tokens_of("mtp_llama2_model");
  Tensor<float, 2> h({tok.dim(0) * tok.dim(1), m.config().emb_dim});
  auto cache = m.make_mtp_cache(tok.dim(0), 16);
  CHECK_THROWS_WITH(m.forward_mtp(3, h, tok, cache), Catch::Contains("layer 3") && Catch::Contains("mtp_num_layers = 2"));
  Tensor<float, 2> short_h({2, m.config().emb_dim});
  CHECK_THROWS_WITH(m.forward_mtp(1, short_h, tok, cache), Catch::Contains("prev_hidden is [2, "));
  auto main_cache = m.make_cache(tok.dim(0), 16);
  CHECK_THROWS_WITH(m.forward_mtp(1, h, tok, main_cache), Catch::Contains("make_mtp_cache"));
  Config plain = m.config();
  plain.mtp_num_layers = 0;
  Llama none(plain, cpu::Backend(cpu::Options{1}));
  CHECK_THROWS_WITH(models::MtpDrafter<Llama>(none), Catch::Contains("no MTP layers"));
  CHECK_THROWS_WITH(none.forward_with_mtp(tok), Catch::Contains("no MTP layers"));
}

TEST_CASE("MTP from a Hugging Face DeepSeek-V3 checkpoint (next-n layer stored as layer num_hidden_layers)", "[mtp]") {
  const std::string d = dir("mtp_deepseek_hf");
  const Config cfg = io::load_hf_deepseek_config(d + "config.json");
  CHECK(cfg.mtp_num_layers == 1);  // num_nextn_predict_layers
  const auto w = io::load_weights(d + "model.safetensors", cfg);
  DeepSeek m(cfg, cpu::Backend(cpu::Options{1}));
  m.load(w.tensors);  // every tensor of the file taken (shared_head / embed_tokens checked equal and dropped)
  const auto tok = tokens_of("mtp_deepseek_hf");
  const auto out = m.forward_with_mtp(tok);
  close_logits(out.logits, d + "logits.npy", "main logits");
  close_logits(out.mtp_logits[0], d + "mtp_logits_1.npy", "mtp logits 1");

  // Without its next-n layer the checkpoint is refused by name, and mtp_num_layers=0 runs the main model.
  io::TensorMap raw = io::read_safetensors_any(d + "model.safetensors");
  io::TensorMap stripped;
  for (const auto& [n, t] : raw.tensors) {
    if (n.rfind("model.layers.3.", 0) != 0) stripped.add(n, t);
  }
  CHECK_THROWS_WITH(io::canonicalize_hf_deepseek(stripped, cfg),
                    Catch::Contains("model.layers.3.eh_proj.weight") && Catch::Contains("mtp_num_layers=0"));
  Config off = cfg;
  off.mtp_num_layers = 0;
  DeepSeek plain(off, cpu::Backend(cpu::Options{1}));
  plain.load(io::canonicalize_hf_deepseek(stripped, off));
  close_logits(plain.forward(tok), d + "logits.npy", "main logits without the MTP layer");
  // A next-n layer whose shared head differs from the model's cannot be expressed in MaxText's block.
  io::TensorMap other = raw;
  other.tensors.erase("model.layers.3.shared_head.norm.weight");
  Tensor<float, 1> ones({cfg.emb_dim});
  for (std::int64_t i = 0; i < cfg.emb_dim; ++i) ones(i) = 1.0f + static_cast<float>(i);
  other.add("model.layers.3.shared_head.norm.weight", AnyTensor::from(ones));
  CHECK_THROWS_WITH(io::canonicalize_hf_deepseek(other, cfg), Catch::Contains("shared_head.norm.weight differs"));
}

namespace {
std::string line_starting(const std::string& text, const std::string& prefix) {
  const auto at = text.find(prefix);
  if (at == std::string::npos) return {};
  return text.substr(at, text.find('\n', at) - at);
}
}  // namespace

TEST_CASE("maxtext logits --mtp K and generate --spec mtp on the Hugging Face DeepSeek-V3 checkpoint", "[mtp][cli]") {
  const std::string d = dir("mtp_deepseek_hf");
  const auto tok = tokens_of("mtp_deepseek_hf");
  std::string row;
  for (std::int64_t t = 0; t < tok.dim(1); ++t) row += (t ? "," : "") + std::to_string(tok(0, t));
  const std::string npy = (std::filesystem::current_path() / ("mtp_cli_" + std::to_string(::getpid()) + ".npy")).string();
  int rc = 0;
  using test::run_cli;
  std::string out = run_cli("logits --weights " + d + " --tokens " + row + " --mtp 1 --out " + npy, rc);
  REQUIRE(rc == 0);
  const AnyTensor got = io::read_npy(npy);
  std::remove(npy.c_str());
  test::expect_close(got, test::npy(d + "mtp_logits_1.npy").narrow(0, 0, 1), test::tol::f32_logits, "CLI MTP logits");
  out = run_cli("logits --weights " + d + " --tokens " + row + " --mtp 2 --out " + npy, rc);
  CHECK(rc != 0);
  CHECK(out.find("--mtp 2: the model has 1 MTP layers") != std::string::npos);
  out = run_cli("logits --weights " + d + " --tokens " + row + " --mtp 1 --incremental 2 --out " + npy, rc);
  CHECK(rc != 0);
  CHECK(out.find("not with --image or --incremental") != std::string::npos);

  const std::string prompt = " --tokens " + row.substr(0, row.find(',', row.find(',') + 1)) + " --max-new-tokens 16";
  const std::string plain = run_cli("generate --weights " + d + prompt, rc);
  REQUIRE(rc == 0);
  const std::string spec = run_cli("generate --weights " + d + prompt + " --spec mtp --draft-max 1", rc);
  REQUIRE(rc == 0);
  CHECK(line_starting(spec, "tokens[0]:") == line_starting(plain, "tokens[0]:"));
  CHECK(spec.find("speculative: mtp, draft-max 1:") != std::string::npos);
  out = run_cli("generate --weights " + d + prompt + " --spec mtp mtp_num_layers=0", rc);
  CHECK(rc != 0);
  CHECK(out.find("--spec mtp: the model has no MTP layers") != std::string::npos);
}
