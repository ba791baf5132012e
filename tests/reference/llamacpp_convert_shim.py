"""Runs llama.cpp's convert_hf_to_gguf.py (argv[1], its arguments after it) with what it imports but a local
checkpoint's mmproj conversion does not use: a stand-in `transformers` module (AutoConfig / AutoTokenizer raise if
called, and the converter then reads config.json itself), a progress bar without `tqdm`, and torch dtypes that Debian's older torch lacks (float8 kinds, uint16/32/64: aliases no float32 checkpoint
holds). Used by tests/reference/llama4_mmproj_fixture.py."""
import runpy
import sys
import types

import torch

for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    if not hasattr(torch, name):
        setattr(torch, name, torch.uint8)
for name in ("uint16", "uint32", "uint64"):
    if not hasattr(torch, name):
        setattr(torch, name, torch.int64)

if "transformers" not in sys.modules:
    try:
        import transformers  # noqa: F401
    except ImportError:
        class _Unavailable:
            @classmethod
            def from_pretrained(cls, *args, **kwargs):
                raise RuntimeError("transformers is not installed (llamacpp_convert_shim.py stand-in)")
        stub = types.ModuleType("transformers")
        stub.AutoConfig = stub.AutoTokenizer = _Unavailable
        sys.modules["transformers"] = stub

if "tqdm" not in sys.modules:
    try:
        import tqdm  # noqa: F401
    except ImportError:  # the writer's progress bar: a plain iteration without it
        class _Bar:
            def __init__(self, iterable=None, *args, **kwargs):
                self.iterable = iterable

            def __iter__(self):
                return iter(self.iterable)

            def update(self, *args):
                pass

            def close(self):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        bar = types.ModuleType("tqdm")
        bar.tqdm = _Bar
        sys.modules["tqdm"] = bar

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
