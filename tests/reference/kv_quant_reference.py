#!/usr/bin/env python3
"""MaxText's KV-cache quantisation (KVQuant + KVCache.get_cached_values), re-stated in NumPy from float32 inputs.

Source read: MaxText commit e591f30, src/maxtext/inference/kvcache.py (KVQuant.quantize, the bf16 scale caches,
get_cached_values) and src/maxtext/layers/attention_op.py (the AqtEinsum qk / wv products on the quantised cache).
Written from that Python, not from the C++ code. Float64 throughout, except where MaxText rounds to a narrower type;
those roundings are reproduced exactly (inputs are float32 = an f32 model's activation dtype):
  scale     = max |kv| over d ("dkv": one per token and kv head) or over heads and d ("heads_and_dkv": one per token)
  y         = f32(kv * f32(MAX / scale))  (both steps in float32; MAX = 127.5 int8, 7.5 int4, 448 fp8; doing this in
            float64 instead would change 11 of the fixture's int codes, e.g. a row max giving -127.49999 -> -127, not -128)
  int8/int4 code = rint(y) (half to even), converted saturating as XLA converts float -> int: clamp to
            [-128, 127] / [-8, 7] (so +127.5 -> 128 -> 127 but -127.5 -> -128), NaN -> 0
  fp8 code  = float8_e4m3fn(y): round to nearest even, 4 exponent bits (bias 7), 3 mantissa bits, subnormals, max 448,
            no inf (|y| > 464 -> NaN). Implemented below by bit arithmetic and cross-checked here against a brute-force
            nearest-of-all-127-finite-non-negative-values table (torch 1.13 here has no torch.float8_e4m3fn, and no ml_dtypes is installed).
  stored scale   = bf16(scale) (the cache's scale variables are jnp.bfloat16), round to nearest even
  deq scale      = bf16(f32(stored scale) / MAX)  (division in float32, then to bf16 nearest-even)
  dequantised    = code * deq scale (float64; exact, since both have <= 8 significant bits)
A row whose scale is 0 (all zeros) gets codes 0 and dequantised 0 for every dtype (MaxText would give 0 * inf = NaN:
int codes 0 through the NaN -> 0 convert, fp8 codes NaN); the fixture defines 0 for all.
fp8 caveat: E4M3_MAX is a NumPy float32 scalar (not a weak Python float), so in JAX `bf16_scale /= E4M3_MAX` promotes
to float32 and MaxText's fp8 deq scale is likely f32(stored) / 448 without the bf16 rounding; `*_fp8_*_deq_f32scale`
holds that variant. `*_deq` follows the bf16 rule above for all three dtypes; tests/layers/test_kv_quant.cpp takes
`_deq_f32scale` for fp8 (JAX's promotion rule) and `_deq` for int8 / int4.

Attention (MaxText decode: every key / value a query reads is dequantised from the cache): for query position p,
softmax over j = 0..p of q_p . k_j / sqrt(d), then sum_j w_j v_j, float64; query head h reads kv head h // 2.

Writes tests/fixtures/kv_quant/cases.npz (keys: see the summary it prints; e4m3_in / e4m3_codes are the f32 -> e4m3fn
cross-check points: every value, every midpoint (a tie) and its f32 neighbours, subnormals, 464 (-> 448), > 464 (NaN)).
Run from the repository root: /usr/bin/python3 tests/reference/kv_quant_reference.py
"""
import os

import numpy as np

F32 = np.float32
MAX = {"int8": F32(127.5), "int4": F32(7.5), "fp8": F32(448.0)}  # kvcache.py MAX_INT8, MAX_INT4, E4M3_MAX
RANGE = {"int8": (-128, 127), "int4": (-8, 7)}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "kv_quant")


def bf16(a):
    """float32 -> bfloat16 (nearest even), returned as float32."""
    u = np.asarray(a, dtype=F32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(F32)


# ---------------------------------------------------------------------------------------------------------- e4m3fn
def e4m3_encode(y):
    """float32 array -> float8_e4m3fn bit patterns (uint8), round to nearest even."""
    y = np.asarray(y, dtype=np.float64)  # exact copy of the f32 values
    a = np.abs(y)
    _, e = np.frexp(np.where(a > 0, a, 1.0))  # a = m * 2^e, m in [0.5, 1)
    q = np.exp2(np.maximum(e - 1, -6) - 3.0)  # spacing: 3 mantissa bits; subnormal spacing 2^-9 below 2^-6
    r = np.round(a / q) * q  # a / q is exact; np.round is half-to-even on the mantissa
    _, er = np.frexp(np.where(r > 0, r, 1.0))
    ex = np.where(r >= 2.0 ** -6, er - 1 + 7, 0)  # biased exponent field (0: subnormal or zero)
    man = np.where(ex > 0, r / np.exp2(er - 1.0) * 8 - 8, r / 2.0 ** -9)
    bits = (ex * 8 + man).astype(np.int64)
    bits = np.where((r > 448) | np.isnan(y), 0x7F, bits)  # no inf: overflow and NaN -> NaN
    return (bits | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def e4m3_decode(b):
    b = np.asarray(b, dtype=np.uint8).astype(np.int64)
    ex, man = (b >> 3) & 0xF, b & 7
    v = np.where(ex == 0, man * 2.0 ** -9, (1 + man / 8.0) * np.exp2(ex - 7.0))
    v = np.where((b & 0x7F) == 0x7F, np.nan, v)
    return np.where(b & 0x80, -v, v)


def e4m3_bruteforce(y):
    """Independent check: nearest of the finite values (codes 0..0x7E), ties to the even code."""
    vals = e4m3_decode(np.arange(0x7F))
    a = np.abs(np.asarray(y, dtype=np.float64))[..., None]
    dist = np.abs(a - vals)
    best = dist.min(-1, keepdims=True)
    cand = np.where(dist == best, np.arange(0x7F), 999)
    even = np.where(cand % 2 == 0, cand, 999).min(-1)
    code = np.where(even < 999, even, cand.min(-1))  # one nearest value, or a tie: the even one
    code = np.where(a[..., 0] > 464.0, 0x7F, code)  # beyond the 448 / 480 midpoint: NaN
    return (code | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def check_e4m3():
    vals = e4m3_decode(np.arange(0x7F)).astype(F32)
    mids = ((vals[1:].astype(np.float64) + vals[:-1]) / 2).astype(F32)  # exact in f32: the ties
    pts = np.concatenate([vals, mids, np.nextafter(mids, F32(0)), np.nextafter(mids, F32(1e9)),
                          F32([460, 463.9, 464, 464.1, 500, 1e-7, 2.0 ** -10, 2.0 ** -10 * 1.0001]),
                          np.random.default_rng(1).standard_normal(500).astype(F32) * 50])
    pts = np.concatenate([pts, -pts]).astype(F32)
    got, ref = e4m3_encode(pts), e4m3_bruteforce(pts)
    assert np.array_equal(got, ref), pts[got != ref]
    assert np.array_equal(e4m3_encode(vals), np.arange(0x7F, dtype=np.uint8))  # every value is a fixed point
    assert e4m3_encode(F32([448]))[0] == 0x7E and e4m3_encode(F32([464]))[0] == 0x7E  # tie 464 -> 448 (even)
    return pts, got.view(np.int8)  # stored as e4m3_in / e4m3_codes: ties, subnormals, overflow for the C++ encoder


# --------------------------------------------------------------------------------------------------- quantise
def quantize(x, dtype, axis):
    """x float32 [T, K, d] -> (codes int8 [T, K, d], stored bf16 scale as f32 [T, K or 1], deq f64, deq_f32scale)."""
    red = (2,) if axis == "dkv" else (1, 2)
    scale = np.max(np.abs(x), axis=red, keepdims=True)  # f32, exact
    zero = scale == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        y = x * (MAX[dtype] / scale)  # f32: MAX / scale rounded to f32, then the product rounded to f32
    assert y.dtype == F32
    y = np.where(zero, F32(0), y)  # the fixture's zero-row rule
    if dtype == "fp8":
        bits = e4m3_encode(y)
        codes, cval = bits.view(np.int8), e4m3_decode(bits)
    else:
        lo, hi = RANGE[dtype]
        r = np.rint(y)  # half to even, in f32
        c = np.clip(np.where(np.isnan(r), 0, r), lo, hi)  # XLA's saturating float -> int convert
        codes, cval = c.astype(np.int8), c.astype(np.float64)
    stored = bf16(scale)  # the bf16 cache scale
    dscale = bf16(stored / MAX[dtype]).astype(np.float64)  # bf16 / MAX, f32 division, back to bf16
    deq = cval * dscale
    deq_f32scale = cval * (stored / MAX[dtype]).astype(np.float64)  # fp8 variant: no bf16 rounding of the quotient
    # Sanity: |deq - x| <= rounding of the code (int: 0.5; fp8: half an e4m3 ulp) * dscale + deq-scale error.
    s, y64 = scale.astype(np.float64), y.astype(np.float64)
    half = 0.5 if dtype != "fp8" else np.maximum(np.abs(y64) * 2.0 ** -4, 2.0 ** -10)
    if dtype != "fp8":
        assert codes.min() >= RANGE[dtype][0] and codes.max() <= RANGE[dtype][1]
    else:
        assert not np.isnan(cval).any() and np.abs(cval).max() <= 448
    bound = half * dscale + float(MAX[dtype]) * np.abs(dscale - s / float(MAX[dtype])) + 1e-6 * s
    assert np.all(np.abs(deq - x) <= bound), (dtype, axis)
    assert np.all(deq[np.broadcast_to(zero, x.shape)] == 0)
    return codes, stored.reshape(x.shape[0], -1), deq, deq_f32scale, s


def attention(q, k, v):
    """Causal dot-product attention in f64. q [T, N, d], k/v [T, K, d]; query head h uses kv head h // (N // K)."""
    T, N, d = q.shape
    kh = np.arange(N) // (N // k.shape[1])
    lg = np.einsum("phd,jhd->phj", q.astype(np.float64), k[:, kh].astype(np.float64)) / np.sqrt(d)
    lg = np.where(np.arange(T)[None, None, :] <= np.arange(T)[:, None, None], lg, -np.inf)
    w = np.exp(lg - lg.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("phj,jhd->phd", w, v[:, kh].astype(np.float64))


def main():
    e4_in, e4_codes = check_e4m3()
    rng = np.random.default_rng(20260822)
    T, K, d = 9, 2, 16
    mag = 10.0 ** np.linspace(-3, 3, T)  # per-token magnitudes 1e-3 .. 1e3
    a = rng.standard_normal((T, K, d)) * mag[:, None, None]
    a[3] = -np.abs(a[3])  # token 3: negative values only
    a[4] = 0.0  # token 4: all zeros
    a[5, 1, 3] = 50 * np.abs(a[5]).max()  # token 5: one outlier, 50x the rest
    cases = {"a": a.astype(F32), "b": rng.standard_normal((6, 4, 8)).astype(F32)}
    q = (0.01 * rng.standard_normal((T, 4, d))).astype(F32)  # N = 4 query heads; logits stay O(10)
    v = rng.standard_normal((T, K, d)).astype(F32)
    out = {"e4m3_in": e4_in, "e4m3_codes": e4_codes, "a_q": q, "a_v": v, "a_attn_exact": attention(q, cases["a"], v)}
    print(f"{'case':4} {'dtype':5} {'axis':13} max|deq-x|/scale  (fp8 f32-scale variant)")
    for c, x in cases.items():
        out[f"{c}_x"] = x
        for t in ("int8", "int4", "fp8"):
            for ax in ("dkv", "heads_and_dkv"):
                codes, sc, deq, deq32, s = quantize(x, t, ax)
                p = f"{c}_{t}_{ax}"
                out[p + "_codes"], out[p + "_scale"], out[p + "_deq"] = codes, sc, deq
                if t == "fp8":
                    out[p + "_deq_f32scale"] = deq32
                err = np.abs(deq - x) / np.where(s > 0, s, 1)
                err32 = np.abs(deq32 - x) / np.where(s > 0, s, 1)
                print(f"{c:4} {t:5} {ax:13} {err.max():.3e}" + (f"  ({err32.max():.3e})" if t == "fp8" else ""))
                if c == "a" and (t == "int8" or (t, ax) == ("fp8", "heads_and_dkv")):
                    vc, vs, vdeq, vdeq32, _ = quantize(v, t, ax)
                    out[p + "_vcodes"], out[p + "_vscale"] = vc, vs
                    out[p + "_attn"] = attention(q, deq, vdeq)
                    if t == "fp8":  # the same with the float32 deq scale (see the fp8 caveat above)
                        out[p + "_attn_f32scale"] = attention(q, deq32, vdeq32)
                    print(f"     attention max|attn - exact| = {np.abs(out[p + '_attn'] - out['a_attn_exact']).max():.3e}")
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "cases.npz")
    np.savez(path, **out)
    print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes), {len(out)} arrays:")
    for k in sorted(out):
        print(f"  {k:34} {str(out[k].dtype):8} {out[k].shape}")


if __name__ == "__main__":
    main()
