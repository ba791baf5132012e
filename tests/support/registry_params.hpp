// tests/support/registry_params.hpp: the parameter count of the model the registry builds for a config, through the
// block library's precompiled models (tools/blocks). A test that asks models::with_model_type for `M(cfg).num_params()`
// instantiates every decoder block on every policy in its own unit (each such unit cost 200-400 compiler-seconds
// more, docs/build.md); this asks the one unit below, which only dispatches to the blocks compiled once.
#pragma once

#include <cstdint>

namespace maxtext {
struct Config;
}

namespace maxtext::test {

/// Parameters of the model that models::make_built_any_model makes for `cfg` (decoder_block dispatched by the
/// registry; the count does not depend on the dtype, so the float32 policy, compiled in every build, is used).
std::int64_t registry_num_params(const Config& cfg);

}  // namespace maxtext::test
