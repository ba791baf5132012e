"""MaxText's Gemma, Gemma 2 and Gemma 3 decoder layers and tiny models, re-stated in PyTorch float64 from float32
weights (models/gemma.py, gemma2.py, gemma3.py; decoders.py for the model; spec decoder.md), plus the Hugging Face
checkpoints they come from and the folding MaxText's converters apply (checkpoint_conversion: RMSNorm scale + 1,
embedding * sqrt(hidden_size), query * query_pre_attn_scalar^-0.5 for Gemma / Gemma 2).

Written from MaxText's Python and Hugging Face's modelling description, not from the C++ port. The attention
(masks, soft cap, qk norm, RoPE) is attention_reference.attention; this file adds the Gemma sandwich block (pre norm,
attention, post norm, residual, pre-FFW norm, GeGLU MLP with tanh-approximated GELU, post norm, residual), the
Gemma 3 5-local:1-global pattern with its two RoPE bases, Gemma 2's local/global pair per MaxText layer, and the
tied head (bf16-rounded table, / sqrt(emb_dim), final soft cap).

Writes tests/fixtures/gemma*/:
  gemma3_layer_local, gemma3_layer_global   one Gemma3DecoderLayer (index 0 / index 5): weights.safetensors, x.npy,
                                            positions.npy, out.npy, attn.npy, mlp.npy, meta.json
  gemma_model, gemma2_model, gemma3_model   a tiny model: model.safetensors (MaxText names, unscanned),
                                            model_scanned.safetensors (MaxText's scanned layout), hf/ (config.json +
                                            model.safetensors with HF names, unfolded), model.gguf (gemma,
                                            gemma3: the same weights as llama.cpp's converter writes them),
                                            tokens.npy, logits.npy,
                                            act_*.npy, meta.json
Run: /usr/bin/python3 tests/reference/gemma_reference.py
"""
import json
import math
import os

import numpy as np
import torch

from attention_reference import attention, default_rope, rms_norm, sub, to64
from gguf_min import read_gguf, write_gguf
from common import bf16_round, case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64

F32 = np.float32


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def geglu(x, w):
    return (gelu_tanh(x @ w["wi_0.kernel"]) * (x @ w["wi_1.kernel"])) @ w["wo.kernel"]


def block(x, w, a, pos, sfx, post, eps):
    """The Gemma sandwich block; parameter names take the suffix `sfx`. Returns (out, attention, mlp)."""
    h = rms_norm(x, w["pre_self_attention_norm" + sfx + ".scale"], eps)
    at = attention(h, sub(w, "self_attention" + sfx + "."), a, pos)
    att = rms_norm(at, w["post_self_attention_norm" + sfx + ".scale"], eps) if post else at
    x = att + x
    m = geglu(rms_norm(x, w["pre_ffw_norm" + sfx + ".scale"], eps), sub(w, "mlp" + sfx + "."))
    mm = rms_norm(m, w["post_ffw_norm" + sfx + ".scale"], eps) if post else m
    return mm + x, at, m


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face checkpoints (original, unfolded parameters) and MaxText's folding.

def hf_weights(g, kind, D, N, K, H, F, L_hf, V):
    w = {"model.embed_tokens.weight": f32(g, (V, D)), "model.norm.weight": f32(g, (D,), 0.2)}
    norms = ["input_layernorm", "post_attention_layernorm"]
    if kind == "gemma":
        pass
    else:
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    for i in range(L_hf):
        p = "model.layers.%d." % i
        for n in norms:
            w[p + n + ".weight"] = f32(g, (D,), 0.2)  # (1 + w) norms: weights near 0
        w[p + "self_attn.q_proj.weight"] = f32(g, (N * H, D), 1 / math.sqrt(D))
        w[p + "self_attn.k_proj.weight"] = f32(g, (K * H, D), 1 / math.sqrt(D))
        w[p + "self_attn.v_proj.weight"] = f32(g, (K * H, D), 1 / math.sqrt(D))
        w[p + "self_attn.o_proj.weight"] = f32(g, (D, N * H), 1 / math.sqrt(N * H))
        if kind == "gemma3":
            w[p + "self_attn.q_norm.weight"] = f32(g, (H,), 0.2)
            w[p + "self_attn.k_norm.weight"] = f32(g, (H,), 0.2)
        w[p + "mlp.gate_proj.weight"] = f32(g, (F, D), 1 / math.sqrt(D))
        w[p + "mlp.up_proj.weight"] = f32(g, (F, D), 1 / math.sqrt(D))
        w[p + "mlp.down_proj.weight"] = f32(g, (D, F), 1 / math.sqrt(F))
    return w


def fold(kind, hw, D, N, K, H, L_hf, qpas):
    """MaxText parameters (unscanned names) from HF ones, as MaxText's converters fold them."""
    # gemma3: bf16 normalizer (param_mapping.GEMMA3 hook); gemma / gemma2: float32 sqrt(hidden_size).
    normalizer = float(bf16_round(np.array([math.sqrt(D)], F32))[0]) if kind == "gemma3" else float(np.float32(math.sqrt(D)))
    qscale = 1.0 if kind == "gemma3" else float(np.float32(qpas ** -0.5))
    plus1 = lambda a: (a + F32(1)).astype(F32)  # noqa: E731
    m = {"token_embedder.embedding": (hw["model.embed_tokens.weight"] * F32(normalizer)).astype(F32),
         "decoder.decoder_norm.scale": plus1(hw["model.norm.weight"])}
    for i in range(L_hf):
        p = "model.layers.%d." % i
        if kind == "gemma2":
            q = "decoder.layers_%d." % (i // 2)
            sfx = "_local" if i % 2 == 0 else "_global"
        else:
            q, sfx = "decoder.layers_%d." % i, ""
        m[q + "pre_self_attention_norm" + sfx + ".scale"] = plus1(hw[p + "input_layernorm.weight"])
        if kind == "gemma":
            m[q + "pre_ffw_norm.scale"] = plus1(hw[p + "post_attention_layernorm.weight"])
        else:
            m[q + "post_self_attention_norm" + sfx + ".scale"] = plus1(hw[p + "post_attention_layernorm.weight"])
            m[q + "pre_ffw_norm" + sfx + ".scale"] = plus1(hw[p + "pre_feedforward_layernorm.weight"])
            m[q + "post_ffw_norm" + sfx + ".scale"] = plus1(hw[p + "post_feedforward_layernorm.weight"])
        a = q + "self_attention" + sfx + "."
        m[a + "query.kernel"] = (hw[p + "self_attn.q_proj.weight"].T.reshape(D, N, H) * F32(qscale)).astype(F32)
        m[a + "key.kernel"] = np.ascontiguousarray(hw[p + "self_attn.k_proj.weight"].T.reshape(D, K, H))
        m[a + "value.kernel"] = np.ascontiguousarray(hw[p + "self_attn.v_proj.weight"].T.reshape(D, K, H))
        m[a + "out.kernel"] = np.ascontiguousarray(hw[p + "self_attn.o_proj.weight"].T.reshape(N, H, D))
        if kind == "gemma3":
            m[a + "query_norm.scale"] = plus1(hw[p + "self_attn.q_norm.weight"])
            m[a + "key_norm.scale"] = plus1(hw[p + "self_attn.k_norm.weight"])
        ml = q + "mlp" + sfx + "."
        m[ml + "wi_0.kernel"] = np.ascontiguousarray(hw[p + "mlp.gate_proj.weight"].T)
        m[ml + "wi_1.kernel"] = np.ascontiguousarray(hw[p + "mlp.up_proj.weight"].T)
        m[ml + "wo.kernel"] = np.ascontiguousarray(hw[p + "mlp.down_proj.weight"].T)
    return m


def scanned(kind, w, L):
    """MaxText's scanned layout (layer axis at param_scan_axis = 1). Gemma 3: layers.layers_{0..5} stacked over
    L // 6 repetitions, layers_remainder.layers_r unstacked; Gemma / Gemma 2: layers.<param> stacked over L."""
    out = {k: v for k, v in w.items() if not k.startswith("decoder.layers_")}
    names = sorted({k.split(".", 2)[2] for k in w if k.startswith("decoder.layers_0.")})
    if kind == "gemma3":
        reps, rem = L // 6, L % 6
        for j in range(6 if reps else 0):
            for n in names:
                out["decoder.layers.layers_%d.%s" % (j, n)] = np.stack(
                    [w["decoder.layers_%d.%s" % (r * 6 + j, n)] for r in range(reps)], axis=1)
        for r in range(rem):
            for n in names:
                out["decoder.layers_remainder.layers_%d.%s" % (r, n)] = w["decoder.layers_%d.%s" % (reps * 6 + r, n)]
    else:
        for n in names:
            out["decoder.layers." + n] = np.stack([w["decoder.layers_%d.%s" % (i, n)] for i in range(L)], axis=1)
    return {"params." + k: v for k, v in out.items()}


# ----------------------------------------------------------------------------------------------------------------
# Models

def attn_args(kind, cfg, layer, local, N, K, H):
    eps = cfg["normalization_layer_epsilon"]
    a = {"heads": N, "kv_heads": K, "head_dim": H, "eps": eps, "type": "global",
         "soft_cap": cfg.get("attn_logits_soft_cap", 0.0) if kind != "gemma" else None}
    theta = cfg.get("rope_max_timescale", 10000.0)
    if kind == "gemma3":
        a["qk_norm"] = "rms"
        a["q_scalar"] = H ** -0.5  # model_name gemma3-4b
        local = layer % 6 != 5
    if local:
        a["type"], a["window"] = "local_sliding", cfg["sliding_window_size"]
        if cfg.get("local_rope_max_timescale", -1) > 0:
            theta = cfg["local_rope_max_timescale"]
    # Gemma 3 local layers are exempt from linear RoPE scaling.
    lin = 1.0 if (kind == "gemma3" and local) else cfg.get("rope_linear_scaling_factor", 1.0)
    a["rope"] = default_rope(H, theta, 1.0, lin)
    return a


def model_forward(kind, cfg, w, tokens, L, N, K, H, round_table=True):
    eps = cfg["normalization_layer_epsilon"]
    post = kind != "gemma"
    w64 = to64(w)
    B, T = tokens.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    acts = {"token_embedder": x}
    for i in range(L):
        lw = sub(w64, "decoder.layers_%d." % i)
        if kind == "gemma2":
            x, _, _ = block(x, lw, attn_args(kind, cfg, i, True, N, K, H), pos, "_local", post, eps)
            x, _, _ = block(x, lw, attn_args(kind, cfg, i, False, N, K, H), pos, "_global", post, eps)
        else:
            x, _, _ = block(x, lw, attn_args(kind, cfg, i, False, N, K, H), pos, "", post, eps)
        acts["decoder.layers_%d" % i] = x
    x = rms_norm(x, w64["decoder.decoder_norm.scale"], eps)
    acts["decoder.decoder_norm"] = x
    D = x.shape[-1]
    table = bf16_round(w["token_embedder.embedding"]) if round_table else w["token_embedder.embedding"]
    logits = x @ t64(table).T / math.sqrt(D)
    cap = cfg.get("final_logits_soft_cap", 0.0)
    if cap:
        logits = cap * torch.tanh(logits / cap)
    return logits, acts


def hf_forward(kind, hc, hw, tokens, normalizer):
    """Hugging Face's Gemma / Gemma2 / Gemma3ForCausalLM forward on the ORIGINAL (unfolded) weights: (1 + w) norms,
    embedding * normalizer, q * query_pre_attn_scalar^-0.5 in the attention, Gemma 2 layers alternating local /
    global (even layers local), Gemma 3 layer i global when (i + 1) % 6 == 0, lm_head = the embedding (fp64, no
    bf16 rounding). Used to check the folding in fold() (the fixtures come from the MaxText path)."""
    t = {k: t64(v) for k, v in hw.items()}
    D, N, K = hc["hidden_size"], hc["num_attention_heads"], hc["num_key_value_heads"]
    H, eps, L = hc["head_dim"], hc["rms_norm_eps"], hc["num_hidden_layers"]
    B, T = tokens.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    gn = lambda x, w: rms_norm(x, 1.0 + w, eps)  # noqa: E731
    x = t["model.embed_tokens.weight"][torch.from_numpy(tokens).long()] * normalizer
    for i in range(L):
        p = "model.layers.%d." % i
        if kind == "gemma3":
            local = (i + 1) % 6 != 0
        else:
            local = kind == "gemma2" and i % 2 == 0
        theta = hc.get("rope_local_base_freq", hc["rope_theta"]) if (local and kind == "gemma3") else hc["rope_theta"]
        lin = hc["rope_scaling"]["factor"] if (hc.get("rope_scaling") and not (local and kind == "gemma3")) else 1.0
        a = {"heads": N, "kv_heads": K, "head_dim": H, "eps": eps, "rope": default_rope(H, theta, 1.0, lin),
             "type": "local_sliding" if local else "global", "window": hc.get("sliding_window"),
             "soft_cap": hc.get("attn_logit_softcapping"), "q_scalar": hc.get("query_pre_attn_scalar", H) ** -0.5}
        aw = {"query.kernel": t[p + "self_attn.q_proj.weight"].T.reshape(D, N, H),
              "key.kernel": t[p + "self_attn.k_proj.weight"].T.reshape(D, K, H),
              "value.kernel": t[p + "self_attn.v_proj.weight"].T.reshape(D, K, H),
              "out.kernel": t[p + "self_attn.o_proj.weight"].T.reshape(N, H, D)}
        if kind == "gemma3":
            a["qk_norm"] = "rms"
            aw["query_norm.scale"] = 1.0 + t[p + "self_attn.q_norm.weight"]
            aw["key_norm.scale"] = 1.0 + t[p + "self_attn.k_norm.weight"]
        at = attention(gn(x, t[p + "input_layernorm.weight"]), aw, a, pos)
        if kind == "gemma":
            x = x + at
            h = gn(x, t[p + "post_attention_layernorm.weight"])
        else:
            x = x + gn(at, t[p + "post_attention_layernorm.weight"])
            h = gn(x, t[p + "pre_feedforward_layernorm.weight"])
        m = (gelu_tanh(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)) @ t[p + "mlp.down_proj.weight"].T
        x = x + (m if kind == "gemma" else gn(m, t[p + "post_feedforward_layernorm.weight"]))
    x = gn(x, t["model.norm.weight"])
    logits = x @ t["model.embed_tokens.weight"].T
    cap = hc.get("final_logit_softcapping")
    if cap:
        logits = cap * torch.tanh(logits / cap)
    return logits


def write_llama_cpp_gguf(path, kind, hc, hw):
    """The HF checkpoint as llama.cpp's converter writes it: blk.N.* names, every RMSNorm weight + 1, the embedding
    unscaled (llama.cpp scales it at run time), q/k rows unpermuted (NeoX-style RoPE), no output.weight (tied)."""
    arch = kind
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    if kind == "gemma":
        names["post_attention_layernorm"] = "ffn_norm"
    t = {"token_embd.weight": hw["model.embed_tokens.weight"],
         "output_norm.weight": (hw["model.norm.weight"] + F32(1)).astype(F32)}
    for k, v in hw.items():
        if not k.startswith("model.layers."):
            continue
        _, _, i, rest = k.split(".", 3)
        role = rest[: -len(".weight")]
        v = (v + F32(1)).astype(F32) if role.endswith("norm") or role.endswith("layernorm") else v
        t["blk.%s.%s.weight" % (i, names[role])] = v
    p = arch + "."
    meta = {"general.architecture": arch, p + "context_length": hc["max_position_embeddings"],
            p + "embedding_length": hc["hidden_size"], p + "block_count": hc["num_hidden_layers"],
            p + "feed_forward_length": hc["intermediate_size"], p + "attention.head_count": hc["num_attention_heads"],
            p + "attention.head_count_kv": hc["num_key_value_heads"], p + "attention.key_length": hc["head_dim"],
            p + "attention.value_length": hc["head_dim"], p + "attention.layer_norm_rms_epsilon": hc["rms_norm_eps"],
            p + "rope.freq_base": hc["rope_theta"]}
    if kind != "gemma":
        meta[p + "attention.sliding_window"] = hc["sliding_window"]
    if hc.get("rope_scaling"):
        meta[p + "rope.scaling.type"] = "linear"
        meta[p + "rope.scaling.factor"] = float(hc["rope_scaling"]["factor"])
    write_gguf(path, meta, t)
    m, back = read_gguf(path)  # round trip through the independent reader
    assert m["general.architecture"] == arch and all(np.array_equal(back[k], t[k]) for k in t)


def hf_config(kind, D, N, K, H, F, L_hf, V, extra):
    c = dict(hidden_size=D, intermediate_size=F, num_hidden_layers=L_hf, num_attention_heads=N, num_key_value_heads=K,
             head_dim=H, vocab_size=V, rms_norm_eps=1e-6, max_position_embeddings=64, hidden_activation="gelu_pytorch_tanh",
             tie_word_embeddings=True)
    c.update(extra)
    c["model_type"] = {"gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3_text"}[kind]
    c["architectures"] = [{"gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
                           "gemma3": "Gemma3ForCausalLM"}[kind]]
    return c


def model_case(name, kind, seed, L, cfg_extra, hf_extra, qpas, gguf=False, B=2, T=9, D=32, N=4, K=2, H=8, F=48, V=64):
    g = rng(seed)
    L_hf = 2 * L if kind == "gemma2" else L
    cfg = {"decoder_block": kind, "dtype": "float32", "base_emb_dim": D, "base_num_query_heads": N,
           "base_num_kv_heads": K, "head_dim": H, "base_mlp_dim": F, "base_num_decoder_layers": L, "vocab_size": V,
           "normalization_layer_epsilon": 1e-6, "max_target_length": 64, "mlp_activations": ["gelu", "linear"],
           "logits_via_embedding": True}
    cfg.update(cfg_extra)
    hw = hf_weights(g, kind, D, N, K, H, F, L_hf, V)
    w = fold(kind, hw, D, N, K, H, L_hf, qpas)
    tokens = g.integers(0, V, size=(B, T)).astype(np.int32)
    logits, acts = model_forward(kind, cfg, w, tokens, L, N, K, H)
    # The folding check: MaxText's math on the folded weights (without the bf16 table rounding of its tied head)
    # equals HF's math on the original weights up to the f32 rounding of the folded values.
    hc = hf_config(kind, D, N, K, H, F, L_hf, V, hf_extra)
    normalizer = float(np.asarray(w["token_embedder.embedding"], np.float64)[0, 0] / hw["model.embed_tokens.weight"][0, 0])
    unrounded, _ = model_forward(kind, cfg, w, tokens, L, N, K, H, round_table=False)
    hf = hf_forward(kind, hc, hw, tokens, normalizer)
    # MaxText's tied head divides by sqrt(D) while the table holds E * normalizer: with Gemma 3's bf16 normalizer the
    # logits carry the factor normalizer / sqrt(D) (1 - 1.1e-4 for D = 32) relative to HF's fp32 forward.
    ratio = normalizer / math.sqrt(D)
    err = (unrounded - hf * ratio).abs().max().item()
    assert err < 1e-5, (name, err)
    print("%s: folded MaxText vs HF forward (x %.6f) max |diff| %.2e; without the factor %.2e; bf16 table rounding "
          "moves logits by %.2e (max |logit| %.1f)" % (name, ratio, err, (unrounded - hf).abs().max().item(),
                                                      (logits - unrounded).abs().max().item(), logits.abs().max().item()))
    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", scanned(kind, w, L))
    hd = os.path.join(d, "hf")
    os.makedirs(hd, exist_ok=True)
    with open(os.path.join(hd, "config.json"), "w") as f:
        json.dump(hf_config(kind, D, N, K, H, F, L_hf, V, hf_extra), f, indent=1, sort_keys=True)
    save_safetensors(os.path.join(hd, "model.safetensors"), hw, {"format": "pt"})
    if gguf:
        write_llama_cpp_gguf(os.path.join(d, "model.gguf"), kind, hc, hw)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    save_meta(d, {"what": f"{L}-layer {kind} model, float64 from float32 weights (folded from hf/)", "kind": kind,
                  "config": cfg, "tokens": [B, T], "layers": L})


def gemma3_layer_case(name, seed, index, B=2, T=9, D=32, N=4, K=2, H=8, F=48):
    g = rng(seed)
    cfg = {"decoder_block": "gemma3", "model_name": "gemma3-4b", "dtype": "float32", "base_emb_dim": D,
           "base_num_query_heads": N, "base_num_kv_heads": K, "head_dim": H, "base_mlp_dim": F,
           "normalization_layer_epsilon": 1e-6, "max_target_length": 64, "mlp_activations": ["gelu", "linear"],
           "sliding_window_size": 3, "use_post_attn_norm": True, "use_post_ffw_norm": True,
           "local_rope_max_timescale": 10000.0, "rope_max_timescale": 1000000.0, "rope_linear_scaling_factor": 8.0,
           "attn_logits_soft_cap": 2.0}
    hw = hf_weights(g, "gemma3", D, N, K, H, F, 1, 8)
    w = {k[len("decoder.layers_0."):]: v for k, v in fold("gemma3", hw, D, N, K, H, 1, 0).items()
         if k.startswith("decoder.layers_0.")}
    x = f32(g, (B, T, D), 1.0, 0.1)
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    pos[1] += 20  # the second row at later positions (where the two RoPE bases differ more)
    a = attn_args("gemma3", cfg, index, False, N, K, H)
    a["soft_cap"] = cfg["attn_logits_soft_cap"]
    out, at, m = block(t64(x), to64(w), a, pos, "", True, cfg["normalization_layer_epsilon"])
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "positions", pos)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", at.numpy())
    save_npy(d, "mlp", m.numpy())
    save_meta(d, {"what": f"Gemma3DecoderLayer index {index}, float64 from float32 inputs", "kind": "gemma3",
                  "config": cfg, "layer_index": index, "batch": B, "length": T})


def main():
    torch.set_default_dtype(torch.float64)
    gemma3_layer_case("gemma3_layer_local", 51, 0)
    gemma3_layer_case("gemma3_layer_global", 52, 5)
    # Gemma 3: 7 layers = one scanned group of 6 (5 local + 1 global) and a 1-layer remainder; window 3 < T.
    model_case("gemma3_model", "gemma3", 53, 7,
               {"model_name": "gemma3-4b", "sliding_window_size": 3, "use_post_attn_norm": True,
                "use_post_ffw_norm": True, "local_rope_max_timescale": 10000.0, "rope_max_timescale": 1000000.0,
                "rope_linear_scaling_factor": 8.0},
               {"sliding_window": 3, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "query_pre_attn_scalar": 8,
                "sliding_window_pattern": 6, "final_logit_softcapping": None, "attn_logit_softcapping": None,
                "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(7)]},
               8, gguf=True, N=4, K=2, H=8)
    # Gemma: global attention, GeGLU, query pre-scaled by head_dim^-0.5 in the kernel.
    model_case("gemma_model", "gemma", 54, 2, {"model_name": "gemma-tiny"}, {"rope_theta": 10000.0}, 8, gguf=True, K=1)
    # Gemma 2: 2 MaxText layers = 4 HF layers (local, global, local, global), soft caps that bite, window 3,
    # query_pre_attn_scalar 24 != head_dim (the 27b-style scale, folded into the query kernel).
    model_case("gemma2_model", "gemma2", 55, 2,
               {"model_name": "gemma2-tiny", "sliding_window_size": 3, "use_post_attn_norm": True,
                "use_post_ffw_norm": True, "attn_logits_soft_cap": 1.5, "final_logits_soft_cap": 2.0},
               {"rope_theta": 10000.0, "sliding_window": 3, "query_pre_attn_scalar": 24,
                "attn_logit_softcapping": 1.5, "final_logit_softcapping": 2.0}, 24)


if __name__ == "__main__":
    main()
    print("wrote tests/fixtures/gemma*")
