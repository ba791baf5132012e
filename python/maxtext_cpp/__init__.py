"""maxtext_cpp: MaxText's transformer layers in C++, from Python (docs/python.md).

    import maxtext_cpp as mc
    cfg = mc.Config("configs/models/gpt3-52k.yml", {"dtype": "float32"})
    model = mc.Model(cfg, weights="gpt3.safetensors")        # or a dict of NumPy arrays (MaxText's param tree)
    logits, acts = model.forward(tokens, capture=["decoder.layers_0", "decoder.layers_0.mlp"])
    rows = model.compare("maxtext_dump.npz", tokens=tokens)  # `maxtext compare` as data
    split = mc.Model(cfg_with_mesh, weights=..., comm=mc.mpi_world())  # under mpirun (docs/distributed.md)

Errors raise maxtext_cpp.Error subclasses (ConfigError/ShapeError/ArgumentError are also ValueError, IoError is
OSError, UnsupportedError is NotImplementedError) carrying the library's message.
"""
import os as _os

from ._maxtext_cpp import (  # noqa: F401
    ArgumentError,
    Cache,
    Communicator,
    Config,
    ConfigError,
    DeviceError,
    Error,
    IoError,
    Model,
    Session,
    ShapeError,
    Tokenizer,
    UnsupportedError,
    mpi_world,
    read_tensors,
)
from . import _maxtext_cpp

# Images and the vision towers of Gemma 3, Llama 4, Gemma 4 and Qwen3 (docs/vision.md), where the module was built with
# libpng and libjpeg.
if hasattr(_maxtext_cpp, "Gemma3Vision"):
    from ._maxtext_cpp import (  # noqa: F401
        Gemma3Vision,
        Gemma4Vision,
        Llama4Vision,
        Qwen3Vision,
        gemma3_pan_and_scan,
        gemma3_pan_and_scan_prompt,
        gemma4_preprocess,
        llama4_image_token_ids,
        llama4_preprocess,
        read_image,
        resize_image,
    )

# Sound files, log-mel features and Qwen3-Omni's audio encoder (docs/audio.md), where the module was built with
# libsndfile and libsoxr.
if hasattr(_maxtext_cpp, "Qwen3OmniAudio"):
    from ._maxtext_cpp import Qwen3OmniAudio, load_audio, log_mel  # noqa: F401

_here = _os.path.dirname(_os.path.abspath(__file__))
# Model configs (configs/models/<model_name>.yml): shipped inside the package by `pip install`, else the checkout's.
_config_dirs = [d for d in (_os.path.join(_here, "configs"),
                            _os.path.join(_here, _os.pardir, _os.pardir, "configs")) if _os.path.isdir(d)]
_maxtext_cpp._set_config_dirs(_config_dirs)


def flatten_params(tree, prefix=""):
    """A nested dict of arrays (e.g. jax.device_get(params)) as {'a.b.c': array} (what Model accepts either way)."""
    out = {}
    for k, v in tree.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        if hasattr(v, "items") and hasattr(v, "keys"):
            out.update(flatten_params(v, name))
        else:
            out[name] = v
    return out


__all__ = ["ArgumentError", "Cache", "Config", "ConfigError", "DeviceError", "Error", "IoError", "Model", "Session",
           "ShapeError", "Tokenizer", "UnsupportedError", "flatten_params", "read_tensors"]
