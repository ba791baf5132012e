"""DeepSeek's manifold-constrained hyper-connections (mHC and mHC-lite), re-stated in PyTorch float64.

Source read: MaxText e591f30 src/maxtext/layers/mhc.py (ManifoldConstrainedHyperConnections, sinkhorn,
get_permutation_matrices, get_functions), models/deepseek.py (mhc_attention / mhc_mlp around MLA and the FFN) and
layers/decoders.py (the k-stream expansion after the embedding and the stream sum before the final norm). Written from
that math, not from the C++ code: whole-tensor einsums, Sinkhorn as alternating divisions, the lite form as an explicit
sum over itertools permutation matrices. Everything is float64 from float32 weights (MaxText runs Sinkhorn in f32; the
fixtures' tolerance covers that).

Writes tests/fixtures/deepseek_mhc_{model,lite_model}/ and tests/fixtures/mhc_maps/.
Run: /usr/bin/python3 tests/reference/mhc_reference.py
"""
import itertools
import math

import numpy as np
import torch

from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64
from deepseek_reference import (MIN_MARGIN, deepseek_layer, deepseek_layer_weights, deepseek_moe_block,
                                deepseek_settings, deepseek_yaml, mla, mlp_block, prefixed, rms_norm, scanned, sub, to64,
                                write_yaml)


def sinkhorn(t, iters):
    """mhc.py sinkhorn: row softmax + eps, normalise columns, then iters - 1 rounds of rows and columns."""
    eps = 1e-6
    t = torch.softmax(t, dim=-1) + eps
    t = t / (t.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        t = t / (t.sum(dim=-1, keepdim=True) + eps)
        t = t / (t.sum(dim=-2, keepdim=True) + eps)
    return t


def permutation_matrices(k):
    """get_permutation_matrices: eye(k)[perm] for every permutation in itertools order, [k!, k, k]."""
    perms = list(itertools.permutations(range(k)))
    return torch.eye(k, dtype=torch.float64)[torch.tensor(perms)]


def mhc_maps(hp, hq, hr, w, k, lite, iters):
    """The pre [.., k], post [.., k] and residual [.., k, k] mappings from the projections."""
    pre = torch.sigmoid(w["pre_alpha_scale"] * hp + w["pre_beta"]) + 1e-6
    post = 2.0 * torch.sigmoid(w["post_alpha_scale"] * hq + w["post_beta"])
    if lite:
        weights = torch.softmax(w["res_alpha_scale"] * hr + w["res_beta"], dim=-1)
        res = torch.einsum("...n,nij->...ij", weights, permutation_matrices(k))
    else:
        t = (w["res_alpha_scale"] * hr).reshape(*hr.shape[:-1], k, k) + w["res_beta"]
        res = sinkhorn(t, iters)
    return pre, post, res


def mhc(x, w, c, branch):
    """ManifoldConstrainedHyperConnections.__call__ (non-kernel path) on x [B, T, k, D]; branch(layer_input) includes
    the layer's own norm (norm_fn then branch_fn)."""
    B, T, k, D = x.shape
    n = rms_norm(x.reshape(B, T, k * D), w["mhc_norm.scale"], c["eps"])
    pre, post, res = mhc_maps(n @ w["pre_alpha"], n @ w["post_alpha"], n @ w["res_alpha"], w, k, c["lite"],
                              c["sinkhorn"])
    f = branch(torch.einsum("btk,btkd->btd", pre, x))
    return torch.einsum("btij,btid->btjd", res, x) + post[..., None] * f[:, :, None, :]


def mhc_weights(g, c):
    k, D = c["mhc_k"], c["D"]
    R = math.factorial(k) if c["lite"] else k * k
    return {"mhc_norm.scale": f32(g, (k * D,), 0.1, 1.0),
            "pre_alpha_scale": f32(g, (1,), 0.2, 1.0), "post_alpha_scale": f32(g, (1,), 0.2, 1.0),
            "res_alpha_scale": f32(g, (1,), 0.2, 1.0),
            "pre_alpha": f32(g, (k * D, k), 1 / math.sqrt(k * D)), "post_alpha": f32(g, (k * D, k), 1 / math.sqrt(k * D)),
            "res_alpha": f32(g, (k * D, R), 1 / math.sqrt(k * D)),
            "pre_beta": f32(g, (k,), 0.5), "post_beta": f32(g, (k,), 0.5),
            "res_beta": f32(g, (R,) if c["lite"] else (k, k), 0.5)}


def mhc_layer(x, w, c, pos, moe, margins):
    """deepseek.py DeepSeek{Dense,MoE}Layer with is_mhc_enabled: mhc_attention then mhc_mlp."""
    def attention(li):
        return mla(rms_norm(li, w["pre_self_attention_layer_norm.scale"], c["eps"]), sub(w, "self_attention."), c, pos)

    def ffn(li):
        hn = rms_norm(li, w["post_self_attention_layer_norm.scale"], c["eps"])
        return deepseek_moe_block(hn, sub(w, "DeepSeekMoeBlock_0."), c, margins) if moe else mlp_block(hn, sub(w, "mlp."))

    h = mhc(x, sub(w, "mhc_attention."), c, attention)
    return mhc(h, sub(w, "mhc_mlp."), c, ffn)


def model_forward(w64, tokens, c, names, k, before_layer=None):
    """decoders.py around the layers: the embedding, mhc_expand into k streams, each layer (mHC-wrapped for k > 1, the
    plain DeepSeek layer on the one stream for k = 1), mhc_reduce (the stream sum) and the final norm. `before_layer`
    (i, prefix, x, acts) -> x may add to the streams before layer i (Engram). Returns (logits, acts, margins)."""
    B, T = tokens.shape
    D = c["D"]
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    acts = {"token_embedder": x}
    x = x[:, :, None, :].repeat(1, 1, k, 1)  # mhc_expand
    margins = []
    for i, (prefix, moe) in enumerate(names):
        if before_layer is not None:
            x = before_layer(i, prefix, x, acts)
        if k > 1:
            x = mhc_layer(x, sub(w64, prefix + "."), c, pos, moe, margins)
        else:
            x = deepseek_layer(x[:, :, 0, :], sub(w64, prefix + "."), c, pos, moe, margins)[0][:, :, None, :]
        acts[prefix] = x.reshape(B, T, k * D)
    x = rms_norm(x.sum(dim=2), w64["decoder.decoder_norm.scale"], c["eps"])  # mhc_reduce, final norm
    acts["decoder.decoder_norm"] = x
    return x @ w64["decoder.logits_dense.kernel"], acts, margins


def model_case(name, seed, k, lite, iters, L, dense):
    c = deepseek_settings(gate_scale=2.0, L=L, dense=dense)
    c.update(mhc_k=k, lite=lite, sinkhorn=iters)
    B, T = 2, 9
    names = [(f"decoder.dense_layers_{i}", False) for i in range(dense)]
    names += [(f"decoder.moe_layers_{j}", True) for j in range(L - dense)]
    for attempt in range(50):
        g = rng(seed + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
        for prefix, moe in names:
            lw = deepseek_layer_weights(g, c, moe)
            lw.update(prefixed(mhc_weights(g, c), "mhc_attention."))
            lw.update(prefixed(mhc_weights(g, c), "mhc_mlp."))
            w.update(prefixed(lw, prefix + "."))
        w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.1, 1.0)
        w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        logits, acts, margins = model_forward(to64(w), tokens, c, names, k)
        if not margins or min(margins) >= MIN_MARGIN:
            break
    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", scanned(w, [("dense_layers", dense), ("moe_layers", L - dense)]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for kk, v in acts.items():
        save_npy(d, "act_" + kk, v.numpy())
    extra = f"mhc_expansion_rate: {k}\nsinkhorn_iterations: {iters}\nenable_mhc_lite: {str(lite).lower()}\n"
    write_yaml(d, deepseek_yaml(c, extra))
    save_meta(d, {"what": f"{L}-layer DeepSeek-V3-style model with mHC (k {k}, {'lite' if lite else f'Sinkhorn {iters}'}),"
                          " float64 from float32 weights", "tokens": [B, T], "vocab": c["V"], "streams": k,
                  "min_routing_margin": min(margins) if margins else None})


def maps_case():
    """The mappings alone (backend mhc_maps) on random projections, several k / forms."""
    d = case_dir("mhc_maps")
    cases = []
    for name, k, lite, iters, seed in [("full4_20", 4, False, 20, 1), ("full3_2", 3, False, 2, 2), ("full8_20", 8, False, 20, 3),
                                       ("lite3", 3, True, 0, 4), ("lite5", 5, True, 0, 5), ("full2_1", 2, False, 1, 6)]:
        g = rng(100 + seed)
        M = 7
        R = math.factorial(k) if lite else k * k
        w = {"pre_alpha_scale": f32(g, (1,), 0.5, 1.0), "post_alpha_scale": f32(g, (1,), 0.5, 1.0),
             "res_alpha_scale": f32(g, (1,), 0.5, 1.0), "pre_beta": f32(g, (k,)), "post_beta": f32(g, (k,)),
             "res_beta": f32(g, (R,) if lite else (k, k))}
        h = {"hp": f32(g, (M, k), 2.0), "hq": f32(g, (M, k), 2.0), "hr": f32(g, (M, R), 2.0)}
        pre, post, res = mhc_maps(t64(h["hp"]), t64(h["hq"]), t64(h["hr"]), to64(w), k, lite, iters)
        out = {**w, **h, "pre": pre.numpy(), "post": post.numpy(), "res": res.reshape(M, k * k).numpy()}
        save_safetensors(f"{d}/{name}.safetensors", {kk: np.ascontiguousarray(v) for kk, v in out.items()})
        cases.append({"name": name, "k": k, "lite": lite, "sinkhorn_iterations": iters, "rows": M})
    save_meta(d, {"what": "mHC mappings (mhc.py mapping / res_mapping / sinkhorn) in float64 from float32 inputs",
                  "cases": cases})


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    maps_case()
    model_case("deepseek_mhc_model", 51, k=4, lite=False, iters=20, L=3, dense=1)
    model_case("deepseek_mhc_lite_model", 61, k=3, lite=True, iters=20, L=2, dense=1)
    print("wrote tests/fixtures/deepseek_mhc_model, deepseek_mhc_lite_model, mhc_maps")
