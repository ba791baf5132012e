"""MaxText's envy decoder block, re-stated in PyTorch float64 from float32 inputs and weights.

MaxText semantics (commit e591f30 read: models/envy.py EnvyDecoderLayer / EnvyScannableBlock, layers/decoders.py (the
ENVY is_moe_layer rule), layers/moe.py RoutedMoE.get_topk (the default routing), layers/attentions.py):
  layer i:  h = x + Attention(RMSNorm_pre(x));  f = FFN(RMSNorm_post(h));  out = h + RMSNorm_post_ffw(f)
  Attention: q and k RMSNorm per head (use_qk_norm, with scale), default RoPE (rope_max_timescale), global causal
            attention, queries times head_dim^-0.5 after RoPE (query_pre_attn_scalar; no depth scaling in the kernel).
  MoE layers ((i + 1) % interleave_moe_layer_step == 0): RoutedMoE `MoeBlock_0`: z = x @ W_gate, the k largest z,
            weights softmax over those k; y = sum_j w_j SwiGLU_expert_j(x). Other layers: SwiGLU MlpBlock `mlp`.
  Decoder: RMSNorm `decoder_norm` (MaxText e591f30's get_norm_layer has no ENVY case and raises; an RMSNorm is what
            every norm of the block is, see docs/numerics.md), tied head: RMSNorm(x) @ bf16(E)^T / sqrt(D).
Writes tests/fixtures/envy_model/ (unscanned and EnvyScannableBlock-scanned trees).
Run: /usr/bin/python3 tests/reference/envy_reference.py
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
import deepseek_reference as DR  # noqa: E402
from common import bf16_round, case_dir, cycle_scanned, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402


def settings():
    # 4 layers, MoE every 2nd: the cycle of 2 (dense, MoE) repeats twice in the scanned tree. Two experts per token, so
    # the softmax over the selected logits matters (Switch's single expert would always weigh 1).
    return dict(D=32, N=4, K=2, H=8, F=48, Fm=32, E=4, k=2, eps=1e-5, theta=500000.0, V=64, L=4, step=2, cycle=2)


def config_keys(c):
    return {"decoder_block": "envy", "dtype": "float32", "base_emb_dim": c["D"], "base_num_query_heads": c["N"],
            "base_num_kv_heads": c["K"], "head_dim": c["H"], "base_mlp_dim": c["F"], "base_moe_mlp_dim": c["Fm"],
            "mlp_activations": ["silu", "linear"], "normalization_layer_epsilon": c["eps"],
            "rope_max_timescale": c["theta"], "max_target_length": 64, "base_num_decoder_layers": c["L"],
            "vocab_size": c["V"], "logits_via_embedding": True, "scan_layers": False, "num_experts": c["E"],
            "num_experts_per_tok": c["k"], "use_qk_norm": True, "use_post_ffw_norm": True,
            "interleave_moe_layer_step": c["step"], "inhomogeneous_layer_cycle_interval": c["cycle"]}


def is_moe(i, c):
    return (i + 1) % c["step"] == 0


def routed_moe(x, w, c, margins):
    B, T, D = x.shape
    z = x @ w["gate.kernel"]
    y = torch.zeros(B, T, D)
    for b in range(B):
        for t in range(T):
            vals = [float(v) for v in z[b, t]]
            top = sorted(range(c["E"]), key=lambda e: (-vals[e], e))[:c["k"]]
            rest = [vals[e] for e in range(c["E"]) if e not in top]
            margins.append(min(vals[e] for e in top) - max(rest))
            wt = torch.softmax(z[b, t, top], -1)
            for j, e in enumerate(top):
                u = x[b, t]
                y[b, t] += wt[j] * ((DR.silu(u @ w["wi_0"][e]) * (u @ w["wi_1"][e])) @ w["wo"][e])
    return y


def envy_layer(x, w, c, pos, i, margins):
    a = {"heads": c["N"], "kv_heads": c["K"], "head_dim": c["H"], "eps": c["eps"], "qk_norm": "rms",
         "rope": AR.default_rope(c["H"], c["theta"]), "type": "global", "q_scalar": c["H"] ** -0.5}
    at = AR.attention(AR.rms_norm(x, w["pre_self_attention_layer_norm.scale"], c["eps"]), AR.sub(w, "self_attention."),
                      a, pos)
    h = x + at
    hn = AR.rms_norm(h, w["post_self_attention_layer_norm.scale"], c["eps"])
    f = routed_moe(hn, AR.sub(w, "MoeBlock_0."), c, margins) if is_moe(i, c) else AR.mlp(hn, AR.sub(w, "mlp."))
    return h + AR.rms_norm(f, w["post_ffw_norm.scale"], c["eps"])


def layer_weights(g, c, i):
    D = c["D"]
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
         "post_ffw_norm.scale": f32(g, (D,), 0.2, 1.0)}
    w.update(DR.prefixed(AR.attention_weights(g, D, c["N"], c["K"], c["H"], {"q_scalar": True, "qk_norm": "rms"}),
                         "self_attention."))
    if is_moe(i, c):
        w.update(DR.prefixed(DR.moe_weights(g, c, c["Fm"], gate_scale=3.0), "MoeBlock_0."))
    else:
        w.update(DR.prefixed(DR.mlp_weights(g, D, c["F"]), "mlp."))
    return w


def main():
    torch.set_default_dtype(torch.float64)
    c = settings()
    B, T = 2, 9
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(200):
        g = rng(95 + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
        for i in range(c["L"]):
            w.update(DR.prefixed(layer_weights(g, c, i), f"decoder.layers_{i}."))
        w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2, 1.0)
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        w64 = {k: t64(v) for k, v in w.items()}
        x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
        acts, margins = {}, []
        for i in range(c["L"]):
            x = envy_layer(x, AR.sub(w64, f"decoder.layers_{i}."), c, pos, i, margins)
            acts[f"decoder.layers_{i}"] = x
        x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
        acts["decoder.decoder_norm"] = x
        # Embed.attend: the tied table in bfloat16, logits / sqrt(D) (normalize_embedding_logits)
        logits = x @ t64(bf16_round(w["token_embedder.embedding"])).T / math.sqrt(c["D"])
        if min(margins) >= DR.MIN_MARGIN:
            break
    else:
        raise RuntimeError("envy model: no seed with clear routing margins")
    d = case_dir("envy_model")
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", cycle_scanned(w, c["cycle"], c["L"]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    save_meta(d, {"what": "4-layer envy model (dense / top-2 MoE cycle of 2, qk norms, post-FFW norms), float64 from "
                          "float32 weights", "kind": "envy", "config": config_keys(c), "tokens": [B, T],
                  "min_routing_margin": min(margins)})
    print("wrote tests/fixtures/envy_model")


if __name__ == "__main__":
    main()
