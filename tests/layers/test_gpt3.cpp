// Gpt3LayerNorm, Gpt3MultiHeadAttention and Gpt3DecoderLayer against the PyTorch fixtures (tests/reference/
// gpt3_reference.py) and the independent cases in ../shared/reference/gpt3.
#include <string>

#include "maxtext/families/gpt3/gpt3.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;

namespace {

Config layer_config(std::int64_t D, std::int64_t N, std::int64_t H, std::int64_t F, bool fused) {
  Config c;
  c.decoder_block = "gpt3";
  c.dtype = "float32";
  c.base_emb_dim = D;
  c.base_num_query_heads = c.base_num_kv_heads = N;
  c.head_dim = H;
  c.base_mlp_dim = F;
  c.mlp_activations = {"gelu"};
  c.fused_qkv = fused;
  c.normalization_layer_epsilon = 1e-5;
  c.derive();
  c.validate();
  return c;
}

template <class P>
void check_layer_fixture(const std::string& name, std::int64_t D, std::int64_t N, std::int64_t H, std::int64_t F, bool fused,
                         bool segments, testing::Tolerance tol) {
  const std::string dir = test::fixtures_dir() + "/" + name + "/";
  test::Backend be;
  layers::Gpt3DecoderLayer<P> layer(layer_config(D, N, H, F, fused), {0, "layer", "layer.self_attention", "layer.mlp"});
  const auto w = io::read_safetensors(dir + "weights.safetensors");
  const auto params = models::load_layer_params<P>(layer, w, be);
  Tensor<std::int32_t, 2> seg;
  if (segments) {
    const auto s = test::npy(dir + "segment_ids.npy");
    seg = s.to<std::int32_t, 2>({s.shape[0], s.shape[1]});
  }
  layers::Capture cap({"layer.self_attention", "layer.mlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "x.npy"), segments ? &seg : nullptr, nullptr, &cap);
  test::expect_close(y, test::npy(dir + "out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.self_attention"), test::npy(dir + "attn.npy"), tol, name + ".self_attention");
  test::expect_close(cap.at("layer.mlp"), test::npy(dir + "mlp.npy"), tol, name + ".mlp");
}

}  // namespace

TEST_CASE("Gpt3DecoderLayer (fused qkv, segment ids) matches the torch fixture in f32", "[layers][gpt3]") {
  check_layer_fixture<P32>("gpt3_layer_fused_seg", 32, 4, 8, 64, true, true, test::tol::f32_layer);
}

TEST_CASE("Gpt3DecoderLayer (separate q/k/v, heads*head_dim != emb) matches the torch fixture in f32", "[layers][gpt3]") {
  check_layer_fixture<P32>("gpt3_layer_unfused", 32, 3, 6, 48, false, false, test::tol::f32_layer);
}

TEST_CASE("Gpt3DecoderLayer in bf16 stays within bf16 rounding of the f64 reference", "[layers][gpt3][bf16]") {
  // Every op output is rounded to bf16 (eps 2^-8 relative, 2^-7 one ulp); through LN -> attention -> residual ->
  // LN -> MLP -> residual roughly 6 roundings accumulate on values of magnitude ~3, so 4 ulp relative + 0.05 abs.
  check_layer_fixture<PBf>("gpt3_layer_fused_seg", 32, 4, 8, 64, true, true, {4.0 / 128.0, 5e-2});
}

TEST_CASE("Gpt3LayerNorm matches the shared independent reference", "[layers][gpt3][shared]") {
  const std::string dir = test::require(test::reference_dir() + "/gpt3/ln_basic", "shared GPT-3 reference") + "/";
  const auto w = io::read_safetensors(dir + "weights.safetensors");
  const auto x = test::npy(dir + "x.npy");
  test::Backend be;
  for (const auto& [eps, bias, file] : {std::tuple{1e-6f, true, "y_eps1e-6_f64"}, std::tuple{1e-5f, true, "y_eps1e-5_f64"},
                                        std::tuple{1e-6f, false, "y_nobias_eps1e-6_f64"}}) {
    layers::Gpt3LayerNorm<P32> ln({48, eps, bias});
    io::TensorMap m;
    m.add("scale", w.at("scale"));
    if (bias) m.add("bias", w.at("bias"));
    layers::ParamLoader<P32> loader(m, be);
    typename layers::Gpt3LayerNorm<P32>::Params p;
    ln.visit(loader, p);
    loader.finish();
    Tensor<float, 2> xs = test::to_backend(be, x.to<float, 2>({14, 48}));
    Tensor<float, 2> y({14, 48}, be.memory());
    Scratch s(be.memory());
    layers::StepInfo st;
    layers::Context<P32> ctx{be, s, st, nullptr};
    ln.forward(ctx, p, xs, y);
    test::expect_close_scaled(AnyTensor::from(test::to_host(be, y)).reshaped({2, 7, 48}), test::npy(dir + file + ".npy"),
                              1e-5, file);
  }
}

TEST_CASE("Gpt3DecoderLayer matches the shared independent reference", "[layers][gpt3][shared]") {
  const std::string dir =
      test::require(test::reference_dir() + "/gpt3/layer_b2_s12_e48_h4_d8_m96", "shared GPT-3 reference") + "/";
  test::Backend be;
  layers::Gpt3DecoderLayer<P32> layer(layer_config(48, 4, 8, 96, true), {0, "l", "l.self_attention", "l.mlp"});
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(dir + "weights.safetensors"), be);
  layers::Capture cap({"l.self_attention", "l.mlp"});
  const auto y = models::run_layer<P32>(layer, params, be, test::npy(dir + "x.npy"), nullptr, nullptr, &cap);
  test::expect_close_scaled(AnyTensor::from(y), test::npy(dir + "out_f64.npy"), 1e-5, "out");
  test::expect_close_scaled(cap.at("l.self_attention"), test::npy(dir + "attn_out_f64.npy"), 1e-5, "attn_out");
  test::expect_close_scaled(cap.at("l.mlp"), test::npy(dir + "mlp_out_f64.npy"), 1e-5, "mlp_out");
}

TEST_CASE("Gpt3MultiHeadAttention matches the shared independent reference", "[layers][gpt3][shared]") {
  const std::string dir = test::require(test::reference_dir() + "/gpt3/attn_b2_s12_e48_h4_d8", "shared GPT-3 reference") + "/";
  test::Backend be;
  const Config c = layer_config(48, 4, 8, 96, true);
  layers::Gpt3MultiHeadAttention<P32> attn(c);
  io::TensorMap w = io::read_safetensors(dir + "weights.safetensors");
  layers::ParamLoader<P32> loader(w, be);
  typename layers::Gpt3MultiHeadAttention<P32>::Params p;
  attn.visit(loader, p);
  loader.finish(/*allow_unused=*/true);
  const auto x = test::npy(dir + "x.npy");
  Tensor<float, 2> xs = test::to_backend(be, x.to<float, 2>({24, 48}));
  Tensor<float, 2> y({24, 48}, be.memory());
  Scratch s(be.memory());
  models::KVCache<P32> cache(be, 2, 12, {attn.cache_spec()});
  layers::StepInfo st;
  st.batch = 2;
  st.length = 12;
  st.start = {0, 0};
  const auto zero = test::to_backend(be, std::vector<std::int32_t>{0, 0});
  const auto len = test::to_backend(be, std::vector<std::int32_t>{12, 12});
  st.q_start = zero.cview();
  st.kv_len = len.cview();
  layers::Context<P32> ctx{be, s, st, nullptr};
  attn.forward(ctx, p, xs, cache.layer(0), y);
  test::expect_close_scaled(AnyTensor::from(test::to_host(be, y)).reshaped({2, 12, 48}), test::npy(dir + "out_f64.npy"),
                            1e-5, "attn out");
}

TEST_CASE("Gpt3 layer loading reports missing and mis-shaped tensors by name", "[layers][gpt3][errors]") {
  test::Backend be;
  layers::Gpt3DecoderLayer<P32> layer(layer_config(32, 4, 8, 64, true), {});
  io::TensorMap w = io::read_safetensors(test::fixtures_dir() + "/gpt3_layer_fused_seg/weights.safetensors");
  w.tensors.erase("mlp.wo.bias");
  w.tensors["self_attention.out.bias"] = w.at("mlp.wi.bias");  // [64] where [32] is expected
  try {
    (void)models::load_layer_params<P32>(layer, w, be);
    FAIL("expected an IoError");
  } catch (const IoError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("missing tensor mlp.wo.bias") != std::string::npos);
    CHECK(msg.find("self_attention.out.bias: expected shape [32], found [64]") != std::string::npos);
  }
}
