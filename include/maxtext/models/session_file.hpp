// models/session_file.hpp: a conversation saved to a file and restored (models::Session::save / load,
// AnySession::save / load, `maxtext chat --session FILE`, Python's Session.save / load).
//
// The file holds what a Session needs to go on without running its conversation again: the tokens (and the picture
// rows of soft tokens), the KV cache's rows for the cached tokens (every layer's buffers in the cache's own element
// type, the recurrent states, Engram's history), and an application's own text (the chat's messages). Layout:
//
//   8 bytes   magic "MXSESS\r\n"
//   u32       format version (kVersion)
//   u64       header length H
//   H bytes   header: JSON (the model's layout, the counts and widths of every section below, the application text)
//   payload   tokens (i32), media token indices (i64) and rows (f32), probe logits (f32), per layer: buffers (cached
//             rows x width, cache type), states (f32), then segment ids (i32) when the cache holds them
//   u32       CRC-32 (zlib) of every byte before it
//
// Little-endian, as every host the library builds for. Loading checks, in order and before it changes anything: the
// magic and the version; the header's sizes against the file's length (so no count in a damaged file allocates); the
// CRC; the model's layout (decoder block, activation and cache types, vocabulary, width, every layer's buffer and
// state widths: each difference named, expected vs found); that the conversation fits the session; and the probe,
// the logits of the token ids 0..3 from position 0, computed again by the loading model. The probe is what tells
// other weights of the same architecture (a fine-tune) apart: its logits must agree within kProbeTolerance of
// their scale, which allows the summation order of another thread count or instruction set and catches weights that
// differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/macros.hpp"

namespace maxtext::models::session_file {

inline constexpr std::uint32_t kVersion = 1;
/// The probe's token ids (clipped to the vocabulary) and the largest header a file may announce.
inline constexpr std::int32_t kProbeTokens = 4;
inline constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{64} << 20;

/// What must match between the model that saved a session and the one that loads it.
struct Layout {
  std::string decoder_block;
  std::string activations;  ///< the activation type's name (f32, bf16, f16)
  std::string cache_type;   ///< the KV buffers' element type's name, and the quantisation of a quantised cache
  std::int64_t vocab_size = 0, emb_dim = 0;
  std::vector<std::vector<std::int64_t>> buffers;  ///< per layer: the width of each KV buffer
  std::vector<std::vector<std::int64_t>> states;   ///< per layer: the width of each recurrent state (f32)
};

/// One layer's cached data for one sequence.
struct LayerData {
  std::vector<std::vector<std::byte>> buffers;  ///< rows [cached, width] of the cache type, row-major
  std::vector<std::vector<float>> states;       ///< [width] each
  std::int32_t state_tokens = 0;                ///< tokens the states summarise (layers with states)
  std::vector<std::int32_t> history;            ///< the layer's host ids (Engram)
};

/// A session in host memory: what save writes and load reads.
struct Image {
  Layout layout;
  std::vector<std::int32_t> tokens;
  std::int64_t cached = 0;                ///< tokens whose keys and values are in `layers`
  std::vector<std::int64_t> media_index;  ///< the soft tokens' positions, ascending
  std::int64_t media_width = 0;
  std::vector<float> media_rows;          ///< [media_index.size(), media_width]
  std::vector<float> probe;               ///< the probe's logits [vocab_size]
  std::vector<LayerData> layers;
  bool has_segments = false;
  std::vector<std::int32_t> segments;  ///< [cached] when has_segments
  std::string app;                     ///< the application's text (maxtext chat: its messages as JSON)
};

/// The size in bytes of one element of a cache type named by dtype_name (f32, bf16, f16); 0 for another name.
MAXTEXT_API std::size_t element_bytes(std::string_view type);

/// The file's bytes for `im` (header, payload, CRC).
MAXTEXT_API std::vector<std::byte> encode(const Image& im);
/// Writes encode(im) to `path` through a temporary file renamed into place, so that a reader (or a crash) never
/// sees half a file. IoError naming the path when it cannot.
MAXTEXT_API void write(const std::string& path, const Image& im);

/// Parses a file's bytes (named `name` in messages) and checks it against `expect` (the loading model's layout) and
/// `capacity` (the most tokens the session holds). IoError for a damaged or foreign file, ArgumentError for a
/// session that belongs to another model or does not fit; the message names the field, expected vs found.
MAXTEXT_API Image decode(std::span<const std::byte> bytes, std::string_view name, const Layout& expect,
                         std::int64_t capacity);
/// decode() of the file at `path`.
MAXTEXT_API Image read(const std::string& path, const Layout& expect, std::int64_t capacity);

/// The probe's token ids for a vocabulary of `vocab` tokens: 0..min(kProbeTokens, vocab) - 1.
MAXTEXT_API std::vector<std::int32_t> probe_ids(std::int64_t vocab);
/// The relative tolerance of the probe for an activation type (kProbeTolerance: f32 1e-3, bf16 / f16 5e-2 of the
/// largest logit's magnitude, plus that much absolute).
MAXTEXT_API double probe_tolerance(std::string_view activations);
/// Refuses (ArgumentError, naming `name`) a probe computed now that differs from the saved one by more than the
/// tolerance: the session was saved with other weights.
MAXTEXT_API void check_probe(const std::vector<float>& saved, const std::vector<float>& now, std::string_view activations,
                             std::string_view name);

}  // namespace maxtext::models::session_file

#if MAXTEXT_API_DEFINITIONS
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "maxtext/core/error.hpp"

namespace maxtext::models::session_file {

namespace detail {

inline constexpr char kMagic[8] = {'M', 'X', 'S', 'E', 'S', 'S', '\r', '\n'};

inline std::uint32_t crc32_of(const std::byte* p, std::size_t n) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, std::numeric_limits<uInt>::max()));
    c = ::crc32(c, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(c);
}

struct Writer {
  std::vector<std::byte> out;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  template <class T>
  void pod(const T& v) {
    bytes(&v, sizeof v);
  }
  template <class T>
  void array(const std::vector<T>& v) {
    if (!v.empty()) bytes(v.data(), v.size() * sizeof(T));
  }
};

/// A bounds-checked cursor over the file's bytes.
struct Reader {
  std::span<const std::byte> in;
  std::size_t at = 0;
  std::string_view name;
  const std::byte* take(std::size_t n, std::string_view what) {
    MAXTEXT_CHECK(n <= in.size() - at, IoError, "[session] ", name, ": truncated in ", what, " (", n,
                  " bytes needed at offset ", at, ", the file has ", in.size(), ")");
    const std::byte* p = in.data() + at;
    at += n;
    return p;
  }
  template <class T>
  T pod(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> array(std::size_t n, std::string_view what) {
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), take(n * sizeof(T), what), n * sizeof(T));
    return v;
  }
};

using Json = nlohmann::json;

inline Json layout_json(const Layout& l) {
  return Json{{"decoder_block", l.decoder_block}, {"activations", l.activations}, {"cache_type", l.cache_type},
              {"vocab_size", l.vocab_size},       {"emb_dim", l.emb_dim},         {"buffers", l.buffers},
              {"states", l.states}};
}

/// A header field of the expected JSON type, or IoError naming it.
template <class T>
T field(const Json& j, const char* key, std::string_view name) {
  MAXTEXT_CHECK(j.is_object() && j.contains(key), IoError, "[session] ", name, ": the header has no '", key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const Json::exception& e) {
    MAXTEXT_THROW(IoError, "[session] ", name, ": header field '", key, "' has the wrong type (", e.what(), ")");
  }
}

/// A count from the header: in [0, limit], or IoError naming it.
inline std::int64_t count(const Json& j, const char* key, std::int64_t limit, std::string_view name) {
  const auto v = field<std::int64_t>(j, key, name);
  MAXTEXT_CHECK(v >= 0 && v <= limit, IoError, "[session] ", name, ": header field '", key, "' = ", v,
                " outside [0, ", limit, "]");
  return v;
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// Refuses a saved layout that differs from the model's, naming the first field that differs.
inline void check_layout(const Layout& f, const Layout& m, std::string_view name) {
  auto differ = [&](const char* what, const std::string& found, const std::string& expected) {
    MAXTEXT_THROW(ArgumentError, "[session] ", name, " was saved by another model: ", what, " ", found,
                  " in the file, ", expected, " in this model");
  };
  if (f.decoder_block != m.decoder_block) differ("decoder_block", f.decoder_block, m.decoder_block);
  if (f.activations != m.activations) differ("activation type", f.activations, m.activations);
  if (f.cache_type != m.cache_type) differ("KV-cache type", f.cache_type, m.cache_type);
  if (f.vocab_size != m.vocab_size) differ("vocab_size", std::to_string(f.vocab_size), std::to_string(m.vocab_size));
  if (f.emb_dim != m.emb_dim) differ("emb_dim", std::to_string(f.emb_dim), std::to_string(m.emb_dim));
  if (f.buffers.size() != m.buffers.size()) {
    differ("cached layers", std::to_string(f.buffers.size()), std::to_string(m.buffers.size()));
  }
  for (std::size_t l = 0; l < m.buffers.size(); ++l) {
    const std::string at = "layer " + std::to_string(l);
    if (f.buffers[l] != m.buffers[l]) differ((at + " KV widths").c_str(), list(f.buffers[l]), list(m.buffers[l]));
    if (f.states[l] != m.states[l]) differ((at + " state widths").c_str(), list(f.states[l]), list(m.states[l]));
  }
}

}  // namespace detail

MAXTEXT_API std::size_t element_bytes(std::string_view type) {
  type = type.substr(0, type.find(' '));  // "f32 int8/heads_and_dkv": packed quantised rows in f32 elements
  if (type == "f32") return 4;
  if (type == "bf16" || type == "f16") return 2;
  return 0;
}

MAXTEXT_API std::vector<std::byte> encode(const Image& im) {
  using detail::Json;
  const std::size_t eb = element_bytes(im.layout.cache_type);
  MAXTEXT_CHECK(eb > 0, ArgumentError, "[session] cache type '", im.layout.cache_type, "' cannot be saved");
  MAXTEXT_CHECK(im.layers.size() == im.layout.buffers.size() && im.layers.size() == im.layout.states.size(),
                ArgumentError, "[session] ", im.layers.size(), " layers of data for a layout of ",
                im.layout.buffers.size());
  Json layers = Json::array();
  for (const auto& l : im.layers) {
    layers.push_back(Json{{"state_tokens", l.state_tokens}, {"history", l.history}});
  }
  const Json header{{"format", "maxtext-session"},
                    {"layout", detail::layout_json(im.layout)},
                    {"tokens", im.tokens.size()},
                    {"cached", im.cached},
                    {"media", Json{{"count", im.media_index.size()}, {"width", im.media_width}}},
                    {"probe", im.probe.size()},
                    {"segments", im.has_segments},
                    {"layers", layers},
                    {"app", im.app}};
  const std::string h = header.dump();
  detail::Writer w;
  w.bytes(detail::kMagic, sizeof detail::kMagic);
  w.pod(kVersion);
  w.pod(static_cast<std::uint64_t>(h.size()));
  w.bytes(h.data(), h.size());
  w.array(im.tokens);
  w.array(im.media_index);
  w.array(im.media_rows);
  w.array(im.probe);
  for (std::size_t l = 0; l < im.layers.size(); ++l) {
    const auto& d = im.layers[l];
    MAXTEXT_CHECK(d.buffers.size() == im.layout.buffers[l].size() && d.states.size() == im.layout.states[l].size(),
                  ArgumentError, "[session] layer ", l, " data does not match its layout");
    for (std::size_t i = 0; i < d.buffers.size(); ++i) {
      MAXTEXT_CHECK(d.buffers[i].size() == static_cast<std::size_t>(im.cached * im.layout.buffers[l][i]) * eb,
                    ArgumentError, "[session] layer ", l, " buffer ", i, " holds ", d.buffers[i].size(), " bytes");
      w.array(d.buffers[i]);
    }
    for (std::size_t i = 0; i < d.states.size(); ++i) w.array(d.states[i]);
  }
  if (im.has_segments) w.array(im.segments);
  w.pod(detail::crc32_of(w.out.data(), w.out.size()));
  return std::move(w.out);
}

MAXTEXT_API void write(const std::string& path, const Image& im) {
  const std::vector<std::byte> bytes = encode(im);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MAXTEXT_CHECK(f.good(), IoError, "[session] cannot write ", tmp);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    MAXTEXT_CHECK(f.good(), IoError, "[session] writing ", tmp, " failed (", bytes.size(), " bytes)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MAXTEXT_CHECK(!ec, IoError, "[session] cannot rename ", tmp, " to ", path, ": ", ec.message());
}

MAXTEXT_API Image decode(std::span<const std::byte> bytes, std::string_view name, const Layout& expect,
                         std::int64_t capacity) {
  using detail::Json;
  detail::Reader r{bytes, 0, name};
  const std::byte* magic = r.take(sizeof detail::kMagic, "the magic");
  MAXTEXT_CHECK(std::memcmp(magic, detail::kMagic, sizeof detail::kMagic) == 0, IoError, "[session] ", name,
                " is not a maxtext session file (its first bytes are not MXSESS)");
  const auto version = r.pod<std::uint32_t>("the version");
  MAXTEXT_CHECK(version == kVersion, IoError, "[session] ", name, " has format version ", version,
                "; this library reads version ", kVersion);
  const auto hlen = r.pod<std::uint64_t>("the header length");
  MAXTEXT_CHECK(hlen <= kMaxHeaderBytes && hlen <= bytes.size() - r.at, IoError, "[session] ", name,
                ": header length ", hlen, " exceeds the file's ", bytes.size() - r.at, " remaining bytes");
  const auto* hp = r.take(static_cast<std::size_t>(hlen), "the header");
  MAXTEXT_CHECK(bytes.size() - r.at >= sizeof(std::uint32_t), IoError, "[session] ", name, ": truncated (no CRC)");
  // The CRC first: a damaged file is reported as damaged, whatever the damage made the header say.
  const std::size_t body = bytes.size() - sizeof(std::uint32_t);
  std::uint32_t stored;
  std::memcpy(&stored, bytes.data() + body, sizeof stored);
  const std::uint32_t crc = detail::crc32_of(bytes.data(), body);
  MAXTEXT_CHECK(crc == stored, IoError, "[session] ", name, " is damaged: CRC-32 ", crc, " of its ", body,
                " bytes, ", stored, " recorded");
  Json h;
  try {
    h = Json::parse(reinterpret_cast<const char*>(hp), reinterpret_cast<const char*>(hp) + hlen);
  } catch (const Json::exception& e) {
    MAXTEXT_THROW(IoError, "[session] ", name, ": the header is not JSON (", e.what(), ")");
  }
  MAXTEXT_CHECK(h.is_object() && h.contains("format") && h.at("format").is_string() &&
                    h.at("format").get<std::string>() == "maxtext-session",
                IoError, "[session] ", name, ": the header's format is not maxtext-session");
  const Json lj = h.contains("layout") ? h.at("layout") : Json();
  Image im;
  Layout& L = im.layout;
  L.decoder_block = detail::field<std::string>(lj, "decoder_block", name);
  L.activations = detail::field<std::string>(lj, "activations", name);
  L.cache_type = detail::field<std::string>(lj, "cache_type", name);
  L.vocab_size = detail::field<std::int64_t>(lj, "vocab_size", name);
  L.emb_dim = detail::field<std::int64_t>(lj, "emb_dim", name);
  L.buffers = detail::field<std::vector<std::vector<std::int64_t>>>(lj, "buffers", name);
  L.states = detail::field<std::vector<std::vector<std::int64_t>>>(lj, "states", name);
  MAXTEXT_CHECK(L.states.size() == L.buffers.size(), IoError, "[session] ", name, ": the layout lists ",
                L.buffers.size(), " layers of buffers and ", L.states.size(), " of states");
  detail::check_layout(L, expect, name);  // from here on the widths are the model's
  const std::size_t eb = element_bytes(L.cache_type);

  // Every count is bounded by what the rest of the file can hold before anything is allocated.
  const auto left = [&] { return static_cast<std::int64_t>(body - r.at); };
  const std::int64_t n = detail::count(h, "tokens", left() / 4, name);
  MAXTEXT_CHECK(n <= capacity, ArgumentError, "[session] ", name, " holds ", n, " tokens; this session's capacity is ",
                capacity);
  im.cached = detail::count(h, "cached", n, name);
  const Json mj = h.contains("media") ? h.at("media") : Json();
  const std::int64_t nm = detail::count(mj, "count", n, name);
  im.media_width = detail::count(mj, "width", nm > 0 ? expect.emb_dim : 0, name);
  MAXTEXT_CHECK(nm == 0 || im.media_width == expect.emb_dim, IoError, "[session] ", name, ": soft-token rows of ",
                im.media_width, " values for a model of emb_dim ", expect.emb_dim);
  const std::int64_t np = detail::count(h, "probe", expect.vocab_size, name);
  MAXTEXT_CHECK(np == expect.vocab_size, IoError, "[session] ", name, ": a probe of ", np, " logits for a vocabulary of ",
                expect.vocab_size);
  im.has_segments = detail::field<bool>(h, "segments", name);
  const Json layers = h.contains("layers") ? h.at("layers") : Json();
  MAXTEXT_CHECK(layers.is_array() && layers.size() == L.buffers.size(), IoError, "[session] ", name,
                ": the header describes ", layers.is_array() ? layers.size() : 0, " layers' data for ", L.buffers.size(),
                " layers");
  im.app = h.contains("app") ? detail::field<std::string>(h, "app", name) : std::string();

  // The payload's size, from the counts and the model's widths, must be what the file holds.
  std::int64_t need = n * 4 + nm * 8 + nm * im.media_width * 4 + np * 4 + (im.has_segments ? im.cached * 4 : 0);
  for (std::size_t l = 0; l < L.buffers.size(); ++l) {
    for (auto w : L.buffers[l]) need += im.cached * w * static_cast<std::int64_t>(eb);
    for (auto w : L.states[l]) need += w * 4;
  }
  MAXTEXT_CHECK(need == left(), IoError, "[session] ", name, ": the header describes ", need,
                " bytes of data, the file holds ", left());

  im.tokens = r.array<std::int32_t>(static_cast<std::size_t>(n), "the tokens");
  for (std::int64_t i = 0; i < n; ++i) {
    const auto t = im.tokens[static_cast<std::size_t>(i)];
    MAXTEXT_CHECK(t >= 0 && t < expect.vocab_size, IoError, "[session] ", name, ": token ", i, " is id ", t,
                  ", outside the vocabulary [0, ", expect.vocab_size, ")");
  }
  im.media_index = r.array<std::int64_t>(static_cast<std::size_t>(nm), "the soft tokens' positions");
  for (std::size_t i = 0; i < im.media_index.size(); ++i) {
    const auto p = im.media_index[i];
    MAXTEXT_CHECK(p >= 0 && p < n && (i == 0 || p > im.media_index[i - 1]), IoError, "[session] ", name,
                  ": soft token ", i, " at position ", p, " (positions must ascend within [0, ", n, "))");
  }
  im.media_rows = r.array<float>(static_cast<std::size_t>(nm * im.media_width), "the soft tokens' rows");
  im.probe = r.array<float>(static_cast<std::size_t>(np), "the probe");
  im.layers.resize(L.buffers.size());
  for (std::size_t l = 0; l < L.buffers.size(); ++l) {
    const Json& lj2 = layers.at(l);
    LayerData& d = im.layers[l];
    d.state_tokens = detail::field<std::int32_t>(lj2, "state_tokens", name);
    d.history = detail::field<std::vector<std::int32_t>>(lj2, "history", name);
    MAXTEXT_CHECK(L.states[l].empty() ? d.state_tokens == 0 : (d.state_tokens >= 0 && d.state_tokens <= im.cached),
                  IoError, "[session] ", name, ": layer ", l, " states summarise ", d.state_tokens, " tokens of ",
                  im.cached, " cached");
    for (auto w : L.buffers[l]) {
      d.buffers.push_back(r.array<std::byte>(static_cast<std::size_t>(im.cached * w) * eb, "the KV buffers"));
    }
    for (auto w : L.states[l]) d.states.push_back(r.array<float>(static_cast<std::size_t>(w), "the states"));
  }
  if (im.has_segments) im.segments = r.array<std::int32_t>(static_cast<std::size_t>(im.cached), "the segment ids");
  return im;
}

MAXTEXT_API Image read(const std::string& path, const Layout& expect, std::int64_t capacity) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  MAXTEXT_CHECK(!ec, IoError, "[session] cannot read ", path, ": ", ec.message());
  std::ifstream f(path, std::ios::binary);
  MAXTEXT_CHECK(f.good(), IoError, "[session] cannot open ", path);
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  MAXTEXT_CHECK(f.gcount() == static_cast<std::streamsize>(size), IoError, "[session] reading ", path, " failed");
  return decode(bytes, path, expect, capacity);
}

MAXTEXT_API std::vector<std::int32_t> probe_ids(std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  for (std::int32_t i = 0; i < kProbeTokens && i < vocab; ++i) ids.push_back(i);
  return ids;
}

MAXTEXT_API double probe_tolerance(std::string_view activations) { return activations == "f32" ? 1e-3 : 5e-2; }

MAXTEXT_API void check_probe(const std::vector<float>& saved, const std::vector<float>& now,
                             std::string_view activations, std::string_view name) {
  MAXTEXT_CHECK(saved.size() == now.size(), ArgumentError, "[session] ", name, ": a probe of ", saved.size(),
                " logits, this model gives ", now.size());
  double scale = 0, worst = 0;
  std::size_t at = 0;
  bool nan_differs = false;
  for (std::size_t i = 0; i < now.size(); ++i) {
    const double a = saved[i], b = now[i];
    if (std::isnan(a) || std::isnan(b)) {
      nan_differs = nan_differs || std::isnan(a) != std::isnan(b);
      continue;
    }
    scale = std::max(scale, std::abs(b));
    if (std::abs(a - b) > worst) {
      worst = std::abs(a - b);
      at = i;
    }
  }
  const double tol = probe_tolerance(activations) * (scale + 1);
  MAXTEXT_CHECK(!nan_differs && worst <= tol, ArgumentError, "[session] ", name,
                " was saved with other weights: the probe's logits (token ids 0..3) differ by ", worst, " at id ", at,
                " (tolerance ", tol, ")");
}

}  // namespace maxtext::models::session_file
#endif
