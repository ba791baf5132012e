"""Tiny Hugging Face-style checkpoints (config.json + safetensors, one of them also sharded) and their logits,
computed in PyTorch float64 with Hugging Face's modelling semantics restated (LlamaForCausalLM, MistralForCausalLM,
Qwen3ForCausalLM): RMSNorm, rotate-half RoPE with inv_freq = theta^(-2i/d) (LLaMA-3 frequency scaling when
rope_scaling says so), q/k per-head RMSNorm before RoPE for Qwen3, GQA by repeating K/V heads, softmax(q k^T / sqrt(d))
with a causal mask, SwiGLU MLP, final norm, lm_head (or the embedding when tied).

Writes tests/fixtures/hf_tiny/<case>/: config.json, model.safetensors (and for `llama` also a sharded copy under
sharded/), tokens.npy [T], logits.npy [T, V] (float64). Usage: /usr/bin/python3 tests/reference/hf_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FIXTURES, f32, rng, save_npy, save_safetensors  # noqa: E402

CASES = {
    "llama": dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=80, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  max_position_embeddings=64, hidden_act="silu"),
    "llama_tied": dict(model_type="llama", hidden_size=32, intermediate_size=40, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=2, vocab_size=72, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
                       max_position_embeddings=64, hidden_act="silu"),
    "llama31": dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=1, vocab_size=64, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                    max_position_embeddings=64, hidden_act="silu",
                    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                      original_max_position_embeddings=8192)),
    "mistral": dict(model_type="mistral", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=80, rms_norm_eps=1e-5, rope_theta=1000000.0, tie_word_embeddings=False,
                    max_position_embeddings=64, hidden_act="silu", sliding_window=4096),
    "qwen3": dict(model_type="qwen3", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=80, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  tie_word_embeddings=False, max_position_embeddings=64, hidden_act="silu", attention_bias=False),
}


def make_weights(cfg, gen):
    D, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    N, K, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    H = cfg.get("head_dim", D // N)
    w = {"model.embed_tokens.weight": f32(gen, (V, D)),
         "model.norm.weight": f32(gen, (D,), 0.1, 1.0)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = f32(gen, (V, D), 1 / math.sqrt(D))
    for i in range(L):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = f32(gen, (D,), 0.1, 1.0)
        w[p + "post_attention_layernorm.weight"] = f32(gen, (D,), 0.1, 1.0)
        w[p + "self_attn.q_proj.weight"] = f32(gen, (N * H, D), 1 / math.sqrt(D))
        w[p + "self_attn.k_proj.weight"] = f32(gen, (K * H, D), 1 / math.sqrt(D))
        w[p + "self_attn.v_proj.weight"] = f32(gen, (K * H, D), 1 / math.sqrt(D))
        w[p + "self_attn.o_proj.weight"] = f32(gen, (D, N * H), 1 / math.sqrt(N * H))
        if cfg["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = f32(gen, (H,), 0.1, 1.0)
            w[p + "self_attn.k_norm.weight"] = f32(gen, (H,), 0.1, 1.0)
        w[p + "mlp.gate_proj.weight"] = f32(gen, (F, D), 1 / math.sqrt(D))
        w[p + "mlp.up_proj.weight"] = f32(gen, (F, D), 1 / math.sqrt(D))
        w[p + "mlp.down_proj.weight"] = f32(gen, (D, F), 1 / math.sqrt(F))
    return w


def inv_freq(cfg, H):
    base = cfg["rope_theta"]
    f = 1.0 / base ** (torch.arange(0, H, 2, dtype=torch.float64) / H)
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "llama3":
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / f
        scaled = torch.where(wl > lo_wl, f / factor, f)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        f = torch.where(medium, smoothed, scaled)
    return f


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(cfg, w, tokens):
    t = {k: torch.from_numpy(v.astype(np.float64)) for k, v in w.items()}
    D, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    N, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    H = cfg.get("head_dim", D // N)
    eps = cfg["rms_norm_eps"]
    T = len(tokens)
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq(cfg, H))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    x = t["model.embed_tokens.weight"][torch.from_numpy(tokens).long()]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        p = "model.layers.%d." % i
        h = rms(x, t[p + "input_layernorm.weight"], eps)
        q = (h @ t[p + "self_attn.q_proj.weight"].T).view(T, N, H)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).view(T, K, H)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).view(T, K, H)
        if cfg["model_type"] == "qwen3":
            q = rms(q, t[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, t[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(N // K, dim=1)
        v = v.repeat_interleave(N // K, dim=1)
        s = torch.einsum("tnd,snd->nts", q, k) / math.sqrt(H)
        s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        o = torch.einsum("nts,snd->tnd", s, v).reshape(T, N * H)
        x = x + o @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, t[p + "post_attention_layernorm.weight"], eps)
        g = h @ t[p + "mlp.gate_proj.weight"].T
        u = h @ t[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ t[p + "mlp.down_proj.weight"].T
    x = rms(x, t["model.norm.weight"], eps)
    head = t["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else t["lm_head.weight"]
    return (x @ head.T).numpy()


def main():
    for seed, (name, cfg) in enumerate(sorted(CASES.items())):
        gen = rng(100 + seed)
        w = make_weights(cfg, gen)
        tokens = gen.integers(0, cfg["vocab_size"], size=7).astype(np.int32)
        d = os.path.join(FIXTURES, "hf_tiny", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(cfg, architectures=[cfg["model_type"].capitalize() + "ForCausalLM"]), f, indent=1, sort_keys=True)
        save_safetensors(os.path.join(d, "model.safetensors"), w, {"format": "pt"})
        save_npy(d, "tokens", tokens)
        save_npy(d, "logits", forward(cfg, w, tokens))
        if name == "llama":
            sd = os.path.join(d, "sharded")
            os.makedirs(sd, exist_ok=True)
            with open(os.path.join(sd, "config.json"), "w") as f:
                json.dump(dict(cfg, architectures=["LlamaForCausalLM"]), f, indent=1, sort_keys=True)
            names = sorted(w)
            first = [n for n in names if n.startswith("model.layers.0.") or n == "model.embed_tokens.weight"]
            second = [n for n in names if n not in first]
            files = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
            weight_map = {}
            for fname, ns in files.items():
                save_safetensors(os.path.join(sd, fname), {n: w[n] for n in ns}, {"format": "pt"})
                weight_map.update({n: fname for n in ns})
            total = int(sum(v.nbytes for v in w.values()))
            with open(os.path.join(sd, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1, sort_keys=True)
        print("wrote", d)


if __name__ == "__main__":
    main()
