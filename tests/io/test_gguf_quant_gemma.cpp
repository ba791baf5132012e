// Gemma (gemma2, gemma3) and OLMo 3 (llama.cpp's olmo2) GGUF files whose matrices are block-quantised (Q4_K, Q5_K,
// Q6_K, Q4_0 and Q8_0, mixed as llama.cpp's K_M files mix them) computed from their blocks (io::load_weights(...,
// keep_blocks = true), Policy<B, ggml_byte, float>) against the same files decoded to f32 at load (keep_blocks = false).
//
// The files are written here: seeded random blocks (random quants, fp16 scales scaled so that each matrix's values
// have an rms of 1/sqrt(inputs)), F32 norms, llama.cpp's gemma2 / gemma3 / olmo2 names and metadata, the head tied.
// llama.cpp's quantiser is not needed: the comparison is between two ways of computing the same dequantised values,
// and every block type is decoded by the same quant::dequantize_row either way (tests/core/test_ggml_quants.cpp checks
// it against gguf-py).
//
// What the Gemma importer does with the blocks (families/gemma/import.hpp): the embedding normalizer (Gemma 3: bf16(sqrt(D));
// Gemma 2: sqrt(D) in f32) and Gemma 2's query scale (head_dim^-0.5) ride as the matrices' value_scale, applied after
// decoding as float(double(w) * s), the f32 product the decoded file's fold computes; OLMo 3's importer only makes
// views, as llama's. So with blocks kept the model is the same function as the decoded one up to summation order, and
// up to the tied head's table:
//   - runtime-typed (ggml) weights, blocks kept vs decoded to F32: max |diff| <= 1e-5 * max(1, max |logit|)
//     (measured: up to 2.4e-6; the CPU's prefill is bit-identical, see the printed lines), where both heads read the
//     same values;
//   - MaxText's tied head rounds its table to bf16 (Gemma's logits_via_embedding): the float32 model (Policy<B, float>,
//     what --weight-type float32 gives) and a runtime-typed model whose table is F32 / F16 / BF16 rows (the decoded
//     file; a file of F16 matrices: the last test) multiply by that rounded copy; a table of blocks is used as the file
//     has it (layers/embeddings.hpp bf16_rounded_copy). The Gemma 3 file's table is made bf16-exact after the
//     normalizer (Q6_K blocks with power-of-two d, sub-scales of two significant bits, D = 256: normalizer 16), so
//     that the 1e-5 bound holds; the Gemma 2 file's (D = 512, normalizer 22.627417) is not, and there the difference
//     is that rounding's: bounded by 2^-8 of the largest logit (measured 7.9e-4), the final norm's output (what the
//     head multiplies) within 1e-5. OLMo 3's tied head is a dense view: no rounding, the 1e-5 bound.
// On the CPU backend (prefill: panels dequantised; decode, one row at a time with the KV cache: the fused
// decode-and-dot kernels, value_scale applied to the dot product) and on the reference backend.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/gemma/gemma2.hpp"
#include "maxtext/families/gemma/gemma3.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/olmo3/olmo3.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/cli.hpp"
#include "support/ggml_model_bytes.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

const std::vector<std::int32_t> kTokens = {1, 42, 300, 7, 511, 128, 64, 3, 200, 99};

/// The four models a check runs: {CPU, reference} x {runtime-typed (ggml), f32} weights.
template <class CpuG_, class CpuF_, class RefG_, class RefF_>
struct Models {
  using CpuG = CpuG_;
  using CpuF = CpuF_;
  using RefG = RefG_;
  using RefF = RefF_;
};
#define MODELS_OF(L)                                                                                          \
  Models<models::Transformer<Policy<cpu::Backend, ggml_byte, float>, L>, models::Transformer<Policy<cpu::Backend, float>, L>, \
         models::Transformer<Policy<reference::Backend, ggml_byte, float>, L>,                                    \
         models::Transformer<Policy<reference::Backend, float>, L>>

struct Spec {
  std::string arch;  // gemma2, gemma3 or olmo2
  std::int64_t D, N, K, H, F, V, file_layers;
  bool bf16_exact_table;
  bool f16_matrices = false;  // every matrix F16 (a file of float matrices, as convert_hf_to_gguf.py writes them)
};

/// `rows` x `cols` values of block type `t` as random blocks: random bytes, then the fp16 scale fields (d, dmin / m)
/// set uniform in [-1, 1] and multiplied by one factor so that the decoded values' rms is about `rms`.
std::vector<std::byte> random_blocks(quant::BlockType t, std::int64_t rows, std::int64_t cols, double rms, std::mt19937& rng) {
  const quant::BlockFormat& f = quant::block_format(t);
  REQUIRE(cols % f.block == 0);
  const std::int64_t nb = rows * cols / f.block;
  std::vector<std::byte> b(static_cast<std::size_t>(nb * f.bytes));
  for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto each_scale = [&](auto&& fn) {
    for (std::int64_t k = 0; k < nb; ++k) {
      for (int off : f.fp16_scales) {
        if (off < 0) continue;
        std::uint16_t h;
        std::memcpy(&h, b.data() + k * f.bytes + off, 2);
        h = fn(h);
        std::memcpy(b.data() + k * f.bytes + off, &h, 2);
      }
    }
  };
  each_scale([&](std::uint16_t) { return fp16(u(rng)).bits; });
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  quant::dequantize_row(t, b.data(), v.data(), rows * cols);
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  const float factor = static_cast<float>(rms / std::sqrt(ss / static_cast<double>(v.size())));
  each_scale([&](std::uint16_t h) {
    fp16 old;
    old.bits = h;
    return fp16(static_cast<float>(old) * factor).bits;
  });
  return b;
}

/// Q6_K blocks whose values d * sc * (q - 32) are bf16-exact and stay so times a power of two: d = +-2^-11, sub-scales
/// of at most two significant bits (so |sc * (q - 32)| has at most 7).
std::vector<std::byte> bf16_exact_q6_k(std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  const quant::BlockFormat& f = quant::block_format(quant::BlockType::q6_k);
  const std::int64_t nb = rows * cols / f.block;
  static const int kScales[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, -1, -2, -3, -4, -6, -8, -12, -16, -24};
  std::vector<std::byte> b(static_cast<std::size_t>(nb * f.bytes));
  for (std::int64_t k = 0; k < nb; ++k) {
    std::byte* blk = b.data() + k * f.bytes;
    for (int i = 0; i < 192; ++i) blk[i] = static_cast<std::byte>(rng() & 0xff);  // ql, qh
    for (int i = 0; i < 16; ++i) blk[192 + i] = static_cast<std::byte>(static_cast<std::int8_t>(kScales[rng() % 18]));
    const std::uint16_t d = fp16((rng() & 1) ? 0x1p-11f : -0x1p-11f).bits;
    std::memcpy(blk + 208, &d, 2);
  }
  return b;
}

/// A Gemma 2 / Gemma 3 / OLMo 3 (olmo2) GGUF file with llama.cpp's names and random block-quantised matrices (or F16
/// ones: Spec::f16_matrices); the head is tied to the embedding (no output.weight).
std::string write_gemma_gguf(const Spec& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  io::GgufWriter w;
  auto u32 = [](std::int64_t v) { return io::GgufValue::of_u32(static_cast<std::uint32_t>(v)); };
  const std::string p = s.arch + ".";
  w.set("general.architecture", io::GgufValue::of_string(s.arch));
  w.set(p + "embedding_length", u32(s.D));
  w.set(p + "block_count", u32(s.file_layers));
  w.set(p + "feed_forward_length", u32(s.F));
  w.set(p + "attention.head_count", u32(s.N));
  w.set(p + "attention.head_count_kv", u32(s.K));
  w.set(p + "attention.key_length", u32(s.H));
  w.set(p + "attention.value_length", u32(s.H));
  w.set(p + "attention.layer_norm_rms_epsilon", io::GgufValue::of_f32(1e-6f));
  w.set(p + "context_length", u32(128));
  w.set(p + "rope.freq_base", io::GgufValue::of_f32(10000.0f));
  w.set(p + "attention.sliding_window", u32(4));  // shorter than the prompt: the local layers' window matters
  if (s.arch == "olmo2") {  // OLMo 3 (layers i % 4 < 3 local)
    io::GgufValue pattern;
    pattern.type = io::GgufType::array;
    pattern.elem = io::GgufType::boolean;
    for (std::int64_t i = 0; i < s.file_layers; ++i) pattern.ints.push_back(i % 4 != 3 ? 1 : 0);
    w.set(p + "attention.sliding_window_pattern", pattern);
  } else if (s.arch == "gemma2") {
    w.set(p + "attn_logit_softcapping", io::GgufValue::of_f32(50.0f));
    w.set(p + "final_logit_softcapping", io::GgufValue::of_f32(30.0f));
  } else {
    w.set(p + "rope.freq_base_swa", io::GgufValue::of_f32(10000.0f));
  }
  auto matrix = [&](const std::string& name, quant::BlockType t, std::int64_t rows, std::int64_t cols) {
    if (s.f16_matrices) {
      Tensor<fp16, 2> v({rows, cols});
      const float sd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols)));
      for (std::int64_t i = 0; i < v.size(); ++i) v.data()[i] = fp16(sd * normal(rng));
      w.add_tensor(name, AnyTensor::from(v));
      return;
    }
    w.add_raw_tensor(name, {rows, cols}, static_cast<std::uint32_t>(t),
                     random_blocks(t, rows, cols, 1.0 / std::sqrt(static_cast<double>(cols)), rng));
  };
  auto norm = [&](const std::string& name, std::int64_t n) {  // llama.cpp's files hold 1 + w
    Tensor<float, 1> v({n});
    for (std::int64_t i = 0; i < n; ++i) v(i) = 1.0f + 0.1f * normal(rng);
    w.add_tensor(name, AnyTensor::from(v));
  };
  if (s.bf16_exact_table) {
    w.add_raw_tensor("token_embd.weight", {s.V, s.D}, static_cast<std::uint32_t>(quant::BlockType::q6_k),
                     bf16_exact_q6_k(s.V, s.D, rng));
  } else {
    matrix("token_embd.weight", quant::BlockType::q6_k, s.V, s.D);
  }
  norm("output_norm.weight", s.D);
  using BT = quant::BlockType;
  for (std::int64_t i = 0; i < s.file_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    if (s.arch != "olmo2") {  // OLMo 3 has the post-norms only
      norm(b + "attn_norm.weight", s.D);
      norm(b + "ffn_norm.weight", s.D);
    }
    norm(b + "post_attention_norm.weight", s.D);
    norm(b + "post_ffw_norm.weight", s.D);
    // The mix of a Q4_K_M file (Q4_K, Q6_K for some v / down), and a few other types: Q5_K, Q4_0, Q8_0. (Not Q8_0
    // for a scaled query: a decoded file's Q8_0 query keeps its blocks with the scale folded into their fp16 scales,
    // a rounding that blocks kept as DType::ggml, the scale riding as value_scale, do not have.)
    matrix(b + "attn_q.weight", i % 2 == 0 ? BT::q4_k : BT::q5_k, s.N * s.H, s.D);
    matrix(b + "attn_k.weight", i == 1 ? BT::q8_0 : BT::q4_k, s.K * s.H, s.D);
    matrix(b + "attn_v.weight", i % 2 == 0 ? BT::q6_k : BT::q4_k, s.K * s.H, s.D);
    matrix(b + "attn_output.weight", BT::q4_k, s.D, s.N * s.H);
    if (s.arch == "gemma3") {  // per head
      norm(b + "attn_q_norm.weight", s.H);
      norm(b + "attn_k_norm.weight", s.H);
    } else if (s.arch == "olmo2") {  // over all heads
      norm(b + "attn_q_norm.weight", s.N * s.H);
      norm(b + "attn_k_norm.weight", s.K * s.H);
    }
    matrix(b + "ffn_gate.weight", i == 1 ? BT::q4_0 : BT::q4_k, s.F, s.D);
    matrix(b + "ffn_up.weight", BT::q4_k, s.F, s.D);
    matrix(b + "ffn_down.weight", i % 2 == 0 ? BT::q6_k : BT::q4_k, s.D, s.F);
  }
  // The test program's own scratch directory (catch_main.cpp).
  const std::string path = "./" + std::string(s.f16_matrices ? "f16_" : "blocks_") + s.arch + "_" + std::to_string(seed) + ".gguf";
  w.write(path);
  return path;
}

Tensor<std::int32_t, 2> prompt() {
  Tensor<std::int32_t, 2> ids({1, static_cast<std::int64_t>(kTokens.size())});
  for (std::size_t i = 0; i < kTokens.size(); ++i) ids.data()[i] = kTokens[i];
  return ids;
}

template <class M, class Be>
std::vector<float> logits_of(const std::string& path, const Config& cfg, bool keep_blocks, Be be) {
  M model(cfg, std::move(be));
  model.load(io::load_weights(path, cfg, keep_blocks).tensors);
  const Tensor<float, 3> l = model.forward(prompt());
  return std::vector<float>(l.data(), l.data() + l.size());
}

/// The final norm's output (the hidden states the head multiplies), by capture.
template <class M, class Be>
std::vector<float> final_norm_of(const std::string& path, const Config& cfg, bool keep_blocks, Be be) {
  M model(cfg, std::move(be));
  model.load(io::load_weights(path, cfg, keep_blocks).tensors);
  layers::Capture cap({"decoder.decoder_norm"});
  models::ForwardOptions fo;
  fo.capture = &cap;
  (void)model.forward(prompt(), fo);
  const AnyTensor& h = cap.at("decoder.decoder_norm");
  const Tensor<float, 1> f = h.to<float, 1>({h.numel()});
  return std::vector<float>(f.data(), f.data() + f.size());
}

/// One token at a time through the KV cache (decode-sized products: the fused decode-and-dot kernels).
template <class M>
std::vector<float> decoded_logits_of(const std::string& path, const Config& cfg) {
  M model(cfg, cpu::Backend(cpu::Options{1}));
  model.load(io::load_weights(path, cfg, true).tensors);
  auto cache = model.make_cache(1, static_cast<std::int64_t>(kTokens.size()));
  std::vector<float> out;
  for (std::int32_t t : kTokens) {
    Tensor<std::int32_t, 2> ids({1, 1});
    ids.data()[0] = t;
    const Tensor<float, 3> l = model.forward(ids, cache);
    out.insert(out.end(), l.data(), l.data() + l.size());
  }
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}
/// max |a - b| / max(1, max |b|).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m / std::max(1.0, max_abs(b));
}

template <class Ms>
void check_blocks(const Spec& s, std::uint32_t seed) {
  INFO(s.arch);
  const std::string path = write_gemma_gguf(s, seed);
  const Config cfg = io::read_weights_config(path).value();
  REQUIRE(cfg.decoder_block == (s.arch == "olmo2" ? "olmo3" : s.arch));
  REQUIRE(cfg.vocab_size == s.V);
  CHECK(io::gguf_keeps_blocks(cfg));

  // (a) The importer keeps the blocks: scales as value_scale, no matrix decoded on the way.
  const io::LoadedWeights w = io::load_weights(path, cfg, true);
  CHECK(w.file_weight_type == "ggml");
  const AnyTensor& emb = w.tensors.at("token_embedder.embedding");
  CHECK(emb.dtype == DType::ggml);
  CHECK(emb.ggml_type == static_cast<std::uint32_t>(quant::BlockType::q6_k));
  const float normalizer = static_cast<float>(std::sqrt(static_cast<double>(s.D)));
  CHECK(emb.value_scale == (s.arch == "olmo2"    ? 1.0
                            : s.arch == "gemma3" ? static_cast<double>(round_to<bf16>(normalizer))
                                                 : static_cast<double>(normalizer)));
  const std::string q0 = s.arch == "gemma2"  ? "decoder.layers_0.self_attention_local.query.kernel"
                         : s.arch == "olmo2" ? "decoder.layers_0.attention.query.kernel"
                                             : "decoder.layers_0.self_attention.query.kernel";
  const AnyTensor& q = w.tensors.at(q0);
  CHECK(q.dtype == DType::ggml);
  CHECK(q.ggml_type == static_cast<std::uint32_t>(quant::BlockType::q4_k));
  CHECK(q.value_scale == (s.arch == "gemma2" ? static_cast<double>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.H)))) : 1.0));
  {
    typename Ms::CpuG model(cfg, cpu::Backend(cpu::Options{1}));
    model.load(w.tensors);
    test::GgmlTypeBytes tb;
    model.visit(tb);
    CHECK(tb.bytes.count(quant::kTypeF32) == 0);
    CHECK(tb.bytes.count(quant::kTypeF16) == 0);
    for (const std::uint32_t t : {2u, 8u, 12u, 13u, 14u}) CHECK(tb.bytes.count(t) == 1);
    CHECK(tb.total() == test::gguf_matrix_bytes(path));  // the model's matrices are the file's bytes
  }

  // (b) Blocks kept equal the file decoded to F32, to summation order, up to the tied head: the float32 Gemma model
  // rounds its table to bf16 (MaxText's attend), and so does a runtime-typed model whose table is F32 rows (the
  // decoded file); a table of blocks is used as the file has it. Nothing to round for a bf16-exact table or a dense
  // head (OLMo 3's tied head is a view of the embedding as logits_dense). Where the heads differ, the hidden states
  // they multiply (the final norm's output) still agree to summation order.
  using CpuG = typename Ms::CpuG;
  using CpuF = typename Ms::CpuF;
  using RefG = typename Ms::RefG;
  using RefF = typename Ms::RefF;
  const cpu::Backend one(cpu::Options{1});
  const std::vector<float> cpu_blocks = logits_of<CpuG>(path, cfg, true, one);
  const std::vector<float> cpu_decoded = logits_of<CpuG>(path, cfg, false, one);
  const std::vector<float> cpu_f32 = logits_of<CpuF>(path, cfg, false, one);
  const std::vector<float> ref_blocks = logits_of<RefG>(path, cfg, true, reference::Backend());
  const std::vector<float> ref_f32 = logits_of<RefF>(path, cfg, false, reference::Backend());
  const std::vector<float> cpu_steps = decoded_logits_of<CpuG>(path, cfg);
  const double e_dec = rel_diff(cpu_blocks, cpu_decoded), e_ref = rel_diff(ref_blocks, cpu_blocks),
               e_steps = rel_diff(cpu_steps, cpu_blocks), e_f32 = rel_diff(cpu_blocks, cpu_f32),
               e_ref_f32 = rel_diff(ref_blocks, ref_f32), e_dec_f32 = rel_diff(cpu_decoded, cpu_f32),
               e_hidden = rel_diff(final_norm_of<CpuG>(path, cfg, true, one), final_norm_of<CpuG>(path, cfg, false, one));
  std::printf("%s (max |logit| %.3g), max |diff| / max |logit|, blocks kept vs decoded to F32 (ggml weights): cpu %.3g "
              "(final norm %.3g), reference %.3g, cpu one token at a time %.3g; vs the float32 model: cpu %.3g, "
              "reference %.3g, decoded %.3g\n",
              s.arch.c_str(), max_abs(cpu_decoded), e_dec, e_hidden, e_ref, e_steps, e_f32, e_ref_f32, e_dec_f32);
  CHECK(max_abs(cpu_decoded) > 1.0);
  constexpr double kSummationOrder = 1e-5;
  const bool rounded_head = cfg.logits_via_embedding && !s.bf16_exact_table;
  const double head_bound = rounded_head ? 0x1p-8 : kSummationOrder;
  CHECK(e_hidden <= kSummationOrder);
  CHECK(e_dec <= head_bound);
  CHECK(e_ref <= kSummationOrder);
  CHECK(e_steps <= kSummationOrder);
  CHECK(e_dec_f32 <= kSummationOrder);
  CHECK(e_f32 <= head_bound);
  CHECK(e_ref_f32 <= head_bound);
  if (rounded_head) CHECK(e_f32 > kSummationOrder);  // the rounding is there (and is all there is)
}

}  // namespace

TEST_CASE("Gemma 3 GGUF blocks (Q4_K, Q6_K, ...): kept equal decoded", "[io][gguf][quant][gemma]") {
  // D = 256: normalizer bf16(sqrt(256)) = 16; 6 layers (5 local, 1 global); 4 heads of 64, 2 KV heads.
  check_blocks<MODELS_OF(layers::Gemma3DecoderLayer)>({"gemma3", 256, 4, 2, 64, 256, 512, 6, true}, 31);
}

TEST_CASE("Gemma 2 GGUF blocks: value_scale for query and embedding", "[io][gguf][quant][gemma]") {
  // D = 512: normalizer sqrt(512) = 22.627417 (f32); head_dim 128: query scale 128^-0.5 (not a power of two), both
  // as value_scale; 2 file layers = 1 (local, global) pair; soft caps 50 / 30.
  check_blocks<MODELS_OF(layers::Gemma2DecoderLayer)>({"gemma2", 512, 4, 2, 128, 512, 512, 2, false}, 32);
}

TEST_CASE("OLMo 3 GGUF blocks (llama.cpp olmo2): kept equal decoded", "[io][gguf][quant][olmo3]") {
  // No transforms (the importer's views, as llama's); the head tied to the embedding as a dense view (no bf16
  // table: logits_via_embedding is off). 4 layers (L, L, L, G), q/k norms over all heads.
  check_blocks<MODELS_OF(layers::Olmo3DecoderLayer)>({"olmo2", 256, 4, 2, 64, 256, 512, 4, false}, 33);
}

TEST_CASE("maxtext logits on Gemma 3 and OLMo 3 block files: default (blocks) equals float32", "[io][gguf][quant][cli]") {
  // The CLI keeps the blocks by default (it says "weights kept as ggml"); --weight-type float32 decodes them. The Gemma 3
  // block file's table is bf16-exact (see above), so the two agree to summation order; the Gemma 3 file of F16
  // matrices is read in place too, its tied head from BF16 rows rounded as MaxText's attend rounds (the next test).
  const std::string tokens = "1,42,300,7,511,128,64,3";
  for (const Spec& s : {Spec{"gemma3", 256, 4, 2, 64, 256, 512, 6, true}, Spec{"olmo2", 256, 4, 2, 64, 256, 512, 4, false},
                        Spec{"gemma3", 256, 4, 2, 64, 256, 512, 6, false, true}}) {
    INFO(s.arch << (s.f16_matrices ? " (F16 matrices)" : ""));
    const std::string path = write_gemma_gguf(s, 41);
    std::vector<std::vector<float>> outs;
    // A program built without the ggml policy (CI's sanitizer build) decodes the blocks by default instead.
    const bool ggml_built = std::system((test::cli_path() + " logits --threads 1 --tokens " + tokens + " --weights " + path +
                                         " --weight-type ggml --out ./cli_probe.npy >/dev/null 2>&1").c_str()) == 0;
    for (const char* wt : {"", " --weight-type float32"}) {
      const std::string out = "./cli_logits_" + s.arch + (s.f16_matrices ? "_f16" : "") + (wt[0] ? "_f32" : "") + ".npy";
      const std::string text = test::run_cli("logits --threads 1 --tokens " + tokens + " --weights " + path + " --out " + out + wt);
      CHECK((text.find("weights kept as ggml") != std::string::npos) == (wt[0] == 0 && ggml_built));
      const AnyTensor l = test::npy(out);
      const Tensor<float, 1> f = l.to<float, 1>({l.numel()});
      outs.emplace_back(f.data(), f.data() + f.size());
    }
    REQUIRE(outs[0].size() == 8 * 512);
    const double e = rel_diff(outs[0], outs[1]);
    std::printf("%s: maxtext logits, default (ggml blocks) vs --weight-type float32: max |diff| / max |logit| %.3g\n",
                s.arch.c_str(), e);
    CHECK(e <= 1e-5);
  }
}

TEST_CASE("Gemma 3 GGUF of F16 matrices: read in place, the tied head reads MaxText's bf16-rounded table",
          "[io][gguf][gemma]") {
  // A file of float matrices whose model ties its head (Gemma) is read in place like a block file: the lookup reads
  // the file's F16 rows with the normalizer (16) as value_scale, and the tied head multiplies by BF16 rows of
  // bf16(E x 16), the values MaxText's attend reads (layers/embeddings.hpp bf16_rounded_copy). F16 values times 16
  // are not bf16-exact, so a head reading the file's rows as they are would differ from the float32 model by that
  // rounding (about 1e-3 of the largest logit, as the Gemma 2 block file above); reading the rounded table, the two
  // agree to summation order, on the CPU (prefill and one token at a time) and the reference backend.
  using Ms = MODELS_OF(layers::Gemma3DecoderLayer);
  const Spec s{"gemma3", 256, 4, 2, 64, 256, 512, 6, false, true};
  const std::string path = write_gemma_gguf(s, 35);
  const Config cfg = io::read_weights_config(path).value();
  REQUIRE(cfg.logits_via_embedding);
  const io::LoadedWeights w = io::load_weights(path, cfg, true);
  CHECK(w.file_weight_type == "ggml");
  const AnyTensor& emb = w.tensors.at("token_embedder.embedding");
  CHECK(emb.dtype == DType::ggml);
  CHECK(emb.ggml_type == quant::kTypeF16);
  CHECK(emb.value_scale == 16.0);
  {
    Ms::CpuG model(cfg, cpu::Backend(cpu::Options{1}));
    model.load(w.tensors);
    test::GgmlTypeBytes tb;
    model.visit(tb);
    CHECK(tb.bytes.size() == 1);
    CHECK(tb.bytes.count(quant::kTypeF16) == 1);
    CHECK(tb.total() == test::gguf_matrix_bytes(path));  // the model's matrices are the file's bytes
  }
  const cpu::Backend one(cpu::Options{1});
  const std::vector<float> cpu_kept = logits_of<Ms::CpuG>(path, cfg, true, one);
  const std::vector<float> cpu_f32 = logits_of<Ms::CpuF>(path, cfg, false, one);
  const std::vector<float> ref_kept = logits_of<Ms::RefG>(path, cfg, true, reference::Backend());
  const std::vector<float> ref_f32 = logits_of<Ms::RefF>(path, cfg, false, reference::Backend());
  const std::vector<float> cpu_steps = decoded_logits_of<Ms::CpuG>(path, cfg);
  const double e_cpu = rel_diff(cpu_kept, cpu_f32), e_ref = rel_diff(ref_kept, ref_f32),
               e_steps = rel_diff(cpu_steps, cpu_f32);
  std::printf("gemma3 F16 file (max |logit| %.3g), read in place vs the float32 model, max |diff| / max |logit|: cpu %.3g, "
              "reference %.3g, cpu one token at a time %.3g\n",
              max_abs(cpu_f32), e_cpu, e_ref, e_steps);
  CHECK(max_abs(cpu_f32) > 1.0);
  CHECK(e_cpu <= 1e-5);
  CHECK(e_ref <= 1e-5);
  CHECK(e_steps <= 1e-5);
}
