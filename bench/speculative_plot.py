#!/usr/bin/env python3
"""bench/speculative_plot.py: the plot of docs/performance.md's speculative-decoding section.

  speculative_plot.py --peer bench/.results/speculative-<stamp>.jsonl [more ...]
                      --verify bench/.results/verify-<stamp>.jsonl [more ...] --plot docs/performance-speculative.png

--peer: the results of bench/speculative_peer (one file per model): llama.cpp's speculative decoding, ours and our
plain decoding, tokens/s per thread count (the median of the repetitions), drawn as grouped bars with our speculative
speed over llama.cpp's written above each group.
--verify: bench_speculative's JSON lines (the "verify K+1 @C" rows of one or more runs, each run's lines as printed):
the cost of a verify pass of 1..K+1 rows over one decode step, one line per (file, threads, activations), with the
issue's 1.25x at K + 1 = 5 rows marked.
Needs matplotlib (Debian: python3-matplotlib; bench/compare installs it).
"""
import json
import os
import statistics
import sys
from collections import defaultdict


def read_jsonl(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows.append([json.loads(line) for line in f if line.strip().startswith("{")])
    return rows


def peer_groups(files):
    """[(label, llama t/s, ours spec t/s, ours plain t/s, ours acceptance, llama acceptance)] per model and threads."""
    out = []
    for rows in files:
        env = rows[0]
        for t in sorted({r["threads"] for r in rows[1:]}):
            def pick(kind):
                rs = [r for r in rows[1:] if r["kind"] == kind and r["threads"] == t]
                d = sum(r.get("drafted", 0) for r in rs)
                a = sum(r.get("accepted", 0) for r in rs)
                return statistics.median(r["tokens_per_s"] for r in rs), (a / d if d else 0.0)
            (l, la), (s, sa), (p, _) = pick("llama.cpp"), pick("maxtext-draft"), pick("maxtext-plain")
            label = f"model {env['model']}\n{env['target'].upper()} + {env['draft'].upper()} draft\n{t} thread" + \
                ("s" if t > 1 else "")
            out.append((label, l, s, p, sa, la))
    return out


def verify_lines(files):
    """{(file, threads, activations): [(rows, ratio)]}, rows 1 (the decode step, 1.0) to K + 1."""
    lines = defaultdict(dict)
    for rows in files:
        for r in rows:
            if r.get("impl") != "maxtext" or "ratio_to_decode" not in r:
                continue
            w = os.path.basename(os.path.dirname(r["weights"])) + "/" + os.path.basename(r["weights"]) \
                if r.get("weights") else "seeded f32"
            key = (w, r["threads"], "8-bit activations" if r.get("int8_activations") else "exact")
            lines[key][r["rows"]] = r["ratio_to_decode"]
    return {k: sorted(v.items()) for k, v in lines.items()}


def main(argv):
    def values(flag):
        if flag not in argv:
            return []
        i = argv.index(flag) + 1
        out = []
        while i < len(argv) and not argv[i].startswith("--"):
            out.append(argv[i])
            i += 1
        return out
    for a in argv:
        if a.startswith("--") and a not in ("--peer", "--verify", "--plot"):
            sys.exit(f"speculative_plot: unknown option {a} (expected --peer, --verify, --plot)")
    peer, verify, plot = values("--peer"), values("--verify"), values("--plot")
    if not peer or not verify or len(plot) != 1:
        sys.exit(__doc__)
    groups = peer_groups(read_jsonl(peer))
    lines = verify_lines(read_jsonl(verify))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [max(3, len(groups)), 3]})
    width = 0.26
    for i, (label, l, s, p, sa, la) in enumerate(groups):
        ax.bar(i - width, l, width, color="#999999", label="llama.cpp speculative" if i == 0 else None)
        ax.bar(i, s, width, color="#1f77b4", label="maxtext speculative" if i == 0 else None)
        ax.bar(i + width, p, width, color="#aec7e8", label="maxtext plain" if i == 0 else None)
        ax.text(i, max(l, s, p) * 1.03, f"{s / l:.2f}x llama.cpp\n{s / p:.2f}x plain\naccepted {sa:.0%} / {la:.0%}",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[0] for g in groups], fontsize=8)
    ax.set_ylabel("decode tokens/s (greedy, K = 4 drafts)")
    ax.set_ylim(0, max(max(g[1:4]) for g in groups) * 1.35)
    ax.set_title("speculative decoding against llama.cpp's (llama-speculative-simple)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")

    for (w, t, act), pts in sorted(lines.items()):
        xs = [1] + [r for r, _ in pts]
        ys = [1.0] + [v for _, v in pts]
        bx.plot(xs, ys, marker="o", label=f"{w}, {t} thread{'s' if t > 1 else ''}, {act}")
    bx.axhline(1.25, color="red", linestyle="--", linewidth=1)
    bx.text(3.6, 1.19, "issue 48: 5 rows <= 1.25x", color="red", fontsize=8)
    bx.set_xlabel("rows in the pass (the token and K drafts)")
    bx.set_ylabel("time over one decode step")
    bx.set_title("the verify pass against a decode step (bench_speculative)", fontsize=10)
    bx.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(plot[0], dpi=100)
    print(f"speculative_plot: wrote {plot[0]}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
