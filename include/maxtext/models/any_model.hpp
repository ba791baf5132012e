// models/any_model.hpp: a model whose decoder block and policy are chosen at run time, behind a virtual interface.
//
// models::Transformer<P, Layer...> is the library's model: its type names the architecture, so a program that takes
// the architecture from a file (a config, a GGUF) must dispatch over every type the registry knows
// (models::with_model_type). AnyModel is that dispatch done once: make_any_model(config, options) returns one
// object whatever the block, and everything a tool needs (load, forward with captures, one layer on its own, KV
// caches, generation, multi-turn sessions) is a virtual call. The `maxtext` CLI and the Python module are written
// against it.
//
// Compile time: make_any_model_of<Model> is declared here and defined in any_model_impl.hpp. A program that includes
// only this header compiles no model code; the instantiations then come from translation units that include
// any_model_blocks.hpp and instantiate the blocks explicitly (the CLI and the Python module build one such unit per
// decoder block, tools/blocks/). A program that wants everything in one translation unit includes any_model_impl.hpp
// as well.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/speculative.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

/// How an AnyModel is built: weight storage ("" = the config's dtype; bfloat16, float16, q8_0 with float32
/// activations), CPU threads (0 = all cores), llama.cpp-style int8 activations for q8_0, the parameter and capture
/// naming, the KV cache's element type.
struct AnyModelOptions {
  std::string weight_type;
  int threads = 0;
  bool int8_activations = false;
  NameScheme names = NameScheme::maxtext;
  /// KV-cache element type: "" (or the config's dtype) = the activations' type, as MaxText keeps it; "float16" (or
  /// "f16") = keys and values rounded to fp16 as they are written, under float32 activations (llama.cpp's default
  /// cache type: half the cache's memory and reads). float16 is compiled for a GGUF file's matrices (weight type
  /// ggml) only; anything else is refused by name (with_any_model_type).
  std::string kv_type;
};

/// with_model_type for AnyModelOptions: the weight storage and the KV cache's element type. Without a kv_type (or
/// with the config's dtype) it is with_model_type; "float16" dispatches to the policy with an fp16 cache
/// (Policy<B, ggml_byte, float, float, fp16>), for float32 activations over weight type ggml on backends that compute
/// from runtime-typed rows. Any other pair is refused by name, never ignored.
template <class B, class F>
decltype(auto) with_any_model_type(const Config& cfg, const AnyModelOptions& opt, F&& f) {
  const std::string dt = cfg.dtype_canonical();
  if (opt.kv_type.empty() || opt.kv_type == dt) return with_model_type<B>(cfg, f, opt.weight_type);
  if (opt.kv_type == "float16" || opt.kv_type == "f16") {
    if constexpr (backend_has_runtime_typed_weights<B>) {
      if (dt == "float32" && opt.weight_type == "ggml") {
        return dispatch_block<Policy<B, ggml_byte, float, float, fp16>>(cfg, f);
      }
    }
    MAXTEXT_THROW(UnsupportedError, "[registry] kv_type float16 is compiled for float32 activations over a GGUF "
                  "file's matrices (weight type ggml); found dtype ", dt, " with weight type '",
                  opt.weight_type.empty() ? dt : opt.weight_type, "'");
  }
  MAXTEXT_THROW(UnsupportedError, "[registry] kv_type '", opt.kv_type, "': expected float16, or the activations' type (",
                dt, ", the default)");
}

/// A KV cache made by one model (AnyModel::new_cache); passed back to forward() to decode incrementally.
class AnyCache {
 public:
  virtual ~AnyCache() = default;
  virtual std::int64_t batch() const = 0;
  virtual std::int64_t capacity() const = 0;
  virtual std::vector<std::int32_t> lengths() const = 0;
  /// Forget every row (-1) or row b.
  virtual void reset(std::int64_t b) = 0;
  /// Keep the first n tokens of row b (KVCache::set_length: later positions are overwritten by the next forward).
  virtual void set_length(std::int64_t b, std::int32_t n) = 0;
  /// Whether some layer keeps a recurrent state, which cannot go back to an earlier length (KVCache::recurrent).
  virtual bool recurrent() const = 0;
  virtual std::int64_t bytes() const = 0;
  /// KVCache::can_share / share_prefix: row dst becomes the first n tokens of row src of `from` (this cache or
  /// another of the same model): shared pages in a paged cache of one pool, copied rows otherwise.
  virtual bool can_share(std::int64_t src, std::int64_t n) const = 0;
  virtual void share_prefix(const AnyCache& from, std::int64_t src, std::int64_t dst, std::int64_t n) = 0;
  /// A paged cache's pool (KVCache::paging_stats; all zeros for an ordinary cache) and the pages row b maps.
  virtual PagingStats paging_stats() const = 0;
  virtual std::int64_t pages_of(std::int64_t b) const = 0;
};

/// A conversation with its own cache (models::Session behind the interface; see session.hpp).
class AnySession {
 public:
  virtual ~AnySession() = default;
  virtual std::int64_t length() const = 0;
  virtual std::int64_t capacity() const = 0;
  virtual const std::vector<std::int32_t>& tokens() const = 0;
  virtual void rewind(std::int64_t n) = 0;
  /// Make the conversation exactly `ids` (rewinds to the common prefix); returns that prefix's length. With pictures:
  /// media_mask [1, ids.size()] marks the soft tokens, media_embeddings [n, emb_dim] their rows, media_positions
  /// [3, ids.size()] MRoPE's 3-D positions on a use_mrope model (Session::sync).
  virtual std::int64_t sync(const std::vector<std::int32_t>& ids, const Tensor<std::int32_t, 2>* media_mask = nullptr,
                            const Tensor<float, 2>* media_embeddings = nullptr,
                            const Tensor<std::int32_t, 2>* media_positions = nullptr) = 0;
  virtual GenerateResult generate(const std::vector<std::int32_t>& new_tokens, const GenerateOptions& opt) = 0;
  /// generate() with drafts from `drafter` (Session::generate_speculative); a drafter that runs this session's model
  /// is refused, as for AnyModel::generate_speculative.
  virtual GenerateResult generate_speculative(const std::vector<std::int32_t>& new_tokens, const GenerateOptions& opt,
                                              const DraftFn& drafter, const SpeculativeOptions& spec = {},
                                              SpeculativeStats* stats = nullptr) = 0;
  /// generate() with drafts from the model's own MTP layers (Session::generate_mtp_speculative: their caches follow
  /// the conversation from the first such call on). Refused by name when the model has none.
  virtual GenerateResult generate_mtp_speculative(const std::vector<std::int32_t>& new_tokens, const GenerateOptions& opt,
                                                  const SpeculativeOptions& spec = {},
                                                  SpeculativeStats* stats = nullptr) = 0;
  /// Session::save: the conversation, its cache's rows and `app` (the application's text) to the file `path`.
  virtual void save(const std::string& path, const std::string& app = {}) = 0;
  /// Session::load: the conversation saved in `path` replaces this one; returns its application text. Refused by
  /// name for a damaged file, another model, other weights (with `verify`) or a conversation longer than capacity().
  virtual std::string load(const std::string& path, bool verify = true) = 0;
};

/// Inputs of one forward pass (host tensors, [B, T]).
struct ForwardRequest {
  const Tensor<std::int32_t, 2>* tokens = nullptr;
  const Tensor<std::int32_t, 2>* positions = nullptr;
  const Tensor<std::int32_t, 2>* segment_ids = nullptr;
  AnyCache* cache = nullptr;  ///< nullptr: a fresh cache of T tokens (full-sequence forward)
  bool last_only = false;
  layers::Capture* capture = nullptr;
  const Tensor<std::int32_t, 2>* media_mask = nullptr;  ///< ForwardOptions::media_mask / media_embeddings
  const Tensor<float, 2>* media_embeddings = nullptr;
  const Tensor<std::int32_t, 3>* mrope_positions = nullptr;  ///< ForwardOptions::mrope_positions [3, B, T]
  /// >= 0: the tokens' rows are the cache's slots [first_slot, first_slot + B), the others untouched
  /// (ForwardOptions::first_slot); -1: all of its slots.
  std::int64_t first_slot = -1;
  /// Valid tokens per row [B], right padding beyond (ForwardOptions::row_lengths); nullptr: every row whole.
  const std::vector<std::int32_t>* row_lengths = nullptr;
};

/// One decoder layer run on its own (`maxtext compare --layer`): either layer `index` of the loaded model with its
/// parameters, or a layer of `kind` whose parameters come from `weights` under `prefix`.
struct LayerRequest {
  AnyTensor x;                             ///< [B, T, emb_dim] or [T, emb_dim], any float dtype
  std::int64_t index = -1;                 ///< >= 0 without weights: the model's own layer
  const io::TensorMap* weights = nullptr;  ///< canonical names (io::load_weights / a parameter dict)
  std::string prefix;                      ///< with weights: P.* are the layer's parameters; names captured under P
  std::int64_t layer_index = -1;           ///< with weights: the layer's index in the stack (-1: P's trailing digits)
  std::string kind = "decoder";            ///< decoder, moe (second layer kind), gpt3_attention, gpt3_layernorm
  const Tensor<std::int32_t, 2>* positions = nullptr;
  const Tensor<std::int32_t, 2>* segment_ids = nullptr;
  layers::Capture* capture = nullptr;
};

/// A models::Transformer of any registered decoder block and policy. Calls are serialised per model (a mutex):
/// threads may share one AnyModel, but its forward passes run one at a time.
class AnyModel {
 public:
  virtual ~AnyModel() = default;
  virtual const Config& config() const = 0;
  /// The concrete model, e.g. "Transformer<decoder_block=llama2, activations=float32, weights=bfloat16>".
  virtual std::string type_name() const = 0;
  /// Load canonical (MaxText-named, unscanned) tensors; allow_unused: ignore tensors the model does not take.
  virtual void load(const io::TensorMap& tensors, bool allow_unused = false) = 0;
  virtual void init(std::uint64_t seed) = 0;
  virtual bool loaded() const = 0;
  virtual NameScheme name_scheme() const = 0;
  virtual void set_name_scheme(NameScheme s) = 0;
  virtual std::vector<std::string> layer_names() const = 0;
  virtual std::int64_t num_params() = 0;
  virtual io::TensorMap export_params() = 0;
  /// Each parameter's shape as a file tensor, by name (Transformer::param_shapes).
  virtual std::map<std::string, std::vector<std::int64_t>> param_shapes() = 0;
  /// Run split over `c`'s ranks (Transformer::set_communicator; models/parallel.hpp); nullptr: one process.
  virtual void set_communicator(comm::Communicator* c) = 0;
  /// The general form (Transformer::set_comm_groups): tensor- and expert-parallel groups.
  virtual void set_comm_groups(const comm::Groups& g) = 0;
  /// Debug: compare the replicated residual stream across ranks after every layer (Transformer::set_replica_check).
  virtual void set_replica_check(bool on) = 0;
  /// Engram layers (engram_layers): the compressed-token table they hash with (Transformer::set_engram_vocab).
  virtual void set_engram_vocab(std::vector<std::int32_t> lookup, std::int64_t compressed_size, std::int32_t pad_token) = 0;
  virtual bool needs_engram_vocab() const = 0;

  virtual std::shared_ptr<AnyCache> new_cache(std::int64_t batch, std::int64_t capacity) = 0;
  /// A paged cache (models/paged_memory.hpp): memory only for the pages its rows write, prefixes shared.
  virtual std::shared_ptr<AnyCache> new_paged_cache(std::int64_t batch, std::int64_t capacity,
                                                    const PagingOptions& paging) = 0;
  /// Logits [B, T, V] (or [B, 1, V] with last_only) as f32.
  virtual Tensor<float, 3> forward(const ForwardRequest& r) = 0;
  virtual GenerateResult generate(const std::vector<std::vector<std::int32_t>>& prompts, const GenerateOptions& opt,
                                  std::int64_t capacity = 0) = 0;
  /// Greedy generation of one prompt, `drafter`'s tokens verified K + 1 at a time (models/speculative.hpp,
  /// generate_speculative): the tokens generate() gives at temperature 0, in fewer passes. A drafter that runs this
  /// same AnyModel is refused (it would wait for the pass that waits for it); draft with another AnyModel
  /// (AnyModelDrafter) or with prompt lookup.
  virtual GenerateResult generate_speculative(const std::vector<std::int32_t>& prompt, const GenerateOptions& opt,
                                              const DraftFn& drafter, const SpeculativeOptions& spec = {},
                                              SpeculativeStats* stats = nullptr) = 0;
  /// Greedy speculative generation with drafts from the model's own MTP layers (models/mtp.hpp, MtpDrafter): at
  /// most mtp_num_layers drafts per pass. Refused by name when the model has none.
  virtual GenerateResult generate_mtp_speculative(const std::vector<std::int32_t>& prompt, const GenerateOptions& opt,
                                                  const SpeculativeOptions& spec = {},
                                                  SpeculativeStats* stats = nullptr) = 0;
  /// MaxText's whole-sequence pass with its MTP block (Transformer::forward_with_mtp): the main logits, then MTP layer
  /// k's for k = 1..mtp_num_layers, each [B, T, V] f32. `hidden`: what the MTP layers read (MtpHidden).
  virtual std::vector<Tensor<float, 3>> forward_with_mtp(const Tensor<std::int32_t, 2>& tokens,
                                                         MtpHidden hidden = MtpHidden::raw) = 0;
  /// A session holding up to `capacity` tokens (0: max_target_length). It refers to this model: keep the model alive.
  virtual std::unique_ptr<AnySession> new_session(std::int64_t capacity = 0) = 0;
  /// Returns the layer's output [B, T, D] as f32; also puts it into the capture under the layer's name (or "out"
  /// for a layer from a file without prefix) when that name is requested.
  virtual Tensor<float, 3> run_layer(const LayerRequest& r) = 0;
};

namespace detail {
/// An AnyModel seen as a models::Transformer by the templates that take one (ModelDrafter's draft model, Session in
/// the server's engine): make_cache / forward / config over the virtual interface.
class AnyDraftModel {
 public:
  class Cache {
   public:
    explicit Cache(std::shared_ptr<AnyCache> c) : c_(std::move(c)) {}
    std::int32_t length(std::int64_t b) const { return c_->lengths().at(static_cast<std::size_t>(b)); }
    void set_length(std::int64_t b, std::int32_t n) { c_->set_length(b, n); }
    std::int64_t capacity() const { return c_->capacity(); }
    bool recurrent() const { return c_->recurrent(); }
    bool can_share(std::int64_t src, std::int64_t n) const { return c_->can_share(src, n); }
    void share_prefix(std::int64_t src, std::int64_t dst, std::int64_t n) { c_->share_prefix(*c_, src, dst, n); }
    AnyCache* get() { return c_.get(); }
    const AnyCache* get() const { return c_.get(); }
    std::int64_t bytes() const { return c_->bytes(); }

   private:
    std::shared_ptr<AnyCache> c_;
  };
  explicit AnyDraftModel(AnyModel& m) : m_(m) {}
  const Config& config() const { return m_.config(); }
  Cache make_cache(std::int64_t batch, std::int64_t capacity) const {
    return Cache(m_.new_cache(batch, capacity > 0 ? capacity : m_.config().max_target_length));
  }
  /// Passes tokens, positions, segment ids, row lengths, captures and media on; refuses by name what
  /// AnyModel::forward has no field for (hidden_out) rather than dropping it.
  Tensor<float, 3> forward(const Tensor<std::int32_t, 2>& tokens, Cache& cache, const ForwardOptions& fo) {
    MAXTEXT_CHECK(fo.hidden_out == nullptr, ArgumentError,
                  "[any_model] a forward pass through AnyModel takes no hidden_out (ForwardOptions): AnyModel::forward "
                  "keeps no hidden state");
    ForwardRequest r;
    r.tokens = &tokens;
    r.positions = fo.positions;
    r.segment_ids = fo.segment_ids;
    r.cache = cache.get();
    r.last_only = fo.last_only;
    r.capture = fo.capture;
    r.media_mask = fo.media_mask;
    r.media_embeddings = fo.media_embeddings;
    r.mrope_positions = fo.mrope_positions;
    r.first_slot = fo.first_slot;
    r.row_lengths = fo.row_lengths;
    return m_.forward(r);
  }

 private:
  AnyModel& m_;
};
}  // namespace detail

/// ModelDrafter (models/speculative.hpp) over a draft model chosen at run time: `maxtext generate --spec draft
/// --draft FILE`. `draft` must be another AnyModel than the one it drafts for.
class AnyModelDrafter {
 public:
  explicit AnyModelDrafter(AnyModel& draft, std::int64_t capacity = 0) : model_(draft), drafter_(model_, capacity) {}
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>& context, std::int64_t k,
                                    std::int64_t target_vocab = -1) {
    return drafter_.propose(context, k, target_vocab);
  }
  /// For AnyModel::generate_speculative; this object must outlive the generation.
  DraftFn as_function() {
    return [this](const std::vector<std::int32_t>& c, std::int64_t k) { return propose(c, k); };
  }

 private:
  detail::AnyDraftModel model_;
  ModelDrafter<detail::AnyDraftModel> drafter_;
};

/// The AnyModel of one model type (defined in any_model_impl.hpp; instantiated per decoder block by the translation
/// units that include any_model_blocks.hpp).
template <class Model>
std::unique_ptr<AnyModel> make_any_model_of(const Config& cfg, const AnyModelOptions& opt);

/// The AnyModel for whatever `cfg` (decoder_block, dtype), `opt.weight_type` and `opt.kv_type` describe; unknown
/// blocks and unsupported dtype / storage / cache types are refused by name (with_any_model_type).
/// A template (Tag is never given) so that it is instantiated only where it is called: as an inline function it would
/// odr-use make_any_model_of for every model type in each translation unit that includes this header, and where
/// any_model_impl.hpp's definition is visible too (the per-block units) the compiler would instantiate every model
/// there, about 25 s of compile time per unit for code that is then thrown away.
template <class Tag = void>
std::unique_ptr<AnyModel> make_any_model(const Config& cfg, const AnyModelOptions& opt = {}) {
  return with_any_model_type<cpu::Backend>(cfg, opt, [&]<class M>() { return make_any_model_of<M>(cfg, opt); });
}

}  // namespace maxtext::models
