// layers/kv_quant.hpp: MaxText's KV-cache quantisation (src/maxtext/inference/kvcache.py, class KVQuant, and the
// dequantisation of get_cached_values): the numerics of one cached token row of keys or values, `heads` heads of `d`
// values each, turned into codes and scales and back.
//
//   scale      = max |x| over the row's head_dim ("dkv": one scale per head) or over the whole row ("heads_and_dkv",
//                MaxText's default): the cache stores it in bfloat16, as MaxText's scale variables are;
//   code       = int8:  rint(x * (127.5 / scale)) saturated to [-128, 127] (MAX_INT8 = 127.5, so the largest value
//                       lands on 127.5, rounds to 128 and saturates to 127, as XLA's float-to-int conversion clamps);
//                int4:  rint(x * (7.5 / scale)) saturated to [-8, 7], two codes a byte (low nibble first);
//                fp8:   float8_e4m3fn(x * (448 / scale)), round to nearest even;
//                x * (MAX / scale) computed in float32 (MAX / scale first), as an f32 model computes it;
//   dequantised = code * step, step = stored scale / MAX as get_cached_values divides it: for int8 / int4 by a
//                Python float (weakly typed), so in bfloat16: bf16(float(stored) / MAX); for fp8 by E4M3_MAX, a
//                NumPy float32 scalar, which promotes the division to float32: float(stored) / 448, not rounded
//                (the AQT einsum applies the step to the other operand; same value, other rounding).
// A row that is all zeros (scale 0) gets codes 0 and dequantises to 0 (MaxText's 0 * inf gives NaN codes there:
// 0 for the integer types after XLA's conversion, NaN for fp8; here 0 for all three).
// A cached row is stored as its codes, then its bf16 scales (at an even offset), padded to 16 bytes: a cache buffer of
// the policy's KV type then holds packed_row_bytes / sizeof(KV) elements per token (AttentionOp::cache_spec), so
// the cache's paging, sharing, cloning and session files handle quantised rows as they handle any other.
// Checked against a float64 restatement of MaxText's KVQuant (tests/reference/kv_quant_reference.py,
// tests/layers/test_kv_quant.cpp); the attention over such a cache: layers/attention_op.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// nvcc does not compile the CPU backend's headers (as backend/vision.hpp): its units (host code only here; CUDA
// refuses a quantised cache) take attend_packed's per-key loops.
#if !defined(__CUDACC__)
#include "maxtext/backend/cpu/attention.hpp"
#include "maxtext/backend/cpu/parallel.hpp"
#include "maxtext/backend/cpu/vec.hpp"
#define MAXTEXT_KV_QUANT_BLOCKED 1
#endif
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/nearest.hpp"
#include "maxtext/core/tensor.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace maxtext::layers {

/// MaxText's kv_quant_dtype.
enum class KVQuantType { int8, int4, fp8 };
/// MaxText's kv_quant_axis: one scale per head ("dkv") or one per token ("heads_and_dkv").
enum class KVQuantAxis { dkv, heads_and_dkv };

namespace detail {
/// float -> float8_e4m3fn bits, round to nearest even; finite values beyond 448 saturate to +-448 (a code of
/// x * 448 / max|x| never exceeds 448 by more than float rounding); NaN -> 0x7f (with the sign).
inline std::uint8_t fp8_e4m3_bits(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (std::isnan(a)) return static_cast<std::uint8_t>(sign | 0x7f);
  if (a >= 448.0f) return static_cast<std::uint8_t>(sign | 0x7e);
  if (a < 0.015625f) {  // below the smallest normal (2^-6): subnormal steps of 2^-9; 8 steps is the smallest normal
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0f)));
  }
  int e = 0;
  (void)std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the unbiased exponent is e - 1
  const int ue = e - 1;
  float m = std::nearbyint(std::ldexp(a, 3 - ue));  // in [8, 16]: the implicit bit and three mantissa bits (exact scaling)
  int be = ue + 7;
  if (m >= 16.0f) {
    m = 8.0f;
    ++be;
  }
  return static_cast<std::uint8_t>(sign | (be << 3) | (static_cast<int>(m) - 8));
}
}  // namespace detail

/// The quantisation of KV-cache rows as MaxText's KVQuant defines it (see the file comment).
struct KVQuant {
  KVQuantType type = KVQuantType::int8;
  KVQuantAxis axis = KVQuantAxis::heads_and_dkv;

  /// From MaxText's config values (kv_quant_dtype, kv_quant_axis); anything else is refused by name.
  static KVQuant parse(std::string_view dtype, std::string_view axis_name) {
    static constexpr std::array<std::string_view, 3> types{"int8", "int4", "fp8"};
    static constexpr std::array<std::string_view, 2> axes{"dkv", "heads_and_dkv"};
    KVQuant q;
    auto it = std::find(types.begin(), types.end(), dtype);
    MAXTEXT_CHECK(it != types.end(), ConfigError, "[KVQuant] kv_quant_dtype '", std::string(dtype),
                  "': expected int8, int4 or fp8", hint(dtype, types));
    q.type = static_cast<KVQuantType>(it - types.begin());
    auto ia = std::find(axes.begin(), axes.end(), axis_name);
    MAXTEXT_CHECK(ia != axes.end(), ConfigError, "[KVQuant] kv_quant_axis '", std::string(axis_name),
                  "': expected dkv or heads_and_dkv (\"\" only without quantize_kvcache)", hint(axis_name, axes));
    q.axis = static_cast<KVQuantAxis>(ia - axes.begin());
    return q;
  }

  /// "int8/heads_and_dkv" and so on.
  std::string name() const {
    return std::string(type == KVQuantType::int8 ? "int8" : type == KVQuantType::int4 ? "int4" : "fp8") + "/" +
           (axis == KVQuantAxis::dkv ? "dkv" : "heads_and_dkv");
  }
  /// MaxText's MAX_INT8, MAX_INT4, E4M3_MAX.
  float max_code() const { return type == KVQuantType::int8 ? 127.5f : type == KVQuantType::int4 ? 7.5f : 448.0f; }
  /// Bytes of codes for a row of `width` values.
  std::int64_t code_bytes(std::int64_t width) const { return type == KVQuantType::int4 ? (width + 1) / 2 : width; }
  /// Scales per row of `heads` heads.
  std::int64_t scales(std::int64_t heads) const { return axis == KVQuantAxis::dkv ? heads : 1; }
  /// Byte offset of a packed row's bf16 scales (after its codes, even).
  std::int64_t scale_offset(std::int64_t width) const { return (code_bytes(width) + 1) / 2 * 2; }
  /// Bytes of a packed row of `heads` heads of `d` values: codes, scales, padding to 16 bytes.
  std::int64_t packed_row_bytes(std::int64_t heads, std::int64_t d) const {
    return (scale_offset(heads * d) + 2 * scales(heads) + 15) / 16 * 16;
  }
  /// Quantise x[heads * d] into the packed row `row` (packed_row_bytes(heads, d) bytes, 2-byte aligned).
  void pack_row(const float* x, std::int64_t heads, std::int64_t d, std::uint8_t* row) const {
    quantize_row(x, heads, d, row, reinterpret_cast<bf16*>(row + scale_offset(heads * d)));
  }
  /// A packed row back to values.
  void unpack_row(const std::uint8_t* row, std::int64_t heads, std::int64_t d, float* out) const {
    dequantize_row(row, reinterpret_cast<const bf16*>(row + scale_offset(heads * d)), heads, d, out);
  }
  /// What a code is multiplied by, from its stored scale (MaxText's get_cached_values): bf16(float(stored) / MAX)
  /// for int8 / int4, float(stored) / 448 for fp8 (see the file comment).
  float step(bf16 stored) const {
    const float s = static_cast<float>(stored) / max_code();
    return type == KVQuantType::fp8 ? s : static_cast<float>(bf16(s));
  }

  /// One token's row x[heads * d] into codes[code_bytes(heads * d)] and scales[scales(heads)].
  void quantize_row(const float* x, std::int64_t heads, std::int64_t d, std::uint8_t* codes, bf16* scale_out) const {
    const std::int64_t groups = scales(heads), len = heads * d / groups;
    if (type == KVQuantType::int4) std::fill(codes, codes + code_bytes(heads * d), std::uint8_t{0});
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* xs = x + g * len;
      float amax = 0.0f;
      for (std::int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(xs[i]));
      scale_out[g] = bf16(amax);
      const float f = amax > 0.0f ? max_code() / amax : 0.0f;
      const std::int64_t at = g * len;
      switch (type) {
        case KVQuantType::int8:
          for (std::int64_t i = 0; i < len; ++i) {
            codes[at + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::clamp(std::nearbyint(xs[i] * f), -128.0f, 127.0f)));
          }
          break;
        case KVQuantType::int4:
          for (std::int64_t i = 0; i < len; ++i) {
            const auto c = static_cast<std::uint8_t>(static_cast<int>(std::clamp(std::nearbyint(xs[i] * f), -8.0f, 7.0f)) & 0xf);
            const std::int64_t e = at + i;
            codes[e / 2] = static_cast<std::uint8_t>(codes[e / 2] | (e % 2 ? c << 4 : c));
          }
          break;
        case KVQuantType::fp8:
          for (std::int64_t i = 0; i < len; ++i) codes[at + i] = detail::fp8_e4m3_bits(xs[i] * f);
          break;
      }
    }
  }

  /// The code of element `i` of a row, as a float (an integer for int8 / int4).
  float code(const std::uint8_t* codes, std::int64_t i) const {
    switch (type) {
      case KVQuantType::int8: return static_cast<float>(static_cast<std::int8_t>(codes[i]));
      case KVQuantType::int4: {
        const int nib = (codes[i / 2] >> (i % 2 ? 4 : 0)) & 0xf;
        return static_cast<float>(nib >= 8 ? nib - 16 : nib);
      }
      case KVQuantType::fp8: return static_cast<float>(fp8_e4m3{codes[i]});
    }
    return 0.0f;
  }

  /// A row's codes and scales back to values: out[i] = code(i) * step(its scale).
  void dequantize_row(const std::uint8_t* codes, const bf16* scale_in, std::int64_t heads, std::int64_t d, float* out) const {
    const std::int64_t groups = scales(heads), len = heads * d / groups;
    for (std::int64_t g = 0; g < groups; ++g) {
      const float s = step(scale_in[g]);
      const std::int64_t at = g * len;
      float* o = out + at;
      switch (type) {
        case KVQuantType::int8: {
          const auto* c = reinterpret_cast<const std::int8_t*>(codes + at);
          for (std::int64_t i = 0; i < len; ++i) o[i] = static_cast<float>(c[i]) * s;
          break;
        }
        case KVQuantType::int4:
          for (std::int64_t i = 0; i < len; ++i) o[i] = code(codes, at + i) * s;
          break;
        case KVQuantType::fp8:
          for (std::int64_t i = 0; i < len; ++i) o[i] = static_cast<float>(fp8_e4m3{codes[at + i]}) * s;
          break;
      }
    }
  }

 private:
  template <class Names>
  static std::string hint(std::string_view s, const Names& names) {
    const std::string n = nearest_name(s, names);
    return n.empty() ? std::string() : " (did you mean '" + n + "'?)";
  }
};

/// The mask and numerics of attention over packed rows (AttentionOp's, without segment ids or picture ranges).
struct PackedAttentionArgs {
  std::int64_t kv_heads = 0, qk_dim = 0, v_dim = 0;
  bool causal = true;
  std::int64_t sliding_window = 0, chunk = 0;
  float soft_cap = 0.0f;
};

namespace detail {
/// What a query that sees no key gets: the mean of all S value rows of kv head h (MaxText's finite mask value weighs
/// every key alike), or 0 with a sink (its term takes all the weight) or without rows. `o` has Dv elements.
inline void attend_nothing_visible(const KVQuant& kq, std::int64_t S, const std::uint8_t* values, std::int64_t value_stride,
                                   std::int64_t voff, std::int64_t h, std::int64_t Dv, bool sinks, float* o) {
  std::fill(o, o + Dv, 0.0f);
  if (sinks || S == 0) return;
  const std::int64_t g = kq.axis == KVQuantAxis::dkv ? h : 0;
  for (std::int64_t s = 0; s < S; ++s) {
    const std::uint8_t* vr = values + s * value_stride;
    const float f = kq.step(reinterpret_cast<const bf16*>(vr + voff)[g]) / static_cast<float>(S);
    for (std::int64_t i = 0; i < Dv; ++i) o[i] += f * kq.code(vr, h * Dv + i);
  }
}
}  // namespace detail

#if defined(MAXTEXT_KV_QUANT_BLOCKED)
namespace detail {
/// attend_packed for int8 codes whose head sizes are multiples of the CPU's vector width, by the float cache's
/// decode kernel's blocks (backend/cpu/attention.hpp) reading the codes directly: one work item is a query and a
/// chunk of kv heads; three passes over its visible keys [lo, hi): every logit (block_logits / block_logits4 on 16
/// keys at once: int8 codes converted in registers, one transposing reduction per block instead of one horizontal
/// sum per key), then per head the key steps, cap, max and one vectorised exp, then the value rows (block_values,
/// the probabilities times the value rows' steps). Blocks go kv head by kv head inside a block of positions, so the
/// packed rows are read in address order. Measured by bench_micro's BM_decode_cache against the float16 cache.
inline void attend_packed_int8(const KVQuant& kq, const PackedAttentionArgs& a, View<const float, 3> q, std::int64_t q0,
                               std::int64_t S, const std::uint8_t* keys, std::int64_t key_stride,
                               const std::uint8_t* values, std::int64_t value_stride, const float* sinks,
                               View<float, 3> out, std::int64_t nt) {
  namespace attn = cpu::attn;
  using cpu::vec::fbatch;
  constexpr std::int64_t B = attn::kBlk;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t T = q.dim(0), N = q.dim(1), K = a.kv_heads, G = N / K, Dk = a.qk_dim, Dv = a.v_dim;
  const std::int64_t koff = kq.scale_offset(K * Dk), voff = kq.scale_offset(K * Dv);
  const bool per_head = kq.axis == KVQuantAxis::dkv;  // a scale per kv head, else one per token
  const std::int64_t span = (S + B - 1) / B * B;      // logits per row, whole blocks
  // Chunks of kv heads: enough items for every thread, and few enough heads per chunk that a thread's logits stay
  // within 8 MiB (as the float cache's kernel).
  const std::int64_t chunks = std::min<std::int64_t>(
      K, std::max<std::int64_t>(T >= nt ? 1 : (nt + T - 1) / T, (K * G * span * 4 + (1 << 23) - 1) >> 23));
  const std::int64_t HC = (K + chunks - 1) / chunks, C = (K + HC - 1) / HC;
  const auto* k8 = reinterpret_cast<const std::int8_t*>(keys);
  const auto* v8 = reinterpret_cast<const std::int8_t*>(values);
  const std::int64_t SC = per_head ? HC : 1;  // step rows per item
  // steps[sc][j] of the B rows from `row` (stride apart), 0 past nb; sc = the chunk's kv head (per_head) or 0.
  auto block_steps = [&](const std::uint8_t* row, std::int64_t stride, std::int64_t off, std::int64_t nb,
                         std::int64_t h0, float* steps) {
    for (std::int64_t sc = 0; sc < SC; ++sc) {
      for (std::int64_t j = 0; j < B; ++j) {
        steps[sc * B + j] = j < nb ? kq.step(reinterpret_cast<const bf16*>(row + j * stride + off)[per_head ? h0 + sc : 0]) : 0.0f;
      }
    }
  };
  cpu::parallel_for(T * C, static_cast<int>(nt), [&](std::int64_t w0, std::int64_t w1) {
    // Per thread: logits, then probabilities [R][span] (64-byte aligned rows), one block's probabilities times the
    // value steps [R][B], one block's steps [SC][B], q rows [R][Dk], accumulators [R][Dv], denominators [R].
    const std::int64_t R = HC * G;
    const std::size_t need = static_cast<std::size_t>(R * (span + B) + SC * B + R * (Dk + Dv + 1)) * sizeof(float);
    float* lg = reinterpret_cast<float*>(cpu::thread_scratch(need, 0));
    float* pw = lg + R * span;
    float* stp = pw + R * B;
    float* qf = stp + SC * B;
    float* acc = qf + R * Dk;
    float* den = acc + R * Dv;
    for (std::int64_t w = w0; w < w1; ++w) {
      const std::int64_t t = w / C, h0 = (w % C) * HC, h1 = std::min(K, h0 + HC), rows = (h1 - h0) * G;
      const std::int64_t pos = q0 + t;
      std::int64_t lo = 0, hi = S;  // visible keys [lo, hi)
      if (a.causal || a.sliding_window > 0 || a.chunk > 0) hi = std::min(hi, pos + 1);  // a window or chunk is causal too
      if (a.sliding_window > 0) lo = std::max(lo, pos - a.sliding_window + 1);
      if (a.chunk > 0) lo = std::max(lo, pos / a.chunk * a.chunk);
      std::fill(acc, acc + rows * Dv, 0.0f);
      if (lo >= hi) {
        for (std::int64_t r = 0; r < rows; ++r) {
          attend_nothing_visible(kq, S, values, value_stride, voff, h0 + r / G, Dv, sinks != nullptr, &out(t, h0 * G + r, 0));
        }
        continue;
      }
      const std::int64_t nvis = hi - lo, nblk = (nvis + B - 1) / B;
      for (std::int64_t r = 0; r < rows; ++r) std::copy_n(&q(t, h0 * G + r, 0), Dk, qf + r * Dk);
      // Pass 1: logits = (q . codes) x key step for every visible key, head by head inside each block of B positions;
      // the rows of the block attn::kAheadBlocks on are hinted into L1 over the block's steps (attn::RowHints).
      for (std::int64_t s0 = lo; s0 < hi; s0 += B) {
        const std::int64_t nb = std::min(B, hi - s0);
        const std::uint8_t* next = s0 + (attn::kAheadBlocks + 1) * B <= hi ? keys + (s0 + attn::kAheadBlocks * B) * key_stride : nullptr;
        attn::RowHints hints(next ? next + h0 * Dk : nullptr, key_stride, next ? B : 0, (h1 - h0) * Dk, rows * (Dk / B));
        if (next) {
          for (std::int64_t j = 0; j < B; ++j) cpu::prefetch::bytes(next + j * key_stride + koff, 2 * SC);
        }
        for (std::int64_t h = h0; h < h1; ++h) {
          const std::int8_t* kc = k8 + s0 * key_stride + h * Dk;
          const std::int64_t r0 = (h - h0) * G;
          std::int64_t r = r0;
          if (nb == B) {
#if defined(__AVX512F__)  // attn::kLogits4
            for (; r + 4 <= r0 + G; r += 4) attn::block_logits4(qf + r * Dk, kc, key_stride, Dk, lg + r * span + (s0 - lo), span, &hints);
#endif
            for (; r < r0 + G; ++r) attn::block_logits(qf + r * Dk, kc, key_stride, Dk, lg + r * span + (s0 - lo), &hints);
          } else {
            for (; r < r0 + G; ++r) {
              for (std::int64_t j = 0; j < nb; ++j) {
                fbatch acc_j(0.0f);
                for (std::int64_t d = 0; d < Dk; d += B) {
                  acc_j = xsimd::fma(fbatch::load_unaligned(qf + r * Dk + d), cpu::vec::load_f32(kc + j * key_stride + d), acc_j);
                }
                lg[r * span + (s0 - lo) + j] = xsimd::hadd(acc_j);
              }
            }
          }
        }
        block_steps(keys + s0 * key_stride, key_stride, koff, nb, h0, stp);
        for (std::int64_t r = 0; r < rows; ++r) {
          float* L = lg + r * span + (s0 - lo);
          const fbatch l = fbatch::load_aligned(L) * fbatch::load_aligned(stp + (per_head ? r / G : 0) * B);
          l.store_aligned(L);
        }
      }
      // Pass 2, per row: the cap, the max (with the sink), e^(l - m) in place, and their sum (with the sink's term).
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t n = h0 * G + r;
        float* L = lg + r * span;
        fbatch mv(kNegInf);
        for (std::int64_t c = 0; c < nblk; ++c) {
          fbatch l = fbatch::load_aligned(L + c * B);
          if (a.soft_cap > 0.0f || (c == nblk - 1 && nvis % B != 0)) {
            alignas(64) float tmp[B];
            l.store_aligned(tmp);
            if (a.soft_cap > 0.0f) {
              for (std::int64_t j = 0; j < B; ++j) tmp[j] = a.soft_cap * std::tanh(tmp[j] / a.soft_cap);
            }
            if (c == nblk - 1) {
              for (std::int64_t j = nvis - c * B; j < B; ++j) tmp[j] = kNegInf;  // lanes past hi
            }
            l = fbatch::load_aligned(tmp);
          }
          l.store_aligned(L + c * B);
          mv = xsimd::max(mv, l);
        }
        float m = cpu::vec::hmax(mv);
        if (sinks) m = std::max(m, sinks[n]);
        fbatch sv(0.0f);
        for (std::int64_t c = 0; c < nblk; ++c) {
          const fbatch e = xsimd::exp(fbatch::load_aligned(L + c * B) - fbatch(m));
          e.store_aligned(L + c * B);
          sv += e;
        }
        den[r] = xsimd::hadd(sv) + (sinks ? std::exp(sinks[n] - m) : 0.0f);
      }
      // Pass 3: sum_s p_s x value step_s x codes_s over the value rows, head by head inside each block (the block's
      // probabilities times its value steps first); the columns of the block attn::kAheadBlocks on are hinted as
      // block_values reads the same columns here (first row group), their scales at once.
      for (std::int64_t s0 = lo; s0 < hi; s0 += B) {
        const std::int64_t nb = std::min(B, hi - s0);
        const std::uint8_t* next = s0 + (attn::kAheadBlocks + 1) * B <= hi ? values + (s0 + attn::kAheadBlocks * B) * value_stride : nullptr;
        if (next) {
          for (std::int64_t j = 0; j < B; ++j) cpu::prefetch::bytes(next + j * value_stride + voff, 2 * SC);
        }
        block_steps(values + s0 * value_stride, value_stride, voff, nb, h0, stp);
        for (std::int64_t r = 0; r < rows; ++r) {
          (fbatch::load_aligned(lg + r * span + (s0 - lo)) * fbatch::load_aligned(stp + (per_head ? r / G : 0) * B))
              .store_aligned(pw + r * B);
        }
        for (std::int64_t h = h0; h < h1; ++h) {
          const std::int8_t* vc = v8 + s0 * value_stride + h * Dv;
          const std::int64_t r0 = (h - h0) * G;
          for (std::int64_t g = 0; g < G; g += attn::kRowsPV) {
            attn::with_rows<attn::kRowsPV>(std::min<std::int64_t>(attn::kRowsPV, G - g), [&]<int RR>() {
              float* ag = acc + (r0 + g) * Dv;
              const float* pg = pw + (r0 + g) * B;
              const auto at = [&](std::int64_t c) {
                return next && g == 0 ? reinterpret_cast<const char*>(next + h * Dv + c) : nullptr;
              };
              std::int64_t c = 0;
              for (; c + 4 * B <= Dv; c += 4 * B)
                attn::block_values<RR, 4>(pg, B, vc + c, value_stride, nb, ag + c, Dv, at(c), value_stride, 4 * B);
              for (; c < Dv; c += B) attn::block_values<RR, 1>(pg, B, vc + c, value_stride, nb, ag + c, Dv, at(c), value_stride, B);
            });
          }
        }
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const float inv = 1.0f / den[r];
        float* o = &out(t, h0 * G + r, 0);
        for (std::int64_t i = 0; i < Dv; ++i) o[i] = acc[r * Dv + i] * inv;
      }
    }
  });
}
}  // namespace detail
#endif

/// Attention of one sequence's T queries q [T, N, qk_dim] at cache positions q0 .. q0 + T - 1 over its first S cached
/// rows, read packed (`keys` / `values`: row s at s * stride bytes) without dequantising them into memory:
/// l_s = step_s * sum_i q_i code_i (the key's dequantised dot product), soft cap, the masks of AttentionMask
/// (causal: s <= position; sliding window: position - W < s <= position; chunk: the same chunk, s <= position), a
/// softmax with the head's sink in the denominator when `sinks` is given, and out = sum_s w_s step_s code_s over the
/// values. The arithmetic of the backends' attention over the dequantised rows, in another order (f32 sums). A query
/// that sees no key averages all S values (MaxText's finite mask value), or gives 0 with a sink. Split over `threads`
/// threads by query head.
inline void attend_packed(const KVQuant& kq, const PackedAttentionArgs& a, View<const float, 3> q, std::int64_t q0,
                          std::int64_t S, const std::uint8_t* keys, std::int64_t key_stride, const std::uint8_t* values,
                          std::int64_t value_stride, const float* sinks, View<float, 3> out, int threads) {
  const std::int64_t T = q.dim(0), N = q.dim(1), K = a.kv_heads, G = N / K, Dk = a.qk_dim, Dv = a.v_dim;
  const std::int64_t tasks = T * N;
  std::int64_t nt = std::min<std::int64_t>(std::max(threads, 1), tasks);
  if (S * tasks * (Dk + Dv) < (1 << 16)) nt = 1;  // too little work to wake threads for
#if defined(MAXTEXT_KV_QUANT_BLOCKED)
  if (kq.type == KVQuantType::int8 && Dk % cpu::attn::kBlk == 0 && Dv % cpu::attn::kBlk == 0 && q.stride(2) == 1 &&
      out.stride(2) == 1) {
    detail::attend_packed_int8(kq, a, q, q0, S, keys, key_stride, values, value_stride, sinks, out, nt);
    return;
  }
#endif
  const std::int64_t koff = kq.scale_offset(K * Dk), voff = kq.scale_offset(K * Dv);
  static const std::array<float, 256> fp8 = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[static_cast<std::size_t>(b)] = static_cast<float>(fp8_e4m3{static_cast<std::uint8_t>(b)});
    return t;
  }();
  // sum_i x_i code_i over elements [e0, e0 + n) of a packed row: 16 independent lanes (one vector register; the
  // compilers vectorise the inner loop without reassociating a single sum), then one tree reduction.
  auto lanes = [](const float* x, std::int64_t n, auto code_of) {
    float p[16] = {};
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      for (int j = 0; j < 16; ++j) p[j] += x[i + j] * code_of(i + j);
    }
    float tail = 0.0f;
    for (; i < n; ++i) tail += x[i] * code_of(i);
    for (int w = 8; w > 0; w /= 2) {
      for (int j = 0; j < w; ++j) p[j] += p[j + w];
    }
    return p[0] + tail;
  };
  auto dot = [&](const float* x, const std::uint8_t* row, std::int64_t e0, std::int64_t n) {
    switch (kq.type) {
      case KVQuantType::int8: {
        const auto* c = reinterpret_cast<const std::int8_t*>(row) + e0;
        return lanes(x, n, [c](std::int64_t i) { return static_cast<float>(c[i]); });
      }
      case KVQuantType::fp8: {
        const std::uint8_t* c = row + e0;
        return lanes(x, n, [c](std::int64_t i) { return fp8[c[i]]; });
      }
      case KVQuantType::int4:
        break;
    }
    return lanes(x, n, [&](std::int64_t i) { return kq.code(row, e0 + i); });
  };
  // y += f * code over elements [e0, e0 + n) of a packed row.
  auto axpy = [&](float f, const std::uint8_t* row, std::int64_t e0, std::int64_t n, float* y) {
    switch (kq.type) {
      case KVQuantType::int8: {
        const auto* c = reinterpret_cast<const std::int8_t*>(row) + e0;
        for (std::int64_t i = 0; i < n; ++i) y[i] += f * static_cast<float>(c[i]);
        break;
      }
      case KVQuantType::fp8:
        for (std::int64_t i = 0; i < n; ++i) y[i] += f * fp8[row[e0 + i]];
        break;
      case KVQuantType::int4:
        for (std::int64_t i = 0; i < n; ++i) y[i] += f * kq.code(row, e0 + i);
        break;
    }
  };
  auto task = [&](std::int64_t j, std::vector<float>& l, std::vector<float>& acc) {
    const std::int64_t t = j / N, n = j % N, h = n / G, pos = q0 + t;
    const std::int64_t g = kq.axis == KVQuantAxis::dkv ? h : 0;
    std::int64_t lo = 0, hi = S - 1;
    if (a.causal || a.sliding_window > 0 || a.chunk > 0) hi = std::min(hi, pos);  // a window or chunk is causal too
    if (a.sliding_window > 0) lo = std::max(lo, pos - a.sliding_window + 1);
    if (a.chunk > 0) lo = std::max(lo, pos / a.chunk * a.chunk);
    const float* x = &q(t, n, 0);
    float* o = &out(t, n, 0);
    if (lo > hi) {
      detail::attend_nothing_visible(kq, S, values, value_stride, voff, h, Dv, sinks != nullptr, o);
      return;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    float m = sinks ? sinks[n] : -std::numeric_limits<float>::infinity();
    for (std::int64_t s = lo; s <= hi; ++s) {
      const std::uint8_t* kr = keys + s * key_stride;
      float v = dot(x, kr, h * Dk, Dk) * kq.step(reinterpret_cast<const bf16*>(kr + koff)[g]);
      if (a.soft_cap > 0.0f) v = a.soft_cap * std::tanh(v / a.soft_cap);
      l[static_cast<std::size_t>(s - lo)] = v;
      m = std::max(m, v);
    }
    float sum = sinks ? std::exp(sinks[n] - m) : 0.0f;
    for (std::int64_t s = lo; s <= hi; ++s) {
      const float w = std::exp(l[static_cast<std::size_t>(s - lo)] - m);
      sum += w;
      const std::uint8_t* vr = values + s * value_stride;
      axpy(w * kq.step(reinterpret_cast<const bf16*>(vr + voff)[g]), vr, h * Dv, Dv, acc.data());
    }
    for (std::int64_t i = 0; i < Dv; ++i) o[i] = acc[static_cast<std::size_t>(i)] / sum;
  };
  auto run = [&](std::int64_t j0, std::int64_t j1) {
    std::vector<float> l(static_cast<std::size_t>(std::max<std::int64_t>(S, 1))), acc(static_cast<std::size_t>(Dv));
    for (std::int64_t j = j0; j < j1; ++j) task(j, l, acc);
  };
#if defined(_OPENMP)
  if (nt > 1) {
#pragma omp parallel num_threads(static_cast<int>(nt))
    {
      const std::int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
      run(tasks * tid / nth, tasks * (tid + 1) / nth);
    }
    return;
  }
#endif
  (void)nt;
  run(0, tasks);
}

/// MaxText's quantize_kvcache, kv_quant_dtype and kv_quant_axis (defaults int8 and heads_and_dkv, as base.yml's) from
/// Config::extra: the quantisation the KV cache applies, or none when quantize_kvcache is off.
inline std::optional<KVQuant> kv_quant_options(const Config& cfg) {
  auto value = [&](const char* key, const char* dflt) {
    const auto it = cfg.extra.find(key);
    return it == cfg.extra.end() ? std::string(dflt) : it->second;
  };
  const std::string on = value("quantize_kvcache", "false");
  MAXTEXT_CHECK(on == "true" || on == "True" || on == "TRUE" || on == "1" || on == "false" || on == "False" ||
                    on == "FALSE" || on == "0",
                ConfigError, "[config] quantize_kvcache: expected true or false, found '", on, "'");
  if (!maxtext::detail::truthy(on)) return std::nullopt;
  return KVQuant::parse(value("kv_quant_dtype", "int8"), value("kv_quant_axis", "heads_and_dkv"));
}

}  // namespace maxtext::layers
