// tests/support/registry_params.cpp: see registry_params.hpp. The only test unit that dispatches over every block.
#include "support/registry_params.hpp"

#include "maxtext_blocks_built.hpp"

std::int64_t maxtext::test::registry_num_params(const Config& cfg) {
  Config c = cfg;
  c.dtype = "float32";
  c.derive();
  return models::make_built_any_model(c, {}, MAXTEXT_BLOCKS_BUILT)->num_params();
}
