// Config: base.yml defaults, derivation with global_parameter_scale, YAML + overrides, validation messages.
#include <fstream>

#include <catch2/catch.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

TEST_CASE("Derived dims follow MaxText's global_parameter_scale rule", "[core][config]") {
  Config c;
  c.base_emb_dim = 100;
  c.base_num_query_heads = 4;
  c.base_num_kv_heads = 2;
  c.base_mlp_dim = 10;
  c.base_num_decoder_layers = 3;
  c.global_parameter_scale = 16;  // 2^4: b=1, r=1 -> heads/mlp x4, emb x2, layers x2
  c.derive();
  CHECK(c.emb_dim == 200);
  CHECK(c.num_query_heads == 16);
  CHECK(c.num_kv_heads == 8);
  CHECK(c.mlp_dim == 40);
  CHECK(c.num_decoder_layers == 6);
  c.global_parameter_scale = 3;
  CHECK_THROWS_AS(c.derive(), ConfigError);
}

TEST_CASE("YAML files, model_name files and overrides apply in MaxText's order", "[core][config]") {
  {
    std::ofstream f("cfg_test.yml");
    f << "model_name: gpt3-52k\nvocab_size: 7\nlearning_rate: 3.e-4\nrope_max_timescale: 10_000\n";
  }
  const Config c = io::load_config("cfg_test.yml", {"dtype=float32", "base_num_decoder_layers=2"});
  CHECK(c.decoder_block == "gpt3");        // from models/gpt3-52k.yml
  CHECK(c.vocab_size == 1024);             // the model file overrides the main file, as in MaxText
  CHECK(c.num_decoder_layers == 2);        // overrides win
  CHECK(c.dtype_canonical() == "float32");
  CHECK(c.rope_max_timescale == 10000.0);  // underscores in numbers
  CHECK(c.mlp_activations == StringList{"gelu"});
  CHECK(c.extra.at("learning_rate") == "3.e-4");  // training keys are kept, not modelled
  std::remove("cfg_test.yml");
}

TEST_CASE("Inconsistent and unsupported configs are refused naming the keys", "[core][config]") {
  auto load = [](std::vector<std::string> o) { return io::load_config("", o); };
  CHECK_THROWS_WITH(load({"base_num_query_heads=6", "base_num_kv_heads=4"}),
                    Catch::Contains("num_query_heads (6) must be a multiple of num_kv_heads (4)"));
  CHECK_THROWS_WITH(load({"decoder_block=gpt3", "base_num_kv_heads=4"}), Catch::Contains("gpt3 needs num_query_heads == num_kv_heads"));
  CHECK_THROWS_WITH(load({"attention_type=local_sliding"}), Catch::Contains("sliding_window_size > 0"));
  CHECK_THROWS_WITH(load({"mhc_expansion_rate=4"}), Catch::Contains("manifold hyper-connections"));
  CHECK_THROWS_WITH(load({"engram_layers=[1,2]"}), Catch::Contains("Engram"));
  CHECK_THROWS_WITH(load({"decoder_block=gemma2", "mtp_num_layers=1"}),
                    Catch::Contains("mtp_num_layers = 1") && Catch::Contains("'gemma2'"));
  CHECK_NOTHROW(load({"decoder_block=llama2", "mtp_num_layers=1"}));
  CHECK_THROWS_WITH(load({"decoder_block=gemma7"}), Catch::Contains("decoder_block 'gemma7' is not supported"));
  CHECK_THROWS_WITH(load({"vocab_size=abc"}), Catch::Contains("vocab_size: expected an integer"));
  CHECK_THROWS_WITH(load({"dtype=int8"}), Catch::Contains("dtype"));
  CHECK_THROWS_AS(load({"emb_dim=4"}), ConfigError);
  CHECK_THROWS_AS(load({"novalue"}), ConfigError);
  CHECK_NOTHROW(load({"mhc_expansion_rate=1", "engram_layers=[]"}));
}

TEST_CASE("Sizes above Config::Limits are refused naming the key, before any model is built", "[core][config]") {
  auto load = [](std::vector<std::string> o) { return io::load_config("", o); };
  // Each bound, one past it (and the largest real configs stay accepted: configs/models, deepseek3-671b.yml).
  CHECK_THROWS_WITH(load({"base_emb_dim=262145"}), Catch::Contains("emb_dim") && Catch::Contains("above the limit 262144"));
  CHECK_THROWS_WITH(load({"base_mlp_dim=262145"}), Catch::Contains("mlp_dim") && Catch::Contains("limit"));
  CHECK_THROWS_WITH(load({"head_dim=16385"}), Catch::Contains("head_dim = 16385"));
  CHECK_THROWS_WITH(load({"base_num_query_heads=32768", "base_num_kv_heads=32768", "head_dim=4"}),
                    Catch::Contains("num_query_heads") && Catch::Contains("limit 16384"));
  CHECK_THROWS_WITH(load({"vocab_size=16777217"}), Catch::Contains("vocab_size = 16777217"));
  CHECK_THROWS_WITH(load({"base_num_decoder_layers=1000000"}), Catch::Contains("num_decoder_layers") && Catch::Contains("limit 4096"));
  CHECK_THROWS_WITH(load({"num_experts=100000", "num_experts_per_tok=2"}), Catch::Contains("num_experts = 100000"));
  CHECK_THROWS_WITH(load({"max_target_length=1099511627776"}), Catch::Contains("max_target_length = 1099511627776"));
  CHECK_THROWS_WITH(load({"max_target_length=4194304", "head_dim=512"}),
                    Catch::Contains("max_target_length * head_dim = 2147483648"));
  CHECK_THROWS_WITH(load({"kv_lora_rank=300000"}), Catch::Contains("kv_lora_rank"));
  CHECK_THROWS_WITH(load({"sliding_window_size=4194305"}), Catch::Contains("sliding_window_size"));
  // global_parameter_scale multiplies sizes by shifting: a huge scale or a base value that would overflow is refused
  // instead of shifting out of range (undefined behaviour).
  CHECK_THROWS_WITH(load({"global_parameter_scale=1099511627776"}), Catch::Contains("at most 2^30"));
  CHECK_THROWS_WITH(load({"base_emb_dim=4611686018427387904", "global_parameter_scale=4"}),
                    Catch::Contains("base_emb_dim = 4611686018427387904 overflows"));
  CHECK_NOTHROW(load({"base_emb_dim=262144", "base_mlp_dim=262144", "vocab_size=16777216", "max_target_length=131072"}));
  CHECK_NOTHROW(io::load_config(::maxtext::test::config_dir() + "/models/deepseek3-671b.yml", {}));
  CHECK_NOTHROW(io::load_config(::maxtext::test::config_dir() + "/models/llama2-70b.yml", {}));
}

TEST_CASE("Integer keys outside the 64-bit range are refused, not converted", "[core][config]") {
  // Found by the yaml_config fuzzer: "base_emb_dim: 20E48" converted a double beyond 2^63 to int64 (undefined).
  auto load = [](std::vector<std::string> o) { return io::load_config("", o); };
  CHECK_THROWS_WITH(load({"base_emb_dim=20E48"}), Catch::Contains("base_emb_dim: 20E48 is outside the 64-bit integer range"));
  CHECK_THROWS_WITH(load({"vocab_size=99999999999999999999"}), Catch::Contains("outside the 64-bit integer range"));
  CHECK_THROWS_WITH(load({"vocab_size=-9.3e18"}), Catch::Contains("outside the 64-bit integer range"));
  CHECK(load({"vocab_size=3.2e4"}).vocab_size == 32000);
}
