// families/llama2/import.hpp: the Llama-style readers that the llama2, mistral and qwen families share (and the
// default block, whose parameter tree is llama2's): configurations from GGUF metadata (architectures llama, qwen2,
// qwen3, qwen3moe), llama2.c headers and Hugging Face config.json (model types llama, mistral, qwen2, qwen3,
// qwen3_moe), and the tensor names of llama.cpp (GGUF, llama2.c) and Hugging Face into MaxText naming. Spec
// weights-naming.md §HF -> MaxText transforms, rope.md §Selection. The families plug them in through their
// family.hpp (families/families.hpp).
//
// What the mapping does, per tensor: an [out, in] matrix of the file becomes the MaxText kernel [in..., out...] as a
// strided view (no copy); the query kernel is multiplied by 1/sqrt(head_dim) (materialised; not for Qwen2/Qwen3, whose
// attention scales queries in the forward pass); the rotary lanes of query and key are permuted between the file's
// pairing and the pairing of the RoPE the MaxText block uses (materialised): HF files pair (i, i+H/2) ("half-split"),
// llama.cpp's `llama` architecture and llama2.c/Meta pair (2i, 2i+1) ("interleaved"); MaxText's default RoPE (llama2,
// mistral, qwen3 blocks) is half-split, its LLaMA-3.1 RoPE interleaved. A tied classifier becomes
// `decoder.logits_dense.kernel` viewing the embedding's memory (logits_via_embedding stays false: MaxText's tied path
// rounds the table to bf16).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/deepseek/import.hpp"  // hf_stack_experts (Hugging Face expert lists)
#include "maxtext/families/llama4/import.hpp"    // set_llama3_rope_scaling, llama3_divisor (LLaMA-3 RoPE)
#include "maxtext/io/attention_kernels.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/llama2c.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// The lane pairing the MaxText block of `cfg` expects in its query/key kernels (rope.md §Selection).
inline RopeLayout maxtext_rope_layout(const Config& cfg) {
  auto starts = [](const std::string& s, const char* p) { return s.rfind(p, 0) == 0; };
  if (starts(cfg.model_name, "llama3.1") || starts(cfg.rope_type, "llama3.1")) return RopeLayout::interleaved;
  return RopeLayout::half_split;
}

/// True when the block scales queries in its forward pass (Qwen2, Qwen3, Qwen3-MoE: query_pre_attn_scalar =
/// head_dim^-0.5), so the imported query kernel must not be pre-scaled.
inline bool block_scales_queries(const Config& cfg) { return cfg.is("qwen3") || cfg.is("qwen2") || cfg.is("qwen3_moe"); }

// ---------------------------------------------------------------------------------------------------------------
// Configs.

/// A Config for a llama2.c checkpoint (decoder_block llama2, f32, RoPE base 10000, eps 1e-5).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API Config config_from_llama2c(const Llama2cHeader& h) {
  Config c;
  detail::base_llama_config(c);
  c.decoder_block = "llama2";
  c.base_emb_dim = h.dim;
  c.base_num_query_heads = h.n_heads;
  c.base_num_kv_heads = h.n_kv_heads;
  c.head_dim = h.head_size();
  c.base_mlp_dim = h.hidden_dim;
  c.base_num_decoder_layers = h.n_layers;
  c.vocab_size = h.vocab_size;
  c.normalization_layer_epsilon = 1e-5;
  c.rope_max_timescale = 10000;
  c.max_target_length = h.seq_len;
  c.derive();
  return c;
}
#else
Config config_from_llama2c(const Llama2cHeader& h);
#endif

/// A Config from the metadata of a llama.cpp GGUF file of architecture llama (-> decoder_block llama2), qwen2, qwen3
/// or qwen3moe. Weights stay in the file's storage type unless the caller asks otherwise; activations default to
/// float32.
inline Config config_from_gguf_llama(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  Config c;
  detail::base_llama_config(c);
  if (arch == "llama") {
    c.decoder_block = "llama2";
  } else if (arch == "qwen3") {
    c.decoder_block = "qwen3";
    c.use_qk_norm = true;
  } else if (arch == "qwen2") {
    c.decoder_block = "qwen2";
    c.attention_bias = true;  // llama.cpp's qwen2 always has attn_q/k/v biases
  } else if (arch == "qwen3moe") {
    c.decoder_block = "qwen3_moe";
    c.use_qk_norm = true;
    c.num_experts = g.get_int("qwen3moe.expert_count");
    c.num_experts_per_tok = g.get_int("qwen3moe.expert_used_count");
    c.base_moe_mlp_dim = g.get_int("qwen3moe.expert_feed_forward_length");
    c.norm_topk_prob = true;  // llama.cpp's qwen3moe graph always renormalises the top-k weights
  } else {
    MAXTEXT_THROW(UnsupportedError, "[gguf] ", g.path, ": general.architecture '", arch,
                  "' is not a Llama-style architecture (llama, qwen2, qwen3, qwen3moe)");
  }
  const std::string p = arch + ".";
  c.base_emb_dim = g.get_int(p + "embedding_length");
  c.base_num_decoder_layers = g.get_int(p + "block_count");
  c.base_mlp_dim = c.is("qwen3_moe") ? g.get_int(p + "feed_forward_length", c.base_moe_mlp_dim)
                                    : g.get_int(p + "feed_forward_length");
  c.base_num_query_heads = g.get_int(p + "attention.head_count");
  c.base_num_kv_heads = g.get_int(p + "attention.head_count_kv", c.base_num_query_heads);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_emb_dim > 0, IoError, "[gguf] ", g.path,
                ": head_count and embedding_length must be > 0");
  c.head_dim = g.get_int(p + "attention.key_length", c.base_emb_dim / c.base_num_query_heads);
  MAXTEXT_CHECK(g.get_int(p + "attention.value_length", c.head_dim) == c.head_dim, UnsupportedError, "[gguf] ", g.path,
                ": attention.value_length differs from key_length");
  const std::int64_t rope_dims = g.get_int(p + "rope.dimension_count", c.head_dim);
  MAXTEXT_CHECK(rope_dims == c.head_dim, UnsupportedError, "[gguf] ", g.path, ": rope.dimension_count ", rope_dims,
                " != head_dim ", c.head_dim, " (partial rotary embeddings are not supported for ", arch, ")");
  // f32 in the file: keep its exact value (1e-5 is stored as 9.99999975e-06; the forward computes in f32 anyway).
  c.normalization_layer_epsilon = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_max_timescale = g.get_float(p + "rope.freq_base", 10000.0);
  c.max_target_length = g.get_int(p + "context_length", 2048);
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_linear_scaling_factor = g.get_float(p + "rope.scaling.factor", 1.0);
  } else {
    MAXTEXT_CHECK(scaling == "none", UnsupportedError, "[gguf] ", g.path, ": rope.scaling.type '", scaling,
                  "' is not supported (none, linear; LLaMA-3.1 scaling comes as rope_freqs.weight)");
  }
  if (g.tensors.has("rope_freqs.weight")) {
    // llama.cpp stores LLaMA-3.1 scaling as per-pair divisors; MaxText's LLaMA-3.1 RoPE hard-codes them.
    const AnyTensor& rf = g.tensors.at("rope_freqs.weight");
    MAXTEXT_CHECK(rf.numel() == c.head_dim / 2, IoError, "[gguf] ", g.path, ": rope_freqs.weight has ", rf.numel(),
                  " values, expected head_dim/2 = ", c.head_dim / 2);
    for (std::int64_t i = 0; i < rf.numel(); ++i) {
      const double want = detail::llama3_divisor(c, i, c.head_dim);  // c: MaxText's 8 / 1 / 4 / 8192
      MAXTEXT_CHECK(std::fabs(rf.element(i) - want) <= 1e-3 * want, UnsupportedError, "[gguf] ", g.path,
                    ": rope_freqs.weight[", i, "] = ", rf.element(i), " differs from MaxText's LLaMA-3.1 scaling (", want,
                    "; factor 8, low 1, high 4, original context 8192)");
    }
    c.rope_type = "llama3.1";
  }
  c.vocab_size = g.vocab_size(p);
  c.derive();
  return c;
}

namespace detail {

/// A Config from a Llama-style Hugging Face config.json (model types llama, mistral, qwen2, qwen3, qwen3_moe); the
/// types were checked by config_from_hf (families/model_import.hpp).
inline Config config_from_hf_llama(const nlohmann::json& j, const std::string& where) {
  auto get = [&](const char* key) -> const nlohmann::json& {
    MAXTEXT_CHECK(j.contains(key) && !j[key].is_null(), IoError, "[hf] ", where, ": config.json lacks ", key);
    return j[key];
  };
  auto geti = [&](const char* key) -> std::int64_t {
    const auto& v = get(key);
    MAXTEXT_CHECK(v.is_number_integer(), IoError, "[hf] ", where, ": ", key, ": expected an integer, found ", v.dump());
    return v.get<std::int64_t>();
  };
  auto getf = [&](const char* key, double dflt) -> double {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    MAXTEXT_CHECK(j[key].is_number(), IoError, "[hf] ", where, ": ", key, ": expected a number, found ", j[key].dump());
    return j[key].get<double>();
  };
  const std::string type = get("model_type").is_string() ? get("model_type").get<std::string>() : "";
  Config c;
  detail::base_llama_config(c);
  if (type == "llama") {
    c.decoder_block = "llama2";
  } else if (type == "mistral") {
    c.decoder_block = "mistral";
  } else if (type == "qwen3") {
    c.decoder_block = "qwen3";
    c.use_qk_norm = true;
  } else if (type == "qwen2") {
    c.decoder_block = "qwen2";
    c.attention_bias = true;  // Qwen2Attention: q/k/v_proj with bias, o_proj without (MaxText's qwen2 block likewise)
    MAXTEXT_CHECK(!j.value("use_sliding_window", false), UnsupportedError, "[hf] ", where,
                  ": use_sliding_window = true: MaxText's qwen2 block has no sliding window");
  } else if (type == "qwen3_moe") {
    c.decoder_block = "qwen3_moe";
    c.use_qk_norm = true;
    c.num_experts = geti("num_experts");
    c.num_experts_per_tok = geti("num_experts_per_tok");
    c.base_moe_mlp_dim = geti("moe_intermediate_size");
    c.norm_topk_prob = j.value("norm_topk_prob", false);
    MAXTEXT_CHECK(c.norm_topk_prob, UnsupportedError, "[hf] ", where,
                  ": norm_topk_prob = false: HF then weights experts by their softmax over all experts, MaxText by a "
                  "softmax over the top k (always normalised); the two differ");
    MAXTEXT_CHECK(j.value("decoder_sparse_step", 1) == 1, UnsupportedError, "[hf] ", where, ": decoder_sparse_step ",
                  j["decoder_sparse_step"].dump(), ": MaxText's qwen3_moe block has an MoE in every layer");
    MAXTEXT_CHECK(!j.contains("mlp_only_layers") || j["mlp_only_layers"].is_null() || j["mlp_only_layers"].empty(),
                  UnsupportedError, "[hf] ", where, ": mlp_only_layers ", j.value("mlp_only_layers", nlohmann::json()).dump(),
                  ": MaxText's qwen3_moe block has no dense layers");
    MAXTEXT_CHECK(!j.value("use_sliding_window", false), UnsupportedError, "[hf] ", where,
                  ": use_sliding_window = true: MaxText's qwen3_moe block has no sliding window");
  } else {
    MAXTEXT_THROW(UnsupportedError, "[hf] ", where, ": model_type '", type,
                  "' is not a Llama-style model type (llama, mistral, qwen2, qwen3, qwen3_moe)");
  }
  c.base_emb_dim = geti("hidden_size");
  c.base_mlp_dim = geti("intermediate_size");
  c.base_num_decoder_layers = geti("num_hidden_layers");
  c.base_num_query_heads = geti("num_attention_heads");
  c.base_num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null() ? geti("num_key_value_heads")
                                                                                                 : c.base_num_query_heads;
  MAXTEXT_CHECK(c.base_num_query_heads > 0, IoError, "[hf] ", where, ": num_attention_heads must be > 0");
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? geti("head_dim") : c.base_emb_dim / c.base_num_query_heads;
  c.vocab_size = geti("vocab_size");
  c.normalization_layer_epsilon = getf("rms_norm_eps", 1e-6);
  c.rope_max_timescale = getf("rope_theta", 10000.0);
  if (j.contains("max_position_embeddings") && j["max_position_embeddings"].is_number_integer()) {
    c.max_target_length = j["max_position_embeddings"].get<std::int64_t>();
  }
  const std::string act = j.value("hidden_act", std::string("silu"));
  MAXTEXT_CHECK(act == "silu", UnsupportedError, "[hf] ", where, ": hidden_act '", act, "' is not supported (silu)");
  MAXTEXT_CHECK(type == "qwen2" || !j.value("attention_bias", false), UnsupportedError, "[hf] ", where,
                ": attention_bias = true is not supported for ", type);
  MAXTEXT_CHECK(!j.value("mlp_bias", false), UnsupportedError, "[hf] ", where, ": mlp_bias = true is not supported");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const auto& rs = j["rope_scaling"];
    const std::string rt = rs.value("rope_type", rs.value("type", std::string()));
    if (rt == "llama3") {
      set_llama3_rope_scaling(c, rs, where);
    } else if (rt == "linear") {
      c.rope_linear_scaling_factor = rs.value("factor", 1.0);
    } else if (rt != "default") {
      MAXTEXT_THROW(UnsupportedError, "[hf] ", where, ": rope_scaling type '", rt, "' is not supported (llama3, linear)");
    }
  }
  c.derive();
  return c;
}

}  // namespace detail

/// Whether config.json asks for tied embeddings (HF's default for these families is false).
inline bool hf_tied_embeddings(const std::string& config_json_path) {
  if (config_json_path.empty() || !std::filesystem::exists(config_json_path)) return false;
  try {
    const auto j = nlohmann::json::parse(read_text_file(config_json_path));
    return j.is_object() && j.value("tie_word_embeddings", false);
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor names.

namespace detail {
inline bool is_bias_role(const std::string& role) { return role == "q_bias" || role == "k_bias" || role == "v_bias"; }

/// The Llama / Mistral / Qwen / OLMo 3 mapping: NameMapper's bookkeeping plus the lane re-pairing of q/k rows between
/// the file's RoPE layout and the block's.
class Importer : public NameMapper {
 public:
  Importer(const TensorMap& in, const Config& cfg, RopeLayout file_layout, std::string what)
      : NameMapper(in, cfg, std::move(what), "Llama-family"), cfg_(cfg), file_layout_(file_layout) {}

  /// Map one layer's attention and MLP. `n` maps a role to the file's tensor name.
  template <class Names>
  void layer(std::int64_t i, const Names& n) {
    const std::string L = "decoder.layers_" + std::to_string(i) + ".";
    const std::int64_t N = cfg_.num_query_heads, K = cfg_.num_kv_heads, H = cfg_.head_dim;
    const RopeLayout to = maxtext_rope_layout(cfg_);
    const double qscale = block_scales_queries(cfg_) ? 1.0 : 1.0 / std::sqrt(static_cast<double>(H));
    if (auto* t = get(n(i, "attn_norm"))) put(L + "pre_self_attention_layer_norm.scale", *t);
    if (auto* t = get(n(i, "ffn_norm"))) put(L + "post_self_attention_layer_norm.scale", *t);
    if (auto* t = get(n(i, "q"))) put(L + "self_attention.query.kernel", attention_kernel(*t, N, H, file_layout_, to, qscale, L + "self_attention.query.kernel"));
    if (auto* t = get(n(i, "k"))) put(L + "self_attention.key.kernel", attention_kernel(*t, K, H, file_layout_, to, 1.0, L + "self_attention.key.kernel"));
    if (auto* t = get(n(i, "v"))) put(L + "self_attention.value.kernel", attention_kernel(*t, K, H, file_layout_, file_layout_, 1.0, L + "self_attention.value.kernel"));
    if (auto* t = get(n(i, "o"))) put(L + "self_attention.out.kernel", attention_out_kernel(*t, N, H, L + "self_attention.out.kernel"));
    if (cfg_.use_qk_norm) {
      // Per-head norm scales act on lanes: re-pair them like the kernels.
      if (auto* t = get(n(i, "q_norm"))) put(L + "self_attention.query_norm.scale", lanes(*t, H, to));
      if (auto* t = get(n(i, "k_norm"))) put(L + "self_attention.key_norm.scale", lanes(*t, H, to));
    }
    if (cfg_.is("qwen2") && cfg_.attention_bias) {
      // q/k/v biases [heads*H] -> [heads, H]; q and k re-paired like their kernels' rows.
      if (auto* t = get(n(i, "q_bias"))) put(L + "self_attention.query.bias", head_bias(*t, N, H, to));
      if (auto* t = get(n(i, "k_bias"))) put(L + "self_attention.key.bias", head_bias(*t, K, H, to));
      if (auto* t = get(n(i, "v_bias"))) put(L + "self_attention.value.bias", head_bias(*t, K, H, file_layout_));
    }
    if (cfg_.is("qwen3_moe")) {  // router here; the experts by the caller (stacked_experts / hf_experts)
      if (auto* t = get(n(i, "router"))) put(L + "moe_block.gate.kernel", dense_kernel(*t, L + "moe_block.gate.kernel"));
      return;
    }
    if (auto* t = get(n(i, "gate"))) put(L + "mlp.wi_0.kernel", dense_kernel(*t, L + "mlp.wi_0.kernel"));
    if (auto* t = get(n(i, "up"))) put(L + "mlp.wi_1.kernel", dense_kernel(*t, L + "mlp.wi_1.kernel"));
    if (auto* t = get(n(i, "down"))) put(L + "mlp.wo.kernel", dense_kernel(*t, L + "mlp.wo.kernel"));
  }

  /// llama.cpp's stacked expert tensors [E, F, D] (gate, up) and [E, D, F] (down) -> MaxText's moe_block.wi_0 /
  /// wi_1 [E, D, F] and wo [E, F, D] (views).
  void stacked_experts(std::int64_t i, const std::string& gate, const std::string& up, const std::string& down) {
    const std::string L = "decoder.layers_" + std::to_string(i) + ".moe_block.";
    const std::int64_t E = cfg_.num_experts;
    auto expert_view = [&](const AnyTensor& t, const std::string& name) {
      MAXTEXT_CHECK(t.rank() == 3 && t.shape[0] == E, ShapeError, "[import] ", t.source, ": expected [", E,
                    " experts, out, in], found ", t.shape);
      AnyTensor v = t.permuted({0, 2, 1});
      v.source = t.source + " as " + name;
      return v;
    };
    if (auto* t = get(gate)) put(L + "wi_0", expert_view(*t, L + "wi_0"));
    if (auto* t = get(up)) put(L + "wi_1", expert_view(*t, L + "wi_1"));
    if (auto* t = get(down)) put(L + "wo", expert_view(*t, L + "wo"));
  }

  /// Hugging Face per-expert matrices `<prefix><e>.{gate,up,down}_proj.weight` [out, in] -> MaxText's stacked
  /// moe_block.wi_0 / wi_1 [E, D, F] and wo [E, F, D] (one copy per kind; a missing expert is an IoError).
  void hf_experts(std::int64_t i, const std::string& prefix) {
    const std::string L = "decoder.layers_" + std::to_string(i) + ".moe_block.";
    std::vector<std::string> consumed;
    put(L + "wi_0", hf_stack_experts(in(), prefix, ".gate_proj.weight", cfg_.num_experts, consumed));
    put(L + "wi_1", hf_stack_experts(in(), prefix, ".up_proj.weight", cfg_.num_experts, consumed));
    put(L + "wo", hf_stack_experts(in(), prefix, ".down_proj.weight", cfg_.num_experts, consumed));
    mark_used(consumed);
  }

  void globals(const std::string& embed, const std::string& norm, const std::string& head, bool tied_if_absent) {
    const AnyTensor* e = get(embed);
    if (e) put("token_embedder.embedding", *e);
    if (auto* t = get(norm)) put("decoder.decoder_norm.scale", *t);
    const AnyTensor* h = get(head, !tied_if_absent);
    if (h) {
      put("decoder.logits_dense.kernel", dense_kernel(*h, "decoder.logits_dense.kernel"));
    } else if (e && tied_if_absent) {
      put("decoder.logits_dense.kernel", dense_kernel(*e, "decoder.logits_dense.kernel (tied to the embedding)"));
    }
  }

 private:
  AnyTensor lanes(const AnyTensor& t, std::int64_t H, RopeLayout to) const {
    if (file_layout_ == to) return t;
    MAXTEXT_CHECK(t.numel() == H, ShapeError, "[import] ", t.source, ": expected ", H, " values, found ", t.shape);
    Tensor<float, 1> r({H});
    for (std::int64_t j = 0; j < H; ++j) r(j) = static_cast<float>(t.element(src_lane(j, H, file_layout_, to)));
    return AnyTensor::from(r, t.source);
  }
  /// A projection bias [heads*H] as MaxText's [heads, H], lanes re-paired per head when the layouts differ.
  AnyTensor head_bias(const AnyTensor& t, std::int64_t heads, std::int64_t H, RopeLayout to) const {
    MAXTEXT_CHECK(t.numel() == heads * H, ShapeError, "[import] ", t.source, ": expected a bias of ", heads * H, " values (",
                  heads, " heads of ", H, "), found ", t.shape);
    if (file_layout_ == to) return t.reshaped({heads, H});
    Tensor<float, 2> r({heads, H});
    for (std::int64_t n = 0; n < heads; ++n) {
      for (std::int64_t j = 0; j < H; ++j) r(n, j) = static_cast<float>(t.element(n * H + src_lane(j, H, file_layout_, to)));
    }
    return AnyTensor::from(r, t.source);
  }

  const Config& cfg_;
  RopeLayout file_layout_;
};
}  // namespace detail

/// The rotary pairing of a GGUF file's q/k rows: llama.cpp permutes `llama` q/k to interleaved pairs; other
/// architectures (qwen3: NeoX-style rope) keep Hugging Face's half-split order.
inline RopeLayout gguf_rope_layout(const std::string& arch) {
  return arch == "llama" ? RopeLayout::interleaved : RopeLayout::half_split;
}

/// Map llama.cpp tensor names (GGUF, llama2.c) to MaxText names for `cfg`. `file_layout` is the pairing of q/k rows
/// in the file. Without `output.weight` the classifier is tied to the embedding.
inline TensorMap import_llama_cpp_names(const TensorMap& in, const Config& cfg, RopeLayout file_layout,
                                        const std::string& what = "gguf") {
  detail::Importer imp(in, cfg, file_layout, what);
  imp.globals("token_embd.weight", "output_norm.weight", "output.weight", true);
  static const std::map<std::string, std::string> roles = {
      {"attn_norm", "attn_norm"}, {"ffn_norm", "ffn_norm"}, {"q", "attn_q"},         {"k", "attn_k"},
      {"v", "attn_v"},           {"o", "attn_output"},     {"q_norm", "attn_q_norm"}, {"k_norm", "attn_k_norm"},
      {"gate", "ffn_gate"},      {"up", "ffn_up"},         {"down", "ffn_down"},
      {"q_bias", "attn_q"},      {"k_bias", "attn_k"},     {"v_bias", "attn_v"},      {"router", "ffn_gate_inp"}};
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    imp.layer(i, [](std::int64_t l, const std::string& role) {
      return "blk." + std::to_string(l) + "." + roles.at(role) + (detail::is_bias_role(role) ? ".bias" : ".weight");
    });
    if (cfg.is("qwen3_moe")) {
      const std::string b = "blk." + std::to_string(i) + ".";
      imp.stacked_experts(i, b + "ffn_gate_exps.weight", b + "ffn_up_exps.weight", b + "ffn_down_exps.weight");
    }
  }
  return imp.finish({"rope_freqs.weight"});
}

/// Map Hugging Face tensor names (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
/// Qwen3MoeForCausalLM) to MaxText names for
/// `cfg`. Without `lm_head.weight` the classifier is tied to the embedding when `tied` (tie_word_embeddings).
inline TensorMap import_hf_names(const TensorMap& in, const Config& cfg, bool tied, const std::string& what = "hf") {
  detail::Importer imp(in, cfg, RopeLayout::half_split, what);
  imp.globals("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", tied);
  static const std::map<std::string, std::string> roles = {
      {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"},
      {"q", "self_attn.q_proj"},        {"k", "self_attn.k_proj"},
      {"v", "self_attn.v_proj"},        {"o", "self_attn.o_proj"},
      {"q_norm", "self_attn.q_norm"},   {"k_norm", "self_attn.k_norm"},
      {"gate", "mlp.gate_proj"},        {"up", "mlp.up_proj"},
      {"down", "mlp.down_proj"},
      {"q_bias", "self_attn.q_proj"},   {"k_bias", "self_attn.k_proj"},
      {"v_bias", "self_attn.v_proj"},   {"router", "mlp.gate"}};
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    imp.layer(i, [](std::int64_t l, const std::string& role) {
      return "model.layers." + std::to_string(l) + "." + roles.at(role) + (detail::is_bias_role(role) ? ".bias" : ".weight");
    });
    if (cfg.is("qwen3_moe")) imp.hf_experts(i, "model.layers." + std::to_string(i) + ".mlp.experts.");
  }
  // Rotary inverse-frequency buffers some exports carry are recomputed from the config.
  std::vector<std::string> ignorable;
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    ignorable.push_back("model.layers." + std::to_string(i) + ".self_attn.rotary_emb.");
  }
  ignorable.push_back("model.rotary_emb.");
  return imp.finish(ignorable);
}

}  // namespace maxtext::io
