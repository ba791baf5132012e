// python/src/block_gemma3.cpp: the Python bindings of decoder_block 'gemma3' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/gemma3.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::Gemma3DecoderLayer)
