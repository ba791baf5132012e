// tests/fuzz/entry/audio.hpp: fuzz entry point for sound files (io/audio.hpp: libsndfile through its virtual I/O,
// libsoxr; families/qwen/audio_processor.hpp). fuzz_audio: the whole input is the file; a limit of 2^18 samples per
// channel and 8 channels keeps each run small (the limits themselves are what a hostile header must hit). A file is
// either refused with an IoError or decoded to finite mono samples; the first half second of them is resampled to a
// rate taken from its bytes (ceil(n x to / from) samples, finite) and its first 0.2 s turned into log-mel features,
// unpadded with Qwen3-Omni's settings and padded to whole seconds with a small bank (finite, none more than 2 below
// the clip's maximum: the max - 8 clamp, over 4).
#pragma once

#include <cmath>
#include <cstdlib>
#include <vector>

#include "fuzz_common.hpp"
#include "maxtext/families/qwen/audio_processor.hpp"
#include "maxtext/io/audio.hpp"

namespace maxtext::fuzz {

inline void fuzz_audio(const std::uint8_t* data, std::size_t size) {
  io::AudioLimits lim;
  lim.max_samples = 1 << 18;
  lim.max_channels = 8;
  io::Audio a;
  try {
    a = io::decode_audio({data, size}, "fuzz", lim);
  } catch (const maxtext::IoError&) {
    return;
  }
  if (a.samples.empty() || static_cast<std::int64_t>(a.samples.size()) > lim.max_samples || a.channels < 1 ||
      a.channels > lim.max_channels || a.sample_rate < 1) {
    std::abort();
  }
  for (const float v : a.samples) {
    if (!std::isfinite(v)) std::abort();
  }
  std::vector<float> head(a.samples.begin(), a.samples.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(a.samples.size(), 8000)));
  const std::int64_t to = 8000 + static_cast<std::int64_t>(data[size / 2]) * 160;
  const std::int64_t from = std::min<std::int64_t>(a.sample_rate, 1'000'000);
  const std::vector<float> r = io::resample_audio(head, from, to);
  const auto n = static_cast<std::int64_t>(head.size());
  if (static_cast<std::int64_t>(r.size()) != (from == to ? n : (n * to + from - 1) / from)) std::abort();
  for (const float v : r) {
    if (!std::isfinite(v)) std::abort();
  }
  // Qwen3-Omni's settings unpadded (the first 0.2 s), and a small bank padded to whole seconds (a second is 1000
  // samples there: the padding's path at a fraction of the cost).
  models::LogMelConfig small;
  small.sampling_rate = 1000;
  small.n_fft = 32;
  small.hop_length = 8;
  small.num_mel_bins = 8;
  small.f_max = 500.0;
  if (head.size() > 3200) head.resize(3200);
  for (const auto pad : {models::AudioPadding::none, models::AudioPadding::whole_seconds}) {
    const models::LogMelConfig c = pad == models::AudioPadding::none ? models::LogMelConfig{} : small;
    Tensor<float, 2> f;
    try {
      f = models::log_mel_features(head, c, pad);
    } catch (const maxtext::ShapeError&) {
      if (pad == models::AudioPadding::whole_seconds || head.size() > 200) std::abort();  // only too short is refused
      continue;
    }
    float top = -1e30f;
    for (std::int64_t i = 0; i < f.size(); ++i) {
      if (!std::isfinite(f.data()[i])) std::abort();
      top = std::max(top, f.data()[i]);
    }
    for (std::int64_t i = 0; i < f.size(); ++i) {
      if (f.data()[i] < top - 2.0f - 1e-5f) std::abort();
    }
  }
}

}  // namespace maxtext::fuzz
