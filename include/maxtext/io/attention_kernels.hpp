// io/attention_kernels.hpp: a file's attention and dense projection matrices as MaxText kernels (views where the
// layout allows, else materialised: rotary lanes re-paired, a query scale folded in, Q8_0 blocks kept as blocks).
// Shared by the llama.cpp / Hugging Face importers (families/llama2/import.hpp) and the Gemma importer (families/gemma/import.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/convert.hpp"

namespace maxtext::io {

/// Which lanes of a head the rotary embedding pairs.
enum class RopeLayout : std::uint8_t { half_split, interleaved };

namespace detail {

/// Lane `j` of the destination pairing reads lane src_lane(j) of the source pairing.
inline std::int64_t src_lane(std::int64_t j, std::int64_t H, RopeLayout from, RopeLayout to) {
  if (from == to) return j;
  const std::int64_t half = H / 2;
  if (from == RopeLayout::interleaved) {  // to half-split: new[i] = old[2i], new[i + H/2] = old[2i + 1]
    return j < half ? 2 * j : 2 * (j - half) + 1;
  }
  return (j % 2 == 0) ? j / 2 : j / 2 + half;  // half-split to interleaved: new[2i] = old[i], new[2i+1] = old[i+H/2]
}

}  // namespace detail

/// Whether `w` (Q8_0) stores each row as contiguous blocks, the layout attention_kernel keeps as blocks.
inline bool q8_0_rows_contiguous(const AnyTensor& w) {
  return w.dtype == DType::q8_0 && w.block_axis < 0 && w.strides.back() == 1;
}

/// The MaxText attention kernel [D, heads, H] for a file's projection matrix w [heads*H, D] (out-major): a view when
/// nothing changes, else a materialised copy with the rotary lanes re-paired and/or every value scaled by `scale`
/// (float sources with a scale: f32 result, value = float(double(w) * scale); F32 / F16 / BF16 rows only re-paired
/// keep their type; Q8_0 sources stay Q8_0 with the block scales multiplied, rounded to fp16; runtime-typed blocks
/// stay blocks, the scale kept as value_scale).
inline AnyTensor attention_kernel(const AnyTensor& w, std::int64_t heads, std::int64_t H, RopeLayout from, RopeLayout to,
                                  double scale, const std::string& name) {
  MAXTEXT_CHECK(w.rank() == 2 && w.shape[0] == heads * H, ShapeError, "[import] ", w.source, " (", name,
                "): expected a [", heads * H, ", D] matrix (", heads, " heads of ", H, "), found ", w.shape);
  const std::int64_t D = w.shape[1];
  MAXTEXT_CHECK(from == to || H % 2 == 0, ShapeError, "[import] ", w.source, ": rotary lanes need an even head_dim, found ", H);
  AnyTensor out;
  if (from == to && scale == 1.0) {
    out = w;
  } else if (w.dtype == DType::q8_0) {
    MAXTEXT_CHECK(q8_0_rows_contiguous(w), UnsupportedError, "[import] ", w.source, ": Q8_0 rows must be contiguous blocks");
    const std::int64_t nb = D / q8_0::block;
    Tensor<q8_0, 2> q({heads * H, nb});
    const auto* src = reinterpret_cast<const q8_0*>(w.data);
    for (std::int64_t n = 0; n < heads; ++n) {
      for (std::int64_t j = 0; j < H; ++j) {
        const std::int64_t r = n * H + detail::src_lane(j, H, from, to);
        for (std::int64_t b = 0; b < nb; ++b) {
          q8_0 blk = src[r * w.strides[0] + b];
          if (scale != 1.0) blk.d = fp16(static_cast<float>(static_cast<double>(static_cast<float>(blk.d)) * scale));
          q(n * H + j, b) = blk;
        }
      }
    }
    out.dtype = DType::q8_0;
    out.shape = {heads * H, D};
    out.strides = AnyTensor::dense_strides(out.shape, out.dtype);
    out.data = reinterpret_cast<const std::byte*>(q.data());
    out.holder = q.holder();
    out.source = w.source;
  } else if ((w.dtype == DType::ggml && w.strides.back() == 1 &&
              w.strides[0] % quant::checked_type_info(w.ggml_type).block == 0) ||
             (scale == 1.0 && w.strides.back() == 1 &&
              (w.dtype == DType::f32 || w.dtype == DType::f16 || w.dtype == DType::bf16))) {
    // Whole rows re-ordered in the file's own type: runtime-typed blocks (Q4_K, Q6_K, ...; the scale rides along as
    // the tensor's value_scale, applied after decoding: folding it into the fp16 block scales, as for Q8_0, is not
    // exact, K-quant scales being often fp16 subnormals that even a power of two shifts bits out of), or F32 / F16 /
    // BF16 values. The rows read are then handed back to the page cache where they were a mapped file's
    // (core/mapped_pages.hpp): the copy is their one resident copy.
    out = w;
    if (w.dtype == DType::ggml) out.value_scale = w.value_scale * scale;
    if (from != to) {
      const std::int64_t rb = w.dtype == DType::ggml ? quant::row_bytes(w.ggml_type, D)
                                                     : D * static_cast<std::int64_t>(dtype_size(w.dtype));
      auto buf = std::shared_ptr<std::byte[]>(new std::byte[static_cast<std::size_t>(heads * H * rb)]);
      for (std::int64_t n = 0; n < heads; ++n) {
        for (std::int64_t j = 0; j < H; ++j) {
          std::memcpy(buf.get() + (n * H + j) * rb,
                      w.data + w.byte_offset((n * H + detail::src_lane(j, H, from, to)) * w.strides[0]),
                      static_cast<std::size_t>(rb));
        }
      }
      if (w.strides[0] > 0) drop_mapped_pages(w.data, w.byte_offset((heads * H - 1) * w.strides[0]) + static_cast<std::size_t>(rb));
      out.shape = {heads * H, D};
      out.strides = AnyTensor::dense_strides(out.shape, w.dtype);
      out.data = buf.get();
      out.holder = std::shared_ptr<const void>(buf, buf.get());
    }
  } else {
    const Tensor<float, 2> f = to_matrix<float>(w, {0, 1}, 1);
    Tensor<float, 2> r({heads * H, D});
    for (std::int64_t n = 0; n < heads; ++n) {
      for (std::int64_t j = 0; j < H; ++j) {
        const float* s = &f(n * H + detail::src_lane(j, H, from, to), 0);
        float* d = &r(n * H + j, 0);
        if (scale == 1.0) {
          std::memcpy(d, s, static_cast<std::size_t>(D) * sizeof(float));
        } else {
          for (std::int64_t k = 0; k < D; ++k) d[k] = static_cast<float>(static_cast<double>(s[k]) * scale);
        }
      }
    }
    out = AnyTensor::from(r, w.source);
  }
  out.source = w.source + " as " + name;
  // [heads*H, D] -> [heads, H, D] -> [D, heads, H]
  AnyTensor v = out.reshaped({heads, H, D});
  return v.permuted({2, 0, 1});
}

/// The MaxText out kernel [heads, H, D] for a file's output projection w [D, heads*H] (out-major): a view.
inline AnyTensor attention_out_kernel(const AnyTensor& w, std::int64_t heads, std::int64_t H, const std::string& name) {
  MAXTEXT_CHECK(w.rank() == 2 && w.shape[1] == heads * H, ShapeError, "[import] ", w.source, " (", name,
                "): expected a [D, ", heads * H, "] matrix, found ", w.shape);
  AnyTensor t = w;
  // [D, heads*H] -> [D, heads, H] -> [heads, H, D]. Splitting the input axis of a Q8_0 matrix keeps its blocks only
  // when a head spans whole blocks; otherwise dequantise (a Q8_0 policy re-quantises the same blocks losslessly:
  // llama.cpp's blocks always hold a +-127 value, so amax/127 gives back the same scale).
  if (w.dtype == DType::q8_0 && (H % q8_0::block != 0 || w.block_axis >= 0 || w.strides.back() != 1)) {
    t = AnyTensor::from(to_matrix<float>(w, {0, 1}, 1), w.source);
  }
  t.source = w.source + " as " + name;
  const std::int64_t D = w.shape[0];
  if (t.dtype == DType::q8_0) {
    t.shape = {D, heads, H};
    t.strides = {t.strides[0], H / q8_0::block, 1};
  } else {
    t.shape = {D, heads, H};
    t.strides = {t.strides[0], H * t.strides[1], t.strides[1]};
  }
  return t.permuted({1, 2, 0});
}

/// A dense MaxText kernel [in, out] viewing a file's [out, in] matrix.
inline AnyTensor dense_kernel(const AnyTensor& w, const std::string& name) {
  MAXTEXT_CHECK(w.rank() == 2, ShapeError, "[import] ", w.source, " (", name, "): expected a matrix, found ", w.shape);
  AnyTensor t = w.permuted({1, 0});
  t.source = w.source + " as " + name;
  return t;
}

}  // namespace maxtext::io
