// Checking numerics against a reference dump: the name map, shape alignment, MaxText's logit measures (against a
// PyTorch computation of its checker's formulas), capture names in both schemes, the per-layer runner, and the
// `maxtext compare` CLI: the GPT-3 fixture dump passes, a perturbed weight is pinned to the right layer, per-layer
// runs on the shared reference cases (../shared/reference), and the DeepSeek case once that model is registered.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/gpt3/gpt3.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/io/npz.hpp"
#include "maxtext/io/tensor_files.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/transformer.hpp"
#include "maxtext/testing/reference_check.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;
namespace fs = std::filesystem;
using P32 = Policy<cpu::Backend, float>;
using Gpt3 = models::Transformer<P32, layers::Gpt3DecoderLayer>;

namespace {

const std::string kModel = test::fixtures_dir() + "/gpt3_model/";
const std::string kCmp = test::fixtures_dir() + "/compare/";

/// A temporary path unique to this process (CTest runs test cases of one program in parallel).
std::string tmp(const std::string& name) {
  return (fs::current_path() / ("maxtext_cmp_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

struct CliResult {
  int status = -1;
  std::string output;
};
/// Run the maxtext CLI with `args`; stdout and stderr together.
CliResult run_cli(const std::string& args) {
  const std::string out = tmp("cli_out.txt");
  const std::string cmd = ::maxtext::test::cli_path() + " " + args + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream f(out);
  r.output.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  std::remove(out.c_str());
  return r;
}
nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}
std::string model_args() {
  return "--config " + kModel + "config.yml --weights " + kModel + "model.safetensors --tokens " + kModel + "tokens.npy";
}

/// The fixture weights with one element changed.
std::string perturbed_weights(const std::string& tensor, std::int64_t flat, float delta) {
  const io::TensorMap w = io::read_safetensors(kModel + "model.safetensors");
  std::map<std::string, AnyTensor> out(w.tensors.begin(), w.tensors.end());
  const AnyTensor& t = w.at(tensor);
  Tensor<float, 1> copy = t.to<float, 1>({t.numel()});
  copy.data()[flat] += delta;
  out[tensor] = AnyTensor::from(copy).reshaped(t.shape);
  const std::string path = tmp("perturbed.safetensors");
  io::write_safetensors(path, out);
  return path;
}

}  // namespace

TEST_CASE("Name maps: exact rules, ignores, patterns, errors", "[testing][compare]") {
  const auto m = testing::NameMap::parse(R"(
# a comment
hidden.0   token_embedder     # trailing comment
layer0_out decoder.layers_0
x          -
*_f32      -
layer*     decoder.other
)");
  CHECK(m.ours("hidden.0") == "token_embedder");
  CHECK(m.ours("layer0_out") == "decoder.layers_0");  // exact beats the pattern
  CHECK(m.ours("layer7") == "decoder.other");
  CHECK(m.ours("x").empty());
  CHECK(m.ours("out_f32").empty());
  CHECK(m.ours("logits") == "logits");  // unmapped names keep their own
  CHECK_THROWS_WITH(testing::NameMap::parse("only_one\n", "m.txt"), Catch::Contains("m.txt:1: expected 'their_name our_name'"));
  CHECK_THROWS_WITH(testing::NameMap::parse("a b\na c\n", "m.txt"), Catch::Contains("m.txt:2: 'a' is mapped twice"));
  CHECK_THROWS_WITH(testing::NameMap::parse("a b c\n", "m.txt"), Catch::Contains("found a third: 'c'"));
  CHECK_THROWS_WITH(testing::NameMap::parse("a* *b\n", "m.txt"), Catch::Contains("our name cannot be a pattern"));
}

TEST_CASE("Shape alignment: missing or extra batch dim, padded vocab, mismatches", "[testing][compare]") {
  const AnyTensor ours = AnyTensor::from(Tensor<float, 3>::full({1, 4, 6}, 1.0f));
  const AnyTensor no_batch = AnyTensor::from(Tensor<float, 2>::full({4, 6}, 1.0f));
  auto a = testing::align(ours, no_batch);
  CHECK(a.ok);
  CHECK(a.note == "reference has no batch dim");
  CHECK(a.ours.shape == std::vector<std::int64_t>{4, 6});
  const AnyTensor extra = AnyTensor::from(Tensor<float, 4>::full({1, 1, 4, 6}, 1.0f));
  a = testing::align(ours, extra);
  CHECK(a.ok);
  CHECK(a.note == "reference has an extra leading dim of 1");
  const AnyTensor padded = AnyTensor::from(Tensor<float, 3>::full({1, 4, 8}, 1.0f));
  a = testing::align(ours, padded, /*is_logits=*/true);
  CHECK(a.ok);
  CHECK(a.note == "vocab 6 (ours) vs 8: compared the first 6");
  CHECK_FALSE(testing::align(ours, padded, false).ok);
  a = testing::align(ours, AnyTensor::from(Tensor<float, 2>::full({6, 4}, 1.0f)));
  CHECK_FALSE(a.ok);
  CHECK(a.note == "shape mismatch: ours [1,4,6], reference [6,4]");
}

TEST_CASE("Logit KL divergence and top-k agreement match MaxText's checker (PyTorch float64)", "[testing][compare][logits]") {
  const io::TensorMap f = io::read_npz(kCmp + "logit_metrics.npz");
  const int k = static_cast<int>(f.at("k").element(0));
  const auto s = testing::logit_stats(f.at("ours"), f.at("reference"), k);
  REQUIRE(s.kl.size() == 6);
  REQUIRE(s.position_shape == std::vector<std::int64_t>{2, 3});
  for (std::size_t p = 0; p < 6; ++p) {
    const double want = f.at("kl").element(static_cast<std::int64_t>(p));
    INFO("position " << p << ": ours " << s.kl[p] << ", torch " << want);
    // Both in float64 from the same float32 logits; the sums differ only in rounding order (~1e-16 of the terms).
    CHECK(std::fabs(s.kl[p] - std::max(want, 0.0)) <= 1e-13 + 1e-9 * want);
    CHECK(s.overlap[p] == static_cast<int>(f.at("overlap").element(static_cast<std::int64_t>(p))));
    CHECK(s.top1[p] == (f.at("top1").element(static_cast<std::int64_t>(p)) != 0));
  }
  CHECK(s.kl_argmax == 5);
  CHECK(s.unravel(s.kl_argmax) == std::vector<std::int64_t>{1, 2});
  CHECK(s.overlap_min == 3);
  CHECK(s.top1_agree == 5);
  // Identical logits: zero divergence, full agreement.
  const auto same = testing::logit_stats(f.at("reference"), f.at("reference"), k);
  CHECK(same.kl_max == 0.0);
  CHECK(same.overlap_mean == k);
}

TEST_CASE("Capture: nothing without a request, every name in forward order with request_all, both schemes", "[testing][capture]") {
  const Config cfg = io::load_config(kModel + "config.yml");
  Gpt3 m(cfg);
  m.load(io::load_weights(kModel + "model.safetensors", cfg).tensors);
  const auto tok = test::npy(kModel + "tokens.npy");
  const Tensor<std::int32_t, 2> tokens = tok.to<std::int32_t, 2>({tok.shape[0], tok.shape[1]});
  layers::Capture none;
  models::ForwardOptions fo;
  fo.capture = &none;
  (void)m.forward(tokens, fo);
  CHECK(none.results().empty());

  layers::Capture all;
  all.request_all();
  fo.capture = &all;
  (void)m.forward(tokens, fo);
  const std::vector<std::string> first = {"token_embedder", "decoder.layers_0.input", "decoder.layers_0.pre_self_attention_norm",
                                          "decoder.layers_0.self_attention.qkv_proj",
                                          "decoder.layers_0.self_attention.attention_op",
                                          "decoder.layers_0.self_attention.out", "decoder.layers_0.self_attention",
                                          "decoder.layers_0.mlp.mlp_layer_norm", "decoder.layers_0.mlp", "decoder.layers_0"};
  REQUIRE(all.order().size() == 2 + 2 * 9 + 1);
  CHECK(std::vector<std::string>(all.order().begin(), all.order().begin() + 10) == first);
  CHECK(all.order().back() == "logits");
  CHECK(all.order()[all.order().size() - 2] == "decoder.decoder_norm");
  CHECK(all.at("decoder.layers_0.self_attention.qkv_proj").shape == std::vector<std::int64_t>{2, 11, 3, 2, 8});
  // Every captured activation equals the float64 PyTorch dump within the f32 whole-model tolerance.
  const io::TensorMap ref = io::read_npz(kModel + "activations.npz");
  for (const auto& [name, t] : ref.tensors) test::expect_close(all.at(name), t, test::tol::f32_logits, name);

  m.set_name_scheme(models::NameScheme::hf);
  layers::Capture hf;
  hf.request_all();
  fo.capture = &hf;
  (void)m.forward(tokens, fo);
  for (const char* n : {"model.embed_tokens", "model.layers.0.input", "model.layers.0.self_attn", "model.layers.0.mlp",
                        "model.layers.1", "model.norm", "logits"}) {
    INFO(n);
    CHECK(hf.has(n));
  }
  test::expect_close(hf.at("model.layers.1"), ref.at("decoder.layers_1"), test::tol::f32_logits, "hf layers.1");
}

TEST_CASE("check_against_reference orders by the forward pass and marks the first failure", "[testing][compare]") {
  layers::Capture cap({"a", "b", "c"});
  cap.put("b", AnyTensor::from(Tensor<float, 1>::full({3}, 2.0f)));
  cap.put("a", AnyTensor::from(Tensor<float, 1>::full({3}, 1.0f)));
  cap.put("c", AnyTensor::from(Tensor<float, 1>::full({3}, 3.0f)));
  io::TensorMap ref;
  ref.add("a", AnyTensor::from(Tensor<float, 1>::full({3}, 1.5f)));   // fails, produced second
  ref.add("b_ref", AnyTensor::from(Tensor<float, 1>::full({3}, 2.0f)));  // mapped to b, produced first
  ref.add("c", AnyTensor::from(Tensor<float, 1>::full({3}, 3.5f)));   // fails, third
  ref.add("d", AnyTensor::from(Tensor<float, 1>::full({3}, 0.0f)));   // not produced
  ref.add("skip", AnyTensor::from(Tensor<float, 1>::full({3}, 0.0f)));
  testing::NameMap map;
  map.add("b_ref", "b");
  map.add("skip", "");
  const auto r = testing::check_against_reference(cap, ref, map);
  REQUIRE(r.rows.size() == 3);
  CHECK(r.rows[0].ours == "b");
  CHECK(r.rows[1].ours == "a");
  CHECK(r.rows[2].ours == "c");
  CHECK(r.first_failure == 1);
  CHECK(r.failures == 2);
  CHECK(r.not_produced == std::vector<std::string>{"d"});
  CHECK(r.ignored == std::vector<std::string>{"skip"});
  const std::string text = testing::format_report(r, {});
  INFO(text);
  CHECK(text.find("b_ref -> b") != std::string::npos);
  CHECK(text.find("FAIL (3/3 outside)   <-- first divergence") != std::string::npos);
  CHECK(text.find("compared 3 tensors: 1 passed, 2 failed; first divergence: a") != std::string::npos);
}

TEST_CASE("run_layer: a layer's weights from a whole-model safetensors (prefix), its input from an .npz", "[testing][layer_runner]") {
  const Config cfg = io::load_config(kModel + "config.yml");
  cpu::Backend be;
  layers::LayerInfo info{1, "decoder.layers_1", "decoder.layers_1.self_attention", "decoder.layers_1.mlp"};
  layers::Gpt3DecoderLayer<P32> layer(cfg, info);
  const auto params = models::load_layer_params<P32>(layer, io::read_safetensors(kModel + "model.safetensors"), be,
                                                     "decoder.layers_1");
  const io::TensorMap ref = io::read_npz(kModel + "activations.npz");
  layers::Capture cap({"decoder.layers_1.self_attention", "decoder.layers_1.mlp.mlp_layer_norm"});
  const auto y = models::run_layer<P32>(layer, params, be, ref.at("decoder.layers_1.input"), nullptr, nullptr, &cap);
  test::expect_close(y, ref.at("decoder.layers_1"), test::tol::f32_layer, "layer 1 out");
  test::expect_close(cap.at("decoder.layers_1.self_attention"), ref.at("decoder.layers_1.self_attention"),
                     test::tol::f32_layer, "layer 1 attention");
  test::expect_close(cap.at("decoder.layers_1.mlp.mlp_layer_norm"), ref.at("decoder.layers_1.mlp.mlp_layer_norm"),
                     test::tol::f32_layer, "layer 1 mlp norm");
}

TEST_CASE("maxtext compare: the GPT-3 fixture dump passes, every tensor in forward order", "[cli][compare]") {
  const std::string json = tmp("pass.json");
  const auto r = run_cli("compare " + model_args() + " --reference " + kModel + "activations.npz --json " + json);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("compared 19 tensors: 19 passed, 0 failed") != std::string::npos);
  CHECK(r.output.find("top-10 overlap per position: mean 10/10, min 10/10") != std::string::npos);
  const auto j = read_json(json);
  CHECK(j["pass"] == true);
  REQUIRE(j["tensors"].size() == 19);
  CHECK(j["tensors"][0]["ours"] == "token_embedder");
  CHECK(j["tensors"][1]["ours"] == "decoder.layers_0.input");
  CHECK(j["tensors"][18]["ours"] == "logits");
  CHECK(j["tensors"][18]["kl_max"].get<double>() < 1e-9);
  for (const auto& t : j["tensors"]) CHECK(t["max_abs"].get<double>() < 1e-4);
  std::remove(json.c_str());
}

TEST_CASE("maxtext compare points at the layer whose weight was perturbed", "[cli][compare]") {
  struct Case {
    std::string tensor;
    std::int64_t flat;
    std::string first;
  };
  for (const Case& c : {Case{"decoder.layers_1.mlp.wo.kernel", 5, "decoder.layers_1.mlp"},
                        Case{"decoder.layers_0.pre_self_attention_norm.scale", 3, "decoder.layers_0.pre_self_attention_norm"},
                        Case{"decoder.layers_1.self_attention.qkv_proj.bias", 20, "decoder.layers_1.self_attention.qkv_proj"}}) {
    INFO(c.tensor);
    const std::string w = perturbed_weights(c.tensor, c.flat, 0.25f);
    const std::string json = tmp("fail.json");
    const auto r = run_cli("compare --config " + kModel + "config.yml --weights " + w + " --tokens " + kModel +
                           "tokens.npy --reference " + kModel + "activations.npz --json " + json);
    INFO(r.output);
    CHECK(r.status == 1);
    const auto j = read_json(json);
    CHECK(j["pass"] == false);
    CHECK(j["first_failure"] == c.first);
    // Everything before the first failure passed; the marker sits on its line.
    for (const auto& t : j["tensors"]) {
      if (t["ours"] == c.first) break;
      CHECK(t["pass"] == true);
    }
    const auto line_start = r.output.rfind('\n', r.output.find("<-- first divergence"));
    CHECK(r.output.substr(line_start, r.output.find("<-- first divergence") - line_start).find(" " + c.first + " ") !=
          std::string::npos);
    CHECK(r.output.find("; first divergence: " + c.first + "\n") != std::string::npos);
    std::remove(json.c_str());
    std::remove(w.c_str());
  }
}

TEST_CASE("maxtext compare: KL criterion on logits (--max-kl-div)", "[cli][compare][logits]") {
  const std::string ref = tmp("logits_only.npz");
  io::write_npz(ref, {{"logits", io::read_npz(kModel + "activations.npz").at("logits")}});
  auto r = run_cli("compare " + model_args() + " --reference " + ref + " --max-kl-div 1e-6");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("(limit 1e-06: ok)") != std::string::npos);
  const std::string w = perturbed_weights("decoder.layers_1.mlp.wo.kernel", 5, 0.25f);
  r = run_cli("compare --config " + kModel + "config.yml --weights " + w + " --tokens " + kModel + "tokens.npy --reference " +
              ref + " --max-kl-div 1e-8");
  CHECK(r.status == 1);
  CHECK(r.output.find("(limit 1e-08: FAIL)") != std::string::npos);
  // A generous KL limit accepts the same logits that fail elementwise.
  r = run_cli("compare --config " + kModel + "config.yml --weights " + w + " --tokens " + kModel + "tokens.npy --reference " +
              ref + " --max-kl-div 10");
  CHECK(r.status == 0);
  std::remove(ref.c_str());
  std::remove(w.c_str());
}

TEST_CASE("maxtext compare: a dump in other names (--map), without the batch dim, as a directory of .npy", "[cli][compare]") {
  const io::TensorMap act = io::read_npz(kModel + "activations.npz");
  std::map<std::string, AnyTensor> theirs;
  theirs["hidden_states/0"] = act.at("token_embedder").select(0, 0);  // row 0, no batch dim
  theirs["hidden_states/1"] = act.at("decoder.layers_0").select(0, 0);
  theirs["hidden_states/2"] = act.at("decoder.layers_1").select(0, 0);
  theirs["final"] = act.at("logits").select(0, 0);
  theirs["input_ids"] = io::read_npy(kModel + "tokens.npy").select(0, 0);
  const std::string dir = tmp("hf_dump");
  fs::remove_all(dir);
  io::write_tensors(dir, theirs);
  const std::string map = tmp("names.map");
  {
    std::ofstream f(map);
    f << "# their names -> ours\nhidden_states/0 token_embedder\nhidden_states/1 decoder.layers_0\n"
         "hidden_states/2 decoder.layers_1\nfinal logits\ninput_ids -\n";
  }
  const auto r = run_cli("compare --config " + kModel + "config.yml --weights " + kModel + "model.safetensors --tokens " +
                         dir + ":input_ids --reference " + dir + " --map " + map);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("hidden_states/1 -> decoder.layers_0") != std::string::npos);
  CHECK(r.output.find("note: reference has no batch dim") != std::string::npos);
  CHECK(r.output.find("compared 4 tensors: 4 passed, 0 failed") != std::string::npos);
  CHECK(r.output.find("ignored by the name map: 1") != std::string::npos);
  // The same dump named in the Hugging Face scheme (--names hf): model.layers.i without a map.
  std::map<std::string, AnyTensor> hf{{"model.embed_tokens", act.at("token_embedder")}, {"model.layers.1", act.at("decoder.layers_1")},
                                      {"model.layers.0.self_attn", act.at("decoder.layers_0.self_attention")},
                                      {"model.norm", act.at("decoder.decoder_norm")}};
  const std::string hf_npz = tmp("hf_names.npz");
  io::write_npz(hf_npz, hf);
  const auto h = run_cli("compare " + model_args() + " --reference " + hf_npz + " --names hf");
  INFO(h.output);
  CHECK(h.status == 0);
  CHECK(h.output.find("names: hf") != std::string::npos);
  CHECK(h.output.find("compared 4 tensors: 4 passed, 0 failed") != std::string::npos);
  std::remove(hf_npz.c_str());
  // Without the map nothing matches: a clear error, not a silent pass.
  const auto none = run_cli("compare --config " + kModel + "config.yml --weights " + kModel + "model.safetensors --tokens " +
                            dir + ":input_ids --reference " + dir);
  CHECK(none.status == 1);
  CHECK(none.output.find("none of the reference's 5 tensors matched a captured activation; pass --map") != std::string::npos);
  fs::remove_all(dir);
  std::remove(map.c_str());
}

TEST_CASE("maxtext compare --layer: one layer of the model on its recorded input", "[cli][compare][layer]") {
  const auto r = run_cli("compare --layer gpt3 --config " + kModel + "config.yml --weights " + kModel +
                         "model.safetensors --prefix decoder.layers_1 --input decoder.layers_1.input --reference " + kModel +
                         "activations.npz --rtol 1e-5 --atol 1e-6");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("compared 7 tensors: 7 passed, 0 failed") != std::string::npos);  // layer 1's names but .input
  CHECK(r.output.find("not produced by this run (12)") != std::string::npos);
}

TEST_CASE("maxtext compare --layer on a per-layer fixture with segment ids", "[cli][compare][layer]") {
  const std::string dir = test::fixtures_dir() + "/gpt3_layer_fused_seg/";
  const std::string cfg = tmp("layer32.yml"), map = tmp("layer32.map");
  {
    std::ofstream f(cfg);
    f << "decoder_block: gpt3\ndtype: float32\nbase_emb_dim: 32\nbase_num_query_heads: 4\nbase_num_kv_heads: 4\n"
         "head_dim: 8\nbase_mlp_dim: 64\nbase_num_decoder_layers: 1\nmlp_activations: [gelu]\nfused_qkv: true\n"
         "normalization_layer_epsilon: 1.e-5\nvocab_size: 64\n";
    std::ofstream m(map);
    m << "attn self_attention\nx -\nsegment_ids -\n";
  }
  const auto r = run_cli("compare --layer gpt3 --config " + cfg + " --weights " + dir + "weights.safetensors --input " + dir +
                         "x.npy --segment-ids segment_ids --reference " + dir + " --map " + map + " --rtol 1e-5 --atol 1e-6");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("compared 3 tensors: 3 passed, 0 failed") != std::string::npos);
  std::remove(cfg.c_str());
  std::remove(map.c_str());
}

TEST_CASE("maxtext compare --layer: the shared GPT-3 reference cases", "[cli][compare][shared]") {
  const std::string ref = test::require(test::reference_dir() + "/gpt3", "shared GPT-3 reference") + "/";
  const std::string cfg = kCmp + "gpt3_layer_e48.yml";
  // The reference suite's criterion against the float64 twins: max|diff| <= 1e-5 * max(1, max|ref|).
  auto r = run_cli("compare --layer gpt3 --config " + cfg + " --weights " + ref + "layer_b2_s12_e48_h4_d8_m96/weights.safetensors" +
                   " --input " + ref + "layer_b2_s12_e48_h4_d8_m96/x.npy --reference " + ref + "layer_b2_s12_e48_h4_d8_m96 --map " +
                   kCmp + "gpt3_layer.map --scaled-tol 1e-5");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("compared 6 tensors: 6 passed, 0 failed") != std::string::npos);
  r = run_cli("compare --layer gpt3_attention --config " + cfg + " --weights " + ref + "attn_b2_s12_e48_h4_d8/weights.safetensors" +
              " --input " + ref + "attn_b2_s12_e48_h4_d8/x.npy --reference " + ref + "attn_b2_s12_e48_h4_d8 --map " + kCmp +
              "gpt3_attention.map --scaled-tol 1e-5");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("compared 3 tensors: 3 passed, 0 failed") != std::string::npos);
  // Gpt3LayerNorm at two epsilons, and without bias (weights that carry no bias).
  const std::string ln = ref + "ln_basic/";
  const io::TensorMap w = io::read_safetensors(ln + "weights.safetensors");
  const std::string nobias = tmp("ln_nobias.safetensors");
  io::write_safetensors(nobias, {{"scale", w.at("scale")}});
  for (const auto& [eps, file, weights] : {std::tuple{"1e-6", "y_eps1e-6_f64", ln + "weights.safetensors"},
                                           std::tuple{"1e-5", "y_eps1e-5_f64", ln + "weights.safetensors"},
                                           std::tuple{"1e-6", "y_nobias_eps1e-6_f64", nobias}}) {
    const std::string map = tmp("ln.map");
    {
      std::ofstream f(map);
      f << file << " out\n* -\n";
    }
    r = run_cli("compare --layer gpt3_layernorm --config " + cfg + " --weights " + weights + " --input " + ln +
                "x.npy --reference " + ln + " --map " + map + " --scaled-tol 1e-5 normalization_layer_epsilon=" + eps);
    INFO(file << "\n" << r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("compared 1 tensors: 1 passed, 0 failed") != std::string::npos);
    std::remove(map.c_str());
  }
  // And the check has teeth: the norm without its bias against the output computed with it fails.
  const std::string map = tmp("ln.map");
  {
    std::ofstream f(map);
    f << "y_eps1e-6_f64 out\n* -\n";
  }
  r = run_cli("compare --layer gpt3_layernorm --config " + cfg + " --weights " + nobias + " --input " + ln + "x.npy --reference " +
              ln + " --map " + map + " --scaled-tol 1e-5 normalization_layer_epsilon=1e-6");
  CHECK(r.status == 1);
  std::remove(map.c_str());
  std::remove(nobias.c_str());
}

TEST_CASE("maxtext compare: the shared DeepSeek-V3 reference (needs decoder_block deepseek)", "[cli][compare][shared][deepseek]") {
  const std::string ref = test::require(test::reference_dir() + "/deepseek/v3_qlora32_b1", "shared DeepSeek reference") + "/";
  // The case ships a Hugging Face config.json; the CLI reads it once the DeepSeek model (and its config import) is
  // part of the build. Until then this case cannot run.
  const auto info = run_cli("info --config " + ref + "config.json");
  if (info.status != 0 || info.output.find("decoder_block deepseek") == std::string::npos) {
    test::skip("this build has no DeepSeek model that reads the case's config.json (decoder_block deepseek is not "
               "registered yet): " + info.output);
  }
  // Names in the HF scheme of its weights; compared against the float64 twins with the suite's criterion.
  const auto r = run_cli("compare --config " + ref + "config.json --weights " + ref + "model.safetensors --tokens " + ref +
                         "prompt_tokens.npy --reference " + ref + " --map " + kCmp + "deepseek_v3.map --names hf --scaled-tol 1e-5");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("compared 9 tensors: 9 passed, 0 failed") != std::string::npos);
}

TEST_CASE("maxtext compare: bad arguments are reported", "[cli][compare][errors]") {
  auto r = run_cli("compare " + model_args());
  CHECK(r.status == 1);
  CHECK(r.output.find("compare needs --reference") != std::string::npos);
  r = run_cli("compare " + model_args() + " --reference " + kModel + "activations.npz --scaled-tol 1e-5 --rtol 1e-3");
  CHECK(r.status == 1);
  CHECK(r.output.find("--scaled-tol replaces --rtol/--atol") != std::string::npos);
  r = run_cli("compare --layer gpt3 --config " + kModel + "config.yml --weights " + kModel +
              "model.safetensors --prefix decoder.layers_1 --input nope --reference " + kModel + "activations.npz");
  CHECK(r.status == 1);
  CHECK(r.output.find("--input: 'nope' is neither a file") != std::string::npos);
}
