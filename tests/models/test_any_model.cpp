// models/any_model.hpp: the run-time model interface (what the `maxtext` program and the Python module use) gives
// the same numbers as the compile-time models::Transformer it wraps: logits with and without a cache, captures,
// generation, sessions, one layer on its own; and it refuses what it must (a cache of another model, a model
// without parameters, a block the program did not compile).
//
// Model: the 2-layer llama2 fixture config (tests/fixtures/llama2_model) with seeded weights. Only this one model
// type is instantiated here (make_any_model_of), so the test stays a small translation unit.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_blocks.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

using Llama = models::Transformer<models::any_model_policies::F32, layers::LlamaDecoderLayer>;

}  // namespace

// Only the llama2 float32 model is marked compiled in this unit: make_built_any_model must refuse the rest by name.
MAXTEXT_ANY_MODEL_BUILT(::maxtext::models::any_model_policies::F32, ::maxtext::layers::LlamaDecoderLayer)

namespace {

Config fixture() {
  Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/llama2_model"));
  c.dtype = "float32";
  c.derive();
  return c;
}

Tensor<std::int32_t, 2> tokens(std::int64_t B, std::int64_t T, std::int64_t vocab) {
  Tensor<std::int32_t, 2> t({B, T});
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < T; ++i) t(b, i) = static_cast<std::int32_t>((7 * b + 3 * i + 1) % vocab);
  }
  return t;
}

void require_equal(const Tensor<float, 3>& a, const Tensor<float, 3>& b) {
  REQUIRE(a.dim(0) == b.dim(0));
  REQUIRE(a.dim(1) == b.dim(1));
  REQUIRE(a.dim(2) == b.dim(2));
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) differ += a.data()[i] != b.data()[i];
  CHECK(differ == 0);  // the same code on the same inputs: bit-identical
}

}  // namespace

TEST_CASE("AnyModel gives the Transformer's logits, captures, layers and generation", "[any_model]") {
  const Config cfg = fixture();
  Llama direct(cfg);
  direct.init(11);
  const auto any = models::make_built_any_model(cfg, {}, "llama2 f32");
  REQUIRE_THROWS_WITH(any->forward({}), Catch::Contains("no parameters"));
  any->init(11);
  REQUIRE(any->loaded());
  CHECK(any->num_params() == direct.num_params());
  CHECK(any->type_name().find("llama2") != std::string::npos);
  CHECK(any->layer_names().size() == static_cast<std::size_t>(cfg.num_decoder_layers));

  const auto tok = tokens(2, 6, cfg.vocab_size);
  models::ForwardRequest r;
  r.tokens = &tok;
  layers::Capture cap({any->layer_names()[0]});
  r.capture = &cap;
  const Tensor<float, 3> full = any->forward(r);
  require_equal(full, direct.forward(tok));
  REQUIRE(cap.has(any->layer_names()[0]));

  SECTION("a cache: prefill then one token at a time") {
    const auto cache = any->new_cache(2, 6);
    auto head = tokens(2, 6, cfg.vocab_size);
    Tensor<std::int32_t, 2> first({2, 4}), step({2, 1});
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t i = 0; i < 4; ++i) first(b, i) = head(b, i);
    }
    models::ForwardRequest p;
    p.tokens = &first;
    p.cache = cache.get();
    (void)any->forward(p);
    auto direct_cache = direct.make_cache(2, 6);
    (void)direct.forward(first, direct_cache);
    for (std::int64_t i = 4; i < 6; ++i) {
      for (std::int64_t b = 0; b < 2; ++b) step(b, 0) = head(b, i);
      p.tokens = &step;
      require_equal(any->forward(p), direct.forward(step, direct_cache));
    }
    CHECK(cache->lengths() == std::vector<std::int32_t>{6, 6});
    const auto other = models::make_built_any_model(cfg, {}, "llama2 f32");
    other->init(11);
    p.cache = cache.get();
    REQUIRE_THROWS_WITH(other->forward(p), Catch::Contains("made by another model"));
  }

  SECTION("generation and sessions") {
    models::GenerateOptions go;
    go.max_new_tokens = 5;
    const std::vector<std::vector<std::int32_t>> prompts{{1, 2, 3}};
    const auto a = any->generate(prompts, go);
    const auto d = models::generate(direct, prompts, go);
    CHECK(a.tokens == d.tokens);
    const auto s = any->new_session(32);
    CHECK(s->sync({1, 2, 3}) == 0);
    const auto g = s->generate({}, go);
    CHECK(g.tokens == d.tokens);
    CHECK(s->length() == 8);
    CHECK(s->sync({1, 2, 3, 9}) == 3);  // rewinds to the common prefix
  }

  SECTION("speculative generation: drafts from another AnyModel and from prompt lookup give plain greedy's tokens") {
    models::GenerateOptions go;
    go.max_new_tokens = 24;
    const std::vector<std::int32_t> prompt{1, 2, 3, 1, 2};
    const auto d = models::generate(direct, {prompt}, go);
    const auto draft = models::make_built_any_model(cfg, {}, "llama2 f32");
    draft->init(12);  // another random model: most drafts rejected
    models::AnyModelDrafter drafter(*draft, 64);
    models::SpeculativeStats st;
    const auto a = any->generate_speculative(prompt, go, drafter.as_function(), {3}, &st);
    CHECK(a.tokens == d.tokens);
    CHECK(st.total_drafted() > 0);
    CHECK(st.total_accepted() < st.total_drafted());
    const auto same = models::make_built_any_model(cfg, {}, "llama2 f32");
    same->init(11);  // the same weights in another AnyModel: every draft accepted
    models::AnyModelDrafter twin(*same, 64);
    const auto b = any->generate_speculative(prompt, go, twin.as_function(), {3}, &st);
    CHECK(b.tokens == d.tokens);
    CHECK(st.total_accepted() == st.total_drafted());
    models::PromptLookupDrafter lookup;
    const auto c = any->generate_speculative(
        prompt, go, [&](const std::vector<std::int32_t>& ctx, std::int64_t k) { return lookup.propose(ctx, k); }, {4});
    CHECK(c.tokens == d.tokens);
    // A drafter that runs the model it drafts for is refused, not left waiting for itself.
    models::AnyModelDrafter self(*any, 64);
    REQUIRE_THROWS_WITH(any->generate_speculative(prompt, go, self.as_function(), {3}),
                        Catch::Contains("the drafter runs the model it drafts for"));
    const auto after = any->generate_speculative(prompt, go, twin.as_function(), {3});  // the model still works
    CHECK(after.tokens == d.tokens);
    // The cache's rollback through the interface.
    const auto cache = any->new_cache(1, 8);
    CHECK_FALSE(cache->recurrent());
    cache->set_length(0, 5);
    CHECK(cache->lengths() == std::vector<std::int32_t>{5});
    REQUIRE_THROWS_WITH(cache->set_length(1, 2), Catch::Contains("row 1 outside [0, 1)"));
    REQUIRE_THROWS_WITH(cache->set_length(0, 9), Catch::Contains("length 9 outside [0, 8]"));
  }

  SECTION("AnyModel as a Transformer for the templates (detail::AnyDraftModel): positions, segments, row lengths and "
          "captures pass") {
    models::detail::AnyDraftModel adapted(*any);
    auto cache = adapted.make_cache(2, 8);
    auto direct_cache = direct.make_cache(2, 8);
    Tensor<std::int32_t, 2> pos({2, 6}), seg({2, 6});
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t t = 0; t < 6; ++t) {
        pos(b, t) = static_cast<std::int32_t>(3 * t + b);  // not the default 0..T-1: a dropped field would show
        seg(b, t) = 1;
      }
    }
    models::ForwardOptions fo;
    fo.positions = &pos;
    fo.segment_ids = &seg;
    layers::Capture c2({any->layer_names()[1]});
    fo.capture = &c2;
    const Tensor<float, 3> via = adapted.forward(tok, cache, fo);
    models::ForwardOptions dfo;
    dfo.positions = &pos;
    dfo.segment_ids = &seg;
    require_equal(via, direct.forward(tok, direct_cache, dfo));
    CHECK(c2.has(any->layer_names()[1]));
    CHECK(cache.length(0) == 6);
    // Row lengths pass too (the scheduler's prefill of several prompts in one pass): a dropped field would advance
    // the second row by 6.
    models::ForwardOptions lens;
    const std::vector<std::int32_t> rows{6, 4};
    lens.row_lengths = &rows;
    lens.last_only = true;
    auto cache2 = adapted.make_cache(2, 8);
    auto direct_cache2 = direct.make_cache(2, 8);
    require_equal(adapted.forward(tok, cache2, lens), direct.forward(tok, direct_cache2, lens));
    CHECK(cache2.length(1) == 4);
    models::ForwardOptions hid;
    Tensor<float, 2> h;
    hid.hidden_out = &h;
    REQUIRE_THROWS_WITH(adapted.forward(tok, cache, hid), Catch::Contains("takes no hidden_out"));
  }

  SECTION("one layer on its own") {
    models::LayerRequest lr;
    Tensor<float, 3> x({1, 5, cfg.emb_dim});
    for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = 0.01f * static_cast<float>(i % 37) - 0.15f;
    lr.x = AnyTensor::from(x, "x");
    lr.index = 1;
    const Tensor<float, 3> own = any->run_layer(lr);
    // The same layer from exported parameters under its own prefix gives the same output.
    const io::TensorMap params = any->export_params();
    lr.index = -1;
    lr.weights = &params;
    lr.prefix = any->layer_names()[1];
    require_equal(any->run_layer(lr), own);
    lr.index = 7;
    lr.weights = nullptr;
    REQUIRE_THROWS_WITH(any->run_layer(lr), Catch::Contains("outside [0, 2)"));
  }
}

TEST_CASE("make_built_any_model refuses a block or weight type the program did not compile", "[any_model]") {
  Config cfg = fixture();
  models::AnyModelOptions o;
  o.weight_type = "bfloat16";
  REQUIRE_THROWS_WITH(models::make_built_any_model(cfg, o, "llama2 f32"),
                      Catch::Contains("'llama2' with weight type 'bfloat16' is not compiled into this program") &&
                          Catch::Contains("it has: llama2 f32"));
  cfg.decoder_block = "gemma";
  cfg.derive();
  REQUIRE_THROWS_WITH(models::make_built_any_model(cfg, {}, "llama2 f32"),
                      Catch::Contains("decoder_block 'gemma'") && Catch::Contains("not compiled"));
}

TEST_CASE("kv_type: the activations' type is the default, float16 only over GGUF matrices, the rest refused by name",
          "[any_model]") {
  const Config cfg = fixture();
  models::AnyModelOptions o;
  o.kv_type = "float32";  // the config's dtype: the default cache
  CHECK(models::make_built_any_model(cfg, o, "llama2 f32") != nullptr);
  o.kv_type = "bfloat16";
  REQUIRE_THROWS_WITH(models::make_built_any_model(cfg, o, "llama2 f32"),
                      Catch::Contains("kv_type 'bfloat16': expected float16, or the activations' type (float32"));
  o.kv_type = "float16";  // over float32 weights
  REQUIRE_THROWS_WITH(models::make_built_any_model(cfg, o, "llama2 f32"),
                      Catch::Contains("kv_type float16 is compiled for float32 activations over a GGUF file's "
                                      "matrices (weight type ggml); found dtype float32 with weight type 'float32'"));
  o.weight_type = "ggml";  // a policy this unit did not mark compiled
  REQUIRE_THROWS_WITH(models::make_built_any_model(cfg, o, "llama2 f32"),
                      Catch::Contains("with weight type 'ggml' and kv_type 'float16' is not compiled into this program"));
}

TEST_CASE("any_model_is_built and keep_file_weight_type follow what the program compiled", "[any_model]") {
  // This unit marks only llama2 with float32 weights (above); the CLI tests cover a program that has the others
  // (test_real_models: an F16 and a Q8_0 GGUF kept as they are).
  Config cfg = fixture();
  CHECK(models::any_model_is_built(cfg, "float32"));
  CHECK(models::any_model_is_built(cfg, ""));  // the config's dtype
  CHECK_FALSE(models::any_model_is_built(cfg, "q8_0"));
  CHECK_FALSE(models::any_model_is_built(cfg, "int4"));  // no such policy: not built, not an exception
  CHECK(models::keep_file_weight_type(cfg, "q8_0").empty());  // not compiled here: the caller widens
  CHECK(models::keep_file_weight_type(cfg, "").empty());
  cfg.decoder_block = "no_such_block";
  CHECK_FALSE(models::any_model_is_built(cfg, "float32"));
}
