// The gemma / gemma2 / gemma3 decoder layers and tiny models against the PyTorch fixtures
// (tests/reference/gemma_reference.py): MaxText checkpoints (unscanned and scanned) and the Hugging Face
// checkpoints they were folded from, incremental and ragged decoding, config validation and the model ymls.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/checkpoint.hpp"
#include "maxtext/families/gemma/gemma.hpp"
#include "maxtext/families/gemma/gemma2.hpp"
#include "maxtext/families/gemma/gemma3.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/layer_runner.hpp"
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
using Gemma = models::Transformer<P32, layers::GemmaDecoderLayer>;
using Gemma2 = models::Transformer<P32, layers::Gemma2DecoderLayer>;
using Gemma3 = models::Transformer<P32, layers::Gemma3DecoderLayer>;

namespace {

Tensor<std::int32_t, 2> cols(const Tensor<std::int32_t, 2>& t, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({t.dim(0), n});
  for (std::int64_t b = 0; b < t.dim(0); ++b) {
    for (std::int64_t i = 0; i < n; ++i) s(b, i) = t(b, c0 + i);
  }
  return s;
}

Tensor<std::int32_t, 2> row_cols(const Tensor<std::int32_t, 2>& t, std::int64_t b, std::int64_t c0, std::int64_t n) {
  Tensor<std::int32_t, 2> s({1, n});
  for (std::int64_t i = 0; i < n; ++i) s(0, i) = t(b, c0 + i);
  return s;
}

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/" + name; }

/// The logits and every layer's output against the fixture.
template <class Model>
void check_logits_and_acts(Model& m, const std::string& dir, const std::string& what) {
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const std::int64_t L = test::read_meta(dir).at("layers").get<std::int64_t>();
  layers::Capture cap;
  cap.request_all();
  models::ForwardOptions opt;
  opt.capture = &cap;
  const auto full = m.forward(tok, opt);
  test::expect_close(full, test::npy(dir + "/logits.npy"), test::tol::f32_logits, what + ".logits");
  if (m.name_scheme() != models::NameScheme::maxtext) return;
  std::vector<std::string> acts{"token_embedder", "decoder.decoder_norm"};
  for (std::int64_t i = 0; i < L; ++i) acts.push_back("decoder.layers_" + std::to_string(i));
  for (const auto& a : acts) {
    test::expect_close(cap.at(a), test::npy(dir + "/act_" + a + ".npy"), test::tol::f32_logits, what + "." + a);
  }
}

/// Fixture model from model.safetensors: logits, layer outputs, then prefill + one token at a time.
template <class Model>
void check_model_fixture(const std::string& name) {
  const std::string dir = fixture(name);
  Model m(test::config_from_meta(test::read_meta(dir)));
  m.load(io::read_safetensors(dir + "/model.safetensors"));
  check_logits_and_acts(m, dir, name);
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  const auto full = AnyTensor::from(m.forward(tok));
  const std::int64_t T = tok.dim(1), P0 = 4;
  auto cache = m.make_cache(tok.dim(0), T);
  test::expect_close(m.forward(cols(tok, 0, P0), cache), full.narrow(1, 0, P0), test::tol::decode_step, name + ".prefill");
  for (std::int64_t t = P0; t < T; ++t) {
    test::expect_close(m.forward(cols(tok, t, 1), cache), full.narrow(1, t, 1), test::tol::decode_step, name + ".step " + std::to_string(t));
  }
}

/// The same model from MaxText's scanned layout (model_scanned.safetensors, `params.` prefix).
template <class Model>
void check_scanned_fixture(const std::string& name) {
  const std::string dir = fixture(name);
  const Config c = test::config_from_meta(test::read_meta(dir));
  Model m(c);
  m.load(io::canonicalize_maxtext(io::read_safetensors(dir + "/model_scanned.safetensors"), c));
  check_logits_and_acts(m, dir, name + " (scanned)");
}

/// The Hugging Face checkpoint under hf/: config from config.json, tensors mapped and folded by the importer.
template <class Model>
void check_hf_fixture(const std::string& name) {
  const std::string dir = fixture(name);
  const auto cfg = io::read_weights_config(dir + "/hf");
  REQUIRE(cfg.has_value());
  const Config ref = test::config_from_meta(test::read_meta(dir));
  CHECK(cfg->decoder_block == ref.decoder_block);
  CHECK(cfg->num_decoder_layers == ref.num_decoder_layers);
  CHECK(cfg->sliding_window_size == ref.sliding_window_size);
  CHECK(cfg->use_post_attn_norm == ref.use_post_attn_norm);
  CHECK(cfg->attn_logits_soft_cap == ref.attn_logits_soft_cap);
  CHECK(cfg->final_logits_soft_cap == ref.final_logits_soft_cap);
  CHECK(cfg->rope_linear_scaling_factor == ref.rope_linear_scaling_factor);
  CHECK(cfg->local_rope_max_timescale == ref.local_rope_max_timescale);
  Model m(*cfg);
  const auto w = io::load_weights(dir + "/hf", *cfg);
  CHECK(w.format == io::WeightFormat::hf_safetensors);
  m.load(w.tensors);
  check_logits_and_acts(m, dir, name + " (hf)");
}

}  // namespace

namespace {
/// A Gemma3DecoderLayer fixture (its index from meta.json) on policy P.
template <class P>
void check_gemma3_layer(const std::string& name, testing::Tolerance tol) {
  const std::string dir = fixture(name);
  const auto meta = test::read_meta(dir);
  const Config c = test::config_from_meta(meta);
  const std::int64_t index = meta.at("layer_index").get<std::int64_t>();
  test::Backend be;
  layers::Gemma3DecoderLayer<P> layer(c, {index, "layer", "layer.self_attention", "layer.mlp"});
  CHECK(layer.attention().args().attention_type ==
        (index == 5 ? layers::AttentionType::global : layers::AttentionType::local_sliding));
  const auto params = models::load_layer_params<P>(layer, io::read_safetensors(dir + "/weights.safetensors"), be);
  Tensor<std::int32_t, 2> pos = test::int_tensor(test::npy(dir + "/positions.npy"));
  layers::Capture cap({"layer.self_attention", "layer.mlp"});
  const auto y = models::run_layer<P>(layer, params, be, test::npy(dir + "/x.npy"), nullptr, &pos, &cap);
  test::expect_close(y, test::npy(dir + "/out.npy"), tol, name + ".out");
  test::expect_close(cap.at("layer.self_attention"), test::npy(dir + "/attn.npy"), tol, name + ".attn");
  test::expect_close(cap.at("layer.mlp"), test::npy(dir + "/mlp.npy"), tol, name + ".mlp");
}
}  // namespace

TEST_CASE("Gemma3DecoderLayer: local (index 0) and global (index 5) layers match the torch fixtures", "[layers][gemma3]") {
  check_gemma3_layer<P32>("gemma3_layer_local", test::tol::f32_layer);
  check_gemma3_layer<P32>("gemma3_layer_global", test::tol::f32_layer);
}

TEST_CASE("Gemma3DecoderLayer in bf16 stays within bf16 rounding of the f64 reference", "[layers][gemma3][bf16]") {
  // As test_llama_family.cpp's bf16 case (~10 bf16 roundings on values of magnitude ~2: 4 ulp relative), with 0.1
  // absolute instead of 0.06: the post-attention / post-FFW norms rescale the sublayer outputs to unit RMS, which
  // magnifies the absolute rounding error of small attention outputs (largest seen: 0.07 on one of 576 values).
  const testing::Tolerance bf{4.0 / 128.0, 0.1};
  check_gemma3_layer<Policy<test::Backend, bf16>>("gemma3_layer_local", bf);
  check_gemma3_layer<Policy<test::Backend, bf16>>("gemma3_layer_global", bf);
}

TEST_CASE("Gemma 3 model (7 layers: 5 local + 1 global + remainder) matches the torch model, incremental decoding",
          "[models][gemma3]") {
  check_model_fixture<Gemma3>("gemma3_model");
}

TEST_CASE("Gemma model (2 layers) matches the torch model, incremental decoding", "[models][gemma]") {
  check_model_fixture<Gemma>("gemma_model");
}

TEST_CASE("Gemma 2 model (2 local+global pairs, soft caps) matches the torch model, incremental decoding",
          "[models][gemma2]") {
  check_model_fixture<Gemma2>("gemma2_model");
}

TEST_CASE("Gemma models load MaxText's scanned layout (Gemma 3: layers.layers_j + layers_remainder)",
          "[models][gemma][checkpoint]") {
  check_scanned_fixture<Gemma3>("gemma3_model");
  check_scanned_fixture<Gemma>("gemma_model");
  check_scanned_fixture<Gemma2>("gemma2_model");
}

TEST_CASE("Gemma Hugging Face checkpoints import with the norm, embedding and query folding and give the same logits",
          "[models][gemma][hf]") {
  check_hf_fixture<Gemma3>("gemma3_model");
  check_hf_fixture<Gemma>("gemma_model");
  check_hf_fixture<Gemma2>("gemma2_model");
}

// A named function template rather than a generic lambda: nvcc (error #445-D under -Werror) rejects a captureless
// lambda whose template parameter does not appear in its parameters.
template <class Model>
void check_gguf_fixture(const std::string& name) {
  const std::string dir = fixture(name);
  const auto cfg = io::read_weights_config(dir + "/model.gguf");
  REQUIRE(cfg.has_value());
  const Config ref = test::config_from_meta(test::read_meta(dir));
  CHECK(cfg->decoder_block == ref.decoder_block);
  CHECK(cfg->num_decoder_layers == ref.num_decoder_layers);
  CHECK(cfg->sliding_window_size == ref.sliding_window_size);
  CHECK(cfg->rope_linear_scaling_factor == ref.rope_linear_scaling_factor);
  Model m(*cfg);
  const auto w = io::load_weights(dir + "/model.gguf", *cfg);
  CHECK(w.format == io::WeightFormat::gguf);
  m.load(w.tensors);
  check_logits_and_acts(m, dir, name + " (gguf)");
}

TEST_CASE("Gemma GGUF files (llama.cpp names, norms already 1 + w, embedding unscaled) give the same logits",
          "[models][gemma][gguf]") {
  check_gguf_fixture<Gemma3>("gemma3_model");
  check_gguf_fixture<Gemma>("gemma_model");
}

/// The fixture's GGUF rewritten with its matrices (inner dim a multiple of 32) in `type` (f16 or q8_0), and again in
/// f32 holding exactly the values of that copy; the importer keeps f16 / Q8_0 matrices as they are where folding
/// allows and must give the widened copy's model.
template <class Model>
void check_gguf_storage_copy(const std::string& name, DType type, DType query_type, bool exact) {
  const std::string dir = fixture(name);
  const io::GgufFile src = io::read_gguf(dir + "/model.gguf");
  io::GgufWriter wt, wf;
  for (const auto& key : src.metadata_order) {
    if (key == "general.alignment") continue;
    wt.set(key, src.metadata.at(key));
    wf.set(key, src.metadata.at(key));
  }
  for (const auto& info : src.infos) {
    const AnyTensor& t = src.tensors.at(info.name);
    if (t.rank() == 2 && t.shape[1] % 32 == 0) {
      io::GgufWriter one;
      one.add_tensor("t", t, type);
      const std::string p = "storage_copy_one.gguf";
      one.write(p);
      const io::GgufFile back = io::read_gguf(p);  // the stored values, read as the importer will read them
      wt.add_tensor(info.name, back.tensors.at("t"));
      wf.add_tensor(info.name, AnyTensor::from(back.tensors.at("t").to<float, 2>({t.shape[0], t.shape[1]})));
      std::remove(p.c_str());
    } else {
      wt.add_tensor(info.name, t);
      wf.add_tensor(info.name, t);
    }
  }
  const std::string pt = name + "_storage_copy.gguf", pf = name + "_storage_copy_f32.gguf";
  wt.write(pt);
  wf.write(pf);
  {
    const auto cfg = io::read_weights_config(pt);
    REQUIRE(cfg.has_value());
    const auto w = io::load_weights(pt, *cfg);
    const auto wide = io::load_weights(pf, *cfg);
    for (const auto& [n, t] : w.tensors.tensors) {  // the attention kernels as the importer left them
      INFO(n);
      if (n.find("key.kernel") != std::string::npos || n.find("value.kernel") != std::string::npos) {
        CHECK(t.dtype == type);
      } else if (n.find("query.kernel") != std::string::npos) {
        CHECK(t.dtype == query_type);
      }
    }
    Model mt(*cfg), mf(*cfg);
    mt.load(w.tensors);
    mf.load(wide.tensors);
    const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
    const Tensor<float, 3> lt = mt.forward(tok), lf = mf.forward(tok);
    if (exact) {
      CHECK(std::memcmp(lt.data(), lf.data(), static_cast<std::size_t>(lt.size()) * sizeof(float)) == 0);
    } else {
      // Q8_0 with a query scale that is not a power of two: the scale is folded into each block's fp16 scale, which
      // rounds it (relative 2^-11 at most), against f32 products of the widened copy.
      test::expect_close(AnyTensor::from(lt), AnyTensor::from(lf), {2e-3, 2e-3}, name + " q8_0 query scale");
    }
  }
  std::remove(pt.c_str());
  std::remove(pf.c_str());
}

TEST_CASE("Gemma GGUF files in F16 or Q8_0: matrices kept in their type give the model of their widened values",
          "[models][gemma][gguf][q8_0]") {
  // Gemma 3 scales queries in the forward: every kernel is a view of the file.
  check_gguf_storage_copy<Gemma3>("gemma3_model", DType::f16, DType::f16, true);
  check_gguf_storage_copy<Gemma3>("gemma3_model", DType::q8_0, DType::q8_0, true);
  // Gemma folds head_dim^-0.5 = 8^-0.5 into the query: in f32 for f16 (exact), into the block scales for Q8_0.
  check_gguf_storage_copy<Gemma>("gemma_model", DType::f16, DType::f32, true);
  check_gguf_storage_copy<Gemma>("gemma_model", DType::q8_0, DType::q8_0, false);
}

TEST_CASE("Gemma 3 model: batched decode with rows at different lengths matches single-row runs",
          "[models][gemma3][decode]") {
  const std::string dir = fixture("gemma3_model");
  Gemma3 m(test::config_from_meta(test::read_meta(dir)));
  m.load(io::read_safetensors(dir + "/model.safetensors"));
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  // Row 0 has a 2-token prompt, row 1 a 5-token prompt (right-padded); both then decode 4 tokens, so row 1 reaches
  // position 8, past the sliding window (3) of the local layers.
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
  // The full-length row 1 also equals the fixture's torch logits at its last position.
  test::expect_close(AnyTensor::from(steps.back()).narrow(0, 1, 1),
                     test::npy(dir + "/logits.npy").narrow(0, 1, 1).narrow(1, 8, 1), test::tol::f32_logits,
                     "row 1 last step vs torch");
}

namespace {
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
nlohmann::json hf_json(const std::string& name) {
  std::ifstream f(fixture(name) + "/hf/config.json");
  return nlohmann::json::parse(f);
}
}  // namespace

TEST_CASE("Gemma configs: inconsistent or unsupported settings are refused by name", "[models][gemma][errors]") {
  Config c = test::config_from_meta(test::read_meta(fixture("gemma3_model")));
  Config bad = c;
  bad.model_name = "gemma3-tiny";
  expect_error<ConfigError>([&] { bad.validate(); }, "decoder_block gemma3 picks query_pre_attn_scalar by model_name");
  bad = c;
  bad.sliding_window_size = 0;
  expect_error<ConfigError>([&] { bad.validate(); }, "decoder_block gemma3 needs sliding_window_size > 0");
  bad = test::config_from_meta(test::read_meta(fixture("gemma2_model")));
  bad.sliding_window_size = 0;
  expect_error<ConfigError>([&] { bad.validate(); }, "decoder_block gemma2 needs sliding_window_size > 0");

  auto j = hf_json("gemma3_model");
  j["layer_types"][1] = "full_attention";
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "layer_types[1] is \"full_attention\"");
  j = hf_json("gemma3_model");
  j["layer_types"].erase(6);
  expect_error<ConfigError>([&] { (void)io::config_from_hf(j, "x"); }, "layer_types has 6 entries for num_hidden_layers 7");
  j = hf_json("gemma3_model");
  j["query_pre_attn_scalar"] = 10;
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "query_pre_attn_scalar 10 matches neither");
  j = hf_json("gemma3_model");
  j["model_type"] = "gemma3";  // the multimodal Gemma 3 nests its text model under text_config
  expect_error<IoError>([&] { (void)io::config_from_hf(j, "x"); }, "model_type gemma3 (Gemma3ForConditionalGeneration) needs a text_config");
  j = hf_json("gemma2_model");
  j["num_hidden_layers"] = 3;
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "num_hidden_layers 3 is odd");
  j = hf_json("gemma_model");
  j["tie_word_embeddings"] = false;
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "tie_word_embeddings = false");
  j = hf_json("gemma_model");
  j["hidden_activation"] = "relu";
  expect_error<UnsupportedError>([&] { (void)io::config_from_hf(j, "x"); }, "hidden_activation 'relu'");

  // A scanned Gemma 3 checkpoint whose repetition count does not match num_decoder_layers // 6.
  const auto scanned = io::read_safetensors(fixture("gemma3_model") + "/model_scanned.safetensors");
  Config thirteen = c;
  thirteen.base_num_decoder_layers = 13;
  thirteen.derive();
  expect_error<ShapeError>([&] { (void)io::canonicalize_maxtext(scanned, thirteen); }, "expected 2 repetitions");
  Config six = c;
  six.base_num_decoder_layers = 6;
  six.derive();
  expect_error<ShapeError>([&] { (void)io::canonicalize_maxtext(scanned, six); }, "sub-layer 0 outside [0, 0)");
  // HF tensors missing: the importer names them.
  io::TensorMap hf = io::read_safetensors(fixture("gemma3_model") + "/hf/model.safetensors");
  hf.tensors.erase("model.layers.6.self_attn.k_norm.weight");
  expect_error<IoError>([&] { (void)io::import_hf_gemma(hf, c, 1.0); }, "missing tensor model.layers.6.self_attn.k_norm.weight");
}

TEST_CASE("Gemma model ymls load, dispatch through the registry and have the published parameter counts",
          "[models][gemma][registry]") {
  // Gemma 3 4b text decoder: 3.88B parameters (tied embedding; the 0.4B vision tower is not modelled).
  Config g3 = io::load_config("", {"model_name=gemma3-4b"});
  CHECK(g3.is("gemma3"));
  CHECK(g3.use_post_attn_norm);
  CHECK(g3.sliding_window_size == 1024);
  CHECK(g3.local_rope_max_timescale == 10000);
  CHECK(g3.rope_linear_scaling_factor == 8.0);
#if !defined(MAXTEXT_TEST_BACKEND_CUDA)  // CUDA tests do not link the CPU block library (registry_params.hpp)
  {
    const std::int64_t D = 2560, N = 8, K = 4, H = 256, F = 10240, L = 34, V = 262144;
    const std::int64_t layer = 2 * D * N * H + 2 * D * K * H + 2 * H + 3 * D * F + 4 * D;
    const auto n = test::registry_num_params(g3);
    CHECK(n == V * D + L * layer + D);
  }
#endif
  // gemma2-2b: 13 MaxText layers = 26 real ones; 2.61B parameters.
  Config g2 = io::load_config("", {"model_name=gemma2-2b"});
  CHECK(g2.is("gemma2"));
  CHECK(g2.num_decoder_layers == 13);
  CHECK(g2.final_logits_soft_cap == 30.0);
#if !defined(MAXTEXT_TEST_BACKEND_CUDA)  // CUDA tests do not link the CPU block library (registry_params.hpp)
  {
    const std::int64_t D = 2304, N = 8, K = 4, H = 256, F = 9216, L = 26, V = 256128;
    const std::int64_t layer = 2 * D * N * H + 2 * D * K * H + 3 * D * F + 4 * D;
    const auto n = test::registry_num_params(g2);
    CHECK(n == V * D + L * layer + D);
  }
#endif
  // gemma-2b: 2.51B parameters (MQA).
  Config g1 = io::load_config("", {"model_name=gemma-2b"});
  CHECK(g1.is("gemma"));
#if !defined(MAXTEXT_TEST_BACKEND_CUDA)  // CUDA tests do not link the CPU block library (registry_params.hpp)
  {
    const std::int64_t D = 2048, N = 8, K = 1, H = 256, F = 16384, L = 18, V = 256128;
    const std::int64_t layer = 2 * D * N * H + 2 * D * K * H + 3 * D * F + 2 * D;
    const auto n = test::registry_num_params(g1);
    CHECK(n == V * D + L * layer + D);
  }
#endif
  for (const std::string name : {"gemma3-12b", "gemma3-27b", "gemma2-9b", "gemma2-27b", "gemma-7b"}) {
    const Config c = io::load_config("", {"model_name=" + name});
    CHECK_NOTHROW(c.validate());
  }
}

#if defined(MAXTEXT_TEST_DEFAULT_BACKEND)  // the CLI runs on the CPU
namespace {
std::string token_arg(const std::string& dir) {
  const auto tok = test::int_tensor(test::npy(dir + "/tokens.npy"));
  std::string ids;
  for (std::int64_t b = 0; b < tok.dim(0); ++b) {
    for (std::int64_t t = 0; t < tok.dim(1); ++t) ids += (t ? "," : (b ? "/" : "")) + std::to_string(tok(b, t));
  }
  return ids;
}
}  // namespace

TEST_CASE("maxtext logits / generate (CLI) on the Gemma checkpoints: HF directory, GGUF (gemma, gemma3), MaxText yml + "
          "scanned weights",
          "[models][gemma][cli]") {
  const std::string cli = ::maxtext::test::cli_path();
  const std::string out = "gemma_cli_logits.npy";
  auto run_logits = [&](const std::string& dir, const std::string& args) {
    const std::string cmd = cli + " logits " + args + " --tokens " + token_arg(dir) + " --incremental 3 --out " + out +
                            " > /dev/null";
    INFO(cmd);
    REQUIRE(std::system(cmd.c_str()) == 0);
    test::expect_close(test::npy(out), test::npy(dir + "/logits.npy"), test::tol::f32_logits, "cli logits " + args);
    std::remove(out.c_str());
  };
  for (const std::string name : {"gemma_model", "gemma2_model", "gemma3_model"}) {
    const std::string dir = fixture(name);
    run_logits(dir, "--weights " + dir + "/hf");
    const std::string gen = cli + " generate --weights " + dir + "/hf --tokens 1,2,3/4,5,6 --max-new-tokens 4 > /dev/null";
    CHECK(std::system(gen.c_str()) == 0);
  }
  // Gemma and Gemma 2 MaxText checkpoints (the fixture's config as a YAML file; unscanned and scanned trees) and HF
  // directories through the CLI; Gemma 3's MaxText checkpoint goes through its model yml below.
  test::check_cli_checkpoints(fixture("gemma_model"), test::tol::f32_logits);
  test::check_cli_checkpoints(fixture("gemma2_model"), test::tol::f32_logits);
  run_logits(fixture("gemma3_model"), "--weights " + fixture("gemma3_model") + "/model.gguf");
  run_logits(fixture("gemma_model"), "--weights " + fixture("gemma_model") + "/model.gguf");
  // MaxText's way for a tiny Gemma 3: the gemma3-4b model file (its query scale rule) with the sizes overridden.
  std::string overrides;
  const auto meta = test::read_meta(fixture("gemma3_model"));
  for (const auto& [k, v] : meta.at("config").items()) {
    std::string val = v.is_string() ? v.get<std::string>() : v.dump();
    if (v.is_array()) val = v[0].get<std::string>() + "," + v[1].get<std::string>();
    overrides += " " + k + "=" + val;
  }
  const std::string yml = test::fixtures_dir() + "/../../configs/models/gemma3-4b.yml";
  run_logits(fixture("gemma3_model"), "--config " + yml + " --weights " + fixture("gemma3_model") +
                                          "/model_scanned.safetensors" + overrides);
}
#endif
