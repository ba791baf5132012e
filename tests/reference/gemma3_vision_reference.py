"""MaxText's Gemma 3 vision encoder (SigLIP tower + VisionExit + VisionEmbedder), re-stated in PyTorch float64 from
float32 inputs and weights.

MaxText semantics (commit e591f30 read: src/maxtext/models/gemma3.py Gemma3VisionEncoderLayer, Encoder,
Encoder1DBlock, MlpBlockViT, VisionExit, VisionEmbedder, Einsum; src/maxtext/layers/encoders.py VisionEncoder;
src/maxtext/layers/attentions.py Attention (init_query_w / init_kv_w / init_out_w / __call__);
src/maxtext/layers/attention_op.py apply_attention_dot / qk_product / generate_attention_mask;
src/maxtext/layers/linears.py DenseGeneral; src/maxtext/layers/normalizations.py RMSNorm;
src/maxtext/checkpoint_conversion/utils/param_mapping.py GEMMA3_MAXTEXT_TO_HF_PARAM_MAPPING / _HOOK_FN;
src/maxtext/configs/base.yml + types.py defaults: posemb_type_for_vit "learn", conv_stride_for_vit = patch size,
attention_for_vit "dot_product", fused_qkv false, dropout 0):

  pixels [N, H, W, 3] (NHWC)
  x = Conv(kernel [p, p, 3, D] HWIO, stride p, VALID, bias [D])       -> [N, H/p, W/p, D] -> [N, T, D] (row-major)
  x = pos_embedding [1, T, D] + x                                      (learned; "embedded")
  L x Encoder1DBlock:                                                  ("block_i")
    y = LayerNorm_0(x)         (flax LayerNorm: (x - mean) / sqrt(biased var + eps) * scale + bias)
    q = y @ Wq [D, h, hd] + bq [h, hd];  k, v likewise;  q = q * hd^-0.5   (query_pre_attn_scalar, applied to the
        biased query after the projection; depth_scaling of the initializer is off; no RoPE: is_nope_layer)
    a = softmax_s(q_t . k_s) over all T patches of the same image (AttentionType.FULL, no segment ids: no mask)
    x = x + (a v) @ Wo [h, hd, D] + bo [D]
    x = x + Dense_1(gelu_tanh(Dense_0(LayerNorm_1(x))))               (Dense_0 [D, F] + [F], Dense_1 [F, D] + [D];
                                                                       nnx.gelu: approximate=True, the tanh form)
  x = encoder_norm(x)  (LayerNorm)                                     ("encoder_norm")
  VisionExit(256): identity when T == 256, else reshape [N, w, w, D] and nnx.avg_pool with window = stride =
    w / 16 (VALID), back to [N, 256, D]                                ("exit")
  VisionEmbedder: RMSNorm (x * rsqrt(mean(x^2) + eps) * scale, scale as stored, no +1) then
    einsum("...tm,md->...td", x, w [D, E])                             ("out", [N, 256, E])
  eps = normalization_layer_epsilon = 1e-6 for all LayerNorms and the RMSNorm.
  MaxText's real parameter shapes agree with the names below (nothing differs from the usual HF-free layout).

Hugging Face layout (hf/, names as on the Hub, i.e. without the "model." prefix that MaxText's mapping uses for the
newer transformers layout), as the converter's hooks map it: patch_embedding.weight [D, 3, p, p] = kernel
transposed (3, 2, 0, 1); position_embedding.weight [T, D] = pos_embedding[0]; q/k/v_proj.weight [h*hd, D] =
kernel.reshape(D, h*hd).T; out_proj.weight [D, h*hd] = kernel.reshape(h*hd, D).T; biases flattened;
fc1/fc2.weight = Dense kernel.T; mm_input_projection_weight [D, E] as is; mm_soft_emb_norm.weight = scale - 1
(HF's Gemma3RMSNorm multiplies by 1 + weight; here the HF weight w is drawn in float32 and the MaxText scale is
float32(w + 1), exactly what the converter's scale_rmsnorm hook produces; w is drawn in float32 and snapped to
float32(float32(w + 1) - 1) so that 1 + w is itself a float32 and scale - 1 == w exactly). The script checks that the converter's
HF -> MaxText hooks reproduce the MaxText tree bit-exactly, and recomputes the whole tower a second way from the HF
tensors (F.conv2d, F.layer_norm, F.multi_head_attention_forward, F.gelu(approximate="tanh"), F.avg_pool2d, Gemma
(1 + w) RMSNorm — i.e. SiglipVisionModel + Gemma3MultiModalProjector), asserting agreement to 1e-10.

Writes tests/fixtures/gemma3_vision_pool/ (64x64 images, patch 2: 1024 patches pooled 2x2 to 256, 2 layers,
2 images) and tests/fixtures/gemma3_vision_nopool/ (32x32, patch 2: 256 patches, VisionExit is the identity,
1 layer, 1 image): meta.json, pixels.npy, model.safetensors (MaxText tree), hf/{model.safetensors, config.json},
embedded.npy, block_{i}.npy, encoder_norm.npy, exit.npy, out.npy (float32, computed in float64).

gemma3_vision_nopool also gets image_tokens_maxtext.npy and image_tokens_hf.npy ([2, 256, E] float32, computed in
float64 from the same MaxText tree): the VisionEmbedder output for two real picture files (IMAGE_TOKEN_FILES, opened
with Pillow and .convert("RGB")) preprocessed to image_size x image_size two ways (meta.json "image_tokens"):
  maxtext: preprocess_mm_data_gemma3 (src/maxtext/multimodal/processor_gemma3.py) with target (32, 32) instead of
    896: PIL resize BILINEAR, or LANCZOS when the picture is larger than the target in either dimension;
    np.asarray float32; utils.normalize_images (in place: -= float64 (127.5,)*3, /= float64 (127.5,)*3, i.e. each
    step in float64 rounded back to float32); np.clip to [-1, 1].
  hf: transformers' Gemma3ImageProcessor (do_pan_and_scan off) at 32x32: PIL resize BILINEAR always;
    rescale float32(float64(x) * (1/255)); normalize (r - 0.5) / 0.5 in float32; kept HWC (NHWC for the tower).
These are written after all the other files, draw no random numbers, and leave every other file unchanged.
Run: /usr/bin/python3 tests/reference/gemma3_vision_reference.py
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
from PIL import Image  # noqa: E402

F32 = np.float32
EPS = 1e-6
MM_TOKENS = 256
ENC = "vision_encoder.Gemma3VisionEncoderLayer_0."
EMB = "vision_encoder.VisionEmbedder_0."
HFV = "vision_tower.vision_model."
IMAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "images")
IMAGE_TOKEN_FILES = ["png_rgb8_64x48.png", "jpeg_rgb_q90_420_37x23.jpg"]  # under tests/fixtures/images, in order


# ----------------------------------------------------------------------------------------------------------------
# Weights (MaxText tree) and their Hugging Face counterparts
# ----------------------------------------------------------------------------------------------------------------

def maxtext_weights(g, c):
    """Random float32 weights in MaxText's tree; magnitudes keep every activation O(1)."""
    p, D, h, F_, E, T = c["p"], c["D"], c["heads"], c["F"], c["E"], c["T"]
    hd = D // h
    w = {}
    w[ENC + "embedding.kernel"] = f32(g, (p, p, 3, D), 1.0 / math.sqrt(p * p * 3) * math.sqrt(3.0))
    w[ENC + "embedding.bias"] = f32(g, (D,), 0.1)
    w[ENC + "pos_embedding"] = f32(g, (1, T, D), 0.5)
    for i in range(c["L"]):
        b = f"{ENC}Transformer.encoderblock_{i}."
        for ln in ("LayerNorm_0", "LayerNorm_1"):
            w[b + ln + ".scale"] = f32(g, (D,), 0.1, 1.0)
            w[b + ln + ".bias"] = f32(g, (D,), 0.1)
        a = b + "MultiHeadDotProductAttention_0."
        for nm in ("query", "key", "value"):
            w[a + nm + ".kernel"] = f32(g, (D, h, hd), 1.0 / math.sqrt(D))
            w[a + nm + ".bias"] = f32(g, (h, hd), 0.1)
        w[a + "out.kernel"] = f32(g, (h, hd, D), 1.0 / math.sqrt(D))
        w[a + "out.bias"] = f32(g, (D,), 0.1)
        m = b + "MlpBlockViT_0."
        w[m + "Dense_0.kernel"] = f32(g, (D, F_), 1.0 / math.sqrt(D))
        w[m + "Dense_0.bias"] = f32(g, (F_,), 0.1)
        w[m + "Dense_1.kernel"] = f32(g, (F_, D), 1.0 / math.sqrt(F_))
        w[m + "Dense_1.bias"] = f32(g, (D,), 0.1)
    w[ENC + "Transformer.encoder_norm.scale"] = f32(g, (D,), 0.1, 1.0)
    w[ENC + "Transformer.encoder_norm.bias"] = f32(g, (D,), 0.1)
    # HF's mm_soft_emb_norm.weight (HF multiplies by 1 + weight), snapped so that 1 + weight is a float32: then the
    # converter's +1 (HF -> MaxText) and -1 (MaxText -> HF) are both exact, and both layouts mean the same scale.
    hf_norm = f32(g, (D,), 0.1)
    hf_norm = ((hf_norm + F32(1.0)).astype(F32) - F32(1.0)).astype(F32)  # exact subtraction (Sterbenz)
    w[EMB + "mm_soft_embedding_norm.scale"] = (hf_norm + F32(1.0)).astype(F32)  # converter: HF + 1
    assert np.array_equal(w[EMB + "mm_soft_embedding_norm.scale"].astype(np.float64), hf_norm.astype(np.float64) + 1.0)
    w[EMB + "mm_input_projection.w"] = f32(g, (D, E), 1.0 / math.sqrt(D))
    return w, hf_norm


def hf_weights(w, hf_norm, c):
    """The same tensors in HF's Gemma3ForConditionalGeneration layout (MaxText -> HF direction of the hooks)."""
    D, h, T = c["D"], c["heads"], c["T"]
    hd = D // h
    o = {}
    o[HFV + "embeddings.patch_embedding.weight"] = w[ENC + "embedding.kernel"].transpose(3, 2, 0, 1)  # vision_patch
    o[HFV + "embeddings.patch_embedding.bias"] = w[ENC + "embedding.bias"]
    o[HFV + "embeddings.position_embedding.weight"] = w[ENC + "pos_embedding"].squeeze(0)  # pos_embed
    assert o[HFV + "embeddings.position_embedding.weight"].shape == (T, D)
    for i in range(c["L"]):
        b = f"{ENC}Transformer.encoderblock_{i}."
        hb = f"{HFV}encoder.layers.{i}."
        for ln, hn in (("LayerNorm_0", "layer_norm1"), ("LayerNorm_1", "layer_norm2")):
            o[hb + hn + ".weight"] = w[b + ln + ".scale"]
            o[hb + hn + ".bias"] = w[b + ln + ".bias"]
        a = b + "MultiHeadDotProductAttention_0."
        for nm, hn in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            o[hb + f"self_attn.{hn}.weight"] = w[a + nm + ".kernel"].reshape(D, h * hd).T  # reshape_kernel
            o[hb + f"self_attn.{hn}.bias"] = w[a + nm + ".bias"].flatten()  # vis_bias
        o[hb + "self_attn.out_proj.weight"] = w[a + "out.kernel"].reshape(h * hd, D).T
        o[hb + "self_attn.out_proj.bias"] = w[a + "out.bias"]
        m = b + "MlpBlockViT_0."
        o[hb + "mlp.fc1.weight"] = w[m + "Dense_0.kernel"].T
        o[hb + "mlp.fc1.bias"] = w[m + "Dense_0.bias"]
        o[hb + "mlp.fc2.weight"] = w[m + "Dense_1.kernel"].T
        o[hb + "mlp.fc2.bias"] = w[m + "Dense_1.bias"]
    o[HFV + "post_layernorm.weight"] = w[ENC + "Transformer.encoder_norm.scale"]
    o[HFV + "post_layernorm.bias"] = w[ENC + "Transformer.encoder_norm.bias"]
    o["multi_modal_projector.mm_input_projection_weight"] = w[EMB + "mm_input_projection.w"]
    o["multi_modal_projector.mm_soft_emb_norm.weight"] = hf_norm
    return {k: np.ascontiguousarray(v, dtype=F32) for k, v in o.items()}


def hf_to_maxtext(o, c):
    """MaxText's converter in the HF -> MaxText direction (saving_to_hf=False hooks), for the round-trip check."""
    D, h = c["D"], c["heads"]
    hd = D // h
    w = {}
    w[ENC + "embedding.kernel"] = o[HFV + "embeddings.patch_embedding.weight"].transpose(2, 3, 1, 0)
    w[ENC + "embedding.bias"] = o[HFV + "embeddings.patch_embedding.bias"]
    w[ENC + "pos_embedding"] = o[HFV + "embeddings.position_embedding.weight"][None, :, :]
    for i in range(c["L"]):
        b = f"{ENC}Transformer.encoderblock_{i}."
        hb = f"{HFV}encoder.layers.{i}."
        for ln, hn in (("LayerNorm_0", "layer_norm1"), ("LayerNorm_1", "layer_norm2")):
            w[b + ln + ".scale"] = o[hb + hn + ".weight"]
            w[b + ln + ".bias"] = o[hb + hn + ".bias"]
        a = b + "MultiHeadDotProductAttention_0."
        for nm, hn in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            w[a + nm + ".kernel"] = o[hb + f"self_attn.{hn}.weight"].T.reshape(D, h, hd)
            w[a + nm + ".bias"] = o[hb + f"self_attn.{hn}.bias"].reshape(h, hd)
        w[a + "out.kernel"] = o[hb + "self_attn.out_proj.weight"].T.reshape(h, hd, D)
        w[a + "out.bias"] = o[hb + "self_attn.out_proj.bias"].reshape(D)
        m = b + "MlpBlockViT_0."
        w[m + "Dense_0.kernel"] = o[hb + "mlp.fc1.weight"].T
        w[m + "Dense_0.bias"] = o[hb + "mlp.fc1.bias"]
        w[m + "Dense_1.kernel"] = o[hb + "mlp.fc2.weight"].T
        w[m + "Dense_1.bias"] = o[hb + "mlp.fc2.bias"]
    w[ENC + "Transformer.encoder_norm.scale"] = o[HFV + "post_layernorm.weight"]
    w[ENC + "Transformer.encoder_norm.bias"] = o[HFV + "post_layernorm.bias"]
    w[EMB + "mm_input_projection.w"] = o["multi_modal_projector.mm_input_projection_weight"]
    w[EMB + "mm_soft_embedding_norm.scale"] = (o["multi_modal_projector.mm_soft_emb_norm.weight"] + F32(1.0)).astype(F32)
    return w


# ----------------------------------------------------------------------------------------------------------------
# MaxText forward, float64, from the MaxText tree
# ----------------------------------------------------------------------------------------------------------------

def layer_norm(x, scale, bias, eps=EPS):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased
    return (x - mean) / torch.sqrt(var + eps) * scale + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rms_norm(x, scale, eps=EPS):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * scale


def maxtext_forward(w, pixels, c):
    W = {k: t64(v) for k, v in w.items()}
    p, D, h = c["p"], c["D"], c["heads"]
    hd = D // h
    x = t64(pixels)  # [N, H, W, 3]
    N, H, Wd, C = x.shape
    gh, gw = H // p, Wd // p
    # Conv with kernel p, stride p, VALID == per-patch contraction over (kh, kw, c) with the HWIO kernel.
    patches = x.reshape(N, gh, p, gw, p, C)
    x = torch.einsum("nhpwqc,pqcd->nhwd", patches, W[ENC + "embedding.kernel"]) + W[ENC + "embedding.bias"]
    x = x.reshape(N, gh * gw, D)
    x = W[ENC + "pos_embedding"] + x
    outs = {"embedded": x}
    for i in range(c["L"]):
        b = f"{ENC}Transformer.encoderblock_{i}."
        a = b + "MultiHeadDotProductAttention_0."
        m = b + "MlpBlockViT_0."
        y = layer_norm(x, W[b + "LayerNorm_0.scale"], W[b + "LayerNorm_0.bias"])
        q = torch.einsum("ntd,dhk->nthk", y, W[a + "query.kernel"]) + W[a + "query.bias"]
        k = torch.einsum("ntd,dhk->nthk", y, W[a + "key.kernel"]) + W[a + "key.bias"]
        v = torch.einsum("ntd,dhk->nthk", y, W[a + "value.kernel"]) + W[a + "value.bias"]
        q = q * (1.0 / hd ** 0.5)  # query_pre_attn_scalar
        logits = torch.einsum("nthk,nshk->nhts", q, k)  # no mask (FULL, no segment ids)
        probs = torch.softmax(logits, dim=-1)
        att = torch.einsum("nhts,nshk->nthk", probs, v)
        y = torch.einsum("nthk,hkd->ntd", att, W[a + "out.kernel"]) + W[a + "out.bias"]
        x = x + y
        y = layer_norm(x, W[b + "LayerNorm_1.scale"], W[b + "LayerNorm_1.bias"])
        y = y @ W[m + "Dense_0.kernel"] + W[m + "Dense_0.bias"]
        y = gelu_tanh(y)
        y = y @ W[m + "Dense_1.kernel"] + W[m + "Dense_1.bias"]
        x = x + y
        outs[f"block_{i}"] = x
    x = layer_norm(x, W[ENC + "Transformer.encoder_norm.scale"], W[ENC + "Transformer.encoder_norm.bias"])
    outs["encoder_norm"] = x
    # VisionExit
    T = x.shape[1]
    if T != MM_TOKENS:
        cw = int(round(T ** 0.5))
        ow = int(round(MM_TOKENS ** 0.5))
        assert cw * cw == T and ow * ow == MM_TOKENS and cw % ow == 0
        win = cw // ow
        x = x.reshape(N, ow, win, ow, win, D).mean(dim=(2, 4)).reshape(N, MM_TOKENS, D)
    outs["exit"] = x
    # VisionEmbedder
    x = rms_norm(x, W[EMB + "mm_soft_embedding_norm.scale"])
    x = torch.einsum("...tm,md->...td", x, W[EMB + "mm_input_projection.w"])
    outs["out"] = x
    return outs


# ----------------------------------------------------------------------------------------------------------------
# Second, independently written forward from the HF tensors (SiglipVisionModel + Gemma3MultiModalProjector style)
# ----------------------------------------------------------------------------------------------------------------

def hf_forward(o, pixels, c):
    T = {k: t64(v) for k, v in o.items()}
    p, D, h = c["p"], c["D"], c["heads"]
    x = t64(pixels).permute(0, 3, 1, 2)  # NCHW
    x = F.conv2d(x, T[HFV + "embeddings.patch_embedding.weight"], T[HFV + "embeddings.patch_embedding.bias"],
                 stride=p, padding=0)
    x = x.flatten(2).transpose(1, 2)  # [N, T, D]
    x = x + T[HFV + "embeddings.position_embedding.weight"][None]
    outs = {"embedded": x}
    for i in range(c["L"]):
        hb = f"{HFV}encoder.layers.{i}."
        r = x
        y = F.layer_norm(x, (D,), T[hb + "layer_norm1.weight"], T[hb + "layer_norm1.bias"], eps=EPS)
        ys = y.transpose(0, 1)  # [T, N, D] (sequence first)
        att, _ = F.multi_head_attention_forward(
            ys, ys, ys, D, h, None,
            torch.cat([T[hb + "self_attn.q_proj.bias"], T[hb + "self_attn.k_proj.bias"],
                       T[hb + "self_attn.v_proj.bias"]]),
            None, None, False, 0.0, T[hb + "self_attn.out_proj.weight"], T[hb + "self_attn.out_proj.bias"],
            training=False, need_weights=False, use_separate_proj_weight=True,
            q_proj_weight=T[hb + "self_attn.q_proj.weight"], k_proj_weight=T[hb + "self_attn.k_proj.weight"],
            v_proj_weight=T[hb + "self_attn.v_proj.weight"])
        x = r + att.transpose(0, 1)
        r = x
        y = F.layer_norm(x, (D,), T[hb + "layer_norm2.weight"], T[hb + "layer_norm2.bias"], eps=EPS)
        y = F.linear(y, T[hb + "mlp.fc1.weight"], T[hb + "mlp.fc1.bias"])
        y = F.gelu(y, approximate="tanh")
        y = F.linear(y, T[hb + "mlp.fc2.weight"], T[hb + "mlp.fc2.bias"])
        x = r + y
        outs[f"block_{i}"] = x
    x = F.layer_norm(x, (D,), T[HFV + "post_layernorm.weight"], T[HFV + "post_layernorm.bias"], eps=EPS)
    outs["encoder_norm"] = x
    # Gemma3MultiModalProjector
    N, L, _ = x.shape
    per_side = c["image_size"] // p
    kernel = per_side // int(MM_TOKENS ** 0.5)
    z = x.transpose(1, 2).reshape(N, D, per_side, per_side)
    z = F.avg_pool2d(z, kernel_size=kernel, stride=kernel)
    z = z.flatten(2).transpose(1, 2)
    outs["exit"] = z
    nw = T["multi_modal_projector.mm_soft_emb_norm.weight"]
    z = z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + nw)
    outs["out"] = torch.matmul(z, T["multi_modal_projector.mm_input_projection_weight"])
    return outs


# ----------------------------------------------------------------------------------------------------------------

# ----------------------------------------------------------------------------------------------------------------
# Picture preprocessing (for image_tokens_*.npy)
# ----------------------------------------------------------------------------------------------------------------

def load_rgb(fname):
    with Image.open(os.path.join(IMAGES, fname)) as im:
        return np.asarray(im.convert("RGB"))  # [H, W, 3] uint8


def maxtext_preprocess(img, size):
    """preprocess_mm_data_gemma3 for one picture, target (size, size) instead of GEMMA_DEFAULT_IMAGE_SIZE."""
    target_size = (size, size)
    pil_img = Image.fromarray(img)
    resample_method, name = Image.Resampling.BILINEAR, "bilinear"
    if pil_img.size[0] > target_size[0] or pil_img.size[1] > target_size[1]:
        resample_method, name = Image.Resampling.LANCZOS, "lanczos"
    resized = pil_img.resize(target_size, resample=resample_method)
    x = np.asarray(resized, dtype=np.float32)
    # utils.normalize_images(x, mean=GEMMA_IMAGE_MEAN, std=GEMMA_IMAGE_STD), exactly (in place on the float32 array)
    x -= np.asarray((127.5,) * 3)
    x /= np.asarray((127.5,) * 3)
    x = np.clip(x, -1, 1)
    assert x.dtype == np.float32 and x.shape == (size, size, 3)
    return x, name


def hf_preprocess(img, size):
    """Gemma3ImageProcessor (no pan-and-scan): resize BILINEAR, rescale 1/255, normalize mean 0.5 std 0.5."""
    resized = np.array(Image.fromarray(img).resize((size, size), resample=Image.Resampling.BILINEAR))
    x = (resized.astype(np.float64) * (1 / 255)).astype(np.float32)  # image_transforms.rescale
    mean = np.array([0.5] * 3, dtype=np.float32)  # image_transforms.normalize: mean/std in the image dtype
    std = np.array([0.5] * 3, dtype=np.float32)
    x = (x - mean) / std
    assert x.dtype == np.float32 and x.shape == (size, size, 3)
    return x


def image_token_outputs(w, o, c):
    """VisionEmbedder outputs for IMAGE_TOKEN_FILES, MaxText and HF preprocessing; float32 [n, 256, E]."""
    size = c["image_size"]
    imgs = [load_rgb(f) for f in IMAGE_TOKEN_FILES]
    mt = [maxtext_preprocess(im, size) for im in imgs]
    pix = {"maxtext": np.stack([x for x, _ in mt]).astype(F32),
           "hf": np.stack([hf_preprocess(im, size) for im in imgs]).astype(F32)}
    res = {}
    for k, px in pix.items():
        assert px.min() >= -1.0 and px.max() <= 1.0, k
        cc = dict(c, N=px.shape[0])
        out = maxtext_forward(w, px, cc)["out"]
        err = (out - hf_forward(o, px, cc)["out"]).abs().max().item()
        assert err < 1e-10, (k, err)
        assert torch.isfinite(out).all() and tuple(out.shape) == (len(imgs), MM_TOKENS, c["E"]), k
        res[k] = out.numpy().astype(F32)
    meta = {"files": ["tests/fixtures/images/" + f for f in IMAGE_TOKEN_FILES], "size": size,
            "maxtext_filters": [nm for _, nm in mt], "hf_filter": "bilinear",
            "outputs": {"maxtext": "image_tokens_maxtext.npy", "hf": "image_tokens_hf.npy"},
            "what": "VisionEmbedder output for the files (opened with Pillow, .convert('RGB')), preprocessed by "
                    "MaxText's preprocess_mm_data_gemma3 at (size, size) / HF Gemma3ImageProcessor at size x size"}
    return res, meta


def hf_config(c):
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
            "mm_tokens_per_image": MM_TOKENS,
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": c["D"],
                              "intermediate_size": c["F"], "num_hidden_layers": c["L"],
                              "num_attention_heads": c["heads"], "image_size": c["image_size"],
                              "patch_size": c["p"], "num_channels": 3, "layer_norm_eps": EPS,
                              "hidden_act": "gelu_pytorch_tanh"},
            "text_config": {"model_type": "gemma3_text", "hidden_size": c["E"], "rms_norm_eps": EPS}}


def make_case(name, seed, image_size, p, D, heads, F_, L, E, N, image_tokens=False):
    c = dict(image_size=image_size, p=p, D=D, heads=heads, F=F_, L=L, E=E, N=N, T=(image_size // p) ** 2)
    g = rng(seed)
    w, hf_norm = maxtext_weights(g, c)
    pixels = g.uniform(-1.0, 1.0, (N, image_size, image_size, 3)).astype(F32)
    o = hf_weights(w, hf_norm, c)

    # The converter's HF -> MaxText hooks give back the MaxText tree bit for bit.
    back = hf_to_maxtext(o, c)
    assert sorted(back) == sorted(w)
    for k in w:
        assert back[k].shape == w[k].shape and back[k].dtype == np.float32, k
        assert np.array_equal(back[k], w[k]), k

    outs = maxtext_forward(w, pixels, c)
    check = hf_forward(o, pixels, c)
    for k, v in outs.items():
        err = (v - check[k]).abs().max().item()
        assert err < 1e-10, (name, k, err)
        assert torch.isfinite(v).all(), (name, k)
    shapes = {"embedded": (N, c["T"], D), "encoder_norm": (N, c["T"], D), "exit": (N, MM_TOKENS, D),
              "out": (N, MM_TOKENS, E)}
    shapes.update({f"block_{i}": (N, c["T"], D) for i in range(L)})
    for k, s in shapes.items():
        assert tuple(outs[k].shape) == s, (k, outs[k].shape, s)

    d = case_dir(name)
    save_npy(d, "pixels", pixels)
    save_safetensors(os.path.join(d, "model.safetensors"), w)
    hd = os.path.join(d, "hf")
    os.makedirs(hd, exist_ok=True)
    save_safetensors(os.path.join(hd, "model.safetensors"), o, metadata={"format": "pt"})
    with open(os.path.join(hd, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=1, sort_keys=True)
    for k, v in outs.items():
        save_npy(d, k, v.numpy().astype(F32))
    meta = {
        "what": "MaxText Gemma 3 vision encoder (Gemma3VisionEncoderLayer + VisionEmbedder), float64 from float32 "
                "weights; outputs after each stage",
        "kind": "gemma3_vision", "maxtext_commit": "e591f30",
        "vision": {"image_size": image_size, "patch_size": p, "num_channels": 3, "hidden_size": D,
                   "intermediate_size": F_, "num_layers": L, "num_heads": heads, "head_dim": D // heads,
                   "eps": EPS, "mm_tokens_per_image": MM_TOKENS, "emb_dim": E, "num_patches": c["T"],
                   "pool_window": int(round(c["T"] ** 0.5)) // int(MM_TOKENS ** 0.5)},
        "num_images": N,
        "maxtext_config": {"image_size_for_vit": image_size, "patch_size_for_vit": p, "conv_stride_for_vit": p,
                           "num_channels_for_vit": 3, "hidden_size_for_vit": D, "intermediate_size_for_vit": F_,
                           "num_hidden_layers_for_vit": L, "num_attention_heads_for_vit": heads,
                           "posemb_type_for_vit": "learn", "normalization_layer_epsilon": EPS, "emb_dim": E},
        "outputs": ["embedded"] + [f"block_{i}" for i in range(L)] + ["encoder_norm", "exit", "out"],
        "pixels_layout": "NHWC float32 in [-1, 1]",
    }
    if image_tokens:
        # After the case's own files; no random draws, so nothing above depends on it.
        toks, meta["image_tokens"] = image_token_outputs(w, o, c)
        for k, v in toks.items():
            save_npy(d, "image_tokens_" + k, v)
        print("%s: image tokens %s, filters %s, max|maxtext| %.3f, max|hf| %.3f, max|maxtext - hf| %.3g" % (
            name, toks["maxtext"].shape, meta["image_tokens"]["maxtext_filters"], np.abs(toks["maxtext"]).max(),
            np.abs(toks["hf"]).max(), np.abs(toks["maxtext"] - toks["hf"]).max()))
    save_meta(d, meta)
    print("%s: T=%d, max|out| %.3f, max|encoder_norm| %.3f, max|block_%d| %.3f, hf check ok" % (
        name, c["T"], outs["out"].abs().max().item(), outs["encoder_norm"].abs().max().item(), L - 1,
        outs[f"block_{L - 1}"].abs().max().item()))


def main():
    torch.set_grad_enabled(False)
    make_case("gemma3_vision_pool", 3001, image_size=64, p=2, D=16, heads=2, F_=24, L=2, E=32, N=2)
    make_case("gemma3_vision_nopool", 3002, image_size=32, p=2, D=16, heads=4, F_=20, L=1, E=32, N=1,
              image_tokens=True)


if __name__ == "__main__":
    main()
