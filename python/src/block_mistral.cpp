// python/src/block_mistral.cpp: the Python bindings of decoder_block 'mistral' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/mistral.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::MistralDecoderLayer)
