// bench/llama_layer.hpp: a minimal Llama-2 decoder layer for the end-to-end benchmarks only (MaxText
// models/llama2.py LlamaDecoderLayer: pre-attention RMSNorm, q/k/v without bias, default RoPE (half-split),
// GQA attention scaled by 1/sqrt(head_dim), output projection, residual, post-attention RMSNorm, SwiGLU MLP,
// residual). The library's own Llama layer (layers/llama2.hpp, issue 3) replaces it once merged; this one exists
// so that the speed work can measure whole models meanwhile. Parameter names follow MaxText's.
#pragma once

#include <cmath>
#include <cstdint>

#include "maxtext/core/config.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attention_op.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/rotary.hpp"

namespace maxtext::bench {

template <TensorPolicy P>
class BenchLlamaLayer {
 public:
  using A = typename P::act_t;
  struct Params {
    typename layers::RMSNorm<P>::Params pre_self_attention_layer_norm, post_self_attention_layer_norm;
    typename layers::DenseGeneral<P>::Params query, key, value, out;
    typename layers::MlpBlock<P>::Params mlp;
  };

  BenchLlamaLayer() = default;
  BenchLlamaLayer(const Config& c, layers::LayerInfo info)
      : info_(std::move(info)), D_(c.emb_dim), N_(c.num_query_heads), K_(c.num_kv_heads), H_(c.head_dim) {
    const auto eps = static_cast<float>(c.normalization_layer_epsilon);
    norm1_ = layers::RMSNorm<P>({D_, eps});
    norm2_ = layers::RMSNorm<P>({D_, eps});
    q_ = layers::DenseGeneral<P>({{D_}, {N_, H_}});
    k_ = layers::DenseGeneral<P>({{D_}, {K_, H_}});
    v_ = layers::DenseGeneral<P>({{D_}, {K_, H_}});
    o_ = layers::DenseGeneral<P>({{N_, H_}, {D_}});
    mlp_ = layers::MlpBlock<P>({D_, c.mlp_dim, {Activation::silu, Activation::linear}});
    op_ = layers::AttentionOp<P>({N_, K_, H_, H_, true, 0, 0, AttentionOptions{}});
    layers::RopeSpec rs;
    rs.head_dim = H_;
    rs.max_timescale = c.rope_max_timescale;
    rope_ = layers::build_rotary_table(rs, c.max_target_length);
  }
  layers::CacheSpec cache_spec() const { return op_.cache_spec(); }
  const layers::LayerInfo& info() const { return info_; }

  template <class V>
  void visit(V& v, Params& p) const {
    {
      layers::Scope<V> s(v, "pre_self_attention_layer_norm");
      norm1_.visit(v, p.pre_self_attention_layer_norm);
    }
    {
      layers::Scope<V> s(v, "self_attention");
      {
        layers::Scope<V> t(v, "query");
        q_.visit(v, p.query);
      }
      {
        layers::Scope<V> t(v, "key");
        k_.visit(v, p.key);
      }
      {
        layers::Scope<V> t(v, "value");
        v_.visit(v, p.value);
      }
      layers::Scope<V> t(v, "out");
      o_.visit(v, p.out);
    }
    {
      layers::Scope<V> s(v, "post_self_attention_layer_norm");
      norm2_.visit(v, p.post_self_attention_layer_norm);
    }
    layers::Scope<V> s(v, "mlp");
    mlp_.visit(v, p.mlp);
  }

  void forward(const layers::Context<P>& ctx, const Params& p, layers::LayerCache<A>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0);
    View<A, 2> h = ctx.scratch.template alloc<A, 2>({M, D_});
    norm1_.forward(ctx, p.pre_self_attention_layer_norm, x, h);
    View<A, 3> q = ctx.scratch.template alloc<A, 3>({M, N_, H_});
    View<A, 3> k = ctx.scratch.template alloc<A, 3>({M, K_, H_});
    View<A, 3> v = ctx.scratch.template alloc<A, 3>({M, K_, H_});
    q_.forward(ctx, p.query, h, rows(q));
    k_.forward(ctx, p.key, h, rows(k));
    v_.forward(ctx, p.value, h, rows(v));
    ctx.be.rotary(q, ctx.step.positions, rope_);
    ctx.be.rotary(k, ctx.step.positions, rope_);
    ctx.be.scale(rows(q), std::sqrt(static_cast<float>(H_)), true);
    View<A, 3> o = ctx.scratch.template alloc<A, 3>({M, N_, H_});
    op_.forward(ctx, q, k, v, cache, View<const A, 1>(), o);
    o_.forward(ctx, p.out, View<const A, 2>(rows(o)), h);
    ctx.be.add(View<const A, 2>(h), View<const A, 2>(x), x);
    norm2_.forward(ctx, p.post_self_attention_layer_norm, x, h);
    mlp_.forward(ctx, p.mlp, h, h);
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(h), x);
  }

 private:
  static View<A, 2> rows(View<A, 3> t) { return View<A, 2>(t.data(), {t.dim(0), t.dim(1) * t.dim(2)}, {t.stride(0), 1}); }

  layers::LayerInfo info_;
  std::int64_t D_ = 0, N_ = 0, K_ = 0, H_ = 0;
  layers::RMSNorm<P> norm1_, norm2_;
  layers::DenseGeneral<P> q_, k_, v_, o_;
  layers::MlpBlock<P> mlp_;
  layers::AttentionOp<P> op_;
  RotaryTable rope_;
};

}  // namespace maxtext::bench
