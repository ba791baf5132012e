// layers/engram.hpp: MaxText layers/engram.py: the n-gram hashing of DeepSeek's Engram (NgramHashMapping) and the
// Engram module itself (with its MultiHeadEmbedding and ShortConv).
//
// Hashing. For an Engram layer l and a row of compressed token ids x (CompressedTokenizer's many-to-one map of the
// vocabulary), position t and n-gram order n = 2..N (N = engram_max_ngram_size):
//   h_n(t) = (x[t] * m_0) ^ (x[t-1] * m_1) ^ ... ^ (x[t-n+1] * m_{n-1})     int32, products wrapping
//   index(t, n, j) = h_n(t) mod p_{n,j}                                       floor modulo (jnp's %), j = 0..H-1
// with x[t-k] = pad_id (the compressed pad token) before the row starts. The result is [B, S, (N-1) * H], ordered
// by order then head.
//   - Multipliers m_0..m_{N-1} of layer l: `np.random.default_rng(seed + 10007 * l).integers(0, half, N, int32) * 2
//     + 1`, half = max(1, (2^31 - 1) // compressed_vocab // 2), so that x * m stays within int32 for valid ids
//     (core/numpy_random.hpp reproduces NumPy's generator bit for bit).
//   - Moduli p_{n,j}: distinct primes over all layers, orders and heads, in that order. Each order's search starts at
//     engram_vocab_bases[n-2]; each head takes the next prime above the previous one not taken yet.
//
// The module (Engram.__call__), on hidden states h [M, G, D] (G = mhc_expansion_rate streams, held as [M, G*D]) and
// the layer's hash indices [M, Ht] (Ht = (N-1) * H heads of engram_head_dim Dh each):
//   e     = concat_j E[idx_j + offset_j]                   [M, Ht*Dh]   one table, each head's rows after the last's
//   k_g   = RMSNorm_k,g(key_proj(e)_g)                     key_proj: Ht*Dh -> [G, D], with bias
//   q_g   = RMSNorm_q,g(h_g)
//   gate  = sigmoid(signed_sqrt(q_g . k_g / sqrt D))       signed_sqrt(s) = sqrt(max(|s|, 1e-6)) sign(s)
//   v_g   = gate_g * value_proj(e)                         value_proj: Ht*Dh -> D, with bias, shared by the streams
//   out_g = v_g + silu(conv(RMSNorm_c,g(v_g)))             conv: depthwise, causal, kernel engram_kernel_size,
//                                                          dilation N, over the sequence
// The convolution runs as the backends' causal_conv1d with dilation N, so decode continues from the last (K-1)*N
// conv inputs kept in the layer's state. The caller adds
// out to the residual stream (deepseek.py engram_op, after RMSNorm engram_layer_norm).
//
// The DeepSeek layers listed in engram_layers run it (families/deepseek/deepseek.hpp) on hashes that EngramHashing computes from
// the step's tokens and the compressed-token table the model is given (models::Transformer::set_engram_vocab).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/numpy_random.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/layers/embeddings.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/params.hpp"

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
    for (const std::int64_t l : spec_.layer_ids) {
      numpy_random::Pcg64 g(static_cast<std::uint64_t>(spec_.seed + kLayerSeedOffset * l));
      std::vector<std::int32_t> m = numpy_random::integers_int32(g, 0, static_cast<std::int32_t>(half_bound),
                                                                 static_cast<std::size_t>(spec_.max_ngram_size));
      for (auto& v : m) v = v * 2 + 1;
      multipliers_[l] = std::move(m);
    }
    vocab_sizes_ = table_sizes(spec_.vocab_bases, spec_.max_ngram_size, spec_.num_heads, spec_.layer_ids);
  }

  /// The prime table sizes of every Engram layer (order-major per layer), which depend on the configuration alone
  /// (not on the tokenizer): what a layer's parameter shapes need before any tokenizer is known.
  static std::map<std::int64_t, std::vector<std::int32_t>> table_sizes(const std::vector<std::int64_t>& vocab_bases,
                                                                       std::int64_t max_ngram_size, std::int64_t num_heads,
                                                                       const std::vector<std::int64_t>& layer_ids) {
    constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
    MAXTEXT_CHECK(static_cast<std::int64_t>(vocab_bases.size()) >= max_ngram_size - 1, ConfigError,
                  "[engram] engram_vocab_bases: expected a size for each order 2..", max_ngram_size, " (",
                  max_ngram_size - 1, " values), found ", vocab_bases.size());
    std::map<std::int64_t, std::vector<std::int32_t>> out;
    std::set<std::int64_t> seen_primes;
    for (const std::int64_t l : layer_ids) {
      std::vector<std::int32_t>& sizes = out[l];
      for (std::int64_t n = 2; n <= max_ngram_size; ++n) {
        std::int64_t start = vocab_bases[static_cast<std::size_t>(n - 2)] - 1;
        for (std::int64_t h = 0; h < num_heads; ++h) {
          std::int64_t c = start + 1;
          while (seen_primes.count(c) != 0 || !is_prime_u64(static_cast<std::uint64_t>(c))) ++c;
          MAXTEXT_CHECK(c <= int32_max, ConfigError, "[engram] the prime table sizes grow past 2^31-1 (engram_vocab_bases ",
                        vocab_bases, ", ", num_heads, " heads, ", layer_ids.size(), " layers)");
          seen_primes.insert(c);
          sizes.push_back(static_cast<std::int32_t>(c));
          start = c;
        }
      }
    }
    return out;
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

/// NgramHashSpec from a config's engram_* keys and a compressed vocabulary.
inline NgramHashSpec engram_hash_spec(const ::maxtext::Config& c, std::int64_t compressed_vocab_size, std::int32_t pad_id) {
  NgramHashSpec s;
  s.vocab_bases = c.engram_vocab_bases();
  s.max_ngram_size = c.engram_max_ngram_size;
  s.num_heads = c.engram_num_heads;
  s.layer_ids = c.engram_layers();
  s.compressed_vocab_size = compressed_vocab_size;
  s.pad_id = pad_id;
  s.seed = c.engram_seed;
  return s;
}

/// The token side of a model's Engram layers, which deepseek.py builds from the Hugging Face tokenizer
/// (NgramHashMapping with its CompressedTokenizer): the compressed-token table `lookup` (token id -> canonical id,
/// `compressed_size` distinct ids; tokenizer/compressed_tokenizer.hpp computes it from a tokenizer.json), the pad
/// token, and the hashing of each step's tokens. A row continues from the last max_ngram_size - 1 compressed ids
/// of its earlier tokens, kept in the layer's cache (LayerCache::history); a row that starts (cache length 0)
/// begins from the compressed pad id, as MaxText's shifted windows do.
class EngramHashing {
 public:
  EngramHashing(const ::maxtext::Config& c, std::vector<std::int32_t> lookup, std::int64_t compressed_size,
                std::int32_t pad_token)
      : lookup_(std::move(lookup)),
        map_(engram_hash_spec(c, compressed_size, checked_pad(lookup_, compressed_size, pad_token))) {
    for (std::size_t i = 0; i < lookup_.size(); ++i) {
      MAXTEXT_CHECK(lookup_[i] >= 0 && lookup_[i] < compressed_size, ConfigError, "[engram] compressed-token table: "
                    "token ", i, " maps to ", lookup_[i], ", outside the ", compressed_size, " compressed ids");
    }
  }

  const NgramHashMapping& mapping() const { return map_; }
  const std::vector<std::int32_t>& lookup() const { return lookup_; }
  /// CompressedTokenizer.__call__: the canonical id of a token (negative ids, padding, stay as they are).
  std::int32_t compress(std::int32_t id) const {
    if (id < 0) return id;
    MAXTEXT_CHECK(static_cast<std::size_t>(id) < lookup_.size(), ArgumentError, "[engram] token ", id,
                  " is beyond the compressed-token table of ", lookup_.size(), " tokens (the tokenizer's vocabulary)");
    return lookup_[static_cast<std::size_t>(id)];
  }

  /// Hash indices [B*T, total_heads] of Engram layer `layer` for one step's tokens [B*T] (host), continuing each row
  /// from `history` (B * (N-1) compressed ids, reset to pads for a row starting at 0) and updating it with the row's
  /// valid tokens.
  std::vector<std::int32_t> step_hashes(std::int64_t layer, const StepInfo& st, std::span<const std::int32_t> tokens,
                                        std::vector<std::int32_t>& history) const {
    const std::int64_t Bn = st.batch, T = st.length, H = map_.total_heads();
    const auto N1 = static_cast<std::size_t>(map_.spec().max_ngram_size - 1);
    MAXTEXT_CHECK(static_cast<std::int64_t>(tokens.size()) == Bn * T, ArgumentError, "[engram] ", tokens.size(),
                  " tokens for a step of ", Bn, " x ", T);
    if (history.size() != static_cast<std::size_t>(Bn) * N1) history.assign(static_cast<std::size_t>(Bn) * N1, map_.spec().pad_id);
    std::vector<std::int32_t> out(static_cast<std::size_t>(Bn * T * H));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(T)), joined;
    for (std::int64_t b = 0; b < Bn; ++b) {
      const auto ub = static_cast<std::size_t>(b);
      std::int32_t* hist = history.data() + ub * N1;
      if (st.start[ub] == 0) std::fill(hist, hist + N1, map_.spec().pad_id);
      for (std::int64_t t = 0; t < T; ++t) ids[static_cast<std::size_t>(t)] = compress(tokens[static_cast<std::size_t>(b * T + t)]);
      map_.hash_row(layer, std::span<const std::int32_t>(hist, N1), ids, out.data() + b * T * H);
      const auto n = static_cast<std::size_t>(st.valid.empty() ? T : st.valid[ub]);
      joined.assign(hist, hist + N1);
      joined.insert(joined.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
      std::copy(joined.end() - static_cast<std::ptrdiff_t>(N1), joined.end(), hist);
    }
    return out;
  }

 private:
  static std::int32_t checked_pad(const std::vector<std::int32_t>& lookup, std::int64_t compressed_size,
                                  std::int32_t pad_token) {
    MAXTEXT_CHECK(!lookup.empty() && compressed_size >= 1, ConfigError, "[engram] the compressed-token table is empty");
    MAXTEXT_CHECK(pad_token >= 0 && static_cast<std::size_t>(pad_token) < lookup.size(), ConfigError, "[engram] pad "
                  "token ", pad_token, " is outside the compressed-token table of ", lookup.size(), " tokens (MaxText "
                  "requires the tokenizer's pad_token_id)");
    return lookup[static_cast<std::size_t>(pad_token)];
  }
  std::vector<std::int32_t> lookup_;
  NgramHashMapping map_;
};

/// MaxText Engram (layers/engram.py): n-gram memory retrieved by hash, gated by the hidden state and smoothed by a
/// dilated causal convolution (formulas at the top of this file). Parameters, as MaxText names them:
/// multi_head_embedding.embedding.embedding [sum(vocab_sizes), Dh], key_proj.{kernel [Ht*Dh, G, D], bias [G, D]},
/// k_norm.scale / q_norm.scale [G, D], value_proj.{kernel [Ht*Dh, D], bias [D]}, short_conv.norm.scale [G, D],
/// short_conv.conv.kernel [K, 1, G*D].
template <TensorPolicy P>
class Engram {
 public:
  using A = typename P::act_t;
  using W = typename P::weight_t;
  struct Config {
    std::int64_t emb_dim = 0;                ///< D
    std::int64_t streams = 1;                ///< G: mhc_expansion_rate
    std::int64_t head_dim = 0;               ///< engram_head_dim
    std::int64_t max_ngram_size = 3;         ///< engram_max_ngram_size: the orders 2..N, and the conv's dilation
    std::int64_t kernel_size = 4;            ///< engram_kernel_size
    std::vector<std::int32_t> vocab_sizes;   ///< NgramHashMapping::vocab_sizes(layer): one table size per head
    float epsilon = 1e-6f;                   ///< normalization_layer_epsilon
  };
  struct Params {
    typename Embed<P>::Params multi_head_embedding;
    typename DenseGeneral<P>::Params key_proj, value_proj;
    Tensor<A, 1> k_norm, q_norm, conv_norm;  ///< [G, D] each, stream-major
    Tensor<A, 1> conv;                       ///< short_conv.conv.kernel [K, 1, G*D], flat (tap i of channel c at i*G*D + c)
  };

  Engram() = default;
  /// Engram layer `layer` of a config (engram_* keys; G = mhc_expansion_rate).
  static Config config_of(const ::maxtext::Config& c, std::int64_t layer) {
    const auto sizes = NgramHashMapping::table_sizes(c.engram_vocab_bases(), c.engram_max_ngram_size, c.engram_num_heads,
                                                     c.engram_layers());
    const auto it = sizes.find(layer);
    MAXTEXT_CHECK(it != sizes.end(), ArgumentError, "[Engram] layer ", layer, " is not in engram_layers ", c.engram_layers());
    return Config{c.emb_dim, c.mhc_expansion_rate, c.engram_head_dim, c.engram_max_ngram_size, c.engram_kernel_size,
                  it->second, static_cast<float>(c.normalization_layer_epsilon)};
  }
  explicit Engram(Config cfg) : cfg_(std::move(cfg)) {
    const Config& c = cfg_;
    MAXTEXT_CHECK(c.emb_dim > 0 && c.streams >= 1 && c.head_dim > 0, ConfigError, "[Engram] emb_dim, the streams "
                  "(mhc_expansion_rate) and engram_head_dim must be positive, found ", c.emb_dim, ", ", c.streams,
                  " and ", c.head_dim);
    MAXTEXT_CHECK(c.max_ngram_size >= 2 && c.kernel_size >= 1, ConfigError, "[Engram] engram_max_ngram_size must be "
                  ">= 2 and engram_kernel_size >= 1, found ", c.max_ngram_size, " and ", c.kernel_size);
    MAXTEXT_CHECK(!c.vocab_sizes.empty() && c.vocab_sizes.size() % static_cast<std::size_t>(c.max_ngram_size - 1) == 0,
                  ConfigError, "[Engram] expected one table size per head of each order 2..", c.max_ngram_size,
                  ", found ", c.vocab_sizes.size(), " sizes");
    offsets_.reserve(c.vocab_sizes.size());
    std::int64_t total = 0;
    for (const std::int32_t v : c.vocab_sizes) {
      MAXTEXT_CHECK(v >= 1, ConfigError, "[Engram] table sizes must be positive, found ", v);
      offsets_.push_back(total);
      total += v;
    }
    table_rows_ = total;
    embed_ = Embed<P>({table_rows_, c.head_dim});
    const std::int64_t De = engram_dim();
    key_proj_ = DenseGeneral<P>({{De}, {c.streams, c.emb_dim}, true, Init::normal});
    value_proj_ = DenseGeneral<P>({{De}, {c.emb_dim}, true, Init::normal});
  }

  const Config& config() const { return cfg_; }
  /// Hash heads per position (all orders).
  std::int64_t heads() const { return static_cast<std::int64_t>(cfg_.vocab_sizes.size()); }
  /// D_en: the width of the retrieved memory, heads() * head_dim.
  std::int64_t engram_dim() const { return heads() * cfg_.head_dim; }
  /// Inputs one output of the dilated kernel spans: (K - 1) * N + 1.
  std::int64_t conv_taps() const { return (cfg_.kernel_size - 1) * cfg_.max_ngram_size + 1; }
  /// Per sequence: the conv state, the last (K - 1) * N conv inputs of G*D channels (f32).
  StateSpec state_spec() const { return {(conv_taps() - 1) * cfg_.streams * cfg_.emb_dim}; }

  template <class V>
  void visit(V& v, Params& p) const {
    const std::int64_t G = cfg_.streams, D = cfg_.emb_dim;
    {
      Scope<V> s(v, "multi_head_embedding");  // MultiHeadEmbedding holds an Embed named `embedding`
      visit_child(v, "embedding", embed_, p.multi_head_embedding);
    }
    visit_child(v, "key_proj", key_proj_, p.key_proj);
    {
      Scope<V> s(v, "k_norm");
      v.vector("scale", p.k_norm, {{G, D}, Init::ones});
    }
    {
      Scope<V> s(v, "q_norm");
      v.vector("scale", p.q_norm, {{G, D}, Init::ones});
    }
    visit_child(v, "value_proj", value_proj_, p.value_proj);
    Scope<V> sc(v, "short_conv");
    {
      Scope<V> s(v, "norm");
      v.vector("scale", p.conv_norm, {{G, D}, Init::ones});
    }
    Scope<V> s(v, "conv");
    v.vector("kernel", p.conv, {{cfg_.kernel_size, 1, G * D}, Init::zeros});  // engram.py: zeros, an identity start
  }

  /// h [M, G*D] (already through the caller's engram_layer_norm; M = ctx.step.tokens()) and hash indices
  /// [M, heads()] on the host (NgramHashMapping::hash_row of the layer) -> out [M, G*D] (out must not alias h).
  /// Continues and updates the conv state `cache.states[state]` of each sequence, as the Gated DeltaNet layers do.
  void forward(const Context<P>& ctx, const Params& p, View<const A, 2> h, std::span<const std::int32_t> hash_ids,
               CacheFor<P>& cache, View<A, 2> out, std::size_t state = 0) const {
    const auto& st = ctx.step;
    const std::int64_t M = h.dim(0), G = cfg_.streams, D = cfg_.emb_dim, C = G * D, Ht = heads(), Bn = st.batch;
    MAXTEXT_CHECK(h.dim(1) == C && out.dim(0) == M && out.dim(1) == C && M == st.tokens(), ShapeError, "[Engram] ", M,
                  " rows of ", h.dim(1), " features for a step of ", Bn, " x ", st.length, " tokens of ", G, " x ", D);
    MAXTEXT_CHECK(static_cast<std::int64_t>(hash_ids.size()) == M * Ht, ShapeError, "[Engram] expected ", M, " x ", Ht,
                  " hash indices, found ", hash_ids.size());
    MAXTEXT_CHECK(cache.states.size() > state && cache.states[state].dim(0) == Bn &&
                      cache.states[state].dim(1) == (conv_taps() - 1) * C &&
                      static_cast<std::int64_t>(cache.state_tokens.size()) == Bn,
                  ShapeError, "[Engram] the cache was made for another layer: expected a conv state of ",
                  (conv_taps() - 1) * C, " floats per sequence");
    MAXTEXT_CHECK(st.segment_ids.empty(), UnsupportedError, "[Engram] segment ids (packed or padded sequences) are not "
                  "supported by the Engram convolution; right padding goes through row lengths");
    for (std::int64_t b = 0; b < Bn; ++b) {
      const std::int32_t s0 = st.start[static_cast<std::size_t>(b)];
      MAXTEXT_CHECK(s0 == 0 || cache.state_tokens[static_cast<std::size_t>(b)] == s0, ArgumentError, "[Engram] row ", b,
                    " continues at cache length ", s0, " but its conv state follows ",
                    cache.state_tokens[static_cast<std::size_t>(b)], " tokens (restart the row at length 0)");
    }
    ScratchScope scope(ctx.scratch);
    // 1. the n-gram memory: each head's index shifted to its rows of the one table
    std::vector<std::int32_t> rows(hash_ids.size());
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t j = 0; j < Ht; ++j) {
        const std::int32_t i = hash_ids[static_cast<std::size_t>(m * Ht + j)];
        MAXTEXT_CHECK(i >= 0 && i < cfg_.vocab_sizes[static_cast<std::size_t>(j)], ArgumentError, "[Engram] hash index ",
                      i, " of head ", j, " (token ", m, ") is outside its table of ", cfg_.vocab_sizes[static_cast<std::size_t>(j)]);
        rows[static_cast<std::size_t>(m * Ht + j)] = static_cast<std::int32_t>(offsets_[static_cast<std::size_t>(j)] + i);
      }
    }
    View<std::int32_t, 1> rows_d = ctx.scratch.template alloc<std::int32_t, 1>({M * Ht});
    ctx.be.copy(rows_d.data(), rows.data(), rows.size() * sizeof(std::int32_t), CopyKind::host_to_device);
    View<A, 2> e = ctx.scratch.template alloc<A, 2>({M, engram_dim()});
    embed_.forward(ctx, p.multi_head_embedding, View<const std::int32_t, 1>(rows_d),
                   View<A, 2>(e.data(), {M * Ht, cfg_.head_dim}));
    // 2-4. key and query, normalised per stream
    const auto stream = [&](auto v, std::int64_t g) {
      using T = std::remove_pointer_t<decltype(v.data())>;
      return View<T, 2>(v.data() + g * D, {M, D}, {v.stride(0), 1});
    };
    const auto scale = [&](const Tensor<A, 1>& t, std::int64_t g) { return View<const A, 1>(t.cview().data() + g * D, {D}); };
    View<A, 2> k = ctx.scratch.template alloc<A, 2>({M, C});
    key_proj_.forward(ctx, p.key_proj, View<const A, 2>(e), k);
    View<A, 2> q = ctx.scratch.template alloc<A, 2>({M, C});
    for (std::int64_t g = 0; g < G; ++g) {
      ctx.be.rms_norm(View<const A, 2>(stream(k, g)), scale(p.k_norm, g), cfg_.epsilon, 0.0f, stream(k, g));
      ctx.be.rms_norm(stream(h, g), scale(p.q_norm, g), cfg_.epsilon, 0.0f, stream(q, g));
    }
    // 5-7. the gate and the gated value
    View<A, 2> v = ctx.scratch.template alloc<A, 2>({M, D});
    value_proj_.forward(ctx, p.value_proj, View<const A, 2>(e), v);
    ctx.be.engram_gate(View<const A, 2>(q), View<const A, 2>(k), View<const A, 2>(v), out);
    // 8. the short convolution (q and k are free again: q takes the normalised input, k the conv output)
    for (std::int64_t g = 0; g < G; ++g) {
      ctx.be.rms_norm(View<const A, 2>(stream(out, g)), scale(p.conv_norm, g), cfg_.epsilon, 0.0f, stream(q, g));
    }
    ctx.be.causal_conv1d(View<const A, 2>(q), p.conv.cview(), st.q_start, st.valid_len, cache.states[state].view(), k,
                         cfg_.max_ngram_size);
    ctx.be.add(View<const A, 2>(out), View<const A, 2>(k), out);
    for (std::int64_t b = 0; b < Bn; ++b) {
      const auto i = static_cast<std::size_t>(b);
      cache.state_tokens[i] = st.start[i] + (st.valid.empty() ? static_cast<std::int32_t>(st.length) : st.valid[i]);
    }
  }

 private:
  Config cfg_;
  std::vector<std::int64_t> offsets_;
  std::int64_t table_rows_ = 0;
  Embed<P> embed_;
  DenseGeneral<P> key_proj_, value_proj_;
};

}  // namespace maxtext::layers
