// backend/common/math.hpp: scalar math shared by every backend (host and device): activations, soft caps,
// and the constants of MaxText's attention. Spec: norms-dense-mlp.md (activation names), attention.md.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext {

/// MaxText's DEFAULT_MASK_VALUE = -0.7 * FLT_MAX: masked logits are *replaced* by it (not -inf).
inline constexpr float kMaskValue = -0.7f * FLT_MAX;

/// The activation functions `mlp_activations` may name (flax.linen names; "linear" is the identity).
enum class Activation : std::uint8_t { linear, relu, gelu, gelu_exact, silu, sigmoid, tanh, softplus, sqrtsoftplus };

/// Parse a MaxText activation name ("silu", "gelu", "linear", ...).
inline Activation parse_activation(std::string_view name) {
  if (name == "linear") return Activation::linear;
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;  // flax.linen.gelu: approximate=True (tanh form)
  if (name == "gelu_exact" || name == "gelu_erf") return Activation::gelu_exact;
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "sigmoid") return Activation::sigmoid;
  if (name == "tanh") return Activation::tanh;
  if (name == "softplus") return Activation::softplus;
  if (name == "sqrtsoftplus") return Activation::sqrtsoftplus;
  MAXTEXT_THROW(UnsupportedError, "[mlp_activations] unknown activation '", name,
                "': expected one of linear, relu, gelu, gelu_exact, silu, sigmoid, tanh, softplus, sqrtsoftplus");
}
inline constexpr std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::linear: return "linear";
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_exact: return "gelu_exact";
    case Activation::silu: return "silu";
    case Activation::sigmoid: return "sigmoid";
    case Activation::tanh: return "tanh";
    case Activation::softplus: return "softplus";
    case Activation::sqrtsoftplus: return "sqrtsoftplus";
  }
  return "?";
}

/// Which clamped SwiGLU math::clamped_swiglu computes (MaxText moe.py apply_ffn_activation).
enum class ClampedGluForm : std::uint8_t { gpt_oss, swiglu };

namespace math {

MAXTEXT_HD inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/// log(1 + e^x) without overflow (as jax.nn.softplus = logaddexp(x, 0)).
MAXTEXT_HD inline float softplus(float x) { return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x)); }
/// flax.linen.gelu default: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
MAXTEXT_HD inline float gelu_tanh(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
MAXTEXT_HD inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }

MAXTEXT_HD inline float activate(Activation a, float x) {
  switch (a) {
    case Activation::linear: return x;
    case Activation::relu: return x > 0.0f ? x : 0.0f;
    case Activation::gelu: return gelu_tanh(x);
    case Activation::gelu_exact: return gelu_erf(x);
    case Activation::silu: return x * sigmoid(x);
    case Activation::sigmoid: return sigmoid(x);
    case Activation::tanh: return tanhf(x);
    case Activation::softplus: return softplus(x);
    case Activation::sqrtsoftplus: return sqrtf(softplus(x));
  }
  return x;
}

/// The two clamped SwiGLUs of MaxText moe.py apply_ffn_activation, on one element. Both clip g = min(h0, limit) and
/// u = clip(h1, -limit, limit) (exact in any type), then
///   gpt_oss (decoder_block gpt_oss):            y = r(r(g * r(act(r(g * alpha)))) * r(u + 1));
///   swiglu  (deepseek / deepseek4 with mlp_activations_limit > 0, DeepSeek-V4): y = r(r(act(g)) * u) (alpha unused);
/// `r` being the rounding to the activation type after each MaxText op (identity in f32) and `alpha` already
/// rounded to that type (a Python scalar meets a dtype array).
template <class R>
MAXTEXT_HD inline float clamped_swiglu(float h0, float h1, Activation act, float alpha, float limit, R r,
                                       ClampedGluForm form = ClampedGluForm::gpt_oss) {
  const float g = h0 > limit ? limit : h0;
  const float u = h1 > limit ? limit : (h1 < -limit ? -limit : h1);
  if (form == ClampedGluForm::swiglu) return r(r(activate(act, g)) * u);
  const float a = r(activate(act, r(g * alpha)));
  return r(r(g * a) * r(u + 1.0f));
}

/// cap * tanh(x / cap): MaxText's logit soft cap.
MAXTEXT_HD inline float soft_cap(float x, float cap) { return cap * tanhf(x / cap); }

}  // namespace math
}  // namespace maxtext
