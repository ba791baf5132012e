"""MaxText's gemma4_small decoder block (Gemma 4 E2B / E4B, text part), re-stated in PyTorch float64 from float32
inputs and weights.

MaxText semantics (commit e591f30 read: models/gemma4_small.py Gemma4SmallPLE / Gemma4SmallDecoderLayer /
kv_donor_layer_idx, layers/decoders.py _apply_gemma4_small_layers, layers/attentions.py compute_shared_kv and the
shared_key / shared_value path, configs/models/gemma4-e2b.yml / gemma4-e4b.yml):
  per-layer inputs, once per call (x = the token embedding, folded: E * sqrt(D) as stored):
    ple = (E_ple[ids] * sqrt(Dp) + RMSNorm_Dp((x @ W_ple) * D^-0.5 per layer's Dp columns)) * 2^-0.5   [B, T, L, Dp]
  layer i (global when i % p == p - 1, p = 5 for model_name gemma4-e2b, else 6):
    a = Attention(RMSNorm(x)); h = x + RMSNorm(a)
    h = h + RMSNorm(GeGLU(RMSNorm(h)))
    h = h + RMSNorm((gelu(h @ W_gate) * ple[:, :, i]) @ W_proj)
    out = h * layer_scalar
  Attention as gemma4's (q, k RMSNorm per head with scale, v RMSNorm without, no query scalar; global layers with
    global_head_dim (and global_num_kv_heads) and Gemma 4's partial RoPE), without K = V. The last
    num_kv_shared_layers layers have no k/v projections: each uses the normed, rotated keys and values of the last
    earlier layer of its attention type. With use_double_wide_mlp those layers' MLP is 2 * mlp_dim wide.
  Decoder: logits = RMSNorm(x) @ bf16(E)^T / sqrt(D), then 30 * tanh(logits / 30).
Writes tests/fixtures/gemma4_small_{e2b,e4b}_model/ (model.safetensors in MaxText's tree, hf/ the same weights in
Hugging Face's Gemma 4 layout as MaxText's converter GEMMA4_SMALL_MAXTEXT_TO_HF_PARAM_MAPPING maps it).
Run: /usr/bin/python3 tests/reference/gemma4_small_reference.py
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
from common import bf16_round, case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402
from gemma4_reference import gelu_tanh, geglu, gemma4_partial_rope, prefixed, write_hf  # noqa: E402

F32 = np.float32


def settings(variant):
    c = dict(D=32, N=4, K=2, H=8, GH=16, F=48, V=64, Dp=8, window=3, eps=1e-6, local_theta=10000.0,
             global_theta=1000000.0, global_prop=0.25, cap=30.0)
    if variant == "e2b":  # period 5; layers 6..9 share: 6-8 with layer 5 (local), 9 with layer 4 (global)
        c.update(name="gemma4-e2b", L=10, shared=4, wide=True, GK=0, period=5)
    else:  # period 6 (any model_name but gemma4-e2b; not gemma4-e4b itself, whose yml would replace these sizes) with
        # its own global kv-head count; layers 6, 7 share with layer 4 (local)
        c.update(name="gemma4-e4b-tiny", L=8, shared=2, wide=False, GK=1, period=6)
    return c


def config_keys(c):
    k = {"decoder_block": "gemma4_small", "model_name": c["name"], "dtype": "float32", "base_emb_dim": c["D"],
         "base_num_query_heads": c["N"], "base_num_kv_heads": c["K"], "head_dim": c["H"],
         "global_head_dim": c["GH"], "base_mlp_dim": c["F"],
         "mlp_activations": ["gelu", "linear"], "normalization_layer_epsilon": c["eps"], "vocab_size": c["V"],
         "base_num_decoder_layers": c["L"], "logits_via_embedding": True, "sliding_window_size": c["window"],
         "use_post_attn_norm": True, "use_post_ffw_norm": True, "v_norm_with_scale": False,
         "local_rope_max_timescale": c["local_theta"], "global_rope_max_timescale": c["global_theta"],
         "rope_max_timescale": c["global_theta"], "global_rope_proportion": c["global_prop"],
         "local_rope_proportion": 1.0, "final_logits_soft_cap": c["cap"], "max_target_length": 64,
         "scan_layers": False, "hidden_size_per_layer_input": c["Dp"], "vocab_size_per_layer_input": c["V"],
         "num_kv_shared_layers": c["shared"], "use_double_wide_mlp": c["wide"]}
    if c["GK"]:
        k["global_num_kv_heads"] = c["GK"]
    return k


def is_global(c, i):
    return i % c["period"] == c["period"] - 1


def donor(c, i):
    """gemma4_small.kv_donor_layer_idx."""
    first = max(0, c["L"] - c["shared"]) if c["shared"] > 0 else c["L"]
    if not (i >= first > 0):
        return None
    return next(j for j in range(first - 1, -1, -1) if is_global(c, j) == is_global(c, i))


def heads(c, i):
    g = is_global(c, i)
    return (c["GK"] or c["K"], c["GH"]) if g else (c["K"], c["H"])


def per_layer_inputs(tokens, x, w, c):
    B, T, _ = x.shape
    L, Dp = c["L"], c["Dp"]
    ident = w["decoder.per_layer_embedder.embed_tokens_per_layer"][torch.from_numpy(tokens).long()] * math.sqrt(Dp)
    ctx = (x @ w["decoder.per_layer_embedder.per_layer_model_projection.kernel"]) * c["D"] ** -0.5
    ctx = AR.rms_norm(ctx.reshape(B, T, L, Dp), w["decoder.per_layer_embedder.per_layer_projection_norm.scale"], c["eps"])
    return (ident.reshape(B, T, L, Dp) + ctx) * 2 ** -0.5


def layer(x, w, c, pos, i, kv_states, ple_i):
    g = is_global(c, i)
    K, H = heads(c, i)
    d = donor(c, i)
    a = {"heads": c["N"], "kv_heads": K, "head_dim": H, "eps": c["eps"], "qk_norm": "rms", "v_norm": True,
         "rope": (gemma4_partial_rope(H, c["global_theta"], c["global_prop"]) if g
                  else AR.default_rope(H, c["local_theta"])),
         "type": "global" if g else "local_sliding", "window": c["window"],
         "kv": kv_states[d] if d is not None else None}
    eps = c["eps"]
    at = AR.attention(AR.rms_norm(x, w["pre_self_attention_norm.scale"], eps), AR.sub(w, "self_attention."), a, pos)
    kv_states[i] = a["kv_out"]
    h = x + AR.rms_norm(at, w["post_self_attention_norm.scale"], eps)
    m = geglu(AR.rms_norm(h, w["pre_ffw_norm.scale"], eps), AR.sub(w, "mlp."))
    h = h + AR.rms_norm(m, w["post_ffw_norm.scale"], eps)
    gate = gelu_tanh(h @ w["per_layer_input_gate.kernel"]) * ple_i
    h = h + AR.rms_norm(gate @ w["per_layer_projection.kernel"], w["post_per_layer_input_norm.scale"], eps)
    return h * w["layer_scalar"]


def layer_weights(g, c, i):
    D, Dp = c["D"], c["Dp"]
    K, H = heads(c, i)
    shared = donor(c, i) is not None
    # Scales as in gemma4_reference.py: post norms near 0.25 keep the residual stream O(1), q/k norm scales near 0.3
    # keep the unscaled attention logits O(1).
    w = {n + ".scale": f32(g, (D,), 0.2, 1.0) for n in ("pre_self_attention_norm", "pre_ffw_norm")}
    w.update({n + ".scale": f32(g, (D,), 0.1, 0.4)
              for n in ("post_self_attention_norm", "post_ffw_norm", "post_per_layer_input_norm")})
    aw = AR.attention_weights(g, D, c["N"], K, H, {"qk_norm": "rms", "v_norm": True, "v_scale": False})
    aw["query_norm.scale"] = f32(g, (H,), 0.1, 0.5)
    aw["key_norm.scale"] = f32(g, (H,), 0.1, 0.5)
    if shared:  # no key / value projections or norms of its own
        aw = {k: v for k, v in aw.items() if not k.startswith(("key", "value"))}
    w.update(prefixed(aw, "self_attention."))
    F = c["F"] * (2 if shared and c["wide"] else 1)
    s = 1 / math.sqrt(D)
    w.update({"mlp.wi_0.kernel": f32(g, (D, F), s), "mlp.wi_1.kernel": f32(g, (D, F), s),
              "mlp.wo.kernel": f32(g, (F, D), 1 / math.sqrt(F)),
              "per_layer_input_gate.kernel": f32(g, (D, Dp), s),
              "per_layer_projection.kernel": f32(g, (Dp, D), 1 / math.sqrt(Dp))})
    w["layer_scalar"] = f32(g, (1,), 0.2, 0.9)
    return w


def model_weights(g, c):
    D, L, Dp, V = c["D"], c["L"], c["Dp"], c["V"]
    hf_table = f32(g, (V, D), 1.0 / math.sqrt(D))
    w = {"token_embedder.embedding": (hf_table * F32(math.sqrt(D))).astype(F32), "hf_table": hf_table,
         "decoder.per_layer_embedder.embed_tokens_per_layer": f32(g, (V, L * Dp), Dp ** -0.5),
         "decoder.per_layer_embedder.per_layer_model_projection.kernel": f32(g, (D, L * Dp), 1 / math.sqrt(D)),
         "decoder.per_layer_embedder.per_layer_projection_norm.scale": f32(g, (Dp,), 0.2, 1.0)}
    for i in range(L):
        w.update(prefixed(layer_weights(g, c, i), f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.2, 1.0)
    return w


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face's Gemma 4 layout, from MaxText's converter (param_mapping.py GEMMA4_SMALL_MAXTEXT_TO_HF_PARAM_MAPPING
# and its hooks): the inverse of the mapping families/gemma4/import.hpp applies. The per-layer table is stored as is; the
# per_layer_model_projection, per_layer_input_gate and per_layer_projection kernels are transposed like every other.

def hf_config(c):
    L = c["L"]
    text = {"model_type": "gemma4_text", "hidden_size": c["D"], "intermediate_size": c["F"], "num_hidden_layers": L,
            "num_attention_heads": c["N"], "num_key_value_heads": c["K"], "head_dim": c["H"],
            "global_head_dim": c["GH"], "attention_k_eq_v": False,
            "vocab_size": c["V"], "rms_norm_eps": c["eps"], "sliding_window": c["window"],
            "final_logit_softcapping": c["cap"], "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
            "layer_types": ["full_attention" if is_global(c, i) else "sliding_attention" for i in range(L)],
            "rope_parameters": {"full_attention": {"partial_rotary_factor": c["global_prop"],
                                                   "rope_theta": c["global_theta"], "rope_type": "proportional"},
                                "sliding_attention": {"rope_theta": c["local_theta"], "rope_type": "default"}},
            "hidden_size_per_layer_input": c["Dp"], "vocab_size_per_layer_input": c["V"],
            "num_kv_shared_layers": c["shared"], "use_double_wide_mlp": c["wide"],
            "tie_word_embeddings": True, "max_position_embeddings": 64, "enable_moe_block": False}
    if c["GK"]:
        text["num_global_key_value_heads"] = c["GK"]
    return {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": text,
            "vision_config": {"model_type": "gemma4_vision", "hidden_size": 16}, "tie_word_embeddings": True}


def hf_checkpoint(w, hf_table, c):
    D, N = c["D"], c["N"]
    T = lambda a: np.ascontiguousarray(np.asarray(a).T)  # noqa: E731
    r, p = "model.language_model.", "decoder.per_layer_embedder."
    hf = {r + "embed_tokens.weight": hf_table, r + "norm.weight": w["decoder.decoder_norm.scale"],
          r + "embed_tokens_per_layer.weight": w[p + "embed_tokens_per_layer"],
          r + "per_layer_model_projection.weight": T(w[p + "per_layer_model_projection.kernel"]),
          r + "per_layer_projection_norm.weight": w[p + "per_layer_projection_norm.scale"],
          "model.vision_tower.patch_embedder.weight": np.zeros((16, 12), np.float32)}  # a stand-in, not read
    for i in range(c["L"]):
        h, m = f"{r}layers.{i}.", f"decoder.layers_{i}."
        K, H = heads(c, i)
        for hn, mn in (("input_layernorm", "pre_self_attention_norm"), ("post_attention_layernorm", "post_self_attention_norm"),
                       ("pre_feedforward_layernorm", "pre_ffw_norm"), ("post_feedforward_layernorm", "post_ffw_norm"),
                       ("post_per_layer_input_norm", "post_per_layer_input_norm")):
            hf[h + hn + ".weight"] = w[m + mn + ".scale"]
        a = m + "self_attention."
        hf[h + "self_attn.q_proj.weight"] = T(w[a + "query.kernel"].reshape(D, N * H))
        hf[h + "self_attn.q_norm.weight"] = w[a + "query_norm.scale"]
        hf[h + "self_attn.o_proj.weight"] = T(w[a + "out.kernel"].reshape(N * H, D))
        if donor(c, i) is None:
            hf[h + "self_attn.k_proj.weight"] = T(w[a + "key.kernel"].reshape(D, K * H))
            hf[h + "self_attn.v_proj.weight"] = T(w[a + "value.kernel"].reshape(D, K * H))
            hf[h + "self_attn.k_norm.weight"] = w[a + "key_norm.scale"]
        hf[h + "layer_scalar"] = w[m + "layer_scalar"]
        for hn, mn in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
            hf[h + f"mlp.{hn}.weight"] = T(w[m + "mlp." + mn + ".kernel"])
        hf[h + "per_layer_input_gate.weight"] = T(w[m + "per_layer_input_gate.kernel"])
        hf[h + "per_layer_projection.weight"] = T(w[m + "per_layer_projection.kernel"])
    return hf


def model_case(name, variant, seed):
    c = settings(variant)
    B, T = 2, 9
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    g = rng(seed)
    w = model_weights(g, c)
    tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
    w64 = {k: t64(v) for k, v in w.items() if k != "hf_table"}
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    ple = per_layer_inputs(tokens, x, w64, c)
    acts, kv_states = {}, {}
    for i in range(c["L"]):
        x = layer(x, AR.sub(w64, f"decoder.layers_{i}."), c, pos, i, kv_states, ple[:, :, i])
        acts[f"decoder.layers_{i}"] = x
    x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
    acts["decoder.decoder_norm"] = x
    logits = x @ t64(bf16_round(w["token_embedder.embedding"])).T / math.sqrt(c["D"])
    logits = c["cap"] * torch.tanh(logits / c["cap"])
    hf_table = w.pop("hf_table")
    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", w)
    write_hf(os.path.join(d, "hf"), hf_checkpoint(w, hf_table, c), hf_config(c))
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    save_npy(d, "per_layer_inputs", ple.reshape(B, T, -1).numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    shared = ", ".join(f"{i}<-{donor(c, i)}" for i in range(c["L"]) if donor(c, i) is not None)
    meta = {"what": f"{c['L']}-layer gemma4_small model ({c['name']}: period {c['period']}, per-layer inputs of "
                    f"width {c['Dp']}, KV-shared layers {shared}{', double-wide MLP there' if c['wide'] else ''}), "
                    "float64 from float32 weights",
            "kind": "gemma4_small", "config": config_keys(c), "tokens": [B, T]}
    save_meta(d, meta)


def main():
    torch.set_default_dtype(torch.float64)
    model_case("gemma4_small_e2b_model", "e2b", 93)
    model_case("gemma4_small_e4b_model", "e4b", 94)
    print("wrote tests/fixtures/gemma4_small_{e2b,e4b}_model")


if __name__ == "__main__":
    main()
