// backend/common/kernel_math.hpp: the arithmetic inside the fused kernels, written once as __host__ __device__
// functions so that the CPU and CUDA backends evaluate the same expressions and the host unit tests
// (tests/backend/test_kernel_math.cpp) check what the GPU kernels run. Spec: attention.md §1-2 (mask, logits,
// softmax with sinks), rope.md (pairings), docs/backends.md (sampling rule).
#pragma once

#include <cmath>
#include <cstdint>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext::kmath {

MAXTEXT_HD inline float neg_inf() { return -INFINITY; }

// ---- attention mask ------------------------------------------------------------------------------------------
/// Keys [lo, hi) that the position terms of the mask allow for a query at cache index qi (attention.md §2,
/// evaluated on cache indices): s < kv_len; causal: s <= qi; sliding window W: qi - W < s <= qi; chunk C:
/// floor(s/C) == floor(qi/C) and s <= qi. The window terms imply causality, as in MaxText.
struct KeyRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
};
MAXTEXT_HD inline KeyRange key_range(std::int64_t qi, std::int64_t kv_len, bool causal, std::int64_t window,
                                     std::int64_t chunk) {
  KeyRange r{0, kv_len};
  if (causal || window > 0 || chunk > 0) r.hi = r.hi < qi + 1 ? r.hi : qi + 1;
  if (window > 0 && qi - window + 1 > r.lo) r.lo = qi - window + 1;
  if (chunk > 0 && (qi / chunk) * chunk > r.lo) r.lo = (qi / chunk) * chunk;
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}
/// The segment term: key segment equal to the query's and not negative.
MAXTEXT_HD inline bool segment_allows(std::int32_t q_segment, std::int32_t kv_segment) {
  return kv_segment == q_segment && kv_segment >= 0;
}

// ---- logits ---------------------------------------------------------------------------------------------------
/// q.k (accumulated in f32) to the logit the softmax sees: rounded to A unless float32_qk_product, soft-capped,
/// rounded to A again unless either f32 flag is set (attention.md §1 steps 1-4).
template <class A>
MAXTEXT_HD inline float attention_logit(float dot, float soft_cap, bool float32_qk_product, bool float32_logits) {
  float l = dot;
  if (!float32_qk_product) l = round_to<A>(l);
  if (soft_cap > 0.0f) l = math::soft_cap(l, soft_cap);
  if (!float32_qk_product && !float32_logits) l = round_to<A>(l);
  return l;
}

// ---- online softmax -------------------------------------------------------------------------------------------
/// Running maximum m and denominator l = sum_s e^(logit_s - m) of a softmax evaluated one key (or one tile of
/// keys) at a time; the numerator accumulator lives with the caller and is rescaled by the returned factors.
struct SoftmaxState {
  float m;
  float l;
};
MAXTEXT_HD inline SoftmaxState softmax_init() { return {neg_inf(), 0.0f}; }
/// Raise the running maximum to `mx` if larger; returns the factor (<= 1) that l has been and the accumulator must
/// be multiplied by (1 when the maximum does not move; 0 when nothing was accumulated yet).
MAXTEXT_HD inline float softmax_rescale(SoftmaxState& s, float mx) {
  if (!(mx > s.m)) return 1.0f;
  const float c = expf(s.m - mx);  // e^-inf = 0 on the first key
  s.l *= c;
  s.m = mx;
  return c;
}
/// e^(logit - m) of one key (after softmax_rescale made m >= logit), added to l.
MAXTEXT_HD inline float softmax_weight(SoftmaxState& s, float logit) {
  const float e = expf(logit - s.m);
  s.l += e;
  return e;
}
/// The sink column (attention.md §1 step 6): one more logit, never masked, with a zero value row. Returns the
/// accumulator factor.
MAXTEXT_HD inline float softmax_add_sink(SoftmaxState& s, float sink) {
  const float c = softmax_rescale(s, sink);
  s.l += expf(sink - s.m);
  return c;
}
/// Weight of a partial state with maximum m_i when merged under the global maximum M >= m_i.
MAXTEXT_HD inline float softmax_merge_factor(float m_i, float M) { return m_i == neg_inf() ? 0.0f : expf(m_i - M); }
/// True when no key (and no sink) contributed: MaxText's replaced logits are then all equal and the output is the
/// plain average of the values over [0, kv_len) (with sinks such a row is 0 and this is false).
MAXTEXT_HD inline bool softmax_empty(const SoftmaxState& s) { return s.l == 0.0f || s.m == neg_inf(); }

// ---- rotary ---------------------------------------------------------------------------------------------------
/// Lanes of pair i (of r/2) for a layout: read (in_a, in_b), write (out_a, out_b).
struct RotaryLanes {
  std::int64_t in_a, in_b, out_a, out_b;
};
MAXTEXT_HD inline RotaryLanes rotary_lanes(RopeLayout layout, std::int64_t i, std::int64_t half) {
  switch (layout) {
    case RopeLayout::interleaved: return {2 * i, 2 * i + 1, 2 * i, 2 * i + 1};
    case RopeLayout::interleaved_to_halves: return {2 * i, 2 * i + 1, i, i + half};
    case RopeLayout::half_split: break;
  }
  return {i, i + half, i, i + half};
}
/// Rotate (a, b) by the angle with cosine c and sine s (both already rounded to A when the table says so):
/// out_a = a c - b s, out_b = b c + a s, each product and sum rounded to A for the default (half-split) RoPE
/// computed in the input dtype; then multiplied by post_scale (YaRN attention scaling). Results in f32; the caller
/// rounds once when storing.
template <class A>
MAXTEXT_HD inline void rotate_pair(RopeLayout layout, bool in_input_dtype, float post_scale, float a, float b, float c,
                                   float s, float& out_a, float& out_b) {
  if (layout == RopeLayout::half_split && in_input_dtype) {
    out_a = round_to<A>(round_to<A>(a * c) - round_to<A>(b * s));
    out_b = round_to<A>(round_to<A>(b * c) + round_to<A>(a * s));
  } else {
    out_a = a * c - b * s;
    out_b = b * c + a * s;
  }
  if (post_scale != 1.0f) {
    out_a *= post_scale;
    out_b *= post_scale;
  }
}

// ---- weights --------------------------------------------------------------------------------------------------
/// Element k of a row of Q8_0 blocks: d * qs (f32 product, as every backend dequantises).
MAXTEXT_HD inline float q8_0_at(const q8_0* row, std::int64_t k) {
  const q8_0& blk = row[k / q8_0::block];
  return static_cast<float>(blk.d) * static_cast<float>(blk.qs[k % q8_0::block]);
}
/// Element k of a weight row of any storage type, as f32.
template <class W>
MAXTEXT_HD inline float weight_at(const W* row, std::int64_t k) {
  if constexpr (std::is_same_v<W, q8_0>) {
    return q8_0_at(row, k);
  } else {
    return to_float(row[k]);
  }
}

// ---- sampling -------------------------------------------------------------------------------------------------
/// Order-preserving map of a float to an unsigned integer (-0 and +0 map alike; NaN sorts above +inf).
MAXTEXT_HD inline std::uint32_t ordered_bits(float f) {
  if (f == 0.0f) f = 0.0f;
  const std::uint32_t u = detail::f32_bits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
/// Inverse of ordered_bits.
MAXTEXT_HD inline float ordered_float(std::uint32_t o) {
  return detail::bits_f32((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}
/// A key that sorts candidates as the sampler does: larger logit first, then lower id. Keys are unique per row.
MAXTEXT_HD inline std::uint64_t sample_key(float logit, std::int32_t id) {
  return (static_cast<std::uint64_t>(ordered_bits(logit)) << 32) |
         static_cast<std::uint64_t>(0xffffffffu - static_cast<std::uint32_t>(id));
}
MAXTEXT_HD inline std::int32_t sample_key_id(std::uint64_t key) {
  return static_cast<std::int32_t>(0xffffffffu - static_cast<std::uint32_t>(key & 0xffffffffu));
}

/// Largest key threshold t in [lo, 2^64) with pred(t) true, for a predicate that is true at lo and, moving up, turns
/// false once (count or mass of the candidates with key >= t, which only change at candidate keys, so the answer is
/// a candidate's key). 64 evaluations at most.
template <class Pred>
MAXTEXT_HD inline std::uint64_t bisect_keys(std::uint64_t lo, Pred&& pred) {
  std::uint64_t hi = ~std::uint64_t{0};
  if (pred(hi)) return hi;
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (pred(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/// Draw one token from a row of logits by the SampleOptions rule without sorting, through reductions a backend
/// provides over the row (a loop on the host, a block-wide reduction on a GPU):
///   r.any_nan()                       true when a logit is NaN (the draw is then -1)
///   r.max_key()                       largest sample_key of the row (its id is the argmax, its logit the max)
///   r.count_ge(t)                     number of candidates with key >= t
///   r.mass_ge(t, m, temperature)      sum over key >= t of exp((logit - m) / temperature), in double
/// `n` is the row length and `u` the row's uniform draw in [0, 1). Every thread of a block must call this with the
/// same arguments (the control flow depends only on reduced values).
template <class Reducer>
MAXTEXT_HD inline std::int32_t sample_by_bisection(Reducer& r, std::int64_t n, const SampleOptions& o, float u) {
  if (r.any_nan()) return -1;
  const std::uint64_t top = r.max_key();
  if (o.temperature == 0.0f || n == 1) return sample_key_id(top);
  const double mx = static_cast<double>(ordered_float(static_cast<std::uint32_t>(top >> 32)));
  const double temp = static_cast<double>(o.temperature);
  std::uint64_t cut = 0;  // keep keys >= cut
  if (o.top_k > 0 && o.top_k < n) {
    const std::int64_t k = o.top_k;
    cut = bisect_keys(0, [&](std::uint64_t t) { return r.count_ge(t) >= k; });
  }
  double total = r.mass_ge(cut, mx, temp);
  if (o.top_p < 1.0f) {
    const double need = static_cast<double>(o.top_p) * total;
    cut = bisect_keys(cut, [&](std::uint64_t t) { return r.mass_ge(t, mx, temp) >= need; });
    total = r.mass_ge(cut, mx, temp);
  }
  const double target = static_cast<double>(u) * total;
  if (!(r.mass_ge(cut, mx, temp) > target)) return sample_key_id(cut);
  return sample_key_id(bisect_keys(cut, [&](std::uint64_t t) { return r.mass_ge(t, mx, temp) > target; }));
}

// ---- mixture-of-experts routing ----------------------------------------------------------------------------------
/// Index of the largest v[i] over i in [0, n) with skip(i) false; ties (and -inf) to the lowest index; -1 if none.
template <class Skip>
MAXTEXT_HD inline std::int64_t argmax_first(const float* v, std::int64_t n, Skip&& skip) {
  std::int64_t best = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    if (skip(i)) continue;
    if (best < 0 || v[i] > v[best]) best = i;
  }
  return best;
}

/// Routing of one token by the MoeRouting rule (backend/ops.hpp; moe.md GateLogit + get_topk) without sorting:
/// z [E] gate logits of type G, bias [E] or nullptr; s, b: [E] f32 scratch; writes idx [k], w [k] and, if not
/// nullptr, scores [E] (the biased scores). top_k by repeated first-maximum scans (k and the group count are small).
template <class G, class A>
MAXTEXT_HD inline void moe_route_row(const G* z, const G* bias, const MoeRouting& r, std::int64_t E, float* s, float* b,
                                     std::int32_t* idx, float* w, float* scores) {
  const std::int64_t k = r.num_experts_per_tok;
  for (std::int64_t e = 0; e < E; ++e) s[e] = to_float(z[e]);
  if (r.score_softmax) {
    float mx = neg_inf(), sum = 0.0f;
    for (std::int64_t e = 0; e < E; ++e) mx = s[e] > mx ? s[e] : mx;
    for (std::int64_t e = 0; e < E; ++e) sum += (s[e] = expf(s[e] - mx));
    for (std::int64_t e = 0; e < E; ++e) s[e] = round_to<G>(s[e] / sum);
  } else if (r.score != Activation::linear) {
    for (std::int64_t e = 0; e < E; ++e) s[e] = round_to<G>(math::activate(r.score, s[e]));
  }
  for (std::int64_t e = 0; e < E; ++e) b[e] = bias == nullptr ? s[e] : round_to<G>(s[e] + to_float(bias[e]));
  if (scores != nullptr) {
    for (std::int64_t e = 0; e < E; ++e) scores[e] = b[e];
  }
  if (r.deepseek && r.n_groups > 0) {
    const std::int64_t per = E / r.n_groups;
    // Group score: sum of the group's two largest b (f32). Keep the topk_groups best groups (ties: lower group).
    float gs[64];  // n_groups <= 64 (checked by the layer's configuration)
    bool keep[64];
    for (std::int64_t g = 0; g < r.n_groups; ++g) {
      float t1 = neg_inf(), t2 = neg_inf();
      for (std::int64_t e = g * per; e < (g + 1) * per; ++e) {
        if (b[e] > t1) {
          t2 = t1;
          t1 = b[e];
        } else if (b[e] > t2) {
          t2 = b[e];
        }
      }
      gs[g] = t1 + t2;
      keep[g] = false;
    }
    for (std::int64_t j = 0; j < r.topk_groups; ++j) {
      const std::int64_t g = argmax_first(gs, r.n_groups, [&](std::int64_t i) { return keep[i]; });
      if (g >= 0) keep[g] = true;
    }
    for (std::int64_t e = 0; e < E; ++e) {
      if (!keep[e / per]) b[e] = neg_inf();
    }
  }
  float wsum = 0.0f;
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t e = argmax_first(b, E, [&](std::int64_t i) {
      for (std::int64_t q = 0; q < j; ++q) {
        if (idx[q] == i) return true;
      }
      return false;
    });
    idx[j] = static_cast<std::int32_t>(e);
    w[j] = r.deepseek ? s[e] : b[e];
  }
  if (r.softmax_weights) {
    float mx = neg_inf(), sum = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) mx = w[j] > mx ? w[j] : mx;
    for (std::int64_t j = 0; j < k; ++j) sum += (w[j] = expf(w[j] - mx));
    for (std::int64_t j = 0; j < k; ++j) w[j] = round_to<A>(w[j] / sum);
  }
  if (r.normalize) {
    for (std::int64_t j = 0; j < k; ++j) wsum = round_to<G>(wsum + w[j]);
    const float den = round_to<G>(wsum + r.normalize_eps);
    for (std::int64_t j = 0; j < k; ++j) w[j] = round_to<G>(w[j] / den);
  }
  if (r.scale != 1.0f) {
    const float sc = round_to<G>(r.scale);
    for (std::int64_t j = 0; j < k; ++j) w[j] = round_to<G>(w[j] * sc);
  }
}


// ---- manifold-constrained hyper-connections -------------------------------------------------------------------
/// The next permutation of p[0..k) in lexicographic order; false (p unchanged) after the last one. From the
/// identity it enumerates itertools.permutations(range(k)), the order of MaxText's get_permutation_matrices.
MAXTEXT_HD inline bool next_permutation(int* p, std::int64_t k) {
  std::int64_t i = k - 2;
  while (i >= 0 && p[i] >= p[i + 1]) --i;
  if (i < 0) return false;
  std::int64_t j = k - 1;
  while (p[j] <= p[i]) --j;
  int t = p[i];
  p[i] = p[j];
  p[j] = t;
  for (std::int64_t a = i + 1, b = k - 1; a < b; ++a, --b) {
    t = p[a];
    p[a] = p[b];
    p[b] = t;
  }
  return true;
}

/// softmax over n values in place, f32 (jax.nn.softmax: exp(x - max) / sum).
MAXTEXT_HD inline void softmax_inplace(float* v, std::int64_t n) {
  float mx = neg_inf(), sum = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
  for (std::int64_t i = 0; i < n; ++i) sum += (v[i] = expf(v[i] - mx));
  for (std::int64_t i = 0; i < n; ++i) v[i] /= sum;
}

/// One token's mHC mappings (MaxText mhc.py `mapping`, `res_mapping`, `sinkhorn`), from its projections
/// hp [k], hq [k] (pre, post) and hr [k*k or k!] (residual), each value already of type A:
///   pre_i  = r(r(sigmoid(v_i)) + 1e-6),  v = r(r(pre_scale * hp) + pre_beta)
///   post_i = r(2 * r(sigmoid(v_i))),     v = r(r(post_scale * hq) + post_beta)
///   full:  t = r(r(res_scale * hr) + res_beta) as k x k (row i = input stream); res = r(sinkhorn_f32(t))
///   lite:  w = r(softmax_f32(r(r(res_scale * hr) + res_beta))); res[i][j] = r(sum_n w_n [perm_n(i) == j])
/// with r the rounding to A (each MaxText op in the activation dtype; identity in f32). Sinkhorn: softmax over each
/// row, + 1e-6, divide each column by (its sum + 1e-6), then `iterations - 1` rounds of rows then columns.
/// Writes pre [k], post [k], res [k*k] (res[i*k + j]: weight of input stream i in output stream j).
template <class A>
MAXTEXT_HD inline void mhc_maps_row(const MhcOptions& o, const MhcCoefficients<A>& c, const A* hp, const A* hq,
                                    const A* hr, A* pre, A* post, A* res) {
  const std::int64_t k = o.k;
  const float ps = to_float(c.pre_scale[0]), qs = to_float(c.post_scale[0]), rs = to_float(c.res_scale[0]);
  for (std::int64_t i = 0; i < k; ++i) {
    const float v = round_to<A>(round_to<A>(ps * to_float(hp[i])) + to_float(c.pre_beta[i]));
    pre[i] = from_float<A>(round_to<A>(math::sigmoid(v)) + 1e-6f);
    const float u = round_to<A>(round_to<A>(qs * to_float(hq[i])) + to_float(c.post_beta[i]));
    post[i] = from_float<A>(2.0f * round_to<A>(math::sigmoid(u)));
  }
  float t[kMhcMaxStreams * kMhcMaxStreams > 120 ? kMhcMaxStreams * kMhcMaxStreams : 120];
  const std::int64_t R = mhc_res_width(o);
  for (std::int64_t n = 0; n < R; ++n) {
    t[n] = round_to<A>(round_to<A>(rs * to_float(hr[n])) + to_float(c.res_beta[n]));
  }
  if (o.lite) {
    softmax_inplace(t, R);
    float acc[kMhcMaxLiteStreams * kMhcMaxLiteStreams] = {};
    int perm[kMhcMaxLiteStreams];
    for (std::int64_t i = 0; i < k; ++i) perm[i] = static_cast<int>(i);
    std::int64_t n = 0;
    do {
      const float w = round_to<A>(t[n++]);
      for (std::int64_t i = 0; i < k; ++i) acc[i * k + perm[i]] += w;
    } while (next_permutation(perm, k));
    for (std::int64_t i = 0; i < k * k; ++i) res[i] = from_float<A>(acc[i]);
    return;
  }
  constexpr float eps = 1e-6f;
  for (std::int64_t i = 0; i < k; ++i) {
    softmax_inplace(t + i * k, k);
    for (std::int64_t j = 0; j < k; ++j) t[i * k + j] += eps;
  }
  const auto cols = [&] {
    for (std::int64_t j = 0; j < k; ++j) {
      float s = 0.0f;
      for (std::int64_t i = 0; i < k; ++i) s += t[i * k + j];
      for (std::int64_t i = 0; i < k; ++i) t[i * k + j] /= (s + eps);
    }
  };
  cols();
  for (std::int64_t it = 1; it < o.sinkhorn_iterations; ++it) {
    for (std::int64_t i = 0; i < k; ++i) {
      float s = 0.0f;
      for (std::int64_t j = 0; j < k; ++j) s += t[i * k + j];
      for (std::int64_t j = 0; j < k; ++j) t[i * k + j] /= (s + eps);
    }
    cols();
  }
  for (std::int64_t i = 0; i < k * k; ++i) res[i] = from_float<A>(t[i]);
}

// ---- Engram (layers/engram.hpp; BackendEngram) ------------------------------------------------------------------
/// Engram's gate (engram.py Engram.__call__ step 5) from the f32 dot product of one stream of the normalised query
/// and key: s = r(r(dot) / r(sqrt D)); g = r(sigmoid(r(sqrt(max(|s|, r(1e-6)))) * sign(s))), r = rounding to A
/// (each jnp op of the module runs in the activation type; the Python scalars are weakly typed).
template <class A>
MAXTEXT_HD inline float engram_gate(float dot, float sqrt_d) {
  const float s = round_to<A>(round_to<A>(dot) / round_to<A>(sqrt_d));
  const float mag = round_to<A>(sqrtf(fmaxf(fabsf(s), round_to<A>(1e-6f))));
  const float g = s > 0.0f ? mag : (s < 0.0f ? -mag : 0.0f);
  return round_to<A>(math::sigmoid(g));
}

// ---- Gated DeltaNet (families/qwen3_next/qwen3_next.hpp; BackendGatedDeltaNet) ----------------------------------------------
/// The gates of one token and value head (qwen3.py): beta = sigmoid(b), and the state decay exp(g) with the
/// log-decay g = -exp(a_log) * softplus(a + dt_bias).
/// The log-decay g = -exp(a_log) * softplus(a + dt_bias) (< 0); the chunked form sums these.
MAXTEXT_HD inline float gdn_log_decay(float a, float a_log, float dt_bias) {
  return -expf(a_log) * math::softplus(a + dt_bias);
}
MAXTEXT_HD inline void gdn_gates(float a, float b, float a_log, float dt_bias, float& decay, float& beta) {
  beta = math::sigmoid(b);
  decay = expf(gdn_log_decay(a, a_log, dt_bias));
}
/// The factor that L2-normalises a vector with sum of squares `ss` (MaxText's l2norm, eps fixed at 1e-6).
MAXTEXT_HD inline float gdn_l2_factor(float ss) { return 1.0f / sqrtf(ss + 1e-6f); }

// ---- DeepSeek-V4 compressed attention (families/deepseek4/deepseek4.hpp; BackendCompressedAttention) ----------------------
/// One feature c of pooled block j (attention_compressed.py: the HCA window, or csa_overlap_pooling's 2r-entry
/// window). `kv` / `gate` point at token 0 of the sequence (rows `stride` elements apart, F features), `bias` is
/// position_bias [r, F]. Entries: overlap == false (F = d): tokens j*r + o, feature c, bias row o; overlap == true
/// (F = 2d): tokens (j-1)*r + o of the previous block (j > 0) at feature c, then tokens j*r + o at feature d + c.
/// logit = r_A(gate + bias); weights = r_A(softmax over the entries, f32); result = r_A(sum of weight * value).
template <class A>
MAXTEXT_HD inline float compress_pool_feature(const A* kv, const A* gate, std::int64_t stride, const A* bias,
                                              std::int64_t F, std::int64_t r, bool overlap, std::int64_t d,
                                              std::int64_t j, std::int64_t c) {
  // Entry e < n: the previous block's entries come first (overlap, j > 0).
  const std::int64_t prev = overlap && j > 0 ? r : 0, n = prev + r;
  const auto entry = [&](std::int64_t e, float& value, float& logit) {
    const bool before = e < prev;
    const std::int64_t o = before ? e : e - prev;
    const std::int64_t tok = before ? (j - 1) * r + o : j * r + o;
    const std::int64_t col = overlap && !before ? d + c : c;
    value = to_float(kv[tok * stride + col]);
    logit = round_to<A>(to_float(gate[tok * stride + col]) + to_float(bias[o * F + col]));
  };
  float mx = neg_inf(), v = 0.0f, l = 0.0f;
  for (std::int64_t e = 0; e < n; ++e) {
    entry(e, v, l);
    mx = l > mx ? l : mx;
  }
  float sum = 0.0f;
  for (std::int64_t e = 0; e < n; ++e) {
    entry(e, v, l);
    sum += expf(l - mx);
  }
  float acc = 0.0f;
  for (std::int64_t e = 0; e < n; ++e) {
    entry(e, v, l);
    acc += round_to<A>(expf(l - mx) / sum) * v;
  }
  return round_to<A>(acc);
}

/// The indexer's score of one block (attention_compressed.py DeepseekV4Indexer, f32): sum over the H heads of
/// relu(q_h . block) * score_scale * (w_h * weight_scale); q rows `q_head_stride` apart.
template <class A>
MAXTEXT_HD inline float indexer_score(const A* q, std::int64_t q_head_stride, const A* w, const A* block,
                                      std::int64_t H, std::int64_t d, float score_scale, float weight_scale) {
  float total = 0.0f;
  for (std::int64_t h = 0; h < H; ++h) {
    float dot = 0.0f;
    for (std::int64_t i = 0; i < d; ++i) dot += to_float(q[h * q_head_stride + i]) * to_float(block[i]);
    const float relu = dot > 0.0f ? dot : 0.0f;
    total += relu * score_scale * (to_float(w[h]) * weight_scale);
  }
  return total;
}

/// Keep the k best (score desc, index asc: jax.lax.top_k's order) of the scores of blocks [0, n) in idx (k slots,
/// -1 beyond n): an insertion pass per block, comparing through `score(j)`.
template <class Score>
MAXTEXT_HD inline void topk_blocks(std::int64_t n, std::int64_t k, std::int32_t* idx, Score&& score) {
  std::int64_t filled = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const float s = score(j);
    // Blocks come in increasing j: a new one goes after every kept block with a score >= s.
    std::int64_t at = filled;
    while (at > 0 && score(idx[at - 1]) < s) --at;
    if (at >= k) continue;
    const std::int64_t last = filled < k ? filled : k - 1;
    for (std::int64_t i = last; i > at; --i) idx[i] = idx[i - 1];
    idx[at] = static_cast<std::int32_t>(j);
    if (filled < k) ++filled;
  }
  for (std::int64_t i = filled; i < k; ++i) idx[i] = -1;
}

}  // namespace maxtext::kmath
