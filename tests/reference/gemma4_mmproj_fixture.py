"""Writes tests/fixtures/gemma4_vision/mmproj.gguf: the file llama.cpp's OWN converter writes for the tiny Gemma 4
vision encoder of tests/fixtures/gemma4_vision/hf (convert_hf_to_gguf.py --mmproj --outtype f32, class
Gemma4VisionAudioModel in conversion/gemma.py), so that the C++ reader is checked against the peer's real output, not
a re-statement of it. Run tests/reference/gemma4_vision_reference.py first (it writes hf/).

The converter reads image_mean / image_std from preprocessor_config.json: Gemma 4's processor does not normalise
(mean 0, std 1), written into a temporary copy of hf/ beside the checkpoint's files. The check made of the file
(tests/models/test_gemma4_vision.cpp): the encoder read from mmproj.gguf gives the soft tokens of the encoder read from
hf/ bit for bit (the file holds the same float32 numbers); the encoder's numerics themselves are checked against the
float64 re-statement.

Run from /work/main:
  /usr/bin/python3 tests/reference/gemma4_mmproj_fixture.py [LLAMA_CPP_SOURCE]
LLAMA_CPP_SOURCE defaults to bench/.peers/llama.cpp (what bench/compare clones from node-llama-cpp's bundle); the
converter runs through tests/reference/llamacpp_convert_shim.py (stand-ins for what Debian lacks).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    llama_cpp = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "bench", ".peers", "llama.cpp")
    d = os.path.join(HERE, "..", "fixtures", "gemma4_vision")
    convert = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    if not os.path.exists(convert):
        print(f"llama.cpp's converter not found at {convert}: mmproj.gguf not (re)written")
        return
    commit = subprocess.run(["git", "-C", llama_cpp, "log", "-1", "--format=%H"], capture_output=True,
                            text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        hd = os.path.join(tmp, "hf")
        shutil.copytree(os.path.join(d, "hf"), hd)
        with open(os.path.join(hd, "preprocessor_config.json"), "w") as f:
            json.dump({"image_processor_type": "Gemma4ImageProcessor", "image_mean": [0.0, 0.0, 0.0],
                       "image_std": [1.0, 1.0, 1.0], "patch_size": 4, "pooling_kernel_size": 3,
                       "max_soft_tokens": 6}, f, indent=1)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([llama_cpp, os.path.join(llama_cpp, "gguf-py"), HERE]))
        out = os.path.join(d, "mmproj.gguf")
        subprocess.run([sys.executable, os.path.join(HERE, "llamacpp_convert_shim.py"), convert, "--mmproj", hd,
                        "--outtype", "f32", "--outfile", out], check=True, env=env, cwd=llama_cpp,
                       stdout=subprocess.DEVNULL)
    meta_path = os.path.join(d, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["mmproj"] = {"file": "mmproj.gguf", "what": "llama.cpp's own mmproj conversion of hf/",
                      "llama_cpp_commit": commit,
                      "command": "convert_hf_to_gguf.py --mmproj hf --outtype f32 --outfile mmproj.gguf"}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print("wrote", out, "with llama.cpp", commit)


if __name__ == "__main__":
    main()
