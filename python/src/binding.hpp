// python/src/binding.hpp: the module's names for the library's run-time model (models/any_model.hpp): one Model
// object of Python wraps one models::AnyModel, whose decoder block and policy come from the config at run time. The
// models are compiled once, one translation unit per block, in the maxtext_blocks library that the `maxtext` CLI
// links too (tools/blocks/; a block or weight type it did not compile is refused by name). No pybind11 here.
#pragma once

#include <memory>

#include "maxtext/models/any_model.hpp"
#include "maxtext_blocks_built.hpp"  // written by tools/blocks/CMakeLists.txt

namespace maxtext::python {

using ModelBinding = models::AnyModel;
using CacheHandle = models::AnyCache;
using ModelOptions = models::AnyModelOptions;
using ForwardRequest = models::ForwardRequest;
using LayerRequest = models::LayerRequest;

inline std::unique_ptr<ModelBinding> make_binding(const Config& cfg, const ModelOptions& opt) {
  return models::make_built_any_model(cfg, opt, MAXTEXT_BLOCKS_BUILT);
}

}  // namespace maxtext::python
