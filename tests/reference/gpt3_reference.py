"""GPT-3 layers and a tiny GPT-3 model, re-stated in PyTorch float64 from MaxText's semantics (spec: norms-dense-mlp.md,
attention.md §1-2 and §4, decoder.md §GPT3): Gpt3LayerNorm with (scale + 1), two-pass variance; q / sqrt(head_dim);
causal + segment mask by replacement with -0.7*FLT_MAX; MLP with its own pre-norm and tanh-GELU; tied logits with a
bfloat16-rounded embedding table.

Writes tests/fixtures/gpt3_*/. Run: /usr/bin/python3 tests/reference/gpt3_reference.py
"""
import math

import numpy as np
import torch

from common import bf16_round, case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64

MASK = -0.7 * float(np.finfo(np.float32).max)


def layer_norm(x, scale, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * (scale + 1.0) + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(x, w, cfg, seg=None, inter=None):
    """x [B,T,D]; w: MaxText params (float64 tensors) of self_attention. `inter` (a dict) receives the sub-module
    outputs under their MaxText names: qkv_proj (fused, before the 1/sqrt(head_dim) scaling), attention_op [B,T,N,H]."""
    B, T, D = x.shape
    N, H = cfg["heads"], cfg["head_dim"]
    if cfg["fused"]:
        qkv = torch.einsum("btd,dknh->btknh", x, w["qkv_proj.kernel"]) + w["qkv_proj.bias"]
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if inter is not None:
            inter["qkv_proj"] = qkv
    else:
        q = torch.einsum("btd,dnh->btnh", x, w["query.kernel"]) + w["query.bias"]
        k = torch.einsum("btd,dnh->btnh", x, w["key.kernel"]) + w["key.bias"]
        v = torch.einsum("btd,dnh->btnh", x, w["value.kernel"]) + w["value.bias"]
    q = q / math.sqrt(H)
    logits = torch.einsum("btnh,bsnh->bnts", q, k)
    allowed = torch.ones(B, T, T, dtype=torch.bool).tril()
    if seg is not None:
        s = torch.from_numpy(seg)
        allowed = allowed & (s[:, :, None] == s[:, None, :]) & (s[:, None, :] >= 0)
    logits = torch.where(allowed[:, None], logits, torch.full_like(logits, MASK))
    m = logits.max(-1, keepdim=True).values
    e = torch.exp(logits - m)
    o = torch.einsum("bnts,bsnh->btnh", e, v) / e.sum(-1)[..., None].permute(0, 2, 1, 3)
    if inter is not None:
        inter["attention_op"] = o
    return torch.einsum("btnh,nhd->btd", o, w["out.kernel"]) + w["out.bias"]


def mlp(x, w, eps, inter=None):
    h = layer_norm(x, w["mlp_layer_norm.scale"], w["mlp_layer_norm.bias"], eps)
    if inter is not None:
        inter["mlp_layer_norm"] = h
    return gelu_tanh(h @ w["wi.kernel"] + w["wi.bias"]) @ w["wo.kernel"] + w["wo.bias"]


def sub(w, prefix):
    return {k[len(prefix):]: v for k, v in w.items() if k.startswith(prefix)}


def decoder_layer(x, w, cfg, seg=None):
    eps = cfg["eps"]
    lnx = layer_norm(x, w["pre_self_attention_norm.scale"], w["pre_self_attention_norm.bias"], eps)
    ai, mi = {}, {}
    a = attention(lnx, sub(w, "self_attention."), cfg, seg, ai)
    h = a + x
    m = mlp(h, sub(w, "mlp."), eps, mi)
    return h + m, {"attn": a, "mlp": m, "pre_self_attention_norm": lnx,
                   **{"self_attention." + k: v for k, v in ai.items()}, **{"mlp." + k: v for k, v in mi.items()}}


def layer_weights(g, D, N, H, F, fused, prefix=""):
    w = {}
    s = 1.0 / math.sqrt(D)
    if fused:
        w["self_attention.qkv_proj.kernel"] = f32(g, (D, 3, N, H), s)
        w["self_attention.qkv_proj.bias"] = f32(g, (3, N, H), 0.1)
    else:
        for n in ("query", "key", "value"):
            w[f"self_attention.{n}.kernel"] = f32(g, (D, N, H), s)
            w[f"self_attention.{n}.bias"] = f32(g, (N, H), 0.1)
    w["self_attention.out.kernel"] = f32(g, (N, H, D), 1.0 / math.sqrt(N * H))
    w["self_attention.out.bias"] = f32(g, (D,), 0.1)
    for n in ("pre_self_attention_norm", "mlp.mlp_layer_norm"):
        w[f"{n}.scale"] = f32(g, (D,), 0.2)
        w[f"{n}.bias"] = f32(g, (D,), 0.2)
    w["mlp.wi.kernel"] = f32(g, (D, F), s)
    w["mlp.wi.bias"] = f32(g, (F,), 0.1)
    w["mlp.wo.kernel"] = f32(g, (F, D), 1.0 / math.sqrt(F))
    w["mlp.wo.bias"] = f32(g, (D,), 0.1)
    return {prefix + k: v for k, v in w.items()}


def to64(w):
    return {k: t64(v) for k, v in w.items()}


def layer_case(name, seed, B, T, D, N, H, F, fused, seg):
    g = rng(seed)
    cfg = {"heads": N, "head_dim": H, "fused": fused, "eps": 1e-5}
    w = layer_weights(g, D, N, H, F, fused)
    x = f32(g, (B, T, D), 1.0, 0.3)
    out, inter = decoder_layer(t64(x), to64(w), cfg, seg)
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    if seg is not None:
        save_npy(d, "segment_ids", seg.astype(np.int32))
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", inter["attn"].numpy())
    save_npy(d, "mlp", inter["mlp"].numpy())
    save_meta(d, {"what": "Gpt3DecoderLayer, float64 from float32 inputs", "batch": B, "length": T, "emb_dim": D,
                  "heads": N, "head_dim": H, "mlp_dim": F, "fused_qkv": fused, "eps": 1e-5,
                  "segment_ids": seg is not None})


def model_case():
    """A 2-layer GPT-3 (gpt3-52k-like keys): embed + trainable positions, layers, final Gpt3LayerNorm, tied logits."""
    g = rng(7)
    D, N, H, F, L, V, P, B, T = 16, 2, 8, 64, 2, 96, 32, 2, 11
    cfg = {"heads": N, "head_dim": H, "fused": True, "eps": 1e-5}
    w = {"token_embedder.embedding": f32(g, (V, D)), "decoder.position_embedder.embedding": f32(g, (P, D))}
    for i in range(L):
        w.update(layer_weights(g, D, N, H, F, True, f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.2)
    w["decoder.decoder_norm.bias"] = f32(g, (D,), 0.2)
    tokens = g.integers(0, V, size=(B, T)).astype(np.int32)
    w64 = to64(w)
    # Activations under the names `maxtext compare` captures (each a module's output, as Flax's
    # capture_intermediates records them): token_embedder is the token lookup alone; <layer>.input the residual
    # stream entering a layer (token + position embeddings for the first).
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    outs = {"token_embedder": x}
    x = x + w64["decoder.position_embedder.embedding"][torch.arange(T)][None]
    for i in range(L):
        outs[f"decoder.layers_{i}.input"] = x
        x, inter = decoder_layer(x, sub(w64, f"decoder.layers_{i}."), cfg)
        outs[f"decoder.layers_{i}"] = x
        outs[f"decoder.layers_{i}.self_attention"] = inter["attn"]
        outs[f"decoder.layers_{i}.mlp"] = inter["mlp"]
        for k in ("pre_self_attention_norm", "self_attention.qkv_proj", "self_attention.attention_op",
                  "mlp.mlp_layer_norm"):
            outs[f"decoder.layers_{i}.{k}"] = inter[k]
    x = layer_norm(x, w64["decoder.decoder_norm.scale"], w64["decoder.decoder_norm.bias"], 1e-5)
    outs["decoder.decoder_norm"] = x
    logits = x @ t64(bf16_round(w["token_embedder.embedding"])).T  # MaxText attends with a bf16-rounded table
    d = case_dir("gpt3_model")
    save_safetensors(f"{d}/model.safetensors", w)
    # The same weights in MaxText's scanned layout: one tensor per parameter, layers stacked on axis 1.
    scanned = {k: v for k, v in w.items() if not k.startswith("decoder.layers_")}
    for k in w:
        if k.startswith("decoder.layers_0."):
            leaf = k[len("decoder.layers_0."):]
            scanned["decoder.layers." + leaf] = np.stack([w[f"decoder.layers_{i}.{leaf}"] for i in range(L)], axis=1)
    save_safetensors(f"{d}/model_scanned.safetensors", scanned)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    np.savez(f"{d}/activations.npz", **{k: v.numpy() for k, v in outs.items()}, logits=logits.numpy())
    with open(f"{d}/config.yml", "w") as f:
        f.write(f"""# The tiny GPT-3 of gpt3_reference.py (gpt3-52k keys, 2 layers).
decoder_block: "gpt3"
dtype: "float32"
base_emb_dim: {D}
base_num_query_heads: {N}
base_num_kv_heads: {N}
base_mlp_dim: {F}
base_num_decoder_layers: {L}
head_dim: {H}
trainable_position_size: {P}
mlp_activations: ["gelu"]
vocab_size: {V}
logits_via_embedding: true
normalize_embedding_logits: false
normalization_layer_epsilon: 1.e-05
use_iota_embed: true
fused_qkv: true
max_target_length: {P}
""")
    save_meta(d, {"what": "2-layer GPT-3, float64 from float32 weights; logits use a bf16-rounded embedding",
                  "tokens": [B, T], "vocab": V})


def sinusoid(T, D):
    """MaxText PositionalEmbedding: [sin(p*inv_i), cos(p*inv_i)], inv_i = exp(-i*ln(1e4)/max(n-1,1)), n = D/2."""
    n = D // 2
    inc = math.log(10000.0) / max(n - 1, 1)
    inv = torch.exp(-torch.arange(n, dtype=torch.float64) * inc)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    return torch.cat([torch.sin(ang), torch.cos(ang)], -1)


def model_sincap_case():
    """GPT-3 block with untrainable sinusoidal positions, tied logits divided by sqrt(D) and a final soft cap of 2."""
    g = rng(11)
    D, N, H, F, L, V, B, T, cap = 16, 2, 8, 32, 1, 64, 2, 6, 2.0
    cfg = {"heads": N, "head_dim": H, "fused": True, "eps": 1e-5}
    w = {"token_embedder.embedding": f32(g, (V, D))}
    w.update(layer_weights(g, D, N, H, F, True, "decoder.layers_0."))
    w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.2)
    w["decoder.decoder_norm.bias"] = f32(g, (D,), 0.2)
    tokens = g.integers(0, V, size=(B, T)).astype(np.int32)
    w64 = to64(w)
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()] + sinusoid(T, D)[None]
    x, _ = decoder_layer(x, sub(w64, "decoder.layers_0."), cfg)
    x = layer_norm(x, w64["decoder.decoder_norm.scale"], w64["decoder.decoder_norm.bias"], 1e-5)
    logits = (x @ t64(bf16_round(w["token_embedder.embedding"])).T) / math.sqrt(D)
    logits = cap * torch.tanh(logits / cap)
    d = case_dir("gpt3_model_sincap")
    save_safetensors(f"{d}/model.safetensors", w)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    with open(f"{d}/config.yml", "w") as f:
        f.write(f"""# GPT-3 block with sinusoidal positions, normalized tied logits and a final soft cap (gpt3_reference.py).
decoder_block: "gpt3"
dtype: "float32"
base_emb_dim: {D}
base_num_query_heads: {N}
base_num_kv_heads: {N}
base_mlp_dim: {F}
base_num_decoder_layers: {L}
head_dim: {H}
use_untrainable_positional_embedding: true
mlp_activations: ["gelu"]
vocab_size: {V}
logits_via_embedding: true
normalize_embedding_logits: true
final_logits_soft_cap: {cap}
normalization_layer_epsilon: 1.e-05
fused_qkv: true
max_target_length: 16
""")
    save_meta(d, {"what": "GPT-3 block, sinusoidal positions, tied logits / sqrt(D), soft cap 2", "tokens": [B, T]})


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    seg = np.array([[1, 1, 1, 1, 2, 2, 2, 2, 2], [1, 1, 1, 1, 1, 1, 1, 0, 0]], dtype=np.int32)
    layer_case("gpt3_layer_fused_seg", 1, 2, 9, 32, 4, 8, 64, True, seg)
    layer_case("gpt3_layer_unfused", 2, 2, 7, 32, 3, 6, 48, False, None)
    model_case()
    model_sincap_case()
    print("wrote tests/fixtures/gpt3_*")
