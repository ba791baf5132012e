// tests/support/registry_params.cpp: see registry_params.hpp. The only test unit that dispatches over every block.
#include "support/registry_params.hpp"

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext_blocks_built.hpp"

// The block list (core/decoder_blocks.hpp) and the layer types' own decoder_block_name, which models::Transformer
// checks configs against, agree.
static_assert(maxtext::models::block_list_matches_layers<maxtext::Policy<maxtext::cpu::Backend, float>>(),
              "a layer type of the block list names another decoder block");

std::int64_t maxtext::test::registry_num_params(const Config& cfg) {
  Config c = cfg;
  c.dtype = "float32";
  c.derive();
  return models::make_built_any_model(c, {}, MAXTEXT_BLOCKS_BUILT)->num_params();
}
