"""bench/vision/llama4_torch.py: the PyTorch peer of `maxtext vision` for Llama 4's vision model in bench/vision/llama4.

  llama4_torch.py make OUT_DIR LAYERS
      a Hugging Face Llama4ForConditionalGeneration checkpoint holding only the vision model, adapter and projector
      with random weights at Llama 4's sizes (tiles of 336, patches of 14, width 1408, 16 heads, MLP 5632, pixel
      shuffle 0.5, adapter 4096, projection to 5120; LAYERS of the real 34), and its config.json.
  llama4_torch.py run CHECKPOINT_DIR PICTURE THREADS [--out tokens.npy] [--repeat N]
      the picture cut into tiles as MaxText's processor does (tests/reference/llama4_preprocess.py), then Hugging
      Face's Llama4VisionModel + Llama4MultiModalProjector forward in float32 on the CPU (written out here with
      torch ops: transformers is not a dependency), timed like `maxtext vision`: the model's forward pass over all
      tiles only. Writes one JSON line {"encode_s": best of N, "tiles": n}.
"""
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
D, F_, HEADS, S, P, PIN, POUT, E = 1408, 5632, 16, 336, 14, 4096, 4096, 5120


def make(out, layers):
    rng = np.random.default_rng(11)
    T = (S // P) ** 2
    t = {}

    def put(name, shape, scale, offset=0.0):
        t[name] = (rng.standard_normal(shape, dtype=np.float32) * scale + offset).astype(np.float32)

    vm = "vision_model."
    put(vm + "patch_embedding.linear.weight", (D, 3 * P * P), (3 * P * P) ** -0.5)
    put(vm + "class_embedding", (D,), D ** -0.5)
    put(vm + "positional_embedding_vlm", (T + 1, D), D ** -0.5)
    for n in ("layernorm_pre", "layernorm_post"):
        put(vm + n + ".weight", (D,), 0.05, 1.0)
        put(vm + n + ".bias", (D,), 0.02)
    for i in range(layers):
        pre = vm + f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm"):
            put(pre + n + ".weight", (D,), 0.05, 1.0)
            put(pre + n + ".bias", (D,), 0.02)
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            put(pre + f"self_attn.{n}.weight", (D, D), D ** -0.5)
            put(pre + f"self_attn.{n}.bias", (D,), 0.02)
        put(pre + "mlp.fc1.weight", (F_, D), D ** -0.5)
        put(pre + "mlp.fc1.bias", (F_,), 0.02)
        put(pre + "mlp.fc2.weight", (D, F_), F_ ** -0.5)
        put(pre + "mlp.fc2.bias", (D,), 0.02)
    put(vm + "vision_adapter.mlp.fc1.weight", (PIN, F_), F_ ** -0.5)
    put(vm + "vision_adapter.mlp.fc2.weight", (POUT, PIN), PIN ** -0.5)
    put("multi_modal_projector.linear_1.weight", (E, POUT), POUT ** -0.5)
    os.makedirs(out, exist_ok=True)
    header, offset = {}, 0
    for name in sorted(t):
        header[name] = {"dtype": "F32", "shape": list(t[name].shape), "data_offsets": [offset, offset + t[name].nbytes]}
        offset += t[name].nbytes
    blob = json.dumps(header).encode()
    blob += b" " * ((8 - len(blob) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name in sorted(t):
            f.write(t[name].tobytes())
    cfg = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
           "image_token_index": 200092, "boi_token_index": 200080, "eoi_token_index": 200081,
           "vision_config": {"model_type": "llama4_vision_model", "hidden_size": D, "intermediate_size": F_,
                             "num_hidden_layers": layers, "num_attention_heads": HEADS, "num_channels": 3,
                             "image_size": S, "patch_size": P, "norm_eps": 1e-5, "rope_theta": 10000.0,
                             "pixel_shuffle_ratio": 0.5, "projector_input_dim": PIN, "projector_output_dim": POUT,
                             "vision_output_dim": POUT, "hidden_act": "gelu", "multi_modal_projector_bias": False},
           "text_config": {"model_type": "llama4_text", "hidden_size": E}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def load(dirname):
    with open(dirname + "/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {name: torch.from_numpy(np.frombuffer(data[i["data_offsets"][0]:i["data_offsets"][1]], dtype=np.float32)
                                   .reshape(i["shape"]).copy()) for name, i in header.items() if name != "__metadata__"}


def run(ckpt, picture, threads, out_path, repeat):
    torch.set_num_threads(threads)
    vc = json.load(open(ckpt + "/config.json"))["vision_config"]
    L, theta = vc["num_hidden_layers"], vc["rope_theta"]
    w = load(ckpt)
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
    import llama4_preprocess  # MaxText's processor re-stated (Pillow + NumPy)
    from PIL import Image
    img = np.asarray(Image.open(picture).convert("RGB"))
    tiles_nchw = llama4_preprocess.preprocess(img, S, 16)[0]
    x_in = torch.from_numpy(np.ascontiguousarray(tiles_nchw, dtype=np.float32))
    n, g = x_in.shape[0], S // P
    T, H = g * g, D // HEADS
    # Hugging Face's Llama4VisionRotaryEmbedding: pairs by column then row, the class token (last) unturned.
    idx = torch.arange(T + 1)
    fx, fy = (idx % g + 1).float(), (idx // g + 1).float()
    freq = 1.0 / theta ** (torch.arange(0, H // 2, 2)[: H // 4].float() / (H // 2))
    ang = torch.cat([fx[:, None] * freq, fy[:, None] * freq], dim=1)
    ang[T] = 0.0
    cos, sin = torch.cos(ang), torch.sin(ang)  # [T + 1, H / 2]

    def rope(z):  # [n, T + 1, heads, H]: complex pairs (2i, 2i + 1)
        re, im = z[..., 0::2], z[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack([re * c - im * s, re * s + im * c], dim=-1).flatten(-2)

    vm = "vision_model."

    def encode():
        with torch.no_grad():
            patches = F.unfold(x_in, kernel_size=P, stride=P).transpose(1, 2)  # [n, T, 3 p p]
            x = patches @ w[vm + "patch_embedding.linear.weight"].T
            x = torch.cat([x, w[vm + "class_embedding"].expand(n, 1, D)], dim=1) + w[vm + "positional_embedding_vlm"]
            x = F.layer_norm(x, (D,), w[vm + "layernorm_pre.weight"], w[vm + "layernorm_pre.bias"], 1e-5)
            for i in range(L):
                pre = vm + f"model.layers.{i}."
                h = F.layer_norm(x, (D,), w[pre + "input_layernorm.weight"], w[pre + "input_layernorm.bias"], 1e-5)
                q, k, v = (F.linear(h, w[pre + f"self_attn.{m}.weight"], w[pre + f"self_attn.{m}.bias"])
                           .view(n, T + 1, HEADS, H) for m in ("q_proj", "k_proj", "v_proj"))
                q, k = rope(q), rope(k)
                q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [n, heads, T + 1, H]
                a = torch.softmax((q @ k.transpose(-1, -2)) * H ** -0.5, dim=-1) @ v
                a = a.transpose(1, 2).reshape(n, T + 1, D)
                x = x + F.linear(a, w[pre + "self_attn.o_proj.weight"], w[pre + "self_attn.o_proj.bias"])
                h = F.layer_norm(x, (D,), w[pre + "post_attention_layernorm.weight"],
                                 w[pre + "post_attention_layernorm.bias"], 1e-5)
                h = F.gelu(F.linear(h, w[pre + "mlp.fc1.weight"], w[pre + "mlp.fc1.bias"]))
                x = x + F.linear(h, w[pre + "mlp.fc2.weight"], w[pre + "mlp.fc2.bias"])
            x = F.layer_norm(x, (D,), w[vm + "layernorm_post.weight"], w[vm + "layernorm_post.bias"], 1e-5)[:, :-1]
            # Pixel shuffle (ratio 0.5): token (i, j) = patches (2i + a, 2j + b), (a, b) row-major.
            x = x.reshape(n, g // 2, 2, g // 2, 2, D).permute(0, 1, 3, 2, 4, 5).reshape(n, T // 4, 4 * D)
            x = F.gelu(x @ w[vm + "vision_adapter.mlp.fc1.weight"].T)
            x = F.gelu(x @ w[vm + "vision_adapter.mlp.fc2.weight"].T)
            return x @ w["multi_modal_projector.linear_1.weight"].T

    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        y = encode()
        best = min(best, time.perf_counter() - t0)
    if out_path:
        np.save(out_path, y.numpy())
    print(json.dumps({"encode_s": best, "tiles": n}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        a = sys.argv[2:]
        out = a[a.index("--out") + 1] if "--out" in a else None
        rep = int(a[a.index("--repeat") + 1]) if "--repeat" in a else 1
        run(a[0], a[1], int(a[2]), out, rep)
