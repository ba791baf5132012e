// layers/moe.hpp: MaxText moe.py GateLogit, RoutedMoE and RoutedAndSharedMoE; spec moe.md.
//
// Routing (scores, routing bias, group-limited top-k, weight normalisation) runs in the backend (moe_route, semantics
// in backend/ops.hpp MoeRouting). The experts are computed grouped by expert: the tokens routed to expert e are
// gathered, pass through its three matrix products as one batch, and are scatter-added (weighted, f32) into the
// output; experts that receive no token cost nothing, so the time of a call scales with the active experts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::layers {

/// The routed-MoE variants that MaxText's moe.py selects by decoder block. The family's layer names its variant
/// (RoutedMoE::settings, RoutedAndSharedMoE); the shared layer reads no decoder_block.
enum class MoeFamily : std::uint8_t {
  generic,   ///< softmax over the k selected logits, renormalised with norm_topk_prob (mixtral, qwen3_moe, envy, ...)
  deepseek,  ///< deepseek, deepseek4: deepseek_scale_weights, routing-bias updates, V4's clamped SwiGLU
  gpt_oss,   ///< gpt_oss: the clamped SwiGLU at mlp_activations_limit
  llama4,    ///< llama4: top-1, the expert input scaled by sigmoid(its gate logit)
  gemma4,    ///< gemma4: softmax over all logits at the top k, per-expert scales
};

/// What one call of a routed MoE block did, for the caller (the decoder layers record it through Capture as
/// `<block>.topk_indices`, `.topk_weights`, `.expert_counts`, `.expert_kept`, `.moe_lb_loss`, `.moe_bias_updates`).
struct MoeMetrics {
  std::int64_t tokens = 0;                  ///< B*T
  std::int64_t k = 0;                       ///< experts per token
  std::vector<std::int32_t> topk_indices;   ///< [B*T, k], descending routing score
  std::vector<float> topk_weights;          ///< [B*T, k], the combine weights before capacity dropping
  std::vector<std::int64_t> expert_counts;  ///< [E] assignments routed to each expert
  std::vector<std::int64_t> expert_kept;    ///< [E] assignments computed (= expert_counts when dropless)
  std::int64_t dropped = 0;                 ///< assignments dropped by the capacity limit
  bool has_load_balance_loss = false;
  double load_balance_loss = 0.0;           ///< MaxText `moe_lb_loss` (load_balance_loss_weight > 0)
  std::vector<float> bias_updates;          ///< MaxText `moe_bias_updates` (routed_bias_update_rate > 0)
};

/// MaxText RoutedMoE (path `MoeBlock_0`): GateLogit `gate/kernel [D,E]` (+ `gate/bias [E]` with routed_bias) and
/// stacked experts `wi_0 [E,D,F]`, `wi_1 [E,D,F]`, `wo [E,F,D]` (+ `wi_0_bias [E,F]`, `wi_1_bias [E,F]`,
/// `wo_bias [E,D]` with mlp_bias). Expert e: FFN_e(x) = round(act(x W0_e + b0) * (x W1_e + b1)) W2_e + b2
/// (gpt_oss: the product is the clamped SwiGLU, Settings::clamped_glu);
/// y = round(sum_j w_j FFN_{idx_j}(x)) with the sum in f32.
template <TensorPolicy P>
class RoutedMoE {
 public:
  using A = typename P::act_t;
  using W = typename P::weight_t;
  using B = typename P::backend;

  struct Settings {
    std::int64_t num_experts = 1;
    /// Expert parallelism (Config::expert_shard): this layer holds experts [expert_begin, expert_begin +
    /// local_experts) and sums its share of the output over ctx.expert_comm; local_experts 0: all of them.
    std::int64_t expert_begin = 0;
    std::int64_t local_experts = 0;
    std::int64_t in_features = 0;       ///< D (moe_expert_input_dim)
    std::int64_t intermediate_dim = 0;  ///< F
    Activation activation = Activation::silu;  ///< mlp_activations[0]; the second factor is linear
    bool mlp_bias = false;
    bool gate_bias = false;             ///< routed_bias
    bool float32_gate_logits = false;
    MoeRouting routing;
    bool sparse_matmul = true;          ///< false: MaxText's dense path (capacity dropping possible)
    bool activations_in_float32 = false;  ///< dense path only: activation and product in f32, one rounding
    double capacity_factor = -1.0;      ///< > 0 drops tokens on the dense path
    bool inference_call = false;        ///< model_call_mode == "inference"
    double load_balance_loss_weight = 0.0;
    double bias_update_rate = 0.0;
    double init_scale = 1.0;            ///< dense_init_scale
    /// decoder_block gpt_oss: the clamped SwiGLU of moe.py apply_ffn_activation, act(w0 * 1.702) with w0 clipped
    /// above at glu_limit and w1 to [-glu_limit, glu_limit], times (w1 + 1) (backend clamped_glu).
    bool clamped_glu = false;
    float glu_alpha = 1.702f;
    float glu_limit = 7.0f;
    /// deepseek / deepseek4 with mlp_activations_limit > 0 (DeepSeek-V4): act(min(w0, limit)) * clip(w1, +-limit).
    ClampedGluForm glu_form = ClampedGluForm::gpt_oss;
    /// deepseek4 layers < first_num_hash_layers (moe.py get_topk, is_hash_routing): the experts of a token are the
    /// row of the static table `tid2eid` [vocab, k] (f32 holding integers) at its id, weighted by their unbiased
    /// scores (then deepseek_scale_weights); the gate has no bias.
    bool hash_routing = false;
    std::int64_t vocab_size = 0;  ///< rows of tid2eid
    /// decoder_block llama4 (moe.py): the routing weight is the raw top-1 gate logit, the expert's input is scaled
    /// by round(sigmoid(logit)) and its output is combined with weight 1.
    bool scale_inputs = false;
    /// decoder_block gemma4 (moe.py get_topk): the k largest gate logits choose the experts; their weights are the
    /// f32 softmax over all E logits at those experts, rounded to dtype, divided by their sum with norm_topk_prob,
    /// and multiplied by the learned per_expert_scale [E] (in dtype).
    bool gemma4_routing = false;
    bool norm_topk_prob = false;  ///< gemma4_routing: w /= sum(w), in dtype
  };
  /// Each expert's matrices: views of the stacked kernels, laid out by the backend's prepare() (e.g. packed for
  /// the CPU GEMM) on first use after loading.
  struct PreparedExperts {
    std::once_flag once;
    std::vector<Matrix<W>> wi_0, wi_1, wo;
    /// Set when prepared() let a stacked copy go (release_stacks): the rows of a packed expert, rebuilt from its
    /// panels (the backend's unpacked()), for visit() to restore the stack.
    std::function<Tensor<W, 2>(const Matrix<W>&)> unpack;
  };
  /// Hash routing's table, read back to the host and checked on first use.
  struct HashTable {
    std::once_flag once;
    std::vector<std::int32_t> experts;  ///< [vocab * k]
  };
  struct Params {
    /// GateLogit: kernel [E, D] out-major; bias [E] when routed_bias, kept in f32 (MaxText's weight_dtype) so that
    /// float32_gate_logits selects experts with the unrounded bias whatever the activation type.
    struct Gate {
      Matrix<W> kernel;
      Tensor<float, 1> bias;
    } gate;
    /// [E*F, D]: expert e is rows [e*F, (e+1)*F) (not prepared as a whole), and wo [E*D, F]. mutable: once every
    /// expert is packed from a stack the loader copied (Hugging Face's per-expert tensors stacked, a transposed
    /// MaxText kernel, a converted dtype, a rank's columns), prepared() lets the stack go, so that the panels are the
    /// one copy of the weights; visit() rebuilds it from them (restore_stacks).
    mutable Matrix<W> wi_0, wi_1;
    mutable Matrix<W> wo;
    Tensor<A, 1> wi_0_bias, wi_1_bias, wo_bias;  ///< [E*F], [E*F], [E*D] with mlp_bias
    Tensor<A, 1> per_expert_scale;               ///< [E] with gemma4_routing
    Tensor<float, 1> tid2eid;                    ///< [vocab * k] expert ids (as f32) with hash_routing
    std::shared_ptr<PreparedExperts> prepared = std::make_shared<PreparedExperts>();  ///< reset by every visit
    std::shared_ptr<HashTable> hash = std::make_shared<HashTable>();                  ///< reset by every visit
  };

  /// MaxText's settings for a RoutedMoE with hidden size F in a model described by `c` (spec moe.md); `family` is
  /// the routing and activation variant moe.py selects by decoder block, which the family's layer names.
  static Settings settings(const Config& c, std::int64_t F, MoeFamily family = MoeFamily::generic) {
    Settings s;
    s.num_experts = c.num_experts;
    if (c.expert_shard.ranks > 1) {
      const std::int64_t n = c.expert_shard.ranks;
      MAXTEXT_CHECK(c.num_experts % n == 0 && c.expert_shard.rank >= 0 && c.expert_shard.rank < n, ConfigError,
                    "[RoutedMoE] num_experts = ", c.num_experts, " does not split over ", n, " expert ranks");
      s.local_experts = c.num_experts / n;
      s.expert_begin = c.expert_shard.rank * s.local_experts;
    }
    s.in_features = c.moe_expert_input_dim > 0 ? c.moe_expert_input_dim : c.emb_dim;
    s.intermediate_dim = F;
    MAXTEXT_CHECK(!c.mlp_activations.empty(), ConfigError, "[RoutedMoE] mlp_activations must not be empty");
    s.activation = parse_activation(c.mlp_activations[0]);
    s.mlp_bias = c.mlp_bias;
    s.gate_bias = c.routed_bias;
    s.float32_gate_logits = c.float32_gate_logits;
    s.sparse_matmul = c.sparse_matmul;
    s.activations_in_float32 = c.activations_in_float32;
    s.capacity_factor = c.capacity_factor;
    s.inference_call = c.model_call_mode == "inference";
    s.load_balance_loss_weight = c.load_balance_loss_weight;
    s.bias_update_rate = c.routed_bias ? c.routed_bias_update_rate : 0.0;
    MAXTEXT_CHECK(c.routed_bias_update_rate <= 0.0 || family == MoeFamily::deepseek, ConfigError,
                  "[RoutedMoE] routed_bias_update_rate > 0 is only supported by the deepseek and deepseek4 decoder "
                  "blocks, found ", c.decoder_block);
    s.init_scale = c.dense_init_scale;
    if (family == MoeFamily::gpt_oss) {
      MAXTEXT_CHECK(c.mlp_activations_limit > 0.0, ConfigError,
                    "[RoutedMoE] decoder_block gpt_oss clamps its SwiGLU at mlp_activations_limit, which must be > 0 "
                    "(7.0 in the gpt-oss ymls), found ", c.mlp_activations_limit);
      s.clamped_glu = true;
      s.glu_limit = static_cast<float>(c.mlp_activations_limit);
    } else if (family == MoeFamily::deepseek && c.mlp_activations_limit > 0.0) {
      s.clamped_glu = true;
      s.glu_limit = static_cast<float>(c.mlp_activations_limit);
      s.glu_form = ClampedGluForm::swiglu;
    }
    s.vocab_size = c.vocab_size;
    MoeRouting& r = s.routing;
    r.num_experts_per_tok = c.num_experts_per_tok;
    const std::string& sf = c.routed_score_func;
    if (sf == "softmax") {
      r.score_softmax = true;
    } else if (!sf.empty()) {
      r.score = parse_activation(sf);
    }
    r.deepseek = c.model_name.rfind("deepseek3", 0) == 0 || c.model_name.rfind("deepseek4", 0) == 0;
    if (r.deepseek && c.n_routing_groups > 0) {
      r.n_groups = c.n_routing_groups;
      r.topk_groups = c.topk_routing_group;
    }
    if (family == MoeFamily::deepseek) {
      // deepseek_scale_weights: renormalise sigmoid-like scores, then routed_scaling_factor
      r.normalize = sf == "sigmoid" || sf == "sqrtsoftplus";
      r.normalize_eps = 1e-20f;
      r.scale = static_cast<float>(c.routed_scaling_factor);
    } else if (family == MoeFamily::llama4) {
      // get_topk keeps the raw top-k logits for llama4; the sigmoid scales the expert input, which only broadcasts
      // for one expert per token (inputs [.., D] * scores [.., k]).
      MAXTEXT_CHECK(c.num_experts_per_tok == 1, ConfigError, "[RoutedMoE] decoder_block llama4 scales each token's "
                    "expert input by sigmoid(its gate logit), defined for num_experts_per_tok = 1, found ",
                    c.num_experts_per_tok);
      s.scale_inputs = true;
    } else if (family == MoeFamily::gemma4) {
      MAXTEXT_CHECK(sf.empty(), UnsupportedError, "[RoutedMoE] decoder_block gemma4 routes by a softmax over the raw "
                    "gate logits; routed_score_func '", sf, "' is not supported with it");
      MAXTEXT_CHECK(!c.float32_gate_logits, UnsupportedError, "[RoutedMoE] decoder_block gemma4 with "
                    "float32_gate_logits=true (an f32 gate norm feeding the router) is not supported");
      s.gemma4_routing = true;
      s.norm_topk_prob = c.norm_topk_prob;
    } else {
      r.softmax_weights = true;  // softmax over the k selected values
      r.normalize = c.norm_topk_prob;
    }
    return s;
  }

  RoutedMoE() = default;
  explicit RoutedMoE(Settings s) : s_(std::move(s)) {
    // A hash table may name an expert twice for a token: the sparse path adds both (merged here into one
    // computation), MaxText's dense path would count it once or (with capacity) twice; only the former is done.
    MAXTEXT_CHECK(!s_.hash_routing || s_.sparse_matmul, UnsupportedError, "[RoutedMoE] hash routing "
                  "(first_num_hash_layers) with sparse_matmul=false (MaxText's dense MoE path) is not supported");
    const std::int64_t E = s_.num_experts, k = s_.routing.num_experts_per_tok;
    MAXTEXT_CHECK(E >= 1 && k >= 1 && k <= E, ConfigError, "[RoutedMoE] num_experts_per_tok must be in [1, num_experts=", E,
                  "], found ", k);
    MAXTEXT_CHECK(s_.in_features > 0 && s_.intermediate_dim > 0, ConfigError,
                  "[RoutedMoE] expert input and hidden dims must be > 0 (moe_mlp_dim / mlp_dim), found ", s_.in_features,
                  " and ", s_.intermediate_dim);
    const MoeRouting& r = s_.routing;
    if (r.n_groups > 0) {
      MAXTEXT_CHECK(E % r.n_groups == 0 && E / r.n_groups >= 2, ConfigError, "[RoutedMoE] num_experts (", E,
                    ") must be a multiple of n_routing_groups (", r.n_groups, ") with >= 2 experts per group");
      MAXTEXT_CHECK(r.topk_groups >= 1 && r.topk_groups <= r.n_groups, ConfigError,
                    "[RoutedMoE] topk_routing_group must be in [1, n_routing_groups=", r.n_groups, "], found ",
                    r.topk_groups);
    }
  }
  const Settings& settings() const { return s_; }
  /// The experts this layer holds (all, or its expert rank's share).
  std::int64_t local_experts() const { return s_.local_experts > 0 ? s_.local_experts : s_.num_experts; }

  template <class V>
  void visit(V& v, Params& p) const {
    const std::int64_t E = s_.num_experts, El = local_experts(), D = s_.in_features, F = s_.intermediate_dim;
    if constexpr (!SpecOnlyVisitor<V>) {  // shapes and counts leave the experts as they are
      restore_stacks(p);  // the visitor reads (or replaces) the stacks whole
      p.prepared = std::make_shared<PreparedExperts>();  // the stacked kernels may change: re-slice on next use
      p.hash = std::make_shared<HashTable>();
    }
    {
      Scope<V> s(v, "gate");
      v.matrix("kernel", p.gate.kernel, {{D}, {E}, Init::truncated_normal, s_.init_scale});
      if (s_.gate_bias && !s_.hash_routing) v.vector("bias", p.gate.bias, {{E}, Init::zeros});
    }
    // MaxText initialises the table with zeros (every token to expert 0, k times); checkpoints carry the real one.
    if (s_.hash_routing) v.vector("tid2eid", p.tid2eid, {{s_.vocab_size, s_.routing.num_experts_per_tok}, Init::zeros});
    if (s_.gemma4_routing) v.vector("per_expert_scale", p.per_expert_scale, {{E}, Init::ones});
    // Expert kernels are initialised by MaxText with in-axis 0 (E) and out-axis 1: fan_in = E * (last dim). They are
    // prepared per expert (PreparedExperts), not as one stacked matrix.
    const auto Ed = static_cast<double>(E);
    v.matrix("wi_0", p.wi_0,
             {{D}, {F}, Init::truncated_normal, s_.init_scale, 1.0, {El}, Ed * static_cast<double>(F), false});
    v.matrix("wi_1", p.wi_1,
             {{D}, {F}, Init::truncated_normal, s_.init_scale, 1.0, {El}, Ed * static_cast<double>(F), false});
    v.matrix("wo", p.wo, {{F}, {D}, Init::truncated_normal, s_.init_scale, 1.0, {El}, Ed * static_cast<double>(D), false});
    if (s_.mlp_bias) {
      v.vector("wi_0_bias", p.wi_0_bias, {{El, F}, Init::zeros});
      v.vector("wi_1_bias", p.wi_1_bias, {{El, F}, Init::zeros});
      v.vector("wo_bias", p.wo_bias, {{El, D}, Init::zeros});
    }
  }

  /// x [B*T, D] -> y [B*T, D] (y must not alias x), rows laid out as ctx.step (B rows of T tokens; the capacity
  /// limit and the load-balance statistics are per batch row). Fills `metrics` when given. The router reads
  /// `gate_x` [B*T, D] when given (moe.py's gate_inputs), else x.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y, MoeMetrics* metrics = nullptr,
               View<const A, 2> gate_x = {}) const {
    static_assert(BackendMoE<B>, "RoutedMoE needs the backend's MoE kernels (BackendMoE)");
    if (s_.float32_gate_logits) {
      run<float>(ctx, p, x, y, metrics, gate_x);
    } else {
      run<A>(ctx, p, x, y, metrics, gate_x);
    }
  }

  /// The per-expert matrices of `p`, sliced and prepared by the backend on first use.
  static const PreparedExperts& prepared(const B& be, const Params& p, std::int64_t E, std::int64_t F, std::int64_t D) {
    MAXTEXT_CHECK(p.prepared != nullptr, ArgumentError, "[RoutedMoE] parameters were not loaded or initialised");
    std::call_once(p.prepared->once, [&] {
      PreparedExperts& x = *p.prepared;
      for (std::int64_t e = 0; e < E; ++e) {
        x.wi_0.push_back(be.prepare(expert_matrix(p.wi_0, e, F)));
        x.wi_1.push_back(be.prepare(expert_matrix(p.wi_1, e, F)));
        x.wo.push_back(be.prepare(expert_matrix(p.wo, e, D)));
      }
      release_stacks(be, p, x);
    });
    return *p.prepared;
  }

  /// After every expert of a stack is packed (CpuBackend::prepare): when the stack is a copy the loader made and nothing
  /// else holds, let it go, as CpuBackend::release_rows does for one matrix. A mapped file's stack is kept (prepare
  /// handed its pages back; it costs nothing resident), and so is one on a backend that does not pack.
  static void release_stacks(const B& be, const Params& p, PreparedExperts& x) {
    // Where the backend packs W into panels of its own (the types pack_rows takes; not a runtime-typed file matrix,
    // whose kernels read the stack where it lies) and rebuilds rows from them.
    using Rows = std::function<void(std::int64_t, std::int64_t, W*)>;
    if constexpr (std::is_copy_constructible_v<B> &&
                  requires(const Matrix<W>& m, const Rows& f, std::int64_t n) {
                    be.unpacked(m);
                    be.template pack_rows<W>(n, n, n, f);
                  }) {
      bool released = false;
      auto release = [&](Matrix<W>& stack, std::vector<Matrix<W>>& experts) {
        if (stack.data.empty() || !stack.data.host_accessible() || in_readonly_mapping(stack.data.data())) return;
        for (const Matrix<W>& m : experts) {
          if (!m.packed) return;
        }
        for (Matrix<W>& m : experts) m.data = Tensor<W, 2>();  // packed: rows are rebuilt from the panels on demand
        if (stack.data.holder().use_count() == 1) {
          stack.data = Tensor<W, 2>();
          released = true;
        }
      };
      release(p.wi_0, x.wi_0);
      release(p.wi_1, x.wi_1);
      release(p.wo, x.wo);
      if (released) {
        x.unpack = [copy = be](const Matrix<W>& m) { return copy.unpacked(m); };
        trim_heap();
      }
    }
  }

  /// The stacks release_stacks let go, rebuilt from the experts' panels (exact), before a visitor reads them.
  static void restore_stacks(Params& p) {
    const PreparedExperts* x = p.prepared.get();
    if (x == nullptr || !x->unpack) return;
    auto restore = [&](Matrix<W>& stack, const std::vector<Matrix<W>>& experts) {
      if (!stack.data.empty() || experts.empty()) return;
      const std::int64_t per = experts.front().rows, sc = stack.storage_cols();
      Tensor<W, 2> all({per * static_cast<std::int64_t>(experts.size()), sc});
      for (std::size_t e = 0; e < experts.size(); ++e) {
        const Tensor<W, 2> rows = x->unpack(experts[e]);
        MAXTEXT_CHECK(rows.dim(0) == per && rows.dim(1) == sc, ShapeError, "[RoutedMoE] expert ", e, " rebuilt as [",
                      rows.dim(0), ", ", rows.dim(1), "], expected [", per, ", ", sc, "]");
        std::copy(rows.data(), rows.data() + per * sc, all.data() + static_cast<std::int64_t>(e) * per * sc);
      }
      stack.data = std::move(all);
    };
    restore(p.wi_0, x->wi_0);
    restore(p.wi_1, x->wi_1);
    restore(p.wo, x->wo);
  }

  /// Expert e's out-major matrix inside a stacked expert kernel (a view, no copy).
  static Matrix<W> expert_matrix(const Matrix<W>& all, std::int64_t e, std::int64_t rows_per_expert) {
    Matrix<W> m;
    m.rows = rows_per_expert;
    m.cols = all.cols;
    m.ggml_type = all.ggml_type;
    m.value_scale = all.value_scale;
    const std::int64_t sc = all.storage_cols();
    m.data = Tensor<W, 2>(View<W, 2>(all.data.data() + e * rows_per_expert * sc, {rows_per_expert, sc}),
                          all.data.holder(), all.data.host_accessible());
    return m;
  }

 private:
  template <class G>
  void run(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y, MoeMetrics* metrics,
           View<const A, 2> gate_x) const {
    ScratchScope scope(ctx.scratch);
    const auto& be = ctx.be;
    const std::int64_t M = x.dim(0), E = s_.num_experts, k = s_.routing.num_experts_per_tok;
    const std::int64_t D = s_.in_features, F = s_.intermediate_dim;
    const std::int64_t Bn = ctx.step.batch > 0 ? ctx.step.batch : 1, T = M / Bn;
    MAXTEXT_CHECK(x.dim(1) == D && y.dim(0) == M && y.dim(1) == D && Bn * T == M, ShapeError,
                  "[RoutedMoE] input [", M, ",", x.dim(1), "] for ", Bn, " rows of experts with input dim ", D);
    if (M == 0) return;
    MAXTEXT_CHECK(gate_x.empty() || (gate_x.dim(0) == M && gate_x.dim(1) == D), ShapeError, "[RoutedMoE] gate input [",
                  gate_x.dim(0), ",", gate_x.dim(1), "] for ", M, " tokens of ", D, " features");

    // Gate: z = x W_gate in the gate dtype G; the bias is added after the score function (in moe_route).
    View<G, 2> z = ctx.scratch.template alloc<G, 2>({M, E});
    be.matmul(gate_x.empty() ? x : gate_x, p.gate.kernel, z);
    View<const G, 1> bias;
    if (s_.gate_bias && !s_.hash_routing) {
      if constexpr (std::is_same_v<G, float>) {
        bias = p.gate.bias.cview();
      } else {  // cast(bias, gate dtype), one rounding from f32
        View<G, 2> bg = ctx.scratch.template alloc<G, 2>({1, E});
        be.convert(View<const float, 2>(p.gate.bias.data(), {1, E}), bg);
        bias = View<const G, 1>(bg.data(), {E});
      }
    }
    const bool drop = !s_.sparse_matmul && s_.capacity_factor > 0;
    const bool lb = s_.load_balance_loss_weight > 0 && (s_.sparse_matmul || !s_.inference_call);
    const bool need_scores = lb || (drop && s_.inference_call) || s_.gemma4_routing || s_.hash_routing;
    View<std::int32_t, 2> idx = ctx.scratch.template alloc<std::int32_t, 2>({M, k});
    View<float, 2> w = ctx.scratch.template alloc<float, 2>({M, k});
    View<float, 2> sc;
    if (need_scores) sc = ctx.scratch.template alloc<float, 2>({M, E});
    be.template moe_route<G, A>(View<const G, 2>(z), bias, s_.routing, idx, w, sc);

    std::vector<std::int32_t> idx_h(static_cast<std::size_t>(M * k));
    std::vector<float> w_h(static_cast<std::size_t>(M * k)), sc_h;
    be.copy(idx_h.data(), idx.data(), idx_h.size() * sizeof(std::int32_t), CopyKind::device_to_host);
    be.copy(w_h.data(), w.data(), w_h.size() * sizeof(float), CopyKind::device_to_host);
    if (need_scores) {
      sc_h.resize(static_cast<std::size_t>(M * E));
      be.copy(sc_h.data(), sc.data(), sc_h.size() * sizeof(float), CopyKind::device_to_host);
    }
    std::vector<A> expert_scale_h;  // gemma4_routing: per_expert_scale, fetched with the routing in one synchronize
    if (s_.gemma4_routing) {
      MAXTEXT_CHECK(p.per_expert_scale.size() == E, ShapeError, "[RoutedMoE] per_expert_scale has ",
                    p.per_expert_scale.size(), " entries for ", E, " experts");
      expert_scale_h.resize(static_cast<std::size_t>(E));
      be.copy(expert_scale_h.data(), p.per_expert_scale.data(), expert_scale_h.size() * sizeof(A), CopyKind::device_to_host);
    }
    be.synchronize();
    if (s_.hash_routing) hash_route<G>(ctx, p, sc_h, idx_h, w_h);
    for (std::int32_t e : idx_h) {
      MAXTEXT_CHECK(e >= 0 && e < E, ShapeError, "[RoutedMoE] routing returned expert ", e, " outside [0, ", E, ")");
    }

    if (s_.gemma4_routing) gemma4_weights(sc_h, idx_h, expert_scale_h, w_h);

    // Which assignments (token, rank) are computed, and with which combine weight.
    std::vector<char> keep(idx_h.size(), 1);
    std::vector<float> cw = w_h;
    if (s_.hash_routing) {  // a table row naming an expert twice: one computation with the summed weight
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t j = 1; j < k; ++j) {
          const auto i = static_cast<std::size_t>(m * k + j);
          for (std::int64_t jj = 0; jj < j; ++jj) {
            const auto f = static_cast<std::size_t>(m * k + jj);
            if (keep[f] && idx_h[f] == idx_h[i]) {
              cw[f] += cw[i];
              keep[i] = 0;
              break;
            }
          }
        }
      }
    }
    if (drop) {
      // Per batch row: capacity C = int(max(ceil(T*k/E) * cf, cf)); assignments counted token-major, rank-minor.
      const double cf = s_.capacity_factor;
      const auto C = static_cast<std::int64_t>(
          std::max(std::ceil(static_cast<double>(T * k) / static_cast<double>(E)) * cf, cf));
      std::vector<std::int64_t> running(static_cast<std::size_t>(E));
      for (std::int64_t b = 0; b < Bn; ++b) {
        std::fill(running.begin(), running.end(), 0);
        for (std::int64_t i = b * T * k; i < (b + 1) * T * k; ++i) {
          if (++running[static_cast<std::size_t>(idx_h[static_cast<std::size_t>(i)])] > C) keep[static_cast<std::size_t>(i)] = 0;
        }
      }
      if (s_.inference_call) {
        // MaxText's inference combine weights: the full softmax over E of the (biased) scores.
        for (std::int64_t m = 0; m < M; ++m) {
          const float* s = &sc_h[static_cast<std::size_t>(m * E)];
          float mx = -std::numeric_limits<float>::infinity(), sum = 0.0f;
          for (std::int64_t e = 0; e < E; ++e) mx = std::max(mx, s[e]);
          for (std::int64_t e = 0; e < E; ++e) sum += std::exp(s[e] - mx);
          for (std::int64_t j = 0; j < k; ++j) {
            const auto i = static_cast<std::size_t>(m * k + j);
            cw[i] = std::exp(s[idx_h[i]] - mx) / sum;
          }
        }
      }
    }
    if (!s_.sparse_matmul) {
      for (float& v : cw) v = round_to<A>(v);  // the dense path holds the combine weights in dtype
    }
    View<const A, 2> xin = x;  // the rows the experts read
    if (s_.scale_inputs) {     // llama4 (k = 1): x_m * round(sigmoid(w_m)) in dtype, combined with weight 1
      View<A, 2> xs = ctx.scratch.template alloc<A, 2>({M, D});
      be.copy(x, xs);
      be.scale_rows(xs, View<const float, 2>(w), Activation::sigmoid);  // w is [M, 1]: one call, not one per row
      xin = xs;
      std::fill(cw.begin(), cw.end(), 1.0f);
    }

    // Group the kept assignments by expert (token order within an expert).
    std::vector<std::int64_t> counts(static_cast<std::size_t>(E)), kept(static_cast<std::size_t>(E)),
        off(static_cast<std::size_t>(E + 1));
    for (std::size_t i = 0; i < idx_h.size(); ++i) {
      ++counts[static_cast<std::size_t>(idx_h[i])];
      if (keep[i]) ++kept[static_cast<std::size_t>(idx_h[i])];
    }
    for (std::int64_t e = 0; e < E; ++e) off[static_cast<std::size_t>(e + 1)] = off[static_cast<std::size_t>(e)] + kept[static_cast<std::size_t>(e)];
    const std::int64_t total = off[static_cast<std::size_t>(E)];
    std::vector<std::int32_t> rows_h(static_cast<std::size_t>(std::max<std::int64_t>(total, 1)));
    std::vector<float> wts_h(rows_h.size());
    {
      std::vector<std::int64_t> pos(off.begin(), off.end() - 1);
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t j = 0; j < k; ++j) {
          const auto i = static_cast<std::size_t>(m * k + j);
          if (!keep[i]) continue;
          const auto q = static_cast<std::size_t>(pos[static_cast<std::size_t>(idx_h[i])]++);
          rows_h[q] = static_cast<std::int32_t>(m);
          wts_h[q] = cw[i];
        }
      }
    }
    std::int64_t nmax = 0;
    for (auto n : kept) nmax = std::max(nmax, n);

    View<float, 2> acc = ctx.scratch.template alloc<float, 2>({M, D});
    if (be.memory()->host_accessible()) {
      std::fill(acc.data(), acc.data() + M * D, 0.0f);
    } else {
      const std::vector<float> zeros(static_cast<std::size_t>(M * D), 0.0f);
      be.copy(acc.data(), zeros.data(), zeros.size() * sizeof(float), CopyKind::host_to_device);
    }
    if (total > 0) {
      View<std::int32_t, 1> rows_d = ctx.scratch.template alloc<std::int32_t, 1>({total});
      View<float, 1> wts_d = ctx.scratch.template alloc<float, 1>({total});
      be.copy(rows_d.data(), rows_h.data(), static_cast<std::size_t>(total) * sizeof(std::int32_t), CopyKind::host_to_device);
      be.copy(wts_d.data(), wts_h.data(), static_cast<std::size_t>(total) * sizeof(float), CopyKind::host_to_device);
      const std::int64_t e0 = s_.expert_begin, El = local_experts();
      const PreparedExperts& ex = prepared(be, p, El, F, D);
      View<A, 2> xe = ctx.scratch.template alloc<A, 2>({nmax, D});
      View<A, 2> h0 = ctx.scratch.template alloc<A, 2>({nmax, F});
      View<A, 2> h1 = ctx.scratch.template alloc<A, 2>({nmax, F});
      // Tensor parallelism (models/parallel.hpp) splits every expert by its hidden columns: this rank's product with
      // its rows of wo is a partial sum, kept in f32 (weighted and added into acc, then summed over the ranks), and
      // the output bias is added once, by rank 0.
      const bool cols_split = ctx.split();
      const bool own_bias = !cols_split || ctx.comm->rank() == 0;
      View<A, 2> ye = cols_split ? View<A, 2>() : ctx.scratch.template alloc<A, 2>({nmax, D});
      View<float, 2> yf = cols_split ? ctx.scratch.template alloc<float, 2>({nmax, D}) : View<float, 2>();
      for (std::int64_t e = 0; e < E; ++e) {
        const std::int64_t n = kept[static_cast<std::size_t>(e)], o = off[static_cast<std::size_t>(e)];
        if (n == 0 || e < e0 || e >= e0 + El) continue;  // an expert without tokens, or another rank's, costs nothing
        View<const std::int32_t, 1> rows(rows_d.data() + o, {n});
        View<const float, 1> wts(wts_d.data() + o, {n});
        View<A, 2> xn = xe.narrow(0, 0, n), a0 = h0.narrow(0, 0, n), a1 = h1.narrow(0, 0, n);
        be.gather_rows(xin, rows, xn);
        const auto ue = static_cast<std::size_t>(e - e0);
        be.matmul(View<const A, 2>(xn), ex.wi_0[ue], a0, bias_row(p.wi_0_bias, e - e0, F));
        be.matmul(View<const A, 2>(xn), ex.wi_1[ue], a1, bias_row(p.wi_1_bias, e - e0, F));
        if (s_.clamped_glu) {
          be.clamped_glu(View<const A, 2>(a0), View<const A, 2>(a1), s_.activation, s_.glu_alpha, s_.glu_limit, a0,
                         s_.glu_form);
        } else {
          // activations_in_float32 acts only on MaxText's dense path (the sparse path ignores it).
          be.activation(View<const A, 2>(a0), s_.activation, View<const A, 2>(a1), Activation::linear, a0,
                        s_.sparse_matmul || !s_.activations_in_float32);
        }
        const View<const A, 1> out_bias = own_bias ? bias_row(p.wo_bias, e - e0, D) : View<const A, 1>();
        if (cols_split) {
          View<float, 2> yn = yf.narrow(0, 0, n);
          be.matmul(View<const A, 2>(a0), ex.wo[ue], yn, out_bias);
          be.scatter_add_rows(View<const float, 2>(yn), rows, wts, acc);
        } else {
          View<A, 2> yn = ye.narrow(0, 0, n);
          be.matmul(View<const A, 2>(a0), ex.wo[ue], yn, out_bias);
          be.scatter_add_rows(View<const A, 2>(yn), rows, wts, acc);
        }
      }
    }
    // Expert parallelism: every rank routed alike and ran its own experts; their weighted sums add up in f32 before
    // the one rounding, as one process's sum over all experts does (in another order).
    if (s_.local_experts > 0 && s_.local_experts < E) ctx.expert_all_reduce(acc, "moe");
    ctx.all_reduce(acc, "moe");  // split by columns: the ranks' partial sums (nothing when the model is not split)
    be.convert(View<const float, 2>(acc), y);

    if (metrics) {
      MoeMetrics& mt = *metrics;
      mt = MoeMetrics{};
      mt.tokens = M;
      mt.k = k;
      mt.topk_indices = idx_h;
      mt.topk_weights = w_h;
      mt.expert_counts = counts;
      mt.expert_kept = kept;
      mt.dropped = M * k - total;
      if (lb) {
        // p = round(softmax_E(s)); density/prob averaged per batch row over its T tokens (moe.md Training-only).
        double loss = 0.0;
        std::vector<double> dens(static_cast<std::size_t>(E)), prob(static_cast<std::size_t>(E));
        for (std::int64_t b = 0; b < Bn; ++b) {
          std::fill(dens.begin(), dens.end(), 0.0);
          std::fill(prob.begin(), prob.end(), 0.0);
          for (std::int64_t t = 0; t < T; ++t) {
            const std::int64_t m = b * T + t;
            const float* s = &sc_h[static_cast<std::size_t>(m * E)];
            float mx = -std::numeric_limits<float>::infinity(), sum = 0.0f;
            for (std::int64_t e = 0; e < E; ++e) mx = std::max(mx, s[e]);
            for (std::int64_t e = 0; e < E; ++e) sum += std::exp(s[e] - mx);
            for (std::int64_t e = 0; e < E; ++e) prob[static_cast<std::size_t>(e)] += round_to<A>(std::exp(s[e] - mx) / sum);
            for (std::int64_t j = 0; j < k; ++j) dens[static_cast<std::size_t>(idx_h[static_cast<std::size_t>(m * k + j)])] += 1.0;
          }
          for (std::int64_t e = 0; e < E; ++e) {
            loss += (dens[static_cast<std::size_t>(e)] / static_cast<double>(T)) * (prob[static_cast<std::size_t>(e)] / static_cast<double>(T));
          }
        }
        mt.has_load_balance_loss = true;
        mt.load_balance_loss = loss / static_cast<double>(Bn * E) * static_cast<double>(E * E) * s_.load_balance_loss_weight;
      }
      if (s_.bias_update_rate > 0) {
        const double avg = static_cast<double>(M * k) / static_cast<double>(E);
        mt.bias_updates.resize(static_cast<std::size_t>(E));
        for (std::int64_t e = 0; e < E; ++e) {
          const double d = avg - static_cast<double>(counts[static_cast<std::size_t>(e)]);
          mt.bias_updates[static_cast<std::size_t>(e)] = static_cast<float>((d > 0) - (d < 0)) * static_cast<float>(s_.bias_update_rate);
        }
      }
    }
  }

  /// gemma4_routing's weights from the gate logits `s` [M, E] (as moe_route returned them, in the gate dtype), the
  /// chosen experts `idx` [M, k] and per_expert_scale on the host: w = round(softmax_f32(s)[e]); with norm_topk_prob
  /// w = round(w / round(sum_j w_j)); then w = round(w * per_expert_scale[e]).
  void gemma4_weights(const std::vector<float>& s, const std::vector<std::int32_t>& idx, const std::vector<A>& scale,
                      std::vector<float>& w) const {
    const std::int64_t E = s_.num_experts, k = s_.routing.num_experts_per_tok;
    const auto M = static_cast<std::int64_t>(idx.size()) / k;
    for (std::int64_t m = 0; m < M; ++m) {
      const float* z = &s[static_cast<std::size_t>(m * E)];
      float mx = -std::numeric_limits<float>::infinity(), sum = 0.0f;
      for (std::int64_t e = 0; e < E; ++e) mx = std::max(mx, z[e]);
      for (std::int64_t e = 0; e < E; ++e) sum += std::exp(z[e] - mx);
      float* wm = &w[static_cast<std::size_t>(m * k)];
      const std::int32_t* im = &idx[static_cast<std::size_t>(m * k)];
      float total = 0.0f;
      for (std::int64_t j = 0; j < k; ++j) {
        wm[j] = round_to<A>(std::exp(z[im[j]] - mx) / sum);
        total += wm[j];
      }
      const float denom = round_to<A>(total);
      for (std::int64_t j = 0; j < k; ++j) {
        if (s_.norm_topk_prob) wm[j] = round_to<A>(wm[j] / denom);
        wm[j] = round_to<A>(wm[j] * to_float(scale[static_cast<std::size_t>(im[j])]));
      }
    }
  }

  static View<const A, 1> bias_row(const Tensor<A, 1>& b, std::int64_t e, std::int64_t n) {
    if (b.empty()) return {};
    return View<const A, 1>(b.data() + e * n, {n});
  }

  /// Hash routing (moe.py get_topk with is_hash_routing, then deepseek_scale_weights): token m's experts are
  /// tid2eid[token], weighted by their scores s (sc: the unbiased scores, the gate has no bias here), normalised
  /// and scaled as moe_route does, in the gate dtype G.
  template <class G>
  void hash_route(const Context<P>& ctx, const Params& p, const std::vector<float>& sc, std::vector<std::int32_t>& idx,
                  std::vector<float>& w) const {
    const std::int64_t k = s_.routing.num_experts_per_tok, E = s_.num_experts, M = static_cast<std::int64_t>(idx.size()) / k;
    const auto* ds = ctx.decoder;
    MAXTEXT_CHECK(ds != nullptr && static_cast<std::int64_t>(ds->tokens.size()) == M, ArgumentError,
                  "[RoutedMoE] hash routing (first_num_hash_layers) routes each token by its id: it runs inside a "
                  "model's forward, which hands the layer the step's ", M, " token ids");
    const std::vector<std::int32_t>& table = hash_table(ctx.be, p);
    const MoeRouting& r = s_.routing;
    for (std::int64_t m = 0; m < M; ++m) {
      const std::int32_t tok = ds->tokens[static_cast<std::size_t>(m)];
      MAXTEXT_CHECK(tok >= 0 && tok < s_.vocab_size, ArgumentError, "[RoutedMoE] token id ", tok,
                    " has no row in the hash routing table tid2eid (vocab ", s_.vocab_size, ")");
      float sum = 0.0f;
      for (std::int64_t j = 0; j < k; ++j) {
        const auto i = static_cast<std::size_t>(m * k + j);
        idx[i] = table[static_cast<std::size_t>(tok * k + j)];
        w[i] = sc[static_cast<std::size_t>(m * E + idx[i])];
        sum = round_to<G>(sum + w[i]);  // summed in G as moe_route does
      }
      for (std::int64_t j = 0; j < k; ++j) {
        float& v = w[static_cast<std::size_t>(m * k + j)];
        if (r.normalize) v = round_to<G>(v / round_to<G>(sum + r.normalize_eps));
        if (r.scale != 1.0f) v = round_to<G>(v * round_to<G>(r.scale));
      }
    }
  }
  /// tid2eid on the host, each entry checked to be an expert id.
  const std::vector<std::int32_t>& hash_table(const B& be, const Params& p) const {
    const std::int64_t k = s_.routing.num_experts_per_tok, E = s_.num_experts, n = s_.vocab_size * k;
    MAXTEXT_CHECK(p.hash != nullptr && p.tid2eid.size() == n, ShapeError, "[RoutedMoE] the hash routing table tid2eid "
                  "has ", p.tid2eid.size(), " entries, expected vocab_size x num_experts_per_tok = ", s_.vocab_size, " x ",
                  k);
    std::call_once(p.hash->once, [&] {
      std::vector<float> f(static_cast<std::size_t>(n));
      be.copy(f.data(), p.tid2eid.data(), f.size() * sizeof(float), CopyKind::device_to_host);
      be.synchronize();
      std::vector<std::int32_t> ids(f.size());
      for (std::size_t i = 0; i < f.size(); ++i) {
        MAXTEXT_CHECK(f[i] >= 0.0f && f[i] < static_cast<float>(E) && f[i] == std::floor(f[i]), ShapeError,
                      "[RoutedMoE] tid2eid[", static_cast<std::int64_t>(i) / k, ", ", static_cast<std::int64_t>(i) % k,
                      "] = ", f[i], " is not an expert id in [0, ", E, ")");
        ids[i] = static_cast<std::int32_t>(f[i]);
      }
      p.hash->experts = std::move(ids);
    });
    return p.hash->experts;
  }

  Settings s_;
};

/// The `shared_experts` MlpBlock of a routed-and-shared MoE: D -> F -> D with the config's activations, no bias, no
/// pre-norm, truncated-normal init at dense_init_scale.
template <TensorPolicy P>
MlpBlock<P> shared_expert_mlp(const Config& c, std::int64_t D, std::int64_t F) {
  return MlpBlock<P>(typename MlpBlock<P>::Config{D, F, parse_activations(c.mlp_activations), false, false, NormKind::rms,
                                                  static_cast<float>(c.normalization_layer_epsilon), c.fused_mlp,
                                                  c.activations_in_float32, Init::truncated_normal, c.dense_init_scale});
}

/// MaxText RoutedAndSharedMoE (DeepSeek MoE layers, path `DeepSeekMoeBlock_0`): `MoeBlock_0` = RoutedMoE with
/// F = moe_mlp_dim, plus `shared_experts` = MlpBlock(hidden shared_experts * moe_mlp_dim, mlp_activations, no bias,
/// no pre-norm); out = routed(x) + shared(x) in dtype.
template <TensorPolicy P>
class RoutedAndSharedMoE {
 public:
  using A = typename P::act_t;
  struct Params {
    typename RoutedMoE<P>::Params MoeBlock_0;
    typename MlpBlock<P>::Params shared_experts;
  };

  RoutedAndSharedMoE() = default;
  /// `family`: the routing variant (deepseek for DeepSeek-V2/V3/V4, llama4); `hash_routing`: a deepseek4 layer
  /// below first_num_hash_layers (RoutedMoE::Settings::hash_routing).
  RoutedAndSharedMoE(const Config& c, MoeFamily family, bool hash_routing = false)
      : routed_(with_hash(RoutedMoE<P>::settings(c, c.moe_mlp_dim, family), hash_routing)) {
    MAXTEXT_CHECK(c.moe_mlp_dim > 0, ConfigError, "[RoutedAndSharedMoE] base_moe_mlp_dim must be > 0, found ",
                  c.base_moe_mlp_dim);
    MAXTEXT_CHECK(c.shared_experts >= 0, ConfigError, "[RoutedAndSharedMoE] shared_experts must be >= 0, found ",
                  c.shared_experts);
    if (c.shared_experts > 0) {
      shared_ = shared_expert_mlp<P>(c, routed_.settings().in_features, c.shared_experts * c.moe_mlp_dim);
      has_shared_ = true;
    }
  }
  const RoutedMoE<P>& routed() const { return routed_; }

  template <class V>
  void visit(V& v, Params& p) const {
    visit_child(v, "MoeBlock_0", routed_, p.MoeBlock_0);
    if (has_shared_) visit_child(v, "shared_experts", shared_, p.shared_experts);
  }

  /// x [B*T, D] -> y [B*T, D] (y must not alias x).
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> x, View<A, 2> y, MoeMetrics* metrics = nullptr) const {
    routed_.forward(ctx, p.MoeBlock_0, x, y, metrics);
    if (!has_shared_) return;
    ScratchScope scope(ctx.scratch);
    View<A, 2> s = ctx.scratch.template alloc<A, 2>({x.dim(0), x.dim(1)});
    shared_.forward(ctx, p.shared_experts, x, s);
    ctx.be.add(View<const A, 2>(y), View<const A, 2>(s), y);
  }

 private:
  static typename RoutedMoE<P>::Settings with_hash(typename RoutedMoE<P>::Settings s, bool hash) {
    s.hash_routing = hash;
    return s;
  }

  RoutedMoE<P> routed_;
  MlpBlock<P> shared_;
  bool has_shared_ = false;
};

/// Record a MoE block's metrics under `<name>.topk_indices` [B,T,k], `.topk_weights` [B,T,k], `.expert_counts` [E],
/// `.expert_kept` [E], `.moe_lb_loss` [1] and `.moe_bias_updates` [E] (those requested; f32 host tensors).
template <TensorPolicy P>
void sow_moe_metrics(const Context<P>& ctx, const std::string& name, const MoeMetrics& m) {
  if (ctx.capture == nullptr) return;
  auto put = [&](const std::string& what, std::vector<float> v, std::vector<std::int64_t> shape) {
    const std::string n = name + "." + what;
    if (!ctx.capture->wants(n)) return;
    Tensor<float, 1> t({static_cast<std::int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data());
    ctx.capture->put(n, AnyTensor::from(t, n).reshaped(std::move(shape)));
  };
  const std::int64_t Bn = ctx.step.batch > 0 ? ctx.step.batch : 1, T = m.tokens / Bn;
  const auto E = static_cast<std::int64_t>(m.expert_counts.size());
  put("topk_indices", std::vector<float>(m.topk_indices.begin(), m.topk_indices.end()), {Bn, T, m.k});
  put("topk_weights", m.topk_weights, {Bn, T, m.k});
  put("expert_counts", std::vector<float>(m.expert_counts.begin(), m.expert_counts.end()), {E});
  put("expert_kept", std::vector<float>(m.expert_kept.begin(), m.expert_kept.end()), {E});
  if (m.has_load_balance_loss) put("moe_lb_loss", {static_cast<float>(m.load_balance_loss)}, {1});
  if (!m.bias_updates.empty()) put("moe_bias_updates", m.bias_updates, {E});
}

}  // namespace maxtext::layers
