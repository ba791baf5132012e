// families/llama4/vision.hpp: Llama 4's vision model and projector, as MaxText defines them (models/llama4.py
// Llama4VisionModel, Llama4UnfoldConvolution, Llama4VisionEncoder(Layer), Llama4VisionMLP, Llama4VisionPixelShuffleMLP,
// Llama4VisionMLP2, pixel_shuffle, Llama4MultiModalProjector; layers/embeddings.py LlamaVisionRotaryEmbedding;
// layers/encoders.py VisionEncoder). One tile [S, S, 3] (values in [-1, 1]: families/llama4/image_processor.hpp)
// gives (S / p / k)^2 soft tokens of the text model's width E (k = 1 / pixel_shuffle_ratio; 144 for 336 / 14 / 2).
//
//   x = unfold(tile, patch p) . W_unfold            -> [T = (S/p)^2, D] (patch features in (channel, row, column)
//                                                      order, as lax.conv_general_dilated_patches / nn.Unfold give)
//   x = concat(x, class_embedding) + positional_embedding_vlm   -> [T + 1, D] (the class token last)
//   x = layernorm_pre(x)
//   L layers: x = x + Attn(LN_in(x)); x = x + fc2(gelu(fc1(LN_post_attn(x))))   (gelu: the exact, erf form)
//     Attn: q, k, v, out projections with biases; the 2-D rotary on q and k (complex pairs (2i, 2i+1); pair i < H/4
//     turns by (column + 1) * theta^(-4i/H), pair i >= H/4 by (row + 1) * theta^(-4(i - H/4)/H), the class token not
//     at all); q scaled by H^-0.5; softmax over all T + 1 rows of the tile (no mask)
//   x = layernorm_post(x), the class token dropped
//   pixel shuffle (ratio 1/k): token (i, j) of the (G/k) x (G/k) grid = the k x k patches (k i + a, k j + b)
//     concatenated in (a, b) row-major order -> [T / k^2, k^2 D]
//   adapter: gelu(gelu(x . W_fc1) . W_fc2) (no biases); projector: x . W_proj (no bias) -> [T / k^2, E]
// LN is flax's LayerNorm with bias (eps = normalization_layer_epsilon, 1e-5 for Llama 4). Everything in float32
// (MaxText's dtype_mm). The ops are the decoder's (DenseGeneral, rotary with a table of per-row angles, gather_rows
// for the pixel shuffle, the activations) and the vision ops of backend/vision.hpp (affine LayerNorm, full
// attention), so the tower runs on every backend.
//
// Weights: MaxText's tree (vision_encoder.Llama4VisionModel_0..., vision_encoder.Llama4MultiModalProjector_0...), or a
// Hugging Face Llama4ForConditionalGeneration checkpoint's vision_model.* and multi_modal_projector.* tensors through
// llama4_vision_from_hf (the mapping of MaxText's converter, llama4_ckpt_unscanned.py: torch Linear weights
// transposed to kernels, q/k/v split into heads), or llama.cpp's mmproj file of it (llama4_vision_from_mmproj). Sizes:
// Llama4VisionConfig from MaxText's keys, config.json or the mmproj file's keys.
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
#include "maxtext/core/error.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/mmproj.hpp"
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/vision_config.hpp"
#include "maxtext/layers/vision_step.hpp"

namespace maxtext::layers {

/// The sizes of Llama 4's vision model (defaults: Llama 4 Scout and Maverick).
struct Llama4VisionConfig {
  std::int64_t image_size = 336;  ///< the tile (tile_size_for_vit = image_size_for_vit)
  std::int64_t patch_size = 14;
  std::int64_t num_channels = 3;
  std::int64_t hidden_size = 1408;
  std::int64_t intermediate_size = 5632;  ///< the encoder MLP's width, and the adapter's input (k^2 * hidden_size)
  std::int64_t num_layers = 34;
  std::int64_t num_heads = 16;
  double rope_theta = 10000.0;
  double pixel_shuffle_ratio = 0.5;
  std::int64_t projector_input_dim = 4096;
  std::int64_t projector_output_dim = 4096;  ///< = vision_output_dim_for_vit, the projector's input
  std::int64_t emb_dim = 0;                  ///< the text model's embedding width E
  float eps = 1e-5f;

  std::int64_t patches_per_side() const { return image_size / patch_size; }
  std::int64_t num_patches() const { return patches_per_side() * patches_per_side(); }
  std::int64_t head_dim() const { return hidden_size / num_heads; }
  /// k = 1 / pixel_shuffle_ratio: each soft token gathers k x k patches.
  std::int64_t shuffle() const { return static_cast<std::int64_t>(std::lround(1.0 / pixel_shuffle_ratio)); }
  std::int64_t tokens_per_side() const { return patches_per_side() / shuffle(); }
  std::int64_t tokens_per_tile() const { return tokens_per_side() * tokens_per_side(); }

  /// Refuses sizes MaxText's model cannot run, by MaxText's key names.
  void validate() const {
    const auto positive = [](std::int64_t v, const char* key) {
      MAXTEXT_CHECK(v > 0, ConfigError, "[llama4 vision] ", key, " must be > 0, found ", v);
    };
    positive(image_size, "image_size_for_vit");
    positive(patch_size, "patch_size_for_vit");
    positive(num_channels, "num_channels_for_vit");
    positive(hidden_size, "hidden_size_for_vit");
    positive(intermediate_size, "intermediate_size_for_vit");
    positive(num_layers, "num_hidden_layers_for_vit");
    positive(num_heads, "num_attention_heads_for_vit");
    positive(projector_input_dim, "projector_input_dim_for_vit");
    positive(projector_output_dim, "projector_output_dim_for_vit");
    positive(emb_dim, "emb_dim");
    // Bounds far above every released model's, so that absurd values are refused before sizes are multiplied.
    const auto at_most = [](std::int64_t v, std::int64_t most, const char* key) {
      MAXTEXT_CHECK(v <= most, ConfigError, "[llama4 vision] ", key, " (", v, ") is above ", most);
    };
    at_most(image_size, 4096, "image_size_for_vit");
    at_most(num_channels, 16, "num_channels_for_vit");
    at_most(hidden_size, 1 << 16, "hidden_size_for_vit");
    at_most(intermediate_size, 1 << 20, "intermediate_size_for_vit");
    at_most(num_layers, 1024, "num_hidden_layers_for_vit");
    at_most(num_heads, hidden_size, "num_attention_heads_for_vit");
    at_most(projector_input_dim, 1 << 20, "projector_input_dim_for_vit");
    at_most(projector_output_dim, 1 << 20, "projector_output_dim_for_vit");
    at_most(emb_dim, 1 << 20, "emb_dim");
    MAXTEXT_CHECK(std::isfinite(eps) && eps > 0.0f, ConfigError, "[llama4 vision] normalization_layer_epsilon must be "
                  "> 0, found ", eps);
    MAXTEXT_CHECK(std::isfinite(rope_theta) && rope_theta > 0.0, ConfigError,
                  "[llama4 vision] rope_theta_for_vit must be > 0, found ", rope_theta);
    MAXTEXT_CHECK(image_size % patch_size == 0, ConfigError, "[llama4 vision] image_size_for_vit (", image_size,
                  ") must be a multiple of patch_size_for_vit (", patch_size, ")");
    MAXTEXT_CHECK(hidden_size % num_heads == 0 && head_dim() % 4 == 0, ConfigError,
                  "[llama4 vision] hidden_size_for_vit / num_attention_heads_for_vit (", hidden_size, " / ", num_heads,
                  ") must be a whole head size divisible by 4 (the 2-D rotary turns H/4 pairs per axis)");
    const std::int64_t k = shuffle();
    MAXTEXT_CHECK(std::isfinite(pixel_shuffle_ratio) && pixel_shuffle_ratio >= 1.0 / 64.0 && pixel_shuffle_ratio <= 1.0 &&
                      std::abs(1.0 / pixel_shuffle_ratio - static_cast<double>(k)) < 1e-9,
                  UnsupportedError, "[llama4 vision] pixel_shuffle_ratio_for_vit ", pixel_shuffle_ratio,
                  " is not 1/k for a whole k (Llama 4: 0.5)");
    MAXTEXT_CHECK(patches_per_side() % k == 0, ConfigError, "[llama4 vision] the ", patches_per_side(), "x",
                  patches_per_side(), " patch grid cannot be shuffled by ", k, "x", k);
    MAXTEXT_CHECK(intermediate_size == k * k * hidden_size, ConfigError,
                  "[llama4 vision] intermediate_size_for_vit (", intermediate_size,
                  ") must equal the pixel shuffle's width ", k * k, " x hidden_size_for_vit = ", k * k * hidden_size,
                  " (MaxText's adapter reads that many features)");
  }

  /// From MaxText's keys (llama4-17b-*.yml with use_multimodal): image_size_for_vit (= tile_size_for_vit),
  /// patch_size_for_vit, num_channels_for_vit, hidden_size_for_vit, intermediate_size_for_vit,
  /// num_hidden_layers_for_vit, num_attention_heads_for_vit, rope_theta_for_vit, pixel_shuffle_ratio_for_vit,
  /// projector_input_dim_for_vit, projector_output_dim_for_vit (= vision_output_dim_for_vit), dtype_mm (float32),
  /// normalization_layer_epsilon, emb_dim. Unset keys keep Llama 4's values (base.yml's).
  static Llama4VisionConfig from_config(const Config& c) {
    Llama4VisionConfig v;
    const auto get = [&](const char* key, auto& out) { vit_number(c, key, out, "llama4 vision"); };
    get("image_size_for_vit", v.image_size);
    std::int64_t tile = v.image_size;
    get("tile_size_for_vit", tile);
    MAXTEXT_CHECK(tile == v.image_size, UnsupportedError, "[llama4 vision] tile_size_for_vit (", tile,
                  ") must equal image_size_for_vit (", v.image_size, "): the tower reads one tile at a time");
    get("patch_size_for_vit", v.patch_size);
    std::int64_t stride = v.patch_size;
    get("conv_stride_for_vit", stride);
    MAXTEXT_CHECK(stride == v.patch_size, UnsupportedError, "[llama4 vision] conv_stride_for_vit (", stride,
                  ") must equal patch_size_for_vit (", v.patch_size, ")");
    get("num_channels_for_vit", v.num_channels);
    get("hidden_size_for_vit", v.hidden_size);
    get("intermediate_size_for_vit", v.intermediate_size);
    get("num_hidden_layers_for_vit", v.num_layers);
    get("num_attention_heads_for_vit", v.num_heads);
    get("rope_theta_for_vit", v.rope_theta);
    get("pixel_shuffle_ratio_for_vit", v.pixel_shuffle_ratio);
    get("projector_input_dim_for_vit", v.projector_input_dim);
    get("projector_output_dim_for_vit", v.projector_output_dim);
    std::int64_t out_dim = v.projector_output_dim;
    get("vision_output_dim_for_vit", out_dim);
    MAXTEXT_CHECK(out_dim == v.projector_output_dim, ConfigError, "[llama4 vision] vision_output_dim_for_vit (",
                  out_dim, ") must equal projector_output_dim_for_vit (", v.projector_output_dim,
                  "): the projector reads the adapter's output");
    if (const auto it = c.extra.find("dtype_mm"); it != c.extra.end()) {
      MAXTEXT_CHECK(it->second == "float32", UnsupportedError, "[llama4 vision] dtype_mm '", it->second,
                    "' is not implemented: the vision model runs in float32 (MaxText's default)");
    }
    v.emb_dim = c.emb_dim;
    v.eps = static_cast<float>(c.normalization_layer_epsilon);
    v.validate();
    return v;
  }

  /// From a Hugging Face Llama4ForConditionalGeneration config.json (vision_config, text_config.hidden_size).
  static Llama4VisionConfig from_hf(const nlohmann::json& j, const std::string& where = "config.json") {
    MAXTEXT_CHECK(j.is_object() && j.contains("vision_config") && j["vision_config"].is_object(), IoError, "[",
                  where, "] no vision_config: not a Llama 4 checkpoint with a vision model");
    const auto& vc = j["vision_config"];
    Llama4VisionConfig v;
    const auto get = [&](const nlohmann::json& o, const char* key, auto& out) { json_number(o, key, out, where); };
    get(vc, "image_size", v.image_size);
    get(vc, "patch_size", v.patch_size);
    get(vc, "num_channels", v.num_channels);
    get(vc, "hidden_size", v.hidden_size);
    get(vc, "intermediate_size", v.intermediate_size);
    get(vc, "num_hidden_layers", v.num_layers);
    get(vc, "num_attention_heads", v.num_heads);
    get(vc, "rope_theta", v.rope_theta);
    get(vc, "pixel_shuffle_ratio", v.pixel_shuffle_ratio);
    get(vc, "projector_input_dim", v.projector_input_dim);
    get(vc, "projector_output_dim", v.projector_output_dim);
    get(vc, "norm_eps", v.eps);
    std::int64_t out_dim = v.projector_output_dim;
    get(vc, "vision_output_dim", out_dim);
    MAXTEXT_CHECK(out_dim == v.projector_output_dim, IoError, "[", where, "] vision_config.vision_output_dim (",
                  out_dim, ") differs from projector_output_dim (", v.projector_output_dim, ")");
    if (vc.contains("hidden_act")) {
      const std::string act = vc["hidden_act"].is_string() ? vc["hidden_act"].get<std::string>() : "";
      MAXTEXT_CHECK(act == "gelu", UnsupportedError, "[", where, "] vision_config.hidden_act '", act,
                    "': Llama 4's vision MLPs use gelu (the exact form)");
    }
    if (vc.contains("multi_modal_projector_bias") && vc["multi_modal_projector_bias"].is_boolean()) {
      MAXTEXT_CHECK(!vc["multi_modal_projector_bias"].get<bool>(), UnsupportedError, "[", where,
                    "] vision_config.multi_modal_projector_bias: Llama 4's projector has no bias");
    }
    if (vc.contains("vision_feature_layer") && vc["vision_feature_layer"].is_number_integer()) {
      MAXTEXT_CHECK(vc["vision_feature_layer"].get<std::int64_t>() == -1, UnsupportedError, "[", where,
                    "] vision_config.vision_feature_layer ", vc["vision_feature_layer"].dump(),
                    ": only the last layer's features (-1) are implemented");
    }
    if (j.contains("text_config") && j["text_config"].is_object()) get(j["text_config"], "hidden_size", v.emb_dim);
    v.validate();
    return v;
  }
};

/// Llama 4's vision model, pixel-shuffle adapter and projector on policy P (float32 activations).
template <TensorPolicy P>
class Llama4VisionEncoder {
 public:
  using A = typename P::act_t;
  using B = typename P::backend;
  static_assert(std::is_same_v<A, float>,
                "Llama4VisionEncoder runs in float32 (MaxText's dtype_mm): use a policy with float activations");
  using Dense = DenseGeneral<P>;

  struct NormParams {
    Tensor<A, 1> scale, bias;
  };
  struct LayerParams {
    NormParams ln_in, ln_post;
    typename Dense::Params query, key, value, out, fc1, fc2;
  };
  struct Params {
    typename Dense::Params unfold;
    Tensor<A, 1> class_embedding;  ///< [D]
    Tensor<A, 1> position;         ///< [(T + 1) * D]
    NormParams pre, post;
    std::vector<LayerParams> layers;
    typename Dense::Params adapter_fc1, adapter_fc2, projector;
  };

  Llama4VisionEncoder() = default;
  explicit Llama4VisionEncoder(const Llama4VisionConfig& c) : c_(c) {
    c_.validate();
    const std::int64_t D = c_.hidden_size, N = c_.num_heads, H = c_.head_dim(), p = c_.patch_size;
    unfold_ = Dense({{c_.num_channels * p * p}, {D}, false, Init::normal});
    qkv_ = Dense({{D}, {N, H}, true, Init::normal});
    out_ = Dense({{N, H}, {D}, true, Init::normal});
    fc1_ = Dense({{D}, {c_.intermediate_size}, true, Init::normal});
    fc2_ = Dense({{c_.intermediate_size}, {D}, true, Init::normal});
    adapter_fc1_ = Dense({{c_.intermediate_size}, {c_.projector_input_dim}, false, Init::normal});
    adapter_fc2_ = Dense({{c_.projector_input_dim}, {c_.projector_output_dim}, false, Init::normal});
    projector_ = Dense({{c_.projector_output_dim}, {c_.emb_dim}, false, Init::normal});
  }
  const Llama4VisionConfig& config() const { return c_; }

  /// MaxText's parameter tree (names under vision_encoder.).
  template <class V>
  void visit(V& v, Params& p) const {
    p.layers.resize(static_cast<std::size_t>(c_.num_layers));
    const std::int64_t D = c_.hidden_size;
    const double init_scale = 1.0 / std::sqrt(static_cast<double>(D));
    const auto norm = [&](std::string_view name, NormParams& n) {
      Scope<V> s(v, name);
      v.vector("scale", n.scale, {{D}, Init::ones});
      v.vector("bias", n.bias, {{D}, Init::zeros});
    };
    Scope<V> top(v, "vision_encoder");
    {
      Scope<V> model(v, "Llama4VisionModel_0");
      v.vector("class_embedding", p.class_embedding, {{D}, Init::normal, init_scale});
      v.vector("positional_embedding_vlm", p.position, {{c_.num_patches() + 1, D}, Init::normal, init_scale});
      norm("layernorm_pre", p.pre);
      norm("layernorm_post", p.post);
      {
        Scope<V> unfold(v, "Llama4UnfoldConvolution_0");
        visit_child(v, "vit_unfold_linear", unfold_, p.unfold);
      }
      {
        Scope<V> enc(v, "Llama4VisionEncoder_0");
        for (std::int64_t i = 0; i < c_.num_layers; ++i) {
          LayerParams& l = p.layers[static_cast<std::size_t>(i)];
          Scope<V> layer(v, "layers_" + std::to_string(i));
          norm("input_layer_norm", l.ln_in);
          norm("post_attention_layer_norm", l.ln_post);
          {
            Scope<V> att(v, "self_attention_vision");
            visit_child(v, "query", qkv_, l.query);
            visit_child(v, "key", qkv_, l.key);
            visit_child(v, "value", qkv_, l.value);
            visit_child(v, "out", out_, l.out);
          }
          Scope<V> mlp(v, "Llama4VisionMLP_0");
          visit_child(v, "vit_encoder_layer_mlp_fc1", fc1_, l.fc1);
          visit_child(v, "vit_encoder_layer_mlp_fc2", fc2_, l.fc2);
        }
      }
      Scope<V> shuffle(v, "Llama4VisionPixelShuffleMLP_0");
      Scope<V> mlp(v, "pixel_shuffle_mlp");
      visit_child(v, "vit_pixel_shuffle_mlp_fc1", adapter_fc1_, p.adapter_fc1);
      visit_child(v, "vit_pixel_shuffle_mlp_fc2", adapter_fc2_, p.adapter_fc2);
    }
    Scope<V> proj(v, "Llama4MultiModalProjector_0");
    visit_child(v, "vit_multi_modal_projector", projector_, p.projector);
  }

  /// The 2-D rotary's angles as a table indexed by row (T patches row-major, then the class token at T, unturned):
  /// MaxText's freqs_cis, each angle f32((coordinate + 1) * f32(theta^(-2j / (H/2)))) as MaxText computes it in
  /// float32, its cosine and sine rounded from double.
  RotaryTable rotary_table() const {
    const std::int64_t G = c_.patches_per_side(), T = c_.num_patches(), H = c_.head_dim(), quarter = H / 4;
    const std::int64_t freq_dim = H / 2;
    RotaryTable t;
    t.rot_dims = H;
    t.layout = RopeLayout::interleaved;
    t.round_sincos_to_input = false;
    t.cos = Tensor<float, 2>({T + 1, H / 2});
    t.sin = Tensor<float, 2>({T + 1, H / 2});
    std::vector<float> freq(static_cast<std::size_t>(quarter));
    for (std::int64_t j = 0; j < quarter; ++j) {
      const float e = static_cast<float>(2 * j) / static_cast<float>(freq_dim);
      freq[static_cast<std::size_t>(j)] = 1.0f / std::pow(static_cast<float>(c_.rope_theta), e);
    }
    for (std::int64_t r = 0; r <= T; ++r) {
      for (std::int64_t i = 0; i < H / 2; ++i) {
        float angle = 0.0f;
        if (r < T) {
          const std::int64_t coord = i < quarter ? r % G : r / G;
          angle = static_cast<float>(coord + 1) * freq[static_cast<std::size_t>(i < quarter ? i : i - quarter)];
        }
        t.cos(r, i) = static_cast<float>(std::cos(static_cast<double>(angle)));
        t.sin(r, i) = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    return t;
  }

  /// Tiles [n, S, S, C] (host, float32, the processor's output) -> soft tokens [n, tokens_per_tile, E] (host).
  /// `capture` records, under MaxText's module paths (vision_encoder.Llama4VisionModel_0.*):
  /// Llama4UnfoldConvolution_0 [n, T, D], layernorm_pre, Llama4VisionEncoder_0.layers_i (and their
  /// self_attention_vision and Llama4VisionMLP_0 outputs), layernorm_post [n, T + 1, D],
  /// Llama4VisionPixelShuffleMLP_0 [n, tokens, projector_output_dim], and vision_encoder.Llama4MultiModalProjector_0.
  Tensor<float, 3> encode(const B& be, const Params& p, const Tensor<float, 4>& tiles, Capture* capture = nullptr) const {
    const std::int64_t n = tiles.dim(0), S = c_.image_size, C = c_.num_channels, ps = c_.patch_size;
    MAXTEXT_CHECK(n > 0 && tiles.dim(1) == S && tiles.dim(2) == S && tiles.dim(3) == C, ShapeError,
                  "[llama4 vision] tiles must be [n, ", S, ", ", S, ", ", C, "] (image_size_for_vit ", S,
                  ", num_channels_for_vit ", C, "), found ", tiles.shape());
    const std::int64_t G = c_.patches_per_side(), T = c_.num_patches(), T1 = T + 1, D = c_.hidden_size;
    const std::int64_t N = c_.num_heads, H = c_.head_dim(), NH = N * H, F = c_.intermediate_size, M = n * T1;
    const std::int64_t k = c_.shuffle(), Gt = c_.tokens_per_side(), tok = c_.tokens_per_tile(), Mo = n * tok;
    const std::int64_t Pin = c_.projector_input_dim, Pout = c_.projector_output_dim, E = c_.emb_dim;

    Scratch scratch(be.memory());
    const WholeSequences seqs = whole_sequences(be, scratch, n, T1);
    const AttentionMask& mask = seqs.mask;
    const Context<P> ctx{be, scratch, seqs.step, capture};
    const auto up_ints = [&](const std::vector<std::int32_t>& h) { return upload_ints(be, scratch, h); };
    const std::string model = "vision_encoder.Llama4VisionModel_0", enc = model + ".Llama4VisionEncoder_0";

    // Patches [n * T, C * p * p] in (channel, row, column) order, gathered on the host; then the unfold projection.
    View<A, 2> x = scratch.alloc<A, 2>({M, D});
    {
      const std::int64_t K = C * ps * ps;
      Tensor<float, 2> patches({n * T, K});
      for (std::int64_t b = 0; b < n; ++b) {
        for (std::int64_t gy = 0; gy < G; ++gy) {
          for (std::int64_t gx = 0; gx < G; ++gx) {
            float* row = &patches((b * G + gy) * G + gx, 0);
            for (std::int64_t c = 0; c < C; ++c) {
              for (std::int64_t i = 0; i < ps; ++i) {
                for (std::int64_t j = 0; j < ps; ++j) row[(c * ps + i) * ps + j] = tiles(b, gy * ps + i, gx * ps + j, c);
              }
            }
          }
        }
      }
      View<A, 2> pd = scratch.alloc<A, 2>({n * T, K});
      be.copy(pd.data(), patches.data(), static_cast<std::size_t>(n * T * K) * sizeof(float), CopyKind::host_to_device);
      View<A, 2> u = scratch.alloc<A, 2>({n * T, D});
      unfold_.forward(ctx, p.unfold, View<const A, 2>(pd), u);
      ctx.sow(model + ".Llama4UnfoldConvolution_0", View<const A, 2>(u), {n, T, D});
      // Each tile: its T patch rows, then the class embedding; plus the position embedding [T + 1, D].
      const View<const A, 2> pos(p.position.data(), {T1, D});
      const std::size_t row_bytes = static_cast<std::size_t>(D) * sizeof(A);
      for (std::int64_t b = 0; b < n; ++b) {
        be.copy(x.data() + b * T1 * D, u.data() + b * T * D, static_cast<std::size_t>(T) * row_bytes,
                CopyKind::device_to_device);
        be.copy(x.data() + (b * T1 + T) * D, p.class_embedding.data(), row_bytes, CopyKind::device_to_device);
        View<A, 2> xb = x.narrow(0, b * T1, T1);
        be.add(View<const A, 2>(xb), pos, xb);
      }
    }
    affine_layer_norm(be, View<const A, 2>(x), p.pre.scale.cview(), p.pre.bias.cview(), c_.eps, x);
    ctx.sow(model + ".layernorm_pre", View<const A, 2>(x), {n, T1, D});

    // The rotary table (angles by row within a tile) and every row's index into it.
    RotaryTable rope = rotary_table();
    rope.cos = upload(be, rope.cos);
    rope.sin = upload(be, rope.sin);
    std::vector<std::int32_t> rows(static_cast<std::size_t>(M));
    for (std::int64_t r = 0; r < M; ++r) rows[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r % T1);
    const View<const std::int32_t, 1> positions = up_ints(rows);

    View<A, 2> h = scratch.alloc<A, 2>({M, D});
    View<A, 2> q = scratch.alloc<A, 2>({M, NH}), kk = scratch.alloc<A, 2>({M, NH}), v = scratch.alloc<A, 2>({M, NH});
    View<A, 2> o = scratch.alloc<A, 2>({M, NH}), f = scratch.alloc<A, 2>({M, F});
    const auto heads3 = [&](View<A, 2> r) { return View<A, 3>(r.data(), {M, N, H}, {NH, H, 1}); };
    const auto heads4 = [&](View<A, 2> r) { return View<A, 4>(r.data(), {n, T1, N, H}, {T1 * NH, NH, H, 1}); };
    const float qscale = 1.0f / std::sqrt(static_cast<float>(H));
    for (std::int64_t i = 0; i < c_.num_layers; ++i) {
      const LayerParams& lp = p.layers[static_cast<std::size_t>(i)];
      const std::string layer = enc + ".layers_" + std::to_string(i);
      affine_layer_norm(be, View<const A, 2>(x), lp.ln_in.scale.cview(), lp.ln_in.bias.cview(), c_.eps, h);
      qkv_.forward(ctx, lp.query, View<const A, 2>(h), q);
      qkv_.forward(ctx, lp.key, View<const A, 2>(h), kk);
      qkv_.forward(ctx, lp.value, View<const A, 2>(h), v);
      be.rotary(heads3(q), positions, rope);
      be.rotary(heads3(kk), positions, rope);
      be.scale(q, qscale);
      full_attention(be, View<const A, 4>(heads4(q)), View<const A, 4>(heads4(kk)), View<const A, 4>(heads4(v)), mask,
                     heads4(o));
      out_.forward(ctx, lp.out, View<const A, 2>(o), h);
      ctx.sow(layer + ".self_attention_vision", View<const A, 2>(h), {n, T1, D});
      be.add(View<const A, 2>(x), View<const A, 2>(h), x);
      affine_layer_norm(be, View<const A, 2>(x), lp.ln_post.scale.cview(), lp.ln_post.bias.cview(), c_.eps, h);
      fc1_.forward(ctx, lp.fc1, View<const A, 2>(h), f);
      be.activation(View<const A, 2>(f), Activation::gelu_exact, View<const A, 2>{}, Activation::linear, f);
      fc2_.forward(ctx, lp.fc2, View<const A, 2>(f), h);
      ctx.sow(layer + ".Llama4VisionMLP_0", View<const A, 2>(h), {n, T1, D});
      be.add(View<const A, 2>(x), View<const A, 2>(h), x);
      ctx.sow(layer, View<const A, 2>(x), {n, T1, D});
    }
    affine_layer_norm(be, View<const A, 2>(x), p.post.scale.cview(), p.post.bias.cview(), c_.eps, x);
    ctx.sow(model + ".layernorm_post", View<const A, 2>(x), {n, T1, D});

    // Pixel shuffle as a row gather: soft token (i, j) of tile b is rows (k i + a, k j + c) of its patches, a and c
    // row-major, so [n * tok * k^2, D] read as [n * tok, k^2 D] (the class rows are not gathered).
    View<A, 2> shuffled = scratch.alloc<A, 2>({Mo * k * k, D});
    {
      std::vector<std::int32_t> src(static_cast<std::size_t>(Mo * k * k));
      std::size_t at = 0;
      for (std::int64_t b = 0; b < n; ++b) {
        for (std::int64_t ti = 0; ti < Gt; ++ti) {
          for (std::int64_t tj = 0; tj < Gt; ++tj) {
            for (std::int64_t a = 0; a < k; ++a) {
              for (std::int64_t c = 0; c < k; ++c) {
                src[at++] = static_cast<std::int32_t>(b * T1 + (k * ti + a) * G + k * tj + c);
              }
            }
          }
        }
      }
      be.gather_rows(View<const A, 2>(x), up_ints(src), shuffled);
    }
    const View<const A, 2> grouped(shuffled.data(), {Mo, k * k * D});
    View<A, 2> a1 = scratch.alloc<A, 2>({Mo, Pin}), a2 = scratch.alloc<A, 2>({Mo, Pout});
    adapter_fc1_.forward(ctx, p.adapter_fc1, grouped, a1);
    be.activation(View<const A, 2>(a1), Activation::gelu_exact, View<const A, 2>{}, Activation::linear, a1);
    adapter_fc2_.forward(ctx, p.adapter_fc2, View<const A, 2>(a1), a2);
    be.activation(View<const A, 2>(a2), Activation::gelu_exact, View<const A, 2>{}, Activation::linear, a2);
    ctx.sow(model + ".Llama4VisionPixelShuffleMLP_0", View<const A, 2>(a2), {n, tok, Pout});
    View<A, 2> y = scratch.alloc<A, 2>({Mo, E});
    projector_.forward(ctx, p.projector, View<const A, 2>(a2), y);
    ctx.sow("vision_encoder.Llama4MultiModalProjector_0", View<const A, 2>(y), {n, tok, E});

    Tensor<float, 3> out({n, tok, E});
    be.copy(out.data(), y.data(), static_cast<std::size_t>(Mo * E) * sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    return out;
  }

 private:
  Llama4VisionConfig c_;
  Dense unfold_, qkv_, out_, fc1_, fc2_, adapter_fc1_, adapter_fc2_, projector_;
};

}  // namespace maxtext::layers

namespace maxtext::io {

/// The vision model and projector of a Hugging Face Llama4ForConditionalGeneration checkpoint (names with or without
/// the "model." prefix newer transformers write) in MaxText's names and layouts, as MaxText's converter maps them
/// (llama4_ckpt_unscanned.py): torch Linear weights [out, in] -> kernels [in, out] (q/k/v [D, N, H] with biases
/// [N, H], o_proj [N, H, D]), LayerNorm weight -> scale, the class and position embeddings as they are. The
/// language model's tensors are left out; any other vision tensor is refused by name.
inline TensorMap llama4_vision_from_hf(const TensorMap& hf, const layers::Llama4VisionConfig& c) {
  const std::string root = hf.has("model.vision_model.class_embedding") ? "model." : "";
  const std::string vm = root + "vision_model.", mm = root + "multi_modal_projector.";
  const std::string model = "vision_encoder.Llama4VisionModel_0.", enc = model + "Llama4VisionEncoder_0.";
  // NameMapper's head helpers read the sizes of the layer they map: here the tower's.
  Config sizes;
  sizes.emb_dim = c.hidden_size;
  sizes.num_query_heads = c.num_heads;
  sizes.head_dim = c.head_dim();
  detail::NameMapper m(hf, sizes, "llama4 vision", "Llama 4 vision");
  const auto tensor = [&](const std::string& from, const std::string& to, const std::vector<std::int64_t>& shape) {
    map_vision_tensor(m, from, to, shape);
  };
  const auto linear = [&](const std::string& from, const std::string& to, std::int64_t out, std::int64_t in, bool bias) {
    map_vision_linear(m, from, to, out, in, bias);
  };
  const auto norm = [&](const std::string& from, const std::string& to) {
    tensor(from + ".weight", to + ".scale", {c.hidden_size});
    tensor(from + ".bias", to + ".bias", {c.hidden_size});
  };
  const std::int64_t D = c.hidden_size, F = c.intermediate_size;
  linear(vm + "patch_embedding.linear", model + "Llama4UnfoldConvolution_0.vit_unfold_linear", D,
         c.num_channels * c.patch_size * c.patch_size, false);
  tensor(vm + "class_embedding", model + "class_embedding", {D});
  tensor(vm + "positional_embedding_vlm", model + "positional_embedding_vlm", {c.num_patches() + 1, D});
  norm(vm + "layernorm_pre", model + "layernorm_pre");
  norm(vm + "layernorm_post", model + "layernorm_post");
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = vm + "model.layers." + std::to_string(i) + ".";
    const std::string to = enc + "layers_" + std::to_string(i) + ".";
    norm(from + "input_layernorm", to + "input_layer_norm");
    norm(from + "post_attention_layernorm", to + "post_attention_layer_norm");
    m.head_proj(from + "self_attn.q_proj", to + "self_attention_vision.query", c.num_heads, true);
    m.head_proj(from + "self_attn.k_proj", to + "self_attention_vision.key", c.num_heads, true);
    m.head_proj(from + "self_attn.v_proj", to + "self_attention_vision.value", c.num_heads, true);
    m.out_proj(from + "self_attn.o_proj", to + "self_attention_vision.out", true);
    linear(from + "mlp.fc1", to + "Llama4VisionMLP_0.vit_encoder_layer_mlp_fc1", F, D, true);
    linear(from + "mlp.fc2", to + "Llama4VisionMLP_0.vit_encoder_layer_mlp_fc2", D, F, true);
  }
  const std::string adapter = model + "Llama4VisionPixelShuffleMLP_0.pixel_shuffle_mlp.";
  linear(vm + "vision_adapter.mlp.fc1", adapter + "vit_pixel_shuffle_mlp_fc1", c.projector_input_dim, F, false);
  linear(vm + "vision_adapter.mlp.fc2", adapter + "vit_pixel_shuffle_mlp_fc2", c.projector_output_dim,
         c.projector_input_dim, false);
  linear(mm + "linear_1", "vision_encoder.Llama4MultiModalProjector_0.vit_multi_modal_projector", c.emb_dim,
         c.projector_output_dim, false);
  // The language model's tensors (any name outside the tower's two prefixes) are not this mapping's to check.
  std::vector<std::string> others;
  for (const auto& [name, t] : hf.tensors) {
    if (name.rfind(vm, 0) != 0 && name.rfind(mm, 0) != 0) others.push_back(name);
  }
  m.mark_used(others);
  return m.finish();
}

/// A llama.cpp "mmproj" file of Llama 4's vision model, as convert_hf_to_gguf.py --mmproj writes it
/// (Llama4VisionModel): general.architecture clip, clip.projector_type llama4, the sizes under clip.vision.*
/// (projection_dim: the text model's width; projector.scale_factor: 1 / pixel_shuffle_ratio), the adapter's and
/// projector's widths from their tensors, the rotary base llama.cpp's (10000), and Hugging Face's tensors renamed
/// (v.patch_embd, v.class_embd, v.position_embd, v.pre_ln, v.post_ln, v.blk.N.{ln1, attn_q, attn_k, attn_v, attn_out,
/// ln2, ffn_up, ffn_down}, mm.model.mlp.{1,2}, mm.model.fc) in their HF layout, F32 or F16 (block types decoded).
/// The pre-MLP norm is v.blk.N.ln2, or v.blk.N.attn_post_norm in files of converters whose name table gives
/// post_attention_layernorm Gemma 4's name (llama.cpp de3ff815, which node-llama-cpp bundles: its own graph then
/// applies that norm's weight to the attention output, and a plain LayerNorm without scale or bias before the MLP);
/// here it is the norm before the MLP either way, as the checkpoint defines it.
struct Llama4Mmproj {
  layers::Llama4VisionConfig config;
  TensorMap tensors;  ///< MaxText names (as llama4_vision_from_hf gives them)
};

inline Llama4Mmproj llama4_vision_from_mmproj(GgufFile g) {
  const std::string& path = g.path;
  check_mmproj_header(g, "llama4", "Llama 4");
  layers::Llama4VisionConfig c;
  c.image_size = g.get_int("clip.vision.image_size");
  c.patch_size = g.get_int("clip.vision.patch_size");
  c.hidden_size = g.get_int("clip.vision.embedding_length");
  c.intermediate_size = g.get_int("clip.vision.feed_forward_length");
  c.num_layers = g.get_int("clip.vision.block_count");
  c.num_heads = g.get_int("clip.vision.attention.head_count");
  c.emb_dim = g.get_int("clip.vision.projection_dim");
  c.eps = static_cast<float>(g.get_float("clip.vision.attention.layer_norm_epsilon", 1e-5));
  const std::int64_t merge = g.get_int("clip.vision.projector.scale_factor", 2);
  MAXTEXT_CHECK(merge > 0, IoError, "[mmproj] ", path, ": clip.vision.projector.scale_factor must be > 0, found ", merge);
  c.pixel_shuffle_ratio = 1.0 / static_cast<double>(merge);
  c.rope_theta = 10000.0;  // clip.cpp's constant for llama4 (the file has no key for it)
  dequantize_block_tensors(g);
  // The adapter's widths: mm.model.mlp.1 [projector_input_dim, intermediate], mm.model.mlp.2 [output, input].
  for (const char* name : {"mm.model.mlp.1.weight", "mm.model.mlp.2.weight"}) {
    MAXTEXT_CHECK(g.tensors.has(name) && g.tensors.at(name).rank() == 2, IoError, "[mmproj] ", path,
                  ": missing the 2-D tensor ", name, " (Llama 4's adapter)");
  }
  c.projector_input_dim = g.tensors.at("mm.model.mlp.1.weight").shape[0];
  c.projector_output_dim = g.tensors.at("mm.model.mlp.2.weight").shape[0];
  c.validate();

  // Hugging Face's names for llama.cpp's, then the HF mapping (whose checks name the shapes).
  MmprojRenamer r(g, "Llama 4");
  const std::string vm = "vision_model.";
  const auto take = [&](const std::string& from, const std::string& to) { r.take(from, to); };
  const auto pair = [&](const std::string& from, const std::string& to) { r.pair(from, to); };
  take("v.patch_embd.weight", vm + "patch_embedding.linear.weight");
  take("v.class_embd", vm + "class_embedding");
  take("v.position_embd.weight", vm + "positional_embedding_vlm");
  pair("v.pre_ln", vm + "layernorm_pre");
  pair("v.post_ln", vm + "layernorm_post");
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".", l = vm + "model.layers." + std::to_string(i) + ".";
    pair(b + "ln1", l + "input_layernorm");
    pair(b + (g.tensors.has(b + "ln2.weight") ? "ln2" : "attn_post_norm"), l + "post_attention_layernorm");
    pair(b + "attn_q", l + "self_attn.q_proj");
    pair(b + "attn_k", l + "self_attn.k_proj");
    pair(b + "attn_v", l + "self_attn.v_proj");
    pair(b + "attn_out", l + "self_attn.o_proj");
    pair(b + "ffn_up", l + "mlp.fc1");
    pair(b + "ffn_down", l + "mlp.fc2");
  }
  take("mm.model.mlp.1.weight", vm + "vision_adapter.mlp.fc1.weight");
  take("mm.model.mlp.2.weight", vm + "vision_adapter.mlp.fc2.weight");
  take("mm.model.fc.weight", "multi_modal_projector.linear_1.weight");
  return Llama4Mmproj{c, llama4_vision_from_hf(r.finish(), c)};
}

}  // namespace maxtext::io
