// io/hf_gemma4.hpp: Hugging Face Gemma 4 checkpoints (model_type gemma4 with a text_config, or gemma4_text; the text
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
#include "maxtext/io/json_fields.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// True for a Gemma 4 config.json (model_type gemma4, or gemma4_text for the text model alone).
inline bool is_hf_gemma4(const nlohmann::json& j) {
  const std::string t = j.is_object() ? j.value("model_type", std::string()) : std::string();
  return t == "gemma4" || t == "gemma4_text";
}

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
  c.v_norm_with_scale = false;  // HF's v_norm has no weight (MaxText maps one only with v_norm_with_scale)
  c.mlp_activations = {"gelu", "linear"};
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

/// Hugging Face Gemma 4 names -> MaxText gemma4 names (see the file comment).
inline TensorMap import_hf_gemma4(const TensorMap& in, const Config& cfg, const std::string& what = "hf") {
  detail::NameMapper imp(in, cfg, what, "Gemma 4");
  const std::string root = in.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  const bool small = cfg.is("gemma4_small");
  // The attention pattern and KV-shared layers as layers/gemma4_small.hpp (and layers/gemma4.hpp) define them.
  const std::int64_t period = small && cfg.model_name == "gemma4-e2b" ? 5 : 6;
  const std::int64_t first_shared =
      small && cfg.num_kv_shared_layers > 0 ? std::max<std::int64_t>(0, cfg.num_decoder_layers - cfg.num_kv_shared_layers)
                                            : cfg.num_decoder_layers;
  const bool ple = small && cfg.hidden_size_per_layer_input > 0;
  std::vector<std::string> skipped = {"lm_head.weight", root + "rotary_emb.", "model.vision_tower.", "model.embed_vision.",
                                      "model.audio_tower.", "model.embed_audio."};
  if (ple) {
    const std::string p = "decoder.per_layer_embedder.";
    imp.same(root + "embed_tokens_per_layer.weight", p + "embed_tokens_per_layer");
    imp.dense(root + "per_layer_model_projection.weight", p + "per_layer_model_projection.kernel");
    imp.same(root + "per_layer_projection_norm.weight", p + "per_layer_projection_norm.scale");
  }
  const std::int64_t D = cfg.emb_dim, N = cfg.num_query_heads, E = cfg.num_experts, F = cfg.moe_mlp_dim;
  if (const AnyTensor* t = imp.get(root + "embed_tokens.weight")) {
    // pad_hf_embedding_layer: table * float32(sqrt(hidden_size)), cast back to the file's dtype.
    imp.check(*t, 2, root + "embed_tokens.weight");
    const float s = static_cast<float>(std::sqrt(static_cast<double>(cfg.emb_dim)));
    Tensor<float, 2> e({t->shape[0], t->shape[1]});
    const bool bf = t->dtype == DType::bf16, half = t->dtype == DType::f16;
    for (std::int64_t i = 0; i < e.size(); ++i) {
      const float v = static_cast<float>(t->element(i)) * s;
      e.data()[i] = bf ? round_to<bf16>(v) : half ? round_to<fp16>(v) : v;
    }
    imp.put("token_embedder.embedding", AnyTensor::from(e, t->source), root + "embed_tokens.weight");
  }
  imp.same(root + "norm.weight", "decoder.decoder_norm.scale");
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string h = root + "layers." + std::to_string(i) + ".", m = "decoder.layers_" + std::to_string(i) + ".";
    const bool global = i % period == period - 1;
    const bool shared = i >= first_shared && first_shared > 0;
    const std::int64_t K = global && cfg.global_num_kv_heads > 0 ? cfg.global_num_kv_heads : cfg.num_kv_heads;
    const std::int64_t H = global && cfg.global_head_dim > 0 ? cfg.global_head_dim : cfg.head_dim;
    imp.same(h + "input_layernorm.weight", m + "pre_self_attention_norm.scale");
    imp.same(h + "post_attention_layernorm.weight", m + "post_self_attention_norm.scale");
    imp.same(h + "pre_feedforward_layernorm.weight", m + "pre_ffw_norm.scale");
    imp.same(h + "post_feedforward_layernorm.weight", m + "post_ffw_norm.scale");
    const std::string a = m + "self_attention.";
    imp.head_proj(h + "self_attn.q_proj", a + "query", N, false, H);
    if (shared) {  // reads its donor's keys and values
      for (const char* n : {"self_attn.k_proj.", "self_attn.v_proj.", "self_attn.k_norm.", "self_attn.v_norm."}) {
        skipped.push_back(h + n);
      }
    } else {
      imp.head_proj(h + "self_attn.k_proj", a + "key", K, false, H);
      if (!(global && cfg.share_kv_projections && !small)) imp.head_proj(h + "self_attn.v_proj", a + "value", K, false, H);
      imp.same(h + "self_attn.k_norm.weight", a + "key_norm.scale");
    }
    imp.out_proj(h + "self_attn.o_proj", a + "out", false, H);
    imp.same(h + "self_attn.q_norm.weight", a + "query_norm.scale");
    imp.same(h + "layer_scalar", m + "layer_scalar");
    if (ple) {
      imp.dense(h + "per_layer_input_gate.weight", m + "per_layer_input_gate.kernel");
      imp.dense(h + "per_layer_projection.weight", m + "per_layer_projection.kernel");
      imp.same(h + "post_per_layer_input_norm.weight", m + "post_per_layer_input_norm.scale");
    }
    const std::string mlp = m + (E > 1 ? "mlp.moe_block.shared_experts." : "mlp.");
    imp.dense(h + "mlp.gate_proj.weight", mlp + "wi_0.kernel");
    imp.dense(h + "mlp.up_proj.weight", mlp + "wi_1.kernel");
    imp.dense(h + "mlp.down_proj.weight", mlp + "wo.kernel");
    if (E <= 1) continue;
    const std::string r = m + "mlp.moe_block.MoeBlock_0.";
    imp.dense(h + "router.proj.weight", r + "gate.kernel");
    imp.same(h + "router.scale", m + "mlp.pre_forward_scale_2");
    imp.same(h + "router.per_expert_scale", r + "per_expert_scale");
    for (const char* n : {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"}) {
      imp.same(h + n + ".weight", m + "mlp." + n + ".scale");
    }
    if (const AnyTensor* t = imp.get(h + "experts.gate_up_proj")) {
      imp.shape(*t, {E, 2 * F, D}, h + "experts.gate_up_proj");
      const AnyTensor halves = detail::NameMapper::contiguous(*t).reshaped({E, 2, F, D});
      imp.put(r + "wi_0", halves.select(1, 0).permuted({0, 2, 1}), h + "experts.gate_up_proj");
      imp.put(r + "wi_1", halves.select(1, 1).permuted({0, 2, 1}), h + "experts.gate_up_proj");
    }
    if (const AnyTensor* t = imp.get(h + "experts.down_proj")) {
      imp.shape(*t, {E, D, F}, h + "experts.down_proj");
      imp.put(r + "wo", t->permuted({0, 2, 1}), h + "experts.down_proj");
    }
  }
  // A tied head may also be stored; MaxText's Gemma 4 always uses the embedding.
  return imp.finish(skipped);
}

}  // namespace maxtext::io
