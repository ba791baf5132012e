// layers/rotary.hpp: MaxText embeddings.py rotary embeddings as precomputed tables: default RoPE (half-split),
// LLaMA-3.1 RoPE (interleaved, frequency scaling), YaRN (interleaved in, halves out, ramped frequencies),
// partial RoPE; spec rope.md (selection rules and exact f32 evaluation order).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::layers {

enum class RopeKind : std::uint8_t { none, default_rope, llama31, yarn };

/// Settings of one rotary embedding; build_rotary_table turns them into a RotaryTable.
struct RopeSpec {
  RopeKind kind = RopeKind::default_rope;
  std::int64_t head_dim = 0;       ///< lanes per head the rotation module sees (d)
  std::int64_t rot_dims = 0;       ///< lanes actually rotated (partial RoPE); 0 = head_dim
  double min_timescale = 1.0;
  double max_timescale = 10000.0;  ///< theta
  double linear_scaling = 1.0;     ///< rope_linear_scaling_factor (default RoPE)
  bool llama31_use_scale = true;   ///< rope_use_scale
  bool interleaved = false;        ///< pairing of the *input* lanes: (2i, 2i+1) vs (i, i+d/2); forced by kind
  // YaRN
  std::int64_t max_position_embeddings = 163840;
  std::int64_t original_max_position_embeddings = 4096;
  double rope_factor = 40.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool yarn_truncate = true;
  bool yarn_attention_scaling = false;
};

namespace detail {
/// Default / LLaMA timescale of pair i: min * (max/min)^(2i/d), evaluated in f32 as jnp does.
inline float timescale(std::int64_t i, std::int64_t d, double mn, double mx) {
  const float frac = static_cast<float>(2 * i) / static_cast<float>(d);
  return static_cast<float>(mn) * std::pow(static_cast<float>(mx) / static_cast<float>(mn), frac);
}
}  // namespace detail

/// Host table [positions, rot_dims/2] of cos/sin for `spec`; upload with layers::upload before use.
inline RotaryTable build_rotary_table(const RopeSpec& spec, std::int64_t positions) {
  const std::int64_t d = spec.rot_dims > 0 ? spec.rot_dims : spec.head_dim;
  MAXTEXT_CHECK(d > 0 && d % 2 == 0 && d <= spec.head_dim, ConfigError, "[rope] rotary dims must be even and <= head_dim (",
                spec.head_dim, "), found ", d);
  MAXTEXT_CHECK(positions > 0, ConfigError, "[rope] table needs > 0 positions");
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
          // factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192 (hard-coded in MaxText)
          const float f = 1.0f / v;
          const float wl = 2.0f * static_cast<float>(M_PI) / f;
          float nf;
          if (wl < 8192.0f / 4.0f) {
            nf = f;
          } else if (wl > 8192.0f / 1.0f) {
            nf = f / 8.0f;
          } else {
            const float sm = (8192.0f / wl - 1.0f) / (4.0f - 1.0f);
            nf = (1.0f - sm) * f / 8.0f + sm * f;
          }
          v = 1.0f / nf;
        }
        ts[static_cast<std::size_t>(i)] = v;
      }
      break;
    }
    case RopeKind::yarn: {
      t.layout = RopeLayout::interleaved_to_halves;
      t.round_sincos_to_input = false;
      const double theta = spec.max_timescale;
      auto corr = [&](double r) {
        return static_cast<double>(d) * std::log(static_cast<double>(spec.original_max_position_embeddings) / (r * 2.0 * M_PI)) /
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
        const float base = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(d));
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
      const float angle = spec.kind == RopeKind::yarn ? static_cast<float>(p) * freq[static_cast<std::size_t>(i)]
                                                      : static_cast<float>(p) / ts[static_cast<std::size_t>(i)];
      t.cos(p, i) = std::cos(angle);
      t.sin(p, i) = std::sin(angle);
    }
  }
  return t;
}

}  // namespace maxtext::layers
