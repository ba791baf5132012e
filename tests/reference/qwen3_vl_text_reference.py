"""Tiny Hugging Face Qwen3-VL checkpoints (dense "qwen3_vl" and MoE "qwen3_vl_moe"), TEXT model only, and the
float64 logits of that text model for a prompt holding one picture whose soft tokens are given as precomputed rows,
with MRoPE's 3-D (temporal, height, width) positions and DeepStack.

Sources read:
  Hugging Face transformers (code index):
    src/transformers/models/qwen3_vl_moe/modeling_qwen3_vl_moe.py (commit 0142cff2; Qwen3-VL dense is the same text
      stack with Qwen3VLTextMLP): Qwen3VLMoeTextRMSNorm (x * rsqrt(mean x^2 + eps) * w, plain w), Attention (q_norm /
      k_norm RMSNorm over head_dim per head BEFORE rope; GQA; scaling head_dim^-0.5; causal), TextRotaryEmbedding
      (inv_freq = 1 / theta^(arange(0, d, 2) / d) in float32; apply_interleaved_mrope: freqs_t = row T, lanes
      slice(1, 3 * section[1], 3) from row H, slice(2, 3 * section[2], 3) from row W; emb = cat(freqs, freqs);
      rotate-half), TopKRouter (softmax over all experts in float32, topk, renormalise (norm_topk_prob)),
      TextExperts (runtime layout gate_up_proj [E, 2I, H]; gate, up = linear(x, gate_up_proj[e]).chunk(2): gate is
      the FIRST half), TextModel.forward (after decoder layer j < len(deepstack): _deepstack_process
      hidden[visual_pos_masks] += deepstack_j), Model.forward (inputs_embeds.masked_scatter(image_mask, image_embeds):
      the embedding at each image pad is REPLACED), get_mrope_position_ids (text run: arange on all 3 rows; image grid
      (t, h, w) merged by spatial_merge_size: meshgrid(t, h, w) + current_position; then
      current_position += max(h, w) // merge).
    configuration_qwen3_vl_moe.py: Qwen3VLMoeConfig (image_token_id / video_token_id / vision_start_token_id /
      vision_end_token_id at the ROOT, tie_word_embeddings default False at the root); text config
      attribute_map num_experts -> num_local_experts; vision config deepstack_visual_indexes, out_hidden_size.
    conversion_mapping.py: "qwen3_vl_moe": Transpose(1, 2) of mlp.experts.gate_up_proj and mlp.experts.down_proj
      on load: the RELEASED checkpoints store gate_up_proj [E, H, 2I] and down_proj [E, I, H] (transformers 4.57's
      own parameter layout: gate_up = x @ gate_up_proj[e]; gate, up = chunk(2, -1)); v5 transposes to [E, 2I, H] /
      [E, H, I]. This fixture stores the RELEASED layout.
  MaxText (commit e591f30c): configs/models/qwen3-vl-2b.yml (decoder_block qwen3, use_mrope, mrope_section,
    rope_max_timescale 5e6, deepstack_visual_indexes_for_vit), qwen3-vl-30b-a3b.yml (decoder_block qwen3_moe,
    scan_layers false: "deepstack does not support scan_layers"), checkpoint_conversion/utils/param_mapping.py
    QWEN3_VL_MAXTEXT_TO_HF_PARAM_MAPPING (the Qwen3 text mapping with "model." -> "model.language_model."; MoE:
    (wi_0, wi_1) <-> mlp.experts.gate_up_proj = concatenate([wi_0, wi_1], axis=-1), i.e. [E, H, 2I], gate first;
    wo <-> mlp.experts.down_proj [E, I, H] unchanged), hf_model_configs.py (qwen3_vl_*_dict, written in the v5
    spelling: rope_parameters inside text_config, num_local_experts, vision model_type qwen3_vl_vision),
    layers/decoders.py deepstack_process (after layer lyr < len(deepstack)).

Imported (not modified): qwen3_5_multimodal_reference.mrope3 (interleaved MRoPE, MaxText's float32 angle formation)
and common.py (writers). Vision tower: NOT included (no model.visual.* tensors): the tiny Qwen3 vision fixtures
have a different width (out 32, not 24) and no deepstack mergers, so the picture's rows are random float32 rows.

Writes tests/fixtures/qwen3_vl_model/ and tests/fixtures/qwen3_vl_moe_model/ (see each meta.json "files").
Run: /usr/bin/python3 tests/reference/qwen3_vl_text_reference.py
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
import qwen3_5_multimodal_reference as MM  # noqa: E402

H, L, NQ, NKV, HD, FF, V, EPS, THETA = 24, 2, 4, 2, 8, 32, 96, 1e-6, 5000000.0
SECTION = [2, 1, 1]
E, TOPK, MOE_FF = 4, 2, 16
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 80, 81, 82, 83
MERGE = 2
GRID = (1, 4, 6)  # image_grid_thw in patches: merged 2 x 3 -> 6 soft tokens
DEEPSTACK = [0, 1]


def text_config(moe):
    c = {
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "dtype": "float32",
        "head_dim": HD, "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02,
        "intermediate_size": FF, "max_position_embeddings": 128, "model_type": "qwen3_vl_text",
        "num_attention_heads": NQ, "num_hidden_layers": L, "num_key_value_heads": NKV, "rms_norm_eps": EPS,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": SECTION, "rope_type": "default"},
        "rope_theta": THETA, "tie_word_embeddings": False, "use_cache": True, "vocab_size": V,
    }
    if moe:
        c.update({"model_type": "qwen3_vl_moe_text", "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "moe_intermediate_size": MOE_FF, "norm_topk_prob": True, "num_experts": E,
                  "num_experts_per_tok": TOPK, "router_aux_loss_coef": 0.001})
    return c


def hf_config(moe):
    mt = "qwen3_vl_moe" if moe else "qwen3_vl"
    return {
        "architectures": ["Qwen3VLMoeForConditionalGeneration" if moe else "Qwen3VLForConditionalGeneration"],
        "image_token_id": IMAGE_PAD, "model_type": mt, "text_config": text_config(moe),
        "tie_word_embeddings": False, "transformers_version": "4.57.0.dev0", "video_token_id": VIDEO_PAD,
        "vision_config": {
            "deepstack_visual_indexes": DEEPSTACK, "depth": 2, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 16,
            "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 32, "model_type": mt, "num_heads": 2,
            "num_position_embeddings": 16, "out_hidden_size": H, "patch_size": 4, "spatial_merge_size": MERGE,
            "temporal_patch_size": 2},
        "vision_end_token_id": VISION_END, "vision_start_token_id": VISION_START,
    }


def make_weights(g, moe):
    """HF names and the released layouts, float32."""
    p = "model.language_model."
    w = {p + "embed_tokens.weight": C.f32(g, (V, H)), p + "norm.weight": C.f32(g, (H,), 0.1, 1.0),
         "lm_head.weight": C.f32(g, (V, H), 0.3)}
    for i in range(L):
        q = f"{p}layers.{i}."
        w[q + "input_layernorm.weight"] = C.f32(g, (H,), 0.1, 1.0)
        w[q + "post_attention_layernorm.weight"] = C.f32(g, (H,), 0.1, 1.0)
        w[q + "self_attn.q_proj.weight"] = C.f32(g, (NQ * HD, H), 0.25)
        w[q + "self_attn.k_proj.weight"] = C.f32(g, (NKV * HD, H), 0.25)
        w[q + "self_attn.v_proj.weight"] = C.f32(g, (NKV * HD, H), 0.25)
        w[q + "self_attn.o_proj.weight"] = C.f32(g, (H, NQ * HD), 0.2)
        w[q + "self_attn.q_norm.weight"] = C.f32(g, (HD,), 0.1, 1.0)
        w[q + "self_attn.k_norm.weight"] = C.f32(g, (HD,), 0.1, 1.0)
        if moe:
            w[q + "mlp.gate.weight"] = C.f32(g, (E, H), 0.5)
            w[q + "mlp.experts.gate_up_proj"] = C.f32(g, (E, H, 2 * MOE_FF), 0.25)  # [..., :I] gate, [..., I:] up
            w[q + "mlp.experts.down_proj"] = C.f32(g, (E, MOE_FF, H), 0.25)
        else:
            w[q + "mlp.gate_proj.weight"] = C.f32(g, (FF, H), 0.25)
            w[q + "mlp.up_proj.weight"] = C.f32(g, (FF, H), 0.25)
            w[q + "mlp.down_proj.weight"] = C.f32(g, (H, FF), 0.2)
    return w


def build_prompt(g):
    text0 = g.integers(3, VISION_START, 10)
    text1 = g.integers(3, VISION_START, 12)
    n = (GRID[1] // MERGE) * (GRID[2] // MERGE)
    return np.concatenate([text0, [VISION_START], [IMAGE_PAD] * n, [VISION_END], text1]).astype(np.int64)


def hf_positions(ids):
    """get_mrope_position_ids, restated: runs of text / image tokens."""
    blocks, cur, t = [], 0, 0
    while t < len(ids):
        if ids[t] != IMAGE_PAD:
            blocks.append(np.full((3, 1), cur))
            cur += 1
            t += 1
            continue
        gt, gh, gw = GRID[0], GRID[1] // MERGE, GRID[2] // MERGE
        ax = np.meshgrid(np.arange(gt) + cur, np.arange(gh) + cur, np.arange(gw) + cur, indexing="ij")
        blocks.append(np.stack(ax).reshape(3, -1))
        t += gt * gh * gw
        cur += max(GRID[1], GRID[2]) // MERGE
    return np.concatenate(blocks, axis=1)


def rms(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w


def forward(w64, ids, rows, pos3t, moe, deep=None, f32_angles=True, margins=None):
    """float64 text model: embeddings (image pads replaced by rows), L layers, deepstack, norm, lm_head."""
    p = "model.language_model."
    T = len(ids)
    mask = torch.from_numpy(ids == IMAGE_PAD)
    x = w64[p + "embed_tokens.weight"][torch.from_numpy(ids)].clone()
    x[mask] = C.t64(rows)
    rope = MM.mrope3(HD, THETA, SECTION, f32_angles)
    pos = np.asarray(pos3t).T[None]  # [1, T, 3]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        q = f"{p}layers.{i}."
        h = rms(x, w64[q + "input_layernorm.weight"])
        qs = rms((h @ w64[q + "self_attn.q_proj.weight"].T).view(T, NQ, HD), w64[q + "self_attn.q_norm.weight"])
        ks = rms((h @ w64[q + "self_attn.k_proj.weight"].T).view(T, NKV, HD), w64[q + "self_attn.k_norm.weight"])
        vs = (h @ w64[q + "self_attn.v_proj.weight"].T).view(T, NKV, HD)
        qs, ks = rope(qs[None], pos)[0], rope(ks[None], pos)[0]
        rep = NQ // NKV
        ks, vs = ks.repeat_interleave(rep, dim=1), vs.repeat_interleave(rep, dim=1)
        s = torch.einsum("qhd,khd->hqk", qs, ks) * HD ** -0.5
        s = s.masked_fill(~causal, float("-inf")).softmax(-1)
        o = torch.einsum("hqk,khd->qhd", s, vs).reshape(T, NQ * HD)
        x = x + o @ w64[q + "self_attn.o_proj.weight"].T
        h = rms(x, w64[q + "post_attention_layernorm.weight"])
        if moe:
            probs = (h @ w64[q + "mlp.gate.weight"].T).softmax(-1)
            top, idx = probs.topk(TOPK, dim=-1)
            if margins is not None:
                srt = probs.sort(-1, descending=True).values
                margins.append(float((srt[:, TOPK - 1] - srt[:, TOPK]).min()))
            top = top / top.sum(-1, keepdim=True)
            y = torch.zeros_like(h)
            for e in range(E):
                gu = h @ w64[q + "mlp.experts.gate_up_proj"][e]
                a = torch.nn.functional.silu(gu[:, :MOE_FF]) * gu[:, MOE_FF:]
                out = a @ w64[q + "mlp.experts.down_proj"][e]
                wt = (top * (idx == e)).sum(-1, keepdim=True)
                y = y + wt * out
        else:
            a = torch.nn.functional.silu(h @ w64[q + "mlp.gate_proj.weight"].T) * (h @ w64[q + "mlp.up_proj.weight"].T)
            y = a @ w64[q + "mlp.down_proj.weight"].T
        x = x + y
        if deep is not None and i < len(deep):
            x = x.clone()
            x[mask] = x[mask] + C.t64(deep[i])
    x = rms(x, w64[p + "norm.weight"])
    return (x @ w64["lm_head.weight"].T).numpy()


def max_abs(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def build(name, moe, seed):
    g = C.rng(seed)
    d = C.case_dir(name)
    hfd = os.path.join(d, "hf")
    os.makedirs(hfd, exist_ok=True)
    w = make_weights(g, moe)
    ids = build_prompt(g)
    n = int((ids == IMAGE_PAD).sum())
    rows = C.f32(g, (n, H))
    deep = [C.f32(g, (n, H)) for _ in DEEPSTACK]
    pos = hf_positions(ids)
    img_t = np.nonzero(ids == IMAGE_PAD)[0]
    s = img_t[0]
    gw = GRID[2] // MERGE
    for j, t in enumerate(img_t):
        assert tuple(pos[:, t]) == (s, s + j // gw, s + j % gw)
    assert pos[0, img_t[-1] + 1] == s + max(GRID[1], GRID[2]) // MERGE
    w64 = {k: C.t64(v) for k, v in w.items()}
    margins = []
    logits = forward(w64, ids, rows, pos, moe, deep, margins=margins)
    logits_nd = forward(w64, ids, rows, pos, moe, None)
    logits_hf_angles = forward(w64, ids, rows, pos, moe, deep, f32_angles=False)
    pos1d = np.repeat(np.arange(len(ids))[None], 3, axis=0)
    swapped = pos[[0, 2, 1]]
    controls = {
        "no_deepstack": max_abs(logits, logits_nd),
        "positions_1d_arange": max_abs(logits, forward(w64, ids, rows, pos1d, moe, deep)),
        "positions_h_w_swapped": max_abs(logits, forward(w64, ids, rows, swapped, moe, deep)),
        "deepstack_rows_swapped_0_1": max_abs(logits, forward(w64, ids, rows, pos, moe, deep[::-1])),
        "float64_angles_vs_float32_angles": max_abs(logits, logits_hf_angles),
    }
    if moe:
        controls["expert_gate_up_halves_swapped"] = max_abs(logits, forward(
            {**w64, **{k: torch.cat([v[..., MOE_FF:], v[..., :MOE_FF]], -1) for k, v in w64.items()
                       if k.endswith("gate_up_proj")}}, ids, rows, pos, moe, deep))

    C.save_safetensors(os.path.join(hfd, "model.safetensors"), w, metadata={"format": "pt"})
    with open(os.path.join(hfd, "config.json"), "w") as f:
        json.dump(hf_config(moe), f, indent=1, sort_keys=True)
    C.save_npy(d, "tokens", ids.astype(np.int32))
    C.save_npy(d, "positions", pos.astype(np.int32))
    C.save_npy(d, "image_embeddings", rows)
    for j, a in enumerate(deep):
        C.save_npy(d, f"deepstack_{j}", a)
    C.save_npy(d, "logits", logits.astype(np.float32))
    C.save_npy(d, "logits_no_deepstack", logits_nd.astype(np.float32))
    T = len(ids)
    meta = {
        "what": f"Tiny HF {'Qwen3-VL-MoE' if moe else 'Qwen3-VL'} checkpoint (text model only; NO model.visual.* "
                "tensors) + float64 logits (stored float32) of its text model for a prompt with one picture given "
                "as precomputed soft-token rows, interleaved MRoPE at 3-D positions, DeepStack after layers 0 and 1.",
        "seed": seed,
        "files": {
            "hf/config.json": "HF config (released-checkpoint spelling, transformers 4.57)",
            "hf/model.safetensors": "float32, HF names, released layouts (see hf_tensors)",
            "tokens.npy": ["int32", [T]], "positions.npy": ["int32", [3, T], "rows (t, h, w)"],
            "image_embeddings.npy": ["float32", [n, H], "replace the embeddings at the image pads, in order"],
            "deepstack_0.npy": ["float32", [n, H], "added at image pads after decoder layer 0"],
            "deepstack_1.npy": ["float32", [n, H], "added at image pads after decoder layer 1"],
            "logits.npy": ["float32", [T, V], "with deepstack"],
            "logits_no_deepstack.npy": ["float32", [T, V]],
        },
        "hf_tensors": {k: list(v.shape) for k, v in sorted(w.items())},
        "token_ids": {"where": "config.json ROOT (not text_config)", "vision_start_token_id": VISION_START,
                      "vision_end_token_id": VISION_END, "image_token_id": IMAGE_PAD, "video_token_id": VIDEO_PAD,
                      "real_values": {"vision_start": 151652, "vision_end": 151653, "image_pad": 151655,
                                      "video_pad": 151656}},
        "image_grid_thw": list(GRID), "spatial_merge_size": MERGE, "n_image_tokens": n,
        "positions_rule": "counter p from 0; a text token (vision_start / vision_end included) gets (p, p, p), p += 1; "
                          "the picture (merged gh x gw, row-major) starting at s = p: token (r, c) gets "
                          "(s, s + r, s + c); then p = s + max(gh, gw). rope_deltas = max(pos) + 1 - T = "
                          f"{int(pos.max()) + 1 - T}; decode continues at max + 1 on all rows.",
        "rope": {"theta": THETA, "mrope_section": SECTION, "interleaved": True,
                 "lanes (head_dim/2 = 4)": "lane 0 T, 1 H, 2 W, 3 T (H: slice(1, 3*s[1], 3), W: slice(2, 3*s[2], 3))",
                 "angles": "float32 inv_freq and products (MaxText / HF both form them in float32); cos/sin and "
                           "everything after in float64",
                 "config_spelling": "released configs: text_config.rope_scaling = {mrope_interleaved, mrope_section, "
                                    "rope_type: default} and text_config.rope_theta (this fixture). transformers v5 "
                                    "(and MaxText hf_model_configs.py) spell it text_config.rope_parameters = "
                                    "{mrope_interleaved, mrope_section, rope_theta, rope_type}. A loader should "
                                    "accept both."},
        "maxtext_config": {
            "decoder_block": "qwen3_moe" if moe else "qwen3", "base_emb_dim": H, "base_num_query_heads": NQ,
            "base_num_kv_heads": NKV, "head_dim": HD, "base_num_decoder_layers": L, "vocab_size": V,
            "normalization_layer_epsilon": EPS, "use_qk_norm": True, "rope_max_timescale": THETA,
            "mlp_activations": ["silu", "linear"], "logits_via_embedding": False, "use_mrope": True,
            "mrope_section": SECTION, "deepstack_visual_indexes_for_vit": DEEPSTACK, "scan_layers": False,
            **({"num_experts": E, "num_experts_per_tok": TOPK, "base_moe_mlp_dim": MOE_FF, "base_mlp_dim": MOE_FF,
                "norm_topk_prob": True} if moe else {"base_mlp_dim": FF}),
        },
        "math": "x = embed[ids]; x[image pads] = image_embeddings rows; per layer: h = RMS(x)*w_in; q/k/v proj; "
                "q_norm/k_norm = RMSNorm over head_dim per head (plain weight); interleaved MRoPE (rotate-half); GQA "
                "(query head i uses kv head i // 2); scale head_dim^-0.5; causal over the whole sequence (image "
                "tokens too); o_proj; residual; h = RMS(x)*w_post; " + (
                    "router softmax(h @ gate.T) over 4 experts, top-2, renormalised; expert e: gu = h @ "
                    "gate_up_proj[e] ([H, 2I]); silu(gu[:, :I]) * gu[:, I:] @ down_proj[e] ([I, H])"
                    if moe else "down(silu(gate(h)) * up(h))") +
                "; residual; after layer j in {0, 1}: x[image pads] += deepstack_j rows; final RMSNorm; lm_head "
                "(untied). RMSNorm: x * rsqrt(mean(x^2) + 1e-6) * w.",
        "controls_max_abs_logit_change": controls,
        "max_abs_logit": float(np.abs(logits).max()),
        "surprises": [
            "rope key: released configs use rope_scaling + rope_theta; transformers v5 / MaxText use rope_parameters.",
            "token ids live at the config ROOT, not in text_config.",
            "vision_config.model_type in released configs equals the root model_type (qwen3_vl / qwen3_vl_moe); v5 "
            "renames to qwen3_vl_vision / qwen3_vl_moe_vision (HF overrides the old value on load).",
            "MoE experts are FUSED 3-D tensors with no '.weight' suffix; released layout gate_up_proj [E, H, 2I] "
            "(gate = first I columns, up = last I) and down_proj [E, I, H], i.e. x @ W (not W @ x); transformers "
            "v5 transposes both (1, 2) on load. MaxText: (wi_0, wi_1) = split(gate_up_proj, 2, axis=-1), wo = "
            "down_proj as is.",
            "MoE text config key is num_experts in released configs (num_local_experts in v5 / MaxText's copy).",
            "the released MoE config has tie_word_embeddings false at the root and true inside text_config; this "
            "fixture writes false in both and stores lm_head.weight.",
        ] + ([f"router top-2 margin (min over tokens, per layer): {margins}"] if moe else []),
    }
    C.save_meta(d, meta)
    return controls, margins


def main():
    for name, moe, seed in (("qwen3_vl_model", False, 4101), ("qwen3_vl_moe_model", True, 4102)):
        controls, margins = build(name, moe, seed)
        print(name, json.dumps(controls), margins)


if __name__ == "__main__":
    main()
