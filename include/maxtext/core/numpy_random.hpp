// core/numpy_random.hpp: NumPy's default generator, bit for bit, for the places where MaxText draws constants of the
// model (not weights) from it: `np.random.default_rng(seed).integers(...)` gives Engram's hash multipliers
// (layers/engram.hpp). Three pieces of NumPy 1.17+ are restated from their published algorithms:
//   - SeedSequence (numpy/random/bit_generator.pyx): an integer seed as 32-bit words, mixed into a 4-word pool by
//     the hashmix/mix functions, expanded by generate_state;
//   - PCG64 (numpy/random/src/pcg64): the 128-bit LCG with the XSL-RR output function, seeded from four 64-bit words
//     of generate_state, and NumPy's next_uint32 (low half of a 64-bit draw first, the high half buffered);
//   - Generator.integers for int32 (numpy/random/src/distributions): Lemire's nearly-divisionless bounded draw.
// tests/reference/engram_reference.py calls NumPy itself and the tests compare exactly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "maxtext/core/error.hpp"

namespace maxtext::numpy_random {

/// numpy.random.SeedSequence(entropy) for a non-negative integer entropy and no spawn key (pool size 4).
class SeedSequence {
 public:
  explicit SeedSequence(std::uint64_t entropy) {
    // The integer as little-endian 32-bit words; 0 is one word.
    std::vector<std::uint32_t> words;
    do {
      words.push_back(static_cast<std::uint32_t>(entropy & 0xffffffffu));
      entropy >>= 32;
    } while (entropy != 0);
    std::uint32_t hash_const = kInitA;
    for (std::size_t i = 0; i < pool_.size(); ++i) pool_[i] = hashmix(i < words.size() ? words[i] : 0u, hash_const);
    for (std::size_t src = 0; src < pool_.size(); ++src) {
      for (std::size_t dst = 0; dst < pool_.size(); ++dst) {
        if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src], hash_const));
      }
    }
    for (std::size_t src = pool_.size(); src < words.size(); ++src) {
      for (std::size_t dst = 0; dst < pool_.size(); ++dst) pool_[dst] = mix(pool_[dst], hashmix(words[src], hash_const));
    }
  }

  /// generate_state(n, np.uint32).
  std::vector<std::uint32_t> generate_state_u32(std::size_t n) const {
    std::vector<std::uint32_t> out(n);
    std::uint32_t hash_const = kInitB;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t v = pool_[i % pool_.size()];
      v ^= hash_const;
      hash_const *= kMultB;
      v *= hash_const;
      v ^= v >> kXShift;
      out[i] = v;
    }
    return out;
  }
  /// generate_state(n, np.uint64): 2n words, paired little-endian (low word first).
  std::vector<std::uint64_t> generate_state_u64(std::size_t n) const {
    const std::vector<std::uint32_t> w = generate_state_u32(2 * n);
    std::vector<std::uint64_t> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = std::uint64_t{w[2 * i]} | (std::uint64_t{w[2 * i + 1]} << 32);
    return out;
  }
  const std::array<std::uint32_t, 4>& pool() const { return pool_; }

 private:
  static constexpr std::uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
  static constexpr std::uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
  static constexpr std::uint32_t kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
  static constexpr int kXShift = 16;  // 4 * sizeof(uint32) bits

  static std::uint32_t hashmix(std::uint32_t value, std::uint32_t& hash_const) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    value ^= value >> kXShift;
    return value;
  }
  static std::uint32_t mix(std::uint32_t x, std::uint32_t y) {
    std::uint32_t r = kMixMultL * x - kMixMultR * y;
    r ^= r >> kXShift;
    return r;
  }
  std::array<std::uint32_t, 4> pool_{};
};

/// numpy.random.PCG64 seeded as `np.random.default_rng(seed)` seeds it (through SeedSequence(seed)).
class Pcg64 {
 public:
  explicit Pcg64(std::uint64_t seed) {
    const std::vector<std::uint64_t> s = SeedSequence(seed).generate_state_u64(4);
    const u128 initstate = (u128{s[0]} << 64) | s[1];
    const u128 initseq = (u128{s[2]} << 64) | s[3];
    state_ = 0;
    inc_ = (initseq << 1) | 1u;
    step();
    state_ += initstate;
    step();
  }
  /// The next 64-bit output (step, then XSL-RR of the new state).
  std::uint64_t next64() {
    step();
    const auto hi = static_cast<std::uint64_t>(state_ >> 64);
    const auto lo = static_cast<std::uint64_t>(state_);
    const std::uint64_t x = hi ^ lo;
    const unsigned rot = static_cast<unsigned>(hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
  }
  /// NumPy's next_uint32: the low half of a 64-bit draw, then (buffered) its high half.
  std::uint32_t next32() {
    if (has_buffered_) {
      has_buffered_ = false;
      return buffered_;
    }
    const std::uint64_t v = next64();
    has_buffered_ = true;
    buffered_ = static_cast<std::uint32_t>(v >> 32);
    return static_cast<std::uint32_t>(v & 0xffffffffu);
  }

 private:
  using u128 = unsigned __int128;
  static constexpr u128 kMult = (u128{2549297995355413924ull} << 64) | 4865540595714422341ull;
  void step() { state_ = state_ * kMult + inc_; }
  u128 state_ = 0, inc_ = 0;
  bool has_buffered_ = false;
  std::uint32_t buffered_ = 0;
};

/// A value in [0, range] (inclusive) by Lemire's method as NumPy draws it for 32-bit integer types
/// (buffered_bounded_lemire_uint32; range 0 and 2^32-1 are NumPy's special cases).
inline std::uint32_t bounded_uint32(Pcg64& g, std::uint32_t range) {
  if (range == 0) return 0;
  if (range == 0xffffffffu) return g.next32();
  const std::uint32_t excl = range + 1;
  std::uint64_t m = std::uint64_t{g.next32()} * excl;
  auto leftover = static_cast<std::uint32_t>(m & 0xffffffffu);
  if (leftover < excl) {
    const std::uint32_t threshold = (0xffffffffu - range) % excl;
    while (leftover < threshold) {
      m = std::uint64_t{g.next32()} * excl;
      leftover = static_cast<std::uint32_t>(m & 0xffffffffu);
    }
  }
  return static_cast<std::uint32_t>(m >> 32);
}

/// `Generator.integers(low, high, size=n, dtype=np.int32)`: n values in [low, high).
inline std::vector<std::int32_t> integers_int32(Pcg64& g, std::int32_t low, std::int32_t high, std::size_t n) {
  MAXTEXT_CHECK(low < high, ArgumentError, "[numpy_random] integers: low (", low, ") must be below high (", high, ")");
  const auto range = static_cast<std::uint32_t>(static_cast<std::int64_t>(high) - 1 - low);
  std::vector<std::int32_t> out(n);
  for (auto& v : out) {
    v = static_cast<std::int32_t>(static_cast<std::int64_t>(low) + bounded_uint32(g, range));
  }
  return out;
}

}  // namespace maxtext::numpy_random
