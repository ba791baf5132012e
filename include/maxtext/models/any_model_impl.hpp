// models/any_model_impl.hpp: AnyModel for one concrete models::Transformer type (make_any_model_of<Model>), and
// the stand-alone GPT-3 attention / layer-norm "layers" that AnyModel::run_layer offers (kinds gpt3_attention and
// gpt3_layernorm). Include it where the model code is compiled: in a translation unit that instantiates blocks
// explicitly (any_model_blocks.hpp), or next to any_model.hpp to get every model in one translation unit.
#pragma once

#include <atomic>
#include <cctype>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/gpt3/gpt3.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/kv_cache.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/mtp.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

namespace any_model_detail {

/// Gpt3MultiHeadAttention as a stand-alone "layer" (x -> attention(x), no residual).
template <TensorPolicy P>
class Gpt3AttentionLayer {
 public:
  using A = typename P::act_t;
  using Params = typename layers::Gpt3MultiHeadAttention<P>::Params;
  Gpt3AttentionLayer(const Config& c, std::string name) : attn_(c, std::move(name)) {}
  layers::CacheSpec cache_spec() const { return attn_.cache_spec(); }
  template <class V>
  void visit(V& v, Params& p) const {
    attn_.visit(v, p);
  }
  void forward(const layers::Context<P>& ctx, const Params& p, layers::CacheFor<P>& cache, View<A, 2> x) const {
    ScratchScope scope(ctx.scratch);
    View<A, 2> y = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
    attn_.forward(ctx, p, View<const A, 2>(x), cache, y);
    ctx.be.copy(View<const A, 2>(y), x);
  }

 private:
  layers::Gpt3MultiHeadAttention<P> attn_;
};

/// Gpt3LayerNorm (eps normalization_layer_epsilon; a bias when the weights have one) as a stand-alone "layer".
template <TensorPolicy P>
class Gpt3LayerNormLayer {
 public:
  using A = typename P::act_t;
  using Params = typename layers::Gpt3LayerNorm<P>::Params;
  Gpt3LayerNormLayer(const Config& c, bool bias)
      : ln_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon), bias}) {}
  layers::CacheSpec cache_spec() const { return {}; }
  template <class V>
  void visit(V& v, Params& p) const {
    ln_.visit(v, p);
  }
  void forward(const layers::Context<P>& ctx, const Params& p, layers::CacheFor<P>&, View<A, 2> x) const {
    ln_.forward(ctx, p, View<const A, 2>(x), x);
  }

 private:
  layers::Gpt3LayerNorm<P> ln_;
};

/// Trailing digits of a prefix ("decoder.layers_3" -> 3), or 0.
inline std::int64_t trailing_index(const std::string& s) {
  std::size_t e = s.size();
  while (e > 0 && std::isdigit(static_cast<unsigned char>(s[e - 1]))) --e;
  return e < s.size() ? std::stoll(s.substr(e)) : 0;
}

template <TensorPolicy P>
class CacheImpl final : public AnyCache {
 public:
  CacheImpl(models::KVCache<P> c, const void* owner, const typename P::backend* backend)
      : cache(std::move(c)), owner(owner), backend(backend) {}
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
  void set_length(std::int64_t b, std::int32_t n) override {
    MAXTEXT_CHECK(b >= 0 && b < cache.batch(), ArgumentError, "[cache] row ", b, " outside [0, ", cache.batch(), ")");
    cache.set_length(b, n);
  }
  bool recurrent() const override { return cache.recurrent(); }
  std::int64_t bytes() const override { return cache.bytes(); }
  bool can_share(std::int64_t src, std::int64_t n) const override {
    MAXTEXT_CHECK(src >= 0 && src < cache.batch(), ArgumentError, "[cache] row ", src, " outside [0, ", cache.batch(), ")");
    return cache.can_share(src, n);
  }
  void share_prefix(const AnyCache& from, std::int64_t src, std::int64_t dst, std::int64_t n) override {
    const auto* f = dynamic_cast<const CacheImpl<P>*>(&from);
    MAXTEXT_CHECK(f != nullptr && f->owner == owner, ArgumentError,
                  "[cache] share_prefix: the cache was made by another model");
    cache.share_prefix(*backend, f->cache, src, dst, n);
  }
  PagingStats paging_stats() const override { return cache.paging_stats(); }
  std::int64_t pages_of(std::int64_t b) const override {
    MAXTEXT_CHECK(b >= 0 && b < cache.batch(), ArgumentError, "[cache] row ", b, " outside [0, ", cache.batch(), ")");
    return cache.pages_of(b);
  }

  models::KVCache<P> cache;
  const void* owner;
  const typename P::backend* backend;  ///< the model's (it outlives its caches)
};

/// Marks the model as running a speculative generation on this thread for the guard's life: its forward() then
/// refuses a drafter that runs the same model (which would wait for the verify pass that waits for it).
class SpeculatingGuard {
 public:
  explicit SpeculatingGuard(std::atomic<std::thread::id>& t) : t_(t) { t_.store(std::this_thread::get_id()); }
  ~SpeculatingGuard() { t_.store(std::thread::id()); }
  SpeculatingGuard(const SpeculatingGuard&) = delete;
  SpeculatingGuard& operator=(const SpeculatingGuard&) = delete;

 private:
  std::atomic<std::thread::id>& t_;
};

template <class Model>
class SessionImpl final : public AnySession {
 public:
  SessionImpl(Model& m, std::mutex& mu, std::atomic<std::thread::id>& speculating, std::int64_t capacity)
      : session_(m, capacity), mu_(mu), speculating_(speculating) {}
  std::int64_t length() const override { return session_.length(); }
  std::int64_t capacity() const override { return session_.capacity(); }
  const std::vector<std::int32_t>& tokens() const override { return session_.tokens(); }
  void rewind(std::int64_t n) override { session_.rewind(n); }
  std::int64_t sync(const std::vector<std::int32_t>& ids, const Tensor<std::int32_t, 2>* media_mask = nullptr,
                    const Tensor<float, 2>* media_embeddings = nullptr,
                    const Tensor<std::int32_t, 2>* media_positions = nullptr) override {
    return session_.sync(ids, media_mask, media_embeddings, media_positions);
  }
  GenerateResult generate(const std::vector<std::int32_t>& new_tokens, const GenerateOptions& opt) override {
    std::lock_guard<std::mutex> lock(mu_);
    opt.sampling.validate();
    return session_.generate(new_tokens, opt);
  }
  GenerateResult generate_speculative(const std::vector<std::int32_t>& new_tokens, const GenerateOptions& opt,
                                      const DraftFn& drafter, const SpeculativeOptions& spec = {},
                                      SpeculativeStats* stats = nullptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    opt.sampling.validate();
    const SpeculatingGuard guard(speculating_);
    FunctionDrafter d{drafter};
    return session_.generate_speculative(new_tokens, opt, d, spec, stats);
  }
  GenerateResult generate_mtp_speculative(const std::vector<std::int32_t>& new_tokens, const GenerateOptions& opt,
                                          const SpeculativeOptions& spec = {},
                                          SpeculativeStats* stats = nullptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    opt.sampling.validate();
    return session_.generate_mtp_speculative(new_tokens, opt, spec, stats);
  }
  void save(const std::string& path, const std::string& app = {}) override {
    std::lock_guard<std::mutex> lock(mu_);
    session_.save(path, app);
  }
  std::string load(const std::string& path, bool verify = true) override {
    std::lock_guard<std::mutex> lock(mu_);
    return session_.load(path, verify);
  }

 private:
  Session<Model> session_;
  std::mutex& mu_;
  std::atomic<std::thread::id>& speculating_;  ///< the model's: its forward() refuses a drafter that runs it
};

template <class Model>
class AnyModelImpl final : public AnyModel {
 public:
  using P = typename Model::policy;
  using A = typename P::act_t;
  using W = typename P::weight_t;

  AnyModelImpl(const Config& cfg, const AnyModelOptions& opt)
      : model_(cfg, cpu::Backend(cpu::Options{opt.threads, opt.int8_activations}), opt.names) {}

  const Config& config() const override { return model_.config(); }
  std::string type_name() const override {
    return str("Transformer<decoder_block=", model_.config().decoder_block, ", activations=", dtype_name(dtype_of<A>),
               ", weights=", dtype_name(dtype_of<W>), ">");
  }
  void load(const io::TensorMap& tensors, bool allow_unused = false) override {
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
  std::map<std::string, std::vector<std::int64_t>> param_shapes() override {
    std::lock_guard<std::mutex> lock(mu_);
    return model_.param_shapes();
  }
  void set_communicator(comm::Communicator* c) override {
    std::lock_guard<std::mutex> lock(mu_);
    model_.set_communicator(c);
  }
  void set_comm_groups(const comm::Groups& g) override {
    std::lock_guard<std::mutex> lock(mu_);
    model_.set_comm_groups(g);
  }
  void set_replica_check(bool on) override {
    std::lock_guard<std::mutex> lock(mu_);
    model_.set_replica_check(on);
  }
  io::TensorMap export_params() override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("params");
    return model_.export_params();
  }

  void set_engram_vocab(std::vector<std::int32_t> lookup, std::int64_t compressed_size, std::int32_t pad_token) override {
    std::lock_guard<std::mutex> lock(mu_);
    model_.set_engram_vocab(std::move(lookup), compressed_size, pad_token);
  }
  bool needs_engram_vocab() const override { return model_.needs_engram_vocab(); }

  std::shared_ptr<AnyCache> new_cache(std::int64_t batch, std::int64_t capacity) override {
    return std::make_shared<CacheImpl<P>>(model_.make_cache(batch, capacity), this, &model_.backend());
  }
  std::shared_ptr<AnyCache> new_paged_cache(std::int64_t batch, std::int64_t capacity,
                                            const PagingOptions& paging) override {
    return std::make_shared<CacheImpl<P>>(model_.make_cache(batch, capacity, paging), this, &model_.backend());
  }

  Tensor<float, 3> forward(const ForwardRequest& r) override {
    MAXTEXT_CHECK(speculating_.load() != std::this_thread::get_id(), ArgumentError,
                  "[speculative] the drafter runs the model it drafts for (", type_name(),
                  "): it would wait for the verify pass that waits for it; draft with another model or prompt lookup");
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("forward");
    models::ForwardOptions fo;
    fo.positions = r.positions;
    fo.segment_ids = r.segment_ids;
    fo.last_only = r.last_only;
    fo.capture = r.capture;
    fo.media_mask = r.media_mask;
    fo.media_embeddings = r.media_embeddings;
    fo.mrope_positions = r.mrope_positions;
    fo.first_slot = r.first_slot;
    fo.row_lengths = r.row_lengths;
    MAXTEXT_CHECK(r.first_slot < 0 || r.cache != nullptr, ArgumentError,
                  "[forward] first_slot names slots of a cache, and no cache was given");
    if (r.cache == nullptr) return model_.forward(*r.tokens, fo);
    auto* c = dynamic_cast<CacheImpl<P>*>(r.cache);
    MAXTEXT_CHECK(c != nullptr && c->owner == this, ArgumentError,
                  "[forward] the cache was made by another model (use this model's new_cache())");
    return model_.forward(*r.tokens, c->cache, fo);
  }

  models::GenerateResult generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                  const models::GenerateOptions& opt, std::int64_t capacity = 0) override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("generate");
    opt.sampling.validate();
    return models::generate(model_, prompts, opt, capacity);
  }

  models::GenerateResult generate_speculative(const std::vector<std::int32_t>& prompt,
                                              const models::GenerateOptions& opt, const DraftFn& drafter,
                                              const SpeculativeOptions& spec = {},
                                              SpeculativeStats* stats = nullptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("generate_speculative");
    opt.sampling.validate();
    const SpeculatingGuard guard(speculating_);
    FunctionDrafter d{drafter};
    return models::generate_speculative(model_, prompt, opt, d, spec, stats);
  }

  models::GenerateResult generate_mtp_speculative(const std::vector<std::int32_t>& prompt,
                                                  const models::GenerateOptions& opt, const SpeculativeOptions& spec = {},
                                                  SpeculativeStats* stats = nullptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("generate_mtp_speculative");
    opt.sampling.validate();
    const auto cap = static_cast<std::int64_t>(prompt.size()) + opt.max_new_tokens + spec.draft_max + 1;
    models::MtpDrafter<Model> d(model_, cap, spec.mtp_hidden);
    return models::generate_speculative(model_, prompt, opt, d, spec, stats);
  }

  std::vector<Tensor<float, 3>> forward_with_mtp(const Tensor<std::int32_t, 2>& tokens,
                                                 MtpHidden hidden = MtpHidden::raw) override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("forward_with_mtp");
    auto r = model_.forward_with_mtp(tokens, {}, hidden);
    std::vector<Tensor<float, 3>> out{std::move(r.logits)};
    for (auto& l : r.mtp_logits) out.push_back(std::move(l));
    return out;
  }

  std::unique_ptr<AnySession> new_session(std::int64_t capacity = 0) override {
    std::lock_guard<std::mutex> lock(mu_);
    require_loaded("session");
    return std::make_unique<SessionImpl<Model>>(model_, mu_, speculating_, capacity);
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
    info.index = r.layer_index >= 0 ? r.layer_index : trailing_index(r.prefix);
    info.name = r.prefix;
    info.attention = layers::join_name(r.prefix, hf ? "self_attn" : "self_attention");
    const std::string out = r.prefix.empty() ? "out" : r.prefix;
    if (r.kind == "gpt3_attention") {
      const Gpt3AttentionLayer<P> layer(cfg, r.prefix);
      return finish(run_from(layer, be, x, r), out, r);
    }
    if (r.kind == "gpt3_layernorm") {
      const bool bias = r.weights->has(layers::join_name(r.prefix, "bias"));
      const Gpt3LayerNormLayer<P> layer(cfg, bias);
      return finish(run_from(layer, be, x, r), out, r);
    }
    if (r.kind == "moe") {
      if constexpr (Model::kTwoKinds) {
        using L = typename Model::MoeL;
        info.mlp = layers::join_name(r.prefix, hf ? models::detail::hf_mlp_name<L>() : models::detail::mlp_name<L>());
        return finish(run_from(L(cfg, info), be, x, r), out, r);
      } else {
        MAXTEXT_THROW(ArgumentError, "[run_layer] kind 'moe': decoder_block ", cfg.decoder_block,
                      " has one kind of layer");
      }
    }
    MAXTEXT_CHECK(r.kind == "decoder", ArgumentError, "[run_layer] kind: expected decoder, moe, gpt3_attention or "
                  "gpt3_layernorm, found '", r.kind, "'");
    using L = typename Model::DenseL;
    info.mlp = layers::join_name(r.prefix, hf ? models::detail::hf_mlp_name<L>() : models::detail::mlp_name<L>());
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
  /// The thread running generate_speculative on this model (none: a default id); its drafter must not call forward.
  std::atomic<std::thread::id> speculating_{};
};

}  // namespace any_model_detail

template <class Model>
std::unique_ptr<AnyModel> make_any_model_of(const Config& cfg, const AnyModelOptions& opt) {
  return std::make_unique<any_model_detail::AnyModelImpl<Model>>(cfg, opt);
}

}  // namespace maxtext::models
