// Written by tools/blocks/CMakeLists.txt: the models compiled into maxtext_blocks. Include it in the unit that
// calls models::make_built_any_model.
#pragma once

#include "maxtext/models/any_model_blocks.hpp"

MAXTEXT_ANY_MODEL_ONE(extern template, ::maxtext::models::any_model_policies::F32, ::maxtext::layers::LlamaDecoderLayer)

MAXTEXT_ANY_MODEL_BUILT(::maxtext::models::any_model_policies::F32, ::maxtext::layers::LlamaDecoderLayer)

#define MAXTEXT_BLOCKS_BUILT "decoder blocks llama2; policies f32"
