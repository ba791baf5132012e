"""Writes tests/fixtures/gemma3_mm_model/mmproj.gguf: the llama.cpp "mmproj" GGUF that llama.cpp's own converter
(convert_hf_to_gguf.py --mmproj, class Gemma3VisionModel(MmprojModel)) writes for the tiny Gemma 3 vision tower in
tests/fixtures/gemma3_mm_model/hf/, plus mmproj.json (every tensor with its GGUF shape and HF meaning, every metadata
key with its value and GGUF type, the llama.cpp commit read). Independent of the C++ code and of the `gguf` package.

llama.cpp read at commit 0024aa7417efd50a7c2a79e049dfbbbceb0beaaf (ggml-org/llama.cpp):
  convert_hf_to_gguf.py
    ModelBase.__init__ / index_tensors   tensors from gguf.utility.SafetensorsLocal (sorted by name, i.e. the order
                                          of the tensors in the GGUF is the sorted order of the HF names); the
                                          GGUFWriter is created with arch MODEL_ARCH_NAMES[MMPROJ] = "clip", which
                                          writes general.architecture first.
    ModelBase.prepare_tensors            per tensor: modify_tensors -> data_torch.numpy() (no squeeze, no reshape);
                                          dtype: tensor_force_quant, then F32 for n_dims <= 1 or names ending
                                          "_norm.weight", then F32 for POS_EMBD / V_ENC_EMBD_POS, else the outtype.
    ModelBase.prepare_metadata / write   tensors first, then general.type (set_type), the Metadata heuristics
                                          (general.name, general.size_label, ...), set_gguf_parameters,
                                          general.quantization_version; GGUFWriter.write_* (header, KV, tensor
                                          infos, pad to 32, data each padded to 32).
    ModelBase.modify_tensors / map_tensor_name   gguf.TensorNameMap(MODEL_ARCH.MMPROJ).get_name(try .weight/.bias).
    MmprojModel.__init__                  n_embd_text = text_config hidden_size; hparams = vision_config;
                                          preprocessor_config.json (+ processor_config.json) merged.
    MmprojModel.set_gguf_parameters       general.file_type, clip.has_vision_encoder, clip.vision.projection_dim,
                                          image_size, patch_size, embedding_length, feed_forward_length,
                                          block_count, attention.head_count, image_mean, image_std (in this order).
    MmprojModel.tensor_force_quant        patch_embd -> F16 only for outtype f16, else F32.
    Gemma3VisionModel.set_gguf_parameters clip.projector_type "gemma3", clip.vision.attention.layer_norm_epsilon
                                          (vision layer_norm_eps), clip.use_gelu true, and
                                          clip.vision.projector.scale_factor = (image_size // patch_size) //
                                          sqrt(image_seq_length) when > 0 and != 4 (here 32 // 16 = 2).
    Gemma3VisionModel.tensor_force_quant  "input_projection" -> F16 (always, even for --outtype f32);
                                          ".embeddings." (patch/position embedding) -> F32.
    Gemma3VisionModel.modify_tensors      keeps multi_modal_projector.* / vision_tower.* (skips
                                          vision_model.head.*), name.replace("_weight", ".weight"), and
                                          soft_emb_norm.weight -> data_torch + 1 (Gemma3RMSNorm's 1 + w, float32).
  gguf-py/gguf/constants.py   Keys.Clip / Keys.ClipVision, MODEL_TENSOR V_* and TENSOR_NAMES, VisionProjectorType,
                              GGUFValueType, GGML_QUANT_VERSION = 2, GGUF_DEFAULT_ALIGNMENT = 32, LlamaFileType.
  gguf-py/gguf/tensor_mapping.py  V_ENC_EMBD_PATCH/POS, V_ENC_ATTN_Q/K/V/O, V_ENC_INPUT_NORM (layer_norm1 -> ln1),
                              V_ENC_POST_ATTN_NORM (layer_norm2 -> ln2), V_ENC_FFN_UP (fc1), V_ENC_FFN_DOWN (fc2),
                              V_POST_NORM (post_layernorm -> v.post_ln), V_MM_INP_PROJ, V_MM_SOFT_EMB_NORM.
  gguf-py/gguf/gguf_writer.py add_* value types (u32 / f32 / bool / string / array of f32), _pack_val,
                              write_ti_data_to_file (dims reversed = ggml ne order), write_tensors_to_file.
  gguf-py/gguf/metadata.py (stored version 18f4bb5e) + utility.py  general.name from the directory name ("hf" ->
                              "Hf"); general.size_label from the parameter count (21072 -> "21K").
  tools/mtmd/clip.cpp, clip-impl.h, clip-model.h, mtmd.cpp, models/siglip.cpp (stored 81d97dfb),
  mtmd-image.cpp (stored 0309b28f / 04f6fef9): how the reader uses each tensor (see mmproj.json "runtime").

Deviations from what the converter writes (the only ones):
  * Tensor types: this file is what `convert_hf_to_gguf.py --mmproj --outtype f32` writes (general.file_type = 0,
    ALL_F32), except mm.input_projection.weight, which Gemma3VisionModel.tensor_force_quant forces to F16 even then:
    it is written F32 here. (The converter's default --outtype auto falls back to f16 for float32 checkpoints:
    general.file_type = 1 and every 2-D v.blk.* weight F16 too; mmproj.json lists both per tensor.)
  * hf/ has no preprocessor_config.json, so the real converter would stop with KeyError('image_mean'). The values
    used are the ones Gemma 3's preprocessor_config.json (Gemma3ImageProcessor) carries: image_mean = image_std =
    [0.5, 0.5, 0.5], image_seq_length 256 (= config mm_tokens_per_image).
Run from /work/main: /usr/bin/python3 tests/reference/gemma3_mmproj_fixture.py
"""
import json
import math
import os
import re
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gguf_min import read_gguf  # noqa: E402

LLAMA_CPP_COMMIT = "0024aa7417efd50a7c2a79e049dfbbbceb0beaaf"
CASE = os.path.normpath(os.path.join(HERE, "..", "fixtures", "gemma3_mm_model"))
HF_DIR = os.path.join(CASE, "hf")
OUT_GGUF = os.path.join(CASE, "mmproj.gguf")
OUT_JSON = os.path.join(CASE, "mmproj.json")

# What Gemma 3's preprocessor_config.json holds (hf/ lacks the file; see the module docstring).
ASSUMED_PREPROCESSOR_CONFIG = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "image_seq_length": 256}

# GGUF value types (gguf-py constants.GGUFValueType) and tensor types (GGMLQuantizationType)
UINT32, FLOAT32, BOOL, STRING, ARRAY = 4, 6, 7, 8, 9
TYPE_NAMES = {UINT32: "UINT32", FLOAT32: "FLOAT32", BOOL: "BOOL", STRING: "STRING", ARRAY: "ARRAY"}
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32  # GGUF_DEFAULT_ALIGNMENT; general.alignment is not written


# ----------------------------------------------------------------------------------------------------------------
# Input
# ----------------------------------------------------------------------------------------------------------------

def read_safetensors(path):
    """Pure-Python safetensors reader (F32 only): {name: float32 array}, in file-header order."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        a, b = meta["data_offsets"]
        arr = np.frombuffer(data, dtype="<f4", count=(b - a) // 4, offset=base + a).reshape(meta["shape"])
        out[name] = arr.astype(np.float32)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Tensor mapping (Gemma3VisionModel.modify_tensors + TensorNameMap for MODEL_ARCH.MMPROJ, only the entries used)
# ----------------------------------------------------------------------------------------------------------------

HFV = "vision_tower.vision_model."
# (regex on the HF name after name.replace("_weight", ".weight") with the .weight/.bias suffix removed, GGUF base)
NAME_MAP = [
    (r"vision_tower\.vision_model\.embeddings\.patch_embedding", "v.patch_embd"),        # V_ENC_EMBD_PATCH
    (r"vision_tower\.vision_model\.embeddings\.position_embedding", "v.position_embd"),  # V_ENC_EMBD_POS
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.self_attn\.q_proj", "v.blk.{}.attn_q"),
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.self_attn\.k_proj", "v.blk.{}.attn_k"),
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.self_attn\.v_proj", "v.blk.{}.attn_v"),
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.self_attn\.out_proj", "v.blk.{}.attn_out"),  # V_ENC_ATTN_O
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.layer_norm1", "v.blk.{}.ln1"),  # V_ENC_INPUT_NORM
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.layer_norm2", "v.blk.{}.ln2"),  # V_ENC_POST_ATTN_NORM
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.mlp\.fc1", "v.blk.{}.ffn_up"),   # V_ENC_FFN_UP
    (r"vision_tower\.vision_model\.encoder\.layers\.(\d+)\.mlp\.fc2", "v.blk.{}.ffn_down"),  # V_ENC_FFN_DOWN
    (r"vision_tower\.vision_model\.post_layernorm", "v.post_ln"),                            # V_POST_NORM
    (r"multi_modal_projector\.mm_input_projection", "mm.input_projection"),                  # V_MM_INP_PROJ
    (r"multi_modal_projector\.mm_soft_emb_norm", "mm.soft_emb_norm"),                        # V_MM_SOFT_EMB_NORM
]


def map_name(name):
    for suffix in (".weight", ".bias"):  # map_tensor_name's try_suffixes
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            for pat, tmpl in NAME_MAP:
                m = re.fullmatch(pat, base)
                if m:
                    return tmpl.format(*m.groups()) + suffix
    raise ValueError(f"Can not map tensor {name!r}")


def meaning(gname):
    """How llama.cpp's clip.cpp / siglip.cpp use the stored tensor (HF terms)."""
    if gname == "v.patch_embd.weight":
        return ("Conv2d kernel, HF [D, 3, p, p] = [out, in, kh, kw] as stored; ggml ne [kw, kh, 3, D]. clip_graph::"
                "build_inp: ggml_conv_2d(kernel, inp_raw ne [W, H, 3] (planar RGB), stride p, no padding) = "
                "torch conv2d (cross-correlation); patches flattened row-major (index py * (W/p) + px)")
    if gname == "v.patch_embd.bias":
        return "Conv2d bias [D], added to every patch (build_inp)"
    if gname == "v.position_embd.weight":
        return ("learned position embedding [T, D] as stored (ggml ne [D, T]); row t added to patch t (row-major "
                "patch order), no interpolation for gemma3 (siglip.cpp: learned_pos_embd = model.position_embeddings)")
    m = re.fullmatch(r"v\.blk\.(\d+)\.(\w+)\.(weight|bias)", gname)
    if m:
        kind, wb = m.group(2), m.group(3)
        if kind in ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down"):
            what = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_out": "out_proj",
                    "ffn_up": "mlp.fc1 (then GELU-tanh, clip.use_gelu)", "ffn_down": "mlp.fc2"}[kind]
            if wb == "weight":
                return (f"nn.Linear {what} weight [out, in] as stored (ggml ne [in, out]); y = x @ W^T "
                        f"(ggml_mul_mat(W, x)); heads = consecutive d_head slices of the output")
            return f"nn.Linear {what} bias, added after the matmul"
        if kind in ("ln1", "ln2"):
            which = "layer_norm1 (pre-attention)" if kind == "ln1" else "layer_norm2 (pre-FFN)"
            return f"LayerNorm {which} {wb}: ggml_norm(x, eps) * weight + bias (plain LayerNorm, no +1)"
    if gname.startswith("v.post_ln."):
        return "post_layernorm (final LayerNorm of the tower, before pooling) " + gname.split(".")[-1]
    if gname == "mm.soft_emb_norm.weight":
        return ("HF mm_soft_emb_norm.weight + 1 (float32 add at conversion: Gemma3RMSNorm scales by 1 + w); "
                "reader: ggml_rms_norm(x, eps) * stored weight, with no further +1 (siglip.cpp)")
    if gname == "mm.input_projection.weight":
        return ("HF mm_input_projection_weight [D_vision, D_text] as stored (ggml ne [D_text, D_vision]); reader: "
                "ggml_mul_mat(ggml_cont(ggml_transpose(W)), x), i.e. y = x @ W_hf (tokens [N, D_vision] -> "
                "[N, D_text]), the same product as HF's torch.matmul(normed, mm_input_projection_weight)")
    raise AssertionError(gname)


def llama_cpp_types(hf_name, gname, ndim):
    """(type under --outtype f32, type under the default --outtype auto -> f16), ModelBase.prepare_tensors."""
    def pick(outtype_f16):
        q = None
        if "input_projection" in hf_name:          # Gemma3VisionModel.tensor_force_quant
            q = "F16"
        elif ".embeddings." in hf_name:
            q = "F32"
        elif ".patch_embd.weight" in gname:         # MmprojModel.tensor_force_quant
            q = "F16" if outtype_f16 else "F32"
        if ndim <= 1 or gname.endswith("_norm.weight"):
            q = "F32"
        if q is None and (gname == "v.position_embd.weight" or gname[-7:] not in (".weight", ".lora_a", ".lora_b")):
            q = "F32"
        if q is None:
            q = "F16" if outtype_f16 else "F32"
        return q
    return pick(False), pick(True)


def convert_tensors(hf):
    """Gemma3VisionModel.modify_tensors over the HF tensors in sorted-name order (SafetensorsLocal)."""
    out = []
    for name in sorted(hf):
        if "vision_model.head." in name:
            continue
        if not name.startswith(("multi_modal_projector.", "vision_tower.", "multimodal_projector.", "vision_model.")):
            continue  # language_model.* (the text model is converted separately)
        src = hf[name]
        mname = name.replace("_weight", ".weight")
        if "soft_emb_norm.weight" in mname:
            data = (src + np.float32(1.0)).astype(np.float32)  # data_torch + 1 in float32
            transform = "HF + 1 (float32)"
        else:
            data = src
            transform = "as stored"
        gname = map_name(mname)
        t_f32, t_default = llama_cpp_types(name, gname, data.ndim)
        out.append({"gguf_name": gname, "data": np.ascontiguousarray(data, dtype=np.float32), "hf_name": name,
                    "hf_shape": list(src.shape), "transform": transform,
                    "llama_cpp_type_outtype_f32": t_f32, "llama_cpp_type_default_outtype": t_default})
    return out


# ----------------------------------------------------------------------------------------------------------------
# Metadata (in the order the converter adds the keys)
# ----------------------------------------------------------------------------------------------------------------

def id_to_title(s):  # gguf.Metadata.id_to_title
    return " ".join(w.title() if w.islower() and not re.match(r"^(v\d+(?:\.\d+)*|\d.*)$", w) else w
                    for w in s.strip().replace("-", " ").split())


def size_label(total):  # gguf.utility.model_weight_count_rounded_notation (no experts)
    if total >= 1e12:
        scaled, suffix = total * 1e-12, "T"
    elif total >= 1e9:
        scaled, suffix = total * 1e-9, "B"
    elif total >= 1e6:
        scaled, suffix = total * 1e-6, "M"
    else:
        scaled, suffix = total * 1e-3, "K"
    fix = max(2 - len(str(round(scaled)).lstrip("0")), 0)
    return f"{scaled:.{fix}f}{suffix}"


def build_metadata(config, tensors):
    v = config["vision_config"]
    text = {**config, **config["text_config"]}
    n_embd_text = text.get("hidden_size", text.get("n_embd", 0))
    total_params = sum(int(np.prod(t["data"].shape)) for t in tensors)
    image_seq_length = ASSUMED_PREPROCESSOR_CONFIG.get("image_seq_length", 256)
    n_per_side = int(image_seq_length ** 0.5)
    proj_scale_factor = (v["image_size"] // v["patch_size"]) // n_per_side
    md = [
        ("general.architecture", STRING, "clip"),                 # GGUFWriter.__init__ -> add_architecture
        ("general.type", STRING, "mmproj"),                       # MmprojModel.set_type
        ("general.name", STRING, id_to_title(os.path.basename(os.path.normpath(HF_DIR)))),  # Metadata heuristics
        ("general.size_label", STRING, size_label(total_params)),  # ModelBase.prepare_metadata
        ("general.file_type", UINT32, 0),                         # LlamaFileType.ALL_F32 (--outtype f32)
        ("clip.has_vision_encoder", BOOL, True),
        ("clip.vision.projection_dim", UINT32, n_embd_text),
        ("clip.vision.image_size", UINT32, v["image_size"]),
        ("clip.vision.patch_size", UINT32, v["patch_size"]),
        ("clip.vision.embedding_length", UINT32, v["hidden_size"]),
        ("clip.vision.feed_forward_length", UINT32, v["intermediate_size"]),
        ("clip.vision.block_count", UINT32, v["num_hidden_layers"]),
        ("clip.vision.attention.head_count", UINT32, v["num_attention_heads"]),
        ("clip.vision.image_mean", ARRAY, (FLOAT32, list(ASSUMED_PREPROCESSOR_CONFIG["image_mean"]))),
        ("clip.vision.image_std", ARRAY, (FLOAT32, list(ASSUMED_PREPROCESSOR_CONFIG["image_std"]))),
        ("clip.projector_type", STRING, "gemma3"),                 # Gemma3VisionModel.set_gguf_parameters
        ("clip.vision.attention.layer_norm_epsilon", FLOAT32, v.get("layer_norm_eps", 1e-6)),
        ("clip.use_gelu", BOOL, True),
    ]
    if proj_scale_factor > 0 and proj_scale_factor != 4:
        md.append(("clip.vision.projector.scale_factor", UINT32, proj_scale_factor))
    md.append(("general.quantization_version", UINT32, 2))       # GGML_QUANT_VERSION
    return md, total_params, proj_scale_factor


# ----------------------------------------------------------------------------------------------------------------
# GGUF v3 writer (byte layout of gguf-py GGUFWriter: header, KV, tensor infos, pad to 32, data each padded to 32)
# ----------------------------------------------------------------------------------------------------------------

def _s(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _val(t, v):
    if t == UINT32:
        return struct.pack("<I", v)
    if t == FLOAT32:
        return struct.pack("<f", v)
    if t == BOOL:
        return struct.pack("<?", v)
    if t == STRING:
        return _s(v)
    if t == ARRAY:
        sub, items = v
        return struct.pack("<IQ", sub, len(items)) + b"".join(_val(sub, i) for i in items)
    raise ValueError(t)


def pad(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def write_gguf(path, metadata, tensors):
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, t, v in metadata:
        out += _s(key) + struct.pack("<I", t) + _val(t, v)
    off = 0
    for t in tensors:
        a = t["data"]
        out += _s(t["gguf_name"]) + struct.pack("<I", a.ndim)
        out += b"".join(struct.pack("<Q", d) for d in reversed(a.shape))  # ggml ne order
        out += struct.pack("<IQ", GGML_F32, off)
        t["offset"] = off
        off += pad(a.nbytes)
    out += b"\0" * (pad(len(out)) - len(out))
    for t in tensors:
        b = t["data"].astype("<f4").tobytes()
        out += b + b"\0" * (pad(len(b)) - len(b))
    with open(path, "wb") as f:
        f.write(out)


# ----------------------------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------------------------

def raw_header(path):
    """Independent re-parse of the header: KV types (clip.cpp's gguf_get_val_u32/f32/bool assert them) and infos."""
    with open(path, "rb") as f:
        data = f.read()
    pos = [0]

    def take(fmt):
        v = struct.unpack_from(fmt, data, pos[0])[0]
        pos[0] += struct.calcsize(fmt)
        return v

    def string():
        n = take("<Q")
        s = data[pos[0]:pos[0] + n].decode()
        pos[0] += n
        return s

    def value(t):
        if t == STRING:
            return string()
        if t == ARRAY:
            sub, n = take("<I"), take("<Q")
            return (sub, [value(sub) for _ in range(n)])
        return take({UINT32: "<I", FLOAT32: "<f", BOOL: "<?"}[t])

    assert data[:4] == b"GGUF"
    pos[0] = 4
    version, n_t, n_kv = take("<I"), take("<Q"), take("<Q")
    kv = []
    for _ in range(n_kv):
        k = string()
        t = take("<I")
        kv.append((k, t, value(t)))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        infos.append((name, dims, take("<I"), take("<Q")))
    return version, kv, infos, pad(pos[0]), len(data)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def llamacpp_forward(meta, t, pixels_hwc):
    """The tower + projector as clip.cpp (build_inp, build_vit, siglip.cpp GEMMA3 branch) computes it, in float64,
    reading only the GGUF (arrays are row-major, i.e. ggml ne reversed)."""
    f = {k: v.astype(np.float64) for k, v in t.items()}
    p = meta["clip.vision.patch_size"]
    D = meta["clip.vision.embedding_length"]
    H = meta["clip.vision.attention.head_count"]
    L = meta["clip.vision.block_count"]
    eps = float(meta["clip.vision.attention.layer_norm_epsilon"])
    k = meta.get("clip.vision.projector.scale_factor", 4)
    img = pixels_hwc.astype(np.float64).transpose(2, 0, 1)  # inp_raw: planar [3, H, W] (ne [W, H, 3])
    C, Hh, Ww = img.shape
    ny, nx = Hh // p, Ww // p
    # ggml_conv_2d(kernel ne [kw, kh, C, D], inp ne [W, H, C]) -> ne [nx, ny, D] -> [n_patches, D]
    patches = img.reshape(C, ny, p, nx, p).transpose(1, 3, 0, 2, 4).reshape(ny * nx, C * p * p)
    x = patches @ f["v.patch_embd.weight"].reshape(D, C * p * p).T + f["v.patch_embd.bias"]
    x = x + f["v.position_embd.weight"]

    def norm(y, w, b):
        mu = y.mean(-1, keepdims=True)
        var = ((y - mu) ** 2).mean(-1, keepdims=True)
        return (y - mu) / np.sqrt(var + eps) * w + b

    def mm(w, y):  # ggml_mul_mat(W ne [in, out], y ne [in, N]) -> y @ W_rowmajor^T
        return y @ w.T

    dh = D // H
    for il in range(L):
        b = f"v.blk.{il}."
        h = norm(x, f[b + "ln1.weight"], f[b + "ln1.bias"])
        q = (mm(f[b + "attn_q.weight"], h) + f[b + "attn_q.bias"]).reshape(-1, H, dh).transpose(1, 0, 2)
        kk = (mm(f[b + "attn_k.weight"], h) + f[b + "attn_k.bias"]).reshape(-1, H, dh).transpose(1, 0, 2)
        vv = (mm(f[b + "attn_v.weight"], h) + f[b + "attn_v.bias"]).reshape(-1, H, dh).transpose(1, 0, 2)
        s = q @ kk.transpose(0, 2, 1) / math.sqrt(dh)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ vv).transpose(1, 0, 2).reshape(-1, D)
        x = x + mm(f[b + "attn_out.weight"], a) + f[b + "attn_out.bias"]
        h = norm(x, f[b + "ln2.weight"], f[b + "ln2.bias"])
        h = gelu_tanh(mm(f[b + "ffn_up.weight"], h) + f[b + "ffn_up.bias"])
        x = x + mm(f[b + "ffn_down.weight"], h) + f[b + "ffn_down.bias"]
    x = norm(x, f["v.post_ln.weight"], f["v.post_ln.bias"])
    # transpose -> cont_4d(nx, ny, D) -> pool_2d AVG k x k stride k -> [(nx/k)*(ny/k), D], row-major tokens
    x = x.reshape(ny // k, k, nx // k, k, D).mean(axis=(1, 3)).reshape(-1, D)
    x = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * f["mm.soft_emb_norm.weight"]  # rms_norm * w (no +1)
    return x @ f["mm.input_projection.weight"]  # mul_mat(cont(transpose(W ne [E, D])), x) = x @ W_hf [D, E]


def check(tensors, metadata, hf):
    version, kv, infos, data_start, file_len = raw_header(OUT_GGUF)
    assert version == 3
    assert [(k, t) for k, t, _ in kv] == [(k, t) for k, t, _ in metadata], "metadata keys / types / order"
    for (k, t, v), (_, _, w) in zip(metadata, kv):
        if t == FLOAT32:
            assert w == float(np.float32(v)), k
        elif t == ARRAY:
            assert w[0] == v[0] and w[1] == [float(np.float32(i)) for i in v[1]], k
        else:
            assert w == v, k
    assert [i[0] for i in infos] == [t["gguf_name"] for t in tensors], "tensor order"
    for (name, dims, ty, off), t in zip(infos, tensors):
        assert dims == list(reversed(t["data"].shape)) and ty == GGML_F32 and off == t["offset"], name
        assert (data_start + off) % ALIGN == 0
    assert file_len == data_start + sum(pad(t["data"].nbytes) for t in tensors)

    meta, got = read_gguf(OUT_GGUF)  # gguf_min: row-major arrays, GGUF dims reversed
    assert len(got) == len(tensors)
    one = np.float32(1.0)
    for t in tensors:
        g = got[t["gguf_name"]]
        src = hf[t["hf_name"]]
        assert g.dtype == np.float32 and list(g.shape) == t["hf_shape"], t["gguf_name"]
        want = (src + one).astype(np.float32) if t["transform"].startswith("HF + 1") else src
        assert np.array_equal(g.view(np.uint32), want.view(np.uint32)), t["gguf_name"]  # bit for bit
    # every vision/projector HF tensor is present exactly once
    used = sorted(t["hf_name"] for t in tensors)
    assert used == sorted(n for n in hf if n.startswith((HFV, "multi_modal_projector."))), "coverage"

    # semantic check: llama.cpp's reading of these tensors reproduces the fixture's soft tokens
    pix = np.load(os.path.join(CASE, "pixels.npy"))          # [2, 64, 64, 3] NHWC in [-1, 1]
    ref = np.load(os.path.join(CASE, "image_tokens.npy"))    # [2, 256, 32] (float64 reference, rounded)
    worst = 0.0
    for i in range(pix.shape[0]):
        y = llamacpp_forward(meta, got, pix[i])
        assert y.shape == ref[i].shape, y.shape
        worst = max(worst, float(np.abs(y - ref[i]).max()))
    assert worst < 1e-5, worst
    return worst


# ----------------------------------------------------------------------------------------------------------------

def main():
    with open(os.path.join(HF_DIR, "config.json")) as f:
        config = json.load(f)
    hf = read_safetensors(os.path.join(HF_DIR, "model.safetensors"))
    tensors = convert_tensors(hf)
    metadata, total_params, scale = build_metadata(config, tensors)
    write_gguf(OUT_GGUF, metadata, tensors)
    worst = check(tensors, metadata, hf)

    def jval(t, v):
        if t == FLOAT32:
            return float(np.float32(v))
        if t == ARRAY:
            return [float(np.float32(i)) for i in v[1]]
        return v

    doc = {
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "llama_cpp_files": {
            "converter": "convert_hf_to_gguf.py (ModelBase.prepare_tensors/prepare_metadata/write, MmprojModel, "
                         "Gemma3VisionModel) @ " + LLAMA_CPP_COMMIT,
            "gguf_py": "gguf-py/gguf/{constants,tensor_mapping,gguf_writer}.py @ " + LLAMA_CPP_COMMIT
                       + "; metadata.py @ 18f4bb5e, utility.py @ 1bb0a36a (stored versions)",
            "reader": "tools/mtmd/{clip.cpp,clip-impl.h,clip-model.h,mtmd.cpp} @ " + LLAMA_CPP_COMMIT
                      + "; tools/mtmd/models/siglip.cpp @ 81d97dfb, tools/mtmd/mtmd-image.cpp @ 0309b28f/04f6fef9 "
                        "(stored versions, not at that commit)",
        },
        "source": "tests/fixtures/gemma3_mm_model/hf (config.json, model.safetensors; language_model.* ignored)",
        "written_by": "tests/reference/gemma3_mmproj_fixture.py",
        "gguf": {"version": 3, "alignment": ALIGN, "tensor_count": len(tensors), "kv_count": len(metadata),
                 "tensor_order": "sorted HF names (gguf.utility.SafetensorsLocal), language_model.* skipped",
                 "shape_convention": "shape = ggml ne (fastest dimension first) = HF/numpy shape reversed"},
        "deviations_from_converter": [
            "Types follow `convert_hf_to_gguf.py --mmproj --outtype f32` (general.file_type 0 = ALL_F32), except "
            "mm.input_projection.weight: Gemma3VisionModel.tensor_force_quant forces it to F16 even for f32; "
            "written F32 here. Default `--outtype auto` on float32 weights falls back to f16 (file_type 1): see "
            "llama_cpp_type_default_outtype per tensor.",
            "hf/ has no preprocessor_config.json (the converter would raise KeyError 'image_mean'); values of Gemma "
            "3's preprocessor_config.json used: " + json.dumps(ASSUMED_PREPROCESSOR_CONFIG),
        ],
        "total_parameters": total_params,
        "tensors": [{
            "name": t["gguf_name"], "shape_ne": list(reversed(t["data"].shape)), "type": "F32",
            "llama_cpp_type_outtype_f32": t["llama_cpp_type_outtype_f32"],
            "llama_cpp_type_default_outtype": t["llama_cpp_type_default_outtype"],
            "hf_name": t["hf_name"], "hf_shape": t["hf_shape"], "transform": t["transform"],
            "statement": f"{t['gguf_name']} = {t['hf_name']} {t['transform']}",
            "meaning": meaning(t["gguf_name"]),
            "data_offset": t["offset"],
        } for t in tensors],
        "metadata": [{"key": k, "type": TYPE_NAMES[t] + ("[FLOAT32]" if t == ARRAY else ""), "value": jval(t, v)}
                     for k, t, v in metadata],
        "metadata_notes": {
            "general.name": "Metadata heuristics: no README/_name_or_path, so the input directory name 'hf' -> "
                            "id_to_title -> 'Hf' (informational; clip.cpp only logs it)",
            "general.size_label": f"{total_params} parameters -> model_weight_count_rounded_notation",
            "clip.vision.projection_dim": "text_config.hidden_size (MmprojModel.n_embd_text)",
            "clip.vision.projector.scale_factor": f"(image_size // patch_size) // sqrt(image_seq_length) = "
                                                  f"(64 // 2) // 16 = {scale}; written only when != 4; clip.cpp "
                                                  "defaults hparams.n_merge to 4 for gemma3 when absent",
            "clip.vision.attention.layer_norm_epsilon": "vision_config.layer_norm_eps; clip.cpp uses it for every "
                                                        "LayerNorm and for the soft-emb RMSNorm",
        },
        "runtime": {
            "graph": ("clip_graph::build_inp (conv2d patch embedding + bias), build_vit(NORM_TYPE_NORMAL, "
                      "FFN_GELU, learned pos embd added before the layers, no pre_ln), per layer: x += attn_out("
                      "softmax(q k^T / sqrt(d_head)) v) over all patches (no mask), x += ffn_down(gelu_tanh(ffn_up("
                      "ln2(x)))); v.post_ln; then siglip.cpp GEMMA3: avg pool n_merge x n_merge over the (H/p, W/p) "
                      "patch grid (ggml_pool_2d AVG, stride n_merge), tokens row-major; ggml_rms_norm(eps) * "
                      "mm.soft_emb_norm.weight; y = x @ mm.input_projection (HF orientation)"),
            "n_merge": "clip.vision.projector.scale_factor if present, else 4 (clip.cpp load_hparams GEMMA3)",
            "n_output_tokens": "(image_size/patch_size/n_merge)^2 = 256 here (clip_n_output_tokens)",
            "ffn_swap_heuristic": "clip.cpp load_tensors swaps ffn_up/ffn_down for gemma3 when ffn_down ne[0] == "
                                  "n_embd (legacy files); here ffn_down ne = [24, 16], no swap",
            "image_wrapping": "mtmd.cpp init_vision GEMMA3: text '<start_of_image>' + image embeddings + "
                              "'<end_of_image>'",
            "preprocessing": (
                "mtmd_image_preprocessor_fixed_size: img_tool::resize(img, {S, S}, RESIZE_ALGO_BILINEAR, "
                "image_resize_pad = true (clip_hparams default, gemma3 does not change it), pad colour {0,0,0}); "
                "if the input is already S x S: copied unchanged. Else aspect-preserving: scale = min(S/w, S/h) "
                "(float32), new_w = min(int(ceil(w*scale)), S), new_h likewise; resize_bilinear to new_w x new_h "
                "(x_ratio = (w-1)/new_w, src x = x_ratio*x, x0 = int(src x), lerp in float32 between x0 and x0+1, "
                "same for y, result truncated by static_cast<uint8_t>, no rounding, no antialias); the result is "
                "pasted at offset ((S-new_w)/2, (S-new_h)/2) (integer division) onto an S x S black image; then "
                "per channel f = (u8 / 255.0f - mean[c]) / std[c] in float32 with image_mean/image_std from the "
                "GGUF (0.5 -> [-1, 1]; black padding -> -1). No pan-and-scan, one image -> one S x S tile."),
        },
        "check": {"bit_exact_round_trip": True,
                  "llamacpp_semantics_vs_image_tokens_npy_max_abs_diff": worst,
                  "note": "llamacpp_forward() in the script reads only the GGUF with clip.cpp's conventions and "
                          "reproduces tests/fixtures/gemma3_mm_model/image_tokens.npy from pixels.npy"},
    }
    with open(OUT_JSON, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT_GGUF} ({len(tensors)} tensors, {len(metadata)} keys) and {OUT_JSON}; "
          f"llama.cpp-semantics max |diff| vs image_tokens.npy = {worst:.3g}")


if __name__ == "__main__":
    main()
