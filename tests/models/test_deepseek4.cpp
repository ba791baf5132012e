// The deepseek4 decoder block (families/deepseek4/deepseek4.hpp) against the PyTorch float64 fixtures of
// tests/reference/deepseek4_reference.py (MaxText e591f30 deepseek4.py, attention_compressed.py, moe.py, mhc.py):
// the backend ops of compressed attention (HCA / CSA pooling, the indexer's scores and top-k, attention over the
// window, the blocks and the sinks); a 4-layer model (sliding window, CSA, HCA r 8, CSA; a hash-routed layer; mHC k 2):
// logits, every layer's streams and branches, hc_head, prompt split at block boundaries and inside blocks, token by
// token and ragged decoding, bf16; a 7-layer model in MaxText's scanned layout (hash-routed prefix + two HCA / CSA pairs);
// the CLI; and the errors for what the block cannot take.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/families/deepseek4/deepseek4.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/cli.hpp"
#include "support/decode_checks.hpp"
#include "support/family_fixture.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
using P32 = Policy<test::Backend, float>;
using PBf = Policy<test::Backend, bf16>;
using DeepSeek4 = models::Transformer<P32, layers::DeepSeek4DecoderLayer>;
using DeepSeek4Bf = models::Transformer<PBf, layers::DeepSeek4DecoderLayer>;

namespace {

const std::string kModel = "deepseek4_model";
const std::string kScanned = "deepseek4_scanned_model";

Config fixture_config(const std::string& name) { return io::load_config(test::fixture(name) + "/config.yml"); }

template <class Model = DeepSeek4>
Model load_model(const std::string& name, const std::string& file = "model.safetensors", Config c = {}) {
  if (c.decoder_block != "deepseek4") c = fixture_config(name);
  Model m(c);
  m.load(io::load_weights(test::fixture(name) + "/" + file, c).tensors);
  return m;
}

Tensor<std::int32_t, 2> fixture_tokens(const std::string& name) { return test::int_tensor(test::npy(test::fixture(name) + "/tokens.npy")); }

/// A [n] or [rows, cols] int32 fixture tensor on the host.
Tensor<std::int32_t, 1> ints(const AnyTensor& a) { return a.to<std::int32_t, 1>({a.numel()}); }

}  // namespace

// ---- the backend ops ---------------------------------------------------------------------------------------------

TEST_CASE("DeepSeek-V4 ops: HCA and CSA pooling, the indexer's scores and top-k, attention over window, blocks and "
          "sinks match the float64 reference", "[models][deepseek4][ops]") {
  const auto t = io::read_safetensors(test::fixture("deepseek4_ops") + "/ops.safetensors");
  const auto f32 = [&](const std::string& n) { return t.at(n); };
  test::Backend be;
  // f32: one rounding per output plus f32 sums of <= 16 terms of magnitude ~1.
  constexpr testing::Tolerance kOp{1e-5, 1e-6};

  SECTION("pooling") {
    for (const char* name : {"pool_hca", "pool_csa"}) {
      INFO(name);
      const std::string n(name);
      const bool overlap = n == "pool_csa";
      const AnyTensor kv = f32(n + ".kv"), out = f32(n + ".out");
      const std::int64_t Bn = kv.shape[0], r = f32(n + ".bias").shape[0], nb = out.shape[1], d = out.shape[2];
      const auto kvt = kv.to<float, 3>({Bn, kv.shape[1], kv.shape[2]});
      const auto gt = f32(n + ".gate").to<float, 3>({Bn, kv.shape[1], kv.shape[2]});
      const auto bt = f32(n + ".bias").to<float, 2>({r, kv.shape[2]});
      // All blocks at once, then blocks 1.. only (first > 0, and a row with fewer blocks: zeros beyond its count).
      Tensor<std::int32_t, 1> first({Bn}), count({Bn});
      first(0) = 0, first(1) = 0, count(0) = static_cast<std::int32_t>(nb), count(1) = static_cast<std::int32_t>(nb);
      Tensor<float, 3> y({Bn, nb, d});
      be.compress_pool(kvt.cview(), gt.cview(), bt.cview(), r, overlap, first.cview(), count.cview(), y.view());
      test::expect_close(AnyTensor::from(y), out, kOp, n + ".all");
      first(0) = 1, first(1) = 1, count(0) = static_cast<std::int32_t>(nb - 1), count(1) = 1;
      Tensor<float, 3> z({Bn, nb - 1, d});
      be.compress_pool(kvt.cview(), gt.cview(), bt.cview(), r, overlap, first.cview(), count.cview(), z.view());
      test::expect_close(AnyTensor::from(z).narrow(0, 0, 1), out.narrow(0, 0, 1).narrow(1, 1, nb - 1), kOp, n + ".from 1");
      test::expect_close(AnyTensor::from(z).narrow(0, 1, 1).narrow(1, 0, 1), out.narrow(0, 1, 1).narrow(1, 1, 1), kOp,
                         n + ".one block");
      for (std::int64_t i = 1; i < nb - 1; ++i) {
        for (std::int64_t c = 0; c < d; ++c) CHECK(z(1, i, c) == 0.0f);
      }
    }
  }

  SECTION("indexer") {
    for (const char* name : {"index", "index_early"}) {
      INFO(name);
      const std::string n(name);
      const AnyTensor qi = f32(n + ".qi"), kc = f32(n + ".kc");
      const std::int64_t M = qi.shape[0], H = qi.shape[1], di = qi.shape[2], Bn = kc.shape[0], nb = kc.shape[1];
      const auto pos = ints(f32(n + ".positions"));
      const std::int64_t T = M / Bn;
      Tensor<std::int32_t, 1> q_start({Bn});
      for (std::int64_t b = 0; b < Bn; ++b) q_start(b) = pos(b * T);
      Tensor<float, 2> scores({M, nb});
      Tensor<std::int32_t, 2> sel({M, 3});
      be.indexer_topk(qi.to<float, 3>({M, H, di}).cview(), f32(n + ".w").to<float, 2>({M, H}).cview(),
                      kc.to<float, 3>({Bn, nb, di}).cview(), q_start.cview(), 4,
                      static_cast<float>(1.0 / std::sqrt(static_cast<double>(di))),
                      static_cast<float>(1.0 / std::sqrt(static_cast<double>(H))), scores.view(), sel.view());
      const AnyTensor ref = f32(n + ".scores");
      const auto want = ints(f32(n + ".selected"));
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t j = 0; j < nb; ++j) {
          const double e = ref.element(m * nb + j);
          if (std::isinf(e)) {
            CHECK(std::isinf(scores(m, j)));
          } else {
            CHECK(std::fabs(scores(m, j) - e) <= 1e-5 * std::fabs(e) + 1e-6);
          }
        }
        for (std::int64_t i = 0; i < 3; ++i) {
          INFO("query " << m << " rank " << i);
          CHECK(sel(m, i) == want(m * 3 + i));
        }
      }
    }
  }

  SECTION("attention") {
    const AnyTensor q = f32("attend.q"), kv = f32("attend.kv"), blk = f32("attend.blocks");
    const std::int64_t Bn = q.shape[0], T = q.shape[1], N = q.shape[2], d = q.shape[3];
    const auto pos = ints(f32("attend.q_positions"));
    Tensor<std::int32_t, 1> q_start({Bn});
    for (std::int64_t b = 0; b < Bn; ++b) q_start(b) = pos(b * T);
    const auto qt = q.to<float, 4>({Bn, T, N, d});
    const auto kvt = kv.to<float, 3>({Bn, kv.shape[1], d});
    const auto bt = blk.to<float, 3>({Bn, blk.shape[1], d});
    const auto sinks = f32("attend.sinks").to<float, 1>({N});
    const auto sel = f32("attend_csa.selected").to<std::int32_t, 2>({Bn * T, 2});
    for (const bool csa : {false, true}) {
      Tensor<float, 4> o({Bn, T, N, d});
      be.compressed_attention(qt.cview(), kvt.cview(), bt.cview(), q_start.cview(), 6, 4,
                              csa ? sel.cview() : View<const std::int32_t, 2>(), sinks.cview(), AttentionOptions{},
                              o.view());
      test::expect_close(AnyTensor::from(o), f32(csa ? "attend_csa.out" : "attend_hca.out"), kOp,
                         csa ? "attend_csa" : "attend_hca");
    }
  }
}

// ---- the model ---------------------------------------------------------------------------------------------------

TEST_CASE("DeepSeek-V4 model matches the torch model: logits, every layer's streams and branches (sliding window, "
          "CSA + indexer, HCA, hash routing, mHC, hc_head), incremental and ragged decoding", "[models][deepseek4]") {
  DeepSeek4 m = load_model(kModel);
  const layers::Capture cap =
      test::check_model_fixture(m, test::fixture(kModel), kModel, [](std::int64_t) { return test::tol::f32_logits; });
  const std::string dir = test::fixture(kModel);
  for (std::int64_t i = 0; i < m.config().num_decoder_layers; ++i) {
    for (const char* branch : {".self_attention", ".mlp"}) {
      const std::string n = "decoder.layers_" + std::to_string(i) + branch;
      test::expect_close(cap.at(n), test::npy(dir + "/act_" + n + ".npy"), test::tol::f32_logits, n);
    }
  }
  test::expect_close(cap.at("decoder.hc_head"), test::npy(dir + "/act_decoder.hc_head.npy"), test::tol::f32_logits,
                     "decoder.hc_head");
  // The hash-routed layer 0 sends each token to the experts of its row of tid2eid, in the table's order.
  const auto table = io::load_weights(dir + "/model.safetensors", m.config())
                         .tensors.at("decoder.layers_0.mlp.MoeBlock_0.tid2eid");
  const AnyTensor idx = cap.at("decoder.layers_0.mlp.topk_indices");
  const auto tok = fixture_tokens(kModel);
  const std::int64_t k = m.config().num_experts_per_tok;
  for (std::int64_t i = 0; i < tok.size(); ++i) {
    for (std::int64_t j = 0; j < k; ++j) CHECK(idx.element(i * k + j) == table.element(tok.data()[i] * k + j));
  }
}

TEST_CASE("DeepSeek-V4 layers on their own: the CSA and HCA layers through run_layer on MaxText's streams, and the "
          "indexer scoring a long prompt in chunks", "[models][deepseek4]") {
  const Config c = fixture_config(kModel);
  const std::string dir = test::fixture(kModel);
  const auto tensors = io::load_weights(dir + "/model.safetensors", c).tensors;
  test::Backend be;
  for (const std::int64_t i : {1, 2, 3}) {  // CSA, HCA (r 8), CSA; layer 0 routes by token id (a model's forward)
    const std::string name = "decoder.layers_" + std::to_string(i);
    layers::DeepSeek4DecoderLayer<P32> layer(c, {i, name, name + ".self_attention", name + ".mlp"});
    const auto params = models::load_layer_params<P32>(layer, tensors, be, name);
    const AnyTensor x = test::npy(dir + "/act_decoder.layers_" + std::to_string(i - 1) + ".npy");
    const AnyTensor want = test::npy(dir + "/act_" + name + ".npy");
    test::expect_close(models::run_layer<P32>(layer, params, be, x), want, test::tol::f32_logits, name);
    // 74 tokens x 9 blocks scored in calls of at most 20 scores: runs of 2 tokens of one row.
    layer.set_indexer_score_chunk(20);
    test::expect_close(models::run_layer<P32>(layer, params, be, x), want, test::tol::f32_logits, name + " chunked");
  }
}

TEST_CASE("DeepSeek-V4: a prompt split inside and at block boundaries, then decoding, gives the full forward's logits",
          "[models][deepseek4]") {
  DeepSeek4 m = load_model(kModel);
  const auto tok = fixture_tokens(kModel);
  const AnyTensor ref = test::npy(test::fixture(kModel) + "/logits.npy");
  // 3 tokens (no block yet), 5 (completes CSA blocks 0-1, HCA block 0 at 8), 1 (inside), 7, then single tokens.
  for (const std::vector<std::int64_t>& parts : {std::vector<std::int64_t>{3, 5, 1, 7, 2, 1, 1, 17},
                                                 std::vector<std::int64_t>{8, 8, 8, 13}, std::vector<std::int64_t>{37}}) {
    auto cache = m.make_cache(tok.dim(0), m.config().max_target_length);
    std::int64_t t = 0;
    for (const std::int64_t n : parts) {
      INFO("tokens " << t << " .. " << t + n);
      test::expect_close(m.forward(test::cols(tok, t, n), cache), ref.narrow(1, t, n), test::tol::f32_logits, "split");
      t += n;
    }
    CHECK(t == tok.dim(1));
  }
}

TEST_CASE("DeepSeek-V4 in bf16: logits within bf16 rounding of the float64 reference", "[models][deepseek4]") {
  Config c = fixture_config(kModel);
  c.dtype = "bfloat16";
  DeepSeek4Bf m = load_model<DeepSeek4Bf>(kModel, "model.safetensors", c);
  const auto tok = fixture_tokens(kModel);
  // bf16: every MaxText op rounded to 2^-8 through 4 layers of ~25 ops each (two mHC maps, the compressors'
  // softmaxes, attention, MoE with clamped SwiGLU), and the indexer's and the router's choices made on bf16 scores:
  // the fixture's margins (2.6e-3 and 6e-4) are below bf16's resolution, so a near-tie may flip and swap one block
  // or expert for another. Measured on the CPU backend: worst logit error 0.27 (at a logit of ~4; layer outputs up
  // to 0.73 on streams of magnitude ~10). Bound: 0.4 absolute + 2^-4 relative; a wrong op moves logits by O(1).
  test::expect_close(m.forward(tok), test::npy(test::fixture(kModel) + "/logits.npy"), {1.0 / 16.0, 0.4}, "bf16 logits");
}

TEST_CASE("DeepSeek-V4 scanned layout: hash-routed prefix layers and scanned HCA / CSA pairs load to the same model",
          "[models][deepseek4]") {
  for (const char* file : {"model.safetensors", "model_scanned.safetensors"}) {
    INFO(file);
    DeepSeek4 m = load_model(kScanned, file);
    test::check_model_fixture(m, test::fixture(kScanned), kScanned, [](std::int64_t) { return test::tol::f32_logits; },
                              std::string(file) == "model.safetensors");
  }
}

TEST_CASE("DeepSeek-V4 through the maxtext CLI: MaxText checkpoints, unscanned and scanned", "[models][deepseek4][cli]") {
  for (const std::string& name : {kModel, kScanned}) {
    const std::string dir = test::fixture(name);
    test::check_cli_logits(dir, "--config " + dir + "/config.yml --weights " + dir + "/model.safetensors",
                           test::tol::f32_logits);
  }
  const std::string dir = test::fixture(kScanned);
  test::check_cli_logits(dir, "--config " + dir + "/config.yml --weights " + dir + "/model_scanned.safetensors "
                         "scan_layers=true", test::tol::f32_logits);
  test::check_cli_generates_seeded("deepseek4-tiny.yml base_num_decoder_layers=5 "
                                   "compress_ratios=[0,0,4,128,4] max_target_length=64 vocab_size=256");
}

// ---- errors ------------------------------------------------------------------------------------------------------

TEST_CASE("DeepSeek-V4 refuses configs, checkpoints and inputs it cannot take, by name", "[models][deepseek4][errors]") {
  const Config base = fixture_config(kModel);
  const auto refuses = [&](const std::string& key, const std::string& value, const std::string& what) {
    Config c = base;
    c.set(key, value, "test");
    c.derive();
    INFO(key << " = " << value);
    CHECK_THROWS_WITH(c.validate(), Catch::Contains(what));
  };
  refuses("compress_ratios", "[0, 4, 8]", "one entry per layer (4)");
  refuses("compress_ratios", "[0, 2, 8, 4]", "0 (disabled) or >= 4");
  refuses("first_num_hash_layers", "5", "first_num_hash_layers (5)");
  refuses("base_num_kv_heads", "2", "num_kv_heads 1");
  refuses("sliding_window_size", "0", "sliding_window_size > 0");
  refuses("o_groups", "0", "o_groups and o_lora_rank > 0");
  refuses("attention_type", "global", "attention_type 'compressed'");
  refuses("engram_layers", "[1]", "decoder_block deepseek only");
  {
    Config c = fixture_config(kModel);
    c.decoder_block = "deepseek";
    c.attention_type = "mla";
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("first_num_hash_layers = 1") && Catch::Contains("deepseek4 only"));
  }
  {
    Config c = base;  // MaxText would rotate int(88 * (30 / 88)) = 29 lanes
    c.head_dim = 88;
    c.qk_rope_head_dim = 30;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("= 29 lanes"));
  }
  {
    Config c = base;
    c.sparse_matmul = false;
    CHECK_THROWS_WITH(DeepSeek4(c), Catch::Contains("hash routing (first_num_hash_layers) with sparse_matmul=false"));
  }
  {
    Config c = base;
    c.o_groups = 3;  // 4 heads * 16 = 64 not a multiple of 3
    CHECK_THROWS_WITH(DeepSeek4(c), Catch::Contains("o_groups (3)"));
  }
  const std::string dir = test::fixture(kModel);
  SECTION("checkpoints") {
    io::TensorMap t = io::load_weights(dir + "/model.safetensors", base).tensors;
    io::TensorMap missing = t;
    missing.tensors.erase("decoder.layers_1.self_attention.csa_compressor.indexer.position_bias");
    DeepSeek4 m(base);
    CHECK_THROWS_WITH(m.load(missing), Catch::Contains("csa_compressor.indexer.position_bias") && Catch::Contains("missing"));
    // A hash table naming an expert that does not exist is refused at the first forward, naming the entry.
    io::TensorMap bad = t;
    Tensor<float, 2> table({base.vocab_size, base.num_experts_per_tok});
    for (std::int64_t i = 0; i < table.size(); ++i) table.data()[i] = static_cast<float>(i % 3);
    table(5, 1) = 6.0f;  // num_experts = 6
    bad.tensors["decoder.layers_0.mlp.MoeBlock_0.tid2eid"] = AnyTensor::from(table);
    DeepSeek4 h(base);
    h.load(bad);
    CHECK_THROWS_WITH(h.forward(fixture_tokens(kModel)), Catch::Contains("tid2eid[5, 1] = 6") &&
                                                             Catch::Contains("not an expert id"));
    // The scanned layout hard-codes HCA 128 / CSA 4 pairs: a config whose ratios differ cannot take it.
    Config sc = fixture_config(kScanned);
    sc.set("compress_ratios", "[0, 0, 4, 128, 4, 8, 4]", "test");
    CHECK_THROWS_WITH(io::load_weights(test::fixture(kScanned) + "/model_scanned.safetensors", sc),
                      Catch::Contains("HCA (128) / CSA (4) pairs") && Catch::Contains("layer 5"));
  }
  SECTION("inputs") {
    DeepSeek4 m = load_model(kModel);
    const auto tok = fixture_tokens(kModel);
    Tensor<std::int32_t, 2> pos({tok.dim(0), tok.dim(1)});
    for (std::int64_t i = 0; i < pos.size(); ++i) pos.data()[i] = static_cast<std::int32_t>(i % tok.dim(1) + 1);
    models::ForwardOptions fo;
    fo.positions = &pos;
    CHECK_THROWS_WITH(m.forward(tok, fo), Catch::Contains("positions other than the default"));
    Tensor<std::int32_t, 2> seg({tok.dim(0), tok.dim(1)});
    for (std::int64_t i = 0; i < seg.size(); ++i) seg.data()[i] = 1;
    models::ForwardOptions so;
    so.segment_ids = &seg;
    CHECK_THROWS_WITH(m.forward(tok, so), Catch::Contains("segment ids"));
  }
}
