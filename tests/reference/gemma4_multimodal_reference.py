"""MaxText's Gemma 4 multimodal forward pass (vision soft tokens merged into the gemma4 text decoder), re-stated in
PyTorch float64 from float32 weights, with a tiny model written as a Hugging Face checkpoint.

Read (MaxText commit e591f30cbbf217ed67ef71263ec0538239f9c3b8):
  src/maxtext/models/models.py          Transformer.__call__: image_embeddings = vision_encoder(encoder_images) and
                                        bidirectional_mask_image = mm_processor.get_bidirectional_mask_vision(...)
                                        (only when encoder_images is given); MultimodalInput(image_embeddings,
                                        bidirectional_mask=bidirectional_mask_image).
  src/maxtext/multimodal/processor.py   get_bidirectional_mask_vision: decoder_block gemma4 / gemma4_small ->
                                        decoder_input_tokens == GEMMA4_TOKEN_PLACEHOLDER (the <|image|> id), i.e. the
                                        soft-token positions only (not <|image> / <image|>).
  src/maxtext/multimodal/processor_gemma4.py  fixed BICUBIC resize + /255, reformat_prompt_gemma4,
                                        add_extra_tokens_for_images_gemma4 (see gemma4_preprocess.py).
  src/maxtext/multimodal/utils.py       merge_mm_embeddings / _merge_mm_embeddings_inner: [B, N, K, D] -> [B, N*K, D];
                                        the k-th masked position takes row k (cumsum), no scaling.
  src/maxtext/layers/decoders.py        _apply_embedding: y = shared_embedding(ids) (the table as stored: MaxText's
                                        table is HF's embed_tokens * sqrt(D), param_mapping pad_hf_embedding_layer),
                                        then merge_mm_embeddings(mask=bidirectional_mask) for gemma4-26b/31b/e2b/e4b,
                                        no extra scaling of text or image rows; the unscanned GEMMA4 branch passes
                                        bidirectional_mask to every layer (layer_call_kwargs), as does
                                        _apply_gemma4_scanned_blocks.
  src/maxtext/models/gemma4.py          Gemma4DecoderLayer.__call__: "Gemma4 only applies bidirectional attention in
                                        sliding (local) layers, not in full (global) attention layers":
                                        `if self.attention_type != AttentionType.LOCAL_SLIDING: bidirectional_mask =
                                        None`.
  src/maxtext/layers/attention_op.py    generate_attention_mask: causal, AND sliding window (local layers), then
                                        `output_mask | _make_bidirectional_block_mask(bidirectional_mask)`
                                        (_make_block_mask_indices numbers the runs of consecutive masked tokens).
Hugging Face transformers (code index): modeling_gemma4.py 0246b4f3 Gemma4Model.forward (input ids at image /
  video / audio positions replaced by pad_token_id before the embedding lookup; Gemma4TextScaledWordEmbedding multiplies
  by sqrt(hidden_size); image features = embed_vision(vision_tower(...)) are masked_scatter'ed in unscaled; when
  text_config.use_bidirectional_attention == "vision", block_sequence_ids from mm_token_type_ids
  (get_block_sequence_ids_for_mask: runs of type 1/2 numbered 0, 1, ...; -1 elsewhere) go to create_masks_for_generate);
  masking_utils.py 00c4411c create_causal_mask / create_sliding_window_causal_mask: `or_masks(mask_factory_function,
  blockwise_overlay(block_sequence_ids))` in BOTH the full and the sliding masks; processing_gemma4.py 03b33cc8
  (boi + image_token * n + eoi, no newlines).

So MaxText and HF differ in one place: HF (use_bidirectional_attention "vision", mm_token_type_ids given) also makes a
picture's tokens see each other in the global layers; MaxText keeps global layers causal. logits.npy follows MaxText;
meta.json records how far HF's mask variant is from it.

The text decoder is gemma4_reference.py's dense gemma4 (layer_weights, the rope helpers, geglu; the tied head on the
bf16-rounded MaxText table / sqrt(D), soft cap 30), with D = 40 = the vision projector's emb_dim and 6 layers (five
sliding-window layers, window 3, then a global K = V layer). The vision tower is gemma4_vision_reference.py's (its CFG:
hidden 48, 4 heads, patch 4, 24 x 36 pictures, 6 soft tokens each), the preprocessing gemma4_preprocess.py's.

  ids: prompt_text = reformat_prompt_gemma4("<|image|>what is <|image|>this?") =
    "<bos><|turn>user\\n<|image|>what is <|image|>this?<turn|>\\n<|turn>model\\n", tokenised by hf/tokenizer.json
    (character level; special tokens whole; nothing added: the text carries <bos>), then
    add_extra_tokens_for_images_gemma4 with this vocabulary (<|image|> 60 -> [61, 60 x 6, 62], max_num_images = 2).
  merge: x = table_mt[ids]; the k-th position with ids == 60 takes image_tokens[k] (picture a's 6, then b's 6).
  mask: local layers allowed = causal AND key > query - 3, OR same picture's soft-token run; global layers causal.
  positions 0 .. T-1; logits = 30 tanh((RMSNorm(x) @ bf16(table_mt)^T / sqrt(D)) / 30).
  greedy.npy: 8 greedy steps, each recomputing the full merged forward over ids + the tokens so far.
  The seed is the first whose greedy steps all have a best-vs-second gap >= GAP_MIN, emit only character tokens (no
  special token: no pad / eos / image / boi / eoi) and hold at least MIN_DISTINCT different tokens.

Writes tests/fixtures/gemma4_mm_model/ (see meta.json "files"). Run: /usr/bin/python3
tests/reference/gemma4_multimodal_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
import gemma4_preprocess as PP  # noqa: E402
import gemma4_reference as G4  # noqa: E402
import gemma4_vision_reference as VR  # noqa: E402
from common import bf16_round, case_dir, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

F32 = np.float32
CASE = "gemma4_mm_model"
SEED = 5301
IMAGE_SEED = 5300
GAP_MIN = 1e-3
STEPS = 8
MIN_DISTINCT = 3  # greedy tokens must not just repeat one token

SPECIAL = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<|turn>": 56, "<turn|>": 57, "<unk>": 58, "<|video|>": 59,
           "<|image|>": 60, "<|image>": 61, "<image|>": 62, "<|audio|>": 63}
PAD, EOS, BOS = 0, 1, 2
IMAGE, BOI, EOI = SPECIAL["<|image|>"], SPECIAL["<|image>"], SPECIAL["<image|>"]
CHARS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [" "] + [str(d) for d in range(10)] + \
    list(".,!?'\":;-()\n/+=_")
assert len(CHARS) == 53
CHAR_ID = {ch: 3 + i for i, ch in enumerate(CHARS)}  # 3..55
USER_PROMPT = "<|image|>what is <|image|>this?"
PICTURES = {"a": (50, 40), "b": (36, 24)}  # W x H


def text_settings():
    c = G4.settings(False)
    c.update(D=VR.CFG["emb_dim"], L=6)
    return c


# ----------------------------------------------------------------------------------------------------------------
# Tokenizer

def tokenizer_json():
    vocab = dict(SPECIAL)
    vocab.update(CHAR_ID)
    assert sorted(vocab.values()) == list(range(64))
    added = [{"id": i, "content": n, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for n, i in sorted(SPECIAL.items(), key=lambda kv: kv[1])]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": {"type": "Fuse"},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": []}}


def tokenizer_config():
    tmpl = ("{{ bos_token }}{% for m in messages %}<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
            "{{ m['content'] }}<turn|>\n{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}")
    return {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
            "add_bos_token": False, "add_eos_token": False, "image_token": "<|image|>", "boi_token": "<|image>",
            "eoi_token": "<image|>", "chat_template": tmpl, "tokenizer_class": "PreTrainedTokenizerFast"}


def encode(text):
    """What hf/tokenizer.json does: special tokens split out whole, every other character its id; nothing added."""
    ids, i = [], 0
    names = sorted(SPECIAL, key=len, reverse=True)
    while i < len(text):
        for name in names:
            if text.startswith(name, i):
                ids.append(SPECIAL[name])
                i += len(name)
                break
        else:
            ids.append(CHAR_ID[text[i]])
            i += 1
    return ids


def render_chat(user_text):
    """tokenizer_config's chat template for [{"role": "user", "content": user_text}], add_generation_prompt."""
    return f"<bos><|turn>user\n{user_text}<turn|>\n<|turn>model\n"


# ----------------------------------------------------------------------------------------------------------------
# MaxText merge, mask and decoder

def merge_mm_embeddings(text_emb, rows, mask):
    """_merge_mm_embeddings_inner for one sequence: text_emb [T, D], rows [n, D], mask [T] bool."""
    m = torch.from_numpy(np.asarray(mask) != 0)
    c = torch.cumsum(m.long(), 0)
    keep = m & (c <= rows.shape[0])
    idx = torch.clamp(c - 1, 0, rows.shape[0] - 1)
    return torch.where(keep[:, None], rows[idx], text_emb)


def bidirectional_block_mask(bidir):
    """attention_op._make_bidirectional_block_mask: [B, L] -> [B, L, L] bool."""
    m = torch.as_tensor(np.asarray(bidir, dtype=np.int64))
    padded = torch.nn.functional.pad(m, (1, 0))
    blk = m * torch.cumsum((padded[:, 1:] > padded[:, :-1]).long(), -1)
    return (blk[:, None, :] == blk[:, :, None]) & (blk[:, :, None] > 0)


def gemma4_layer_mm(x, w, c, pos, i, allowed_or):
    """gemma4_reference.gemma4_layer (dense FFN) with an optional OR'ed attention mask."""
    g = G4.is_global(i)
    a = {"heads": c["N"], "kv_heads": c["GK"] if g else c["K"], "head_dim": c["GH"] if g else c["H"], "eps": c["eps"],
         "share_kv": g, "qk_norm": "rms", "v_norm": True,
         "rope": (G4.gemma4_partial_rope(c["GH"], c["global_theta"], c["global_prop"]) if g
                  else AR.default_rope(c["H"], c["local_theta"])),
         "type": "global" if g else "local_sliding", "window": c["window"]}
    if allowed_or is not None:
        a["allowed_or"] = allowed_or
    eps = c["eps"]
    at = AR.attention(AR.rms_norm(x, w["pre_self_attention_norm.scale"], eps), AR.sub(w, "self_attention."), a, pos)
    h = x + AR.rms_norm(at, w["post_self_attention_norm.scale"], eps)
    m = G4.geglu(AR.rms_norm(h, w["pre_ffw_norm.scale"], eps), AR.sub(w, "mlp."))
    return (h + AR.rms_norm(m, w["post_ffw_norm.scale"], eps)) * w["layer_scalar"]


def decoder(x, w64, c, head, bidir=None, mask_mode="maxtext"):
    """x [1, T, D] -> logits [1, T, V]. mask_mode: "maxtext" (block OR in sliding layers only), "all_layers" (HF's
    use_bidirectional_attention="vision"), "none" (causal everywhere). head: [V, D] float64 table for the tied head,
    already divided as the formulation wants."""
    T = x.shape[1]
    pos = np.arange(T, dtype=np.int32)[None]
    blk = bidirectional_block_mask(bidir) if bidir is not None else None
    for i in range(c["L"]):
        use = blk if (blk is not None and (mask_mode == "all_layers" or
                                           (mask_mode == "maxtext" and not G4.is_global(i)))) else None
        x = gemma4_layer_mm(x, AR.sub(w64, f"decoder.layers_{i}."), c, pos, i, use)
    x = AR.rms_norm(x, w64["decoder.decoder_norm.scale"], c["eps"])
    logits = x @ head.T
    return c["cap"] * torch.tanh(logits / c["cap"])


def maxtext_head(w, c):
    """Embed.attend: the tied table cast to bf16, logits / sqrt(D) (normalize_embedding_logits)."""
    return t64(bf16_round(w["token_embedder.embedding"])) / math.sqrt(c["D"])


def maxtext_logits(ids, rows, w, w64, c, merge=True):
    ids = np.asarray(ids, dtype=np.int64)
    e = w64["token_embedder.embedding"][torch.from_numpy(ids)]
    bidir = None
    if merge:
        e = merge_mm_embeddings(e, rows, ids == IMAGE)
        bidir = (ids == IMAGE)[None]
    return decoder(e[None], w64, c, maxtext_head(w, c), bidir, "maxtext")


def hf_embeddings(ids, hf_table, vision_flat, D):
    """Gemma4Model.forward: image ids -> pad, embed * sqrt(D), masked_scatter of the vision features."""
    ids_t = torch.from_numpy(np.asarray(ids, dtype=np.int64))[None]
    img = ids_t == IMAGE
    llm = ids_t.clone()
    llm[img] = PAD
    emb = t64(hf_table)[llm] * math.sqrt(D)
    return emb.masked_scatter(img[..., None].expand_as(emb), vision_flat)


def greedy(ids, rows, w, w64, c, steps=STEPS):
    cur, out, gaps = list(ids), [], []
    for _ in range(steps):
        lg = maxtext_logits(cur, rows, w, w64, c)[0, -1]
        top = torch.topk(lg, 2)
        out.append(int(top.indices[0]))
        gaps.append(float(top.values[0] - top.values[1]))
        cur.append(out[-1])
    return out, gaps


# ----------------------------------------------------------------------------------------------------------------

def load_rgb(path):
    with Image.open(path) as im:
        rgb = im.convert("RGB")
        rgb.load()
        return np.asarray(rgb)


def hf_config(c, cv):
    tc = G4.hf_config(c)["text_config"]
    tc.update({"pad_token_id": PAD, "eos_token_id": EOS, "bos_token_id": BOS, "use_bidirectional_attention": "vision",
               "vocab_size_per_layer_input": c["V"]})
    vc = VR.hf_vision_config(cv)
    vc["image_size"] = [cv["image_height"], cv["image_width"]]  # not an HF key: MaxText's fixed processor size (H, W)
    return {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": tc,
            "vision_config": vc, "audio_config": None, "image_token_id": IMAGE, "boi_token_id": BOI,
            "eoi_token_id": EOI, "video_token_id": SPECIAL["<|video|>"], "audio_token_id": SPECIAL["<|audio|>"],
            "tie_word_embeddings": True}


def main():
    torch.set_default_dtype(torch.float64)
    c = text_settings()
    cv = dict(VR.CFG)
    dv = VR.dims(cv)
    assert dv["E"] == c["D"]
    d = case_dir(CASE)
    hd = os.path.join(d, "hf")
    os.makedirs(hd, exist_ok=True)

    # pictures: PNG written, read back, MaxText's fixed-size preprocessing (W x H = 36 x 24)
    pixels = []
    for i, (name, (pw, ph)) in enumerate(sorted(PICTURES.items())):
        img = PP.make_picture(IMAGE_SEED + i, pw, ph)
        path = os.path.join(d, f"image_{name}.png")
        Image.fromarray(img).save(path)
        back = load_rgb(path)
        assert np.array_equal(back, img)
        pixels.append(PP.maxtext_preprocess(back, cv["image_width"], cv["image_height"]))
    pixels = np.stack(pixels).astype(F32)  # [2, 24, 36, 3]

    prompt_text = PP.maxtext_reformat_prompt(USER_PROMPT, "<|image|>", len(PICTURES))
    assert prompt_text == render_chat(USER_PROMPT)
    prompt_ids = encode(prompt_text)
    n_soft = dv["S"]
    ids = PP.maxtext_expand_tokens(prompt_ids, num_soft_tokens=n_soft, max_num_images=len(PICTURES),
                                   image_id=IMAGE, boi_id=BOI, eoi_id=EOI).astype(np.int64)
    assert encode(PP.hf_expand_text(prompt_text.replace(PP.IMAGE_TOKEN, "<|image|>"), [n_soft] * 2)) == list(ids)
    image_mask = (ids == IMAGE)
    assert image_mask.sum() == n_soft * len(PICTURES)
    T = len(ids)

    for attempt in range(100):
        seed = SEED + 1000 * attempt
        g = rng(seed)
        w = G4.model_weights(g, c)
        hf_table = w.pop("hf_table")
        vw = VR.maxtext_weights(g, cv)
        w64 = {k: t64(v) for k, v in w.items()}
        vis = VR.maxtext_forward(vw, pixels, cv)
        rows = vis["out"].reshape(-1, c["D"])  # [12, D] float64: picture a's soft tokens, then b's
        gr, gaps = greedy(ids, rows, w, w64, c)
        if min(gaps) >= GAP_MIN and not set(gr) & set(SPECIAL.values()) and len(set(gr)) >= MIN_DISTINCT:
            break
    else:
        raise RuntimeError("no seed with clear greedy gaps")

    logits = maxtext_logits(ids, rows, w, w64, c)
    logits_text = maxtext_logits(ids, None, w, w64, c, merge=False)

    # ---- cross-checks (HF formulation where available)
    ow = VR.hf_weights(vw, cv)
    vis_hf = VR.hf_forward(ow, pixels, cv)
    vision_diff = (vis_hf["out"] - vis["out"]).abs().max().item()
    assert vision_diff < 1e-12, vision_diff
    rows_hf = vis_hf["out"].reshape(-1, c["D"])
    emb_mt = merge_mm_embeddings(w64["token_embedder.embedding"][torch.from_numpy(ids)], rows, image_mask)
    emb_hf = hf_embeddings(ids, hf_table, rows_hf, c["D"])[0]
    merged_diff_image_rows = (emb_hf[torch.from_numpy(image_mask)] - emb_mt[torch.from_numpy(image_mask)]).abs().max()
    merged_diff_text_rows = (emb_hf[torch.from_numpy(~image_mask)] - emb_mt[torch.from_numpy(~image_mask)]).abs().max()
    assert merged_diff_image_rows < 1e-12
    bidir = image_mask[None]
    hf_head = t64(hf_table)
    logits_hf_same_mask = decoder(emb_hf[None], w64, c, hf_head, bidir, "maxtext")
    logits_hf_same_mask_bf16_head = decoder(emb_hf[None], w64, c, t64(bf16_round(w["token_embedder.embedding"]))
                                            / math.sqrt(c["D"]), bidir, "maxtext")
    logits_hf_mask = decoder(emb_hf[None], w64, c, hf_head, bidir, "all_layers")
    logits_causal_only = decoder(emb_mt[None], w64, c, maxtext_head(w, c), bidir, "none")
    blk = bidirectional_block_mask(bidir)[0]
    assert int(blk.sum()) == len(PICTURES) * n_soft ** 2

    # ---- files
    hf = {k: v for k, v in G4.hf_checkpoint(w, hf_table, c).items() if not k.startswith("model.vision_tower.")}
    hf.update(ow)
    save_safetensors(os.path.join(hd, "model.safetensors"), hf, {"format": "pt"})
    with open(os.path.join(hd, "config.json"), "w") as f:
        json.dump(hf_config(c, cv), f, indent=1, sort_keys=True)
    with open(os.path.join(hd, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f, indent=1, ensure_ascii=False)
    with open(os.path.join(hd, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=1)
    # Hugging Face's processor settings for this tiny model (its aspect-preserving resize: 6 soft tokens at most).
    with open(os.path.join(hd, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Gemma4ImageProcessor", "max_soft_tokens": 6, "patch_size": 4,
                   "pooling_kernel_size": 3, "resample": 3, "rescale_factor": 1 / 255}, f, indent=1)
    save_npy(d, "pixels", pixels)
    save_npy(d, "prompt_ids", np.asarray(prompt_ids, dtype=np.int32)[None])
    save_npy(d, "ids", ids.astype(np.int32)[None])
    save_npy(d, "image_mask", image_mask.astype(np.int32)[None])
    save_npy(d, "image_tokens", rows.numpy().astype(F32))
    save_npy(d, "logits", logits.numpy().astype(F32))
    save_npy(d, "logits_text", logits_text.numpy().astype(F32))
    save_npy(d, "greedy", np.asarray(gr, dtype=np.int32))

    runs = np.nonzero(np.diff(np.concatenate([[0], image_mask.astype(int)])) == 1)[0]
    meta = {
        "what": "tiny Gemma 4 multimodal model (gemma4 dense text decoder + Gemma 4 vision tower/projector), MaxText's "
                "merged forward in float64 from float32 weights",
        "seed": seed, "image_seed": IMAGE_SEED,
        "text": {"hidden": c["D"], "layers": c["L"], "heads": c["N"], "kv_heads": c["K"], "head_dim": c["H"],
                 "global_kv_heads": c["GK"], "global_head_dim": c["GH"], "mlp": c["F"], "vocab": c["V"],
                 "sliding_window": c["window"], "local_theta": c["local_theta"], "global_theta": c["global_theta"],
                 "global_rope_proportion": c["global_prop"], "final_logits_soft_cap": c["cap"], "eps": c["eps"],
                 "layer_kinds": ["global" if G4.is_global(i) else "local_sliding" for i in range(c["L"])]},
        "text_config_maxtext": G4.config_keys(c),
        "vision": dict(cv),
        "vision_config_maxtext": {"vision_encoder_block": "gemma4", "use_multimodal": True,
                                  "hidden_size_for_vit": dv["D"], "num_attention_heads_for_vit": dv["N"],
                                  "intermediate_size_for_vit": dv["F"], "num_hidden_layers_for_vit": dv["L"],
                                  "patch_size_for_vit": dv["p"], "image_size_for_vit": [dv["H"], dv["W"]],
                                  "num_position_embeddings_for_vit": dv["P"], "rope_theta_for_vit": dv["theta"],
                                  "vision_output_length": dv["S"], "v_norm_with_scale": False,
                                  "image_placeholder": "<|image|>"},
        "token_ids": {"pad": PAD, "eos": EOS, "bos": BOS, "image_token_id (<|image|>)": IMAGE,
                      "boi_token_id (<|image>)": BOI, "eoi_token_id (<image|>)": EOI, "<|turn>": SPECIAL["<|turn>"],
                      "<turn|>": SPECIAL["<turn|>"],
                      "real_vocabulary": {"image": PP.IMAGE_TOKEN_ID, "boi": PP.BOI_TOKEN_ID, "eoi": PP.EOI_TOKEN_ID,
                                          "<|turn>": 105, "<turn|>": 106}},
        "characters": {"ids": "3..55", "order": "".join(CHARS)},
        "user_prompt": USER_PROMPT, "prompt_text": prompt_text, "prompt_ids": prompt_ids,
        "ids": [int(x) for x in ids], "seq_len": T, "soft_tokens_per_picture": n_soft,
        "image_start_offsets": [int(x) for x in runs],
        "pictures": {n: {"file": f"image_{n}.png", "input_wh": list(wh), "maxtext_wh": [dv["W"], dv["H"]],
                         "hf_processor_target_hw (patch 4, pooling 3, max_soft_tokens 6)":
                             list(PP.hf_target_size(wh[1], wh[0], 4, 54, 3))}
                     for n, wh in sorted(PICTURES.items())},
        "greedy": gr, "greedy_gaps": gaps,
        "max_abs_logits_minus_logits_text": (logits - logits_text).abs().max().item(),
        "attention_mask": {
            "maxtext": "local (sliding) layers: causal AND key > query - window, OR (same run of <|image|> ids); "
                       "global "
                       "layers: causal only (gemma4.py Gemma4DecoderLayer.__call__ drops bidirectional_mask unless "
                       "attention_type is LOCAL_SLIDING; attention_op.generate_attention_mask ORs the block mask after "
                       "the sliding AND)",
            "hf": "use_bidirectional_attention='vision' + mm_token_type_ids: the block OR is applied in both the full "
                  "and the sliding masks (masking_utils create_causal_mask / create_sliding_window_causal_mask)",
            "block_mask_true_entries": int(blk.sum())},
        "merge": "MaxText: table_mt[ids] (table_mt = HF embed_tokens * sqrt(D) in float32), then the k-th <|image|> "
                 "position takes image_tokens[k]; HF: embed_tokens[ids with images -> pad] * sqrt(D), masked_scatter "
                 "of embed_vision(vision_tower(pixels)). Image rows are not scaled in either.",
        "cross_check": {
            "vision_maxtext_vs_hf_max_abs_diff": vision_diff,
            "merged_image_rows_maxtext_vs_hf_max_abs_diff": float(merged_diff_image_rows),
            "merged_text_rows_maxtext_vs_hf_max_abs_diff": float(merged_diff_text_rows),
            "logits_hf_embeddings_and_head_same_mask_max_abs_diff": (logits_hf_same_mask - logits).abs().max().item(),
            "logits_hf_embeddings_bf16_head_same_mask_max_abs_diff":
                (logits_hf_same_mask_bf16_head - logits).abs().max().item(),
            "logits_hf_mask_variant_max_abs_diff": (logits_hf_mask - logits).abs().max().item(),
            "logits_causal_only_max_abs_diff": (logits_causal_only - logits).abs().max().item(),
            "note": "the HF text decoder itself is gemma4_reference's formulation (MaxText), fed HF's merged "
                    "embeddings; the 'same_mask' rows isolate the merge / head (MaxText's head is the bf16-rounded "
                    "table, HF's the float32 table); 'hf_mask_variant' is HF's mask (block OR in the global layers "
                    "too) "
                    "and 'causal_only' drops the block OR everywhere: both show the fixture can tell the masks apart"},
        "files": {
            "hf/config.json": "Gemma4ForConditionalGeneration config (text_config gemma4_text, vision_config "
                              "gemma4_vision + 'image_size' [H, W] = MaxText's fixed processor size, a non-HF key)",
            "hf/model.safetensors": "model.language_model.* (text), model.vision_tower.*, model.embed_vision.*; "
                                    "float32",
            "hf/tokenizer.json": "character-level BPE (no merges), special tokens whole (added_tokens), no BOS added "
                                 "(the prompt text carries <bos>), Fuse decoder",
            "hf/tokenizer_config.json": "bos/eos/pad/unk and image/boi/eoi token strings, Gemma 4 turn chat template",
            "image_a.png / image_b.png": "the pictures (RGB)",
            "pixels.npy": "float32 [2, 24, 36, 3]: MaxText's preprocessing (BICUBIC to 36 x 24, /255) of a then b",
            "prompt_ids.npy": "int32 [1, n]: tokenizer ids of prompt_text (two <|image|> = 60)",
            "ids.npy": "int32 [1, T]: add_extra_tokens_for_images_gemma4(prompt_ids) with this vocabulary",
            "image_mask.npy": "int32 [1, T]: ids == 60 (MaxText's bidirectional_mask and merge mask)",
            "image_tokens.npy": "float32 [12, 40]: projector outputs, picture a's 6 then b's 6",
            "logits.npy": "float32 [1, T, 64]: merged forward (MaxText mask)",
            "logits_text.npy": "float32 [1, T, 64]: the same ids, no merge, no block mask (control)",
            "greedy.npy": "int32 [8]: greedy continuation (full merged forward recomputed each step)"},
        "notes": ["image_tokens.npy is rounded to float32; logits were computed from the float64 projector outputs",
                  "HF's own processor would resize picture a to 24 x 24 (4 soft tokens), not MaxText's fixed 36 x 24: "
                  "the fixture follows MaxText's fixed-size processor; with 6 soft tokens per picture HF's text "
                  "expansion (boi + 6 x <|image|> + eoi) tokenises to exactly ids.npy"],
    }
    save_meta(d, meta)
    print("wrote", d, "seed", seed, "T", T)
    print("  greedy", gr, "min gap %.4f" % min(gaps))
    print("  cross_check", json.dumps(meta["cross_check"], indent=1))
    print("  logits vs text %.3f" % meta["max_abs_logits_minus_logits_text"])


if __name__ == "__main__":
    main()
