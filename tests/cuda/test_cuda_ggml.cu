// Runtime-typed matrices on the CUDA backend (Matrix<ggml_byte>: a GGUF file's F32 / F16 / BF16 rows and blocks as
// they lie, read through backend/common/ggml_values.hpp, whose values tests/backend/test_ggml_values.cpp checks on the
// host against the block decoder):
//   - products of every type against the reference backend (which decodes with quant::dequantize_any and sums in
//     double): the warp-per-output kernel (up to 8 rows), the dequantise-a-slice + cuBLASLt path (more rows, f32
//     activations; slices of rows when a decoded matrix exceeds 64 MiB) and the tiled kernel (bf16 activations),
//     with a bias and a value_scale; the f32 sums differ from the reference's double sums by at most
//     (K + 8) 2^-24 sum |w x| (the bound test_ggml_gemm states for the CPU);
//   - the embedding gather (bit-exact: decoding is exact) and the per-head products;
//   - a refused type (MXFP4) at prepare;
//   - the llama.cpp-quantised files of tests/fixtures/ggml_quants (Q4_K_M, Q5_K_M, Q6_K, Q4_0, IQ4_XS, Q3_K_M, Q2_K):
//     their matrices on the device as the file has them (the file's bytes, no F32 / F16 matrix); logits within 1e-4
//     of llama.cpp's on the dequantised copy (the CPU's bound for the same files, test_gguf_quant_models), for
//     prompts of 8 rows and of 16 (two sequences: the cuBLASLt path), and in cached decoding.
// Skipped (exit 77) where no GPU is usable.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cuda/backend.cuh"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/layers/params.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/ggml_blocks.hpp"
#include "support/ggml_model_bytes.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

namespace {

cuda::Backend& gpu() {
  if (!cuda::available()) test::skip("no usable CUDA device (cudaGetDeviceCount failed or found none)");
  static cuda::Backend be;
  return be;
}

/// N rows of K values of ggml type `type`: random blocks (scales in [-1, 1], some subnormal) or random F32 / F16 /
/// BF16 values in [-1, 1].
Matrix<ggml_byte> random_matrix(std::uint32_t type, std::int64_t N, std::int64_t K, std::uint32_t seed, double vs) {
  const quant::TypeInfo& t = quant::checked_type_info(type);
  std::vector<std::byte> bytes;
  if (quant::block_format(type) != nullptr) {
    bytes = test::random_blocks(static_cast<quant::BlockType>(type), N * K / t.block, seed, 1.0f, true);
  } else {
    bytes = test::random_float_rows(type, N, K, seed);
  }
  Matrix<ggml_byte> m;
  m.rows = N;
  m.cols = K;
  m.ggml_type = type;
  m.value_scale = vs;
  const std::int64_t rb = quant::row_bytes(type, K);
  m.data = Tensor<ggml_byte, 2>({N, rb});
  std::memcpy(m.data.data(), bytes.data(), bytes.size());
  return m;
}
Matrix<ggml_byte> on_device(const Matrix<ggml_byte>& m) {
  Matrix<ggml_byte> d = m;
  d.data = layers::upload(gpu(), Tensor<ggml_byte, 2>(m.data));
  return gpu().prepare(std::move(d));
}
template <class T, int R>
Tensor<T, R> dev(const Tensor<T, R>& h) {
  return layers::upload(gpu(), Tensor<T, R>(h));
}
template <class T, int R>
Tensor<T, R> random_tensor(const Shape<R>& shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor<T, R> t(shape);
  for (std::int64_t i = 0; i < t.size(); ++i) t.data()[i] = from_float<T>(nd(rng));
  return t;
}
/// Host f32 values of a runtime-typed matrix (the reference backend's decoding).
std::vector<float> decoded(const Matrix<ggml_byte>& m) {
  std::vector<float> f(static_cast<std::size_t>(m.rows * m.cols));
  for (std::int64_t r = 0; r < m.rows; ++r) {
    quant::dequantize_any(m.ggml_type, reinterpret_cast<const std::byte*>(m.data.data()) + r * m.storage_cols(),
                          f.data() + r * m.cols, m.cols);
  }
  quant::scale_values(f.data(), m.rows * m.cols, m.value_scale);
  return f;
}

/// y (device) against the reference product, element by element: |y - ref| <= (K + 8) 2^-24 sum_k |w x| (+ the
/// rounding of the output type and of the bias add).
template <class X, class Y>
void check_product(const Tensor<X, 2>& x, const Matrix<ggml_byte>& w, const Tensor<float, 1>& bias, const Tensor<Y, 2>& y,
                   const std::string& what) {
  INFO(what);
  reference::Backend ref;
  Tensor<Y, 2> want({x.dim(0), w.rows});
  ref.matmul(x.cview(), ref.prepare(Matrix<ggml_byte>(w)), want.view(), bias.cview());
  const std::vector<float> wf = decoded(w);
  const std::int64_t K = w.cols;
  double worst = 0;
  std::int64_t bad = 0;
  for (std::int64_t m = 0; m < x.dim(0); ++m) {
    for (std::int64_t n = 0; n < w.rows; ++n) {
      double mag = 0;
      for (std::int64_t k = 0; k < K; ++k) mag += std::fabs(double(wf[static_cast<std::size_t>(n * K + k)]) * to_float(x(m, k)));
      const double got = to_float(y(m, n)), exp = to_float(want(m, n));
      const double out_ulp = std::is_same_v<Y, float> ? 0x1p-24 : 0x1p-8;
      const double tol = (double(K) + 8) * 0x1p-24 * mag + out_ulp * (std::fabs(exp) + (bias.empty() ? 0.0 : std::fabs(bias(n))));
      const double err = std::fabs(got - exp);
      worst = std::max(worst, tol > 0 ? err / tol : err);
      if (!(err <= tol)) ++bad;
    }
  }
  std::printf("%-40s worst |err| / bound %.3f\n", what.c_str(), worst);
  CHECK(bad == 0);
}

const std::uint32_t kAllTypes[] = {0, 1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23};

}  // namespace

TEST_CASE("cuda: products with runtime-typed (ggml) matrices of every type", "[cuda][ggml]") {
  cuda::Backend& be = gpu();
  const std::int64_t N = 37, K = 512;
  for (const std::uint32_t type : kAllTypes) {
    const std::string name = quant::checked_type_info(type).name;
    for (const double vs : {1.0, 0.0883883476483184}) {
      const Matrix<ggml_byte> w = random_matrix(type, N, K, 11u + type, vs);
      const Matrix<ggml_byte> wd = on_device(w);
      const Tensor<float, 1> bias = random_tensor<float, 1>({N}, 5u);
      for (const std::int64_t M : {1, 3, 8, 9, 40}) {  // warp kernel up to 8 rows, dequantise + cuBLASLt beyond
        const Tensor<float, 2> x = random_tensor<float, 2>({M, K}, 100u + static_cast<std::uint32_t>(M));
        const Tensor<float, 2> xd = dev(x);
        const Tensor<float, 1> bd = dev(bias);
        Tensor<float, 2> y({M, N}, be.memory());
        be.matmul(xd.cview(), wd, y.view(), bd.cview());
        check_product(x, w, bias, layers::download(be, y),
                      name + " f32 M=" + std::to_string(M) + " value_scale=" + std::to_string(vs));
      }
      // bf16 activations and outputs take the tiled kernel above 8 rows.
      const Tensor<bf16, 2> xb = random_tensor<bf16, 2>({20, K}, 7u);
      const Tensor<bf16, 2> xbd = dev(xb);
      Tensor<bf16, 2> yb({20, N}, be.memory());
      be.matmul(xbd.cview(), wd, yb.view());
      check_product(xb, w, Tensor<float, 1>(), layers::download(be, yb), name + " bf16 M=20");
    }
  }
}

TEST_CASE("cuda: a runtime-typed matrix larger than one dequantised slice", "[cuda][ggml]") {
  cuda::Backend& be = gpu();
  // 4200 x 4096 f32 = 68.8 MB: two slices of rows (64 MiB at most each).
  const std::int64_t N = 4200, K = 4096, M = 12;
  const Matrix<ggml_byte> w = random_matrix(12 /* Q4_K */, N, K, 3u, 1.0);
  const Tensor<float, 2> x = random_tensor<float, 2>({M, K}, 9u);
  const Tensor<float, 2> xd = dev(x);
  const Matrix<ggml_byte> wd = on_device(w);
  Tensor<float, 2> y({M, N}, be.memory());
  be.matmul(xd.cview(), wd, y.view());
  check_product(x, w, Tensor<float, 1>(), layers::download(be, y), "Q4_K 4200x4096, M=12 (two slices)");
}

TEST_CASE("cuda: embedding rows and per-head products of runtime-typed matrices", "[cuda][ggml]") {
  cuda::Backend& be = gpu();
  reference::Backend ref;
  for (const std::uint32_t type : kAllTypes) {
    const std::string name = quant::checked_type_info(type).name;
    INFO(name);
    const Matrix<ggml_byte> table = random_matrix(type, 50, 256, 21u + type, 1.0);
    const Tensor<std::int32_t, 1> ids = [] {
      Tensor<std::int32_t, 1> t({6});
      const std::int32_t v[6] = {0, 49, 7, 7, 23, 1};
      std::copy(v, v + 6, t.data());
      return t;
    }();
    const Tensor<std::int32_t, 1> ids_d = dev(ids);
    Tensor<float, 2> y({6, 256}, be.memory());
    be.embed(on_device(table), ids_d.cview(), y.view());
    const Tensor<float, 2> got = layers::download(be, y);
    const std::vector<float> f = decoded(table);
    std::int64_t diff = 0;
    for (std::int64_t m = 0; m < 6; ++m) {
      for (std::int64_t i = 0; i < 256; ++i) diff += got(m, i) != f[static_cast<std::size_t>(ids(m) * 256 + i)];
    }
    CHECK(diff == 0);
    // Per-head products: 4 heads of 32 rows of a [128, 256] matrix, straight and transposed.
    const Matrix<ggml_byte> w = random_matrix(type, 128, 256, 31u + type, 1.0);
    for (const bool transpose : {false, true}) {
      const std::int64_t Kx = transpose ? 32 : 256, Ny = transpose ? 256 : 32;
      const Tensor<float, 3> x = random_tensor<float, 3>({5, 4, Kx}, 13u);
      Tensor<float, 3> want({5, 4, Ny});
      ref.head_matmul(x.cview(), ref.prepare(Matrix<ggml_byte>(w)), 32, 0, transpose, want.view());
      const Tensor<float, 3> xd = dev(x);
      Tensor<float, 3> yd({5, 4, Ny}, be.memory());
      be.head_matmul(xd.cview(), on_device(w), 32, 0, transpose, yd.view());
      const Tensor<float, 3> hy = layers::download(be, yd);
      double worst = 0;
      for (std::int64_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::fabs(double(hy.data()[i]) - want.data()[i]) / (1.0 + std::fabs(want.data()[i])));
      }
      CHECK(worst <= 300 * 0x1p-24 * 16);  // |x w| <= ~16 per term here; K <= 256 terms
    }
  }
}

TEST_CASE("cuda: a runtime-typed matrix of a type the kernels do not decode is refused", "[cuda][ggml]") {
  cuda::Backend& be = gpu();
  Matrix<ggml_byte> m;
  m.rows = 2;
  m.cols = 32;
  m.ggml_type = 39;  // MXFP4
  m.data = Tensor<ggml_byte, 2>({2, 17}, be.memory());
  CHECK_THROWS_WITH(be.prepare(m), Catch::Contains("tensor type 39"));
}

TEST_CASE("cuda: llama.cpp-quantised GGUF files computed from their blocks", "[cuda][ggml][gguf]") {
  using GgmlLlama = models::Transformer<Policy<cuda::Backend, ggml_byte, float>, layers::LlamaDecoderLayer>;
  gpu();
  const std::string dir = test::fixtures_dir() + "/ggml_quants";
  const std::vector<std::int32_t> tokens = {1, 42, 300, 7, 511, 128, 64, 3};  // as in quant_model_fixtures.py
  for (const char* type : {"Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0", "IQ4_XS", "Q3_K_M", "Q2_K"}) {
    INFO(type);
    const std::string path = dir + "/tiny-" + type + ".gguf";
    const Config cfg = io::read_weights_config(path).value();
    io::LoadedWeights lw = io::load_weights(path, cfg, true);
    REQUIRE(lw.file_weight_type == "ggml");
    GgmlLlama model(cfg, cuda::Backend());
    model.load(lw.tensors);
    // The device holds the file's matrices as the file has them: no F32 / F16 matrix, the file's bytes in all.
    test::GgmlTypeBytes tb;
    model.visit(tb);
    CHECK(tb.bytes.count(quant::kTypeF32) == 0);
    CHECK(tb.bytes.count(quant::kTypeF16) == 0);
    CHECK(tb.total() == test::gguf_matrix_bytes(path));
    const AnyTensor deq = test::npy(dir + "/llama-" + type + "-deq.npy");
    // One sequence of 8 tokens (the warp kernel), then the same sequence twice (16 rows: dequantise + cuBLASLt).
    for (const std::int64_t B : {1, 2}) {
      Tensor<std::int32_t, 2> ids({B, 8});
      for (std::int64_t b = 0; b < B; ++b) std::copy(tokens.begin(), tokens.end(), ids.data() + b * 8);
      const Tensor<float, 3> l = model.forward(ids);
      double e = 0;
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t i = 0; i < 8 * 512; ++i) e = std::max(e, std::fabs(double(l.data()[b * 8 * 512 + i]) - deq.element(i)));
      }
      std::printf("%-7s cuda, %lld sequence(s): max |ours - llama.cpp(dequantised F32)| %.3g\n", type,
                  static_cast<long long>(B), e);
      CHECK(e <= 1e-4);
    }
    // Cached decoding, one token a step, against the same oracle.
    auto cache = model.make_cache(1, 8);
    double e = 0;
    for (std::int64_t t = 0; t < 8; ++t) {
      Tensor<std::int32_t, 2> one({1, 1});
      one.data()[0] = tokens[static_cast<std::size_t>(t)];
      const Tensor<float, 3> l = model.forward(one, cache);
      for (std::int64_t i = 0; i < 512; ++i) e = std::max(e, std::fabs(double(l.data()[i]) - deq.element(t * 512 + i)));
    }
    CHECK(e <= 1e-4);
  }
}
