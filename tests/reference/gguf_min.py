"""A minimal GGUF reader (versions 2 and 3; F32 and F16 tensors), independent of the C++ reader and of the `gguf`
package: metadata as Python values, tensors as numpy arrays in row-major shape (GGUF dims reversed)."""
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_TENSOR_TYPES = {0: np.float32, 1: np.float16}


class _Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="surrogateescape")
        self.pos += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("<I")
            n = self.take("<Q")
            return [self.value(et) for _ in range(n)]
        return self.take(_SCALARS[t])


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.pos = 4
    version = r.take("<I")
    assert version in (2, 3), version
    n_tensors = r.take("<Q")
    n_kv = r.take("<Q")
    meta = {}
    for _ in range(n_kv):
        k = r.string()
        meta[k] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        dims = [r.take("<Q") for _ in range(nd)]
        ty = r.take("<I")
        off = r.take("<Q")
        infos.append((name, dims, ty, off))
    align = meta.get("general.alignment", 32)
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, dims, ty, off in infos:
        dt = _TENSOR_TYPES[ty]
        n = int(np.prod(dims))
        a = np.frombuffer(data, dtype=dt, count=n, offset=base + off)
        tensors[name] = a.reshape(list(reversed(dims)))
    return meta, tensors


def write_gguf(path, meta, tensors, align=32):
    """A minimal GGUF v3 writer (F32 tensors; metadata str -> string, bool -> bool, int -> uint32, float -> float32),
    independent of the C++ writer. `tensors` maps names to row-major float32 arrays (written with dims reversed)."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)))
    for k, v in meta.items():
        out += s(k)
        if isinstance(v, str):
            out += struct.pack("<I", 8) + s(v)
        elif isinstance(v, bool):
            out += struct.pack("<I?", 7, v)
        elif isinstance(v, int):
            out += struct.pack("<II", 4, v)
        else:
            out += struct.pack("<If", 6, v)
    blobs, off = [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        out += s(name) + struct.pack("<I", a.ndim) + b"".join(struct.pack("<Q", d) for d in reversed(a.shape))
        out += struct.pack("<IQ", 0, off)
        blobs.append((off, a.tobytes()))
        off = (off + a.nbytes + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    base = len(out)
    data = bytearray(off)
    for o, b in blobs:
        data[o:o + len(b)] = b
    with open(path, "wb") as f:
        f.write(out[:base] + data)
