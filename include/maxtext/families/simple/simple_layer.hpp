// families/simple/simple_layer.hpp: MaxText models/simple_layer.py SimpleDecoderLayer and SimpleMlpDecoderLayer, the test /
// debugging blocks of decoder_block "simple" and "simple_mlp"; spec decoder.md.
//
//   simple:      out = x . weights                  weights [emb_dim, emb_dim]
//   simple_mlp:  out = (x . ff_1) . ff_2            ff_1 [emb_dim, mlp_dim], ff_2 [mlp_dim, emb_dim]
//
// No residual connection, no normalisation, no activation and no attention (so no KV cache): the layer output
// replaces the residual stream. Each product is jnp.dot in the activation dtype (weights cast to it), so with bf16
// activations the intermediate of simple_mlp is rounded to bf16. Kernels are lecun_normal (truncated normal,
// variance 1/fan_in). The model around them is the usual one (embedding, final RMSNorm, logits).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// MaxText SimpleDecoderLayer (decoder_block "simple"): one [emb_dim, emb_dim] matrix.
template <TensorPolicy P>
class SimpleDecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "simple";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  using W = typename P::weight_t;
  struct Params {
    Matrix<W> weights;  ///< out-major [D, D]; file layout [D(in), D(out)]
  };

  SimpleDecoderLayer() = default;
  SimpleDecoderLayer(const Config& c, LayerInfo info) : info_(std::move(info)), D_(c.emb_dim) {}

  CacheSpec cache_spec() const { return {}; }
  const LayerInfo& info() const { return info_; }

  template <class V>
  void visit(V& v, Params& p) const {
    v.matrix("weights", p.weights, KernelSpec{{D_}, {D_}, Init::truncated_normal});
  }

  /// x [B*T, D] in place: x . weights. Captures: the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& /*cache*/, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    View<A, 2> y = ctx.scratch.template alloc<A, 2>({x.dim(0), D_});
    ctx.be.matmul(View<const A, 2>(x), p.weights, y);
    ctx.be.copy(View<const A, 2>(y), x);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  std::int64_t D_ = 0;
};

/// MaxText SimpleMlpDecoderLayer (decoder_block "simple_mlp"): [emb_dim, mlp_dim] then [mlp_dim, emb_dim].
template <TensorPolicy P>
class SimpleMlpDecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "simple_mlp";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  using W = typename P::weight_t;
  struct Params {
    Matrix<W> ff_1;  ///< out-major [F, D]; file layout [D, F]
    Matrix<W> ff_2;  ///< out-major [D, F]; file layout [F, D]
  };

  SimpleMlpDecoderLayer() = default;
  SimpleMlpDecoderLayer(const Config& c, LayerInfo info) : info_(std::move(info)), D_(c.emb_dim), F_(c.mlp_dim) {}

  CacheSpec cache_spec() const { return {}; }
  const LayerInfo& info() const { return info_; }

  template <class V>
  void visit(V& v, Params& p) const {
    v.matrix("ff_1", p.ff_1, KernelSpec{{D_}, {F_}, Init::truncated_normal});
    v.matrix("ff_2", p.ff_2, KernelSpec{{F_}, {D_}, Init::truncated_normal});
  }

  /// x [B*T, D] in place: (x . ff_1) . ff_2 (the intermediate rounded to the activation type). Captures: the
  /// intermediate under the layer's mlp name, the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& /*cache*/, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0);
    View<A, 2> h = ctx.scratch.template alloc<A, 2>({M, F_});
    ctx.be.matmul(View<const A, 2>(x), p.ff_1, h);
    ctx.sow(info_.mlp, View<const A, 2>(h));
    if (ctx.split()) {
      // Split by MLP columns (models/parallel.hpp): each rank holds mlp_dim / N columns of ff_1 and rows of ff_2, so
      // its product is a partial sum, added over the ranks in f32 before the one rounding.
      View<float, 2> part = ctx.scratch.template alloc<float, 2>({M, D_});
      ctx.be.matmul(View<const A, 2>(h), p.ff_2, part);
      ctx.all_reduce(part, "ff_2");
      if constexpr (std::is_same_v<A, float>) {
        ctx.be.copy(View<const float, 2>(part), x);
      } else {
        ctx.be.convert(View<const float, 2>(part), x);
      }
    } else {
      ctx.be.matmul(View<const A, 2>(h), p.ff_2, x);
    }
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  std::int64_t D_ = 0, F_ = 0;
};

}  // namespace maxtext::layers
