// layers/linears.hpp: MaxText linears.py DenseGeneral and MlpBlock; spec norms-dense-mlp.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// DenseGeneral: contracts the trailing `in` axes of x with a kernel of shape in + out (MaxText layout), adds an
/// optional bias of shape `out`. out = cast(x . W, dtype) (+ cast(bias, dtype), added after the product).
/// Activations are handled as rows: x [rows, prod(in)] -> y [rows, prod(out)].
template <TensorPolicy P>
class DenseGeneral {
 public:
  using A = typename P::act_t;
  using W = typename P::weight_t;
  struct Config {
    std::vector<std::int64_t> in;   ///< in_features_shape, e.g. {D} or {N, H}
    std::vector<std::int64_t> out;  ///< out_features_shape, e.g. {N, H} or {D}
    bool use_bias = false;
    Init init = Init::truncated_normal;  ///< nd_dense_init(1, fan_in, ...)
    double init_scale = 1.0;
    double init_divisor = 1.0;
  };
  struct Params {
    Matrix<W> kernel;   ///< out-major [prod(out), prod(in)]
    Tensor<A, 1> bias;  ///< [prod(out)] or empty
  };

  DenseGeneral() = default;
  explicit DenseGeneral(Config cfg) : cfg_(std::move(cfg)) {
    MAXTEXT_CHECK(!cfg_.in.empty() && !cfg_.out.empty() && product(cfg_.in) > 0 && product(cfg_.out) > 0, ConfigError,
                  "[DenseGeneral] in/out feature shapes must be non-empty and positive, found ", cfg_.in, " and ",
                  cfg_.out);
  }
  const Config& config() const { return cfg_; }
  std::int64_t in_features() const { return product(cfg_.in); }
  std::int64_t out_features() const { return product(cfg_.out); }

  template <class V>
  void visit(V& v, Params& p) const {
    v.matrix("kernel", p.kernel, {cfg_.in, cfg_.out, cfg_.init, cfg_.init_scale, cfg_.init_divisor});
    if (cfg_.use_bias) v.vector("bias", p.bias, {cfg_.out, Init::zeros});
  }

  /// x [rows, prod(in)] -> y [rows, prod(out)] of type Y (A, or f32 for logits).
  template <class Y = A>
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<Y, 2> y) const {
    MAXTEXT_DASSERT(x.dim(1) == in_features() && y.dim(1) == out_features() && x.dim(0) == y.dim(0));
    ctx.be.matmul(x, p.kernel, y, p.bias.cview());
  }

  /// A row-parallel product: this rank holds a slice of the input features (attention out over its heads, MLP wo over
  /// its columns), so its product is a partial sum. The partial products are summed over ctx.comm's ranks in f32 and
  /// rounded once to Y, as the whole product on one rank would be; the bias is added by rank 0 only (in f32, before
  /// that rounding: for Y = f32 the same as after it). Without a split: forward().
  template <class Y = A>
  void forward_reduced(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<Y, 2> y,
                       std::string_view what) const {
    if (!ctx.split()) return forward(ctx, p, x, y);
    MAXTEXT_DASSERT(x.dim(1) == in_features() && y.dim(1) == out_features() && x.dim(0) == y.dim(0));
    const View<const A, 1> bias = ctx.comm->rank() == 0 ? p.bias.cview() : View<const A, 1>();
    if constexpr (std::is_same_v<Y, float>) {
      if (y.stride(0) == y.dim(1) && y.stride(1) == 1) {
        ctx.be.matmul(x, p.kernel, y, bias);
        ctx.all_reduce(y, what);
        return;
      }
    }
    ScratchScope scope(ctx.scratch);
    View<float, 2> part = ctx.scratch.template alloc<float, 2>({x.dim(0), out_features()});
    ctx.be.matmul(x, p.kernel, part, bias);
    ctx.all_reduce(part, what);
    if constexpr (std::is_same_v<Y, float>) {
      ctx.be.copy(View<const float, 2>(part), y);
    } else {
      ctx.be.convert(View<const float, 2>(part), y);
    }
  }

 private:
  Config cfg_;
};

/// Which normalisation an MlpBlock with use_pre_norm applies (MaxText picks by decoder_block).
enum class NormKind : std::uint8_t { rms, gpt3 };

/// MlpBlock: [pre-norm] -> h_i = x W_i (+b_i) for each activation -> z = prod_i act_i(h_i) -> z W_o (+b_o).
template <TensorPolicy P>
class MlpBlock {
 public:
  using A = typename P::act_t;
  struct Config {
    std::int64_t in_features = 0;
    std::int64_t intermediate_dim = 2048;
    std::vector<Activation> activations = {Activation::silu, Activation::linear};
    bool use_bias = false;
    bool use_pre_norm = false;
    NormKind norm = NormKind::rms;
    float epsilon = 1e-5f;
    bool fused = false;  ///< one `wi` kernel [D, n_act, F]
    bool activations_in_float32 = false;  ///< non-fused path: activations and their product in f32
    Init init = Init::truncated_normal;
    double init_scale = 1.0;
    std::string name = {};  ///< capture name of this block (e.g. "decoder.layers_3.mlp"); empty: sows nothing
  };
  struct Params {
    typename RMSNorm<P>::Params rms;          ///< mlp_layer_norm (RMSNorm)
    typename Gpt3LayerNorm<P>::Params gpt3;   ///< mlp_layer_norm (Gpt3LayerNorm)
    std::vector<typename DenseGeneral<P>::Params> wi;  ///< wi, or wi_0..wi_{n-1}; fused: one [D, n, F]
    typename DenseGeneral<P>::Params wo;
  };

  MlpBlock() = default;
  explicit MlpBlock(Config cfg) : cfg_(std::move(cfg)) {
    const auto n = static_cast<std::int64_t>(cfg_.activations.size());
    MAXTEXT_CHECK(n >= 1, ConfigError, "[MlpBlock] mlp_activations must not be empty");
    MAXTEXT_CHECK(cfg_.in_features > 0 && cfg_.intermediate_dim > 0, ConfigError,
                  "[MlpBlock] in_features and intermediate_dim must be > 0, found ", cfg_.in_features, " and ",
                  cfg_.intermediate_dim);
    const auto D = cfg_.in_features, F = cfg_.intermediate_dim;
    if (cfg_.fused) {
      wi_.push_back(DenseGeneral<P>({{D}, {n, F}, cfg_.use_bias, cfg_.init, cfg_.init_scale}));
    } else {
      for (std::int64_t i = 0; i < n; ++i) wi_.push_back(DenseGeneral<P>({{D}, {F}, cfg_.use_bias, cfg_.init, cfg_.init_scale}));
    }
    wo_ = DenseGeneral<P>({{F}, {D}, cfg_.use_bias, cfg_.init, cfg_.init_scale});
    if (cfg_.use_pre_norm) {
      if (cfg_.norm == NormKind::rms) {
        rms_ = RMSNorm<P>({D, cfg_.epsilon});
      } else {
        gpt3_ = Gpt3LayerNorm<P>({D, cfg_.epsilon, cfg_.use_bias});
      }
    }
  }
  const Config& config() const { return cfg_; }

  template <class V>
  void visit(V& v, Params& p) const {
    if (cfg_.use_pre_norm) {
      Scope<V> s(v, "mlp_layer_norm");
      if (cfg_.norm == NormKind::rms) {
        rms_.visit(v, p.rms);
      } else {
        gpt3_.visit(v, p.gpt3);
      }
    }
    p.wi.resize(wi_.size());
    for (std::size_t i = 0; i < wi_.size(); ++i) {
      Scope<V> s(v, wi_.size() == 1 ? std::string("wi") : "wi_" + std::to_string(i));
      wi_[i].visit(v, p.wi[i]);
    }
    visit_child(v, "wo", wo_, p.wo);
  }

  /// x [rows, D] -> y [rows, D]; y may alias x.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = cfg_.in_features, F = cfg_.intermediate_dim;
    const auto n = static_cast<std::int64_t>(cfg_.activations.size());
    View<const A, 2> in = x;
    if (cfg_.use_pre_norm) {
      View<A, 2> xn = ctx.scratch.template alloc<A, 2>({M, D});
      if (cfg_.norm == NormKind::rms) {
        rms_.forward(ctx, p.rms, x, xn);
      } else {
        gpt3_.forward(ctx, p.gpt3, x, xn);
      }
      if (!cfg_.name.empty()) ctx.sow(cfg_.name, "mlp_layer_norm", View<const A, 2>(xn));
      in = xn;
    }
    std::vector<View<A, 2>> h;
    if (cfg_.fused) {
      View<A, 2> hf = ctx.scratch.template alloc<A, 2>({M, n * F});
      wi_[0].forward(ctx, p.wi[0], in, hf);
      for (std::int64_t i = 0; i < n; ++i) h.push_back(hf.narrow(1, i * F, F));
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        h.push_back(ctx.scratch.template alloc<A, 2>({M, F}));
        wi_[static_cast<std::size_t>(i)].forward(ctx, p.wi[static_cast<std::size_t>(i)], in, h.back());
      }
    }
    View<A, 2> z = h[0];
    const bool round_each = cfg_.fused || !cfg_.activations_in_float32 || n > 2;
    if (n == 1) {
      ctx.be.activation(View<const A, 2>(h[0]), cfg_.activations[0], View<const A, 2>(), Activation::linear, z,
                        round_each);
    } else {
      ctx.be.activation(View<const A, 2>(h[0]), cfg_.activations[0], View<const A, 2>(h[1]), cfg_.activations[1], z,
                        round_each);
      for (std::int64_t i = 2; i < n; ++i) {
        ctx.be.activation(View<const A, 2>(z), Activation::linear, View<const A, 2>(h[static_cast<std::size_t>(i)]),
                          cfg_.activations[static_cast<std::size_t>(i)], z);
      }
    }
    wo_.forward_reduced(ctx, p.wo, View<const A, 2>(z), y, "mlp");
  }

 private:
  Config cfg_;
  RMSNorm<P> rms_;
  Gpt3LayerNorm<P> gpt3_;
  std::vector<DenseGeneral<P>> wi_;
  DenseGeneral<P> wo_;
};

/// Parse MaxText's `mlp_activations` list.
inline std::vector<Activation> parse_activations(const std::vector<std::string>& names) {
  std::vector<Activation> a;
  for (const auto& n : names) a.push_back(parse_activation(n));
  return a;
}

}  // namespace maxtext::layers
