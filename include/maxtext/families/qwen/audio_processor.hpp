// families/qwen/audio_processor.hpp: Qwen3-Omni's audio features, the log-mel spectrogram of Whisper's feature
// extractor as MaxText's processor (multimodal/processor_qwen3_omni.py, its copies of HF's audio_utils) and Hugging
// Face's WhisperFeatureExtractor compute it from 16 kHz mono samples:
//
//   x padded by n_fft / 2 on each side, reflecting (the edge sample not repeated)
//   frame t = x_pad[hop t .. hop t + n_fft), times the periodic Hann window 0.5 - 0.5 cos(2 pi n / n_fft)
//   power P[t, k] = |rfft(frame t)[k]|^2, k = 0 .. n_fft / 2
//   mel[m, t] = sum_k P[t, k] fb[k, m]    fb: triangles between n_mels + 2 points evenly spaced on the Slaney mel
//        scale from f_min to f_max (linear below 1 kHz, logarithmic above), each scaled by 2 / (f_(m+2) - f_m)
//   lm = log10(max(mel, 1e-10)), the last frame dropped (L / hop frames for L samples)
//   features = (max(lm, max(lm) - 8) + 4) / 4, the maximum over the whole clip
//
// MaxText first zero-pads the samples to a whole number of seconds (its encoder reshapes the frames into whole chunks
// of 100, and its mask counts the padding): AudioPadding::whole_seconds. HF pads nothing for one clip:
// AudioPadding::none. Everything is computed in double (the FFT is Eigen's, its unsupported FFT module over the
// bundled kissfft) and rounded to float32 at the end; tests/models/test_qwen3_omni_audio.cpp states the bound
// against tests/reference/qwen3_omni_audio_reference.py's float64 oracle.
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unsupported/Eigen/FFT>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/vision_config.hpp"

namespace maxtext::models {

/// How the samples are padded before the features are computed.
enum class AudioPadding {
  whole_seconds,  ///< MaxText: zeros up to a multiple of sampling_rate samples (its encoder needs whole chunks)
  none,           ///< Hugging Face (one clip): as they are
};

/// Whisper's feature extractor settings (Qwen3-Omni's preprocessor_config.json; the defaults are Qwen3-Omni's).
struct LogMelConfig {
  std::int64_t sampling_rate = 16000;
  std::int64_t n_fft = 400;
  std::int64_t hop_length = 160;
  std::int64_t num_mel_bins = 128;  ///< feature_size
  double f_min = 0.0;
  double f_max = 8000.0;            ///< sampling_rate / 2

  void validate() const {
    MAXTEXT_CHECK(sampling_rate >= 1000 && sampling_rate <= 384000, ConfigError, "[log-mel] sampling_rate ",
                  sampling_rate, ": expected 1000 to 384000");
    MAXTEXT_CHECK(n_fft >= 8 && n_fft <= 65536 && n_fft % 2 == 0, ConfigError, "[log-mel] n_fft ", n_fft,
                  ": expected an even number from 8 to 65536");
    MAXTEXT_CHECK(hop_length >= 1 && hop_length <= n_fft, ConfigError, "[log-mel] hop_length ", hop_length,
                  ": expected 1 to n_fft (", n_fft, ")");
    MAXTEXT_CHECK(num_mel_bins >= 1 && num_mel_bins <= 1024, ConfigError, "[log-mel] feature_size ", num_mel_bins,
                  ": expected 1 to 1024");
    MAXTEXT_CHECK(f_min >= 0.0 && f_max > f_min && f_max <= static_cast<double>(sampling_rate) / 2.0, ConfigError,
                  "[log-mel] frequencies ", f_min, " .. ", f_max, " Hz: expected 0 <= f_min < f_max <= sampling_rate / 2");
  }

  /// From a preprocessor_config.json of WhisperFeatureExtractor (feature_size, sampling_rate, hop_length, n_fft,
  /// dither). A dither other than 0 is refused (it adds random noise: features would not be reproducible), as is
  /// another feature extractor.
  static LogMelConfig from_hf(const nlohmann::json& j, const std::string& where = "preprocessor_config.json") {
    MAXTEXT_CHECK(j.is_object(), IoError, "[", where, "] expected a JSON object");
    const std::string type = j.value("feature_extractor_type", std::string("WhisperFeatureExtractor"));
    MAXTEXT_CHECK(type == "WhisperFeatureExtractor", UnsupportedError, "[", where, "] feature_extractor_type '", type,
                  "': only WhisperFeatureExtractor (Qwen3-Omni's) is implemented");
    LogMelConfig c;
    layers::json_number(j, "sampling_rate", c.sampling_rate, where);
    layers::json_number(j, "n_fft", c.n_fft, where);
    layers::json_number(j, "hop_length", c.hop_length, where);
    layers::json_number(j, "feature_size", c.num_mel_bins, where);
    double dither = 0.0;
    layers::json_number(j, "dither", dither, where);
    MAXTEXT_CHECK(dither == 0.0, UnsupportedError, "[", where, "] dither ", dither,
                  ": only 0 (no random noise added) is implemented");
    c.f_max = static_cast<double>(c.sampling_rate) / 2.0;
    c.validate();
    return c;
  }
};

/// Slaney's mel scale (librosa's default, HF's mel_scale="slaney"): linear below 1 kHz, logarithmic above.
inline double hz_to_mel_slaney(double f) {
  const double logstep = 27.0 / std::log(6.4);
  return f >= 1000.0 ? 15.0 + std::log(f / 1000.0) * logstep : 3.0 * f / 200.0;
}
inline double mel_to_hz_slaney(double m) {
  const double logstep = std::log(6.4) / 27.0;
  return m >= 15.0 ? 1000.0 * std::exp((m - 15.0) * logstep) : 200.0 * m / 3.0;
}

/// The filter bank fb[k, m] ([n_fft / 2 + 1, num_mel_bins], row-major), Slaney-normalised triangles.
inline std::vector<double> mel_filter_bank(const LogMelConfig& c) {
  const std::int64_t K = c.n_fft / 2 + 1, M = c.num_mel_bins;
  const double lo = hz_to_mel_slaney(c.f_min), hi = hz_to_mel_slaney(c.f_max);
  std::vector<double> pts(static_cast<std::size_t>(M + 2));
  for (std::int64_t i = 0; i < M + 2; ++i) {
    pts[static_cast<std::size_t>(i)] = mel_to_hz_slaney(lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(M + 1));
  }
  std::vector<double> fb(static_cast<std::size_t>(K * M), 0.0);
  for (std::int64_t k = 0; k < K; ++k) {
    const double f = static_cast<double>(k) * static_cast<double>(c.sampling_rate) / static_cast<double>(c.n_fft);
    for (std::int64_t m = 0; m < M; ++m) {
      const double a = pts[static_cast<std::size_t>(m)], b = pts[static_cast<std::size_t>(m + 1)],
                   e = pts[static_cast<std::size_t>(m + 2)];
      const double rise = (f - a) / (b - a), fall = (e - f) / (e - b);
      fb[static_cast<std::size_t>(k * M + m)] = std::max(0.0, std::min(rise, fall)) * (2.0 / (e - a));
    }
  }
  return fb;
}

/// Samples (mono, at c.sampling_rate) -> features [num_mel_bins, frames]: frames = L / hop_length for the padded
/// length L (whole seconds for MaxText). At most `max_seconds` of sound (after padding).
inline Tensor<float, 2> log_mel_features(const std::vector<float>& samples, const LogMelConfig& c,
                                         AudioPadding padding = AudioPadding::whole_seconds, double max_seconds = 3600.0) {
  c.validate();
  MAXTEXT_CHECK(!samples.empty(), ShapeError, "[log-mel] no samples");
  std::int64_t L = static_cast<std::int64_t>(samples.size());
  if (padding == AudioPadding::whole_seconds) L = (L + c.sampling_rate - 1) / c.sampling_rate * c.sampling_rate;
  MAXTEXT_CHECK(static_cast<double>(L) <= max_seconds * static_cast<double>(c.sampling_rate), ShapeError,
                "[log-mel] ", static_cast<double>(L) / static_cast<double>(c.sampling_rate),
                " seconds of sound: more than the limit of ", max_seconds);
  const std::int64_t half = c.n_fft / 2, K = half + 1, M = c.num_mel_bins, T = L / c.hop_length;
  MAXTEXT_CHECK(L > half && T >= 1, ShapeError, "[log-mel] ", L, " samples: at least ", std::max(half + 1, c.hop_length),
                " are needed (the reflecting pad of n_fft / 2 and one frame)");
  for (std::size_t i = 0; i < samples.size(); ++i) {
    MAXTEXT_CHECK(std::isfinite(samples[i]), ShapeError, "[log-mel] sample ", i, " is not a finite number");
  }
  // x_pad[i] for i in [0, L + n_fft): reflect about the first and the last sample (numpy's "reflect").
  const auto sample = [&](std::int64_t i) -> double {
    i -= half;
    if (i < 0) i = -i;
    if (i >= L) i = 2 * (L - 1) - i;
    return i < static_cast<std::int64_t>(samples.size()) ? static_cast<double>(samples[static_cast<std::size_t>(i)]) : 0.0;
  };
  std::vector<double> window(static_cast<std::size_t>(c.n_fft));
  const double pi = 3.14159265358979323846;
  for (std::int64_t n = 0; n < c.n_fft; ++n) {
    window[static_cast<std::size_t>(n)] = 0.5 - 0.5 * std::cos(2.0 * pi * static_cast<double>(n) / static_cast<double>(c.n_fft));
  }
  const std::vector<double> fb = mel_filter_bank(c);
  Eigen::FFT<double> fft;
  fft.SetFlag(Eigen::FFT<double>::HalfSpectrum);
  std::vector<double> frame(static_cast<std::size_t>(c.n_fft)), power(static_cast<std::size_t>(K));
  std::vector<std::complex<double>> spec;
  std::vector<double> lm(static_cast<std::size_t>(M * T));
  double top = -std::numeric_limits<double>::infinity();
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t n = 0; n < c.n_fft; ++n) {
      frame[static_cast<std::size_t>(n)] = sample(t * c.hop_length + n) * window[static_cast<std::size_t>(n)];
    }
    fft.fwd(spec, frame);
    for (std::int64_t k = 0; k < K; ++k) power[static_cast<std::size_t>(k)] = std::norm(spec[static_cast<std::size_t>(k)]);
    for (std::int64_t m = 0; m < M; ++m) {
      double s = 0.0;
      for (std::int64_t k = 0; k < K; ++k) s += power[static_cast<std::size_t>(k)] * fb[static_cast<std::size_t>(k * M + m)];
      const double v = std::log10(std::max(s, 1e-10));
      lm[static_cast<std::size_t>(m * T + t)] = v;
      top = std::max(top, v);
    }
  }
  Tensor<float, 2> out({M, T});
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t t = 0; t < T; ++t) {
      out(m, t) = static_cast<float>((std::max(lm[static_cast<std::size_t>(m * T + t)], top - 8.0) + 4.0) / 4.0);
    }
  }
  return out;
}

}  // namespace maxtext::models
