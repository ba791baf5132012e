// layers/mhc.hpp: MaxText layers/mhc.py ManifoldConstrainedHyperConnections (DeepSeek's mHC, arXiv 2512.24880, and
// mHC-lite) and the stream expansion / reduction of decoders.py. Spec: docs/numerics.md §mHC.
//
// With mhc_expansion_rate k > 1 the residual stream holds k copies of the hidden state per token, laid out as
// [M, k*D] (MaxText's [B, S, k, D] with the last two axes flattened; stream s = columns [s*D, (s+1)*D)). Each
// attention or FFN branch is wrapped as
//   n      = RMSNorm_{kD}(x)                                   mhc_norm
//   hp, hq, hr = n . pre_alpha, n . post_alpha, n . res_alpha  [M,k], [M,k], [M,k*k or k!]
//   pre, post, res = mappings (backend mhc_maps: sigmoid, 2 sigmoid, Sinkhorn or permutation mix)
//   f      = branch(norm(sum_s pre_s x_s))                     the layer's own pre-norm and module, width D
//   y_j    = sum_i res[i][j] x_i + post_j f                    backend stream_mix
// The decoder expands the embeddings into k equal streams before the first layer and sums them before the final norm.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// The options of a config's mHC (k = mhc_expansion_rate; checked by Config::validate).
inline MhcOptions mhc_options(const Config& c) {
  MhcOptions o;
  o.k = c.mhc_expansion_rate;
  o.lite = c.enable_mhc_lite;
  o.sinkhorn_iterations = c.sinkhorn_iterations;
  return o;
}

/// One mHC module (MaxText ManifoldConstrainedHyperConnections) around a branch of width `dim`.
template <TensorPolicy P>
class ManifoldConstrainedHyperConnections {
 public:
  using B = typename P::backend;
  using A = typename P::act_t;
  using W = typename P::weight_t;
  static_assert(BackendHyperConnections<B>, "mHC needs Backend::mhc_maps, stream_sum and stream_mix");

  struct Params {
    typename RMSNorm<P>::Params mhc_norm;  ///< scale [k*dim]
    Tensor<A, 1> res_alpha_scale, pre_alpha_scale, post_alpha_scale;  ///< [1] each, 0.01
    Matrix<W> res_alpha;   ///< [k*dim, k*k] (lite: [k*dim, k!])
    Matrix<W> pre_alpha;   ///< [k*dim, k]
    Matrix<W> post_alpha;  ///< [k*dim, k]
    Tensor<A, 1> res_beta;   ///< [k, k] (lite: [k!]), zeros
    Tensor<A, 1> pre_beta;   ///< [k]
    Tensor<A, 1> post_beta;  ///< [k]
  };

  ManifoldConstrainedHyperConnections() = default;
  ManifoldConstrainedHyperConnections(const Config& c, std::int64_t dim)
      : opts_(mhc_options(c)), dim_(dim), norm_({opts_.k * dim, static_cast<float>(c.normalization_layer_epsilon)}) {
    MAXTEXT_CHECK(opts_.k >= 2, ConfigError, "[mHC] mhc_expansion_rate must be >= 2 for hyper-connections, found ", opts_.k);
    // The backends keep a token's k x k (or k!) mixing values in fixed arrays: checked here too, for layers built
    // from a Config that never went through validate().
    const std::int64_t max_k = opts_.lite ? kMhcMaxLiteStreams : kMhcMaxStreams;
    MAXTEXT_CHECK(opts_.k <= max_k, UnsupportedError, "[mHC] mhc_expansion_rate = ", opts_.k, ": at most ", max_k,
                  " streams", opts_.lite ? " with enable_mhc_lite" : "");
    MAXTEXT_CHECK(opts_.lite || opts_.sinkhorn_iterations >= 1, ConfigError,
                  "[mHC] sinkhorn_iterations must be >= 1, found ", opts_.sinkhorn_iterations);
  }
  const MhcOptions& options() const { return opts_; }
  std::int64_t streams() const { return opts_.k; }

  template <class V>
  void visit(V& v, Params& p) const {
    const std::int64_t k = opts_.k, kd = k * dim_, R = mhc_res_width(opts_);
    visit_child(v, "mhc_norm", norm_, p.mhc_norm);
    const VectorSpec scalar{{1}, Init::constant, 1.0, 0.01};  // default_scalar_init
    v.vector("res_alpha_scale", p.res_alpha_scale, scalar);
    v.vector("pre_alpha_scale", p.pre_alpha_scale, scalar);
    v.vector("post_alpha_scale", p.post_alpha_scale, scalar);
    // nd_dense_init(1.0, "fan_in", "normal"), kernels [k*dim, out]
    v.matrix("res_alpha", p.res_alpha, KernelSpec{{kd}, {R}, Init::normal, 1.0});
    v.matrix("pre_alpha", p.pre_alpha, KernelSpec{{kd}, {k}, Init::normal, 1.0});
    v.matrix("post_alpha", p.post_alpha, KernelSpec{{kd}, {k}, Init::normal, 1.0});
    v.vector("res_beta", p.res_beta, VectorSpec{opts_.lite ? std::vector<std::int64_t>{R} : std::vector<std::int64_t>{k, k}});
    v.vector("pre_beta", p.pre_beta, VectorSpec{{k}});
    v.vector("post_beta", p.post_beta, VectorSpec{{k}});
  }

  /// x [M, k*dim] -> y [M, k*dim] (y must not alias x). `branch(layer_input [M, dim], out [M, dim])` applies the
  /// layer's own norm and module to the pre-mapped input (MaxText's norm_fn then branch_fn).
  template <class Branch>
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, Branch&& branch, View<A, 2> y) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), k = opts_.k, R = mhc_res_width(opts_);
    MAXTEXT_CHECK(x.dim(1) == k * dim_ && y.dim(0) == M && y.dim(1) == k * dim_, ShapeError, "[mHC] residual streams are [",
                  M, ", ", x.dim(1), "], expected width mhc_expansion_rate * emb_dim = ", k * dim_);
    View<A, 2> n = ctx.scratch.template alloc<A, 2>({M, k * dim_});
    norm_.forward(ctx, p.mhc_norm, x, n);
    View<A, 2> hp = ctx.scratch.template alloc<A, 2>({M, k});
    View<A, 2> hq = ctx.scratch.template alloc<A, 2>({M, k});
    View<A, 2> hr = ctx.scratch.template alloc<A, 2>({M, R});
    const View<const A, 2> nc = n;
    ctx.be.matmul(nc, p.pre_alpha, hp);
    ctx.be.matmul(nc, p.post_alpha, hq);
    ctx.be.matmul(nc, p.res_alpha, hr);
    View<A, 2> pre = ctx.scratch.template alloc<A, 2>({M, k});
    View<A, 2> post = ctx.scratch.template alloc<A, 2>({M, k});
    View<A, 2> res = ctx.scratch.template alloc<A, 2>({M, k * k});
    const MhcCoefficients<A> coef{p.pre_alpha_scale.data(), p.post_alpha_scale.data(), p.res_alpha_scale.data(),
                                  p.pre_beta.data(),        p.post_beta.data(),        p.res_beta.data()};
    ctx.be.mhc_maps(View<const A, 2>(hp), View<const A, 2>(hq), View<const A, 2>(hr), coef, opts_, pre, post, res);
    View<A, 2> in = ctx.scratch.template alloc<A, 2>({M, dim_});
    ctx.be.stream_sum(x, View<const A, 2>(pre), in);
    View<A, 2> f = ctx.scratch.template alloc<A, 2>({M, dim_});
    branch(View<const A, 2>(in), f);
    ctx.be.stream_mix(x, View<const A, 2>(res), View<const A, 2>(f), View<const A, 2>(post), y);
  }

 private:
  MhcOptions opts_;
  std::int64_t dim_ = 0;
  RMSNorm<P> norm_;
};

}  // namespace maxtext::layers
