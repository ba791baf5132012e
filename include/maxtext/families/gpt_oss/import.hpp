// families/gpt_oss/import.hpp: GPT-OSS checkpoints from Hugging Face (config.json model_type gpt_oss, safetensors with float or
// MXFP4 experts) and llama.cpp (GGUF architecture gpt-oss, float tensors) into MaxText names for decoder_block gpt_oss
// (families/gpt_oss/gpt_oss.hpp), as MaxText's converter (checkpoint_conversion/standalone_scripts/convert_gpt_oss_ckpt.py) and
// dequantiser (dequantize_mxfp4.py) do; spec weights-naming.md, docs/numerics.md §GPT-OSS.
//
// Hugging Face names (GptOssForCausalLM) -> MaxText:
//   model.embed_tokens.weight -> token_embedder.embedding; model.norm.weight -> decoder.decoder_norm.scale;
//   lm_head.weight [V, D] -> decoder.logits_dense.kernel [D, V] (view);
//   model.layers.i.input_layernorm / post_attention_layernorm -> decoder.layers_i.pre_ / post_self_attention_layer_norm;
//   self_attn.{q,k,v}_proj.weight [heads*H, D] / .bias -> GptOssAttention.{query,key,value}.kernel [D, heads, H] /
//     .bias [heads, H] (no query scaling: the block scales queries in the forward pass; HF's rotary pairing is
//     half-split like MaxText's non-interleaved YaRN); o_proj -> out.kernel [N, H, D], out.bias [D]; sinks -> sinks;
//   mlp.router.weight [E, D] / .bias -> GptOssMlp.gate.kernel [D, E] / gate.bias;
//   mlp.experts.gate_up_proj [E, D, 2F] (columns interleaved: gate even, up odd) -> GptOssMlp.wi_0 / wi_1 [E, D, F],
//     gate_up_proj_bias [E, 2F] -> wi_0_bias / wi_1_bias [E, F]; down_proj [E, F, D] -> wo; down_proj_bias -> wo_bias.
//   MXFP4 experts: `<p>_blocks` [E, out, in/32, 16] u8 and `<p>_scales` [E, out, in/32] u8 instead of `<p>`; each
//     32-value block along the input axis is 16 bytes of e2m1 codes (value 2j in the low nibble of byte j, 2j+1 in the
//     high nibble; code bit 3 = sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}) times 2^(scale byte - 127) (e8m0;
//     0xFF, NaN in the OCP MX format, is refused). Dequantised here to f32 (exact), then converted to the model's
//     weight type by the loader, as the FP8 DeepSeek weights are (families/deepseek/import.hpp).
// GGUF (llama.cpp `gpt-oss`): token_embd, output_norm, output; blk.i.attn_norm, post_attention_norm,
//   attn_{q,k,v,output}.{weight,bias}, attn_sinks.weight, ffn_gate_inp.{weight,bias}, ffn_{gate,up,down}_exps.weight
//   [E, out, in] and .bias [E, out] (gate and up already de-interleaved by the converter); expert weights may be
//   llama.cpp's MXFP4 (ggml type 39, dequantised here; other tensors of that type are refused by name).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// True for config.json model_type gpt_oss.
inline bool is_hf_gpt_oss(const nlohmann::json& j) {
  return j.is_object() && j.contains("model_type") && j["model_type"].is_string() &&
         j["model_type"].get<std::string>() == "gpt_oss";
}

/// True for GGUF general.architecture gpt-oss.
inline bool is_gguf_gpt_oss(const std::string& arch) { return arch == "gpt-oss"; }

namespace detail {

/// What every imported GPT-OSS config shares (MaxText's gpt-oss-20b.yml / gpt-oss-120b.yml, f32).
inline void base_gpt_oss_config(Config& c) {
  c.decoder_block = "gpt_oss";
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.mlp_activations = {"sigmoid", "linear"};
  c.logits_via_embedding = false;
  c.scan_layers = false;
  c.enable_dropout = false;
  c.attention_bias = true;
  c.attention_sink = true;
  c.routed_bias = true;
  c.mlp_bias = true;
  c.inhomogeneous_layer_cycle_interval = 2;
  c.rope_type = "yarn";
  c.rope_interleave = false;
  c.rope_attention_scaling = true;
  c.rope_truncate = false;
  c.beta_fast = 32;
  c.beta_slow = 1;
}

/// e2m1 magnitudes indexed by the low three bits of a code.
inline constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace detail

/// MXFP4 dequantisation: blocks [E, R, G, 16] u8 and scales [E, R, G] u8 -> f32 [E, R, G*32] with
/// out[e, r, 32 g + 2 j] = e2m1(blocks[e, r, g, j] & 15) * 2^(scales[e, r, g] - 127) and
/// out[e, r, 32 g + 2 j + 1] = e2m1(blocks[e, r, g, j] >> 4) * 2^(...). `name` names the pair in errors.
inline AnyTensor dequantize_mxfp4(const AnyTensor& blocks, const AnyTensor& scales, const std::string& name) {
  MAXTEXT_CHECK(blocks.dtype == DType::u8 && blocks.rank() == 4 && blocks.shape[3] == 16, IoError, "[mxfp4] ", name,
                "_blocks (", blocks.source, "): expected u8 [experts, rows, blocks, 16], found ", blocks.describe());
  const std::int64_t E = blocks.shape[0], R = blocks.shape[1], G = blocks.shape[2];
  MAXTEXT_CHECK(scales.dtype == DType::u8 && scales.rank() == 3 && scales.shape[0] == E && scales.shape[1] == R &&
                    scales.shape[2] == G,
                IoError, "[mxfp4] ", name, "_scales (", scales.source, "): expected u8 [", E, ", ", R, ", ", G,
                "] (one e8m0 byte per 32-value block of ", name, "_blocks ", blocks.describe(), "), found ",
                scales.describe());
  Tensor<float, 3> out({E, R, G * 32});
  const auto* bp = reinterpret_cast<const std::uint8_t*>(blocks.data);
  const auto* sp = reinterpret_cast<const std::uint8_t*>(scales.data);
  for (std::int64_t e = 0; e < E; ++e) {
    for (std::int64_t r = 0; r < R; ++r) {
      for (std::int64_t g = 0; g < G; ++g) {
        const std::uint8_t s = sp[e * scales.strides[0] + r * scales.strides[1] + g * scales.strides[2]];
        MAXTEXT_CHECK(s != 0xFF, IoError, "[mxfp4] ", name, "_scales[", e, ", ", r, ", ", g,
                      "] is 0xFF (NaN in the e8m0 scale format)");
        const int ex = static_cast<int>(s) - 127;
        float* o = &out(e, r, g * 32);
        for (std::int64_t j = 0; j < 16; ++j) {
          const std::uint8_t byte = bp[e * blocks.strides[0] + r * blocks.strides[1] + g * blocks.strides[2] + j * blocks.strides[3]];
          for (int half = 0; half < 2; ++half) {
            const unsigned code = half == 0 ? (byte & 0x0Fu) : (byte >> 4);
            const float mag = std::ldexp(detail::kE2m1[code & 7u], ex);
            o[2 * j + half] = (code & 8u) != 0 ? -mag : mag;
          }
        }
      }
    }
  }
  return AnyTensor::from(out, blocks.source + " (MXFP4 dequantised)");
}

/// llama.cpp's MXFP4 GGUF blocks: raw [E, R, G, 17] u8 (as io::read_gguf exposes ggml type MXFP4), each block one
/// e8m0 scale byte then 16 bytes whose low nibbles are values 0-15 and high nibbles values 16-31 (ggml's
/// dequantize_row_mxfp4) -> f32 [E, R, G*32], value = e2m1(code) * 2^(scale - 127) (0xFF refused as above).
inline AnyTensor dequantize_ggml_mxfp4(const AnyTensor& raw, const std::string& name) {
  MAXTEXT_CHECK(raw.dtype == DType::u8 && raw.rank() == 4 && raw.shape[3] == 17 && raw.is_contiguous(), IoError,
                "[mxfp4] ", name, " (", raw.source, "): expected MXFP4 blocks u8 [experts, rows, blocks, 17], found ",
                raw.describe());
  const std::int64_t E = raw.shape[0], R = raw.shape[1], G = raw.shape[2];
  Tensor<float, 3> out({E, R, G * 32});
  const auto* p = reinterpret_cast<const std::uint8_t*>(raw.data);
  for (std::int64_t b = 0; b < E * R * G; ++b) {
    const std::uint8_t* blk = p + b * 17;
    MAXTEXT_CHECK(blk[0] != 0xFF, IoError, "[mxfp4] ", name, ": block ", b, " has scale 0xFF (NaN in e8m0)");
    const int ex = static_cast<int>(blk[0]) - 127;
    float* o = out.data() + b * 32;
    for (int j = 0; j < 16; ++j) {
      for (int half = 0; half < 2; ++half) {
        const unsigned code = half == 0 ? (blk[1 + j] & 0x0Fu) : (blk[1 + j] >> 4);
        const float mag = std::ldexp(detail::kE2m1[code & 7u], ex);
        o[j + 16 * half] = (code & 8u) != 0 ? -mag : mag;
      }
    }
  }
  return AnyTensor::from(out, raw.source + " (MXFP4 dequantised)");
}

/// A Config from a GPT-OSS config.json (MaxText's gpt-oss ymls for what the file does not say).
inline Config config_from_hf_gpt_oss(const nlohmann::json& j, const std::string& where) {
  auto geti = [&](const char* key) -> std::int64_t {
    MAXTEXT_CHECK(j.contains(key) && j[key].is_number_integer(), IoError, "[hf] ", where, ": config.json ",
                  j.contains(key) ? std::string(key) + " is not an integer: " + j[key].dump() : std::string("lacks ") + key);
    return j[key].get<std::int64_t>();
  };
  auto getf = [&](const nlohmann::json& o, const char* key, double dflt) -> double {
    if (!o.contains(key) || o[key].is_null()) return dflt;
    MAXTEXT_CHECK(o[key].is_number(), IoError, "[hf] ", where, ": ", key, ": expected a number, found ", o[key].dump());
    return o[key].get<double>();
  };
  Config c;
  detail::base_gpt_oss_config(c);
  c.base_emb_dim = geti("hidden_size");
  c.base_mlp_dim = geti("intermediate_size");
  c.base_moe_mlp_dim = c.base_mlp_dim;
  c.base_num_decoder_layers = geti("num_hidden_layers");
  c.base_num_query_heads = geti("num_attention_heads");
  c.base_num_kv_heads = j.contains("num_key_value_heads") ? geti("num_key_value_heads") : c.base_num_query_heads;
  MAXTEXT_CHECK(c.base_num_query_heads > 0, IoError, "[hf] ", where, ": num_attention_heads must be > 0");
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? geti("head_dim") : c.base_emb_dim / c.base_num_query_heads;
  c.vocab_size = geti("vocab_size");
  c.num_experts = geti("num_local_experts");
  c.num_experts_per_tok = j.contains("num_experts_per_tok") ? geti("num_experts_per_tok") : geti("experts_per_token");
  c.normalization_layer_epsilon = getf(j, "rms_norm_eps", 1e-5);
  c.rope_max_timescale = getf(j, "rope_theta", 150000.0);
  c.mlp_activations_limit = getf(j, "swiglu_limit", 7.0);
  c.sliding_window_size = geti("sliding_window");
  c.attention_bias = j.value("attention_bias", true);
  if (j.contains("max_position_embeddings")) {
    c.max_position_embeddings = geti("max_position_embeddings");
    c.max_target_length = c.max_position_embeddings;
  }
  MAXTEXT_CHECK(!j.value("tie_word_embeddings", false), UnsupportedError, "[hf] ", where,
                ": tie_word_embeddings = true: GPT-OSS (and MaxText's gpt-oss ymls) have a separate lm_head");
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const auto& lt = j["layer_types"];
    MAXTEXT_CHECK(lt.is_array() && static_cast<std::int64_t>(lt.size()) == c.base_num_decoder_layers, ConfigError, "[hf] ",
                  where, ": layer_types has ", lt.is_array() ? lt.size() : 0, " entries for num_hidden_layers ",
                  c.base_num_decoder_layers);
    for (std::size_t i = 0; i < lt.size(); ++i) {
      const char* want = i % 2 == 0 ? "sliding_attention" : "full_attention";
      MAXTEXT_CHECK(lt[i] == want, UnsupportedError, "[hf] ", where, ": layer_types[", i, "] is ", lt[i].dump(),
                    ": MaxText's gpt_oss block alternates sliding_attention (even layers) and full_attention (odd)");
    }
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const auto& rs = j["rope_scaling"];
    const std::string rt = rs.value("rope_type", rs.value("type", std::string()));
    MAXTEXT_CHECK(rt == "yarn", UnsupportedError, "[hf] ", where, ": rope_scaling type '", rt,
                  "': MaxText's gpt-oss ymls use yarn");
    c.rope_factor = getf(rs, "factor", 1.0);
    c.original_max_position_embeddings =
        static_cast<std::int64_t>(getf(rs, "original_max_position_embeddings", getf(j, "initial_context_length", 4096)));
    c.beta_fast = getf(rs, "beta_fast", 32.0);
    c.beta_slow = getf(rs, "beta_slow", 1.0);
    c.rope_truncate = rs.value("truncate", true);  // transformers' default when the key is absent
    const double att = 0.1 * std::log(c.rope_factor) + 1.0;
    MAXTEXT_CHECK(!rs.contains("mscale") && !rs.contains("mscale_all_dim") &&
                      std::fabs(getf(rs, "attention_factor", att) - att) <= 1e-6 * att,
                  UnsupportedError, "[hf] ", where, ": rope_scaling ", rs.dump(),
                  ": MaxText's YaRN scales by 0.1 ln(factor) + 1 only (no attention_factor / mscale)");
  } else {
    c.rope_type = "default";
  }
  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    const std::string qm = j["quantization_config"].value("quant_method", std::string());
    MAXTEXT_CHECK(qm == "mxfp4", UnsupportedError, "[hf] ", where, ": quantization_config.quant_method '", qm,
                  "' is not supported (mxfp4 experts are dequantised at load)");
  }
  c.derive();
  c.validate();
  return c;
}

/// A Config from GGUF metadata of architecture gpt-oss (llama.cpp's keys; what llama.cpp hard-codes, MaxText's
/// gpt-oss yml values: SwiGLU limit 7, YaRN without truncation).
inline Config config_from_gguf_gpt_oss(const GgufFile& g) {
  const std::string p = "gpt-oss.";
  Config c;
  detail::base_gpt_oss_config(c);
  c.base_emb_dim = g.get_int(p + "embedding_length");
  c.base_num_decoder_layers = g.get_int(p + "block_count");
  c.base_mlp_dim = g.get_int(p + "expert_feed_forward_length");
  c.base_moe_mlp_dim = c.base_mlp_dim;
  c.base_num_query_heads = g.get_int(p + "attention.head_count");
  c.base_num_kv_heads = g.get_int(p + "attention.head_count_kv", c.base_num_query_heads);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_emb_dim > 0, IoError, "[gguf] ", g.path,
                ": head_count and embedding_length must be > 0");
  c.head_dim = g.get_int(p + "attention.key_length", c.base_emb_dim / c.base_num_query_heads);
  MAXTEXT_CHECK(g.get_int(p + "attention.value_length", c.head_dim) == c.head_dim, UnsupportedError, "[gguf] ", g.path,
                ": ", p, "attention.value_length differs from key_length");
  c.num_experts = g.get_int(p + "expert_count");
  c.num_experts_per_tok = g.get_int(p + "expert_used_count");
  c.sliding_window_size = g.get_int(p + "attention.sliding_window");
  MAXTEXT_CHECK(g.get_int(p + "attention.sliding_window_pattern", 2) == 2, UnsupportedError, "[gguf] ", g.path, ": ", p,
                "attention.sliding_window_pattern ", g.get_int(p + "attention.sliding_window_pattern", 2),
                ": MaxText's gpt_oss block alternates local and global layers (2)");
  c.normalization_layer_epsilon = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_max_timescale = g.get_float(p + "rope.freq_base", 150000.0);
  const double swa_base = g.get_float(p + "rope.freq_base_swa", c.rope_max_timescale);
  MAXTEXT_CHECK(swa_base == c.rope_max_timescale, UnsupportedError, "[gguf] ", g.path, ": ", p, "rope.freq_base_swa ",
                swa_base, " differs from rope.freq_base ", c.rope_max_timescale, " (MaxText's gpt_oss uses one base)");
  c.max_target_length = g.get_int(p + "context_length", 131072);
  c.max_position_embeddings = c.max_target_length;
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  if (scaling == "yarn") {
    c.rope_factor = g.get_float(p + "rope.scaling.factor", 1.0);
    c.original_max_position_embeddings = g.get_int(p + "rope.scaling.original_context_length", 4096);
    c.beta_fast = g.get_float(p + "rope.scaling.yarn_beta_fast", 32.0);
    c.beta_slow = g.get_float(p + "rope.scaling.yarn_beta_slow", 1.0);
    MAXTEXT_CHECK(g.get_float(p + "rope.scaling.yarn_attn_factor", 1.0) == 1.0 &&
                      g.get_float(p + "rope.scaling.yarn_ext_factor", 1.0) == 1.0,
                  UnsupportedError, "[gguf] ", g.path, ": ", p,
                  "rope.scaling.yarn_attn_factor / yarn_ext_factor other than 1 have no MaxText equivalent");
  } else {
    MAXTEXT_CHECK(scaling == "none", UnsupportedError, "[gguf] ", g.path, ": ", p, "rope.scaling.type '", scaling,
                  "' is not supported (yarn, none)");
    c.rope_type = "default";
  }
  c.mlp_activations_limit = 7.0;  // llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constant (no GGUF key)
  c.vocab_size = g.vocab_size(p);
  c.derive();
  c.validate();
  return c;
}

/// Map a Hugging Face GPT-OSS checkpoint (float or MXFP4 experts) to MaxText names for `cfg`.
inline TensorMap import_hf_gpt_oss(const TensorMap& in, const Config& cfg, const std::string& what = "hf") {
  detail::NameMapper imp(in, cfg, what, "GPT-OSS");
  const std::int64_t E = cfg.num_experts, D = cfg.emb_dim, F = cfg.mlp_dim;
  imp.same("model.embed_tokens.weight", "token_embedder.embedding");
  imp.same("model.norm.weight", "decoder.decoder_norm.scale");
  imp.dense("lm_head.weight", "decoder.logits_dense.kernel");
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", m = "decoder.layers_" + std::to_string(i) + ".";
    imp.same(h + "input_layernorm.weight", m + "pre_self_attention_layer_norm.scale");
    imp.same(h + "post_attention_layernorm.weight", m + "post_self_attention_layer_norm.scale");
    const std::string a = m + "GptOssAttention.";
    imp.head_proj(h + "self_attn.q_proj", a + "query", cfg.num_query_heads, cfg.attention_bias);
    imp.head_proj(h + "self_attn.k_proj", a + "key", cfg.num_kv_heads, cfg.attention_bias);
    imp.head_proj(h + "self_attn.v_proj", a + "value", cfg.num_kv_heads, cfg.attention_bias);
    imp.out_proj(h + "self_attn.o_proj", a + "out", cfg.attention_bias);
    imp.same(h + "self_attn.sinks", a + "sinks");
    const std::string x = h + "mlp.experts.", o = m + "GptOssMlp.";
    imp.dense(h + "mlp.router.weight", o + "gate.kernel");
    imp.same(h + "mlp.router.bias", o + "gate.bias");
    // gate_up: [E, D, 2F] (float) or blocks/scales of [E, 2F, D] (MXFP4); even columns gate (wi_0), odd up (wi_1).
    if (imp.has(x + "gate_up_proj_blocks") || imp.has(x + "down_proj_blocks")) {
      // MXFP4 blocks run along each matrix's input axis: hidden_size for gate_up, intermediate_size for down.
      MAXTEXT_CHECK(D % 32 == 0 && F % 32 == 0, ShapeError, "[", what, "] ", x, "*_blocks: MXFP4 needs hidden_size (", D,
                    ") and intermediate_size (", F, ") to be multiples of 32");
    }
    if (imp.has(x + "gate_up_proj_blocks") || imp.has(x + "gate_up_proj_scales")) {
      const AnyTensor* b = imp.get(x + "gate_up_proj_blocks");
      const AnyTensor* s = imp.get(x + "gate_up_proj_scales");
      if (b && s) {
        imp.shape(*b, {E, 2 * F, D / 32, 16}, x + "gate_up_proj_blocks");
        // [E, 2F, D] rows interleaved -> [E, F, 2, D] -> row j of each pair, viewed as [E, D, F] (no copy)
        const AnyTensor rows = dequantize_mxfp4(*b, *s, x + "gate_up_proj").reshaped({E, F, 2, D});
        imp.put(o + "wi_0", rows.select(2, 0).permuted({0, 2, 1}), x + "gate_up_proj");
        imp.put(o + "wi_1", rows.select(2, 1).permuted({0, 2, 1}), x + "gate_up_proj");
      }
    } else if (const AnyTensor* t = imp.get(x + "gate_up_proj")) {
      imp.shape(*t, {E, D, 2 * F}, x + "gate_up_proj");
      const AnyTensor pairs = detail::NameMapper::contiguous(*t).reshaped({E, D, F, 2});
      imp.put(o + "wi_0", pairs.select(3, 0), x + "gate_up_proj");
      imp.put(o + "wi_1", pairs.select(3, 1), x + "gate_up_proj");
    }
    if (const AnyTensor* t = imp.get(x + "gate_up_proj_bias")) {
      imp.shape(*t, {E, 2 * F}, x + "gate_up_proj_bias");
      const AnyTensor pairs = detail::NameMapper::contiguous(*t).reshaped({E, F, 2});
      imp.put(o + "wi_0_bias", pairs.select(2, 0), x + "gate_up_proj_bias");
      imp.put(o + "wi_1_bias", pairs.select(2, 1), x + "gate_up_proj_bias");
    }
    if (imp.has(x + "down_proj_blocks") || imp.has(x + "down_proj_scales")) {
      const AnyTensor* b = imp.get(x + "down_proj_blocks");
      const AnyTensor* s = imp.get(x + "down_proj_scales");
      if (b && s) {
        imp.shape(*b, {E, D, F / 32, 16}, x + "down_proj_blocks");
        imp.put(o + "wo", dequantize_mxfp4(*b, *s, x + "down_proj").permuted({0, 2, 1}), x + "down_proj");
      }
    } else if (const AnyTensor* t = imp.get(x + "down_proj")) {
      imp.shape(*t, {E, F, D}, x + "down_proj");
      imp.put(o + "wo", *t, x + "down_proj");
    }
    imp.same(x + "down_proj_bias", o + "wo_bias");
  }
  return imp.finish();
}

/// Map a llama.cpp `gpt-oss` GGUF file's tensors to MaxText names for `cfg`.
inline TensorMap import_gguf_gpt_oss(const TensorMap& in, const Config& cfg, const std::string& what = "gguf") {
  detail::NameMapper imp(in, cfg, what, "GPT-OSS");
  const std::int64_t E = cfg.num_experts, D = cfg.emb_dim, F = cfg.mlp_dim;
  imp.same("token_embd.weight", "token_embedder.embedding");
  imp.same("output_norm.weight", "decoder.decoder_norm.scale");
  imp.dense("output.weight", "decoder.logits_dense.kernel");
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".", m = "decoder.layers_" + std::to_string(i) + ".";
    imp.same(b + "attn_norm.weight", m + "pre_self_attention_layer_norm.scale");
    imp.same(b + "post_attention_norm.weight", m + "post_self_attention_layer_norm.scale");
    const std::string a = m + "GptOssAttention.";
    imp.head_proj(b + "attn_q", a + "query", cfg.num_query_heads, cfg.attention_bias);
    imp.head_proj(b + "attn_k", a + "key", cfg.num_kv_heads, cfg.attention_bias);
    imp.head_proj(b + "attn_v", a + "value", cfg.num_kv_heads, cfg.attention_bias);
    imp.out_proj(b + "attn_output", a + "out", cfg.attention_bias);
    imp.same(b + "attn_sinks.weight", a + "sinks");
    const std::string o = m + "GptOssMlp.";
    imp.dense(b + "ffn_gate_inp.weight", o + "gate.kernel");
    imp.same(b + "ffn_gate_inp.bias", o + "gate.bias");
    for (const auto& [gn, mn, rows, cols] : std::vector<std::tuple<std::string, std::string, std::int64_t, std::int64_t>>{
             {"ffn_gate_exps", "wi_0", F, D}, {"ffn_up_exps", "wi_1", F, D}, {"ffn_down_exps", "wo", D, F}}) {
      if (const AnyTensor* t = imp.get(b + gn + ".weight")) {
        if (t->dtype == DType::u8) {  // MXFP4 (ggml type 39): u8 [E, out, in / 32, 17]
          MAXTEXT_CHECK(cols % 32 == 0, ShapeError, "[", what, "] ", b, gn, ".weight: MXFP4 needs its input size (", cols,
                        ") to be a multiple of 32");
          imp.shape(*t, {E, rows, cols / 32, 17}, b + gn + ".weight");
          imp.put(o + mn, dequantize_ggml_mxfp4(*t, b + gn + ".weight").permuted({0, 2, 1}), b + gn + ".weight");
        } else {
          imp.experts(*t, b + gn + ".weight", o + mn, rows, cols);
        }
      }
      if (const AnyTensor* t = imp.get(b + gn + ".bias")) {
        imp.shape(*t, {E, rows}, b + gn + ".bias");
        imp.put(o + mn + "_bias", *t, b + gn + ".bias");
      }
    }
  }
  return imp.finish();
}

}  // namespace maxtext::io
