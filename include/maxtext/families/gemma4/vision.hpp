// families/gemma4/vision.hpp: Gemma 4's vision encoder and projector, as MaxText defines them
// (models/gemma4_vision.py: VisionEntry, patchify, factorized_posemb, Gemma4EncoderBlock with Gemma4Attention and
// apply_multidimensional_rope, VisionExit with avg_pool_by_positions, Gemma4VisionEncoderLayer, Gemma4VisionProjector;
// layers/attentions.py for the q / k / v norms). n pictures [Hpx, Wpx, 3] (values in [0, 1]:
// families/gemma4/image_processor.hpp) of a Gh x Gw patch grid give (Gh / k) x (Gw / k) soft tokens each of the text
// model's width E (280 for MaxText's 672 x 960 pictures: 42 x 60 patches of 16, pooled 3 x 3).
//
//   patches p x p x 3 in (row, column, channel) order, each value v given as 2 (v - 0.5)
//   x = patches . W_in (no bias) + pos[x_col, 0] + pos[y_row, 1]   (pos [num_position_embeddings, 2, D])
//   L blocks: a = RMS_post_attn(Attn(RMS_pre_attn(x))); x = x + a
//             m = RMS_post_ffw(wo(gelu_tanh(wi_0 h) * wi_1 h)), h = RMS_pre_ffw(x); x = x + m
//     Attn: q, k, v, out projections without biases; q and k RMS-normed per head with scales, v per head without
//     (v_norm_with_scale: false); then the 2-D rotary on q and k: channels [0, hd/2) turn by the patch's column,
//     [hd/2, hd) by its row, each half as rotate-half RoPE of its own width (pairs (i, i + hd/4)) with timescales
//     theta^(2i / (hd/2)); no query scaling (query_pre_attn_scalar 1); softmax over all patches of the picture.
//   VisionExit: k x k average pooling of the patch grid (k = sqrt(T / vision_output_length)), times sqrt(D)
//   standardisation: (x - std_bias) * std_scale
//   projector: RMSNorm without scale, then x . W_proj [D, E] (no bias)
// RMSNorm scales multiply as stored (Gemma 4's checkpoints fold the 1). Everything runs in float32 (MaxText's dtype_mm);
// no operation is new beyond backend/vision.hpp's (the rectangular grid pooling, the whole-sequence attention), so the
// tower runs on every backend.
//
// Weights: MaxText's tree (vision_encoder.Gemma4VisionEncoderLayer_0..., vision_encoder.Gemma4VisionProjector_0...),
// or a Hugging Face Gemma4ForConditionalGeneration checkpoint's model.vision_tower.* and model.embed_vision.* tensors
// through gemma4_vision_from_hf (MaxText's converter's mapping, param_mapping.py GEMMA4_*: linear weights transposed,
// the position table's two axes swapped). Sizes: Gemma4VisionConfig from MaxText's keys or config.json.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
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

/// The sizes of Gemma 4's vision encoder (defaults: Gemma 4 26B / 31B, gemma4-26b.yml).
struct Gemma4VisionConfig {
  std::int64_t image_height = 672;  ///< MaxText's processor's fixed size (image_size_for_vit [H, W])
  std::int64_t image_width = 960;
  std::int64_t patch_size = 16;
  std::int64_t hidden_size = 1152;
  std::int64_t intermediate_size = 4304;
  std::int64_t num_layers = 27;
  std::int64_t num_heads = 16;
  std::int64_t pooling_kernel = 3;  ///< k: each soft token averages k x k patches
  std::int64_t num_position_embeddings = 10240;
  double rope_theta = 100.0;
  std::int64_t emb_dim = 0;  ///< the text model's embedding width E
  float eps = 1e-6f;

  static constexpr std::int64_t num_channels = 3;
  std::int64_t head_dim() const { return hidden_size / num_heads; }
  /// Soft tokens of a picture of hpx x wpx pixels.
  std::int64_t tokens_for(std::int64_t hpx, std::int64_t wpx) const {
    return (hpx / patch_size / pooling_kernel) * (wpx / patch_size / pooling_kernel);
  }
  /// Soft tokens of a picture at MaxText's fixed size.
  std::int64_t tokens_per_image() const { return tokens_for(image_height, image_width); }

  /// Refuses sizes MaxText's model cannot run, by MaxText's key names.
  void validate() const {
    const auto positive = [](std::int64_t v, const char* key) {
      MAXTEXT_CHECK(v > 0, ConfigError, "[gemma4 vision] ", key, " must be > 0, found ", v);
    };
    positive(image_height, "image_size_for_vit (height)");
    positive(image_width, "image_size_for_vit (width)");
    positive(patch_size, "patch_size_for_vit");
    positive(hidden_size, "hidden_size_for_vit");
    positive(intermediate_size, "intermediate_size_for_vit");
    positive(num_layers, "num_hidden_layers_for_vit");
    positive(num_heads, "num_attention_heads_for_vit");
    positive(pooling_kernel, "pooling kernel (from vision_output_length)");
    positive(num_position_embeddings, "num_position_embeddings_for_vit");
    positive(emb_dim, "emb_dim");
    // Bounds far above every released model's, so that absurd values are refused before sizes are multiplied.
    const auto at_most = [](std::int64_t v, std::int64_t most, const char* key) {
      MAXTEXT_CHECK(v <= most, ConfigError, "[gemma4 vision] ", key, " (", v, ") is above ", most);
    };
    at_most(image_height, 8192, "image_size_for_vit (height)");
    at_most(image_width, 8192, "image_size_for_vit (width)");
    at_most(patch_size, 256, "patch_size_for_vit");
    at_most(hidden_size, 1 << 16, "hidden_size_for_vit");
    at_most(intermediate_size, 1 << 20, "intermediate_size_for_vit");
    at_most(num_layers, 1024, "num_hidden_layers_for_vit");
    at_most(num_heads, hidden_size, "num_attention_heads_for_vit");
    at_most(pooling_kernel, 64, "pooling kernel");
    at_most(num_position_embeddings, 1 << 20, "num_position_embeddings_for_vit");
    at_most(emb_dim, 1 << 20, "emb_dim");
    MAXTEXT_CHECK(std::isfinite(eps) && eps > 0.0f, ConfigError,
                  "[gemma4 vision] normalization_layer_epsilon must be > 0, found ", eps);
    MAXTEXT_CHECK(std::isfinite(rope_theta) && rope_theta > 0.0, ConfigError,
                  "[gemma4 vision] rope_theta_for_vit must be > 0, found ", rope_theta);
    MAXTEXT_CHECK(hidden_size % num_heads == 0 && head_dim() % 4 == 0, UnsupportedError,
                  "[gemma4 vision] hidden_size_for_vit / num_attention_heads_for_vit (", hidden_size, " / ", num_heads,
                  ") must be a whole head size divisible by 4: the 2-D rotary gives each axis half of the head");
  }

  /// A picture of hpx x wpx pixels: whole pooling windows of patches, within the position table.
  void check_grid(std::int64_t hpx, std::int64_t wpx) const {
    const std::int64_t side = patch_size * pooling_kernel;
    MAXTEXT_CHECK(hpx > 0 && wpx > 0 && hpx % side == 0 && wpx % side == 0, ShapeError, "[gemma4 vision] a picture of ",
                  wpx, " x ", hpx, " pixels (W x H) is not made of whole ", side, "-pixel windows (patch ", patch_size,
                  " x pooling ", pooling_kernel, ")");
    MAXTEXT_CHECK(hpx / patch_size <= num_position_embeddings && wpx / patch_size <= num_position_embeddings, ShapeError,
                  "[gemma4 vision] a picture of ", wpx / patch_size, " x ", hpx / patch_size,
                  " patches exceeds the position table (num_position_embeddings_for_vit ", num_position_embeddings, ")");
  }

  /// From MaxText's keys (gemma4-*.yml with use_multimodal): image_size_for_vit ([H, W] or one size),
  /// patch_size_for_vit (= conv_stride_for_vit), num_channels_for_vit (3), hidden_size_for_vit,
  /// intermediate_size_for_vit, num_hidden_layers_for_vit, num_attention_heads_for_vit, rope_theta_for_vit,
  /// vision_output_length (the pooling: T / k^2 tokens), num_position_embeddings_for_vit, dtype_mm (float32),
  /// normalization_layer_epsilon, emb_dim. Unset keys keep Gemma 4's values.
  static Gemma4VisionConfig from_config(const Config& c) {
    Gemma4VisionConfig v;
    const auto get = [&](const char* key, auto& out) { vit_number(c, key, out, "gemma4 vision"); };
    if (const auto it = c.extra.find("image_size_for_vit"); it != c.extra.end() && it->second != "None") {
      // One size, or [H, W] (list values arrive as their text).
      std::vector<std::int64_t> sizes;
      std::string item;
      const auto flush = [&] {
        item = ::maxtext::detail::trim(item);
        if (!item.empty()) {
          Config one;
          one.extra["image_size_for_vit"] = item;
          std::int64_t s = 0;
          vit_number(one, "image_size_for_vit", s, "gemma4 vision");
          sizes.push_back(s);
        }
        item.clear();
      };
      for (char ch : it->second) {
        if (ch == ',' || ch == '[' || ch == ']') {
          flush();
        } else {
          item.push_back(ch);
        }
      }
      flush();
      MAXTEXT_CHECK(sizes.size() == 1 || sizes.size() == 2, ConfigError,
                    "[gemma4 vision] image_size_for_vit: expected one size or [height, width], found '", it->second, "'");
      v.image_height = sizes[0];
      v.image_width = sizes.back();
    }
    get("patch_size_for_vit", v.patch_size);
    std::int64_t stride = v.patch_size, channels = 3;
    get("conv_stride_for_vit", stride);
    MAXTEXT_CHECK(stride == v.patch_size, UnsupportedError, "[gemma4 vision] conv_stride_for_vit (", stride,
                  ") must equal patch_size_for_vit (", v.patch_size, ")");
    get("num_channels_for_vit", channels);
    MAXTEXT_CHECK(channels == 3, UnsupportedError, "[gemma4 vision] num_channels_for_vit ", channels,
                  ": Gemma 4's patches are RGB (3)");
    get("hidden_size_for_vit", v.hidden_size);
    get("intermediate_size_for_vit", v.intermediate_size);
    get("num_hidden_layers_for_vit", v.num_layers);
    get("num_attention_heads_for_vit", v.num_heads);
    get("rope_theta_for_vit", v.rope_theta);
    get("num_position_embeddings_for_vit", v.num_position_embeddings);
    std::int64_t length = -1;
    get("vision_output_length", length);
    if (length > 0) {
      // avg_pool_by_positions: k = floor(sqrt(T / length)), and k^2 * length must be T.
      MAXTEXT_CHECK(v.patch_size > 0 && v.image_height % v.patch_size == 0 && v.image_width % v.patch_size == 0,
                    ConfigError, "[gemma4 vision] image_size_for_vit ", v.image_height, " x ", v.image_width,
                    " is not a whole number of ", v.patch_size, "-pixel patches");
      const std::int64_t T = (v.image_height / v.patch_size) * (v.image_width / v.patch_size);
      std::int64_t k = 1;
      while ((k + 1) * (k + 1) * length <= T) ++k;
      MAXTEXT_CHECK(k * k * length == T, UnsupportedError, "[gemma4 vision] vision_output_length ", length,
                    " cannot pool ", T, " patches (it must be T / k^2 for a whole k)");
      v.pooling_kernel = k;
    } else {
      MAXTEXT_CHECK(length == -1, ConfigError, "[gemma4 vision] vision_output_length must be > 0, found ", length);
    }
    if (const auto it = c.extra.find("dtype_mm"); it != c.extra.end()) {
      MAXTEXT_CHECK(it->second == "float32", UnsupportedError, "[gemma4 vision] dtype_mm '", it->second,
                    "' is not implemented: the vision encoder runs in float32 (MaxText's default)");
    }
    MAXTEXT_CHECK(!c.v_norm_with_scale, UnsupportedError,
                  "[gemma4 vision] v_norm_with_scale true: the vision values' norm would have a scale that Gemma 4's "
                  "checkpoints lack (gemma4-*.yml set it false)");
    v.emb_dim = c.emb_dim;
    v.eps = static_cast<float>(c.normalization_layer_epsilon);
    v.validate();
    v.check_grid(v.image_height, v.image_width);  // MaxText's processor's fixed size
    return v;
  }

  /// From a Hugging Face Gemma4ForConditionalGeneration config.json (vision_config, text_config.hidden_size).
  /// vision_config.image_size ([H, W] or one size), which Hugging Face's configs lack, sets MaxText's fixed picture
  /// size (672 x 960 otherwise; checked against the model when that processor is used).
  static Gemma4VisionConfig from_hf(const nlohmann::json& j, const std::string& where = "config.json") {
    MAXTEXT_CHECK(j.is_object() && j.contains("vision_config") && j["vision_config"].is_object(), IoError, "[",
                  where, "] no vision_config: not a Gemma 4 checkpoint with a vision encoder");
    const auto& vc = j["vision_config"];
    Gemma4VisionConfig v;
    const auto get = [&](const nlohmann::json& o, const char* key, auto& out) {
      json_number(o, key, out, where, &o == &vc ? "vision_config." : "vision_config.rope_parameters.");
    };
    const auto flag = [&](const char* key) {
      if (!vc.contains(key) || vc[key].is_null()) return false;
      MAXTEXT_CHECK(vc[key].is_boolean(), IoError, "[", where, "] vision_config.", key, ": expected true or false, found ",
                    vc[key].dump());
      return vc[key].get<bool>();
    };
    if (vc.contains("image_size")) {
      const auto& s = vc["image_size"];
      if (s.is_array() && s.size() == 2 && s[0].is_number_integer() && s[1].is_number_integer()) {
        v.image_height = s[0].get<std::int64_t>();
        v.image_width = s[1].get<std::int64_t>();
      } else {
        MAXTEXT_CHECK(s.is_number_integer(), IoError, "[", where,
                      "] vision_config.image_size: expected [height, width] or one size, found ", s.dump());
        v.image_height = v.image_width = s.get<std::int64_t>();
      }
    }
    get(vc, "patch_size", v.patch_size);
    get(vc, "hidden_size", v.hidden_size);
    get(vc, "intermediate_size", v.intermediate_size);
    get(vc, "num_hidden_layers", v.num_layers);
    get(vc, "num_attention_heads", v.num_heads);
    get(vc, "pooling_kernel_size", v.pooling_kernel);
    get(vc, "position_embedding_size", v.num_position_embeddings);
    get(vc, "rms_norm_eps", v.eps);
    if (vc.contains("rope_parameters") && vc["rope_parameters"].is_object()) {
      const auto& rp = vc["rope_parameters"];
      if (rp.contains("rope_type") && rp["rope_type"].is_string()) {
        MAXTEXT_CHECK(rp["rope_type"].get<std::string>() == "default", UnsupportedError, "[", where,
                      "] vision_config.rope_parameters.rope_type ", rp["rope_type"].dump(),
                      ": Gemma 4's vision rotary is the default one");
      }
      get(rp, "rope_theta", v.rope_theta);
    }
    std::int64_t kv_heads = v.num_heads, head_dim = v.hidden_size / std::max<std::int64_t>(v.num_heads, 1);
    get(vc, "num_key_value_heads", kv_heads);
    get(vc, "head_dim", head_dim);
    MAXTEXT_CHECK(kv_heads == v.num_heads, UnsupportedError, "[", where, "] vision_config.num_key_value_heads ",
                  kv_heads, " differs from num_attention_heads ", v.num_heads,
                  ": MaxText's Gemma 4 vision attention has as many key / value heads as query heads");
    MAXTEXT_CHECK(v.num_heads > 0 && head_dim * v.num_heads == v.hidden_size, UnsupportedError, "[", where,
                  "] vision_config.head_dim ", head_dim, " x num_attention_heads ", v.num_heads,
                  " differs from hidden_size ", v.hidden_size, ": MaxText's heads split the width");
    if (vc.contains("hidden_activation")) {
      const std::string act = vc["hidden_activation"].is_string() ? vc["hidden_activation"].get<std::string>() : "";
      MAXTEXT_CHECK(act == "gelu_pytorch_tanh", UnsupportedError, "[", where, "] vision_config.hidden_activation '",
                    act, "': Gemma 4's vision MLP uses gelu_pytorch_tanh (MaxText's gelu)");
    }
    MAXTEXT_CHECK(!flag("attention_bias"), UnsupportedError, "[", where,
                  "] vision_config.attention_bias: Gemma 4's vision projections have no biases");
    MAXTEXT_CHECK(!flag("use_clipped_linears"), UnsupportedError, "[", where,
                  "] vision_config.use_clipped_linears: MaxText's Gemma 4 vision encoder does not clip its linears");
    if (j.contains("text_config") && j["text_config"].is_object()) {
      const auto& tc = j["text_config"];
      MAXTEXT_CHECK(tc.contains("hidden_size") && tc["hidden_size"].is_number_integer(), IoError, "[", where,
                    "] text_config.hidden_size: expected an integer (the projector's output width)");
      v.emb_dim = tc["hidden_size"].get<std::int64_t>();
    }
    v.validate();
    return v;
  }
};

/// Gemma 4's vision encoder and projector on policy P (float32 activations).
template <TensorPolicy P>
class Gemma4VisionEncoder {
 public:
  using A = typename P::act_t;
  using B = typename P::backend;
  static_assert(std::is_same_v<A, float>,
                "Gemma4VisionEncoder runs in float32 (MaxText's dtype_mm): use a policy with float activations");
  using Dense = DenseGeneral<P>;

  struct LayerParams {
    Tensor<A, 1> pre_attention_norm, post_attention_norm, pre_ffw_norm, post_ffw_norm;  ///< [D]
    Tensor<A, 1> query_norm, key_norm;                                                  ///< [head_dim]
    typename Dense::Params query, key, value, out, wi_0, wi_1, wo;
  };
  struct Params {
    typename Dense::Params input_projection;
    Tensor<A, 1> position;  ///< [num_position_embeddings * 2 * D]: pos_emb_param [S, 2, D]
    std::vector<LayerParams> layers;
    Tensor<A, 1> std_bias, std_scale;  ///< [D]
    typename Dense::Params projection;
  };

  Gemma4VisionEncoder() = default;
  explicit Gemma4VisionEncoder(const Gemma4VisionConfig& c) : c_(c) {
    c_.validate();
    const std::int64_t D = c_.hidden_size, N = c_.num_heads, H = c_.head_dim(), p = c_.patch_size;
    input_ = Dense({{p * p * Gemma4VisionConfig::num_channels}, {D}, false, Init::normal});
    qkv_ = Dense({{D}, {N, H}, false, Init::normal});
    out_ = Dense({{N, H}, {D}, false, Init::normal});
    wi_ = Dense({{D}, {c_.intermediate_size}, false, Init::normal});
    wo_ = Dense({{c_.intermediate_size}, {D}, false, Init::normal});
    projection_ = Dense({{D}, {c_.emb_dim}, false, Init::normal});
  }
  const Gemma4VisionConfig& config() const { return c_; }

  /// MaxText's parameter tree (names under vision_encoder.).
  template <class V>
  void visit(V& v, Params& p) const {
    p.layers.resize(static_cast<std::size_t>(c_.num_layers));
    const std::int64_t D = c_.hidden_size, H = c_.head_dim();
    Scope<V> top(v, "vision_encoder");
    {
      Scope<V> enc(v, "Gemma4VisionEncoderLayer_0");
      {
        Scope<V> entry(v, "vision_entry");
        visit_child(v, "input_projection", input_, p.input_projection);
        v.vector("pos_emb_param", p.position, {{c_.num_position_embeddings, 2, D}, Init::normal, 0.02});
      }
      for (std::int64_t i = 0; i < c_.num_layers; ++i) {
        LayerParams& l = p.layers[static_cast<std::size_t>(i)];
        Scope<V> layer(v, "layer_" + std::to_string(i));
        const auto norm = [&](std::string_view name, Tensor<A, 1>& t, std::int64_t dim) {
          Scope<V> s(v, name);
          v.vector("scale", t, {{dim}, Init::ones});
        };
        norm("pre_attention_norm", l.pre_attention_norm, D);
        norm("post_attention_norm", l.post_attention_norm, D);
        norm("pre_ffw_norm", l.pre_ffw_norm, D);
        norm("post_ffw_norm", l.post_ffw_norm, D);
        {
          Scope<V> att(v, "attention");
          visit_child(v, "query", qkv_, l.query);
          visit_child(v, "key", qkv_, l.key);
          visit_child(v, "value", qkv_, l.value);
          visit_child(v, "out", out_, l.out);
          norm("query_norm", l.query_norm, H);
          norm("key_norm", l.key_norm, H);
        }
        Scope<V> mlp(v, "mlp");
        visit_child(v, "wi_0", wi_, l.wi_0);
        visit_child(v, "wi_1", wi_, l.wi_1);
        visit_child(v, "wo", wo_, l.wo);
      }
      v.vector("std_bias", p.std_bias, {{D}, Init::zeros});
      v.vector("std_scale", p.std_scale, {{D}, Init::ones});
    }
    Scope<V> proj(v, "Gemma4VisionProjector_0");
    visit_child(v, "projection", projection_, p.projection);
  }

  /// The rotary's angles by coordinate (0 .. the grid's longer side - 1), for one half of a head (hd/2 channels,
  /// hd/4 pairs): coordinate * theta^(-2i / (hd/2)), as MaxText forms it in float32 (timescale = theta ** fraction,
  /// then position / timescale), its cosine and sine rounded from double.
  RotaryTable rotary_table(std::int64_t coordinates) const {
    const std::int64_t half = c_.head_dim() / 2, pairs = half / 2;
    RotaryTable t;
    t.rot_dims = half;
    t.layout = RopeLayout::half_split;
    t.round_sincos_to_input = false;
    t.cos = Tensor<float, 2>({coordinates, pairs});
    t.sin = Tensor<float, 2>({coordinates, pairs});
    for (std::int64_t i = 0; i < pairs; ++i) {
      const float fraction = static_cast<float>(2 * i) / static_cast<float>(half);
      const float timescale = std::pow(static_cast<float>(c_.rope_theta), fraction);
      for (std::int64_t r = 0; r < coordinates; ++r) {
        const float angle = static_cast<float>(r) / timescale;
        t.cos(r, i) = static_cast<float>(std::cos(static_cast<double>(angle)));
        t.sin(r, i) = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    return t;
  }

  /// Pictures [n, Hpx, Wpx, 3] (host, float32 in [0, 1], the processor's output; every picture the same size, whole
  /// pooling windows of patches) -> soft tokens [n, tokens_for(Hpx, Wpx), E] (host). `capture` records, under
  /// MaxText's module paths (vision_encoder.Gemma4VisionEncoderLayer_0.*): vision_entry [n, T, D], layer_i (and
  /// their attention and mlp outputs), vision_exit [n, tokens, D] (pooled, times sqrt(D)), the encoder's output
  /// (vision_encoder.Gemma4VisionEncoderLayer_0, after the standardisation) and vision_encoder.Gemma4VisionProjector_0.
  Tensor<float, 3> encode(const B& be, const Params& p, const Tensor<float, 4>& pixels, Capture* capture = nullptr) const {
    const std::int64_t n = pixels.dim(0), Hpx = pixels.dim(1), Wpx = pixels.dim(2), ps = c_.patch_size;
    MAXTEXT_CHECK(n > 0 && pixels.dim(3) == Gemma4VisionConfig::num_channels, ShapeError,
                  "[gemma4 vision] pictures must be [n, height, width, 3], found ", pixels.shape());
    c_.check_grid(Hpx, Wpx);
    const std::int64_t Gh = Hpx / ps, Gw = Wpx / ps, T = Gh * Gw, D = c_.hidden_size, M = n * T;
    const std::int64_t N = c_.num_heads, H = c_.head_dim(), NH = N * H, F = c_.intermediate_size, E = c_.emb_dim;
    const std::int64_t k = c_.pooling_kernel, tok = (Gh / k) * (Gw / k), Mo = n * tok;

    Scratch scratch(be.memory());
    const WholeSequences seqs = whole_sequences(be, scratch, n, T);
    const AttentionMask& mask = seqs.mask;
    const Context<P> ctx{be, scratch, seqs.step, capture};
    const auto up_ints = [&](const std::vector<std::int32_t>& h) { return upload_ints(be, scratch, h); };
    const std::string enc = "vision_encoder.Gemma4VisionEncoderLayer_0";

    // Patches [n * T, p * p * 3] in (row, column, channel) order, 2 (v - 0.5), gathered on the host; the projection.
    View<A, 2> x = scratch.alloc<A, 2>({M, D});
    {
      const std::int64_t K = ps * ps * 3;
      Tensor<float, 2> patches({M, K});
      for (std::int64_t b = 0; b < n; ++b) {
        for (std::int64_t gy = 0; gy < Gh; ++gy) {
          for (std::int64_t gx = 0; gx < Gw; ++gx) {
            float* row = &patches((b * Gh + gy) * Gw + gx, 0);
            for (std::int64_t i = 0; i < ps; ++i) {
              for (std::int64_t j = 0; j < ps; ++j) {
                for (std::int64_t c = 0; c < 3; ++c) {
                  row[(i * ps + j) * 3 + c] = 2.0f * (pixels(b, gy * ps + i, gx * ps + j, c) - 0.5f);
                }
              }
            }
          }
        }
      }
      View<A, 2> pd = scratch.alloc<A, 2>({M, K});
      be.copy(pd.data(), patches.data(), static_cast<std::size_t>(M * K) * sizeof(float), CopyKind::host_to_device);
      input_.forward(ctx, p.input_projection, View<const A, 2>(pd), x);
    }
    // The factorized position embedding: pos[column, 0] + pos[row, 1], rows of the table read as [2 S, D].
    std::vector<std::int32_t> col(static_cast<std::size_t>(M)), row(static_cast<std::size_t>(M));
    {
      std::vector<std::int32_t> px(static_cast<std::size_t>(M)), py(static_cast<std::size_t>(M));
      for (std::int64_t r = 0; r < M; ++r) {
        const std::int64_t t = r % T;
        col[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(t % Gw);
        row[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(t / Gw);
        px[static_cast<std::size_t>(r)] = 2 * col[static_cast<std::size_t>(r)];
        py[static_cast<std::size_t>(r)] = 2 * row[static_cast<std::size_t>(r)] + 1;
      }
      const View<const A, 2> table(p.position.data(), {2 * c_.num_position_embeddings, D});
      View<A, 2> ex = scratch.alloc<A, 2>({M, D}), ey = scratch.alloc<A, 2>({M, D});
      be.gather_rows(table, up_ints(px), ex);
      be.gather_rows(table, up_ints(py), ey);
      be.add(View<const A, 2>(ex), View<const A, 2>(ey), ex);
      be.add(View<const A, 2>(x), View<const A, 2>(ex), x);
    }
    ctx.sow(enc + ".vision_entry", View<const A, 2>(x), {n, T, D});

    // The rotary: one table by coordinate, the columns turning the first half of each head, the rows the second.
    RotaryTable rope = rotary_table(std::max(Gh, Gw));
    rope.cos = upload(be, rope.cos);
    rope.sin = upload(be, rope.sin);
    const View<const std::int32_t, 1> cols = up_ints(col), rows = up_ints(row);

    View<A, 2> h = scratch.alloc<A, 2>({M, D});
    View<A, 2> q = scratch.alloc<A, 2>({M, NH}), kk = scratch.alloc<A, 2>({M, NH}), v = scratch.alloc<A, 2>({M, NH});
    View<A, 2> o = scratch.alloc<A, 2>({M, NH}), f0 = scratch.alloc<A, 2>({M, F}), f1 = scratch.alloc<A, 2>({M, F});
    const auto per_head = [&](View<A, 2> r) { return View<A, 2>(r.data(), {M * N, H}); };
    const auto half = [&](View<A, 2> r, std::int64_t which) {
      return View<A, 3>(r.data() + which * (H / 2), {M, N, H / 2}, {NH, H, 1});
    };
    const auto heads4 = [&](View<A, 2> r) { return View<A, 4>(r.data(), {n, T, N, H}, {T * NH, NH, H, 1}); };
    const auto norm = [&](View<A, 2> in, const Tensor<A, 1>& scale, View<A, 2> out) {
      be.rms_norm(View<const A, 2>(in), scale.cview(), c_.eps, 0.0f, out);
    };
    for (std::int64_t i = 0; i < c_.num_layers; ++i) {
      const LayerParams& lp = p.layers[static_cast<std::size_t>(i)];
      const std::string layer = enc + ".layer_" + std::to_string(i);
      norm(x, lp.pre_attention_norm, h);
      qkv_.forward(ctx, lp.query, View<const A, 2>(h), q);
      qkv_.forward(ctx, lp.key, View<const A, 2>(h), kk);
      qkv_.forward(ctx, lp.value, View<const A, 2>(h), v);
      norm(per_head(q), lp.query_norm, per_head(q));
      norm(per_head(kk), lp.key_norm, per_head(kk));
      be.rms_norm(View<const A, 2>(per_head(v)), View<const A, 1>{}, c_.eps, 0.0f, per_head(v));
      for (View<A, 2> t : {q, kk}) {
        be.rotary(half(t, 0), cols, rope);
        be.rotary(half(t, 1), rows, rope);
      }
      full_attention(be, View<const A, 4>(heads4(q)), View<const A, 4>(heads4(kk)), View<const A, 4>(heads4(v)), mask,
                     heads4(o));
      out_.forward(ctx, lp.out, View<const A, 2>(o), h);
      norm(h, lp.post_attention_norm, h);
      ctx.sow(layer + ".attention", View<const A, 2>(h), {n, T, D});
      be.add(View<const A, 2>(x), View<const A, 2>(h), x);
      norm(x, lp.pre_ffw_norm, h);
      wi_.forward(ctx, lp.wi_0, View<const A, 2>(h), f0);
      wi_.forward(ctx, lp.wi_1, View<const A, 2>(h), f1);
      be.activation(View<const A, 2>(f0), Activation::gelu, View<const A, 2>(f1), Activation::linear, f0);
      wo_.forward(ctx, lp.wo, View<const A, 2>(f0), h);
      norm(h, lp.post_ffw_norm, h);
      ctx.sow(layer + ".mlp", View<const A, 2>(h), {n, T, D});
      be.add(View<const A, 2>(x), View<const A, 2>(h), x);
      ctx.sow(layer, View<const A, 2>(x), {n, T, D});
    }

    // VisionExit: k x k pooling of the patch grid (avg_pool_by_positions' order: row-major over the pooled grid),
    // times sqrt(D); then the standardisation (x - std_bias) * std_scale, on the host (n * tokens rows).
    View<A, 2> pooled = scratch.alloc<A, 2>({Mo, D});
    avg_pool_grid(be, View<const A, 2>(x), n, Gh, Gw, k, pooled);
    be.scale(pooled, static_cast<float>(std::sqrt(static_cast<double>(D))));
    ctx.sow(enc + ".vision_exit", View<const A, 2>(pooled), {n, tok, D});
    {
      Tensor<float, 2> host({Mo, D});
      std::vector<float> bias(static_cast<std::size_t>(D)), scale(static_cast<std::size_t>(D));
      be.copy(host.data(), pooled.data(), static_cast<std::size_t>(Mo * D) * sizeof(float), CopyKind::device_to_host);
      be.copy(bias.data(), p.std_bias.data(), static_cast<std::size_t>(D) * sizeof(float), CopyKind::device_to_host);
      be.copy(scale.data(), p.std_scale.data(), static_cast<std::size_t>(D) * sizeof(float), CopyKind::device_to_host);
      be.synchronize();
      for (std::int64_t r = 0; r < Mo; ++r) {
        for (std::int64_t d = 0; d < D; ++d) {
          host(r, d) = (host(r, d) - bias[static_cast<std::size_t>(d)]) * scale[static_cast<std::size_t>(d)];
        }
      }
      be.copy(pooled.data(), host.data(), static_cast<std::size_t>(Mo * D) * sizeof(float), CopyKind::host_to_device);
    }
    ctx.sow(enc, View<const A, 2>(pooled), {n, tok, D});

    // The projector: RMSNorm without a scale, then the projection to the text model's width.
    be.rms_norm(View<const A, 2>(pooled), View<const A, 1>{}, c_.eps, 0.0f, pooled);
    View<A, 2> y = scratch.alloc<A, 2>({Mo, E});
    projection_.forward(ctx, p.projection, View<const A, 2>(pooled), y);
    ctx.sow("vision_encoder.Gemma4VisionProjector_0", View<const A, 2>(y), {n, tok, E});

    Tensor<float, 3> result({n, tok, E});
    be.copy(result.data(), y.data(), static_cast<std::size_t>(Mo * E) * sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    return result;
  }

 private:
  Gemma4VisionConfig c_;
  Dense input_, qkv_, out_, wi_, wo_, projection_;
};

}  // namespace maxtext::layers

namespace maxtext::io {

/// The vision encoder and projector of a Hugging Face Gemma4ForConditionalGeneration checkpoint
/// (model.vision_tower.*, model.embed_vision.*) in MaxText's names and layouts, as MaxText's converter maps them
/// (GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks): Linear weights (the ClippableLinear's .linear.weight) [out, in]
/// -> kernels [in, out] (q / k / v [D, N, hd], o_proj [N, hd, D]), norms' weights as scales, the position table
/// [2, S, D] -> [S, 2, D], std_bias / std_scale as they are (zeros and ones when the checkpoint has none:
/// vision_config.standardize false). Clipping bounds (.input_min / .input_max / .output_min / .output_max) are
/// accepted only when infinite or at float's limits: MaxText's encoder does not clip. The language and audio models'
/// tensors are left out; any other vision tensor is refused by name.
inline TensorMap gemma4_vision_from_hf(const TensorMap& hf, const layers::Gemma4VisionConfig& c) {
  const std::string vt = "model.vision_tower.", ev = "model.embed_vision.";
  const std::string enc = "vision_encoder.Gemma4VisionEncoderLayer_0.";
  Config sizes;
  sizes.emb_dim = c.hidden_size;
  sizes.num_query_heads = c.num_heads;
  sizes.head_dim = c.head_dim();
  detail::NameMapper m(hf, sizes, "gemma4 vision", "Gemma 4 vision");
  const std::int64_t D = c.hidden_size, F = c.intermediate_size, H = c.head_dim(), p = c.patch_size;
  const auto tensor = [&](const std::string& from, const std::string& to, const std::vector<std::int64_t>& shape) {
    map_vision_tensor(m, from, to, shape);
  };
  const auto linear = [&](const std::string& from, const std::string& to, std::int64_t out, std::int64_t in) {
    map_vision_linear(m, from, to, out, in, false);
  };
  linear(vt + "patch_embedder.input_proj", enc + "vision_entry.input_projection", D, p * p * 3);
  if (const AnyTensor* t = m.get(vt + "patch_embedder.position_embedding_table")) {
    const std::string from = vt + "patch_embedder.position_embedding_table";
    m.shape(*t, {2, c.num_position_embeddings, D}, from);
    m.put(enc + "vision_entry.pos_emb_param", t->permuted({1, 0, 2}), from);
  }
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = vt + "encoder.layers." + std::to_string(i) + ".";
    const std::string to = enc + "layer_" + std::to_string(i) + ".";
    tensor(from + "input_layernorm.weight", to + "pre_attention_norm.scale", {D});
    tensor(from + "post_attention_layernorm.weight", to + "post_attention_norm.scale", {D});
    tensor(from + "pre_feedforward_layernorm.weight", to + "pre_ffw_norm.scale", {D});
    tensor(from + "post_feedforward_layernorm.weight", to + "post_ffw_norm.scale", {D});
    m.head_proj(from + "self_attn.q_proj.linear", to + "attention.query", c.num_heads, false);
    m.head_proj(from + "self_attn.k_proj.linear", to + "attention.key", c.num_heads, false);
    m.head_proj(from + "self_attn.v_proj.linear", to + "attention.value", c.num_heads, false);
    m.out_proj(from + "self_attn.o_proj.linear", to + "attention.out", false);
    tensor(from + "self_attn.q_norm.weight", to + "attention.query_norm.scale", {H});
    tensor(from + "self_attn.k_norm.weight", to + "attention.key_norm.scale", {H});
    linear(from + "mlp.gate_proj.linear", to + "mlp.wi_0", F, D);
    linear(from + "mlp.up_proj.linear", to + "mlp.wi_1", F, D);
    linear(from + "mlp.down_proj.linear", to + "mlp.wo", D, F);
  }
  if (hf.has(vt + "std_bias") || hf.has(vt + "std_scale")) {
    tensor(vt + "std_bias", enc + "std_bias", {D});
    tensor(vt + "std_scale", enc + "std_scale", {D});
  } else {
    Tensor<float, 1> zeros({D}), ones({D});
    for (std::int64_t d = 0; d < D; ++d) {
      zeros(d) = 0.0f;
      ones(d) = 1.0f;
    }
    m.put(enc + "std_bias", AnyTensor::from(zeros, "no std_bias (standardize false): zeros"));
    m.put(enc + "std_scale", AnyTensor::from(ones, "no std_scale (standardize false): ones"));
  }
  linear(ev + "embedding_projection", "vision_encoder.Gemma4VisionProjector_0.projection", c.emb_dim, D);
  // Clipping bounds: accepted when they do not clip; the language and audio models' tensors are not this mapping's.
  std::vector<std::string> others;
  for (const auto& [name, t] : hf.tensors) {
    const bool tower = name.rfind(vt, 0) == 0 || name.rfind(ev, 0) == 0;
    static const char* const bounds[] = {".input_min", ".input_max", ".output_min", ".output_max"};
    bool bound = false;
    for (const char* b : bounds) {
      if (name.size() > std::string_view(b).size() && name.ends_with(b)) bound = true;
    }
    if (tower && bound) {
      const Tensor<float, 1> values = t.to<float, 1>({t.numel()});
      for (std::int64_t e = 0; e < values.dim(0); ++e) {
        const float x = values(e);
        const bool lower = name.ends_with("_min");
        const bool open = lower ? x <= -std::numeric_limits<float>::max() : x >= std::numeric_limits<float>::max();
        MAXTEXT_CHECK(open, UnsupportedError, "[gemma4 vision] ", name, " = ", x,
                      ": a clipped linear (use_clipped_linears); MaxText's Gemma 4 vision encoder does not clip");
      }
    }
    if (!tower || bound) others.push_back(name);
  }
  m.mark_used(others);
  return m.finish();
}

/// A llama.cpp "mmproj" file of Gemma 4's vision encoder, as convert_hf_to_gguf.py --mmproj writes it
/// (Gemma4VisionAudioModel): general.architecture clip, clip.vision.projector_type gemma4v (the converter writes it
/// under that key; clip.projector_type is read first), the sizes under clip.vision.*
/// (projection_dim: the text model's width; projector.scale_factor, when present: the pooling kernel, 3 otherwise),
/// the rotary base llama.cpp's (100), the position table's size from its tensor, and Hugging Face's tensors renamed
/// (v.patch_embd [D, 3, p, p] as a convolution's kernel, v.position_embd [2, S, D], v.blk.N.{ln1, attn_q, attn_k,
/// attn_v, attn_out, attn_q_norm, attn_k_norm, attn_post_norm, ln2, ffn_gate, ffn_up, ffn_down, ffn_post_norm},
/// v.std_bias / v.std_scale, mm.input_projection; clipping bounds .input_min ... beside their weights), F32 or F16
/// (block types decoded). The file names no activation (llama.cpp de3ff815's clip.cpp then takes gelu_quick); the
/// MLP here is the checkpoint's and MaxText's tanh GELU.
struct Gemma4Mmproj {
  layers::Gemma4VisionConfig config;
  TensorMap tensors;  ///< MaxText names (as gemma4_vision_from_hf gives them)
};

inline Gemma4Mmproj gemma4_vision_from_mmproj(GgufFile g) {
  const std::string& path = g.path;
  check_mmproj_header(g, "gemma4v", "Gemma 4", MmprojExpect{0.0, 1.0, false});
  layers::Gemma4VisionConfig c;
  c.patch_size = g.get_int("clip.vision.patch_size");
  c.hidden_size = g.get_int("clip.vision.embedding_length");
  c.intermediate_size = g.get_int("clip.vision.feed_forward_length");
  c.num_layers = g.get_int("clip.vision.block_count");
  c.num_heads = g.get_int("clip.vision.attention.head_count");
  c.emb_dim = g.get_int("clip.vision.projection_dim");
  c.eps = static_cast<float>(g.get_float("clip.vision.attention.layer_norm_epsilon", 1e-6));
  c.pooling_kernel = g.get_int("clip.vision.projector.scale_factor", 3);
  c.rope_theta = 100.0;  // clip.cpp's constant for gemma4v (the file has no key for it)
  dequantize_block_tensors(g);
  const char* table = "v.position_embd.weight";
  MAXTEXT_CHECK(g.tensors.has(table) && g.tensors.at(table).rank() == 3 && g.tensors.at(table).shape[0] == 2, IoError,
                "[mmproj] ", path, ": ", table, " must be [2, positions, D] (Gemma 4's factorized position table)");
  c.num_position_embeddings = g.tensors.at(table).shape[1];
  c.validate();

  // Hugging Face's names for llama.cpp's, then the HF mapping (whose checks name the shapes).
  MmprojRenamer r(g, "Gemma 4");
  const std::string vt = "model.vision_tower.";
  static const char* const bounds[] = {".input_min", ".input_max", ".output_min", ".output_max"};
  const auto linear = [&](const std::string& from, const std::string& to) {
    r.take(from + ".weight", to + ".weight");
    for (const char* b : bounds) {
      if (g.tensors.has(from + b)) r.take(from + b, to + b);
    }
  };
  r.take(table, vt + "patch_embedder.position_embedding_table");
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".", l = vt + "encoder.layers." + std::to_string(i) + ".";
    r.take(b + "ln1.weight", l + "input_layernorm.weight");
    r.take(b + "attn_post_norm.weight", l + "post_attention_layernorm.weight");
    r.take(b + "ln2.weight", l + "pre_feedforward_layernorm.weight");
    r.take(b + "ffn_post_norm.weight", l + "post_feedforward_layernorm.weight");
    r.take(b + "attn_q_norm.weight", l + "self_attn.q_norm.weight");
    r.take(b + "attn_k_norm.weight", l + "self_attn.k_norm.weight");
    linear(b + "attn_q", l + "self_attn.q_proj.linear");
    linear(b + "attn_k", l + "self_attn.k_proj.linear");
    linear(b + "attn_v", l + "self_attn.v_proj.linear");
    linear(b + "attn_out", l + "self_attn.o_proj.linear");
    linear(b + "ffn_gate", l + "mlp.gate_proj.linear");
    linear(b + "ffn_up", l + "mlp.up_proj.linear");
    linear(b + "ffn_down", l + "mlp.down_proj.linear");
  }
  if (g.tensors.has("v.std_bias") || g.tensors.has("v.std_scale")) {
    r.take("v.std_bias", vt + "std_bias");
    r.take("v.std_scale", vt + "std_scale");
  }
  linear("mm.input_projection", "model.embed_vision.embedding_projection");
  // The patch kernel: llama.cpp stores the convolution's [D, 3, p, p]; Hugging Face's linear reads (row, column,
  // channel) features, [D, p * p * 3].
  MAXTEXT_CHECK(g.tensors.has("v.patch_embd.weight"), IoError, "[mmproj] ", path, ": missing tensor v.patch_embd.weight");
  const AnyTensor& k = g.tensors.at("v.patch_embd.weight");
  const std::int64_t D = c.hidden_size, p = c.patch_size;
  MAXTEXT_CHECK(k.shape == std::vector<std::int64_t>({D, 3, p, p}), ShapeError, "[mmproj] ", path,
                ": v.patch_embd.weight: expected shape ", std::vector<std::int64_t>({D, 3, p, p}), ", found ", k.describe());
  r.take("v.patch_embd.weight", vt + "patch_embedder.input_proj.weight");
  TensorMap hf = r.finish();
  hf.tensors.erase(vt + "patch_embedder.input_proj.weight");
  const Tensor<float, 4> hwc = k.permuted({0, 2, 3, 1}).to<float, 4>({D, p, p, 3});
  hf.add(vt + "patch_embedder.input_proj.weight",
         AnyTensor::from(hwc, path + ": v.patch_embd.weight as [D, p, p, 3]").reshaped({D, p * p * 3}));
  return Gemma4Mmproj{c, gemma4_vision_from_hf(hf, c)};
}

}  // namespace maxtext::io
