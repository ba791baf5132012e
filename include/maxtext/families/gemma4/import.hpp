// families/gemma4/import.hpp: Hugging Face Gemma 4 checkpoints (model_type gemma4 with a text_config, or gemma4_text; the text
// model) -> MaxText's gemma4 config and parameter names.
//
// The mapping is MaxText's own converter's (checkpoint_conversion/utils/param_mapping.py
// GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks, hf_model_configs.py gemma4_26b / gemma4_31b; MaxText e591f30):
//   model[.language_model].embed_tokens.weight * float32(sqrt(hidden_size)), rounded back to the file's type
//                                                   -> token_embedder.embedding
//   norms (input_layernorm, post_attention_layernorm, pre/post_feedforward_layernorm, q_norm, k_norm, the final norm,
//   and the MoE branches' pre_feedforward_layernorm_2, post_feedforward_layernorm_1/_2): as stored (no 1 + w)
//   self_attn.{q,k,v}_proj [heads*H, D] -> [D, heads, H]; o_proj [D, N*H] -> [N, H, D]; global layers use
//   num_global_key_value_heads / global_head_dim, and with attention_k_eq_v have no v_proj
//   mlp.{gate,up,down}_proj -> mlp.wi_0 / wi_1 / wo (dense layers) or mlp.moe_block.shared_experts.* (MoE layers)
//   router.proj.weight [E, D] -> mlp.moe_block.MoeBlock_0.gate.kernel; router.scale -> mlp.pre_forward_scale_2;
//   router.per_expert_scale -> ...MoeBlock_0.per_expert_scale; experts.gate_up_proj [E, 2F, D] -> wi_0 / wi_1 [E, D, F]
//   (the halves); experts.down_proj [E, D, F] -> wo [E, F, D]; layer_scalar as stored.
// Gemma 4's small models (E2B / E4B: hidden_size_per_layer_input, num_kv_shared_layers or use_double_wide_mlp set)
// become MaxText's gemma4_small block, with GEMMA4_SMALL_MAXTEXT_TO_HF_PARAM_MAPPING:
//   embed_tokens_per_layer.weight [V_ple, L*Dp]  -> decoder.per_layer_embedder.embed_tokens_per_layer (as stored)
//   per_layer_model_projection.weight [L*Dp, D]  -> decoder.per_layer_embedder.per_layer_model_projection.kernel
//   per_layer_projection_norm.weight             -> decoder.per_layer_embedder.per_layer_projection_norm.scale
//   layers.i.per_layer_input_gate / per_layer_projection (transposed), post_per_layer_input_norm (as stored)
//   the KV-shared layers read no k_proj / v_proj / k_norm (a file may still hold them: they are skipped).
// model_name is gemma4-e2b when layer_types repeat every 5 layers (MaxText picks that pattern by name), else gemma4-e4b.
// The vision and audio towers are not read.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/json_fields.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// True for a Gemma 4 config.json (model_type gemma4, or gemma4_text for the text model alone).
inline bool is_hf_gemma4(const nlohmann::json& j) {
  const std::string t = j.is_object() ? j.value("model_type", std::string()) : std::string();
  return t == "gemma4" || t == "gemma4_text";
}

namespace detail {

/// What every Gemma 4 config shares, whatever file it comes from.
inline void base_gemma4_config(Config& c, bool small) {
  c.decoder_block = small ? "gemma4_small" : "gemma4";
  c.model_name = "gemma4-hf";  // MaxText selects Gemma4PartialRotaryEmbedding by a gemma4* model name
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.logits_via_embedding = true;
  c.normalize_embedding_logits = true;
  c.scan_layers = false;
  c.enable_dropout = false;
  c.use_post_attn_norm = true;
  c.use_post_ffw_norm = true;
  c.v_norm_with_scale = false;  // the v norm has no weight (MaxText maps one only with v_norm_with_scale)
  c.mlp_activations = {"gelu", "linear"};
}

}  // namespace detail

/// A Config from a Hugging Face Gemma 4 config.json (the text part).
inline Config config_from_hf_gemma4(const nlohmann::json& top, const std::string& where) {
  const bool multimodal = top.value("model_type", std::string()) == "gemma4";
  MAXTEXT_CHECK(!multimodal || (top.contains("text_config") && top["text_config"].is_object()), IoError, "[hf] ", where,
                ": model_type gemma4 needs a text_config object");
  const nlohmann::json& j = multimodal ? top["text_config"] : top;
  const std::string w = where + (multimodal ? ": text_config" : "");
  const detail::JsonFields f(j, w);
  Config c;
  // Gemma 4 E2B / E4B: per-layer inputs and KV sharing (MaxText's gemma4_small block).
  const bool small = f.integer("hidden_size_per_layer_input", 0) > 0 || f.integer("num_kv_shared_layers", 0) > 0 ||
                     f.boolean("use_double_wide_mlp", false);
  detail::base_gemma4_config(c, small);
  if (small) {
    c.hidden_size_per_layer_input = f.integer("hidden_size_per_layer_input", 0);
    c.vocab_size_per_layer_input = f.integer("vocab_size_per_layer_input", 0, c.hidden_size_per_layer_input > 0);
    c.num_kv_shared_layers = f.integer("num_kv_shared_layers", 0);
    c.use_double_wide_mlp = f.boolean("use_double_wide_mlp", false);
    // gemma4_small.py builds its attention without share_kv_projections, and has no MoE block.
    MAXTEXT_CHECK(!f.boolean("attention_k_eq_v", false), UnsupportedError, "[hf] ", w, ": attention_k_eq_v = true in a "
                  "Gemma 4 small model (per-layer inputs / KV sharing): MaxText's gemma4_small has no K = V layers");
    MAXTEXT_CHECK(!f.boolean("enable_moe_block", false), UnsupportedError, "[hf] ", w, ": enable_moe_block = true in a "
                  "Gemma 4 small model: MaxText's gemma4_small has no MoE");
  }
  MAXTEXT_CHECK(!f.boolean("attention_bias", false), UnsupportedError, "[hf] ", w, ": attention_bias = true is not supported");
  MAXTEXT_CHECK(detail::JsonFields(top, where).boolean("tie_word_embeddings", true) && f.boolean("tie_word_embeddings", true),
                UnsupportedError, "[hf] ",
                w, ": tie_word_embeddings = false: MaxText's Gemma 4 always ties the output head to the embedding");
  const std::string act = j.value("hidden_activation", std::string("gelu_pytorch_tanh"));
  MAXTEXT_CHECK(act == "gelu_pytorch_tanh", UnsupportedError, "[hf] ", w, ": hidden_activation '", act,
                "' is not supported (gelu_pytorch_tanh)");
  c.base_emb_dim = f.integer("hidden_size", 0, true);
  c.base_mlp_dim = f.integer("intermediate_size", 0, true);
  c.base_num_decoder_layers = f.integer("num_hidden_layers", 0, true);
  c.base_num_query_heads = f.integer("num_attention_heads", 0, true);
  c.base_num_kv_heads = f.integer("num_key_value_heads", c.base_num_query_heads);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_num_decoder_layers > 0 &&
                    c.base_num_decoder_layers <= Config::Limits::layers,
                IoError, "[hf] ", w, ": num_attention_heads must be > 0 and num_hidden_layers in [1, ",
                Config::Limits::layers, "], found ", c.base_num_query_heads, " and ", c.base_num_decoder_layers);
  c.head_dim = f.integer("head_dim", c.base_emb_dim / c.base_num_query_heads);
  c.global_head_dim = f.integer("global_head_dim", 0);
  c.global_num_kv_heads = f.integer("num_global_key_value_heads", 0);
  c.share_kv_projections = f.boolean("attention_k_eq_v", false);
  c.vocab_size = f.integer("vocab_size", 0, true);
  c.normalization_layer_epsilon = f.number("rms_norm_eps", 1e-6);
  c.sliding_window_size = f.integer("sliding_window", 0, true);
  c.attn_logits_soft_cap = f.number("attn_logit_softcapping", 0.0);
  c.final_logits_soft_cap = f.number("final_logit_softcapping", 0.0);
  if (f.present("max_position_embeddings")) c.max_target_length = f.integer("max_position_embeddings", 0);
  // layer_types: MaxText fixes GEMMA4_ATTENTION_PATTERN (five sliding, one full) by layer index; gemma4_small picks
  // GEMMA4_E2B_ATTENTION_PATTERN (four sliding, one full) for model_name gemma4-e2b.
  std::size_t period = 6;
  if (f.present("layer_types")) {
    const auto& lt = j["layer_types"];
    MAXTEXT_CHECK(lt.is_array() && static_cast<std::int64_t>(lt.size()) == c.base_num_decoder_layers, IoError, "[hf] ", w,
                  ": layer_types: expected a list of ", c.base_num_decoder_layers, " entries");
    if (small && lt.size() >= 5 && lt[4] == "full_attention") {
      period = 5;
      c.model_name = "gemma4-e2b";
    } else if (small) {
      c.model_name = "gemma4-e4b";
    }
    for (std::size_t i = 0; i < lt.size(); ++i) {
      const std::string want = i % period == period - 1 ? "full_attention" : "sliding_attention";
      MAXTEXT_CHECK(lt[i].is_string() && lt[i].get<std::string>() == want, UnsupportedError, "[hf] ", w, ": layer_types[",
                    i, "] is ", lt[i].dump(), ": MaxText's Gemma 4 fixes ", period - 1, " sliding-window layers then "
                    "one global (layer i is \"", want, "\")");
    }
  } else if (small) {
    c.model_name = "gemma4-e4b";  // gemma4_small's default pattern
  }
  // rope_parameters: per attention type; global layers "proportional" (Gemma4PartialRotaryEmbedding).
  MAXTEXT_CHECK(f.present("rope_parameters") && j["rope_parameters"].is_object(), IoError, "[hf] ", w,
                ": config.json needs rope_parameters (full_attention and sliding_attention)");
  auto rope = [&](const char* kind, const char* type) {
    const auto& rp = j["rope_parameters"];
    MAXTEXT_CHECK(rp.contains(kind) && rp[kind].is_object(), IoError, "[hf] ", w, ": rope_parameters.", kind, " is missing");
    const detail::JsonFields r(rp[kind], w + ": rope_parameters." + kind);
    const std::string t = rp[kind].value("rope_type", std::string("default"));
    MAXTEXT_CHECK(t == type, UnsupportedError, "[hf] ", w, ": rope_parameters.", kind, ".rope_type '", t,
                  "' is not supported (MaxText's Gemma 4: ", type, ")");
    return std::pair<double, double>{r.number("rope_theta", 0.0), r.number("partial_rotary_factor", 1.0)};
  };
  const auto [global_theta, global_prop] = rope("full_attention", "proportional");
  const auto [local_theta, local_prop] = rope("sliding_attention", "default");
  MAXTEXT_CHECK(global_theta > 0 && local_theta > 0, IoError, "[hf] ", w, ": rope_theta must be > 0, found ", global_theta,
                " (full_attention) and ", local_theta, " (sliding_attention)");
  c.rope_max_timescale = global_theta;
  c.global_rope_max_timescale = global_theta;
  c.global_rope_proportion = global_prop;
  c.local_rope_max_timescale = local_theta;
  c.local_rope_proportion = local_prop;
  if (f.boolean("enable_moe_block", false)) {
    c.num_experts = f.integer("num_experts", 0, true);
    c.num_experts_per_tok = f.integer("top_k_experts", 0, true);
    c.base_moe_mlp_dim = f.integer("moe_intermediate_size", 0, true);
    c.shared_experts = 1;
    c.norm_topk_prob = true;  // gemma4-26b.yml
  }
  c.derive();
  return c;
}

namespace detail {

/// Where a Gemma 4 file keeps each tensor: the global names, and per layer a prefix plus each tensor's own suffix
/// (projection names without ".weight"). Hugging Face's names (gemma4_hf_names) and llama.cpp's
/// (gemma4_gguf_names) fill it; import_gemma4 maps either to MaxText's.
struct Gemma4Names {
  std::string family, embed, final_norm, ple_embed, ple_projection, ple_norm;
  std::string layer_prefix;  ///< prefix + layer index + "."
  std::string input_norm, post_attn_norm, pre_ffw_norm, post_ffw_norm, q, k, v, o, q_norm, k_norm, layer_scalar;
  std::string ple_gate, ple_proj, ple_post_norm, gate, up, down;
  std::string router, router_scale, per_expert_scale, pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2;
  std::string gate_up_experts;                 ///< [E, 2F, D], gate rows first
  std::string gate_experts, up_experts;        ///< the same as two [E, F, D] tensors (GGUF only; empty: none)
  std::string down_experts;                    ///< [E, D, F]
  std::vector<std::string> ignorable;          ///< tensors the text model does not read (prefixes)
  std::vector<std::string> kv_shared_unread;   ///< suffixes a KV-shared layer may hold but does not read
};

/// Hugging Face's Gemma 4 names; `root` is "model.language_model." (multimodal files) or "model.".
inline Gemma4Names gemma4_hf_names(const std::string& root) {
  Gemma4Names n;
  n.family = "Gemma 4";
  n.embed = root + "embed_tokens.weight";
  n.final_norm = root + "norm.weight";
  n.ple_embed = root + "embed_tokens_per_layer.weight";
  n.ple_projection = root + "per_layer_model_projection.weight";
  n.ple_norm = root + "per_layer_projection_norm.weight";
  n.layer_prefix = root + "layers.";
  n.input_norm = "input_layernorm.weight";
  n.post_attn_norm = "post_attention_layernorm.weight";
  n.pre_ffw_norm = "pre_feedforward_layernorm.weight";
  n.post_ffw_norm = "post_feedforward_layernorm.weight";
  n.q = "self_attn.q_proj";
  n.k = "self_attn.k_proj";
  n.v = "self_attn.v_proj";
  n.o = "self_attn.o_proj";
  n.q_norm = "self_attn.q_norm.weight";
  n.k_norm = "self_attn.k_norm.weight";
  n.layer_scalar = "layer_scalar";
  n.ple_gate = "per_layer_input_gate.weight";
  n.ple_proj = "per_layer_projection.weight";
  n.ple_post_norm = "post_per_layer_input_norm.weight";
  n.gate = "mlp.gate_proj.weight";
  n.up = "mlp.up_proj.weight";
  n.down = "mlp.down_proj.weight";
  n.router = "router.proj.weight";
  n.router_scale = "router.scale";
  n.per_expert_scale = "router.per_expert_scale";
  n.pre_ffw_norm_2 = "pre_feedforward_layernorm_2.weight";
  n.post_ffw_norm_1 = "post_feedforward_layernorm_1.weight";
  n.post_ffw_norm_2 = "post_feedforward_layernorm_2.weight";
  n.gate_up_experts = "experts.gate_up_proj";
  n.down_experts = "experts.down_proj";
  // A tied head may also be stored; MaxText's Gemma 4 always uses the embedding.
  n.ignorable = {"lm_head.weight", root + "rotary_emb.", "model.vision_tower.", "model.embed_vision.",
                 "model.audio_tower.", "model.embed_audio."};
  n.kv_shared_unread = {"self_attn.k_proj.", "self_attn.v_proj.", "self_attn.k_norm.", "self_attn.v_norm."};
  return n;
}

/// Gemma 4 tensors named by `names` -> MaxText gemma4 / gemma4_small names (see the file comment).
inline TensorMap import_gemma4(const TensorMap& in, const Config& cfg, const Gemma4Names& names, const std::string& what) {
  detail::NameMapper imp(in, cfg, what, names.family);
  const bool small = cfg.is("gemma4_small");
  // The attention pattern and KV-shared layers as families/gemma4/gemma4_small.hpp (and families/gemma4/gemma4.hpp) define them.
  const std::int64_t period = small && cfg.model_name == "gemma4-e2b" ? 5 : 6;
  const std::int64_t first_shared =
      small && cfg.num_kv_shared_layers > 0 ? std::max<std::int64_t>(0, cfg.num_decoder_layers - cfg.num_kv_shared_layers)
                                            : cfg.num_decoder_layers;
  const bool ple = small && cfg.hidden_size_per_layer_input > 0;
  std::vector<std::string> skipped = names.ignorable;
  if (ple) {
    const std::string p = "decoder.per_layer_embedder.";
    imp.same(names.ple_embed, p + "embed_tokens_per_layer");
    imp.dense(names.ple_projection, p + "per_layer_model_projection.kernel");
    imp.same(names.ple_norm, p + "per_layer_projection_norm.scale");
  }
  const std::int64_t D = cfg.emb_dim, N = cfg.num_query_heads, E = cfg.num_experts, F = cfg.moe_mlp_dim;
  if (const AnyTensor* t = imp.get(names.embed)) {
    // pad_hf_embedding_layer: table * float32(sqrt(hidden_size)), cast back to the file's dtype.
    imp.check(*t, 2, names.embed);
    const float s = static_cast<float>(std::sqrt(static_cast<double>(cfg.emb_dim)));
    Tensor<float, 2> e({t->shape[0], t->shape[1]});
    const bool bf = t->dtype == DType::bf16, half = t->dtype == DType::f16;
    for (std::int64_t i = 0; i < e.size(); ++i) {
      const float v = static_cast<float>(t->element(i)) * s;
      e.data()[i] = bf ? round_to<bf16>(v) : half ? round_to<fp16>(v) : v;
    }
    imp.put("token_embedder.embedding", AnyTensor::from(e, t->source), names.embed);
  }
  imp.same(names.final_norm, "decoder.decoder_norm.scale");
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string h = names.layer_prefix + std::to_string(i) + ".", m = "decoder.layers_" + std::to_string(i) + ".";
    const bool global = i % period == period - 1;
    const bool shared = i >= first_shared && first_shared > 0;
    const std::int64_t K = global && cfg.global_num_kv_heads > 0 ? cfg.global_num_kv_heads : cfg.num_kv_heads;
    const std::int64_t H = global && cfg.global_head_dim > 0 ? cfg.global_head_dim : cfg.head_dim;
    imp.same(h + names.input_norm, m + "pre_self_attention_norm.scale");
    imp.same(h + names.post_attn_norm, m + "post_self_attention_norm.scale");
    imp.same(h + names.pre_ffw_norm, m + "pre_ffw_norm.scale");
    imp.same(h + names.post_ffw_norm, m + "post_ffw_norm.scale");
    const std::string a = m + "self_attention.";
    imp.head_proj(h + names.q, a + "query", N, false, H);
    if (shared) {  // reads its donor's keys and values
      for (const auto& n : names.kv_shared_unread) skipped.push_back(h + n);
    } else {
      imp.head_proj(h + names.k, a + "key", K, false, H);
      if (!(global && cfg.share_kv_projections && !small)) imp.head_proj(h + names.v, a + "value", K, false, H);
      imp.same(h + names.k_norm, a + "key_norm.scale");
    }
    imp.out_proj(h + names.o, a + "out", false, H);
    imp.same(h + names.q_norm, a + "query_norm.scale");
    imp.same(h + names.layer_scalar, m + "layer_scalar");
    if (ple) {
      imp.dense(h + names.ple_gate, m + "per_layer_input_gate.kernel");
      imp.dense(h + names.ple_proj, m + "per_layer_projection.kernel");
      imp.same(h + names.ple_post_norm, m + "post_per_layer_input_norm.scale");
    }
    const std::string mlp = m + (E > 1 ? "mlp.moe_block.shared_experts." : "mlp.");
    imp.dense(h + names.gate, mlp + "wi_0.kernel");
    imp.dense(h + names.up, mlp + "wi_1.kernel");
    imp.dense(h + names.down, mlp + "wo.kernel");
    if (E <= 1) continue;
    const std::string r = m + "mlp.moe_block.MoeBlock_0.";
    imp.dense(h + names.router, r + "gate.kernel");
    imp.same(h + names.router_scale, m + "mlp.pre_forward_scale_2");
    imp.same(h + names.per_expert_scale, r + "per_expert_scale");
    imp.same(h + names.pre_ffw_norm_2, m + "mlp.pre_feedforward_layernorm_2.scale");
    imp.same(h + names.post_ffw_norm_1, m + "mlp.post_feedforward_layernorm_1.scale");
    imp.same(h + names.post_ffw_norm_2, m + "mlp.post_feedforward_layernorm_2.scale");
    if (!names.gate_experts.empty() && imp.has(h + names.gate_experts)) {  // two [E, F, D] tensors
      if (const AnyTensor* t = imp.get(h + names.gate_experts)) imp.experts(*t, h + names.gate_experts, r + "wi_0", F, D);
      if (const AnyTensor* t = imp.get(h + names.up_experts)) imp.experts(*t, h + names.up_experts, r + "wi_1", F, D);
    } else if (const AnyTensor* t = imp.get(h + names.gate_up_experts)) {
      imp.shape(*t, {E, 2 * F, D}, h + names.gate_up_experts);
      const AnyTensor halves = detail::NameMapper::contiguous(*t).reshaped({E, 2, F, D});
      imp.put(r + "wi_0", halves.select(1, 0).permuted({0, 2, 1}), h + names.gate_up_experts);
      imp.put(r + "wi_1", halves.select(1, 1).permuted({0, 2, 1}), h + names.gate_up_experts);
    }
    if (const AnyTensor* t = imp.get(h + names.down_experts)) {
      imp.shape(*t, {E, D, F}, h + names.down_experts);
      imp.put(r + "wo", t->permuted({0, 2, 1}), h + names.down_experts);
    }
  }
  return imp.finish(skipped);
}

}  // namespace detail

/// Hugging Face Gemma 4 names -> MaxText gemma4 names (see the file comment).
inline TensorMap import_hf_gemma4(const TensorMap& in, const Config& cfg, const std::string& what = "hf") {
  const std::string root = in.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  return detail::import_gemma4(in, cfg, detail::gemma4_hf_names(root), what);
}

/// True for GGUF general.architecture gemma4.
inline bool is_gguf_gemma4(const std::string& arch) { return arch == "gemma4"; }

namespace detail {

/// A per-layer GGUF key (a scalar, or an array with one entry per layer): its value at layer `i`.
inline std::int64_t gguf_layer_int(const GgufFile& g, const std::string& key, std::int64_t i, std::int64_t layers) {
  const GgufValue& v = g.at(key);
  if (!v.is_array()) return v.as_int(g.where(key));
  MAXTEXT_CHECK(static_cast<std::int64_t>(v.ints.size()) == layers, IoError, "[gguf] ", g.path, ": ", key, " has ",
                v.ints.size(), " entries for block_count ", layers);
  return v.ints[static_cast<std::size_t>(i)];
}

/// llama.cpp's Gemma 4 names (src/models/gemma4.cpp; conversion/gemma.py Gemma4Model renames router.scale to
/// ffn_gate_inp.scale and router.per_expert_scale to ffn_down_exps.scale).
inline Gemma4Names gemma4_gguf_names() {
  Gemma4Names n;
  n.family = "Gemma 4 (GGUF)";
  n.embed = "token_embd.weight";
  n.final_norm = "output_norm.weight";
  n.layer_prefix = "blk.";
  n.input_norm = "attn_norm.weight";
  n.post_attn_norm = "post_attention_norm.weight";
  n.pre_ffw_norm = "ffn_norm.weight";
  n.post_ffw_norm = "post_ffw_norm.weight";
  n.q = "attn_q";
  n.k = "attn_k";
  n.v = "attn_v";
  n.o = "attn_output";
  n.q_norm = "attn_q_norm.weight";
  n.k_norm = "attn_k_norm.weight";
  n.layer_scalar = "layer_output_scale.weight";
  n.gate = "ffn_gate.weight";
  n.up = "ffn_up.weight";
  n.down = "ffn_down.weight";
  n.router = "ffn_gate_inp.weight";
  n.router_scale = "ffn_gate_inp.scale";
  n.per_expert_scale = "ffn_down_exps.scale";
  n.pre_ffw_norm_2 = "pre_ffw_norm_2.weight";
  n.post_ffw_norm_1 = "post_ffw_norm_1.weight";
  n.post_ffw_norm_2 = "post_ffw_norm_2.weight";
  n.gate_up_experts = "ffn_gate_up_exps.weight";
  n.gate_experts = "ffn_gate_exps.weight";
  n.up_experts = "ffn_up_exps.weight";
  n.down_experts = "ffn_down_exps.weight";
  n.ignorable = {"rope_freqs.weight"};  // read into the config (config_from_gguf_gemma4)
  return n;
}

}  // namespace detail

/// A Config from the metadata of a llama.cpp `gemma4` GGUF file (its keys, and what its graph fixes: attention scale
/// 1, the v norm without weight, softmax-top-k-renormalised routing). The E2B / E4B models (per-layer inputs, KV
/// sharing, double-wide MLPs) are refused by name: their GGUF layout is not read yet.
inline Config config_from_gguf_gemma4(const GgufFile& g) {
  const std::string p = "gemma4.";
  Config c;
  MAXTEXT_CHECK(g.get_int(p + "embedding_length_per_layer_input", 0) == 0 && g.get_int(p + "attention.shared_kv_layers", 0) == 0,
                UnsupportedError, "[gguf] ", g.path, ": ", p, "embedding_length_per_layer_input / attention.shared_kv_layers "
                "> 0: Gemma 4 E2B / E4B (MaxText's gemma4_small) is read from Hugging Face files, not GGUF yet");
  detail::base_gemma4_config(c, false);
  c.base_emb_dim = g.get_int(p + "embedding_length");
  const std::int64_t L = g.get_int(p + "block_count");
  MAXTEXT_CHECK(L > 0 && L <= Config::Limits::layers, IoError, "[gguf] ", g.path, ": ", p, "block_count ", L,
                " outside [1, ", Config::Limits::layers, "]");
  c.base_num_decoder_layers = L;
  const auto uniform = [&](const std::string& key, bool global) {  // the value on every local / global layer
    std::int64_t v = -1;
    for (std::int64_t i = 0; i < L; ++i) {
      if ((i % 6 == 5) != global) continue;
      const std::int64_t x = detail::gguf_layer_int(g, p + key, i, L);
      MAXTEXT_CHECK(v < 0 || x == v, UnsupportedError, "[gguf] ", g.path, ": ", p, key, " differs between ",
                    global ? "global" : "sliding-window", " layers (", v, " and ", x, " at layer ", i,
                    "): MaxText's Gemma 4 has one value per layer kind");
      v = x;
    }
    return v;
  };
  // The 5 : 1 pattern: MaxText fixes it by layer index (GEMMA4_ATTENTION_PATTERN).
  const std::string pat = p + "attention.sliding_window_pattern";
  MAXTEXT_CHECK(gguf_window_pattern_is(g.at(pat), L, 6, pat), UnsupportedError, "[gguf] ", g.path, ": ", pat,
                " differs from 5 sliding-window layers then 1 global (MaxText's Gemma 4 pattern)");
  const std::int64_t n_local = uniform("attention.head_count", false), n_global = uniform("attention.head_count", true);
  MAXTEXT_CHECK(n_global < 0 || n_local < 0 || n_global == n_local, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "attention.head_count differs between layer kinds: MaxText's Gemma 4 has one query head count");
  c.base_num_query_heads = n_local > 0 ? n_local : n_global;
  c.base_num_kv_heads = uniform("attention.head_count_kv", false);
  const std::int64_t kv_global = uniform("attention.head_count_kv", true);
  if (c.base_num_kv_heads < 0) c.base_num_kv_heads = kv_global;  // fewer than 6 layers: no global layer
  c.global_num_kv_heads = kv_global > 0 ? kv_global : 0;
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_num_kv_heads > 0 && c.base_emb_dim > 0, IoError, "[gguf] ", g.path,
                ": head_count, head_count_kv and embedding_length must be > 0");
  c.head_dim = g.get_int(p + "attention.key_length_swa");
  c.global_head_dim = g.get_int(p + "attention.key_length");
  MAXTEXT_CHECK(g.get_int(p + "attention.value_length_swa", c.head_dim) == c.head_dim &&
                    g.get_int(p + "attention.value_length", c.global_head_dim) == c.global_head_dim,
                UnsupportedError, "[gguf] ", g.path, ": ", p, "attention.value_length(_swa) differs from key_length(_swa)");
  const std::int64_t ff0 = detail::gguf_layer_int(g, p + "feed_forward_length", 0, L);
  for (std::int64_t i = 1; i < L; ++i) {
    MAXTEXT_CHECK(detail::gguf_layer_int(g, p + "feed_forward_length", i, L) == ff0, UnsupportedError, "[gguf] ", g.path,
                  ": ", p, "feed_forward_length differs between layers (layer ", i, "): double-wide MLPs are gemma4_small's");
  }
  c.base_mlp_dim = ff0;
  c.normalization_layer_epsilon = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6);
  c.sliding_window_size = g.get_int(p + "attention.sliding_window");
  c.final_logits_soft_cap = g.get_float(p + "final_logit_softcapping", 0.0);
  MAXTEXT_CHECK(g.get_float(p + "attn_logit_softcapping", 0.0) == 0.0, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "attn_logit_softcapping: Gemma 4 has no attention soft cap");
  // RoPE: global layers proportional (rope_freqs.weight marks the unrotated pairs with 1e30), local ones whole-head.
  c.global_rope_max_timescale = g.get_float(p + "rope.freq_base", 1000000.0);
  c.rope_max_timescale = c.global_rope_max_timescale;
  c.local_rope_max_timescale = g.get_float(p + "rope.freq_base_swa", c.global_rope_max_timescale);
  MAXTEXT_CHECK(g.get_string(p + "rope.scaling.type", "none") == "none", UnsupportedError, "[gguf] ", g.path, ": ", p,
                "rope.scaling.type '", g.get_string(p + "rope.scaling.type", "none"), "' is not supported");
  MAXTEXT_CHECK(g.get_int(p + "rope.dimension_count", c.global_head_dim) == c.global_head_dim, UnsupportedError,
                "[gguf] ", g.path, ": ", p, "rope.dimension_count ", g.get_int(p + "rope.dimension_count", 0),
                " != key_length ", c.global_head_dim, ": global layers rotate by rope_freqs.weight over the whole head");
  MAXTEXT_CHECK(g.get_int(p + "rope.dimension_count_swa", c.head_dim) == c.head_dim, UnsupportedError, "[gguf] ", g.path,
                ": ", p, "rope.dimension_count_swa ", g.get_int(p + "rope.dimension_count_swa", 0), " != key_length_swa ",
                c.head_dim, ": MaxText's Gemma 4 rotates the whole head of sliding-window layers");
  c.local_rope_proportion = 1.0;
  c.global_rope_proportion = 1.0;
  if (g.tensors.has("rope_freqs.weight")) {
    const AnyTensor& rf = g.tensors.at("rope_freqs.weight");
    const std::int64_t half = c.global_head_dim / 2;
    MAXTEXT_CHECK(rf.numel() == half, IoError, "[gguf] ", g.path, ": rope_freqs.weight has ", rf.numel(),
                  " values, expected key_length / 2 = ", half);
    std::int64_t rotated = 0;
    while (rotated < half && rf.element(rotated) == 1.0) ++rotated;
    for (std::int64_t i = rotated; i < half; ++i) {
      MAXTEXT_CHECK(rf.element(i) >= 1e29, UnsupportedError, "[gguf] ", g.path, ": rope_freqs.weight[", i, "] = ",
                    rf.element(i), ": Gemma 4's proportional RoPE is 1 for the first rotated pairs, then 1e30 (unrotated)");
    }
    c.global_rope_proportion = static_cast<double>(2 * rotated) / static_cast<double>(c.global_head_dim);
  }
  // K = V on the global layers: llama.cpp's converter writes no attn_v there (use_alternative_attention).
  std::int64_t with_v = 0, globals = 0;
  for (std::int64_t i = 5; i < L; i += 6) {
    ++globals;
    with_v += g.tensor_shape("blk." + std::to_string(i) + ".attn_v.weight").has_value() ? 1 : 0;
  }
  MAXTEXT_CHECK(with_v == 0 || with_v == globals, UnsupportedError, "[gguf] ", g.path, ": ", with_v, " of ", globals,
                " global layers have attn_v.weight: MaxText's share_kv_projections applies to all of them or none");
  c.share_kv_projections = globals > 0 && with_v == 0;
  MAXTEXT_CHECK(!g.tensor_shape("output.weight").has_value(), UnsupportedError, "[gguf] ", g.path,
                ": output.weight: MaxText's Gemma 4 always ties the output head to the embedding");
  if (g.get_int(p + "expert_count", 0) > 0) {
    c.num_experts = g.get_int(p + "expert_count");
    c.num_experts_per_tok = g.get_int(p + "expert_used_count");
    c.base_moe_mlp_dim = detail::gguf_layer_int(g, p + "expert_feed_forward_length", 0, L);
    for (std::int64_t i = 1; i < L; ++i) {
      MAXTEXT_CHECK(detail::gguf_layer_int(g, p + "expert_feed_forward_length", i, L) == c.base_moe_mlp_dim,
                    UnsupportedError, "[gguf] ", g.path, ": ", p, "expert_feed_forward_length differs between layers "
                    "(layer ", i, "): MaxText's Gemma 4 MoE has one expert width");
    }
    c.shared_experts = 1;
    c.norm_topk_prob = true;  // llama.cpp's gemma4 graph renormalises the top-k weights (gemma4-26b.yml too)
  }
  if (g.has(p + "context_length")) c.max_target_length = g.get_int(p + "context_length");
  c.vocab_size = g.vocab_size(p);
  c.derive();
  return c;
}

/// Map a llama.cpp `gemma4` GGUF file's tensors to MaxText names for `cfg`. Norms are stored as the scale itself
/// (Gemma 4's converter adds no 1), the embedding as Hugging Face's table: the mapping is Hugging Face's
/// (import_hf_gemma4) under llama.cpp's names, the experts' gate and up as one [E, 2F, D] tensor or two [E, F, D].
inline TensorMap import_gguf_gemma4(const TensorMap& in, const Config& cfg, const std::string& what = "gguf") {
  return detail::import_gemma4(in, cfg, detail::gemma4_gguf_names(), what);
}

}  // namespace maxtext::io
