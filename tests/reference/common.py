"""Shared helpers for the PyTorch reference scripts: deterministic inputs, and writers for .npy / safetensors.

Each script re-states the MaxText math (../../shared/spec) in PyTorch float64 from float32 inputs and weights, and
writes small fixtures under tests/fixtures/<case>/: the inputs, weights (MaxText parameter names, safetensors),
and float64 outputs. The C++ tests compare against those. Run with Debian's interpreter: /usr/bin/python3.
"""
import json
import os
import struct

import numpy as np
import torch

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")

_ST_DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("float16"): "F16", np.dtype("uint8"): "U8",
              np.dtype("int32"): "I32", np.dtype("int64"): "I64"}


def case_dir(name):
    d = os.path.join(FIXTURES, name)
    os.makedirs(d, exist_ok=True)
    return d


def rng(seed):
    return np.random.default_rng(seed)


def f32(gen, shape, scale=1.0, offset=0.0):
    """Float32 normal samples (the values every computation starts from)."""
    return (offset + scale * gen.standard_normal(shape)).astype(np.float32)


def t64(a):
    """A float32 numpy array as a float64 torch tensor (exact)."""
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def save_npy(d, name, a):
    np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(a))


def read_safetensors(path):
    """Minimal reader for the F32 / I32 files common.save_safetensors writes: {name: array}."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    types = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
    out = {}
    for name, m in header.items():
        if name == "__metadata__":
            continue
        a, b = m["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=types[m["dtype"]]).reshape(m["shape"]).copy()
    return out


def save_safetensors(path, tensors, metadata=None):
    """Minimal safetensors writer (the format is a JSON header + packed little-endian data)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.tobytes()
        header[name] = {"dtype": _ST_DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def save_meta(d, meta):
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)


def bf16_round(a):
    """Round float32 values to bfloat16 precision (nearest even), returned as float32."""
    a = np.asarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def cycle_scanned(w, period, layers, block="layers_"):
    """The scanned tree of a block that repeats a cycle of `period` layers (GptOssScannableBlock,
    Llama4ScannableBlock, Olmo3ScannableBlock): decoder.layers.layers_{j}.<leaf> stacks layers j, j + period, ...
    on axis 1 (param_scan_axis); every other tensor as it is. Qwen3NextScannableBlock names them `layer_{j}`
    (block="layer_")."""
    out = {k: v for k, v in w.items() if not k.startswith("decoder.layers_")}
    for j in range(period):
        pre = f"decoder.layers_{j}."
        for k in w:
            if k.startswith(pre):
                leaf = k[len(pre):]
                out[f"decoder.layers.{block}{j}.{leaf}"] = np.stack(
                    [w[f"decoder.layers_{i}.{leaf}"] for i in range(j, layers, period)], axis=1)
    return out
