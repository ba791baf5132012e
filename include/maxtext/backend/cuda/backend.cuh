// backend/cuda/backend.cuh: the CUDA backend. One device, one stream: every operation is enqueued on the stream
// and returns at once; synchronize() waits. Memory from a stream-ordered pool (memory.cuh), matrix products through
// cuBLASLt (gemm.cuh), everything else in this library's kernels (elementwise.cuh, attention.cuh, sampling.cuh,
// moe.cuh, gated_delta.cuh, compressed_attention.cuh). The semantics of each operation are those of the Backend
// concept (backend/concepts.hpp, docs/backends.md); the CPU and reference backends define them on the host.
//
//   using Gpt3 = maxtext::models::Transformer<maxtext::Policy<maxtext::cuda::Backend, maxtext::bf16>,
//                                             maxtext::layers::Gpt3DecoderLayer>;
//   Gpt3 model(cfg, maxtext::cuda::Backend({.device = 0}));
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "maxtext/backend/common/kernel_math.hpp"
#include "maxtext/backend/concepts.hpp"
#include "maxtext/backend/cuda/attention.cuh"
#include "maxtext/backend/cuda/common.cuh"
#include "maxtext/backend/cuda/compressed_attention.cuh"
#include "maxtext/backend/cuda/elementwise.cuh"
#include "maxtext/backend/cuda/gated_delta.cuh"
#include "maxtext/backend/cuda/gemm.cuh"
#include "maxtext/backend/cuda/memory.cuh"
#include "maxtext/backend/cuda/moe.cuh"
#include "maxtext/backend/cuda/sampling.cuh"
#include "maxtext/backend/cuda/weight_rows.cuh"
#include "maxtext/backend/ops.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext::cuda {

struct Options {
  int device = 0;                            ///< CUDA device ordinal
  std::size_t gemm_workspace = 32u << 20;    ///< cuBLASLt workspace bytes
};

class Backend {
 public:
  static constexpr const char* name = "cuda";

  /// Throws DeviceError when no usable device exists (check cuda::available() first to skip instead).
  explicit Backend(Options opt = {}) {
    MAXTEXT_CHECK(opt.device >= 0 && opt.device < device_count(), DeviceError, "[cuda] device ", opt.device,
                  " requested, ", device_count(), " usable CUDA device(s) found");
    auto st = std::make_shared<State>();
    st->dev = std::make_shared<DeviceMemory>(opt.device);
    st->mem = st->dev;
    st->gemm = std::make_unique<Gemm>(st->dev->stream(), opt.gemm_workspace);
    cudaDeviceProp prop{};
    MAXTEXT_CUDA_CHECK(cudaGetDeviceProperties(&prop, opt.device));
    st->sms = prop.multiProcessorCount;
    int optin = 0;
    MAXTEXT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, opt.device));
    st->smem_optin = static_cast<std::size_t>(optin);
    state_ = std::move(st);
  }

  // ---- memory and execution -------------------------------------------------------------------------------
  const std::shared_ptr<MemoryResource>& memory() const { return state_->mem; }
  cudaStream_t stream() const { return state_->dev->stream(); }
  int device() const { return state_->dev->device(); }

  /// Stream-ordered copy. A host source may be reused once copy returns (pageable memory is staged); a host
  /// destination holds the data after synchronize().
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) const {
    if (bytes == 0) return;
    cudaMemcpyKind k = cudaMemcpyDefault;
    switch (kind) {
      case CopyKind::host_to_device: k = cudaMemcpyHostToDevice; break;
      case CopyKind::device_to_host: k = cudaMemcpyDeviceToHost; break;
      case CopyKind::device_to_device: k = cudaMemcpyDeviceToDevice; break;
      case CopyKind::host_to_host: k = cudaMemcpyHostToHost; break;
    }
    MAXTEXT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, stream()));
  }
  void synchronize() const { MAXTEXT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

  /// Products read runtime-typed matrices (ggml_byte: a GGUF file's blocks as they lie), see
  /// backend_has_runtime_typed_weights: each kernel decodes the elements it reads (weight_rows.cuh).
  static constexpr bool runtime_typed_weights = true;

  /// Weights stay in their out-major layout (cuBLASLt reads it transposed); nothing to prepare. A runtime-typed
  /// matrix's type must be one the kernels decode.
  template <class W>
  Matrix<W> prepare(Matrix<W> m) const {
    if constexpr (std::is_same_v<W, ggml_byte>) {
      const quant::TypeInfo& t = quant::checked_type_info(m.ggml_type);
      MAXTEXT_CHECK(m.cols % t.block == 0, ShapeError, "[cuda] a ", t.name, " matrix needs rows of a multiple of ",
                    t.block, " values, found ", m.cols);
    }
    return m;
  }

  // ---- linear algebra -------------------------------------------------------------------------------------
  template <class X, class W, class Y, class Bias = Y>
  void matmul(View<const X, 2> x, const Matrix<W>& w, View<Y, 2> y, View<const Bias, 1> bias = {}) const {
    const std::int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    MAXTEXT_DASSERT(K == w.cols && y.dim(0) == M && y.dim(1) == N && x.rows_contiguous() && y.rows_contiguous());
    if (M == 0 || N == 0) return;
    if constexpr (std::is_same_v<W, ggml_byte>) {
      if (lt_supported<X, float, Y> && M > 8) {
        ggml_lt_products(x, w, y);
      } else {
        kernel_products(x, weight_rows(w), y, N);
      }
    } else if constexpr (lt_supported<X, W, Y>) {
      state_->gemm->run<X, Y>(x.data(), ld(x), w.data.data(), w.data.view().stride(0), y.data(), ld(y), M, N, K);
    } else {
      kernel_products(x, weight_rows(w), y, N);
    }
    if (!bias.empty()) {
      kernels::add_bias<Y, Bias><<<detail::grid_for(M * N), detail::kThreads, 0, stream()>>>(rows(y), bias.data(), M, N);
      MAXTEXT_CUDA_LAUNCH_CHECK("add_bias");
    }
  }

  // ---- normalisation --------------------------------------------------------------------------------------
  template <class A, class S>
  void rms_norm(View<const A, 2> x, View<const S, 1> scale, float eps, float scale_offset, View<A, 2> y) const {
    if (x.dim(0) == 0) return;
    kernels::rms_norm<A, S><<<static_cast<unsigned>(x.dim(0)), row_threads(x.dim(1)), 0, stream()>>>(
        rows(x), scale.empty() ? nullptr : scale.data(), eps, scale_offset, rows(y), x.dim(1));
    MAXTEXT_CUDA_LAUNCH_CHECK("rms_norm");
  }

  template <class A>
  void layer_norm(View<const A, 2> x, View<const A, 1> scale, View<const A, 1> bias, float eps, View<A, 2> y,
                  bool stats_in_f32 = false) const {
    if (x.dim(0) == 0) return;
    kernels::layer_norm<A><<<static_cast<unsigned>(x.dim(0)), row_threads(x.dim(1)), 0, stream()>>>(
        rows(x), scale.data(), bias.empty() ? nullptr : bias.data(), eps, rows(y), x.dim(1), stats_in_f32);
    MAXTEXT_CUDA_LAUNCH_CHECK("layer_norm");
  }

  // ---- element-wise ---------------------------------------------------------------------------------------
  template <class A>
  void add(View<const A, 2> a, View<const A, 2> b, View<A, 2> y) const {
    const std::int64_t n = a.dim(0) * a.dim(1);
    if (n == 0) return;
    kernels::add<A><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(a), rows(b), rows(y), a.dim(0), a.dim(1));
    MAXTEXT_CUDA_LAUNCH_CHECK("add");
  }

  template <class A>
  void activation(View<const A, 2> h0, Activation a0, View<const A, 2> h1, Activation a1, View<A, 2> y,
                  bool round_each = true) const {
    const std::int64_t n = h0.dim(0) * h0.dim(1);
    if (n == 0) return;
    const kernels::Rows<const A> r1 = h1.empty() ? kernels::Rows<const A>{nullptr, 0} : rows(h1);
    kernels::activation<A><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(h0), a0, r1, a1, rows(y), h0.dim(0),
                                                                                  h0.dim(1), round_each);
    MAXTEXT_CUDA_LAUNCH_CHECK("activation");
  }

  template <class A>
  void clamped_glu(View<const A, 2> h0, View<const A, 2> h1, Activation a0, float alpha, float limit, View<A, 2> y,
                   ClampedGluForm form = ClampedGluForm::gpt_oss) const {
    const std::int64_t n = h0.dim(0) * h0.dim(1);
    if (n == 0) return;
    kernels::clamped_glu<A><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(h0), rows(h1), a0, round_to<A>(alpha),
                                                                                   limit, rows(y), h0.dim(0), h0.dim(1), form);
    MAXTEXT_CUDA_LAUNCH_CHECK("clamped_glu");
  }

  template <class A>
  void scale(View<A, 2> x, float factor, bool divide = false) const {
    const std::int64_t n = x.dim(0) * x.dim(1);
    if (n == 0) return;
    kernels::scale<A><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(x), round_to<A>(factor), divide, x.dim(0),
                                                                             x.dim(1));
    MAXTEXT_CUDA_LAUNCH_CHECK("scale");
  }

  template <class A, class G>
  void scale_rows(View<A, 2> x, View<const G, 2> g, Activation act) const {
    const std::int64_t n = x.dim(0) * x.dim(1);
    if (n == 0) return;
    kernels::scale_rows<A, G><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(x), rows(g), act, x.dim(0),
                                                                                  x.dim(1));
    MAXTEXT_CUDA_LAUNCH_CHECK("scale_rows");
  }

  template <class A>
  void soft_cap(View<A, 2> x, float cap) const {
    const std::int64_t n = x.dim(0) * x.dim(1);
    if (n == 0) return;
    kernels::soft_cap<A><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(x), cap, x.dim(0), x.dim(1));
    MAXTEXT_CUDA_LAUNCH_CHECK("soft_cap");
  }

  template <class A, class Y>
  void convert(View<const A, 2> x, View<Y, 2> y) const {
    const std::int64_t n = x.dim(0) * x.dim(1);
    if (n == 0) return;
    kernels::convert<A, Y><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(x), rows(y), x.dim(0), x.dim(1));
    MAXTEXT_CUDA_LAUNCH_CHECK("convert");
  }

  // ---- manifold-constrained hyper-connections (semantics: reference backend) ---------------------------------
  template <class A>
  void mhc_maps(View<const A, 2> hp, View<const A, 2> hq, View<const A, 2> hr, const MhcCoefficients<A>& c,
                const MhcOptions& o, View<A, 2> pre, View<A, 2> post, View<A, 2> res) const {
    const std::int64_t M = hp.dim(0);
    if (M == 0) return;
    kernels::mhc_maps<A><<<detail::grid_for(M, 64), 64, 0, stream()>>>(rows(hp), rows(hq), rows(hr), c, o, rows(pre),
                                                                       rows(post), rows(res), M);
    MAXTEXT_CUDA_LAUNCH_CHECK("mhc_maps");
  }
  template <class A>
  void stream_sum(View<const A, 2> x, View<const A, 2> w, View<A, 2> y) const {
    const std::int64_t M = y.dim(0), D = y.dim(1), n = M * D;
    if (n == 0) return;
    const kernels::Rows<const A> wr = w.empty() ? kernels::Rows<const A>{nullptr, 0} : rows(w);
    kernels::stream_sum<A><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(x), wr, rows(y), M, D, x.dim(1) / D);
    MAXTEXT_CUDA_LAUNCH_CHECK("stream_sum");
  }
  template <class A>
  void stream_mix(View<const A, 2> x, View<const A, 2> res, View<const A, 2> f, View<const A, 2> post, View<A, 2> y) const {
    const std::int64_t M = f.dim(0), D = f.dim(1), k = post.dim(1), n = M * k * D;
    if (n == 0) return;
    kernels::stream_mix<A><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(rows(x), rows(res), rows(f), rows(post),
                                                                                  rows(y), M, D, k);
    MAXTEXT_CUDA_LAUNCH_CHECK("stream_mix");
  }

  /// Strided device-to-device copy, any rank.
  template <class T, int R>
  void copy(View<const T, R> src, View<T, R> dst) const {
    const std::int64_t n = src.size();
    if (n == 0) return;
    if (src.is_contiguous() && dst.is_contiguous()) {
      copy(dst.data(), src.data(), static_cast<std::size_t>(n) * sizeof(T), CopyKind::device_to_device);
      return;
    }
    kernels::strided_copy<T, R><<<detail::grid_for(n), detail::kThreads, 0, stream()>>>(src.data(), detail::strides_of(src),
                                                                                      dst.data(), detail::strides_of(dst), n);
    MAXTEXT_CUDA_LAUNCH_CHECK("strided_copy");
  }

  // ---- embedding, rotary ----------------------------------------------------------------------------------
  template <class W, class A>
  void embed(const Matrix<W>& table, View<const std::int32_t, 1> ids, View<A, 2> y) const {
    const std::int64_t M = ids.dim(0), D = table.cols;
    if (M == 0) return;
    kernels::embed<<<detail::grid_for(M * D), detail::kThreads, 0, stream()>>>(weight_rows(table), ids.data(), rows(y), M, D);
    MAXTEXT_CUDA_LAUNCH_CHECK("embed");
  }

  template <class A>
  void rotary(View<A, 3> x, View<const std::int32_t, 1> pos, const RotaryTable& t) const {
    const std::int64_t M = x.dim(0), H = x.dim(1), half = t.rot_dims / 2;
    if (M * H == 0 || half == 0) return;
    MAXTEXT_DASSERT(x.stride(2) == 1 && half <= 1024);
    const unsigned threads = static_cast<unsigned>((half + 31) / 32 * 32);
    kernels::rotary<A><<<static_cast<unsigned>(M * H), threads, 0, stream()>>>(
        x.data(), x.stride(0), x.stride(1), H, pos.data(), t.cos.data(), t.sin.data(), half, t.layout, t.round_sincos_to_input,
        t.post_scale);
    MAXTEXT_CUDA_LAUNCH_CHECK("rotary");
  }

  // ---- attention ------------------------------------------------------------------------------------------
  /// The cache type KV is A or a narrower float type (Policy's KV): rows are read as the cache holds them.
  template <class A, class KV>
  void attention(View<const A, 4> q, View<const KV, 4> k, View<const KV, 4> v, const AttentionMask& mask,
                 const AttentionOptions& opt, View<const A, 1> sinks, View<A, 4> out) const {
    kernels::AttnArgs<A, KV> a{};
    a.q = q.data();
    a.q_b = q.stride(0), a.q_t = q.stride(1), a.q_n = q.stride(2);
    a.k = k.data();
    a.k_b = k.stride(0), a.k_s = k.stride(1), a.k_h = k.stride(2);
    a.v = v.data();
    a.v_b = v.stride(0), a.v_s = v.stride(1), a.v_h = v.stride(2);
    a.o = out.data();
    a.o_b = out.stride(0), a.o_t = out.stride(1), a.o_n = out.stride(2);
    a.B = q.dim(0), a.T = q.dim(1), a.N = q.dim(2), a.G = q.dim(2) / k.dim(2), a.Dq = q.dim(3), a.Dv = v.dim(3);
    a.q_start = mask.q_start.data();
    a.kv_len = mask.kv_len.data();
    a.q_seg = mask.q_segment.empty() ? nullptr : mask.q_segment.data();
    a.q_seg_ld = mask.q_segment.empty() ? 0 : mask.q_segment.stride(0);
    a.kv_seg = mask.kv_segment.empty() ? nullptr : mask.kv_segment.data();
    a.kv_seg_ld = mask.kv_segment.empty() ? 0 : mask.kv_segment.stride(0);
    a.causal = mask.causal;
    a.window = mask.sliding_window;
    a.chunk = mask.chunk;
    MAXTEXT_CHECK(mask.bidir_begin.empty() == mask.bidir_end.empty() &&
                      (mask.bidir_end.empty() || mask.bidir_begin.stride(0) == mask.bidir_end.stride(0)),
                  ArgumentError, "[cuda attention] bidir_begin and bidir_end must both be given, with one row stride");
    a.bidir_begin = mask.bidir_end.empty() ? nullptr : mask.bidir_begin.data();
    a.bidir_end = mask.bidir_end.empty() ? nullptr : mask.bidir_end.data();
    a.bidir_ld = mask.bidir_end.empty() ? 0 : mask.bidir_end.stride(0);
    a.soft_cap = opt.soft_cap;
    a.f32_qk = opt.float32_qk_product;
    a.f32_logits = opt.float32_logits;
    a.sinks = sinks.empty() ? nullptr : sinks.data();
    if (a.B * a.T * a.N == 0) return;
    const std::int64_t S = k.dim(1);
    const std::size_t prefill_smem = kernels::prefill_smem_bytes(a.Dq, a.Dv);
    if (a.T > 4 && prefill_smem <= state_->smem_optin) {
      MAXTEXT_CUDA_CHECK(cudaFuncSetAttribute(kernels::attention_prefill<A, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(prefill_smem)));
      const dim3 grid(static_cast<unsigned>((a.T + kernels::kPrefillQueries - 1) / kernels::kPrefillQueries),
                      static_cast<unsigned>(a.N), static_cast<unsigned>(a.B));
      kernels::attention_prefill<A, KV><<<grid, 128, prefill_smem, stream()>>>(a);
      MAXTEXT_CUDA_LAUNCH_CHECK("attention_prefill");
      return;
    }
    // Split-KV: enough blocks to fill the device twice over, at least 256 keys per split.
    const std::int64_t rows_heads = a.B * a.T * a.N;
    std::int64_t splits = (2 * state_->sms + rows_heads - 1) / rows_heads;
    splits = std::max<std::int64_t>(1, std::min<std::int64_t>({splits, (S + 255) / 256, 64}));
    const std::size_t split_smem = kernels::split_smem_bytes(a.Dq, a.Dv);
    MAXTEXT_CHECK(split_smem <= state_->smem_optin, UnsupportedError, "[cuda attention] head dims ", a.Dq, "/", a.Dv,
                  " need ", split_smem, " bytes of shared memory, the device allows ", state_->smem_optin);
    MAXTEXT_CUDA_CHECK(cudaFuncSetAttribute(kernels::attention_split<A, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(split_smem)));
    const std::size_t part_bytes = static_cast<std::size_t>(rows_heads * splits * kernels::split_record(a.Dv)) * sizeof(float);
    float* part = static_cast<float*>(memory()->allocate(part_bytes));
    kernels::attention_split<A, KV><<<dim3(static_cast<unsigned>(a.B * a.T), static_cast<unsigned>(a.N), static_cast<unsigned>(splits)),
                                  128, split_smem, stream()>>>(a, part);
    const cudaError_t e1 = cudaGetLastError();
    if (e1 == cudaSuccess) {
      kernels::attention_combine<A, KV><<<dim3(static_cast<unsigned>(a.B * a.T), static_cast<unsigned>(a.N)), 128, 0, stream()>>>(
          a, part, static_cast<int>(splits));
    }
    memory()->deallocate(part, part_bytes);  // stream-ordered: after the combine kernel
    check(e1, "launch of attention_split", __FILE__, __LINE__);
    MAXTEXT_CUDA_LAUNCH_CHECK("attention_combine");
  }

  // ---- row reductions -------------------------------------------------------------------------------------
  template <class X, class Y>
  void softmax(View<const X, 2> x, View<Y, 2> y) const {
    if (x.dim(0) == 0) return;
    kernels::softmax<X, Y><<<static_cast<unsigned>(x.dim(0)), row_threads(x.dim(1)), 0, stream()>>>(rows(x), rows(y), x.dim(1));
    MAXTEXT_CUDA_LAUNCH_CHECK("softmax");
  }

  void sample(View<const float, 2> logits, const SampleOptions& o, View<const float, 1> u, View<std::int32_t, 1> ids) const {
    if (logits.dim(0) == 0) return;
    kernels::sample<256><<<static_cast<unsigned>(logits.dim(0)), 256, 0, stream()>>>(
        logits.data(), ld(logits), logits.dim(1), o, u.empty() ? nullptr : u.data(), ids.data());
    MAXTEXT_CUDA_LAUNCH_CHECK("sample");
  }

  // ---- mixture of experts ---------------------------------------------------------------------------------
  template <class A>
  void moe_permute(View<const A, 2> x, View<const std::int32_t, 2> experts, std::int64_t num_experts, View<A, 2> rows_out,
                   View<std::int32_t, 2> slot, View<std::int32_t, 1> offsets) const {
    const std::int64_t M = experts.dim(0), k = experts.dim(1), D = x.dim(1);
    if (num_experts <= 0) return;
    const std::size_t count_bytes = static_cast<std::size_t>(num_experts) * sizeof(std::int32_t);
    auto* counts = static_cast<std::int32_t*>(memory()->allocate(count_bytes));
    kernels::moe_count<256><<<static_cast<unsigned>(num_experts), 256, 0, stream()>>>(experts.data(), ld(experts), M, k, counts);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
      kernels::moe_offsets<0><<<1, 1, 0, stream()>>>(counts, num_experts, offsets.data());
      e = cudaGetLastError();
    }
    memory()->deallocate(counts, count_bytes);
    check(e, "launch of moe_count / moe_offsets", __FILE__, __LINE__);
    if (M * k == 0) return;
    kernels::moe_slots<256><<<static_cast<unsigned>(num_experts), 256, 0, stream()>>>(experts.data(), ld(experts), M, k,
                                                                                       offsets.data(), slot.data(), ld(slot));
    MAXTEXT_CUDA_LAUNCH_CHECK("moe_slots");
    kernels::moe_gather<A><<<detail::grid_for(M * k * D), detail::kThreads, 0, stream()>>>(
        x.data(), ld(x), slot.data(), ld(slot), M, k, rows_out.data(), ld(rows_out), D);
    MAXTEXT_CUDA_LAUNCH_CHECK("moe_gather");
  }

  template <class A>
  void moe_unpermute(View<const A, 2> rows_in, View<const std::int32_t, 2> slot, View<const float, 2> w, View<A, 2> out) const {
    const std::int64_t M = slot.dim(0), k = slot.dim(1), D = rows_in.dim(1);
    if (M * D == 0) return;
    kernels::moe_combine<A><<<detail::grid_for(M * D), detail::kThreads, 0, stream()>>>(
        rows_in.data(), ld(rows_in), slot.data(), ld(slot), w.data(), ld(w), M, k, out.data(), ld(out), D);
    MAXTEXT_CUDA_LAUNCH_CHECK("moe_combine");
  }

  // ---- MoE routing and per-expert rows, per-head products (BackendMoE, BackendHeadMatmul) ------------------
  template <class G, class A = G>
  void moe_route(View<const G, 2> z, View<const G, 1> bias, const MoeRouting& r, View<std::int32_t, 2> idx,
                 View<float, 2> w, View<float, 2> scores) const {
    const std::int64_t M = z.dim(0), E = z.dim(1);
    if (M == 0) return;
    MAXTEXT_CHECK(r.n_groups <= 64, UnsupportedError, "[cuda moe_route] n_routing_groups ", r.n_groups,
                  " exceeds the kernel's 64 groups");
    const std::size_t bytes = static_cast<std::size_t>(M * 2 * E) * sizeof(float);
    auto* scratch = static_cast<float*>(memory()->allocate(bytes));
    kernels::moe_route<G, A><<<detail::grid_for(M, 128), 128, 0, stream()>>>(
        z.data(), ld(z), bias.empty() ? nullptr : bias.data(), r, M, E, scratch, idx.data(), ld(idx), w.data(), ld(w),
        scores.empty() ? nullptr : scores.data(), scores.empty() ? 0 : ld(scores));
    const cudaError_t e = cudaGetLastError();
    memory()->deallocate(scratch, bytes);
    check(e, "launch of moe_route", __FILE__, __LINE__);
  }

  template <class A>
  void gather_rows(View<const A, 2> x, View<const std::int32_t, 1> rows_idx, View<A, 2> y) const {
    const std::int64_t n = rows_idx.dim(0), D = x.dim(1);
    if (n * D == 0) return;
    kernels::gather_rows<A><<<detail::grid_for(n * D), detail::kThreads, 0, stream()>>>(x.data(), ld(x), rows_idx.data(),
                                                                                      y.data(), ld(y), n, D);
    MAXTEXT_CUDA_LAUNCH_CHECK("gather_rows");
  }

  template <class A>
  void scatter_add_rows(View<const A, 2> y, View<const std::int32_t, 1> rows_idx, View<const float, 1> w,
                        View<float, 2> acc) const {
    const std::int64_t n = rows_idx.dim(0), D = y.dim(1);
    if (n * D == 0) return;
    kernels::scatter_add_rows<A><<<detail::grid_for(n * D), detail::kThreads, 0, stream()>>>(
        y.data(), ld(y), rows_idx.data(), w.data(), acc.data(), ld(acc), n, D);
    MAXTEXT_CUDA_LAUNCH_CHECK("scatter_add_rows");
  }

  template <class X, class W, class Y>
  void head_matmul(View<const X, 3> x, const Matrix<W>& w, std::int64_t head_stride, std::int64_t row_offset,
                   bool transpose_w, View<Y, 3> y) const {
    const std::int64_t M = x.dim(0), H = x.dim(1), Kx = x.dim(2), Ny = y.dim(2);
    if (M * H * Ny == 0) return;
    MAXTEXT_DASSERT(x.stride(2) == 1 && y.stride(2) == 1);
    const dim3 grid(static_cast<unsigned>((Ny + 15) / 16), static_cast<unsigned>((M + 15) / 16), static_cast<unsigned>(H));
    kernels::head_matmul<<<grid, dim3(16, 16), 0, stream()>>>(x.data(), x.stride(0), x.stride(1), weight_rows(w),
                                                               head_stride, row_offset, transpose_w, y.data(),
                                                               y.stride(0), y.stride(1), M, Kx, Ny);
    MAXTEXT_CUDA_LAUNCH_CHECK("head_matmul");
  }

  // ---- Engram (semantics: BackendEngram in concepts.hpp; kernel in elementwise.cuh) --------------------------
  template <class A>
  void engram_gate(View<const A, 2> q, View<const A, 2> k, View<const A, 2> v, View<A, 2> y) const {
    const std::int64_t M = q.dim(0), D = v.dim(1), G = q.dim(1) / D;
    if (M * G == 0) return;
    // one warp per (row, stream)
    kernels::engram_gate<A><<<detail::grid_for(M * G * 32), detail::kThreads, 0, stream()>>>(rows(q), rows(k), rows(v),
                                                                                             rows(y), M, G, D);
    MAXTEXT_CUDA_LAUNCH_CHECK("engram_gate");
  }

  // ---- Gated DeltaNet (semantics: BackendGatedDeltaNet in concepts.hpp; kernels in gated_delta.cuh) ---------
  template <class A>
  void causal_conv1d(View<const A, 2> x, View<const A, 1> w, View<const std::int32_t, 1> start,
                     View<const std::int32_t, 1> valid, View<float, 2> state, View<A, 2> y,
                     std::int64_t dilation = 1) const {
    const std::int64_t Bn = state.dim(0), M = x.dim(0), C = x.dim(1), K = w.dim(0) / C;
    if (M == 0 || C == 0) return;
    MAXTEXT_CHECK(K >= 1 && dilation >= 1 && (K - 1) * dilation < kernels::kGdnMaxConvKernel, UnsupportedError,
                  "[cuda] causal_conv1d: kernel width ", K, " with dilation ", dilation, " spans ", (K - 1) * dilation + 1,
                  " inputs, more than ", kernels::kGdnMaxConvKernel);
    kernels::causal_conv1d<A><<<detail::grid_for(Bn * C), detail::kThreads, 0, stream()>>>(
        rows(x), w.data(), start.data(), valid.empty() ? nullptr : valid.data(), rows(state), rows(y), Bn, M / Bn, C, K,
        dilation);
    MAXTEXT_CUDA_LAUNCH_CHECK("causal_conv1d");
  }
  template <class A>
  void gated_delta_rule(View<const A, 2> q, View<const A, 2> k, View<const A, 2> v, View<const A, 2> a,
                        View<const A, 2> bt, View<const float, 1> a_log, View<const float, 1> dt_bias,
                        const GdnShape& sh, View<const std::int32_t, 1> start, View<const std::int32_t, 1> valid,
                        View<float, 2> state, View<A, 2> o) const {
    const std::int64_t Bn = state.dim(0), M = q.dim(0);
    if (M == 0) return;
    constexpr unsigned threads = 128;
    static_assert((threads & (threads - 1)) == 0, "the kernel's tree reduction needs a power-of-two block");
    const std::size_t smem = static_cast<std::size_t>(2 * sh.key_dim + 2 * threads) * sizeof(float);
    MAXTEXT_CHECK(smem <= state_->smem_optin, UnsupportedError, "[cuda] gated_delta_rule: key head dim ", sh.key_dim,
                  " needs ", smem, " bytes of shared memory");
    if (smem > (48u << 10)) {
      MAXTEXT_CUDA_CHECK(cudaFuncSetAttribute(kernels::gated_delta_rule<A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
    }
    kernels::gated_delta_rule<A><<<static_cast<unsigned>(Bn * sh.value_heads), threads, smem, stream()>>>(
        rows(q), rows(k), rows(v), rows(a), rows(bt), a_log.data(), dt_bias.data(), sh, start.data(),
        valid.empty() ? nullptr : valid.data(), rows(state), rows(o), M / Bn);
    MAXTEXT_CUDA_LAUNCH_CHECK("gated_delta_rule");
  }

  // ---- DeepSeek-V4 compressed attention (semantics: BackendCompressedAttention; kernels in compressed_attention.cuh)
  template <class A>
  void compress_pool(View<const A, 3> kv, View<const A, 3> gate, View<const A, 2> bias, std::int64_t r, bool overlap,
                     View<const std::int32_t, 1> first, View<const std::int32_t, 1> count, View<A, 3> out) const {
    const std::int64_t Bn = out.dim(0), n = out.dim(1), d = out.dim(2), F = kv.dim(2);
    MAXTEXT_DASSERT(F == (overlap ? 2 * d : d) && bias.dim(0) == r && bias.dim(1) == F && gate.dim(2) == F);
    MAXTEXT_DASSERT(kv.rows_contiguous() && gate.rows_contiguous() && bias.rows_contiguous() && out.rows_contiguous());
    if (Bn * n * d == 0) return;
    // kmath::compress_pool_feature walks kv and gate with one row stride, and the bias rows F apart.
    MAXTEXT_CHECK(kv.dim(1) <= 1 || gate.stride(1) == kv.stride(1), UnsupportedError,
                  "[cuda] compress_pool: kv and gate need the same row stride (", kv.stride(1), " vs ", gate.stride(1), ")");
    MAXTEXT_CHECK(r <= 1 || bias.stride(0) == F, UnsupportedError, "[cuda] compress_pool: bias rows must be contiguous");
    kernels::compress_pool<A><<<detail::grid_for(Bn * n * d), detail::kThreads, 0, stream()>>>(
        rows3(kv), rows3(gate), bias.data(), F, r, overlap, first.data(), count.data(), rows3(out), Bn, n, d);
    MAXTEXT_CUDA_LAUNCH_CHECK("compress_pool");
  }

  template <class A>
  void indexer_topk(View<const A, 3> q, View<const A, 2> w, View<const A, 3> blocks, View<const std::int32_t, 1> q_start,
                    std::int64_t r, float score_scale, float weight_scale, View<float, 2> scores,
                    View<std::int32_t, 2> idx) const {
    const std::int64_t M = q.dim(0), H = q.dim(1), d = q.dim(2), Bn = q_start.dim(0), S = blocks.dim(1),
                       k = idx.dim(1);
    MAXTEXT_DASSERT(Bn > 0 && M % Bn == 0 && r > 0 && blocks.dim(2) == d && scores.dim(0) == M && scores.dim(1) == S &&
                    w.dim(0) == M && w.dim(1) == H && idx.dim(0) == M);
    MAXTEXT_DASSERT(q.rows_contiguous() && w.rows_contiguous() && blocks.rows_contiguous() && scores.rows_contiguous() &&
                    idx.rows_contiguous());
    if (M == 0 || Bn == 0) return;
    const std::int64_t T = M / Bn;
    if (S > 0) {
      kernels::indexer_scores<A><<<detail::grid_for(M * S), detail::kThreads, 0, stream()>>>(
          q.data(), q.stride(0), q.stride(1), rows(w), rows3(blocks), q_start.data(), M, T, H, d, S, r, score_scale,
          weight_scale, rows(scores));
      MAXTEXT_CUDA_LAUNCH_CHECK("indexer_scores");
    }
    if (k > 0) {
      kernels::indexer_select<0><<<detail::grid_for(M, 128), 128, 0, stream()>>>(
          kernels::Rows<const float>{scores.data(), ld(scores)}, q_start.data(), M, T, S, r, rows(idx), k);
      MAXTEXT_CUDA_LAUNCH_CHECK("indexer_select");
    }
  }

  template <class A>
  void compressed_attention(View<const A, 4> q, View<const A, 3> kv, View<const A, 3> blocks,
                            View<const std::int32_t, 1> q_start, std::int64_t window, std::int64_t r,
                            View<const std::int32_t, 2> selected, View<const A, 1> sinks, const AttentionOptions& opt,
                            View<A, 4> out) const {
    kernels::CompressedAttnArgs<A> a{};
    a.q = q.data();
    a.q_b = q.stride(0), a.q_t = q.stride(1), a.q_n = q.stride(2);
    a.kv = rows3(kv);
    a.blocks = r > 0 ? rows3(blocks) : kernels::Rows3<const A>{nullptr, 0, 0};
    a.o = out.data();
    a.o_b = out.stride(0), a.o_t = out.stride(1), a.o_n = out.stride(2);
    a.B = q.dim(0), a.T = q.dim(1), a.N = q.dim(2), a.d = q.dim(3);
    a.q_start = q_start.data();
    a.window = window, a.r = r, a.Sb = r > 0 ? blocks.dim(1) : 0;
    a.selected = selected.empty() ? nullptr : selected.data();
    a.sel_ld = selected.empty() ? 0 : ld(selected);
    a.k = selected.empty() ? 0 : selected.dim(1);
    a.sinks = sinks.empty() ? nullptr : sinks.data();
    a.f32_qk = opt.float32_qk_product;
    a.f32_logits = opt.float32_logits;
    MAXTEXT_DASSERT(kv.dim(2) == a.d && (r <= 0 || blocks.dim(2) == a.d) && out.dim(0) == a.B && out.dim(1) == a.T &&
                    out.dim(2) == a.N && out.dim(3) == a.d && q_start.dim(0) == a.B);
    MAXTEXT_DASSERT(q.rows_contiguous() && kv.rows_contiguous() && blocks.rows_contiguous() && out.rows_contiguous() &&
                    (selected.empty() || selected.dim(0) == a.B * a.T));
    if (a.B * a.T * a.N == 0 || a.d == 0) return;
    const std::size_t smem = kernels::compressed_attention_smem_bytes(a.d);
    MAXTEXT_CHECK(smem <= state_->smem_optin, UnsupportedError, "[cuda] compressed_attention: head dim ", a.d, " needs ",
                  smem, " bytes of shared memory, the device allows ", state_->smem_optin);
    if (smem > (48u << 10)) {
      MAXTEXT_CUDA_CHECK(cudaFuncSetAttribute(kernels::compressed_attention<A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
    }
    constexpr int threads = 32 * kernels::kCompressedAttnWarps;
    kernels::compressed_attention<A><<<detail::grid_for(a.B * a.T * a.N * 32, threads), threads, smem, stream()>>>(a);
    MAXTEXT_CUDA_LAUNCH_CHECK("compressed_attention");
  }

 private:
  struct State {
    std::shared_ptr<DeviceMemory> dev;
    std::shared_ptr<MemoryResource> mem;
    std::unique_ptr<Gemm> gemm;
    int sms = 1;
    std::size_t smem_optin = 48u << 10;
  };

  /// Row stride of a 2-D view (a single row may report any stride).
  template <class T>
  static std::int64_t ld(const View<T, 2>& v) {
    return v.dim(0) <= 1 ? std::max<std::int64_t>(v.stride(0), v.dim(1)) : v.stride(0);
  }
  template <class T>
  static kernels::Rows<T> rows(const View<T, 2>& v) {
    return {v.data(), ld(v)};
  }
  /// Batch and row strides of a 3-D operand (the last axis contiguous).
  template <class T>
  static kernels::Rows3<T> rows3(const View<T, 3>& v) {
    return {v.data(), v.stride(0), v.stride(1)};
  }
  /// The kernels' reader of a matrix's elements (weight_rows.cuh).
  template <class W>
  static auto weight_rows(const Matrix<W>& w) {
    if constexpr (std::is_same_v<W, ggml_byte>) {
      return kernels::GgmlRows{reinterpret_cast<const std::uint8_t*>(w.data.data()), w.data.view().stride(0), w.ggml_type,
                               w.value_scale};
    } else {
      return kernels::WeightRows<W>{w.data.data(), w.data.view().stride(0)};
    }
  }
  /// y = x . W^T through this library's kernels, which read W with `wr`: one warp per output for up to 8 rows of
  /// x, 16 x 16 tiles beyond.
  template <class X, class WR, class Y>
  void kernel_products(View<const X, 2> x, WR wr, View<Y, 2> y, std::int64_t N) const {
    const std::int64_t M = x.dim(0), K = x.dim(1);
    if (M <= 8) {
      constexpr int threads = 256;
      kernels::gemv_rows<X, WR, Y, 8><<<detail::grid_for(N * 32, threads), threads, 0, stream()>>>(
          x.data(), ld(x), wr, y.data(), ld(y), M, N, K);
      MAXTEXT_CUDA_LAUNCH_CHECK("gemv_rows");
    } else {
      const dim3 grid(static_cast<unsigned>((N + 15) / 16), static_cast<unsigned>((M + 15) / 16));
      kernels::gemm_tiled<X, WR, Y><<<grid, dim3(16, 16), 0, stream()>>>(x.data(), ld(x), wr, y.data(), ld(y), M, N, K);
      MAXTEXT_CUDA_LAUNCH_CHECK("gemm_tiled");
    }
  }
  /// Rows of a runtime-typed matrix decoded per slice, at most kGgmlSliceBytes of f32 at a time.
  static constexpr std::int64_t kGgmlSliceBytes = std::int64_t{64} << 20;
  /// y = x . W^T for f32 activations and a runtime-typed W (prefill): each slice of W's rows is decoded to f32 in
  /// pool scratch (dequantize_rows) and multiplied by cuBLASLt into y's columns of those rows (f32 compute, as for
  /// f32 weights). The scratch is released in stream order.
  template <class X, class Y>
  void ggml_lt_products(View<const X, 2> x, const Matrix<ggml_byte>& w, View<Y, 2> y) const {
    if constexpr (lt_supported<X, float, Y>) {
      const std::int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
      const std::int64_t slice = std::max<std::int64_t>(1, std::min<std::int64_t>(N, kGgmlSliceBytes / (4 * K)));
      const std::size_t bytes = static_cast<std::size_t>(slice * K) * 4;
      float* scratch = static_cast<float*>(memory()->allocate(bytes));
      try {
        const kernels::GgmlRows wr = weight_rows(w);
        for (std::int64_t n0 = 0; n0 < N; n0 += slice) {
          const std::int64_t rows_n = std::min(slice, N - n0);
          kernels::dequantize_rows<<<detail::grid_for(rows_n * K), detail::kThreads, 0, stream()>>>(wr, scratch, n0,
                                                                                                   rows_n, K);
          MAXTEXT_CUDA_LAUNCH_CHECK("dequantize_rows");
          state_->gemm->run<float, Y>(x.data(), ld(x), scratch, K, y.data() + n0, ld(y), M, rows_n, K);
        }
      } catch (...) {
        memory()->deallocate(scratch, bytes);
        throw;
      }
      memory()->deallocate(scratch, bytes);
    }
  }
  /// Threads for a one-block-per-row kernel: a multiple of 32, up to 1024, about one per 4 elements.
  static unsigned row_threads(std::int64_t D) {
    const std::int64_t t = std::min<std::int64_t>(1024, std::max<std::int64_t>(32, (D / 4 + 31) / 32 * 32));
    return static_cast<unsigned>(t);
  }

  std::shared_ptr<State> state_;
};

}  // namespace maxtext::cuda

static_assert(::maxtext::Backend<::maxtext::cuda::Backend>, "cuda::Backend must satisfy the Backend concept");
static_assert(::maxtext::BackendMoE<::maxtext::cuda::Backend>, "cuda::Backend must provide the MoE kernels");
static_assert(::maxtext::BackendHeadMatmul<::maxtext::cuda::Backend>, "cuda::Backend must provide head_matmul");
static_assert(::maxtext::BackendHyperConnections<::maxtext::cuda::Backend>, "cuda::Backend must provide the mHC stream ops");
static_assert(::maxtext::BackendGatedDeltaNet<::maxtext::cuda::Backend>, "cuda::Backend must provide the Gated DeltaNet ops");
static_assert(::maxtext::BackendEngram<::maxtext::cuda::Backend>, "cuda::Backend must provide the Engram gate");
static_assert(::maxtext::BackendCompressedAttention<::maxtext::cuda::Backend>,
              "cuda::Backend must provide DeepSeek-V4's compressed attention ops");
