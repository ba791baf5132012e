// layers/attentions.hpp: MaxText attentions.py Attention (the generic attention layer) with every option that
// changes the forward pass of a text model; spec attention.md §1-3 and §5, rope.md, norms-dense-mlp.md.
//
// Forward, as MaxText: q/k/v projections (fused qkv_proj, or query/key/value; value = key with
// share_kv_projections) -> qk RMSNorm per head (or Olmo3's GlobalRMSNorm) -> value RMSNorm -> RoPE (not on NoPE
// layers) -> Llama-4 L2 norm -> q *= query_pre_attn_scalar -> Llama-4 temperature tuning (NoPE layers) ->
// AttentionOp (causal / sliding window / chunk / segment masks, soft cap, sinks, f32 flags) on the KV cache ->
// out projection. There is no 1/sqrt(head_dim) in this forward pass: MaxText folds it into the query kernel at
// initialisation (and into the checkpoint when converting Hugging Face weights).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/backend/ops.hpp"
#include "maxtext/comm/communicator.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/attention_op.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/rotary.hpp"

namespace maxtext::layers {

/// MaxText common_types.AttentionType values a text layer can take (MLA masks like global).
enum class AttentionType : std::uint8_t { global, local_sliding, chunk, full };

/// Parse `attention_type` ("global", "local_sliding", "chunk", "full"; "mla" masks like "global").
inline AttentionType parse_attention_type(const std::string& s) {
  if (s == "global" || s == "mla") return AttentionType::global;
  if (s == "local_sliding") return AttentionType::local_sliding;
  if (s == "chunk") return AttentionType::chunk;
  if (s == "full") return AttentionType::full;
  MAXTEXT_THROW(UnsupportedError, "[Attention] attention_type: expected global, local_sliding, chunk or full, found '", s,
                "'");
}

/// Llama-4's rule (llama4.determine_is_nope_layer): layer i has no rotary embedding when interval > 0 and
/// (i + 1) % interval == 0.
inline bool is_nope_layer(std::int64_t layer_index, std::int64_t nope_layer_interval) {
  return nope_layer_interval > 0 && (layer_index + 1) % nope_layer_interval == 0;
}

/// The constructor arguments of MaxText's Attention that change numerics (Python None = 0 / empty). Everything
/// else the layer reads from the Config, as MaxText does: fused_qkv, attention_sink, chunk_attn_window_size, the
/// rope_* keys, qk_norm_with_scale, v_norm_with_scale, normalization_layer_epsilon, and MaxText's model_name special
/// cases (llama3.1 RoPE, Olmo3 global qk-norm). What attentions.py decides by decoder block comes as typed fields
/// the family's layer sets (qk_norm_l2, out_bias, qwen3_next_gated).
struct AttentionArgs {
  std::int64_t num_query_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  AttentionType attention_type = AttentionType::global;
  bool float32_qk_product = false;
  bool float32_logits = false;
  double attn_logits_soft_cap = 0.0;    ///< None / 0 = off
  std::int64_t sliding_window_size = 0; ///< needed by local_sliding
  bool use_qk_norm = false;
  double query_pre_attn_scalar = 0.0;   ///< None / 0 / 1 = off
  bool use_bias_in_projections = false;
  bool share_kv_projections = false;
  bool temperature_tuning = false;
  double temperature_tuning_scale = 0.1;
  double temperature_tuning_floor_scale = 8192.0;
  bool is_nope_layer = false;
  std::string rope_type;                ///< "" = config.rope_type
  bool use_v_norm = false;
  double rope_max_timescale = 0.0;      ///< <= 0 = config.rope_max_timescale
  double partial_rotary_factor = 0.0;   ///< 0 = None
  std::int64_t output_dim = 0;          ///< width of the out projection; <= 0 = emb_dim (qwen3_custom.py: attention_output_dim)
  /// share_kv_layer (Gemma 4 small's KV-shared layers): no key/value projections or norms; forward() attends over
  /// the keys and values an earlier (donor) layer wrote into the cache it is given, and writes nothing.
  bool share_kv_layer = false;
  /// Llama 4: use_qk_norm is an L2 norm of q and k (RoPE layers only), not an RMSNorm.
  bool qk_norm_l2 = false;
  /// Whether the out projection has a bias when use_bias_in_projections is set (Qwen2: q/k/v biases only).
  bool out_bias = true;
  /// Qwen3-Next / Qwen3.5 gated full attention (attentions.py is_qwen3_hybrid): the query kernel [D, N, 2H] also
  /// yields a per-head gate, q and k take (1 + w) RMSNorms, the output is o * sigmoid(gate), the out kernel is 2-D.
  bool qwen3_next_gated = false;
  /// Whether a picture's soft tokens see each other here (the step's bidirectional picture ranges, MediaMerge::
  /// bidirectional): every layer for Gemma 3; Gemma 4 passes bidirectional_mask to its sliding-window layers only
  /// (gemma4.py Gemma4DecoderLayer), its global layers stay causal.
  bool media_bidirectional = true;

  /// The arguments the DEFAULT / LLAMA2 / MISTRAL blocks pass: heads and head_dim from the config, the two f32
  /// flags, global attention, nothing else (the blocks add their extras).
  static AttentionArgs basic(const Config& c) {
    AttentionArgs a;
    a.num_query_heads = c.num_query_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.float32_qk_product = c.float32_qk_product;
    a.float32_logits = c.float32_logits;
    return a;
  }
};

/// MaxText's generic Attention over rows x [B*T, D] -> [B*T, D], with its KV cache (keys post-norm, post-RoPE).
template <TensorPolicy P>
class Attention {
 public:
  using A = typename P::act_t;
  using B = typename P::backend;
  struct Params {
    typename DenseGeneral<P>::Params qkv_proj, query, key, value, out;
    Tensor<A, 1> sinks;  ///< [num_query_heads] (attention_sink)
    typename RMSNorm<P>::Params query_norm, key_norm, value_norm;
  };

  Attention() = default;
  Attention(const Config& c, const AttentionArgs& a)
      : args_(a),
        D_(c.emb_dim),
        O_(a.output_dim > 0 ? a.output_dim : c.emb_dim),
        N_(a.num_query_heads),
        K_(a.num_kv_heads),
        H_(a.head_dim),
        fused_(c.fused_qkv),
        sinks_(c.attention_sink),
        eps_(static_cast<float>(c.normalization_layer_epsilon)) {
    const std::string where = "[Attention] ";
    MAXTEXT_CHECK(D_ > 0 && N_ > 0 && H_ > 0, ConfigError, where, "emb_dim, num_query_heads and head_dim must be > 0, found ",
                  D_, ", ", N_, ", ", H_);
    MAXTEXT_CHECK(K_ > 0 && N_ % K_ == 0, ConfigError, where, "Invalid num_kv_heads for GQA: num_query_heads (", N_,
                  ") must be a multiple of num_kv_heads (", K_, ")");
    MAXTEXT_CHECK(!(fused_ && a.share_kv_projections), ConfigError, where,
                  "share_kv_projections is incompatible with fused_qkv");
    MAXTEXT_CHECK(!(fused_ && a.share_kv_layer), ConfigError, where, "share_kv_layer is incompatible with fused_qkv");
    gated_ = a.qwen3_next_gated;  // Qwen3-Next's (and Qwen3.5's) full attention (AttentionArgs::qwen3_next_gated)
    MAXTEXT_CHECK(!gated_ || (!fused_ && !a.share_kv_projections && !sinks_ && !a.use_qk_norm), UnsupportedError, where,
                  "the Qwen3-Next gated attention takes no fused_qkv, share_kv_projections, attention_sink or use_qk_norm");
    MAXTEXT_CHECK(!a.share_kv_layer || (!gated_ && !(a.temperature_tuning && a.is_nope_layer)), UnsupportedError, where,
                  "share_kv_layer takes no Qwen3-Next gated attention and no temperature tuning");
    if (sinks_) {
      MAXTEXT_CHECK(c.num_query_heads == N_, ConfigError, where, "attention sinks have config.num_query_heads (",
                    c.num_query_heads, ") entries but the layer has ", N_, " query heads");
    }
    qk_rms_ = (a.use_qk_norm && !a.qk_norm_l2) || gated_;
    qk_l2_ = a.use_qk_norm && a.qk_norm_l2 && !a.is_nope_layer;
    qk_global_ = qk_rms_ && detail::starts_with(c.model_name, "olmo3");
    if (qk_global_) shards_ = std::max<std::int64_t>(1, c.tensor_shards);  // all heads' statistic: the others' too
    if (a.query_pre_attn_scalar != 0.0 && a.query_pre_attn_scalar != 1.0) q_scalar_ = a.query_pre_attn_scalar;

    // Projections. nd_dense_init(1, fan_in, normal); the query kernel's init is divided by sqrt(head_dim) (cast to
    // dtype) unless config.use_qk_norm or a query_pre_attn_scalar other than 1 is set. Init-only: no forward scaling.
    const Init init = Init::normal;
    const bool bias = a.use_bias_in_projections;
    if (fused_) {
      qkv_ = DenseGeneral<P>({{D_}, {N_ + 2 * K_, H_}, bias, init});
    } else {
      const bool no_depth_scaling = c.use_qk_norm || q_scalar_ != 0.0;
      const double div = no_depth_scaling ? 1.0 : static_cast<double>(round_to<A>(std::sqrt(static_cast<float>(H_))));
      query_ = DenseGeneral<P>({{D_}, {N_, gated_ ? 2 * H_ : H_}, bias, init, 1.0, div});
      if (!a.share_kv_layer) {
        key_ = DenseGeneral<P>({{D_}, {K_, H_}, bias, init});
        if (!a.share_kv_projections) value_ = DenseGeneral<P>({{D_}, {K_, H_}, bias, init});
      }
    }
    if (gated_) {
      out_ = DenseGeneral<P>({{N_ * H_}, {O_}, bias, init});
    } else {
      out_ = DenseGeneral<P>({{N_, H_}, {O_}, bias && a.out_bias, init});
    }

    if (gated_) {  // Qwen3NextRMSNorm: scale_offset 1, scale initialised to 0
      query_norm_ = RMSNorm<P>({H_, eps_, true, 1.0f});
      key_norm_ = RMSNorm<P>({H_, eps_, true, 1.0f});
    } else if (qk_rms_) {
      const bool ws = c.qk_norm_with_scale;
      query_norm_ = RMSNorm<P>({qk_global_ ? shards_ * N_ * H_ : H_, eps_, ws});
      key_norm_ = RMSNorm<P>({qk_global_ ? shards_ * K_ * H_ : H_, eps_, ws});
    }
    if (a.use_v_norm && !a.share_kv_layer) value_norm_ = RMSNorm<P>({H_, eps_, c.v_norm_with_scale});

    // Rotary embedding (shared table) unless this is a NoPE layer.
    RopeArgs ra;
    ra.dims = H_;
    ra.rope_type = a.rope_type;
    ra.rope_max_timescale = a.rope_max_timescale;
    ra.partial_rotary_factor = a.partial_rotary_factor;
    ra.local_sliding = a.attention_type == AttentionType::local_sliding;
    ra.is_nope_layer = a.is_nope_layer;
    rope_ = select_rope(c, ra);
    if (rope_.kind != RopeKind::none) {
      table_limit_ = rope_table_positions(rope_, c);
      host_table_ = shared_rotary_table(rope_, table_limit_);
      device_ = std::make_shared<DeviceTable>();
    }

    // Attention op: mask and numerics.
    typename AttentionOp<P>::Config oc;
    oc.num_query_heads = N_;
    oc.num_kv_heads = K_;
    oc.qk_dim = H_;
    oc.v_dim = H_;
    oc.causal = a.attention_type != AttentionType::full;
    if (a.attention_type == AttentionType::local_sliding) {
      MAXTEXT_CHECK(a.sliding_window_size > 0, ConfigError, where,
                    "Sliding_window_size must be set (> 0) for local_sliding attention, found ", a.sliding_window_size);
      oc.sliding_window = a.sliding_window_size;
    } else if (a.attention_type == AttentionType::chunk) {
      MAXTEXT_CHECK(c.chunk_attn_window_size > 0, ConfigError, where,
                    "chunk attention needs chunk_attn_window_size > 0, found ", c.chunk_attn_window_size);
      oc.chunk = c.chunk_attn_window_size;
    }
    oc.media_bidirectional = a.media_bidirectional;
    oc.options.soft_cap = static_cast<float>(a.attn_logits_soft_cap);
    oc.options.float32_qk_product = a.float32_qk_product;
    oc.options.float32_logits = a.float32_logits;
    oc.kv_quant = kv_quant_options(c);
    op_ = AttentionOp<P>(oc);
  }

  const AttentionArgs& args() const { return args_; }
  /// The rotary embedding this layer applies (kind none on NoPE layers).
  const RopeSpec& rope() const { return rope_; }
  /// Positions the rotary table covers (0 on NoPE layers: any position is accepted).
  std::int64_t max_positions() const { return table_limit_; }
  /// Cache widths: keys [K * H], values [K * H] (none for a share_kv_layer: it reads its donor's).
  CacheSpec cache_spec() const { return args_.share_kv_layer ? CacheSpec{} : op_.cache_spec(); }

  template <class V>
  void visit(V& v, Params& p) const {
    if (fused_) {
      visit_child(v, "qkv_proj", qkv_, p.qkv_proj);
    } else {
      visit_child(v, "query", query_, p.query);
      if (!args_.share_kv_layer) {
        visit_child(v, "key", key_, p.key);
        if (!args_.share_kv_projections) visit_child(v, "value", value_, p.value);
      }
    }
    visit_child(v, "out", out_, p.out);
    if (sinks_) v.vector("sinks", p.sinks, {{N_}, Init::zeros});
    if (qk_rms_) {
      visit_child(v, "query_norm", query_norm_, p.query_norm);
      if (!args_.share_kv_layer) visit_child(v, "key_norm", key_norm_, p.key_norm);
    }
    if (args_.use_v_norm && !args_.share_kv_layer) visit_child(v, "value_norm", value_norm_, p.value_norm);
  }

  /// Width of the output rows: emb_dim unless AttentionArgs::output_dim says otherwise.
  std::int64_t output_dim() const { return O_; }

  /// x [B*T, D] -> y [B*T, output_dim()] (y must not alias x). Writes this step's keys/values into `cache`; a
  /// share_kv_layer is given its donor layer's cache, which already holds this step's keys/values, and only reads it.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, CacheFor<P>& cache, View<A, 2> y) const {
    const auto& st = ctx.step;
    const std::int64_t M = x.dim(0);
    MAXTEXT_CHECK(x.dim(1) == D_ && y.dim(1) == O_, ShapeError, "[Attention] inputs have ", x.dim(1),
                  " features and outputs ", y.dim(1), ": expected emb_dim ", D_, " and ", O_);
    MAXTEXT_CHECK(M == st.tokens() && y.dim(0) == M, ShapeError, "[Attention] ", M, " input rows for a step of ",
                  st.batch, " x ", st.length, " tokens");
    const CacheSpec widths = op_.cache_spec();
    MAXTEXT_CHECK(cache.buffers.size() == 2 && cache.buffers[0].dim(2) == widths[0] && cache.buffers[1].dim(2) == widths[1],
                  ShapeError, "[Attention] the KV cache ", args_.share_kv_layer ? "of the donor layer " : "",
                  "was made for another layer: expected two buffers of width ", widths[0],
                  op_.config().kv_quant ? " (quantised rows)" : "");
    if (args_.share_kv_layer) {
      forward_shared(ctx, p, x, cache, y);
      return;
    }
    ScratchScope scope(ctx.scratch);
    const std::int64_t NH = N_ * H_, KH = K_ * H_;

    // 1. projections
    View<A, 3> q, k, v, gate;
    if (fused_) {
      const std::int64_t S = NH + 2 * KH;
      View<A, 2> qkv = ctx.scratch.template alloc<A, 2>({M, S});
      qkv_.forward(ctx, p.qkv_proj, x, qkv);
      q = View<A, 3>(qkv.data(), {M, N_, H_}, {S, H_, 1});
      k = View<A, 3>(qkv.data() + NH, {M, K_, H_}, {S, H_, 1});
      v = View<A, 3>(qkv.data() + NH + KH, {M, K_, H_}, {S, H_, 1});
    } else {
      q = ctx.scratch.template alloc<A, 3>({M, N_, H_});
      k = ctx.scratch.template alloc<A, 3>({M, K_, H_});
      v = ctx.scratch.template alloc<A, 3>({M, K_, H_});
      if (gated_) {  // [M, N, 2H]: per head the query, then its gate
        View<A, 3> q2 = ctx.scratch.template alloc<A, 3>({M, N_, 2 * H_});
        query_.forward(ctx, p.query, x, rows(q2));
        gate = ctx.scratch.template alloc<A, 3>({M, N_, H_});
        ctx.be.copy(View<const A, 3>(q2.data(), {M, N_, H_}, {N_ * 2 * H_, 2 * H_, 1}), q);
        ctx.be.copy(View<const A, 3>(q2.data() + H_, {M, N_, H_}, {N_ * 2 * H_, 2 * H_, 1}), gate);
      } else {
        query_.forward(ctx, p.query, x, rows(q));
      }
      key_.forward(ctx, p.key, x, rows(k));
      if (args_.share_kv_projections) {
        ctx.be.copy(View<const A, 3>(k), v);  // value = key before key's norm and RoPE
      } else {
        value_.forward(ctx, p.value, x, rows(v));
      }
    }
    // 2. qk RMSNorm (per head, or over all heads for Olmo3), value RMSNorm
    if (qk_rms_) {
      if (qk_global_) {
        norm_all_heads(ctx, query_norm_, p.query_norm, rows(q), "query_norm");
        norm_all_heads(ctx, key_norm_, p.key_norm, rows(k), "key_norm");
      } else {
        norm_heads(ctx, query_norm_, p.query_norm, q);
        norm_heads(ctx, key_norm_, p.key_norm, k);
      }
    }
    if (args_.use_v_norm) norm_heads(ctx, value_norm_, p.value_norm, v);
    // 3. rotary embedding
    const std::vector<std::int32_t>* pos = nullptr;
    std::vector<std::int32_t> pos_buf;
    if (rope_.kind != RopeKind::none || (args_.temperature_tuning && args_.is_nope_layer)) {
      pos = &ctx.host_positions(pos_buf);
    }
    StepRope step_rope;
    if (rope_.kind != RopeKind::none && !st.mrope_positions.empty()) {
      step_rope = mrope_step(ctx.be, st, M);  // a picture's 3-D positions: this step's own table
      ctx.be.rotary(q, step_rope.positions.cview(), step_rope.table);
      ctx.be.rotary(k, step_rope.positions.cview(), step_rope.table);
    } else if (rope_.kind != RopeKind::none) {
      check_positions(*pos, st);
      const RotaryTable& t = table(ctx.be);
      ctx.be.rotary(q, st.positions, t);
      ctx.be.rotary(k, st.positions, t);
    }
    // 4. Llama-4 L2 norm after RoPE (x * rsqrt(mean(x^2) + eps), no scale)
    if (qk_l2_) {
      RMSNorm<P> l2({H_, eps_, false});
      typename RMSNorm<P>::Params none;
      norm_heads(ctx, l2, none, q);
      norm_heads(ctx, l2, none, k);
    }
    // 5. query_pre_attn_scalar (a Python scalar: it takes the query's dtype)
    if (q_scalar_ != 0.0) ctx.be.scale(rows(q), static_cast<float>(q_scalar_));
    // 6. temperature tuning on NoPE layers: q *= 1 + scale * ln(floor((pos + 1) / floor_scale) + 1), in dtype
    if (args_.temperature_tuning && args_.is_nope_layer) {
      const float fs = round_to<A>(static_cast<float>(args_.temperature_tuning_floor_scale));
      const float ts = round_to<A>(static_cast<float>(args_.temperature_tuning_scale));
      for (std::int64_t m = 0; m < M; ++m) {
        float t = round_to<A>(round_to<A>(static_cast<float>((*pos)[static_cast<std::size_t>(m)])) + 1.0f);
        t = std::floor(round_to<A>(t / fs));
        t = round_to<A>(std::log(round_to<A>(t + 1.0f)));
        t = round_to<A>(round_to<A>(t * ts) + 1.0f);
        if (t != 1.0f) ctx.be.scale(rows(q).narrow(0, m, 1), t);
      }
    }
    // 7-8. KV cache update and AttentionOp
    View<A, 3> o = ctx.scratch.template alloc<A, 3>({M, N_, H_});
    op_.forward(ctx, q, k, v, cache, sinks_ ? p.sinks.cview() : View<const A, 1>(), o);
    if (gated_) {  // Qwen3-Next: o * sigmoid(gate), each op in dtype
      ctx.be.activation(View<const A, 2>(rows(o)), Activation::linear, View<const A, 2>(rows(gate)), Activation::sigmoid,
                        rows(o));
    }
    // 9. out projection
    out_.forward_reduced(ctx, p.out, View<const A, 2>(rows(o)), y, "attention");
  }

 private:
  struct DeviceTable {
    std::once_flag once;
    RotaryTable table;
  };

  /// share_kv_layer (attentions.py with shared_key / shared_value): the query path of forward() (projection, norm,
  /// RoPE, scalar), then AttentionOp over the donor's cache.
  void forward_shared(const Context<P>& ctx, const Params& p, View<const A, 2> x, const CacheFor<P>& donor,
                      View<A, 2> y) const {
    ScratchScope scope(ctx.scratch);
    const std::int64_t M = x.dim(0);
    View<A, 3> q = ctx.scratch.template alloc<A, 3>({M, N_, H_});
    query_.forward(ctx, p.query, x, rows(q));
    if (qk_rms_) {
      if (qk_global_) {
        norm_all_heads(ctx, query_norm_, p.query_norm, rows(q), "query_norm");
      } else {
        norm_heads(ctx, query_norm_, p.query_norm, q);
      }
    }
    StepRope step_rope;
    if (rope_.kind != RopeKind::none && !ctx.step.mrope_positions.empty()) {
      step_rope = mrope_step(ctx.be, ctx.step, M);
      ctx.be.rotary(q, step_rope.positions.cview(), step_rope.table);
    } else if (rope_.kind != RopeKind::none) {
      std::vector<std::int32_t> pos_buf;
      check_positions(ctx.host_positions(pos_buf), ctx.step);
      ctx.be.rotary(q, ctx.step.positions, table(ctx.be));
    }
    if (qk_l2_) {
      RMSNorm<P> l2({H_, eps_, false});
      typename RMSNorm<P>::Params none;
      norm_heads(ctx, l2, none, q);
    }
    if (q_scalar_ != 0.0) ctx.be.scale(rows(q), static_cast<float>(q_scalar_));
    View<A, 3> o = ctx.scratch.template alloc<A, 3>({M, N_, H_});
    op_.attend(ctx, q, donor, sinks_ ? p.sinks.cview() : View<const A, 1>(), o);
    out_.forward_reduced(ctx, p.out, View<const A, 2>(rows(o)), y, "attention");
  }

  /// [M, heads, d] with contiguous lanes -> [M, heads*d] rows (row stride kept: works for fused qkv slices).
  static View<A, 2> rows(View<A, 3> t) { return View<A, 2>(t.data(), {t.dim(0), t.dim(1) * t.dim(2)}, {t.stride(0), 1}); }

  /// Olmo3's GlobalRMSNorm over the rows x [M, heads * d] of all heads, in place. Heads split over the tensor ranks
  /// (shards_ > 1): each rank's rows are gathered into the whole rows (rank order is head order), normalised with the
  /// whole scale on every rank (one process's statistic, to the bit) and the rank's own columns kept: one all-gather
  /// of [M, heads * d] per norm, where summing partial squares would change the statistic's rounding.
  void norm_all_heads(const Context<P>& ctx, const RMSNorm<P>& norm, const typename RMSNorm<P>::Params& p, View<A, 2> x,
                      std::string_view what) const {
    if (shards_ == 1) {
      norm.forward(ctx, p, x, x);
      return;
    }
    comm::Communicator* c = ctx.comm;
    const std::string name = ctx.where ? join_name(*ctx.where, std::string(what) + " (all heads)") : std::string(what);
    MAXTEXT_CHECK(c != nullptr && c->size() == shards_, CommError, "[comm] ", name, ": this layer holds 1/", shards_,
                  " of the heads (tensor_shards) but ", c ? "the tensor-parallel group has " + std::to_string(c->size()) + " ranks"
                                                          : std::string("no tensor-parallel communicator is set"));
    const std::int64_t M = x.dim(0), w = x.dim(1), W = w * shards_;
    if (M == 0) return;
    ScratchScope scope(ctx.scratch);
    std::vector<A> mine(static_cast<std::size_t>(M * w)), whole(static_cast<std::size_t>(M * W));
    ctx.be.synchronize();
    for (std::int64_t m = 0; m < M; ++m) {
      ctx.be.copy(mine.data() + m * w, x[m].data(), static_cast<std::size_t>(w) * sizeof(A), CopyKind::device_to_host);
    }
    ctx.be.synchronize();
    comm::all_gather_columns(*c, mine.data(), M, w, whole.data(), name);
    View<A, 2> rows_d = ctx.scratch.template alloc<A, 2>({M, W});
    ctx.be.copy(rows_d.data(), whole.data(), whole.size() * sizeof(A), CopyKind::host_to_device);
    norm.forward(ctx, p, rows_d, rows_d);
    const std::int64_t r0 = c->rank() * w;
    ctx.be.copy(View<const A, 2>(rows_d.data() + r0, {M, w}, {W, 1}), x);
    ctx.be.synchronize();  // the host rows the upload read go out of scope here
  }

  /// RMSNorm over the last axis of every head of t [M, heads, d].
  static void norm_heads(const Context<P>& ctx, const RMSNorm<P>& norm, const typename RMSNorm<P>::Params& p,
                         View<A, 3> t) {
    const std::int64_t M = t.dim(0), h = t.dim(1), d = t.dim(2);
    if (t.stride(0) == h * d) {
      View<A, 2> r(t.data(), {M * h, d});
      norm.forward(ctx, p, r, r);
      return;
    }
    for (std::int64_t i = 0; i < h; ++i) {
      View<A, 2> r(t.data() + i * t.stride(1), {M, d}, {t.stride(0), 1});
      norm.forward(ctx, p, r, r);
    }
  }

  /// A step's own MRoPE table (the tokens' 3-D positions, StepInfo::mrope_positions) and the positions 0..M-1 that
  /// select its rows, in the backend's memory; kept until the step's attention has run.
  struct StepRope {
    RotaryTable table;
    Tensor<std::int32_t, 1> positions;
  };
  StepRope mrope_step(const B& be, const StepInfo& st, std::int64_t M) const {
    MAXTEXT_CHECK(static_cast<std::int64_t>(st.mrope_positions.size()) == 3 * M, ArgumentError, "[Attention] ",
                  st.mrope_positions.size(), " 3-D positions for ", M, " tokens (expected [3, ", M, "])");
    StepRope r;
    r.table = build_mrope_step_table(rope_, st.mrope_positions, M);
    Tensor<std::int32_t, 1> iota({M});
    for (std::int64_t m = 0; m < M; ++m) iota(m) = static_cast<std::int32_t>(m);
    r.table.cos = upload(be, std::move(r.table.cos));
    r.table.sin = upload(be, std::move(r.table.sin));
    r.positions = upload(be, std::move(iota));
    return r;
  }

  void check_positions(const std::vector<std::int32_t>& pos, const StepInfo& st) const {
    for (std::size_t i = 0; i < pos.size(); ++i) {
      const std::int32_t p = pos[i];
      if (p >= 0 && p < table_limit_) continue;
      const auto m = static_cast<std::int64_t>(i);
      MAXTEXT_THROW(ArgumentError, "[Attention] position ", p, " of token [", m / st.length, ",", m % st.length,
                    "] is outside the rotary table: expected 0 <= position < ", table_limit_,
                    rope_.kind == RopeKind::yarn ? " (min(max_target_length, max_position_embeddings))"
                                                 : " (max_target_length)");
    }
  }

  /// The rotary table in the backend's memory (uploaded once per layer for device backends).
  const RotaryTable& table(const B& be) const {
    if (be.memory()->host_accessible()) return *host_table_;
    std::call_once(device_->once, [&] {
      RotaryTable t = *host_table_;
      t.cos = upload(be, host_table_->cos);
      t.sin = upload(be, host_table_->sin);
      device_->table = std::move(t);
    });
    return device_->table;
  }

  AttentionArgs args_;
  std::int64_t D_ = 0, O_ = 0, N_ = 0, K_ = 0, H_ = 0;
  bool fused_ = false, sinks_ = false, gated_ = false;
  float eps_ = 1e-5f;
  bool qk_rms_ = false, qk_l2_ = false, qk_global_ = false;
  std::int64_t shards_ = 1;  ///< qk_global_: the tensor ranks the heads are split over (Config::tensor_shards)
  double q_scalar_ = 0.0;
  DenseGeneral<P> qkv_, query_, key_, value_, out_;
  RMSNorm<P> query_norm_, key_norm_, value_norm_;
  RopeSpec rope_;
  std::int64_t table_limit_ = 0;
  std::shared_ptr<const RotaryTable> host_table_;
  std::shared_ptr<DeviceTable> device_;
  AttentionOp<P> op_;
};

}  // namespace maxtext::layers
