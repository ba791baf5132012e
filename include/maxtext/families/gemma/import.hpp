// families/gemma/import.hpp: Gemma, Gemma 2 and Gemma 3 (text) checkpoints from Hugging Face (config.json model_type gemma /
// gemma2 / gemma3_text, safetensors) and llama.cpp (GGUF architectures gemma / gemma2 / gemma3) into MaxText names,
// with the parameter folding MaxText's Gemma converters apply (checkpoint_conversion/standalone_scripts/
// convert_gemma*_chkpt.py, utils/param_mapping.py GEMMA2_*, GEMMA3_*); spec weights-naming.md, docs/numerics.md §Gemma.
//
// MaxText's Gemma layers run a plain RMSNorm and a plain embedding lookup; the original models use (1 + w) norms
// and scale the looked-up embedding by sqrt(hidden_size). The folding, done here at load time:
//   * every RMSNorm weight (layer norms, final norm, Gemma 3 q/k norms) becomes 1 + w (f32). llama.cpp's converter
//     has already added the 1 in GGUF files, so GGUF norms load unchanged;
//   * the embedding table becomes E * normalizer (f32); the tied head divides by sqrt(emb_dim) again
//     (normalize_embedding_logits). normalizer = sqrt(hidden_size) in float32 for Gemma / Gemma 2, rounded to
//     bfloat16 for Gemma 3 (as MaxText's GEMMA3 hook does; equal to HF's bf16 forward);
//   * Gemma / Gemma 2 attention has no forward query scale in MaxText: the query kernel is multiplied by
//     query_pre_attn_scalar^-0.5 (HF's scaling; head_dim^-0.5 for Gemma). Gemma 3 scales queries in the forward
//     pass (query_pre_attn_scalar chosen by model_name), so its query kernel loads unscaled.
// Gemma 2's HF layers 2i and 2i+1 become MaxText layers_i's *_local and *_global halves.
// GGUF block tensors kept as they lie (io::keep_block_tensors: Q4_K, Q6_K, ... for Policy<B, ggml_byte, float>) are
// not materialised: the embedding normalizer and the Gemma / Gemma 2 query scale ride as their value_scale, applied
// after decoding (the norms are F32 in such files and load as they are).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/attention_kernels.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// True for the decoder blocks this header imports.
inline bool is_gemma_block(const Config& c) { return c.is("gemma") || c.is("gemma2") || c.is("gemma3"); }

/// True for the config.json model types this header maps (gemma, gemma2, gemma3_text; the multimodal gemma3 is
/// refused by config_from_hf_gemma with a message).
inline bool is_hf_gemma_family(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return false;
  const std::string t = j["model_type"].get<std::string>();
  return t == "gemma" || t == "gemma2" || t == "gemma3_text" || t == "gemma3";
}

/// True for GGUF architectures this header maps.
inline bool is_gguf_gemma(const std::string& arch) { return arch == "gemma" || arch == "gemma2" || arch == "gemma3"; }

namespace detail {

/// The settings every imported Gemma config shares (f32, GeGLU, tied head with normalize_embedding_logits).
inline void base_gemma_config(Config& c) {
  c.dtype = "float32";
  c.weight_dtype = "float32";
  c.mlp_activations = {"gelu", "linear"};
  c.logits_via_embedding = true;
  c.normalize_embedding_logits = true;
  c.scan_layers = false;
  c.enable_dropout = false;
}

/// model_name selecting gemma3.get_query_pre_attn_scalar's rule for a query_pre_attn_scalar `qpas` (the scale is
/// qpas^-0.5): head_dim -> the gemma3-4b/12b rule, emb_dim // heads -> the gemma3-27b rule.
inline std::string gemma3_rule_model_name(double qpas, const Config& c, const std::string& where) {
  if (qpas == static_cast<double>(c.head_dim)) return "gemma3-4b";
  if (qpas == static_cast<double>(c.base_emb_dim / c.base_num_query_heads)) return "gemma3-27b";
  MAXTEXT_THROW(UnsupportedError, "[", where, "] query_pre_attn_scalar ", qpas,
                " matches neither of MaxText's Gemma 3 rules: head_dim (", c.head_dim, ", gemma3-4b/12b) or "
                "hidden_size // num_attention_heads (", c.base_emb_dim / c.base_num_query_heads, ", gemma3-27b)");
}

/// The layer pattern Gemma 3 needs: layer i is global exactly when i % 6 == 5.
inline void check_gemma3_pattern(const nlohmann::json& j, std::int64_t layers, const std::string& where) {
  if (j.contains("sliding_window_pattern") && !j["sliding_window_pattern"].is_null()) {
    MAXTEXT_CHECK(j["sliding_window_pattern"] == 6, UnsupportedError, "[", where, "] sliding_window_pattern ",
                  j["sliding_window_pattern"].dump(), ": MaxText's Gemma 3 uses 5 local layers then 1 global (6)");
  }
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& lt = j["layer_types"];
    MAXTEXT_CHECK(static_cast<std::int64_t>(lt.size()) == layers, ConfigError, "[", where, "] layer_types has ", lt.size(),
                  " entries for num_hidden_layers ", layers);
    for (std::int64_t i = 0; i < layers; ++i) {
      const std::string want = i % 6 == 5 ? "full_attention" : "sliding_attention";
      MAXTEXT_CHECK(lt[static_cast<std::size_t>(i)] == want, UnsupportedError, "[", where, "] layer_types[", i, "] is ",
                    lt[static_cast<std::size_t>(i)].dump(), ", MaxText's Gemma 3 pattern has ", want,
                    " there (layer i is global when i % 6 == 5)");
    }
  }
}

}  // namespace detail

/// A Config from a Hugging Face Gemma config.json. The multimodal Gemma 3 (model_type gemma3,
/// Gemma3ForConditionalGeneration) gives its text_config, whose absent keys take Gemma3TextConfig's defaults (the
/// released 4B-27B configs leave out vocab_size, head_dim, query_pre_attn_scalar and more); its vision tower is
/// read apart (families/gemma/vision.hpp).
inline Config config_from_hf_gemma(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.at("model_type").get<std::string>();
  if (type == "gemma3") {
    MAXTEXT_CHECK(j.contains("text_config") && j["text_config"].is_object(), IoError, "[hf] ", where,
                  ": model_type gemma3 (Gemma3ForConditionalGeneration) needs a text_config object");
    nlohmann::json t = j["text_config"];
    const std::pair<const char*, nlohmann::json> defaults[] = {
        {"vocab_size", 262208},        {"hidden_size", 2304},     {"intermediate_size", 9216},
        {"num_hidden_layers", 26},     {"num_attention_heads", 8}, {"num_key_value_heads", 4},
        {"head_dim", 256},             {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
        {"rope_theta", 1000000.0},     {"rope_local_base_freq", 10000.0}, {"rms_norm_eps", 1e-6},
        {"max_position_embeddings", 131072}};
    for (const auto& [k, v] : defaults) {
      if (!t.contains(k) || t[k].is_null()) t[k] = v;
    }
    if (!t.contains("tie_word_embeddings") && j.contains("tie_word_embeddings")) t["tie_word_embeddings"] = j["tie_word_embeddings"];
    t["model_type"] = "gemma3_text";
    return config_from_hf_gemma(t, where + ": text_config");
  }
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  auto geti = [&](const char* k) -> std::int64_t {
    MAXTEXT_CHECK(has(k) && j[k].is_number_integer(), IoError, "[hf] ", where, ": config.json needs an integer ", k);
    return j[k].get<std::int64_t>();
  };
  auto getf = [&](const char* k, double dflt) -> double {
    if (!has(k)) return dflt;
    MAXTEXT_CHECK(j[k].is_number(), IoError, "[hf] ", where, ": ", k, ": expected a number, found ", j[k].dump());
    return j[k].get<double>();
  };
  Config c;
  detail::base_gemma_config(c);
  c.decoder_block = type == "gemma" ? "gemma" : type == "gemma2" ? "gemma2" : "gemma3";
  c.base_emb_dim = geti("hidden_size");
  c.base_mlp_dim = geti("intermediate_size");
  const std::int64_t layers = geti("num_hidden_layers");
  c.base_num_query_heads = geti("num_attention_heads");
  c.base_num_kv_heads = has("num_key_value_heads") ? geti("num_key_value_heads") : c.base_num_query_heads;
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && layers > 0, IoError, "[hf] ", where,
                ": num_attention_heads and num_hidden_layers must be > 0");
  c.head_dim = has("head_dim") ? geti("head_dim") : c.base_emb_dim / c.base_num_query_heads;
  c.vocab_size = geti("vocab_size");
  c.normalization_layer_epsilon = getf("rms_norm_eps", 1e-6);
  c.rope_max_timescale = getf("rope_theta", 10000.0);
  if (has("max_position_embeddings")) c.max_target_length = geti("max_position_embeddings");
  // HF Gemma runs GELU with the tanh approximation (gelu_pytorch_tanh; a v1 config saying "gelu" is run the same
  // way), which is MaxText's "gelu".
  const std::string act = has("hidden_activation") ? j["hidden_activation"].get<std::string>()
                                                   : j.value("hidden_act", std::string("gelu_pytorch_tanh"));
  MAXTEXT_CHECK(act == "gelu_pytorch_tanh" || act == "gelu", UnsupportedError, "[hf] ", where, ": hidden_activation '",
                act, "' is not supported (gelu_pytorch_tanh)");
  MAXTEXT_CHECK(!j.value("attention_bias", false), UnsupportedError, "[hf] ", where, ": attention_bias = true is not supported");
  MAXTEXT_CHECK(j.value("tie_word_embeddings", true), UnsupportedError, "[hf] ", where,
                ": tie_word_embeddings = false: MaxText's Gemma blocks always tie the output head to the embedding");
  if (has("rope_scaling")) {
    const auto& rs = j["rope_scaling"];
    const std::string rt = rs.value("rope_type", rs.value("type", std::string()));
    if (rt == "linear") {
      c.rope_linear_scaling_factor = rs.value("factor", 1.0);
    } else {
      MAXTEXT_CHECK(rt == "default", UnsupportedError, "[hf] ", where, ": rope_scaling ", rs.dump(),
                    " is not supported for ", type, " (linear)");
    }
  }
  if (type == "gemma") {
    c.base_num_decoder_layers = layers;
  } else {
    c.use_post_attn_norm = true;
    c.use_post_ffw_norm = true;
    c.sliding_window_size = geti("sliding_window");
    c.attn_logits_soft_cap = getf("attn_logit_softcapping", 0.0);
    c.final_logits_soft_cap = getf("final_logit_softcapping", 0.0);
    if (type == "gemma2") {
      MAXTEXT_CHECK(layers % 2 == 0, UnsupportedError, "[hf] ", where, ": num_hidden_layers ", layers,
                    " is odd; MaxText's Gemma 2 layer is a (local, global) pair");
      c.base_num_decoder_layers = layers / 2;
    } else {
      c.base_num_decoder_layers = layers;
      detail::check_gemma3_pattern(j, layers, where);
      c.local_rope_max_timescale = getf("rope_local_base_freq", 10000.0);
      c.model_name = detail::gemma3_rule_model_name(getf("query_pre_attn_scalar", static_cast<double>(c.head_dim)), c,
                                                    "hf] " + where + " [");
    }
  }
  c.derive();
  return c;
}

/// The query kernel factor for an HF Gemma / Gemma 2 checkpoint: query_pre_attn_scalar^-0.5 (head_dim^-0.5 when
/// absent; Gemma v1 always head_dim^-0.5); 1 for Gemma 3 (scaled in the forward pass).
inline double hf_gemma_query_scale(const nlohmann::json& j, const Config& c) {
  if (c.is("gemma3")) return 1.0;
  double qpas = static_cast<double>(c.head_dim);
  if (c.is("gemma2") && j.is_object() && j.contains("query_pre_attn_scalar") && j["query_pre_attn_scalar"].is_number()) {
    qpas = j["query_pre_attn_scalar"].get<double>();
  }
  return std::pow(qpas, -0.5);
}

/// A Config from GGUF metadata of architecture gemma / gemma2 / gemma3 (llama.cpp's names).
inline Config config_from_gguf_gemma(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  const std::string p = arch + ".";
  Config c;
  detail::base_gemma_config(c);
  c.decoder_block = arch;
  c.base_emb_dim = g.get_int(p + "embedding_length");
  const std::int64_t layers = g.get_int(p + "block_count");
  c.base_mlp_dim = g.get_int(p + "feed_forward_length");
  c.base_num_query_heads = g.get_int(p + "attention.head_count");
  c.base_num_kv_heads = g.get_int(p + "attention.head_count_kv", c.base_num_query_heads);
  MAXTEXT_CHECK(c.base_num_query_heads > 0 && c.base_emb_dim > 0 && layers > 0, IoError, "[gguf] ", g.path,
                ": head_count, embedding_length and block_count must be > 0");
  c.head_dim = g.get_int(p + "attention.key_length", c.base_emb_dim / c.base_num_query_heads);
  MAXTEXT_CHECK(g.get_int(p + "attention.value_length", c.head_dim) == c.head_dim, UnsupportedError, "[gguf] ", g.path,
                ": attention.value_length differs from key_length");
  c.normalization_layer_epsilon = g.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_max_timescale = g.get_float(p + "rope.freq_base", 10000.0);
  c.max_target_length = g.get_int(p + "context_length", 8192);
  const std::string scaling = g.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_linear_scaling_factor = g.get_float(p + "rope.scaling.factor", 1.0);
  } else {
    MAXTEXT_CHECK(scaling == "none", UnsupportedError, "[gguf] ", g.path, ": rope.scaling.type '", scaling,
                  "' is not supported for ", arch, " (none, linear)");
  }
  c.vocab_size = g.vocab_size(p);
  if (arch == "gemma") {
    c.base_num_decoder_layers = layers;
  } else {
    c.use_post_attn_norm = true;
    c.use_post_ffw_norm = true;
    c.sliding_window_size = g.get_int(p + "attention.sliding_window");
    c.attn_logits_soft_cap = g.get_float(p + "attn_logit_softcapping", 0.0);
    c.final_logits_soft_cap = g.get_float(p + "final_logit_softcapping", 0.0);
    // llama.cpp reads the local:global pattern from attention.sliding_window_pattern when present (a period, or
    // one flag per layer); MaxText's is fixed (Gemma 2: local, global; Gemma 3: 5 local, 1 global).
    const std::int64_t period = arch == "gemma2" ? 2 : 6;
    if (const GgufValue* v = g.find(p + "attention.sliding_window_pattern")) {
      MAXTEXT_CHECK(gguf_window_pattern_is(*v, layers, period, p + "attention.sliding_window_pattern"), UnsupportedError, "[gguf] ", g.path, ": ", p, "attention.sliding_window_pattern differs from ",
                    "MaxText's ", arch, " pattern (", period - 1, " local layer(s), then 1 global)");
    }
    if (arch == "gemma2") {
      MAXTEXT_CHECK(layers % 2 == 0, UnsupportedError, "[gguf] ", g.path, ": block_count ", layers,
                    " is odd; MaxText's Gemma 2 layer is a (local, global) pair");
      c.base_num_decoder_layers = layers / 2;
      const double swa_base = g.get_float(p + "rope.freq_base_swa", c.rope_max_timescale);
      MAXTEXT_CHECK(swa_base == c.rope_max_timescale, UnsupportedError, "[gguf] ", g.path, ": ", p,
                    "rope.freq_base_swa ", swa_base, " differs from rope.freq_base ", c.rope_max_timescale,
                    " (MaxText's Gemma 2 has one RoPE base)");
    } else {
      c.base_num_decoder_layers = layers;
      // Local layers: rope.freq_base_swa (llama.cpp's default 10000, Gemma 3's value). llama.cpp picks the query
      // scale by model size: the 27B (62 layers) uses hidden_size / heads, the others head_dim; the same two rules
      // as MaxText's model names.
      c.local_rope_max_timescale = g.get_float(p + "rope.freq_base_swa", 10000.0);
      c.model_name = layers == 62 ? "gemma3-27b" : "gemma3-4b";
    }
  }
  c.derive();
  return c;
}

/// The query kernel factor for a GGUF Gemma / Gemma 2 file, following llama.cpp's rule (Gemma 2 27B, 46 layers:
/// (hidden_size / heads)^-0.5; otherwise head_dim^-0.5); 1 for Gemma 3.
inline double gguf_gemma_query_scale(const Config& c) {
  if (c.is("gemma3")) return 1.0;
  if (c.is("gemma2") && c.num_decoder_layers == 23) return std::pow(static_cast<double>(c.emb_dim / c.num_query_heads), -0.5);
  return std::pow(static_cast<double>(c.head_dim), -0.5);
}

namespace detail {

/// Maps one Gemma checkpoint's tensors (HF or llama.cpp names) to MaxText names, folding as described above.
class GemmaImporter {
 public:
  GemmaImporter(const TensorMap& in, const Config& cfg, bool add_one_to_norms, double query_scale, std::string what)
      : in_(in), cfg_(cfg), add_one_(add_one_to_norms), qscale_(query_scale), what_(std::move(what)) {}

  const AnyTensor* get(const std::string& name) {
    auto it = in_.tensors.find(name);
    if (it == in_.tensors.end()) {
      missing_.push_back(name);
      return nullptr;
    }
    used_.insert(name);
    return &it->second;
  }

  /// y = float(x) * s (+ 1 when `plus_one`), materialised with x's shape: in x's own type when x is f16 / bf16 and
  /// every product is exact in it (a power-of-two s, no + 1: Gemma's 1/sqrt(256) query scale), so a model storing
  /// that type views it without another copy; else in f32.
  static AnyTensor folded(const AnyTensor& x, float s, bool plus_one, const std::string& name) {
    int e = 0;
    if (!plus_one && std::fabs(std::frexp(s, &e)) == 0.5f) {  // s = +-2^e
      if (x.dtype == DType::f16) {
        if (auto r = folded_exactly<fp16>(x, s, name)) return *r;
      } else if (x.dtype == DType::bf16) {
        if (auto r = folded_exactly<bf16>(x, s, name)) return *r;
      }
    }
    Tensor<float, 2> m = to_matrix<float>(as_rows(x), {0, 1}, 1);
    for (std::int64_t i = 0; i < m.size(); ++i) {
      float v = m.data()[i];
      if (s != 1.0f) v *= s;
      if (plus_one) v += 1.0f;
      m.data()[i] = v;
    }
    AnyTensor r = AnyTensor::from(m, x.source + " as " + name);
    return r.reshaped(x.shape);
  }
  /// x as a matrix of rows along its last axis (itself when it is one).
  static AnyTensor as_rows(const AnyTensor& x) {
    if (x.rank() == 2) return x;
    const std::int64_t cols = x.rank() >= 1 ? x.shape.back() : 1;
    return x.reshaped({x.numel() / cols, cols});
  }
  /// float(x) * s in T when every product is exact there (no overflow, no lost subnormal bits), else nothing.
  template <class T>
  static std::optional<AnyTensor> folded_exactly(const AnyTensor& x, float s, const std::string& name) {
    Tensor<T, 2> m = to_matrix<T>(as_rows(x), {0, 1}, 1);
    for (std::int64_t i = 0; i < m.size(); ++i) {
      const float v = static_cast<float>(m.data()[i]) * s;
      const T t(v);
      if (!(static_cast<float>(t) == v) && !std::isnan(v)) return std::nullopt;
      m.data()[i] = t;
    }
    return AnyTensor::from(m, x.source + " as " + name).reshaped(x.shape);
  }

  void norm(const std::string& file, const std::string& mt) {
    if (const AnyTensor* t = get(file)) out_.add(mt, add_one_ ? folded(*t, 1.0f, true, mt) : *t);
  }
  /// [heads*H, D] rows -> [D, heads, H] (float: materialised in f32 when scaled; Q8_0: blocks kept, the scale folded
  /// into their fp16 scales; GGUF blocks kept (Q4_K, Q6_K, ...), the scale riding as their value_scale:
  /// io/attention_kernels.hpp).
  void qkv(const std::string& file, const std::string& mt, std::int64_t heads, double scale) {
    const AnyTensor* t = get(file);
    if (!t) return;
    const std::int64_t H = cfg_.head_dim;
    MAXTEXT_CHECK(t->rank() == 2 && t->shape[0] == heads * H, ShapeError, "[", what_, "] ", file, " ", t->describe(),
                  ": expected [", heads * H, ", D] (", heads, " heads of ", H, ")");
    if (t->dtype == DType::ggml) {
      // The factor as `folded` multiplies it (rounded to f32 first), so the value each weight decodes to,
      // float(double(w) * s), is the f32 product the decoded file's fold computes.
      const double s = static_cast<double>(static_cast<float>(scale));
      out_.add(mt, attention_kernel(*t, heads, H, RopeLayout::half_split, RopeLayout::half_split, s, mt));
      return;
    }
    if (q8_0_rows_contiguous(*t)) {
      out_.add(mt, attention_kernel(*t, heads, H, RopeLayout::half_split, RopeLayout::half_split, scale, mt));
      return;
    }
    AnyTensor w = (scale != 1.0 || t->dtype == DType::q8_0) ? folded(*t, static_cast<float>(scale), false, mt) : *t;
    w.source = t->source + " as " + mt;
    out_.add(mt, w.reshaped({heads, H, t->shape[1]}).permuted({2, 0, 1}));
  }
  /// o_proj [D, heads*H] -> [heads, H, D] (a view).
  void out(const std::string& file, const std::string& mt) {
    const AnyTensor* t = get(file);
    if (!t) return;
    const std::int64_t N = cfg_.num_query_heads, H = cfg_.head_dim;
    MAXTEXT_CHECK(t->rank() == 2 && t->shape[1] == N * H, ShapeError, "[", what_, "] ", file, " ", t->describe(),
                  ": expected [D, ", N * H, "]");
    if (t->dtype == DType::q8_0) {  // blocks kept where a head spans whole blocks
      out_.add(mt, attention_out_kernel(*t, N, H, mt));
      return;
    }
    AnyTensor w = *t;
    w.source = t->source + " as " + mt;
    out_.add(mt, w.reshaped({t->shape[0], N, H}).permuted({1, 2, 0}));
  }
  /// [out, in] -> [in, out] view.
  void dense(const std::string& file, const std::string& mt) {
    const AnyTensor* t = get(file);
    if (!t) return;
    MAXTEXT_CHECK(t->rank() == 2, ShapeError, "[", what_, "] ", file, ": expected a matrix, found ", t->describe());
    AnyTensor w = t->permuted({1, 0});
    w.source = t->source + " as " + mt;
    out_.add(mt, w);
  }
  /// The table times `normalizer`: materialised (folded) for float and Q8_0 sources; a GGUF file's rows read in place
  /// (DType::ggml: blocks such as Q4_K or Q6_K, and F32 / F16 / BF16 rows) stay as they lie with the normalizer as
  /// their value_scale, which the lookup (row_to_f32) and the tied head's products apply after decoding:
  /// float(double(E) * normalizer), the f32 product `folded` computes (a table of float rows gets the tied head's
  /// BF16-rounded copy: layers/embeddings.hpp). The tied head divides by sqrt(emb_dim) after its product either way
  /// (normalize_embedding_logits).
  void embedding(const std::string& file, float normalizer) {
    const AnyTensor* t = get(file);
    if (!t) return;
    const std::string mt = "token_embedder.embedding";
    if (t->dtype == DType::ggml) {
      AnyTensor w = *t;
      w.value_scale = t->value_scale * static_cast<double>(normalizer);
      w.source = t->source + " as " + mt;
      out_.add(mt, w);
      return;
    }
    out_.add(mt, folded(*t, normalizer, false, mt));
  }

  /// One HF / llama.cpp layer into MaxText layer `dst` with parameter suffix `sfx`. `n(role)` gives the file name.
  template <class Names>
  void layer(const std::string& dst, const std::string& sfx, const Names& n) {
    const std::string L = "decoder." + dst + ".";
    const std::string A = L + "self_attention" + sfx + ".";
    norm(n("attn_norm"), L + "pre_self_attention_norm" + sfx + ".scale");
    if (cfg_.is("gemma")) {
      norm(n("ffn_norm"), L + "pre_ffw_norm.scale");
    } else {
      norm(n("post_attn_norm"), L + "post_self_attention_norm" + sfx + ".scale");
      norm(n("ffn_norm"), L + "pre_ffw_norm" + sfx + ".scale");
      norm(n("post_ffw_norm"), L + "post_ffw_norm" + sfx + ".scale");
    }
    qkv(n("q"), A + "query.kernel", cfg_.num_query_heads, qscale_);
    qkv(n("k"), A + "key.kernel", cfg_.num_kv_heads, 1.0);
    qkv(n("v"), A + "value.kernel", cfg_.num_kv_heads, 1.0);
    out(n("o"), A + "out.kernel");
    if (cfg_.is("gemma3")) {
      norm(n("q_norm"), A + "query_norm.scale");
      norm(n("k_norm"), A + "key_norm.scale");
    }
    dense(n("gate"), L + "mlp" + sfx + ".wi_0.kernel");
    dense(n("up"), L + "mlp" + sfx + ".wi_1.kernel");
    dense(n("down"), L + "mlp" + sfx + ".wo.kernel");
  }

  /// Every file layer, in order: Gemma 2 pairs them into MaxText layers.
  template <class Names>
  void layers(const Names& n) {
    const bool pairs = cfg_.is("gemma2");
    const std::int64_t file_layers = cfg_.num_decoder_layers * (pairs ? 2 : 1);
    for (std::int64_t i = 0; i < file_layers; ++i) {
      const std::string dst = "layers_" + std::to_string(pairs ? i / 2 : i);
      const std::string sfx = pairs ? (i % 2 == 0 ? "_local" : "_global") : "";
      layer(dst, sfx, [&](const std::string& role) { return n(i, role); });
    }
  }

  TensorMap finish(const std::vector<std::string>& ignorable_prefixes) {
    std::string msg;
    for (const auto& m : missing_) msg += "\n  missing tensor " + m;
    std::size_t unused = 0;
    for (const auto& [name, t] : in_.tensors) {
      if (used_.count(name)) continue;
      bool ignore = false;
      for (const auto& p : ignorable_prefixes) ignore = ignore || name.rfind(p, 0) == 0;
      if (ignore) continue;
      msg += "\n  unexpected tensor " + name + " " + t.describe();
      ++unused;
    }
    MAXTEXT_CHECK(msg.empty(), IoError, "[", what_, "] ", missing_.size() + unused, " problem(s) mapping ", cfg_.decoder_block,
                  " tensors to MaxText names:", msg);
    out_.metadata = in_.metadata;
    return std::move(out_);
  }

 private:
  const TensorMap& in_;
  const Config& cfg_;
  bool add_one_;
  double qscale_;
  std::string what_;
  std::set<std::string> used_;
  std::vector<std::string> missing_;
  TensorMap out_;
};

/// The embedding normalizer MaxText's converter multiplies in: sqrt(emb_dim) in f32, bf16-rounded for Gemma 3.
inline float gemma_embedding_normalizer(const Config& c) {
  const float s = static_cast<float>(std::sqrt(static_cast<double>(c.emb_dim)));
  return c.is("gemma3") ? round_to<bf16>(s) : s;
}

}  // namespace detail

/// Hugging Face Gemma names (GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM) -> MaxText names, folded.
/// `query_scale`: hf_gemma_query_scale of the checkpoint's config.json.
/// The text model of a Gemma3ForConditionalGeneration file sits under language_model.model. (transformers before
/// 4.52) or model.language_model. (since); its vision tower and projector are left to gemma3_vision_from_hf.
inline TensorMap import_hf_gemma(const TensorMap& in, const Config& cfg, double query_scale, const std::string& what = "hf") {
  detail::GemmaImporter imp(in, cfg, true, query_scale, what);
  const std::string root = in.has("language_model.model.embed_tokens.weight")   ? "language_model.model."
                           : in.has("model.language_model.embed_tokens.weight") ? "model.language_model."
                                                                                 : "model.";
  const bool multimodal = root != "model.";
  imp.embedding(root + "embed_tokens.weight", detail::gemma_embedding_normalizer(cfg));
  imp.norm(root + "norm.weight", "decoder.decoder_norm.scale");
  const std::map<std::string, std::string> roles = {
      {"attn_norm", "input_layernorm"},
      {"post_attn_norm", "post_attention_layernorm"},
      // Gemma v1 has no post-attention norm: its post_attention_layernorm is the pre-FFW norm.
      {"ffn_norm", cfg.is("gemma") ? "post_attention_layernorm" : "pre_feedforward_layernorm"},
      {"post_ffw_norm", "post_feedforward_layernorm"},
      {"q", "self_attn.q_proj"},
      {"k", "self_attn.k_proj"},
      {"v", "self_attn.v_proj"},
      {"o", "self_attn.o_proj"},
      {"q_norm", "self_attn.q_norm"},
      {"k_norm", "self_attn.k_norm"},
      {"gate", "mlp.gate_proj"},
      {"up", "mlp.up_proj"},
      {"down", "mlp.down_proj"}};
  imp.layers([&](std::int64_t i, const std::string& role) {
    return root + "layers." + std::to_string(i) + "." + roles.at(role) + ".weight";
  });
  // A tied head may also be stored; MaxText's Gemma always uses the embedding.
  std::vector<std::string> ignorable = {"lm_head.weight", root + "rotary_emb."};
  if (multimodal) {
    for (const char* p : {"language_model.lm_head.weight", "vision_tower.", "multi_modal_projector.",
                          "model.vision_tower.", "model.multi_modal_projector."}) {
      ignorable.emplace_back(p);
    }
  }
  return imp.finish(ignorable);
}

/// llama.cpp Gemma names (GGUF) -> MaxText names. Norms already hold 1 + w; the embedding is scaled here.
inline TensorMap import_gguf_gemma(const TensorMap& in, const Config& cfg, const std::string& what = "gguf") {
  detail::GemmaImporter imp(in, cfg, false, gguf_gemma_query_scale(cfg), what);
  imp.embedding("token_embd.weight", detail::gemma_embedding_normalizer(cfg));
  imp.norm("output_norm.weight", "decoder.decoder_norm.scale");
  static const std::map<std::string, std::string> roles = {
      {"attn_norm", "attn_norm"}, {"post_attn_norm", "post_attention_norm"}, {"ffn_norm", "ffn_norm"},
      {"post_ffw_norm", "post_ffw_norm"}, {"q", "attn_q"}, {"k", "attn_k"}, {"v", "attn_v"}, {"o", "attn_output"},
      {"q_norm", "attn_q_norm"}, {"k_norm", "attn_k_norm"}, {"gate", "ffn_gate"}, {"up", "ffn_up"}, {"down", "ffn_down"}};
  imp.layers([&](std::int64_t i, const std::string& role) { return "blk." + std::to_string(i) + "." + roles.at(role) + ".weight"; });
  return imp.finish({"output.weight", "rope_freqs.weight"});
}

}  // namespace maxtext::io
