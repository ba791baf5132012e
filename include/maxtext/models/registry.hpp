// models/registry.hpp: from a runtime Config (decoder_block, dtype) to the compile-time model type, for programs
// that pick the architecture from a file (the `maxtext` tool). Library users normally name their type directly.
#pragma once

#include <string>
#include <string_view>

#include "maxtext/backend/concepts.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/decoder_blocks.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/deepseek4/deepseek4.hpp"
#include "maxtext/families/envy/envy.hpp"
#include "maxtext/families/gemma/gemma.hpp"
#include "maxtext/families/gemma/gemma2.hpp"
#include "maxtext/families/gemma/gemma3.hpp"
#include "maxtext/families/gemma4/gemma4.hpp"
#include "maxtext/families/gemma4/gemma4_small.hpp"
#include "maxtext/families/gpt3/gpt3.hpp"
#include "maxtext/families/gpt_oss/gpt_oss.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/llama4/llama4.hpp"
#include "maxtext/families/mistral/mistral.hpp"
#include "maxtext/families/mistral/mixtral.hpp"
#include "maxtext/families/olmo3/olmo3.hpp"
#include "maxtext/families/qwen/qwen2.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/families/qwen/qwen3_custom.hpp"
#include "maxtext/families/qwen3_next/qwen3_5.hpp"
#include "maxtext/families/qwen3_next/qwen3_next.hpp"
#include "maxtext/families/simple/simple_layer.hpp"
#include "maxtext/layers/decoders.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

namespace detail {
/// Whether every layer type of a block-list entry names that block (decoder_block_name, which Transformer checks
/// configs against).
template <TensorPolicy P, template <TensorPolicy> class... L>
constexpr bool layers_named(std::string_view block) {
  return ((std::string_view(L<P>::decoder_block_name) == block) && ...);
}
}  // namespace detail

/// Whether the block list and the layers' own decoder_block_name agree on policy P (an alias runs on the layers of
/// the block it names). The project's build checks it once (static_assert in tests/support/registry_params.cpp).
template <TensorPolicy P>
constexpr bool block_list_matches_layers() {
#define MAXTEXT_NAMED_BLOCK(name, ...) detail::layers_named<P, __VA_ARGS__>(#name) &&
#define MAXTEXT_NAMED_ALIAS(name, of, ...) detail::layers_named<P, __VA_ARGS__>(#of) &&
  return MAXTEXT_DECODER_BLOCKS(MAXTEXT_NAMED_BLOCK, MAXTEXT_NAMED_ALIAS) true;
#undef MAXTEXT_NAMED_ALIAS
#undef MAXTEXT_NAMED_BLOCK
}

/// The model type for a decoder_block on policy P: one `if` per entry of the block list (core/decoder_blocks.hpp).
template <TensorPolicy P, class F>
decltype(auto) dispatch_block(const Config& cfg, F&& f) {
#define MAXTEXT_DISPATCH_BLOCK(name, ...) \
  if (cfg.is(#name)) return f.template operator()<Transformer<P, __VA_ARGS__>>();
#define MAXTEXT_DISPATCH_ALIAS(name, of, ...) MAXTEXT_DISPATCH_BLOCK(name, __VA_ARGS__)
  MAXTEXT_DECODER_BLOCKS(MAXTEXT_DISPATCH_BLOCK, MAXTEXT_DISPATCH_ALIAS)
#undef MAXTEXT_DISPATCH_ALIAS
#undef MAXTEXT_DISPATCH_BLOCK
  MAXTEXT_THROW(UnsupportedError, "[registry] decoder_block '", cfg.decoder_block,
                "' has no model type in this build of the registry");
}

/// Call f.template operator()<ModelType>() for the model the config describes on backend B, with activations in
/// the config's `dtype` and weights stored as `weight_storage` ("" = same as dtype; "bfloat16", "float16",
/// "q8_0" with float32 activations; "ggml": every matrix in its GGUF type, Q4_K, Q6_K, ... included, on backends that
/// compute from runtime-typed blocks, see backend_has_runtime_typed_weights).
template <class B, class F>
decltype(auto) with_model_type(const Config& cfg, F&& f, const std::string& weight_storage = "") {
  const std::string dt = cfg.dtype_canonical();
  const std::string ws = weight_storage.empty() ? dt : weight_storage;
  if (dt == "float32") {
    if (ws == "float32") return dispatch_block<Policy<B, float>>(cfg, f);
    if (ws == "bfloat16" || ws == "bf16") return dispatch_block<Policy<B, bf16, float>>(cfg, f);
    if (ws == "float16" || ws == "f16") return dispatch_block<Policy<B, fp16, float>>(cfg, f);
    if (ws == "q8_0") return dispatch_block<Policy<B, q8_0, float>>(cfg, f);
    if constexpr (backend_has_runtime_typed_weights<B>) {
      if (ws == "ggml") return dispatch_block<Policy<B, ggml_byte, float>>(cfg, f);
    }
  } else if (dt == "bfloat16") {
    if (ws == "bfloat16") return dispatch_block<Policy<B, bf16>>(cfg, f);
  }
  MAXTEXT_THROW(UnsupportedError, "[registry] dtype ", dt, " with weight storage ", ws,
                " is not instantiated (supported: float32 with float32/bfloat16/float16/q8_0/ggml weights, bfloat16; ggml on the "
                "CPU and reference backends)");
}

}  // namespace maxtext::models
