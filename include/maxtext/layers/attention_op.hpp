// layers/attention_op.hpp: MaxText attention_op.py AttentionOp on a KV cache; spec attention.md §1, §2, §5.
// Every call writes the step's keys/values into the cache at each row's indices, then attends each query over the
// cache with the causal / segment / window mask evaluated on cache indices. Prefill, autoregressive steps and a plain
// full-sequence forward (a cache as long as the sequence) are one code path, so incremental decoding reproduces
// the full forward. MaxText's split prefill/AR caches merged by log-sum-exp give the same values up to rounding.
#pragma once

#include <cstdint>
#include <type_traits>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"

namespace maxtext::layers {

/// Rows [B*T, heads, d] (strided rows allowed, last axis contiguous) seen as [B, T, heads, d].
template <class T>
View<T, 4> as_batched(View<T, 3> rows, std::int64_t B, std::int64_t Tlen) {
  return View<T, 4>(rows.data(), {B, Tlen, rows.dim(1), rows.dim(2)},
                    {Tlen * rows.stride(0), rows.stride(0), rows.stride(1), rows.stride(2)});
}
/// A cache buffer [B, S, heads*d] seen as [B, S, heads, d].
template <class T>
View<T, 4> as_heads(View<T, 3> buf, std::int64_t heads) {
  const std::int64_t d = buf.dim(2) / heads;
  return View<T, 4>(buf.data(), {buf.dim(0), buf.dim(1), heads, d}, {buf.stride(0), buf.stride(1), d, 1});
}

template <TensorPolicy P>
class AttentionOp {
 public:
  using A = typename P::act_t;
  using KV = typename P::cache_t;
  static_assert(std::is_same_v<KV, A> || (std::is_same_v<A, float> && (std::is_same_v<KV, fp16> || std::is_same_v<KV, bf16>)),
                "AttentionOp: a KV-cache type other than the activation type is f16 or bf16 under f32 activations "
                "(Policy<B, W, float, float, fp16 or bf16>)");
  struct Config {
    std::int64_t num_query_heads = 0;
    std::int64_t num_kv_heads = 0;
    std::int64_t qk_dim = 0;
    std::int64_t v_dim = 0;
    bool causal = true;
    std::int64_t sliding_window = 0;
    std::int64_t chunk = 0;
    AttentionOptions options;
  };

  AttentionOp() = default;
  explicit AttentionOp(const Config& cfg) : cfg_(cfg) {
    MAXTEXT_CHECK(cfg.num_kv_heads > 0 && cfg.num_query_heads % cfg.num_kv_heads == 0, ConfigError,
                  "[AttentionOp] num_query_heads (", cfg.num_query_heads, ") must be a multiple of num_kv_heads (",
                  cfg.num_kv_heads, ")");
  }
  const Config& config() const { return cfg_; }
  /// Widths of the two cache buffers: keys [K * qk_dim], values [K * v_dim].
  CacheSpec cache_spec() const { return {cfg_.num_kv_heads * cfg_.qk_dim, cfg_.num_kv_heads * cfg_.v_dim}; }

  /// Append k, v ([B*T, K, d] rows) to the cache at each row's start index, rounded to the cache type.
  void write_cache(const Context<P>& ctx, View<const A, 3> k, View<const A, 3> v, CacheFor<P>& cache) const {
    const auto& st = ctx.step;
    for (std::int64_t b = 0; b < st.batch; ++b) {
      const std::int64_t s0 = st.start[static_cast<std::size_t>(b)];
      for (int which = 0; which < 2; ++which) {
        View<const A, 3> src = (which == 0 ? k : v).narrow(0, b * st.length, st.length);
        View<KV, 3> buf = cache.buffers[static_cast<std::size_t>(which)].view();
        const std::int64_t K = src.dim(1), d = src.dim(2);
        if (src.stride(1) == d) {  // heads contiguous: one [T, K*d] block of rows
          put_cache_rows(ctx.be, View<const A, 2>(src.data(), {st.length, K * d}, {src.stride(0), 1}), b, s0, buf);
        } else {  // head by head, into columns [h*d, (h+1)*d) of the buffer
          for (std::int64_t h = 0; h < K; ++h) {
            put_cache_rows(ctx.be, View<const A, 2>(src.data() + h * src.stride(1), {st.length, d}, {src.stride(0), 1}),
                           b, s0, View<KV, 3>(buf.data() + h * d, {buf.dim(0), buf.dim(1), d}, {buf.stride(0), buf.stride(1), 1}));
          }
        }
      }
    }
  }

  /// q [B*T, N, Dq], k/v [B*T, K, D] for this step; out [B*T, N, Dv]. Writes k, v into `cache`, then attends.
  void forward(const Context<P>& ctx, View<const A, 3> q, View<const A, 3> k, View<const A, 3> v, CacheFor<P>& cache,
               View<const A, 1> sinks, View<A, 3> out) const {
    write_cache(ctx, k, v, cache);
    attend(ctx, q, cache, sinks, out);
  }

  /// Attend q over the keys/values already in `cache`.
  void attend(const Context<P>& ctx, View<const A, 3> q, const CacheFor<P>& cache, View<const A, 1> sinks,
              View<A, 3> out) const {
    const auto& st = ctx.step;
    AttentionMask mask;
    mask.q_start = st.q_start;
    mask.kv_len = st.kv_len;
    mask.q_segment = st.segment_ids;
    mask.kv_segment = st.kv_segment_ids;
    mask.causal = cfg_.causal;
    mask.sliding_window = cfg_.sliding_window;
    mask.chunk = cfg_.chunk;
    mask.bidir_begin = st.bidir_begin;
    mask.bidir_end = st.bidir_end;
    View<const KV, 4> kc = as_heads(cache.buffers[0].cview(), cfg_.num_kv_heads);
    View<const KV, 4> vc = as_heads(cache.buffers[1].cview(), cfg_.num_kv_heads);
    ctx.be.attention(as_batched(q, st.batch, st.length), kc, vc, mask, cfg_.options, sinks,
                     as_batched(out, st.batch, st.length));
  }

 private:
  Config cfg_;
};

}  // namespace maxtext::layers
