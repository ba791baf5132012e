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
And tests/fixtures/llamacpp/llama/logits_f64_kv_int8.npy (float64, [P + STEPS - 1, V] = [47, 128]): the same model and
sequence with MaxText's int8 KV cache, kv_quant_dtype int8, kv_quant_axis "heads_and_dkv" (one scale per token over
all kv heads and head_dim of the key, resp. value, row), quantised by kv_quant_reference.quantize (KVQuant restated:
codes rint(f32(x * f32(127.5 / max|x|))) saturated to int8, bf16 stored scale, read back as code * bf16(scale / 127.5)).
Semantics, from MaxText e591f30 src/maxtext/inference/kvcache.py and src/maxtext/layers/attention_op.py:
  - prefill: the prompt's P = len(tokens.npy) tokens in one pass, attending (causally) to their keys / values as
    computed, unquantised, float64: kv_cache_prefill (kvcache.py 714-760) quantises key (after RoPE) and value into
    the prefill cache (740-754) but returns the unquantised key, value (760), which AttentionOp.__call__ attends to
    (attention_op.py 2781). Rows 0..P-1 therefore equal the unquantised float64 logits (checked: to ~1e-14, not
    bitwise, as BLAS sums over 16 rows rather than 47). Quantised keys / values are the float64 rows rounded to
    float32 first (quantize() takes float32 inputs, as a float32 model holds them).
  - then each further token alone (autoregressive): kv_cache_autoregressive (896-971) first writes its key / value
    quantised into the AR cache (update_ar_key_value, 762-869; quantize at 795-800), then returns the prefill and AR
    caches whole, read through get_cached_values (871-894: scale / MAX_INT8 at 880, a KVTensor dequantised by the
    AqtEinsum products; for int8 lhs_bits=None at 105, so the query is not quantised). The query attends to every
    cached position 0..t (its own included), dequantised. MaxText computes the prefill-cache and AR-cache parts
    separately and merges them (normalize_attention, attention_op.py 2730-2754, 2863): one softmax over both, as here.
Per-token scales make this a per-token function of each row, so the steps here are run literally one token at a time.
At that model's size the int8 cache moves the decode rows' logits by about 0.1 (logits within about [-7, 8.3]).
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
from kv_quant_reference import quantize  # noqa: E402  (MaxText's KVQuant, restated)


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


def forward_kv_quant(meta, t, tokens, prompt_len, dtype="int8", axis="heads_and_dkv"):
    """forward() with MaxText's quantised KV cache: a prefill of tokens[:prompt_len] (attention over the keys / values
    as computed), then one autoregressive step per remaining token (its key / value quantised into the cache first,
    then attention over every cached position, dequantised). Returns [len(tokens), V]: the prefill's rows, then one
    row per step."""
    arch = meta["general.architecture"]
    D = meta[arch + ".embedding_length"]
    N = meta[arch + ".attention.head_count"]
    K = meta.get(arch + ".attention.head_count_kv", N)
    L = meta[arch + ".block_count"]
    eps = float(np.float32(meta[arch + ".attention.layer_norm_rms_epsilon"]))
    base = meta.get(arch + ".rope.freq_base", 10000.0)
    H = D // N
    f = lambda n: t[n].astype(np.float64)  # noqa: E731
    head = f("output.weight") if "output.weight" in t else f("token_embd.weight")
    deq = lambda a: quantize(a.astype(np.float32), dtype, axis)[2]  # noqa: E731  (f32 as an f32 model holds it)
    cache = [[np.zeros((0, K, H)), np.zeros((0, K, H))] for _ in range(L)]  # per layer: dequantised keys, values

    def run(toks, pos0, prefill):
        T = len(toks)
        pos = np.arange(pos0, pos0 + T, dtype=np.float64)
        x = f("token_embd.weight")[toks]
        for l in range(L):
            p = "blk.%d." % l
            h = rms(x, f(p + "attn_norm.weight"), eps)
            q = (h @ f(p + "attn_q.weight").T).reshape(T, N, H)
            k = (h @ f(p + "attn_k.weight").T).reshape(T, K, H)
            v = (h @ f(p + "attn_v.weight").T).reshape(T, K, H)
            q, k = rope_adjacent(q, pos, base), rope_adjacent(k, pos, base)
            cache[l][0] = np.concatenate([cache[l][0], deq(k)])  # quantised into the cache (key after RoPE)
            cache[l][1] = np.concatenate([cache[l][1], deq(v)])
            if not prefill:  # autoregressive: attend over the whole cache, dequantised, this token's row included
                k, v = cache[l]
            S = len(k)
            visible = np.arange(S)[None, :] <= pos[:, None]  # prefill: causal; a step: every cached position
            o = np.zeros((T, N, H))
            for n in range(N):
                kk = n // (N // K)
                s = q[:, n, :] @ k[:, kk, :].T / np.sqrt(H)
                s = np.where(visible, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                o[:, n, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, kk, :]
            x = x + o.reshape(T, N * H) @ f(p + "attn_output.weight").T
            h = rms(x, f(p + "ffn_norm.weight"), eps)
            g = h @ f(p + "ffn_gate.weight").T
            u = h @ f(p + "ffn_up.weight").T
            x = x + (g / (1.0 + np.exp(-g)) * u) @ f(p + "ffn_down.weight").T
        return rms(x, f("output_norm.weight"), eps) @ head.T

    rows = [run(tokens[:prompt_len], 0, True)]
    rows += [run(tokens[i:i + 1], i, False) for i in range(prompt_len, len(tokens))]
    assert all(len(c[0]) == len(tokens) for c in cache)
    return np.concatenate(rows)


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

    # The same model and sequence with MaxText's int8 KV cache (one scale per token): prefill of the prompt, then steps.
    P = len(np.load(os.path.join(pd, "tokens.npy")))
    quant = forward_kv_quant(pmeta, pt, seq, P, "int8", "heads_and_dkv")
    assert quant.shape == exact.shape
    pre = np.abs(quant[:P] - exact[:P]).max()
    assert pre <= 1e-12 * np.abs(exact).max(), pre  # the prefill attends to unquantised keys / values
    save_npy(pd, "logits_f64_kv_int8", quant)
    dec = np.abs(quant[P:] - exact[P:])
    print("wrote", pd, quant.shape, quant.dtype, "int8 cache (heads_and_dkv): prefill rows 0..%d vs exact cache: "
          "max |diff| %.3g (%s); decode rows %d..%d: max |int8 - exact| %.3g (mean %.3g), argmax agrees %d/%d; "
          "exact logits range [%.3f, %.3f]"
          % (P - 1, pre, "bitwise equal" if np.array_equal(quant[:P], exact[:P]) else "not bitwise", P, len(seq) - 1,
             dec.max(), dec.mean(), (quant[P:].argmax(1) == exact[P:].argmax(1)).sum(), len(seq) - P,
             exact.min(), exact.max()))


if __name__ == "__main__":
    main()
