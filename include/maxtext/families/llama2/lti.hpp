// families/llama2/lti.hpp: MaxText's learn-to-init (LTI) attention factors (layers/learn_to_init_layer.py LearnToInitDense,
// calculate_attn_weight) collapsed into plain attention kernels, for decoder_block "llama2lti" (the llama2 block whose
// student checkpoint was saved in learn_to_init_mode; also decoder_block "llama2" with learn_to_init_mode: true, as
// MaxText spells it); docs/numerics.md §llama2lti.
//
// In learn_to_init_mode MaxText replaces `self_attention.{query,key,value,out}.kernel` of the llama2 layers (all, or
// those in lti_layer_indices) by a frozen teacher tensor C and learnt factors, and computes the kernel in every
// forward pass; at the end of training apply_lti_model_update stores that kernel in place of the factors. With
//   query / key / value: C [D, x, y] (teacher heads x, teacher head_dim y), student kernel [D, u, v]
//   out:                 C [x, y, D],                                     student kernel [u, v, D]
// the kernel is (einsum spellings as MaxText's _calc_attn_weight):
//   factorised  q/k/v: kernel[b,u,v] = sum_{x,y} C[b,x,y] A[x,u] B[y,v]        A [x, u], B [y, v]
//               out:   kernel[u,v,b] = sum_{x,y} C[x,y,b] A[x,u] B[v,y]        A [x, u], B [v, y]
//   general map q/k/v: kernel[b,u,v] = sum_{x,y} C[b,x,y] W[x,y,u,v]           W [x, y, u, v]
//               out:   kernel[u,v,b] = sum_{x,y} C[x,y,b] W[x,y,u,v]
// Scanned checkpoints carry the layer axis at position 1 of every one of these tensors (C [D, L, x, y], A [x, L, u],
// ...): families/checkpoint.hpp unstacks them like any scanned parameter before the collapse. The sums are evaluated in
// double and rounded once to f32 (MaxText evaluates them with config.matmul_precision on the accelerator).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

namespace detail {

inline std::vector<double> lti_values(const AnyTensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = t.element(i);
  return v;
}

/// The collapsed kernel of one LTI projection `p` (prefix "decoder.layers_i.self_attention.<proj>.").
inline AnyTensor lti_kernel(const TensorMap& m, const std::string& p, bool out_proj) {
  const AnyTensor& C = m.at(p + "C");
  const bool general = m.has(p + "W");
  const std::string src = C.source;
  MAXTEXT_CHECK(C.rank() == 3, ShapeError, "[lti] ", src, " ", C.describe(),
                ": expected a rank-3 teacher kernel (", out_proj ? "[heads, head_dim, D]" : "[D, heads, head_dim]", ")");
  const std::int64_t b = out_proj ? C.shape[2] : C.shape[0];
  const std::int64_t x = out_proj ? C.shape[0] : C.shape[1];
  const std::int64_t y = out_proj ? C.shape[1] : C.shape[2];
  std::int64_t u = 0, v = 0;
  std::vector<double> c = lti_values(C), a, bb, w;
  if (general) {
    MAXTEXT_CHECK(!m.has(p + "A") && !m.has(p + "B"), IoError, "[lti] ", src, ": ", p,
                  "W (general linear map) and the factors A / B are both present");
    const AnyTensor& W = m.at(p + "W");
    MAXTEXT_CHECK(W.rank() == 4 && W.shape[0] == x && W.shape[1] == y, ShapeError, "[lti] ", W.source, " ", W.describe(),
                  ": expected [", x, ", ", y, ", student heads, student head_dim] for ", p, "C ", C.describe());
    u = W.shape[2];
    v = W.shape[3];
    w = lti_values(W);
  } else {
    MAXTEXT_CHECK(m.has(p + "A") && m.has(p + "B"), IoError, "[lti] ", src, ": ", p,
                  "C needs either W or both factors A and B; missing tensor ", m.has(p + "A") ? p + "B" : p + "A");
    const AnyTensor& A = m.at(p + "A");
    const AnyTensor& B = m.at(p + "B");
    MAXTEXT_CHECK(A.rank() == 2 && A.shape[0] == x, ShapeError, "[lti] ", A.source, " ", A.describe(),
                  ": expected [", x, " (teacher heads), student heads]");
    u = A.shape[1];
    if (out_proj) {
      MAXTEXT_CHECK(B.rank() == 2 && B.shape[1] == y, ShapeError, "[lti] ", B.source, " ", B.describe(),
                    ": expected [student head_dim, ", y, " (teacher head_dim)]");
      v = B.shape[0];
    } else {
      MAXTEXT_CHECK(B.rank() == 2 && B.shape[0] == y, ShapeError, "[lti] ", B.source, " ", B.describe(),
                    ": expected [", y, " (teacher head_dim), student head_dim]");
      v = B.shape[1];
    }
    a = lti_values(A);
    bb = lti_values(B);
  }
  // C index of (b, x, y) and kernel index of (b, u, v) in the projection's own axis order.
  auto ci = [&](std::int64_t bi, std::int64_t xi, std::int64_t yi) {
    return static_cast<std::size_t>(out_proj ? (xi * y + yi) * b + bi : (bi * x + xi) * y + yi);
  };
  Tensor<float, 3> k(out_proj ? Shape<3>{u, v, b} : Shape<3>{b, u, v});
  std::vector<double> coef(static_cast<std::size_t>(x * y));  // the (x, y) weights of one (u, v)
  for (std::int64_t ui = 0; ui < u; ++ui) {
    for (std::int64_t vi = 0; vi < v; ++vi) {
      for (std::int64_t xi = 0; xi < x; ++xi) {
        for (std::int64_t yi = 0; yi < y; ++yi) {
          double f;
          if (general) {
            f = w[static_cast<std::size_t>(((xi * y + yi) * u + ui) * v + vi)];
          } else {
            const double bv = out_proj ? bb[static_cast<std::size_t>(vi * y + yi)] : bb[static_cast<std::size_t>(yi * v + vi)];
            f = a[static_cast<std::size_t>(xi * u + ui)] * bv;
          }
          coef[static_cast<std::size_t>(xi * y + yi)] = f;
        }
      }
      for (std::int64_t bi = 0; bi < b; ++bi) {
        double s = 0.0;
        for (std::int64_t xi = 0; xi < x; ++xi) {
          for (std::int64_t yi = 0; yi < y; ++yi) s += c[ci(bi, xi, yi)] * coef[static_cast<std::size_t>(xi * y + yi)];
        }
        (out_proj ? k(ui, vi, bi) : k(bi, ui, vi)) = static_cast<float>(s);
      }
    }
  }
  return AnyTensor::from(k, src + " (learn-to-init kernel of " + p + "{" + (general ? "C, W" : "C, A, B") + "})");
}

}  // namespace detail

/// Replace every learn-to-init projection of `m` (canonical, unscanned MaxText names) by its collapsed kernel.
/// A projection with both a kernel and factors, or factors without C, is refused by name.
inline void collapse_lti_factors(TensorMap& m) {
  std::vector<std::pair<std::string, bool>> projections;  // (prefix, out projection)
  for (const auto& [name, t] : m.tensors) {
    for (const char* proj : {"query", "key", "value", "out"}) {
      const std::string tail = std::string(".self_attention.") + proj + ".";
      const std::size_t at = name.find(tail);
      if (at == std::string::npos || name.size() != at + tail.size() + 1) continue;
      const char f = name.back();
      if (f != 'A' && f != 'B' && f != 'C' && f != 'W') continue;
      const std::string p = name.substr(0, at + tail.size());
      MAXTEXT_CHECK(m.has(p + "C"), IoError, "[lti] ", t.source, " has no teacher tensor ", p, "C");
      MAXTEXT_CHECK(!m.has(p + "kernel"), IoError, "[lti] ", t.source, ": ", p, "kernel and learn-to-init factors (", name,
                    ") are both present");
      if (f == 'C') projections.emplace_back(p, std::string(proj) == "out");
    }
  }
  for (const auto& [p, out_proj] : projections) {
    AnyTensor k = detail::lti_kernel(m, p, out_proj);
    for (const char* f : {"A", "B", "C", "W"}) m.tensors.erase(p + f);
    m.add(p + "kernel", std::move(k));
  }
}

}  // namespace maxtext::io
