// python/src/binding.hpp: the type-erased model behind the Python module. One ModelBinding wraps one
// models::Transformer<P, Layer...> chosen at run time through models::with_model_type (the registry); the
// instantiations live in one translation unit per decoder block (block_*.cpp), the module TU only dispatches.
// Nothing here includes pybind11: these are plain C++ objects and host tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::python {

/// How a model is built: weight storage ("" = the config's dtype; bfloat16, float16, q8_0 with float32
/// activations), CPU threads (0 = all cores), llama.cpp-style int8 activations for q8_0, the capture naming.
struct ModelOptions {
  std::string weight_type;
  int threads = 0;
  bool int8_activations = false;
  models::NameScheme names = models::NameScheme::maxtext;
};

/// A KV cache made by one model (ModelBinding::new_cache); passed back to forward() to decode incrementally.
class CacheHandle {
 public:
  virtual ~CacheHandle() = default;
  virtual std::int64_t batch() const = 0;
  virtual std::int64_t capacity() const = 0;
  virtual std::vector<std::int32_t> lengths() const = 0;
  /// Forget every row (-1) or row b.
  virtual void reset(std::int64_t b) = 0;
  virtual std::int64_t bytes() const = 0;
};

/// Inputs of one forward pass (host tensors, [B, T]).
struct ForwardRequest {
  const Tensor<std::int32_t, 2>* tokens = nullptr;
  const Tensor<std::int32_t, 2>* positions = nullptr;
  const Tensor<std::int32_t, 2>* segment_ids = nullptr;
  CacheHandle* cache = nullptr;  ///< nullptr: a fresh cache of T tokens (full-sequence forward)
  bool last_only = false;
  layers::Capture* capture = nullptr;
};

/// One decoder layer run on its own (`maxtext compare --layer`): either layer `index` of the loaded model with its
/// parameters, or a layer of `kind` whose parameters come from `weights` under `prefix`.
struct LayerRequest {
  AnyTensor x;                             ///< [B, T, emb_dim], any float dtype
  std::int64_t index = -1;                 ///< >= 0: the model's own layer
  const io::TensorMap* weights = nullptr;  ///< canonical names (io::load_weights / a parameter dict)
  std::string prefix;                      ///< with weights: P.* are the layer's parameters; names captured under P
  std::string kind = "decoder";            ///< decoder, moe (second layer kind), gpt3_attention, gpt3_layernorm
  const Tensor<std::int32_t, 2>* positions = nullptr;
  const Tensor<std::int32_t, 2>* segment_ids = nullptr;
  layers::Capture* capture = nullptr;
};

class ModelBinding {
 public:
  virtual ~ModelBinding() = default;
  virtual const Config& config() const = 0;
  /// The concrete C++ type (for messages and repr).
  virtual std::string type_name() const = 0;
  /// Load canonical (MaxText-named, unscanned) tensors.
  virtual void load(const io::TensorMap& tensors, bool allow_unused) = 0;
  virtual void init(std::uint64_t seed) = 0;
  virtual bool loaded() const = 0;
  virtual models::NameScheme name_scheme() const = 0;
  virtual void set_name_scheme(models::NameScheme s) = 0;
  virtual std::vector<std::string> layer_names() const = 0;
  virtual std::int64_t num_params() = 0;
  virtual io::TensorMap export_params() = 0;

  virtual std::shared_ptr<CacheHandle> new_cache(std::int64_t batch, std::int64_t capacity) = 0;
  virtual Tensor<float, 3> forward(const ForwardRequest& r) = 0;
  virtual models::GenerateResult generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                          const models::GenerateOptions& opt, std::int64_t capacity) = 0;
  /// Returns the layer's output [B, T, D] as f32; also puts it into the capture under the layer's name (or "out"
  /// for a layer from a file without prefix) when that name is requested.
  virtual Tensor<float, 3> run_layer(const LayerRequest& r) = 0;
};

/// The binding for one model type (explicitly instantiated per decoder block in block_*.cpp).
template <class Model>
std::unique_ptr<ModelBinding> make_model_binding(const Config& cfg, const ModelOptions& opt);

/// The binding for whatever model `cfg` and `opt.weight_type` describe (models::with_model_type).
std::unique_ptr<ModelBinding> make_binding(const Config& cfg, const ModelOptions& opt);

}  // namespace maxtext::python
