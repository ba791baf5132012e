"""Why llama.cpp's Gemma logits differ from ours by ~1e-2 while the SiLU architectures agree to ~1e-5: a float64
re-statement of llama.cpp's gemma / gemma2 / gemma3 / gemma4 graphs (src/models/gemma*.cpp) run on the peer fixtures
(tests/fixtures/llamacpp/<arch>/), once with an exact tanh-GELU and once with ggml's CPU GELU, which rounds its
input to fp16 and reads an fp16 table (ggml-cpu/vec.h, GGML_GELU_FP16). The fp16 variant reproduces llama.cpp's
logits (to ~5e-4: fp16 rounding boundaries crossed by f32-vs-f64 pre-activations) while the exact one is off by
~1e-2; the exact one is what MaxText and the library compute, and is saved as logits_exact_gelu.npy in the fixture
for the library's f32-tolerance check. Prints the max differences.

Run: /usr/bin/python3 tests/reference/llamacpp_gemma_check.py [arch ...]   (numpy only)
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_min import read_gguf  # noqa: E402

FIX = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "llamacpp"


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * x * (1.0 + 0.044715 * x * x)))


def gelu_ggml_fp16(x):
    """ggml's f32 GELU on the CPU: fp16 input, fp16 table entry computed in f32; identity above 10, 0 below -10."""
    x16 = x.astype(np.float32).astype(np.float16).astype(np.float32)
    t = gelu_tanh(x16.astype(np.float32)).astype(np.float32).astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, t))


def bf16(x):
    """Round-to-nearest-even to bfloat16, as float32."""
    u = np.atleast_1d(np.asarray(x, dtype=np.float32)).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return r[0] if np.ndim(x) == 0 else r


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def rope_neox(x, pos, base):  # x [T, heads, H], pairs (i, i + H/2)
    H = x.shape[-1]
    inv = base ** (-np.arange(0, H, 2, dtype=np.float64) / H)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., : H // 2], x[..., H // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def attend(q, k, v, swa, window, cap=0.0):
    """Causal attention of q [T, N, H] over k, v [T, K, H] (K kv heads shared by N / K query heads each), the
    sliding window on `swa` layers, an optional tanh soft cap on the scores: [T, N * H]."""
    T, N, H = q.shape
    k = np.repeat(k, N // k.shape[1], axis=1)
    v = np.repeat(v, N // v.shape[1], axis=1)
    s = np.einsum("qnh,knh->nqk", q, k)
    if cap:
        s = np.tanh(s / cap) * cap
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = (ki <= qi) & (~swa | (qi - ki < window))
    s = np.where(allowed[None], s, -np.inf)
    pr = np.exp(s - s.max(axis=-1, keepdims=True))
    pr /= pr.sum(axis=-1, keepdims=True)
    return np.einsum("nqk,knh->qnh", pr, v).reshape(T, N * H)


def forward(arch, meta, t, tokens, gelu, emb_scale=None):
    p = arch + "."
    D = meta[p + "embedding_length"]
    L = meta[p + "block_count"]
    N = meta[p + "attention.head_count"]
    K = meta[p + "attention.head_count_kv"]
    H = meta[p + "attention.key_length"]
    eps = meta[p + "attention.layer_norm_rms_epsilon"]
    base = meta[p + "rope.freq_base"]
    base_swa = meta.get(p + "rope.freq_base_swa", 10000.0 if arch == "gemma3" else base)
    window = meta.get(p + "attention.sliding_window", 0)
    period = {"gemma": 0, "gemma2": 2, "gemma3": 6}[arch]
    attn_cap = meta.get(p + "attn_logit_softcapping", 50.0) if arch == "gemma2" else 0.0
    final_cap = meta.get(p + "final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0)
    g = lambda n: t[n].astype(np.float64)  # noqa: E731
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = g("token_embd.weight")[tokens] * (float(np.sqrt(np.float32(D))) if emb_scale is None else emb_scale)
    for il in range(L):
        b = f"blk.{il}."
        swa = period > 0 and il % period < period - 1
        h = rms(x, g(b + "attn_norm.weight"), eps)
        q = (h @ g(b + "attn_q.weight").T).reshape(T, N, H)
        k = (h @ g(b + "attn_k.weight").T).reshape(T, K, H)
        v = (h @ g(b + "attn_v.weight").T).reshape(T, K, H)
        if arch == "gemma3":
            q = rms(q, g(b + "attn_q_norm.weight"), eps)
            k = rms(k, g(b + "attn_k_norm.weight"), eps)
        q = rope_neox(q, pos, base_swa if swa else base) / np.sqrt(H)
        k = rope_neox(k, pos, base_swa if swa else base)
        o = attend(q, k, v, swa, window, attn_cap) @ g(b + "attn_output.weight").T
        if arch != "gemma":
            o = rms(o, g(b + "post_attention_norm.weight"), eps)
        x = x + o
        h = rms(x, g(b + "ffn_norm.weight"), eps)
        f = (gelu(h @ g(b + "ffn_gate.weight").T) * (h @ g(b + "ffn_up.weight").T)) @ g(b + "ffn_down.weight").T
        if arch != "gemma":
            f = rms(f, g(b + "post_ffw_norm.weight"), eps)
        x = x + f
    logits = rms(x, g("output_norm.weight"), eps) @ g("token_embd.weight").T
    if emb_scale is not None:
        # MaxText's tied head: the table as stored (times the folded scale), divided by sqrt(D) in f32.
        logits = logits * emb_scale / float(np.sqrt(np.float32(D)))
    if final_cap:
        logits = np.tanh(logits / final_cap) * final_cap
    return logits


def rope_neox_partial(x, pos, base, n_rot, factors=None):
    """ggml's NEOX RoPE over the first n_rot lanes (pairs (i, i + n_rot/2)), angle pos * base^(-2i/n_rot) / factor_i;
    lanes from n_rot on pass through."""
    inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    if factors is not None:
        inv = inv / factors.astype(np.float64)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b, rest = x[..., : n_rot // 2], x[..., n_rot // 2: n_rot], x[..., n_rot:]
    return np.concatenate([a * c - b * s, a * s + b * c, rest], axis=-1)


def forward_gemma4(meta, t, tokens, gelu):
    """llama.cpp's gemma4 graph (src/models/gemma4.cpp): embedding times sqrtf(D); per layer q/k RMS-normed with
    weights, v without (v = the raw k projection where a global layer has no attn_v), RoPE (sliding layers: the
    whole head, base freq_base_swa; global: rope_freqs as frequency factors), no query scale, post-attention norm;
    the FFN a GeGLU MLP, or with experts the MLP (post_ffw_norm_1) plus the routed experts (router on a scale-free
    norm of the residual / sqrt(D) * ffn_gate_inp.scale, softmax, top k renormalised, ffn_down_exps.scale per
    expert, post_ffw_norm_2); post_ffw_norm; the layer's output times layer_output_scale; tied head; soft cap."""
    p = "gemma4."
    D, L, N = meta[p + "embedding_length"], meta[p + "block_count"], meta[p + "attention.head_count"]
    kv = meta[p + "attention.head_count_kv"]
    swa_flags = meta[p + "attention.sliding_window_pattern"]
    eps = meta[p + "attention.layer_norm_rms_epsilon"]
    window = meta[p + "attention.sliding_window"]
    final_cap = meta.get(p + "final_logit_softcapping", 0.0)
    E, k_used = meta.get(p + "expert_count", 0), meta.get(p + "expert_used_count", 0)
    g = lambda n: t[n].astype(np.float64)  # noqa: E731
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = g("token_embd.weight")[tokens] * float(np.sqrt(np.float32(D)))
    ones = lambda n: np.ones(n)  # noqa: E731
    for il in range(L):
        b = f"blk.{il}."
        swa = bool(swa_flags[il])
        H = meta[p + ("attention.key_length_swa" if swa else "attention.key_length")]
        K = kv[il] if isinstance(kv, list) else kv
        base = meta[p + "rope.freq_base_swa"] if swa else meta[p + "rope.freq_base"]
        n_rot = meta[p + ("rope.dimension_count_swa" if swa else "rope.dimension_count")]
        factors = None if swa else t.get("rope_freqs.weight")
        h = rms(x, g(b + "attn_norm.weight"), eps)
        q = rms((h @ g(b + "attn_q.weight").T).reshape(T, N, H), g(b + "attn_q_norm.weight"), eps)
        kp = (h @ g(b + "attn_k.weight").T).reshape(T, K, H)
        vp = (h @ g(b + "attn_v.weight").T).reshape(T, K, H) if b + "attn_v.weight" in t else kp
        k = rms(kp, g(b + "attn_k_norm.weight"), eps)
        v = rms(vp, ones(H), eps)
        q = rope_neox_partial(q, pos, base, n_rot, factors)
        k = rope_neox_partial(k, pos, base, n_rot, factors)
        o = attend(q, k, v, swa, window) @ g(b + "attn_output.weight").T  # f_attention_scale = 1
        attn_out = x + rms(o, g(b + "post_attention_norm.weight"), eps)
        hm = rms(attn_out, g(b + "ffn_norm.weight"), eps)
        f = (gelu(hm @ g(b + "ffn_gate.weight").T) * (hm @ g(b + "ffn_up.weight").T)) @ g(b + "ffn_down.weight").T
        if E:
            f = rms(f, g(b + "post_ffw_norm_1.weight"), eps)
            he = rms(attn_out, g(b + "pre_ffw_norm_2.weight"), eps)
            r = rms(attn_out, ones(D), eps) / float(np.sqrt(np.float32(D))) * g(b + "ffn_gate_inp.scale")
            logits = r @ g(b + "ffn_gate_inp.weight").T
            probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            gu, down, pes = g(b + "ffn_gate_up_exps.weight"), g(b + "ffn_down_exps.weight"), g(b + "ffn_down_exps.scale")
            Fe = gu.shape[1] // 2
            moe = np.zeros_like(x)
            for ti in range(T):
                top = np.argsort(-probs[ti], kind="stable")[:k_used]
                w = probs[ti, top] / probs[ti, top].sum()
                for e, we in zip(top, w):
                    a = gu[e] @ he[ti]
                    moe[ti] += we * pes[e] * (down[e] @ (gelu(a[:Fe]) * a[Fe:]))
            f = f + rms(moe, g(b + "post_ffw_norm_2.weight"), eps)
        x = (attn_out + rms(f, g(b + "post_ffw_norm.weight"), eps)) * g(b + "layer_output_scale.weight")[0]
    logits = rms(x, g("output_norm.weight"), eps) @ g("token_embd.weight").T
    if final_cap:
        logits = np.tanh(logits / final_cap) * final_cap
    return logits


def main():
    for name in sys.argv[1:] or ["gemma", "gemma2", "gemma3", "gemma3_d48", "gemma4", "gemma4_moe"]:
        d = FIX / name
        meta, t = read_gguf(d / "model.gguf")
        arch = meta["general.architecture"]
        tokens = np.concatenate([np.load(d / "tokens.npy"), np.load(d / "greedy.npy")[:-1]])
        peer = np.load(d / "logits.npy").astype(np.float64)
        fwd = forward_gemma4 if arch == "gemma4" else lambda *a: forward(arch, *a)
        exact = fwd(meta, t, tokens, gelu_tanh)
        table = fwd(meta, t, tokens, gelu_ggml_fp16)
        fp16_diff = np.abs(peer - table).max()
        print(f"{name}: max |llama.cpp - f64 with ggml's fp16 GELU| = {np.abs(peer - table).max():.3g}; "
              f"max |llama.cpp - f64 with exact GELU| = {np.abs(peer - exact).max():.3g}; "
              f"max |logit| {np.abs(peer).max():.3g}")
        # The f64 graph reproduces llama.cpp once its GELU is; its exact-GELU logits are then the reference for the
        # library at f32 tolerance (tests/models/test_llamacpp_peer.cpp).
        # With experts each row passes three GELU layers' worth of fp16 table lookups (the shared MLP and two
        # experts) per layer, so more fp16 rounding boundaries are crossed: 1.2e-3 at most on gemma4_moe (row 0-3:
        # 0; it grows with position), against 1.8e-4 on the dense gemma4.
        bound = 2e-3 if meta.get(arch + ".expert_count", 0) else 1e-3
        assert fp16_diff < bound, f"{name}: the float64 re-statement does not reproduce llama.cpp ({fp16_diff})"
        np.save(d / "logits_exact_gelu.npy", exact.astype(np.float32))
        D = meta[arch + ".embedding_length"]
        if arch == "gemma3" and np.sqrt(np.float32(D)) != bf16(np.sqrt(np.float32(D))):
            # MaxText's Gemma 3: the embedding scaled by sqrt(D) rounded to bfloat16 (folded into the table by its
            # converter, and by the library's importer), the tied logits divided by sqrt(D) in f32.
            mt = forward(arch, meta, t, tokens, gelu_tanh, emb_scale=float(bf16(np.sqrt(np.float32(D)))))
            print(f"{name}: max |f64 with MaxText's bf16 embedding scale - f64 with llama.cpp's| = "
                  f"{np.abs(mt - exact).max():.3g}")
            np.save(d / "logits_maxtext_scale.npy", mt.astype(np.float32))


if __name__ == "__main__":
    main()
