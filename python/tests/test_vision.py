"""maxtext_cpp.read_image / resize_image against Pillow itself (Debian's python3-pil), and Gemma3Vision against the
float64 re-statement of MaxText's Gemma 3 vision tower (tests/reference/gemma3_vision_reference.py's fixtures)."""
import json
import os
import sys

import numpy as np
import pytest

from conftest import F32_LOGITS, fixture

IMAGES = fixture("images")


def vision_or_skip(mc):
    if not hasattr(mc, "Gemma3Vision"):
        pytest.skip("maxtext_cpp was built without libpng / libjpeg (no vision)")


def test_read_and_resize_equal_pillow(mc):
    vision_or_skip(mc)
    Image = pytest.importorskip("PIL.Image")
    manifest = json.load(open(os.path.join(IMAGES, "manifest.json")))
    files = [e["file"] for e in manifest["images"] if e["expect"] == "rgb"]
    assert len(files) >= 20
    for f in files:
        path = os.path.join(IMAGES, f)
        want = np.asarray(Image.open(path).convert("RGB"))
        got = mc.read_image(path)
        assert got.dtype == np.uint8 and got.shape == want.shape, f
        assert np.array_equal(got, want), f
    src = os.path.join(IMAGES, "png_rgb8_64x48.png")
    pil = Image.open(src).convert("RGB")
    for name, flt in [("nearest", Image.NEAREST), ("bilinear", Image.BILINEAR), ("bicubic", Image.BICUBIC),
                      ("lanczos", Image.LANCZOS), ("box", Image.BOX), ("hamming", Image.HAMMING)]:
        for w, h in [(29, 17), (100, 77), (64, 5)]:
            want = np.asarray(pil.resize((w, h), resample=flt))
            assert np.array_equal(mc.resize_image(src, w, h, name), want), (name, w, h)
            assert np.array_equal(mc.resize_image(np.asarray(pil), w, h, name), want), (name, w, h)
    with pytest.raises(mc.IoError, match="CMYK"):
        mc.read_image(os.path.join(IMAGES, "jpeg_cmyk_q90_37x23.jpg"))
    with pytest.raises(mc.ArgumentError, match="unknown resize filter 'cubicspline'"):
        mc.resize_image(src, 4, 4, "cubicspline")


def test_gemma3_pan_and_scan_equals_the_pillow_restatement(mc):
    vision_or_skip(mc)
    ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference")
    sys.path.insert(0, ref_dir)
    try:
        from gemma3_pan_and_scan import crop_boxes  # Hugging Face's pan_and_scan re-stated
    finally:
        sys.path.remove(ref_dir)
    rng = np.random.default_rng(7)
    for w, h in [(1000, 900), (600, 500), (1001, 700), (2000, 400), (600, 200), (500, 1300), (300, 1000), (510, 250)]:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        want = [img[y0:y1, x0:x1] for x0, y0, x1, y1 in crop_boxes(w, h)]
        got = mc.gemma3_pan_and_scan(img)
        assert len(got) == len(want), (w, h)
        for g, e in zip(got, want):
            assert g.dtype == np.uint8 and np.array_equal(g, e), (w, h)
    assert len(mc.gemma3_pan_and_scan(np.zeros((400, 2000, 3), np.uint8), max_num_crops=3)) == 3
    with pytest.raises(mc.ArgumentError, match="min_crop_size"):
        mc.gemma3_pan_and_scan(np.zeros((400, 2000, 3), np.uint8), min_crop_size=0)
    assert mc.gemma3_pan_and_scan_prompt("a <start_of_image> b <start_of_image>", [2, 0]) == (
        "a Here is the original image <start_of_image> and here are some crops to help you see better "
        "<start_of_image> <start_of_image> b <start_of_image>")


def test_gemma3_vision_tower_matches_the_float64_reference(mc):
    vision_or_skip(mc)
    d = fixture("gemma3_vision_pool")
    tower = mc.Gemma3Vision(os.path.join(d, "hf"))
    assert tower.config["num_layers"] == 2 and tower.config["emb_dim"] == 32
    pixels = np.load(os.path.join(d, "pixels.npy"))
    block = "vision_encoder.Gemma3VisionEncoderLayer_0.Transformer.encoderblock_1"
    tokens, caps = tower.encode(pixels, capture=[block])
    np.testing.assert_allclose(tokens, np.load(os.path.join(d, "out.npy")), **F32_LOGITS)
    np.testing.assert_allclose(caps[block], np.load(os.path.join(d, "block_1.npy")), rtol=1e-5, atol=8e-6)
    # Picture files, preprocessed as MaxText's and Hugging Face's processors do (Pillow + NumPy in the reference).
    n = fixture("gemma3_vision_nopool")
    small = mc.Gemma3Vision(os.path.join(n, "hf"), threads=1)
    files = [os.path.join(IMAGES, "png_rgb8_64x48.png"), os.path.join(IMAGES, "jpeg_rgb_q90_420_37x23.jpg")]
    for how in ("maxtext", "hf"):
        np.testing.assert_allclose(small.encode(files, how=how), np.load(os.path.join(n, f"image_tokens_{how}.npy")),
                                   **F32_LOGITS)
    assert small.preprocess(files[0]).shape == (32, 32, 3)
    with pytest.raises(mc.ShapeError, match=r"pictures must be \[n, 32, 32, 3\]"):
        small.encode(np.zeros((1, 30, 32, 3), np.float32))
    with pytest.raises(mc.IoError, match="no config.json"):
        mc.Gemma3Vision(os.path.join(IMAGES))


def test_gemma3_pictures_merged_into_the_decoder_match_the_float64_reference(mc):
    """Gemma 3 with pictures (tests/reference/gemma3_multimodal_reference.py): the tower's soft tokens merged at the
    <image_soft_token> positions with the bidirectional picture mask; logits at the f32 logit tolerance, greedy
    tokens equal (best-vs-second gaps >= 0.54)."""
    vision_or_skip(mc)
    d = fixture("gemma3_mm_model")
    hf = os.path.join(d, "hf")
    m = mc.Model(weights=hf)
    tower = mc.Gemma3Vision(hf)
    soft = tower.encode([os.path.join(d, "image_a.png"), os.path.join(d, "image_b.png")])
    np.testing.assert_allclose(soft, np.load(os.path.join(d, "image_tokens.npy")), **F32_LOGITS)
    ids = np.load(os.path.join(d, "ids.npy"))
    mask = np.load(os.path.join(d, "image_mask.npy"))
    logits = m.forward(ids, media_mask=mask, media_embeddings=soft)
    np.testing.assert_allclose(logits, np.load(os.path.join(d, "logits.npy")), **F32_LOGITS)
    res = m.generate(ids, 8, media_mask=mask, media_embeddings=soft)
    assert res["tokens"][0] == np.load(os.path.join(d, "greedy.npy")).tolist()
    with pytest.raises(mc.ArgumentError, match="media_mask marks 512 tokens, media_embeddings has 256 rows"):
        m.forward(ids, media_mask=mask, media_embeddings=soft[:1])
    # The same tower from llama.cpp's mmproj file (tests/reference/gemma3_mmproj_fixture.py): the same tokens.
    from_gguf = mc.Gemma3Vision(os.path.join(d, "mmproj.gguf"))
    assert from_gguf.config["num_layers"] == 2 and from_gguf.config["emb_dim"] == 32
    np.testing.assert_array_equal(from_gguf.encode([os.path.join(d, "image_a.png"), os.path.join(d, "image_b.png")]),
                                  soft)


def test_llama4_vision_and_tiles_match_the_float64_reference_and_maxtexts_processor(mc):
    """Llama4Vision (tests/reference/llama4_vision_reference.py's fixture, Hugging Face layout): the projector's
    tokens at the f32 logit tolerance, a layer's capture at the per-layer one; llama4_preprocess against the
    re-statement of MaxText's processor (tests/reference/llama4_preprocess.py), bit for bit."""
    vision_or_skip(mc)
    d = fixture("llama4_vision")
    v = mc.Llama4Vision(os.path.join(d, "hf"))
    assert v.config["tokens_per_tile"] == 9 and v.config["emb_dim"] == 24
    assert v.image_tokens["patch"] == 200092
    tiles = np.load(os.path.join(d, "pixels.npy"))
    name = "vision_encoder.Llama4VisionModel_0.Llama4VisionEncoder_0.layers_1"
    tokens, acts = v.encode(tiles, capture=[name])
    np.testing.assert_allclose(tokens, np.load(os.path.join(d, "out.npy")), **F32_LOGITS)
    np.testing.assert_allclose(acts[name], np.load(os.path.join(d, "layer_1.npy")), rtol=1e-5, atol=8e-6)
    with pytest.raises(mc.ShapeError, match=r"tiles must be \[n, 84, 84, 3\]"):
        v.encode(np.zeros((1, 80, 84, 3), np.float32))
    # llama.cpp's own conversion of a 3-layer model (fixture llama4_mmproj): the checkpoint's tokens, bit for bit.
    mm = fixture("llama4_mmproj")
    pic = [os.path.join(fixture("llama4_mm_model"), "image_a.png")]
    np.testing.assert_array_equal(mc.Llama4Vision(os.path.join(mm, "mmproj.gguf")).encode(pic),
                                  mc.Llama4Vision(os.path.join(mm, "hf")).encode(pic))

    ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference")
    sys.path.insert(0, ref_dir)
    try:
        import llama4_preprocess as ref  # MaxText's processor re-stated (Pillow + NumPy)
    finally:
        sys.path.remove(ref_dir)
    rng = np.random.default_rng(11)
    for w, h, tile, most in [(130, 90, 28, 16), (40, 30, 28, 16), (300, 50, 14, 6), (1000, 700, 336, 16)]:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        want, _, grid, _ = ref.preprocess(img, tile, most)
        got, got_grid = mc.llama4_preprocess(img, tile, most)
        assert tuple(got_grid) == tuple(grid), (w, h)
        assert np.array_equal(got, np.ascontiguousarray(want.transpose(0, 2, 3, 1)).astype(np.float32)), (w, h)
        per = (tile // 14) ** 2 // 4
        assert mc.llama4_image_token_ids(*grid, per) == ref.image_tokens(*grid, per), (w, h)


def test_llama4_pictures_merged_into_the_decoder_match_the_float64_reference(mc):
    """Llama 4 with pictures (tests/reference/llama4_multimodal_reference.py): the vision model's soft tokens merged at
    the <|patch|> positions, causal; logits at the f32 logit tolerance, greedy tokens equal (gaps >= 0.055)."""
    vision_or_skip(mc)
    d = fixture("llama4_mm_model")
    hf = os.path.join(d, "hf")
    m = mc.Model(weights=hf)
    v = mc.Llama4Vision(hf)
    soft = v.encode([os.path.join(d, "image_a.png"), os.path.join(d, "image_b.png")])
    assert soft.shape == (8, 9, 32)
    np.testing.assert_allclose(soft, np.load(os.path.join(d, "image_tokens.npy")), **F32_LOGITS)
    tiles, grid = v.preprocess(os.path.join(d, "image_a.png"))
    assert tiles.shape == (7, 84, 84, 3) and tuple(grid) == (2, 3)
    np.testing.assert_array_equal(tiles, np.load(os.path.join(d, "pixels_a.npy")))
    ids = np.load(os.path.join(d, "ids.npy"))
    mask = np.load(os.path.join(d, "image_mask.npy"))
    rows = soft.reshape(-1, 32)
    logits = m.forward(ids, media_mask=mask, media_embeddings=rows)
    np.testing.assert_allclose(logits, np.load(os.path.join(d, "logits.npy")), **F32_LOGITS)
    res = m.generate(ids, 8, media_mask=mask, media_embeddings=rows)
    assert res["tokens"][0] == np.load(os.path.join(d, "greedy.npy")).tolist()


def test_gemma4_vision_and_pictures_match_the_float64_reference(mc):
    """Gemma4Vision (tests/reference/gemma4_vision_reference.py's fixture): the projector's tokens at the f32 logit
    tolerance, a layer's capture at the per-layer one, llama.cpp's own mmproj conversion bit for bit; with pictures
    (tests/reference/gemma4_multimodal_reference.py): MaxText's preprocessing bit for bit, the soft tokens merged at
    the <|image|> positions (a picture's tokens see each other in the sliding layers), logits at the f32 logit
    tolerance, greedy tokens equal (gaps >= 0.034)."""
    vision_or_skip(mc)
    d = fixture("gemma4_vision")
    v = mc.Gemma4Vision(os.path.join(d, "hf"))
    assert v.config["pooling_kernel_size"] == 3 and v.config["emb_dim"] == 40
    pixels = np.load(os.path.join(d, "pixels.npy"))
    name = "vision_encoder.Gemma4VisionEncoderLayer_0.layer_1"
    tokens, acts = v.encode(pixels, capture=[name])
    np.testing.assert_allclose(tokens, np.load(os.path.join(d, "out.npy")), **F32_LOGITS)
    # atol 3e-5: the post-norms rescale each branch to unit RMS (tests/models/test_gemma4_vision.cpp)
    np.testing.assert_allclose(acts[name], np.load(os.path.join(d, "layer_1.npy")), rtol=1e-5, atol=3e-5)
    np.testing.assert_array_equal(mc.Gemma4Vision(os.path.join(d, "mmproj.gguf")).encode(pixels), tokens)
    with pytest.raises(mc.ShapeError, match="not made of whole 12-pixel windows"):
        v.encode(np.zeros((1, 24, 30, 3), np.float32))

    d = fixture("gemma4_mm_model")
    hf = os.path.join(d, "hf")
    v = mc.Gemma4Vision(hf)
    assert v.image_tokens == {"image_start": 61, "image_end": 62, "image": 60}
    pics = [os.path.join(d, "image_a.png"), os.path.join(d, "image_b.png")]
    np.testing.assert_array_equal(np.stack([v.preprocess(p) for p in pics]), np.load(os.path.join(d, "pixels.npy")))
    soft = v.encode(pics)
    assert [s.shape for s in soft] == [(6, 40), (6, 40)]
    rows = np.concatenate(soft)
    np.testing.assert_allclose(rows, np.load(os.path.join(d, "image_tokens.npy")), **F32_LOGITS)
    assert [s.shape[0] for s in v.encode(pics, how="hf")] == [4, 6]  # Hugging Face's sizes: 24 x 24, 36 x 24
    assert mc.gemma4_preprocess(pics[0], how="hf", patch_size=4, max_soft_tokens=6).shape == (24, 24, 3)
    m = mc.Model(weights=hf)
    ids = np.load(os.path.join(d, "ids.npy"))
    mask = np.load(os.path.join(d, "image_mask.npy"))
    logits = m.forward(ids, media_mask=mask, media_embeddings=rows)
    np.testing.assert_allclose(logits, np.load(os.path.join(d, "logits.npy")), **F32_LOGITS)
    res = m.generate(ids, 8, media_mask=mask, media_embeddings=rows)
    assert res["tokens"][0] == np.load(os.path.join(d, "greedy.npy")).tolist()


def test_qwen3_vision_matches_the_float64_reference(mc):
    """Qwen3Vision (tests/reference/qwen3_vision_reference.py's fixture, Hugging Face layout): the projector's tokens
    and the deepstack features at the f32 logit tolerance, a block's capture at the per-layer one, the position
    embedding (bfloat16, as MaxText rounds it) exactly; the fixture's pictures through Hugging Face's preprocessing
    give its pixel_values and tokens."""
    vision_or_skip(mc)
    d = fixture("qwen3_vision")
    v = mc.Qwen3Vision(os.path.join(d, "hf"))
    assert v.config["deepstack_visual_indexes"] == [0, 2] and v.config["out_hidden_size"] == 24
    pv = np.load(os.path.join(d, "pixel_values.npy"))
    name = "vision_encoder.Qwen3_5MoeVisionEncoder_0.blocks_1"
    out, acts = v.encode_patches(pv[:48], (1, 6, 8), capture=[name])
    np.testing.assert_allclose(out["tokens"], np.load(os.path.join(d, "merged.npy"))[:12], **F32_LOGITS)
    np.testing.assert_allclose(out["deepstack"][1], np.load(os.path.join(d, "deep_1.npy"))[:12], **F32_LOGITS)
    np.testing.assert_allclose(acts[name][0], np.load(os.path.join(d, "block_1.npy"))[:48], rtol=1e-5, atol=8e-6)
    pics = [os.path.join(d, "image_0.png"), os.path.join(d, "image_1.png")]
    x, grid = v.preprocess(pics[1], how="hf")
    assert tuple(grid) == (1, 4, 4)
    np.testing.assert_array_equal(x, pv[48:])
    both = v.encode(pics, how="hf")
    np.testing.assert_allclose(np.concatenate([o["tokens"] for o in both]), np.load(os.path.join(d, "merged.npy")),
                               **F32_LOGITS)
    with pytest.raises(mc.ShapeError, match="whole 2 x 2 windows"):
        v.encode_patches(pv[:15], (1, 3, 5))


def test_qwen3_5_pictures_in_the_text_model_match_the_float64_reference(mc):
    """Qwen3Vision.prompt (tests/reference/qwen3_5_multimodal_reference.py's fixture): the two pictures through Hugging
    Face's preprocessing and the encoder, the prompt's markers expanded with MRoPE's 3-D positions (MaxText's
    get_rope_index) into the qwen3_5 text model: its logits within 1e-5 of their largest, its greedy tokens exactly."""
    vision_or_skip(mc)
    d = fixture("qwen3_5_mm_model")
    hf = os.path.join(d, "hf")
    ids = np.load(os.path.join(d, "tokens.npy"))
    marked = [int(t) for i, t in enumerate(ids) if not (t == 62 and i > 0 and ids[i - 1] == 62)]
    pics = [os.path.join(d, "image_0.png"), os.path.join(d, "image_1.png")]
    p = mc.Qwen3Vision(hf).prompt(marked, pics, how="hf")
    np.testing.assert_array_equal(p["ids"], ids)
    np.testing.assert_array_equal(p["positions"], np.load(os.path.join(d, "positions.npy")))
    np.testing.assert_allclose(p["media_embeddings"], np.load(os.path.join(d, "image_embeddings.npy")), **F32_LOGITS)
    m = mc.Model(weights=hf)
    logits = m.forward(p["ids"], media_mask=p["media_mask"], media_embeddings=p["media_embeddings"],
                       mrope_positions=p["positions"])
    # Through this encoder (rows 1.9e-6 from the float64 ones) the decoder's logits move by 1.4e-5 of 3.6 at most:
    # bound 1e-5 x max(1, max |logit|) (the C++ test feeds the reference rows and holds F32_LOGITS).
    want = np.load(os.path.join(d, "logits.npy"))
    np.testing.assert_allclose(logits[0], want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))
    res = m.generate(p["ids"], 4, media_mask=p["media_mask"], media_embeddings=p["media_embeddings"],
                     media_positions=p["positions"])
    assert res["tokens"][0] == np.load(os.path.join(d, "greedy.npy")).tolist()
    with pytest.raises(mc.ArgumentError, match="need MRoPE's 3-D positions"):
        m.forward(p["ids"], media_mask=p["media_mask"], media_embeddings=p["media_embeddings"])
