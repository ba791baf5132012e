"""Model.compare (the `maxtext compare` table as data) and generation (greedy tokens against a PyTorch float64
model, text with a tokenizer and a streaming callback)."""
import json
import os
import re

import numpy as np
import pytest

from conftest import F32_LOGITS, assert_close, fixture, meta, shared_dir


def gpt3(mc):
    return mc.Model(mc.Config(fixture("gpt3_model", "config.yml")), weights=fixture("gpt3_model", "model.safetensors"))


def test_compare_against_the_reference_dump(mc):
    m = gpt3(mc)
    tokens = np.load(fixture("gpt3_model", "tokens.npy"))
    rows, text = m.compare(fixture("gpt3_model", "activations.npz"), tokens=tokens, report=True)
    ref = np.load(fixture("gpt3_model", "activations.npz"))
    assert {r["reference"] for r in rows} == set(ref.files)
    assert all(r["pass"] for r in rows), text
    assert rows[0]["ours"] == "token_embedder"  # forward order
    logit_row = next(r for r in rows if r["ours"] == "logits")
    assert logit_row["top1_agree"] == logit_row["positions"] == 22 and logit_row["kl_max"] < 1e-8
    assert "compared 19 tensors: 19 passed, 0 failed" in text


def test_compare_finds_the_first_divergence(mc):
    """A reference whose layer-1 MLP output is off by 0.1: that row fails and is the first divergence; the rows
    after it (which depend on it in the reference's own numbers only) still compare."""
    m = gpt3(mc)
    ref = dict(np.load(fixture("gpt3_model", "activations.npz")))
    ref["decoder.layers_1.mlp"] = ref["decoder.layers_1.mlp"] + 0.1
    rows = m.compare(ref, tokens=np.load(fixture("gpt3_model", "tokens.npy")), rtol=1e-4, atol=1e-5)
    first = [r for r in rows if r["first_divergence"]]
    assert [r["ours"] for r in first] == ["decoder.layers_1.mlp"]
    bad = first[0]
    assert not bad["pass"] and abs(bad["max_abs"] - 0.1) < 1e-4 and bad["outside"] == bad["count"] == 2 * 11 * 16
    assert [r["ours"] for r in rows if not r["pass"]] == ["decoder.layers_1.mlp"]


def test_compare_with_a_name_map_and_tokens_from_the_reference(mc):
    m = gpt3(mc)
    ref = np.load(fixture("gpt3_model", "activations.npz"))
    theirs = {"embed": ref["token_embedder"], "h0": ref["decoder.layers_0"], "ids": np.load(fixture("gpt3_model", "tokens.npy")),
              "junk": np.zeros(3)}
    rows = m.compare(theirs, tokens="ids", map={"embed": "token_embedder", "h0": "decoder.layers_0", "junk": None,
                                                "ids": None})
    assert [(r["reference"], r["ours"]) for r in rows] == [("embed", "token_embedder"), ("h0", "decoder.layers_0")]
    assert all(r["pass"] for r in rows)


def test_compare_one_layer(mc):
    d = fixture("llama2_layer")
    m = mc.Model(mc.Config(overrides=meta("llama2_layer")["config"]))
    ref = {"out": np.load(f"{d}/out.npy"), "self_attention": np.load(f"{d}/attn.npy"), "mlp": np.load(f"{d}/mlp.npy")}
    rows = m.compare(ref, input=np.load(f"{d}/x.npy"), weights=f"{d}/weights.safetensors",
                     positions=np.load(f"{d}/positions.npy"), rtol=1e-5, atol=1e-6)
    assert [r["ours"] for r in rows] == ["self_attention", "mlp", "out"] and all(r["pass"] for r in rows)


def test_compare_refuses_a_reference_matching_nothing(mc):
    with pytest.raises(mc.ArgumentError, match="none of the reference's 1 tensors matched"):
        gpt3(mc).compare({"nothing_here": np.zeros(2)}, tokens=[1, 2])


def test_greedy_generation_matches_a_float64_pytorch_model(mc, torch_reference):
    """Greedy tokens of the 2-layer llama2 fixture model against the same model in PyTorch float64
    (tests/reference/attention_reference.py's layers), each step re-running the whole sequence."""
    import torch
    R = torch_reference
    case = "llama2_model"
    cfg = meta(case)["config"]
    m = mc.Model(mc.Config(overrides=cfg), weights=fixture(case, "model.safetensors"))
    from conftest import read_safetensors
    w = {k: torch.from_numpy(v.astype(np.float64)) for k, v in read_safetensors(fixture(case, "model.safetensors")).items()}
    H = cfg["head_dim"]
    a = {"heads": cfg["base_num_query_heads"], "kv_heads": cfg["base_num_kv_heads"], "head_dim": H,
         "eps": cfg["normalization_layer_epsilon"], "rope": R.default_rope(H, 10000.0)}

    def logits64(seq):
        tok = np.asarray([seq], dtype=np.int64)
        x = w["token_embedder.embedding"][torch.from_numpy(tok)]
        pos = np.arange(len(seq), dtype=np.int32)[None]
        for i in range(cfg["base_num_decoder_layers"]):
            x, _, _ = R.decoder_layer("llama2", x, R.sub(w, f"decoder.layers_{i}."), a, pos)
        x = R.rms_norm(x, w["decoder.decoder_norm.scale"], a["eps"])
        return (x @ w["decoder.logits_dense.kernel"])[0, -1].numpy()

    prompts = [[38, 1, 57], [30, 24, 7, 20, 25]]
    n = 12
    out = m.generate(prompts, max_new_tokens=n)
    for p, got in zip(prompts, out["tokens"]):
        seq = list(p)
        for _ in range(n):
            lg = logits64(seq)
            top2 = np.sort(lg)[-2:]
            assert top2[1] - top2[0] > 1e-3, "ill-conditioned step: float32 may legitimately pick another token"
            seq.append(int(np.argmax(lg)))
        assert got == seq[len(p):]
    # the first step's logits equal the float64 model's (the same tolerance as the fixture logits)
    full = m.forward(np.asarray(prompts[1]))
    np.testing.assert_allclose(full[0, -1], logits64(prompts[1]), **F32_LOGITS)


def test_on_token_callback_and_stop_tokens(mc):
    m = mc.Model(mc.Config(overrides=meta("llama2_model")["config"]), weights=fixture("llama2_model", "model.safetensors"))
    seen = []
    full = m.generate([[38, 1, 57]], max_new_tokens=8, on_token=lambda row, t: seen.append((row, t)))["tokens"][0]
    assert seen == [(0, t) for t in full]
    stop = full[3]
    cut = m.generate([[38, 1, 57]], max_new_tokens=8, stop_tokens=[stop])["tokens"][0]
    assert cut == full[:full.index(stop) + 1]


def stories():
    d = os.path.join(shared_dir(), "models", "stories260K")
    if not os.path.exists(os.path.join(d, "stories260K.bin")):
        pytest.skip(f"{d}/stories260K.bin absent (the shared models folder)")
    return d


def test_generate_text_with_a_tokenizer_and_streaming(mc):
    """stories260K (llama2.c checkpoint + tok512.bin) against llama2.c's own greedy output."""
    d = stories()
    with open(os.path.join(d, "reference", "once_upon_a_time.json")) as f:
        ref = json.load(f)
    weights = os.path.join(d, "stories260K.bin")
    m = mc.Model(weights=weights)  # the config comes from the checkpoint's header
    tok = mc.Tokenizer(weights=weights, vocab_size=m.config.vocab_size)
    assert tok.encode(ref["prompt"]) == ref["prompt_ids"]
    pieces = []
    out = m.generate(ref["prompt"], max_new_tokens=len(ref["greedy_ids"]), tokenizer=tok, stream=pieces.append)
    assert out["prompt_tokens"] == [ref["prompt_ids"]]
    assert out["tokens"] == [ref["greedy_ids"]]
    assert "".join(pieces) == ref["greedy_text"] == out["text"][0]
    assert tok.decode(ref["prompt_ids"] + ref["greedy_ids"]) == ref["full_text"]
    # the logits of the prompt and the first generated tokens (rows 0..7) against run.c's
    seq = ref["prompt_ids"] + ref["greedy_ids"]
    logits = m.forward(np.asarray(seq[:8]))[0]
    np.testing.assert_allclose(logits, np.load(os.path.join(d, "reference", ref["logits_file"])), rtol=0, atol=1e-4)


def test_a_gguf_files_f16_weights_are_read_where_they_lie(mc):
    """llama-2-tiny-random.gguf stores its matrices as F16: Model(weights=path) reads them in place (runtime-typed
    'ggml' weights: the file's mapping is the one copy; 'f16' storage where the module lacks that policy) unless
    weight_type says otherwise, and with more than eight tokens the logits equal float32 storage's bit for bit (the
    F16 rows are widened exactly into the f32 kernel's panels and multiplied in its order)."""
    path = os.path.join(shared_dir(), "models", "llama-2-tiny-random", "llama-2-tiny-random.gguf")
    if not os.path.exists(path):
        pytest.skip(f"{path} absent (the shared models folder)")
    kept = mc.Model(weights=path)
    wide = mc.Model(weights=path, weight_type="float32")
    assert "weights=ggml" in repr(kept) or "weights=f16" in repr(kept)
    assert "weights=f32" in repr(wide)
    # More than eight tokens: the F16 rows go through the f32 kernel's panels (at most eight take direct products).
    tokens = np.asarray([1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203, 29889])
    np.testing.assert_array_equal(kept.forward(tokens), wide.forward(tokens))


def test_speculative_generation_gives_the_greedy_tokens(mc):
    """spec='lookup' and spec=<draft Model>: the tokens of plain greedy generation, with the acceptance counts."""
    cfg = mc.Config(overrides=meta("llama2_model")["config"])
    m = mc.Model(cfg, weights=fixture("llama2_model", "model.safetensors"))
    prompt = [38, 1, 57, 38, 1]
    plain = m.generate([prompt], max_new_tokens=24)["tokens"]
    out = m.generate([prompt], max_new_tokens=24, spec="lookup", draft_max=3)
    assert out["tokens"] == plain
    assert len(out["speculative"]["drafted"]) == 3
    twin = mc.Model(cfg, weights=fixture("llama2_model", "model.safetensors"))  # the same weights: all accepted
    out = m.generate([prompt], max_new_tokens=24, spec=twin)
    assert out["tokens"] == plain
    s = out["speculative"]
    assert sum(s["accepted"]) == sum(s["drafted"]) > 0 and s["acceptance_rate"] == 1.0
    with pytest.raises(Exception, match="the drafter runs the model it drafts for"):
        m.generate([prompt], max_new_tokens=8, spec=m)
    sampled = m.generate([prompt], max_new_tokens=8, spec="lookup", temperature=0.5, seed=3)  # the rejection rule
    assert len(sampled["tokens"][0]) == 8
    with pytest.raises(Exception, match="expected 'lookup', 'mtp' or a draft Model"):
        m.generate([prompt], max_new_tokens=8, spec="ngram")


def test_mtp_logits_and_speculative_generation(mc):
    """forward_mtp: the main and each MTP layer's logits against the float64 re-statement of MaxText's MTP block
    (tests/reference/mtp_reference.py); spec='mtp': the tokens of plain greedy generation."""
    case = "mtp_deepseek_model"
    m = mc.Model(mc.Config(fixture(case, "config.yml")), weights=fixture(case, "model.safetensors"))
    logits, mtp = m.forward_mtp(np.load(fixture(case, "tokens.npy")))
    assert_close(logits, np.load(fixture(case, "logits.npy")), **F32_LOGITS, what="main")
    assert len(mtp) == 2
    for k, l in enumerate(mtp, 1):
        assert_close(l, np.load(fixture(case, f"mtp_logits_{k}.npy")), **F32_LOGITS, what=f"mtp {k}")
    prompt = [int(t) for t in np.load(fixture(case, "tokens.npy"))[0][:4]]
    plain = m.generate([prompt], max_new_tokens=16)["tokens"]
    out = m.generate([prompt], max_new_tokens=16, spec="mtp", draft_max=2)
    assert out["tokens"] == plain
    assert sum(out["speculative"]["drafted"]) > 0
    # llama.cpp's convention (the hidden state through the final norm; checked against llama.cpp's MTP graph in
    # test_llamacpp_peer): other MTP logits, the same main ones, the same tokens.
    logits_n, mtp_n = m.forward_mtp(np.load(fixture(case, "tokens.npy")), hidden="normed")
    np.testing.assert_array_equal(logits_n, logits)
    assert np.abs(mtp_n[0] - mtp[0]).max() > 1e-3
    assert m.generate([prompt], max_new_tokens=16, spec="mtp", draft_max=2, mtp_hidden="normed")["tokens"] == plain
    with pytest.raises(Exception, match="expected 'raw'"):
        m.forward_mtp(np.load(fixture(case, "tokens.npy")), hidden="norm")
    with pytest.raises(Exception, match="needs spec='mtp'"):
        m.generate([prompt], max_new_tokens=4, spec="lookup", mtp_hidden="normed")
    plain_model = mc.Model(mc.Config(overrides=meta("llama2_model")["config"]),
                           weights=fixture("llama2_model", "model.safetensors"))
    with pytest.raises(Exception, match="no MTP layers"):
        plain_model.generate([prompt], max_new_tokens=4, spec="mtp")
    with pytest.raises(Exception, match="no MTP layers"):
        plain_model.forward_mtp(np.array([prompt]))


@pytest.mark.parametrize("case", ["mtp_qwen3_next_hf", "mtp_qwen3_5_hf"])
def test_qwen3_next_mtp_layer_from_hugging_face(mc, case):
    """Qwen3-Next / Qwen3.5 checkpoints with their mtp.* layer, against tests/reference/qwen3_next_mtp_reference.py
    (written from vLLM's qwen3_next_mtp.py / qwen3_5_mtp.py): MTP logits with the raw and the normed hidden state;
    spec='mtp' gives the tokens of plain greedy generation."""
    m = mc.Model(weights=fixture(case))  # the config from config.json: mtp_num_hidden_layers 1
    tokens = np.load(fixture(case, "tokens.npy"))
    logits, mtp = m.forward_mtp(tokens)
    assert_close(logits, np.load(fixture(case, "logits.npy")), **F32_LOGITS, what="main")
    assert len(mtp) == 1
    assert_close(mtp[0], np.load(fixture(case, "mtp_logits_1.npy")), **F32_LOGITS, what="mtp raw")
    _, mtp_n = m.forward_mtp(tokens, hidden="normed")
    assert_close(mtp_n[0], np.load(fixture(case, "mtp_logits_1_normed.npy")), **F32_LOGITS, what="mtp normed")
    prompt = [int(t) for t in tokens[0][:4]]
    plain = m.generate([prompt], max_new_tokens=12)["tokens"]
    out = m.generate([prompt], max_new_tokens=12, spec="mtp", draft_max=1)
    assert out["tokens"] == plain
    assert sum(out["speculative"]["drafted"]) > 0


def test_session_speculative_turns_with_mtp_and_lookup(mc):
    """Session.generate(spec='mtp' | 'lookup'): every turn gives the tokens of a plain session fed the same turns; the
    MTP layers follow the conversation, so a turn after an MTP turn prefills only what it adds."""
    case = "mtp_deepseek_model"
    m = mc.Model(mc.Config(fixture(case, "config.yml")), weights=fixture(case, "model.safetensors"))
    toks = [int(t) for t in np.load(fixture(case, "tokens.npy"))[0]]
    spec, plain = m.new_session(capacity=128), m.new_session(capacity=128)
    turns = [(toks[:4], "mtp"), (toks[4:7], "lookup"), (toks[7:9], "mtp"), (toks[2:5], "mtp")]
    drafted = 0
    for turn, kind in turns:
        a = spec.generate(turn, max_new_tokens=10, spec=kind, draft_max=2)
        b = plain.generate(turn, max_new_tokens=10)
        assert a["tokens"] == b["tokens"], kind
        assert len(a["speculative"]["drafted"]) == 2
        drafted += sum(a["speculative"]["drafted"])
    assert drafted > 0
    assert a["prompt_tokens"] == len(turns[-1][0]) + 1  # the turn and the last answer's last token
    assert spec.tokens == plain.tokens
    with pytest.raises(Exception, match="expected 'lookup' or 'mtp'"):
        spec.generate([1], max_new_tokens=2, spec="ngram")
    with pytest.raises(Exception, match="needs spec='mtp'"):
        spec.generate([1], max_new_tokens=2, spec="lookup", mtp_hidden="normed")
    no_mtp = mc.Model(mc.Config(overrides=meta("llama2_model")["config"]),
                      weights=fixture("llama2_model", "model.safetensors"))
    with pytest.raises(Exception, match="no MTP layers"):
        no_mtp.new_session(capacity=32).generate([1, 2], max_new_tokens=2, spec="mtp")


def test_generate_under_a_grammar_or_a_json_schema(mc):
    """grammar= / json_schema=: the generated text is a sentence of the grammar (checked by re and json, not by the
    library's matcher); bad grammars and combinations are refused by name."""
    d = stories()
    weights = os.path.join(d, "stories260K.bin")
    m = mc.Model(weights=weights)
    tok = mc.Tokenizer(weights=weights, vocab_size=m.config.vocab_size)
    out = m.generate("Once upon a time", max_new_tokens=16, tokenizer=tok, grammar='root ::= " yes" | " no"')
    assert out["text"][0] in (" yes", " no")
    for seed in range(1, 5):
        out = m.generate("Lily", max_new_tokens=24, tokenizer=tok, temperature=1.5, seed=seed,
                         grammar='root ::= [a-c]{1,5} "."')
        assert re.fullmatch(r"[a-c]{1,5}\.", out["text"][0]), out["text"][0]
    for schema in ({"enum": ["cat", "dog", "bird"]}, '{"enum": ["cat", "dog", "bird"]}'):
        out = m.generate("Lily liked", max_new_tokens=16, tokenizer=tok, json_schema=schema)
        assert json.loads(out["text"][0]) in ("cat", "dog", "bird")
    with pytest.raises(Exception, match="grammar=: \\[grammar\\] line 1, column"):
        m.generate("x", tokenizer=tok, grammar='root ::= ("a"')
    with pytest.raises(Exception, match="json_schema=: \\[json_schema\\] #: keyword 'multipleOf' is not supported"):
        m.generate("x", tokenizer=tok, json_schema={"type": "integer", "multipleOf": 2})
    with pytest.raises(Exception, match="give grammar= or json_schema=, not both"):
        m.generate("x", tokenizer=tok, grammar='root ::= "a"', json_schema={})
    with pytest.raises(Exception, match="need tokenizer= and a single prompt"):
        m.generate([[1, 2]], grammar='root ::= "a"')
    with pytest.raises(Exception, match="with spec= or pictures"):
        m.generate("x", tokenizer=tok, grammar='root ::= "a"', spec="lookup")
