// The llama2 / mistral / qwen3 / default decoder layers and tiny whole models against the PyTorch fixtures
// (tests/reference/attention_reference.py).
#include <filesystem>
#include <string>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/decoders.hpp"
#include "maxtext/layers/llama2.hpp"
#include "maxtext/layers/mistral.hpp"
#include "maxtext/layers/qwen3.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<cpu::Backend, float>;
using PBf = Policy<cpu::Backend, bf16>;

namespace {

Tensor<std::int32_t, 2> int_tensor(const AnyTensor& a) { return a.to<std::int32_t, 2>({a.shape[0], a.shape[1]}); }

/// Run decoder layer type L on the fixture `name` and compare the layer output and its attention / MLP outputs.
template <class P, template <class> class L>
void check_layer_fixture(const std::string& name, testing::Tolerance tol) {
  const std::string dir = test::fixtures_dir() + "/" + name;
  const auto meta = test::read_meta(dir);
  Config c = test::config_from_meta(meta);
  cpu::Backend be;
  L<P> layer(c, {0, "layer", "layer.self_attention", "layer.mlp"});
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  Tensor<std::int32_t, 2> pos = int_tensor(test::npy(dir + "/positions.npy")), seg;
  const bool has_seg = std::filesystem::exists(dir + "/segment_ids.npy");
  if (has_seg) seg = int_tensor(test::npy(dir + "/segment_ids.npy"));
  layers::Capture cap({"layer.self_attention", "layer.mlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "/x.npy"), has_seg ? &seg : nullptr, &pos, &cap);
  test::expect_close(y, test::npy(dir + "/out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.self_attention"), test::npy(dir + "/attn.npy"), tol, name + ".self_attention");
  test::expect_close(cap.at("layer.mlp"), test::npy(dir + "/mlp.npy"), tol, name + ".mlp");
}

}  // namespace

TEST_CASE("LlamaDecoderLayer (GQA, default RoPE, SwiGLU) matches the torch fixture in f32", "[layers][llama2]") {
  check_layer_fixture<P32, layers::LlamaDecoderLayer>("llama2_layer", test::tol::f32_layer);
}

namespace {

template <class P, template <class> class L>
models::Transformer<P, L> load_fixture_model(const std::string& dir) {
  const Config c = test::config_from_meta(test::read_meta(dir));
  models::Transformer<P, L> m(c);
  m.load(io::read_safetensors(dir + "/model.safetensors"));
  return m;
}

Tensor<std::int32_t, 2> cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({t.dim(0), n});
  for (std::int64_t b = 0; b < t.dim(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(b, c0 + i);
  }
  return s;
}

/// Whole-model logits and layer outputs vs the fixture, then prefill + single steps vs the full forward.
template <class P, template <class> class L>
void check_model_fixture(const std::string& name) {
  const std::string dir = test::fixtures_dir() + "/" + name;
  auto m = load_fixture_model<P, L>(dir);
  const auto tok = int_tensor(test::npy(dir + "/tokens.npy"));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, name + ".logits");
  for (const std::string a : {"token_embedder", "decoder.layers_0", "decoder.layers_1", "decoder.decoder_norm"}) {
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), test::tol::f32_logits, name + "." + a);
  }
  // Incremental: prefill 4 tokens, then one token per step; every step's logits equal the full forward's row
  // (summation order differs between one-row and many-row products: 1e-5 absolute on logits of magnitude ~3).
  const std::int64_t T = tok.dim(1), P0 = 4;
  auto cache = m.make_cache(tok.dim(0), T);
  const auto pre = m.forward(cols(tok, 0, P0), cache);
  test::expect_close(pre, AnyTensor::from(full).narrow(1, 0, P0), {1e-5, 1e-5}, name + ".prefill");
  for (std::int64_t t = P0; t < T; ++t) {
    const auto step = m.forward(cols(tok, t, 1), cache);
    test::expect_close(step, AnyTensor::from(full).narrow(1, t, 1), {1e-5, 1e-5}, name + ".step " + std::to_string(t));
  }
}

}  // namespace

TEST_CASE("Llama-2 model (2 layers) matches the torch model; incremental decoding equals the full forward",
          "[models][llama2]") {
  check_model_fixture<P32, layers::LlamaDecoderLayer>("llama2_model");
}
