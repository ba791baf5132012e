// python/src/block_qwen2.cpp: the Python bindings of decoder_block 'qwen2' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/qwen2.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::Qwen2DecoderLayer)
