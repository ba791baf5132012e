// tests/support/fixture_models.hpp: seeded models of the decoder blocks' fixture configs (through the CLI's prebuilt
// blocks: link maxtext_blocks), prompts made of ids, greedy options that keep log-probabilities, and the bit-for-bit
// comparison of two generations. For the tests that run every block's cache (session files, batching).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/families/load.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_blocks.hpp"
#include "maxtext_blocks_built.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"

namespace maxtext::test {

/// The fixtures whose caches differ in kind: keys and values (llama2), MLA's latent cache and Engram's host history
/// (deepseek), Gated DeltaNet's recurrent states (qwen3_next), compressed blocks (deepseek4).
inline const std::vector<std::string>& cache_kind_fixtures() {
  static const std::vector<std::string> v{"llama2_model", "deepseek_model", "deepseek_engram_model", "qwen3_next_model",
                                          "deepseek4_model"};
  return v;
}
/// Every other decoder block's fixture.
inline const std::vector<std::string>& other_block_fixtures() {
  static const std::vector<std::string> v{
      "default_model", "gpt3_model",      "mistral_model",      "mixtral_model",          "qwen2_model",
      "qwen3_model",   "qwen3_moe_model", "qwen3_5_model",      "qwen3_custom_moe_model", "gemma_model",
      "gemma2_model",  "gemma3_model",    "gemma4_model",       "gemma4_moe_model",       "gemma4_small_e2b_model",
      "llama4_model",  "gpt_oss_model",   "olmo3_model",        "envy_model",             "deepseek_mhc_model",
      "llama2lti_model", "simple_model"};
  return v;
}

/// A fixture's config (config.yml, a Hugging Face config.json under hf/, or meta.json's "config"), float32 unless
/// `dtype` says otherwise, with room for 64 tokens at least.
inline Config fixture_model_config(const std::string& name, const std::string& dtype = "float32") {
  const std::string dir = fixtures_dir() + "/" + name;
  Config c = std::filesystem::exists(dir + "/config.yml")      ? io::load_config(dir + "/config.yml")
             : std::filesystem::exists(dir + "/hf/config.json") ? io::read_weights_config(dir + "/hf").value()
                                                                : config_from_meta(read_meta(dir));
  c.dtype = dtype;
  c.max_target_length = std::max<std::int64_t>(c.max_target_length, 64);
  c.derive();
  return c;
}

/// The model of config `c` (a fixture's) with weights drawn from `seed`, and fixture `name`'s Engram table where it
/// has Engram layers.
inline std::unique_ptr<models::AnyModel> seeded_fixture_model(const std::string& name, const Config& c, std::uint64_t seed) {
  auto m = models::make_built_any_model(c, {}, MAXTEXT_BLOCKS_BUILT);
  m->init(seed);
  if (m->needs_engram_vocab()) {
    const std::string dir = fixtures_dir() + "/" + name + "/";
    const auto meta = read_meta(dir);
    const AnyTensor l = npy(dir + "engram_lookup.npy");
    const Tensor<std::int32_t, 1> lt = l.to<std::int32_t, 1>({l.shape[0]});
    m->set_engram_vocab(std::vector<std::int32_t>(lt.data(), lt.data() + lt.size()),
                        meta.at("compressed_vocab").get<std::int64_t>(), meta.at("pad_token").get<std::int32_t>());
  }
  return m;
}

/// The fixture's model with weights drawn from `seed` (and its Engram table, where it has Engram layers).
inline std::unique_ptr<models::AnyModel> make_fixture_model(const std::string& name, std::uint64_t seed,
                                                            const std::string& dtype = "float32") {
  return seeded_fixture_model(name, fixture_model_config(name, dtype), seed);
}

/// The same with room for `ctx` tokens at least and the config keys `set` (key, value) on top.
inline std::unique_ptr<models::AnyModel> make_fixture_model(const std::string& name, std::uint64_t seed, std::int64_t ctx,
                                                            const std::vector<std::pair<std::string, std::string>>& set) {
  Config c = fixture_model_config(name);
  c.max_target_length = std::max(c.max_target_length, ctx);
  for (const auto& [k, v] : set) c.set(k, v);
  c.derive();
  return seeded_fixture_model(name, c, seed);
}

/// `n` ids below `vocab`, varied by `salt`.
inline std::vector<std::int32_t> salted_ids(std::int64_t n, std::int64_t vocab, std::int32_t salt) {
  std::vector<std::int32_t> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(static_cast<std::int32_t>((salt + 7 * i + i * i) % vocab));
  return v;
}

/// Greedy decoding of `n` tokens that keeps each token's log-probability and its top 3 alternatives.
inline models::GenerateOptions greedy_with_logprobs(std::int64_t n) {
  models::GenerateOptions g;
  g.max_new_tokens = n;
  g.logprobs = true;
  g.top_logprobs = 3;
  return g;
}

/// Bit-identical tokens and log-probabilities (with their top alternatives) of row 0.
inline void require_same_generation(const models::GenerateResult& a, const models::GenerateResult& b) {
  REQUIRE(a.tokens.at(0) == b.tokens.at(0));
  REQUIRE(a.logprobs.at(0).size() == b.logprobs.at(0).size());
  for (std::size_t i = 0; i < a.logprobs[0].size(); ++i) {
    CHECK(a.logprobs[0][i].logprob == b.logprobs[0][i].logprob);
    CHECK(a.logprobs[0][i].top == b.logprobs[0][i].top);
  }
}

}  // namespace maxtext::test
