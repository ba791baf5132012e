// Real quantised GGUF files made by llama.cpp's own quantiser (tests/reference/quant_model_fixtures.py: a seeded
// 2-layer Llama, dim 256, quantised to Q4_K_M, Q5_K_M, Q6_K, Q4_0, IQ4_XS, Q3_K_M and Q2_K; the K_M files mix
// Q4_K/Q5_K with Q6_K tensors, Q3_K_M mixes Q3_K, Q4_K, Q5_K and Q6_K, Q2_K mixes Q2_K, Q3_K and Q6_K, Q4_0 and IQ4_XS
// keep output.weight in Q6_K). Our exact-mode logits (weights dequantised, f32 activations)
// are checked against three llama.cpp oracles (tests/reference/llama_cpp_logits.cpp, one thread, F32 KV cache):
//   - llama.cpp on gguf-py's dequantised F32 copy of the same file: the same function computed in f32, so they
//     agree to f32 summation-order noise (max |diff| <= 1e-4 for logits of rms ~4; measured ~1e-5);
//   - llama.cpp on the quantised file itself: it quantises activations to 8 bits (Q8_K / Q8_0 blocks), so the bound is
//     that rounding's effect, 3% relative rms (measured 1.3-1.7%, the same as llama.cpp's own quantised-vs-dequantised
//     difference);
//   - llama.cpp on the F32 model before quantisation: the difference is the quantisation error of the weights; the
//     bound per type is 1.5x the error llama.cpp itself shows between the F32 and the dequantised model (relative rms).
// And `maxtext generate` runs on each file (exact mode, and bf16 / q8_0 weight storage).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/layers/llama2.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

using F32 = Policy<cpu::Backend, float>;
using Llama = models::Transformer<F32, layers::LlamaDecoderLayer>;

const std::vector<std::int32_t> kTokens = {1, 42, 300, 7, 511, 128, 64, 3};  // as in quant_model_fixtures.py

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
std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  INFO(out);
  CHECK(rc == 0);
  return out;
}

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
                       Case{"Q2_K", 0.507 * 1.5}}) {
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

TEST_CASE("maxtext generate runs on llama.cpp-quantised GGUF files", "[io][gguf][quant][cli]") {
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  for (const char* type : {"Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0", "IQ4_XS", "Q3_K_M", "Q2_K"}) {
    for (const char* wt : {"", " --weight-type bfloat16", " --weight-type q8_0"}) {
      INFO(type << wt);
      const std::string out = run_command(::maxtext::test::cli_path() + " generate --threads 1 --max-new-tokens 4 --weights " +
                                          dir + "/tiny-" + type + ".gguf --prompt \"Once upon\"" + wt);
      CHECK(out.find("tokens/s") != std::string::npos);
    }
  }
}
