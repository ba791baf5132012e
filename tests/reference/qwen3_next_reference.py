"""MaxText's qwen3_next decoder block (Qwen3-Next: Gated DeltaNet + gated full attention + MoE with a sigmoid-gated
shared expert), re-stated in PyTorch float64 from float32 inputs and weights.

Source read: MaxText e591f30, src/maxtext/models/qwen3.py (Qwen3NextGatedDeltaNet, Qwen3NextFullAttention,
Qwen3NextSparseMoeBlock, Qwen3NextDecoderLayer, Qwen3NextScannableBlock, jax_chunk_gated_delta_rule,
jax_ar_gated_delta_rule, naive_jax_chunk_gated_delta_rule), layers/attentions.py (is_qwen3_hybrid paths),
layers/normalizations.py (RMSNorm scale_offset, Qwen3NextRMSNorm, Qwen3NextRMSNormGated, l2norm), layers/embeddings.py
(PartialRotaryEmbedding), layers/moe.py (get_topk), layers/decoders.py, inference/kvcache.py (is_gdn), configs/types.py
(class Qwen3Next, validation), configs/models/qwen3-next-80b-a3b.yml, and the checkpoint converters
(checkpoint_conversion/standalone_scripts/convert_qwen3_next_{un,}scanned.py) for the parameter paths. Line numbers
below are qwen3.py's unless named otherwise. Written from that math, not from any C++ code.

Notation: D emb_dim; Hk gdn_num_key_heads, Hv gdn_num_value_heads (r = Hv / Hk, must divide), Dk gdn_key_head_dim,
Dv gdn_value_head_dim, Kc gdn_conv_kernel_dim; key_dim = Hk*Dk, value_dim = Hv*Dv, conv_dim = 2*key_dim + value_dim;
N / K / H query heads / kv heads / head_dim of full attention; E experts, k per token, F moe_mlp_dim.

Layer kind (l.1318): layer i (global index when unscanned, i within the cycle when scanned, the same thing because the
scan period is the cycle) is FULL ATTENTION iff (i + 1) % inhomogeneous_layer_cycle_interval == 0, else Gated DeltaNet.
Every layer has the MoE block (decoder_sparse_step is not read).

Decoder layer (l.1349-1418):  h = x + Mix(RMSNorm1p_in(x));  out = h + MoE(RMSNorm1p_post(h)).
  RMSNorm1p (Qwen3NextRMSNorm = RMSNorm with scale_offset 1, scale initialised to 0):
  x * rsqrt(mean(x^2) + eps) * (1 + w), eps = normalization_layer_epsilon. The final norm decoder.decoder_norm.scale
  is the same (1 + w) form (decoders.py Qwen3NextRMSNormLinen); logits = norm(x) @ decoder.logits_dense.kernel [D, V];
  no embedding scaling.

Gated DeltaNet (prefix attention.), parameters [in..., out...]:
  in_proj_qkvz.kernel [D, 2*key_dim + 2*value_dim]   in_proj_ba.kernel [D, 2*Hv]     conv1d.kernel [Kc, 1, conv_dim]
  A_log [Hv]   dt_bias [Hv]   norm.rms_norm.scale [Dv] (plain scale, init 1)          out_proj.kernel [value_dim, D]
  1. qkvz = x @ in_proj_qkvz, viewed [B,T,Hk, 2Dk + 2rDv] PER KEY-HEAD GROUP and split (l.632-641) into
     q = [..., 0:Dk], k = [..., Dk:2Dk], v = [..., 2Dk:2Dk+rDv], z = [..., 2Dk+rDv:]; v, z viewed [B,T,Hv,Dv]
     (value head hv = hk*r + j). ba = x @ in_proj_ba viewed [B,T,Hk,2r]: b = [..., :r], a = [..., r:] -> [B,T,Hv].
  2. conv input qkv = concat(q flat [key_dim], k flat [key_dim], v flat [value_dim]) (l.781): channel order
     [q heads | k heads | v heads], NOT the fused group order. Depthwise causal conv (flax cross-correlation,
     l.824-830): y[t,c] = sum_{i<Kc} x[t-(Kc-1)+i, c] * conv1d.kernel[i,0,c] (x = 0 before the sequence, or the
     cached conv state), no bias, then SiLU; split back into q [B,T,Hk,Dk], k [B,T,Hk,Dk], v [B,T,Hv,Dv].
  3. beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)  (l.848-850; g is a log-decay, < 0).
  4. q, k repeated to Hv heads with jnp.repeat (value head hv reads key head hv // r, l.862); inside the kernel
     (use_qk_norm_in_gdn, default true): q, k <- x * rsqrt(sum(x^2) + 1e-6) (l2norm, eps fixed 1e-6, not the config
     eps), THEN q *= Dk^-0.5 (l.205-218). A constant factor on q scales o per head and token, which step 6's RMSNorm
     all but cancels: the layer fixture's core.npy (the delta-rule output) is what pins this scale.
  5. Delta rule per value head on a state S [Dk, Dv] (zero at the start of a sequence):
        S <- exp(g_t) S;  u_t = beta_t (v_t - k_t^T S);  S <- S + k_t u_t^T;  o_t = q_t^T S       (o_t [Dv])
     This token-by-token recurrence is the ground truth here. MaxText's prefill/train path computes it chunked
     (jax_chunk_gated_delta_rule, chunk gdn_chunk_size, WY form with A = (I + strict_tril(beta k k^T e^{gdiff}))^-1)
     and decode with jax_ar_gated_delta_rule (one step of the recurrence); both are re-stated below and asserted
     equal to the recurrence (to 1e-10; ~1e-15 seen), as is naive_jax_chunk_gated_delta_rule.
  6. y = RMSNorm(o over Dv, eps = normalization_layer_epsilon) * norm.rms_norm.scale * silu(z) (Qwen3NextRMSNormGated,
     plain scale, NOT 1 + w); out = y.reshape(value_dim) @ out_proj.kernel.
  Decode cache (kvcache.py is_gdn): recurrent state [B, Hv, Dk, Dv] (cached_prefill_key) and conv state
  [B, Kc-1, conv_dim] (cached_prefill_value) = the last Kc-1 PRE-conv qkv rows (channels [q|k|v]), oldest first
  (l.822: concat(conv_state, qkv)[:, -(Kc-1):]). With decoder_segment_ids, k, v and g are zeroed where the id is 0
  (padding only; packed segments do NOT reset the state) and the conv state is taken at the valid length.

Full attention (prefix attention.attention., attentions.Attention with is_qwen3_hybrid):
  query.kernel [D, N, 2H]  key.kernel [D, K, H]  value.kernel [D, K, H]  out.kernel [N*H, D] (2-D)
  query_norm.scale [H]  key_norm.scale [H]   (no biases, attention_bias false)
  q2 = x @ query [B,T,N,2H]; q = q2[..., :H], gate = q2[..., H:] (per head, attentions.py l.1268);
  q, k <- RMSNorm1p over H (Qwen3NextRMSNorm, eps = normalization_layer_epsilon) when use_qk_norm is false (the
  default and the 80B yml; with use_qk_norm true MaxText would take the first branch, a plain-scale RMSNorm,
  attentions.py l.486 vs l.521); partial RoPE on the first rd = int(H * partial_rotary_factor) lanes of every head,
  half-split (rotate_half within those rd lanes), timescale theta^(2i/rd) (denominator rd, not H), theta =
  rope_max_timescale, rope_min_timescale 1, angles formed in float32 as MaxText does (rope_type must stay "default":
  llama3.1 / yarn branches come first in init_rotary_embedding); lanes rd..H pass through (embeddings.py l.509);
  q *= H^-0.5 (query_pre_attn_scalar); causal softmax attention, GQA query head n -> kv head n // (N/K);
  o [B,T,N*H] * sigmoid(gate [B,T,N*H]) @ out.kernel. KV cache: k after norm+RoPE, v, each [B, S, K, H].

MoE (prefix mlp.):  routed_experts.gate.kernel [D, E]  routed_experts.wi_0 / wi_1 [E, D, F]  routed_experts.wo [E, F, D]
  shared_expert.wi_0.kernel / wi_1.kernel [D, F]  shared_expert.wo.kernel [F, D]  shared_expert_gate.kernel [D, 1]
  Routing (moe.py l.747-757, routed_score_func "" and no routed bias): top-k of the raw logits x @ gate, softmax over
  those k logits, then / their sum (norm_topk_prob; a no-op after the softmax); routed = sum_j w_j SwiGLU_e_j(x)
  with SwiGLU(x) = (silu(x wi_0) * (x wi_1)) wo. out = routed + sigmoid(x @ shared_expert_gate) * SwiGLU_shared(x)
  (l.1191). Exactly one shared expert of width moe_mlp_dim, whatever `shared_experts` says (the key is not read).

Config keys: decoder_block qwen3_next; gdn_conv_kernel_dim (4), gdn_key_head_dim (128), gdn_value_head_dim (128),
gdn_num_key_heads (16), gdn_num_value_heads (32), gdn_chunk_size (64; any value gives the same result),
use_qk_norm_in_gdn (true), partial_rotary_factor (1.0 default, 0.25 for Qwen3-Next; int(head_dim * f) must be even),
inhomogeneous_layer_cycle_interval (1 default, 4 for Qwen3-Next), num_experts, num_experts_per_tok, base_moe_mlp_dim,
norm_topk_prob (true), head_dim, base_num_query_heads, base_num_kv_heads, rope_max_timescale (1e7 for the 80B),
normalization_layer_epsilon (1e-6), use_qk_norm (false).

Scanned layout (scan_layers true, Qwen3NextScannableBlock l.1222): decoder.layers.layer_{j}.<leaf> for j < cycle
(note `layer_`, not `layers_`), stacking layers j, j + cycle, ... on axis 1 (param_scan_axis) of every leaf.

Writes tests/fixtures/qwen3_next_{gdn_layer,attn_layer,model}/.
Run: /usr/bin/python3 tests/reference/qwen3_next_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
from common import case_dir, cycle_scanned, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

B, T = 2, 11
LAYER_MARGIN = 0.03  # layer fixtures: routing decisions this far from a tie (bf16 routes like float64)
MODEL_MARGIN = 1e-3
EQUIV_TOL = 1e-10
HF_DIFF = [0.0]


def settings():
    # Dk != Dv and Hv = 2 Hk so that head grouping and state transposition are visible; gdn_chunk_size 4 with T = 11
    # gives three chunks, the last one padded. Contracted widths are multiples of 32 except Dk/Dv/H (per-head ops).
    return dict(D=32, V=64, L=4, cycle=4, eps=1e-6,
                N=4, K=2, H=16, partial=0.25, theta=10000.0,
                Hk=2, Hv=4, Dk=8, Dv=16, Kc=4, chunk=4,
                E=4, k=2, F=32)


def config_keys(c):
    return {"decoder_block": "qwen3_next", "dtype": "float32", "weight_dtype": "float32",
            "base_emb_dim": c["D"], "base_num_query_heads": c["N"], "base_num_kv_heads": c["K"], "head_dim": c["H"],
            "base_mlp_dim": c["F"], "base_moe_mlp_dim": c["F"], "base_num_decoder_layers": c["L"],
            "vocab_size": c["V"], "normalization_layer_epsilon": c["eps"], "num_experts": c["E"],
            "num_experts_per_tok": c["k"], "shared_experts": 1, "norm_topk_prob": True,
            "mlp_activations": ["silu", "linear"], "inhomogeneous_layer_cycle_interval": c["cycle"],
            "gdn_conv_kernel_dim": c["Kc"], "gdn_key_head_dim": c["Dk"], "gdn_value_head_dim": c["Dv"],
            "gdn_num_key_heads": c["Hk"], "gdn_num_value_heads": c["Hv"], "gdn_chunk_size": c["chunk"],
            "use_qk_norm_in_gdn": True, "use_qk_norm": False, "rope_type": "default", "rope_max_timescale": c["theta"],
            "rope_min_timescale": 1, "partial_rotary_factor": c["partial"], "logits_via_embedding": False,
            "scan_layers": False, "max_target_length": 64, "max_prefill_predict_length": 64,
            "enable_dropout": False}


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(yaml_value(e) for e in v) + "]"
    if isinstance(v, float):
        s = repr(v)
        if "e" in s and "." not in s.split("e")[0]:  # YAML 1.1 floats need a dot in the mantissa
            m, e = s.split("e")
            s = f"{m}.0e{e}"
        return s
    return str(v)


def write_config(d, cfg, title):
    with open(os.path.join(d, "config.yml"), "w") as f:
        f.write(f"# {title} (qwen3_next_reference.py; MaxText keys)\n")
        for key, v in cfg.items():
            f.write(f"{key}: {yaml_value(v)}\n")


def is_full_attention(i, c):
    return (i + 1) % c["cycle"] == 0


# ----------------------------------------------------------------------------------------------------------------
# Small pieces

def silu(x):
    return x * torch.sigmoid(x)


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_1p(x, w, eps):
    """Qwen3NextRMSNorm: RMSNorm with scale_offset 1."""
    return rms(x, eps) * (1.0 + w)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def sub(w, p):
    return {k[len(p):]: v for k, v in w.items() if k.startswith(p)}


def prefixed(w, p):
    return {p + k: v for k, v in w.items()}


def to64(w):
    return {k: t64(v) for k, v in w.items()}


# ----------------------------------------------------------------------------------------------------------------
# Gated delta rule: the recurrence (ground truth) and MaxText's three other forms of it.
# q, k [B,T,H,Dk] (already L2-normalised, q already times Dk^-0.5), v [B,T,H,Dv], g, beta [B,T,H].

def delta_rule_recurrent(q, k, v, g, beta, state=None):
    Bn, Tn, Hn, Dk = k.shape
    S = torch.zeros(Bn, Hn, Dk, v.shape[-1]) if state is None else state.clone()
    outs = []
    for t in range(Tn):
        S = S * torch.exp(g[:, t])[..., None, None]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S))
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], u)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(outs, 1), S


def delta_rule_ar_step(q, k, v, g, beta, S):
    """jax_ar_gated_delta_rule (l.367): one token, q/k/v [B,H,D], g/beta [B,H]; returns o [B,H,Dv], new S."""
    ge = torch.exp(g)[..., None]
    kb, vb = k * beta[..., None], v * beta[..., None]
    v_new = vb - torch.einsum("bhk,bhkv->bhv", kb * ge, S)
    o = torch.einsum("bhk,bhkv->bhv", q * ge, S) + (q * k).sum(-1, keepdim=True) * v_new
    return o, S * ge[..., None] + torch.einsum("bhk,bhv->bhkv", k, v_new)


def _pad_time(x, pad):
    if pad == 0:
        return x
    shape = list(x.shape)
    shape[1] = pad
    return torch.cat([x, torch.zeros(shape)], 1)


def delta_rule_chunked(q, k, v, g, beta, C, state=None):
    """jax_chunk_gated_delta_rule (l.187-364) in float64: zero padding to a multiple of C, per chunk the WY form
    A = (I + S)^-1 with S = strict_tril(k_beta k^T * exp(gcum_i - gcum_j)) (solve_triangular), u = A (v beta),
    w = A (k beta exp(gcum)); then a scan over chunks carrying the state h [B,H,Dk,Dv]."""
    Bn, Tn, Hn, Dk = k.shape
    Dv = v.shape[-1]
    pad = (C - Tn % C) % C
    q, k, v, g, beta = (_pad_time(a, pad) for a in (q, k, v, g, beta))
    n = (Tn + pad) // C

    def chunks(x):  # [B, S, H, D] -> [B, n, H, C, D]
        return x.reshape(Bn, n, C, Hn, -1).permute(0, 1, 3, 2, 4)

    def chunks_s(x):  # [B, S, H] -> [B, n, H, C]
        return x.reshape(Bn, n, C, Hn).permute(0, 1, 3, 2)

    qc, kc, vc, gc, bc = chunks(q), chunks(k), chunks(v), chunks_s(g), chunks_s(beta)
    gcum = torch.cumsum(gc, -1)
    kbeta = kc * bc[..., None]
    strict = torch.tril(torch.ones(C, C, dtype=torch.bool), -1)
    gdiff = gcum[..., :, None] - gcum[..., None, :]
    Smat = torch.where(strict, (kbeta @ kc.transpose(-1, -2)) * torch.exp(torch.where(strict, gdiff, torch.zeros(()))),
                       torch.zeros(()))
    eye = torch.eye(C).expand(Smat.shape)
    A = torch.linalg.solve_triangular(eye + Smat, eye, upper=False, unitriangular=True)
    u = A @ (vc * bc[..., None])
    w = A @ (kbeta * torch.exp(gcum)[..., None])
    h = torch.zeros(Bn, Hn, Dk, Dv) if state is None else state.clone()
    lower = torch.tril(torch.ones(C, C, dtype=torch.bool))
    outs = []
    for i in range(n):
        qi, ki, ui, wi, gi = qc[:, i], kc[:, i], u[:, i], w[:, i], gcum[:, i]
        inter = (qi * torch.exp(gi)[..., None]) @ h
        v_new = ui - wi @ h
        gd = gi[..., :, None] - gi[..., None, :]
        att = torch.where(lower, (qi @ ki.transpose(-1, -2)) * torch.exp(torch.where(lower, gd, torch.zeros(()))),
                          torch.zeros(()))
        outs.append(inter + att @ v_new)
        h = h * torch.exp(gi[..., -1])[..., None, None] + \
            (ki * torch.exp(gi[..., -1:] - gi)[..., None]).transpose(-1, -2) @ v_new
    o = torch.stack(outs, 1).permute(0, 1, 3, 2, 4).reshape(Bn, n * C, Hn, Dv)
    return o[:, :Tn], h


def delta_rule_naive_chunked(q, k, v, g, beta, C):
    """naive_jax_chunk_gated_delta_rule (l.62-184): the forward-substitution chunk form (zero initial state)."""
    Bn, Tn, Hn, Dk = k.shape
    Dv = v.shape[-1]
    pad = (C - Tn % C) % C
    q, k, v, g, beta = (_pad_time(a, pad) for a in (q, k, v, g, beta))
    n = (Tn + pad) // C
    tr = lambda x: x.transpose(1, 2)  # noqa: E731  [B,S,H,...] -> [B,H,S,...]
    qc = tr(q).reshape(Bn, Hn, n, C, Dk)
    kc = tr(k).reshape(Bn, Hn, n, C, Dk)
    kb = (tr(k) * tr(beta)[..., None]).reshape(Bn, Hn, n, C, Dk)
    vb = (tr(v) * tr(beta)[..., None]).reshape(Bn, Hn, n, C, Dv)
    gcum = torch.cumsum(tr(g).reshape(Bn, Hn, n, C), -1)
    decay = torch.exp(torch.tril(gcum[..., :, None] - gcum[..., None, :]))
    upper_incl = torch.triu(torch.ones(C, C, dtype=torch.bool), 0)
    att = torch.where(upper_incl, torch.zeros(()), -(kb @ kc.transpose(-1, -2)) * decay)
    for i in range(1, C):
        row = att[..., i, :i].clone()
        att[..., i, :i] = row + (row[..., :, None] * att[..., :i, :i]).sum(-2)
    att = att + torch.eye(C)
    v_intra = att @ vb
    k_cumdecay = att @ (kb * torch.exp(gcum)[..., None])
    S = torch.zeros(Bn, Hn, Dk, Dv)
    upper_strict = torch.triu(torch.ones(C, C, dtype=torch.bool), 1)
    outs = []
    for i in range(n):
        qi, ki, gi = qc[:, :, i], kc[:, :, i], gcum[:, :, i]
        a_i = torch.where(upper_strict, torch.zeros(()), (qi @ ki.transpose(-1, -2)) * decay[:, :, i])
        v_new = v_intra[:, :, i] - k_cumdecay[:, :, i] @ S
        outs.append((qi * torch.exp(gi)[..., None]) @ S + a_i @ v_new)
        S = S * torch.exp(gi[..., -1])[..., None, None] + \
            (ki * torch.exp(gi[..., -1:] - gi)[..., None]).transpose(-1, -2) @ v_new
    o = torch.stack(outs, 2).reshape(Bn, Hn, n * C, Dv)[:, :, :Tn]
    return o.transpose(1, 2), S


def check_delta_rule_forms(q, k, v, g, beta, C, checks):
    """Asserts every MaxText form equals the recurrence; records the max abs differences in `checks`."""
    o_ref, s_ref = delta_rule_recurrent(q, k, v, g, beta)
    diffs = {}
    for size in sorted({C, 64, 3, 5}):
        o, s = delta_rule_chunked(q, k, v, g, beta, size)
        diffs[f"chunked_c{size}_out"] = float((o - o_ref).abs().max())
        diffs[f"chunked_c{size}_state"] = float((s - s_ref).abs().max())
    o, s = delta_rule_naive_chunked(q, k, v, g, beta, C)
    diffs[f"naive_chunked_c{C}_out"] = float((o - o_ref).abs().max())
    diffs[f"naive_chunked_c{C}_state"] = float((s - s_ref).abs().max())
    # Prefill of the first T - 2 tokens (chunked, from a zero state), then two autoregressive steps from its state.
    Tp = q.shape[1] - 2
    o_pre, s = delta_rule_chunked(q[:, :Tp], k[:, :Tp], v[:, :Tp], g[:, :Tp], beta[:, :Tp], C)
    steps = [o_pre]
    for t in range(Tp, q.shape[1]):
        o_t, s = delta_rule_ar_step(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], s)
        steps.append(o_t[:, None])
    diffs["prefill_then_ar_out"] = float((torch.cat(steps, 1) - o_ref).abs().max())
    diffs["prefill_then_ar_state"] = float((s - s_ref).abs().max())
    worst = max(diffs.values())
    assert worst < EQUIV_TOL, f"a MaxText delta-rule form differs from the recurrence by {worst}: {diffs}"
    for key, val in diffs.items():
        checks[key] = max(checks.get(key, 0.0), val)
    return o_ref, s_ref


# ----------------------------------------------------------------------------------------------------------------
# The two token mixers, the MoE block, the decoder layer

def gdn(x, w, c, checks=None):
    """Qwen3NextGatedDeltaNet on x [B,T,D] (already normed). Returns out [B,T,D] and a dict with the core output,
    recurrent state [B,Hv,Dk,Dv] and conv state [B,Kc-1,conv_dim] after the last token."""
    Bn, Tn, _ = x.shape
    Hk, Hv, Dk, Dv, Kc = c["Hk"], c["Hv"], c["Dk"], c["Dv"], c["Kc"]
    r = Hv // Hk
    qkvz = (x @ w["in_proj_qkvz.kernel"]).reshape(Bn, Tn, Hk, 2 * Dk + 2 * r * Dv)
    q0, k0 = qkvz[..., :Dk], qkvz[..., Dk:2 * Dk]
    v0 = qkvz[..., 2 * Dk:2 * Dk + r * Dv].reshape(Bn, Tn, Hv, Dv)
    z = qkvz[..., 2 * Dk + r * Dv:].reshape(Bn, Tn, Hv, Dv)
    ba = (x @ w["in_proj_ba.kernel"]).reshape(Bn, Tn, Hk, 2 * r)
    b, a = ba[..., :r].reshape(Bn, Tn, Hv), ba[..., r:].reshape(Bn, Tn, Hv)

    qkv = torch.cat([q0.reshape(Bn, Tn, -1), k0.reshape(Bn, Tn, -1), v0.reshape(Bn, Tn, -1)], -1)
    conv_in = torch.cat([torch.zeros(Bn, Kc - 1, qkv.shape[-1]), qkv], 1)  # zero conv state at the start
    ker = w["conv1d.kernel"][:, 0, :]  # [Kc, conv_dim]
    conv = sum(conv_in[:, i:i + Tn, :] * ker[i] for i in range(Kc))
    conv_state = conv_in[:, -(Kc - 1):, :]
    qkv = silu(conv)
    kd = Hk * Dk
    q = qkv[..., :kd].reshape(Bn, Tn, Hk, Dk)
    k = qkv[..., kd:2 * kd].reshape(Bn, Tn, Hk, Dk)
    v = qkv[..., 2 * kd:].reshape(Bn, Tn, Hv, Dv)

    beta = torch.sigmoid(b)
    g = -torch.exp(w["A_log"]) * torch.nn.functional.softplus(a + w["dt_bias"])
    q = torch.repeat_interleave(q, r, dim=2)  # jnp.repeat: value head hv reads key head hv // r
    k = torch.repeat_interleave(k, r, dim=2)
    q = l2norm(q) * Dk ** -0.5
    k = l2norm(k)
    if checks is not None:
        o, state = check_delta_rule_forms(q, k, v, g, beta, c["chunk"], checks)
    else:
        o, state = delta_rule_recurrent(q, k, v, g, beta)
    y = rms(o, c["eps"]) * w["norm.rms_norm.scale"] * silu(z)
    out = y.reshape(Bn, Tn, Hv * Dv) @ w["out_proj.kernel"]
    return out, {"core": o, "state": state, "conv_state": conv_state, "g": g, "beta": beta}


def full_attention(x, w, c, pos):
    """attentions.Attention with is_qwen3_hybrid. Returns out [B,T,D] and the cached k [B,T,K,H], v [B,T,K,H]."""
    Bn, Tn, _ = x.shape
    N, K, H = c["N"], c["K"], c["H"]
    q2 = torch.einsum("btd,dnh->btnh", x, w["query.kernel"])
    q, gate = q2[..., :H], q2[..., H:].reshape(Bn, Tn, N * H)
    k = torch.einsum("btd,dkh->btkh", x, w["key.kernel"])
    v = torch.einsum("btd,dkh->btkh", x, w["value.kernel"])
    q = rms_1p(q, w["query_norm.scale"], c["eps"])
    k = rms_1p(k, w["key_norm.scale"], c["eps"])
    rd = int(H * c["partial"])
    # rotates lanes [0, rd), half-split; rest pass. qwen3_5_reference.py passes MaxText's MRoPE (use_mrope) instead.
    rope = c["rope"](rd) if "rope" in c else AR.default_rope(rd, c["theta"])
    q, k = rope(q, pos), rope(k, pos)
    q = q * H ** -0.5
    kr = torch.repeat_interleave(k, N // K, dim=2)
    vr = torch.repeat_interleave(v, N // K, dim=2)
    s = torch.einsum("btnh,bsnh->bnts", q, kr)
    causal = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    p = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
    o = torch.einsum("bnts,bsnh->btnh", p, vr).reshape(Bn, Tn, N * H)
    out = (o * torch.sigmoid(gate)) @ w["out.kernel"]
    return out, {"key": k, "value": v}


def swiglu(x, w0, w1, wo):
    return (silu(x @ w0) * (x @ w1)) @ wo


def moe(x, w, c, margins=None):
    """Qwen3NextSparseMoeBlock on x [B,T,D]."""
    E, k = c["E"], c["k"]
    z = x @ w["routed_experts.gate.kernel"]  # [B,T,E]
    srt = torch.sort(z, -1, descending=True).values
    if margins is not None:
        margins.append(float((srt[..., k - 1] - srt[..., k]).min()))
    vals, idx = torch.topk(z, k, dim=-1)
    wts = torch.softmax(vals, -1)
    wts = wts / wts.sum(-1, keepdim=True)
    routed = torch.zeros_like(x)
    for e in range(E):
        we = (wts * (idx == e)).sum(-1, keepdim=True)
        routed = routed + we * swiglu(x, w["routed_experts.wi_0"][e], w["routed_experts.wi_1"][e],
                                      w["routed_experts.wo"][e])
    shared = swiglu(x, w["shared_expert.wi_0.kernel"], w["shared_expert.wi_1.kernel"], w["shared_expert.wo.kernel"])
    return routed + torch.sigmoid(x @ w["shared_expert_gate.kernel"]) * shared


def decoder_layer(x, w, c, pos, i, margins=None, checks=None):
    hn = rms_1p(x, w["input_layernorm.scale"], c["eps"])
    if is_full_attention(i, c):
        a, extra = full_attention(hn, sub(w, "attention.attention."), c, pos)
    else:
        a, extra = gdn(hn, sub(w, "attention."), c, checks)
    h = x + a
    f = moe(rms_1p(h, w["post_attention_layernorm.scale"], c["eps"]), sub(w, "mlp."), c, margins)
    return h + f, a, f, extra


# ----------------------------------------------------------------------------------------------------------------
# Weights (MaxText names relative to decoder.layers_i)

def gdn_weights(g, c):
    D, Hk, Hv, Dk, Dv, Kc = c["D"], c["Hk"], c["Hv"], c["Dk"], c["Dv"], c["Kc"]
    kd, vd = Hk * Dk, Hv * Dv
    return {"in_proj_qkvz.kernel": f32(g, (D, 2 * kd + 2 * vd), 1 / math.sqrt(D)),
            "in_proj_ba.kernel": f32(g, (D, 2 * Hv), 1 / math.sqrt(D)),
            "conv1d.kernel": f32(g, (Kc, 1, 2 * kd + vd), 0.6),
            # decays exp(g) roughly in [0.2, 0.97]: exp(A_log) in [0.1, 1], softplus(a + dt_bias) around 0.3..1.5
            "A_log": np.log(g.uniform(0.1, 1.0, size=(Hv,))).astype(np.float32),
            "dt_bias": f32(g, (Hv,), 0.5),
            "norm.rms_norm.scale": f32(g, (Dv,), 0.2, 1.0),
            "out_proj.kernel": f32(g, (vd, D), 1 / math.sqrt(vd))}


def attention_weights(g, c):
    D, N, K, H = c["D"], c["N"], c["K"], c["H"]
    return {"query.kernel": f32(g, (D, N, 2 * H), 1 / math.sqrt(D)),
            "key.kernel": f32(g, (D, K, H), 1 / math.sqrt(D)),
            "value.kernel": f32(g, (D, K, H), 1 / math.sqrt(D)),
            "out.kernel": f32(g, (N * H, D), 1 / math.sqrt(N * H)),
            "query_norm.scale": f32(g, (H,), 0.2),  # (1 + w) form: w around 0
            "key_norm.scale": f32(g, (H,), 0.2)}


def moe_weights(g, c):
    D, E, F = c["D"], c["E"], c["F"]
    return {"routed_experts.gate.kernel": f32(g, (D, E), 1 / math.sqrt(D)),
            "routed_experts.wi_0": f32(g, (E, D, F), 1 / math.sqrt(D)),
            "routed_experts.wi_1": f32(g, (E, D, F), 1 / math.sqrt(D)),
            "routed_experts.wo": f32(g, (E, F, D), 1 / math.sqrt(F)),
            "shared_expert.wi_0.kernel": f32(g, (D, F), 1 / math.sqrt(D)),
            "shared_expert.wi_1.kernel": f32(g, (D, F), 1 / math.sqrt(D)),
            "shared_expert.wo.kernel": f32(g, (F, D), 1 / math.sqrt(F)),
            "shared_expert_gate.kernel": f32(g, (D, 1), 1 / math.sqrt(D))}


def layer_weights(g, c, i):
    D = c["D"]
    w = {"input_layernorm.scale": f32(g, (D,), 0.2), "post_attention_layernorm.scale": f32(g, (D,), 0.2)}
    if is_full_attention(i, c):
        w.update(prefixed(attention_weights(g, c), "attention.attention."))
    else:
        w.update(prefixed(gdn_weights(g, c), "attention."))
    w.update(prefixed(moe_weights(g, c), "mlp."))
    return w


def model_weights(g, c):
    w = {"token_embedder.embedding": f32(g, (c["V"], c["D"]))}
    for i in range(c["L"]):
        w.update(prefixed(layer_weights(g, c, i), f"decoder.layers_{i}."))
    w["decoder.decoder_norm.scale"] = f32(g, (c["D"],), 0.2)
    w["decoder.logits_dense.kernel"] = f32(g, (c["D"], c["V"]), 1 / math.sqrt(c["D"]))
    return w


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face: the model fixture's weights under Qwen3NextForCausalLM names, and a forward pass written from
# transformers' modeling_qwen3_next.py (Qwen3NextGatedDeltaNet.fix_query_key_value_ordering, the nn.Conv1d with
# padding K-1 cut to T outputs, Qwen3NextAttention's q_proj view [.., N, 2H] chunked into query and gate,
# Qwen3NextRMSNorm (1 + w), Qwen3NextRMSNormGated, Qwen3NextSparseMoeBlock with per-expert Linear layers), apart from
# the MaxText-named functions above. It must reproduce the MaxText model's logits.

def hf_checkpoint(w, c):
    """MaxText-named f32 weights -> Hugging Face names and layouts ([out, in] matrices, conv [C, 1, K])."""
    T = np.transpose
    N, H = c["N"], c["H"]
    hf = {"model.embed_tokens.weight": w["token_embedder.embedding"], "model.norm.weight": w["decoder.decoder_norm.scale"],
          "lm_head.weight": T(w["decoder.logits_dense.kernel"])}
    for i in range(c["L"]):
        h, m = f"model.layers.{i}.", f"decoder.layers_{i}."
        hf[h + "input_layernorm.weight"] = w[m + "input_layernorm.scale"]
        hf[h + "post_attention_layernorm.weight"] = w[m + "post_attention_layernorm.scale"]
        if is_full_attention(i, c):
            a, s = m + "attention.attention.", h + "self_attn."
            hf[s + "q_proj.weight"] = T(w[a + "query.kernel"].reshape(c["D"], N * 2 * H))
            hf[s + "k_proj.weight"] = T(w[a + "key.kernel"].reshape(c["D"], -1))
            hf[s + "v_proj.weight"] = T(w[a + "value.kernel"].reshape(c["D"], -1))
            hf[s + "o_proj.weight"] = T(w[a + "out.kernel"])
            hf[s + "q_norm.weight"] = w[a + "query_norm.scale"]
            hf[s + "k_norm.weight"] = w[a + "key_norm.scale"]
        else:
            a, s = m + "attention.", h + "linear_attn."
            for n in ("in_proj_qkvz", "in_proj_ba", "out_proj"):
                hf[s + n + ".weight"] = T(w[a + n + ".kernel"])
            hf[s + "conv1d.weight"] = np.ascontiguousarray(np.transpose(w[a + "conv1d.kernel"], (2, 1, 0)))
            hf[s + "A_log"] = w[a + "A_log"]
            hf[s + "dt_bias"] = w[a + "dt_bias"]
            hf[s + "norm.weight"] = w[a + "norm.rms_norm.scale"]
        f, o = h + "mlp.", m + "mlp."
        hf[f + "gate.weight"] = T(w[o + "routed_experts.gate.kernel"])
        for e in range(c["E"]):
            for hn, mn in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
                hf[f + f"experts.{e}.{hn}.weight"] = T(w[o + f"routed_experts.{mn}"][e])
        for hn, mn in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
            hf[f + f"shared_expert.{hn}.weight"] = T(w[o + f"shared_expert.{mn}.kernel"])
        hf[f + "shared_expert_gate.weight"] = T(w[o + "shared_expert_gate.kernel"])
    return {k: np.ascontiguousarray(v) for k, v in hf.items()}


def hf_config(c):
    return {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": c["D"],
            "num_hidden_layers": c["L"], "num_attention_heads": c["N"], "num_key_value_heads": c["K"],
            "head_dim": c["H"], "vocab_size": c["V"], "rms_norm_eps": c["eps"], "rope_theta": c["theta"],
            "partial_rotary_factor": c["partial"], "num_experts": c["E"], "num_experts_per_tok": c["k"],
            "norm_topk_prob": True, "moe_intermediate_size": c["F"], "shared_expert_intermediate_size": c["F"],
            "intermediate_size": c["F"], "decoder_sparse_step": 1, "mlp_only_layers": [],
            "linear_conv_kernel_dim": c["Kc"], "linear_key_head_dim": c["Dk"], "linear_value_head_dim": c["Dv"],
            "linear_num_key_heads": c["Hk"], "linear_num_value_heads": c["Hv"],
            "full_attention_interval": c["cycle"], "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False, "rope_scaling": None, "max_position_embeddings": 64,
            "layer_types": ["full_attention" if is_full_attention(i, c) else "linear_attention" for i in range(c["L"])],
            "torch_dtype": "float32"}


def hf_gdn_inputs(h, t, s, hc):
    """Qwen3NextGatedDeltaNet's projections: the fused per-key-head in_proj_qkvz / in_proj_ba, regrouped
    (fix_query_key_value_ordering). Returns the conv input [B, conv_dim, T] (channels q | k | v), z [B,T,nv,dv],
    b and a [B,T,nv]."""
    F = torch.nn.functional
    Bn, Tn, _ = h.shape
    nk, nv, dk, dv = hc["linear_num_key_heads"], hc["linear_num_value_heads"], hc["linear_key_head_dim"], \
        hc["linear_value_head_dim"]
    r = nv // nk
    qkvz = F.linear(h, t[s + "in_proj_qkvz.weight"]).view(Bn, Tn, nk, 2 * dk + 2 * r * dv)
    ba = F.linear(h, t[s + "in_proj_ba.weight"]).view(Bn, Tn, nk, 2 * r)
    q, k, v, z = torch.split(qkvz, [dk, dk, r * dv, r * dv], dim=3)
    b, aa = torch.split(ba, [r, r], dim=3)
    mixed = torch.cat([q.reshape(Bn, Tn, -1), k.reshape(Bn, Tn, -1), v.reshape(Bn, Tn, -1)], -1).transpose(1, 2)
    return mixed, z.reshape(Bn, Tn, nv, dv), b.reshape(Bn, Tn, nv), aa.reshape(Bn, Tn, nv)


def hf_experts(h, t, f, hc):
    """The routed experts' SwiGLUs [E] as callables, from per-expert nn.Linear weights (Qwen3NextSparseMoeBlock)."""
    F = torch.nn.functional
    out = []
    for e in range(hc["num_experts"]):
        ex = f + f"experts.{e}."
        out.append(F.linear(F.silu(F.linear(h, t[ex + "gate_proj.weight"])) * F.linear(h, t[ex + "up_proj.weight"]),
                            t[ex + "down_proj.weight"]))
    return out


def hf_rope_cos_sin(hc, Tn, rd):
    """Qwen3NextRotaryEmbedding: inv_freq over rd lanes, angles position * inv_freq (float64 here)."""
    inv = 1.0 / (hc["rope_theta"] ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)


def hf_forward(hc, t, tokens, prefix="model.", gdn_inputs=hf_gdn_inputs, experts=hf_experts,
               rope_cos_sin=hf_rope_cos_sin, inputs_embeds=None, return_hidden=False):
    """Qwen3NextForCausalLM's forward on HF-named float64 tensors `t` (no cache, no padding). The three hooks are where
    Qwen3.5's layout differs (qwen3_5_reference.py). inputs_embeds [B,T,D] replaces the embedding lookup (tokens then
    give only the shape); return_hidden also returns the last layer's output before {prefix}norm (both used by
    qwen3_next_mtp_reference.py)."""
    F = torch.nn.functional
    D, eps = hc["hidden_size"], hc["rms_norm_eps"]
    N, K, H = hc["num_attention_heads"], hc["num_key_value_heads"], hc["head_dim"]
    nk, nv, dk, dv = hc["linear_num_key_heads"], hc["linear_num_value_heads"], hc["linear_key_head_dim"], \
        hc["linear_value_head_dim"]
    Bn, Tn = tokens.shape

    def norm1p(x, w):  # Qwen3NextRMSNorm
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)

    x = t[prefix + "embed_tokens.weight"][torch.from_numpy(tokens).long()] if inputs_embeds is None else inputs_embeds
    rd = int(H * hc["partial_rotary_factor"])
    cos, sin = rope_cos_sin(hc, Tn, rd)

    def rope(v):  # [B, heads, T, H]: rotate_half on the first rd lanes
        r, p = v[..., :rd], v[..., rd:]
        r1, r2 = r[..., :rd // 2], r[..., rd // 2:]
        return torch.cat([r * cos + torch.cat([-r2, r1], -1) * sin, p], -1)

    for i in range(hc["num_hidden_layers"]):
        p = f"{prefix}layers.{i}."
        h = norm1p(x, t[p + "input_layernorm.weight"])
        if hc["layer_types"][i] == "full_attention":
            s = p + "self_attn."
            q, gate = torch.chunk(F.linear(h, t[s + "q_proj.weight"]).view(Bn, Tn, N, 2 * H), 2, dim=-1)
            q = norm1p(q, t[s + "q_norm.weight"]).transpose(1, 2)
            k = norm1p(F.linear(h, t[s + "k_proj.weight"]).view(Bn, Tn, K, H), t[s + "k_norm.weight"]).transpose(1, 2)
            v = F.linear(h, t[s + "v_proj.weight"]).view(Bn, Tn, K, H).transpose(1, 2)
            q, k = rope(q), rope(k)
            k, v = k.repeat_interleave(N // K, 1), v.repeat_interleave(N // K, 1)
            sc = (q @ k.transpose(-1, -2)) * H ** -0.5
            sc = sc.masked_fill(~torch.tril(torch.ones(Tn, Tn, dtype=torch.bool)), float("-inf"))
            o = (torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(Bn, Tn, N * H)
            a = F.linear(o * torch.sigmoid(gate.reshape(Bn, Tn, N * H)), t[s + "o_proj.weight"])
        else:
            s = p + "linear_attn."
            r = nv // nk
            mixed, z, b, aa = gdn_inputs(h, t, s, hc)
            wconv = t[s + "conv1d.weight"]
            mixed = F.silu(F.conv1d(mixed, wconv, padding=wconv.shape[-1] - 1, groups=mixed.shape[1])[..., :Tn])
            mixed = mixed.transpose(1, 2)
            q, k, v = torch.split(mixed, [nk * dk, nk * dk, nv * dv], dim=-1)
            q, k, v = q.reshape(Bn, Tn, nk, dk), k.reshape(Bn, Tn, nk, dk), v.reshape(Bn, Tn, nv, dv)
            beta = torch.sigmoid(b)
            g = -t[s + "A_log"].exp() * F.softplus(aa + t[s + "dt_bias"])
            q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
            q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * dk ** -0.5
            k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
            S = torch.zeros(Bn, nv, dk, dv)
            outs = []
            for tt in range(Tn):  # torch_recurrent_gated_delta_rule
                S = S * g[:, tt].exp()[..., None, None]
                kv_mem = (S * k[:, tt, :, :, None]).sum(-2)
                delta = (v[:, tt] - kv_mem) * beta[:, tt, :, None]
                S = S + k[:, tt, :, :, None] * delta[:, :, None, :]
                outs.append((S * q[:, tt, :, :, None]).sum(-2))
            o = torch.stack(outs, 1)  # [B, T, nv, dv]
            o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * t[s + "norm.weight"] * F.silu(z)
            a = F.linear(o.reshape(Bn, Tn, nv * dv), t[s + "out_proj.weight"])
        x = x + a
        h = norm1p(x, t[p + "post_attention_layernorm.weight"])
        f = p + "mlp."
        logits = F.linear(h, t[f + "gate.weight"])
        w_all = torch.softmax(logits, -1)
        topw, topi = torch.topk(w_all, hc["num_experts_per_tok"], dim=-1)
        if hc["norm_topk_prob"]:
            topw = topw / topw.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e, ye in enumerate(experts(h, t, f, hc)):
            out = out + (topw * (topi == e)).sum(-1, keepdim=True) * ye
        se = f + "shared_expert."
        shared = F.linear(F.silu(F.linear(h, t[se + "gate_proj.weight"])) * F.linear(h, t[se + "up_proj.weight"]),
                          t[se + "down_proj.weight"])
        x = x + out + torch.sigmoid(F.linear(h, t[f + "shared_expert_gate.weight"])) * shared
    logits = F.linear(norm1p(x, t[prefix + "norm.weight"]), t["lm_head.weight"])
    return (logits, x) if return_hidden else logits


# ----------------------------------------------------------------------------------------------------------------
# Cases

def layer_case(name, i, seed):
    c = settings()
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(400):
        g = rng(seed + 1000 * attempt)
        w = layer_weights(g, c, i)
        x = f32(g, (B, T, c["D"]), 1.0, 0.1)
        margins = []
        checks = {}
        out, a, f, extra = decoder_layer(t64(x), to64(w), c, pos, i, margins, checks)
        if min(margins) >= LAYER_MARGIN:
            break
    else:
        raise RuntimeError(name + ": no seed with clear routing margins")
    d = case_dir(name)
    save_safetensors(f"{d}/weights.safetensors", w)
    save_npy(d, "x", x)
    save_npy(d, "positions", pos)
    save_npy(d, "out", out.numpy())
    save_npy(d, "attn", a.numpy())
    save_npy(d, "mlp", f.numpy())
    cfg = config_keys(c)
    meta = {"what": f"qwen3_next decoder layer {i} ({'full attention' if is_full_attention(i, c) else 'Gated DeltaNet'}"
                    " + MoE with sigmoid-gated shared expert), float64 from float32 inputs",
            "layer_index": i, "config": cfg, "batch": B, "length": T, "min_routing_margin": min(margins),
            "files": {"x": "layer input [B,T,D]", "positions": "[B,T] int32",
                      "out": "layer output [B,T,D]", "attn": "token-mixer output (before the residual) [B,T,D]",
                      "mlp": "MoE block output (before the residual) [B,T,D]"}}
    if is_full_attention(i, c):
        save_npy(d, "cached_key", extra["key"].numpy())
        save_npy(d, "cached_value", extra["value"].numpy())
        meta["files"].update(cached_key="keys after key_norm and partial RoPE [B,T,K,H] (the KV cache content)",
                             cached_value="values [B,T,K,H]")
    else:
        save_npy(d, "state", extra["state"].numpy())
        save_npy(d, "conv_state", extra["conv_state"].numpy())
        save_npy(d, "core", extra["core"].numpy())
        meta["files"].update(
            state="recurrent state after the last token [B,Hv,Dk,Dv] (kvcache cached_prefill_key)",
            conv_state="conv state after the last token [B,Kc-1,conv_dim]: the last Kc-1 pre-conv qkv rows, oldest "
                       "first, channels [q (Hk*Dk) | k (Hk*Dk) | v (Hv*Dv)] (kvcache cached_prefill_value)",
            core="delta-rule output before the gated norm [B,T,Hv,Dv]")
        meta["delta_rule_forms_max_abs_diff_vs_recurrence"] = checks
    save_meta(d, meta)
    write_config(d, cfg, f"qwen3_next layer fixture {name} (layer_index {i})")
    return checks


def model_case(seed, c=None, name="qwen3_next_model", hf_case=None, extra_config=None):
    """The 4-layer model fixture. qwen3_5_reference.py reuses it with its own settings, config keys and Hugging Face
    layout: hf_case(w, c, tokens, logits) -> (hf tensors, config.json dict, max abs diff of the HF forward)."""
    c = c or settings()
    block = name[:-len("_model")]
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    for attempt in range(200):
        g = rng(seed + 1000 * attempt)
        w = model_weights(g, c)
        tokens = g.integers(0, c["V"], size=(B, T)).astype(np.int32)
        w64 = to64(w)
        x = w64["token_embedder.embedding"][torch.from_numpy(tokens).long()]
        acts = {"token_embedder": x}
        states = {}
        margins = []
        checks = {}
        for i in range(c["L"]):
            x, _, _, extra = decoder_layer(x, sub(w64, f"decoder.layers_{i}."), c, pos, i, margins, checks)
            acts[f"decoder.layers_{i}"] = x
            states[i] = extra
        x = rms_1p(x, w64["decoder.decoder_norm.scale"], c["eps"])
        acts["decoder.decoder_norm"] = x
        logits = x @ w64["decoder.logits_dense.kernel"]
        if min(margins) >= MODEL_MARGIN:
            break
    else:
        raise RuntimeError(f"{block} model: no seed with clear routing margins")
    d = case_dir(name)
    save_safetensors(f"{d}/model.safetensors", w)
    save_safetensors(f"{d}/model_scanned.safetensors", cycle_scanned(w, c["cycle"], c["L"], block="layer_"))
    # Hugging Face: the same weights under Qwen3NextForCausalLM names; transformers' forward gives the same logits.
    if hf_case is None:
        hc = hf_config(c)
        hf = hf_checkpoint(w, c)
        hf_logits = hf_forward(hc, {k: t64(v) for k, v in hf.items()}, tokens)
        hf_diff = float((hf_logits - logits).abs().max())
    else:
        hf, hc, hf_diff = hf_case(w, c, tokens, logits)
    HF_DIFF[0] = hf_diff
    # Not 1e-15: MaxText forms the rotary angles in f32 (attention_reference.default_rope), this forward in float64.
    assert hf_diff < 1e-8, f"the Hugging Face forward differs from MaxText's by {hf_diff}"
    os.makedirs(f"{d}/hf", exist_ok=True)
    save_safetensors(f"{d}/hf/model.safetensors", hf, {"format": "pt"})
    with open(f"{d}/hf/config.json", "w") as fh:
        json.dump(hc, fh, indent=1, sort_keys=True)
    save_npy(d, "tokens", tokens)
    save_npy(d, "logits", logits.numpy())
    for k, v in acts.items():
        save_npy(d, "act_" + k, v.numpy())
    for i, extra in states.items():
        if is_full_attention(i, c):
            save_npy(d, f"cached_key_decoder.layers_{i}", extra["key"].numpy())
            save_npy(d, f"cached_value_decoder.layers_{i}", extra["value"].numpy())
        else:
            save_npy(d, f"state_decoder.layers_{i}", extra["state"].numpy())
            save_npy(d, f"conv_state_decoder.layers_{i}", extra["conv_state"].numpy())
    cfg = config_keys(c)
    cfg.update(extra_config or {})
    kinds = ["full_attention" if is_full_attention(i, c) else "gated_deltanet" for i in range(c["L"])]
    save_meta(d, {"what": f"{c['L']}-layer {block} model ({', '.join(kinds)}), float64 from float32 weights",
                  "kind": block, "config": cfg, "tokens": [B, T], "layer_kinds": kinds,
                  "min_routing_margin": min(margins), "delta_rule_forms_max_abs_diff_vs_recurrence": checks,
                  "scanned": "model_scanned.safetensors: scan_layers true. decoder.layers.layer_{j}.<leaf> (j < "
                             "inhomogeneous_layer_cycle_interval; 'layer_', not 'layers_') is np.stack([decoder."
                             "layers_{j + m*cycle}.<leaf> for m], axis=1) for every leaf (param_scan_axis 1, 1-D "
                             "leaves become [n, stacks]); here one stack (4 layers, cycle 4). Other tensors unchanged.",
                  "files": {"act_decoder.layers_i": "output of layer i [B,T,D]",
                            "state_decoder.layers_i / conv_state_decoder.layers_i": "GDN layers: recurrent state "
                            "[B,Hv,Dk,Dv] and conv state [B,Kc-1,conv_dim] after the last token",
                            "cached_key_decoder.layers_i / cached_value_decoder.layers_i": "full-attention layers: "
                            "k after norm + RoPE and v, [B,T,K,H]"}})
    write_config(d, cfg, f"{c['L']}-layer {block} model fixture")
    return checks


def main():
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    c = settings()
    gdn_checks = layer_case("qwen3_next_gdn_layer", 0, 81)
    layer_case("qwen3_next_attn_layer", c["cycle"] - 1, 82)
    model_checks = model_case(83)
    worst = max(list(gdn_checks.values()) + list(model_checks.values()))
    print(f"delta rule: chunked / naive chunked / prefill+AR forms vs recurrence, max abs diff {worst:.3e}")
    print(f"Hugging Face forward vs MaxText logits, max abs diff {HF_DIFF[0]:.3e}")
    print("wrote tests/fixtures/qwen3_next_{gdn_layer,attn_layer,model}")


if __name__ == "__main__":
    main()
