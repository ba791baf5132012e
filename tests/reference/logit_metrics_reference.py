"""Logit comparison measures as MaxText's checkpoint-conversion checker computes them
(tests/utils/forward_pass_logit_checker.py: check_kl_divergence / compare_top_tokens), in PyTorch float64:
  KL per position = F.kl_div(log_softmax(ours), softmax(reference), reduction="none").sum(-1)  (D_KL(P_ref || Q_ours))
  top-k overlap    = |top-k ids of ours ∩ top-k ids of the reference|
Inputs are float32 logits [2, 3, 50]: the reference, and "ours" = reference + noise of growing size per position, so
KL and overlap span several orders of magnitude. Writes tests/fixtures/compare/logit_metrics.npz.
Run: /usr/bin/python3 tests/reference/logit_metrics_reference.py
"""
import os

import numpy as np
import torch
import torch.nn.functional as F

from common import case_dir, rng

K = 5


def main():
    g = rng(11)
    ref = (3.0 * g.standard_normal((2, 3, 50))).astype(np.float32)
    noise = np.array([0.0, 1e-4, 1e-2, 0.1, 0.5, 2.0]).reshape(2, 3, 1)
    ours = (ref + noise * g.standard_normal((2, 3, 50))).astype(np.float32)
    r64, o64 = torch.from_numpy(ref.astype(np.float64)), torch.from_numpy(ours.astype(np.float64))
    kl = F.kl_div(F.log_softmax(o64, dim=-1), F.softmax(r64, dim=-1), reduction="none", log_target=False).sum(-1)
    to = torch.topk(o64, K, dim=-1).indices
    tr = torch.topk(r64, K, dim=-1).indices
    overlap = np.zeros((2, 3), dtype=np.int32)
    top1 = np.zeros((2, 3), dtype=np.bool_)
    for b in range(2):
        for t in range(3):
            overlap[b, t] = len(set(to[b, t].tolist()) & set(tr[b, t].tolist()))
            top1[b, t] = int(to[b, t, 0]) == int(tr[b, t, 0])
    d = case_dir("compare")
    np.savez(os.path.join(d, "logit_metrics.npz"), ours=ours, reference=ref, kl=kl.numpy(), overlap=overlap, top1=top1,
             k=np.array(K, dtype=np.int32))
    print("kl", kl.numpy().ravel(), "overlap", overlap.ravel(), "top1", top1.ravel())


if __name__ == "__main__":
    main()
