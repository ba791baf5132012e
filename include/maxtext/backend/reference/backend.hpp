// backend/reference/backend.hpp: the scalar reference backend. Every operation of the Backend concept as plain
// loops over host memory with double accumulation, written from the spec (../shared/spec: norms-dense-mlp.md,
// attention.md §1-2, rope.md, moe.md) rather than from another backend, so that it is obviously correct and can
// judge the fast backends. Attention keeps MaxText's formulation literally: masked logits are *replaced* by
// DEFAULT_MASK_VALUE and the softmax runs over every cached key, so the fully-masked and sink cases come out of
// the same formula instead of special cases. It is slow on purpose (no threads, no blocking, no vectorisation).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::reference {

class Backend {
 public:
  static constexpr const char* name = "reference";

  // ---- memory ---------------------------------------------------------------------------------------------
  const std::shared_ptr<MemoryResource>& memory() const { return host_memory(); }
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind) const {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void synchronize() const {}

  /// Runtime-typed matrices (ggml_byte) are decoded once into an f32 copy that the loops read (quant's scalar
  /// decoder, independent of the CPU backend's kernels); other types are read as stored.
  /// Products read runtime-typed matrices (ggml_byte), see backend_has_runtime_typed_weights.
  static constexpr bool runtime_typed_weights = true;

  template <class W>
  Matrix<W> prepare(Matrix<W> m) const {
    if constexpr (std::is_same_v<W, ggml_byte>) {
      if (!m.empty() && !m.packed) m.packed = decoded(m);
    }
    return m;
  }

  // ---- linear algebra -------------------------------------------------------------------------------------
  /// y[m, n] = round_Y(sum_k x[m, k] W[n, k]); with a bias, round_Y(round_Y(sum) + bias[n]) (DenseGeneral: the
  /// product in dtype, the bias added after).
  template <class X, class W, class Y, class Bias = Y>
  void matmul(View<const X, 2> x, const Matrix<W>& w, View<Y, 2> y, View<const Bias, 1> bias = {}) const {
    const std::int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t n = 0; n < N; ++n) {
        double acc = 0.0;
        for (std::int64_t k = 0; k < K; ++k) acc += static_cast<double>(to_float(x(m, k))) * weight(w, n, k);
        float v = round_to<Y>(static_cast<float>(acc));
        if (!bias.empty()) v = v + to_float(bias(n));
        y(m, n) = from_float<Y>(v);
      }
    }
  }

  // ---- normalisation --------------------------------------------------------------------------------------
  /// RMSNorm: r = round_A(x / sqrt(mean(x^2) + eps)); with a scale, y = round_A(r * round_A(scale + offset)).
  template <class A, class S>
  void rms_norm(View<const A, 2> x, View<const S, 1> scale, float eps, float scale_offset, View<A, 2> y) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    std::vector<double> row(static_cast<std::size_t>(D));
    for (std::int64_t m = 0; m < M; ++m) {
      double ss = 0.0;
      for (std::int64_t i = 0; i < D; ++i) {
        row[static_cast<std::size_t>(i)] = to_float(x(m, i));
        ss += row[static_cast<std::size_t>(i)] * row[static_cast<std::size_t>(i)];
      }
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + static_cast<double>(eps));
      for (std::int64_t i = 0; i < D; ++i) {
        float r = round_to<A>(static_cast<float>(row[static_cast<std::size_t>(i)] * inv));
        if (!scale.empty()) r = round_to<A>(r * round_to<A>(to_float(scale(i)) + scale_offset));
        y(m, i) = from_float<A>(r);
      }
    }
  }

  /// Gpt3LayerNorm with statistics in the input dtype: mean and biased variance each rounded to A, then
  /// round_A(round_A(round_A(x - mean) * round_A(1/sqrt(round_A(var + eps)))) * round_A(scale + 1)) + bias.
  /// With stats_in_f32 (reductions_in_fp32) the statistics path is not rounded, only the normalised value.
  template <class A>
  void layer_norm(View<const A, 2> x, View<const A, 1> scale, View<const A, 1> bias, float eps, View<A, 2> y,
                  bool stats_in_f32 = false) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    const auto rs = [&](float v) { return stats_in_f32 ? v : round_to<A>(v); };
    std::vector<float> row(static_cast<std::size_t>(D));
    for (std::int64_t m = 0; m < M; ++m) {
      double s = 0.0;
      for (std::int64_t i = 0; i < D; ++i) s += (row[static_cast<std::size_t>(i)] = to_float(x(m, i)));
      const float mean = rs(static_cast<float>(s / static_cast<double>(D)));
      double v = 0.0;
      for (std::int64_t i = 0; i < D; ++i) {
        const double c = rs(row[static_cast<std::size_t>(i)] - mean);
        v += rs(static_cast<float>(c * c));
      }
      const float var = rs(static_cast<float>(v / static_cast<double>(D)));
      const float inv = rs(static_cast<float>(1.0 / std::sqrt(static_cast<double>(rs(var + eps)))));
      for (std::int64_t i = 0; i < D; ++i) {
        float o = round_to<A>(rs(row[static_cast<std::size_t>(i)] - mean) * inv);
        o = round_to<A>(o * round_to<A>(to_float(scale(i)) + 1.0f));
        if (!bias.empty()) o = round_to<A>(o + to_float(bias(i)));
        y(m, i) = from_float<A>(o);
      }
    }
  }

  // ---- element-wise ---------------------------------------------------------------------------------------
  template <class A>
  void add(View<const A, 2> a, View<const A, 2> b, View<A, 2> y) const {
    for (std::int64_t m = 0; m < a.dim(0); ++m) {
      for (std::int64_t i = 0; i < a.dim(1); ++i) y(m, i) = from_float<A>(to_float(a(m, i)) + to_float(b(m, i)));
    }
  }

  /// y = round(round(act0(h0)) * round(act1(h1))), or round(act0(h0)) without h1; with round_each = false
  /// (activations_in_float32) only y is rounded.
  template <class A>
  void activation(View<const A, 2> h0, Activation a0, View<const A, 2> h1, Activation a1, View<A, 2> y,
                  bool round_each = true) const {
    const auto r = [&](float v) { return round_each ? round_to<A>(v) : v; };
    for (std::int64_t m = 0; m < h0.dim(0); ++m) {
      for (std::int64_t i = 0; i < h0.dim(1); ++i) {
        float v = r(act(a0, to_float(h0(m, i))));
        if (!h1.empty()) v = r(v * r(act(a1, to_float(h1(m, i)))));
        y(m, i) = from_float<A>(v);
      }
    }
  }

  /// The clamped SwiGLUs (moe.py apply_ffn_activation): g = min(h0, limit), u = clip(h1, -limit, limit), then
  /// gpt_oss: y = round(round(g * round(act0(round(g * round_A(alpha))))) * round(u + 1));
  /// swiglu (DeepSeek-V4): y = round(round(act0(g)) * u). y may alias h0.
  template <class A>
  void clamped_glu(View<const A, 2> h0, View<const A, 2> h1, Activation a0, float alpha, float limit, View<A, 2> y,
                   ClampedGluForm form = ClampedGluForm::gpt_oss) const {
    const float al = round_to<A>(alpha);
    for (std::int64_t m = 0; m < h0.dim(0); ++m) {
      for (std::int64_t i = 0; i < h0.dim(1); ++i) {
        const float g = std::min(to_float(h0(m, i)), limit);
        const float u = std::clamp(to_float(h1(m, i)), -limit, limit);
        if (form == ClampedGluForm::swiglu) {
          y(m, i) = from_float<A>(round_to<A>(act(a0, g)) * u);
          continue;
        }
        const float glu = round_to<A>(g * round_to<A>(act(a0, round_to<A>(g * al))));
        y(m, i) = from_float<A>(glu * round_to<A>(u + 1.0f));
      }
    }
  }

  /// x = round(x * round_A(factor)) or round(x / round_A(factor)).
  template <class A>
  void scale(View<A, 2> x, float factor, bool divide = false) const {
    const float f = round_to<A>(factor);
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      for (std::int64_t i = 0; i < x.dim(1); ++i) {
        const float v = to_float(x(m, i));
        x(m, i) = from_float<A>(divide ? v / f : v * f);
      }
    }
  }

  /// x[m, :] = round(x[m, :] * round(act(g[m, 0]))): a per-row gate computed on the device (Qwen3-Next's
  /// sigmoid-gated shared expert; Llama 4's routed-expert inputs, with f32 routing weights). g is [M, 1].
  template <class A, class G>
  void scale_rows(View<A, 2> x, View<const G, 2> g, Activation a) const {
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      const float f = round_to<A>(act(a, to_float(g(m, 0))));
      for (std::int64_t i = 0; i < x.dim(1); ++i) x(m, i) = from_float<A>(to_float(x(m, i)) * f);
    }
  }

  template <class A>
  void soft_cap(View<A, 2> x, float cap) const {
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      for (std::int64_t i = 0; i < x.dim(1); ++i) {
        x(m, i) = from_float<A>(static_cast<float>(cap * std::tanh(static_cast<double>(to_float(x(m, i))) / cap)));
      }
    }
  }

  template <class A, class Y>
  void convert(View<const A, 2> x, View<Y, 2> y) const {
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      for (std::int64_t i = 0; i < x.dim(1); ++i) y(m, i) = from_float<Y>(to_float(x(m, i)));
    }
  }

  template <class T, int R>
  void copy(View<const T, R> src, View<T, R> dst) const {
    if constexpr (R == 1) {
      for (std::int64_t i = 0; i < src.dim(0); ++i) dst(i) = src(i);
    } else {
      for (std::int64_t i = 0; i < src.dim(0); ++i) copy<T, R - 1>(src[i], dst[i]);
    }
  }

  // ---- embedding ------------------------------------------------------------------------------------------
  template <class W, class A>
  void embed(const Matrix<W>& table, View<const std::int32_t, 1> ids, View<A, 2> y) const {
    for (std::int64_t m = 0; m < ids.dim(0); ++m) {
      for (std::int64_t i = 0; i < table.cols; ++i) y(m, i) = from_float<A>(static_cast<float>(weight(table, ids(m), i)));
    }
  }

  // ---- rotary (rope.md) -----------------------------------------------------------------------------------
  template <class A>
  void rotary(View<A, 3> x, View<const std::int32_t, 1> pos, const RotaryTable& t) const {
    const std::int64_t r = t.rot_dims, half = r / 2;
    std::vector<float> in(static_cast<std::size_t>(r)), out(static_cast<std::size_t>(r));
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      for (std::int64_t h = 0; h < x.dim(1); ++h) {
        for (std::int64_t i = 0; i < r; ++i) in[static_cast<std::size_t>(i)] = to_float(x(m, h, i));
        for (std::int64_t i = 0; i < half; ++i) {
          float c = t.cos(pos(m), i), s = t.sin(pos(m), i);
          if (t.round_sincos_to_input) {
            c = round_to<A>(c);
            s = round_to<A>(s);
          }
          if (t.layout == RopeLayout::half_split) {
            const float a = in[static_cast<std::size_t>(i)], b = in[static_cast<std::size_t>(i + half)];
            if (t.round_sincos_to_input) {  // default RoPE: every product and sum in the input dtype
              out[static_cast<std::size_t>(i)] = round_to<A>(round_to<A>(a * c) - round_to<A>(b * s));
              out[static_cast<std::size_t>(i + half)] = round_to<A>(round_to<A>(b * c) + round_to<A>(a * s));
            } else {
              out[static_cast<std::size_t>(i)] = a * c - b * s;
              out[static_cast<std::size_t>(i + half)] = b * c + a * s;
            }
          } else {
            // complex (re + i im) * (c + i s) with re, im = x[2i], x[2i+1]
            const float re = in[static_cast<std::size_t>(2 * i)], im = in[static_cast<std::size_t>(2 * i + 1)];
            const float zr = re * c - im * s, zi = im * c + re * s;
            if (t.layout == RopeLayout::interleaved) {
              out[static_cast<std::size_t>(2 * i)] = zr;
              out[static_cast<std::size_t>(2 * i + 1)] = zi;
            } else {  // YaRN: concatenated halves
              out[static_cast<std::size_t>(i)] = zr;
              out[static_cast<std::size_t>(i + half)] = zi;
            }
          }
        }
        for (std::int64_t i = 0; i < r; ++i) x(m, h, i) = from_float<A>(out[static_cast<std::size_t>(i)] * t.post_scale);
      }
    }
  }

  // ---- attention (attention.md §1-2) ----------------------------------------------------------------------
  /// The cache type KV is A or a narrower float type (Policy's KV): keys and values are used as the cache holds them.
  template <class A, class KV>
  void attention(View<const A, 4> q, View<const KV, 4> k, View<const KV, 4> v, const AttentionMask& mask,
                 const AttentionOptions& opt, View<const A, 1> sinks, View<A, 4> out) const {
    const std::int64_t B = q.dim(0), T = q.dim(1), N = q.dim(2), Dq = q.dim(3);
    const std::int64_t K = k.dim(2), Dv = v.dim(3), G = N / K;
    std::vector<double> logit, acc(static_cast<std::size_t>(Dv));
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t S = mask.kv_len(b);
      logit.resize(static_cast<std::size_t>(S));
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t qi = mask.q_start(b) + t;
        for (std::int64_t n = 0; n < N; ++n) {
          const std::int64_t kh = n / G;  // GQA: query head n reads kv head n // G
          for (std::int64_t s = 0; s < S; ++s) {
            double dot = 0.0;
            for (std::int64_t d = 0; d < Dq; ++d) dot += static_cast<double>(to_float(q(b, t, n, d))) * to_float(k(b, s, kh, d));
            float l = static_cast<float>(dot);
            if (!opt.float32_qk_product) l = round_to<A>(l);
            if (opt.soft_cap > 0.0f) l = static_cast<float>(opt.soft_cap * std::tanh(static_cast<double>(l) / opt.soft_cap));
            if (!opt.float32_qk_product && !opt.float32_logits) l = round_to<A>(l);
            logit[static_cast<std::size_t>(s)] = allowed(mask, b, t, qi, s) ? l : kMaskValue;
          }
          double mx = -HUGE_VAL;
          for (double l : logit) mx = std::max(mx, l);
          const bool has_sink = !sinks.empty();
          const double sink = has_sink ? to_float(sinks(n)) : 0.0;
          if (has_sink) mx = std::max(mx, sink);
          double denom = has_sink ? std::exp(sink - mx) : 0.0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t s = 0; s < S; ++s) {
            const double e = std::exp(logit[static_cast<std::size_t>(s)] - mx);
            denom += e;
            for (std::int64_t d = 0; d < Dv; ++d) acc[static_cast<std::size_t>(d)] += e * to_float(v(b, s, kh, d));
          }
          for (std::int64_t d = 0; d < Dv; ++d) {
            out(b, t, n, d) = from_float<A>(denom > 0.0 ? static_cast<float>(acc[static_cast<std::size_t>(d)] / denom) : 0.0f);
          }
        }
      }
    }
  }

  // ---- row reductions -------------------------------------------------------------------------------------
  template <class X, class Y>
  void softmax(View<const X, 2> x, View<Y, 2> y) const {
    const std::int64_t D = x.dim(1);
    std::vector<double> e(static_cast<std::size_t>(D));
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      double mx = -HUGE_VAL, sum = 0.0;
      for (std::int64_t i = 0; i < D; ++i) mx = std::max<double>(mx, to_float(x(m, i)));
      for (std::int64_t i = 0; i < D; ++i) sum += (e[static_cast<std::size_t>(i)] = std::exp(to_float(x(m, i)) - mx));
      for (std::int64_t i = 0; i < D; ++i) y(m, i) = from_float<Y>(static_cast<float>(e[static_cast<std::size_t>(i)] / sum));
    }
  }

  /// The SampleOptions rule by a full sort of each row.
  void sample(View<const float, 2> logits, const SampleOptions& o, View<const float, 1> u, View<std::int32_t, 1> ids) const {
    const std::int64_t V = logits.dim(1);
    for (std::int64_t b = 0; b < logits.dim(0); ++b) {
      std::vector<std::int32_t> order(static_cast<std::size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      bool nan = false;
      for (std::int64_t i = 0; i < V; ++i) nan = nan || std::isnan(logits(b, i));
      if (nan) {
        ids(b) = -1;
        continue;
      }
      std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t c) { return logits(b, a) > logits(b, c); });
      if (o.temperature == 0.0f) {
        ids(b) = order[0];
        continue;
      }
      std::size_t keep = (o.top_k > 0 && o.top_k < V) ? static_cast<std::size_t>(o.top_k) : order.size();
      std::vector<double> p(keep);
      for (std::size_t i = 0; i < keep; ++i) p[i] = std::exp((logits(b, order[i]) - static_cast<double>(logits(b, order[0]))) / o.temperature);
      double total = std::accumulate(p.begin(), p.end(), 0.0);
      if (o.top_p < 1.0f) {
        double c = 0.0;
        for (std::size_t i = 0; i < keep; ++i) {
          c += p[i];
          if (c >= static_cast<double>(o.top_p) * total) {
            keep = i + 1;
            break;
          }
        }
        total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
      }
      const double target = static_cast<double>(u(b)) * total;
      double c = 0.0;
      ids(b) = order[keep - 1];
      for (std::size_t i = 0; i < keep; ++i) {
        c += p[i];
        if (c > target) {
          ids(b) = order[i];
          break;
        }
      }
    }
  }

  // ---- manifold-constrained hyper-connections (MaxText mhc.py; MhcOptions in backend/ops.hpp) ---------------
  /// The pre, post and residual mappings of each token from its projections hp [M,k], hq [M,k], hr [M, k*k or k!]
  /// (MaxText `mapping` with scale 1 / eps 1e-6 and scale 2 / eps 0, `res_mapping`): every op rounded to A, the
  /// Sinkhorn iterations (full) or the softmax over permutations (lite) in f32. Outputs pre, post [M,k], res [M,k*k]
  /// with res(m, i*k + j) the weight of input stream i in output stream j.
  template <class A>
  void mhc_maps(View<const A, 2> hp, View<const A, 2> hq, View<const A, 2> hr, const MhcCoefficients<A>& c,
                const MhcOptions& o, View<A, 2> pre, View<A, 2> post, View<A, 2> res) const {
    const std::int64_t k = o.k, R = hr.dim(1);
    const auto r = [](double v) { return static_cast<double>(round_to<A>(static_cast<float>(v))); };
    const auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
    const double ps = to_float(c.pre_scale[0]), qs = to_float(c.post_scale[0]), rs = to_float(c.res_scale[0]);
    for (std::int64_t m = 0; m < hp.dim(0); ++m) {
      for (std::int64_t i = 0; i < k; ++i) {
        const double v = r(r(ps * to_float(hp(m, i))) + to_float(c.pre_beta[i]));
        pre(m, i) = from_float<A>(static_cast<float>(r(sigmoid(v)) + 1e-6));
        const double u = r(r(qs * to_float(hq(m, i))) + to_float(c.post_beta[i]));
        post(m, i) = from_float<A>(static_cast<float>(2.0 * r(sigmoid(u))));
      }
      std::vector<double> t(static_cast<std::size_t>(R));
      for (std::int64_t n = 0; n < R; ++n) t[static_cast<std::size_t>(n)] = r(r(rs * to_float(hr(m, n))) + to_float(c.res_beta[n]));
      const auto softmax = [](double* v, std::int64_t n) {
        const double mx = *std::max_element(v, v + n);
        double sum = 0.0;
        for (std::int64_t i = 0; i < n; ++i) sum += (v[i] = std::exp(v[i] - mx));
        for (std::int64_t i = 0; i < n; ++i) v[i] /= sum;
      };
      std::vector<double> out(static_cast<std::size_t>(k * k), 0.0);
      if (o.lite) {
        // Weighted sum of the k! permutation matrices P_n[i][perm_n[i]] = 1, in itertools.permutations order.
        softmax(t.data(), R);
        std::vector<int> perm(static_cast<std::size_t>(k));
        std::iota(perm.begin(), perm.end(), 0);
        std::size_t n = 0;
        do {
          const double w = r(t[n++]);
          for (std::int64_t i = 0; i < k; ++i) out[static_cast<std::size_t>(i * k + perm[static_cast<std::size_t>(i)])] += w;
        } while (std::next_permutation(perm.begin(), perm.end()));
      } else {
        // Sinkhorn-Knopp: row softmax + eps, then column and row normalisations, each sum offset by eps.
        const double eps = 1e-6;
        auto at = [&](std::int64_t i, std::int64_t j) -> double& { return t[static_cast<std::size_t>(i * k + j)]; };
        for (std::int64_t i = 0; i < k; ++i) {
          softmax(&at(i, 0), k);
          for (std::int64_t j = 0; j < k; ++j) at(i, j) += eps;
        }
        for (std::int64_t it = 0; it < o.sinkhorn_iterations; ++it) {
          if (it > 0) {
            for (std::int64_t i = 0; i < k; ++i) {
              double s = 0.0;
              for (std::int64_t j = 0; j < k; ++j) s += at(i, j);
              for (std::int64_t j = 0; j < k; ++j) at(i, j) /= s + eps;
            }
          }
          for (std::int64_t j = 0; j < k; ++j) {
            double s = 0.0;
            for (std::int64_t i = 0; i < k; ++i) s += at(i, j);
            for (std::int64_t i = 0; i < k; ++i) at(i, j) /= s + eps;
          }
        }
        out = t;
      }
      for (std::int64_t i = 0; i < k * k; ++i) res(m, i) = from_float<A>(static_cast<float>(out[static_cast<std::size_t>(i)]));
    }
  }

  /// y [M,D] = sum over the k streams of x [M, k*D] (stream s = columns [s*D, (s+1)*D)), weighted by w [M,k]
  /// (empty: weights 1); accumulated in double, rounded once (MaxText's einsum "bsk,bskd->bsd" / the stream sum).
  template <class A>
  void stream_sum(View<const A, 2> x, View<const A, 2> w, View<A, 2> y) const {
    const std::int64_t D = y.dim(1), k = x.dim(1) / D;
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      for (std::int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (std::int64_t s = 0; s < k; ++s) acc += (w.empty() ? 1.0 : to_float(w(m, s))) * to_float(x(m, s * D + d));
        y(m, d) = from_float<A>(static_cast<float>(acc));
      }
    }
  }

  /// The mHC output: y(m, j*D + d) = r(r(sum_i res(m, i*k + j) x(m, i*D + d)) + r(f(m, d) post(m, j))), x and y
  /// [M, k*D], res [M, k*k], f [M, D], post [M, k] (MaxText: res_out + post_out). y must not alias x.
  template <class A>
  void stream_mix(View<const A, 2> x, View<const A, 2> res, View<const A, 2> f, View<const A, 2> post, View<A, 2> y) const {
    const std::int64_t D = f.dim(1), k = post.dim(1);
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      for (std::int64_t j = 0; j < k; ++j) {
        for (std::int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (std::int64_t i = 0; i < k; ++i) acc += static_cast<double>(to_float(res(m, i * k + j))) * to_float(x(m, i * D + d));
          const float a = round_to<A>(static_cast<float>(acc));
          const float b = round_to<A>(to_float(f(m, d)) * to_float(post(m, j)));
          y(m, j * D + d) = from_float<A>(a + b);
        }
      }
    }
  }

  // ---- mixture of experts (moe.md, dropless) --------------------------------------------------------------
  template <class A>
  void moe_permute(View<const A, 2> x, View<const std::int32_t, 2> experts, std::int64_t num_experts, View<A, 2> rows,
                   View<std::int32_t, 2> slot, View<std::int32_t, 1> offsets) const {
    const std::int64_t M = experts.dim(0), K = experts.dim(1);
    std::int32_t row = 0;
    for (std::int64_t e = 0; e < num_experts; ++e) {
      offsets(e) = row;
      for (std::int64_t t = 0; t < M; ++t) {
        for (std::int64_t j = 0; j < K; ++j) {
          if (experts(t, j) != e) continue;
          slot(t, j) = row;
          for (std::int64_t i = 0; i < x.dim(1); ++i) rows(row, i) = x(t, i);
          ++row;
        }
      }
    }
    offsets(num_experts) = row;
  }

  template <class A>
  void moe_unpermute(View<const A, 2> rows, View<const std::int32_t, 2> slot, View<const float, 2> w, View<A, 2> out) const {
    for (std::int64_t t = 0; t < slot.dim(0); ++t) {
      for (std::int64_t i = 0; i < rows.dim(1); ++i) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < slot.dim(1); ++j) acc += static_cast<double>(w(t, j)) * to_float(rows(slot(t, j), i));
        out(t, i) = from_float<A>(static_cast<float>(acc));
      }
    }
  }

  // ---- mixture of experts: routing and per-expert rows (moe.md; MoeRouting in backend/ops.hpp) -------------
  /// Routing of each token: scores, bias, optional group limit, top-k by a stable sort, weight post-processing.
  template <class G, class A = G>
  void moe_route(View<const G, 2> z, View<const G, 1> bias, const MoeRouting& r, View<std::int32_t, 2> idx,
                 View<float, 2> w, View<float, 2> scores) const {
    const std::int64_t M = z.dim(0), E = z.dim(1), k = r.num_experts_per_tok;
    const double ninf = -HUGE_VAL;
    for (std::int64_t m = 0; m < M; ++m) {
      std::vector<float> s(static_cast<std::size_t>(E)), b(static_cast<std::size_t>(E));
      for (std::int64_t e = 0; e < E; ++e) s[static_cast<std::size_t>(e)] = to_float(z(m, e));
      if (r.score_softmax) {
        double mx = ninf, sum = 0.0;
        for (float v : s) mx = std::max<double>(mx, v);
        for (float v : s) sum += std::exp(v - mx);
        for (float& v : s) v = round_to<G>(static_cast<float>(std::exp(v - mx) / sum));
      } else if (r.score != Activation::linear) {
        for (float& v : s) v = round_to<G>(act(r.score, v));
      }
      for (std::int64_t e = 0; e < E; ++e) {
        const auto u = static_cast<std::size_t>(e);
        b[u] = bias.empty() ? s[u] : round_to<G>(s[u] + to_float(bias(e)));
        if (!scores.empty()) scores(m, e) = b[u];
      }
      // Descending by value, equal values in increasing index: a stable sort on the value.
      auto top = [](const std::vector<float>& v, std::size_t n) {
        std::vector<std::int32_t> o(v.size());
        std::iota(o.begin(), o.end(), 0);
        std::stable_sort(o.begin(), o.end(), [&](std::int32_t a, std::int32_t c) {
          return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(c)];
        });
        o.resize(n);
        return o;
      };
      if (r.deepseek && r.n_groups > 0) {
        const std::int64_t per = E / r.n_groups;
        std::vector<float> gs(static_cast<std::size_t>(r.n_groups));
        for (std::int64_t g = 0; g < r.n_groups; ++g) {
          std::vector<float> grp(b.begin() + g * per, b.begin() + (g + 1) * per);
          std::sort(grp.begin(), grp.end(), std::greater<float>());
          gs[static_cast<std::size_t>(g)] = grp[0] + grp[1];
        }
        const auto keep = top(gs, static_cast<std::size_t>(r.topk_groups));
        for (std::int64_t e = 0; e < E; ++e) {
          if (std::find(keep.begin(), keep.end(), static_cast<std::int32_t>(e / per)) == keep.end()) {
            b[static_cast<std::size_t>(e)] = -INFINITY;
          }
        }
      }
      const auto sel = top(b, static_cast<std::size_t>(k));
      std::vector<float> wv(static_cast<std::size_t>(k));
      for (std::int64_t j = 0; j < k; ++j) {
        const auto e = static_cast<std::size_t>(sel[static_cast<std::size_t>(j)]);
        idx(m, j) = sel[static_cast<std::size_t>(j)];
        wv[static_cast<std::size_t>(j)] = r.deepseek ? s[e] : b[e];
      }
      if (r.softmax_weights) {
        double mx = ninf, sum = 0.0;
        for (float v : wv) mx = std::max<double>(mx, v);
        for (float v : wv) sum += std::exp(v - mx);
        for (float& v : wv) v = round_to<A>(static_cast<float>(std::exp(v - mx) / sum));
      }
      if (r.normalize) {
        float sum = 0.0f;  // summed in G, in choice order
        for (float v : wv) sum = round_to<G>(sum + v);
        const float den = round_to<G>(sum + r.normalize_eps);
        for (float& v : wv) v = round_to<G>(v / den);
      }
      if (r.scale != 1.0f) {
        for (float& v : wv) v = round_to<G>(v * round_to<G>(r.scale));
      }
      for (std::int64_t j = 0; j < k; ++j) w(m, j) = wv[static_cast<std::size_t>(j)];
    }
  }

  /// y[i] = x[rows[i]].
  template <class A>
  void gather_rows(View<const A, 2> x, View<const std::int32_t, 1> rows, View<A, 2> y) const {
    for (std::int64_t i = 0; i < rows.dim(0); ++i) {
      for (std::int64_t c = 0; c < x.dim(1); ++c) y(i, c) = x(rows(i), c);
    }
  }

  /// acc[rows[i]] += w[i] * y[i] (f32 accumulator; rows distinct).
  template <class A>
  void scatter_add_rows(View<const A, 2> y, View<const std::int32_t, 1> rows, View<const float, 1> w,
                        View<float, 2> acc) const {
    for (std::int64_t i = 0; i < rows.dim(0); ++i) {
      for (std::int64_t c = 0; c < y.dim(1); ++c) acc(rows(i), c) += w(i) * to_float(y(i, c));
    }
  }

  /// Per-head products with row blocks of one weight (MLA absorbed form; BackendHeadMatmul in concepts.hpp):
  /// W_h = rows [h * head_stride + row_offset, ...) of w; y[m,h,:] = x[m,h,:] . W_h^T, or . W_h if transpose_w.
  template <class X, class W, class Y>
  void head_matmul(View<const X, 3> x, const Matrix<W>& w, std::int64_t head_stride, std::int64_t row_offset,
                   bool transpose_w, View<Y, 3> y) const {
    for (std::int64_t m = 0; m < x.dim(0); ++m) {
      for (std::int64_t h = 0; h < x.dim(1); ++h) {
        const std::int64_t r0 = h * head_stride + row_offset;
        for (std::int64_t j = 0; j < y.dim(2); ++j) {
          double acc = 0.0;
          for (std::int64_t i = 0; i < x.dim(2); ++i) {
            acc += static_cast<double>(to_float(x(m, h, i))) * (transpose_w ? weight(w, r0 + i, j) : weight(w, r0 + j, i));
          }
          y(m, h, j) = from_float<Y>(static_cast<float>(acc));
        }
      }
    }
  }

  // ---- Engram (layers/engram.hpp; semantics: BackendEngram in concepts.hpp) ------------------------------------
  /// y(m, g*D + d) = r(gate(m,g) v(m,d)): the dot products of each stream in double, the gate's own ops rounded to A
  /// as engram.py's jnp ops are.
  template <class A>
  void engram_gate(View<const A, 2> q, View<const A, 2> k, View<const A, 2> v, View<A, 2> y) const {
    const std::int64_t D = v.dim(1), G = q.dim(1) / D;
    const float sqrt_d = round_to<A>(static_cast<float>(std::sqrt(static_cast<double>(D))));
    const float eps = round_to<A>(1e-6f);
    for (std::int64_t m = 0; m < q.dim(0); ++m) {
      for (std::int64_t g = 0; g < G; ++g) {
        double dot = 0.0;
        for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(to_float(q(m, g * D + d))) * to_float(k(m, g * D + d));
        const float s = round_to<A>(round_to<A>(static_cast<float>(dot)) / sqrt_d);
        const float mag = round_to<A>(static_cast<float>(std::sqrt(static_cast<double>(std::max(std::fabs(s), eps)))));
        const float signed_mag = s > 0.0f ? mag : (s < 0.0f ? -mag : 0.0f);
        const float gate = round_to<A>(static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(signed_mag)))));
        for (std::int64_t d = 0; d < D; ++d) y(m, g * D + d) = from_float<A>(gate * to_float(v(m, d)));
      }
    }
  }

  // ---- DeepSeek-V4 compressed attention (families/deepseek4/deepseek4.hpp; semantics: BackendCompressedAttention) -------
  /// Each pooled feature as a softmax over its window's entries in double, the logits and weights rounded to A.
  template <class A>
  void compress_pool(View<const A, 3> kv, View<const A, 3> gate, View<const A, 2> bias, std::int64_t r, bool overlap,
                     View<const std::int32_t, 1> first, View<const std::int32_t, 1> count, View<A, 3> out) const {
    const std::int64_t d = out.dim(2);
    std::vector<double> value, logit;
    for (std::int64_t b = 0; b < out.dim(0); ++b) {
      for (std::int64_t i = 0; i < out.dim(1); ++i) {
        const std::int64_t j = first(b) + i;
        for (std::int64_t c = 0; c < d; ++c) {
          if (i >= count(b)) {
            out(b, i, c) = from_float<A>(0.0f);
            continue;
          }
          value.clear();
          logit.clear();
          // (token, feature, bias row) of each entry: block j - 1's first half (CSA), then block j
          const auto put = [&](std::int64_t tok, std::int64_t col, std::int64_t o) {
            value.push_back(to_float(kv(b, tok, col)));
            logit.push_back(round_to<A>(to_float(gate(b, tok, col)) + to_float(bias(o, col))));
          };
          if (overlap && j > 0) {
            for (std::int64_t o = 0; o < r; ++o) put((j - 1) * r + o, c, o);
          }
          for (std::int64_t o = 0; o < r; ++o) put(j * r + o, overlap ? d + c : c, o);
          const double mx = *std::max_element(logit.begin(), logit.end());
          double sum = 0.0, acc = 0.0;
          for (double l : logit) sum += std::exp(l - mx);
          for (std::size_t e = 0; e < logit.size(); ++e) {
            acc += round_to<A>(static_cast<float>(std::exp(logit[e] - mx) / sum)) * value[e];
          }
          out(b, i, c) = from_float<A>(static_cast<float>(acc));
        }
      }
    }
  }

  /// Scores in double, then a stable sort of the visible blocks by (score desc, block asc).
  template <class A>
  void indexer_topk(View<const A, 3> q, View<const A, 2> w, View<const A, 3> blocks, View<const std::int32_t, 1> q_start,
                    std::int64_t r, float score_scale, float weight_scale, View<float, 2> scores,
                    View<std::int32_t, 2> idx) const {
    const std::int64_t M = q.dim(0), H = q.dim(1), d = q.dim(2), T = M / q_start.dim(0), S = blocks.dim(1);
    for (std::int64_t m = 0; m < M; ++m) {
      const std::int64_t b = m / T, nv = std::min(S, (q_start(b) + m % T + 1) / r);
      std::vector<std::int32_t> order;
      for (std::int64_t j = 0; j < S; ++j) {
        if (j >= nv) {
          scores(m, j) = -std::numeric_limits<float>::infinity();
          continue;
        }
        double total = 0.0;
        for (std::int64_t h = 0; h < H; ++h) {
          double dot = 0.0;
          for (std::int64_t i = 0; i < d; ++i) dot += static_cast<double>(to_float(q(m, h, i))) * to_float(blocks(b, j, i));
          total += std::max(dot, 0.0) * score_scale * (static_cast<double>(to_float(w(m, h))) * weight_scale);
        }
        scores(m, j) = static_cast<float>(total);
        order.push_back(static_cast<std::int32_t>(j));
      }
      std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t c) { return scores(m, a) > scores(m, c); });
      for (std::int64_t i = 0; i < idx.dim(1); ++i) {
        idx(m, i) = i < static_cast<std::int64_t>(order.size()) ? order[static_cast<std::size_t>(i)] : -1;
      }
    }
  }

  /// The window keys and the allowed blocks as one masked softmax in double, with the sink in the denominator.
  template <class A>
  void compressed_attention(View<const A, 4> q, View<const A, 3> kv, View<const A, 3> blocks,
                            View<const std::int32_t, 1> q_start, std::int64_t window, std::int64_t r,
                            View<const std::int32_t, 2> selected, View<const A, 1> sinks, const AttentionOptions& opt,
                            View<A, 4> out) const {
    const std::int64_t Bn = q.dim(0), T = q.dim(1), N = q.dim(2), d = q.dim(3);
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t m = b * T + t, pos = q_start(b) + t;
        std::vector<const A*> keys;
        for (std::int64_t s = 0; s <= pos; ++s) {
          if (window <= 0 || pos - s < window) keys.push_back(&kv(b, s, 0));
        }
        if (r > 0 && selected.empty()) {
          for (std::int64_t j = 0; j < std::min(blocks.dim(1), (pos + 1) / r); ++j) keys.push_back(&blocks(b, j, 0));
        } else if (r > 0) {
          for (std::int64_t i = 0; i < selected.dim(1); ++i) {
            if (selected(m, i) >= 0) keys.push_back(&blocks(b, selected(m, i), 0));
          }
        }
        for (std::int64_t n = 0; n < N; ++n) {
          std::vector<double> logit;
          for (const A* key : keys) {
            double dot = 0.0;
            for (std::int64_t i = 0; i < d; ++i) dot += static_cast<double>(to_float(q(b, t, n, i))) * to_float(key[i]);
            float l = static_cast<float>(dot);
            if (!opt.float32_qk_product) l = round_to<A>(l);
            if (!opt.float32_qk_product && !opt.float32_logits) l = round_to<A>(l);
            logit.push_back(l);
          }
          double mx = *std::max_element(logit.begin(), logit.end());
          const double sink = sinks.empty() ? 0.0 : to_float(sinks(n));
          if (!sinks.empty()) mx = std::max(mx, sink);
          double denom = sinks.empty() ? 0.0 : std::exp(sink - mx);
          for (double l : logit) denom += std::exp(l - mx);
          for (std::int64_t i = 0; i < d; ++i) {
            double acc = 0.0;
            for (std::size_t e = 0; e < keys.size(); ++e) acc += std::exp(logit[e] - mx) * to_float(keys[e][i]);
            out(b, t, n, i) = from_float<A>(static_cast<float>(acc / denom));
          }
        }
      }
    }
  }

  // ---- Gated DeltaNet (families/qwen3_next/qwen3_next.hpp; semantics: BackendGatedDeltaNet in concepts.hpp) --------------
  /// The depthwise causal convolution with SiLU over each sequence, taps `dilation` inputs apart, continuing from
  /// (and updating) its conv state.
  template <class A>
  void causal_conv1d(View<const A, 2> x, View<const A, 1> w, View<const std::int32_t, 1> start,
                     View<const std::int32_t, 1> valid, View<float, 2> state, View<A, 2> y,
                     std::int64_t dilation = 1) const {
    const std::int64_t Bn = state.dim(0), M = x.dim(0), C = x.dim(1), T = M / Bn, K = w.dim(0) / C,
                       H = (K - 1) * dilation;
    for (std::int64_t b = 0; b < Bn; ++b) {
      const std::int64_t n = valid.empty() ? T : valid(b);
      std::vector<double> hist(static_cast<std::size_t>(H * C), 0.0);  // inputs before the step, oldest first
      if (start(b) != 0) {
        for (std::int64_t i = 0; i < H * C; ++i) hist[static_cast<std::size_t>(i)] = state(b, i);
      }
      const auto in = [&](std::int64_t s, std::int64_t c) -> double {
        return s >= 0 ? static_cast<double>(to_float(x(b * T + s, c))) : hist[static_cast<std::size_t>((H + s) * C + c)];
      };
      for (std::int64_t t = 0; t < T; ++t) {
        for (std::int64_t c = 0; c < C; ++c) {
          double acc = 0.0;
          for (std::int64_t i = 0; i < K; ++i) {
            acc += in(t - H + i * dilation, c) * static_cast<double>(to_float(w(i * C + c)));
          }
          const double r = round_to<A>(static_cast<float>(acc));
          y(b * T + t, c) = from_float<A>(static_cast<float>(r / (1.0 + std::exp(-r))));
        }
      }
      for (std::int64_t j = 0; j < H; ++j) {
        for (std::int64_t c = 0; c < C; ++c) state(b, j * C + c) = static_cast<float>(in(n - H + j, c));
      }
    }
  }

  /// The gated delta rule, token by token (the recurrence MaxText's chunked and autoregressive forms compute).
  template <class A>
  void gated_delta_rule(View<const A, 2> q, View<const A, 2> k, View<const A, 2> v, View<const A, 2> a,
                        View<const A, 2> bt, View<const float, 1> a_log, View<const float, 1> dt_bias,
                        const GdnShape& sh, View<const std::int32_t, 1> start, View<const std::int32_t, 1> valid,
                        View<float, 2> state, View<A, 2> o) const {
    const std::int64_t Bn = state.dim(0), T = q.dim(0) / Bn, Dk = sh.key_dim, Dv = sh.value_dim;
    const std::int64_t r = sh.value_heads / sh.key_heads;
    std::vector<double> S(static_cast<std::size_t>(Dk * Dv)), qn(static_cast<std::size_t>(Dk)), kn(qn.size()),
        u(static_cast<std::size_t>(Dv));
    const auto l2 = [&](View<const A, 2> x, std::int64_t m, std::int64_t col, double extra, std::vector<double>& out) {
      double ss = 0.0;
      for (std::int64_t i = 0; i < Dk; ++i) ss += std::pow(static_cast<double>(to_float(x(m, col + i))), 2);
      const double f = extra / std::sqrt(ss + 1e-6);
      for (std::int64_t i = 0; i < Dk; ++i) out[static_cast<std::size_t>(i)] = to_float(x(m, col + i)) * f;
    };
    for (std::int64_t b = 0; b < Bn; ++b) {
      const std::int64_t n = valid.empty() ? T : valid(b);
      for (std::int64_t h = 0; h < sh.value_heads; ++h) {
        const std::int64_t base = h * Dk * Dv, kc = (h / r) * Dk;
        for (std::int64_t i = 0; i < Dk * Dv; ++i) S[static_cast<std::size_t>(i)] = start(b) != 0 ? state(b, base + i) : 0.0;
        for (std::int64_t t = 0; t < T; ++t) {
          const std::int64_t m = b * T + t;
          l2(q, m, kc, 1.0 / std::sqrt(static_cast<double>(Dk)), qn);
          l2(k, m, kc, 1.0, kn);
          if (t < n) {
            const double beta = 1.0 / (1.0 + std::exp(-static_cast<double>(to_float(bt(m, h)))));
            const double z = static_cast<double>(to_float(a(m, h))) + dt_bias(h);
            const double sp = std::log1p(std::exp(-std::fabs(z))) + std::max(z, 0.0);
            const double decay = std::exp(-std::exp(static_cast<double>(a_log(h))) * sp);
            for (double& s : S) s *= decay;
            for (std::int64_t j = 0; j < Dv; ++j) {
              double ks = 0.0;
              for (std::int64_t i = 0; i < Dk; ++i) ks += kn[static_cast<std::size_t>(i)] * S[static_cast<std::size_t>(i * Dv + j)];
              u[static_cast<std::size_t>(j)] = beta * (static_cast<double>(to_float(v(m, h * Dv + j))) - ks);
            }
            for (std::int64_t i = 0; i < Dk; ++i) {
              for (std::int64_t j = 0; j < Dv; ++j) {
                S[static_cast<std::size_t>(i * Dv + j)] += kn[static_cast<std::size_t>(i)] * u[static_cast<std::size_t>(j)];
              }
            }
          }
          for (std::int64_t j = 0; j < Dv; ++j) {
            double acc = 0.0;
            for (std::int64_t i = 0; i < Dk; ++i) acc += qn[static_cast<std::size_t>(i)] * S[static_cast<std::size_t>(i * Dv + j)];
            o(m, h * Dv + j) = from_float<A>(static_cast<float>(acc));
          }
        }
        for (std::int64_t i = 0; i < Dk * Dv; ++i) state(b, base + i) = static_cast<float>(S[static_cast<std::size_t>(i)]);
      }
    }
  }

 private:
  template <class W>
  static std::shared_ptr<const void> decoded(const Matrix<W>& m) {
    auto f = std::make_shared<std::vector<float>>(static_cast<std::size_t>(m.rows * m.cols));
    for (std::int64_t r = 0; r < m.rows; ++r) {
      quant::dequantize_any(m.ggml_type, reinterpret_cast<const std::byte*>(m.data.data()) + r * m.storage_cols(),
                            f->data() + r * m.cols, m.cols);
    }
    quant::scale_values(f->data(), m.rows * m.cols, m.value_scale);
    return f;
  }
  template <class W>
  static double weight(const Matrix<W>& w, std::int64_t n, std::int64_t k) {
    if constexpr (std::is_same_v<W, ggml_byte>) {
      // Matrices that were never prepared (gathered tables) are decoded here, one block at a time.
      if (w.packed) return (*static_cast<const std::vector<float>*>(w.packed.get()))[static_cast<std::size_t>(n * w.cols + k)];
      const quant::TypeInfo& f = quant::checked_type_info(w.ggml_type);
      float v[256];
      quant::dequantize_any(w.ggml_type, reinterpret_cast<const std::byte*>(w.data.data()) + n * w.storage_cols() +
                                             k / f.block * f.bytes, v, f.block);
      return quant::scaled_value(v[k % f.block], w.value_scale);
    } else if constexpr (std::is_same_v<W, q8_0>) {
      const q8_0& blk = w.data(n, k / q8_0::block);
      return static_cast<double>(static_cast<float>(blk.d) * static_cast<float>(blk.qs[k % q8_0::block]));
    } else {
      return to_float(w.data(n, k));
    }
  }

  static float act(Activation a, float x) {
    const double d = x;
    switch (a) {
      case Activation::linear: return x;
      case Activation::relu: return x > 0.0f ? x : 0.0f;
      case Activation::gelu: return static_cast<float>(0.5 * d * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (d + 0.044715 * d * d * d))));
      case Activation::gelu_exact: return static_cast<float>(0.5 * d * (1.0 + std::erf(d / std::sqrt(2.0))));
      case Activation::silu: return static_cast<float>(d / (1.0 + std::exp(-d)));
      case Activation::sigmoid: return static_cast<float>(1.0 / (1.0 + std::exp(-d)));
      case Activation::tanh: return static_cast<float>(std::tanh(d));
      case Activation::softplus: return static_cast<float>(std::log1p(std::exp(-std::fabs(d))) + std::max(d, 0.0));
      case Activation::sqrtsoftplus:
        return static_cast<float>(std::sqrt(std::log1p(std::exp(-std::fabs(d))) + std::max(d, 0.0)));
    }
    return x;
  }

  /// attention.md §2 on cache indices: the key exists (s < kv_len, checked by the caller), the position terms
  /// (causal; sliding window and chunk, which also require s <= qi) and the segment term.
  /// A picture's keys (bidir_begin <= s < bidir_end of the query) are visible whatever the other terms say.
  static bool allowed(const AttentionMask& m, std::int64_t b, std::int64_t t, std::int64_t qi, std::int64_t s) {
    if (!m.bidir_end.empty() && m.bidir_begin(b, t) <= s && s < m.bidir_end(b, t)) return true;
    if (m.causal && s > qi) return false;
    if (m.sliding_window > 0 && !(qi - m.sliding_window < s && s <= qi)) return false;
    if (m.chunk > 0) {
      const auto fl = [&](std::int64_t a) { return a / m.chunk; };  // indices are >= 0
      if (!(fl(qi) == fl(s) && s <= qi)) return false;
    }
    if (!m.kv_segment.empty()) {
      const std::int32_t ks = m.kv_segment(b, s);
      const std::int32_t qs = m.q_segment.empty() ? 0 : m.q_segment(b, t);
      if (!(qs == ks && ks >= 0)) return false;
    }
    return true;
  }
};

}  // namespace maxtext::reference

static_assert(::maxtext::Backend<::maxtext::reference::Backend>, "reference::Backend must satisfy the Backend concept");
static_assert(::maxtext::BackendMoE<::maxtext::reference::Backend>, "reference::Backend must provide the MoE kernels");
static_assert(::maxtext::BackendHeadMatmul<::maxtext::reference::Backend>, "reference::Backend must provide head_matmul");
static_assert(::maxtext::BackendHyperConnections<::maxtext::reference::Backend>, "reference::Backend must provide the mHC stream ops");
static_assert(::maxtext::BackendGatedDeltaNet<::maxtext::reference::Backend>, "reference::Backend must provide the Gated DeltaNet ops");
static_assert(::maxtext::BackendEngram<::maxtext::reference::Backend>, "reference::Backend must provide the Engram gate");
