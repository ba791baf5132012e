#!/usr/bin/python3
"""Turn one bench/compare run (JSON lines) into ratios: printed, and written to docs/performance.md + a PNG.

  report.py RESULTS.jsonl MODELS_DIR [--doc docs/performance.md --plot docs/performance.png]

Ratios (targets from issue 6):
  decode  tg@512: library tok/s x weight bytes per token / triad bandwidth (>= 0.90), library / llama.cpp (>= 1.05)
  block-quantised files (issue 14): also library tok/s x the file's size / triad bandwidth, the issue's own formula
          ("file bytes / triad bandwidth", >= 0.85 on model c with one thread)
  prefill pp128, pp512: library tok/s / (tokens / OpenBLAS time for the same matrix products) (>= 0.90),
          library / llama.cpp (>= 1.05), library / PyTorch eager f32 (>= 1.4)
Weights compared at equal bytes: f32 vs F32, bf16 vs F16, q8_0 vs Q8_0; "q8_0 int8-act" is the library's Q8_0 with
8-bit activations (cpu::Options::int8_activations, llama.cpp's own arithmetic) against the same llama.cpp Q8_0 run.
Any other weights label (q4_k_m, q4_0, q6_k, ...) is a block-quantised file MODELS_DIR/<model>/model-<label>.gguf that
llama-quantize made and both programs read; its rows come in the same two variants ("maxtext" exact, "maxtext-int8act"),
and its weight bytes per token are the sizes of the file's tensors, read from its GGUF header (gguf_tensor_bytes).
Those files get two decode rooflines: the strict one (the tensors a step reads: file_bytes_per_token) and issue 14's
(the whole file: every tensor, the token-embedding table and the header included), which the issue's target is on.
The hand-written analysis is bench/performance_notes.md, appended to the generated page.
"""
import functools
import json
import os
import struct
import sys
from collections import defaultdict

TARGETS = dict(roofline=0.90, llama=1.05, openblas=0.90, torch=1.4)
# Issue 14's decode target for the block-quantised files: file size / triad bandwidth, model c, one thread.
FILE_ROOFLINE_TARGET = 0.85
BYTES = {"f32": 4.0, "bf16": 2.0, "q8_0": 34.0 / 32.0}
GGUF_NAME = {"f32": "F32", "bf16": "F16", "q8_0": "Q8_0"}
# Rows of the table: (label, the library's impl name in the results, weights); the block-quantised types found in the
# results are appended in main(), each as an exact and an int8-act row.
VARIANTS = [("f32", "maxtext", "f32"), ("bf16", "maxtext", "bf16"), ("q8_0", "maxtext", "q8_0"),
            ("q8_0 int8-act", "maxtext-int8act", "q8_0")]


@functools.lru_cache(maxsize=None)
def gguf_tensor_bytes(path):
    """{tensor name: bytes of its data} from a GGUF (v2/v3) file's header: each tensor runs from its offset to the next
    tensor's (alignment padding included, under 32 bytes), the last one to the end of the file. No type tables
    needed, so every llama-quantize type (K-quants, IQ types, the fallbacks it picks per tensor) is covered."""
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as fh:
        def take(fmt):
            n = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, fh.read(n))[0]

        def string():
            return fh.read(take("Q"))

        def value(t):
            if t in scalar:
                return take(scalar[t])
            if t == 8:
                return string()
            if t == 9:
                et, n = take("I"), take("Q")
                if et in scalar:  # skip the numbers without unpacking them
                    fh.seek(n * struct.calcsize("<" + scalar[et]), 1)
                    return None
                return [value(et) for _ in range(n)]
            raise ValueError(f"GGUF value type {t}")

        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version = take("I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version}")
        n_tensors, n_kv = take("Q"), take("Q")
        alignment = 32
        for _ in range(n_kv):
            key, t = string(), take("I")
            v = value(t)
            if key == b"general.alignment":
                alignment = v
        offsets = {}
        for _ in range(n_tensors):
            name = string().decode()
            n_dims = take("I")
            fh.seek(8 * n_dims + 4, 1)  # dims, type
            offsets[name] = take("Q")
        start = -(-fh.tell() // alignment) * alignment
        size = os.fstat(fh.fileno()).st_size
    order = sorted(offsets, key=offsets.get)
    ends = [offsets[n] for n in order[1:]] + [size - start]
    return {n: e - offsets[n] for n, e in zip(order, ends)}


def file_bytes_per_token(path):
    """Weight bytes one decode step reads from a llama GGUF: every tensor but the token-embedding table (one row of it
    per token) unless the file has no separate output matrix (tied embeddings: the table is the logits' matrix).
    Norm vectors are counted (negligible). If the header cannot be read: the whole file, metadata included."""
    try:
        t = gguf_tensor_bytes(path)
    except (OSError, ValueError, OverflowError, MemoryError, struct.error) as e:
        print(f"report: {path}: {e}; using the file size as weight bytes per token", file=sys.stderr)
        return float(os.path.getsize(path))
    return float(sum(b for n, b in t.items() if n != "token_embd.weight" or "output.weight" not in t))


def file_size(meta, w):
    """Bytes of the block-quantised file MODELS_DIR/<model>/model-<w>.gguf (issue 14's "file bytes"); None for the
    f32 / bf16 / q8_0 labels (their roofline counts the model's parameters) or when the file is missing."""
    if w in BYTES:
        return None
    path = os.path.join(meta["dir"], f"model-{w}.gguf")
    return float(os.path.getsize(path)) if os.path.exists(path) else None


def weight_bytes_per_token(meta, w):
    if w not in BYTES:  # a block-quantised file (llama-quantize): its own tensors' sizes
        path = os.path.join(meta["dir"], f"model-{w}.gguf")
        return file_bytes_per_token(path) if os.path.exists(path) else None
    if "active_params" in meta:  # models d, e (make_models.py): Gemma 3's head_dim, the MoE's top-k experts
        return meta["active_params"] * BYTES[w]
    D, F, N, K, L, V = meta["dim"], meta["hidden"], meta["heads"], meta["kv_heads"], meta["layers"], meta["vocab"]
    H = D // N
    per_layer = D * N * H + 2 * D * K * H + N * H * D + 3 * D * F
    return (per_layer * L + V * D) * BYTES[w]


def kv_bytes_per_token(meta, elem_bytes, depth):
    """KV-cache bytes one decode step at cache depth `depth` reads (every cached key and value row of every layer), for
    the dense Llama-shaped models (a, b, c); None for the others (sliding windows, MLA and MoE layouts differ)."""
    if "active_params" in meta or not all(k in meta for k in ("dim", "heads", "kv_heads", "layers")):
        return None
    H = meta["dim"] // meta["heads"]
    return 2.0 * meta["layers"] * meta["kv_heads"] * H * elem_bytes * depth


def roofline_with_kv(tok_s, n_steps, meta, elem_bytes, weight_bytes, bandwidth):
    """Decode / roofline counting the weight bytes and the KV cache's: the n_steps decode steps after the 512-token
    prompt run at depths 512 .. 512 + n - 1 (the mean depth is used) and read the cache at elem_bytes per value.
    None where a number is missing."""
    kv = kv_bytes_per_token(meta, elem_bytes, 512 + ((n_steps or 1) - 1) / 2)
    return tok_s * (weight_bytes + kv) / bandwidth if tok_s and weight_bytes and kv and bandwidth else None


def main():
    args = sys.argv[1:]
    res_path, models_dir = args[0], args[1]
    doc = args[args.index("--doc") + 1] if "--doc" in args else None
    plot = args[args.index("--plot") + 1] if "--plot" in args else None
    rows = [json.loads(l) for l in open(res_path) if l.strip().startswith("{")]
    env = next((r for r in rows if r.get("kind") == "env"), {})
    env_end = next((r for r in rows if r.get("kind") == "env_end"), {})
    # Limits measured several times in the run (the machine is shared): the best of each is the machine's limit.
    bw, sg, peak = {}, {}, {}
    for r in rows:
        if r.get("kind") == "triad":
            bw[r["threads"]] = max(bw.get(r["threads"], 0.0), r["bytes_per_s"])
        elif r.get("kind") == "sgemm":
            sg[r["threads"]] = max(sg.get(r["threads"], 0.0), r["flops_per_s"])
        elif r.get("kind") == "fma_peak":
            peak[r["threads"]] = max(peak.get(r["threads"], 0.0), r["flops_per_s"])
    mg = {(r["model"], r["threads"], r["tokens"]): r for r in rows if r.get("kind") == "model_gemm"}
    metas = {}
    for k in sorted(os.listdir(models_dir)):
        p = os.path.join(models_dir, k, "meta.json")
        if os.path.exists(p):
            m = json.load(open(p))
            metas[m["name"]] = dict(m, key=k, dir=os.path.join(models_dir, k))
    speed, steps = {}, {}
    quant = []  # block-quantised weights labels (q4_k_m, q4_0, q6_k, ...), in the order the run measured them
    for r in rows:
        if "impl" in r:
            speed[(r["impl"], r["model"], r["weights"], r["threads"], r["test"])] = r["tokens_per_s"]
            steps[(r["impl"], r["model"], r["weights"], r["threads"], r["test"])] = r.get("tokens")
            if r["weights"] not in BYTES and r["weights"] not in quant:
                quant.append(r["weights"])
    variants = VARIANTS + [v for w in quant for v in ((w, "maxtext", w), (f"{w} int8-act", "maxtext-int8act", w),
                                                      (f"{w} int8-act f16 KV", "maxtext-int8act-kvf16", w))]

    def ratio(a, b):
        return a / b if a and b else None

    table = []
    for name, meta in sorted(metas.items(), key=lambda kv: kv[1]["key"]):
        for label, impl, w in variants:
            for t in sorted(bw):
                ours = {x: speed.get((impl, name, w, t, x)) for x in ["pp128", "pp512", "tg@512"]}
                if not any(ours.values()):
                    continue
                # "q8_0-ggml" ("f32-ggml", "f16-ggml"): the file's rows computed in place, against llama.cpp on the
                # same file (the F16 file is llama.cpp's "bf16" run).
                peer = w.split("-")[0]
                peer = "bf16" if peer == "f16" else peer
                llama = {x: speed.get(("llama.cpp", name, peer, t, x)) for x in ours}
                torch = {x: speed.get(("pytorch", name, "f32", t, x)) for x in ours}
                row = dict(model=name, key=meta["key"], weights=w, label=label, impl=impl, threads=t, ours=ours,
                           llama=llama, torch=torch)
                wb = weight_bytes_per_token(meta, peer if peer in BYTES else w)
                row["roofline"] = ours["tg@512"] * wb / bw[t] if ours["tg@512"] and wb and t in bw else None
                row["llama_roofline"] = llama["tg@512"] * wb / bw[t] if llama["tg@512"] and wb and t in bw else None
                # Issue 14's formula for the block-quantised files: the whole file's bytes / triad bandwidth.
                fb = file_size(meta, w)
                row["roofline_file"] = ours["tg@512"] * fb / bw[t] if ours["tg@512"] and fb and t in bw else None
                row["llama_roofline_file"] = (llama["tg@512"] * fb / bw[t]
                                              if llama["tg@512"] and fb and t in bw else None)

                # The same with the KV cache's bytes added, in the cache's own type (the library: the activation
                # type, bf16 for the bf16 model, f16 for the "-kvf16" rows, else f32; llama.cpp: f16).
                row["roofline_kv"] = roofline_with_kv(
                    ours["tg@512"], steps.get((impl, name, w, t, "tg@512")), meta,
                    2.0 if w == "bf16" or impl.endswith("-kvf16") else 4.0, wb, bw.get(t))
                row["llama_roofline_kv"] = roofline_with_kv(
                    llama["tg@512"], steps.get(("llama.cpp", name, peer, t, "tg@512")), meta, 2.0, wb, bw.get(t))
                row["tg_vs_llama"] = ratio(ours["tg@512"], llama["tg@512"])
                for T in (128, 512):
                    x = f"pp{T}"
                    g = mg.get((name, t, T))
                    blas_tok_s = T / g["seconds"] if g else None
                    row[f"{x}_vs_openblas"] = ratio(ours[x], blas_tok_s)
                    row[f"{x}_vs_llama"] = ratio(ours[x], llama[x])
                    row[f"{x}_vs_torch"] = ratio(ours[x], torch[x]) if w == "f32" else None
                    row[f"{x}_llama_vs_openblas"] = ratio(llama[x], blas_tok_s)
                table.append(row)

    def f(v, target=None):
        if v is None:
            return "–"
        s = f"{v:.2f}"
        if target is not None:
            s += " ✓" if v >= target else " ✗"
        return s

    lines = []
    hdr = ("| model | weights (llama.cpp) | threads | decode / roofline | decode / roofline, file size | "
           "decode / llama.cpp | pp128 / OpenBLAS | "
           "pp128 / llama.cpp | pp128 / PyTorch | pp512 / OpenBLAS | pp512 / llama.cpp | pp512 / PyTorch |")
    lines.append(hdr)
    lines.append("|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")
    for r in table:
        targeted = r["key"] in ("b", "c")  # decode targets are set on models b and c
        block_file = r["weights"] not in BYTES
        # Issue 6's roofline target is on the strict column of the f32 / bf16 / q8_0 rows; issue 14's on the file-size
        # column of the block-quantised files, model c, one thread.
        lines.append("| " + " | ".join([
            r["model"], f"{r['label']} ({GGUF_NAME.get(r['weights'], r['weights'].upper())})", str(r["threads"]),
            f(r["roofline"], TARGETS["roofline"] if targeted and not block_file else None),
            f(r["roofline_file"], FILE_ROOFLINE_TARGET if r["key"] == "c" and r["threads"] == 1 else None),
            f(r["tg_vs_llama"], TARGETS["llama"] if targeted else None),
            f(r["pp128_vs_openblas"], TARGETS["openblas"] if targeted else None), f(r["pp128_vs_llama"], TARGETS["llama"]),
            f(r["pp128_vs_torch"], TARGETS["torch"]),
            f(r["pp512_vs_openblas"], TARGETS["openblas"] if targeted else None), f(r["pp512_vs_llama"], TARGETS["llama"]),
            f(r["pp512_vs_torch"], TARGETS["torch"])]) + " |")
    ratio_table = "\n".join(lines)

    abs_lines = ["| model | weights | threads | impl | pp128 tok/s | pp512 tok/s | decode tok/s @512 | decode / roofline | "
                 "decode / roofline with KV reads |",
                 "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        # llama.cpp's and PyTorch's rates appear once, with the first library row that compares with them.
        peers = r["impl"] == "maxtext"
        for impl, d, rf, rk in ((r["impl"], r["ours"], r["roofline"], r["roofline_kv"]),
                                ("llama.cpp", r["llama"] if peers else {}, r["llama_roofline"], r["llama_roofline_kv"]),
                                ("pytorch f32", r["torch"] if peers and r["weights"] == "f32" else {}, None, None)):
            if not d or not any(d.values()):
                continue
            abs_lines.append("| " + " | ".join([r["model"], r["label"], str(r["threads"]), impl] +
                                               [f"{d.get(x):.1f}" if d.get(x) else "–" for x in ("pp128", "pp512", "tg@512")] +
                                               [f(rf), f(rk)]) + " |")
    abs_table = "\n".join(abs_lines)

    limits = []
    for t in sorted(bw):
        limits.append(f"- {t} thread{'s' if t > 1 else ''}: triad bandwidth {bw[t] / 1e9:.1f} GB/s (the best on "
                      f"default and on 2 MiB pages), OpenBLAS sgemm "
                      f"(512x2048x2048) {sg.get(t, 0) / 1e9:.1f} GFLOP/s"
                      + (f", f32 FMA peak {peak[t] / 1e9:.1f} GFLOP/s" if t in peak else ""))
    cache = [r for r in rows if r.get("kind") == "page_cache"]
    if cache:
        total = sum(r["bytes"] for r in cache)
        pmd = sum(max(r.get("pmd_mapped_bytes", 0), 0) for r in cache)
        limits.append(f"- model files put into the page cache in 2 MiB folios before their runs (bench_limits "
                      f"pagecache): {pmd / max(total, 1):.0%} of their {total / 2**30:.2f} GiB then mapped with 2 MiB "
                      f"pages")
    print(ratio_table)
    print()
    print("\n".join(limits))

    if plot and table:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        # One pair of panels (ratio to llama.cpp, decode roofline) per group of rows: the f32 / bf16 / q8_0 rows, then,
        # when the run had them, the block-quantised files, so neither figure gets too many bars to read.
        groups = [(g, [r for r in table if (r["weights"] in BYTES) == (g == "base")]) for g in ("base", "quant")]
        groups = [(g, rs) for g, rs in groups if rs]
        n = max(len(rs) for _, rs in groups)
        fig, axes = plt.subplots(2 * len(groups), 1, figsize=(max(8, n * 0.6), 8 * len(groups)), squeeze=False)
        width = 0.2
        for j, (g, rs) in enumerate(groups):
            ax0, ax1 = axes[2 * j][0], axes[2 * j + 1][0]
            ax0.sharex(ax1)
            labels = [f"{r['key']} {r['label']} t{r['threads']}" for r in rs]
            xs = range(len(rs))
            for i, (k, lab) in enumerate([("pp128_vs_llama", "prefill 128"), ("pp512_vs_llama", "prefill 512"),
                                          ("tg_vs_llama", "decode @512")]):
                ax0.bar([x + (i - 1) * width for x in xs], [r[k] or 0 for r in rs], width, label=lab)
            if g == "base":  # issue 6's target
                ax0.axhline(1.05, color="k", ls="--", lw=0.8)
            else:  # issue 14's: prefill 1.3x, decode 1.1x
                ax0.axhline(1.3, color="k", ls="--", lw=0.8)
                ax0.axhline(1.1, color="k", ls=":", lw=0.8)
            ax0.axhline(1.0, color="grey", lw=0.5)
            ax0.set_yscale("log")
            ax0.set_ylabel("library / llama.cpp (tok/s, log scale)")
            ax0.legend(fontsize=8)
            ax0.set_title("Speed relative to llama.cpp (native build), same model, weights bytes and threads"
                          if g == "base" else
                          "Block-quantised GGUF files (llama-quantize), read by both programs: relative to llama.cpp")
            if g == "base":
                ax1.bar([x - width / 2 for x in xs], [r["roofline"] or 0 for r in rs], width, label="library")
                ax1.bar([x + width / 2 for x in xs], [r["llama_roofline"] or 0 for r in rs], width, label="llama.cpp")
                ax1.set_ylabel("decode / bandwidth roofline")
            else:  # issue 14's formula (the file's size), and the strict count of the bytes a step reads
                ax1.bar([x - width for x in xs], [r["roofline_file"] or 0 for r in rs], width,
                        label="library: file size / triad (issue 14)")
                ax1.bar(list(xs), [r["roofline"] or 0 for r in rs], width,
                        label="library: bytes a step reads / triad", hatch="//", alpha=0.6)
                ax1.bar([x + width for x in xs], [r["llama_roofline_file"] or 0 for r in rs], width,
                        label="llama.cpp: file size / triad")
                ax1.set_ylabel("decode / bandwidth roofline")
            ax1.axhline(0.9 if g == "base" else FILE_ROOFLINE_TARGET, color="k", ls="--", lw=0.8)
            ax1.legend(fontsize=8)
            ax1.set_xticks(list(xs))
            ax1.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
            ax0.tick_params(labelbottom=False)
            if g == "quant":  # many bars: a thin line between models
                for x in xs:
                    if x and rs[x]["key"] != rs[x - 1]["key"]:
                        for ax in (ax0, ax1):
                            ax.axvline(x - 0.5, color="grey", lw=0.5)
        fig.tight_layout()
        fig.savefig(plot, dpi=110)

    if doc:
        notes_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "performance_notes.md")
        notes = open(notes_path).read() if os.path.exists(notes_path) else ""
        def quant_sizes(m):  # the block-quantised files' weight bytes per token; bits per weight against f32's count
            f32 = weight_bytes_per_token(m, "f32")
            out = []
            for w in quant:
                wb = weight_bytes_per_token(m, w)
                if wb:
                    out.append(f"{w} {wb / 1e6:.1f} MB ({wb * 8 / (f32 / 4):.2f} bits per weight)")
            return f"; block-quantised files, per token: {', '.join(out)}" if out else ""

        models = "\n".join(
            f"- ({m['key']}) {n}: dim {m['dim']}, {m['layers']} layers, {m['heads']}/{m['kv_heads']} heads, hidden "
            f"{m['hidden']}, vocab {m['vocab']}; weight bytes per token (f32) {weight_bytes_per_token(m, 'f32') / 1e6:.0f} MB"
            + quant_sizes(m)
            for n, m in sorted(metas.items(), key=lambda kv: kv[1]["key"]))
        quant_names = ", ".join(GGUF_NAME.get(w, w.upper()) for w in quant)
        quant_note = "" if not quant else f"""
- Block-quantised files ({quant_names}): made once from the F32 file by llama.cpp's own
  `llama-quantize` (with its per-tensor choice of types: Q4_K_M, for one, keeps some matrices in Q6_K) and read by
  both programs. The library computes from the blocks as they lie (`--weight-type ggml`), twice: exact (each block
  decoded to f32 and multiplied with f32 activations) and "int8-act" (activations quantised to 8 bits per 32 values,
  integer dot products with the blocks' quants, the arithmetic llama.cpp uses for these types). Their decode
  roofline counts the file's own tensor bytes (below); a second column has issue 14's formula, the file's size."""
        quant_roofline = "" if not quant else """ For the
block-quantised files the weight bytes per token are the sizes of the file's tensors read from its GGUF header (the
gap from each tensor's offset to the next, so alignment padding, under 32 bytes a tensor, is counted): every tensor
but the token-embedding table, of which a step reads one row (the whole table when the file has no separate output
matrix), norm vectors included; close enough to the bytes a step reads, not exact. The column "file size" has issue
14's formula instead (the whole file's bytes / triad bandwidth, so the embedding table a step does not read counts):
issue 14's target (0.85, model c, one thread) is marked there; the strict column is the harder test and unmarked."""
        try:
            busy = float(str(env.get('load_before', '0')).split()[0]) > 1.5
        except ValueError:
            busy = True
        load_note = ("other jobs shared the machine: see the notes" if busy
                     else "no other job before the run; after it, the run's own two-thread tests")
        with open(doc, "w") as fo:
            fo.write(f"""# Performance on the CPU

Generated by `bench/compare` (run {env.get('started', '?')}{', quick mode' if env.get('quick') else ''}); the notes
at the end are written by hand from profiles. Ratios only: absolute numbers depend on the machine and its load
and are listed further down for reference.

## Conditions
- CPU: {env.get('cpu', '?')}, {env.get('cores', '?')} cores; load average before / after the run:
  {env.get('load_before', '?')} / {env_end.get('load_after', '?')} ({load_note}).
- Library: `bench_e2e` ({env.get('compiler', '?')}, Release, -march=native), `layers::LlamaDecoderLayer`, reading the
  same GGUF files as llama.cpp (F32; Q8_0 blocks as they are; bf16 = the F32 file rounded at load). KV cache in the
  activation type (f32, or bf16 for the bf16 model). Q8_0 twice: exact (the dequantised weights times f32
  activations, the default) and "int8-act" (`cpu::Options::int8_activations`: activations quantised to 8 bits per
  32-block and integer dot products, the arithmetic llama.cpp uses for its Q8_0 rows).{quant_note}
- llama.cpp: `{os.path.relpath(env.get('llama_bench', '?'), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}`
  built natively (GGML_NATIVE=ON, OpenMP) from the llama.cpp source bundled in node-llama-cpp {env.get('node_llama_cpp', '?')}
  (bundle tag {env.get('llama_cpp_tag', '?')}, commit {env.get('llama_cpp_commit', '?')}); default llama-bench settings
  (f16 KV cache, flash attention auto); GGUF files written from the same arrays.
- PyTorch: Debian python3-torch, eager, f32 on the MaxText-named safetensors of the same arrays, OpenBLAS as the system BLAS, `OMP_WAIT_POLICY=passive`,
  `torch.set_num_threads` = the thread count (bench/torch_bench.py).
- Limits measured in the same run (best of the repeated measurements):
{chr(10).join('  ' + l for l in limits)}

Models (bench/make_models.py):
{models}

Tests: `ppT` = prefill of T tokens into an empty cache (logits of the last token), `decode` = single-token steps
after a 512-token prompt. Decode roofline = weight bytes per token ÷ triad bandwidth (KV cache reads not counted;
the triad is the better of default and 2 MiB pages, as the weights are read through 2 MiB pages).{quant_roofline}
The absolute rates' last column counts the KV cache's bytes too (Llama-shaped models): every cached key and value
row a step reads at its depth (512 and on), in the cache's own type (the library: f32, bf16 for the bf16 model, f16
in the "f16 KV" rows; llama.cpp: f16). At depth 512 model c's f32 cache adds 33 MiB to each step, 7% of the Q4_K_M weight bytes.
Prefill vs OpenBLAS = the library's prefill rate ÷ the rate at which OpenBLAS `cblas_sgemm` alone runs the same
matrix products (every projection at M = T, the logits at M = 1). ✓ / ✗ mark the issue's targets; the decode and
OpenBLAS targets are marked for models b and c only (stories260K lives in the L2 cache, and its prefill is mostly
attention over head_dim 8, not matrix products).

## Ratios

{ratio_table}

![ratios](performance.png)

## Absolute rates (for reference; noisy under load)

{abs_table}

{notes}""")
        print(f"report: wrote {doc}" + (f" and {plot}" if plot else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
