// models/transformer.hpp: MaxText models.py Transformer and decoders.py Decoder: token embedding, optional positional
// embeddings, the stack of decoder layers, the final norm and the output head. Spec decoder.md.
//
//   using Gpt3 = maxtext::models::Transformer<maxtext::Policy<maxtext::cpu::Backend, float>,
//                                             maxtext::layers::Gpt3DecoderLayer>;
//   Gpt3 model(config);            // sizes from the runtime Config
//   model.load(weights);           // TensorMap in MaxText naming (see families/checkpoint.hpp)
//   auto cache = model.make_cache(/*batch=*/1, /*capacity=*/256);
//   auto logits = model.forward(tokens, cache);   // [B, T, vocab] f32
//
// With two layer templates (DeepSeek), the first `first_num_dense_layers` layers use the first and the rest the
// second, named `dense_layers_i` / `moe_layers_j` as in MaxText.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/decoder_blocks.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/embeddings.hpp"
#include "maxtext/layers/engram.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/models/kv_cache.hpp"

namespace maxtext::models {

/// How activations are named for capture (and how the weights were named when loaded).
enum class NameScheme : std::uint8_t { maxtext, hf };

/// The hidden state an MTP layer reads (Transformer::forward_mtp): the previous stage's raw output, as MaxText's
/// multi_token_prediction.py passes it (the default), or that output through the model's final norm, as llama.cpp's
/// MTP graphs (t_h_nextn) and vLLM's MTP drafters take it. CLI: --mtp-hidden raw|normed.
enum class MtpHidden : std::uint8_t { raw, normed };

/// Options of one forward pass. All host data; shapes [B, T] unless said otherwise.
struct ForwardOptions {
  /// Positions for rotary / position embeddings; default: each row's cache length + t.
  const Tensor<std::int32_t, 2>* positions = nullptr;
  /// MRoPE's 3-D positions [3, B, T] (temporal, height, width) instead of `positions` (use_mrope models: Qwen3.5,
  /// Qwen3-VL, Qwen3-Omni): a picture's tokens sit at (start, start + row, start + column) of its merged grid and the
  /// text after it at the largest position so far + 1 (MaxText's get_rope_index; models::qwen3_rope_index makes
  /// them). The layers that take one position per token take the temporal row. Needed with media on such a model.
  const Tensor<std::int32_t, 3>* mrope_positions = nullptr;
  /// Segment ids for packed sequences (1 = real token, 0 = padding in MaxText's convention); default: none.
  const Tensor<std::int32_t, 2>* segment_ids = nullptr;
  /// Valid tokens per row [B] (right padding beyond); default: all T. The cache advances by this many.
  const std::vector<std::int32_t>* row_lengths = nullptr;
  /// Logits for every position (default) or only for each row's last valid token ([B, 1, V]).
  bool last_only = false;
  /// Named intermediates to record (MaxText's sow); nullptr = none (zero cost).
  layers::Capture* capture = nullptr;
  /// Media input (MaxText's multimodal_input): the token embeddings at the nonzero positions of `media_mask` [B, T]
  /// are replaced by the rows of `media_embeddings` [n, emb_dim] (host f32, rounded to the activation type), the
  /// k-th marked position (row-major over b, t) taking row k (decoders.py _apply_embedding: merge_mm_embeddings).
  /// Rows of (1 + k) * emb_dim carry deepstack features after the soft token (Qwen3-VL / Qwen3-Omni): columns
  /// [(1 + j) * emb_dim, (2 + j) * emb_dim) are added to decoder layer j's output at the marked positions
  /// (decoders.py deepstack_process), j < k.
  /// Layer types say whether they take media (layers::MediaMerge); for Gemma 3 and Gemma 4 each run of consecutive
  /// marked tokens is one picture, which its tokens see whole: a run must end within the pass (split a long prompt
  /// between pictures, never inside one) and lie within one segment.
  const Tensor<std::int32_t, 2>* media_mask = nullptr;
  const Tensor<float, 2>* media_embeddings = nullptr;
  /// Receives the raw hidden state [B*T, D] of every row: the last layer's output (after mHC's stream collapse),
  /// before the final norm, which MaxText's MTP block takes (models.py: main_hidden_state). Host f32, which holds
  /// every activation type exactly. nullptr = not kept.
  Tensor<float, 2>* hidden_out = nullptr;
  /// >= 0: the tokens' B rows are the cache's slots [first_slot, first_slot + B), and the pass leaves the other slots
  /// as they are (KVCache::rows): one pass over some of the conversations a shared cache holds (models/batching.hpp).
  /// -1 (default): the rows are all of the cache's slots.
  std::int64_t first_slot = -1;
};

namespace detail {
template <class L>
concept HasMlpName = requires { L::mlp_name; };
template <class L>
std::string mlp_name() {
  if constexpr (HasMlpName<L>) {
    return std::string(L::mlp_name);
  } else {
    return "mlp";
  }
}
template <class L>
concept HasHfMlpName = requires { L::hf_mlp_name; };
/// The FFN's capture name under NameScheme::hf: transformers' module name, `mlp` unless the layer names it (Llama 4:
/// `feed_forward`, for its dense MLP and its MoE alike).
template <class L>
std::string hf_mlp_name() {
  if constexpr (HasHfMlpName<L>) {
    return std::string(L::hf_mlp_name);
  } else {
    return "mlp";
  }
}
/// Layers whose forward takes the mHC residual stream [M, k*D] (mhc_expansion_rate k > 1) say so.
template <class L>
constexpr bool supports_mhc() {
  if constexpr (requires { L::supports_mhc; }) {
    return L::supports_mhc;
  } else {
    return false;
  }
}
/// A decoder-level module that runs once after the token embedding and hands its output to every layer
/// (layers::DecoderState::per_layer_inputs): the layer type names it as `Prelude` (Gemma 4 small's per-layer
/// embedder). It has Params, visit(v, p), a parameter scope `name`, the per-layer `width()`, and
/// forward(ctx, p, ids, x) -> [B*T, num_layers * width()] rows allocated from the context's scratch.
struct NoPrelude {
  struct Params {};
};
template <class L>
struct prelude_of {
  using type = NoPrelude;
};
template <class L>
  requires requires { typename L::Prelude; }
struct prelude_of<L> {
  using type = typename L::Prelude;
};
/// A decoder-level module that collapses the mHC streams [M, k*D] to [M, D] after the last layer instead of
/// mhc_reduce's plain sum: the layer type names it as `StreamHead` (DeepSeek-V4's hc_head). It has Params,
/// visit(v, p), a parameter scope `name` and forward(ctx, p, x, y).
struct NoStreamHead {
  struct Params {};
};
template <class L>
struct stream_head_of {
  using type = NoStreamHead;
};
template <class L>
  requires requires { typename L::StreamHead; }
struct stream_head_of<L> {
  using type = typename L::StreamHead;
};
/// How the layer type takes media embeddings (layers::MediaMerge; none unless it names one).
template <class L>
constexpr layers::MediaMerge media_merge_of() {
  if constexpr (requires { L::media_merge; }) {
    return L::media_merge;
  } else {
    return layers::MediaMerge::none;
  }
}
/// A config runs on a layer type only if its decoder_block is the layer's (or an alias of it: core/decoder_blocks.hpp).
/// Layer types outside the block list (a user's own) name no decoder_block_name and take any config.
template <class L>
void check_decoder_block(const Config& cfg) {
  if constexpr (requires { L::decoder_block_name; }) {
    const std::string_view want = L::decoder_block_name;
    MAXTEXT_CHECK(decoder_block_runs_as(cfg.decoder_block) == want, ConfigError, "[Transformer] config decoder_block '",
                  cfg.decoder_block, "' does not run on this model's layer type, which is decoder_block '", want,
                  "'s: set decoder_block: ", want, ", or build the model of '", cfg.decoder_block,
                  "' (its layer types: core/decoder_blocks.hpp; models::with_model_type chooses them from a config)");
  }
}

/// The layer type's final norm (layers::FinalNorm; RMSNorm unless the layer names another).
template <class L>
constexpr layers::FinalNorm final_norm_of() {
  if constexpr (requires { L::final_norm; }) {
    return L::final_norm;
  } else {
    return layers::FinalNorm::rms;
  }
}
/// Whether the layer type's MTP layers are Qwen3-Next's (vLLM qwen3_next_mtp.py): (1 + w) input norms and a final
/// norm of their own (mtp.norm), where MaxText's are plain RMSNorms sharing the decoder's final norm.
template <class L>
constexpr bool mtp_qwen3_next_of() {
  if constexpr (requires { L::mtp_qwen3_next; }) {
    return L::mtp_qwen3_next;
  } else {
    return false;
  }
}
template <class L>
concept HasAttentionName = requires { L::attention_name; };
/// The attention module's parameter (and capture) name: `self_attention` unless the layer names it (Olmo3:
/// `attention`, GPT-OSS: `GptOssAttention`).
template <class L>
std::string attention_name() {
  if constexpr (HasAttentionName<L>) {
    return std::string(L::attention_name);
  } else {
    return "self_attention";
  }
}
}  // namespace detail

// (The template template parameters are constrained like the layers themselves, which nvcc's front end requires.)
template <TensorPolicy P, template <TensorPolicy> class Layer, template <TensorPolicy> class MoeLayer = Layer>
class Transformer {
 public:
  using policy = P;
  using B = typename P::backend;
  using A = typename P::act_t;
  using W = typename P::weight_t;
  using DenseL = Layer<P>;
  using MoeL = MoeLayer<P>;
  static constexpr bool kTwoKinds = !std::is_same_v<DenseL, MoeL>;
  using LayerVariant = std::conditional_t<kTwoKinds, std::variant<DenseL, MoeL>, std::variant<DenseL>>;
  using LayerParamsVariant = std::conditional_t<kTwoKinds, std::variant<typename DenseL::Params, typename MoeL::Params>,
                                                std::variant<typename DenseL::Params>>;
  using PreludeT = typename detail::prelude_of<DenseL>::type;
  static constexpr bool kPrelude = !std::is_same_v<PreludeT, detail::NoPrelude>;
  using StreamHeadT = typename detail::stream_head_of<DenseL>::type;
  static constexpr bool kStreamHead = !std::is_same_v<StreamHeadT, detail::NoStreamHead>;
  static constexpr layers::FinalNorm kFinalNorm = detail::final_norm_of<DenseL>();
  static constexpr layers::MediaMerge kMedia = detail::media_merge_of<DenseL>();
  static_assert(!kTwoKinds || detail::media_merge_of<MoeL>() == kMedia, "the two layer kinds take media alike");

  /// The last layer kind: MaxText's MTP layers are get_decoder_layers()[-1] (the MoE layer for DeepSeek).
  using MtpL = MoeL;
  /// Qwen3-Next / Qwen3.5 MTP layers (detail::mtp_qwen3_next_of): their norms are (1 + w) and each has a final norm.
  static constexpr bool kMtpQwen3Next = detail::mtp_qwen3_next_of<MtpL>();
  /// One multi-token prediction layer (multi_token_prediction.py MultiTokenPredictionLayer), as mtp_layer_{k}:
  /// mtp_{k}_embedding_norm, mtp_{k}_hidden_state_norm, mtp_{k}_projection [2D, D] and mtp_{k}_transformer_layer;
  /// with kMtpQwen3Next also mtp_{k}_final_norm (the checkpoints' mtp.norm), applied before the shared output head
  /// in place of the decoder's final norm.
  struct MtpParams {
    typename layers::RMSNorm<P>::Params embedding_norm, hidden_state_norm;
    typename layers::DenseGeneral<P>::Params projection;
    typename MtpL::Params transformer_layer;
    typename layers::RMSNorm<P>::Params final_norm;  ///< kMtpQwen3Next only
  };
  struct Params {
    typename layers::Embed<P>::Params token_embedder;
    typename layers::Embed<P>::Params position_embedder;  ///< GPT-3 trainable positions
    typename PreludeT::Params prelude;                    ///< the layer type's decoder-level Prelude, if any
    std::vector<LayerParamsVariant> layers;
    typename StreamHeadT::Params stream_head;             ///< the layer type's stream collapse (mHC), if any
    typename layers::RMSNorm<P>::Params decoder_norm_rms;
    typename layers::Gpt3LayerNorm<P>::Params decoder_norm_gpt3;
    typename layers::DenseGeneral<P>::Params logits_dense;  ///< [D, V]; absent with logits_via_embedding
    Matrix<W> attend_table;                                  ///< bf16-rounded embedding for tied logits
    Matrix<float> sinusoid;                                  ///< untrainable positions [max_len, D]
    std::vector<MtpParams> mtp;                              ///< mtp_block.mtp_layer_{k}, k = 1..mtp_num_layers
  };

  explicit Transformer(Config cfg, B be = B{}, NameScheme scheme = NameScheme::maxtext)
      : cfg_(std::move(cfg)), be_(std::move(be)), scheme_(scheme), scratch_(be_.memory()) {
    cfg_.derive();
    cfg_.validate();
    detail::check_decoder_block<DenseL>(cfg_);
    if constexpr (kTwoKinds) detail::check_decoder_block<MoeL>(cfg_);
    const std::int64_t D = cfg_.emb_dim;
    embed_ = layers::Embed<P>({cfg_.vocab_size, D});
    if (cfg_.trainable_position_size > 0) pos_embed_ = layers::Embed<P>({cfg_.trainable_position_size, D});
    const float eps = static_cast<float>(cfg_.normalization_layer_epsilon);
    if constexpr (kFinalNorm == layers::FinalNorm::gpt3_layer_norm) {
      final_gpt3_ = layers::Gpt3LayerNorm<P>({D, eps, true});
    } else {
      final_rms_ = layers::RMSNorm<P>({D, eps, true, kFinalNorm == layers::FinalNorm::rms_offset_one ? 1.0f : 0.0f});
    }
    if (!cfg_.logits_via_embedding) {
      MAXTEXT_CHECK(cfg_.head_shards >= 1 && cfg_.vocab_size % cfg_.head_shards == 0, ConfigError,
                    "[model] head_shards = ", cfg_.head_shards, " does not divide vocab_size = ", cfg_.vocab_size);
      logits_ = layers::DenseGeneral<P>(
          {{D}, {cfg_.vocab_size / cfg_.head_shards}, false, layers::Init::truncated_normal});
    }
    streams_ = cfg_.mhc_expansion_rate;
    MAXTEXT_CHECK(streams_ == 1 || (detail::supports_mhc<DenseL>() && detail::supports_mhc<MoeL>()), UnsupportedError,
                  "[config] mhc_expansion_rate = ", streams_, ": the layer types of this model (decoder_block '",
                  cfg_.decoder_block, "') take no hyper-connection streams");
    if constexpr (kPrelude) prelude_ = PreludeT(cfg_);
    if (pipelined()) check_pipeline();
    if constexpr (kStreamHead) {
      if (streams_ > 1) stream_head_ = StreamHeadT(cfg_);
    }
    const std::int64_t L = cfg_.num_decoder_layers;
    const std::int64_t n_dense = kTwoKinds ? cfg_.first_num_dense_layers : L;
    MAXTEXT_CHECK(n_dense >= 0 && n_dense <= L, ConfigError, "[config] first_num_dense_layers (", n_dense,
                  ") must be in [0, num_decoder_layers=", L, "]");
    if (pipelined()) local_cache_.assign(static_cast<std::size_t>(L), -1);
    for (std::int64_t i = 0; i < L; ++i) {
      if (pipelined()) {  // a pipeline stage builds its own layers only, under their global indices and names
        if (cfg_.pipeline_owner(i) != cfg_.pipeline.stage) continue;
        local_cache_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(layers_.size());
      }
      global_.push_back(i);
      if (i < n_dense) {
        layers_.emplace_back(std::in_place_index<0>, cfg_, layer_info<DenseL>(i, i, true));
      } else {
        if constexpr (kTwoKinds) layers_.emplace_back(std::in_place_index<1>, cfg_, layer_info<MoeL>(i, i - n_dense, false));
      }
    }
    if (pipelined()) check_pipeline_layers();
    params_.layers.resize(layers_.size());
    if (cfg_.mtp_num_layers > 0) {
      mtp_norm_ = layers::RMSNorm<P>({D, eps, true, kMtpQwen3Next ? 1.0f : 0.0f});
      mtp_proj_ = layers::DenseGeneral<P>({{2 * D}, {D}, false, layers::Init::truncated_normal});
      for (std::int64_t k = 1; k <= cfg_.mtp_num_layers; ++k) mtp_layers_.emplace_back(cfg_, mtp_layer_info(k));
      params_.mtp.resize(static_cast<std::size_t>(cfg_.mtp_num_layers));
    }
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      if (layers_[i].index() == 0) {
        params_.layers[i].template emplace<0>();
      } else {
        if constexpr (kTwoKinds) params_.layers[i].template emplace<1>();
      }
    }
  }

  const Config& config() const { return cfg_; }
  /// The type the activations are computed in: the policy's (P::act_t). Transformer does not read the config's
  /// `dtype` (MaxText's name for the activation type): the policy chose it at compile time, and a float32 model of a
  /// bfloat16 config computes in float32. models::with_model_type and AnyModel choose the policy from `dtype`.
  static constexpr DType activation_dtype() { return dtype_of_t<A>::value; }
  const B& backend() const { return be_; }
  B& backend() { return be_; }
  Params& params() { return params_; }
  const Params& params() const { return params_; }
  NameScheme name_scheme() const { return scheme_; }
  void set_name_scheme(NameScheme s) {
    scheme_ = s;
    rename_layers();
  }

  /// Visit every parameter with its MaxText path (token_embedder.embedding, decoder.layers_0...., ...).
  template <class V>
  void visit(V& v) {
    if (holds_embedding()) {
      layers::Scope<V> s(v, "token_embedder");
      embed_.visit(v, params_.token_embedder);
    }
    visit_decoder(v);
    for (std::size_t k = 1; k <= mtp_layers_.size(); ++k) {
      layers::Scope<V> blk(v, "mtp_block");
      layers::Scope<V> lyr(v, "mtp_layer_" + std::to_string(k));
      const std::string pre = "mtp_" + std::to_string(k) + "_";
      MtpParams& mp = params_.mtp[k - 1];
      {
        layers::Scope<V> s(v, pre + "embedding_norm");
        mtp_norm_.visit(v, mp.embedding_norm);
      }
      {
        layers::Scope<V> s(v, pre + "hidden_state_norm");
        mtp_norm_.visit(v, mp.hidden_state_norm);
      }
      {
        layers::Scope<V> s(v, pre + "projection");
        mtp_proj_.visit(v, mp.projection);
      }
      if constexpr (kMtpQwen3Next) {
        layers::Scope<V> s(v, pre + "final_norm");
        mtp_norm_.visit(v, mp.final_norm);
      }
      layers::Scope<V> s(v, pre + "transformer_layer");
      mtp_layers_[k - 1].visit(v, mp.transformer_layer);
    }
  }
  /// The decoder's parameters (scope `decoder`), as visit() walks them.
  template <class V>
  void visit_decoder(V& v) {
    layers::Scope<V> dec(v, "decoder");
    if (cfg_.trainable_position_size > 0 && first_stage()) {
      layers::Scope<V> s(v, "position_embedder");
      pos_embed_.visit(v, params_.position_embedder);
    }
    if constexpr (kPrelude) {
      if (prelude_.enabled() && first_stage()) {
        layers::Scope<V> s(v, PreludeT::name);
        prelude_.visit(v, params_.prelude);
      }
    }
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      std::visit(
          [&](auto& layer) {
            using LT = std::decay_t<decltype(layer)>;
            auto& lp = std::get<typename LT::Params>(params_.layers[i]);
            layers::Scope<V> s(v, param_prefix(i));
            layer.visit(v, lp);
          },
          layers_[i]);
    }
    if (!last_stage()) return;  // a pipeline stage before the last: no output head
    if constexpr (kStreamHead) {
      if (streams_ > 1) {
        layers::Scope<V> s(v, StreamHeadT::name);
        stream_head_.visit(v, params_.stream_head);
      }
    }
    {
      layers::Scope<V> s(v, "decoder_norm");
      if constexpr (kFinalNorm == layers::FinalNorm::gpt3_layer_norm) {
        final_gpt3_.visit(v, params_.decoder_norm_gpt3);
      } else {
        final_rms_.visit(v, params_.decoder_norm_rms);
      }
    }
    if (!cfg_.logits_via_embedding) {
      layers::Scope<V> s(v, "logits_dense");
      logits_.visit(v, params_.logits_dense);
    }
  }

  /// Load every parameter from tensors in MaxText naming (unscanned layout; see families/checkpoint.hpp for scanned
  /// layouts and other namings). Missing, extra, mis-shaped or non-float tensors are reported together.
  void load(const io::TensorMap& tensors, bool allow_unused = false) {
    layers::ParamLoader<P> loader(tensors, be_);
    visit(loader);
    loader.finish(allow_unused);
    finish_params();
  }
  /// The shape each parameter takes as a file tensor, by name (layers::ParamShapes): a split model's rank compares
  /// them with the whole model's file (models/parallel.hpp).
  std::map<std::string, std::vector<std::int64_t>> param_shapes() {
    layers::ParamShapes s;
    visit(s);
    return std::move(s.shapes);
  }
  /// Run split over `c`'s ranks (tensor parallelism, models/parallel.hpp): this model holds one rank's share
  /// (made from models::tensor_parallel_config and loaded from models::rank_slice), its row-parallel
  /// products are summed over the ranks, and every forward pass returns rank 0's logits on every rank. Every rank
  /// must then make the same calls with the same tokens. nullptr (the default): one process. Not owned.
  void set_communicator(comm::Communicator* c) { groups_ = {c, c, nullptr}; }
  /// The general form: the world and the tensor- and expert-parallel groups (comm::Groups); a model made from
  /// models::expert_parallel_config takes {c, nullptr, c}.
  void set_comm_groups(const comm::Groups& g) { groups_ = g; }
  const comm::Groups& comm_groups() const { return groups_; }
  /// Debug: after every layer, compare a hash of the residual stream across the world's ranks, which hold it
  /// replicated, and throw a CommError naming the first layer where a rank differs (MAXTEXT_COMM_CHECK=1 in the
  /// `maxtext` program).
  void set_replica_check(bool on) { replica_check_ = on; }

  /// Seeded initialisation with MaxText's initialisers.
  void init(std::uint64_t seed) {
    layers::ParamInitializer<P> ini(be_, seed);
    visit(ini);
    finish_params();
  }
  /// All parameters in MaxText naming and layout (host tensors; kernels as strided views).
  io::TensorMap export_params() {
    layers::ParamExporter<P> ex(&be_);
    visit(ex);
    return std::move(ex.out);
  }
  std::int64_t num_params() {
    layers::ParamCounter c;
    visit(c);
    return c.count;
  }

  /// The compressed-token table the Engram layers hash with (engram_layers; deepseek.py builds it from the Hugging
  /// Face tokenizer, tokenizer::compressed_token_table does here): `lookup[id]` is token id's canonical id, one of
  /// `compressed_size`; `pad_token` is the tokenizer's pad token id. A model with Engram layers refuses to run
  /// without it.
  void set_engram_vocab(std::vector<std::int32_t> lookup, std::int64_t compressed_size, std::int32_t pad_token) {
    MAXTEXT_CHECK(!cfg_.engram_layers().empty(), ConfigError, "[model] set_engram_vocab: this model has no Engram "
                  "layers (engram_layers is empty)");
    engram_ = std::make_shared<const layers::EngramHashing>(cfg_, std::move(lookup), compressed_size, pad_token);
  }
  /// Whether the model has Engram layers and still lacks their compressed-token table.
  bool needs_engram_vocab() const { return !cfg_.engram_layers().empty() && !engram_; }

  /// A cache for `batch` sequences of up to `capacity` tokens (default max_target_length); paged (with the config's
  /// pagedattn_* sizes) when the config says `attention: paged`.
  KVCache<P> make_cache(std::int64_t batch, std::int64_t capacity = 0) const {
    if (cfg_.attention == "paged") return make_cache(batch, capacity, paging_options(cfg_));
    if (capacity <= 0) capacity = cfg_.max_target_length;
    std::vector<layers::CacheSpec> specs;
    std::vector<layers::StateSpec> states;
    cache_specs(specs, states);
    return KVCache<P>(be_, batch, capacity, specs, states);
  }
  /// A paged cache (models/paged_memory.hpp): memory for the pages its sequences write, prefixes shared.
  KVCache<P> make_cache(std::int64_t batch, std::int64_t capacity, const PagingOptions& paging) const {
    if (capacity <= 0) capacity = cfg_.max_target_length;
    std::vector<layers::CacheSpec> specs;
    std::vector<layers::StateSpec> states;
    cache_specs(specs, states);
    return KVCache<P>(be_, batch, capacity, specs, states, paging);
  }

  /// Run tokens [B, T] through the model, appending them to `cache` at each row's current length.
  /// Returns f32 logits [B, T, V] (or [B, 1, V] with last_only).
  /// With ForwardOptions::first_slot, the rows are those slots of the cache, the others untouched.
  Tensor<float, 3> forward(const Tensor<std::int32_t, 2>& tokens, KVCache<P>& cache, const ForwardOptions& opt = {}) {
    if (opt.first_slot >= 0) {
      MAXTEXT_CHECK(opt.first_slot + tokens.dim(0) <= cache.batch(), ArgumentError, "[forward] first_slot ",
                    opt.first_slot, " and ", tokens.dim(0), " rows of tokens exceed the cache's ", cache.batch(), " slots");
      KVCache<P> view = cache.rows(opt.first_slot, tokens.dim(0));
      ForwardOptions o = opt;
      o.first_slot = -1;
      Tensor<float, 3> out = forward(tokens, view, o);
      cache.put_rows(be_, opt.first_slot, view);
      return out;
    }
    const std::int64_t Bn = tokens.dim(0), T = tokens.dim(1), D = cfg_.emb_dim;
    if (pipelined()) {
      comm::Communicator* pc = groups_.pipeline;
      MAXTEXT_CHECK(pc != nullptr && pc->size() == cfg_.pipeline.stages && pc->rank() == cfg_.pipeline.stage, CommError,
                    "[pipeline] this model is stage ", cfg_.pipeline.stage, " of ", cfg_.pipeline.stages, ", but ",
                    pc ? "its pipeline group is " + pc->describe() : std::string("no pipeline group is set"),
                    " (set_comm_groups: rank s of the group is stage s)");
      // A stage split by heads or experts hands its logits and its replica check to the stage's ranks (groups_.stage):
      // a hand-made Groups without it would skip them (models::split_groups sets it).
      auto ranks_of = [](const comm::Communicator* c) { return c != nullptr ? c->size() : 1; };
      const int within = ranks_of(groups_.tensor) * ranks_of(groups_.expert);
      MAXTEXT_CHECK(within <= 1 || (groups_.stage != nullptr && groups_.stage->size() == within), CommError,
                    "[pipeline] stage ", cfg_.pipeline.stage, " is split over ", within, " ranks, but ",
                    groups_.stage ? "its stage group has " + std::to_string(groups_.stage->size()) + " ranks"
                                  : std::string("no stage group is set"),
                    " (set_comm_groups: Groups::stage holds the stage's ranks; models::split_groups makes it)");
    }
    StepSetup st = begin_step(tokens, cache, opt, layers_.size());
    layers::StepInfo& step = st.step;
    const std::int64_t n_media = st.n_media;
    View<std::int32_t, 1> ids_d = st.ids;
    layers::DecoderState<A, typename P::cache_t> dstate;
    dstate.caches = cache.layer_data();
    dstate.num_caches = cache.num_layers();
    dstate.local_cache = local_cache_;
    dstate.tokens = std::span<const std::int32_t>(tokens.data(), static_cast<std::size_t>(Bn * T));
    dstate.engram = engram_.get();
    layers::Context<P> ctx{be_, scratch_, step, opt.capture, &dstate};
    ctx.comm = groups_.tensor;
    ctx.expert_comm = groups_.expert;
    const std::int64_t M = Bn * T;
    View<A, 2> x = scratch_.template alloc<A, 2>({M, D});
    if (!first_stage()) {
      // A later pipeline stage: the residual stream arrives from the stage before its first layer; a picture's
      // tokens still need their bidirectional ranges here.
      if (n_media > 0) merge_media(opt, step, x, false);
      if (streams_ > 1) x = scratch_.template alloc<A, 2>({M, streams_ * D});
      return forward_layers(ctx, cache, st, opt, tokens, x, scratch_.template alloc<A, 2>({M, D}));
    }
    embed_.forward(ctx, params_.token_embedder, ids_d, x);
    ctx.sow(embed_name(), View<const A, 2>(x));
    if (n_media > 0) merge_media(opt, step, x);
    if constexpr (kPrelude) {
      if (prelude_.enabled()) {  // before position embeddings: Gemma 4's models have none
        View<A, 2> pli = prelude_.forward(ctx, params_.prelude, ids_d, View<const A, 2>(x));
        ctx.sow(scheme_ == NameScheme::hf ? std::string("model.per_layer_inputs") : "decoder." + std::string(PreludeT::name),
                View<const A, 2>(pli));
        dstate.per_layer_inputs = pli;
        dstate.per_layer_width = prelude_.width();
      }
    }
    if (cfg_.use_untrainable_positional_embedding) add_positional(ctx, params_.sinusoid, x);
    if (cfg_.trainable_position_size > 0) add_positional(ctx, params_.position_embedder.embedding, x);
    View<A, 2> embedded = x;
    if (streams_ > 1) {
      // decoders.py mhc_expand: k equal residual streams [M, k*D] through the layers, summed before the final norm.
      x = scratch_.template alloc<A, 2>({M, streams_ * D});
      for (std::int64_t s = 0; s < streams_; ++s) be_.copy(View<const A, 2>(embedded), x.narrow(1, s * D, D));
    }
    return forward_layers(ctx, cache, st, opt, tokens, x, embedded);
  }


  /// Full-sequence forward without a persistent cache (MaxText "train"/eval mode).
  Tensor<float, 3> forward(const Tensor<std::int32_t, 2>& tokens, const ForwardOptions& opt = {}) {
    MAXTEXT_CHECK(opt.first_slot < 0, ArgumentError, "[forward] first_slot names slots of a cache, and no cache was given");
    // The pass's own cache, gone after it: ordinary whatever the config says (a pool of pagedattn_num_pages is for
    // the caches that sequences keep).
    std::vector<layers::CacheSpec> specs;
    std::vector<layers::StateSpec> states;
    cache_specs(specs, states);
    KVCache<P> cache(be_, tokens.dim(0), tokens.dim(1), specs, states);
    return forward(tokens, cache, opt);
  }

  // ---- multi-token prediction (MaxText's MultiTokenPredictionBlock, multi_token_prediction.py) -----------------
  //
  // MTP layer k (1-based) takes, at each position t, the previous hidden state h_{k-1}(t) (the main model's raw
  // hidden state for k = 1: ForwardOptions::hidden_out) and the token t + k, and computes
  //   h_k(t) = TransformerLayer_k(W_k [RMSNorm_e(embed(token t + k)); RMSNorm_h(h_{k-1}(t))])
  // at position t, attending to its own cache of earlier positions; its logits are the model's output head (the
  // shared final norm and head) applied to h_k(t), a prediction of token t + k + 1.

  /// mtp_num_layers: the MTP layers this model holds (0: none).
  std::int64_t mtp_num_layers() const { return static_cast<std::int64_t>(mtp_layers_.size()); }

  /// A cache for one MTP layer (each layer keeps its own: in incremental use layer k runs k positions behind the main
  /// model, because it reads the token k places ahead).
  KVCache<P> make_mtp_cache(std::int64_t batch, std::int64_t capacity = 0) const {
    MAXTEXT_CHECK(!mtp_layers_.empty(), ConfigError, "[mtp] this model has no MTP layers (mtp_num_layers = 0)");
    if (capacity <= 0) capacity = cfg_.max_target_length;
    return KVCache<P>(be_, batch, capacity, {mtp_layers_[0].cache_spec()}, {layers::state_spec_of(mtp_layers_[0])});
  }

  /// MTP layer k over rows [B, T]: `prev_hidden` [B*T, D] is h_{k-1} of each row (host f32), `tokens` [B, T] the
  /// token k places after each row's position. Appends to `cache` (make_mtp_cache) as forward() appends to the
  /// model's cache; positions, row_lengths, last_only and capture as there, and ForwardOptions::hidden_out receives
  /// h_k (the next layer's prev_hidden). Returns the f32 logits of h_k. `hidden`: MtpHidden::normed passes h_{k-1}
  /// through the model's final norm first (llama.cpp's and vLLM's convention; MaxText's is raw).
  Tensor<float, 3> forward_mtp(std::int64_t k, const Tensor<float, 2>& prev_hidden, const Tensor<std::int32_t, 2>& tokens,
                               KVCache<P>& cache, const ForwardOptions& opt = {}, MtpHidden hidden = MtpHidden::raw) {
    MAXTEXT_CHECK(k >= 1 && k <= mtp_num_layers(), ArgumentError, "[mtp] layer ", k, " of a model with mtp_num_layers = ",
                  mtp_num_layers(), " (layers are numbered from 1)");
    const std::int64_t Bn = tokens.dim(0), T = tokens.dim(1), D = cfg_.emb_dim, M = Bn * T;
    MAXTEXT_CHECK(prev_hidden.dim(0) == M && prev_hidden.dim(1) == D, ArgumentError, "[mtp] prev_hidden is [",
                  prev_hidden.dim(0), ", ", prev_hidden.dim(1), "], [", M, ", ", D, "] expected (B*T rows of emb_dim)");
    MAXTEXT_CHECK(cache.num_layers() == 1, ArgumentError, "[mtp] the cache holds ", cache.num_layers(),
                  " layers: make it with make_mtp_cache");
    MAXTEXT_CHECK(opt.media_mask == nullptr && opt.media_embeddings == nullptr, UnsupportedError,
                  "[mtp] media input is not supported in the MTP layers");
    StepSetup st = begin_step(tokens, cache, opt, 1);
    layers::DecoderState<A, typename P::cache_t> dstate;
    dstate.caches = cache.layer_data();
    dstate.num_caches = cache.num_layers();
    dstate.tokens = std::span<const std::int32_t>(tokens.data(), static_cast<std::size_t>(M));
    layers::Context<P> ctx{be_, scratch_, st.step, opt.capture, &dstate};
    ctx.comm = groups_.tensor;
    ctx.expert_comm = groups_.expert;
    const MtpParams& mp = params_.mtp[static_cast<std::size_t>(k - 1)];
    const auto& info = mtp_layers_[static_cast<std::size_t>(k - 1)].info();
    View<A, 2> e = scratch_.template alloc<A, 2>({M, D});
    embed_.forward(ctx, params_.token_embedder, st.ids, e);
    View<A, 2> h = scratch_.template alloc<A, 2>({M, D});
    {
      std::vector<A> host(static_cast<std::size_t>(M * D));
      for (std::size_t i = 0; i < host.size(); ++i) host[i] = from_float<A>(prev_hidden.data()[i]);
      be_.synchronize();
      be_.copy(h.data(), host.data(), host.size() * sizeof(A), CopyKind::host_to_device);
      be_.synchronize();
    }
    if (hidden == MtpHidden::normed) {
      if constexpr (kFinalNorm == layers::FinalNorm::gpt3_layer_norm) {
        final_gpt3_.forward(ctx, params_.decoder_norm_gpt3, h, h);
      } else {
        final_rms_.forward(ctx, params_.decoder_norm_rms, h, h);
      }
    }
    mtp_norm_.forward(ctx, mp.embedding_norm, e, e);
    mtp_norm_.forward(ctx, mp.hidden_state_norm, h, h);
    View<A, 2> cat = scratch_.template alloc<A, 2>({M, 2 * D});
    be_.copy(View<const A, 2>(e), cat.narrow(1, 0, D));
    be_.copy(View<const A, 2>(h), cat.narrow(1, D, D));
    View<A, 2> x = scratch_.template alloc<A, 2>({M, D});
    mtp_proj_.forward(ctx, mp.projection, View<const A, 2>(cat), x);
    ctx.sow(info.name, "input", View<const A, 2>(x));
    ctx.where = &info.name;
    mtp_layers_[static_cast<std::size_t>(k - 1)].forward(ctx, mp.transformer_layer, cache.layer(0), x);
    if (opt.hidden_out != nullptr) copy_hidden(View<const A, 2>(x), *opt.hidden_out);
    Tensor<float, 3> out = output_head(ctx, x, Bn, T, st.row_len, opt, false, kMtpQwen3Next ? &mp.final_norm : nullptr);
    end_step(cache, st);
    return out;
  }

  /// What MaxText's model computes with its MTP block on a whole sequence: the main logits and, for k = 1..
  /// mtp_num_layers, MTP layer k's logits at every position t (a prediction of token t + k + 1). As MaxText's
  /// roll_and_mask, layer k reads token id 0 at the last k positions of each row (their logits predict nothing).
  struct MtpOutputs {
    Tensor<float, 3> logits;                  ///< [B, T, V]
    std::vector<Tensor<float, 3>> mtp_logits;  ///< mtp_num_layers x [B, T, V]
  };
  MtpOutputs forward_with_mtp(const Tensor<std::int32_t, 2>& tokens, const ForwardOptions& opt = {},
                              MtpHidden hidden = MtpHidden::raw) {
    MAXTEXT_CHECK(mtp_num_layers() > 0, ConfigError, "[mtp] this model has no MTP layers (mtp_num_layers = 0)");
    MAXTEXT_CHECK(opt.row_lengths == nullptr && !opt.last_only && opt.positions == nullptr, ArgumentError,
                  "[mtp] forward_with_mtp takes whole rows from position 0 (no row_lengths, last_only or positions)");
    const std::int64_t Bn = tokens.dim(0), T = tokens.dim(1);
    MtpOutputs out;
    Tensor<float, 2> h;
    ForwardOptions o = opt;
    o.hidden_out = &h;
    out.logits = forward(tokens, o);
    Tensor<std::int32_t, 2> rolled({Bn, T});
    for (std::int64_t i = 0; i < Bn * T; ++i) rolled.data()[i] = tokens.data()[i];
    for (std::int64_t k = 1; k <= mtp_num_layers(); ++k) {
      for (std::int64_t b = 0; b < Bn; ++b) {  // roll_and_mask: one place left, 0 at the end
        for (std::int64_t t = 0; t < T; ++t) rolled(b, t) = t + 1 < T ? rolled(b, t + 1) : 0;
      }
      KVCache<P> cache = make_mtp_cache(Bn, T);
      Tensor<float, 2> next;
      ForwardOptions ok = opt;
      ok.media_mask = nullptr;
      ok.media_embeddings = nullptr;
      ok.hidden_out = &next;
      out.mtp_logits.push_back(forward_mtp(k, h, rolled, cache, ok, hidden));
      h = std::move(next);
    }
    return out;
  }

  /// Names used for capture under the current scheme. Every name stands for a module's output (Flax's
  /// capture_intermediates convention): `token_embedder` / `model.embed_tokens` is the token lookup (before position
  /// embeddings), `<layer>.input` the residual stream entering a layer (token + position embeddings for the first),
  /// `<layer>` the residual stream after it, `<layer>.self_attention` / `<layer>.mlp` (HF: `.self_attn` / `.mlp`) those
  /// sub-modules' outputs before their residual add, `decoder.decoder_norm` / `model.norm` the final norm, and
  /// `logits` the output head in f32. Layers may offer finer names (see their forward()).
  std::string embed_name() const { return scheme_ == NameScheme::hf ? "model.embed_tokens" : "token_embedder"; }
  std::string norm_name() const { return scheme_ == NameScheme::hf ? "model.norm" : "decoder.decoder_norm"; }
  const layers::LayerInfo& layer_info(std::size_t i) const {
    return std::visit([](const auto& l) -> const layers::LayerInfo& { return l.info(); }, layers_.at(i));
  }
  std::size_t num_layers() const { return layers_.size(); }

 private:
  struct StepSetup {
    layers::StepInfo step;
    std::vector<std::int32_t> row_len;  ///< valid tokens per row
    View<std::int32_t, 1> ids;           ///< the tokens on the device
    std::int64_t n_media = 0;
    const Tensor<std::int32_t, 2>* segments = nullptr;  ///< the segment ids in effect
  };
  /// One pass's checks and step data (positions, segments, lengths), uploaded; the cache is untouched until the
  /// checks pass.
  /// `cache_layers`: the layers the cache must hold (the model's, or one for an MTP layer's cache).
  StepSetup begin_step(const Tensor<std::int32_t, 2>& tokens, KVCache<P>& cache, const ForwardOptions& opt,
                       std::size_t cache_layers) {
    const std::int64_t Bn = tokens.dim(0), T = tokens.dim(1), V = cfg_.vocab_size;
    StepSetup st;
    layers::StepInfo& step = st.step;
    std::vector<std::int32_t>& row_len = st.row_len;
    MAXTEXT_CHECK(opt.first_slot < 0, UnsupportedError, "[forward] ForwardOptions::first_slot is taken by forward() "
                  "only (a pass over some slots of a shared cache)");
    MAXTEXT_CHECK(Bn == cache.batch(), ArgumentError, "[forward] tokens have ", Bn, " rows, the cache has ", cache.batch(),
                  " slots");
    MAXTEXT_CHECK(T > 0, ArgumentError, "[forward] empty token sequence");
    MAXTEXT_CHECK(cache.num_layers() == cache_layers, ArgumentError, "[forward] cache was made for another model");
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int32_t id = tokens(b, t);
        MAXTEXT_CHECK(id >= 0 && id < V, ArgumentError, "[forward] token id ", id, " at [", b, ",", t,
                      "] is outside the vocabulary [0, ", V, ")");
      }
    }
    row_len.assign(static_cast<std::size_t>(Bn), static_cast<std::int32_t>(T));
    if (opt.row_lengths) {
      MAXTEXT_CHECK(static_cast<std::int64_t>(opt.row_lengths->size()) == Bn, ArgumentError,
                    "[forward] row_lengths has ", opt.row_lengths->size(), " entries for ", Bn, " rows");
      row_len = *opt.row_lengths;
      for (auto n : row_len) {
        MAXTEXT_CHECK(n >= 1 && n <= T, ArgumentError, "[forward] row length ", n, " outside [1, ", T, "]");
      }
    }
    check_shape_opt("positions", opt.positions, Bn, T);
    check_shape_opt("segment_ids", opt.segment_ids, Bn, T);
    if (opt.mrope_positions != nullptr) {
      const auto& mp = *opt.mrope_positions;
      MAXTEXT_CHECK(cfg_.use_mrope, UnsupportedError, "[forward] mrope_positions: decoder_block '", cfg_.decoder_block,
                    "' without use_mrope takes one position per token (ForwardOptions::positions)");
      MAXTEXT_CHECK(opt.positions == nullptr, ArgumentError, "[forward] positions and mrope_positions both given: "
                    "with 3-D positions the layers that take one position read the temporal row");
      MAXTEXT_CHECK(mp.dim(0) == 3 && mp.dim(1) == Bn && mp.dim(2) == T, ArgumentError, "[forward] mrope_positions has "
                    "shape ", mp.shape(), ", expected [3, ", Bn, ", ", T, "] (temporal, height, width)");
    }
    // A recurrent cache (Gated DeltaNet) takes no packed or padded segments; all-ones ids (MaxText dumps) say nothing
    // and are dropped. Checked before the cache is touched, so a refused call leaves it as it was.
    const Tensor<std::int32_t, 2>* seg_ids = opt.segment_ids;
    if (seg_ids && cache.recurrent()) {
      for (std::int64_t i = 0; i < Bn * T; ++i) {
        MAXTEXT_CHECK(seg_ids->data()[i] == 1, UnsupportedError, "[forward] segment id ", seg_ids->data()[i], " at [",
                      i / T, ",", i % T, "]: the recurrent (Gated DeltaNet) layers of this model take no packed or "
                      "padded segments (right padding: row_lengths)");
      }
      seg_ids = nullptr;
    }

    st.n_media = check_media(opt, Bn, T, row_len, seg_ids);

    scratch_.reset();
    step.batch = Bn;
    step.length = T;
    step.start = cache.lengths();
    for (std::int64_t b = 0; b < Bn; ++b) {
      MAXTEXT_CHECK(step.start[static_cast<std::size_t>(b)] + T <= cache.capacity(), ArgumentError, "[forward] row ", b,
                    " holds ", step.start[static_cast<std::size_t>(b)], " tokens; ", T, " more exceed the cache capacity ",
                    cache.capacity());
    }
    // The rows each layer writes this pass (a paged cache maps their pages; a DeepSeek-V4 compressor writes its
    // pooled blocks at block indices, before the step's first token).
    for (std::int64_t b = 0; b < Bn; ++b) {
      const std::int64_t s0 = step.start[static_cast<std::size_t>(b)];
      cache.prepare_write(b, write_floor(s0), s0 + T);
    }
    // Host-side step data, then one upload each.
    std::vector<std::int32_t> pos(static_cast<std::size_t>(Bn * T)), kv_len(static_cast<std::size_t>(Bn));
    const std::int64_t max_pos = max_positions();
    for (std::int64_t b = 0; b < Bn; ++b) {
      kv_len[static_cast<std::size_t>(b)] = step.start[static_cast<std::size_t>(b)] + static_cast<std::int32_t>(T);
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int32_t p = opt.positions          ? (*opt.positions)(b, t)
                               : opt.mrope_positions  ? (*opt.mrope_positions)(0, b, t)
                                                      : step.start[static_cast<std::size_t>(b)] + static_cast<std::int32_t>(t);
        MAXTEXT_CHECK(p >= 0 && (max_pos <= 0 || p < max_pos), ArgumentError, "[forward] position ", p, " at [", b, ",", t,
                      "]: expected 0 <= position", max_pos > 0 ? " < " + std::to_string(max_pos) : std::string());
        pos[static_cast<std::size_t>(b * T + t)] = p;
        for (std::int64_t r = 1; opt.mrope_positions != nullptr && r < 3; ++r) {
          const std::int32_t q = (*opt.mrope_positions)(r, b, t);
          MAXTEXT_CHECK(q >= 0 && (max_pos <= 0 || q < max_pos), ArgumentError, "[forward] mrope_positions ",
                        r == 1 ? "height" : "width", " position ", q, " at [", b, ",", t, "]: expected 0 <= position",
                        max_pos > 0 ? " < " + std::to_string(max_pos) : std::string());
        }
      }
    }
    if (opt.mrope_positions != nullptr) {
      step.mrope_positions.assign(opt.mrope_positions->data(), opt.mrope_positions->data() + 3 * Bn * T);
    }
    st.ids = to_device<1>(tokens.data(), {Bn * T});
    step.positions = to_device<1>(pos.data(), {Bn * T});
    step.q_start = to_device<1>(step.start.data(), {Bn});
    step.kv_len = to_device<1>(kv_len.data(), {Bn});
    step.host_positions = std::move(pos);
    if (opt.row_lengths) {
      step.valid = row_len;
      step.valid_len = to_device<1>(step.valid.data(), {Bn});
    }
    if (seg_ids || cache.has_segments()) {
      std::vector<std::int32_t> seg(static_cast<std::size_t>(Bn * T), 1);  // decoding tokens are "active" (1)
      if (seg_ids) {
        for (std::int64_t i = 0; i < Bn * T; ++i) seg[static_cast<std::size_t>(i)] = seg_ids->data()[i];
      }
      View<std::int32_t, 2> seg_d = to_device<2>(seg.data(), {Bn, T});
      for (std::int64_t b = 0; b < Bn; ++b) {
        View<std::int32_t, 1> dst = cache.segments().view()[b].narrow(0, step.start[static_cast<std::size_t>(b)], T);
        be_.copy(View<const std::int32_t, 1>(seg_d[b]), dst);
      }
      cache.mark_segments();
      step.segment_ids = seg_d;
      step.kv_segment_ids = cache.segments().cview();
    }

    st.segments = seg_ids;
    return st;
  }
  /// The first cache row a pass starting at token s0 writes: s0, or earlier for a layer that says so
  /// (cache_write_floor: DeepSeek-V4's pooled blocks).
  std::int64_t write_floor(std::int64_t s0) const {
    std::int64_t f = s0;
    for (const auto& l : layers_) {
      std::visit([&](const auto& x) {
        if constexpr (requires { x.cache_write_floor(s0); }) f = std::min<std::int64_t>(f, x.cache_write_floor(s0));
      }, l);
    }
    return f;
  }
  void cache_specs(std::vector<layers::CacheSpec>& specs, std::vector<layers::StateSpec>& states) const {
    for (const auto& l : layers_) {
      specs.push_back(std::visit([](const auto& x) { return x.cache_spec(); }, l));
      states.push_back(std::visit([](const auto& x) { return layers::state_spec_of(x); }, l));
    }
  }
  /// Each row's cache advanced by its valid tokens.
  void end_step(KVCache<P>& cache, const StepSetup& s) {
    for (std::size_t b = 0; b < s.row_len.size(); ++b) {
      cache.set_length(static_cast<std::int64_t>(b), s.step.start[b] + s.row_len[b]);
    }
  }
  /// forward()'s decoder layers and output head over the residual stream x (and `embedded`, [M, D], which the
  /// hyper-connection streams collapse into). A pipeline stage receives x before a layer whose predecessor another
  /// stage holds and sends it on after a layer whose successor another stage holds; the last stage's logits (and
  /// hidden states) reach every stage by one broadcast.
  Tensor<float, 3> forward_layers(layers::Context<P>& ctx, KVCache<P>& cache, StepSetup& st, const ForwardOptions& opt,
                                  const Tensor<std::int32_t, 2>& tokens, View<A, 2> x, View<A, 2> embedded) {
    const std::int64_t Bn = tokens.dim(0), T = tokens.dim(1);
    const std::vector<std::int32_t>& row_len = st.row_len;
    const std::int64_t L = cfg_.num_decoder_layers, stage = cfg_.pipeline.stage;
    try {
      for (std::size_t i = 0; i < layers_.size(); ++i) {
        const std::int64_t g = global_[i];
        if (pipelined() && g > 0 && cfg_.pipeline_owner(g - 1) != stage) {
          pipe_transfer(x, cfg_.pipeline_owner(g - 1), false, layer_info(i).name);
        }
        if (opt.capture != nullptr) ctx.sow(layer_info(i).name, "input", View<const A, 2>(x));  // residual entering layer i
        ctx.where = &layer_info(i).name;
        std::visit(
            [&](const auto& layer) {
              using LT = std::decay_t<decltype(layer)>;
              layer.forward(ctx, std::get<typename LT::Params>(params_.layers[i]), cache.layer(i), x);
            },
            layers_[i]);
        if (st.n_media > 0 && g < opt.media_embeddings->dim(1) / cfg_.emb_dim - 1) add_deepstack(opt, g, x);
        if (replica_check_) check_replicas(View<const A, 2>(x), layer_info(i).name);
        if (pipelined() && g + 1 < L && cfg_.pipeline_owner(g + 1) != stage) {
          pipe_transfer(x, cfg_.pipeline_owner(g + 1), true, layer_info(i).name);
        }
      }
    } catch (...) {
      // Some recurrent layers may already have advanced their states past the cache length: restart those rows
      // (length 0) rather than leave states that no later step could continue.
      if (cache.recurrent()) {
        for (std::int64_t b = 0; b < Bn; ++b) cache.set_length(b, 0);
      }
      throw;
    }
    if (!last_stage()) return pipeline_outputs(Bn, T, st, opt, cache);
    if (streams_ > 1) {
      if constexpr (kStreamHead) {
        stream_head_.forward(ctx, params_.stream_head, View<const A, 2>(x), embedded);
        ctx.sow("decoder." + std::string(StreamHeadT::name), View<const A, 2>(embedded));
      } else {
        be_.stream_sum(View<const A, 2>(x), View<const A, 2>(), embedded);  // mhc_reduce
      }
      x = embedded;
    }
    if (opt.hidden_out != nullptr) copy_hidden(View<const A, 2>(x), *opt.hidden_out);
    Tensor<float, 3> out = output_head(ctx, x, Bn, T, row_len, opt);
    if (pipelined() && opt.hidden_out != nullptr) {
      groups_.pipeline->broadcast(opt.hidden_out->data(), static_cast<std::size_t>(opt.hidden_out->size()) * sizeof(float),
                                  static_cast<int>(stage), "hidden states (pipeline)");
    }
    end_step(cache, st);
    return out;
  }
  /// A pipeline stage before the last: the logits (and hidden states) the last stage broadcasts.
  Tensor<float, 3> pipeline_outputs(std::int64_t Bn, std::int64_t T, const StepSetup& st, const ForwardOptions& opt,
                                    KVCache<P>& cache) {
    const int root = static_cast<int>(cfg_.pipeline_owner(cfg_.num_decoder_layers - 1));
    Tensor<float, 3> out({Bn, opt.last_only ? 1 : T, cfg_.vocab_size});
    groups_.pipeline->broadcast(out.data(), static_cast<std::size_t>(out.size()) * sizeof(float), root, "logits");
    if (opt.hidden_out != nullptr) {
      *opt.hidden_out = Tensor<float, 2>({Bn * T, cfg_.emb_dim});
      groups_.pipeline->broadcast(opt.hidden_out->data(), static_cast<std::size_t>(opt.hidden_out->size()) * sizeof(float),
                                  root, "hidden states (pipeline)");
    }
    if (opt.capture && opt.capture->wants("logits")) {
      opt.capture->put("logits", AnyTensor::from(Tensor<float, 3>(out.view(), out.holder())));
    }
    end_step(cache, st);
    return out;
  }
  /// The residual stream x (contiguous [M, W]) sent to pipeline stage `peer` after layer `layer`, or received from it
  /// before; through host memory.
  void pipe_transfer(View<A, 2> x, std::int64_t peer, bool send, const std::string& layer) {
    const std::size_t bytes = static_cast<std::size_t>(x.dim(0) * x.dim(1)) * sizeof(A);
    pipe_buf_.resize(static_cast<std::size_t>(x.dim(0) * x.dim(1)));
    const std::string what = layer + (send ? ": send to pipeline stage " : ": recv from pipeline stage ") +
                             std::to_string(peer);
    be_.synchronize();
    if (send) {
      be_.copy(pipe_buf_.data(), x.data(), bytes, CopyKind::device_to_host);
      be_.synchronize();
      groups_.pipeline->send(pipe_buf_.data(), bytes, static_cast<int>(peer), what);
    } else {
      groups_.pipeline->recv(pipe_buf_.data(), bytes, static_cast<int>(peer), what);
      be_.copy(x.data(), pipe_buf_.data(), bytes, CopyKind::host_to_device);
      be_.synchronize();
    }
  }
  /// x (device, activation type) into a host f32 [rows, D] tensor: exact for every activation type.
  void copy_hidden(View<const A, 2> x, Tensor<float, 2>& out) {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    std::vector<A> host(static_cast<std::size_t>(M * D));
    be_.synchronize();
    be_.copy(host.data(), x.data(), host.size() * sizeof(A), CopyKind::device_to_host);
    be_.synchronize();
    out = Tensor<float, 2>({M, D});
    for (std::size_t i = 0; i < host.size(); ++i) out.data()[i] = to_float(host[i]);
  }
  /// decoders.py apply_output_head: the final norm over x (in place) and the head, on every row or on each row's last
  /// valid token (last_only); f32 logits on the host, rank 0's on every rank of a split model.
  /// `norm`: the final norm's scale in place of the decoder's (a Qwen3-Next MTP layer's own; an RMSNorm of the
  /// decoder's form).
  Tensor<float, 3> output_head(const layers::Context<P>& ctx, View<A, 2> x, std::int64_t Bn, std::int64_t T,
                               const std::vector<std::int32_t>& row_len, const ForwardOptions& opt, bool main = true,
                               const typename layers::RMSNorm<P>::Params* norm = nullptr) {
    const std::int64_t M = Bn * T, V = cfg_.vocab_size, D = cfg_.emb_dim;
    if constexpr (kFinalNorm == layers::FinalNorm::gpt3_layer_norm) {
      (void)norm;
      final_gpt3_.forward(ctx, params_.decoder_norm_gpt3, x, x);
    } else {
      final_rms_.forward(ctx, norm != nullptr ? *norm : params_.decoder_norm_rms, x, x);
    }
    if (main) ctx.sow(norm_name(), View<const A, 2>(x));

    // Output head on all rows or on each row's last valid token.
    View<const A, 2> h = x;
    std::int64_t rows = M;
    if (opt.last_only) {
      View<A, 2> last = scratch_.template alloc<A, 2>({Bn, D});
      for (std::int64_t b = 0; b < Bn; ++b) {
        const std::int64_t r = b * T + row_len[static_cast<std::size_t>(b)] - 1;
        be_.copy(View<const A, 1>(x[r]), last[b]);
      }
      h = last;
      rows = Bn;
    }
    const std::int64_t shards = cfg_.logits_via_embedding ? 1 : cfg_.head_shards, Vl = V / shards;
    View<float, 2> logits = scratch_.template alloc<float, 2>({rows, Vl});
    compute_logits(ctx, h, logits);
    Tensor<float, 3> out({Bn, opt.last_only ? 1 : T, V});
    if (shards > 1) {
      // The head split by vocabulary (tensor_parallel_config): each rank's [rows, V / N] columns, gathered into
      // [rows, V] in rank order; every rank then holds the same bytes.
      comm::Communicator* tp = groups_.tensor;
      MAXTEXT_CHECK(tp != nullptr && tp->size() == shards, CommError, "[model] the output head holds 1/", shards,
                    " of the vocabulary (head_shards) but ", tp ? "the tensor-parallel group has " : "no tensor-parallel ",
                    tp ? std::to_string(tp->size()) + " ranks" : std::string("communicator is set"));
      std::vector<float> local(static_cast<std::size_t>(rows * Vl));
      be_.copy(local.data(), logits.data(), local.size() * sizeof(float), CopyKind::device_to_host);
      be_.synchronize();
      comm::all_gather_columns(*tp, local.data(), rows, Vl, out.data(), "logits (vocabulary split)");
      // Tensor x expert: each expert coordinate's tensor group gathered its own copy, after reductions in other
      // communicators. The first one's on every rank, so that all of them sample alike whatever order those took.
      comm::Communicator* ep = groups_.expert;
      if (ep != nullptr && ep != tp && ep->size() > 1) {
        ep->broadcast(out.data(), static_cast<std::size_t>(rows * V) * sizeof(float), 0, "logits (expert ranks)");
      }
    } else {
      be_.copy(out.data(), logits.data(), static_cast<std::size_t>(rows * V) * sizeof(float), CopyKind::device_to_host);
      be_.synchronize();
      // Split: rank 0's logits (of the stage's ranks, the last stage's) on every rank, so that all of them sample the
      // same token whatever order a reduction took.
      comm::Communicator* same = pipelined() ? groups_.stage : groups_.world;
      if (same != nullptr && same->size() > 1) {
        same->broadcast(out.data(), static_cast<std::size_t>(rows * V) * sizeof(float), 0, "logits");
      }
    }
    // A pipeline's last stage hands its logits to the stages before it (pipeline_outputs), each of its ranks to
    // the ranks of its tensor coordinate.
    if (pipelined()) {
      groups_.pipeline->broadcast(out.data(), static_cast<std::size_t>(rows * V) * sizeof(float),
                                  static_cast<int>(cfg_.pipeline.stage), "logits");
    }
    if (main && opt.capture && opt.capture->wants("logits")) {
      opt.capture->put("logits", AnyTensor::from(Tensor<float, 3>(out.view(), out.holder())));
    }
    return out;
  }
  template <class L>
  layers::LayerInfo layer_info(std::int64_t global, std::int64_t local, bool dense) const {
    layers::LayerInfo info;
    info.index = global;
    if (scheme_ == NameScheme::hf) {
      info.name = "model.layers." + std::to_string(global);
      info.attention = info.name + ".self_attn";
      info.mlp = info.name + "." + detail::hf_mlp_name<L>();
    } else {
      info.name = "decoder." + layer_prefix(local, dense);
      info.attention = info.name + "." + detail::attention_name<L>();
      info.mlp = info.name + "." + detail::mlp_name<L>();
    }
    return info;
  }
  /// MTP layer k's names: MaxText's mtp_block.mtp_layer_{k}.mtp_{k}_transformer_layer, or under the HF scheme the
  /// layer the checkpoints store it as (DeepSeek-V3: model.layers.{num_decoder_layers + k - 1}; Qwen3-Next:
  /// mtp.layers.{k - 1}). Index -1, as MaxText builds it (no layer_idx).
  layers::LayerInfo mtp_layer_info(std::int64_t k) const {
    layers::LayerInfo info;
    info.index = -1;
    if (scheme_ == NameScheme::hf) {
      info.name = kMtpQwen3Next ? "mtp.layers." + std::to_string(k - 1)
                                : "model.layers." + std::to_string(cfg_.num_decoder_layers + k - 1);
      info.attention = info.name + ".self_attn";
      info.mlp = info.name + "." + detail::hf_mlp_name<MtpL>();
    } else {
      info.name = "mtp_block.mtp_layer_" + std::to_string(k) + ".mtp_" + std::to_string(k) + "_transformer_layer";
      info.attention = info.name + "." + detail::attention_name<MtpL>();
      info.mlp = info.name + "." + detail::mlp_name<MtpL>();
    }
    return info;
  }
  std::string layer_prefix(std::int64_t local, bool dense) const {
    if constexpr (kTwoKinds) return (dense ? "dense_layers_" : "moe_layers_") + std::to_string(local);
    (void)dense;
    return "layers_" + std::to_string(local);
  }
  std::string param_prefix(std::size_t i) const {
    const std::int64_t n_dense = kTwoKinds ? cfg_.first_num_dense_layers : cfg_.num_decoder_layers;
    const std::int64_t gi = global_[i];
    return gi < n_dense ? layer_prefix(gi, true) : layer_prefix(gi - n_dense, false);
  }
  void rename_layers() {
    // Layers keep their LayerInfo; rebuild them with the new scheme.
    const std::int64_t n_dense = kTwoKinds ? cfg_.first_num_dense_layers : cfg_.num_decoder_layers;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::int64_t gi = global_[i];
      if (layers_[i].index() == 0) {
        layers_[i].template emplace<0>(cfg_, layer_info<DenseL>(gi, gi, true));
      } else {
        if constexpr (kTwoKinds) layers_[i].template emplace<1>(cfg_, layer_info<MoeL>(gi, gi - n_dense, false));
      }
    }
    for (std::size_t k = 0; k < mtp_layers_.size(); ++k) {
      mtp_layers_[k] = MtpL(cfg_, mtp_layer_info(static_cast<std::int64_t>(k) + 1));
    }
  }
  /// Checks ForwardOptions' media input against the step; returns the number of marked tokens (0: none given).
  std::int64_t check_media(const ForwardOptions& opt, std::int64_t Bn, std::int64_t T,
                           const std::vector<std::int32_t>& row_len, const Tensor<std::int32_t, 2>* seg) const {
    if (opt.media_mask == nullptr && opt.media_embeddings == nullptr) return 0;
    MAXTEXT_CHECK(opt.media_mask != nullptr && opt.media_embeddings != nullptr, ArgumentError,
                  "[forward] media_mask and media_embeddings go together (one was given without the other)");
    if constexpr (kMedia == layers::MediaMerge::none) {
      MAXTEXT_THROW(UnsupportedError, "[forward] decoder_block '", cfg_.decoder_block,
                    "' takes no media embeddings (MaxText merges them for gemma3, gemma4 and llama4)");
    } else {
      return check_media_rows(opt, Bn, T, row_len, seg);
    }
  }
  std::int64_t check_media_rows(const ForwardOptions& opt, std::int64_t Bn, std::int64_t T,
                                const std::vector<std::int32_t>& row_len, const Tensor<std::int32_t, 2>* seg) const {
    if constexpr (kPrelude) {
      MAXTEXT_CHECK(!prelude_.enabled(), UnsupportedError, "[forward] media embeddings with per-layer inputs (",
                    PreludeT::name, ") are not supported");
    }
    MAXTEXT_CHECK(engram_ == nullptr, UnsupportedError, "[forward] media embeddings with Engram layers are not supported");
    check_shape_opt("media_mask", opt.media_mask, Bn, T);
    const Tensor<float, 2>& e = *opt.media_embeddings;
    const std::int64_t D = cfg_.emb_dim, deep = e.dim(1) / D - 1;
    MAXTEXT_CHECK(e.dim(1) % D == 0 && deep >= 0, ArgumentError, "[forward] media_embeddings are [", e.dim(0), ", ",
                  e.dim(1), "], rows of emb_dim ", D, " expected (or (1 + k) x emb_dim with k deepstack features)");
    MAXTEXT_CHECK(deep <= cfg_.num_decoder_layers, ArgumentError, "[forward] media_embeddings carry ", deep,
                  " deepstack features for ", cfg_.num_decoder_layers, " decoder layers");
    MAXTEXT_CHECK(deep == 0 || streams_ == 1, UnsupportedError, "[forward] deepstack features with mHC's residual "
                  "streams (mhc_expansion_rate ", streams_, ") are not supported");
    // MaxText builds 3-D positions for every multimodal prompt of a use_mrope model (decode.py get_rope_index):
    // pictures at text positions would run silently differently.
    bool marked = false;
    for (std::int64_t i = 0; i < opt.media_mask->size() && !marked; ++i) marked = opt.media_mask->data()[i] != 0;
    MAXTEXT_CHECK(!cfg_.use_mrope || !marked || opt.mrope_positions != nullptr, ArgumentError, "[forward] media on a "
                  "use_mrope model need MRoPE's 3-D positions (ForwardOptions::mrope_positions; models::qwen3_rope_index "
                  "makes them): its pictures' tokens do not sit at text positions");
    const auto& m = *opt.media_mask;
    std::int64_t n = 0;
    for (std::int64_t b = 0; b < Bn; ++b) {
      const std::int64_t len = row_len[static_cast<std::size_t>(b)];
      for (std::int64_t t = 0; t < T; ++t) {
        if (m(b, t) == 0) continue;
        MAXTEXT_CHECK(t < len, ArgumentError, "[forward] media_mask marks [", b, ",", t, "], in row ", b,
                      "'s right padding (row length ", len, ")");
        ++n;
        const bool run_start = t == 0 || m(b, t - 1) == 0;
        if (kMedia == layers::MediaMerge::bidirectional) {
          MAXTEXT_CHECK(t + 1 < len, ArgumentError, "[forward] media_mask: the picture marked at [", b, ",", t,
                        "] reaches the end of row ", b, "'s tokens in this pass; its tokens attend to each other, so a "
                        "picture must end within one forward pass (split prompts between pictures, not inside one)");
          MAXTEXT_CHECK(run_start || seg == nullptr || (*seg)(b, t) == (*seg)(b, t - 1), ArgumentError,
                        "[forward] media_mask: the picture marked at [", b, ",", t, "] spans two segments");
        }
      }
    }
    MAXTEXT_CHECK(n == e.dim(0), ArgumentError, "[forward] media_mask marks ", n, " tokens, media_embeddings has ", e.dim(0),
                  " rows");
    return n;
  }
  /// The marked rows of x replaced by media_embeddings (converted to A on the host, one copy per run of rows), and
  /// for bidirectional media each picture's cache range given to its queries.
  /// `rows` false (a later pipeline stage): the ranges only.
  void merge_media(const ForwardOptions& opt, layers::StepInfo& step, View<A, 2> x, bool rows_too = true) {
    const auto& m = *opt.media_mask;
    const Tensor<float, 2>& e = *opt.media_embeddings;
    const std::int64_t Bn = step.batch, T = step.length, D = cfg_.emb_dim, W = e.dim(1);
    std::vector<A> rows(static_cast<std::size_t>(e.dim(0) * D));  // the soft tokens' columns (deepstack after them)
    for (std::int64_t r = 0; r < e.dim(0); ++r) {
      for (std::int64_t c = 0; c < D; ++c) rows[static_cast<std::size_t>(r * D + c)] = from_float<A>(e.data()[r * W + c]);
    }
    std::vector<std::int32_t> begin, end;
    if (kMedia == layers::MediaMerge::bidirectional) {
      begin.assign(static_cast<std::size_t>(Bn * T), 0);
      end.assign(static_cast<std::size_t>(Bn * T), 0);
    }
    std::int64_t k = 0;
    for (std::int64_t b = 0; b < Bn; ++b) {
      for (std::int64_t t = 0; t < T;) {
        if (m(b, t) == 0) {
          ++t;
          continue;
        }
        std::int64_t t1 = t;
        while (t1 < T && m(b, t1) != 0) ++t1;
        const std::int64_t n = t1 - t;
        if (rows_too) {
          be_.synchronize();
          be_.copy(x[b * T + t].data(), rows.data() + k * D, static_cast<std::size_t>(n * D) * sizeof(A),
                   CopyKind::host_to_device);
        }
        if (!begin.empty()) {
          const std::int32_t s0 = step.start[static_cast<std::size_t>(b)];
          for (std::int64_t i = t; i < t1; ++i) {
            begin[static_cast<std::size_t>(b * T + i)] = s0 + static_cast<std::int32_t>(t);
            end[static_cast<std::size_t>(b * T + i)] = s0 + static_cast<std::int32_t>(t1);
          }
        }
        k += n;
        t = t1;
      }
    }
    be_.synchronize();
    if (!begin.empty()) {
      step.bidir_begin = to_device<2>(begin.data(), {Bn, T});
      step.bidir_end = to_device<2>(end.data(), {Bn, T});
    }
  }
  /// decoders.py deepstack_process after decoder layer j: x += the soft tokens' deepstack features j at the marked
  /// rows (zero elsewhere), in the activation type.
  void add_deepstack(const ForwardOptions& opt, std::int64_t j, View<A, 2> x) {
    const auto& m = *opt.media_mask;
    const Tensor<float, 2>& e = *opt.media_embeddings;
    const std::int64_t M = x.dim(0), D = cfg_.emb_dim, W = e.dim(1);
    std::vector<A> host(static_cast<std::size_t>(M * D), from_float<A>(0.0f));
    std::int64_t k = 0;
    for (std::int64_t r = 0; r < M; ++r) {
      if (m.data()[r] == 0) continue;
      for (std::int64_t c = 0; c < D; ++c) {
        host[static_cast<std::size_t>(r * D + c)] = from_float<A>(e.data()[k * W + (1 + j) * D + c]);
      }
      ++k;
    }
    ScratchScope scope(scratch_);
    View<A, 2> d = scratch_.template alloc<A, 2>({M, D});
    be_.synchronize();
    be_.copy(d.data(), host.data(), host.size() * sizeof(A), CopyKind::host_to_device);
    be_.add(View<const A, 2>(x), View<const A, 2>(d), x);
    be_.synchronize();
  }
  std::int64_t max_positions() const {
    if (cfg_.trainable_position_size > 0) return cfg_.trainable_position_size;
    if (cfg_.use_untrainable_positional_embedding) return cfg_.max_target_length;  // the sinusoid table's rows
    return 0;  // rotary layers check their own tables
  }
  static void check_shape_opt(const char* what, const Tensor<std::int32_t, 2>* t, std::int64_t b, std::int64_t n) {
    if (!t) return;
    MAXTEXT_CHECK(t->dim(0) == b && t->dim(1) == n, ArgumentError, "[forward] ", what, " has shape ", t->shape(),
                  ", tokens are [", b, ",", n, "]");
  }
  template <int R>
  View<std::int32_t, R> to_device(const std::int32_t* host, const Shape<R>& shape) {
    View<std::int32_t, R> d = scratch_.template alloc<std::int32_t, R>(shape);
    be_.copy(d.data(), host, static_cast<std::size_t>(numel<R>(shape)) * sizeof(std::int32_t), CopyKind::host_to_device);
    return d;
  }
  /// x += table[positions] (rounded to the activation type).
  template <class TW>
  void add_positional(const layers::Context<P>& ctx, const Matrix<TW>& table, View<A, 2> x) {
    ScratchScope s(scratch_);
    View<A, 2> pe = scratch_.template alloc<A, 2>({x.dim(0), x.dim(1)});
    be_.embed(table, ctx.step.positions, pe);
    be_.add(View<const A, 2>(x), View<const A, 2>(pe), x);
  }
  /// set_replica_check: the residual stream's bytes hashed on every rank that holds it and compared with the first's.
  void check_replicas(View<const A, 2> x, const std::string& layer) {
    // The ranks holding this stream: the stage's (a mesh with pipeline stages), else every rank.
    comm::Communicator* w = groups_.stage != nullptr ? groups_.stage : pipelined() ? nullptr : groups_.world;
    if (w == nullptr || w->size() <= 1) return;
    const auto n = static_cast<std::size_t>(x.dim(0) * x.dim(1));
    std::vector<A> host(n);
    be_.synchronize();
    for (std::int64_t r = 0; r < x.dim(0); ++r) {
      be_.copy(host.data() + r * x.dim(1), x[r].data(), static_cast<std::size_t>(x.dim(1)) * sizeof(A),
               CopyKind::device_to_host);
    }
    be_.synchronize();
    std::uint64_t h = 1469598103934665603ull;
    const auto* b = reinterpret_cast<const unsigned char*>(host.data());
    for (std::size_t i = 0; i < n * sizeof(A); ++i) h = (h ^ b[i]) * 1099511628211ull;
    std::vector<std::uint64_t> all(static_cast<std::size_t>(w->size()));
    w->all_gather(&h, sizeof h, all.data(), layer + ": replica check");
    std::string differ;
    for (std::size_t r = 1; r < all.size(); ++r) {
      if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    }
    MAXTEXT_CHECK(differ.empty(), CommError, "[comm] the residual stream after ", layer, " differs on rank(s) ", differ,
                  " from rank 0's (the ranks hold it replicated: a collective gave them different sums)");
  }

  void compute_logits(const layers::Context<P>& ctx, View<const A, 2> h, View<float, 2> out) {
    ScratchScope s(scratch_);
    const std::int64_t rows = h.dim(0), V = out.dim(1);  // this rank's columns of a vocabulary-split head
    const Matrix<W>& head = cfg_.logits_via_embedding ? params_.attend_table : params_.logits_dense.kernel;
    if (cfg_.logits_dot_in_fp32 || std::is_same_v<A, float>) {
      be_.matmul(h, head, out);
      post_logits(out);
    } else {
      View<A, 2> la = scratch_.template alloc<A, 2>({rows, V});
      be_.matmul(h, head, la);
      post_logits(la);
      be_.convert(View<const A, 2>(la), out);
    }
    (void)ctx;
  }
  template <class Y>
  void post_logits(View<Y, 2> l) {
    if (!cfg_.logits_via_embedding) return;  // the soft cap exists only on the tied path
    if (cfg_.normalize_embedding_logits) be_.scale(l, std::sqrt(static_cast<float>(cfg_.emb_dim)), true);
    if (cfg_.final_logits_soft_cap != 0.0) be_.soft_cap(l, static_cast<float>(cfg_.final_logits_soft_cap));
  }
  void finish_params() {
    if (cfg_.logits_via_embedding && last_stage()) {
      Matrix<W>& t = params_.attend_table;
      // A rounded copy (f32 / fp16 tables) keeps only its panels, as every copied matrix does (prepare_loaded); a
      // table that needs no rounding is the embedding itself and keeps its rows.
      t = layers::prepare_loaded(be_, layers::bf16_rounded_copy(be_, params_.token_embedder.embedding));
    }
    if (cfg_.use_untrainable_positional_embedding && first_stage()) {
      Tensor<float, 2> t = layers::sinusoidal_table(cfg_.max_target_length, cfg_.base_emb_dim);
      MAXTEXT_CHECK(cfg_.base_emb_dim == cfg_.emb_dim, UnsupportedError,
                    "[PositionalEmbedding] sinusoidal positions use base_emb_dim (", cfg_.base_emb_dim,
                    ") which differs from emb_dim (", cfg_.emb_dim, ")");
      Matrix<float> m;
      m.rows = t.dim(0);
      m.cols = t.dim(1);
      m.data = layers::upload(be_, t);
      params_.sinusoid = m;
    }
  }

  // ---- pipeline parallelism (Config::pipeline; models/parallel.hpp pipeline_parallel_config) --------------------
  bool pipelined() const { return cfg_.pipeline.stages > 1; }
  /// Whether this model runs the embedding (it holds decoder layer 0) and the output head (the last layer).
  bool first_stage() const { return !pipelined() || cfg_.pipeline_owner(0) == cfg_.pipeline.stage; }
  bool last_stage() const {
    return !pipelined() || cfg_.pipeline_owner(cfg_.num_decoder_layers - 1) == cfg_.pipeline.stage;
  }
  /// The token table: the first stage looks tokens up, the last reads it as a tied output head.
  bool holds_embedding() const { return first_stage() || (cfg_.logits_via_embedding && last_stage()); }
  /// What a pipeline stage cannot run, refused by name (before the layers are built).
  void check_pipeline() const {
    const auto& pp = cfg_.pipeline;
    MAXTEXT_CHECK(pp.stage >= 0 && pp.stage < pp.stages && pp.stages <= cfg_.num_decoder_layers && pp.chunk >= 0,
                  ConfigError, "[pipeline] stage ", pp.stage, " of ", pp.stages, " (chunks of ", pp.chunk,
                  " layers) for num_decoder_layers = ", cfg_.num_decoder_layers, ": every stage needs a layer");
    MAXTEXT_CHECK(cfg_.mtp_num_layers == 0, UnsupportedError, "[pipeline] mtp_num_layers = ", cfg_.mtp_num_layers,
                  ": MTP layers are not split across pipeline stages (ici_pipeline_parallelism)");
    if constexpr (kPrelude) {
      MAXTEXT_CHECK(!prelude_.enabled(), UnsupportedError, "[pipeline] ", PreludeT::name, ": the per-layer inputs "
                    "(hidden_size_per_layer_input) are not split across pipeline stages (ici_pipeline_parallelism)");
    }
  }
  /// A layer that reads another layer's cache (Gemma 4's KV-shared layers) must find it on its own stage.
  void check_pipeline_layers() const {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      std::visit([&](const auto& l) {
        if constexpr (requires { l.kv_donor(); }) {
          const std::int64_t d = l.kv_donor();
          MAXTEXT_CHECK(d < 0 || cfg_.pipeline_owner(d) == cfg_.pipeline.stage, UnsupportedError, "[pipeline] layer ",
                        global_[i], " reads the keys and values of layer ", d, ", which pipeline stage ",
                        cfg_.pipeline_owner(d), " holds (stage ", cfg_.pipeline.stage, " holds layer ", global_[i],
                        "); choose num_layers_per_pipeline_stage so that KV-shared layers stay with their donors");
        }
      }, layers_[i]);
    }
  }

  Config cfg_;
  B be_;
  NameScheme scheme_;
  Scratch scratch_;
  std::int64_t streams_ = 1;  ///< mhc_expansion_rate
  comm::Groups groups_;          ///< the ranks this model is split over (set_comm_groups), or none
  bool replica_check_ = false;   ///< set_replica_check
  std::shared_ptr<const layers::EngramHashing> engram_;  ///< the Engram layers' token table (set_engram_vocab)
  layers::Embed<P> embed_, pos_embed_;
  PreludeT prelude_;
  StreamHeadT stream_head_;
  layers::RMSNorm<P> final_rms_;
  layers::Gpt3LayerNorm<P> final_gpt3_;
  layers::DenseGeneral<P> logits_;
  std::vector<LayerVariant> layers_;
  std::vector<std::int64_t> global_;       ///< layers_[i]'s decoder layer index (i, but for a pipeline stage)
  std::vector<std::int32_t> local_cache_;  ///< a pipeline stage: decoder layer -> its index in layers_, or -1
  std::vector<A> pipe_buf_;                ///< a pipeline stage's residual stream on its way through host memory
  layers::RMSNorm<P> mtp_norm_;       ///< the MTP layers' two norms (their scales are per layer)
  layers::DenseGeneral<P> mtp_proj_;  ///< the MTP layers' projection [2D, D]
  std::vector<MtpL> mtp_layers_;
  Params params_;
};

}  // namespace maxtext::models
