// families/qwen3_next/import.hpp: Qwen3-Next checkpoints from Hugging Face (Qwen3NextForCausalLM, config.json model_type
// qwen3_next) into MaxText names for decoder_block qwen3_next (families/qwen3_next/qwen3_next.hpp), as MaxText's converters
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
//
// Qwen3.5 (Qwen3_5MoeForConditionalGeneration / Qwen3_5MoeForCausalLM, model_type qwen3_5_moe[_text]) into decoder_block
// qwen3_5, whose layers are Qwen3-Next's (families/qwen3_next/qwen3_5.hpp), as MaxText's param_mapping.py
// (QWEN3_5_MAXTEXT_TO_HF_PARAM_MAPPING / _HOOK_FN) maps them. Read from transformers' modeling_qwen3_5_moe.py:
//   - the text model's tensors sit under model.language_model. (the multimodal class) or model. (the text-only one);
//     the vision tower (model.visual.*) is not read;
//   - the Gated DeltaNet projections are separate: in_proj_qkv [2*Hk*Dk + Hv*Dv, D] (rows q | k | v, head-major),
//     in_proj_z [Hv*Dv, D], in_proj_b / in_proj_a [Hv, D]. MaxText's fused kernels regroup them per key head h
//     (concat_qkvz_and_transpose / concat_ba_and_transpose): qkvz rows [q_h (Dk), k_h (Dk), v_h (r*Dv), z_h (r*Dv)],
//     ba rows [b_h (r), a_h (r)], r = Hv / Hk. These two are the only copies the import makes;
//   - routed experts are 3-D: experts.gate_up_proj [E, 2F, D] (gate rows first, then up; `chunk(2)`) and
//     experts.down_proj [E, D, F] (no .weight suffix); per-expert tensors, as in Qwen3-Next files, are read too;
//   - config.json nests the text model under text_config and the rotary settings under rope_parameters (rope_theta,
//     partial_rotary_factor, mrope_section); MaxText's Qwen3.5 ymls set use_mrope with that mrope_section.
// Dense Qwen3.5 (model_type qwen3_5) is refused: MaxText's qwen3_5 block has an MoE in every layer.
//
// llama.cpp's GGUF architecture qwen3next into decoder_block qwen3_next, undoing what its converter
// (conversion/qwen.py Qwen3NextModel; the node-llama-cpp 3.22.1 source) does to the Hugging Face tensors:
//   - every RMSNorm weight but the DeltaNet's gated one has the 1 of Qwen's (1 + w) norm added: w = file - 1 (f32);
//   - ssm_a is -exp(A_log): A_log = log(-ssm_a) (f32; a non-negative entry is refused by name and index);
//   - the DeltaNet input projection comes as attn_qkv [2*Hk*Dk + Hv*Dv, D] (rows q | k | v, head-major) and attn_gate
//     [Hv*Dv, D] (z), regrouped per key head as for Qwen3.5 above (older files' fused ssm_in is read as it is);
//     ssm_ba [2*Hv, D] keeps Hugging Face's grouping (per key head, b then a) and maps as in_proj_ba;
//   - ssm_conv1d [C, K] -> conv1d.kernel [K, 1, C]; ssm_dt.bias -> dt_bias; ssm_norm -> norm.rms_norm.scale;
//   - attention layers: attn_q [N*2H, D] (per head the query then its gate, as in Hugging Face), attn_k / attn_v (or
//     their fused attn_qkv), attn_output, attn_q_norm / attn_k_norm; post_attention_norm is the FFN's input norm;
//   - experts: ffn_gate_inp, ffn_{gate,up,down}_exps [E, out, in] (or the fused ffn_gate_up_exps, gate rows first),
//     the shared expert's ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp [D].
// The graph llama.cpp runs fixes what the file does not say: top-k weights always renormalised (norm_topk_prob),
// head_dim^-0.5 query scale, the NEOX (rotate-half) partial RoPE over rope.dimension_count lanes.
// llama.cpp's qwen35moe (Qwen3.5 MoE) into decoder_block qwen3_5: the same tensors, except that its converter
// (_LinearAttentionVReorderBase) stores the value heads tiled, value head j at (j % r) * Hk + j / r, in attn_qkv's v
// rows, attn_gate, ssm_beta / ssm_alpha (two tensors instead of ssm_ba), ssm_a, ssm_dt, the conv's v channels and
// ssm_out's columns; the import puts them back in order. rope.dimension_sections gives mrope_section (use_mrope).
//
// Both families' checkpoints may carry a multi-token-prediction layer (config.json mtp_num_hidden_layers; mtp.*,
// which transformers skips and vLLM's qwen3_next_mtp.py / qwen3_5_mtp.py run), read as the model's MTP layer
// (models::Transformer with Qwen3NextDecoderLayer::mtp_qwen3_next): mtp.fc [D, 2D] -> mtp_{k}_projection.kernel
// [2D, D]; mtp.pre_fc_norm_embedding / pre_fc_norm_hidden / norm -> mtp_{k}_embedding_norm / hidden_state_norm /
// final_norm.scale ((1 + w) norms); mtp.layers.{k-1}.* -> mtp_{k}_transformer_layer.*, a full-attention layer mapped
// as the decoder's (its experts per expert even where the main layers' are fused, as Qwen3.5's files store them).
// GGUF files from llama.cpp's converter hold it as blk.{L}.* and blk.{L}.nextn.{eh_proj, enorm, hnorm,
// shared_head_norm} (nextn_predict_layers; norms with their 1 added).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/json_fields.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// True for config.json model_type qwen3_next, or Qwen3.5 (qwen3_5_moe, qwen3_5_moe_text, and the dense qwen3_5 /
/// qwen3_5_text, which config_from_hf_qwen3_next refuses by name).
inline bool is_hf_qwen3_next(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return false;
  const auto t = j["model_type"].get<std::string>();
  return t == "qwen3_next" || t == "qwen3_5_moe" || t == "qwen3_5_moe_text" || t == "qwen3_5" || t == "qwen3_5_text";
}

namespace detail {

/// What every Qwen3-Next / Qwen3.5 config shares, whatever file it comes from.
inline void base_qwen3_hybrid_config(Config& c, const std::string& block) {
  base_llama_config(c);
  c.decoder_block = block;
  c.rope_type = "default";
  c.shared_experts = 1;
}

}  // namespace detail

/// The MaxText config of a Qwen3NextForCausalLM or Qwen3.5 MoE config.json. What MaxText's qwen3_next / qwen3_5
/// blocks cannot express is refused by name: dense (mlp_only) layers, decoder_sparse_step != 1, a shared expert of
/// another width than the routed ones, attention biases, tied embeddings, rope scaling, a layer pattern other than
/// full attention every full_attention_interval-th layer.
inline Config config_from_hf_qwen3_next(const nlohmann::json& root, const std::string& where) {
  const std::string type = root.value("model_type", std::string());
  const bool q35 = type != "qwen3_next";
  MAXTEXT_CHECK(type != "qwen3_5" && type != "qwen3_5_text", UnsupportedError, "[hf] ", where, ": model_type ", type,
                " is a dense Qwen3.5; MaxText's qwen3_5 block (models/qwen3_5.py) has an MoE in every layer");
  const bool nested = q35 && root.contains("text_config") && root["text_config"].is_object();
  const nlohmann::json& j = nested ? root["text_config"] : root;
  const std::string block = q35 ? "qwen3_5" : "qwen3_next";
  const detail::JsonFields fields(j, where + (nested ? ": config.json: text_config" : ": config.json"));
  Config c;
  detail::base_qwen3_hybrid_config(c, block);
  c.base_emb_dim = fields.integer("hidden_size", 0, true);
  c.base_num_decoder_layers = fields.integer("num_hidden_layers", 0, true);
  MAXTEXT_CHECK(c.base_num_decoder_layers > 0 && c.base_num_decoder_layers <= Config::Limits::layers, IoError, "[hf] ",
                where, ": num_hidden_layers ", c.base_num_decoder_layers, " outside [1, ", Config::Limits::layers, "]");
  c.base_num_query_heads = fields.integer("num_attention_heads", 0, true);
  c.base_num_kv_heads = fields.integer("num_key_value_heads", c.base_num_query_heads, false);
  c.head_dim = fields.integer("head_dim", c.base_num_query_heads > 0 ? c.base_emb_dim / c.base_num_query_heads : 0, false);
  c.vocab_size = fields.integer("vocab_size", 0, true);
  c.normalization_layer_epsilon = fields.number("rms_norm_eps", 1e-6);
  // Rotary settings: top level (older files), or rope_parameters (transformers v5, and every Qwen3.5 file).
  c.rope_max_timescale = fields.number("rope_theta", 10000.0);
  c.partial_rotary_factor = fields.number("partial_rotary_factor", 0.25);
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const auto& rp = j["rope_parameters"];
    MAXTEXT_CHECK(rp.is_object(), IoError, "[hf] ", where, ": rope_parameters: expected an object, found ", rp.dump());
    const detail::JsonFields rf(rp, where + ": rope_parameters");
    c.rope_max_timescale = rf.number("rope_theta", c.rope_max_timescale);
    c.partial_rotary_factor = rf.number("partial_rotary_factor", c.partial_rotary_factor);
    const std::string rt = rp.value("rope_type", std::string("default"));
    MAXTEXT_CHECK(rt == "default", UnsupportedError, "[hf] ", where, ": rope_parameters.rope_type '", rt, "': MaxText's ",
                  block, " block uses the default (partial) RoPE");
    if (q35 && rp.contains("mrope_section") && !rp["mrope_section"].is_null()) {
      const auto& ms = rp["mrope_section"];
      MAXTEXT_CHECK(ms.is_array() && ms.size() == 3, IoError, "[hf] ", where,
                    ": rope_parameters.mrope_section: expected three integers, found ", ms.dump());
      StringList sec;
      for (const auto& v : ms) {
        MAXTEXT_CHECK(v.is_number_integer(), IoError, "[hf] ", where,
                      ": rope_parameters.mrope_section: expected integers, found ", ms.dump());
        sec.push_back(std::to_string(v.get<std::int64_t>()));
      }
      c.set_list("mrope_section", sec, where);
    }
  }
  // MaxText's Qwen3.5 ymls (qwen3.5-35b-a3b, qwen3.5-397b-a17b) set use_mrope: at text positions it is a partial
  // RoPE with f32 sin / cos (layers/rotary.hpp).
  c.use_mrope = q35;
  if (q35 && c.extra.count("mrope_section") == 0) c.set_list("mrope_section", {"11", "11", "10"}, where);
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
  // The multi-token-prediction layers the checkpoint carries (mtp.*; vLLM's qwen3_next_mtp.py / qwen3_5_mtp.py;
  // vLLM's Qwen3-Next drafter reads num_nextn_predict_layers, the released files say mtp_num_hidden_layers).
  c.mtp_num_layers = fields.integer("mtp_num_hidden_layers", fields.integer("num_nextn_predict_layers", 0, false), false);
  MAXTEXT_CHECK(!fields.boolean("mtp_use_dedicated_embeddings", false), UnsupportedError, "[hf] ", where,
                ": mtp_use_dedicated_embeddings = true: the MTP layers here read the model's own token embedding");
  MAXTEXT_CHECK(c.mtp_num_layers >= 0 && c.mtp_num_layers <= Config::Limits::layers, IoError, "[hf] ", where,
                ": mtp_num_hidden_layers ", c.mtp_num_layers, " outside [0, ", Config::Limits::layers, "]");
  const std::int64_t shared = fields.integer("shared_expert_intermediate_size", c.base_moe_mlp_dim, false);
  MAXTEXT_CHECK(shared == c.base_moe_mlp_dim, UnsupportedError, "[hf] ", where, ": shared_expert_intermediate_size ",
                shared, " != moe_intermediate_size ", c.base_moe_mlp_dim, ": MaxText's ", block,
                " block has one shared expert of the routed experts' width");
  MAXTEXT_CHECK(fields.integer("decoder_sparse_step", 1, false) == 1, UnsupportedError, "[hf] ", where,
                ": decoder_sparse_step != 1: MaxText's ", block, " block has an MoE in every layer");
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    MAXTEXT_CHECK(j["mlp_only_layers"].is_array() && j["mlp_only_layers"].empty(), UnsupportedError, "[hf] ", where,
                  ": mlp_only_layers ", j["mlp_only_layers"].dump(), ": MaxText's ", block, " block has no dense layers");
  }
  MAXTEXT_CHECK(!fields.boolean("attention_bias", false), UnsupportedError, "[hf] ", where,
                ": attention_bias = true: MaxText's ", block, " attention has no biases");
  // tie_word_embeddings sits at the top level of a multimodal config, in the text config otherwise.
  const bool tied = detail::JsonFields(root, where + ": config.json").boolean("tie_word_embeddings", false) ||
                    (nested && fields.boolean("tie_word_embeddings", false));
  MAXTEXT_CHECK(!tied, UnsupportedError, "[hf] ", where, ": tie_word_embeddings = true: MaxText's ", block,
                " block has its own output head");
  MAXTEXT_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), UnsupportedError, "[hf] ", where,
                ": rope_scaling ", j.value("rope_scaling", nlohmann::json()).dump(), ": MaxText's ", block,
                " block uses the default (partial) RoPE");
  if (j.contains("hidden_act") && !j["hidden_act"].is_null()) {
    MAXTEXT_CHECK(j["hidden_act"] == "silu", UnsupportedError, "[hf] ", where, ": hidden_act ", j["hidden_act"].dump(),
                  ": MaxText's ", block, " block uses SiLU");
  }
  const std::int64_t L = c.base_num_decoder_layers, cyc = c.inhomogeneous_layer_cycle_interval;
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const auto& lt = j["layer_types"];
    MAXTEXT_CHECK(lt.is_array() && static_cast<std::int64_t>(lt.size()) == L, IoError, "[hf] ", where, ": layer_types has ",
                  lt.is_array() ? lt.size() : 0, " entries for num_hidden_layers ", L);
    for (std::int64_t i = 0; i < L; ++i) {
      const char* want = cyc > 0 && (i + 1) % cyc == 0 ? "full_attention" : "linear_attention";
      MAXTEXT_CHECK(lt[static_cast<std::size_t>(i)] == want, UnsupportedError, "[hf] ", where, ": layer_types[", i,
                    "] is ", lt[static_cast<std::size_t>(i)].dump(), ": MaxText's ", block, " uses full attention "
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

namespace detail {

/// The file position of value head j (Hugging Face's order: key head j / r, then j % r, r = Hv / Hk). llama.cpp's
/// Qwen3.5 converter stores the value heads tiled instead (conversion/qwen.py _LinearAttentionVReorderBase: position
/// (j % r) * Hk + j / r), so that ggml can broadcast the key heads.
inline std::int64_t value_head_position(std::int64_t j, std::int64_t Hk, std::int64_t r, bool tiled) {
  return tiled ? (j % r) * Hk + j / r : j;
}

/// Separate q | k | v rows [2*Hk*Dk + Hv*Dv, D] (each head-major; the value heads tiled when `tiled`) and z rows
/// [Hv*Dv, D] -> MaxText's fused in_proj_qkvz kernel [D, ...] grouped per key head h: [q_h (Dk), k_h (Dk), v_h (r*Dv),
/// z_h (r*Dv)], r = Hv / Hk (concat_qkvz_and_transpose). One copy, in the file's type (Q8_0 rows included).
inline void put_grouped_qkvz(NameMapper& imp, const Config& cfg, const AnyTensor& qkv, const AnyTensor& z,
                             const std::string& to, const std::string& qkv_name, const std::string& z_name,
                             bool tiled = false) {
  const std::int64_t D = cfg.emb_dim, Hk = cfg.gdn_num_key_heads, Hv = cfg.gdn_num_value_heads,
                     Dk = cfg.gdn_key_head_dim, Dv = cfg.gdn_value_head_dim, r = Hv / Hk, C = 2 * Hk * Dk + Hv * Dv;
  imp.shape(qkv, {C, D}, qkv_name);
  imp.shape(z, {Hv * Dv, D}, z_name);
  std::vector<AnyTensor> rows;
  for (std::int64_t h = 0; h < Hk; ++h) {
    rows.push_back(qkv.narrow(0, h * Dk, Dk));
    rows.push_back(qkv.narrow(0, (Hk + h) * Dk, Dk));
    for (std::int64_t t = 0; t < r; ++t) {
      rows.push_back(qkv.narrow(0, 2 * Hk * Dk + value_head_position(h * r + t, Hk, r, tiled) * Dv, Dv));
    }
    for (std::int64_t t = 0; t < r; ++t) rows.push_back(z.narrow(0, value_head_position(h * r + t, Hk, r, tiled) * Dv, Dv));
  }
  imp.put(to, concat_any(rows, 0, qkv_name + " + " + z_name).permuted({1, 0}), qkv_name + " + " + z_name);
}

/// Separate b and a rows [Hv, D] (value heads tiled when `tiled`) -> MaxText's fused in_proj_ba kernel [D, 2*Hv]
/// grouped per key head: [b_h (r), a_h (r)] (concat_ba_and_transpose).
inline void put_grouped_ba(NameMapper& imp, const Config& cfg, const AnyTensor& b, const AnyTensor& a,
                           const std::string& to, const std::string& b_name, const std::string& a_name,
                           bool tiled = false) {
  const std::int64_t D = cfg.emb_dim, Hk = cfg.gdn_num_key_heads, Hv = cfg.gdn_num_value_heads, r = Hv / Hk;
  imp.shape(b, {Hv, D}, b_name);
  imp.shape(a, {Hv, D}, a_name);
  std::vector<AnyTensor> rows;
  for (std::int64_t h = 0; h < Hk; ++h) {
    for (const AnyTensor* t : {&b, &a}) {
      for (std::int64_t i = 0; i < r; ++i) rows.push_back(t->narrow(0, value_head_position(h * r + i, Hk, r, tiled), 1));
    }
  }
  imp.put(to, concat_any(rows, 0, b_name + " + " + a_name).permuted({1, 0}), b_name + " + " + a_name);
}

}  // namespace detail

/// Map a Hugging Face Qwen3-Next or Qwen3.5 checkpoint to MaxText names for `cfg`; every missing or unused tensor is
/// an error (the rotary tables some exporters save, a Qwen3.5 file's vision tower and the MTP layers are not read).
inline TensorMap import_hf_qwen3_next(const TensorMap& in, const Config& cfg, const std::string& what = "hf") {
  detail::NameMapper imp(in, cfg, what, cfg.is("qwen3_5") ? "Qwen3.5" : "Qwen3-Next");
  const std::int64_t D = cfg.emb_dim, N = cfg.num_query_heads, H = cfg.head_dim, K = cfg.gdn_conv_kernel_dim;
  const std::int64_t Hk = cfg.gdn_num_key_heads, Hv = cfg.gdn_num_value_heads, Dk = cfg.gdn_key_head_dim,
                     Dv = cfg.gdn_value_head_dim, E = cfg.num_experts, F = cfg.moe_mlp_dim;
  // Qwen3_5MoeForConditionalGeneration keeps the text model under model.language_model.
  const std::string root = imp.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  imp.same(root + "embed_tokens.weight", "token_embedder.embedding");
  imp.same(root + "norm.weight", "decoder.decoder_norm.scale");
  imp.dense("lm_head.weight", "decoder.logits_dense.kernel");
  // One decoder layer: HF prefix h (ending in '.') into MaxText prefix m.
  auto map_layer = [&](const std::string& h, const std::string& m, bool full) {
    imp.same(h + "input_layernorm.weight", m + "input_layernorm.scale");
    imp.same(h + "post_attention_layernorm.weight", m + "post_attention_layernorm.scale");
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
      if (imp.has(s + "in_proj_qkv.weight") || imp.has(s + "in_proj_z.weight")) {  // Qwen3.5: separate projections
        const AnyTensor* qkv = imp.get(s + "in_proj_qkv.weight");
        const AnyTensor* z = imp.get(s + "in_proj_z.weight");
        if (qkv != nullptr && z != nullptr) {
          detail::put_grouped_qkvz(imp, cfg, *qkv, *z, a + "in_proj_qkvz.kernel", s + "in_proj_qkv.weight",
                                   s + "in_proj_z.weight");
        }
        const AnyTensor* b = imp.get(s + "in_proj_b.weight");
        const AnyTensor* av = imp.get(s + "in_proj_a.weight");
        if (b != nullptr && av != nullptr) {
          detail::put_grouped_ba(imp, cfg, *b, *av, a + "in_proj_ba.kernel", s + "in_proj_b.weight", s + "in_proj_a.weight");
        }
      } else {  // Qwen3-Next: fused per key head already
        imp.dense(s + "in_proj_qkvz.weight", a + "in_proj_qkvz.kernel");
        imp.dense(s + "in_proj_ba.weight", a + "in_proj_ba.kernel");
      }
      imp.dense(s + "out_proj.weight", a + "out_proj.kernel");
      if (const AnyTensor* t = imp.get(s + "conv1d.weight")) {
        imp.shape(*t, {2 * Hk * Dk + Hv * Dv, 1, K}, s + "conv1d.weight");
        imp.put(a + "conv1d.kernel", t->permuted({2, 1, 0}), s + "conv1d.weight");
      }
      imp.same(s + "A_log", a + "A_log");
      imp.same(s + "dt_bias", a + "dt_bias");
      imp.same(s + "norm.weight", a + "norm.rms_norm.scale");
    }
    const std::string f = h + "mlp.", o = m + "mlp.";
    imp.dense(f + "gate.weight", o + "routed_experts.gate.kernel");
    if (imp.has(f + "experts.gate_up_proj") || imp.has(f + "experts.down_proj")) {  // 3-D expert tensors
      if (const AnyTensor* t = imp.get(f + "experts.gate_up_proj")) {
        imp.shape(*t, {E, 2 * F, D}, f + "experts.gate_up_proj");
        imp.put(o + "routed_experts.wi_0", t->narrow(1, 0, F).permuted({0, 2, 1}), f + "experts.gate_up_proj");
        imp.put(o + "routed_experts.wi_1", t->narrow(1, F, F).permuted({0, 2, 1}), f + "experts.gate_up_proj");
      }
      if (const AnyTensor* t = imp.get(f + "experts.down_proj")) {
        imp.shape(*t, {E, D, F}, f + "experts.down_proj");
        imp.put(o + "routed_experts.wo", t->permuted({0, 2, 1}), f + "experts.down_proj");
      }
    } else {
      std::vector<std::string> consumed;
      imp.put(o + "routed_experts.wi_0", detail::hf_stack_experts(in, f + "experts.", ".gate_proj.weight", E, consumed));
      imp.put(o + "routed_experts.wi_1", detail::hf_stack_experts(in, f + "experts.", ".up_proj.weight", E, consumed));
      imp.put(o + "routed_experts.wo", detail::hf_stack_experts(in, f + "experts.", ".down_proj.weight", E, consumed));
      imp.mark_used(consumed);
    }
    imp.dense(f + "shared_expert.gate_proj.weight", o + "shared_expert.wi_0.kernel");
    imp.dense(f + "shared_expert.up_proj.weight", o + "shared_expert.wi_1.kernel");
    imp.dense(f + "shared_expert.down_proj.weight", o + "shared_expert.wo.kernel");
    imp.dense(f + "shared_expert_gate.weight", o + "shared_expert_gate.kernel");
  };
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const bool full = cfg.inhomogeneous_layer_cycle_interval > 0 && (i + 1) % cfg.inhomogeneous_layer_cycle_interval == 0;
    map_layer(root + "layers." + std::to_string(i) + ".", "decoder.layers_" + std::to_string(i) + ".", full);
  }
  // The MTP layers (config.json's mtp_num_hidden_layers; vLLM's Qwen3NextMultiTokenPredictor): mtp.layers.{k - 1}.*
  // is a full-attention decoder layer; mtp.fc [D, 2D] projects [embedding; hidden], after the (1 + w) norms
  // mtp.pre_fc_norm_embedding / mtp.pre_fc_norm_hidden; mtp.norm is the norm before the shared output head. The
  // checkpoints hold one fc and three norms for all the MTP layers (vLLM's k-th draft step reuses them): each
  // MaxText-style mtp_layer_{k} takes its own view of them.
  for (std::int64_t k = 1; k <= cfg.mtp_num_layers; ++k) {
    const std::string m = "mtp_block.mtp_layer_" + std::to_string(k) + ".mtp_" + std::to_string(k) + "_";
    MAXTEXT_CHECK(imp.has("mtp.fc.weight"), ConfigError, "[", what, "] mtp_num_layers = ", cfg.mtp_num_layers,
                  " (config.json's mtp_num_hidden_layers) but the checkpoint holds no mtp.fc.weight: it carries no "
                  "multi-token-prediction layer; set mtp_num_layers=0 to run without");
    imp.same("mtp.pre_fc_norm_embedding.weight", m + "embedding_norm.scale");
    imp.same("mtp.pre_fc_norm_hidden.weight", m + "hidden_state_norm.scale");
    imp.same("mtp.norm.weight", m + "final_norm.scale");
    if (const AnyTensor* t = imp.get("mtp.fc.weight")) {
      imp.shape(*t, {D, 2 * D}, "mtp.fc.weight");
      imp.put(m + "projection.kernel", t->permuted({1, 0}), "mtp.fc.weight");
    }
    map_layer("mtp.layers." + std::to_string(k - 1) + ".", m + "transformer_layer.", true);
  }
  return imp.finish({root + "rotary_emb.", "model.visual.", "mtp."});
}

/// True for GGUF general.architecture qwen3next, or qwen35moe (Qwen3.5 MoE, read as decoder_block qwen3_5).
inline bool is_gguf_qwen3_next(const std::string& arch) { return arch == "qwen3next" || arch == "qwen35moe"; }

/// A Config from the metadata of a llama.cpp `qwen3next` or `qwen35moe` GGUF file (its keys, and what its graph
/// fixes).
inline Config config_from_gguf_qwen3_next(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  const bool q35 = arch == "qwen35moe";
  const std::string p = arch + ".", block = q35 ? "qwen3_5" : "qwen3_next";
  Config c;
  detail::base_qwen3_hybrid_config(c, block);
  c.base_emb_dim = g.get_int(p + "embedding_length");
  // The multi-token-prediction layers llama.cpp's converter appends (nextn_predict_layers, blk.L..) become the model's
  // MTP layers (import_gguf_qwen3_next).
  const std::int64_t all_layers = g.get_int(p + "block_count"), nextn = g.get_int(p + "nextn_predict_layers", 0);
  MAXTEXT_CHECK(nextn >= 0 && nextn < all_layers && all_layers <= Config::Limits::layers, IoError, "[gguf] ", g.path,
                ": ", p, "block_count ", all_layers, " with nextn_predict_layers ", nextn, ": expected 0 <= nextn < "
                "block_count <= ", Config::Limits::layers);
  c.base_num_decoder_layers = all_layers - nextn;
  c.mtp_num_layers = nextn;
  c.base_num_query_heads = g.get_int(p + "attention.head_count");
  c.base_num_kv_heads = g.get_int(p + "attention.head_count_kv", c.base_num_query_heads);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_emb_dim > 0, IoError, "[gguf] ", g.path,
                ": head_count and embedding_length must be > 0");
  c.head_dim = g.get_int(p + "attention.key_length", c.base_emb_dim / c.base_num_query_heads);
  MAXTEXT_CHECK(g.get_int(p + "attention.value_length", c.head_dim) == c.head_dim, UnsupportedError, "[gguf] ", g.path,
                ": ", p, "attention.value_length differs from key_length (llama.cpp's qwen3next requires equal sizes)");
  MAXTEXT_CHECK(g.get_float(p + "attention.scale", 0.0) == 0.0, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "attention.scale ", g.get_float(p + "attention.scale", 0.0), ": MaxText's ", block, " scales queries by "
                "head_dim^-0.5");
  c.normalization_layer_epsilon = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_max_timescale = g.get_float(p + "rope.freq_base", 10000.0);
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  MAXTEXT_CHECK(scaling == "none", UnsupportedError, "[gguf] ", g.path, ": ", p, "rope.scaling.type '", scaling,
                "': MaxText's ", block, " block uses the default (partial) RoPE");
  const std::int64_t rot = g.get_int(p + "rope.dimension_count", c.head_dim);
  MAXTEXT_CHECK(rot > 0 && rot <= c.head_dim && rot % 2 == 0, IoError, "[gguf] ", g.path, ": ", p,
                "rope.dimension_count ", rot, ": expected an even count in [2, head_dim = ", c.head_dim, "]");
  c.partial_rotary_factor = static_cast<double>(rot) / static_cast<double>(c.head_dim);  // exact: head_dim * f = rot
  c.num_experts = g.get_int(p + "expert_count");
  c.num_experts_per_tok = g.get_int(p + "expert_used_count");
  MAXTEXT_CHECK(c.num_experts >= 1, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "expert_count 0: MaxText's ", block, " block has an MoE in every layer");
  c.norm_topk_prob = true;  // llama.cpp's qwen3next graph always renormalises the top-k weights
  const double ws = g.get_float(p + "expert_weights_scale", 0.0);
  MAXTEXT_CHECK(ws == 0.0 || ws == 1.0, UnsupportedError, "[gguf] ", g.path, ": ", p, "expert_weights_scale ", ws,
                ": MaxText's ", block, " block does not scale the routing weights");
  c.base_moe_mlp_dim = g.get_int(p + "expert_feed_forward_length");
  c.base_mlp_dim = g.get_int(p + "feed_forward_length", c.base_moe_mlp_dim);
  const std::int64_t shared = g.get_int(p + "expert_shared_feed_forward_length", c.base_mlp_dim);
  MAXTEXT_CHECK(shared == c.base_moe_mlp_dim, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "expert_shared_feed_forward_length ", shared, " != expert_feed_forward_length ", c.base_moe_mlp_dim,
                ": MaxText's ", block, " block has one shared expert of the routed experts' width");
  c.gdn_conv_kernel_dim = g.get_int(p + "ssm.conv_kernel");
  c.gdn_key_head_dim = g.get_int(p + "ssm.state_size");
  c.gdn_num_key_heads = g.get_int(p + "ssm.group_count");
  c.gdn_num_value_heads = g.get_int(p + "ssm.time_step_rank");
  const std::int64_t inner = g.get_int(p + "ssm.inner_size");
  MAXTEXT_CHECK(c.gdn_num_value_heads > 0 && inner > 0 && inner % c.gdn_num_value_heads == 0, IoError, "[gguf] ",
                g.path, ": ", p, "ssm.inner_size ", inner, " is not a positive multiple of ssm.time_step_rank (value "
                "heads) ", c.gdn_num_value_heads);
  c.gdn_value_head_dim = inner / c.gdn_num_value_heads;
  c.inhomogeneous_layer_cycle_interval = g.get_int(p + "full_attention_interval", 4);
  const std::int64_t L = c.base_num_decoder_layers, cyc = c.inhomogeneous_layer_cycle_interval;
  if (const GgufValue* v = g.find(p + "attention.recurrent_layers")) {
    MAXTEXT_CHECK(v->is_array() && static_cast<std::int64_t>(v->ints.size()) >= L, IoError, "[gguf] ", g.path, ": ", p,
                  "attention.recurrent_layers: expected one flag per layer (", all_layers, ")");
    for (std::int64_t i = 0; i < L; ++i) {
      const bool want = !(cyc > 0 && (i + 1) % cyc == 0);
      MAXTEXT_CHECK((v->ints[static_cast<std::size_t>(i)] != 0) == want, UnsupportedError, "[gguf] ", g.path, ": ", p,
                    "attention.recurrent_layers[", i, "] is ", v->ints[static_cast<std::size_t>(i)] != 0,
                    ": MaxText's ", block, " uses full attention exactly when (i + 1) % full_attention_interval (", cyc,
                    ") == 0");
    }
  }
  if (q35) {
    // Qwen3.5's interleaved MRoPE (llama.cpp: rope.dimension_sections, four counts, the last 0 for text models); at
    // text positions MaxText's use_mrope is the partial RoPE (layers/rotary.hpp).
    const GgufValue& v = g.at(p + "rope.dimension_sections");
    MAXTEXT_CHECK(v.is_array() && v.ints.size() == 4 && v.ints[3] == 0, UnsupportedError, "[gguf] ", g.path, ": ", p,
                  "rope.dimension_sections: expected four counts with the last 0 (temporal, height, width, -)");
    c.use_mrope = true;
    c.set_list("mrope_section", {std::to_string(v.ints[0]), std::to_string(v.ints[1]), std::to_string(v.ints[2])},
               g.path);
  }
  c.max_target_length = std::min<std::int64_t>(g.get_int(p + "context_length", 131072), 131072);
  c.max_position_embeddings = c.max_target_length;
  c.vocab_size = g.vocab_size(p);
  c.derive();
  c.validate();
  return c;
}

namespace detail {

/// f(x) for every element of `t`, as f32 with t's shape; `f` throws naming the element it refuses.
template <class F>
AnyTensor gguf_elementwise(const AnyTensor& t, F f) {
  Tensor<float, 1> flat({t.numel()});
  for (std::int64_t i = 0; i < t.numel(); ++i) flat(i) = f(t.element(i), i);
  return AnyTensor::from(flat, t.source).reshaped(t.shape);
}

}  // namespace detail

/// Map a llama.cpp `qwen3next` or `qwen35moe` GGUF file's tensors to MaxText names for `cfg` (decoder_block qwen3_next
/// or qwen3_5; families/qwen3_next/import.hpp header comment). Qwen3.5's value heads come tiled and are put back in order.
inline TensorMap import_gguf_qwen3_next(const TensorMap& in, const Config& cfg, const std::string& what = "gguf") {
  const bool tiled = cfg.is("qwen3_5");
  detail::NameMapper imp(in, cfg, what, tiled ? "Qwen3.5" : "Qwen3-Next");
  const std::int64_t D = cfg.emb_dim, N = cfg.num_query_heads, KV = cfg.num_kv_heads, H = cfg.head_dim,
                     K = cfg.gdn_conv_kernel_dim, Hk = cfg.gdn_num_key_heads, Hv = cfg.gdn_num_value_heads,
                     Dk = cfg.gdn_key_head_dim, Dv = cfg.gdn_value_head_dim, F = cfg.moe_mlp_dim;
  const std::int64_t C = 2 * Hk * Dk + Hv * Dv, r = Hv / Hk;
  const auto pos = [&](std::int64_t j) { return detail::value_head_position(j, Hk, r, tiled); };
  // Qwen's (1 + w) RMSNorm weights: the converter stored 1 + w.
  const auto norm = [&](const std::string& from, const std::string& to) {
    if (const AnyTensor* t = imp.get(from)) {
      imp.put(to, detail::gguf_elementwise(*t, [](double v, std::int64_t) { return static_cast<float>(v - 1.0); }), from);
    }
  };
  imp.same("token_embd.weight", "token_embedder.embedding");
  norm("output_norm.weight", "decoder.decoder_norm.scale");
  imp.dense(imp.has("output.weight") ? "output.weight" : "token_embd.weight", "decoder.logits_dense.kernel");
  // One decoder layer: GGUF block prefix b ("blk.3.") into MaxText prefix m.
  const auto map_layer = [&](const std::string& b, const std::string& m, bool full) {
    norm(b + "attn_norm.weight", m + "input_layernorm.scale");
    norm(b + "post_attention_norm.weight", m + "post_attention_layernorm.scale");
    if (full) {
      const std::string a = m + "attention.attention.";
      const auto query = [&](const AnyTensor& t, const std::string& from) {
        imp.shape(t, {N * 2 * H, D}, from);
        imp.put(a + "query.kernel", t.reshaped({N, 2 * H, D}).permuted({2, 0, 1}), from);
      };
      if (imp.has(b + "attn_qkv.weight")) {  // fused q | k | v rows
        const std::string from = b + "attn_qkv.weight";
        const AnyTensor* t = imp.get(from);
        imp.shape(*t, {N * 2 * H + 2 * KV * H, D}, from);
        query(t->narrow(0, 0, N * 2 * H), from);
        imp.put(a + "key.kernel", t->narrow(0, N * 2 * H, KV * H).reshaped({KV, H, D}).permuted({2, 0, 1}), from);
        imp.put(a + "value.kernel", t->narrow(0, N * 2 * H + KV * H, KV * H).reshaped({KV, H, D}).permuted({2, 0, 1}),
                from);
      } else {
        if (const AnyTensor* t = imp.get(b + "attn_q.weight")) query(*t, b + "attn_q.weight");
        imp.head_proj(b + "attn_k", a + "key", KV, false);
        imp.head_proj(b + "attn_v", a + "value", KV, false);
      }
      imp.dense(b + "attn_output.weight", a + "out.kernel");
      norm(b + "attn_q_norm.weight", a + "query_norm.scale");
      norm(b + "attn_k_norm.weight", a + "key_norm.scale");
    } else {
      const std::string a = m + "attention.";
      if (imp.has(b + "ssm_in.weight")) {  // older files: the Hugging Face per-key-head grouping, unchanged
        imp.dense(b + "ssm_in.weight", a + "in_proj_qkvz.kernel");
      } else {
        const AnyTensor* qkv = imp.get(b + "attn_qkv.weight");
        const AnyTensor* z = imp.get(b + "attn_gate.weight");
        if (qkv != nullptr && z != nullptr) {
          detail::put_grouped_qkvz(imp, cfg, *qkv, *z, a + "in_proj_qkvz.kernel", b + "attn_qkv.weight",
                                   b + "attn_gate.weight", tiled);
        }
      }
      if (tiled) {  // Qwen3.5: beta and alpha as two tensors
        const AnyTensor* bt = imp.get(b + "ssm_beta.weight");
        const AnyTensor* al = imp.get(b + "ssm_alpha.weight");
        if (bt != nullptr && al != nullptr) {
          detail::put_grouped_ba(imp, cfg, *bt, *al, a + "in_proj_ba.kernel", b + "ssm_beta.weight",
                                 b + "ssm_alpha.weight", true);
        }
      } else {
        imp.dense(b + "ssm_ba.weight", a + "in_proj_ba.kernel");
      }
      if (const AnyTensor* t = imp.get(b + "ssm_out.weight")) {  // [D, Hv*Dv]: value-head columns
        imp.shape(*t, {D, Hv * Dv}, b + "ssm_out.weight");
        std::vector<AnyTensor> cols;
        for (std::int64_t j = 0; tiled && j < Hv; ++j) cols.push_back(t->narrow(1, pos(j) * Dv, Dv));
        imp.put(a + "out_proj.kernel", (tiled ? detail::concat_any(cols, 1, b + "ssm_out.weight") : *t).permuted({1, 0}),
                b + "ssm_out.weight");
      }
      if (const AnyTensor* t = imp.get(b + "ssm_conv1d.weight")) {  // [C, K]: q | k | v channels
        imp.shape(*t, {C, K}, b + "ssm_conv1d.weight");
        std::vector<AnyTensor> rows = {t->narrow(0, 0, 2 * Hk * Dk)};
        for (std::int64_t j = 0; tiled && j < Hv; ++j) rows.push_back(t->narrow(0, 2 * Hk * Dk + pos(j) * Dv, Dv));
        const AnyTensor conv = tiled ? detail::concat_any(rows, 0, b + "ssm_conv1d.weight") : *t;
        imp.put(a + "conv1d.kernel", conv.reshaped({C, 1, K}).permuted({2, 1, 0}), b + "ssm_conv1d.weight");
      }
      if (const AnyTensor* t = imp.get(b + "ssm_a")) {
        imp.shape(*t, {Hv}, b + "ssm_a");
        const std::string name = b + "ssm_a";
        imp.put(a + "A_log", detail::gguf_elementwise(*t, [&](double, std::int64_t j) {
                  const double v = t->element(pos(j));
                  MAXTEXT_CHECK(v < 0.0 && std::isfinite(v), IoError, "[", what, "] ", name, "[", pos(j), "] = ", v,
                                ": llama.cpp stores -exp(A_log), which is finite and negative");
                  return static_cast<float>(std::log(-v));
                }), name);
      }
      if (const AnyTensor* t = imp.get(b + "ssm_dt.bias")) {
        imp.shape(*t, {Hv}, b + "ssm_dt.bias");
        imp.put(a + "dt_bias", tiled ? detail::gguf_elementwise(*t, [&](double, std::int64_t j) {
                  return static_cast<float>(t->element(pos(j)));
                }) : *t, b + "ssm_dt.bias");
      }
      imp.same(b + "ssm_norm.weight", a + "norm.rms_norm.scale");
    }
    const std::string o = m + "mlp.";
    imp.dense(b + "ffn_gate_inp.weight", o + "routed_experts.gate.kernel");
    imp.gguf_routed_experts(b, o + "routed_experts.", F);
    imp.dense(b + "ffn_gate_shexp.weight", o + "shared_expert.wi_0.kernel");
    imp.dense(b + "ffn_up_shexp.weight", o + "shared_expert.wi_1.kernel");
    imp.dense(b + "ffn_down_shexp.weight", o + "shared_expert.wo.kernel");
    if (const AnyTensor* t = imp.get(b + "ffn_gate_inp_shexp.weight")) {  // [1, D] as converted, or [D]
      if (t->rank() != 1) imp.shape(*t, {1, D}, b + "ffn_gate_inp_shexp.weight");
      imp.shape(t->reshaped({t->numel()}), {D}, b + "ffn_gate_inp_shexp.weight");
      imp.put(o + "shared_expert_gate.kernel", t->reshaped({D, 1}), b + "ffn_gate_inp_shexp.weight");
    }
  };
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const bool full = cfg.inhomogeneous_layer_cycle_interval > 0 && (i + 1) % cfg.inhomogeneous_layer_cycle_interval == 0;
    map_layer("blk." + std::to_string(i) + ".", "decoder.layers_" + std::to_string(i) + ".", full);
  }
  // The next-n (MTP) layers llama.cpp's converter appends (conversion/qwen.py _QwenMtpMixin: mtp.layers.{j} as
  // blk.{L + j}, mtp.fc / pre_fc_norm_embedding / pre_fc_norm_hidden / norm as blk.{L}.nextn.eh_proj / enorm / hnorm /
  // shared_head_norm, each norm with its 1 added): the Hugging Face checkpoints' MTP layer (import_hf_qwen3_next).
  const std::int64_t L = cfg.num_decoder_layers;
  for (std::int64_t k = 1; k <= cfg.mtp_num_layers; ++k) {
    const std::string b = "blk." + std::to_string(L + k - 1) + ".", n = "blk." + std::to_string(L) + ".nextn.";
    const std::string m = "mtp_block.mtp_layer_" + std::to_string(k) + ".mtp_" + std::to_string(k) + "_";
    MAXTEXT_CHECK(imp.has(n + "eh_proj.weight"), ConfigError, "[", what, "] mtp_num_layers = ", cfg.mtp_num_layers,
                  " (the file's nextn_predict_layers) but it holds no ", n, "eh_proj.weight; set mtp_num_layers=0 to run "
                  "without");
    norm(n + "enorm.weight", m + "embedding_norm.scale");
    norm(n + "hnorm.weight", m + "hidden_state_norm.scale");
    norm(n + "shared_head_norm.weight", m + "final_norm.scale");
    if (const AnyTensor* t = imp.get(n + "eh_proj.weight")) {
      imp.shape(*t, {D, 2 * D}, n + "eh_proj.weight");
      imp.put(m + "projection.kernel", t->permuted({1, 0}), n + "eh_proj.weight");
    }
    map_layer(b, m + "transformer_layer.", true);
  }
  // Next-n layers not asked for (mtp_num_layers below the file's nextn_predict_layers) are not read.
  std::vector<std::string> mtp;
  for (const auto& [name, t] : in.tensors) {
    if (name.rfind("blk.", 0) != 0) continue;
    const std::string num = name.substr(4, name.find('.', 4) - 4);
    const bool index = !num.empty() && num.size() < 10 &&
                       std::all_of(num.begin(), num.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (index && std::stoll(num) >= L + cfg.mtp_num_layers) mtp.push_back(name);
  }
  return imp.finish(mtp);
}

}  // namespace maxtext::io
