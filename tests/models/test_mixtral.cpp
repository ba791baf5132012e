// MixtralDecoderLayer and the Mixtral Transformer against the PyTorch fixtures (tests/reference/deepseek_reference.py):
// the layer, the model in MaxText (unscanned, scanned) and Hugging Face naming (config.json, query / sqrt(head_dim),
// experts w1/w3/w2), incremental decoding with batch 2, the CLI, bad checkpoints.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/mistral/mixtral.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using Mixtral = models::Transformer<P32, layers::MixtralDecoderLayer>;

namespace {

const std::string kDir = test::fixtures_dir() + "/mixtral_model/";

void close(const AnyTensor& a, const AnyTensor& e, testing::Tolerance tol, const std::string& name) {
  if (std::getenv("MAXTEXT_TEST_REPORT")) std::printf("%s\n", testing::compare(a, e, tol).message(name).c_str());
  test::expect_close(a, e, tol, name);
}
void close_scaled(const AnyTensor& a, const AnyTensor& e, double tol, const std::string& name) {
  if (std::getenv("MAXTEXT_TEST_REPORT")) std::printf("%s\n", testing::compare_scaled(a, e, tol).message(name).c_str());
  test::expect_close_scaled(a, e, tol, name);
}

Tensor<std::int32_t, 2> tokens() {
  const auto t = test::npy(kDir + "tokens.npy");
  return t.to<std::int32_t, 2>({t.shape[0], t.shape[1]});
}
Tensor<std::int32_t, 2> cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({t.dim(0), n});
  for (std::int64_t b = 0; b < t.dim(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(b, c0 + i);
  }
  return s;
}
Mixtral load(const std::string& file = "model.safetensors") {
  const Config cfg = io::load_config(kDir + "config.yml");
  Mixtral m(cfg);
  m.load(io::load_weights(kDir + file, cfg).tensors);
  return m;
}

}  // namespace

TEST_CASE("MixtralDecoderLayer matches the torch fixture", "[layers][mixtral]") {
  const std::string d = test::fixtures_dir() + "/mixtral_layer/";
  const Config c = io::load_config(d + "config.yml");
  test::Backend be;
  layers::MixtralDecoderLayer<P32> layer(c, {0, "layer", "layer.attn", "layer.moe"});
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(d + "weights.safetensors"), be);
  layers::Capture cap({"layer.attn", "layer.moe", "layer.moe.topk_indices", "layer.moe.expert_counts"});
  const auto y = models::run_layer<P32>(layer, params, be, test::npy(d + "x.npy"), nullptr, nullptr, &cap);
  close(AnyTensor::from(y), test::npy(d + "out.npy"), test::tol::f32_layer, "mixtral_layer.out");
  close(cap.at("layer.attn"), test::npy(d + "attn.npy"), test::tol::f32_layer, "mixtral_layer.attn");
  close(cap.at("layer.moe"), test::npy(d + "mlp.npy"), test::tol::f32_layer, "mixtral_layer.moe");
  CHECK(cap.at("layer.moe.topk_indices").shape == std::vector<std::int64_t>{2, 7, 2});
  double total = 0;
  for (std::int64_t e = 0; e < 4; ++e) total += cap.at("layer.moe.expert_counts").element(e);
  CHECK(total == 2 * 7 * 2);
}

TEST_CASE("Mixtral model logits and activations match the torch model (unscanned and scanned)", "[models][mixtral]") {
  for (const char* file : {"model.safetensors", "model_scanned.safetensors"}) {
    Mixtral m = load(file);
    layers::Capture cap;
    cap.request_all();
    models::ForwardOptions fo;
    fo.capture = &cap;
    const auto logits = m.forward(tokens(), fo);
    INFO(file);
    close(AnyTensor::from(logits), test::npy(kDir + "logits.npy"), test::tol::f32_logits, "logits");
    for (const char* n : {"token_embedder", "decoder.layers_0", "decoder.layers_1", "decoder.decoder_norm"}) {
      close_scaled(cap.at(n), test::npy(kDir + "act_" + n + ".npy"), 1e-5, n);
    }
  }
}

TEST_CASE("Mixtral incremental decoding (batch 2) reproduces the reference logits", "[models][mixtral][decode]") {
  Mixtral m = load();
  const auto tok = tokens();
  const auto ref = test::npy(kDir + "logits.npy");
  const std::int64_t T = tok.dim(1), P0 = 3;
  auto cache = m.make_cache(tok.dim(0), T);
  close(AnyTensor::from(m.forward(cols(tok, 0, P0), cache)), ref.narrow(1, 0, P0), test::tol::f32_logits, "prefill");
  for (std::int64_t t = P0; t < T; ++t) {
    close(AnyTensor::from(m.forward(cols(tok, t, 1), cache)), ref.narrow(1, t, 1), test::tol::f32_logits,
          "decode step " + std::to_string(t));
  }
}

TEST_CASE("Mixtral from Hugging Face naming and config.json gives the reference logits", "[models][mixtral][hf]") {
  const Config cfg = io::load_hf_deepseek_config(kDir + "config.json");
  CHECK(cfg.decoder_block == "mixtral");
  CHECK(cfg.num_kv_heads == 2);
  CHECK(cfg.moe_mlp_dim == 24);
  const auto w = io::load_weights(kDir + "hf_model.safetensors", cfg);
  CHECK(w.naming == io::WeightNaming::hf);
  Mixtral m(cfg);
  m.load(w.tensors);
  close(AnyTensor::from(m.forward(tokens())), test::npy(kDir + "logits.npy"), test::tol::f32_logits, "hf logits");
#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry instantiates every block and policy: checked once, on the CPU
  // The registry picks the same type from the config.
  const bool same = models::with_model_type<test::Backend>(cfg, []<class M>() { return std::is_same_v<M, Mixtral>; });
  CHECK(same);
#endif
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits (CLI) on the Hugging Face Mixtral checkpoint", "[models][mixtral][cli]") {
  const auto tok = tokens();
  std::string ids;
  for (std::int64_t b = 0; b < tok.dim(0); ++b) {
    for (std::int64_t t = 0; t < tok.dim(1); ++t) ids += (t ? "," : (b ? "/" : "")) + std::to_string(tok(b, t));
  }
  const std::string out = "mixtral_cli_logits.npy";
  const std::string cmd = ::maxtext::test::cli_path() + " logits --config " + kDir + "config.json --weights " + kDir +
                          "hf_model.safetensors --tokens " + ids + " --incremental 3 --out " + out + " > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  close(test::npy(out), test::npy(kDir + "logits.npy"), test::tol::f32_logits, "cli logits");
  std::remove(out.c_str());
}
#endif

TEST_CASE("Bad Mixtral checkpoints are reported by name", "[models][mixtral][errors]") {
  const Config cfg = io::load_hf_deepseek_config(kDir + "config.json");
  io::TensorMap raw = io::read_safetensors(kDir + "hf_model.safetensors");
  raw.tensors.erase("model.layers.1.block_sparse_moe.experts.3.w2.weight");
  CHECK_THROWS_WITH(io::canonicalize_hf_deepseek(raw, cfg),
                    Catch::Contains("missing expert tensor model.layers.1.block_sparse_moe.experts.3.w2.weight"));
  io::TensorMap raw2 = io::read_safetensors(kDir + "hf_model.safetensors");
  raw2.tensors["model.layers.0.block_sparse_moe.experts.2.w1.weight"] =
      raw2.tensors.at("model.layers.0.block_sparse_moe.experts.2.w1.weight").narrow(0, 0, 20);
  CHECK_THROWS_WITH(io::canonicalize_hf_deepseek(raw2, cfg), Catch::Contains("expected shape [24,32] like expert 0"));
  io::TensorMap raw3 = io::read_safetensors(kDir + "hf_model.safetensors");
  raw3.add("model.layers.0.block_sparse_moe.extra.weight", raw3.tensors.at("model.norm.weight"));
  Mixtral m(cfg);
  CHECK_THROWS_WITH(m.load(io::canonicalize_hf_deepseek(raw3, cfg)),
                    Catch::Contains("unexpected tensor model.layers.0.block_sparse_moe.extra.weight"));
}
