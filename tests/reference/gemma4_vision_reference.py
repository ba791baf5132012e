"""MaxText's Gemma 4 vision encoder (Gemma4VisionEncoderLayer + Gemma4VisionProjector), re-stated in PyTorch float64
from float32 inputs and weights, and checked against a second float64 forward that follows Hugging Face's formulation.

Sources read:
  MaxText, commit e591f30cbbf217ed67ef71263ec0538239f9c3b8:
    src/maxtext/models/gemma4_vision.py: factorized_posemb, patchify, VisionEntry, apply_multidimensional_rope,
      avg_pool_by_positions, VisionExit, Gemma4VisionRotaryEmbedding, Gemma4Attention, Gemma4EncoderBlock,
      Gemma4VisionEncoderLayer, Gemma4VisionProjector;
    src/maxtext/layers/attentions.py: Attention.__init__ (query_norm / key_norm / value_norm construction,
      qk_norm_with_scale, v_norm_with_scale), init_query_w (depth scaling lives only in the initializer),
      __call__ (order: projections -> q/k norm -> v norm -> rotary on q and k -> query_pre_attn_scalar (1.0: skipped));
    src/maxtext/layers/attention_op.py: generate_attention_mask (AttentionType.FULL, no segment ids -> no mask),
      apply_attention_dot / qk_product (no runtime 1/sqrt(head_dim): the logits are plain q.k);
    src/maxtext/layers/normalizations.py: RMSNorm (x * rsqrt(mean(x^2) + eps) * (scale + scale_offset), scale_offset
      = 0 here: the scale multiplies directly; with_scale=False: no scale at all);
    src/maxtext/layers/linears.py: MlpBlock (wi_0 / wi_1 / wo, no bias), _convert_to_activation_function ("gelu" ->
      flax.linen.gelu, whose default is approximate=True, i.e. the tanh form), DenseGeneral (use_bias False);
    src/maxtext/layers/encoders.py: VisionEncoder (vision_encoder.Gemma4VisionEncoderLayer_0 then
      vision_encoder.Gemma4VisionProjector_0);
    src/maxtext/configs/models/gemma4-26b.yml, gemma4-31b.yml (normalization_layer_epsilon 1e-6,
      v_norm_with_scale false, rope_theta_for_vit 100, mlp gelu), src/maxtext/configs/base.yml (qk_norm_with_scale
      true, dtype_mm float32);
    src/maxtext/checkpoint_conversion/utils/param_mapping.py: GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING and
      GEMMA4_MAXTEXT_TO_HF_PARAM_HOOK_FN (vision part).
  Hugging Face transformers (read through the code index; modeling_gemma4.py version 0246b4f3, configuration_gemma4.py
    008e5743, image_processing_pil_gemma4.py 0325565a): Gemma4ClippableLinear, Gemma4RMSNorm, Gemma4VisionPatchEmbedder,
    Gemma4VisionPooler, Gemma4VisionMLP, Gemma4VisionRotaryEmbedding, rotate_half, apply_rotary_pos_emb,
    apply_multidimensional_rope, eager_attention_forward, Gemma4VisionAttention, Gemma4VisionEncoderLayer,
    Gemma4VisionEncoder, Gemma4VisionModel, Gemma4MultimodalEmbedder, Gemma4Model.get_image_features;
    convert_image_to_patches (patch layout) in the image processor; Gemma4VisionConfig.

Math (MaxText formulation; D hidden, N heads, hd = D / N, p patch, picture H x W, gh = H/p rows, gw = W/p columns,
T = gh * gw patches, F intermediate, k pooling kernel, S = T / k^2 soft tokens, E text width):
  patchify(NHWC): [B, H, W, 3] -> [B, gh, p, gw, p, 3] -> [B, gh, gw, p, p, 3] -> [B, T, p*p*3]: patches row-major over
    the grid (row = y, column = x), each patch flattened (pixel row, pixel column, channel).
    positions_xy[t] = (x, y) = (t % gw, t // gw)  (meshgrid(arange(gw), arange(gh)) stacked as (x, y)).
  VisionEntry: x = (2 * (patches - 0.5)) @ input_projection.kernel [p*p*3, D]
               + pos_emb_param[x_t, 0, :] + pos_emb_param[y_t, 1, :]      (pos_emb_param [num_pos, 2, D]:
                 axis 1 index 0 is the x table, 1 the y table)                                          -> entry.npy
  each Gemma4EncoderBlock (layer_i):
    h = pre_attention_norm(x)                              RMSNorm(v) = v / sqrt(mean(v^2) + eps) * scale
    q = h @ query.kernel [D, N, hd]; k, v likewise (no bias)
    q = query_norm(q), k = key_norm(k)  (RMSNorm over hd with scale [hd]); v = value_norm(v) (RMSNorm over hd,
      NO scale: v_norm_with_scale false)
    2-D rotary on q and k AFTER their norms: channels [0, hd/2) rotate with the x position, [hd/2, hd) with y
      (num_rotated_channels_per_dim = 2 * (hd // 4); hd = 12 -> 6 + 6). Inside each 6-channel part (width m):
      split halves a = u[:m/2], b = u[m/2:]; freq_j = theta^(-2j/m), j < m/2; angle = pos * freq_j;
      out = [a cos - b sin, b cos + a sin]  (rotate-half form, theta = rope_theta_for_vit = 100).
    attention: softmax_s(q_t . k_s) (NO 1/sqrt(hd): query_pre_attn_scalar = 1.0 and the depth scaling is only in
      the initializer), all T patches of the same picture, no mask; o = (a v) @ out.kernel [N, hd, D]
    x = x + post_attention_norm(o)
    x = x + post_ffw_norm( (gelu_tanh(h2 @ wi_0) * (h2 @ wi_1)) @ wo ),  h2 = pre_ffw_norm(x)
      gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))                            -> layer_{i}.npy
  VisionExit (avg_pool_by_positions, vision_output_length = S): kk = floor(sqrt(T // S)) = k;
    cell(t) = x_t // k + (gw // k) * (y_t // k)  (gw = max x + 1); pooled[c] = sum_{cell(t)=c} x_t / k^2;
    then * sqrt(D)                                                                                -> pooled.npy
  standardize: (pooled - std_bias) * std_scale                                                    -> std.npy
  Gemma4VisionProjector: y = RMSNorm_noscale(std) (over D, eps) @ projection.kernel [D, E]        -> out.npy
  eps = normalization_layer_epsilon = 1e-6 for every norm (HF: rms_norm_eps 1e-6).

Hugging Face formulation (second forward, from the HF tensors): pixels NCHW -> convert_image_to_patches (reshape
  [3, gh, p, gw, p], transpose (1, 3, 2, 4, 0)), pixel_position_ids from np.meshgrid(indexing="xy"),
  input_proj nn.Linear (weight [D, p*p*3]) on 2*(x-0.5); position one-hot [B, 2, T, P] @ position_embedding_table
  [2, P, D] summed over the 2 axes; Gemma4VisionRotaryEmbedding builds cos/sin [B, T, hd] as
  cat(cos_x(hd/4), cos_x(hd/4), cos_y(hd/4), cos_y(hd/4)) with inv_freq = 1 / theta^(arange(0, hd/2, 2) / (hd/2));
  apply_multidimensional_rope splits q/k into hd/2 + hd/2 parts and applies rotate_half rope per part; eager
  attention with scaling = 1.0; Gemma4RMSNorm (x * (mean + eps)^-0.5 * weight; v_norm with_scale=False);
  Gemma4VisionMLP gate/up/down with gelu_pytorch_tanh; pooler: one_hot(kernel_idxs) / k^2, weights^T @ h, then
  * sqrt(D); (h - std_bias) * std_scale; embed_vision: RMSNorm without scale then embedding_projection (weight
  [E, D]). The two forwards must agree to 1e-12.

HF <-> MaxText weight layout (param_mapping.py hooks): input_proj.weight = input_projection.kernel.T;
  position_embedding_table = pos_emb_param.transpose(1, 0, 2); q/k/v_proj.linear.weight = kernel.reshape(D, N*hd).T;
  o_proj.linear.weight = out.kernel.reshape(N*hd, D).T; mlp gate/up/down_proj.linear.weight = wi_0/wi_1/wo.T;
  norm weights = scales as they are (Gemma 4 folds no +1 offset); std_bias / std_scale as they are;
  embed_vision.embedding_projection.weight = projection.kernel.T. The script checks the HF -> MaxText direction
  reproduces the MaxText tree bit for bit.

Controls (meta.json "controls"): max |out - out'| when the forward is changed in one way (MaxText formulation):
  rotary_axes_swapped (y positions on the first half, x on the second), pool_xy_swapped (cells indexed with x and y
  exchanged), v_norm_omitted. They show the C++ test has the power to fail.

Writes tests/fixtures/gemma4_vision/: meta.json, pixels.npy (float32 [B, H, W, 3] NHWC, uniform in [0, 1]),
  model.safetensors (MaxText names), hf/config.json + hf/model.safetensors (HF Gemma4ForConditionalGeneration names),
  entry.npy, layer_{i}.npy, pooled.npy, std.npy, out.npy (float32, computed in float64).
Run: /usr/bin/python3 tests/reference/gemma4_vision_reference.py
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
CASE = "gemma4_vision"
SEED = 6121
VE = "vision_encoder.Gemma4VisionEncoderLayer_0."
PROJ = "vision_encoder.Gemma4VisionProjector_0."
HV = "model.vision_tower."
HE = "model.embed_vision."

CFG = {"hidden_size": 48, "num_heads": 4, "intermediate_size": 80, "num_layers": 2, "patch_size": 4,
       "image_height": 24, "image_width": 36, "pooling_kernel": 3, "vision_output_length": 6,
       "num_position_embeddings": 16, "rope_theta": 100.0, "eps": 1e-6, "emb_dim": 40}
BATCH = 2


def dims(c):
    D, N = c["hidden_size"], c["num_heads"]
    p = c["patch_size"]
    gh, gw = c["image_height"] // p, c["image_width"] // p
    k = c["pooling_kernel"]
    assert gh % k == 0 and gw % k == 0 and (gh // k) * (gw // k) == c["vision_output_length"]
    return dict(D=D, N=N, hd=D // N, p=p, gh=gh, gw=gw, T=gh * gw, k=k, S=c["vision_output_length"],
                F=c["intermediate_size"], L=c["num_layers"], P=c["num_position_embeddings"], E=c["emb_dim"],
                eps=c["eps"], theta=c["rope_theta"], H=c["image_height"], W=c["image_width"])


# ----------------------------------------------------------------------------------------------------------------
# Weights: the MaxText tree, its HF image (MaxText -> HF) and the converter's HF -> MaxText direction
# ----------------------------------------------------------------------------------------------------------------

def norm_scale(g, n):
    return f32(g, (n,), 0.2, 1.0)


def maxtext_weights(g, c):
    d = dims(c)
    D, N, hd, p, F_, P, E = (d[k] for k in ("D", "N", "hd", "p", "F", "P", "E"))
    w = {}
    # inputs 2*(x-0.5) are uniform in [-1, 1] (variance 1/3): sqrt(3 / (p p 3)) keeps the projection O(1)
    w[VE + "vision_entry.input_projection.kernel"] = f32(g, (p * p * 3, D), math.sqrt(3.0 / (p * p * 3)))
    w[VE + "vision_entry.pos_emb_param"] = f32(g, (P, 2, D), 0.5)
    for i in range(d["L"]):
        pre = f"{VE}layer_{i}."
        w[pre + "pre_attention_norm.scale"] = norm_scale(g, D)
        w[pre + "attention.query.kernel"] = f32(g, (D, N, hd), 1.0 / math.sqrt(D))
        w[pre + "attention.key.kernel"] = f32(g, (D, N, hd), 1.0 / math.sqrt(D))
        w[pre + "attention.value.kernel"] = f32(g, (D, N, hd), 1.0 / math.sqrt(D))
        w[pre + "attention.out.kernel"] = f32(g, (N, hd, D), 1.0 / math.sqrt(N * hd))
        w[pre + "attention.query_norm.scale"] = norm_scale(g, hd)
        w[pre + "attention.key_norm.scale"] = norm_scale(g, hd)
        w[pre + "post_attention_norm.scale"] = norm_scale(g, D)
        w[pre + "pre_ffw_norm.scale"] = norm_scale(g, D)
        w[pre + "mlp.wi_0.kernel"] = f32(g, (D, F_), 1.0 / math.sqrt(D))
        w[pre + "mlp.wi_1.kernel"] = f32(g, (D, F_), 1.0 / math.sqrt(D))
        w[pre + "mlp.wo.kernel"] = f32(g, (F_, D), 1.0 / math.sqrt(F_))
        w[pre + "post_ffw_norm.scale"] = norm_scale(g, D)
    w[VE + "std_bias"] = f32(g, (D,), 0.5)
    w[VE + "std_scale"] = f32(g, (D,), 0.2, 1.0)
    w[PROJ + "projection.kernel"] = f32(g, (D, E), 1.0 / math.sqrt(D))
    return w


def maxtext_shapes(c):
    d = dims(c)
    D, N, hd, p, F_, P, E = (d[k] for k in ("D", "N", "hd", "p", "F", "P", "E"))
    s = {VE + "vision_entry.input_projection.kernel": (p * p * 3, D), VE + "vision_entry.pos_emb_param": (P, 2, D),
         VE + "std_bias": (D,), VE + "std_scale": (D,), PROJ + "projection.kernel": (D, E)}
    for i in range(d["L"]):
        pre = f"{VE}layer_{i}."
        for n in ("pre_attention_norm", "post_attention_norm", "pre_ffw_norm", "post_ffw_norm"):
            s[pre + n + ".scale"] = (D,)
        for n in ("query", "key", "value"):
            s[pre + f"attention.{n}.kernel"] = (D, N, hd)
        s[pre + "attention.out.kernel"] = (N, hd, D)
        s[pre + "attention.query_norm.scale"] = (hd,)
        s[pre + "attention.key_norm.scale"] = (hd,)
        s[pre + "mlp.wi_0.kernel"] = (D, F_)
        s[pre + "mlp.wi_1.kernel"] = (D, F_)
        s[pre + "mlp.wo.kernel"] = (F_, D)
    return s


_HF_NORMS = {"pre_attention_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "pre_ffw_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}
_HF_MLP = {"wi_0": "gate_proj", "wi_1": "up_proj", "wo": "down_proj"}
_HF_ATT = {"query": "q_proj", "key": "k_proj", "value": "v_proj"}


def hf_weights(w, c):
    """MaxText tree -> HF Gemma4ForConditionalGeneration vision tensors (param_mapping.py, saving_to_hf)."""
    d = dims(c)
    D, N, hd = d["D"], d["N"], d["hd"]
    o = {}
    o[HV + "patch_embedder.input_proj.weight"] = np.ascontiguousarray(w[VE + "vision_entry.input_projection.kernel"].T)
    o[HV + "patch_embedder.position_embedding_table"] = np.ascontiguousarray(
        w[VE + "vision_entry.pos_emb_param"].transpose(1, 0, 2))
    o[HV + "std_bias"] = w[VE + "std_bias"].copy()
    o[HV + "std_scale"] = w[VE + "std_scale"].copy()
    o[HE + "embedding_projection.weight"] = np.ascontiguousarray(w[PROJ + "projection.kernel"].T)
    for i in range(d["L"]):
        pre = f"{VE}layer_{i}."
        hp = f"{HV}encoder.layers.{i}."
        for m, h in _HF_NORMS.items():
            o[hp + h + ".weight"] = w[pre + m + ".scale"].copy()
        for m, h in _HF_ATT.items():
            o[hp + f"self_attn.{h}.linear.weight"] = np.ascontiguousarray(
                w[pre + f"attention.{m}.kernel"].reshape(D, N * hd).T)
        o[hp + "self_attn.o_proj.linear.weight"] = np.ascontiguousarray(
            w[pre + "attention.out.kernel"].reshape(N * hd, D).T)
        o[hp + "self_attn.q_norm.weight"] = w[pre + "attention.query_norm.scale"].copy()
        o[hp + "self_attn.k_norm.weight"] = w[pre + "attention.key_norm.scale"].copy()
        for m, h in _HF_MLP.items():
            o[hp + f"mlp.{h}.linear.weight"] = np.ascontiguousarray(w[pre + f"mlp.{m}.kernel"].T)
    return o


def hf_to_maxtext(o, c):
    """HF tensors -> MaxText tree (the converter's loading direction, hooks with saving_to_hf=False)."""
    d = dims(c)
    D, N, hd = d["D"], d["N"], d["hd"]
    w = {}
    w[VE + "vision_entry.input_projection.kernel"] = np.ascontiguousarray(o[HV + "patch_embedder.input_proj.weight"].T)
    w[VE + "vision_entry.pos_emb_param"] = np.ascontiguousarray(
        o[HV + "patch_embedder.position_embedding_table"].transpose(1, 0, 2))
    w[VE + "std_bias"] = o[HV + "std_bias"].copy()
    w[VE + "std_scale"] = o[HV + "std_scale"].copy()
    w[PROJ + "projection.kernel"] = np.ascontiguousarray(o[HE + "embedding_projection.weight"].T)
    for i in range(d["L"]):
        pre = f"{VE}layer_{i}."
        hp = f"{HV}encoder.layers.{i}."
        for m, h in _HF_NORMS.items():
            w[pre + m + ".scale"] = o[hp + h + ".weight"].copy()
        for m, h in _HF_ATT.items():
            w[pre + f"attention.{m}.kernel"] = np.ascontiguousarray(
                o[hp + f"self_attn.{h}.linear.weight"].T.reshape(D, N, hd))
        w[pre + "attention.out.kernel"] = np.ascontiguousarray(
            o[hp + "self_attn.o_proj.linear.weight"].T.reshape(N, hd, D))
        w[pre + "attention.query_norm.scale"] = o[hp + "self_attn.q_norm.weight"].copy()
        w[pre + "attention.key_norm.scale"] = o[hp + "self_attn.k_norm.weight"].copy()
        for m, h in _HF_MLP.items():
            w[pre + f"mlp.{m}.kernel"] = np.ascontiguousarray(o[hp + f"mlp.{h}.linear.weight"].T)
    return w


# ----------------------------------------------------------------------------------------------------------------
# MaxText formulation
# ----------------------------------------------------------------------------------------------------------------

def rms_norm(x, scale, eps):
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return y if scale is None else y * scale


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def patchify_maxtext(images, p):
    """[B, H, W, C] -> patches [B, T, p*p*C] (row, col, channel inside a patch) and positions_xy [T, 2] = (x, y)."""
    b, h, w_, ch = images.shape
    x = images.reshape(b, h // p, p, w_ // p, p, ch).permute(0, 1, 3, 2, 4, 5)
    patches = x.reshape(b, (h // p) * (w_ // p), p * p * ch)
    xs, ys = torch.meshgrid(torch.arange(w_ // p), torch.arange(h // p), indexing="xy")
    pos = torch.stack([xs, ys], dim=-1).reshape(-1, 2)
    return patches, pos


def factorized_posemb_maxtext(table, pos):
    """table [P, 2, D]; pos [T, 2] -> [T, D]: sum over axis i of table[pos[:, i], i, :] (one-hot einsum form)."""
    oh = F.one_hot(pos, table.shape[0]).to(table.dtype)  # [T, 2, P]
    return torch.einsum("tis,sid->itd", oh, table).sum(0)


def rope_part(u, pos, theta):
    """u [B, T, N, m]; pos [T] -> rotate-half rope with freq_j = theta^(-2j/m)."""
    m = u.shape[-1]
    j = torch.arange(m // 2, dtype=torch.float64)
    timescale = theta ** (2.0 * j / m)
    ang = pos.to(torch.float64)[:, None, None] / timescale  # [T, 1, m/2]
    s = torch.cat([torch.sin(ang), torch.sin(ang)], -1)
    co = torch.cat([torch.cos(ang), torch.cos(ang)], -1)
    a, b = u[..., : m // 2], u[..., m // 2:]
    return u * co + torch.cat([-b, a], -1) * s


def rope2d_maxtext(u, pos, theta, swap_axes=False):
    hd = u.shape[-1]
    per = 2 * (hd // 4)
    first, second = (pos[:, 1], pos[:, 0]) if swap_axes else (pos[:, 0], pos[:, 1])
    return torch.cat([rope_part(u[..., :per], first, theta), rope_part(u[..., per:], second, theta)], -1)


def encoder_block_maxtext(w, pre, x, pos, d, swap_axes=False, v_norm=True):
    eps = d["eps"]
    h = rms_norm(x, t64(w[pre + "pre_attention_norm.scale"]), eps)
    q = torch.einsum("btd,dnh->btnh", h, t64(w[pre + "attention.query.kernel"]))
    k = torch.einsum("btd,dnh->btnh", h, t64(w[pre + "attention.key.kernel"]))
    v = torch.einsum("btd,dnh->btnh", h, t64(w[pre + "attention.value.kernel"]))
    q = rms_norm(q, t64(w[pre + "attention.query_norm.scale"]), eps)
    k = rms_norm(k, t64(w[pre + "attention.key_norm.scale"]), eps)
    if v_norm:
        v = rms_norm(v, None, eps)
    q = rope2d_maxtext(q, pos, d["theta"], swap_axes)
    k = rope2d_maxtext(k, pos, d["theta"], swap_axes)
    logits = torch.einsum("btnh,bsnh->bnts", q, k)  # query_pre_attn_scalar = 1.0: no scaling
    a = torch.softmax(logits, dim=-1)
    att = torch.einsum("bnts,bsnh->btnh", a, v)
    o = torch.einsum("btnh,nhd->btd", att, t64(w[pre + "attention.out.kernel"]))
    x = x + rms_norm(o, t64(w[pre + "post_attention_norm.scale"]), eps)
    h2 = rms_norm(x, t64(w[pre + "pre_ffw_norm.scale"]), eps)
    m = gelu_tanh(h2 @ t64(w[pre + "mlp.wi_0.kernel"])) * (h2 @ t64(w[pre + "mlp.wi_1.kernel"]))
    m = m @ t64(w[pre + "mlp.wo.kernel"])
    return x + rms_norm(m, t64(w[pre + "post_ffw_norm.scale"]), eps)


def avg_pool_maxtext(x, pos, length, swap_xy=False):
    T = x.shape[1]
    k = max(1, int((T // length) ** 0.5))
    assert k * k * length == T
    px, py = (pos[:, 1], pos[:, 0]) if swap_xy else (pos[:, 0], pos[:, 1])
    max_x = px.max() + 1
    cell = px // k + (max_x // k) * (py // k)
    weights = F.one_hot(cell, length).to(torch.float64) / k ** 2  # [T, S]
    return torch.einsum("tl,btd->bld", weights, x)


def maxtext_forward(w, pixels_nhwc, c, swap_rope_axes=False, swap_pool_xy=False, v_norm=True):
    d = dims(c)
    outs = {}
    patches, pos = patchify_maxtext(t64(pixels_nhwc), d["p"])
    x = (2.0 * (patches - 0.5)) @ t64(w[VE + "vision_entry.input_projection.kernel"])
    x = x + factorized_posemb_maxtext(t64(w[VE + "vision_entry.pos_emb_param"]), pos)[None]
    outs["entry"] = x
    for i in range(d["L"]):
        x = encoder_block_maxtext(w, f"{VE}layer_{i}.", x, pos, d, swap_rope_axes, v_norm)
        outs[f"layer_{i}"] = x
    y = avg_pool_maxtext(x, pos, d["S"], swap_pool_xy) * math.sqrt(d["D"])
    outs["pooled"] = y
    y = (y - t64(w[VE + "std_bias"])) * t64(w[VE + "std_scale"])
    outs["std"] = y
    outs["out"] = rms_norm(y, None, d["eps"]) @ t64(w[PROJ + "projection.kernel"])
    return outs


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face formulation
# ----------------------------------------------------------------------------------------------------------------

def hf_rms(x, weight, eps):
    y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    return y if weight is None else y * weight


def hf_patches(pixels_nhwc, p):
    """Per picture: CHW -> convert_image_to_patches; positions from np.meshgrid(indexing='xy')."""
    pv, pid = [], []
    for img in pixels_nhwc:
        chw = np.asarray(img, dtype=np.float64).transpose(2, 0, 1)
        ch, h, w_ = chw.shape
        nh, nw = h // p, w_ // p
        pt = chw.reshape(ch, nh, p, nw, p).transpose(1, 3, 2, 4, 0).reshape(nh * nw, -1)
        gx, gy = np.meshgrid(np.arange(nw), np.arange(nh), indexing="xy")
        pv.append(pt)
        pid.append(np.stack([gx, gy], axis=-1).reshape(nh * nw, 2))
    return torch.from_numpy(np.stack(pv)), torch.from_numpy(np.stack(pid)).long()


def hf_cos_sin(pid, hd, theta):
    spatial = hd // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, spatial, 2, dtype=torch.float64) / spatial))
    cs, ss = [], []
    for i in range(2):
        fr = pid[:, :, i].to(torch.float64)[..., None] * inv_freq  # [B, T, hd/4]
        emb = torch.cat([fr, fr], -1)
        cs.append(emb.cos())
        ss.append(emb.sin())
    return torch.cat(cs, -1), torch.cat(ss, -1)


def hf_rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def hf_multidim_rope(x, cos, sin):
    """x [B, T, N, hd]; cos/sin [B, T, hd] (unsqueeze_dim 2)."""
    per = 2 * (x.shape[-1] // 4)
    parts = []
    for kk in range(2):
        sl = slice(kk * per, (kk + 1) * per)
        c_ = cos[..., sl].unsqueeze(2)
        s_ = sin[..., sl].unsqueeze(2)
        parts.append(x[..., sl] * c_ + hf_rotate_half(x[..., sl]) * s_)
    return torch.cat(parts, -1)


def hf_forward(o, pixels_nhwc, c):
    d = dims(c)
    D, N, hd, eps = d["D"], d["N"], d["hd"], d["eps"]
    T64 = t64
    outs = {}
    pv, pid = hf_patches(pixels_nhwc, d["p"])
    B, T = pv.shape[:2]
    h = F.linear(2 * (pv - 0.5), T64(o[HV + "patch_embedder.input_proj.weight"]))
    oh = F.one_hot(pid, num_classes=d["P"]).permute(0, 2, 1, 3).to(torch.float64)  # [B, 2, T, P]
    h = h + (oh @ T64(o[HV + "patch_embedder.position_embedding_table"])).sum(1)
    outs["entry"] = h
    cos, sin = hf_cos_sin(pid, hd, d["theta"])
    for i in range(d["L"]):
        hp = f"{HV}encoder.layers.{i}."
        res = h
        x = hf_rms(h, T64(o[hp + "input_layernorm.weight"]), eps)
        q = F.linear(x, T64(o[hp + "self_attn.q_proj.linear.weight"])).view(B, T, N, hd)
        q = hf_multidim_rope(hf_rms(q, T64(o[hp + "self_attn.q_norm.weight"]), eps), cos, sin).transpose(1, 2)
        k = F.linear(x, T64(o[hp + "self_attn.k_proj.linear.weight"])).view(B, T, N, hd)
        k = hf_multidim_rope(hf_rms(k, T64(o[hp + "self_attn.k_norm.weight"]), eps), cos, sin).transpose(1, 2)
        v = F.linear(x, T64(o[hp + "self_attn.v_proj.linear.weight"])).view(B, T, N, hd)
        v = hf_rms(v, None, eps).transpose(1, 2)
        aw = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * 1.0, dim=-1)
        ao = torch.matmul(aw, v).transpose(1, 2).reshape(B, T, N * hd)
        ao = F.linear(ao, T64(o[hp + "self_attn.o_proj.linear.weight"]))
        h = res + hf_rms(ao, T64(o[hp + "post_attention_layernorm.weight"]), eps)
        res = h
        x = hf_rms(h, T64(o[hp + "pre_feedforward_layernorm.weight"]), eps)
        gate = F.gelu(F.linear(x, T64(o[hp + "mlp.gate_proj.linear.weight"])), approximate="tanh")
        up = F.linear(x, T64(o[hp + "mlp.up_proj.linear.weight"]))
        x = F.linear(gate * up, T64(o[hp + "mlp.down_proj.linear.weight"]))
        h = res + hf_rms(x, T64(o[hp + "post_feedforward_layernorm.weight"]), eps)
        outs[f"layer_{i}"] = h
    # pooler (output_length = num_patches // k^2)
    length = T // (d["k"] ** 2)
    kk = int((T // length) ** 0.5)
    cl = pid.clamp(min=0)
    max_x = cl[..., 0].max(dim=-1, keepdim=True)[0] + 1
    ki = torch.div(cl, kk, rounding_mode="floor")
    ki = ki[..., 0] + (max_x // kk) * ki[..., 1]
    wts = F.one_hot(ki.long(), length).to(torch.float64) / kk ** 2
    y = (wts.transpose(1, 2) @ h) * D ** 0.5
    outs["pooled"] = y
    y = (y - T64(o[HV + "std_bias"])) * T64(o[HV + "std_scale"])
    outs["std"] = y
    outs["out"] = F.linear(hf_rms(y, None, eps), T64(o[HE + "embedding_projection.weight"]))
    return outs


def hf_vision_config(c):
    d = dims(c)
    return {"model_type": "gemma4_vision", "hidden_size": d["D"], "intermediate_size": d["F"],
            "num_hidden_layers": d["L"], "num_attention_heads": d["N"], "num_key_value_heads": d["N"],
            "head_dim": d["hd"], "patch_size": d["p"], "pooling_kernel_size": d["k"],
            "position_embedding_size": d["P"], "rms_norm_eps": d["eps"],
            "rope_parameters": {"rope_type": "default", "rope_theta": d["theta"]}, "standardize": True,
            "use_clipped_linears": False, "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
            "attention_dropout": 0.0}


def hf_config(c):
    d = dims(c)
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "vision_config": hf_vision_config(c),
            "text_config": {"model_type": "gemma4_text", "hidden_size": d["E"]},
            "image_token_id": 258880, "boi_token_id": 255999, "eoi_token_id": 258882}


def main():
    c = CFG
    d = dims(c)
    g = rng(SEED)
    w = maxtext_weights(g, c)
    pixels = g.uniform(0.0, 1.0, (BATCH, d["H"], d["W"], 3)).astype(F32)
    o = hf_weights(w, c)

    shapes = maxtext_shapes(c)
    assert sorted(shapes) == sorted(w), set(shapes) ^ set(w)
    for k, s in shapes.items():
        assert w[k].shape == s and w[k].dtype == np.float32, (k, w[k].shape, s)
    back = hf_to_maxtext(o, c)
    assert sorted(back) == sorted(w), set(back) ^ set(w)
    for k in w:
        assert np.array_equal(back[k], w[k]), k

    outs = maxtext_forward(w, pixels, c)
    check = hf_forward(o, pixels, c)
    diffs = {}
    for k, v in outs.items():
        assert torch.isfinite(v).all(), k
        diffs[k] = (v - check[k]).abs().max().item()
        assert diffs[k] < 1e-12, (k, diffs[k])
    want = {"entry": (BATCH, d["T"], d["D"]), "pooled": (BATCH, d["S"], d["D"]), "std": (BATCH, d["S"], d["D"]),
            "out": (BATCH, d["S"], d["E"])}
    want.update({f"layer_{i}": (BATCH, d["T"], d["D"]) for i in range(d["L"])})
    assert sorted(want) == sorted(outs)
    for k, s in want.items():
        assert tuple(outs[k].shape) == s, (k, tuple(outs[k].shape), s)

    ref = outs["out"]
    controls = {
        "rotary_axes_swapped": (maxtext_forward(w, pixels, c, swap_rope_axes=True)["out"] - ref).abs().max().item(),
        "pool_xy_swapped": (maxtext_forward(w, pixels, c, swap_pool_xy=True)["out"] - ref).abs().max().item(),
        "v_norm_omitted": (maxtext_forward(w, pixels, c, v_norm=False)["out"] - ref).abs().max().item(),
    }

    out_dir = case_dir(CASE)
    save_npy(out_dir, "pixels", pixels)
    save_safetensors(os.path.join(out_dir, "model.safetensors"), w)
    hd_ = os.path.join(out_dir, "hf")
    os.makedirs(hd_, exist_ok=True)
    save_safetensors(os.path.join(hd_, "model.safetensors"), o, metadata={"format": "pt"})
    with open(os.path.join(hd_, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=1, sort_keys=True)
    for k, v in outs.items():
        save_npy(out_dir, k, v.numpy().astype(F32))
    meta = {
        "what": "MaxText Gemma 4 vision encoder (vision_encoder.Gemma4VisionEncoderLayer_0 + Gemma4VisionProjector_0),"
                " float64 from float32 weights/pixels; outputs after each stage, float32",
        "vision": dict(c), "batch": BATCH, "seed": SEED, "head_dim": d["hd"], "num_patches": d["T"],
        "config_maxtext": {"vision_encoder_block": "gemma4", "use_multimodal": True, "hidden_size_for_vit": d["D"],
                           "num_attention_heads_for_vit": d["N"], "intermediate_size_for_vit": d["F"],
                           "num_hidden_layers_for_vit": d["L"], "patch_size_for_vit": d["p"],
                           "image_size_for_vit": [d["H"], d["W"]], "num_position_embeddings_for_vit": d["P"],
                           "rope_theta_for_vit": d["theta"], "vision_output_length": d["S"], "emb_dim": d["E"],
                           "normalization_layer_epsilon": d["eps"], "v_norm_with_scale": False,
                           "qk_norm_with_scale": True, "dtype_mm": "float32"},
        "patch_grid_hw": [d["gh"], d["gw"]], "soft_tokens_per_picture": d["S"],
        "pixels": "pixels.npy float32 [B, H, W, 3] NHWC, uniform in [0, 1] (MaxText's encoder input layout)",
        "outputs": {
            "entry": "entry.npy [B, T, D]: VisionEntry output = (2*(patches-0.5)) @ input_projection + factorized "
                     "position embedding",
            "layer_i": "layer_{i}.npy [B, T, D]: each Gemma4EncoderBlock's output",
            "pooled": "pooled.npy [B, S, D]: VisionExit output (avg pool by positions, then * sqrt(D))",
            "std": "std.npy [B, S, D]: (pooled - std_bias) * std_scale (Gemma4VisionEncoderLayer output, with "
                   "MaxText's extra num-images axis squeezed)",
            "out": "out.npy [B, S, emb_dim]: Gemma4VisionProjector output (RMSNorm without scale, then "
                   "projection.kernel)"},
        "conventions": {
            "gelu": "tanh approximation (flax.linen.gelu default approximate=True; HF gelu_pytorch_tanh)",
            "rms_norm": "x / sqrt(mean(x^2) + eps) * scale; the scale multiplies directly (no 1 + scale); "
                        "value norm and projector norm have no scale",
            "attention_scale": "1.0 (no 1/sqrt(head_dim)); q/k RMSNorm then rotary; v RMSNorm (no scale)",
            "rotary": "channels [0, hd/2) rotate with x (column), [hd/2, hd) with y (row); rotate-half inside each "
                      "part; freq_j = theta^(-2j/(hd/2)), j < hd/4; theta 100",
            "positions": "patch t (row-major over the grid) has (x, y) = (t % gw, t // gw)",
            "patch_flatten": "(pixel row, pixel column, channel)",
            "pos_emb_param": "[num_pos, 2, D]: [:, 0] indexed by x, [:, 1] by y; HF position_embedding_table "
                             "[2, num_pos, D] = transpose(1, 0, 2)",
            "pooling": "cell = x // k + (gw // k) * (y // k): soft tokens row-major over the pooled grid; mean of "
                       "k*k patches, then * sqrt(D)"},
        "hf": "hf/config.json + hf/model.safetensors: HF Gemma4ForConditionalGeneration vision tensor names "
              "(model.vision_tower.*, model.embed_vision.*) and layouts; the text_config there is a stub",
        "max_abs_diff_maxtext_vs_hf": diffs,
        "controls": {"what": "max |out.npy - out'| (float64) when the forward is changed in one way", **controls},
    }
    save_meta(out_dir, meta)
    print("wrote", out_dir)
    for k, v in outs.items():
        print(f"  {k:8s} {tuple(v.shape)} max|x| {v.abs().max().item():.3f} std {v.std().item():.3f} "
              f"maxtext-vs-hf {diffs[k]:.2e}")
    print("  controls", controls)


if __name__ == "__main__":
    main()
