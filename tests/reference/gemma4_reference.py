"""MaxText's gemma4 decoder block (text part), re-stated in PyTorch float64 from float32 inputs and weights.

MaxText semantics (commit e591f30 read: models/gemma4.py Gemma4DecoderLayer / Gemma4MoE / Gemma4ScannableBlock,
layers/decoders.py _apply_gemma4_scanned_blocks, layers/attentions.py (share_kv_projections, use_v_norm,
init_rotary_embedding), layers/embeddings.py Gemma4PartialRotaryEmbedding, layers/moe.py get_topk for GEMMA4 and
RoutedAndSharedMoE, utils/maxtext_utils.get_shared_expert_mlp_dim):
  layer i (global when i % 6 == 5, else sliding window):
    a = Attention(RMSNorm(x)); a = RMSNorm(a); h = x + a
    m = FFN(RMSNorm(h), h);     m = RMSNorm(m); out = (h + m) * layer_scalar
  Attention: q, k RMSNorm per head (with scale), v RMSNorm per head (v_norm_with_scale=false: no scale), no query
    scalar (query_pre_attn_scalar 1). Global layers: global_num_kv_heads heads of global_head_dim, value = key
    projection (share_kv_projections), RoPE theta global_rope_max_timescale on the first int(d * 0.25) / 2 pairs
    (i, i + d/2) with timescales 1e6^(2i/d) over the whole head, the other pairs unrotated (timescale inf). Local
    layers: the config's heads, window, RoPE theta local_rope_max_timescale on the whole head.
  FFN: GeGLU (tanh gelu) MlpBlock(mlp_dim), or Gemma4MoE:
    shared = RMSNorm_post_1(GeGLU_{shared_experts * mlp_dim}(lnx))
    gate   = RMSNorm_noscale(h) * D^-0.5 * pre_forward_scale_2;  z = gate @ W_gate
    p = softmax(z) over all experts; top-k of z; w = p[top] / sum(p[top]) (norm_topk_prob) * per_expert_scale[top]
    routed = RMSNorm_post_2(sum_j w_j GeGLU_expert_j(RMSNorm_pre_2(h)));  m = routed + shared
  Decoder: folded Gemma parameters (embedding lookup as stored, norms plain); logits = RMSNorm(x) @ E^T / sqrt(D),
    then 30 * tanh(logits / 30).
Writes tests/fixtures/gemma4_{model,moe_model}/ (hf/: the same weights in Hugging Face's Gemma 4 layout; unscanned and Gemma4ScannableBlock-scanned MaxText trees; the dense
model has 14 layers: two scanned blocks and two remainder layers).
Run: /usr/bin/python3 tests/reference/gemma4_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
from common import bf16_round, case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

F32 = np.float32
MIN_MARGIN = 1e-4  # every top-k decision at least this far from a tie (f32 cannot flip it)


def settings(moe):
    c = dict(D=32, N=4, K=2, H=8, GK=1, GH=16, F=48, V=64, L=14, window=3, eps=1e-6, local_theta=10000.0,
             global_theta=1000000.0, global_prop=0.25, cap=30.0, moe=moe)
    if moe:
        c.update(L=6, Fm=16, E=4, k=2)
    return c


def config_keys(c):
    k = {"decoder_block": "gemma4", "model_name": "gemma4-tiny", "dtype": "float32", "base_emb_dim": c["D"],
         "base_num_query_heads": c["N"], "base_num_kv_heads": c["K"], "head_dim": c["H"],
         "global_num_kv_heads": c["GK"], "global_head_dim": c["GH"], "base_mlp_dim": c["F"],
         "mlp_activations": ["gelu", "linear"], "normalization_layer_epsilon": c["eps"], "vocab_size": c["V"],
         "base_num_decoder_layers": c["L"], "logits_via_embedding": True, "sliding_window_size": c["window"],
         "use_post_attn_norm": True, "use_post_ffw_norm": True, "share_kv_projections": True,
         "v_norm_with_scale": False, "local_rope_max_timescale": c["local_theta"],
         "global_rope_max_timescale": c["global_theta"], "rope_max_timescale": c["global_theta"],
         "global_rope_proportion": c["global_prop"], "local_rope_proportion": 1.0,
         "final_logits_soft_cap": c["cap"], "max_target_length": 64, "scan_layers": False}
    if c["moe"]:
        k.update({"base_moe_mlp_dim": c["Fm"], "num_experts": c["E"],
                  "num_experts_per_tok": c["k"], "shared_experts": 1, "norm_topk_prob": True})
    return k


def is_global(i):
    return i % 6 == 5


def gemma4_partial_rope(d, theta, prop):
    """Gemma4PartialRotaryEmbedding: pairs (i, i + d/2); the first int(d * prop) / 2 rotate with timescale
    theta^(2i/d) (f32, as MaxText forms it), the others have timescale inf (angle 0)."""
    half, rot = d // 2, int(d * prop) // 2
    frac = (2 * np.arange(rot, dtype=np.int32)).astype(F32) / F32(d)
    ts = np.concatenate([F32(1.0) * np.power(F32(theta), frac, dtype=F32), np.full(half - rot, np.inf, F32)])

    def apply(x, pos):
        ang = (pos.astype(F32)[:, :, None] / ts[None, None, :]).astype(F32)
        a = t64(ang)[:, :, None, :]
        c, s = torch.cos(a), torch.sin(a)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    return apply


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def geglu(x, w):
    return (gelu_tanh(x @ w["wi_0.kernel"]) * (x @ w["wi_1.kernel"])) @ w["wo.kernel"]


def jax_topk(vals, k):
    return sorted(range(len(vals)), key=lambda e: (-vals[e], e))[:k]


def gemma4_moe(lnx, h, w, c, margins):
    eps, E, k = c["eps"], c["E"], c["k"]
    shared = AR.rms_norm(geglu(lnx, AR.sub(w, "moe_block.shared_experts.")), w["post_feedforward_layernorm_1.scale"], eps)
    xin = AR.rms_norm(h, w["pre_feedforward_layernorm_2.scale"], eps)
    gate = AR.rms_norm(h, None, eps) * c["D"] ** -0.5 * w["pre_forward_scale_2"]
    r = AR.sub(w, "moe_block.MoeBlock_0.")
    z = gate @ r["gate.kernel"]  # [B, T, E]
    p = torch.softmax(z, -1)
    B, T, D = h.shape
    y = torch.zeros(B, T, D)
    for b in range(B):
        for t in range(T):
            vals = [float(v) for v in z[b, t]]
            top = jax_topk(vals, k)
            rest = [vals[e] for e in range(E) if e not in top]
            margins.append(min(vals[e] for e in top) - max(rest))
            wt = p[b, t, top] / p[b, t, top].sum() * r["per_expert_scale"][top]
            for j, e in enumerate(top):
                u = xin[b, t]
                he = (gelu_tanh(u @ r["wi_0"][e]) * (u @ r["wi_1"][e])) @ r["wo"][e]
                y[b, t] += wt[j] * he
    routed = AR.rms_norm(y, w["post_feedforward_layernorm_2.scale"], eps)
    return routed + shared


def gemma4_layer(x, w, c, pos, i, margins):
    g = is_global(i)
    a = {"heads": c["N"], "kv_heads": c["GK"] if g else c["K"], "head_dim": c["GH"] if g else c["H"], "eps": c["eps"],
         "share_kv": g, "qk_norm": "rms", "v_norm": True,
         "rope": (gemma4_partial_rope(c["GH"], c["global_theta"], c["global_prop"]) if g
                  else AR.default_rope(c["H"], c["local_theta"])),
         "type": "global" if g else "local_sliding", "window": c["window"]}
    eps = c["eps"]
    at = AR.attention(AR.rms_norm(x, w["pre_self_attention_norm.scale"], eps), AR.sub(w, "self_attention."), a, pos)
    h = x + AR.rms_norm(at, w["post_self_attention_norm.scale"], eps)
    lnx = AR.rms_norm(h, w["pre_ffw_norm.scale"], eps)
    m = gemma4_moe(lnx, h, AR.sub(w, "mlp."), c, margins) if c["moe"] else geglu(lnx, AR.sub(w, "mlp."))
    out = (h + AR.rms_norm(m, w["post_ffw_norm.scale"], eps)) * w["layer_scalar"]
    return out, at, m


def prefixed(w, p):
    return {p + k: v for k, v in w.items()}


def layer_weights(g, c, i):
    D = c["D"]
    gl = is_global(i)
    K, H = (c["GK"], c["GH"]) if gl else (c["K"], c["H"])
    # The post norms' scales near 0.4 keep the residual stream O(1) over the layers (each branch adds a unit-RMS
    # vector times its scale), so f32 rounding is not amplified by a growing stream.
    w = {n + ".scale": f32(g, (D,), 0.2, 1.0) for n in ("pre_self_attention_norm", "pre_ffw_norm")}
    w.update({n + ".scale": f32(g, (D,), 0.1, 0.4) for n in ("post_self_attention_norm", "post_ffw_norm")})
    aw = AR.attention_weights(g, D, c["N"], K, H, {"share_kv": gl, "qk_norm": "rms", "v_norm": True, "v_scale": False})
    # q and k are RMS-normalised and nothing divides their product by sqrt(head_dim) (Gemma 4 leaves that to the
    # learned norm scales): scales near 0.5 keep these random fixtures' attention logits O(1), so that f32 rounding
    # is not amplified through sharp softmaxes.
    aw["query_norm.scale"] = f32(g, (H,), 0.1, 0.5)
    aw["key_norm.scale"] = f32(g, (H,), 0.1, 0.5)
    w.update(prefixed(aw, "self_attention."))
    s = 1 / math.sqrt(D)
    if c["moe"]:
        E, Fm, F = c["E"], c["Fm"], c["F"]
        w.update({
            "mlp.moe_block.MoeBlock_0.gate.kernel": f32(g, (D, E), 3.0 * s),
            "mlp.moe_block.MoeBlock_0.wi_0": f32(g, (E, D, Fm), s), "mlp.moe_block.MoeBlock_0.wi_1": f32(g, (E, D, Fm), s),
            "mlp.moe_block.MoeBlock_0.wo": f32(g, (E, Fm, D), 1 / math.sqrt(Fm)),
            "mlp.moe_block.MoeBlock_0.per_expert_scale": f32(g, (E,), 0.3, 1.0),
            "mlp.moe_block.shared_experts.wi_0.kernel": f32(g, (D, F), s),
            "mlp.moe_block.shared_experts.wi_1.kernel": f32(g, (D, F), s),
            "mlp.moe_block.shared_experts.wo.kernel": f32(g, (F, D), 1 / math.sqrt(F)),
            "mlp.pre_forward_scale_2": f32(g, (D,), 0.3, 1.0)})
        for n in ("pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"):
            w[f"mlp.{n}.scale"] = f32(g, (D,), 0.2, 1.0)
    else:
        F = c["F"]
        w.update({"mlp.wi_0.kernel": f32(g, (D, F), s), "mlp.wi_1.kernel": f32(g, (D, F), s),
                  "mlp.wo.kernel": f32(g, (F, D), 1 / math.sqrt(F))})
    w["layer_scalar"] = f32(g, (1,), 0.2, 0.9)
    return w


def model_weights(g, c):
    # MaxText's table is the Hugging Face one times float32(sqrt(D)) (the converter's pad_hf_embedding_layer hook);
    # drawn that way so that both files hold exactly the same model.
    hf_table = f32(g, (c["V"], c["D"]), 1.0 / math.sqrt(c["D"]))
    w = {"token_embedder.embedding": (hf_table * F32(math.sqrt(c["D"]))).astype(F32), "hf_table": hf_table}
    for i in range(c["L"]):
        w.update(prefixed(layer_weights(g, c, i), f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2, 1.0)
    return w


def scanned(w, c):
    """Gemma4ScannableBlock's tree: blocks on axis 1 (param_scan_axis), local layers stacked again right after it;
    the num_layers % 6 leftover layers unscanned as decoder.layers_remainder.layers_{r} (param_mapping.py)."""
    nb, rem = c["L"] // 6, c["L"] % 6
    out = {k: v for k, v in w.items() if not k.startswith("decoder.layers_")}
    leaves = lambda i: [k[len(f"decoder.layers_{i}."):] for k in w if k.startswith(f"decoder.layers_{i}.")]  # noqa: E731
    for leaf in leaves(0):
        blocks = []
        for b in range(nb):
            loc = np.stack([w[f"decoder.layers_{6 * b + j}.{leaf}"] for j in range(5)], axis=0)
            blocks.append(np.moveaxis(loc, 0, 1))  # nnx_scan: the stacked axis moved to param_scan_axis
        out[f"decoder.scanned_blocks.local_layers.{leaf}"] = np.ascontiguousarray(np.stack(blocks, axis=1))
    for leaf in leaves(5):
        out[f"decoder.scanned_blocks.global_layer.{leaf}"] = np.ascontiguousarray(
            np.stack([w[f"decoder.layers_{6 * b + 5}.{leaf}"] for b in range(nb)], axis=1))
    for r in range(rem):
        for leaf in leaves(6 * nb + r):
            out[f"decoder.layers_remainder.layers_{r}.{leaf}"] = w[f"decoder.layers_{6 * nb + r}.{leaf}"]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face's Gemma 4 layout, written from MaxText's converter (checkpoint_conversion/utils/param_mapping.py
# GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks; hf_model_configs.py gemma4_26b / gemma4_31b): the inverse of the
# mapping families/gemma4/import.hpp applies. transformers' own Gemma 4 modelling code was not available to re-state, so this
# checks the importer against MaxText's converter, whose mapping is the contract.

def hf_config(c):
    L = c["L"]
    text = {"model_type": "gemma4_text", "hidden_size": c["D"], "intermediate_size": c["F"], "num_hidden_layers": L,
            "num_attention_heads": c["N"], "num_key_value_heads": c["K"], "head_dim": c["H"],
            "num_global_key_value_heads": c["GK"], "global_head_dim": c["GH"], "attention_k_eq_v": True,
            "vocab_size": c["V"], "rms_norm_eps": c["eps"], "sliding_window": c["window"],
            "final_logit_softcapping": c["cap"], "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
            "layer_types": ["full_attention" if is_global(i) else "sliding_attention" for i in range(L)],
            "rope_parameters": {"full_attention": {"partial_rotary_factor": c["global_prop"],
                                                   "rope_theta": c["global_theta"], "rope_type": "proportional"},
                                "sliding_attention": {"rope_theta": c["local_theta"], "rope_type": "default"}},
            "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "use_double_wide_mlp": False,
            "tie_word_embeddings": True, "max_position_embeddings": 64, "enable_moe_block": c["moe"]}
    if c["moe"]:
        text.update({"num_experts": c["E"], "top_k_experts": c["k"], "moe_intermediate_size": c["Fm"]})
    return {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": text,
            "vision_config": {"model_type": "gemma4_vision", "hidden_size": 16}, "tie_word_embeddings": True}


def hf_checkpoint(w, hf_table, c):
    D, N = c["D"], c["N"]
    T = lambda a: np.ascontiguousarray(np.asarray(a).T)  # noqa: E731
    r = "model.language_model."
    hf = {r + "embed_tokens.weight": hf_table, r + "norm.weight": w["decoder.decoder_norm.scale"],
          "model.vision_tower.patch_embedder.weight": np.zeros((16, 12), np.float32)}  # a stand-in, not read
    for i in range(c["L"]):
        h, m = f"{r}layers.{i}.", f"decoder.layers_{i}."
        K, H = (c["GK"], c["GH"]) if is_global(i) else (c["K"], c["H"])
        for hn, mn in (("input_layernorm", "pre_self_attention_norm"), ("post_attention_layernorm", "post_self_attention_norm"),
                       ("pre_feedforward_layernorm", "pre_ffw_norm"), ("post_feedforward_layernorm", "post_ffw_norm")):
            hf[h + hn + ".weight"] = w[m + mn + ".scale"]
        a = m + "self_attention."
        hf[h + "self_attn.q_proj.weight"] = T(w[a + "query.kernel"].reshape(D, N * H))
        hf[h + "self_attn.k_proj.weight"] = T(w[a + "key.kernel"].reshape(D, K * H))
        if a + "value.kernel" in w:
            hf[h + "self_attn.v_proj.weight"] = T(w[a + "value.kernel"].reshape(D, K * H))
        hf[h + "self_attn.o_proj.weight"] = T(w[a + "out.kernel"].reshape(N * H, D))
        hf[h + "self_attn.q_norm.weight"] = w[a + "query_norm.scale"]
        hf[h + "self_attn.k_norm.weight"] = w[a + "key_norm.scale"]
        hf[h + "layer_scalar"] = w[m + "layer_scalar"]
        mlp = m + ("mlp.moe_block.shared_experts." if c["moe"] else "mlp.")
        for hn, mn in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
            hf[h + f"mlp.{hn}.weight"] = T(w[mlp + mn + ".kernel"])
        if c["moe"]:
            o = m + "mlp.moe_block.MoeBlock_0."
            hf[h + "router.proj.weight"] = T(w[o + "gate.kernel"])
            hf[h + "router.scale"] = w[m + "mlp.pre_forward_scale_2"]
            hf[h + "router.per_expert_scale"] = w[o + "per_expert_scale"]
            for n in ("pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"):
                hf[h + n + ".weight"] = w[m + f"mlp.{n}.scale"]
            # [E, D, F] x 2 -> [E, 2F, D] (moe_gate_up_hook), [E, F, D] -> [E, D, F]
            hf[h + "experts.gate_up_proj"] = np.ascontiguousarray(
                np.concatenate([w[o + "wi_0"], w[o + "wi_1"]], axis=-1).transpose(0, 2, 1))
            hf[h + "experts.down_proj"] = np.ascontiguousarray(w[o + "wo"].transpose(0, 2, 1))
    return hf


def write_hf(d, hf, hc):
    os.makedirs(d, exist_ok=True)
    save_safetensors(f"{d}/model.safetensors", hf, {"format": "pt"})
    with open(f"{d}/config.json", "w") as fh:
        json.dump(hc, fh, indent=1, sort_keys=True)


def model_case(name, moe, seed):
    c = settings(moe)
    B, T = 2, 9
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(200):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        w64 = {k: t64(v) for k, v in w.items() if k != "hf_table"}
        x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
        acts = {}
        margins = []
        for i in range(c["L"]):
            x = gemma4_layer(x, AR.sub(w64, f"decoder.layers_{i}."), c, pos, i, margins)[0]
            acts[f"decoder.layers_{i}"] = x
        x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
        acts["decoder.decoder_norm"] = x
        # Embed.attend: the tied table is cast to bfloat16 whatever dtype is (embeddings.py attend_on_embedding)
        logits = x @ t64(bf16_round(w["token_embedder.embedding"])).T / math.sqrt(c["D"])
        logits = c["cap"] * torch.tanh(logits / c["cap"])
        if not margins or min(margins) >= MIN_MARGIN:
            break
    else:
        raise RuntimeError(name + ": no seed with clear routing margins")
    hf_table = w.pop("hf_table")
    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", w)
    write_hf(os.path.join(d, "hf"), hf_checkpoint(w, hf_table, c), hf_config(c))
    save_safetensors(f"{d}/model_scanned.safetensors", scanned(w, c))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    meta = {"what": f"{c['L']}-layer gemma4 model ({'Gemma4MoE' if moe else 'dense'} FFN; five sliding-window layers "
                    "then a global K=V layer with partial RoPE), float64 from float32 weights",
            "kind": "gemma4", "config": config_keys(c), "tokens": [B, T]}
    if margins:
        meta["min_routing_margin"] = min(margins)
    save_meta(d, meta)


def main():
    torch.set_default_dtype(torch.float64)
    model_case("gemma4_model", False, 91)
    model_case("gemma4_moe_model", True, 92)
    print("wrote tests/fixtures/gemma4_{model,moe_model}")


if __name__ == "__main__":
    main()
