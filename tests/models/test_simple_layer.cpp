// MaxText's test blocks `simple` and `simple_mlp` (families/simple/simple_layer.hpp) against the PyTorch float64 fixtures of
// tests/reference/qwen_family_reference.py: 2-layer models (each layer's output, logits), unscanned and scanned
// MaxText trees, incremental decoding (the layers keep no cache), the registry, seeded initialisation.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "maxtext/families/load.hpp"
#include "maxtext/families/simple/simple_layer.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/cli.hpp"
#include "support/family_fixture.hpp"
#include "support/fixture_config.hpp"
#include "support/registry_params.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;

namespace {

template <class Model>
void check_simple_model(const std::string& name, const std::string& file, testing::Tolerance tol) {
  const std::string dir = test::fixtures_dir() + "/" + name;
  const Config c = test::config_from_meta(test::read_meta(dir));
  Model m(c);
  m.load(io::load_weights(dir + "/" + file, c).tensors);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  test::expect_close(full, test::npy(dir + "/logits.npy"), tol, name + ".logits");
  for (const std::string a : {"token_embedder", "decoder.layers_0", "decoder.layers_1", "decoder.decoder_norm"}) {
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), tol, name + "." + a);
  }
  // Token by token after a 3-token prefill: no cache, so each position depends on its own token only.
  auto cache = m.make_cache(tok.dim(0), tok.dim(1));
  for (std::int64_t t = 0; t < tok.dim(1);) {
    const std::int64_t n = t == 0 ? 3 : 1;
    Tensor<std::int32_t, 2> part({tok.dim(0), n});
    for (std::int64_t b = 0; b < tok.dim(0); ++b) {
      for (std::int64_t i = 0; i < n; ++i) part(b, i) = tok(b, t + i);
    }
    test::expect_close(m.forward(part, cache), AnyTensor::from(full).narrow(1, t, n), {1e-5, 1e-5},
                       name + ".step " + std::to_string(t));
    t += n;
  }
  CHECK(cache.length(0) == tok.dim(1));
}

}  // namespace

TEST_CASE("simple model (x . weights per layer) matches the torch model, unscanned and scanned", "[models][simple]") {
  using M = models::Transformer<P32, layers::SimpleDecoderLayer>;
  check_simple_model<M>("simple_model", "model.safetensors", test::tol::f32_logits);
  check_simple_model<M>("simple_model", "model_scanned.safetensors", test::tol::f32_logits);
}

TEST_CASE("simple_mlp model ((x . ff_1) . ff_2 per layer) matches the torch model", "[models][simple_mlp]") {
  check_simple_model<models::Transformer<P32, layers::SimpleMlpDecoderLayer>>("simple_mlp_model", "model.safetensors",
                                                                             test::tol::f32_logits);
}

TEST_CASE("simple / simple_mlp in bf16 stay within bf16 rounding of the f64 reference", "[models][simple][bf16]") {
  // Weights rounded to bf16 (2^-9 relative), each product's output rounded to bf16 (2^-9), over 2 layers (3 roundings
  // for simple_mlp's intermediate), the final norm and logits: a few ulp relative on values of magnitude ~1-3.
  const testing::Tolerance bf{4.0 / 128.0, 0.03};
  check_simple_model<models::Transformer<PBf, layers::SimpleDecoderLayer>>("simple_model", "model.safetensors", bf);
  check_simple_model<models::Transformer<PBf, layers::SimpleMlpDecoderLayer>>("simple_mlp_model", "model.safetensors", bf);
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the registry's models are the CPU block library's: checked once, on the CPU
TEST_CASE("Registry dispatches simple / simple_mlp, seeded init uses lecun_normal", "[models][registry][simple]") {
  Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/simple_mlp_model"));
  for (const std::string block : {"simple", "simple_mlp"}) {
    c.decoder_block = block;
    const auto n = test::registry_num_params(c);
    const std::int64_t D = 32, F = 48, V = 64;
    CHECK(n == 2 * V * D + D + 2 * (block == "simple" ? D * D : 2 * D * F));
  }
  // lecun_normal = truncated normal with variance 1/fan_in: the std of an initialised [D, D] kernel is 1/sqrt(D).
  c.decoder_block = "simple";
  models::Transformer<P32, layers::SimpleDecoderLayer> m(c);
  m.init(7);
  const auto p = m.export_params();
  const AnyTensor& w = p.at("decoder.layers_0.weights");
  REQUIRE(w.shape == std::vector<std::int64_t>{32, 32});
  double ss = 0;
  for (std::int64_t i = 0; i < w.numel(); ++i) ss += w.element(i) * w.element(i);
  const double sd = std::sqrt(ss / static_cast<double>(w.numel()));
  CHECK(std::fabs(sd * std::sqrt(32.0) - 1.0) < 0.1);  // 1024 samples: the std's relative error is ~2%
  Config bad = c;
  bad.decoder_block = "simple_mlp";
  bad.base_mlp_dim = 0;
  bad.derive();
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("simple_mlp needs base_mlp_dim > 0"));
}
#endif

TEST_CASE("Transformer: a config of another decoder block is refused by name, an alias runs, the policy sets the dtype",
          "[models][config]") {
  using Simple = models::Transformer<P32, layers::SimpleDecoderLayer>;
  using SimpleMlp = models::Transformer<P32, layers::SimpleMlpDecoderLayer>;
  Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/simple_mlp_model"));
  c.decoder_block = "simple";
  CHECK_NOTHROW(Simple(c));
  CHECK_THROWS_WITH(SimpleMlp(c),
                    Catch::Contains("config decoder_block 'simple' does not run on this model's layer type, which is "
                                    "decoder_block 'simple_mlp's"));
  c.decoder_block = "llama2";
  CHECK_THROWS_WITH(Simple(c), Catch::Contains("config decoder_block 'llama2'") && Catch::Contains("decoder_block 'simple's"));
  // The aliases of the block list run on the layers of the block they name.
  CHECK(decoder_block_runs_as("llama2lti") == "llama2");
  CHECK(decoder_block_runs_as("qwen3_5") == "qwen3_next");
  CHECK(decoder_block_runs_as("simple") == "simple");
  // The policy's activation type, whatever the config's dtype (bfloat16 by default) says.
  STATIC_REQUIRE(Simple::activation_dtype() == DType::f32);
  STATIC_REQUIRE(models::Transformer<PBf, layers::SimpleDecoderLayer>::activation_dtype() == DType::bf16);
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits / generate: simple and simple_mlp MaxText checkpoints (unscanned, scanned) match the torch "
          "model",
          "[models][simple][cli]") {
  for (const std::string name : {"simple_model", "simple_mlp_model"}) {
    const std::string dir = test::fixtures_dir() + "/" + name;
    const std::string yml = test::write_fixture_yml(
        dir, (std::filesystem::current_path() / ("maxtext_test_" + name + std::to_string(::getpid()) + ".yml")).string());
    test::check_cli_logits(dir, "--config " + yml + " --weights " + dir + "/model.safetensors", test::tol::f32_logits);
    if (std::filesystem::exists(dir + "/model_scanned.safetensors")) {
      test::check_cli_logits(dir, "--config " + yml + " --weights " + dir + "/model_scanned.safetensors scan_layers=true",
                             test::tol::f32_logits);
    }
    const std::string text = test::run_cli("generate --config " + yml + " --weights " + dir +
                                           "/model.safetensors --tokens 1,2,3 --max-new-tokens 4");
    CHECK(text.find("tokens[0]: ") != std::string::npos);
    std::remove(yml.c_str());
  }
}
#endif
