"""Logits, captures, layers and KV-cache decoding of maxtext_cpp.Model against the committed float64 fixtures
(tests/reference/*.py wrote them from MaxText's math in PyTorch; the C++ tests use the same files)."""
import json
import os

import numpy as np
import pytest

from conftest import F32_LAYER, F32_LOGITS, assert_close, fixture, meta, nest, read_safetensors, shared_dir


def gpt3(mc, **kw):
    cfg = mc.Config(fixture("gpt3_model", "config.yml"))
    return mc.Model(cfg, weights=fixture("gpt3_model", "model.safetensors"), **kw)


def llama(mc, case="llama2_model", **kw):
    cfg = mc.Config(overrides=meta(case)["config"])
    return mc.Model(cfg, weights=fixture(case, "model.safetensors"), **kw)


def test_gpt3_logits_match_the_float64_reference(mc):
    m = gpt3(mc)
    tokens = np.load(fixture("gpt3_model", "tokens.npy"))
    logits = m.forward(tokens)
    assert logits.dtype == np.float32 and logits.shape == (2, 11, 96)
    assert_close(logits, np.load(fixture("gpt3_model", "logits.npy")), **F32_LOGITS, what="gpt3 logits")


def test_gpt3_captures_match_every_reference_activation(mc):
    m = gpt3(mc)
    ref = np.load(fixture("gpt3_model", "activations.npz"))
    names = [n for n in ref.files if n != "logits"]
    logits, acts = m.forward(np.load(fixture("gpt3_model", "tokens.npy")), capture=names)
    assert set(acts) == set(names)
    for n in names:
        assert_close(acts[n], ref[n], **F32_LOGITS, what=n)
    # forward order: the embedding first, the final norm last
    order = list(acts)
    assert order[0] == "token_embedder" and order[-1] == "decoder.decoder_norm"
    assert order.index("decoder.layers_0") < order.index("decoder.layers_1.input")


def test_capture_all(mc):
    m = gpt3(mc)
    _, acts = m.forward(np.load(fixture("gpt3_model", "tokens.npy")), capture=True)
    assert "decoder.layers_1.self_attention.attention_op" in acts and "logits" in acts


def test_llama2_logits_and_captures(mc):
    m = llama(mc)
    tokens = np.load(fixture("llama2_model", "tokens.npy"))
    names = ["token_embedder", "decoder.layers_0", "decoder.layers_1", "decoder.decoder_norm"]
    logits, acts = m.forward(tokens, capture=names)
    assert_close(logits, np.load(fixture("llama2_model", "logits.npy")), **F32_LOGITS, what="llama2 logits")
    for n in names:
        assert_close(acts[n], np.load(fixture("llama2_model", f"act_{n}.npy")), **F32_LOGITS, what=n)


@pytest.mark.parametrize("case", ["mistral_model", "qwen3_model", "default_model", "llama2_model_llama31"])
def test_other_blocks_logits(mc, case):
    m = llama(mc, case)
    logits = m.forward(np.load(fixture(case, "tokens.npy")))
    assert_close(logits, np.load(fixture(case, "logits.npy")), **F32_LOGITS, what=case)


def test_hugging_face_state_dict_as_numpy(mc):
    """A PyTorch state_dict (Hugging Face names) converted to NumPy loads like the file; captures use HF names."""
    d = fixture("hf_tiny", "llama")
    m = mc.Model(mc.Config(f"{d}/config.json"), weights=read_safetensors(f"{d}/model.safetensors"))
    assert m.names == "hf"
    tokens = np.load(f"{d}/tokens.npy")
    logits, acts = m.forward(tokens, capture=["model.layers.1", "model.norm"])
    assert_close(logits[0], np.load(f"{d}/logits.npy"), **F32_LOGITS, what="hf llama logits")  # tokens [T]
    assert set(acts) == {"model.layers.1", "model.norm"}


def test_single_layer_from_a_file_matches_the_reference(mc):
    d = fixture("llama2_layer")
    m = mc.Model(mc.Config(overrides=meta("llama2_layer")["config"]))  # no model weights needed
    y, acts = m.run_layer(np.load(f"{d}/x.npy"), weights=f"{d}/weights.safetensors",
                          positions=np.load(f"{d}/positions.npy"), capture=["self_attention", "mlp", "out"])
    assert_close(y, np.load(f"{d}/out.npy"), **F32_LAYER, what="layer out")
    assert_close(acts["out"], y, rtol=0, atol=0, what="out capture")
    assert_close(acts["self_attention"], np.load(f"{d}/attn.npy"), **F32_LAYER, what="self_attention")
    assert_close(acts["mlp"], np.load(f"{d}/mlp.npy"), **F32_LAYER, what="mlp")


def test_single_layer_of_the_loaded_model(mc):
    m = llama(mc)
    x = np.load(fixture("llama2_model", "act_token_embedder.npy"))
    y = m.run_layer(x, 0)
    assert_close(y, np.load(fixture("llama2_model", "act_decoder.layers_0.npy")), **F32_LOGITS, what="layer 0")


def test_kv_cache_decoding_equals_the_full_forward(mc):
    m = llama(mc)
    tokens = np.load(fixture("llama2_model", "tokens.npy"))
    full = m.forward(tokens)
    cache = m.new_cache(batch=2, capacity=tokens.shape[1])
    parts = [m.forward(tokens[:, :4], cache=cache)]
    for t in range(4, tokens.shape[1]):
        parts.append(m.forward(tokens[:, t:t + 1], cache=cache))
    assert cache.lengths == [tokens.shape[1]] * 2
    # one-row vs many-row products sum in another order (as tests/models/test_llama_family.cpp): 1e-5
    assert_close(np.concatenate(parts, axis=1), full, rtol=1e-5, atol=1e-5, what="incremental")
    cache.reset()
    assert cache.lengths == [0, 0]


def test_paged_cache_decodes_as_the_ordinary_one_and_shares_a_prefix(mc):
    m = llama(mc)
    tokens = np.load(fixture("llama2_model", "tokens.npy"))
    T = tokens.shape[1]
    plain = m.new_cache(batch=2, capacity=T)
    paged = m.new_cache(batch=2, capacity=T, paged=True)
    p = paged.paging
    assert p["pages"] > 0 and p["tokens_per_page"] >= 32 and p["pages_used"] == 0
    a = m.forward(tokens[:, :4], cache=plain)
    b = m.forward(tokens[:, :4], cache=paged)
    assert np.array_equal(a, b)  # the same kernels over the same rows: bit for bit
    assert paged.paging["pages_used"] == 2 and paged.pages_of(0) == 1
    # Row 1 takes row 0's first 3 tokens (its page shared, then copied when row 1 writes); as the ordinary cache's copy.
    paged.share_prefix(paged, 0, 1, 3)
    plain.share_prefix(plain, 0, 1, 3)
    assert paged.paging["pages_used"] == 1 and paged.paging["pages_shared"] == 1
    assert paged.lengths == [4, 3]
    step = tokens[:, 4:5]
    assert np.array_equal(m.forward(step, cache=paged), m.forward(step, cache=plain))
    assert paged.paging["pages_used"] == 2 and paged.paging["pages_shared"] == 0
    paged.reset()
    assert paged.paging["pages_used"] == 0
    with pytest.raises(mc.ArgumentError, match="tokens_per_page and pages are for a paged cache"):
        m.new_cache(1, 8, pages=4)


def test_parameter_tree_scanned_and_unscanned_equal_the_file(mc):
    """{'params': {'decoder': {'layers': ...}}} as jax.device_get(params) gives it: scanned (layer axis 1,
    param_scan_axis) and unscanned (layers_0, layers_1), built from the file's arrays with NumPy."""
    tokens = np.load(fixture("gpt3_model", "tokens.npy"))
    ref = gpt3(mc).forward(tokens)
    cfg = mc.Config(fixture("gpt3_model", "config.yml"))
    scanned = read_safetensors(fixture("gpt3_model", "model_scanned.safetensors"))
    unscanned = read_safetensors(fixture("gpt3_model", "model.safetensors"))
    for flat in (scanned, unscanned):
        tree = {"params": nest(flat)}
        logits = mc.Model(cfg, weights=tree).forward(tokens)
        np.testing.assert_array_equal(logits, ref)
    # a stack built here the way scan stacks it (np.stack on axis 1) from the unscanned llama arrays
    flat = read_safetensors(fixture("llama2_model", "model.safetensors"))
    stacked = {k: v for k, v in flat.items() if ".layers_" not in k}
    for k in [k for k in flat if k.startswith("decoder.layers_0.")]:
        rest = k[len("decoder.layers_0."):]
        stacked["decoder.layers." + rest] = np.stack([flat[f"decoder.layers_{i}.{rest}"] for i in range(2)], axis=1)
    lt = np.load(fixture("llama2_model", "tokens.npy"))
    np.testing.assert_array_equal(mc.Model(llama(mc).config, weights={"params": nest(stacked)}).forward(lt),
                                  llama(mc).forward(lt))


def test_parameter_tree_is_not_copied(mc):
    """A float32 table whose layout the model uses as is (the token embedding) is read in place: changing the array
    after loading changes the model (the documented caveat of zero-copy loading)."""
    tokens = np.load(fixture("llama2_model", "tokens.npy"))
    flat = read_safetensors(fixture("llama2_model", "model.safetensors"))
    m = mc.Model(llama(mc).config, weights=flat)
    _, before = m.forward(tokens, capture=["token_embedder"])
    flat["token_embedder.embedding"][:] = 0.0
    _, after = m.forward(tokens, capture=["token_embedder"])
    assert np.abs(before["token_embedder"]).max() > 0
    assert np.abs(after["token_embedder"]).max() == 0.0


def bf16_bits(a):
    """float32 -> bfloat16 bits as uint16, round to nearest even (NumPy, independent of the library)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def test_bf16_weights_as_uint16_bits(mc):
    """bf16 weight matrices given as uint16 bit views load to the same model as float32 ones rounded at load (with
    float32 activations the norm scales stay float32: they are given as such)."""
    flat = read_safetensors(fixture("llama2_model", "model.safetensors"))
    cfg = llama(mc).config
    tokens = np.load(fixture("llama2_model", "tokens.npy"))
    a = mc.Model(cfg, weights=flat, weight_type="bfloat16").forward(tokens)
    bits = {k: bf16_bits(v) if v.ndim >= 2 else v for k, v in flat.items()}
    b = mc.Model(cfg, weights=bits, weight_type="bfloat16").forward(tokens)
    np.testing.assert_array_equal(a, b)
    # and stay within bf16 weight rounding of the float64 reference (2^-8 relative per weight, 2 layers)
    assert_close(a, np.load(fixture("llama2_model", "logits.npy")), rtol=0.05, atol=0.05, what="bf16 weights")


def test_bf16_via_ml_dtypes(mc):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    flat = read_safetensors(fixture("llama2_model", "model.safetensors"))
    cfg = llama(mc).config
    tokens = np.load(fixture("llama2_model", "tokens.npy"))
    cfg.dtype = "bfloat16"  # everything bf16: vectors are rounded too
    a = mc.Model(cfg, weights={k: bf16_bits(v) for k, v in flat.items()}).forward(tokens)
    b = mc.Model(cfg, weights={k: v.astype(ml_dtypes.bfloat16) for k, v in flat.items()}).forward(tokens)
    np.testing.assert_array_equal(a, b)


def test_params_export_round_trip(mc):
    m = llama(mc)
    p = m.params()
    flat = read_safetensors(fixture("llama2_model", "model.safetensors"))
    assert set(p) == set(flat)
    for k in flat:
        np.testing.assert_array_equal(p[k], flat[k])
    assert m.num_params() == sum(v.size for v in flat.values())


def test_threads_release_the_gil(mc):
    """Two Python threads run forward passes on two models at once (the GIL is released while computing)."""
    import threading
    m1, m2 = llama(mc), gpt3(mc)
    lt, gt = np.load(fixture("llama2_model", "tokens.npy")), np.load(fixture("gpt3_model", "tokens.npy"))
    out = {}

    def run(name, m, t):
        for _ in range(20):
            out[name] = m.forward(t)

    th = [threading.Thread(target=run, args=("l", m1, lt)), threading.Thread(target=run, args=("g", m2, gt))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    assert_close(out["l"], np.load(fixture("llama2_model", "logits.npy")), **F32_LOGITS)
    assert_close(out["g"], np.load(fixture("gpt3_model", "logits.npy")), **F32_LOGITS)


@pytest.mark.parametrize("case,weights", [("deepseek_model", "model.safetensors"),
                                          ("deepseek_model", "model_scanned.safetensors"),
                                          ("mixtral_model", "model.safetensors"),
                                          ("mixtral_model", "model_scanned.safetensors")])
def test_moe_blocks_logits(mc, case, weights):
    """DeepSeek (MLA, dense + MoE layer kinds: dense_layers_i / moe_layers_j) and Mixtral, MaxText layouts."""
    m = mc.Model(mc.Config(fixture(case, "config.yml")), weights=fixture(case, weights))
    logits = m.forward(np.load(fixture(case, "tokens.npy")))
    assert_close(logits, np.load(fixture(case, "logits.npy")), **F32_LOGITS, what=f"{case} {weights}")


def test_deepseek_moe_layer_of_the_model(mc):
    m = mc.Model(mc.Config(fixture("deepseek_model", "config.yml")), weights=fixture("deepseek_model", "model.safetensors"))
    assert m.layer_names == ["decoder.dense_layers_0", "decoder.moe_layers_0", "decoder.moe_layers_1"]
    x = np.load(fixture("deepseek_model", "act_decoder.dense_layers_0.npy"))
    y = m.run_layer(x, 1)  # the first MoE layer, on the dense layer's output
    ref = np.load(fixture("deepseek_model", "act_decoder.moe_layers_0.npy"))
    # as tests/models/test_deepseek_model.cpp: max |diff| <= 1e-5 * max(1, max |ref|)
    assert np.abs(y - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())


def test_mixtral_hugging_face_names(mc):
    d = fixture("mixtral_model")
    m = mc.Model(mc.Config(f"{d}/config.json"), weights=read_safetensors(f"{d}/hf_model.safetensors"))
    assert m.names == "hf"
    assert_close(m.forward(np.load(f"{d}/tokens.npy")), np.load(f"{d}/logits.npy"), **F32_LOGITS, what="mixtral hf")


def check_logits_and_cached_decoding(mc, case, weights):
    """A model fixture from `weights` (scan_layers for a scanned tree): the logits, then the prompt through the cache
    (prefill 4, one token per step) as in the C++ tests. Returns the model and the tokens."""
    overrides = dict(meta(case)["config"])
    if weights.startswith("model_scanned"):
        overrides["scan_layers"] = True
    m = mc.Model(mc.Config(overrides=overrides), weights=fixture(case, weights))
    tokens = np.load(fixture(case, "tokens.npy"))
    full = m.forward(tokens)
    assert_close(full, np.load(fixture(case, "logits.npy")), **F32_LOGITS, what=f"{case} {weights}")
    cache = m.new_cache(batch=2, capacity=tokens.shape[1])
    parts = [m.forward(tokens[:, :4], cache=cache)]
    for t in range(4, tokens.shape[1]):
        parts.append(m.forward(tokens[:, t:t + 1], cache=cache))
    assert_close(np.concatenate(parts, axis=1), full, rtol=1e-5, atol=1e-5, what="incremental")
    return m, tokens


@pytest.mark.parametrize("weights", ["model.safetensors", "model_scanned.safetensors"])
@pytest.mark.parametrize("case", ["gemma4_model", "gemma4_moe_model"])
def test_gemma4_logits_and_cached_decoding(mc, case, weights):
    """gemma4 (5 sliding-window : 1 global K=V layer with Gemma 4's partial RoPE; dense and Gemma4MoE FFNs) from
    MaxText trees, unscanned and Gemma4ScannableBlock-scanned: logits, then the prompt through the KV cache."""
    check_logits_and_cached_decoding(mc, case, weights)


@pytest.mark.parametrize("weights", ["model.safetensors", "model_scanned.safetensors"])
def test_envy_logits_and_cached_decoding(mc, weights):
    """envy (qk-normed attention, dense / top-2 routed MoE cycle, post-FFW norms) from MaxText trees, unscanned and
    EnvyScannableBlock-scanned: logits, then the prompt through the KV cache."""
    check_logits_and_cached_decoding(mc, "envy_model", weights)


@pytest.mark.parametrize("weights", ["model.safetensors", "hf/model.safetensors"])
@pytest.mark.parametrize("case", ["gemma4_small_e2b_model", "gemma4_small_e4b_model"])
def test_gemma4_small_logits_and_cached_decoding(mc, case, weights):
    """gemma4_small (Gemma 4 E2B / E4B shapes: per-layer inputs, the last layers reading an earlier layer's keys and
    values) from MaxText and Hugging Face trees: logits, then the prompt through the KV cache."""
    check_logits_and_cached_decoding(mc, case, weights)


@pytest.mark.parametrize("weights", ["model.safetensors", "model_scanned.safetensors", "hf/model.safetensors"])
@pytest.mark.parametrize("case", ["qwen3_next_model", "qwen3_5_model"])
def test_qwen3_next_logits_and_recurrent_decoding(mc, case, weights):
    """qwen3_next (Gated DeltaNet + gated attention) and qwen3_5 (the same layers, multimodal RoPE at text positions;
    its hf/ in Qwen3.5's own layout) from MaxText (unscanned, scanned `layer_j`) and Hugging Face trees: logits, then
    the prompt through the recurrent cache (prefill 4, one token per step) as in the C++ test."""
    m, tokens = check_logits_and_cached_decoding(mc, case, weights)
    # a padding segment id is refused before the cache is touched; the cache goes on
    seg = np.ones((2, 1), np.int32)
    seg[1, 0] = 0
    with pytest.raises(mc.UnsupportedError, match="segment id 0"):
        m.forward(tokens[:, :1], segment_ids=seg, cache=m.new_cache(batch=2, capacity=4))


def test_engram_model_needs_its_table_then_matches_the_float64_reference(mc):
    """DeepSeek with Engram in layer 1 (tests/reference/deepseek_engram_reference.py): without the canonical-token
    table the model refuses to run; with the fixture's table its logits match the float64 reference."""
    case = "deepseek_engram_model"
    m = mc.Model(mc.Config(fixture(case, "config.yml")), weights=fixture(case, "model.safetensors"))
    tokens = np.load(fixture(case, "tokens.npy"))
    assert m.needs_engram_vocab
    with pytest.raises(mc.Error, match="(?i)engram"):
        m.forward(tokens)
    with pytest.raises(mc.ArgumentError, match="lookup=, compressed_size= and pad_token="):
        m.set_engram_vocab(lookup=[0, 1])
    info = meta(case)
    m.set_engram_vocab(lookup=np.load(fixture(case, "engram_lookup.npy")).tolist(),
                       compressed_size=info["compressed_vocab"], pad_token=info["pad_token"])
    assert not m.needs_engram_vocab
    assert_close(m.forward(tokens), np.load(fixture(case, "logits.npy")), **F32_LOGITS, what="engram logits")


def test_compressed_token_table_of_a_real_tokenizer_equals_the_oracle(mc):
    """Tokenizer.compressed_token_table() on Qwen3's tokenizer.json against tests/fixtures/engram_vocab/qwen3.json
    (@huggingface/tokenizers run by tests/reference/engram_vocab_fixtures.mjs): the size and 400 sampled entries."""
    path = os.path.join(shared_dir(), "models", "tokenizers", "qwen3", "tokenizer.json")
    if not os.path.exists(path):
        pytest.skip(f"{path} absent (the shared models folder)")
    with open(fixture("engram_vocab", "qwen3.json")) as f:
        fx = json.load(f)
    lookup, size = mc.Tokenizer(path).compressed_token_table()
    assert lookup.dtype == np.int32 and lookup.shape == (fx["vocab_size"],)
    assert size == fx["compressed_size"]
    ids, want = np.array(fx["samples"]).T
    assert (lookup[ids] == want).all()


def test_fp16_kv_cache_over_gguf_matrices_matches_the_float64_reference(mc):
    # kv_type="float16": keys and values rounded to fp16 as they enter the cache, over a GGUF file's matrices (the
    # llama.cpp peer's llama model, F32). Against a float64 forward that rounds the cache the same way
    # (tests/reference/llama_gguf_reference.py), at the C++ test's kF16Cache (atol 1e-3: where our f32 key and the exact
    # one round to neighbouring fp16 numbers; measured 1.7e-4); the rounding itself moves these logits by about 1e-2.
    d = fixture("llamacpp", "llama")
    seq = np.concatenate([np.load(os.path.join(d, "tokens.npy")), np.load(os.path.join(d, "greedy.npy"))[:-1]])
    ref = np.load(os.path.join(d, "logits_f64_kv_f16.npy"))
    m = mc.Model(weights=os.path.join(d, "model.gguf"), kv_type="float16")
    logits = m.forward(seq[None, :].astype(np.int32))
    assert_close(logits.reshape(ref.shape), ref, rtol=1e-4, atol=1e-3, what="fp16 KV cache")
    assert np.abs(np.load(os.path.join(d, "logits.npy")) - ref).max() > 5e-3  # the f32 cache's logits would fail
    with pytest.raises(mc.UnsupportedError, match="kv_type 'bfloat16': expected float16"):
        mc.Model(weights=os.path.join(d, "model.gguf"), kv_type="bfloat16")


def test_int8_kv_cache_as_maxtext_quantises_it(mc):
    # quantize_kvcache (MaxText's KVQuant, int8, one scale per token) over the llama.cpp peer's llama model: the
    # prompt's prefill attends its keys and values as computed (the unquantised logits, bit for bit), each later step
    # reads the cache dequantised. Against the float64 forward with the same semantics (logits_f64_kv_int8.npy) on
    # average within 0.01, as tests/models/test_llamacpp_peer.cpp explains (an element at a rounding midpoint takes
    # the neighbouring code: no per-element bound); the quantisation itself moves the logits 0.023 on average.
    d = fixture("llamacpp", "llama")
    g = os.path.join(d, "model.gguf")
    prompt = np.load(os.path.join(d, "tokens.npy")).astype(np.int32)
    greedy = np.load(os.path.join(d, "greedy.npy")).astype(np.int32)
    want = np.load(os.path.join(d, "logits_f64_kv_int8.npy"))
    P = len(prompt)
    q = mc.Model(config=mc.Config(g, overrides={"quantize_kvcache": True}), weights=g, weight_type="ggml")
    plain = mc.Model(config=mc.Config(g), weights=g, weight_type="ggml")
    qc, pc = q.new_cache(1, P + len(greedy)), plain.new_cache(1, P + len(greedy))
    assert np.array_equal(q.forward(prompt[None, :], cache=qc), plain.forward(prompt[None, :], cache=pc))
    steps = np.array([q.forward(greedy[None, i:i + 1], cache=qc).reshape(-1) for i in range(len(greedy) - 1)])
    assert np.abs(steps - want[P:]).mean() <= 0.01
    # Packed rows: 2 kv heads of 16 -> 32 codes, a bf16 scale, padding to 16 bytes: 48 bytes against 128 in float32.
    assert qc.nbytes * 128 == pc.nbytes * 48
    with pytest.raises(mc.ConfigError, match="kv_quant_dtype 'int5'"):
        mc.Model(config=mc.Config(g, overrides={"quantize_kvcache": True, "kv_quant_dtype": "int5"}), weights=g,
                 weight_type="ggml")


def test_session_keeps_its_cache_and_goes_on_from_a_file(mc, tmp_path):
    m, other = llama(mc), llama(mc)
    s = m.new_session(capacity=64)
    first = s.generate([1, 5, 9, 2, 7], max_new_tokens=4)
    assert first["prompt_tokens"] == 5 and len(first["tokens"]) == 4
    path = str(tmp_path / "conversation.mxs")
    s.save(path, app="my notes")
    saved = list(s.tokens)
    go_on = s.generate([3, 4], max_new_tokens=5)
    assert go_on["prompt_tokens"] == 3  # the new turn and the answer's last token, nothing before

    t = other.new_session(capacity=64)
    assert t.load(path) == "my notes"
    assert t.tokens == saved and len(t) == len(saved)
    again = t.generate([3, 4], max_new_tokens=5)
    assert again["tokens"] == go_on["tokens"] and again["prompt_tokens"] == 3

    with pytest.raises(mc.ArgumentError, match="this session's capacity is 8"):
        other.new_session(capacity=8).load(path)
    with open(path, "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0x10]))
    u = other.new_session(capacity=64)
    with pytest.raises(mc.IoError, match="is damaged: CRC-32"):
        u.load(path)
    assert u.tokens == []
