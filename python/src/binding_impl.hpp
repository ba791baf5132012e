// python/src/binding_impl.hpp: ModelBinding for one concrete models::Transformer type. Included by the per-block
// translation units (block_*.cpp), which instantiate make_model_binding<Model> for every policy, and by the module
// TU, where it is the fallback for a registry entry no block TU covers (see blocks.hpp).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "binding.hpp"
#include "cmd_compare.hpp"  // tools/: PolicyOf, the stand-alone GPT-3 attention / layer-norm "layers", trailing_index
#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/kv_cache.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::python {

template <TensorPolicy P>
class CacheImpl final : public CacheHandle {
 public:
  CacheImpl(models::KVCache<P> c, const void* owner) : cache(std::move(c)), owner(owner) {}
  std::int64_t batch() const override { return cache.batch(); }
  std::int64_t capacity() const override { return cache.capacity(); }
  std::vector<std::int32_t> lengths() const override { return cache.lengths(); }
  void reset(std::int64_t b) override {
    if (b < 0) {
      cache.reset();
      return;
    }
    MAXTEXT_CHECK(b < cache.batch(), ArgumentError, "[cache] row ", b, " outside [0, ", cache.batch(), ")");
    cache.reset(b);
  }
  std::int64_t bytes() const override { return cache.bytes(); }

  models::KVCache<P> cache;
  const void* owner;
};

template <class Model>
class ModelBindingImpl final : public ModelBinding {
 public:
  using P = typename maxtext_cli::compare_detail::PolicyOf<Model>::type;
  using A = typename P::act_t;
  using W = typename P::weight_t;

  ModelBindingImpl(const Config& cfg, const ModelOptions& opt)
      : model_(cfg, cpu::Backend(cpu::Options{opt.threads, opt.int8_activations}), opt.names) {}

  const Config& config() const override { return model_.config(); }
  std::string type_name() const override {
    return str("Transformer<decoder_block=", model_.config().decoder_block, ", activations=", dtype_name(dtype_of<A>),
               ", weights=", dtype_name(dtype_of<W>), ">");
  }
  void load(const io::TensorMap& tensors, bool allow_unused) override {
    std::lock_guard<std::mutex> lock(mu_);
    loaded_ = false;
    model_.load(tensors, allow_unused);
    loaded_ = true;
  }
  void init(std::uint64_t seed) override {
    std::lock_guard<std::mutex> lock(mu_);
    model_.init(seed);
    loaded_ = true;
  }
  bool loaded() const override { return loaded_; }
  models::NameScheme name_scheme() const override { return model_.name_scheme(); }
  void set_name_scheme(models::NameScheme s) override {
    std::lock_guard<std::mutex> lock(mu_);
    model_.set_name_scheme(s);
  }
  std::vector<std::string> layer_names() const override {
    std::vector<std::string> n;
    for (std::size_t i = 0; i < model_.num_layers(); ++i) n.push_back(model_.layer_info(i).name);
    return n;
  }
  std::int64_t num_params() override {
    std::lock_guard<std::mutex> lock(mu_);
    return model_.num_params();
  }
  io::TensorMap export_params() override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("params");
    return model_.export_params();
  }

  std::shared_ptr<CacheHandle> new_cache(std::int64_t batch, std::int64_t capacity) override {
    return std::make_shared<CacheImpl<P>>(model_.make_cache(batch, capacity), this);
  }

  Tensor<float, 3> forward(const ForwardRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("forward");
    models::ForwardOptions fo;
    fo.positions = r.positions;
    fo.segment_ids = r.segment_ids;
    fo.last_only = r.last_only;
    fo.capture = r.capture;
    if (r.cache == nullptr) return model_.forward(*r.tokens, fo);
    auto* c = dynamic_cast<CacheImpl<P>*>(r.cache);
    MAXTEXT_CHECK(c != nullptr && c->owner == this, ArgumentError,
                  "[forward] the cache was made by another model (use this model's new_cache())");
    return model_.forward(*r.tokens, c->cache, fo);
  }

  models::GenerateResult generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                  const models::GenerateOptions& opt, std::int64_t capacity) override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("generate");
    opt.sampling.validate();
    return models::generate(model_, prompts, opt, capacity);
  }

  Tensor<float, 3> run_layer(const LayerRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Config& cfg = model_.config();
    AnyTensor x = r.x;
    if (x.rank() == 2) x = x.reshaped({1, x.shape[0], x.shape[1]});
    MAXTEXT_CHECK(x.rank() == 3 && x.shape[2] == cfg.emb_dim, ShapeError, "[run_layer] x: expected [B, T, ", cfg.emb_dim,
                  "] (emb_dim), found ", x.describe());
    MAXTEXT_CHECK(dtype_is_float(x.dtype), ArgumentError, "[run_layer] x: expected a floating-point array, found ",
                  x.describe());
    const cpu::Backend& be = model_.backend();
    if (r.weights == nullptr) {
      require_loaded("run_layer");
      MAXTEXT_CHECK(r.kind == "decoder", ArgumentError, "[run_layer] kind '", r.kind,
                    "' needs weights= (a layer index runs the model's own decoder layer)");
      const auto n = static_cast<std::int64_t>(model_.num_layers());
      MAXTEXT_CHECK(r.index >= 0 && r.index < n, ArgumentError, "[run_layer] layer ", r.index, " outside [0, ", n, ")");
      const auto i = static_cast<std::size_t>(r.index);
      const layers::LayerInfo& info = model_.layer_info(i);
      const auto& lp = model_.params().layers[i];
      if (lp.index() == 0) {
        const typename Model::DenseL layer(cfg, info);
        return finish(run_one(layer, std::get<0>(lp), be, x, r), info.name, r);
      }
      if constexpr (Model::kTwoKinds) {
        const typename Model::MoeL layer(cfg, info);
        return finish(run_one(layer, std::get<1>(lp), be, x, r), info.name, r);
      }
      MAXTEXT_THROW(ArgumentError, "[run_layer] layer ", r.index, " has no parameters");
    }
    const bool hf = model_.name_scheme() == models::NameScheme::hf;
    layers::LayerInfo info;
    info.index = maxtext_cli::compare_detail::trailing_index(r.prefix);
    info.name = r.prefix;
    info.attention = layers::join_name(r.prefix, hf ? "self_attn" : "self_attention");
    const std::string out = r.prefix.empty() ? "out" : r.prefix;
    if (r.kind == "gpt3_attention") {
      const maxtext_cli::compare_detail::Gpt3AttentionLayer<P> layer(cfg, r.prefix);
      return finish(run_from(layer, be, x, r), out, r);
    }
    if (r.kind == "gpt3_layernorm") {
      const bool bias = r.weights->has(layers::join_name(r.prefix, "bias"));
      const maxtext_cli::compare_detail::Gpt3LayerNormLayer<P> layer(cfg, bias);
      return finish(run_from(layer, be, x, r), out, r);
    }
    if (r.kind == "moe") {
      if constexpr (Model::kTwoKinds) {
        using L = typename Model::MoeL;
        info.mlp = layers::join_name(r.prefix, models::detail::mlp_name<L>());
        return finish(run_from(L(cfg, info), be, x, r), out, r);
      } else {
        MAXTEXT_THROW(ArgumentError, "[run_layer] kind 'moe': decoder_block ", cfg.decoder_block,
                      " has one kind of layer");
      }
    }
    MAXTEXT_CHECK(r.kind == "decoder", ArgumentError, "[run_layer] kind: expected decoder, moe, gpt3_attention or "
                  "gpt3_layernorm, found '", r.kind, "'");
    using L = typename Model::DenseL;
    info.mlp = layers::join_name(r.prefix, models::detail::mlp_name<L>());
    return finish(run_from(L(cfg, info), be, x, r), out, r);
  }

 private:
  void require_loaded(const char* what) const {
    MAXTEXT_CHECK(loaded_, ArgumentError, "[", what, "] the model has no parameters: give weights or call load() / init()");
  }
  template <class L>
  static Tensor<float, 3> run_one(const L& layer, const typename L::Params& p, const cpu::Backend& be, const AnyTensor& x,
                                  const LayerRequest& r) {
    return models::run_layer<P>(layer, p, be, x, r.segment_ids, r.positions, r.capture);
  }
  template <class L>
  static Tensor<float, 3> run_from(const L& layer, const cpu::Backend& be, const AnyTensor& x, const LayerRequest& r) {
    const auto params = models::load_layer_params<P>(layer, *r.weights, be, r.prefix);
    return run_one(layer, params, be, x, r);
  }
  static Tensor<float, 3> finish(Tensor<float, 3> y, const std::string& out_name, const LayerRequest& r) {
    if (r.capture != nullptr && !r.capture->has(out_name) && r.capture->wants(out_name)) {
      r.capture->put(out_name, AnyTensor::from(y, out_name));
    }
    return y;
  }

  Model model_;
  bool loaded_ = false;
  std::mutex mu_;
};

template <class Model>
std::unique_ptr<ModelBinding> make_model_binding(const Config& cfg, const ModelOptions& opt) {
  return std::make_unique<ModelBindingImpl<Model>>(cfg, opt);
}

}  // namespace maxtext::python
