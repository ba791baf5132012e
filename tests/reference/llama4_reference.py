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
The attention is attention_reference.py's (written from the spec). Also transformers' Llama 4 (hf_forward, see
below), for the Hugging Face files: llama4_model/hf (the model fixture's weights; asserted to give the MaxText
logits) and llama4_hf_rope/ (a multimodal-layout file with a rope_scaling MaxText cannot express).
Writes tests/fixtures/llama4_{layer_dense_rope,layer_moe_nope,model,hf_rope}/.
Run: /usr/bin/python3 tests/reference/llama4_reference.py
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
from common import case_dir, cycle_scanned, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

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


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face's Llama 4 (transformers models/llama4/modeling_llama4.py, read for Llama4TextAttention /
# Llama4TextMoe / Llama4TextExperts / Llama4TextL2Norm and modeling_rope_utils._compute_llama3_parameters), re-stated
# independently of the MaxText functions above: complex rotation of adjacent lane pairs, the L2 norm after RoPE with
# eps rms_norm_eps, temperature tuning from attn_scale / floor_scale, chunked causal masks on RoPE layers, and the
# MoE as HF computes it (every expert on every token, its input scaled by sigmoid of the scattered top-k logits,
# -inf -> 0 elsewhere, gate and up as the two halves of gate_up_proj).

def hf_config(c, rope_scaling, multimodal):
    L = c["L"]
    text = {"model_type": "llama4_text", "hidden_size": c["D"], "intermediate_size": c["Fm"],
            "intermediate_size_mlp": c["F"], "num_hidden_layers": L, "num_attention_heads": c["N"],
            "num_key_value_heads": c["K"], "head_dim": c["H"], "vocab_size": c["V"], "num_local_experts": c["E"],
            "num_experts_per_tok": 1, "interleave_moe_layer_step": c["step"],
            "moe_layers": [i for i in range(L) if is_moe(i, c)], "no_rope_layers": [int(not is_nope(i, c)) for i in range(L)],
            "layer_types": ["full_attention" if is_nope(i, c) else "chunked_attention" for i in range(L)],
            "rms_norm_eps": c["eps"], "rope_theta": c["theta"], "rope_scaling": rope_scaling,
            "attention_chunk_size": c["chunk"], "use_qk_norm": True, "attn_temperature_tuning": True,
            "floor_scale": 8192, "attn_scale": 0.1, "hidden_act": "silu", "tie_word_embeddings": False,
            "attention_bias": False, "max_position_embeddings": 8200}
    if not multimodal:
        return text
    return {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": text,
            "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 16}}


def hf_checkpoint(w, c, multimodal):
    """MaxText-named f32 weights -> Hugging Face names (the transpose of families/llama4/import.hpp's mapping)."""
    D, N, K, H = c["D"], c["N"], c["K"], c["H"]
    r = "language_model." if multimodal else ""
    T = lambda a: np.ascontiguousarray(np.asarray(a).T)  # noqa: E731
    hf = {r + "model.embed_tokens.weight": w["token_embedder.embedding"], r + "model.norm.weight": w["decoder.decoder_norm.scale"],
          r + "lm_head.weight": T(w["decoder.logits_dense.kernel"])}
    for i in range(c["L"]):
        h, m = f"{r}model.layers.{i}.", f"decoder.layers_{i}."
        hf[h + "input_layernorm.weight"] = w[m + "pre_self_attention_layer_norm.scale"]
        hf[h + "post_attention_layernorm.weight"] = w[m + "post_self_attention_layer_norm.scale"]
        for hn, mn, heads in (("q_proj", "query", N), ("k_proj", "key", K), ("v_proj", "value", K)):
            hf[h + f"self_attn.{hn}.weight"] = T(w[m + f"self_attention.{mn}.kernel"].reshape(D, heads * H))
        hf[h + "self_attn.o_proj.weight"] = T(w[m + "self_attention.out.kernel"].reshape(N * H, D))
        f = h + "feed_forward."
        if is_moe(i, c):
            o = m + "Llama4MoEBlock_0."
            hf[f + "router.weight"] = T(w[o + "MoeBlock_0.gate.kernel"])
            hf[f + "experts.gate_up_proj"] = np.concatenate([w[o + "MoeBlock_0.wi_0"], w[o + "MoeBlock_0.wi_1"]], axis=-1)
            hf[f + "experts.down_proj"] = w[o + "MoeBlock_0.wo"]
            for hn, mn in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
                hf[f + f"shared_expert.{hn}.weight"] = T(w[o + f"shared_experts.{mn}.kernel"])
        else:
            for hn, mn in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
                hf[f + f"{hn}.weight"] = T(w[m + f"mlp.{mn}.kernel"])
    if multimodal:  # a stand-in for the vision tower the text model ignores
        hf["vision_model.patch_embedding.linear.weight"] = np.zeros((16, 12), np.float32)
        hf["multi_modal_projector.linear_1.weight"] = np.zeros((c["D"], 16), np.float32)
    return hf


def hf_inv_freq(H, theta, rs):
    inv = 1.0 / theta ** (torch.arange(0, H, 2, dtype=torch.float64) / H)
    if rs is None:
        return inv
    factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    wl = 2 * math.pi / inv
    scaled = torch.where(wl > old / lo, inv / factor, inv)
    smooth = (old / wl - lo) / (hi - lo) if hi != lo else torch.full_like(wl, float("nan"))  # 0/0 as in torch
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wl < old / hi) & ~(wl > old / lo)
    return torch.where(medium, smoothed, scaled)


def hf_rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (w if w is not None else 1.0)


def hf_forward(hc, t, tokens, margins=None):
    j = hc["text_config"] if hc["model_type"] == "llama4" else hc
    r = "language_model." if hc["model_type"] == "llama4" else ""
    t = {k: t64(v) for k, v in t.items()}
    B, T = tokens.shape
    D, N, K, H, E = j["hidden_size"], j["num_attention_heads"], j["num_key_value_heads"], j["head_dim"], j["num_local_experts"]
    eps, chunk = j["rms_norm_eps"], j["attention_chunk_size"]
    pos = torch.arange(T, dtype=torch.float64)
    ang = pos[:, None] * hf_inv_freq(H, j["rope_theta"], j["rope_scaling"])[None, :]
    cis = torch.polar(torch.ones_like(ang), ang)  # [T, H/2]
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
    x = t[r + "model.embed_tokens.weight"][torch.from_numpy(tokens).long()]
    for i in range(j["num_hidden_layers"]):
        p = f"{r}model.layers.{i}."
        use_rope = bool(j["no_rope_layers"][i])
        h = hf_rms(x, t[p + "input_layernorm.weight"], eps)
        q = (h @ t[p + "self_attn.q_proj.weight"].T).reshape(B, T, N, H)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).reshape(B, T, K, H)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(B, T, K, H)
        if use_rope:
            rot = lambda a: torch.view_as_real(torch.view_as_complex(a.reshape(*a.shape[:-1], H // 2, 2).contiguous())  # noqa: E731
                                               * cis[None, :, None, :]).flatten(3)
            q, k = rot(q), rot(k)
            if j["use_qk_norm"]:
                q, k = hf_rms(q, None, eps), hf_rms(k, None, eps)
        elif j["attn_temperature_tuning"]:
            q = q * (torch.log(torch.floor((pos + 1.0) / j["floor_scale"]) + 1.0) * j["attn_scale"] + 1.0)[None, :, None, None]
        k = k.repeat_interleave(N // K, dim=2)
        v = v.repeat_interleave(N // K, dim=2)
        s = torch.einsum("bqnh,bknh->bnqk", q, k) * H ** -0.5
        allowed = ki <= qi
        if j["layer_types"][i] == "chunked_attention":
            allowed = allowed & (qi // chunk == ki // chunk)
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.einsum("bnqk,bknh->bqnh", torch.softmax(s, -1), v).reshape(B, T, N * H)
        x = x + a @ t[p + "self_attn.o_proj.weight"].T
        h = hf_rms(x, t[p + "post_attention_layernorm.weight"], eps).reshape(B * T, D)
        f = p + "feed_forward."
        if i in j["moe_layers"]:
            logits = h @ t[f + "router.weight"].T  # [M, E]
            top = torch.topk(logits, 2, dim=1)
            if margins is not None:
                margins.append(float((top.values[:, 0] - top.values[:, 1]).min()))
            scores = torch.full_like(logits, float("-inf")).scatter(1, top.indices[:, :1], top.values[:, :1]).T
            scores = torch.sigmoid(scores)  # [E, M]: 0 for the experts a token does not use
            out = (torch.nn.functional.silu(h @ t[f + "shared_expert.gate_proj.weight"].T)
                   * (h @ t[f + "shared_expert.up_proj.weight"].T)) @ t[f + "shared_expert.down_proj.weight"].T
            for e in range(E):
                gate, up = (h * scores[e][:, None] @ t[f + "experts.gate_up_proj"][e]).chunk(2, dim=-1)
                out = out + (up * torch.nn.functional.silu(gate)) @ t[f + "experts.down_proj"][e]
        else:
            out = (torch.nn.functional.silu(h @ t[f + "gate_proj.weight"].T) * (h @ t[f + "up_proj.weight"].T)) \
                  @ t[f + "down_proj.weight"].T
        x = x + out.reshape(B, T, D)
    x = hf_rms(x, t[r + "model.norm.weight"], eps)
    return x @ t[r + "lm_head.weight"].T


def write_hf(d, hf, hc):
    os.makedirs(d, exist_ok=True)
    save_safetensors(f"{d}/model.safetensors", hf, {"format": "pt"})
    with open(f"{d}/config.json", "w") as fh:
        json.dump(hc, fh, indent=1, sort_keys=True)


MAXTEXT_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}


def model_weights(g, c):
    w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
    for i in range(c["L"]):
        w.update(DR.prefixed(layer_weights(g, c, i), f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2, 1.0)
    w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
    return w


def hf_rope_case(seed):
    """A multimodal-layout Hugging Face Llama 4 file whose rope_scaling is Scout's kind (low == high frequency factor)
    but not MaxText's: the llama3_rope_* keys carry it. Logits from hf_forward; the meta records how far the logits
    would move under MaxText's fixed 8 / 1 / 4 / 8192 scaling, so that ignoring the file's scaling fails the test."""
    c = settings()
    B, T = 2, 9
    rs = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
          "original_max_position_embeddings": 64}
    for attempt in range(100):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        hf = hf_checkpoint(w, c, True)
        hc = hf_config(c, rs, True)
        margins = []
        logits = hf_forward(hc, hf, tokens, margins)
        if min(margins) >= DR.MIN_MARGIN:
            break
    else:
        raise RuntimeError("llama4 hf rope: no seed with clear routing margins")
    moved = float((hf_forward(hf_config(c, MAXTEXT_LLAMA3, True), hf, tokens) - logits).abs().max())
    d = case_dir("llama4_hf_rope")
    write_hf(os.path.join(d, "hf"), hf, hc)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    save_meta(d, {"what": "Llama4ForConditionalGeneration-named file (text model + stand-in vision tensors), "
                          "rope_scaling factor 16 / low 1 / high 1 / original 64, logits of transformers' Llama 4 "
                          "re-stated in float64", "kind": "llama4", "tokens": [B, T], "min_routing_margin": min(margins),
                  "logits_max_change_under_maxtext_rope_scaling": moved})


def model_case(seed):
    c = settings()
    B, T = 2, 9
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(100):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
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
    save_safetensors(f"{d}/model_scanned.safetensors", cycle_scanned(w, c["cycle"], c["L"]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    # The same weights as a Llama4ForCausalLM file with MaxText's own LLaMA-3 scaling: transformers' model (hf_forward,
    # written independently of the MaxText functions) must give the MaxText logits, which the C++ test reads.
    hf, hc = hf_checkpoint(w, c, False), hf_config(c, MAXTEXT_LLAMA3, False)
    hf_diff = float((hf_forward(hc, hf, tokens) - logits).abs().max())
    assert hf_diff < 1e-9, f"HF and MaxText Llama 4 re-statements disagree by {hf_diff}"
    write_hf(os.path.join(d, "hf"), hf, hc)
    save_meta(d, {"what": "8-layer llama4 model (dense/MoE, RoPE+chunk/NoPE cycle of 4), float64 from float32 weights",
                  "kind": "llama4", "config": config_keys(c), "tokens": [B, T], "min_routing_margin": min(margins),
                  "hf_vs_maxtext_max_abs_diff": hf_diff})


def main():
    torch.set_default_dtype(torch.float64)
    # Layer 0: dense, chunked attention with RoPE and the L2 qk norm. Layer 3: MoE and NoPE, at positions around 8192
    # so that the temperature-tuning factor changes within the rows (1 below 8191, 1 + 0.1 ln 2 from there).
    layer_case("llama4_layer_dense_rope", 0, 71, np.tile(np.arange(7, dtype=np.int32), (2, 1)))
    layer_case("llama4_layer_moe_nope", 3, 72, np.tile(np.arange(8187, 8194, dtype=np.int32), (2, 1)))
    model_case(73)
    hf_rope_case(74)
    print("wrote tests/fixtures/llama4_{layer_dense_rope,layer_moe_nope,model,hf_rope}")


if __name__ == "__main__":
    main()
