"""bench/vision/make_tower.py: a Hugging Face Gemma 3 checkpoint holding only a vision tower and projector with
random weights (Gemma 3's sizes: 896 x 896 pictures, patches of 14, width 1152, 16 heads, MLP 4304, projection to
2560; LAYERS of the 27 layers), for bench/vision/run. Usage: make_tower.py OUT_DIR LAYERS"""
import json
import os
import struct
import sys

import numpy as np


def main():
    out, layers = sys.argv[1], int(sys.argv[2])
    D, F, E, S, p = 1152, 4304, 2560, 896, 14
    T = (S // p) ** 2
    rng = np.random.default_rng(7)
    t = {}

    def put(name, shape, scale, offset=0.0):
        t[name] = (rng.standard_normal(shape, dtype=np.float32) * scale + offset).astype(np.float32)

    vt = "vision_tower.vision_model."
    put(vt + "embeddings.patch_embedding.weight", (D, 3, p, p), (3 * p * p) ** -0.5)
    put(vt + "embeddings.patch_embedding.bias", (D,), 0.02)
    put(vt + "embeddings.position_embedding.weight", (T, D), 0.02)
    for i in range(layers):
        pre = vt + f"encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            put(pre + n + ".weight", (D,), 0.05, 1.0)
            put(pre + n + ".bias", (D,), 0.02)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            put(pre + "self_attn." + n + ".weight", (D, D), D ** -0.5)
            put(pre + "self_attn." + n + ".bias", (D,), 0.02)
        put(pre + "mlp.fc1.weight", (F, D), D ** -0.5)
        put(pre + "mlp.fc1.bias", (F,), 0.02)
        put(pre + "mlp.fc2.weight", (D, F), F ** -0.5)
        put(pre + "mlp.fc2.bias", (D,), 0.02)
    put(vt + "post_layernorm.weight", (D,), 0.05, 1.0)
    put(vt + "post_layernorm.bias", (D,), 0.02)
    put("multi_modal_projector.mm_soft_emb_norm.weight", (D,), 0.05)
    put("multi_modal_projector.mm_input_projection_weight", (D, E), D ** -0.5)
    os.makedirs(out, exist_ok=True)
    header, offset = {}, 0
    for name, a in t.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in t.values():
            f.write(a.tobytes())
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
           "vision_config": {"model_type": "siglip_vision_model", "hidden_size": D, "intermediate_size": F,
                             "num_hidden_layers": layers, "num_attention_heads": 16, "image_size": S,
                             "patch_size": p, "num_channels": 3, "layer_norm_eps": 1e-6,
                             "hidden_act": "gelu_pytorch_tanh"},
           "text_config": {"model_type": "gemma3_text", "hidden_size": E, "rms_norm_eps": 1e-6}}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
