// backend/cpu/attention.hpp: MaxText AttentionOp on the CPU (spec attention.md §1-2), with no [T, S] score matrix.
// Two kernels:
//  - decode (fewer than kTiledMinRows queries per row, and whenever the prefill kernel does not apply): one work
//    item is (batch row, query, chunk of kv heads); the G = N/K query heads sharing a kv head are handled together,
//    so each key and value row is read from memory once for all of them. Three passes over the visible keys: all
//    logits (kW keys at a time, kW dot products reduced into one vector; with AVX-512 four heads at a time when G is
//    a multiple of 4, block_logits4), one max and one vectorised exp per head, then the value rows; the cache is
//    read in address order (see attention() below). A cache narrower than f32 (f16, bf16) is converted in registers
//    as the passes load it (vec::load_f32). Staging a block's rows in an f32 buffer first was slower than reading
//    the f32 cache, even with the cache in L2: on one Zen 4 core, model c's cache shape (16 layers, 513 keys) took
//    1.14-1.18 ms in f32, 1.57-1.66 staged from f16 and 3.6 from bf16, 0.69-0.71 converted in registers from f16
//    and 0.85 from bf16.
//  - prefill (T >= kTiledMinRows, head dims multiples of kW, no soft cap): one work item is a tile of query
//    positions times the G heads (about 64 rows); each key block is transposed once and serves every row of the tile
//    (see below). An online softmax over blocks of kW keys: per block one running-max update, one vectorised exp,
//    then the probability-weighted sum of the value rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/cpu/parallel.hpp"
#include "maxtext/backend/cpu/prefetch.hpp"
#include "maxtext/backend/cpu/vec.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cpu::attn {

using vec::fbatch;
inline constexpr std::int64_t kBlk = static_cast<std::int64_t>(vec::W);  ///< keys per block: one vector of logits

/// Decode passes hint the cache rows of the key block kAheadBlocks ahead into L1, one prefetch per 64-byte line,
/// spread over the loads of the current block (RowHints: a few lines per step of block_logits; block_values: each
/// value row's lines as the same row of the current block is read). A block's rows of one kv head lie a whole cache
/// position apart, a pattern the hardware prefetchers follow poorly, and the passes otherwise wait for each line
/// before their arithmetic. One Zen 4 core, model c's f32 cache shape (513 keys, 4 kv heads x 128), GB/s:
///
///   | cache                               | no hints  | per-head bursts | spread    |
///   |-------------------------------------|-----------|-----------------|-----------|
///   | 64 layers, from DRAM, 4 KiB pages   | 18.1-18.5 | 19.1-19.5       | 20.8-22.2 |
///   | 64 layers, from DRAM, 2 MiB pages   | 19.6-19.8 | 20.3-20.7       | 24.9-25.4 |
///   | 16 layers, partly in L3             | 21.4-23.1 | 25.1-27.3       | 29.6-35.4 |
///   | 4 layers, in L2/L3                  | 48.4-59   | 45.1-47.2       | 45.0-47   |
///
/// (Alternating runs in one session; 1 or 2 blocks ahead alike, 3 slightly worse; hints into L2 no better.) With
/// the cache in L2/L3 the hints cost up to a fifth, where attention is cheap anyway. Bursts remain where the spread
/// has no loop to ride on (head sizes not a multiple of kBlk, per-key value sums).
inline constexpr std::int64_t kAheadBlocks = 2;

/// The lines of `rows` rows (`bytes` each, `stride_bytes` apart from `row0`), walked row by row by step(), a fixed
/// run of lines per step (cut at the row's end): the fewest per step that cover every row within `steps` steps.
class RowHints {
 public:
  RowHints(const void* row0, std::int64_t stride_bytes, std::int64_t rows, std::int64_t bytes, std::int64_t steps)
      : p_(static_cast<const char*>(row0)), stride_(stride_bytes), rows_(rows), bytes_(bytes) {
    const std::int64_t lines = (bytes + 63) / 64;
    run_ = lines;
    for (std::int64_t r = 1; r < lines; ++r) {
      if (rows * ((lines + r - 1) / r) <= steps) {
        run_ = r;
        break;
      }
    }
  }
  MAXTEXT_INLINE void step() {
    if (row_ >= rows_) return;
    prefetch::bytes(p_ + off_, std::min(64 * run_, bytes_ - off_));
    off_ += 64 * run_;
    if (off_ >= bytes_) {
      off_ = 0;
      ++row_;
      p_ += stride_;
    }
  }

 private:
  const char* p_;
  std::int64_t stride_, rows_, bytes_, run_ = 1, row_ = 0, off_ = 0;
};

#if defined(__AVX512F__)
static_assert(kBlk == 16, "AVX-512 batches hold 16 floats");
/// Lane j = the sum of acc[j]'s 16 lanes, by one transposing reduction instead of 16 horizontal sums. Every input
/// is summed by the same tree ((x0 + x2) + (x1 + x3) within each 128-bit lane, then (L0 + L2) + (L1 + L3)), so
/// an input's sum does not depend on its position.
MAXTEXT_INLINE __m512 reduce16(const fbatch* acc) {
  __m512 s4[4];
  for (int k = 0; k < 4; ++k) {
    __m512 t[2];
    for (int h = 0; h < 2; ++h) {
      const __m512 a = acc[4 * k + 2 * h], b = acc[4 * k + 2 * h + 1];
      t[h] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // per 128-bit lane: a02 b02 a13 b13
    }
    s4[k] = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));  // per lane: inputs 4k..4k+3
  }
  const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(s4[0], s4[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(s4[0], s4[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(s4[2], s4[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(s4[2], s4[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

/// logit[j] = q . k_j for a full block of kBlk key rows k_j = k + j ks: kBlk vector accumulators over d, then one
/// transposing reduction into a single vector (lane j = key j) instead of kBlk horizontal sums. `hints` (when given)
/// steps once per kBlk values of d.
template <class KV>
MAXTEXT_INLINE void block_logits(const float* q, const KV* k, std::int64_t ks, std::int64_t Dq, float* logit,
                                 RowHints* hints = nullptr) {
  fbatch acc[kBlk];
  MAXTEXT_UNROLL
  for (std::int64_t j = 0; j < kBlk; ++j) acc[j] = fbatch(0.0f);
  for (std::int64_t d = 0; d < Dq; d += kBlk) {
    if (hints) hints->step();
    const fbatch qv = fbatch::load_unaligned(q + d);
    const KV* kr = k + d;
    MAXTEXT_UNROLL
    for (std::int64_t j = 0; j < kBlk; ++j, kr += ks) acc[j] = xsimd::fma(qv, vec::load_f32(kr), acc[j]);
  }
#if defined(__AVX512F__)
  _mm512_store_ps(logit, reduce16(acc));
#else
  for (std::int64_t j = 0; j < kBlk; ++j) logit[j] = xsimd::hadd(acc[j]);
#endif
}

#if defined(__AVX512F__)
/// block_logits for four query rows at once (q rows Dq apart; row r's logits at logit + r ls), for the G query heads
/// that share a kv head: each key vector is loaded and converted once for the four rows instead of once per row.
/// Four keys at a time against the four rows make 16 accumulators (input 4r + j of reduce16), and the 128-bit lanes
/// of the four key groups' sums are then transposed into rows. Every logit is the same sum in the same order as
/// block_logits' (fma over d, then the same reduction tree), so the results are equal to the bit. `hints` steps
/// Dq / kBlk times per key group, as often as four block_logits calls. Model c's shape (16 query heads on 4 kv heads
/// of 128, 513 keys, f16 cache, one Zen 4 core), 16 layers: 0.54-0.59 -> 0.46-0.47 ms with the cache in L2, 0.68 ->
/// 0.60-0.61 from DRAM on 2 MiB pages, and at 2049 keys from DRAM on 4 KiB pages 3.14-3.16 -> 2.67-2.96 ms.
template <class KV>
MAXTEXT_INLINE void block_logits4(const float* q, const KV* k, std::int64_t ks, std::int64_t Dq, float* logit,
                                  std::int64_t ls, RowHints* hints = nullptr) {
  __m512 g[4];
  for (int kg = 0; kg < 4; ++kg) {
    fbatch acc[kBlk];
    MAXTEXT_UNROLL
    for (std::int64_t j = 0; j < kBlk; ++j) acc[j] = fbatch(0.0f);
    const KV* k0 = k + 4 * kg * ks;
    for (std::int64_t d = 0; d < Dq; d += kBlk) {
      if (hints) hints->step();
      fbatch kv[4];
      MAXTEXT_UNROLL
      for (int j = 0; j < 4; ++j) kv[j] = vec::load_f32(k0 + j * ks + d);
      MAXTEXT_UNROLL
      for (int r = 0; r < 4; ++r) {
        __m512 qr = _mm512_loadu_ps(q + r * Dq + d);
        // Kept in a register: g++ 12 would fold this load into each of the four FMAs (16 loads of q a step instead
        // of 4), and the loop is then bound by its loads (0.50 instead of 0.46-0.47 ms in the case above).
        __asm__("" : "+v"(qr));
        const fbatch qv(qr);
        MAXTEXT_UNROLL
        for (int j = 0; j < 4; ++j) acc[4 * r + j] = xsimd::fma(qv, kv[j], acc[4 * r + j]);
      }
    }
    g[kg] = reduce16(acc);  // lane 4r + j: row r, key 4 kg + j
  }
  // rows: [g0.Lr g1.Lr g2.Lr g3.Lr]
  const __m512 t01 = _mm512_shuffle_f32x4(g[0], g[1], _MM_SHUFFLE(1, 0, 1, 0));  // g0.L0 g0.L1 g1.L0 g1.L1
  const __m512 t23 = _mm512_shuffle_f32x4(g[2], g[3], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 u01 = _mm512_shuffle_f32x4(g[0], g[1], _MM_SHUFFLE(3, 2, 3, 2));  // g0.L2 g0.L3 g1.L2 g1.L3
  const __m512 u23 = _mm512_shuffle_f32x4(g[2], g[3], _MM_SHUFFLE(3, 2, 3, 2));
  _mm512_store_ps(logit, _mm512_shuffle_f32x4(t01, t23, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_store_ps(logit + ls, _mm512_shuffle_f32x4(t01, t23, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm512_store_ps(logit + 2 * ls, _mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_store_ps(logit + 3 * ls, _mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
}
inline constexpr bool kLogits4 = true;
#else
inline constexpr bool kLogits4 = false;
#endif

/// Keys [lo, hi) that query position qi may see in a row of `len` cached keys (causal, window, chunk terms);
/// segment ids are checked per key.
/// A picture's range (bidir_begin / bidir_end of query (b, t)) joins it: both ranges hold the query, so their union
/// is one range.
MAXTEXT_INLINE void key_range(const AttentionMask& mask, std::int64_t len, std::int64_t b, std::int64_t t,
                              std::int64_t qi, std::int64_t& lo, std::int64_t& hi) {
  lo = 0;
  hi = len;
  if (mask.causal) hi = std::min(hi, qi + 1);
  if (mask.sliding_window > 0) lo = std::max(lo, qi - mask.sliding_window + 1);
  if (mask.chunk > 0) {  // same chunk as the query (the upper end matters only without the causal term)
    lo = std::max(lo, (qi / mask.chunk) * mask.chunk);
    hi = std::min(hi, (qi / mask.chunk + 1) * mask.chunk);
  }
  if (!mask.bidir_end.empty()) {
    const std::int64_t bb = mask.bidir_begin(b, t), be = std::min<std::int64_t>(mask.bidir_end(b, t), len);
    if (bb < be) {
      lo = std::min(lo, bb);
      hi = std::max(hi, be);
    }
  }
}

/// The mask of keys s0 .. s0 + kBlk - 1 for one query as additive logit terms: dead[j] = 0 where key s0 + j is
/// visible (j < nb, lo <= s < hi, and with segment ids the query's segment, never a negative one), else -inf
/// (exact for visible keys). Returns whether any key is visible.
MAXTEXT_INLINE bool block_mask(const AttentionMask& mask, std::int64_t b, std::int64_t s0, std::int64_t nb,
                               std::int64_t lo, std::int64_t hi, std::int32_t qseg, float* dead) {
  bool any = false;
  for (std::int64_t j = 0; j < kBlk; ++j) {
    const std::int64_t s = s0 + j;
    bool ok = j < nb && s >= lo && s < hi;
    if (ok && !mask.kv_segment.empty()) {
      const std::int32_t ks = mask.kv_segment(b, s);
      ok = ks == qseg && ks >= 0;
    }
    dead[j] = ok ? 0.0f : -std::numeric_limits<float>::infinity();
    any = any || ok;
  }
  return any;
}

/// Normalise one accumulated output row (running max m, running sum l) and store it to op: a sink joins the
/// denominator; a row whose keys were all masked averages all `len` value rows (MaxText's finite mask value makes
/// its logits equal), or is 0 with sinks. `vtmp` holds Dv floats.
template <class A, class KV>
void finish_row(float* ag, float m, float l, std::int64_t Dv, const View<const A, 1>& sinks, std::int64_t n,
                const View<const KV, 4>& v, std::int64_t b, std::int64_t kh, std::int64_t len, float* vtmp, A* op) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!sinks.empty()) {
    const float sink = to_float(sinks(n));
    if (sink > m) {
      const float corr = std::exp(m - sink);
      l *= corr;
      vec::scale(corr, ag, Dv);
      m = sink;
    }
    l += std::exp(sink - m);
  }
  if (l == 0.0f || (sinks.empty() && m == kNegInf)) {
    std::fill(ag, ag + Dv, 0.0f);
    if (sinks.empty() && len > 0) {
      for (std::int64_t s = 0; s < len; ++s) {
        vec::to_f32(&v(b, s, kh, 0), vtmp, Dv);
        vec::axpy(1.0f, vtmp, ag, Dv);
      }
      vec::scale(1.0f / static_cast<float>(len), ag, Dv);
    }
    vec::from_f32(ag, op, Dv);
    return;
  }
  vec::scale(1.0f / l, ag, Dv);
  vec::from_f32(ag, op, Dv);
}

/// Call f.template operator()<n>() for a run-time n in [1, Max] (register tiles need compile-time row counts).
template <int Max, class F>
MAXTEXT_INLINE void with_rows(std::int64_t n, F&& f) {
  if constexpr (Max >= 1) {
    if (n == Max) {
      f.template operator()<Max>();
    } else {
      with_rows<Max - 1>(n, f);
    }
  }
}

// ---- prefill: tiles of queries ------------------------------------------------------------------------------------
// With many queries, each block of keys is transposed once ([Dq][kBlk]) and used by every query row of a tile: a
// row's kBlk logits are then Dq broadcast-FMAs into one vector (no reduction), and kRowsQK rows share each key
// vector load; the values are accumulated kRowsPV rows x 4 vectors at a time, each value vector loaded once for
// them all.
/// Query positions from which attention() takes the tiled path; fewer (a decode step, a speculative verify pass of a
/// few drafted tokens) take the one-query path, which reads the keys in address order without transposing them.
/// Measured on model b's shape at context 512 (bench_speculative, bench/performance_notes.md): the tiled path cost
/// 1.15-1.25x the one-query path for 2 to 6 rows, about the same at 7 and 8. Every row of the one-query path is
/// computed alone, so a verify row gives the logits of the decode step it stands for, bit for bit.
inline constexpr std::int64_t kTiledMinRows = 8;
inline constexpr std::int64_t kTileRows = 64;  ///< query rows per work item: kTileRows / G positions x G heads
inline constexpr int kRowsQK = 8;           ///< rows per logits register tile
inline constexpr int kRowsPV = 4;           ///< rows per value register tile

/// Logits of RR rows for one key block. Two partial sums per row (even and odd d, added at the end) halve the
/// length of each f32 accumulation chain (Dq is a multiple of kBlk, so even).
template <int RR>
MAXTEXT_INLINE void tile_logits(const float* q, std::int64_t Dq, const float* kT, float* logit) {
  fbatch acc[2][RR];
  MAXTEXT_UNROLL
  for (int r = 0; r < RR; ++r) acc[0][r] = acc[1][r] = fbatch(0.0f);
  for (std::int64_t d = 0; d < Dq; d += 2) {
    MAXTEXT_UNROLL
    for (int h = 0; h < 2; ++h) {
      const fbatch kv = fbatch::load_aligned(kT + (d + h) * kBlk);
      MAXTEXT_UNROLL
      for (int r = 0; r < RR; ++r) acc[h][r] = xsimd::fma(fbatch(q[r * Dq + d + h]), kv, acc[h][r]);
    }
  }
  MAXTEXT_UNROLL
  for (int r = 0; r < RR; ++r) (acc[0][r] + acc[1][r]).store_aligned(logit + r * kBlk);
}

template <int RR, int NV>
MAXTEXT_INLINE void tile_values(const float* prob, const float* const* vrow, std::int64_t nb, std::int64_t c,
                                float* acc, std::int64_t Dv) {
  fbatch o[RR][NV];
  MAXTEXT_UNROLL
  for (int r = 0; r < RR; ++r) {
    MAXTEXT_UNROLL
    for (int v = 0; v < NV; ++v) o[r][v] = fbatch::load_unaligned(acc + r * Dv + c + v * kBlk);
  }
  for (std::int64_t j = 0; j < nb; ++j) {
    fbatch vv[NV];
    MAXTEXT_UNROLL
    for (int v = 0; v < NV; ++v) vv[v] = fbatch::load_unaligned(vrow[j] + c + v * kBlk);
    MAXTEXT_UNROLL
    for (int r = 0; r < RR; ++r) {
      const fbatch p(prob[r * kBlk + j]);
      MAXTEXT_UNROLL
      for (int v = 0; v < NV; ++v) o[r][v] = xsimd::fma(p, vv[v], o[r][v]);
    }
  }
  MAXTEXT_UNROLL
  for (int r = 0; r < RR; ++r) {
    MAXTEXT_UNROLL
    for (int v = 0; v < NV; ++v) o[r][v].store_unaligned(acc + r * Dv + c + v * kBlk);
  }
}

/// acc[r][0, NV kBlk) += sum_j prob[r * pstride + j] * v_j[0, NV kBlk) over nb value rows v_j = v + j vs, for RR
/// rows (acc rows Dv apart): each value vector loaded once for all the rows, the sums kept in registers. With
/// `ahead`, row j also hints the `ahead_bytes` at ahead + j ahead_stride (the same columns of a later block).
template <int RR, int NV, class KV>
MAXTEXT_INLINE void block_values(const float* prob, std::int64_t pstride, const KV* v, std::int64_t vs,
                                 std::int64_t nb, float* acc, std::int64_t Dv, const char* ahead = nullptr,
                                 std::int64_t ahead_stride = 0, std::int64_t ahead_bytes = 0) {
  fbatch o[RR][NV];
  MAXTEXT_UNROLL
  for (int r = 0; r < RR; ++r) {
    MAXTEXT_UNROLL
    for (int u = 0; u < NV; ++u) o[r][u] = fbatch::load_unaligned(acc + r * Dv + u * kBlk);
  }
  for (std::int64_t j = 0; j < nb; ++j, v += vs) {
    if (ahead) prefetch::bytes(ahead + j * ahead_stride, ahead_bytes);
    fbatch vv[NV];
    MAXTEXT_UNROLL
    for (int u = 0; u < NV; ++u) vv[u] = vec::load_f32(v + u * kBlk);
    MAXTEXT_UNROLL
    for (int r = 0; r < RR; ++r) {
      const fbatch pr(prob[r * pstride + j]);
      MAXTEXT_UNROLL
      for (int u = 0; u < NV; ++u) o[r][u] = xsimd::fma(pr, vv[u], o[r][u]);
    }
  }
  MAXTEXT_UNROLL
  for (int r = 0; r < RR; ++r) {
    MAXTEXT_UNROLL
    for (int u = 0; u < NV; ++u) o[r][u].store_unaligned(acc + r * Dv + u * kBlk);
  }
}

/// The attention of attention() below for T >= kTiledMinRows, Dq and Dv multiples of kBlk and no soft cap, by query
/// tiles.
template <class A, class KV>
void attention_tiled(int nt, View<const A, 4> q, View<const KV, 4> k, View<const KV, 4> v, const AttentionMask& mask,
                     const AttentionOptions& opt, View<const A, 1> sinks, View<A, 4> out) {
  const std::int64_t B = q.dim(0), T = q.dim(1), N = q.dim(2), Dq = q.dim(3);
  const std::int64_t K = k.dim(2), Dv = v.dim(3), G = N / K;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Each key block is transposed once per work item: enough rows to amortise it, few enough positions that the
  // causal triangle wastes little (the rows of a tile run over the keys of its last position).
  const std::int64_t kTq = std::max<std::int64_t>(1, kTileRows / G);
  const std::int64_t nqb = (T + kTq - 1) / kTq, R = G * kTq;
  const bool segments = !mask.kv_segment.empty();

  parallel_for(B * K * nqb, nt, [&](std::int64_t w0, std::int64_t w1) {
    // Per-thread: q rows, accumulators [R][Dv], logits/probabilities [R][kBlk], the transposed key block, value rows
    // (converted when the cache is not f32), running max / sum and key ranges per row.
    const std::size_t nf = static_cast<std::size_t>(R * (Dq + Dv + kBlk + 2) + Dq * kBlk + kBlk * Dv + Dv);
    const std::size_t need = nf * 4 + static_cast<std::size_t>(2 * R) * 8 + static_cast<std::size_t>(R) * 4 + 64;
    auto* base = reinterpret_cast<float*>(thread_scratch(need, 0));
    float* logit = base;                  // [R][kBlk] (first: 64-byte aligned)
    float* kT = logit + R * kBlk;         // [Dq][kBlk]
    float* qf = kT + Dq * kBlk;           // [R][Dq]
    float* acc = qf + R * Dq;             // [R][Dv]
    float* vf = acc + R * Dv;             // [kBlk][Dv]
    float* vtmp = vf + kBlk * Dv;         // [Dv]
    float* mrun = vtmp + Dv;              // [R]
    float* lrun = mrun + R;               // [R]
    auto* lo = reinterpret_cast<std::int64_t*>(lrun + R + (R % 2));  // [R], 8-byte aligned
    std::int64_t* hi = lo + R;
    auto* qseg = reinterpret_cast<std::int32_t*>(hi + R);  // [R]
    alignas(64) float dead[kBlk];
    const float* vrow[kBlk];

    for (std::int64_t w = w0; w < w1; ++w) {
      // Query tiles in zigzag order (first, last, second, ...) so that contiguous chunks get equal causal work.
      const std::int64_t b = w / (K * nqb), kh = (w / nqb) % K, i = w % nqb;
      const std::int64_t qb = (i % 2 == 0) ? i / 2 : nqb - 1 - i / 2;
      const std::int64_t t0 = qb * kTq, tq = std::min(kTq, T - t0), rows = G * tq;
      const std::int64_t start = mask.q_start(b), len = mask.kv_len(b);
      std::int64_t blo = len, bhi = 0;
      for (std::int64_t r = 0; r < rows; ++r) {  // row r = head g, position t0 + ti
        const std::int64_t g = r / tq, ti = r % tq;
        key_range(mask, len, b, t0 + ti, start + t0 + ti, lo[r], hi[r]);
        if (lo[r] < hi[r]) {
          blo = std::min(blo, lo[r]);
          bhi = std::max(bhi, hi[r]);
        }
        qseg[r] = mask.q_segment.empty() ? 0 : mask.q_segment(b, t0 + ti);
        vec::to_f32(&q(b, t0 + ti, kh * G + g, 0), qf + r * Dq, Dq);
        std::fill(acc + r * Dv, acc + (r + 1) * Dv, 0.0f);
        mrun[r] = kNegInf;
        lrun[r] = 0.0f;
      }
      for (std::int64_t s0 = blo; s0 < bhi; s0 += kBlk) {
        const std::int64_t nb = std::min(kBlk, bhi - s0);
        for (std::int64_t j = 0; j < kBlk; ++j) {
          if (j < nb) {
            const KV* kr = &k(b, s0 + j, kh, 0);
            for (std::int64_t d = 0; d < Dq; ++d) kT[d * kBlk + j] = to_float(kr[d]);
            if constexpr (std::is_same_v<KV, float>) {
              vrow[j] = &v(b, s0 + j, kh, 0);
            } else {
              vec::to_f32(&v(b, s0 + j, kh, 0), vf + j * Dv, Dv);
              vrow[j] = vf + j * Dv;
            }
          } else {
            for (std::int64_t d = 0; d < Dq; ++d) kT[d * kBlk + j] = 0.0f;
            vrow[j] = nullptr;
          }
        }
        for (std::int64_t r0 = 0; r0 < rows; r0 += kRowsQK) {
          with_rows<kRowsQK>(std::min<std::int64_t>(kRowsQK, rows - r0), [&]<int RR>() {
            tile_logits<RR>(qf + r0 * Dq, Dq, kT, logit + r0 * kBlk);
          });
        }
        // Per row: the dtype rounding, the mask, the running max and sum; logits become probabilities in place.
        for (std::int64_t r = 0; r < rows; ++r) {
          float* lr = logit + r * kBlk;
          fbatch l = fbatch::load_aligned(lr);
          if (!opt.float32_qk_product) l = vec::round<A>(l);
          if (segments || s0 < lo[r] || s0 + kBlk > hi[r]) {  // else every key of the block is visible
            block_mask(mask, b, s0, nb, lo[r], hi[r], qseg[r], dead);
            l += fbatch::load_aligned(dead);
          }
          const float bm = vec::hmax(l);
          if (bm == kNegInf) {
            fbatch(0.0f).store_aligned(lr);
            continue;
          }
          if (bm > mrun[r]) {
            const float corr = std::exp(mrun[r] - bm);  // 0 on the row's first live block (m = -inf)
            lrun[r] *= corr;
            vec::scale(corr, acc + r * Dv, Dv);
            mrun[r] = bm;
          }
          const fbatch e = xsimd::exp(l - fbatch(mrun[r]));
          e.store_aligned(lr);
          lrun[r] += xsimd::hadd(e);
        }
        for (std::int64_t r0 = 0; r0 < rows; r0 += kRowsPV) {
          with_rows<kRowsPV>(std::min<std::int64_t>(kRowsPV, rows - r0), [&]<int RR>() {
            std::int64_t c = 0;
            for (; c + 4 * kBlk <= Dv; c += 4 * kBlk) tile_values<RR, 4>(logit + r0 * kBlk, vrow, nb, c, acc + r0 * Dv, Dv);
            for (; c < Dv; c += kBlk) tile_values<RR, 1>(logit + r0 * kBlk, vrow, nb, c, acc + r0 * Dv, Dv);
          });
        }
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t g = r / tq, ti = r % tq, n = kh * G + g;
        finish_row<A, KV>(acc + r * Dv, mrun[r], lrun[r], Dv, sinks, n, v, b, kh, len, vtmp, &out(b, t0 + ti, n, 0));
      }
    }
  });
}

/// out[b,t,n,:] = sum_s e^(l_s - m) v[b,s,n/G,:] / (sum_s e^(l_s - m) + sink term), l = q.k (q already scaled),
/// masked keys removed; a row with every key masked averages all kv_len keys (MaxText's finite mask value), or is 0
/// with sinks. q [B,T,N,Dq], k [B,S,K,Dq], v [B,S,K,Dv], out [B,T,N,Dv]; last axes contiguous. The cache type KV
/// may differ from A (an f16 or bf16 cache under f32 activations): its rows are converted to f32 as they are read;
/// the logits' roundings follow A.
template <class A, class KV>
void attention(int threads, View<const A, 4> q, View<const KV, 4> k, View<const KV, 4> v, const AttentionMask& mask,
               const AttentionOptions& opt, View<const A, 1> sinks, View<A, 4> out) {
  const std::int64_t B = q.dim(0), T = q.dim(1), N = q.dim(2), Dq = q.dim(3);
  const std::int64_t K = k.dim(2), Dv = v.dim(3), G = N / K;
  const bool round_logits = !opt.float32_qk_product && !opt.float32_logits;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const bool vec_dot = Dq % kBlk == 0;
  // Rough cost of one work item, to keep tiny problems on one thread.
  std::int64_t avg_keys = 0;
  for (std::int64_t b = 0; b < B; ++b) avg_keys += mask.kv_len(b);
  avg_keys = avg_keys / std::max<std::int64_t>(B, 1) + 1;
  const std::int64_t items = B * K * T;
  const int nt = items * G * avg_keys * (Dq + Dv) < (1 << 16) ? 1 : threads;
  if (T >= kTiledMinRows && vec_dot && Dv % kBlk == 0 && !(opt.soft_cap > 0.0f)) {
    attention_tiled<A, KV>(nt, q, k, v, mask, opt, sinks, out);
    return;
  }

  // One work item = (batch row, queries, chunk of kv heads): every query head of the chunk, for one query or, in a
  // short pass whose queries all start at the same key (a verify pass of speculative decoding, a few prompt rows),
  // for all T queries at once. Three passes over the visible keys [lo, hi) instead of an online softmax: every logit
  // first, then one max and one vectorised exp per head, then the value rows. Passes 1 and 3 go block by block of
  // kBlk positions and, inside a block, kv head by kv head and query by query, so the cache is read in address order;
  // each key and value row is loaded (and converted) from memory once for the G heads sharing it and the queries of
  // the item (from L1 for all but the first). From DRAM, one Zen 4 core streams an f32 cache (12 heads x 64) at about
  // 28 GB/s this way, against 18 GB/s for an online softmax over one head's rows at a time (they lie a whole cache
  // position apart) and 26 for these three passes over one head's rows (see kAheadBlocks for the prefetch hints).
  // Each query's row is computed as it would be alone (the same blocks, operations and order), so a row of a
  // several-query pass equals, to the bit, the decode step of that query.
  std::int64_t max_len = 0;
  for (std::int64_t b = 0; b < B; ++b) max_len = std::max<std::int64_t>(max_len, mask.kv_len(b));
  const std::int64_t span = (max_len + kBlk - 1) / kBlk * kBlk + kBlk;  // logits per row, whole blocks
  // Every query of a batch row in one item: they must share lo, and the (batch row, kv head) items must still give
  // every thread work (one kv head, one row and two threads keep one item per query).
  bool together = T > 1 && T < kTiledMinRows && B * K >= nt;
  for (std::int64_t b = 0; together && b < B; ++b) {
    std::int64_t lo0 = 0, lo = 0, hi = 0;
    for (std::int64_t t = 0; together && t < T; ++t) {
      key_range(mask, mask.kv_len(b), b, t, mask.q_start(b) + t, lo, hi);
      if (t == 0) lo0 = lo;
      together = lo == lo0;
    }
  }
  const std::int64_t QT = together ? T : 1;  // queries per work item
  const std::int64_t BT = B * (T / QT);      // (batch row, query group) pairs
  // Chunks: enough for every thread, and few enough heads per chunk that its logits stay within 8 MiB.
  const std::int64_t chunks = std::min<std::int64_t>(
      K, std::max<std::int64_t>(BT >= nt ? 1 : (nt + BT - 1) / BT, (K * G * QT * span * 4 + (1 << 23) - 1) >> 23));
  const std::int64_t HC = (K + chunks - 1) / chunks, C = (K + HC - 1) / HC;  // kv heads per chunk, chunks
  const bool segments = !mask.kv_segment.empty();
  constexpr auto kA = static_cast<std::int64_t>(sizeof(KV));  // bytes per cache element
  // Value rows by register tiles; per key with a skip of zero probabilities when Dv is not a multiple of kBlk, or
  // with segment ids (a masked key's row may hold anything).
  const bool tiled_values = Dv % kBlk == 0 && !segments;
  parallel_for(BT * C, nt, [&](std::int64_t w0, std::int64_t w1) {
    // Per-thread buffers: logits [R][span] (first: 64-byte aligned), running max per lane [R][kBlk] (later: lane 0
    // the max, lane 1 the sum), q rows, accumulators, one block's key / value rows of one head in f32; per query of
    // the item its position, key range and segment, and one block's mask.
    const std::int64_t R = QT * HC * G;
    const std::size_t need =
        static_cast<std::size_t>(R * (span + kBlk + Dq + Dv) + kBlk * (Dq + Dv)) * sizeof(float) + 64;
    float* lg = reinterpret_cast<float*>(thread_scratch(need, 0));  // [R][span]
    float* mvec = lg + R * span;                                      // [R][kBlk]
    float* qf = mvec + R * kBlk;                                      // [R][Dq]
    float* acc = qf + R * Dq;                                         // [R][Dv]
    float* kf = acc + R * Dv;                                         // [kBlk][Dq]
    float* vf = kf + kBlk * Dq;                                       // [kBlk][Dv]
    alignas(64) float dead[kTiledMinRows * kBlk];                    // [QT][kBlk]
    std::int64_t qinfo[4 * kTiledMinRows];                            // [QT][4]: t, lo, hi, segment

    for (std::int64_t w = w0; w < w1; ++w) {
      // One query: in zigzag order (0, T-1, 1, T-2, ...) so that contiguous chunks get equal causal work.
      const std::int64_t b = w / ((T / QT) * C), i = (w / C) % (T / QT), h0 = (w % C) * HC, h1 = std::min(K, h0 + HC);
      const std::int64_t rows = (h1 - h0) * G;  // per query; row u rows + r is query u's head h0 G + r
      const std::int64_t start = mask.q_start(b), len = mask.kv_len(b);
      std::int64_t lo = 0, hi_all = 0;  // lo: every query's; hi_all: the largest hi
      for (std::int64_t u = 0; u < QT; ++u) {
        std::int64_t* qi = qinfo + 4 * u;
        qi[0] = QT > 1 ? u : (i % 2 == 0) ? i / 2 : T - 1 - i / 2;
        key_range(mask, len, b, qi[0], start + qi[0], qi[1], qi[2]);
        qi[3] = mask.q_segment.empty() ? 0 : mask.q_segment(b, qi[0]);
        lo = qi[1];
        hi_all = std::max(hi_all, qi[2]);
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t row = u * rows + r;
          vec::to_f32(&q(b, qi[0], h0 * G + r, 0), qf + row * Dq, Dq);
          std::fill(acc + row * Dv, acc + (row + 1) * Dv, 0.0f);
          fbatch(kNegInf).store_aligned(mvec + row * kBlk);
        }
      }
      // Pass 1: logits, rounded and capped per MaxText's dtype flow, then masked (after the cap, which would map
      // -inf to -cap); lanes past hi are -inf.
      for (std::int64_t s0 = lo; s0 < hi_all; s0 += kBlk) {
        const std::int64_t nb_all = std::min(kBlk, hi_all - s0);
        bool per_key = !vec_dot;  // some query of the item takes per-key dots in this block (a partial block)
        for (std::int64_t u = 0; u < QT; ++u) {
          const std::int64_t* qi = qinfo + 4 * u;
          if (s0 >= qi[2]) continue;
          const std::int64_t nb = std::min(kBlk, qi[2] - s0);
          per_key = per_key || nb < kBlk;
          // Only blocks that pass 1 masks (segment ids, or the query's last block) need the mask.
          if (segments || nb < kBlk) {
            block_mask(mask, b, s0, nb, lo, qi[2], static_cast<std::int32_t>(qi[3]), dead + u * kBlk);
          }
        }
        // Whole blocks ahead only: the rows up to hi_all lie inside the cache.
        const bool ahead = s0 + (kAheadBlocks + 1) * kBlk <= hi_all;
        const std::int64_t krow = Dq * kA;
        for (std::int64_t h = h0; h < h1; ++h) {
          // The rows of the block kAheadBlocks on: over the first query's G heads' block_logits steps, or (no such
          // loop) at once.
          const KV* next = ahead ? &k(b, s0 + kAheadBlocks * kBlk, h, 0) : nullptr;
          RowHints hints(next, k.stride(1) * kA, next ? kBlk : 0, krow, G * (Dq / kBlk));
          if (next && per_key) prefetch::rows(next, k.stride(1) * kA, kBlk, krow);
          const KV* kc = &k(b, s0, h, 0);
          // The per-key dots read f32 rows, from the cache or converted into kf (the rows up to hi_all, once).
          const float* kb = kf;
          std::int64_t ks = Dq;
          if constexpr (std::is_same_v<KV, float>) {
            kb = kc;
            ks = k.stride(1);
          } else if (per_key) {
            for (std::int64_t j = 0; j < nb_all; ++j) vec::to_f32(&k(b, s0 + j, h, 0), kf + j * Dq, Dq);
          }
          for (std::int64_t u = 0; u < QT; ++u) {
            const std::int64_t* qi = qinfo + 4 * u;
            if (s0 >= qi[2]) continue;  // past this query's keys
            const std::int64_t nb = std::min(kBlk, qi[2] - s0);
            const bool masked = segments || nb < kBlk;  // else every key of the block is visible
            // block_logits reads whole blocks from the cache in its own type (converting in registers).
            const bool whole = vec_dot && nb == kBlk;
            RowHints* hp = u == 0 ? &hints : nullptr;
            // Four query heads at a time where G allows (each key vector loaded and converted once for them), else
            // one at a time.
            const bool four = kLogits4 && whole && G % 4 == 0;
            const std::int64_t base = u * rows;
            if constexpr (kLogits4) {
              if (four) {
                for (std::int64_t r = base + (h - h0) * G; r < base + (h - h0 + 1) * G; r += 4)
                  block_logits4(qf + r * Dq, kc, k.stride(1), Dq, lg + r * span + (s0 - lo), span, hp);
              }
            }
            for (std::int64_t r = base + (h - h0) * G; r < base + (h - h0 + 1) * G; ++r) {
              const float* qr = qf + r * Dq;
              float* logit = lg + r * span + (s0 - lo);
              if (whole && !four) {
                block_logits(qr, kc, k.stride(1), Dq, logit, hp);
              } else if (!whole) {
                for (std::int64_t j = 0; j < kBlk; ++j) logit[j] = j < nb ? vec::dot(qr, kb + j * ks, Dq) : 0.0f;
              }
              fbatch l(0.0f);
              if (opt.soft_cap > 0.0f) {
                for (std::int64_t j = 0; j < kBlk; ++j) {
                  float x = logit[j];
                  if (!opt.float32_qk_product) x = round_to<A>(x);
                  x = math::soft_cap(x, opt.soft_cap);
                  if (round_logits) x = round_to<A>(x);
                  logit[j] = x;
                }
                l = fbatch::load_aligned(logit);
              } else {  // without a cap the two roundings are one
                l = fbatch::load_aligned(logit);
                if (!opt.float32_qk_product) l = vec::round<A>(l);
              }
              if (masked) l += fbatch::load_aligned(dead + u * kBlk);
              l.store_aligned(logit);
              xsimd::max(l, fbatch::load_aligned(mvec + r * kBlk)).store_aligned(mvec + r * kBlk);
            }
          }
        }
      }
      // Pass 2: probabilities in place, e^(l - m) (0 for masked keys), and their sums.
      for (std::int64_t r = 0; r < QT * rows; ++r) {
        const std::int64_t nblk = (qinfo[4 * (r / rows) + 2] - lo + kBlk - 1) / kBlk;
        float* row = lg + r * span;
        const float m = vec::hmax(fbatch::load_aligned(mvec + r * kBlk));
        mvec[r * kBlk] = m;
        if (m == kNegInf) {  // every key masked: finish_row's fallback
          mvec[r * kBlk + 1] = 0.0f;
          std::fill(row, row + nblk * kBlk, 0.0f);
          continue;
        }
        fbatch sum(0.0f);
        for (std::int64_t c = 0; c < nblk; ++c) {
          const fbatch e = xsimd::exp(fbatch::load_aligned(row + c * kBlk) - fbatch(m));
          e.store_aligned(row + c * kBlk);
          sum += e;
        }
        mvec[r * kBlk + 1] = xsimd::hadd(sum);
      }
      // Pass 3: the probability-weighted sums of the value rows.
      for (std::int64_t s0 = lo; s0 < hi_all; s0 += kBlk) {
        const std::int64_t nb_all = std::min(kBlk, hi_all - s0);
        const bool ahead = s0 + (kAheadBlocks + 1) * kBlk <= hi_all;
        for (std::int64_t h = h0; h < h1; ++h) {
          // The rows of the block kAheadBlocks on: column by column as block_values reads the same columns here
          // (first query), or (no such loop) at once.
          const KV* next = ahead ? &v(b, s0 + kAheadBlocks * kBlk, h, 0) : nullptr;
          const std::int64_t vstride = v.stride(1) * kA;
          if (next && !tiled_values) prefetch::rows(next, vstride, kBlk, Dv * kA);
          // The block's value rows: block_values reads them from the cache in its own type; the per-key sums read
          // f32 rows, from the cache or converted into vf (the rows up to hi_all, once).
          const KV* vc = &v(b, s0, h, 0);
          const float* vb = vf;
          std::int64_t vs = Dv;
          if constexpr (std::is_same_v<KV, float>) {
            vb = vc;
            vs = v.stride(1);
          } else if (!tiled_values) {
            for (std::int64_t j = 0; j < nb_all; ++j) vec::to_f32(&v(b, s0 + j, h, 0), vf + j * Dv, Dv);
          }
          for (std::int64_t u = 0; u < QT; ++u) {
            const std::int64_t hi = qinfo[4 * u + 2];
            if (s0 >= hi) continue;
            const std::int64_t nb = std::min(kBlk, hi - s0);
            const std::int64_t r0 = u * rows + (h - h0) * G;
            const float* prob = lg + r0 * span + (s0 - lo);
            if (tiled_values) {
              for (std::int64_t g0 = 0; g0 < G; g0 += kRowsPV) {
                with_rows<kRowsPV>(std::min<std::int64_t>(kRowsPV, G - g0), [&]<int RR>() {
                  float* ag = acc + (r0 + g0) * Dv;
                  const float* pg = prob + g0 * span;
                  // The first row group of the first query hints the next rows' columns [c, c + NV kBlk) (in the
                  // cache's bytes).
                  const bool hint = next && g0 == 0 && u == 0;
                  const auto at = [&](std::int64_t c) { return hint ? reinterpret_cast<const char*>(next + c) : nullptr; };
                  std::int64_t c = 0;
                  for (; c + 4 * kBlk <= Dv; c += 4 * kBlk)
                    block_values<RR, 4>(pg, span, vc + c, v.stride(1), nb, ag + c, Dv, at(c), vstride, 4 * kBlk * kA);
                  for (; c < Dv; c += kBlk)
                    block_values<RR, 1>(pg, span, vc + c, v.stride(1), nb, ag + c, Dv, at(c), vstride, kBlk * kA);
                });
              }
            } else {
              for (std::int64_t g = 0; g < G; ++g) {
                for (std::int64_t j = 0; j < nb; ++j) {
                  const float pj = prob[g * span + j];
                  if (pj != 0.0f) vec::axpy(pj, vb + j * vs, acc + (r0 + g) * Dv, Dv);
                }
              }
            }
          }
        }
      }
      for (std::int64_t u = 0; u < QT; ++u) {
        const std::int64_t t = qinfo[4 * u];
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t n = h0 * G + r, row = u * rows + r;
          finish_row<A, KV>(acc + row * Dv, mvec[row * kBlk], mvec[row * kBlk + 1], Dv, sinks, n, v, b, n / G, len, vf,
                            &out(b, t, n, 0));
        }
      }
    }
  });
}

// attention() for the activation and cache types the layers use, as plain functions: compiled once with
// MAXTEXT_SEPARATE_KERNELS (core/macros.hpp), inline and forwarding to the template header-only. Overload resolution
// prefers them where the types match exactly.
#define MAXTEXT_ATTENTION_ENTRY(A, KV)                                                                          \
  MAXTEXT_KERNEL_API void attention(int threads, View<const A, 4> q, View<const KV, 4> k, View<const KV, 4> v, \
                                    const AttentionMask& mask, const AttentionOptions& opt,                    \
                                    View<const A, 1> sinks, View<A, 4> out)
MAXTEXT_ATTENTION_ENTRY(float, float);
MAXTEXT_ATTENTION_ENTRY(float, bf16);
MAXTEXT_ATTENTION_ENTRY(float, fp16);
MAXTEXT_ATTENTION_ENTRY(bf16, bf16);
MAXTEXT_ATTENTION_ENTRY(bf16, float);
MAXTEXT_ATTENTION_ENTRY(bf16, fp16);
#if MAXTEXT_KERNEL_DEFINITIONS
#define MAXTEXT_ATTENTION_DEFINE(A, KV) \
  MAXTEXT_ATTENTION_ENTRY(A, KV) { attention<A, KV>(threads, q, k, v, mask, opt, sinks, out); }
MAXTEXT_ATTENTION_DEFINE(float, float)
MAXTEXT_ATTENTION_DEFINE(float, bf16)
MAXTEXT_ATTENTION_DEFINE(float, fp16)
MAXTEXT_ATTENTION_DEFINE(bf16, bf16)
MAXTEXT_ATTENTION_DEFINE(bf16, float)
MAXTEXT_ATTENTION_DEFINE(bf16, fp16)
#undef MAXTEXT_ATTENTION_DEFINE
#endif
#undef MAXTEXT_ATTENTION_ENTRY

}  // namespace maxtext::cpu::attn
