// families/deepseek4/deepseek4.hpp: MaxText models/deepseek4.py DeepSeek4DecoderLayer (decoder_block "deepseek4", DeepSeek-V4)
// with layers/attention_compressed.py CompressedAttention, and mhc.py DeepSeek4HyperHead; configs/models/
// deepseek4-tiny.yml and deepseek4-284b.yml. Read from MaxText e591f30.
//
// Every layer is a DeepSeek generic layer (deepseek.py) whose FFN is a RoutedAndSharedMoE named `mlp`:
//   h   = x + Attn(RMSNorm_pre(x))       (mHC k > 1: mhc_attention with that branch)
//   out = h + MoE(RMSNorm_post(h))       (mHC: mhc_mlp)
// Layer i < first_num_hash_layers routes by the static table tid2eid[token] (moe.hpp hash_routing); the routed
// experts clamp their SwiGLU at mlp_activations_limit. The attention of layer i depends on r = compress_ratios[i]:
//   q   = RMSNorm_noscale(RMSNorm(x wq_a; q_norm) wq_b) per head, RoPE, * head_dim^-0.5     (N heads of hd)
//   kv  = RoPE(RMSNorm(x wkv; kv_norm))    one shared head: the keys and the values
//   r = 0: sliding-window attention; r = 4 (CSA) / r > 4 (HCA): also attention over compressed blocks:
//     block j pools tokens [j r, (j+1) r) (CSA: with the first half of block j-1's features, csa_overlap_pooling) by
//     a per-feature softmax of the gates + position_bias, RMSNorm(kv_norm), RoPE at position j r (backend
//     compress_pool). A query at p sees the complete blocks ((j+1) r <= p + 1): all of them (HCA) or the indexer's
//     top indexer_topk by sum_h relu(q_idx,h . block_idx) (CSA; backend indexer_topk, its own compressor of
//     indexer_head_dim features and q_idx = RMSNorm(x wq_a) q_proj).
//   o   = softmax over [window keys | blocks | sink] of q.k times the values (backend compressed_attention);
//   out = (reverse-RoPE(o) grouped by o_groups: o_a_proj [G, N hd / G, o_lora_rank]) o_b_proj.
// RoPE (embeddings.py DeepSeekV4RotaryEmbedding) rotates the trailing qk_rope_head_dim lanes in interleaved pairs,
// theta compressed_rope_max_timescale when r > 0, else rope_max_timescale; f32 angles pos * theta^(-2i/dim).
// The cache keeps per token the keys, the compressor's (and indexer's) projections, and per block the pooled
// blocks, so that a split prompt and token-by-token decoding give the full forward's outputs (docs/numerics.md).
// After the last layer the k streams collapse through hc_head (DeepSeek4HyperHead) instead of mhc_reduce's sum.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/kv_quant.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/mhc.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// DeepSeekV4RotaryEmbedding's table over `positions`: rot_dims = rope_dim lanes in interleaved pairs, cos / sin of
/// f32(pos) * (1 / theta^(2i / rope_dim)) kept in f32; `reverse` negates the sines (the inverse rotation).
inline RotaryTable deepseek4_rotary_table(double theta, std::int64_t rope_dim, std::int64_t positions, bool reverse) {
  MAXTEXT_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && positions > 0, ConfigError,
                "[DeepSeek4] qk_rope_head_dim must be even and > 0, found ", rope_dim);
  const std::int64_t half = rope_dim / 2;
  RotaryTable t;
  t.rot_dims = rope_dim;
  t.layout = RopeLayout::interleaved;
  t.round_sincos_to_input = false;
  t.cos = Tensor<float, 2>({positions, half});
  t.sin = Tensor<float, 2>({positions, half});
  for (std::int64_t i = 0; i < half; ++i) {
    const float fraction = 2.0f * static_cast<float>(i) / static_cast<float>(rope_dim);
    const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), fraction);
    for (std::int64_t p = 0; p < positions; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      t.cos(p, i) = std::cos(angle);
      t.sin(p, i) = reverse ? -std::sin(angle) : std::sin(angle);
    }
  }
  return t;
}

namespace detail {
/// The forward and reverse tables of one (theta, rope_dim, positions), shared by every layer that uses them (a model
/// has two: the compressed layers' theta and the sliding-window layers'), as shared_rotary_table shares Attention's.
struct Deepseek4RopeTables {
  RotaryTable fwd, rev;
};
inline std::shared_ptr<const Deepseek4RopeTables> deepseek4_shared_tables(double theta, std::int64_t rope_dim,
                                                                           std::int64_t positions) {
  using Key = std::tuple<double, std::int64_t, std::int64_t>;
  static std::mutex mu;
  static std::map<Key, std::weak_ptr<const Deepseek4RopeTables>> cache;
  const Key key{theta, rope_dim, positions};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) {
    if (auto t = it->second.lock()) return t;
  }
  auto t = std::make_shared<Deepseek4RopeTables>();
  t->fwd = deepseek4_rotary_table(theta, rope_dim, positions, false);
  t->rev = deepseek4_rotary_table(theta, rope_dim, positions, true);
  cache[key] = t;
  return t;
}

/// A layer's rotary tables (forward and reverse): the shared host tables and, for device backends, uploaded once.
template <class B>
class Deepseek4Rope {
 public:
  Deepseek4Rope() = default;
  Deepseek4Rope(double theta, std::int64_t rope_dim, std::int64_t positions)
      : host_(deepseek4_shared_tables(theta, rope_dim, positions)), dev_(std::make_shared<Device>()) {}
  std::int64_t rope_dim() const { return host_ ? host_->fwd.rot_dims : 0; }
  std::int64_t positions() const { return host_ ? host_->fwd.max_positions() : 0; }
  const RotaryTable& forward(const B& be) const { return pick(be).fwd; }
  const RotaryTable& reverse(const B& be) const { return pick(be).rev; }

 private:
  using Tables = Deepseek4RopeTables;
  struct Device {
    std::once_flag once;
    Tables t;
  };
  const Tables& pick(const B& be) const {
    if (be.memory()->host_accessible()) return *host_;
    std::call_once(dev_->once, [&] {
      dev_->t = *host_;
      for (RotaryTable* x : {&dev_->t.fwd, &dev_->t.rev}) {
        x->cos = upload(be, x->cos);
        x->sin = upload(be, x->sin);
      }
    });
    return dev_->t;
  }
  std::shared_ptr<const Tables> host_;
  std::shared_ptr<Device> dev_;
};

/// Rotate the trailing `rope` lanes of rows x [M, heads * d] (heads of d lanes) at positions pos [M].
template <class Be, class A>
void rotate_trailing(const Be& be, View<A, 2> x, std::int64_t heads, std::int64_t d, View<const std::int32_t, 1> pos,
                     const RotaryTable& t) {
  const std::int64_t r = t.rot_dims;
  be.rotary(View<A, 3>(x.data() + (d - r), {x.dim(0), heads, r}, {x.stride(0), d, 1}), pos, t);
}

}  // namespace detail

/// One compressor (attention_compressed.py BaseDeepseekCompressor and the pooling of DeepseekV4HCACompressor /
/// csa_overlap_pooling, also the indexer's): kv_proj / gate_proj [D, F], position_bias [r, F], kv_norm [d], with
/// F = d (no overlap, HCA) or 2 d (overlap, CSA and the indexer). It keeps the projections of every token in two cache
/// buffers and each completed block, normalised and rotated, in a third.
template <TensorPolicy P>
class Deepseek4Compressor {
 public:
  using A = typename P::act_t;
  static_assert(std::is_same_v<typename P::cache_t, A>,
                "Deepseek4Compressor keeps its cache in the activation type: a Policy KV-cache type other than act_t is not "
                "supported");
  using B = typename P::backend;
  struct Params {
    typename DenseGeneral<P>::Params kv_proj, gate_proj;
    Tensor<A, 1> position_bias;  ///< [r, F]
    typename RMSNorm<P>::Params kv_norm;
  };

  Deepseek4Compressor() = default;
  Deepseek4Compressor(std::int64_t D, std::int64_t d, std::int64_t ratio, bool overlap, float eps)
      : d_(d), r_(ratio), F_(overlap ? 2 * d : d), overlap_(overlap), kv_({{D}, {F_}, false, Init::normal}),
        gate_({{D}, {F_}, false, Init::normal}), norm_({d, eps}) {}
  std::int64_t ratio() const { return r_; }
  std::int64_t dim() const { return d_; }
  /// The cache buffers: projections kv [F], gate [F] per token, blocks [d] (row j = block j).
  CacheSpec cache_spec() const { return {F_, F_, d_}; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "kv_proj", kv_, p.kv_proj);
    visit_child(v, "gate_proj", gate_, p.gate_proj);
    v.vector("position_bias", p.position_bias, {{r_, F_}, Init::zeros});
    visit_child(v, "kv_norm", norm_, p.kv_norm);
  }

  /// The compressor's three cache buffers, from the index `first` its layer gives it: the projections and the gates
  /// of every token, and the pooled blocks.
  static constexpr std::size_t kProjections = 0, kGates = 1, kBlocks = 2;

  /// Project x [B*T, D] into the kProjections and kGates buffers at each row's cache index, then pool every block
  /// that this step completes into kBlocks. `valid[b]` tokens of row b count.
  void update(const Context<P>& ctx, const Params& p, View<const A, 2> x, CacheFor<P>& cache, std::size_t first,
              const std::vector<std::int64_t>& valid, const RotaryTable& rope) const {
    const auto& st = ctx.step;
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0), Bn = st.batch, T = st.length;
    ScratchScope scope(ctx.scratch);
    View<A, 2> kv = ctx.scratch.template alloc<A, 2>({M, F_});
    View<A, 2> gate = ctx.scratch.template alloc<A, 2>({M, F_});
    kv_.forward(ctx, p.kv_proj, x, kv);
    gate_.forward(ctx, p.gate_proj, x, gate);
    View<A, 3> kv_buf = cache.buffers[first + kProjections].view(), gate_buf = cache.buffers[first + kGates].view();
    View<A, 3> blocks = cache.buffers[first + kBlocks].view();
    std::vector<std::int32_t> j0(static_cast<std::size_t>(Bn)), cnt(j0.size());
    std::int64_t nmax = 0, npad = 0;
    for (std::int64_t b = 0; b < Bn; ++b) {
      const auto ub = static_cast<std::size_t>(b);
      const std::int64_t s0 = st.start[ub];
      put_cache_rows(be, View<const A, 2>(kv).narrow(0, b * T, T), b, s0, kv_buf);
      put_cache_rows(be, View<const A, 2>(gate).narrow(0, b * T, T), b, s0, gate_buf);
      j0[ub] = static_cast<std::int32_t>(s0 / r_);
      cnt[ub] = static_cast<std::int32_t>((s0 + valid[ub]) / r_ - s0 / r_);
      nmax = std::max<std::int64_t>(nmax, cnt[ub]);
      npad = std::max<std::int64_t>(npad, (s0 + T) / r_ - (s0 + valid[ub]) / r_);
    }
    if (npad > 0) zero_pad_blocks(ctx, blocks, valid, npad);
    if (nmax == 0) return;
    View<std::int32_t, 1> j0_d = ctx.scratch.template alloc<std::int32_t, 1>({Bn});
    View<std::int32_t, 1> cnt_d = ctx.scratch.template alloc<std::int32_t, 1>({Bn});
    View<std::int32_t, 1> pos_d = ctx.scratch.template alloc<std::int32_t, 1>({Bn * nmax});
    std::vector<std::int32_t> pos(static_cast<std::size_t>(Bn * nmax));
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t i = 0; i < nmax; ++i) {
        const auto ub = static_cast<std::size_t>(b);
        pos[static_cast<std::size_t>(b * nmax + i)] = i < cnt[ub] ? static_cast<std::int32_t>((j0[ub] + i) * r_) : 0;
      }
    }
    be.copy(j0_d.data(), j0.data(), j0.size() * sizeof(std::int32_t), CopyKind::host_to_device);
    be.copy(cnt_d.data(), cnt.data(), cnt.size() * sizeof(std::int32_t), CopyKind::host_to_device);
    be.copy(pos_d.data(), pos.data(), pos.size() * sizeof(std::int32_t), CopyKind::host_to_device);
    View<A, 3> pooled = ctx.scratch.template alloc<A, 3>({Bn, nmax, d_});
    be.compress_pool(View<const A, 3>(kv_buf), View<const A, 3>(gate_buf),
                     View<const A, 2>(p.position_bias.data(), {r_, F_}), r_, overlap_, View<const std::int32_t, 1>(j0_d),
                     View<const std::int32_t, 1>(cnt_d), pooled);
    View<A, 2> rows(pooled.data(), {Bn * nmax, d_});
    norm_.forward(ctx, p.kv_norm, View<const A, 2>(rows), rows);
    detail::rotate_trailing(be, rows, 1, d_, View<const std::int32_t, 1>(pos_d), rope);
    for (std::int64_t b = 0; b < Bn; ++b) {
      const auto ub = static_cast<std::size_t>(b);
      put_cache_rows(be, View<const A, 2>(rows).narrow(0, b * nmax, cnt[ub]), b, j0[ub], blocks);
    }
    be.synchronize();  // the host vectors above go out of scope
  }

 private:
  /// The block rows that a right-padding query of this step would see ((j+1) r <= its index + 1) but that no valid
  /// token completed: zeros, so that padding rows attend over finite values (their outputs are discarded; a later
  /// step that completes those blocks overwrites them).
  void zero_pad_blocks(const Context<P>& ctx, View<A, 3> blocks, const std::vector<std::int64_t>& valid,
                       std::int64_t npad) const {
    const auto& st = ctx.step;
    ScratchScope scope(ctx.scratch);
    View<A, 2> zeros = ctx.scratch.template alloc<A, 2>({npad, d_});
    const std::vector<A> host(static_cast<std::size_t>(npad * d_), from_float<A>(0.0f));
    ctx.be.copy(zeros.data(), host.data(), host.size() * sizeof(A), CopyKind::host_to_device);
    for (std::int64_t b = 0; b < st.batch; ++b) {
      const std::int64_t s0 = st.start[static_cast<std::size_t>(b)];
      const std::int64_t first = (s0 + valid[static_cast<std::size_t>(b)]) / r_, end = (s0 + st.length) / r_;
      if (end <= first) continue;
      View<A, 2> dst(blocks.data() + b * blocks.stride(0) + first * blocks.stride(1), {end - first, d_},
                     {blocks.stride(1), 1});
      ctx.be.copy(View<const A, 2>(zeros.narrow(0, 0, end - first)), dst);
    }
    ctx.be.synchronize();  // `host` goes out of scope
  }

  std::int64_t d_ = 0, r_ = 1, F_ = 0;
  bool overlap_ = false;
  DenseGeneral<P> kv_, gate_;
  RMSNorm<P> norm_;
};

/// MaxText CompressedAttention (attention_compressed.py) for one compress ratio: x [B*T, D] -> y [B*T, D].
template <TensorPolicy P>
class Deepseek4Attention {
 public:
  using A = typename P::act_t;
  using Compressor = Deepseek4Compressor<P>;
  static_assert(std::is_same_v<typename P::cache_t, A>,
                "Deepseek4Attention keeps its cache in the activation type: a Policy KV-cache type other than act_t is not "
                "supported");
  using W = typename P::weight_t;
  using B = typename P::backend;
  static_assert(BackendCompressedAttention<B>, "DeepSeek-V4 attention needs Backend::compress_pool, indexer_topk "
                                               "and compressed_attention");
  static_assert(BackendHeadMatmul<B>, "DeepSeek-V4's grouped output projection needs Backend::head_matmul");

  struct Indexer {
    typename DenseGeneral<P>::Params q_proj, weights_proj;
    typename Deepseek4Compressor<P>::Params pool;  ///< kv_proj, gate_proj, position_bias, kv_norm
  };
  struct Params {
    typename DenseGeneral<P>::Params wq_a, wq_b, wkv, o_b_proj;
    typename RMSNorm<P>::Params q_norm, kv_norm;
    Tensor<A, 1> sinks;  ///< [N]
    Matrix<W> o_a_proj;  ///< [G * o_lora_rank, N hd / G]: group g is rows [g o_lora_rank, (g+1) o_lora_rank)
    typename Deepseek4Compressor<P>::Params compressor;  ///< hca_compressor / csa_compressor
    Indexer indexer;                                      ///< CSA only
  };

  Deepseek4Attention() = default;
  Deepseek4Attention(const Config& c, std::int64_t ratio)
      : D_(c.emb_dim), N_(c.num_query_heads), hd_(c.head_dim), ql_(c.q_lora_rank), G_(c.o_groups), ol_(c.o_lora_rank),
        r_(ratio), W_(c.sliding_window_size), Hi_(c.indexer_n_heads), di_(c.indexer_head_dim), topk_(c.indexer_topk) {
    const auto eps = static_cast<float>(c.normalization_layer_epsilon);
    MAXTEXT_CHECK(c.num_kv_heads == 1, UnsupportedError, "[DeepSeek4] compressed attention shares one key/value head "
                  "(attention_compressed.py), found num_kv_heads = ", c.num_kv_heads);
    MAXTEXT_CHECK(ql_ > 0, ConfigError, "[DeepSeek4] q_lora_rank must be > 0, found ", ql_);
    MAXTEXT_CHECK(!layers::kv_quant_options(c), UnsupportedError, "[DeepSeek4] quantize_kvcache: a quantised cache of "
                  "the compressed attention (keys, compressed blocks, indexer) is not implemented");
    MAXTEXT_CHECK(G_ > 0 && ol_ > 0 && (N_ * hd_) % G_ == 0, ConfigError, "[DeepSeek4] o_groups (", G_,
                  ") must divide num_query_heads * head_dim (", N_ * hd_, ") and o_lora_rank (", ol_, ") be > 0");
    MAXTEXT_CHECK(c.qk_rope_head_dim > 0 && c.qk_rope_head_dim <= hd_ && c.qk_rope_head_dim % 2 == 0, ConfigError,
                  "[DeepSeek4] qk_rope_head_dim (", c.qk_rope_head_dim, ") must be even and in (0, head_dim = ", hd_, "]");
    MAXTEXT_CHECK(r_ == 0 || r_ >= 4, ConfigError, "[DeepSeek4] compress_ratio must be 0 (disabled) or >= 4, found ", r_);
    wq_a_ = DenseGeneral<P>({{D_}, {ql_}, false, Init::normal});
    wq_b_ = DenseGeneral<P>({{ql_}, {N_, hd_}, false, Init::normal});
    wkv_ = DenseGeneral<P>({{D_}, {1, hd_}, false, Init::normal});
    o_b_ = DenseGeneral<P>({{G_ * ol_}, {D_}, false, Init::normal});
    q_norm_ = RMSNorm<P>({ql_, eps});
    q_up_norm_ = RMSNorm<P>({hd_, eps, false});
    kv_norm_ = RMSNorm<P>({hd_, eps});
    const double theta = r_ > 0 ? c.compressed_rope_max_timescale : c.rope_max_timescale;
    rope_ = detail::Deepseek4Rope<B>(theta, c.qk_rope_head_dim, c.max_target_length);
    if (r_ > 0) comp_ = Deepseek4Compressor<P>(D_, hd_, r_, r_ == 4, eps);
    if (r_ == 4) {
      MAXTEXT_CHECK(Hi_ > 0 && di_ >= c.qk_rope_head_dim && topk_ > 0, ConfigError, "[DeepSeek4] the CSA indexer needs "
                    "indexer_n_heads > 0, indexer_topk > 0 and indexer_head_dim >= qk_rope_head_dim (", c.qk_rope_head_dim,
                    "), found ", Hi_, ", ", topk_, " and ", di_);
      iq_ = DenseGeneral<P>({{ql_}, {Hi_ * di_}, false, Init::normal});
      iw_ = DenseGeneral<P>({{D_}, {Hi_}, false, Init::normal});
      icomp_ = Deepseek4Compressor<P>(D_, di_, r_, true, eps);
    }
  }

  std::int64_t ratio() const { return r_; }
  /// The layer's cache buffers: the keys, then with r > 0 the compressor's three (from kCompressor), with CSA also
  /// the indexer's (from kIndexer); Deepseek4Compressor names the three.
  static constexpr std::size_t kKeys = 0, kCompressor = 1, kIndexer = 4;
  /// keys [hd]; with r > 0 the compressor's [F, F, hd]; CSA also the indexer's [2 di, 2 di, di].
  /// The first cache row a pass starting at token s0 writes: the compressors pool blocks into rows s0 / ratio on.
  std::int64_t cache_write_floor(std::int64_t s0) const { return r_ > 0 ? s0 / r_ : s0; }
  CacheSpec cache_spec() const {
    CacheSpec s{hd_};
    if (r_ > 0) {
      for (auto w : comp_.cache_spec()) s.push_back(w);
    }
    if (r_ == 4) {
      for (auto w : icomp_.cache_spec()) s.push_back(w);
    }
    return s;
  }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "wq_a", wq_a_, p.wq_a);
    visit_child(v, "q_norm", q_norm_, p.q_norm);
    visit_child(v, "wq_b", wq_b_, p.wq_b);
    visit_child(v, "wkv", wkv_, p.wkv);
    visit_child(v, "kv_norm", kv_norm_, p.kv_norm);
    v.vector("sinks", p.sinks, {{N_}, Init::zeros});
    {
      Scope<V> s(v, "o_a_proj");
      v.matrix("kernel", p.o_a_proj, KernelSpec{{N_ * hd_ / G_}, {ol_}, Init::normal, 1.0, 1.0, {G_}});
    }
    visit_child(v, "o_b_proj", o_b_, p.o_b_proj);
    if (r_ > 4) visit_child(v, "hca_compressor", comp_, p.compressor);
    if (r_ == 4) {
      Scope<V> s(v, "csa_compressor");
      comp_.visit(v, p.compressor);
      Scope<V> i(v, "indexer");
      visit_child(v, "q_proj", iq_, p.indexer.q_proj);
      icomp_.visit(v, p.indexer.pool);
      visit_child(v, "weights_proj", iw_, p.indexer.weights_proj);
    }
  }

  /// x [B*T, D] -> y [B*T, D] (y must not alias x), continuing each row's cache.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, CacheFor<P>& cache, View<A, 2> y) const {
    const auto& st = ctx.step;
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0), Bn = st.batch, T = st.length, S = cache.buffers.empty() ? 0 : cache.buffers[kKeys].dim(1);
    MAXTEXT_CHECK(x.dim(1) == D_ && y.dim(0) == M && y.dim(1) == D_ && M == st.tokens(), ShapeError,
                  "[DeepSeek4Attention] ", M, " rows of ", x.dim(1), " features for a step of ", Bn, " x ", T,
                  " tokens of emb_dim ", D_);
    const CacheSpec spec = cache_spec();
    MAXTEXT_CHECK(cache.buffers.size() == spec.size(), ShapeError, "[DeepSeek4Attention] the cache was made for another "
                  "layer: ", cache.buffers.size(), " buffers, expected ", spec.size(), " for compress_ratio ", r_);
    for (std::size_t i = 0; i < spec.size(); ++i) {
      MAXTEXT_CHECK(cache.buffers[i].dim(0) == Bn && cache.buffers[i].dim(2) == spec[i], ShapeError,
                    "[DeepSeek4Attention] cache buffer ", i, " is [", cache.buffers[i].dim(0), ", ", cache.buffers[i].dim(2),
                    "] per token, expected [", Bn, ", ", spec[i], "]");
    }
    MAXTEXT_CHECK(st.segment_ids.empty(), UnsupportedError, "[DeepSeek4Attention] segment ids (packed sequences) are not "
                  "supported by compressed attention; right padding goes through row lengths");
    check_positions(ctx, S);
    std::vector<std::int64_t> valid(static_cast<std::size_t>(Bn));
    for (std::int64_t b = 0; b < Bn; ++b) {
      valid[static_cast<std::size_t>(b)] = st.valid.empty() ? T : st.valid[static_cast<std::size_t>(b)];
    }
    ScratchScope scope(ctx.scratch);
    const RotaryTable& fwd = rope_.forward(be);
    // 1. queries: wq_a -> q_norm -> wq_b -> unweighted RMSNorm per head -> RoPE -> * hd^-0.5
    View<A, 2> ql = ctx.scratch.template alloc<A, 2>({M, ql_});
    wq_a_.forward(ctx, p.wq_a, x, ql);
    q_norm_.forward(ctx, p.q_norm, View<const A, 2>(ql), ql);
    View<A, 2> q = ctx.scratch.template alloc<A, 2>({M, N_ * hd_});
    wq_b_.forward(ctx, p.wq_b, View<const A, 2>(ql), q);
    View<A, 2> qh(q.data(), {M * N_, hd_});
    q_up_norm_.forward(ctx, {}, View<const A, 2>(qh), qh);
    detail::rotate_trailing(be, q, N_, hd_, st.positions, fwd);
    be.scale(q, static_cast<float>(std::pow(static_cast<double>(hd_), -0.5)));
    // 2. the shared key/value head, into the cache
    View<A, 2> kv = ctx.scratch.template alloc<A, 2>({M, hd_});
    wkv_.forward(ctx, p.wkv, x, kv);
    kv_norm_.forward(ctx, p.kv_norm, View<const A, 2>(kv), kv);
    detail::rotate_trailing(be, kv, 1, hd_, st.positions, fwd);
    for (std::int64_t b = 0; b < Bn; ++b) {
      put_cache_rows(be, View<const A, 2>(kv).narrow(0, b * T, T), b, st.start[static_cast<std::size_t>(b)],
                     cache.buffers[kKeys].view());
    }
    // 3. the compressed blocks, and the indexer's choice of them (CSA)
    View<std::int32_t, 2> sel;
    if (r_ > 0) comp_.update(ctx, p.compressor, x, cache, kCompressor, valid, fwd);
    if (r_ == 4) {
      icomp_.update(ctx, p.indexer.pool, x, cache, kIndexer, valid, fwd);
      View<A, 2> qi = ctx.scratch.template alloc<A, 2>({M, Hi_ * di_});
      iq_.forward(ctx, p.indexer.q_proj, View<const A, 2>(ql), qi);
      detail::rotate_trailing(be, qi, Hi_, di_, st.positions, fwd);
      View<A, 2> wts = ctx.scratch.template alloc<A, 2>({M, Hi_});
      iw_.forward(ctx, p.indexer.weights_proj, x, wts);
      sel = ctx.scratch.template alloc<std::int32_t, 2>({M, topk_});
      select_blocks(ctx, View<const A, 2>(qi), View<const A, 2>(wts), cache.buffers[kIndexer + Compressor::kBlocks].cview(), sel);
    }
    // 4. attention over the window and the blocks, with sinks
    View<A, 2> o = ctx.scratch.template alloc<A, 2>({M, N_ * hd_});
    const View<const A, 3> keys = cache.buffers[kKeys].cview();
    View<const A, 3> blocks = r_ > 0 ? cache.buffers[kCompressor + Compressor::kBlocks].cview() : keys;
    const std::int64_t nb = r_ > 0 ? S / r_ : 0;  // complete blocks fit in the cache
    blocks = View<const A, 3>(blocks.data(), {Bn, nb, hd_}, {blocks.stride(0), blocks.stride(1), 1});
    AttentionOptions opt;
    opt.float32_qk_product = float32_qk_;
    opt.float32_logits = float32_logits_;
    be.compressed_attention(View<const A, 4>(q.data(), {Bn, T, N_, hd_}), keys, blocks, st.q_start, W_, r_,
                            View<const std::int32_t, 2>(sel), p.sinks.cview(), opt,
                            View<A, 4>(o.data(), {Bn, T, N_, hd_}));
    // 5. undo the values' rotation, then the grouped low-rank output projection
    detail::rotate_trailing(be, o, N_, hd_, st.positions, rope_.reverse(be));
    View<A, 2> oa = ctx.scratch.template alloc<A, 2>({M, G_ * ol_});
    const std::int64_t in_g = N_ * hd_ / G_;
    be.head_matmul(View<const A, 3>(o.data(), {M, G_, in_g}), p.o_a_proj, ol_, 0, false,
                   View<A, 3>(oa.data(), {M, G_, ol_}));
    o_b_.forward(ctx, p.o_b_proj, View<const A, 2>(oa), y);
  }

  /// The indexer's top-k blocks of every token into sel [M, indexer_topk] (backend indexer_topk). Its f32 scores
  /// [tokens, blocks] are scratch: a long prompt is scored at most score_chunk_ scores at a time, a run of one row's
  /// tokens per call, so that scratch stays bounded whatever the context.
  void select_blocks(const Context<P>& ctx, View<const A, 2> qi, View<const A, 2> wts, View<const A, 3> iblocks,
                     View<std::int32_t, 2> sel) const {
    const auto& st = ctx.step;
    const auto& be = ctx.be;
    const std::int64_t M = qi.dim(0), Bn = st.batch, T = st.length, nb = iblocks.dim(1) / r_;
    const float score_scale = static_cast<float>(std::pow(static_cast<double>(di_), -0.5));
    const float weight_scale = static_cast<float>(std::pow(static_cast<double>(Hi_), -0.5));
    const auto queries = [&](std::int64_t m0, std::int64_t n) {
      return View<const A, 3>(qi.data() + m0 * qi.stride(0), {n, Hi_, di_}, {qi.stride(0), di_, 1});
    };
    const auto blocks = [&](std::int64_t b0, std::int64_t nrows) {
      return View<const A, 3>(iblocks.data() + b0 * iblocks.stride(0), {nrows, nb, di_},
                              {iblocks.stride(0), iblocks.stride(1), 1});
    };
    ScratchScope scope(ctx.scratch);
    if (M * std::max<std::int64_t>(nb, 1) <= score_chunk_) {
      View<float, 2> scores = ctx.scratch.template alloc<float, 2>({M, nb});
      be.indexer_topk(queries(0, M), wts, blocks(0, Bn), st.q_start, r_, score_scale, weight_scale, scores, sel);
      return;
    }
    const std::int64_t rows = std::max<std::int64_t>(1, score_chunk_ / nb);
    View<float, 2> scores = ctx.scratch.template alloc<float, 2>({std::min(rows, T), nb});
    View<std::int32_t, 1> start_d = ctx.scratch.template alloc<std::int32_t, 1>({1});
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t0 = 0; t0 < T; t0 += rows) {
        const std::int64_t n = std::min(rows, T - t0), m0 = b * T + t0;
        const std::int32_t start = static_cast<std::int32_t>(st.start[static_cast<std::size_t>(b)] + t0);
        be.copy(start_d.data(), &start, sizeof(start), CopyKind::host_to_device);
        be.indexer_topk(queries(m0, n), View<const A, 2>(wts.data() + m0 * wts.stride(0), {n, Hi_}, {wts.stride(0), 1}),
                        blocks(b, 1), View<const std::int32_t, 1>(start_d), r_, score_scale, weight_scale,
                        scores.narrow(0, 0, n), sel.narrow(0, m0, n));
        be.synchronize();  // `start` is reused by the next chunk
      }
    }
  }
  /// At most this many f32 scores per indexer_topk call (default 2^22, 16 MiB); tests lower it.
  void set_score_chunk(std::int64_t n) { score_chunk_ = std::max<std::int64_t>(n, 1); }

  void set_f32_flags(bool qk, bool logits) {
    float32_qk_ = qk;
    float32_logits_ = logits;
  }

 private:
  /// MaxText ropes the blocks at the position of their first token and masks by positions; here both use cache
  /// indices, so the positions must be the default ones (each row's cache index) and inside the rotary table.
  void check_positions(const Context<P>& ctx, std::int64_t S) const {
    const auto& st = ctx.step;
    std::vector<std::int32_t> buf;
    const std::vector<std::int32_t>* pos = &ctx.host_positions(buf);
    for (std::int64_t b = 0; b < st.batch; ++b) {
      for (std::int64_t t = 0; t < st.length; ++t) {
        const std::int64_t want = st.start[static_cast<std::size_t>(b)] + t;
        const std::int32_t got = (*pos)[static_cast<std::size_t>(b * st.length + t)];
        MAXTEXT_CHECK(got == want, UnsupportedError, "[DeepSeek4Attention] token [", b, ",", t, "] has position ", got,
                      " but cache index ", want, ": compressed attention places its blocks by cache index, so positions "
                      "other than the default ones are not supported");
      }
    }
    MAXTEXT_CHECK(S <= rope_.positions(), ArgumentError, "[DeepSeek4Attention] a cache of ", S, " tokens is longer than "
                  "the rotary table (max_target_length ", rope_.positions(), ")");
  }

  std::int64_t D_ = 0, N_ = 0, hd_ = 0, ql_ = 0, G_ = 1, ol_ = 0, r_ = 0, W_ = 0, Hi_ = 0, di_ = 0, topk_ = 0;
  bool float32_qk_ = false, float32_logits_ = false;
  std::int64_t score_chunk_ = std::int64_t{1} << 22;
  DenseGeneral<P> wq_a_, wq_b_, wkv_, o_b_, iq_, iw_;
  RMSNorm<P> q_norm_, q_up_norm_, kv_norm_;
  detail::Deepseek4Rope<B> rope_;
  Deepseek4Compressor<P> comp_, icomp_;
};

/// mhc.py DeepSeek4HyperHead (`decoder.hc_head`): the k streams [M, k D] to [M, D] after the last layer,
///   n = flat * rsqrt(mean(flat^2) + 1e-6); pre = sigmoid((n hc_fn) * hc_scale + hc_base) + 1e-6; y = sum_s pre_s x_s.
/// The mixing weights are formed in f32 on the host (k per token).
template <TensorPolicy P>
class Deepseek4HyperHead {
 public:
  using A = typename P::act_t;
  using W = typename P::weight_t;
  static constexpr const char* name = "hc_head";
  struct Params {
    Matrix<W> hc_fn;          ///< [k D] -> [k]
    Tensor<float, 1> hc_base;   ///< [k]
    Tensor<float, 1> hc_scale;  ///< [1]
  };
  Deepseek4HyperHead() = default;
  explicit Deepseek4HyperHead(const Config& c)
      : k_(c.mhc_expansion_rate), D_(c.emb_dim), norm_({c.mhc_expansion_rate * c.emb_dim, 1e-6f, false}) {}

  template <class V>
  void visit(V& v, Params& p) const {
    v.matrix("hc_fn", p.hc_fn, KernelSpec{{k_ * D_}, {k_}, Init::normal, 1.0});
    v.vector("hc_base", p.hc_base, {{k_}, Init::zeros});
    v.vector("hc_scale", p.hc_scale, {{1}, Init::constant, 1.0, 0.01});
  }

  /// x [M, k D] -> y [M, D].
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y) const {
    ScratchScope scope(ctx.scratch);
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0);
    View<A, 2> n = ctx.scratch.template alloc<A, 2>({M, k_ * D_});
    norm_.forward(ctx, {}, x, n);
    View<float, 2> mix = ctx.scratch.template alloc<float, 2>({M, k_});
    be.matmul(View<const A, 2>(n), p.hc_fn, mix);
    std::vector<float> h(static_cast<std::size_t>(M * k_)), base(static_cast<std::size_t>(k_)), scale(1);
    be.copy(h.data(), mix.data(), h.size() * sizeof(float), CopyKind::device_to_host);
    be.copy(base.data(), p.hc_base.data(), base.size() * sizeof(float), CopyKind::device_to_host);
    be.copy(scale.data(), p.hc_scale.data(), sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    std::vector<A> pre(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      const float z = h[i] * scale[0] + base[i % static_cast<std::size_t>(k_)];
      pre[i] = from_float<A>(1.0f / (1.0f + std::exp(-z)) + 1e-6f);
    }
    View<A, 2> pre_d = ctx.scratch.template alloc<A, 2>({M, k_});
    be.copy(pre_d.data(), pre.data(), pre.size() * sizeof(A), CopyKind::host_to_device);
    be.stream_sum(x, View<const A, 2>(pre_d), y);
    be.synchronize();  // `pre` goes out of scope
  }

 private:
  std::int64_t k_ = 1, D_ = 0;
  RMSNorm<P> norm_;
};

/// MaxText DeepSeek4DecoderLayer (decoder_block "deepseek4").
template <TensorPolicy P>
class DeepSeek4DecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "deepseek4";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  static constexpr bool supports_mhc = true;
  /// The decoder collapses the k streams with hc_head (models::Transformer).
  using StreamHead = Deepseek4HyperHead<P>;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_layer_norm, post_self_attention_layer_norm;
    typename Deepseek4Attention<P>::Params self_attention;
    typename RoutedAndSharedMoE<P>::Params mlp;
    typename ManifoldConstrainedHyperConnections<P>::Params mhc_attention, mhc_mlp;  ///< k > 1 only
  };

  DeepSeek4DecoderLayer() = default;
  DeepSeek4DecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, ratio_of(c, info_.index)),
        moe_(c, MoeFamily::deepseek, info_.index < c.first_num_hash_layers),
        streams_(c.mhc_expansion_rate) {
    attn_.set_f32_flags(c.float32_qk_product, c.float32_logits);
    if (streams_ > 1) {
      mhc_attn_ = ManifoldConstrainedHyperConnections<P>(c, c.emb_dim);
      mhc_mlp_ = ManifoldConstrainedHyperConnections<P>(c, c.emb_dim);
    }
  }
  /// compress_ratios[layer] (checked by Config::validate to list every layer).
  static std::int64_t ratio_of(const Config& c, std::int64_t layer) {
    const std::vector<std::int64_t> r = c.compress_ratios();
    MAXTEXT_CHECK(layer >= 0 && layer < static_cast<std::int64_t>(r.size()), ConfigError, "[DeepSeek4] compress_ratios ",
                  r, " has no entry for layer ", layer, " (num_decoder_layers ", c.num_decoder_layers, ")");
    return r[static_cast<std::size_t>(layer)];
  }

  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  std::int64_t cache_write_floor(std::int64_t s0) const { return attn_.cache_write_floor(s0); }
  const LayerInfo& info() const { return info_; }
  const Deepseek4Attention<P>& attention() const { return attn_; }
  /// The attention's indexer scores at most n tokens x blocks per call (Deepseek4Attention::set_score_chunk).
  void set_indexer_score_chunk(std::int64_t n) { attn_.set_score_chunk(n); }
  const RoutedAndSharedMoE<P>& moe() const { return moe_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_layer_norm", pre_, p.pre_self_attention_layer_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "post_self_attention_layer_norm", post_, p.post_self_attention_layer_norm);
    visit_child(v, "mlp", moe_, p.mlp);
    if (streams_ > 1) {
      visit_child(v, "mhc_attention", mhc_attn_, p.mhc_attention);
      visit_child(v, "mhc_mlp", mhc_mlp_, p.mhc_mlp);
    }
  }

  /// x [B*T, k D] in place. Captures the attention branch (`<layer>.self_attention`), the MoE branch
  /// (`<layer>.mlp`, with its routing metrics) and the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    const auto attention = [&](View<const A, 2> in, View<A, 2> a) {
      ScratchScope inner(ctx.scratch);
      View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({in.dim(0), in.dim(1)});
      pre_.forward(ctx, p.pre_self_attention_layer_norm, in, lnx);
      attn_.forward(ctx, p.self_attention, View<const A, 2>(lnx), cache, a);
      ctx.sow(info_.attention, View<const A, 2>(a));
    };
    const auto ffn = [&](View<const A, 2> in, View<A, 2> f) {
      ScratchScope inner(ctx.scratch);
      View<A, 2> hn = ctx.scratch.template alloc<A, 2>({in.dim(0), in.dim(1)});
      post_.forward(ctx, p.post_self_attention_layer_norm, in, hn);
      moe_.forward(ctx, p.mlp, View<const A, 2>(hn), f, mt);
      if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
      ctx.sow(info_.mlp, View<const A, 2>(f));
    };
    if (streams_ > 1) {
      View<A, 2> h = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
      mhc_attn_.forward(ctx, p.mhc_attention, View<const A, 2>(x), attention, h);
      mhc_mlp_.forward(ctx, p.mhc_mlp, View<const A, 2>(h), ffn, x);
    } else {
      View<A, 2> a = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
      attention(View<const A, 2>(x), a);
      ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);
      ffn(View<const A, 2>(x), a);
      ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);
    }
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  RMSNorm<P> pre_, post_;
  Deepseek4Attention<P> attn_;
  RoutedAndSharedMoE<P> moe_;
  std::int64_t streams_ = 1;
  ManifoldConstrainedHyperConnections<P> mhc_attn_, mhc_mlp_;
};

}  // namespace maxtext::layers
