"""bench/vision/torch_tower.py: the peer of `maxtext vision` in bench/vision/run: a Gemma 3 vision tower (SigLIP
encoder, average pooling to 256 tokens, soft-embedding RMSNorm and projection) in PyTorch float32 on the CPU, reading
the same Hugging Face checkpoint and the same picture file (preprocessed with Pillow as MaxText's processor does),
timed the same way: the tower's forward pass only.

Usage (called by run): torch_tower.py CHECKPOINT_DIR PICTURE THREADS [--out tokens.npy] [--repeat N]
Writes one JSON line: {"encode_s": best of N, "pictures": 1}.
"""
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def load(dirname):
    import struct
    path = dirname + "/model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).reshape(info["shape"]).copy())
    return out


def main():
    ckpt, pixels_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out_path = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    torch.set_num_threads(threads)
    cfg = json.load(open(ckpt + "/config.json"))
    vc = cfg["vision_config"]
    w = load(ckpt)
    D, heads, p, L = vc["hidden_size"], vc["num_attention_heads"], vc["patch_size"], vc["num_hidden_layers"]
    eps = vc.get("layer_norm_eps", 1e-6)
    tokens = cfg.get("mm_tokens_per_image", 256)
    vt, mm = "vision_tower.vision_model.", "multi_modal_projector."
    from PIL import Image
    img = Image.open(pixels_path).convert("RGB")
    size = vc["image_size"]
    big = img.size[0] > size or img.size[1] > size
    img = img.resize((size, size), resample=Image.Resampling.LANCZOS if big else Image.Resampling.BILINEAR)
    px = np.asarray(img, dtype=np.float32)
    px = np.clip((px - 127.5) / 127.5, -1.0, 1.0).astype(np.float32)
    x_nhwc = torch.from_numpy(px[None])

    def encode():
        with torch.no_grad():
            x = x_nhwc.permute(0, 3, 1, 2).contiguous()
            x = F.conv2d(x, w[vt + "embeddings.patch_embedding.weight"], w[vt + "embeddings.patch_embedding.bias"], stride=p)
            n, _, g, _ = x.shape
            x = x.flatten(2).transpose(1, 2) + w[vt + "embeddings.position_embedding.weight"]
            hd = D // heads
            for i in range(L):
                pre = vt + f"encoder.layers.{i}."
                h = F.layer_norm(x, (D,), w[pre + "layer_norm1.weight"], w[pre + "layer_norm1.bias"], eps)
                q = F.linear(h, w[pre + "self_attn.q_proj.weight"], w[pre + "self_attn.q_proj.bias"])
                k = F.linear(h, w[pre + "self_attn.k_proj.weight"], w[pre + "self_attn.k_proj.bias"])
                v = F.linear(h, w[pre + "self_attn.v_proj.weight"], w[pre + "self_attn.v_proj.bias"])
                q, k, v = (t.view(n, -1, heads, hd).transpose(1, 2) for t in (q, k, v))
                a = torch.softmax((q * (hd ** -0.5)) @ k.transpose(-1, -2), dim=-1) @ v
                a = a.transpose(1, 2).reshape(n, -1, D)
                x = x + F.linear(a, w[pre + "self_attn.out_proj.weight"], w[pre + "self_attn.out_proj.bias"])
                h = F.layer_norm(x, (D,), w[pre + "layer_norm2.weight"], w[pre + "layer_norm2.bias"], eps)
                h = F.gelu(F.linear(h, w[pre + "mlp.fc1.weight"], w[pre + "mlp.fc1.bias"]), approximate="tanh")
                x = x + F.linear(h, w[pre + "mlp.fc2.weight"], w[pre + "mlp.fc2.bias"])
            x = F.layer_norm(x, (D,), w[vt + "post_layernorm.weight"], w[vt + "post_layernorm.bias"], eps)
            side = int(math.isqrt(tokens))
            if g != side:
                x = F.avg_pool2d(x.transpose(1, 2).reshape(n, D, g, g), g // side).flatten(2).transpose(1, 2)
            r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w[mm + "mm_soft_emb_norm.weight"])
            return r @ w[mm + "mm_input_projection_weight"]

    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        y = encode()
        best = min(best, time.perf_counter() - t0)
    if out_path:
        np.save(out_path, y.numpy())
    print(json.dumps({"encode_s": best, "pictures": int(x_nhwc.shape[0])}))


if __name__ == "__main__":
    main()
