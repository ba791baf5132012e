// families/olmo3/import.hpp: OLMo 3 configurations from Hugging Face (config.json model_type olmo3, transformers'
// Olmo3Config) and from llama.cpp GGUF metadata (architecture olmo2, which llama.cpp's converter uses for
// Olmo3ForCausalLM) as a Config for MaxText's olmo3 block, and the tensor names of both (import_olmo3_names, over
// the Llama-style importer's bookkeeping, families/llama2/import.hpp). Spec docs/numerics.md §OLMo 3.
//
// What MaxText's olmo3 block fixes and the files must agree with (else: UnsupportedError naming the key):
//   * layer i uses sliding-window attention when i % 4 < 3, global when i % 4 == 3 (config.json layer_types,
//     GGUF attention.sliding_window_pattern); a window is required (OLMo 2, without one, has no MaxText block);
//   * one rotary embedding for all layers: default RoPE, or YaRN (rope_scaling / rope_parameters rope_type yarn;
//     GGUF rope.scaling.type yarn) with attention scaling 0.1 ln(factor) + 1 (an attention_factor other than that is
//     refused), beta_fast / beta_slow, truncate (HF default true; llama.cpp always floors/ceils), half-split lanes;
//   * q/k RMSNorm over all heads (model_name "olmo3"), queries scaled by head_dim^-0.5 in the forward pass, SwiGLU, no
//     projection biases (attention_bias = true is refused), untied head unless tie_word_embeddings.
// The importers set max_target_length = max_position_embeddings (GGUF context_length); a sliding window larger than
// that context is refused as an inconsistent file.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/llama2/import.hpp"
#include "maxtext/io/attention_kernels.hpp"
#include "maxtext/io/gguf.hpp"

namespace maxtext::io {

/// True for config.json model types this header maps (olmo3).
inline bool is_hf_olmo_family(const nlohmann::json& j) {
  return j.is_object() && j.contains("model_type") && j["model_type"].is_string() && j["model_type"] == "olmo3";
}

/// True for GGUF architectures this header maps (llama.cpp's olmo2, which holds OLMo 2 and OLMo 3).
inline bool is_gguf_olmo(const std::string& arch) { return arch == "olmo2"; }

namespace detail {

/// The settings every imported OLMo 3 config shares.
inline void base_olmo3_config(Config& c) {
  c.decoder_block = "olmo3";
  c.model_name = "olmo3";  // MaxText's Attention picks GlobalRMSNorm (qk-norm over all heads) by this prefix
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.mlp_activations = {"silu", "linear"};
  c.use_qk_norm = true;
  c.inhomogeneous_layer_cycle_interval = 4;
  c.logits_via_embedding = false;
  c.scan_layers = false;
  c.enable_dropout = false;
  c.rope_min_timescale = 1;
  c.rope_interleave = false;
  c.rope_type = "default";
}

/// YaRN's attention scaling as MaxText applies it (rope_attention_scaling): 0.1 ln(factor) + 1 for factor > 1.
inline double yarn_mscale(double factor) { return factor > 1.0 ? 0.1 * std::log(factor) + 1.0 : 1.0; }

inline void check_olmo3_window(const Config& c, const std::string& where) {
  MAXTEXT_CHECK(c.sliding_window_size > 0, UnsupportedError, "[", where, "] sliding_window ", c.sliding_window_size,
                ": MaxText's olmo3 block needs a sliding window (layers i % 4 < 3); OLMo 2 checkpoints (no window) have "
                "no MaxText block");
  MAXTEXT_CHECK(c.sliding_window_size <= c.max_target_length, ConfigError, "[", where, "] sliding_window (",
                c.sliding_window_size, ") is larger than the context (max_position_embeddings / context_length ",
                c.max_target_length, ")");
  MAXTEXT_CHECK(c.base_num_decoder_layers % 4 == 0, ConfigError, "[", where, "] num_hidden_layers (",
                c.base_num_decoder_layers, ") is not a multiple of the sliding-window pattern length 4 (L, L, L, G)");
}

}  // namespace detail

/// A Config from an OLMo 3 config.json.
inline Config config_from_hf_olmo(const nlohmann::json& j, const std::string& where) {
  auto geti = [&](const char* key) -> std::int64_t {
    MAXTEXT_CHECK(j.contains(key) && j[key].is_number_integer(), IoError, "[hf] ", where, ": config.json lacks integer ",
                  key);
    return j[key].get<std::int64_t>();
  };
  auto getf = [&](const nlohmann::json& o, const char* key, double dflt) -> double {
    if (!o.contains(key) || o[key].is_null()) return dflt;
    MAXTEXT_CHECK(o[key].is_number(), IoError, "[hf] ", where, ": ", key, ": expected a number, found ", o[key].dump());
    return o[key].get<double>();
  };
  Config c;
  detail::base_olmo3_config(c);
  c.base_emb_dim = geti("hidden_size");
  c.base_mlp_dim = geti("intermediate_size");
  c.base_num_decoder_layers = geti("num_hidden_layers");
  c.base_num_query_heads = geti("num_attention_heads");
  c.base_num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null() ? geti("num_key_value_heads")
                                                                                                 : c.base_num_query_heads;
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_emb_dim > 0, IoError, "[hf] ", where,
                ": hidden_size and num_attention_heads must be > 0");
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? geti("head_dim") : c.base_emb_dim / c.base_num_query_heads;
  c.vocab_size = geti("vocab_size");
  c.normalization_layer_epsilon = getf(j, "rms_norm_eps", 1e-6);
  c.max_target_length = geti("max_position_embeddings");
  c.max_position_embeddings = c.max_target_length;
  c.sliding_window_size = j.contains("sliding_window") && j["sliding_window"].is_number_integer()
                              ? j["sliding_window"].get<std::int64_t>()
                              : 0;
  const std::string act = j.value("hidden_act", std::string("silu"));
  MAXTEXT_CHECK(act == "silu", UnsupportedError, "[hf] ", where, ": hidden_act '", act, "' is not supported (silu)");
  MAXTEXT_CHECK(!j.value("attention_bias", false), UnsupportedError, "[hf] ", where,
                ": attention_bias = true is not supported for olmo3 (OLMo 3 releases have no projection biases)");
  detail::check_olmo3_window(c, "hf " + where);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const auto& lt = j["layer_types"];
    MAXTEXT_CHECK(lt.is_array() && static_cast<std::int64_t>(lt.size()) == c.base_num_decoder_layers, IoError, "[hf] ",
                  where, ": layer_types must list num_hidden_layers (", c.base_num_decoder_layers, ") entries, found ",
                  lt.dump());
    for (std::size_t i = 0; i < lt.size(); ++i) {
      const char* want = i % 4 == 3 ? "full_attention" : "sliding_attention";
      MAXTEXT_CHECK(lt[i] == want, UnsupportedError, "[hf] ", where, ": layer_types[", i, "] = ", lt[i].dump(),
                    ": MaxText's olmo3 block uses ", want, " there (3 sliding layers, then 1 full, repeated)");
    }
  }
  // Rotary settings: transformers 4.x writes rope_theta + rope_scaling, 5.x rope_parameters (with rope_theta inside).
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& rp = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"]
                             : j.contains("rope_scaling") && j["rope_scaling"].is_object()     ? j["rope_scaling"]
                                                                                               : none;
  c.rope_max_timescale = getf(rp, "rope_theta", getf(j, "rope_theta", 10000.0));
  const std::string rt = rp.value("rope_type", rp.value("type", std::string("default")));
  if (rt == "yarn") {
    c.rope_type = "yarn";
    c.rope_factor = getf(rp, "factor", 1.0);
    MAXTEXT_CHECK(rp.contains("original_max_position_embeddings") && rp["original_max_position_embeddings"].is_number_integer(),
                  IoError, "[hf] ", where, ": rope_scaling yarn lacks original_max_position_embeddings");
    c.original_max_position_embeddings = rp["original_max_position_embeddings"].get<std::int64_t>();
    MAXTEXT_CHECK(c.original_max_position_embeddings > 0, IoError, "[hf] ", where,
                  ": rope_scaling original_max_position_embeddings must be > 0");
    // Recent transformers take YaRN's factor as max_position_embeddings / original_max_position_embeddings when the
    // latter is given, older ones use `factor`: accept only files where both agree (OLMo 3: 65536 / 8192 = 8).
    const double ratio = static_cast<double>(c.max_position_embeddings) / static_cast<double>(c.original_max_position_embeddings);
    MAXTEXT_CHECK(std::fabs(ratio - c.rope_factor) <= 1e-9 * c.rope_factor, UnsupportedError, "[hf] ", where,
                  ": rope_scaling factor ", c.rope_factor, " differs from max_position_embeddings / "
                  "original_max_position_embeddings = ", ratio, " (Hugging Face versions differ on which one YaRN uses)");
    c.beta_fast = getf(rp, "beta_fast", 32.0);
    c.beta_slow = getf(rp, "beta_slow", 1.0);
    c.rope_truncate = rp.value("truncate", true);
    c.rope_attention_scaling = true;
    const double want = detail::yarn_mscale(c.rope_factor);
    const double af = getf(rp, "attention_factor", want);
    MAXTEXT_CHECK(std::fabs(af - want) <= 1e-6 * want, UnsupportedError, "[hf] ", where, ": rope_scaling attention_factor ",
                  af, ": MaxText's YaRN scales by 0.1 ln(factor) + 1 = ", want);
    for (const char* k : {"mscale", "mscale_all_dim"}) {
      MAXTEXT_CHECK(!rp.contains(k) || rp[k].is_null(), UnsupportedError, "[hf] ", where, ": rope_scaling ", k,
                    " is not supported for olmo3 (MaxText's YaRN has no ", k, ")");
    }
  } else {
    MAXTEXT_CHECK(rt == "default", UnsupportedError, "[hf] ", where, ": rope type '", rt,
                  "' is not supported for olmo3 (default, yarn)");
  }
  c.derive();
  return c;
}

/// A Config from GGUF metadata of llama.cpp's olmo2 architecture (an OLMo 3 export: it has a sliding window).
inline Config config_from_gguf_olmo(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  const std::string p = arch + ".";
  const std::string where = "gguf " + g.path;
  Config c;
  detail::base_olmo3_config(c);
  c.base_emb_dim = g.get_int(p + "embedding_length");
  c.base_num_decoder_layers = g.get_int(p + "block_count");
  c.base_mlp_dim = g.get_int(p + "feed_forward_length");
  c.base_num_query_heads = g.get_int(p + "attention.head_count");
  c.base_num_kv_heads = g.get_int(p + "attention.head_count_kv", c.base_num_query_heads);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_emb_dim > 0, IoError, "[gguf] ", g.path,
                ": head_count and embedding_length must be > 0");
  c.head_dim = g.get_int(p + "attention.key_length", c.base_emb_dim / c.base_num_query_heads);
  MAXTEXT_CHECK(g.get_int(p + "attention.value_length", c.head_dim) == c.head_dim, UnsupportedError, "[gguf] ", g.path,
                ": attention.value_length differs from key_length");
  const std::int64_t rope_dims = g.get_int(p + "rope.dimension_count", c.head_dim);
  MAXTEXT_CHECK(rope_dims == c.head_dim, UnsupportedError, "[gguf] ", g.path, ": rope.dimension_count ", rope_dims,
                " != head_dim ", c.head_dim, " (partial rotary embeddings are not supported for olmo3)");
  c.normalization_layer_epsilon = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_max_timescale = g.get_float(p + "rope.freq_base", 10000.0);
  c.max_target_length = g.get_int(p + "context_length");
  c.max_position_embeddings = c.max_target_length;
  c.sliding_window_size = g.get_int(p + "attention.sliding_window", 0);
  detail::check_olmo3_window(c, where);
  if (const GgufValue* pat = g.find(p + "attention.sliding_window_pattern")) {
    if (pat->is_array()) {  // one flag per layer, true = sliding window
      MAXTEXT_CHECK(static_cast<std::int64_t>(pat->ints.size()) == c.base_num_decoder_layers, IoError, "[gguf] ", g.path,
                    ": ", p, "attention.sliding_window_pattern has ", pat->size(), " entries for ",
                    c.base_num_decoder_layers, " layers");
      for (std::size_t i = 0; i < pat->ints.size(); ++i) {
        MAXTEXT_CHECK((pat->ints[i] != 0) == (i % 4 != 3), UnsupportedError, "[gguf] ", g.path, ": ", p,
                      "attention.sliding_window_pattern[", i, "] = ", pat->ints[i] != 0 ? "true" : "false",
                      ": MaxText's olmo3 block uses ", i % 4 != 3 ? "a sliding window" : "global attention", " there");
      }
    } else {  // a period n: layer i is sliding when i % n < n - 1
      const std::int64_t n = pat->as_int(g.where(p + "attention.sliding_window_pattern"));
      MAXTEXT_CHECK(n == 4, UnsupportedError, "[gguf] ", g.path, ": ", p, "attention.sliding_window_pattern ", n,
                    ": MaxText's olmo3 block uses a period of 4 (L, L, L, G)");
    }
  }
  const double base_swa = g.get_float(p + "rope.freq_base_swa", c.rope_max_timescale);
  MAXTEXT_CHECK(base_swa == c.rope_max_timescale, UnsupportedError, "[gguf] ", g.path, ": ", p, "rope.freq_base_swa ",
                base_swa, " differs from rope.freq_base ", c.rope_max_timescale,
                ": MaxText's olmo3 block uses one rotary base for all layers");
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  if (scaling == "yarn") {
    c.rope_type = "yarn";
    c.rope_factor = g.get_float(p + "rope.scaling.factor", 1.0);
    c.original_max_position_embeddings = g.get_int(p + "rope.scaling.original_context_length", c.max_target_length);
    c.beta_fast = g.get_float(p + "rope.scaling.yarn_beta_fast", 32.0);
    c.beta_slow = g.get_float(p + "rope.scaling.yarn_beta_slow", 1.0);
    c.rope_truncate = true;  // ggml_rope_yarn_corr_dims floors / ceils the correction range
    c.rope_attention_scaling = true;
    const double want = detail::yarn_mscale(c.rope_factor);
    // llama.cpp's converter writes Hugging Face's attention_factor here (0.1 ln(factor) + 1 for OLMo 3).
    const double af = g.get_float(p + "rope.scaling.yarn_attn_factor", want);
    MAXTEXT_CHECK(std::fabs(af - want) <= 1e-6 * want, UnsupportedError, "[gguf] ", g.path, ": ", p,
                  "rope.scaling.yarn_attn_factor ", af, ": MaxText's YaRN scales by 0.1 ln(factor) + 1 = ", want);
    const double log_mul = g.get_float(p + "rope.scaling.yarn_log_multiplier", 0.0);
    MAXTEXT_CHECK(log_mul == 0.0, UnsupportedError, "[gguf] ", g.path, ": ", p, "rope.scaling.yarn_log_multiplier ", log_mul,
                  " (DeepSeek's mscale_all_dim) is not supported for olmo3");
  } else {
    MAXTEXT_CHECK(scaling == "none", UnsupportedError, "[gguf] ", g.path, ": ", p, "rope.scaling.type '", scaling,
                  "' is not supported for olmo3 (none, yarn)");
  }
  c.vocab_size = g.vocab_size(p);
  c.derive();
  return c;
}

/// Map OLMo 3 tensors to MaxText's olmo3 names: Hugging Face (`hf_names`: Olmo3ForCausalLM) or llama.cpp's olmo2
/// GGUF names. Both keep Hugging Face's half-split q/k rows (llama.cpp's olmo2 uses NeoX RoPE), which is the pairing
/// of MaxText's default and non-interleaved YaRN RoPE; the q/k norm scales [N*H] / [K*H] (over all heads) load as
/// they are, the query kernel unscaled (the block scales queries by head_dim^-0.5 in the forward pass). Without a
/// head tensor the classifier is tied to the embedding when `tied`.
inline TensorMap import_olmo3_names(const TensorMap& in, const Config& cfg, bool hf_names, bool tied,
                                    const std::string& what) {
  detail::Importer imp(in, cfg, RopeLayout::half_split, what);
  if (hf_names) {
    imp.globals("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", tied);
  } else {
    imp.globals("token_embd.weight", "output_norm.weight", "output.weight", tied);
  }
  const std::int64_t N = cfg.num_query_heads, K = cfg.num_kv_heads, H = cfg.head_dim, D = cfg.emb_dim;
  auto norm = [&](const AnyTensor& t, std::int64_t n, const std::string& name) {
    MAXTEXT_CHECK(t.rank() == 1 && t.shape[0] == n, ShapeError, "[import] ", t.source, " (", name, "): expected [", n,
                  "], found ", t.shape);
    return t;
  };
  for (std::int64_t i = 0; i < cfg.num_decoder_layers; ++i) {
    const std::string L = "decoder.layers_" + std::to_string(i) + ".";
    const std::string f = hf_names ? "model.layers." + std::to_string(i) + "." : "blk." + std::to_string(i) + ".";
    auto name = [&](const char* hf, const char* gg) { return f + (hf_names ? hf : gg) + ".weight"; };
    if (auto* t = imp.get(name("self_attn.q_proj", "attn_q")))
      imp.put(L + "attention.query.kernel", attention_kernel(*t, N, H, RopeLayout::half_split, RopeLayout::half_split, 1.0, L + "attention.query.kernel"));
    if (auto* t = imp.get(name("self_attn.k_proj", "attn_k")))
      imp.put(L + "attention.key.kernel", attention_kernel(*t, K, H, RopeLayout::half_split, RopeLayout::half_split, 1.0, L + "attention.key.kernel"));
    if (auto* t = imp.get(name("self_attn.v_proj", "attn_v")))
      imp.put(L + "attention.value.kernel", attention_kernel(*t, K, H, RopeLayout::half_split, RopeLayout::half_split, 1.0, L + "attention.value.kernel"));
    if (auto* t = imp.get(name("self_attn.o_proj", "attn_output")))
      imp.put(L + "attention.out.kernel", attention_out_kernel(*t, N, H, L + "attention.out.kernel"));
    if (auto* t = imp.get(name("self_attn.q_norm", "attn_q_norm")))
      imp.put(L + "attention.query_norm.scale", norm(*t, N * H, L + "attention.query_norm.scale"));
    if (auto* t = imp.get(name("self_attn.k_norm", "attn_k_norm")))
      imp.put(L + "attention.key_norm.scale", norm(*t, K * H, L + "attention.key_norm.scale"));
    if (auto* t = imp.get(name("post_attention_layernorm", "post_attention_norm")))
      imp.put(L + "post_self_attention_layer_norm.scale", norm(*t, D, L + "post_self_attention_layer_norm.scale"));
    if (auto* t = imp.get(name("post_feedforward_layernorm", "post_ffw_norm")))
      imp.put(L + "post_mlp_layer_norm.scale", norm(*t, D, L + "post_mlp_layer_norm.scale"));
    if (auto* t = imp.get(name("mlp.gate_proj", "ffn_gate"))) imp.put(L + "mlp.wi_0.kernel", dense_kernel(*t, L + "mlp.wi_0.kernel"));
    if (auto* t = imp.get(name("mlp.up_proj", "ffn_up"))) imp.put(L + "mlp.wi_1.kernel", dense_kernel(*t, L + "mlp.wi_1.kernel"));
    if (auto* t = imp.get(name("mlp.down_proj", "ffn_down"))) imp.put(L + "mlp.wo.kernel", dense_kernel(*t, L + "mlp.wo.kernel"));
  }
  std::vector<std::string> ignorable{"model.rotary_emb.", "rope_freqs.weight"};
  return imp.finish(ignorable);
}

}  // namespace maxtext::io
