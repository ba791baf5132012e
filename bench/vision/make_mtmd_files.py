"""bench/vision/make_mtmd_files.py: the files llama.cpp's mtmd needs for bench/vision/mtmd, written with llama.cpp's own
gguf-py (GGUFWriter, TensorNameMap) from the random tower that bench/vision/make_tower.py writes:

  * mmproj-f16.gguf / mmproj-f32.gguf: the tower and projector as llama.cpp's converter writes them
    (`convert_hf_to_gguf.py --mmproj --outtype f16|f32`, class Gemma3VisionModel): tensors under their
    TensorNameMap names, the patch and position embeddings F32 (Gemma3VisionModel forces them), one-dimensional
    tensors F32, the layers' matrices in the out type, mm.input_projection.weight F16 (forced), the soft-embedding
    norm stored as 1 + w, the clip.* keys MmprojModel and Gemma3VisionModel write. (The converter itself imports `transformers`,
    which Debian does not package.)
  * text.gguf: a one-layer Gemma 3 text model with random weights whose width is the projector's output (2560), so
    that llama-mtmd-cli accepts the pair, for the time to the first token after a picture. Its vocabulary has Gemma
    3's size and the ids of its control and picture tokens; the rest are placeholders and the 256 byte tokens.

Usage: make_mtmd_files.py TOWER_DIR LLAMA_CPP_DIR [f16|f32]
  writes TOWER_DIR/mmproj-f16.gguf (or -f32) and TOWER_DIR/text.gguf. f16 is what the converter writes by default
  for float32 checkpoints (--outtype auto): the matrices of the layers F16, the embeddings, norms and biases F32.
"""
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
    out = {}
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        assert info["dtype"] == "F32", name
        out[name] = np.frombuffer(mm[base + a:base + b], dtype=np.float32).reshape(info["shape"])
    return out


def main():
    tower, llama = sys.argv[1], sys.argv[2]
    outtype = sys.argv[3] if len(sys.argv) > 3 else "f16"
    assert outtype in ("f16", "f32"), outtype
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    import gguf  # llama.cpp's own writer

    cfg = json.load(open(os.path.join(tower, "config.json")))
    vc, E = cfg["vision_config"], cfg["text_config"]["hidden_size"]
    L = vc["num_hidden_layers"]
    hf = read_safetensors(os.path.join(tower, "model.safetensors"))

    # ---- mmproj ----
    w = gguf.GGUFWriter(os.path.join(tower, f"mmproj-{outtype}.gguf"), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_clip_has_vision_encoder(True)
    w.add_vision_projection_dim(E)
    w.add_vision_image_size(vc["image_size"])
    w.add_vision_patch_size(vc["patch_size"])
    w.add_vision_embedding_length(vc["hidden_size"])
    w.add_vision_feed_forward_length(vc["intermediate_size"])
    w.add_vision_block_count(L)
    w.add_vision_head_count(vc["num_attention_heads"])
    w.add_vision_image_mean([0.5, 0.5, 0.5])
    w.add_vision_image_std([0.5, 0.5, 0.5])
    w.add_clip_projector_type(gguf.VisionProjectorType.GEMMA3)
    w.add_vision_attention_layernorm_eps(vc["layer_norm_eps"])
    w.add_vision_use_gelu(True)
    names = gguf.TensorNameMap(gguf.MODEL_ARCH.MMPROJ, L)
    for name in sorted(hf):
        if not name.startswith(("multi_modal_projector.", "vision_tower.")):
            continue
        data = hf[name]
        name = name.replace("_weight", ".weight")
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new is not None, name
        if "soft_emb_norm.weight" in name:
            data = (data + np.float32(1)).astype(np.float32)
        if "input_projection" in name or (outtype == "f16" and data.ndim >= 2 and ".embeddings." not in name):
            data = data.astype(np.float16)
        w.add_tensor(new, np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # ---- a one-layer Gemma 3 text model of width E ----
    rng = np.random.default_rng(11)
    H, KV, Dh, F = 8, 4, 256, 1024
    # Gemma 3's vocabulary size and the ids of its control and picture tokens (both readers look the picture tokens
    # up by id or by text); the other entries are placeholders, and the 256 byte tokens let any text tokenize.
    V = 262208
    tokens = [f"<unused{i}>" for i in range(V)]
    types = [gguf.TokenType.UNUSED] * V
    for i, name in ((0, "<pad>"), (1, "<eos>"), (2, "<bos>"), (3, "<unk>"), (105, "<start_of_turn>"),
                    (106, "<end_of_turn>"), (255999, "<start_of_image>"), (256000, "<end_of_image>"),
                    (262144, "<image_soft_token>")):
        tokens[i] = name
        types[i] = (gguf.TokenType.UNKNOWN if name == "<unk>" else gguf.TokenType.USER_DEFINED if "image" in name
                    else gguf.TokenType.CONTROL)
    for b in range(256):
        tokens[238 + b] = f"<0x{b:02X}>"
        types[238 + b] = gguf.TokenType.BYTE
    tokens[236] = "\u2581"
    types[236] = gguf.TokenType.NORMAL
    t = gguf.GGUFWriter(os.path.join(tower, "text.gguf"), "gemma3")
    t.add_context_length(4096)
    t.add_embedding_length(E)
    t.add_block_count(1)
    t.add_feed_forward_length(F)
    t.add_head_count(H)
    t.add_head_count_kv(KV)
    t.add_key_length(Dh)
    t.add_value_length(Dh)
    t.add_layer_norm_rms_eps(1e-6)
    t.add_rope_freq_base(10000.0)
    t.add_sliding_window(1024)
    t.add_file_type(gguf.LlamaFileType.ALL_F32)
    t.add_tokenizer_model("llama")
    t.add_token_list(tokens)
    t.add_token_scores([0.0] * V)
    t.add_token_types(types)
    t.add_bos_token_id(2)
    t.add_eos_token_id(1)
    t.add_unk_token_id(3)
    t.add_pad_token_id(0)
    t.add_add_bos_token(True)

    def put(name, shape, scale, offset=0.0):
        t.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * scale + offset).astype(np.float32))

    t.add_tensor("token_embd.weight", (rng.standard_normal((V, E), dtype=np.float32) * 0.02).astype(np.float16))
    put("output_norm.weight", (E,), 0.05)
    p = "blk.0."
    for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
        put(p + n + ".weight", (E,), 0.05)
    put(p + "attn_q.weight", (H * Dh, E), E ** -0.5)
    put(p + "attn_k.weight", (KV * Dh, E), E ** -0.5)
    put(p + "attn_v.weight", (KV * Dh, E), E ** -0.5)
    put(p + "attn_output.weight", (E, H * Dh), (H * Dh) ** -0.5)
    put(p + "attn_q_norm.weight", (Dh,), 0.05)
    put(p + "attn_k_norm.weight", (Dh,), 0.05)
    put(p + "ffn_gate.weight", (F, E), E ** -0.5)
    put(p + "ffn_up.weight", (F, E), E ** -0.5)
    put(p + "ffn_down.weight", (E, F), F ** -0.5)
    t.write_header_to_file()
    t.write_kv_data_to_file()
    t.write_tensors_to_file()
    t.close()


if __name__ == "__main__":
    main()
