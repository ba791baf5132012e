"""llama.cpp's Gemma 3 image preprocessing, restated in Python: tests/fixtures/images/llamacpp_gemma3/.

Run from the repository root with Debian's interpreter (numpy + python3-pil):

    /usr/bin/python3 tests/reference/llamacpp_image_preprocess.py               # write the fixture
    /usr/bin/python3 tests/reference/llamacpp_image_preprocess.py --self-check  # + independent scalar cross-check

What llama-mtmd-cli does to a picture before the Gemma 3 vision tower (ggml-org/llama.cpp, read with the stored
versions listed in LLAMACPP below; this file is written from those sources only):

  mtmd.cpp  mtmd_context::init_vision: PROJECTOR_TYPE_GEMMA3 (and GEMMA3NV) -> mtmd_image_preprocessor_fixed_size.
            mtmd_tokenizer::add_media: the decoded RGB bitmap is copied into a clip_image_u8 (nx, ny, buf RGBRGB...)
            and handed to image_preproc->preprocess().
  clip.cpp  clip_model_loader::load_hparams: image_size S = clip.vision.image_size (896 for Gemma 3), image_mean /
            image_std from clip.vision.image_mean / image_std (float32 arrays; 0.5, 0.5, 0.5 for Gemma 3);
            case PROJECTOR_TYPE_GEMMA3: n_merge = 4, image_resize_algo = RESIZE_ALGO_BILINEAR; image_resize_pad and
            image_pad_color are left at their clip-model.h defaults (true, {0, 0, 0}).
  mtmd-image.cpp
            mtmd_image_preprocessor_fixed_size::preprocess: img_tool::resize(img, resized, {S, S}, image_resize_algo,
            image_resize_pad, image_pad_color), then img_u8_to_f32(resized, out, image_mean, image_std).

  img_tool::resize(src, dst, {S, S}, BILINEAR, add_padding = true, pad = {0, 0, 0}):
    1. if src is S x S: dst = src (plain copy, no resampling at all).
    2. scale_w = float(S) / w; scale_h = float(S) / h          (float32 divisions, int operand converted to float)
       scale   = std::min(scale_w, scale_h)
       new_w   = std::min(int(std::ceil(w * scale)), S)        (w * scale: float32 product; ceil of a float)
       new_h   = std::min(int(std::ceil(h * scale)), S)
    3. resize_bilinear(src, resized, new_w, new_h)             (below; also when new_w == w and new_h == h: it is
                                                                 NOT a copy then, x_ratio = (w-1)/w)
    4. fill dst (S x S) with {0, 0, 0}; offset_x = (S - new_w) / 2, offset_y = (S - new_h) / 2 (int division);
       composite: dst[y + offset_y][x + offset_x] = resized[y][x] (pixels outside dst skipped; never happens here).

  resize_bilinear(src, dst, tw, th)      [version 0309b28f, followed here]
    GGML_ASSERT(src.nx >= 2 && src.ny >= 2)                    (a picture with width or height 1 aborts llama.cpp)
    x_ratio = float(w - 1) / tw;  y_ratio = float(h - 1) / th  (float32)
    for y, x:  px = x_ratio * x;  py = y_ratio * y              (float32 products, x and y converted to float)
               x0 = std::min(int(px), w - 2);  y0 = std::min(int(py), h - 2)    (int() truncates; px, py >= 0)
               tx = px - x0;  ty = py - y0                      (float32)
               per channel c:
                 top    = lerp(float(src[y0][x0][c]),     float(src[y0][x0 + 1][c]),     tx)
                 bottom = lerp(float(src[y0 + 1][x0][c]), float(src[y0 + 1][x0 + 1][c]), tx)
                 dst[y][x][c] = static_cast<uint8_t>(lerp(top, bottom, ty))     (truncation toward 0, no rounding)
    lerp(s, e, t) = s + (e - s) * t                            (float32: d = e - s, m = d * t, r = s + m, each rounded)
    The right / bottom neighbour x0 + 1, y0 + 1 is always read; the clamp to w - 2 / h - 2 keeps it inside the
    picture. For w, h >= 2 the clamp never changes x0 / y0 (px <= (w-1)(tw-1)/tw < w - 1 by far more than the float32
    rounding error), so 0309b28f and the older 04f6fef9 (no clamp, no assert) give identical bytes on every picture
    with w, h >= 2; they differ only for width or height 1 (0309b28f: abort; 04f6fef9: reads past the row / buffer).

  img_u8_to_f32(src, dst, mean, std): dst[i] = (static_cast<float>(src[i]) / 255.0f - mean[c]) / std[c], c = i % 3,
    float32 throughout: q = u / 255.0f, d = q - mean, v = d / std. Padding (0) -> (0 - 0.5) / 0.5 = -1 exactly.
    Layout stays HWC (RGBRGB..., row-major), values in [-1, 1].

Floating point: this restatement rounds every float32 operation separately (no fused multiply-add). That is what an
x86-64 build of tools/mtmd without FMA code generation produces. A compiler that contracts `s + (e - s) * t` into
fmaf(e - s, t, s) (e.g. -ffp-contract=fast/on with an FMA-capable -march, or clang's default on AArch64) can change a
truncated byte where a lerp lands within an ulp of an integer; the script counts how many bytes of this fixture
such a build would change (the manifest records the count from the run that wrote it).

Output (tests/fixtures/images/llamacpp_gemma3/):
  <picture>.<S>.u8.npy   uint8 [S, S, 3] resized + padded picture (before normalisation)
  <picture>.<S>.npy      float32 [S, S, 3] normalised picture (HWC, RGB)
  for S = 64 and S = 32 and every picture of tests/fixtures/images/manifest.json with expect == "rgb" (pictures with
  width or height 1 are listed as "llamacpp_aborts" instead, no files), plus tests/fixtures/gemma3_mm_model/image_a.png
  and image_b.png. Those two are also done at S = 896, but a [896, 896, 3] float32 array is 9.6 MB (uint8 2.4 MB),
  so for S = 896 only hashes / statistics and a few probe rows (<picture>.896.rows.u8.npy) are stored; rerun with
  --write-896 to write the full arrays locally (they are not part of the fixture).
  manifest.json: every file, S, source, new_w / new_h, offsets, sha256 of the uint8 and float32 bytes, the llama.cpp
  commits and functions read.
Pictures are decoded with Image.open(f).convert("RGB") (the C++ library decodes byte-identically to that).
Deterministic: no randomness, no timestamps.
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import warnings

import numpy as np
import PIL
from PIL import Image

PILLOW_VERSION = "9.4.0"
assert PIL.__version__ == PILLOW_VERSION, f"these references are for Pillow {PILLOW_VERSION}, got {PIL.__version__}"

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
IMAGES = os.path.join(ROOT, "tests", "fixtures", "images")
GEMMA3_MM = os.path.join(ROOT, "tests", "fixtures", "gemma3_mm_model")
OUT = os.path.join(IMAGES, "llamacpp_gemma3")

SIZES = (64, 32)
BIG = 896
MEAN = (0.5, 0.5, 0.5)   # clip.vision.image_mean of Gemma 3 mmproj files (float32)
STD = (0.5, 0.5, 0.5)    # clip.vision.image_std

F32 = np.float32

LLAMACPP = {
    "repository": "ggml-org/llama.cpp",
    "followed": {
        "tools/mtmd/mtmd-image.cpp": "0309b28f9bce9177b0fd08a251b204d5c5e0181d",
        "tools/mtmd/mtmd-image.h": "0309b28f9bce9177b0fd08a251b204d5c5e0181d",
        "tools/mtmd/mtmd.cpp": "0024aa7417efd50a7c2a79e049dfbbbceb0beaaf",
        "tools/mtmd/clip.cpp": "0024aa7417efd50a7c2a79e049dfbbbceb0beaaf",
        "tools/mtmd/clip-model.h": "0024aa7417efd50a7c2a79e049dfbbbceb0beaaf",
        "tools/mtmd/clip-impl.h": "0024aa7417efd50a7c2a79e049dfbbbceb0beaaf",
    },
    "also_read": {
        "tools/mtmd/mtmd-image.cpp": "04f6fef993d8fb60265761e301944fddb91b6b10",
    },
    "functions": [
        "mtmd.cpp: mtmd_context::init_vision (PROJECTOR_TYPE_GEMMA3 -> mtmd_image_preprocessor_fixed_size), "
        "mtmd_tokenizer::add_media (bitmap -> clip_image_u8 -> image_preproc->preprocess)",
        "clip.cpp: clip_model_loader::load_hparams (image_size, image_mean / image_std, case PROJECTOR_TYPE_GEMMA3: "
        "n_merge = 4, image_resize_algo = RESIZE_ALGO_BILINEAR)",
        "clip-model.h: clip_hparams defaults (image_resize_pad = true, image_pad_color = {0, 0, 0}), enum resize_algo",
        "clip-impl.h: struct clip_image_u8 / clip_image_f32 (nx, ny, buf RGBRGB...)",
        "mtmd-image.cpp: mtmd_image_preprocessor_fixed_size::preprocess, img_tool::resize, img_tool::resize_bilinear, "
        "img_tool::lerp, img_tool::fill, img_tool::composite, mtmd_image_preprocessor::img_u8_to_f32(src, dst, mean, std)",
    ],
    "versions": (
        "Two stored versions of mtmd-image.cpp could be read completely, identical except for hardening: 04f6fef9 "
        "(resize_bilinear without assert: x0 = int(px), y0 = int(py), reads x0 + 1 / y0 + 1 unclamped; img_tool::crop "
        "and precompute_weights without asserts) and 0309b28f (GGML_ASSERT(src.nx >= 2 && src.ny >= 2), x0 = min(int(px), "
        "w - 2), y0 = min(int(py), h - 2), plus asserts in crop / precompute_weights). 0309b28f is the later one (the "
        "assert was introduced between llama.cpp builds b8508 and b8763, issue #21800; 04f6fef9 has the same features "
        "otherwise) and is followed here. For pictures of at least 2 x 2 both give the same bytes. Newer upstream "
        "versions exist but are not stored for ggml-org/llama.cpp (not readable here): PR #21711 (merged 2026-04) "
        "removed the assert and changed resize_bilinear to x_ratio = (w-1)/(tw-1) (0 when tw == 1), x0 = min(int(px), "
        "w-1), x1 = min(x0+1, w-1) (align-corners style, different bytes); PR #27594 (2026-08) replaced all resize "
        "variants by Pillow-compatible separable resampling (resize_pillow) and turned image_resize_pad into a "
        "pad_style enum. This fixture is NOT valid for those versions."
    ),
}


ALGORITHM = [
    "mtmd.cpp init_vision: GEMMA3 -> mtmd_image_preprocessor_fixed_size; preprocess = img_tool::resize(img, {S, S}, "
    "RESIZE_ALGO_BILINEAR, pad = true, colour {0, 0, 0}) then img_u8_to_f32(mean, std)",
    "resize: input already S x S -> copy; else scale = min(f32(S) / w, f32(S) / h), new_w = min(int(ceil(f32(w) * "
    "scale)), S), new_h likewise; resize_bilinear to new_w x new_h; black S x S canvas; paste at ((S - new_w) / 2, "
    "(S - new_h) / 2) (int division)",
    "resize_bilinear: assert w >= 2 and h >= 2; x_ratio = f32(w - 1) / new_w, y_ratio = f32(h - 1) / new_h; px = "
    "x_ratio * x, py = y_ratio * y; x0 = min(int(px), w - 2), y0 = min(int(py), h - 2); tx = px - x0, ty = py - y0; "
    "top = lerp(src[y0][x0], src[y0][x0 + 1], tx), bottom = lerp(src[y0 + 1][x0], src[y0 + 1][x0 + 1], tx); "
    "out = uint8(trunc(lerp(top, bottom, ty)))",
    "lerp(s, e, t) = s + (e - s) * t, float32, each of -, *, + rounded (no FMA)",
    "normalise: (f32(u8) / 255.0f - mean[c]) / std[c] in float32, mean = std = 0.5; HWC RGB",
]


# ---------------------------------------------------------------------------------------------------------------
# the restatement (vectorised numpy float32, every operation rounded to float32 as the C++ evaluates it)

def fit_size(w, h, S):
    """img_tool::resize, padding branch: (new_w, new_h, offset_x, offset_y, scale as float32)."""
    scale_w = F32(S) / F32(w)
    scale_h = F32(S) / F32(h)
    scale = scale_h if scale_h < scale_w else scale_w  # std::min(a, b) = (b < a) ? b : a
    new_w = min(int(np.ceil(F32(w) * scale)), S)
    new_h = min(int(np.ceil(F32(h) * scale)), S)
    return new_w, new_h, (S - new_w) // 2, (S - new_h) // 2, scale


def lerp(s, e, t):
    """img_tool::lerp: s + (e - s) * t, three float32 roundings."""
    d = (e - s).astype(F32)
    m = (d * t).astype(F32)
    return (s + m).astype(F32)


def lerp_fma(s, e, t):
    """s + (e - s) * t with the multiply-add fused (fmaf(e - s, t, s)): one rounding for d * t + s.

    d * t is exact in float64 (24 + 24 bits); p + s is done with TwoSum, and the float64 sum is rounded to float32
    correctly: the only double-rounding case is a sum exactly halfway between two float32 values with a non-zero
    TwoSum error, resolved by the error's sign."""
    d = (e - s).astype(F32).astype(np.float64)
    p = d * t.astype(np.float64)
    a = s.astype(np.float64)
    hi = p + a
    bb = hi - p
    err = (p - (hi - bb)) + (a - bb)
    r = hi.astype(F32)
    r64 = r.astype(np.float64)
    up = np.nextafter(r, F32(np.inf))
    dn = np.nextafter(r, F32(-np.inf))
    # hi exactly halfway between r and a neighbour: round-to-nearest-even picked r, the exact value is hi + err
    r_below_mid = (hi > r64) & (hi - r64 == up.astype(np.float64) - hi)
    r_above_mid = (hi < r64) & (r64 - hi == hi - dn.astype(np.float64))
    r = np.where(r_below_mid & (err > 0), up, r)
    r = np.where(r_above_mid & (err < 0), dn, r)
    return r.astype(F32)


def resize_bilinear(src, tw, th, fma=False):
    """img_tool::resize_bilinear of mtmd-image.cpp @ 0309b28f. src: uint8 [h, w, 3] -> uint8 [th, tw, 3]."""
    h, w, _ = src.shape
    if not (w >= 2 and h >= 2):
        raise ValueError("GGML_ASSERT(src.nx >= 2 && src.ny >= 2) failed")
    x_ratio = F32(w - 1) / F32(tw)
    y_ratio = F32(h - 1) / F32(th)
    px = (x_ratio * np.arange(tw, dtype=F32)).astype(F32)
    py = (y_ratio * np.arange(th, dtype=F32)).astype(F32)
    x0 = np.minimum(px.astype(np.int64), w - 2)   # static_cast<int> truncates; px >= 0
    y0 = np.minimum(py.astype(np.int64), h - 2)
    tx = (px - x0.astype(F32)).astype(F32)
    ty = (py - y0.astype(F32)).astype(F32)
    f = src.astype(F32)
    a = f[y0][:, x0]          # [th, tw, 3]  (y0, x0)
    b = f[y0][:, x0 + 1]      # (y0, x0 + 1)
    c = f[y0 + 1][:, x0]      # (y0 + 1, x0)
    d = f[y0 + 1][:, x0 + 1]  # (y0 + 1, x0 + 1)
    txb = np.broadcast_to(tx[None, :, None], a.shape)
    tyb = np.broadcast_to(ty[:, None, None], a.shape)
    li = lerp_fma if fma else lerp
    top = li(a, b, txb)
    bottom = li(c, d, txb)
    v = li(top, bottom, tyb)
    assert v.min() >= 0 and v.max() < 256
    return np.floor(v).astype(np.uint8)   # static_cast<uint8_t>: truncation (v >= 0)


def resize_pad(src, S, fma=False):
    """img_tool::resize(src, dst, {S, S}, RESIZE_ALGO_BILINEAR, add_padding = true, {0, 0, 0})."""
    h, w, _ = src.shape
    if w == S and h == S:
        return src.copy(), {"branch": "copy", "new_w": S, "new_h": S, "offset_x": 0, "offset_y": 0}
    new_w, new_h, ox, oy, scale = fit_size(w, h, S)
    resized = resize_bilinear(src, new_w, new_h, fma=fma)
    dst = np.zeros((S, S, 3), np.uint8)
    dst[oy:oy + new_h, ox:ox + new_w] = resized
    info = {"branch": "resize_bilinear_pad", "new_w": new_w, "new_h": new_h, "offset_x": ox, "offset_y": oy,
            "scale_f32_hex": struct.pack(">f", float(scale)).hex()}
    return dst, info


def normalize(u8, mean=MEAN, std=STD):
    """mtmd_image_preprocessor::img_u8_to_f32(src, dst, mean, std), per channel, float32."""
    q = (u8.astype(F32) / F32(255.0)).astype(F32)
    d = (q - np.array(mean, F32)).astype(F32)
    return (d / np.array(std, F32)).astype(F32)


# ---------------------------------------------------------------------------------------------------------------
# an independent scalar restatement (Python doubles rounded to float32 after every operation: for +, -, *, / of
# float32 operands this equals float32 arithmetic, since a double has more than 2 * 24 + 2 bits), for --self-check

def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def scalar_preprocess(src, S):
    h, w, _ = src.shape
    rows = src.tolist()
    if w == S and h == S:
        out = rows
    else:
        sw, sh = f32(float(S) / float(w)), f32(float(S) / float(h))
        scale = sh if sh < sw else sw
        nw = min(int(np.ceil(f32(float(w) * scale))), S)
        nh = min(int(np.ceil(f32(float(h) * scale))), S)
        assert w >= 2 and h >= 2
        xr, yr = f32(float(w - 1) / float(nw)), f32(float(h - 1) / float(nh))
        ox, oy = (S - nw) // 2, (S - nh) // 2
        out = [[[0, 0, 0] for _ in range(S)] for _ in range(S)]

        def lp(s, e, t):
            return f32(s + f32(f32(e - s) * t))

        for y in range(nh):
            py = f32(yr * float(y))
            y0 = min(int(py), h - 2)
            ty = f32(py - float(y0))
            for x in range(nw):
                px = f32(xr * float(x))
                x0 = min(int(px), w - 2)
                tx = f32(px - float(x0))
                for c in range(3):
                    top = lp(float(rows[y0][x0][c]), float(rows[y0][x0 + 1][c]), tx)
                    bot = lp(float(rows[y0 + 1][x0][c]), float(rows[y0 + 1][x0 + 1][c]), tx)
                    out[y + oy][x + ox][c] = int(lp(top, bot, ty))
    u8 = np.array(out, np.uint8)
    norm = [[[f32(f32(f32(float(v) / 255.0) - MEAN[c]) / STD[c]) for c, v in enumerate(px)] for px in row]
            for row in out]
    return u8, np.array(norm, F32)


# ---------------------------------------------------------------------------------------------------------------

def decode_rgb(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # P + tRNS bytes
        with Image.open(path) as im:
            return np.ascontiguousarray(np.asarray(im.convert("RGB")))


def sha256(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def f32_stats(v):
    flat = np.ascontiguousarray(v, dtype="<f4").reshape(-1)
    return {"sha256_f32": hashlib.sha256(flat.tobytes()).hexdigest(),
            "sum_f64": float(flat.astype(np.float64).sum())}


def dump_manifest(m):
    """json with one line per entry / per list of strings (keeps the file small and diffable)."""
    lines = []
    for k, v in m.items():
        if k == "entries":
            body = ",\n".join("  " + json.dumps(e) for e in v)
            lines.append(f" {json.dumps(k)}: [\n{body}\n ]")
        elif isinstance(v, list) and all(isinstance(x, str) for x in v) and k != "files":
            lines.append(f" {json.dumps(k)}: {json.dumps(v)}")
        else:
            lines.append(f" {json.dumps(k)}: " + json.dumps(v, indent=1).replace("\n", "\n "))
    out = "{\n" + ",\n".join(lines) + "\n}\n"
    assert json.loads(out) == m
    return out


def sources():
    man = json.load(open(os.path.join(IMAGES, "manifest.json")))
    out = []
    for e in man["images"]:
        if e["expect"] == "rgb":
            out.append((e["file"], os.path.join(IMAGES, e["file"]), "tests/fixtures/images/" + e["file"], SIZES))
    for name in ("image_a.png", "image_b.png"):
        out.append((name, os.path.join(GEMMA3_MM, name), "tests/fixtures/gemma3_mm_model/" + name, SIZES + (BIG,)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--self-check", action="store_true",
                    help="compare with the independent scalar restatement (S = 64, 32)")
    ap.add_argument("--write-896", action="store_true", help="also write the full S = 896 arrays (local use only)")
    args = ap.parse_args()

    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):  # regenerate from scratch
        os.remove(os.path.join(OUT, f))

    lut = normalize(np.arange(256, dtype=np.uint8).reshape(1, 256, 1).repeat(3, axis=2))[0, :, 0]
    entries, files, skipped, src_sha = [], [], [], {}
    fma_changed, fma_total, fma_by_entry = 0, 0, {}
    for name, path, rel, sizes in sources():
        src = decode_rgb(path)
        h, w, _ = src.shape
        for S in sizes:
            src_sha[rel] = sha256(src)
            entry = {"source": rel, "src_width": w, "src_height": h, "S": S}
            if (w, h) != (S, S) and (w < 2 or h < 2):
                entry.update({"llamacpp_aborts": "GGML_ASSERT(src.nx >= 2 && src.ny >= 2) failed in "
                              "img_tool::resize_bilinear (mtmd-image.cpp @ 0309b28f); no output",
                              "npy": None, "u8_npy": None})
                skipped.append(f"{name} S={S}")
                entries.append(entry)
                continue
            u8, info = resize_pad(src, S)
            v = normalize(u8)
            assert v.dtype == F32 and v.shape == (S, S, 3) and v.min() >= -1 and v.max() <= 1
            assert np.array_equal(v, lut[u8])
            entry.update(info)
            entry["sha256_u8"] = sha256(u8)
            entry.update(f32_stats(v))
            if S == BIG and not args.write_896:
                oy, nh = info["offset_y"], info["new_h"]
                rows = sorted({oy, oy + nh // 2, oy + nh - 2, oy + nh - 1})
                rname = f"{name}.{S}.rows.u8.npy"
                np.save(os.path.join(OUT, rname), np.ascontiguousarray(u8[rows]))
                files.append(rname)
                entry.update({"npy": None, "u8_npy": None, "rows_u8_npy": rname, "rows": rows,
                              "note": "full [896, 896, 3] arrays not stored (9.6 MB float32, 2.4 MB uint8): compare "
                                      "sha256_u8 / sha256_f32; rows_u8_npy holds u8[rows] (uint8 [len(rows), 896, 3])"})
            else:
                npy, u8npy = f"{name}.{S}.npy", f"{name}.{S}.u8.npy"
                np.save(os.path.join(OUT, npy), np.ascontiguousarray(v))
                np.save(os.path.join(OUT, u8npy), np.ascontiguousarray(u8))
                entry.update({"npy": npy, "u8_npy": u8npy})
                if S != BIG:
                    files += [npy, u8npy]
            entries.append(entry)

            u8f, _ = resize_pad(src, S, fma=True)
            nfma = int((u8f != u8).sum())
            fma_changed += nfma
            fma_total += u8.size
            if nfma:
                fma_by_entry[f"{name}.{S}"] = nfma
            if args.self_check:
                if S != BIG:
                    su8, sv = scalar_preprocess(src, S)
                    assert np.array_equal(su8, u8), f"{name} S={S}: scalar / vector uint8 mismatch"
                    assert np.array_equal(sv.view(np.uint32), v.view(np.uint32)), f"{name} S={S}: f32 mismatch"
            print(f"{name:45s} S={S:4d} {w}x{h} -> {entry.get('new_w')}x{entry.get('new_h')} "
                  f"at ({entry.get('offset_x')}, {entry.get('offset_y')})")

    manifest = {
        "generator": "tests/reference/llamacpp_image_preprocess.py",
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "llama_cpp": LLAMACPP,
        "algorithm": ALGORITHM,
        "hparams": {"projector_type": "gemma3", "image_resize_algo": "RESIZE_ALGO_BILINEAR",
                    "image_resize_pad": True, "image_pad_color": [0, 0, 0], "image_mean": list(MEAN),
                    "image_std": list(STD), "sizes": list(SIZES), "big_size": BIG},
        "layout": "u8_npy: uint8 [S, S, 3] HWC RGB (resized + padded, before normalisation); npy: float32 [S, S, 3] "
                  "HWC RGB, (u8 / 255.0f - 0.5f) / 0.5f, padding = -1",
        "keys": {"sha256_u8": "sha256 of the uint8 [S, S, 3] bytes (row-major HWC)",
                 "sha256_f32": "sha256 of the float32 [S, S, 3] little-endian bytes (row-major HWC)",
                 "sum_f64": "float64 sum (numpy pairwise) of the float32 values: compare with rel. tolerance ~1e-12",
                 "scale_f32_hex": "bits of scale = min(S / w, S / h) in float32",
                 "branch": "copy (input already S x S; never the case here) or resize_bilinear_pad"},
        "normalize_lut_f32_hex": [struct.pack(">f", float(x)).hex() for x in lut],
        "fma_note": ("every float32 operation rounded separately (no FMA contraction of lerp's s + (e - s) * t). "
                     f"A build that fuses it (fmaf(e - s, t, s)) changes {fma_changed} of the {fma_total} uint8 "
                     "values of the fixture's pictures (all S, 896 included), each by 1; per picture.S: "
                     "fma_changed_bytes"),
        "fma_changed_bytes": fma_by_entry,
        "not_exercised": "no source picture is S x S, so img_tool::resize's plain-copy branch is not covered",
        "llamacpp_aborts": skipped,
        "source_rgb_sha256": src_sha,
        "entries": entries,
    }
    files.append("manifest.json")
    manifest["files"] = sorted(files)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        f.write(dump_manifest(manifest))
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in manifest["files"])
    print(f"wrote {len(manifest['files'])} files, {total} bytes, to {os.path.relpath(OUT, ROOT)}")
    if args.self_check:
        print("self-check passed (scalar restatement == vectorised, uint8 and float32 bits)")
    print(f"an FMA-contracting build would change {fma_changed} / {fma_total} uint8 values")
    if args.write_896:
        print("note: --write-896 wrote full S = 896 arrays, which are not part of the fixture (not in manifest files)")


if __name__ == "__main__":
    sys.exit(main())
