#!/usr/bin/env python3
"""NumPy re-statement of MaxText's Engram n-gram hashing (layers/engram.py NgramHashMapping, MaxText commit e591f30
read), run on random token streams; writes tests/fixtures/engram_hash/cases.json for tests/layers/test_engram.cpp.

The multipliers come from NumPy's own `np.random.default_rng(...).integers(..., dtype=np.int32)` and the table sizes
from `sympy.isprime`, as engram.py draws them, so the C++ port (core/numpy_random.hpp, layers/engram.hpp) is checked
against NumPy's generator itself. The hash is computed with NumPy int32 arrays: products wrap as jnp's int32 products
do, and `%` is the floor modulo of jnp. Ids include -1 (padding) and arbitrary int32 values, so that wrapping and the
modulo of negative hashes are exercised, not only the range a real compressed vocabulary produces.

Run: /usr/bin/python3 tests/reference/engram_reference.py
"""
import json
import os

import numpy as np
import sympy

LAYER_PRIME_OFFSET = 10007  # engram.py


def multipliers(seed, layer_ids, max_ngram, vocab):
  m_max = int(np.iinfo(np.int32).max // vocab)
  half_bound = max(1, m_max // 2)
  out = {}
  for layer in layer_ids:
    g = np.random.default_rng(int(seed + LAYER_PRIME_OFFSET * int(layer)))
    r = g.integers(low=0, high=half_bound, size=(max_ngram,), dtype=np.int32)
    out[layer] = r * 2 + 1
  return out


def prime_sizes(bases, layer_ids, max_ngram, heads):
  seen = set()
  out = {}
  for layer in layer_ids:
    per_order = []
    for n in range(2, max_ngram + 1):
      start = bases[n - 2] - 1
      sizes = []
      for _ in range(heads):
        c = start + 1
        while c in seen or not sympy.isprime(c):
          c += 1
        seen.add(c)
        sizes.append(c)
        start = c
      per_order.append(sizes)
    out[layer] = per_order
  return out


def hashes(ids, mult, sizes, max_ngram, pad):
  x = ids.astype(np.int32)
  b, s = x.shape
  shifted = [x] + [np.concatenate([np.full((b, k), pad, np.int32), x[:, : s - k]], axis=1) for k in range(1, max_ngram)]
  h = shifted[0] * mult[0]
  parts = []
  for n in range(2, max_ngram + 1):
    h = np.bitwise_xor(h, shifted[n - 1] * mult[n - 1])
    mods = np.array(sizes[n - 2], dtype=np.int32)
    parts.append(h[..., None] % mods)
  return np.concatenate(parts, axis=2).astype(np.int32)


CASES = [
    # engram_vs_reference_test.py's shape: bases 5 * 129280, 3-grams, 8 heads, two layers.
    dict(name="deepseek_like", bases=[646400, 646400], max_ngram=3, heads=8, layers=[1, 4], vocab=129280, pad=2,
         seed=0, ids="vocab"),
    # small vocabulary: multipliers up to ~2^28 on arbitrary int32 ids, so the products wrap; 4-grams; three layers
    dict(name="wrapping", bases=[50, 70, 10], max_ngram=4, heads=3, layers=[0, 2, 5], vocab=7, pad=0, seed=123,
         ids="int32"),
    # a vocabulary of 2^31 - 1: half_bound 1, every multiplier 1
    dict(name="unit_multipliers", bases=[2, 3], max_ngram=3, heads=2, layers=[3], vocab=2**31 - 1, pad=5, seed=7,
         ids="vocab"),
    # a seed of two 32-bit words (SeedSequence's multi-word entropy), 2-grams only
    dict(name="wide_seed", bases=[1000], max_ngram=2, heads=5, layers=[0, 1], vocab=50000, pad=1, seed=2**40 + 5,
         ids="vocab"),
]


def main():
  rng = np.random.default_rng(20261125)
  cases = []
  for c in CASES:
    B, S = 3, 37
    if c["ids"] == "int32":
      ids = rng.integers(-2**31, 2**31, size=(B, S), dtype=np.int64).astype(np.int32)
    else:
      ids = rng.integers(0, min(c["vocab"], 2**31 - 1), size=(B, S), dtype=np.int64).astype(np.int32)
    ids[0, 5] = -1  # padding ids stay negative after CompressedTokenizer
    mult = multipliers(c["seed"], c["layers"], c["max_ngram"], c["vocab"])
    sizes = prime_sizes(c["bases"], c["layers"], c["max_ngram"], c["heads"])
    out = dict(c)
    out["ids"] = ids.tolist()
    out["layer_data"] = [
        dict(layer=layer, multipliers=mult[layer].tolist(), vocab_sizes=[v for o in sizes[layer] for v in o],
             hashes=hashes(ids, mult[layer], sizes[layer], c["max_ngram"], c["pad"]).tolist())
        for layer in c["layers"]
    ]
    cases.append(out)
  # NumPy's generator on its own: SeedSequence pools, raw PCG64 outputs, and int32 integers over several ranges
  # (1: NumPy's range-0 case; 2^31 - 1; a negative low) drawn from one generator in turn, so the buffered half of
  # next_uint32 carries over between calls.
  generators = []
  for seed in [0, 1, 10007, 2**32, 2**40 + 5, 2**63 + 3]:
    raw = np.random.default_rng(seed).bit_generator.random_raw(8)
    g = np.random.default_rng(seed)
    draws = []
    for low, high, n in [(0, 1000, 5), (0, 1, 3), (0, 2**31 - 1, 4), (-5, 7, 6), (0, 3, 7), (-2**31, 2**31 - 1, 3)]:
      draws.append(dict(low=low, high=high, values=g.integers(low, high, size=(n,), dtype=np.int32).tolist()))
    generators.append(dict(seed=str(seed), pool=[int(v) for v in np.random.SeedSequence(seed).pool],
                           raw=[str(int(v)) for v in raw], draws=draws))
  meta = dict(numpy=np.__version__, sympy=sympy.__version__, maxtext_commit="e591f30", cases=cases,
              generators=generators)
  here = os.path.dirname(os.path.abspath(__file__))
  path = os.path.join(here, "..", "fixtures", "engram_hash", "cases.json")
  with open(path, "w") as f:
    json.dump(meta, f, separators=(",", ":"))
  print("wrote", os.path.normpath(path))


if __name__ == "__main__":
  main()
