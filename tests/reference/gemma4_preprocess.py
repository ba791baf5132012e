"""Gemma 4 picture preprocessing and prompt expansion as MaxText and Hugging Face define them (re-stated).

Sources read:
  MaxText, commit e591f30cbbf217ed67ef71263ec0538239f9c3b8, src/maxtext/multimodal/processor_gemma4.py:
    preprocess_mm_data_gemma4: PIL Image.fromarray(uint8 HWC) -> resize((W, H) = (960, 672), BICUBIC) ->
      np.asarray(..., dtype=np.float32) / 255.0   (float32 array divided by 255: a float32 division, correctly
      rounded x / 255), stacked [num_images, 1, H, W, 3] (the 1 is the images-per-example axis);
    reformat_prompt_gemma4: "<|image|>" placeholders (missing ones prepended), wrapped as
      "<bos><|turn>user\\n{prompt}<turn|>\\n<|turn>model\\n";
    add_extra_tokens_for_images_gemma4 / insert_sequence: every placeholder id 258880 is replaced by
      [255999 (boi), 258880 x num_soft_tokens, 258882 (eoi)], num_soft_tokens = (672/16)*(960/16)/3^2 = 280; the output
      length is len + max_num_images * (num_soft_tokens + 1); positions past the last text token stay 0 (when fewer
      placeholders than max_num_images are present);
    get_image_offsets_gemma4: (num_soft_tokens + 2 - 1) * num_images extra tokens. No newline tokens are added
      (GEMMA4_NEW_LINE_TOKEN = 108 is defined but unused).
  Hugging Face transformers (code index): image_processing_pil_gemma4.py 0325565a (get_aspect_ratio_preserving_size,
    convert_image_to_patches, pad_along_first_dim, Gemma4ImageProcessorPil._preprocess: BICUBIC, rescale 1/255, no
    normalisation, patch_size 16, max_soft_tokens 280, pooling_kernel_size 3), image_transforms.py 000593ad (resize:
    uint8 -> PIL resize((w, h), resample) -> numpy, no resize when the size already matches; rescale:
    image.astype(float64) * scale then .astype(float32)), image_processing_backends.py 0f918df3 (PilBackend),
    processing_gemma4.py 03b33cc8 (replace_image_token: f"{boi_token}{image_token * num_soft_tokens}{eoi_token}",
    no "\\n\\n" around it, unlike Gemma 3); token strings "<|image|>" (image_token_id 258880), "<|image>" (boi 255999),
    "<image|>" (eoi 258882), "<|turn>" 105, "<turn|>" 106 from Gemma4Config defaults and Gemma 4 tokenizer listings.

HF target size (get_aspect_ratio_preserving_size, max_patches = max_soft_tokens * k^2, m = k * patch):
  factor = sqrt(max_patches * patch^2 / (H W)); th = floor(factor H / m) * m; tw = floor(factor W / m) * m;
  if both 0 -> error; if th == 0: th = m, tw = min(floor(W / H) * m, (max_patches // k^2) * m); symmetric for tw == 0.
HF patches: CHW -> [gh, gw, p_row, p_col, C] flattened; positions (x, y) row-major; padded to max_patches with
  zero patches and (-1, -1) positions; num_soft_tokens = gh * gw / k^2.

Writes tests/fixtures/gemma4_preprocess/: <name>.png (4 RGB pictures), maxtext_<name>.npy (float32 [24, 36, 3]),
  hf_<name>.npy (float32 [h, w, 3], HF's aspect-preserving size for patch 4, pooling 3, max_soft_tokens 6),
  meta.json (sizes, the real-model HF target sizes, prompt-expansion worked examples).
Run: /usr/bin/python3 tests/reference/gemma4_preprocess.py
"""
import math
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import case_dir, save_meta, save_npy  # noqa: E402

CASE = "gemma4_preprocess"

IMAGE_TOKEN_ID = 258880
BOI_TOKEN_ID = 255999
EOI_TOKEN_ID = 258882
IMAGE_TOKEN = "<|image|>"
BOI_TOKEN = "<|image>"
EOI_TOKEN = "<image|>"
MAXTEXT_H, MAXTEXT_W, MAXTEXT_PATCH, MAXTEXT_POOL = 672, 960, 16, 3


# ----------------------------------------------------------------------------------------------------------------
# MaxText
# ----------------------------------------------------------------------------------------------------------------

def maxtext_preprocess(img_hwc_uint8, width=MAXTEXT_W, height=MAXTEXT_H):
    """uint8 [h, w, 3] -> float32 [height, width, 3]: PIL BICUBIC resize to (width, height), float32 / 255."""
    pil = Image.fromarray(np.asarray(img_hwc_uint8, dtype=np.uint8))
    resized = pil.resize((width, height), resample=Image.Resampling.BICUBIC)
    return np.asarray(resized, dtype=np.float32) / np.float32(255.0)


def maxtext_num_soft_tokens(height=MAXTEXT_H, width=MAXTEXT_W, patch=MAXTEXT_PATCH, pool=MAXTEXT_POOL):
    return (height // patch) * (width // patch) // (pool * pool)


def maxtext_reformat_prompt(prompt, image_placeholder, num_images):
    if image_placeholder in prompt:
        prompt = prompt.replace(image_placeholder, IMAGE_TOKEN)
    have = prompt.count(IMAGE_TOKEN)
    if have < num_images:
        prompt = IMAGE_TOKEN * (num_images - have) + prompt
    return f"<bos><|turn>user\n{prompt}<turn|>\n<|turn>model\n"


def maxtext_expand_tokens(tokens, num_soft_tokens=None, max_num_images=1, image_id=IMAGE_TOKEN_ID,
                          boi_id=BOI_TOKEN_ID, eoi_id=EOI_TOKEN_ID):
    """add_extra_tokens_for_images_gemma4 for one sequence (1-D list/array of ids) -> int64 array of length
    len(tokens) + max_num_images * (num_soft_tokens + 1); every image_id becomes [boi_id, image_id x n, eoi_id]; the
    remaining tail (fewer placeholders than max_num_images) is 0. (The ids default to the real vocabulary's.)"""
    n = maxtext_num_soft_tokens() if num_soft_tokens is None else num_soft_tokens
    seq = [boi_id] + [image_id] * n + [eoi_id]
    out = np.zeros(len(tokens) + max_num_images * (len(seq) - 1), dtype=np.int64)
    j = 0
    for t in tokens:
        if t == image_id:
            out[j:j + len(seq)] = seq
            j += len(seq)
        else:
            out[j] = t
            j += 1
    return out


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face
# ----------------------------------------------------------------------------------------------------------------

def hf_target_size(height, width, patch_size, max_patches, pooling_kernel_size):
    """get_aspect_ratio_preserving_size -> (target_height, target_width)."""
    factor = math.sqrt(max_patches * patch_size ** 2 / (height * width))
    m = pooling_kernel_size * patch_size
    th = int(math.floor(factor * height / m)) * m
    tw = int(math.floor(factor * width / m)) * m
    if th == 0 and tw == 0:
        raise ValueError("resize to 0 x 0")
    max_side = (max_patches // pooling_kernel_size ** 2) * m
    if th == 0:
        th = m
        tw = min(int(math.floor(width / height)) * m, max_side)
    elif tw == 0:
        tw = m
        th = min(int(math.floor(height / width)) * m, max_side)
    if th * tw > max_patches * patch_size ** 2:
        raise ValueError(f"[{height}x{width}] -> [{th}x{tw}] exceeds {max_patches} patches")
    return th, tw


def hf_rescale(img_uint8):
    return (np.asarray(img_uint8).astype(np.float64) * (1 / 255)).astype(np.float32)


def hf_resize_and_rescale(img_hwc_uint8, patch_size=16, pooling_kernel_size=3, max_soft_tokens=280):
    """HF PIL backend: aspect-preserving BICUBIC resize (skipped when the size already matches), then float64 * (1/255)
    -> float32. Returns float32 [h, w, 3] (HWC here; HF keeps CHW)."""
    img = np.asarray(img_hwc_uint8, dtype=np.uint8)
    h, w = img.shape[:2]
    th, tw = hf_target_size(h, w, patch_size, max_soft_tokens * pooling_kernel_size ** 2, pooling_kernel_size)
    if (th, tw) != (h, w):
        img = np.array(Image.fromarray(img).resize((tw, th), resample=Image.Resampling.BICUBIC))
    return hf_rescale(img)


def hf_patchify(img_hwc_f32, patch_size, pooling_kernel_size, max_soft_tokens):
    """convert_image_to_patches + positions + pad_along_first_dim -> (patches [max_patches, p*p*3],
    positions [max_patches, 2] (x, y; -1 padding), num_soft_tokens)."""
    chw = np.transpose(img_hwc_f32, (2, 0, 1))
    c, h, w = chw.shape
    nh, nw = h // patch_size, w // patch_size
    patches = chw.reshape(c, nh, patch_size, nw, patch_size).transpose(1, 3, 2, 4, 0).reshape(nh * nw, -1)
    gx, gy = np.meshgrid(np.arange(nw), np.arange(nh), indexing="xy")
    pos = np.stack([gx, gy], axis=-1).reshape(nh * nw, 2)
    max_patches = max_soft_tokens * pooling_kernel_size ** 2
    pad = max_patches - patches.shape[0]
    if pad > 0:
        patches = np.pad(patches, [(0, pad), (0, 0)])
        pos = np.pad(pos, [(0, pad), (0, 0)], constant_values=-1)
    return patches, pos, nh * nw // pooling_kernel_size ** 2


def hf_expand_text(text, num_soft_tokens_per_image):
    """processing_gemma4 replace_image_token: the i-th "<|image|>" in the text -> boi + image_token * n_i + eoi."""
    parts = text.split(IMAGE_TOKEN)
    assert len(parts) - 1 == len(num_soft_tokens_per_image)
    out = parts[0]
    for n, rest in zip(num_soft_tokens_per_image, parts[1:]):
        out += BOI_TOKEN + IMAGE_TOKEN * n + EOI_TOKEN + rest
    return out


# ----------------------------------------------------------------------------------------------------------------

PICTURES = {"a": (50, 37), "b": (200, 120), "c": (31, 90), "d": (96, 96)}  # name: (W, H)
SMALL = {"patch_size": 4, "pooling_kernel_size": 3, "max_soft_tokens": 6}
MAXTEXT_SMALL_WH = (36, 24)
REAL_SIZES_WH = [(640, 480), (1920, 1080), (480, 640), (100, 2000), (3000, 40)]


def make_picture(seed, w, h):
    """Deterministic RGB uint8 [h, w, 3]: smooth gradients + a few stripes + noise (exercises the bicubic kernel)."""
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127.5 + 100 * np.sin(2 * np.pi * xx / max(w, 2) * (1 + seed % 3))
    gg = 255 * yy / max(h - 1, 1)
    b = 128 + 90 * np.cos(2 * np.pi * (xx + yy) / 11.0)
    img = np.stack([r, gg, b], -1) + g.normal(0, 20, (h, w, 3))
    img[(yy.astype(int) // 5) % 4 == 0] *= 0.5
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def main():
    d = case_dir(CASE)
    meta = {"what": "Gemma 4 picture preprocessing (MaxText fixed-size processor vs HF aspect-preserving processor) "
                    "and prompt expansion",
            "maxtext": {"target_wh": list(MAXTEXT_SMALL_WH),
                        "rule": "PIL BICUBIC resize to (W, H), then np.asarray(float32) / 255.0 (float32 division); "
                                "real model: (W, H) = (960, 672), 280 soft tokens"},
            "hf": {**SMALL, "max_patches": SMALL["max_soft_tokens"] * SMALL["pooling_kernel_size"] ** 2,
                   "rule": "get_aspect_ratio_preserving_size, PIL BICUBIC resize (none if the size already matches), "
                           "float64 * (1/255) -> float32"},
            "pictures": {}}
    for i, (name, (w, h)) in enumerate(sorted(PICTURES.items())):
        img = make_picture(100 + i, w, h)
        Image.fromarray(img).save(os.path.join(d, f"{name}.png"))
        back = np.array(Image.open(os.path.join(d, f"{name}.png")).convert("RGB"))
        assert np.array_equal(back, img)
        mt = maxtext_preprocess(img, *MAXTEXT_SMALL_WH)
        assert mt.shape == (MAXTEXT_SMALL_WH[1], MAXTEXT_SMALL_WH[0], 3) and mt.dtype == np.float32
        hf = hf_resize_and_rescale(img, **SMALL)
        patches, pos, nsoft = hf_patchify(hf, **SMALL)
        save_npy(d, f"maxtext_{name}", mt)
        save_npy(d, f"hf_{name}", hf)
        meta["pictures"][name] = {
            "png": f"{name}.png", "input_wh": [w, h],
            "maxtext_npy": f"maxtext_{name}.npy float32 [{mt.shape[0]}, {mt.shape[1]}, 3]",
            "hf_npy": f"hf_{name}.npy float32 [{hf.shape[0]}, {hf.shape[1]}, 3]",
            "hf_target_hw": list(hf.shape[:2]), "hf_num_patches": int((pos[:, 0] >= 0).sum()),
            "hf_num_soft_tokens": int(nsoft)}
    # the two /255 conventions: how many of the 256 byte values round differently in float32
    v = np.arange(256, dtype=np.uint8)
    mt_div = v.astype(np.float32) / np.float32(255.0)
    hf_mul = hf_rescale(v)
    diff = np.nonzero(mt_div != hf_mul)[0]
    meta["rescale_float32"] = {
        "maxtext": "float32(x) / float32(255) (one float32 division)",
        "hf": "float32(float64(x) * (1/255))",
        "byte_values_that_differ": [int(x) for x in diff],
        "max_abs_diff": float(np.abs(mt_div.astype(np.float64) - hf_mul.astype(np.float64)).max())}
    real = {}
    for w, h in REAL_SIZES_WH:
        th, tw = hf_target_size(h, w, 16, 280 * 9, 3)
        real[f"{w}x{h}"] = {"target_wh": [tw, th], "patches": (th // 16) * (tw // 16),
                            "soft_tokens": (th // 16) * (tw // 16) // 9}
    meta["hf_real_model_targets"] = {"params": {"patch_size": 16, "pooling_kernel_size": 3, "max_soft_tokens": 280,
                                                "max_patches": 2520}, "input_wh_to_target": real}

    # prompt expansion worked examples
    prompt = "Compare <|image|> with <|image|> please"
    mt_prompt = maxtext_reformat_prompt(prompt, "<|image|>", 2)
    toks = [2, 105, 9, IMAGE_TOKEN_ID, 7, IMAGE_TOKEN_ID, 106]
    ex1 = maxtext_expand_tokens(toks, num_soft_tokens=3, max_num_images=2)
    ex2 = maxtext_expand_tokens([2, 9, IMAGE_TOKEN_ID, 7], num_soft_tokens=3, max_num_images=2)
    assert list(ex1) == [2, 105, 9, BOI_TOKEN_ID, *[IMAGE_TOKEN_ID] * 3, EOI_TOKEN_ID, 7,
                         BOI_TOKEN_ID, *[IMAGE_TOKEN_ID] * 3, EOI_TOKEN_ID, 106]
    meta["prompt_expansion"] = {
        "token_strings": {"image_token": IMAGE_TOKEN, "boi_token": BOI_TOKEN, "eoi_token": EOI_TOKEN,
                          "turn_open": "<|turn>", "turn_close": "<turn|>", "bos": "<bos>"},
        "token_ids_real": {"image_token_id": IMAGE_TOKEN_ID, "boi_token_id": BOI_TOKEN_ID,
                           "eoi_token_id": EOI_TOKEN_ID, "turn_open": 105, "turn_close": 106, "bos": 2, "eos": 1,
                           "pad": 0},
        "maxtext_rule": "each placeholder id 258880 -> [255999, 258880 x n, 258882], n = 280 for the real model (fixed "
                        "960x672 picture); output length len + max_num_images * (n + 1), tail zeros; no newlines",
        "hf_rule": "each '<|image|>' in the text -> '<|image>' + '<|image|>' * n_i + '<image|>' (n_i per picture from "
                   "its aspect-preserving size); no '\\n\\n' around it",
        "maxtext_reformat_prompt": {"input": prompt, "output": mt_prompt},
        "maxtext_reformat_prompt_missing": {"input": "Describe.", "num_images": 1,
                                            "output": maxtext_reformat_prompt("Describe.", "<|image|>", 1)},
        "maxtext_expand_example": {"tokens": toks, "num_soft_tokens": 3, "max_num_images": 2,
                                   "output": [int(x) for x in ex1]},
        "maxtext_expand_example_fewer_images": {"tokens": [2, 9, IMAGE_TOKEN_ID, 7], "num_soft_tokens": 3,
                                                "max_num_images": 2, "output": [int(x) for x in ex2]},
        "hf_expand_example": {"input": prompt, "num_soft_tokens_per_image": [2, 3],
                              "output": hf_expand_text(prompt, [2, 3])},
    }
    save_meta(d, meta)
    print("wrote", d)
    for k, v in meta["pictures"].items():
        print(" ", k, v["input_wh"], "-> hf", v["hf_target_hw"], "soft", v["hf_num_soft_tokens"])
    print("  real", real)
    print("  rescale differs at", meta["rescale_float32"]["byte_values_that_differ"])


if __name__ == "__main__":
    main()
