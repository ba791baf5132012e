// families/deepseek/gguf.hpp: llama.cpp `deepseek2` GGUF files (DeepSeek-V2 / V2-Lite / V3 / R1, and the models that
// share their graph) as MaxText's deepseek block: metadata -> Config, tensor names -> canonical MaxText names.
//
// The metadata is restated as the config.json keys it was converted from (llama.cpp conversion/deepseek.py
// DeepseekV2Model and conversion/base.py), then read by config_from_hf_deepseek, so that a GGUF file and its Hugging
// Face checkpoint give the same Config and the same refusals. What only the file says:
//   - expert_gating_func 1 / 2: scoring_func softmax / sigmoid (absent: softmax, llama.cpp's default for old files);
//   - a routing bias (blk.N.exp_probs_b.bias) is DeepSeek-V3's noaux_tc routing, none V2's greedy one;
//   - expert_group_count / expert_group_used_count: n_group / topk_group;
//   - rope.scaling.yarn_log_multiplier = 0.1 * mscale_all_dim (the converter's factor, undone here as llama.cpp does);
//   - nextn_predict_layers: the multi-token-prediction layers appended after the decoder's (MaxText mtp_num_layers).
// Tensors: the converter splits kv_b_proj into attn_k_b [heads, kv_lora_rank, qk_nope] (each head's key rows
// transposed) and attn_v_b [heads, v_head_dim, kv_lora_rank]; they are put back together as MaxText's wkv_b (one copy,
// [kv_lora_rank, heads, qk_nope + v_head_dim]). Older files keep attn_kv_b whole. Every other matrix is a view.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/name_mapper.hpp"

namespace maxtext::io {

/// True for GGUF general.architecture deepseek2 (llama.cpp's graph for DeepSeek-V2, V2-Lite, V3 and R1).
inline bool is_gguf_deepseek(const std::string& arch) { return arch == "deepseek2"; }

/// A Config from the metadata of a llama.cpp `deepseek2` GGUF file (decoder_block deepseek, MLA, f32).
inline Config config_from_gguf_deepseek(const GgufFile& g) {
  const std::string p = "deepseek2.";
  const auto where = [&](const std::string& key) { return "[gguf] " + g.path + ": " + p + key; };
  const std::int64_t all_layers = g.get_int(p + "block_count"), nextn = g.get_int(p + "nextn_predict_layers", 0);
  MAXTEXT_CHECK(nextn >= 0 && nextn < all_layers && all_layers <= Config::Limits::layers, IoError, where("block_count"),
                " ", all_layers, " with nextn_predict_layers ", nextn, ": expected 0 <= nextn < block_count <= ",
                Config::Limits::layers);
  const std::int64_t L = all_layers - nextn, first_dense = g.get_int(p + "leading_dense_block_count", 0);
  const std::int64_t heads = g.get_int(p + "attention.head_count"), rope = g.get_int(p + "rope.dimension_count");
  const std::int64_t vocab = g.vocab_size(p);
  // MLA head sizes: files converted since llama.cpp split kv_b store them as key_length_mla / value_length_mla (and
  // key_length = kv_lora_rank + rope, the cached width); older files as key_length / value_length.
  const bool split = g.has(p + "attention.key_length_mla");
  const std::int64_t head_k = g.get_int(p + (split ? "attention.key_length_mla" : "attention.key_length"));
  const std::int64_t head_v = g.get_int(p + (split ? "attention.value_length_mla" : "attention.value_length"));
  MAXTEXT_CHECK(rope > 0 && head_k > rope, IoError, where("rope.dimension_count"), " ", rope, ": expected 0 < rope < ",
                "the key head size ", head_k, " (qk_nope_head_dim = key head - rope)");
  MAXTEXT_CHECK(g.get_float(p + "attention.temperature_scale", 0.0) == 0.0, UnsupportedError,
                where("attention.temperature_scale"), " (Mistral Large 3's query temperature) has no MaxText equivalent");

  nlohmann::json j;
  const std::string bias_name = "blk." + std::to_string(first_dense) + ".exp_probs_b.bias";
  const bool routing_bias = first_dense < L && g.tensor_shape(bias_name).has_value();
  j["model_type"] = routing_bias ? "deepseek_v3" : "deepseek_v2";
  j["hidden_size"] = g.get_int(p + "embedding_length");
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = heads;
  j["num_hidden_layers"] = L;
  if (routing_bias) j["num_nextn_predict_layers"] = nextn;
  j["vocab_size"] = vocab;
  j["rms_norm_eps"] = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6);
  j["rope_theta"] = g.get_float(p + "rope.freq_base", 10000.0);
  MAXTEXT_CHECK(g.tensor_shape("output.weight").has_value(), UnsupportedError, "[gguf] ", g.path, ": no output.weight "
                "(the head tied to token_embd.weight): MaxText's tied head (bf16-rounded table, /sqrt(D)) differs");
  j["intermediate_size"] = g.get_int(p + "feed_forward_length");
  j["max_position_embeddings"] = g.get_int(p + "context_length", 4096);
  j["first_k_dense_replace"] = first_dense;
  j["moe_intermediate_size"] = g.get_int(p + "expert_feed_forward_length");
  j["n_routed_experts"] = g.get_int(p + "expert_count");
  j["num_experts_per_tok"] = g.get_int(p + "expert_used_count");
  j["n_shared_experts"] = g.get_int(p + "expert_shared_count", 0);
  const double scale = g.get_float(p + "expert_weights_scale", 0.0);
  j["routed_scaling_factor"] = scale == 0.0 ? 1.0 : scale;  // llama.cpp: 0 (absent) scales by nothing
  j["q_lora_rank"] = g.get_int(p + "attention.q_lora_rank", 0);
  j["kv_lora_rank"] = g.get_int(p + "attention.kv_lora_rank");
  j["qk_rope_head_dim"] = rope;
  j["qk_nope_head_dim"] = head_k - rope;
  j["v_head_dim"] = head_v;
  const std::int64_t gating = g.get_int(p + "expert_gating_func", 0);
  MAXTEXT_CHECK(gating == 1 || gating == 2 || (gating == 0 && !((L == 47 || L == 48) && vocab == 154880)),
                UnsupportedError, where("expert_gating_func"), " ", gating, ": expected 1 (softmax) or 2 (sigmoid)",
                gating == 0 ? " (absent in a GLM-4.7-Lite-shaped file, for which llama.cpp guesses sigmoid)" : "");
  j["scoring_func"] = gating == 2 ? "sigmoid" : "softmax";
  j["norm_topk_prob"] = g.get_bool(p + "expert_weights_norm", false);
  const std::int64_t groups = g.get_int(p + "expert_group_count", 1), groups_used = g.get_int(p + "expert_group_used_count", 1);
  MAXTEXT_CHECK(routing_bias || groups <= 1, UnsupportedError, where("expert_group_count"), " ", groups,
                " without a routing bias (", bias_name, "): llama.cpp's group-limited softmax routing (top-2 sums "
                "per group) has no MaxText equivalent");
  j["topk_method"] = routing_bias ? "noaux_tc" : "greedy";
  j["n_group"] = groups;
  j["topk_group"] = groups_used;
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  if (scaling == "yarn") {
    MAXTEXT_CHECK(g.get_float(p + "rope.scaling.yarn_ext_factor", 1.0) == 1.0 &&
                      g.get_float(p + "rope.scaling.yarn_attn_factor", 1.0) == 1.0,
                  UnsupportedError, where("rope.scaling.yarn_ext_factor"), " / yarn_attn_factor: MaxText's YaRN takes "
                  "the defaults (1, 1)");
    const double ms = g.get_float(p + "rope.scaling.yarn_log_multiplier", 0.0) / 0.1;  // llama.cpp: log_mul /= 0.1
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", g.get_float(p + "rope.scaling.factor", 1.0)},
                         {"original_max_position_embeddings", g.get_int(p + "rope.scaling.original_context_length")},
                         {"beta_fast", g.get_float(p + "rope.scaling.yarn_beta_fast", 32.0)},
                         {"beta_slow", g.get_float(p + "rope.scaling.yarn_beta_slow", 1.0)},
                         {"mscale", ms},
                         {"mscale_all_dim", ms}};
  } else {
    // No scaling: llama.cpp rotates the interleaved pairs (2i, 2i + 1) with the plain frequencies, as Hugging Face's
    // DeepSeek does. That is MaxText's YaRN with factor 1 (interpolated and extrapolated frequencies agree, mscale 1),
    // the form of its rotary embedding that reads interleaved pairs.
    MAXTEXT_CHECK(scaling == "none", UnsupportedError, where("rope.scaling.type"), " '", scaling,
                  "': MaxText's deepseek block takes YaRN or no scaling");
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", 1.0},
                         {"original_max_position_embeddings", j["max_position_embeddings"]},
                         {"mscale", 1.0},
                         {"mscale_all_dim", 1.0}};
  }
  j["torch_dtype"] = "float32";
  Config c = config_from_hf_deepseek(j, "gguf " + g.path);
  // MaxText picks DeepSeek-V3's routing (selection by the biased scores, weights from the unbiased ones, group
  // limits) by model_name prefix "deepseek3" (moe.py get_topk), as the Hugging Face import names a V3 checkpoint.
  c.model_name = routing_bias ? "deepseek3-gguf" : "deepseek2-gguf";
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.scan_layers = false;
  c.derive();
  c.validate();
  return c;
}

namespace detail {

/// `t` as f32 when it is stored in blocks (Q8_0 ...), which do not permute or concatenate across their block axis.
inline AnyTensor unblocked(const AnyTensor& t) {
  if (dtype_block(t.dtype) == 1 && t.dtype != DType::ggml) return t;
  Tensor<float, 1> flat({t.numel()});
  for (std::int64_t i = 0; i < t.numel(); ++i) flat(i) = static_cast<float>(t.element(i));
  return AnyTensor::from(flat, t.source).reshaped(t.shape);
}

}  // namespace detail

/// Map a llama.cpp `deepseek2` GGUF file's tensors to canonical MaxText names for `cfg` (decoder_block deepseek; the
/// names canonicalize_hf_deepseek gives the Hugging Face checkpoint). Next-n layers beyond cfg.mtp_num_layers are not
/// read.
inline TensorMap import_gguf_deepseek(const TensorMap& in, const Config& cfg, const std::string& what = "gguf") {
  MAXTEXT_CHECK(cfg.is("deepseek"), ConfigError, "[", what, "] import_gguf_deepseek: decoder_block '",
                cfg.decoder_block, "' is not deepseek");
  detail::NameMapper imp(in, cfg, what, "DeepSeek");
  const std::int64_t D = cfg.emb_dim, N = cfg.num_query_heads, L = cfg.num_decoder_layers;
  const std::int64_t R = cfg.kv_lora_rank, nope = cfg.qk_nope_head_dim, V = cfg.v_head_dim, HK = cfg.head_dim;
  const std::int64_t F = cfg.moe_mlp_dim, Q = cfg.q_lora_rank;
  // [heads * h, in] -> MaxText [in, heads, h].
  const auto heads_out = [&](const std::string& from, const std::string& to, std::int64_t h, std::int64_t in_dim) {
    if (const AnyTensor* t = imp.get(from)) {
      imp.shape(*t, {N * h, in_dim}, from);
      imp.put(to, t->reshaped({N, h, in_dim}).permuted({2, 0, 1}), from);
    }
  };
  const auto layer = [&](const std::string& b, const std::string& m, bool dense) {
    imp.same(b + "attn_norm.weight", m + "pre_self_attention_layer_norm.scale");
    imp.same(b + "ffn_norm.weight", m + "post_self_attention_layer_norm.scale");
    const std::string a = m + "self_attention.";
    if (Q > 0) {
      imp.dense(b + "attn_q_a.weight", a + "wq_a.kernel");
      imp.same(b + "attn_q_a_norm.weight", a + "q_norm.scale");
      heads_out(b + "attn_q_b.weight", a + "wq_b.kernel", HK, Q);
    } else {
      heads_out(b + "attn_q.weight", a + "query.kernel", HK, D);
    }
    imp.dense(b + "attn_kv_a_mqa.weight", a + "wkv_a.kernel");
    imp.same(b + "attn_kv_a_norm.weight", a + "kv_norm.scale");
    if (imp.has(b + "attn_kv_b.weight")) {  // files from before the split
      heads_out(b + "attn_kv_b.weight", a + "wkv_b.kernel", nope + V, R);
    } else {
      const AnyTensor* kb = imp.get(b + "attn_k_b.weight");
      const AnyTensor* vb = imp.get(b + "attn_v_b.weight");
      if (kb != nullptr && vb != nullptr) {
        imp.shape(*kb, {N, R, nope}, b + "attn_k_b.weight");
        imp.shape(*vb, {N, V, R}, b + "attn_v_b.weight");
        // Per head: its key rows (k_b transposed back), then its value rows: kv_b_proj [N, nope + V, R].
        const AnyTensor kv = detail::concat_any({detail::unblocked(*kb).permuted({0, 2, 1}), detail::unblocked(*vb)}, 1,
                                                b + "attn_k_b.weight + " + b + "attn_v_b.weight");
        imp.put(a + "wkv_b.kernel", kv.permuted({2, 0, 1}), b + "attn_k_b.weight + " + b + "attn_v_b.weight");
      }
    }
    if (const AnyTensor* t = imp.get(b + "attn_output.weight")) {  // [D, N * V] -> [N, V, D]
      imp.shape(*t, {D, N * V}, b + "attn_output.weight");
      imp.put(a + "out.kernel", t->reshaped({D, N, V}).permuted({1, 2, 0}), b + "attn_output.weight");
    }
    if (dense) {
      imp.dense(b + "ffn_gate.weight", m + "mlp.wi_0.kernel");
      imp.dense(b + "ffn_up.weight", m + "mlp.wi_1.kernel");
      imp.dense(b + "ffn_down.weight", m + "mlp.wo.kernel");
      return;
    }
    const std::string o = m + "DeepSeekMoeBlock_0.";
    imp.dense(b + "ffn_gate_inp.weight", o + "MoeBlock_0.gate.kernel");
    if (cfg.routed_bias) imp.same(b + "exp_probs_b.bias", o + "MoeBlock_0.gate.bias");
    imp.gguf_routed_experts(b, o + "MoeBlock_0.", F);
    if (cfg.shared_experts > 0) {
      imp.dense(b + "ffn_gate_shexp.weight", o + "shared_experts.wi_0.kernel");
      imp.dense(b + "ffn_up_shexp.weight", o + "shared_experts.wi_1.kernel");
      imp.dense(b + "ffn_down_shexp.weight", o + "shared_experts.wo.kernel");
    }
  };
  imp.same("token_embd.weight", "token_embedder.embedding");
  imp.same("output_norm.weight", "decoder.decoder_norm.scale");
  imp.dense("output.weight", "decoder.logits_dense.kernel");
  const std::int64_t first = cfg.first_num_dense_layers;
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string m = i < first ? "decoder.dense_layers_" + std::to_string(i) + "."
                                    : "decoder.moe_layers_" + std::to_string(i - first) + ".";
    layer("blk." + std::to_string(i) + ".", m, i < first);
  }
  // The next-n (MTP) layers: blk.{L + k - 1}.nextn.{enorm, hnorm, eh_proj} and an MoE layer, as MaxText's
  // mtp_block.mtp_layer_k. Their own embedding, head and head norm, where the file has them, must repeat the model's:
  // MaxText's MTP block shares those (checked as canonicalize_hf_deepseek checks the Hugging Face copies).
  for (std::int64_t k = 1; k <= cfg.mtp_num_layers; ++k) {
    const std::string b = "blk." + std::to_string(L + k - 1) + ".";
    const std::string m = "mtp_block.mtp_layer_" + std::to_string(k) + ".mtp_" + std::to_string(k) + "_";
    MAXTEXT_CHECK(imp.has(b + "nextn.eh_proj.weight"), ConfigError, "[", what, "] mtp_num_layers = ", cfg.mtp_num_layers,
                  " but the file holds no ", b, "nextn.eh_proj.weight (next-n layer ", k,
                  "); set mtp_num_layers=0 to run without");
    imp.same(b + "nextn.enorm.weight", m + "embedding_norm.scale");
    imp.same(b + "nextn.hnorm.weight", m + "hidden_state_norm.scale");
    if (const AnyTensor* t = imp.get(b + "nextn.eh_proj.weight")) {
      imp.shape(*t, {D, 2 * D}, b + "nextn.eh_proj.weight");
      imp.put(m + "projection.kernel", t->permuted({1, 0}), b + "nextn.eh_proj.weight");
    }
    layer(b, m + "transformer_layer.", false);
    imp.mark_used(detail::check_nextn_shared(in, b,
                                             {{"nextn.shared_head_norm.weight", "output_norm.weight"},
                                              {"nextn.shared_head_head.weight", "output.weight"},
                                              {"nextn.embed_tokens.weight", "token_embd.weight"}},
                                             what));
  }
  // Next-n layers not asked for (mtp_num_layers below the file's nextn_predict_layers) are not read.
  std::vector<std::string> skipped;
  for (std::int64_t i = L + cfg.mtp_num_layers; i < Config::Limits::layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    bool any = false;
    for (const auto& [name, t] : in.tensors) any = any || name.rfind(b, 0) == 0;
    if (!any) break;
    skipped.push_back(b);
  }
  return imp.finish(skipped);
}

}  // namespace maxtext::io
