"""Qwen3-Next and Qwen3.5 (MoE) Hugging Face checkpoints WITH their multi-token-prediction (MTP) layer, and the MTP
logits in float64 from float32 weights.

The main models are qwen3_next_reference.py's (Qwen3-Next) and qwen3_5_reference.py's (Qwen3.5 MoE): their settings,
weight generators, Hugging Face converters / config builders and both forwards (MaxText-named QN.decoder_layer, and
the HF-layout QN.hf_forward with Qwen3.5's hooks) are imported, not re-derived. What is new here is the MTP part.

Sources read for the MTP (vLLM, github vllm-project/vllm): model_executor/models/qwen3_next_mtp.py
(Qwen3NextMultiTokenPredictor, Qwen3NextMTP.load_weights), qwen3_5_mtp.py (Qwen3_5MultiTokenPredictor, its
load_weights with the per-expert and the fused expert mappings, Qwen3_5MTP.load_weights), qwen3_next.py
(Qwen3NextDecoderLayer, Qwen3NextAttention, Qwen3NextSparseMoeBlock, Qwen3NextRMSNorm = GemmaRMSNorm) and qwen3_5.py
(Qwen3_5DecoderLayer: Qwen3NextAttention + Qwen3NextSparseMoeBlock for qwen3_5_moe_text, Qwen3_5RMSNorm =
GemmaRMSNorm). The decoder layer itself is transformers' modeling_qwen3_next.py / modeling_qwen3_5_moe.py layer as
QN.hf_forward re-states it (transformers does not implement the MTP: its models ignore mtp.* on load).

The MTP layer (vLLM):
  e  = embed_tokens(ids)            the main model's embedding (vLLM's MTP loader keeps only names containing
                                    "embed_tokens" / "lm_head" besides mtp.*; no mtp.embed_tokens in the checkpoint,
                                    config mtp_use_dedicated_embeddings false). No zeroing of e at position 0 (vLLM's
                                    DeepSeek MTP does that; the Qwen ones do not).
  x  = fc(concat([pre_fc_norm_embedding(e), pre_fc_norm_hidden(h)], -1))   EMBEDDING FIRST (torch.cat([inputs_embeds,
                                    hidden_states], dim=-1)); fc = ColumnParallelLinear(2D -> D, bias=False), so
                                    mtp.fc.weight is [D, 2D] and x = cat @ fc.weight^T.
  pre_fc_norm_* and mtp.norm are Qwen3NextRMSNorm / Qwen3_5RMSNorm = vLLM's GemmaRMSNorm:
                                    x * rsqrt(mean(x^2) + rms_norm_eps) * (1 + w).
  y  = mtp.layers.0(x)              Qwen3NextDecoderLayer / Qwen3_5DecoderLayer built with layer_type="full_attention"
                                    (whatever layer_types says), residual None on entry: the same gated full attention
                                    (q_proj [N*2H, D] -> query | gate per head, q_norm / k_norm (1 + w), partial RoPE,
                                    output * sigmoid(gate), o_proj) and sparse MoE + sigmoid-gated shared expert as the
                                    main model's full-attention layers; (layer_idx 0 + 1) % decoder_sparse_step == 0,
                                    so it is a MoE layer.
  out = mtp.norm(y) (its own weight), logits = lm_head(out) (the main model's lm_head).
The description the task gave matches this; see below for the hidden-state convention.

Hidden state fed to the MTP: two files. vLLM hands the drafter the hidden states the target model returns, and
Qwen3NextModel / Qwen3_5Model.forward return them AFTER model.norm (`hidden_states, _ = self.norm(hidden_states,
residual)`), i.e. vLLM uses the "normed" convention. MaxText's MTP block takes the decoder's raw output (before
decoder_norm, mtp_reference.py). Hence:
  mtp_logits_1.npy         h = hidden.npy = the main model's last decoder layer output before model.norm ("raw")
  mtp_logits_1_normed.npy  h = model.norm(hidden.npy) (the main model's final (1 + w) norm)          ("normed")
In both: ids_1 = tokens shifted left by one, the last slot token id 0 (MaxText roll_and_mask; e there is embedding
row 0); the MTP layer runs at the ORIGINAL positions 0..T-1, causal over the whole row, from an empty cache; for
Qwen3.5 with the interleaved MRoPE at text positions (all three sections = the text position), as the main model.

Checkpoint names (mtp.* as vLLM loads them; matrices torch [out, in]):
  mtp.fc.weight [D, 2D]   mtp.pre_fc_norm_embedding.weight [D]   mtp.pre_fc_norm_hidden.weight [D]   mtp.norm.weight [D]
  mtp.layers.0.input_layernorm.weight [D]   mtp.layers.0.post_attention_layernorm.weight [D]
  mtp.layers.0.self_attn.{q_proj [N*2H, D], k_proj [K*H, D], v_proj [K*H, D], o_proj [D, N*H], q_norm [H], k_norm [H]}
  mtp.layers.0.mlp.gate.weight [E, D]
  mtp.layers.0.mlp.experts.{e}.{gate_proj [F, D], up_proj [F, D], down_proj [D, F]}.weight   (per expert, both files)
  mtp.layers.0.mlp.shared_expert.{gate_proj [F, D], up_proj [F, D], down_proj [D, F]}.weight
  mtp.layers.0.mlp.shared_expert_gate.weight [1, D]
Expert layout: Qwen3-Next checkpoints store every expert per expert (main layers and MTP alike). Qwen3.5 MoE
checkpoints store the MAIN layers' experts fused (experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F],
qwen3_5_reference.py) but the MTP layer's experts PER EXPERT (mtp.layers.0.mlp.experts.{e}.gate_proj.weight ...):
vLLM's Qwen3_5MultiTokenPredictor.load_weights accepts both forms, and the released Qwen3.5 checkpoints use the
per-expert one (mbridge PR #145 "Qwen3.5 per-expert layout (mtp.layers.0.mlp.experts.{i}.gate_proj.weight)" vs
Qwen3.6's fused MTP experts; sglang PR #35719 counts "1536 mtp.* routed-expert tensors" for Qwen3.5's 512 experts;
a Qwen3.5-35B-A3B checkpoint audit counts 785 mtp.* tensors = 256 * 3 + 17). So mtp_qwen3_5_hf uses the per-expert
form for mtp.* and the fused form for model.language_model.*; a loader must accept both in one file.

Checks before writing (asserted): the MTP logits computed twice, (A) with the MaxText-named layer math
(QN.decoder_layer, MaxText's f32 RoPE angles) and (B) with the HF-layout forward QN.hf_forward on the HF tensor dict
(prefix "mtp.", inputs_embeds = the fc output); A vs B < 1e-7 (the f32 angles), main logits / hidden likewise. The
files hold B. After writing, B is recomputed from the written model.safetensors and config.json and must equal the
written outputs. Every top-k routing decision (main layers, and the MTP layer under both conventions) is at least
MARGIN from a tie (seeds searched deterministically). Each bug variant in BUG_VARIANTS (swapped concat, (w) instead
of (1 + w) for each MTP norm, mtp.norm replaced by model.norm, unshifted ids, a zero embedding in the last slot,
the other hidden convention) changes the MTP logits by more than BUG_MIN (max abs), under both conventions. (Running
the MTP layer at positions 1..T instead of 0..T-1 is NOT detectable here: with no cache, a constant position offset
cancels in RoPE attention scores. Only a test with a prefilled cache can see it.)

Writes tests/fixtures/mtp_qwen3_next_hf/ and tests/fixtures/mtp_qwen3_5_hf/: config.json, model.safetensors (HF
names, float32), tokens.npy (int32 [B,T]), logits.npy, hidden.npy, mtp_logits_1.npy, mtp_logits_1_normed.npy
(float32), meta.json.
Run: /usr/bin/python3 tests/reference/qwen3_next_mtp_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_5_reference as Q35  # noqa: E402
import qwen3_next_reference as QN  # noqa: E402
from common import case_dir, f32, read_safetensors, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402
from mtp_reference import roll_left  # noqa: E402

B, T = QN.B, QN.T
MARGIN = 1e-3      # every top-k routing decision at least this far from a tie
BUG_MIN = 1e-3     # every bug variant moves the MTP logits by more than this (max abs)
EQUIV_TOL = 1e-7   # MaxText-named path vs HF-layout path: MaxText forms the RoPE angles in f32 (Qwen3.5's MRoPE also
                   # multiplies by an f32 reciprocal timescale); ~6e-10 (Qwen3-Next) and ~1.5e-8 (Qwen3.5) seen
MTP_LAYERS = 1


# ----------------------------------------------------------------------------------------------------------------
# MTP weights (internal names; written only under their HF names)

def mtp_weights(g, c):
    """fc, the three (1 + w) norms and one full-attention decoder layer (QN.layer_weights of a full-attention index:
    its norm weights are 0.2 * normal, i.e. (1 + w) with w != 0)."""
    D = c["D"]
    w = {"pre_fc_norm_embedding.scale": f32(g, (D,), 0.2),
         "pre_fc_norm_hidden.scale": f32(g, (D,), 0.2),
         "fc.kernel": f32(g, (2 * D, D), 1 / math.sqrt(2 * D)),  # [in 2D, out D]; rows 0..D-1 read the embedding
         "norm.scale": f32(g, (D,), 0.2)}
    w.update(QN.prefixed(QN.layer_weights(g, c, full_attention_index(c)), "layer."))
    return w


def full_attention_index(c):
    i = c["cycle"] - 1
    assert QN.is_full_attention(i, c) and i < c["L"]
    return i


def mtp_hf_tensors(w, wm, c):
    """The MTP weights under vLLM's mtp.* names. The layer goes through QN.hf_checkpoint (Qwen3-Next's converter: per
    expert experts.{e}.*_proj, the form both families' checkpoints use for mtp.*) by standing in for the main model's
    full-attention layer, whose converted tensors are then renamed model.layers.i. -> mtp.layers.0.."""
    i = full_attention_index(c)
    pre = f"decoder.layers_{i}."
    layer = QN.sub(wm, "layer.")
    assert set(layer) == set(QN.sub(w, pre)), "MTP layer leaves differ from a main full-attention layer's"
    w2 = {k: v for k, v in w.items() if not k.startswith(pre)}
    w2.update(QN.prefixed(layer, pre))
    hp = f"model.layers.{i}."
    out = {"mtp.layers.0." + k[len(hp):]: v for k, v in QN.hf_checkpoint(w2, c).items() if k.startswith(hp)}
    out["mtp.fc.weight"] = np.ascontiguousarray(wm["fc.kernel"].T)  # [D, 2D]
    out["mtp.pre_fc_norm_embedding.weight"] = wm["pre_fc_norm_embedding.scale"]
    out["mtp.pre_fc_norm_hidden.weight"] = wm["pre_fc_norm_hidden.scale"]
    out["mtp.norm.weight"] = wm["norm.scale"]
    return out


def expected_mtp_shapes(c):
    D, N, K, H, E, F = c["D"], c["N"], c["K"], c["H"], c["E"], c["F"]
    s = {"mtp.fc.weight": [D, 2 * D], "mtp.pre_fc_norm_embedding.weight": [D], "mtp.pre_fc_norm_hidden.weight": [D],
         "mtp.norm.weight": [D]}
    p = "mtp.layers.0."
    s.update({p + "input_layernorm.weight": [D], p + "post_attention_layernorm.weight": [D],
              p + "self_attn.q_proj.weight": [N * 2 * H, D], p + "self_attn.k_proj.weight": [K * H, D],
              p + "self_attn.v_proj.weight": [K * H, D], p + "self_attn.o_proj.weight": [D, N * H],
              p + "self_attn.q_norm.weight": [H], p + "self_attn.k_norm.weight": [H],
              p + "mlp.gate.weight": [E, D], p + "mlp.shared_expert.gate_proj.weight": [F, D],
              p + "mlp.shared_expert.up_proj.weight": [F, D], p + "mlp.shared_expert.down_proj.weight": [D, F],
              p + "mlp.shared_expert_gate.weight": [1, D]})
    for e in range(E):
        s.update({p + f"mlp.experts.{e}.gate_proj.weight": [F, D], p + f"mlp.experts.{e}.up_proj.weight": [F, D],
                  p + f"mlp.experts.{e}.down_proj.weight": [D, F]})
    return s


# ----------------------------------------------------------------------------------------------------------------
# (A) MaxText-named math: QN.decoder_layer for the main layers and the MTP layer

def main_forward(w64, c, tokens, pos, margins):
    """Embedding, the L decoder layers, final (1 + w) norm, logits: (logits, raw last-layer output)."""
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    for i in range(c["L"]):
        x = QN.decoder_layer(x, QN.sub(w64, f"decoder.layers_{i}."), c, pos, i, margins)[0]
    return QN.rms_1p(x, w64["decoder.decoder_norm.scale"], c["eps"]) @ w64["decoder.logits_dense.kernel"], x


def mtp_forward(w64, m64, c, tokens, h, pos, margins=None, swap=False, shift=True, zero_last_embedding=False):
    """One MTP layer on the previous hidden h [B,T,D]; returns its logits [B,T,V]. The keyword flags are the bug
    variants the fixture must detect (defaults: the correct math)."""
    ids = roll_left(tokens, 1) if shift else tokens
    e = w64["token_embedder.embedding"][torch.from_numpy(ids).long()]
    if zero_last_embedding:
        e = e.clone()
        e[:, -1] = 0.0
    en = QN.rms_1p(e, m64["pre_fc_norm_embedding.scale"], c["eps"])
    hn = QN.rms_1p(h, m64["pre_fc_norm_hidden.scale"], c["eps"])
    x = torch.cat([hn, en] if swap else [en, hn], -1) @ m64["fc.kernel"]
    y = QN.decoder_layer(x, QN.sub(m64, "layer."), c, pos, full_attention_index(c), margins)[0]
    return QN.rms_1p(y, m64["norm.scale"], c["eps"]) @ w64["decoder.logits_dense.kernel"]


def w_not_1p(m64, keys):
    """Weights that turn the (1 + w) norms `keys` into (w) norms: rms_1p(x, w - 1) = rms(x) * w."""
    return {k: (v - 1.0 if k in keys else v) for k, v in m64.items()}


BUG_VARIANTS = ("concat_swapped", "pre_fc_norm_embedding_w_not_1p", "pre_fc_norm_hidden_w_not_1p", "mtp_norm_w_not_1p",
                "all_mtp_norms_w_not_1p", "mtp_norm_is_model_norm", "ids_not_shifted", "last_slot_zero_embedding",
                "other_hidden_convention")


def bug_diffs(w64, m64, c, tokens, hs, pos, ref):
    """Max abs change of the MTP logits under each bug variant, the minimum over the two conventions."""
    out = {}
    for conv, h in hs.items():
        other = hs["normed" if conv == "raw" else "raw"]
        norm_keys = {k for k in m64 if k.endswith("norm.scale")}
        runs = {
            "concat_swapped": lambda: mtp_forward(w64, m64, c, tokens, h, pos, swap=True),
            "pre_fc_norm_embedding_w_not_1p": lambda: mtp_forward(
                w64, w_not_1p(m64, {"pre_fc_norm_embedding.scale"}), c, tokens, h, pos),
            "pre_fc_norm_hidden_w_not_1p": lambda: mtp_forward(
                w64, w_not_1p(m64, {"pre_fc_norm_hidden.scale"}), c, tokens, h, pos),
            "mtp_norm_w_not_1p": lambda: mtp_forward(w64, w_not_1p(m64, {"norm.scale"}), c, tokens, h, pos),
            "all_mtp_norms_w_not_1p": lambda: mtp_forward(w64, w_not_1p(m64, norm_keys), c, tokens, h, pos),
            "mtp_norm_is_model_norm": lambda: mtp_forward(
                w64, dict(m64, **{"norm.scale": w64["decoder.decoder_norm.scale"]}), c, tokens, h, pos),
            "ids_not_shifted": lambda: mtp_forward(w64, m64, c, tokens, h, pos, shift=False),
            "last_slot_zero_embedding": lambda: mtp_forward(w64, m64, c, tokens, h, pos, zero_last_embedding=True),
            "other_hidden_convention": lambda: mtp_forward(w64, m64, c, tokens, other, pos),
        }
        assert set(runs) == set(BUG_VARIANTS)
        for name, run in runs.items():
            d = float((run() - ref[conv]).abs().max())
            out[name] = min(out.get(name, math.inf), d)
    return out


# ----------------------------------------------------------------------------------------------------------------
# (B) HF layout: QN.hf_forward on the HF tensor dict

def hf_text_config(family, hc):
    """The config dict QN.hf_forward reads (Qwen3.5: text_config with the rotary keys at the top, as Q35.hf_case)."""
    if family == "qwen3_next":
        return hc
    rp = hc["text_config"]["rope_parameters"]
    return dict(hc["text_config"], rope_theta=rp["rope_theta"], partial_rotary_factor=rp["partial_rotary_factor"])


def hf_hooks(family):
    if family == "qwen3_next":
        return "model.", {}
    return "model.language_model.", dict(gdn_inputs=Q35.hf_gdn_inputs, experts=Q35.hf_experts,
                                         rope_cos_sin=Q35.hf_rope_cos_sin)


def hf_all(family, hc, t, tokens):
    """From HF-named float64 tensors and config.json alone: main logits, raw hidden, and the MTP logits of both
    conventions."""
    F = torch.nn.functional
    text = hf_text_config(family, hc)
    prefix, hooks = hf_hooks(family)
    eps = text["rms_norm_eps"]

    def norm1p(x, w):  # Qwen3NextRMSNorm / GemmaRMSNorm
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)

    logits, hidden = QN.hf_forward(text, t, tokens, prefix=prefix, return_hidden=True, **hooks)
    ids = roll_left(tokens, 1)
    e = t[prefix + "embed_tokens.weight"][torch.from_numpy(ids).long()]
    mtp_cfg = dict(text, num_hidden_layers=MTP_LAYERS, layer_types=["full_attention"])
    mtp_hooks = dict(hooks, experts=QN.hf_experts)  # mtp.* experts are per expert in both families
    mtp = {}
    for conv, h in (("raw", hidden), ("normed", norm1p(hidden, t[prefix + "norm.weight"]))):
        x = F.linear(torch.cat([norm1p(e, t["mtp.pre_fc_norm_embedding.weight"]),
                                norm1p(h, t["mtp.pre_fc_norm_hidden.weight"])], -1), t["mtp.fc.weight"])
        # mtp.layers.0 as a one-layer full-attention model on inputs_embeds x; its final norm is mtp.norm, then lm_head
        mtp[conv] = QN.hf_forward(mtp_cfg, t, ids, prefix="mtp.", inputs_embeds=x, **mtp_hooks)
    return logits, hidden, mtp


# ----------------------------------------------------------------------------------------------------------------
# Families

def family_setup(family):
    if family == "qwen3_next":
        c = QN.settings()
        hc = QN.hf_config(c)
        hc.update(mtp_num_hidden_layers=MTP_LAYERS, mtp_use_dedicated_embeddings=False)
        return c, hc, QN.hf_checkpoint, {}
    c = Q35.settings()
    c["rope"] = lambda rd: Q35.mrope(rd, c["theta"], Q35.MROPE_SECTION)
    hc = Q35.hf_config(c)
    hc["text_config"].update(mtp_num_hidden_layers=MTP_LAYERS, mtp_use_dedicated_embeddings=False)
    return c, hc, Q35.hf_checkpoint, {"decoder_block": "qwen3_5", "use_mrope": True, "mrope_section": Q35.MROPE_SECTION}


def case(family, name, seed):
    c, hc, hf_checkpoint, extra_cfg = family_setup(family)
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(400):
        g = rng(seed + 1000 * attempt)
        w = QN.model_weights(g, c)
        wm = mtp_weights(g, c)
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        w64, m64 = QN.to64(w), QN.to64(wm)
        main_margins = []
        logits, hidden = main_forward(w64, c, tokens, pos, main_margins)
        hs = {"raw": hidden, "normed": QN.rms_1p(hidden, w64["decoder.decoder_norm.scale"], c["eps"])}
        mtp_margins = {conv: [] for conv in hs}
        ref = {conv: mtp_forward(w64, m64, c, tokens, h, pos, mtp_margins[conv]) for conv, h in hs.items()}
        margins = {"main": min(main_margins), **{"mtp_" + k: min(v) for k, v in mtp_margins.items()}}
        if min(margins.values()) < MARGIN:
            continue
        bugs = bug_diffs(w64, m64, c, tokens, hs, pos, ref)
        if min(bugs.values()) > BUG_MIN:
            break
    else:
        raise RuntimeError(f"{name}: no seed with clear routing margins and detectable bug variants")

    # (B) the HF checkpoint and the HF-layout forward; it must agree with (A).
    hf = hf_checkpoint(w, c)
    hf = {k: v for k, v in hf.items() if not k.startswith("mtp.")}  # Q35 adds a placeholder mtp.fc.weight
    mtp_hf = mtp_hf_tensors(w, wm, c)
    assert {k: list(v.shape) for k, v in mtp_hf.items()} == expected_mtp_shapes(c)
    hf.update(mtp_hf)
    hl, hh, hm = hf_all(family, hc, {k: t64(v) for k, v in hf.items()}, tokens)
    diffs = {"logits": float((hl - logits).abs().max()), "hidden": float((hh - hidden).abs().max()),
             "mtp_logits_1": float((hm["raw"] - ref["raw"]).abs().max()),
             "mtp_logits_1_normed": float((hm["normed"] - ref["normed"]).abs().max())}
    assert max(diffs.values()) < EQUIV_TOL, f"{name}: MaxText-named vs HF-layout paths differ: {diffs}"
    raw_vs_normed = float((hm["raw"] - hm["normed"]).abs().max())
    assert raw_vs_normed > BUG_MIN

    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", hf, {"format": "pt"})
    with open(f"{d}/config.json", "w") as fh:
        json.dump(hc, fh, indent=1, sort_keys=True)
    outs = {"tokens": tokens, "logits": hl.numpy().astype(np.float32), "hidden": hh.numpy().astype(np.float32),
            "mtp_logits_1": hm["raw"].numpy().astype(np.float32),
            "mtp_logits_1_normed": hm["normed"].numpy().astype(np.float32)}
    for k, v in outs.items():
        save_npy(d, k, v)

    # Read back: the written checkpoint and config.json alone reproduce the written outputs.
    with open(f"{d}/config.json") as fh:
        hc_back = json.load(fh)
    t_back = {k: t64(v) for k, v in read_safetensors(f"{d}/model.safetensors").items()}
    bl, bh, bm = hf_all(family, hc_back, t_back, np.load(f"{d}/tokens.npy"))
    readback = max(float(np.abs(a.numpy().astype(np.float32) - np.load(f"{d}/{n}.npy")).max())
                   for n, a in (("logits", bl), ("hidden", bh), ("mtp_logits_1", bm["raw"]),
                                ("mtp_logits_1_normed", bm["normed"])))
    assert readback == 0.0, f"{name}: read-back outputs differ by {readback}"

    cfg = QN.config_keys(c)
    cfg.update(extra_cfg)
    cfg["mtp_num_layers"] = MTP_LAYERS
    kinds = ["full_attention" if QN.is_full_attention(i, c) else "gated_deltanet" for i in range(c["L"])]
    mtp_shapes = {k: list(v.shape) for k, v in sorted(mtp_hf.items())}
    experts = ("per expert everywhere (Qwen3-Next checkpoints store model.layers.i.mlp.experts.{e}.*_proj.weight and "
               "mtp.layers.0.mlp.experts.{e}.*_proj.weight)" if family == "qwen3_next" else
               "main layers fused (model.language_model.layers.i.mlp.experts.gate_up_proj [E, 2F, D] (gate rows, then "
               "up rows), experts.down_proj [E, D, F]); the MTP layer PER EXPERT (mtp.layers.0.mlp.experts.{e}."
               "{gate,up,down}_proj.weight), as released Qwen3.5 checkpoints store it (Qwen3.6 fuses the MTP experts "
               "too; vLLM's Qwen3_5 MTP loader accepts both)")
    save_meta(d, {
        "what": f"Hugging Face {hc['architectures'][0]} checkpoint (float32) of a {c['L']}-layer {family} model "
                f"({', '.join(kinds)}) WITH its multi-token-prediction layer (mtp_num_hidden_layers 1); outputs: "
                "float64 math (HF layout, qwen3_next_reference.hf_forward) stored as float32",
        "kind": family, "architecture": hc["architectures"][0], "config": cfg, "mtp_num_layers": MTP_LAYERS,
        "tokens": [B, T], "layer_kinds": kinds,
        "seed": seed, "seed_attempt": attempt, "seed_used": seed + 1000 * attempt,
        "min_routing_margin": margins, "routing_margin_required": MARGIN,
        "mtp_semantics": "ids_1 = tokens shifted left by one along T, last slot token id 0 (embedding row 0, not "
                         "zeros); e = model embed_tokens(ids_1); x = mtp.fc(concat([pre_fc_norm_embedding(e), "
                         "pre_fc_norm_hidden(h)], -1)) (embedding first; fc.weight [D, 2D], x = cat @ W^T); y = "
                         "mtp.layers.0(x), a full-attention decoder layer with the sparse MoE + sigmoid-gated shared "
                         "expert, at positions 0..T-1, causal, empty cache" +
                         (" (MRoPE text positions: all three sections = the position)" if family == "qwen3_5" else "") +
                         "; mtp_logits = lm_head(mtp.norm(y)). Every norm is (1 + w) RMSNorm, eps rms_norm_eps.",
        "conventions": {"mtp_logits_1": "h = hidden.npy (raw: the last decoder layer's output before model.norm; "
                                        "MaxText's MTP input)",
                        "mtp_logits_1_normed": "h = model.norm(hidden.npy) (the main model's final norm applied; "
                                               "what vLLM hands its Qwen3-Next / Qwen3.5 MTP drafter)"},
        "shared_with_main": "embed_tokens and lm_head are the main model's (no mtp.embed_tokens, no mtp lm_head; "
                            "mtp_use_dedicated_embeddings false); mtp.norm is NOT model.norm",
        "expert_layout": experts,
        "mtp_tensors": mtp_shapes,
        "files": {"config.json": "Hugging Face config", "model.safetensors": "HF names, float32, mtp.* included",
                  "tokens": "int32 [B,T]", "logits": "main model logits float32 [B,T,V]",
                  "hidden": "main model's last decoder layer output before model.norm, float32 [B,T,D]",
                  "mtp_logits_1": "MTP layer 1 logits, raw-hidden convention, float32 [B,T,V]",
                  "mtp_logits_1_normed": "MTP layer 1 logits, normed-hidden convention, float32 [B,T,V]"},
        "checks": {"maxtext_named_vs_hf_layout_max_abs_diff": diffs,
                   "readback_max_abs_diff": readback,
                   "mtp_raw_vs_normed_max_abs_diff": raw_vs_normed,
                   "bug_variant_min_over_conventions_max_abs_diff": bugs, "bug_variant_required": BUG_MIN},
    })
    return {"name": name, "attempt": attempt, "margins": margins, "diffs": diffs, "bugs": bugs,
            "raw_vs_normed": raw_vs_normed, "mtp_shapes": mtp_shapes, "dir": d}


def main():
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    for family, name, seed in (("qwen3_next", "mtp_qwen3_next_hf", 87), ("qwen3_5", "mtp_qwen3_5_hf", 88)):
        r = case(family, name, seed)
        print(f"{name}: seed attempt {r['attempt']}, min routing margins "
              + ", ".join(f"{k} {v:.2e}" for k, v in r["margins"].items()))
        print(f"  MaxText-named vs HF layout, max abs diff {max(r['diffs'].values()):.2e}; raw vs normed MTP logits "
              f"{r['raw_vs_normed']:.3f}; smallest bug-variant change {min(r['bugs'].values()):.3e} "
              f"({min(r['bugs'], key=r['bugs'].get)})")
        for f in sorted(os.listdir(r["dir"])):
            print(f"  {f}: {os.path.getsize(os.path.join(r['dir'], f))} bytes")
    print("wrote tests/fixtures/mtp_qwen3_next_hf, tests/fixtures/mtp_qwen3_5_hf")


if __name__ == "__main__":
    main()
