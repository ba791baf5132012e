// tests/fuzz/entry/session.hpp: fuzz entry point for session files (models::session_file::decode, in memory) against a
// fixed small layout. Mutations rarely keep the trailing CRC-32 right, so each input is decoded twice: as it is, and
// with its CRC recomputed, so that the header and payload checks behind the CRC are reached. What decodes must encode
// and decode again to the same conversation.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include <zlib.h>

#include "entry/exercise.hpp"
#include "maxtext/models/session_file.hpp"

namespace maxtext::fuzz {

/// The layout the harness loads into (make_seeds writes a session of it): two layers, the second with a state.
inline models::session_file::Layout session_layout() {
  models::session_file::Layout L;
  L.decoder_block = "llama2";
  L.activations = "f32";
  L.cache_type = "f32";
  L.vocab_size = 16;
  L.emb_dim = 8;
  L.buffers = {{8, 8}, {4}};
  L.states = {{}, {4}};
  return L;
}

inline void fuzz_session_file(const std::uint8_t* data, std::size_t size) {
  namespace sf = models::session_file;
  const auto L = session_layout();
  auto check = [&](std::span<const std::byte> bytes) {
    attempt([&] {
      const sf::Image im = sf::decode(bytes, "input.mxs", L, 64);
      const sf::Image again = sf::decode(sf::encode(im), "re-encoded", L, 64);
      if (again.tokens != im.tokens || again.cached != im.cached || again.media_index != im.media_index ||
          again.app != im.app || again.layers.size() != im.layers.size()) {
        std::abort();  // encode and decode disagree
      }
    });
  };
  const auto* b = reinterpret_cast<const std::byte*>(data);
  check(std::span<const std::byte>(b, size));
  if (size >= 4) {
    std::vector<std::byte> fixed(b, b + size);
    const auto c = static_cast<std::uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(fixed.data()), static_cast<uInt>(size - 4)));
    std::memcpy(fixed.data() + size - 4, &c, 4);
    check(fixed);
  }
}

}  // namespace maxtext::fuzz
