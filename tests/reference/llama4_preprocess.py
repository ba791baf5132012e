"""MaxText's Llama 4 image preprocessing and image prompt tokens, re-stated as a command-line tool.

Usage: /usr/bin/python3 tests/reference/llama4_preprocess.py IMAGE OUT_DIR [--tile-size 336] [--max-tiles 16]

Sources read (MaxText commit e591f30cbbf217ed67ef71263ec0538239f9c3b8):
  src/maxtext/multimodal/processor_llama4.py: get_factors, find_supported_resolutions, get_best_resolution,
    pad_to_best_fit_jax, split_to_tiles, preprocess_mm_data_llama4, get_num_tokens_for_this_image,
    get_tokens_for_this_image, add_extra_tokens_for_images_llama4 (num_patches_per_chunk), constants;
  src/maxtext/multimodal/utils.py: load_image_from_path, normalize_images;
  src/maxtext/multimodal/processor.py (images are loaded with load_image_from_path, then
    preprocess_mm_data_llama4).

What it does (MaxText's steps, except the last pad_to_max_tiles step to 20 tiles, which is left out):
  1. Load: Image.open(IMAGE).convert("RGB"), np.asarray -> uint8 [H, W, 3].
  2. Candidate canvases (find_supported_resolutions): for n = max_tiles down to 1, the factors f of n in ascending
     order give (f, n / f) tiles (rows, columns); they are grouped by the float ratio rows / columns in the order
     each ratio is first seen (dict insertion order), and listed group by group as (rows * tile, cols * tile).
  3. Best canvas (get_best_resolution, resize_to_max_canvas False): min over that list of |canvas_h - H| +
     |canvas_w - W|; Python's min keeps the FIRST minimum in list order (the tie-break).
  4. pad_to_best_fit_jax: no resizing; a canvas of the best size filled with the background (int 0 -> [0, 0, 0]),
     the top-left min(H, canvas_h) x min(W, canvas_w) of the picture copied to its top-left (so larger pictures are
     cropped at the right / bottom, smaller ones padded with 0 at the right / bottom).
  5. Rescale and normalize the canvas: (x * (1/255) - 0.5) / 0.5 (dtypes below).
  6. split_to_tiles: ratio_h = canvas_h / tile rows and ratio_w = canvas_w / tile columns of tiles, row-major
     (tile index = row * ratio_w + col), each [C, tile, tile].
  7. When ratio_h * ratio_w > 1, a global tile is appended last: Image.fromarray(the uint8 picture of step 1)
     .resize((tile, tile)) with BILINEAR, or LANCZOS when the picture's width or height exceeds the tile size;
     np.array (uint8), then the same rescale / normalize as step 5.
  8. Stack, .astype(np.float32).
  Outputs: OUT_DIR/tiles.npy float32 [n_tiles, tile, tile, 3] NHWC (MaxText's pixel_values are NCHW
  [N, NUM_TILES, C, tile, tile]; only the layout differs), OUT_DIR/aspect.json {"ratio_h", "ratio_w"},
  OUT_DIR/tokens.json: the list of token ids of get_tokens_for_this_image([ratio_h, ratio_w],
  num_patches_per_chunk) with num_patches_per_chunk = (tile // 14) * (tile // 14) // 4 (downsample ratio
  round(1 / 0.5^2) = 4): [200080 <|image_start|>] + (when more than one tile) for each tile row, for each column:
  num_patches_per_chunk x 200092 <|patch|>, then 200084 <|tile_x_separator|> between columns, and 200085
  <|tile_y_separator|> after each row; then 200090 <|image|>, num_patches_per_chunk x 200092, 200081
  <|image_end|>. Its length is checked against get_num_tokens_for_this_image.

Exact dtype chain (so that a C++ re-implementation can match bit for bit):
  * The picture and the padded canvas are uint8: pad_to_best_fit_jax builds its background as
    np.array([0, 0, 0], dtype=uint8) and the canvas as np.ones(..., uint8) * background -> uint8.
  * image_padded * LLAMA4_PIXEL_VALUE_RESCALE_FACTOR is a uint8 array times the Python float 1.0 / 255.0: NumPy
    gives float64 (NumPy 1.x value-based casting and NumPy 2's NEP 50 weak-scalar rule agree here), element
    v = fl64(x * c) with c = fl64(1/255) = 0x1.0101010101010p-8 (multiplication by the rounded reciprocal, which
    differs from x / 255 in float64 for 24 of the 256 byte values).
  * normalize_images works in place on that float64 array: v -= np.asarray((0.5, 0.5, 0.5)) (float64), then
    v /= np.asarray((0.5, 0.5, 0.5)) (float64; dividing by 0.5 is exact): y = fl64(fl64(v - 0.5) / 0.5).
  * split / transpose / concatenate keep float64 (pad_to_max_tiles would allocate float64 zeros too).
  * The final .astype(np.float32) rounds each float64 to the nearest float32.
  So each output value is float32(fl64(fl64(fl64(x * c) - 0.5) / 0.5)) of its uint8 x: a 256-entry table. (Doing
  the same steps in float32 instead gives a different float32 for 207 of the 256 bytes.)
  The global tile's pixels come from Pillow's resize of the uint8 RGB picture, then the same chain.
  Pillow here is Debian's (9.4); MaxText's requirements ask for pillow >= 12.2. Pillow's BILINEAR / LANCZOS resize
  code is believed unchanged between them, but the global tile is only as exact as that assumption.
"""
import argparse
import json
import os
from collections import defaultdict

import numpy as np
from PIL import Image

PATCH = 14
PIXEL_SHUFFLE_RATIO = 0.5
RESCALE = 1.0 / 255.0
MEAN = (0.5,) * 3
STD = (0.5,) * 3
TOK_IMAGE_START = 200080
TOK_IMAGE_END = 200081
TOK_TILE_X_SEP = 200084
TOK_TILE_Y_SEP = 200085
TOK_IMAGE = 200090
TOK_PATCH = 200092


def divisors(n):
    out = set()
    i = 1
    while i * i <= n:
        if n % i == 0:
            out.update((i, n // i))
        i += 1
    return out


def supported_canvases(max_tiles, tile):
    """find_supported_resolutions: [(height, width)] in MaxText's list order."""
    by_ratio = defaultdict(list)  # insertion-ordered, keyed by the float ratio rows / cols
    for n in range(max_tiles, 0, -1):
        for f in sorted(divisors(n)):
            rows, cols = f, n // f
            by_ratio[rows / cols].append((rows, cols))
    return [(r * tile, c * tile) for group in by_ratio.values() for r, c in group]


def best_canvas(h, w, canvases):
    """get_best_resolution: the first canvas with the least L1 distance to (h, w)."""
    best, best_d = None, None
    for ch, cw in canvases:
        dist = abs(ch - h) + abs(cw - w)
        if best_d is None or dist < best_d:  # strict: earlier entries win ties
            best, best_d = (ch, cw), dist
    return best


def pad_or_crop(img, canvas):
    """pad_to_best_fit_jax with background 0: uint8 canvas, picture at the top-left."""
    ch, cw = canvas
    out = np.zeros((ch, cw, img.shape[2]), dtype=np.uint8)
    hh, ww = min(img.shape[0], ch), min(img.shape[1], cw)
    out[:hh, :ww, :] = img[:hh, :ww, :]
    return out


def rescale_normalize(u8):
    """uint8 [.., 3] -> float64, MaxText's exact operation order (see the module docstring)."""
    v = u8 * RESCALE
    assert v.dtype == np.float64
    v -= np.asarray(MEAN)
    v /= np.asarray(STD)
    return v


def to_tiles(chw_src_hwc, rows, cols):
    """split_to_tiles: [H, W, C] -> [rows * cols, C, H / rows, W / cols], row-major over the tile grid."""
    x = np.transpose(chw_src_hwc, (2, 0, 1))
    C, H, W = x.shape
    assert H % rows == 0 and W % cols == 0
    x = x.reshape(C, rows, H // rows, cols, W // cols).transpose(1, 3, 0, 2, 4)
    return x.reshape(rows * cols, C, H // rows, W // cols)


def preprocess(img, tile, max_tiles):
    canvases = supported_canvases(max_tiles, tile)
    canvas = best_canvas(img.shape[0], img.shape[1], canvases)
    padded = pad_or_crop(img, canvas)
    norm = rescale_normalize(padded)
    rows, cols = canvas[0] // tile, canvas[1] // tile
    tiles = to_tiles(norm, rows, cols)
    resample = None
    if rows * cols > 1:
        pil = Image.fromarray(img)
        resample = Image.Resampling.BILINEAR
        if pil.size[0] > tile or pil.size[1] > tile:
            resample = Image.Resampling.LANCZOS
        glob = np.array(pil.resize((tile, tile), resample=resample))
        glob = np.transpose(rescale_normalize(glob), (2, 0, 1))[None]
        tiles = np.concatenate([tiles, glob], axis=0)
    assert tiles.dtype == np.float64
    tiles = tiles.astype(np.float32)  # [n, C, tile, tile]
    return tiles, canvas, (rows, cols), resample


def image_tokens(rows, cols, per_chunk):
    toks = [TOK_IMAGE_START]
    if rows * cols > 1:
        for _ in range(rows):
            for x in range(cols):
                toks += [TOK_PATCH] * per_chunk
                if x < cols - 1:
                    toks.append(TOK_TILE_X_SEP)
            toks.append(TOK_TILE_Y_SEP)
    toks.append(TOK_IMAGE)
    toks += [TOK_PATCH] * per_chunk
    toks.append(TOK_IMAGE_END)
    return toks


def expected_token_count(rows, cols, per_chunk):
    """get_num_tokens_for_this_image."""
    n = 3 + per_chunk
    if rows * cols > 1:
        n += rows * cols * (per_chunk + 1)
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image")
    ap.add_argument("out_dir")
    ap.add_argument("--tile-size", type=int, default=336)
    ap.add_argument("--max-tiles", type=int, default=16)
    a = ap.parse_args()

    with Image.open(a.image) as im:
        rgb = im.convert("RGB")
        rgb.load()
        img = np.asarray(rgb)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3

    tiles, canvas, (rows, cols), resample = preprocess(img, a.tile_size, a.max_tiles)
    downsample = int(round(1.0 / (PIXEL_SHUFFLE_RATIO ** 2)))
    per_chunk = int((a.tile_size // PATCH) * (a.tile_size // PATCH) // downsample)
    toks = image_tokens(rows, cols, per_chunk)
    assert len(toks) == expected_token_count(rows, cols, per_chunk)
    n_expected = rows * cols + (1 if rows * cols > 1 else 0)
    assert tiles.shape == (n_expected, 3, a.tile_size, a.tile_size)

    os.makedirs(a.out_dir, exist_ok=True)
    np.save(os.path.join(a.out_dir, "tiles.npy"), np.ascontiguousarray(tiles.transpose(0, 2, 3, 1)))
    with open(os.path.join(a.out_dir, "aspect.json"), "w") as f:
        json.dump({"ratio_h": rows, "ratio_w": cols}, f)
    with open(os.path.join(a.out_dir, "tokens.json"), "w") as f:
        json.dump(toks, f)
    filt = {None: "none", Image.Resampling.BILINEAR: "bilinear", Image.Resampling.LANCZOS: "lanczos"}[resample]
    print(f"image {img.shape[1]}x{img.shape[0]} (WxH): best resolution (h, w) = {canvas}, "
          f"tiles {rows}x{cols} (+{'1 global, ' + filt if rows * cols > 1 else 'no global'}), "
          f"tiles.npy {tuple(tiles.transpose(0, 2, 3, 1).shape)}, {len(toks)} tokens "
          f"({per_chunk} patches per chunk)")


if __name__ == "__main__":
    main()
