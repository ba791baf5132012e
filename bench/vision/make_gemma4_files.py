"""bench/vision/make_gemma4_files.py: the files bench/vision/mtmd --model gemma4 times, with random weights at the sizes
of Gemma 4 26B / 31B's vision encoder (width 1152, MLP 4304, 16 heads of 72, patches of 16, 3 x 3 pooling, a
[2, 10240, 1152] position table; LAYERS of the real 27) and a projection to the text width E (26B's 2816 by default):

  * hf/: a Hugging Face Gemma4ForConditionalGeneration-style checkpoint holding only the vision encoder and its
    projector (config.json shaped as tests/fixtures/gemma4_vision/hf/config.json's, model.safetensors with its tensor
    names; matrices normal with standard deviation 0.02, norm scales ~1, std_scale ~1, std_bias ~0) and a
    preprocessor_config.json (mean 0, std 1: Gemma 4's processor does not normalise; patch 16, pooling 3, 280 soft
    tokens at most).
  * mmproj-f16.gguf / mmproj-f32.gguf: llama.cpp's OWN conversion of hf/ (convert_hf_to_gguf.py --mmproj --outtype
    f16|f32, class Gemma4VisionAudioModel; run through tests/reference/llamacpp_convert_shim.py, as
    tests/reference/gemma4_mmproj_fixture.py does). f16 is what the converter writes by default for float32
    checkpoints: the matrices F16, the position table (forced), norms and other 1-D tensors F32.
  * text.gguf: a two-layer Gemma 4 text model (llama.cpp's gemma4 architecture, written with its gguf-py as
    tests/reference/llamacpp_peer.py writes gemma4 files) of width E, so that llama-mtmd-cli accepts the pair and both
    programs can time the first token after a picture: two sliding-window layers (llama.cpp's gemma4 K/V cache asserts
    at least 2 layers; 16 query heads, 8 K/V heads of 256; the global layers' head 512 is declared, none exists), dense
    GeGLU MLPs of 2112, tied head, soft cap 30. Its
    vocabulary has Gemma 4's size (262144) and the ids of its control and picture tokens (<|image> 255999, <|image|>
    258880, <image|> 258882: llama.cpp's mtmd wraps a gemma4v picture in "<|image>" ... "<image|>", which it
    tokenizes as text; maxtext looks the three up by text); the rest are placeholders and the 256 byte tokens.
  * picture-WxH.png (with --picture W H only): a smooth, deterministic RGB picture.

Usage (from the repository root):
  make_gemma4_files.py OUT_DIR LAYERS LLAMA_CPP_DIR [f16|f32] [--emb E]
  make_gemma4_files.py --picture W H OUT.png
"""
import json
import os
import subprocess
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

D, F, HEADS, HEAD_DIM, PATCH, POOL, POSITIONS = 1152, 4304, 16, 72, 16, 3, 10240
BOI, IMAGE, EOI = 255999, 258880, 258882


def write_checkpoint(hf, layers, E):
    from common import save_safetensors

    rng = np.random.default_rng(2026)
    t = {}

    def put(name, shape, std=0.02, mean=0.0):
        t[name] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)).astype(np.float32)

    vt = "model.vision_tower."
    put(vt + "patch_embedder.input_proj.weight", (D, 3 * PATCH * PATCH))
    put(vt + "patch_embedder.position_embedding_table", (2, POSITIONS, D))
    put(vt + "std_scale", (D,), 0.05, 1.0)
    put(vt + "std_bias", (D,), 0.02)
    for i in range(layers):
        p = vt + f"encoder.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            put(p + n + ".weight", (D,), 0.05, 1.0)
        for n in ("q_proj", "k_proj", "v_proj"):
            put(p + f"self_attn.{n}.linear.weight", (HEADS * HEAD_DIM, D))
        put(p + "self_attn.o_proj.linear.weight", (D, HEADS * HEAD_DIM))
        put(p + "self_attn.q_norm.weight", (HEAD_DIM,), 0.05, 1.0)
        put(p + "self_attn.k_norm.weight", (HEAD_DIM,), 0.05, 1.0)
        put(p + "mlp.gate_proj.linear.weight", (F, D))
        put(p + "mlp.up_proj.linear.weight", (F, D))
        put(p + "mlp.down_proj.linear.weight", (D, F))
    put("model.embed_vision.embedding_projection.weight", (E, D))
    os.makedirs(hf, exist_ok=True)
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "boi_token_id": BOI, "eoi_token_id": EOI,
           "image_token_id": IMAGE, "model_type": "gemma4",
           "text_config": {"hidden_size": E, "model_type": "gemma4_text"},
           "vision_config": {"attention_bias": False, "attention_dropout": 0.0, "head_dim": HEAD_DIM,
                             "hidden_activation": "gelu_pytorch_tanh", "hidden_size": D, "intermediate_size": F,
                             "model_type": "gemma4_vision", "num_attention_heads": HEADS,
                             "num_hidden_layers": layers, "num_key_value_heads": HEADS, "patch_size": PATCH,
                             "pooling_kernel_size": POOL, "position_embedding_size": POSITIONS,
                             "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 100.0, "rope_type": "default"},
                             "standardize": True, "use_clipped_linears": False}}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(hf, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Gemma4ImageProcessor", "image_mean": [0.0, 0.0, 0.0],
                   "image_std": [1.0, 1.0, 1.0], "patch_size": PATCH, "pooling_kernel_size": POOL,
                   "max_soft_tokens": 280}, f, indent=1)
    save_safetensors(os.path.join(hf, "model.safetensors"), t)


def convert(hf, llama, outtype, out):
    """llama.cpp's own converter (convert_hf_to_gguf.py --mmproj), through the shim for what Debian lacks."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([llama, os.path.join(llama, "gguf-py"),
                                                       os.path.join(ROOT, "tests", "reference")]))
    tmp = out + ".tmp"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "reference", "llamacpp_convert_shim.py"),
                        os.path.join(llama, "convert_hf_to_gguf.py"), "--mmproj", hf, "--outtype", outtype,
                        "--outfile", tmp], env=env, cwd=llama, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:])
        raise SystemExit(f"make_gemma4_files.py: llama.cpp's converter failed (exit {r.returncode})")
    os.replace(tmp, out)


def write_text(path, E, llama):
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    import gguf  # llama.cpp's own writer

    rng = np.random.default_rng(11)
    H, KV, Dh, Dh_global, FF, V, LT = 16, 8, 256, 512, 2112, 262144, 2
    tokens = [f"<unused{i}>" for i in range(V)]
    types = [gguf.TokenType.UNUSED] * V
    for i, name in ((0, "<pad>"), (1, "<eos>"), (2, "<bos>"), (3, "<unk>"), (105, "<|turn>"), (106, "<turn|>"),
                    (BOI, "<|image>"), (IMAGE, "<|image|>"), (EOI, "<image|>")):
        tokens[i] = name
        types[i] = (gguf.TokenType.UNKNOWN if name == "<unk>" else gguf.TokenType.USER_DEFINED if "image" in name
                    else gguf.TokenType.CONTROL)
    for b in range(256):
        tokens[238 + b] = f"<0x{b:02X}>"
        types[238 + b] = gguf.TokenType.BYTE
    tokens[236] = "\u2581"
    types[236] = gguf.TokenType.NORMAL
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, "gemma4")
    p = "gemma4."
    w.add_string("general.name", f"maxtext-cpp bench random gemma4 ({LT} layers)")
    w.add_uint32(p + "context_length", 4096)
    w.add_uint32(p + "embedding_length", E)
    w.add_uint32(p + "block_count", LT)
    w.add_uint32(p + "feed_forward_length", FF)
    w.add_uint32(p + "attention.head_count", H)
    # The keys conversion/gemma.py Gemma4Model.set_gguf_parameters writes (sliding-window layers only).
    w.add_head_count_kv([KV] * LT)
    w.add_key_length(Dh_global)
    w.add_value_length(Dh_global)
    w.add_key_length_swa(Dh)
    w.add_value_length_swa(Dh)
    w.add_sliding_window_pattern([True] * LT)
    w.add_shared_kv_layers(0)
    w.add_embedding_length_per_layer_input(0)
    w.add_rope_dimension_count(Dh_global)
    w.add_rope_dimension_count_swa(Dh)
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(p + "rope.freq_base", 1000000.0)
    w.add_float32(p + "rope.freq_base_swa", 10000.0)
    w.add_uint32(p + "attention.sliding_window", 1024)
    w.add_float32(p + "final_logit_softcapping", 30.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * V)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)

    def put(name, shape, std, mean=0.0, dtype=np.float32):
        a = rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)
        w.add_tensor(name, np.ascontiguousarray(a.astype(dtype)))

    emb = np.empty((V, E), dtype=np.float16)  # in slices: the float32 table would be 3 GB
    for a in range(0, V, 16384):
        emb[a:a + 16384] = (rng.standard_normal((min(16384, V - a), E), dtype=np.float32) * 0.02).astype(np.float16)
    w.add_tensor("token_embd.weight", emb)
    put("output_norm.weight", (E,), 0.05, 1.0)
    for i in range(LT):
        b = f"blk.{i}."
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            put(b + n + ".weight", (E,), 0.05, 1.0)
        put(b + "attn_q.weight", (H * Dh, E), E ** -0.5, dtype=np.float16)
        put(b + "attn_k.weight", (KV * Dh, E), E ** -0.5, dtype=np.float16)
        put(b + "attn_v.weight", (KV * Dh, E), E ** -0.5, dtype=np.float16)
        put(b + "attn_output.weight", (E, H * Dh), (H * Dh) ** -0.5, dtype=np.float16)
        put(b + "attn_q_norm.weight", (Dh,), 0.05, 1.0)
        put(b + "attn_k_norm.weight", (Dh,), 0.05, 1.0)
        w.add_tensor(b + "layer_output_scale.weight", np.array([1.0], dtype=np.float32))
        put(b + "ffn_gate.weight", (FF, E), E ** -0.5, dtype=np.float16)
        put(b + "ffn_up.weight", (FF, E), E ** -0.5, dtype=np.float16)
        put(b + "ffn_down.weight", (E, FF), FF ** -0.5, dtype=np.float16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def write_png(path, width, height):
    """A smooth RGB picture (gradients and a few circles), 8 bits per channel, no filter."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 127 + 120 * np.sin(x / 37.0) * np.cos(y / 53.0)
    g = 255 * x / max(width - 1, 1)
    b = 255 * y / max(height - 1, 1)
    for cx, cy, rad in ((0.3, 0.4, 0.15), (0.7, 0.6, 0.2)):
        inside = (x - cx * width) ** 2 + (y - cy * height) ** 2 < (rad * min(width, height)) ** 2
        r = np.where(inside, 255 - r, r)
    img = np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8)
    raw = b"".join(b"\x00" + img[i].tobytes() for i in range(height))

    def chunk(kind, data):
        c = kind + data
        return len(data).to_bytes(4, "big") + c + zlib.crc32(c).to_bytes(4, "big")

    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 6)) +
                chunk(b"IEND", b""))
    os.replace(tmp, path)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--picture":
        write_png(os.path.abspath(args[3]), int(args[1]), int(args[2]))
        return
    E = 2816
    if "--emb" in args:
        i = args.index("--emb")
        E = int(args[i + 1])
        del args[i:i + 2]
    out, layers, llama = os.path.abspath(args[0]), int(args[1]), os.path.abspath(args[2])
    outtype = args[3] if len(args) > 3 else "f16"
    assert outtype in ("f16", "f32"), outtype
    os.makedirs(out, exist_ok=True)
    hf = os.path.join(out, "hf")
    if not os.path.exists(os.path.join(hf, "model.safetensors")):
        write_checkpoint(hf, layers, E)
    mmproj = os.path.join(out, f"mmproj-{outtype}.gguf")
    if not os.path.exists(mmproj):
        convert(hf, llama, outtype, mmproj)
    text = os.path.join(out, "text.gguf")
    if not os.path.exists(text):
        write_text(text, E, llama)


if __name__ == "__main__":
    main()
