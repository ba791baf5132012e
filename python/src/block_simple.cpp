// python/src/block_simple.cpp: the Python bindings of decoder_blocks 'simple' and 'simple_mlp' (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/simple_layer.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::SimpleDecoderLayer)
MAXTEXT_PY_BLOCK(template, ::maxtext::layers::SimpleMlpDecoderLayer)
