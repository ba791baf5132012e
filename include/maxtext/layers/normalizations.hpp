// layers/normalizations.hpp: MaxText normalizations.py RMSNorm and gpt3.py Gpt3LayerNorm; spec norms-dense-mlp.md.
#pragma once

#include <cstdint>

#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// RMSNorm over the last axis: y = cast(x * rsqrt(mean(x^2) + eps), dtype) * (cast(scale, dtype) + scale_offset).
/// Statistics in f32; the normalised value is rounded to the activation type before the scale.
template <TensorPolicy P>
class RMSNorm {
 public:
  using A = typename P::act_t;
  struct Config {
    std::int64_t dim = 0;
    float epsilon = 1e-6f;
    bool with_scale = true;
    float scale_offset = 0.0f;  ///< 1 for Qwen3-Next style (1 + scale) norms
  };
  struct Params {
    Tensor<A, 1> scale;  ///< [dim], ones
  };

  RMSNorm() = default;
  explicit RMSNorm(const Config& cfg) : cfg_(cfg) {
    MAXTEXT_CHECK(cfg.dim > 0, ConfigError, "[RMSNorm] dim must be > 0, found ", cfg.dim);
  }
  const Config& config() const { return cfg_; }

  template <class V>
  void visit(V& v, Params& p) const {
    if (cfg_.with_scale) v.vector("scale", p.scale, {{cfg_.dim}, cfg_.scale_offset != 0.0f ? Init::zeros : Init::ones});
  }

  /// x, y: [rows, dim]; y may alias x.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y) const {
    MAXTEXT_DASSERT(x.dim(1) == cfg_.dim && y.dim(0) == x.dim(0) && y.dim(1) == cfg_.dim);
    ctx.be.rms_norm(x, p.scale.cview(), cfg_.epsilon, cfg_.scale_offset, y);
  }

 private:
  Config cfg_;
};

/// Gpt3LayerNorm: y = (x - mean) * rsqrt(var + eps) * (scale + 1) + bias over the last axis, statistics in the
/// activation type (reductions_in_fp32 is False at every MaxText call site). Scale is zero-initialised (unit gain).
template <TensorPolicy P>
class Gpt3LayerNorm {
 public:
  using A = typename P::act_t;
  struct Config {
    std::int64_t dim = 0;
    float epsilon = 1e-6f;
    bool use_bias = true;
    bool reductions_in_fp32 = false;  ///< False at every MaxText call site
  };
  struct Params {
    Tensor<A, 1> scale;  ///< [dim], zeros (gain - 1)
    Tensor<A, 1> bias;   ///< [dim], zeros; empty when !use_bias
  };

  Gpt3LayerNorm() = default;
  explicit Gpt3LayerNorm(const Config& cfg) : cfg_(cfg) {
    MAXTEXT_CHECK(cfg.dim > 0, ConfigError, "[Gpt3LayerNorm] dim must be > 0, found ", cfg.dim);
  }
  const Config& config() const { return cfg_; }

  template <class V>
  void visit(V& v, Params& p) const {
    v.vector("scale", p.scale, {{cfg_.dim}, Init::zeros});
    if (cfg_.use_bias) v.vector("bias", p.bias, {{cfg_.dim}, Init::zeros});
  }

  /// x, y: [rows, dim]; y may alias x.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y) const {
    MAXTEXT_DASSERT(x.dim(1) == cfg_.dim && y.dim(0) == x.dim(0) && y.dim(1) == cfg_.dim);
    ctx.be.layer_norm(x, p.scale.cview(), p.bias.cview(), cfg_.epsilon, y, cfg_.reductions_in_fp32);
  }

 private:
  Config cfg_;
};

}  // namespace maxtext::layers
