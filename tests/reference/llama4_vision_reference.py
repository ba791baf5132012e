"""MaxText's Llama 4 vision encoder (Llama4VisionModel + Llama4MultiModalProjector), re-stated in PyTorch float64 from
float32 inputs and weights, and checked against a second float64 forward that follows Hugging Face's formulation.

Sources read:
  MaxText, commit e591f30cbbf217ed67ef71263ec0538239f9c3b8:
    src/maxtext/models/llama4.py: Llama4UnfoldConvolution, pixel_shuffle, Llama4VisionMLP, Llama4VisionMLP2,
      Llama4VisionPixelShuffleMLP, Llama4MultiModalProjector, Llama4VisionEncoderLayer, Llama4VisionEncoder,
      Llama4VisionModel;
    src/maxtext/layers/embeddings.py: LlamaVisionRotaryEmbedding;
    src/maxtext/layers/attentions.py: Attention (init_query_w, init_out_w, init_rotary_embedding, __call__);
    src/maxtext/layers/attention_op.py: generate_attention_mask (FULL, no segment ids -> no mask);
    src/maxtext/layers/encoders.py: VisionEncoder (encoder "Llama4VisionModel_0", projector
      "Llama4MultiModalProjector_0" under "vision_encoder");
    src/maxtext/checkpoint_conversion/standalone_scripts/llama4_ckpt_unscanned.py (HF -> MaxText, vision part);
    src/maxtext/configs/models/llama4-17b-16e.yml, src/maxtext/configs/base.yml.
  Hugging Face transformers (read through the code index; versions 000c33fd / 63210d0e of modeling_llama4.py and
    008e5743 of configuration_llama4.py): Llama4VisionModel, Llama4UnfoldConvolution, Llama4VisionRotaryEmbedding,
    vision_apply_rotary_emb, vision_eager_attention_forward, Llama4VisionAttention, Llama4VisionEncoderLayer,
    pixel_shuffle, Llama4VisionMLP, Llama4VisionMLP2, Llama4VisionPixelShuffleMLP, Llama4MultiModalProjector,
    Llama4ForConditionalGeneration.get_image_features / forward; Llama4VisionConfig, Llama4Config.

Math (MaxText formulation; D hidden, N heads, hd = D / N, p patch, T = (image/p)^2 patches, F intermediate):
  pixels NCHW [tiles, C, H, W] (the fixture stores NHWC; the script transposes).
  unfold: conv_general_dilated_patches(NCHW, filter p x p, stride p, VALID) gives per patch the C*p*p values ordered
    (channel, kernel row, kernel column), patches row-major over the (H/p, W/p) grid;
    x = patches [tiles, T, C*p*p] @ vit_unfold_linear.kernel [C*p*p, D]   (no bias)              -> unfold.npy
  x = concat([x, class_embedding], axis=1)   (the CLS row is appended LAST, index T)
  x = x + positional_embedding_vlm [T+1, D]
  x = layernorm_pre(x)                                                                               -> pre.npy
    LayerNorm = flax nnx.LayerNorm: (x - mean) / sqrt(var + eps) * scale + bias, biased variance (flax computes
    var as E[x^2] - E[x]^2, "fast variance"; identical math, computed here two-pass in float64).
  each of the L layers (Llama4VisionEncoderLayer):
    y = input_layer_norm(x)
    q = y @ Wq [D, N, hd] + bq [N, hd];  k, v likewise (use_bias_in_projections=True)
    2D rotary (LlamaVisionRotaryEmbedding, applied to q and k, rope on every layer):
      for token t < T: col = t % g, row = t // g with g = image/p; the CLS token (t = T) gets angle 0 (freqs_cis = 1).
      fd = hd / 2; rope_freq[j] = theta^(-(2j)/fd) for j < fd/2;
      angles[t] = [(col+1) * rope_freq[0..fd/2), (row+1) * rope_freq[0..fd/2)]   (hd/2 angles: x half, then y half)
      each head vector is read as hd/2 complex numbers (q[2i] + i q[2i+1]) and multiplied by exp(i * angles[i]).
    q = q * hd^-0.5   (query_pre_attn_scalar = 1/sqrt(hd); the initializer's depth scaling is then off)
    a = softmax_s(q_t . k_s) over all T+1 tokens of the same tile (AttentionType.FULL, no mask)
    x = x + (a v) @ Wo [N, hd, D] + bo [D]
    x = x + fc2(gelu(fc1(post_attention_layer_norm(x))))   fc1 [D, F] + [F], fc2 [F, D] + [D],
        gelu exact (erf form: nnx.gelu(approximate=False))                                        -> layer_{i}.npy
  x = layernorm_post(x)                                                                              -> post.npy
  x = x[:, :-1]   (drop the CLS row)
  pixel_shuffle(x, r=0.5): [B, T, D] -> [B, g, g, D] -> reshape [B, g, g*r, D/r] -> transpose(0,2,1,3)
    -> reshape [B, g*r, g*r, D/r^2] -> transpose(0,2,1,3) -> reshape [B, T*r^2, D/r^2]  (D/r^2 must equal F)
  Llama4VisionMLP2: gelu(gelu(x @ fc1 [F, Pin]) @ fc2 [Pin, Pout])   (no biases, both gelus exact)  -> adapter.npy
  Llama4MultiModalProjector: x @ vit_multi_modal_projector.kernel [Pout, E]   (no bias)            -> out.npy
  eps = normalization_layer_epsilon = 1e-5 (llama4-17b-16e.yml and base.yml both say 1e-05); HF's vision layer
    norms are nn.LayerNorm(hidden_size) with torch's default eps = 1e-5, and Llama4VisionConfig.norm_eps defaults to
    1e-5 (HF does not actually pass norm_eps to those LayerNorms). Same value: 1e-5.
  rope theta = rope_theta_for_vit = 10000 (base.yml; HF Llama4VisionConfig rope_theta / rope_parameters).
  MaxText and HF build rope_freq / angles / cos / sin in float32; here they are built in float64 (the exact math);
  the difference is at float32 rounding level.

Hugging Face formulation (second forward, from the HF tensors): F.unfold + F.linear (patch_embedding.linear.weight
  [D, C*p*p]); class token concatenated last; positional_embedding_vlm added; F.layer_norm (eps 1e-5);
  q/k/v/o_proj nn.Linear with bias; vision_apply_rotary_emb via torch.view_as_complex with
  freqs_ci = cos + i sin (Llama4VisionRotaryEmbedding: repeat_interleave(2) then [..., ::2]); attention
  softmax(q k^T * hd^-0.5) (vision_eager_attention_forward; the scale on the logits instead of on q);
  fc1/GELU/fc2; layernorm_post; drop CLS; HF pixel_shuffle (view/permute); vision_adapter.mlp fc1/GELU/fc2/GELU;
  multi_modal_projector.linear_1 on the flattened [tiles*T/4, Pout] features. The two forwards must agree to 1e-12.

Where MaxText and HF differ:
  * Llama4VisionMLP2.fc2: HF declares nn.Linear(projector_output_dim, projector_output_dim), i.e. its input width is
    projector_output_dim, whereas MaxText's vit_pixel_shuffle_mlp_fc2 is [projector_input_dim, projector_output_dim]
    and MaxText's converter simply transposes HF's fc2 weight. The real checkpoints have projector_input_dim ==
    projector_output_dim == 4096 so the two agree there. With this fixture's sizes (Pin = 48, Pout = 40) the
    HF-named vision_adapter.mlp.fc2.weight is [40, 48] (MaxText's kernel transposed, as the converter maps it):
    transformers' Llama4VisionMLP2 itself would expect [40, 40] and refuse to load hf/model.safetensors; the HF
    formulation below uses the tensor as F.linear, which is the intended math.
  * Attention scaling: MaxText multiplies q by hd^-0.5 after rotary; HF scales the q.k logits. Same math.
  * Everything else (CLS appended last, layer-norm eps, exact GELU, pixel-shuffle index order, rotary layout,
    no biases in unfold / adapter / projector) is the same in both.

HF -> MaxText weight mapping (llama4_ckpt_unscanned.py): every 2-D HF weight is transposed; q/k/v_proj.weight.T is
  reshaped [D, N, hd], o_proj.weight.T reshaped [N, hd, D], q/k/v biases reshaped [N, hd], o bias as is;
  LayerNorm weight -> scale, bias -> bias; class_embedding and positional_embedding_vlm as is. The script checks
  that mapping the HF tensors back reproduces the MaxText tree bit for bit.

Writes tests/fixtures/llama4_vision/: meta.json, pixels.npy (float32 [tiles, 84, 84, 3] NHWC, uniform in [-1, 1]),
  model.safetensors (MaxText names), hf/config.json + hf/model.safetensors (HF names), unfold.npy, pre.npy,
  layer_{i}.npy, post.npy, adapter.npy, out.npy (float32, computed in float64).
Run: /usr/bin/python3 tests/reference/llama4_vision_reference.py
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

F32 = np.float32
CASE = "llama4_vision"
SEED = 4417
VM = "vision_encoder.Llama4VisionModel_0."
PROJ = "vision_encoder.Llama4MultiModalProjector_0."
HV = "vision_model."

CFG = {"image_size": 84, "patch_size": 14, "num_channels": 3, "hidden_size": 64, "intermediate_size": 256,
       "num_layers": 2, "num_heads": 4, "rope_theta": 10000.0, "pixel_shuffle_ratio": 0.5,
       "projector_input_dim": 48, "projector_output_dim": 40, "emb_dim": 24, "eps": 1e-5}
TILES = 3


def dims(c):
    D, N = c["hidden_size"], c["num_heads"]
    g = c["image_size"] // c["patch_size"]
    return dict(D=D, N=N, hd=D // N, p=c["patch_size"], C=c["num_channels"], g=g, T=g * g,
                F=c["intermediate_size"], Pin=c["projector_input_dim"], Pout=c["projector_output_dim"],
                E=c["emb_dim"], L=c["num_layers"], r=c["pixel_shuffle_ratio"], eps=c["eps"], theta=c["rope_theta"])


# ----------------------------------------------------------------------------------------------------------------
# Weights: MaxText tree, the HF tensors (MaxText -> HF), and the converter's HF -> MaxText direction
# ----------------------------------------------------------------------------------------------------------------

def maxtext_weights(g, c):
    d = dims(c)
    D, N, hd, p, C, T, F_, Pin, Pout, E = (d[k] for k in ("D", "N", "hd", "p", "C", "T", "F", "Pin", "Pout", "E"))
    w = {}
    # pixels are uniform in [-1, 1] (variance 1/3): sqrt(3 / (C p p)) keeps the unfold output O(1)
    w[VM + "Llama4UnfoldConvolution_0.vit_unfold_linear.kernel"] = f32(g, (C * p * p, D), math.sqrt(3.0 / (C * p * p)))
    w[VM + "class_embedding"] = f32(g, (D,), 0.5)
    w[VM + "positional_embedding_vlm"] = f32(g, (T + 1, D), 0.5)
    for ln in ("layernorm_pre", "layernorm_post"):
        w[VM + ln + ".scale"] = f32(g, (D,), 0.1, 1.0)
        w[VM + ln + ".bias"] = f32(g, (D,), 0.1)
    for i in range(d["L"]):
        b = f"{VM}Llama4VisionEncoder_0.layers_{i}."
        for ln in ("input_layer_norm", "post_attention_layer_norm"):
            w[b + ln + ".scale"] = f32(g, (D,), 0.1, 1.0)
            w[b + ln + ".bias"] = f32(g, (D,), 0.1)
        a = b + "self_attention_vision."
        for nm in ("query", "key", "value"):
            w[a + nm + ".kernel"] = f32(g, (D, N, hd), 1.0 / math.sqrt(D))
            w[a + nm + ".bias"] = f32(g, (N, hd), 0.1)
        w[a + "out.kernel"] = f32(g, (N, hd, D), 1.0 / math.sqrt(D))
        w[a + "out.bias"] = f32(g, (D,), 0.1)
        m = b + "Llama4VisionMLP_0."
        w[m + "vit_encoder_layer_mlp_fc1.kernel"] = f32(g, (D, F_), 1.0 / math.sqrt(D))
        w[m + "vit_encoder_layer_mlp_fc1.bias"] = f32(g, (F_,), 0.1)
        w[m + "vit_encoder_layer_mlp_fc2.kernel"] = f32(g, (F_, D), 1.0 / math.sqrt(F_))
        w[m + "vit_encoder_layer_mlp_fc2.bias"] = f32(g, (D,), 0.1)
    s = VM + "Llama4VisionPixelShuffleMLP_0.pixel_shuffle_mlp."
    w[s + "vit_pixel_shuffle_mlp_fc1.kernel"] = f32(g, (F_, Pin), 1.5 / math.sqrt(F_))
    w[s + "vit_pixel_shuffle_mlp_fc2.kernel"] = f32(g, (Pin, Pout), 2.0 / math.sqrt(Pin))
    w[PROJ + "vit_multi_modal_projector.kernel"] = f32(g, (Pout, E), 1.0 / math.sqrt(Pout))
    return w


def hf_weights(w, c):
    """The same numbers under HF's Llama4ForConditionalGeneration names (original Hub layout, no "model." prefix)."""
    d = dims(c)
    D, N, hd = d["D"], d["N"], d["hd"]
    o = {}
    o[HV + "patch_embedding.linear.weight"] = w[VM + "Llama4UnfoldConvolution_0.vit_unfold_linear.kernel"].T
    o[HV + "class_embedding"] = w[VM + "class_embedding"]
    o[HV + "positional_embedding_vlm"] = w[VM + "positional_embedding_vlm"]
    for ln in ("layernorm_pre", "layernorm_post"):
        o[HV + ln + ".weight"] = w[VM + ln + ".scale"]
        o[HV + ln + ".bias"] = w[VM + ln + ".bias"]
    for i in range(d["L"]):
        b = f"{VM}Llama4VisionEncoder_0.layers_{i}."
        hb = f"{HV}model.layers.{i}."
        for ln, hn in (("input_layer_norm", "input_layernorm"), ("post_attention_layer_norm",
                                                                  "post_attention_layernorm")):
            o[hb + hn + ".weight"] = w[b + ln + ".scale"]
            o[hb + hn + ".bias"] = w[b + ln + ".bias"]
        a = b + "self_attention_vision."
        for nm, hn in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            o[hb + f"self_attn.{hn}.weight"] = w[a + nm + ".kernel"].reshape(D, N * hd).T
            o[hb + f"self_attn.{hn}.bias"] = w[a + nm + ".bias"].reshape(N * hd)
        o[hb + "self_attn.o_proj.weight"] = w[a + "out.kernel"].reshape(N * hd, D).T
        o[hb + "self_attn.o_proj.bias"] = w[a + "out.bias"]
        m = b + "Llama4VisionMLP_0."
        o[hb + "mlp.fc1.weight"] = w[m + "vit_encoder_layer_mlp_fc1.kernel"].T
        o[hb + "mlp.fc1.bias"] = w[m + "vit_encoder_layer_mlp_fc1.bias"]
        o[hb + "mlp.fc2.weight"] = w[m + "vit_encoder_layer_mlp_fc2.kernel"].T
        o[hb + "mlp.fc2.bias"] = w[m + "vit_encoder_layer_mlp_fc2.bias"]
    s = VM + "Llama4VisionPixelShuffleMLP_0.pixel_shuffle_mlp."
    o[HV + "vision_adapter.mlp.fc1.weight"] = w[s + "vit_pixel_shuffle_mlp_fc1.kernel"].T
    o[HV + "vision_adapter.mlp.fc2.weight"] = w[s + "vit_pixel_shuffle_mlp_fc2.kernel"].T
    o["multi_modal_projector.linear_1.weight"] = w[PROJ + "vit_multi_modal_projector.kernel"].T
    return {k: np.ascontiguousarray(v, dtype=F32) for k, v in o.items()}


def hf_to_maxtext(o, c):
    """llama4_ckpt_unscanned.py's vision part (HF -> MaxText), written out again for the round-trip check."""
    d = dims(c)
    D, N, hd = d["D"], d["N"], d["hd"]
    w = {}
    w[VM + "class_embedding"] = o[HV + "class_embedding"]
    w[VM + "positional_embedding_vlm"] = o[HV + "positional_embedding_vlm"]
    w[VM + "Llama4UnfoldConvolution_0.vit_unfold_linear.kernel"] = o[HV + "patch_embedding.linear.weight"].T
    for ln in ("layernorm_pre", "layernorm_post"):
        w[VM + ln + ".scale"] = o[HV + ln + ".weight"]
        w[VM + ln + ".bias"] = o[HV + ln + ".bias"]
    for i in range(d["L"]):
        hb = f"{HV}model.layers.{i}."
        b = f"{VM}Llama4VisionEncoder_0.layers_{i}."
        a = b + "self_attention_vision."
        for nm, hn in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            w[a + nm + ".kernel"] = np.reshape(o[hb + f"self_attn.{hn}.weight"].T, [D, N, hd])
            w[a + nm + ".bias"] = np.reshape(o[hb + f"self_attn.{hn}.bias"], [N, hd])
        w[a + "out.kernel"] = np.reshape(o[hb + "self_attn.o_proj.weight"].T, [N, hd, D])
        w[a + "out.bias"] = o[hb + "self_attn.o_proj.bias"]
        m = b + "Llama4VisionMLP_0."
        w[m + "vit_encoder_layer_mlp_fc1.kernel"] = o[hb + "mlp.fc1.weight"].T
        w[m + "vit_encoder_layer_mlp_fc2.kernel"] = o[hb + "mlp.fc2.weight"].T
        w[m + "vit_encoder_layer_mlp_fc1.bias"] = o[hb + "mlp.fc1.bias"]
        w[m + "vit_encoder_layer_mlp_fc2.bias"] = o[hb + "mlp.fc2.bias"]
        w[b + "input_layer_norm.scale"] = o[hb + "input_layernorm.weight"]
        w[b + "input_layer_norm.bias"] = o[hb + "input_layernorm.bias"]
        w[b + "post_attention_layer_norm.scale"] = o[hb + "post_attention_layernorm.weight"]
        w[b + "post_attention_layer_norm.bias"] = o[hb + "post_attention_layernorm.bias"]
    s = VM + "Llama4VisionPixelShuffleMLP_0.pixel_shuffle_mlp."
    w[s + "vit_pixel_shuffle_mlp_fc1.kernel"] = o[HV + "vision_adapter.mlp.fc1.weight"].T
    w[s + "vit_pixel_shuffle_mlp_fc2.kernel"] = o[HV + "vision_adapter.mlp.fc2.weight"].T
    w[PROJ + "vit_multi_modal_projector.kernel"] = o["multi_modal_projector.linear_1.weight"].T
    return w


def maxtext_shapes(c):
    d = dims(c)
    D, N, hd, p, C, T, F_, Pin, Pout, E = (d[k] for k in ("D", "N", "hd", "p", "C", "T", "F", "Pin", "Pout", "E"))
    s = {VM + "class_embedding": (D,), VM + "positional_embedding_vlm": (T + 1, D),
         VM + "Llama4UnfoldConvolution_0.vit_unfold_linear.kernel": (C * p * p, D),
         VM + "Llama4VisionPixelShuffleMLP_0.pixel_shuffle_mlp.vit_pixel_shuffle_mlp_fc1.kernel": (F_, Pin),
         VM + "Llama4VisionPixelShuffleMLP_0.pixel_shuffle_mlp.vit_pixel_shuffle_mlp_fc2.kernel": (Pin, Pout),
         PROJ + "vit_multi_modal_projector.kernel": (Pout, E)}
    for ln in ("layernorm_pre", "layernorm_post"):
        s[VM + ln + ".scale"] = (D,)
        s[VM + ln + ".bias"] = (D,)
    for i in range(d["L"]):
        b = f"{VM}Llama4VisionEncoder_0.layers_{i}."
        for ln in ("input_layer_norm", "post_attention_layer_norm"):
            s[b + ln + ".scale"] = (D,)
            s[b + ln + ".bias"] = (D,)
        for nm in ("query", "key", "value"):
            s[b + f"self_attention_vision.{nm}.kernel"] = (D, N, hd)
            s[b + f"self_attention_vision.{nm}.bias"] = (N, hd)
        s[b + "self_attention_vision.out.kernel"] = (N, hd, D)
        s[b + "self_attention_vision.out.bias"] = (D,)
        s[b + "Llama4VisionMLP_0.vit_encoder_layer_mlp_fc1.kernel"] = (D, F_)
        s[b + "Llama4VisionMLP_0.vit_encoder_layer_mlp_fc1.bias"] = (F_,)
        s[b + "Llama4VisionMLP_0.vit_encoder_layer_mlp_fc2.kernel"] = (F_, D)
        s[b + "Llama4VisionMLP_0.vit_encoder_layer_mlp_fc2.bias"] = (D,)
    return s


# ----------------------------------------------------------------------------------------------------------------
# Forward 1: MaxText's formulation, float64, from the MaxText tree
# ----------------------------------------------------------------------------------------------------------------

def layer_norm(x, scale, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * scale + bias


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def maxtext_freqs_cis(d):
    """LlamaVisionRotaryEmbedding.freqs_cis: complex [T+1, 1, hd/2] (float64 angles)."""
    g, T, hd = d["g"], d["T"], d["hd"]
    idx = np.concatenate([np.arange(T), [-2]])  # the CLS token is ID -2
    fx = np.mod(idx, g)  # jnp's % follows Python's sign rule, as numpy's does
    fy = np.floor_divide(idx, g)
    fd = hd // 2
    rope_freq = 1.0 / (d["theta"] ** (np.arange(0, fd, 2)[: fd // 2].astype(np.float64) / fd))
    ax = np.repeat((fx + 1)[:, None] * rope_freq[None, :], 2, axis=-1)  # [T+1, fd]
    ay = np.repeat((fy + 1)[:, None] * rope_freq[None, :], 2, axis=-1)
    ang = np.concatenate([ax, ay], axis=-1)[:, ::2]  # [T+1, hd/2]
    ang = np.where(idx[:, None] < 0, 0.0, ang)
    return torch.from_numpy(np.exp(1j * ang)[:, None, :])  # complex128


def rotary_maxtext(x, freqs_cis):
    B, S, N, H = x.shape
    xr = x.reshape(B, S, N, H // 2, 2)
    xc = torch.complex(xr[..., 0], xr[..., 1]) * freqs_cis[None]
    return torch.stack([xc.real, xc.imag], dim=-1).reshape(B, S, N, H)


def pixel_shuffle_maxtext(x, ratio):
    B, P, Ch = x.shape
    ps = int(math.sqrt(P))
    x = x.reshape(B, ps, ps, -1)
    B, h, w_, Ch = x.shape
    x = x.reshape(B, h, int(w_ * ratio), int(Ch / ratio)).permute(0, 2, 1, 3)
    x = x.reshape(B, int(h * ratio), int(w_ * ratio), int(Ch / (ratio ** 2))).permute(0, 2, 1, 3)
    return x.reshape(B, -1, x.shape[-1])


def unfold_patches_maxtext(x, p):
    """conv_general_dilated_patches(NCHW, (p, p), stride p, VALID) then reshape [B, C*p*p, T] and transpose."""
    B, C, H, W = x.shape
    gh, gw = H // p, W // p
    t = x.reshape(B, C, gh, p, gw, p).permute(0, 1, 3, 5, 2, 4)  # [B, C, kh, kw, gh, gw]: feature (c, kh, kw)
    return t.reshape(B, C * p * p, gh * gw).transpose(1, 2)


def maxtext_forward(w, pixels_nhwc, c, b=1):
    d = dims(c)
    W = {k: t64(v) for k, v in w.items()}
    D, hd, p, eps = d["D"], d["hd"], d["p"], d["eps"]
    px = t64(pixels_nhwc).permute(0, 3, 1, 2)  # NCHW [b*t, C, H, W]
    t = px.shape[0] // b
    outs = {}
    x = unfold_patches_maxtext(px, p) @ W[VM + "Llama4UnfoldConvolution_0.vit_unfold_linear.kernel"]
    outs["unfold"] = x
    cls = W[VM + "class_embedding"][None, None, :].expand(x.shape[0], 1, D)
    x = torch.cat([x, cls], dim=1) + W[VM + "positional_embedding_vlm"]
    x = layer_norm(x, W[VM + "layernorm_pre.scale"], W[VM + "layernorm_pre.bias"], eps)
    outs["pre"] = x
    fc = maxtext_freqs_cis(d)
    for i in range(d["L"]):
        b_ = f"{VM}Llama4VisionEncoder_0.layers_{i}."
        a = b_ + "self_attention_vision."
        m = b_ + "Llama4VisionMLP_0."
        y = layer_norm(x, W[b_ + "input_layer_norm.scale"], W[b_ + "input_layer_norm.bias"], eps)
        q = torch.einsum("bsd,dnh->bsnh", y, W[a + "query.kernel"]) + W[a + "query.bias"]
        k = torch.einsum("bsd,dnh->bsnh", y, W[a + "key.kernel"]) + W[a + "key.bias"]
        v = torch.einsum("bsd,dnh->bsnh", y, W[a + "value.kernel"]) + W[a + "value.bias"]
        q = rotary_maxtext(q, fc)
        k = rotary_maxtext(k, fc)
        q = q * (1.0 / math.sqrt(hd))  # query_pre_attn_scalar
        probs = torch.softmax(torch.einsum("btnh,bsnh->bnts", q, k), dim=-1)
        att = torch.einsum("bnts,bsnh->btnh", probs, v)
        x = x + torch.einsum("btnh,nhd->btd", att, W[a + "out.kernel"]) + W[a + "out.bias"]
        y = layer_norm(x, W[b_ + "post_attention_layer_norm.scale"], W[b_ + "post_attention_layer_norm.bias"], eps)
        y = gelu(y @ W[m + "vit_encoder_layer_mlp_fc1.kernel"] + W[m + "vit_encoder_layer_mlp_fc1.bias"])
        x = x + (y @ W[m + "vit_encoder_layer_mlp_fc2.kernel"] + W[m + "vit_encoder_layer_mlp_fc2.bias"])
        outs[f"layer_{i}"] = x
    x = layer_norm(x, W[VM + "layernorm_post.scale"], W[VM + "layernorm_post.bias"], eps)
    outs["post"] = x
    x = pixel_shuffle_maxtext(x[:, :-1, :], d["r"])
    s = VM + "Llama4VisionPixelShuffleMLP_0.pixel_shuffle_mlp."
    x = gelu(x @ W[s + "vit_pixel_shuffle_mlp_fc1.kernel"])
    x = gelu(x @ W[s + "vit_pixel_shuffle_mlp_fc2.kernel"])
    outs["adapter"] = x
    x = x.reshape(b, t, x.shape[1], x.shape[2])  # Llama4VisionModel output [b, t, T/4, Pout]
    bb, tt, cc, dd = x.shape
    x = (x.reshape(bb * tt, cc, dd) @ W[PROJ + "vit_multi_modal_projector.kernel"])  # Llama4MultiModalProjector
    outs["out"] = x  # [b*t, T/4, E] (MaxText then reshapes to [b, t, T/4, E])
    return outs


# ----------------------------------------------------------------------------------------------------------------
# Forward 2: Hugging Face's formulation, float64, from the HF tensors
# ----------------------------------------------------------------------------------------------------------------

def hf_freqs_ci(d):
    """Llama4VisionRotaryEmbedding.freqs_ci (float64 instead of float32): complex [T+1, 1, hd/2]."""
    g, T, hd = d["g"], d["T"], d["hd"]
    img_idx = torch.arange(T, dtype=torch.int64).reshape(T, 1)
    img_idx = torch.cat([img_idx, img_idx[:1]], dim=0)
    img_idx[-1, -1] = -2
    fx = img_idx % g
    fy = img_idx // g
    fd = hd // 2
    rope_freq = 1.0 / (d["theta"] ** (torch.arange(0, fd, 2)[: fd // 2].to(torch.float64) / fd))
    freqs_x = ((fx + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(2, dim=-1)
    freqs_y = ((fy + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(2, dim=-1)
    freqs = torch.cat([freqs_x, freqs_y], dim=-1).contiguous()[..., ::2]
    freqs = freqs.masked_fill(img_idx.reshape(-1, 1, 1) < 0, 0)
    return torch.view_as_complex(torch.stack([torch.cos(freqs), torch.sin(freqs)], dim=-1).contiguous())


def hf_rotary(q, freqs_ci):
    qc = torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2).contiguous())
    shape = [dd if i == 1 or i == qc.ndim - 1 else 1 for i, dd in enumerate(qc.shape)]
    return torch.view_as_real(qc * freqs_ci.view(*shape)).flatten(3)


def hf_pixel_shuffle(x, ratio):
    B, P, Ch = x.shape
    ps = int(math.sqrt(P))
    x = x.view(B, ps, ps, -1)
    B, h, w_, Ch = x.size()
    y = x.view(B, h, int(w_ * ratio), int(Ch / ratio)).permute(0, 2, 1, 3).contiguous()
    y = y.view(B, int(h * ratio), int(w_ * ratio), int(Ch / (ratio ** 2))).permute(0, 2, 1, 3).contiguous()
    return y.view(B, -1, y.shape[-1])


def hf_forward(o, pixels_nhwc, c):
    d = dims(c)
    T_ = {k: t64(v) for k, v in o.items()}
    D, hd, p, eps = d["D"], d["hd"], d["p"], d["eps"]
    px = t64(pixels_nhwc).permute(0, 3, 1, 2).contiguous()
    outs = {}
    h = F.unfold(px, kernel_size=(p, p), stride=p).permute(0, 2, 1)
    h = F.linear(h, T_[HV + "patch_embedding.linear.weight"])
    outs["unfold"] = h
    B = h.shape[0]
    h = torch.cat([h, T_[HV + "class_embedding"].expand(B, 1, D)], dim=1)
    h = h + T_[HV + "positional_embedding_vlm"]
    h = F.layer_norm(h, (D,), T_[HV + "layernorm_pre.weight"], T_[HV + "layernorm_pre.bias"], eps)
    outs["pre"] = h
    fci = hf_freqs_ci(d)
    S = h.shape[1]
    for i in range(d["L"]):
        hb = f"{HV}model.layers.{i}."
        r = h
        y = F.layer_norm(h, (D,), T_[hb + "input_layernorm.weight"], T_[hb + "input_layernorm.bias"], eps)
        q = F.linear(y, T_[hb + "self_attn.q_proj.weight"], T_[hb + "self_attn.q_proj.bias"]).view(B, S, -1, hd)
        k = F.linear(y, T_[hb + "self_attn.k_proj.weight"], T_[hb + "self_attn.k_proj.bias"]).view(B, S, -1, hd)
        v = F.linear(y, T_[hb + "self_attn.v_proj.weight"], T_[hb + "self_attn.v_proj.bias"]).view(B, S, -1, hd)
        q, k = hf_rotary(q, fci), hf_rotary(k, fci)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        aw = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5, dim=-1)
        ao = torch.matmul(aw, v).transpose(1, 2).reshape(B, S, -1)
        h = r + F.linear(ao, T_[hb + "self_attn.o_proj.weight"], T_[hb + "self_attn.o_proj.bias"])
        r = h
        y = F.layer_norm(h, (D,), T_[hb + "post_attention_layernorm.weight"],
                         T_[hb + "post_attention_layernorm.bias"], eps)
        y = F.gelu(F.linear(y, T_[hb + "mlp.fc1.weight"], T_[hb + "mlp.fc1.bias"]))
        h = r + F.linear(y, T_[hb + "mlp.fc2.weight"], T_[hb + "mlp.fc2.bias"])
        outs[f"layer_{i}"] = h
    h = F.layer_norm(h, (D,), T_[HV + "layernorm_post.weight"], T_[HV + "layernorm_post.bias"], eps)
    outs["post"] = h
    h = hf_pixel_shuffle(h[:, :-1, :], d["r"])
    h = F.gelu(F.linear(h, T_[HV + "vision_adapter.mlp.fc1.weight"]))
    h = F.gelu(F.linear(h, T_[HV + "vision_adapter.mlp.fc2.weight"]))
    outs["adapter"] = h
    flat = h.reshape(-1, h.shape[-1])  # get_image_features(...).view(-1, dim)
    outs["out"] = F.linear(flat, T_["multi_modal_projector.linear_1.weight"]).reshape(B, h.shape[1], -1)
    return outs


# ----------------------------------------------------------------------------------------------------------------

def hf_config(c):
    d = dims(c)
    return {
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
        "image_token_index": 200092, "boi_token_index": 200080, "eoi_token_index": 200081,
        "tie_word_embeddings": False,
        "vision_config": {
            "model_type": "llama4_vision_model", "hidden_size": d["D"], "intermediate_size": d["F"],
            "num_hidden_layers": d["L"], "num_attention_heads": d["N"], "num_channels": d["C"],
            "image_size": c["image_size"], "patch_size": d["p"], "norm_eps": d["eps"],
            "rope_theta": d["theta"], "rope_parameters": {"rope_type": "default", "rope_theta": d["theta"]},
            "pixel_shuffle_ratio": d["r"], "projector_input_dim": d["Pin"], "projector_output_dim": d["Pout"],
            "vision_output_dim": d["Pout"], "hidden_act": "gelu", "vision_feature_select_strategy": "default",
            "multi_modal_projector_bias": False, "projector_dropout": 0.0, "attention_dropout": 0.0},
        "text_config": {"model_type": "llama4_text", "hidden_size": d["E"]},
    }


def main():
    c = CFG
    d = dims(c)
    g = rng(SEED)
    w = maxtext_weights(g, c)
    pixels = g.uniform(-1.0, 1.0, (TILES, c["image_size"], c["image_size"], c["num_channels"])).astype(F32)
    o = hf_weights(w, c)

    shapes = maxtext_shapes(c)
    assert sorted(shapes) == sorted(w), set(shapes) ^ set(w)
    for k, s in shapes.items():
        assert w[k].shape == s and w[k].dtype == np.float32, (k, w[k].shape, s)
    back = hf_to_maxtext(o, c)
    assert sorted(back) == sorted(w), set(back) ^ set(w)
    for k in w:
        assert back[k].shape == w[k].shape and back[k].dtype == np.float32, k
        assert np.array_equal(back[k], w[k]), k

    outs = maxtext_forward(w, pixels, c, b=1)
    check = hf_forward(o, pixels, c)
    diffs = {}
    for k, v in outs.items():
        assert torch.isfinite(v).all(), k
        diffs[k] = (v - check[k]).abs().max().item()
        assert diffs[k] < 1e-12, (k, diffs[k])
    want = {"unfold": (TILES, d["T"], d["D"]), "pre": (TILES, d["T"] + 1, d["D"]),
            "post": (TILES, d["T"] + 1, d["D"]), "adapter": (TILES, d["T"] // 4, d["Pout"]),
            "out": (TILES, d["T"] // 4, d["E"])}
    want.update({f"layer_{i}": (TILES, d["T"] + 1, d["D"]) for i in range(d["L"])})
    assert sorted(want) == sorted(outs)
    for k, s in want.items():
        assert tuple(outs[k].shape) == s, (k, tuple(outs[k].shape), s)

    out_dir = case_dir(CASE)
    save_npy(out_dir, "pixels", pixels)
    save_safetensors(os.path.join(out_dir, "model.safetensors"), w)
    hd = os.path.join(out_dir, "hf")
    os.makedirs(hd, exist_ok=True)
    save_safetensors(os.path.join(hd, "model.safetensors"), o, metadata={"format": "pt"})
    with open(os.path.join(hd, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=1, sort_keys=True)
    for k, v in outs.items():
        save_npy(out_dir, k, v.numpy().astype(F32))
    meta = {
        "what": "MaxText Llama 4 vision encoder (vision_encoder.Llama4VisionModel_0 + Llama4MultiModalProjector_0), "
                "float64 from float32 weights/pixels; outputs after each stage, float32",
        "vision": dict(c), "tiles": TILES, "seed": SEED,
        "pixels": "pixels.npy float32 [tiles, H, W, C] NHWC (MaxText/HF take NCHW [tiles, C, H, W])",
        "outputs": {
            "unfold": "unfold.npy [tiles, T, D]: unfold-linear output (before class / position embedding)",
            "pre": "pre.npy [tiles, T+1, D]: after layernorm_pre (CLS is the last row)",
            "layer_i": "layer_{i}.npy [tiles, T+1, D]: each encoder layer's output",
            "post": "post.npy [tiles, T+1, D]: after layernorm_post, CLS still the last row",
            "adapter": "adapter.npy [tiles, T/4, projector_output_dim]: Llama4VisionPixelShuffleMLP_0 output",
            "out": "out.npy [tiles, T/4, emb_dim]: Llama4MultiModalProjector_0 output"},
        "num_patches": d["T"], "head_dim": d["hd"],
        "hf": "hf/config.json + hf/model.safetensors: HF Llama4ForConditionalGeneration names; NOTE "
              "vision_adapter.mlp.fc2.weight is [projector_output_dim, projector_input_dim] (MaxText's layout, "
              "transposed), which transformers' Llama4VisionMLP2 ([out, out]) would only accept when the two dims "
              "are equal",
        "max_abs_diff_maxtext_vs_hf": diffs,
    }
    save_meta(out_dir, meta)
    print("wrote", out_dir)
    for k, v in outs.items():
        print(f"  {k:8s} {tuple(v.shape)} max|x| {v.abs().max().item():.3f} std {v.std().item():.3f} "
              f"maxtext-vs-hf {diffs[k]:.2e}")


if __name__ == "__main__":
    main()
