// python/src/block_gemma2.cpp: the Python bindings of decoder_block 'gemma2' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/gemma2.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::Gemma2DecoderLayer)
