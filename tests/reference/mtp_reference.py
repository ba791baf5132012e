#!/usr/bin/env python3
"""MaxText's multi-token prediction (MTP) block, re-stated in PyTorch float64 from float32 weights and inputs.

Read from MaxText (commit e591f30): layers/multi_token_prediction.py (roll_and_mask, _shift_left_one_cp_aware,
MultiTokenPredictionLayer, MultiTokenPredictionBlock, calculate_mtp_acceptance_rate), models/models.py (the block
is built from get_decoder_layers()[-1] and fed the decoder's raw hidden state), layers/decoders.py
(get_decoder_layers, _apply_embedding, apply_output_head, the hidden state returned before the final norm),
models/llama2.py, models/deepseek.py (the layer kinds), utils/globals.py (EPS = 1e-8), and
checkpoint_conversion/standalone_scripts/convert_deepseek_family_ckpt.py (the HF <-> MaxText names of the MTP layer).

What is re-stated (inference: deterministic, no dropout, no segment ids, no positional embedding):
  h_0      = raw output of the last decoder layer (before decoder.decoder_norm); main logits = head(h_0)
  head(h)  = RMSNorm(h; decoder.decoder_norm.scale) @ decoder.logits_dense.kernel   (shared by every MTP layer)
  for k = 1..mtp_num_layers:
    ids_k  = ids_{k-1} shifted left by one along the sequence, the vacated last slot set to token id 0
             (roll_and_mask once per layer, so ids_k = ids shifted by k, last k slots = 0)
    e_k    = token_embedder.embedding[ids_k]                  (no scaling; slots holding id 0 get row 0, not zeros)
    p_k    = concat([RMSNorm(e_k; mtp_k_embedding_norm), RMSNorm(h_{k-1}; mtp_k_hidden_state_norm)], -1)
             @ mtp_k_projection.kernel [2D, D]                (no bias; eps = normalization_layer_epsilon)
    h_k    = TransformerLayer_k(p_k) at the ORIGINAL positions 0..T-1, causal over the whole sequence; the layer
             is the model's last layer kind (llama2: LlamaDecoderLayer; deepseek: DeepSeekMoELayer), default layer_idx
    mtp_logits_k = head(h_k)
  acceptance(k) (calculate_mtp_acceptance_rate with mtp_eval_target_module = k, all-ones target mask):
    mask_k = ones rolled left k times (vacated = 0); main_k = argmax(main logits) rolled left k times (vacated = 0)
    rate   = sum((argmax(mtp_logits_k) == main_k) * mask_k) / (sum(mask_k) + 1e-8) * 100

The transformer layers are attention_reference.py's llama2 decoder_layer and deepseek_reference.py's deepseek_layer
(MLA + routed/shared MoE); every routing decision, in the main layers and in the MTP layers, is at least
MIN_MARGIN from a tie, and every argmax that enters an acceptance rate is at least ARGMAX_MARGIN ahead of the
runner-up. Seeds are searched (deterministically) until that holds, both acceptance rates lie strictly between
0 and 100, and each differs from the rate a main-prediction roll of k - 1 or k + 1 steps would give.

Writes tests/fixtures/:
  mtp_llama2_model/   tiny llama2 (as llama2_model) + mtp_num_layers 2: config.yml, meta.json, model.safetensors
                      (MaxText names), tokens.npy, logits.npy, hidden.npy, mtp_hidden_{1,2}.npy, mtp_logits_{1,2}.npy,
                      mtp_rolled_ids_{1,2}.npy, acceptance.json
  mtp_deepseek_model/ tiny DeepSeek-V3 of deepseek_model (1 dense + 2 MoE) + mtp_num_layers 2: the same files
  mtp_deepseek_hf/    the first MTP layer of mtp_deepseek_model as a Hugging Face DeepSeek-V3 checkpoint
                      (num_nextn_predict_layers 1, the MTP layer stored as model.layers.{num_hidden_layers}):
                      config.json, model.safetensors (HF names), tokens.npy, logits.npy, mtp_logits_1.npy, meta.json.
                      An independent HF-layout forward (DeepSeek's inference/model.py conventions: [out, in]
                      matrices, interleaved complex RoPE) is checked against the MaxText-named one before writing.

Run: /usr/bin/python3 tests/reference/mtp_reference.py
"""
import json
import math
import os

import numpy as np
import torch

import attention_reference as ar
import deepseek_reference as dr
from common import FIXTURES, case_dir, f32, read_safetensors, rng, save_meta, save_npy, save_safetensors, t64

EPS = 1e-8              # maxtext.utils.globals.EPS, used by calculate_mtp_acceptance_rate
ARGMAX_MARGIN = 1e-3    # top-1 minus top-2 logit at every position whose argmax enters an acceptance rate
MTP_LAYERS = 2


# ---------------------------------------------------------------------------------------------------------------
# The MTP block

def roll_left(ids, k):
    """roll_and_mask(x, -1) applied k times along axis 1: shift left by k, the last k slots set to 0."""
    out = np.zeros_like(ids)
    if k < ids.shape[1]:
        out[:, :ids.shape[1] - k] = ids[:, k:]
    return out


def rms_norm(x, scale, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * scale


def output_head(w64, h, eps):
    """Decoder.apply_output_head without tied embeddings: final RMSNorm, then logits_dense."""
    return rms_norm(h, w64["decoder.decoder_norm.scale"], eps) @ w64["decoder.logits_dense.kernel"]


def mtp_block(w64, tokens, hidden, eps, layer_fn, n_layers):
    """MultiTokenPredictionBlock at inference. layer_fn(x, params, k) -> h runs the k-th transformer layer at the
    original positions. Returns per k: rolled ids, projected features, h_k, mtp logits."""
    E = w64["token_embedder.embedding"]
    h = hidden
    ids = tokens
    out = []
    for k in range(1, n_layers + 1):
        pre = f"mtp_block.mtp_layer_{k}.mtp_{k}_"
        ids = roll_left(ids, 1)
        emb = E[torch.from_numpy(ids).long()]
        cat = torch.cat([rms_norm(emb, w64[pre + "embedding_norm.scale"], eps),
                         rms_norm(h, w64[pre + "hidden_state_norm.scale"], eps)], dim=-1)
        proj = cat @ w64[pre + "projection.kernel"]
        h = layer_fn(proj, dr.sub(w64, pre + "transformer_layer."), k)
        out.append({"ids": ids.copy(), "proj": proj, "hidden": h, "logits": output_head(w64, h, eps)})
    return out


def acceptance(main_logits, mtp_logits, k):
    """calculate_mtp_acceptance_rate for mtp_eval_target_module = k, target mask all ones, no segment ids."""
    B, T, _ = main_logits.shape
    mask = roll_left(np.ones((B, T), dtype=np.int32), k)
    main = roll_left(main_logits.argmax(-1).numpy().astype(np.int32), k)
    pred = mtp_logits.argmax(-1).numpy().astype(np.int32)
    correct = int(((pred == main) * mask).sum())
    total = int(mask.sum())
    return correct / (total + EPS) * 100.0, correct, total


def argmax_gap(logits, mask=None):
    """Smallest top-1 minus top-2 logit over the positions where mask (bool [B,T]) is set."""
    top = torch.topk(logits, 2, dim=-1).values
    gap = (top[..., 0] - top[..., 1]).numpy()
    if mask is not None:
        gap = gap[mask.astype(bool)]
    return float(gap.min()) if gap.size else float("inf")


def acceptance_gaps(main_logits, mtps):
    """Smallest argmax gap over what the acceptance rates read: main logits at positions k..T-1 (rolled to 0..T-1-k)
    and mtp logits k at positions 0..T-1-k."""
    B, T, _ = main_logits.shape
    gaps = []
    for k, m in enumerate(mtps, start=1):
        mask = roll_left(np.ones((B, T), dtype=np.int32), k)
        gaps.append(argmax_gap(m["logits"], mask))
        gaps.append(argmax_gap(main_logits[:, k:]))
    return min(gaps)


def mtp_weights(g, D, layer_weights_fn, n_layers, norm_spread):
    w = {}
    for k in range(1, n_layers + 1):
        pre = f"mtp_block.mtp_layer_{k}.mtp_{k}_"
        w[pre + "embedding_norm.scale"] = f32(g, (D,), norm_spread, 1.0)
        w[pre + "hidden_state_norm.scale"] = f32(g, (D,), norm_spread, 1.0)
        w[pre + "projection.kernel"] = f32(g, (2 * D, D), 1.0 / math.sqrt(2 * D))
        w.update(dr.prefixed(layer_weights_fn(g), pre + "transformer_layer."))
    return w


def write_outputs(d, tokens, logits, hidden, mtps, acc):
    save_npy(d, "tokens", tokens.astype(np.int32))
    save_npy(d, "logits", logits.numpy())
    save_npy(d, "hidden", hidden.numpy())
    for k, m in enumerate(mtps, start=1):
        save_npy(d, f"mtp_hidden_{k}", m["hidden"].numpy())
        save_npy(d, f"mtp_logits_{k}", m["logits"].numpy())
        save_npy(d, f"mtp_rolled_ids_{k}", m["ids"].astype(np.int32))
    with open(os.path.join(d, "acceptance.json"), "w") as f:
        json.dump({str(k): a[0] for k, a in acc.items()}, f, indent=1, sort_keys=True)


def write_yaml_dict(d, cfg, comment):
    lines = [f"# {comment}"]
    for k, v in cfg.items():
        if isinstance(v, bool):
            v = str(v).lower()
        elif isinstance(v, str):
            v = f'"{v}"'
        lines.append(f"{k}: {v}")
    with open(os.path.join(d, "config.yml"), "w") as f:
        f.write("\n".join(lines) + "\n")


def check_close(what, got, want, tol=1e-12):
    err = float((got - want).abs().max()) / max(1.0, float(want.abs().max()))
    assert err <= tol, f"{what}: relative max error {err} > {tol}"
    return err


def accepted(acc, main_logits, mtps):
    """Both rates strictly inside (0, 100), and each differs from what a misaligned roll (k - 1 or k + 1 steps for
    the main predictions) would give, so that the fixture tells the alignment apart."""
    if not all(0 < a[1] < a[2] for a in acc.values()):
        return False
    B, T, _ = main_logits.shape
    for k, m in enumerate(mtps, start=1):
        pred = m["logits"].argmax(-1).numpy()
        mask = roll_left(np.ones((B, T), dtype=np.int32), k)
        for s in (k - 1, k + 1):
            main = roll_left(main_logits.argmax(-1).numpy(), s)
            if int(((pred == main) * mask).sum()) == acc[k][1]:
                return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# Llama2

LL = dict(B=2, T=9, D=32, N=4, K=2, H=8, F=48, L=2, V=64, eps=1e-5, theta=10000.0)


def llama2_config(n_mtp):
    c = LL
    cfg = {"dtype": "float32", "decoder_block": "llama2", "base_emb_dim": c["D"], "base_num_query_heads": c["N"],
           "base_num_kv_heads": c["K"], "head_dim": c["H"], "base_mlp_dim": c["F"],
           "base_num_decoder_layers": c["L"], "vocab_size": c["V"], "normalization_layer_epsilon": c["eps"],
           "max_target_length": 64}
    if n_mtp:
        cfg["mtp_num_layers"] = n_mtp
    return cfg


def llama2_attn_args():
    return {"heads": LL["N"], "kv_heads": LL["K"], "head_dim": LL["H"], "eps": LL["eps"],
            "rope": ar.default_rope(LL["H"], LL["theta"])}


def llama2_main(w64, tokens):
    """Embedding, the llama2 layers, final head: (logits, raw hidden)."""
    B, T = tokens.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    for i in range(LL["L"]):
        x, _, _ = ar.decoder_layer("llama2", x, dr.sub(w64, f"decoder.layers_{i}."), llama2_attn_args(), pos)
    return output_head(w64, x, LL["eps"]), x


def llama2_forward(w64, tokens, n_mtp):
    B, T = tokens.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    logits, hidden = llama2_main(w64, tokens)

    def layer(x, p, k):
        return ar.decoder_layer("llama2", x, p, llama2_attn_args(), pos)[0]
    return logits, hidden, mtp_block(w64, tokens, hidden, LL["eps"], layer, n_mtp)


def llama2_case():
    c = LL
    D, V = c["D"], c["V"]
    for attempt in range(400):
        g = rng(61 + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (V, D))}
        for i in range(c["L"]):
            w.update(ar.layer_weights(g, "llama2", D, c["N"], c["K"], c["H"], c["F"], {}, f"decoder.layers_{i}."))
        w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.2, 1.0)
        w["decoder.logits_dense.kernel"] = f32(g, (D, V), 1.0 / math.sqrt(D))
        w.update(mtp_weights(g, D, lambda gg: ar.layer_weights(gg, "llama2", D, c["N"], c["K"], c["H"], c["F"], {}),
                             MTP_LAYERS, 0.2))
        tokens = g.integers(0, V, size=(c["B"], c["T"])).astype(np.int32)
        w64 = ar.to64(w)
        logits, hidden, mtps = llama2_forward(w64, tokens, MTP_LAYERS)
        acc = {k: acceptance(logits, m["logits"], k) for k, m in enumerate(mtps, start=1)}
        gap = acceptance_gaps(logits, mtps)
        if accepted(acc, logits, mtps) and gap >= ARGMAX_MARGIN:
            break
    else:
        raise RuntimeError("mtp_llama2_model: no seed with clear argmaxes and acceptance strictly inside (0, 100)")

    # Sanity: with mtp_num_layers = 0 the main logits are attention_reference.py's model_case math (same loop).
    logits0, _, none = llama2_forward(w64, tokens, 0)
    assert not none
    check_close("mtp_llama2_model main logits, MTP off vs on", logits0, logits, 0.0)
    ref = ar_model_logits(w64, tokens)
    check_close("mtp_llama2_model main logits vs attention_reference model loop", logits, ref)

    d = case_dir("mtp_llama2_model")
    save_safetensors(f"{d}/model.safetensors", w)
    write_outputs(d, tokens, logits, hidden, mtps, acc)
    cfg = llama2_config(MTP_LAYERS)
    write_yaml_dict(d, cfg, "Tiny llama2 + 2 MTP layers of mtp_reference.py (MaxText keys).")
    save_meta(d, {"what": "2-layer llama2 model + MaxText MTP block (2 layers, each a LlamaDecoderLayer), float64 "
                          "from float32 weights; inference, no segment ids",
                  "kind": "llama2", "config": cfg, "tokens": [c["B"], c["T"]], "maxtext_commit": "e591f30",
                  "acceptance": {str(k): {"rate": a[0], "correct": a[1], "counted": a[2]} for k, a in acc.items()},
                  "acceptance_note": "acceptance.json[k] = calculate_mtp_acceptance_rate with mtp_eval_target_module"
                                     " = k, all-ones target mask: correct / (counted + 1e-8) * 100",
                  "min_argmax_margin": gap, "seed_attempt": attempt})
    return logits


def ar_model_logits(w64, tokens):
    """attention_reference.model_case's forward, step by step (embedding, decoder_layer per layer, rms_norm, dense)."""
    B, T = tokens.shape
    a = {"heads": LL["N"], "kv_heads": LL["K"], "head_dim": LL["H"], "eps": LL["eps"],
         "rope": ar.default_rope(LL["H"], LL["theta"])}
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    for i in range(LL["L"]):
        x, _, _ = ar.decoder_layer("llama2", x, ar.sub(w64, f"decoder.layers_{i}."), a, pos)
    x = ar.rms_norm(x, w64["decoder.decoder_norm.scale"], LL["eps"])
    return x @ w64["decoder.logits_dense.kernel"]


def check_existing_llama2_fixture():
    """The main path here reproduces tests/fixtures/llama2_model/logits.npy (attention_reference.py) from its weights."""
    d = os.path.join(FIXTURES, "llama2_model")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        return None
    w64 = ar.to64(read_safetensors(os.path.join(d, "model.safetensors")))
    tokens = np.load(os.path.join(d, "tokens.npy"))
    logits, _, _ = llama2_forward(w64, tokens, 0)
    return check_close("llama2_model fixture logits", logits, torch.from_numpy(np.load(os.path.join(d, "logits.npy"))))


# ---------------------------------------------------------------------------------------------------------------
# DeepSeek

def deepseek_names(c):
    names = [(f"decoder.dense_layers_{i}", False) for i in range(c["dense"])]
    names += [(f"decoder.moe_layers_{j}", True) for j in range(c["L"] - c["dense"])]
    return names


def deepseek_forward(w64, tokens, c, n_mtp, margins):
    B, T = tokens.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    for prefix, moe in deepseek_names(c):
        x, _, _ = dr.deepseek_layer(x, dr.sub(w64, prefix + "."), c, pos, moe, margins)
    hidden = x
    logits = output_head(w64, hidden, c["eps"])

    def layer(xx, p, k):  # get_decoder_layers()[-1] for DEEPSEEK: DeepSeekMoELayer
        return dr.deepseek_layer(xx, p, c, pos, True, margins)[0]
    return logits, hidden, mtp_block(w64, tokens, hidden, c["eps"], layer, n_mtp)


def deepseek_case():
    c = dr.deepseek_settings(gate_scale=2.0)
    B, T, D, V = 2, 9, c["D"], c["V"]
    for attempt in range(400):
        g = rng(71 + 1000 * attempt)
        w = {"token_embedder.embedding": f32(g, (V, D))}
        for prefix, moe in deepseek_names(c):
            w.update(dr.prefixed(dr.deepseek_layer_weights(g, c, moe), prefix + "."))
        w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.1, 1.0)
        w["decoder.logits_dense.kernel"] = f32(g, (D, V), 1 / math.sqrt(D))
        w.update(mtp_weights(g, D, lambda gg: dr.deepseek_layer_weights(gg, c, True), MTP_LAYERS, 0.1))
        tokens = g.integers(0, V, size=(B, T)).astype(np.int32)
        w64 = dr.to64(w)
        margins = []
        logits, hidden, mtps = deepseek_forward(w64, tokens, c, MTP_LAYERS, margins)
        acc = {k: acceptance(logits, m["logits"], k) for k, m in enumerate(mtps, start=1)}
        gap = acceptance_gaps(logits, mtps)
        if min(margins) >= dr.MIN_MARGIN and accepted(acc, logits, mtps) and gap >= ARGMAX_MARGIN:
            break
    else:
        raise RuntimeError("mtp_deepseek_model: no seed with clear routing / argmaxes and acceptance inside (0, 100)")

    logits0, _, _ = deepseek_forward(w64, tokens, c, 0, [])
    check_close("mtp_deepseek_model main logits, MTP off vs on", logits0, logits, 0.0)

    d = case_dir("mtp_deepseek_model")
    save_safetensors(f"{d}/model.safetensors", w)
    write_outputs(d, tokens, logits, hidden, mtps, acc)
    dr.write_yaml(d, dr.deepseek_yaml(c, f"mtp_num_layers: {MTP_LAYERS}\n"))
    save_meta(d, {"what": "3-layer DeepSeek-V3-style model (1 dense + 2 MoE) + MaxText MTP block (2 layers, each a "
                          "DeepSeekMoELayer), float64 from float32 weights; inference, no segment ids",
                  "tokens": [B, T], "vocab": V, "maxtext_commit": "e591f30", "min_routing_margin": min(margins),
                  "acceptance": {str(k): {"rate": a[0], "correct": a[1], "counted": a[2]} for k, a in acc.items()},
                  "acceptance_note": "acceptance.json[k] = calculate_mtp_acceptance_rate with mtp_eval_target_module"
                                     " = k, all-ones target mask: correct / (counted + 1e-8) * 100",
                  "min_argmax_margin": gap, "seed_attempt": attempt})
    return c, w, tokens, logits, hidden, mtps


def check_existing_deepseek_fixture():
    """The main path here reproduces tests/fixtures/deepseek_model/logits.npy (deepseek_reference.py)."""
    d = os.path.join(FIXTURES, "deepseek_model")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        return None
    c = dr.deepseek_settings(gate_scale=2.0)
    w64 = dr.to64(read_safetensors(os.path.join(d, "model.safetensors")))
    tokens = np.load(os.path.join(d, "tokens.npy"))
    logits, _, _ = deepseek_forward(w64, tokens, c, 0, [])
    return check_close("deepseek_model fixture logits", logits, torch.from_numpy(np.load(os.path.join(d, "logits.npy"))))


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face DeepSeek-V3 checkpoint with one next-n (MTP) layer

def tr(a):
    return np.ascontiguousarray(np.asarray(a).T)


def hf_layer(w, m, h, c, moe):
    """MaxText layer params (prefix m) -> HF DeepSeek-V3 layer params (prefix h). convert_deepseek_family_ckpt.py
    in reverse: every matrix transposed to [out, in], head axes flattened; no lane permutation, no query scaling."""
    D, N, rq, rkv = c["D"], c["N"], c["rq"], c["rkv"]
    Hq, Hv = c["Hn"] + c["Hr"], c["Hv"]
    out = {h + "input_layernorm.weight": w[m + "pre_self_attention_layer_norm.scale"],
           h + "post_attention_layernorm.weight": w[m + "post_self_attention_layer_norm.scale"]}
    a = m + "self_attention."
    if rq:
        out[h + "self_attn.q_a_proj.weight"] = tr(w[a + "wq_a.kernel"])
        out[h + "self_attn.q_a_layernorm.weight"] = w[a + "q_norm.scale"]
        out[h + "self_attn.q_b_proj.weight"] = tr(w[a + "wq_b.kernel"].reshape(rq, N * Hq))
    else:
        out[h + "self_attn.q_proj.weight"] = tr(w[a + "query.kernel"].reshape(D, N * Hq))
    out[h + "self_attn.kv_a_proj_with_mqa.weight"] = tr(w[a + "wkv_a.kernel"])
    out[h + "self_attn.kv_a_layernorm.weight"] = w[a + "kv_norm.scale"]
    out[h + "self_attn.kv_b_proj.weight"] = tr(w[a + "wkv_b.kernel"].reshape(rkv, N * (c["Hn"] + Hv)))
    out[h + "self_attn.o_proj.weight"] = tr(w[a + "out.kernel"].reshape(N * Hv, D))
    if not moe:
        for hf, mt in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
            out[h + f"mlp.{hf}.weight"] = tr(w[m + f"mlp.{mt}.kernel"])
        return out
    b = m + "DeepSeekMoeBlock_0."
    out[h + "mlp.gate.weight"] = tr(w[b + "MoeBlock_0.gate.kernel"])
    out[h + "mlp.gate.e_score_correction_bias"] = w[b + "MoeBlock_0.gate.bias"]
    for e in range(c["E"]):
        for hf, mt in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
            out[h + f"mlp.experts.{e}.{hf}.weight"] = tr(w[b + f"MoeBlock_0.{mt}"][e])
    for hf, mt in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
        out[h + f"mlp.shared_experts.{hf}.weight"] = tr(w[b + f"shared_experts.{mt}.kernel"])
    return out


def hf_weights(w, c):
    L = c["L"]
    hf = {"model.embed_tokens.weight": w["token_embedder.embedding"],
          "model.norm.weight": w["decoder.decoder_norm.scale"],
          "lm_head.weight": tr(w["decoder.logits_dense.kernel"])}
    for i in range(L):
        m = f"decoder.dense_layers_{i}." if i < c["dense"] else f"decoder.moe_layers_{i - c['dense']}."
        hf.update(hf_layer(w, m, f"model.layers.{i}.", c, i >= c["dense"]))
    p, h = "mtp_block.mtp_layer_1.mtp_1_", f"model.layers.{L}."
    hf[h + "enorm.weight"] = w[p + "embedding_norm.scale"]
    hf[h + "hnorm.weight"] = w[p + "hidden_state_norm.scale"]
    hf[h + "eh_proj.weight"] = tr(w[p + "projection.kernel"])           # [D, 2D]: input concat([enorm(e), hnorm(h)])
    hf[h + "shared_head.norm.weight"] = w["decoder.decoder_norm.scale"]  # shared with the main model, as released
    hf[h + "shared_head.head.weight"] = hf["lm_head.weight"]
    hf[h + "embed_tokens.weight"] = w["token_embedder.embedding"]
    hf.update(hf_layer(w, p + "transformer_layer.", h, c, True))
    return hf


def hf_config(c):
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": c["V"],
            "hidden_size": c["D"], "intermediate_size": c["F"], "moe_intermediate_size": c["Fm"],
            "num_hidden_layers": c["L"], "first_k_dense_replace": c["dense"], "moe_layer_freq": 1,
            "num_attention_heads": c["N"], "num_key_value_heads": c["N"], "n_routed_experts": c["E"],
            "n_shared_experts": c["shared"], "num_experts_per_tok": c["k"], "n_group": c["groups"],
            "topk_group": c["topk_groups"], "scoring_func": "sigmoid", "topk_method": "noaux_tc",
            "norm_topk_prob": True, "routed_scaling_factor": c["rsf"], "q_lora_rank": c["rq"],
            "kv_lora_rank": c["rkv"], "qk_nope_head_dim": c["Hn"], "qk_rope_head_dim": c["Hr"],
            "v_head_dim": c["Hv"], "hidden_act": "silu", "max_position_embeddings": c["max_pos"],
            "rms_norm_eps": c["eps"], "rope_theta": c["theta"],
            "rope_scaling": {"type": "yarn", "factor": c["factor"], "original_max_position_embeddings": c["orig"],
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
            "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
            "num_nextn_predict_layers": 1, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "float32"}


def hf_forward(hf, cfg, tokens):
    """An HF-layout DeepSeek-V3 forward with its next-n layer, written against the HF names and config.json alone
    (DeepSeek-V3 inference/model.py conventions: y = x W^T, q/k rope lanes as interleaved complex pairs rotated by
    complex multiplication, softmax scale from mscale_all_dim). The YaRN frequencies are MaxText's float32 table
    (deepseek_reference.yarn_freqs), so that this checks the weight layout, not the table's precision."""
    W = {k: t64(v) for k, v in hf.items()}
    D, N = cfg["hidden_size"], cfg["num_attention_heads"]
    Hn, Hr, Hv, rkv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    eps, L, E = cfg["rms_norm_eps"], cfg["num_hidden_layers"], cfg["n_routed_experts"]
    rs = cfg["rope_scaling"]
    scale = (Hn + Hr) ** -0.5
    if cfg["max_position_embeddings"] > rs["original_max_position_embeddings"]:
        ms = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0
        scale *= ms * ms
    B, T = tokens.shape
    freqs = dr.yarn_freqs(Hr, cfg["rope_theta"], rs["factor"], rs["original_max_position_embeddings"],
                          rs["beta_fast"], rs["beta_slow"])
    ang = torch.from_numpy((np.arange(T, dtype=np.float32)[:, None] * freqs[None, :]).astype(np.float32)).double()
    cis = torch.polar(torch.ones_like(ang), ang)  # [T, Hr/2]

    def lin(x, name):
        return x @ W[name].T

    def norm(x, name):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * W[name]

    def rope(x):  # [B, T, h, Hr] interleaved pairs -> rotated, interleaved
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], Hr // 2, 2).contiguous())
        return torch.view_as_real(xc * cis[None, :, None, :]).flatten(-2)

    def attn(x, p):
        q = lin(norm(lin(x, p + "q_a_proj.weight"), p + "q_a_layernorm.weight"), p + "q_b_proj.weight")
        q = q.view(B, T, N, Hn + Hr)
        q = torch.cat([q[..., :Hn], rope(q[..., Hn:])], dim=-1)
        kv = lin(x, p + "kv_a_proj_with_mqa.weight")
        kpe = rope(kv[..., rkv:].unsqueeze(2))
        kv = lin(norm(kv[..., :rkv], p + "kv_a_layernorm.weight"), p + "kv_b_proj.weight").view(B, T, N, Hn + Hv)
        k = torch.cat([kv[..., :Hn], kpe.expand(B, T, N, Hr)], dim=-1)
        s = torch.einsum("bthd,bshd->bhts", q, k) * scale
        s = s + torch.full((T, T), float("-inf")).triu(1)
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(s, dim=-1), kv[..., Hn:])
        return lin(o.reshape(B, T, N * Hv), p + "o_proj.weight")

    def ffn(x, p):
        return lin(torch.nn.functional.silu(lin(x, p + "gate_proj.weight")) * lin(x, p + "up_proj.weight"),
                   p + "down_proj.weight")

    def moe(x, p):
        xf = x.reshape(-1, D)
        scores = torch.sigmoid(lin(xf, p + "gate.weight"))
        s = scores + W[p + "gate.e_score_correction_bias"]
        G = cfg["n_group"]
        gs = s.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gs.topk(cfg["topk_group"], dim=-1).indices, True)
        s = s.masked_fill(~keep.repeat_interleave(E // G, dim=1), float("-inf"))
        idx = s.topk(cfg["num_experts_per_tok"], dim=-1).indices
        wts = scores.gather(1, idx)
        wts = wts / wts.sum(-1, keepdim=True) * cfg["routed_scaling_factor"]
        y = torch.zeros_like(xf)
        for m in range(xf.shape[0]):
            for j in range(idx.shape[1]):
                y[m] += wts[m, j] * ffn(xf[m], p + f"experts.{int(idx[m, j])}.")
        return (y + ffn(xf, p + "shared_experts.")).reshape(x.shape)

    def layer(x, i):
        p = f"model.layers.{i}."
        x = x + attn(norm(x, p + "input_layernorm.weight"), p + "self_attn.")
        hn = norm(x, p + "post_attention_layernorm.weight")
        return x + (moe(hn, p + "mlp.") if i >= cfg["first_k_dense_replace"] else ffn(hn, p + "mlp."))

    ids = torch.from_numpy(tokens).long()
    x = W["model.embed_tokens.weight"][ids]
    for i in range(L):
        x = layer(x, i)
    logits = lin(norm(x, "model.norm.weight"), "lm_head.weight")
    p = f"model.layers.{L}."
    nxt = torch.cat([ids[:, 1:], torch.zeros(B, 1, dtype=torch.long)], dim=1)  # next tokens; last slot id 0
    e = W[p + "embed_tokens.weight"][nxt]
    hm = lin(torch.cat([norm(e, p + "enorm.weight"), norm(x, p + "hnorm.weight")], dim=-1), p + "eh_proj.weight")
    hm = layer(hm, L)
    mtp_logits = lin(norm(hm, p + "shared_head.norm.weight"), p + "shared_head.head.weight")
    return logits, mtp_logits


def deepseek_hf_case(c, w, tokens, logits, mtps):
    hf = hf_weights(w, c)
    cfg = hf_config(c)
    hl, hm = hf_forward(hf, cfg, tokens)
    e_main = check_close("mtp_deepseek_hf main logits (HF layout vs MaxText names)", hl, logits)
    e_mtp = check_close("mtp_deepseek_hf mtp logits (HF layout vs MaxText names)", hm, mtps[0]["logits"])
    d = case_dir("mtp_deepseek_hf")
    save_safetensors(f"{d}/model.safetensors", hf, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    save_npy(d, "tokens", tokens.astype(np.int32))
    save_npy(d, "logits", logits.numpy())
    save_npy(d, "mtp_logits_1", mtps[0]["logits"].numpy())
    save_meta(d, {
        "what": "Hugging Face DeepSeek-V3 checkpoint (float32) of mtp_deepseek_model's main model and its FIRST MTP "
                "layer (num_nextn_predict_layers 1, stored as model.layers.{num_hidden_layers}); float64 outputs equal "
                "mtp_deepseek_model's logits.npy and mtp_logits_1.npy",
        "tokens": list(tokens.shape), "maxtext_commit": "e591f30", "mtp_layer_index": c["L"],
        "eh_proj": "eh_proj.weight [hidden, 2*hidden] (torch Linear [out, in]); its input is "
                   "concat([enorm(embed_tokens(next ids)), hnorm(h)], -1), DeepSeek's order, the same as MaxText's "
                   "concat([embedding_norm, hidden_state_norm]); = mtp_1_projection.kernel transposed",
        "mtp_semantics": "MaxText's: next ids = tokens shifted left by one, last slot token id 0; h = the main model's "
                         "last layer output before model.norm; the MTP transformer layer (an MoE layer) runs at the "
                         "original positions 0..T-1, causal; logits = shared_head.head(shared_head.norm(h_mtp)). "
                         "No zeroing of the embedding at position 0 (vLLM's DeepSeekMTP zeroes it; MaxText does not)",
        "shared_with_main": "model.layers.L.{embed_tokens, shared_head.norm, shared_head.head} equal model.embed_tokens, "
                            "model.norm, lm_head (MaxText skips them on import and reuses the main ones)",
        "mapping": "convert_deepseek_family_ckpt.py: enorm <-> mtp_1_embedding_norm.scale, hnorm <-> "
                   "mtp_1_hidden_state_norm.scale, eh_proj^T <-> mtp_1_projection.kernel, the layer's own params as a "
                   "MoE layer under mtp_1_transformer_layer; matrices transposed, head axes flattened, no lane "
                   "permutation, no query scaling; e_score_correction_bias <-> MoeBlock_0.gate.bias",
        "hf_layout_check_rel_err": {"logits": e_main, "mtp_logits_1": e_mtp}})


# ---------------------------------------------------------------------------------------------------------------

if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    e1 = check_existing_llama2_fixture()
    e2 = check_existing_deepseek_fixture()
    llama2_case()
    c, w, tokens, logits, hidden, mtps = deepseek_case()
    deepseek_hf_case(c, w, tokens, logits, mtps)
    print(f"main path vs llama2_model / deepseek_model fixtures: rel err {e1}, {e2}")
    print("wrote tests/fixtures/mtp_{llama2_model,deepseek_model,deepseek_hf}")
