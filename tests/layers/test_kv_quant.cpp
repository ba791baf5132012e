// MaxText's KV-cache quantisation (layers/kv_quant.hpp) against tests/fixtures/kv_quant/cases.npz, written by
// tests/reference/kv_quant_reference.py: a float64 restatement of MaxText's KVQuant (inference/kvcache.py) that rounds
// only where MaxText does (the product x * (MAX / scale) in float32, the scale stored in bfloat16, the division by MAX
// in bfloat16). Codes and stored scales must be equal; dequantised values are exact products (a code of at most 8
// significant bits times a bfloat16 step), so they must be equal too. Attention over the dequantised keys and values
// (MaxText's autoregressive step reads every key from the cache) is compared at the f32 tolerance.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/io/npz.hpp"
#include "maxtext/layers/attention_op.hpp"
#include "maxtext/layers/kv_quant.hpp"
#include "maxtext/models/kv_cache.hpp"
#include "support/attention_mask.hpp"
#include "support/family_fixture.hpp"

using namespace maxtext;
using layers::KVQuant;
using layers::KVQuantAxis;
using layers::KVQuantType;

namespace {

const io::TensorMap& fixture() {
  static const io::TensorMap m = io::read_npz(test::fixture("kv_quant") + "/cases.npz");
  return m;
}

const char* type_name(KVQuantType t) { return t == KVQuantType::int8 ? "int8" : t == KVQuantType::int4 ? "int4" : "fp8"; }
const char* axis_name(KVQuantAxis a) { return a == KVQuantAxis::dkv ? "dkv" : "heads_and_dkv"; }

struct Quantised {
  std::vector<std::uint8_t> codes;  // T rows of code_bytes(K * d)
  std::vector<bf16> scales;         // T rows of scales(K)
  std::vector<float> deq;           // T * K * d
};

/// x [T, K, d] (f32 in the fixture) quantised and dequantised row by row.
Quantised quantise(const KVQuant& q, const AnyTensor& x) {
  const std::int64_t T = x.shape[0], K = x.shape[1], d = x.shape[2], w = K * d;
  Quantised r;
  r.codes.resize(static_cast<std::size_t>(T * q.code_bytes(w)));
  r.scales.resize(static_cast<std::size_t>(T * q.scales(K)));
  r.deq.resize(static_cast<std::size_t>(T * w));
  std::vector<float> row(static_cast<std::size_t>(w));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < w; ++i) row[static_cast<std::size_t>(i)] = static_cast<float>(x.element(t * w + i));
    std::uint8_t* c = r.codes.data() + t * q.code_bytes(w);
    bf16* s = r.scales.data() + t * q.scales(K);
    q.quantize_row(row.data(), K, d, c, s);
    q.dequantize_row(c, s, K, d, r.deq.data() + t * w);
  }
  return r;
}

/// The quantisations whose attention the fixture holds (case "a"), and the prefix of their keys.
const std::vector<KVQuant>& attention_cases() {
  static const std::vector<KVQuant> v{{KVQuantType::int8, KVQuantAxis::dkv}, {KVQuantType::int8, KVQuantAxis::heads_and_dkv},
                                      {KVQuantType::fp8, KVQuantAxis::heads_and_dkv}};
  return v;
}
std::string case_key(const KVQuant& q) { return std::string("a_") + type_name(q.type) + "_" + axis_name(q.axis) + "_"; }

/// Our codes, scales and dequantised values for one case / type / axis equal the reference's.
void check_case(const std::string& c, KVQuantType type, KVQuantAxis axis, const std::string& input = "x",
                const std::string& out = "") {
  const KVQuant q{type, axis};
  const std::string key = c + "_" + type_name(type) + "_" + axis_name(axis) + "_";
  const AnyTensor& x = fixture().at(c + "_" + input);
  const std::int64_t T = x.shape[0], K = x.shape[1], d = x.shape[2], w = K * d;
  INFO(key << (out.empty() ? "" : " (" + input + ")") << ": T " << T << ", K " << K << ", d " << d);
  const Quantised r = quantise(q, x);
  const AnyTensor& codes = fixture().at(key + (out.empty() ? "codes" : "vcodes"));
  const AnyTensor& scale = fixture().at(key + (out.empty() ? "scale" : "vscale"));
  REQUIRE(codes.numel() == T * w);
  REQUIRE(scale.numel() == T * q.scales(K));
  std::int64_t code_diff = 0, scale_diff = 0, deq_diff = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::uint8_t* ct = r.codes.data() + t * q.code_bytes(w);
    for (std::int64_t i = 0; i < w; ++i) {
      // int8 / int4 codes as signed values; fp8 codes as their bit patterns (stored as int8): compare the bytes.
      const double want = codes.element(t * w + i);
      const double got = type == KVQuantType::fp8 ? static_cast<double>(static_cast<std::int8_t>(ct[i])) : q.code(ct, i);
      if (got != want) {
        if (++code_diff <= 5) UNSCOPED_INFO("code t " << t << " i " << i << ": " << got << " vs " << want);
      }
    }
    for (std::int64_t g = 0; g < q.scales(K); ++g) {
      const double got = static_cast<float>(r.scales[static_cast<std::size_t>(t * q.scales(K) + g)]);
      if (got != scale.element(t * q.scales(K) + g)) ++scale_diff;
    }
  }
  if (out.empty()) {
    // int8 / int4: a code of at most 8 significant bits times a bf16 step is exact in f32, so equal. fp8: the step is
    // an f32 quotient (MaxText divides by a float32 E4M3_MAX: the fixture's _deq_f32scale), the product rounded
    // once in f32: within 2^-24 of the value.
    const bool fp8 = type == KVQuantType::fp8;
    const AnyTensor& deq = fixture().at(key + (fp8 ? "deq_f32scale" : "deq"));
    for (std::int64_t i = 0; i < T * w; ++i) {
      const double got = r.deq[static_cast<std::size_t>(i)], want = deq.element(i);
      if (fp8 ? std::fabs(got - want) > std::ldexp(std::fabs(want), -24) : got != want) ++deq_diff;
    }
  }
  CHECK(code_diff == 0);
  CHECK(scale_diff == 0);
  CHECK(deq_diff == 0);
}

}  // namespace

TEST_CASE("KVQuant: codes and bf16 scales equal MaxText's for int8 int4 fp8 and both axes", "[layers][kv_quant]") {
  for (const char* c : {"a", "b"}) {
    for (auto type : {KVQuantType::int8, KVQuantType::int4, KVQuantType::fp8}) {
      for (auto axis : {KVQuantAxis::dkv, KVQuantAxis::heads_and_dkv}) check_case(c, type, axis);
    }
  }
}

TEST_CASE("KVQuant: attention over the dequantised cache equals the float64 restatement", "[layers][kv_quant]") {
  // MaxText's autoregressive step reads every key and value from the quantised cache: causal attention of each
  // query over the dequantised keys and values of positions 0..p. Here through the reference backend's attention (the
  // softmax and sums in f32): the f32 tolerance, 2e-6 of the output's scale.
  const AnyTensor& xq = fixture().at("a_q");
  const AnyTensor& xk = fixture().at("a_x");
  const std::int64_t T = xk.shape[0], K = xk.shape[1], d = xk.shape[2], N = xq.shape[1];
  REQUIRE(xq.shape[0] == T);
  REQUIRE(xq.shape[2] == d);
  reference::Backend be;
  Tensor<float, 4> q({1, T, N, d});
  const float inv = 1.0f / std::sqrt(static_cast<float>(d));
  for (std::int64_t i = 0; i < T * N * d; ++i) q.data()[i] = static_cast<float>(xq.element(i)) * inv;
  Tensor<std::int32_t, 1> q_start({1}), kv_len({1});
  q_start(0) = 0;
  kv_len(0) = static_cast<std::int32_t>(T);
  const AttentionMask mask = test::attention_mask(q_start.cview(), kv_len.cview(), {}, {}, {false, true, 0, 0});
  for (const KVQuant& kq : attention_cases()) {
    const std::string key = case_key(kq);
    INFO(key);
    check_case("a", kq.type, kq.axis, "v", "v");  // the values' codes and scales, too
    const Quantised kr = quantise(kq, xk), vr = quantise(kq, fixture().at("a_v"));
    Tensor<float, 4> k({1, T, K, d}), v({1, T, K, d}), o({1, T, N, d});
    std::copy(kr.deq.begin(), kr.deq.end(), k.data());
    std::copy(vr.deq.begin(), vr.deq.end(), v.data());
    be.attention(q.cview(), k.cview(), v.cview(), mask, AttentionOptions{}, View<const float, 1>(), o.view());
    const AnyTensor& want = fixture().at(key + (kq.type == KVQuantType::fp8 ? "attn_f32scale" : "attn"));
    const AnyTensor& exact = fixture().at("a_attn_exact");
    double scale = 0, err = 0, qerr = 0;
    for (std::int64_t i = 0; i < T * N * d; ++i) scale = std::max(scale, std::fabs(want.element(i)));
    for (std::int64_t i = 0; i < T * N * d; ++i) {
      err = std::max(err, std::fabs(static_cast<double>(o.data()[i]) - want.element(i)));
      qerr = std::max(qerr, std::fabs(want.element(i) - exact.element(i)));
    }
    INFO("max |ours - reference| " << err << ", max |quantised - unquantised| " << qerr << ", scale " << scale);
    CHECK(err <= 2e-6 * scale);
    // And the error quantisation itself makes, for the record: int8 and fp8 stay within a few percent of the
    // output's scale on this case (it has a token 50x the others and magnitudes 1e-3..1e3).
    CHECK(qerr <= 0.1 * scale);
  }
}

namespace {

/// AttentionOp over a quantised cache of the fixture's case "a" (queries a_q, keys a_x, values a_v: 9 tokens, 4
/// query heads over 2 kv heads of 16), driven step by step.
template <class P>
class QuantDriver {
 public:
  QuantDriver(const KVQuant& kq)
      : op_(typename layers::AttentionOp<P>::Config{4, 2, 16, 16, true, 0, 0, AttentionOptions{}, kq}),
        cache_(be_, 1, 16, {op_.cache_spec()}) {}
  /// Tokens [start, start + n) (start = the cache's length): forward (write, then attend) or, with attend_only, only
  /// attend over what the cache holds (as a layer reading another layer's cache does). Returns [n, 4, 16] as f64.
  std::vector<double> step(std::int64_t start, std::int64_t n, bool attend_only = false) {
    REQUIRE(cache_.lengths()[0] == (attend_only ? start + n : start));
    const AnyTensor &xq = fixture().at("a_q"), &xk = fixture().at("a_x"), &xv = fixture().at("a_v");
    const float inv = 1.0f / std::sqrt(16.0f);  // the reference scales q . k by 1/sqrt(d); the op takes scaled queries
    Tensor<float, 3> q({n, 4, 16}), k({n, 2, 16}), v({n, 2, 16}), o({n, 4, 16});
    for (std::int64_t i = 0; i < n * 64; ++i) q.data()[i] = static_cast<float>(xq.element(start * 64 + i)) * inv;
    for (std::int64_t i = 0; i < n * 32; ++i) {
      k.data()[i] = static_cast<float>(xk.element(start * 32 + i));
      v.data()[i] = static_cast<float>(xv.element(start * 32 + i));
    }
    Scratch scratch;
    layers::StepInfo st;
    st.batch = 1;
    st.length = n;
    st.start = {static_cast<std::int32_t>(start)};
    std::vector<std::int32_t> pos, len{static_cast<std::int32_t>(start + n)};
    for (std::int64_t i = 0; i < n; ++i) pos.push_back(static_cast<std::int32_t>(start + i));
    st.positions = View<const std::int32_t, 1>(pos.data(), {n});
    st.q_start = View<const std::int32_t, 1>(st.start.data(), {1});
    st.kv_len = View<const std::int32_t, 1>(len.data(), {1});
    layers::Context<P> ctx{be_, scratch, st, nullptr};
    if (attend_only) {
      op_.attend(ctx, q.cview(), cache_.layer(0), View<const float, 1>(), o.view());
    } else {
      op_.forward(ctx, q.cview(), k.cview(), v.cview(), cache_.layer(0), View<const float, 1>(), o.view());
      cache_.set_length(0, start + n);
    }
    return std::vector<double>(o.data(), o.data() + o.size());
  }
  std::int64_t row_bytes() { return cache_.layer(0).buffers[0].dim(2) * static_cast<std::int64_t>(sizeof(typename P::cache_t)); }

 private:
  reference::Backend be_;
  layers::AttentionOp<P> op_;
  models::KVCache<P> cache_;
};

/// max |got - rows [t0, t0 + n) of want| over the largest |want|.
double rel_err(const std::vector<double>& got, const AnyTensor& want, std::int64_t t0) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double w = want.element(t0 * 64 + static_cast<std::int64_t>(i));
    err = std::max(err, std::fabs(got[i] - w));
    scale = std::max(scale, std::fabs(w));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("AttentionOp over a quantised cache: MaxText's prefill and autoregressive reads, against float64",
          "[layers][kv_quant][attention]") {
  // A fresh prefill attends its own keys and values as computed (MaxText's prefill: the unquantised attention);
  // later steps read every key and value dequantised from the cache, their own included (its AR steps), whether one
  // token, several, or a layer that only reads the cache. f32 sums over 9 keys: 2e-6 of the output's scale.
  using P32 = Policy<reference::Backend, float>;
  using P16 = Policy<reference::Backend, float, float, float, fp16>;
  for (const KVQuant& kq : attention_cases()) {
    const std::string key = case_key(kq);
    INFO(key);
    const AnyTensor& quant = fixture().at(key + (kq.type == KVQuantType::fp8 ? "attn_f32scale" : "attn"));
    const AnyTensor& exact = fixture().at("a_attn_exact");
    QuantDriver<P32> a(kq);
    CHECK(a.row_bytes() == kq.packed_row_bytes(2, 16));
    CHECK(rel_err(a.step(0, 8), exact, 0) <= 2e-6);   // prefill: as computed
    CHECK(rel_err(a.step(8, 1), quant, 8) <= 2e-6);   // decode: the cache, the new token's row included
    CHECK(rel_err(a.step(0, 9, true), quant, 0) <= 2e-6);  // a reader of the cache: dequantised throughout
    CHECK(rel_err(a.step(0, 9, true), exact, 0) > 1e-4);   // (and so not the unquantised attention)
    QuantDriver<P32> b(kq);
    b.step(0, 4);
    CHECK(rel_err(b.step(4, 5), quant, 4) <= 2e-6);   // a continuation of several tokens: dequantised
    // The same rows packed into an f16-typed cache buffer: the same bytes, the same outputs, bit for bit.
    QuantDriver<P16> c(kq);
    QuantDriver<P32> d(kq);
    CHECK(c.row_bytes() == kq.packed_row_bytes(2, 16));
    CHECK(c.step(0, 8) == d.step(0, 8));
    CHECK(c.step(8, 1) == d.step(8, 1));
  }
}

TEST_CASE("attend_packed: the backend's attention over the dequantised rows, for every mask and option",
          "[layers][kv_quant][attention]") {
  // Packed rows of random keys and values, read by attend_packed and, dequantised into float rows, by the reference
  // backend's attention with the same mask: the same arithmetic in another order, 1e-5 of the output's scale.
  // Shapes: GQA (4 query heads over 2 kv heads of 8), 3 queries at positions 9..11 over 12 cached rows (the generic
  // loops); heads of 16 and 32 over 40 cached rows (int8 takes the blocked kernel there: two whole blocks of 16 keys
  // and a partial one), with 4, 2 and 1 query heads per kv head (four-row and one-row logit blocks). The last two
  // shapes put the queries past the cached rows (positions 44.., 15..), so that under the chunk masks (chunks of 4 and
  // 5 starting past the rows) a query sees no key: the mean of all values, or 0 with a sink.
  reference::Backend be;
  struct Shape { std::int64_t S, T, N, K, D, past; };
  for (const Shape sh : {Shape{12, 3, 4, 2, 8, 0}, Shape{40, 3, 8, 2, 32, 0}, Shape{40, 2, 4, 2, 16, 0},
                         Shape{37, 1, 3, 3, 16, 0}, Shape{40, 2, 4, 2, 16, 6}, Shape{12, 3, 4, 2, 8, 6}}) {
    const std::int64_t S = sh.S, T = sh.T, N = sh.N, K = sh.K, D = sh.D, q0 = S - T + sh.past;
    INFO("S " << S << " T " << T << " N " << N << " K " << K << " D " << D << " first query " << q0);
    std::uint64_t st = 77;
    auto uniform = [&] {
      st = st * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<float>(static_cast<double>(st >> 11) / 9007199254740992.0) * 4.0f - 2.0f;
    };
    Tensor<float, 4> q({1, T, N, D});
    for (std::int64_t i = 0; i < q.size(); ++i) q.data()[i] = uniform();
    Tensor<float, 1> sinks({N});
    for (std::int64_t i = 0; i < N; ++i) sinks.data()[i] = uniform();
    struct Mask { bool causal; std::int64_t window, chunk; float cap; bool sinks; };
    for (auto type : {KVQuantType::int8, KVQuantType::int4, KVQuantType::fp8}) {
      for (auto axis : {KVQuantAxis::dkv, KVQuantAxis::heads_and_dkv}) {
        const KVQuant kq{type, axis};
        const std::int64_t rb = kq.packed_row_bytes(K, D);
        std::vector<std::uint8_t> kp(static_cast<std::size_t>(S * rb)), vp(kp.size());
        Tensor<float, 4> kd({1, S, K, D}), vd({1, S, K, D});
        std::vector<float> x(static_cast<std::size_t>(K * D));
        for (std::int64_t s = 0; s < S; ++s) {
          for (auto& e : x) e = uniform();
          kq.pack_row(x.data(), K, D, kp.data() + s * rb);
          kq.unpack_row(kp.data() + s * rb, K, D, kd.data() + s * K * D);
          for (auto& e : x) e = uniform();
          kq.pack_row(x.data(), K, D, vp.data() + s * rb);
          kq.unpack_row(vp.data() + s * rb, K, D, vd.data() + s * K * D);
        }
        for (const Mask m : {Mask{true, 0, 0, 0.0f, false}, Mask{true, 4, 0, 0.0f, true}, Mask{true, 0, 5, 2.0f, false},
                             Mask{false, 0, 0, 0.0f, true}, Mask{false, 0, 4, 0.0f, false}}) {
          INFO(kq.name() << " causal " << m.causal << " window " << m.window << " chunk " << m.chunk << " cap " << m.cap
                         << " sinks " << m.sinks);
          Tensor<std::int32_t, 1> qs({1}), kl({1});
          qs(0) = static_cast<std::int32_t>(q0);
          kl(0) = static_cast<std::int32_t>(S);
          const AttentionMask mask = test::attention_mask(qs.cview(), kl.cview(), {}, {}, {false, m.causal, m.window, m.chunk});
          AttentionOptions opt;
          opt.soft_cap = m.cap;
          Tensor<float, 4> want({1, T, N, D});
          be.attention(q.cview(), kd.cview(), vd.cview(), mask, opt, m.sinks ? sinks.cview() : View<const float, 1>(),
                       want.view());
          const layers::PackedAttentionArgs pa{K, D, D, m.causal, m.window, m.chunk, m.cap};
          for (int threads : {1, 2}) {
            Tensor<float, 3> got({T, N, D});
            layers::attend_packed(kq, pa, View<const float, 3>(q.data(), {T, N, D}), q0, S, kp.data(), rb, vp.data(), rb,
                                  m.sinks ? sinks.data() : nullptr, got.view(), threads);
            double err = 0, scale = 0;
            for (std::int64_t i = 0; i < got.size(); ++i) {
              err = std::max(err, std::fabs(static_cast<double>(got.data()[i]) - want.data()[i]));
              scale = std::max(scale, std::fabs(static_cast<double>(want.data()[i])));
            }
            INFO("threads " << threads << ": max |packed - dequantised| " << err << ", scale " << scale);
            CHECK(err <= 1e-5 * scale);
          }
        }
      }
    }
  }
}

TEST_CASE("KVQuant: fp8 e4m3fn encoding is round to nearest even and inverts decoding", "[layers][kv_quant]") {
  for (int b = 0; b < 256; ++b) {
    const auto bits = static_cast<std::uint8_t>(b);
    const float v = static_cast<float>(fp8_e4m3{bits});
    if (std::isnan(v)) {
      CHECK(std::isnan(static_cast<float>(fp8_e4m3{layers::detail::fp8_e4m3_bits(v)})));
      continue;
    }
    INFO("bits " << b << " value " << v);
    CHECK(layers::detail::fp8_e4m3_bits(v) == bits);
    // The midpoint to the next larger magnitude rounds to the even mantissa of the two.
    if ((b & 0x7f) < 0x7e) {
      const float next = static_cast<float>(fp8_e4m3{static_cast<std::uint8_t>(b + 1)});
      const float mid = 0.5f * (v + next);
      const std::uint8_t even = (b & 1) == 0 ? bits : static_cast<std::uint8_t>(b + 1);
      CHECK(layers::detail::fp8_e4m3_bits(mid) == even);
      CHECK(layers::detail::fp8_e4m3_bits(std::nextafter(mid, v)) == bits);
      CHECK(layers::detail::fp8_e4m3_bits(std::nextafter(mid, next)) == static_cast<std::uint8_t>(b + 1));
    }
  }
  // The reference's own cross-check points (every value, every tie and its f32 neighbours, subnormals): equal,
  // except beyond 464, where float8_e4m3fn gives NaN and the encoder here saturates (a code never gets there).
  const AnyTensor& in = fixture().at("e4m3_in");
  const AnyTensor& want = fixture().at("e4m3_codes");
  std::int64_t diff = 0, beyond = 0;
  for (std::int64_t i = 0; i < in.numel(); ++i) {
    const auto x = static_cast<float>(in.element(i));
    const auto w = static_cast<std::uint8_t>(static_cast<std::int8_t>(want.element(i)));
    if (!std::isnan(x) && std::fabs(x) > 464.0f) {
      ++beyond;
      CHECK((w & 0x7f) == 0x7f);
      continue;
    }
    if (layers::detail::fp8_e4m3_bits(x) != w && ++diff <= 5) UNSCOPED_INFO("e4m3 of " << x << ": want " << int(w));
  }
  CHECK(in.numel() > 2000);
  CHECK(diff == 0);
  CHECK(beyond < 10);
  CHECK(layers::detail::fp8_e4m3_bits(500.0f) == 0x7e);  // saturates (no infinity in e4m3fn)
  CHECK(layers::detail::fp8_e4m3_bits(-500.0f) == 0xfe);
}

TEST_CASE("KVQuant: round trip within half a step, int4 packing, zero rows", "[layers][kv_quant]") {
  std::uint64_t s = 12345;
  auto uniform = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<double>(s >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
  };
  const std::int64_t K = 3, d = 5, w = K * d;  // odd width: the last int4 byte holds one code
  for (auto type : {KVQuantType::int8, KVQuantType::int4, KVQuantType::fp8}) {
    for (auto axis : {KVQuantAxis::dkv, KVQuantAxis::heads_and_dkv}) {
      const KVQuant q{type, axis};
      INFO(type_name(type) << " " << axis_name(axis));
      std::vector<float> x(static_cast<std::size_t>(w)), back(static_cast<std::size_t>(w));
      std::vector<std::uint8_t> codes(static_cast<std::size_t>(q.code_bytes(w)));
      std::vector<bf16> sc(static_cast<std::size_t>(q.scales(K)));
      for (int rep = 0; rep < 200; ++rep) {
        const float mag = std::exp2(static_cast<float>(rep % 20 - 10));
        for (auto& v : x) v = uniform() * mag;
        q.quantize_row(x.data(), K, d, codes.data(), sc.data());
        q.dequantize_row(codes.data(), sc.data(), K, d, back.data());
        const std::int64_t len = w / q.scales(K);
        for (std::int64_t i = 0; i < w; ++i) {
          const float step = q.step(sc[static_cast<std::size_t>(i / len)]);
          const float amax = static_cast<float>(sc[static_cast<std::size_t>(i / len)]);
          const float e = std::fabs(back[static_cast<std::size_t>(i)] - x[static_cast<std::size_t>(i)]);
          // Integers: half a step, plus the bf16 roundings of the scale and the step (2^-8 relative each) over at
          // most max_code steps. fp8: 2^-4 relative (3 mantissa bits), the same scale roundings, subnormal steps.
          const float bound = type == KVQuantType::fp8
                                  ? std::fabs(x[static_cast<std::size_t>(i)]) * (0.0625f + 0.008f) + step * 0.002f
                                  : 0.5f * step + amax * 0.008f;
          CHECK(e <= bound);
        }
      }
      std::fill(x.begin(), x.end(), 0.0f);
      q.quantize_row(x.data(), K, d, codes.data(), sc.data());
      q.dequantize_row(codes.data(), sc.data(), K, d, back.data());
      for (auto c : codes) CHECK(c == 0);
      for (auto v : back) CHECK(v == 0.0f);
    }
  }
}

TEST_CASE("KVQuant: kv_quant_dtype and kv_quant_axis refused by name with the nearest valid value", "[layers][kv_quant]") {
  CHECK(KVQuant::parse("int4", "dkv").type == KVQuantType::int4);
  CHECK(KVQuant::parse("fp8", "heads_and_dkv").axis == KVQuantAxis::heads_and_dkv);
  CHECK_THROWS_WITH(KVQuant::parse("int9", "dkv"), Catch::Contains("kv_quant_dtype 'int9'") && Catch::Contains("'int8'"));
  CHECK_THROWS_WITH(KVQuant::parse("int8", "heads_and_dk"),
                    Catch::Contains("kv_quant_axis 'heads_and_dk'") && Catch::Contains("'heads_and_dkv'"));
  CHECK_THROWS_AS(KVQuant::parse("int8", ""), ConfigError);
}
