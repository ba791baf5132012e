"""A tiny Qwen3-Omni thinker (Qwen3OmniMoeForConditionalGeneration, model_type qwen3_omni_moe) as a Hugging Face
checkpoint, and the float64 logits MaxText would compute for a prompt that holds a sound clip and a picture: the
audio tower's soft tokens replace the <|audio_pad|> embeddings, the vision tower's replace the <|image_pad|>
embeddings (plus deepstack), and the Qwen3-MoE text decoder runs with interleaved MRoPE at the real 3-D positions.
Independent of the C++ library: no C++ code was read to write this.

Sources read (MaxText commit in meta.json "maxtext_commit", e591f30cbbf217ed67ef71263ec0538239f9c3b8):
  src/maxtext/multimodal/processor_qwen3_omni.py: QWEN_SPECIAL_TOKEN_CONFIGS / QwenTokens (ids by model_name prefix:
    qwen3-omni-30b-a3b -> audio_start 151669, audio_end 151670, audio_pad 151675, vision_start 151652, vision_end
    151653, image_pad 151655, video_pad 151656; a tiny vocabulary cannot be expressed there, so this fixture's ids
    100..106 live in config.json only), pre_process_audio_qwen3_omni, preprocess_mm_data_qwen3_omni (audio only via
    use_audio_in_video; audio_lengths = _get_feat_extract_output_lengths(sum(audio_mask)) = TOKEN counts),
    add_extra_tokens_for_qwen3_omni (one <|audio_pad|> -> audio_lengths[i] pads, one <|image_pad|> -> t*h*w/4),
    _get_feat_extract_output_lengths, get_llm_pos_ids_for_vision, get_rope_index (the audio-only branch applies
    _get_feat_extract_output_lengths to audio_lengths AGAIN; with no image/video grid the function returns text
    positions before looking at audio at all), get_mm_offsets_qwen3_omni.
  src/maxtext/multimodal/processor.py: get_bidirectional_mask_audio (tokens == audio_pad, model qwen3-omni-30b-a3b
    only), get_bidirectional_mask_vision (qwen3_moe: tokens == image_pad).
  src/maxtext/multimodal/utils.py: merge_mm_embeddings / _merge_mm_embeddings_inner (cumsum of the mask, gather,
    `where`: the embedding at a pad is REPLACED by the next soft-token row).
  src/maxtext/models/models.py: Transformer.__call__ (vision_encoder -> image_embeddings + deepstack list;
    audio_encoder(encoder_audios) -> audio_embeddings; audio_masks = get_bidirectional_mask_audio(tokens)).
  src/maxtext/layers/decoders.py: Decoder._apply_embedding (image, then video, then audio merge_mm_embeddings right
    after the token lookup; audio only for model_name qwen3-omni-30b-a3b and use_audio), deepstack_process (after
    layer j < len(deepstack): h += deepstack_j[cumsum(image mask) - 1] * mask; the IMAGE mask, never the audio one),
    the unscanned layer loop (QWEN3_MOE -> qwen3.Qwen3MoeDecoderLayer; no bidirectional mask: causal attention over
    the whole sequence, audio and image tokens included).
  src/maxtext/models/qwen3.py: AttentionWithNorm (pre_self_attention_layer_norm, Attention with use_qk_norm,
    query_pre_attn_scalar = head_dim^-0.5, use_mrope / mrope_section, post_self_attention_layer_norm),
    Qwen3MoeDecoderLayer (x + attn; h + RoutedMoE(moe_mlp_dim)).
  src/maxtext/layers/attentions.py (use_mrope -> Qwen3OmniMoeThinkerTextRotaryEmbedding),
  src/maxtext/layers/embeddings.py: Qwen3OmniMoeThinkerTextRotaryEmbedding (__call__, _apply_interleaved_mrope:
    freqs_s = pos_s * (1 / timescale) in float32; lanes offset::3 below 3 * mrope_section[s] take row s).
  src/maxtext/inference/decode.py (get_rope_index(audio_lengths=processor_outputs.audio_lengths), prefill with
    positions + mrope deltas; generated token k at max(positions) + 1 + k on all rows).
  src/maxtext/configs/models/qwen3-omni-30b-a3b.yml (decoder_block qwen3_moe, use_mrope, mrope_section [24, 20, 20],
    position_id_per_seconds 13, base_mlp_dim = base_moe_mlp_dim = 768, audio / vision keys).
  src/maxtext/checkpoint_conversion/utils/param_mapping.py: QWEN3_OMNI_MOE_MAXTEXT_TO_HF_PARAM_MAPPING (the text
    mapping is QWEN_MAXTEXT_TO_HF_PARAM_MAPPING with "thinker." prefixed: per-expert
    thinker.model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight), QWEN_MAXTEXT_TO_HF_PARAM_HOOK_FN
    (kernels .T.reshape, expert kernels transposed), the audio and vision hooks.
Hugging Face transformers (code index), models/qwen3_omni_moe/modeling_qwen3_omni_moe.py and
  configuration_qwen3_omni_moe.py: Qwen3OmniMoePreTrainedModelForConditionalGeneration.get_rope_index (audio branch:
  audio_len = _get_feat_extract_output_lengths(audio_seqlens[i]) with audio_seqlens = feature_attention_mask.sum =
  FEATURE FRAMES, i.e. the formula once; text-only branch when no image/video grid), compute_3d_position_ids (decode:
  arange + rope_deltas), Qwen3OmniMoeThinkerForConditionalGeneration.forward (inputs_embeds.masked_scatter for audio,
  image, video; deepstack only at image/video positions), Qwen3OmniMoeThinkerTextModel (one causal mask,
  _deepstack_process), Qwen3OmniMoeThinkerTextRotaryEmbedding (recomposition_frequencies: always interleaved, reads
  only mrope_section), Qwen3OmniMoeThinkerTextAttention (q_norm / k_norm per head, head_dim from config, scaling
  head_dim^-0.5), Qwen3OmniMoeThinkerTextTopKRouter (softmax over all experts, top-k, renormalise), the fused
  Qwen3OmniMoeThinkerTextExperts (gate_up_proj [E, 2I, D], down_proj [E, D, I]) and conversion_mapping.py
  ("qwen3_omni_moe" = qwen2_moe's converter: per-expert gate_proj / up_proj / down_proj checkpoint tensors are
  stacked and gate|up concatenated at load time); the configs of the real checkpoint (rope_scaling keys
  interleaved / mrope_interleaved / mrope_section / rope_type / type, rope_theta, head_dim 128 with hidden 2048,
  position_id_per_seconds 13, per-expert tensor names in the published safetensors).

Imported (not modified), each an independent float64 re-statement:
  qwen3_omni_audio_reference.py: read_wav, log_mel, maxtext_pad, maxtext_encoder (MaxText audio tower, tanh GELU,
    per-chunk attention), hf_encoder (HF formulation), hf_to_maxtext, CFG (the audio fixture's tiny audio config);
  qwen3_vision_reference.py: maxtext_image (MaxText vision tower + projector + deepstack mergers), hf_forward,
    hf_weights, omni_hf_name, CFG (the qwen3_vision fixture's tiny vision config);
  qwen3_5_multimodal_reference.py: mrope3 (MaxText's interleaved MRoPE at 3-D positions), merge_maxtext,
    merge_hf, deepstack_maxtext, deepstack_direct, pos_bt3;
  attention_reference.py (Attention with per-head RMS qk-norm), deepseek_reference.py (routed_moe: top-k of the raw
    gate logits, softmax over the k values, renormalised), qwen_family_reference.py (qwen3_moe_weights, and
    qwen3_moe_layer as a second check at 1-D positions).

The checkpoint reuses the audio fixture's tower (tests/fixtures/qwen3_omni_audio, output_dim 24) and the vision
fixture's tower (tests/fixtures/qwen3_vision, out_hidden_size 24) unchanged: the text hidden size is 24, so the
audio soft tokens are exactly that fixture's encoder_out_2.npy and the picture's rows are qwen3_vision's merged.npy /
deep_j.npy rows 0..11 (asserted). head_dim 8 with 4 heads gives 32 != hidden 24, as the real model (32 x 128 != 2048).

Math:
  1. Audio: audio.wav (= qwen3_omni_audio/audio_2.wav, 12345 samples) -> zero-padded to 16000 samples -> log-mel
     [128, 100] (features.npy) -> MaxText audio tower -> 13 rows [13, 24] (audio_embeddings.npy, float32).
  2. Picture: image_0.png (= qwen3_vision/image_0.png, grid (1, 6, 8)) -> pixel_values [48, 96] -> MaxText vision
     tower -> 12 rows (image_embeddings.npy) + deepstack_0/1.npy (mergers on blocks 0 and 2).
  3. Prompt ids: text (< 100) x4, audio_start, audio_pad x13, audio_end, text x3, vision_start, image_pad x12,
     vision_end, text x6.
  4. Positions [3, T]: counter p = 0; a text / special token gets (p, p, p), p += 1 -- audio_start, EVERY audio pad
     and audio_end included (audio is 1-D, text-like on all three rows); the run of image pads starts at s = p, its
     j-th token at (s, s + j // gw, s + j % gw) (gw = merged width 4, t index 0 for a picture), then p = s +
     max(gh, gw). decode: generated token k at max + 1 + k on all rows. Computed from MaxText's loop (as written and
     intended), HF's loop and this rule, all asserted equal (module text in meta "positions").
  5. Embeddings: e = embed[ids]; at audio pads e = audio rows in order; at image pads e = image rows (replaced).
  6. Decoder (MaxText qwen3_moe, unscanned), per layer: h = x + Attn(RMSNorm(x)): q = y Wq [D, N, hd], k, v likewise
     (GQA 4 / 2), per-head RMSNorm(q), RMSNorm(k) (scale [hd], eps 1e-6), interleaved MRoPE on q and k at the 3-D
     positions (rope_theta 1e6, mrope_section [2, 1, 1]: lanes 0..3 = T H W T, inverse frequencies 1, 1e6^-1/4,
     1e6^-1/2, 1e6^-3/4; float32 angles as MaxText forms them), q *= hd^-0.5, causal softmax, out [N, hd, D];
     out = h + MoE(RMSNorm(h)): router logits z = y Wg [D, 4], top-2 of z, softmax over the 2 values (= HF's softmax
     over all then renormalised top-2), expert e: (silu(y wi_0[e]) * (y wi_1[e])) wo[e]. After layer j (j = 0, 1):
     h[image pads] += deepstack_j rows. Final RMSNorm, logits = h Wout [D, V].

Writes tests/fixtures/qwen3_omni_mm_model/ (see meta.json "files").
Run: /usr/bin/python3 tests/reference/qwen3_omni_thinker_reference.py
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
import deepseek_reference as DR  # noqa: E402
import qwen3_5_multimodal_reference as QM  # noqa: E402
import qwen3_omni_audio_reference as QA  # noqa: E402
import qwen3_vision_reference as QV  # noqa: E402
import qwen_family_reference as QF  # noqa: E402
from common import FIXTURES, case_dir, f32, read_safetensors, rng, save_meta, save_npy, save_safetensors, t64  # noqa

F32 = np.float32
CASE = "qwen3_omni_mm_model"
AUDIO_DIR = os.path.join(FIXTURES, "qwen3_omni_audio")
VISION_DIR = os.path.join(FIXTURES, "qwen3_vision")
SEED = 7603

# token ids (tiny vocabulary; every other id < 100 is text)
AUDIO_START, AUDIO_END, AUDIO_PAD = 100, 101, 102
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 103, 104, 105, 106
TEXT_LIMIT = 100
POSITION_ID_PER_SECONDS = 13  # the real thinker config and MaxText's yml (HF's class default is 25); t index 0 here

# text model
V, D, L, N, K, H = 128, 24, 2, 4, 2, 8
F_DENSE, F_MOE, E, TOPK = 48, 16, 4, 2
EPS, THETA = 1e-6, 1000000.0
MROPE_SECTION = [2, 1, 1]
MERGE = 2
IMAGE_INDEX = 0  # qwen3_vision's image_0 (grid (1, 6, 8) -> 12 soft tokens, merged 3 x 4)
PREFIX, MIDDLE, TAIL = 4, 3, 6
GREEDY_STEPS = 4
ROUTING_MARGIN = 1e-3
GREEDY_MARGIN = 1e-2
CONTROL_MIN = 1.5e-2

HA = "thinker.audio_tower."
HT = "thinker.model."


def max_abs(a, b):
    return float((torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max())


def text_settings():
    return dict(D=D, N=N, K=K, H=H, F=F_DENSE, Fm=F_MOE, E=E, k=TOPK, eps=EPS, theta=THETA, V=V, L=L, score="",
                block="qwen3_moe", deepseek_name=False, norm_topk=True)


# ----------------------------------------------------------------------------------------------------------------
# Weights: MaxText tree of the text model, its HF names, and the towers of the two fixtures
# ----------------------------------------------------------------------------------------------------------------

def text_weights(g, c):
    w = {"token_embedder.embedding": f32(g, (V, D))}
    for i in range(L):
        w.update(QF.prefixed(QF.qwen3_moe_weights(g, c), f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (D,), 0.2, 1.0)
    w["decoder.logits_dense.kernel"] = f32(g, (D, V), 1.0 / math.sqrt(D))
    return w


def text_hf(w):
    """MaxText text tree -> HF thinker names (param_mapping: 'thinker.' + the Qwen3-MoE names, per-expert modules)."""
    c = lambda a: np.ascontiguousarray(a)  # noqa: E731
    o = {HT + "embed_tokens.weight": w["token_embedder.embedding"], HT + "norm.weight": w["decoder.decoder_norm.scale"],
         "thinker.lm_head.weight": c(w["decoder.logits_dense.kernel"].T)}
    for i in range(L):
        m, h = f"decoder.layers_{i}.", f"{HT}layers.{i}."
        o[h + "input_layernorm.weight"] = w[m + "pre_self_attention_layer_norm.scale"]
        o[h + "post_attention_layernorm.weight"] = w[m + "post_self_attention_layer_norm.scale"]
        for mt, hn, heads in (("query", "q_proj", N), ("key", "k_proj", K), ("value", "v_proj", K)):
            o[h + f"self_attn.{hn}.weight"] = c(w[m + f"self_attention.{mt}.kernel"].reshape(D, heads * H).T)
        o[h + "self_attn.o_proj.weight"] = c(w[m + "self_attention.out.kernel"].reshape(N * H, D).T)
        o[h + "self_attn.q_norm.weight"] = w[m + "self_attention.query_norm.scale"]
        o[h + "self_attn.k_norm.weight"] = w[m + "self_attention.key_norm.scale"]
        o[h + "mlp.gate.weight"] = c(w[m + "moe_block.gate.kernel"].T)
        for e in range(E):
            ex = h + f"mlp.experts.{e}."
            o[ex + "gate_proj.weight"] = c(w[m + "moe_block.wi_0"][e].T)
            o[ex + "up_proj.weight"] = c(w[m + "moe_block.wi_1"][e].T)
            o[ex + "down_proj.weight"] = c(w[m + "moe_block.wo"][e].T)
    return o


def text_maxtext(o):
    """The converter's HF -> MaxText direction (QWEN_MAXTEXT_TO_HF_PARAM_HOOK_FN: kernels .T.reshape(target), expert
    kernels transposed and stacked on a leading expert axis)."""
    c = lambda a: np.ascontiguousarray(a)  # noqa: E731
    w = {"token_embedder.embedding": o[HT + "embed_tokens.weight"], "decoder.decoder_norm.scale": o[HT + "norm.weight"],
         "decoder.logits_dense.kernel": c(o["thinker.lm_head.weight"].T)}
    for i in range(L):
        m, h = f"decoder.layers_{i}.", f"{HT}layers.{i}."
        w[m + "pre_self_attention_layer_norm.scale"] = o[h + "input_layernorm.weight"]
        w[m + "post_self_attention_layer_norm.scale"] = o[h + "post_attention_layernorm.weight"]
        for mt, hn, heads in (("query", "q_proj", N), ("key", "k_proj", K), ("value", "v_proj", K)):
            w[m + f"self_attention.{mt}.kernel"] = c(o[h + f"self_attn.{hn}.weight"].T.reshape(D, heads, H))
        w[m + "self_attention.out.kernel"] = c(o[h + "self_attn.o_proj.weight"].T.reshape(N, H, D))
        w[m + "self_attention.query_norm.scale"] = o[h + "self_attn.q_norm.weight"]
        w[m + "self_attention.key_norm.scale"] = o[h + "self_attn.k_norm.weight"]
        w[m + "moe_block.gate.kernel"] = c(o[h + "mlp.gate.weight"].T)
        for mt, hn in (("wi_0", "gate_proj"), ("wi_1", "up_proj"), ("wo", "down_proj")):
            w[m + "moe_block." + mt] = c(np.stack([o[h + f"mlp.experts.{e}.{hn}.weight"].T for e in range(E)]))
    return w


def audio_tower():
    """The audio fixture's tower: HF tensors (thinker.audio_tower.*) and the MaxText tree (checked equal to the
    fixture's model.safetensors through param_mapping's hooks)."""
    whf = read_safetensors(os.path.join(AUDIO_DIR, "hf", "model.safetensors"))
    assert all(k.startswith(HA) for k in whf)
    wmt = QA.hf_to_maxtext(whf, QA.CFG)
    stored = read_safetensors(os.path.join(AUDIO_DIR, "model.safetensors"))
    assert sorted(stored) == sorted(wmt) and all(np.array_equal(stored[k], wmt[k]) for k in wmt)
    with open(os.path.join(AUDIO_DIR, "hf", "config.json")) as f:
        ac = json.load(f)["thinker_config"]["audio_config"]
    assert ac["output_dim"] == D and ac["d_model"] == QA.CFG["d_model"]
    return whf, wmt, ac


def vision_tower():
    """The qwen3_vision fixture's tower: MaxText tree, its HF (Qwen3.5-style model.visual.*) tensors, and the same
    tensors under Qwen3-Omni's names (thinker.visual.*, merger_list.{j} / merger with ln_q, mlp.0, mlp.2)."""
    wmt = read_safetensors(os.path.join(VISION_DIR, "model.safetensors"))
    hf35 = read_safetensors(os.path.join(VISION_DIR, "hf", "model.safetensors"))
    mapped = QV.hf_weights(wmt, QV.CFG)
    assert sorted(mapped) == sorted(hf35) and all(np.array_equal(mapped[k], hf35[k]) for k in hf35)
    back = QV.hf_to_maxtext(hf35, QV.CFG)
    assert all(np.array_equal(back[k], wmt[k]) for k in wmt)
    omni = {QV.omni_hf_name(k): v for k, v in hf35.items()}
    assert len(omni) == len(hf35)
    return wmt, hf35, omni


def vision_config_omni():
    c = QV.CFG
    return {"model_type": "qwen3_omni_moe_vision_encoder", "depth": c["depth"], "hidden_size": c["hidden_size"],
            "hidden_act": "gelu_pytorch_tanh", "intermediate_size": c["intermediate_size"], "num_heads": c["num_heads"],
            "in_channels": c["in_channels"], "patch_size": c["patch_size"],
            "spatial_merge_size": c["spatial_merge_size"], "temporal_patch_size": c["temporal_patch_size"],
            "out_hidden_size": c["out_hidden_size"], "num_position_embeddings": c["num_position_embeddings"],
            "deepstack_visual_indexes": list(c["deepstack_visual_indexes"]), "initializer_range": 0.02}


def text_config():
    return {"model_type": "qwen3_omni_moe_text", "vocab_size": V, "hidden_size": D, "intermediate_size": F_DENSE,
            "moe_intermediate_size": F_MOE, "num_hidden_layers": L, "num_attention_heads": N,
            "num_key_value_heads": K, "head_dim": H, "hidden_act": "silu", "max_position_embeddings": 4096,
            "rms_norm_eps": EPS, "rope_theta": THETA,
            "rope_scaling": {"interleaved": True, "mrope_interleaved": True, "mrope_section": list(MROPE_SECTION),
                             "rope_type": "default", "type": "default"},
            "num_experts": E, "num_experts_per_tok": TOPK, "norm_topk_prob": True, "decoder_sparse_step": 1,
            "mlp_only_layers": [], "attention_bias": False, "attention_dropout": 0.0, "use_qk_norm": True,
            "tie_word_embeddings": False, "router_aux_loss_coef": 0.001, "output_router_logits": False,
            "sliding_window": None, "use_sliding_window": False, "use_cache": True, "initializer_range": 0.02,
            "shared_expert_intermediate_size": 0}


def hf_config(audio_cfg):
    return {"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "model_type": "qwen3_omni_moe",
            "enable_audio_output": False, "torch_dtype": "float32",
            "thinker_config": {
                "model_type": "qwen3_omni_moe_thinker", "audio_config": audio_cfg,
                "vision_config": vision_config_omni(), "text_config": text_config(),
                "audio_token_id": AUDIO_PAD, "audio_start_token_id": AUDIO_START, "audio_end_token_id": AUDIO_END,
                "image_token_id": IMAGE_PAD, "video_token_id": VIDEO_PAD, "vision_start_token_id": VISION_START,
                "vision_end_token_id": VISION_END, "position_id_per_seconds": POSITION_ID_PER_SECONDS,
                "seconds_per_chunk": 2, "initializer_range": 0.02, "tie_word_embeddings": False}}


def preprocessor_config():
    with open(os.path.join(AUDIO_DIR, "hf", "preprocessor_config.json")) as f:
        a = json.load(f)
    with open(os.path.join(VISION_DIR, "hf", "preprocessor_config.json")) as f:
        v = json.load(f)
    assert not set(a) & set(v)
    out = dict(a)
    out.update(v)
    return out


# ----------------------------------------------------------------------------------------------------------------
# 3-D positions: MaxText's loop, HF's loop, the per-token rule
# ----------------------------------------------------------------------------------------------------------------

def _rows(n, start):
    return np.tile(np.arange(n, dtype=np.int64) + start, (3, 1))


def _vision_rows(start, grid, t_scale=POSITION_ID_PER_SECONDS):
    t, h, w = grid
    gh, gw = h // MERGE, w // MERGE
    tt = np.repeat(np.arange(t, dtype=np.int64) * t_scale, gh * gw)
    hh = np.tile(np.repeat(np.arange(gh), gw), t)
    ww = np.tile(np.arange(gw), t * gh)
    return np.stack([tt, hh, ww]) + start


def maxtext_rope_index(ids, grids, audio_lengths, apply_formula=True):
    """processor_qwen3_omni.get_rope_index for one unpadded sequence with pictures and standalone audio.
    audio_lengths as decode.py passes them (token counts); apply_formula=True is the code as written
    (audio_len = _get_feat_extract_output_lengths(audio_lengths[i])), False the intended count (audio_lengths[i])."""
    toks = [int(v) for v in ids]
    if not grids:  # "Handle text-only case": no image / video grid -> cumsum positions, audio never looked at
        pos = _rows(len(toks), 0)
        return pos, {"audio_lens": [], "branch": "text-only (no image/video grid)"}
    starts = [i for i, v in enumerate(toks) if v == VISION_START]
    vision_after = [toks[i + 1] for i in starts]
    audio_nums = sum(v == AUDIO_START for v in toks)
    image_nums = sum(v == IMAGE_PAD for v in vision_after)
    assert not any(v == VIDEO_PAD for v in vision_after)
    parts, st, image_idx, audio_idx, used = [], 0, 0, 0, []
    remain_images, remain_audios = image_nums, audio_nums
    for _ in range(image_nums + audio_nums):
        st_idx = int(parts[-1].max()) + 1 if parts else 0
        ed_v = len(toks) + 1
        if IMAGE_PAD in toks and remain_images > 0:
            ed_v = toks.index(VISION_START, st) if VISION_START in toks[st:] else len(toks) + 1
        ed_a = len(toks) + 1
        if AUDIO_PAD in toks and remain_audios > 0:
            ed_a = toks.index(AUDIO_START, st) if AUDIO_START in toks[st:] else len(toks) + 1
        ed = min(ed_v, ed_a)
        text_len = ed - st
        if text_len > 0:
            parts.append(_rows(text_len, st_idx))
            st_idx += text_len
        parts.append(_rows(1, st_idx))  # bos (audio_start or vision_start)
        st_idx += 1
        if ed == ed_a:
            n = int(audio_lengths[audio_idx])
            alen = QA.token_count(n) if apply_formula else n
            used.append(alen)
            parts.append(_rows(alen, st_idx))
            st += text_len + 1 + alen + 1
            audio_idx += 1
            remain_audios -= 1
        else:
            assert toks[ed_v + 1] == IMAGE_PAD
            g = grids[image_idx]
            parts.append(_vision_rows(st_idx, g))
            st += text_len + 1 + int(np.prod(g)) // (MERGE * MERGE) + 1
            image_idx += 1
            remain_images -= 1
        st_idx = int(parts[-1].max()) + 1
        parts.append(_rows(1, st_idx))  # eos (audio_end or vision_end)
    if st < len(toks):
        st_idx = int(parts[-1].max()) + 1 if parts else 0
        parts.append(_rows(len(toks) - st, st_idx))
    pos = np.concatenate(parts, axis=1)
    assert pos.shape == (3, len(toks)), pos.shape
    return pos, {"audio_lens": used, "branch": "multimodal loop"}


def hf_rope_index(ids, grids, audio_seqlens):
    """transformers' get_rope_index: audio_seqlens are feature frames (feature_attention_mask.sum), the audio span is
    arange(_get_feat_extract_output_lengths(frames)); without an image / video grid, text positions (cumsum)."""
    toks = [int(v) for v in ids]
    if not grids:
        return _rows(len(toks), 0), {"audio_lens": [], "branch": "text-only (no image/video grid)"}
    vs = [i for i, v in enumerate(toks) if v == VISION_START]
    image_nums = sum(toks[i + 1] == IMAGE_PAD for i in vs)
    audio_nums = sum(v == AUDIO_START for v in toks)
    lst, st, ii, ai, used = [], 0, 0, 0, []
    ri, ra = image_nums, audio_nums
    for _ in range(image_nums + audio_nums):
        st_idx = int(lst[-1].max()) + 1 if lst else 0
        ed_v = toks.index(VISION_START, st) if (IMAGE_PAD in toks and ri > 0) else len(toks) + 1
        ed_a = toks.index(AUDIO_START, st) if (AUDIO_PAD in toks and ra > 0) else len(toks) + 1
        ed = min(ed_v, ed_a)
        text_len = ed - st
        if text_len != 0:
            lst.append(np.arange(text_len)[None].repeat(3, 0) + st_idx)
            st_idx += text_len
        lst.append(np.zeros((3, 1), dtype=np.int64) + st_idx)
        st_idx += 1
        if ed == ed_a:
            alen = QA.token_count(int(audio_seqlens[ai]))
            used.append(alen)
            lst.append(np.arange(alen)[None].repeat(3, 0) + st_idx)
            st += text_len + 2 + alen
            ai += 1
            ra -= 1
        else:
            t, h, w = grids[ii]
            gh, gw = h // MERGE, w // MERGE
            ti = (np.arange(t) * POSITION_ID_PER_SECONDS).repeat(gh * gw)
            hi = np.tile(np.arange(gh).repeat(gw), t)
            wi = np.tile(np.arange(gw), t * gh)
            lst.append(np.stack([ti, hi, wi]) + st_idx)
            st += text_len + 2 + t * h * w // (MERGE * MERGE)
            ii += 1
            ri -= 1
        st_idx = int(lst[-1].max()) + 1
        lst.append(np.zeros((3, 1), dtype=np.int64) + st_idx)
    if st < len(toks):
        st_idx = int(lst[-1].max()) + 1 if lst else 0
        lst.append(np.arange(len(toks) - st)[None].repeat(3, 0) + st_idx)
    return np.concatenate(lst, axis=1).astype(np.int64), {"audio_lens": used, "branch": "multimodal loop"}


def direct_positions(ids, grids, audio="text"):
    """The per-token rule (module docstring, step 4). audio="collapsed" (control): every audio pad shares one
    position (the span counted as a single placeholder)."""
    pos = np.zeros((3, len(ids)), dtype=np.int64)
    p, k, t = 0, 0, 0
    while t < len(ids):
        v = int(ids[t])
        if v == IMAGE_PAD:
            _, h, w = grids[k]
            gh, gw = h // MERGE, w // MERGE
            s = p
            for j in range(gh * gw):
                assert ids[t + j] == IMAGE_PAD
                pos[:, t + j] = (s, s + j // gw, s + j % gw)
            t += gh * gw
            p = s + max(gh, gw)
            k += 1
            continue
        if v == AUDIO_PAD and audio == "collapsed":
            n = 0
            while t + n < len(ids) and ids[t + n] == AUDIO_PAD:
                n += 1
            pos[:, t:t + n] = p
            p += 1
            t += n
            continue
        pos[:, t] = p
        p += 1
        t += 1
    return pos


# ----------------------------------------------------------------------------------------------------------------
# MaxText formulation of the thinker text side
# ----------------------------------------------------------------------------------------------------------------

def mt_layer(x, w, pos, rope, margins=None):
    a = {"heads": N, "kv_heads": K, "head_dim": H, "eps": EPS, "rope": rope, "q_scalar": H ** -0.5, "qk_norm": "rms"}
    att = AR.attention(AR.rms_norm(x, w["pre_self_attention_layer_norm.scale"], EPS), QF.sub(w, "self_attention."),
                       a, pos)
    h = x + att
    f = DR.routed_moe(AR.rms_norm(h, w["post_self_attention_layer_norm.scale"], EPS), QF.sub(w, "moe_block."),
                      text_settings(), margins)
    return h + f


def mt_decoder(x, w64, pos, deep=None, img_mask=None, margins=None, f32_angles=True, deep_fn=QM.deepstack_maxtext):
    """x [1, T, D] merged embeddings, pos [1, T, 3] -> logits [1, T, V]."""
    rope = QM.mrope3(H, THETA, MROPE_SECTION, f32_angles)
    for i in range(L):
        x = mt_layer(x, QF.sub(w64, f"decoder.layers_{i}."), pos, rope, margins)
        if deep is not None and i < len(deep):
            x = deep_fn(x, img_mask, deep[i])
    x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], EPS)
    return x @ w64["decoder.logits_dense.kernel"]


def mt_embed(w64, ids, audio_rows, image_rows):
    """Token lookup, then merge_mm_embeddings for the image pads and the audio pads (Decoder._apply_embedding)."""
    t = torch.from_numpy(np.asarray(ids)[None]).long()
    x = w64["token_embedder.embedding"][t]
    if image_rows is not None:
        x = QM.merge_maxtext(x, image_rows, t == IMAGE_PAD)
    if audio_rows is not None:
        x = QM.merge_maxtext(x, audio_rows, t == AUDIO_PAD)
    return x


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face formulation (Qwen3OmniMoeThinkerForConditionalGeneration.forward on HF names, fused experts)
# ----------------------------------------------------------------------------------------------------------------

def hf_thinker_logits(hc, o64, ids, audio_rows, image_rows, deep_rows, pos3t):
    tc = hc["thinker_config"]["text_config"]
    hd = tc["head_dim"]
    nq, nkv, eps = tc["num_attention_heads"], tc["num_key_value_heads"], tc["rms_norm_eps"]
    sec = tc["rope_scaling"]["mrope_section"]
    ids_t = torch.from_numpy(np.asarray(ids)).long()
    T = len(ids)
    emb = o64[HT + "embed_tokens.weight"][ids_t].clone()
    amask = ids_t == hc["thinker_config"]["audio_token_id"]
    imask = ids_t == hc["thinker_config"]["image_token_id"]
    if audio_rows is not None:
        emb = emb.masked_scatter(amask[:, None].expand_as(emb), audio_rows)
    if image_rows is not None:
        emb = emb.masked_scatter(imask[:, None].expand_as(emb), image_rows)
    # rotary: inv_freq over head_dim, freqs per row, recomposition_frequencies (interleaved), cat
    inv = 1.0 / (tc["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    p = torch.from_numpy(np.asarray(pos3t, dtype=np.float64))
    freqs = p[:, :, None] * inv[None, None, :]
    cos_r, sin_r = freqs.cos(), freqs.sin()

    def recompose(fq):
        out = fq[0].clone()
        for dim, offset in ((1, 1), (2, 2)):
            idx = slice(offset, sec[dim] * 3, 3)
            out[..., idx] = fq[dim, ..., idx]
        return torch.cat((out, out), dim=-1)
    cos, sin = recompose(cos_r)[None], recompose(sin_r)[None]  # [1, T, hd]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

    causal = torch.full((T, T), float("-inf")).triu(1)
    hs = emb
    for i in range(tc["num_hidden_layers"]):
        pre = f"{HT}layers.{i}."
        res = hs
        y = rms(hs, o64[pre + "input_layernorm.weight"])
        q = rms(F.linear(y, o64[pre + "self_attn.q_proj.weight"]).view(T, -1, hd), o64[pre + "self_attn.q_norm.weight"])
        k = rms(F.linear(y, o64[pre + "self_attn.k_proj.weight"]).view(T, -1, hd), o64[pre + "self_attn.k_norm.weight"])
        v = F.linear(y, o64[pre + "self_attn.v_proj.weight"]).view(T, -1, hd)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, T, hd]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nq // nkv, dim=0)
        v = v.repeat_interleave(nq // nkv, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) * hd ** -0.5 + causal, dim=-1) @ v
        hs = res + F.linear(att.transpose(0, 1).reshape(T, -1), o64[pre + "self_attn.o_proj.weight"])
        res = hs
        y = rms(hs, o64[pre + "post_attention_layernorm.weight"])
        probs = torch.softmax(F.linear(y, o64[pre + "mlp.gate.weight"]), dim=-1)
        top_v, top_i = torch.topk(probs, tc["num_experts_per_tok"], dim=-1)
        if tc["norm_topk_prob"]:
            top_v = top_v / top_v.sum(-1, keepdim=True)
        # fused experts as transformers builds them at load time (conversion_mapping: gate | up on dim 1)
        gate_up = torch.stack([torch.cat([o64[pre + f"mlp.experts.{e}.gate_proj.weight"],
                                          o64[pre + f"mlp.experts.{e}.up_proj.weight"]], dim=0)
                               for e in range(tc["num_experts"])])
        down = torch.stack([o64[pre + f"mlp.experts.{e}.down_proj.weight"] for e in range(tc["num_experts"])])
        out = torch.zeros_like(y)
        for e in range(tc["num_experts"]):
            tok, slot = torch.where(top_i == e)
            if len(tok) == 0:
                continue
            gte, up = F.linear(y[tok], gate_up[e]).chunk(2, dim=-1)
            cur = F.linear(F.silu(gte) * up, down[e]) * top_v[tok, slot, None]
            out.index_add_(0, tok, cur)
        hs = res + out
        if deep_rows is not None and i < len(deep_rows):
            hs = hs.clone()
            hs[imask] = hs[imask] + deep_rows[i]
    hs = rms(hs, o64[HT + "norm.weight"])
    return F.linear(hs, o64["thinker.lm_head.weight"])


# ----------------------------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------------------------

def audio_inputs(wmt, whf):
    x = QA.read_wav(os.path.join(AUDIO_DIR, "audio_2.wav"))
    feats = QA.log_mel(QA.maxtext_pad(x)).astype(F32)
    stored = np.load(os.path.join(AUDIO_DIR, "features_2.npy"))
    assert np.array_equal(feats, stored)
    y = QA.maxtext_encoder(wmt, feats, QA.CFG)
    rows = y.numpy().astype(F32)
    assert np.array_equal(rows, np.load(os.path.join(AUDIO_DIR, "encoder_out_2.npy")))
    cross = max_abs(QA.hf_encoder(whf, feats, QA.CFG, act="tanh", n_window_infer=100), y)
    assert cross < 1e-12, cross
    rows_erf = QA.hf_encoder(whf, feats, QA.CFG, act="erf", n_window_infer=100).numpy().astype(F32)
    info = {"samples": len(x), "padded_samples": len(QA.maxtext_pad(x)), "frames": feats.shape[1],
            "tokens": rows.shape[0], "hf_processor_frames_unpadded": len(x) // 160,
            "hf_processor_tokens_unpadded": QA.token_count(len(x) // 160),
            "maxtext_vs_hf_formulation_tanh_window100_max_abs": cross}
    return x, feats, rows, rows_erf, info


def vision_inputs(vw, hf35):
    from PIL import Image
    grid = tuple(int(v) for v in np.load(os.path.join(VISION_DIR, "grid_thw.npy"))[IMAGE_INDEX])
    assert grid == QV.GRIDS[IMAGE_INDEX]
    t, h, w_ = grid
    d = QV.dims(QV.CFG)
    C, tp, p = d["C"], d["tp"], d["p"]
    pv_all = np.load(os.path.join(VISION_DIR, "pixel_values.npy"))
    off = sum(int(np.prod(g)) for g in QV.GRIDS[:IMAGE_INDEX])
    pv = pv_all[off:off + t * h * w_]
    pv5 = pv.reshape(1, C, tp * t, p * h, p * w_)
    assert np.array_equal(pv5, np.load(os.path.join(VISION_DIR, f"pixel_values_maxtext_{IMAGE_INDEX}.npy")))
    u8 = np.asarray(Image.open(os.path.join(VISION_DIR, f"image_{IMAGE_INDEX}.png")).convert("RGB"))
    again, g2 = QV.image_to_pixel_values(QV.normalize(u8, QV.MEAN, QV.STD), p, tp, d["m"])
    assert g2 == grid and np.array_equal(again, pv)
    W = {k: t64(v) for k, v in vw.items()}
    out = QV.maxtext_image(W, t64(pv5), grid, QV.CFG)
    out_exact = QV.maxtext_image(W, t64(pv5), grid, QV.CFG, pos_bf16=False)
    n = t * h * w_ // (MERGE * MERGE)
    moff = off // (MERGE * MERGE)
    img = out["merged"].numpy().astype(F32)
    deep = [out[f"deep_{j}"].numpy().astype(F32) for j in range(len(QV.CFG["deepstack_visual_indexes"]))]
    assert np.array_equal(img, np.load(os.path.join(VISION_DIR, "merged.npy"))[moff:moff + n])
    for j, dj in enumerate(deep):
        assert np.array_equal(dj, np.load(os.path.join(VISION_DIR, f"deep_{j}.npy"))[moff:moff + n])
    hf = QV.hf_forward({k: t64(v) for k, v in hf35.items()}, t64(pv_all), QV.CFG, merger_act="tanh")
    cross = max(max_abs(hf["merged"][moff:moff + n], out_exact["merged"]),
                *[max_abs(hf[f"deep_{j}"][moff:moff + n], out_exact[f"deep_{j}"]) for j in range(len(deep))])
    assert cross < 1e-12, cross
    hf_erf = QV.hf_forward({k: t64(v) for k, v in hf35.items()}, t64(pv_all), QV.CFG, merger_act="none")
    img_erf = hf_erf["merged"][moff:moff + n].numpy().astype(F32)
    deep_erf = [hf_erf[f"deep_{j}"][moff:moff + n].numpy().astype(F32) for j in range(len(deep))]
    unrounded = (out_exact["merged"].numpy().astype(F32),
                 [out_exact[f"deep_{j}"].numpy().astype(F32) for j in range(len(deep))])
    return grid, pv, img, deep, (img_erf, deep_erf), unrounded, cross


def build_prompt(g, n_audio, n_image, with_image=True):
    def text(n):
        return [int(v) for v in g.integers(0, TEXT_LIMIT, size=n)]
    pre, mid, tail = text(PREFIX), text(MIDDLE), text(TAIL)
    ids = pre + [AUDIO_START] + [AUDIO_PAD] * n_audio + [AUDIO_END] + mid
    audio_only = ids + tail
    ids = ids + [VISION_START] + [IMAGE_PAD] * n_image + [VISION_END] + tail
    return np.asarray(ids, dtype=np.int32), np.asarray(audio_only, dtype=np.int32)


# ----------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------

def main():
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    c = text_settings()

    # ---- towers and their inputs (both fixtures' weights, unchanged)
    a_hf, a_mt, audio_cfg = audio_tower()
    wav, feats, audio_rows_np, audio_rows_erf_np, audio_info = audio_inputs(a_mt, a_hf)
    vw, v_hf35, v_omni = vision_tower()
    grid, pv, img_np, deep_np, (img_erf_np, deep_erf_np), (img_unr_np, deep_unr_np), vision_cross = \
        vision_inputs(vw, v_hf35)
    n_audio, n_image = audio_rows_np.shape[0], img_np.shape[0]
    audio_rows, img = t64(audio_rows_np), t64(img_np)
    deep = [t64(x) for x in deep_np]
    grids = [grid]
    hc = hf_config(audio_cfg)

    for attempt in range(400):
        g = rng(SEED + attempt)
        w = text_weights(g, c)
        o_text = text_hf(w)
        back = text_maxtext(o_text)
        assert sorted(back) == sorted(w) and all(np.array_equal(back[k], w[k]) for k in w)
        w64 = QF.to64(w)
        ids, ids_ao = build_prompt(g, n_audio, n_image)
        T = len(ids)

        # positions, several ways
        pos_mt, info_mt = maxtext_rope_index(ids, grids, [n_audio], apply_formula=True)   # as written
        pos_mt_i, info_mt_i = maxtext_rope_index(ids, grids, [n_audio], apply_formula=False)  # intended
        pos_hf, info_hf = hf_rope_index(ids, grids, [feats.shape[1]])
        pos_hf_unp, info_hf_unp = hf_rope_index(ids, grids, [len(wav) // 160])  # an HF processor's 77 frames
        pos = direct_positions(ids, grids)
        for other in (pos_mt, pos_mt_i, pos_hf, pos_hf_unp):
            assert np.array_equal(other, pos)
        pos_ao = direct_positions(ids_ao, [])
        assert np.array_equal(pos_ao, _rows(len(ids_ao), 0))
        assert np.array_equal(maxtext_rope_index(ids_ao, [], [n_audio])[0], pos_ao)
        assert np.array_equal(hf_rope_index(ids_ao, [], [feats.shape[1]])[0], pos_ao)
        # ... and had MaxText taken the multimodal loop for the audio-only prompt (a grid given), the same numbers
        assert np.array_equal(maxtext_rope_index(ids_ao, [(1, 2, 2)], [n_audio])[0], pos_ao)

        imask = torch.from_numpy(ids[None] == IMAGE_PAD)
        emb = mt_embed(w64, ids, audio_rows, img)
        text_emb = mt_embed(w64, ids, None, None)
        margins = []
        logits = mt_decoder(emb, w64, QM.pos_bt3(pos), deep, imask, margins)
        logits_ds2 = mt_decoder(emb, w64, QM.pos_bt3(pos), deep, imask, deep_fn=QM.deepstack_direct)
        assert max_abs(logits, logits_ds2) < 1e-13
        emb_ao = mt_embed(w64, ids_ao, audio_rows, None)
        logits_ao = mt_decoder(emb_ao, w64, QM.pos_bt3(pos_ao), margins=margins)

        # greedy decode: generated token k at max + 1 + k on all rows
        seq, pos_seq, greedy, gaps, steps = ids.copy(), pos.copy(), [], [], []
        last = logits[0, -1]
        for k in range(GREEDY_STEPS):
            srt = torch.sort(last, descending=True).values
            gaps.append(float(srt[0] - srt[1]))
            tok = int(torch.argmax(last))
            greedy.append(tok)
            seq = np.append(seq, np.int32(tok))
            pos_seq = np.concatenate([pos_seq, np.full((3, 1), int(pos.max()) + 1 + k)], axis=1)
            m_ext = torch.from_numpy(seq[None] == IMAGE_PAD)
            full = mt_decoder(mt_embed(w64, seq, audio_rows, img), w64, QM.pos_bt3(pos_seq), deep, m_ext, margins)
            assert max_abs(full[:, :T], logits) < 1e-12
            last = full[0, -1]
            steps.append(last)
        if min(margins) < ROUTING_MARGIN or min(gaps) < GREEDY_MARGIN or max(greedy) >= TEXT_LIMIT:
            continue
        break
    else:
        raise RuntimeError("no seed with clear routing / greedy decisions")
    decode_logits = torch.stack(steps)
    decode_positions = np.asarray([int(pos.max()) + 1 + k for k in range(GREEDY_STEPS)], dtype=np.int32)
    delta = int(pos.max()) + 1 - T

    # ---- second formulations
    o_all = dict(o_text)
    o_all.update(a_hf)
    o_all.update(v_omni)
    o64 = QF.to64(o_all)
    logits_f64 = mt_decoder(emb, w64, QM.pos_bt3(pos), deep, imask, f32_angles=False)
    hf_logits = hf_thinker_logits(hc, o64, ids, audio_rows, img, deep, pos)
    hf_diff_f64 = max_abs(hf_logits, logits_f64[0])
    assert hf_diff_f64 < 1e-10, hf_diff_f64
    hf_diff_f32 = max_abs(hf_logits, logits[0])
    hf_ao = hf_thinker_logits(hc, o64, ids_ao, audio_rows, None, None, pos_ao)
    hf_ao_diff = max_abs(hf_ao, logits_ao[0])
    # qwen_family_reference's qwen3_moe layer (1-D RoPE) on the audio-only prompt (positions are 1-D there)
    x = emb_ao
    p1 = np.arange(len(ids_ao))[None]
    for i in range(L):
        x = QF.qwen3_moe_layer(x, QF.sub(w64, f"decoder.layers_{i}."), c, p1)[0]
    qf_logits = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], EPS) @ w64["decoder.logits_dense.kernel"]
    qf_diff = max_abs(qf_logits, logits_ao)
    assert qf_diff < 1e-5, qf_diff

    # ---- controls
    top = float(logits.abs().max())

    def ctl(alt, ref=logits):
        dd = max_abs(alt, ref)
        return {"max_abs_diff_logits": dd, "relative_to_max_abs_logits": dd / top}

    seq_pos = _rows(T, 0)
    collapsed = direct_positions(ids, grids, audio="collapsed")
    controls = {
        "a_audio_not_merged_text_embeddings_at_pads": ctl(mt_decoder(mt_embed(w64, ids, None, img), w64,
                                                                     QM.pos_bt3(pos), deep, imask)),
        "b_image_not_merged": ctl(mt_decoder(mt_embed(w64, ids, audio_rows, None), w64, QM.pos_bt3(pos), deep,
                                             imask)),
        "c_deepstack_omitted": ctl(mt_decoder(emb, w64, QM.pos_bt3(pos))),
        "d_positions_plain_1d_sequence_index_no_mrope": ctl(mt_decoder(emb, w64, QM.pos_bt3(seq_pos), deep, imask)),
        "e_audio_span_collapsed_to_one_position": ctl(mt_decoder(emb, w64, QM.pos_bt3(collapsed), deep, imask)),
        "f_image_height_width_rows_swapped": ctl(mt_decoder(emb, w64, QM.pos_bt3(pos[[0, 2, 1]]), deep, imask)),
    }
    # g: decode positions T + k instead of max + 1 + k
    seq_g, pos_g, alt = ids.copy(), pos.copy(), []
    for k in range(GREEDY_STEPS):
        seq_g = np.append(seq_g, np.int32(greedy[k]))
        pos_g = np.concatenate([pos_g, np.full((3, 1), T + k)], axis=1)
        m_ext = torch.from_numpy(seq_g[None] == IMAGE_PAD)
        alt.append(mt_decoder(mt_embed(w64, seq_g, audio_rows, img), w64, QM.pos_bt3(pos_g), deep, m_ext)[0, -1])
    dd = max_abs(torch.stack(alt), decode_logits)
    controls["g_decode_positions_T_plus_k_instead_of_max_plus_1_plus_k"] = {
        "max_abs_diff_decode_logits": dd, "relative_to_max_abs_decode_logits": dd / float(decode_logits.abs().max())}
    for name in ("a_audio_not_merged_text_embeddings_at_pads", "b_image_not_merged", "c_deepstack_omitted",
                 "d_positions_plain_1d_sequence_index_no_mrope", "e_audio_span_collapsed_to_one_position",
                 "g_decode_positions_T_plus_k_instead_of_max_plus_1_plus_k"):
        v = controls[name]
        assert min(x for k, x in v.items() if k.startswith("max_abs")) > CONTROL_MIN, (name, v)
    # zero controls: the audio-length bookkeeping never moves a position
    zero_controls = {
        "maxtext_get_rope_index_as_written_formula_twice_audio_len_%d" % info_mt["audio_lens"][0]:
            max_abs(mt_decoder(emb, w64, QM.pos_bt3(pos_mt), deep, imask), logits),
        "hf_get_rope_index_fed_unpadded_77_frames_audio_len_%d" % info_hf_unp["audio_lens"][0]:
            max_abs(mt_decoder(emb, w64, QM.pos_bt3(pos_hf_unp), deep, imask), logits),
        "audio_only_prompt_positions_plain_1d_vs_mrope_rows": max_abs(
            mt_decoder(emb_ao, w64, np.arange(len(ids_ao))[None]), logits_ao),
    }
    assert all(v == 0.0 for v in zero_controls.values()), zero_controls
    top_ao = float(logits_ao.abs().max())
    controls_audio_only = {
        "a_audio_not_merged": max_abs(mt_decoder(mt_embed(w64, ids_ao, None, None), w64, QM.pos_bt3(pos_ao)),
                                      logits_ao),
        "h_hf_exact_gelu_audio_encoder_instead_of_maxtext_tanh": max_abs(
            mt_decoder(mt_embed(w64, ids_ao, t64(audio_rows_erf_np), None), w64, QM.pos_bt3(pos_ao)), logits_ao),
        "max_abs_logits_audio_only": top_ao,
    }
    assert controls_audio_only["a_audio_not_merged"] > CONTROL_MIN
    info = {
        "h_hf_exact_gelu_audio_encoder_instead_of_maxtext_tanh": ctl(
            mt_decoder(mt_embed(w64, ids, t64(audio_rows_erf_np), img), w64, QM.pos_bt3(pos), deep, imask)),
        "i_hf_exact_gelu_vision_mergers_instead_of_maxtext_tanh": ctl(
            mt_decoder(mt_embed(w64, ids, audio_rows, t64(img_erf_np)), w64, QM.pos_bt3(pos),
                       [t64(x) for x in deep_erf_np], imask)),
        "j_vision_position_embedding_not_rounded_to_bfloat16": ctl(
            mt_decoder(mt_embed(w64, ids, audio_rows, t64(img_unr_np)), w64, QM.pos_bt3(pos),
                       [t64(x) for x in deep_unr_np], imask)),
    }
    audio_effects = {"hf_erf_vs_maxtext_tanh_audio_rows_max_abs": max_abs(audio_rows_erf_np, audio_rows_np)}

    # ---- write
    d = case_dir(CASE)
    for f in os.listdir(d):
        if f.endswith((".npy", ".png", ".wav")):
            os.remove(os.path.join(d, f))
    hd_dir = os.path.join(d, "hf")
    os.makedirs(hd_dir, exist_ok=True)
    g_dummy = rng(SEED - 1)
    dummies = {"talker.model.codec_embedding.weight": f32(g_dummy, (8, 4), 0.02),
               "code2wav.code_embedding.weight": f32(g_dummy, (8, 4), 0.02)}
    ckpt = dict(o_all)
    ckpt.update(dummies)
    save_safetensors(os.path.join(hd_dir, "model.safetensors"), ckpt, {"format": "pt"})
    with open(os.path.join(hd_dir, "config.json"), "w") as f:
        json.dump(hc, f, indent=1, sort_keys=True)
    with open(os.path.join(hd_dir, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor_config(), f, indent=1, sort_keys=True)
    shutil.copyfile(os.path.join(AUDIO_DIR, "audio_2.wav"), os.path.join(d, "audio.wav"))
    shutil.copyfile(os.path.join(VISION_DIR, f"image_{IMAGE_INDEX}.png"), os.path.join(d, "image.png"))
    save_npy(d, "features", feats)
    save_npy(d, "audio_embeddings", audio_rows_np)
    save_npy(d, "pixel_values", pv)
    save_npy(d, "grid_thw", np.asarray([grid], dtype=np.int32))
    save_npy(d, "image_embeddings", img_np)
    for j, x in enumerate(deep_np):
        save_npy(d, f"deepstack_{j}", x)
    save_npy(d, "tokens", ids.astype(np.int32))
    save_npy(d, "positions", pos.astype(np.int32))
    save_npy(d, "logits", logits[0].numpy().astype(F32))
    save_npy(d, "greedy", np.asarray(greedy, dtype=np.int32))
    save_npy(d, "decode_positions", decode_positions)
    save_npy(d, "decode_logits", decode_logits.numpy().astype(F32))
    save_npy(d, "tokens_audio_only", ids_ao.astype(np.int32))
    save_npy(d, "logits_audio_only", logits_ao[0].numpy().astype(F32))

    commit = subprocess.run(["git", "-C", "/work/.mirror/AI-Hypercomputer+maxtext/repo", "log", "-1", "--format=%H"],
                            capture_output=True, text=True).stdout.strip() or "e591f30cbbf217ed67ef71263ec0538239f9c3b8"
    a0 = PREFIX + 1
    i0 = PREFIX + 2 + n_audio + MIDDLE + 1
    hf_names = {k: list(v.shape) for k, v in sorted(ckpt.items()) if k.startswith(("thinker.model.", "thinker.lm_head",
                                                                                     "talker.", "code2wav."))}
    files = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs if f != "meta.json")
    files.append("meta.json")
    meta = {
        "what": "tiny Qwen3-Omni thinker (Qwen3OmniMoeForConditionalGeneration: audio tower of "
                "tests/fixtures/qwen3_omni_audio + vision tower of tests/fixtures/qwen3_vision + a 2-layer Qwen3-MoE "
                "text decoder) and MaxText's float64 logits for a prompt holding one sound clip and one picture: "
                "pads replaced by the soft tokens, deepstack at the image pads, interleaved MRoPE at the 3-D "
                "positions",
        "maxtext_commit": commit,
        "seed": SEED, "attempt": attempt,
        "token_ids": {"audio_start": AUDIO_START, "audio_end": AUDIO_END, "audio_pad": AUDIO_PAD,
                      "vision_start": VISION_START, "vision_end": VISION_END, "image_pad": IMAGE_PAD,
                      "video_pad": VIDEO_PAD, "text": "every other id is < 100",
                      "config_keys": "thinker_config.audio_token_id (= audio pad), audio_start_token_id, "
                                     "audio_end_token_id, image_token_id, video_token_id, vision_start_token_id, "
                                     "vision_end_token_id"},
        "prompt": {"T": int(T), "tokens": [int(v) for v in ids],
                   "layout": f"text x{PREFIX} | audio_start @{a0 - 1} | audio_pad x{n_audio} @[{a0}, {a0 + n_audio - 1}]"
                             f" | audio_end @{a0 + n_audio} | text x{MIDDLE} | vision_start @{i0 - 1} | image_pad "
                             f"x{n_image} @[{i0}, {i0 + n_image - 1}] | vision_end @{i0 + n_image} | text x{TAIL}",
                   "audio_pad_span": [a0, a0 + n_audio - 1], "image_pad_span": [i0, i0 + n_image - 1],
                   "audio_only_prompt": "tokens_audio_only.npy = the same ids without the picture segment "
                                        "(vision_start .. vision_end), T = %d" % len(ids_ao)},
        "positions": {
            "rule": "counter p = 0; every token that is not an image pad gets (p, p, p) and p += 1 (audio_start, each "
                    "of the audio pads, audio_end included: audio is 1-D and text-like on all three rows); a run of "
                    "image pads of merged grid gh x gw starts at s = p, its j-th token gets (s, s + j // gw, "
                    "s + j % gw) (t index 0 * position_id_per_seconds for a picture), then p = s + max(gh, gw). "
                    "mrope_position_deltas = max + 1 - T; generated token k at max + 1 + k on all three rows.",
            "positions": pos.astype(int).tolist(), "mrope_position_deltas": delta,
            "audio_only_prompt": "0 .. T-1 on all three rows: both sources return text positions when no "
                                 "image/video grid is given (MaxText's 'text-only case' and HF's else branch never "
                                 "look at audio), and the audio loop would give the same numbers (asserted)",
            "maxtext_as_written": {"audio_lengths_passed": [n_audio],
                                   "audio_len_used": info_mt["audio_lens"],
                                   "note": "decode.py passes processor_outputs.audio_lengths, already "
                                           "_get_feat_extract_output_lengths(100 frames) = 13 tokens (what "
                                           "add_extra_tokens_for_qwen3_omni expands the pad to); get_rope_index "
                                           "applies the formula again: f(13) = 2. The loop then labels 2 pads as "
                                           "audio, the third as 'eos', and resumes text counting from inside the "
                                           "pad run; since every audio / text piece is an arange continuing the "
                                           "previous maximum, the concatenation is the same 0..n sequence: the "
                                           "positions are identical (asserted), as they are for any audio_len <= "
                                           "the pad count. Only an audio_len larger than the pad run could move "
                                           "the picture (st past vision_start). Standalone audio is not produced "
                                           "by MaxText's preprocess_mm_data_qwen3_omni at this commit (audio only "
                                           "from a video with use_audio_in_video); the fixture states what its "
                                           "code would do with standalone audio."},
            "intended": {"audio_len": n_audio, "note": "token count = number of audio pads (MaxText intended; HF: "
                                                       "_get_feat_extract_output_lengths(feature frames = 100) = 13)"},
            "hf": {"audio_seqlens_frames": [int(feats.shape[1])], "audio_len_used": info_hf["audio_lens"]},
            "checked_equal": "MaxText loop as written (f twice) == MaxText intended == HF loop (100 frames) == HF loop "
                             "fed an HF processor's unpadded 77 frames (audio_len 10) == per-token rule",
        },
        "decode": {"greedy": greedy, "positions": decode_positions.tolist(), "argmax_gaps": gaps,
                   "rule": "MaxText prefill: next_pos = true_length + mrope_position_deltas = max + 1; each "
                           "generated token at max + 1 + k on all three rows (HF compute_3d_position_ids: arange "
                           "+ rope_deltas, the same); generated ids are text (< 100)"},
        "audio": dict(audio_info, wav="audio.wav = tests/fixtures/qwen3_omni_audio/audio_2.wav",
                      features="features.npy = that fixture's features_2.npy (MaxText: zero-padded to 16000 "
                               "samples, [128, 100])",
                      embeddings="audio_embeddings.npy = that fixture's encoder_out_2.npy bit for bit (the "
                                 "checkpoint's audio tower IS that fixture's: output_dim 24 = hidden 24)",
                      gelu="tanh (MaxText); HF uses the exact erf GELU (informative h)"),
        "vision": {"image": "image.png = tests/fixtures/qwen3_vision/image_0.png, grid_thw (1, 6, 8) -> 12 soft "
                            "tokens, merged grid 3 x 4", "pixel_values": "[48, 96] f32 (= qwen3_vision "
                                                                           "pixel_values.npy rows 0..47)",
                   "embeddings": "image_embeddings.npy / deepstack_j.npy = qwen3_vision merged.npy / deep_j.npy rows "
                                 "0..11 bit for bit (MaxText: tanh GELU mergers, position embedding rounded to "
                                 "bfloat16)", "config": dict(QV.CFG),
                   "maxtext_vs_hf_formulation_max_abs (unrounded positions, tanh)": vision_cross},
        "config": {
            "hf_text_config": text_config(),
            "rope_scaling_note": "spelled as the published Qwen3-Omni config.json (transformers 4.57 era): "
                                 "rope_scaling {interleaved, mrope_interleaved, mrope_section, rope_type, type} + "
                                 "rope_theta beside it. transformers >= 5 re-saves it as rope_parameters {...same "
                                 "keys..., rope_theta}. Neither HF nor MaxText reads the interleaved flags: HF's "
                                 "thinker rotary always recomposes interleaved (reads mrope_section only), MaxText "
                                 "always uses _apply_interleaved_mrope.",
            "head_dim_note": "Qwen3OmniMoeTextConfig declares no head_dim field; the attention reads "
                             "getattr(config, 'head_dim', hidden // heads) and the published config sets it (128 "
                             "with hidden 2048, 32 heads); here 8 with hidden 24, 4 heads (q_proj [32, 24]).",
            "maxtext_derived": {"decoder_block": "qwen3_moe", "base_emb_dim": D, "base_num_query_heads": N,
                                "base_num_kv_heads": K, "head_dim": H, "base_mlp_dim": F_DENSE,
                                "base_moe_mlp_dim": F_MOE, "num_experts": E, "num_experts_per_tok": TOPK,
                                "norm_topk_prob": True, "base_num_decoder_layers": L, "vocab_size": V,
                                "normalization_layer_epsilon": EPS, "use_qk_norm": True, "rope_max_timescale": THETA,
                                "use_mrope": True, "mrope_section": list(MROPE_SECTION),
                                "mlp_activations": ["silu", "linear"], "logits_via_embedding": False,
                                "position_id_per_seconds": POSITION_ID_PER_SECONDS, "use_multimodal": True,
                                "use_audio": True, "scan_layers": False,
                                "audio": {"d_model_for_audio": QA.CFG["d_model"],
                                          "encoder_layers_for_audio": QA.CFG["encoder_layers"],
                                          "encoder_attention_heads_for_audio": QA.CFG["encoder_attention_heads"],
                                          "encoder_ffn_dim_for_audio": QA.CFG["encoder_ffn_dim"],
                                          "max_source_positions_for_audio": QA.CFG["max_source_positions"],
                                          "num_mel_bins_for_audio": QA.CFG["num_mel_bins"],
                                          "downsample_hidden_size_for_audio": QA.CFG["downsample_hidden_size"],
                                          "output_dim_for_audio": QA.CFG["output_dim"],
                                          "n_window_for_audio": QA.CFG["n_window"],
                                          "n_window_infer_for_audio": QA.CFG["n_window_infer"],
                                          "conv_chunksize_for_audio": QA.CFG["conv_chunksize"],
                                          "num_conv_layers_for_audio": 3,
                                          "max_timescale_for_audio": QA.CFG["max_timescale"]},
                                "vision": {"vision_encoder_block": "qwen3_omni",
                                           "hidden_size_for_vit": QV.CFG["hidden_size"],
                                           "intermediate_size_for_vit": QV.CFG["intermediate_size"],
                                           "num_attention_heads_for_vit": QV.CFG["num_heads"],
                                           "num_hidden_layers_for_vit": QV.CFG["depth"],
                                           "num_channels_for_vit": 3, "patch_size_for_vit": QV.CFG["patch_size"],
                                           "temporal_patch_size_for_vit": QV.CFG["temporal_patch_size"],
                                           "spatial_merge_size_for_vit": MERGE,
                                           "out_hidden_size_for_vit": QV.CFG["out_hidden_size"],
                                           "num_position_embeddings_for_vit": QV.CFG["num_position_embeddings"],
                                           "deepstack_visual_indexes_for_vit": list(QV.CFG["deepstack_visual_indexes"]),
                                           "rope_theta_for_vit": 10000}},
            "derivation": "emb_dim = text_config.hidden_size; mlp_dim = intermediate_size (unused: every layer is "
                          "MoE, mlp_only_layers [] and decoder_sparse_step 1); moe_mlp_dim = moe_intermediate_size; "
                          "heads / kv heads / head_dim / experts / top-k / eps / vocab as named; rope_max_timescale "
                          "= rope_theta; mrope_section = rope_scaling.mrope_section; audio *_for_audio from "
                          "thinker_config.audio_config, vision *_for_vit from thinker_config.vision_config; special "
                          "ids from thinker_config (MaxText itself takes them from QWEN_SPECIAL_TOKEN_CONFIGS by "
                          "model_name and merges audio only for model_name qwen3-omni-30b-a3b).",
        },
        "hf_names": {
            "text": hf_names,
            "text_to_maxtext": {
                "thinker.model.embed_tokens.weight [V, D]": "token_embedder.embedding",
                "thinker.model.layers.{l}.input_layernorm.weight": "decoder.layers_{l}.pre_self_attention_layer_norm."
                                                                   "scale",
                "thinker.model.layers.{l}.post_attention_layernorm.weight": "decoder.layers_{l}."
                                                                            "post_self_attention_layer_norm.scale",
                "thinker.model.layers.{l}.self_attn.q_proj.weight [N*hd, D]": ".T.reshape(D, N, hd) -> "
                                                                              "self_attention.query.kernel",
                "thinker.model.layers.{l}.self_attn.{k,v}_proj.weight [K*hd, D]": ".T.reshape(D, K, hd) -> "
                                                                                  "self_attention.{key,value}.kernel",
                "thinker.model.layers.{l}.self_attn.o_proj.weight [D, N*hd]": ".T.reshape(N, hd, D) -> "
                                                                              "self_attention.out.kernel",
                "thinker.model.layers.{l}.self_attn.{q,k}_norm.weight [hd]": "self_attention.{query,key}_norm.scale",
                "thinker.model.layers.{l}.mlp.gate.weight [E, D]": ".T -> moe_block.gate.kernel",
                "thinker.model.layers.{l}.mlp.experts.{e}.gate_proj.weight [I, D]": ".T, stacked over e -> "
                                                                                    "moe_block.wi_0 [E, D, I]",
                "thinker.model.layers.{l}.mlp.experts.{e}.up_proj.weight [I, D]": ".T, stacked -> moe_block.wi_1",
                "thinker.model.layers.{l}.mlp.experts.{e}.down_proj.weight [D, I]": ".T, stacked -> moe_block.wo "
                                                                                    "[E, I, D]",
                "thinker.model.norm.weight": "decoder.decoder_norm.scale",
                "thinker.lm_head.weight [V, D]": ".T -> decoder.logits_dense.kernel",
            },
            "expert_layout": "per-expert tensors as the published checkpoint stores them (and MaxText's param_mapping "
                             "expects); transformers >= 5 fuses them at load time into mlp.experts.gate_up_proj "
                             "[E, 2I, D] = cat(gate_proj, up_proj) on dim 1 and mlp.experts.down_proj [E, D, I] "
                             "(conversion_mapping 'qwen3_omni_moe'); the HF cross-check here computes with that fused "
                             "form.",
            "audio": "thinker.audio_tower.* exactly as tests/fixtures/qwen3_omni_audio/hf/model.safetensors",
            "vision": "thinker.visual.* = tests/fixtures/qwen3_vision/hf tensors under Qwen3-Omni names: "
                      "blocks.{i}.{norm1,norm2,attn.qkv,attn.proj,mlp.linear_fc1,mlp.linear_fc2}, patch_embed.proj, "
                      "pos_embed, merger.{ln_q,mlp.0,mlp.2}, merger_list.{j}.{ln_q,mlp.0,mlp.2} (deepstack j)",
            "ignored_by_a_thinker_loader": sorted(dummies),
        },
        "files": {
            "hf/config.json": "Qwen3OmniMoeForConditionalGeneration config: thinker_config {audio_config (the audio "
                              "fixture's, output_dim 24), vision_config (Qwen3-Omni spelling of qwen3_vision's), "
                              "text_config, token ids, position_id_per_seconds 13}; enable_audio_output false (no "
                              "talker_config / code2wav_config: only two dummy tensors stand for them)",
            "hf/model.safetensors": "F32: thinker.model.*, thinker.lm_head.weight, thinker.audio_tower.*, "
                                    "thinker.visual.*, plus dummies talker.model.codec_embedding.weight and "
                                    "code2wav.code_embedding.weight [8, 4] (a loader must ignore them)",
            "hf/preprocessor_config.json": "WhisperFeatureExtractor keys of qwen3_omni_audio/hf + Qwen2VLImageProcessor "
                                           "keys of qwen3_vision/hf merged in one file (as Qwen-Omni ships one)",
            "audio.wav": "16 kHz mono int16, 12345 samples (copy of qwen3_omni_audio/audio_2.wav)",
            "features.npy": "f32 [128, 100] MaxText log-mel (waveform zero-padded to 1 s)",
            "audio_embeddings.npy": "f32 [13, 24] MaxText audio tower output (the rows the logits start from)",
            "image.png, pixel_values.npy, grid_thw.npy": "qwen3_vision's image_0: f32 [48, 96] processor order, "
                                                          "int32 [[1, 6, 8]]",
            "image_embeddings.npy": "f32 [12, 24] MaxText vision tower + projector",
            "deepstack_0.npy, deepstack_1.npy": "f32 [12, 24] deepstack mergers (blocks 0 and 2), added after text "
                                                "layers 0 and 1 at the image pads",
            "tokens.npy": "int32 [T] prompt ids",
            "positions.npy": "int32 [3, T] rows (temporal, height, width)",
            "logits.npy": "f32 [T, 128] float64 math (float32 rotary angles as MaxText forms them) from the float32 "
                          "audio / image / deepstack rows above",
            "greedy.npy": "int32 [4] greedy tokens after the prompt",
            "decode_positions.npy": "int32 [4] position (all rows) of greedy[k] = max(positions) + 1 + k",
            "decode_logits.npy": "f32 [4, 128] logits after feeding greedy[k] at decode_positions[k] (row k "
                                 "predicts greedy[k + 1])",
            "tokens_audio_only.npy, logits_audio_only.npy": "int32 [T'] / f32 [T', 128]: the prompt without the "
                                                            "picture segment, positions 0..T'-1 on all rows",
        },
        "file_list": files,
        "shapes": {"tokens": [int(T)], "positions": [3, int(T)], "logits": [int(T), V],
                   "audio_embeddings": list(audio_rows_np.shape), "image_embeddings": list(img_np.shape),
                   "deepstack_j": list(deep_np[0].shape), "features": list(feats.shape),
                   "pixel_values": list(pv.shape), "greedy": [GREEDY_STEPS], "decode_logits": [GREEDY_STEPS, V],
                   "tokens_audio_only": [len(ids_ao)], "logits_audio_only": [len(ids_ao), V]},
        "checks": {
            "logits_vs_hf_formulation_float64_angles_max_abs": hf_diff_f64,
            "logits_vs_hf_formulation_maxtext_float32_angles_max_abs": hf_diff_f32,
            "audio_only_logits_vs_hf_formulation_max_abs": hf_ao_diff,
            "audio_only_logits_vs_qwen_family_reference_qwen3_moe_layer_1d_rope_max_abs": qf_diff,
            "hf_formulation": "independent forward on the HF names: masked_scatter merges, HF rotary recomposition "
                              "(float64), per-head q/k RMSNorm, repeat_kv, causal mask, softmax router over all "
                              "experts + top-k + renormalise, fused gate_up_proj experts, HF-style deepstack",
            "qwen_family_note": "qwen_family_reference.qwen3_moe_layer uses 1-D RoPE (pos / timescale in float32) "
                                "where MaxText's MRoPE forms pos * (1 / timescale): ulp-level angle differences",
            "deepstack": "cumsum gather == direct masked add (< 1e-13)",
            "min_routing_margin": min(margins),
            "audio_tower": "features / encoder output equal to qwen3_omni_audio's files bit for bit; MaxText vs HF "
                           "formulation (tanh, window 100) < 1e-12",
            "vision_tower": "image / deepstack rows equal to qwen3_vision's files bit for bit; MaxText vs HF "
                            "formulation (tanh, unrounded positions) < 1e-12",
            "causal": "prompt rows unchanged when decoding (< 1e-12)",
        },
        "max_abs_logits": top,
        "controls": controls,
        "controls_zero": zero_controls,
        "controls_audio_only_prompt_max_abs": controls_audio_only,
        "controls_note": "max |logits - alternative| over the prompt. a: the audio pads keep their token embedding; "
                         "b: the image pads keep theirs; c: no deepstack; d: positions without MRoPE structure "
                         "(plain 1-D 0..T-1 on all rows; for the audio-only prompt this IS the stored positions, "
                         "difference exactly 0, see controls_zero); e: the 13 audio pads share one position (span "
                         "counted as one placeholder); f: height / width rows swapped (small: the H and W lanes have "
                         "inverse frequencies 0.03 and 0.001 at theta 1e6, head_dim 8); g: decode at T + k. "
                         "controls_zero: MaxText's double-applied audio length and HF fed the unpadded frame count "
                         "leave every position unchanged (the difference is exactly 0).",
        "informative_maxtext_vs_hf_effects_on_logits": info,
        "informative_audio_rows": audio_effects,
        "maxtext_surprises": [
            "get_rope_index applies _get_feat_extract_output_lengths to audio_lengths that are already token counts "
            "(f(13) = 2 for one second); harmless for standalone audio because the positions are a running count, "
            "but the bookkeeping (st) lands inside the pad run",
            "get_rope_index returns text positions when no image / video grid is given, before looking at audio",
            "MaxText only loads audio from a video (use_audio_in_video); no standalone-audio path in preprocess",
            "special ids come from model_name (QwenTokens), not config.json; audio merge only for model_name "
            "qwen3-omni-30b-a3b",
            "deepstack is added at the image pads only (bidirectional_mask), never at audio pads (as HF)",
        ],
        "hf_surprises": [
            "current transformers keeps the experts fused (gate_up_proj [E, 2I, D], down_proj [E, D, I]) while the "
            "published checkpoint and MaxText's converter use per-expert gate_proj / up_proj / down_proj tensors",
            "Qwen3OmniMoeTextConfig has no head_dim field (read through getattr); the published config has it",
            "the rotary ignores rope_scaling.interleaved / mrope_interleaved (always interleaved)",
            "get_rope_index's audio_seqlens are feature frames (formula applied once); an HF processor would expand "
            "this clip to 10 pads (77 frames, no 1 s padding) where MaxText's processor gives 13",
        ],
    }
    save_meta(d, meta)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    print(f"wrote {d} ({total / 1024:.0f} KiB), attempt {attempt}")
    print("tokens", ids.tolist())
    np.set_printoptions(linewidth=200)
    print("positions\n", pos)
    print(f"greedy {greedy} at {decode_positions.tolist()}, gaps {gaps}")
    print(f"hf f64 {hf_diff_f64:.2e}, hf f32angles {hf_diff_f32:.2e}, audio-only hf {hf_ao_diff:.2e}, qf {qf_diff:.2e}, "
          f"min margin {min(margins):.4f}, max|logits| {top:.3f}, logits std {float(logits.std()):.3f}")
    for k, v in controls.items():
        print("  control", k, v)
    for k, v in zero_controls.items():
        print("  zero", k, v)
    for k, v in controls_audio_only.items():
        print("  audio-only", k, v)
    for k, v in info.items():
        print("  info", k, v)


if __name__ == "__main__":
    main()
