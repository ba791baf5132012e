// families/qwen/vision.hpp: the vision encoder and projector of Qwen3-Omni and Qwen3.5, as MaxText defines them
// (models/qwen3.py Qwen3OmniMoeVisionPatchEmbed, Qwen3OmniMoeVisionBlock, Qwen3OmniMoeVisionAttention,
// Qwen3OmniMoeVisionPatchMerger, Qwen3OmniMoeVisionEncoder, Qwen3OmniMoeVisionProjector; models/qwen3_5_vision.py, whose
// Qwen3_5MoeVision* classes only rename them; layers/embeddings.py Qwen3OmniMoeVisionRotaryEmbedding,
// Qwen3OmniMoeVisionPosEmbedInterpolate, generate_block_coords). A picture's patches, as the processor flattens them
// (pixel_values [T, C * tp * p * p]: each patch's values in (channel, frame, row, column) order, the patches of a
// t x h x w grid in merge-window order: the m x m windows row-major, the patches of a window row-major), give T / m^2
// soft tokens of the text model's width, and the deepstack features of the chosen layers.
//
//   x = pixel_values . W_patch + b_patch                         (the 3-D convolution with stride = kernel, as a product)
//   x = x + pos                                                  (the learned N x N table, bilinearly interpolated to the
//        h x w grid at each patch's (row, column) in [0, N - 1]: y = row / max(h - 1, 1) * (N - 1), likewise x;
//        rounded to bfloat16, as MaxText's Qwen3OmniMoeVisionPosEmbedInterpolate casts to its fprop dtype)
//   L blocks: x = x + Attn(LN_1(x)); x = x + fc2(gelu_tanh(fc1(LN_2(x))))
//     Attn: q, k, v, out projections with biases; the 2-D rotary on q and k (rotate-half over the whole head; angle i <
//     hd/4: row * theta^(-4i/hd), hd/4 <= i < hd/2: column * theta^(-4(i - hd/4)/hd)); q scaled by hd^-0.5; softmax over
//     all patches of the picture
//   deepstack merger j (after block deepstack_visual_indexes[j]): each window's m^2 rows concatenated, LN over m^2 D,
//     fc2(gelu_tanh(fc1(.)))
//   projector (the final merger): LN over D per row, the window's rows concatenated, fc2(gelu_tanh(fc1(.)))
// LN is flax's LayerNorm (eps = normalization_layer_epsilon). Everything in float32 (MaxText's dtype_mm). No operation
// is new (the products, LayerNorm, rotary and whole-sequence attention of the other towers), so it runs on every backend.
//
// Weights: MaxText's tree (vision_encoder.Qwen3_5MoeVisionEncoder_0... for Qwen3.5, Qwen3OmniMoeVisionEncoder_0... for
// Qwen3-Omni), or a Hugging Face checkpoint's model.visual.* tensors through qwen3_vision_from_hf (MaxText's converter's
// mapping, param_mapping.py QWEN3_5_* / QWEN3_OMNI_MOE_*: the fused qkv split, linear weights transposed, the patch
// kernel [D, C, tp, p, p] as MaxText's convolution kernel [tp, p, p, C, D]).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/ops.hpp"
#include "maxtext/backend/vision.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/vision_config.hpp"
#include "maxtext/layers/vision_step.hpp"

namespace maxtext::layers {

/// The sizes of Qwen3-Omni's / Qwen3.5's vision encoder (defaults: Qwen3.5-35B-A3B, qwen3.5-35b-a3b.yml).
struct Qwen3VisionConfig {
  std::int64_t patch_size = 16;
  std::int64_t temporal_patch_size = 2;
  std::int64_t num_channels = 3;
  std::int64_t hidden_size = 1152;
  std::int64_t intermediate_size = 4304;
  std::int64_t num_layers = 27;
  std::int64_t num_heads = 16;
  std::int64_t spatial_merge_size = 2;
  std::int64_t out_hidden_size = 2048;  ///< the text model's embedding width
  std::int64_t num_position_embeddings = 2304;
  std::vector<std::int64_t> deepstack_layers;  ///< deepstack_visual_indexes_for_vit (none for Qwen3.5)
  double rope_theta = 10000.0;
  float eps = 1e-6f;
  std::string module = "Qwen3_5MoeVision";  ///< MaxText's class prefix: Qwen3_5MoeVision or Qwen3OmniMoeVision

  std::int64_t head_dim() const { return hidden_size / num_heads; }
  std::int64_t patch_values() const { return num_channels * temporal_patch_size * patch_size * patch_size; }
  std::int64_t grid_side() const { return static_cast<std::int64_t>(std::lround(std::sqrt(static_cast<double>(num_position_embeddings)))); }
  std::int64_t merged_width() const { return hidden_size * spatial_merge_size * spatial_merge_size; }

  /// Refuses sizes MaxText's model cannot run, by MaxText's key names.
  void validate() const {
    const auto positive = [](std::int64_t v, std::int64_t most, const char* key) {
      MAXTEXT_CHECK(v > 0 && v <= most, ConfigError, "[qwen3 vision] ", key, " must be in [1, ", most, "], found ", v);
    };
    positive(patch_size, 256, "patch_size_for_vit");
    positive(temporal_patch_size, 16, "temporal_patch_size_for_vit");
    positive(num_channels, 16, "num_channels_for_vit");
    positive(hidden_size, 1 << 16, "hidden_size_for_vit");
    positive(intermediate_size, 1 << 20, "intermediate_size_for_vit");
    positive(num_layers, 1024, "num_hidden_layers_for_vit");
    positive(num_heads, hidden_size, "num_attention_heads_for_vit");
    positive(spatial_merge_size, 16, "spatial_merge_size_for_vit");
    positive(out_hidden_size, 1 << 20, "out_hidden_size_for_vit");
    positive(num_position_embeddings, 1 << 22, "num_position_embeddings_for_vit");
    MAXTEXT_CHECK(std::isfinite(eps) && eps > 0.0f, ConfigError,
                  "[qwen3 vision] normalization_layer_epsilon must be > 0, found ", eps);
    MAXTEXT_CHECK(std::isfinite(rope_theta) && rope_theta > 0.0, ConfigError,
                  "[qwen3 vision] rope_theta_for_vit must be > 0, found ", rope_theta);
    MAXTEXT_CHECK(hidden_size % num_heads == 0 && head_dim() % 4 == 0, UnsupportedError,
                  "[qwen3 vision] hidden_size_for_vit / num_attention_heads_for_vit (", hidden_size, " / ", num_heads,
                  ") must be a whole head size divisible by 4: the 2-D rotary gives rows and columns a quarter each");
    MAXTEXT_CHECK(grid_side() * grid_side() == num_position_embeddings, UnsupportedError,
                  "[qwen3 vision] num_position_embeddings_for_vit ", num_position_embeddings,
                  " is not a square: the position table is an N x N grid");
    for (const std::int64_t l : deepstack_layers) {
      MAXTEXT_CHECK(l >= 0 && l < num_layers, ConfigError, "[qwen3 vision] deepstack_visual_indexes_for_vit: layer ", l,
                    " is not one of the ", num_layers, " blocks");
    }
    MAXTEXT_CHECK(module == "Qwen3_5MoeVision" || module == "Qwen3OmniMoeVision", ConfigError,
                  "[qwen3 vision] module prefix '", module, "': Qwen3_5MoeVision or Qwen3OmniMoeVision");
  }

  /// A picture's grid (t, h, w): whole merge windows, at most 2^20 patches.
  void check_grid(std::int64_t t, std::int64_t h, std::int64_t w) const {
    MAXTEXT_CHECK(t > 0 && h > 0 && w > 0 && h % spatial_merge_size == 0 && w % spatial_merge_size == 0 &&
                      t * h * w <= (1 << 20),
                  ShapeError, "[qwen3 vision] grid (t ", t, ", h ", h, ", w ", w, ") must be positive, whole ",
                  spatial_merge_size, " x ", spatial_merge_size, " windows, at most 2^20 patches");
  }

  /// From a Hugging Face config.json's vision_config (Qwen3.5 / Qwen3-VL / Qwen3-Omni: depth, hidden_size,
  /// intermediate_size, num_heads, in_channels, patch_size, temporal_patch_size, spatial_merge_size, out_hidden_size,
  /// num_position_embeddings, deepstack_visual_indexes, hidden_act). The width of the text model is out_hidden_size.
  static Qwen3VisionConfig from_hf(const nlohmann::json& j, const std::string& where = "config.json") {
    const nlohmann::json* vc = nullptr;
    if (j.is_object() && j.contains("vision_config") && j["vision_config"].is_object()) vc = &j["vision_config"];
    if (vc == nullptr && j.is_object() && j.contains("thinker_config") && j["thinker_config"].is_object() &&
        j["thinker_config"].contains("vision_config") && j["thinker_config"]["vision_config"].is_object()) {
      vc = &j["thinker_config"]["vision_config"];
    }
    MAXTEXT_CHECK(vc != nullptr, IoError, "[", where, "] no vision_config: not a Qwen3.5 / Qwen3-Omni checkpoint with a "
                  "vision encoder");
    Qwen3VisionConfig v;
    const auto get = [&](const char* key, std::int64_t& out) { json_number(*vc, key, out, where, "vision_config."); };
    get("depth", v.num_layers);
    get("hidden_size", v.hidden_size);
    get("intermediate_size", v.intermediate_size);
    get("num_heads", v.num_heads);
    get("in_channels", v.num_channels);
    get("patch_size", v.patch_size);
    get("temporal_patch_size", v.temporal_patch_size);
    get("spatial_merge_size", v.spatial_merge_size);
    get("out_hidden_size", v.out_hidden_size);
    get("num_position_embeddings", v.num_position_embeddings);
    if (vc->contains("deepstack_visual_indexes") && !(*vc)["deepstack_visual_indexes"].is_null()) {
      const auto& d = (*vc)["deepstack_visual_indexes"];
      MAXTEXT_CHECK(d.is_array(), IoError, "[", where, "] vision_config.deepstack_visual_indexes: expected a list");
      for (const auto& e : d) {
        MAXTEXT_CHECK(e.is_number_integer(), IoError, "[", where,
                      "] vision_config.deepstack_visual_indexes: expected layer numbers, found ", e.dump());
        v.deepstack_layers.push_back(e.get<std::int64_t>());
      }
    }
    if (vc->contains("hidden_act")) {
      const std::string act = (*vc)["hidden_act"].is_string() ? (*vc)["hidden_act"].get<std::string>() : "";
      MAXTEXT_CHECK(act == "gelu_pytorch_tanh", UnsupportedError, "[", where, "] vision_config.hidden_act '", act,
                    "': MaxText's Qwen3 vision blocks use gelu (the tanh form, gelu_pytorch_tanh)");
    }
    const std::string type = j.value("model_type", std::string());
    v.module = type.rfind("qwen3_omni", 0) == 0 ? "Qwen3OmniMoeVision" : "Qwen3_5MoeVision";
    v.validate();
    return v;
  }
};

/// Qwen3-Omni's / Qwen3.5's vision encoder and projector on policy P (float32 activations).
template <TensorPolicy P>
class Qwen3VisionEncoder {
 public:
  using A = typename P::act_t;
  using B = typename P::backend;
  static_assert(std::is_same_v<A, float>,
                "Qwen3VisionEncoder runs in float32 (MaxText's dtype_mm): use a policy with float activations");
  using Dense = DenseGeneral<P>;

  struct NormParams {
    Tensor<A, 1> scale, bias;
  };
  struct BlockParams {
    NormParams ln1, ln2;
    typename Dense::Params query, key, value, out, fc1, fc2;
  };
  struct MergerParams {
    NormParams ln;
    typename Dense::Params fc1, fc2;
  };
  struct Params {
    typename Dense::Params patch;  ///< MaxText's convolution kernel [tp, p, p, C, D] as a product's, and its bias
    Tensor<A, 1> position;         ///< [N * N * D]
    std::vector<BlockParams> blocks;
    std::vector<MergerParams> deepstack;
    MergerParams merger;
  };

  /// What a picture gives: the projector's soft tokens and each deepstack merger's features, [T / m^2, out] each.
  struct Output {
    Tensor<float, 2> tokens;
    std::vector<Tensor<float, 2>> deepstack;
    std::int64_t grid_t = 0, grid_h = 0, grid_w = 0;  ///< the patch grid encoded (t frames of h x w patches)
  };

  Qwen3VisionEncoder() = default;
  explicit Qwen3VisionEncoder(const Qwen3VisionConfig& c) : c_(c) {
    c_.validate();
    const std::int64_t D = c_.hidden_size, N = c_.num_heads, H = c_.head_dim(), M = c_.merged_width();
    qkv_ = Dense({{D}, {N, H}, true, Init::normal});
    out_ = Dense({{N, H}, {D}, true, Init::normal});
    fc1_ = Dense({{D}, {c_.intermediate_size}, true, Init::normal});
    fc2_ = Dense({{c_.intermediate_size}, {D}, true, Init::normal});
    merge1_ = Dense({{M}, {M}, true, Init::normal});
    merge2_ = Dense({{M}, {c_.out_hidden_size}, true, Init::normal});
    patch_ = Dense({{c_.temporal_patch_size, c_.patch_size, c_.patch_size, c_.num_channels}, {D}, true, Init::normal});
  }
  const Qwen3VisionConfig& config() const { return c_; }

  /// MaxText's parameter tree (names under vision_encoder.).
  template <class V>
  void visit(V& v, Params& p) const {
    p.blocks.resize(static_cast<std::size_t>(c_.num_layers));
    p.deepstack.resize(c_.deepstack_layers.size());
    const std::int64_t D = c_.hidden_size;
    const auto norm = [&](std::string_view name, NormParams& n, std::int64_t dim) {
      Scope<V> s(v, name);
      v.vector("scale", n.scale, {{dim}, Init::ones});
      v.vector("bias", n.bias, {{dim}, Init::zeros});
    };
    const auto merger = [&](std::string_view name, MergerParams& m, std::int64_t ln_dim) {
      Scope<V> s(v, name);
      norm("ln_q", m.ln, ln_dim);
      visit_child(v, "mlp_0", merge1_, m.fc1);
      visit_child(v, "mlp_2", merge2_, m.fc2);
    };
    Scope<V> top(v, "vision_encoder");
    {
      Scope<V> enc(v, c_.module + "Encoder_0");
      {
        Scope<V> pe(v, "patch_embed");
        visit_child(v, "proj", patch_, p.patch);
      }
      {
        Scope<V> pos(v, "pos_embed_interpolate");
        v.vector("pos_embed", p.position, {{c_.num_position_embeddings, D}, Init::normal, 1.0 / std::sqrt(static_cast<double>(D))});
      }
      for (std::int64_t i = 0; i < c_.num_layers; ++i) {
        BlockParams& b = p.blocks[static_cast<std::size_t>(i)];
        Scope<V> blk(v, "blocks_" + std::to_string(i));
        norm("ln1", b.ln1, D);
        norm("ln2", b.ln2, D);
        {
          Scope<V> a1(v, "attn");
          Scope<V> a2(v, "attn");
          visit_child(v, "query", qkv_, b.query);
          visit_child(v, "key", qkv_, b.key);
          visit_child(v, "value", qkv_, b.value);
          visit_child(v, "out", out_, b.out);
        }
        visit_child(v, "mlp", fc1_, b.fc1);
        visit_child(v, "mlp_out", fc2_, b.fc2);
      }
      for (std::size_t j = 0; j < c_.deepstack_layers.size(); ++j) {
        merger("merger_" + std::to_string(j), p.deepstack[j], c_.merged_width());
      }
    }
    Scope<V> proj(v, c_.module + "Projector_0");
    merger("merger", p.merger, D);
  }

  /// The rotary's angles by token of a t x h x w grid in merge-window order (as generate_block_coords orders it):
  /// angle i < hd/4 = row * f_i, hd/4 <= i < hd/2 = column * f_(i - hd/4), f_j = 1 / theta^(2j / (hd/2)) in float32
  /// (MaxText's inv_freq), the product in float32, cosine and sine from double.
  RotaryTable rotary_table(std::int64_t t, std::int64_t h, std::int64_t w) const {
    const std::int64_t hd = c_.head_dim(), quarter = hd / 4, T = t * h * w;
    RotaryTable tab;
    tab.rot_dims = hd;
    tab.layout = RopeLayout::half_split;
    tab.round_sincos_to_input = false;
    tab.cos = Tensor<float, 2>({T, hd / 2});
    tab.sin = Tensor<float, 2>({T, hd / 2});
    std::vector<float> inv(static_cast<std::size_t>(quarter));
    for (std::int64_t j = 0; j < quarter; ++j) {
      const float e = static_cast<float>(2 * j) / static_cast<float>(hd / 2);
      inv[static_cast<std::size_t>(j)] = 1.0f / std::pow(static_cast<float>(c_.rope_theta), e);
    }
    for (std::int64_t r = 0; r < T; ++r) {
      const auto [row, col] = coords(r, h, w);
      for (std::int64_t i = 0; i < hd / 2; ++i) {
        const float angle = i < quarter ? static_cast<float>(row) * inv[static_cast<std::size_t>(i)]
                                        : static_cast<float>(col) * inv[static_cast<std::size_t>(i - quarter)];
        tab.cos(r, i) = static_cast<float>(std::cos(static_cast<double>(angle)));
        tab.sin(r, i) = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    return tab;
  }

  /// Token r's (row, column) in the h x w grid (frames repeat it), merge-window order (generate_block_coords).
  std::pair<std::int64_t, std::int64_t> coords(std::int64_t r, std::int64_t h, std::int64_t w) const {
    const std::int64_t m = c_.spatial_merge_size, s = r % (h * w), per = m * m, mw = w / m;
    const std::int64_t block_row = s / (mw * per), block_col = (s / per) % mw;
    return {block_row * m + (s / m) % m, block_col * m + s % m};
  }

  /// The interpolated position embedding [T, D] of a t x h x w grid (host, from the host table [N * N, D]): MaxText's
  /// Qwen3OmniMoeVisionPosEmbedInterpolate in float32, then rounded to bfloat16 (its fprop dtype) and back.
  Tensor<float, 2> position_embedding(const float* table, std::int64_t t, std::int64_t h, std::int64_t w) const {
    const std::int64_t N = c_.grid_side(), D = c_.hidden_size, T = t * h * w;
    Tensor<float, 2> out({T, D});
    for (std::int64_t r = 0; r < T; ++r) {
      const auto [row, col] = coords(r, h, w);
      const float yn = static_cast<float>(row) / static_cast<float>(std::max<std::int64_t>(h - 1, 1));
      const float xn = static_cast<float>(col) / static_cast<float>(std::max<std::int64_t>(w - 1, 1));
      const float y = yn * static_cast<float>(N - 1), x = xn * static_cast<float>(N - 1);
      const std::int64_t y0 = static_cast<std::int64_t>(std::floor(y)), x0 = static_cast<std::int64_t>(std::floor(x));
      const std::int64_t y1 = std::min(y0 + 1, N - 1), x1 = std::min(x0 + 1, N - 1);
      const float dy = y - static_cast<float>(y0), dx = x - static_cast<float>(x0);
      const float w00 = (1.0f - dy) * (1.0f - dx), w01 = (1.0f - dy) * dx, w10 = dy * (1.0f - dx), w11 = dy * dx;
      const float* e00 = table + (y0 * N + x0) * D;
      const float* e01 = table + (y0 * N + x1) * D;
      const float* e10 = table + (y1 * N + x0) * D;
      const float* e11 = table + (y1 * N + x1) * D;
      for (std::int64_t d = 0; d < D; ++d) {
        // Each product rounded on its own (through memory: no compiler fuses it into a multiply-add), summed left to
        // right, as MaxText's float32 expression; the bfloat16 rounding after it would magnify any other order.
        volatile float p0 = w00 * e00[d], p1 = w01 * e01[d], p2 = w10 * e10[d], p3 = w11 * e11[d];
        const float v = ((p0 + p1) + p2) + p3;
        out(r, d) = static_cast<float>(bf16(v));
      }
    }
    return out;
  }

  /// Patches [n * T, C * tp * p * p] (host, float32: n pictures of one t x h x w grid, each in merge-window order, as
  /// the processor flattens them) -> the soft tokens [n * T / m^2, out] and the deepstack features. `capture` records,
  /// under MaxText's module paths (vision_encoder.<module>Encoder_0.*): patch_embed [n, T, D] (before the position
  /// embedding), pos_embed_interpolate [n, T, D], blocks_i, merger_j, and vision_encoder.<module>Projector_0.
  Output encode(const B& be, const Params& p, const Tensor<float, 2>& patches, std::int64_t t, std::int64_t h,
                std::int64_t w, Capture* capture = nullptr) const {
    c_.check_grid(t, h, w);
    const std::int64_t T = t * h * w, K = c_.patch_values(), D = c_.hidden_size;
    MAXTEXT_CHECK(patches.dim(1) == K && patches.dim(0) > 0 && patches.dim(0) % T == 0, ShapeError,
                  "[qwen3 vision] patches must be [n * ", T, ", ", K, "] (a ", t, " x ", h, " x ", w,
                  " grid of C * tp * p * p values each), found ", patches.shape());
    const std::int64_t n = patches.dim(0) / T, M = n * T, N = c_.num_heads, H = c_.head_dim(), NH = N * H;
    const std::int64_t F = c_.intermediate_size, m2 = c_.spatial_merge_size * c_.spatial_merge_size, Mo = M / m2;
    const std::int64_t W = c_.merged_width(), E = c_.out_hidden_size;

    Scratch scratch(be.memory());
    const WholeSequences seqs = whole_sequences(be, scratch, n, T);
    const AttentionMask& mask = seqs.mask;
    const Context<P> ctx{be, scratch, seqs.step, capture};
    const std::string enc = "vision_encoder." + c_.module + "Encoder_0";

    // The patch projection: each patch's values reordered on the host from the processor's (channel, frame, row,
    // column) to the convolution kernel's (frame, row, column, channel), then the product with [tp p p C, D] and the bias.
    View<A, 2> x = scratch.alloc<A, 2>({M, D});
    {
      const std::int64_t tp = c_.temporal_patch_size, ps = c_.patch_size, C = c_.num_channels;
      Tensor<float, 2> hwc({M, K});
      for (std::int64_t r = 0; r < M; ++r) {
        const float* in = &patches(r, 0);
        float* o = &hwc(r, 0);
        for (std::int64_t c = 0; c < C; ++c) {
          for (std::int64_t f = 0; f < tp; ++f) {
            for (std::int64_t i = 0; i < ps; ++i) {
              for (std::int64_t j = 0; j < ps; ++j) o[((f * ps + i) * ps + j) * C + c] = in[((c * tp + f) * ps + i) * ps + j];
            }
          }
        }
      }
      View<A, 2> pd = scratch.alloc<A, 2>({M, K});
      be.copy(pd.data(), hwc.data(), static_cast<std::size_t>(M * K) * sizeof(float), CopyKind::host_to_device);
      patch_.forward(ctx, p.patch, View<const A, 2>(pd), x);
    }
    ctx.sow(enc + ".patch_embed", View<const A, 2>(x), {n, T, D});
    {
      std::vector<float> table(static_cast<std::size_t>(c_.num_position_embeddings * D));
      be.copy(table.data(), p.position.data(), table.size() * sizeof(float), CopyKind::device_to_host);
      be.synchronize();
      const Tensor<float, 2> pos = position_embedding(table.data(), t, h, w);
      const Tensor<float, 2> dpos = upload(be, pos);
      const View<const A, 2> pv(dpos.data(), {T, D});
      ctx.sow(enc + ".pos_embed_interpolate", pv, {1, T, D});
      for (std::int64_t b = 0; b < n; ++b) {
        View<A, 2> xb = x.narrow(0, b * T, T);
        be.add(View<const A, 2>(xb), pv, xb);
      }
    }

    RotaryTable rope = rotary_table(t, h, w);
    rope.cos = upload(be, rope.cos);
    rope.sin = upload(be, rope.sin);
    std::vector<std::int32_t> rows(static_cast<std::size_t>(M));
    for (std::int64_t r = 0; r < M; ++r) rows[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r % T);
    const View<const std::int32_t, 1> positions = upload_ints(be, scratch, rows);

    View<A, 2> hbuf = scratch.alloc<A, 2>({M, D});
    View<A, 2> q = scratch.alloc<A, 2>({M, NH}), kk = scratch.alloc<A, 2>({M, NH}), v = scratch.alloc<A, 2>({M, NH});
    View<A, 2> o = scratch.alloc<A, 2>({M, NH}), f = scratch.alloc<A, 2>({M, F});
    const auto heads3 = [&](View<A, 2> r) { return View<A, 3>(r.data(), {M, N, H}, {NH, H, 1}); };
    const auto heads4 = [&](View<A, 2> r) { return View<A, 4>(r.data(), {n, T, N, H}, {T * NH, NH, H, 1}); };
    const float qscale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
    Output out;
    out.grid_t = t;
    out.grid_h = h;
    out.grid_w = w;
    const auto merge = [&](const MergerParams& mp, bool postshuffle, const std::string& name) {
      // The window's m^2 rows are consecutive: [M, D] read as [Mo, m^2 D].
      View<A, 2> g = scratch.alloc<A, 2>({M, D});
      View<A, 2> grouped(g.data(), {Mo, W});
      if (postshuffle) {
        be.copy(g.data(), x.data(), static_cast<std::size_t>(M * D) * sizeof(A), CopyKind::device_to_device);
        affine_layer_norm(be, View<const A, 2>(grouped), mp.ln.scale.cview(), mp.ln.bias.cview(), c_.eps, grouped);
      } else {
        affine_layer_norm(be, View<const A, 2>(x), mp.ln.scale.cview(), mp.ln.bias.cview(), c_.eps, g);
      }
      View<A, 2> a = scratch.alloc<A, 2>({Mo, W}), y = scratch.alloc<A, 2>({Mo, E});
      merge1_.forward(ctx, mp.fc1, View<const A, 2>(grouped), a);
      be.activation(View<const A, 2>(a), Activation::gelu, View<const A, 2>{}, Activation::linear, a);
      merge2_.forward(ctx, mp.fc2, View<const A, 2>(a), y);
      ctx.sow(name, View<const A, 2>(y), {n, T / m2, E});
      Tensor<float, 2> host({Mo, E});
      be.copy(host.data(), y.data(), static_cast<std::size_t>(Mo * E) * sizeof(float), CopyKind::device_to_host);
      return host;
    };
    for (std::int64_t i = 0; i < c_.num_layers; ++i) {
      const BlockParams& bp = p.blocks[static_cast<std::size_t>(i)];
      const std::string blk = enc + ".blocks_" + std::to_string(i);
      affine_layer_norm(be, View<const A, 2>(x), bp.ln1.scale.cview(), bp.ln1.bias.cview(), c_.eps, hbuf);
      qkv_.forward(ctx, bp.query, View<const A, 2>(hbuf), q);
      qkv_.forward(ctx, bp.key, View<const A, 2>(hbuf), kk);
      qkv_.forward(ctx, bp.value, View<const A, 2>(hbuf), v);
      be.rotary(heads3(q), positions, rope);
      be.rotary(heads3(kk), positions, rope);
      be.scale(q, qscale);
      full_attention(be, View<const A, 4>(heads4(q)), View<const A, 4>(heads4(kk)), View<const A, 4>(heads4(v)), mask,
                     heads4(o));
      out_.forward(ctx, bp.out, View<const A, 2>(o), hbuf);
      be.add(View<const A, 2>(x), View<const A, 2>(hbuf), x);
      affine_layer_norm(be, View<const A, 2>(x), bp.ln2.scale.cview(), bp.ln2.bias.cview(), c_.eps, hbuf);
      fc1_.forward(ctx, bp.fc1, View<const A, 2>(hbuf), f);
      be.activation(View<const A, 2>(f), Activation::gelu, View<const A, 2>{}, Activation::linear, f);
      fc2_.forward(ctx, bp.fc2, View<const A, 2>(f), hbuf);
      be.add(View<const A, 2>(x), View<const A, 2>(hbuf), x);
      ctx.sow(blk, View<const A, 2>(x), {n, T, D});
      for (std::size_t j = 0; j < c_.deepstack_layers.size(); ++j) {
        if (c_.deepstack_layers[j] == i) {
          if (out.deepstack.size() < c_.deepstack_layers.size()) out.deepstack.resize(c_.deepstack_layers.size());
          out.deepstack[j] = merge(p.deepstack[j], true, enc + ".merger_" + std::to_string(j));
        }
      }
    }
    out.tokens = merge(p.merger, false, "vision_encoder." + c_.module + "Projector_0");
    be.synchronize();
    return out;
  }

 private:
  Qwen3VisionConfig c_;
  Dense patch_, qkv_, out_, fc1_, fc2_, merge1_, merge2_;
};

}  // namespace maxtext::layers

namespace maxtext::io {

/// The vision encoder of a Hugging Face Qwen3.5 / Qwen3-VL / Qwen3-Omni checkpoint (model.visual.*, or
/// thinker.visual.* for Qwen3-Omni) in MaxText's names and layouts, as MaxText's converter maps them: the patch
/// kernel [D, C, tp, p, p] -> [tp, p, p, C, D], the fused qkv [3D, D] split into query / key / value kernels
/// [D, N, hd] (and biases [N, hd]), proj -> out [N, hd, D], Linear weights transposed, LayerNorm weight -> scale, the
/// deepstack mergers (deepstack_merger_list.j) as merger_j. The language model's tensors are left out; any other
/// vision tensor is refused by name.
inline TensorMap qwen3_vision_from_hf(const TensorMap& hf, const layers::Qwen3VisionConfig& c) {
  std::string vis = "model.visual.";
  if (!hf.has(vis + "patch_embed.proj.weight") && hf.has("thinker.visual.patch_embed.proj.weight")) vis = "thinker.visual.";
  const std::string enc = "vision_encoder." + c.module + "Encoder_0.", proj = "vision_encoder." + c.module + "Projector_0.";
  Config sizes;
  sizes.emb_dim = c.hidden_size;
  sizes.num_query_heads = c.num_heads;
  sizes.head_dim = c.head_dim();
  detail::NameMapper m(hf, sizes, "qwen3 vision", "Qwen3 vision");
  const std::int64_t D = c.hidden_size, F = c.intermediate_size, N = c.num_heads, H = c.head_dim(), W = c.merged_width();
  const auto tensor = [&](const std::string& from, const std::string& to, const std::vector<std::int64_t>& shape) {
    map_vision_tensor(m, from, to, shape);
  };
  const auto linear = [&](const std::string& from, const std::string& to, std::int64_t out, std::int64_t in) {
    map_vision_linear(m, from, to, out, in, true);
  };
  const auto norm = [&](const std::string& from, const std::string& to, std::int64_t dim) {
    tensor(from + ".weight", to + ".scale", {dim});
    tensor(from + ".bias", to + ".bias", {dim});
  };
  // Qwen3.5 / Qwen3-VL name a merger's parts norm / linear_fc1 / linear_fc2 and the deepstack mergers
  // deepstack_merger_list.j; Qwen3-Omni ln_q / mlp.0 / mlp.2 and merger_list.j.
  const bool omni = hf.has(vis + "merger.ln_q.weight");
  const auto merger = [&](const std::string& from, const std::string& to, std::int64_t ln_dim) {
    norm(from + (omni ? "ln_q" : "norm"), to + "ln_q", ln_dim);
    linear(from + (omni ? "mlp.0" : "linear_fc1"), to + "mlp_0", W, W);
    linear(from + (omni ? "mlp.2" : "linear_fc2"), to + "mlp_2", c.out_hidden_size, W);
  };
  if (const AnyTensor* t = m.get(vis + "patch_embed.proj.weight")) {
    const std::string from = vis + "patch_embed.proj.weight";
    m.shape(*t, {D, c.num_channels, c.temporal_patch_size, c.patch_size, c.patch_size}, from);
    m.put(enc + "patch_embed.proj.kernel", t->permuted({2, 3, 4, 1, 0}), from);
  }
  tensor(vis + "patch_embed.proj.bias", enc + "patch_embed.proj.bias", {D});
  tensor(vis + "pos_embed.weight", enc + "pos_embed_interpolate.pos_embed", {c.num_position_embeddings, D});
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = vis + "blocks." + std::to_string(i) + ".", to = enc + "blocks_" + std::to_string(i) + ".";
    norm(from + "norm1", to + "ln1", D);
    norm(from + "norm2", to + "ln2", D);
    if (const AnyTensor* t = m.get(from + "attn.qkv.weight")) {
      m.shape(*t, {3 * D, D}, from + "attn.qkv.weight");
      const char* names[] = {"query", "key", "value"};
      for (std::int64_t k = 0; k < 3; ++k) {
        m.put(to + "attn.attn." + names[k] + ".kernel", t->narrow(0, k * D, D).reshaped({N, H, D}).permuted({2, 0, 1}),
              from + "attn.qkv.weight");
      }
    }
    if (const AnyTensor* t = m.get(from + "attn.qkv.bias")) {
      m.shape(*t, {3 * D}, from + "attn.qkv.bias");
      const char* names[] = {"query", "key", "value"};
      for (std::int64_t k = 0; k < 3; ++k) {
        m.put(to + "attn.attn." + names[k] + ".bias", t->narrow(0, k * D, D).reshaped({N, H}), from + "attn.qkv.bias");
      }
    }
    m.out_proj(from + "attn.proj", to + "attn.attn.out", true);
    linear(from + "mlp.linear_fc1", to + "mlp", F, D);
    linear(from + "mlp.linear_fc2", to + "mlp_out", D, F);
  }
  for (std::size_t j = 0; j < c.deepstack_layers.size(); ++j) {
    merger(vis + (omni ? "merger_list." : "deepstack_merger_list.") + std::to_string(j) + ".",
           enc + "merger_" + std::to_string(j) + ".", W);
  }
  merger(vis + "merger.", proj + "merger.", D);
  std::vector<std::string> others;
  for (const auto& [name, t] : hf.tensors) {
    if (name.rfind(vis, 0) != 0) others.push_back(name);
  }
  m.mark_used(others);
  return m.finish();
}

}  // namespace maxtext::io
