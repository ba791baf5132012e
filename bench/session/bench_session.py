#!/usr/bin/env python3
"""bench/session/bench_session.py: what a session file saves (models/session_file.hpp, docs/generation.md).

For each conversation length N: prefill N tokens in a session (Session.generate), save it, load it into a fresh
session of the same model, and check that the next tokens equal the original's. Prints the prefill, save and load
times, the file's size, and prefill / load: how much faster a restored conversation is back than one prefilled
again. Same process, same model, same command: the ratio is what to read; the absolute times are this machine's.

  PYTHONPATH=build/python /usr/bin/python3 bench/session/bench_session.py [--weights FILE] [--lengths 128,512,1024]
      [--threads 2]

Default weights: bench/.models/b/model-f32.gguf (stories110M-shaped, f32; bench/make_models.py makes it).
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

import maxtext_cpp as mc

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--weights", default=os.path.join(here, "..", ".models", "b", "model-f32.gguf"))
ap.add_argument("--lengths", default="128,512,1024")
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()
if not os.path.exists(args.weights):
    sys.exit(f"bench_session: {args.weights} is missing (python3 bench/make_models.py makes it)")

lengths = [int(x) for x in args.lengths.split(",")]
model = mc.Model(weights=args.weights, threads=args.threads)
vocab = model.config["vocab_size"]
rng = np.random.default_rng(0)
rows = []
with tempfile.TemporaryDirectory() as tmp:
    for n in lengths:
        prompt = [int(x) for x in rng.integers(3, int(vocab), n)]
        a = model.new_session(capacity=n + 16)
        first = a.generate(prompt, max_new_tokens=1)
        path = os.path.join(tmp, f"s{n}.mxs")
        t0 = time.perf_counter()
        a.save(path)
        save_s = time.perf_counter() - t0
        b = model.new_session(capacity=n + 16)
        t0 = time.perf_counter()
        b.load(path)
        load_s = time.perf_counter() - t0
        ours = b.generate([5], max_new_tokens=4)
        theirs = a.generate([5], max_new_tokens=4)
        assert ours["tokens"] == theirs["tokens"] and ours["prompt_tokens"] == theirs["prompt_tokens"] == 2
        rows.append({"tokens": n, "prefill_s": first["prefill_seconds"], "save_s": save_s, "load_s": load_s,
                     "file_mb": os.path.getsize(path) / 1e6,
                     "prefill_over_load": first["prefill_seconds"] / load_s})

print(f"model {os.path.basename(args.weights)}, {args.threads} threads")
print("| tokens | prefill s | save s | load s | file MB | prefill / load |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['tokens']} | {r['prefill_s']:.3f} | {r['save_s']:.3f} | {r['load_s']:.3f} | {r['file_mb']:.1f} | "
          f"{r['prefill_over_load']:.1f}x |")
print(json.dumps(rows))
