// python/src/block_llama2.cpp: the Python bindings of decoder_block 'llama2' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/llama2.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::LlamaDecoderLayer)
