// The whole GPT-3 Transformer against the PyTorch fixture (tests/reference/gpt3_reference.py), loading both MaxText
// layouts, incremental decoding vs the full forward, packed sequences, batched decode, bad input, and the CLI.
#include <cstdlib>
#include <string>

#include "maxtext/families/gpt3/gpt3.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using Gpt3 = models::Transformer<P32, layers::Gpt3DecoderLayer>;

namespace {
// Incremental vs full forward differ only in f32 summation order (a matrix-vector product for one token, blocked GEMM
// for many): logits of magnitude ~5 after two layers agree to a few f32 ulps of that scale, hence 1e-5 absolute.
constexpr double kStepAbs = 1e-5;
const std::string kDir = test::fixtures_dir() + "/gpt3_model/";

Config fixture_config() { return io::load_config(kDir + "config.yml"); }

Gpt3 load_model(const std::string& file = "model.safetensors") {
  const Config cfg = fixture_config();
  Gpt3 m(cfg);
  m.load(io::load_weights(kDir + file, cfg).tensors);
  return m;
}

Tensor<std::int32_t, 2> fixture_tokens() {
  const auto t = test::npy(kDir + "tokens.npy");
  return t.to<std::int32_t, 2>({t.shape[0], t.shape[1]});
}

Tensor<std::int32_t, 2> slice_cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n, std::int64_t row = -1) {
  const std::int64_t r0 = row < 0 ? 0 : row, rows = row < 0 ? t.dim(0) : 1;
  Tensor<std::int32_t, 2> s({rows, n});
  for (std::int64_t b = 0; b < rows; ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(r0 + b, c0 + i);
  }
  return s;
}
}  // namespace

TEST_CASE("GPT-3 model logits match the float64 torch model (unscanned weights)", "[models][gpt3]") {
  Gpt3 m = load_model();
  const auto logits = m.forward(fixture_tokens());
  test::expect_close(logits, test::npy(kDir + "logits.npy"), test::tol::f32_logits, "logits");
}

TEST_CASE("GPT-3 model loads MaxText's scanned layout to the same logits", "[models][gpt3]") {
  Gpt3 a = load_model("model.safetensors"), b = load_model("model_scanned.safetensors");
  const auto la = a.forward(fixture_tokens());
  const auto lb = b.forward(fixture_tokens());
  test::expect_close(lb, AnyTensor::from(la), {0.0, 0.0}, "scanned vs unscanned");
}

TEST_CASE("Incremental decoding equals the full-sequence forward at every position", "[models][gpt3][decode]") {
  Gpt3 m = load_model();
  const auto tok = fixture_tokens();
  const auto full = m.forward(tok);
  const std::int64_t T = tok.dim(1), P0 = 4;
  auto cache = m.make_cache(tok.dim(0), T);
  const auto pre = m.forward(slice_cols(tok, 0, P0), cache);
  for (std::int64_t b = 0; b < tok.dim(0); ++b) {
    for (std::int64_t t = 0; t < P0; ++t) {
      for (std::int64_t v = 0; v < full.dim(2); ++v) REQUIRE(pre(b, t, v) == Approx(full(b, t, v)).epsilon(1e-5).margin(kStepAbs));
    }
  }
  for (std::int64_t t = P0; t < T; ++t) {
    const auto step = m.forward(slice_cols(tok, t, 1), cache);
    for (std::int64_t b = 0; b < tok.dim(0); ++b) {
      for (std::int64_t v = 0; v < full.dim(2); ++v) {
        INFO("row " << b << " position " << t << " vocab " << v);
        REQUIRE(step(b, 0, v) == Approx(full(b, t, v)).epsilon(1e-5).margin(kStepAbs));
      }
    }
  }
  CHECK(cache.length(0) == T);
}

TEST_CASE("Batched decode with rows at different lengths matches single-row runs", "[models][gpt3][decode]") {
  Gpt3 m = load_model();
  const auto tok = fixture_tokens();
  // Row 0 has a 3-token prompt, row 1 a 7-token prompt (right-padded); then both decode 4 fixed tokens.
  std::vector<std::int32_t> lens{3, 7};
  auto cache = m.make_cache(2, 16);
  models::ForwardOptions fo;
  fo.row_lengths = &lens;
  fo.last_only = true;
  const auto first = m.forward(slice_cols(tok, 0, 7), cache, fo);
  std::vector<Tensor<float, 3>> steps{first};
  for (int s = 0; s < 4; ++s) {
    Tensor<std::int32_t, 2> next({2, 1});
    next(0, 0) = tok(0, 3 + s);
    next(1, 0) = tok(1, 7 + s);
    models::ForwardOptions one;
    one.last_only = true;
    steps.push_back(m.forward(next, cache, one));
  }
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t L = lens[static_cast<std::size_t>(b)] + 4;
    const auto ref = m.forward(slice_cols(tok, 0, L, b));
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const std::int64_t pos = lens[static_cast<std::size_t>(b)] - 1 + static_cast<std::int64_t>(s);
      for (std::int64_t v = 0; v < ref.dim(2); ++v) {
        INFO("row " << b << " step " << s << " vocab " << v);
        REQUIRE(steps[s](b, 0, v) == Approx(ref(0, pos, v)).epsilon(1e-5).margin(kStepAbs));
      }
    }
  }
}

TEST_CASE("Packed sequences with segment ids equal separate sequences", "[models][gpt3][segments]") {
  Gpt3 m = load_model();
  const auto tok = fixture_tokens();
  // Row 0 packs tokens[0, 0:5] (segment 1) and tokens[1, 0:6] (segment 2), positions restarting per segment.
  Tensor<std::int32_t, 2> packed({1, 11}), seg({1, 11}), pos({1, 11});
  for (int i = 0; i < 5; ++i) {
    packed(0, i) = tok(0, i);
    seg(0, i) = 1;
    pos(0, i) = i;
  }
  for (int i = 0; i < 6; ++i) {
    packed(0, 5 + i) = tok(1, i);
    seg(0, 5 + i) = 2;
    pos(0, 5 + i) = i;
  }
  models::ForwardOptions fo;
  fo.segment_ids = &seg;
  fo.positions = &pos;
  const auto lp = m.forward(packed, fo);
  const auto la = m.forward(slice_cols(tok, 0, 5, 0));
  const auto lb = m.forward(slice_cols(tok, 0, 6, 1));
  for (std::int64_t v = 0; v < lp.dim(2); ++v) {
    for (int i = 0; i < 5; ++i) REQUIRE(lp(0, i, v) == Approx(la(0, i, v)).epsilon(1e-5).margin(kStepAbs));
    for (int i = 0; i < 6; ++i) REQUIRE(lp(0, 5 + i, v) == Approx(lb(0, i, v)).epsilon(1e-5).margin(kStepAbs));
  }
}

TEST_CASE("Bad inputs raise clear errors", "[models][gpt3][errors]") {
  Gpt3 m = load_model();
  Tensor<std::int32_t, 2> bad({1, 3});
  bad(0, 0) = 1;
  bad(0, 1) = 96;  // vocab is 96
  bad(0, 2) = 2;
  CHECK_THROWS_WITH(m.forward(bad), Catch::Contains("token id 96 at [0,1] is outside the vocabulary [0, 96)"));
  auto cache = m.make_cache(1, 4);
  Tensor<std::int32_t, 2> five = Tensor<std::int32_t, 2>::full({1, 5}, 3);
  CHECK_THROWS_WITH(m.forward(five, cache), Catch::Contains("exceed the cache capacity 4"));
  Tensor<std::int32_t, 2> far = Tensor<std::int32_t, 2>::full({1, 1}, 3), farpos = Tensor<std::int32_t, 2>::full({1, 1}, 40);
  models::ForwardOptions fo;
  fo.positions = &farpos;  // trainable_position_size is 32
  CHECK_THROWS_WITH(m.forward(far, fo), Catch::Contains("position 40"));
  const Config cfg = fixture_config();
  auto w = io::load_weights(kDir + "model.safetensors", cfg).tensors;
  w.tensors.erase("decoder.layers_1.mlp.wo.kernel");
  Gpt3 m2(cfg);
  CHECK_THROWS_WITH(m2.load(w), Catch::Contains("missing tensor decoder.layers_1.mlp.wo.kernel"));
  CHECK_THROWS_AS(io::load_config(kDir + "config.yml", {"base_num_kv_heads=1"}), ConfigError);
  CHECK_THROWS_WITH(io::load_config(kDir + "config.yml", {"base_num_query_heads=3"}),
                    Catch::Contains("num_query_heads (3) must be a multiple of num_kv_heads (2)"));
}

TEST_CASE("Seeded initialisation is deterministic and follows MaxText's scales", "[models][gpt3][init]") {
  Config cfg = fixture_config();
  Gpt3 a(cfg), b(cfg);
  a.init(5);
  b.init(5);
  const auto tok = fixture_tokens();
  const auto la = a.forward(tok);
  const auto lb = b.forward(tok);
  test::expect_close(lb, AnyTensor::from(la), {0.0, 0.0}, "same seed");
  // Embedding ~ N(0, 1); Gpt3LayerNorm scale zeros; biases zeros.
  auto p = a.export_params();
  const auto& e = p.at("token_embedder.embedding");
  double s2 = 0;
  for (std::int64_t i = 0; i < e.numel(); ++i) s2 += e.element(i) * e.element(i);
  CHECK(std::sqrt(s2 / static_cast<double>(e.numel())) == Approx(1.0).margin(0.1));
  CHECK(p.at("decoder.layers_0.pre_self_attention_norm.scale").element(3) == 0.0);
  CHECK(p.at("decoder.layers_1.mlp.wi.bias").element(7) == 0.0);
}

TEST_CASE("Exported parameters reload to the same model", "[models][gpt3][io]") {
  Gpt3 a = load_model();
  const std::string path = "gpt3_export_roundtrip.safetensors";
  io::write_safetensors(path, a.export_params().tensors);
  Gpt3 b = load_model();
  const Config cfg = fixture_config();
  Gpt3 c(cfg);
  c.load(io::load_weights(path, cfg).tensors);
  test::expect_close(c.forward(fixture_tokens()), AnyTensor::from(a.forward(fixture_tokens())), {0.0, 0.0}, "reloaded");
  std::remove(path.c_str());
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
TEST_CASE("maxtext logits (CLI) with --incremental writes the reference logits", "[models][gpt3][cli]") {
  const std::string out = "gpt3_cli_logits.npy";
  const auto tok = fixture_tokens();
  std::string ids;
  for (std::int64_t b = 0; b < tok.dim(0); ++b) {
    for (std::int64_t t = 0; t < tok.dim(1); ++t) ids += (t ? "," : (b ? "/" : "")) + std::to_string(tok(b, t));
  }
  const std::string cmd = ::maxtext::test::cli_path() + " logits --config " + kDir + "config.yml --weights " + kDir +
                          "model.safetensors --tokens " + ids + " --incremental 4 --out " + out + " > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  test::expect_close(test::npy(out), test::npy(kDir + "logits.npy"), test::tol::f32_logits, "cli logits");
  std::remove(out.c_str());
}
#endif

TEST_CASE("Sinusoidal positions, normalized tied logits and the final soft cap match the torch model",
          "[models][gpt3][positions]") {
  const std::string dir = test::fixtures_dir() + "/gpt3_model_sincap/";
  const Config cfg = io::load_config(dir + "config.yml");
  Gpt3 m(cfg);
  m.load(io::load_weights(dir + "model.safetensors", cfg).tensors);
  const auto t = test::npy(dir + "tokens.npy");
  const auto logits = m.forward(t.to<std::int32_t, 2>({t.shape[0], t.shape[1]}));
  test::expect_close(logits, test::npy(dir + "logits.npy"), test::tol::f32_logits, "logits");
  for (std::int64_t i = 0; i < logits.size(); ++i) REQUIRE(std::fabs(logits.data()[i]) < 2.0f);  // capped at 2
}

TEST_CASE("The sinusoidal table has MaxText's closed form", "[models][positions]") {
  const auto t = layers::sinusoidal_table(5, 8);
  // n = 4, inc = ln(1e4)/3; position 3, lane 1: sin(3 * 1e4^(-1/3)); lane 5 = cos of the same.
  const double a = 3.0 * std::pow(1e4, -1.0 / 3.0);
  CHECK(t(3, 1) == Approx(std::sin(a)).epsilon(1e-6));
  CHECK(t(3, 5) == Approx(std::cos(a)).epsilon(1e-6));
  CHECK(t(0, 0) == 0.0f);
  CHECK(t(0, 4) == 1.0f);
}
