"""Hugging Face's Gemma 3 pan-and-scan, re-stated with Pillow, for tests/tools/test_cli_vision.cpp.

Read from transformers' src/transformers/models/gemma3/image_processing_gemma3.py (Gemma3ImageProcessor.pan_and_scan,
_process_images_for_pan_and_scan) and processing_gemma3.py (Gemma3Processor.__call__: the text that replaces the
begin-of-image token of a picture that has crops), with Gemma 3's preprocessor_config.json values
(pan_and_scan_min_crop_size 256, pan_and_scan_max_num_crops 4, pan_and_scan_min_ratio_to_activate 1.2):

  landscape or square (width >= height):
    nothing when width / height < 1.2;
    n = floor(width / height + 0.5); n = min(floor(width / 256), n); n = max(2, n); n = min(4, n); crops n x 1
  portrait: the same with height and width swapped; crops 1 x n
  crop_w = ceil(width / crops_w), crop_h = ceil(height / crops_h); nothing when min(crop_w, crop_h) < 256
  crops image[y:y + crop_h, x:x + crop_w] for y in rows, x in columns (NumPy slices: the last ones end at the edge),
  rows outer, columns inner (itertools.product)
  the picture's marker becomes "Here is the original image <boi> and here are some crops to help you see better "
  + " ".join([<boi>] * number of crops); the pictures are the picture followed by its crops.

Usage: gemma3_pan_and_scan.py OUT_DIR NAME:WIDTHxHEIGHT [NAME:WIDTHxHEIGHT ...]
Writes OUT_DIR/NAME.png (seeded pixels, Pillow), each crop as OUT_DIR/NAME_crop{k}.png (Pillow's Image.crop), and
OUT_DIR/NAME.txt: the crops' file names, one per line (none: an empty file), then a line "text: " and the text that
replaces the picture's marker, with <__media__> as the marker.
"""
import math
import os
import sys

import numpy as np
from PIL import Image

MIN_CROP, MAX_CROPS, MIN_RATIO = 256, 4, 1.2


def crop_boxes(width, height):
    if width >= height:
        if width / height < MIN_RATIO:
            return []
        n = int(math.floor(width / height + 0.5))
        n = min(int(math.floor(width / MIN_CROP)), n)
        n = min(MAX_CROPS, max(2, n))
        nw, nh = n, 1
    else:
        if height / width < MIN_RATIO:
            return []
        n = int(math.floor(height / width + 0.5))
        n = min(int(math.floor(height / MIN_CROP)), n)
        n = min(MAX_CROPS, max(2, n))
        nw, nh = 1, n
    cw, ch = int(math.ceil(width / nw)), int(math.ceil(height / nh))
    if min(cw, ch) < MIN_CROP:
        return []
    return [(x, y, min(width, x + cw), min(height, y + ch)) for y in range(0, ch * nh, ch) for x in range(0, cw * nw, cw)]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261207)
    for spec in sys.argv[2:]:
        name, size = spec.split(":")
        w, h = (int(v) for v in size.split("x"))
        # A gradient with noise: neighbouring pixels differ, so a crop off by a pixel changes the tower's input.
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], axis=-1)
        noise = rng.integers(-40, 41, size=(h, w, 3))
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        img = Image.fromarray(pixels, "RGB")
        img.save(os.path.join(out, name + ".png"))
        files = []
        for k, box in enumerate(crop_boxes(w, h)):
            f = f"{name}_crop{k}.png"
            img.crop(box).save(os.path.join(out, f))
            files.append(f)
        text = "<__media__>"
        if files:
            text = ("Here is the original image <__media__> and here are some crops to help you see better "
                    + " ".join(["<__media__>"] * len(files)))
        with open(os.path.join(out, name + ".txt"), "w") as fh:
            for f in files:
                fh.write(f + "\n")
            fh.write("text: " + text + "\n")


if __name__ == "__main__":
    main()
