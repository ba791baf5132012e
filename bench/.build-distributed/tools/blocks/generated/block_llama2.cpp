// Written by tools/blocks/CMakeLists.txt: AnyModel for decoder_block llama2 (policies: f32).
#include "maxtext/models/any_model_blocks.hpp"

MAXTEXT_ANY_MODEL_ONE(template, ::maxtext::models::any_model_policies::F32, ::maxtext::layers::LlamaDecoderLayer)
