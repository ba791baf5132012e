// python/src/block_deepseek.cpp: the Python bindings of decoder_block 'deepseek' on every policy (see blocks.hpp).
#include "binding_impl.hpp"
#include "blocks.hpp"
#include "maxtext/layers/deepseek.hpp"

MAXTEXT_PY_BLOCK(template, ::maxtext::layers::DeepSeekDenseLayer, ::maxtext::layers::DeepSeekMoELayer)
