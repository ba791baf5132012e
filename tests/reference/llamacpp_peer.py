"""llama.cpp as an independent peer: random-weight F32 GGUF files of every architecture llama.cpp shares with the
library, run through llama.cpp (tests/reference/llamacpp_peer.cpp against libllama), written as fixtures under
tests/fixtures/llamacpp/<arch>/:

  model.gguf     the random model (gguf-py from the llama.cpp source; a tiny SentencePiece-style vocabulary so that
                 llama.cpp loads it as it would a converted checkpoint)
  tokens.npy     int32 [T]: the prompt
  logits.npy     float32 [T + STEPS - 1, V]: llama.cpp's logits for the prompt (one batch, teacher forced), then one
                 row per greedy step (the step decoding greedy[i] gives row T + i)
  greedy.npy     int32 [STEPS]: llama.cpp's greedy tokens (greedy[i] = argmax of row T - 1 + i)
  meta.json      the architecture, sizes, seed, smallest top-1/top-2 gap over the greedy rows, llama.cpp commit
llama4_long/ holds no model: the llama4 model on an 8200-token prompt (past llama.cpp's 8192-position chunk), with
logits_tail.npy = the logits rows from position 8176 on (see run_llama4_long).

Run (from the repository root; llama.cpp built in $LLAMA/build, e.g. /work/peers/llama.cpp):
  PYTHONPATH=$LLAMA/gguf-py /usr/bin/python3 tests/reference/llamacpp_peer.py --llama $LLAMA [--arch gemma2 ...]
The peer program is compiled into --scratch (default /tmp/llamacpp_peer) with g++.

llama.cpp is run on the CPU with one thread, an F32 K/V cache, flash attention off and a full-size SWA cache.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "llamacpp"
PROMPT_LEN = 16
STEPS = 32
VOCAB = 128
MIN_GAP = 2e-3  # reseed when a greedy step's top-1 / top-2 logits are closer than this (a tie is not a test)

# name -> sizes and features. window < PROMPT_LEN + STEPS so that local layers see fewer positions than global ones.
ARCHS = {
    "llama": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=2, tied=False, theta=10000.0),
    "qwen2": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=2, tied=False, theta=1000000.0, qkv_bias=True),
    "qwen3": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=2, tied=True, theta=1000000.0, qk_norm=True),
    "qwen3moe": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=2, tied=True, theta=1000000.0, qk_norm=True,
                     experts=4, top_k=2, ff_exp=32),
    "gemma": dict(D=64, heads=4, kv=1, hd=16, ff=64, layers=2, tied=True, theta=10000.0),
    # rope.freq_base_swa 20000 (Gemma 3 ships 10000): the importer must read the key, not assume the value.
    "gemma3": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=6, tied=True, theta=1000000.0, theta_local=20000.0,
                   window=8, qk_norm=True),
    # sqrt(48) is not a bfloat16 number: MaxText's Gemma 3 embedding scale (bf16-rounded) differs from llama.cpp's.
    "gemma3_d48": dict(arch="gemma3", D=48, heads=4, kv=2, hd=16, ff=32, layers=6, tied=True, theta=1000000.0,
                       theta_local=10000.0, window=8, qk_norm=True),
    "gemma2": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=4, tied=True, theta=10000.0, window=8,
                   attn_softcap=50.0, final_softcap=30.0),
    "olmo2": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=4, tied=False, theta=500000.0, window=8, qk_norm=True),
    "gpt-oss": dict(D=64, heads=4, kv=2, hd=16, ff=32, layers=2, tied=False, theta=150000.0, window=8,
                    experts=4, top_k=2, ff_exp=32, qkv_bias=True),
    # Llama 4: MoE every 2nd layer (top-1, sigmoid-scaled input, shared expert), NoPE every 4th (llama.cpp's fixed
    # step), L2 qk norm (4 experts != 128), Scout's LLaMA-3 scaling as rope_freqs.weight. llama.cpp fixes the chunk
    # at 8192 positions, beyond this fixture's 48.
    "llama4": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=4, tied=False, theta=500000.0, experts=4, top_k=1,
                   ff_exp=32, moe_step=2, llama3_rope=(16.0, 1.0, 1.0, 8192.0)),
    # Qwen3-Next: Gated DeltaNet in layers 0-2, gated full attention (25% partial NEOX RoPE, qk norms) in layer 3;
    # MoE in every layer (softmax top-2 renormalised) plus the sigmoid-gated shared expert. 2 key heads, 4 value heads
    # (each key head serves two value heads); llama.cpp's qwen3next needs Dk = Dv (its state is [Dv, Dv] per head).
    "qwen3next": dict(D=64, heads=4, kv=2, hd=16, ff=32, layers=4, tied=False, theta=1000000.0, experts=4, top_k=2,
                      ff_exp=32, gdn_hk=2, gdn_hv=4, gdn_d=16, gdn_conv=4, full_every=4, rope_frac=0.25),
    # Gemma 4 (31B-like): 5 sliding-window layers (head 16, 2 kv heads) then 1 global (head 32, 1 kv head, K = V: no
    # attn_v), proportional RoPE on the global layer (rope_freqs: 1 for the first 25% of the pairs, 1e30 after),
    # per-layer output scale, final soft cap 30, tied head.
    "gemma4": dict(D=64, heads=4, kv=2, hd=16, ff=64, layers=6, tied=True, theta=1000000.0, theta_local=10000.0,
                   window=8, hd_global=32, kv_global=1, k_eq_v=True, rope_frac_global=0.25, final_softcap=30.0,
                   emb_std=0.1),
    # Gemma 4 MoE (26B-A4B-like): every layer a shared GeGLU MLP plus 4 routed experts (top 2, router scale, per-expert
    # scale, gate and up as one [E, 2F, D] tensor), the global layer with its own v projection.
    "gemma4_moe": dict(arch="gemma4", D=64, heads=4, kv=2, hd=16, ff=64, layers=6, tied=True, theta=1000000.0,
                       theta_local=10000.0, window=8, hd_global=32, kv_global=2, k_eq_v=False, rope_frac_global=0.25,
                       final_softcap=30.0, experts=4, top_k=2, ff_exp=32),
    # Qwen3.5 MoE: Qwen3-Next's layers, but the converter stores the DeltaNet's value heads tiled (value head j at
    # (j % r) * Hk + j / r in attn_qkv's v rows, attn_gate, ssm_beta / ssm_alpha, ssm_a, ssm_dt, the conv's v channels
    # and ssm_out's columns) and beta / alpha as two tensors; interleaved MRoPE sections [1, 1, 0] (text positions).
    # 2 key heads of 4 value heads each (r != Hk: the tiling is not its own inverse).
    "qwen35moe": dict(D=64, heads=4, kv=2, hd=16, ff=32, layers=4, tied=False, theta=1000000.0, experts=4, top_k=2,
                      ff_exp=32, gdn_hk=2, gdn_hv=8, gdn_d=16, gdn_conv=4, full_every=4, rope_frac=0.25,
                      mrope=[1, 1, 0, 0]),
    # DeepSeek-V3 (llama.cpp deepseek2, MLA with kv_b split into attn_k_b / attn_v_b as the converter writes it): q
    # LoRA, 1 dense layer then 2 MoE layers (8 experts in 4 groups, top 2 of the 2 best groups, sigmoid scores with a
    # selection bias, renormalised, scaled by 2.5, one shared expert), YaRN (factor 4 over 16 original positions, so
    # that the 48 positions pass it; mscale_all_dim 1), and one next-n (MTP) layer after the decoder's, which the
    # main graph does not run.
    "deepseek2": dict(D=64, heads=4, kv=1, hd=24, ff=64, layers=3, tied=False, theta=10000.0, q_lora=32, kv_lora=32,
                      nope=16, rope=8, v=16, dense=1, experts=8, top_k=2, ff_exp=32, shared=1, groups=4, groups_used=2,
                      w_scale=2.5, gating=2, bias=True, yarn=(4.0, 16, 1.0), nextn=1),
    # DeepSeek-V2-Lite's shape: no q LoRA (attn_q; q_lora_rank 0), softmax routing without renormalisation or groups, no YaRN
    # (llama.cpp then rotates the interleaved pairs with the plain frequencies).
    "deepseek2_lite": dict(arch="deepseek2", D=64, heads=4, kv=1, hd=24, ff=64, layers=3, tied=False, theta=10000.0,
                           q_lora=0, kv_lora=32, nope=16, rope=8, v=16, dense=1, experts=8, top_k=2, ff_exp=32,
                           shared=2, w_scale=1.0, gating=1, bias=False),
    # Qwen3-Next and Qwen3.5 MoE with their MTP layer as llama.cpp's converter writes it (conversion/qwen.py
    # _QwenMtpMixin): mtp.layers.0 as blk.4 (a full-attention layer with the MoE), mtp.fc / pre_fc_norm_embedding /
    # pre_fc_norm_hidden / norm as blk.4.nextn.eh_proj / enorm / hnorm / shared_head_norm (norms with the 1 added).
    "qwen3next_mtp": dict(arch="qwen3next", D=64, heads=4, kv=2, hd=16, ff=32, layers=4, tied=False, theta=1000000.0,
                          experts=4, top_k=2, ff_exp=32, gdn_hk=2, gdn_hv=4, gdn_d=16, gdn_conv=4, full_every=4,
                          rope_frac=0.25, nextn=1),
    "qwen35moe_mtp": dict(arch="qwen35moe", D=64, heads=4, kv=2, hd=16, ff=32, layers=4, tied=False,
                          theta=1000000.0, experts=4, top_k=2, ff_exp=32, gdn_hk=2, gdn_hv=8, gdn_d=16, gdn_conv=4,
                          full_every=4, rope_frac=0.25, mrope=[1, 1, 0, 0], nextn=1),
}
SEEDS = {a: 1000 + i for i, a in enumerate(ARCHS)}


def llama3_divisors(hd, theta, factor, lo, hi, ctx):
    """rope_freqs.weight as llama.cpp's converter computes it (conversion/llama.py generate_extra_tensors)."""
    out = []
    for i in range(hd // 2):
        wl = 2 * np.pi * theta ** (2 * i / hd)
        if wl < ctx / hi:
            out.append(1.0)
        elif wl > ctx / lo:
            out.append(factor)
        else:
            sm = (ctx / wl - lo) / (hi - lo)
            out.append(1 / ((1 - sm) / factor + sm))
    return np.array(out, dtype=np.float32)


def vocabulary():
    """A SentencePiece-style vocabulary of VOCAB pieces: <unk>, <s>, </s>, the newline byte, then plain pieces."""
    pieces = ["<unk>", "<s>", "</s>", "<0x0A>", "\u2581"]
    pieces += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    pieces += list(".,;:!?'-()0123456789")
    extra = ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te", "of", "ed",
             "is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou", "io", "le", "ve", "co"]
    pieces += extra[: VOCAB - len(pieces)]
    assert len(pieces) == VOCAB, len(pieces)
    types = [2, 3, 3, 6] + [1] * (VOCAB - 4)
    scores = [0.0, 0.0, 0.0, 0.0] + [-float(i) for i in range(VOCAB - 4)]
    return pieces, scores, types


def mat(rng, rows, cols, scale=1.0):
    """A [rows, cols] float32 matrix of normal entries with standard deviation scale / sqrt(cols)."""
    return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)


def norm(rng, n, mean=1.0):
    """A norm scale of n entries around `mean` (relative spread 0.1), float32."""
    return (mean * (1.0 + 0.1 * rng.standard_normal(n))).astype(np.float32)


def random_qwen3next(hp, rng):
    """llama.cpp's qwen3next tensors as its converter writes them (conversion/qwen.py Qwen3NextModel): every norm but
    the gated one with the 1 of Qwen's (1 + w) RMSNorm added, ssm_a = -exp(A_log), dt_bias as ssm_dt.bias, the
    DeltaNet input projection as attn_qkv (rows q | k | v, each head-major) and attn_gate (z), ssm_ba grouped per key
    head ([b, a] of its value heads), the conv kernel [channels, K]. With hp["nextn"], the MTP layer after the
    decoder's: a full-attention layer and its nextn.* tensors."""
    D, N, K, H, V = hp["D"], hp["heads"], hp["kv"], hp["hd"], VOCAB
    Hk, Hv, Dh, Kc = hp["gdn_hk"], hp["gdn_hv"], hp["gdn_d"], hp["gdn_conv"]
    E, Fe = hp["experts"], hp["ff_exp"]
    C = 2 * Hk * Dh + Hv * Dh

    t = {"token_embd.weight": rng.standard_normal((V, D)).astype(np.float32),
         "output_norm.weight": norm(rng, D),
         "output.weight": mat(rng, V, D, 2.0)}
    for i in range(hp["layers"] + hp.get("nextn", 0)):
        b = f"blk.{i}."
        if i >= hp["layers"]:  # the MTP layer
            t[b + "nextn.eh_proj.weight"] = mat(rng, D, 2 * D, 1.5)
            t[b + "nextn.enorm.weight"] = norm(rng, D)
            t[b + "nextn.hnorm.weight"] = norm(rng, D)
            t[b + "nextn.shared_head_norm.weight"] = norm(rng, D)
        t[b + "attn_norm.weight"] = norm(rng, D)
        t[b + "post_attention_norm.weight"] = norm(rng, D)
        if (i + 1) % hp["full_every"] == 0 or i >= hp["layers"]:
            t[b + "attn_q.weight"] = mat(rng, N * 2 * H, D, 2.0)  # per head: the query, then its gate
            t[b + "attn_k.weight"] = mat(rng, K * H, D, 2.0)
            t[b + "attn_v.weight"] = mat(rng, K * H, D)
            t[b + "attn_output.weight"] = mat(rng, D, N * H, 2.0)
            t[b + "attn_q_norm.weight"] = norm(rng, H)
            t[b + "attn_k_norm.weight"] = norm(rng, H)
        else:
            t[b + "attn_qkv.weight"] = mat(rng, C, D, 2.0)
            t[b + "attn_gate.weight"] = mat(rng, Hv * Dh, D, 2.0)
            if hp.get("mrope"):  # qwen35moe
                t[b + "ssm_beta.weight"] = mat(rng, Hv, D, 2.0)
                t[b + "ssm_alpha.weight"] = mat(rng, Hv, D, 2.0)
            else:
                t[b + "ssm_ba.weight"] = mat(rng, 2 * Hv, D, 2.0)
            t[b + "ssm_conv1d.weight"] = (rng.standard_normal((C, Kc)) / np.sqrt(Kc)).astype(np.float32)
            t[b + "ssm_dt.bias"] = (1.0 + 0.3 * rng.standard_normal(Hv)).astype(np.float32)
            t[b + "ssm_a"] = (-np.exp(rng.uniform(-1.0, 1.5, Hv))).astype(np.float32)
            t[b + "ssm_norm.weight"] = norm(rng, Dh)
            t[b + "ssm_out.weight"] = mat(rng, D, Hv * Dh, 2.0)
        t[b + "ffn_gate_inp.weight"] = mat(rng, E, D, 2.0)
        t[b + "ffn_gate_exps.weight"] = np.stack([mat(rng, Fe, D, 1.5) for _ in range(E)])
        t[b + "ffn_up_exps.weight"] = np.stack([mat(rng, Fe, D, 1.5) for _ in range(E)])
        t[b + "ffn_down_exps.weight"] = np.stack([mat(rng, D, Fe, 2.0) for _ in range(E)])
        shexp_gate = (rng.standard_normal(D) / np.sqrt(D)).astype(np.float32)
        # The converter keeps Hugging Face's [1, D] (qwen35moe fixture); a [D] vector loads too (qwen3next fixture).
        t[b + "ffn_gate_inp_shexp.weight"] = shexp_gate.reshape(1, D) if hp.get("mrope") else shexp_gate
        t[b + "ffn_gate_shexp.weight"] = mat(rng, Fe, D, 1.5)
        t[b + "ffn_up_shexp.weight"] = mat(rng, Fe, D, 1.5)
        t[b + "ffn_down_shexp.weight"] = mat(rng, D, Fe, 2.0)
    return t

def random_gemma4(hp, rng):
    """llama.cpp's gemma4 tensors as its converter writes them (conversion/gemma.py Gemma4Model): norms as stored (Gemma
    4's hold the scale itself), router.scale as ffn_gate_inp.scale, router.per_expert_scale as ffn_down_exps.scale,
    layer_scalar as layer_output_scale. The scales are conditioned as in gemma4_reference.py: with no 1/sqrt(head_dim)
    q/k norms of ~0.5 keep the attention softmaxes from amplifying rounding; post-norms of ~1.5 let the layers, not the
    looked-up token (the tied head sees it through the residual), decide the next token."""
    D, N, V, F = hp["D"], hp["heads"], VOCAB, hp["ff"]

    emb = (rng.standard_normal((V, D)) * hp.get("emb_std", 0.2)).astype(np.float32)
    emb = (emb.view(np.uint32) + 0x8000 & 0xFFFF0000).view(np.float32)  # bf16 numbers, as for Gemma 1-3
    hg = hp["hd_global"]
    pairs = int(hg * hp["rope_frac_global"] / 2)
    t = {"token_embd.weight": emb, "output_norm.weight": norm(rng, D),
         "rope_freqs.weight": np.array([1.0] * pairs + [1e30] * (hg // 2 - pairs), dtype=np.float32)}
    for i in range(hp["layers"]):
        b = f"blk.{i}."
        glob = i % 6 == 5
        H, K = (hg, hp["kv_global"]) if glob else (hp["hd"], hp["kv"])
        t[b + "attn_norm.weight"] = norm(rng, D)
        t[b + "attn_q.weight"] = mat(rng, N * H, D, 2.0)
        t[b + "attn_k.weight"] = mat(rng, K * H, D, 2.0)
        if not (glob and hp["k_eq_v"]):
            t[b + "attn_v.weight"] = mat(rng, K * H, D)
        t[b + "attn_output.weight"] = mat(rng, D, N * H, 2.0)
        t[b + "attn_q_norm.weight"] = norm(rng, H, 0.5)
        t[b + "attn_k_norm.weight"] = norm(rng, H, 0.5)
        t[b + "post_attention_norm.weight"] = norm(rng, D, 1.5)
        t[b + "layer_output_scale.weight"] = rng.uniform(0.6, 1.4, 1).astype(np.float32)
        t[b + "ffn_norm.weight"] = norm(rng, D)
        t[b + "ffn_gate.weight"] = mat(rng, F, D, 1.5)
        t[b + "ffn_up.weight"] = mat(rng, F, D, 1.5)
        t[b + "ffn_down.weight"] = mat(rng, D, F, 2.0)
        t[b + "post_ffw_norm.weight"] = norm(rng, D, 1.5)
        if "experts" in hp:
            E, Fe = hp["experts"], hp["ff_exp"]
            t[b + "ffn_gate_inp.weight"] = mat(rng, E, D, 2.0)
            t[b + "ffn_gate_inp.scale"] = norm(rng, D)
            t[b + "pre_ffw_norm_2.weight"] = norm(rng, D)
            t[b + "post_ffw_norm_1.weight"] = norm(rng, D, 1.5)
            t[b + "post_ffw_norm_2.weight"] = norm(rng, D, 1.5)
            t[b + "ffn_gate_up_exps.weight"] = np.stack([mat(rng, 2 * Fe, D, 1.5) for _ in range(E)])
            t[b + "ffn_down_exps.weight"] = np.stack([mat(rng, D, Fe, 2.0) for _ in range(E)])
            t[b + "ffn_down_exps.scale"] = rng.uniform(0.5, 1.5, E).astype(np.float32)
    return t

def random_deepseek2(hp, rng):
    """llama.cpp's deepseek2 tensors as its converter writes them (conversion/deepseek.py DeepseekV2Model): kv_b_proj
    split per head into attn_k_b [heads, kv_lora, nope] (the key rows transposed) and attn_v_b [heads, v, kv_lora],
    the experts stacked, the routing bias as exp_probs_b.bias; the next-n layer (nextn.*) after the decoder's."""
    D, N, V, F = hp["D"], hp["heads"], VOCAB, hp["ff"]
    Q, R, nope, rope, Dv = hp["q_lora"], hp["kv_lora"], hp["nope"], hp["rope"], hp["v"]
    E, Fe, S = hp["experts"], hp["ff_exp"], hp["shared"]

    t = {"token_embd.weight": rng.standard_normal((V, D)).astype(np.float32),
         "output_norm.weight": norm(rng, D),
         "output.weight": mat(rng, V, D, 2.0)}
    for i in range(hp["layers"] + hp.get("nextn", 0)):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = norm(rng, D)
        if Q > 0:
            t[b + "attn_q_a.weight"] = mat(rng, Q, D, 1.5)
            t[b + "attn_q_a_norm.weight"] = norm(rng, Q)
            t[b + "attn_q_b.weight"] = mat(rng, N * (nope + rope), Q, 2.0)
        else:
            t[b + "attn_q.weight"] = mat(rng, N * (nope + rope), D, 2.0)
        t[b + "attn_kv_a_mqa.weight"] = mat(rng, R + rope, D, 1.5)
        t[b + "attn_kv_a_norm.weight"] = norm(rng, R)
        kv_b = mat(rng, N * (nope + Dv), R, 2.0).reshape(N, nope + Dv, R)
        t[b + "attn_k_b.weight"] = np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1))
        t[b + "attn_v_b.weight"] = np.ascontiguousarray(kv_b[:, nope:, :])
        t[b + "attn_output.weight"] = mat(rng, D, N * Dv)
        t[b + "ffn_norm.weight"] = norm(rng, D)
        if i < hp["dense"]:
            t[b + "ffn_gate.weight"] = mat(rng, F, D, 1.5)
            t[b + "ffn_up.weight"] = mat(rng, F, D, 1.5)
            t[b + "ffn_down.weight"] = mat(rng, D, F)
        else:
            t[b + "ffn_gate_inp.weight"] = mat(rng, E, D, 2.0)
            if hp["bias"]:
                t[b + "exp_probs_b.bias"] = (0.3 * rng.standard_normal(E)).astype(np.float32)
            t[b + "ffn_gate_exps.weight"] = np.stack([mat(rng, Fe, D, 1.5) for _ in range(E)])
            t[b + "ffn_up_exps.weight"] = np.stack([mat(rng, Fe, D, 1.5) for _ in range(E)])
            t[b + "ffn_down_exps.weight"] = np.stack([mat(rng, D, Fe) for _ in range(E)])
            t[b + "ffn_gate_shexp.weight"] = mat(rng, Fe * S, D, 1.5)
            t[b + "ffn_up_shexp.weight"] = mat(rng, Fe * S, D, 1.5)
            t[b + "ffn_down_shexp.weight"] = mat(rng, D, Fe * S)
        if i >= hp["layers"]:  # the next-n layer
            t[b + "nextn.eh_proj.weight"] = mat(rng, D, 2 * D, 1.5)
            t[b + "nextn.enorm.weight"] = norm(rng, D)
            t[b + "nextn.hnorm.weight"] = norm(rng, D)
    return t

def random_model(arch, hp, rng):
    """llama.cpp tensor name -> float32 numpy array (row-major; gguf-py reverses the dims to ggml's order)."""
    if arch == "deepseek2":
        return random_deepseek2(hp, rng)
    if arch in ("qwen3next", "qwen35moe"):
        return random_qwen3next(hp, rng)
    if arch == "gemma4":
        return random_gemma4(hp, rng)
    D, N, K, H, F, V = hp["D"], hp["heads"], hp["kv"], hp["hd"], hp["ff"], VOCAB
    gemma = arch.startswith("gemma")

    def vec(n, s=0.1):
        return (s * rng.standard_normal(n)).astype(np.float32)

    # A tied head sees its own input token through the residual stream (x . e_x is ~sqrt(D) times the others):
    # larger attention/MLP outputs keep the greedy path from repeating the last token.
    out = 4.0 if hp["tied"] else 1.0
    # Gemma scales the embedding by sqrt(D); Gemma 2/3 also normalise every sublayer output, so only a small table
    # lets the layers, rather than the input token, decide the next token.
    emb_std = {"gemma": 0.5, "gemma2": 0.2, "gemma3": 0.2}.get(arch, 1.0)
    emb = (rng.standard_normal((V, D)) * emb_std).astype(np.float32)
    if gemma:  # bf16 numbers: MaxText's tied head rounds the (sqrt(D)-scaled) table to bf16; with D = 64 it is exact
        emb = (emb.view(np.uint32) + 0x8000 & 0xFFFF0000).view(np.float32)
    if D == 48:  # +-2^e: the table times bf16(sqrt(48)) = 6.9375 (7 significant bits) is still a bf16 number
        emb = (rng.choice([-1.0, 1.0], (V, D)) * 2.0 ** rng.integers(-4, -1, (V, D))).astype(np.float32)
    t = {"token_embd.weight": emb,
         "output_norm.weight": norm(rng, D)}
    if not hp["tied"]:
        t["output.weight"] = mat(rng, V, D, 2.0)
    for i in range(hp["layers"]):
        b = f"blk.{i}."
        if arch != "olmo2":  # OLMo 2/3: post-norms only
            t[b + "attn_norm.weight"] = norm(rng, D)
        t[b + "attn_q.weight"] = mat(rng, N * H, D, 2.0)
        t[b + "attn_k.weight"] = mat(rng, K * H, D, 2.0)
        t[b + "attn_v.weight"] = mat(rng, K * H, D)
        t[b + "attn_output.weight"] = mat(rng, D, N * H, out)
        if hp.get("qkv_bias"):
            t[b + "attn_q.bias"] = vec(N * H)
            t[b + "attn_k.bias"] = vec(K * H)
            t[b + "attn_v.bias"] = vec(K * H)
        if hp.get("qk_norm"):
            qn, kn = (N * H, K * H) if arch == "olmo2" else (H, H)  # OLMo normalises q/k over all heads
            t[b + "attn_q_norm.weight"] = norm(rng, qn)
            t[b + "attn_k_norm.weight"] = norm(rng, kn)
        if arch in ("gemma2", "gemma3", "olmo2", "gpt-oss"):
            t[b + "post_attention_norm.weight"] = norm(rng, D)
        if arch in ("gemma2", "gemma3", "olmo2"):
            t[b + "post_ffw_norm.weight"] = norm(rng, D)
        if arch == "gpt-oss":
            t[b + "attn_output.bias"] = vec(D)
            t[b + "attn_sinks.weight"] = rng.standard_normal(N).astype(np.float32)
        moe_layer = "experts" in hp and (i + 1) % hp.get("moe_step", 1) == 0
        if moe_layer:
            E, Fe = hp["experts"], hp["ff_exp"]
            t[b + "ffn_gate_inp.weight"] = mat(rng, E, D, 2.0)
            t[b + "ffn_gate_exps.weight"] = np.stack([mat(rng, Fe, D, 1.5) for _ in range(E)])
            t[b + "ffn_up_exps.weight"] = np.stack([mat(rng, Fe, D, 1.5) for _ in range(E)])
            t[b + "ffn_down_exps.weight"] = np.stack([mat(rng, D, Fe, out) for _ in range(E)])
            if arch == "gpt-oss":
                t[b + "ffn_gate_inp.bias"] = vec(E)
                t[b + "ffn_gate_exps.bias"] = np.stack([vec(Fe) for _ in range(E)])
                t[b + "ffn_up_exps.bias"] = np.stack([vec(Fe) for _ in range(E)])
                t[b + "ffn_down_exps.bias"] = np.stack([vec(D) for _ in range(E)])
            else:
                t[b + "ffn_norm.weight"] = norm(rng, D)
            if arch == "llama4":  # the shared expert (width ff_exp)
                t[b + "ffn_gate_shexp.weight"] = mat(rng, Fe, D, 1.5)
                t[b + "ffn_up_shexp.weight"] = mat(rng, Fe, D, 1.5)
                t[b + "ffn_down_shexp.weight"] = mat(rng, D, Fe, out)
        else:
            if arch != "olmo2":
                t[b + "ffn_norm.weight"] = norm(rng, D)
            t[b + "ffn_gate.weight"] = mat(rng, F, D, 1.5)
            t[b + "ffn_up.weight"] = mat(rng, F, D, 1.5)
            t[b + "ffn_down.weight"] = mat(rng, D, F, out)
    if "llama3_rope" in hp:
        t["rope_freqs.weight"] = llama3_divisors(H, hp["theta"], *hp["llama3_rope"])
    return t

def write_gguf(path, arch, hp, tensors):
    import gguf  # from $LLAMA/gguf-py

    w = gguf.GGUFWriter(str(path), arch)
    p = arch + "."
    w.add_string("general.name", f"maxtext-cpp random {arch}")
    w.add_uint32(p + "context_length", 256)
    w.add_uint32(p + "embedding_length", hp["D"])
    w.add_uint32(p + "block_count", hp["layers"] + hp.get("nextn", 0))
    w.add_uint32(p + "feed_forward_length", hp["ff"])
    w.add_uint32(p + "attention.head_count", hp["heads"])
    if arch == "gemma4":  # the keys conversion/gemma.py Gemma4Model.set_gguf_parameters writes
        swa = [i % 6 != 5 for i in range(hp["layers"])]
        w.add_head_count_kv([hp["kv"] if s else hp["kv_global"] for s in swa])
        w.add_key_length(hp["hd_global"])
        w.add_value_length(hp["hd_global"])
        w.add_key_length_swa(hp["hd"])
        w.add_value_length_swa(hp["hd"])
        w.add_sliding_window_pattern(swa)
        w.add_shared_kv_layers(0)
        w.add_embedding_length_per_layer_input(0)
        w.add_rope_dimension_count(hp["hd_global"])
        w.add_rope_dimension_count_swa(hp["hd"])
    elif arch == "deepseek2":  # the keys conversion/deepseek.py DeepseekV2Model.set_gguf_parameters writes
        w.add_uint32(p + "attention.head_count_kv", 1)
        w.add_leading_dense_block_count(hp["dense"])
        w.add_vocab_size(VOCAB)
        # The converter writes q_lora_rank only when the checkpoint has one; llama.cpp then requires it unless the
        # layer count is a known V2-Lite's (27), so the lite fixture states 0 (llama.cpp: attn_q instead of q_a / q_b).
        w.add_q_lora_rank(hp["q_lora"])
        w.add_kv_lora_rank(hp["kv_lora"])
        w.add_key_length(hp["kv_lora"] + hp["rope"])
        w.add_value_length(hp["kv_lora"])
        w.add_key_length_mla(hp["nope"] + hp["rope"])
        w.add_value_length_mla(hp["v"])
        w.add_expert_shared_count(hp["shared"])
        w.add_expert_weights_scale(hp["w_scale"])
        if hp["gating"] == 2:  # norm_topk_prob
            w.add_expert_weights_norm(True)
        w.add_rope_dimension_count(hp["rope"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType(hp["gating"]))
        if "groups" in hp:
            w.add_expert_group_count(hp["groups"])
            w.add_expert_group_used_count(hp["groups_used"])
        if "yarn" in hp:
            factor, orig, mscale_all = hp["yarn"]
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(factor)
            w.add_rope_scaling_orig_ctx_len(orig)
            w.add_rope_scaling_yarn_log_mul(0.1 * mscale_all)
        if hp.get("nextn"):
            w.add_nextn_predict_layers(hp["nextn"])
    else:
        w.add_uint32(p + "attention.head_count_kv", hp["kv"])
        w.add_uint32(p + "attention.key_length", hp["hd"])
        w.add_uint32(p + "attention.value_length", hp["hd"])
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(p + "rope.freq_base", hp["theta"])
    if "theta_local" in hp:
        w.add_float32(p + "rope.freq_base_swa", hp["theta_local"])
    if "window" in hp:
        w.add_uint32(p + "attention.sliding_window", hp["window"])
    if "attn_softcap" in hp:
        w.add_float32(p + "attn_logit_softcapping", hp["attn_softcap"])
    if "final_softcap" in hp:
        w.add_float32(p + "final_logit_softcapping", hp["final_softcap"])
    if "experts" in hp:
        w.add_uint32(p + "expert_count", hp["experts"])
        w.add_uint32(p + "expert_used_count", hp["top_k"])
        w.add_uint32(p + "expert_feed_forward_length", hp["ff_exp"])
    if "moe_step" in hp:
        w.add_uint32(p + "interleave_moe_layer_step", hp["moe_step"])
    if "mrope" in hp:  # Qwen3_5MoeTextModel (_Qwen35MRopeMixin)
        w.add_rope_dimension_sections(hp["mrope"])
    if arch in ("qwen3next", "qwen35moe"):  # the keys conversion/qwen.py Qwen3NextModel.set_gguf_parameters writes
        w.add_uint32(p + "expert_shared_feed_forward_length", hp["ff_exp"])
        w.add_uint32(p + "ssm.conv_kernel", hp["gdn_conv"])
        w.add_uint32(p + "ssm.state_size", hp["gdn_d"])
        w.add_uint32(p + "ssm.group_count", hp["gdn_hk"])
        w.add_uint32(p + "ssm.time_step_rank", hp["gdn_hv"])
        w.add_uint32(p + "ssm.inner_size", hp["gdn_d"] * hp["gdn_hv"])
        w.add_uint32(p + "full_attention_interval", hp["full_every"])
        w.add_uint32(p + "rope.dimension_count", int(hp["hd"] * hp["rope_frac"]))
        if hp.get("nextn"):
            w.add_nextn_predict_layers(hp["nextn"])
    pieces, scores, types = vocabulary()
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", pieces)
    w.add_array("tokenizer.ggml.scores", scores)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    for name, a in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_peer(llama, scratch, prebuilt=None):
    """The peer program, linked against llama.cpp's own build (llama/build/bin), or against `prebuilt`: a directory of
    the same release's prebuilt libraries (node-llama-cpp's @node-llama-cpp/linux-x64/bins/linux-x64, whose CPU
    backends load at run time: LLAMACPP_BACKEND_DIR)."""
    scratch.mkdir(parents=True, exist_ok=True)
    exe = scratch / "llamacpp_peer"
    src = ROOT / "tests" / "reference" / "llamacpp_peer.cpp"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        lib = Path(prebuilt) if prebuilt else llama / "build" / "bin"
        if prebuilt:
            libs = [f"-l:{next(lib.glob(n)).name}" for n in ("libllama.v*.so", "libggml.v*.so", "libggml-base.so")]
        else:
            libs = ["-lllama", "-lggml", "-lggml-base"]
        subprocess.run(["g++", "-O2", "-std=c++17", str(src), "-I", str(llama / "include"), "-I",
                        str(llama / "ggml" / "include"), "-I", str(llama / "src"), "-L", str(lib)] + libs +
                       [f"-Wl,-rpath,{lib}", "-o", str(exe)], check=True)
    if prebuilt:
        os.environ["LLAMACPP_BACKEND_DIR"] = str(prebuilt)
    return exe


def run_arch(name, exe, llama_commit, scratch, seed=None):
    hp = dict(ARCHS[name])
    arch = hp.pop("arch", name)
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    seed = SEEDS[name] if seed is None else seed
    for attempt in range(20):
        rng = np.random.default_rng(seed)
        tensors = random_model(arch, hp, rng)
        prompt = rng.integers(3, VOCAB, size=PROMPT_LEN).astype(np.int32)
        write_gguf(d / "model.gguf", arch, hp, tensors)
        prefix = scratch / name
        subprocess.run([str(exe), str(d / "model.gguf"), str(prefix), str(STEPS)] + [str(int(x)) for x in prompt],
                       check=True, stdout=subprocess.DEVNULL)
        logits = np.fromfile(str(prefix) + ".logits.f32", dtype=np.float32).reshape(PROMPT_LEN + STEPS - 1, VOCAB)
        greedy = np.loadtxt(str(prefix) + ".greedy.txt", dtype=np.int32).reshape(-1)
        rows = logits[PROMPT_LEN - 1:]
        top2 = np.sort(rows, axis=1)[:, -2:]
        gap = float((top2[:, 1] - top2[:, 0]).min())
        distinct = len(set(greedy.tolist()))
        assert (rows.argmax(axis=1) == greedy).all(), "greedy tokens are not the argmax of their rows"
        if gap >= MIN_GAP and distinct >= 2:
            break
        print(f"{arch}: seed {seed}: smallest greedy gap {gap:.2e}, {distinct} distinct tokens; reseeding")
        seed += 100
    else:
        raise RuntimeError(f"{arch}: no seed gives a clear greedy path")
    np.save(d / "tokens.npy", prompt)
    np.save(d / "logits.npy", logits)
    np.save(d / "greedy.npy", greedy.astype(np.int32))
    if hp.get("nextn"):  # llama.cpp's MTP graph: row i predicts token i + 2 (llamacpp_peer.cpp)
        mtp = np.fromfile(str(prefix) + ".mtp.f32", dtype=np.float32).reshape(PROMPT_LEN + STEPS - 2, VOCAB)
        np.save(d / "mtp_logits.npy", mtp)
    meta = {"name": name, "arch": arch, "seed": seed, "prompt_len": PROMPT_LEN, "steps": STEPS, "vocab": VOCAB,
            "min_greedy_gap": gap, "max_abs_logit": float(np.abs(logits).max()), "llama_cpp_commit": llama_commit,
            **{k: v for k, v in hp.items()}}
    (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    size = (d / "model.gguf").stat().st_size
    print(f"{name}: seed {seed}, {size / 1024:.0f} KiB, greedy {greedy.tolist()}, min gap {gap:.3g}, "
          f"|logit| <= {meta['max_abs_logit']:.2f}")


# llama4 past llama.cpp's fixed 8192-position attention chunk: the llama4 fixture's model on a prompt of 8200 tokens.
# Positions 8192.. start a new chunk on the RoPE layers (they no longer see the first 8192 tokens), and the NoPE
# layer's temperature-tuning factor 1 + 0.1 ln(floor((pos + 1) / 8192) + 1) leaves 1 from position 8191 on; neither
# shows in the 48-token fixture. Only the rows from LONG_TAIL_FROM on are kept (the whole logits would be 4 MiB).
LONG_PROMPT = 8200
LONG_STEPS = 8
LONG_TAIL_FROM = 8176


def run_llama4_long(exe, llama_commit, scratch):
    model = OUT / "llama4" / "model.gguf"
    if not model.exists():
        raise RuntimeError("llama4_long needs the llama4 fixture's model: run --arch llama4 first")
    d = OUT / "llama4_long"
    d.mkdir(parents=True, exist_ok=True)
    seed = 4200
    for attempt in range(20):
        rng = np.random.default_rng(seed)
        prompt = rng.integers(3, VOCAB, size=LONG_PROMPT).astype(np.int32)
        prefix = scratch / "llama4_long"
        subprocess.run([str(exe), str(model), str(prefix), str(LONG_STEPS)] + [str(int(x)) for x in prompt],
                       check=True, stdout=subprocess.DEVNULL)
        logits = np.fromfile(str(prefix) + ".logits.f32", dtype=np.float32).reshape(LONG_PROMPT + LONG_STEPS - 1,
                                                                                     VOCAB)
        greedy = np.loadtxt(str(prefix) + ".greedy.txt", dtype=np.int32).reshape(-1)
        rows = logits[LONG_PROMPT - 1:]
        top2 = np.sort(rows, axis=1)[:, -2:]
        gap = float((top2[:, 1] - top2[:, 0]).min())
        assert (rows.argmax(axis=1) == greedy).all(), "greedy tokens are not the argmax of their rows"
        if gap >= MIN_GAP and len(set(greedy.tolist())) >= 2:
            break
        print(f"llama4_long: seed {seed}: smallest greedy gap {gap:.2e}; reseeding")
        seed += 100
    else:
        raise RuntimeError("llama4_long: no seed gives a clear greedy path")
    tail = logits[LONG_TAIL_FROM:]
    np.save(d / "tokens.npy", prompt)
    np.save(d / "logits_tail.npy", tail)
    np.save(d / "greedy.npy", greedy.astype(np.int32))
    meta = {"name": "llama4_long", "arch": "llama4", "model": "../llama4/model.gguf", "seed": seed,
            "prompt_len": LONG_PROMPT, "steps": LONG_STEPS, "tail_from": LONG_TAIL_FROM, "vocab": VOCAB,
            "min_greedy_gap": gap, "max_abs_logit": float(np.abs(tail).max()), "llama_cpp_commit": llama_commit}
    (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"llama4_long: seed {seed}, greedy {greedy.tolist()}, min gap {gap:.3g}, |logit| <= {meta['max_abs_logit']:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", default=os.environ.get("LLAMA", "/work/peers/llama.cpp"))
    ap.add_argument("--scratch", default="/tmp/llamacpp_peer")
    ap.add_argument("--seed", type=int, help="the first seed to try (default: SEEDS)")
    ap.add_argument("--prebuilt", help="link the prebuilt libraries of this directory instead of LLAMA/build/bin")
    ap.add_argument("--arch", action="append", choices=sorted(ARCHS) + ["llama4_long"])
    a = ap.parse_args()
    llama, scratch = Path(a.llama), Path(a.scratch)
    sys.path.insert(0, str(llama / "gguf-py"))
    commit = subprocess.run(["git", "-C", str(llama), "log", "-1", "--format=%H"], capture_output=True, text=True,
                            check=True).stdout.strip()
    exe = build_peer(llama, scratch, a.prebuilt)
    for arch in a.arch or list(ARCHS) + ["llama4_long"]:
        if arch == "llama4_long":
            run_llama4_long(exe, commit, scratch)
        else:
            run_arch(arch, exe, commit, scratch, a.seed)


if __name__ == "__main__":
    main()
