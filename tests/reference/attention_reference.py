"""MaxText's generic Attention and the llama2 / mistral / qwen3 / default decoder layers, re-stated in PyTorch float64
from float32 inputs and weights (spec: attention.md §1-3, rope.md, norms-dense-mlp.md, decoder.md).

Written from the spec and MaxText's Python, not from the C++ port: dense [T, S] logits with the mask applied by
replacement with -0.7*FLT_MAX, sinks as an extra logit column, RoPE computed per position from its formula (rotary
angles are formed the way MaxText forms them in float32, then sin/cos in float64).

Writes tests/fixtures/attn_*/ (one Attention layer), llama2_*/, mistral_*/, qwen3_*/, default_*/ (one decoder layer)
and *_model/ (a tiny 2-layer model per family). Every case has weights.safetensors (MaxText names), x.npy or
tokens.npy, optional positions.npy / segment_ids.npy, the float64 outputs, and meta.json with the Config keys
("config") and Attention constructor arguments ("args") the C++ test builds the layer from.

Run: /usr/bin/python3 tests/reference/attention_reference.py
"""
import math

import numpy as np
import torch

from common import bf16_round, case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64

MASK = -0.7 * float(np.finfo(np.float32).max)
F32 = np.float32


# ----------------------------------------------------------------------------------------------------------------
# Rotary embeddings (rope.md). Each returns a function (x [B,T,h,d] float64, pos [B,T] int) -> rotated x.

def default_rope(d, theta, min_ts=1.0, linear=1.0):
    half = d // 2
    frac = (2 * np.arange(half, dtype=np.int32)).astype(F32) / F32(d)
    ts = F32(min_ts) * np.power(F32(theta / min_ts), frac, dtype=F32)
    if linear != 1.0:
        ts = (ts * F32(linear)).astype(F32)

    def apply(x, pos):
        ang = (pos.astype(F32)[:, :, None] / ts[None, None, :]).astype(F32)  # f32 division, as MaxText
        a = t64(ang)[:, :, None, :]
        c, s = torch.cos(a), torch.sin(a)
        x1, x2 = x[..., :half], x[..., half:d]
        out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
        return torch.cat([out, x[..., d:]], dim=-1)  # lanes beyond d pass through (partial RoPE)
    return apply


def llama31_rope(d, theta, use_scale=True, min_ts=1.0):
    half = d // 2
    frac = (2 * np.arange(half, dtype=np.int32)).astype(F32) / F32(d)
    ts = F32(min_ts) * np.power(F32(theta / min_ts), frac, dtype=F32)
    if use_scale:
        f = (F32(1) / ts).astype(F32)
        out = []
        for fi in f:
            wl = F32(2 * math.pi) / fi
            if wl < F32(8192 / 4):
                nf = fi
            elif wl > F32(8192):
                nf = fi / F32(8)
            else:
                sm = (F32(8192) / wl - F32(1)) / F32(3)
                nf = (F32(1) - sm) * fi / F32(8) + sm * fi
            out.append(F32(nf))
        ts = (F32(1) / np.array(out, dtype=F32)).astype(F32)

    def apply(x, pos):
        ang = (pos.astype(F32)[:, :, None] / ts[None, None, :]).astype(F32)
        a = t64(ang)[:, :, None, :]
        c, s = torch.cos(a), torch.sin(a)
        xe, xo = x[..., 0:d:2], x[..., 1:d:2]
        ye, yo = xe * c - xo * s, xo * c + xe * s
        return torch.stack([ye, yo], dim=-1).reshape(x.shape)
    return apply


def yarn_rope(d, theta, factor, orig, beta_fast=32.0, beta_slow=1.0, interleave=True, truncate=True,
              attention_scaling=False):
    half = d // 2
    base = (F32(1) / np.power(F32(theta), (F32(2) * np.arange(half, dtype=F32)) / F32(d), dtype=F32)).astype(F32)

    def corr(r):
        return d * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(theta))
    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(half, dtype=F32) - F32(low)) / F32(high - low), 0, 1).astype(F32)
    smooth = (F32(1) - ramp).astype(F32)
    freq = ((base / F32(factor)) * (F32(1) - smooth) + base * smooth).astype(F32)
    scale = (0.1 * math.log(factor) + 1.0) if (attention_scaling and factor > 1) else 1.0

    def apply(x, pos):
        ang = (pos.astype(F32)[:, :, None] * freq[None, None, :]).astype(F32)  # f32 product, as the table
        a = t64(ang)[:, :, None, :]
        c, s = torch.cos(a), torch.sin(a)
        if interleave:
            re, im = x[..., 0:d:2], x[..., 1:d:2]
        else:
            re, im = x[..., :half], x[..., half:d]
        return torch.cat([re * c - im * s, re * s + im * c], dim=-1) * scale  # output always [real, imag]
    return apply


# ----------------------------------------------------------------------------------------------------------------
# Layers

def rms_norm(x, scale, eps):
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y if scale is None else y * scale


def dense(x, w, name, spec):
    """DenseGeneral over the last axis (or the last two for `out`), plus bias if present."""
    k = w[name + ".kernel"]
    y = torch.einsum(spec, x, k)
    if name + ".bias" in w:
        y = y + w[name + ".bias"]
    return y


def mask_allowed(B, T, S, kind, window, chunk, seg, q_off=0):
    """allowed[b, t, s] for query index t + q_off and key index s (attention.md §2)."""
    t = torch.arange(T)[:, None] + q_off
    s = torch.arange(S)[None, :]
    allowed = (s <= t) if kind != "full" else torch.ones(T, S, dtype=torch.bool)
    if kind == "local_sliding":
        allowed = allowed & (s > t - window) & (s <= t)
    elif kind == "chunk":
        allowed = allowed & ((t // chunk) == (s // chunk)) & (t >= s)
    allowed = allowed[None].expand(B, T, S)
    if seg is not None:
        sg = torch.from_numpy(seg)
        allowed = allowed & (sg[:, :, None] == sg[:, None, :]) & (sg[:, None, :] >= 0)
    return allowed


def attention(x, w, a, pos, seg=None):
    """MaxText Attention. x [B,T,D] float64, w: its params (float64), a: dict of options, pos [B,T] int."""
    B, T, D = x.shape
    N, K, H = a["heads"], a["kv_heads"], a["head_dim"]
    shared = a.get("kv")  # (k, v) of a donor layer (Gemma 4 small's KV-shared layers): normed and rotated already
    if shared is not None:
        q = dense(x, w, "query", "btd,dnh->btnh")
        k, v = shared
    elif a.get("fused"):
        qkv = dense(x, w, "qkv_proj", "btd,dnh->btnh")
        q, k, v = qkv[:, :, :N], qkv[:, :, N:N + K], qkv[:, :, N + K:]
    else:
        q = dense(x, w, "query", "btd,dnh->btnh")
        k = dense(x, w, "key", "btd,dnh->btnh")
        v = k.clone() if a.get("share_kv") else dense(x, w, "value", "btd,dnh->btnh")
    eps = a.get("eps", 1e-5)
    qk = a.get("qk_norm")  # None, "rms" (per head) or "global" (Olmo3)
    own = shared is None
    if qk == "rms":
        q = rms_norm(q, w.get("query_norm.scale"), eps)
        k = rms_norm(k, w.get("key_norm.scale"), eps) if own else k
    elif qk == "global":
        q = rms_norm(q.reshape(B, T, N * H), w.get("query_norm.scale"), eps).reshape(B, T, N, H)
        k = rms_norm(k.reshape(B, T, K * H), w.get("key_norm.scale"), eps).reshape(B, T, K, H) if own else k
    if a.get("v_norm") and own:
        v = rms_norm(v, w.get("value_norm.scale"), eps)
    rope = a.get("rope")
    if rope is not None:
        q, k = rope(q, pos), (rope(k, pos) if own else k)
        if a.get("llama4_l2"):
            q, k = rms_norm(q, None, eps), (rms_norm(k, None, eps) if own else k)
    a["kv_out"] = (k, v)  # what a KV-shared layer would reuse
    if a.get("q_scalar"):
        q = q * a["q_scalar"]
    if a.get("temperature_tuning") and rope is None:
        fs, sc = a["tt_floor"], a["tt_scale"]
        f = 1.0 + sc * np.log(np.floor((pos.astype(np.float64) + 1.0) / fs) + 1.0)
        q = q * t64(f)[:, :, None, None]
    G = N // K
    qg = q.reshape(B, T, K, G, H)
    logits = torch.einsum("btkgh,bskh->bkgts", qg, k)
    cap = a.get("soft_cap")
    if cap:
        logits = cap * torch.tanh(logits / cap)
    allowed = mask_allowed(B, T, T, a.get("type", "global"), a.get("window"), a.get("chunk"), seg)
    extra = a.get("allowed_or")  # optional [B, T, T] bool OR'ed after every other term (MaxText's bidirectional
    if extra is not None:        # block mask for image tokens, attention_op.generate_attention_mask); default: none
        allowed = allowed | extra
    logits = torch.where(allowed[:, None, None], logits, torch.full_like(logits, MASK))
    logits = logits.reshape(B, N, T, T)
    if "sinks" in w:
        sink = w["sinks"][None, :, None, None].expand(B, N, T, 1)
        logits = torch.cat([logits, sink], dim=-1)
    m = logits.max(-1, keepdim=True).values
    e = torch.exp(logits - m)
    l = e.sum(-1, keepdim=True)
    p = (e / l)[..., :T].reshape(B, K, G, T, T)
    o = torch.einsum("bkgts,bskh->btkgh", p, v).reshape(B, T, N, H)
    return dense(o, w, "out", "btnh,nhd->btd")


def silu(x):
    return x * torch.sigmoid(x)


def mlp(x, w):
    return (silu(x @ w["wi_0.kernel"]) * (x @ w["wi_1.kernel"])) @ w["wo.kernel"]


def sub(w, prefix):
    return {k[len(prefix):]: v for k, v in w.items() if k.startswith(prefix)}


def decoder_layer(kind, x, w, a, pos, seg=None):
    """One decoder layer of `kind` (llama2 / mistral / qwen3 / default). Returns (out, attention, mlp)."""
    eps = a["eps"]
    if kind == "default":
        h = rms_norm(x, w["pre_self_attention_norm.scale"], eps)
        at = attention(h, sub(w, "self_attention."), a, pos, seg)
        m = mlp(h, sub(w, "mlp."))
        return x + (m + at), at, m
    h = rms_norm(x, w["pre_self_attention_layer_norm.scale"], eps)
    at = attention(h, sub(w, "self_attention."), a, pos, seg)
    hh = x + at
    m = mlp(rms_norm(hh, w["post_self_attention_layer_norm.scale"], eps), sub(w, "mlp."))
    return hh + m, at, m


# ----------------------------------------------------------------------------------------------------------------
# Weights

def attention_weights(g, D, N, K, H, opts):
    w = {}
    s = 1.0 / math.sqrt(D)
    if opts.get("fused"):
        kq = f32(g, (D, N + 2 * K, H), s)
        kq[:, :N] /= F32(math.sqrt(H))  # trained fused models learn the depth scaling; keeps logits O(1)
        w["qkv_proj.kernel"] = kq
        if opts.get("bias"):
            w["qkv_proj.bias"] = f32(g, (N + 2 * K, H), 0.1)
    else:
        # A query kernel as MaxText stores it (pre-scaled by 1/sqrt(H) when no forward scalar is used).
        qs = s if opts.get("q_scalar") or opts.get("qk_norm") else s / math.sqrt(H)
        w["query.kernel"] = f32(g, (D, N, H), qs)
        w["key.kernel"] = f32(g, (D, K, H), s)
        if not opts.get("share_kv"):
            w["value.kernel"] = f32(g, (D, K, H), s)
        if opts.get("bias"):
            w["query.bias"] = f32(g, (N, H), 0.1)
            w["key.bias"] = f32(g, (K, H), 0.1)
            if not opts.get("share_kv"):
                w["value.bias"] = f32(g, (K, H), 0.1)
    w["out.kernel"] = f32(g, (N, H, D), 1.0 / math.sqrt(N * H))
    if opts.get("bias"):
        w["out.bias"] = f32(g, (D,), 0.1)
    if opts.get("sinks"):
        w["sinks"] = f32(g, (N,), 1.0)
    if opts.get("qk_norm") and opts.get("qk_scale", True):
        n_q, n_k = (N * H, K * H) if opts["qk_norm"] == "global" else (H, H)
        w["query_norm.scale"] = f32(g, (n_q,), 0.2, 1.0)
        w["key_norm.scale"] = f32(g, (n_k,), 0.2, 1.0)
    if opts.get("v_norm") and opts.get("v_scale", True):
        w["value_norm.scale"] = f32(g, (H,), 0.2, 1.0)
    return w


def layer_weights(g, kind, D, N, K, H, F, opts, prefix=""):
    w = {}
    if kind == "default":
        w["pre_self_attention_norm.scale"] = f32(g, (D,), 0.2, 1.0)
    else:
        w["pre_self_attention_layer_norm.scale"] = f32(g, (D,), 0.2, 1.0)
        w["post_self_attention_layer_norm.scale"] = f32(g, (D,), 0.2, 1.0)
    for k, v in attention_weights(g, D, N, K, H, opts).items():
        w["self_attention." + k] = v
    w["mlp.wi_0.kernel"] = f32(g, (D, F), 1.0 / math.sqrt(D))
    w["mlp.wi_1.kernel"] = f32(g, (D, F), 1.0 / math.sqrt(D))
    w["mlp.wo.kernel"] = f32(g, (F, D), 1.0 / math.sqrt(F))
    return {prefix + k: v for k, v in w.items()}


def to64(w):
    return {k: t64(v) for k, v in w.items()}


def write_common(d, w, x=None, pos=None, seg=None):
    save_safetensors(f"{d}/weights.safetensors", w)
    if x is not None:
        save_npy(d, "x", x)
    if pos is not None:
        save_npy(d, "positions", pos.astype(np.int32))
    if seg is not None:
        save_npy(d, "segment_ids", seg.astype(np.int32))


# ----------------------------------------------------------------------------------------------------------------
# Cases

def base_config(D, N, K, H, F=32, **kw):
    c = {"dtype": "float32", "base_emb_dim": D, "base_num_query_heads": N, "base_num_kv_heads": K, "head_dim": H,
         "base_mlp_dim": F, "normalization_layer_epsilon": 1e-5, "max_target_length": 64}
    c.update(kw)
    return c


def layer_case(name, kind, seed, B, T, D, N, K, H, F, config, rope, opts=None, pos=None, seg=None):
    """A decoder layer of `kind`; `rope` is the reference rotary function for the config."""
    g = rng(seed)
    opts = dict(opts or {})
    cfg = base_config(D, N, K, H, F, decoder_block=kind, **config)
    eps = cfg["normalization_layer_epsilon"]
    a = {"heads": N, "kv_heads": K, "head_dim": H, "eps": eps, "rope": rope}
    if kind == "qwen3":
        opts.setdefault("q_scalar", H ** -0.5)
        if cfg.get("use_qk_norm"):
            opts["qk_norm"] = "rms"
    if kind == "llama2" and cfg.get("attn_logits_soft_cap"):
        a["soft_cap"] = cfg["attn_logits_soft_cap"]
    if cfg.get("fused_qkv"):
        opts["fused"] = True
    if cfg.get("attention_sink"):
        opts["sinks"] = True
    if kind == "default" and cfg.get("share_kv_projections"):
        opts["share_kv"] = True
    a.update({k: v for k, v in opts.items() if k in ("fused", "share_kv", "qk_norm", "q_scalar")})
    w = layer_weights(g, kind, D, N, K, H, F, opts)
    x = f32(g, (B, T, D), 1.0, 0.1)
    if pos is None:
        pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    out, at, m = decoder_layer(kind, t64(x), to64(w), a, pos, seg)
    d = case_dir(name)
    write_common(d, w, x, pos, seg)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", at.numpy())
    save_npy(d, "mlp", m.numpy())
    save_meta(d, {"what": f"{kind} decoder layer, float64 from float32 inputs", "kind": kind, "config": cfg,
                  "batch": B, "length": T})


def model_case(name, kind, seed, config, rope, opts=None, B=2, T=9, D=32, N=4, K=2, H=8, F=48, L=2, V=64):
    """A tiny 2-layer model of `kind`: embedding, layers, final RMSNorm, logits (dense or tied)."""
    g = rng(seed)
    opts = dict(opts or {})
    cfg = base_config(D, N, K, H, F, decoder_block=kind, base_num_decoder_layers=L, vocab_size=V, **config)
    eps = cfg["normalization_layer_epsilon"]
    a = {"heads": N, "kv_heads": K, "head_dim": H, "eps": eps, "rope": rope}
    if kind == "qwen3":
        opts.setdefault("q_scalar", H ** -0.5)
        if cfg.get("use_qk_norm"):
            opts["qk_norm"] = "rms"
    if kind == "llama2" and cfg.get("attn_logits_soft_cap"):
        a["soft_cap"] = cfg["attn_logits_soft_cap"]
    if cfg.get("fused_qkv"):
        opts["fused"] = True
    a.update({k: v for k, v in opts.items() if k in ("fused", "share_kv", "qk_norm", "q_scalar")})
    w = {"token_embedder.embedding": f32(g, (V, D))}
    for i in range(L):
        w.update(layer_weights(g, kind, D, N, K, H, F, opts, f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.2, 1.0)
    tied = cfg.get("logits_via_embedding", False)
    if not tied:
        w["decoder.logits_dense.kernel"] = f32(g, (D, V), 1.0 / math.sqrt(D))
    tokens = g.integers(0, V, size=(B, T)).astype(np.int32)
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    w64 = to64(w)
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    acts = {"token_embedder": x}
    for i in range(L):
        x, at, m = decoder_layer(kind, x, sub(w64, f"decoder.layers_{i}."), a, pos)
        acts[f"decoder.layers_{i}"] = x
        acts[f"decoder.layers_{i}.self_attention"] = at
        acts[f"decoder.layers_{i}.mlp"] = m
    x = rms_norm(x, w64["decoder.decoder_norm.scale"], eps)
    acts["decoder.decoder_norm"] = x
    if tied:
        logits = x @ t64(bf16_round(w["token_embedder.embedding"])).T
        if cfg.get("normalize_embedding_logits", True):
            logits = logits / math.sqrt(D)
    else:
        logits = x @ w64["decoder.logits_dense.kernel"]
    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", w)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        if not k.endswith((".self_attention", ".mlp")):
            save_npy(d, "act_" + k, v.numpy())
    save_meta(d, {"what": f"2-layer {kind} model, float64 from float32 weights", "kind": kind, "config": cfg,
                  "tokens": [B, T]})


def rope_for(cfg, args, H):
    """The rotary function MaxText's Attention would pick (rope.md §Selection), or None on NoPE layers."""
    if args.get("is_nope_layer"):
        return None
    rt = (args.get("rope_type") or cfg.get("rope_type", "default")).lower()
    theta = args.get("rope_max_timescale") or cfg.get("rope_max_timescale", 10000.0)
    mn = cfg.get("rope_min_timescale", 1.0)
    if cfg.get("model_name", "default").startswith("llama3.1") or rt.startswith("llama3.1"):
        return llama31_rope(H, theta, cfg.get("rope_use_scale", True), mn)
    if rt.startswith("yarn"):
        return yarn_rope(H, theta, cfg.get("rope_factor", 40.0), cfg.get("original_max_position_embeddings", 4096),
                         cfg.get("beta_fast", 32.0), cfg.get("beta_slow", 1.0), cfg.get("rope_interleave", True),
                         cfg.get("rope_truncate", True), cfg.get("rope_attention_scaling", False))
    prf = args.get("partial_rotary_factor", 0)
    if prf and prf < 1.0:
        return default_rope(int(H * prf), theta, mn)
    local = args.get("attention_type") == "local_sliding"
    if local and cfg.get("local_rope_max_timescale", -1) > 0:
        theta = cfg["local_rope_max_timescale"]
    return default_rope(H, theta, mn, cfg.get("rope_linear_scaling_factor", 1.0))


def attn_case(name, seed, config, args, B=2, T=9, D=32, pos=None, seg=None, wopts=None):
    """One generic Attention layer. `config`: MaxText keys; `args`: Attention constructor arguments (C++ names)."""
    g = rng(seed)
    N, K, H = args["num_query_heads"], args["num_kv_heads"], args["head_dim"]
    cfg = base_config(D, N, K, H, **config)
    eps = cfg["normalization_layer_epsilon"]
    a = {"heads": N, "kv_heads": K, "head_dim": H, "eps": eps, "rope": rope_for(cfg, args, H),
         "type": args.get("attention_type", "global"), "window": args.get("sliding_window_size"),
         "chunk": cfg.get("chunk_attn_window_size"), "soft_cap": args.get("attn_logits_soft_cap"),
         "fused": cfg.get("fused_qkv", False), "share_kv": args.get("share_kv_projections", False),
         "v_norm": args.get("use_v_norm", False)}
    if args.get("use_qk_norm"):
        if cfg.get("decoder_block") == "llama4":
            a["llama4_l2"] = True
        else:
            a["qk_norm"] = "global" if cfg.get("model_name", "").startswith("olmo3") else "rms"
    qs = args.get("query_pre_attn_scalar")
    if qs and qs != 1.0:
        a["q_scalar"] = qs
    if args.get("temperature_tuning"):
        a.update(temperature_tuning=True, tt_scale=args.get("temperature_tuning_scale", 0.1),
                 tt_floor=args.get("temperature_tuning_floor_scale", 8192.0))
    wo = {"fused": a["fused"], "share_kv": a["share_kv"], "bias": args.get("use_bias_in_projections", False),
          "sinks": cfg.get("attention_sink", False), "qk_norm": a.get("qk_norm"),
          "qk_scale": cfg.get("qk_norm_with_scale", True), "v_norm": a["v_norm"],
          "v_scale": cfg.get("v_norm_with_scale", True), "q_scalar": a.get("q_scalar")}
    wo.update(wopts or {})
    w = attention_weights(g, D, N, K, H, wo)
    x = f32(g, (B, T, D), 1.0, 0.1)
    if pos is None:
        pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    out = attention(t64(x), to64(w), a, pos, seg)
    d = case_dir(name)
    write_common(d, w, x, pos, seg)
    save_npy(d, "out", out.numpy())
    save_meta(d, {"what": "generic Attention, float64 from float32 inputs", "config": cfg, "args": args,
                  "batch": B, "length": T})


def attention_cases():
    gqa = {"num_query_heads": 4, "num_kv_heads": 2, "head_dim": 8}
    attn_case("attn_gqa_sliding_sinks_softcap", 21, {"attention_sink": True},
              dict(gqa, attention_type="local_sliding", sliding_window_size=3, attn_logits_soft_cap=1.5))
    attn_case("attn_global_sinks_softcap_mqa", 22, {"attention_sink": True},
              {"num_query_heads": 4, "num_kv_heads": 1, "head_dim": 8, "attn_logits_soft_cap": 2.0})
    attn_case("attn_chunk", 23, {"chunk_attn_window_size": 4}, dict(gqa, attention_type="chunk"))
    # YaRN (interleaved input, halves out, attention scaling) on a layer that also passes a partial factor:
    # MaxText picks YaRN first, so the factor is ignored. Positions reach 3000 where the ramped frequencies matter.
    ypos = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8], [2990, 2991, 2992, 2993, 2994, 2995, 2996, 2997, 2998]], np.int32)
    ycfg = {"rope_type": "yarn", "rope_factor": 4.0, "original_max_position_embeddings": 4096,
            "rope_attention_scaling": True, "max_target_length": 4096}
    attn_case("attn_yarn_partial", 24, ycfg,
              {"num_query_heads": 4, "num_kv_heads": 2, "head_dim": 16, "partial_rotary_factor": 0.5}, pos=ypos)
    attn_case("attn_yarn_concat", 25, dict(ycfg, rope_interleave=False, rope_attention_scaling=False),
              {"num_query_heads": 2, "num_kv_heads": 2, "head_dim": 16}, pos=ypos)
    # rope_pairwise keeps the pairs interleaved in the output: a different lane order of the same rotation, so the
    # attention output equals the non-pairwise reference.
    attn_case("attn_yarn_pairwise", 37, dict(ycfg, rope_pairwise=True),
              {"num_query_heads": 4, "num_kv_heads": 2, "head_dim": 16}, pos=ypos)
    attn_case("attn_partial_rope", 26, {"max_target_length": 4096},
              {"num_query_heads": 4, "num_kv_heads": 2, "head_dim": 16, "partial_rotary_factor": 0.5}, pos=ypos)
    attn_case("attn_llama31_fused_bias", 27,
              {"rope_type": "llama3.1", "rope_max_timescale": 500000.0, "fused_qkv": True, "max_target_length": 4096},
              {"num_query_heads": 4, "num_kv_heads": 2, "head_dim": 16, "use_bias_in_projections": True}, pos=ypos)
    attn_case("attn_linear_scaling_local_theta", 28,
              {"rope_linear_scaling_factor": 4.0, "local_rope_max_timescale": 100.0},
              dict(gqa, attention_type="local_sliding", sliding_window_size=4))
    attn_case("attn_qk_norm_qwen3", 29, {"use_qk_norm": True, "normalization_layer_epsilon": 1e-6},
              dict(gqa, use_qk_norm=True, query_pre_attn_scalar=8 ** -0.5))
    attn_case("attn_qk_norm_noscale", 30, {"use_qk_norm": True, "qk_norm_with_scale": False},
              dict(gqa, use_qk_norm=True, query_pre_attn_scalar=0.3))
    attn_case("attn_qk_norm_global_olmo3", 31, {"use_qk_norm": True, "model_name": "olmo3-7b"},
              dict(gqa, use_qk_norm=True))
    tpos = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8], [3, 7, 8, 15, 16, 40, 99, 1000, 5000]], np.int32)
    attn_case("attn_nope_temperature", 32, {},
              dict(gqa, is_nope_layer=True, temperature_tuning=True, temperature_tuning_scale=0.1,
                   temperature_tuning_floor_scale=4.0), pos=tpos)
    attn_case("attn_llama4_l2_chunk", 33, {"decoder_block": "llama4", "use_qk_norm": True, "chunk_attn_window_size": 3},
              dict(gqa, use_qk_norm=True, query_pre_attn_scalar=8 ** -0.5, attention_type="chunk"))
    attn_case("attn_share_kv_vnorm_bias", 34, {},
              dict(gqa, share_kv_projections=True, use_v_norm=True, use_bias_in_projections=True))
    seg = np.array([[1, 1, 1, 1, 2, 2, 2, 2, 2], [1, 1, 1, 1, 1, 1, 1, 0, 0]], dtype=np.int32)
    spos = np.array([[0, 1, 2, 3, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 0, 1]], np.int32)
    attn_case("attn_q_scalar_segments", 35, {}, dict(gqa, query_pre_attn_scalar=0.25), pos=spos, seg=seg)
    # "full" (bidirectional) attention: no causal term; segment ids still apply.
    attn_case("attn_full_segments", 38, {}, dict(gqa, attention_type="full"), pos=spos, seg=seg)
    attn_case("attn_sliding_segments_sinks", 36, {"attention_sink": True},
              dict(gqa, attention_type="local_sliding", sliding_window_size=2), pos=spos, seg=seg)


def main():
    torch.set_default_dtype(torch.float64)
    # Llama-2 layer: GQA 4/2, default RoPE theta 1e4, SwiGLU, rmsnorm 1e-5.
    layer_case("llama2_layer", "llama2", 11, 2, 7, 32, 4, 2, 8, 48, {}, default_rope(8, 10000.0))
    model_case("llama2_model", "llama2", 12, {}, default_rope(8, 10000.0))
    attention_cases()
    # Llama-2 block with the config-driven attention options it honours: soft cap (passed by the block), sinks and
    # fused qkv (read by Attention from the config); config attention_type is ignored (the block passes GLOBAL).
    layer_case("llama2_layer_softcap_sinks_fused", "llama2", 13, 2, 7, 32, 4, 2, 8, 48,
               {"attn_logits_soft_cap": 1.5, "attention_sink": True, "fused_qkv": True,
                "attention_type": "local_sliding", "sliding_window_size": 2}, default_rope(8, 10000.0))
    # Mistral: MaxText applies no sliding window even when the config sets one.
    layer_case("mistral_layer", "mistral", 14, 2, 7, 32, 4, 2, 8, 48,
               {"rope_max_timescale": 1000000.0, "sliding_window_size": 3, "attention_type": "local_sliding"},
               default_rope(8, 1000000.0))
    layer_case("qwen3_layer", "qwen3", 15, 2, 7, 32, 4, 2, 8, 48,
               {"use_qk_norm": True, "normalization_layer_epsilon": 1e-6, "rope_max_timescale": 1000000.0},
               default_rope(8, 1000000.0))
    layer_case("default_layer_share_kv", "default", 16, 2, 7, 32, 4, 2, 8, 48, {"share_kv_projections": True},
               default_rope(8, 10000.0))
    model_case("mistral_model", "mistral", 17, {"rope_max_timescale": 1000000.0}, default_rope(8, 1000000.0))
    model_case("qwen3_model", "qwen3", 18,
               {"use_qk_norm": True, "normalization_layer_epsilon": 1e-6, "rope_max_timescale": 1000000.0,
                "logits_via_embedding": True, "normalize_embedding_logits": False}, default_rope(8, 1000000.0))
    model_case("default_model", "default", 19, {}, default_rope(8, 10000.0))
    model_case("llama2_model_llama31", "llama2", 20, {"model_name": "llama3.1-tiny", "rope_max_timescale": 500000.0},
               llama31_rope(8, 500000.0))


if __name__ == "__main__":
    main()
    print("wrote tests/fixtures/{attn,llama2,mistral,qwen3,default}_*")
