// Config: base.yml defaults, derivation with global_parameter_scale, YAML + overrides, validation messages.
#include <fstream>

#include <catch2/catch.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/io/yaml_config.hpp"

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
  CHECK_THROWS_WITH(load({"mtp_num_layers=1"}), Catch::Contains("multi-token prediction"));
  CHECK_THROWS_WITH(load({"decoder_block=gemma7"}), Catch::Contains("decoder_block 'gemma7' is not supported"));
  CHECK_THROWS_WITH(load({"vocab_size=abc"}), Catch::Contains("vocab_size: expected an integer"));
  CHECK_THROWS_WITH(load({"dtype=int8"}), Catch::Contains("dtype"));
  CHECK_THROWS_AS(load({"emb_dim=4"}), ConfigError);
  CHECK_THROWS_AS(load({"novalue"}), ConfigError);
  CHECK_NOTHROW(load({"mhc_expansion_rate=1", "engram_layers=[]"}));
}
