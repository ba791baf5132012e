"""A tiny multimodal Qwen3.5 (Gated DeltaNet / gated-attention MoE text decoder + vision tower) as a Hugging Face
checkpoint, and the float64 logits MaxText would compute for a prompt that holds two pictures, with MRoPE's real 3-D
(temporal, height, width) positions at the image tokens.

Sources read (MaxText commit e591f30cbbf217ed67ef71263ec0538239f9c3b8):
  src/maxtext/multimodal/processor_qwen3_omni.py:
    QWEN_SPECIAL_TOKEN_CONFIGS / QwenTokens (the ids are picked by model_name prefix, "qwen3.5" -> 248053..248057: a
      tiny vocabulary cannot be expressed there, so this fixture's ids 60..63 live in config.json only);
    get_llm_pos_ids_for_vision (rows t, h, w for a grid of merged tokens, h/w row-major, + start_idx);
    get_rope_index (the loop re-stated in maxtext_rope_index below; images only);
    add_extra_tokens_for_qwen3_omni (one <|image_pad|> -> t*h*w / merge^2 copies);
    preprocess_mm_data_qwen3_omni (reshapes ALL pixel rows with the FIRST picture's grid to [1, C, tp*t, p*h, p*w]:
      two pictures of different sizes cannot go through decode.py as written; here each picture is encoded on its
      own, which is what the encoder does per grid, and the rows are concatenated).
  src/maxtext/multimodal/processor.py: get_bidirectional_mask_vision (qwen3_5: tokens == image_pad).
  src/maxtext/multimodal/utils.py: merge_mm_embeddings / _merge_mm_embeddings_inner (cumsum of the mask, gather,
    `where`: the embedding at an image-pad position is REPLACED by the next image row; pads beyond the number of rows
    keep their text embedding).
  src/maxtext/models/models.py: Transformer.__call__ (vision_encoder(images) -> image_embeddings, deepstack list;
    bidirectional_mask_image = get_bidirectional_mask_vision(tokens); MultimodalInput to the decoder).
  src/maxtext/layers/decoders.py: Decoder._apply_embedding (merge_mm_embeddings right after the token lookup, for the
    qwen3.5-* model names), the unscanned layer loop (QWEN3_5 layers get layer_idx only; bidirectional_mask is passed
    to Gemma 3 / Gemma 4 layers, never to Qwen's: attention stays causal over the whole sequence, image tokens
    included; nnx_decoders.py likewise hands the mask to GEMMA3 / GEMMA4 layers only), deepstack_process (after
    layer j < len(deepstack): hidden += deepstack_j[cumsum(mask) - 1] * mask).
  src/maxtext/layers/embeddings.py: RotaryEmbedding.timescale (min * (max/min)^(2i/d), float32),
    Qwen3OmniMoeThinkerTextRotaryEmbedding (__call__, _apply_interleaved_mrope): freqs[..., s, i] = pos_s * (1 /
    timescale_i) in float32; freqs_t = freqs[..., 0, :]; lanes offset::3 below 3 * mrope_section[s] take row s
    (s = 1 offset 1 (height), s = 2 offset 2 (width)); cos / sin of concat(freqs_t, freqs_t); rotate-half on the first
    rotary_dim lanes; the rest pass through.
  src/maxtext/inference/decode.py + inference/maxengine/maxengine.py (prefill): positions = get_rope_index(...)
    [B, T, 3], mrope_position_deltas = max(positions) + 1 - T; after the prompt next_pos = true_length + delta, and
    each generated token takes that single position on all three rows, +1 per step (text positions).
  src/maxtext/models/qwen3_5.py / qwen3_5_vision.py (plain subclasses of the Qwen3-Next layers and of the
    Qwen3-Omni vision encoder / projector), configs/models/qwen3.5-35b-a3b.yml (deepstack_visual_indexes_for_vit []).
Hugging Face transformers (code index), src/transformers/models/qwen3_5_moe/modeling_qwen3_5_moe.py (commit 5fd974ea):
  Qwen3_5MoeModel.get_rope_index (re-stated in hf_rope_index below), compute_3d_position_ids (decode: arange +
  rope_deltas), forward (inputs_embeds.masked_scatter(image_mask, image_embeds)), Qwen3_5MoeTextModel.forward (one
  causal mask), Qwen3_5MoeTextRotaryEmbedding.apply_interleaved_mrope; configuration_qwen3_5_moe.py
  (Qwen3_5MoeConfig: image/video/vision_start/vision_end token ids; Qwen3_5MoeVisionConfig has no deepstack field).

Imported (not modified), each an independent float64 re-statement from the same sources:
  qwen3_next_reference.py: the decoder layer (Gated DeltaNet, gated full attention, MoE), hf_forward;
  qwen3_5_reference.py: settings(), the Qwen3.5 HF layout (hf_checkpoint, hf_config, hf_gdn_inputs, hf_experts);
  qwen3_vision_reference.py: vision weights (maxtext_weights, hf_weights, hf_to_maxtext), maxtext_image (MaxText's
    encoder + projector; tanh GELU in the merger; the learned position embedding rounded to bfloat16 as MaxText's
    Qwen3OmniMoeVisionPosEmbedInterpolate does by default), hf_forward (HF's formulation, for a cross-check).

Math of this fixture:
  1. Vision: each picture's pixel rows (tests/fixtures/qwen3_vision/pixel_values.npy) -> MaxText encoder + projector
     -> [t*h*w/4, 32]; image_embeddings.npy = both concatenated (float32). The logits below start from those float32
     rows (exactly what the file holds).
  2. Prompt ids: text (< 60), 60, 62 x n0, 61, text, 60, 62 x n1, 61, text.
  3. Positions [3, T] (get_rope_index): a counter p starts at 0; a text token (vision_start and vision_end included)
     gets (p, p, p), p += 1; the k-th run of image pads (grid (1, h, w), merged gh = h/2, gw = w/2) starts at
     s = p: its j-th token gets (s, s + j // gw, s + j % gw) (t_index = 0 for an image), then p = s + max(gh, gw)
     (= max of the picture's positions + 1). mrope_position_deltas = max + 1 - T; decoding continues at max + 1.
     Computed three ways (MaxText's loop, HF's loop, the per-token rule above) and asserted equal.
  4. Embeddings: e = embedding[ids]; at image-pad positions, in order, e[t] = image_embeddings[k] (replaced).
  5. Decoder: qwen3_next_reference.decoder_layer for layers 0..3 (GDN, GDN, GDN, full attention); the full-attention
     layer rotates with MaxText's 3-D MRoPE at the positions of step 3 (float32 angles, as MaxText forms them);
     causal attention; GDN layers take no positions; final (1 + w) RMSNorm and logits_dense.
  6. Deepstack (generic decoder path; Qwen3.5 itself has none): logits_deepstack.npy adds deepstack_j (random) to the
     hidden states at the image-pad positions after decoder layer j, j = 0, 1.
  7. Decode: greedy steps after the prompt, generated token k at position (max + 1 + k) on all rows.

Writes tests/fixtures/qwen3_5_mm_model/ (see meta.json "files").
Run: /usr/bin/python3 tests/reference/qwen3_5_multimodal_reference.py
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_5_reference as QR  # noqa: E402
import qwen3_next_reference as QN  # noqa: E402
import qwen3_vision_reference as QV  # noqa: E402
from common import FIXTURES, case_dir, f32, read_safetensors, rng, save_meta, save_npy, save_safetensors, t64  # noqa

F32 = np.float32
CASE = "qwen3_5_mm_model"
TEXT_DIR = os.path.join(FIXTURES, "qwen3_5_model")
VISION_DIR = os.path.join(FIXTURES, "qwen3_vision")
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 60, 61, 62, 63
MERGE = 2
POSITION_ID_PER_SECONDS = 25  # MaxText's default; multiplies t_index, which is 0 for an image
SEED = 9301
GREEDY_STEPS = 4
ROUTING_MARGIN = 1e-3  # top-k routing decisions at least this far from a tie (as the text fixture)
GREEDY_MARGIN = 1e-2   # greedy argmax this far ahead of the runner-up
CONTROL_MIN = 1.5e-2   # every control must move the logits by more than this
# Prompt layout: PREFIX text ids, picture 0, MIDDLE text ids, picture 1, TAIL text ids.
PREFIX, MIDDLE, TAIL = 5, 4, 10

VCFG = {"hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "depth": 2, "patch_size": 4,
        "temporal_patch_size": 2, "spatial_merge_size": MERGE, "out_hidden_size": 32, "num_position_embeddings": 16,
        "deepstack_visual_indexes": [], "eps": 1e-6, "rope_theta": 10000.0, "in_channels": 3}


# ----------------------------------------------------------------------------------------------------------------
# 3-D positions, three formulations
# ----------------------------------------------------------------------------------------------------------------

def _text_rows(n, start):
    return np.tile(np.arange(n, dtype=np.int64) + start, (3, 1))


def _vision_rows(start, grid, m, t_scale=POSITION_ID_PER_SECONDS):
    """get_llm_pos_ids_for_vision: rows (t, h, w) for t frames of gh x gw merged tokens, + start."""
    t, h, w = grid
    gh, gw = h // m, w // m
    t_index = np.arange(t, dtype=np.int64) * t_scale
    tt = np.repeat(t_index, gh * gw)
    hh = np.tile(np.repeat(np.arange(gh), gw), t)
    ww = np.tile(np.arange(gw), t * gh)
    return np.stack([tt, hh, ww]) + start


def maxtext_rope_index(ids, grids, m=MERGE):
    """processor_qwen3_omni.get_rope_index for one unpadded sequence holding pictures (no video / audio)."""
    toks = [int(v) for v in ids]
    starts = [i for i, v in enumerate(toks) if v == VISION_START]
    after = [toks[i + 1] for i in starts]
    image_nums = sum(v == IMAGE_PAD for v in after)
    assert not any(v == VIDEO_PAD for v in after)
    parts, st, image_idx = [], 0, 0
    for _ in range(image_nums):
        st_idx = int(parts[-1].max()) + 1 if parts else 0
        try:
            ed = toks.index(VISION_START, st)
        except ValueError:
            ed = len(toks) + 1
        text_len = ed - st
        if text_len > 0:
            parts.append(_text_rows(text_len, st_idx))
            st_idx += text_len
        parts.append(_text_rows(1, st_idx))  # vision_start (bos_len 1)
        st_idx += 1
        assert toks[ed + 1] == IMAGE_PAD
        g = grids[image_idx]
        parts.append(_vision_rows(st_idx, g, m))
        image_len = int(np.prod(g)) // (m * m)
        st += text_len + 1 + image_len + 1
        image_idx += 1
        st_idx = int(parts[-1].max()) + 1
        parts.append(_text_rows(1, st_idx))  # vision_end (eos_len 1)
    if st < len(toks):
        st_idx = int(parts[-1].max()) + 1 if parts else 0
        parts.append(_text_rows(len(toks) - st, st_idx))
    pos = np.concatenate(parts, axis=1)
    assert pos.shape == (3, len(toks))
    return pos, int(pos.max()) + 1 - len(toks)


def hf_rope_index(ids, grids, m=MERGE):
    """transformers' Qwen3_5MoeModel.get_rope_index (images): text up to the first image pad (vision_start included)
    at st_idx + i, the grid at st_idx + text_len + (t, h, w), st = ed + t*gh*gw; the rest at max + 1 + i."""
    toks = [int(v) for v in ids]
    starts = [i for i, v in enumerate(toks) if v == VISION_START]
    image_nums = sum(toks[i + 1] == IMAGE_PAD for i in starts)
    parts, st = [], 0
    for k in range(image_nums):
        ed = toks.index(IMAGE_PAD, st)
        t, h, w = grids[k]
        gt, gh, gw = t, h // m, w // m
        text_len = ed - st
        st_idx = int(parts[-1].max()) + 1 if parts else 0
        parts.append(_text_rows(text_len, st_idx))
        ti = np.repeat(np.arange(gt), gh * gw)
        hi = np.tile(np.repeat(np.arange(gh), gw), gt)
        wi = np.tile(np.arange(gw), gt * gh)
        parts.append(np.stack([ti, hi, wi]) + text_len + st_idx)
        st = ed + gt * gh * gw
    if st < len(toks):
        st_idx = int(parts[-1].max()) + 1 if parts else 0
        parts.append(_text_rows(len(toks) - st, st_idx))
    pos = np.concatenate(parts, axis=1)
    return pos, int(pos.max()) + 1 - len(toks)


def direct_positions(ids, grids, m=MERGE, after_image="max"):
    """Per-token rule (module docstring, step 3). after_image="count" is a control: the text after a picture resumes
    at its sequence index (p = s + number of image tokens) instead of max + 1."""
    pos = np.zeros((3, len(ids)), dtype=np.int64)
    p, k, t = 0, 0, 0
    while t < len(ids):
        if ids[t] != IMAGE_PAD:
            pos[:, t] = p
            p += 1
            t += 1
            continue
        _, h, w = grids[k]
        gh, gw = h // m, w // m
        s = p
        for j in range(gh * gw):
            assert ids[t + j] == IMAGE_PAD
            pos[:, t + j] = (s, s + j // gw, s + j % gw)
        t += gh * gw
        p = s + (max(gh, gw) if after_image == "max" else gh * gw)
        k += 1
    return pos


# ----------------------------------------------------------------------------------------------------------------
# MRoPE at 3-D positions (MaxText's Qwen3OmniMoeThinkerTextRotaryEmbedding)
# ----------------------------------------------------------------------------------------------------------------

def mrope3(rd, theta, section, f32_angles=True):
    """Returns apply(x [B,T,heads,H], pos [B,T,3] or [B,T]). f32_angles: timescale, 1/timescale and the products in
    float32 as MaxText forms them; else everything float64 (HF-like, used for the cross-check)."""
    half = rd // 2
    assert sum(section) == half
    if f32_angles:
        frac = (F32(2) * np.arange(half, dtype=F32)) / F32(rd)
        inv = (F32(1) / (F32(1) * np.power(F32(theta), frac, dtype=F32))).astype(F32)
    else:
        inv = 1.0 / theta ** (2.0 * np.arange(half) / rd)

    def apply(x, pos):
        pos = np.asarray(pos)
        if pos.ndim == 2:
            pos = np.repeat(pos[..., None], 3, axis=-1)
        assert pos.shape[-1] == 3
        if f32_angles:
            freqs = (pos.astype(F32)[..., None] * inv[None, None, None, :]).astype(F32)  # [B,T,3,half]
        else:
            freqs = pos.astype(np.float64)[..., None] * inv[None, None, None, :]
        ang = freqs[..., 0, :].copy()
        for row, offset in ((1, 1), (2, 2)):
            sl = slice(offset, 3 * section[row], 3)
            ang[..., sl] = freqs[..., row, sl]
        a = t64(np.concatenate([ang, ang], axis=-1))[:, :, None, :]
        xr = x[..., :rd]
        rot = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
        return torch.cat([xr * torch.cos(a) + rot * torch.sin(a), x[..., rd:]], dim=-1)
    return apply


def text_settings(f32_angles=True):
    c = QR.settings()
    c["rope"] = lambda rd: mrope3(rd, c["theta"], QR.MROPE_SECTION, f32_angles)
    return c


# ----------------------------------------------------------------------------------------------------------------
# Embedding merge, deepstack, decoder
# ----------------------------------------------------------------------------------------------------------------

def merge_maxtext(text_emb, rows, mask):
    """_merge_mm_embeddings_inner: c = cumsum(mask); where(mask & c <= n, rows[clip(c - 1)], text)."""
    c = torch.cumsum(mask.long(), dim=-1)
    keep = mask & (c <= rows.shape[0])
    idx = (c - 1).clamp(0, rows.shape[0] - 1)
    return torch.where(keep[..., None], rows[idx], text_emb)


def merge_hf(text_emb, rows, mask):
    """masked_scatter: the image rows fill the masked positions in order."""
    out = text_emb.clone()
    out[mask] = rows
    return out


def deepstack_maxtext(h, mask, rows):
    """decoders.deepstack_process: h + rows[cumsum(mask) - 1] * mask (index -1 before the first pad, masked out)."""
    idx = torch.cumsum(mask.long(), dim=-1) - 1
    return h + rows[idx] * mask[..., None].to(h.dtype)


def deepstack_direct(h, mask, rows):
    out = h.clone()
    out[mask] = out[mask] + rows
    return out


def decoder(x, w64, c, pos, deep=None, mask=None, margins=None, deep_fn=deepstack_maxtext):
    """x [B,T,D] embeddings -> logits [B,T,V] (MaxText's qwen3_5 decoder, unscanned)."""
    for i in range(c["L"]):
        x, _, _, _ = QN.decoder_layer(x, QN.sub(w64, f"decoder.layers_{i}."), c, pos, i, margins)
        if deep is not None and i < len(deep):
            x = deep_fn(x, mask, deep[i])
    x = QN.rms_1p(x, w64["decoder.decoder_norm.scale"], c["eps"])
    return x @ w64["decoder.logits_dense.kernel"]


def pos_bt3(pos3t):
    """[3, T] -> [1, T, 3] (MaxText's [batch, seq, 3])."""
    return np.ascontiguousarray(np.asarray(pos3t).T[None])


def max_abs(a, b):
    return float((a - b).abs().max())


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face formulation of the text side (transformers' Qwen3.5 forward with inputs_embeds and 3-D position ids)
# ----------------------------------------------------------------------------------------------------------------

def hf_text_logits(hc, hf64, ids, embeds, pos3t):
    sec = hc["text_config"]["rope_parameters"]["mrope_section"]
    rp = hc["text_config"]["rope_parameters"]
    text = dict(hc["text_config"], rope_theta=rp["rope_theta"], partial_rotary_factor=rp["partial_rotary_factor"])

    def cos_sin(_hc, Tn, rd):
        inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
        p = torch.from_numpy(np.asarray(pos3t, dtype=np.float64))  # [3, T]
        freqs = p[:, :, None] * inv[None, None, :]  # [3, T, rd/2]
        ft = freqs[0].clone()
        for dim, offset in ((1, 1), (2, 2)):
            ft[..., offset:3 * sec[dim]:3] = freqs[dim, ..., offset:3 * sec[dim]:3]
        emb = torch.cat([ft, ft], -1)
        return emb.cos(), emb.sin()
    return QN.hf_forward(text, hf64, ids[None], prefix="model.language_model.", gdn_inputs=QR.hf_gdn_inputs,
                         experts=QR.hf_experts, rope_cos_sin=cos_sin, inputs_embeds=embeds)


# ----------------------------------------------------------------------------------------------------------------

def position_controls(ids, grids, pos_mt, emb, text_emb, w64, c, logits, logits_ds):
    """Controls a-e (meta.json controls_note): max |logits - alternative| and relative to max |logits|."""
    T = len(ids)
    top = float(logits.abs().max())

    def ctl(alt, ref=logits):
        d = max_abs(alt, ref)
        return {"max_abs_diff_logits": d, "relative_to_max_abs_logits": d / top}

    seq_pos = np.tile(np.arange(T), (3, 1))
    swapped = pos_mt[[0, 2, 1]]
    count_pos = direct_positions(ids, grids, after_image="count")
    assert not np.array_equal(count_pos, pos_mt)
    assert np.array_equal(count_pos[:, ids != IMAGE_PAD], seq_pos[:, ids != IMAGE_PAD])
    return {
        "a_all_rows_sequential_index": ctl(decoder(emb, w64, c, pos_bt3(seq_pos))),
        "b_height_width_rows_swapped": ctl(decoder(emb, w64, c, pos_bt3(swapped))),
        "c_text_after_picture_at_sequence_index": ctl(decoder(emb, w64, c, pos_bt3(count_pos))),
        "d_deepstack_omitted": ctl(logits, logits_ds),
        "e_image_embeddings_not_merged": ctl(decoder(text_emb, w64, c, pos_bt3(pos_mt))),
    }


def load_text_model():
    c = text_settings()
    w = read_safetensors(os.path.join(TEXT_DIR, "model.safetensors"))
    hf = read_safetensors(os.path.join(TEXT_DIR, "hf", "model.safetensors"))
    with open(os.path.join(TEXT_DIR, "hf", "config.json")) as f:
        hc = json.load(f)
    # The HF text tensors are the MaxText tensors under the Qwen3.5 layout (the weights we compute with = the ones we
    # ship).
    mapped = QR.hf_checkpoint(w, c)
    text_hf = {k: v for k, v in hf.items() if k.startswith("model.language_model.") or k == "lm_head.weight"}
    assert sorted(text_hf) == sorted(k for k in mapped if k in text_hf)
    for k, v in text_hf.items():
        assert v.dtype == np.float32 and np.array_equal(v, mapped[k]), k
    return c, w, text_hf, hc


def text_only_check(c, w64):
    """My MRoPE path at text positions reproduces the text fixture's logits."""
    tokens = np.load(os.path.join(TEXT_DIR, "tokens.npy"))
    want = torch.from_numpy(np.load(os.path.join(TEXT_DIR, "logits.npy")).astype(np.float64))
    B, T = tokens.shape
    pos3 = np.repeat(np.tile(np.arange(T), (B, 1))[..., None], 3, axis=-1)
    x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
    got = decoder(x, w64, c, pos3)
    d = max_abs(got, want)
    assert d < 1e-12, f"text-only logits differ from tests/fixtures/qwen3_5_model by {d}"
    return d


def vision_model():
    """Vision weights (MaxText tree) and their HF names; the round trip HF -> MaxText is bit-exact."""
    g = rng(SEED)
    w = QV.maxtext_weights(g, VCFG)
    shapes = QV.maxtext_shapes(VCFG)
    assert sorted(shapes) == sorted(w)
    for k, s in shapes.items():
        assert w[k].shape == s and w[k].dtype == np.float32, k
    o = QV.hf_weights(w, VCFG)
    back = QV.hf_to_maxtext(o, VCFG)
    assert sorted(back) == sorted(w) and all(np.array_equal(back[k], w[k]) for k in w)
    return w, o


def build_prompt(g, n0, n1):
    def text(n):
        return [int(v) for v in g.integers(0, VISION_START, size=n)]
    ids = (text(PREFIX) + [VISION_START] + [IMAGE_PAD] * n0 + [VISION_END] + text(MIDDLE) + [VISION_START]
           + [IMAGE_PAD] * n1 + [VISION_END] + text(TAIL))
    return np.asarray(ids, dtype=np.int32)


def main():
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    c, w, text_hf, text_hc = load_text_model()
    w64 = QN.to64(w)
    text_only_diff = text_only_check(c, w64)
    # my 3-D MRoPE at text positions == qwen3_5_reference.mrope (the module the text fixture used), bit for bit
    xr = torch.from_numpy(np.random.default_rng(1).standard_normal((1, 9, 2, c["H"])))
    p2 = np.arange(9)[None]
    rd = int(c["H"] * c["partial"])
    assert max_abs(mrope3(rd, c["theta"], QR.MROPE_SECTION)(xr, p2),
                   QR.mrope(rd, c["theta"], QR.MROPE_SECTION)(xr, p2)) == 0.0

    # ---- inputs from the vision fixture
    pv = np.load(os.path.join(VISION_DIR, "pixel_values.npy"))
    grids = [tuple(int(v) for v in r) for r in np.load(os.path.join(VISION_DIR, "grid_thw.npy"))]
    assert grids == list(QV.GRIDS), grids
    dv = QV.dims(VCFG)
    C, tp, p = dv["C"], dv["tp"], dv["p"]
    assert pv.dtype == np.float32 and pv.shape == (sum(np.prod(gr) for gr in grids), C * tp * p * p)
    from PIL import Image
    pv5s, off = [], 0
    for i, (t, h, w_) in enumerate(grids):
        rows = pv[off:off + t * h * w_]
        off += t * h * w_
        pv5 = rows.reshape(1, C, tp * t, p * h, p * w_)
        assert np.array_equal(pv5, np.load(os.path.join(VISION_DIR, f"pixel_values_maxtext_{i}.npy")))
        # the PNG, normalised and patchified, gives these rows exactly
        u8 = np.asarray(Image.open(os.path.join(VISION_DIR, f"image_{i}.png")).convert("RGB"))
        again, grid = QV.image_to_pixel_values(QV.normalize(u8, QV.MEAN, QV.STD), p, tp, dv["m"])
        assert grid == (t, h, w_) and np.array_equal(again, rows)
        pv5s.append(pv5)

    # ---- vision tower
    vw, vo = vision_model()
    VW = QN.to64(vw)
    per = [QV.maxtext_image(VW, t64(x), gr, VCFG) for x, gr in zip(pv5s, grids)]
    img64 = torch.cat([o["merged"] for o in per])
    ns = [t * h * w_ // (MERGE * MERGE) for t, h, w_ in grids]
    n0, n1 = ns
    assert img64.shape == (n0 + n1, c["D"])
    per_exact = [QV.maxtext_image(VW, t64(x), gr, VCFG, pos_bf16=False) for x, gr in zip(pv5s, grids)]
    img64_exact = torch.cat([o["merged"] for o in per_exact])
    hf_vis = QV.hf_forward(QN.to64(vo), t64(pv), VCFG, merger_act="tanh")["merged"]
    vision_hf_diff = max_abs(hf_vis, img64_exact)
    assert vision_hf_diff < 1e-12, vision_hf_diff
    hf_vis_erf = QV.hf_forward(QN.to64(vo), t64(pv), VCFG, merger_act="none")["merged"]
    image_embeddings = img64.numpy().astype(F32)
    img = t64(image_embeddings)
    scale = float(image_embeddings.std())

    hc = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
          "tie_word_embeddings": text_hc["tie_word_embeddings"], "text_config": text_hc["text_config"],
          "vision_config": {"model_type": "qwen3_5_moe", "depth": VCFG["depth"], "hidden_size": VCFG["hidden_size"],
                            "intermediate_size": VCFG["intermediate_size"], "num_heads": VCFG["num_heads"],
                            "in_channels": VCFG["in_channels"], "patch_size": VCFG["patch_size"],
                            "temporal_patch_size": VCFG["temporal_patch_size"],
                            "spatial_merge_size": VCFG["spatial_merge_size"],
                            "num_position_embeddings": VCFG["num_position_embeddings"],
                            "out_hidden_size": VCFG["out_hidden_size"], "hidden_act": "gelu_pytorch_tanh",
                            "deepstack_visual_indexes": [], "initializer_range": 0.02},
          "vision_start_token_id": VISION_START, "vision_end_token_id": VISION_END, "image_token_id": IMAGE_PAD,
          "video_token_id": VIDEO_PAD}
    assert hc["vision_config"]["out_hidden_size"] == hc["text_config"]["hidden_size"]
    hf_all = dict(text_hf)
    hf_all.update(vo)
    hf64 = QN.to64(hf_all)

    # ---- prompt, positions, logits; pick a seed whose routing / greedy decisions are clear of ties
    for attempt in range(300):
        g = rng(SEED + 1 + attempt)
        ids = build_prompt(g, n0, n1)
        T = len(ids)
        pos_mt, delta = maxtext_rope_index(ids, grids)
        pos_hf, delta_hf = hf_rope_index(ids, grids)
        pos_direct = direct_positions(ids, grids)
        assert np.array_equal(pos_mt, pos_hf) and np.array_equal(pos_mt, pos_direct) and delta == delta_hf
        mask = torch.from_numpy(ids[None] == IMAGE_PAD)
        assert int(mask.sum()) == n0 + n1
        text_emb = w64["token_embedder.embedding"][torch.from_numpy(ids[None]).long()]
        emb = merge_maxtext(text_emb, img, mask)
        assert max_abs(emb, merge_hf(text_emb, img, mask)) == 0.0
        margins = []
        logits = decoder(emb, w64, c, pos_bt3(pos_mt), margins=margins)
        deep = [f32(g, (n0 + n1, c["D"]), scale) for _ in range(2)]
        deep64 = [t64(d) for d in deep]
        logits_ds = decoder(emb, w64, c, pos_bt3(pos_mt), deep64, mask, margins)
        logits_ds2 = decoder(emb, w64, c, pos_bt3(pos_mt), deep64, mask, deep_fn=deepstack_direct)
        assert max_abs(logits_ds, logits_ds2) < 1e-13
        # greedy decode: generated token k at position max + 1 + k on all three rows
        seq, pos_seq, greedy, gaps, step_logits = ids.copy(), pos_mt.copy(), [], [], []
        last = logits[0, -1]
        for k in range(GREEDY_STEPS):
            srt = torch.sort(last, descending=True).values
            gaps.append(float(srt[0] - srt[1]))
            tok = int(torch.argmax(last))
            greedy.append(tok)
            nxt = int(pos_mt.max()) + 1 + k
            assert nxt == T + delta + k
            seq = np.append(seq, np.int32(tok))
            pos_seq = np.concatenate([pos_seq, np.full((3, 1), nxt)], axis=1)
            m_ext = torch.cat([mask, torch.zeros(1, k + 1, dtype=torch.bool)], dim=1)  # generated ids stay text
            e_ext = merge_maxtext(w64["token_embedder.embedding"][torch.from_numpy(seq[None]).long()], img, m_ext)
            full = decoder(e_ext, w64, c, pos_bt3(pos_seq), margins=margins)
            assert max_abs(full[:, :T], logits) < 1e-12  # causal: the prompt rows do not change
            last = full[0, -1]
            step_logits.append(last)
        if min(margins) < ROUTING_MARGIN or min(gaps) < GREEDY_MARGIN or max(greedy) >= VISION_START:
            continue
        controls = position_controls(ids, grids, pos_mt, emb, text_emb, w64, c, logits, logits_ds)
        if min(v["max_abs_diff_logits"] for v in controls.values()) > CONTROL_MIN:
            break
    else:
        raise RuntimeError("no prompt seed with clear routing / greedy decisions and large controls")
    decode_logits = torch.stack(step_logits)
    decode_positions = np.asarray([int(pos_mt.max()) + 1 + k for k in range(GREEDY_STEPS)], dtype=np.int32)

    # ---- cross-check with the HF formulation of the text side (float64 angles on both sides)
    c64 = text_settings(f32_angles=False)
    logits_f64 = decoder(emb, w64, c64, pos_bt3(pos_mt))
    hf_logits = hf_text_logits(hc, hf64, ids, merge_hf(text_emb, img, mask), pos_mt)
    hf_diff_f64 = max_abs(hf_logits, logits_f64)
    assert hf_diff_f64 < 1e-10, hf_diff_f64
    hf_diff_f32angles = max_abs(hf_logits, logits)

    # ---- controls (a-e computed in the seed loop above)
    top = float(logits.abs().max())

    def ctl(alt):
        dd = max_abs(alt, logits)
        return {"max_abs_diff_logits": dd, "relative_to_max_abs_logits": dd / top}

    # f: decode positions continuing at the sequence index (T + k) instead of max + 1 + k
    seq_f, pos_f, alt_steps = ids.copy(), pos_mt.copy(), []
    for k in range(GREEDY_STEPS):
        seq_f = np.append(seq_f, np.int32(greedy[k]))
        pos_f = np.concatenate([pos_f, np.full((3, 1), T + k)], axis=1)
        m_ext = torch.cat([mask, torch.zeros(1, k + 1, dtype=torch.bool)], dim=1)
        e_ext = merge_maxtext(w64["token_embedder.embedding"][torch.from_numpy(seq_f[None]).long()], img, m_ext)
        alt_steps.append(decoder(e_ext, w64, c, pos_bt3(pos_f))[0, -1])
    dd = max_abs(torch.stack(alt_steps), decode_logits)
    controls["f_decode_without_mrope_delta"] = {"max_abs_diff_decode_logits": dd,
                                                "relative_to_max_abs_decode_logits":
                                                    dd / float(decode_logits.abs().max())}
    worst = min(min(v for k, v in d.items() if k.startswith("max_abs")) for d in controls.values())
    assert worst > CONTROL_MIN, controls
    # informative: MaxText vs HF vision differences carried to the logits
    image_embeddings_unrounded = img64_exact.numpy().astype(F32)
    logits_unrounded = decoder(merge_maxtext(text_emb, t64(image_embeddings_unrounded), mask), w64, c, pos_bt3(pos_mt))
    info = {
        "hf_erf_gelu_merger_instead_of_maxtext_tanh": ctl(
            decoder(merge_maxtext(text_emb, t64(hf_vis_erf.numpy().astype(F32)), mask), w64, c, pos_bt3(pos_mt))),
        "position_embedding_not_rounded_to_bfloat16": ctl(logits_unrounded),
    }
    img_effects = {"hf_erf_gelu_merger": max_abs(hf_vis_erf, img64),
                   "position_embedding_not_rounded_to_bfloat16": max_abs(img64_exact, img64)}

    # ---- write
    d = case_dir(CASE)
    for f in os.listdir(d):
        if f.endswith(".npy") or f.endswith(".png"):
            os.remove(os.path.join(d, f))
    hd = os.path.join(d, "hf")
    os.makedirs(hd, exist_ok=True)
    save_safetensors(os.path.join(hd, "model.safetensors"), hf_all, {"format": "pt"})
    with open(os.path.join(hd, "config.json"), "w") as f:
        json.dump(hc, f, indent=1, sort_keys=True)
    shutil.copyfile(os.path.join(VISION_DIR, "hf", "preprocessor_config.json"),
                    os.path.join(hd, "preprocessor_config.json"))
    for name in ("image_0.png", "image_1.png", "pixel_values.npy", "grid_thw.npy"):
        shutil.copyfile(os.path.join(VISION_DIR, name), os.path.join(d, name))
    save_npy(d, "image_embeddings", image_embeddings)
    save_npy(d, "image_embeddings_unrounded_pos", image_embeddings_unrounded)
    save_npy(d, "logits_unrounded_pos", logits_unrounded[0].numpy().astype(F32))
    save_npy(d, "tokens", ids.astype(np.int32))
    save_npy(d, "positions", pos_mt.astype(np.int32))
    save_npy(d, "logits", logits[0].numpy().astype(F32))
    save_npy(d, "deepstack_0", deep[0])
    save_npy(d, "deepstack_1", deep[1])
    save_npy(d, "logits_deepstack", logits_ds[0].numpy().astype(F32))
    save_npy(d, "greedy", np.asarray(greedy, dtype=np.int32))
    save_npy(d, "decode_positions", decode_positions)
    save_npy(d, "decode_logits", decode_logits.numpy().astype(F32))

    pads = np.flatnonzero(ids == IMAGE_PAD)
    meta = {
        "what": "tiny multimodal Qwen3.5 (Qwen3_5MoeForConditionalGeneration: the qwen3_5_model text decoder + a "
                "2-block vision tower) and MaxText's float64 logits for a prompt holding two pictures, MRoPE at the "
                "real 3-D positions (get_rope_index), image-pad embeddings replaced by the vision rows",
        "token_ids": {"vision_start": VISION_START, "vision_end": VISION_END, "image_pad": IMAGE_PAD,
                      "video_pad": VIDEO_PAD, "text": "every other id is < 60"},
        "T": int(T), "n0": int(n0), "n1": int(n1), "grid_thw": [list(gr) for gr in grids],
        "merged_grids_hw": [[h // MERGE, w_ // MERGE] for _, h, w_ in grids],
        "image_pad_positions": [int(pads[0]), int(pads[n0 - 1]), int(pads[n0]), int(pads[-1])],
        "image_pad_positions_note": "[first, last] of picture 0, then [first, last] of picture 1 (inclusive)",
        "tokens": [int(v) for v in ids],
        "positions": pos_mt.astype(int).tolist(),
        "mrope_position_deltas": int(delta),
        "decode": {"rule": "MaxText prefill: next_pos = true_length + mrope_position_deltas = max(positions) + 1; "
                           "generated token k at position max + 1 + k on all three rows (HF: arange + rope_deltas, "
                           "the same)",
                   "greedy": greedy, "positions": decode_positions.tolist(), "argmax_gaps": gaps},
        "hf_get_rope_index_same_for_images": True,
        "hf_get_rope_index_note": "transformers' Qwen3_5MoeModel.get_rope_index counts vision_start as text before the "
                                  "grid (st_idx + text_len + (t, h, w)) where MaxText places it as a 'bos' at st_idx "
                                  "and the grid at st_idx + 1: the same numbers; vision_end and later text resume at "
                                  "max + 1 in both; rope deltas = max + 1 - T in both. Asserted equal on this prompt "
                                  "(and to a per-token construction). They differ for VIDEO: HF splits a video into "
                                  "grid_t frames of t = 1 (timestamps are text tokens), MaxText gives frame f the "
                                  "temporal position start + f * second_per_grid * position_id_per_seconds.",
        "vision": dict(VCFG, head_dim=VCFG["hidden_size"] // VCFG["num_heads"], seed=SEED,
                       pos_embedding="bfloat16-rounded (MaxText default), as tests/fixtures/qwen3_vision",
                       merger_gelu="tanh (MaxText; HF uses exact erf)"),
        "text_model": "tests/fixtures/qwen3_5_model (weights and text_config unchanged): 4 layers GDN, GDN, GDN, full "
                      "attention (layer 3: the only one that sees positions), hidden 32, head_dim 32, rotary_dim 8 "
                      "(partial 0.25), theta 10000, mrope_section [2, 1, 1] interleaved: rotary lanes 0..3 = T(1.0) "
                      "H(0.1) W(0.01) T(0.001) (inverse frequencies)",
        "files": {
            "hf/config.json": "Qwen3_5MoeForConditionalGeneration config: text_config of qwen3_5_model unchanged, "
                              "tiny vision_config, special token ids 60..63",
            "hf/model.safetensors": "qwen3_5_model's model.language_model.* and lm_head.weight unchanged (its dummy "
                                    "mtp.fc / model.visual stand-ins are not carried) + model.visual.* (f32)",
            "hf/preprocessor_config.json": "copy of tests/fixtures/qwen3_vision/hf/preprocessor_config.json",
            "image_0.png, image_1.png, pixel_values.npy, grid_thw.npy": "copies from tests/fixtures/qwen3_vision "
                                                                         "(pixel_values f32 [64, 96], processor order; "
                                                                         "grid_thw int32 [2, 3])",
            "image_embeddings.npy": "f32 [n0 + n1, 32]: MaxText vision encoder + projector per picture, concatenated",
            "image_embeddings_unrounded_pos.npy, logits_unrounded_pos.npy": "the same two outputs with the vision "
                "tower's learned position embedding kept in float32 (not rounded to bfloat16 as MaxText does by "
                "default; HF does not round either): the reference for a float32 vision tower run end to end from "
                "pixel_values. The rounding moves the logits by more than control b does (see informative_*)",
            "tokens.npy": "int32 [T] prompt ids",
            "positions.npy": "int32 [3, T] rows (temporal, height, width), get_rope_index",
            "logits.npy": "f32 [T, 64] (float64 math, float32 angles as MaxText) from tokens + image_embeddings.npy "
                          "(the float32 rows) at positions.npy",
            "deepstack_0.npy, deepstack_1.npy": "f32 [n0 + n1, 32] random (seeded, std of image_embeddings)",
            "logits_deepstack.npy": "f32 [T, 64]: as logits.npy with deepstack_j added after decoder layer j at the "
                                    "image-pad positions, in order (decoders.deepstack_process)",
            "greedy.npy": "int32 [4] greedy tokens after the prompt",
            "decode_positions.npy": "int32 [4] position (all three rows) of greedy[k] = max(positions) + 1 + k",
            "decode_logits.npy": "f32 [4, 64] logits after feeding greedy[k] at decode_positions[k] (row k predicts "
                                 "greedy[k + 1])",
        },
        "checks": {
            "text_only_logits_vs_qwen3_5_model_fixture_max_abs": text_only_diff,
            "vision_maxtext_vs_hf_formulation_max_abs (unrounded positions, tanh)": vision_hf_diff,
            "logits_vs_hf_formulation_float64_angles_max_abs": hf_diff_f64,
            "logits_vs_hf_formulation_maxtext_float32_angles_max_abs": hf_diff_f32angles,
            "positions": "MaxText get_rope_index loop == HF get_rope_index loop == per-token rule",
            "merge": "MaxText cumsum/where == masked_scatter (exact)",
            "deepstack": "cumsum gather == direct masked add",
            "min_routing_margin": min(margins),
        },
        "controls": controls,
        "controls_note": "a: all three rows = 0..T-1; b: rows 1 and 2 swapped; c: every text token at its sequence "
                         "index, each picture at (s, s + r, s + c) with s its first pad's index (Qwen2-VL-style "
                         "offsets); d: logits vs logits_deepstack; e: image-pad token embeddings kept; f: decode "
                         "positions T + k instead of max + 1 + k",
        "max_abs_logits": top,
        "informative_maxtext_vs_hf_vision_effects_on_logits": info,
        "informative_maxtext_vs_hf_vision_effects_on_image_embeddings": img_effects,
        "maxtext_config": {"text": "tests/fixtures/qwen3_5_model/config.yml (decoder_block qwen3_5, use_mrope true, "
                                   "mrope_section [2, 1, 1])",
                           "vision": {"use_multimodal": True, "vision_encoder_block": "qwen3_5",
                                      "hidden_size_for_vit": VCFG["hidden_size"],
                                      "intermediate_size_for_vit": VCFG["intermediate_size"],
                                      "num_attention_heads_for_vit": VCFG["num_heads"],
                                      "num_hidden_layers_for_vit": VCFG["depth"], "num_channels_for_vit": 3,
                                      "patch_size_for_vit": VCFG["patch_size"],
                                      "temporal_patch_size_for_vit": VCFG["temporal_patch_size"],
                                      "spatial_merge_size_for_vit": MERGE,
                                      "out_hidden_size_for_vit": VCFG["out_hidden_size"],
                                      "num_position_embeddings_for_vit": VCFG["num_position_embeddings"],
                                      "deepstack_visual_indexes_for_vit": [], "rope_theta_for_vit": 10000,
                                      "normalization_layer_epsilon": 1e-6},
                           "note": "MaxText takes the special ids from QWEN_SPECIAL_TOKEN_CONFIGS by model_name "
                                   "(qwen3.5 -> 248053/248054/248056/248057) and merges images only for listed "
                                   "model names; this fixture's ids (60..63) come from hf/config.json"},
        "maxtext_surprises": [
            "preprocess_mm_data_qwen3_omni reshapes all pictures' rows with the first picture's grid: two pictures "
            "of different sizes do not pass through decode.py; the encoder itself takes one grid per call",
            "merge_mm_embeddings leaves image pads beyond the number of image rows as text embeddings (HF raises)",
            "Qwen layers get no bidirectional mask: image tokens attend causally",
        ],
        "sources": ["MaxText e591f30: multimodal/processor_qwen3_omni.py (get_rope_index, get_llm_pos_ids_for_vision, "
                    "QwenTokens, preprocess_mm_data_qwen3_omni), multimodal/processor.py "
                    "(get_bidirectional_mask_vision), multimodal/utils.py (merge_mm_embeddings), models/models.py, "
                    "layers/decoders.py (_apply_embedding, deepstack_process, layer loop), layers/embeddings.py "
                    "(Qwen3OmniMoeThinkerTextRotaryEmbedding), inference/decode.py, inference/maxengine/maxengine.py",
                    "transformers models/qwen3_5_moe/modeling_qwen3_5_moe.py (get_rope_index, "
                    "compute_3d_position_ids, forward, Qwen3_5MoeTextRotaryEmbedding), configuration_qwen3_5_moe.py",
                    "tests/reference/qwen3_next_reference.py, qwen3_5_reference.py, qwen3_vision_reference.py"],
    }
    save_meta(d, meta)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    print(f"wrote {d} ({total / 1024:.0f} KiB)")
    print(f"T {T}, n0 {n0}, n1 {n1}, mrope delta {delta}, greedy {greedy} at {decode_positions.tolist()}")
    print("tokens   ", ids.tolist())
    np.set_printoptions(linewidth=200)
    print("positions\n", pos_mt)
    print(f"text-only vs qwen3_5_model {text_only_diff:.2e}; vision MaxText vs HF {vision_hf_diff:.2e}; "
          f"logits vs HF formulation {hf_diff_f64:.2e} (f64 angles), {hf_diff_f32angles:.2e} (MaxText f32 angles); "
          f"min routing margin {min(margins):.4f}; max |logits| {top:.3f}")
    for k, v in controls.items():
        print(f"  control {k}: {v}")
    for k, v in info.items():
        print(f"  info {k}: {v}")


if __name__ == "__main__":
    main()
