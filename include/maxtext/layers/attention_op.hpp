// layers/attention_op.hpp: MaxText attention_op.py AttentionOp on a KV cache; spec attention.md §1, §2, §5.
// Every call writes the step's keys/values into the cache at each row's indices, then attends each query over the
// cache with the causal / segment / window mask evaluated on cache indices. Prefill, autoregressive steps and a plain
// full-sequence forward (a cache as long as the sequence) are one code path, so incremental decoding reproduces
// the full forward. MaxText's split prefill/AR caches merged by log-sum-exp give the same values up to rounding.
// A quantised cache (Config::kv_quant: MaxText's quantize_kvcache, layers/kv_quant.hpp) holds packed rows of codes
// and scales. Then, as in MaxText, a fresh prefill (a row starting at cache index 0, given its keys and values)
// attends its own keys and values as computed, and every other step (decode, a later chunk, a speculative check, a
// layer reading another layer's cache) reads them dequantised from the cache, its own tokens' included. Such steps
// with f32 activations (and no segment ids or picture ranges) attend straight from the packed rows (attend_packed,
// layers/kv_quant.hpp); the others dequantise each row into scratch for the backend's kernel. Host memory only (the
// CPU and reference backends).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/kv_quant.hpp"

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
    std::optional<KVQuant> kv_quant;  ///< a quantised cache (MaxText's quantize_kvcache), or none
    bool media_bidirectional = true;  ///< the step's bidirectional picture ranges apply (AttentionArgs)
  };

  AttentionOp() = default;
  explicit AttentionOp(const Config& cfg) : cfg_(cfg) {
    MAXTEXT_CHECK(cfg.num_kv_heads > 0 && cfg.num_query_heads % cfg.num_kv_heads == 0, ConfigError,
                  "[AttentionOp] num_query_heads (", cfg.num_query_heads, ") must be a multiple of num_kv_heads (",
                  cfg.num_kv_heads, ")");
  }
  const Config& config() const { return cfg_; }
  /// Widths of the two cache buffers: keys [K * qk_dim], values [K * v_dim]; quantised, a packed row's bytes in
  /// elements of the cache type (KVQuant::packed_row_bytes).
  CacheSpec cache_spec() const {
    const std::int64_t K = cfg_.num_kv_heads;
    if (!cfg_.kv_quant) return {K * cfg_.qk_dim, K * cfg_.v_dim};
    const auto n = [&](std::int64_t d) { return cfg_.kv_quant->packed_row_bytes(K, d) / static_cast<std::int64_t>(sizeof(KV)); };
    return {n(cfg_.qk_dim), n(cfg_.v_dim)};
  }

  /// Append k, v ([B*T, K, d] rows) to the cache at each row's start index, rounded to the cache type (quantised
  /// when Config::kv_quant says so).
  void write_cache(const Context<P>& ctx, View<const A, 3> k, View<const A, 3> v, CacheFor<P>& cache) const {
    const auto& st = ctx.step;
    if (cfg_.kv_quant) {
      write_quantised(ctx, k, v, cache);
      return;
    }
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
    if (cfg_.kv_quant) {
      attend_quantised(ctx, q, &k, &v, cache, sinks, out);
      return;
    }
    attend(ctx, q, cache, sinks, out);
  }

  /// Attend q over the keys/values already in `cache`.
  void attend(const Context<P>& ctx, View<const A, 3> q, const CacheFor<P>& cache, View<const A, 1> sinks,
              View<A, 3> out) const {
    if (cfg_.kv_quant) {
      attend_quantised(ctx, q, nullptr, nullptr, cache, sinks, out);
      return;
    }
    const auto& st = ctx.step;
    AttentionMask mask;
    mask.q_start = st.q_start;
    mask.kv_len = st.kv_len;
    mask.q_segment = st.segment_ids;
    mask.kv_segment = st.kv_segment_ids;
    mask.causal = cfg_.causal;
    mask.sliding_window = cfg_.sliding_window;
    mask.chunk = cfg_.chunk;
    if (cfg_.media_bidirectional) {
      mask.bidir_begin = st.bidir_begin;
      mask.bidir_end = st.bidir_end;
    }
    View<const KV, 4> kc = as_heads(cache.buffers[0].cview(), cfg_.num_kv_heads);
    View<const KV, 4> vc = as_heads(cache.buffers[1].cview(), cfg_.num_kv_heads);
    ctx.be.attention(as_batched(q, st.batch, st.length), kc, vc, mask, cfg_.options, sinks,
                     as_batched(out, st.batch, st.length));
  }

 private:
  static A to_act(float f) {
    if constexpr (std::is_same_v<A, float>) {
      return f;
    } else {
      return A(f);
    }
  }
  void check_host(const Context<P>& ctx) const {
    MAXTEXT_CHECK(ctx.be.memory()->host_accessible(), UnsupportedError, "[AttentionOp] quantize_kvcache: the quantised "
                  "KV cache runs on host memory (the CPU and reference backends); this backend's cache is device memory");
  }

  /// Quantise each token's keys / values into its packed cache row.
  void write_quantised(const Context<P>& ctx, View<const A, 3> k, View<const A, 3> v, CacheFor<P>& cache) const {
    check_host(ctx);
    const auto& st = ctx.step;
    const KVQuant& kq = *cfg_.kv_quant;
    std::vector<float> row;
    for (int which = 0; which < 2; ++which) {
      const View<const A, 3> src = which == 0 ? k : v;
      View<KV, 3> buf = cache.buffers[static_cast<std::size_t>(which)].view();
      const std::int64_t K = src.dim(1), d = src.dim(2);
      MAXTEXT_CHECK(buf.dim(2) * static_cast<std::int64_t>(sizeof(KV)) == kq.packed_row_bytes(K, d), ShapeError,
                    "[AttentionOp] the quantised cache's rows are ", buf.dim(2) * static_cast<std::int64_t>(sizeof(KV)),
                    " bytes, expected ", kq.packed_row_bytes(K, d), " for ", K, " heads of ", d);
      row.resize(static_cast<std::size_t>(K * d));
      for (std::int64_t b = 0; b < st.batch; ++b) {
        const std::int64_t s0 = st.start[static_cast<std::size_t>(b)];
        MAXTEXT_CHECK(s0 >= 0 && s0 + st.length <= buf.dim(1), ArgumentError, "[AttentionOp] tokens [", s0, ", ",
                      s0 + st.length, ") outside the cache's ", buf.dim(1), " positions");
        for (std::int64_t t = 0; t < st.length; ++t) {
          const std::int64_t m = b * st.length + t;
          for (std::int64_t h = 0; h < K; ++h) {
            const A* x = src.data() + m * src.stride(0) + h * src.stride(1);
            for (std::int64_t i = 0; i < d; ++i) row[static_cast<std::size_t>(h * d + i)] = static_cast<float>(x[i]);
          }
          KV* dst = buf.data() + b * buf.stride(0) + (s0 + t) * buf.stride(1);
          kq.pack_row(row.data(), K, d, reinterpret_cast<std::uint8_t*>(dst));
        }
      }
    }
  }

  /// Attention over a quantised cache, row by row: a fresh prefill's row (start 0, given k and v) attends its own
  /// keys and values as computed (MaxText's prefill), any other row its cache rows dequantised (its AR steps).
  void attend_quantised(const Context<P>& ctx, View<const A, 3> q, const View<const A, 3>* k, const View<const A, 3>* v,
                        const CacheFor<P>& cache, View<const A, 1> sinks, View<A, 3> out) const {
    check_host(ctx);
    const auto& st = ctx.step;
    const KVQuant& kq = *cfg_.kv_quant;
    const std::int64_t K = cfg_.num_kv_heads, Dk = cfg_.qk_dim, Dv = cfg_.v_dim;
    const View<const A, 4> qb = as_batched(q, st.batch, st.length);
    const View<A, 4> ob = as_batched(out, st.batch, st.length);
    std::vector<float> row(static_cast<std::size_t>(K * std::max(Dk, Dv)));
    int threads = 1;
    if constexpr (requires { ctx.be.threads(); }) threads = ctx.be.threads();
    for (std::int64_t b = 0; b < st.batch; ++b) {
      const std::int64_t S = st.kv_len.data()[b * st.kv_len.stride(0)];
      const bool fresh = k != nullptr && st.start[static_cast<std::size_t>(b)] == 0;
      if constexpr (std::is_same_v<A, float>) {
        // f32 activations, no segment ids or picture ranges: straight from the packed rows (attend_packed).
        if (!fresh && st.segment_ids.size() == 0 && st.kv_segment_ids.size() == 0 && st.bidir_begin.size() == 0) {
          const PackedAttentionArgs pa{K, Dk, Dv, cfg_.causal, cfg_.sliding_window, cfg_.chunk, cfg_.options.soft_cap};
          const View<const KV, 3> kb = cache.buffers[0].cview(), vb = cache.buffers[1].cview();
          const auto bytes = static_cast<std::int64_t>(sizeof(KV));
          MAXTEXT_CHECK(sinks.size() == 0 || sinks.stride(0) == 1, ShapeError, "[AttentionOp] sinks must be contiguous");
          attend_packed(kq, pa, q.narrow(0, b * st.length, st.length), st.start[static_cast<std::size_t>(b)], S,
                        reinterpret_cast<const std::uint8_t*>(kb.data() + b * kb.stride(0)), kb.stride(1) * bytes,
                        reinterpret_cast<const std::uint8_t*>(vb.data() + b * vb.stride(0)), vb.stride(1) * bytes,
                        sinks.size() > 0 ? sinks.data() : nullptr, out.narrow(0, b * st.length, st.length), threads);
          continue;
        }
      }
      ScratchScope scope(ctx.scratch);
      View<A, 4> kd = ctx.scratch.template alloc<A, 4>({1, std::max<std::int64_t>(S, 1), K, Dk});
      View<A, 4> vd = ctx.scratch.template alloc<A, 4>({1, std::max<std::int64_t>(S, 1), K, Dv});
      for (int which = 0; which < 2; ++which) {
        View<A, 4> dst = which == 0 ? kd : vd;
        const std::int64_t d = which == 0 ? Dk : Dv;
        const View<const KV, 3> buf = cache.buffers[static_cast<std::size_t>(which)].cview();
        for (std::int64_t s = 0; s < S; ++s) {
          A* o = dst.data() + s * K * d;
          if (fresh) {  // this step's own row s, as computed
            const View<const A, 3> src = which == 0 ? *k : *v;
            for (std::int64_t h = 0; h < K; ++h) {
              const A* x = src.data() + (b * st.length + s) * src.stride(0) + h * src.stride(1);
              std::copy(x, x + d, o + h * d);
            }
            continue;
          }
          const auto* packed = reinterpret_cast<const std::uint8_t*>(buf.data() + b * buf.stride(0) + s * buf.stride(1));
          if constexpr (std::is_same_v<A, float>) {
            kq.unpack_row(packed, K, d, o);
          } else {
            kq.unpack_row(packed, K, d, row.data());
            for (std::int64_t i = 0; i < K * d; ++i) o[i] = to_act(row[static_cast<std::size_t>(i)]);
          }
        }
      }
      AttentionMask mask;
      mask.q_start = st.q_start.narrow(0, b, 1);
      mask.kv_len = st.kv_len.narrow(0, b, 1);
      if (st.segment_ids.size() > 0) mask.q_segment = st.segment_ids.narrow(0, b, 1);
      if (st.kv_segment_ids.size() > 0) mask.kv_segment = st.kv_segment_ids.narrow(0, b, 1).narrow(1, 0, kd.dim(1));
      mask.causal = cfg_.causal;
      mask.sliding_window = cfg_.sliding_window;
      mask.chunk = cfg_.chunk;
      if (cfg_.media_bidirectional && st.bidir_begin.size() > 0) {
        mask.bidir_begin = st.bidir_begin.narrow(0, b, 1);
        mask.bidir_end = st.bidir_end.narrow(0, b, 1);
      }
      ctx.be.attention(qb.narrow(0, b, 1), View<const A, 4>(kd), View<const A, 4>(vd), mask, cfg_.options, sinks,
                       ob.narrow(0, b, 1));
    }
  }

  Config cfg_;
};

}  // namespace maxtext::layers
