// models/weight_choice.hpp: how a program reads a weights file for a compiled AnyModel (make_built_any_model) and
// which weight type it builds the model with: one policy for the `maxtext` program (tools/cli_models.cpp) and the
// Python module (python/src/module.cpp), which differ only in the names their users type.
#pragma once

#include <string>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/models/any_model_blocks.hpp"

namespace maxtext::models {

/// Whether a GGUF file's matrices (blocks such as Q4_K or Q8_0, F32, F16, BF16) are computed from where they lie in
/// the mapped file (io::load_weights' keep_blocks): when the weight type asked for is the file's own ("") or "ggml",
/// the activations are float32, and the program compiled the block's runtime-typed model. A template for the same
/// reason as make_built_any_model (the program supplies the compiled models).
template <class Tag = void>
bool read_matrices_in_place(const Config& cfg, const std::string& weight_type) {
  return (weight_type.empty() || weight_type == "ggml") && cfg.dtype_canonical() == "float32" &&
         any_model_is_built<Tag>(cfg, "ggml");
}

/// The refusals of 8-bit activations (`on`): they apply to Q8_0 weights and to a GGUF file's blocks ("ggml"), and a
/// file whose matrices are all F32 / F16 / BF16 rows (multiplied exactly) has no block to apply them to.
/// `file_tensors`: the tensors of the loaded file `file`, when there is one. `option`: the option as the user typed it
/// ("--int8-activations on"); `q8_0_option`: how to ask for Q8_0 weights ("--weight-type q8_0").
inline void check_int8_activations(bool on, const std::string& weight_type, const io::TensorMap* file_tensors,
                                   const std::string& file, const std::string& option, const std::string& q8_0_option) {
  if (!on) return;
  MAXTEXT_CHECK(weight_type == "q8_0" || weight_type == "ggml", ArgumentError, option,
                " applies to Q8_0 weights and a GGUF file's blocks (ggml): add ", q8_0_option);
  MAXTEXT_CHECK(weight_type != "ggml" || file_tensors == nullptr || io::has_block_matrices(*file_tensors),
                ArgumentError, option, ": ", file, " holds no block-quantised matrix (its F32 / F16 / BF16 rows "
                "are always multiplied exactly); drop the option or add ", q8_0_option);
}

}  // namespace maxtext::models
