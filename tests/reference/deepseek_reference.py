"""DeepSeek (MLA + routed/shared MoE) and Mixtral layers, re-stated in PyTorch float64 from MaxText's semantics.

Spec: ../../shared/spec/mla.md, moe.md, rope.md (YaRN, default RoPE), attention.md §1-2, decoder.md §DEEPSEEK/MIXTRAL.
Independent of the C++ code: plain einsums over whole tensors, attention as masked logits (mask value replaces the
logit) followed by exp / value product / division, routing by sorting (value descending, expert index ascending =
jax.lax.top_k's order). Rotary tables follow MaxText's float32 construction (they are part of the spec: f32
frequencies, angle = f32(pos) * freq for YaRN and f32(pos) / timescale for default RoPE); everything after that is
float64 from float32 inputs and weights.

Writes tests/fixtures/{deepseek,moe,mixtral}_*/. Run: /usr/bin/python3 tests/reference/deepseek_reference.py
"""
import json
import math
import os

import numpy as np
import torch

from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64

MASK = -0.7 * float(np.finfo(np.float32).max)
MIN_MARGIN = 1e-4  # every routing decision of a fixture is at least this far from a tie (f32 cannot flip it)


# ---------------------------------------------------------------------------------------------------------------
# Rotary tables (MaxText f32 construction) and rotations (f64)

def yarn_freqs(d, theta, factor, orig, beta_fast, beta_slow, truncate=True):
    half = d // 2
    base = (np.float32(1.0) / np.power(np.float32(theta), np.arange(0, d, 2, dtype=np.float32) / np.float32(d)))
    base = base.astype(np.float32)

    def corr(r):
        return d * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(theta))

    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(half, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    ramp = ramp.astype(np.float32)
    smooth = (np.float32(1) - ramp).astype(np.float32)
    return ((base / np.float32(factor)) * (np.float32(1) - smooth) + base * smooth).astype(np.float32)


def yarn_rotate(x, pos, freqs):
    """x [..., T, heads, d] with interleaved pairs (2i, 2i+1); output concatenated halves [re..., im...]."""
    ang = torch.from_numpy((pos.astype(np.float32)[..., None] * freqs[None, None, :]).astype(np.float32)).double()
    c, s = torch.cos(ang)[:, :, None, :], torch.sin(ang)[:, :, None, :]
    re, im = x[..., 0::2], x[..., 1::2]
    return torch.cat([re * c - im * s, re * s + im * c], dim=-1)


def default_rope(x, pos, theta):
    """Half-split (rotate-half) RoPE; angle = f32(pos) / ts_i with ts_i = theta^(2i/d) in f32."""
    d = x.shape[-1]
    half = d // 2
    frac = (np.float32(2) * np.arange(half, dtype=np.float32) / np.float32(d)).astype(np.float32)
    ts = (np.float32(1.0) * np.power(np.float32(theta), frac)).astype(np.float32)
    ang = torch.from_numpy((pos.astype(np.float32)[..., None] / ts[None, None, :]).astype(np.float32)).double()
    c, s = torch.cos(ang)[:, :, None, :], torch.sin(ang)[:, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


# ---------------------------------------------------------------------------------------------------------------
# Building blocks

def rms_norm(x, scale, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * scale


def silu(x):
    return x / (1.0 + torch.exp(-x))


def attend(q, k, v, seg=None, soft_cap=0.0):
    """q [B,T,N,d], k [B,S,K,d], v [B,S,K,dv] (S == T, global causal + segment mask, GQA)."""
    B, T, N, _ = q.shape
    K = k.shape[2]
    G = N // K
    k = k.repeat_interleave(G, dim=2)
    v = v.repeat_interleave(G, dim=2)
    logits = torch.einsum("btnh,bsnh->bnts", q, k)
    if soft_cap:
        logits = soft_cap * torch.tanh(logits / soft_cap)
    allowed = torch.ones(B, T, T, dtype=torch.bool).tril()
    if seg is not None:
        s = torch.from_numpy(seg)
        allowed = allowed & (s[:, :, None] == s[:, None, :]) & (s[:, None, :] >= 0)
    logits = torch.where(allowed[:, None], logits, torch.full_like(logits, MASK))
    m = logits.max(-1, keepdim=True).values
    e = torch.exp(logits - m)
    return torch.einsum("bnts,bsnh->btnh", e, v) / e.sum(-1)[..., None].permute(0, 2, 1, 3)


def mla(x, w, c, pos, seg=None):
    """MaxText MLA (mla.md): x [B,T,D] -> [B,T,D]."""
    N, Hn, Hr, rkv = c["N"], c["Hn"], c["Hr"], c["rkv"]
    if c["rq"] == 0:
        q = torch.einsum("btd,dnh->btnh", x, w["query.kernel"])
    else:
        cq = rms_norm(x @ w["wq_a.kernel"], w["q_norm.scale"], c["eps"])
        q = torch.einsum("btr,rnh->btnh", cq, w["wq_b.kernel"])
    freqs = yarn_freqs(Hr, c["theta"], c["factor"], c["orig"], 32, 1)
    q = torch.cat([q[..., :Hn], yarn_rotate(q[..., Hn:], pos, freqs)], dim=-1) * c["scale"]
    a = x @ w["wkv_a.kernel"]
    ckv = rms_norm(a[..., :rkv], w["kv_norm.scale"], c["eps"])
    kpe = yarn_rotate(a[..., rkv:][:, :, None, :], pos, freqs)
    kv = torch.einsum("btr,rnh->btnh", ckv, w["wkv_b.kernel"])
    key = torch.cat([kv[..., :Hn], kpe.expand(-1, -1, N, -1)], dim=-1)
    o = attend(q, key, kv[..., Hn:], seg, c.get("soft_cap", 0.0))
    return torch.einsum("btnh,nhd->btd", o, w["out.kernel"])


def gqa_attention(x, w, c, pos):
    """MaxText generic Attention with HF-style pre-scaled query (Mixtral): default RoPE, GQA, causal."""
    q = torch.einsum("btd,dnh->btnh", x, w["query.kernel"])
    k = torch.einsum("btd,dnh->btnh", x, w["key.kernel"])
    v = torch.einsum("btd,dnh->btnh", x, w["value.kernel"])
    q = default_rope(q, pos, c["theta"])
    k = default_rope(k, pos, c["theta"])
    o = attend(q, k, v)
    return torch.einsum("btnh,nhd->btd", o, w["out.kernel"])


def mlp_block(x, w):
    return (silu(x @ w["wi_0.kernel"]) * (x @ w["wi_1.kernel"])) @ w["wo.kernel"]


def jax_topk(vals, k):
    """Indices of the k largest values, descending; ties to the lower index (jax.lax.top_k)."""
    return sorted(range(len(vals)), key=lambda e: (-vals[e], e))[:k]


def margin_after(vals, chosen):
    """Distance between the weakest chosen finite value and the strongest rejected finite one."""
    rest = [vals[e] for e in range(len(vals)) if e not in chosen and math.isfinite(vals[e])]
    sel = [vals[e] for e in chosen if math.isfinite(vals[e])]
    if not rest or not sel:
        return float("inf")
    return min(sel) - max(rest)


def route(s, pre, c, margins=None):
    """MaxText get_topk for one token: s (biased scores) and pre (unbiased, DeepSeek-V3 path) as python lists."""
    k, E = c["k"], len(s)
    if c["deepseek_name"]:
        masked = list(s)
        if c.get("groups", -1) > 0:
            G = c["groups"]
            per = E // G
            gs = [sum(sorted(s[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(G)]
            keep = jax_topk(gs, c["topk_groups"])
            if margins is not None:
                margins.append(margin_after(gs, keep))
            masked = [s[e] if e // per in keep else -math.inf for e in range(E)]
        idx = jax_topk(masked, k)
        if margins is not None:
            margins.append(margin_after(masked, idx))
        w = [pre[e] for e in idx]
    else:
        idx = jax_topk(s, k)
        if margins is not None:
            margins.append(margin_after(s, idx))
        w = [s[e] for e in idx]
    if c["block"] == "deepseek":
        if c["score"] in ("sigmoid", "sqrtsoftplus"):
            tot = sum(w) + 1e-20
            w = [v / tot for v in w]
        w = [v * c["rsf"] for v in w]
    else:
        mx = max(w)
        ex = [math.exp(v - mx) for v in w]
        w = [v / sum(ex) for v in ex]
        if c.get("norm_topk", False):
            tot = sum(w)
            w = [v / tot for v in w]
    return idx, w


def scores_of(z, c, bias):
    """Gate scores: z [M,E] logits -> (biased s, unbiased pre) as float64 tensors."""
    if c["score"] == "sigmoid":
        s = torch.sigmoid(z)
    elif c["score"] == "softmax":
        s = torch.softmax(z, dim=-1)
    elif c["score"] == "sqrtsoftplus":
        s = torch.sqrt(torch.nn.functional.softplus(z))
    else:
        s = z.clone()
    pre = s.clone()
    if bias is not None:
        s = s + bias
    return s, pre


def routed_moe(x, w, c, margins=None, stats=None):
    """MaxText RoutedMoE on x [B,T,D] with weights w (relative to MoeBlock_0). Returns y [B,T,D] and routing."""
    B, T, D = x.shape
    E, k = c["E"], c["k"]
    z = x @ w["gate.kernel"]
    s, pre = scores_of(z, c, w.get("gate.bias"))
    sl, pl = s.reshape(B * T, E).tolist(), pre.reshape(B * T, E).tolist()
    idx, wts = [], []
    for m in range(B * T):
        i, wv = route(sl[m], pl[m], c, margins)
        idx.append(i)
        wts.append(wv)
    xf = x.reshape(B * T, D)

    def ffn(e, xv):
        h0 = xv @ w["wi_0"][e]
        h1 = xv @ w["wi_1"][e]
        if c.get("mlp_bias"):
            h0, h1 = h0 + w["wi_0_bias"][e], h1 + w["wi_1_bias"][e]
        o = (silu(h0) * h1) @ w["wo"][e]
        if c.get("mlp_bias"):
            o = o + w["wo_bias"][e]
        return o

    y = torch.zeros(B * T, D)
    keep = [[True] * k for _ in range(B * T)]
    cf = c.get("capacity_factor", -1.0)
    if not c.get("sparse_matmul", True) and cf > 0:
        cap = int(max(math.ceil(T * k / E) * cf, cf))
        for b in range(B):
            cnt = [0] * E
            for t in range(T):
                for j in range(k):
                    e = idx[b * T + t][j]
                    cnt[e] += 1
                    if cnt[e] > cap:
                        keep[b * T + t][j] = False
        if c.get("inference", False):
            probs = torch.softmax(s.reshape(B * T, E), dim=-1)
            wts = [[probs[m, idx[m][j]].item() for j in range(k)] for m in range(B * T)]
    for m in range(B * T):
        for j in range(k):
            if keep[m][j]:
                y[m] += wts[m][j] * ffn(idx[m][j], xf[m])
    if stats is not None:
        stats["idx"] = np.array(idx, dtype=np.int32)
        stats["weights"] = np.array(wts, dtype=np.float64)
        stats["kept"] = np.array(keep, dtype=np.int32)
        counts = np.bincount(np.array(idx).ravel(), minlength=E)
        stats["counts"] = counts
        if c.get("lb_weight", 0) > 0:
            p = torch.softmax(s, dim=-1)  # [B,T,E]
            dens = torch.zeros(B, E)
            for b in range(B):
                for t in range(T):
                    for e in idx[b * T + t]:
                        dens[b, e] += 1.0 / T
            stats["lb_loss"] = float((dens * p.mean(1)).mean() * E * E * c["lb_weight"])
        if c.get("bias_rate", 0) > 0:
            avg = B * T * k / E
            stats["bias_updates"] = np.sign(avg - counts) * c["bias_rate"]
    return y.reshape(B, T, D)


def deepseek_moe_block(x, w, c, margins=None, stats=None):
    routed = routed_moe(x, sub(w, "MoeBlock_0."), c, margins, stats)
    return routed + mlp_block(x, sub(w, "shared_experts."))


def sub(w, prefix):
    return {kk[len(prefix):]: v for kk, v in w.items() if kk.startswith(prefix)}


def deepseek_layer(x, w, c, pos, moe, margins=None, stats=None):
    h = x + mla(rms_norm(x, w["pre_self_attention_layer_norm.scale"], c["eps"]), sub(w, "self_attention."), c, pos)
    a = h - x
    hn = rms_norm(h, w["post_self_attention_layer_norm.scale"], c["eps"])
    f = deepseek_moe_block(hn, sub(w, "DeepSeekMoeBlock_0."), c, margins, stats) if moe else mlp_block(hn, sub(w, "mlp."))
    return h + f, a, f


def mixtral_layer(x, w, c, pos, margins=None, stats=None):
    a = gqa_attention(rms_norm(x, w["pre_self_attention_layer_norm.scale"], c["eps"]), sub(w, "self_attention."), c, pos)
    h = x + a
    f = routed_moe(rms_norm(h, w["post_self_attention_layer_norm.scale"], c["eps"]), sub(w, "MoeBlock_0."), c, margins,
                   stats)
    return h + f, a, f


# ---------------------------------------------------------------------------------------------------------------
# Weights (MaxText naming and layout: kernels [in..., out...], experts [E, in, out])

def mla_weights(g, c):
    D, N, Hq, Hv, rkv, rq, Hr = c["D"], c["N"], c["Hn"] + c["Hr"], c["Hv"], c["rkv"], c["rq"], c["Hr"]
    w = {}
    if rq == 0:
        w["query.kernel"] = f32(g, (D, N, Hq), 1 / math.sqrt(D))
    else:
        w["wq_a.kernel"] = f32(g, (D, rq), 1 / math.sqrt(D))
        w["q_norm.scale"] = f32(g, (rq,), 0.1, 1.0)
        w["wq_b.kernel"] = f32(g, (rq, N, Hq), 1 / math.sqrt(rq))
    w["wkv_a.kernel"] = f32(g, (D, rkv + Hr), 1 / math.sqrt(D))
    w["kv_norm.scale"] = f32(g, (rkv,), 0.1, 1.0)
    w["wkv_b.kernel"] = f32(g, (rkv, N, c["Hn"] + Hv), 1 / math.sqrt(rkv))
    w["out.kernel"] = f32(g, (N, Hv, D), 1 / math.sqrt(N * Hv))
    return w


def mlp_weights(g, D, F):
    return {"wi_0.kernel": f32(g, (D, F), 1 / math.sqrt(D)), "wi_1.kernel": f32(g, (D, F), 1 / math.sqrt(D)),
            "wo.kernel": f32(g, (F, D), 1 / math.sqrt(F))}


def moe_weights(g, c, F, gate_scale=1.0):
    D, E = c["D"], c["E"]
    w = {"gate.kernel": f32(g, (D, E), gate_scale / math.sqrt(D)),
         "wi_0": f32(g, (E, D, F), 1 / math.sqrt(D)), "wi_1": f32(g, (E, D, F), 1 / math.sqrt(D)),
         "wo": f32(g, (E, F, D), 1 / math.sqrt(F))}
    if c.get("bias"):
        w["gate.bias"] = f32(g, (E,), 0.05)
    if c.get("mlp_bias"):
        w["wi_0_bias"] = f32(g, (E, F), 0.1)
        w["wi_1_bias"] = f32(g, (E, F), 0.1)
        w["wo_bias"] = f32(g, (E, D), 0.1)
    return w


def prefixed(w, p):
    return {p + kk: v for kk, v in w.items()}


def deepseek_layer_weights(g, c, moe):
    D = c["D"]
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.1, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.1, 1.0)}
    w.update(prefixed(mla_weights(g, c), "self_attention."))
    if moe:
        w.update(prefixed(moe_weights(g, c, c["Fm"], c.get("gate_scale", 1.0)), "DeepSeekMoeBlock_0.MoeBlock_0."))
        w.update(prefixed(mlp_weights(g, D, c["shared"] * c["Fm"]), "DeepSeekMoeBlock_0.shared_experts."))
    else:
        w.update(prefixed(mlp_weights(g, D, c["F"]), "mlp."))
    return w


def mixtral_layer_weights(g, c):
    D, N, K, H = c["D"], c["N"], c["K"], c["H"]
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.1, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.1, 1.0),
         # MaxText stores the query pre-scaled by 1/sqrt(H) (attention.md §3): draw it at that size
         "self_attention.query.kernel": f32(g, (D, N, H), 1 / math.sqrt(D * H)),
         "self_attention.key.kernel": f32(g, (D, K, H), 1 / math.sqrt(D)),
         "self_attention.value.kernel": f32(g, (D, K, H), 1 / math.sqrt(D)),
         "self_attention.out.kernel": f32(g, (N, H, D), 1 / math.sqrt(N * H))}
    w.update(prefixed(moe_weights(g, c, c["F"], c.get("gate_scale", 1.0)), "MoeBlock_0."))
    return w


def to64(w):
    return {kk: t64(v) for kk, v in w.items()}


# ---------------------------------------------------------------------------------------------------------------
# Configs (MaxText keys written to config.yml) and the matching reference settings

def deepseek_settings(**over):
    c = dict(D=32, N=2, rq=16, rkv=16, Hn=8, Hr=4, Hv=8, F=48, Fm=16, E=8, k=2, shared=1, groups=4, topk_groups=2,
             score="sigmoid", bias=True, rsf=2.5, eps=1e-6, theta=10000.0, factor=4.0, orig=16, max_pos=64,
             block="deepseek", deepseek_name=True, model_name="deepseek3-fixture", V=64, L=3, dense=1, soft_cap=0.0)
    c.update(over)
    ms = 0.1 * 1.0 * math.log(c["factor"]) + 1.0
    c["scale"] = (c["Hn"] + c["Hr"]) ** -0.5 * (ms * ms if c["max_pos"] > c["orig"] else 1.0)
    return c


def deepseek_yaml(c, extra=""):
    return f"""# Tiny DeepSeek-V3-style model of deepseek_reference.py (MaxText keys).
model_name: "{c['model_name']}"
decoder_block: "deepseek"
dtype: "float32"
base_emb_dim: {c['D']}
base_num_query_heads: {c['N']}
base_num_kv_heads: {c['N']}
base_mlp_dim: {c['F']}
base_moe_mlp_dim: {c['Fm']}
base_num_decoder_layers: {c['L']}
first_num_dense_layers: {c['dense']}
mlp_activations: ["silu", "linear"]
vocab_size: {c['V']}
logits_via_embedding: false
normalization_layer_epsilon: {c['eps']}
num_experts: {c['E']}
num_experts_per_tok: {c['k']}
shared_experts: {c['shared']}
routed_scaling_factor: {c['rsf']}
routed_score_func: "{c['score']}"
routed_bias: {str(c['bias']).lower()}
n_routing_groups: {c['groups']}
topk_routing_group: {c['topk_groups']}
attention_type: "mla"
q_lora_rank: {c['rq']}
kv_lora_rank: {c['rkv']}
qk_nope_head_dim: {c['Hn']}
qk_rope_head_dim: {c['Hr']}
v_head_dim: {c['Hv']}
mscale: 1.0
attn_logits_soft_cap: {c['soft_cap']}
rope_type: "yarn"
rope_max_timescale: {c['theta']}
max_position_embeddings: {c['max_pos']}
original_max_position_embeddings: {c['orig']}
rope_factor: {c['factor']}
beta_fast: 32
max_target_length: {c['max_pos']}
{extra}"""


def mixtral_settings(**over):
    c = dict(D=32, N=4, K=2, H=8, F=24, E=4, k=2, score="", bias=False, eps=1e-5, theta=10000.0, block="mixtral",
             deepseek_name=False, model_name="mixtral-fixture", V=64, L=2)
    c.update(over)
    return c


def mixtral_yaml(c, extra=""):
    return f"""# Tiny Mixtral of deepseek_reference.py (MaxText keys).
model_name: "{c['model_name']}"
decoder_block: "mixtral"
dtype: "float32"
base_emb_dim: {c['D']}
base_num_query_heads: {c['N']}
base_num_kv_heads: {c['K']}
head_dim: {c['H']}
base_mlp_dim: {c['F']}
base_moe_mlp_dim: {c['F']}
base_num_decoder_layers: {c['L']}
mlp_activations: ["silu", "linear"]
vocab_size: {c['V']}
logits_via_embedding: false
normalization_layer_epsilon: {c['eps']}
num_experts: {c['E']}
num_experts_per_tok: {c['k']}
rope_max_timescale: {c['theta']}
max_target_length: 64
{extra}"""


def write_yaml(d, text):
    with open(os.path.join(d, "config.yml"), "w") as f:
        f.write(text)


def check_margins(margins, what):
    m = min(margins) if margins else float("inf")
    assert m >= MIN_MARGIN, f"{what}: routing margin {m} too small; pick another seed"
    return m


# ---------------------------------------------------------------------------------------------------------------
# Cases

def mla_case(name, seed, rq, soft_cap, seg):
    g = rng(seed)
    c = deepseek_settings(rq=rq, soft_cap=soft_cap)
    B, T = 2, 7
    w = mla_weights(g, c)
    x = f32(g, (B, T, c["D"]))
    pos = np.stack([np.arange(T), np.arange(T) + 3]).astype(np.int32)  # row 1 starts at position 3
    out = mla(t64(x), to64(w), c, pos, seg)
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "positions", pos)
    if seg is not None:
        save_npy(d, "segment_ids", seg.astype(np.int32))
    save_npy(d, "out", out.numpy())
    write_yaml(d, deepseek_yaml(c))
    save_meta(d, {"what": "MLA (attention_mla.py), float64 from float32 inputs", "q_lora_rank": rq,
                  "soft_cap": soft_cap, "segment_ids": seg is not None, "softmax_scale": c["scale"],
                  "batch": B, "length": T})


def routing_case():
    """Routing alone (GateLogit score/bias + get_topk): given gate logits, the chosen experts and their weights."""
    g = rng(11)
    E, M = 8, 6
    cases = {}

    def add(name, z, bias, cfg_keys, c):
        s, pre = scores_of(t64(z), c, None if bias is None else t64(bias))
        margins = []
        idx, wts = zip(*[route(s[m].tolist(), pre[m].tolist(), c, margins) for m in range(z.shape[0])])
        if not name.startswith("ties"):
            check_margins(margins, name)
        cases[name] = {"config": cfg_keys, "k": c["k"]}
        d = case_dir("moe_routing")
        save_npy(d, f"{name}_z", z)
        if bias is not None:
            save_npy(d, f"{name}_bias", bias)
        save_npy(d, f"{name}_idx", np.array(idx, dtype=np.int32))
        save_npy(d, f"{name}_w", np.array(wts, dtype=np.float64))

    v3 = dict(block="deepseek", deepseek_name=True, score="sigmoid", rsf=2.5, k=2, groups=4, topk_groups=2)
    v3_keys = {"decoder_block": "deepseek", "model_name": "deepseek3-fixture", "routed_score_func": "sigmoid",
               "routed_bias": "true", "routed_scaling_factor": "2.5", "n_routing_groups": "4",
               "topk_routing_group": "2", "num_experts": str(E), "num_experts_per_tok": "2"}
    z, b = f32(g, (M, E)), f32(g, (E,), 0.3)
    add("v3_groups", z, b, v3_keys, v3)
    add("v3_nogroups", z, b, {**v3_keys, "n_routing_groups": "-1", "topk_routing_group": "-1"}, {**v3, "groups": -1})
    # A DEEPSEEK block whose model_name is not deepseek3*: the bias leaks into the weights, groups are ignored.
    add("bias_leak", z, b, {**v3_keys, "model_name": "default"}, {**v3, "deepseek_name": False})
    # DeepSeek-V2 (deepseek2-16b): softmax scores, no bias, no renormalisation, x routed_scaling_factor.
    v2 = dict(block="deepseek", deepseek_name=False, score="softmax", rsf=1.5, k=3)
    add("v2_softmax", f32(g, (M, E)), None,
        {"decoder_block": "deepseek", "model_name": "deepseek2-16b", "routed_score_func": "softmax",
         "routed_scaling_factor": "1.5", "num_experts": str(E), "num_experts_per_tok": "3"}, v2)
    # Mixtral: raw logits, softmax over the top-k values.
    mx = dict(block="mixtral", deepseek_name=False, score="", k=2)
    mx_keys = {"decoder_block": "mixtral", "num_experts": str(E), "num_experts_per_tok": "2"}
    add("mixtral", f32(g, (M, E)), None, mx_keys, mx)
    add("norm_topk", f32(g, (M, E)), None, {**mx_keys, "norm_topk_prob": "true", "num_experts_per_tok": "3"},
        {**mx, "k": 3, "norm_topk": True})
    # Exact ties: equal values resolve to the lower expert index, for experts and for groups.
    zt = np.array([[0.5, 0.5, 0.1, 0.5, -0.2, 0.5, 0.1, 0.1],
                   [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                   [-1.0, 0.25, 0.25, -1.0, 0.25, 0.25, 0.7, -3.0],
                   [2.0, -2.0, 1.0, 1.0, 2.0, -2.0, 1.0, 1.0]], dtype=np.float32)
    add("ties_mixtral", zt, None, {**mx_keys, "num_experts_per_tok": "3"}, {**mx, "k": 3})
    add("ties_v3", zt, np.zeros(E, np.float32), v3_keys, v3)
    d = case_dir("moe_routing")
    save_meta(d, {"what": "MoE routing (GateLogit score + bias, get_topk, weight post-processing) from gate logits z; "
                          "idx/w expected (float64)", "num_experts": E, "cases": cases})


def moe_block_case(name, seed, c, keys, B=2, T=6, gate_scale=1.0):
    for attempt in range(50):
        g = rng(seed + 1000 * attempt)
        if c["block"] == "deepseek":
            w = prefixed(moe_weights(g, c, c["Fm"], gate_scale), "MoeBlock_0.")
            w.update(prefixed(mlp_weights(g, c["D"], c["shared"] * c["Fm"]), "shared_experts."))
        else:
            w = moe_weights(g, c, c["F"], gate_scale)
        x = f32(g, (B, T, c["D"]))
        margins, stats = [], {}
        if c["block"] == "deepseek":
            y = deepseek_moe_block(t64(x), to64(w), c, margins, stats)
        else:
            y = routed_moe(t64(x), to64(w), c, margins, stats)
        if min(margins) >= MIN_MARGIN:
            break
    else:
        raise RuntimeError(name + ": no seed with clear routing margins")
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "out", y.numpy())
    save_npy(d, "topk_indices", stats["idx"])
    save_npy(d, "topk_weights", stats["weights"])
    save_npy(d, "kept", stats["kept"])
    save_npy(d, "expert_counts", stats["counts"].astype(np.int64))
    meta = {"what": f"{'RoutedAndSharedMoE' if c['block'] == 'deepseek' else 'RoutedMoE'} float64 from float32",
            "config": keys, "batch": B, "length": T, "min_routing_margin": min(margins),
            "dropped": int(stats["kept"].size - stats["kept"].sum())}
    if "lb_loss" in stats:
        meta["moe_lb_loss"] = stats["lb_loss"]
    if "bias_updates" in stats:
        save_npy(d, "bias_updates", stats["bias_updates"].astype(np.float64))
    save_meta(d, meta)


def deepseek_layer_case(name, seed, moe, min_margin=MIN_MARGIN):
    """min_margin: the MoE layer fixture keeps every routing decision >= 0.03 from a tie, so that a bf16 run (gate
    input rounded to bf16) still routes like the float64 reference."""
    c = deepseek_settings()
    for attempt in range(400):
        g = rng(seed + 1000 * attempt)
        w = deepseek_layer_weights(g, c, moe)
        x = f32(g, (2, 7, c["D"]))
        pos = np.tile(np.arange(7, dtype=np.int32), (2, 1))
        margins = []
        out, a, f = deepseek_layer(t64(x), to64(w), c, pos, moe, margins)
        if not margins or min(margins) >= min_margin:
            break
    else:
        raise RuntimeError(name + ": no seed with clear routing margins")
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", a.numpy())
    save_npy(d, "mlp", f.numpy())
    write_yaml(d, deepseek_yaml(c))
    save_meta(d, {"what": f"DeepSeek{'MoE' if moe else 'Dense'}Layer float64 from float32", "batch": 2, "length": 7,
                  "min_routing_margin": min(margins) if margins else None})


def scanned(w, groups):
    """MaxText's scanned layout: per group, each leaf stacked on axis 1 (param_scan_axis)."""
    out = {kk: v for kk, v in w.items() if not any(kk.startswith(f"decoder.{gname}_") for gname, _ in groups)}
    for gname, n in groups:
        if n == 0:
            continue
        for kk in w:
            if kk.startswith(f"decoder.{gname}_0."):
                leaf = kk[len(f"decoder.{gname}_0."):]
                out[f"decoder.{gname}.{leaf}"] = np.stack([w[f"decoder.{gname}_{i}.{leaf}"] for i in range(n)], axis=1)
    return out


def model_forward(w64, tokens, c, layer_fn, names):
    B, T = tokens.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    acts = {"token_embedder": x}
    margins = []
    for i, (prefix, kind) in enumerate(names):
        x, a, f = layer_fn(x, sub(w64, prefix + "."), c, pos, kind, margins)
        acts[prefix] = x
    x = rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
    acts["decoder.decoder_norm"] = x
    return x @ w64["decoder.logits_dense.kernel"], acts, margins


def deepseek_model_case():
    c = deepseek_settings(gate_scale=2.0)
    B, T = 2, 9
    names = [(f"decoder.dense_layers_{i}", False) for i in range(c["dense"])]
    names += [(f"decoder.moe_layers_{j}", True) for j in range(c["L"] - c["dense"])]
    for attempt in range(50):
        g = rng(21 + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
        for prefix, moe in names:
            w.update(prefixed(deepseek_layer_weights(g, c, moe), prefix + "."))
        w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.1, 1.0)
        w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        logits, acts, margins = model_forward(
            to64(w), tokens, c, lambda x, ww, cc, pos, moe, mg: deepseek_layer(x, ww, cc, pos, moe, mg), names)
        if min(margins) >= MIN_MARGIN:
            break
    d = case_dir("deepseek_model")
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors",
                     scanned(w, [("dense_layers", c["dense"]), ("moe_layers", c["L"] - c["dense"])]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for kk, v in acts.items():
        save_npy(d, "act_" + kk, v.numpy())
    write_yaml(d, deepseek_yaml(c))
    save_meta(d, {"what": "3-layer DeepSeek-V3-style model (1 dense + 2 MoE), float64 from float32 weights",
                  "tokens": [B, T], "vocab": c["V"], "min_routing_margin": min(margins)})


def mixtral_layer_case():
    c = mixtral_settings()
    for attempt in range(50):
        g = rng(31 + 1000 * attempt)
        w = mixtral_layer_weights(g, c)
        x = f32(g, (2, 7, c["D"]))
        pos = np.tile(np.arange(7, dtype=np.int32), (2, 1))
        margins = []
        out, a, f = mixtral_layer(t64(x), to64(w), c, pos, margins)
        if min(margins) >= MIN_MARGIN:
            break
    d = case_dir("mixtral_layer")
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", a.numpy())
    save_npy(d, "mlp", f.numpy())
    write_yaml(d, mixtral_yaml(c))
    save_meta(d, {"what": "MixtralDecoderLayer float64 from float32", "batch": 2, "length": 7,
                  "min_routing_margin": min(margins)})


def mixtral_model_case():
    c = mixtral_settings(gate_scale=2.0)
    B, T = 2, 9
    names = [(f"decoder.layers_{i}", None) for i in range(c["L"])]
    for attempt in range(50):
        g = rng(41 + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
        for prefix, _ in names:
            w.update(prefixed(mixtral_layer_weights(g, c), prefix + "."))
        w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.1, 1.0)
        w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        logits, acts, margins = model_forward(
            to64(w), tokens, c, lambda x, ww, cc, pos, _, mg: mixtral_layer(x, ww, cc, pos, mg), names)
        if min(margins) >= MIN_MARGIN:
            break
    d = case_dir("mixtral_model")
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", scanned(w, [("layers", c["L"])]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for kk, v in acts.items():
        save_npy(d, "act_" + kk, v.numpy())
    write_yaml(d, mixtral_yaml(c))
    # The same model as a Hugging Face Mixtral checkpoint (weights-naming.md §Mixtral): [out, in] matrices, the query
    # un-scaled (HF applies 1/sqrt(head_dim) in its attention), experts w1/w3/w2, block_sparse_moe.gate.
    hf = {"model.embed_tokens.weight": w["token_embedder.embedding"], "model.norm.weight": w["decoder.decoder_norm.scale"],
          "lm_head.weight": np.ascontiguousarray(w["decoder.logits_dense.kernel"].T)}
    D, N, K, H, E = c["D"], c["N"], c["K"], c["H"], c["E"]
    for i in range(c["L"]):
        m, h = f"decoder.layers_{i}.", f"model.layers.{i}."
        hf[h + "input_layernorm.weight"] = w[m + "pre_self_attention_layer_norm.scale"]
        hf[h + "post_attention_layernorm.weight"] = w[m + "post_self_attention_layer_norm.scale"]
        q = (w[m + "self_attention.query.kernel"].astype(np.float32) * np.float32(math.sqrt(H))).astype(np.float32)
        hf[h + "self_attn.q_proj.weight"] = np.ascontiguousarray(q.reshape(D, N * H).T)
        hf[h + "self_attn.k_proj.weight"] = np.ascontiguousarray(w[m + "self_attention.key.kernel"].reshape(D, K * H).T)
        hf[h + "self_attn.v_proj.weight"] = np.ascontiguousarray(w[m + "self_attention.value.kernel"].reshape(D, K * H).T)
        hf[h + "self_attn.o_proj.weight"] = np.ascontiguousarray(w[m + "self_attention.out.kernel"].reshape(N * H, D).T)
        hf[h + "block_sparse_moe.gate.weight"] = np.ascontiguousarray(w[m + "MoeBlock_0.gate.kernel"].T)
        for e in range(E):
            ex = h + f"block_sparse_moe.experts.{e}."
            hf[ex + "w1.weight"] = np.ascontiguousarray(w[m + "MoeBlock_0.wi_0"][e].T)
            hf[ex + "w3.weight"] = np.ascontiguousarray(w[m + "MoeBlock_0.wi_1"][e].T)
            hf[ex + "w2.weight"] = np.ascontiguousarray(w[m + "MoeBlock_0.wo"][e].T)
    save_safetensors(f"{d}/hf_model.safetensors", hf)
    with open(f"{d}/config.json", "w") as f:
        json.dump({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": D,
                   "intermediate_size": c["F"], "num_attention_heads": N, "num_key_value_heads": K, "head_dim": H,
                   "num_hidden_layers": c["L"], "vocab_size": c["V"], "rms_norm_eps": c["eps"],
                   "rope_theta": c["theta"], "num_local_experts": E, "num_experts_per_tok": c["k"],
                   "max_position_embeddings": 64, "tie_word_embeddings": False, "torch_dtype": "float32",
                   "hidden_act": "silu", "sliding_window": None}, f, indent=1)
    save_meta(d, {"what": "2-layer Mixtral-style model, float64 from float32 weights", "tokens": [B, T],
                  "vocab": c["V"], "min_routing_margin": min(margins)})


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    seg = np.array([[1, 1, 1, 2, 2, 2, 2], [1, 1, 1, 1, 1, 0, 0]], dtype=np.int32)
    mla_case("deepseek_mla_qlora", 1, 16, 0.0, None)
    mla_case("deepseek_mla_noqlora", 2, 0, 3.0, seg)
    routing_case()
    ds = deepseek_settings(lb_weight=0.01, bias_rate=0.001)
    ds_keys = {"decoder_block": "deepseek", "model_name": "deepseek3-fixture", "routed_score_func": "sigmoid",
               "routed_bias": "true", "routed_scaling_factor": "2.5", "n_routing_groups": "4",
               "topk_routing_group": "2", "num_experts": "8", "num_experts_per_tok": "2", "shared_experts": "1",
               "base_emb_dim": "32", "base_moe_mlp_dim": "16", "load_balance_loss_weight": "0.01",
               "routed_bias_update_rate": "0.001"}
    moe_block_case("moe_deepseek", 3, ds, ds_keys)
    mx = mixtral_settings(lb_weight=0.02)
    mx_keys = {"decoder_block": "mixtral", "num_experts": "4", "num_experts_per_tok": "2", "base_emb_dim": "32",
               "base_mlp_dim": "24", "load_balance_loss_weight": "0.02"}
    moe_block_case("moe_mixtral", 4, mx, mx_keys)
    # Token dropping (dense path, capacity_factor 1): the gate is scaled up so that some experts overflow.
    drop = mixtral_settings(sparse_matmul=False, capacity_factor=1.0, mlp_bias=True)
    drop_keys = {**mx_keys, "sparse_matmul": "false", "capacity_factor": "1.0", "mlp_bias": "true",
                 "load_balance_loss_weight": "0.0"}
    moe_block_case("moe_drop", 5, drop, drop_keys, gate_scale=4.0)
    moe_block_case("moe_drop_inference", 5, {**drop, "inference": True},
                   {**drop_keys, "model_call_mode": "inference"}, gate_scale=4.0)
    deepseek_layer_case("deepseek_dense_layer", 6, False)
    deepseek_layer_case("deepseek_moe_layer", 7, True, min_margin=0.03)
    deepseek_model_case()
    mixtral_layer_case()
    mixtral_model_case()
    print("wrote tests/fixtures/{deepseek,moe,mixtral}_*")
