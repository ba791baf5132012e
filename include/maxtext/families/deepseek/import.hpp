// families/deepseek/import.hpp: Hugging Face DeepSeek-V2/V3 and Mixtral checkpoints: config.json -> Config, tensor names ->
// canonical MaxText names, and DeepSeek-V3's FP8 e4m3 weights with 128x128 block scales (dequantised at load).
// Spec weights-naming.md §HF -> MaxText (DeepSeek V2/V3, Mixtral), MaxText checkpoint_conversion/utils/
// param_mapping.py (DEEPSEEK_*, MIXTRAL_*).
//
// Linear weights are exposed as transposed / reshaped views of the file (no copy). Copies are made only where the
// layout requires one: expert weights are stacked into one [E, ...] tensor per kind, FP8 weights are dequantised to
// f32, and Mixtral's query is multiplied by 1/sqrt(head_dim).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

// ---- config.json ----------------------------------------------------------------------------------------------

/// True for the config.json model types this header maps (deepseek_v2, deepseek_v3, mixtral).
inline bool is_hf_deepseek_family(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return false;
  const std::string t = j["model_type"].get<std::string>();
  return t == "deepseek_v3" || t == "deepseek_v2" || t == "mixtral";
}

namespace detail {
template <class T>
T hf_get(const nlohmann::json& j, const char* key, const std::string& where) {
  MAXTEXT_CHECK(j.contains(key) && !j[key].is_null(), ConfigError, "[", where, "] missing key '", key, "'");
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    MAXTEXT_THROW(ConfigError, "[", where, "] key '", key, "' has the wrong type: ", j[key].dump());
  }
}
template <class T>
T hf_get_or(const nlohmann::json& j, const char* key, T dflt, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  return hf_get<T>(j, key, where);
}
inline std::string hf_dtype(const nlohmann::json& j) {
  const std::string t = hf_get_or<std::string>(j, "torch_dtype", "bfloat16", "config.json");
  if (t == "float32") return "float32";
  if (t == "float16") return "float16";
  return "bfloat16";
}
}  // namespace detail

/// The MaxText Config of a Hugging Face DeepSeek-V2/V3 or Mixtral config.json. Options MaxText cannot express are
/// refused (UnsupportedError) rather than approximated: DeepSeek-V2's `group_limited_greedy` (max-per-group) routing,
/// top-k normalisation that disagrees with the score function, mscale != mscale_all_dim, tied embeddings.
inline Config config_from_hf_deepseek(const nlohmann::json& j, const std::string& where = "config.json") {
  MAXTEXT_CHECK(is_hf_deepseek_family(j), ConfigError, "[", where,
                "] model_type: expected deepseek_v2, deepseek_v3 or mixtral");
  using detail::hf_get;
  using detail::hf_get_or;
  const std::string type = j["model_type"].get<std::string>();
  Config c;
  c.dtype = detail::hf_dtype(j);
  c.weight_dtype = c.dtype;
  c.base_emb_dim = hf_get<std::int64_t>(j, "hidden_size", where);
  c.base_num_query_heads = hf_get<std::int64_t>(j, "num_attention_heads", where);
  c.base_num_kv_heads = hf_get_or<std::int64_t>(j, "num_key_value_heads", c.base_num_query_heads, where);
  c.base_num_decoder_layers = hf_get<std::int64_t>(j, "num_hidden_layers", where);
  // DeepSeek-V3's next-n layers (MaxText: mtp_num_layers), stored after the decoder's layers.
  if (type == "deepseek_v3") c.mtp_num_layers = hf_get_or<std::int64_t>(j, "num_nextn_predict_layers", 0, where);
  c.vocab_size = hf_get<std::int64_t>(j, "vocab_size", where);
  c.normalization_layer_epsilon = hf_get_or<double>(j, "rms_norm_eps", 1e-6, where);
  c.rope_max_timescale = hf_get_or<double>(j, "rope_theta", 10000.0, where);
  c.mlp_activations = {hf_get_or<std::string>(j, "hidden_act", "silu", where), "linear"};
  c.logits_via_embedding = false;
  c.enable_dropout = false;
  MAXTEXT_CHECK(!hf_get_or<bool>(j, "tie_word_embeddings", false, where), UnsupportedError, "[", where,
                "] tie_word_embeddings = true: MaxText's tied head (bf16-rounded table, /sqrt(D)) differs from HF's");
  c.base_mlp_dim = hf_get<std::int64_t>(j, "intermediate_size", where);
  // Default cache length for a model loaded from HF: the trained context, at most 4096 (override max_target_length).
  c.max_target_length = std::min<std::int64_t>(hf_get_or<std::int64_t>(j, "max_position_embeddings", 4096, where), 4096);
  c.max_prefill_predict_length = std::min<std::int64_t>(64, c.max_target_length - 1);

  if (type == "mixtral") {
    c.decoder_block = "mixtral";
    c.model_name = "mixtral-hf";
    c.head_dim = hf_get_or<std::int64_t>(j, "head_dim", c.base_emb_dim / c.base_num_query_heads, where);
    c.base_moe_mlp_dim = c.base_mlp_dim;
    c.num_experts = hf_get<std::int64_t>(j, "num_local_experts", where);
    c.num_experts_per_tok = hf_get<std::int64_t>(j, "num_experts_per_tok", where);
    return c;
  }

  // DeepSeek-V2 / V3
  c.decoder_block = "deepseek";
  c.attention_type = "mla";
  c.model_name = type == "deepseek_v3" ? "deepseek3-hf" : "deepseek2-hf";
  MAXTEXT_CHECK(hf_get_or<std::int64_t>(j, "moe_layer_freq", 1, where) == 1, UnsupportedError, "[", where,
                "] moe_layer_freq != 1 (MoE every n-th layer) has no MaxText equivalent");
  c.first_num_dense_layers = hf_get_or<std::int64_t>(j, "first_k_dense_replace", 0, where);
  c.base_moe_mlp_dim = hf_get<std::int64_t>(j, "moe_intermediate_size", where);
  c.num_experts = hf_get<std::int64_t>(j, "n_routed_experts", where);
  c.num_experts_per_tok = hf_get<std::int64_t>(j, "num_experts_per_tok", where);
  c.shared_experts = hf_get_or<std::int64_t>(j, "n_shared_experts", 0, where);
  c.routed_scaling_factor = hf_get_or<double>(j, "routed_scaling_factor", 1.0, where);
  c.q_lora_rank = hf_get_or<std::int64_t>(j, "q_lora_rank", 0, where);
  c.kv_lora_rank = hf_get<std::int64_t>(j, "kv_lora_rank", where);
  c.qk_nope_head_dim = hf_get<std::int64_t>(j, "qk_nope_head_dim", where);
  c.qk_rope_head_dim = hf_get<std::int64_t>(j, "qk_rope_head_dim", where);
  c.v_head_dim = hf_get<std::int64_t>(j, "v_head_dim", where);
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  MAXTEXT_CHECK(!hf_get_or<bool>(j, "attention_bias", false, where), UnsupportedError, "[", where,
                "] attention_bias = true is not part of MLA");

  const std::string score = hf_get_or<std::string>(j, "scoring_func", "softmax", where);
  MAXTEXT_CHECK(score == "softmax" || score == "sigmoid", UnsupportedError, "[", where, "] scoring_func '", score,
                "': expected softmax or sigmoid");
  c.routed_score_func = score;
  const bool norm_topk = hf_get_or<bool>(j, "norm_topk_prob", false, where);
  MAXTEXT_CHECK(norm_topk == (score == "sigmoid"), UnsupportedError, "[", where, "] norm_topk_prob = ", norm_topk,
                " with scoring_func ", score, ": MaxText's DeepSeek routing renormalises exactly the sigmoid scores");
  const std::string method = hf_get_or<std::string>(j, "topk_method", type == "deepseek_v3" ? "noaux_tc" : "greedy", where);
  const std::int64_t n_group = hf_get_or<std::int64_t>(j, "n_group", 1, where);
  const std::int64_t topk_group = hf_get_or<std::int64_t>(j, "topk_group", 1, where);
  if (method == "noaux_tc") {
    MAXTEXT_CHECK(type == "deepseek_v3", UnsupportedError, "[", where, "] topk_method noaux_tc needs deepseek_v3");
    c.routed_bias = true;
    if (n_group > 1) {
      c.n_routing_groups = n_group;
      c.topk_routing_group = topk_group;
    }
  } else if (method == "greedy") {
    MAXTEXT_CHECK(type == "deepseek_v2", UnsupportedError, "[", where,
                  "] topk_method greedy with model_type deepseek_v3 has no MaxText equivalent");
  } else {
    MAXTEXT_THROW(UnsupportedError, "[", where, "] topk_method '", method,
                  "' (max-per-group routing) has no MaxText equivalent; expected noaux_tc (V3) or greedy (V2)");
  }

  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const nlohmann::json& rs = j["rope_scaling"];
    const std::string rtype = hf_get_or<std::string>(rs, "type", hf_get_or<std::string>(rs, "rope_type", "", where), where);
    MAXTEXT_CHECK(rtype == "yarn", UnsupportedError, "[", where, "] rope_scaling type '", rtype, "': expected yarn");
    c.rope_type = "yarn";
    c.rope_factor = hf_get<double>(rs, "factor", where);
    c.original_max_position_embeddings = hf_get<std::int64_t>(rs, "original_max_position_embeddings", where);
    c.beta_fast = hf_get_or<double>(rs, "beta_fast", 32.0, where);
    c.beta_slow = hf_get_or<double>(rs, "beta_slow", 1.0, where);
    const double ms = hf_get_or<double>(rs, "mscale", 1.0, where);
    const double ms_all = hf_get_or<double>(rs, "mscale_all_dim", ms, where);
    MAXTEXT_CHECK(ms == ms_all, UnsupportedError, "[", where, "] rope_scaling mscale (", ms, ") != mscale_all_dim (",
                  ms_all, "): HF would scale cos/sin, which MaxText's YaRN does not");
    c.mscale = ms_all;
    c.max_position_embeddings = hf_get<std::int64_t>(j, "max_position_embeddings", where);
    c.rope_interleave = true;
    c.rope_truncate = true;
    c.rope_attention_scaling = false;
  } else {
    // No rope scaling: default RoPE on the rope lanes, no mscale (max == original positions).
    c.rope_type = "default";
    c.max_position_embeddings = hf_get_or<std::int64_t>(j, "max_position_embeddings", 4096, where);
    c.original_max_position_embeddings = c.max_position_embeddings;
  }
  return c;
}

/// Read config.json (a file, or the directory holding one).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API Config load_hf_deepseek_config(const std::string& path, const std::vector<std::string>& overrides = {}) {
  std::string p = path;
  if (std::filesystem::is_directory(p)) p = (std::filesystem::path(p) / "config.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(p));
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(ConfigError, "[config] ", p, ": not valid JSON: ", e.what());
  }
  Config c = config_from_hf_deepseek(j, p);
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    MAXTEXT_CHECK(eq != std::string::npos && eq > 0, ConfigError, "[config] override '", o, "' must look like key=value");
    c.set(o.substr(0, eq), o.substr(eq + 1));
  }
  c.derive();
  c.validate();
  return c;
}
#else
Config load_hf_deepseek_config(const std::string& path, const std::vector<std::string>& overrides = {});
#endif

// ---- FP8 ------------------------------------------------------------------------------------------------------

/// DeepSeek-V3 FP8 block dequantisation: w [R, C] f8_e4m3 with scale_inv [ceil(R/b), ceil(C/b)] (f32/bf16) ->
/// f32 [R, C], w[r, c] * scale_inv[r / b, c / b] (one f32 product, as DeepSeek's weight_dequant kernel).
inline AnyTensor dequantize_fp8_blocks(const AnyTensor& w, const AnyTensor& scale, std::int64_t block = 128) {
  MAXTEXT_CHECK(w.dtype == DType::f8_e4m3 && w.rank() == 2, IoError, "[fp8] ", w.source,
                ": expected a 2-D f8_e4m3 weight, found ", w.describe());
  const std::int64_t R = w.shape[0], C = w.shape[1];
  const std::int64_t br = (R + block - 1) / block, bc = (C + block - 1) / block;
  MAXTEXT_CHECK(scale.rank() == 2 && scale.shape[0] == br && scale.shape[1] == bc && dtype_is_float(scale.dtype), IoError,
                "[fp8] ", w.source, ": weight_scale_inv: expected a float tensor [", br, ", ", bc, "] for weight [", R,
                ", ", C, "] with ", block, "x", block, " blocks, found ", scale.describe());
  Tensor<float, 2> s = io::to_matrix<float>(scale, {0, 1}, 1);
  Tensor<float, 2> out({R, C});
  const auto* src = reinterpret_cast<const fp8_e4m3*>(w.data);
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t c = 0; c < C; ++c) {
      const fp8_e4m3 v = src[r * w.strides[0] + c * w.strides[1]];
      out(r, c) = static_cast<float>(v) * s(r / block, c / block);
    }
  }
  AnyTensor a = AnyTensor::from(out, w.source + " (dequantised)");
  return a;
}

/// Replace every f8_e4m3 `X.weight` by its f32 dequantisation with `X.weight_scale_inv` (consumed).
inline TensorMap dequantize_fp8_checkpoint(const TensorMap& in, std::int64_t block = 128) {
  TensorMap out;
  out.metadata = in.metadata;
  std::set<std::string> scales_used;
  for (const auto& [name, t] : in.tensors) {
    if (t.dtype != DType::f8_e4m3) continue;
    const std::string sname = name + "_scale_inv";
    auto it = in.tensors.find(sname);
    MAXTEXT_CHECK(it != in.tensors.end(), IoError, "[fp8] ", name, " is f8_e4m3 but ", sname,
                  " (its block scales) is missing");
    scales_used.insert(sname);
  }
  for (const auto& [name, t] : in.tensors) {
    if (scales_used.count(name)) continue;
    if (t.dtype == DType::f8_e4m3) {
      out.add(name, dequantize_fp8_blocks(t, in.tensors.at(name + "_scale_inv"), block));
    } else {
      out.add(name, t);
    }
  }
  return out;
}

// ---- names ----------------------------------------------------------------------------------------------------

namespace detail {

/// [out, in] -> [in, out] view.
inline AnyTensor hf_t(const AnyTensor& t) { return t.permuted({1, 0}); }

/// HF [heads*h, in] -> MaxText [in, heads, h] view.
inline AnyTensor hf_heads_out(const AnyTensor& t, std::int64_t heads) {
  MAXTEXT_CHECK(t.rank() == 2 && t.shape[0] % heads == 0, ShapeError, "[hf] ", t.source, ": ", t.describe(),
                " cannot be split into ", heads, " heads");
  return t.reshaped({heads, t.shape[0] / heads, t.shape[1]}).permuted({2, 0, 1});
}
/// HF o_proj [out, heads*h] -> MaxText [heads, h, out] view.
inline AnyTensor hf_heads_in(const AnyTensor& t, std::int64_t heads) {
  MAXTEXT_CHECK(t.rank() == 2 && t.shape[1] % heads == 0, ShapeError, "[hf] ", t.source, ": ", t.describe(),
                " cannot be split into ", heads, " heads");
  return t.reshaped({t.shape[0], heads, t.shape[1] / heads}).permuted({1, 2, 0});
}

/// A host tensor [n, R, C] of element type T holding `parts` (each [R, C], any dtype) converted to T.
template <class T>
AnyTensor stack_as(const std::vector<const AnyTensor*>& parts, const std::string& source) {
  const std::int64_t R = parts[0]->shape[0], C = parts[0]->shape[1];
  Tensor<T, 3> out({static_cast<std::int64_t>(parts.size()), R, C});
  for (std::size_t e = 0; e < parts.size(); ++e) {
    const Tensor<T, 2> m = io::to_matrix<T>(*parts[e], {0, 1}, 1);
    std::memcpy(static_cast<void*>(out.data() + static_cast<std::int64_t>(e) * R * C), m.data(),
                static_cast<std::size_t>(R * C) * sizeof(T));
  }
  return AnyTensor::from(out, source);
}

/// Stack HF expert matrices [F_out, F_in] into MaxText's [E, F_in, F_out] (a transposed view of an [E, out, in]
/// buffer in the experts' dtype, so the model adopts it without another copy).
inline AnyTensor hf_stack_experts(const TensorMap& in, const std::string& prefix, const std::string& suffix,
                                  std::int64_t E, std::vector<std::string>& consumed) {
  std::vector<const AnyTensor*> parts;
  for (std::int64_t e = 0; e < E; ++e) {
    const std::string n = prefix + std::to_string(e) + suffix;
    auto it = in.tensors.find(n);
    MAXTEXT_CHECK(it != in.tensors.end(), IoError, "[hf] missing expert tensor ", n, " (", E, " experts expected)");
    MAXTEXT_CHECK(it->second.rank() == 2, ShapeError, "[hf] ", n, ": expected a matrix, found ", it->second.describe());
    MAXTEXT_CHECK(parts.empty() || it->second.shape == parts[0]->shape, ShapeError, "[hf] ", n, ": expected shape ",
                  parts[0]->shape, " like expert 0, found ", it->second.shape);
    parts.push_back(&it->second);
    consumed.push_back(n);
  }
  const std::string src = prefix + "*" + suffix;
  AnyTensor s;
  bool same = true;
  for (auto* p : parts) same = same && p->dtype == parts[0]->dtype;
  const DType dt = same ? parts[0]->dtype : DType::f32;
  if (dt == DType::bf16) {
    s = stack_as<bf16>(parts, src);
  } else if (dt == DType::f16) {
    s = stack_as<fp16>(parts, src);
  } else {
    s = stack_as<float>(parts, src);
  }
  return s.permuted({0, 2, 1});
}

/// Whether two tensors of the same shape and type hold the same bytes: a 1-D tensor whole, a matrix in 16 rows spread
/// over it (a repeated head or embedding is checked without reading it all).
inline bool hf_same_rows(const AnyTensor& a, const AnyTensor& b) {
  if (a.shape != b.shape || a.dtype != b.dtype || dtype_block(a.dtype) != 1 || a.dtype == DType::ggml ||
      !a.is_contiguous() || !b.is_contiguous()) {
    return false;
  }
  const auto* pa = reinterpret_cast<const unsigned char*>(a.data);
  const auto* pb = reinterpret_cast<const unsigned char*>(b.data);
  const std::size_t bytes = static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype);
  if (a.shape.size() < 2) return std::memcmp(pa, pb, bytes) == 0;
  const auto rows = static_cast<std::size_t>(a.shape[0]), row = bytes / std::max<std::size_t>(rows, 1);
  for (std::size_t i = 0; i < 16; ++i) {
    const std::size_t r = rows * i / 16;
    if (std::memcmp(pa + r * row, pb + r * row, row) != 0) return false;
  }
  return true;
}

/// A next-n (MTP) layer's own copies of the final norm, head and embedding (`layer` + each pair's first name), where
/// the file has them, must repeat the model's (the pair's second name): MaxText's MTP block shares those. Returns the
/// names checked, which the caller marks as read.
inline std::vector<std::string> check_nextn_shared(const TensorMap& in, const std::string& layer,
                                                   std::initializer_list<std::pair<const char*, const char*>> shared,
                                                   const std::string& where) {
  std::vector<std::string> checked;
  for (const auto& [own, main] : shared) {
    const std::string name = layer + own;
    if (!in.has(name)) continue;
    MAXTEXT_CHECK(in.has(main) && hf_same_rows(in.tensors.at(name), in.tensors.at(main)), UnsupportedError, "[",
                  where, "] ", name, " differs from ", main, ": MaxText's MTP block shares the model's final norm, "
                  "head and embedding, and cannot take a next-n layer with its own");
    checked.push_back(name);
  }
  return checked;
}

/// query / sqrt(head_dim) in f32, rounded back to the file's dtype (param_mapping.py scale_query_layer).
inline AnyTensor hf_scaled_query(const AnyTensor& t, std::int64_t head_dim) {
  const float f = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const std::int64_t R = t.shape[0], C = t.shape[1];
  auto scale = [&](auto tag) {
    using T = decltype(tag);
    Tensor<T, 2> m = io::to_matrix<T>(t, {0, 1}, 1);
    for (std::int64_t i = 0; i < R * C; ++i) m.data()[i] = from_float<T>(to_float(m.data()[i]) * f);
    return AnyTensor::from(m, t.source + " (/sqrt(head_dim))");
  };
  if (t.dtype == DType::bf16) return scale(bf16{});
  if (t.dtype == DType::f16) return scale(fp16{});
  return scale(float{});
}

}  // namespace detail

/// Map a Hugging Face DeepSeek-V2/V3 or Mixtral checkpoint (FP8 weights already dequantised, or dequantised here)
/// to canonical MaxText names (unscanned). HF layer i becomes dense_layers_i for i < first_k_dense_replace and
/// moe_layers_{i - first_k_dense_replace} after (DeepSeek), layers_i (Mixtral). Layers >= num_hidden_layers
/// (DeepSeek-V3's multi-token-prediction layer) and rotary inv_freq buffers are dropped; any other unknown name is
/// passed through unchanged, so the model's loader reports it.
inline TensorMap canonicalize_hf_deepseek(const TensorMap& raw, const Config& cfg) {
  bool has_fp8 = false;
  for (const auto& [n, t] : raw.tensors) has_fp8 = has_fp8 || t.dtype == DType::f8_e4m3;
  const TensorMap in = has_fp8 ? dequantize_fp8_checkpoint(raw) : raw;
  const bool ds = cfg.is("deepseek");
  MAXTEXT_CHECK(ds || cfg.is("mixtral"), ConfigError, "[hf] canonicalize_hf_deepseek: decoder_block '", cfg.decoder_block,
                "' is neither deepseek nor mixtral");
  const std::int64_t L = cfg.num_decoder_layers, N = cfg.num_query_heads, K = cfg.num_kv_heads, E = cfg.num_experts;
  const std::int64_t first = ds ? cfg.first_num_dense_layers : L;
  TensorMap out;
  out.metadata = in.metadata;
  std::vector<std::string> consumed;
  auto take = [&](const std::string& hf, const std::string& mt, auto&& fn) {
    auto it = in.tensors.find(hf);
    if (it == in.tensors.end()) return;  // absent: the model's loader reports the MaxText name as missing
    out.add(mt, fn(it->second));
    consumed.push_back(hf);
  };
  auto same = [](const AnyTensor& t) { return t; };
  auto tr = [](const AnyTensor& t) { return detail::hf_t(t); };
  take("model.embed_tokens.weight", "token_embedder.embedding", same);
  take("model.norm.weight", "decoder.decoder_norm.scale", same);
  take("lm_head.weight", "decoder.logits_dense.kernel", tr);
  // HF layer prefix h to MaxText prefix m; `dense`: DeepSeek's dense MLP (the first first_k_dense_replace layers).
  auto map_layer = [&](const std::string& h, const std::string& m, bool dense) {
    take(h + "input_layernorm.weight", m + "pre_self_attention_layer_norm.scale", same);
    take(h + "post_attention_layernorm.weight", m + "post_self_attention_layer_norm.scale", same);
    const std::string a = m + "self_attention.";
    if (ds) {
      take(h + "self_attn.q_a_proj.weight", a + "wq_a.kernel", tr);
      take(h + "self_attn.q_a_layernorm.weight", a + "q_norm.scale", same);
      take(h + "self_attn.q_b_proj.weight", a + "wq_b.kernel", [&](const AnyTensor& t) { return detail::hf_heads_out(t, N); });
      take(h + "self_attn.q_proj.weight", a + "query.kernel", [&](const AnyTensor& t) { return detail::hf_heads_out(t, N); });
      take(h + "self_attn.kv_a_proj_with_mqa.weight", a + "wkv_a.kernel", tr);
      take(h + "self_attn.kv_a_layernorm.weight", a + "kv_norm.scale", same);
      take(h + "self_attn.kv_b_proj.weight", a + "wkv_b.kernel", [&](const AnyTensor& t) { return detail::hf_heads_out(t, N); });
      take(h + "self_attn.o_proj.weight", a + "out.kernel", [&](const AnyTensor& t) { return detail::hf_heads_in(t, N); });
      if (dense) {
        take(h + "mlp.gate_proj.weight", m + "mlp.wi_0.kernel", tr);
        take(h + "mlp.up_proj.weight", m + "mlp.wi_1.kernel", tr);
        take(h + "mlp.down_proj.weight", m + "mlp.wo.kernel", tr);
      } else {
        const std::string b = m + "DeepSeekMoeBlock_0.";
        take(h + "mlp.gate.weight", b + "MoeBlock_0.gate.kernel", tr);
        take(h + "mlp.gate.e_score_correction_bias", b + "MoeBlock_0.gate.bias", same);
        take(h + "mlp.shared_experts.gate_proj.weight", b + "shared_experts.wi_0.kernel", tr);
        take(h + "mlp.shared_experts.up_proj.weight", b + "shared_experts.wi_1.kernel", tr);
        take(h + "mlp.shared_experts.down_proj.weight", b + "shared_experts.wo.kernel", tr);
        if (in.has(h + "mlp.experts.0.gate_proj.weight")) {
          const std::string ex = h + "mlp.experts.";
          out.add(b + "MoeBlock_0.wi_0", detail::hf_stack_experts(in, ex, ".gate_proj.weight", E, consumed));
          out.add(b + "MoeBlock_0.wi_1", detail::hf_stack_experts(in, ex, ".up_proj.weight", E, consumed));
          out.add(b + "MoeBlock_0.wo", detail::hf_stack_experts(in, ex, ".down_proj.weight", E, consumed));
        }
      }
    } else {
      take(h + "self_attn.q_proj.weight", a + "query.kernel", [&](const AnyTensor& t) {
        const AnyTensor s = detail::hf_scaled_query(t, cfg.head_dim);
        return detail::hf_heads_out(s, N);
      });
      take(h + "self_attn.k_proj.weight", a + "key.kernel", [&](const AnyTensor& t) { return detail::hf_heads_out(t, K); });
      take(h + "self_attn.v_proj.weight", a + "value.kernel", [&](const AnyTensor& t) { return detail::hf_heads_out(t, K); });
      take(h + "self_attn.o_proj.weight", a + "out.kernel", [&](const AnyTensor& t) { return detail::hf_heads_in(t, N); });
      take(h + "block_sparse_moe.gate.weight", m + "MoeBlock_0.gate.kernel", tr);
      if (in.has(h + "block_sparse_moe.experts.0.w1.weight")) {
        const std::string ex = h + "block_sparse_moe.experts.";
        out.add(m + "MoeBlock_0.wi_0", detail::hf_stack_experts(in, ex, ".w1.weight", E, consumed));
        out.add(m + "MoeBlock_0.wi_1", detail::hf_stack_experts(in, ex, ".w3.weight", E, consumed));
        out.add(m + "MoeBlock_0.wo", detail::hf_stack_experts(in, ex, ".w2.weight", E, consumed));
      }
    }
  };
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string m = ds ? (i < first ? "decoder.dense_layers_" + std::to_string(i) + "."
                                          : "decoder.moe_layers_" + std::to_string(i - first) + ".")
                             : "decoder.layers_" + std::to_string(i) + ".";
    map_layer("model.layers." + std::to_string(i) + ".", m, i < first);
  }
  // DeepSeek-V3's next-n (MTP) layers, stored after the decoder's as model.layers.{L + k - 1}: enorm / hnorm / eh_proj
  // and an MoE layer, as MaxText's mtp_block.mtp_layer_{k} (whose layer is the model's last kind). Their
  // shared_head.norm / shared_head.head / embed_tokens repeat the model's final norm, head and embedding, which
  // MaxText's MTP block shares: checked equal (the norm whole, 16 spread rows of the head and embedding), not loaded.
  for (std::int64_t k = 1; k <= cfg.mtp_num_layers; ++k) {
    const std::string h = "model.layers." + std::to_string(L + k - 1) + ".";
    const std::string m = "mtp_block.mtp_layer_" + std::to_string(k) + ".mtp_" + std::to_string(k) + "_";
    MAXTEXT_CHECK(ds && in.has(h + "eh_proj.weight"), ConfigError, "[hf] mtp_num_layers = ", cfg.mtp_num_layers,
                  " (config.json's num_nextn_predict_layers) but the checkpoint holds no ", h,
                  "eh_proj.weight: it carries no next-n (MTP) layer ", k, "; set mtp_num_layers=0 to run without");
    take(h + "enorm.weight", m + "embedding_norm.scale", same);
    take(h + "hnorm.weight", m + "hidden_state_norm.scale", same);
    take(h + "eh_proj.weight", m + "projection.kernel", tr);
    map_layer(h, m + "transformer_layer.", false);
    const std::vector<std::string> checked = detail::check_nextn_shared(
        in, h, {{"shared_head.norm.weight", "model.norm.weight"}, {"shared_head.head.weight", "lm_head.weight"},
                {"embed_tokens.weight", "model.embed_tokens.weight"}}, "hf");
    consumed.insert(consumed.end(), checked.begin(), checked.end());
  }
  const std::set<std::string> used(consumed.begin(), consumed.end());
  for (const auto& [name, t] : in.tensors) {
    if (used.count(name)) continue;
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (name.rfind("model.layers.", 0) == 0) {
      // Layers past num_hidden_layers not taken above (mtp_num_layers = 0): DeepSeek-V3's next-n layers, not loaded.
      const std::size_t dot = name.find('.', 13);
      try {
        if (std::stoll(name.substr(13, dot - 13)) >= L) continue;
      } catch (const std::exception&) {
      }
    }
    out.add(name, t);  // unknown: reported by the model's loader as an unexpected tensor
  }
  return out;
}

}  // namespace maxtext::io
