"""A llama2 student saved in MaxText's learn-to-init mode (layers/learn_to_init_layer.py): the attention projections
query / key / value / out hold a frozen teacher tensor C and learnt factors (A, B) or a general map W instead of a
kernel. The effective kernel, computed here in PyTorch float64 with the contractions of MaxText's _calc_attn_weight:
  q/k/v  factorised: einsum("bxy,xu->buy", C, A) then einsum("buy,yv->buv", ., B)      C [D, Xt, Yt]
         general:    einsum("bxy,xyuv->buv", C, W)
  out    factorised: einsum("xyb,xu->yub", C, A) then einsum("yub,vy->uvb", ., B)      C [Xt, Yt, D]
         general:    einsum("xyb,xyuv->uvb", C, W)
then the llama2 model (attention_reference.py's decoder_layer) with those kernels. Teacher: 6 query heads, 3 kv heads,
head_dim 12; student: 4 / 2 / 8.

Writes tests/fixtures/llama2lti_model/: model.safetensors (layer 0 factorised, layer 1 general maps),
model_scanned.safetensors (both layers factorised, stacked on axis 1 as MaxText's scan does), model_plain.safetensors
(the llama2 checkpoint of the collapsed kernels, rounded to float32), tokens, logits (float64), meta.json.
Run: /usr/bin/python3 tests/reference/llama2lti_reference.py
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

B, T = 2, 9
D, N, K, H, F, V, L = 32, 4, 2, 8, 48, 64, 2
NT, KT, HT = 6, 3, 12


def factors(g, proj, general):
    """(tensors, collapsed kernel float64) of one LTI projection."""
    heads, theads = (N, NT) if proj in ("query", "out") else (K, KT)
    qs = 1.0 / math.sqrt(H) if proj == "query" else 1.0  # a llama2 query kernel carries the 1/sqrt(head_dim)
    if proj == "out":
        C = f32(g, (theads, HT, D), 1.0 / math.sqrt(theads * HT))
    else:
        C = f32(g, (D, theads, HT), qs / math.sqrt(D))
    c = t64(C)
    if general:
        W = f32(g, (theads, HT, heads, H), 1.0 / math.sqrt(theads * HT / 4))
        w = t64(W)
        k = torch.einsum("xyb,xyuv->uvb", c, w) if proj == "out" else torch.einsum("bxy,xyuv->buv", c, w)
        return {"C": C, "W": W}, k
    A = f32(g, (theads, heads), 1.0 / math.sqrt(theads / 2))
    if proj == "out":
        Bm = f32(g, (H, HT), 1.0 / math.sqrt(HT / 2))
        k = torch.einsum("yub,vy->uvb", torch.einsum("xyb,xu->yub", c, t64(A)), t64(Bm))
    else:
        Bm = f32(g, (HT, H), 1.0 / math.sqrt(HT / 2))
        k = torch.einsum("buy,yv->buv", torch.einsum("bxy,xu->buy", c, t64(A)), t64(Bm))
    return {"C": C, "A": A, "B": Bm}, k


def main():
    torch.set_default_dtype(torch.float64)
    g = rng(91)
    lti, plain, kernels = {}, {}, {}
    common = {"token_embedder.embedding": f32(g, (V, D)), "decoder.decoder_norm.scale": f32(g, (D,), 0.2, 1.0),
              "decoder.logits_dense.kernel": f32(g, (D, V), 1 / math.sqrt(D))}
    scan_parts = {}
    for i in range(L):
        p = f"decoder.layers_{i}."
        rest = {p + "pre_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
                p + "post_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
                p + "mlp.wi_0.kernel": f32(g, (D, F), 1 / math.sqrt(D)),
                p + "mlp.wi_1.kernel": f32(g, (D, F), 1 / math.sqrt(D)),
                p + "mlp.wo.kernel": f32(g, (F, D), 1 / math.sqrt(F))}
        lti.update(rest)
        plain.update(rest)
        for proj in ("query", "key", "value", "out"):
            t, k = factors(g, proj, general=(i == 1))
            for n, v in t.items():
                lti[f"{p}self_attention.{proj}.{n}"] = v
            kernels[f"{p}self_attention.{proj}.kernel"] = k
            plain[f"{p}self_attention.{proj}.kernel"] = k.numpy().astype(np.float32)
            # the scanned file: factorised for every layer (its own draws)
            ts, ks = factors(g, proj, general=False)
            scan_parts.setdefault(proj, []).append((ts, ks))
    lti.update(common)
    plain.update(common)
    tokens = g.integers(0, V, size=(B, T)).astype(np.int32)
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    a = {"heads": N, "kv_heads": K, "head_dim": H, "eps": 1e-5, "rope": AR.default_rope(H, 10000.0)}

    def forward(ws, ks):
        w64 = {k: t64(v) for k, v in ws.items() if ".self_attention." not in k}
        w64.update(ks)
        x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
        for i in range(L):
            x = AR.decoder_layer("llama2", x, AR.sub(w64, f"decoder.layers_{i}."), a, pos)[0]
        return AR.rms_norm(x, w64["decoder.decoder_norm.scale"], 1e-5) @ w64["decoder.logits_dense.kernel"]

    logits = forward(plain, kernels)
    # Scanned checkpoint: the layer axis at position 1 of every stacked tensor (C [D, L, x, y], A [x, L, u], ...).
    scan = dict(common)
    scan_kernels = {}
    for n in ("pre_self_attention_layer_norm.scale", "post_self_attention_layer_norm.scale", "mlp.wi_0.kernel",
              "mlp.wi_1.kernel", "mlp.wo.kernel"):
        arrs = [plain[f"decoder.layers_{i}.{n}"] for i in range(L)]
        scan["decoder.layers." + n] = np.stack(arrs, axis=1)  # param_scan_axis 1 ([D] scales become [D, L])
    for proj, parts in scan_parts.items():
        for n in ("C", "A", "B"):
            scan[f"decoder.layers.self_attention.{proj}.{n}"] = np.stack([ts[n] for ts, _ in parts], axis=1)
        for i, (_, ks) in enumerate(parts):
            scan_kernels[f"decoder.layers_{i}.self_attention.{proj}.kernel"] = ks
    scan_logits = forward(plain, scan_kernels)
    d = case_dir("llama2lti_model")
    save_safetensors(f"{d}/model.safetensors", lti)
    save_safetensors(f"{d}/model_scanned.safetensors", scan)
    save_safetensors(f"{d}/model_plain.safetensors", plain)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    save_npy(d, "logits_scanned", scan_logits.numpy())
    cfg = {"decoder_block": "llama2lti", "dtype": "float32", "base_emb_dim": D, "base_num_query_heads": N,
           "base_num_kv_heads": K, "head_dim": H, "base_mlp_dim": F, "base_num_decoder_layers": L, "vocab_size": V,
           "normalization_layer_epsilon": 1e-5, "rope_max_timescale": 10000.0, "max_target_length": 64,
           "logits_via_embedding": False, "scan_layers": False}
    save_meta(d, {"what": "2-layer llama2 student with learn-to-init attention factors (teacher 6/3 heads of 12, "
                          "student 4/2 heads of 8), float64 logits from the collapsed kernels",
                  "config": cfg, "tokens": [B, T]})
    print("wrote", d)


if __name__ == "__main__":
    main()
