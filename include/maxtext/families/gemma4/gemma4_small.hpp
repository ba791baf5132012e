// families/gemma4/gemma4_small.hpp: MaxText models/gemma4_small.py (Gemma 4 E2B / E4B, text part; read at MaxText e591f30):
// Gemma4SmallPLE, Gemma4SmallDecoderLayer and the KV-sharing rules, with decoders.py _apply_gemma4_small_layers.
//
// Per-layer inputs (PLE; decoder.per_layer_embedder, run once after the token embedding x):
//   identity = embed_tokens_per_layer[ids] * sqrt(Dp)                       [B*T, L*Dp]  (each product in dtype)
//   context  = RMSNorm_Dp((x @ per_layer_model_projection) * emb_dim^-0.5)   per layer's Dp columns
//   ple      = (identity + context) * 2^-0.5;  layer i reads columns [i*Dp, (i+1)*Dp)
//
// Layer i (attention type by GEMMA4_E2B_ATTENTION_PATTERN for model_name gemma4-e2b: 4 sliding then 1 global;
// otherwise the E4B pattern, 5 then 1):
//   a   = RMSNorm_post_attn(Attention(RMSNorm_pre(x)));  h = x + a
//   m   = RMSNorm_post_ffw(MlpBlock(RMSNorm_pre_ffw(h))); h = h + m
//   h   = h + RMSNorm_post_ple(per_layer_projection(gelu(per_layer_input_gate(h)) * ple_i))   (with PLE)
//   out = h * layer_scalar
// Attention as gemma4.py's (qk norms with scale, v norm, no query scalar, global layers with global_head_dim /
// global_num_kv_heads and global_rope_proportion partial RoPE) but without K = V. KV sharing: the last
// num_kv_shared_layers layers have no key/value projections or norms; each attends over the keys and values of the
// last earlier layer of its attention type (its donor), which this library reads from the donor's cache slot (the
// donor has written this step's rows before the shared layer runs), so shared layers keep no cache of their own.
// With use_double_wide_mlp (E2B) the shared layers' MLP is 2 * mlp_dim wide.
//
// Parameters are MaxText's folded Gemma form (norm scales as used, the token embedding already times sqrt(D)).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// gemma4_small.get_attention_pattern: 5 for model_name gemma4-e2b, 6 (E4B, and any other name) otherwise.
inline std::int64_t gemma4_small_pattern_length(const Config& c) { return c.model_name == "gemma4-e2b" ? 5 : 6; }

/// gemma4_small.get_attention_type: global for the last layer of each pattern period.
inline AttentionType gemma4_small_attention_type(const Config& c, std::int64_t layer_index) {
  const std::int64_t n = gemma4_small_pattern_length(c);
  return layer_index % n == n - 1 ? AttentionType::global : AttentionType::local_sliding;
}

/// gemma4_small.kv_donor_layer_idx: the layer whose keys and values layer i reuses, or -1 when i has its own
/// (the last num_kv_shared_layers layers share, each with the last earlier non-shared layer of its attention type).
inline std::int64_t gemma4_small_kv_donor(const Config& c, std::int64_t i) {
  if (c.num_kv_shared_layers <= 0) return -1;
  const std::int64_t first = std::max<std::int64_t>(0, c.num_decoder_layers - c.num_kv_shared_layers);
  if (!(i >= first && first > 0)) return -1;
  const AttentionType type = gemma4_small_attention_type(c, i);
  for (std::int64_t j = first - 1; j >= 0; --j) {
    if (gemma4_small_attention_type(c, j) == type) return j;
  }
  MAXTEXT_THROW(ConfigError, "[Gemma4SmallDecoderLayer] layer ", i, " is KV-shared (num_kv_shared_layers = ",
                c.num_kv_shared_layers, ") but no earlier non-shared layer has its attention type (",
                type == AttentionType::global ? "global" : "local_sliding", ") to take keys and values from");
}

/// MaxText Gemma4SmallPLE: the [B*T, L * Dp] per-layer inputs (see the file comment). The decoder-level Prelude of
/// Gemma4SmallDecoderLayer (models::Transformer runs it once per forward pass); a no-op without PLE.
template <TensorPolicy P>
class Gemma4SmallPLE {
 public:
  using A = typename P::act_t;
  using W = typename P::weight_t;
  static constexpr const char* name = "per_layer_embedder";
  struct Params {
    Matrix<W> embed_tokens_per_layer;  ///< [vocab_size_per_layer_input, L * Dp]
    typename DenseGeneral<P>::Params per_layer_model_projection;
    typename RMSNorm<P>::Params per_layer_projection_norm;
  };

  Gemma4SmallPLE() = default;
  explicit Gemma4SmallPLE(const Config& c)
      : L_(c.num_decoder_layers), Dp_(c.hidden_size_per_layer_input), Vp_(c.vocab_size_per_layer_input), D_(c.emb_dim) {
    if (!enabled()) return;
    MAXTEXT_CHECK(Vp_ >= c.vocab_size, ConfigError, "[Gemma4SmallPLE] vocab_size_per_layer_input (", Vp_,
                  ") must cover vocab_size (", c.vocab_size, "): every token id indexes the per-layer table");
    proj_ = DenseGeneral<P>({{D_}, {L_ * Dp_}, false});
    norm_ = RMSNorm<P>({Dp_, static_cast<float>(c.normalization_layer_epsilon)});
  }
  /// Whether the model has per-layer inputs (hidden_size_per_layer_input and vocab_size_per_layer_input > 0).
  bool enabled() const { return Dp_ > 0 && Vp_ > 0; }
  /// Dp, the width of one layer's input.
  std::int64_t width() const { return Dp_; }

  template <class V>
  void visit(V& v, Params& p) const {
    v.table("embed_tokens_per_layer", p.embed_tokens_per_layer, Vp_, L_ * Dp_,
            {{}, Init::normal, std::pow(static_cast<double>(Dp_), -0.5)});
    visit_child(v, "per_layer_model_projection", proj_, p.per_layer_model_projection);
    visit_child(v, "per_layer_projection_norm", norm_, p.per_layer_projection_norm);
  }

  /// ids [B*T] (range-checked by the caller against vocab_size <= vocab_size_per_layer_input), x [B*T, D] the
  /// token embedding -> [B*T, L * Dp], allocated from ctx.scratch (it lives until the caller's scope ends).
  View<A, 2> forward(const Context<P>& ctx, const Params& p, View<const std::int32_t, 1> ids, View<const A, 2> x) const {
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0), LD = L_ * Dp_;
    View<A, 2> out = ctx.scratch.template alloc<A, 2>({M, LD});
    be.embed(p.embed_tokens_per_layer, ids, out);
    be.scale(out, static_cast<float>(std::sqrt(static_cast<double>(Dp_))));  // embed_scale, in dtype
    {
      ScratchScope scope(ctx.scratch);
      View<A, 2> context = ctx.scratch.template alloc<A, 2>({M, LD});
      proj_.forward(ctx, p.per_layer_model_projection, x, context);
      be.scale(context, static_cast<float>(std::pow(static_cast<double>(D_), -0.5)));  // proj_scale, in dtype
      View<A, 2> per_layer(context.data(), {M * L_, Dp_});
      norm_.forward(ctx, p.per_layer_projection_norm, per_layer, per_layer);
      be.add(View<const A, 2>(out), View<const A, 2>(context), out);
    }
    be.scale(out, static_cast<float>(std::pow(2.0, -0.5)));  // inv_sqrt2, in dtype
    return out;
  }

 private:
  std::int64_t L_ = 0, Dp_ = 0, Vp_ = 0, D_ = 0;
  DenseGeneral<P> proj_;
  RMSNorm<P> norm_;
};

/// MaxText Gemma4SmallDecoderLayer (decoder_block "gemma4_small").
template <TensorPolicy P>
class Gemma4SmallDecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "gemma4_small";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  using Prelude = Gemma4SmallPLE<P>;
  struct Params {
    typename RMSNorm<P>::Params pre_self_attention_norm, post_self_attention_norm, pre_ffw_norm, post_ffw_norm;
    typename Attention<P>::Params self_attention;
    typename MlpBlock<P>::Params mlp;
    typename DenseGeneral<P>::Params per_layer_input_gate, per_layer_projection;
    typename RMSNorm<P>::Params post_per_layer_input_norm;
    Tensor<A, 1> layer_scalar;  ///< [1]
  };

  Gemma4SmallDecoderLayer() = default;
  Gemma4SmallDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        donor_(gemma4_small_kv_donor(c, info_.index)),
        ple_(c.hidden_size_per_layer_input > 0 && c.vocab_size_per_layer_input > 0),
        norm_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon)}),
        attn_(c, attention_args(c, info_.index)) {
    auto mc = detail::block_mlp<P>(c).config();
    if (donor_ >= 0 && c.use_double_wide_mlp) mc.intermediate_dim *= 2;  // E2B: wider MLP on KV-shared layers
    mlp_ = MlpBlock<P>(mc);
    if (ple_) {
      const std::int64_t Dp = c.hidden_size_per_layer_input;
      gate_ = DenseGeneral<P>({{c.emb_dim}, {Dp}, false});
      proj_ = DenseGeneral<P>({{Dp}, {c.emb_dim}, false});
    }
  }

  /// What gemma4_small.py passes to Attention for layer `i` (see the file comment).
  static AttentionArgs attention_args(const Config& c, std::int64_t i) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.attention_type = gemma4_small_attention_type(c, i);
    a.sliding_window_size = c.sliding_window_size;
    a.attn_logits_soft_cap = c.attn_logits_soft_cap;
    a.use_qk_norm = true;
    a.use_v_norm = true;
    a.query_pre_attn_scalar = 1.0;
    a.share_kv_layer = gemma4_small_kv_donor(c, i) >= 0;
    if (a.attention_type == AttentionType::global) {
      if (c.global_num_kv_heads > 0) a.num_kv_heads = c.global_num_kv_heads;
      if (c.global_head_dim > 0) a.head_dim = c.global_head_dim;
      a.partial_rotary_factor = c.global_rope_proportion;
      a.rope_max_timescale = c.global_rope_max_timescale > 0 ? c.global_rope_max_timescale : c.rope_max_timescale;
    } else {
      a.partial_rotary_factor = c.local_rope_proportion;
      a.rope_max_timescale = c.local_rope_max_timescale > 0 ? c.local_rope_max_timescale : c.rope_max_timescale;
    }
    return a;
  }

  /// Keys and values of its own, or none on a KV-shared layer (it reads its donor's).
  CacheSpec cache_spec() const { return attn_.cache_spec(); }
  const LayerInfo& info() const { return info_; }
  const Attention<P>& attention() const { return attn_; }
  /// The layer whose keys and values this one attends over, or -1.
  std::int64_t kv_donor() const { return donor_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "pre_self_attention_norm", norm_, p.pre_self_attention_norm);
    visit_child(v, "post_self_attention_norm", norm_, p.post_self_attention_norm);
    visit_child(v, "pre_ffw_norm", norm_, p.pre_ffw_norm);
    visit_child(v, "post_ffw_norm", norm_, p.post_ffw_norm);
    visit_child(v, "self_attention", attn_, p.self_attention);
    visit_child(v, "mlp", mlp_, p.mlp);
    if (ple_) {
      visit_child(v, "per_layer_input_gate", gate_, p.per_layer_input_gate);
      visit_child(v, "per_layer_projection", proj_, p.per_layer_projection);
      visit_child(v, "post_per_layer_input_norm", norm_, p.post_per_layer_input_norm);
    }
    v.vector("layer_scalar", p.layer_scalar, {{1}, Init::ones});
  }

  /// x [B*T, D] in place. Needs the decoder's state (models::Transformer) for its per-layer input and, on a
  /// KV-shared layer, its donor's cache. Captures the attention and MLP outputs (before their post norms) and the
  /// layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x) const {
    MAXTEXT_CHECK(ctx.decoder != nullptr || (donor_ < 0 && !ple_), ArgumentError, "[Gemma4SmallDecoderLayer] layer ",
                  info_.index, " reads ", donor_ >= 0 ? "the keys and values of layer " + std::to_string(donor_) : "",
                  donor_ >= 0 && ple_ ? " and " : "", ple_ ? "its per-layer input" : "",
                  ": run it inside models::Transformer, which provides them");
    ScratchScope scope(ctx.scratch);
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    norm_.forward(ctx, p.pre_self_attention_norm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    attn_.forward(ctx, p.self_attention, lnx, donor_ >= 0 ? ctx.decoder->cache(donor_) : cache, a);
    ctx.sow(info_.attention, View<const A, 2>(a));
    norm_.forward(ctx, p.post_self_attention_norm, a, a);
    be.add(View<const A, 2>(a), View<const A, 2>(x), x);
    norm_.forward(ctx, p.pre_ffw_norm, x, lnx);
    mlp_.forward(ctx, p.mlp, lnx, a);
    ctx.sow(info_.mlp, View<const A, 2>(a));
    norm_.forward(ctx, p.post_ffw_norm, a, a);
    be.add(View<const A, 2>(a), View<const A, 2>(x), x);
    if (ple_) {
      View<const A, 2> pin = ctx.decoder->per_layer_input(info_.index);
      View<A, 2> g = ctx.scratch.template alloc<A, 2>({M, pin.dim(1)});
      gate_.forward(ctx, p.per_layer_input_gate, x, g);
      // gelu in f32, cast to dtype, times the per-layer input in dtype
      be.activation(View<const A, 2>(g), Activation::gelu, pin, Activation::linear, g);
      proj_.forward(ctx, p.per_layer_projection, g, a);
      norm_.forward(ctx, p.post_per_layer_input_norm, a, a);
      be.add(View<const A, 2>(a), View<const A, 2>(x), x);
    }
    // * layer_scalar: the [1] parameter read on the device, broadcast to every row (row stride 0)
    be.scale_rows(x, View<const A, 2>(p.layer_scalar.data(), {M, 1}, {0, 1}), Activation::linear);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  std::int64_t donor_ = -1;
  bool ple_ = false;
  RMSNorm<P> norm_;  ///< every emb_dim norm of the layer (emb_dim, epsilon)
  Attention<P> attn_;
  MlpBlock<P> mlp_;
  DenseGeneral<P> gate_, proj_;
};

}  // namespace maxtext::layers
