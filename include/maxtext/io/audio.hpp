// io/audio.hpp: sound files decoded to float PCM, as MaxText's load_audio reads them (librosa.load(path, sr=16000):
// soundfile decodes, the channels are averaged to mono, soxr's HQ resampler converts the rate).
//
// The work is done by well-kept libraries: libsndfile decodes (WAV in its PCM / float / A-law / mu-law forms, FLAC,
// Ogg Vorbis / Opus, AIFF, MP3, ...: the same library Python's soundfile drives, so the samples are librosa's: 16-bit
// PCM x / 32768, 24-bit x / 2^23, float as stored) and libsoxr resamples (the resampler librosa's default res_type
// "soxr_hq" calls, at SOXR_HQ quality). This header only drives them. A program that includes it links
// libsndfile and libsoxr (the CMake target maxtext::audio does both).
//
// Bad input is refused with an IoError naming the file and the problem: what libsndfile cannot decode (its own
// message), no samples, more channels or samples than AudioLimits allows (checked on the header before any sample
// memory is allocated, and again while reading: a header can lie), a rate outside 1 Hz .. 1 MHz, non-finite samples
// (float files). Nothing is read through C stdio: the file is read into memory (bounded by max_file_bytes) and
// decoded from there through libsndfile's virtual I/O, so decode_audio() of any bytes is the fuzzed entry point.
#pragma once

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "maxtext/core/error.hpp"

namespace maxtext::io {

/// Decoded sound: `samples` are the channels averaged to mono (librosa's to_mono: the float32 mean).
struct Audio {
  std::int64_t sample_rate = 0;  ///< samples per second, as the file states it
  std::int64_t channels = 0;     ///< in the file (the samples here are mono)
  std::vector<float> samples;

  double seconds() const { return sample_rate > 0 ? static_cast<double>(samples.size()) / static_cast<double>(sample_rate) : 0.0; }
};

/// What a sound file may ask for before it is refused.
struct AudioLimits {
  std::int64_t max_samples = std::int64_t{16000} * 3600;  ///< frames per channel (an hour at 16 kHz by default)
  std::int64_t max_channels = 64;
  std::size_t max_file_bytes = std::size_t{1} << 30;  ///< read_audio: the file's size
};

namespace detail {

// libsndfile's virtual I/O over a byte span (read only).
struct AudioBytes {
  const std::uint8_t* data = nullptr;
  sf_count_t size = 0;
  sf_count_t pos = 0;
};

inline sf_count_t audio_length(void* user) { return static_cast<AudioBytes*>(user)->size; }
inline sf_count_t audio_seek(sf_count_t offset, int whence, void* user) {
  auto* b = static_cast<AudioBytes*>(user);
  sf_count_t base = 0;
  if (whence == SEEK_CUR) base = b->pos;
  if (whence == SEEK_END) base = b->size;
  // Out-of-range seeks clamp: libsndfile then reads nothing there and reports a truncated file.
  if (offset < -base) offset = -base;
  if (offset > b->size - base) offset = b->size - base;
  b->pos = base + offset;
  return b->pos;
}
inline sf_count_t audio_read(void* ptr, sf_count_t count, void* user) {
  auto* b = static_cast<AudioBytes*>(user);
  const sf_count_t n = std::max<sf_count_t>(0, std::min(count, b->size - b->pos));
  if (n > 0) std::memcpy(ptr, b->data + b->pos, static_cast<std::size_t>(n));
  b->pos += n;
  return n;
}
inline sf_count_t audio_write(const void*, sf_count_t, void*) { return 0; }
inline sf_count_t audio_tell(void* user) { return static_cast<AudioBytes*>(user)->pos; }

struct SndFileCloser {
  SNDFILE* f = nullptr;
  ~SndFileCloser() {
    if (f != nullptr) sf_close(f);
  }
};

}  // namespace detail

/// Decodes the bytes of a sound file (any format libsndfile reads) to mono float samples at the file's rate.
/// `name` only labels errors.
inline Audio decode_audio(std::span<const std::uint8_t> bytes, const std::string& name, const AudioLimits& limits = {}) {
  MAXTEXT_CHECK(!bytes.empty(), IoError, "[", name, "] empty file: not a sound file");
  detail::AudioBytes src{bytes.data(), static_cast<sf_count_t>(bytes.size()), 0};
  SF_VIRTUAL_IO io{&detail::audio_length, &detail::audio_seek, &detail::audio_read, &detail::audio_write,
                   &detail::audio_tell};
  SF_INFO info{};
  detail::SndFileCloser file{sf_open_virtual(&io, SFM_READ, &info, &src)};
  MAXTEXT_CHECK(file.f != nullptr, IoError, "[", name, "] not a sound file libsndfile can read (", sf_strerror(nullptr),
                ")");
  MAXTEXT_CHECK(info.channels > 0 && info.channels <= limits.max_channels, IoError, "[", name, "] ", info.channels,
                " channels: expected 1 to ", limits.max_channels);
  MAXTEXT_CHECK(info.samplerate > 0 && info.samplerate <= 1'000'000, IoError, "[", name, "] sample rate ",
                info.samplerate, " Hz: expected 1 to 1000000");
  MAXTEXT_CHECK(info.frames <= limits.max_samples, IoError, "[", name, "] ", info.frames,
                " samples per channel: more than the limit of ", limits.max_samples, " (AudioLimits::max_samples)");
  // Files whose length is unknown (some streams) say frames = 0 or a huge number; the loop below bounds them anyway.
  sf_command(file.f, SFC_SET_NORM_FLOAT, nullptr, SF_TRUE);
  Audio out;
  out.sample_rate = info.samplerate;
  out.channels = info.channels;
  const std::int64_t C = info.channels;
  constexpr sf_count_t block = 16384;
  std::vector<float> buf(static_cast<std::size_t>(block * C));
  for (;;) {
    const sf_count_t got = sf_readf_float(file.f, buf.data(), block);
    if (got <= 0) break;
    MAXTEXT_CHECK(static_cast<std::int64_t>(out.samples.size()) + got <= limits.max_samples, IoError, "[", name,
                  "] more than ", limits.max_samples, " samples per channel (AudioLimits::max_samples)");
    for (sf_count_t i = 0; i < got; ++i) {
      const float* s = &buf[static_cast<std::size_t>(i * C)];
      float v = s[0];
      // librosa.to_mono: np.mean(y, axis=0) in float32 (the channels summed in order, then divided).
      for (std::int64_t c = 1; c < C; ++c) v += s[c];
      if (C > 1) v /= static_cast<float>(C);
      MAXTEXT_CHECK(std::isfinite(v), IoError, "[", name, "] sample ", out.samples.size(),
                    " is not a finite number (a float file with NaN or infinity)");
      out.samples.push_back(v);
    }
  }
  MAXTEXT_CHECK(sf_error(file.f) == SF_ERR_NO_ERROR, IoError, "[", name, "] corrupt sound data (",
                sf_strerror(file.f), ")");
  MAXTEXT_CHECK(!out.samples.empty(), IoError, "[", name, "] no samples: an empty or truncated sound file");
  return out;
}

/// Reads and decodes a sound file (decode_audio).
inline Audio read_audio(const std::string& path, const AudioLimits& limits = {}) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  MAXTEXT_CHECK(f.good(), IoError, "[", path, "] cannot open the sound file");
  const std::streamoff size = f.tellg();
  MAXTEXT_CHECK(size >= 0 && static_cast<std::uint64_t>(size) <= limits.max_file_bytes, IoError, "[", path, "] ",
                size, " bytes: more than the limit of ", limits.max_file_bytes, " (AudioLimits::max_file_bytes)");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), size);
  MAXTEXT_CHECK(f.good() || f.eof(), IoError, "[", path, "] read error");
  return decode_audio(bytes, path, limits);
}

/// Resamples mono samples from `from` to `to` Hz with libsoxr at SOXR_HQ (librosa's default "soxr_hq"), returning
/// ceil(n x to / from) samples (librosa.resample's length). The same rate returns the samples unchanged.
inline std::vector<float> resample_audio(const std::vector<float>& x, std::int64_t from, std::int64_t to) {
  MAXTEXT_CHECK(from > 0 && to > 0 && from <= 1'000'000 && to <= 1'000'000, ConfigError, "[audio] resample from ",
                from, " Hz to ", to, " Hz: rates must be 1 to 1000000");
  if (from == to || x.empty()) return x;
  const auto n = static_cast<std::int64_t>(x.size());
  const std::int64_t want = (n * to + from - 1) / from;
  std::vector<float> out(static_cast<std::size_t>(want));
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  std::size_t done = 0;
  const soxr_error_t err = soxr_oneshot(static_cast<double>(from), static_cast<double>(to), 1, x.data(), x.size(),
                                        nullptr, out.data(), out.size(), &done, &io, &q, nullptr);
  MAXTEXT_CHECK(err == nullptr, IoError, "[audio] libsoxr could not resample from ", from, " Hz to ", to, " Hz: ",
                err == nullptr ? "" : err);
  // soxr's one-shot output can end a sample short of ceil(n x to / from); librosa pads to its length with zeros.
  out.resize(static_cast<std::size_t>(want), 0.0f);
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(done, out.size())), out.end(), 0.0f);
  return out;
}

/// librosa.load(path, sr=rate, mono=True): decoded, averaged to mono, resampled to `rate` (16 kHz: the rate of
/// Qwen3-Omni's and Whisper's feature extractors).
inline std::vector<float> load_audio(const std::string& path, std::int64_t rate = 16000, const AudioLimits& limits = {}) {
  Audio a = read_audio(path, limits);
  return resample_audio(a.samples, a.sample_rate, rate);
}

}  // namespace maxtext::io
