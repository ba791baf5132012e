// layers/rotary.hpp: MaxText embeddings.py rotary embeddings as precomputed tables: default RoPE (half-split),
// LLaMA-3.1 RoPE (interleaved, frequency scaling), YaRN (interleaved or concatenated input, halves out, ramped
// frequencies; pairwise variant), partial RoPE; and the selection MaxText's Attention.init_rotary_embedding makes
// from the config and the layer's arguments. Spec rope.md (selection rules and exact f32 evaluation order).
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::layers {

/// mrope: MaxText's Qwen3OmniMoeThinkerTextRotaryEmbedding (use_mrope). At text positions the temporal, height and
/// width positions are all the token's position, so its section interleaving selects equal angles: partial RoPE with
/// angles p * (1 / timescale) and cos / sin kept in f32 (not rounded to the input dtype), the shared table. A step
/// with a picture's 3-D positions (StepInfo::mrope_positions) takes a table of its own (build_mrope_step_table).
enum class RopeKind : std::uint8_t { none, default_rope, llama31, yarn, mrope };

/// Settings of one rotary embedding; build_rotary_table turns them into a RotaryTable.
struct RopeSpec {
  RopeKind kind = RopeKind::default_rope;
  std::int64_t head_dim = 0;       ///< lanes per head the rotation module sees (d)
  std::int64_t rot_dims = 0;       ///< lanes actually rotated (partial RoPE); 0 = head_dim
  double min_timescale = 1.0;
  double max_timescale = 10000.0;  ///< theta
  double linear_scaling = 1.0;     ///< rope_linear_scaling_factor (default RoPE)
  /// Default RoPE only: pairs (i, i + d/2) with i >= rotated_pairs get angle 0 (cos 1, sin 0: passed through). MaxText's
  /// Gemma4PartialRotaryEmbedding pads the timescales of those pairs with inf; 0 = every pair rotates.
  std::int64_t rotated_pairs = 0;
  bool llama31_use_scale = true;   ///< rope_use_scale
  /// LLaMA-3.1 scaling (llama3_rope_* keys; MaxText's hard-coded 8 / 1 / 4 / 8192 by default)
  double llama31_factor = 8.0;
  double llama31_low_freq_factor = 1.0;
  double llama31_high_freq_factor = 4.0;
  double llama31_original_context = 8192.0;
  /// YaRN only: input pairs (2i, 2i+1) (rope_interleave) or (i, i+d/2). Default RoPE is always half-split and
  /// LLaMA-3.1 RoPE always interleaved.
  bool interleaved = true;
  // YaRN
  std::int64_t max_position_embeddings = 163840;
  std::int64_t original_max_position_embeddings = 4096;
  double rope_factor = 40.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool yarn_truncate = true;
  bool yarn_attention_scaling = false;
  bool yarn_pairwise = false;  ///< rope_pairwise: interleaved output, math in f32 (needs interleaved input)
  /// MRoPE only: mrope_section, the frequencies the temporal, height and width positions turn (sum = rot_dims / 2).
  std::int64_t mrope_t = 0, mrope_h = 0, mrope_w = 0;

  /// Every field, for ordering (the table cache key).
  auto key() const {
    return std::make_tuple(static_cast<int>(kind), head_dim, rot_dims, min_timescale, max_timescale, linear_scaling, rotated_pairs,
                           llama31_use_scale, llama31_factor, llama31_low_freq_factor, llama31_high_freq_factor,
                           llama31_original_context, interleaved, max_position_embeddings, original_max_position_embeddings,
                           rope_factor, beta_fast, beta_slow, yarn_truncate, yarn_attention_scaling, yarn_pairwise,
                           mrope_t, mrope_h, mrope_w);
  }
};

namespace detail {
/// Default / LLaMA timescale of pair i: min * (max/min)^(2i/d). MaxText evaluates max/min as a Python float
/// (double) and the rest in f32.
inline float timescale(std::int64_t i, std::int64_t d, double mn, double mx) {
  const float frac = static_cast<float>(2 * i) / static_cast<float>(d);
  return static_cast<float>(mn) * std::pow(static_cast<float>(mx / mn), frac);
}
inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
inline std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace detail

/// Host table [positions, rot_dims/2] of cos/sin for `spec`; upload with layers::upload before use on a device.
MAXTEXT_API RotaryTable build_rotary_table(const RopeSpec& spec, std::int64_t positions);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API RotaryTable build_rotary_table(const RopeSpec& spec, std::int64_t positions) {
  const std::int64_t d = spec.rot_dims > 0 ? spec.rot_dims : spec.head_dim;
  MAXTEXT_CHECK(d > 0 && d % 2 == 0 && d <= spec.head_dim, ConfigError,
                "[rope] rotary dims must be even, > 0 and <= head_dim (", spec.head_dim, "), found ", d);
  MAXTEXT_CHECK(positions > 0, ConfigError, "[rope] table needs > 0 positions, found ", positions);
  const std::int64_t half = d / 2;
  RotaryTable t;
  t.rot_dims = d;
  t.cos = Tensor<float, 2>({positions, half});
  t.sin = Tensor<float, 2>({positions, half});
  std::vector<float> freq(static_cast<std::size_t>(half));  // angle = pos * freq (YaRN) or pos / ts (others)
  std::vector<float> ts(static_cast<std::size_t>(half));
  switch (spec.kind) {
    case RopeKind::none:
      MAXTEXT_THROW(ConfigError, "[rope] build_rotary_table called for a NoPE layer");
    case RopeKind::default_rope:
      t.layout = RopeLayout::half_split;
      t.round_sincos_to_input = true;
      for (std::int64_t i = 0; i < half; ++i) {
        float v = detail::timescale(i, d, spec.min_timescale, spec.max_timescale);
        if (spec.linear_scaling != 1.0) v *= static_cast<float>(spec.linear_scaling);
        ts[static_cast<std::size_t>(i)] = v;
      }
      break;
    case RopeKind::llama31: {
      t.layout = RopeLayout::interleaved;
      t.round_sincos_to_input = false;
      for (std::int64_t i = 0; i < half; ++i) {
        float v = detail::timescale(i, d, spec.min_timescale, spec.max_timescale);
        if (spec.llama31_use_scale) {
          // MaxText hard-codes factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192 (the spec's
          // defaults). Wavelengths below ctx / high keep their frequency, above ctx / low are divided by the factor,
          // in between they are interpolated; with high == low that band is empty (Llama 4 Scout: 16 / 1 / 1).
          const float factor = static_cast<float>(spec.llama31_factor);
          const float lo = static_cast<float>(spec.llama31_low_freq_factor);
          const float hi = static_cast<float>(spec.llama31_high_freq_factor);
          const float ctx = static_cast<float>(spec.llama31_original_context);
          const float f = 1.0f / v;
          const float wl = static_cast<float>(2.0 * M_PI) / f;
          float nf;
          if (wl < ctx / hi) {
            nf = f;
          } else if (wl > ctx / lo || hi == lo) {
            nf = f / factor;
          } else {
            const float sm = (ctx / wl - lo) / (hi - lo);
            nf = (1.0f - sm) * f / factor + sm * f;
          }
          v = 1.0f / nf;
        }
        ts[static_cast<std::size_t>(i)] = v;
      }
      break;
    }
    case RopeKind::mrope:
      // embeddings.py Qwen3OmniMoeThinkerTextRotaryEmbedding: RotaryEmbedding's timescale over rotary_dim, then
      // freqs = position * (1 / timescale) in f32; cos / sin times attention_scaling (1.0) stay f32; rotate_half on
      // the first rotary_dim lanes, the rest passed through.
      t.layout = RopeLayout::half_split;
      t.round_sincos_to_input = false;
      for (std::int64_t i = 0; i < half; ++i) {
        freq[static_cast<std::size_t>(i)] = 1.0f / detail::timescale(i, d, spec.min_timescale, spec.max_timescale);
      }
      break;
    case RopeKind::yarn: {
      MAXTEXT_CHECK(!spec.yarn_pairwise || spec.interleaved, ConfigError,
                    "[rope] rope_pairwise=true requires rope_interleave=true");
      if (spec.yarn_pairwise) {
        t.layout = RopeLayout::interleaved;  // pairs stay in place, math in f32
      } else {
        t.layout = spec.interleaved ? RopeLayout::interleaved_to_halves : RopeLayout::half_split;
      }
      t.round_sincos_to_input = false;  // complex64 arithmetic
      const double theta = spec.max_timescale;
      auto corr = [&](double r) {
        return static_cast<double>(d) *
               std::log(static_cast<double>(spec.original_max_position_embeddings) / (r * 2.0 * M_PI)) /
               (2.0 * std::log(theta));
      };
      double low = corr(spec.beta_fast), high = corr(spec.beta_slow);
      if (spec.yarn_truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(d - 1));
      if (low == high) high += 0.001;
      for (std::int64_t i = 0; i < half; ++i) {
        const float base =
            1.0f / std::pow(static_cast<float>(theta), 2.0f * static_cast<float>(i) / static_cast<float>(d));
        float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        const float smooth = 1.0f - ramp;
        freq[static_cast<std::size_t>(i)] =
            (base / static_cast<float>(spec.rope_factor)) * (1.0f - smooth) + base * smooth;
      }
      if (spec.yarn_attention_scaling && spec.rope_factor > 1.0) {
        t.post_scale = static_cast<float>(0.1 * std::log(spec.rope_factor) + 1.0);
      }
      break;
    }
  }
  for (std::int64_t p = 0; p < positions; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const bool by_freq = spec.kind == RopeKind::yarn || spec.kind == RopeKind::mrope;
      const bool passed = spec.kind == RopeKind::default_rope && spec.rotated_pairs > 0 && i >= spec.rotated_pairs;
      const float angle = passed   ? 0.0f  // position / inf
                          : by_freq ? static_cast<float>(p) * freq[static_cast<std::size_t>(i)]
                                    : static_cast<float>(p) / ts[static_cast<std::size_t>(i)];
      t.cos(p, i) = std::cos(angle);
      t.sin(p, i) = std::sin(angle);
    }
  }
  return t;
}
#endif

/// The per-layer arguments of MaxText's Attention that choose its rotary embedding (None = 0 / empty).
struct RopeArgs {
  std::int64_t dims = 0;               ///< rope embedding dims: head_dim (MLA: qk_rope_head_dim)
  std::string rope_type;               ///< layer override of config.rope_type ("" = config)
  double rope_max_timescale = 0.0;     ///< layer override of config.rope_max_timescale (<= 0 = config)
  double partial_rotary_factor = 0.0;  ///< layer-level factor (only Gemma-4 / Qwen3-Next pass one); 0 = None
  bool local_sliding = false;          ///< the layer's attention type is local_sliding
  bool is_nope_layer = false;          ///< no rotary embedding at all
};

/// MaxText Attention.init_rotary_embedding (spec rope.md §Selection), for the text-only variants: NoPE, MRoPE at text
/// positions (use_mrope; the config accepts it only for blocks whose layers pass it), LLaMA-3.1 (model_name or
/// rope_type starting with "llama3.1"), YaRN (rope_type starting with "yarn"), partial RoPE (layer-level factor < 1),
/// else default RoPE (local_rope_max_timescale on local sliding layers, linear scaling except on Gemma-3 local
/// layers; model_name gemma4*: Gemma-4's inf-padded partial RoPE).
MAXTEXT_API RopeSpec select_rope(const Config& c, const RopeArgs& a);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API RopeSpec select_rope(const Config& c, const RopeArgs& a) {
  RopeSpec s;
  s.head_dim = a.dims;
  if (a.is_nope_layer) {
    s.kind = RopeKind::none;
    return s;
  }
  MAXTEXT_CHECK(a.dims > 0 && a.dims % 2 == 0, ConfigError,
                "[rope] embedding dims for rotary position embedding must be even and > 0, found ", a.dims);
  const std::string type = detail::lower(a.rope_type.empty() ? c.rope_type : a.rope_type);
  const double theta = a.rope_max_timescale > 0 ? a.rope_max_timescale : c.rope_max_timescale;
  s.min_timescale = c.rope_min_timescale;
  s.max_timescale = theta;
  if (c.use_mrope) {
    s.kind = RopeKind::mrope;
    const double f = a.partial_rotary_factor > 0.0 ? a.partial_rotary_factor : c.partial_rotary_factor;
    MAXTEXT_CHECK(f > 0.0 && f <= 1.0, ConfigError, "[rope] use_mrope: partial_rotary_factor must be in (0, 1], found ", f);
    s.rot_dims = static_cast<std::int64_t>(static_cast<double>(a.dims) * f);
    std::int64_t freqs = 0;
    for (const auto v : c.mrope_section()) freqs += v;
    MAXTEXT_CHECK(s.rot_dims > 0 && s.rot_dims % 2 == 0 && freqs == s.rot_dims / 2, ConfigError, "[rope] use_mrope: ",
                  s.rot_dims, " rotary dims (", a.dims, " x partial_rotary_factor ", f,
                  ") must be even and twice the frequencies of mrope_section ", c.mrope_section(), " (", freqs, ")");
    const auto sec = c.mrope_section();
    s.mrope_t = sec[0];
    s.mrope_h = sec[1];
    s.mrope_w = sec[2];
    return s;
  }
  if (detail::starts_with(c.model_name, "llama3.1") || detail::starts_with(type, "llama3.1")) {
    s.kind = RopeKind::llama31;
    s.llama31_use_scale = c.rope_use_scale;
    s.llama31_factor = c.llama3_rope_factor;
    s.llama31_low_freq_factor = c.llama3_rope_low_freq_factor;
    s.llama31_high_freq_factor = c.llama3_rope_high_freq_factor;
    s.llama31_original_context = c.llama3_rope_original_context;
    return s;
  }
  if (detail::starts_with(type, "yarn")) {
    s.kind = RopeKind::yarn;
    s.max_position_embeddings = c.max_position_embeddings;
    s.original_max_position_embeddings = c.original_max_position_embeddings;
    s.beta_fast = c.beta_fast;
    s.beta_slow = c.beta_slow;
    s.rope_factor = c.rope_factor;
    s.interleaved = c.rope_interleave;
    s.yarn_truncate = c.rope_truncate;
    s.yarn_attention_scaling = c.rope_attention_scaling;
    s.yarn_pairwise = c.rope_pairwise;
    MAXTEXT_CHECK(!s.yarn_pairwise || s.interleaved, ConfigError, "[rope] rope_pairwise=true requires rope_interleave=true");
    return s;
  }
  s.kind = RopeKind::default_rope;
  if (a.partial_rotary_factor > 0.0 && a.partial_rotary_factor < 1.0) {
    if (detail::starts_with(c.model_name, "gemma4")) {
      // Gemma4PartialRotaryEmbedding: the default RoPE over the whole head (pairs (i, i + d/2)), its timescales from
      // the full head_dim, the first int(d * factor) / 2 pairs rotated, the rest passed through; no linear scaling.
      s.rotated_pairs = static_cast<std::int64_t>(static_cast<double>(a.dims) * a.partial_rotary_factor) / 2;
      MAXTEXT_CHECK(s.rotated_pairs > 0, ConfigError, "[rope] Gemma-4 partial_rotary_factor ", a.partial_rotary_factor,
                    " rotates no pair of ", a.dims, " dims");
      return s;
    }
    s.rot_dims = static_cast<std::int64_t>(static_cast<double>(a.dims) * a.partial_rotary_factor);
    MAXTEXT_CHECK(s.rot_dims > 0 && s.rot_dims % 2 == 0, ConfigError, "[rope] partial_rotary_factor ",
                  a.partial_rotary_factor, " gives ", s.rot_dims, " rotary dims of ", a.dims,
                  ": expected an even number > 0");
    return s;  // PartialRotaryEmbedding: no local timescale, no linear scaling
  }
  if (a.local_sliding && c.local_rope_max_timescale > 0) s.max_timescale = c.local_rope_max_timescale;
  s.linear_scaling = c.rope_linear_scaling_factor;
  if (detail::starts_with(c.model_name, "gemma3") && a.local_sliding) s.linear_scaling = 1.0;
  return s;
}
#endif

/// MRoPE's cos / sin for the M tokens of one step from their 3-D positions `pos3` [3, M] (temporal, height, width),
/// row m for token m (rotate with positions 0..M-1). embeddings.py Qwen3OmniMoeThinkerTextRotaryEmbedding:
/// freqs[s, i] = position_s * (1 / timescale_i) in f32, then _apply_interleaved_mrope: frequency i takes the height
/// position when i % 3 == 1 and i < 3 * mrope_section[1], the width position when i % 3 == 2 and i < 3 *
/// mrope_section[2], the temporal one otherwise; cos / sin of it in f32. At equal positions it is the shared table's row.
MAXTEXT_API RotaryTable build_mrope_step_table(const RopeSpec& spec, std::span<const std::int32_t> pos3, std::int64_t M);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API RotaryTable build_mrope_step_table(const RopeSpec& spec, std::span<const std::int32_t> pos3, std::int64_t M) {
  MAXTEXT_CHECK(spec.kind == RopeKind::mrope, ConfigError, "[rope] 3-D positions are MRoPE's (use_mrope); this layer's "
                "rotary embedding takes one position per token");
  MAXTEXT_CHECK(M > 0 && static_cast<std::int64_t>(pos3.size()) == 3 * M, ArgumentError, "[rope] 3-D positions: ",
                pos3.size(), " values for ", M, " tokens (expected [3, ", M, "])");
  const std::int64_t d = spec.rot_dims > 0 ? spec.rot_dims : spec.head_dim, half = d / 2;
  MAXTEXT_CHECK(spec.mrope_t + spec.mrope_h + spec.mrope_w == half, ConfigError, "[rope] mrope_section [", spec.mrope_t,
                ", ", spec.mrope_h, ", ", spec.mrope_w, "] does not sum to the ", half, " rotary frequencies");
  RotaryTable t;
  t.rot_dims = d;
  t.layout = RopeLayout::half_split;
  t.round_sincos_to_input = false;
  t.cos = Tensor<float, 2>({M, half});
  t.sin = Tensor<float, 2>({M, half});
  std::vector<float> freq(static_cast<std::size_t>(half));
  std::vector<int> row(static_cast<std::size_t>(half), 0);
  for (std::int64_t i = 0; i < half; ++i) {
    freq[static_cast<std::size_t>(i)] = 1.0f / detail::timescale(i, d, spec.min_timescale, spec.max_timescale);
    if (i % 3 == 1 && i < 3 * spec.mrope_h) row[static_cast<std::size_t>(i)] = 1;
    if (i % 3 == 2 && i < 3 * spec.mrope_w) row[static_cast<std::size_t>(i)] = 2;
  }
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t i = 0; i < half; ++i) {
      const std::int32_t p = pos3[static_cast<std::size_t>(row[static_cast<std::size_t>(i)] * M + m)];
      const float angle = static_cast<float>(p) * freq[static_cast<std::size_t>(i)];
      t.cos(m, i) = std::cos(angle);
      t.sin(m, i) = std::sin(angle);
    }
  }
  return t;
}
#endif

/// Positions a layer's table covers: max_target_length, and for YaRN at most max_position_embeddings (MaxText's
/// YaRN table size; positions beyond it are invalid there).
inline std::int64_t rope_table_positions(const RopeSpec& s, const Config& c) {
  std::int64_t n = c.max_target_length;
  if (s.kind == RopeKind::yarn) n = std::min(n, s.max_position_embeddings);
  return n;
}

/// One host table per distinct (spec, positions), shared by every layer that uses it (a model's layers usually
/// all do). Tables live as long as some layer holds them.
MAXTEXT_API std::shared_ptr<const RotaryTable> shared_rotary_table(const RopeSpec& spec, std::int64_t positions);
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::shared_ptr<const RotaryTable> shared_rotary_table(const RopeSpec& spec, std::int64_t positions) {
  using Key = std::tuple<decltype(spec.key()), std::int64_t>;
  static std::mutex mu;
  static std::map<Key, std::weak_ptr<const RotaryTable>> cache;
  const Key key{spec.key(), positions};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) {
    if (auto t = it->second.lock()) return t;
  }
  auto t = std::make_shared<const RotaryTable>(build_rotary_table(spec, positions));
  cache[key] = t;
  return t;
}
#endif

}  // namespace maxtext::layers
