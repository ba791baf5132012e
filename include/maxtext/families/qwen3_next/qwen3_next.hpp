// families/qwen3_next/qwen3_next.hpp: MaxText models/qwen3.py Qwen3NextDecoderLayer (decoder_block "qwen3_next", Qwen3-Next):
// a hybrid of Gated DeltaNet and gated full attention, MoE with a sigmoid-gated shared expert in every layer;
// configs/models/qwen3-next-80b-a3b.yml. Read from MaxText e591f30 (qwen3.py Qwen3NextGatedDeltaNet,
// Qwen3NextSparseMoeBlock, Qwen3NextDecoderLayer; attentions.py is_qwen3_hybrid; normalizations.py).
//
//   h   = x + Mix_i(RMSNorm1p(x))          input_layernorm, then `attention`
//   out = h + MoE(RMSNorm1p(h))            post_attention_layernorm, then `mlp`
//
// RMSNorm1p is Qwen3NextRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w). Layer i mixes tokens with full attention when
// (i + 1) % inhomogeneous_layer_cycle_interval == 0 (parameters `attention.attention.*`; the gated attention of
// layers/attentions.hpp: query [D, N, 2H] with a per-head gate, (1 + w) qk norms, partial RoPE, q * head_dim^-0.5,
// o * sigmoid(gate), out [N*H, D]) and with the Gated DeltaNet otherwise (parameters `attention.*`):
//   qkvz = x in_proj_qkvz, split per key-head group into q [Dk], k [Dk], v [r*Dv], z [r*Dv] (r = Hv / Hk);
//   ba = x in_proj_ba, per key-head group b [r], a [r];
//   [q | k | v] (all key heads' q, then k, then v) -> depthwise causal conv1d (gdn_conv_kernel_dim taps) + SiLU;
//   the gated delta rule (backend gated_delta_rule: L2-normalised q, k; beta = sigmoid(b);
//   g = -exp(A_log) softplus(a + dt_bias)) on a [Dk, Dv] state per value head;
//   y = RMSNorm(o over Dv) * norm.rms_norm.scale * silu(z);  out = y out_proj.
// The delta rule runs token by token (MaxText's chunked prefill computes the same recurrence in another order;
// docs/numerics.md); the cache keeps per sequence the recurrent state [Hv, Dk, Dv] and the conv state (the last
// Kc - 1 pre-conv rows), so a decode step costs the same at any context length.
// The MoE: RoutedMoE `routed_experts` (top-k of the raw logits, softmax over the k, norm_topk_prob) plus
// sigmoid(x shared_expert_gate) * SwiGLU `shared_expert` (hidden moe_mlp_dim).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/layer_info.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// qwen3.py: layer `i` (0-based) of a qwen3_next stack uses full attention (else the Gated DeltaNet).
inline bool qwen3_next_is_full_attention(std::int64_t i, std::int64_t cycle_interval) {
  return cycle_interval > 0 && (i + 1) % cycle_interval == 0;
}

/// MaxText Qwen3NextGatedDeltaNet: x [B*T, D] -> y [B*T, D], continuing and updating the layer's recurrent and conv
/// states in the cache.
template <TensorPolicy P>
class Qwen3NextGatedDeltaNet {
 public:
  using A = typename P::act_t;
  struct Params {
    typename DenseGeneral<P>::Params in_proj_qkvz, in_proj_ba, out_proj;
    Tensor<A, 1> conv1d;               ///< conv1d.kernel [Kc, 1, conv_dim], flat (tap i of channel c at i*conv_dim + c)
    Tensor<float, 1> A_log, dt_bias;   ///< [Hv], f32
    typename RMSNorm<P>::Params norm;  ///< norm.rms_norm.scale [Dv] (plain scale)
  };

  Qwen3NextGatedDeltaNet() = default;
  explicit Qwen3NextGatedDeltaNet(const Config& c)
      : D_(c.emb_dim), Kc_(c.gdn_conv_kernel_dim) {
    sh_.key_heads = c.gdn_num_key_heads;
    sh_.value_heads = c.gdn_num_value_heads;
    sh_.key_dim = c.gdn_key_head_dim;
    sh_.value_dim = c.gdn_value_head_dim;
    MAXTEXT_CHECK(sh_.key_heads >= 1 && sh_.value_heads % sh_.key_heads == 0 && sh_.key_dim >= 1 && sh_.value_dim >= 1 &&
                      Kc_ >= 1,
                  ConfigError, "[Qwen3NextGatedDeltaNet] gdn_num_value_heads (", sh_.value_heads,
                  ") must be a multiple of gdn_num_key_heads (", sh_.key_heads,
                  ") and the head dims and gdn_conv_kernel_dim >= 1");
    r_ = sh_.value_heads / sh_.key_heads;
    kd_ = sh_.key_heads * sh_.key_dim;
    vd_ = sh_.value_heads * sh_.value_dim;
    conv_dim_ = 2 * kd_ + vd_;
    qkvz_ = DenseGeneral<P>({{D_}, {2 * kd_ + 2 * vd_}});
    ba_ = DenseGeneral<P>({{D_}, {2 * sh_.value_heads}});
    out_ = DenseGeneral<P>({{vd_}, {D_}});
    norm_ = RMSNorm<P>({sh_.value_dim, static_cast<float>(c.normalization_layer_epsilon), true, 0.0f});
  }

  const GdnShape& shape() const { return sh_; }
  std::int64_t conv_dim() const { return conv_dim_; }
  /// Per sequence: the recurrent state [Hv * Dk * Dv] and the conv state [(Kc - 1) * conv_dim] (f32).
  StateSpec state_spec() const { return {sh_.state_width(), (Kc_ - 1) * conv_dim_}; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "in_proj_qkvz", qkvz_, p.in_proj_qkvz);
    visit_child(v, "in_proj_ba", ba_, p.in_proj_ba);
    {
      Scope<V> s(v, "conv1d");
      v.vector("kernel", p.conv1d, {{Kc_, 1, conv_dim_}, Init::normal, 1.0 / std::sqrt(static_cast<double>(Kc_))});
    }
    // Seeded initialisation: A = 1 (A_log 0) and dt_bias 1, a mid-range decay (checkpoints carry the trained values).
    v.vector("A_log", p.A_log, {{sh_.value_heads}, Init::zeros});
    v.vector("dt_bias", p.dt_bias, {{sh_.value_heads}, Init::ones});
    {
      Scope<V> s(v, "norm");
      visit_child(v, "rms_norm", norm_, p.norm);
    }
    visit_child(v, "out_proj", out_, p.out_proj);
  }

  /// x [B*T, D] -> y [B*T, D] (y must not alias x). `name` captures the delta rule's output as `<name>.core`
  /// [B, T, Hv, Dv] when requested.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, CacheFor<P>& cache, View<A, 2> y,
               const std::string& name = {}) const {
    const auto& st = ctx.step;
    const std::int64_t M = x.dim(0), Bn = st.batch, Hv = sh_.value_heads, Dk = sh_.key_dim, Dv = sh_.value_dim;
    MAXTEXT_CHECK(x.dim(1) == D_ && y.dim(1) == D_ && M == st.tokens() && y.dim(0) == M, ShapeError,
                  "[Qwen3NextGatedDeltaNet] ", M, " rows of ", x.dim(1), " features for a step of ", Bn, " x ", st.length,
                  " tokens of emb_dim ", D_);
    MAXTEXT_CHECK(cache.states.size() == 2 && cache.states[0].dim(0) == Bn && cache.states[0].dim(1) == sh_.state_width() &&
                      cache.states[1].dim(1) == (Kc_ - 1) * conv_dim_ &&
                      static_cast<std::int64_t>(cache.state_tokens.size()) == Bn,
                  ShapeError, "[Qwen3NextGatedDeltaNet] the cache was made for another layer: expected a recurrent "
                  "state of ", sh_.state_width(), " and a conv state of ", (Kc_ - 1) * conv_dim_, " floats per sequence");
    MAXTEXT_CHECK(st.segment_ids.empty(), UnsupportedError, "[Qwen3NextGatedDeltaNet] segment ids (packed or padded "
                  "sequences) are not supported by the Gated DeltaNet layers; right padding goes through row lengths");
    for (std::int64_t b = 0; b < Bn; ++b) {
      const std::int32_t s0 = st.start[static_cast<std::size_t>(b)];
      MAXTEXT_CHECK(s0 == 0 || cache.state_tokens[static_cast<std::size_t>(b)] == s0, ArgumentError,
                    "[Qwen3NextGatedDeltaNet] row ", b, " continues at cache length ", s0, " but its recurrent state "
                    "summarises ", cache.state_tokens[static_cast<std::size_t>(b)], " tokens: a Gated DeltaNet cache "
                    "cannot go back to an earlier length (restart the row at length 0)");
    }
    ScratchScope scope(ctx.scratch);
    // 1. fused projections
    const std::int64_t gw = 2 * Dk + 2 * r_ * Dv;  // one key-head group of in_proj_qkvz
    View<A, 2> qkvz = ctx.scratch.template alloc<A, 2>({M, 2 * kd_ + 2 * vd_});
    qkvz_.forward(ctx, p.in_proj_qkvz, x, qkvz);
    View<A, 2> ba = ctx.scratch.template alloc<A, 2>({M, 2 * Hv});
    ba_.forward(ctx, p.in_proj_ba, x, ba);
    // 2. regroup: conv input [q heads | k heads | v heads], z [Hv*Dv], b [Hv], a [Hv]
    View<A, 2> qkv = ctx.scratch.template alloc<A, 2>({M, conv_dim_});
    View<A, 2> z = ctx.scratch.template alloc<A, 2>({M, vd_});
    View<A, 2> bb = ctx.scratch.template alloc<A, 2>({M, Hv});
    View<A, 2> aa = ctx.scratch.template alloc<A, 2>({M, Hv});
    const auto cols = [&](View<A, 2> t, std::int64_t c0, std::int64_t w) {
      return View<A, 2>(t.data() + c0, {M, w}, {t.stride(0), 1});
    };
    // One strided copy per part, all key-head groups at once: [M, Hk, w] from columns s0 + g * group of `src` to
    // columns d0 + g * w of `dst`.
    const auto regroup = [&](View<A, 2> src, std::int64_t s0, std::int64_t group, View<A, 2> dst, std::int64_t d0,
                             std::int64_t w) {
      ctx.be.copy(View<const A, 3>(src.data() + s0, {M, sh_.key_heads, w}, {src.stride(0), group, 1}),
                  View<A, 3>(dst.data() + d0, {M, sh_.key_heads, w}, {dst.stride(0), w, 1}));
    };
    regroup(qkvz, 0, gw, qkv, 0, Dk);
    regroup(qkvz, Dk, gw, qkv, kd_, Dk);
    regroup(qkvz, 2 * Dk, gw, qkv, 2 * kd_, r_ * Dv);
    regroup(qkvz, 2 * Dk + r_ * Dv, gw, z, 0, r_ * Dv);
    regroup(ba, 0, 2 * r_, bb, 0, r_);
    regroup(ba, r_, 2 * r_, aa, 0, r_);
    // 3. causal depthwise conv + SiLU (continues the cached conv state)
    View<A, 2> conv = ctx.scratch.template alloc<A, 2>({M, conv_dim_});
    ctx.be.causal_conv1d(View<const A, 2>(qkv), p.conv1d.cview(), st.q_start, st.valid_len, cache.states[1].view(), conv);
    // 4-5. the gated delta rule on the recurrent state
    View<A, 2> o = ctx.scratch.template alloc<A, 2>({M, vd_});
    ctx.be.gated_delta_rule(View<const A, 2>(cols(conv, 0, kd_)), View<const A, 2>(cols(conv, kd_, kd_)),
                            View<const A, 2>(cols(conv, 2 * kd_, vd_)), View<const A, 2>(aa), View<const A, 2>(bb),
                            p.A_log.cview(), p.dt_bias.cview(), sh_, st.q_start, st.valid_len, cache.states[0].view(), o);
    if (!name.empty()) ctx.sow(name, "core", View<const A, 2>(o), {st.batch, st.length, Hv, Dv});
    // 6. gated RMSNorm per value head (plain scale), times silu(z); out projection
    View<A, 2> oh(o.data(), {M * Hv, Dv});
    norm_.forward(ctx, p.norm, View<const A, 2>(oh), oh);
    ctx.be.activation(View<const A, 2>(o), Activation::linear, View<const A, 2>(z), Activation::silu, o);
    out_.forward(ctx, p.out_proj, View<const A, 2>(o), y);
    for (std::int64_t b = 0; b < Bn; ++b) {
      const auto i = static_cast<std::size_t>(b);
      cache.state_tokens[i] = st.start[i] + (st.valid.empty() ? static_cast<std::int32_t>(st.length) : st.valid[i]);
    }
  }

 private:
  std::int64_t D_ = 0, Kc_ = 1, r_ = 1, kd_ = 0, vd_ = 0, conv_dim_ = 0;
  GdnShape sh_;
  DenseGeneral<P> qkvz_, ba_, out_;
  RMSNorm<P> norm_;
};

/// MaxText Qwen3NextSparseMoeBlock: RoutedMoE `routed_experts` + sigmoid(x shared_expert_gate) * `shared_expert`.
template <TensorPolicy P>
class Qwen3NextSparseMoe {
 public:
  using A = typename P::act_t;
  struct Params {
    typename RoutedMoE<P>::Params routed_experts;
    typename MlpBlock<P>::Params shared_expert;
    typename DenseGeneral<P>::Params shared_expert_gate;
  };

  Qwen3NextSparseMoe() = default;
  explicit Qwen3NextSparseMoe(const Config& c)
      : routed_(RoutedMoE<P>::settings(c, c.moe_mlp_dim)),
        shared_(typename MlpBlock<P>::Config{c.emb_dim, c.moe_mlp_dim, parse_activations(c.mlp_activations), false, false,
                                             NormKind::rms, static_cast<float>(c.normalization_layer_epsilon), false,
                                             c.activations_in_float32, Init::truncated_normal, c.dense_init_scale}),
        gate_({{c.emb_dim}, {1}}) {}

  const RoutedMoE<P>& routed() const { return routed_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "routed_experts", routed_, p.routed_experts);
    visit_child(v, "shared_expert", shared_, p.shared_expert);
    visit_child(v, "shared_expert_gate", gate_, p.shared_expert_gate);
  }

  /// x [B*T, D] -> y [B*T, D] (y must not alias x): routed + round(sigmoid(gate)) * shared, each op in dtype.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y, MoeMetrics* metrics = nullptr) const {
    routed_.forward(ctx, p.routed_experts, x, y, metrics);
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0);
    View<A, 2> s = ctx.scratch.template alloc<A, 2>({M, x.dim(1)});
    shared_.forward(ctx, p.shared_expert, x, s);
    View<A, 2> g = ctx.scratch.template alloc<A, 2>({M, 1});
    gate_.forward(ctx, p.shared_expert_gate, x, g);
    ctx.be.scale_rows(s, View<const A, 2>(g), Activation::sigmoid);  // on the device: no host round trip
    ctx.be.add(View<const A, 2>(y), View<const A, 2>(s), y);
  }

 private:
  RoutedMoE<P> routed_;
  MlpBlock<P> shared_;
  DenseGeneral<P> gate_;
};

/// MaxText Qwen3NextDecoderLayer (decoder_block "qwen3_next").
template <TensorPolicy P>
class Qwen3NextDecoderLayer {
 public:
  static constexpr const char* decoder_block_name = "qwen3_next";  ///< its line in core/decoder_blocks.hpp
  using A = typename P::act_t;
  static constexpr FinalNorm final_norm = FinalNorm::rms_offset_one;  ///< decoders.py: Qwen3NextRMSNorm
  /// Qwen3.5's pictures: soft tokens merged, attending as text, at MRoPE's 3-D positions (ForwardOptions).
  static constexpr MediaMerge media_merge = MediaMerge::causal;
  /// The token mixer's parameter and capture name (both kinds).
  static constexpr const char* attention_name = "attention";
  /// The multi-token prediction layers are Qwen3-Next's own (vLLM qwen3_next_mtp.py / qwen3_5_mtp.py; MaxText builds
  /// none for this block): (1 + w) input norms, a full-attention layer, and a final norm of their own (models::Transformer).
  static constexpr bool mtp_qwen3_next = true;
  struct Params {
    typename RMSNorm<P>::Params input_layernorm;
    typename Qwen3NextGatedDeltaNet<P>::Params gdn;  ///< Gated DeltaNet layers: `attention.*`
    typename Attention<P>::Params attention;         ///< full-attention layers: `attention.attention.*`
    typename RMSNorm<P>::Params post_attention_layernorm;
    typename Qwen3NextSparseMoe<P>::Params mlp;
  };

  Qwen3NextDecoderLayer() = default;
  Qwen3NextDecoderLayer(const Config& c, LayerInfo info)
      : info_(std::move(info)),
        // An MTP layer (index -1) is a full-attention layer, as vLLM's Qwen3NextMultiTokenPredictor builds it.
        full_(info_.index < 0 || qwen3_next_is_full_attention(info_.index, c.inhomogeneous_layer_cycle_interval)),
        pre_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon), true, 1.0f}),
        post_({c.emb_dim, static_cast<float>(c.normalization_layer_epsilon), true, 1.0f}),
        moe_(c) {
    if (full_) {
      attn_ = Attention<P>(c, attention_args(c));
    } else {
      gdn_ = Qwen3NextGatedDeltaNet<P>(c);
    }
  }

  /// What qwen3.py passes to the full attention: config heads, f32 flags, q * head_dim^-0.5, the partial RoPE factor.
  static AttentionArgs attention_args(const Config& c) {
    AttentionArgs a = AttentionArgs::basic(c);
    a.query_pre_attn_scalar = std::pow(static_cast<double>(c.head_dim), -0.5);
    a.partial_rotary_factor = c.partial_rotary_factor;
    a.qwen3_next_gated = true;  // attentions.py is_qwen3_hybrid
    return a;
  }

  bool is_full_attention() const { return full_; }
  const LayerInfo& info() const { return info_; }
  CacheSpec cache_spec() const { return full_ ? attn_.cache_spec() : CacheSpec{}; }
  StateSpec state_spec() const { return full_ ? StateSpec{} : gdn_.state_spec(); }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "input_layernorm", pre_, p.input_layernorm);
    if (full_) {
      Scope<V> s(v, "attention");
      visit_child(v, "attention", attn_, p.attention);
    } else {
      visit_child(v, "attention", gdn_, p.gdn);
    }
    visit_child(v, "post_attention_layernorm", post_, p.post_attention_layernorm);
    visit_child(v, "mlp", moe_, p.mlp);
  }

  /// x [B*T, D] in place. Captures the token mixer's output (`<layer>.attention`; Gated DeltaNet layers also
  /// `<layer>.attention.core`, the delta rule's output [B, T, Hv, Dv]), the MoE's (`<layer>.mlp`, with its routing
  /// metrics) and the layer output.
  void forward(const Context<P>& ctx, const Params& p, CacheFor<P>& cache, View<A, 2> x,
               MoeMetrics* metrics = nullptr) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    View<A, 2> lnx = ctx.scratch.template alloc<A, 2>({M, D});
    pre_.forward(ctx, p.input_layernorm, x, lnx);
    View<A, 2> a = ctx.scratch.template alloc<A, 2>({M, D});
    if (full_) {
      attn_.forward(ctx, p.attention, lnx, cache, a);
    } else {
      gdn_.forward(ctx, p.gdn, lnx, cache, a, ctx.capture ? info_.attention : std::string());
    }
    ctx.sow(info_.attention, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(x), View<const A, 2>(a), x);
    post_.forward(ctx, p.post_attention_layernorm, x, lnx);
    MoeMetrics local;
    MoeMetrics* mt = metrics ? metrics : (ctx.capture ? &local : nullptr);
    moe_.forward(ctx, p.mlp, View<const A, 2>(lnx), a, mt);
    if (mt) sow_moe_metrics(ctx, info_.mlp, *mt);
    ctx.sow(info_.mlp, View<const A, 2>(a));
    ctx.be.add(View<const A, 2>(a), View<const A, 2>(x), x);
    ctx.sow(info_.name, View<const A, 2>(x));
  }

 private:
  LayerInfo info_;
  bool full_ = false;
  RMSNorm<P> pre_, post_;
  Attention<P> attn_;
  Qwen3NextGatedDeltaNet<P> gdn_;
  Qwen3NextSparseMoe<P> moe_;
};

}  // namespace maxtext::layers
