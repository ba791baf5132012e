"""Image decode / resize / Gemma 3 preprocessing fixtures: tests/fixtures/images/.

Run with Debian's interpreter (numpy + python3-pil): /usr/bin/python3 tests/reference/image_fixtures.py
Written with Pillow 9.4.0 (Debian python3-pil 9.4.0-1.1+deb12u1), which decodes JPEG with the system
libjpeg62-turbo 2.1.5 (libjpeg.so.62) and PNG with its own decoder on zlib 1.2.13. The script asserts the Pillow
version, so a different Pillow cannot silently rewrite the references.

Everything is deterministic: content comes from seeded numpy generators (smooth gradients + noise + sharp edges and
saturated 0 / 255 blocks, so that every resampling filter's overshoot and clamping are exercised).

What each fixture checks
------------------------
1. Decoding (`<file>.rgb.npy`, uint8 [H, W, 3] = np.asarray(Image.open(f).convert("RGB"))). The C++ decoder must
   reproduce these bytes exactly (manifest "images", expect == "rgb"):
   - png_rgb8_*           8-bit truecolor (the 64x48, 5x7 and 1x1 ones are also resize sources).
   - png_rgba8_*          8-bit RGBA: convert("RGB") DROPS alpha (no compositing, no premultiplication).
   - png_l8_*             8-bit gray: R = G = B = gray.
   - png_la8_*            8-bit gray + alpha: alpha dropped, R = G = B = gray.
   - png_p8_*             8-bit palette, no tRNS: palette lookup.
   - png_p4_*             4-bit palette (Pillow bits=4): palette lookup of packed 4-bit indices.
   - png_p8_trns_*        8-bit palette with a tRNS chunk of per-entry alphas (several 0): Pillow's convert("RGB")
                          IGNORES tRNS (plain palette lookup; Pillow warns that such images should go to RGBA).
   - png_bilevel1_*       mode "1" (1-bit gray): 0 / 255.
   - png_l2_*_handmade, png_l4_*_handmade
                          2- and 4-bit gray (Pillow cannot write these: its bits= option only applies to mode "P",
                          so they come from the small PNG writer below). Pillow scales to 8 bits by bit replication
                          (2-bit: v * 85, 4-bit: v * 17), i.e. the same as libpng's png_set_expand_gray_1_2_4_to_8.
   - png_rgb16_*_handmade 16-bit RGB (Pillow cannot write it). Pillow opens it as mode "RGB" keeping the HIGH BYTE of
                          each sample (truncation v >> 8, like libpng png_set_strip_16, NOT png_set_scale_16 which
                          rounds). The low bytes are random, so rounding would differ on about half the samples.
   - png_l16_*            16-bit gray written by Pillow from mode "I;16". Pillow opens it as mode "I" (32-bit int)
                          and convert("RGB") CLIPS: min(v, 255) -- no scaling, no high byte! So a 16-bit gray PNG
                          is nearly all white after Pillow's convert("RGB"). The image has a block of small values
                          (0..400) so both the pass-through and the clip are covered. This is inconsistent with the
                          16-bit RGB case above; it is what Pillow 9.4 (and MaxText's load_image_from_path) does.
   - png_rgb8_adam7_*_handmade
                          Adam7-interlaced 8-bit RGB (Pillow cannot write interlaced PNGs; written by the writer below,
                          filter type 0 on every scanline, empty passes omitted as the PNG spec says). 3x2 has empty
                          passes. Pillow decodes them to the same pixels as the non-interlaced image.
   - jpeg_rgb_q90_420_*, _444_, _422_, _420_progressive_, jpeg_l_q90_*
                          baseline 4:2:0 / 4:4:4 / 4:2:2, progressive, and grayscale JPEGs, Pillow quality 90. 37x23 and
                          5x7 have partial MCUs; 64x48 is MCU-aligned. Pillow decodes with libjpeg-turbo's defaults
                          (JDCT_ISLOW, do_fancy_upsampling = TRUE, no scaling / draft mode, out_color_space JCS_RGB or
                          JCS_GRAYSCALE), so the C++ side must use those settings to match byte for byte.
   - jpeg_cmyk_q90_*      a CMYK JPEG (Pillow writes it with an Adobe APP14 marker, inverted). The C++ loader must
                          REFUSE it (manifest expect == "refused", rgb_npy null; no .rgb.npy is written).
   - gemma_src_rgb_q85_1000x700.jpg
                          the "larger than 896" Gemma 3 source. Its decoded RGB (2.1 MB) is not stored: the manifest
                          holds rgb_sha256 (sha256 of the uint8 [H, W, 3] bytes) instead, as for every image.
2. Resize (`resize_<src>_<W>x<H>_<filter>.npy`, uint8 [H, W, 3] =
   Image.open(src).convert("RGB").resize((W, H), resample=filter), reducing_gap=None): every filter NEAREST, BOX,
   BILINEAR, HAMMING, BICUBIC, LANCZOS on downscale, upscale, non-uniform scale (down on one axis, up on the other),
   one axis unchanged, extreme downscale (64x48 -> 3x2), tiny sources (5x7, 1x1) and the identity size (Pillow returns
   a plain copy when the size does not change). Sources: png_rgb8_64x48/5x7/1x1 and jpeg_rgb_q90_420_37x23.
3. Gemma 3 preprocessing at 896x896 (manifest "gemma3"; the 896x896x3 outputs are too big to store, so only hashes
   and statistics):
   - maxtext: src/maxtext/multimodal/processor_gemma3.py preprocess_mm_data_gemma3: BILINEAR, or LANCZOS when the
     source is larger than 896 in either dimension; img = np.asarray(resized, dtype=np.float32);
     mm_utils.normalize_images does `images -= np.asarray(mean)` and `images /= np.asarray(std)` in place with
     mean = std = (127.5,) * 3. np.asarray of a tuple of Python floats is a float64 array of shape (3,), and an array
     operand (not a scalar) is never demoted, so each in-place ufunc computes in float64 and casts the result back to
     float32 (same_kind): v = f32(f64(f32(f64(x) - 127.5)) / 127.5) -- the same under NumPy 1.x value-based casting
     and NumPy 2 (NEP 50). Then np.clip(img, -1, 1) (float32 stays float32; a no-op here). Layout [H, W, C].
   - hf: transformers Gemma3ImageProcessor (the numpy/PIL "slow" processor; in transformers v5 Gemma3ImageProcessorPil,
     which calls the same image_transforms functions), google/gemma-3 preprocessor config: size 896x896,
     resample BILINEAR (always), rescale_factor 1/255, image_mean = image_std = [0.5, 0.5, 0.5], channels-first output.
     image_transforms.resize goes through PIL (uint8 array -> Image.fromarray -> resize((896, 896), BILINEAR,
     reducing_gap=None)). image_transforms.rescale: `image.astype(np.float64) * scale` then `.astype(np.float32)`,
     i.e. r = f32(f64(x) * (1/255)) with 1/255 the Python double. image_transforms.normalize: the image is already
     float32, mean / std become np.array(..., dtype=float32), `(image - mean) / std` is all-float32:
     v = f32(f32(r - 0.5f) / 0.5f). (Not the torchvision "fast" processor, which resizes differently.)
   The two normalisations are NOT bit-identical: MaxText's equals plain float32 (x - 127.5f) / 127.5f, HF's differs
   from it on 128 of the 256 byte values (by up to 6e-8 absolute, up to 127 ulps near 0); the manifest's
   gemma3_normalize_lut holds both 256-entry tables.
   For each: sha256 of the resized uint8 [896, 896, 3] bytes, first8 (the first 8 float32 values of the normalised
   tensor in its native layout: MaxText [H, W, C], HF [C, H, W]; also first8_hwc), first8_bits (their IEEE-754 bits
   as hex, exact), sum (float64 sum of the float32 values; the summation order is numpy's pairwise one, so compare
   with a relative tolerance of ~1e-12) and sha256_f32_hwc (sha256 of the normalised float32 [H, W, C] bytes,
   little-endian: an exact check). For the small source both pipelines use BILINEAR and agree; for the 1000x700 one
   MaxText uses LANCZOS and HF BILINEAR.
4. manifest.json ties it together (images, resize, gemma3 lists).
"""
import hashlib
import json
import os
import struct
import sys
import warnings
import zlib

import numpy as np
import PIL
from PIL import Image

PILLOW_VERSION = "9.4.0"
assert PIL.__version__ == PILLOW_VERSION, f"these references are for Pillow {PILLOW_VERSION}, got {PIL.__version__}"

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "images")

FILTERS = {"nearest": Image.NEAREST, "box": Image.BOX, "bilinear": Image.BILINEAR, "hamming": Image.HAMMING,
           "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}


def rng(seed):
    return np.random.default_rng(seed)


def sha256(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


# ---------------------------------------------------------------------------------------------------------------------
# Deterministic content


def content(h, w, seed):
    """uint8 [h, w, 3]: smooth gradients + noise + sharp-edged blocks (including exact 0 and 255)."""
    g = rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    y = y / max(h - 1, 1)
    x = x / max(w - 1, 1)
    a = np.stack([255.0 * x,
                  127.5 + 127.5 * np.sin(2 * np.pi * (0.8 * y + 0.3 * x)),
                  255.0 * (1.0 - y) * (0.5 + 0.5 * np.cos(3.0 * x * y))], axis=-1)
    a += g.normal(0.0, 18.0, (h, w, 3))
    # sharp edges: a saturated block, a black block, a diagonal half-plane inverted, a 1-px stripe
    a[int(h * 0.2):int(h * 0.55) + 1, int(w * 0.15):int(w * 0.45) + 1] = [255, 0, 255]
    a[int(h * 0.6):int(h * 0.85) + 1, int(w * 0.6):int(w * 0.8) + 1] = [0, 0, 0]
    half = x > y + 0.35
    a[half] = 255.0 - a[half]
    a[:, w // 2] = [255, 255, 255]
    if h * w <= 64:  # tiny images: mostly noise, plus one saturated pixel each way
        a = g.integers(0, 256, (h, w, 3)).astype(np.float64)
        a.reshape(-1, 3)[0] = [255, 255, 255]
        a.reshape(-1, 3)[-1] = [0, 0, 0]
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def gray_of(rgb):
    return np.clip(np.rint(rgb.astype(np.float64) @ [0.299, 0.587, 0.114]), 0, 255).astype(np.uint8)


def alpha_plane(h, w, seed):
    g = rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = 255.0 * (x + y) / max(h + w - 2, 1) + g.normal(0, 30, (h, w))
    a[: h // 3, : w // 3] = 0
    a[-(h // 3):, -(w // 3):] = 255
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------------------------------
# A minimal PNG writer (Pillow cannot write 16-bit RGB, 2/4-bit gray or interlaced PNGs)

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _scanlines(a, bitdepth):
    """Raw scanlines (without the filter byte) of an integer [h, w, c] array."""
    rows = []
    for row in a:
        r = row.reshape(-1)
        if bitdepth == 16:
            rows.append(r.astype(">u2").tobytes())
        elif bitdepth == 8:
            rows.append(r.astype(np.uint8).tobytes())
        else:  # 1/2/4-bit samples, packed MSB first, last byte zero-padded
            bits = np.unpackbits(r.astype(np.uint8)[:, None], axis=1)[:, 8 - bitdepth:].reshape(-1)
            rows.append(np.packbits(bits).tobytes())
    return rows


def write_png(path, a, bitdepth, colortype, interlace=False):
    """Valid PNG: IHDR, one IDAT (zlib), IEND; filter type 0 on every scanline; Adam7 when interlace."""
    a = np.asarray(a)
    if a.ndim == 2:
        a = a[:, :, None]
    h, w, _ = a.shape
    raw = b""
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        sub = a[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue  # empty pass: no scanlines at all (not even filter bytes)
        raw += b"".join(b"\x00" + r for r in _scanlines(sub, bitdepth))
    ihdr = struct.pack(">IIBBBBB", w, h, bitdepth, colortype, 0, 0, 1 if interlace else 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw, 9)) +
                _chunk(b"IEND", b""))


# ---------------------------------------------------------------------------------------------------------------------


def decode_rgb(path):
    with warnings.catch_warnings():
        # P + tRNS bytes: "Palette images with Transparency expressed in bytes should be converted to RGBA images"
        warnings.simplefilter("ignore", UserWarning)
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):  # regenerate from scratch (subdirectories: other scripts' fixtures, kept)
        if os.path.isfile(os.path.join(OUT, f)):
            os.remove(os.path.join(OUT, f))
    images = []

    def record(name, fmt, expect="rgb", store_rgb=True, notes="", check=None):
        path = os.path.join(OUT, name)
        with Image.open(path) as im:
            mode, (w, h), info = im.mode, im.size, dict(im.info)
        entry = {"file": name, "format": fmt, "mode_in_pillow": mode, "width": w, "height": h, "expect": expect,
                 "rgb_npy": None, "rgb_sha256": None, "notes": notes}
        if "interlace" in info:
            entry["interlace"] = info["interlace"]
        if "transparency" in info:
            entry["pillow_transparency_info"] = True
        if fmt == "jpeg":
            entry["progressive"] = bool(info.get("progressive", 0))
        if expect == "rgb":
            rgb = decode_rgb(path)
            assert rgb.dtype == np.uint8 and rgb.shape == (h, w, 3), (name, rgb.shape)
            if check is not None:
                assert np.array_equal(rgb, check), f"{name}: Pillow's decode is not the expected one"
            entry["rgb_sha256"] = sha256(rgb)
            if store_rgb:
                entry["rgb_npy"] = name + ".rgb.npy"
                np.save(os.path.join(OUT, entry["rgb_npy"]), np.ascontiguousarray(rgb))
        images.append(entry)
        return entry

    def save_pil(im, name, **kw):
        im.save(os.path.join(OUT, name), **kw)

    # --- PNG, written by Pillow ---------------------------------------------------------------------------------
    for (w, h), seed in (((64, 48), 1), ((5, 7), 2), ((1, 1), 3)):
        a = content(h, w, seed)
        n = f"png_rgb8_{w}x{h}.png"
        save_pil(Image.fromarray(a, "RGB"), n)
        record(n, "png", notes="8-bit RGB (color type 2)", check=a)

    W, H = 37, 23
    base = content(H, W, 10)
    gray = gray_of(base)
    alpha = alpha_plane(H, W, 11)

    rgba = np.dstack([base, alpha])
    save_pil(Image.fromarray(rgba, "RGBA"), f"png_rgba8_{W}x{H}.png")
    record(f"png_rgba8_{W}x{H}.png", "png", notes="8-bit RGBA (color type 6); convert('RGB') drops alpha", check=base)

    save_pil(Image.fromarray(gray, "L"), f"png_l8_{W}x{H}.png")
    record(f"png_l8_{W}x{H}.png", "png", notes="8-bit gray (color type 0)", check=np.dstack([gray] * 3))

    save_pil(Image.fromarray(np.dstack([gray, alpha]), "LA"), f"png_la8_{W}x{H}.png")
    record(f"png_la8_{W}x{H}.png", "png", notes="8-bit gray+alpha (color type 4); alpha dropped",
           check=np.dstack([gray] * 3))

    g = rng(12)
    pal = g.integers(0, 256, (256, 3)).astype(np.uint8)
    pal[0], pal[255] = [0, 0, 0], [255, 255, 255]
    idx = ((gray.astype(np.int64) + g.integers(0, 40, gray.shape)) % 256).astype(np.uint8)
    p = Image.frombytes("P", (W, H), idx.tobytes())
    p.putpalette(pal.reshape(-1).tolist())
    save_pil(p, f"png_p8_{W}x{H}.png")
    record(f"png_p8_{W}x{H}.png", "png", notes="8-bit palette (color type 3), 256 entries, no tRNS", check=pal[idx])

    alphas = g.integers(0, 256, 200).astype(np.uint8)
    alphas[:8] = 0
    save_pil(p, f"png_p8_trns_{W}x{H}.png", transparency=alphas.tobytes())
    record(f"png_p8_trns_{W}x{H}.png", "png",
           notes="8-bit palette with tRNS (200 alphas, entries 0..7 fully transparent); Pillow's convert('RGB') "
                 "ignores tRNS: plain palette lookup", check=pal[idx])

    pal16 = g.integers(0, 256, (16, 3)).astype(np.uint8)
    idx4 = (gray // 16).astype(np.uint8)
    p4 = Image.frombytes("P", (W, H), idx4.tobytes())
    p4.putpalette(pal16.reshape(-1).tolist())
    save_pil(p4, f"png_p4_{W}x{H}.png", bits=4)
    record(f"png_p4_{W}x{H}.png", "png", notes="4-bit palette (Pillow bits=4), 16 entries", check=pal16[idx4])

    bil = (gray.astype(np.int64) + g.integers(-60, 61, gray.shape)) > 128
    save_pil(Image.fromarray(bil), f"png_bilevel1_{W}x{H}.png")
    record(f"png_bilevel1_{W}x{H}.png", "png", notes="mode '1', 1-bit gray; maps to 0/255",
           check=np.dstack([bil.astype(np.uint8) * 255] * 3))

    g16 = gray.astype(np.uint16) * 257 + g.integers(0, 257, gray.shape).astype(np.uint16)
    g16[H // 4:3 * H // 4, : W // 3] = g.integers(0, 401, (3 * H // 4 - H // 4, W // 3))
    g16[0, 0], g16[0, 1], g16[0, 2], g16[0, 3] = 0, 255, 256, 65535
    save_pil(Image.fromarray(g16, "I;16"), f"png_l16_{W}x{H}.png")
    clipped = np.minimum(g16, 255).astype(np.uint8)
    record(f"png_l16_{W}x{H}.png", "png",
           notes="16-bit gray (color type 0, bit depth 16) written from Pillow mode I;16; Pillow opens it as mode "
                 "'I' and convert('RGB') CLIPS min(v, 255) (no scaling, not the high byte)",
           check=np.dstack([clipped] * 3))

    # --- PNG, hand-made ----------------------------------------------------------------------------------------
    for bd in (2, 4):
        q = (gray >> (8 - bd)).astype(np.uint8)
        n = f"png_l{bd}_{W}x{H}_handmade.png"
        write_png(os.path.join(OUT, n), q, bd, 0)
        record(n, "png", notes=f"{bd}-bit gray (color type 0), hand-made; Pillow scales by bit replication "
                               f"(v * {255 // ((1 << bd) - 1)})", check=np.dstack([q * (255 // ((1 << bd) - 1))] * 3))

    low = g.integers(0, 256, base.shape).astype(np.uint16)
    low[0, 0] = [0x00, 0x7F, 0x80]
    low[0, 1] = [0xFF, 0x80, 0x7F]
    rgb16 = (base.astype(np.uint16) << 8) | low
    n = f"png_rgb16_{W}x{H}_handmade.png"
    write_png(os.path.join(OUT, n), rgb16, 16, 2)
    record(n, "png", notes="16-bit RGB (color type 2, bit depth 16), hand-made, random low bytes; Pillow opens "
                           "it as mode 'RGB' keeping the high byte (v >> 8, truncation like png_set_strip_16)",
           check=base)

    n = f"png_rgb8_adam7_{W}x{H}_handmade.png"
    write_png(os.path.join(OUT, n), base, 8, 2, interlace=True)
    record(n, "png", notes="Adam7-interlaced 8-bit RGB, hand-made, filter type 0 per scanline", check=base)
    tiny = content(2, 3, 13)
    n = "png_rgb8_adam7_3x2_handmade.png"
    write_png(os.path.join(OUT, n), tiny, 8, 2, interlace=True)
    record(n, "png", notes="Adam7-interlaced 8-bit RGB 3x2 (passes 2, 3 and 5 are empty), hand-made", check=tiny)

    # --- JPEG -------------------------------------------------------------------------------------------------
    big = content(48, 64, 20)
    save_pil(Image.fromarray(big), "jpeg_rgb_q90_420_64x48.jpg", quality=90, subsampling=2)
    record("jpeg_rgb_q90_420_64x48.jpg", "jpeg", notes="baseline, quality 90, 4:2:0, MCU-aligned (16x16 MCUs)")
    for ss, tag in ((2, "420"), (0, "444"), (1, "422")):
        n = f"jpeg_rgb_q90_{tag}_{W}x{H}.jpg"
        save_pil(Image.fromarray(base), n, quality=90, subsampling=ss)
        record(n, "jpeg", notes=f"baseline, quality 90, {tag[0]}:{tag[1]}:{tag[2]} subsampling, partial MCUs")
    n = f"jpeg_rgb_q90_420_progressive_{W}x{H}.jpg"
    save_pil(Image.fromarray(base), n, quality=90, subsampling=2, progressive=True)
    record(n, "jpeg", notes="progressive, quality 90, 4:2:0, partial MCUs")
    n = f"jpeg_l_q90_{W}x{H}.jpg"
    save_pil(Image.fromarray(gray, "L"), n, quality=90)
    record(n, "jpeg", notes="grayscale (1 component), quality 90; R = G = B")
    small = content(7, 5, 21)
    save_pil(Image.fromarray(small), "jpeg_rgb_q90_420_5x7.jpg", quality=90, subsampling=2)
    record("jpeg_rgb_q90_420_5x7.jpg", "jpeg", notes="baseline, quality 90, 4:2:0, smaller than one MCU")
    cmyk = np.dstack([base, alpha])
    n = f"jpeg_cmyk_q90_{W}x{H}.jpg"
    save_pil(Image.fromarray(cmyk, "CMYK"), n, quality=90)
    record(n, "jpeg", expect="refused", store_rgb=False,
           notes="4-component CMYK JPEG (Adobe APP14, inverted); the C++ loader must refuse it (Pillow would convert)")

    # --- Gemma 3 large source ---------------------------------------------------------------------------------
    gh, gw = 700, 1000
    gg = rng(30)
    y, x = np.mgrid[0:gh, 0:gw].astype(np.float64)
    y, x = y / (gh - 1), x / (gw - 1)
    ga = np.stack([255 * x, 127.5 + 127.5 * np.sin(6 * y + 3 * x), 127.5 + 127.5 * np.cos(9 * x * y)], -1)
    ga += gg.normal(0, 6, ga.shape)
    ga[100:300, 150:420] = [255, 0, 255]
    ga[450:640, 600:900] = [0, 0, 0]
    ga[:, 500:503] = 255
    ga = np.clip(np.rint(ga), 0, 255).astype(np.uint8)
    gname = "gemma_src_rgb_q85_1000x700.jpg"
    save_pil(Image.fromarray(ga), gname, quality=85)
    record(gname, "jpeg", store_rgb=False,
           notes="Gemma 3 'larger than 896' source, quality 85 (Pillow default 4:2:0); decoded RGB not stored "
                 "(2.1 MB): compare rgb_sha256")

    # --- Resize references -----------------------------------------------------------------------------------
    resize = []
    triples = [("png_rgb8_64x48.png", [(17, 31), (64, 13), (23, 17), (96, 72), (3, 2), (64, 48)]),
               ("jpeg_rgb_q90_420_37x23.jpg", [(80, 60), (12, 9), (37, 50)]),
               ("png_rgb8_5x7.png", [(3, 11)]),
               ("png_rgb8_1x1.png", [(4, 4)])]
    for src, sizes in triples:
        with Image.open(os.path.join(OUT, src)) as im:
            rgb_im = im.convert("RGB")
        stem = os.path.splitext(src)[0]
        for (w, h) in sizes:
            for fname, f in FILTERS.items():
                out = np.asarray(rgb_im.resize((w, h), resample=f))
                assert out.shape == (h, w, 3) and out.dtype == np.uint8
                npy = f"resize_{stem}_{w}x{h}_{fname}.npy"
                np.save(os.path.join(OUT, npy), np.ascontiguousarray(out))
                resize.append({"src": src, "width": w, "height": h, "filter": fname, "pillow_filter": int(f),
                               "npy": npy, "sha256": sha256(out)})
                if (w, h) == rgb_im.size:
                    assert np.array_equal(out, np.asarray(rgb_im))

    # --- Gemma 3 preprocessing -------------------------------------------------------------------------------
    size = 896
    gemma = []
    for src in ("png_rgb8_64x48.png", gname):
        with Image.open(os.path.join(OUT, src)) as im:
            img = np.asarray(im.convert("RGB"))  # MaxText load_image_from_path / HF convert_to_rgb + to_numpy_array
        entry = {"src": src, "src_width": img.shape[1], "src_height": img.shape[0], "size": [size, size]}

        # MaxText preprocess_mm_data_gemma3
        pil_img = Image.fromarray(img)
        method, mname = Image.Resampling.BILINEAR, "bilinear"
        if pil_img.size[0] > size or pil_img.size[1] > size:
            method, mname = Image.Resampling.LANCZOS, "lanczos"
        resized = pil_img.resize((size, size), resample=method)
        u8 = np.asarray(resized)
        m = np.asarray(resized, dtype=np.float32)
        m -= np.asarray((127.5,) * 3)  # mm_utils.normalize_images (in place, float64 operand)
        m /= np.asarray((127.5,) * 3)
        m = np.clip(m, -1, 1)
        assert m.dtype == np.float32
        ref = (((u8.astype(np.float64) - 127.5).astype(np.float32).astype(np.float64)) / 127.5).astype(np.float32)
        assert np.array_equal(m, ref)
        entry["maxtext"] = stats(mname, u8, m, m, "HWC")

        # HF Gemma3ImageProcessor (numpy / PIL)
        hf_u8 = np.array(Image.fromarray(img).resize((size, size), resample=Image.BILINEAR, reducing_gap=None))
        r = hf_u8.astype(np.float64) * (1 / 255)  # image_transforms.rescale
        r = r.astype(np.float32)
        mean = np.array([0.5] * 3, dtype=r.dtype)  # image_transforms.normalize
        std = np.array([0.5] * 3, dtype=r.dtype)
        v = (r - mean) / std
        assert v.dtype == np.float32
        chw = v.transpose(2, 0, 1)  # data_format=ChannelDimension.FIRST
        entry["hf"] = stats("bilinear", hf_u8, chw, v, "CHW")
        gemma.append(entry)

    # Both normalisations map each uint8 value independently, so a 256-entry table pins them down exactly.
    x = np.arange(256, dtype=np.uint8)
    lut_m = x.astype(np.float32)
    lut_m -= np.asarray((127.5,) * 3)[:1]
    lut_m /= np.asarray((127.5,) * 3)[:1]
    assert np.array_equal(lut_m, (x.astype(np.float32) - np.float32(127.5)) / np.float32(127.5))
    lut_h = ((x.astype(np.float64) * (1 / 255)).astype(np.float32) - np.float32(0.5)) / np.float32(0.5)
    lut_diff = int(np.sum(lut_m != lut_h))
    assert lut_diff > 0  # the two are NOT bit-identical (up to ~6e-8 apart)

    manifest = {
        "generator": "tests/reference/image_fixtures.py",
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "decoder_notes": {
            "jpeg": "Pillow decodes with system libjpeg62-turbo 2.1.5 defaults: JDCT_ISLOW, do_fancy_upsampling=TRUE, "
                    "no DCT scaling, out_color_space JCS_RGB (JCS_GRAYSCALE for 1-component)",
            "png_rgb16": "high byte kept (v >> 8), like libpng png_set_strip_16",
            "png_gray16": "Pillow opens as mode 'I'; convert('RGB') clips min(v, 255)",
            "png_gray_1_2_4": "bit replication to 8 bits (1-bit: 0/255, 2-bit: *85, 4-bit: *17)",
            "png_alpha": "convert('RGB') drops alpha (RGBA, LA) without compositing",
            "png_palette_trns": "convert('RGB') ignores tRNS: plain palette lookup",
            "png_interlaced": "Adam7 decoded to the same pixels as non-interlaced",
        },
        "images": images,
        "resize": resize,
        "gemma3": gemma,
        "gemma3_notes": {
            "maxtext": "preprocess_mm_data_gemma3 (src/maxtext/multimodal/processor_gemma3.py): resize((896, 896)) "
                       "BILINEAR, LANCZOS if width > 896 or height > 896; np.asarray(..., float32); "
                       "normalize_images: in-place -= / /= with np.asarray((127.5,)*3) (a float64 array, so each step "
                       "is computed in float64 and cast back to float32); np.clip(-1, 1). Layout HWC.",
            "hf": "transformers Gemma3ImageProcessor (numpy/PIL): PIL resize((896, 896), BILINEAR, reducing_gap=None); "
                  "rescale = (x.astype(float64) * (1/255)).astype(float32); normalize = (r - mean_f32) / std_f32 in "
                  "float32 with mean = std = 0.5; output CHW. first8 is in CHW order, first8_hwc in HWC order.",
            "sum": "float64 sum (numpy pairwise) of the float32 values; compare with rel. tolerance ~1e-12",
            "sha256": "sha256 of the uint8 [896, 896, 3] resized bytes (HWC, row-major)",
            "sha256_f32_hwc": "sha256 of the normalised float32 [896, 896, 3] little-endian bytes",
            "normalize_lut_note": "float32 bits (hex) of the normalised value of each uint8 0..255. MaxText's equals "
                                  "plain float32 (x - 127.5f) / 127.5f; HF's f32(f32(f64(x) * (1/255)) - 0.5f) / 0.5f "
                                  f"differs from it on {lut_diff} of the 256 values (by up to 6e-8 absolute, "
                                  "i.e. up to 127 ulps near 0: the float32 rounding error of x / 255)",
        },
        "gemma3_normalize_lut": {"maxtext": [f"{int(b):08x}" for b in lut_m.view(np.uint32)],
                                 "hf": [f"{int(b):08x}" for b in lut_h.view(np.uint32)]},
    }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)

    files = [f for f in os.listdir(OUT) if os.path.isfile(os.path.join(OUT, f))]
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in files)
    print(f"wrote {len(files)} files, {total} bytes, to {os.path.normpath(OUT)}")
    return 0


def stats(filt, u8, native, hwc, layout):
    nat = np.ascontiguousarray(native).reshape(-1)
    flat = np.ascontiguousarray(hwc).reshape(-1)
    first8 = nat[:8]
    return {"filter": filt, "sha256": sha256(u8), "layout": layout,
            "first8": [float(t) for t in first8],
            "first8_bits": [f"{int(b):08x}" for b in first8.view(np.uint32)],
            "first8_hwc": [float(t) for t in flat[:8]],
            "sum": float(np.sum(flat, dtype=np.float64)),
            "sha256_f32_hwc": hashlib.sha256(flat.astype("<f4").tobytes()).hexdigest()}


if __name__ == "__main__":
    sys.exit(main())
