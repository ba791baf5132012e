// python/src/block_default.cpp: the Python bindings of decoder_block 'default' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/decoders.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::DecoderLayer)
