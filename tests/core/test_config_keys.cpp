// core/config_keys.hpp: a key is read, refused by name, or on the list of keys an inference forward pass ignores;
// io::load_config checks every file and override.
// MaxText's model files load without a refusal; misspelled keys name the nearest known key; features that are not
// implemented are refused when turned on, with the one boolean parser (TRUE too); known keys read only at some
// values refuse the others.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/core/config_keys.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

Config with(const std::vector<std::string>& overrides) {
  std::vector<std::string> o = {"model_name=llama2-7b"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return io::load_config("", o);
}

void accepted(const std::vector<std::string>& overrides) {
  INFO(overrides.back());
  CHECK_NOTHROW(check_config_keys(with(overrides)));
}

/// load_config (which runs validate() and check_config_keys) then check_config_keys again, as the `maxtext` program
/// does: one of them refuses with E and the message.
template <class E>
void refused(const std::vector<std::string>& overrides, const std::string& message) {
  INFO(overrides.back());
  CHECK_THROWS_AS(check_config_keys(with(overrides)), E);
  CHECK_THROWS_WITH(check_config_keys(with(overrides)), Catch::Contains(message));
}

}  // namespace

TEST_CASE("every model file of configs/models loads and passes the key check", "[config][keys]") {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::config_dir() + "/models")) {
    if (e.path().extension() != ".yml") continue;
    const std::string name = e.path().stem().string();
    INFO(name);
    CHECK_NOTHROW(check_config_keys(io::load_config("", {"model_name=" + name})));
    ++n;
  }
  CHECK(n >= 40);
  CHECK_NOTHROW(check_config_keys(Config()));  // base.yml's defaults
}

TEST_CASE("an unknown key is refused with the nearest known key and where it was set", "[config][keys]") {
  refused<ConfigError>({"rope_typ=yarn"}, "unknown key 'rope_typ' (set in override); did you mean rope_type?");
  refused<ConfigError>({"normalisation_layer_epsilon=1e-6"}, "did you mean normalization_layer_epsilon?");
  refused<ConfigError>({"learning_rat=1e-3"}, "did you mean learning_rate?");  // an inert key is a candidate too
  refused<ConfigError>({"completely_made_up_setting=3"}, "unknown key 'completely_made_up_setting'");
  // From a YAML file: the message names the file.
  const std::string path = "unknown_key.yml";
  std::ofstream(path) << "base_emb_dim: 64\nbase_num_query_head: 4\n";
  CHECK_THROWS_AS(io::load_config(path), ConfigError);  // load_config runs the check
  CHECK_THROWS_WITH(io::load_config(path), Catch::Contains("unknown key 'base_num_query_head' (set in " + path + ")") &&
                                              Catch::Contains("did you mean base_num_query_heads?"));
}

TEST_CASE("keys that only matter for training or device layout are accepted", "[config][keys]") {
  for (const std::string kv : {"learning_rate=1e-3", "ici_fsdp_parallelism=4", "remat_policy=full",
                               "per_device_batch_size=8", "decode_sampling_temperature=0.7", "dropout_rate=0.1",
                               "enable_dropout=true", "megablox=false", "scan_layers=false", "run_name=x",
                               "image_size_for_vit=448", "kv_quant_dtype=int4", "pagedattn_tokens_per_page=16"}) {
    accepted({kv});
  }
}

TEST_CASE("features that are not implemented are refused when on, read with the one boolean parser", "[config][keys]") {
  for (const std::string v : {"true", "True", "TRUE", "1"}) {
    refused<UnsupportedError>({"use_multimodal=" + v}, "use_multimodal = " + v);
    refused<UnsupportedError>({"use_chunked_prefill=" + v}, "enables chunked prefill");
    refused<UnsupportedError>({"use_audio=" + v}, "enables the audio tower");
  }
  for (const std::string v : {"false", "False", "FALSE", "0"}) {
    accepted({"use_multimodal=" + v});
    accepted({"use_chunked_prefill=" + v});
  }
  refused<ConfigError>({"use_multimodal=yes"}, "use_multimodal: expected true or false, found 'yes'");
  refused<UnsupportedError>({"ragged_buffer_factor=1.0"}, "ragged_buffer_factor = 1.0");
  accepted({"ragged_buffer_factor=-1"});
  refused<UnsupportedError>({"hf_lora_adapter_path=some/adapter"}, "enables a Hugging Face LoRA adapter");
  refused<UnsupportedError>({"weight_sparsity_n=2"}, "N:M weight sparsity");
  accepted({"weight_sparsity_n=None"});
}

TEST_CASE("known keys read at some values refuse the others", "[config][keys]") {
  refused<ConfigError>({"attention=flsh"}, "attention: unknown kernel 'flsh' (set in override); did you mean flash?");
  refused<ConfigError>({"attention=pagd"}, "did you mean paged?");
  for (const std::string a : {"autoselected", "dot_product", "flash", "cudnn_flash_te", "paged"}) accepted({"attention=" + a});
  // The page manager's keys (models/paged_memory.hpp reads them; the TPU kernel's tiling is inert).
  accepted({"attention=paged", "pagedattn_num_pages=128", "pagedattn_tokens_per_page=64",
            "pagedattn_pages_per_compute_block=8", "pagedattn_head_dim_alignment=0"});
  refused<ConfigError>({"pagedattn_tokens_per_pag=64"}, "did you mean pagedattn_tokens_per_page?");
  refused<ConfigError>({"matmul_precision=fastest"}, "matmul_precision: expected one of");
  accepted({"matmul_precision=highest"});
  // float32_weight_sum / cast_logits_to_fp32 = false change bfloat16 numerics only: refused there, inert in float32.
  refused<UnsupportedError>({"dtype=bfloat16", "float32_weight_sum=false"}, "float32_weight_sum = false");
  refused<UnsupportedError>({"dtype=bfloat16", "cast_logits_to_fp32=false"}, "cast_logits_to_fp32 = false");
  accepted({"dtype=float32", "float32_weight_sum=false"});
  accepted({"dtype=float32", "cast_logits_to_fp32=false"});
}

TEST_CASE("the key lists are disjoint and hold no Config field", "[config][keys]") {
  std::vector<std::string> fields;
#define MAXTEXT_TEST_FIELD(type, key, dflt) fields.emplace_back(#key);
  MAXTEXT_CONFIG_FIELDS(MAXTEXT_TEST_FIELD)
#undef MAXTEXT_TEST_FIELD
  const std::vector<std::string> all = config_keys::known_keys();
  std::vector<std::string> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  INFO((dup == sorted.end() ? std::string() : *dup));
  CHECK(dup == sorted.end());
  CHECK(all.size() > 600);  // MaxText's base.yml has 684 keys; the library adds its own
}

TEST_CASE("a bad weight_dtype is reported as weight_dtype and booleans read TRUE as true", "[config][keys]") {
  CHECK_THROWS_WITH(with({"weight_dtype=float8"}), Catch::Contains("[config] weight_dtype: expected float32") &&
                                                       Catch::Contains("found 'float8'"));
  CHECK_THROWS_WITH(with({"dtype=float8"}), Catch::Contains("[config] dtype: expected float32"));
  CHECK(::maxtext::detail::truthy("TRUE"));
  CHECK(::maxtext::detail::truthy("True"));
  CHECK_FALSE(::maxtext::detail::truthy("FALSE"));
  // validate() itself now refuses use_multimodal: TRUE (before the key check runs).
  CHECK_THROWS_WITH(with({"use_multimodal=TRUE"}), Catch::Contains("use_multimodal = TRUE enables image"));
}
