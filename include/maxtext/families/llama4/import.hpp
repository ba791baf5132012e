// families/llama4/import.hpp: Llama 4 checkpoints from Hugging Face into MaxText names for decoder_block llama4
// (families/llama4/llama4.hpp), text part only, as MaxText's converter does
// (checkpoint_conversion/standalone_scripts/llama4_ckpt_unscanned.py, which reads HF names through its
// _hf_to_maxtext_mapping); docs/numerics.md §Llama 4 from Hugging Face.
//
// config.json: model_type llama4 (Llama4ForConditionalGeneration; the text model's keys under text_config, tensors
// under `language_model.`, the vision tower's tensors ignored) or llama4_text (Llama4ForCausalLM).
//
// Hugging Face names -> MaxText:
//   [language_model.]model.embed_tokens.weight -> token_embedder.embedding; model.norm.weight ->
//     decoder.decoder_norm.scale; lm_head.weight [V, D] -> decoder.logits_dense.kernel [D, V] (view);
//   model.layers.i.input_layernorm / post_attention_layernorm -> decoder.layers_i.pre_ / post_self_attention_layer_norm;
//   self_attn.{q,k,v}_proj.weight [heads*H, D] -> self_attention.{query,key,value}.kernel [D, heads, H] (view: HF's
//     Llama 4 rotates adjacent lane pairs as complex numbers, which is the pairing of MaxText's LLaMA-3.1 RoPE, so
//     the rows are not permuted; nor is the query scaled, the block scales queries by head_dim^-0.5 in the forward
//     pass, as MaxText's converter has scale_query False for llama4); o_proj [D, N*H] -> out.kernel [N, H, D];
//   MoE layers (moe_layers): feed_forward.router.weight [E, D] -> Llama4MoEBlock_0.MoeBlock_0.gate.kernel [D, E];
//     feed_forward.experts.gate_up_proj [E, D, 2F] -> MoeBlock_0.wi_0 = [..., :F], wi_1 = [..., F:] (halves, not
//     interleaved as GPT-OSS's are); experts.down_proj [E, F, D] -> MoeBlock_0.wo;
//     feed_forward.shared_expert.{gate,up,down}_proj -> Llama4MoEBlock_0.shared_experts.{wi_0,wi_1,wo}.kernel;
//   dense layers: feed_forward.{gate,up,down}_proj -> mlp.{wi_0,wi_1,wo}.kernel (width intermediate_size_mlp).
//
// GGUF (llama.cpp `llama4`, as its converter conversion/llama.py Llama4Model writes it and src/models/llama4.cpp reads
// it): token_embd, output_norm, output (absent: tied); blk.i.attn_norm, attn_{q,k,v,output} (q/k rows as Hugging
// Face's, undo_permute = False), ffn_norm; MoE layers ffn_gate_inp [E, D], ffn_{gate,up}_exps [E, F, D],
// ffn_down_exps [E, D, F], ffn_{gate,up,down}_shexp; dense layers ffn_{gate,up,down}; rope_freqs.weight (LLaMA-3
// divisors per lane pair, from which the llama3_rope_* keys are recovered). What llama.cpp hard-codes for the
// architecture becomes config: chunk 8192, NoPE every 4th layer, temperature tuning 0.1 / 8192, and the L2 qk norm
// unless the model has 128 experts (llama.cpp's use_kq_norm rule).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/json_fields.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// True for config.json model_type llama4 or llama4_text.
inline bool is_hf_llama4(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return false;
  const std::string t = j["model_type"].get<std::string>();
  return t == "llama4" || t == "llama4_text";
}

namespace detail {

/// What every imported Llama 4 config shares (MaxText's llama4 ymls, f32, unscanned).
inline void base_llama4_config(Config& c) {
  base_llama_config(c);
  c.decoder_block = "llama4";
  c.rope_type = "llama3.1";
  c.shared_experts = 1;
}

/// Hugging Face `rope_scaling` of type llama3 -> rope_type llama3.1 with its four parameters (the llama3_rope_* keys;
/// MaxText's own values, 8 / 1 / 4 / 8192, are the defaults). Each must be present and numeric.
inline void set_llama3_rope_scaling(Config& c, const nlohmann::json& rs, const std::string& where) {
  auto num = [&](const char* key) {
    MAXTEXT_CHECK(rs.contains(key) && rs[key].is_number(), IoError, "[hf] ", where, ": rope_scaling.", key,
                  rs.contains(key) ? ": expected a number, found " + rs[key].dump() : std::string(" is missing"),
                  " (rope_type llama3)");
    return rs[key].get<double>();
  };
  c.rope_type = "llama3.1";
  c.rope_use_scale = true;
  c.llama3_rope_factor = num("factor");
  c.llama3_rope_low_freq_factor = num("low_freq_factor");
  c.llama3_rope_high_freq_factor = num("high_freq_factor");
  c.llama3_rope_original_context = num("original_max_position_embeddings");
  MAXTEXT_CHECK(c.llama3_rope_factor > 0 && c.llama3_rope_low_freq_factor > 0 &&
                    c.llama3_rope_high_freq_factor >= c.llama3_rope_low_freq_factor && c.llama3_rope_original_context > 0,
                IoError, "[hf] ", where, ": rope_scaling ", rs.dump(),
                ": factor, low_freq_factor and original_max_position_embeddings must be > 0 and high_freq_factor >= "
                "low_freq_factor");
}

}  // namespace detail

/// A Config from a Llama 4 config.json (its text_config for model_type llama4). What MaxText's llama4 cannot express
/// is refused by key: attention biases, an activation other than silu, top-k routing with k != 1, a no_rope_layers /
/// moe_layers / layer_types pattern that is not periodic as MaxText's intervals are, full attention on RoPE layers,
/// and temperature-tuning constants other than MaxText's fixed attn_scale 0.1 and floor_scale 8192.
inline Config config_from_hf_llama4(const nlohmann::json& top, const std::string& where) {
  const bool multimodal = top.value("model_type", std::string()) == "llama4";
  MAXTEXT_CHECK(!multimodal || (top.contains("text_config") && top["text_config"].is_object()), IoError, "[hf] ", where,
                ": model_type llama4 needs a text_config object");
  const nlohmann::json& j = multimodal ? top["text_config"] : top;
  const std::string w = where + (multimodal ? ": text_config" : "");
  const detail::JsonFields fields(j, w);
  Config c;
  detail::base_llama4_config(c);
  c.base_emb_dim = fields.integer("hidden_size", 0, true);
  c.base_moe_mlp_dim = fields.integer("intermediate_size", 0, true);
  c.base_mlp_dim = fields.integer("intermediate_size_mlp", 0, true);
  c.base_num_decoder_layers = fields.integer("num_hidden_layers", 0, true);
  c.base_num_query_heads = fields.integer("num_attention_heads", 0, true);
  c.base_num_kv_heads = fields.integer("num_key_value_heads", c.base_num_query_heads, false);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_num_decoder_layers > 0 &&
                    c.base_num_decoder_layers <= Config::Limits::layers,
                IoError, "[hf] ", w, ": num_attention_heads must be > 0 and num_hidden_layers in [1, ",
                Config::Limits::layers, "], found ", c.base_num_query_heads, " and ", c.base_num_decoder_layers);
  c.head_dim = fields.integer("head_dim", c.base_emb_dim / c.base_num_query_heads, false);
  c.vocab_size = fields.integer("vocab_size", 0, true);
  c.num_experts = fields.integer("num_local_experts", 0, true);
  c.num_experts_per_tok = fields.integer("num_experts_per_tok", 1, false);
  MAXTEXT_CHECK(c.num_experts_per_tok == 1, UnsupportedError, "[hf] ", w, ": num_experts_per_tok ", c.num_experts_per_tok,
                ": MaxText's Llama 4 routing is defined for one expert per token");
  c.normalization_layer_epsilon = fields.number("rms_norm_eps", 1e-5);
  c.rope_max_timescale = fields.number("rope_theta", 500000.0);
  c.use_qk_norm = fields.boolean("use_qk_norm", true, true);
  c.temperature_tuning = fields.boolean("attn_temperature_tuning", true, true);
  MAXTEXT_CHECK(fields.number("attn_scale", 0.1) == 0.1 && fields.number("floor_scale", 8192.0) == 8192.0, UnsupportedError, "[hf] ", w,
                ": attn_scale ", fields.number("attn_scale", 0.1), " / floor_scale ", fields.number("floor_scale", 8192.0),
                ": MaxText's Llama 4 temperature tuning is fixed at 0.1 / 8192");
  const std::string act = j.value("hidden_act", std::string("silu"));
  MAXTEXT_CHECK(act == "silu", UnsupportedError, "[hf] ", w, ": hidden_act '", act, "' is not supported (silu)");
  MAXTEXT_CHECK(!fields.boolean("attention_bias", false, true), UnsupportedError, "[hf] ", w,
                ": attention_bias = true: MaxText's llama4 attention has no biases");
  MAXTEXT_CHECK(!fields.boolean("tie_word_embeddings", false, true), UnsupportedError, "[hf] ", w,
                ": tie_word_embeddings = true: Llama 4 (and MaxText's llama4 ymls) have a separate lm_head");
  const std::int64_t L = c.base_num_decoder_layers;
  // Per-layer lists -> MaxText's intervals: layer i is NoPE when (i + 1) % nope_layer_interval == 0 and MoE when
  // (i + 1) % interleave_moe_layer_step == 0 (llama4.py); HF's lists must follow those patterns exactly.
  auto int_list = [&](const char* key) {
    std::vector<std::int64_t> v;
    const auto& a = j[key];
    MAXTEXT_CHECK(a.is_array() && static_cast<std::int64_t>(a.size()) == L, IoError, "[hf] ", w, ": ", key,
                  ": expected a list of ", L, " entries (num_hidden_layers), found ", a.dump());
    for (const auto& e : a) {
      MAXTEXT_CHECK(e.is_number_integer() || e.is_boolean(), IoError, "[hf] ", w, ": ", key, ": entry ", e.dump(),
                    " is not an integer");
      v.push_back(e.is_boolean() ? static_cast<std::int64_t>(e.get<bool>()) : e.get<std::int64_t>());
    }
    return v;
  };
  std::vector<bool> rope(static_cast<std::size_t>(L));
  if (j.contains("no_rope_layers") && !j["no_rope_layers"].is_null() && !j["no_rope_layers"].empty()) {
    const auto v = int_list("no_rope_layers");  // HF: 1 = this layer uses RoPE
    for (std::int64_t i = 0; i < L; ++i) rope[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(i)] != 0;
  } else {
    const std::int64_t every = fields.integer("no_rope_layer_interval", 4, false);  // HF's default pattern
    for (std::int64_t i = 0; i < L; ++i) rope[static_cast<std::size_t>(i)] = every <= 0 || (i + 1) % every != 0;
  }
  const auto first_nope = std::find(rope.begin(), rope.end(), false);
  c.nope_layer_interval = first_nope == rope.end() ? -1 : (first_nope - rope.begin()) + 1;
  for (std::int64_t i = 0; i < L; ++i) {
    MAXTEXT_CHECK(rope[static_cast<std::size_t>(i)] == !(c.nope_layer_interval > 0 && (i + 1) % c.nope_layer_interval == 0),
                  UnsupportedError, "[hf] ", w, ": no_rope_layers: layer ", i,
                  rope[static_cast<std::size_t>(i)] ? " uses" : " skips", " RoPE, but MaxText's llama4 puts a NoPE layer "
                  "exactly every nope_layer_interval-th layer (the first NoPE layer here makes it ", c.nope_layer_interval, ")");
  }
  c.interleave_moe_layer_step = fields.integer("interleave_moe_layer_step", 1, false);
  if (j.contains("moe_layers") && !j["moe_layers"].is_null()) {
    const auto& a = j["moe_layers"];
    MAXTEXT_CHECK(a.is_array(), IoError, "[hf] ", w, ": moe_layers: expected a list of layer indices, found ", a.dump());
    std::vector<std::int64_t> want;
    for (std::int64_t i = 0; i < L; ++i) {
      if (c.interleave_moe_layer_step > 0 && (i + 1) % c.interleave_moe_layer_step == 0) want.push_back(i);
    }
    std::vector<std::int64_t> got;
    for (const auto& e : a) {
      MAXTEXT_CHECK(e.is_number_integer(), IoError, "[hf] ", w, ": moe_layers: entry ", e.dump(), " is not an integer");
      got.push_back(e.get<std::int64_t>());
    }
    MAXTEXT_CHECK(got == want, UnsupportedError, "[hf] ", w, ": moe_layers ", a.dump(),
                  ": MaxText's llama4 makes layer i MoE exactly when (i + 1) % interleave_moe_layer_step (",
                  c.interleave_moe_layer_step, ") == 0");
  }
  c.chunk_attn_window_size = fields.integer("attention_chunk_size", 8192, false);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const auto& lt = j["layer_types"];
    MAXTEXT_CHECK(lt.is_array() && static_cast<std::int64_t>(lt.size()) == L, IoError, "[hf] ", w, ": layer_types has ",
                  lt.is_array() ? lt.size() : 0, " entries for num_hidden_layers ", L);
    for (std::int64_t i = 0; i < L; ++i) {
      const char* want = rope[static_cast<std::size_t>(i)] ? "chunked_attention" : "full_attention";
      MAXTEXT_CHECK(lt[static_cast<std::size_t>(i)] == want, UnsupportedError, "[hf] ", w, ": layer_types[", i, "] is ",
                    lt[static_cast<std::size_t>(i)].dump(), ": MaxText's llama4 uses chunked attention on every RoPE "
                    "layer and full attention on the NoPE layers (expected \"", want, "\")");
    }
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const auto& rs = j["rope_scaling"];
    MAXTEXT_CHECK(rs.is_object(), IoError, "[hf] ", w, ": rope_scaling: expected an object, found ", rs.dump());
    const std::string rt = rs.value("rope_type", rs.value("type", std::string()));
    MAXTEXT_CHECK(rt == "llama3", UnsupportedError, "[hf] ", w, ": rope_scaling type '", rt,
                  "': Llama 4's RoPE layers use llama3 scaling or none");
    detail::set_llama3_rope_scaling(c, rs, w);
  } else {
    c.rope_use_scale = false;  // MaxText's llama4-17b-128e.yml (Maverick) likewise
  }
  if (j.contains("max_position_embeddings") && j["max_position_embeddings"].is_number_integer()) {
    // Scout declares 10M positions. max_target_length sizes the rotary tables built with the model, so it stops at
    // 128K positions here (as Llama 3.1's files declare); `max_target_length=...` raises it.
    c.max_position_embeddings = j["max_position_embeddings"].get<std::int64_t>();
    c.max_target_length = std::min<std::int64_t>(c.max_position_embeddings, 131072);
  }
  c.derive();
  c.validate();
  return c;
}

/// Map a Hugging Face Llama 4 checkpoint (Llama4ForConditionalGeneration or Llama4ForCausalLM) to MaxText names for
/// `cfg`. The vision tower and projector of a multimodal file are ignored; every other unused tensor is an error.
inline TensorMap import_hf_llama4(const TensorMap& in, const Config& cfg, const std::string& what = "hf") {
  detail::NameMapper imp(in, cfg, what, "Llama 4");
  const std::string root = in.has("language_model.model.embed_tokens.weight") || in.has("language_model.lm_head.weight")
                               ? "language_model."
                               : "";
  const std::int64_t E = cfg.num_experts, D = cfg.emb_dim, F = cfg.moe_mlp_dim;
  imp.same(root + "model.embed_tokens.weight", "token_embedder.embedding");
  imp.same(root + "model.norm.weight", "decoder.decoder_norm.scale");
  imp.dense(root + "lm_head.weight", "decoder.logits_dense.kernel");
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string h = root + "model.layers." + std::to_string(i) + ".", m = "decoder.layers_" + std::to_string(i) + ".";
    imp.same(h + "input_layernorm.weight", m + "pre_self_attention_layer_norm.scale");
    imp.same(h + "post_attention_layernorm.weight", m + "post_self_attention_layer_norm.scale");
    imp.head_proj(h + "self_attn.q_proj", m + "self_attention.query", cfg.num_query_heads, false);
    imp.head_proj(h + "self_attn.k_proj", m + "self_attention.key", cfg.num_kv_heads, false);
    imp.head_proj(h + "self_attn.v_proj", m + "self_attention.value", cfg.num_kv_heads, false);
    imp.out_proj(h + "self_attn.o_proj", m + "self_attention.out", false);
    const std::string f = h + "feed_forward.";
    if (cfg.interleave_moe_layer_step > 0 && (i + 1) % cfg.interleave_moe_layer_step == 0) {
      const std::string o = m + "Llama4MoEBlock_0.";
      imp.dense(f + "router.weight", o + "MoeBlock_0.gate.kernel");
      if (const AnyTensor* t = imp.get(f + "experts.gate_up_proj")) {
        imp.shape(*t, {E, D, 2 * F}, f + "experts.gate_up_proj");
        const AnyTensor halves = detail::NameMapper::contiguous(*t).reshaped({E, D, 2, F});
        imp.put(o + "MoeBlock_0.wi_0", halves.select(2, 0), f + "experts.gate_up_proj");
        imp.put(o + "MoeBlock_0.wi_1", halves.select(2, 1), f + "experts.gate_up_proj");
      }
      if (const AnyTensor* t = imp.get(f + "experts.down_proj")) {
        imp.shape(*t, {E, F, D}, f + "experts.down_proj");
        imp.put(o + "MoeBlock_0.wo", *t, f + "experts.down_proj");
      }
      imp.dense(f + "shared_expert.gate_proj.weight", o + "shared_experts.wi_0.kernel");
      imp.dense(f + "shared_expert.up_proj.weight", o + "shared_experts.wi_1.kernel");
      imp.dense(f + "shared_expert.down_proj.weight", o + "shared_experts.wo.kernel");
    } else {
      imp.dense(f + "gate_proj.weight", m + "mlp.wi_0.kernel");
      imp.dense(f + "up_proj.weight", m + "mlp.wi_1.kernel");
      imp.dense(f + "down_proj.weight", m + "mlp.wo.kernel");
    }
  }
  return imp.finish({"vision_model.", "multi_modal_projector.", root + "model.rotary_emb."});
}

/// True for GGUF general.architecture llama4.
inline bool is_gguf_llama4(const std::string& arch) { return arch == "llama4"; }

namespace detail {

/// The LLaMA-3 divisor of lane pair i (head of d lanes, base theta) for `c`'s llama3_rope_* keys, in double.
inline double llama3_divisor(const Config& c, std::int64_t i, std::int64_t d) {
  const double f = 1.0 / std::pow(c.rope_max_timescale, static_cast<double>(2 * i) / static_cast<double>(d));
  const double wl = 2.0 * 3.141592653589793 / f, ctx = c.llama3_rope_original_context;
  const double lo = c.llama3_rope_low_freq_factor, hi = c.llama3_rope_high_freq_factor, factor = c.llama3_rope_factor;
  if (wl < ctx / hi) return 1.0;
  if (wl > ctx / lo || hi == lo) return factor;
  const double sm = (ctx / wl - lo) / (hi - lo);
  return 1.0 / ((1.0 - sm) / factor + sm);
}

/// Recover the llama3_rope_* keys from llama.cpp's rope_freqs.weight (divisor per lane pair, as its converter
/// computes them from Hugging Face's rope_scaling): the factor is the largest divisor; pairs strictly between 1 and
/// the factor fix the high-frequency factor with low_freq_factor 1 and an original context of 8192 (what every
/// released LLaMA-3-scaled model uses); without such pairs low = high = 1 and the context is placed between the
/// last unscaled and the first scaled wavelength (8192 when it fits). The table is then recomputed from the keys and
/// must match every divisor to 1e-3 relative, or the file is refused naming the first pair that differs.
inline void llama3_rope_from_divisors(Config& c, const AnyTensor& rf, const std::string& where) {
  const std::int64_t d = c.head_dim, n = d / 2;
  MAXTEXT_CHECK(rf.numel() == n, IoError, "[gguf] ", where, ": rope_freqs.weight has ", rf.numel(),
                " values, expected head_dim/2 = ", n);
  double factor = 1.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = rf.element(i);
    MAXTEXT_CHECK(std::isfinite(v) && v >= 1.0 - 1e-6, IoError, "[gguf] ", where, ": rope_freqs.weight[", i, "] = ", v,
                  ": LLaMA-3 divisors are finite and >= 1");
    factor = std::max(factor, v);
  }
  c.rope_type = "llama3.1";
  if (factor <= 1.0 + 1e-6) {  // no scaling at all
    c.rope_use_scale = false;
    return;
  }
  c.rope_use_scale = true;
  c.llama3_rope_factor = factor;
  c.llama3_rope_low_freq_factor = 1.0;
  c.llama3_rope_original_context = 8192.0;
  auto wavelength = [&](std::int64_t i) {
    return 2.0 * 3.141592653589793 * std::pow(c.rope_max_timescale, static_cast<double>(2 * i) / static_cast<double>(d));
  };
  double hi = 1.0, last_unscaled = 0.0, first_scaled = 0.0;
  bool smooth = false;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = rf.element(i), wl = wavelength(i);
    if (v <= 1.0 + 1e-6) last_unscaled = std::max(last_unscaled, wl);
    if (v >= factor * (1.0 - 1e-6) && (first_scaled == 0.0 || wl < first_scaled)) first_scaled = wl;
    if (!smooth && v > 1.0 + 1e-6 && v < factor * (1.0 - 1e-6)) {
      // 1/v = (1 - s)/factor + s  ->  s;  s = (8192/wl - 1)/(hi - 1)  ->  hi
      const double s = (1.0 / v - 1.0 / factor) / (1.0 - 1.0 / factor);
      if (s > 0) hi = 1.0 + (8192.0 / wl - 1.0) / s;
      smooth = true;
    }
  }
  c.llama3_rope_high_freq_factor = hi;
  if (!smooth && !(last_unscaled < 8192.0 && 8192.0 < first_scaled) && last_unscaled > 0.0) {
    c.llama3_rope_original_context = std::sqrt(last_unscaled * first_scaled);
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const double want = llama3_divisor(c, i, d), got = rf.element(i);
    MAXTEXT_CHECK(std::fabs(got - want) <= 1e-3 * want, UnsupportedError, "[gguf] ", where, ": rope_freqs.weight[", i,
                  "] = ", got, " is not the LLaMA-3 scaling recovered from the table (factor ", factor,
                  ", high_freq_factor ", hi, ", low_freq_factor 1, original context ",
                  c.llama3_rope_original_context, " gives ", want, ")");
  }
}

}  // namespace detail

/// A Config from GGUF metadata of architecture llama4 (llama.cpp's keys, and what llama.cpp hard-codes for it).
inline Config config_from_gguf_llama4(const GgufFile& g) {
  const std::string p = "llama4.";
  Config c;
  detail::base_llama4_config(c);
  c.base_emb_dim = g.get_int(p + "embedding_length");
  c.base_num_decoder_layers = g.get_int(p + "block_count");
  c.base_mlp_dim = g.get_int(p + "feed_forward_length");
  c.base_moe_mlp_dim = g.get_int(p + "expert_feed_forward_length");
  c.base_num_query_heads = g.get_int(p + "attention.head_count");
  c.base_num_kv_heads = g.get_int(p + "attention.head_count_kv", c.base_num_query_heads);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_emb_dim > 0, IoError, "[gguf] ", g.path,
                ": head_count and embedding_length must be > 0");
  c.head_dim = g.get_int(p + "attention.key_length", c.base_emb_dim / c.base_num_query_heads);
  MAXTEXT_CHECK(g.get_int(p + "attention.value_length", c.head_dim) == c.head_dim &&
                    g.get_int(p + "rope.dimension_count", c.head_dim) == c.head_dim,
                UnsupportedError, "[gguf] ", g.path, ": ", p,
                "attention.value_length / rope.dimension_count differ from key_length (llama.cpp's llama4 requires "
                "equal sizes)");
  c.num_experts = g.get_int(p + "expert_count");
  c.num_experts_per_tok = g.get_int(p + "expert_used_count");
  MAXTEXT_CHECK(c.num_experts >= 1, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "expert_count 0 (MobileLLM-style llama4 without experts) has no MaxText equivalent");
  MAXTEXT_CHECK(c.num_experts_per_tok == 1, UnsupportedError, "[gguf] ", g.path, ": ", p, "expert_used_count ",
                c.num_experts_per_tok, ": MaxText's Llama 4 routing is defined for one expert per token");
  c.interleave_moe_layer_step = g.get_int(p + "interleave_moe_layer_step");
  MAXTEXT_CHECK(!g.has(p + "attention.sliding_window") || g.get_int(p + "attention.sliding_window") != 0,
                UnsupportedError, "[gguf] ", g.path, ": ", p, "attention.sliding_window 0 (every layer full attention "
                "with RoPE) has no MaxText llama4 equivalent");
  if (const GgufValue* v = g.find(p + "attention.sliding_window_pattern")) {
    MAXTEXT_CHECK(gguf_window_pattern_is(*v, c.base_num_decoder_layers, 4, p + "attention.sliding_window_pattern"),
                  UnsupportedError, "[gguf] ", g.path, ": ", p, "attention.sliding_window_pattern differs from 3 "
                  "chunked layers then 1 global: llama.cpp keeps NoPE every 4th layer, as does MaxText's llama4 here");
  }
  MAXTEXT_CHECK(g.get_float(p + "attention.scale", 0.0) == 0.0, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "attention.scale ", g.get_float(p + "attention.scale", 0.0), ": llama4 scales queries by head_dim^-0.5");
  c.nope_layer_interval = 4;          // llama.cpp: n_no_rope_layer_step 4
  c.chunk_attn_window_size = 8192;    // llama.cpp: n_swa 8192 (chunked)
  c.temperature_tuning = true;        // llama.cpp: f_attn_temp_scale 0.1, n_attn_temp_floor_scale 8192
  c.use_qk_norm = c.num_experts != 128;  // llama.cpp: use_kq_norm unless LLM_TYPE_17B_128E
  c.normalization_layer_epsilon = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_max_timescale = g.get_float(p + "rope.freq_base", 500000.0);
  MAXTEXT_CHECK(g.get_float(p + "rope.freq_base_swa", c.rope_max_timescale) == c.rope_max_timescale, UnsupportedError,
                "[gguf] ", g.path, ": ", p, "rope.freq_base_swa differs from rope.freq_base (MaxText's llama4 uses one base)");
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  MAXTEXT_CHECK(scaling == "none", UnsupportedError, "[gguf] ", g.path, ": ", p, "rope.scaling.type '", scaling,
                "' is not supported (LLaMA-3 scaling comes as rope_freqs.weight)");
  if (g.tensors.has("rope_freqs.weight")) {
    detail::llama3_rope_from_divisors(c, g.tensors.at("rope_freqs.weight"), g.path);
  } else {
    c.rope_use_scale = false;
  }
  c.max_target_length = std::min<std::int64_t>(g.get_int(p + "context_length", 131072), 131072);
  c.max_position_embeddings = c.max_target_length;
  c.vocab_size = g.vocab_size(p);
  c.derive();
  c.validate();
  return c;
}

/// Map a llama.cpp `llama4` GGUF file's tensors to MaxText names for `cfg` (tied head when output.weight is absent).
inline TensorMap import_gguf_llama4(const TensorMap& in, const Config& cfg, const std::string& what = "gguf") {
  detail::NameMapper imp(in, cfg, what, "Llama 4");
  const std::int64_t D = cfg.emb_dim, F = cfg.moe_mlp_dim;
  imp.same("token_embd.weight", "token_embedder.embedding");
  imp.same("output_norm.weight", "decoder.decoder_norm.scale");
  imp.dense(imp.has("output.weight") ? "output.weight" : "token_embd.weight", "decoder.logits_dense.kernel");
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".", m = "decoder.layers_" + std::to_string(i) + ".";
    imp.same(b + "attn_norm.weight", m + "pre_self_attention_layer_norm.scale");
    imp.same(b + "ffn_norm.weight", m + "post_self_attention_layer_norm.scale");
    imp.head_proj(b + "attn_q", m + "self_attention.query", cfg.num_query_heads, false);
    imp.head_proj(b + "attn_k", m + "self_attention.key", cfg.num_kv_heads, false);
    imp.head_proj(b + "attn_v", m + "self_attention.value", cfg.num_kv_heads, false);
    imp.out_proj(b + "attn_output", m + "self_attention.out", false);
    if (cfg.interleave_moe_layer_step > 0 && (i + 1) % cfg.interleave_moe_layer_step == 0) {
      const std::string o = m + "Llama4MoEBlock_0.";
      imp.dense(b + "ffn_gate_inp.weight", o + "MoeBlock_0.gate.kernel");
      if (const AnyTensor* t = imp.get(b + "ffn_gate_exps.weight")) imp.experts(*t, b + "ffn_gate_exps.weight", o + "MoeBlock_0.wi_0", F, D);
      if (const AnyTensor* t = imp.get(b + "ffn_up_exps.weight")) imp.experts(*t, b + "ffn_up_exps.weight", o + "MoeBlock_0.wi_1", F, D);
      if (const AnyTensor* t = imp.get(b + "ffn_down_exps.weight")) imp.experts(*t, b + "ffn_down_exps.weight", o + "MoeBlock_0.wo", D, F);
      imp.dense(b + "ffn_gate_shexp.weight", o + "shared_experts.wi_0.kernel");
      imp.dense(b + "ffn_up_shexp.weight", o + "shared_experts.wi_1.kernel");
      imp.dense(b + "ffn_down_shexp.weight", o + "shared_experts.wo.kernel");
    } else {
      imp.dense(b + "ffn_gate.weight", m + "mlp.wi_0.kernel");
      imp.dense(b + "ffn_up.weight", m + "mlp.wi_1.kernel");
      imp.dense(b + "ffn_down.weight", m + "mlp.wo.kernel");
    }
  }
  return imp.finish({"rope_freqs.weight"});  // read into the config (config_from_gguf_llama4)
}

}  // namespace maxtext::io
