#!/usr/bin/python3
"""PyTorch CPU eager baseline for bench/compare: the same Llama (half-split RoPE, GQA, SwiGLU, RMSNorm) on the same
MaxText-named safetensors the library reads, prefill (last-token logits) and decode with a KV cache.

  torch_bench.py MODEL_DIR --threads T [--prompts 128,512] [--context 512] [--decode 16] [--reps 2] [--dtype f32]

Prints one JSON object per measurement (as bench_e2e). Run with OMP_WAIT_POLICY=passive and OpenBLAS as the
system BLAS (bench/compare does both and reports which BLAS was loaded).
"""
import argparse
import json
import math
import struct
import sys
import time

import numpy as np
import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        assert h["dtype"] == "F32", f"{path}: {name} has dtype {h['dtype']}, expected F32"
        out[name] = np.frombuffer(mm[a:b], dtype="<f4").reshape(h["shape"])
    return out


class Llama:
    def __init__(self, st, meta, dtype):
        D, N, K = meta["dim"], meta["heads"], meta["kv_heads"]
        self.D, self.N, self.K, self.H = D, N, K, D // N
        self.L = meta["layers"]

        def t(a):  # contiguous torch copy in the compute dtype
            return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)

        self.embed = t(st["token_embedder.embedding"])
        self.norm = t(st["decoder.decoder_norm.scale"])
        self.out = t(st["decoder.logits_dense.kernel"].T)  # [V, D]
        self.layers = []
        for i in range(self.L):
            p = f"decoder.layers_{i}."
            g = lambda n: st[p + n]
            self.layers.append(dict(
                n1=t(g("pre_self_attention_layer_norm.scale")), n2=t(g("post_self_attention_layer_norm.scale")),
                q=t(g("self_attention.query.kernel").reshape(D, -1).T), k=t(g("self_attention.key.kernel").reshape(D, -1).T),
                v=t(g("self_attention.value.kernel").reshape(D, -1).T), o=t(g("self_attention.out.kernel").reshape(-1, D).T),
                w0=t(g("mlp.wi_0.kernel").T), w1=t(g("mlp.wi_1.kernel").T), wo=t(g("mlp.wo.kernel").T)))
        half = self.H // 2
        inv = 1.0 / (10000.0 ** (torch.arange(0, half, dtype=torch.float32) * 2 / self.H))
        pos = torch.arange(0, 4096, dtype=torch.float32)
        ang = torch.outer(pos, inv)
        self.cos, self.sin = ang.cos().to(dtype), ang.sin().to(dtype)
        self.dtype = dtype

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x, p0):  # x [T, heads, H], half-split
        T, half = x.shape[0], self.H // 2
        c, s = self.cos[p0:p0 + T, None, :], self.sin[p0:p0 + T, None, :]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1)

    def forward(self, ids, cache, p0):
        """ids [T] -> last-token logits; cache: list of (k, v) [S_max, K, H] tensors filled up to p0."""
        T = ids.shape[0]
        x = self.embed[ids]
        G = self.N // self.K
        mask = None
        if T > 1:
            mask = torch.full((T, p0 + T), float("-inf"), dtype=self.dtype).triu(p0 + 1)
        for li, L in enumerate(self.layers):
            h = self.rms(x, L["n1"])
            q = self.rope((h @ L["q"].T).view(T, self.N, self.H), p0)
            k = self.rope((h @ L["k"].T).view(T, self.K, self.H), p0)
            v = (h @ L["v"].T).view(T, self.K, self.H)
            kc, vc = cache[li]
            kc[p0:p0 + T] = k
            vc[p0:p0 + T] = v
            ks, vs = kc[:p0 + T], vc[:p0 + T]  # [S, K, H]
            qh = q.view(T, self.K, G, self.H).permute(1, 2, 0, 3)  # [K, G, T, H]
            kh = ks.permute(1, 0, 2)[:, None]  # [K, 1, S, H]
            vh = vs.permute(1, 0, 2)[:, None]
            s = (qh @ kh.transpose(-1, -2)) / math.sqrt(self.H)
            if mask is not None:
                s = s + mask
            a = torch.softmax(s, dim=-1) @ vh  # [K, G, T, H]
            a = a.permute(2, 0, 1, 3).reshape(T, self.D)
            x = x + a @ L["o"].T
            h = self.rms(x, L["n2"])
            x = x + (torch.nn.functional.silu(h @ L["w0"].T) * (h @ L["w1"].T)) @ L["wo"].T
        x = self.rms(x[-1:], self.norm)
        return x @ self.out.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--prompts", default="128,512")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    meta = json.load(open(a.model_dir + "/meta.json"))
    dtype = torch.float32 if a.dtype == "f32" else torch.bfloat16
    model = Llama(read_safetensors(a.model_dir + "/model.safetensors"), meta, dtype)
    blas = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.lower()})
    g = torch.Generator().manual_seed(1234)
    prompts = [int(x) for x in a.prompts.split(",") if x]
    cap = max([a.context + a.decode] + prompts)

    def new_cache():
        return [(torch.zeros(cap, model.K, model.H, dtype=dtype), torch.zeros(cap, model.K, model.H, dtype=dtype))
                for _ in range(model.L)]

    def toks(n):
        return torch.randint(3, meta["vocab"], (n,), generator=g)

    def report(test, n, sec):
        print(json.dumps(dict(impl="pytorch", model=meta["name"], weights=a.dtype, threads=a.threads, test=test, tokens=n,
                              seconds=sec, tokens_per_s=n / sec, blas=blas, torch=torch.__version__)), flush=True)

    with torch.inference_mode():
        model.forward(toks(8), new_cache(), 0)  # warm-up
        for T in prompts:
            best = 1e30
            for _ in range(a.reps):
                c, t = new_cache(), toks(T)
                t0 = time.perf_counter()
                model.forward(t, c, 0)
                best = min(best, time.perf_counter() - t0)
            report(f"pp{T}", T, best)
        if a.decode > 0:
            best = 1e30
            for _ in range(max(1, a.reps - 1)):
                c = new_cache()
                model.forward(toks(a.context), c, 0)
                t0 = time.perf_counter()
                for i in range(a.decode):
                    model.forward(toks(1), c, a.context + i)
                best = min(best, time.perf_counter() - t0)
            report(f"tg@{a.context}", a.decode, best)


if __name__ == "__main__":
    sys.exit(main())
