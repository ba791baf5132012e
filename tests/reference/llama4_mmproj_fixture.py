"""Writes tests/fixtures/llama4_mmproj/: a tiny Llama 4 vision model as a Hugging Face checkpoint (hf/config.json,
hf/model.safetensors; random float32 weights drawn as tests/reference/llama4_vision_reference.py draws them) and, when
llama.cpp's source is given, mmproj.gguf: the file llama.cpp's OWN converter writes for it
(convert_hf_to_gguf.py --mmproj --outtype f32, class Llama4VisionModel in conversion/llama4.py), so that the C++
reader is checked against the peer's real output, not a re-statement of it.

The model has 3 layers because llama.cpp's tensor name map covers blocks 0 .. block_count - 1 and names the adapter's
two products vision_adapter.mlp.fc1 / fc2 as "blocks" 1 and 2 (mm.model.mlp.1 / mm.model.mlp.2): a 2-layer model
cannot be converted. projector_input_dim = projector_output_dim, as transformers' Llama4VisionMLP2 requires.

The checks made of it (tests/models/test_llama4_vision.cpp): the tower read from mmproj.gguf gives the soft tokens of
the tower read from hf/ bit for bit (the file holds the same float32 numbers); the tower's numerics themselves are
checked against the float64 re-statement (fixture llama4_vision).

Run from /work/main:
  /usr/bin/python3 tests/reference/llama4_mmproj_fixture.py [LLAMA_CPP_SOURCE]
LLAMA_CPP_SOURCE defaults to bench/.peers/llama.cpp (what bench/compare clones from node-llama-cpp's bundle). The
converter imports `transformers` (AutoConfig, unused for a local checkpoint's mmproj) and names torch dtypes that
Debian's torch lacks: a stand-in module and dtype aliases are given to it (tests/reference/llamacpp_convert_shim.py).
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import case_dir, rng, save_safetensors  # noqa: E402
import llama4_vision_reference as ref  # noqa: E402

CFG = dict(ref.CFG, hidden_size=32, intermediate_size=128, num_layers=3, num_heads=2, projector_input_dim=16,
           projector_output_dim=16, emb_dim=8)
SEED = 5203


def main():
    llama_cpp = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "bench", ".peers", "llama.cpp")
    d = case_dir("llama4_mmproj")
    hd = os.path.join(d, "hf")
    os.makedirs(hd, exist_ok=True)
    w = ref.maxtext_weights(rng(SEED), CFG)
    hf = ref.hf_weights(w, CFG)
    save_safetensors(os.path.join(hd, "model.safetensors"), hf, metadata={"format": "pt"})
    with open(os.path.join(hd, "config.json"), "w") as f:
        json.dump(ref.hf_config(CFG), f, indent=1, sort_keys=True)
    # The converter reads image_mean / image_std from preprocessor_config.json (Llama 4's: 0.5).
    with open(os.path.join(hd, "preprocessor_config.json"), "w") as f:
        json.dump({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "patch_size": CFG["patch_size"],
                   "image_processor_type": "Llama4ImageProcessorFast"}, f, indent=1)
    convert = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    if not os.path.exists(convert):
        print(f"llama.cpp's converter not found at {convert}: mmproj.gguf not (re)written")
        return
    commit = subprocess.run(["git", "-C", llama_cpp, "log", "-1", "--format=%H"], capture_output=True,
                            text=True).stdout.strip()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([llama_cpp, os.path.join(llama_cpp, "gguf-py"), HERE]))
    out = os.path.join(d, "mmproj.gguf")
    subprocess.run([sys.executable, os.path.join(HERE, "llamacpp_convert_shim.py"), convert, "--mmproj", hd,
                    "--outtype", "f32", "--outfile", out], check=True, env=env, cwd=llama_cpp)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"what": "tiny Llama 4 vision model (3 layers) and llama.cpp's own mmproj conversion of it",
                   "llama_cpp_commit": commit, "vision": CFG, "seed": SEED,
                   "command": "convert_hf_to_gguf.py --mmproj hf --outtype f32 --outfile mmproj.gguf"}, f, indent=1)
    print("wrote", out, "with llama.cpp", commit)


if __name__ == "__main__":
    main()
