// python/src/blocks.hpp: the model types compiled in the per-block translation units. Each block_*.cpp
// instantiates make_model_binding for its decoder block on every policy models::with_model_type offers
// (MAXTEXT_PY_BLOCK(template, ...)); the module TU declares the same instantiations `extern` so that it only
// dispatches. A decoder block added to the registry later but not listed here still works: the module TU then
// instantiates it itself (slower to compile; add a block_<name>.cpp and a line below to move it out).
#pragma once

#include "binding.hpp"
#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/policy.hpp"

namespace maxtext::python {
using PolicyF32 = Policy<cpu::Backend, float>;
using PolicyBf16Weights = Policy<cpu::Backend, bf16, float>;
using PolicyF16Weights = Policy<cpu::Backend, fp16, float>;
using PolicyQ8Weights = Policy<cpu::Backend, q8_0, float>;
using PolicyBf16 = Policy<cpu::Backend, bf16>;
}  // namespace maxtext::python

/// `KW` is `template` (an explicit instantiation, in block_*.cpp) or `extern template` (the module TU); the rest
/// are the layer templates of models::Transformer.
#define MAXTEXT_PY_BLOCK_ONE(KW, POLICY, ...)                                                                      \
  KW std::unique_ptr<::maxtext::python::ModelBinding>                                                              \
  maxtext::python::make_model_binding<::maxtext::models::Transformer<::maxtext::python::POLICY, __VA_ARGS__>>(    \
      const ::maxtext::Config&, const ::maxtext::python::ModelOptions&);
#define MAXTEXT_PY_BLOCK(KW, ...)                              \
  MAXTEXT_PY_BLOCK_ONE(KW, PolicyF32, __VA_ARGS__)             \
  MAXTEXT_PY_BLOCK_ONE(KW, PolicyBf16Weights, __VA_ARGS__)     \
  MAXTEXT_PY_BLOCK_ONE(KW, PolicyF16Weights, __VA_ARGS__)      \
  MAXTEXT_PY_BLOCK_ONE(KW, PolicyQ8Weights, __VA_ARGS__)       \
  MAXTEXT_PY_BLOCK_ONE(KW, PolicyBf16, __VA_ARGS__)

/// Every block with its own translation unit (keep in step with python/CMakeLists.txt).
#define MAXTEXT_PY_ALL_BLOCKS(KW)                                                      \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::Gpt3DecoderLayer)                            \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::DecoderLayer)                                \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::LlamaDecoderLayer)                           \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::MistralDecoderLayer)                         \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::MixtralDecoderLayer)                         \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::Qwen3DecoderLayer)                           \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::DeepSeekDenseLayer, ::maxtext::layers::DeepSeekMoELayer)         \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::Qwen2DecoderLayer)                           \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::Qwen3MoeDecoderLayer)                        \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::SimpleDecoderLayer)                          \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::SimpleMlpDecoderLayer)                       \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::GemmaDecoderLayer)                           \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::Gemma2DecoderLayer)                          \
  MAXTEXT_PY_BLOCK(KW, ::maxtext::layers::Gemma3DecoderLayer)
