// families/qwen/audio.hpp: Qwen3-Omni's audio encoder and projector, as MaxText defines them (models/qwen3.py
// Qwen3OmniAudioEncoder, Qwen3OmniAudioEncoderLayer, Qwen3OmniAudioProjector; layers/embeddings.py's sinusoids).
// Log-mel features [mel, T] (families/qwen/audio_processor.hpp) give soft tokens of the text model's width:
//
//   the frames cut into chunks of 2 n_window (100) frames; per chunk, as an image of mel rows x frame columns:
//     3 x (3 x 3 convolution, stride 2, zero padding 1, + bias, gelu)       -> [C, mel / 8, 13] for 100 frames
//     rows t = [C x mel / 8] (index c (mel / 8) + f) . conv_out (no bias) + sinusoid(t)  -> [13, D]
//        sinusoid(t) = [sin(t inv_j) | cos(t inv_j)], inv_j = exp(-j ln(max_timescale) / (D / 2 - 1)), j < D / 2
//   L pre-LN layers: x = x + Attn(LN_1(x)); x = x + wo(gelu(wi(LN_2(x))))
//     Attn: q, k, v, out with biases, q scaled by hd^-0.5 after its bias, no rotary, softmax over the tokens of the
//     same attention window only
//   LN_post, then the projector: proj2(gelu(proj1(x))) -> [tokens, output_dim]
// LN is LayerNorm (eps 1e-5) with scale and bias. Everything in float32.
//
// Two forms, as the sources differ (tests/fixtures/qwen3_omni_audio/meta.json lists it):
//   - AudioForm::maxtext (the default): gelu is the tanh form everywhere; every chunk is whole (MaxText's processor
//     pads the sound to whole seconds: 13 tokens a second); a token attends within its chunk.
//   - AudioForm::hf (Hugging Face's Qwen3OmniMoeAudioEncoder): exact (erf) gelu; a last partial chunk is zero-padded
//     to the longest chunk for the convolutions and keeps its own token count; a token attends within windows of
//     (tokens of the longest chunk) x (n_window_infer / (2 n_window)) tokens.
// The convolutions run as products on the backend over the 3 x 3 windows gathered on the host (a few chunks at a
// time); no operation is new, so every backend runs the tower.
//
// Weights: MaxText's tree (audio_encoder.Qwen3OmniAudioEncoder_0.*, audio_encoder.Qwen3OmniAudioProjector_0.*), or a
// Hugging Face checkpoint's thinker.audio_tower.* through qwen3_omni_audio_from_hf (MaxText's converter's mapping,
// param_mapping.py: the conv kernels [O, I, 3, 3] -> [3, 3, I, O], Linear weights transposed, q / k / v / out split
// into heads).
#pragma once

#include <algorithm>
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
#include "maxtext/io/name_mapper.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/layers/vision_config.hpp"
#include "maxtext/layers/vision_step.hpp"

namespace maxtext::layers {

/// Which source's encoder to follow where MaxText and Hugging Face differ (see the header comment).
enum class AudioForm { maxtext, hf };

/// The sizes of Qwen3-Omni's audio encoder (defaults: Qwen3-Omni-30B-A3B, qwen3-omni-30b-a3b.yml).
struct Qwen3OmniAudioConfig {
  std::int64_t d_model = 1280;
  std::int64_t num_layers = 32;
  std::int64_t num_heads = 20;
  std::int64_t ffn_dim = 5120;
  std::int64_t num_mel_bins = 128;
  std::int64_t downsample_hidden_size = 480;
  std::int64_t output_dim = 2048;  ///< the text model's embedding width
  std::int64_t n_window = 50;      ///< a chunk is 2 n_window frames
  std::int64_t n_window_infer = 400;  ///< AudioForm::hf: attention windows of n_window_infer frames
  double max_timescale = 10000.0;
  float eps = 1e-5f;
  AudioForm form = AudioForm::maxtext;

  std::int64_t head_dim() const { return d_model / num_heads; }
  std::int64_t chunk_frames() const { return 2 * n_window; }
  static std::int64_t conv_length(std::int64_t n) {
    for (int i = 0; i < 3; ++i) n = (n - 1) / 2 + 1;
    return n;
  }
  std::int64_t conv_mels() const { return conv_length(num_mel_bins); }
  /// Tokens for T frames (both sources' _get_feat_extract_output_lengths): 13 a whole chunk, the convolutions'
  /// length for the rest.
  std::int64_t tokens(std::int64_t frames) const {
    const std::int64_t cs = chunk_frames(), r = frames % cs;
    return frames / cs * conv_length(cs) + (r > 0 ? conv_length(r) : 0);
  }

  /// Refuses sizes the encoder cannot run, by MaxText's key names.
  void validate() const {
    const auto positive = [](std::int64_t v, std::int64_t most, const char* key) {
      MAXTEXT_CHECK(v > 0 && v <= most, ConfigError, "[qwen3-omni audio] ", key, " must be in [1, ", most, "], found ", v);
    };
    positive(d_model, 1 << 16, "d_model_for_audio");
    positive(num_layers, 1024, "encoder_layers_for_audio");
    positive(num_heads, d_model, "encoder_attention_heads_for_audio");
    positive(ffn_dim, 1 << 20, "encoder_ffn_dim_for_audio");
    positive(num_mel_bins, 1024, "num_mel_bins_for_audio");
    positive(downsample_hidden_size, 1 << 16, "downsample_hidden_size_for_audio");
    positive(output_dim, 1 << 20, "output_dim_for_audio");
    positive(n_window, 1 << 16, "n_window_for_audio");
    positive(n_window_infer, 1 << 20, "n_window_infer_for_audio");
    MAXTEXT_CHECK(d_model % num_heads == 0, UnsupportedError, "[qwen3-omni audio] d_model_for_audio ", d_model,
                  " is not a whole number of encoder_attention_heads_for_audio (", num_heads, ")");
    MAXTEXT_CHECK(d_model % 2 == 0 && d_model >= 4, UnsupportedError, "[qwen3-omni audio] d_model_for_audio ", d_model,
                  ": the sinusoids need an even width of at least 4");
    MAXTEXT_CHECK(std::isfinite(max_timescale) && max_timescale > 0.0, ConfigError,
                  "[qwen3-omni audio] max_timescale_for_audio must be > 0, found ", max_timescale);
    MAXTEXT_CHECK(std::isfinite(eps) && eps > 0.0f, ConfigError, "[qwen3-omni audio] eps must be > 0, found ", eps);
    MAXTEXT_CHECK(form == AudioForm::maxtext || n_window_infer % chunk_frames() == 0, UnsupportedError,
                  "[qwen3-omni audio] n_window_infer_for_audio ", n_window_infer, " must be a multiple of 2 x n_window (",
                  chunk_frames(), ") for Hugging Face's attention windows");
  }

  /// From MaxText's keys (Config::extra): d_model_for_audio, encoder_layers_for_audio, encoder_attention_heads_for_audio,
  /// encoder_ffn_dim_for_audio, num_mel_bins_for_audio, downsample_hidden_size_for_audio, output_dim_for_audio,
  /// n_window_for_audio, n_window_infer_for_audio, max_timescale_for_audio.
  static Qwen3OmniAudioConfig from_maxtext(const Config& c) {
    Qwen3OmniAudioConfig a;
    const auto get = [&](const char* key, auto& out) { vit_number(c, key, out, "qwen3-omni audio"); };
    get("d_model_for_audio", a.d_model);
    get("encoder_layers_for_audio", a.num_layers);
    get("encoder_attention_heads_for_audio", a.num_heads);
    get("encoder_ffn_dim_for_audio", a.ffn_dim);
    get("num_mel_bins_for_audio", a.num_mel_bins);
    get("downsample_hidden_size_for_audio", a.downsample_hidden_size);
    get("output_dim_for_audio", a.output_dim);
    get("n_window_for_audio", a.n_window);
    get("n_window_infer_for_audio", a.n_window_infer);
    get("max_timescale_for_audio", a.max_timescale);
    const auto act = c.extra.find("activation_function_for_audio");
    MAXTEXT_CHECK(act == c.extra.end() || act->second == "gelu", UnsupportedError,
                  "[qwen3-omni audio] activation_function_for_audio '", act == c.extra.end() ? "" : act->second,
                  "': MaxText's audio encoder uses gelu");
    a.validate();
    return a;
  }

  /// From a Hugging Face config.json (Qwen3-Omni: thinker_config.audio_config; or a bare audio_config): d_model,
  /// encoder_layers, encoder_attention_heads, encoder_ffn_dim, num_mel_bins, downsample_hidden_size, output_dim,
  /// n_window, n_window_infer; activation_function must be gelu.
  static Qwen3OmniAudioConfig from_hf(const nlohmann::json& j, const std::string& where = "config.json") {
    const nlohmann::json* ac = nullptr;
    if (j.is_object() && j.contains("thinker_config") && j["thinker_config"].is_object() &&
        j["thinker_config"].contains("audio_config") && j["thinker_config"]["audio_config"].is_object()) {
      ac = &j["thinker_config"]["audio_config"];
    }
    if (ac == nullptr && j.is_object() && j.contains("audio_config") && j["audio_config"].is_object()) ac = &j["audio_config"];
    MAXTEXT_CHECK(ac != nullptr, IoError, "[", where, "] no thinker_config.audio_config: not a Qwen3-Omni checkpoint with an "
                  "audio encoder");
    Qwen3OmniAudioConfig a;
    const auto get = [&](const char* key, std::int64_t& out) { json_number(*ac, key, out, where, "audio_config."); };
    get("d_model", a.d_model);
    get("encoder_layers", a.num_layers);
    get("encoder_attention_heads", a.num_heads);
    get("encoder_ffn_dim", a.ffn_dim);
    get("num_mel_bins", a.num_mel_bins);
    get("downsample_hidden_size", a.downsample_hidden_size);
    get("output_dim", a.output_dim);
    get("n_window", a.n_window);
    get("n_window_infer", a.n_window_infer);
    if (ac->contains("activation_function")) {
      const std::string act = (*ac)["activation_function"].is_string() ? (*ac)["activation_function"].get<std::string>() : "";
      MAXTEXT_CHECK(act == "gelu", UnsupportedError, "[", where, "] audio_config.activation_function '", act,
                    "': Qwen3-Omni's audio encoder uses gelu");
    }
    a.validate();
    return a;
  }
};

/// Qwen3-Omni's audio encoder and projector on policy P (float32 activations).
template <TensorPolicy P>
class Qwen3OmniAudioEncoder {
 public:
  using A = typename P::act_t;
  using B = typename P::backend;
  static_assert(std::is_same_v<A, float>,
                "Qwen3OmniAudioEncoder runs in float32: use a policy with float activations");
  using Dense = DenseGeneral<P>;

  struct NormParams {
    Tensor<A, 1> scale, bias;
  };
  struct LayerParams {
    NormParams ln1, ln2;
    typename Dense::Params query, key, value, out, wi, wo;
  };
  struct Params {
    typename Dense::Params conv[3];  ///< kernels [3, 3, Ci, Co] as products, and biases
    typename Dense::Params conv_out;
    std::vector<LayerParams> layers;
    NormParams ln_post;
    typename Dense::Params proj1, proj2;
  };

  Qwen3OmniAudioEncoder() = default;
  explicit Qwen3OmniAudioEncoder(const Qwen3OmniAudioConfig& c) : c_(c) {
    c_.validate();
    const std::int64_t D = c_.d_model, N = c_.num_heads, H = c_.head_dim(), C = c_.downsample_hidden_size;
    conv_[0] = Dense({{3, 3, 1}, {C}, true, Init::normal});
    conv_[1] = Dense({{3, 3, C}, {C}, true, Init::normal});
    conv_[2] = conv_[1];
    conv_out_ = Dense({{C * c_.conv_mels()}, {D}, false, Init::normal});
    qkv_ = Dense({{D}, {N, H}, true, Init::normal});
    out_ = Dense({{N, H}, {D}, true, Init::normal});
    wi_ = Dense({{D}, {c_.ffn_dim}, true, Init::normal});
    wo_ = Dense({{c_.ffn_dim}, {D}, true, Init::normal});
    proj1_ = Dense({{D}, {D}, true, Init::normal});
    proj2_ = Dense({{D}, {c_.output_dim}, true, Init::normal});
  }
  const Qwen3OmniAudioConfig& config() const { return c_; }

  /// MaxText's parameter tree (names under audio_encoder.).
  template <class V>
  void visit(V& v, Params& p) const {
    p.layers.resize(static_cast<std::size_t>(c_.num_layers));
    const std::int64_t D = c_.d_model;
    const auto norm = [&](std::string_view name, NormParams& n) {
      Scope<V> s(v, name);
      v.vector("scale", n.scale, {{D}, Init::ones});
      v.vector("bias", n.bias, {{D}, Init::zeros});
    };
    Scope<V> top(v, "audio_encoder");
    {
      Scope<V> enc(v, "Qwen3OmniAudioEncoder_0");
      for (int k = 0; k < 3; ++k) visit_child(v, "conv2d" + std::to_string(k + 1), conv_[k], p.conv[k]);
      visit_child(v, "conv_out", conv_out_, p.conv_out);
      for (std::int64_t i = 0; i < c_.num_layers; ++i) {
        LayerParams& l = p.layers[static_cast<std::size_t>(i)];
        Scope<V> layer(v, "layers_" + std::to_string(i));
        norm("input_layer_norm", l.ln1);
        norm("post_attention_layer_norm", l.ln2);
        {
          Scope<V> a(v, "self_attention_audio");
          visit_child(v, "query", qkv_, l.query);
          visit_child(v, "key", qkv_, l.key);
          visit_child(v, "value", qkv_, l.value);
          visit_child(v, "out", out_, l.out);
        }
        {
          Scope<V> m(v, "AudioMLP");
          visit_child(v, "wi", wi_, l.wi);
          visit_child(v, "wo", wo_, l.wo);
        }
      }
      norm("layernorm_post", p.ln_post);
    }
    Scope<V> proj(v, "Qwen3OmniAudioProjector_0");
    visit_child(v, "proj1", proj1_, p.proj1);
    visit_child(v, "proj2", proj2_, p.proj2);
  }

  /// The sinusoid position embedding [n, D] (float64, rounded to float32).
  Tensor<float, 2> sinusoids(std::int64_t n) const {
    const std::int64_t D = c_.d_model, half = D / 2;
    const double inc = std::log(c_.max_timescale) / static_cast<double>(std::max<std::int64_t>(half - 1, 1));
    Tensor<float, 2> out({n, D});
    for (std::int64_t t = 0; t < n; ++t) {
      for (std::int64_t j = 0; j < half; ++j) {
        const double a = static_cast<double>(t) * std::exp(-inc * static_cast<double>(j));
        out(t, j) = static_cast<float>(std::sin(a));
        out(t, half + j) = static_cast<float>(std::cos(a));
      }
    }
    return out;
  }

  /// Features [num_mel_bins, T] (host, float32) -> soft tokens [tokens(T), output_dim]. AudioForm::maxtext needs T
  /// to be whole chunks (the processor's whole-seconds padding gives that). `capture` records, under MaxText's module
  /// paths: audio_encoder.Qwen3OmniAudioEncoder_0.conv_out [tokens, D] (after the positions), .layers_i,
  /// .layernorm_post, and audio_encoder.Qwen3OmniAudioProjector_0.
  Tensor<float, 2> encode(const B& be, const Params& p, const Tensor<float, 2>& features, Capture* capture = nullptr) const {
    const std::int64_t Mel = c_.num_mel_bins, T = features.dim(1), cs = c_.chunk_frames();
    MAXTEXT_CHECK(features.dim(0) == Mel && T > 0, ShapeError, "[qwen3-omni audio] features must be [", Mel,
                  " (num_mel_bins), frames > 0], found ", features.shape());
    MAXTEXT_CHECK(T <= std::int64_t{100} * 3600 * 4, ShapeError, "[qwen3-omni audio] ", T,
                  " frames: more than the limit of 4 hours of sound");
    MAXTEXT_CHECK(c_.form == AudioForm::hf || T % cs == 0, ShapeError, "[qwen3-omni audio] ", T,
                  " frames: MaxText's encoder takes whole chunks of ", cs,
                  " frames (pad the sound to whole seconds: AudioPadding::whole_seconds)");
    for (std::int64_t i = 0; i < features.size(); ++i) {
      MAXTEXT_CHECK(std::isfinite(features.data()[i]), ShapeError, "[qwen3-omni audio] feature ", i,
                    " is not a finite number");
    }
    const std::int64_t n = (T + cs - 1) / cs;
    std::vector<std::int64_t> lens(static_cast<std::size_t>(n), cs);
    if (T % cs != 0) lens.back() = T % cs;
    const std::int64_t L = *std::max_element(lens.begin(), lens.end());  // every chunk padded to the longest
    const std::int64_t t_out = Qwen3OmniAudioConfig::conv_length(L), F = c_.conv_mels(), C = c_.downsample_hidden_size;
    const std::int64_t D = c_.d_model, N = c_.num_heads, H = c_.head_dim(), NH = N * H, Fd = c_.ffn_dim;
    std::vector<std::int64_t> valid(static_cast<std::size_t>(n));
    std::int64_t S = 0;
    for (std::int64_t i = 0; i < n; ++i) S += valid[static_cast<std::size_t>(i)] = Qwen3OmniAudioConfig::conv_length(lens[static_cast<std::size_t>(i)]);
    const Activation act = c_.form == AudioForm::maxtext ? Activation::gelu : Activation::gelu_exact;
    const std::string enc = "audio_encoder.Qwen3OmniAudioEncoder_0";

    // The convolution stack, a few chunks at a time: rows [valid tokens, C x F] in (channel, mel) order.
    Tensor<float, 2> flat({S, C * F});
    {
      const std::int64_t per_chunk = (Mel / 2 + 1) * (L / 2 + 1) * 9 * C;  // the largest window matrix of one chunk
      const std::int64_t group = std::max<std::int64_t>(1, (std::int64_t{1} << 24) / std::max<std::int64_t>(per_chunk, 1));
      std::int64_t row = 0;
      for (std::int64_t c0 = 0; c0 < n; c0 += group) {
        const std::int64_t g = std::min(group, n - c0);
        // x: [g, h, w, ci] (NHWC, h = mel, w = frame), the chunks zero-padded to L frames.
        std::int64_t h = Mel, w = L, ci = 1;
        std::vector<float> x(static_cast<std::size_t>(g * h * w), 0.0f);
        for (std::int64_t b = 0; b < g; ++b) {
          const std::int64_t f0 = (c0 + b) * cs, len = lens[static_cast<std::size_t>(c0 + b)];
          for (std::int64_t m = 0; m < Mel; ++m) {
            for (std::int64_t t = 0; t < len; ++t) x[static_cast<std::size_t>((b * h + m) * w + t)] = features(m, f0 + t);
          }
        }
        for (int k = 0; k < 3; ++k) {
          x = conv(be, p.conv[k], k, x, g, h, w, ci, act);
          h = (h - 1) / 2 + 1;
          w = (w - 1) / 2 + 1;
          ci = C;
        }
        // [g, F, t_out, C] -> the valid rows [t, C x F].
        for (std::int64_t b = 0; b < g; ++b) {
          for (std::int64_t t = 0; t < valid[static_cast<std::size_t>(c0 + b)]; ++t, ++row) {
            for (std::int64_t c = 0; c < C; ++c) {
              for (std::int64_t f = 0; f < F; ++f) flat(row, c * F + f) = x[static_cast<std::size_t>(((b * F + f) * t_out + t) * C + c)];
            }
          }
        }
      }
    }

    Scratch scratch(be.memory());
    WholeSequences seq = whole_sequences(be, scratch, 1, S);
    // MaxText: each chunk's tokens attend among themselves; HF: windows of whole chunks' worth of tokens (the
    // longest chunk's count, as its cu_seqlens), the remainder last.
    const std::int64_t window =
        c_.form == AudioForm::maxtext ? t_out : t_out * (c_.n_window_infer / c_.chunk_frames());
    // Segments (the attention's chunk term also masks later keys): token r in window r / window.
    std::vector<std::int32_t> segment(static_cast<std::size_t>(S));
    for (std::int64_t r = 0; r < S; ++r) segment[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r / window);
    const View<const std::int32_t, 1> seg = upload_ints(be, scratch, segment);
    seq.mask.q_segment = View<const std::int32_t, 2>(seg.data(), {1, S});
    seq.mask.kv_segment = seq.mask.q_segment;
    const Context<P> ctx{be, scratch, seq.step, capture};

    View<A, 2> x = scratch.alloc<A, 2>({S, D});
    {
      View<A, 2> in = scratch.alloc<A, 2>({S, C * F});
      be.copy(in.data(), flat.data(), static_cast<std::size_t>(S * C * F) * sizeof(float), CopyKind::host_to_device);
      conv_out_.forward(ctx, p.conv_out, View<const A, 2>(in), x);
      const Tensor<float, 2> pos = sinusoids(t_out);
      Tensor<float, 2> rows({S, D});
      std::int64_t r = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t t = 0; t < valid[static_cast<std::size_t>(i)]; ++t, ++r) std::copy(&pos(t, 0), &pos(t, 0) + D, &rows(r, 0));
      }
      const Tensor<float, 2> dpos = upload(be, rows);
      be.add(View<const A, 2>(x), View<const A, 2>(dpos.data(), {S, D}), x);
    }
    ctx.sow(enc + ".conv_out", View<const A, 2>(x), {S, D});

    View<A, 2> hbuf = scratch.alloc<A, 2>({S, D});
    View<A, 2> q = scratch.alloc<A, 2>({S, NH}), kk = scratch.alloc<A, 2>({S, NH}), v = scratch.alloc<A, 2>({S, NH});
    View<A, 2> o = scratch.alloc<A, 2>({S, NH}), f = scratch.alloc<A, 2>({S, Fd});
    const auto heads4 = [&](View<A, 2> r) { return View<A, 4>(r.data(), {1, S, N, H}, {S * NH, NH, H, 1}); };
    const float qscale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
    for (std::int64_t i = 0; i < c_.num_layers; ++i) {
      const LayerParams& lp = p.layers[static_cast<std::size_t>(i)];
      affine_layer_norm(be, View<const A, 2>(x), lp.ln1.scale.cview(), lp.ln1.bias.cview(), c_.eps, hbuf);
      qkv_.forward(ctx, lp.query, View<const A, 2>(hbuf), q);
      qkv_.forward(ctx, lp.key, View<const A, 2>(hbuf), kk);
      qkv_.forward(ctx, lp.value, View<const A, 2>(hbuf), v);
      be.scale(q, qscale);
      full_attention(be, View<const A, 4>(heads4(q)), View<const A, 4>(heads4(kk)), View<const A, 4>(heads4(v)),
                     seq.mask, heads4(o));
      out_.forward(ctx, lp.out, View<const A, 2>(o), hbuf);
      be.add(View<const A, 2>(x), View<const A, 2>(hbuf), x);
      affine_layer_norm(be, View<const A, 2>(x), lp.ln2.scale.cview(), lp.ln2.bias.cview(), c_.eps, hbuf);
      wi_.forward(ctx, lp.wi, View<const A, 2>(hbuf), f);
      be.activation(View<const A, 2>(f), act, View<const A, 2>{}, Activation::linear, f);
      wo_.forward(ctx, lp.wo, View<const A, 2>(f), hbuf);
      be.add(View<const A, 2>(x), View<const A, 2>(hbuf), x);
      ctx.sow(enc + ".layers_" + std::to_string(i), View<const A, 2>(x), {S, D});
    }
    affine_layer_norm(be, View<const A, 2>(x), p.ln_post.scale.cview(), p.ln_post.bias.cview(), c_.eps, x);
    ctx.sow(enc + ".layernorm_post", View<const A, 2>(x), {S, D});
    View<A, 2> y = scratch.alloc<A, 2>({S, c_.output_dim});
    proj1_.forward(ctx, p.proj1, View<const A, 2>(x), hbuf);
    be.activation(View<const A, 2>(hbuf), act, View<const A, 2>{}, Activation::linear, hbuf);
    proj2_.forward(ctx, p.proj2, View<const A, 2>(hbuf), y);
    ctx.sow("audio_encoder.Qwen3OmniAudioProjector_0", View<const A, 2>(y), {S, c_.output_dim});
    Tensor<float, 2> out({S, c_.output_dim});
    be.copy(out.data(), y.data(), static_cast<std::size_t>(out.size()) * sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    return out;
  }

 private:
  /// One 3 x 3 convolution, stride 2, zero padding 1, + bias, then `act`: x [g, h, w, ci] (host) -> [g, h', w', Co]
  /// (host), as the product of the gathered windows [g h' w', 3 x 3 x ci] with the kernel [3 x 3 x ci, Co].
  std::vector<float> conv(const B& be, const typename Dense::Params& kp, int k, const std::vector<float>& x,
                          std::int64_t g, std::int64_t h, std::int64_t w, std::int64_t ci, Activation act) const {
    const std::int64_t ho = (h - 1) / 2 + 1, wo = (w - 1) / 2 + 1, K = 9 * ci, Co = c_.downsample_hidden_size;
    const std::int64_t R = g * ho * wo;
    std::vector<float> win(static_cast<std::size_t>(R * K), 0.0f);
    for (std::int64_t b = 0; b < g; ++b) {
      for (std::int64_t r = 0; r < ho; ++r) {
        for (std::int64_t c = 0; c < wo; ++c) {
          float* o = &win[static_cast<std::size_t>(((b * ho + r) * wo + c) * K)];
          for (std::int64_t i = 0; i < 3; ++i) {
            const std::int64_t yy = 2 * r - 1 + i;
            if (yy < 0 || yy >= h) continue;
            for (std::int64_t j = 0; j < 3; ++j) {
              const std::int64_t xx = 2 * c - 1 + j;
              if (xx < 0 || xx >= w) continue;
              const float* s = &x[static_cast<std::size_t>(((b * h + yy) * w + xx) * ci)];
              std::copy(s, s + ci, o + (i * 3 + j) * ci);
            }
          }
        }
      }
    }
    Scratch scratch(be.memory());
    StepInfo step;
    step.batch = 1;
    step.length = R;
    const Context<P> ctx{be, scratch, step, nullptr};
    View<A, 2> in = scratch.alloc<A, 2>({R, K}), out = scratch.alloc<A, 2>({R, Co});
    be.copy(in.data(), win.data(), win.size() * sizeof(float), CopyKind::host_to_device);
    conv_[k].forward(ctx, kp, View<const A, 2>(in), out);
    be.activation(View<const A, 2>(out), act, View<const A, 2>{}, Activation::linear, out);
    std::vector<float> y(static_cast<std::size_t>(R * Co));
    be.copy(y.data(), out.data(), y.size() * sizeof(float), CopyKind::device_to_host);
    be.synchronize();
    return y;
  }

  Qwen3OmniAudioConfig c_;
  Dense conv_[3], conv_out_, qkv_, out_, wi_, wo_, proj1_, proj2_;
};

}  // namespace maxtext::layers

namespace maxtext::io {

/// The audio encoder of a Hugging Face Qwen3-Omni checkpoint (thinker.audio_tower.*) in MaxText's names and layouts,
/// as MaxText's converter maps them: conv2d{k}.weight [O, I, 3, 3] -> conv2d{k}.kernel [3, 3, I, O], conv_out.weight
/// transposed, q / k / v_proj [D, D] -> query / key / value kernels [D, N, hd] (biases [N, hd]), out_proj -> out
/// [N, hd, D], fc1 / fc2 -> AudioMLP.wi / wo, the layer norms' weight -> scale, ln_post -> layernorm_post, proj1 /
/// proj2 -> the projector. Other tensors outside the audio tower are left out; any other audio tensor is refused by
/// name.
inline TensorMap qwen3_omni_audio_from_hf(const TensorMap& hf, const layers::Qwen3OmniAudioConfig& c) {
  std::string at = "thinker.audio_tower.";
  if (!hf.has(at + "conv2d1.weight") && hf.has("audio_tower.conv2d1.weight")) at = "audio_tower.";
  const std::string enc = "audio_encoder.Qwen3OmniAudioEncoder_0.", proj = "audio_encoder.Qwen3OmniAudioProjector_0.";
  Config sizes;
  sizes.emb_dim = c.d_model;
  sizes.num_query_heads = c.num_heads;
  sizes.head_dim = c.head_dim();
  detail::NameMapper m(hf, sizes, "qwen3-omni audio", "Qwen3-Omni audio");
  const std::int64_t D = c.d_model, C = c.downsample_hidden_size;
  const auto tensor = [&](const std::string& from, const std::string& to, const std::vector<std::int64_t>& shape) {
    map_vision_tensor(m, from, to, shape);
  };
  const auto linear = [&](const std::string& from, const std::string& to, std::int64_t out, std::int64_t in, bool bias) {
    map_vision_linear(m, from, to, out, in, bias);
  };
  const auto norm = [&](const std::string& from, const std::string& to) {
    tensor(from + ".weight", to + ".scale", {D});
    tensor(from + ".bias", to + ".bias", {D});
  };
  for (int k = 1; k <= 3; ++k) {
    const std::string from = at + "conv2d" + std::to_string(k), to = enc + "conv2d" + std::to_string(k);
    if (const AnyTensor* t = m.get(from + ".weight")) {
      m.shape(*t, {C, k == 1 ? 1 : C, 3, 3}, from + ".weight");
      m.put(to + ".kernel", t->permuted({2, 3, 1, 0}), from + ".weight");
    }
    tensor(from + ".bias", to + ".bias", {C});
  }
  linear(at + "conv_out", enc + "conv_out", D, C * c.conv_mels(), false);
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string from = at + "layers." + std::to_string(i) + ".", to = enc + "layers_" + std::to_string(i) + ".";
    norm(from + "self_attn_layer_norm", to + "input_layer_norm");
    norm(from + "final_layer_norm", to + "post_attention_layer_norm");
    m.head_proj(from + "self_attn.q_proj", to + "self_attention_audio.query", c.num_heads, true);
    m.head_proj(from + "self_attn.k_proj", to + "self_attention_audio.key", c.num_heads, true);
    m.head_proj(from + "self_attn.v_proj", to + "self_attention_audio.value", c.num_heads, true);
    m.out_proj(from + "self_attn.out_proj", to + "self_attention_audio.out", true);
    linear(from + "fc1", to + "AudioMLP.wi", c.ffn_dim, D, true);
    linear(from + "fc2", to + "AudioMLP.wo", D, c.ffn_dim, true);
  }
  norm(at + "ln_post", enc + "layernorm_post");
  linear(at + "proj1", proj + "proj1", D, D, true);
  linear(at + "proj2", proj + "proj2", c.output_dim, D, true);
  std::vector<std::string> others;
  for (const auto& [name, t] : hf.tensors) {
    if (name.rfind(at, 0) != 0) others.push_back(name);
  }
  m.mark_used(others);
  return m.finish();
}

}  // namespace maxtext::io
