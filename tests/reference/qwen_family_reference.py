"""MaxText's qwen2, qwen3_moe, simple and simple_mlp decoder blocks, re-stated in PyTorch float64 from float32 inputs
and weights, plus the same qwen2 / qwen3_moe models as Hugging Face checkpoints with a second, Hugging Face-style
re-statement of their forward pass (the two must agree before anything is written).

MaxText semantics (models/qwen2.py, models/qwen3.py Qwen3MoeDecoderLayer, models/simple_layer.py, layers/moe.py):
  qwen2:     x + Attention(RMSNorm(x)) with q/k/v biases (config.attention_bias), no output bias, queries scaled by
             head_dim^-0.5 in the forward pass (kernel not pre-scaled), qk-norm only if use_qk_norm; then
             + MlpBlock(RMSNorm(h)) (SwiGLU).
  qwen3_moe: Qwen3 attention (per-head RMSNorm on q and k, head_dim^-0.5 on q) + RoutedMoE `moe_block` with hidden
             size moe_mlp_dim: top-k of the raw gate logits, softmax over the k values, renormalised (norm_topk_prob).
  qwen3_custom_moe (models/qwen3_custom.py Qwen3CustomMoeDecoderLayer): a = Qwen3 attention of RMSNorm(x) whose out
             projection writes attention_output_dim (Da) features; f = RoutedMoE(RMSNorm_latent(a)) on width Da
             (moe_expert_input_dim); out = x + f . layer_up_projection [Da, D] (no up projection when Da == D). No
             residual around the attention; post_self_attention_layer_norm exists in the tree but is not applied.
  simple:    y = x . weights [D, D] (no residual, no norm).   simple_mlp: y = (x . ff_1 [D, F]) . ff_2 [F, D].
Hugging Face semantics (Qwen2ForCausalLM, Qwen3MoeForCausalLM): [out, in] Linear weights with q/k/v bias, softmax
over all experts then top-k then division by the sum of the k probabilities, 1/sqrt(head_dim) inside attention.

The attention, rotary and MoE routing helpers are those of attention_reference.py / deepseek_reference.py (written
from the spec, independent of the C++ port). Writes tests/fixtures/{qwen2,qwen3_moe,qwen3_custom_moe,simple,simple_mlp}_*/ (MaxText commit e591f30 read for
qwen3_custom.py).
Run: /usr/bin/python3 tests/reference/qwen_family_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
import deepseek_reference as DR  # noqa: E402
from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

B, T = 2, 9
LAYER_MARGIN = 0.03  # routing decisions of the layer fixture this far from a tie: bf16 routes like float64


def to64(w):
    return {k: t64(v) for k, v in w.items()}


def sub(w, p):
    return {k[len(p):]: v for k, v in w.items() if k.startswith(p)}


def prefixed(w, p):
    return {p + k: v for k, v in w.items()}


# ----------------------------------------------------------------------------------------------------------------
# MaxText re-statement

def attn_args(c, qk_norm):
    a = {"heads": c["N"], "kv_heads": c["K"], "head_dim": c["H"], "eps": c["eps"],
         "rope": AR.default_rope(c["H"], c["theta"]), "q_scalar": c["H"] ** -0.5}
    if qk_norm:
        a["qk_norm"] = "rms"
    return a


def qwen2_layer(x, w, c, pos):
    return AR.decoder_layer("qwen2", x, w, attn_args(c, False), pos)


def qwen3_moe_layer(x, w, c, pos, margins=None, stats=None):
    a = AR.attention(AR.rms_norm(x, w["pre_self_attention_layer_norm.scale"], c["eps"]), sub(w, "self_attention."),
                     attn_args(c, True), pos)
    h = x + a
    f = DR.routed_moe(AR.rms_norm(h, w["post_self_attention_layer_norm.scale"], c["eps"]), sub(w, "moe_block."), c,
                      margins, stats)
    return h + f, a, f


def qwen3_custom_moe_layer(x, w, c, pos, margins=None, stats=None):
    a = AR.attention(AR.rms_norm(x, w["pre_self_attention_layer_norm.scale"], c["eps"]), sub(w, "self_attention."),
                     attn_args(c, True), pos)
    f = DR.routed_moe(AR.rms_norm(a, w["latent_norm.scale"], c["eps"]), sub(w, "moe_block."), c, margins, stats)
    if "layer_up_projection.kernel" in w:
        f = f @ w["layer_up_projection.kernel"]
    return x + f, a, f


def simple_layer(x, w, c, pos):
    y = x @ w["weights"]
    return y, None, None


def simple_mlp_layer(x, w, c, pos):
    y = (x @ w["ff_1"]) @ w["ff_2"]
    return y, None, None


def qwen2_weights(g, c):
    w = AR.layer_weights(g, "qwen2", c["D"], c["N"], c["K"], c["H"], c["F"], {"bias": True, "q_scalar": True})
    del w["self_attention.out.bias"]  # MaxText's Attention drops the output bias for decoder_block qwen2
    return w


def qwen3_moe_weights(g, c):
    D = c["D"]
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0)}
    w.update(prefixed(AR.attention_weights(g, D, c["N"], c["K"], c["H"], {"qk_norm": "rms", "q_scalar": True}),
                      "self_attention."))
    w.update(prefixed(DR.moe_weights(g, c, c["Fm"], c.get("gate_scale", 1.0)), "moe_block."))
    return w


def qwen3_custom_moe_weights(g, c):
    D, Da = c["D"], c["Da"]
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0)}  # in the tree, unused by the forward
    att = AR.attention_weights(g, D, c["N"], c["K"], c["H"], {"qk_norm": "rms", "q_scalar": True})
    att["out.kernel"] = f32(g, (c["N"], c["H"], Da), 1.0 / math.sqrt(c["N"] * c["H"]))  # writes Da features
    w.update(prefixed(att, "self_attention."))
    w["latent_norm.scale"] = f32(g, (Da,), 0.2, 1.0)
    w.update(prefixed(DR.moe_weights(g, dict(c, D=Da), c["Fm"], c.get("gate_scale", 1.0)), "moe_block."))
    if Da != D:
        w["layer_up_projection.kernel"] = f32(g, (Da, D), 1 / math.sqrt(Da))
    return w


def simple_weights(g, c):
    return {"weights": f32(g, (c["D"], c["D"]), 1 / math.sqrt(c["D"]))}


def simple_mlp_weights(g, c):
    return {"ff_1": f32(g, (c["D"], c["F"]), 1 / math.sqrt(c["D"])), "ff_2": f32(g, (c["F"], c["D"]), 1 / math.sqrt(c["F"]))}


FAMILIES = {"qwen2": (qwen2_layer, qwen2_weights), "qwen3_moe": (qwen3_moe_layer, qwen3_moe_weights),
            "qwen3_custom_moe": (qwen3_custom_moe_layer, qwen3_custom_moe_weights),
            "simple": (simple_layer, simple_weights), "simple_mlp": (simple_mlp_layer, simple_mlp_weights)}


def settings(kind, case="model"):
    c = dict(D=32, N=4, K=2, H=8, F=48, Fm=16, E=4, k=2, eps=1e-6, theta=1000000.0, V=64, L=2, score="",
             block=kind, deepseek_name=False, norm_topk=True)
    if kind == "qwen3_custom_moe":
        # Every contracted width a multiple of 32 (Q8_0 storage works too). The layer fixture has Da == D (no up
        # projection), the model Da < D (with it).
        c.update(D=64, Da=32, Fm=32) if case == "model" else c.update(Da=32, Fm=32)
    return c


def config_keys(kind, c):
    cfg = {"decoder_block": kind, "dtype": "float32", "base_emb_dim": c["D"], "base_num_query_heads": c["N"],
           "base_num_kv_heads": c["K"], "head_dim": c["H"], "base_mlp_dim": c["F"],
           "normalization_layer_epsilon": c["eps"], "rope_max_timescale": c["theta"], "max_target_length": 64,
           "base_num_decoder_layers": c["L"], "vocab_size": c["V"], "logits_via_embedding": False,
           "scan_layers": False}
    if kind == "qwen2":
        cfg["attention_bias"] = True
    if kind in ("qwen3_moe", "qwen3_custom_moe"):
        cfg.update(use_qk_norm=True, num_experts=c["E"], num_experts_per_tok=c["k"], base_moe_mlp_dim=c["Fm"],
                   norm_topk_prob=True)
    if kind == "qwen3_custom_moe":
        cfg.update(attention_output_dim=c["Da"], moe_expert_input_dim=c["Da"])
    return cfg


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face re-statement (Qwen2ForCausalLM / Qwen3MoeForCausalLM), on HF names and [out, in] weights

def hf_rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def hf_rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def hf_forward(hc, w, tokens):
    """Logits [B, T, V] of the HF model `hc` (config.json dict) with weights `w` (HF names, float32 numpy)."""
    t = to64(w)
    D, L, N, K = hc["hidden_size"], hc["num_hidden_layers"], hc["num_attention_heads"], hc["num_key_value_heads"]
    H = hc.get("head_dim", D // N)
    eps, moe = hc["rms_norm_eps"], hc["model_type"] == "qwen3_moe"
    Bn, Tn = tokens.shape
    inv = 1.0 / hc["rope_theta"] ** (torch.arange(0, H, 2, dtype=torch.float64) / H)
    ang = torch.outer(torch.arange(Tn, dtype=torch.float64), inv)
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    x = t["model.embed_tokens.weight"][torch.from_numpy(tokens).long()]
    causal = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))

    def lin(h, name):
        y = h @ t[name + ".weight"].T
        return y + t[name + ".bias"] if name + ".bias" in t else y

    for i in range(L):
        p = "model.layers.%d." % i
        h = hf_rms(x, t[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj").view(Bn, Tn, N, H)
        k = lin(h, p + "self_attn.k_proj").view(Bn, Tn, K, H)
        v = lin(h, p + "self_attn.v_proj").view(Bn, Tn, K, H)
        if moe:
            q = hf_rms(q, t[p + "self_attn.q_norm.weight"], eps)
            k = hf_rms(k, t[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + hf_rotate_half(q) * sin
        k = k * cos + hf_rotate_half(k) * sin
        k = k.repeat_interleave(N // K, dim=2)
        v = v.repeat_interleave(N // K, dim=2)
        s = torch.einsum("btnd,bsnd->bnts", q, k) / math.sqrt(H)
        s = s.masked_fill(~causal, float("-inf")).softmax(-1)
        o = torch.einsum("bnts,bsnd->btnd", s, v).reshape(Bn, Tn, N * H)
        x = x + lin(o, p + "self_attn.o_proj")
        h = hf_rms(x, t[p + "post_attention_layernorm.weight"], eps)
        if not moe:
            x = x + (torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj")) @ t[
                p + "mlp.down_proj.weight"].T
            continue
        probs = (h @ t[p + "mlp.gate.weight"].T).softmax(-1)
        top_w, top_i = probs.topk(hc["num_experts_per_tok"], dim=-1)
        if hc["norm_topk_prob"]:
            top_w = top_w / top_w.sum(-1, keepdim=True)
        y = torch.zeros_like(h)
        for e in range(hc["num_experts"]):
            ex = p + "mlp.experts.%d." % e
            fe = (torch.nn.functional.silu(h @ t[ex + "gate_proj.weight"].T) * (h @ t[ex + "up_proj.weight"].T)) @ t[
                ex + "down_proj.weight"].T
            we = (top_w * (top_i == e)).sum(-1, keepdim=True)
            y = y + we * fe
        x = x + y
    x = hf_rms(x, t["model.norm.weight"], eps)
    return x @ t["lm_head.weight"].T


def hf_checkpoint(kind, c, w):
    """The MaxText-named model `w` as a Hugging Face checkpoint (weights, config.json dict)."""
    D, N, K, H, L = c["D"], c["N"], c["K"], c["H"], c["L"]
    hf = {"model.embed_tokens.weight": w["token_embedder.embedding"], "model.norm.weight": w["decoder.decoder_norm.scale"],
          "lm_head.weight": np.ascontiguousarray(w["decoder.logits_dense.kernel"].T)}
    for i in range(L):
        m, h = f"decoder.layers_{i}.", f"model.layers.{i}."
        hf[h + "input_layernorm.weight"] = w[m + "pre_self_attention_layer_norm.scale"]
        hf[h + "post_attention_layernorm.weight"] = w[m + "post_self_attention_layer_norm.scale"]
        for mt, hn, heads in (("query", "q_proj", N), ("key", "k_proj", K), ("value", "v_proj", K)):
            hf[h + f"self_attn.{hn}.weight"] = np.ascontiguousarray(w[m + f"self_attention.{mt}.kernel"].reshape(D, heads * H).T)
            if m + f"self_attention.{mt}.bias" in w:
                hf[h + f"self_attn.{hn}.bias"] = w[m + f"self_attention.{mt}.bias"].reshape(heads * H)
        hf[h + "self_attn.o_proj.weight"] = np.ascontiguousarray(w[m + "self_attention.out.kernel"].reshape(N * H, D).T)
        if kind == "qwen2":
            for mt, hn in (("wi_0", "gate_proj"), ("wi_1", "up_proj"), ("wo", "down_proj")):
                hf[h + f"mlp.{hn}.weight"] = np.ascontiguousarray(w[m + f"mlp.{mt}.kernel"].T)
        else:
            hf[h + "self_attn.q_norm.weight"] = w[m + "self_attention.query_norm.scale"]
            hf[h + "self_attn.k_norm.weight"] = w[m + "self_attention.key_norm.scale"]
            hf[h + "mlp.gate.weight"] = np.ascontiguousarray(w[m + "moe_block.gate.kernel"].T)
            for e in range(c["E"]):
                ex = h + f"mlp.experts.{e}."
                hf[ex + "gate_proj.weight"] = np.ascontiguousarray(w[m + "moe_block.wi_0"][e].T)
                hf[ex + "up_proj.weight"] = np.ascontiguousarray(w[m + "moe_block.wi_1"][e].T)
                hf[ex + "down_proj.weight"] = np.ascontiguousarray(w[m + "moe_block.wo"][e].T)
    hc = {"architectures": ["Qwen2ForCausalLM" if kind == "qwen2" else "Qwen3MoeForCausalLM"], "model_type": kind,
          "hidden_size": D, "intermediate_size": c["F"], "num_attention_heads": N, "num_key_value_heads": K,
          "num_hidden_layers": L, "vocab_size": c["V"], "rms_norm_eps": c["eps"], "rope_theta": c["theta"],
          "max_position_embeddings": 64, "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu"}
    if kind == "qwen2":
        hc.update(use_sliding_window=False, sliding_window=4096, max_window_layers=L)
    else:
        hc.update(head_dim=H, moe_intermediate_size=c["Fm"], num_experts=c["E"], num_experts_per_tok=c["k"],
                  norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], attention_bias=False)
    return hf, hc


# ----------------------------------------------------------------------------------------------------------------
# Cases

def layer_case(kind, seed):
    c = settings(kind, "layer")
    fn, wfn = FAMILIES[kind]
    pos = np.tile(np.arange(7, dtype=np.int32), (2, 1))
    for attempt in range(400):
        g = rng(seed + 1000 * attempt)
        w = wfn(g, c)
        x = f32(g, (2, 7, c["D"]), 1.0, 0.1)
        margins = []
        if kind in ("qwen3_moe", "qwen3_custom_moe"):
            out, a, f = fn(t64(x), to64(w), c, pos, margins)
        else:
            out, a, f = fn(t64(x), to64(w), c, pos)
        if not margins or min(margins) >= LAYER_MARGIN:
            break
    else:
        raise RuntimeError(kind + ": no seed with clear routing margins")
    d = case_dir(kind + "_layer")
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "positions", pos)
    save_npy(d, "out", out.numpy())
    if a is not None:
        save_npy(d, "attn", a.numpy())
        save_npy(d, "mlp", f.numpy())
    meta = {"what": f"{kind} decoder layer, float64 from float32 inputs", "kind": kind, "config": config_keys(kind, c),
            "batch": 2, "length": 7}
    if margins:
        meta["min_routing_margin"] = min(margins)
    save_meta(d, meta)


def model_case(kind, seed):
    c = settings(kind)
    fn, wfn = FAMILIES[kind]
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(100):
        g = rng(seed + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
        for i in range(c["L"]):
            w.update(prefixed(wfn(g, c), f"decoder.layers_{i}."))
        w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2, 1.0)
        w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        w64 = to64(w)
        x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
        acts = {"token_embedder": x}
        margins = []
        for i in range(c["L"]):
            lw = sub(w64, f"decoder.layers_{i}.")
            x = (fn(x, lw, c, pos, margins) if "moe" in kind else fn(x, lw, c, pos))[0]
            acts[f"decoder.layers_{i}"] = x
        x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
        acts["decoder.decoder_norm"] = x
        logits = x @ w64["decoder.logits_dense.kernel"]
        if not margins or min(margins) >= DR.MIN_MARGIN:
            break
    else:
        raise RuntimeError(kind + ": no seed with clear routing margins")
    d = case_dir(kind + "_model")
    save_safetensors(f"{d}/model.safetensors", w)
    if kind in ("qwen3_moe", "qwen3_custom_moe", "simple"):
        save_safetensors(f"{d}/model_scanned.safetensors", DR.scanned(w, [("layers", c["L"])]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    meta = {"what": f"2-layer {kind} model, float64 from float32 weights", "kind": kind, "config": config_keys(kind, c),
            "tokens": [B, T]}
    if margins:
        meta["min_routing_margin"] = min(margins)
    if kind in ("qwen2", "qwen3_moe"):
        hf, hc = hf_checkpoint(kind, c, w)
        hl = hf_forward(hc, hf, tokens)
        diff = float((hl - logits).abs().max())
        # The only difference is the rotary table: MaxText forms timescales and angles in float32, HF in float64.
        assert diff < 1e-6, f"{kind}: the Hugging Face and MaxText re-statements differ by {diff}"
        hd = os.path.join(d, "hf")
        os.makedirs(hd, exist_ok=True)
        save_safetensors(f"{hd}/model.safetensors", hf, {"format": "pt"})
        with open(f"{hd}/config.json", "w") as fh:
            json.dump(hc, fh, indent=1, sort_keys=True)
        meta["hf_vs_maxtext_max_abs_diff"] = diff
    save_meta(d, meta)


def main():
    torch.set_default_dtype(torch.float64)
    kinds = ("qwen2", "qwen3_moe", "simple", "simple_mlp", "qwen3_custom_moe")
    only = sys.argv[1:] or kinds
    for seed, kind in enumerate(kinds):
        if kind not in only:
            continue
        if kind.startswith("qwen"):
            layer_case(kind, 51 + seed)
        model_case(kind, 61 + seed)
    print("wrote tests/fixtures/{qwen2,qwen3_moe,qwen3_custom_moe}_{layer,model}, {simple,simple_mlp}_model")


if __name__ == "__main__":
    main()
