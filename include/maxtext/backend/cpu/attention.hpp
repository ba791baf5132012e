// backend/cpu/attention.hpp: MaxText AttentionOp on the CPU (spec attention.md §1-2): an online softmax over blocks
// of keys, no [T, S] score matrix. One work item is (batch row, kv head, query): the G = N/K query heads that share
// a kv head are handled together, so each key and value row is loaded (and converted to f32) once for all of them.
// Per block of kW keys: logits for every head, one running-max update,
// one vectorised exp, then the probability-weighted sum of the value rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/cpu/parallel.hpp"
#include "maxtext/backend/cpu/vec.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cpu::attn {

using vec::fbatch;
inline constexpr std::int64_t kBlk = static_cast<std::int64_t>(vec::W);  ///< keys per block: one vector of logits

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
          if (vec_dot) {
            for (std::int64_t j = 0; j < nb; ++j) {
              fbatch s(0.0f);
              for (std::int64_t d = 0; d < Dq; d += kBlk) {
                s = xsimd::fma(fbatch::load_unaligned(qg + d), fbatch::load_unaligned(krow[j] + d), s);
              }
              logit[j] = xsimd::hadd(s);  // (xsimd 8's haddp permutes AVX-512 lanes: not used)
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
          for (std::int64_t j = 0; j < nb; ++j) {
            if (prob[j] != 0.0f) vec::axpy(prob[j], vrow[j], ag, Dv);
          }
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
