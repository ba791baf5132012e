"""Shared helpers for the maxtext_cpp tests: fixture paths, an independent safetensors reader (NumPy only), the
tolerances of tests/support/tolerance.hpp."""
import json
import os
import struct
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
REFERENCE = os.path.join(ROOT, "tests", "reference")

# tests/support/tolerance.hpp: |ours - ref| <= atol + rtol |ref|.
F32_LAYER = dict(rtol=1e-5, atol=1e-6)   # one layer: reductions summed in another order than the float64 reference
F32_LOGITS = dict(rtol=1e-4, atol=1e-5)  # whole model: errors grow with depth


def fixture(*parts):
    return os.path.join(FIXTURES, *parts)


def shared_dir():
    return os.environ.get("MAXTEXT_SHARED_DIR") or os.path.join(ROOT, "..", "shared")


def read_safetensors(path):
    """{name: float32/... array} from a safetensors file, read with json + NumPy (not with the library)."""
    dtypes = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64}
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=dtypes[h["dtype"]]).reshape(h["shape"]).copy()
    return out


def nest(flat):
    """{'a.b.c': x} -> {'a': {'b': {'c': x}}} (the shape of jax.device_get(params))."""
    tree = {}
    for name, v in flat.items():
        node = tree
        parts = name.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return tree


def meta(case):
    with open(fixture(case, "meta.json")) as f:
        return json.load(f)


def assert_close(actual, expected, rtol, atol, what=""):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    err = np.abs(actual - expected)
    bad = err > atol + rtol * np.abs(expected)
    assert not bad.any(), (f"{what}: {int(bad.sum())}/{bad.size} outside rtol {rtol} atol {atol}; "
                           f"max abs {err.max():.3g} at {np.unravel_index(err.argmax(), err.shape)}")


@pytest.fixture(scope="session")
def mc():
    import maxtext_cpp
    return maxtext_cpp


@pytest.fixture(scope="session")
def torch_reference():
    """tests/reference/attention_reference.py (PyTorch float64, written from the spec), or skip without torch."""
    pytest.importorskip("torch")
    sys.path.insert(0, REFERENCE)
    import attention_reference
    return attention_reference
