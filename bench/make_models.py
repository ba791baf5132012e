#!/usr/bin/python3
"""Write the benchmark models once: the same weights as MaxText-named safetensors (f32; read by the library and by
the PyTorch baseline) and as GGUF in F32, F16 and Q8_0 (read by llama.cpp).

  make_models.py OUT_DIR GGUF_PY_DIR [--only a,b,c]

Models (docs/performance.md):
  a  stories260K, the trained llama2.c model in ../shared/models (dim 64, 5 layers, 8/4 heads, hidden 172, vocab 512)
  b  stories110M-shaped Llama with seeded weights (dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000)
  c  1B-class Llama with seeded weights (dim 2048, 16 layers, 16/4 heads, hidden 5632, vocab 32000)
  d  1B-class Gemma 3 (gemma-3-1b's shape: dim 1152, 26 layers, 4/1 heads of 256, hidden 6912, window 512, 5 local :
     1 global; vocab 32000), GGUF only (architecture gemma3)
  e  Qwen3-MoE, 8 experts top 2 (dim 2048, 16 layers, 16/4 heads of 128, expert hidden 1408, vocab 32000), GGUF only
     (architecture qwen3moe)
  f  Qwen3-Next-shaped (dim 1024, 12 layers: 9 Gated DeltaNet with 8 key / 16 value heads of 128, 3 gated attention
     with 8/2 heads of 256; 8 experts of 512 top 2 + a gated shared expert; vocab 32000), GGUF only (qwen3next)
Models d, e and f are written as GGUF only (the library reads the GGUF llama.cpp reads; the PyTorch baseline and the
dense-Llama roofline model of bench_limits do not apply to them).

Rotary convention: the arrays are kept in Hugging Face's half-split layout (MaxText's default RoPE); the GGUF copies
get q/k rows permuted to llama.cpp's interleaved pairs (as convert_hf_to_gguf.py does), so every runtime computes the
same function. stories260K's GGUF holds interleaved rows; they are un-permuted on the way in.
Each model directory gets meta.json with its shape. Files are written once (skipped when meta.json exists).
"""
import json
import os
import struct
import sys

import numpy as np

SHAPES = {
    "b": dict(name="stories110M-shaped", dim=768, layers=12, heads=12, kv_heads=12, hidden=2048, vocab=32000),
    "c": dict(name="1B-class", dim=2048, layers=16, heads=16, kv_heads=4, hidden=5632, vocab=32000),
    "d": dict(name="gemma3-1B-class", arch="gemma3", dim=1152, layers=26, heads=4, kv_heads=1, head_dim=256,
              hidden=6912, vocab=32000, window=512, theta=1000000.0, theta_local=10000.0),
    "e": dict(name="qwen3-moe-8x2", arch="qwen3moe", dim=2048, layers=16, heads=16, kv_heads=4, head_dim=128,
              hidden=1408, experts=8, top_k=2, vocab=32000, theta=1000000.0),
    # Qwen3-Next-80B's head sizes (DeltaNet Dk = Dv = 128, attention head 256, 25% RoPE), widths scaled down.
    "f": dict(name="qwen3-next-0.3B-class", arch="qwen3next", dim=1024, layers=12, heads=8, kv_heads=2, head_dim=256,
              hidden=512, experts=8, top_k=2, vocab=32000, theta=10000000.0, gdn_hk=8, gdn_hv=16, gdn_d=128,
              gdn_conv=4, full_every=4),
}


def permute(w, n_head):
    """HF half-split rows [n_head*hd, in] -> interleaved pairs (convert_hf_to_gguf.py's permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_safetensors(path, tensors):
    """Minimal safetensors writer (f32 only): JSON header, then the raw little-endian bytes."""
    header, offset = {}, 0
    for name, a in tensors.items():
        n = a.size * 4
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in tensors.values():
            np.ascontiguousarray(a, dtype="<f4").tofile(f)
    os.replace(tmp, path)


def maxtext_tensors(m, s):
    """HF-layout arrays -> MaxText names and kernel layouts ([in, out...])."""
    D, N, K, H = s["dim"], s["heads"], s["kv_heads"], s["dim"] // s["heads"]
    t = {"token_embedder.embedding": m["embed"], "decoder.decoder_norm.scale": m["norm"],
         "decoder.logits_dense.kernel": m["output"].T}
    for i, L in enumerate(m["layers"]):
        p = f"decoder.layers_{i}."
        t[p + "pre_self_attention_layer_norm.scale"] = L["attn_norm"]
        t[p + "post_self_attention_layer_norm.scale"] = L["ffn_norm"]
        t[p + "self_attention.query.kernel"] = L["q"].T.reshape(D, N, H)
        t[p + "self_attention.key.kernel"] = L["k"].T.reshape(D, K, H)
        t[p + "self_attention.value.kernel"] = L["v"].T.reshape(D, K, H)
        t[p + "self_attention.out.kernel"] = L["o"].T.reshape(N, H, D)
        t[p + "mlp.wi_0.kernel"] = L["gate"].T
        t[p + "mlp.wi_1.kernel"] = L["up"].T
        t[p + "mlp.wo.kernel"] = L["down"].T
    return t


def write_gguf(gguf, path, m, s, ftype, vocab_fields=None):
    Q = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(path + ".tmp", "llama")
    w.add_name(s["name"])
    w.add_context_length(2048)
    w.add_embedding_length(s["dim"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["hidden"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(s["dim"] // s["heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7}[ftype])
    if vocab_fields is None:
        V = s["vocab"]
        toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
        toks += [f"t{i}" for i in range(V - len(toks))]
        types = [2, 3, 3] + [6] * 256 + [1] * (V - 259)
        vocab_fields = dict(tokens=toks, scores=[0.0] * V, types=types)
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab_fields["tokens"])
    w.add_token_scores(vocab_fields["scores"])
    w.add_token_types(vocab_fields["types"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def mat(name, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if ftype == "f16":
            w.add_tensor(name, a.astype(np.float16))
        elif ftype == "q8_0" and a.shape[-1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(a, Q.Q8_0), raw_dtype=Q.Q8_0)
        else:
            w.add_tensor(name, a)

    def vec(name, a):
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    mat("token_embd.weight", m["embed"])
    vec("output_norm.weight", m["norm"])
    mat("output.weight", m["output"])
    for i, L in enumerate(m["layers"]):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", L["attn_norm"])
        vec(p + "ffn_norm.weight", L["ffn_norm"])
        mat(p + "attn_q.weight", permute(L["q"], s["heads"]))
        mat(p + "attn_k.weight", permute(L["k"], s["kv_heads"]))
        mat(p + "attn_v.weight", L["v"])
        mat(p + "attn_output.weight", L["o"])
        mat(p + "ffn_gate.weight", L["gate"])
        mat(p + "ffn_up.weight", L["up"])
        mat(p + "ffn_down.weight", L["down"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


def write_gguf_arch(gguf, path, s, ftype, seed):
    """A seeded gemma3 / qwen3moe model straight to GGUF (llama.cpp's names; q/k rows in NeoX half-split order, as
    its converter leaves them for these architectures). The same seed gives the same weights in every ftype."""
    Q = gguf.GGMLQuantizationType
    arch, D, L, N, K, H = s["arch"], s["dim"], s["layers"], s["heads"], s["kv_heads"], s["head_dim"]
    F, V = s["hidden"], s["vocab"]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path + ".tmp", arch)
    p = arch + "."
    w.add_name(s["name"])
    w.add_uint32(p + "context_length", 2048)
    w.add_uint32(p + "embedding_length", D)
    w.add_uint32(p + "block_count", L)
    w.add_uint32(p + "feed_forward_length", F)
    w.add_uint32(p + "attention.head_count", N)
    w.add_uint32(p + "attention.head_count_kv", K)
    w.add_uint32(p + "attention.key_length", H)
    w.add_uint32(p + "attention.value_length", H)
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(p + "rope.freq_base", s["theta"])
    if arch == "gemma3":
        w.add_float32(p + "rope.freq_base_swa", s["theta_local"])
        w.add_uint32(p + "attention.sliding_window", s["window"])
    else:
        w.add_uint32(p + "expert_count", s["experts"])
        w.add_uint32(p + "expert_used_count", s["top_k"])
        w.add_uint32(p + "expert_feed_forward_length", F)
    if arch == "qwen3next":  # conversion/qwen.py Qwen3NextModel's keys
        w.add_uint32(p + "expert_shared_feed_forward_length", F)
        w.add_uint32(p + "ssm.conv_kernel", s["gdn_conv"])
        w.add_uint32(p + "ssm.state_size", s["gdn_d"])
        w.add_uint32(p + "ssm.group_count", s["gdn_hk"])
        w.add_uint32(p + "ssm.time_step_rank", s["gdn_hv"])
        w.add_uint32(p + "ssm.inner_size", s["gdn_d"] * s["gdn_hv"])
        w.add_uint32(p + "full_attention_interval", s["full_every"])
        w.add_uint32(p + "rope.dimension_count", H // 4)
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7}[ftype])
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"t{i}" for i in range(V - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * V)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (V - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def mat(name, *shape):
        a = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)
        if ftype == "f16":
            w.add_tensor(name, a.astype(np.float16))
        elif ftype == "q8_0" and a.shape[-1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(a, Q.Q8_0), raw_dtype=Q.Q8_0)
        else:
            w.add_tensor(name, a)

    def norm(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32))

    def vec(name, a):
        w.add_tensor(name, a.astype(np.float32))

    mat("token_embd.weight", V, D)  # tied head (gemma3, qwen3moe)
    norm("output_norm.weight", D)
    if arch == "qwen3next":
        mat("output.weight", V, D)
        Hk, Hv, Dh, E = s["gdn_hk"], s["gdn_hv"], s["gdn_d"], s["experts"]
        C = 2 * Hk * Dh + Hv * Dh
        for i in range(L):
            b = f"blk.{i}."
            norm(b + "attn_norm.weight", D)
            norm(b + "post_attention_norm.weight", D)
            if (i + 1) % s["full_every"] == 0:
                mat(b + "attn_q.weight", N * 2 * H, D)
                mat(b + "attn_k.weight", K * H, D)
                mat(b + "attn_v.weight", K * H, D)
                mat(b + "attn_output.weight", D, N * H)
                norm(b + "attn_q_norm.weight", H)
                norm(b + "attn_k_norm.weight", H)
            else:
                mat(b + "attn_qkv.weight", C, D)
                mat(b + "attn_gate.weight", Hv * Dh, D)
                mat(b + "ssm_ba.weight", 2 * Hv, D)
                vec(b + "ssm_conv1d.weight", rng.standard_normal((C, s["gdn_conv"]), dtype=np.float32) * 0.5)
                vec(b + "ssm_dt.bias", 1.0 + 0.3 * rng.standard_normal(Hv, dtype=np.float32))
                vec(b + "ssm_a", -np.exp(rng.uniform(-1.0, 1.5, Hv)))
                norm(b + "ssm_norm.weight", Dh)
                mat(b + "ssm_out.weight", D, Hv * Dh)
            mat(b + "ffn_gate_inp.weight", E, D)
            mat(b + "ffn_gate_exps.weight", E, F, D)
            mat(b + "ffn_up_exps.weight", E, F, D)
            mat(b + "ffn_down_exps.weight", E, D, F)
            vec(b + "ffn_gate_inp_shexp.weight", 0.02 * rng.standard_normal(D, dtype=np.float32))
            mat(b + "ffn_gate_shexp.weight", F, D)
            mat(b + "ffn_up_shexp.weight", F, D)
            mat(b + "ffn_down_shexp.weight", D, F)
    else:
        for i in range(L):
            b = f"blk.{i}."
            norm(b + "attn_norm.weight", D)
            norm(b + "ffn_norm.weight", D)
            norm(b + "attn_q_norm.weight", H)
            norm(b + "attn_k_norm.weight", H)
            mat(b + "attn_q.weight", N * H, D)
            mat(b + "attn_k.weight", K * H, D)
            mat(b + "attn_v.weight", K * H, D)
            mat(b + "attn_output.weight", D, N * H)
            if arch == "gemma3":
                norm(b + "post_attention_norm.weight", D)
                norm(b + "post_ffw_norm.weight", D)
                mat(b + "ffn_gate.weight", F, D)
                mat(b + "ffn_up.weight", F, D)
                mat(b + "ffn_down.weight", D, F)
            else:
                E = s["experts"]
                mat(b + "ffn_gate_inp.weight", E, D)
                mat(b + "ffn_gate_exps.weight", E, F, D)
                mat(b + "ffn_up_exps.weight", E, F, D)
                mat(b + "ffn_down_exps.weight", E, D, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


def seeded(s, seed):
    rng = np.random.default_rng(seed)
    D, F, V, H = s["dim"], s["hidden"], s["vocab"], s["dim"] // s["heads"]

    def mat(o, i):
        return (rng.standard_normal((o, i), dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(D, dtype=np.float32)).astype(np.float32)

    m = {"embed": mat(V, D), "norm": norm(), "output": mat(V, D), "layers": []}
    for _ in range(s["layers"]):
        m["layers"].append(dict(attn_norm=norm(), ffn_norm=norm(), q=mat(s["heads"] * H, D), k=mat(s["kv_heads"] * H, D),
                                v=mat(s["kv_heads"] * H, D), o=mat(D, s["heads"] * H), gate=mat(F, D), up=mat(F, D),
                                down=mat(D, F)))
    return m


def stories260k(gguf, path):
    r = gguf.GGUFReader(path)
    f = r.fields
    s = dict(name="stories260K", dim=int(f["llama.embedding_length"].contents()), layers=int(f["llama.block_count"].contents()),
             heads=int(f["llama.attention.head_count"].contents()), kv_heads=int(f["llama.attention.head_count_kv"].contents()),
             hidden=int(f["llama.feed_forward_length"].contents()))
    T = {t.name: np.array(t.data, dtype=np.float32).reshape(list(reversed([int(x) for x in t.shape]))) for t in r.tensors}
    s["vocab"] = T["token_embd.weight"].shape[0]
    m = {"embed": T["token_embd.weight"], "norm": T["output_norm.weight"],
         "output": T.get("output.weight", T["token_embd.weight"]), "layers": []}
    for i in range(s["layers"]):
        p = f"blk.{i}."
        m["layers"].append(dict(attn_norm=T[p + "attn_norm.weight"], ffn_norm=T[p + "ffn_norm.weight"],
                                q=unpermute(T[p + "attn_q.weight"], s["heads"]),
                                k=unpermute(T[p + "attn_k.weight"], s["kv_heads"]), v=T[p + "attn_v.weight"],
                                o=T[p + "attn_output.weight"], gate=T[p + "ffn_gate.weight"], up=T[p + "ffn_up.weight"],
                                down=T[p + "ffn_down.weight"]))
    vocab = dict(tokens=[str(bytes(f["tokenizer.ggml.tokens"].parts[i]), "utf-8", "replace") for i in f["tokenizer.ggml.tokens"].data],
                 scores=[float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data],
                 types=[int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data])
    return s, m, vocab


def main():
    out, gguf_py = sys.argv[1], sys.argv[2]
    only = "a,b,c"
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1]
    shared = os.environ.get("MAXTEXT_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    sys.path.insert(0, gguf_py)
    import gguf
    for key in only.split(","):
        d = os.path.join(out, key)
        if os.path.exists(os.path.join(d, "meta.json")):
            continue
        os.makedirs(d, exist_ok=True)
        vocab = None
        if key == "a":
            src = os.path.join(shared, "models", "stories260K", "stories260K.gguf")
            if not os.path.exists(src):
                print(f"make_models: {src} not found; skipping model a", file=sys.stderr)
                continue
            s, m, vocab = stories260k(gguf, src)
        elif "arch" in SHAPES[key]:
            s = dict(SHAPES[key])
            print(f"make_models: writing model {key} ({s['name']}, {s['arch']}) to {d}", file=sys.stderr, flush=True)
            for ft in ["f32", "f16", "q8_0"]:
                write_gguf_arch(gguf, os.path.join(d, f"model-{ft}.gguf"), s, ft, seed={"d": 3, "e": 30, "f": 300}[key])
            E, A, H = s.get("experts", 1), s.get("top_k", 1), s["head_dim"]
            per_layer = s["dim"] * H * (2 * s["heads"] + 2 * s["kv_heads"])
            s["active_params"] = s["layers"] * (per_layer + 3 * s["dim"] * s["hidden"] * A) + s["vocab"] * s["dim"]
            s["params"] = s["layers"] * (per_layer + 3 * s["dim"] * s["hidden"] * E) + s["vocab"] * s["dim"]
            if s["arch"] == "qwen3next":  # 3 of 4 layers DeltaNet, q with its gate, shared expert, untied head
                D, Dh = s["dim"], s["gdn_d"]
                gdn = D * Dh * (2 * s["gdn_hk"] + 3 * s["gdn_hv"]) + 2 * D * s["gdn_hv"]
                att = D * H * (3 * s["heads"] + 2 * s["kv_heads"])
                n_att = s["layers"] // s["full_every"]
                mix = (s["layers"] - n_att) * gdn + n_att * att
                s["active_params"] = mix + s["layers"] * 3 * D * s["hidden"] * (A + 1) + 2 * s["vocab"] * D
                s["params"] = mix + s["layers"] * 3 * D * s["hidden"] * (E + 1) + 2 * s["vocab"] * D
            s["gguf"] = ["f32", "f16", "q8_0"]
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump(s, f, indent=1)
            continue
        else:
            s = dict(SHAPES[key])
            m = seeded(s, seed={"b": 110, "c": 1000}[key])
        print(f"make_models: writing model {key} ({s['name']}) to {d}", file=sys.stderr, flush=True)
        write_safetensors(os.path.join(d, "model.safetensors"), maxtext_tensors(m, s))
        ftypes = ["f32", "f16"] + (["q8_0"] if s["hidden"] % 32 == 0 and s["dim"] % 32 == 0 else [])
        for ft in ftypes:
            write_gguf(gguf, os.path.join(d, f"model-{ft}.gguf"), m, s, ft, vocab)
        s["gguf"] = ftypes
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(s, f, indent=1)


if __name__ == "__main__":
    main()
