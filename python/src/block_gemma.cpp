// python/src/block_gemma.cpp: the Python bindings of decoder_block 'gemma' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/gemma.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::GemmaDecoderLayer)
