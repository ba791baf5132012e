"""MaxText's olmo3 decoder block re-stated in PyTorch float64 from float32 inputs and weights, the same model as a
Hugging Face Olmo3ForCausalLM checkpoint with a second, Hugging Face-style re-statement of its forward pass (the two
must agree before anything is written), and the logits llama.cpp's olmo2 graph would give (no YaRN on sliding layers).

MaxText semantics (models/olmo3.py Olmo3DecoderLayer, layers/attentions.py, layers/normalizations.py GlobalRMSNorm,
layers/embeddings.py YarnRotaryEmbedding):
  h   = x + RMSNorm_post_attn(Attention(x))   no pre-norm; `attention` module; post_self_attention_layer_norm
  out = h + RMSNorm_post_mlp(MlpBlock(h))      SwiGLU `mlp`; post_mlp_layer_norm
  Attention: q/k RMSNorm over all heads at once (model_name starts with "olmo3": scales [N*H], [K*H]), then RoPE
  (YaRN with rope_interleave=false, truncate, attention scaling 0.1 ln(factor) + 1 on q and k; or default RoPE),
  then q * head_dim^-0.5; layer i sliding-window (window W: key s visible from query t when t - W < s <= t) when
  i % 4 < 3, global when i % 4 == 3; the same rotary embedding on every layer.
Hugging Face semantics (Olmo3ForCausalLM): [out, in] Linear weights, q_norm / k_norm over the full projections,
rotate-half RoPE with cos/sin multiplied by attention_factor, softmax(q k^T / sqrt(d)) with the sliding-window mask
on layer_types == "sliding_attention", post_attention_layernorm / post_feedforward_layernorm on the branch outputs.

The MaxText attention, rotary and mask helpers are attention_reference.py's (written from the spec, independent of the
C++ port). Writes tests/fixtures/olmo3_layer_{local,global,default}/ and tests/fixtures/olmo3_model/ (MaxText
unscanned + scanned safetensors, hf/ config.json + model.safetensors, logits, activations, logits_llamacpp.npy).
Run: /usr/bin/python3 tests/reference/olmo3_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
from common import case_dir, cycle_scanned, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

B, T = 2, 9
# Tiny model: 4 layers = one L, L, L, G group; window 3 < T so the sliding layers mask; YaRN with the OLMo 3 shape
# (theta 5e5) at original context 16, factor 4 (max_position_embeddings = 64 = factor * original, as OLMo 3's
# 65536 = 8 * 8192): pair 0 keeps its frequency, the others are interpolated.
SET = dict(D=32, N=4, K=2, H=8, F=48, V=64, L=4, eps=1e-6, theta=500000.0, window=3, factor=4.0, orig=16, maxpos=64)


def to64(w):
    return {k: t64(v) for k, v in w.items()}


def sub(w, p):
    return {k[len(p):]: v for k, v in w.items() if k.startswith(p)}


def config_keys(c, yarn=True):
    cfg = {"decoder_block": "olmo3", "model_name": "olmo3-tiny", "dtype": "float32", "base_emb_dim": c["D"],
           "base_num_query_heads": c["N"], "base_num_kv_heads": c["K"], "head_dim": c["H"], "base_mlp_dim": c["F"],
           "base_num_decoder_layers": c["L"], "vocab_size": c["V"], "normalization_layer_epsilon": c["eps"],
           "rope_max_timescale": c["theta"], "max_target_length": c["maxpos"], "use_qk_norm": True,
           "sliding_window_size": c["window"], "inhomogeneous_layer_cycle_interval": 4, "logits_via_embedding": False,
           "mlp_activations": ["silu", "linear"], "scan_layers": False, "rope_interleave": False}
    if yarn:
        cfg.update(rope_type="yarn", rope_factor=c["factor"], original_max_position_embeddings=c["orig"],
                   max_position_embeddings=c["maxpos"], beta_fast=32.0, beta_slow=1.0, rope_attention_scaling=True,
                   rope_truncate=True)
    else:
        cfg["rope_type"] = "default"
    return cfg


def rope(c, yarn=True):
    if yarn:
        return AR.yarn_rope(c["H"], c["theta"], c["factor"], c["orig"], 32.0, 1.0, interleave=False, truncate=True,
                            attention_scaling=True)
    return AR.default_rope(c["H"], c["theta"])


def attn_args(c, index, rope_fn):
    a = {"heads": c["N"], "kv_heads": c["K"], "head_dim": c["H"], "eps": c["eps"], "rope": rope_fn,
         "q_scalar": c["H"] ** -0.5, "qk_norm": "global"}
    if index % 4 < 3:
        a["type"], a["window"] = "local_sliding", c["window"]
    return a


def olmo3_layer(x, w, c, index, pos, rope_fn):
    """Returns (out, attention branch after its post-norm, mlp branch after its post-norm)."""
    a = AR.rms_norm(AR.attention(x, sub(w, "attention."), attn_args(c, index, rope_fn), pos),
                    w["post_self_attention_layer_norm.scale"], c["eps"])
    h = x + a
    m = AR.rms_norm(AR.mlp(h, sub(w, "mlp.")), w["post_mlp_layer_norm.scale"], c["eps"])
    return h + m, a, m


def layer_weights(g, c):
    D, N, K, H, F = c["D"], c["N"], c["K"], c["H"], c["F"]
    s = 1.0 / math.sqrt(D)
    return {"attention.query.kernel": f32(g, (D, N, H), s), "attention.key.kernel": f32(g, (D, K, H), s),
            "attention.value.kernel": f32(g, (D, K, H), s),
            "attention.out.kernel": f32(g, (N, H, D), 1.0 / math.sqrt(N * H)),
            "attention.query_norm.scale": f32(g, (N * H,), 0.2, 1.0),
            "attention.key_norm.scale": f32(g, (K * H,), 0.2, 1.0),
            "post_self_attention_layer_norm.scale": f32(g, (D,), 0.2, 1.0),
            "mlp.wi_0.kernel": f32(g, (D, F), s), "mlp.wi_1.kernel": f32(g, (D, F), s),
            "mlp.wo.kernel": f32(g, (F, D), 1.0 / math.sqrt(F)),
            "post_mlp_layer_norm.scale": f32(g, (D,), 0.2, 1.0)}


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face re-statement (Olmo3ForCausalLM), on HF names and [out, in] weights

def hf_rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def hf_rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def hf_inv_freq(hc, H, local_plain=False):
    """(inv_freq [H/2], attention_factor) as Hugging Face's default / YaRN rope init computes them (float64 here)."""
    base = hc["rope_theta"]
    pos_freqs = base ** (torch.arange(0, H, 2, dtype=torch.float64) / H)
    rs = hc.get("rope_scaling")
    if not rs or local_plain:
        return 1.0 / pos_freqs, 1.0
    factor, orig = rs["factor"], rs["original_max_position_embeddings"]
    att = rs.get("attention_factor", 0.1 * math.log(factor) + 1.0)

    def corr_dim(rot):
        return (H * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
    low, high = corr_dim(rs.get("beta_fast", 32)), corr_dim(rs.get("beta_slow", 1))
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, H - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(H // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrap = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrap) + (1.0 / pos_freqs) * extrap
    return inv, att


def hf_forward(hc, w, tokens, llamacpp=False):
    """Logits [B, T, V]. llamacpp=True: llama.cpp's olmo2 graph (plain RoPE, no YaRN, on sliding layers)."""
    t = to64(w)
    D, L, N, K = hc["hidden_size"], hc["num_hidden_layers"], hc["num_attention_heads"], hc["num_key_value_heads"]
    H, eps = D // N, hc["rms_norm_eps"]
    Bn, Tn = tokens.shape
    x = t["model.embed_tokens.weight"][torch.from_numpy(tokens).long()]
    ti = torch.arange(Tn)
    causal = ti[None, :] <= ti[:, None]
    window = causal & (ti[:, None] - ti[None, :] < hc["sliding_window"])

    def lin(h, name):
        return h @ t[name + ".weight"].T

    for i in range(L):
        p = "model.layers.%d." % i
        sliding = hc["layer_types"][i] == "sliding_attention"
        inv, att = hf_inv_freq(hc, H, local_plain=llamacpp and sliding)
        ang = torch.outer(torch.arange(Tn, dtype=torch.float64), inv)
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = (emb.cos() * att)[None, :, None, :], (emb.sin() * att)[None, :, None, :]
        q = hf_rms(lin(x, p + "self_attn.q_proj"), t[p + "self_attn.q_norm.weight"], eps).view(Bn, Tn, N, H)
        k = hf_rms(lin(x, p + "self_attn.k_proj"), t[p + "self_attn.k_norm.weight"], eps).view(Bn, Tn, K, H)
        v = lin(x, p + "self_attn.v_proj").view(Bn, Tn, K, H)
        q = q * cos + hf_rotate_half(q) * sin
        k = k * cos + hf_rotate_half(k) * sin
        k = k.repeat_interleave(N // K, dim=2)
        v = v.repeat_interleave(N // K, dim=2)
        s = torch.einsum("btnd,bsnd->bnts", q, k) / math.sqrt(H)
        s = s.masked_fill(~(window if sliding else causal), float("-inf")).softmax(-1)
        o = torch.einsum("bnts,bsnd->btnd", s, v).reshape(Bn, Tn, N * H)
        x = x + hf_rms(lin(o, p + "self_attn.o_proj"), t[p + "post_attention_layernorm.weight"], eps)
        m = (torch.nn.functional.silu(lin(x, p + "mlp.gate_proj")) * lin(x, p + "mlp.up_proj")) @ t[
            p + "mlp.down_proj.weight"].T
        x = x + hf_rms(m, t[p + "post_feedforward_layernorm.weight"], eps)
    x = hf_rms(x, t["model.norm.weight"], eps)
    return x @ t["lm_head.weight"].T


def hf_checkpoint(c, w):
    """The MaxText-named model `w` as a Hugging Face Olmo3 checkpoint (weights, config.json dict)."""
    D, N, K, H, L = c["D"], c["N"], c["K"], c["H"], c["L"]
    hf = {"model.embed_tokens.weight": w["token_embedder.embedding"], "model.norm.weight": w["decoder.decoder_norm.scale"],
          "lm_head.weight": np.ascontiguousarray(w["decoder.logits_dense.kernel"].T)}
    for i in range(L):
        m, h = f"decoder.layers_{i}.", f"model.layers.{i}."
        for mt, hn, heads in (("query", "q_proj", N), ("key", "k_proj", K), ("value", "v_proj", K)):
            hf[h + f"self_attn.{hn}.weight"] = np.ascontiguousarray(w[m + f"attention.{mt}.kernel"].reshape(D, heads * H).T)
        hf[h + "self_attn.o_proj.weight"] = np.ascontiguousarray(w[m + "attention.out.kernel"].reshape(N * H, D).T)
        hf[h + "self_attn.q_norm.weight"] = w[m + "attention.query_norm.scale"]
        hf[h + "self_attn.k_norm.weight"] = w[m + "attention.key_norm.scale"]
        hf[h + "post_attention_layernorm.weight"] = w[m + "post_self_attention_layer_norm.scale"]
        hf[h + "post_feedforward_layernorm.weight"] = w[m + "post_mlp_layer_norm.scale"]
        for mt, hn in (("wi_0", "gate_proj"), ("wi_1", "up_proj"), ("wo", "down_proj")):
            hf[h + f"mlp.{hn}.weight"] = np.ascontiguousarray(w[m + f"mlp.{mt}.kernel"].T)
    hc = {"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "hidden_size": D, "intermediate_size": c["F"],
          "num_attention_heads": N, "num_key_value_heads": K, "num_hidden_layers": L, "vocab_size": c["V"],
          "rms_norm_eps": c["eps"], "rope_theta": c["theta"], "max_position_embeddings": c["maxpos"],
          "sliding_window": c["window"], "layer_types": ["full_attention" if i % 4 == 3 else "sliding_attention"
                                                         for i in range(L)],
          "rope_scaling": {"rope_type": "yarn", "factor": c["factor"], "original_max_position_embeddings": c["orig"],
                           "attention_factor": 0.1 * math.log(c["factor"]) + 1.0, "beta_fast": 32.0, "beta_slow": 1.0},
          "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu", "attention_bias": False,
          "attention_dropout": 0.0, "pad_token_id": 1}
    return hf, hc


# ----------------------------------------------------------------------------------------------------------------
# Cases

def layer_case(name, index, seed, yarn=True):
    c = SET
    g = rng(seed)
    w = layer_weights(g, c)
    x = f32(g, (B, T, c["D"]), 1.0, 0.1)
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    out, a, m = olmo3_layer(t64(x), to64(w), c, index, pos, rope(c, yarn))
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "positions", pos)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", a.numpy())
    save_npy(d, "mlp", m.numpy())
    save_meta(d, {"what": f"olmo3 decoder layer {index} ({'global' if index % 4 == 3 else 'local sliding'}, "
                          f"{'YaRN' if yarn else 'default RoPE'}), float64 from float32 inputs",
                  "config": config_keys(c, yarn), "layer_index": index, "batch": B, "length": T})


def model_case(seed):
    c = SET
    g = rng(seed)
    w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
    for i in range(c["L"]):
        w.update({f"decoder.layers_{i}.{k}": v for k, v in layer_weights(g, c).items()})
    w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2, 1.0)
    w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
    tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    w64 = to64(w)
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    acts = {"token_embedder": x}
    for i in range(c["L"]):
        x, a, m = olmo3_layer(x, sub(w64, f"decoder.layers_{i}."), c, i, pos, rope(c))
        acts[f"decoder.layers_{i}"] = x
        acts[f"decoder.layers_{i}.attention"] = a
    x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
    acts["decoder.decoder_norm"] = x
    logits = x @ w64["decoder.logits_dense.kernel"]
    hf, hc = hf_checkpoint(c, w)
    hl = hf_forward(hc, hf, tokens)
    diff = float((hl - logits).abs().max())
    # The only difference is the rotary table: MaxText forms frequencies and angles in float32, HF here in float64.
    assert diff < 1e-5, f"olmo3: the Hugging Face and MaxText re-statements differ by {diff}"
    lcpp = hf_forward(hc, hf, tokens, llamacpp=True)
    d = case_dir("olmo3_model")
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", cycle_scanned(w, 4, c["L"]))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    save_npy(d, "logits_llamacpp", lcpp.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    hd = os.path.join(d, "hf")
    os.makedirs(hd, exist_ok=True)
    save_safetensors(f"{hd}/model.safetensors", hf, {"format": "pt"})
    with open(f"{hd}/config.json", "w") as fh:
        json.dump(hc, fh, indent=1, sort_keys=True)
    save_meta(d, {"what": "4-layer olmo3 model (L, L, L, G; YaRN), float64 from float32 weights",
                  "config": config_keys(c), "tokens": [B, T], "hf_vs_maxtext_max_abs_diff": diff,
                  "llamacpp_vs_maxtext_max_abs_diff": float((lcpp - logits).abs().max())})


def main():
    torch.set_default_dtype(torch.float64)
    layer_case("olmo3_layer_local", 0, 71)
    layer_case("olmo3_layer_global", 3, 72)
    layer_case("olmo3_layer_default", 1, 73, yarn=False)
    model_case(74)
    print("wrote tests/fixtures/olmo3_layer_{local,global,default}, olmo3_model")


if __name__ == "__main__":
    main()
