// models/registry.hpp: from a runtime Config (decoder_block, dtype) to the compile-time model type, for programs
// that pick the architecture from a file (the `maxtext` tool). Library users normally name their type directly.
#pragma once

#include <string>

#include "maxtext/backend/concepts.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/decoders.hpp"
#include "maxtext/layers/deepseek.hpp"
#include "maxtext/layers/deepseek4.hpp"
#include "maxtext/layers/envy.hpp"
#include "maxtext/layers/gemma.hpp"
#include "maxtext/layers/gemma2.hpp"
#include "maxtext/layers/gemma3.hpp"
#include "maxtext/layers/gemma4.hpp"
#include "maxtext/layers/gemma4_small.hpp"
#include "maxtext/layers/gpt3.hpp"
#include "maxtext/layers/gpt_oss.hpp"
#include "maxtext/layers/llama2.hpp"
#include "maxtext/layers/llama4.hpp"
#include "maxtext/layers/mistral.hpp"
#include "maxtext/layers/mixtral.hpp"
#include "maxtext/layers/olmo3.hpp"
#include "maxtext/layers/qwen2.hpp"
#include "maxtext/layers/qwen3.hpp"
#include "maxtext/layers/qwen3_custom.hpp"
#include "maxtext/layers/qwen3_5.hpp"
#include "maxtext/layers/qwen3_next.hpp"
#include "maxtext/layers/simple_layer.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

/// The model type for a decoder_block on policy P (a template alias table; one entry per block).
template <TensorPolicy P, class F>
decltype(auto) dispatch_block(const Config& cfg, F&& f) {
  if (cfg.is("gpt3")) return f.template operator()<Transformer<P, layers::Gpt3DecoderLayer>>();
  if (cfg.is("deepseek")) {
    return f.template operator()<Transformer<P, layers::DeepSeekDenseLayer, layers::DeepSeekMoELayer>>();
  }
  if (cfg.is("deepseek4")) return f.template operator()<Transformer<P, layers::DeepSeek4DecoderLayer>>();
  if (cfg.is("default")) return f.template operator()<Transformer<P, layers::DecoderLayer>>();
  if (cfg.is("llama2")) return f.template operator()<Transformer<P, layers::LlamaDecoderLayer>>();
  if (cfg.is("mistral")) return f.template operator()<Transformer<P, layers::MistralDecoderLayer>>();
  if (cfg.is("mixtral")) return f.template operator()<Transformer<P, layers::MixtralDecoderLayer>>();
  if (cfg.is("qwen3")) return f.template operator()<Transformer<P, layers::Qwen3DecoderLayer>>();
  if (cfg.is("qwen2")) return f.template operator()<Transformer<P, layers::Qwen2DecoderLayer>>();
  if (cfg.is("qwen3_moe")) return f.template operator()<Transformer<P, layers::Qwen3MoeDecoderLayer>>();
  if (cfg.is("qwen3_custom_moe")) return f.template operator()<Transformer<P, layers::Qwen3CustomMoeDecoderLayer>>();
  if (cfg.is("simple")) return f.template operator()<Transformer<P, layers::SimpleDecoderLayer>>();
  if (cfg.is("simple_mlp")) return f.template operator()<Transformer<P, layers::SimpleMlpDecoderLayer>>();
  if (cfg.is("gemma")) return f.template operator()<Transformer<P, layers::GemmaDecoderLayer>>();
  if (cfg.is("gemma2")) return f.template operator()<Transformer<P, layers::Gemma2DecoderLayer>>();
  if (cfg.is("gemma3")) return f.template operator()<Transformer<P, layers::Gemma3DecoderLayer>>();
  if (cfg.is("gemma4")) return f.template operator()<Transformer<P, layers::Gemma4DecoderLayer>>();
  if (cfg.is("gemma4_small")) return f.template operator()<Transformer<P, layers::Gemma4SmallDecoderLayer>>();
  if (cfg.is("envy")) return f.template operator()<Transformer<P, layers::EnvyDecoderLayer>>();
  if (cfg.is("olmo3")) return f.template operator()<Transformer<P, layers::Olmo3DecoderLayer>>();
  // llama2lti: MaxText's llama2 block whose checkpoint holds learn-to-init factors; io/checkpoint.hpp collapses them
  // into plain kernels at load, so the layer is the llama2 one.
  if (cfg.is("llama2lti")) return f.template operator()<Transformer<P, layers::LlamaDecoderLayer>>();
  if (cfg.is("gpt_oss")) return f.template operator()<Transformer<P, layers::GptOssDecoderLayer>>();
  if (cfg.is("llama4")) return f.template operator()<Transformer<P, layers::Llama4DecoderLayer>>();
  if (cfg.is("qwen3_next")) return f.template operator()<Transformer<P, layers::Qwen3NextDecoderLayer>>();
  // qwen3_5: Qwen3-Next's layer (layers/qwen3_5.hpp), named directly: clang takes an alias template given as a
  // template template argument for a template of its own, which would make this a second model type.
  if (cfg.is("qwen3_5")) return f.template operator()<Transformer<P, layers::Qwen3NextDecoderLayer>>();
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
