// python/src/block_gpt3.cpp: the Python bindings of decoder_block 'gpt3' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/gpt3.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::Gpt3DecoderLayer)
