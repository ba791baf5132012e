// layers/attention_mla.hpp: MaxText attention_mla.py MLA (DeepSeek Multi-head Latent Attention); spec mla.md,
// rope.md (YaRN), attention.md §1-2 and §5.
//
// Two KV-cache forms with the same outputs (up to f32 summation order):
//  * expanded (`mla_naive_kvcache: true`, MaxText's default): per-head keys [N, Hn+Hr] and values [N, Hv] are
//    cached, attention is the ordinary AttentionOp with N kv heads;
//  * latent (`mla_naive_kvcache: false`): only the normalised latent c_kv [r_kv] and the shared rotary key
//    k_pe [Hr] are cached (r_kv + Hr values per token and layer). wkv_b is absorbed into the query and the output:
//    per head n, q_abs = q_nope . Wk_n^T-block (so q_abs . c_kv = q_nope . k_nope), attention runs with one kv head
//    of width r_kv + Hr whose value is the latent itself, and the context is projected by Wv_n afterwards.
//    MaxText's MlaKVCache caches the same two tensors (and re-expands them through wkv_b each step).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/attention_op.hpp"
#include "maxtext/layers/kv_quant.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/rotary.hpp"

namespace maxtext::layers {

/// The rotary embedding MLA applies to its Hr rope lanes: MaxText's selection (rope.md §Selection) with
/// d = qk_rope_head_dim; YaRN for every DeepSeek yml (rope_type: yarn).
inline RopeSpec mla_rope_spec(const Config& c) {
  RopeArgs a;
  a.dims = c.qk_rope_head_dim;
  return select_rope(c, a);
}

/// MLA's softmax scale: (Hn + Hr)^-1/2, times ms^2 with ms = 0.1 * mscale * ln(rope_factor) + 1 when
/// max_position_embeddings > original_max_position_embeddings (computed in double, as Python does).
inline double mla_softmax_scale(const Config& c) {
  double s = std::pow(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim), -0.5);
  if (c.max_position_embeddings > c.original_max_position_embeddings) {
    const double ms = 0.1 * c.mscale * std::log(c.rope_factor) + 1.0;
    s = s * ms * ms;
  }
  return s;
}

/// Multi-head Latent Attention. Parameters (no biases; init nd_dense_init(1, fan_in, normal)):
/// `query/kernel [D,N,Hq]` (q_lora_rank 0) or `wq_a/kernel [D,r_q]`, `q_norm/scale [r_q]`, `wq_b/kernel [r_q,N,Hq]`;
/// `wkv_a/kernel [D,r_kv+Hr]`, `kv_norm/scale [r_kv]`, `wkv_b/kernel [r_kv,N,Hn+Hv]`, `out/kernel [N,Hv,D]`.
template <TensorPolicy P>
class MLA {
 public:
  using A = typename P::act_t;
  using B = typename P::backend;
  static_assert(std::is_same_v<typename P::cache_t, A>,
                "MLA keeps its latents in the activation type: a Policy KV-cache type other than act_t is not supported");
  struct Params {
    typename DenseGeneral<P>::Params query, wq_a, wq_b, wkv_a, wkv_b, out;
    typename RMSNorm<P>::Params q_norm, kv_norm;
  };
  enum class CacheForm : std::uint8_t { expanded, latent };

  MLA() = default;
  explicit MLA(const Config& c)
      : D_(c.emb_dim),
        N_(c.num_query_heads),
        rq_(c.q_lora_rank),
        rkv_(c.kv_lora_rank),
        Hn_(c.qk_nope_head_dim),
        Hr_(c.qk_rope_head_dim),
        Hv_(c.v_head_dim),
        form_(c.mla_naive_kvcache ? CacheForm::expanded : CacheForm::latent),
        softmax_scale_(mla_softmax_scale(c)) {
    MAXTEXT_CHECK(c.attention_type == "mla", ConfigError, "[MLA] attention_type must be \"mla\", found \"",
                  c.attention_type, "\"");
    MAXTEXT_CHECK(rkv_ > 0 && Hn_ > 0 && Hr_ > 0 && Hv_ > 0, ConfigError,
                  "[MLA] kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be > 0, found ", rkv_,
                  ", ", Hn_, ", ", Hr_, ", ", Hv_);
    MAXTEXT_CHECK(Hr_ % 2 == 0, ConfigError, "[MLA] qk_rope_head_dim must be even, found ", Hr_);
    MAXTEXT_CHECK(rq_ >= 0, ConfigError, "[MLA] q_lora_rank must be >= 0, found ", rq_);
    MAXTEXT_CHECK(c.num_query_heads == c.num_kv_heads, ConfigError, "[MLA] num_query_heads (", c.num_query_heads,
                  ") must equal num_kv_heads (", c.num_kv_heads, ")");
    MAXTEXT_CHECK(!c.fused_qkv, ConfigError, "[MLA] fused_qkv is not supported by MLA");
    MAXTEXT_CHECK(!kv_quant_options(c), UnsupportedError, "[MLA] quantize_kvcache: a quantised MLA cache (latents or "
                  "expanded keys) is not implemented; the quantised cache covers the other attention layers");
    const std::int64_t Hq = Hn_ + Hr_;
    const Init init = Init::normal;  // nd_dense_init(1.0, "fan_in", "normal"), no query scaling at init
    if (rq_ == 0) {
      query_ = DenseGeneral<P>({{D_}, {N_, Hq}, false, init});
    } else {
      wq_a_ = DenseGeneral<P>({{D_}, {rq_}, false, init});
      q_norm_ = RMSNorm<P>({rq_, static_cast<float>(c.normalization_layer_epsilon)});
      wq_b_ = DenseGeneral<P>({{rq_}, {N_, Hq}, false, init});
    }
    wkv_a_ = DenseGeneral<P>({{D_}, {rkv_ + Hr_}, false, init});
    kv_norm_ = RMSNorm<P>({rkv_, static_cast<float>(c.normalization_layer_epsilon)});
    wkv_b_ = DenseGeneral<P>({{rkv_}, {N_, Hn_ + Hv_}, false, init});
    out_ = DenseGeneral<P>({{N_, Hv_}, {D_}, false, init});
    opt_.soft_cap = static_cast<float>(c.attn_logits_soft_cap);  // MLA passes no fp32 flags: both stay off
    op_ = AttentionOp<P>({N_, N_, Hq, Hv_, true, 0, 0, opt_, std::nullopt});

    const RopeSpec rs = mla_rope_spec(c);
    positions_ = rope_table_positions(rs, c);
    table_ = shared_rotary_table(rs, positions_);
    device_ = std::make_shared<DeviceTable>();
  }

  CacheForm cache_form() const { return form_; }
  double softmax_scale() const { return softmax_scale_; }
  const RotaryTable& host_rotary_table() const { return *table_; }
  /// Expanded: keys [N*(Hn+Hr)] and values [N*Hv] per token; latent: [r_kv + Hr] per token.
  CacheSpec cache_spec() const {
    if (form_ == CacheForm::expanded) return op_.cache_spec();
    return {rkv_ + Hr_};
  }

  template <class V>
  void visit(V& v, Params& p) const {
    if (rq_ == 0) {
      visit_child(v, "query", query_, p.query);
    } else {
      visit_child(v, "wq_a", wq_a_, p.wq_a);
      visit_child(v, "q_norm", q_norm_, p.q_norm);
      visit_child(v, "wq_b", wq_b_, p.wq_b);
    }
    visit_child(v, "wkv_a", wkv_a_, p.wkv_a);
    visit_child(v, "kv_norm", kv_norm_, p.kv_norm);
    visit_child(v, "wkv_b", wkv_b_, p.wkv_b);
    visit_child(v, "out", out_, p.out);
  }

  /// x [B*T, D] (the normalised layer input, used for both q and kv) -> y [B*T, D] (y must not alias x).
  /// Writes this step's keys into `cache`, then attends over everything cached (causal, segment ids).
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, CacheFor<P>& cache, View<A, 2> y) const {
    static_assert(BackendHeadMatmul<B>, "MLA's latent cache form needs Backend::head_matmul");
    ScratchScope scope(ctx.scratch);
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0), Hq = Hn_ + Hr_, W = rkv_ + Hr_;
    check_positions(ctx);
    const RotaryTable& rt = device_table(be);

    // Query: [wq_a -> q_norm ->] wq_b (or query), YaRN on the rope lanes, times softmax_scale (in dtype).
    View<A, 2> q = ctx.scratch.template alloc<A, 2>({M, N_ * Hq});
    if (rq_ == 0) {
      query_.forward(ctx, p.query, x, q);
    } else {
      View<A, 2> cq = ctx.scratch.template alloc<A, 2>({M, rq_});
      wq_a_.forward(ctx, p.wq_a, x, cq);
      q_norm_.forward(ctx, p.q_norm, cq, cq);
      wq_b_.forward(ctx, p.wq_b, View<const A, 2>(cq), q);
    }
    be.rotary(View<A, 3>(q.data() + Hn_, {M, N_, Hr_}, {N_ * Hq, Hq, 1}), ctx.step.positions, rt);
    be.scale(q, static_cast<float>(softmax_scale_));

    // Key/value path: a = x wkv_a = [latent r_kv | rope key Hr]; kv_norm on the latent, YaRN on the rope key (both
    // in place, so `a` becomes exactly what the latent cache stores).
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, W});
    wkv_a_.forward(ctx, p.wkv_a, x, a);
    View<A, 2> ckv = a.narrow(1, 0, rkv_);
    kv_norm_.forward(ctx, p.kv_norm, ckv, ckv);
    be.rotary(View<A, 3>(a.data() + rkv_, {M, 1, Hr_}, {W, Hr_, 1}), ctx.step.positions, rt);

    View<A, 3> o = ctx.scratch.template alloc<A, 3>({M, N_, Hv_});
    if (form_ == CacheForm::expanded) {
      const std::int64_t KV = Hn_ + Hv_;
      View<A, 2> kv = ctx.scratch.template alloc<A, 2>({M, N_ * KV});
      wkv_b_.forward(ctx, p.wkv_b, View<const A, 2>(ckv), kv);
      View<A, 3> key = ctx.scratch.template alloc<A, 3>({M, N_, Hq});
      be.copy(View<const A, 3>(kv.data(), {M, N_, Hn_}, {N_ * KV, KV, 1}), key.narrow(2, 0, Hn_));
      be.copy(View<const A, 3>(a.data() + rkv_, {M, N_, Hr_}, {W, 0, 1}), key.narrow(2, Hn_, Hr_));  // shared k_pe
      View<const A, 3> v(kv.data() + Hn_, {M, N_, Hv_}, {N_ * KV, KV, 1});
      op_.forward(ctx, View<const A, 3>(q.data(), {M, N_, Hq}), View<const A, 3>(key), v, cache, View<const A, 1>(), o);
    } else {
      write_latent(ctx, View<const A, 2>(a), cache);
      // q' = [q_nope absorbed through wkv_b's key block (r_kv) | q_pe (Hr)] per head.
      View<A, 3> qa = ctx.scratch.template alloc<A, 3>({M, N_, W});
      be.head_matmul(View<const A, 3>(q.data(), {M, N_, Hn_}, {N_ * Hq, Hq, 1}), p.wkv_b.kernel, Hn_ + Hv_, 0, true,
                     qa.narrow(2, 0, rkv_));
      be.copy(View<const A, 3>(q.data() + Hn_, {M, N_, Hr_}, {N_ * Hq, Hq, 1}), qa.narrow(2, rkv_, Hr_));
      View<A, 3> lat = ctx.scratch.template alloc<A, 3>({M, N_, rkv_});
      attend_latent(ctx, View<const A, 3>(qa), cache, lat);
      be.head_matmul(View<const A, 3>(lat), p.wkv_b.kernel, Hn_ + Hv_, Hn_, false, o);
    }
    // Split by heads (models/parallel.hpp): the latent path (wkv_a, kv_norm, the latent cache) is whole on every rank,
    // each rank's heads read it, and the output projection's partial sums add up over the ranks in f32.
    out_.forward_reduced(ctx, p.out, View<const A, 2>(o.data(), {M, N_ * Hv_}), y, "out");
  }

 private:
  /// The rotary table in backend memory (uploaded once for non-host backends).
  struct DeviceTable {
    std::once_flag once;
    RotaryTable table;
  };
  const RotaryTable& device_table(const B& be) const {
    if (be.memory()->host_accessible()) return *table_;
    std::call_once(device_->once, [&] {
      device_->table = *table_;
      device_->table.cos = upload(be, table_->cos);
      device_->table.sin = upload(be, table_->sin);
    });
    return device_->table;
  }
  /// Positions index the rotary table (max_target_length entries, at most max_position_embeddings for YaRN); a
  /// position outside it is an error.
  void check_positions(const Context<P>& ctx) const {
    const auto& st = ctx.step;
    if (st.positions.empty()) return;
    std::vector<std::int32_t> buf;
    for (const std::int32_t p : ctx.host_positions(buf)) {
      MAXTEXT_CHECK(p >= 0 && p < positions_, ArgumentError, "[MLA] position ", p,
                    " is outside the rotary table [0, ", positions_, ") (max_target_length / max_position_embeddings)");
    }
  }
  /// Append rows [B*T, r_kv + Hr] to the latent cache at each row's start index.
  void write_latent(const Context<P>& ctx, View<const A, 2> a, CacheFor<P>& cache) const {
    const auto& st = ctx.step;
    View<A, 3> buf = cache.buffers[0].view();
    for (std::int64_t b = 0; b < st.batch; ++b) {
      const std::int64_t s0 = st.start[static_cast<std::size_t>(b)];
      View<A, 2> dst(buf[b].narrow(0, s0, st.length).data(), {st.length, a.dim(1)}, {buf.stride(1), 1});  // no host deref
      ctx.be.copy(a.narrow(0, b * st.length, st.length), dst);
    }
  }
  /// Attention of q' [B*T, N, r_kv+Hr] over the latent cache: one kv head whose key is [c_kv | k_pe] and whose
  /// value is c_kv (the first r_kv lanes of the same buffer). Out: [B*T, N, r_kv].
  void attend_latent(const Context<P>& ctx, View<const A, 3> qa, const CacheFor<P>& cache, View<A, 3> out) const {
    const auto& st = ctx.step;
    AttentionMask mask;
    mask.q_start = st.q_start;
    mask.kv_len = st.kv_len;
    mask.q_segment = st.segment_ids;
    mask.kv_segment = st.kv_segment_ids;
    mask.causal = true;
    const View<const A, 3> buf = cache.buffers[0].cview();
    const std::int64_t W = buf.dim(2);
    View<const A, 4> k(buf.data(), {buf.dim(0), buf.dim(1), 1, W}, {buf.stride(0), buf.stride(1), W, 1});
    View<const A, 4> v(buf.data(), {buf.dim(0), buf.dim(1), 1, rkv_}, {buf.stride(0), buf.stride(1), W, 1});
    ctx.be.attention(as_batched(qa, st.batch, st.length), k, v, mask, opt_, View<const A, 1>(),
                     as_batched(out, st.batch, st.length));
  }

  std::int64_t D_ = 0, N_ = 0, rq_ = 0, rkv_ = 0, Hn_ = 0, Hr_ = 0, Hv_ = 0;
  CacheForm form_ = CacheForm::expanded;
  double softmax_scale_ = 1.0;
  std::int64_t positions_ = 0;
  AttentionOptions opt_;
  DenseGeneral<P> query_, wq_a_, wq_b_, wkv_a_, wkv_b_, out_;
  RMSNorm<P> q_norm_, kv_norm_;
  AttentionOp<P> op_;
  std::shared_ptr<const RotaryTable> table_;
  std::shared_ptr<DeviceTable> device_;
};

}  // namespace maxtext::layers
