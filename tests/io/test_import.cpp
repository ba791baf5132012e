// Import to MaxText names: configs from GGUF metadata, llama2.c headers and config.json; the query kernel scaled by
// 1/sqrt(head_dim) and its rotary lanes re-paired (checked element by element against the file), views without
// copies for everything else (a tied classifier shares the embedding's memory), and clear errors for missing or
// unexpected tensors.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "maxtext/families/families.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/llama2c.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {
/// Element [i, j, k] of a rank-3 tensor.
double at3(const AnyTensor& t, std::int64_t i, std::int64_t j, std::int64_t k) {
  return t.element((i * t.shape[1] + j) * t.shape[2] + k);
}
bool inside(const AnyTensor& view, const AnyTensor& file) {
  const auto* b = file.data;
  const auto* e = file.data + static_cast<std::size_t>(file.numel()) * dtype_size(file.dtype);
  return view.data >= b && view.data < e;
}
}  // namespace

TEST_CASE("import: configs of stories260K from the llama2.c header and from the GGUF agree", "[io][import]") {
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.bin", "stories260K");
  const Config a = io::config_from_llama2c(io::read_llama2c(dir + "/stories260K.bin").header);
  const Config b = io::config_from_gguf(io::read_gguf(dir + "/stories260K.gguf"));
  for (const Config* c : {&a, &b}) {
    CHECK(c->decoder_block == "llama2");
    CHECK(c->emb_dim == 64);
    CHECK(c->num_query_heads == 8);
    CHECK(c->num_kv_heads == 4);
    CHECK(c->head_dim == 8);
    CHECK(c->mlp_dim == 172);
    CHECK(c->num_decoder_layers == 5);
    CHECK(c->vocab_size == 512);
    CHECK(static_cast<float>(c->normalization_layer_epsilon) == 1e-5f);
    CHECK(c->rope_max_timescale == 10000);
    CHECK(c->rope_type == "default");
    CHECK(c->dtype == "float32");
    CHECK_FALSE(c->logits_via_embedding);
    CHECK_NOTHROW(c->validate());
  }
  CHECK(a.max_target_length == 512);
  CHECK(b.max_target_length == 2048);  // the GGUF converter's default (README)
  CHECK(io::read_weights_config(dir + "/stories260K.gguf").has_value());
}

TEST_CASE("import: configs and tensors are read by the family that names the model type or owns the block",
          "[io][import][families]") {
  // Every block of the block list has exactly one owning family (families/families.hpp also checks it at compile time).
  for (const std::string& block : supported_decoder_blocks()) {
    int owners = 0;
    families::any_family([&]<class F>() {
      owners += families::owns<F>(block) ? 1 : 0;
      return false;
    });
    INFO(block);
    CHECK(owners == 1);
  }
  // A config.json model type no family reads is refused with those that are read.
  nlohmann::json j = {{"model_type", "bogus"}};
  CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"),
                    Catch::Contains("model_type 'bogus' is not supported (supported: ") && Catch::Contains("olmo3") &&
                        Catch::Contains("qwen3_moe") && Catch::Contains("deepseek_v3") && Catch::Contains("llama"));
  CHECK_THROWS_WITH(io::config_from_hf(nlohmann::json::object(), "config.json"),
                    Catch::Contains("config.json lacks model_type"));

  // So is a GGUF architecture (a vision projector's file here).
  const std::string mmproj = test::fixtures_dir() + "/gemma3_mm_model/mmproj.gguf";
  if (std::filesystem::exists(mmproj)) {
    CHECK_THROWS_WITH(io::config_from_gguf(io::read_gguf(mmproj)),
                      Catch::Contains("general.architecture 'clip' is not supported (supported: ") &&
                          Catch::Contains("deepseek2, gemma, gemma2, gemma3, gemma4, gpt-oss, llama, llama4, olmo2, qwen2, "
                                          "qwen3, qwen3moe, qwen3next, qwen35moe)"));
  }

  // A weight format that the owning family does not read is refused by name, with the formats it reads.
  const std::string dir = test::models_dir() + "/stories260K";
  test::require(dir + "/stories260K.bin", "stories260K");
  const Config base = io::config_from_gguf(io::read_gguf(dir + "/stories260K.gguf"));
  Config gpt3 = base;
  gpt3.decoder_block = "gpt3";
  CHECK_THROWS_AS(io::load_weights(dir + "/stories260K.gguf", gpt3), UnsupportedError);
  CHECK_THROWS_WITH(io::load_weights(dir + "/stories260K.gguf", gpt3),
                    Catch::Contains("decoder_block gpt3 reads MaxText checkpoints only, not GGUF files"));
  Config llama4 = base;
  llama4.decoder_block = "llama4";
  CHECK_THROWS_WITH(io::load_weights(dir + "/stories260K.bin", llama4),
                    Catch::Contains("decoder_block llama4 reads MaxText, Hugging Face and GGUF checkpoints, not llama2.c"));
  Config custom = base;
  custom.decoder_block = "qwen3_custom_moe";
  CHECK_THROWS_WITH(io::load_weights(dir + "/stories260K.bin", custom),
                    Catch::Contains("qwen3_custom_moe reads MaxText checkpoints only"));
  // The families that read it load the same file.
  CHECK(io::load_weights(dir + "/stories260K.bin", base).tensors.has("decoder.layers_0.self_attention.query.kernel"));
}

TEST_CASE("import: llama2.c query/key kernels are de-interleaved and the query scaled, the rest are views", "[io][import]") {
  const std::string path = test::require(test::models_dir() + "/stories260K/stories260K.bin", "stories260K.bin");
  const io::Llama2cCheckpoint ck = io::read_llama2c(path);
  const Config cfg = io::config_from_llama2c(ck.header);
  const io::LoadedWeights lw = io::load_weights(path, cfg);
  CHECK(lw.format == io::WeightFormat::llama2c);
  CHECK(lw.naming == io::WeightNaming::maxtext);
  CHECK(lw.tensors.tensors.size() == 2 + 1 + 9 * 5);
  // Map the same file object as `ck` so views can be told from copies.
  io::LoadedWeights w;
  w.tensors = io::import_llama_cpp_names(ck.tensors, cfg, io::RopeLayout::interleaved);
  const std::int64_t N = 8, K = 4, H = 8, D = 64;
  for (int l : {0, 4}) {
    const std::string L = "decoder.layers_" + std::to_string(l) + ".";
    const AnyTensor& wq = ck.tensors.at("blk." + std::to_string(l) + ".attn_q.weight");  // [N*H, D], interleaved
    const AnyTensor& wk = ck.tensors.at("blk." + std::to_string(l) + ".attn_k.weight");
    const AnyTensor& q = w.tensors.at(L + "self_attention.query.kernel");
    const AnyTensor& k = w.tensors.at(L + "self_attention.key.kernel");
    REQUIRE(q.shape == std::vector<std::int64_t>{D, N, H});
    REQUIRE(k.shape == std::vector<std::int64_t>{D, K, H});
    for (std::int64_t d = 0; d < D; d += 7) {
      for (std::int64_t n = 0; n < N; ++n) {
        for (std::int64_t j = 0; j < H; ++j) {
          // half-split lane j holds interleaved lane 2j (first half) or 2(j - H/2) + 1 (second half).
          const std::int64_t src = j < H / 2 ? 2 * j : 2 * (j - H / 2) + 1;
          CHECK(at3(q, d, n, j) == static_cast<float>(wq.element((n * H + src) * D + d) * (1.0 / std::sqrt(8.0))));
          if (n < K) CHECK(at3(k, d, n, j) == wk.element((n * H + src) * D + d));
        }
      }
    }
    CHECK(inside(w.tensors.at(L + "self_attention.value.kernel"), ck.tensors.at("blk." + std::to_string(l) + ".attn_v.weight")));
    CHECK(inside(w.tensors.at(L + "mlp.wo.kernel"), ck.tensors.at("blk." + std::to_string(l) + ".ffn_down.weight")));
    const AnyTensor& o = w.tensors.at(L + "self_attention.out.kernel");  // [N, H, D] view of wo [D, N*H]
    const AnyTensor& wo = ck.tensors.at("blk." + std::to_string(l) + ".attn_output.weight");
    CHECK(inside(o, wo));
    CHECK(at3(o, 3, 5, 17) == wo.element(17 * D + 3 * H + 5));
  }
  // Tied classifier: the logits kernel [D, V] is the embedding [V, D] transposed, same memory.
  const AnyTensor& e = w.tensors.at("token_embedder.embedding");
  const AnyTensor& head = w.tensors.at("decoder.logits_dense.kernel");
  CHECK(head.shape == std::vector<std::int64_t>{64, 512});
  CHECK(head.data == e.data);
  CHECK(head.element(3 * 512 + 100) == e.element(100 * 64 + 3));
}

TEST_CASE("import: Hugging Face configs and names", "[io][import][hf]") {
  const std::string dir = test::fixtures_dir() + "/hf_tiny";
  const Config llama = io::config_from_hf_file(dir + "/llama/config.json");
  CHECK(llama.decoder_block == "llama2");
  CHECK(llama.num_kv_heads == 2);
  CHECK(llama.head_dim == 8);
  const Config qwen = io::config_from_hf_file(dir + "/qwen3/config.json");
  CHECK(qwen.decoder_block == "qwen3");
  CHECK(qwen.use_qk_norm);
  CHECK(qwen.head_dim == 16);
  CHECK(qwen.rope_max_timescale == 1e6);
  const Config l31 = io::config_from_hf_file(dir + "/llama31/config.json");
  CHECK(l31.rope_type == "llama3.1");
  CHECK(io::maxtext_rope_layout(l31) == io::RopeLayout::interleaved);
  CHECK(io::config_from_hf_file(dir + "/mistral/config.json").decoder_block == "mistral");

  // llama: query scaled by 1/sqrt(8), lanes kept (HF and MaxText default RoPE are both half-split).
  const io::LoadedWeights w = io::load_weights(dir + "/llama/model.safetensors", llama);
  CHECK(w.format == io::WeightFormat::hf_safetensors);
  CHECK(w.naming == io::WeightNaming::hf);
  const io::TensorMap raw = io::read_safetensors(dir + "/llama/model.safetensors");
  const AnyTensor& qp = raw.at("model.layers.1.self_attn.q_proj.weight");
  const AnyTensor& q = w.tensors.at("decoder.layers_1.self_attention.query.kernel");
  for (std::int64_t d = 0; d < 32; ++d) {
    for (std::int64_t r = 0; r < 32; ++r) CHECK(at3(q, d, r / 8, r % 8) == static_cast<float>(qp.element(r * 32 + d) * (1.0 / std::sqrt(8.0))));
  }
  // qwen3: no query scaling (the block scales queries in its forward pass).
  const io::TensorMap rq = io::read_safetensors(dir + "/qwen3/model.safetensors");
  io::LoadedWeights wq;
  wq.tensors = io::import_hf_names(rq, qwen, false);
  CHECK(inside(wq.tensors.at("decoder.layers_0.self_attention.query.kernel"), rq.at("model.layers.0.self_attn.q_proj.weight")));
  CHECK(wq.tensors.has("decoder.layers_0.self_attention.query_norm.scale"));
  // llama3.1: half-split -> interleaved: new[2i] = old[i], new[2i+1] = old[i + H/2].
  const io::LoadedWeights w31 = io::load_weights(dir + "/llama31/model.safetensors", l31);
  const io::TensorMap r31 = io::read_safetensors(dir + "/llama31/model.safetensors");
  const AnyTensor& kp = r31.at("model.layers.0.self_attn.k_proj.weight");  // [1*8, 32]
  const AnyTensor& k = w31.tensors.at("decoder.layers_0.self_attention.key.kernel");
  for (std::int64_t j = 0; j < 8; ++j) {
    const std::int64_t src = j % 2 == 0 ? j / 2 : j / 2 + 4;
    CHECK(at3(k, 5, 0, j) == kp.element(src * 32 + 5));
  }
  // tied: no lm_head in the file; the logits kernel views the embedding.
  const Config tied = io::config_from_hf_file(dir + "/llama_tied/config.json");
  const io::LoadedWeights wt = io::load_weights(dir + "/llama_tied", tied);  // a directory works too
  CHECK(wt.tensors.at("decoder.logits_dense.kernel").data == wt.tensors.at("token_embedder.embedding").data);
  // sharded index: same tensors as the single file.
  const io::LoadedWeights ws = io::load_weights(dir + "/llama/sharded/model.safetensors.index.json", llama);
  CHECK(ws.tensors.tensors.size() == w.tensors.tensors.size());
  CHECK(io::read_weights_config(dir + "/llama/sharded").value().num_decoder_layers == 2);
}

TEST_CASE("import: missing and unexpected tensors are listed together", "[io][import][malformed]") {
  const std::string dir = test::fixtures_dir() + "/hf_tiny";
  const Config cfg = io::config_from_hf_file(dir + "/llama/config.json");
  io::TensorMap raw = io::read_safetensors(dir + "/llama/model.safetensors");
  raw.tensors.erase("model.layers.1.mlp.up_proj.weight");
  raw.add("model.layers.9.mlp.up_proj.weight", raw.at("model.norm.weight"));
  try {
    io::import_hf_names(raw, cfg, false);
    FAIL("no error");
  } catch (const IoError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("missing tensor model.layers.1.mlp.up_proj.weight"));
    CHECK_THAT(m, Catch::Contains("unexpected tensor model.layers.9.mlp.up_proj.weight"));
  }
  // A wrongly shaped projection names the tensor and the expected shape.
  io::TensorMap bad = io::read_safetensors(dir + "/llama/model.safetensors");
  bad.tensors.at("model.layers.0.self_attn.k_proj.weight") = bad.at("model.layers.0.self_attn.q_proj.weight");
  CHECK_THROWS_WITH(io::import_hf_names(bad, cfg, false), Catch::Contains("self_attention.key.kernel") && Catch::Contains("[16, D]"));
  // Unsupported families and rope scalings are refused by name.
  nlohmann::json j = nlohmann::json::parse(io::read_text_file(dir + "/llama/config.json"));
  j["model_type"] = "phi3";
  CHECK_THROWS_AS(io::config_from_hf(j, "config.json"), UnsupportedError);
  j["model_type"] = "llama";
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains("yarn"));
  // LLaMA-3 scaling other than MaxText's fixed 8 / 1 / 4 / 8192 (Llama 3.2: factor 32) goes to the llama3_rope_*
  // keys; a missing parameter is named.
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const Config l32 = io::config_from_hf(j, "config.json");
  CHECK(l32.rope_type == "llama3.1");
  CHECK(l32.llama3_rope_factor == 32.0);
  CHECK(l32.llama3_rope_high_freq_factor == 4.0);
  j["rope_scaling"].erase("low_freq_factor");
  CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains("rope_scaling.low_freq_factor is missing"));
  j.erase("rope_scaling");
  j.erase("hidden_size");
  CHECK_THROWS_WITH(io::config_from_hf(j, "config.json"), Catch::Contains("hidden_size"));
}

TEST_CASE("Gemma's folding keeps an f16 / bf16 matrix in its type when the power-of-two scale is exact there",
          "[io][import][gemma]") {
  Tensor<fp16, 2> h({2, 3});
  const float vals[6] = {1.0f, -0.5f, 3.25f, 0.0f, 1024.0f, -7.0f};
  for (int i = 0; i < 6; ++i) h.data()[i] = fp16(vals[i]);
  const AnyTensor x = AnyTensor::from(h);
  // 1/16 (Gemma's head_dim 256 query scale): exact in fp16, kept as fp16.
  const AnyTensor q = io::detail::GemmaImporter::folded(x, 0.0625f, false, "q");
  CHECK(q.dtype == DType::f16);
  for (int i = 0; i < 6; ++i) CHECK(q.element(i) == static_cast<double>(vals[i]) / 16.0);
  // Not a power of two, or + 1: f32, float(x) * s as before.
  const AnyTensor r = io::detail::GemmaImporter::folded(x, 0.3f, false, "q");
  CHECK(r.dtype == DType::f32);
  CHECK(r.element(2) == static_cast<double>(3.25f * 0.3f));
  CHECK(io::detail::GemmaImporter::folded(x, 0.5f, true, "n").dtype == DType::f32);
  // A product that would lose bits as an fp16 subnormal (3.25 * 2^-14 / 2^10 = 3.25 * 2^-24, off fp16's 2^-24
  // grid): the whole matrix stays f32.
  Tensor<fp16, 2> tiny({1, 2});
  tiny.data()[0] = fp16(1.0f);
  tiny.data()[1] = fp16(3.25f * 0.00006103515625f);  // 3.25 * 2^-14, a normal fp16
  const AnyTensor t = io::detail::GemmaImporter::folded(AnyTensor::from(tiny), 1.0f / 1024.0f, false, "q");
  CHECK(t.dtype == DType::f32);
  CHECK(t.element(1) == static_cast<double>(static_cast<float>(tiny.data()[1]) / 1024.0f));
}
