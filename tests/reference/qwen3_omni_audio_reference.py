"""Qwen3-Omni audio: the log-mel features its processors compute from 16 kHz PCM, and MaxText's audio tower
(Qwen3OmniAudioEncoder + Qwen3OmniAudioProjector) on a tiny random-weight config, re-stated in float64 (numpy / torch)
and checked against a second, differently organised float64 forward that follows Hugging Face's
Qwen3OmniMoeAudioEncoder. Independent of the C++ library: no C++ code was read to write this.

Sources read:
  MaxText, commit in meta.json ("maxtext_commit"):
    src/maxtext/multimodal/processor_qwen3_omni.py: SAMPLE_RATE / N_FFT / HOP_LENGTH / DITHER constants,
      _np_extract_fbank_features, pre_process_audio_qwen3_omni (pads the waveform to a whole number of seconds),
      preprocess_mm_data_qwen3_omni (audio only via use_audio_in_video), _get_feat_extract_output_lengths,
      get_dummy_audio_shape_for_init_qwen3_omni, add_extra_tokens_for_qwen3_omni, get_rope_index;
    src/maxtext/multimodal/utils.py: spectrogram, mel_filter_bank, hertz_to_mel / mel_to_hertz (htk, kaldi, slaney),
      _create_triangular_filter_bank, window_function, load_audio (librosa.load(path, sr=16000));
    src/maxtext/models/qwen3.py: Qwen3OmniAudioEncoderLayer, Qwen3OmniAudioEncoder, Qwen3OmniAudioProjector;
    src/maxtext/layers/encoders.py: AudioEncoder ("audio_encoder" / Qwen3OmniAudioEncoder_0 /
      Qwen3OmniAudioProjector_0); src/maxtext/layers/embeddings.py: PositionalEmbedding;
    src/maxtext/layers/attentions.py: Attention (is_nope_layer, use_bias_in_projections, query_pre_attn_scalar
      multiplies q); src/maxtext/layers/attention_op.py: generate_attention_mask (AttentionType.FULL: no causal mask);
    src/maxtext/layers/linears.py: MlpBlock ("wi" when one activation), _convert_to_activation_function
      (getattr(flax.linen, "gelu") = jax.nn.gelu, approximate=True by default);
    src/maxtext/configs/models/qwen3-omni-30b-a3b.yml, configs/base.yml, configs/types.py (audio fields);
    src/maxtext/checkpoint_conversion/utils/param_mapping.py: the QWEN3_OMNI audio names and reshape hooks.
  Hugging Face transformers (code index): models/qwen3_omni_moe/modeling_qwen3_omni_moe.py
    (SinusoidsPositionEmbedding, _get_feat_extract_output_lengths, Qwen3OmniMoeAudioEncoder.forward: chunking,
    pad_sequence, conv stack, cu_seqlens windows of n_window_infer); processing_qwen3_omni_moe.py
    (Qwen3OmniMoeProcessorKwargs audio_kwargs: sampling_rate 16000, padding True, truncation False,
    return_attention_mask True); models/whisper/feature_extraction_whisper.py (__call__, the attention-mask
    rescale [::hop] and its trim, _torch_extract_fbank_features, _np_extract_fbank_features, the older
    get_mel_filters formulation); audio_utils.py mel_filter_bank (norm="slaney", mel_scale="slaney",
    0 .. 8000 Hz); the Qwen3OmniMoeAudioEncoderConfig defaults (activation_function "gelu" = exact erf GELU).

Log-mel (what features*.npy hold; float64 here, stored float32):
  pcm int16 -> x = pcm / 32768 (soundfile / librosa convention).
  MaxText pads x with zeros to a multiple of 16000 samples (1 s = 100 frames) BEFORE the STFT; HF (padding=True
  with one clip = "longest") does not pad. Then, for either:
  x is reflect-padded by n_fft/2 = 200 on both sides (numpy "reflect": the edge sample is not repeated);
  frame t = padded[160 t : 160 t + 400], t = 0 .. L//160 (1 + L//160 frames); periodic Hann
  w[n] = 0.5 - 0.5 cos(2 pi n / 400); P[t, k] = |rfft(frame * w)[k]|^2, k = 0..200 (bin k at 40 k Hz);
  mel = max(1e-10, P @ fb) with fb [201, 128] below; lm = log10(mel); the LAST frame is dropped (L//160 frames
  remain); lm = max(lm, max(lm) - 8) with the max over the whole (remaining) array; features = (lm + 4) / 4,
  laid out [128 mel, frames].
  Slaney mel scale: m(f) = 3 f / 200 for f < 1000 Hz, 15 + ln(f / 1000) * 27 / ln(6.4) above; inverse likewise.
  fb: 130 points equally spaced in mel from m(0) = 0 to m(8000) = 45.2456..., mapped back to Hz f_0..f_129;
  filter i (0..127) is the triangle max(0, min((f - f_i) / (f_{i+1} - f_i), (f_{i+2} - f) / (f_{i+2} - f_{i+1})))
  evaluated at the bin frequencies f = 40 k (triangles in Hz, not in mel), times the Slaney area norm
  2 / (f_{i+2} - f_i). No dither, no pre-emphasis, no mean/variance normalisation.
  Masks: MaxText's audio_mask is ones [1, frames] INCLUDING the zero-padded second; HF's feature_attention_mask is
  ones [1, L // 160] (the sample mask taken every 160th sample, then trimmed by one when L % 160 != 0).

Encoder, MaxText formulation (encoder_out*.npy). D d_model, N heads, hd = D / N, Fd ffn, C downsample channels,
O output_dim, chunk = 2 n_window = 100 frames:
  features [128, T] with T a multiple of 100 (MaxText reshapes to [T/100, 128, 100] and cannot take a remainder;
  its processor never produces one). Each chunk separately, channels-last with H = mel, W = time:
  h = gelu_tanh(conv(h, conv2d{1,2,3})) three times; conv = 3x3 kernel [kh(mel), kw(time), Cin, Cout], stride 2,
  zero padding 1 on both axes, + bias. 128 mel -> 64 -> 32 -> 16; 100 frames -> 50 -> 25 -> 13.
  [13, C, 16] -> flatten channel-major (index c * 16 + f) -> @ conv_out.kernel [C*16, D] (no bias)
  + sinusoid(pos = 0..12 within EVERY chunk): inv_j = exp(-j ln(10000) / (D/2 - 1)), j < D/2,
  row = [sin(pos * inv), cos(pos * inv)]                                                        -> conv_out.npy
  layer (pre-LN, LayerNorm eps 1e-5, biased variance, scale + bias), L times:
    y = LN1(x); q = y Wq [D, N, hd] + bq [N, hd]; k, v likewise; q = q / sqrt(hd); no rotary;
    A = softmax(q k^T) over the 13 tokens of the SAME chunk only (MaxText runs the chunks as a batch; there is
    no other window: n_window_infer is never read); x = x + (A v) Wo [N, hd, D] + bo [D];
    x = x + gelu_tanh(LN2(x) wi [D, Fd] + bi) wo [Fd, D] + bo                                  -> layer_{i}.npy
  x = LN_post(x) (layernorm_post)                                                               -> ln_post.npy
  chunks concatenated in time order -> [13 T/100, D];
  projector: out = gelu_tanh(x proj1 [D, D] + b1) proj2 [D, O] + b2                           -> encoder_out.npy
  gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (jax.nn.gelu default);
  gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2)) (HF "gelu").

Hugging Face formulation (second forward; encoder_out_hf*.npy with HF's own choices): the T frames are split
  into chunks of 100 with a shorter tail chunk T % 100 (if any), zero-padded to the longest chunk (pad_sequence),
  NCHW F.conv2d with weight [Cout, Cin, kh, kw], exact GELU, permute(0, 3, 1, 2).view(b, t, c*f), conv_out
  Linear, positions 0.. within each chunk, padded tokens dropped (a chunk of r frames keeps
  ((((r-1)//2+1)-1)//2+1-1)//2+1 tokens); attention is block-diagonal over windows of
  w = (tokens of the longest chunk) * (n_window_infer // 100) tokens, the last window taking the remainder
  (cu_seqlens); scale hd^-0.5; fc1 / GELU / fc2; ln_post; proj1 / GELU / proj2. With n_window_infer = 100 and the
  tanh GELU it is the MaxText math; the script asserts agreement to 1e-12 on both files.

Token count (both sources): n(T) = ((((T % 100) - 1)//2 + 1 - 1)//2 + 1 - 1)//2 + 1 + 13 (T // 100), T = feature
frames (for MaxText T = the padded frame count, so n = 13 * seconds rounded up).

Writes tests/fixtures/qwen3_omni_audio/ (see meta.json "files").
Run: /usr/bin/python3 tests/reference/qwen3_omni_audio_reference.py
"""
import json
import math
import os
import subprocess
import sys
import wave

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import case_dir, f32, rng, save_meta, save_npy, save_safetensors, t64  # noqa: E402

torch.set_default_dtype(torch.float64)
F32 = np.float32
CASE = "qwen3_omni_audio"
SEED = 8117

SR = 16000
N_FFT = 400
HOP = 160
N_MELS = 128
F_MAX = 8000.0
CHUNK_SAMPLES = 16000  # MaxText: hop_length (160) * chunk (100)

ENC = "audio_encoder.Qwen3OmniAudioEncoder_0."
PRJ = "audio_encoder.Qwen3OmniAudioProjector_0."
HA = "thinker.audio_tower."

CFG = {"d_model": 32, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 64,
       "downsample_hidden_size": 8, "num_mel_bins": N_MELS, "output_dim": 24, "n_window": 50, "n_window_infer": 100,
       "max_source_positions": 1500, "max_timescale": 10000.0, "eps": 1e-5, "conv_chunksize": 500}

# Sample counts: 20900 = 1.30625 s (20900 % 160 = 100 >= 40, so HF's 130 frames are exactly MaxText's first 130);
# 12345 = 0.7716 s (12345 % 160 = 25 < 40: HF's last frame reflects at the end of the clip, MaxText's sees zeros).
LEN_1 = 20900
LEN_2 = 12345


# ----------------------------------------------------------------------------------------------------------------
# Audio
# ----------------------------------------------------------------------------------------------------------------

def synth(n, seed, tones, gap):
    """A deterministic mix: tones with slow amplitude envelopes, a linear chirp, seeded noise, a digital-silence gap
    (so the max - 8 clamp binds in the unpadded features too) and a partial fade-out to 40 % (keeps the loudest
    frame inside while the clip still ends on signal)."""
    g = rng(seed)
    t = np.arange(n) / SR
    x = np.zeros(n)
    for k, (f, a) in enumerate(tones):
        x += a * (0.6 + 0.4 * np.sin(2 * np.pi * (0.7 + 0.3 * k) * t + k)) * np.sin(2 * np.pi * f * t + 0.3 * k)
    x += 0.08 * np.sin(2 * np.pi * (500.0 * t + 1800.0 * t * t))
    x += 0.02 * g.standard_normal(n)
    a, b = int(gap[0] * SR), int(gap[1] * SR)
    x[a:b] = 0.0
    x *= 0.4 + 0.6 * np.clip((n - np.arange(n)) / (0.15 * SR), 0.0, 1.0)
    return np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)


def write_wav(path, pcm):
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SR)
        f.writeframes(pcm.astype("<i2").tobytes())


def read_wav(path):
    with wave.open(path, "rb") as f:
        assert f.getnchannels() == 1 and f.getsampwidth() == 2 and f.getframerate() == SR
        pcm = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    return pcm.astype(np.float64) / 32768.0


# ----------------------------------------------------------------------------------------------------------------
# Log-mel, main formulation (numpy float64)
# ----------------------------------------------------------------------------------------------------------------

def hz_to_mel(f, scale):
    f = np.asarray(f, dtype=np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    lin = 3.0 * f / 200.0
    log = 15.0 + np.log(np.maximum(f, 1e-30) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(f >= 1000.0, log, lin)


def mel_to_hz(m, scale):
    m = np.asarray(m, dtype=np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    lin = 200.0 * m / 3.0
    log = 1000.0 * np.exp((m - 15.0) * (np.log(6.4) / 27.0))
    return np.where(m >= 15.0, log, lin)


def mel_filters(scale="slaney"):
    """[201, 128]: triangles in Hz between mel-spaced points, Slaney area-normalised."""
    pts = mel_to_hz(np.linspace(hz_to_mel(0.0, scale), hz_to_mel(F_MAX, scale), N_MELS + 2), scale)
    freqs = np.arange(N_FFT // 2 + 1) * (SR / N_FFT)
    fb = np.zeros((N_FFT // 2 + 1, N_MELS))
    for i in range(N_MELS):
        lo, c, hi = pts[i], pts[i + 1], pts[i + 2]
        rise = (freqs - lo) / (c - lo)
        fall = (hi - freqs) / (hi - c)
        fb[:, i] = np.maximum(0.0, np.minimum(rise, fall)) * (2.0 / (hi - lo))
    return fb


def power_frames(x):
    """[1 + L//160, 201] power spectra of the centred, reflect-padded frames."""
    xp = np.pad(np.asarray(x, dtype=np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    n = 1 + (len(xp) - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n)[:, None]
    win = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)
    spec = np.fft.rfft(xp[idx] * win[None, :], axis=1)
    return spec.real ** 2 + spec.imag ** 2


def log_mel(x, scale="slaney", clamp=True):
    """[128, L//160] float64."""
    mel = np.maximum(power_frames(x) @ mel_filters(scale), 1e-10)
    lm = np.log10(mel).T[:, :-1]
    if clamp:
        lm = np.maximum(lm, lm.max() - 8.0)
    return (lm + 4.0) / 4.0


def maxtext_pad(x):
    r = len(x) % CHUNK_SAMPLES
    return np.concatenate([x, np.zeros(CHUNK_SAMPLES - r)]) if r else np.asarray(x)


# ----------------------------------------------------------------------------------------------------------------
# Log-mel, second formulation (HF WhisperFeatureExtractor, torch path, in float64) and float32 emulations
# ----------------------------------------------------------------------------------------------------------------

def whisper_filters_old(dtype=np.float64):
    """[128, 201], the librosa-style construction of WhisperFeatureExtractor.get_mel_filters (older transformers):
    rfftfreq bin centres, mel points from a hard-coded 45.245640471924965 (= slaney mel of 8 kHz), explicit loop."""
    fftfreqs = np.fft.rfftfreq(n=N_FFT, d=1.0 / SR)
    mels = np.linspace(0.0, 45.245640471924965, N_MELS + 2)
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_mel = 1000.0 / f_sp
    logstep = np.log(6.4) / 27.0
    sel = mels >= min_log_mel
    freqs[sel] = 1000.0 * np.exp(logstep * (mels[sel] - min_log_mel))
    fdiff = np.diff(freqs)
    ramps = np.subtract.outer(freqs, fftfreqs)
    w = np.zeros((N_MELS, N_FFT // 2 + 1), dtype=dtype)
    for i in range(N_MELS):
        w[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    return w * (2.0 / (freqs[2:N_MELS + 2] - freqs[:N_MELS]))[:, None]


def hf_torch_log_mel(x, dtype=torch.float64):
    """WhisperFeatureExtractor._torch_extract_fbank_features for one clip, in `dtype`."""
    wav = torch.from_numpy(np.asarray(x)).to(dtype)
    win = torch.hann_window(N_FFT, dtype=dtype)
    st = torch.stft(wav, N_FFT, HOP, window=win, return_complex=True)
    mag = st[..., :-1].abs() ** 2
    filt = torch.from_numpy(whisper_filters_old()).to(dtype)
    lm = torch.clamp(filt @ mag, min=1e-10).log10()
    lm = torch.maximum(lm, lm.max() - 8.0)
    return ((lm + 4.0) / 4.0).numpy()


def maxtext_np_f32(x32):
    """MaxText's _np_extract_fbank_features precision path: float32 waveform, float64 FFT stored as complex64,
    float64 power / mel, log10 cast to float32, clamp and scale in float32."""
    xp = np.pad(np.asarray(x32, dtype=F32), (N_FFT // 2, N_FFT // 2), mode="reflect").astype(np.float64)
    n = 1 + (len(xp) - N_FFT) // HOP
    win = np.hanning(N_FFT + 1)[:-1]
    spec = np.empty((n, N_FFT // 2 + 1), dtype=np.complex64)
    for t in range(n):
        spec[t] = np.fft.rfft(xp[HOP * t:HOP * t + N_FFT] * win)
    p = (np.abs(spec, dtype=np.float64) ** 2).T
    lm = np.log10(np.maximum(1e-10, mel_filters().T @ p)).astype(F32)[:, :-1]
    lm = np.maximum(lm, lm.max() - F32(8.0))
    return (lm + F32(4.0)) / F32(4.0)


# ----------------------------------------------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------------------------------------------

def dims(c):
    D, N = c["d_model"], c["encoder_attention_heads"]
    Mp = (((c["num_mel_bins"] + 1) // 2 + 1) // 2 + 1) // 2
    return dict(D=D, N=N, hd=D // N, Fd=c["encoder_ffn_dim"], L=c["encoder_layers"], C=c["downsample_hidden_size"],
                O=c["output_dim"], Mp=Mp, eps=c["eps"], chunk=2 * c["n_window"], nwi=c["n_window_infer"],
                ts=c["max_timescale"], P=c["max_source_positions"])


def hf_weights(g, c):
    """HF-layout float32 weights of thinker.audio_tower."""
    d = dims(c)
    D, Fd, C, O = d["D"], d["Fd"], d["C"], d["O"]
    w = {}

    def lin(name, o, i, gain=1.0, bias=True, bscale=0.1):
        w[HA + name + ".weight"] = f32(g, (o, i), gain / math.sqrt(i))
        if bias:
            w[HA + name + ".bias"] = f32(g, (o,), bscale)

    def ln(name, n):
        w[HA + name + ".weight"] = f32(g, (n,), 0.1, 1.0)
        w[HA + name + ".bias"] = f32(g, (n,), 0.1)

    w[HA + "conv2d1.weight"] = f32(g, (C, 1, 3, 3), 1.2 / 3.0)
    w[HA + "conv2d1.bias"] = f32(g, (C,), 0.2)
    for k in (2, 3):
        w[HA + f"conv2d{k}.weight"] = f32(g, (C, C, 3, 3), 1.6 / math.sqrt(9 * C))
        w[HA + f"conv2d{k}.bias"] = f32(g, (C,), 0.2)
    lin("conv_out", D, C * d["Mp"], bias=False)
    for i in range(d["L"]):
        p = f"layers.{i}."
        ln(p + "self_attn_layer_norm", D)
        for nm in ("q_proj", "k_proj"):
            lin(p + "self_attn." + nm, D, D, gain=1.6)
        lin(p + "self_attn.v_proj", D, D)
        lin(p + "self_attn.out_proj", D, D)
        ln(p + "final_layer_norm", D)
        lin(p + "fc1", Fd, D, gain=1.5)
        lin(p + "fc2", D, Fd)
    ln("ln_post", D)
    lin("proj1", D, D, gain=1.5)
    lin("proj2", O, D)
    return w


def hf_to_maxtext(w, c):
    """param_mapping.py's HF -> MaxText hooks: conv (O, I, kh, kw) -> (kh, kw, I, O); Linear weight .T; q/k/v
    .T.reshape(D, N, hd), their bias .reshape(N, hd); out_proj .T.reshape(N, hd, D); LayerNorm weight -> scale."""
    d = dims(c)
    D, N, hd = d["D"], d["N"], d["hd"]
    m = {}
    for k in (1, 2, 3):
        m[ENC + f"conv2d{k}.kernel"] = w[HA + f"conv2d{k}.weight"].transpose(2, 3, 1, 0)
        m[ENC + f"conv2d{k}.bias"] = w[HA + f"conv2d{k}.bias"]
    m[ENC + "conv_out.kernel"] = w[HA + "conv_out.weight"].T
    for i in range(d["L"]):
        h, p = HA + f"layers.{i}.", ENC + f"layers_{i}."
        m[p + "input_layer_norm.scale"] = w[h + "self_attn_layer_norm.weight"]
        m[p + "input_layer_norm.bias"] = w[h + "self_attn_layer_norm.bias"]
        m[p + "post_attention_layer_norm.scale"] = w[h + "final_layer_norm.weight"]
        m[p + "post_attention_layer_norm.bias"] = w[h + "final_layer_norm.bias"]
        for mt, hf in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            m[p + f"self_attention_audio.{mt}.kernel"] = w[h + f"self_attn.{hf}.weight"].T.reshape(D, N, hd)
            m[p + f"self_attention_audio.{mt}.bias"] = w[h + f"self_attn.{hf}.bias"].reshape(N, hd)
        m[p + "self_attention_audio.out.kernel"] = w[h + "self_attn.out_proj.weight"].T.reshape(N, hd, D)
        m[p + "self_attention_audio.out.bias"] = w[h + "self_attn.out_proj.bias"]
        m[p + "AudioMLP.wi.kernel"] = w[h + "fc1.weight"].T
        m[p + "AudioMLP.wi.bias"] = w[h + "fc1.bias"]
        m[p + "AudioMLP.wo.kernel"] = w[h + "fc2.weight"].T
        m[p + "AudioMLP.wo.bias"] = w[h + "fc2.bias"]
    m[ENC + "layernorm_post.scale"] = w[HA + "ln_post.weight"]
    m[ENC + "layernorm_post.bias"] = w[HA + "ln_post.bias"]
    for k in (1, 2):
        m[PRJ + f"proj{k}.kernel"] = w[HA + f"proj{k}.weight"].T
        m[PRJ + f"proj{k}.bias"] = w[HA + f"proj{k}.bias"]
    return {k: np.ascontiguousarray(v, dtype=F32) for k, v in m.items()}


def maxtext_to_hf(m, c):
    """The reverse hooks (saving_to_hf); used to check the mapping round-trips bit for bit."""
    d = dims(c)
    D = d["D"]
    w = {}
    for k in (1, 2, 3):
        w[HA + f"conv2d{k}.weight"] = m[ENC + f"conv2d{k}.kernel"].transpose(3, 2, 0, 1)
        w[HA + f"conv2d{k}.bias"] = m[ENC + f"conv2d{k}.bias"]
    w[HA + "conv_out.weight"] = m[ENC + "conv_out.kernel"].T
    for i in range(d["L"]):
        h, p = HA + f"layers.{i}.", ENC + f"layers_{i}."
        w[h + "self_attn_layer_norm.weight"] = m[p + "input_layer_norm.scale"]
        w[h + "self_attn_layer_norm.bias"] = m[p + "input_layer_norm.bias"]
        w[h + "final_layer_norm.weight"] = m[p + "post_attention_layer_norm.scale"]
        w[h + "final_layer_norm.bias"] = m[p + "post_attention_layer_norm.bias"]
        for mt, hf in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            w[h + f"self_attn.{hf}.weight"] = m[p + f"self_attention_audio.{mt}.kernel"].reshape(D, D).T
            w[h + f"self_attn.{hf}.bias"] = m[p + f"self_attention_audio.{mt}.bias"].reshape(D)
        w[h + "self_attn.out_proj.weight"] = m[p + "self_attention_audio.out.kernel"].reshape(D, D).T
        w[h + "self_attn.out_proj.bias"] = m[p + "self_attention_audio.out.bias"]
        w[h + "fc1.weight"] = m[p + "AudioMLP.wi.kernel"].T
        w[h + "fc1.bias"] = m[p + "AudioMLP.wi.bias"]
        w[h + "fc2.weight"] = m[p + "AudioMLP.wo.kernel"].T
        w[h + "fc2.bias"] = m[p + "AudioMLP.wo.bias"]
    w[HA + "ln_post.weight"] = m[ENC + "layernorm_post.scale"]
    w[HA + "ln_post.bias"] = m[ENC + "layernorm_post.bias"]
    for k in (1, 2):
        w[HA + f"proj{k}.weight"] = m[PRJ + f"proj{k}.kernel"].T
        w[HA + f"proj{k}.bias"] = m[PRJ + f"proj{k}.bias"]
    return w


def hf_config(c):
    ac = {"model_type": "qwen3_omni_moe_audio_encoder", "num_mel_bins": c["num_mel_bins"],
          "encoder_layers": c["encoder_layers"], "encoder_attention_heads": c["encoder_attention_heads"],
          "encoder_ffn_dim": c["encoder_ffn_dim"], "d_model": c["d_model"], "dropout": 0.0,
          "attention_dropout": 0.0, "activation_dropout": 0.0, "activation_function": "gelu",
          "scale_embedding": False, "initializer_range": 0.02, "max_source_positions": c["max_source_positions"],
          "n_window": c["n_window"], "n_window_infer": c["n_window_infer"], "output_dim": c["output_dim"],
          "conv_chunksize": c["conv_chunksize"], "downsample_hidden_size": c["downsample_hidden_size"]}
    return {"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "model_type": "qwen3_omni_moe",
            "thinker_config": {"model_type": "qwen3_omni_moe_thinker", "audio_config": ac,
                               "text_config": {"model_type": "qwen3_omni_moe_text", "hidden_size": c["output_dim"]},
                               "audio_token_id": 151675, "audio_start_token_id": 151669,
                               "audio_end_token_id": 151670}}


def hf_preprocessor_config():
    return {"feature_extractor_type": "WhisperFeatureExtractor", "processor_class": "Qwen3OmniMoeProcessor",
            "feature_size": N_MELS, "sampling_rate": SR, "hop_length": HOP, "n_fft": N_FFT, "chunk_length": 300,
            "n_samples": 300 * SR, "nb_max_frames": 300 * SR // HOP, "dither": 0.0, "padding_value": 0.0,
            "padding_side": "right", "return_attention_mask": True}


# ----------------------------------------------------------------------------------------------------------------
# Shared math
# ----------------------------------------------------------------------------------------------------------------

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(x, scale, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * scale + bias


def token_count(T):
    """_get_feat_extract_output_lengths (MaxText and HF, identical arithmetic)."""
    r = T % 100
    f = (r - 1) // 2 + 1
    return ((f - 1) // 2 + 1 - 1) // 2 + 1 + (T // 100) * 13


def conv_out_len(r):
    for _ in range(3):
        r = (r - 1) // 2 + 1
    return r


# ----------------------------------------------------------------------------------------------------------------
# MaxText formulation
# ----------------------------------------------------------------------------------------------------------------

def mt_sinusoids(n, D, ts):
    half = D // 2
    inc = math.log(ts) / max(half - 1, 1)
    inv = torch.exp(-inc * torch.arange(half, dtype=torch.float64))
    a = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([torch.sin(a), torch.cos(a)], dim=-1)


def conv_nhwc(x, K, b):
    """x [B, H, W, Ci], K [3, 3, Ci, Co]: stride 2, zero padding 1 on H and W, as a sum of 9 shifted matmuls."""
    B, H, W, _ = x.shape
    Ho, Wo = (H - 1) // 2 + 1, (W - 1) // 2 + 1
    xp = F.pad(x, (0, 0, 1, 1, 1, 1))
    out = b.expand(B, Ho, Wo, K.shape[3]).clone()
    for i in range(3):
        for j in range(3):
            out = out + xp[:, i:i + 2 * Ho - 1:2, j:j + 2 * Wo - 1:2, :] @ K[i, j]
    return out


def mt_layer(x, W, p, d, attn="chunk"):
    """x [B, S, D]. attn="chunk": every batch row on its own (MaxText); "full": all rows joined into one sequence."""
    B, S, D = x.shape
    if attn == "full":
        return mt_layer(x.reshape(1, B * S, D), W, p, d).reshape(B, S, D)
    y = layer_norm(x, W[p + "input_layer_norm.scale"], W[p + "input_layer_norm.bias"], d["eps"])
    a = p + "self_attention_audio."
    q = torch.einsum("bsd,dnh->bsnh", y, W[a + "query.kernel"]) + W[a + "query.bias"]
    k = torch.einsum("bsd,dnh->bsnh", y, W[a + "key.kernel"]) + W[a + "key.bias"]
    v = torch.einsum("bsd,dnh->bsnh", y, W[a + "value.kernel"]) + W[a + "value.bias"]
    q = q * (1.0 / math.sqrt(d["hd"]))
    pr = torch.softmax(torch.einsum("bsnh,btnh->bnst", q, k), dim=-1)
    o = torch.einsum("bnst,btnh->bsnh", pr, v)
    x = x + torch.einsum("bsnh,nhd->bsd", o, W[a + "out.kernel"]) + W[a + "out.bias"]
    y = layer_norm(x, W[p + "post_attention_layer_norm.scale"], W[p + "post_attention_layer_norm.bias"], d["eps"])
    h = gelu_tanh(y @ W[p + "AudioMLP.wi.kernel"] + W[p + "AudioMLP.wi.bias"])
    return x + h @ W[p + "AudioMLP.wo.kernel"] + W[p + "AudioMLP.wo.bias"]


def maxtext_encoder(Wnp, feats, c, positions=True, attn="chunk", stages=None):
    """feats [128, T] (T a multiple of 100) -> [13 T / 100, O]."""
    d = dims(c)
    W = {k: t64(v) for k, v in Wnp.items()}
    x = t64(feats)
    M, T = x.shape
    cs = d["chunk"]
    assert T % cs == 0, "MaxText's encoder reshapes the frames into whole chunks"
    nch = T // cs
    h = x.reshape(M, nch, cs).permute(1, 0, 2)[..., None]  # [chunks, H = mel, W = time, 1]
    for k in (1, 2, 3):
        h = gelu_tanh(conv_nhwc(h, W[ENC + f"conv2d{k}.kernel"], W[ENC + f"conv2d{k}.bias"]))
    bc, f, t, ch = h.shape
    h = h.permute(0, 2, 3, 1).reshape(bc, t, ch * f) @ W[ENC + "conv_out.kernel"]
    if positions:
        h = h + mt_sinusoids(t, d["D"], d["ts"])[None]
    if stages is not None:
        stages["conv_out"] = h.reshape(-1, d["D"]).clone()
    for i in range(d["L"]):
        h = mt_layer(h, W, ENC + f"layers_{i}.", d, attn)
        if stages is not None:
            stages[f"layer_{i}"] = h.reshape(-1, d["D"]).clone()
    h = layer_norm(h, W[ENC + "layernorm_post.scale"], W[ENC + "layernorm_post.bias"], d["eps"])
    h = h.reshape(nch * t, d["D"])
    if stages is not None:
        stages["ln_post"] = h.clone()
    h = gelu_tanh(h @ W[PRJ + "proj1.kernel"] + W[PRJ + "proj1.bias"])
    return h @ W[PRJ + "proj2.kernel"] + W[PRJ + "proj2.bias"]


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face formulation
# ----------------------------------------------------------------------------------------------------------------

def hf_sinusoids(length, channels, max_timescale):
    inc = np.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2, dtype=torch.float64))
    st = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([torch.sin(st), torch.cos(st)], dim=1)


def hf_encoder(Wnp, feats, c, act="erf", n_window_infer=None, stages=None):
    """Qwen3OmniMoeAudioEncoder.forward for one clip: feats [128, T] (any T) -> [n(T), O]."""
    d = dims(c)
    W = {k: t64(v) for k, v in Wnp.items()}
    g = gelu_erf if act == "erf" else gelu_tanh
    nwi = d["nwi"] if n_window_infer is None else n_window_infer
    x = t64(feats)
    T = x.shape[1]
    cs = d["chunk"]
    n_chunks = -(-T // cs)
    lens = [cs] * n_chunks
    if T % cs:
        lens[-1] = T % cs
    pieces = list(x.T.split(lens, dim=0))
    padded = torch.nn.utils.rnn.pad_sequence(pieces, batch_first=True).transpose(1, 2)  # [chunks, 128, maxlen]
    after = [conv_out_len(r) for r in lens]
    mask = torch.zeros(n_chunks, max(after), dtype=torch.bool)
    for i, n in enumerate(after):
        mask[i, :n] = True
    h = padded.unsqueeze(1)
    for k in (1, 2, 3):
        h = g(F.conv2d(h, W[HA + f"conv2d{k}.weight"], W[HA + f"conv2d{k}.bias"], stride=2, padding=1))
    b, ch, f, t = h.shape
    h = h.permute(0, 3, 1, 2).contiguous().view(b, t, ch * f) @ W[HA + "conv_out.weight"].T
    h = h + hf_sinusoids(d["P"], d["D"], d["ts"])[:t].unsqueeze(0)
    hs = h[mask]
    total = token_count(T)
    assert hs.shape[0] == total == sum(after)
    window = mask.shape[-1] * (nwi // cs)
    seg = [window] * (total // window) + ([total % window] if total % window else [])
    bounds = np.cumsum([0] + seg)
    if stages is not None:
        stages["conv_out"] = hs.clone()
        stages["cu_seqlens"] = bounds.tolist()
    allow = torch.zeros(total, total, dtype=torch.bool)
    for s, e in zip(bounds[:-1], bounds[1:]):
        allow[s:e, s:e] = True
    bias = torch.zeros(total, total).masked_fill(~allow, float("-inf"))
    N, hd = d["N"], d["hd"]
    for i in range(d["L"]):
        p = HA + f"layers.{i}."
        res = hs
        y = F.layer_norm(hs, (d["D"],), W[p + "self_attn_layer_norm.weight"], W[p + "self_attn_layer_norm.bias"],
                         d["eps"])
        q = F.linear(y, W[p + "self_attn.q_proj.weight"], W[p + "self_attn.q_proj.bias"]).view(total, N, hd)
        k = F.linear(y, W[p + "self_attn.k_proj.weight"], W[p + "self_attn.k_proj.bias"]).view(total, N, hd)
        v = F.linear(y, W[p + "self_attn.v_proj.weight"], W[p + "self_attn.v_proj.bias"]).view(total, N, hd)
        sc = torch.einsum("snh,tnh->nst", q, k) * hd ** -0.5 + bias
        o = torch.einsum("nst,tnh->snh", torch.softmax(sc, dim=-1), v).reshape(total, d["D"])
        hs = res + F.linear(o, W[p + "self_attn.out_proj.weight"], W[p + "self_attn.out_proj.bias"])
        res = hs
        y = F.layer_norm(hs, (d["D"],), W[p + "final_layer_norm.weight"], W[p + "final_layer_norm.bias"], d["eps"])
        y = g(F.linear(y, W[p + "fc1.weight"], W[p + "fc1.bias"]))
        hs = res + F.linear(y, W[p + "fc2.weight"], W[p + "fc2.bias"])
    hs = F.layer_norm(hs, (d["D"],), W[HA + "ln_post.weight"], W[HA + "ln_post.bias"], d["eps"])
    hs = g(F.linear(hs, W[HA + "proj1.weight"], W[HA + "proj1.bias"]))
    return F.linear(hs, W[HA + "proj2.weight"], W[HA + "proj2.bias"])


# ----------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------

def mx(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def main():
    out = case_dir(CASE)
    os.makedirs(os.path.join(out, "hf"), exist_ok=True)
    c = CFG
    d = dims(c)

    # --- audio files -------------------------------------------------------------------------------------------
    pcm1 = synth(LEN_1, SEED + 1, [(330.0, 0.22), (1250.0, 0.12), (3100.0, 0.05)], gap=(0.58, 0.66))
    pcm2 = synth(LEN_2, SEED + 2, [(220.0, 0.25), (880.0, 0.10), (5200.0, 0.04)], gap=(0.30, 0.36))
    write_wav(os.path.join(out, "audio.wav"), pcm1)
    write_wav(os.path.join(out, "audio_2.wav"), pcm2)
    x1 = read_wav(os.path.join(out, "audio.wav"))
    x2 = read_wav(os.path.join(out, "audio_2.wav"))
    assert len(x1) == LEN_1 and len(x2) == LEN_2

    # --- log-mel ------------------------------------------------------------------------------------------------
    feats = {}
    for tag, x in (("", x1), ("_2", x2)):
        mt = log_mel(maxtext_pad(x))
        hf = log_mel(x)
        assert mt.shape == (N_MELS, len(maxtext_pad(x)) // HOP) and hf.shape == (N_MELS, len(x) // HOP)
        feats[tag] = (mt, hf)
    mt1, hf1 = feats[""]
    mt2, hf2 = feats["_2"]
    # audio.wav: HF's 130 frames never reach past the clip (20900 % 160 >= 40) and the loudest frame is inside,
    # so they are MaxText's first 130 frames.
    assert mx(hf1, mt1[:, :hf1.shape[1]]) < 1e-12
    d2 = np.abs(hf2 - mt2[:, :hf2.shape[1]]).max(axis=0)
    assert d2[:-1].max() < 1e-12 and d2[-1] > 1e-3  # audio_2: only HF's last frame (reflect vs zeros) differs

    # second log-mel formulation (HF torch path, float64) and the float32 paths
    xcheck = {}
    for tag, x in (("", x1), ("_2", x2)):
        mt, hf = feats[tag]
        xcheck["hf_torch_f64_vs_oracle_unpadded" + tag] = mx(hf_torch_log_mel(x), hf)
        xcheck["hf_torch_f64_vs_oracle_maxtext_padded" + tag] = mx(hf_torch_log_mel(maxtext_pad(x)), mt)
        xcheck["hf_torch_f32_vs_oracle_unpadded" + tag] = mx(hf_torch_log_mel(x.astype(F32), torch.float32), hf)
        xcheck["maxtext_np_f32_vs_oracle_padded" + tag] = mx(maxtext_np_f32(maxtext_pad(x).astype(F32)), mt)
        xcheck["stored_float32_rounding" + tag] = mx(mt.astype(F32), mt)
    filt_old = whisper_filters_old()
    xcheck["mel_filters_vs_whisper_get_mel_filters"] = mx(mel_filters().T, filt_old)
    for k, v in xcheck.items():
        if "f64" in k or "filters" in k:
            assert v < 1e-12, (k, v)

    # --- weights -------------------------------------------------------------------------------------------------
    g = rng(SEED)
    whf = hf_weights(g, c)
    wmt = hf_to_maxtext(whf, c)
    back = maxtext_to_hf(wmt, c)
    assert set(back) == set(whf) and all(np.array_equal(back[k], whf[k]) for k in whf)
    save_safetensors(os.path.join(out, "model.safetensors"), wmt)
    save_safetensors(os.path.join(out, "hf", "model.safetensors"), whf)
    with open(os.path.join(out, "hf", "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=1, sort_keys=True)
    with open(os.path.join(out, "hf", "preprocessor_config.json"), "w") as f:
        json.dump(hf_preprocessor_config(), f, indent=1, sort_keys=True)

    # --- stored features (float32) and masks --------------------------------------------------------------------
    F1, F2, F2hf = mt1.astype(F32), mt2.astype(F32), hf2.astype(F32)
    save_npy(out, "features", F1)
    save_npy(out, "features_2", F2)
    save_npy(out, "features_hf_2", F2hf)
    save_npy(out, "audio_mask", np.ones((1, F1.shape[1]), np.int32))
    save_npy(out, "audio_mask_2", np.ones((1, F2.shape[1]), np.int32))
    save_npy(out, "feature_attention_mask_hf_2", np.ones((1, F2hf.shape[1]), np.int32))
    F1hf = F1[:, :hf1.shape[1]]  # HF features of audio.wav (see above)

    # --- encoder: MaxText semantics ------------------------------------------------------------------------------
    st = {}
    y1 = maxtext_encoder(wmt, F1, c, stages=st)
    y2 = maxtext_encoder(wmt, F2, c)
    n1, n2 = token_count(F1.shape[1]), token_count(F2.shape[1])
    assert y1.shape == (n1, d["O"]) and y2.shape == (n2, d["O"])
    save_npy(out, "encoder_out", y1.numpy().astype(F32))
    save_npy(out, "encoder_out_2", y2.numpy().astype(F32))
    for k in ("conv_out", "layer_0", "layer_1", "ln_post"):
        save_npy(out, k, st[k].numpy().astype(F32))

    # cross-check: the HF formulation with MaxText's choices (tanh GELU, windows = one chunk)
    cross = {}
    for tag, Fx, y in (("", F1, y1), ("_2", F2, y2)):
        z = hf_encoder(whf, Fx, c, act="tanh", n_window_infer=100)
        cross["maxtext_vs_hf_formulation_tanh_window100" + tag] = mx(z, y)
        assert cross["maxtext_vs_hf_formulation_tanh_window100" + tag] < 1e-12
    stt = {}
    hf_encoder(whf, F1, c, act="tanh", n_window_infer=100, stages=stt)
    cross["conv_out_maxtext_vs_hf"] = mx(stt["conv_out"], st["conv_out"])
    assert cross["conv_out_maxtext_vs_hf"] < 1e-12

    # --- encoder: HF semantics (exact GELU, HF padding, tail chunks) ---------------------------------------------
    sh1, sh2 = {}, {}
    z1 = hf_encoder(whf, F1hf, c, act="erf", stages=sh1)
    z2 = hf_encoder(whf, F2hf, c, act="erf", stages=sh2)
    save_npy(out, "encoder_out_hf", z1.numpy().astype(F32))
    save_npy(out, "encoder_out_hf_2", z2.numpy().astype(F32))
    save_npy(out, "conv_out_hf_2", sh2["conv_out"].numpy().astype(F32))
    z1_w400 = hf_encoder(whf, F1hf, c, act="erf", n_window_infer=400)
    z1_tanh = hf_encoder(whf, F1hf, c, act="tanh")
    mt_erf_like = hf_encoder(whf, F1, c, act="erf", n_window_infer=100)

    # --- controls --------------------------------------------------------------------------------------------------
    ctrl = {}
    ctrl["a_no_positions_encoder_out"] = mx(maxtext_encoder(wmt, F1, c, positions=False), y1)
    ctrl["b_full_attention_encoder_out"] = mx(maxtext_encoder(wmt, F1, c, attn="full"), y1)
    htk = log_mel(maxtext_pad(x1), scale="htk").astype(F32)
    ctrl["c_htk_mel_features"] = mx(htk, F1)
    ctrl["c_htk_mel_encoder_out"] = mx(maxtext_encoder(wmt, htk, c), y1)
    nocl = log_mel(maxtext_pad(x1), clamp=False).astype(F32)
    ctrl["d_no_clamp_features"] = mx(nocl, F1)
    ctrl["d_no_clamp_encoder_out"] = mx(maxtext_encoder(wmt, nocl, c), y1)
    ctrl["d_no_clamp_features_hf_2_unpadded"] = mx(log_mel(x2, clamp=False), hf2)
    ctrl["e_gelu_erf_instead_of_tanh_encoder_out"] = mx(mt_erf_like, y1)
    ctrl["f_hf_window400_vs_window100_encoder_out_hf"] = mx(z1_w400, z1)
    ctrl["g_hf_tanh_vs_erf_encoder_out_hf"] = mx(z1_tanh, z1)
    ctrl["h_features_hf_2_vs_maxtext_padded_first_77_frames"] = mx(hf2, mt2[:, :hf2.shape[1]])
    for k in ("a_no_positions_encoder_out", "b_full_attention_encoder_out", "c_htk_mel_features",
              "c_htk_mel_encoder_out", "d_no_clamp_features", "d_no_clamp_encoder_out",
              "d_no_clamp_features_hf_2_unpadded"):
        assert ctrl[k] > 1e-2, (k, ctrl[k])

    commit = subprocess.run(["git", "-C", "/work/.mirror/AI-Hypercomputer+maxtext/repo", "log", "-1", "--format=%H"],
                            capture_output=True, text=True).stdout.strip() or "e591f30cbbf217ed67ef71263ec0538239f9c3b8"

    tokens = {
        "formula": "n(T) = ((((T % 100) - 1)//2 + 1 - 1)//2 + 1 - 1)//2 + 1 + 13 * (T // 100), T = feature frames",
        "audio.wav": {"samples": LEN_1, "seconds": LEN_1 / SR,
                      "maxtext": {"padded_samples": len(maxtext_pad(x1)), "frames": F1.shape[1],
                                  "tokens": n1, "conv_chunks": F1.shape[1] // 100},
                      "hf": {"frames": hf1.shape[1], "tokens": token_count(hf1.shape[1]),
                             "chunk_frames": [100, hf1.shape[1] - 100],
                             "chunk_tokens": [conv_out_len(100), conv_out_len(hf1.shape[1] - 100)],
                             "cu_seqlens_window100": sh1["cu_seqlens"]}},
        "audio_2.wav": {"samples": LEN_2, "seconds": LEN_2 / SR,
                        "maxtext": {"padded_samples": len(maxtext_pad(x2)), "frames": F2.shape[1],
                                    "tokens": n2, "conv_chunks": F2.shape[1] // 100},
                        "hf": {"frames": hf2.shape[1], "tokens": token_count(hf2.shape[1]),
                               "chunk_frames": [hf2.shape[1]], "chunk_tokens": [conv_out_len(hf2.shape[1])],
                               "cu_seqlens_window100": sh2["cu_seqlens"]}},
        "checked": "formula == sum over chunks of the conv output length (((r-1)//2+1) three times) == rows of "
                   "encoder_out for all four cases",
    }
    assert tokens["audio.wav"]["hf"]["tokens"] == z1.shape[0] == sum(tokens["audio.wav"]["hf"]["chunk_tokens"])
    assert tokens["audio_2.wav"]["hf"]["tokens"] == z2.shape[0]

    files = sorted(os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(out) for f in fs)
    files.append("meta.json")
    meta = {
        "case": CASE,
        "maxtext_commit": commit,
        "config": dict(c, head_dim=d["hd"], conv_out_in_features=d["C"] * d["Mp"]),
        "config_note": "n_window 50 as the real model (the 100-frame -> 13-token rule is hard-coded in both "
                       "sources' _get_feat_extract_output_lengths, so it cannot be shrunk); n_window_infer 100 "
                       "(real 400) so HF's attention windows equal one chunk like MaxText's; MaxText never reads "
                       "n_window_infer. max_source_positions only sizes HF's position table (13 rows used).",
        "files": {
            "audio.wav": "16 kHz mono int16, 20900 samples (1.30625 s): tones + chirp + seeded noise, digital "
                         "silence 0.58-0.66 s, 0.15 s fade-out to 40 %; x = pcm / 32768",
            "audio_2.wav": "16 kHz mono int16, 12345 samples (0.7716 s), same recipe, other tones / seed",
            "features.npy": "float32 [128, 200]: MaxText processor (waveform zero-padded to 32000 samples)",
            "features_2.npy": "float32 [128, 100]: MaxText processor (padded to 16000 samples)",
            "features_hf_2.npy": "float32 [128, 77]: HF WhisperFeatureExtractor semantics (no padding); equals "
                                 "features_2[:, :76] in the first 76 frames, frame 76 differs (reflect vs zeros)",
            "HF features of audio.wav": "not stored: exactly features[:, :130] (asserted < 1e-12 in float64)",
            "audio_mask.npy / audio_mask_2.npy": "int32 ones [1, 200] / [1, 100]: MaxText's audio_mask (counts "
                                                 "the padded frames)",
            "feature_attention_mask_hf_2.npy": "int32 ones [1, 77]: HF's feature_attention_mask",
            "model.safetensors": "F32, MaxText tree names (audio_encoder.Qwen3OmniAudioEncoder_0.* / "
                                 "audio_encoder.Qwen3OmniAudioProjector_0.*)",
            "hf/model.safetensors": "F32, thinker.audio_tower.* (same values through param_mapping's hooks)",
            "hf/config.json": "model_type qwen3_omni_moe, thinker_config.audio_config = the tiny sizes",
            "hf/preprocessor_config.json": "WhisperFeatureExtractor settings of Qwen3-Omni (128 bins, n_fft 400, "
                                           "hop 160, 16 kHz, dither 0)",
            "conv_out.npy": "float32 [26, 32]: MaxText, audio.wav: conv stack + conv_out + positions (2 chunks x 13)",
            "layer_0.npy / layer_1.npy": "float32 [26, 32]: after each encoder layer",
            "ln_post.npy": "float32 [26, 32]: after layernorm_post (input of the projector)",
            "encoder_out.npy": "float32 [26, 24]: MaxText semantics, input features.npy",
            "encoder_out_2.npy": "float32 [13, 24]: MaxText semantics, input features_2.npy",
            "encoder_out_hf.npy": "float32 [17, 24]: HF semantics (exact GELU, n_window_infer 100), input "
                                  "features[:, :130] (chunks 100 + 30 frames -> 13 + 4 tokens)",
            "encoder_out_hf_2.npy": "float32 [10, 24]: HF semantics, input features_hf_2.npy (one 77-frame tail "
                                    "chunk -> 10 tokens)",
            "conv_out_hf_2.npy": "float32 [10, 32]: HF semantics, audio_2: conv stack + conv_out + positions",
        },
        "file_list": files,
        "log_mel": {
            "constants": {"sampling_rate": SR, "n_fft": N_FFT, "win_length": N_FFT, "hop_length": HOP,
                          "window": "periodic Hann, 0.5 - 0.5 cos(2 pi n / 400)", "center": True,
                          "pad_mode": "reflect (edge not repeated), 200 each side", "power": 2.0,
                          "num_mel_bins": N_MELS, "f_min": 0.0, "f_max": F_MAX, "mel_scale": "slaney",
                          "mel_norm": "slaney (2 / (f_{i+2} - f_i))", "mel_floor": 1e-10, "log": "log10",
                          "drop_last_frame": True, "clamp": "max(lm, max(lm) - 8), max over the whole clip",
                          "scale": "(lm + 4) / 4", "dither": 0.0, "pcm_scale": "int16 / 32768",
                          "mel_filter_first_nonzero_bin_of_filter0": int(np.nonzero(mel_filters()[:, 0])[0][0])},
            "formula": "features[m, t] = (max(log10(max(1e-10, sum_k fb[k, m] |rfft(w * frame_t)[k]|^2)), G - 8) "
                       "+ 4) / 4, G = max over all m, t; frame_t = reflect-padded x[160 t - 200 .. 160 t + 199], "
                       "t = 0 .. L//160 - 1",
            "maxtext_vs_hf": "Same constants and algorithm. MaxText (processor_qwen3_omni._np_extract_fbank_features) "
                             "calls its own copies of HF's audio_utils (multimodal/utils.py spectrogram / "
                             "mel_filter_bank / window_function) = HF's numpy path; HF itself runs "
                             "_torch_extract_fbank_features (float32 torch.stft) when torch is installed. The "
                             "difference that matters: MaxText zero-pads the waveform to a whole number of seconds "
                             "(multiple of 16000 samples) and its mask counts the padding, so its frame count is "
                             "100 * ceil(L / 16000) and its token count 13 * ceil(L / 16000) (26 vs HF 17 for "
                             "audio.wav, 13 vs 10 for audio_2.wav); HF (Qwen3OmniMoeProcessor: padding=True, "
                             "truncation=False) pads only to the longest clip of a batch, never to 30 s, and its "
                             "frame count is L // 160. Neither pads to Whisper's 30 s.",
            "input_rates": "MaxText's load_audio = librosa.load(path, sr=16000): any rate is resampled (librosa's "
                           "default soxr_hq) and any channel count is averaged to mono (mono=True); MaxText only "
                           "loads audio from a video file (use_audio_in_video). HF's processor takes arrays, not "
                           "files: WhisperFeatureExtractor raises ValueError when sampling_rate != 16000 is passed "
                           "(Qwen3OmniMoeProcessor passes 16000 by default, so the caller must resample) and rejects "
                           "arrays of more than 2 dims ('Only mono-channel audio'), a 2-D array being a batch. No "
                           "stereo / 44.1 kHz fixture here: resampling is librosa/soxr's, not a formula to oracle.",
            "cross_checks_max_abs": xcheck,
            "cross_check_note": "hf_torch_f64 = torch.stft + Whisper's older get_mel_filters construction "
                                "(hard-coded mel(8 kHz) = 45.245640471924965, rfftfreq centres) in float64: agrees "
                                "< 1e-12. The f32 rows show how far the real float32 paths land from this oracle "
                                "(tolerance guidance for features).",
        },
        "encoder": {
            "maxtext": "per 100-frame chunk: 3 x (3x3 conv stride 2 pad 1 on [mel, time], + bias, gelu_tanh); "
                       "[13, C, 16] flattened c*16+f; @ conv_out (no bias); + sinusoid(0..12) with inv_j = "
                       "exp(-j ln(10000) / (D/2 - 1)), [sin | cos]; L pre-LN layers (LayerNorm eps 1e-5; attention "
                       "with biases on q, k, v, out, q scaled by hd^-0.5 after its bias, no rotary, softmax over the "
                       "13 tokens of the same chunk only; MLP gelu_tanh with biases); layernorm_post; chunks "
                       "concatenated; projector gelu_tanh(x proj1 + b1) proj2 + b2.",
            "hf": "same modules, but GELU is exact (erf) everywhere (convs, fc1, proj1: activation_function "
                  "'gelu', F.gelu); a final chunk of T % 100 frames is zero-padded to 100 for the convs and keeps "
                  "its own token count; attention windows are n_window_infer / 100 chunks "
                  "(window = 13 * n_window_infer // 100 tokens when a full chunk exists; the tokens of the "
                  "longest chunk otherwise), remainder window last.",
            "weight_mapping": "conv2d{k}.weight [O, I, kh, kw].transpose(2, 3, 1, 0) -> conv2d{k}.kernel [kh, kw, "
                              "I, O] (kh = mel, kw = time); conv_out.weight.T; q/k/v_proj.weight.T.reshape(D, N, "
                              "hd) -> query/key/value.kernel, bias .reshape(N, hd); out_proj.weight.T.reshape(N, hd, "
                              "D) -> out.kernel, out.bias as is; fc1 / fc2 .T -> AudioMLP.wi / wo; "
                              "self_attn_layer_norm -> input_layer_norm, final_layer_norm -> "
                              "post_attention_layer_norm, ln_post -> layernorm_post (weight -> scale); proj1 / proj2 "
                              ".T -> Qwen3OmniAudioProjector_0.proj1 / proj2. Round trip checked bit for bit.",
            "cross_checks_max_abs": cross,
            "cross_check_note": "HF formulation (NCHW F.conv2d on HF-layout weights, pad_sequence chunking, "
                                "cu_seqlens block mask) run with MaxText's choices (tanh GELU, n_window_infer 100) "
                                "on the MaxText features: agrees < 1e-12 on both files.",
        },
        "token_counts": tokens,
        "controls_max_abs": ctrl,
        "controls_note": "a-d on audio.wav with MaxText semantics (features.npy -> encoder_out.npy): (a) positions "
                         "omitted, (b) one attention over all 26 tokens instead of per chunk, (c) HTK mel scale for "
                         "the filter points (Slaney norm kept), (d) no max - 8 clamp (binds on the zero padding and "
                         "the silent gap). e: exact GELU in the MaxText forward (what HF uses). f: HF with the real "
                         "n_window_infer 400 (one window of 17 tokens) vs 100. g: HF with tanh GELU. h: HF vs "
                         "MaxText features of audio_2 on HF's frames (only the last frame differs).",
        "maxtext_vs_hf_differences": [
            "GELU: MaxText uses jax.nn.gelu (tanh approximation) in the three convs, the MLP and the projector; HF "
            "uses the exact erf GELU (control e).",
            "Attention span: MaxText attends within each 100-frame chunk (13 tokens) and never reads "
            "n_window_infer; HF attends within windows of n_window_infer frames (400 in the real config = 4 chunks "
            "= 52 tokens). They agree only for clips of at most one chunk, or n_window_infer = 100 (control f).",
            "Padding: MaxText pads the waveform to whole seconds and encodes the padding (its mask is all ones), so "
            "it produces 13 * ceil(seconds) tokens; HF encodes L // 160 frames with a partial last chunk. "
            "MaxText's encoder cannot take a frame count that is not a multiple of 100 (reshape).",
            "Float precision of features: MaxText's numpy path stores the FFT as complex64 and the log as float32; "
            "HF's torch path is float32 throughout (cross_checks).",
            "MaxText get_rope_index (audio-in-video) applies _get_feat_extract_output_lengths to "
            "processor_outputs.audio_lengths, which already are token counts (decode.py passes them), i.e. the "
            "formula twice; HF passes the feature lengths. Not part of this fixture; noted for the text side.",
        ],
    }
    save_meta(out, meta)
    total = sum(os.path.getsize(os.path.join(out, f)) for f in files)
    print(json.dumps({"files": len(files), "bytes": total, "tokens": [n1, n2, z1.shape[0], z2.shape[0]],
                      "controls": ctrl, "cross": cross, "xcheck": xcheck}, indent=1))


if __name__ == "__main__":
    main()
