// llama.cpp as an independent peer: random-weight F32 GGUF files of every architecture llama.cpp shares with the
// library (tests/fixtures/llamacpp/<arch>/, written and run through llama.cpp by tests/reference/llamacpp_peer.py),
// loaded the way `maxtext generate --weights model.gguf` loads them (the config from the GGUF metadata, the tensors
// through io::load_weights, the model from the registry as a models::AnyModel). Checked: our teacher-forced f32 logits over the
// prompt and llama.cpp's greedy continuation against llama.cpp's logits, and our greedy decode (models::generate,
// prefill then one token at a time through the KV cache) against llama.cpp's 32 greedy tokens.
//
// Tolerances (|ours - llama.cpp| <= atol + rtol |llama.cpp|; logits up to ~30 in magnitude):
//  - SiLU/SwiGLU architectures (llama, qwen2, qwen3, qwen3moe, olmo2, gpt-oss, llama4, qwen3next): rtol 1e-4,
//    atol 2e-4. Both sides compute in f32, in different summation orders, llama.cpp with its vectorised exp in
//    softmax and SiLU; measured 6e-6 (llama) to 6e-5 (qwen3moe, |logit| <= 32).
//  - GeGLU architectures (gemma, gemma2, gemma3, gemma4): rtol 1e-3, atol 1e-2 against llama.cpp. ggml's CPU GELU rounds
//    its input to fp16 and reads the result from an fp16 table (ggml-cpu/vec.h, GGML_GELU_FP16), a relative error
//    up to ~2^-11 per activation; measured 1.7e-3 to 5.9e-3. To keep the check tight anyway, the same logits are
//    compared at rtol 1e-4, atol 1e-4 with llama.cpp's graph re-stated in float64 with an exact GELU
//    (tests/reference/llamacpp_gemma_check.py, which also shows that the re-statement with ggml's fp16 GELU
//    reproduces llama.cpp's logits to <= 6e-4); measured 3e-6 to 1.2e-5.
// Where MaxText and llama.cpp differ on purpose the library follows MaxText and the difference is tested here:
// Gemma 3's embedding scale (MaxText: sqrt(emb_dim) rounded to bfloat16; llama.cpp: sqrtf(n_embd) in f32), with a
// 48-wide model whose sqrt(48) is not a bfloat16 number. Other deliberate differences (docs/numerics.md §llama.cpp
// as a peer) do not show at these sizes: the query scale rules agree below 46/62 layers, the tied-head bf16
// rounding of MaxText is exact for the bf16-valued tables the fixtures use.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext_blocks_built.hpp"  // the models of maxtext_blocks (tools/blocks/), as the CLI has them
#include "support/cli.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

constexpr testing::Tolerance kSilu{1e-4, 2e-4};
constexpr testing::Tolerance kGelu{1e-3, 1e-2};
/// kGelu plus the logit factor bf16(sqrt(48)) / sqrtf(48) - 1 = 1.34e-3 of MaxText's Gemma 3 scale at emb_dim 48.
constexpr testing::Tolerance kGeluScale{3e-3, 1e-2};
/// Against the float64 re-statement of llama.cpp's Gemma graphs with an exact GELU (llamacpp_gemma_check.py).
constexpr testing::Tolerance kF64Graph{1e-4, 1e-4};
/// The fp16 cache against a float64 forward that rounds the same keys and values (logits_f64_kv_f16.npy): kF64Graph
/// but atol 1e-3. Where our f32 key or value and the exact one lie on either side of an fp16 rounding midpoint they
/// round to neighbouring fp16 numbers, one fp16 ulp (2^-10 of the value's binade) apart; measured: 2 of 6016 logits
/// beyond 1e-4, at most 1.7e-4. The rounding itself moves these logits by 1.1e-2, eleven times the tolerance.
constexpr testing::Tolerance kF16Cache{1e-4, 1e-3};
/// The Qwen3.5 MoE file with its MTP layer (qwen35moe_mtp; 8 value heads of the DeltaNet per 2 key heads): kSilu but
/// atol 1e-3. Its logits move by ~5e-4 under f32 reordering alone: over five seeds of this shape, our GCC build
/// (AVX-512) and our clang 14 ASan build differ from llama.cpp by 0.95-2.8e-4 and 1.0-7.1e-4 (main logits, |logit|
/// <= 8.3), 1.6-5.8e-4 and 2.0-6.4e-4 (the MTP layer), so at some logit our two builds differ from each other by at
/// least 5e-4. The qwen3next files stay within kSilu (at most 1.6e-4). The raw convention moves the MTP logits by 3.0.
constexpr testing::Tolerance kQwen35Mtp{1e-4, 1e-3};

std::string peer_dir(const std::string& arch) { return test::fixtures_dir() + "/llamacpp/" + arch; }

std::vector<std::int32_t> ids(const AnyTensor& a) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(a.numel()));
  for (std::int64_t i = 0; i < a.numel(); ++i) v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(a.element(i));
  return v;
}

/// The GGUF file's model with weight type `weights` ("ggml": the matrices as the file stores them; "": the
/// activations' type) and KV-cache type `kv`.
std::unique_ptr<models::AnyModel> peer_model(const std::string& path, const Config& cfg, const std::string& weights,
                                             const std::string& kv) {
  models::AnyModelOptions o;
  o.weight_type = weights;
  o.kv_type = kv;
  auto m = models::make_built_any_model(cfg, o, MAXTEXT_BLOCKS_BUILT);
  m->load(io::load_weights(path, cfg, /*keep_blocks=*/weights == "ggml").tensors);
  return m;
}

/// The model's logits [T, V] for `sequence` in one forward (teacher forcing).
AnyTensor teacher_forced(models::AnyModel& m, const std::vector<std::int32_t>& sequence, std::int64_t vocab) {
  const auto T = static_cast<std::int64_t>(sequence.size());
  Tensor<std::int32_t, 2> tok({1, T});
  for (std::int64_t i = 0; i < T; ++i) tok(0, i) = sequence[static_cast<std::size_t>(i)];
  models::ForwardRequest fr;
  fr.tokens = &tok;
  return AnyTensor::from(m.forward(fr)).reshaped({T, vocab});
}

struct PeerRun {
  testing::CompareReport logits;
  AnyTensor values;
  std::vector<std::int32_t> greedy;
};

PeerRun run_peer(const Config& cfg, const std::string& path, const std::vector<std::int32_t>& sequence,
                 std::int64_t prompt_len, std::int64_t steps, const AnyTensor& expected, testing::Tolerance tol) {
  // The model as `maxtext generate` makes it: models::AnyModel from the registry, precompiled in maxtext_blocks.
  const auto m = models::make_built_any_model(cfg, {}, MAXTEXT_BLOCKS_BUILT);
  const io::LoadedWeights w = io::load_weights(path, cfg);
  m->load(w.tensors);
  PeerRun r;
  // Teacher forcing: the prompt followed by llama.cpp's greedy tokens but the last, in one forward.
  const AnyTensor logits = teacher_forced(*m, sequence, cfg.vocab_size);
  r.logits = testing::compare(logits, expected, tol);
  r.values = logits;
  // Greedy decode through the KV cache.
  models::GenerateOptions go;
  go.max_new_tokens = steps;
  const std::vector<std::int32_t> prompt(sequence.begin(), sequence.begin() + prompt_len);
  const auto res = m->generate({prompt}, go);
  r.greedy = res.tokens.at(0);
  return r;
}

/// Load the fixture of `arch` as `maxtext generate --weights` does and compare with llama.cpp. Every fixture's
/// architecture is one the library reads: a refusal (UnsupportedError) fails the test.
/// `f64_file`: for Gemma, llama.cpp's graph re-stated in float64 with an exact GELU (llamacpp_gemma_check.py),
/// checked at f32 tolerance.
void check_peer(const std::string& arch, testing::Tolerance tol, const std::string& f64_file = "logits_exact_gelu.npy") {
  const std::string dir = peer_dir(arch);
  const std::string path = test::require(dir + "/model.gguf", "the llama.cpp peer fixture for " + arch);
  const auto c = io::read_weights_config(path);
  REQUIRE(c.has_value());
  const Config cfg = *c;
  const auto prompt = ids(test::npy(dir + "/tokens.npy"));
  const auto greedy = ids(test::npy(dir + "/greedy.npy"));
  const AnyTensor expected = test::npy(dir + "/logits.npy");
  const auto P = static_cast<std::int64_t>(prompt.size());
  const auto S = static_cast<std::int64_t>(greedy.size());
  REQUIRE(expected.shape == std::vector<std::int64_t>{P + S - 1, cfg.vocab_size});
  std::vector<std::int32_t> sequence = prompt;
  sequence.insert(sequence.end(), greedy.begin(), greedy.end() - 1);

  const PeerRun r = run_peer(cfg, path, sequence, P, S, expected, tol);
  double emax = 0;
  for (std::int64_t i = 0; i < expected.numel(); ++i) emax = std::max(emax, std::fabs(expected.element(i)));
  std::printf("llama.cpp peer %-9s max |ours - llama.cpp| = %.3g (max |logit| %.3g, %lld logits)\n", arch.c_str(),
              r.logits.max_abs, emax, static_cast<long long>(r.logits.count));
  INFO(r.logits.message(arch + " logits vs llama.cpp"));
  CHECK(r.logits.ok());
  CHECK(r.greedy == greedy);
  if (std::filesystem::exists(dir + "/" + f64_file)) {
    // Gemma: the same logits against llama.cpp's graph re-stated in float64 with an exact GELU, at f32 tolerance.
    const auto g = testing::compare(r.values, test::npy(dir + "/" + f64_file), kF64Graph);
    std::printf("llama.cpp peer %-9s max |ours - llama.cpp's graph in f64 with exact GELU (%s)| = %.3g\n", arch.c_str(),
                f64_file.c_str(), g.max_abs);
    INFO(g.message(arch + " logits vs llama.cpp's graph in float64, exact GELU"));
    CHECK(g.ok());
  }
}

}  // namespace

TEST_CASE("llama.cpp peer: llama", "[models][llamacpp]") { check_peer("llama", kSilu); }

// kv_type float16 (`maxtext generate --kv-type float16`): keys and values rounded to fp16 as they are written into the
// cache, over the file's F32 rows computed in place (weight type ggml). Against a float64 forward of the same model that
// rounds every key (after RoPE) and value to float32 and then to float16 and computes the rest exactly
// (tests/reference/llama_gguf_reference.py, logits_f64_kv_f16.npy), at kF16Cache: both sides round the same values,
// so what is left is the f32 arithmetic (as for the F32 cache: 6e-6 against llama.cpp), plus, where our f32 key sits
// on the other side of an fp16 rounding midpoint than the exact one, one fp16 ulp in one element. The rounding itself
// moves these logits by about 1e-2: a cache kept in f32 fails.
TEST_CASE("llama.cpp peer: llama with an fp16 KV cache (kv_type float16) against a float64 forward that rounds the cache",
          "[models][llamacpp]") {
  if (std::string(MAXTEXT_BLOCKS_BUILT).find("ggmlw_f16kv") == std::string::npos) {
    std::printf("fp16 KV cache: not compiled into this program (%s); nothing to check\n", MAXTEXT_BLOCKS_BUILT);
    return;
  }
  const std::string dir = peer_dir("llama");
  const std::string path = test::require(dir + "/model.gguf", "the llama.cpp peer fixture for llama");
  const Config cfg = io::read_weights_config(path).value();
  const auto prompt = ids(test::npy(dir + "/tokens.npy"));
  const auto greedy = ids(test::npy(dir + "/greedy.npy"));
  const AnyTensor rounded = test::npy(dir + "/logits_f64_kv_f16.npy");
  const AnyTensor f32_cache = test::npy(dir + "/logits.npy");  // llama.cpp with an F32 cache
  const auto P = static_cast<std::int64_t>(prompt.size()), S = static_cast<std::int64_t>(greedy.size());
  REQUIRE(rounded.shape == std::vector<std::int64_t>{P + S - 1, cfg.vocab_size});
  CHECK_FALSE(testing::compare(rounded, f32_cache, kF16Cache).ok());  // the fixture tells the two caches apart
  std::vector<std::int32_t> sequence = prompt;
  sequence.insert(sequence.end(), greedy.begin(), greedy.end() - 1);

  auto make = [&](const std::string& kv) { return peer_model(path, cfg, "ggml", kv); };
  const auto m = make("float16");
  const auto r = testing::compare(teacher_forced(*m, sequence, cfg.vocab_size), rounded, kF16Cache);
  std::printf("fp16 KV cache: max |ours - float64 with the cache rounded to fp16| = %.3g\n", r.max_abs);
  INFO(r.message("llama, fp16 KV cache, vs float64 with the same rounding"));
  CHECK(r.ok());
  // Greedy decode through the fp16 cache, one token at a time: the rounding leaves llama.cpp's greedy tokens (the
  // smallest top-1 / top-2 gap of the rounded float64 rows is 1.4e-2).
  models::GenerateOptions go;
  go.max_new_tokens = S;
  CHECK(m->generate({prompt}, go).tokens.at(0) == greedy);
  // Half the cache's bytes of the F32 cache's.
  CHECK(2 * m->new_cache(1, 64)->bytes() == make("")->new_cache(1, 64)->bytes());
}
TEST_CASE("llama.cpp peer: qwen2", "[models][llamacpp]") { check_peer("qwen2", kSilu); }
TEST_CASE("llama.cpp peer: qwen3", "[models][llamacpp]") { check_peer("qwen3", kSilu); }
TEST_CASE("llama.cpp peer: qwen3moe", "[models][llamacpp]") { check_peer("qwen3moe", kSilu); }
TEST_CASE("llama.cpp peer: gemma", "[models][llamacpp]") { check_peer("gemma", kGelu); }
// MaxText's int8 KV cache (quantize_kvcache, kv_quant_dtype int8, kv_quant_axis heads_and_dkv) over the same model:
// against a float64 forward with MaxText's semantics (tests/reference/llama_gguf_reference.py, logits_f64_kv_int8.npy:
// the prompt's prefill attends its keys and values as computed; each later token is quantised into the cache, then
// attends every cached row dequantised, its own included; quantisation by tests/reference/kv_quant_reference.py).
// Prefill at kF64Graph. Decode: an element whose x * 127.5 / max lies within float32 rounding of a midpoint gets
// another code on either side (one step, 1/127.5 of the row's largest magnitude), and that key or value then moves
// every later logit. The reference itself, its quantiser's inputs perturbed by 1e-7 relative (float32 rounding),
// moves by 0.060 at most and 0.0054 on average over the decode logits (0.073 and 0.0059 at 3e-7): no tolerance per
// element can be tighter. So the check is on the mean: at most kInt8MeanAbs, about twice that noise, where the
// quantisation itself moves the logits by 0.023 on average (0.14 at most): a cache kept in f32 fails. Measured 0.0054.
constexpr double kInt8MeanAbs = 0.01;
TEST_CASE("llama.cpp peer: llama with MaxText's int8 KV cache against a float64 forward with the same quantisation",
          "[models][llamacpp][kv_quant]") {
  const std::string dir = peer_dir("llama");
  const std::string path = test::require(dir + "/model.gguf", "the llama.cpp peer fixture for llama");
  Config cfg = io::read_weights_config(path).value();
  cfg.set("quantize_kvcache", "true");
  const auto prompt = ids(test::npy(dir + "/tokens.npy"));
  const auto greedy = ids(test::npy(dir + "/greedy.npy"));
  const AnyTensor want = test::npy(dir + "/logits_f64_kv_int8.npy");
  const auto P = static_cast<std::int64_t>(prompt.size()), S = static_cast<std::int64_t>(greedy.size()), V = cfg.vocab_size;
  REQUIRE(want.shape == std::vector<std::int64_t>{P + S - 1, V});
  // float32 weights (every build has that policy; the sanitizer build has no ggml one).
  const auto m = peer_model(path, cfg, "", "");
  auto cache = m->new_cache(1, P + S);
  Tensor<std::int32_t, 2> tok({1, P});
  for (std::int64_t i = 0; i < P; ++i) tok(0, i) = prompt[static_cast<std::size_t>(i)];
  models::ForwardRequest fr;
  fr.tokens = &tok;
  fr.cache = cache.get();
  const auto pre = testing::compare(AnyTensor::from(m->forward(fr)).reshaped({P, V}), want.narrow(0, 0, P), kF64Graph);
  INFO(pre.message("int8 KV cache, prefill, vs float64"));
  CHECK(pre.ok());
  Tensor<float, 2> steps({S - 1, V});
  for (std::int64_t i = 0; i + 1 < S; ++i) {
    Tensor<std::int32_t, 2> one({1, 1});
    one(0, 0) = greedy[static_cast<std::size_t>(i)];
    fr.tokens = &one;
    fr.last_only = true;
    const Tensor<float, 3> l = m->forward(fr);
    std::copy(l.data(), l.data() + V, steps.data() + i * V);
  }
  auto mean_abs = [&](const AnyTensor& a) {
    double sum = 0;
    for (std::int64_t i = 0; i < (S - 1) * V; ++i) sum += std::fabs(a.element(i) - want.element(P * V + i));
    return sum / static_cast<double>((S - 1) * V);
  };
  const double mean = mean_abs(AnyTensor::from(steps));
  std::printf("int8 KV cache: decode, mean |ours - float64 with the same quantisation| = %.3g\n", mean);
  CHECK(mean <= kInt8MeanAbs);
  // The unquantised cache's logits are far from these (the fixture tells the caches apart).
  const AnyTensor f16 = test::npy(dir + "/logits_f64_kv_f16.npy");
  CHECK(mean_abs(f16.narrow(0, P, S - 1)) > 2 * kInt8MeanAbs);
  // Packed rows are bytes, whatever the cache buffers' element type: over an fp16-typed cache, the same logits as
  // over an f32-typed one (both with the file's matrices in place).
  if (std::string(MAXTEXT_BLOCKS_BUILT).find("ggmlw_f16kv") != std::string::npos) {
    const auto g = peer_model(path, cfg, "ggml", ""), h = peer_model(path, cfg, "ggml", "float16");
    models::GenerateOptions go;
    go.max_new_tokens = 8;
    go.logprobs = true;
    const auto a = g->generate({prompt}, go), b = h->generate({prompt}, go);
    CHECK(a.tokens == b.tokens);
    CHECK(a.logprobs.at(0).at(7).logprob == b.logprobs.at(0).at(7).logprob);
  }
  // Bytes: a packed row of 2 kv heads of 16 is 32 codes, a bf16 scale and padding to 16 bytes (48 bytes) per key or
  // value, against 128 in float32.
  const Config plain_cfg = io::read_weights_config(path).value();
  REQUIRE(plain_cfg.num_kv_heads * plain_cfg.head_dim == 32);
  CHECK(m->new_cache(1, 64)->bytes() * 128 == peer_model(path, plain_cfg, "", "")->new_cache(1, 64)->bytes() * 48);
}

TEST_CASE("llama.cpp peer: gemma2 (local/global pairs, sliding window 8, soft caps)", "[models][llamacpp]") {
  check_peer("gemma2", kGelu);
}

TEST_CASE("llama.cpp peer: gemma3 (5 local : 1 global, window 8)", "[models][llamacpp]") { check_peer("gemma3", kGelu); }

TEST_CASE("llama.cpp peer: Gemma 3's embedding scale, bf16-rounded in MaxText, f32 in llama.cpp (emb_dim 48)",
          "[models][llamacpp]") {
  // sqrt(48) = 6.9282 is not a bfloat16 number: MaxText multiplies the embedding by bf16(sqrt(48)) = 6.9375,
  // llama.cpp by sqrtf(48). The library follows MaxText: its logits are within f32 tolerance of llama.cpp's graph
  // re-stated in float64 with MaxText's scale (logits_maxtext_scale.npy) and not of the same graph with llama.cpp's
  // scale (logits_exact_gelu.npy; that one reproduces llama.cpp's logits once its fp16 GELU is, see
  // llamacpp_gemma_check.py). The table holds +-2^e so that MaxText's bf16-rounded tied head is exact.
  REQUIRE(static_cast<double>(round_to<bf16>(std::sqrt(48.0f))) == 6.9375);
  check_peer("gemma3_d48", kGeluScale, "logits_maxtext_scale.npy");

  const std::string dir = peer_dir("gemma3_d48"), path = dir + "/model.gguf";
  const Config cfg = *io::read_weights_config(path);
  auto seq = ids(test::npy(dir + "/tokens.npy"));
  const auto P = static_cast<std::int64_t>(seq.size());
  const auto greedy = ids(test::npy(dir + "/greedy.npy"));
  seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
  const PeerRun r = run_peer(cfg, path, seq, P, 1, test::npy(dir + "/logits_exact_gelu.npy"), kF64Graph);
  std::printf("llama.cpp peer gemma3_d48: max |ours - llama.cpp's graph in f64 with llama.cpp's f32 embedding scale| = "
              "%.3g (MaxText's bf16 scale followed on purpose)\n", r.logits.max_abs);
  CHECK_FALSE(r.logits.ok());
  CHECK(r.logits.max_abs > 10 * kF64Graph.atol);
}

// OLMo 3 reads llama.cpp's olmo2 architecture, GPT-OSS its gpt-oss.
TEST_CASE("llama.cpp peer: olmo2 (OLMo 3: post-norms, qk-norm over all heads, L,L,L,G window 8)", "[models][llamacpp]") {
  check_peer("olmo2", kSilu);
}
TEST_CASE("llama.cpp peer: gpt-oss (sinks, biases, routed MoE 4 experts top 2, window 8)", "[models][llamacpp]") {
  check_peer("gpt-oss", kSilu);
}

TEST_CASE("llama.cpp peer: llama4 (MoE every 2nd layer: top-1 sigmoid-scaled + shared expert, NoPE every 4th, L2 qk "
          "norm, Scout's LLaMA-3 scaling as rope_freqs)", "[models][llamacpp]") {
  check_peer("llama4", kSilu);
}

TEST_CASE("llama.cpp peer: gemma4 (5 sliding : 1 global with its own head size and K = V, proportional RoPE, layer "
          "scalars, soft cap 30)", "[models][llamacpp]") {
  check_peer("gemma4", kGelu);
}
TEST_CASE("llama.cpp peer: gemma4 MoE (shared GeGLU MLP + 4 routed experts top 2, router and per-expert scales)",
          "[models][llamacpp]") {
  check_peer("gemma4_moe", kGelu);
}

TEST_CASE("llama.cpp peer: qwen3next (Gated DeltaNet 3 : 1 gated attention, 2 key / 4 value heads, MoE top 2 + gated "
          "shared expert)", "[models][llamacpp]") {
  // The importer undoes llama.cpp's converter: norms stored as 1 + w, ssm_a = -exp(A_log), the DeltaNet projection
  // split into q | k | v and z (families/qwen3_next/import.hpp). llama.cpp runs its chunked delta rule on the 16-token prompt,
  // then one recurrent step per token, as the library does (its chunked form starts at 16 tokens).
  check_peer("qwen3next", kSilu);
}

TEST_CASE("llama.cpp peer: qwen35moe (Qwen3.5 MoE: value heads stored tiled, beta and alpha apart, MRoPE sections "
          "at text positions)", "[models][llamacpp]") {
  // decoder_block qwen3_5. llama.cpp's converter reorders the DeltaNet's value heads for its broadcasts; the importer
  // puts them back in Hugging Face's order (families/qwen3_next/import.hpp value_head_position).
  check_peer("qwen35moe", kSilu);
}

TEST_CASE("llama.cpp peer: deepseek2 (DeepSeek-V3: MLA with kv_b split in two, q LoRA, 1 dense + 2 MoE layers, 8 "
          "experts in 4 groups top 2 of 2, sigmoid with selection bias, scale 2.5, YaRN factor 4, a next-n layer)",
          "[models][llamacpp]") {
  // decoder_block deepseek from the file's metadata (families/deepseek/gguf.hpp); the next-n layer becomes MaxText's
  // MTP layer 1, which the main forward does not run (as llama.cpp's main graph does not).
  check_peer("deepseek2", kSilu);
}

namespace {
/// A peer fixture's next-n layer (MaxText's MTP layer 1) against llama.cpp's MTP graph (mtp_logits.npy:
/// LLAMA_CONTEXT_TYPE_MTP over the sequence in one batch, llamacpp_peer.cpp); its row i reads token i + 1 and the main
/// model's h_nextn (output_norm(h)) at position i, and predicts token i + 2, as MaxText's MTP row i does from h_i and
/// the rolled token. Tolerance `tol` as for the main logits (one more decoder layer in f32). MaxText's own convention
/// (the raw hidden state) is the default; it moves these logits by more than 1, so the check tells the two apart.
/// Greedy speculative decoding with the normed drafts gives llama.cpp's greedy tokens. Returns what the CLI test needs.
struct PeerMtp {
  std::string path;
  std::vector<std::int32_t> seq;
  std::int64_t T = 0, V = 0;
  AnyTensor expected;
};
PeerMtp check_peer_mtp(const std::string& name, testing::Tolerance tol = kSilu) {
  PeerMtp r;
  const std::string dir = peer_dir(name);
  r.path = test::require(dir + "/model.gguf", "the llama.cpp peer fixture for " + name);
  const Config cfg = *io::read_weights_config(r.path);
  REQUIRE(cfg.mtp_num_layers == 1);
  const auto prompt = ids(test::npy(dir + "/tokens.npy"));
  const auto greedy = ids(test::npy(dir + "/greedy.npy"));
  r.seq = prompt;
  r.seq.insert(r.seq.end(), greedy.begin(), greedy.end() - 1);
  const auto T = static_cast<std::int64_t>(r.seq.size()), V = cfg.vocab_size;
  r.T = T;
  r.V = V;
  r.expected = test::npy(dir + "/mtp_logits.npy");
  REQUIRE(r.expected.shape == std::vector<std::int64_t>{T - 1, V});
  const auto m = models::make_built_any_model(cfg, {}, MAXTEXT_BLOCKS_BUILT);
  m->load(io::load_weights(r.path, cfg).tensors);
  Tensor<std::int32_t, 2> tok({1, T});
  for (std::int64_t i = 0; i < T; ++i) tok(0, i) = r.seq[static_cast<std::size_t>(i)];
  // The last row reads MaxText's padding id (roll_and_mask) and predicts nothing: rows 0 .. T - 2 are compared.
  const auto rows = [&](const Tensor<float, 3>& l) { return AnyTensor::from(l).reshaped({T, V}).narrow(0, 0, T - 1); };
  const auto normed = testing::compare(rows(m->forward_with_mtp(tok, models::MtpHidden::normed).at(1)), r.expected, tol);
  std::printf("llama.cpp peer %s MTP layer 1 (normed hidden) max |ours - llama.cpp| = %.3g\n", name.c_str(), normed.max_abs);
  INFO(normed.message(name + " MTP logits vs llama.cpp's MTP graph"));
  CHECK(normed.ok());
  const auto raw = testing::compare(rows(m->forward_with_mtp(tok).at(1)), r.expected, tol);
  std::printf("llama.cpp peer %s MTP layer 1 (raw hidden, MaxText's) max |ours - llama.cpp| = %.3g\n", name.c_str(),
              raw.max_abs);
  CHECK(raw.max_abs > 1.0);
  // Drafting with the normed convention changes only the speed: the greedy tokens stay llama.cpp's.
  models::GenerateOptions go;
  go.max_new_tokens = static_cast<std::int64_t>(greedy.size());
  models::SpeculativeOptions so;
  so.mtp_hidden = models::MtpHidden::normed;
  models::SpeculativeStats st;
  CHECK(m->generate_mtp_speculative(prompt, go, so, &st).tokens.at(0) == greedy);
  CHECK(st.total_drafted() > 0);
  return r;
}
}  // namespace

TEST_CASE("llama.cpp peer: deepseek2's next-n layer (MaxText's MTP layer 1) against llama.cpp's MTP graph, with the "
          "hidden state through the final norm as llama.cpp hands it (--mtp-hidden normed)", "[models][llamacpp][mtp]") {
  // Measured 1.0e-4 with |logit| <= 8; the raw convention differs by 4.5.
  const PeerMtp p = check_peer_mtp("deepseek2");
  const std::string& path = p.path;
  const auto& seq = p.seq;
  const std::int64_t T = p.T, V = p.V;
  const AnyTensor& expected = p.expected;
  // The CLI: logits --mtp 1 --mtp-hidden normed writes the same rows; a bad value or a missing --mtp / --spec mtp is
  // refused by name.
  std::string s;
  for (std::size_t i = 0; i < seq.size(); ++i) s += (i ? "," : "") + std::to_string(seq[i]);
  const std::string out =
      (std::filesystem::current_path() / ("deepseek2_mtp_normed_" + std::to_string(::getpid()) + ".npy")).string();
  test::run_cli("logits --weights " + path + " --tokens " + s + " --mtp 1 --mtp-hidden normed --out " + out);
  CHECK(testing::compare(test::npy(out).reshaped({T, V}).narrow(0, 0, T - 1), expected, kSilu).ok());
  int rc = 0;
  CHECK_THAT(test::run_cli("logits --weights " + path + " --tokens 1,2 --mtp 1 --mtp-hidden norm --out " + out, rc),
             Catch::Contains("--mtp-hidden: expected raw"));
  CHECK(rc != 0);
  CHECK_THAT(test::run_cli("logits --weights " + path + " --tokens 1,2 --mtp-hidden normed --out " + out, rc),
             Catch::Contains("--mtp-hidden needs --mtp K"));
  CHECK_THAT(test::run_cli("generate --weights " + path + " --tokens 1,2 --max-new-tokens 2 --mtp-hidden normed", rc),
             Catch::Contains("--mtp-hidden needs --spec mtp"));
  std::remove(out.c_str());
}

TEST_CASE("llama.cpp peer: qwen3next and qwen35moe with their MTP layer (llama.cpp's converter: mtp.* as blk.4 and "
          "blk.4.nextn.*): main logits, and the MTP layer against llama.cpp's MTP graph (--mtp-hidden normed)",
          "[models][llamacpp][mtp]") {
  // Qwen3-Next's MTP layer (vLLM's qwen3_next_mtp.py; llama.cpp's graph_mtp): (1 + w) enorm / hnorm, eh_proj, a
  // full-attention layer with the MoE, its own shared_head_norm, the model's head.
  check_peer("qwen3next_mtp", kSilu);
  (void)check_peer_mtp("qwen3next_mtp");
  check_peer("qwen35moe_mtp", kQwen35Mtp);
  (void)check_peer_mtp("qwen35moe_mtp", kQwen35Mtp);
}

TEST_CASE("llama.cpp peer: deepseek2 lite (DeepSeek-V2-Lite: no q LoRA, softmax routing without renormalisation, "
          "2 shared experts, no rope scaling)", "[models][llamacpp]") {
  check_peer("deepseek2_lite", kSilu);
}

TEST_CASE("llama.cpp peer: llama4 on 8200 tokens, past the 8192-position attention chunk and with the NoPE layer's "
          "temperature tuning above 1", "[models][llamacpp][long]") {
  // llamacpp_peer.py run_llama4_long: the llama4 fixture's model on an 8200-token prompt; llama.cpp's logits for the
  // rows from position 8176 on (prompt then greedy steps) and its 8 greedy tokens.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(undefined_behavior_sanitizer)
  constexpr bool sanitized = true;
#else
  constexpr bool sanitized = false;
#endif
#else
  constexpr bool sanitized = false;
#endif
  // Sanitizer builds compile the CLI's models at -O0: four forward passes over 8207 tokens take many minutes there
  // (2 s in a Release build). The 48-token llama4 peer test above runs the same code under the sanitizers.
  if (sanitized) test::skip("llama4 on 8200 tokens: skipped in sanitizer builds (the models are compiled at -O0)");
  const std::string dir = peer_dir("llama4_long");
  const std::string path = test::require(peer_dir("llama4") + "/model.gguf", "the llama.cpp peer fixture for llama4");
  (void)test::require(dir + "/meta.json", "the llama4_long peer fixture");
  const nlohmann::json meta = test::read_meta(dir);
  const auto prompt = ids(test::npy(dir + "/tokens.npy"));
  const auto greedy = ids(test::npy(dir + "/greedy.npy"));
  const AnyTensor tail = test::npy(dir + "/logits_tail.npy");
  const auto P = static_cast<std::int64_t>(prompt.size());
  const auto S = static_cast<std::int64_t>(greedy.size());
  const std::int64_t from = meta.at("tail_from").get<std::int64_t>();
  REQUIRE(P > 8192);
  REQUIRE(from < 8191);
  REQUIRE(tail.shape == std::vector<std::int64_t>{P + S - 1 - from, 128});
  std::vector<std::int32_t> sequence = prompt;
  sequence.insert(sequence.end(), greedy.begin(), greedy.end() - 1);
  const auto T = static_cast<std::int64_t>(sequence.size());
  Tensor<std::int32_t, 2> tok({1, T});
  for (std::int64_t i = 0; i < T; ++i) tok(0, i) = sequence[static_cast<std::size_t>(i)];

  Config cfg = *io::read_weights_config(path);
  REQUIRE(cfg.chunk_attn_window_size == 8192);
  REQUIRE(cfg.temperature_tuning);
  cfg.max_target_length = T + 16;  // the GGUF declares 256 positions; llama.cpp runs past them too
  const io::LoadedWeights w = io::load_weights(path, cfg);
  // Rows [a, b) of our teacher-forced logits, and of llama.cpp's (which start at `from`).
  const auto rows_of = [&](const Tensor<float, 3>& all, std::int64_t a, std::int64_t b) {
    Tensor<float, 2> t({b - a, cfg.vocab_size});
    for (std::int64_t i = a; i < b; ++i) {
      for (std::int64_t v = 0; v < cfg.vocab_size; ++v) t(i - a, v) = all(0, i, v);
    }
    return AnyTensor::from(t);
  };
  const auto forward = [&](const Config& c) {
    const auto m = models::make_built_any_model(c, {}, MAXTEXT_BLOCKS_BUILT);
    m->load(w.tensors);
    models::ForwardRequest fr;
    fr.tokens = &tok;
    return m->forward(fr);
  };
  const auto tail_rows = [&](std::int64_t a, std::int64_t b) {
    Tensor<float, 2> t({b - a, cfg.vocab_size});
    for (std::int64_t i = a; i < b; ++i) {
      for (std::int64_t v = 0; v < cfg.vocab_size; ++v) t(i - a, v) = static_cast<float>(tail.element((i - from) * cfg.vocab_size + v));
    }
    return AnyTensor::from(t);
  };
  const Tensor<float, 3> ours = forward(cfg);
  // Rows before the chunk boundary at kSilu. From 8192 on, the RoPE layers' queries see only the 1-15 keys of the new
  // chunk instead of thousands, so the rotary angles' rounding no longer averages out: both sides compute them in
  // f32, MaxText as p / timescale (one rounding), llama.cpp as p times theta_scale^i by repeated f32 products then
  // divided by rope_freqs; at these positions they differ by up to 1.2e-4 rad (a float64 check of the two formulas
  // on this file's rope_freqs). Measured 1.4e-5 before 8192 and 3.5e-4 after; the bound there is atol 1e-3, 150x
  // below what either feature moves (printed below).
  constexpr testing::Tolerance kNewChunk{1e-4, 1e-3};
  const auto before = testing::compare(rows_of(ours, from, 8192), tail_rows(from, 8192), kSilu);
  const auto after = testing::compare(rows_of(ours, 8192, T), tail_rows(8192, T), kNewChunk);
  std::printf("llama.cpp peer llama4 at positions %lld..8191: max |ours - llama.cpp| = %.3g; 8192..%lld: %.3g\n",
              static_cast<long long>(from), before.max_abs, static_cast<long long>(T - 1), after.max_abs);
  INFO(before.message("llama4_long logits before position 8192 vs llama.cpp"));
  CHECK(before.ok());
  INFO(after.message("llama4_long logits from position 8192 on vs llama.cpp"));
  CHECK(after.ok());
  // Either feature switched off moves the logits far outside these bounds: the comparison sees both.
  Config no_tt = cfg;
  no_tt.temperature_tuning = false;
  const auto r_tt = testing::compare(rows_of(forward(no_tt), from, T), tail, kNewChunk);
  Config one_chunk = cfg;
  one_chunk.chunk_attn_window_size = 16384;
  const auto r_chunk = testing::compare(rows_of(forward(one_chunk), from, T), tail, kNewChunk);
  std::printf("  without temperature tuning: %.3g; with one 16384-position chunk: %.3g\n", r_tt.max_abs,
              r_chunk.max_abs);
  CHECK(r_tt.max_abs > 0.05);
  CHECK(r_chunk.max_abs > 1.0);

  const auto m = models::make_built_any_model(cfg, {}, MAXTEXT_BLOCKS_BUILT);
  m->load(w.tensors);
  models::GenerateOptions go;
  go.max_new_tokens = S;
  CHECK(m->generate({prompt}, go).tokens.at(0) == greedy);
}

TEST_CASE("GGUF llama4 metadata: what llama.cpp hard-codes becomes config, rope_freqs gives the llama3_rope_* keys, "
          "what MaxText's llama4 cannot express is refused by name", "[models][llamacpp][gguf][llama4]") {
  const std::string path = test::require(peer_dir("llama4") + "/model.gguf", "the llama.cpp peer fixture for llama4");
  const io::GgufFile g0 = io::read_gguf(path);
  const Config c = io::config_from_gguf(g0);
  CHECK(c.is("llama4"));
  CHECK(c.nope_layer_interval == 4);
  CHECK(c.chunk_attn_window_size == 8192);
  CHECK(c.interleave_moe_layer_step == 2);
  CHECK((c.temperature_tuning && c.use_qk_norm && c.rope_use_scale));
  // Scout's rope_scaling (factor 16, low = high = 1, original 8192), recovered from the divisors.
  CHECK(c.llama3_rope_factor == Approx(16.0).epsilon(1e-6));
  CHECK(c.llama3_rope_low_freq_factor == 1.0);
  CHECK(c.llama3_rope_high_freq_factor == 1.0);
  CHECK(c.llama3_rope_original_context == 8192.0);
  // Llama 3.1's divisors (factor 8, high 4: an interpolated band) are recovered too.
  Config l31 = c;
  l31.llama3_rope_factor = 8;
  l31.llama3_rope_high_freq_factor = 4;
  Tensor<float, 1> div({c.head_dim / 2});
  for (std::int64_t i = 0; i < div.size(); ++i) div(i) = static_cast<float>(io::detail::llama3_divisor(l31, i, c.head_dim));
  io::GgufFile g = g0;
  g.tensors.tensors.at("rope_freqs.weight") = AnyTensor::from(div, "rope_freqs.weight");
  const Config r31 = io::config_from_gguf(g);
  CHECK(r31.llama3_rope_factor == Approx(8.0).epsilon(1e-6));
  CHECK(r31.llama3_rope_high_freq_factor == Approx(4.0).epsilon(1e-4));
  div(1) = 3.0f;  // not a LLaMA-3 table
  g.tensors.tensors.at("rope_freqs.weight") = AnyTensor::from(div, "rope_freqs.weight");
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("is not the LLaMA-3 scaling recovered from the table"));
  g = g0;
  g.tensors.tensors.erase("rope_freqs.weight");
  CHECK_FALSE(io::config_from_gguf(g).rope_use_scale);  // Maverick-style: no scaling
  g = g0;
  g.metadata["llama4.expert_used_count"] = io::GgufValue::of_u32(2);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("llama4.expert_used_count 2"));
  g = g0;
  g.metadata["llama4.attention.sliding_window"] = io::GgufValue::of_u32(0);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("llama4.attention.sliding_window 0"));
  g = g0;
  g.metadata["llama4.attention.sliding_window_pattern"] = io::GgufValue::of_u32(2);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("llama4.attention.sliding_window_pattern differs"));
  g = g0;
  g.metadata["llama4.expert_count"] = io::GgufValue::of_u32(128);  // llama.cpp: no qk norm for the 128-expert model
  CHECK_FALSE(io::config_from_gguf(g).use_qk_norm);
  // A llama4 config on another architecture's GGUF is refused by name, not read with llama4's tensor names.
  CHECK_THROWS_WITH(io::load_weights(peer_dir("qwen3moe") + "/model.gguf", c),
                    Catch::Contains("decoder_block llama4 reads GGUF architecture llama4, found 'qwen3moe'"));
  // A missing shared expert is named.
  g = g0;
  g.tensors.tensors.erase("blk.1.ffn_up_shexp.weight");
  CHECK_THROWS_WITH(io::import_gguf_llama4(g.tensors, c), Catch::Contains("missing tensor blk.1.ffn_up_shexp.weight"));
}

TEST_CASE("GGUF deepseek2: metadata to config as its config.json would give, kv_b put back together from k_b and "
          "v_b, the next-n layer as MTP layer 1, what MaxText's deepseek cannot express refused by name",
          "[models][llamacpp][gguf]") {
  const std::string path = test::require(peer_dir("deepseek2") + "/model.gguf", "the llama.cpp peer fixture for deepseek2");
  const io::GgufFile g0 = io::read_gguf(path);
  const Config c = io::config_from_gguf(g0);
  CHECK((c.is("deepseek") && c.attention_type == "mla" && c.model_name == "deepseek3-gguf"));
  CHECK((c.num_decoder_layers == 3 && c.first_num_dense_layers == 1 && c.mtp_num_layers == 1));
  CHECK((c.q_lora_rank == 32 && c.kv_lora_rank == 32 && c.qk_nope_head_dim == 16 && c.qk_rope_head_dim == 8 &&
         c.v_head_dim == 16 && c.head_dim == 24));
  CHECK((c.num_experts == 8 && c.num_experts_per_tok == 2 && c.shared_experts == 1 && c.moe_mlp_dim == 32));
  CHECK((c.routed_score_func == "sigmoid" && c.routed_bias && c.routed_scaling_factor == 2.5));
  CHECK((c.n_routing_groups == 4 && c.topk_routing_group == 2));
  // rope.scaling.yarn_log_multiplier 0.1 is 0.1 * mscale_all_dim (the converter's factor undone, as llama.cpp does).
  CHECK((c.rope_type == "yarn" && c.rope_factor == 4.0 && c.original_max_position_embeddings == 16 &&
         c.mscale == Approx(1.0).epsilon(1e-6) && c.rope_interleave));
  const io::TensorMap t = io::import_gguf_deepseek(g0.tensors, c);
  // wkv_b [kv_lora, heads, nope + v]: head h's key columns are k_b[h] transposed, its value columns v_b[h].
  const AnyTensor& kv = t.at("decoder.moe_layers_0.self_attention.wkv_b.kernel");
  const AnyTensor& kb = g0.tensors.at("blk.1.attn_k_b.weight");  // [heads, kv_lora, nope]
  const AnyTensor& vb = g0.tensors.at("blk.1.attn_v_b.weight");  // [heads, v, kv_lora]
  REQUIRE(kv.shape == std::vector<std::int64_t>{32, 4, 32});
  for (std::int64_t r : {0, 7, 31}) {
    for (std::int64_t h : {0, 3}) {
      CHECK(kv.element((r * 4 + h) * 32 + 5) == kb.element((h * 32 + r) * 16 + 5));
      CHECK(kv.element((r * 4 + h) * 32 + 16 + 9) == vb.element((h * 16 + 9) * 32 + r));
    }
  }
  CHECK(t.has("mtp_block.mtp_layer_1.mtp_1_projection.kernel"));
  CHECK(t.has("mtp_block.mtp_layer_1.mtp_1_transformer_layer.DeepSeekMoeBlock_0.MoeBlock_0.gate.bias"));
  // Without MTP layers asked for, the next-n layer is not read.
  Config c0 = c;
  c0.mtp_num_layers = 0;
  const io::TensorMap t0 = io::import_gguf_deepseek(g0.tensors, c0);
  CHECK((t0.tensors.size() < t.tensors.size() && !t0.has("mtp_block.mtp_layer_1.mtp_1_projection.kernel")));

  io::GgufFile g = g0;
  g.tensors.tensors.erase("blk.2.attn_v_b.weight");
  CHECK_THROWS_WITH(io::import_gguf_deepseek(g.tensors, c), Catch::Contains("missing tensor blk.2.attn_v_b.weight"));
  g = g0;  // a next-n layer with a head norm of its own
  g.tensors.tensors.emplace("blk.3.nextn.shared_head_norm.weight", g0.tensors.at("blk.3.nextn.enorm.weight"));
  CHECK_THROWS_WITH(io::import_gguf_deepseek(g.tensors, c),
                    Catch::Contains("blk.3.nextn.shared_head_norm.weight differs from output_norm.weight"));
  g.tensors.tensors.at("blk.3.nextn.shared_head_norm.weight") = g0.tensors.at("output_norm.weight");
  CHECK(io::import_gguf_deepseek(g.tensors, c).tensors.size() == t.tensors.size());  // a copy of it is taken
  g = g0;
  g.metadata["deepseek2.expert_gating_func"] = io::GgufValue::of_u32(3);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("expert_gating_func 3"));
  g = g0;
  g.metadata["deepseek2.rope.scaling.type"] = io::GgufValue::of_string("linear");
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("rope.scaling.type 'linear'"));
  g = g0;
  g.metadata["deepseek2.attention.temperature_scale"] = io::GgufValue::of_f32(0.5f);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("attention.temperature_scale"));
  g = g0;
  g.metadata["deepseek2.expert_weights_norm"] = io::GgufValue::of_bool(false);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("norm_topk_prob = 0 with scoring_func sigmoid"));
  g = g0;
  std::erase_if(g.infos, [](const io::GgufTensorInfo& i) { return i.name == "output.weight"; });
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("no output.weight"));

  // DeepSeek-V2-Lite's shape: V2 routing (softmax, no bias, no groups), no q LoRA, plain interleaved RoPE.
  const io::GgufFile l = io::read_gguf(test::require(peer_dir("deepseek2_lite") + "/model.gguf", "the lite fixture"));
  const Config cl = io::config_from_gguf(l);
  CHECK((cl.is("deepseek") && cl.model_name == "deepseek2-gguf" && cl.q_lora_rank == 0 && cl.mtp_num_layers == 0));
  CHECK((cl.routed_score_func == "softmax" && !cl.routed_bias && cl.shared_experts == 2 && cl.rope_factor == 1.0));
  CHECK(io::import_gguf_deepseek(l.tensors, cl).has("decoder.dense_layers_0.self_attention.query.kernel"));
  io::GgufFile lg = l;  // llama.cpp's group-limited routing over softmax scores (top-2 sums) is not V2's
  lg.metadata["deepseek2.expert_group_count"] = io::GgufValue::of_u32(4);
  CHECK_THROWS_WITH(io::config_from_gguf(lg), Catch::Contains("expert_group_count 4 without a routing bias"));
}

TEST_CASE("GGUF qwen3next with its next-n layer: the MTP layer's tensors as llama.cpp's converter stores them, a "
          "missing one named, mtp_num_layers=0 runs without", "[models][llamacpp][gguf][mtp]") {
  const std::string path =
      test::require(peer_dir("qwen3next_mtp") + "/model.gguf", "the llama.cpp peer fixture for qwen3next_mtp");
  const io::GgufFile g0 = io::read_gguf(path);
  const Config c = io::config_from_gguf(g0);
  CHECK((c.num_decoder_layers == 4 && c.mtp_num_layers == 1));  // block_count 5 with nextn_predict_layers 1
  const io::TensorMap t = io::import_gguf_qwen3_next(g0.tensors, c);
  const std::string m = "mtp_block.mtp_layer_1.mtp_1_";
  // enorm / hnorm / shared_head_norm stored as 1 + w; eh_proj [D, 2D] as the projection [2D, D].
  CHECK(t.at(m + "embedding_norm.scale").element(5) ==
        static_cast<float>(g0.tensors.at("blk.4.nextn.enorm.weight").element(5) - 1.0));
  CHECK(t.at(m + "final_norm.scale").element(7) ==
        static_cast<float>(g0.tensors.at("blk.4.nextn.shared_head_norm.weight").element(7) - 1.0));
  CHECK(t.at(m + "projection.kernel").shape == std::vector<std::int64_t>{2 * c.emb_dim, c.emb_dim});
  CHECK(t.at(m + "transformer_layer.attention.attention.query.kernel").shape ==
        std::vector<std::int64_t>{c.emb_dim, c.num_query_heads, 2 * c.head_dim});
  io::GgufFile g = g0;
  g.tensors.tensors.erase("blk.4.nextn.eh_proj.weight");
  CHECK_THROWS_WITH(io::import_gguf_qwen3_next(g.tensors, c),
                    Catch::Contains("blk.4.nextn.eh_proj.weight") && Catch::Contains("mtp_num_layers=0"));
  g = g0;
  g.tensors.tensors.erase("blk.4.attn_q.weight");
  CHECK_THROWS_WITH(io::import_gguf_qwen3_next(g.tensors, c), Catch::Contains("missing tensor blk.4.attn_q.weight"));
  Config off = c;
  off.mtp_num_layers = 0;
  const io::TensorMap main_only = io::import_gguf_qwen3_next(g.tensors, off);  // blk.4.* not read
  CHECK(main_only.tensors.count(m + "projection.kernel") == 0);
}

TEST_CASE("GGUF qwen3next: metadata to config, llama.cpp's stored forms undone, what MaxText's qwen3_next cannot "
          "express refused by name", "[models][llamacpp][gguf]") {
  const std::string path = test::require(peer_dir("qwen3next") + "/model.gguf", "the llama.cpp peer fixture for qwen3next");
  const io::GgufFile g0 = io::read_gguf(path);
  const Config c = io::config_from_gguf(g0);
  CHECK(c.is("qwen3_next"));
  CHECK((c.gdn_num_key_heads == 2 && c.gdn_num_value_heads == 4 && c.gdn_key_head_dim == 16 && c.gdn_value_head_dim == 16));
  CHECK((c.gdn_conv_kernel_dim == 4 && c.inhomogeneous_layer_cycle_interval == 4));
  CHECK(c.partial_rotary_factor == 0.25);  // rope.dimension_count 4 of head_dim 16
  CHECK((c.norm_topk_prob && c.num_experts == 4 && c.num_experts_per_tok == 2 && c.moe_mlp_dim == 32));
  // The stored forms: norms as 1 + w, ssm_a = -exp(A_log).
  const io::TensorMap t = io::import_gguf_qwen3_next(g0.tensors, c);
  const AnyTensor& n = g0.tensors.at("blk.0.attn_norm.weight");
  CHECK(t.at("decoder.layers_0.input_layernorm.scale").element(3) == static_cast<float>(n.element(3) - 1.0));
  const double a = g0.tensors.at("blk.1.ssm_a").element(2);
  CHECK(t.at("decoder.layers_1.attention.A_log").element(2) == Approx(std::log(-a)).epsilon(1e-6));
  CHECK(t.at("decoder.layers_1.attention.norm.rms_norm.scale").element(0) ==
        g0.tensors.at("blk.1.ssm_norm.weight").element(0));  // the gated norm is a plain scale, stored as it is
  io::GgufFile g = g0;
  Tensor<float, 1> pos({4});
  for (std::int64_t i = 0; i < 4; ++i) pos(i) = 0.5f;
  g.tensors.tensors.at("blk.2.ssm_a") = AnyTensor::from(pos, "blk.2.ssm_a");
  CHECK_THROWS_WITH(io::import_gguf_qwen3_next(g.tensors, c), Catch::Contains("blk.2.ssm_a[0] = 0.5"));
  g = g0;
  g.tensors.tensors.erase("blk.0.attn_gate.weight");
  CHECK_THROWS_WITH(io::import_gguf_qwen3_next(g.tensors, c), Catch::Contains("missing tensor blk.0.attn_gate.weight"));
  g = g0;
  // Layer 1 becomes an attention layer: its DeltaNet attn_qkv is read as a fused q | k | v and refused by shape.
  g.metadata["qwen3next.full_attention_interval"] = io::GgufValue::of_u32(2);
  CHECK_THROWS_WITH(io::import_gguf_qwen3_next(g.tensors, io::config_from_gguf(g)),
                    Catch::Contains("blk.1.attn_qkv.weight: expected shape [192,64]"));
  io::GgufValue flags;
  flags.type = io::GgufType::array;
  flags.elem = io::GgufType::boolean;
  flags.ints = {1, 0, 1, 0};
  g = g0;
  g.metadata["qwen3next.attention.recurrent_layers"] = flags;
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("attention.recurrent_layers[1]"));
  flags.ints = {1, 1, 1, 0};
  g.metadata["qwen3next.attention.recurrent_layers"] = flags;
  CHECK_NOTHROW(io::config_from_gguf(g));
  g = g0;
  g.metadata["qwen3next.expert_shared_feed_forward_length"] = io::GgufValue::of_u32(64);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("expert_shared_feed_forward_length 64"));
  g = g0;
  g.metadata["qwen3next.ssm.inner_size"] = io::GgufValue::of_u32(66);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("ssm.inner_size 66"));
  g = g0;
  g.metadata["qwen3next.rope.dimension_count"] = io::GgufValue::of_u32(5);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("rope.dimension_count 5"));
  // Multi-token-prediction layers appended by the converter (nextn_predict_layers, blk.4.*) become MTP layers: here
  // a fake eh_proj of the wrong shape is refused by name; with mtp_num_layers=0 blk.4.* is not read.
  g = g0;
  g.metadata["qwen3next.block_count"] = io::GgufValue::of_u32(5);
  g.metadata["qwen3next.nextn_predict_layers"] = io::GgufValue::of_u32(1);
  for (const auto& [name, tensor] : g0.tensors.tensors) {
    if (name.rfind("blk.3.", 0) == 0) g.tensors.tensors.emplace("blk.4." + name.substr(6), tensor);
  }
  g.tensors.tensors.emplace("blk.4.nextn.eh_proj.weight", g0.tensors.at("blk.3.attn_k.weight"));
  Config cm = io::config_from_gguf(g);
  CHECK((cm.num_decoder_layers == 4 && cm.mtp_num_layers == 1));
  CHECK_THROWS_WITH(io::import_gguf_qwen3_next(g.tensors, cm),
                    Catch::Contains("blk.4.nextn.eh_proj.weight: expected shape [64,128]"));
  cm.mtp_num_layers = 0;
  CHECK(io::import_gguf_qwen3_next(g.tensors, cm).tensors.size() == t.tensors.size());
  g.metadata["qwen3next.nextn_predict_layers"] = io::GgufValue::of_u32(5);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("nextn_predict_layers 5"));
  // A mixed-type file (z in bf16, the q | k | v rows in f32) regroups in f32.
  g = g0;
  {
    const AnyTensor& z = g0.tensors.at("blk.0.attn_gate.weight");
    Tensor<bf16, 2> zb({z.shape[0], z.shape[1]});
    for (std::int64_t i = 0; i < zb.size(); ++i) zb.data()[i] = bf16(static_cast<float>(z.element(i)));
    g.tensors.tensors.at("blk.0.attn_gate.weight") = AnyTensor::from(zb, "blk.0.attn_gate.weight");
    const io::TensorMap mixed = io::import_gguf_qwen3_next(g.tensors, c);
    const AnyTensor& k = mixed.at("decoder.layers_0.attention.in_proj_qkvz.kernel");  // [D, per key head q k v z]
    CHECK(k.dtype == DType::f32);
    // Key head 0's z rows follow its q (16), k (16) and v (2 x 16) rows: z row 0 is column 64 of the kernel.
    CHECK(k.element(5 * k.shape[1] + 64) == static_cast<float>(zb(0, 5)));
  }
  // qwen35moe: decoder_block qwen3_5 with MRoPE sections from rope.dimension_sections; a dense qwen35 is refused.
  io::GgufFile q = io::read_gguf(test::require(peer_dir("qwen35moe") + "/model.gguf", "the qwen35moe peer fixture"));
  const Config c35 = io::config_from_gguf(q);
  CHECK((c35.is("qwen3_5") && c35.use_mrope && c35.mrope_section() == std::vector<std::int64_t>{1, 1, 0}));
  io::GgufValue sec;
  sec.type = io::GgufType::array;
  sec.elem = io::GgufType::i32;
  sec.ints = {1, 1, 0, 2};
  q.metadata["qwen35moe.rope.dimension_sections"] = sec;
  CHECK_THROWS_WITH(io::config_from_gguf(q), Catch::Contains("rope.dimension_sections"));
  q.metadata["general.architecture"] = io::GgufValue::of_string("qwen35");
  CHECK_THROWS_WITH(io::config_from_gguf(q), Catch::Contains("dense Qwen3.5"));
  CHECK_THROWS_WITH(io::load_weights(peer_dir("qwen3next") + "/model.gguf", c35),
                    Catch::Contains("decoder_block qwen3_5 reads GGUF architecture qwen35moe, found 'qwen3next'"));
  // A qwen3_next config on another architecture's GGUF is refused by name.
  CHECK_THROWS_WITH(io::load_weights(peer_dir("qwen3moe") + "/model.gguf", c),
                    Catch::Contains("decoder_block qwen3_next reads GGUF architecture qwen3next, found 'qwen3moe'"));
}

TEST_CASE("GGUF gemma4: per-layer kv heads and head sizes, proportional RoPE from rope_freqs, K = V from the missing "
          "attn_v, what MaxText's gemma4 cannot express refused by name", "[models][llamacpp][gguf]") {
  const std::string path = test::require(peer_dir("gemma4") + "/model.gguf", "the llama.cpp peer fixture for gemma4");
  const io::GgufFile g0 = io::read_gguf(path);
  const Config c = io::config_from_gguf(g0);
  CHECK(c.is("gemma4"));
  CHECK((c.head_dim == 16 && c.global_head_dim == 32 && c.num_kv_heads == 2 && c.global_num_kv_heads == 1));
  CHECK((c.share_kv_projections && c.global_rope_proportion == 0.25 && c.local_rope_proportion == 1.0));
  CHECK((c.local_rope_max_timescale == 10000.0 && c.global_rope_max_timescale == 1000000.0));
  CHECK((c.sliding_window_size == 8 && c.final_logits_soft_cap == 30.0 && c.num_experts <= 1));
  const Config m = io::config_from_gguf(io::read_gguf(peer_dir("gemma4_moe") + "/model.gguf"));
  CHECK((m.num_experts == 4 && m.num_experts_per_tok == 2 && m.moe_mlp_dim == 32 && m.norm_topk_prob));
  CHECK((!m.share_kv_projections && m.global_num_kv_heads == 2));

  io::GgufFile g = g0;
  Tensor<float, 1> rf({16});
  for (std::int64_t i = 0; i < 16; ++i) rf(i) = static_cast<float>(g0.tensors.at("rope_freqs.weight").element(i));
  rf(5) = 2.0f;  // neither rotated (1) nor unrotated (1e30)
  g.tensors.tensors.at("rope_freqs.weight") = AnyTensor::from(rf, "rope_freqs.weight");
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("rope_freqs.weight[5] = 2"));
  io::GgufValue arr;
  arr.type = io::GgufType::array;
  arr.elem = io::GgufType::i32;
  arr.ints = {2, 2, 1, 2, 2, 1};  // layer 2 (sliding window) with another kv head count
  g = g0;
  g.metadata["gemma4.attention.head_count_kv"] = arr;
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("head_count_kv differs between sliding-window layers"));
  arr.elem = io::GgufType::boolean;
  arr.ints = {1, 1, 1, 1, 0, 0};
  g = g0;
  g.metadata["gemma4.attention.sliding_window_pattern"] = arr;
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("sliding_window_pattern differs from 5 sliding-window"));
  g = g0;
  g.metadata["gemma4.attention.shared_kv_layers"] = io::GgufValue::of_u32(2);
  CHECK_THROWS_AS(io::config_from_gguf(g), UnsupportedError);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("gemma4_small"));
  g = g0;
  g.metadata["gemma4.rope.dimension_count_swa"] = io::GgufValue::of_u32(8);
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("rope.dimension_count_swa 8"));
  g = g0;
  g.tensors.tensors.erase("blk.5.layer_output_scale.weight");
  CHECK_THROWS_WITH(io::import_gguf_gemma4(g.tensors, c), Catch::Contains("missing tensor blk.5.layer_output_scale.weight"));
  // The K = V global layer has no value projection: an attn_v there is an unexpected tensor, named.
  g = g0;
  g.tensors.tensors.emplace("blk.5.attn_v.weight", g0.tensors.at("blk.5.attn_k.weight"));
  CHECK_THROWS_WITH(io::import_gguf_gemma4(g.tensors, c), Catch::Contains("blk.5.attn_v.weight"));
  CHECK_THROWS_WITH(io::load_weights(peer_dir("qwen3moe") + "/model.gguf", c),
                    Catch::Contains("decoder_block gemma4 reads GGUF architecture gemma4, found 'qwen3moe'"));
}

TEST_CASE("GGUF llama: rope_freqs.weight with MaxText's LLaMA-3.1 divisors selects its RoPE, other tables are refused",
          "[models][llamacpp][gguf]") {
  io::GgufFile g = io::read_gguf(test::require(peer_dir("llama") + "/model.gguf", "the llama.cpp peer fixture for llama"));
  const Config plain = io::config_from_gguf(g);
  CHECK(plain.rope_type != "llama3.1");
  Tensor<float, 1> div({plain.head_dim / 2});
  for (std::int64_t i = 0; i < div.size(); ++i) div(i) = static_cast<float>(io::detail::llama3_divisor(plain, i, plain.head_dim));
  g.tensors.tensors["rope_freqs.weight"] = AnyTensor::from(div, "rope_freqs.weight");
  CHECK(io::config_from_gguf(g).rope_type == "llama3.1");
  div(div.size() - 1) = 2.0f;  // MaxText's factor for the lowest frequency is 8
  g.tensors.tensors["rope_freqs.weight"] = AnyTensor::from(div, "rope_freqs.weight");
  CHECK_THROWS_WITH(io::config_from_gguf(g), Catch::Contains("differs from MaxText's LLaMA-3.1 scaling"));
}

TEST_CASE("maxtext generate (the CLI) on every llama.cpp peer GGUF prints llama.cpp's greedy tokens",
          "[models][llamacpp][cli]") {
  for (const std::string arch : {"llama", "qwen2", "qwen3", "qwen3moe", "gemma", "gemma2", "gemma3", "gemma3_d48",
                                 "olmo2", "gpt-oss", "llama4", "qwen3next", "qwen35moe", "gemma4",
                                 "gemma4_moe", "deepseek2", "deepseek2_lite"}) {
    INFO("llama.cpp peer fixture " << arch);
    const std::string dir = peer_dir(arch);
    const std::string path = test::require(dir + "/model.gguf", "the llama.cpp peer fixture for " + arch);
    const auto prompt = ids(test::npy(dir + "/tokens.npy"));
    const auto greedy = ids(test::npy(dir + "/greedy.npy"));
    std::string p, want;
    for (std::size_t i = 0; i < prompt.size(); ++i) p += (i ? "," : "") + std::to_string(prompt[i]);
    for (std::size_t i = 0; i < greedy.size(); ++i) want += (i ? "," : "") + std::to_string(greedy[i]);
    const std::string text = test::run_cli("generate --weights " + path + " --tokens " + p + " --max-new-tokens " +
                                           std::to_string(greedy.size()));
    CHECK(text.find("tokens[0]: " + want + "\n") != std::string::npos);
  }
}

TEST_CASE("GGUF Gemma metadata the importer reads or refuses: rope.freq_base_swa, attention.sliding_window_pattern",
          "[models][llamacpp][gguf]") {
  io::GgufFile g3 = io::read_gguf(peer_dir("gemma3") + "/model.gguf");
  CHECK(io::config_from_gguf(g3).local_rope_max_timescale == 20000.0);  // the fixture's key
  g3.metadata.erase("gemma3.rope.freq_base_swa");
  CHECK(io::config_from_gguf(g3).local_rope_max_timescale == 10000.0);  // llama.cpp's default
  auto flags = [](std::vector<std::int64_t> f) {
    io::GgufValue v;
    v.type = io::GgufType::array;
    v.elem = io::GgufType::boolean;
    v.ints = std::move(f);
    return v;
  };
  const std::string key = "gemma3.attention.sliding_window_pattern";
  g3.metadata[key] = io::GgufValue::of_u32(6);
  CHECK_NOTHROW(io::config_from_gguf(g3));
  g3.metadata[key] = flags({1, 1, 1, 1, 1, 0});
  CHECK_NOTHROW(io::config_from_gguf(g3));
  g3.metadata[key] = io::GgufValue::of_u32(4);
  CHECK_THROWS_AS(io::config_from_gguf(g3), UnsupportedError);
  CHECK_THROWS_WITH(io::config_from_gguf(g3), Catch::Contains(key));
  g3.metadata[key] = flags({1, 1, 1, 1, 0, 0});
  CHECK_THROWS_WITH(io::config_from_gguf(g3), Catch::Contains(key));

  io::GgufFile g2 = io::read_gguf(peer_dir("gemma2") + "/model.gguf");
  g2.metadata["gemma2.attention.sliding_window_pattern"] = io::GgufValue::of_u32(2);
  CHECK_NOTHROW(io::config_from_gguf(g2));
  g2.metadata["gemma2.rope.freq_base_swa"] = io::GgufValue::of_f32(10000.0f);  // = rope.freq_base: accepted
  CHECK_NOTHROW(io::config_from_gguf(g2));
  g2.metadata["gemma2.rope.freq_base_swa"] = io::GgufValue::of_f32(20000.0f);
  CHECK_THROWS_AS(io::config_from_gguf(g2), UnsupportedError);
  CHECK_THROWS_WITH(io::config_from_gguf(g2), Catch::Contains("rope.freq_base_swa"));
}
