// families/gemma/vision.hpp: Gemma 3's vision encoder, as MaxText defines it (models/gemma3.py
// Gemma3VisionEncoderLayer, Encoder, Encoder1DBlock, MlpBlockViT, VisionExit, VisionEmbedder; layers/encoders.py):
// a SigLIP vision transformer whose patches are pooled to 256 soft tokens and projected into the text model's
// embedding space. One picture [S, S, 3] (values in [-1, 1]: families/gemma/image_processor.hpp) gives [256, E].
//
//   x = Conv(patch p, stride p, VALID, bias)(pixels) -> [T = (S/p)^2, D], patches row-major, + pos_embedding [T, D]
//   L encoder blocks: x = x + MHA(LN_0(x)); x = x + Dense_1(gelu_tanh(Dense_0(LN_1(x))))
//     MHA: q, k, v, out projections with biases, q scaled by 1/sqrt(head_dim) after its bias (MaxText's
//     query_pre_attn_scalar), softmax over all T patches of the same picture (no mask, no rotary)
//   encoder_norm: LN(x); VisionExit: average pooling of the sqrt(T) x sqrt(T) grid to 16 x 16 (window sqrt(T)/16;
//     nothing when T = 256); VisionEmbedder: RMSNorm (scale as stored) then x . w, w [D, E].
// LN is flax's LayerNorm (y = (x - mean) / sqrt(var + eps) * scale + bias). Everything runs in float32: MaxText's
// dtype_mm (float32 by default, and the only value honoured here). The operations the decoder's backends lack
// (the affine LayerNorm, the grid pooling; an attention over whole sequences through the GEMM on the CPU) are in
// backend/vision.hpp, with reference, CPU and CUDA versions.
//
// Weights: MaxText's tree (vision_encoder.Gemma3VisionEncoderLayer_0..., vision_encoder.VisionEmbedder_0...), or a
// Hugging Face Gemma3ForConditionalGeneration checkpoint's vision_tower.* and multi_modal_projector.* tensors through
// gemma3_vision_from_hf (the mapping of MaxText's converter, param_mapping.py GEMMA3_*: the patch kernel
// transposed, (1 + w) folded into the soft-embedding norm). Sizes: Gemma3VisionConfig from MaxText's keys
// (image_size_for_vit, ...) or from config.json's vision_config.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/backend/vision.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/mmproj.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/vision_config.hpp"
#include "maxtext/layers/vision_step.hpp"

namespace maxtext::layers {

/// The sizes of Gemma 3's vision encoder (defaults: every released Gemma 3 with vision, 4B to 27B).
struct Gemma3VisionConfig {
  std::int64_t image_size = 896;
  std::int64_t patch_size = 14;
  std::int64_t num_channels = 3;
  std::int64_t hidden_size = 1152;
  std::int64_t intermediate_size = 4304;
  std::int64_t num_layers = 27;
  std::int64_t num_heads = 16;
  std::int64_t tokens_per_image = 256;  ///< VisionExit's output_length (MaxText: 256, fixed)
  std::int64_t emb_dim = 0;             ///< the text model's embedding width E
  float eps = 1e-6f;                    ///< normalization_layer_epsilon (every norm of the tower)

  std::int64_t patches_per_side() const { return image_size / patch_size; }
  std::int64_t num_patches() const { return patches_per_side() * patches_per_side(); }
  std::int64_t head_dim() const { return hidden_size / num_heads; }
  std::int64_t tokens_per_side() const { return static_cast<std::int64_t>(std::lround(std::sqrt(static_cast<double>(tokens_per_image)))); }
  std::int64_t pool_window() const { return patches_per_side() / tokens_per_side(); }

  /// Refuses sizes MaxText's encoder cannot run, by name.
  void validate() const {
    const auto positive = [](std::int64_t v, const char* key) {
      MAXTEXT_CHECK(v > 0, ConfigError, "[gemma3 vision] ", key, " must be > 0, found ", v);
    };
    positive(image_size, "image_size_for_vit");
    positive(patch_size, "patch_size_for_vit");
    positive(num_channels, "num_channels_for_vit");
    positive(hidden_size, "hidden_size_for_vit");
    positive(intermediate_size, "intermediate_size_for_vit");
    positive(num_layers, "num_hidden_layers_for_vit");
    positive(num_heads, "num_attention_heads_for_vit");
    positive(emb_dim, "emb_dim");
    MAXTEXT_CHECK(image_size % patch_size == 0, ConfigError, "[gemma3 vision] image_size_for_vit (", image_size,
                  ") must be a multiple of patch_size_for_vit (", patch_size, ")");
    MAXTEXT_CHECK(hidden_size % num_heads == 0, ConfigError, "[gemma3 vision] hidden_size_for_vit (", hidden_size,
                  ") must be a multiple of num_attention_heads_for_vit (", num_heads, ")");
    const std::int64_t t = tokens_per_side();
    MAXTEXT_CHECK(t > 0 && t * t == tokens_per_image, ConfigError, "[gemma3 vision] mm_tokens_per_image (",
                  tokens_per_image, ") must be a square");
    MAXTEXT_CHECK(patches_per_side() % t == 0, ConfigError, "[gemma3 vision] the ", patches_per_side(), "x",
                  patches_per_side(), " patch grid (image_size_for_vit / patch_size_for_vit) cannot be pooled to ", t,
                  "x", t, " tokens (VisionExit needs a whole window)");
  }

  /// From MaxText's keys (a model yml such as gemma3-4b.yml with use_multimodal): image_size_for_vit,
  /// patch_size_for_vit, conv_stride_for_vit (must equal the patch), num_channels_for_vit, hidden_size_for_vit,
  /// intermediate_size_for_vit, num_hidden_layers_for_vit, num_attention_heads_for_vit, posemb_type_for_vit (learn),
  /// dtype_mm (float32), normalization_layer_epsilon, emb_dim. Unset keys keep Gemma 3's values above.
  static Gemma3VisionConfig from_config(const Config& c) {
    Gemma3VisionConfig v;
    const auto get = [&](const char* key, std::int64_t& out) { vit_number(c, key, out, "gemma3 vision"); };
    get("image_size_for_vit", v.image_size);
    get("patch_size_for_vit", v.patch_size);
    get("num_channels_for_vit", v.num_channels);
    get("hidden_size_for_vit", v.hidden_size);
    get("intermediate_size_for_vit", v.intermediate_size);
    get("num_hidden_layers_for_vit", v.num_layers);
    get("num_attention_heads_for_vit", v.num_heads);
    std::int64_t stride = v.patch_size;
    get("conv_stride_for_vit", stride);
    MAXTEXT_CHECK(stride == v.patch_size, UnsupportedError, "[gemma3 vision] conv_stride_for_vit (", stride,
                  ") must equal patch_size_for_vit (", v.patch_size, "): overlapping patches are not implemented");
    if (const auto it = c.extra.find("posemb_type_for_vit"); it != c.extra.end()) {
      MAXTEXT_CHECK(it->second == "learn", UnsupportedError, "[gemma3 vision] posemb_type_for_vit '", it->second,
                    "' is not implemented (Gemma 3 uses 'learn')");
    }
    if (const auto it = c.extra.find("dtype_mm"); it != c.extra.end()) {
      MAXTEXT_CHECK(it->second == "float32", UnsupportedError, "[gemma3 vision] dtype_mm '", it->second,
                    "' is not implemented: the vision tower runs in float32 (MaxText's default)");
    }
    v.emb_dim = c.emb_dim;
    v.eps = static_cast<float>(c.normalization_layer_epsilon);
    v.validate();
    return v;
  }

  /// From a Hugging Face Gemma3ForConditionalGeneration config.json (vision_config, mm_tokens_per_image,
  /// text_config.hidden_size).
  static Gemma3VisionConfig from_hf(const nlohmann::json& j, const std::string& where = "config.json") {
    MAXTEXT_CHECK(j.is_object() && j.contains("vision_config") && j["vision_config"].is_object(), IoError, "[",
                  where, "] no vision_config: not a Gemma 3 checkpoint with a vision tower");
    const auto& vc = j["vision_config"];
    Gemma3VisionConfig v;
    const auto get = [&](const nlohmann::json& o, const char* key, std::int64_t& out) { json_number(o, key, out, where); };
    get(vc, "image_size", v.image_size);
    get(vc, "patch_size", v.patch_size);
    get(vc, "num_channels", v.num_channels);
    get(vc, "hidden_size", v.hidden_size);
    get(vc, "intermediate_size", v.intermediate_size);
    get(vc, "num_hidden_layers", v.num_layers);
    get(vc, "num_attention_heads", v.num_heads);
    get(j, "mm_tokens_per_image", v.tokens_per_image);
    if (vc.contains("layer_norm_eps")) {
      MAXTEXT_CHECK(vc["layer_norm_eps"].is_number(), IoError, "[", where, "] layer_norm_eps: expected a number");
      v.eps = vc["layer_norm_eps"].get<float>();
    }
    if (vc.contains("hidden_act")) {
      const std::string act = vc["hidden_act"].is_string() ? vc["hidden_act"].get<std::string>() : "";
      MAXTEXT_CHECK(act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast", UnsupportedError, "[",
                    where, "] vision_config.hidden_act '", act, "': the tower's MLP is gelu (tanh form)");
    }
    if (j.contains("text_config") && j["text_config"].is_object()) get(j["text_config"], "hidden_size", v.emb_dim);
    v.validate();
    return v;
  }
};

/// Gemma 3's vision encoder and embedder on policy P (float32 activations).
template <TensorPolicy P>
class Gemma3VisionEncoder {
 public:
  using A = typename P::act_t;
  using W = typename P::weight_t;
  using B = typename P::backend;
  static_assert(std::is_same_v<A, float>,
                "Gemma3VisionEncoder runs in float32 (MaxText's dtype_mm): use a policy with float activations");
  using Dense = DenseGeneral<P>;

  struct NormParams {
    Tensor<A, 1> scale, bias;
  };
  struct BlockParams {
    NormParams ln0, ln1;
    typename Dense::Params query, key, value, out, fc1, fc2;
  };
  struct Params {
    typename Dense::Params patch;
    Tensor<A, 1> pos;  ///< [T * D]
    std::vector<BlockParams> blocks;
    NormParams norm;
    typename RMSNorm<P>::Params soft_norm;
    Matrix<W> projection;  ///< [E, D]
  };

  Gemma3VisionEncoder() = default;
  explicit Gemma3VisionEncoder(const Gemma3VisionConfig& c) : c_(c) {
    c_.validate();
    const std::int64_t D = c_.hidden_size, N = c_.num_heads, H = c_.head_dim(), p = c_.patch_size;
    patch_ = Dense({{p, p, c_.num_channels}, {D}, true, Init::normal});
    qkv_ = Dense({{D}, {N, H}, true, Init::normal});
    out_ = Dense({{N, H}, {D}, true, Init::normal});
    fc1_ = Dense({{D}, {c_.intermediate_size}, true, Init::normal});
    fc2_ = Dense({{c_.intermediate_size}, {D}, true, Init::normal});
    soft_norm_ = RMSNorm<P>({D, c_.eps});
  }
  const Gemma3VisionConfig& config() const { return c_; }

  /// MaxText's parameter tree (names under vision_encoder.).
  template <class V>
  void visit(V& v, Params& p) const {
    p.blocks.resize(static_cast<std::size_t>(c_.num_layers));
    const std::int64_t D = c_.hidden_size;
    const auto norm = [&](std::string_view name, NormParams& n) {
      Scope<V> s(v, name);
      v.vector("scale", n.scale, {{D}, Init::ones});
      v.vector("bias", n.bias, {{D}, Init::zeros});
    };
    Scope<V> top(v, "vision_encoder");
    {
      Scope<V> enc(v, "Gemma3VisionEncoderLayer_0");
      visit_child(v, "embedding", patch_, p.patch);
      v.vector("pos_embedding", p.pos, {{1, c_.num_patches(), D}, Init::normal, 1.0 / std::sqrt(static_cast<double>(D))});
      Scope<V> tr(v, "Transformer");
      for (std::int64_t i = 0; i < c_.num_layers; ++i) {
        BlockParams& b = p.blocks[static_cast<std::size_t>(i)];
        Scope<V> blk(v, "encoderblock_" + std::to_string(i));
        norm("LayerNorm_0", b.ln0);
        {
          Scope<V> att(v, "MultiHeadDotProductAttention_0");
          visit_child(v, "query", qkv_, b.query);
          visit_child(v, "key", qkv_, b.key);
          visit_child(v, "value", qkv_, b.value);
          visit_child(v, "out", out_, b.out);
        }
        norm("LayerNorm_1", b.ln1);
        {
          Scope<V> mlp(v, "MlpBlockViT_0");
          visit_child(v, "Dense_0", fc1_, b.fc1);
          visit_child(v, "Dense_1", fc2_, b.fc2);
        }
      }
      norm("encoder_norm", p.norm);
    }
    Scope<V> emb(v, "VisionEmbedder_0");
    visit_child(v, "mm_soft_embedding_norm", soft_norm_, p.soft_norm);
    Scope<V> proj(v, "mm_input_projection");
    v.matrix("w", p.projection, {{D}, {c_.emb_dim}, Init::normal});
  }

  /// Pictures [n, S, S, C] (host, float32, the processor's output) -> soft tokens [n, tokens_per_image, E] (host).
  /// `capture` records, under MaxText's module paths: ...Gemma3VisionEncoderLayer_0.embedding (the patch embedding,
  /// before the position embedding), ...Transformer.encoderblock_i (and its MultiHeadDotProductAttention_0 and
  /// MlpBlockViT_0), ...Transformer.encoder_norm, ...VisionExit [n, tokens, D], vision_encoder.VisionEmbedder_0.
  Tensor<float, 3> encode(const B& be, const Params& p, const Tensor<float, 4>& pixels, Capture* capture = nullptr) const {
    const std::int64_t n = pixels.dim(0), S = c_.image_size, C = c_.num_channels, ps = c_.patch_size;
    MAXTEXT_CHECK(n > 0 && pixels.dim(1) == S && pixels.dim(2) == S && pixels.dim(3) == C, ShapeError,
                  "[gemma3 vision] pictures must be [n, ", S, ", ", S, ", ", C, "] (image_size_for_vit ", S,
                  ", num_channels_for_vit ", C, "), found ", pixels.shape());
    const std::int64_t G = c_.patches_per_side(), T = c_.num_patches(), D = c_.hidden_size, M = n * T;
    const std::int64_t NH = c_.num_heads * c_.head_dim(), F = c_.intermediate_size, E = c_.emb_dim;
    const std::int64_t tok = c_.tokens_per_image, Mo = n * tok;

    Scratch scratch(be.memory());
    const WholeSequences seqs = whole_sequences(be, scratch, n, T);
    const AttentionMask& mask = seqs.mask;
    const Context<P> ctx{be, scratch, seqs.step, capture};
    const std::string enc = "vision_encoder.Gemma3VisionEncoderLayer_0", tr = enc + ".Transformer";

    // Patches [M, p*p*C] in the conv kernel's (row, column, channel) order, gathered on the host.
    View<A, 2> x = scratch.alloc<A, 2>({M, D});
    {
      const std::int64_t K = ps * ps * C;
      Tensor<float, 2> patches({M, K});
      for (std::int64_t b = 0; b < n; ++b) {
        for (std::int64_t gy = 0; gy < G; ++gy) {
          for (std::int64_t gx = 0; gx < G; ++gx) {
            float* row = &patches((b * G + gy) * G + gx, 0);
            for (std::int64_t i = 0; i < ps; ++i) {
              const float* src = &pixels(b, gy * ps + i, gx * ps, 0);
              std::copy(src, src + ps * C, row + i * ps * C);
            }
          }
        }
      }
      View<A, 2> pd = scratch.alloc<A, 2>({M, K});
      be.copy(pd.data(), patches.data(), static_cast<std::size_t>(M * K) * sizeof(float), CopyKind::host_to_device);
      patch_.forward(ctx, p.patch, View<const A, 2>(pd), x);
      ctx.sow(enc + ".embedding", View<const A, 2>(x));
      const View<const A, 2> pos(p.pos.data(), {T, D});
      for (std::int64_t b = 0; b < n; ++b) {
        View<A, 2> xb = x.narrow(0, b * T, T);
        be.add(View<const A, 2>(xb), pos, xb);
      }
    }

    View<A, 2> h = scratch.alloc<A, 2>({M, D});
    View<A, 2> q = scratch.alloc<A, 2>({M, NH}), k = scratch.alloc<A, 2>({M, NH}), v = scratch.alloc<A, 2>({M, NH});
    View<A, 2> o = scratch.alloc<A, 2>({M, NH}), f = scratch.alloc<A, 2>({M, F});
    const auto heads4 = [&](View<A, 2> rows) {
      return View<A, 4>(rows.data(), {n, T, c_.num_heads, c_.head_dim()}, {T * NH, NH, c_.head_dim(), 1});
    };
    const float qscale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim()));
    for (std::int64_t i = 0; i < c_.num_layers; ++i) {
      const BlockParams& bp = p.blocks[static_cast<std::size_t>(i)];
      const std::string blk = tr + ".encoderblock_" + std::to_string(i);
      affine_layer_norm(be, View<const A, 2>(x), bp.ln0.scale.cview(), bp.ln0.bias.cview(), c_.eps, h);
      qkv_.forward(ctx, bp.query, View<const A, 2>(h), q);
      qkv_.forward(ctx, bp.key, View<const A, 2>(h), k);
      qkv_.forward(ctx, bp.value, View<const A, 2>(h), v);
      be.scale(q, qscale);
      full_attention(be, View<const A, 4>(heads4(q)), View<const A, 4>(heads4(k)), View<const A, 4>(heads4(v)), mask,
                     heads4(o));
      out_.forward(ctx, bp.out, View<const A, 2>(o), h);
      ctx.sow(blk + ".MultiHeadDotProductAttention_0", View<const A, 2>(h));
      be.add(View<const A, 2>(x), View<const A, 2>(h), x);
      affine_layer_norm(be, View<const A, 2>(x), bp.ln1.scale.cview(), bp.ln1.bias.cview(), c_.eps, h);
      fc1_.forward(ctx, bp.fc1, View<const A, 2>(h), f);
      be.activation(View<const A, 2>(f), Activation::gelu, View<const A, 2>{}, Activation::linear, f);
      fc2_.forward(ctx, bp.fc2, View<const A, 2>(f), h);
      ctx.sow(blk + ".MlpBlockViT_0", View<const A, 2>(h));
      be.add(View<const A, 2>(x), View<const A, 2>(h), x);
      ctx.sow(blk, View<const A, 2>(x));
    }
    affine_layer_norm(be, View<const A, 2>(x), p.norm.scale.cview(), p.norm.bias.cview(), c_.eps, x);
    ctx.sow(tr + ".encoder_norm", View<const A, 2>(x));

    View<A, 2> pooled = x;
    if (T != tok) {
      pooled = scratch.alloc<A, 2>({Mo, D});
      avg_pool_grid(be, View<const A, 2>(x), n, G, c_.pool_window(), pooled);
    }
    ctx.sow(enc + ".VisionExit", View<const A, 2>(pooled), {n, tok, D});
    View<A, 2> normed = scratch.alloc<A, 2>({Mo, D});
    soft_norm_.forward(ctx, p.soft_norm, View<const A, 2>(pooled), normed);
    View<A, 2> y = scratch.alloc<A, 2>({Mo, E});
    be.matmul(View<const A, 2>(normed), p.projection, y);
    ctx.sow("vision_encoder.VisionEmbedder_0", View<const A, 2>(y), {n, tok, E});

    Tensor<float, 3> out({n, tok, E});
    be.copy(out.data(), y.data(), static_cast<std::size_t>(Mo * E) * sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    return out;
  }

 private:
  Gemma3VisionConfig c_;
  Dense patch_, qkv_, out_, fc1_, fc2_;
  RMSNorm<P> soft_norm_;
};

}  // namespace maxtext::layers

namespace maxtext::io {

/// The vision tower and projector of a Hugging Face Gemma3ForConditionalGeneration checkpoint (names with or without
/// the "model." prefix newer transformers write), in MaxText's names and layouts as MaxText's converter maps them
/// (checkpoint_conversion/utils/param_mapping.py GEMMA3 hooks): patch kernel [D, C, p, p] -> [p, p, C, D], position
/// embedding [T, D] -> [1, T, D], torch Linear weights [out, in] -> kernels [in, out] (q/k/v [D, N, H], out
/// [N, H, D]), biases reshaped, layer_norm1/2 -> LayerNorm_0/1, post_layernorm -> encoder_norm, the soft-embedding
/// norm's w -> 1 + w (f32), mm_input_projection_weight [D, E] as it is. Other tensors (the language model) are left out.
inline TensorMap gemma3_vision_from_hf(const TensorMap& hf, const layers::Gemma3VisionConfig& c) {
  TensorMap out;
  const std::string root = hf.has("model.vision_tower.vision_model.embeddings.patch_embedding.weight") ? "model." : "";
  const std::string vt = root + "vision_tower.vision_model.", mm = root + "multi_modal_projector.";
  const std::string enc = "vision_encoder.Gemma3VisionEncoderLayer_0.", emb = "vision_encoder.VisionEmbedder_0.";
  const std::int64_t D = c.hidden_size, N = c.num_heads, H = c.head_dim();
  const auto get = [&](const std::string& name, const std::vector<std::int64_t>& shape) -> const AnyTensor& {
    MAXTEXT_CHECK(hf.has(name), IoError, "[gemma3 vision] missing tensor ", name, " (expected ", shape, ")");
    const AnyTensor& t = hf.at(name);
    MAXTEXT_CHECK(t.shape == shape, IoError, "[gemma3 vision] ", name, ": expected shape ", shape, ", found ", t.shape);
    return t;
  };
  // A torch Linear [out, in] as MaxText's kernel [in..., out...]: the weight reshaped to [out..., in...] (no copy),
  // then its axes permuted (a strided view the parameter loader reads).
  const auto linear = [&](const std::string& from, const std::string& to, std::vector<std::int64_t> out_shape,
                          std::vector<std::int64_t> in_shape) {
    std::int64_t o = 1, i = 1;
    for (auto d : out_shape) o *= d;
    for (auto d : in_shape) i *= d;
    std::vector<std::int64_t> split = out_shape;
    split.insert(split.end(), in_shape.begin(), in_shape.end());
    std::vector<int> perm;
    for (std::size_t a = 0; a < in_shape.size(); ++a) perm.push_back(static_cast<int>(out_shape.size() + a));
    for (std::size_t a = 0; a < out_shape.size(); ++a) perm.push_back(static_cast<int>(a));
    out.add(to + ".kernel", get(from + ".weight", {o, i}).reshaped(split).permuted(perm));
    out.add(to + ".bias", get(from + ".bias", {o}).reshaped(out_shape));
  };
  const auto norm = [&](const std::string& from, const std::string& to) {
    out.add(to + ".scale", get(from + ".weight", {D}));
    out.add(to + ".bias", get(from + ".bias", {D}));
  };
  const std::int64_t p = c.patch_size;
  out.add(enc + "embedding.kernel",
          get(vt + "embeddings.patch_embedding.weight", {D, c.num_channels, p, p}).permuted({2, 3, 1, 0}));
  out.add(enc + "embedding.bias", get(vt + "embeddings.patch_embedding.bias", {D}));
  out.add(enc + "pos_embedding",
          get(vt + "embeddings.position_embedding.weight", {c.num_patches(), D}).reshaped({1, c.num_patches(), D}));
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = vt + "encoder.layers." + std::to_string(i) + ".";
    const std::string to = enc + "Transformer.encoderblock_" + std::to_string(i) + ".";
    norm(from + "layer_norm1", to + "LayerNorm_0");
    norm(from + "layer_norm2", to + "LayerNorm_1");
    const std::string att = to + "MultiHeadDotProductAttention_0.";
    linear(from + "self_attn.q_proj", att + "query", {N, H}, {D});
    linear(from + "self_attn.k_proj", att + "key", {N, H}, {D});
    linear(from + "self_attn.v_proj", att + "value", {N, H}, {D});
    linear(from + "self_attn.out_proj", att + "out", {D}, {N, H});
    linear(from + "mlp.fc1", to + "MlpBlockViT_0.Dense_0", {c.intermediate_size}, {D});
    linear(from + "mlp.fc2", to + "MlpBlockViT_0.Dense_1", {D}, {c.intermediate_size});
  }
  norm(vt + "post_layernorm", enc + "Transformer.encoder_norm");
  {
    const AnyTensor& w = get(mm + "mm_soft_emb_norm.weight", {D});
    Tensor<float, 1> s = w.to<float, 1>({D});
    for (std::int64_t i = 0; i < D; ++i) s(i) = s(i) + 1.0f;
    out.add(emb + "mm_soft_embedding_norm.scale", AnyTensor::from(s, mm + "mm_soft_emb_norm.weight + 1"));
  }
  out.add(emb + "mm_input_projection.w", get(mm + "mm_input_projection_weight", {D, c.emb_dim}));
  return out;
}

/// A llama.cpp "mmproj" file of Gemma 3's tower, as convert_hf_to_gguf.py --mmproj writes it (Gemma3VisionModel):
/// general.architecture clip, clip.projector_type gemma3, the sizes under clip.vision.*, and the Hugging Face tensors
/// renamed (v.patch_embd, v.position_embd, v.blk.N.{ln1,ln2,attn_q,attn_k,attn_v,attn_out,ffn_up,ffn_down},
/// v.post_ln, mm.input_projection, mm.soft_emb_norm) in their HF layout (GGUF's reversed dims give the same row-major
/// shapes), F32 or F16 (block types are decoded), the soft-embedding norm stored as 1 + w in float32 (the MaxText
/// converter's scale, used as stored). Checked against a file written by the re-statement of llama.cpp's converter
/// (tests/reference/gemma3_mmproj_fixture.py).
struct Gemma3Mmproj {
  layers::Gemma3VisionConfig config;
  TensorMap tensors;  ///< MaxText names (as gemma3_vision_from_hf gives them)
};

inline Gemma3Mmproj gemma3_vision_from_mmproj(GgufFile g) {
  const std::string& path = g.path;
  check_mmproj_header(g, "gemma3", "Gemma 3");
  layers::Gemma3VisionConfig c;
  c.image_size = g.get_int("clip.vision.image_size");
  c.patch_size = g.get_int("clip.vision.patch_size");
  c.hidden_size = g.get_int("clip.vision.embedding_length");
  c.intermediate_size = g.get_int("clip.vision.feed_forward_length");
  c.num_layers = g.get_int("clip.vision.block_count");
  c.num_heads = g.get_int("clip.vision.attention.head_count");
  c.emb_dim = g.get_int("clip.vision.projection_dim");
  c.eps = static_cast<float>(g.get_float("clip.vision.attention.layer_norm_epsilon", 1e-6));
  // clip.cpp: the patch grid average-pooled by n_merge (default 4: 896 / 14 / 4 = 16, 256 tokens).
  const std::int64_t merge = g.get_int("clip.vision.projector.scale_factor", 4);
  MAXTEXT_CHECK(merge > 0 && c.patch_size > 0 && c.image_size % c.patch_size == 0 &&
                    (c.image_size / c.patch_size) % merge == 0,
                IoError, "[mmproj] ", path, ": the ", c.image_size, "/", c.patch_size, " patch grid does not pool by ",
                "clip.vision.projector.scale_factor ", merge);
  const std::int64_t side = c.image_size / c.patch_size / merge;
  c.tokens_per_image = side * side;
  c.validate();
  dequantize_block_tensors(g);

  // Hugging Face's names for llama.cpp's, then the HF mapping (whose checks name the shapes).
  MmprojRenamer r(g, "Gemma 3");
  const std::string vt = "vision_tower.vision_model.";
  const auto take = [&](const std::string& from, const std::string& to) { r.take(from, to); };
  const auto pair = [&](const std::string& from, const std::string& to) { r.pair(from, to); };
  pair("v.patch_embd", vt + "embeddings.patch_embedding");
  take("v.position_embd.weight", vt + "embeddings.position_embedding.weight");
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".", l = vt + "encoder.layers." + std::to_string(i) + ".";
    pair(b + "ln1", l + "layer_norm1");
    pair(b + "ln2", l + "layer_norm2");
    pair(b + "attn_q", l + "self_attn.q_proj");
    pair(b + "attn_k", l + "self_attn.k_proj");
    pair(b + "attn_v", l + "self_attn.v_proj");
    pair(b + "attn_out", l + "self_attn.out_proj");
    // clip.cpp swaps up and down in files whose ffn_down has n_embd inputs (the order older converters wrote).
    const bool swapped = g.tensors.has(b + "ffn_down.weight") && g.tensors.at(b + "ffn_down.weight").rank() == 2 &&
                         g.tensors.at(b + "ffn_down.weight").shape[1] == c.hidden_size &&
                         c.intermediate_size != c.hidden_size;
    pair(b + (swapped ? "ffn_down" : "ffn_up"), l + "mlp.fc1");
    pair(b + (swapped ? "ffn_up" : "ffn_down"), l + "mlp.fc2");
  }
  pair("v.post_ln", vt + "post_layernorm");
  take("mm.input_projection.weight", "multi_modal_projector.mm_input_projection_weight");
  take("mm.soft_emb_norm.weight", "multi_modal_projector.mm_soft_emb_norm.weight");  // replaced below
  Gemma3Mmproj out{c, gemma3_vision_from_hf(r.finish(), c)};
  // llama.cpp stores 1 + w already: the scale as stored.
  const AnyTensor& s = g.tensors.at("mm.soft_emb_norm.weight");
  out.tensors.tensors["vision_encoder.VisionEmbedder_0.mm_soft_embedding_norm.scale"] =
      AnyTensor::from(s.to<float, 1>({c.hidden_size}), path + ": mm.soft_emb_norm.weight");
  return out;
}

}  // namespace maxtext::io
