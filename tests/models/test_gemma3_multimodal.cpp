// tests/models/test_gemma3_multimodal.cpp: Gemma 3 with pictures: the vision tower's soft tokens merged into the
// decoder at the <image_soft_token> positions, each picture's tokens attending to each other (MaxText's
// merge_mm_embeddings and bidirectional_mask; ForwardOptions::media_mask), against the float64 re-statement
// tests/reference/gemma3_multimodal_reference.py (fixture gemma3_mm_model: a 7-layer Gemma 3 with sliding window 3,
// a 2-layer tower, two pictures of 256 soft tokens in a 530-token prompt), from both Hugging Face layouts.
// Tolerances: the tower's tokens and the logits at test::tol::f32_logits (f32 against f64, as the text model's and
// the tower's own tests). The same merge without the bidirectional term (logits_causal.npy) and the prompt without
// the merge (logits_text.npy) differ from the reference by far more (meta.json), so neither would pass.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/gemma/gemma3.hpp"
#include "maxtext/families/gemma/image_processor.hpp"
#include "maxtext/families/gemma/vision.hpp"
#include "maxtext/families/simple/simple_layer.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/transformer.hpp"
#include "maxtext/models/session.hpp"
#include "support/backends.hpp"
#include "support/family_fixture.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

using P = Policy<test::Backend, float>;
using Model = models::Transformer<P, layers::Gemma3DecoderLayer>;

std::string fixture() { return test::fixtures_dir() + "/gemma3_mm_model"; }
void need_fixture() {
  if (!std::filesystem::exists(fixture() + "/meta.json")) test::skip("fixture gemma3_mm_model missing");
}

template <class E>
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL("expected an error containing: " << needle);
  } catch (const E& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

template <int R>
Tensor<float, R> f32(const AnyTensor& a) {
  Shape<R> s{};
  for (int i = 0; i < R; ++i) s[static_cast<std::size_t>(i)] = a.shape[static_cast<std::size_t>(i)];
  return a.to<float, R>(s);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

/// The HF checkpoint's text model, imported (language_model.* or model.language_model.* names).
Model load_model(const std::string& hf) {
  const auto cfg = io::read_weights_config(hf);
  REQUIRE(cfg.has_value());
  CHECK(cfg->decoder_block == "gemma3");
  CHECK(cfg->vocab_size == 128);
  CHECK(cfg->num_decoder_layers == 7);
  CHECK(cfg->sliding_window_size == 3);
  Model m(*cfg);
  const auto w = io::load_weights(hf, *cfg);
  CHECK(w.format == io::WeightFormat::hf_safetensors);
  m.load(w.tensors);
  return m;
}

/// The tower's soft tokens for the fixture's pixels, flattened to rows [n * 256, E].
Tensor<float, 2> soft_tokens(const std::string& hf) {
  const auto j = read_json(hf + "/config.json");
  const layers::Gemma3VisionConfig vc = layers::Gemma3VisionConfig::from_hf(j, hf);
  test::Backend be;
  const layers::Gemma3VisionEncoder<P> tower(vc);
  const auto params =
      models::load_layer_params<P>(tower, io::gemma3_vision_from_hf(io::read_safetensors(hf + "/model.safetensors"), vc), be);
  const auto pixels = f32<4>(test::npy(fixture() + "/pixels.npy"));
  const Tensor<float, 3> tok = tower.encode(be, params, pixels);
  test::expect_close(AnyTensor::from(tok), test::npy(fixture() + "/image_tokens.npy"), test::tol::f32_logits,
                     "soft tokens (" + hf + ")");
  Tensor<float, 2> rows({tok.dim(0) * tok.dim(1), tok.dim(2)});
  std::copy(tok.data(), tok.data() + tok.size(), rows.data());
  return rows;
}

/// The reference's greedy continuation of the picture prompt (greedy.npy).
std::vector<std::int32_t> greedy_tokens() {
  const AnyTensor g = test::npy(fixture() + "/greedy.npy");
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < g.numel(); ++i) out.push_back(static_cast<std::int32_t>(g.element(i)));
  return out;
}

/// Rows [t0, t0 + n) of a [1, T] tensor.
Tensor<std::int32_t, 2> slice(const Tensor<std::int32_t, 2>& x, std::int64_t t0, std::int64_t n) {
  Tensor<std::int32_t, 2> y({1, n});
  for (std::int64_t t = 0; t < n; ++t) y(0, t) = x(0, t0 + t);
  return y;
}

/// Largest |a - b| over two f32 tensors of one shape.
double max_abs_diff(const AnyTensor& a, const AnyTensor& b) {
  const auto x = f32<3>(a), y = f32<3>(b);
  REQUIRE(x.size() == y.size());
  double m = 0.0;
  for (std::int64_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(x.data()[i]) - y.data()[i]));
  return m;
}

}  // namespace

TEST_CASE("Gemma 3 with pictures: soft tokens merged with the bidirectional picture mask equal the float64 reference",
          "[models][gemma][multimodal]") {
  need_fixture();
  const std::string dir = fixture();
  const auto ids = test::int_tensor(test::npy(dir + "/ids.npy"));
  const auto mask = test::int_tensor(test::npy(dir + "/image_mask.npy"));
  const auto want = test::npy(dir + "/logits.npy");
  const std::int64_t T = ids.dim(1);
  for (const std::string layout : {"hf", "hf_new"}) {
    INFO(layout);
    Model m = load_model(dir + "/" + layout);
    const Tensor<float, 2> soft = soft_tokens(dir + "/" + layout);
    models::ForwardOptions fo;
    fo.media_mask = &mask;
    fo.media_embeddings = &soft;
    const auto got = AnyTensor::from(m.forward(ids, fo));
    test::expect_close(got, want, test::tol::f32_logits, "merged logits (" + layout + ")");
    // Without the picture mask, or without the merge, the model computes something else by far.
    CHECK(max_abs_diff(got, test::npy(dir + "/logits_causal.npy")) > 100 * test::tol::f32_logits.atol);
    CHECK(max_abs_diff(got, test::npy(dir + "/logits_text.npy")) > 100 * test::tol::f32_logits.atol);

    // Incrementally: both pictures in a first pass, then the rest one token at a time.
    std::int64_t last_soft = 0;
    for (std::int64_t t = 0; t < T; ++t) last_soft = mask(0, t) ? t : last_soft;
    const std::int64_t first = last_soft + 2;
    REQUIRE(first < T);
    auto cache = m.make_cache(1, T);
    Tensor<std::int32_t, 2> mask0 = slice(mask, 0, first);
    models::ForwardOptions f0;
    f0.media_mask = &mask0;
    f0.media_embeddings = &soft;
    const Tensor<float, 3> l0 = m.forward(slice(ids, 0, first), cache, f0);
    Tensor<float, 3> inc({1, T, 128});
    std::copy(l0.data(), l0.data() + l0.size(), inc.data());
    for (std::int64_t t = first; t < T; ++t) {
      const Tensor<float, 3> l = m.forward(slice(ids, t, 1), cache);
      std::copy(l.data(), l.data() + 128, &inc(0, t, 0));
    }
    test::expect_close(AnyTensor::from(inc), want, test::tol::f32_logits, "incremental merged logits (" + layout + ")");
  }
}

TEST_CASE("Gemma 3 with pictures: a batch with a text-only row, greedy generation, and the refusals",
          "[models][gemma][multimodal]") {
  need_fixture();
  const std::string dir = fixture();
  const auto ids = test::int_tensor(test::npy(dir + "/ids.npy"));
  const auto mask = test::int_tensor(test::npy(dir + "/image_mask.npy"));
  const auto want = f32<3>(test::npy(dir + "/logits.npy"));
  const std::int64_t T = ids.dim(1), V = 128;
  Model m = load_model(dir + "/hf");
  const Tensor<float, 2> soft = soft_tokens(dir + "/hf");

  // Row 0: the picture prompt; row 1: its first 5 tokens (no picture), right-padded. Row 0's logits are the
  // reference's; row 1's those of its own pass.
  const std::int64_t short_len = 5;
  Tensor<std::int32_t, 2> both({2, T}), bmask({2, T});
  for (std::int64_t t = 0; t < T; ++t) {
    both(0, t) = ids(0, t);
    both(1, t) = ids(0, std::min(t, short_len - 1));
    bmask(0, t) = mask(0, t);
    bmask(1, t) = 0;
  }
  const std::vector<std::int32_t> lens = {static_cast<std::int32_t>(T), static_cast<std::int32_t>(short_len)};
  auto cache = m.make_cache(2, T);
  models::ForwardOptions fo;
  fo.media_mask = &bmask;
  fo.media_embeddings = &soft;
  fo.row_lengths = &lens;
  const Tensor<float, 3> l = m.forward(both, cache, fo);
  Tensor<float, 3> row0({1, T, V});
  std::copy(&l(0, 0, 0), &l(0, 0, 0) + T * V, row0.data());
  test::expect_close(AnyTensor::from(row0), AnyTensor::from(want), test::tol::f32_logits, "batch row 0 (pictures)");
  const Tensor<float, 3> alone = m.forward(slice(ids, 0, short_len));
  for (std::int64_t t = 0; t < short_len; ++t) {
    for (std::int64_t v = 0; v < V; ++v) CHECK(l(1, t, v) == Approx(alone(0, t, v)).margin(1e-5).epsilon(1e-4));
  }

  // Greedy generation from the picture prompt: the reference's tokens (its best-vs-second gaps in meta.json).
  const std::vector<std::int32_t> greedy = greedy_tokens();
  models::GenerateOptions go;
  go.max_new_tokens = static_cast<std::int64_t>(greedy.size());
  go.media_mask = &mask;
  go.media_embeddings = &soft;
  std::vector<std::int32_t> prompt(ids.data(), ids.data() + T);
  const auto res = models::generate(m, {prompt}, go);
  CHECK(res.tokens[0] == greedy);

  // Refusals, by name.
  models::ForwardOptions bad;
  bad.media_mask = &mask;
  expect_error<ArgumentError>([&] { (void)m.forward(ids, bad); }, "media_mask and media_embeddings go together");
  Tensor<float, 2> short_rows({soft.dim(0) - 1, soft.dim(1)});
  bad.media_embeddings = &short_rows;
  expect_error<ArgumentError>([&] { (void)m.forward(ids, bad); }, "media_mask marks 512 tokens, media_embeddings has 511 rows");
  Tensor<float, 2> narrow({soft.dim(0), 16});
  bad.media_embeddings = &narrow;
  expect_error<ArgumentError>([&] { (void)m.forward(ids, bad); }, "rows of emb_dim 32 expected");
  // A pass that ends inside a picture: its later tokens would not be seen by its earlier ones.
  std::int64_t first_soft = 0;
  while (mask(0, first_soft) == 0) ++first_soft;
  const auto cut = slice(ids, 0, first_soft + 10), cut_mask = slice(mask, 0, first_soft + 10);
  Tensor<float, 2> ten({10, 32});
  models::ForwardOptions split;
  split.media_mask = &cut_mask;
  split.media_embeddings = &ten;
  expect_error<ArgumentError>([&] { (void)m.forward(cut, split); }, "a picture must end within one forward pass");
  // A marked position in a row's right padding.
  Tensor<std::int32_t, 2> pad_mask = bmask;
  pad_mask(1, T - 3) = 1;
  Tensor<float, 2> more({soft.dim(0) + 1, 32});
  models::ForwardOptions padded = fo;
  padded.media_mask = &pad_mask;
  padded.media_embeddings = &more;
  auto cache2 = m.make_cache(2, T);
  expect_error<ArgumentError>([&] { (void)m.forward(both, cache2, padded); }, "right padding");
}

TEST_CASE("Gemma 3 with pictures in a Session: the cache is reused while ids and pictures agree, never part of a picture",
          "[models][gemma][multimodal][session]") {
  need_fixture();
  const std::string dir = fixture();
  const auto ids_t = test::int_tensor(test::npy(dir + "/ids.npy"));
  const auto mask = test::int_tensor(test::npy(dir + "/image_mask.npy"));
  const auto want = f32<3>(test::npy(dir + "/logits.npy"));
  const std::int64_t T = ids_t.dim(1), V = 128;
  Model m = load_model(dir + "/hf");
  const Tensor<float, 2> soft = soft_tokens(dir + "/hf");
  const std::vector<std::int32_t> ids(ids_t.data(), ids_t.data() + T);
  std::int64_t second = T;  // the second picture's first soft token
  for (std::int64_t t = T - 1; t > 0; --t) {
    if (mask(0, t) && !mask(0, t - 1)) {
      second = t;
      break;
    }
  }
  REQUIRE(second < T);
  auto last_ok = [&](const std::vector<float>& l, const std::string& what) {
    Tensor<float, 3> got({1, 1, V}), ref({1, 1, V});
    std::copy(l.begin(), l.end(), got.data());
    std::copy(&want(0, T - 1, 0), &want(0, T - 1, 0) + V, ref.data());
    test::expect_close(AnyTensor::from(got), AnyTensor::from(ref), test::tol::f32_logits, what);
  };
  models::Session<Model> s(m, T + 16);
  CHECK(s.sync(ids, &mask, &soft) == 0);
  last_ok(s.logits(), "session, both pictures");
  const std::int64_t after_first = s.forwarded_tokens();
  CHECK(after_first == T);

  // The second picture replaced by the first: the cache is kept up to the second picture's start, not into it.
  Tensor<float, 2> swapped({soft.dim(0), soft.dim(1)});  // (a Tensor copy would share soft's buffer)
  std::copy(soft.data(), soft.data() + 256 * 32, swapped.data());
  std::copy(soft.data(), soft.data() + 256 * 32, swapped.data() + 256 * 32);
  CHECK(s.sync(ids, &mask, &swapped) == second);
  (void)s.logits();
  CHECK(s.forwarded_tokens() == after_first + (T - second));
  // And back: the second picture runs again whole; the logits are the reference's.
  CHECK(s.sync(ids, &mask, &soft) == second);
  last_ok(s.logits(), "session, second picture restored");
  CHECK(s.forwarded_tokens() == after_first + 2 * (T - second));
  // A rewind into the middle of the second picture keeps none of it.
  const std::int64_t before = s.forwarded_tokens();
  s.rewind(second + 100);
  CHECK(s.cached() == second);
  CHECK(s.sync(ids, &mask, &soft) == second);
  last_ok(s.logits(), "session, after a rewind inside a picture");
  CHECK(s.forwarded_tokens() == before + (T - second));
  // The same ids without the pictures are another conversation from the first picture on.
  const std::int64_t first = [&] {
    std::int64_t t = 0;
    while (mask(0, t) == 0) ++t;
    return t;
  }();
  CHECK(s.sync(ids) == first);

  // generate() with the pictures among the new tokens: the reference's greedy tokens.
  const std::vector<std::int32_t> greedy = greedy_tokens();
  models::Session<Model> fresh(m, T + 16);
  models::GenerateOptions go;
  go.max_new_tokens = static_cast<std::int64_t>(greedy.size());
  go.media_mask = &mask;
  go.media_embeddings = &soft;
  CHECK(fresh.generate(ids, go).tokens[0] == greedy);
  Tensor<float, 2> fewer({soft.dim(0) - 256, 32});
  expect_error<ArgumentError>([&] { (void)fresh.sync(ids, &mask, &fewer); }, "media_mask marks more tokens than");
}

TEST_CASE("media embeddings: a block MaxText does not merge for refuses them by name", "[models][multimodal]") {
  Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/simple_model"));
  models::Transformer<P, layers::SimpleDecoderLayer> m(c);
  m.init(1);
  Tensor<std::int32_t, 2> tok({1, 4}), mask({1, 4});
  for (std::int64_t t = 0; t < 4; ++t) {
    tok(0, t) = static_cast<std::int32_t>(t + 1);
    mask(0, t) = t == 1 ? 1 : 0;
  }
  Tensor<float, 2> rows({1, c.emb_dim});
  models::ForwardOptions fo;
  fo.media_mask = &mask;
  fo.media_embeddings = &rows;
  expect_error<UnsupportedError>([&] { (void)m.forward(tok, fo); }, "decoder_block 'simple' takes no media embeddings");
}

TEST_CASE("Gemma 3's tower from a llama.cpp mmproj GGUF gives the Hugging Face checkpoint's soft tokens bit for bit",
          "[models][gemma][multimodal][mmproj]") {
  // fixtures/gemma3_mm_model/mmproj.gguf: the fixture's tower written as llama.cpp's converter writes it
  // (tests/reference/gemma3_mmproj_fixture.py; mmproj.json lists every tensor and key). The same weights through
  // either file must give the same values: any misread tensor (a transposed projection, a norm without its + 1, the
  // pooling factor) would not.
  need_fixture();
  const std::string dir = fixture();
  io::Gemma3Mmproj m = io::gemma3_vision_from_mmproj(io::read_gguf(dir + "/mmproj.gguf"));
  const auto j = read_json(dir + "/hf/config.json");
  const layers::Gemma3VisionConfig hc = layers::Gemma3VisionConfig::from_hf(j, dir);
  CHECK(m.config.image_size == hc.image_size);
  CHECK(m.config.patch_size == hc.patch_size);
  CHECK(m.config.hidden_size == hc.hidden_size);
  CHECK(m.config.intermediate_size == hc.intermediate_size);
  CHECK(m.config.num_layers == hc.num_layers);
  CHECK(m.config.num_heads == hc.num_heads);
  CHECK(m.config.tokens_per_image == hc.tokens_per_image);
  CHECK(m.config.emb_dim == hc.emb_dim);
  CHECK(m.config.eps == hc.eps);
  test::Backend be;
  const layers::Gemma3VisionEncoder<P> tower(m.config);
  const auto pixels = f32<4>(test::npy(dir + "/pixels.npy"));
  const Tensor<float, 3> got = tower.encode(be, models::load_layer_params<P>(tower, m.tensors, be), pixels);
  const Tensor<float, 3> hf = tower.encode(
      be, models::load_layer_params<P>(tower, io::gemma3_vision_from_hf(io::read_safetensors(dir + "/hf/model.safetensors"), hc), be),
      pixels);
  REQUIRE(got.size() == hf.size());
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < got.size(); ++i) differ += got.data()[i] != hf.data()[i] ? 1 : 0;
  CHECK(differ == 0);
  test::expect_close(AnyTensor::from(got), test::npy(dir + "/image_tokens.npy"), test::tol::f32_logits, "mmproj tokens");

  // llama.cpp's converter stores mm.input_projection in F16 (tensor_force_quant), as its default output type does
  // every matrix: an F16 projection gives the tokens within F16's rounding of the weights. Each token is a sum of 16
  // products x_i w_i of normed inputs (|x| ~ 1) and weights; the sum cancels (tokens of 0.03 from sum |x_i w_i| ~ 1.6),
  // so the error is 2^-11 of sum |x_i w_i|, not of the token: atol 2e-3 (measured 7.9e-4 at most), rtol 5e-3.
  io::GgufFile half = io::read_gguf(dir + "/mmproj.gguf");
  {
    const AnyTensor& w = half.tensors.at("mm.input_projection.weight");
    Tensor<fp16, 2> h({w.shape[0], w.shape[1]});
    const Tensor<float, 2> f = w.to<float, 2>({w.shape[0], w.shape[1]});
    for (std::int64_t i = 0; i < f.size(); ++i) h.data()[i] = from_float<fp16>(f.data()[i]);
    half.tensors.tensors["mm.input_projection.weight"] = AnyTensor::from(h, "f16 projection");
  }
  io::Gemma3Mmproj mh = io::gemma3_vision_from_mmproj(half);
  const Tensor<float, 3> got16 = tower.encode(be, models::load_layer_params<P>(tower, mh.tensors, be), pixels);
  test::expect_close(AnyTensor::from(got16), AnyTensor::from(hf), testing::Tolerance{5e-3, 2e-3}, "f16 projection");

  // Refusals, by name.
  io::GgufFile other = io::read_gguf(dir + "/mmproj.gguf");
  other.metadata["clip.projector_type"].s = "llama4";
  expect_error<UnsupportedError>([&] { (void)io::gemma3_vision_from_mmproj(other); },
                                 "clip.projector_type 'llama4' is not Gemma 3's (gemma3)");
  io::GgufFile extra = io::read_gguf(dir + "/mmproj.gguf");
  extra.tensors.add("v.pre_ln.weight", extra.tensors.at("v.post_ln.weight"));
  expect_error<UnsupportedError>([&] { (void)io::gemma3_vision_from_mmproj(extra); }, "unexpected tensor v.pre_ln.weight");
  io::GgufFile missing = io::read_gguf(dir + "/mmproj.gguf");
  missing.tensors.tensors.erase("v.blk.1.attn_k.bias");
  expect_error<IoError>([&] { (void)io::gemma3_vision_from_mmproj(missing); }, "missing tensor v.blk.1.attn_k.bias");
  io::GgufFile mean = io::read_gguf(dir + "/mmproj.gguf");
  mean.metadata["clip.vision.image_mean"].floats = {0.48, 0.45, 0.40};
  expect_error<UnsupportedError>([&] { (void)io::gemma3_vision_from_mmproj(mean); }, "clip.vision.image_mean must be");
}
