// Real quantised GGUF files made by llama.cpp's own quantiser (tests/reference/quant_model_fixtures.py: a seeded
// 2-layer Llama, dim 256, quantised to Q4_K_M, Q5_K_M, Q6_K, Q4_0, IQ4_XS, Q3_K_M, Q2_K, Q4_1, Q5_0 and Q5_1; the K_M
// files mix Q4_K/Q5_K with Q6_K tensors, Q3_K_M mixes Q3_K, Q4_K, Q5_K and Q6_K, Q2_K mixes Q2_K, Q3_K and Q6_K, the
// 32-value types keep output.weight in Q6_K). Our exact-mode logits (weights dequantised, f32 activations)
// are checked against three llama.cpp oracles (tests/reference/llama_cpp_logits.cpp, one thread, F32 KV cache):
//   - llama.cpp on gguf-py's dequantised F32 copy of the same file: the same function computed in f32, so they
//     agree to f32 summation-order noise (max |diff| <= 1e-4 for logits of rms ~4; measured ~1e-5);
//   - llama.cpp on the quantised file itself: it quantises activations to 8 bits (Q8_K / Q8_0 blocks), so the bound is
//     that rounding's effect, 3% relative rms (measured 1.3-1.7%, the same as llama.cpp's own quantised-vs-dequantised
//     difference);
//   - llama.cpp on the F32 model before quantisation: the difference is the quantisation error of the weights; the
//     bound per type is 1.5x the error llama.cpp itself shows between the F32 and the dequantised model (relative rms).
// And `maxtext generate` runs on each file (exact mode, and bf16 / q8_0 weight storage).
// Runtime-typed weights (Policy<..., ggml_byte>, the CLI's default for these files) compute from the file's blocks:
// exact products of the same dequantised values, so the first oracle's bound holds for them too, and no matrix may
// have been decoded to F32 on the way (every matrix keeps its block type; the bytes equal the file's).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/ggml_model_bytes.hpp"
#include "support/command.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

const std::vector<std::int32_t> kTokens = {1, 42, 300, 7, 511, 128, 64, 3};  // as in quant_model_fixtures.py
const char* const kTypes[] = {"Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0", "IQ4_XS", "Q3_K_M", "Q2_K", "Q4_1", "Q5_0", "Q5_1"};

using F32 = Policy<cpu::Backend, float>;
using Llama = models::Transformer<F32, layers::LlamaDecoderLayer>;
using GgmlLlama = models::Transformer<Policy<cpu::Backend, ggml_byte, float>, layers::LlamaDecoderLayer>;
using RefGgmlLlama = models::Transformer<Policy<reference::Backend, ggml_byte, float>, layers::LlamaDecoderLayer>;

template <class Model>
std::vector<float> logits_of(Model& model) {
  Tensor<std::int32_t, 2> ids({1, static_cast<std::int64_t>(kTokens.size())});
  for (std::size_t i = 0; i < kTokens.size(); ++i) ids.data()[i] = kTokens[i];
  const Tensor<float, 3> l = model.forward(ids);
  return std::vector<float>(l.data(), l.data() + l.size());
}


double rel_rms(const std::vector<float>& a, const AnyTensor& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double r = ref.element(static_cast<std::int64_t>(i));
    num += (a[i] - r) * (a[i] - r);
    den += r * r;
  }
  return std::sqrt(num / den);
}
double max_abs(const std::vector<float>& a, const AnyTensor& ref) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - ref.element(static_cast<std::int64_t>(i))));
  return m;
}
std::string run_command(const std::string& cmd) { return ::maxtext::test::run_command(cmd + " 2>&1"); }

}  // namespace

TEST_CASE("llama.cpp-quantised GGUF files: exact-mode logits against llama.cpp's", "[io][gguf][quant]") {
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  const AnyTensor f32_ref = test::npy(dir + "/llama-F32.npy");
  struct Case {
    const char* type;
    double f32_bound;  // 1.5x llama.cpp's own F32-vs-dequantised relative rms (see the file comment)
  };
  for (const Case c : {Case{"Q4_K_M", 0.156 * 1.5}, Case{"Q5_K_M", 0.0793 * 1.5}, Case{"Q6_K", 0.0395 * 1.5},
                       Case{"Q4_0", 0.182 * 1.5}, Case{"IQ4_XS", 0.165 * 1.5}, Case{"Q3_K_M", 0.2615 * 1.5},
                       Case{"Q2_K", 0.507 * 1.5}, Case{"Q4_1", 0.1657 * 1.5}, Case{"Q5_0", 0.1027 * 1.5},
                       Case{"Q5_1", 0.0815 * 1.5}}) {
    INFO(c.type);
    const std::string path = dir + "/tiny-" + c.type + ".gguf";
    const Config cfg = io::read_weights_config(path).value();
    CHECK(cfg.vocab_size == 512);
    Llama model(cfg, cpu::Backend(cpu::Options{1}));
    model.load(io::load_weights(path, cfg).tensors);
    Tensor<std::int32_t, 2> ids({1, static_cast<std::int64_t>(kTokens.size())});
    for (std::size_t i = 0; i < kTokens.size(); ++i) ids.data()[i] = kTokens[i];
    const Tensor<float, 3> l = model.forward(ids);
    REQUIRE(l.dim(1) * l.dim(2) == static_cast<std::int64_t>(kTokens.size()) * 512);
    const std::vector<float> ours(l.data(), l.data() + l.size());
    const AnyTensor deq = test::npy(dir + "/llama-" + c.type + "-deq.npy");
    const AnyTensor quant = test::npy(dir + "/llama-" + c.type + ".npy");
    const double e_deq = max_abs(ours, deq), e_quant = rel_rms(ours, quant), e_f32 = rel_rms(ours, f32_ref);
    std::printf("%-7s max |ours - llama.cpp(dequantised F32)| %.3g; rel rms vs llama.cpp(%s) %.4f; vs F32 model %.4f "
                "(bound %.4f)\n", c.type, e_deq, c.type, e_quant, e_f32, c.f32_bound);
    CHECK(e_deq <= 1e-4);
    CHECK(e_quant <= 0.03);
    CHECK(e_f32 <= c.f32_bound);
  }
}

TEST_CASE("llama.cpp-quantised GGUF: blocks computed in place", "[io][gguf][quant]") {
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  for (const char* type : kTypes) {
    INFO(type);
    const std::string path = dir + "/tiny-" + type + ".gguf";
    const Config cfg = io::read_weights_config(path).value();
    io::LoadedWeights w = io::load_weights(path, cfg, true);
    CHECK(w.file_weight_type == "ggml");
    GgmlLlama model(cfg, cpu::Backend(cpu::Options{1}));
    model.load(w.tensors);
    test::GgmlTypeBytes tb;
    model.visit(tb);
    // Every matrix keeps a block type of the file: none was decoded to F32 (type 0) or widened.
    CHECK(tb.bytes.count(quant::kTypeF32) == 0);
    CHECK(tb.bytes.count(quant::kTypeF16) == 0);
    CHECK(tb.total() == test::gguf_matrix_bytes(path));
    if (std::string(type) == "Q4_K_M") CHECK((tb.bytes.count(12) == 1 && tb.bytes.count(14) == 1));
    // Exact products of the dequantised values: llama.cpp's logits on the dequantised copy, to summation order.
    const std::vector<float> ours = logits_of(model);
    const AnyTensor deq = test::npy(dir + "/llama-" + type + "-deq.npy");
    const double e = max_abs(ours, deq);
    std::printf("%-7s ggml blocks in place: max |ours - llama.cpp(dequantised F32)| %.3g\n", type, e);
    CHECK(e <= 1e-4);
    // Two rows at once (the direct decode kernel's multi-row path) and prefill in panels agree with one row.
    Tensor<std::int32_t, 2> ids2({2, 3});
    for (int i = 0; i < 6; ++i) ids2.data()[i] = kTokens[static_cast<std::size_t>(i)];
    const Tensor<float, 3> l2 = model.forward(ids2);
    for (std::int64_t b = 0; b < 2; ++b) {
      Tensor<std::int32_t, 2> one({1, 3});
      for (int i = 0; i < 3; ++i) one.data()[i] = ids2(b, i);
      const Tensor<float, 3> l1 = model.forward(one);
      double m = 0;
      for (std::int64_t i = 0; i < l1.size(); ++i) m = std::max(m, std::fabs(double(l1.data()[i]) - l2.data()[b * l1.size() + i]));
      CHECK(m <= 1e-4);
    }
  }
}

TEST_CASE("llama.cpp-quantised GGUF: blocks with 8-bit activations", "[io][gguf][quant]") {
  // Decode-sized products (up to 4 rows) quantise the activations per 32 values (qblock::dot_q8). The error is that
  // rounding's: measured 1.1-1.2% relative rms against the exact model, 1.3-2.1% against llama.cpp's own 8-bit
  // arithmetic on the file (which quantises per 256 for the K types). Bounds: 2% and 3% (the exact mode's bound).
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  for (const char* type : kTypes) {
    INFO(type);
    const std::string path = dir + "/tiny-" + type + ".gguf";
    const Config cfg = io::read_weights_config(path).value();
    GgmlLlama model(cfg, cpu::Backend(cpu::Options{1, true}));
    model.load(io::load_weights(path, cfg, true).tensors);
    auto cache = model.make_cache(1, static_cast<std::int64_t>(kTokens.size()));
    std::vector<float> ours;
    for (std::size_t t0 = 0; t0 < kTokens.size(); t0 += 4) {  // 4 rows per step: the direct kernels
      Tensor<std::int32_t, 2> ids({1, 4});
      for (std::size_t i = 0; i < 4; ++i) ids.data()[i] = kTokens[t0 + i];
      const Tensor<float, 3> l = model.forward(ids, cache);
      ours.insert(ours.end(), l.data(), l.data() + l.size());
    }
    const double e_deq = rel_rms(ours, test::npy(dir + "/llama-" + type + "-deq.npy"));
    const double e_file = rel_rms(ours, test::npy(dir + "/llama-" + type + ".npy"));
    std::printf("%-7s 8-bit activations: rel rms vs exact (llama.cpp dequantised) %.4f, vs llama.cpp(%s) %.4f\n", type,
                e_deq, type, e_file);
    CHECK(e_deq > 1e-4);  // the 8-bit path ran (the exact one is within 1e-6)
    CHECK(e_deq <= 0.02);
    CHECK(e_file <= 0.03);
  }
}

TEST_CASE("llama.cpp-quantised GGUF: blocks on the reference backend", "[io][gguf][quant]") {
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  for (const char* type : {"Q4_K_M", "Q4_0"}) {
    INFO(type);
    const std::string path = dir + "/tiny-" + type + ".gguf";
    const Config cfg = io::read_weights_config(path).value();
    RefGgmlLlama model(cfg, reference::Backend());
    model.load(io::load_weights(path, cfg, true).tensors);
    CHECK(max_abs(logits_of(model), test::npy(dir + "/llama-" + type + "-deq.npy")) <= 1e-4);
  }
}

TEST_CASE("maxtext generate runs on llama.cpp-quantised GGUF files", "[io][gguf][quant][cli]") {
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  for (const char* type : kTypes) {
    for (const char* wt : {"", " --weight-type bfloat16", " --weight-type q8_0", " --weight-type float32"}) {
      INFO(type << wt);
      const std::string out = run_command(::maxtext::test::cli_path() + " generate --threads 1 --max-new-tokens 4 --weights " +
                                          dir + "/tiny-" + type + ".gguf --prompt \"Once upon\"" + wt);
      CHECK(out.find("tokens/s") != std::string::npos);
    }
  }
}

TEST_CASE("maxtext logits: a quantised file's default (blocks) equals float32 widening", "[io][gguf][quant][cli]") {
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  const std::string tmp = ".";  // catch_main.cpp runs each test program in its own scratch directory
  for (const char* type : {"Q4_K_M", "Q6_K", "Q4_0"}) {
    INFO(type);
    std::vector<AnyTensor> outs;
    for (const char* wt : {"", " --weight-type float32"}) {
      const std::string out = tmp + "/quant_logits_" + type + (wt[0] ? "_f32" : "") + ".npy";
      run_command(::maxtext::test::cli_path() + " logits --threads 1 --tokens 1,42,300,7,511,128,64,3 --weights " + dir +
                  "/tiny-" + type + ".gguf --out " + out);
      outs.push_back(test::npy(out));
    }
    REQUIRE(outs[0].numel() == outs[1].numel());
    const Tensor<float, 1> a = outs[0].to<float, 1>({outs[0].numel()});
    CHECK(max_abs(std::vector<float>(a.data(), a.data() + a.size()), outs[1]) <= 1e-4);
  }
}
