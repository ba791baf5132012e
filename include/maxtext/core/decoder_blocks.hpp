// core/decoder_blocks.hpp: the one list of the MaxText decoder blocks this library implements. It generates
// supported_decoder_blocks() (core/config.hpp), the registry's dispatch from a config to a model type
// (models/registry.hpp) and the block units the `maxtext` program and the Python module compile
// (tools/blocks/CMakeLists.txt reads the X(...) and ALIAS(...) lines of this file: keep each entry on one line).
//
//   X(name, layer types...)            a decoder_block and the layer classes of its models::Transformer
//   ALIAS(name, of, layer types...)    a decoder_block that runs on block `of`'s model type (compiled once, as `of`)
//
// The layer types are spelled in full: this file names them without including them (core includes no layer); the
// registry expands the list where the layers are declared. The order is the order of messages that list the blocks.
#pragma once

#include <string_view>

// clang-format off
#define MAXTEXT_DECODER_BLOCKS(X, ALIAS) \
  X(default, ::maxtext::layers::DecoderLayer) \
  X(llama2, ::maxtext::layers::LlamaDecoderLayer) \
  X(mistral, ::maxtext::layers::MistralDecoderLayer) \
  X(qwen3, ::maxtext::layers::Qwen3DecoderLayer) \
  X(gpt3, ::maxtext::layers::Gpt3DecoderLayer) \
  X(deepseek, ::maxtext::layers::DeepSeekDenseLayer, ::maxtext::layers::DeepSeekMoELayer) \
  X(mixtral, ::maxtext::layers::MixtralDecoderLayer) \
  X(qwen2, ::maxtext::layers::Qwen2DecoderLayer) \
  X(qwen3_moe, ::maxtext::layers::Qwen3MoeDecoderLayer) \
  X(simple, ::maxtext::layers::SimpleDecoderLayer) \
  X(simple_mlp, ::maxtext::layers::SimpleMlpDecoderLayer) \
  X(gemma, ::maxtext::layers::GemmaDecoderLayer) \
  X(gemma2, ::maxtext::layers::Gemma2DecoderLayer) \
  X(gemma3, ::maxtext::layers::Gemma3DecoderLayer) \
  X(olmo3, ::maxtext::layers::Olmo3DecoderLayer) \
  ALIAS(llama2lti, llama2, ::maxtext::layers::LlamaDecoderLayer) \
  X(gpt_oss, ::maxtext::layers::GptOssDecoderLayer) \
  X(qwen3_custom_moe, ::maxtext::layers::Qwen3CustomMoeDecoderLayer) \
  X(llama4, ::maxtext::layers::Llama4DecoderLayer) \
  X(qwen3_next, ::maxtext::layers::Qwen3NextDecoderLayer) \
  ALIAS(qwen3_5, qwen3_next, ::maxtext::layers::Qwen3NextDecoderLayer) \
  X(gemma4, ::maxtext::layers::Gemma4DecoderLayer) \
  X(gemma4_small, ::maxtext::layers::Gemma4SmallDecoderLayer) \
  X(envy, ::maxtext::layers::EnvyDecoderLayer) \
  X(deepseek4, ::maxtext::layers::DeepSeek4DecoderLayer)
// clang-format on

/// The blocks whose GGUF importer computes from a file's matrices where they lie (Q4_K, Q6_K, F16, ... blocks, kept
/// in place: io::gguf_keeps_blocks); the block units compile the runtime-typed policies (ggmlw, ggmlw_f16kv) for
/// these alone (tools/blocks/CMakeLists.txt reads this line too).
#define MAXTEXT_GGUF_KEEPS_BLOCKS(X) X(llama2) X(mistral) X(qwen2) X(qwen3) X(gemma) X(gemma2) X(gemma3) X(olmo3)

/// The blocks whose models take MaxText's multi-token prediction layers (mtp_num_layers; models::Transformer):
/// MaxText builds each MTP layer as the model's last layer kind without a layer index (models.py:
/// get_decoder_layers()[-1]), which these blocks' layers do not read. The others choose their attention (sliding or
/// global, NoPE, linear) or their MLP kind by the layer's index, or keep per-layer streams, and are refused by name,
/// except Qwen3-Next and Qwen3.5, whose checkpoints define their MTP layer (a full-attention layer; vLLM's
/// qwen3_next_mtp.py / qwen3_5_mtp.py).
#define MAXTEXT_MTP_BLOCKS(X)                                                                                        \
  X(default) X(llama2) X(mistral) X(qwen2) X(qwen3) X(gemma) X(deepseek) X(mixtral) X(qwen3_moe) X(qwen3_next)        \
  X(qwen3_5)

/// The blocks tensor parallelism splits (models/parallel.hpp): every parameter of their layers is per head,
/// per MLP column or replicated, and every statistic a layer takes (norms) is over one head or the whole residual
/// stream, so one rank's share of heads and columns computes its share of the sums exactly; OLMo 3's qk norm over
/// all heads gathers the other ranks' heads first (layers::Attention, Config::tensor_shards).
#define MAXTEXT_TENSOR_PARALLEL_BLOCKS(X)                                                                            \
  X(default) X(simple) X(simple_mlp) X(llama2) X(mistral) X(gpt3) X(deepseek) X(mixtral) X(qwen2) X(qwen3_moe)    \
  X(qwen3) X(gemma) X(gemma2) X(gemma3) X(gemma4) X(gemma4_small) X(olmo3) X(gpt_oss) X(qwen3_custom_moe) X(llama4)    \
  X(envy)

// llama2lti: MaxText's llama2 block whose checkpoint holds learn-to-init factors; families/llama2/family.hpp collapses them into
// plain kernels at load, so the layer is the llama2 one. qwen3_5: Qwen3-Next's layer (families/qwen3_next/qwen3_5.hpp), named
// directly: clang takes an alias template given as a template template argument for a template of its own, which
// would make it a second model type.

namespace maxtext {

/// The block whose layer types run `decoder_block`: itself, or for an ALIAS line the block it runs on (llama2lti ->
/// llama2, qwen3_5 -> qwen3_next). models::Transformer checks a config against its layer type's decoder_block_name
/// with it.
constexpr std::string_view decoder_block_runs_as(std::string_view decoder_block) {
#define MAXTEXT_RUNS_AS_BLOCK(name, ...)
#define MAXTEXT_RUNS_AS_ALIAS(name, of, ...) \
  if (decoder_block == #name) return #of;
  MAXTEXT_DECODER_BLOCKS(MAXTEXT_RUNS_AS_BLOCK, MAXTEXT_RUNS_AS_ALIAS)
#undef MAXTEXT_RUNS_AS_ALIAS
#undef MAXTEXT_RUNS_AS_BLOCK
  return decoder_block;
}

}  // namespace maxtext
