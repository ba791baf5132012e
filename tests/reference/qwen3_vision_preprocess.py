"""The image side of the Qwen3-VL / Qwen3-Omni / Qwen3.5 processors (smart resize, normalisation, patch flattening),
re-stated in NumPy + Pillow, with a fixture of three small PNGs.

Sources read:
  MaxText, commit e591f30cbbf217ed67ef71263ec0538239f9c3b8:
    src/maxtext/multimodal/processor_qwen3_omni.py: IMAGE_MEAN/IMAGE_STD (127.5), IMAGE_FACTOR (28), MIN_PIXELS
      (4*28*28), MAX_PIXELS (16384*28*28), MAX_RATIO (200), smart_resize, pre_process_qwen3_image,
      preprocess_mm_data_qwen3_omni (inference: reshape to [1, C, tp*t, p*gh, p*gw]),
      preprocess_mm_data_qwen3_omni_for_training (forced square resize to image_size_for_vit);
    src/maxtext/multimodal/processor.py (qwen3_omni, qwen3_vl and qwen3_5 all use those functions);
    src/maxtext/multimodal/utils.py: normalize_images ((x - mean) / std on 0..255 floats).
  Hugging Face transformers (code index): models/qwen2_vl/image_processing_qwen2_vl.py (smart_resize,
    Qwen2VLImageProcessor._preprocess: PIL resize (BICUBIC), rescale 1/255, normalize, repeat the last frame up to a
    multiple of temporal_patch_size, reshape/transpose to the merge-window order); Qwen3-VL / Qwen3.5 reuse this
    processor with patch_size 16, merge_size 2, temporal_patch_size 2, image_mean = image_std = [0.5, 0.5, 0.5],
    size = {shortest_edge: 65536, longest_edge: 16777216} (preprocessor_config.json of the released checkpoints, as
    quoted by several public projects; min_pixels = shortest_edge, max_pixels = longest_edge).

Math:
  smart_resize(h, w, factor, min_pixels, max_pixels):
    reject max(h,w)/min(h,w) > 200;
    h' = round(h / factor) * factor, w' = round(w / factor) * factor   (Python round: ties to EVEN, e.g. 62.5 -> 62);
    if h' * w' > max_pixels: b = sqrt(h*w / max_pixels); h' = max(factor, floor(h / b / factor) * factor), same for w;
    elif h' * w' < min_pixels: b = sqrt(min_pixels / (h*w)); h' = ceil(h * b / factor) * factor, same for w.
    (Older HF versions also reject h < factor or w < factor and lack the max(factor, .) guard; MaxText's copy has the
    guard and no small-side check; the results agree whenever both are defined.)
  HF (Qwen3.5 / Qwen3-VL): ONE resize to smart_resize(H, W, factor = patch * merge = 32, 65536, 16777216) with PIL
    BICUBIC on the uint8 image, then x = (v / 255 - 0.5) / 0.5 == v / 127.5 - 1 per channel.
  MaxText (pre_process_qwen3_image, inference path): TWO resizes: first to smart_resize(H, W, 28, 3136, 12845056)
    with PIL's default filter (BICUBIC), then to smart_resize(h1, w1, patch * merge, 3136, 12845056) with BICUBIC,
    then x = (v - 127.5) / 127.5. (The training path instead forces a square image_size_for_vit resize.)
  patch flattening (both): frames [T, C, H, W] (an image is ONE frame repeated temporal_patch_size times, so grid_t = 1)
    -> reshape [gt, tp, C, gh/m, m, p, gw/m, m, p] -> transpose (0, 3, 6, 4, 7, 2, 1, 5, 8)
    -> [gt * gh * gw, C * tp * p * p]:
    token order = (t, window row, window col, row in window, col in window)  (merge-window order),
    feature order inside a token = (channel, temporal slot, pixel row in patch, pixel col in patch).
  MaxText then reshapes that same buffer (no transpose) to [1, C, tp * gt, p * gh, p * gw]; the vision encoder undoes
    it with reshape(-1, C, tp, p, p). The 5-D array is therefore NOT the image: only its memory order matters.

Writes tests/fixtures/qwen3_vision_preprocess/: img_{i}.png (uint8 RGB), resized_{i}.npy (uint8 [h, w, 3] after the
  PIL bicubic resize), pixel_values_{i}.npy (float32 [gh*gw, 3*2*16*16]), grid_thw.npy (int32 [3, 3]), meta.json
  (settings, per-image sizes, and the real Qwen3.5 resize targets for 640x480, 1920x1080, 100x2000 under HF's and
  MaxText's pipelines).
Run: /usr/bin/python3 tests/reference/qwen3_vision_preprocess.py
"""
import math
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import case_dir, rng, save_meta, save_npy  # noqa: E402

CASE = "qwen3_vision_preprocess"
SEED = 3590

# Qwen3.5 / Qwen3-VL released processor settings (HF preprocessor_config.json)
HF_QWEN35 = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 65536,
             "max_pixels": 16777216, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
             "resample": "PIL BICUBIC", "rescale_factor": 1.0 / 255}
# MaxText's processor_qwen3_omni constants (used for qwen3_omni, qwen3_vl and qwen3_5)
MAXTEXT = {"first_factor": 28, "min_pixels": 4 * 28 * 28, "max_pixels": 16384 * 28 * 28, "mean": 127.5,
           "std": 127.5, "max_ratio": 200}


def smart_resize(height, width, factor, min_pixels, max_pixels, max_ratio=200):
    """(h', w'): multiples of `factor`, area inside [min_pixels, max_pixels], aspect ratio kept as far as possible.
    Python's round() rounds halves to even; a port must do the same."""
    if max(height, width) / min(height, width) > max_ratio:
        raise ValueError(f"aspect ratio over {max_ratio}: {height}x{width}")
    hb = round(height / factor) * factor
    wb = round(width / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        hb = max(factor, math.floor(height / beta / factor) * factor)
        wb = max(factor, math.floor(width / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        hb = math.ceil(height * beta / factor) * factor
        wb = math.ceil(width * beta / factor) * factor
    return hb, wb


def hf_resize_target(h, w, patch=16, merge=2, min_pixels=65536, max_pixels=16777216):
    return smart_resize(h, w, patch * merge, min_pixels, max_pixels)


def maxtext_resize_targets(h, w, patch=16, merge=2):
    """MaxText's two smart resizes: (h1, w1) with factor 28, then (h2, w2) with factor patch*merge, same bounds."""
    h1, w1 = smart_resize(h, w, MAXTEXT["first_factor"], MAXTEXT["min_pixels"], MAXTEXT["max_pixels"])
    h2, w2 = smart_resize(h1, w1, patch * merge, MAXTEXT["min_pixels"], MAXTEXT["max_pixels"])
    return (h1, w1), (h2, w2)


def pil_bicubic(u8, h, w):
    """uint8 [H, W, 3] -> uint8 [h, w, 3] through PIL's BICUBIC resize (what both processors call)."""
    return np.asarray(Image.fromarray(u8).resize((w, h), resample=Image.BICUBIC))


def normalize(u8, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)):
    """(v / 255 - mean) / std per channel, computed in float64 and rounded once to float32 (with mean = std = 0.5 this
    is v / 127.5 - 1, MaxText's (v - 127.5) / 127.5)."""
    x = np.asarray(u8, dtype=np.float64) / 255.0
    return ((x - np.asarray(mean, np.float64)) / np.asarray(std, np.float64)).astype(np.float32)


def patchify(frames, patch, temporal_patch, merge):
    """frames float [T, C, H, W] (an image: T = 1) -> (pixel_values [gt*gh*gw, C*tp*p*p], (gt, gh, gw)).
    The last frame is repeated up to a multiple of temporal_patch (an image becomes tp identical frames)."""
    frames = np.asarray(frames)
    if frames.shape[0] % temporal_patch:
        pad = np.repeat(frames[-1:], temporal_patch - frames.shape[0] % temporal_patch, axis=0)
        frames = np.concatenate([frames, pad], axis=0)
    T, C, H, W = frames.shape
    gt, gh, gw = T // temporal_patch, H // patch, W // patch
    assert gh * patch == H and gw * patch == W and gh % merge == 0 and gw % merge == 0, frames.shape
    x = frames.reshape(gt, temporal_patch, C, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x.reshape(gt * gh * gw, C * temporal_patch * patch * patch)), (gt, gh, gw)


def image_to_pixel_values(img_hwc, patch, temporal_patch, merge):
    """normalised float [H, W, C] image -> (pixel_values, grid_thw)."""
    return patchify(np.transpose(img_hwc, (2, 0, 1))[None], patch, temporal_patch, merge)


def to_maxtext_5d(pixel_values, grid, channels, temporal_patch, patch):
    """The same buffer as MaxText's encoder input [1, C, tp*gt, p*gh, p*gw] (a pure reshape)."""
    gt, gh, gw = grid
    return pixel_values.reshape(1, channels, temporal_patch * gt, patch * gh, patch * gw)


def preprocess_hf(u8, patch=16, temporal_patch=2, merge=2, min_pixels=65536, max_pixels=16777216,
                  mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)):
    """HF Qwen2VLImageProcessor path (Qwen3-VL / Qwen3.5): returns (resized uint8, pixel_values, grid_thw)."""
    h, w = smart_resize(u8.shape[0], u8.shape[1], patch * merge, min_pixels, max_pixels)
    r = pil_bicubic(u8, h, w)
    pv, grid = image_to_pixel_values(normalize(r, mean, std), patch, temporal_patch, merge)
    return r, pv, grid


def preprocess_maxtext(u8, patch=16, temporal_patch=2, merge=2):
    """MaxText pre_process_qwen3_image (inference path): two resizes, then the same flattening."""
    (h1, w1), (h2, w2) = maxtext_resize_targets(u8.shape[0], u8.shape[1], patch, merge)
    r1 = pil_bicubic(u8, h1, w1)
    r = pil_bicubic(r1, h2, w2)
    pv, grid = image_to_pixel_values(normalize(r), patch, temporal_patch, merge)
    return r, pv, grid


def _test_image(g, h, w):
    """A smooth colour gradient plus noise (so the bicubic resize is exercised on real structure)."""
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    base = np.stack([255 * yy, 255 * xx, 255 * (0.5 + 0.5 * np.sin(6 * xx + 4 * yy))], axis=-1)
    return np.clip(base + g.normal(0, 25, (h, w, 3)), 0, 255).round().astype(np.uint8)


def main():
    g = rng(SEED)
    out = case_dir(CASE)
    # small budgets so that the three images exercise: plain rounding, shrinking (max), growing (min)
    settings = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 2048,
                "max_pixels": 6144, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
    sizes = [(45, 70), (130, 90), (20, 40)]  # (H, W): round only / too many pixels / too few pixels
    grids, images = [], []
    for i, (h, w) in enumerate(sizes):
        u8 = _test_image(g, h, w)
        Image.fromarray(u8).save(os.path.join(out, f"img_{i}.png"))
        back = np.asarray(Image.open(os.path.join(out, f"img_{i}.png")).convert("RGB"))
        assert np.array_equal(back, u8)
        r, pv, grid = preprocess_hf(u8, settings["patch_size"], settings["temporal_patch_size"],
                                    settings["merge_size"], settings["min_pixels"], settings["max_pixels"])
        # the flattening must be the inverse of a plain re-tiling: check a few patches directly
        x = normalize(r)
        p, m = settings["patch_size"], settings["merge_size"]
        _, gh, gw = grid
        for tok in (0, 1, 2, 3, len(pv) - 1):
            win, inner = divmod(tok, m * m)
            wr, wc = divmod(win, gw // m)
            ir, ic = divmod(inner, m)
            r0, c0 = (wr * m + ir) * p, (wc * m + ic) * p
            patch = x[r0:r0 + p, c0:c0 + p, :].transpose(2, 0, 1)  # [C, p, p]
            want = np.stack([patch, patch], axis=1).reshape(-1)  # (C, tp, py, px)
            assert np.array_equal(pv[tok], want), (i, tok)
        save_npy(out, f"resized_{i}", r)
        save_npy(out, f"pixel_values_{i}", pv)
        grids.append(grid)
        images.append({"case": ["rounding only", "over max_pixels: shrink", "under min_pixels: grow"][i],
                       "png": f"img_{i}.png", "H": h, "W": w, "resized_hw": list(r.shape[:2]),
                       "grid_thw": list(grid), "num_patches": len(pv), "merged_tokens": len(pv) // 4})
    save_npy(out, "grid_thw", np.asarray(grids, dtype=np.int32))

    real = {}
    for (W, H) in [(640, 480), (1920, 1080), (100, 2000)]:
        hf = hf_resize_target(H, W)
        (h1, w1), (h2, w2) = maxtext_resize_targets(H, W)
        real[f"{W}x{H}"] = {
            "hf_qwen3_5": {"resized_hw": list(hf), "grid_thw": [1, hf[0] // 16, hf[1] // 16],
                           "patches": hf[0] * hf[1] // 256, "merged_tokens": hf[0] * hf[1] // 1024},
            "maxtext_pre_process_qwen3_image": {"first_resize_hw": [h1, w1], "resized_hw": [h2, w2],
                                                "grid_thw": [1, h2 // 16, w2 // 16], "patches": h2 * w2 // 256,
                                                "merged_tokens": h2 * w2 // 1024}}
    meta = {
        "what": "Qwen3-VL / Qwen3.5 image preprocessing (HF Qwen2VLImageProcessor path, single PIL bicubic resize) "
                "on three small PNGs with small pixel budgets",
        "settings": settings, "seed": SEED, "images": images,
        "files": {"img_i.png": "uint8 RGB input", "resized_i.npy": "uint8 [h, w, 3] after smart_resize + PIL BICUBIC",
                  "pixel_values_i.npy": "float32 [gh*gw, C*tp*p*p] (HF pixel_values; MaxText reshapes this buffer "
                                        "to [1, C, tp, p*gh, p*gw])",
                  "grid_thw.npy": "int32 [3 images, 3]"},
        "conventions": {
            "smart_resize": "h'=round(h/f)*f, w'=round(w/f)*f with Python round (ties to even); if h'w'>max: "
                            "b=sqrt(hw/max), h'=max(f,floor(h/b/f)*f), w' same; elif h'w'<min: b=sqrt(min/(hw)), "
                            "h'=ceil(h*b/f)*f, w' same; reject aspect ratio > 200; f = patch*merge = 32",
            "resize": "PIL Image.resize((w', h'), BICUBIC) on the uint8 RGB image",
            "normalise": "x = (v/255 - 0.5)/0.5 = v/127.5 - 1 (float32)",
            "temporal": "an image is one frame repeated temporal_patch_size (2) times: grid_t = 1",
            "token_order": "merge-window order: for each 2x2 window in row-major order over windows, its 4 patches "
                           "row-major (token = ((wr*(gw/2) + wc)*2 + ir)*2 + ic, patch row = 2*wr+ir, col = 2*wc+ic)",
            "patch_feature_order": "(channel, temporal slot, pixel row, pixel col): index = ((c*tp + t)*p + y)*p + x",
            "hf_fast_processor_note": "transformers' fast (torchvision) processor resizes with torch bicubic + "
                                      "antialias on tensors, which can differ from PIL by a few uint8 levels; this "
                                      "fixture follows the PIL path (slow processor, and MaxText)",
        },
        "hf_qwen3_5_processor_defaults": HF_QWEN35,
        "maxtext_processor_constants": MAXTEXT,
        "real_model_resize_targets_WxH": real,
        "real_targets_note": "100x2000: HF gives w'=96 (100/32=3.125 -> 3) and h'=1984 (2000/32=62.5 -> 62, ties to "
                             "even); MaxText's first resize gives 1988x112, then 112/32=3.5 -> 4 (ties to even) so "
                             "w'=128: the two pipelines disagree for this image",
    }
    save_meta(out, meta)
    print("wrote", out)
    for k, v in real.items():
        print(" ", k, v)
    for im in images:
        print(" ", im)


if __name__ == "__main__":
    main()
