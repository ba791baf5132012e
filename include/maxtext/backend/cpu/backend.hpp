// backend/cpu/backend.hpp: the CPU backend. Matrix products through Eigen (f32) or converted panels (bf16, f16,
// Q8_0 weights; bf16 activations); element-wise and reduction kernels vectorised with xsimd; threads via OpenMP.
// Semantics of every operation: backend/concepts.hpp and ../shared/spec (cited per function).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "maxtext/core/macros.hpp"

// Eigen only where the kernel entry points below are defined: with MAXTEXT_SEPARATE_KERNELS (this project's programs)
// only the kernels library parses it, not every unit that includes the backend.
#if MAXTEXT_KERNEL_DEFINITIONS
#include <Eigen/Core>
#endif

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/common/math.hpp"
#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/cpu/attention.hpp"
#include "maxtext/backend/cpu/elementwise.hpp"
#include "maxtext/backend/cpu/gemm.hpp"
#include "maxtext/backend/cpu/vec.hpp"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/mapped_pages.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cpu {

struct Options {
  /// Worker threads for matrix products and kernels; 0 = all cores (OpenMP's default).
  int threads = 0;
  /// Q8_0 weights only, opt-in: quantise the activations of each product to 8 bits per 32-element block (llama.cpp's
  /// Q8_0 rule) and multiply with integer dot products (AVX512-VNNI vpdpbusd where compiled in, exact int32 sums
  /// otherwise too). Faster on one core, and no longer the product of the dequantised weights with the exact
  /// activations: each block adds a relative error of up to 1/254 of its largest activation (docs/numerics.md).
  bool int8_activations = false;
  /// Gated DeltaNet prompts of 16 tokens or more in the chunked form (gdn_chunk_prefill); false = the recurrence
  /// token by token everywhere (the same math; for comparisons, bench/qwen3_next_decode.cpp --gdn-chunked 0).
  bool gdn_chunked = true;
  /// Rows made per step when a copied weight is packed as it is copied (Backend::pack_rows, e.g. a MaxText kernel
  /// transposed at load): about this many bytes of rows exist at once beside the panels.
  std::size_t pack_chunk_bytes = std::size_t{16} << 20;
};

/// c[M, N] (row stride ldc) = a[M, K] . b, b = B[N, K]^T (transpose_b) or B[K, N], in f32 through Eigen on the calling
/// thread (for products inside parallel_rows); a's, b's rows have strides lda, ldb.
MAXTEXT_KERNEL_API void eigen_matmul_f32(const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                         bool transpose_b, float* c, std::int64_t ldc, std::int64_t M, std::int64_t N,
                                         std::int64_t K);

/// y[M, N] (row stride ldy) = x[M, K] . W[N, K]^T in f32 through Eigen, on `threads` OpenMP threads: the product of
/// unpacked f32 weights. One Eigen product is a large instantiation, so it is a kernel entry point (compiled once with
/// MAXTEXT_SEPARATE_KERNELS, core/macros.hpp).
MAXTEXT_KERNEL_API void eigen_gemm_f32(int threads, const float* x, std::int64_t ldx, const float* w, std::int64_t ldw,
                                       float* y, std::int64_t ldy, std::int64_t M, std::int64_t N, std::int64_t K);
#if MAXTEXT_KERNEL_DEFINITIONS
MAXTEXT_KERNEL_API void eigen_gemm_f32(int threads, const float* x, std::int64_t ldx, const float* w, std::int64_t ldw,
                                       float* y, std::int64_t ldy, std::int64_t M, std::int64_t N, std::int64_t K) {
  // Eigen takes its thread count from omp_get_max_threads(), an OpenMP setting of the calling thread; set it for
  // this call only. (Eigen::setNbThreads would write a process-wide global: a data race when models with their own
  // thread counts run on several threads.) The product is eigen_matmul_f32's, so Eigen's is instantiated once.
#if defined(_OPENMP)
  const int outer = omp_get_max_threads();
  omp_set_num_threads(threads);
  eigen_matmul_f32(x, ldx, w, ldw, /*transpose_b=*/true, y, ldy, M, N, K);
  omp_set_num_threads(outer);
#else
  (void)threads;
  eigen_matmul_f32(x, ldx, w, ldw, /*transpose_b=*/true, y, ldy, M, N, K);
#endif
}
#endif

#if MAXTEXT_KERNEL_DEFINITIONS
MAXTEXT_KERNEL_API void eigen_matmul_f32(const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                         bool transpose_b, float* c, std::int64_t ldc, std::int64_t M, std::int64_t N,
                                         std::int64_t K) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  Eigen::Map<RowMat, 0, Eigen::OuterStride<>> cm(c, M, N, Eigen::OuterStride<>(ldc));
  CMap am(a, M, K, Eigen::OuterStride<>(lda));
  if (transpose_b) {
    cm.noalias() = am * CMap(b, N, K, Eigen::OuterStride<>(ldb)).transpose();
  } else {
    cm.noalias() = am * CMap(b, K, N, Eigen::OuterStride<>(ldb));
  }
}
#endif

/// The scratch rows of one chunk of the gated delta rule (Backend::gdn_chunk_prefill), all f32 and row-major:
/// qk_rows [2L, Dk] (normalised q_t, then k_t), yx [2L, Dv], pairs [2L, L], u [L, Dv] (v_t on entry), beta, cum, e [L].
struct GdnChunkRows {
  float* qk_rows;
  float* yx;
  float* pairs;
  float* u;
  const float* beta;
  const float* cum;
  float* e;
};

/// The products of one chunk of L tokens of one value head (semantics: Backend::gdn_chunk_prefill's comment): on exit,
/// the rows [0, L) of yx hold the outputs o_t and S [Dk, Dv] the state after the chunk.
MAXTEXT_KERNEL_API void gdn_chunk_products(const GdnChunkRows& c, std::int64_t L, std::int64_t Dk, std::int64_t Dv,
                                           float* S);
#if MAXTEXT_KERNEL_DEFINITIONS
MAXTEXT_KERNEL_API void gdn_chunk_products(const GdnChunkRows& c, std::int64_t L, std::int64_t Dk, std::int64_t Dv,
                                           float* S) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Map = Eigen::Map<Mat>;
  Map QKr(c.qk_rows, 2 * L, Dk), YX(c.yx, 2 * L, Dv), PP(c.pairs, 2 * L, L), U(c.u, L, Dv), S0(S, Dk, Dv);
  auto K = QKr.bottomRows(L);
  auto O = YX.topRows(L);
  auto X = YX.bottomRows(L);
  auto QK = PP.topRows(L);
  auto KK = PP.bottomRows(L);
  YX.noalias() = QKr * S0;               // rows: S0^T q_t, then S0^T k_t
  PP.noalias() = QKr * K.transpose();    // rows: q_t . k_s, then k_t . k_s
  constexpr std::int64_t w = static_cast<std::int64_t>(vec::W);
  float* e = c.e;
  const float* cum = c.cum;
  for (std::int64_t t = 0; t < L; ++t) {
    const float ct = cum[t], g = std::exp(ct), bta = c.beta[t];
    U.row(t) = bta * (U.row(t) - g * X.row(t));
    O.row(t) *= g;
    // e[s] = e^{c_t - c_s} for s <= t (vectorised), then the pair coefficients of row t.
    std::int64_t s2 = 0;
    for (; s2 + w <= t + 1; s2 += w) {
      xsimd::exp(vec::fbatch(ct) - vec::fbatch::load_unaligned(cum + s2)).store_unaligned(e + s2);
    }
    for (; s2 <= t; ++s2) e[s2] = std::exp(ct - cum[s2]);
    float* kk = &KK(t, 0);
    float* qk = &QK(t, 0);
    for (s2 = 0; s2 < t; ++s2) kk[s2] *= bta * e[s2];
    for (s2 = 0; s2 <= t; ++s2) qk[s2] *= e[s2];
    for (s2 = t; s2 < L; ++s2) kk[s2] = 0.0f;
    for (s2 = t + 1; s2 < L; ++s2) qk[s2] = 0.0f;
    if (t > 0) U.row(t).noalias() -= KK.row(t).head(t) * U.topRows(t);  // forward substitution
  }
  O.noalias() += QK * U;
  // S <- e^{c_L} S0 + sum_s (e^{c_L - c_s} k_s) u_s^T
  const float cl = cum[L - 1];
  for (std::int64_t t = 0; t < L; ++t) K.row(t) *= std::exp(cl - cum[t]);
  S0 *= std::exp(cl);
  S0.noalias() += K.transpose() * U;
}
#endif

class Backend {
 public:
  static constexpr const char* name = "cpu";

  explicit Backend(Options opt = {})
      : int8_activations_(opt.int8_activations), gdn_chunked_(opt.gdn_chunked), pack_chunk_bytes_(opt.pack_chunk_bytes) {
    set_threads(opt.threads);
  }

  /// Products read runtime-typed matrices (ggml_byte), see backend_has_runtime_typed_weights.
  static constexpr bool runtime_typed_weights = true;

  // ---- memory ---------------------------------------------------------------------------------------------
  const std::shared_ptr<MemoryResource>& memory() const { return host_memory(); }
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind) const {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() const {}

  int threads() const { return threads_; }
  /// Whether Q8_0 weights are prepared for 8-bit activations (Options::int8_activations).
  bool int8_activations() const { return int8_activations_; }
  void set_threads(int n) {
#if defined(_OPENMP)
    threads_ = n > 0 ? n : omp_get_num_procs();
#else
    threads_ = 1;
    (void)n;
#endif
  }

  /// Lay a weight out for this backend (once, at load): f32, bf16, fp16 and Q8_0 matrices get a panel-packed copy for
  /// the matrix-product kernels (backend/cpu/gemm.hpp); `data` keeps the out-major layout for row gathers and export.
  /// Where `data` is a view of a mapped weights file, the pages packing read are dropped from the resident set
  /// (core/mapped_pages.hpp): the packed panels are then the one copy in memory, and the rare reader of `data`
  /// faults what it reads back in from the page cache.
  /// Runtime-typed matrices (W = ggml_byte: a GGUF file's own types, blocks such as Q4_K or Q8_0 and plain F32,
  /// F16 or BF16 rows alike) are not copied: their kernels read the rows where they lie (gemm::wrap_ggml), so a
  /// mapped file's weights are the one copy in memory.
  template <class W>
  Matrix<W> prepare(Matrix<W> m) const {
    if constexpr (std::is_same_v<W, ggml_byte>) {
      if (m.empty() || m.packed) return m;
      MAXTEXT_CHECK(m.data.view().is_contiguous(), UnsupportedError, "[cpu] runtime-typed matrices must be contiguous");
      m.packed = gemm::wrap_ggml(reinterpret_cast<const std::byte*>(m.data.data()),
                                 static_cast<std::size_t>(m.storage_cols()), m.ggml_type, m.rows, m.cols,
                                 m.data.holder(), int8_activations_, m.value_scale);
      return m;
    }
    if constexpr (gemm::packable<W>) {
      if (!m.empty() && !m.packed && m.data.view().is_contiguous()) {
        m.packed = gemm::pack(m.data.data(), m.rows, m.cols, int8_activations_, threads_);
        drop_mapped_pages(m.data.data(), static_cast<std::size_t>(m.data.size()) * sizeof(W));
      }
    }
    return m;
  }

  /// After prepare(): release the out-major copy of a packed matrix when it is a copy the loader made and nothing
  /// else holds (a transposed MaxText kernel, a dtype conversion, a rank's slice of columns): the panels are then the
  /// one copy of the weight in memory. A view of a mapped file costs nothing to keep (prepare handed its pages back),
  /// and memory another parameter shares (a table that is also a head, stacked experts) would not be freed: both
  /// are kept. Row reads (head_matmul) and unpacked() rebuild rows from the panels, exactly.
  template <class W>
  void release_rows(Matrix<W>& m) const {
    if constexpr (gemm::packable<W>) {
      if (m.packed && !m.data.empty() && m.data.host_accessible() && m.data.holder().use_count() == 1 &&
          !in_readonly_mapping(m.data.data())) {
        m.data = Tensor<W, 2>();
      }
    }
  }
  /// A prepared N x K matrix whose out-major rows `rows` makes a chunk at a time (rows [r0, r1), r0 and r1 multiples
  /// of `granule` or r1 = N), packed as they come: the loader's way to lay out a weight it must copy (a transposed
  /// MaxText kernel, a dtype conversion) without holding the copy whole beside the panels. The result is what
  /// prepare() then release_rows() make of the whole copy, byte for byte: panels only, rows rebuilt on demand.
  template <class W>
    requires gemm::packable<W>
  Matrix<W> pack_rows(std::int64_t N, std::int64_t K, std::int64_t granule, const gemm::RowSource<W>& rows) const {
    Matrix<W> m;
    m.rows = N;
    m.cols = K;
    m.packed = gemm::pack_by_rows(rows, N, K, int8_activations_, threads_, granule, pack_chunk_bytes_);
    return m;
  }
  /// The out-major rows of `m`, rebuilt from its panels when release_rows let the copy go (exact).
  template <class W>
  Tensor<W, 2> unpacked(const Matrix<W>& m) const {
    if (!m.data.empty() || !m.packed) return m.data;
    Tensor<W, 2> out({m.rows, m.storage_cols()});
    if constexpr (gemm::packable<W>) {
      const auto& p = *static_cast<const gemm::Packed*>(m.packed.get());
      for (std::int64_t r = 0; r < m.rows; ++r) gemm::unpack_row(p, r, out.data() + r * m.storage_cols());
    }
    return out;
  }

  // ---- linear algebra -------------------------------------------------------------------------------------
  /// y[M,N] = x[M,K] . W[N,K]^T, accumulated in f32 and rounded once to Y; with a bias, y = round(round(x.W) + b)
  /// (MaxText DenseGeneral: product in dtype, bias added after). x and y rows must be contiguous.
  template <class X, class W, class Y, class Bias = Y>
  void matmul(View<const X, 2> x, const Matrix<W>& w, View<Y, 2> y, View<const Bias, 1> bias = {}) const {
    const std::int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    MAXTEXT_DASSERT(K == w.cols && y.dim(0) == M && y.dim(1) == N);
    MAXTEXT_DASSERT(x.rows_contiguous() && y.rows_contiguous());
    MAXTEXT_DASSERT(bias.empty() || bias.dim(0) == N);
    if (M == 0 || N == 0) return;
    if constexpr ((gemm::packable<W> || std::is_same_v<W, ggml_byte>) &&
                  (std::is_same_v<X, float> || std::is_same_v<X, bf16>)) {
      if (w.packed && (bias.empty() || bias.stride(0) == 1)) {
        gemm::matmul(*static_cast<const gemm::Packed*>(w.packed.get()), x.data(), x.stride(0), M, y.data(),
                     y.stride(0), bias.empty() ? static_cast<const Bias*>(nullptr) : bias.data(), threads_);
        return;
      }
      if (w.packed && w.data.empty()) {  // released rows and a strided bias: the product, then the bias (one rounding each)
        gemm::matmul(*static_cast<const gemm::Packed*>(w.packed.get()), x.data(), x.stride(0), M, y.data(),
                     y.stride(0), static_cast<const Bias*>(nullptr), threads_);
        add_bias(y, bias);
        return;
      }
    }
    if constexpr (gemm::packable<W>) {
      MAXTEXT_CHECK(!w.data.empty(), UnsupportedError, "[cpu] matmul: a ", dtype_name(dtype_of<W>), " weight whose "
                    "rows were released after packing takes float or bfloat16 activations only");
    }
    if constexpr (std::is_same_v<X, float> && std::is_same_v<W, float> && std::is_same_v<Y, float>) {
      if (M >= kGemmMinRows) {
        gemm_f32(x.data(), x.stride(0), w.data.data(), K, y.data(), y.stride(0), M, N, K);
        if (!bias.empty()) add_bias(y, bias);
        return;
      }
    }
    if (M < kGemmMinRows) {
      gemv_rows(x, w, y, bias);
    } else {
      gemm_converted(x, w, y, bias);
    }
  }

  // ---- normalisation --------------------------------------------------------------------------------------
  /// RMSNorm over the last axis (spec norms-dense-mlp.md): r = x * rsqrt(mean(x^2) + eps) in f32, rounded to A;
  /// if scale: y = round(r * round(scale + offset)). y may alias x.
  template <class A, class S>
  void rms_norm(View<const A, 2> x, View<const S, 1> scale, float eps, float scale_offset, View<A, 2> y) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    parallel_rows(M, D, [&](std::int64_t r0, std::int64_t r1) {
      auto [buf, sc] = thread_rows<2>(D);
      if (!scale.empty()) {
        for (std::int64_t i = 0; i < D; ++i) sc[i] = round_to<A>(to_float(scale(i)) + scale_offset);
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        vec::to_f32(&x(r, 0), buf.data(), D);
        const float ms = vec::dot(buf.data(), buf.data(), D) / static_cast<float>(D);
        const float inv = 1.0f / std::sqrt(ms + eps);
        std::int64_t i = 0;
        constexpr std::int64_t w = static_cast<std::int64_t>(vec::W);
        const vec::fbatch iv(inv);
        for (; i + w <= D; i += w) {
          vec::fbatch v = vec::round<A>(vec::fbatch::load_unaligned(&buf[i]) * iv);
          if (!scale.empty()) v = vec::round<A>(v * vec::fbatch::load_unaligned(&sc[i]));
          v.store_unaligned(&buf[i]);
        }
        for (; i < D; ++i) {
          float v = round_to<A>(buf[i] * inv);
          if (!scale.empty()) v = round_to<A>(v * sc[i]);
          buf[i] = v;
        }
        vec::from_f32(buf.data(), &y(r, 0), D);
      }
    });
  }

  /// Gpt3LayerNorm (spec norms-dense-mlp.md): statistics in the input dtype (two-pass, biased variance),
  /// y = (x - mean) * rsqrt(var + eps) * (scale + 1) + bias, each step rounded to A. With stats_in_f32
  /// (reductions_in_fp32) the normalisation runs in f32 and only its result is rounded to A. y may alias x.
  template <class A>
  void layer_norm(View<const A, 2> x, View<const A, 1> scale, View<const A, 1> bias, float eps, View<A, 2> y,
                  bool stats_in_f32 = false) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    parallel_rows(M, D, [&](std::int64_t r0, std::int64_t r1) {
      auto [buf] = thread_rows<1>(D);
      auto rs = [&](float v) { return stats_in_f32 ? v : round_to<A>(v); };  // rounding of the statistics path
      for (std::int64_t r = r0; r < r1; ++r) {
        vec::to_f32(&x(r, 0), buf.data(), D);
        double s = 0;  // f32 values summed exactly enough: a double accumulator keeps the mean to ~1 ulp
        for (std::int64_t i = 0; i < D; ++i) s += buf[i];
        const float mean = rs(static_cast<float>(s / static_cast<double>(D)));
        double v = 0;
        for (std::int64_t i = 0; i < D; ++i) {
          const float c = rs(buf[i] - mean);
          v += static_cast<double>(rs(c * c));
        }
        const float var = rs(static_cast<float>(v / static_cast<double>(D)));
        const float inv = rs(1.0f / std::sqrt(rs(var + eps)));
        for (std::int64_t i = 0; i < D; ++i) {
          float o = round_to<A>(rs(buf[i] - mean) * inv);
          o = round_to<A>(o * round_to<A>(to_float(scale(i)) + 1.0f));
          if (!bias.empty()) o = round_to<A>(o + to_float(bias(i)));
          buf[i] = o;
        }
        vec::from_f32(buf.data(), &y(r, 0), D);
      }
    });
  }

  // ---- element-wise ---------------------------------------------------------------------------------------
  /// y = round(a + b). y may alias a or b.
  template <class A>
  void add(View<const A, 2> a, View<const A, 2> b, View<A, 2> y) const {
    const std::int64_t M = a.dim(0), D = a.dim(1);
    parallel_rows(M, D, [&](std::int64_t r0, std::int64_t r1) {
      auto [fa, fb] = thread_rows<2>(D);
      for (std::int64_t r = r0; r < r1; ++r) {
        if constexpr (std::is_same_v<A, float>) {
          const float* pa = &a(r, 0);
          const float* pb = &b(r, 0);
          float* py = &y(r, 0);
          std::int64_t i = 0;
          constexpr std::int64_t w = static_cast<std::int64_t>(vec::W);
          for (; i + w <= D; i += w) {
            (vec::fbatch::load_unaligned(pa + i) + vec::fbatch::load_unaligned(pb + i)).store_unaligned(py + i);
          }
          for (; i < D; ++i) py[i] = pa[i] + pb[i];
        } else {
          vec::to_f32(&a(r, 0), fa.data(), D);
          vec::to_f32(&b(r, 0), fb.data(), D);
          for (std::int64_t i = 0; i < D; ++i) fa[i] += fb[i];
          vec::from_f32(fa.data(), &y(r, 0), D);
        }
      }
    });
  }

  /// y = round(round(act0(h0)) * round(act1(h1))); with h1 empty, y = round(act0(h0)). MaxText MlpBlock step 2-3.
  /// With round_each = false (activations_in_float32) the activations and product stay in f32 and only y is
  /// rounded. y may alias h0.
  template <class A>
  void activation(View<const A, 2> h0, Activation a0, View<const A, 2> h1, Activation a1, View<A, 2> y,
                  bool round_each = true) const {
    const std::int64_t M = h0.dim(0), F = h0.dim(1);
    parallel_rows(M, F * 8, [&](std::int64_t r0, std::int64_t r1) {
      auto [f0, f1] = thread_rows<2>(F);
      for (std::int64_t r = r0; r < r1; ++r) {
        vec::to_f32(&h0(r, 0), f0.data(), F);
        if (!h1.empty()) vec::to_f32(&h1(r, 0), f1.data(), F);
        elementwise::glu_row<A>(f0.data(), a0, h1.empty() ? nullptr : f1.data(), a1, F, round_each);
        vec::from_f32(f0.data(), &y(r, 0), F);
      }
    });
  }

  /// The clamped SwiGLUs (gpt_oss, or DeepSeek-V4's swiglu form): y = math::clamped_swiglu(h0, h1, act0,
  /// round_A(alpha), limit, form) per element, each MaxText op rounded to A (reference backend: the definition).
  /// y may alias h0.
  template <class A>
  void clamped_glu(View<const A, 2> h0, View<const A, 2> h1, Activation a0, float alpha, float limit, View<A, 2> y,
                   ClampedGluForm form = ClampedGluForm::gpt_oss) const {
    const std::int64_t M = h0.dim(0), F = h0.dim(1);
    const float al = round_to<A>(alpha);
    const auto r = [](float v) { return round_to<A>(v); };
    parallel_rows(M, F * 8, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t m = r0; m < r1; ++m) {
        for (std::int64_t i = 0; i < F; ++i) {
          y(m, i) = from_float<A>(math::clamped_swiglu(to_float(h0(m, i)), to_float(h1(m, i)), a0, al, limit, r, form));
        }
      }
    });
  }

  /// x = round(x * factor) (or x / factor with divide=true, as GPT-3's `query /= sqrt(head_dim)`); factor is
  /// first rounded to A, like a scalar cast to dtype. x is [M, D] with contiguous rows.
  template <class A>
  void scale(View<A, 2> x, float factor, bool divide = false) const {
    const float f = round_to<A>(factor);
    const std::int64_t M = x.dim(0), D = x.dim(1);
    parallel_rows(M, D, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        A* p = &x(r, 0);
        for (std::int64_t i = 0; i < D; ++i) {
          const float v = to_float(p[i]);
          p[i] = from_float<A>(divide ? v / f : v * f);
        }
      }
    });
  }

  /// x[m, :] = round(x[m, :] * round(act(g[m, 0]))) (reference backend: the definition); g is [M, 1].
  template <class A, class G>
  void scale_rows(View<A, 2> x, View<const G, 2> g, Activation act) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    parallel_rows(M, D, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const float f = round_to<A>(math::activate(act, to_float(g(r, 0))));
        A* p = &x(r, 0);
        for (std::int64_t i = 0; i < D; ++i) p[i] = from_float<A>(to_float(p[i]) * f);
      }
    });
  }

  /// x = round(cap * tanh(x / cap)) (final logit soft cap).
  template <class A>
  void soft_cap(View<A, 2> x, float cap) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    parallel_rows(M, D * 16, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        A* p = &x(r, 0);
        for (std::int64_t i = 0; i < D; ++i) p[i] = from_float<A>(math::soft_cap(to_float(p[i]), cap));
      }
    });
  }

  /// y = convert(x) elementwise (e.g. logits to f32).
  template <class A, class Y>
  void convert(View<const A, 2> x, View<Y, 2> y) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    for (std::int64_t r = 0; r < M; ++r) {
      for (std::int64_t i = 0; i < D; ++i) y(r, i) = from_float<Y>(to_float(x(r, i)));
    }
  }

  /// Strided copy, any rank (dst and src in backend memory, same shape).
  template <class T, int R>
  void copy(View<const T, R> src, View<T, R> dst) const {
    MAXTEXT_DASSERT(src.shape() == dst.shape());
    if constexpr (R == 1) {
      for (std::int64_t i = 0; i < src.dim(0); ++i) dst(i) = src(i);
    } else {
      for (std::int64_t i = 0; i < src.dim(0); ++i) copy<T, R - 1>(src[i], dst[i]);
    }
  }

  // ---- embedding ------------------------------------------------------------------------------------------
  /// y[m, :] = round_A(table[ids[m], :]). Ids were range-checked by the caller.
  template <class W, class A>
  void embed(const Matrix<W>& table, View<const std::int32_t, 1> ids, View<A, 2> y) const {
    const std::int64_t M = ids.dim(0), D = table.cols;
    parallel_rows(M, D, [&](std::int64_t r0, std::int64_t r1) {
      auto [buf] = thread_rows<1>(D);
      for (std::int64_t r = r0; r < r1; ++r) {
        row_to_f32(table, ids(r), buf.data());
        vec::from_f32(buf.data(), &y(r, 0), D);
      }
    });
  }

  // ---- rotary ---------------------------------------------------------------------------------------------
  /// Rotate x [M, heads, head_dim] in place at positions pos [M] with a precomputed table (spec rope.md).
  template <class A>
  void rotary(View<A, 3> x, View<const std::int32_t, 1> pos, const RotaryTable& t) const {
    const std::int64_t M = x.dim(0), H = x.dim(1), d = x.dim(2), r = t.rot_dims, half = r / 2;
    MAXTEXT_DASSERT(r <= d && r % 2 == 0);
    parallel_rows(M, H * d * 4, [&](std::int64_t m0, std::int64_t m1) {
      auto [in, c, s, out] = thread_rows<4>(r);
      for (std::int64_t m = m0; m < m1; ++m) {
        const std::int64_t p = pos(m);
        for (std::int64_t i = 0; i < half; ++i) {
          c[i] = t.cos(p, i);
          s[i] = t.sin(p, i);
          if (t.round_sincos_to_input) {
            c[i] = round_to<A>(c[i]);
            s[i] = round_to<A>(s[i]);
          }
        }
        for (std::int64_t h = 0; h < H; ++h) {
          A* xp = &x(m, h, 0);
          vec::to_f32(xp, in.data(), r);
          switch (t.layout) {
            case RopeLayout::half_split:
              for (std::int64_t i = 0; i < half; ++i) {
                const float a = in[i], b = in[i + half];
                if (t.round_sincos_to_input) {  // computed in the input dtype: each product and the sum rounded
                  out[i] = round_to<A>(round_to<A>(a * c[i]) - round_to<A>(b * s[i]));
                  out[i + half] = round_to<A>(round_to<A>(b * c[i]) + round_to<A>(a * s[i]));
                } else {
                  out[i] = a * c[i] - b * s[i];
                  out[i + half] = b * c[i] + a * s[i];
                }
              }
              break;
            case RopeLayout::interleaved:
              for (std::int64_t i = 0; i < half; ++i) {
                const float a = in[2 * i], b = in[2 * i + 1];
                out[2 * i] = a * c[i] - b * s[i];
                out[2 * i + 1] = b * c[i] + a * s[i];
              }
              break;
            case RopeLayout::interleaved_to_halves:
              for (std::int64_t i = 0; i < half; ++i) {
                const float a = in[2 * i], b = in[2 * i + 1];
                out[i] = a * c[i] - b * s[i];
                out[i + half] = a * s[i] + b * c[i];
              }
              break;
          }
          if (t.post_scale != 1.0f) {
            for (std::int64_t i = 0; i < r; ++i) out[i] *= t.post_scale;
          }
          vec::from_f32(out.data(), xp, r);
        }
      }
    });
  }

  // ---- attention ------------------------------------------------------------------------------------------
  /// MaxText AttentionOp (spec attention.md §1-2) with an online softmax over key blocks (no [T, S] matrix):
  /// out[b,t,n,:] = sum_s e^(l_s - m) v[b,s,n/G,:] / (sum_s e^(l_s - m) + sink term), l = q.k (no scaling),
  /// masked keys removed. A row with every key masked averages all kv_len keys (MaxText's finite mask value);
  /// with sinks it is 0. q [B,T,N,Dq], k [B,S,K,Dq], v [B,S,K,Dv], out [B,T,N,Dv]; rows contiguous. The cache
  /// type KV is A, or a narrower float type (Policy's KV: keys and values as the cache holds them, read as f32).
  template <class A, class KV>
  void attention(View<const A, 4> q, View<const KV, 4> k, View<const KV, 4> v, const AttentionMask& mask,
                 const AttentionOptions& opt, View<const A, 1> sinks, View<A, 4> out) const {
    attn::attention(threads_, q, k, v, mask, opt, sinks, out);  // backend/cpu/attention.hpp
  }

  // ---- row reductions ------------------------------------------------------------------------------------
  /// y = softmax(x) over the last axis, in f32 (max subtracted), rounded once to Y. y may alias x.
  template <class X, class Y>
  void softmax(View<const X, 2> x, View<Y, 2> y) const {
    const std::int64_t M = x.dim(0), D = x.dim(1);
    parallel_rows(M, D * 16, [&](std::int64_t r0, std::int64_t r1) {
      std::vector<float> buf(static_cast<std::size_t>(D));
      for (std::int64_t r = r0; r < r1; ++r) {
        vec::to_f32(&x(r, 0), buf.data(), D);
        float mx = -std::numeric_limits<float>::infinity();
        for (float v : buf) mx = std::max(mx, v);
        float sum = 0.0f;
        for (float& v : buf) sum += (v = std::exp(v - mx));
        for (float& v : buf) v /= sum;
        vec::from_f32(buf.data(), &y(r, 0), D);
      }
    });
  }

  /// Draw one token per row of logits [B, V] by the SampleOptions rule with the row's uniform u[b] in [0, 1)
  /// (u may be empty for temperature 0). ids [B]; a row containing NaN gives -1.
  void sample(View<const float, 2> logits, const SampleOptions& o, View<const float, 1> u,
              View<std::int32_t, 1> ids) const {
    const std::int64_t Bn = logits.dim(0), V = logits.dim(1);
    std::vector<std::int32_t> idx;
    std::vector<double> prob;
    for (std::int64_t b = 0; b < Bn; ++b) {
      const float* l = &logits(b, 0);
      if (std::any_of(l, l + V, [](float v) { return std::isnan(v); })) {
        ids(b) = -1;
        continue;
      }
      if (o.temperature == 0.0f) {
        ids(b) = static_cast<std::int32_t>(std::max_element(l, l + V) - l);  // first maximum: lowest id on ties
        continue;
      }
      idx.resize(static_cast<std::size_t>(V));
      for (std::int64_t i = 0; i < V; ++i) idx[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
      const std::int64_t k = (o.top_k > 0 && o.top_k < V) ? o.top_k : V;
      auto before = [&](std::int32_t a, std::int32_t c) { return l[a] > l[c] || (l[a] == l[c] && a < c); };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
      prob.resize(static_cast<std::size_t>(k));
      const double mx = l[idx[0]];
      double total = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        prob[static_cast<std::size_t>(i)] = std::exp((l[idx[static_cast<std::size_t>(i)]] - mx) / o.temperature);
        total += prob[static_cast<std::size_t>(i)];
      }
      std::int64_t keep = k;
      if (o.top_p < 1.0f) {
        const double need = static_cast<double>(o.top_p) * total;
        double c = 0;
        for (std::int64_t i = 0; i < k; ++i) {
          c += prob[static_cast<std::size_t>(i)];
          if (c >= need) {
            keep = i + 1;
            break;
          }
        }
        total = 0;
        for (std::int64_t i = 0; i < keep; ++i) total += prob[static_cast<std::size_t>(i)];
      }
      const double target = static_cast<double>(u(b)) * total;
      std::int32_t pick = idx[static_cast<std::size_t>(keep - 1)];
      double c = 0;
      for (std::int64_t i = 0; i < keep; ++i) {
        c += prob[static_cast<std::size_t>(i)];
        if (c > target) {
          pick = idx[static_cast<std::size_t>(i)];
          break;
        }
      }
      ids(b) = pick;
    }
  }

  // ---- mixture of experts ---------------------------------------------------------------------------------
  /// Group the assignments (t, j) of experts [M, k] by expert, stably (expert-major, then t, then j): rows
  /// [M*k, D] receives x[t] at row slot(t, j); offsets [E+1] the first row of each expert (offsets[E] = M*k).
  /// Expert ids are in [0, E) (checked by the router).
  template <class A>
  void moe_permute(View<const A, 2> x, View<const std::int32_t, 2> experts, std::int64_t num_experts,
                   View<A, 2> rows, View<std::int32_t, 2> slot, View<std::int32_t, 1> offsets) const {
    const std::int64_t M = experts.dim(0), K = experts.dim(1), D = x.dim(1);
    std::vector<std::int32_t> next(static_cast<std::size_t>(num_experts + 1), 0);
    for (std::int64_t t = 0; t < M; ++t) {
      for (std::int64_t j = 0; j < K; ++j) ++next[static_cast<std::size_t>(experts(t, j)) + 1];
    }
    for (std::int64_t e = 0; e < num_experts; ++e) next[static_cast<std::size_t>(e + 1)] += next[static_cast<std::size_t>(e)];
    for (std::int64_t e = 0; e <= num_experts; ++e) offsets(e) = next[static_cast<std::size_t>(e)];
    for (std::int64_t t = 0; t < M; ++t) {
      for (std::int64_t j = 0; j < K; ++j) slot(t, j) = next[static_cast<std::size_t>(experts(t, j))]++;
    }
    parallel_rows(M, K * D, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        for (std::int64_t j = 0; j < K; ++j) std::memcpy(&rows(slot(t, j), 0), &x(t, 0), static_cast<std::size_t>(D) * sizeof(A));
      }
    });
  }

  /// out[t] = round_A(sum_j w[t, j] * rows[slot(t, j)]), summed in f32 in choice order j = 0..k-1 (MaxText's
  /// float32_weight_sum). rows [M*k, D], slot and w [M, k], out [M, D].
  template <class A>
  void moe_unpermute(View<const A, 2> rows, View<const std::int32_t, 2> slot, View<const float, 2> w,
                     View<A, 2> out) const {
    const std::int64_t M = slot.dim(0), K = slot.dim(1), D = rows.dim(1);
    parallel_rows(M, K * D, [&](std::int64_t t0, std::int64_t t1) {
      std::vector<float> acc(static_cast<std::size_t>(D)), r(static_cast<std::size_t>(D));
      for (std::int64_t t = t0; t < t1; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::int64_t j = 0; j < K; ++j) {
          vec::to_f32(&rows(slot(t, j), 0), r.data(), D);
          const float wj = w(t, j);
          for (std::int64_t i = 0; i < D; ++i) acc[static_cast<std::size_t>(i)] += wj * r[static_cast<std::size_t>(i)];
        }
        vec::from_f32(acc.data(), &out(t, 0), D);
      }
    });
  }

  // ---- mixture of experts ---------------------------------------------------------------------------------
  /// Route M tokens (semantics: MoeRouting in backend/ops.hpp; spec moe.md GateLogit + get_topk). G is the gate
  /// dtype (f32 with float32_gate_logits, else the activation type), A the activation type (rounding of the
  /// softmax-over-top-k weights). z [M,E], bias [E] or empty, idx/w [M,k], scores [M,E] or empty.
  template <class G, class A = G>
  void moe_route(View<const G, 2> z, View<const G, 1> bias, const MoeRouting& r, View<std::int32_t, 2> idx,
                 View<float, 2> w, View<float, 2> scores) const {
    const std::int64_t M = z.dim(0), E = z.dim(1), k = r.num_experts_per_tok;
    MAXTEXT_DASSERT(idx.dim(0) == M && idx.dim(1) == k && w.dim(0) == M && w.dim(1) == k && k <= E);
    const bool groups = r.deepseek && r.n_groups > 0;
    const std::int64_t per_group = groups ? E / r.n_groups : 0;
    parallel_rows(M, E * 16, [&](std::int64_t m0, std::int64_t m1) {
      std::vector<float> s(static_cast<std::size_t>(E)), b(static_cast<std::size_t>(E)), wv(static_cast<std::size_t>(k));
      std::vector<std::int32_t> order(static_cast<std::size_t>(E));
      std::vector<float> gscore(static_cast<std::size_t>(groups ? r.n_groups : 0));
      std::vector<std::int32_t> gorder(gscore.size());
      // Descending by value, ties (and -inf) to the lower index: jax.lax.top_k's order.
      auto before = [](const std::vector<float>& v) {
        return [&v](std::int32_t a, std::int32_t c) {
          return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(c)] ||
                 (v[static_cast<std::size_t>(a)] == v[static_cast<std::size_t>(c)] && a < c);
        };
      };
      for (std::int64_t m = m0; m < m1; ++m) {
        for (std::int64_t e = 0; e < E; ++e) s[static_cast<std::size_t>(e)] = to_float(z(m, e));
        if (r.score_softmax) {
          float mx = -std::numeric_limits<float>::infinity();
          for (float v : s) mx = std::max(mx, v);
          float sum = 0.0f;
          for (float& v : s) sum += (v = std::exp(v - mx));
          for (float& v : s) v = round_to<G>(v / sum);
        } else if (r.score != Activation::linear) {
          for (float& v : s) v = round_to<G>(math::activate(r.score, v));
        }
        for (std::int64_t e = 0; e < E; ++e) {
          const auto u = static_cast<std::size_t>(e);
          b[u] = bias.empty() ? s[u] : round_to<G>(s[u] + to_float(bias(e)));
        }
        if (!scores.empty()) {
          for (std::int64_t e = 0; e < E; ++e) scores(m, e) = b[static_cast<std::size_t>(e)];
        }
        if (groups) {
          for (std::int64_t g = 0; g < r.n_groups; ++g) {
            float t1 = -std::numeric_limits<float>::infinity(), t2 = t1;
            for (std::int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
              const float v = b[static_cast<std::size_t>(e)];
              if (v > t1) {
                t2 = t1;
                t1 = v;
              } else if (v > t2) {
                t2 = v;
              }
            }
            gscore[static_cast<std::size_t>(g)] = t1 + t2;
            gorder[static_cast<std::size_t>(g)] = static_cast<std::int32_t>(g);
          }
          std::partial_sort(gorder.begin(), gorder.begin() + r.topk_groups, gorder.end(), before(gscore));
          std::vector<char> keep(gscore.size(), 0);
          for (std::int64_t g = 0; g < r.topk_groups; ++g) keep[static_cast<std::size_t>(gorder[static_cast<std::size_t>(g)])] = 1;
          for (std::int64_t e = 0; e < E; ++e) {
            if (!keep[static_cast<std::size_t>(e / per_group)]) b[static_cast<std::size_t>(e)] = -std::numeric_limits<float>::infinity();
          }
        }
        for (std::int64_t e = 0; e < E; ++e) order[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before(b));
        const std::vector<float>& src = r.deepseek ? s : b;
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int32_t e = order[static_cast<std::size_t>(j)];
          idx(m, j) = e;
          wv[j] = src[static_cast<std::size_t>(e)];
        }
        if (r.softmax_weights) {
          float mx = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j < k; ++j) mx = std::max(mx, wv[j]);
          float sum = 0.0f;
          for (std::int64_t j = 0; j < k; ++j) sum += (wv[j] = std::exp(wv[j] - mx));
          for (std::int64_t j = 0; j < k; ++j) wv[j] = round_to<A>(wv[j] / sum);
        }
        if (r.normalize) {
          float sum = 0.0f;
          for (std::int64_t j = 0; j < k; ++j) sum = round_to<G>(sum + wv[j]);
          const float den = round_to<G>(sum + r.normalize_eps);
          for (std::int64_t j = 0; j < k; ++j) wv[j] = round_to<G>(wv[j] / den);
        }
        if (r.scale != 1.0f) {
          const float sc = round_to<G>(r.scale);
          for (std::int64_t j = 0; j < k; ++j) wv[j] = round_to<G>(wv[j] * sc);
        }
        for (std::int64_t j = 0; j < k; ++j) w(m, j) = wv[j];
      }
    });
  }

  /// y[i, :] = x[rows[i], :] (the tokens routed to one expert). Rows in range (caller-checked).
  template <class A>
  void gather_rows(View<const A, 2> x, View<const std::int32_t, 1> rows, View<A, 2> y) const {
    const std::int64_t n = rows.dim(0), D = x.dim(1);
    parallel_rows(n, D, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        std::memcpy(static_cast<void*>(&y(i, 0)), &x(rows(i), 0), static_cast<std::size_t>(D) * sizeof(A));
      }
    });
  }

  /// acc[rows[i], :] += w[i] * y[i, :] in f32 (the weighted combine of one expert's outputs). rows must be
  /// distinct within one call (a token is routed to an expert at most once).
  template <class A>
  void scatter_add_rows(View<const A, 2> y, View<const std::int32_t, 1> rows, View<const float, 1> w,
                        View<float, 2> acc) const {
    const std::int64_t n = rows.dim(0), D = y.dim(1);
    parallel_rows(n, D * 2, [&](std::int64_t i0, std::int64_t i1) {
      std::vector<float> buf(static_cast<std::size_t>(D));
      for (std::int64_t i = i0; i < i1; ++i) {
        vec::to_f32(&y(i, 0), buf.data(), D);
        vec::axpy(w(i), buf.data(), &acc(rows(i), 0), D);
      }
    });
  }

  // ---- manifold-constrained hyper-connections (layers/mhc.hpp) ----------------------------------------------
  /// Each token's pre, post [M,k] and residual [M,k*k] mappings from its projections (kmath::mhc_maps_row, shared
  /// with the CUDA kernel; reference backend: the definition).
  template <class A>
  void mhc_maps(View<const A, 2> hp, View<const A, 2> hq, View<const A, 2> hr, const MhcCoefficients<A>& c,
                const MhcOptions& o, View<A, 2> pre, View<A, 2> post, View<A, 2> res) const {
    MAXTEXT_DASSERT(hr.dim(1) == mhc_res_width(o) && res.dim(1) == o.k * o.k);
    parallel_rows(hp.dim(0), hr.dim(1) * 64, [&](std::int64_t m0, std::int64_t m1) {
      for (std::int64_t m = m0; m < m1; ++m) {
        kmath::mhc_maps_row<A>(o, c, &hp(m, 0), &hq(m, 0), &hr(m, 0), &pre(m, 0), &post(m, 0), &res(m, 0));
      }
    });
  }

  /// y [M,D] = round(sum_s w(m,s) x(m, s*D + d)) over the k streams of x [M, k*D]; w empty: weights 1. f32 sums.
  template <class A>
  void stream_sum(View<const A, 2> x, View<const A, 2> w, View<A, 2> y) const {
    const std::int64_t D = y.dim(1), k = x.dim(1) / D;
    parallel_rows(x.dim(0), k * D, [&](std::int64_t r0, std::int64_t r1) {
      auto [acc, row] = thread_rows<2>(D);
      for (std::int64_t m = r0; m < r1; ++m) {
        std::fill(acc.begin(), acc.begin() + D, 0.0f);
        for (std::int64_t s = 0; s < k; ++s) {
          const float ws = w.empty() ? 1.0f : to_float(w(m, s));
          vec::to_f32(&x(m, s * D), row.data(), D);
          for (std::int64_t d = 0; d < D; ++d) acc[d] += ws * row[d];
        }
        vec::from_f32(acc.data(), &y(m, 0), D);
      }
    });
  }

  /// y(m, j*D + d) = r(r(sum_i res(m, i*k+j) x(m, i*D+d)) + r(f(m,d) post(m,j))): mHC's residual mixing plus the
  /// post-mapped branch output. x, y [M, k*D] (y must not alias x), res [M, k*k], f [M, D], post [M, k].
  template <class A>
  void stream_mix(View<const A, 2> x, View<const A, 2> res, View<const A, 2> f, View<const A, 2> post, View<A, 2> y) const {
    const std::int64_t D = f.dim(1), k = post.dim(1);
    parallel_rows(x.dim(0), k * k * D, [&](std::int64_t r0, std::int64_t r1) {
      auto [acc, row, fr] = thread_rows<3>(D);
      for (std::int64_t m = r0; m < r1; ++m) {
        vec::to_f32(&f(m, 0), fr.data(), D);
        for (std::int64_t j = 0; j < k; ++j) {
          std::fill(acc.begin(), acc.begin() + D, 0.0f);
          for (std::int64_t i = 0; i < k; ++i) {
            const float wij = to_float(res(m, i * k + j));
            vec::to_f32(&x(m, i * D), row.data(), D);
            for (std::int64_t d = 0; d < D; ++d) acc[d] += wij * row[d];
          }
          const float pj = to_float(post(m, j));
          for (std::int64_t d = 0; d < D; ++d) acc[d] = round_to<A>(acc[d]) + round_to<A>(fr[d] * pj);
          vec::from_f32(acc.data(), &y(m, j * D), D);
        }
      }
    });
  }

  // ---- per-head products (MLA absorbed form) -------------------------------------------------------------
  /// For each head h, W_h = rows [h*head_stride + row_offset, ...) of w (semantics: BackendHeadMatmul in
  /// concepts.hpp). transpose_w false: y[m,h,:] = x[m,h,:] . W_h^T (y.dim(2) rows of W, x.dim(2) == w.cols);
  /// true: y[m,h,:] = x[m,h,:] . W_h (x.dim(2) rows of W, y.dim(2) == w.cols). f32 accumulation, one rounding to Y.
  /// x, y: [M, H, d] with a contiguous last axis.
  template <class X, class W, class Y>
  void head_matmul(View<const X, 3> x, const Matrix<W>& w, std::int64_t head_stride, std::int64_t row_offset,
                   bool transpose_w, View<Y, 3> y) const {
    const std::int64_t M = x.dim(0), H = x.dim(1), Kx = x.dim(2), Ky = y.dim(2);
    const std::int64_t nrows = transpose_w ? Kx : Ky;
    MAXTEXT_DASSERT(y.dim(0) == M && y.dim(1) == H && (transpose_w ? Ky : Kx) == w.cols);
    MAXTEXT_DASSERT((H - 1) * head_stride + row_offset + nrows <= w.rows);
    if (M == 0) return;
    const auto sz = [](std::int64_t r, std::int64_t c) { return static_cast<std::size_t>(r * c); };
    parallel_rows(H, M * Kx * Ky, [&](std::int64_t h0, std::int64_t h1) {
      std::vector<float> xf(sz(M, Kx)), wf(sz(nrows, w.cols)), yf(sz(M, Ky));
      for (std::int64_t h = h0; h < h1; ++h) {
        for (std::int64_t m = 0; m < M; ++m) vec::to_f32(&x(m, h, 0), &xf[sz(m, Kx)], Kx);
        const std::int64_t r0 = h * head_stride + row_offset;
        for (std::int64_t i = 0; i < nrows; ++i) row_to_f32(w, r0 + i, &wf[sz(i, w.cols)]);
        // transpose_w: y = x . W_h, W_h [Kx, Ky]; otherwise y = x . W_h^T, W_h [Ky, Kx]. Up to kRowsAlone rows
        // each row is its own product (Eigen's one-row form), so that a row of a batched decode pass gets the
        // arithmetic of a decode step alone (models/batching.hpp); more rows take the blocked product.
        if (M <= kRowsAlone) {
          for (std::int64_t m = 0; m < M; ++m) {
            eigen_matmul_f32(&xf[sz(m, Kx)], Kx, wf.data(), w.cols, !transpose_w, &yf[sz(m, Ky)], Ky, 1, Ky, Kx);
          }
        } else {
          eigen_matmul_f32(xf.data(), Kx, wf.data(), w.cols, !transpose_w, yf.data(), Ky, M, Ky, Kx);
        }
        for (std::int64_t m = 0; m < M; ++m) {
          for (std::int64_t j = 0; j < Ky; ++j) y(m, h, j) = from_float<Y>(yf[sz(m, Ky) + static_cast<std::size_t>(j)]);
        }
      }
    });
  }

  // ---- Engram (layers/engram.hpp; semantics: BackendEngram in concepts.hpp) ------------------------------------
  /// y(m, g*D + d) = r(gate(m,g) v(m,d)), the dot product of each stream in f32 (kmath::engram_gate).
  template <class A>
  void engram_gate(View<const A, 2> q, View<const A, 2> k, View<const A, 2> v, View<A, 2> y) const {
    const std::int64_t D = v.dim(1), G = q.dim(1) / D;
    const float sqrt_d = std::sqrt(static_cast<float>(D));
    parallel_rows(q.dim(0), 3 * G * D, [&](std::int64_t r0, std::int64_t r1) {
      auto [qf, kf, vf] = thread_rows<3>(D);
      for (std::int64_t m = r0; m < r1; ++m) {
        vec::to_f32(&v(m, 0), vf.data(), D);
        for (std::int64_t g = 0; g < G; ++g) {
          vec::to_f32(&q(m, g * D), qf.data(), D);
          vec::to_f32(&k(m, g * D), kf.data(), D);
          float dot = 0.0f;
          for (std::int64_t d = 0; d < D; ++d) dot += qf[d] * kf[d];
          const float gate = kmath::engram_gate<A>(dot, sqrt_d);
          for (std::int64_t d = 0; d < D; ++d) qf[d] = gate * vf[d];
          vec::from_f32(qf.data(), &y(m, g * D), D);
        }
      }
    });
  }

  // ---- DeepSeek-V4 compressed attention (families/deepseek4/deepseek4.hpp; semantics: BackendCompressedAttention) -------
  /// Pool blocks first[b] .. first[b] + count[b] - 1 of each sequence (kmath::compress_pool_feature per feature).
  template <class A>
  void compress_pool(View<const A, 3> kv, View<const A, 3> gate, View<const A, 2> bias, std::int64_t r, bool overlap,
                     View<const std::int32_t, 1> first, View<const std::int32_t, 1> count, View<A, 3> out) const {
    const std::int64_t Bn = out.dim(0), n = out.dim(1), d = out.dim(2), F = kv.dim(2);
    MAXTEXT_DASSERT(F == (overlap ? 2 * d : d) && bias.dim(0) == r && bias.dim(1) == F && gate.dim(2) == F);
    parallel_rows(Bn * n, d * r * 8, [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t b = p / n, i = p % n, j = first(b) + i;
        for (std::int64_t c = 0; c < d; ++c) {
          out(b, i, c) = i < count(b) ? from_float<A>(kmath::compress_pool_feature<A>(&kv(b, 0, 0), &gate(b, 0, 0),
                                                                                        kv.stride(1), &bias(0, 0), F, r,
                                                                                        overlap, d, j, c))
                                      : from_float<A>(0.0f);
        }
      }
    });
  }

  /// The indexer's block scores and top-k per token (kmath::indexer_score, kmath::topk_blocks).
  template <class A>
  void indexer_topk(View<const A, 3> q, View<const A, 2> w, View<const A, 3> blocks, View<const std::int32_t, 1> q_start,
                    std::int64_t r, float score_scale, float weight_scale, View<float, 2> scores,
                    View<std::int32_t, 2> idx) const {
    const std::int64_t M = q.dim(0), H = q.dim(1), d = q.dim(2), Bn = q_start.dim(0), T = M / Bn, S = blocks.dim(1),
                       k = idx.dim(1);
    MAXTEXT_DASSERT(blocks.dim(2) == d && scores.dim(0) == M && scores.dim(1) == S && w.dim(1) == H);
    parallel_rows(M, S * H * d * 2, [&](std::int64_t m0, std::int64_t m1) {
      for (std::int64_t m = m0; m < m1; ++m) {
        const std::int64_t b = m / T, pos = q_start(b) + m % T, nv = std::min(S, (pos + 1) / r);
        float* sc = &scores(m, 0);
        for (std::int64_t j = 0; j < S; ++j) {
          sc[j] = j < nv ? kmath::indexer_score<A>(&q(m, 0, 0), q.stride(1), &w(m, 0), &blocks(b, j, 0), H, d,
                                                   score_scale, weight_scale)
                         : kmath::neg_inf();
        }
        kmath::topk_blocks(nv, k, &idx(m, 0), [&](std::int64_t j) { return sc[j]; });
      }
    });
  }

  /// Attention over a sliding window of one shared key/value head plus compressed blocks, with sinks.
  template <class A>
  void compressed_attention(View<const A, 4> q, View<const A, 3> kv, View<const A, 3> blocks,
                            View<const std::int32_t, 1> q_start, std::int64_t window, std::int64_t r,
                            View<const std::int32_t, 2> selected, View<const A, 1> sinks, const AttentionOptions& opt,
                            View<A, 4> out) const {
    const std::int64_t Bn = q.dim(0), T = q.dim(1), N = q.dim(2), d = q.dim(3), Sb = blocks.dim(1);
    const std::int64_t k = selected.empty() ? 0 : selected.dim(1);
    MAXTEXT_DASSERT(kv.dim(2) == d && (r == 0 || blocks.dim(2) == d));
    parallel_rows(Bn * T, N * d * (window > 0 ? window : 256) * 2, [&](std::int64_t m0, std::int64_t m1) {
      std::vector<float> qf(static_cast<std::size_t>(d)), acc(static_cast<std::size_t>(d)), kf(qf.size());
      std::vector<std::int32_t> keys;  // blocks this query sees
      for (std::int64_t m = m0; m < m1; ++m) {
        const std::int64_t b = m / T, t = m % T, pos = q_start(b) + t;
        const kmath::KeyRange kr = kmath::key_range(pos, pos + 1, true, window, 0);
        keys.clear();
        if (r > 0 && k == 0) {
          for (std::int64_t j = 0; j < std::min(Sb, (pos + 1) / r); ++j) keys.push_back(static_cast<std::int32_t>(j));
        } else if (r > 0) {
          for (std::int64_t i = 0; i < k; ++i) {
            if (selected(m, i) >= 0) keys.push_back(selected(m, i));
          }
        }
        for (std::int64_t n = 0; n < N; ++n) {
          vec::to_f32(&q(b, t, n, 0), qf.data(), d);
          kmath::SoftmaxState st = kmath::softmax_init();
          std::fill(acc.begin(), acc.end(), 0.0f);
          const auto add = [&](const A* key) {
            vec::to_f32(key, kf.data(), d);
            const float l = kmath::attention_logit<A>(vec::dot(qf.data(), kf.data(), d), 0.0f, opt.float32_qk_product,
                                                      opt.float32_logits);
            const float c = kmath::softmax_rescale(st, l);
            const float e = kmath::softmax_weight(st, l);
            for (std::int64_t i = 0; i < d; ++i) acc[static_cast<std::size_t>(i)] = acc[static_cast<std::size_t>(i)] * c + e * kf[static_cast<std::size_t>(i)];
          };
          for (std::int64_t s = kr.lo; s < kr.hi; ++s) add(&kv(b, s, 0));
          for (std::int32_t j : keys) add(&blocks(b, j, 0));
          if (!sinks.empty()) {
            const float c = kmath::softmax_add_sink(st, to_float(sinks(n)));
            for (float& a : acc) a *= c;
          }
          const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
          for (float& a : acc) a *= inv;
          vec::from_f32(acc.data(), &out(b, t, n, 0), d);
        }
      }
    });
  }

  // ---- Gated DeltaNet (families/qwen3_next/qwen3_next.hpp; semantics: BackendGatedDeltaNet in concepts.hpp) --------------
  /// Depthwise causal convolution with SiLU per sequence, taps `dilation` inputs apart, continuing from and updating
  /// its conv state (the last (Kc-1)*dilation inputs). f32 sums, rounded to A before and after the SiLU (the conv and
  /// the activation are two ops). Work items are (sequence, block of 256 channels): each keeps a window of its
  /// channels' inputs, (H+T) x 256 floats.
  template <class A>
  void causal_conv1d(View<const A, 2> x, View<const A, 1> w, View<const std::int32_t, 1> start,
                     View<const std::int32_t, 1> valid, View<float, 2> state, View<A, 2> y,
                     std::int64_t dilation = 1) const {
    const std::int64_t Bn = state.dim(0), M = x.dim(0), C = x.dim(1), T = M / Bn, K = w.dim(0) / C,
                       H = (K - 1) * dilation;
    MAXTEXT_DASSERT(dilation >= 1 && M == Bn * T && state.dim(1) == H * C && w.dim(0) == K * C && y.dim(0) == M &&
                    y.dim(1) == C);
    constexpr std::int64_t kBlock = 256;
    const std::int64_t nblk = (C + kBlock - 1) / kBlock;
    parallel_rows(Bn * nblk, T * kBlock * K * 2, [&](std::int64_t p0, std::int64_t p1) {
      std::vector<float> win(static_cast<std::size_t>((H + T) * kBlock)), wf(static_cast<std::size_t>(K * kBlock)),
          row(static_cast<std::size_t>(kBlock)), acc(static_cast<std::size_t>(kBlock));
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t b = p / nblk, c0 = (p % nblk) * kBlock, nc = std::min(kBlock, C - c0);
        const std::int64_t n = valid.empty() ? T : valid(b);
        MAXTEXT_DASSERT(n >= 0 && n <= T);
        const auto at = [&](std::int64_t r) { return &win[static_cast<std::size_t>(r * kBlock)]; };
        for (std::int64_t i = 0; i < K; ++i) vec::to_f32(&w(i * C + c0), &wf[static_cast<std::size_t>(i * kBlock)], nc);
        // win rows = [state (H rows) | this step's inputs (T rows)] of channels [c0, c0 + nc), in f32
        for (std::int64_t r = 0; r < H; ++r) {
          if (start(b) != 0) {
            std::copy(&state(b, r * C + c0), &state(b, r * C + c0) + nc, at(r));
          } else {
            std::fill(at(r), at(r) + nc, 0.0f);
          }
        }
        for (std::int64_t t = 0; t < T; ++t) vec::to_f32(&x(b * T + t, c0), at(H + t), nc);
        for (std::int64_t t = 0; t < T; ++t) {
          std::fill(acc.begin(), acc.begin() + nc, 0.0f);
          for (std::int64_t i = 0; i < K; ++i) {
            const float* in = at(t + i * dilation);
            const float* wi = &wf[static_cast<std::size_t>(i * kBlock)];
            for (std::int64_t c = 0; c < nc; ++c) acc[static_cast<std::size_t>(c)] += in[c] * wi[c];
          }
          for (std::int64_t c = 0; c < nc; ++c) {
            const float r = round_to<A>(acc[static_cast<std::size_t>(c)]);
            row[static_cast<std::size_t>(c)] = r * math::sigmoid(r);
          }
          vec::from_f32(row.data(), &y(b * T + t, c0), nc);
        }
        for (std::int64_t r = 0; r < H; ++r) std::copy(at(n + r), at(n + r) + nc, &state(b, r * C + c0));
      }
    });
  }

  /// Prompts of at least this many valid tokens take the chunked form of the gated delta rule (gdn_chunk_prefill);
  /// shorter steps (decode) run the recurrence token by token.
  static constexpr std::int64_t kGdnChunkMin = 16;
  /// Tokens per chunk of the chunked form (the result does not depend on it). On one Zen core, 32 value heads of
  /// 128 x 128 (bench_qwen3_next --stacks op): 37-39 us per token at 32, 43-47 at 64, 55-59 at 128, against 67-78 for
  /// the recurrence.
  static constexpr std::int64_t kGdnChunk = 32;

  /// The gated delta rule per (sequence, value head), in f32 on the state held in `state`: the recurrence token by
  /// token, or for prompts of kGdnChunkMin valid tokens or more the same recurrence in chunks (gdn_chunk_prefill).
  template <class A>
  void gated_delta_rule(View<const A, 2> q, View<const A, 2> k, View<const A, 2> v, View<const A, 2> a,
                        View<const A, 2> bt, View<const float, 1> a_log, View<const float, 1> dt_bias,
                        const GdnShape& sh, View<const std::int32_t, 1> start, View<const std::int32_t, 1> valid,
                        View<float, 2> state, View<A, 2> o) const {
    const std::int64_t Bn = state.dim(0), T = q.dim(0) / Bn, Dk = sh.key_dim, Dv = sh.value_dim, Hv = sh.value_heads;
    const std::int64_t r = Hv / sh.key_heads;
    MAXTEXT_DASSERT(state.dim(1) == sh.state_width() && o.dim(1) == Hv * Dv && q.dim(0) == Bn * T);
    parallel_rows(Bn * Hv, T * Dk * Dv * 6, [&](std::int64_t p0, std::int64_t p1) {
      auto [qn, kn, vv, u, ov] = thread_rows<5>(std::max(Dk, Dv));
      GdnChunk chunk;
      if (T >= kGdnChunkMin) chunk.resize(std::min(kGdnChunk, T), Dk, Dv);
#if defined(_OPENMP)
      // The chunks' Eigen products stay on this thread (heads are the parallel axis): Eigen would otherwise start
      // omp_get_max_threads() threads per product when this runs outside a parallel region (one thread).
      const int eigen_outer = omp_get_max_threads();
      omp_set_num_threads(1);
#endif
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t b = p / Hv, h = p % Hv, kc = (h / r) * Dk;
        float* S = &state(b, h * Dk * Dv);
        if (start(b) == 0) std::fill(S, S + Dk * Dv, 0.0f);
        const std::int64_t n = valid.empty() ? T : valid(b);
        MAXTEXT_DASSERT(n >= 0 && n <= T);
        const std::int64_t first = gdn_chunked_ && n >= kGdnChunkMin ? n : 0;  // [0, first): the chunked form
        for (std::int64_t t0 = 0; t0 < first; t0 += kGdnChunk) {
          gdn_chunk_prefill(q, k, v, a, bt, a_log(h), dt_bias(h), sh, b * T + t0, std::min(kGdnChunk, first - t0), h, S,
                            o, chunk);
        }
        for (std::int64_t t = first; t < T; ++t) {
          const std::int64_t m = b * T + t;
          gdn_normalised_qk(q, k, m, kc, Dk, qn.data(), kn.data());
          if (t < n) {
            float decay = 1.0f, beta = 0.0f;
            kmath::gdn_gates(to_float(a(m, h)), to_float(bt(m, h)), a_log(h), dt_bias(h), decay, beta);
            vec::to_f32(&v(m, h * Dv), vv.data(), Dv);
            std::fill(u.begin(), u.begin() + Dv, 0.0f);
            for (std::int64_t i = 0; i < Dk; ++i) {  // u = k^T S (before the decay; scaled below)
              const float ki = kn[i];
              const float* Si = S + i * Dv;
              for (std::int64_t j = 0; j < Dv; ++j) u[j] += ki * Si[j];
            }
            for (std::int64_t j = 0; j < Dv; ++j) u[j] = beta * (vv[j] - decay * u[j]);
            for (std::int64_t i = 0; i < Dk; ++i) {
              const float ki = kn[i];
              float* Si = S + i * Dv;
              for (std::int64_t j = 0; j < Dv; ++j) Si[j] = decay * Si[j] + ki * u[j];
            }
          }
          std::fill(ov.begin(), ov.begin() + Dv, 0.0f);
          for (std::int64_t i = 0; i < Dk; ++i) {
            const float qi = qn[i];
            const float* Si = S + i * Dv;
            for (std::int64_t j = 0; j < Dv; ++j) ov[j] += qi * Si[j];
          }
          vec::from_f32(ov.data(), &o(m, h * Dv), Dv);
        }
      }
#if defined(_OPENMP)
      omp_set_num_threads(eigen_outer);
#endif
    });
  }

 private:
  /// Up to this many rows (a decode pass over a few conversations, models/batching.hpp) the products that are not
  /// packed take each row alone (gemv_rows, head_matmul's one-row form), so that every row gets a decode step's own
  /// arithmetic, as the packed kernels' direct products do (gemm.hpp, kFloatRowsDirect / kGgmlRowsDirect).
  static constexpr std::int64_t kRowsAlone = 8;
  static constexpr std::int64_t kGemmMinRows = kRowsAlone + 1;

  /// Scratch of one chunk of the chunked gated delta rule: L tokens' normalised q and k [L, Dk], the updates U and
  /// the outputs [L, Dv], the token-pair matrices [L, L], beta and the cumulative log-decay [L].
  struct GdnChunk {
    // One page-aligned block. Each part starts 64 * (i + 1) bytes past a 4 KiB boundary: the state rows the products
    // read (and the inputs) sit at 4 KiB multiples, and a part placed at the same offset modulo 4 KiB ran the products
    // at half speed (4K aliasing between the loads of one and the stores of another; seen as 31 against 70 us per
    // token depending on where the allocator put the scratch).
    std::unique_ptr<float, void (*)(void*)> mem{nullptr, std::free};
    float *qk_rows = nullptr, *u = nullptr, *yx = nullptr, *pairs = nullptr, *beta = nullptr, *cum = nullptr, *e = nullptr;
    void resize(std::int64_t L, std::int64_t Dk, std::int64_t Dv) {
      constexpr std::int64_t kPage = 1024;  // floats per 4 KiB
      const std::int64_t sizes[] = {2 * L * Dk, L * Dv, 2 * L * Dv, 2 * L * L, L, L, L};
      float** parts[] = {&qk_rows, &u, &yx, &pairs, &beta, &cum, &e};
      std::int64_t offsets[7], total = 0;
      for (std::size_t i = 0; i < 7; ++i) {
        offsets[i] = (total + kPage - 1) / kPage * kPage + 16 * static_cast<std::int64_t>(i + 1);
        total = offsets[i] + sizes[i];
      }
      const std::size_t bytes = static_cast<std::size_t>((total + kPage - 1) / kPage * kPage) * sizeof(float);
      mem.reset(static_cast<float*>(std::aligned_alloc(4096, bytes)));
      MAXTEXT_CHECK(mem != nullptr, Error, "[cpu] gated_delta_rule: cannot allocate ", bytes, " bytes of scratch");
      for (std::size_t i = 0; i < 7; ++i) *parts[i] = mem.get() + offsets[i];
    }
  };

  /// Row m's query and key (columns [kc, kc + Dk)) as the delta rule reads them: L2-normalised, the query then
  /// divided by sqrt(Dk).
  template <class A>
  static void gdn_normalised_qk(View<const A, 2> q, View<const A, 2> k, std::int64_t m, std::int64_t kc, std::int64_t Dk,
                                float* qn, float* kn) {
    vec::to_f32(&q(m, kc), qn, Dk);
    vec::to_f32(&k(m, kc), kn, Dk);
    float sq = 0.0f, sk = 0.0f;
    for (std::int64_t i = 0; i < Dk; ++i) {
      sq += qn[i] * qn[i];
      sk += kn[i] * kn[i];
    }
    const float fq = kmath::gdn_l2_factor(sq) / std::sqrt(static_cast<float>(Dk)), fk = kmath::gdn_l2_factor(sk);
    for (std::int64_t i = 0; i < Dk; ++i) {
      qn[i] *= fq;
      kn[i] *= fk;
    }
  }

  /// L tokens (rows m0 .. m0+L-1, all valid) of one value head h through the gated delta rule in chunked form,
  /// starting from and updating the state S [Dk, Dv]. With c_t the cumulative log-decay in the chunk (c_t = sum_{s<=t}
  /// g_s) and S0 the state before it, the recurrence S_t = e^{g_t} S_{t-1} + k_t u_t^T, u_t = beta_t (v_t -
  /// e^{g_t} S_{t-1}^T k_t), o_t = S_t^T q_t unrolls to
  ///   u_t + beta_t sum_{s<t} e^{c_t - c_s} (k_t . k_s) u_s = beta_t (v_t - e^{c_t} S0^T k_t)   (lower triangular:
  ///                                                                                          forward substitution)
  ///   o_t = e^{c_t} S0^T q_t + sum_{s<=t} e^{c_t - c_s} (q_t . k_s) u_s
  ///   S_L = e^{c_L} S0 + sum_s e^{c_L - c_s} k_s u_s^T
  /// i.e. matrix products (Eigen, one thread: the caller runs heads in parallel) instead of three passes over the
  /// state per token. Every exponent is <= 0 (nothing divides by a decay). The same math as the recurrence, in
  /// another f32 summation order.
  template <class A>
  static void gdn_chunk_prefill(View<const A, 2> q, View<const A, 2> k, View<const A, 2> v, View<const A, 2> a,
                                View<const A, 2> bt, float a_log, float dt_bias, const GdnShape& sh, std::int64_t m0,
                                std::int64_t L, std::int64_t h, float* S, View<A, 2> o, GdnChunk& c) {
    const std::int64_t Dk = sh.key_dim, Dv = sh.value_dim, kc = (h / (sh.value_heads / sh.key_heads)) * Dk;
    const auto at = [](std::int64_t r, std::int64_t width) { return static_cast<std::size_t>(r * width); };
    // q and k rows stacked, so that one product gives S0^T q_t and S0^T k_t, another q_t . k_s and k_t . k_s.
    float run = 0.0f;
    for (std::int64_t t = 0; t < L; ++t) {
      const std::int64_t m = m0 + t;
      gdn_normalised_qk(q, k, m, kc, Dk, c.qk_rows + at(t, Dk), c.qk_rows + at(L + t, Dk));
      c.beta[t] = math::sigmoid(to_float(bt(m, h)));
      run += kmath::gdn_log_decay(to_float(a(m, h)), a_log, dt_bias);
      c.cum[t] = run;
      vec::to_f32(&v(m, h * Dv), c.u + at(t, Dv), Dv);
    }
    gdn_chunk_products(GdnChunkRows{c.qk_rows, c.yx, c.pairs, c.u, c.beta, c.cum, c.e}, L, Dk, Dv, S);
    for (std::int64_t t = 0; t < L; ++t) vec::from_f32(c.yx + at(t, Dv), &o(m0 + t, h * Dv), Dv);
  }

  /// Run f(begin, end) over [0, rows) split across threads; `cost_per_row` (flops-ish) decides how many.
  template <class F>
  void parallel_rows(std::int64_t rows, std::int64_t cost_per_row, F&& f) const {
    constexpr std::int64_t kMinWork = 1 << 15;
    std::int64_t nt = std::min<std::int64_t>(threads_, rows);
    if (cost_per_row * rows < kMinWork * 2) nt = 1;
    if (nt <= 1 || vec::max_threads() <= 1) {
      f(std::int64_t{0}, rows);
      return;
    }
#if defined(_OPENMP)
#pragma omp parallel num_threads(static_cast<int>(nt))
    {
      const std::int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
      const std::int64_t b = rows * tid / nth, e = rows * (tid + 1) / nth;
      if (b < e) f(b, e);
    }
#else
    f(std::int64_t{0}, rows);
#endif
  }

  template <class W>
  static void row_to_f32(const Matrix<W>& w, std::int64_t r, float* dst) {
    const std::int64_t K = w.cols;
    if constexpr (std::is_same_v<W, ggml_byte>) {
      const std::byte* row = reinterpret_cast<const std::byte*>(w.data.data()) + r * w.storage_cols();
      qblock::dequantize_any(w.ggml_type, row, dst, K);
      quant::scale_values(dst, K, w.value_scale);
    } else {
      const W* row = w.data.empty() ? nullptr : w.data.data() + r * w.storage_cols();
      if (row == nullptr) {  // rows released after packing (release_rows): one row from the panels, into a
                             // per-thread buffer (no allocation per row on the head_matmul path)
        if constexpr (gemm::packable<W>) {
          thread_local std::vector<W> buf;
          buf.resize(static_cast<std::size_t>(w.storage_cols()));
          gemm::unpack_row(*static_cast<const gemm::Packed*>(w.packed.get()), r, buf.data());
          row = buf.data();
        }
      }
      if constexpr (std::is_same_v<W, q8_0>) {
        for (std::int64_t b = 0; b < K / q8_0::block; ++b) {
          const float d = static_cast<float>(row[b].d);
          for (int i = 0; i < q8_0::block; ++i) dst[b * q8_0::block + i] = d * static_cast<float>(row[b].qs[i]);
        }
      } else {
        vec::to_f32(row, dst, K);
      }
    }
  }

  void gemm_f32(const float* x, std::int64_t ldx, const float* w, std::int64_t ldw, float* y, std::int64_t ldy,
                std::int64_t M, std::int64_t N, std::int64_t K) const {
    eigen_gemm_f32(threads_, x, ldx, w, ldw, y, ldy, M, N, K);
  }

  template <class Y, class Bias>
  void add_bias(View<Y, 2> y, View<const Bias, 1> bias) const {
    for (std::int64_t m = 0; m < y.dim(0); ++m) {
      for (std::int64_t n = 0; n < y.dim(1); ++n) y(m, n) = from_float<Y>(to_float(y(m, n)) + to_float(bias(n)));
    }
  }

  /// Few rows (decode): each output is a dot product of an x row with a W row; threads split the W rows.
  template <class X, class W, class Y, class Bias>
  void gemv_rows(View<const X, 2> x, const Matrix<W>& w, View<Y, 2> y, View<const Bias, 1> bias) const {
    const std::int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    std::vector<float> xf(static_cast<std::size_t>(M * K));
    for (std::int64_t m = 0; m < M; ++m) vec::to_f32(&x(m, 0), &xf[static_cast<std::size_t>(m * K)], K);
    parallel_rows(N, K * M, [&](std::int64_t n0, std::int64_t n1) {
      std::vector<float> wf(static_cast<std::size_t>(std::is_same_v<W, float> ? 0 : K));
      for (std::int64_t n = n0; n < n1; ++n) {
        const float* wr;
        if constexpr (std::is_same_v<W, float>) {
          wr = w.data.data() + n * K;
        } else {
          row_to_f32(w, n, wf.data());
          wr = wf.data();
        }
        for (std::int64_t m = 0; m < M; ++m) {
          float acc = round_to<Y>(vec::dot(&xf[static_cast<std::size_t>(m * K)], wr, K));
          if (!bias.empty()) acc = acc + to_float(bias(n));
          y(m, n) = from_float<Y>(acc);
        }
      }
    });
  }

  /// Many rows, narrow types: convert x once to f32, then W in panels of rows to f32 and multiply with Eigen.
  template <class X, class W, class Y, class Bias>
  void gemm_converted(View<const X, 2> x, const Matrix<W>& w, View<Y, 2> y, View<const Bias, 1> bias) const {
    const std::int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    const float* xf_ptr;
    std::int64_t ldx;
    std::vector<float> xf;
    if constexpr (std::is_same_v<X, float>) {
      xf_ptr = x.data();
      ldx = x.stride(0);
    } else {
      xf.resize(static_cast<std::size_t>(M * K));
      for (std::int64_t m = 0; m < M; ++m) vec::to_f32(&x(m, 0), &xf[static_cast<std::size_t>(m * K)], K);
      xf_ptr = xf.data();
      ldx = K;
    }
    constexpr std::int64_t kPanel = 64;
    const std::int64_t panels = (N + kPanel - 1) / kPanel;
    parallel_rows(panels, M * K * kPanel, [&](std::int64_t p0, std::int64_t p1) {
      std::vector<float> wf(static_cast<std::size_t>(kPanel * K)), yf(static_cast<std::size_t>(M * kPanel));
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t n0 = p * kPanel, nb = std::min(kPanel, N - n0);
        for (std::int64_t i = 0; i < nb; ++i) {
          if constexpr (std::is_same_v<W, float>) {
            std::memcpy(&wf[static_cast<std::size_t>(i * K)], w.data.data() + (n0 + i) * K,
                        static_cast<std::size_t>(K) * sizeof(float));
          } else {
            row_to_f32(w, n0 + i, &wf[static_cast<std::size_t>(i * K)]);
          }
        }
        eigen_matmul_f32(xf_ptr, ldx, wf.data(), K, /*transpose_b=*/true, yf.data(), nb, M, nb, K);
        for (std::int64_t m = 0; m < M; ++m) {
          for (std::int64_t i = 0; i < nb; ++i) {
            float acc = round_to<Y>(yf[static_cast<std::size_t>(m * nb + i)]);
            if (!bias.empty()) acc = acc + to_float(bias(n0 + i));
            y(m, n0 + i) = from_float<Y>(acc);
          }
        }
      }
    });
  }

  int threads_ = 1;
  bool int8_activations_ = false;
  bool gdn_chunked_ = true;
  std::size_t pack_chunk_bytes_ = std::size_t{16} << 20;
};

}  // namespace maxtext::cpu

static_assert(::maxtext::Backend<::maxtext::cpu::Backend>, "cpu::Backend must satisfy the Backend concept");
static_assert(::maxtext::BackendMoE<::maxtext::cpu::Backend>, "cpu::Backend must provide the MoE kernels");
static_assert(::maxtext::BackendHeadMatmul<::maxtext::cpu::Backend>, "cpu::Backend must provide head_matmul");
static_assert(::maxtext::BackendHyperConnections<::maxtext::cpu::Backend>, "cpu::Backend must provide the mHC stream ops");
static_assert(::maxtext::BackendGatedDeltaNet<::maxtext::cpu::Backend>, "cpu::Backend must provide the Gated DeltaNet ops");
static_assert(::maxtext::BackendEngram<::maxtext::cpu::Backend>, "cpu::Backend must provide the Engram gate");
