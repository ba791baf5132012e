"""MaxText's llama4 decoder block (text part), re-stated in PyTorch float64 from float32 inputs and weights.

MaxText semantics (commit e591f30 read: models/llama4.py Llama4DecoderLayer / Llama4ScannableBlock, layers/moe.py
RoutedMoE and RoutedAndSharedMoE for DecoderBlockType.LLAMA4, layers/attentions.py):
  layer i:  h = x + Attention(RMSNorm_pre(x));  out = h + FFN(RMSNorm_post(h))
  NoPE layers ((i + 1) % nope_layer_interval == 0): global causal attention, no RoPE, queries times
            1 + 0.1 * log(floor((pos + 1) / 8192) + 1) (temperature_tuning); other layers: chunked causal attention
            (chunk_attn_window_size) with Llama-3.1 RoPE and, with use_qk_norm, q and k L2-normalised after RoPE
            (x * rsqrt(mean(x^2) + eps), no scale). Queries times head_dim^-0.5 after that (query_pre_attn_scalar).
  MoE layers ((i + 1) % interleave_moe_layer_step == 0): `Llama4MoEBlock_0` = RoutedMoE `MoeBlock_0` (top-1 of the
            raw gate logits z; the chosen expert reads x * sigmoid(z_top) and its output is combined with weight 1)
            + MlpBlock `shared_experts` (hidden shared_experts * moe_mlp_dim); other layers: MlpBlock `mlp` (mlp_dim).
The attention is attention_reference.py's (written from the spec). Writes tests/fixtures/llama4_{layer_dense_rope,
layer_moe_nope,model}/. Run: /usr/bin/python3 tests/reference/llama4_reference.py
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
import deepseek_reference as DR  # noqa: E402
from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

LAYER_MARGIN = 0.03  # routing decisions of the layer fixtures this far from a tie: bf16 routes like float64


def settings():
    # Every contracted width a multiple of 32 (Q8_0 storage works too). 8 layers: NoPE every 4th, MoE every 2nd, so
    # the cycle of 4 covers dense+RoPE, MoE+RoPE, dense+RoPE, MoE+NoPE and the scanned tree stacks 2 repetitions.
    return dict(D=32, N=4, K=2, H=8, F=64, Fm=32, E=4, k=1, eps=1e-5, theta=500000.0, V=64, L=8, chunk=3, nope=4,
                step=2, cycle=4)


def config_keys(c):
    return {"decoder_block": "llama4", "dtype": "float32", "base_emb_dim": c["D"], "base_num_query_heads": c["N"],
            "base_num_kv_heads": c["K"], "head_dim": c["H"], "base_mlp_dim": c["F"], "base_moe_mlp_dim": c["Fm"],
            "normalization_layer_epsilon": c["eps"], "rope_max_timescale": c["theta"], "rope_type": "llama3.1",
            "max_target_length": 8200, "base_num_decoder_layers": c["L"], "vocab_size": c["V"],
            "logits_via_embedding": False, "scan_layers": False, "num_experts": c["E"], "num_experts_per_tok": 1,
            "shared_experts": 1, "use_qk_norm": True, "nope_layer_interval": c["nope"],
            "interleave_moe_layer_step": c["step"], "inhomogeneous_layer_cycle_interval": c["cycle"],
            "temperature_tuning": True, "chunk_attn_window_size": c["chunk"]}


def is_nope(i, c):
    return c["nope"] > 0 and (i + 1) % c["nope"] == 0


def is_moe(i, c):
    return c["step"] > 0 and (i + 1) % c["step"] == 0


def llama4_moe(x, w, c, margins=None):
    """RoutedAndSharedMoE for llama4 on x [B,T,D]: top-1 expert on x * sigmoid(logit), weight 1, plus the shared MLP."""
    B, T, D = x.shape
    r = DR.sub(w, "MoeBlock_0.")
    z = x @ r["gate.kernel"]
    top = z.max(-1)
    if margins is not None:
        second = z.topk(2, dim=-1).values[..., 1]
        margins.append(float((top.values - second).min()))
    xs = x * torch.sigmoid(top.values)[..., None]
    y = torch.zeros(B, T, D)
    for e in range(c["E"]):
        h = (DR.silu(xs @ r["wi_0"][e]) * (xs @ r["wi_1"][e])) @ r["wo"][e]
        y = y + (top.indices == e)[..., None] * h
    return y + AR.mlp(x, DR.sub(w, "shared_experts."))


def llama4_layer(x, w, c, pos, i, margins=None):
    nope = is_nope(i, c)
    a = {"heads": c["N"], "kv_heads": c["K"], "head_dim": c["H"], "eps": c["eps"],
         "rope": None if nope else AR.llama31_rope(c["H"], c["theta"], True),
         "type": "global" if nope else "chunk", "chunk": c["chunk"], "q_scalar": c["H"] ** -0.5,
         "llama4_l2": True, "temperature_tuning": True, "tt_scale": 0.1, "tt_floor": 8192.0}
    at = AR.attention(AR.rms_norm(x, w["pre_self_attention_layer_norm.scale"], c["eps"]), DR.sub(w, "self_attention."),
                      a, pos)
    h = x + at
    hn = AR.rms_norm(h, w["post_self_attention_layer_norm.scale"], c["eps"])
    f = llama4_moe(hn, DR.sub(w, "Llama4MoEBlock_0."), c, margins) if is_moe(i, c) else AR.mlp(hn, DR.sub(w, "mlp."))
    return h + f, at, f


def layer_weights(g, c, i):
    D = c["D"]
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0)}
    w.update(DR.prefixed(AR.attention_weights(g, D, c["N"], c["K"], c["H"], {"q_scalar": True}), "self_attention."))
    if is_moe(i, c):
        w.update(DR.prefixed(DR.moe_weights(g, c, c["Fm"]), "Llama4MoEBlock_0.MoeBlock_0."))
        w.update(DR.prefixed(DR.mlp_weights(g, D, c["Fm"]), "Llama4MoEBlock_0.shared_experts."))
    else:
        w.update(DR.prefixed(DR.mlp_weights(g, D, c["F"]), "mlp."))
    return w


def to64(w):
    return {k: t64(v) for k, v in w.items()}


def layer_case(name, i, seed, pos):
    c = settings()
    for attempt in range(400):
        g = rng(seed + 1000 * attempt)
        w = layer_weights(g, c, i)
        x = f32(g, (2, pos.shape[1], c["D"]), 1.0, 0.1)
        margins = []
        out, a, f = llama4_layer(t64(x), to64(w), c, pos, i, margins)
        if not margins or min(margins) >= LAYER_MARGIN:
            break
    else:
        raise RuntimeError(name + ": no seed with clear routing margins")
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "positions", pos)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", a.numpy())
    save_npy(d, "mlp", f.numpy())
    meta = {"what": f"llama4 decoder layer {i} (NoPE {is_nope(i, c)}, MoE {is_moe(i, c)}), float64 from float32 inputs",
            "layer_index": i, "config": config_keys(c), "batch": 2, "length": int(pos.shape[1])}
    if margins:
        meta["min_routing_margin"] = min(margins)
    save_meta(d, meta)


def scanned(w, c):
    """Llama4ScannableBlock layout: decoder.layers.layers_{j}.<leaf> stacks layers j, j + cycle, ... on axis 1."""
    P = c["cycle"]
    out = {k: v for k, v in w.items() if not k.startswith("decoder.layers_")}
    for j in range(P):
        pre = f"decoder.layers_{j}."
        for k in w:
            if k.startswith(pre):
                leaf = k[len(pre):]
                out[f"decoder.layers.layers_{j}.{leaf}"] = np.stack(
                    [w[f"decoder.layers_{i}.{leaf}"] for i in range(j, c["L"], P)], axis=1)
    return out


def model_case(seed):
    c = settings()
    B, T = 2, 9
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(100):
        g = rng(seed + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
        for i in range(c["L"]):
            w.update(DR.prefixed(layer_weights(g, c, i), f"decoder.layers_{i}."))
        w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2, 1.0)
        w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        w64 = to64(w)
        x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
        acts = {"token_embedder": x}
        margins = []
        for i in range(c["L"]):
            x = llama4_layer(x, DR.sub(w64, f"decoder.layers_{i}."), c, pos, i, margins)[0]
            acts[f"decoder.layers_{i}"] = x
        x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
        acts["decoder.decoder_norm"] = x
        logits = x @ w64["decoder.logits_dense.kernel"]
        if min(margins) >= DR.MIN_MARGIN:
            break
    else:
        raise RuntimeError("llama4 model: no seed with clear routing margins")
    d = case_dir("llama4_model")
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", scanned(w, c))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    save_meta(d, {"what": "8-layer llama4 model (dense/MoE, RoPE+chunk/NoPE cycle of 4), float64 from float32 weights",
                  "kind": "llama4", "config": config_keys(c), "tokens": [B, T], "min_routing_margin": min(margins)})


def main():
    torch.set_default_dtype(torch.float64)
    # Layer 0: dense, chunked attention with RoPE and the L2 qk norm. Layer 3: MoE and NoPE, at positions around 8192
    # so that the temperature-tuning factor changes within the rows (1 below 8191, 1 + 0.1 ln 2 from there).
    layer_case("llama4_layer_dense_rope", 0, 71, np.tile(np.arange(7, dtype=np.int32), (2, 1)))
    layer_case("llama4_layer_moe_nope", 3, 72, np.tile(np.arange(8187, 8194, dtype=np.int32), (2, 1)))
    model_case(73)
    print("wrote tests/fixtures/llama4_{layer_dense_rope,layer_moe_nope,model}")


if __name__ == "__main__":
    main()
