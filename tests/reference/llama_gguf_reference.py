"""Reference logits for llama-2-tiny-random.gguf (shared/models): an independent float64 Llama forward in numpy over
the GGUF's own tensors, read with gguf_min.py. It follows llama.cpp's `llama` graph: RoPE on adjacent lane pairs
(2i, 2i+1) of the (llama.cpp-permuted) q/k rows, base 10000, RMSNorm eps from the metadata, SwiGLU, untied output.
The C++ side maps the same file to MaxText's half-split layout, so agreement checks that mapping too.

Writes tests/fixtures/llama2_tiny_random/: tokens.npy (llama.cpp's ids for the prompt, from tokenizer_examples.json),
cols.npy (every 61st vocabulary column), logits_cols.npy [T, len(cols)], logsumexp.npy [T] and argmax.npy [T] over
the full vocabulary (so every column is checked, at KB size), meta.json; and the same three for an fp16 KV cache
(*_kv_f16.npy: every key after RoPE and every value rounded to float32 and then to float16, as a float32 model
writes them into an fp16 cache, before any position attends to them; the rest in float64).
Also writes tests/fixtures/llamacpp/llama/logits_f64_kv_f16.npy: the same float64 forward with the fp16 cache's
rounding over the llama.cpp peer's llama model (model.gguf there, F32) and its teacher-forced sequence (tokens.npy,
then greedy.npy but the last), [T + STEPS - 1, V] as that directory's logits.npy (llama.cpp's, with an F32 cache).
At that model's size the rounding moves the logits by about 1e-2, far above the peer test's tolerance.
Usage: /usr/bin/python3 tests/reference/llama_gguf_reference.py [path/to/shared/models]
"""
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import case_dir, save_meta, save_npy  # noqa: E402
from gguf_min import read_gguf  # noqa: E402


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_adjacent(x, pos, base):
    # x [T, heads, d]; pairs (2i, 2i+1) rotated by pos * base^(-2i/d)
    d = x.shape[-1]
    i = np.arange(d // 2, dtype=np.float64)
    ang = pos[:, None] * base ** (-2.0 * i / d)  # [T, d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = a * s + b * c
    return y


def forward(meta, t, tokens, kv_f16=False):
    arch = meta["general.architecture"]
    D = meta[arch + ".embedding_length"]
    N = meta[arch + ".attention.head_count"]
    K = meta.get(arch + ".attention.head_count_kv", N)
    L = meta[arch + ".block_count"]
    eps = float(np.float32(meta[arch + ".attention.layer_norm_rms_epsilon"]))
    base = meta.get(arch + ".rope.freq_base", 10000.0)
    H = D // N
    f = lambda n: t[n].astype(np.float64)  # noqa: E731
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = f("token_embd.weight")[tokens]
    for l in range(L):
        p = "blk.%d." % l
        h = rms(x, f(p + "attn_norm.weight"), eps)
        q = (h @ f(p + "attn_q.weight").T).reshape(T, N, H)
        k = (h @ f(p + "attn_k.weight").T).reshape(T, K, H)
        v = (h @ f(p + "attn_v.weight").T).reshape(T, K, H)
        q, k = rope_adjacent(q, pos, base), rope_adjacent(k, pos, base)
        if kv_f16:  # the cache's rounding: float32 activations written into fp16 buffers
            k = k.astype(np.float32).astype(np.float16).astype(np.float64)
            v = v.astype(np.float32).astype(np.float16).astype(np.float64)
        o = np.zeros((T, N, H))
        for n in range(N):
            kk = n // (N // K)
            s = q[:, n, :] @ k[:, kk, :].T / np.sqrt(H)
            s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            o[:, n, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, kk, :]
        x = x + o.reshape(T, N * H) @ f(p + "attn_output.weight").T
        h = rms(x, f(p + "ffn_norm.weight"), eps)
        g = h @ f(p + "ffn_gate.weight").T
        u = h @ f(p + "ffn_up.weight").T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ f(p + "ffn_down.weight").T
    x = rms(x, f("output_norm.weight"), eps)
    head = f("output.weight") if "output.weight" in t else f("token_embd.weight")
    return x @ head.T


def main():
    models = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "models")
    path = os.path.join(models, "llama-2-tiny-random", "llama-2-tiny-random.gguf")
    meta, t = read_gguf(path)
    with open(os.path.join(models, "llama-2-tiny-random", "tokenizer_examples.json")) as fh:
        examples = json.load(fh)
    tokens = np.array(examples[0]["ids"], dtype=np.int32)
    logits = forward(meta, t, tokens)
    cols = np.arange(0, logits.shape[1], 61, dtype=np.int32)
    d = case_dir("llama2_tiny_random")
    save_npy(d, "tokens", tokens)
    save_npy(d, "cols", cols)

    def save_logits(suffix, lg):
        m = lg.max(axis=1)
        save_npy(d, "logits_cols" + suffix, lg[:, cols])
        save_npy(d, "logsumexp" + suffix, m + np.log(np.exp(lg - m[:, None]).sum(axis=1)))
        save_npy(d, "argmax" + suffix, lg.argmax(axis=1).astype(np.int32))

    save_logits("", logits)
    logits_kv = forward(meta, t, tokens, kv_f16=True)
    save_logits("_kv_f16", logits_kv)
    print("fp16 KV cache: max |logit - exact cache's| %.3g" % np.abs(logits_kv - logits).max())
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    save_meta(d, {"model": "llama-2-tiny-random.gguf", "sha256": digest, "prompt": examples[0]["prompt"],
                  "max_abs_logit": float(np.abs(logits).max()), "dtype": "float64"})
    print("wrote", d, logits.shape, "max |logit|", np.abs(logits).max())

    # The llama.cpp peer's llama model with an fp16 cache (test_llamacpp_peer).
    pd = case_dir(os.path.join("llamacpp", "llama"))
    pmeta, pt = read_gguf(os.path.join(pd, "model.gguf"))
    greedy = np.load(os.path.join(pd, "greedy.npy"))
    seq = np.concatenate([np.load(os.path.join(pd, "tokens.npy")), greedy[:-1]])
    exact, rounded = forward(pmeta, pt, seq), forward(pmeta, pt, seq, kv_f16=True)
    save_npy(pd, "logits_f64_kv_f16", rounded)
    print("wrote", pd, rounded.shape, "max |fp16 cache - exact cache| %.3g, max |exact - llama.cpp F32 cache| %.3g"
          % (np.abs(rounded - exact).max(), np.abs(exact - np.load(os.path.join(pd, "logits.npy"))).max()))


if __name__ == "__main__":
    main()
