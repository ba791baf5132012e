#!/usr/bin/env python3
"""PyTorch float64 re-statement of MaxText's Engram module (layers/engram.py Engram, MultiHeadEmbedding and
ShortConv; MaxText commit e591f30 read), for tests/layers/test_engram.cpp.

Written from engram.py's __call__ methods, step by step:
  1. embeddings = table[hash_ids + offsets]            one table, each head's rows after the previous head's
  2. key = key_proj(embeddings)                        DenseGeneral [Ht*Dh] -> [G, D], with bias
  3. key = RMSNorm_k,g(key)                            one RMSNorm per stream (nnx.vmap over G)
  4. query = RMSNorm_q,g(hidden)
  5. gate = sigmoid(sqrt(max(|q.k / sqrt D|, 1e-6)) * sign(q.k))
  6. value = value_proj(embeddings)                    DenseGeneral [Ht*Dh] -> [D], with bias
  7. gated = gate[..., None] * value[:, :, None, :]
  8. out = gated + silu(conv(RMSNorm_c,g(gated)))      nnx.Conv: depthwise (feature_group_count = G*D), CAUSAL
                                                       padding, kernel_dilation = max_ngram_size, no bias
The convolution is torch's conv1d with the same left padding ((K-1) * dilation zeros) and groups = channels; flax's
kernel [K, 1, C] is torch's weight [C, 1, K]. The hash indices are random in each head's range: the hashing itself
is checked against NumPy by engram_reference.py.

Writes tests/fixtures/engram_module_<case>/: weights.safetensors (MaxText names under the module), h.npy
[B, S, G*D], hash_ids.npy [B, S, Ht] (int32), out.npy [B, S, G*D] (float64), meta.json.
Run: /usr/bin/python3 tests/reference/engram_module_reference.py
"""
import numpy as np
import torch

from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64

CASES = [
    # two mHC streams, 3-grams (dilation 3), kernel 4: the conv reaches 9 positions back, S = 13 goes past it
    dict(name="engram_module_g2", B=2, S=13, G=2, D=16, Dh=4, N=3, H=2, K=4, sizes=[11, 13, 17, 19], eps=1e-6, seed=1),
    # one stream, 2-grams (dilation 2), kernel 3, three heads per order
    dict(name="engram_module_g1", B=3, S=7, G=1, D=24, Dh=8, N=2, H=3, K=3, sizes=[7, 5, 31], eps=1e-5, seed=2),
]


def rms(x, scale, eps):
  return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * scale


def engram(w, h, ids, c):
  B, S, G, D, Dh, N, K = c["B"], c["S"], c["G"], c["D"], c["Dh"], c["N"], c["K"]
  offsets = torch.tensor(np.cumsum([0] + c["sizes"][:-1]), dtype=torch.int64)
  e = t64(w["multi_head_embedding.embedding.embedding"])[torch.from_numpy(ids.astype(np.int64)) + offsets]
  e = e.reshape(B, S, -1)
  De = e.shape[-1]
  key = e @ t64(w["key_proj.kernel"]).reshape(De, G * D) + t64(w["key_proj.bias"]).reshape(G * D)
  key = rms(key.reshape(B, S, G, D), t64(w["k_norm.scale"]), c["eps"])
  query = rms(t64(h).reshape(B, S, G, D), t64(w["q_norm.scale"]), c["eps"])
  gate = (query * key).sum(-1) / np.sqrt(D)
  gate = torch.sqrt(torch.clamp(gate.abs(), min=1e-6)) * torch.sign(gate)
  gate = torch.sigmoid(gate)
  value = e @ t64(w["value_proj.kernel"]) + t64(w["value_proj.bias"])
  gated = gate[..., None] * value[:, :, None, :]
  xn = rms(gated, t64(w["short_conv.norm.scale"]), c["eps"]).reshape(B, S, G * D)
  kernel = t64(w["short_conv.conv.kernel"])  # [K, 1, C]
  weight = kernel.permute(2, 1, 0)  # [C, 1, K]
  padded = torch.nn.functional.pad(xn.transpose(1, 2), ((K - 1) * N, 0))
  conv = torch.nn.functional.conv1d(padded, weight, dilation=N, groups=G * D).transpose(1, 2)
  return gated.reshape(B, S, G * D) + torch.nn.functional.silu(conv)


def engram_weights(g, G, D, Dh, sizes, K, norm_spread, conv_scale):
    """Random parameters of one Engram module (G streams of D, heads of Dh over tables of `sizes` rows, kernel K),
    under its own names; the norm scales are 1 +- norm_spread."""
    De = len(sizes) * Dh
    return {
        "multi_head_embedding.embedding.embedding": f32(g, (sum(sizes), Dh)),
        "key_proj.kernel": f32(g, (De, G, D), 1.0 / np.sqrt(De)),
        "key_proj.bias": f32(g, (G, D), 0.1),
        "k_norm.scale": f32(g, (G, D), norm_spread, 1.0),
        "q_norm.scale": f32(g, (G, D), norm_spread, 1.0),
        "value_proj.kernel": f32(g, (De, D), 1.0 / np.sqrt(De)),
        "value_proj.bias": f32(g, (D,), 0.1),
        "short_conv.norm.scale": f32(g, (G, D), norm_spread, 1.0),
        # engram.py initialises the kernel with zeros; random taps so that the convolution is exercised
        "short_conv.conv.kernel": f32(g, (K, 1, G * D), conv_scale),
    }


def main():
  for c in CASES:
    g = rng(c["seed"])
    B, S, G, D, Dh, N, H, K = c["B"], c["S"], c["G"], c["D"], c["Dh"], c["N"], c["H"], c["K"]
    Ht = (N - 1) * H
    assert len(c["sizes"]) == Ht
    De = Ht * Dh
    w = engram_weights(g, G, D, Dh, c["sizes"], K, norm_spread=0.2, conv_scale=0.5)
    h = f32(g, (B, S, G * D))
    ids = np.stack([g.integers(0, s, size=(B, S)) for s in c["sizes"]], axis=-1).astype(np.int32)
    out = engram(w, h, ids, c).numpy()
    d = case_dir(c["name"])
    save_safetensors(d + "/weights.safetensors", w)
    save_npy(d, "h", h)
    save_npy(d, "hash_ids", ids)
    save_npy(d, "out", out)
    save_meta(d, dict(maxtext_commit="e591f30", emb_dim=D, streams=G, head_dim=Dh, max_ngram_size=N, heads_per_order=H,
                      kernel_size=K, vocab_sizes=c["sizes"], epsilon=c["eps"], torch=torch.__version__))
    print("wrote", d)


if __name__ == "__main__":
  main()
