// models/any_model_blocks.hpp: AnyModel instantiations compiled in separate translation units (one per decoder
// block), so that no single unit compiles every model, and a program may compile only the blocks it needs.
//
// A block's unit instantiates make_any_model_of for its policies:
//     #include "maxtext/models/any_model_blocks.hpp"
//     MAXTEXT_ANY_MODEL_ONE(template, ::maxtext::models::any_model_policies::F32, ::maxtext::layers::LlamaDecoderLayer)
// (MAXTEXT_ANY_MODEL_BLOCK: every policy models::with_model_type offers). The unit that dispatches declares the same
// lines `extern template`, marks each compiled model with MAXTEXT_ANY_MODEL_BUILT(policy, layers...), then calls
// make_built_any_model: a model that is not marked is refused by name at run time instead of being compiled there.
// The `maxtext` program and the Python module get these lines from a header that CMake writes (tools/blocks/).
#pragma once

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_impl.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/models/registry.hpp"

namespace maxtext::models::any_model_policies {
using F32 = Policy<cpu::Backend, float>;
using Bf16W = Policy<cpu::Backend, bf16, float>;
using F16W = Policy<cpu::Backend, fp16, float>;
using Q8W = Policy<cpu::Backend, q8_0, float>;
/// Every matrix in its GGUF type (Q4_K, Q6_K, ... computed from the blocks): compiled for the blocks whose GGUF
/// importer keeps blocks (io::gguf_keeps_blocks).
using GgmlW = Policy<cpu::Backend, ggml_byte, float>;
/// GgmlW with an fp16 KV cache (AnyModelOptions::kv_type "float16"), compiled for the same blocks.
using GgmlWF16Kv = Policy<cpu::Backend, ggml_byte, float, float, fp16>;
using Bf16 = Policy<cpu::Backend, bf16>;
}  // namespace maxtext::models::any_model_policies

/// `KW` is `template` (an explicit instantiation) or `extern template`; the rest are models::Transformer's layers.
#define MAXTEXT_ANY_MODEL_ONE(KW, POLICY, ...)                                                            \
  KW std::unique_ptr<::maxtext::models::AnyModel>                                                         \
  maxtext::models::make_any_model_of<::maxtext::models::Transformer<POLICY, __VA_ARGS__>>(              \
      const ::maxtext::Config&, const ::maxtext::models::AnyModelOptions&);

namespace maxtext::models {

/// True for the models a program's units compiled (MAXTEXT_ANY_MODEL_BUILT).
template <class Model>
inline constexpr bool any_model_built = false;

/// make_any_model restricted to the models marked built: any other decoder block / weight type is refused by name
/// (`built`: what this program has, for the message). A template so that it is instantiated where it is called,
/// after the marks.
template <class Tag = void>
std::unique_ptr<AnyModel> make_built_any_model(const Config& cfg, const AnyModelOptions& opt, const char* built) {
  return with_any_model_type<cpu::Backend>(cfg, opt, [&]<class M>() -> std::unique_ptr<AnyModel> {
    if constexpr (any_model_built<M>) {
      return make_any_model_of<M>(cfg, opt);
    } else {
      const std::string kv = opt.kv_type.empty() ? "" : " and kv_type '" + opt.kv_type + "'";
      MAXTEXT_THROW(UnsupportedError, "[registry] decoder_block '", cfg.decoder_block, "' with weight type '",
                    opt.weight_type.empty() ? cfg.dtype_canonical() : opt.weight_type, "'", kv,
                    " is not compiled into this program (it has: ", built,
                    "; configure with -DMAXTEXT_BLOCKS=all -DMAXTEXT_BLOCK_POLICIES=all)");
    }
  });
}

/// Whether make_built_any_model can make the model for `cfg` with weights stored as `weight_type` (it is compiled
/// into this program and the registry has the policy). A template for the same reason as make_built_any_model.
template <class Tag = void>
bool any_model_is_built(const Config& cfg, const std::string& weight_type) {
  try {
    return with_model_type<cpu::Backend>(
        cfg, [&]<class M>() { return any_model_built<M>; }, weight_type);
  } catch (const UnsupportedError&) {  // a dtype / weight type pair the registry has no policy for
    return false;
  }
}

/// The weight type that stores a file's matrices as the file does (`file_weight_type`: io::LoadedWeights's, "float16",
/// "bfloat16", "q8_0", "ggml" or ""), when the config's activations are float32 and this program compiled that type for the
/// block; "" otherwise (the config's dtype, i.e. widening). The default of the `maxtext` CLI and of the Python
/// module's Model(weights=path).
template <class Tag = void>
std::string keep_file_weight_type(const Config& cfg, const std::string& file_weight_type) {
  if (file_weight_type.empty() || cfg.dtype_canonical() != "float32" ||
      !any_model_is_built<Tag>(cfg, file_weight_type)) {
    return "";
  }
  return file_weight_type;
}

}  // namespace maxtext::models

/// Mark Transformer<POLICY, layers...> as compiled (at namespace scope, before make_built_any_model is called).
#define MAXTEXT_ANY_MODEL_BUILT(POLICY, ...)                                                                   \
  template <>                                                                                                  \
  inline constexpr bool maxtext::models::any_model_built<::maxtext::models::Transformer<POLICY, __VA_ARGS__>> = \
      true;

/// Every policy of models::with_model_type (keep in step with registry.hpp).
#define MAXTEXT_ANY_MODEL_BLOCK(KW, ...)                                                  \
  MAXTEXT_ANY_MODEL_ONE(KW, ::maxtext::models::any_model_policies::F32, __VA_ARGS__)      \
  MAXTEXT_ANY_MODEL_ONE(KW, ::maxtext::models::any_model_policies::Bf16W, __VA_ARGS__)    \
  MAXTEXT_ANY_MODEL_ONE(KW, ::maxtext::models::any_model_policies::F16W, __VA_ARGS__)     \
  MAXTEXT_ANY_MODEL_ONE(KW, ::maxtext::models::any_model_policies::Q8W, __VA_ARGS__)      \
  MAXTEXT_ANY_MODEL_ONE(KW, ::maxtext::models::any_model_policies::Bf16, __VA_ARGS__)
