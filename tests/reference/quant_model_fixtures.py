#!/usr/bin/env python3
"""Real quantised GGUF files for tests/io/test_gguf_quant_models.cpp, made by llama.cpp's own quantiser.

Steps (each writes into tests/fixtures/ggml_quants/; SCRATCH holds the files not committed):
  1. `model`: a small Llama with seeded random weights as an F32 GGUF (SCRATCH/tiny-f32.gguf, 4 MB): dim 256, 2 layers,
     4 query / 2 KV heads (head_dim 64), hidden 256, vocab 512 (a synthetic SentencePiece vocabulary, so that llama.cpp
     and `maxtext generate` can load it). Every matrix's inner dim is 256, so
     llama-quantize applies the K-quants and IQ4_XS without fallbacks.
  2. quantise with llama.cpp's llama-quantize (or tests/reference/llama_cpp_quantize.cpp, which calls the same
     llama_model_quantize with llama-quantize's defaults: byte-identical files, checked) to Q4_K_M, Q5_K_M, Q6_K, Q4_0, IQ4_XS, Q3_K_M, Q2_K,
     Q4_1, Q5_0, Q5_1 -> tiny-<TYPE>.gguf (committed,
     under 1 MB each; see the shell lines below).
  3. `dequant TYPE`: the dequantised copy of tiny-<TYPE>.gguf written as F32 by gguf-py's NumPy dequantisation
     (SCRATCH/tiny-<TYPE>-deq.gguf): the model the quantised file means, independent of our decoder.
  4. llama.cpp logits (tests/reference/llama_cpp_logits.cpp) on the quantised files and on the dequantised copies,
     for the token ids in TOKENS -> llama-<TYPE>.npy, llama-<TYPE>-deq.npy, llama-F32.npy (committed, 8 KB each).

  SCRATCH=/tmp/quantmodels; Q=/work/peers/llama.cpp/build/bin/llama-quantize
  export PYTHONPATH=/work/peers/llama.cpp/gguf-py
  /usr/bin/python3 tests/reference/quant_model_fixtures.py model $SCRATCH
  for t in Q4_K_M Q5_K_M Q6_K Q4_0 IQ4_XS Q3_K_M Q2_K Q4_1 Q5_0 Q5_1; do $Q $SCRATCH/tiny-f32.gguf tests/fixtures/ggml_quants/tiny-$t.gguf $t 1; done
  for t in Q4_K_M Q5_K_M Q6_K Q4_0 IQ4_XS Q3_K_M Q2_K Q4_1 Q5_0 Q5_1; do /usr/bin/python3 tests/reference/quant_model_fixtures.py dequant $t $SCRATCH; done
  (The Q4_1 / Q5_0 / Q5_1 files were added on 2026-11-29 with the llama.cpp of bench/.peers, which reproduces the
  earlier files byte for byte; its F32 logits differ from the committed llama-F32.npy by 4.8e-6 at most, summation
  order on a machine without AVX-512, so that oracle was kept.)
  (then tests/reference/llama_cpp_logits.cpp, see its header)
"""
import pathlib
import sys

import numpy as np
import gguf
from gguf import quants

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "ggml_quants"
DIM, LAYERS, HEADS, KV_HEADS, HIDDEN, VOCAB = 256, 2, 4, 2, 256, 512
TOKENS = [1, 42, 300, 7, 511, 128, 64, 3]


def add_tokenizer(w):
    """A synthetic SentencePiece-style vocabulary of VOCAB pieces (so that llama.cpp and maxtext can load the file):
    <unk>, <s>, </s>, the 256 byte pieces <0x00>..<0xFF>, then letters and letter pairs with and without the word
    marker U+2581, scored by order."""
    toks, types = ["<unk>", "<s>", "</s>"], [2, 3, 3]
    toks += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    pieces = ["\u2581" + a for a in letters] + list(letters) + ["\u2581" + a + b for a in letters[:9] for b in letters]
    pieces += [a + b for a in letters for b in letters]
    seen = set(toks)
    for piece in pieces:
        if len(toks) == VOCAB:
            break
        if piece not in seen:
            seen.add(piece)
            toks.append(piece)
            types.append(1)
    assert len(toks) == VOCAB
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(VOCAB - 259)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def model(scratch):
    rng = np.random.default_rng(14)
    out = pathlib.Path(scratch) / "tiny-f32.gguf"
    w = gguf.GGUFWriter(str(out), arch="llama")
    w.add_name("maxtext-cpp quant fixture")
    w.add_context_length(128)
    w.add_embedding_length(DIM)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(HIDDEN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(DIM // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(w)
    hd = DIM // HEADS

    def mat(rows, cols, scale=1.0):  # rows = out features; GGUF stores [cols (inner), rows]
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", (rng.standard_normal((VOCAB, DIM))).astype(np.float32))
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(DIM))
        w.add_tensor(p + "attn_q.weight", mat(HEADS * hd, DIM))
        w.add_tensor(p + "attn_k.weight", mat(KV_HEADS * hd, DIM))
        w.add_tensor(p + "attn_v.weight", mat(KV_HEADS * hd, DIM))
        w.add_tensor(p + "attn_output.weight", mat(DIM, HEADS * hd))
        w.add_tensor(p + "ffn_norm.weight", norm(DIM))
        w.add_tensor(p + "ffn_gate.weight", mat(HIDDEN, DIM))
        w.add_tensor(p + "ffn_up.weight", mat(HIDDEN, DIM))
        w.add_tensor(p + "ffn_down.weight", mat(DIM, HIDDEN))
    w.add_tensor("output_norm.weight", norm(DIM))
    w.add_tensor("output.weight", mat(VOCAB, DIM, 4.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}", file=sys.stderr)


def dequant(qname, scratch):
    """tiny-QNAME.gguf -> an F32 GGUF with every tensor dequantised by gguf-py (metadata copied)."""
    src = FIX / f"tiny-{qname}.gguf"
    out = pathlib.Path(scratch) / f"tiny-{qname}-deq.gguf"
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(out), arch="llama")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vt = field.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = field.types[1]
            if et == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]) for i in field.data]
            else:
                val = [field.parts[i][0].item() for i in field.data]
            w.add_array(key, val) if et != gguf.GGUFValueType.STRING else w.add_array(key, val)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(key, str(bytes(field.parts[-1]), "utf-8"))
        else:
            w.add_key_value(key, field.parts[-1][0].item(), vt)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    kinds = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # row-major
        data = np.asarray(t.data)
        if t.tensor_type in (gguf.GGMLQuantizationType.F32,):
            arr = data.astype(np.float32).reshape(shape)
        else:
            arr = quants.dequantize(data, t.tensor_type).astype(np.float32).reshape(shape)
        kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + 1
        w.add_tensor(t.name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: tensor types {kinds}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1] == "model":
        model(sys.argv[2])
    elif sys.argv[1] == "dequant":
        dequant(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
