"""MaxText's gpt_oss decoder block (models/gpt_oss.py) re-stated in PyTorch float64 from float32 inputs and weights,
the same model as a Hugging Face GPT-OSS checkpoint with a second, Hugging Face-style re-statement of its forward pass
(the two must agree before anything is written), and an MXFP4 Hugging Face checkpoint written with this script's own
quantiser (the reference logits use the weights the quantised file decodes to).

MaxText semantics (models/gpt_oss.py, layers/attentions.py, layers/attention_op.py, layers/moe.py, embeddings.py):
  layer i: h = x + Attention(RMSNorm(x)); y = h + RoutedMoE(RMSNorm(h)).
  Attention: local sliding window on even layers, global on odd ones (GPT_OSS_ATTENTION_PATTERN); q/k/v/out biases;
    YaRN (rope_interleave false: half-split input, rope_truncate false, rope_attention_scaling: output * (0.1 ln f + 1));
    q *= head_dim^-0.5; the per-head sink logit joins the softmax denominator (its probability is dropped).
  RoutedMoE (hidden size mlp_dim): z = x Wg + bg; top-k of z; softmax over the k values; expert e:
    h0 = x W0_e + b0_e, h1 = x W1_e + b1_e; g = min(h0, L); u = clip(h1, -L, L); (g * sigmoid(1.702 g)) * (u + 1);
    then W2_e + b2_e; the outputs weighted and summed.
Hugging Face semantics (GptOssForCausalLM): [out, in] Linear weights with biases, `sinks`, router.weight/bias,
  experts.gate_up_proj [E, D, 2F] whose columns interleave gate (even) and up (odd), gate_up_proj_bias [E, 2F],
  down_proj [E, F, D], down_proj_bias [E, D]; attention logits * head_dim^-0.5; YaRN inverse frequencies with
  cos/sin multiplied by the attention factor; layer_types sliding_attention / full_attention.
MXFP4 (OCP MX): a block of 32 values along the input axis shares one e8m0 scale byte s (2^(s-127)); each value is an
  e2m1 code (sign bit 3, magnitude {0, .5, 1, 1.5, 2, 3, 4, 6}); byte j of a block holds value 2j in its low nibble
  and 2j+1 in its high nibble. `<name>_blocks` [E, out, in/32, 16] u8, `<name>_scales` [E, out, in/32] u8.

llama.cpp's MXFP4 GGUF blocks (gguf_mxfp4_case): written and dequantised by llama.cpp's gguf-py (the peer's own code).

Writes tests/fixtures/gpt_oss_{layer,layer_global,model,mxfp4,gguf_mxfp4}/.
Run: /usr/bin/python3 tests/reference/gpt_oss_reference.py (gguf-py from /work/peers/llama.cpp/gguf-py or $GGUF_PY)
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

B, T = 2, 9
ALPHA = 1.702
MARGIN = 1e-3  # every routing decision this far from a tie (float32 / the C++ order of sums cannot flip it)
BF16_MARGIN = 0.03  # layer fixtures also checked in bf16: routing must not flip there either


def to64(w):
    return {k: t64(v) for k, v in w.items()}


def sub(w, p):
    return {k[len(p):]: v for k, v in w.items() if k.startswith(p)}


def prefixed(w, p):
    return {p + k: v for k, v in w.items()}


def settings():
    return dict(D=32, N=4, K=2, H=8, F=32, E=4, k=2, eps=1e-5, theta=150000.0, V=64, L=4, window=4, limit=2.0,
                factor=32.0, orig=4096, beta_fast=32.0, beta_slow=1.0, max_pos=131072)


def config_keys(c, layers=None):
    return {"decoder_block": "gpt_oss", "dtype": "float32", "base_emb_dim": c["D"], "base_num_query_heads": c["N"],
            "base_num_kv_heads": c["K"], "head_dim": c["H"], "base_mlp_dim": c["F"], "base_moe_mlp_dim": c["F"],
            "normalization_layer_epsilon": c["eps"], "max_target_length": 64,
            "base_num_decoder_layers": layers or c["L"], "vocab_size": c["V"], "logits_via_embedding": False,
            "scan_layers": False, "sliding_window_size": c["window"], "attention_bias": True, "attention_sink": True,
            "rope_type": "yarn", "rope_max_timescale": c["theta"], "max_position_embeddings": c["max_pos"],
            "original_max_position_embeddings": c["orig"], "rope_factor": c["factor"], "beta_fast": c["beta_fast"],
            "beta_slow": c["beta_slow"], "rope_interleave": False, "rope_truncate": False,
            "rope_attention_scaling": True, "mlp_activations": ["sigmoid", "linear"],
            "mlp_activations_limit": c["limit"], "routed_bias": True, "mlp_bias": True, "num_experts": c["E"],
            "num_experts_per_tok": c["k"], "inhomogeneous_layer_cycle_interval": 2}


# ----------------------------------------------------------------------------------------------------------------
# MaxText re-statement

def attn_args(c, layer):
    a = {"heads": c["N"], "kv_heads": c["K"], "head_dim": c["H"], "eps": c["eps"], "q_scalar": c["H"] ** -0.5,
         "rope": AR.yarn_rope(c["H"], c["theta"], c["factor"], c["orig"], c["beta_fast"], c["beta_slow"],
                              interleave=False, truncate=False, attention_scaling=True)}
    if layer % 2 == 0:
        a["type"], a["window"] = "local_sliding", c["window"]
    return a


def clamped_swiglu(h0, h1, limit):
    g = torch.clamp(h0, max=limit)
    u = torch.clamp(h1, min=-limit, max=limit)
    return g * torch.sigmoid(g * ALPHA) * (u + 1.0)


def moe(x, w, c, margins=None, clamped=None):
    Bn, Tn, D = x.shape
    z = x @ w["gate.kernel"] + w["gate.bias"]
    zl = z.reshape(Bn * Tn, c["E"]).tolist()
    xf = x.reshape(Bn * Tn, D)
    y = torch.zeros(Bn * Tn, D)
    for m in range(Bn * Tn):
        idx = DR.jax_topk(zl[m], c["k"])
        if margins is not None:
            margins.append(DR.margin_after(zl[m], idx))
        top = torch.tensor([zl[m][e] for e in idx])
        wts = torch.softmax(top, dim=0)
        for j, e in enumerate(idx):
            h0 = xf[m] @ w["wi_0"][e] + w["wi_0_bias"][e]
            h1 = xf[m] @ w["wi_1"][e] + w["wi_1_bias"][e]
            if clamped is not None:
                clamped[0] += int((h0 > c["limit"]).sum() + (h1.abs() > c["limit"]).sum())
                clamped[1] += 2 * h0.numel()
            y[m] += wts[j] * (clamped_swiglu(h0, h1, c["limit"]) @ w["wo"][e] + w["wo_bias"][e])
    return y.reshape(Bn, Tn, D)


def layer(x, w, c, i, pos, margins=None, clamped=None):
    a = AR.attention(AR.rms_norm(x, w["pre_self_attention_layer_norm.scale"], c["eps"]), sub(w, "GptOssAttention."),
                     attn_args(c, i), pos)
    h = x + a
    f = moe(AR.rms_norm(h, w["post_self_attention_layer_norm.scale"], c["eps"]), sub(w, "GptOssMlp."), c, margins,
            clamped)
    return h + f, a, f


def layer_weights(g, c):
    D, N, K, H, F, E = c["D"], c["N"], c["K"], c["H"], c["F"], c["E"]
    w = {"pre_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
         "post_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
         "GptOssAttention.query.kernel": f32(g, (D, N, H), 1 / math.sqrt(D)),
         "GptOssAttention.query.bias": f32(g, (N, H), 0.1),
         "GptOssAttention.key.kernel": f32(g, (D, K, H), 1 / math.sqrt(D)),
         "GptOssAttention.key.bias": f32(g, (K, H), 0.1),
         "GptOssAttention.value.kernel": f32(g, (D, K, H), 1 / math.sqrt(D)),
         "GptOssAttention.value.bias": f32(g, (K, H), 0.1),
         "GptOssAttention.out.kernel": f32(g, (N, H, D), 1 / math.sqrt(N * H)),
         "GptOssAttention.out.bias": f32(g, (D,), 0.1),
         "GptOssAttention.sinks": f32(g, (N,), 1.0),
         "GptOssMlp.gate.kernel": f32(g, (D, E), 1 / math.sqrt(D)),
         "GptOssMlp.gate.bias": f32(g, (E,), 0.3),
         "GptOssMlp.wi_0": f32(g, (E, D, F), 1.5 / math.sqrt(D)),
         "GptOssMlp.wi_1": f32(g, (E, D, F), 1.5 / math.sqrt(D)),
         "GptOssMlp.wo": f32(g, (E, F, D), 1 / math.sqrt(F)),
         "GptOssMlp.wi_0_bias": f32(g, (E, F), 0.2),
         "GptOssMlp.wi_1_bias": f32(g, (E, F), 0.2),
         "GptOssMlp.wo_bias": f32(g, (E, D), 0.1)}
    return w


def model_forward(w64, tokens, c, margins=None, clamped=None):
    Bn, Tn = tokens.shape
    pos = np.tile(np.arange(Tn, dtype=np.int32), (Bn, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    acts = {"token_embedder": x}
    for i in range(c["L"]):
        x = layer(x, sub(w64, f"decoder.layers_{i}."), c, i, pos, margins, clamped)[0]
        acts[f"decoder.layers_{i}"] = x
    x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
    acts["decoder.decoder_norm"] = x
    return x @ w64["decoder.logits_dense.kernel"], acts


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face re-statement (GptOssForCausalLM) on HF names and [out, in] weights

def hf_rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def hf_yarn(hc, H, Tn):
    """cos, sin [Tn, H/2] as transformers' YaRN (float64 here), and the attention factor."""
    rs = hc["rope_scaling"]
    base, factor, orig = hc["rope_theta"], rs["factor"], rs["original_max_position_embeddings"]
    pos_freqs = base ** (torch.arange(0, H, 2, dtype=torch.float64) / H)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

    def corr_dim(rot):
        return (H * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
    low, high = corr_dim(rs["beta_fast"]), corr_dim(rs["beta_slow"])
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, H - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(H // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    extra_factor = 1 - ramp
    inv = inter * (1 - extra_factor) + extra * extra_factor
    att = 0.1 * math.log(factor) + 1.0
    ang = torch.outer(torch.arange(Tn, dtype=torch.float64), inv)
    return ang.cos() * att, ang.sin() * att


def hf_forward(hc, w, tokens):
    t = to64(w)
    D, L, N, K = hc["hidden_size"], hc["num_hidden_layers"], hc["num_attention_heads"], hc["num_key_value_heads"]
    H, eps, E, k = hc["head_dim"], hc["rms_norm_eps"], hc["num_local_experts"], hc["num_experts_per_tok"]
    lim = hc["swiglu_limit"]
    Bn, Tn = tokens.shape
    cos, sin = hf_yarn(hc, H, Tn)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    x = t["model.embed_tokens.weight"][torch.from_numpy(tokens).long()]
    qi, ki = torch.arange(Tn)[:, None], torch.arange(Tn)[None, :]

    def lin(h, name):
        return h @ t[name + ".weight"].T + t[name + ".bias"]

    def rot(v):
        a, b = v[..., :H // 2], v[..., H // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    for i in range(L):
        p = "model.layers.%d." % i
        h = hf_rms(x, t[p + "input_layernorm.weight"], eps)
        q = rot(lin(h, p + "self_attn.q_proj").view(Bn, Tn, N, H))
        kk = rot(lin(h, p + "self_attn.k_proj").view(Bn, Tn, K, H)).repeat_interleave(N // K, dim=2)
        v = lin(h, p + "self_attn.v_proj").view(Bn, Tn, K, H).repeat_interleave(N // K, dim=2)
        s = torch.einsum("btnd,bsnd->bnts", q, kk) * H ** -0.5
        ok = ki <= qi
        if hc["layer_types"][i] == "sliding_attention":
            ok = ok & (ki > qi - hc["sliding_window"])
        s = s.masked_fill(~ok, float("-inf"))
        s = torch.cat([s, t[p + "self_attn.sinks"].reshape(1, N, 1, 1).expand(Bn, N, Tn, 1)], dim=-1)
        pr = torch.softmax(s, dim=-1)[..., :-1]
        o = torch.einsum("bnts,bsnd->btnd", pr, v).reshape(Bn, Tn, N * H)
        x = x + lin(o, p + "self_attn.o_proj")
        h = hf_rms(x, t[p + "post_attention_layernorm.weight"], eps).reshape(Bn * Tn, D)
        logits = h @ t[p + "mlp.router.weight"].T + t[p + "mlp.router.bias"]
        tv, ti = torch.topk(logits, k, dim=-1)
        tv = torch.softmax(tv, dim=-1)
        y = torch.zeros_like(h)
        gu_w, gu_b = t[p + "mlp.experts.gate_up_proj"], t[p + "mlp.experts.gate_up_proj_bias"]
        dn_w, dn_b = t[p + "mlp.experts.down_proj"], t[p + "mlp.experts.down_proj_bias"]
        for e in range(E):
            gu = h @ gu_w[e] + gu_b[e]
            gate, up = gu[..., ::2].clamp(max=lim), gu[..., 1::2].clamp(min=-lim, max=lim)
            out = ((up + 1) * (gate * torch.sigmoid(gate * ALPHA))) @ dn_w[e] + dn_b[e]
            y = y + (tv * (ti == e)).sum(-1, keepdim=True) * out
        x = x + y.reshape(Bn, Tn, D)
    x = hf_rms(x, t["model.norm.weight"], eps)
    return x @ t["lm_head.weight"].T


def hf_config(c):
    L = c["L"]
    return {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": c["D"],
            "intermediate_size": c["F"], "num_attention_heads": c["N"], "num_key_value_heads": c["K"],
            "head_dim": c["H"], "num_hidden_layers": L, "vocab_size": c["V"], "rms_norm_eps": c["eps"],
            "rope_theta": c["theta"], "max_position_embeddings": c["max_pos"], "initial_context_length": c["orig"],
            "rope_scaling": {"rope_type": "yarn", "factor": c["factor"], "beta_fast": c["beta_fast"],
                             "beta_slow": c["beta_slow"], "original_max_position_embeddings": c["orig"],
                             "truncate": False},
            "sliding_window": c["window"],
            "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)],
            "num_local_experts": c["E"], "num_experts_per_tok": c["k"], "experts_per_token": c["k"],
            "swiglu_limit": c["limit"], "attention_bias": True, "tie_word_embeddings": False,
            "hidden_act": "silu", "router_aux_loss_coef": 0.9, "output_router_logits": False, "torch_dtype": "float32"}


def hf_checkpoint(c, w):
    """The MaxText-named model `w` as a Hugging Face GPT-OSS checkpoint (float32 weights, config.json dict)."""
    D, N, K, H, F, E = c["D"], c["N"], c["K"], c["H"], c["F"], c["E"]
    hf = {"model.embed_tokens.weight": w["token_embedder.embedding"], "model.norm.weight": w["decoder.decoder_norm.scale"],
          "lm_head.weight": np.ascontiguousarray(w["decoder.logits_dense.kernel"].T)}
    for i in range(c["L"]):
        m, h = f"decoder.layers_{i}.", f"model.layers.{i}."
        hf[h + "input_layernorm.weight"] = w[m + "pre_self_attention_layer_norm.scale"]
        hf[h + "post_attention_layernorm.weight"] = w[m + "post_self_attention_layer_norm.scale"]
        for mt, hn, heads in (("query", "q_proj", N), ("key", "k_proj", K), ("value", "v_proj", K)):
            hf[h + f"self_attn.{hn}.weight"] = np.ascontiguousarray(w[m + f"GptOssAttention.{mt}.kernel"].reshape(D, heads * H).T)
            hf[h + f"self_attn.{hn}.bias"] = w[m + f"GptOssAttention.{mt}.bias"].reshape(heads * H)
        hf[h + "self_attn.o_proj.weight"] = np.ascontiguousarray(w[m + "GptOssAttention.out.kernel"].reshape(N * H, D).T)
        hf[h + "self_attn.o_proj.bias"] = w[m + "GptOssAttention.out.bias"]
        hf[h + "self_attn.sinks"] = w[m + "GptOssAttention.sinks"]
        hf[h + "mlp.router.weight"] = np.ascontiguousarray(w[m + "GptOssMlp.gate.kernel"].T)
        hf[h + "mlp.router.bias"] = w[m + "GptOssMlp.gate.bias"]
        gu = np.empty((E, D, 2 * F), np.float32)
        gu[..., 0::2], gu[..., 1::2] = w[m + "GptOssMlp.wi_0"], w[m + "GptOssMlp.wi_1"]
        gub = np.empty((E, 2 * F), np.float32)
        gub[..., 0::2], gub[..., 1::2] = w[m + "GptOssMlp.wi_0_bias"], w[m + "GptOssMlp.wi_1_bias"]
        hf[h + "mlp.experts.gate_up_proj"] = gu
        hf[h + "mlp.experts.gate_up_proj_bias"] = gub
        hf[h + "mlp.experts.down_proj"] = w[m + "GptOssMlp.wo"]
        hf[h + "mlp.experts.down_proj_bias"] = w[m + "GptOssMlp.wo_bias"]
    return hf, hf_config(c)


# ----------------------------------------------------------------------------------------------------------------
# MXFP4: this script's quantiser (nearest e2m1 value under a power-of-two block scale) and its decoder

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float64)


def mxfp4_quantise(m):
    """m [E, R, C] float32 (C a multiple of 32) -> blocks [E, R, C/32, 16] u8, scales [E, R, C/32] u8."""
    E, R, C = m.shape
    g = m.astype(np.float64).reshape(E, R, C // 32, 32)
    amax = np.abs(g).max(-1)
    # the largest power of two s with amax / s <= 6 (e2m1's largest magnitude), as an e8m0 exponent byte
    exp = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, 1e-30) / 6.0)), -127).astype(np.int64)
    exp = np.clip(exp, -127, 127)
    scale = np.ldexp(1.0, exp)[..., None]
    v = g / scale
    mag = np.abs(v)
    code = np.abs(mag[..., None] - E2M1).argmin(-1)  # nearest magnitude (ties to the smaller code)
    code = code | np.where(v < 0, 8, 0)
    code = code.astype(np.uint8).reshape(E, R, C // 32, 16, 2)
    blocks = (code[..., 0] | (code[..., 1] << 4)).astype(np.uint8)
    return blocks, (exp + 127).astype(np.uint8)


def mxfp4_decode(blocks, scales):
    """blocks [E, R, G, 16] u8, scales [E, R, G] u8 -> float32 [E, R, G*32] (value 2j: low nibble of byte j)."""
    lut = np.concatenate([E2M1, -E2M1])
    lo, hi = blocks & 0x0F, blocks >> 4
    vals = np.stack([lut[lo], lut[hi]], axis=-1).reshape(*blocks.shape[:-1], 32)
    out = vals * np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    E, R, G = scales.shape
    return out.reshape(E, R, G * 32).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# Cases

def layer_case(name, index, seed):
    c = settings()
    pos = np.tile(np.arange(7, dtype=np.int32), (2, 1))
    for attempt in range(400):
        g = rng(seed + 1000 * attempt)
        w = layer_weights(g, c)
        x = f32(g, (2, 7, c["D"]), 1.0, 0.1)
        margins, clamped = [], [0, 0]
        out, a, f = layer(t64(x), to64(w), c, index, pos, margins, clamped)
        if min(margins) >= BF16_MARGIN:
            break
    else:
        raise RuntimeError(name + ": no seed with clear routing margins")
    assert clamped[0] > 0, "the fixture never reaches the SwiGLU clamp"
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "positions", pos)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", a.numpy())
    save_npy(d, "mlp", f.numpy())
    save_meta(d, {"what": f"gpt_oss decoder layer {index} ({'local sliding' if index % 2 == 0 else 'global'}), "
                          "float64 from float32 inputs", "config": config_keys(c), "layer_index": index,
                  "batch": 2, "length": 7, "min_routing_margin": min(margins),
                  "clamped_fraction": clamped[0] / clamped[1]})


def model_weights(g, c):
    w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
    for i in range(c["L"]):
        w.update(prefixed(layer_weights(g, c), f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2, 1.0)
    w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
    return w


def write_hf(d, hf, hc, meta=None):
    os.makedirs(d, exist_ok=True)
    save_safetensors(f"{d}/model.safetensors", hf, {"format": "pt"})
    with open(f"{d}/config.json", "w") as fh:
        json.dump(hc, fh, indent=1, sort_keys=True)


def model_case(seed):
    c = settings()
    for attempt in range(200):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        margins, clamped = [], [0, 0]
        logits, acts = model_forward(to64(w), tokens, c, margins, clamped)
        if min(margins) >= MARGIN:
            break
    else:
        raise RuntimeError("gpt_oss model: no seed with clear routing margins")
    d = case_dir("gpt_oss_model")
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", cycle_scanned(w, 2, c["L"]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    hf, hc = hf_checkpoint(c, w)
    hl = hf_forward(hc, hf, tokens)
    diff = float((hl - logits).abs().max())
    # The re-statements differ only in the rotary table: MaxText forms frequencies and angles in float32.
    assert diff < 1e-5, f"gpt_oss: the Hugging Face and MaxText re-statements differ by {diff}"
    write_hf(os.path.join(d, "hf"), hf, hc)
    save_meta(d, {"what": f"{c['L']}-layer gpt_oss model, float64 from float32 weights", "config": config_keys(c),
                  "tokens": [B, T], "min_routing_margin": min(margins), "clamped_fraction": clamped[0] / clamped[1],
                  "hf_vs_maxtext_max_abs_diff": diff})


def mxfp4_case(seed):
    """A 2-layer model whose HF checkpoint stores the experts as MXFP4; references on the decoded weights."""
    c = settings()
    c["L"] = 2
    for attempt in range(200):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
        hf, hc = hf_checkpoint(c, w)
        q = {}
        for i in range(c["L"]):
            h = f"model.layers.{i}.mlp.experts."
            # HF stores the quantised matrices [E, out, in]: gate_up [E, 2F, D], down [E, D, F].
            for name in ("gate_up_proj", "down_proj"):
                blocks, scales = mxfp4_quantise(np.ascontiguousarray(hf[h + name].transpose(0, 2, 1)))
                q[h + name + "_blocks"], q[h + name + "_scales"] = blocks, scales
                dec = mxfp4_decode(blocks, scales)
                hf[h + name] = np.ascontiguousarray(dec.transpose(0, 2, 1))  # [E, in, out] as the bf16 files
        # The MaxText weights the decoded file stands for.
        for i in range(c["L"]):
            h, m = f"model.layers.{i}.mlp.experts.", f"decoder.layers_{i}.GptOssMlp."
            w[m + "wi_0"] = np.ascontiguousarray(hf[h + "gate_up_proj"][..., 0::2])
            w[m + "wi_1"] = np.ascontiguousarray(hf[h + "gate_up_proj"][..., 1::2])
            w[m + "wo"] = hf[h + "down_proj"]
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        margins = []
        logits, _ = model_forward(to64(w), tokens, c, margins)
        if min(margins) >= MARGIN:
            break
    else:
        raise RuntimeError("gpt_oss mxfp4: no seed with clear routing margins")
    hl = hf_forward(hc, hf, tokens)
    diff = float((hl - logits).abs().max())
    assert diff < 1e-5, f"gpt_oss mxfp4: the Hugging Face and MaxText re-statements differ by {diff}"
    d = case_dir("gpt_oss_mxfp4")
    decoded = {k: v for k, v in hf.items() if k.endswith("gate_up_proj") or k.endswith("down_proj")}
    save_safetensors(f"{d}/decoded_experts.safetensors", decoded)
    files = {k: v for k, v in hf.items() if k not in decoded}
    files.update(q)
    hc = dict(hc)
    hc["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                                     "model.layers.*.mlp.router",
                                                                                     "model.embed_tokens", "lm_head"]}
    write_hf(os.path.join(d, "hf"), files, hc)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    save_meta(d, {"what": "2-layer gpt_oss model, HF checkpoint with MXFP4 experts; float64 logits on the decoded "
                          "weights", "config": config_keys(c, 2), "tokens": [B, T],
                  "min_routing_margin": min(margins), "hf_vs_maxtext_max_abs_diff": diff})


def gguf_mxfp4_case(seed):
    """A 2-layer model as a llama.cpp gpt-oss GGUF whose expert weights are MXFP4, written and quantised by llama.cpp's
    own gguf-py (the peer's quantiser and block layout); references on gguf-py's dequantisation of those blocks.
    Needs /work/peers/llama.cpp/gguf-py (or $GGUF_PY)."""
    sys.path.insert(0, os.environ.get("GGUF_PY", "/work/peers/llama.cpp/gguf-py"))
    import gguf  # noqa: E402
    from gguf import quants  # noqa: E402
    c = settings()
    c["L"], c["limit"] = 2, 7.0  # llama.cpp's SwiGLU limit is a constant 7
    qt = gguf.GGMLQuantizationType.MXFP4
    for attempt in range(200):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
        for i in range(c["L"]):  # larger expert weights so that some gate / up values pass the clamp at 7
            for k in ("wi_0", "wi_1"):
                w[f"decoder.layers_{i}.GptOssMlp.{k}"] = (w[f"decoder.layers_{i}.GptOssMlp.{k}"] * 4).astype(np.float32)
        q = {}
        for i in range(c["L"]):
            m = f"decoder.layers_{i}.GptOssMlp."
            for k, gn in (("wi_0", "ffn_gate_exps"), ("wi_1", "ffn_up_exps"), ("wo", "ffn_down_exps")):
                rows = np.ascontiguousarray(w[m + k].transpose(0, 2, 1))  # [E, out, in] as llama.cpp stores it
                q[f"blk.{i}.{gn}.weight"] = quants.quantize(rows, qt)
                w[m + k] = np.ascontiguousarray(quants.dequantize(q[f"blk.{i}.{gn}.weight"], qt).transpose(0, 2, 1))
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        margins, clamped = [], [0, 0]
        logits, _ = model_forward(to64(w), tokens, c, margins, clamped)
        if min(margins) >= MARGIN and clamped[0] > 0:
            break
    else:
        raise RuntimeError("gpt_oss gguf mxfp4: no seed with clear routing margins")
    d = case_dir("gpt_oss_gguf_mxfp4")
    wr = gguf.GGUFWriter(os.path.join(d, "model.gguf"), "gpt-oss")
    p = "gpt-oss."
    for key, val in (("block_count", c["L"]), ("context_length", 64), ("embedding_length", c["D"]),
                     ("feed_forward_length", c["F"]), ("expert_feed_forward_length", c["F"]),
                     ("attention.head_count", c["N"]), ("attention.head_count_kv", c["K"]),
                     ("attention.key_length", c["H"]), ("attention.value_length", c["H"]),
                     ("attention.sliding_window", c["window"]), ("expert_count", c["E"]),
                     ("expert_used_count", c["k"]), ("rope.scaling.original_context_length", c["orig"])):
        wr.add_uint32(p + key, val)
    wr.add_float32(p + "attention.layer_norm_rms_epsilon", c["eps"])
    wr.add_float32(p + "rope.freq_base", c["theta"])
    wr.add_string(p + "rope.scaling.type", "yarn")
    wr.add_float32(p + "rope.scaling.factor", c["factor"])
    N, K, H, D = c["N"], c["K"], c["H"], c["D"]
    t = {"token_embd.weight": w["token_embedder.embedding"], "output_norm.weight": w["decoder.decoder_norm.scale"],
         "output.weight": np.ascontiguousarray(w["decoder.logits_dense.kernel"].T)}
    for i in range(c["L"]):
        m, b = f"decoder.layers_{i}.", f"blk.{i}."
        t[b + "attn_norm.weight"] = w[m + "pre_self_attention_layer_norm.scale"]
        t[b + "post_attention_norm.weight"] = w[m + "post_self_attention_layer_norm.scale"]
        for mt, gn, heads in (("query", "attn_q", N), ("key", "attn_k", K), ("value", "attn_v", K)):
            t[b + gn + ".weight"] = np.ascontiguousarray(w[m + f"GptOssAttention.{mt}.kernel"].reshape(D, heads * H).T)
            t[b + gn + ".bias"] = w[m + f"GptOssAttention.{mt}.bias"].reshape(heads * H)
        t[b + "attn_output.weight"] = np.ascontiguousarray(w[m + "GptOssAttention.out.kernel"].reshape(N * H, D).T)
        t[b + "attn_output.bias"] = w[m + "GptOssAttention.out.bias"]
        t[b + "attn_sinks.weight"] = w[m + "GptOssAttention.sinks"]
        t[b + "ffn_gate_inp.weight"] = np.ascontiguousarray(w[m + "GptOssMlp.gate.kernel"].T)
        t[b + "ffn_gate_inp.bias"] = w[m + "GptOssMlp.gate.bias"]
        t[b + "ffn_gate_exps.bias"] = w[m + "GptOssMlp.wi_0_bias"]
        t[b + "ffn_up_exps.bias"] = w[m + "GptOssMlp.wi_1_bias"]
        t[b + "ffn_down_exps.bias"] = w[m + "GptOssMlp.wo_bias"]
    for name, a in t.items():
        wr.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    for name, a in q.items():
        wr.add_tensor(name, a, raw_dtype=qt)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    save_meta(d, {"what": "2-layer gpt_oss model as a gpt-oss GGUF with MXFP4 experts quantised by llama.cpp's gguf-py; "
                          "float64 logits on gguf-py's dequantised experts", "config": config_keys(c, 2),
                  "tokens": [B, T], "min_routing_margin": min(margins), "clamped_fraction": clamped[0] / clamped[1]})


def main():
    torch.set_default_dtype(torch.float64)
    layer_case("gpt_oss_layer", 0, 71)
    layer_case("gpt_oss_layer_global", 1, 72)
    model_case(81)
    mxfp4_case(91)
    gguf_mxfp4_case(101)
    print("wrote tests/fixtures/gpt_oss_{layer,layer_global,model,mxfp4,gguf_mxfp4}")


if __name__ == "__main__":
    main()
