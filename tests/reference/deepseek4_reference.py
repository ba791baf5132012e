#!/usr/bin/env python3
"""DeepSeek-V4 (decoder_block: deepseek4), re-stated in PyTorch float64 from float32 weights and inputs.

Source read: MaxText commit e591f30, src/maxtext/
  models/deepseek4.py      DeepSeek4DecoderLayer (mhc_attention around CompressedAttention, mhc_mlp around
                           RoutedAndSharedMoE with hash routing below first_num_hash_layers), DeepSeek4ScannableBlock
  models/deepseek.py       DeepSeekGenericLayer (pre/post RMSNorms, the mHC wrapping)
  layers/attention_compressed.py  CompressedAttention, DeepseekV4HCACompressor, DeepseekV4CSACompressor,
                           csa_overlap_pooling, compute_csa_prefill_chunk_pooling, DeepseekV4Indexer
  layers/attention_op.py   generate_attention_mask (LOCAL_SLIDING / COMPRESSED), apply_mask_to_logits,
                           compute_local_attention (the per-head sink logit joins the softmax and is dropped)
  layers/embeddings.py     DeepSeekV4RotaryEmbedding (interleaved pairs on the trailing qk_rope_head_dim lanes)
  layers/linears.py        DeepSeekV4GroupedLinear, MlpBlock, the sqrtsoftplus score
  layers/moe.py            GateLogit, RoutedMoE.get_topk / deepseek_routing / deepseek_scale_weights /
                           apply_ffn_activation (the DeepSeek clamp), RoutedAndSharedMoE
  layers/mhc.py            ManifoldConstrainedHyperConnections, DeepSeek4HyperHead (hc_head)
  layers/decoders.py, layers/nnx_decoders.py, layers/nnx_scan.py   the deepseek4 branches and scanned layout
  configs/base.yml, configs/types.py, configs/models/deepseek4-tiny.yml
Written from that math, not from the C++ code: whole-tensor einsums, pooling as an explicit softmax over the window
entries, attention as logits with disallowed entries set to -inf plus an appended sink column, top-k selections by
sorting (value descending, lower index first: jax.lax.top_k's order). Rotary tables follow MaxText's float32
construction (f32 inverse frequencies, angle = f32(pos) * inv_freq); everything after is float64. mHC comes from
mhc_reference.py, RMSNorm / routing helpers / the shared MlpBlock from deepseek_reference.py.

Per layer i (compress ratio r = compress_ratios[i]; 0: sliding window only, 4: CSA, > 4: HCA; x the k streams):
  h = mhc(x, mhc_attention, Attn(RMSNorm_pre(.)));  out = mhc(h, mhc_mlp, MoE(RMSNorm_post(.)))
The prefill / training path is stated (positions 0..T-1, one segment). Compressed block j covers tokens
[j r, (j+1) r) (complete blocks only), carries RoPE at position j r, and a query at position p may use it iff
(j + 1) r <= p + 1. The first CSA block has no previous half (its gate is -inf there).

Writes
  tests/fixtures/deepseek4_model/          4 layers, compress_ratios [0, 4, 8, 4], 1 hash layer, mHC k 2, B 2, T 37
                                           (config.yml, model.safetensors, tokens, logits, act_*, meta.json)
  tests/fixtures/deepseek4_scanned_model/  the deepseek4-tiny pattern: 7 layers, [0, 0, 4, 128, 4, 128, 4], 3 hash layers,
                                           mHC k 4, B 2, T 21 (also model_scanned.safetensors)
  tests/fixtures/deepseek4_ops/            ops.safetensors + meta.json: pooling (HCA, CSA), index scores and top-k,
                                           compressed attention with sinks (HCA rule, explicit CSA selection)
Run: /usr/bin/python3 tests/reference/deepseek4_reference.py
"""
import math

import numpy as np
import torch

from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64
from deepseek_reference import (MIN_MARGIN, jax_topk, mlp_block, mlp_weights, prefixed, rms_norm, route, scores_of,
                                silu, sub, to64, write_yaml)
from mhc_reference import mhc, mhc_weights


# ---------------------------------------------------------------------------------------------------------------
# DeepSeekV4RotaryEmbedding

def v4_rope(x, pos, theta, rope_dim, reverse=False):
    """Interleaved pairs (2i, 2i+1) of the TRAILING rope_dim lanes of x [..., d] rotated by f32(pos) * inv_freq_i,
    inv_freq_i = 1 / theta^(2i / rope_dim) in f32; reverse negates sin. pos broadcasts against x.shape[:-1]."""
    half = rope_dim // 2
    frac = (np.float32(2) * np.arange(half, dtype=np.float32) / np.float32(rope_dim)).astype(np.float32)
    inv = (np.float32(1) / np.power(np.float32(theta), frac)).astype(np.float32)
    ang = torch.from_numpy((np.asarray(pos, np.float32)[..., None] * inv).astype(np.float32)).double()
    c, s = torch.cos(ang), torch.sin(ang) * (-1.0 if reverse else 1.0)
    nope, rope = x[..., :-rope_dim], x[..., -rope_dim:]
    re, im = rope[..., 0::2], rope[..., 1::2]
    return torch.cat([nope, torch.stack([re * c - im * s, im * c + re * s], dim=-1).flatten(-2)], dim=-1)


# ---------------------------------------------------------------------------------------------------------------
# Compressors, indexer, attention

def pool_hca(kv, gate, bias):
    """DeepseekV4HCACompressor before its norm: kv, gate [B, T, F], bias [r, F] -> [B, T // r, F]; per feature a
    softmax over the r tokens of a block of (gate + bias[offset]) weighting kv."""
    B, T, F = kv.shape
    r = bias.shape[0]
    n = T // r
    g = gate[:, :n * r].reshape(B, n, r, F) + bias
    return (torch.softmax(g, dim=2) * kv[:, :n * r].reshape(B, n, r, F)).sum(2)


def pool_csa(kv, gate, bias):
    """csa_overlap_pooling before its norm: kv, gate [B, T, 2d], bias [r, 2d] -> [B, T // r, d]. Block j pools 2r
    entries per feature: features [0, d) of block j-1's tokens (absent for j = 0: gate -inf) and features [d, 2d) of
    its own; the bias row is the token's offset within its own block (added before the split)."""
    B, T, F = kv.shape
    r, d = bias.shape[0], F // 2
    n = T // r
    kv = kv[:, :n * r].reshape(B, n, r, F)
    g = gate[:, :n * r].reshape(B, n, r, F) + bias
    prev_kv = torch.cat([torch.zeros(B, 1, r, d), kv[:, :-1, :, :d]], dim=1)
    prev_g = torch.cat([torch.full((B, 1, r, d), -math.inf), g[:, :-1, :, :d]], dim=1)
    window_kv = torch.cat([prev_kv, kv[..., d:]], dim=2)
    window_g = torch.cat([prev_g, g[..., d:]], dim=2)
    return (torch.softmax(window_g, dim=2) * window_kv).sum(2)


def compress(xn, w, r, overlap, pos, c):
    """A compressor (HCA: overlap False; CSA and the indexer: True): pooled blocks, kv_norm, RoPE at the position of
    each block's first token. Returns blocks [B, n, d] and their positions [B, n]."""
    pool = pool_csa if overlap else pool_hca
    blocks = rms_norm(pool(xn @ w["kv_proj.kernel"], xn @ w["gate_proj.kernel"], w["position_bias"]),
                      w["kv_norm.scale"], c["eps"])
    bpos = pos[:, ::r][:, :blocks.shape[1]]
    return v4_rope(blocks, bpos, c["ctheta"], c["rope"]), bpos


def visible(pos, bpos, r):
    """[B, T, n]: block j (first position bpos) is complete for a query at position p iff bpos + r <= p + 1."""
    return torch.from_numpy(bpos[:, None, :] + r <= pos[:, :, None] + 1)


def index_scores(qi, kc, wts, softmax_scale, weights_scaling):
    """DeepseekV4Indexer scores: qi [B, T, H, d], kc [B, n, d], wts [B, T, H] -> (scores [B, T, n], dots [B,T,H,n])."""
    dots = torch.einsum("bthd,bnd->bthn", qi, kc)
    return torch.einsum("bthn,bth->btn", torch.relu(dots) * softmax_scale, wts * weights_scaling), dots


def select_blocks(scores, dots, vis, k, margins=None, ties=None):
    """jax.lax.top_k(scores with invisible blocks at -inf, k); selected invisible ones become -1. Returns int32
    [B, T, k] (score order, -1 last). margins gets, per query with more visible blocks than k, the gap between the k-th
    and (k+1)-th visible score; an exact tie there (only possible at 0, every head's relu clamped) instead records the
    smallest |q . k| of the tied blocks, the distance from a sign flip that would break the tie (and counts in ties).
    Such a tie is decided by the lower block index, as jax.lax.top_k does for equal values."""
    B, T, n = scores.shape
    out = np.full((B, T, k), -1, dtype=np.int32)
    for b in range(B):
        for t in range(T):
            vals = [scores[b, t, j].item() if vis[b, t, j] else -math.inf for j in range(n)]
            chosen = [j for j in jax_topk(vals, k) if vis[b, t, j]]
            out[b, t, :len(chosen)] = chosen
            order = sorted((v for v in vals if math.isfinite(v)), reverse=True)
            if margins is not None and len(order) > k:
                if order[k - 1] != order[k]:
                    margins.append(order[k - 1] - order[k])
                else:
                    tied = [j for j in range(n) if vals[j] == order[k]]
                    if ties is not None:
                        ties.append((b, t))
                    margins.append(min(dots[b, t, :, j].abs().min().item() for j in tied))
    return out


def indexer(xn, qn, w, r, pos, c, margins, ties):
    """The CSA indexer: the selected blocks per query, [B, T, k] (-1 = none)."""
    B, T, _ = xn.shape
    kc, bpos = compress(xn, w, r, True, pos, c)
    qi = (qn @ w["q_proj.kernel"]).reshape(B, T, c["Hi"], c["di"])
    qi = v4_rope(qi, pos[:, :, None], c["ctheta"], c["rope"])
    scores, dots = index_scores(qi, kc, xn @ w["weights_proj.kernel"], c["di"] ** -0.5, c["Hi"] ** -0.5)
    return select_blocks(scores, dots, visible(pos, bpos, r), min(c["topk"], kc.shape[1]), margins, ties)


def attend(q, keys, allowed, sinks):
    """Softmax over the allowed keys plus one sink logit per head (dropped after the softmax); keys double as values.
    q [B, T, N, d], keys [B, S, d], allowed [B, T, S] -> [B, T, N, d]."""
    B, T, N, _ = q.shape
    logits = torch.einsum("btnd,bsd->bnts", q, keys)
    logits = torch.where(allowed[:, None], logits, torch.full_like(logits, -math.inf))
    logits = torch.cat([logits, sinks[None, :, None, None].expand(B, N, T, 1)], dim=-1)
    return torch.einsum("bnts,bsd->btnd", torch.softmax(logits, dim=-1)[..., :-1], keys)


def selection_mask(sel, n):
    """[B, T, k] selected block indices (-1 = none) -> [B, T, n] bool."""
    m = np.zeros(sel.shape[:2] + (n,), dtype=bool)
    for (b, t, _), j in np.ndenumerate(sel):
        if j >= 0:
            m[b, t, j] = True
    return torch.from_numpy(m)


def compressed_attention(xn, w, r, pos, c, margins, ties):
    """CompressedAttention.__call__ (dot_product, prefill/train): xn [B, T, D] -> [B, T, D]."""
    B, T, _ = xn.shape
    hd, eps = c["hd"], c["eps"]
    theta = c["ctheta"] if r > 0 else c["theta"]
    qn = rms_norm(xn @ w["wq_a.kernel"], w["q_norm.scale"], eps)
    q = torch.einsum("btr,rnh->btnh", qn, w["wq_b.kernel"])
    q = q / torch.sqrt((q * q).mean(-1, keepdim=True) + eps)  # q_up_norm: RMSNorm without a scale
    q = v4_rope(q, pos[:, :, None], theta, c["rope"]) * hd ** -0.5
    kv = rms_norm(torch.einsum("btd,dkh->btkh", xn, w["wkv.kernel"])[:, :, 0], w["kv_norm.scale"], eps)
    kv = v4_rope(kv, pos, theta, c["rope"])
    dist = torch.from_numpy(pos[:, :, None] - pos[:, None, :])
    allowed = (dist >= 0) & (dist < c["window"])
    keys = kv
    if r > 4:
        blocks, bpos = compress(xn, sub(w, "hca_compressor."), r, False, pos, c)
        keys, allowed = torch.cat([kv, blocks], 1), torch.cat([allowed, visible(pos, bpos, r)], -1)
    elif r == 4:
        sel = indexer(xn, qn, sub(w, "csa_compressor.indexer."), r, pos, c, margins, ties)
        blocks, _ = compress(xn, sub(w, "csa_compressor."), r, True, pos, c)
        keys, allowed = torch.cat([kv, blocks], 1), torch.cat([allowed, selection_mask(sel, blocks.shape[1])], -1)
    o = attend(q, keys, allowed, w["sinks"])
    o = v4_rope(o, pos[:, :, None], theta, c["rope"], reverse=True)
    G = w["o_a_proj.kernel"].shape[0]
    o = torch.einsum("btgi,gio->btgo", o.reshape(B, T, G, -1), w["o_a_proj.kernel"])
    return o.reshape(B, T, -1) @ w["o_b_proj.kernel"]


# ---------------------------------------------------------------------------------------------------------------
# MoE, layer, model

def moe(xn, w, c, tokens, hashed, margins, clamp):
    """RoutedAndSharedMoE: sqrtsoftplus scores; hash layers take tid2eid[token] (no gate bias), the others the top-k
    of score + bias; weights = unbiased scores / (sum + 1e-20) * routed_scaling_factor; routed experts clamp
    wi_0 above and wi_1 both ways at mlp_activations_limit; the shared MlpBlock is not clamped."""
    B, T, D = xn.shape
    rw = sub(w, "MoeBlock_0.")
    rc = dict(k=c["k"], deepseek_name=True, groups=-1, block="deepseek", score="sqrtsoftplus", rsf=c["rsf"])
    s, pre = scores_of(xn @ rw["gate.kernel"], rc, rw.get("gate.bias"))
    x = xn.reshape(B * T, D)
    sl, pl = s.reshape(B * T, -1).tolist(), pre.reshape(B * T, -1).tolist()
    L = c["limit"]
    h0 = torch.einsum("md,edf->mef", x, rw["wi_0"])
    h1 = torch.einsum("md,edf->mef", x, rw["wi_1"])
    y = torch.zeros(B * T, D)
    for m in range(B * T):
        if hashed:
            idx = [int(e) for e in rw["tid2eid"][int(tokens.reshape(-1)[m])]]
            tot = sum(pl[m][e] for e in idx) + 1e-20
            wts = [pl[m][e] / tot * c["rsf"] for e in idx]
        else:
            idx, wts = route(sl[m], pl[m], rc, margins)
        for e, wv in zip(idx, wts):
            clamp[0] += int((h0[m, e] > L).sum()) + int((h1[m, e].abs() > L).sum())
            clamp[1] += 2 * h0.shape[-1]
            y[m] += wv * (silu(h0[m, e].clamp(max=L)) * h1[m, e].clamp(-L, L)) @ rw["wo"][e]
    return y.reshape(B, T, D) + mlp_block(xn, sub(w, "shared_experts."))


def v4_layer(x, w, c, r, hashed, tokens, pos, prefix, acts, margins):
    """DeepSeek4DecoderLayer on the streams x [B, T, k, D]."""
    def attention(li):
        a = compressed_attention(rms_norm(li, w["pre_self_attention_layer_norm.scale"], c["eps"]),
                                 sub(w, "self_attention."), r, pos, c, margins["index"], margins["ties"])
        acts[prefix + ".self_attention"] = a
        return a

    def ffn(li):
        f = moe(rms_norm(li, w["post_self_attention_layer_norm.scale"], c["eps"]), sub(w, "mlp."), c, tokens, hashed,
                margins["route"], margins["clamp"])
        acts[prefix + ".mlp"] = f
        return f

    return mhc(mhc(x, sub(w, "mhc_attention."), c, attention), sub(w, "mhc_mlp."), c, ffn)


def hc_head(x, w):
    """DeepSeek4HyperHead: y = sum_k pre_k x_k, pre = sigmoid(rmsnorm_noscale(flat) @ hc_fn * hc_scale + hc_base)
    + 1e-6 (eps 1e-6 fixed)."""
    B, T, k, D = x.shape
    flat = x.reshape(B, T, k * D)
    n = flat / torch.sqrt((flat * flat).mean(-1, keepdim=True) + 1e-6)
    pre = torch.sigmoid((n @ w["hc_fn"]) * w["hc_scale"] + w["hc_base"]) + 1e-6
    return torch.einsum("btk,btkd->btd", pre, x)


def model_forward(w64, tokens, c):
    B, T = tokens.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    acts = {"token_embedder": x}
    x = x[:, :, None, :].repeat(1, 1, c["mhc_k"], 1)  # mhc_expand
    margins = {"route": [], "index": [], "ties": [], "clamp": [0, 0]}
    for i, r in enumerate(c["ratios"]):
        p = f"decoder.layers_{i}"
        x = v4_layer(x, sub(w64, p + "."), c, r, i < c["hash"], tokens, pos, p, acts, margins)
        acts[p] = x.reshape(B, T, -1)
    y = hc_head(x, sub(w64, "decoder.hc_head."))
    acts["decoder.hc_head"] = y
    y = rms_norm(y, w64["decoder.decoder_norm.scale"], c["eps"])
    acts["decoder.decoder_norm"] = y
    return y @ w64["decoder.logits_dense.kernel"], acts, margins


# ---------------------------------------------------------------------------------------------------------------
# Weights (MaxText names, unscanned layout) and configs

def compressor_weights(g, D, d, r, mult):
    return {"kv_proj.kernel": f32(g, (D, mult * d), 1 / math.sqrt(D)),
            "gate_proj.kernel": f32(g, (D, mult * d), 1 / math.sqrt(D)),
            "position_bias": f32(g, (r, mult * d), 0.5), "kv_norm.scale": f32(g, (d,), 0.1, 1.0)}


def layer_weights(g, c, r, hashed):
    D, N, hd, rq, G, ro, E, F = c["D"], c["N"], c["hd"], c["rq"], c["G"], c["ro"], c["E"], c["F"]
    a = {"wq_a.kernel": f32(g, (D, rq), 1 / math.sqrt(D)), "q_norm.scale": f32(g, (rq,), 0.1, 1.0),
         "wq_b.kernel": f32(g, (rq, N, hd), 1 / math.sqrt(rq)), "wkv.kernel": f32(g, (D, 1, hd), 1 / math.sqrt(D)),
         "kv_norm.scale": f32(g, (hd,), 0.1, 1.0), "sinks": f32(g, (N,), 0.5),
         "o_a_proj.kernel": f32(g, (G, N * hd // G, ro), 1 / math.sqrt(N * hd // G)),
         "o_b_proj.kernel": f32(g, (G * ro, D), 1 / math.sqrt(G * ro))}
    if r > 4:
        a.update(prefixed(compressor_weights(g, D, hd, r, 1), "hca_compressor."))
    elif r == 4:
        a.update(prefixed(compressor_weights(g, D, hd, r, 2), "csa_compressor."))
        ix = compressor_weights(g, D, c["di"], r, 2)
        ix["q_proj.kernel"] = f32(g, (rq, c["Hi"] * c["di"]), 1 / math.sqrt(rq))
        ix["weights_proj.kernel"] = f32(g, (D, c["Hi"]), 1 / math.sqrt(D))
        a.update(prefixed(ix, "csa_compressor.indexer."))
    m = {"gate.kernel": f32(g, (D, E), c["gate_scale"] / math.sqrt(D)),
         "wi_0": f32(g, (E, D, F), 1 / math.sqrt(D)), "wi_1": f32(g, (E, D, F), 1 / math.sqrt(D)),
         "wo": f32(g, (E, F, D), 1 / math.sqrt(F))}
    if hashed:  # k distinct experts per token id, stored as float32 (Tid2EidVar)
        m["tid2eid"] = np.stack([g.permutation(E)[:c["k"]] for _ in range(c["V"])]).astype(np.float32)
    else:
        m["gate.bias"] = f32(g, (E,), 0.1)
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.1, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.1, 1.0)}
    w.update(prefixed(a, "self_attention."))
    w.update(prefixed(m, "mlp.MoeBlock_0."))
    w.update(prefixed(mlp_weights(g, D, c["shared"] * F), "mlp.shared_experts."))
    w.update(prefixed(mhc_weights(g, c), "mhc_attention."))
    w.update(prefixed(mhc_weights(g, c), "mhc_mlp."))
    return w


def model_weights(g, c):
    D, V, k = c["D"], c["V"], c["mhc_k"]
    w = {"token_embedder.embedding": f32(g, (V, D))}
    for i, r in enumerate(c["ratios"]):
        w.update(prefixed(layer_weights(g, c, r, i < c["hash"]), f"decoder.layers_{i}."))
    w["decoder.hc_head.hc_fn"] = f32(g, (k * D, k), 1 / math.sqrt(k * D))
    w["decoder.hc_head.hc_base"] = f32(g, (k,), 0.5)
    w["decoder.hc_head.hc_scale"] = f32(g, (1,), 0.2, 1.0)
    w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.1, 1.0)
    w["decoder.logits_dense.kernel"] = f32(g, (D, V), 1 / math.sqrt(D))
    return w


def scanned_layout(w, c):
    """Layers >= first_num_hash_layers pair up into DeepSeek4ScannableBlock m: layer hash + 2m + s is slice m of
    decoder.scanned_blocks.layers_{s}.<leaf>. nnx.Param leaves stack on param_scan_axis (1); the one non-Param leaf
    there, gate.bias (a MoEBiasVar), stacks on axis 0 (nnx_scan.create_scanned_layers: the rest of the state on 0)."""
    h, L = c["hash"], len(c["ratios"])
    n = (L - h) // 2
    out = {kk: v for kk, v in w.items() if not kk.startswith("decoder.layers_")
           or int(kk.split(".")[1][len("layers_"):]) < h}
    for s in range(2):
        pre = f"decoder.layers_{h + s}."
        for kk in w:
            if kk.startswith(pre):
                leaf = kk[len(pre):]
                axis = 0 if leaf.endswith("gate.bias") else 1
                out[f"decoder.scanned_blocks.layers_{s}.{leaf}"] = np.stack(
                    [w[f"decoder.layers_{h + 2 * m + s}.{leaf}"] for m in range(n)], axis=axis)
    return out


def settings(**over):
    c = dict(D=32, N=4, hd=16, rope=8, rq=12, G=2, ro=8, Hi=2, di=12, topk=3, window=6, E=6, k=2, F=16, shared=1,
             limit=1.0, rsf=1.5, theta=10000.0, ctheta=160000.0, eps=1e-6, V=64, gate_scale=2.0, lite=False,
             sinkhorn=20, mhc_k=2, ratios=[0, 4, 8, 4], hash=1, model_name="deepseek4-fixture")
    c.update(over)
    return c


def v4_yaml(c, extra=""):
    return f"""# Tiny DeepSeek-V4 model of deepseek4_reference.py (MaxText keys).
model_name: "{c['model_name']}"
decoder_block: "deepseek4"
dtype: "float32"
weight_dtype: "float32"
attention: "dot_product"
pure_nnx: true
base_emb_dim: {c['D']}
base_num_query_heads: {c['N']}
base_num_kv_heads: 1
base_mlp_dim: {c['F']}
base_moe_mlp_dim: {c['F']}
base_num_decoder_layers: {len(c['ratios'])}
head_dim: {c['hd']}
qk_rope_head_dim: {c['rope']}
mlp_activations: ["silu", "linear"]
mlp_activations_limit: {c['limit']}
vocab_size: {c['V']}
logits_via_embedding: false
normalization_layer_epsilon: {c['eps']}
enable_dropout: false
num_experts: {c['E']}
num_experts_per_tok: {c['k']}
shared_experts: {c['shared']}
routed_score_func: "sqrtsoftplus"
routed_bias: true
routed_scaling_factor: {c['rsf']}
first_num_hash_layers: {c['hash']}
attention_type: "compressed"
q_lora_rank: {c['rq']}
o_groups: {c['G']}
o_lora_rank: {c['ro']}
sliding_window_size: {c['window']}
compress_ratios: {c['ratios']}
indexer_n_heads: {c['Hi']}
indexer_head_dim: {c['di']}
indexer_topk: {c['topk']}
rope_type: "default"
rope_max_timescale: {int(c['theta'])}
compressed_rope_max_timescale: {int(c['ctheta'])}
max_position_embeddings: 64
max_target_length: 64
mhc_expansion_rate: {c['mhc_k']}
sinkhorn_iterations: {c['sinkhorn']}
enable_mhc_lite: false
{extra}"""


# ---------------------------------------------------------------------------------------------------------------
# Cases

def model_case(name, seed, c, B, T, scanned, extra_yaml, what):
    for attempt in range(200):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        logits, acts, margins = model_forward(to64(w), tokens, c)
        rm, im = min(margins["route"]), min(margins["index"])
        if rm >= MIN_MARGIN and im >= MIN_MARGIN:
            break
    else:
        raise RuntimeError(name + ": no seed with clear routing / indexer margins")
    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", w)
    if scanned:
        save_safetensors(f"{d}/model_scanned.safetensors", scanned_layout(w, c))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for kk, v in acts.items():
        if not scanned or kk in ("decoder.hc_head", "decoder.decoder_norm") or (
                kk.startswith("decoder.layers_") and not kk.endswith((".mlp", ".self_attention"))):
            save_npy(d, "act_" + kk, v.numpy())
    write_yaml(d, v4_yaml(c, extra_yaml))
    clamp = margins["clamp"][0] / margins["clamp"][1]
    meta = {"what": what, "tokens": [B, T], "vocab": c["V"], "streams": c["mhc_k"], "seed": seed + 1000 * attempt,
            "min_routing_margin": rm, "min_indexer_margin": im, "indexer_decisions": len(margins["index"]),
            "indexer_zero_ties": len(margins["ties"]), "routed_clamp_fraction": clamp,
            "acts": "act_decoder.layers_{i}: the k streams after layer i [B,T,k*D]; act_decoder.hc_head, "
                    "act_decoder.decoder_norm [B,T,D]" + (
                "" if scanned else "; act_token_embedder [B,T,D]; act_decoder.layers_{i}.self_attention / .mlp: the "
                "attention / MoE branch output inside the mHC wrapper [B,T,D]"),
            "indexer_ties": "indexer_zero_ties queries have an exact tie at score 0 (every head's relu clamped) across "
                            "the k-th / (k+1)-th visible block; jax.lax.top_k keeps the lower block index (XLA sums "
                            "the zero products to +0.0; compare -0.0 == +0.0); min_indexer_margin covers those as the "
                            "smallest |q . k| of the tied blocks"}
    if scanned:
        meta["scanned_layout"] = ("prefix layers i < first_num_hash_layers keep decoder.layers_{i}; layer "
                                  "first_num_hash_layers + 2m + s is slice m of "
                                  "decoder.scanned_blocks.layers_{s}.<leaf>: on axis 1 (param_scan_axis) for "
                                  "nnx.Param leaves, on axis 0 for "
                                  "mlp.MoeBlock_0.gate.bias (a MoEBiasVar, not an nnx.Param)")
    save_meta(d, meta)
    print(f"{name}: routing margin {rm:.3g}, indexer margin {im:.3g} over {len(margins['index'])} decisions, "
          f"clamped {clamp:.1%}")


def ops_case():
    """Backend pieces on random float32 inputs (float64 outputs)."""
    t = {}
    cases = {}
    g = rng(900)
    # HCA pooling (r 8) and CSA pooling (r 4, head 6: 12 projected features)
    kv, gate, bias = f32(g, (2, 24, 8)), f32(g, (2, 24, 8)), f32(g, (8, 8), 0.5)
    t.update({"pool_hca.kv": kv, "pool_hca.gate": gate, "pool_hca.bias": bias,
              "pool_hca.out": pool_hca(t64(kv), t64(gate), t64(bias)).numpy()})
    cases["pool_hca"] = ("kv, gate [B=2, T=24, F=8], bias [r=8, F]: out [B, T // r = 3, F] = per block and feature "
                         "sum_t softmax_t(gate + bias[t - j r]) kv over the r tokens (before kv_norm and RoPE)")
    kv, gate, bias = f32(g, (2, 22, 12)), f32(g, (2, 22, 12)), f32(g, (4, 12), 0.5)
    t.update({"pool_csa.kv": kv, "pool_csa.gate": gate, "pool_csa.bias": bias,
              "pool_csa.out": pool_csa(t64(kv), t64(gate), t64(bias)).numpy()})
    cases["pool_csa"] = ("kv, gate [B=2, T=22, 2d=12], bias [r=4, 2d]: out [B, 5 (complete blocks), d=6]; block j "
                         "softmaxes per feature over 2r entries: features [0, d) of block j-1's r tokens (none for "
                         "j=0) "
                         "and features [d, 2d) of its own, gate + bias[offset in the token's own block]; trailing "
                         "tokens 20, 21 unused; before kv_norm and RoPE")

    # Index scores and top-k: offsets keep most q . k positive so exact ties (all heads clamped) stay rare
    def index_case(name, positions, seed):
        for attempt in range(500):
            gg = rng(seed + 1000 * attempt)
            qi, w, kc = f32(gg, (14, 2, 6), 1.0, 0.7), f32(gg, (14, 2)), f32(gg, (2, 5, 6), 1.0, 0.7)
            pos = np.tile(np.asarray(positions, dtype=np.int32), (2, 1))
            scores, dots = index_scores(t64(qi).reshape(2, 7, 2, 6), t64(kc), t64(w).reshape(2, 7, 2), 6 ** -0.5,
                                        2 ** -0.5)
            vis = visible(pos, np.tile(np.arange(5, dtype=np.int32) * 4, (2, 1)), 4)
            sel = select_blocks(scores, dots, vis, 3)
            gaps = []  # every gap among the top k + 1 visible scores (selection and its order are clear)
            for b in range(2):
                for q in range(7):
                    v = sorted((scores[b, q, j].item() for j in range(5) if vis[b, q, j]), reverse=True)[:4]
                    gaps += [v[i] - v[i + 1] for i in range(len(v) - 1)]
            if min(gaps) >= MIN_MARGIN:
                break
        else:
            raise RuntimeError(name + ": no seed with clear index scores")
        t.update({f"{name}.qi": qi, f"{name}.w": w, f"{name}.kc": kc, f"{name}.positions": pos,
                  f"{name}.scores": torch.where(vis, scores, torch.full_like(scores, -math.inf)).reshape(14, 5).numpy(),
                  f"{name}.selected": sel.reshape(14, 3)})
        cases[name] = (f"qi [B*7 queries (row-major), Hi=2, di=6], w [B*7, Hi] (weights_proj output), kc [B=2, n=5, "
                       f"di], query positions {list(positions)} in both rows (positions [B, 7]), r 4, topk 3, "
                       f"softmax_scale 6^-0.5, weights_scaling 2^-0.5: scores [B*7, n] = sum_h relu(qi_h . kc_j) * "
                       f"softmax_scale * w_h * weights_scaling, -inf where block j is not complete ((j+1) r > p+1); "
                       f"selected [B*7, 3] int32 = jax.lax.top_k order (score descending, lower index first), "
                       f"invisible picks -1 (last); min gap among the top 4 visible scores {min(gaps):.3g}")

    index_case("index", range(13, 20), 910)
    index_case("index_early", range(4, 11), 920)

    # Compressed attention with sinks over [window keys | blocks | sink]
    q, cache, blocks, sinks = f32(g, (2, 5, 4, 8), 0.5), f32(g, (2, 20, 8)), f32(g, (2, 4, 8)), f32(g, (4,), 0.5)
    qpos = np.array([range(15, 20), range(10, 15)], dtype=np.int32)
    dist = torch.from_numpy(qpos[:, :, None] - np.arange(20)[None, None, :])
    window = (dist >= 0) & (dist < 6)
    vis = visible(qpos, np.tile(np.arange(4, dtype=np.int32) * 4, (2, 1)), 4)
    sel = np.array([[[0, 2], [3, -1], [1, 0], [-1, -1], [2, 3]],
                    [[1, -1], [0, 2], [2, 1], [-1, -1], [0, -1]]], dtype=np.int32)
    assert all(vis[b, i, j] for (b, i, _), j in np.ndenumerate(sel) if j >= 0)
    keys = torch.cat([t64(cache), t64(blocks)], dim=1)
    t.update({"attend.q": q, "attend.kv": cache, "attend.blocks": blocks, "attend.sinks": sinks,
              "attend.q_positions": qpos, "attend.kv_lengths": np.array([20, 15], dtype=np.int32),
              "attend_csa.selected": sel.reshape(10, 2),
              "attend_hca.out": attend(t64(q), keys, torch.cat([window, vis], -1), t64(sinks)).numpy(),
              "attend_csa.out": attend(t64(q), keys, torch.cat([window, selection_mask(sel, 4)], -1),
                                       t64(sinks)).numpy()})
    cases["attend"] = ("q [B=2, 5 queries, N=4, d=8] (used as given: no scaling), kv [B, 20 cache slots, d] (one KV "
                       "head, keys = values; row 1 holds 15 valid entries, slots 15.. are junk that causality "
                       "excludes),"
                       " q_positions [B, 5] = cache indices 15..19 and 10..14, window 6 (0 <= p - s < 6), blocks "
                       "[B, 4, d] (keys = values), sinks [N]: out [B, 5, N, d] = softmax over [allowed window keys | "
                       "allowed blocks | sink] (the sink's share dropped) times the keys")
    cases["attend_hca"] = "attend with block j allowed iff (j+1)*4 <= p+1"
    cases["attend_csa"] = "attend with the blocks in attend_csa.selected [B*5 (row-major), 2] (-1 = none) allowed"
    d = case_dir("deepseek4_ops")
    save_safetensors(f"{d}/ops.safetensors", {kk: np.ascontiguousarray(v) for kk, v in t.items()})
    save_meta(d, {"what": "DeepSeek-V4 compressed-attention pieces (attention_compressed.py, attention_op.py), float64 "
                          "outputs from float32 inputs; tensors named <case>.<tensor> in ops.safetensors",
                  "cases": cases})


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    ops_case()
    model_case("deepseek4_model", 71, settings(), 2, 37, False, "scan_layers: false\n",
               "4-layer DeepSeek-V4 model (compress_ratios [0, 4, 8, 4]: sliding window, CSA + indexer, HCA r 8, CSA; "
               "layer 0 hash-routed; mHC k 2), float64 from float32 weights. Unscanned only: the scanned block "
               "hard-codes ratios 128 and 4")
    # emb_dim 16 here keeps the directory (two weight layouts, k 4 streams) well under 1 MB
    model_case("deepseek4_scanned_model", 81, settings(D=16, mhc_k=4, ratios=[0, 0, 4, 128, 4, 128, 4], hash=3), 2,
               21, True, "", "7-layer DeepSeek-V4 model in the deepseek4-tiny pattern (compress_ratios [0, 0, 4, 128, "
               "4, 128, 4], layers 0-2 hash-routed prefix, layers 3-6 two DeepSeek4ScannableBlocks; no HCA block "
               "completes at T 21), mHC k 4, emb_dim 16, float64 from float32 weights")
    print("wrote tests/fixtures/deepseek4_model, deepseek4_scanned_model, deepseek4_ops")
