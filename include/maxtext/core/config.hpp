// core/config.hpp: the MaxText configuration keys that change forward numerics, their base.yml defaults, the
// derived dimensions (configs/types.py) and validation. Spec: configs.md.
// Keys are declared once in MAXTEXT_CONFIG_FIELDS; the struct, the key lookup used by the YAML reader and the
// `key=value` override parser are all generated from that list.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maxtext/core/decoder_blocks.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext {

using StringList = std::vector<std::string>;

// X(type, key, base.yml default)
#define MAXTEXT_CONFIG_FIELDS(X)                                  \
  X(std::string, model_name, "default")                          \
  X(std::string, decoder_block, "llama2")                        \
  X(std::string, dtype, "bfloat16")                              \
  X(std::string, weight_dtype, "float32")                        \
  X(std::string, matmul_precision, "default")                    \
  X(std::int64_t, base_emb_dim, 2048)                            \
  X(std::int64_t, base_num_query_heads, 16)                      \
  X(std::int64_t, base_num_kv_heads, 16)                         \
  X(std::int64_t, base_mlp_dim, 7168)                            \
  X(std::int64_t, base_moe_mlp_dim, -1)                          \
  X(std::int64_t, base_num_decoder_layers, 16)                   \
  X(std::int64_t, head_dim, 128)                                 \
  X(double, global_parameter_scale, 1)                           \
  X(StringList, mlp_activations, (StringList{"silu", "linear"})) \
  X(double, mlp_activations_limit, -1.0)                         \
  X(bool, activations_in_float32, false)                         \
  X(double, normalization_layer_epsilon, 1e-5)                   \
  X(std::int64_t, vocab_size, 32000)                             \
  X(bool, logits_via_embedding, false)                           \
  X(bool, normalize_embedding_logits, true)                      \
  X(bool, logits_dot_in_fp32, false)                             \
  X(bool, cast_logits_to_fp32, true)                             \
  X(double, final_logits_soft_cap, 0.0)                          \
  X(double, attn_logits_soft_cap, 0.0)                           \
  X(bool, use_post_attn_norm, false)                             \
  X(bool, use_post_ffw_norm, false)                              \
  X(bool, float32_qk_product, false)                             \
  X(bool, float32_logits, false)                                 \
  X(bool, fused_qkv, false)                                      \
  X(bool, fused_mlp, false)                                      \
  X(std::string, attention, "autoselected")                      \
  X(std::string, attention_type, "global")                       \
  X(bool, share_kv_projections, false)                           \
  X(std::int64_t, global_head_dim, 0)                            \
  X(std::int64_t, global_num_kv_heads, 0)                        \
  X(std::int64_t, hidden_size_per_layer_input, 0)                \
  X(std::int64_t, vocab_size_per_layer_input, 0)                 \
  X(std::int64_t, num_kv_shared_layers, 0)                       \
  X(bool, use_double_wide_mlp, false)                            \
  X(bool, attention_bias, false)                                 \
  X(bool, attention_sink, false)                                 \
  X(std::int64_t, sliding_window_size, 0)                        \
  X(std::int64_t, chunk_attn_window_size, 0)                     \
  X(bool, use_qk_norm, false)                                    \
  X(bool, qk_norm_with_scale, true)                              \
  X(bool, v_norm_with_scale, true)                               \
  X(bool, temperature_tuning, false)                             \
  X(std::int64_t, nope_layer_interval, -1)                       \
  X(std::int64_t, interleave_moe_layer_step, 1)                  \
  X(std::string, rope_type, "default")                           \
  X(double, rope_min_timescale, 1)                               \
  X(double, rope_max_timescale, 10000)                           \
  X(double, local_rope_max_timescale, -1)                        \
  X(double, global_rope_max_timescale, -1)                       \
  X(double, global_rope_proportion, 0.25)                        \
  X(double, local_rope_proportion, 1.0)                          \
  X(double, rope_linear_scaling_factor, 1.0)                     \
  X(bool, rope_use_scale, true)                                  \
  X(double, llama3_rope_factor, 8.0)                             \
  X(double, llama3_rope_low_freq_factor, 1.0)                    \
  X(double, llama3_rope_high_freq_factor, 4.0)                   \
  X(double, llama3_rope_original_context, 8192.0)                \
  X(double, partial_rotary_factor, 1.0)                          \
  X(bool, use_mrope, false)                                      \
  X(std::int64_t, max_position_embeddings, 163840)               \
  X(std::int64_t, original_max_position_embeddings, 4096)        \
  X(double, rope_factor, 40)                                     \
  X(double, beta_fast, 32)                                       \
  X(double, beta_slow, 1)                                        \
  X(double, mscale, 1.0)                                         \
  X(bool, rope_interleave, true)                                 \
  X(bool, rope_truncate, true)                                   \
  X(bool, rope_attention_scaling, false)                         \
  X(bool, rope_pairwise, false)                                  \
  X(bool, use_untrainable_positional_embedding, false)           \
  X(std::int64_t, trainable_position_size, -1)                   \
  X(bool, use_iota_embed, false)                                 \
  X(std::int64_t, mtp_num_layers, 0)                             \
  X(std::int64_t, q_lora_rank, 0)                                \
  X(std::int64_t, kv_lora_rank, 512)                             \
  X(std::int64_t, qk_nope_head_dim, 128)                         \
  X(std::int64_t, qk_rope_head_dim, 64)                          \
  X(std::int64_t, v_head_dim, 128)                               \
  X(bool, mla_naive_kvcache, true)                               \
  X(std::int64_t, num_experts, 1)                                \
  X(std::int64_t, num_experts_per_tok, 1)                        \
  X(double, capacity_factor, -1.0)                               \
  X(bool, sparse_matmul, true)                                   \
  X(bool, megablox, true)                                        \
  X(std::int64_t, moe_expert_input_dim, -1)                      \
  X(std::int64_t, attention_output_dim, -1)                      \
  X(std::string, routed_score_func, "")                          \
  X(bool, routed_bias, false)                                    \
  X(double, routed_scaling_factor, 1.0)                          \
  X(double, routed_bias_update_rate, 0.0)                        \
  X(std::int64_t, n_routing_groups, -1)                          \
  X(std::int64_t, topk_routing_group, -1)                        \
  X(bool, norm_topk_prob, false)                                 \
  X(std::int64_t, shared_experts, 0)                             \
  X(std::int64_t, first_num_dense_layers, 0)                     \
  X(bool, float32_gate_logits, false)                            \
  X(bool, float32_weight_sum, true)                              \
  X(double, load_balance_loss_weight, 0.0)                       \
  X(bool, mlp_bias, false)                                       \
  X(double, dense_init_scale, 1.0)                               \
  X(std::string, model_call_mode, "")                            \
  X(std::int64_t, max_target_length, 2048)                       \
  X(std::int64_t, max_prefill_predict_length, 64)                \
  X(bool, scan_layers, true)                                     \
  X(std::int64_t, param_scan_axis, 1)                            \
  X(std::int64_t, init_weights_seed, 0)                          \
  X(bool, enable_dropout, true)                                  \
  X(double, dropout_rate, 0.0)                                   \
  X(std::int64_t, inhomogeneous_layer_cycle_interval, 1)        \
  X(std::int64_t, gdn_conv_kernel_dim, 4)                        \
  X(std::int64_t, gdn_key_head_dim, 128)                         \
  X(std::int64_t, gdn_value_head_dim, 128)                       \
  X(std::int64_t, gdn_num_key_heads, 16)                         \
  X(std::int64_t, gdn_num_value_heads, 32)                       \
  X(std::int64_t, gdn_chunk_size, 64)                            \
  X(bool, use_qk_norm_in_gdn, true)                              \
  X(std::int64_t, mhc_expansion_rate, 1)                         \
  X(std::int64_t, sinkhorn_iterations, 20)                       \
  X(bool, enable_mhc_lite, false)                                \
  X(bool, use_mhc_pallas_kernel, false)                          \
  X(std::int64_t, engram_num_heads, 8)                           \
  X(std::int64_t, engram_head_dim, 1280)                         \
  X(std::int64_t, engram_max_ngram_size, 3)                      \
  X(std::int64_t, engram_kernel_size, 4)                         \
  X(std::int64_t, engram_seed, 0)                                \
  X(std::int64_t, first_num_hash_layers, 0)                      \
  X(std::int64_t, indexer_n_heads, 64)                           \
  X(std::int64_t, indexer_head_dim, 128)                         \
  X(std::int64_t, indexer_topk, 2048)                            \
  X(std::int64_t, o_groups, 0)                                   \
  X(std::int64_t, o_lora_rank, 0)                                \
  X(double, compressed_rope_max_timescale, 160000)

// Every key above is MaxText's except the four llama3_rope_* keys: MaxText's LLaMA-3.1 RoPE hard-codes factor 8,
// low_freq_factor 1, high_freq_factor 4 and an original context of 8192 (embeddings.py LLaMARotaryEmbedding); these
// keys default to exactly those values and exist so that Hugging Face files with other `rope_scaling` values (Llama
// 3.2's factor 32, Llama 4 Scout's 16 / 1 / 1) load with the scaling their weights were trained with
// (docs/numerics.md §LLaMA-3 RoPE parameters).

/// The most mHC streams (mhc_expansion_rate) the backends take: the k x k Sinkhorn matrix (full form) or the k!
/// permutation weights (mHC-lite) of a token live in fixed per-thread arrays (backend/common/kernel_math.hpp).
inline constexpr std::int64_t kMhcMaxStreams = 8;
inline constexpr std::int64_t kMhcMaxLiteStreams = 5;

/// The configuration. Field names are MaxText's keys (and the extensions above); emb_dim etc. are derived by derive().
struct Config {
#define MAXTEXT_DECLARE_FIELD(type, key, dflt) type key = dflt;
  MAXTEXT_CONFIG_FIELDS(MAXTEXT_DECLARE_FIELD)
#undef MAXTEXT_DECLARE_FIELD

  // Derived (types.py), filled by derive().
  std::int64_t emb_dim = 0;
  std::int64_t num_query_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t mlp_dim = 0;
  std::int64_t moe_mlp_dim = 0;
  std::int64_t num_decoder_layers = 0;

  /// Keys read from files or overrides that are not fields: list keys the library reads (config_keys::extension),
  /// MaxText keys an inference forward pass ignores (training-only keys such as `adam_b1`), and refused features.
  /// Kept verbatim; io::load_config refuses an unknown one (check_config_keys, core/config_keys.hpp).
  std::map<std::string, std::string> extra;
  /// Keys that were set explicitly (by a file or an override), for messages and for "was this given?" checks.
  std::map<std::string, std::string> origin;
  /// Expert parallelism (models/parallel.hpp expert_parallel_config; not a key): this model holds experts
  /// [rank * E / ranks, (rank + 1) * E / ranks) of every MoE layer and sums its share of each MoE output over the
  /// expert ranks. ranks = 1: all experts.
  struct ExpertShard {
    std::int64_t rank = 0;
    std::int64_t ranks = 1;
  } expert_shard;
  /// Tensor parallelism's vocabulary split of the output head (models/parallel.hpp tensor_parallel_config; not a key):
  /// logits_dense holds vocab_size / head_shards of the vocabulary's columns, this rank's, and a forward pass gathers
  /// the ranks' logits. 1: the whole head.
  std::int64_t head_shards = 1;
  /// Tensor parallelism's head split (models/parallel.hpp tensor_parallel_config; not a key): the ranks the query and
  /// kv heads are split over, this model holding 1/tensor_shards of them. A statistic over all heads (OLMo 3's global
  /// qk norm) gathers the others' heads. 1: every head.
  std::int64_t tensor_shards = 1;
  /// Pipeline parallelism (models/parallel.hpp pipeline_parallel_config; not a key): the decoder layers dealt to
  /// `stages` stages and this model holds stage `stage`'s. `chunk` > 0: MaxText's layout, chunks of `chunk` consecutive
  /// layers (num_layers_per_pipeline_stage) dealt to the stages in turn (circular when there are several repeats);
  /// 0: one run of consecutive layers per stage, the first L % stages stages taking one more. stages = 1: every layer.
  struct PipelineStage {
    std::int64_t stage = 0;
    std::int64_t stages = 1;
    std::int64_t chunk = 0;
  } pipeline;
  /// The pipeline stage that holds decoder layer `layer` (Config::pipeline); 0 without pipeline parallelism.
  std::int64_t pipeline_owner(std::int64_t layer) const {
    const std::int64_t S = pipeline.stages, L = num_decoder_layers;
    if (S <= 1 || L <= 0) return 0;
    if (pipeline.chunk > 0) return (layer / pipeline.chunk) % S;
    const std::int64_t small = L / S, big = L % S;  // stages [0, big) hold small + 1 layers, the rest small
    const std::int64_t edge = big * (small + 1);
    return layer < edge ? layer / (small + 1) : big + (layer - edge) / small;
  }

  /// Compute emb_dim, heads, mlp dims and layer count from the base_* keys and global_parameter_scale.
  void derive() {
    const double s = global_parameter_scale;
    const double lg = std::log2(s);
    MAXTEXT_CHECK(s > 0 && std::fabs(lg - std::round(lg)) < 1e-9 && lg >= 0, ConfigError,
                  "[config] global_parameter_scale must be a power of two >= 1, found ", s);
    MAXTEXT_CHECK(lg <= 30, ConfigError, "[config] global_parameter_scale must be at most 2^30, found ", s);
    const auto n = static_cast<std::int64_t>(std::llround(lg));
    const std::int64_t b = n / 3, r = n % 3;
    const std::int64_t heads_exp = b + (r > 0 ? 1 : 0), emb_exp = b + (r > 1 ? 1 : 0), layer_exp = b;
    // Shifting a negative or too large base value would be undefined; validate() refuses what lies out of range.
    auto scaled = [](const char* key, std::int64_t v, std::int64_t e) {
      MAXTEXT_CHECK(v <= (std::numeric_limits<std::int64_t>::max() >> e), ConfigError, "[config] ", key, " = ", v,
                    " overflows when scaled by global_parameter_scale");
      return v > 0 ? v << e : v;
    };
    emb_dim = scaled("base_emb_dim", base_emb_dim, emb_exp);
    num_query_heads = scaled("base_num_query_heads", base_num_query_heads, heads_exp);
    num_kv_heads = scaled("base_num_kv_heads", base_num_kv_heads, heads_exp);
    mlp_dim = scaled("base_mlp_dim", base_mlp_dim, heads_exp);
    moe_mlp_dim = scaled("base_moe_mlp_dim", base_moe_mlp_dim, heads_exp);
    num_decoder_layers = scaled("base_num_decoder_layers", base_num_decoder_layers, layer_exp);
  }

  /// Upper bounds validate() puts on the sizes a configuration declares (docs/security.md). They lie far above any
  /// released model and keep a hostile config.json or GGUF header from making the model allocate without bound
  /// before its weights are read: layer objects exist, and rotary / sinusoidal tables hold max_target_length
  /// positions, as soon as the model is constructed. Weight tensors themselves are allocated only after the loader
  /// has matched their shapes against the file.
  struct Limits {
    static constexpr std::int64_t width = std::int64_t{1} << 18;       ///< emb_dim, mlp_dim, moe_mlp_dim, LoRA ranks
    static constexpr std::int64_t head_dim = std::int64_t{1} << 14;    ///< head_dim and the MLA head dims
    static constexpr std::int64_t heads = std::int64_t{1} << 14;       ///< query and key/value heads
    static constexpr std::int64_t vocab = std::int64_t{1} << 24;       ///< vocab_size
    static constexpr std::int64_t layers = std::int64_t{1} << 12;      ///< num_decoder_layers
    static constexpr std::int64_t experts = std::int64_t{1} << 14;     ///< num_experts, shared_experts
    static constexpr std::int64_t positions = std::int64_t{1} << 22;   ///< max_target_length and position keys
    static constexpr std::int64_t attended = std::int64_t{1} << 30;    ///< max_target_length * head_dim (rope table)
  };

  /// Refuse inconsistent or unsupported configurations, naming the keys. Call after derive().
  void validate() const;

  bool is(std::string_view block) const { return decoder_block == block; }
  /// qwen3_next or qwen3_5: MaxText's hybrid Gated DeltaNet / gated attention blocks (models/qwen3.py, qwen3_5.py;
  /// attentions.py's is_qwen3_hybrid). qwen3_5's text layers are qwen3_next's classes.
  bool is_qwen3_hybrid() const { return is("qwen3_next") || is("qwen3_5"); }
  /// mrope_section (use_mrope): the temporal / height / width frequency counts of the multimodal rotary embedding,
  /// [24, 20, 20] when unset (configs/types.py).
  std::vector<std::int64_t> mrope_section() const;
  /// engram_layers: the layers (global indices) that hold an Engram module (deepseek.py); empty when unset.
  std::vector<std::int64_t> engram_layers() const { return int_list("engram_layers", {}, 0); }
  /// compress_ratios (decoder_block deepseek4): per layer 0 (sliding window only), 4 (CSA) or > 4 (HCA).
  std::vector<std::int64_t> compress_ratios() const { return int_list("compress_ratios", {}, 0); }
  /// engram_vocab_bases: the smallest hash-table size of each n-gram order 2..engram_max_ngram_size.
  std::vector<std::int64_t> engram_vocab_bases() const { return int_list("engram_vocab_bases", {646400, 646400}, 1); }
  /// A list key kept in `extra` as integers >= `min`, or `dflt` when unset or None.
  std::vector<std::int64_t> int_list(const std::string& key, std::vector<std::int64_t> dflt, std::int64_t min) const;
  /// True for the "float32" / "bfloat16" / "float16" spelling of `dtype`.
  std::string dtype_canonical() const { return canonical_dtype(dtype); }
  /// `key`: the key the value came from, for the message (dtype, weight_dtype, ...).
  static std::string canonical_dtype(const std::string& d, const char* key = "dtype") {
    if (d == "float32" || d == "fp32" || d == "f32") return "float32";
    if (d == "bfloat16" || d == "bf16") return "bfloat16";
    if (d == "float16" || d == "fp16" || d == "f16" || d == "half") return "float16";
    MAXTEXT_THROW(ConfigError, "[config] ", key, ": expected float32, bfloat16 or float16, found '", d, "'");
  }

  /// Set one key from its textual value (YAML scalar or command-line `key=value`). Unknown keys go to `extra`.
  void set(const std::string& key, const std::string& value, const std::string& where = "override");
  /// Set a list-valued key.
  void set_list(const std::string& key, const StringList& values, const std::string& where = "override");
  /// The textual value of a known key (for messages and for writing configs back).
  std::string get(const std::string& key) const;
  /// True when `key` is one of the modelled keys.
  static bool known(const std::string& key);
};

namespace detail {

inline std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}
inline std::string unquote(std::string s) {
  s = trim(s);
  if (s.size() >= 2 && ((s.front() == '"' && s.back() == '"') || (s.front() == '\'' && s.back() == '\''))) {
    return s.substr(1, s.size() - 2);
  }
  return s;
}
inline std::string strip_underscores(std::string s) {
  std::string o;
  for (char c : s) {
    if (c != '_') o.push_back(c);
  }
  return o;
}
inline void parse_value(const std::string& /*key*/, const std::string& text, std::string& out) { out = unquote(text); }
inline void parse_value(const std::string& key, const std::string& text, std::int64_t& out) {
  const std::string t = strip_underscores(unquote(text));
  std::size_t pos = 0;
  bool out_of_range = false;
  try {
    const double d = std::stod(t, &pos);
    if (pos == t.size() && std::floor(d) == d && t.find_first_of(".eE") != std::string::npos) {
      // 2^63 is exact in a double; a value at or beyond it would not convert (undefined behaviour).
      out_of_range = !(std::fabs(d) < 9223372036854775808.0);
      if (!out_of_range) out = static_cast<std::int64_t>(d);
    } else {
      out = std::stoll(t, &pos, 0);
    }
  } catch (const std::out_of_range&) {
    out_of_range = true;
  } catch (const std::exception&) {
    pos = std::string::npos;
  }
  MAXTEXT_CHECK(!out_of_range, ConfigError, "[config] ", key, ": ", text, " is outside the 64-bit integer range");
  MAXTEXT_CHECK(pos == t.size(), ConfigError, "[config] ", key, ": expected an integer, found '", text, "'");
}
inline void parse_value(const std::string& key, const std::string& text, double& out) {
  const std::string t = strip_underscores(unquote(text));
  std::size_t pos = 0;
  try {
    out = std::stod(t, &pos);
  } catch (const std::exception&) {
    pos = std::string::npos;
  }
  MAXTEXT_CHECK(pos == t.size(), ConfigError, "[config] ", key, ": expected a number, found '", text, "'");
}
inline void parse_value(const std::string& key, const std::string& text, bool& out) {
  const std::string t = unquote(text);
  if (t == "true" || t == "True" || t == "TRUE" || t == "1") {
    out = true;
  } else if (t == "false" || t == "False" || t == "FALSE" || t == "0") {
    out = false;
  } else {
    MAXTEXT_THROW(ConfigError, "[config] ", key, ": expected true or false, found '", text, "'");
  }
}
/// Lists from the command line: ["silu","linear"], [silu, linear] or silu,linear.
inline void parse_value(const std::string& key, const std::string& text, StringList& out) {
  std::string t = trim(text);
  if (!t.empty() && t.front() == '[') {
    MAXTEXT_CHECK(t.back() == ']', ConfigError, "[config] ", key, ": unterminated list '", text, "'");
    t = t.substr(1, t.size() - 2);
  }
  out.clear();
  std::string cur;
  for (char c : t) {
    if (c == ',') {
      if (!trim(cur).empty()) out.push_back(unquote(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!trim(cur).empty()) out.push_back(unquote(cur));
}
inline std::string format_value(const std::string& v) { return v; }
inline std::string format_value(std::int64_t v) { return std::to_string(v); }
inline std::string format_value(double v) { return str(v); }
inline std::string format_value(bool v) { return v ? "true" : "false"; }
inline std::string format_value(const StringList& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}
}  // namespace detail

inline bool Config::known(const std::string& key) {
#define MAXTEXT_KNOWN_FIELD(type, k, dflt) \
  if (key == #k) return true;
  MAXTEXT_CONFIG_FIELDS(MAXTEXT_KNOWN_FIELD)
#undef MAXTEXT_KNOWN_FIELD
  return false;
}

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void Config::set(const std::string& key, const std::string& value, const std::string& where) {
#define MAXTEXT_SET_FIELD(type, k, dflt)        \
  if (key == #k) {                              \
    detail::parse_value(key, value, this->k);   \
    origin[key] = where;                        \
    return;                                     \
  }
  MAXTEXT_CONFIG_FIELDS(MAXTEXT_SET_FIELD)
#undef MAXTEXT_SET_FIELD
  MAXTEXT_CHECK(!(key == "emb_dim" || key == "num_query_heads" || key == "num_kv_heads" || key == "mlp_dim" ||
                  key == "num_decoder_layers" || key == "moe_mlp_dim"),
                ConfigError, "[config] ", key, " is derived (", where, "); set base_", key, " instead");
  extra[key] = detail::unquote(value);
  origin[key] = where;
}
#endif

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void Config::set_list(const std::string& key, const StringList& values, const std::string& where) {
  if (key == "mlp_activations") {
    mlp_activations = values;
    origin[key] = where;
    return;
  }
  extra[key] = detail::format_value(values);
}
#endif

inline std::vector<std::int64_t> Config::int_list(const std::string& key, std::vector<std::int64_t> dflt,
                                                  std::int64_t min) const {
  const auto it = extra.find(key);
  if (it == extra.end() || it->second == "None" || it->second == "null") return dflt;
  StringList items;
  detail::parse_value(key, it->second, items);
  std::vector<std::int64_t> out;
  for (const auto& v : items) {
    std::int64_t n = min - 1;
    try {
      std::size_t used = 0;
      n = std::stoll(v, &used);
      if (used != v.size()) n = min - 1;
    } catch (const std::exception&) {
      n = min - 1;
    }
    MAXTEXT_CHECK(n >= min, ConfigError, "[config] ", key, ": expected a list of integers >= ", min, ", found '",
                  it->second, "'");
    out.push_back(n);
  }
  return out;
}

inline std::vector<std::int64_t> Config::mrope_section() const {
  const std::vector<std::int64_t> out = int_list("mrope_section", {24, 20, 20}, 0);
  MAXTEXT_CHECK(out.size() == 3, ConfigError, "[config] mrope_section: expected three entries (temporal, height, width), "
                "found ", out);
  return out;
}

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::string Config::get(const std::string& key) const {
#define MAXTEXT_GET_FIELD(type, k, dflt) \
  if (key == #k) return detail::format_value(this->k);
  MAXTEXT_CONFIG_FIELDS(MAXTEXT_GET_FIELD)
#undef MAXTEXT_GET_FIELD
  auto it = extra.find(key);
  MAXTEXT_CHECK(it != extra.end(), ConfigError, "[config] unknown key '", key, "'");
  return it->second;
}
#endif


/// Features MaxText has that change the forward pass but that this library does not implement: the key, and a
/// predicate telling whether a value enables the feature. A config that enables one is refused.
struct UnsupportedFeature {
  const char* key;
  const char* what;
  bool (*enabled)(const std::string& value);
};
namespace detail {
inline bool nonempty_list(const std::string& v) {
  const std::string t = trim(v);
  return !(t.empty() || t == "[]" || t == "None" || t == "null" || t == "''" || t == "\"\"");
}
/// True for the spellings of true that parse_value(bool) accepts (true, True, TRUE, 1): the one boolean reading.
/// Anything else is false here; check_config_keys (core/config_keys.hpp) refuses a value that is no boolean.
inline bool truthy(const std::string& v) {
  const std::string t = unquote(v);
  return t == "true" || t == "True" || t == "TRUE" || t == "1";
}
inline bool greater_than_one(const std::string& v) {
  try {
    return std::stod(unquote(v)) > 1.0;
  } catch (const std::exception&) {
    return true;
  }
}
inline bool positive(const std::string& v) {
  try {
    return std::stod(unquote(v)) > 0.0;
  } catch (const std::exception&) {
    return true;
  }
}
}  // namespace detail

inline const std::vector<UnsupportedFeature>& unsupported_features() {
  static const std::vector<UnsupportedFeature> list = {
      {"use_batch_split_schedule", "the DeepSeek batch-split schedule", detail::truthy},
      {"use_indexer", "the DeepSeek-3.2 sparse-attention indexer", detail::truthy},
      {"quantization", "AQT/qwix/fp8 quantized training numerics", detail::nonempty_list},
      {"use_multimodal", "image / audio inputs (maxtext-cpp runs the text decoder only)", detail::truthy},
      {"use_random_routing", "random MoE routing", detail::truthy},
      {"moba", "MoBA attention", detail::truthy},
      {"use_qk_clip", "QK-clip", detail::truthy},
      {"prefuse_moe_weights", "pre-fused MoE expert kernels (wi [E, D, 2F])", detail::truthy},
      {"padded_base_moe_mlp_dim", "padded MoE expert hidden dims",
       [](const std::string& v) {  // None (the default) is off
         try {
           return std::stod(detail::unquote(v)) > 0.0;
         } catch (const std::exception&) {
           return false;
         }
       }},
  };
  return list;
}

/// decoder_block values this library implements (as compile-time layer types and from a config): the names of the
/// one block list, core/decoder_blocks.hpp.
inline const std::vector<std::string>& supported_decoder_blocks() {
#define MAXTEXT_BLOCK_NAME(name, ...) #name,
  static const std::vector<std::string> list = {MAXTEXT_DECODER_BLOCKS(MAXTEXT_BLOCK_NAME, MAXTEXT_BLOCK_NAME)};
#undef MAXTEXT_BLOCK_NAME
  return list;
}

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void Config::validate() const {
  (void)canonical_dtype(dtype);
  (void)canonical_dtype(weight_dtype, "weight_dtype");
  for (const auto& f : unsupported_features()) {
    auto it = extra.find(f.key);
    MAXTEXT_CHECK(it == extra.end() || !f.enabled(it->second), UnsupportedError, "[config] ", f.key, " = ",
                  it->second, " enables ", f.what, ", which maxtext-cpp does not implement");
  }
  bool block_ok = false;
  for (const auto& b : supported_decoder_blocks()) block_ok = block_ok || b == decoder_block;
  MAXTEXT_CHECK(block_ok, UnsupportedError, "[config] decoder_block '", decoder_block, "' is not supported; expected one of ",
                supported_decoder_blocks());
  MAXTEXT_CHECK(emb_dim > 0, ConfigError, "[config] emb_dim (base_emb_dim * scale) must be > 0, found ", emb_dim);
  MAXTEXT_CHECK(num_query_heads > 0 && num_kv_heads > 0, ConfigError,
                "[config] num_query_heads and num_kv_heads must be > 0, found ", num_query_heads, " and ", num_kv_heads);
  MAXTEXT_CHECK(num_query_heads % num_kv_heads == 0, ConfigError, "[config] num_query_heads (", num_query_heads,
                ") must be a multiple of num_kv_heads (", num_kv_heads, ")");
  MAXTEXT_CHECK(head_dim > 0, ConfigError, "[config] head_dim must be > 0, found ", head_dim);
  MAXTEXT_CHECK(vocab_size > 0, ConfigError, "[config] vocab_size must be > 0, found ", vocab_size);
  MAXTEXT_CHECK(mtp_num_layers >= 0, ConfigError, "[config] mtp_num_layers must be >= 0, found ", mtp_num_layers);
  if (mtp_num_layers > 0) {
    std::vector<std::string> mtp_blocks;
#define MAXTEXT_MTP_BLOCK_NAME(name) mtp_blocks.emplace_back(#name);
    MAXTEXT_MTP_BLOCKS(MAXTEXT_MTP_BLOCK_NAME)
#undef MAXTEXT_MTP_BLOCK_NAME
    const std::string_view runs_as = decoder_block_runs_as(decoder_block);
    MAXTEXT_CHECK(std::find(mtp_blocks.begin(), mtp_blocks.end(), runs_as) != mtp_blocks.end(), UnsupportedError,
                  "[config] mtp_num_layers = ", mtp_num_layers, ": decoder_block '", decoder_block,
                  "' chooses its layers' kind by their index, and MaxText builds an MTP layer without one; the blocks "
                  "with multi-token prediction layers: ", mtp_blocks);
    MAXTEXT_CHECK(mhc_expansion_rate <= 1, UnsupportedError, "[config] mtp_num_layers = ", mtp_num_layers,
                  " with mhc_expansion_rate = ", mhc_expansion_rate, " (hyper-connection streams) is not supported");
    MAXTEXT_CHECK(!use_untrainable_positional_embedding && trainable_position_size <= 0, UnsupportedError,
                  "[config] mtp_num_layers = ", mtp_num_layers, " with position embeddings (",
                  use_untrainable_positional_embedding ? "use_untrainable_positional_embedding" : "trainable_position_size",
                  ") is not supported");
  }
  MAXTEXT_CHECK(num_decoder_layers > 0, ConfigError, "[config] num_decoder_layers (base_num_decoder_layers) must be > 0, found ",
                num_decoder_layers);
  MAXTEXT_CHECK(normalization_layer_epsilon >= 0, ConfigError, "[config] normalization_layer_epsilon must be >= 0, found ",
                normalization_layer_epsilon);
  MAXTEXT_CHECK(max_target_length > 0, ConfigError, "[config] max_target_length must be > 0, found ", max_target_length);
  MAXTEXT_CHECK(!mlp_activations.empty(), ConfigError, "[config] mlp_activations must not be empty");
  auto at_most = [](const char* key, std::int64_t v, std::int64_t limit) {
    MAXTEXT_CHECK(v <= limit, ConfigError, "[config] ", key, " = ", v, " is above the limit ", limit,
                  " (Config::Limits; no released model comes near it: the file or override is likely corrupt)");
  };
  at_most("emb_dim (base_emb_dim * scale)", emb_dim, Limits::width);
  at_most("mlp_dim (base_mlp_dim * scale)", mlp_dim, Limits::width);
  at_most("moe_mlp_dim (base_moe_mlp_dim * scale)", moe_mlp_dim, Limits::width);
  at_most("q_lora_rank", q_lora_rank, Limits::width);
  at_most("kv_lora_rank", kv_lora_rank, Limits::width);
  at_most("moe_expert_input_dim", moe_expert_input_dim, Limits::width);
  at_most("attention_output_dim", attention_output_dim, Limits::width);
  at_most("head_dim", head_dim, Limits::head_dim);
  at_most("qk_nope_head_dim", qk_nope_head_dim, Limits::head_dim);
  at_most("qk_rope_head_dim", qk_rope_head_dim, Limits::head_dim);
  at_most("v_head_dim", v_head_dim, Limits::head_dim);
  at_most("num_query_heads (base_num_query_heads * scale)", num_query_heads, Limits::heads);
  at_most("num_kv_heads (base_num_kv_heads * scale)", num_kv_heads, Limits::heads);
  at_most("vocab_size", vocab_size, Limits::vocab);
  at_most("num_decoder_layers (base_num_decoder_layers * scale)", num_decoder_layers, Limits::layers);
  at_most("num_experts", num_experts, Limits::experts);
  at_most("shared_experts", shared_experts, Limits::experts);
  at_most("max_target_length", max_target_length, Limits::positions);
  at_most("max_prefill_predict_length", max_prefill_predict_length, Limits::positions);
  at_most("trainable_position_size", trainable_position_size, Limits::positions);
  at_most("sliding_window_size", sliding_window_size, Limits::positions);
  at_most("chunk_attn_window_size", chunk_attn_window_size, Limits::positions);
  MAXTEXT_CHECK(llama3_rope_factor > 0 && llama3_rope_low_freq_factor > 0 &&
                    llama3_rope_high_freq_factor >= llama3_rope_low_freq_factor && llama3_rope_original_context > 0,
                ConfigError, "[config] llama3_rope_factor (", llama3_rope_factor, "), llama3_rope_low_freq_factor (",
                llama3_rope_low_freq_factor, ") and llama3_rope_original_context (", llama3_rope_original_context,
                ") must be > 0 and llama3_rope_high_freq_factor (", llama3_rope_high_freq_factor,
                ") >= llama3_rope_low_freq_factor");
  at_most("max_target_length * head_dim", max_target_length * std::max(head_dim, qk_rope_head_dim),
          Limits::attended);
  if (decoder_block == "gpt3") {
    MAXTEXT_CHECK(num_query_heads == num_kv_heads, ConfigError, "[config] decoder_block gpt3 needs num_query_heads == num_kv_heads, found ",
                  num_query_heads, " and ", num_kv_heads);
  }
  if (decoder_block == "qwen3_moe" || decoder_block == "qwen3_custom_moe") {
    MAXTEXT_CHECK(num_experts >= 1, ConfigError, "[config] decoder_block ", decoder_block,
                  " needs num_experts >= 1, found ", num_experts);
    MAXTEXT_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts, ConfigError, "[config] decoder_block ",
                  decoder_block, ": num_experts_per_tok must be in [1, num_experts=", num_experts, "], found ",
                  num_experts_per_tok);
    MAXTEXT_CHECK(moe_mlp_dim > 0, ConfigError, "[config] decoder_block ", decoder_block,
                  " needs base_moe_mlp_dim > 0 (the expert hidden size), found ", base_moe_mlp_dim);
  }
  if (decoder_block == "qwen3_custom_moe") {  // qwen3_custom.py and types.py's check
    MAXTEXT_CHECK(attention_output_dim > 0 && attention_output_dim == moe_expert_input_dim, ConfigError,
                  "[config] decoder_block qwen3_custom_moe needs attention_output_dim > 0 and equal to "
                  "moe_expert_input_dim (the width the attention writes and the experts read), found ",
                  attention_output_dim, " and ", moe_expert_input_dim);
  }  // other blocks ignore attention_output_dim, as MaxText's do
  if (decoder_block == "simple_mlp") {
    MAXTEXT_CHECK(mlp_dim > 0, ConfigError, "[config] decoder_block simple_mlp needs base_mlp_dim > 0, found ", base_mlp_dim);
  }
  if (decoder_block == "gemma2" || decoder_block == "gemma3") {
    MAXTEXT_CHECK(sliding_window_size > 0, ConfigError, "[config] decoder_block ", decoder_block,
                  " needs sliding_window_size > 0 (its local layers use sliding-window attention), found ",
                  sliding_window_size);
  }
  if (decoder_block == "gpt_oss") {
    MAXTEXT_CHECK(num_experts >= 1, ConfigError, "[config] decoder_block gpt_oss needs num_experts >= 1, found ", num_experts);
    MAXTEXT_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts, ConfigError,
                  "[config] decoder_block gpt_oss: num_experts_per_tok must be in [1, num_experts=", num_experts,
                  "], found ", num_experts_per_tok);
    MAXTEXT_CHECK(mlp_dim > 0, ConfigError, "[config] decoder_block gpt_oss needs base_mlp_dim > 0 (the expert hidden "
                  "size), found ", base_mlp_dim);
    MAXTEXT_CHECK(mlp_activations_limit > 0.0, ConfigError, "[config] decoder_block gpt_oss clamps its SwiGLU at "
                  "mlp_activations_limit, which must be > 0 (7.0 in the gpt-oss ymls), found ", mlp_activations_limit);
    MAXTEXT_CHECK(sliding_window_size > 0, ConfigError, "[config] decoder_block gpt_oss needs sliding_window_size > 0 "
                  "(its even layers use sliding-window attention), found ", sliding_window_size);
    MAXTEXT_CHECK(sliding_window_size <= max_target_length, ConfigError, "[config] decoder_block gpt_oss: "
                  "sliding_window_size (", sliding_window_size, ") is larger than the cache (max_target_length ",
                  max_target_length, ")");
    MAXTEXT_CHECK(sparse_matmul || capacity_factor == -1.0, ConfigError, "[config] decoder_block gpt_oss: the dense "
                  "MoE path (sparse_matmul=false) is dropless only (capacity_factor=-1), found capacity_factor ",
                  capacity_factor);
    MAXTEXT_CHECK(inhomogeneous_layer_cycle_interval >= 1, ConfigError, "[config] decoder_block gpt_oss: "
                  "inhomogeneous_layer_cycle_interval must be >= 1, found ", inhomogeneous_layer_cycle_interval);
    MAXTEXT_CHECK(!scan_layers || num_decoder_layers % inhomogeneous_layer_cycle_interval == 0,
                  ConfigError, "[config] decoder_block gpt_oss: inhomogeneous_layer_cycle_interval (",
                  inhomogeneous_layer_cycle_interval, ") must divide num_decoder_layers (", num_decoder_layers,
                  "): MaxText's scanned GptOssScannableBlock would drop the remainder layers");
  }
  if (decoder_block == "llama4") {
    // llama4.py: layer i is NoPE (global attention, temperature tuning) when nope_layer_interval > 0 and
    // (i + 1) % nope_layer_interval == 0, else chunked attention with RoPE; MoE when interleave_moe_layer_step > 0
    // and (i + 1) % interleave_moe_layer_step == 0, else a dense MlpBlock. Scanned checkpoints hold blocks of
    // inhomogeneous_layer_cycle_interval layers (Llama4ScannableBlock).
    const bool all_nope = nope_layer_interval == 1;
    MAXTEXT_CHECK(all_nope || chunk_attn_window_size > 0, ConfigError, "[config] decoder_block llama4 needs "
                  "chunk_attn_window_size > 0 (its RoPE layers use chunked attention), found ", chunk_attn_window_size);
    const bool any_moe = interleave_moe_layer_step > 0 && interleave_moe_layer_step <= num_decoder_layers;
    if (any_moe) {
      MAXTEXT_CHECK(num_experts >= 1 && moe_mlp_dim > 0, ConfigError, "[config] decoder_block llama4 has MoE layers "
                    "(interleave_moe_layer_step ", interleave_moe_layer_step, ") and needs num_experts >= 1 and "
                    "base_moe_mlp_dim > 0, found ", num_experts, " and ", base_moe_mlp_dim);
    }
    if (interleave_moe_layer_step != 1) {
      MAXTEXT_CHECK(mlp_dim > 0, ConfigError, "[config] decoder_block llama4 has dense layers (interleave_moe_layer_step ",
                    interleave_moe_layer_step, ") and needs base_mlp_dim > 0, found ", base_mlp_dim);
    }
    if (scan_layers) {
      const auto fits = [&](std::int64_t step) { return step <= 0 || inhomogeneous_layer_cycle_interval % step == 0; };
      MAXTEXT_CHECK(inhomogeneous_layer_cycle_interval >= 1 && num_decoder_layers % inhomogeneous_layer_cycle_interval == 0 &&
                        fits(nope_layer_interval) && fits(interleave_moe_layer_step),
                    ConfigError, "[config] decoder_block llama4 with scan_layers: inhomogeneous_layer_cycle_interval (",
                    inhomogeneous_layer_cycle_interval, ") must divide num_decoder_layers (", num_decoder_layers,
                    ") and be a multiple of nope_layer_interval (", nope_layer_interval,
                    ") and interleave_moe_layer_step (", interleave_moe_layer_step,
                    "): Llama4ScannableBlock repeats that many layers");
    }
  }
  if (decoder_block == "envy") {
    // decoders.py: layer i is a MoE layer when (i + 1) % interleave_moe_layer_step == 0 (a step of 0 divides by zero
    // there); EnvyScannableBlock repeats inhomogeneous_layer_cycle_interval layers with the same rule inside the cycle.
    MAXTEXT_CHECK(interleave_moe_layer_step >= 1, ConfigError, "[config] decoder_block envy needs "
                  "interleave_moe_layer_step >= 1 (layer i is a MoE layer when (i + 1) % step == 0), found ",
                  interleave_moe_layer_step);
    if (interleave_moe_layer_step <= num_decoder_layers) {
      MAXTEXT_CHECK(num_experts >= 1 && moe_mlp_dim > 0, ConfigError, "[config] decoder_block envy has MoE layers "
                    "(interleave_moe_layer_step ", interleave_moe_layer_step, ") and needs num_experts >= 1 and "
                    "base_moe_mlp_dim > 0, found ", num_experts, " and ", base_moe_mlp_dim);
    }
    if (interleave_moe_layer_step != 1) {
      MAXTEXT_CHECK(mlp_dim > 0, ConfigError, "[config] decoder_block envy has dense layers (interleave_moe_layer_step ",
                    interleave_moe_layer_step, ") and needs base_mlp_dim > 0, found ", base_mlp_dim);
    }
    if (scan_layers) {
      MAXTEXT_CHECK(inhomogeneous_layer_cycle_interval >= 1 &&
                        num_decoder_layers % inhomogeneous_layer_cycle_interval == 0 &&
                        inhomogeneous_layer_cycle_interval % interleave_moe_layer_step == 0,
                    ConfigError, "[config] decoder_block envy with scan_layers: inhomogeneous_layer_cycle_interval (",
                    inhomogeneous_layer_cycle_interval, ") must divide num_decoder_layers (", num_decoder_layers,
                    ") and be a multiple of interleave_moe_layer_step (", interleave_moe_layer_step,
                    "): EnvyScannableBlock repeats that many layers");
    }
  }
  if (is_qwen3_hybrid()) {
    // qwen3.py Qwen3NextDecoderLayer: layer i is full (gated) attention when (i + 1) % inhomogeneous_layer_cycle_interval
    // == 0, else Gated DeltaNet; every layer has the MoE with its sigmoid-gated shared expert; types.py's checks.
    const std::int64_t cyc = inhomogeneous_layer_cycle_interval;
    MAXTEXT_CHECK(cyc >= 1, ConfigError, "[config] decoder_block ", decoder_block, ": inhomogeneous_layer_cycle_interval must be "
                  ">= 1 (4 for Qwen3-Next), found ", cyc);
    MAXTEXT_CHECK(!scan_layers || num_decoder_layers % cyc == 0, ConfigError, "[config] decoder_block ", decoder_block, " with scan_layers: inhomogeneous_layer_cycle_interval (", cyc, ") must divide num_decoder_layers (",
                  num_decoder_layers, "): Qwen3NextScannableBlock repeats that many layers");
    MAXTEXT_CHECK(gdn_num_key_heads >= 1 && gdn_num_value_heads >= 1 && gdn_num_value_heads % gdn_num_key_heads == 0,
                  ConfigError, "[config] decoder_block ", decoder_block, ": gdn_num_value_heads (", gdn_num_value_heads,
                  ") must be a positive multiple of gdn_num_key_heads (", gdn_num_key_heads, ")");
    MAXTEXT_CHECK(gdn_key_head_dim >= 1 && gdn_value_head_dim >= 1 && gdn_conv_kernel_dim >= 1 && gdn_chunk_size >= 1,
                  ConfigError, "[config] decoder_block ", decoder_block, ": gdn_key_head_dim, gdn_value_head_dim, "
                  "gdn_conv_kernel_dim and gdn_chunk_size must be >= 1, found ", gdn_key_head_dim, ", ",
                  gdn_value_head_dim, ", ", gdn_conv_kernel_dim, " and ", gdn_chunk_size);
    at_most("gdn_key_head_dim", gdn_key_head_dim, Limits::head_dim);
    at_most("gdn_value_head_dim", gdn_value_head_dim, Limits::head_dim);
    at_most("gdn_num_value_heads", gdn_num_value_heads, Limits::heads);
    at_most("gdn_conv_kernel_dim", gdn_conv_kernel_dim, 64);
    // The projection widths and the per-sequence recurrent state (f32 floats per layer) stay bounded as products too.
    at_most("gdn_num_key_heads * gdn_key_head_dim", gdn_num_key_heads * gdn_key_head_dim, Limits::width);
    at_most("gdn_num_value_heads * gdn_value_head_dim", gdn_num_value_heads * gdn_value_head_dim, Limits::width);
    at_most("gdn_num_value_heads * gdn_key_head_dim * gdn_value_head_dim (recurrent state floats)",
            gdn_num_value_heads * gdn_key_head_dim * gdn_value_head_dim, std::int64_t{1} << 26);
    MAXTEXT_CHECK(use_qk_norm_in_gdn, UnsupportedError, "[config] decoder_block ", decoder_block, ": use_qk_norm_in_gdn = false "
                  "(no L2 norm of q and k in the Gated DeltaNet) is not implemented");
    MAXTEXT_CHECK(!use_qk_norm, UnsupportedError, "[config] decoder_block ", decoder_block, ": use_qk_norm = true selects "
                  "attentions.py's plain-scale qk RMSNorm before the Qwen3-Next (1 + w) one; not implemented (the "
                  "Qwen3-Next ymls leave it false)");
    MAXTEXT_CHECK(num_experts >= 1 && num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts && moe_mlp_dim > 0,
                  ConfigError, "[config] decoder_block ", decoder_block, " needs num_experts >= 1, num_experts_per_tok in [1, "
                  "num_experts] and base_moe_mlp_dim > 0, found ", num_experts, ", ", num_experts_per_tok, " and ",
                  base_moe_mlp_dim);
    const auto rd = static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
    MAXTEXT_CHECK(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0 && rd % 2 == 0 && rd > 0, ConfigError,
                  "[config] decoder_block ", decoder_block, ": int(head_dim * partial_rotary_factor) = ", rd,
                  " must be a positive even number (head_dim ", head_dim, ", partial_rotary_factor ",
                  partial_rotary_factor, ")");
    MAXTEXT_CHECK(rope_type == "default", UnsupportedError, "[config] decoder_block ", decoder_block, ": rope_type '", rope_type,
                  "' (the hybrid attention's partial RoPE is MaxText's default rotary embedding)");
  }
  if (decoder_block == "deepseek4") {
    // deepseek4.py / decoders.py / types.py: one compress ratio per layer, each 0 or >= 4; the hash-routed prefix
    // inside the stack; one shared key/value head; the sliding window of every layer.
    const std::vector<std::int64_t> ratios = compress_ratios();
    MAXTEXT_CHECK(static_cast<std::int64_t>(ratios.size()) == num_decoder_layers, ConfigError, "[config] decoder_block "
                  "deepseek4 needs compress_ratios with one entry per layer (", num_decoder_layers, "), found ", ratios);
    for (const std::int64_t r : ratios) {
      MAXTEXT_CHECK(r == 0 || r >= 4, ConfigError, "[config] compress_ratios: each ratio must be 0 (disabled) or >= 4, "
                    "found ", r, " in ", ratios);
    }
    MAXTEXT_CHECK(first_num_hash_layers >= 0 && first_num_hash_layers <= num_decoder_layers, ConfigError,
                  "[config] first_num_hash_layers (", first_num_hash_layers, ") must be in [0, num_decoder_layers = ",
                  num_decoder_layers, "]");
    MAXTEXT_CHECK(sliding_window_size > 0, ConfigError, "[config] decoder_block deepseek4 needs sliding_window_size > 0 "
                  "(every layer attends over a sliding window), found ", sliding_window_size);
    MAXTEXT_CHECK(o_groups > 0 && o_lora_rank > 0, ConfigError, "[config] decoder_block deepseek4 needs o_groups and "
                  "o_lora_rank > 0 (the grouped output projection), found ", o_groups, " and ", o_lora_rank);
    MAXTEXT_CHECK(num_kv_heads == 1, UnsupportedError, "[config] decoder_block deepseek4 shares one key/value head "
                  "(num_kv_heads 1), found ", num_kv_heads);
    MAXTEXT_CHECK(attention_type == "compressed", ConfigError, "[config] decoder_block deepseek4 uses attention_type "
                  "'compressed', found '", attention_type, "'");
    for (const std::int64_t r : ratios) at_most("compress_ratios (each)", r, Limits::positions);
    at_most("indexer_topk", indexer_topk, Limits::positions);
    at_most("indexer_n_heads", indexer_n_heads, Limits::heads);
    at_most("indexer_head_dim", indexer_head_dim, Limits::head_dim);
    at_most("o_groups", o_groups, Limits::heads);
    at_most("o_lora_rank", o_lora_rank, Limits::width);
    // DeepSeekV4RotaryEmbedding rotates int(head_dim * (qk_rope_head_dim / head_dim)) lanes (a float product that
    // can truncate); the layers rotate qk_rope_head_dim, so the two must agree.
    const double factor = static_cast<double>(qk_rope_head_dim) / static_cast<double>(head_dim);
    const auto rotated = static_cast<std::int64_t>(static_cast<double>(head_dim) * factor);
    MAXTEXT_CHECK(rotated == qk_rope_head_dim, UnsupportedError, "[config] decoder_block deepseek4: MaxText rotates "
                  "int(head_dim * (qk_rope_head_dim / head_dim)) = ", rotated, " lanes for head_dim ", head_dim,
                  " and qk_rope_head_dim ", qk_rope_head_dim, ", not qk_rope_head_dim itself");
  } else {
    MAXTEXT_CHECK(first_num_hash_layers == 0, UnsupportedError, "[config] first_num_hash_layers = ",
                  first_num_hash_layers, " (hash routing) exists for decoder_block deepseek4 only, found decoder_block '",
                  decoder_block, "'");
  }
  if (use_mrope) {
    // attentions.py builds Qwen3OmniMoeThinkerTextRotaryEmbedding (MRoPE) when the layer passes use_mrope, which the
    // qwen2, qwen3, qwen3_moe, qwen3_custom_moe, qwen3_next and qwen3_5 layers do; the other blocks would ignore it.
    static const std::vector<std::string> mrope_blocks = {"qwen2", "qwen3", "qwen3_moe", "qwen3_custom_moe", "qwen3_next",
                                                          "qwen3_5"};
    MAXTEXT_CHECK(std::find(mrope_blocks.begin(), mrope_blocks.end(), decoder_block) != mrope_blocks.end(),
                  UnsupportedError, "[config] use_mrope = true on decoder_block '", decoder_block,
                  "': MaxText passes use_mrope to the attention of ", mrope_blocks, " only (elsewhere it is ignored)");
    const auto sec = mrope_section();
    std::int64_t sum = 0;
    for (const auto v : sec) sum += v;
    const auto rd = static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
    MAXTEXT_CHECK(sum == rd / 2 && rd > 0 && rd % 2 == 0, ConfigError, "[config] mrope_section ", sec, " has ", sum,
                  " frequencies, but the rotary embedding has int(head_dim * partial_rotary_factor) / 2 = ", rd / 2,
                  " (head_dim ", head_dim, ", partial_rotary_factor ", partial_rotary_factor, ")");
  }
  if (mhc_expansion_rate != 1) {
    // mhc.py / decoders.py: k residual streams; only the DeepSeek layers (deepseek.py) wrap their branches in mHC,
    // any other block would receive [B, S, k, D] activations it cannot take.
    MAXTEXT_CHECK(mhc_expansion_rate >= 1, ConfigError, "[config] mhc_expansion_rate must be >= 1, found ", mhc_expansion_rate);
    MAXTEXT_CHECK(decoder_block == "deepseek" || decoder_block == "deepseek4", UnsupportedError, "[config] "
                  "mhc_expansion_rate = ", mhc_expansion_rate, " (manifold hyper-connections) exists for decoder_block "
                  "deepseek and deepseek4 only (MaxText's DeepSeek layers wrap their branches in mHC), found "
                  "decoder_block '", decoder_block, "'");
    const std::int64_t max_k = enable_mhc_lite ? kMhcMaxLiteStreams : kMhcMaxStreams;
    MAXTEXT_CHECK(mhc_expansion_rate <= max_k, UnsupportedError, "[config] mhc_expansion_rate = ", mhc_expansion_rate,
                  ": this library's mHC kernels take at most ", max_k, " streams",
                  enable_mhc_lite ? " with enable_mhc_lite (k! permutation matrices)" : " (k x k Sinkhorn in registers)");
    MAXTEXT_CHECK(enable_mhc_lite || sinkhorn_iterations >= 1, ConfigError,
                  "[config] sinkhorn_iterations must be >= 1, found ", sinkhorn_iterations);
  }
  if (const std::vector<std::int64_t> engram = engram_layers(); !engram.empty()) {
    // deepseek.py builds Engram in the DeepSeek layers only; types.py checks the table sizes against the orders.
    MAXTEXT_CHECK(decoder_block == "deepseek", UnsupportedError, "[config] engram_layers ", engram, " exists for "
                  "decoder_block deepseek only (MaxText's DeepSeek layers hold the Engram modules), found decoder_block '",
                  decoder_block, "'");
    std::vector<std::int64_t> seen;
    for (const std::int64_t l : engram) {
      MAXTEXT_CHECK(l < num_decoder_layers, ConfigError, "[config] engram_layers: layer ", l, " is beyond the ",
                    num_decoder_layers, " decoder layers (num_decoder_layers)");
      MAXTEXT_CHECK(std::find(seen.begin(), seen.end(), l) == seen.end(), ConfigError, "[config] engram_layers: layer ",
                    l, " is listed twice");
      seen.push_back(l);
    }
    MAXTEXT_CHECK(engram_max_ngram_size >= 2 && engram_max_ngram_size <= 64, ConfigError,
                  "[config] engram_max_ngram_size: expected 2..64, found ", engram_max_ngram_size);
    MAXTEXT_CHECK(static_cast<std::int64_t>(engram_vocab_bases().size()) == engram_max_ngram_size - 1, ConfigError,
                  "[config] engram_vocab_bases ", engram_vocab_bases(), ": expected ", engram_max_ngram_size - 1,
                  " sizes (one per n-gram order 2..engram_max_ngram_size = ", engram_max_ngram_size, ")");
    MAXTEXT_CHECK(engram_num_heads >= 1 && engram_head_dim >= 1 && engram_kernel_size >= 1, ConfigError,
                  "[config] engram_num_heads, engram_head_dim and engram_kernel_size must be >= 1, found ",
                  engram_num_heads, ", ", engram_head_dim, " and ", engram_kernel_size);
    // Bounds like Limits' (docs/security.md): the prime search and the tables grow with heads x orders x layers.
    MAXTEXT_CHECK(engram_head_dim <= Limits::width && engram_kernel_size <= 64, ConfigError, "[config] engram_head_dim (",
                  engram_head_dim, ") or engram_kernel_size (", engram_kernel_size, ") is beyond ", Limits::width,
                  " / 64");
    // heads <= 2^14, orders <= 63 and layers <= Limits::layers (checked above) keep the product far from overflow.
    MAXTEXT_CHECK(engram_num_heads <= Limits::heads, ConfigError, "[config] engram_num_heads = ", engram_num_heads,
                  " is beyond ", Limits::heads);
    const std::int64_t tables = engram_num_heads * (engram_max_ngram_size - 1) * static_cast<std::int64_t>(engram.size());
    MAXTEXT_CHECK(tables <= (std::int64_t{1} << 16), ConfigError, "[config] Engram hash tables: ", engram_num_heads,
                  " heads x ", engram_max_ngram_size - 1, " orders x ", engram.size(), " layers = ", tables,
                  ", beyond 65536");
    for (const std::int64_t b : engram_vocab_bases()) {
      MAXTEXT_CHECK(b <= (std::int64_t{1} << 30), ConfigError, "[config] engram_vocab_bases: ", b,
                    " is beyond 2^30 (the table sizes are int32 primes)");
    }
    MAXTEXT_CHECK(engram_seed >= 0, ConfigError, "[config] engram_seed must be >= 0 (NumPy's default_rng refuses "
                  "negative seeds), found ", engram_seed);
  }
  // types.py: the Pallas mHC kernel implements mHC-lite only (it computes the same function; here it selects nothing).
  MAXTEXT_CHECK(!use_mhc_pallas_kernel || enable_mhc_lite, ConfigError,
                "[config] use_mhc_pallas_kernel=True requires enable_mhc_lite=True");
  if (decoder_block == "gemma3") {
    // gemma3.get_query_pre_attn_scalar: the query scale is chosen by model name; MaxText raises for any other.
    MAXTEXT_CHECK(model_name == "gemma3-4b" || model_name == "gemma3-12b" || model_name == "gemma3-27b", ConfigError,
                  "[config] decoder_block gemma3 picks query_pre_attn_scalar by model_name: expected gemma3-4b or "
                  "gemma3-12b (head_dim^-0.5) or gemma3-27b ((base_emb_dim // base_num_query_heads)^-0.5), found '",
                  model_name, "'");
  }
  if (decoder_block == "gemma4" || decoder_block == "gemma4_small") {
    // gemma4.py: five sliding-window layers, then a global one whose attention may have its own kv-head count and
    // head dim (global_num_kv_heads, global_head_dim; 0 = the config's), and partial RoPE on both kinds.
    // gemma4_small.py: the same layers without MoE, a period of 5 for model_name gemma4-e2b.
    MAXTEXT_CHECK(sliding_window_size > 0, ConfigError, "[config] decoder_block ", decoder_block,
                  " needs sliding_window_size > 0 (most layers use sliding-window attention), found ",
                  sliding_window_size);
    at_most("global_head_dim", global_head_dim, Limits::head_dim);
    at_most("global_num_kv_heads", global_num_kv_heads, Limits::heads);
    MAXTEXT_CHECK(global_head_dim >= 0 && global_num_kv_heads >= 0, ConfigError,
                  "[config] global_head_dim and global_num_kv_heads must be >= 0 (0: the config's), found ",
                  global_head_dim, " and ", global_num_kv_heads);
    MAXTEXT_CHECK(global_num_kv_heads == 0 || num_query_heads % global_num_kv_heads == 0, ConfigError,
                  "[config] num_query_heads (", num_query_heads, ") must be a multiple of global_num_kv_heads (",
                  global_num_kv_heads, ")");
    for (const auto& [key, v] : {std::pair<const char*, double>{"global_rope_proportion", global_rope_proportion},
                                 {"local_rope_proportion", local_rope_proportion}}) {
      MAXTEXT_CHECK(v > 0.0 && v <= 1.0, ConfigError, "[config] ", key, " must be in (0, 1], found ", v);
    }
    at_most("max_target_length * global_head_dim", max_target_length * global_head_dim, Limits::attended);
  }
  if (decoder_block == "gemma4_small") {
    // gemma4_small.py / types.py: per-layer inputs (PLE) of hidden_size_per_layer_input from a table of
    // vocab_size_per_layer_input rows; the last num_kv_shared_layers layers reuse an earlier layer's keys and values.
    MAXTEXT_CHECK(hidden_size_per_layer_input >= 0 && vocab_size_per_layer_input >= 0 && num_kv_shared_layers >= 0,
                  ConfigError, "[config] hidden_size_per_layer_input, vocab_size_per_layer_input and "
                  "num_kv_shared_layers must be >= 0, found ", hidden_size_per_layer_input, ", ",
                  vocab_size_per_layer_input, " and ", num_kv_shared_layers);
    at_most("hidden_size_per_layer_input", hidden_size_per_layer_input, Limits::width);
    at_most("vocab_size_per_layer_input", vocab_size_per_layer_input, Limits::vocab);
    MAXTEXT_CHECK((hidden_size_per_layer_input > 0) == (vocab_size_per_layer_input > 0), ConfigError,
                  "[config] gemma4_small: hidden_size_per_layer_input (", hidden_size_per_layer_input,
                  ") and vocab_size_per_layer_input (", vocab_size_per_layer_input, ") must both be > 0 (per-layer "
                  "inputs) or both 0 (none)");
    at_most("num_decoder_layers * hidden_size_per_layer_input", num_decoder_layers * hidden_size_per_layer_input,
            Limits::width);
    MAXTEXT_CHECK(num_kv_shared_layers < num_decoder_layers, ConfigError, "[config] gemma4_small: num_kv_shared_layers (",
                  num_kv_shared_layers, ") must be below num_decoder_layers (", num_decoder_layers,
                  "): the shared layers reuse the keys and values of earlier ones");
    MAXTEXT_CHECK(num_kv_shared_layers == 0 || (!fused_qkv && !share_kv_projections), ConfigError,
                  "[config] num_kv_shared_layers > 0 is not compatible with fused_qkv or share_kv_projections (types.py)");
    MAXTEXT_CHECK(num_experts <= 1, UnsupportedError, "[config] decoder_block gemma4_small has no MoE (num_experts = ",
                  num_experts, "): Gemma4SmallDecoderLayer's FFN is one MlpBlock");
  }
  if (decoder_block == "olmo3") {
    // olmo3.py: OLMO3_ATTENTION_PATTERN (L, L, L, G) by layer index; the scanned Olmo3ScannableBlock holds
    // inhomogeneous_layer_cycle_interval layers and MaxText scans num_layers / interval of them (int division:
    // leftover layers would be dropped), so both must fit the pattern.
    MAXTEXT_CHECK(sliding_window_size > 0, ConfigError,
                  "[config] decoder_block olmo3 needs sliding_window_size > 0 (layers i % 4 < 3 use sliding-window "
                  "attention), found ", sliding_window_size);
    MAXTEXT_CHECK(inhomogeneous_layer_cycle_interval == 4, ConfigError,
                  "[config] decoder_block olmo3: inhomogeneous_layer_cycle_interval must be 4 (the L, L, L, G "
                  "sliding-window pattern of OLMO3_ATTENTION_PATTERN), found ", inhomogeneous_layer_cycle_interval);
    MAXTEXT_CHECK(num_decoder_layers % 4 == 0, ConfigError, "[config] decoder_block olmo3: num_decoder_layers (",
                  num_decoder_layers, ") is not a multiple of the sliding-window pattern length "
                  "inhomogeneous_layer_cycle_interval (4)");
  }
  if (attention_type == "local_sliding") {
    MAXTEXT_CHECK(sliding_window_size > 0, ConfigError, "[config] attention_type local_sliding needs sliding_window_size > 0");
  } else if (attention_type == "chunk") {
    MAXTEXT_CHECK(chunk_attn_window_size > 0, ConfigError, "[config] attention_type chunk needs chunk_attn_window_size > 0");
  } else {
    MAXTEXT_CHECK(attention_type == "global" || attention_type == "mla" || attention_type == "full" ||
                      (attention_type == "compressed" && decoder_block == "deepseek4"),
                  UnsupportedError, "[config] attention_type '", attention_type,
                  "': expected global, local_sliding, chunk, mla, full (or compressed with decoder_block deepseek4)");
  }
  MAXTEXT_CHECK(!(share_kv_projections && fused_qkv), ConfigError, "[config] share_kv_projections is incompatible with fused_qkv");
  MAXTEXT_CHECK(!(share_kv_projections && attention_type == "mla"), ConfigError,
                "[config] share_kv_projections is incompatible with attention_type mla");
  if (trainable_position_size > 0) {
    MAXTEXT_CHECK(trainable_position_size >= 1, ConfigError, "[config] trainable_position_size must be > 0");
  }
  if (num_experts > 1) {
    MAXTEXT_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts, ConfigError,
                  "[config] num_experts_per_tok must be in [1, num_experts=", num_experts, "], found ", num_experts_per_tok);
    if (n_routing_groups > 0) {
      MAXTEXT_CHECK(topk_routing_group > 0 && topk_routing_group <= n_routing_groups, ConfigError,
                    "[config] n_routing_groups=", n_routing_groups, " needs 0 < topk_routing_group <= n_routing_groups, found ",
                    topk_routing_group);
      MAXTEXT_CHECK(num_experts % n_routing_groups == 0, ConfigError, "[config] num_experts (", num_experts,
                    ") must be a multiple of n_routing_groups (", n_routing_groups, ")");
    }
  }
}
#endif

}  // namespace maxtext
