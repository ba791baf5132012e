"""maxtext_cpp.load_audio / log_mel / Qwen3OmniAudio against the float64 re-statements of Qwen3-Omni's audio path
(tests/reference/qwen3_omni_audio_reference.py: features and encoder; qwen3_omni_thinker_reference.py: the thinker with
a clip and a picture). Tolerances as the C++ tests (docs/audio.md): features within one float32 step, soft tokens at
the f32 logit tolerance, the thinker's logits through this module's own encoders within 1e-5 of their largest."""
import os
import struct

import numpy as np
import pytest

from conftest import F32_LOGITS, fixture


def audio_or_skip(mc):
    if not hasattr(mc, "Qwen3OmniAudio"):
        pytest.skip("maxtext_cpp was built without libsndfile / libsoxr (no audio)")


def test_files_features_and_encoder_match_the_float64_reference(mc, tmp_path):
    audio_or_skip(mc)
    d = fixture("qwen3_omni_audio")
    x = mc.load_audio(os.path.join(d, "audio.wav"))
    assert x.dtype == np.float32 and x.shape == (20900,)
    assert np.array_equal(x * 32768, np.round(x * 32768))  # int16 / 32768, exactly
    np.testing.assert_allclose(mc.log_mel(x), np.load(os.path.join(d, "features.npy")), rtol=0, atol=2.4e-7)
    y = mc.load_audio(os.path.join(d, "audio_2.wav"))
    np.testing.assert_allclose(mc.log_mel(y, padding="none"), np.load(os.path.join(d, "features_hf_2.npy")), rtol=0,
                               atol=2.4e-7)
    a = mc.Qwen3OmniAudio(os.path.join(d, "hf"))
    assert a.config["output_dim"] == 24 and a.config["audio_token_id"] == 151675
    name = "audio_encoder.Qwen3OmniAudioEncoder_0.layers_1"
    out, acts = a.encode(os.path.join(d, "audio.wav"), capture=[name])
    np.testing.assert_allclose(out, np.load(os.path.join(d, "encoder_out.npy")), **F32_LOGITS)
    np.testing.assert_allclose(acts[name], np.load(os.path.join(d, "layer_1.npy")), rtol=1e-5, atol=8e-6)
    np.testing.assert_allclose(a.encode(np.load(os.path.join(d, "features_2.npy"))),
                               np.load(os.path.join(d, "encoder_out_2.npy")), **F32_LOGITS)
    h = mc.Qwen3OmniAudio(os.path.join(d, "hf"), form="hf")
    np.testing.assert_allclose(h.encode(y), np.load(os.path.join(d, "encoder_out_hf_2.npy")), **F32_LOGITS)
    # Resampled by soxr: a 48 kHz file of a 1 kHz sine reads as that sine at 16 kHz.
    t = np.arange(48000) / 48000.0
    pcm = np.round(0.5 * np.sin(2 * np.pi * 1000 * t) * 32767).astype("<i2").tobytes()
    f = tmp_path / "sine48k.wav"
    f.write_bytes(b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " +
                  struct.pack("<IHHIIHH", 16, 1, 1, 48000, 96000, 2, 16) + b"data" + struct.pack("<I", len(pcm)) + pcm)
    z = mc.load_audio(f)
    assert z.shape == (16000,)
    want = 0.5 * np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000.0)
    assert np.abs(z[400:-400] - want[400:-400]).max() < 1e-3
    with pytest.raises(mc.IoError, match="not a sound file libsndfile can read"):
        mc.load_audio(os.path.join(d, "meta.json"))
    with pytest.raises(mc.ShapeError, match="whole chunks"):
        a.encode(np.zeros((128, 130), np.float32))
    with pytest.raises(mc.ArgumentError, match="padding 'whisper'"):
        mc.log_mel(x, padding="whisper")


def test_qwen3_omni_thinker_with_a_clip_and_a_picture(mc):
    """Qwen3OmniAudio.prompt after Qwen3Vision.prompt (fixture qwen3_omni_mm_model): the ids and MRoPE positions
    exactly, the thinker's logits within 1e-5 of their largest, the greedy tokens exactly."""
    audio_or_skip(mc)
    if not hasattr(mc, "Qwen3Vision"):
        pytest.skip("maxtext_cpp was built without libpng / libjpeg (no vision)")
    d = fixture("qwen3_omni_mm_model")
    hf = os.path.join(d, "hf")
    ids = np.load(os.path.join(d, "tokens.npy"))
    marked = [int(t) for i, t in enumerate(ids) if not (t in (102, 105) and i > 0 and ids[i - 1] == t)]
    p = mc.Qwen3Vision(hf).prompt(marked, [os.path.join(d, "image.png")], how="hf")
    p = mc.Qwen3OmniAudio(hf).prompt(p, [os.path.join(d, "audio.wav")])
    np.testing.assert_array_equal(p["ids"], ids)
    np.testing.assert_array_equal(p["positions"], np.load(os.path.join(d, "positions.npy")))
    m = mc.Model(weights=hf)
    logits = m.forward(p["ids"], media_mask=p["media_mask"], media_embeddings=p["media_embeddings"],
                       mrope_positions=p["positions"])
    want = np.load(os.path.join(d, "logits.npy"))
    np.testing.assert_allclose(logits[0], want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))
    res = m.generate(p["ids"], 4, media_mask=p["media_mask"], media_embeddings=p["media_embeddings"],
                     media_positions=p["positions"])
    assert res["tokens"][0] == np.load(os.path.join(d, "greedy.npy")).tolist()
    with pytest.raises(mc.ArgumentError, match="1 <\\|audio_pad\\|> marker\\(s\\) for 2 clip\\(s\\)"):
        mc.Qwen3OmniAudio(hf).prompt([100, 102, 101], [os.path.join(d, "audio.wav")] * 2)
