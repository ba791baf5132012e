// The llama2 / mistral / qwen3 / default decoder layers and tiny whole models against the PyTorch fixtures
// (tests/reference/attention_reference.py).
#include <filesystem>
#include <string>

#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/mistral/mistral.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/layers/decoders.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/family_fixture.hpp"
#include "support/registry_params.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;

namespace {

/// Run decoder layer type L on the fixture `name` and compare the layer output and its attention / MLP outputs.
template <class P, template <class> class L>
void check_layer_fixture(const std::string& name, testing::Tolerance tol) {
  const std::string dir = test::fixtures_dir() + "/" + name;
  const auto meta = test::read_meta(dir);
  Config c = test::config_from_meta(meta);
  test::Backend be;
  L<P> layer(c, {0, "layer", "layer.self_attention", "layer.mlp"});
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  Tensor<std::int32_t, 2> pos = test::int_tensor(test::npy(dir + "/positions.npy")), seg;
  const bool has_seg = std::filesystem::exists(dir + "/segment_ids.npy");
  if (has_seg) seg = test::int_tensor(test::npy(dir + "/segment_ids.npy"));
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

// Helpers take the model type itself (not a layer template): nvcc's front end and g++ disagree on passing a
// constrained template template parameter on to Transformer.
template <class Model>
Model load_fixture_model(const std::string& dir) {
  const Config c = test::config_from_meta(test::read_meta(dir));
  Model m(c);
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
template <class Model>
void check_model_fixture(const std::string& name) {
  const std::string dir = test::fixtures_dir() + "/" + name;
  auto m = load_fixture_model<Model>(dir);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
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

TEST_CASE("Llama-2 model (2 layers) matches the torch model, incremental decoding equals the full forward",
          "[models][llama2]") {
  check_model_fixture<models::Transformer<P32, layers::LlamaDecoderLayer>>("llama2_model");
}

TEST_CASE("LlamaDecoderLayer honours soft cap, sinks and fused qkv from the config and ignores attention_type",
          "[layers][llama2]") {
  check_layer_fixture<P32, layers::LlamaDecoderLayer>("llama2_layer_softcap_sinks_fused", test::tol::f32_layer);
}

TEST_CASE("MistralDecoderLayer matches the torch fixture, no sliding window (as MaxText)", "[layers][mistral]") {
  check_layer_fixture<P32, layers::MistralDecoderLayer>("mistral_layer", test::tol::f32_layer);
}

TEST_CASE("Qwen3DecoderLayer (qk RMSNorm, query * head_dim^-0.5) matches the torch fixture", "[layers][qwen3]") {
  check_layer_fixture<P32, layers::Qwen3DecoderLayer>("qwen3_layer", test::tol::f32_layer);
}

TEST_CASE("DecoderLayer (default, parallel block, shared kv projection) matches the torch fixture", "[layers][default]") {
  check_layer_fixture<P32, layers::DecoderLayer>("default_layer_share_kv", test::tol::f32_layer);
}

TEST_CASE("Decoder layers in bf16 stay within bf16 rounding of the f64 reference", "[layers][bf16]") {
  // Every op output is rounded to bf16 (eps 2^-8 relative); norm -> attention (logits rounded) -> residual -> norm ->
  // MLP -> residual accumulates ~8 roundings on values of magnitude ~2, plus the attention logit rounding (see
  // test_attention.cpp): 4 ulp relative plus 0.06 absolute.
  const testing::Tolerance bf{4.0 / 128.0, 0.06};
  check_layer_fixture<PBf, layers::LlamaDecoderLayer>("llama2_layer", bf);
  check_layer_fixture<PBf, layers::LlamaDecoderLayer>("llama2_layer_softcap_sinks_fused", bf);
  check_layer_fixture<PBf, layers::MistralDecoderLayer>("mistral_layer", bf);
  check_layer_fixture<PBf, layers::Qwen3DecoderLayer>("qwen3_layer", bf);
  check_layer_fixture<PBf, layers::DecoderLayer>("default_layer_share_kv", bf);
}

TEST_CASE("Mistral model (2 layers) matches the torch model, incremental decoding", "[models][mistral]") {
  check_model_fixture<models::Transformer<P32, layers::MistralDecoderLayer>>("mistral_model");
}

TEST_CASE("Qwen3 model (2 layers, tied logits) matches the torch model, incremental decoding", "[models][qwen3]") {
  check_model_fixture<models::Transformer<P32, layers::Qwen3DecoderLayer>>("qwen3_model");
}

TEST_CASE("Default-block model (2 layers) matches the torch model, incremental decoding", "[models][default]") {
  check_model_fixture<models::Transformer<P32, layers::DecoderLayer>>("default_model");
}

TEST_CASE("Llama-3.1 RoPE model (model_name llama3.1-*) matches the torch model, incremental decoding",
          "[models][llama2]") {
  check_model_fixture<models::Transformer<P32, layers::LlamaDecoderLayer>>("llama2_model_llama31");
}

namespace {
using Llama32 = models::Transformer<P32, layers::LlamaDecoderLayer>;
Tensor<std::int32_t, 2> row_cols(const Tensor<std::int32_t, 2>& t, std::int64_t b, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({1, n});
  for (std::int64_t i = 0; i < n; ++i) s(0, i) = t(b, c0 + i);
  return s;
}
}  // namespace

TEST_CASE("Llama-2 model: batched decode with rows at different lengths matches single-row runs",
          "[models][llama2][decode]") {
  const std::string dir = test::fixtures_dir() + "/llama2_model";
  auto m = load_fixture_model<models::Transformer<P32, layers::LlamaDecoderLayer>>(dir);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  // Row 0 has a 2-token prompt, row 1 a 5-token prompt (right-padded); then both decode 4 tokens.
  std::vector<std::int32_t> lens{2, 5};
  auto cache = m.make_cache(2, 16);
  models::ForwardOptions fo;
  fo.row_lengths = &lens;
  fo.last_only = true;
  std::vector<Tensor<float, 3>> steps{m.forward(cols(tok, 0, 5), cache, fo)};
  for (int s = 0; s < 4; ++s) {
    Tensor<std::int32_t, 2> next({2, 1});
    next(0, 0) = tok(0, 2 + s);
    next(1, 0) = tok(1, 5 + s);
    models::ForwardOptions one;
    one.last_only = true;
    steps.push_back(m.forward(next, cache, one));
  }
  CHECK(cache.length(0) == 6);
  CHECK(cache.length(1) == 9);
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t L = lens[static_cast<std::size_t>(b)] + 4;
    const auto ref = AnyTensor::from(m.forward(row_cols(tok, b, 0, L)));
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const std::int64_t p = lens[static_cast<std::size_t>(b)] - 1 + static_cast<std::int64_t>(s);
      test::expect_close(AnyTensor::from(steps[s]).narrow(0, b, 1), ref.narrow(1, p, 1), test::tol::decode_step,
                         "row " + std::to_string(b) + " step " + std::to_string(s));
    }
  }
}

TEST_CASE("Llama-2 model: packed sequences (segment ids, restarting positions) equal separate runs, also when the "
          "packed row is continued one token at a time", "[models][llama2][segments]") {
  const std::string dir = test::fixtures_dir() + "/llama2_model";
  auto m = load_fixture_model<models::Transformer<P32, layers::LlamaDecoderLayer>>(dir);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  Tensor<std::int32_t, 2> packed({1, 9}), seg({1, 9}), pos({1, 9});
  for (int i = 0; i < 4; ++i) {
    packed(0, i) = tok(0, i);
    seg(0, i) = 1;
    pos(0, i) = i;
  }
  for (int i = 0; i < 5; ++i) {
    packed(0, 4 + i) = tok(1, i);
    seg(0, 4 + i) = 2;
    pos(0, 4 + i) = i;
  }
  models::ForwardOptions fo;
  fo.segment_ids = &seg;
  fo.positions = &pos;
  const auto lp = AnyTensor::from(m.forward(packed, fo));
  const auto la = AnyTensor::from(m.forward(row_cols(tok, 0, 0, 4)));
  const auto lb = AnyTensor::from(m.forward(row_cols(tok, 1, 0, 5)));
  test::expect_close(lp.narrow(1, 0, 4), la, test::tol::decode_step, "segment 1");
  test::expect_close(lp.narrow(1, 4, 5), lb, test::tol::decode_step, "segment 2");
  // The same packed row, prefilling 6 tokens and then stepping with explicit segment id 2 and positions.
  auto cache = m.make_cache(1, 9);
  Tensor<std::int32_t, 2> s6({1, 6}), p6({1, 6});
  for (int i = 0; i < 6; ++i) {
    s6(0, i) = seg(0, i);
    p6(0, i) = pos(0, i);
  }
  models::ForwardOptions pre;
  pre.segment_ids = &s6;
  pre.positions = &p6;
  (void)m.forward(row_cols(packed, 0, 0, 6), cache, pre);
  for (int t = 6; t < 9; ++t) {
    Tensor<std::int32_t, 2> s1({1, 1}), p1({1, 1});
    s1(0, 0) = 2;
    p1(0, 0) = pos(0, t);
    models::ForwardOptions one;
    one.segment_ids = &s1;
    one.positions = &p1;
    const auto y = m.forward(row_cols(packed, 0, t, 1), cache, one);
    test::expect_close(y, lb.narrow(1, t - 4, 1), test::tol::decode_step, "packed step " + std::to_string(t));
  }
}

TEST_CASE("Rotary models reject positions outside the rotary table", "[models][llama2][errors]") {
  const std::string dir = test::fixtures_dir() + "/llama2_model";
  auto m = load_fixture_model<models::Transformer<P32, layers::LlamaDecoderLayer>>(dir);  // max_target_length 64
  Tensor<std::int32_t, 2> tok({1, 2}), pos({1, 2});
  tok(0, 0) = 1;
  tok(0, 1) = 2;
  pos(0, 0) = 3;
  pos(0, 1) = 64;
  models::ForwardOptions fo;
  fo.positions = &pos;
  try {
    (void)m.forward(tok, fo);
    FAIL("expected an ArgumentError");
  } catch (const ArgumentError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("position 64 of token [0,1] is outside the rotary table: expected 0 <= position < 64 "
                                     "(max_target_length)") != std::string::npos);
  }
  // A cache longer than max_target_length: the default positions run past the table.
  auto cache = m.make_cache(1, 70);
  Tensor<std::int32_t, 2> longer({1, 65});
  for (int i = 0; i < 65; ++i) longer(0, i) = i % 64;
  CHECK_THROWS_AS(m.forward(longer, cache), ArgumentError);
}

TEST_CASE("Registry dispatches default/llama2/mistral/qwen3 and the qwen3 model configs load", "[models][registry]") {
#if !defined(MAXTEXT_TEST_BACKEND_CUDA)  // CUDA tests do not link the CPU block library (registry_params.hpp)
  for (const std::string block : {"default", "llama2", "mistral", "qwen3"}) {
    Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/llama2_model"));
    c.decoder_block = block;
    c.use_qk_norm = block == "qwen3";
    const auto n = test::registry_num_params(c);
    // embed + 2 layers (q, k, v, o, 3 MLP kernels, norms) + final norm + logits; qwen3 adds 2 x head_dim norms.
    const std::int64_t D = 32, N = 4, K = 2, H = 8, F = 48, V = 64;
    const std::int64_t norms = block == "default" ? D : 2 * D;
    const std::int64_t layer = D * N * H * 2 + 2 * D * K * H + 3 * D * F + norms + (block == "qwen3" ? 2 * H : 0);
    CHECK(n == V * D + 2 * layer + D + D * V);
  }
#endif
  // qwen3-0.6b: 596M parameters with tied embeddings (Hugging Face: 0.6B, 0.44B without the embedding).
  Config q = io::load_config("", {"model_name=qwen3-0.6b"});
  CHECK(q.is("qwen3"));
  CHECK(q.use_qk_norm);
  CHECK(q.normalization_layer_epsilon == 1e-6);
  models::Transformer<P32, layers::Qwen3DecoderLayer> qm(q);
  const std::int64_t D = 1024, N = 16, K = 8, H = 128, F = 3072, L = 28, V = 151936;
  const std::int64_t layer = D * N * H * 2 + 2 * D * K * H + 2 * H + 3 * D * F + 2 * D;
  CHECK(qm.num_params() == V * D + L * layer + D);
  for (const std::string name : {"qwen3-4b", "qwen3-8b"}) {
    Config c = io::load_config("", {"model_name=" + name});
    CHECK(c.is("qwen3"));
    CHECK(c.rope_max_timescale == 1000000);
  }
}
