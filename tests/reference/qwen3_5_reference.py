"""MaxText's qwen3_5 decoder block (Qwen3.5's text decoder) re-stated in PyTorch float64 from float32 weights, and a
Qwen3.5 Hugging Face checkpoint of the same weights checked against a forward written from transformers'
modeling_qwen3_5_moe.py.

Source read: MaxText e591f30, src/maxtext/models/qwen3_5.py: Qwen3_5GatedDeltaNet, Qwen3_5FullAttention and
Qwen3_5SparseMoEBlock subclass Qwen3NextGatedDeltaNet / Qwen3NextFullAttention / Qwen3NextSparseMoeBlock with no
change; Qwen3_5DecoderLayer and Qwen3_5ScannableBlock repeat Qwen3-Next's layer (full attention iff (i + 1) % cycle ==
0, `layer_j` when scanned); decoders.py gives qwen3_5 the Qwen3NextRMSNorm (1 + w) final norm. So the layer math is
qwen3_next_reference.py's, imported from there. What differs is configuration: configs/models/qwen3.5-35b-a3b.yml and
qwen3.5-397b-a17b.yml set use_mrope: true with mrope_section [11, 11, 10], and Qwen3NextFullAttention passes
use_mrope to attentions.Attention, whose init_rotary_embedding then builds Qwen3OmniMoeThinkerTextRotaryEmbedding
(layers/embeddings.py) before it looks at is_qwen3_hybrid:
  rotary_dim = int(head_dim * partial_rotary_factor); timescale_i = min * (max/min)^(2i / rotary_dim) (f32);
  positions [B, T] (text) are broadcast to [B, T, 3] (temporal, height, width all equal);
  freqs[..., s, i] = position_s * (1 / timescale_i) in f32 (a multiply by the reciprocal, not a division);
  interleave: freqs_t = freqs[..., 0, :]; for (s, offset) in ((1, 1), (2, 2)): lanes offset, offset + 3, ... below
  3 * mrope_section[s] take freqs[..., s, lane]; (sum(mrope_section) must equal rotary_dim / 2)
  cos = cos(concat(freqs_t, freqs_t)) * attention_scaling (1.0), sin likewise, both kept f32 (RotaryEmbedding rounds
  them to the input dtype; this one does not);
  out = concat(x_rot * cos + rotate_half(x_rot) * sin, x_pass) with x_rot the first rotary_dim lanes, cast to dtype.
At text positions the three rows are equal, so the interleave picks equal angles: the same partial RoPE as Qwen3-Next
up to the f32 rounding of 1 / timescale, and f32 sin / cos in bf16. mrope() below is the module as written (three
rows, interleave), and the model fixture asserts that it equals the plain partial RoPE in float64.

Hugging Face (transformers modeling_qwen3_5_moe.py; MaxText param_mapping.py QWEN3_5_MAXTEXT_TO_HF_PARAM_MAPPING and
its hooks concat_qkvz_and_transpose / concat_ba_and_transpose / process_wi_0_wi_1):
  Qwen3_5MoeForConditionalGeneration: model.language_model.{embed_tokens, layers.i, norm}, lm_head; config.json with
  text_config (model_type qwen3_5_moe_text) and rope_parameters {rope_type default, rope_theta, partial_rotary_factor,
  mrope_section, mrope_interleaved}. The vision tower (model.visual.*) and mtp.* are not the text decoder's.
  Gated DeltaNet: in_proj_qkv [2*Hk*Dk + Hv*Dv, D] (q | k | v, head-major; this is also the conv's channel order),
  in_proj_z [Hv*Dv, D], in_proj_b / in_proj_a [Hv, D]; MaxText's fused kernels group them per key head.
  Routed experts: experts.gate_up_proj [E, 2F, D] (gate rows, then up rows: chunk(2)) and experts.down_proj [E, D, F].
  Text RoPE: Qwen3_5MoeTextRotaryEmbedding, the same interleaved MRoPE (its cos / sin are cast to the activation
  dtype: a bf16 difference from MaxText, not seen in float64).

Writes tests/fixtures/qwen3_5_model/ (same files as qwen3_next_model, plus hf/ in the Qwen3.5 layout).
Run: /usr/bin/python3 tests/reference/qwen3_5_reference.py
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_reference as AR  # noqa: E402
import qwen3_next_reference as QN  # noqa: E402
from common import t64  # noqa: E402

F32 = np.float32
MROPE_SECTION = [2, 1, 1]  # rotary_dim 8 (head_dim 32 * 0.25): 4 frequencies, interleaved T H W T
ROPE_VS_PARTIAL = [0.0]


def settings():
    c = QN.settings()
    c["H"] = 32  # rotary_dim 8, so that every mrope section is non-empty
    return c


def mrope(d, theta, section, min_ts=1.0):
    """MaxText Qwen3OmniMoeThinkerTextRotaryEmbedding at text positions (see the module docstring)."""
    half = d // 2
    assert sum(section) == half, (section, d)
    frac = (2 * np.arange(half, dtype=np.int32)).astype(F32) / F32(d)
    ts = F32(min_ts) * np.power(F32(theta / min_ts), frac, dtype=F32)
    inv = (F32(1) / ts).astype(F32)

    def apply(x, pos):
        p3 = np.broadcast_to(pos.astype(F32)[..., None], pos.shape + (3,))  # [B, T, 3]
        freqs = (p3[..., None] * inv).astype(F32)  # [B, T, 3, half], f32 products
        ft = freqs[..., 0, :].copy()
        for s, offset in ((1, 1), (2, 2)):
            lanes = slice(offset, 3 * section[s], 3)
            ft[..., lanes] = freqs[..., s, lanes]
        a = t64(np.concatenate([ft, ft], -1))[:, :, None, :]  # [B, T, 1, d]
        cos, sin = torch.cos(a), torch.sin(a)
        xr = x[..., :d]
        rot = torch.cat([-xr[..., half:], xr[..., :half]], -1)
        return torch.cat([xr * cos + rot * sin, x[..., d:]], -1)
    return apply


def hf_checkpoint(w, c):
    """MaxText-named f32 weights -> Qwen3_5MoeForConditionalGeneration names and layouts (the inverse of MaxText's
    param_mapping hooks), plus a vision tensor and an MTP tensor that the text decoder must not read."""
    T = np.transpose
    D, N, H = c["D"], c["N"], c["H"]
    Hk, Hv, Dk, Dv = c["Hk"], c["Hv"], c["Dk"], c["Dv"]
    r = Hv // Hk
    m0 = "model.language_model."
    hf = {m0 + "embed_tokens.weight": w["token_embedder.embedding"], m0 + "norm.weight": w["decoder.decoder_norm.scale"],
          "lm_head.weight": T(w["decoder.logits_dense.kernel"]),
          "model.visual.patch_embed.proj.weight": np.ones((4, 3, 2, 2, 2), np.float32),
          "mtp.fc.weight": np.ones((D, 2 * D), np.float32)}
    for i in range(c["L"]):
        h, m = f"{m0}layers.{i}.", f"decoder.layers_{i}."
        hf[h + "input_layernorm.weight"] = w[m + "input_layernorm.scale"]
        hf[h + "post_attention_layernorm.weight"] = w[m + "post_attention_layernorm.scale"]
        if QN.is_full_attention(i, c):
            a, s = m + "attention.attention.", h + "self_attn."
            hf[s + "q_proj.weight"] = T(w[a + "query.kernel"].reshape(D, N * 2 * H))
            hf[s + "k_proj.weight"] = T(w[a + "key.kernel"].reshape(D, -1))
            hf[s + "v_proj.weight"] = T(w[a + "value.kernel"].reshape(D, -1))
            hf[s + "o_proj.weight"] = T(w[a + "out.kernel"])
            hf[s + "q_norm.weight"] = w[a + "query_norm.scale"]
            hf[s + "k_norm.weight"] = w[a + "key_norm.scale"]
        else:
            a, s = m + "attention.", h + "linear_attn."
            g = w[a + "in_proj_qkvz.kernel"].reshape(D, Hk, 2 * Dk + 2 * r * Dv)  # per key head: q k v z
            q, k = g[..., :Dk], g[..., Dk:2 * Dk]
            v, z = g[..., 2 * Dk:2 * Dk + r * Dv], g[..., 2 * Dk + r * Dv:]
            hf[s + "in_proj_qkv.weight"] = T(np.concatenate([q.reshape(D, -1), k.reshape(D, -1), v.reshape(D, -1)], 1))
            hf[s + "in_proj_z.weight"] = T(z.reshape(D, -1))
            ba = w[a + "in_proj_ba.kernel"].reshape(D, Hk, 2 * r)  # per key head: b a
            hf[s + "in_proj_b.weight"] = T(ba[..., :r].reshape(D, Hv))
            hf[s + "in_proj_a.weight"] = T(ba[..., r:].reshape(D, Hv))
            hf[s + "out_proj.weight"] = T(w[a + "out_proj.kernel"])
            hf[s + "conv1d.weight"] = np.transpose(w[a + "conv1d.kernel"], (2, 1, 0))
            hf[s + "A_log"] = w[a + "A_log"]
            hf[s + "dt_bias"] = w[a + "dt_bias"]
            hf[s + "norm.weight"] = w[a + "norm.rms_norm.scale"]
        f, o = h + "mlp.", m + "mlp."
        hf[f + "gate.weight"] = T(w[o + "routed_experts.gate.kernel"])
        hf[f + "experts.gate_up_proj"] = np.concatenate(
            [np.transpose(w[o + "routed_experts.wi_0"], (0, 2, 1)), np.transpose(w[o + "routed_experts.wi_1"], (0, 2, 1))],
            axis=1)
        hf[f + "experts.down_proj"] = np.transpose(w[o + "routed_experts.wo"], (0, 2, 1))
        for hn, mn in (("gate_proj", "wi_0"), ("up_proj", "wi_1"), ("down_proj", "wo")):
            hf[f + f"shared_expert.{hn}.weight"] = T(w[o + f"shared_expert.{mn}.kernel"])
        hf[f + "shared_expert_gate.weight"] = T(w[o + "shared_expert_gate.kernel"])
    return {k: np.ascontiguousarray(v) for k, v in hf.items()}


def hf_config(c):
    text = QN.hf_config(c)
    for k in ("architectures", "rope_theta", "partial_rotary_factor", "rope_scaling", "tie_word_embeddings",
              "decoder_sparse_step", "intermediate_size", "torch_dtype"):
        text.pop(k)
    text.update(model_type="qwen3_5_moe_text", mamba_ssm_dtype="float32", mtp_num_hidden_layers=0,
                rope_parameters={"rope_type": "default", "rope_theta": c["theta"], "partial_rotary_factor": c["partial"],
                                 "mrope_section": MROPE_SECTION, "mrope_interleaved": True})
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "tie_word_embeddings": False, "text_config": text,
            "vision_config": {"model_type": "qwen3_5_moe", "depth": 1, "hidden_size": 4, "out_hidden_size": c["D"]}}


# The Qwen3.5 layout's three differences, as modeling_qwen3_5_moe.py computes them (hooks of QN.hf_forward).
def hf_gdn_inputs(h, t, s, hc):
    F = torch.nn.functional
    Bn, Tn, _ = h.shape
    nv, dv = hc["linear_num_value_heads"], hc["linear_value_head_dim"]
    mixed = F.linear(h, t[s + "in_proj_qkv.weight"]).transpose(1, 2)  # [B, conv_dim, T], channels q | k | v
    z = F.linear(h, t[s + "in_proj_z.weight"]).reshape(Bn, Tn, nv, dv)
    return mixed, z, F.linear(h, t[s + "in_proj_b.weight"]), F.linear(h, t[s + "in_proj_a.weight"])


def hf_experts(h, t, f, hc):
    F = torch.nn.functional
    out = []
    for e in range(hc["num_experts"]):
        gate, up = F.linear(h, t[f + "experts.gate_up_proj"][e]).chunk(2, dim=-1)
        out.append(F.linear(F.silu(gate) * up, t[f + "experts.down_proj"][e]))
    return out


def hf_rope_cos_sin(hc, Tn, rd):
    """Qwen3_5MoeTextRotaryEmbedding for text position ids (three equal rows), float64."""
    sec = hc["rope_parameters"]["mrope_section"]
    inv = 1.0 / (hc["rope_parameters"]["rope_theta"] ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    pos = torch.arange(Tn, dtype=torch.float64)
    freqs = torch.stack([pos[:, None] * inv[None, :]] * 3)  # [3, T, rd/2]
    ft = freqs[0].clone()
    for dim, offset in ((1, 1), (2, 2)):
        ft[..., offset:3 * sec[dim]:3] = freqs[dim, ..., offset:3 * sec[dim]:3]
    emb = torch.cat([ft, ft], -1)
    return emb.cos(), emb.sin()


def hf_case(w, c, tokens, logits):
    hc = hf_config(c)
    hf = hf_checkpoint(w, c)
    rp = hc["text_config"]["rope_parameters"]  # hf_forward reads the rotary keys at the top level
    text = dict(hc["text_config"], rope_theta=rp["rope_theta"], partial_rotary_factor=rp["partial_rotary_factor"])
    hf_logits = QN.hf_forward(text, {k: t64(v) for k, v in hf.items()}, tokens, prefix="model.language_model.",
                              gdn_inputs=hf_gdn_inputs, experts=hf_experts, rope_cos_sin=hf_rope_cos_sin)
    return hf, hc, float((hf_logits - logits).abs().max())


def main():
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    c = settings()
    c["rope"] = lambda rd: mrope(rd, c["theta"], MROPE_SECTION)
    # At text positions MRoPE is the plain partial RoPE (equal angles per lane up to f32 rounding of 1 / timescale).
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((QN.B, QN.T, 2, c["H"])))
    pos = np.tile(np.arange(QN.T, dtype=np.int32), (QN.B, 1))
    rd = int(c["H"] * c["partial"])
    ROPE_VS_PARTIAL[0] = float((mrope(rd, c["theta"], MROPE_SECTION)(x, pos) - AR.default_rope(rd, c["theta"])(x, pos))
                               .abs().max())
    assert ROPE_VS_PARTIAL[0] < 1e-5, ROPE_VS_PARTIAL[0]
    QN.model_case(85, c, name="qwen3_5_model", hf_case=hf_case,
                  extra_config={"decoder_block": "qwen3_5", "use_mrope": True, "mrope_section": MROPE_SECTION})
    print(f"MRoPE at text positions vs partial RoPE, max abs diff {ROPE_VS_PARTIAL[0]:.3e}")
    print(f"Hugging Face (Qwen3.5 layout) forward vs MaxText logits, max abs diff {QN.HF_DIFF[0]:.3e}")
    print("wrote tests/fixtures/qwen3_5_model")


if __name__ == "__main__":
    main()
