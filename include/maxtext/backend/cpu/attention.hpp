// backend/cpu/attention.hpp: MaxText AttentionOp on the CPU (spec attention.md §1-2): an online softmax over blocks
// of keys, no [T, S] score matrix. One work item is (batch row, kv head, query): the G = N/K query heads that share
// a kv head are handled together, so each key and value row is loaded (and converted to f32) once for all of them.
// Per block of kW keys: logits for every head (kW dot products reduced into one vector), one running-max update,
// one vectorised exp, then the probability-weighted sum of the value rows.
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
#include "maxtext/backend/cpu/vec.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cpu::attn {

using vec::fbatch;
inline constexpr std::int64_t kBlk = static_cast<std::int64_t>(vec::W);  ///< keys per block: one vector of logits

/// logit[j] = q . k_j for a full block of kBlk keys: kBlk vector accumulators over d, then one transposing
/// reduction into a single vector (lane j = key j) instead of kBlk horizontal sums.
MAXTEXT_INLINE void block_logits(const float* q, const float* const* krow, std::int64_t Dq, float* logit) {
  fbatch acc[kBlk];
  for (std::int64_t j = 0; j < kBlk; ++j) acc[j] = fbatch(0.0f);
  for (std::int64_t d = 0; d < Dq; d += kBlk) {
    const fbatch qv = fbatch::load_unaligned(q + d);
    for (std::int64_t j = 0; j < kBlk; ++j) acc[j] = xsimd::fma(qv, fbatch::load_unaligned(krow[j] + d), acc[j]);
  }
#if defined(__AVX512F__)
  static_assert(kBlk == 16, "AVX-512 batches hold 16 floats");
  __m512 s4[4];
  for (int k = 0; k < 4; ++k) {
    __m512 t[2];
    for (int h = 0; h < 2; ++h) {
      const __m512 a = acc[4 * k + 2 * h], b = acc[4 * k + 2 * h + 1];
      t[h] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // per 128-bit lane: a02 b02 a13 b13
    }
    s4[k] = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));  // per lane: keys 4k..4k+3
  }
  const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(s4[0], s4[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(s4[0], s4[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(s4[2], s4[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(s4[2], s4[3], _MM_SHUFFLE(3, 2, 3, 2)));
  _mm512_store_ps(logit, _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1))));
#else
  for (std::int64_t j = 0; j < kBlk; ++j) logit[j] = xsimd::hadd(acc[j]);
#endif
}

/// acc[0, Dv) += sum_j prob[j] * v_j over the block's keys, the accumulator kept in registers per 4-vector chunk.
MAXTEXT_INLINE void accumulate_values(const float* prob, const float* const* vrow, std::int64_t nb, std::int64_t Dv,
                                      float* acc) {
  if (Dv % kBlk != 0) {
    for (std::int64_t j = 0; j < nb; ++j) {
      if (prob[j] != 0.0f) vec::axpy(prob[j], vrow[j], acc, Dv);
    }
    return;
  }
  std::int64_t c = 0;
  for (; c + 4 * kBlk <= Dv; c += 4 * kBlk) {
    fbatch a0 = fbatch::load_unaligned(acc + c), a1 = fbatch::load_unaligned(acc + c + kBlk),
           a2 = fbatch::load_unaligned(acc + c + 2 * kBlk), a3 = fbatch::load_unaligned(acc + c + 3 * kBlk);
    for (std::int64_t j = 0; j < nb; ++j) {
      if (prob[j] == 0.0f) continue;  // masked key (its value row may not exist)
      const fbatch p(prob[j]);
      const float* v = vrow[j] + c;
      a0 = xsimd::fma(p, fbatch::load_unaligned(v), a0);
      a1 = xsimd::fma(p, fbatch::load_unaligned(v + kBlk), a1);
      a2 = xsimd::fma(p, fbatch::load_unaligned(v + 2 * kBlk), a2);
      a3 = xsimd::fma(p, fbatch::load_unaligned(v + 3 * kBlk), a3);
    }
    a0.store_unaligned(acc + c);
    a1.store_unaligned(acc + c + kBlk);
    a2.store_unaligned(acc + c + 2 * kBlk);
    a3.store_unaligned(acc + c + 3 * kBlk);
  }
  for (; c < Dv; c += kBlk) {
    fbatch a = fbatch::load_unaligned(acc + c);
    for (std::int64_t j = 0; j < nb; ++j) {
      if (prob[j] != 0.0f) a = xsimd::fma(fbatch(prob[j]), fbatch::load_unaligned(vrow[j] + c), a);
    }
    a.store_unaligned(acc + c);
  }
}

/// out[b,t,n,:] = sum_s e^(l_s - m) v[b,s,n/G,:] / (sum_s e^(l_s - m) + sink term), l = q.k (q already scaled),
/// masked keys removed; a row with every key masked averages all kv_len keys (MaxText's finite mask value), or is 0
/// with sinks. q [B,T,N,Dq], k [B,S,K,Dq], v [B,S,K,Dv], out [B,T,N,Dv]; last axes contiguous.
template <class A>
void attention(int threads, View<const A, 4> q, View<const A, 4> k, View<const A, 4> v, const AttentionMask& mask,
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

  parallel_for(items, nt, [&](std::int64_t w0, std::int64_t w1) {
    // Per-thread buffers: q rows, accumulators, running stats (G each) and one block of keys/values in f32.
    const std::size_t need = static_cast<std::size_t>(G * (Dq + Dv + 2 * kBlk) + kBlk * (Dq + Dv) + 4 * kBlk) * 4;
    float* base = reinterpret_cast<float*>(thread_scratch(need, 0));
    float* qf = base;                    // [G][Dq]
    float* acc = qf + G * Dq;            // [G][Dv]
    float* mrun = acc + G * Dv;          // [G] running max (padded to kBlk)
    float* lrun = mrun + G * kBlk;       // [G] running sum
    float* kf = lrun + G * kBlk;         // [kBlk][Dq]
    float* vf = kf + kBlk * Dq;          // [kBlk][Dv]
    alignas(64) float logit[kBlk];
    alignas(64) float prob[kBlk];
    bool live[kBlk];

    for (std::int64_t w = w0; w < w1; ++w) {
      // Queries in zigzag order (0, T-1, 1, T-2, ...) so that contiguous chunks get equal causal work.
      const std::int64_t b = w / (K * T), kh = (w / T) % K, i = w % T;
      const std::int64_t t = (i % 2 == 0) ? i / 2 : T - 1 - i / 2;
      const std::int64_t start = mask.q_start(b), len = mask.kv_len(b);
      const std::int64_t qi = start + t;
      std::int64_t lo = 0, hi = len;
      if (mask.causal) hi = std::min(hi, qi + 1);
      if (mask.sliding_window > 0) lo = std::max(lo, qi - mask.sliding_window + 1);
      if (mask.chunk > 0) {  // same chunk as the query (the upper end matters only without the causal term)
        lo = std::max(lo, (qi / mask.chunk) * mask.chunk);
        hi = std::min(hi, (qi / mask.chunk + 1) * mask.chunk);
      }
      const std::int32_t qseg = mask.q_segment.empty() ? 0 : mask.q_segment(b, t);
      for (std::int64_t g = 0; g < G; ++g) {
        vec::to_f32(&q(b, t, kh * G + g, 0), qf + g * Dq, Dq);
        std::fill(acc + g * Dv, acc + (g + 1) * Dv, 0.0f);
        mrun[g] = kNegInf;
        lrun[g] = 0.0f;
      }
      for (std::int64_t s0 = lo; s0 < hi; s0 += kBlk) {
        const std::int64_t nb = std::min(kBlk, hi - s0);
        bool any = false;
        for (std::int64_t j = 0; j < kBlk; ++j) {
          bool ok = j < nb;
          if (ok && !mask.kv_segment.empty()) {
            const std::int32_t ks = mask.kv_segment(b, s0 + j);
            ok = ks == qseg && ks >= 0;
          }
          live[j] = ok;
          any = any || ok;
        }
        if (!any) continue;
        // Key and value rows of the block as f32 (pointers straight into the cache when A is float).
        const float* krow[kBlk];
        const float* vrow[kBlk];
        for (std::int64_t j = 0; j < nb; ++j) {
          if constexpr (std::is_same_v<A, float>) {
            krow[j] = &k(b, s0 + j, kh, 0);
            vrow[j] = &v(b, s0 + j, kh, 0);
          } else {
            vec::to_f32(&k(b, s0 + j, kh, 0), kf + j * Dq, Dq);
            vec::to_f32(&v(b, s0 + j, kh, 0), vf + j * Dv, Dv);
            krow[j] = kf + j * Dq;
            vrow[j] = vf + j * Dv;
          }
        }
        for (std::int64_t j = nb; j < kBlk; ++j) krow[j] = vrow[j] = nullptr;
        for (std::int64_t g = 0; g < G; ++g) {
          const float* qg = qf + g * Dq;
          if (vec_dot && nb == kBlk) {
            block_logits(qg, krow, Dq, logit);
          } else if (vec_dot) {
            for (std::int64_t j = 0; j < nb; ++j) {
              fbatch s(0.0f);
              for (std::int64_t d = 0; d < Dq; d += kBlk) {
                s = xsimd::fma(fbatch::load_unaligned(qg + d), fbatch::load_unaligned(krow[j] + d), s);
              }
              logit[j] = xsimd::hadd(s);
            }
            for (std::int64_t j = nb; j < kBlk; ++j) logit[j] = 0.0f;
          } else {
            for (std::int64_t j = 0; j < kBlk; ++j) logit[j] = j < nb ? vec::dot(qg, krow[j], Dq) : 0.0f;
          }
          // Rounding and capping per MaxText's dtype flow, then the mask (after the cap, which would map -inf
          // to -cap).
          float bm = kNegInf;
          for (std::int64_t j = 0; j < kBlk; ++j) {
            float l = logit[j];
            if (!opt.float32_qk_product) l = round_to<A>(l);
            if (opt.soft_cap > 0.0f) l = math::soft_cap(l, opt.soft_cap);
            if (round_logits) l = round_to<A>(l);
            if (!live[j]) l = kNegInf;
            logit[j] = l;
            bm = std::max(bm, l);
          }
          if (bm == kNegInf) continue;
          float* ag = acc + g * Dv;
          if (bm > mrun[g]) {
            const float corr = std::exp(mrun[g] - bm);  // 0 on the first live block (m = -inf)
            lrun[g] *= corr;
            vec::scale(corr, ag, Dv);
            mrun[g] = bm;
          }
          const fbatch e = xsimd::exp(fbatch::load_aligned(logit) - fbatch(mrun[g]));
          e.store_aligned(prob);
          lrun[g] += xsimd::hadd(e);
          accumulate_values(prob, vrow, nb, Dv, ag);
        }
      }
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t n = kh * G + g;
        float* ag = acc + g * Dv;
        float m = mrun[g], l = lrun[g];
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
        A* op = &out(b, t, n, 0);
        if (l == 0.0f || (sinks.empty() && m == kNegInf)) {
          // every key masked: MaxText's replaced logits are all equal, so the softmax is uniform over kv_len.
          std::fill(ag, ag + Dv, 0.0f);
          if (sinks.empty() && len > 0) {
            for (std::int64_t s = 0; s < len; ++s) {
              vec::to_f32(&v(b, s, kh, 0), vf, Dv);
              vec::axpy(1.0f, vf, ag, Dv);
            }
            vec::scale(1.0f / static_cast<float>(len), ag, Dv);
          }
          vec::from_f32(ag, op, Dv);
          continue;
        }
        vec::scale(1.0f / l, ag, Dv);
        vec::from_f32(ag, op, Dv);
      }
    }
  });
}

}  // namespace maxtext::cpu::attn
