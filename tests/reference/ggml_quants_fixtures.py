#!/usr/bin/env python3
"""Fixtures for tests/core/test_ggml_quants.cpp: real blocks of every GGUF block type and their dequantised values
computed by gguf-py's NumPy reference (gguf/quants.py of the llama.cpp source node-llama-cpp bundles).

Run (writes tests/fixtures/ggml_quants/blocks.gguf, about 170 KB):
  PYTHONPATH=/work/peers/llama.cpp/gguf-py /usr/bin/python3 tests/reference/ggml_quants_fixtures.py

For each type T the file holds tensor "T" (the blocks, [rows, cols] as ggml type T) and "T.f32" (F32, the same
shape: quants.dequantize of those blocks). Rows 0-1 come from quants.quantize of Gaussian data where gguf-py has
a quantiser (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); every other row is random bytes whose fp16 scale fields are replaced by
finite random values (normal and subnormal magnitudes, both signs, and zero), so that every bit pattern of the
quantised fields occurs.
"""
import pathlib
import sys

import numpy as np
import gguf
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as Q

ROWS, COLS = 6, 512  # 2 super-blocks or 16 small blocks per row

# Byte offsets of the fp16 scale fields in each block (see ggml-common.h's block structs).
SCALES = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
    Q.IQ4_NL: [0], Q.IQ4_XS: [0],
}
QUANTISABLE = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0}


def random_scales(rng, n):
    """n finite fp16 values: mostly normal magnitudes in [2^-14, 2^3], some subnormals, some zeros, both signs."""
    mag = np.exp2(rng.uniform(-14.0, 3.0, n)).astype(np.float16)
    sub = rng.random(n) < 0.1
    mag[sub] = (rng.integers(1, 1024, sub.sum()) * 2.0**-24).astype(np.float16)
    mag[rng.random(n) < 0.03] = 0
    sign = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float16)
    return mag * sign


def blocks_for(rng, qtype):
    block, nbytes = GGML_QUANT_SIZES[qtype]
    nblk = COLS // block
    raw = rng.integers(0, 256, (ROWS, nblk, nbytes), dtype=np.uint8)
    for off in SCALES[qtype]:
        raw[:, :, off:off + 2] = random_scales(rng, ROWS * nblk).reshape(ROWS, nblk, 1).view(np.uint8)
    raw = raw.reshape(ROWS, nblk * nbytes)
    if qtype in QUANTISABLE:
        x = (rng.standard_normal((2, COLS)) * rng.uniform(0.01, 3.0, (2, 1))).astype(np.float32)
        raw[:2] = quants.quantize(x, qtype)
    return raw


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    out = root / "tests" / "fixtures" / "ggml_quants" / "blocks.gguf"
    rng = np.random.default_rng(20261124)
    w = gguf.GGUFWriter(str(out), arch="ggml_quants_fixture")
    for qtype in SCALES:
        raw = blocks_for(rng, qtype)
        ref = quants.dequantize(raw, qtype).astype(np.float32)
        assert ref.shape == (ROWS, COLS) and np.isfinite(ref).all(), qtype.name
        w.add_tensor(qtype.name, raw, raw_dtype=qtype)
        w.add_tensor(qtype.name + ".f32", ref)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
