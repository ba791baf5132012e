#!/usr/bin/env python3
"""DeepSeek-V3-style models with Engram layers, re-stated in PyTorch float64 (MaxText commit e591f30 read:
models/deepseek.py engram_op and the layers' __call__, layers/engram.py, layers/decoders.py's DeepSeek loops:
unscanned, and scanned with Engram, _apply_interleaved_scanned_layers).

A layer listed in engram_layers first adds its Engram module to the residual stream, then runs as before:
  x = x + Engram(RMSNorm_engram(x), NgramHashMapping(tokens)[layer])       deepseek.py engram_op
  x = DeepSeek layer(x)                                                    with mHC: mhc_attention, mhc_mlp
The hashing is engram_reference.py's NumPy re-statement (multipliers from NumPy's generator, primes from sympy) on
the tokens mapped through a compressed-token table; the table here is random (many-to-one, ids numbered in
first-seen order as CompressedTokenizer numbers them), since a tiny random model has no tokenizer. The module is
engram_module_reference.py's, the layers deepseek_reference.py's and mhc_reference.py's.

Cases: deepseek_engram_mhc_model (mHC k = 2, Engram in layers 0 and 2, as MaxText runs Engram: with mHC streams), and
deepseek_engram_model (no mHC, Engram in layer 1: MaxText's Engram would reject the 3-D input; this library runs it
on the one stream, docs/numerics.md), and deepseek_engram_scan_model (5 layers, 2 dense, Engram in layer 3: a scanned
run of two dense layers, then single-layer runs around the Engram layer).
Writes tests/fixtures/<case>/: model.safetensors, model_scanned.safetensors (decoders.py's scanned layout with Engram:
scanned_with_engram), config.yml, tokens.npy, logits.npy, act_*.npy, engram_lookup.npy, meta.json. Run: /usr/bin/python3 tests/reference/deepseek_engram_reference.py
"""
import math

import numpy as np
import torch

from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors
from deepseek_reference import (MIN_MARGIN, deepseek_layer_weights, deepseek_settings, deepseek_yaml, prefixed,
                                rms_norm, sub, to64, write_yaml)
from engram_module_reference import engram as engram_module
from engram_module_reference import engram_weights as engram_module_weights
from engram_reference import hashes, multipliers, prime_sizes
from mhc_reference import mhc_weights, model_forward

ENGRAM = dict(N=3, H=2, Dh=4, K=4, bases=[23, 31], seed=5)


def compressed_table(g, V, C):
  raw = g.integers(0, C, size=V)
  ids, lookup = {}, []
  for r in raw:
    lookup.append(ids.setdefault(int(r), len(ids)))
  return np.array(lookup, dtype=np.int32), len(ids)


def engram_weights(g, c, G, sizes):
  w = {"engram_layer_norm.scale": f32(g, (c["D"],), 0.1, 1.0)}
  w.update(prefixed(engram_module_weights(g, G, c["D"], ENGRAM["Dh"], sizes, ENGRAM["K"], norm_spread=0.1,
                                          conv_scale=0.3), "engram."))
  return w


def scanned_with_engram(w, L, dense, engram_layers):
  """decoders.py's scanned DeepSeek stack with Engram (_apply_interleaved_scanned_layers): each Engram layer stays
  unscanned as decoder.{dense,moe}_layers_engram_{i}; each run of other layers [a, b] (global indices, split at the
  Engram layers and at the dense / MoE boundary) is one scan, decoder.{group}_{a}_{b}, its leaves stacked on
  param_scan_axis (1). Everything outside the layers unchanged."""
  def src(i):
    return f"decoder.dense_layers_{i}." if i < dense else f"decoder.moe_layers_{i - dense}."

  out = {kk: v for kk, v in w.items() if not kk.startswith(("decoder.dense_layers_", "decoder.moe_layers_"))}
  for group, lo, hi in (("dense_layers", 0, dense), ("moe_layers", dense, L)):
    i = lo
    while i < hi:
      leaves = [kk[len(src(i)):] for kk in w if kk.startswith(src(i))]
      if i in engram_layers:
        out.update({f"decoder.{group}_engram_{i}.{leaf}": w[src(i) + leaf] for leaf in leaves})
        i += 1
        continue
      j = min([e for e in engram_layers if e > i] + [hi])
      for leaf in leaves:
        out[f"decoder.{group}_{i}_{j - 1}.{leaf}"] = np.stack([w[src(t) + leaf] for t in range(i, j)], axis=1)
      i = j
  return out


def model_case(name, seed, k, L, dense, engram_layers):
  c = deepseek_settings(gate_scale=2.0, L=L, dense=dense)
  if k > 1:
    c.update(mhc_k=k, lite=False, sinkhorn=20)
  B, T, D = 2, 9, c["D"]
  N = ENGRAM["N"]
  names = [(f"decoder.dense_layers_{i}", False) for i in range(dense)]
  names += [(f"decoder.moe_layers_{j}", True) for j in range(L - dense)]
  for attempt in range(50):
    g = rng(seed + 1000 * attempt)
    lookup, cvocab = compressed_table(g, c["V"], 40)
    pad_token = 3
    pad = int(lookup[pad_token])
    mult = multipliers(ENGRAM["seed"], engram_layers, N, cvocab)
    sizes = prime_sizes(ENGRAM["bases"], engram_layers, N, ENGRAM["H"])
    flat = {i: [v for order in sizes[i] for v in order] for i in engram_layers}
    w = {"token_embedder.embedding": f32(g, (c["V"], D))}
    for i, (prefix, moe) in enumerate(names):
      lw = deepseek_layer_weights(g, c, moe)
      if k > 1:
        lw.update(prefixed(mhc_weights(g, c), "mhc_attention."))
        lw.update(prefixed(mhc_weights(g, c), "mhc_mlp."))
      if i in engram_layers:
        lw.update(engram_weights(g, c, k, flat[i]))
      w.update(prefixed(lw, prefix + "."))
    w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.1, 1.0)
    w["decoder.logits_dense.kernel"] = f32(g, (D, c["V"]), 1 / math.sqrt(D))
    tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)

    def engram_op(i, prefix, x, acts):  # deepseek.py engram_op: engram(engram_layer_norm(x)) added before attention
      if i not in engram_layers:
        return x
      lw = sub(w, prefix + ".")
      hid = hashes(lookup[tokens], mult[i], sizes[i], N, pad)
      xn = rms_norm(x, torch.from_numpy(lw["engram_layer_norm.scale"].astype(np.float64)), c["eps"])
      ce = dict(B=B, S=T, G=k, D=D, Dh=ENGRAM["Dh"], N=N, K=ENGRAM["K"], sizes=flat[i], eps=c["eps"])
      e = engram_module(sub(lw, "engram."), xn.reshape(B, T, k * D).numpy(), hid, ce)
      acts[prefix + ".engram"] = e
      return x + e.reshape(B, T, k, D)

    logits, acts, margins = model_forward(to64(w), tokens, c, names, k, engram_op)
    if not margins or min(margins) >= MIN_MARGIN:
      break
  d = case_dir(name)
  save_safetensors(f"{d}/model.safetensors", w)
  save_safetensors(f"{d}/model_scanned.safetensors", scanned_with_engram(w, L, dense, engram_layers))
  save_npy(d, "tokens", tokens)
  save_npy(d, "logits", logits.numpy())
  save_npy(d, "engram_lookup", lookup)
  for kk, v in acts.items():
    save_npy(d, "act_" + kk, v.numpy())
  extra = (f"engram_layers: [{', '.join(str(i) for i in engram_layers)}]\nengram_num_heads: {ENGRAM['H']}\n"
           f"engram_head_dim: {ENGRAM['Dh']}\nengram_vocab_bases: [{ENGRAM['bases'][0]}, {ENGRAM['bases'][1]}]\n"
           f"engram_max_ngram_size: {N}\nengram_kernel_size: {ENGRAM['K']}\nengram_seed: {ENGRAM['seed']}\n")
  if k > 1:
    extra += f"mhc_expansion_rate: {k}\nsinkhorn_iterations: 20\n"
  write_yaml(d, deepseek_yaml(c, extra))
  save_meta(d, {"what": f"{L}-layer DeepSeek-V3-style model with Engram in layers {engram_layers}"
                        f"{f', mHC k {k}' if k > 1 else ', no mHC'}, float64 from float32 weights",
                "maxtext_commit": "e591f30", "tokens": [B, T], "vocab": c["V"], "streams": k,
                "engram_layers": engram_layers, "compressed_vocab": cvocab, "pad_token": pad_token,
                "min_routing_margin": min(margins) if margins else None})
  print("wrote", d)


if __name__ == "__main__":
  torch.set_default_dtype(torch.float64)
  model_case("deepseek_engram_mhc_model", 71, k=2, L=3, dense=1, engram_layers=[0, 2])
  model_case("deepseek_engram_model", 81, k=1, L=3, dense=1, engram_layers=[1])
  model_case("deepseek_engram_scan_model", 91, k=1, L=5, dense=2, engram_layers=[3])
