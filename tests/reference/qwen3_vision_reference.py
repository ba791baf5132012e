"""MaxText's Qwen3-Omni / Qwen3.5 vision tower (Qwen3OmniMoeVisionEncoder + Qwen3OmniMoeVisionProjector; Qwen3.5's
Qwen3_5MoeVisionEncoder / Qwen3_5MoeVisionProjector subclass them unchanged), re-stated in PyTorch float64 from
float32 inputs and weights, and checked against a second, differently organised float64 forward that follows Hugging
Face's formulation.

Sources read:
  MaxText, commit e591f30cbbf217ed67ef71263ec0538239f9c3b8:
    src/maxtext/models/qwen3.py: Qwen3OmniMoeVisionPatchMerger, Qwen3OmniMoeVisionMLP, Qwen3OmniMoeVisionPatchEmbed,
      Qwen3OmniMoeVisionAttention, Qwen3OmniMoeVisionBlock, Qwen3OmniMoeVisionEncoder, Qwen3OmniMoeVisionProjector;
    src/maxtext/models/qwen3_5_vision.py: Qwen3_5MoeVisionEncoder / Qwen3_5MoeVisionProjector (plain subclasses);
    src/maxtext/layers/embeddings.py: Qwen3OmniMoeVisionRotaryEmbedding, generate_block_coords,
      Qwen3OmniMoeVisionPosEmbedInterpolate;
    src/maxtext/layers/attentions.py: Attention (is_vision + model_name "qwen3*" -> Qwen3OmniMoeVisionRotaryEmbedding,
      use_bias_in_projections, query_pre_attn_scalar applied to q after rotary, out projection [N, hd, D]);
    src/maxtext/layers/encoders.py: VisionEncoder (module names under "vision_encoder"; the projector gets the
      encoder's last hidden state, the deep features are returned beside it);
    src/maxtext/multimodal/processor_qwen3_omni.py: pre_process_qwen3_image (patch flattening, image = one frame
      repeated temporal_patch_size times), preprocess_mm_data_qwen3_omni (reshape to [1, C, tp*t, p*gh, p*gw]);
    src/maxtext/configs/models/qwen3.5-35b-a3b.yml, qwen3-omni-30b-a3b.yml (normalization_layer_epsilon 1e-6,
      deepstack [] vs [8, 16, 24]), src/maxtext/configs/base.yml (rope_theta_for_vit 10000);
    src/maxtext/checkpoint_conversion/utils/param_mapping.py: the QWEN3_OMNI and QWEN3_5 vision mappings and hooks.
  Hugging Face transformers (code index): models/qwen3_5_moe/modeling_qwen3_5_moe.py (commit 5fd974ea):
    Qwen3_5MoeVisionRotaryEmbedding, Qwen3_5MoeVisionMLP, Qwen3_5MoeVisionPatchEmbed, Qwen3_5MoeVisionPatchMerger,
    apply_rotary_pos_emb_vision, Qwen3_5MoeVisionAttention, Qwen3_5MoeVisionBlock, Qwen3_5MoeVisionModel
    (rot_pos_emb, fast_pos_embed_interpolate, forward), Qwen3_5MoeModel.get_image_features;
    configuration_qwen3_5_moe.py (Qwen3_5MoeVisionConfig: hidden_act gelu_pytorch_tanh, no deepstack);
    Qwen3-VL's deepstack_merger_list (Qwen3VLVisionPatchMerger(use_postshuffle_norm=True), applied to the output of
    block deepstack_visual_indexes[j]) and Qwen3-Omni's Qwen3OmniMoeVisionPatchMerger (ln_q, mlp = [Linear, nn.GELU(),
    Linear]); models/qwen2_vl/image_processing_qwen2_vl.py (patch layout).

Math (MaxText formulation). D hidden, N heads, hd = D/N, F intermediate, p patch, tp temporal patch, m merge, O out,
G = sqrt(num_position_embeddings); one image with grid (t, h, w) in patches, S = t*h*w tokens:
  input: pixel_values [S, C*tp*p*p] (processor order, see qwen3_vision_preprocess.py); MaxText feeds the same buffer
    as [1, C, tp*t, p*h, p*w] and reshapes it back to [S, C, tp, p, p].
  patch embed (nnx.Conv, kernel = stride = (tp, p, p)): x[s] = sum_{c,a,y,x} P[s, c, a, y, x] K[a, y, x, c, :] + b
    K [tp, p, p, C, D] ("patch_embed.proj.kernel"), b [D]                                  -> patch_embed.npy
  token coordinates (generate_block_coords; merge-window order): for token s, q = s mod (h*w):
    ic = q mod m, ir = (q div m) mod m, wc = (q div m^2) mod (w/m), wr = q div ((w/m) m^2);
    row = wr*m + ir, col = wc*m + ic.   (Frames of a video repeat the same coordinates.)
  learned positions (Qwen3OmniMoeVisionPosEmbedInterpolate; bilinear, align_corners=True):
    y = row / max(h-1, 1) * (G-1), xq = col / max(w-1, 1) * (G-1)   (= torch.linspace(0, G-1, h)[row]);
    y0 = floor(y), y1 = min(y0+1, G-1), dy = y - y0 (same for x); table = pos_embed.reshape(G, G, D) (row-major);
    pos = (1-dy)(1-dx) T[y0,x0] + (1-dy) dx T[y0,x1] + dy (1-dx) T[y1,x0] + dy dx T[y1,x1]   -> pos.npy
    x = x + pos
  2-D rotary (Qwen3OmniMoeVisionRotaryEmbedding, every block, on q and k): inv[j] = theta^(-2j/(hd/2)),
    j = 0 .. hd/4-1; a = [row*inv, col*inv] (hd/2 angles), a = [a, a] (hd angles);
    rot(v) = v * cos(a) + rotate_half(v) * sin(a), rotate_half(v) = [-v[hd/2:], v[:hd/2]].
    So channel i and i+hd/2 form a pair turned by a[i]; i < hd/4 uses the ROW (h) coordinate, hd/4 <= i < hd/2 the
    COLUMN (w) coordinate.
  block (Qwen3OmniMoeVisionBlock), L times:
    y = LN1(x); q = y Wq [D, N, hd] + bq [N, hd]; k, v likewise; q, k = rot(q), rot(k); q = q * hd^-0.5;
    A = softmax_t(q_s . k_t) over all S tokens of the image (AttentionType.FULL, no mask);
    x = x + (A v) Wo [N, hd, D] + bo [D];
    x = x + gelu_tanh(LN2(x) W1 [D, F] + b1) W2 [F, D] + b2   ("mlp", "mlp_out"; jax.nn.gelu = tanh form)
                                                                                             -> block_{i}.npy
    LN = flax nnx.LayerNorm: (x - mean) / sqrt(var + eps) * scale + bias, biased variance, eps = 1e-6.
  deepstack mergers (merger_{j}, use_postshuffle_norm=True) on block deepstack_visual_indexes[j]'s output:
    z = reshape(x, [S/m^2, m^2 D]) (4 consecutive tokens = one 2x2 window, concatenated in token order);
    z = LN(z) over m^2 D; z = gelu_tanh(z W0 [m^2 D, m^2 D] + b0) W2 [m^2 D, O] + b2          -> deep_{j}.npy
  projector (Qwen3OmniMoeVisionProjector.merger, use_postshuffle_norm=False) on the LAST block's output:
    z = LN(x) per token over D; z = reshape(z, [S/m^2, m^2 D]); same MLP (gelu_tanh)           -> merged.npy
  theta = rope_theta_for_vit = 10000; eps = normalization_layer_epsilon = 1e-6 (both model ymls; base.yml's 1e-5 is
  overridden); HF hard-codes eps 1e-6 in every vision LayerNorm.

Hugging Face formulation (second forward over both images at once): F.conv3d on [S, C, tp, p, p] with
  proj.weight [D, C, tp, p, p]; positions interpolated in row-major (h, w) order from torch.linspace in an explicit
  per-token loop, then permuted view(t, h/m, m, w/m, m, D).permute(0, 1, 3, 2, 4, 5); rotary coordinates built by
  explicit loops; fused qkv nn.Linear [3D, D] split (3, N, hd); attention per image (cu_seqlens, block-diagonal),
  scale hd^-0.5 on the logits; proj nn.Linear; mlp linear_fc1 / gelu_pytorch_tanh / linear_fc2; deepstack mergers
  and the final merger with norm / linear_fc1 / GELU / linear_fc2. The stage-by-stage comparison uses the tanh GELU in
  the mergers (MaxText's) and must agree to 1e-12.

Where MaxText and HF differ:
  * merger GELU: MaxText calls jax.nn.gelu (approximate=True, tanh form) in all mergers; HF uses nn.GELU() (exact,
    erf form) in the final merger and the deepstack mergers (Qwen3-VL, Qwen3.5, Qwen3-Omni alike). Blocks agree
    (both tanh). merged_hf.npy / deep_hf_{j}.npy hold the HF (erf) results; meta.json records the gap.
  * several images: HF runs them as one sequence with block-diagonal attention (cu_seqlens); MaxText's encoder takes
    one grid per call (a batch must share one grid), so each image here is encoded on its own and the results are
    concatenated along tokens, which is the same math. (Videos: HF's cu_seqlens also split attention per frame,
    MaxText attends across all frames; not exercised here.)
  * Qwen3.5's HF vision model has no deepstack mergers; this fixture keeps two (Qwen3-Omni / Qwen3-VL style) so the
    path is exercised; set deepstack_visual_indexes = [] for the real Qwen3.5.

HF <-> MaxText weight mapping (param_mapping.py hooks): patch_embed.proj.weight [D, C, tp, p, p]
  .transpose(2, 3, 4, 1, 0) -> kernel [tp, p, p, C, D]; attn.qkv.weight [3D, D] rows [0, D) / [D, 2D) / [2D, 3D) ->
  query / key / value, each .T.reshape(D, N, hd); attn.qkv.bias likewise -> [N, hd]; attn.proj.weight.T.reshape
  (N, hd, D) -> out.kernel; every other Linear weight .T; LayerNorm weight -> scale; pos_embed.weight as is. The script
  checks that mapping the HF tensors back reproduces the MaxText tree bit for bit.

Writes tests/fixtures/qwen3_vision/ (see meta.json "files").
Run: /usr/bin/python3 tests/reference/qwen3_vision_reference.py
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
from qwen3_vision_preprocess import image_to_pixel_values, normalize, to_maxtext_5d  # noqa: E402

F32 = np.float32
CASE = "qwen3_vision"
SEED = 3571
ENC = "vision_encoder.Qwen3OmniMoeVisionEncoder_0."
PRJ = "vision_encoder.Qwen3OmniMoeVisionProjector_0."
ENC35 = "vision_encoder.Qwen3_5MoeVisionEncoder_0."
PRJ35 = "vision_encoder.Qwen3_5MoeVisionProjector_0."
HV = "model.visual."

CFG = {"hidden_size": 32, "num_heads": 4, "intermediate_size": 48, "depth": 3, "patch_size": 4,
       "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 24, "num_position_embeddings": 16,
       "deepstack_visual_indexes": [0, 2], "eps": 1e-6, "rope_theta": 10000.0, "in_channels": 3}
GRIDS = [(1, 6, 8), (1, 4, 4)]  # (t, h, w) in patches: 24 x 32 and 16 x 16 pixels
MEAN = [0.5, 0.5, 0.5]
STD = [0.5, 0.5, 0.5]


def dims(c):
    D, N = c["hidden_size"], c["num_heads"]
    return dict(D=D, N=N, hd=D // N, F=c["intermediate_size"], L=c["depth"], p=c["patch_size"],
                tp=c["temporal_patch_size"], m=c["spatial_merge_size"], O=c["out_hidden_size"],
                G=int(round(math.sqrt(c["num_position_embeddings"]))), C=c["in_channels"], eps=c["eps"],
                theta=c["rope_theta"], deep=list(c["deepstack_visual_indexes"]))


# ----------------------------------------------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------------------------------------------

def _ln(g, w, name, n):
    w[name + ".scale"] = f32(g, (n,), 0.1, 1.0)
    w[name + ".bias"] = f32(g, (n,), 0.05)


def _dense(g, w, name, shape, fan_in, gain=1.0):
    w[name + ".kernel"] = f32(g, shape, gain / math.sqrt(fan_in))


def maxtext_weights(g, c):
    d = dims(c)
    D, N, hd, F_, p, tp, m, O, G, C = (d[k] for k in ("D", "N", "hd", "F", "p", "tp", "m", "O", "G", "C"))
    w = {}
    # pixels are uniform-ish in [-1, 1] (variance ~1/3) and the two temporal slots are equal (an image)
    w[ENC + "patch_embed.proj.kernel"] = f32(g, (tp, p, p, C, D), math.sqrt(3.0 / (C * tp * p * p)))
    w[ENC + "patch_embed.proj.bias"] = f32(g, (D,), 0.05)
    w[ENC + "pos_embed_interpolate.pos_embed"] = f32(g, (G * G, D), 0.7)
    for i in range(d["L"]):
        b = f"{ENC}blocks_{i}."
        _ln(g, w, b + "ln1", D)
        _ln(g, w, b + "ln2", D)
        for nm in ("query", "key", "value"):
            _dense(g, w, b + "attn.attn." + nm, (D, N, hd), D, 1.5 if nm != "value" else 1.0)
            w[b + "attn.attn." + nm + ".bias"] = f32(g, (N, hd), 0.05)
        _dense(g, w, b + "attn.attn.out", (N, hd, D), D)
        w[b + "attn.attn.out.bias"] = f32(g, (D,), 0.05)
        _dense(g, w, b + "mlp", (D, F_), D)
        w[b + "mlp.bias"] = f32(g, (F_,), 0.05)
        _dense(g, w, b + "mlp_out", (F_, D), F_)
        w[b + "mlp_out.bias"] = f32(g, (D,), 0.05)
    M = m * m * D
    mergers = [f"{ENC}merger_{j}." for j in range(len(d["deep"]))] + [PRJ + "merger."]
    for j, b in enumerate(mergers):
        _ln(g, w, b + "ln_q", M if j < len(d["deep"]) else D)
        _dense(g, w, b + "mlp_0", (M, M), M, 1.5)
        w[b + "mlp_0.bias"] = f32(g, (M,), 0.05)
        _dense(g, w, b + "mlp_2", (M, O), M)
        w[b + "mlp_2.bias"] = f32(g, (O,), 0.05)
    return w


def maxtext_shapes(c):
    d = dims(c)
    D, N, hd, F_, p, tp, m, O, G, C = (d[k] for k in ("D", "N", "hd", "F", "p", "tp", "m", "O", "G", "C"))
    s = {ENC + "patch_embed.proj.kernel": (tp, p, p, C, D), ENC + "patch_embed.proj.bias": (D,),
         ENC + "pos_embed_interpolate.pos_embed": (G * G, D)}
    for i in range(d["L"]):
        b = f"{ENC}blocks_{i}."
        for ln in ("ln1", "ln2"):
            s[b + ln + ".scale"] = (D,)
            s[b + ln + ".bias"] = (D,)
        for nm in ("query", "key", "value"):
            s[b + "attn.attn." + nm + ".kernel"] = (D, N, hd)
            s[b + "attn.attn." + nm + ".bias"] = (N, hd)
        s[b + "attn.attn.out.kernel"] = (N, hd, D)
        s[b + "attn.attn.out.bias"] = (D,)
        s[b + "mlp.kernel"], s[b + "mlp.bias"] = (D, F_), (F_,)
        s[b + "mlp_out.kernel"], s[b + "mlp_out.bias"] = (F_, D), (D,)
    M = m * m * D
    for j in range(len(d["deep"]) + 1):
        b = f"{ENC}merger_{j}." if j < len(d["deep"]) else PRJ + "merger."
        n = M if j < len(d["deep"]) else D
        s[b + "ln_q.scale"], s[b + "ln_q.bias"] = (n,), (n,)
        s[b + "mlp_0.kernel"], s[b + "mlp_0.bias"] = (M, M), (M,)
        s[b + "mlp_2.kernel"], s[b + "mlp_2.bias"] = (M, O), (O,)
    return s


def hf_weights(w, c):
    """MaxText tree -> HF Qwen3_5MoeForConditionalGeneration names (model.visual.*); the deepstack mergers use
    Qwen3-VL's names model.visual.deepstack_merger_list.{j}.{norm,linear_fc1,linear_fc2} (Qwen3.5 has none)."""
    d = dims(c)
    D = d["D"]
    kern = w[ENC + "patch_embed.proj.kernel"]
    o = {HV + "patch_embed.proj.weight": np.ascontiguousarray(kern.transpose(4, 3, 0, 1, 2)),
         HV + "patch_embed.proj.bias": w[ENC + "patch_embed.proj.bias"],
         HV + "pos_embed.weight": w[ENC + "pos_embed_interpolate.pos_embed"]}
    for i in range(d["L"]):
        b, h = f"{ENC}blocks_{i}.", f"{HV}blocks.{i}."
        for ln, hn in (("ln1", "norm1"), ("ln2", "norm2")):
            o[h + hn + ".weight"] = w[b + ln + ".scale"]
            o[h + hn + ".bias"] = w[b + ln + ".bias"]
        o[h + "attn.qkv.weight"] = np.ascontiguousarray(np.concatenate(
            [w[b + "attn.attn." + nm + ".kernel"].reshape(D, D).T for nm in ("query", "key", "value")], axis=0))
        o[h + "attn.qkv.bias"] = np.concatenate(
            [w[b + "attn.attn." + nm + ".bias"].reshape(D) for nm in ("query", "key", "value")])
        o[h + "attn.proj.weight"] = np.ascontiguousarray(w[b + "attn.attn.out.kernel"].reshape(D, D).T)
        o[h + "attn.proj.bias"] = w[b + "attn.attn.out.bias"]
        o[h + "mlp.linear_fc1.weight"] = np.ascontiguousarray(w[b + "mlp.kernel"].T)
        o[h + "mlp.linear_fc1.bias"] = w[b + "mlp.bias"]
        o[h + "mlp.linear_fc2.weight"] = np.ascontiguousarray(w[b + "mlp_out.kernel"].T)
        o[h + "mlp.linear_fc2.bias"] = w[b + "mlp_out.bias"]
    pairs = [(f"{ENC}merger_{j}.", f"{HV}deepstack_merger_list.{j}.") for j in range(len(d["deep"]))]
    pairs.append((PRJ + "merger.", HV + "merger."))
    for b, h in pairs:
        o[h + "norm.weight"] = w[b + "ln_q.scale"]
        o[h + "norm.bias"] = w[b + "ln_q.bias"]
        o[h + "linear_fc1.weight"] = np.ascontiguousarray(w[b + "mlp_0.kernel"].T)
        o[h + "linear_fc1.bias"] = w[b + "mlp_0.bias"]
        o[h + "linear_fc2.weight"] = np.ascontiguousarray(w[b + "mlp_2.kernel"].T)
        o[h + "linear_fc2.bias"] = w[b + "mlp_2.bias"]
    return o


def hf_to_maxtext(o, c):
    """The converter's HF -> MaxText direction (param_mapping.py QWEN3_OMNI / QWEN3_5 vision hooks)."""
    d = dims(c)
    D, N, hd = d["D"], d["N"], d["hd"]
    conv = o[HV + "patch_embed.proj.weight"]
    w = {ENC + "patch_embed.proj.kernel": np.ascontiguousarray(conv.transpose(2, 3, 4, 1, 0)),
         ENC + "patch_embed.proj.bias": o[HV + "patch_embed.proj.bias"],
         ENC + "pos_embed_interpolate.pos_embed": o[HV + "pos_embed.weight"]}
    for i in range(d["L"]):
        b, h = f"{ENC}blocks_{i}.", f"{HV}blocks.{i}."
        for ln, hn in (("ln1", "norm1"), ("ln2", "norm2")):
            w[b + ln + ".scale"] = o[h + hn + ".weight"]
            w[b + ln + ".bias"] = o[h + hn + ".bias"]
        qkv, qkvb = o[h + "attn.qkv.weight"], o[h + "attn.qkv.bias"]
        for k, nm in enumerate(("query", "key", "value")):
            w[b + "attn.attn." + nm + ".kernel"] = np.ascontiguousarray(qkv[k * D:(k + 1) * D, :].T.reshape(D, N, hd))
            w[b + "attn.attn." + nm + ".bias"] = qkvb[k * D:(k + 1) * D].reshape(N, hd)
        w[b + "attn.attn.out.kernel"] = np.ascontiguousarray(o[h + "attn.proj.weight"].T.reshape(N, hd, D))
        w[b + "attn.attn.out.bias"] = o[h + "attn.proj.bias"]
        w[b + "mlp.kernel"] = np.ascontiguousarray(o[h + "mlp.linear_fc1.weight"].T)
        w[b + "mlp.bias"] = o[h + "mlp.linear_fc1.bias"]
        w[b + "mlp_out.kernel"] = np.ascontiguousarray(o[h + "mlp.linear_fc2.weight"].T)
        w[b + "mlp_out.bias"] = o[h + "mlp.linear_fc2.bias"]
    pairs = [(f"{ENC}merger_{j}.", f"{HV}deepstack_merger_list.{j}.") for j in range(len(d["deep"]))]
    pairs.append((PRJ + "merger.", HV + "merger."))
    for b, h in pairs:
        w[b + "ln_q.scale"] = o[h + "norm.weight"]
        w[b + "ln_q.bias"] = o[h + "norm.bias"]
        w[b + "mlp_0.kernel"] = np.ascontiguousarray(o[h + "linear_fc1.weight"].T)
        w[b + "mlp_0.bias"] = o[h + "linear_fc1.bias"]
        w[b + "mlp_2.kernel"] = np.ascontiguousarray(o[h + "linear_fc2.weight"].T)
        w[b + "mlp_2.bias"] = o[h + "linear_fc2.bias"]
    return w


def omni_hf_name(name):
    """HF Qwen3-Omni (thinker.visual.*) name for an HF-Qwen3.5/VL name written here."""
    n = name.replace(HV, "thinker.visual.").replace("deepstack_merger_list.", "merger_list.")
    if ".merger" in n:
        n = n.replace(".norm.", ".ln_q.").replace(".linear_fc1.", ".mlp.0.").replace(".linear_fc2.", ".mlp.2.")
    return n


def hf_config(c):
    d = dims(c)
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "vision_config": {"model_type": "qwen3_5_moe", "depth": d["L"], "hidden_size": d["D"],
                          "intermediate_size": d["F"], "num_heads": d["N"], "patch_size": d["p"],
                          "temporal_patch_size": d["tp"], "spatial_merge_size": d["m"], "out_hidden_size": d["O"],
                          "num_position_embeddings": c["num_position_embeddings"],
                          "deepstack_visual_indexes": d["deep"], "hidden_act": "gelu_pytorch_tanh",
                          "in_channels": d["C"], "initializer_range": 0.02},
        "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": d["O"]},
    }


# ----------------------------------------------------------------------------------------------------------------
# Shared math helpers (float64)
# ----------------------------------------------------------------------------------------------------------------

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(x, scale, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * scale + bias


# ----------------------------------------------------------------------------------------------------------------
# MaxText formulation (one image per call, as the encoder is called)
# ----------------------------------------------------------------------------------------------------------------

def mt_coords(t, h, w, m, row_major=False):
    """generate_block_coords: (row, col) per token, merge-window order (row_major=True: plain raster, a control)."""
    s = torch.arange(t * h * w) % (h * w)
    if row_major:
        return s // w, s % w
    ic = s % m
    ir = (s // m) % m
    wc = (s // (m * m)) % (w // m)
    wr = s // ((w // m) * m * m)
    return wr * m + ir, wc * m + ic


def mt_pos(table_flat, G, h, row, col, w, align_corners=True):
    table = table_flat.reshape(G, G, -1)
    if align_corners:
        y = row.double() / max(h - 1, 1) * (G - 1)
        x = col.double() / max(w - 1, 1) * (G - 1)
    else:  # control: half-pixel centres (F.interpolate align_corners=False), negative sources clamped to 0
        y = ((row.double() + 0.5) * G / h - 0.5).clamp(min=0.0)
        x = ((col.double() + 0.5) * G / w - 0.5).clamp(min=0.0)
    y0, x0 = torch.floor(y).long(), torch.floor(x).long()
    y1, x1 = (y0 + 1).clamp(max=G - 1), (x0 + 1).clamp(max=G - 1)
    dy, dx = (y - y0)[:, None], (x - x0)[:, None]
    return ((1 - dy) * (1 - dx) * table[y0, x0] + (1 - dy) * dx * table[y0, x1]
            + dy * (1 - dx) * table[y1, x0] + dy * dx * table[y1, x1])


def mt_rope(v, row, col, hd, theta, h, w, swap_hw=False, interleaved=False):
    """v [S, N, hd]. Qwen3OmniMoeVisionRotaryEmbedding (rotate-half). Controls: swap_hw, interleaved pairs."""
    inv = 1.0 / theta ** (torch.arange(0, hd // 2, 2, dtype=torch.float64) / (hd // 2))
    table = torch.arange(max(h, w), dtype=torch.float64)[:, None] * inv[None, :]
    a, b = (col, row) if swap_hw else (row, col)
    half = torch.cat([table[a], table[b]], dim=-1)  # [S, hd/2]
    if interleaved:
        ang = half.repeat_interleave(2, dim=-1)[:, None, :]
        rot = torch.stack([-v[..., 1::2], v[..., 0::2]], dim=-1).reshape(v.shape)
        return v * torch.cos(ang) + rot * torch.sin(ang)
    ang = torch.cat([half, half], dim=-1)[:, None, :]
    rot = torch.cat([-v[..., hd // 2:], v[..., :hd // 2]], dim=-1)
    return v * torch.cos(ang) + rot * torch.sin(ang)


def mt_merger(W, pre, x, d, postshuffle, gelu):
    m2 = d["m"] * d["m"]
    if postshuffle:
        z = layer_norm(x.reshape(-1, m2 * d["D"]), W[pre + "ln_q.scale"], W[pre + "ln_q.bias"], d["eps"])
    else:
        z = layer_norm(x, W[pre + "ln_q.scale"], W[pre + "ln_q.bias"], d["eps"]).reshape(-1, m2 * d["D"])
    z = gelu(z @ W[pre + "mlp_0.kernel"] + W[pre + "mlp_0.bias"])
    return z @ W[pre + "mlp_2.kernel"] + W[pre + "mlp_2.bias"]


def mt_pos_f32_bf16(table_flat, G, h, row, col, w):
    """MaxText's Qwen3OmniMoeVisionPosEmbedInterpolate as it runs: float32 arithmetic in its order (row / max(h-1, 1)
    * (G-1), the four weights, the four products summed left to right), then cast to its fprop dtype, which the
    encoder leaves at the default bfloat16 (embeddings.py: cast_as_fprop_dtype=True, fprop_dtype=jnp.bfloat16;
    qwen3.py Qwen3OmniMoeVisionEncoder passes neither), and promoted back when added to the float32 patches."""
    f = torch.float32
    table = table_flat.to(f).reshape(G, G, -1)
    y = row.to(f) / float(max(h - 1, 1)) * float(G - 1)
    x = col.to(f) / float(max(w - 1, 1)) * float(G - 1)
    y0, x0 = torch.floor(y).long(), torch.floor(x).long()
    y1, x1 = (y0 + 1).clamp(max=G - 1), (x0 + 1).clamp(max=G - 1)
    dy, dx = (y - y0.to(f))[:, None], (x - x0.to(f))[:, None]
    one = torch.tensor(1.0, dtype=f)
    v = ((one - dy) * (one - dx) * table[y0, x0] + (one - dy) * dx * table[y0, x1]
         + dy * (one - dx) * table[y1, x0] + dy * dx * table[y1, x1])
    return v.to(torch.bfloat16).to(torch.float64)


def maxtext_image(W, pv5, grid, c, swap_hw=False, row_major=False, align_corners=True, merger_gelu="tanh",
                  interleaved=False, pos_bf16=True):
    """One image through MaxText's encoder + projector. pv5 = the [1, C, tp*t, p*h, p*w] buffer (float64)."""
    d = dims(c)
    D, N, hd, p, tp, C = d["D"], d["N"], d["hd"], d["p"], d["tp"], d["C"]
    t, h, w = grid
    patches = pv5.reshape(-1, C, tp, p, p).permute(0, 2, 3, 4, 1)  # [S, tp, p, p, C]
    if row_major:  # control: the same patches, in raster order
        r, cc = mt_coords(t, h, w, d["m"])
        order = torch.argsort(r * w + cc)
        patches = patches[order]
    x = torch.einsum("sabyc,abycd->sd", patches, W[ENC + "patch_embed.proj.kernel"]) + W[ENC + "patch_embed.proj.bias"]
    out = {"patch_embed": x}
    row, col = mt_coords(t, h, w, d["m"], row_major)
    pos = mt_pos(W[ENC + "pos_embed_interpolate.pos_embed"], d["G"], h, row, col, w, align_corners)
    if pos_bf16 and align_corners:
        pos = mt_pos_f32_bf16(W[ENC + "pos_embed_interpolate.pos_embed"], d["G"], h, row, col, w)
    out["pos"] = pos
    x = x + pos
    traj = []
    for i in range(d["L"]):
        b = f"{ENC}blocks_{i}.attn.attn."
        pre = f"{ENC}blocks_{i}."
        y = layer_norm(x, W[pre + "ln1.scale"], W[pre + "ln1.bias"], d["eps"])
        q = torch.einsum("sd,dnh->snh", y, W[b + "query.kernel"]) + W[b + "query.bias"]
        k = torch.einsum("sd,dnh->snh", y, W[b + "key.kernel"]) + W[b + "key.bias"]
        v = torch.einsum("sd,dnh->snh", y, W[b + "value.kernel"]) + W[b + "value.bias"]
        q = mt_rope(q, row, col, hd, d["theta"], h, w, swap_hw, interleaved)
        k = mt_rope(k, row, col, hd, d["theta"], h, w, swap_hw, interleaved)
        q = q * hd ** -0.5
        a = torch.softmax(torch.einsum("snh,tnh->nst", q, k), dim=-1)
        o = torch.einsum("nst,tnh->snh", a, v)
        x = x + torch.einsum("snh,nhd->sd", o, W[b + "out.kernel"]) + W[b + "out.bias"]
        y = layer_norm(x, W[pre + "ln2.scale"], W[pre + "ln2.bias"], d["eps"])
        y = gelu_tanh(y @ W[pre + "mlp.kernel"] + W[pre + "mlp.bias"])
        x = x + y @ W[pre + "mlp_out.kernel"] + W[pre + "mlp_out.bias"]
        out[f"block_{i}"] = x
        traj.append(x)
    g = gelu_tanh if merger_gelu == "tanh" else gelu_erf
    for j, idx in enumerate(d["deep"]):
        out[f"deep_{j}"] = mt_merger(W, f"{ENC}merger_{j}.", traj[idx], d, True, g)
    out["merged"] = mt_merger(W, PRJ + "merger.", x, d, False, g)
    return out


def maxtext_forward(W, pv5_list, c, **kw):
    per = [maxtext_image(W, pv5, grid, c, **kw) for pv5, grid in zip(pv5_list, GRIDS)]
    return {k: torch.cat([o[k] for o in per], dim=0) for k in per[0]}


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face formulation (all images in one sequence; explicit loops for positions / rotary)
# ----------------------------------------------------------------------------------------------------------------

def hf_pos_embed(table, G, grids, m):
    """fast_pos_embed_interpolate, one token at a time in raster order, then the window permutation."""
    outs = []
    for t, h, w in grids:
        hs = torch.linspace(0, G - 1, h, dtype=torch.float64)
        ws = torch.linspace(0, G - 1, w, dtype=torch.float64)
        rows = []
        for r in range(h):
            for cc in range(w):
                fh, fw = int(hs[r]), int(ws[cc])
                ch, cw = min(fh + 1, G - 1), min(fw + 1, G - 1)
                dh, dw = hs[r] - fh, ws[cc] - fw
                rows.append((1 - dh) * (1 - dw) * table[fh * G + fw] + (1 - dh) * dw * table[fh * G + cw]
                            + dh * (1 - dw) * table[ch * G + fw] + dh * dw * table[ch * G + cw])
        pe = torch.stack(rows).repeat(t, 1)
        pe = pe.view(t, h // m, m, w // m, m, -1).permute(0, 1, 3, 2, 4, 5).reshape(t * h * w, -1)
        outs.append(pe)
    return torch.cat(outs)


def hf_rot_pos_emb(grids, m, hd, theta):
    dim = hd // 2
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    max_hw = max(max(h, w) for _, h, w in grids)
    freq = torch.outer(torch.arange(max_hw, dtype=torch.float64), inv)
    ids = []
    for t, h, w in grids:
        one = []
        for br in range(h // m):
            for bc in range(w // m):
                for ir in range(m):
                    for ic in range(m):
                        one.append((br * m + ir, bc * m + ic))
        ids.extend(one * t)
    ids = torch.tensor(ids)
    return freq[ids].flatten(1)  # [S, hd/2]: row freqs then col freqs


def hf_merger(o, pre, x, d, postshuffle, act):
    M = d["m"] * d["m"] * d["D"]
    if postshuffle:
        z = F.layer_norm(x.view(-1, M), (M,), o[pre + "norm.weight"], o[pre + "norm.bias"], 1e-6)
    else:
        z = F.layer_norm(x, (d["D"],), o[pre + "norm.weight"], o[pre + "norm.bias"], 1e-6).view(-1, M)
    z = F.gelu(F.linear(z, o[pre + "linear_fc1.weight"], o[pre + "linear_fc1.bias"]), approximate=act)
    return F.linear(z, o[pre + "linear_fc2.weight"], o[pre + "linear_fc2.bias"])


def hf_forward(o, pv, c, merger_act="tanh"):
    d = dims(c)
    D, N, hd, p, tp, C, m = d["D"], d["N"], d["hd"], d["p"], d["tp"], d["C"], d["m"]
    x = F.conv3d(pv.view(-1, C, tp, p, p), o[HV + "patch_embed.proj.weight"], o[HV + "patch_embed.proj.bias"],
                 stride=(tp, p, p)).view(-1, D)
    out = {"patch_embed": x}
    pos = hf_pos_embed(o[HV + "pos_embed.weight"], d["G"], GRIDS, m)
    out["pos"] = pos
    x = x + pos
    rot = hf_rot_pos_emb(GRIDS, m, hd, d["theta"])
    emb = torch.cat([rot, rot], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rotate_half(v):
        return torch.cat([-v[..., hd // 2:], v[..., :hd // 2]], dim=-1)

    lengths = [t * h * w for t, h, w in GRIDS]
    for i in range(d["L"]):
        h_ = f"{HV}blocks.{i}."
        y = F.layer_norm(x, (D,), o[h_ + "norm1.weight"], o[h_ + "norm1.bias"], 1e-6)
        qkv = F.linear(y, o[h_ + "attn.qkv.weight"], o[h_ + "attn.qkv.bias"]).reshape(-1, 3, N, hd).permute(1, 0, 2, 3)
        q, k, v = qkv.unbind(0)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        outs = []
        for qs, ks, vs in zip(q.split(lengths), k.split(lengths), v.split(lengths)):
            a = torch.softmax(torch.einsum("snh,tnh->nst", qs, ks) * hd ** -0.5, dim=-1)
            outs.append(torch.einsum("nst,tnh->snh", a, vs))
        att = torch.cat(outs).reshape(-1, D)
        x = x + F.linear(att, o[h_ + "attn.proj.weight"], o[h_ + "attn.proj.bias"])
        y = F.layer_norm(x, (D,), o[h_ + "norm2.weight"], o[h_ + "norm2.bias"], 1e-6)
        y = F.gelu(F.linear(y, o[h_ + "mlp.linear_fc1.weight"], o[h_ + "mlp.linear_fc1.bias"]), approximate="tanh")
        x = x + F.linear(y, o[h_ + "mlp.linear_fc2.weight"], o[h_ + "mlp.linear_fc2.bias"])
        out[f"block_{i}"] = x
        if i in d["deep"]:
            j = d["deep"].index(i)
            out[f"deep_{j}"] = hf_merger(o, f"{HV}deepstack_merger_list.{j}.", x, d, True, merger_act)
    out["merged"] = hf_merger(o, HV + "merger.", x, d, False, merger_act)
    return out


# ----------------------------------------------------------------------------------------------------------------

def main():
    c = CFG
    d = dims(c)
    g = rng(SEED)
    w = maxtext_weights(g, c)
    shapes = maxtext_shapes(c)
    assert sorted(shapes) == sorted(w), set(shapes) ^ set(w)
    for k, s in shapes.items():
        assert w[k].shape == s and w[k].dtype == np.float32, (k, w[k].shape, s)
    o = hf_weights(w, c)
    back = hf_to_maxtext(o, c)
    assert sorted(back) == sorted(w), set(back) ^ set(w)
    for k in w:
        assert back[k].dtype == np.float32 and np.array_equal(back[k], w[k]), k

    # inputs: random uint8 frames, normalised as the processor does, flattened in the processor's order
    p, tp, C, m = d["p"], d["tp"], d["C"], d["m"]
    images, pvs, pv5s, u8s = [], [], [], []
    for t, h, w_ in GRIDS:
        u8 = g.integers(0, 256, (h * p, w_ * p, C), dtype=np.uint8)
        u8s.append(u8)
        img = normalize(u8, MEAN, STD)
        pv, grid = image_to_pixel_values(img, p, tp, m)
        assert grid == (t, h, w_)
        pv5 = to_maxtext_5d(pv, grid, C, tp, p)
        # the encoder's reshape(-1, C, tp, p, p) must give, for token s, the image patch at (row, col) of s
        blocks = pv5.reshape(-1, C, tp, p, p)
        row, col = mt_coords(t, h, w_, m)
        for s in range(len(pv)):
            patch = img[row[s] * p:(row[s] + 1) * p, col[s] * p:(col[s] + 1) * p, :].transpose(2, 0, 1)
            assert np.array_equal(blocks[s, :, 0], patch) and np.array_equal(blocks[s, :, 1], patch), s
        images.append(img)
        pvs.append(pv)
        pv5s.append(pv5)
    pv_all = np.concatenate(pvs, axis=0)

    W = {k: t64(v) for k, v in w.items()}
    O = {k: t64(v) for k, v in o.items()}
    mt = maxtext_forward(W, [t64(x) for x in pv5s], c)
    # The cross-check with HF's formulation runs MaxText's without its bfloat16 position embedding (HF keeps the
    # interpolation in the model's dtype); the fixture's outputs are MaxText's, rounded.
    mt_exact = maxtext_forward(W, [t64(x) for x in pv5s], c, pos_bf16=False)
    pos_bf16_effect = {k: (mt[k] - mt_exact[k]).abs().max().item() for k in mt}
    hf = hf_forward(O, t64(pv_all), c, merger_act="tanh")
    hf_exact = hf_forward(O, t64(pv_all), c, merger_act="none")

    # independent check of the interpolation against torch's bilinear (align_corners=True) resize of the grid
    tab = W[ENC + "pos_embed_interpolate.pos_embed"].reshape(d["G"], d["G"], -1).permute(2, 0, 1)[None]
    off = 0
    for t, h, w_ in GRIDS:
        ref = F.interpolate(tab, size=(h, w_), mode="bilinear", align_corners=True)[0].permute(1, 2, 0)
        r, cc = mt_coords(t, h, w_, m)
        assert (ref[r, cc] - mt_exact["pos"][off:off + t * h * w_]).abs().max() < 1e-12
        off += t * h * w_

    S = sum(t * h * w_ for t, h, w_ in GRIDS)
    want = {"patch_embed": (S, d["D"]), "pos": (S, d["D"]), "merged": (S // 4, d["O"])}
    want.update({f"block_{i}": (S, d["D"]) for i in range(d["L"])})
    want.update({f"deep_{j}": (S // 4, d["O"]) for j in range(len(d["deep"]))})
    assert sorted(want) == sorted(mt) == sorted(hf)
    diffs = {}
    for k, s in want.items():
        assert tuple(mt[k].shape) == s, (k, tuple(mt[k].shape), s)
        assert torch.isfinite(mt[k]).all(), k
        diffs[k] = (mt_exact[k] - hf[k]).abs().max().item()
        assert diffs[k] < 1e-12, (k, diffs[k])
    gelu_gap = {k: (mt[k] - hf_exact[k]).abs().max().item()
                for k in ["merged"] + [f"deep_{j}" for j in range(len(d["deep"]))]}

    ref_m = mt["merged"]
    scale = ref_m.abs().max().item()
    controls = {}
    for name, kw in [("rotary_h_w_swapped", {"swap_hw": True}),
                     ("tokens_row_major_instead_of_merge_window", {"row_major": True}),
                     ("pos_interp_align_corners_false", {"align_corners": False}),
                     ("rotary_interleaved_pairs_instead_of_rotate_half", {"interleaved": True}),
                     ("merger_gelu_exact_erf_instead_of_tanh", {"merger_gelu": "erf"})]:
        alt = maxtext_forward(W, [t64(x) for x in pv5s], c, **kw)["merged"]
        dd = (alt - ref_m).abs().max().item()
        controls[name] = {"merged_max_abs_diff": dd, "relative_to_max_abs_merged": dd / scale}
    assert all(v["merged_max_abs_diff"] > 1e-4 for v in controls.values()), controls

    out_dir = case_dir(CASE)
    for f in os.listdir(out_dir):
        if f.endswith(".npy"):
            os.remove(os.path.join(out_dir, f))
    save_npy(out_dir, "pixel_values", pv_all)
    save_npy(out_dir, "grid_thw", np.asarray(GRIDS, dtype=np.int32))
    for i, (img, pv5) in enumerate(zip(images, pv5s)):
        save_npy(out_dir, f"image_{i}", img)
        save_npy(out_dir, f"pixel_values_maxtext_{i}", pv5)
    for k, v in mt.items():
        save_npy(out_dir, k, v.numpy().astype(F32))
    save_npy(out_dir, "merged_hf", hf_exact["merged"].numpy().astype(F32))
    for j in range(len(d["deep"])):
        save_npy(out_dir, f"deep_hf_{j}", hf_exact[f"deep_{j}"].numpy().astype(F32))
    save_safetensors(os.path.join(out_dir, "model.safetensors"), w)
    hd_dir = os.path.join(out_dir, "hf")
    os.makedirs(hd_dir, exist_ok=True)
    save_safetensors(os.path.join(hd_dir, "model.safetensors"), o, metadata={"format": "pt"})
    with open(os.path.join(hd_dir, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=1, sort_keys=True)
    # The pictures as files, and a processor budget that keeps their sizes (smart_resize with factor p * m = 8 leaves
    # 24 x 32 and 16 x 16 as they are within [256, 4096] pixels): through a program's preprocessing they give
    # pixel_values.npy exactly (both normalisations agree for every byte value).
    from PIL import Image
    for i, u8 in enumerate(u8s):
        Image.fromarray(u8).save(os.path.join(out_dir, f"image_{i}.png"))
    with open(os.path.join(hd_dir, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 256, "max_pixels": 4096,
                   "patch_size": d["p"], "temporal_patch_size": d["tp"], "merge_size": d["m"],
                   "image_mean": MEAN, "image_std": STD}, f, indent=1)

    offs, tok, mtok = [], 0, 0
    for t, h, w_ in GRIDS:
        offs.append({"grid_thw": [t, h, w_], "pixels_hw": [h * p, w_ * p], "token_offset": tok,
                     "tokens": t * h * w_, "merged_offset": mtok, "merged_tokens": t * h * w_ // 4})
        tok += t * h * w_
        mtok += t * h * w_ // 4
    hd = d["hd"]
    meta = {
        "what": "MaxText Qwen3-Omni / Qwen3.5 vision tower (Qwen3OmniMoeVisionEncoder + Qwen3OmniMoeVisionProjector), "
                "float64 from float32 weights/pixels, two images encoded separately and concatenated along tokens; "
                "every stage stored float32",
        "vision": dict(c), "seed": SEED, "head_dim": hd, "images": offs,
        "processor": {"image_mean": MEAN, "image_std": STD, "rescale": "1/255",
                      "formula": "x = (v/255 - 0.5)/0.5 = v/127.5 - 1 (MaxText: (v - 127.5)/127.5)"},
        "files": {
            "pixel_values.npy": "float32 [64, C*tp*p*p = 96]: HF pixel_values of both images concatenated (image 0 "
                                "rows 0..47, image 1 rows 48..63), processor order",
            "grid_thw.npy": "int32 [2, 3] (t, h, w) in patches",
            "image_i.npy": "float32 [H, W, 3] the normalised frame (NHWC) the patches are cut from",
            "pixel_values_maxtext_i.npy": "float32 [1, C, tp*t, p*h, p*w]: image i's rows of pixel_values, reshaped "
                                          "(NOT transposed) as MaxText's encoder input",
            "patch_embed.npy": "[64, D] after the patch projection (+bias), before positions",
            "pos.npy": "[64, D] interpolated learned positions, token order",
            "block_i.npy": "[64, D] output of block i",
            "deep_j.npy": "[16, O] merger_j (postshuffle norm) on block deepstack_visual_indexes[j]'s output, "
                          "MaxText (tanh GELU)",
            "merged.npy": "[16, O] Qwen3OmniMoeVisionProjector output (MaxText, tanh GELU)",
            "merged_hf.npy / deep_hf_j.npy": "the same with HF's exact (erf) GELU in the mergers",
            "model.safetensors": "MaxText tree names (Qwen3-Omni module names), dots joined",
            "hf/model.safetensors + hf/config.json": "HF names, see hf_names",
        },
        "maxtext_names": {
            "qwen3_omni": {"encoder": ENC[:-1], "projector": PRJ[:-1]},
            "qwen3_5": {"encoder": ENC35[:-1], "projector": PRJ35[:-1],
                        "note": "replace the prefix; leaves identical; the real Qwen3.5 has no merger_{j}"},
            "leaves": ["patch_embed.proj.kernel [tp,p,p,C,D]", "patch_embed.proj.bias [D]",
                       "pos_embed_interpolate.pos_embed [G*G, D]",
                       "blocks_{i}.ln1.scale/bias, blocks_{i}.ln2.scale/bias [D]",
                       "blocks_{i}.attn.attn.{query,key,value}.kernel [D,N,hd], .bias [N,hd]",
                       "blocks_{i}.attn.attn.out.kernel [N,hd,D], .bias [D]",
                       "blocks_{i}.mlp.kernel [D,F], .bias [F]; blocks_{i}.mlp_out.kernel [F,D], .bias [D]",
                       "merger_{j}.ln_q.scale/bias [4D]; merger_{j}.mlp_0.kernel [4D,4D], .bias; mlp_2.kernel [4D,O]",
                       "projector: merger.ln_q.scale/bias [D]; merger.mlp_0.kernel [4D,4D]; "
                       "merger.mlp_2.kernel [4D,O]"]},
        "hf_names": {
            "family": "Qwen3_5MoeForConditionalGeneration (model_type qwen3_5_moe): model.visual.patch_embed.proj, "
                      "pos_embed, blocks.{i}.{norm1,norm2,attn.qkv,attn.proj,mlp.linear_fc1,mlp.linear_fc2}, "
                      "merger.{norm,linear_fc1,linear_fc2}; deepstack mergers named as Qwen3-VL does: "
                      "model.visual.deepstack_merger_list.{j}.{norm,linear_fc1,linear_fc2} (Qwen3.5 itself has none)",
            "qwen3_omni_equivalent": "thinker.visual.* with merger_list.{j} / merger using ln_q, mlp.0, mlp.2 "
                                     "instead of norm, linear_fc1, linear_fc2 (e.g. " +
                                     omni_hf_name(HV + "deepstack_merger_list.0.linear_fc1.weight") + ", " +
                                     omni_hf_name(HV + "merger.norm.weight") + ")",
            "qkv": "attn.qkv.weight [3D, D]: rows [0,D) query, [D,2D) key, [2D,3D) value; within each, head-major "
                   "(head n = rows n*hd .. n*hd+hd-1)",
        },
        "conventions": {
            "token_order": "merge-window order: windows (2x2) row-major over the (h/2, w/2) window grid, inside a "
                           "window its 4 patches row-major; token s -> q = s mod (h*w), ic = q mod 2, "
                           "ir = (q div 2) mod 2, wc = (q div 4) mod (w/2), wr = q div (2w); patch row = 2wr+ir, "
                           "col = 2wc+ic. Frames (t>1) repeat the same coordinates.",
            "patch_flattening": "each pixel_values row is [C, tp, p, p] row-major: index ((c*tp + a)*p + y)*p + x; "
                                "an image fills both temporal slots a=0,1 with the same frame (grid_t = 1)",
            "patch_embed": "x = sum_{c,a,y,x} P[c,a,y,x] * kernel[a,y,x,c,:] + bias  (kernel [tp,p,p,C,D]; HF "
                           "weight [D,C,tp,p,p] = kernel.transpose(4,3,0,1,2))",
            "position_interpolation": "bilinear, align_corners=True: y = row*(G-1)/max(h-1,1), x = col*(G-1)/"
                                      "max(w-1,1); y0 = floor(y), y1 = min(y0+1, G-1), dy = y-y0 (same for x); pos = "
                                      "(1-dy)(1-dx)T[y0,x0] + (1-dy)dx T[y0,x1] + dy(1-dx)T[y1,x0] + dy dx T[y1,x1]; "
                                      "T[r,c] = pos_embed[r*G + c] (G = sqrt(num_position_embeddings)); added before "
                                      "block 0",
            "rotary": f"2-D rotate-half RoPE on q and k (after the q/k projections and biases, before the scale): "
                      f"inv[j] = theta^(-2j/(hd/2)), j < hd/4 (theta 10000); angle[i] = row*inv[i] for i < hd/4, "
                      f"col*inv[i-hd/4] for hd/4 <= i < hd/2, angle[i+hd/2] = angle[i]; "
                      f"out[i] = v[i]cos(angle[i]) - v[i+hd/2]sin(angle[i]), out[i+hd/2] = v[i+hd/2]cos(angle[i]) + "
                      f"v[i]sin(angle[i]) for i < hd/2. Here hd={hd}: inv = [1, 0.01]; channels 0,1 (and 4,5) use "
                      f"row (h), 2,3 (and 6,7) use col (w). Real model: hd=72, 18 row + 18 col frequencies.",
            "attention": "full bidirectional attention over the tokens of one image (no mask), per head; "
                         "softmax(q.k * hd^-0.5) (MaxText scales q by hd^-0.5 after rotary), then out projection "
                         "[N,hd,D] + bias",
            "block": "x += attn(LN1(x)); x += mlp_out(gelu_tanh(mlp(LN2(x))))",
            "gelu": "blocks: tanh approximation in both MaxText (jax.nn.gelu default) and HF (gelu_pytorch_tanh). "
                    "mergers (deepstack and final): MaxText tanh (jax.nn.gelu), HF exact erf (nn.GELU()). "
                    "merged.npy/deep_j.npy = MaxText (tanh); merged_hf.npy/deep_hf_j.npy = HF (erf)",
            "layernorm": "(x-mean)/sqrt(biased var + eps)*scale + bias, eps = 1e-6 everywhere (blocks and mergers)",
            "deepstack_merger": "on block idx output: group 4 consecutive tokens (one window) -> [S/4, 4D] by plain "
                                "concatenation in token order, LayerNorm over 4D, mlp_0 [4D,4D]+b, gelu, mlp_2 "
                                "[4D,O]+b",
            "final_merger": "on the last block output: LayerNorm over D per token, then group 4 consecutive tokens "
                            "-> [S/4, 4D], mlp_0, gelu, mlp_2 (no final LayerNorm after the blocks other than ln_q)",
            "several_images": "each image encoded on its own (attention never crosses images); outputs "
                              "concatenated in image order",
        },
        "max_abs_diff_maxtext_vs_hf_same_gelu": diffs,
        "position_embedding_bfloat16": "MaxText's Qwen3OmniMoeVisionPosEmbedInterpolate casts its output to its fprop "
                                       "dtype, bfloat16 by default (the encoder sets none): pos.npy and everything "
                                       "after it are MaxText's, computed in float32, rounded to bfloat16; the cross-"
                                       "check with HF (which does not round) runs MaxText's formulation unrounded",
        "max_abs_effect_of_the_bfloat16_position_embedding": pos_bf16_effect,
        "max_abs_diff_maxtext_tanh_vs_hf_erf_mergers": gelu_gap,
        "controls": controls,
        "max_abs_merged": scale,
    }
    save_meta(out_dir, meta)
    print("wrote", out_dir)
    for k, v in mt.items():
        print(f"  {k:12s} {tuple(v.shape)} max|x| {v.abs().max().item():.3f} std {v.std().item():.3f} "
              f"maxtext-vs-hf {diffs[k]:.2e}")
    print("  tanh-vs-erf merger GELU:", {k: f"{v:.2e}" for k, v in gelu_gap.items()})
    for k, v in controls.items():
        print(f"  control {k}: {v['merged_max_abs_diff']:.3e} (rel {v['relative_to_max_abs_merged']:.3e})")


if __name__ == "__main__":
    main()
