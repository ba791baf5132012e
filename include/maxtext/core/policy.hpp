// core/policy.hpp: the tensor policy, the one compile-time parameter of every layer.
// Types are fixed at compile time (backend, weight storage, activations, accumulation); sizes come from a runtime
// Config. MaxText's `dtype` is the activation type; its `weight_dtype` only matters before the cast to `dtype`
// that every layer performs on its parameters, so storing weights in `dtype` reproduces MaxText exactly.
#pragma once

#include <type_traits>

#include "maxtext/core/dtype.hpp"

namespace maxtext {

/// Backend B, weight storage W (float, bf16, fp16, q8_0, or ggml_byte: each matrix in its GGUF type), activation type
/// A (MaxText `dtype`: float, bf16 or fp16; defaults to W for float types and to float for Q8_0 and ggml_byte),
/// accumulation type Acc (float), KV-cache element type KV (defaults to A, as in MaxText).
/// Small parameters (norm scales, biases, sinks) are stored in A, as MaxText casts them to `dtype` before use.
/// A KV type narrower than A (fp16 or bf16 with f32 activations; llama.cpp's default cache is f16) is this library's
/// option, not a MaxText config: keys and values are rounded to KV as they are written, and every attention (prefill
/// included) reads them as the cache holds them. Layers whose cache is not a pair of key/value buffers read by
/// AttentionOp (MLA, DeepSeek-V4's compressed attention) refuse it at compile time.
template <class B, class W, class A = std::conditional_t<std::is_same_v<W, q8_0> || std::is_same_v<W, ggml_byte>, float, W>,
          class Acc = float, class KV = A>
struct Policy {
  using backend = B;
  using weight_t = W;   ///< matrices and embedding tables
  using storage_t = W;  ///< alias of weight_t (the "storage type" of the policy)
  using act_t = A;      ///< activations, residual stream, small parameters
  using compute_t = Acc;
  using cache_t = KV;   ///< KV-cache buffers (keys, values; MLA's latents)
};

/// A type usable as the policy of a layer.
template <class P>
concept TensorPolicy = requires {
  typename P::backend;
  typename P::weight_t;
  typename P::act_t;
  typename P::compute_t;
  typename P::cache_t;
} && FloatElement<typename P::act_t> && FloatElement<typename P::cache_t> &&
                       std::is_same_v<typename P::compute_t, float>;

}  // namespace maxtext
