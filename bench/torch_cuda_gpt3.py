#!/usr/bin/env python3
"""The peer of bench_cuda's GPT-3 mode on a GPU: Hugging Face transformers' GPT-2 model (the GPT-3 block: pre-LayerNorm,
fused QKV, GELU MLP of 4 x emb, learned positions, tied embedding) at the same shape, in bfloat16, eager PyTorch,
greedy decoding with its KV cache. Seeded weights and the same prompt ids as bench_cuda (speed does not depend on
the values).

  torch_cuda_gpt3.py [emb=1024] [layers=8] [heads=16] [batch=1] [prompt=512] [decode=128]

Prints bench_cuda's words for a hand-written loop (one forward over batch x prompt, then one token a step through
the cache; decode tokens/s = batch tokens per step, the steps after the first), and the rate of transformers'
generate() over the whole generation. A warm-up of each runs first, as in bench_cuda.
"""
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    a = [int(x) for x in sys.argv[1:]]
    D, L, H, B, P, N = (a + [1024, 8, 16, 1, 512, 128][len(a):])[:6]
    vocab = 1024
    cfg = GPT2Config(vocab_size=vocab, n_positions=max(2048, P + N + 1), n_embd=D, n_layer=L, n_head=H,
                     n_inner=4 * D, activation_function="gelu", tie_word_embeddings=True, bos_token_id=None,
                     eos_token_id=None)
    torch.manual_seed(1)
    model = GPT2LMHeadModel(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    ids = torch.tensor([[(b * 31 + t * 7) % (1001 - 1) + 1 for t in range(P)] for b in range(B)], device="cuda")

    def generate(n):
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0)

    def loop(n):
        """The decoding loop a user writes: one forward over the prompt, then one token a step through the cache."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        nxt.cpu()  # the host needs the token, as an application's stream does
        t1 = time.perf_counter()
        past = out.past_key_values
        for _ in range(n - 1):
            out = model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            nxt.cpu()
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    with torch.inference_mode():
        generate(4)  # warm-up: cuBLAS handles, kernels, allocator
        loop(4)
        prefill, decode = loop(N)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = generate(N)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
    assert out.shape[1] == P + N, out.shape
    head = (f"torch gpt2 (transformers {__import__('transformers').__version__}, torch {torch.__version__}) emb={D} "
            f"layers={L} heads={H} batch={B}")
    print(f"{head}, own loop: prefill {P} tokens {B * P / prefill:.0f} tokens/s, decode {B * (N - 1) / decode:.0f} tokens/s")
    print(f"{head}, generate(): {B * N / total:.0f} tokens/s over prefill and decode")


if __name__ == "__main__":
    main()
