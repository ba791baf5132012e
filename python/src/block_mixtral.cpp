// python/src/block_mixtral.cpp: the Python bindings of decoder_block 'mixtral' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/mixtral.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::MixtralDecoderLayer)
