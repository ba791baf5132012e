// python/src/block_qwen3_moe.cpp: the Python bindings of decoder_block 'qwen3_moe' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/qwen3.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::Qwen3MoeDecoderLayer)
