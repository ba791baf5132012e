"""MaxText's Gemma 3 multimodal forward pass (vision soft tokens merged into the text decoder, bidirectional attention
among a picture's tokens), re-stated in PyTorch float64 from float32 weights, with a tiny model.

Read (MaxText commit e591f30cbbf217ed67ef71263ec0538239f9c3b8, AI-Hypercomputer/maxtext):
  src/maxtext/models/models.py          Transformer.__call__: image_embeddings = vision_encoder(encoder_images) and
                                        bidirectional_mask = mm_processor.get_bidirectional_mask_vision(...) only when
                                        encoder_images is given; MultimodalInput(image_embeddings, bidirectional_mask).
  src/maxtext/multimodal/processor.py   get_bidirectional_mask_vision: gemma3 -> decoder_input_tokens ==
                                        GEMMA_TOKEN_PLACEHOLDER; prepare_text_for_image_fusion -> gemma3:
                                        add_extra_tokens_for_images_gemma3(tokens, max_num_images=num_images).
  src/maxtext/multimodal/processor_gemma3.py  constants (GEMMA_BEGIN_IMAGE_TOKEN 255999, GEMMA_END_IMAGE_TOKEN 256000,
                                        GEMMA_NEW_LINE_TOKEN 108, GEMMA_TOKEN_PLACEHOLDER 262144, 256 per image),
                                        insert_sequence / add_extra_tokens_for_images_gemma3, preprocess_mm_data_gemma3.
  src/maxtext/multimodal/utils.py       merge_mm_embeddings / _merge_mm_embeddings_inner, normalize_images.
  src/maxtext/layers/decoders.py        _apply_embedding (token embedding, then merge_mm_embeddings with
                                        mask=bidirectional_mask for gemma3-4b/12b/27b; no extra scaling of either);
                                        the GEMMA3 branches (unscanned: each layer gets bidirectional_mask;
                                        _apply_gemma3_scanned_blocks: broadcast to the scanned block and the remainder);
                                        apply_output_head (tied head, / sqrt(emb_dim)).
  src/maxtext/models/gemma3.py          Gemma3DecoderLayer / Gemma3ScannableBlock pass bidirectional_mask to Attention.
  src/maxtext/layers/attentions.py      Attention.__call__ -> attention_op(..., bidirectional_mask, ...).
  src/maxtext/layers/attention_op.py    generate_attention_mask: (segment &) causal, then sliding window (AND), then
                                        `output_mask | _make_bidirectional_block_mask(bidirectional_mask)`;
                                        _make_block_mask_indices; apply_attention (GPU flash path: see below).
  src/maxtext/layers/embeddings.py      Embed.__call__ (plain row gather), attend_on_embedding (table cast to bf16).
Hugging Face transformers (huggingface/transformers, src/transformers/models/gemma3/modeling_gemma3.py as stored at
commit 0018aa647bb13801f061e2d1027c326f531b59fb; src/transformers/masking_utils.py at 00c4411c): Gemma3Model.forward
(embedding * embed_scale, masked_scatter of get_image_features at input_ids == image_token_id),
create_causal_mask_mapping + token_type_ids_mask_function (image groups: a new group where token_type_ids turns 1;
OR'ed into both the full and the sliding mask functions, before padding), Gemma3TextModel / Gemma3DecoderLayer /
Gemma3Attention / Gemma3RMSNorm / Gemma3RotaryEmbedding, Gemma3ForConditionalGeneration._checkpoint_conversion_mapping
(older `language_model.model.*`, `vision_tower.*`, `multi_modal_projector.*` -> newer `model.language_model.*`,
`model.vision_tower.*`, `model.multi_modal_projector.*`).

The text decoder is gemma_reference.py's Gemma 3 (its HF weights, fold(), attn_args(), block(): the MaxText folding
embedding * bf16(sqrt(32)), norms + 1; the tied head on the bf16-rounded table / sqrt(32)); the vision tower is
gemma3_vision_reference.py's (maxtext_weights, hf_weights, maxtext_forward, hf_forward, maxtext_preprocess). This file
adds (MaxText semantics; each checked against a second, HF-style statement):

  ids: add_extra_tokens_for_images_gemma3 with max_num_images = number of pictures (processor.py passes
    processor_output.num_images): every <start_of_image> marker (here id 120) becomes
    [108 "\\n\\n", 120, 256 x 122, 121, 108 "\\n\\n"]; the other tokens shift. (insert_sequence, ported literally.)
  merge: x = embedding[ids] (MaxText's folded table: E * bf16(sqrt(32)) in float32); soft tokens [B, n_img, 256, D]
    flattened to [B, n_img*256, D]; with c = cumsum(mask != 0) the k-th masked position (k = c - 1) takes row k
    (positions with c > n_img*256 keep their text embedding); the soft tokens themselves are not scaled.
  mask: per layer, allowed = causal (key <= query), AND (sliding layers: 5 of every 6) key > query - 3; then OR
    block[t, s] = (blk[t] == blk[s]) & (blk[t] > 0) where blk numbers the runs of consecutive masked tokens 1, 2, ...
    (0 elsewhere). So a picture's tokens see the whole picture, in sliding layers too (the window does not apply
    inside a picture); text tokens and <start/end_of_image> attend causally.
  positions: 0 .. T-1 over the expanded sequence (image tokens included), the usual Gemma 3 RoPE per layer.

Tiny-model choices: the HF text embedding rows are drawn N(0, 1) as in gemma_reference and scaled by EMBED_STD = 0.3
(with std 1 the residual stream is dominated by the token's own row and greedy decoding just repeats the last
token); prompt [2, 5, 9, <boi>, 14, 7, <boi>, 33, 17] -> T = 527 (pictures at [5, 261) and [267, 523)); the decoder
takes the float64 soft tokens (image_tokens.npy is their float32 rounding). The model seed is the first of SEEDS whose
8 greedy steps all have a top-1 / top-2 gap >= 1e-3 and emit none of 120 / 121 / 122 (7001 passes: gaps >= 0.54).

Checks run on every write: the literal insert_sequence port equals a plain list expansion; merged rows equal the
soft tokens in order; the block mask has exactly 2 * 256^2 entries; both safetensors files read back bit-exactly
and hold the same tensors under the two namings; the MaxText tower equals the HF tower (gemma3_vision_reference) to
1e-10; and the merged, causal and text-only logits are recomputed from hf/model.safetensors with HF's formulation
(embedding * bf16(sqrt(32)), masked_scatter, token_type_ids groups OR'ed into both mask kinds, (1 + w) norms,
repeat_kv / rotate_half, lm_head = the unrounded embedding, times bf16(sqrt(32)) / sqrt(32), RoPE angles formed as
MaxText forms them) against MaxText with an unrounded head table: max |diff| <= 1e-6 * max |logit| is asserted (it is
~2.6e-7 relative, all of it the float32 rounding of the folded weights: with the folded values mapped back exactly
the two statements agree to ~1e-14), and HF picks the same 8 greedy tokens. meta.json "hf_check" also reports
what the realistic differences to a float32 HF run are made of (bf16 head table ~1.3e-2, float32 sqrt(32) instead of
bf16(sqrt(32)) ~1.5e-3, HF's float32 RoPE angles ~4e-6). MaxText and HF agree on every semantic point here: the
picture's tokens see the whole picture even in sliding-window layers (both OR the picture mask after the window).

Noted in MaxText's source (not exercised here): the bidirectional mask exists only when encoder_images is passed
(models.py), i.e. in training / prefill; autoregressive steps carry none (generated tokens attend causally to the
cache, and the picture's K/V were computed with the mask during prefill). Only the dot_product kernel and TPU
splash/flash take bidirectional_mask; the GPU flash kernels (tokamax Pallas Triton, cudnn_flash_te, cudnn_flash_jax)
ignore it (and the sliding window).

Writes tests/fixtures/gemma3_mm_model/ (see meta.json "files"): hf/ and hf_new/ (config.json + model.safetensors,
float32, the two HF layouts), image_a.png, image_b.png, prompt_ids.npy, ids.npy, image_mask.npy, pixels.npy,
image_tokens.npy, logits.npy, logits_causal.npy, logits_text.npy, greedy.npy, meta.json.
Run: /usr/bin/python3 tests/reference/gemma3_multimodal_reference.py
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_reference import rms_norm, sub, to64  # noqa: E402
from common import bf16_round, case_dir, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402
import gemma3_vision_reference as gv  # noqa: E402
import gemma_reference as gr  # noqa: E402
from PIL import Image  # noqa: E402

F32 = np.float32
CASE = "gemma3_mm_model"
MAXTEXT_COMMIT = "e591f30cbbf217ed67ef71263ec0538239f9c3b8"
HF_COMMIT = "0018aa647bb13801f061e2d1027c326f531b59fb"

# Text decoder (as gemma_reference's gemma3_model, vocab 128)
D, N, K, H, FF, L, V = 32, 4, 2, 8, 48, 7, 128
EPS = 1e-6
WINDOW = 3
# Token ids of the tiny vocabulary (MaxText's constants 255999 / 256000 / 262144 mapped into it; 108 kept)
BOI, EOI, IMG, NL = 120, 121, 122, 108
MM = 256
# Vision tower (as gemma3_vision_reference's gemma3_vision_pool: 64x64, patch 2 -> 1024 patches pooled 2x2 to 256)
VC = dict(image_size=64, p=2, D=16, heads=2, F=24, L=2, E=D, N=2, T=(64 // 2) ** 2)
PROMPT = [2, 5, 9, BOI, 14, 7, BOI, 33, 17]
IMAGE_FILES = ["image_a.png", "image_b.png"]  # first marker -> image_a, second -> image_b
IMAGE_SIZES = [(80, 48), (40, 56)]  # (width, height): a is larger than 64 in width (LANCZOS), b is smaller (BILINEAR)
IMAGE_SEED = 7000
SEEDS = list(range(7001, 7041))  # model seeds tried in order until the greedy gaps are safe
GREEDY_STEPS = 8
EMBED_STD = 0.3  # HF embed_tokens rows drawn N(0, 1) then scaled by this (see build)
MIN_GAP = 1e-3

MT_CFG = {"decoder_block": "gemma3", "model_name": "gemma3-4b", "dtype": "float32", "weight_dtype": "float32",
          "base_emb_dim": D, "base_num_query_heads": N, "base_num_kv_heads": K, "head_dim": H, "base_mlp_dim": FF,
          "base_num_decoder_layers": L, "vocab_size": V, "normalization_layer_epsilon": EPS,
          "mlp_activations": ["gelu", "linear"], "logits_via_embedding": True, "sliding_window_size": WINDOW,
          "use_post_attn_norm": True, "use_post_ffw_norm": True, "local_rope_max_timescale": 10000.0,
          "rope_max_timescale": 1000000.0, "rope_linear_scaling_factor": 8.0, "max_target_length": 1024,
          "use_multimodal": True, "image_size_for_vit": VC["image_size"], "patch_size_for_vit": VC["p"],
          "conv_stride_for_vit": VC["p"], "num_channels_for_vit": 3, "hidden_size_for_vit": VC["D"],
          "intermediate_size_for_vit": VC["F"], "num_hidden_layers_for_vit": VC["L"],
          "num_attention_heads_for_vit": VC["heads"], "posemb_type_for_vit": "learn"}


# ----------------------------------------------------------------------------------------------------------------
# Token expansion (processor_gemma3.insert_sequence / add_extra_tokens_for_images_gemma3, ported literally)

def _get_new_text_positions(offset_on, offset_by):
    offset = np.cumsum(offset_on, axis=-1) * offset_by
    new_positions = np.arange(offset_on.shape[-1]) + offset
    new_positions -= offset_by * offset_on
    return new_positions


def insert_sequence(tokens, at, sequence, max_num_images):
    original_dim = tokens.ndim
    if original_dim == 1:
        tokens = tokens[None, :]
    batch_size, length = tokens.shape
    mm_tokens_to_insert = np.array(sequence)
    offset_by = len(mm_tokens_to_insert) - 1
    length_with_mm = length + max_num_images * offset_by
    mm_start = tokens == at
    new_tokens = np.zeros((batch_size, length_with_mm), dtype=np.int64)
    new_text_pos = _get_new_text_positions(offset_on=mm_start, offset_by=offset_by)
    np.put_along_axis(new_tokens, new_text_pos, tokens, axis=1)
    batch_indices_to_zero, _ = np.where(mm_start)
    new_pos_to_zero = new_text_pos[mm_start]
    if batch_indices_to_zero.size > 0:
        new_tokens[batch_indices_to_zero, new_pos_to_zero] = 0
    batch_indices, seq_indices = np.nonzero(mm_start)
    if batch_indices.size > 0:
        intra_batch_img_idx = np.cumsum(mm_start, axis=1)[mm_start] - 1
        final_img_start_pos = seq_indices + intra_batch_img_idx * offset_by
        indices_to_insert = final_img_start_pos[:, None] + np.arange(len(mm_tokens_to_insert))
        new_tokens[batch_indices[:, None], indices_to_insert] = mm_tokens_to_insert
    if original_dim == 1:
        new_tokens = np.squeeze(new_tokens)
    return new_tokens


def expand_prompt(prompt, num_images):
    seq = [NL, BOI, *[IMG] * MM, EOI, NL]
    ids = insert_sequence(np.asarray(prompt)[None, :], at=BOI, sequence=seq, max_num_images=num_images)
    # Second statement (HF Gemma3Processor: each boi replaced by "\n\n" boi image*256 eoi "\n\n")
    alt = []
    for t in prompt:
        alt.extend(seq if t == BOI else [t])
    assert ids.shape == (1, len(alt)) and (ids[0] == np.asarray(alt)).all()
    return ids.astype(np.int32)


# ----------------------------------------------------------------------------------------------------------------
# MaxText: merge, block mask, decoder

def merge_mm_embeddings(text, mm, mask):
    """utils.merge_mm_embeddings (no token_masks): text [B, S, D], mm [B, n, k, D] (any shape that flattens to
    [B, n * k, D]) -> [B, S, D]."""
    B, _, d = text.shape
    flat = mm.reshape(B, -1, d)
    out = []
    for b in range(B):  # jax.vmap over the batch
        m = torch.as_tensor(mask[b]) != 0
        c = torch.cumsum(m.long(), 0)
        keep = m & (c <= flat.shape[1])
        idx = torch.clamp(c - 1, 0, flat.shape[1] - 1)
        out.append(torch.where(keep[:, None], flat[b][idx], text[b]))
    return torch.stack(out)


def bidirectional_block_mask(bidir):
    """attention_op._make_bidirectional_block_mask: [B, L] -> [B, L, L] bool."""
    m = torch.as_tensor(np.asarray(bidir, dtype=np.int64))
    padded = torch.nn.functional.pad(m, (1, 0), value=0)
    boundary = padded[..., 1:] > padded[..., :-1]
    numbered = torch.cumsum(boundary.long(), -1)
    q = m * numbered
    return (q[:, None, :] == q[..., None]) & (q[..., None] > 0)


def maxtext_decoder(w, ids, soft=None, merge_mask=None, bidir=None, round_table=True):
    """Decoder over ids [B, T]; soft tokens merged at merge_mask; bidir: bidirectional_mask (None: no OR)."""
    w64 = to64(w)
    B, T = ids.shape
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    x = w64["token_embedder.embedding"][torch.from_numpy(ids.astype(np.int64))]
    if soft is not None:
        x = merge_mm_embeddings(x, soft, merge_mask)
    extra = bidirectional_block_mask(bidir) if bidir is not None else None
    for i in range(L):
        a = gr.attn_args("gemma3", MT_CFG, i, False, N, K, H)
        if extra is not None:
            a["allowed_or"] = extra
        x, _, _ = gr.block(x, sub(w64, "decoder.layers_%d." % i), a, pos, "", True, EPS)
    x = rms_norm(x, w64["decoder.decoder_norm.scale"], EPS)
    table = bf16_round(w["token_embedder.embedding"]) if round_table else w["token_embedder.embedding"]
    return x @ t64(table).T / math.sqrt(D)  # no final soft cap for gemma3


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face: Gemma3Model.forward + Gemma3ForConditionalGeneration head, written out from the HF tensors

def hf_rope_cos_sin(pos, theta, factor, mode):
    """cos, sin [T, H] float64 for one layer type. mode "maxtext": angles as MaxText forms them (float32
    pos / float32 timescale, as default_rope); mode "hf": Gemma3RotaryEmbedding (inv_freq in float32, / factor for
    linear scaling, freqs = inv_freq * pos in float32, cos/sin in float32)."""
    p = np.asarray(pos, dtype=np.int64)
    if mode == "maxtext":
        frac = (2 * np.arange(H // 2, dtype=np.int32)).astype(F32) / F32(H)
        ts = np.power(F32(theta), frac, dtype=F32)
        if factor != 1.0:
            ts = (ts * F32(factor)).astype(F32)
        ang = t64((p.astype(F32)[:, None] / ts[None, :]).astype(F32))
        ang = torch.cat([ang, ang], -1)
        return torch.cos(ang), torch.sin(ang)
    inv = 1.0 / (theta ** (torch.arange(0, H, 2, dtype=torch.int64).to(torch.float32) / H))
    inv = inv / factor
    fr = inv[None, :] * torch.from_numpy(p).to(torch.float32)[:, None]
    emb = torch.cat([fr, fr], -1)
    return emb.cos().double(), emb.sin().double()


def rotate_half(x):
    return torch.cat([-x[..., H // 2:], x[..., :H // 2]], -1)


def hf_mm_forward(t, hc, ids, pixels, normalizer, rope_mode, merge=True, groups=True):
    """t: HF tensors (older layout names; float64 torch). Returns logits [B, T, V] (lm_head = embed, no rounding).
    merge=False: no pixel_values (ids as text); groups=False: no token_type_ids (plain causal / sliding masks)."""
    tc = hc["text_config"]
    lm = "language_model.model."
    B, T = ids.shape
    ids_t = torch.from_numpy(ids.astype(np.int64))
    # get_image_features: vision tower + projector (gemma3_vision_reference.hf_forward, on the HF names)
    o = {k: v.numpy() for k, v in t.items() if k.startswith(("vision_tower.", "multi_modal_projector."))}
    # inputs_embeds = embed_tokens(ids) * embed_scale; masked_scatter at ids == image_token_id
    x = t[lm + "embed_tokens.weight"][ids_t] * normalizer
    if merge:
        feats = gv.hf_forward(o, pixels, VC)["out"]  # [n_img, 256, D]
        special = (ids_t == hc["image_token_index"])[..., None].expand_as(x)
        assert int(special.sum()) == feats.numel()
        x = x.masked_scatter(special, feats.to(x.dtype))
    # token_type_ids (processor: 1 at image tokens) -> image groups (create_causal_mask_mapping)
    tt = (ids_t == hc["image_token_index"]).long() * int(groups)
    is_image = tt == 1
    prev = torch.nn.functional.pad(is_image, (1, 0), value=False)[:, :-1]
    group = torch.cumsum((is_image & ~prev).int(), 1) - 1
    group = torch.where(is_image, group, torch.full_like(group, -1))
    qi = torch.arange(T)[:, None]
    ki = torch.arange(T)[None, :]
    img_or = (is_image[:, :, None] & is_image[:, None, :]) & (group[:, :, None] == group[:, None, :])
    causal = (ki <= qi)[None]
    masks = {"full_attention": causal | img_or,
             "sliding_attention": (causal & (ki > qi - tc["sliding_window"])[None]) | img_or}
    pos = np.arange(T)
    rope = {"full_attention": hf_rope_cos_sin(pos, tc["rope_theta"], tc["rope_scaling"]["factor"], rope_mode),
            "sliding_attention": hf_rope_cos_sin(pos, tc["rope_local_base_freq"], 1.0, rope_mode)}
    eps = tc["rms_norm_eps"]

    def norm(v, wt):  # Gemma3RMSNorm
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + wt)

    nq, nk, hd = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    scaling = tc["query_pre_attn_scalar"] ** -0.5
    for i in range(tc["num_hidden_layers"]):
        p = lm + "layers.%d." % i
        lt = tc["layer_types"][i]
        r = x
        h = norm(x, t[p + "input_layernorm.weight"])
        q = (h @ t[p + "self_attn.q_proj.weight"].T).view(B, T, nq, hd).transpose(1, 2)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).view(B, T, nk, hd).transpose(1, 2)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).view(B, T, nk, hd).transpose(1, 2)
        q, k = norm(q, t[p + "self_attn.q_norm.weight"]), norm(k, t[p + "self_attn.k_norm.weight"])
        cos, sin = rope[lt]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nq // nk, dim=1)  # repeat_kv
        v = v.repeat_interleave(nq // nk, dim=1)
        s = (q @ k.transpose(2, 3)) * scaling
        s = s.masked_fill(~masks[lt][:, None], torch.finfo(torch.float64).min)
        at = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, nq * hd) @ t[p + "self_attn.o_proj.weight"].T
        x = r + norm(at, t[p + "post_attention_layernorm.weight"])
        r = x
        h = norm(x, t[p + "pre_feedforward_layernorm.weight"])
        m = (gr.gelu_tanh(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)) \
            @ t[p + "mlp.down_proj.weight"].T
        x = r + norm(m, t[p + "post_feedforward_layernorm.weight"])
    x = norm(x, t[lm + "norm.weight"])
    return x @ t[lm + "embed_tokens.weight"].T  # tied lm_head, no final soft cap


# ----------------------------------------------------------------------------------------------------------------
# Files

def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", k
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype="<f4").reshape(v["shape"])
    return out


def make_images(d):
    """Deterministic smooth-but-varied RGB pictures (gradients, patterns, noise), written with Pillow, read back."""
    g = rng(IMAGE_SEED)
    arrs = []
    for j, (wd, ht) in enumerate(IMAGE_SIZES):
        y, x = np.mgrid[0:ht, 0:wd].astype(np.float64)
        u, v = x / (wd - 1), y / (ht - 1)
        if j == 0:
            c = [255 * u, 255 * v, 127.5 + 90 * np.sin(2 * np.pi * (x / 17 + y / 11))]
        else:
            rr = np.hypot(u - 0.4, v - 0.6)
            c = [255 * (1 - v), 127.5 + 110 * np.cos(2 * np.pi * 3 * rr), 255 * (0.3 + 0.7 * u * v)]
        img = np.stack(c, -1) + g.normal(0.0, 12.0, (ht, wd, 3))
        img = np.clip(np.rint(img), 0, 255).astype(np.uint8)
        path = os.path.join(d, IMAGE_FILES[j])
        Image.fromarray(img, "RGB").save(path)
        with Image.open(path) as im:
            back = np.asarray(im.convert("RGB"))
        assert back.shape == (ht, wd, 3) and np.array_equal(back, img)
        arrs.append(back)
    return arrs


def hf_config():
    text = gr.hf_config("gemma3", D, N, K, H, FF, L, V, {
        "sliding_window": WINDOW, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "query_pre_attn_scalar": 8,
        "sliding_window_pattern": 6, "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(L)],
        "max_position_embeddings": 1024})
    del text["architectures"]
    vision = dict(gv.hf_config(VC)["vision_config"], vision_use_head=False)
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "boi_token_index": BOI,
            "eoi_token_index": EOI, "image_token_index": IMG, "mm_tokens_per_image": MM, "text_config": text,
            "vision_config": vision}


def new_layout(name):
    for old, new in (("language_model.model.", "model.language_model."), ("vision_tower.", "model.vision_tower."),
                     ("multi_modal_projector.", "model.multi_modal_projector.")):
        if name.startswith(old):
            return new + name[len(old):]
    raise KeyError(name)


# ----------------------------------------------------------------------------------------------------------------

def build(seed, ids, mask, pixels):
    """Weights for one seed and the MaxText-path outputs; returns a dict."""
    g = rng(seed)
    hw = gr.hf_weights(g, "gemma3", D, N, K, H, FF, L, V)  # model.* names, HF (unfolded) values
    # Smaller text embedding rows than gemma_reference's std 1: the residual stream is then not dominated by the
    # token's own row (with std 1 the greedy continuation just repeats the last token), and text rows * sqrt(32)
    # (rms ~1.7) are of the soft tokens' size (rms ~0.9).
    hw["model.embed_tokens.weight"] = (hw["model.embed_tokens.weight"] * F32(EMBED_STD)).astype(F32)
    w = gr.fold("gemma3", hw, D, N, K, H, L, 0)  # MaxText tree (unscanned names)
    vw, hf_norm = gv.maxtext_weights(g, VC)
    vo = gv.hf_weights(vw, hf_norm, VC)  # vision_tower.vision_model.* / multi_modal_projector.*
    tower = gv.maxtext_forward(vw, pixels, VC)["out"]  # [n_img, 256, D] float64
    soft = tower.reshape(1, VC["N"], MM, D)  # [B, N, 256, D] as the vision encoder returns it
    logits = maxtext_decoder(w, ids, soft, mask, mask)
    greedy, gaps, seq = [], [], ids
    for step in range(GREEDY_STEPS):
        m = np.concatenate([mask, np.zeros((1, seq.shape[1] - mask.shape[1]), np.int32)], 1)
        lg = logits if step == 0 else maxtext_decoder(w, seq, soft, m, m)
        last = lg[0, -1]
        top = torch.topk(last, 2)
        greedy.append(int(top.indices[0]))
        gaps.append(float(top.values[0] - top.values[1]))
        seq = np.concatenate([seq, np.array([[greedy[-1]]], np.int32)], 1)
    return {"hw": hw, "w": w, "vw": vw, "vo": vo, "tower": tower, "soft": soft, "logits": logits,
            "greedy": greedy, "gaps": gaps}


def main():
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    d = case_dir(CASE)
    imgs = make_images(d)
    pre = [gv.maxtext_preprocess(im, VC["image_size"]) for im in imgs]
    pixels = np.stack([x for x, _ in pre]).astype(F32)
    filters = [nm for _, nm in pre]
    assert filters == ["lanczos", "bilinear"], filters
    prompt = np.asarray([PROMPT], np.int32)
    ids = expand_prompt(prompt[0], num_images=VC["N"])
    mask = (ids == IMG).astype(np.int32)
    T = ids.shape[1]
    assert T == len(PROMPT) + VC["N"] * (MM + 4 - 1) and int(mask.sum()) == VC["N"] * MM

    tried = []
    for seed in SEEDS:
        r = build(seed, ids, mask, pixels)
        ok = min(r["gaps"]) >= MIN_GAP and not set(r["greedy"]) & {BOI, EOI, IMG}
        tried.append({"seed": seed, "min_gap": min(r["gaps"]), "greedy": r["greedy"], "accepted": ok})
        print("seed %d: greedy %s, min gap %.3g%s" % (seed, r["greedy"], min(r["gaps"]), "" if ok else " (rejected)"))
        if ok:
            break
    else:
        raise RuntimeError("no seed gave greedy gaps >= %g" % MIN_GAP)
    w, hw, vo = r["w"], r["hw"], r["vo"]
    logits = r["logits"]
    logits_causal = maxtext_decoder(w, ids, r["soft"], mask, None)
    logits_text = maxtext_decoder(w, ids, None, None, None)

    # Sanity: the merged rows are exactly the soft tokens, in order; other rows are the text embedding.
    emb = to64(w)["token_embedder.embedding"][torch.from_numpy(ids.astype(np.int64))]
    merged = merge_mm_embeddings(emb, r["soft"], mask)
    assert torch.equal(merged[0][torch.from_numpy(mask[0] == 1)], r["tower"].reshape(-1, D))
    assert torch.equal(merged[0][torch.from_numpy(mask[0] == 0)], emb[0][torch.from_numpy(mask[0] == 0)])
    blk = bidirectional_block_mask(mask)[0]
    starts = [int(i) for i in np.flatnonzero(np.diff(np.concatenate([[0], mask[0]])) == 1)]
    assert len(starts) == 2 and int(blk.sum()) == 2 * MM * MM
    assert bool(blk[starts[0], starts[0] + MM - 1]) and not bool(blk[starts[0], starts[1]])

    # HF files (older and newer layouts), written and read back
    hf_old = {("language_model." + k): v for k, v in hw.items()}
    hf_old.update(vo)
    assert all(v.dtype == F32 for v in hf_old.values())
    hc = hf_config()
    for sub_dir, tensors in (("hf", hf_old), ("hf_new", {new_layout(k): v for k, v in hf_old.items()})):
        p = os.path.join(d, sub_dir)
        os.makedirs(p, exist_ok=True)
        with open(os.path.join(p, "config.json"), "w") as f:
            json.dump(hc, f, indent=1, sort_keys=True)
        save_safetensors(os.path.join(p, "model.safetensors"), tensors, {"format": "pt"})
        back = read_safetensors(os.path.join(p, "model.safetensors"))
        assert sorted(back) == sorted(tensors) and all(np.array_equal(back[k], tensors[k]) for k in tensors)
    back_new = read_safetensors(os.path.join(d, "hf_new", "model.safetensors"))
    t_hf = {k: t64(v) for k, v in read_safetensors(os.path.join(d, "hf", "model.safetensors")).items()}
    assert all(np.array_equal(back_new[new_layout(k)], v.numpy().astype(F32)) for k, v in t_hf.items())

    # Vision: the MaxText tower equals HF's formulation on the HF tensors
    err_tower = (r["tower"] - gv.hf_forward(vo, pixels, VC)["out"]).abs().max().item()
    assert err_tower < 1e-10, err_tower

    # HF cross-check of the merged logits.
    nb = float(bf16_round(np.array([math.sqrt(D)], F32))[0])  # MaxText's converter: bf16 sqrt(hidden_size)
    assert np.array_equal(w["token_embedder.embedding"], (hw["model.embed_tokens.weight"] * F32(nb)).astype(F32))
    ratio = nb / math.sqrt(D)
    unrounded = maxtext_decoder(w, ids, r["soft"], mask, mask, round_table=False)
    hf_tight = hf_mm_forward(t_hf, hc, ids, pixels, nb, "maxtext") * ratio
    scale = logits.abs().max().item()
    err_tight = (unrounded - hf_tight).abs().max().item()
    assert err_tight <= 1e-6 * scale, (err_tight, scale)
    # The same for the two variants, and HF's greedy choices over the same prefixes
    err_variants = {}
    for name, mt, kw in (("causal", maxtext_decoder(w, ids, r["soft"], mask, None, round_table=False),
                          {"groups": False}),
                         ("text", maxtext_decoder(w, ids, None, None, None, round_table=False),
                          {"merge": False, "groups": False})):
        err_variants[name] = (mt - hf_mm_forward(t_hf, hc, ids, pixels, nb, "maxtext", **kw) * ratio).abs().max().item()
        assert err_variants[name] <= 1e-6 * scale, (name, err_variants[name])
    seq = ids
    for tok in r["greedy"]:
        hl = hf_mm_forward(t_hf, hc, seq, pixels, nb, "maxtext")[0, -1]
        assert int(hl.argmax()) == tok
        seq = np.concatenate([seq, np.array([[tok]], np.int32)], 1)
    err_table = (logits - unrounded).abs().max().item()
    hf_pure = hf_mm_forward(t_hf, hc, ids, pixels, float(F32(math.sqrt(D))), "hf")
    err_pure = (logits - hf_pure).abs().max().item()
    hf_pure_angles = hf_mm_forward(t_hf, hc, ids, pixels, nb, "hf") * ratio
    err_angles = (unrounded - hf_pure_angles).abs().max().item()
    hf_f32scale = hf_mm_forward(t_hf, hc, ids, pixels, float(F32(math.sqrt(D))), "maxtext")
    err_normaliser = (unrounded - hf_f32scale).abs().max().item()
    # The causal and text-only variants, HF-side too (no token_type_ids / no pixel merge)
    d_causal = (logits - logits_causal).abs()
    d_text = (logits - logits_text).abs()
    after_a = slice(starts[0] + MM, T)
    print("merged logits: max|logits| %.4f; max|logits - causal| %.4g (text after picture a: %.4g); "
          "max|logits - text-only| %.4g" % (scale, d_causal.max().item(), d_causal[0, after_a].max().item(),
                                            d_text.max().item()))
    print("HF cross-check (bf16 normaliser, MaxText angles, x %.7f): %.3g (rel %.3g); bf16 table rounding moves "
          "logits by %.3g; HF with HF's float32 RoPE angles: %.3g; HF with float32 sqrt(32) normaliser: %.3g; plain "
          "HF float32-style vs fixture: %.3g" % (ratio, err_tight, err_tight / scale, err_table, err_angles,
                                                  err_normaliser, err_pure))

    save_npy(d, "prompt_ids", prompt)
    save_npy(d, "ids", ids)
    save_npy(d, "image_mask", mask)
    save_npy(d, "pixels", pixels)
    save_npy(d, "image_tokens", r["tower"].numpy().astype(F32))
    save_npy(d, "logits", logits.numpy().astype(F32))
    save_npy(d, "logits_causal", logits_causal.numpy().astype(F32))
    save_npy(d, "logits_text", logits_text.numpy().astype(F32))
    save_npy(d, "greedy", np.asarray(r["greedy"], np.int32))
    blocks = [[s, s + MM] for s in starts]
    save_meta(d, {
        "what": "Tiny Gemma 3 multimodal model (Gemma3ForConditionalGeneration): MaxText's merged forward (soft tokens "
                "at the image-token positions, bidirectional attention within each picture), float64 from float32 "
                "weights",
        "maxtext_commit": MAXTEXT_COMMIT, "hf_transformers_modeling_gemma3_commit": HF_COMMIT,
        "seed": seed, "seeds_tried": tried, "image_seed": IMAGE_SEED,
        "sizes": {"batch": 1, "prompt_length": len(PROMPT), "length": T, "vocab": V, "emb_dim": D, "layers": L,
                  "heads": N, "kv_heads": K, "head_dim": H, "mlp_dim": FF, "sliding_window": WINDOW,
                  "num_images": VC["N"], "mm_tokens_per_image": MM, "image_size": VC["image_size"],
                  "patch_size": VC["p"], "vision_hidden": VC["D"], "vision_layers": VC["L"],
                  "vision_heads": VC["heads"], "vision_mlp": VC["F"]},
        "token_ids": {"boi": BOI, "eoi": EOI, "image": IMG, "newline_newline": NL,
                      "maxtext_constants": {"GEMMA_BEGIN_IMAGE_TOKEN": 255999, "GEMMA_END_IMAGE_TOKEN": 256000,
                                            "GEMMA_TOKEN_PLACEHOLDER": 262144, "GEMMA_NEW_LINE_TOKEN": 108}},
        "expansion": "each boi in prompt_ids -> [108, 120, 256 x 122, 121, 108] (add_extra_tokens_for_images_gemma3, "
                     "max_num_images = 2)",
        "image_blocks": blocks, "image_files": IMAGE_FILES, "image_sizes_wh": IMAGE_SIZES,
        "preprocess_filters": filters,
        "maxtext_config": MT_CFG,
        "max_abs_logit": scale,
        "max_abs_logits_minus_causal": d_causal.max().item(),
        "max_abs_logits_minus_causal_text_after_first_picture": d_causal[0, after_a].max().item(),
        "max_abs_logits_minus_text": d_text.max().item(),
        "greedy": r["greedy"], "greedy_gaps": r["gaps"],
        "hf_check": {
            "tight": "HF formulation from hf/model.safetensors (masked_scatter, token_type_ids groups, (1 + w) norms, "
                     "embedding * bf16(sqrt(32)), RoPE angles formed as MaxText, lm_head = embedding unrounded) x "
                     "bf16(sqrt(32)) / sqrt(32), vs MaxText with an unrounded table",
            "tight_max_abs_diff": err_tight,
            "tight_max_abs_diff_causal_variant": err_variants["causal"],
            "tight_max_abs_diff_text_variant": err_variants["text"],
            "greedy_agrees": True,
            "bf16_table_rounding_effect": err_table,
            "hf_float32_rope_angles_effect": err_angles,
            "float32_sqrt32_normaliser_effect": err_normaliser,
            "plain_hf_float32_semantics_vs_logits": err_pure,
            "vision_tower_max_abs_diff": err_tower},
        "files": {
            "hf/config.json, hf/model.safetensors": "Gemma3ForConditionalGeneration, float32, older names "
                                                    "(language_model.model.*, vision_tower.vision_model.*, "
                                                    "multi_modal_projector.*), no lm_head (tied)",
            "hf_new/config.json, hf_new/model.safetensors": "the same tensors, newer names (model.language_model.*, "
                                                            "model.vision_tower.vision_model.*, "
                                                            "model.multi_modal_projector.*)",
            "image_a.png": "80 x 48 RGB (first picture; resized with LANCZOS)",
            "image_b.png": "40 x 56 RGB (second picture; resized with BILINEAR)",
            "prompt_ids.npy": "int32 [1, %d] unexpanded prompt, two boi markers" % len(PROMPT),
            "ids.npy": "int32 [1, %d] expanded as add_extra_tokens_for_images_gemma3" % T,
            "image_mask.npy": "int32 [1, %d] 1 where ids == %d (MaxText's bidirectional_mask)" % (T, IMG),
            "pixels.npy": "float32 [2, 64, 64, 3] preprocess_mm_data_gemma3 at 64 x 64 (NHWC, [-1, 1])",
            "image_tokens.npy": "float32 [2, 256, 32] VisionEmbedder output (soft tokens), computed in float64",
            "logits.npy": "float32 [1, %d, %d] merged forward with the bidirectional block mask (MaxText)" % (T, V),
            "logits_causal.npy": "float32 [1, %d, %d] merged forward without the bidirectional OR" % (T, V),
            "logits_text.npy": "float32 [1, %d, %d] ids as text (no merge, no bidirectional mask)" % (T, V),
            "greedy.npy": "int32 [%d] greedy continuation of the merged forward (full recompute per step, new "
                          "tokens plain text)" % GREEDY_STEPS},
        "notes": "The decoder uses the float64 soft tokens (image_tokens.npy is their float32 rounding). Positions "
                 "0..T-1. The HF config's vision_config also sets vision_use_head false (as real Gemma 3 "
                 "checkpoints)."})
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(d) for f in fs)
    print("HF-side variants: causal %.3g, text %.3g; HF greedy agrees" % (err_variants["causal"], err_variants["text"]))
    print("greedy %s gaps %s" % (r["greedy"], ["%.4g" % x for x in r["gaps"]]))
    print("wrote %s (%d files, %.2f MB)" % (d, sum(len(fs) for _, _, fs in os.walk(d)), total / 1e6))


if __name__ == "__main__":
    main()
