"""Interop fixtures for the .npy/.npz readers, written by NumPy itself (np.save / np.savez / np.savez_compressed and
Python's zipfile), so the C++ readers are checked against files they did not write.

Every array's values follow a closed form the C++ test recomputes (tests/io/test_npz.cpp, `expected_value`):
element at flat row-major index i is  (i % 13) * 0.25 - 1.5  cast to the dtype (ints: i % 13 - 6; bool: i % 3 == 0).

Writes tests/fixtures/npz/. Run: /usr/bin/python3 tests/reference/npz_fixtures.py
"""
import io
import os
import zipfile

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "npz")


def values(shape, dtype):
    n = int(np.prod(shape))
    i = np.arange(n)
    if dtype == np.bool_:
        v = (i % 3) == 0
    elif np.issubdtype(dtype, np.integer):
        v = (i % 13) - 6
    else:
        v = (i % 13) * 0.25 - 1.5
    return np.asarray(v).astype(dtype).reshape(shape)


def bf16_bits(shape):
    """bfloat16 bit patterns of values(shape, float32) (all exact in bf16), as ml_dtypes stores them."""
    return (values(shape, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def npy_bytes_with_descr(bits, descr):
    """An .npy whose header says `descr` (what np.save writes for an ml_dtypes bfloat16 array: '<V2')."""
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": bits.shape})
    f.write(np.ascontiguousarray(bits).tobytes())
    return f.getvalue()


def arrays():
    a = {
        "f64": values((2, 3), np.float64),
        "f32": values((3, 4), np.float32),
        "f16": values((5,), np.float16),
        "i64": values((2, 2), np.int64),
        "i32": values((7,), np.int32),
        "i16": values((3,), np.int16),
        "i8": values((4,), np.int8),
        "u8": values((2, 3), np.uint8) + 6,
        "bool": values((5,), np.bool_),
        "scalar": values((), np.float32),
        "empty": values((0, 3), np.float32),
        "fortran": np.asfortranarray(values((3, 4, 2), np.float32)),
        "bf16_void": bf16_bits((2, 4)).view("V2"),  # np.save writes '|V2'
        "decoder/layers_0.mlp": values((1, 2, 3), np.float32),  # names with '/' and '.' as JAX tree paths give
    }
    assert a["fortran"].flags.f_contiguous and not a["fortran"].flags.c_contiguous
    return a


def main():
    os.makedirs(OUT, exist_ok=True)
    a = arrays()
    np.savez(os.path.join(OUT, "savez.npz"), **a)
    np.savez_compressed(os.path.join(OUT, "savez_compressed.npz"), **a)
    # Zip64 everywhere: Python's zipfile writes Zip64 central-directory fields and end records only past 4 GiB; lower
    # its limit so a small file takes the same paths a large np.savez does.
    saved = zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 64
    try:
        np.savez(os.path.join(OUT, "zip64.npz"), **a)
    finally:
        zipfile.ZIP64_LIMIT = saved
    # .npy files: Fortran order, bf16 as ml_dtypes saves it ('<V2') and as str(dtype) ('bfloat16'), an f16.
    np.save(os.path.join(OUT, "fortran.npy"), a["fortran"])
    np.save(os.path.join(OUT, "f16.npy"), a["f16"])
    with open(os.path.join(OUT, "bf16_V2.npy"), "wb") as f:
        f.write(npy_bytes_with_descr(bf16_bits((2, 4)), "<V2"))
    with open(os.path.join(OUT, "bf16_name.npy"), "wb") as f:
        f.write(npy_bytes_with_descr(bf16_bits((2, 4)), "bfloat16"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
