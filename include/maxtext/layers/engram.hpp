// layers/engram.hpp: MaxText layers/engram.py, the n-gram hashing of DeepSeek's Engram (NgramHashMapping).
//
// For an Engram layer l and a row of compressed token ids x (CompressedTokenizer's many-to-one map of the vocabulary),
// position t and n-gram order n = 2..N (N = engram_max_ngram_size):
//   h_n(t) = (x[t] * m_0) ^ (x[t-1] * m_1) ^ ... ^ (x[t-n+1] * m_{n-1})     int32, products wrapping
//   index(t, n, j) = h_n(t) mod p_{n,j}                                       floor modulo (jnp's %), j = 0..H-1
// with x[t-k] = pad_id (the compressed pad token) before the row starts. The result is [B, S, (N-1) * H], ordered
// by order then head.
//   - Multipliers m_0..m_{N-1} of layer l: `np.random.default_rng(seed + 10007 * l).integers(0, half, N, int32) * 2
//     + 1`, half = max(1, (2^31 - 1) // compressed_vocab // 2), so that x * m stays within int32 for valid ids
//     (core/numpy_random.hpp reproduces NumPy's generator bit for bit).
//   - Moduli p_{n,j}: distinct primes over all layers, orders and heads, in that order. Each order's search starts at
//     engram_vocab_bases[n-2]; each head takes the next prime above the previous one not taken yet.
// This is the hashing alone: the Engram block (embeddings, gated value, short convolution) is not implemented yet,
// and the config still refuses `engram_layers` (core/config.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/numpy_random.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::layers {

/// Exact primality for 64-bit n: Miller-Rabin with the first twelve prime bases (deterministic below 3.3e24).
inline bool is_prime_u64(std::uint64_t n) {
  if (n < 2) return false;
  constexpr std::uint64_t small[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  for (const std::uint64_t p : small) {
    if (n % p == 0) return n == p;
  }
  using u128 = unsigned __int128;
  const auto mulmod = [n](std::uint64_t a, std::uint64_t b) { return static_cast<std::uint64_t>(u128{a} * b % n); };
  const auto powmod = [&](std::uint64_t b, std::uint64_t e) {
    std::uint64_t r = 1;
    for (; e != 0; e >>= 1, b = mulmod(b, b)) {
      if (e & 1u) r = mulmod(r, b);
    }
    return r;
  };
  std::uint64_t d = n - 1;
  int s = 0;
  for (; (d & 1u) == 0; d >>= 1) ++s;
  for (const std::uint64_t a : small) {
    std::uint64_t x = powmod(a, d);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < s && composite; ++i) {
      x = mulmod(x, x);
      composite = x != n - 1;
    }
    if (composite) return false;
  }
  return true;
}

/// What NgramHashMapping is built from: the engram_* config keys, the layers, and the compressed vocabulary.
struct NgramHashSpec {
  std::vector<std::int64_t> vocab_bases;  ///< engram_vocab_bases: the smallest table size per order (2, 3, ...)
  std::int64_t max_ngram_size = 3;        ///< engram_max_ngram_size
  std::int64_t num_heads = 8;             ///< engram_num_heads (per order)
  std::vector<std::int64_t> layer_ids;    ///< engram_layers
  std::int64_t compressed_vocab_size = 0; ///< CompressedTokenizer's number of distinct ids
  std::int32_t pad_id = 0;                ///< the pad token's compressed id
  std::int64_t seed = 0;                  ///< engram_seed
};

/// MaxText NgramHashMapping (layers/engram.py): per-layer multipliers and prime moduli, and the hash indices of
/// every position of a batch of compressed ids.
class NgramHashMapping {
 public:
  static constexpr std::int64_t kLayerSeedOffset = 10007;  // engram.py's LAYER_PRIME_OFFSET

  explicit NgramHashMapping(NgramHashSpec spec) : spec_(std::move(spec)) {
    constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
    MAXTEXT_CHECK(spec_.max_ngram_size >= 2 && spec_.max_ngram_size <= 64, ConfigError,
                  "[engram] engram_max_ngram_size: expected 2..64, found ", spec_.max_ngram_size);
    MAXTEXT_CHECK(spec_.num_heads >= 1 && spec_.num_heads <= 4096, ConfigError,
                  "[engram] engram_num_heads: expected 1..4096, found ", spec_.num_heads);
    MAXTEXT_CHECK(static_cast<std::int64_t>(spec_.vocab_bases.size()) >= spec_.max_ngram_size - 1, ConfigError,
                  "[engram] engram_vocab_bases: expected a size for each order 2..", spec_.max_ngram_size, " (",
                  spec_.max_ngram_size - 1, " values), found ", spec_.vocab_bases.size());
    for (const std::int64_t b : spec_.vocab_bases) {
      // Table sizes are int32 moduli (engram.py builds them with jnp.int32); leave room for the prime search.
      MAXTEXT_CHECK(b >= 1 && b <= int32_max / 2, ConfigError, "[engram] engram_vocab_bases: expected values in [1, ",
                    int32_max / 2, "], found ", b);
    }
    MAXTEXT_CHECK(spec_.compressed_vocab_size >= 1 && spec_.compressed_vocab_size <= int32_max, ConfigError,
                  "[engram] compressed vocabulary size: expected 1..2^31-1, found ", spec_.compressed_vocab_size);
    MAXTEXT_CHECK(spec_.seed >= 0 && spec_.seed < (std::int64_t{1} << 62), ConfigError, "[engram] engram_seed: "
                  "expected a non-negative seed below 2^62 (NumPy's default_rng refuses negative ones), found ",
                  spec_.seed);
    std::set<std::int64_t> seen_layers;
    for (const std::int64_t l : spec_.layer_ids) {
      MAXTEXT_CHECK(l >= 0 && l < (std::int64_t{1} << 20), ConfigError, "[engram] engram_layers: layer ", l,
                    " is out of range");
      MAXTEXT_CHECK(seen_layers.insert(l).second, ConfigError, "[engram] engram_layers: layer ", l, " is listed twice");
    }
    const std::int64_t half_bound = std::max<std::int64_t>(1, int32_max / spec_.compressed_vocab_size / 2);
    std::set<std::int64_t> seen_primes;
    for (const std::int64_t l : spec_.layer_ids) {
      numpy_random::Pcg64 g(static_cast<std::uint64_t>(spec_.seed + kLayerSeedOffset * l));
      std::vector<std::int32_t> m = numpy_random::integers_int32(g, 0, static_cast<std::int32_t>(half_bound),
                                                                 static_cast<std::size_t>(spec_.max_ngram_size));
      for (auto& v : m) v = v * 2 + 1;
      multipliers_[l] = std::move(m);
      std::vector<std::int32_t>& sizes = vocab_sizes_[l];
      for (std::int64_t n = 2; n <= spec_.max_ngram_size; ++n) {
        std::int64_t start = spec_.vocab_bases[static_cast<std::size_t>(n - 2)] - 1;
        for (std::int64_t h = 0; h < spec_.num_heads; ++h) {
          std::int64_t c = start + 1;
          while (seen_primes.count(c) != 0 || !is_prime_u64(static_cast<std::uint64_t>(c))) ++c;
          MAXTEXT_CHECK(c <= int32_max, ConfigError, "[engram] the prime table sizes grow past 2^31-1 (engram_vocab_bases ",
                        spec_.vocab_bases, ", ", spec_.num_heads, " heads, ", spec_.layer_ids.size(), " layers)");
          seen_primes.insert(c);
          sizes.push_back(static_cast<std::int32_t>(c));
          start = c;
        }
      }
    }
  }

  const NgramHashSpec& spec() const { return spec_; }
  /// Hash heads per position: (max_ngram_size - 1) * num_heads.
  std::int64_t total_heads() const { return (spec_.max_ngram_size - 1) * spec_.num_heads; }
  /// Odd multipliers m_0..m_{N-1} of an Engram layer.
  const std::vector<std::int32_t>& multipliers(std::int64_t layer) const { return lookup(multipliers_, layer); }
  /// Prime table sizes of an Engram layer, order-major ([2-gram heads..., 3-gram heads..., ...]).
  const std::vector<std::int32_t>& vocab_sizes(std::int64_t layer) const { return lookup(vocab_sizes_, layer); }

  /// Hash indices of one row: `ids` are the compressed ids of positions that follow `history` (the row's earlier ids,
  /// of which the last max_ngram_size - 1 are read; fewer are padded with pad_id, as at the row's start). Writes
  /// ids.size() * total_heads() values to `out`. Hashing a row in pieces, each with the ids before it as history,
  /// gives the same indices as hashing it whole (decode keeps the last N - 1 ids).
  void hash_row(std::int64_t layer, std::span<const std::int32_t> history, std::span<const std::int32_t> ids,
                std::int32_t* out) const {
    const std::vector<std::int32_t>& m = multipliers(layer);
    const std::vector<std::int32_t>& p = vocab_sizes(layer);
    const auto N = static_cast<std::size_t>(spec_.max_ngram_size);
    const auto H = static_cast<std::size_t>(spec_.num_heads);
    const auto id_at = [&](std::size_t t, std::size_t back) -> std::int32_t {  // x[t - back]
      if (back <= t) return ids[t - back];
      const std::size_t h = back - t;  // 1 = the last history id
      return h <= history.size() ? history[history.size() - h] : spec_.pad_id;
    };
    const auto wrap_mul = [](std::int32_t a, std::int32_t b) {
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) * static_cast<std::uint32_t>(b));
    };
    for (std::size_t t = 0; t < ids.size(); ++t) {
      std::int32_t h = wrap_mul(id_at(t, 0), m[0]);
      std::int32_t* o = out + t * (N - 1) * H;
      for (std::size_t n = 2; n <= N; ++n) {
        h ^= wrap_mul(id_at(t, n - 1), m[n - 1]);
        for (std::size_t j = 0; j < H; ++j) {
          const std::int32_t q = p[(n - 2) * H + j];
          std::int32_t r = h % q;
          if (r < 0) r += q;
          *o++ = r;
        }
      }
    }
  }

  /// Hash indices [B, S, total_heads()] of compressed ids [B, S] (each row from its start).
  Tensor<std::int32_t, 3> hashes(std::int64_t layer, const Tensor<std::int32_t, 2>& ids) const {
    const std::int64_t B = ids.dim(0), S = ids.dim(1);
    Tensor<std::int32_t, 3> out({B, S, total_heads()});
    if (S == 0) return out;
    for (std::int64_t b = 0; b < B; ++b) {
      hash_row(layer, {}, std::span<const std::int32_t>(&ids(b, 0), static_cast<std::size_t>(S)), &out(b, 0, 0));
    }
    return out;
  }

 private:
  template <class M>
  const typename M::mapped_type& lookup(const M& m, std::int64_t layer) const {
    const auto it = m.find(layer);
    MAXTEXT_CHECK(it != m.end(), ArgumentError, "[engram] layer ", layer, " is not an Engram layer (engram_layers ",
                  spec_.layer_ids, ")");
    return it->second;
  }
  NgramHashSpec spec_;
  std::map<std::int64_t, std::vector<std::int32_t>> multipliers_;
  std::map<std::int64_t, std::vector<std::int32_t>> vocab_sizes_;
};

}  // namespace maxtext::layers
