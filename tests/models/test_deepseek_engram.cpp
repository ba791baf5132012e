// DeepSeek models with Engram layers (families/deepseek/deepseek.hpp + layers/engram.hpp) against the PyTorch float64
// re-statement tests/reference/deepseek_engram_reference.py: mHC k = 2 with Engram in layers 0 and 2, and a model
// without mHC with Engram in layer 1. Logits, the Engram modules' outputs and every layer's residual stream; cached
// decoding (prefill, token by token, ragged rows) against the full forward; MaxText's scanned layout with Engram
// (tests the canonicaliser on three fixtures); the config and table refusals.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/families/checkpoint.hpp"
#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/decode_checks.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using DeepSeek = models::Transformer<P32, layers::DeepSeekDenseLayer, layers::DeepSeekMoELayer>;

namespace {

struct EngramFixture {
  std::string dir;
  Config cfg;
  nlohmann::json meta;
  std::vector<std::int32_t> lookup;
  Tensor<std::int32_t, 2> tokens;
};

EngramFixture fixture(const std::string& name) {
  EngramFixture f;
  f.dir = test::fixtures_dir() + "/" + name + "/";
  f.cfg = io::load_config(f.dir + "config.yml");
  f.meta = test::read_meta(f.dir);
  const AnyTensor l = test::npy(f.dir + "engram_lookup.npy");
  const Tensor<std::int32_t, 1> lt = l.to<std::int32_t, 1>({l.shape[0]});
  f.lookup.assign(lt.data(), lt.data() + lt.size());
  const AnyTensor t = test::npy(f.dir + "tokens.npy");
  f.tokens = t.to<std::int32_t, 2>({t.shape[0], t.shape[1]});
  return f;
}

void give_table(DeepSeek& m, const EngramFixture& f) {
  m.set_engram_vocab(f.lookup, f.meta.at("compressed_vocab").get<std::int64_t>(), f.meta.at("pad_token").get<std::int32_t>());
}

}  // namespace

TEST_CASE("DeepSeek with Engram (mHC k 2, and without mHC): logits, Engram outputs and every layer match torch, "
          "and cached decoding equals the full forward",
          "[models][deepseek][engram]") {
  for (const char* name : {"deepseek_engram_mhc_model", "deepseek_engram_model"}) {
    INFO(name);
    const EngramFixture f = fixture(name);
    CHECK(f.cfg.engram_layers() == f.meta.at("engram_layers").get<std::vector<std::int64_t>>());
    DeepSeek m(f.cfg);
    m.load(io::load_weights(f.dir + "model.safetensors", f.cfg).tensors);
    CHECK(m.needs_engram_vocab());
    CHECK_THROWS_WITH(m.forward(f.tokens), Catch::Contains("is an Engram layer (engram_layers): it needs the step's "
                                                           "tokens and the model's compressed-token table"));
    give_table(m, f);
    CHECK_FALSE(m.needs_engram_vocab());
    layers::Capture cap;
    cap.request_all();
    models::ForwardOptions fo;
    fo.capture = &cap;
    const auto logits = m.forward(f.tokens, fo);
    test::expect_close(AnyTensor::from(logits), test::npy(f.dir + "logits.npy"), test::tol::f32_logits, "logits");
    // The residual streams [B, T, k*D] after each layer and the Engram outputs added to them (f32 through a few
    // dozen ops on O(1) values: 1e-5 of the tensor's scale).
    std::vector<std::string> acts{"token_embedder", "decoder.dense_layers_0", "decoder.moe_layers_0",
                                  "decoder.moe_layers_1", "decoder.decoder_norm"};
    const std::vector<std::string> layer_names = acts;
    for (const std::int64_t l : f.cfg.engram_layers()) acts.push_back(layer_names[static_cast<std::size_t>(l + 1)] + ".engram");
    for (const auto& n : acts) {
      INFO(n);
      const AnyTensor ref = test::npy(f.dir + "act_" + n + ".npy");
      const AnyTensor got = cap.at(n);
      REQUIRE(got.numel() == ref.numel());
      test::expect_close_scaled(got.reshaped(ref.shape), ref, 1e-5, n);
    }
    // Each Engram layer changes the stream: its output is not negligible next to the input (a test that would pass
    // with the module skipped would be no test).
    for (const std::int64_t l : f.cfg.engram_layers()) {
      const AnyTensor e = test::npy(f.dir + "act_" + layer_names[static_cast<std::size_t>(l + 1)] + ".engram.npy");
      const Tensor<double, 1> ev = e.to<double, 1>({e.numel()});
      double mx = 0;
      for (std::int64_t i = 0; i < ev.size(); ++i) mx = std::max(mx, std::abs(ev(i)));
      CHECK(mx > 0.3);
    }
    // Decoding with the cache: the conv states and the token history carry over between steps and rows.
    test::check_cached_decoding(m, f.tokens, logits, test::tol::f32_logits, name);
    // A forked cache continues on its own (KVCache::clone copies the Engram history and conv state).
    auto cache = m.make_cache(f.tokens.dim(0), f.tokens.dim(1));
    (void)m.forward(test::cols(f.tokens, 0, 5), cache);
    auto fork = cache.clone(test::Backend{});
    const AnyTensor want = AnyTensor::from(logits).narrow(1, 5, 1);
    test::expect_close(AnyTensor::from(m.forward(test::cols(f.tokens, 5, 1), fork)), want, test::tol::f32_logits, "fork");
    test::expect_close(AnyTensor::from(m.forward(test::cols(f.tokens, 5, 1), cache)), want, test::tol::f32_logits,
                       "original after fork");
  }
}

TEST_CASE("DeepSeek with Engram from MaxText's scanned layout (unscanned Engram layers between scanned runs) loads to "
          "the unscanned model", "[models][deepseek][engram]") {
  for (const char* name : {"deepseek_engram_mhc_model", "deepseek_engram_model", "deepseek_engram_scan_model"}) {
    INFO(name);
    const EngramFixture f = fixture(name);
    // deepseek_engram_scan_model: dense_layers_0_1 (two layers on param_scan_axis), moe_layers_2_2,
    // moe_layers_engram_3, moe_layers_4_4.
    const auto scanned = io::load_weights(f.dir + "model_scanned.safetensors", f.cfg).tensors;
    const auto plain = io::load_weights(f.dir + "model.safetensors", f.cfg).tensors;
    CHECK(scanned.tensors.size() == plain.tensors.size());
    DeepSeek m(f.cfg);
    m.load(scanned);
    give_table(m, f);
    test::expect_close(AnyTensor::from(m.forward(f.tokens)), test::npy(f.dir + "logits.npy"), test::tol::f32_logits,
                       std::string(name) + " scanned");
  }
  // A run whose tensor does not hold its layer count, and a run reaching into the MoE layers, are refused by name.
  const EngramFixture f = fixture("deepseek_engram_scan_model");
  io::TensorMap bad = io::read_safetensors(f.dir + "model_scanned.safetensors");
  bad.tensors["decoder.dense_layers_0_2.mlp.wi_0.kernel"] = bad.tensors.at("decoder.dense_layers_0_1.mlp.wi_0.kernel");
  CHECK_THROWS_WITH(io::canonicalize_maxtext(bad, f.cfg), Catch::Contains("decoder.dense_layers_0_2.mlp.wi_0.kernel") &&
                                                           Catch::Contains("expected 3 layers (0 to 2)"));
  bad.tensors.erase("decoder.dense_layers_0_2.mlp.wi_0.kernel");
  bad.tensors["decoder.dense_layers_engram_3.pre_self_attention_layer_norm.scale"] =
      bad.tensors.at("decoder.moe_layers_engram_3.pre_self_attention_layer_norm.scale");
  CHECK_THROWS_WITH(io::canonicalize_maxtext(bad, f.cfg), Catch::Contains("layer 3 is not a dense layer"));
}

TEST_CASE("DeepSeek Engram: configs and tables it cannot use are refused by name", "[models][deepseek][engram][errors]") {
  const EngramFixture f = fixture("deepseek_engram_mhc_model");
  const auto load = [&](std::vector<std::string> o) { return io::load_config(f.dir + "config.yml", o); };
  CHECK_THROWS_WITH(load({"engram_layers=[1,3]"}), Catch::Contains("engram_layers: layer 3 is beyond the 3 decoder layers"));
  CHECK_THROWS_WITH(load({"engram_layers=[1,1]"}), Catch::Contains("engram_layers: layer 1 is listed twice"));
  CHECK_THROWS_WITH(load({"engram_layers=[-1]"}), Catch::Contains("engram_layers: expected a list of integers >= 0"));
  CHECK_THROWS_WITH(load({"engram_vocab_bases=[23]"}), Catch::Contains("expected 2 sizes (one per n-gram order"));
  CHECK_THROWS_WITH(load({"engram_kernel_size=0"}), Catch::Contains("engram_kernel_size must be >= 1"));
  CHECK_THROWS_WITH(load({"engram_num_heads=20000"}), Catch::Contains("engram_num_heads = 20000 is beyond 16384"));
  CHECK_THROWS_WITH(load({"engram_num_heads=12000", "engram_max_ngram_size=4", "engram_vocab_bases=[23, 31, 37]"}),
                    Catch::Contains("Engram hash tables: 12000 heads x 3 orders x 2 layers = 72000, beyond 65536"));
  CHECK_THROWS_WITH(load({"engram_vocab_bases=[23, 2000000000]"}), Catch::Contains("2000000000 is beyond 2^30"));
  CHECK_THROWS_WITH(io::load_config("", {"engram_layers=[0]"}), Catch::Contains("exists for decoder_block deepseek only"));
  DeepSeek m(f.cfg);
  const std::int64_t cv = f.meta.at("compressed_vocab").get<std::int64_t>();
  CHECK_THROWS_WITH(m.set_engram_vocab(f.lookup, cv, 64), Catch::Contains("pad token 64 is outside the compressed-token "
                                                                           "table of 64 tokens"));
  std::vector<std::int32_t> bad = f.lookup;
  bad[7] = static_cast<std::int32_t>(cv);
  CHECK_THROWS_WITH(m.set_engram_vocab(bad, cv, 3), Catch::Contains("token 7 maps to " + std::to_string(cv)));
  // A table shorter than the model's vocabulary: a token beyond it is refused when it is hashed.
  m.load(io::load_weights(f.dir + "model.safetensors", f.cfg).tensors);
  m.set_engram_vocab(std::vector<std::int32_t>(f.lookup.begin(), f.lookup.begin() + 10), cv, 3);
  Tensor<std::int32_t, 2> tok({1, 2});
  tok(0, 0) = 1;
  tok(0, 1) = 12;
  CHECK_THROWS_WITH(m.forward(tok), Catch::Contains("token 12 is beyond the compressed-token table of 10 tokens"));
  Config plain = f.cfg;
  plain.extra.erase("engram_layers");
  DeepSeek p(plain);
  CHECK_THROWS_WITH(p.set_engram_vocab(f.lookup, cv, 3), Catch::Contains("this model has no Engram layers"));
}
