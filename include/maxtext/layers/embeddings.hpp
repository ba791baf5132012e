// layers/embeddings.hpp: MaxText embeddings.py Embed (token and trainable position tables, `attend` for tied
// logits) and the sinusoidal PositionalEmbedding; spec decoder.md, rope.md §Sinusoidal.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// A lookup table [num_embeddings, features] (normal(1) init). forward gathers rows cast to the activation type;
/// attend computes x . table^T (the tied output head).
template <TensorPolicy P>
class Embed {
 public:
  using A = typename P::act_t;
  using W = typename P::weight_t;
  struct Config {
    std::int64_t num_embeddings = 0;
    std::int64_t features = 0;
  };
  struct Params {
    Matrix<W> embedding;  ///< [num_embeddings, features]
  };

  Embed() = default;
  explicit Embed(const Config& cfg) : cfg_(cfg) {
    MAXTEXT_CHECK(cfg.num_embeddings > 0 && cfg.features > 0, ConfigError,
                  "[Embed] num_embeddings and features must be > 0, found ", cfg.num_embeddings, " and ", cfg.features);
  }
  const Config& config() const { return cfg_; }

  template <class V>
  void visit(V& v, Params& p) const {
    v.table("embedding", p.embedding, cfg_.num_embeddings, cfg_.features, {{}, Init::normal, 1.0});
  }

  /// ids [rows] (range-checked by the caller) -> y [rows, features].
  void forward(const Context<P>& ctx, const Params& p, View<const std::int32_t, 1> ids, View<A, 2> y) const {
    ctx.be.embed(p.embedding, ids, y);
  }

 private:
  Config cfg_;
};

/// MaxText rounds the table to bfloat16 for `attend` (even with dtype float32): build that copy of a host table.
/// A runtime-typed table of F32 / F16 / BF16 rows (a GGUF file of float matrices, read in place) gets BF16 rows of
/// bf16(value x value_scale), the values MaxText's attend reads, in half the bytes of an F32 copy (value_scale 1: the
/// rounding is exact in BF16); a BF16 table without a factor is its own copy. Block tables (Q8_0, Q4_K, Q6_K, ...)
/// keep their blocks: they are used as the file has them.
template <class W>
Matrix<W> bf16_rounded_copy(const Matrix<W>& m) {
  if constexpr (std::is_same_v<W, float> || std::is_same_v<W, fp16>) {
    Matrix<W> r = m;
    Tensor<W, 2> t(m.data.shape());
    for (std::int64_t i = 0; i < t.size(); ++i) t.data()[i] = W(round_to<bf16>(static_cast<float>(m.data.data()[i])));
    r.data = t;
    r.packed = nullptr;
    return r;
  } else if constexpr (std::is_same_v<W, ggml_byte>) {
    const bool float_rows = m.ggml_type == quant::kTypeF32 || m.ggml_type == quant::kTypeF16 || m.ggml_type == quant::kTypeBF16;
    if (!float_rows || (m.ggml_type == quant::kTypeBF16 && m.value_scale == 1.0) || m.data.empty()) return m;
    Matrix<W> r = m;
    r.ggml_type = quant::kTypeBF16;
    r.value_scale = 1.0;
    r.packed = nullptr;
    const std::int64_t in_bytes = m.storage_cols(), out_bytes = quant::row_bytes(quant::kTypeBF16, m.cols);
    Tensor<W, 2> t({m.rows, out_bytes});
    std::vector<float> row(static_cast<std::size_t>(m.cols));
    for (std::int64_t n = 0; n < m.rows; ++n) {
      quant::dequantize_any(m.ggml_type, reinterpret_cast<const std::byte*>(m.data.data() + n * in_bytes), row.data(), m.cols);
      quant::scale_values(row.data(), m.cols, m.value_scale);
      auto* out = reinterpret_cast<std::byte*>(t.data() + n * out_bytes);
      for (std::int64_t i = 0; i < m.cols; ++i) {
        const std::uint16_t b = bf16(row[static_cast<std::size_t>(i)]).bits;
        std::memcpy(out + 2 * i, &b, 2);
      }
    }
    r.data = t;
    return r;
  } else {
    return m;  // bf16 already; Q8_0 keeps its own rounding
  }
}

/// bf16_rounded_copy of a table in backend memory: round on the host, back into the backend's memory.
template <class B, class W>
Matrix<W> bf16_rounded_copy(const B& be, const Matrix<W>& m) {
  if (m.data.host_accessible()) return bf16_rounded_copy(m);
  Matrix<W> host = m;
  host.data = download(be, m.data);
  Matrix<W> r = bf16_rounded_copy(host);
  r.data = upload(be, r.data);
  return r;
}

/// Sinusoidal positions (use_untrainable_positional_embedding): pe[p] = [sin(p * inv_i), cos(p * inv_i)],
/// inv_i = exp(-i * ln(10000) / max(n - 1, 1)), n = dims / 2; f32. Returns a host table [max_len, dims].
inline Tensor<float, 2> sinusoidal_table(std::int64_t max_len, std::int64_t dims, double max_wavelength = 10000.0) {
  MAXTEXT_CHECK(dims > 0 && dims % 2 == 0, ConfigError, "[PositionalEmbedding] embedding dims must be even, found ", dims);
  const std::int64_t n = dims / 2;
  const float inc = static_cast<float>(std::log(max_wavelength)) / static_cast<float>(std::max<std::int64_t>(n - 1, 1));
  Tensor<float, 2> t({max_len, dims});
  for (std::int64_t p = 0; p < max_len; ++p) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float inv = std::exp(-static_cast<float>(i) * inc);
      const float a = static_cast<float>(p) * inv;
      t(p, i) = std::sin(a);
      t(p, n + i) = std::cos(a);
    }
  }
  return t;
}

}  // namespace maxtext::layers
