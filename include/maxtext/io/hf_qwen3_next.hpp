// io/hf_qwen3_next.hpp: Qwen3-Next checkpoints from Hugging Face (Qwen3NextForCausalLM, config.json model_type
// qwen3_next) into MaxText names for decoder_block qwen3_next (layers/qwen3_next.hpp), as MaxText's converters
// (checkpoint_conversion/standalone_scripts/convert_qwen3_next_{un,}scanned.py) map them. Layouts read from
// transformers' modeling_qwen3_next.py: its fused projections group q/k/v/z and b/a per key head exactly as MaxText's
// do, and its norms are the same (1 + w) RMSNorms (the gated one a plain scale), so the mapping is names and
// transposes only:
//   model.embed_tokens.weight -> token_embedder.embedding; model.norm.weight -> decoder.decoder_norm.scale;
//   lm_head.weight [V, D] -> decoder.logits_dense.kernel [D, V] (view);
//   model.layers.i.input_layernorm / post_attention_layernorm -> decoder.layers_i.{same}.scale;
//   Gated DeltaNet layers, linear_attn.* -> attention.*: in_proj_qkvz / in_proj_ba / out_proj.weight [out, in] ->
//     .kernel [in, out]; conv1d.weight [conv_dim, 1, K] -> conv1d.kernel [K, 1, conv_dim]; A_log, dt_bias;
//     norm.weight [Dv] -> norm.rms_norm.scale;
//   full-attention layers, self_attn.* -> attention.attention.*: q_proj [N*2H, D] -> query.kernel [D, N, 2H] (per
//     head the query then its gate, as both split it); k_proj / v_proj [K*H, D] -> key / value.kernel [D, K, H];
//     o_proj [D, N*H] -> out.kernel [N*H, D]; q_norm / k_norm -> query_norm / key_norm.scale;
//   mlp.gate.weight [E, D] -> mlp.routed_experts.gate.kernel [D, E]; mlp.experts.e.{gate,up,down}_proj ->
//     mlp.routed_experts.{wi_0,wi_1,wo} (stacked); mlp.shared_expert.{gate,up,down}_proj ->
//     mlp.shared_expert.{wi_0,wi_1,wo}.kernel; mlp.shared_expert_gate.weight [1, D] -> mlp.shared_expert_gate.kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/hf_deepseek.hpp"
#include "maxtext/io/json_fields.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// True for config.json model_type qwen3_next.
inline bool is_hf_qwen3_next(const nlohmann::json& j) {
  return j.is_object() && j.contains("model_type") && j["model_type"].is_string() &&
         j["model_type"].get<std::string>() == "qwen3_next";
}

/// The MaxText config of a Qwen3NextForCausalLM config.json. What MaxText's qwen3_next block cannot express is
/// refused by name: dense (mlp_only) layers, decoder_sparse_step != 1, a shared expert of another width than the
/// routed ones, attention biases, tied embeddings, rope_scaling, a layer pattern other than full attention every
/// full_attention_interval-th layer.
inline Config config_from_hf_qwen3_next(const nlohmann::json& j, const std::string& where) {
  const detail::JsonFields fields(j, where + ": config.json");
  Config c;
  c.decoder_block = "qwen3_next";
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.mlp_activations = {"silu", "linear"};
  c.logits_via_embedding = false;
  c.scan_layers = false;
  c.enable_dropout = false;
  c.rope_type = "default";
  c.rope_min_timescale = 1;
  c.shared_experts = 1;
  c.base_emb_dim = fields.integer("hidden_size", 0, true);
  c.base_num_decoder_layers = fields.integer("num_hidden_layers", 0, true);
  MAXTEXT_CHECK(c.base_num_decoder_layers > 0 && c.base_num_decoder_layers <= Config::Limits::layers, IoError, "[hf] ",
                where, ": num_hidden_layers ", c.base_num_decoder_layers, " outside [1, ", Config::Limits::layers, "]");
  c.base_num_query_heads = fields.integer("num_attention_heads", 0, true);
  c.base_num_kv_heads = fields.integer("num_key_value_heads", c.base_num_query_heads, false);
  c.head_dim = fields.integer("head_dim", c.base_num_query_heads > 0 ? c.base_emb_dim / c.base_num_query_heads : 0, false);
  c.vocab_size = fields.integer("vocab_size", 0, true);
  c.normalization_layer_epsilon = fields.number("rms_norm_eps", 1e-6);
  c.rope_max_timescale = fields.number("rope_theta", 10000.0);
  c.partial_rotary_factor = fields.number("partial_rotary_factor", 0.25);
  c.num_experts = fields.integer("num_experts", 0, true);
  c.num_experts_per_tok = fields.integer("num_experts_per_tok", 0, true);
  c.norm_topk_prob = fields.boolean("norm_topk_prob", true);
  c.base_moe_mlp_dim = fields.integer("moe_intermediate_size", 0, true);
  c.base_mlp_dim = fields.integer("intermediate_size", c.base_moe_mlp_dim, false);
  c.gdn_conv_kernel_dim = fields.integer("linear_conv_kernel_dim", 4, false);
  c.gdn_key_head_dim = fields.integer("linear_key_head_dim", 128, false);
  c.gdn_value_head_dim = fields.integer("linear_value_head_dim", 128, false);
  c.gdn_num_key_heads = fields.integer("linear_num_key_heads", 16, false);
  c.gdn_num_value_heads = fields.integer("linear_num_value_heads", 32, false);
  c.inhomogeneous_layer_cycle_interval = fields.integer("full_attention_interval", 4, false);
  const std::int64_t shared = fields.integer("shared_expert_intermediate_size", c.base_moe_mlp_dim, false);
  MAXTEXT_CHECK(shared == c.base_moe_mlp_dim, UnsupportedError, "[hf] ", where, ": shared_expert_intermediate_size ",
                shared, " != moe_intermediate_size ", c.base_moe_mlp_dim,
                ": MaxText's qwen3_next block has one shared expert of the routed experts' width");
  MAXTEXT_CHECK(fields.integer("decoder_sparse_step", 1, false) == 1, UnsupportedError, "[hf] ", where,
                ": decoder_sparse_step != 1: MaxText's qwen3_next block has an MoE in every layer");
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    MAXTEXT_CHECK(j["mlp_only_layers"].is_array() && j["mlp_only_layers"].empty(), UnsupportedError, "[hf] ", where,
                  ": mlp_only_layers ", j["mlp_only_layers"].dump(), ": MaxText's qwen3_next block has no dense layers");
  }
  MAXTEXT_CHECK(!fields.boolean("attention_bias", false), UnsupportedError, "[hf] ", where,
                ": attention_bias = true: MaxText's qwen3_next attention has no biases");
  MAXTEXT_CHECK(!fields.boolean("tie_word_embeddings", false), UnsupportedError, "[hf] ", where,
                ": tie_word_embeddings = true: MaxText's qwen3_next block has its own output head");
  MAXTEXT_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), UnsupportedError, "[hf] ", where,
                ": rope_scaling ", j.value("rope_scaling", nlohmann::json()).dump(),
                ": MaxText's qwen3_next block uses the default (partial) RoPE");
  if (j.contains("hidden_act") && !j["hidden_act"].is_null()) {
    MAXTEXT_CHECK(j["hidden_act"] == "silu", UnsupportedError, "[hf] ", where, ": hidden_act ", j["hidden_act"].dump(),
                  ": MaxText's qwen3_next block uses SiLU");
  }
  const std::int64_t L = c.base_num_decoder_layers, cyc = c.inhomogeneous_layer_cycle_interval;
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const auto& lt = j["layer_types"];
    MAXTEXT_CHECK(lt.is_array() && static_cast<std::int64_t>(lt.size()) == L, IoError, "[hf] ", where, ": layer_types has ",
                  lt.is_array() ? lt.size() : 0, " entries for num_hidden_layers ", L);
    for (std::int64_t i = 0; i < L; ++i) {
      const char* want = cyc > 0 && (i + 1) % cyc == 0 ? "full_attention" : "linear_attention";
      MAXTEXT_CHECK(lt[static_cast<std::size_t>(i)] == want, UnsupportedError, "[hf] ", where, ": layer_types[", i,
                    "] is ", lt[static_cast<std::size_t>(i)].dump(), ": MaxText's qwen3_next uses full attention "
                    "exactly when (i + 1) % full_attention_interval (", cyc, ") == 0 (expected \"", want, "\")");
    }
  }
  if (j.contains("max_position_embeddings") && j["max_position_embeddings"].is_number_integer()) {
    c.max_position_embeddings = j["max_position_embeddings"].get<std::int64_t>();
    c.max_target_length = std::min<std::int64_t>(c.max_position_embeddings, 131072);
  }
  c.derive();
  c.validate();
  return c;
}

/// Map a Hugging Face Qwen3-Next checkpoint to MaxText names for `cfg`; every missing or unused tensor is an error
/// (the rotary tables some exporters save are ignored).
inline TensorMap import_hf_qwen3_next(const TensorMap& in, const Config& cfg, const std::string& what = "hf") {
  detail::NameMapper imp(in, cfg, what, "Qwen3-Next");
  const std::int64_t D = cfg.emb_dim, N = cfg.num_query_heads, H = cfg.head_dim, K = cfg.gdn_conv_kernel_dim;
  const std::int64_t C = 2 * cfg.gdn_num_key_heads * cfg.gdn_key_head_dim + cfg.gdn_num_value_heads * cfg.gdn_value_head_dim;
  imp.same("model.embed_tokens.weight", "token_embedder.embedding");
  imp.same("model.norm.weight", "decoder.decoder_norm.scale");
  imp.dense("lm_head.weight", "decoder.logits_dense.kernel");
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", m = "decoder.layers_" + std::to_string(i) + ".";
    imp.same(h + "input_layernorm.weight", m + "input_layernorm.scale");
    imp.same(h + "post_attention_layernorm.weight", m + "post_attention_layernorm.scale");
    const bool full = cfg.inhomogeneous_layer_cycle_interval > 0 && (i + 1) % cfg.inhomogeneous_layer_cycle_interval == 0;
    if (full) {
      const std::string s = h + "self_attn.", a = m + "attention.attention.";
      if (const AnyTensor* t = imp.get(s + "q_proj.weight")) {
        imp.shape(*t, {N * 2 * H, D}, s + "q_proj.weight");
        imp.put(a + "query.kernel", t->reshaped({N, 2 * H, D}).permuted({2, 0, 1}), s + "q_proj.weight");
      }
      imp.head_proj(s + "k_proj", a + "key", cfg.num_kv_heads, false);
      imp.head_proj(s + "v_proj", a + "value", cfg.num_kv_heads, false);
      imp.dense(s + "o_proj.weight", a + "out.kernel");
      imp.same(s + "q_norm.weight", a + "query_norm.scale");
      imp.same(s + "k_norm.weight", a + "key_norm.scale");
    } else {
      const std::string s = h + "linear_attn.", a = m + "attention.";
      imp.dense(s + "in_proj_qkvz.weight", a + "in_proj_qkvz.kernel");
      imp.dense(s + "in_proj_ba.weight", a + "in_proj_ba.kernel");
      imp.dense(s + "out_proj.weight", a + "out_proj.kernel");
      if (const AnyTensor* t = imp.get(s + "conv1d.weight")) {
        imp.shape(*t, {C, 1, K}, s + "conv1d.weight");
        imp.put(a + "conv1d.kernel", t->permuted({2, 1, 0}), s + "conv1d.weight");
      }
      imp.same(s + "A_log", a + "A_log");
      imp.same(s + "dt_bias", a + "dt_bias");
      imp.same(s + "norm.weight", a + "norm.rms_norm.scale");
    }
    const std::string f = h + "mlp.", o = m + "mlp.";
    imp.dense(f + "gate.weight", o + "routed_experts.gate.kernel");
    std::vector<std::string> consumed;
    imp.put(o + "routed_experts.wi_0", detail::hf_stack_experts(in, f + "experts.", ".gate_proj.weight", cfg.num_experts, consumed));
    imp.put(o + "routed_experts.wi_1", detail::hf_stack_experts(in, f + "experts.", ".up_proj.weight", cfg.num_experts, consumed));
    imp.put(o + "routed_experts.wo", detail::hf_stack_experts(in, f + "experts.", ".down_proj.weight", cfg.num_experts, consumed));
    imp.mark_used(consumed);
    imp.dense(f + "shared_expert.gate_proj.weight", o + "shared_expert.wi_0.kernel");
    imp.dense(f + "shared_expert.up_proj.weight", o + "shared_expert.wi_1.kernel");
    imp.dense(f + "shared_expert.down_proj.weight", o + "shared_expert.wo.kernel");
    imp.dense(f + "shared_expert_gate.weight", o + "shared_expert_gate.kernel");
  }
  return imp.finish({"model.rotary_emb."});
}

}  // namespace maxtext::io
