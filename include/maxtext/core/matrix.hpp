// core/matrix.hpp: a weight matrix as the backends consume it, and the scratch arena for activations.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/core/tensor.hpp"

namespace maxtext {

/// A 2-D weight in "out-major" layout: rows = output features, cols = input (contracted) features, so a
/// projection computes y[m, n] = sum_k x[m, k] * W[n, k]. MaxText kernels [in..., out...] are transposed into this
/// layout at load; Hugging Face / GGUF / llama2.c matrices already have it (and load without a copy when the dtype
/// matches). For block types (Q8_0) `data` holds [rows, cols / 32] blocks. Runtime-typed matrices (W = ggml_byte)
/// hold [rows, row bytes]: each row the blocks of ggml type `ggml_type` (F32, F16, BF16, Q8_0, Q4_K, Q6_K, ...).
/// An embedding table [vocab, embed] is a Matrix too: a row gather for lookup, a plain product for tied logits.
template <class W>
struct Matrix {
  Tensor<W, 2> data;
  std::int64_t rows = 0;  ///< output features
  std::int64_t cols = 0;  ///< input features
  /// Backend-private re-layout (e.g. panels packed for a GEMM micro-kernel); built once by the backend. Where the
  /// loader made `data` only to be packed (a transposed or converted copy), the CPU backend releases `data` and the
  /// panels are the one copy (the backend's unpacked() / row reads rebuild rows from them).
  std::shared_ptr<const void> packed;
  /// W = ggml_byte only: the ggml type of every row's blocks (quant::type_info), and a factor the values carry
  /// beyond the blocks' (io::GgmlMatrix::value_scale; backends apply it after decoding, 1 almost always).
  std::uint32_t ggml_type = 0;
  double value_scale = 1.0;

  /// No weight at all. A matrix whose backend released its out-major copy once packed (CpuBackend::release_rows)
  /// keeps only `packed`, and is not empty.
  bool empty() const { return data.empty() && !packed; }
  /// Storage units per row: elements; Q8_0 blocks; bytes for runtime-typed matrices.
  std::int64_t storage_cols() const {
    if constexpr (std::is_same_v<W, ggml_byte>) {
      return quant::row_bytes(ggml_type, cols);
    } else {
      return cols / dtype_block(dtype_of<W>);
    }
  }
};

/// Bump allocator for activations: buffers are carved from large chunks and returned wholesale by `release`.
/// Pointers stay valid until released (chunks never move); after a release to the start, chunks are merged so that
/// steady-state forwards allocate nothing.
class Scratch {
 public:
  explicit Scratch(std::shared_ptr<MemoryResource> mem = host_memory()) : mem_(std::move(mem)) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&&) noexcept = default;
  Scratch& operator=(Scratch&&) noexcept = default;

  struct Mark {
    std::size_t chunk = 0;
    std::size_t offset = 0;
  };

  Mark mark() const { return {current_, chunks_.empty() ? 0 : chunks_[current_].used}; }
  void release(Mark m) {
    if (chunks_.empty()) return;
    for (std::size_t c = m.chunk + 1; c < chunks_.size(); ++c) chunks_[c].used = 0;
    current_ = m.chunk;
    chunks_[current_].used = m.offset;
    if (m.chunk == 0 && m.offset == 0 && chunks_.size() > 1) {  // coalesce at the start of a pass
      std::size_t total = 0;
      for (auto& c : chunks_) total += c.size;
      chunks_.clear();
      add_chunk(total);
      current_ = 0;
    }
  }
  void reset() { release(Mark{}); }

  template <class T, int R>
  View<T, R> alloc(const Shape<R>& shape) {
    const std::size_t bytes = round_up(static_cast<std::size_t>(numel<R>(shape)) * sizeof(T));
    return View<T, R>(static_cast<T*>(take(bytes)), shape);
  }
  std::size_t capacity() const {
    std::size_t t = 0;
    for (auto& c : chunks_) t += c.size;
    return t;
  }

 private:
  struct Chunk {
    std::shared_ptr<void> mem;
    std::size_t size = 0;
    std::size_t used = 0;
  };
  static std::size_t round_up(std::size_t b) { return (b + 63) & ~std::size_t{63}; }
  void add_chunk(std::size_t bytes) {
    bytes = std::max<std::size_t>(round_up(bytes), std::size_t{1} << 20);
    void* p = mem_->allocate(bytes);
    auto mem = mem_;
    chunks_.push_back(Chunk{std::shared_ptr<void>(p, [mem, bytes](void* q) { mem->deallocate(q, bytes); }), bytes, 0});
  }
  void* take(std::size_t bytes) {
    if (chunks_.empty()) add_chunk(bytes);
    while (chunks_[current_].used + bytes > chunks_[current_].size) {
      if (current_ + 1 == chunks_.size()) add_chunk(std::max(bytes, chunks_[current_].size * 2));
      ++current_;
      chunks_[current_].used = 0;
    }
    Chunk& c = chunks_[current_];
    void* p = static_cast<char*>(c.mem.get()) + c.used;
    c.used += bytes;
    return p;
  }

  std::shared_ptr<MemoryResource> mem_;
  std::vector<Chunk> chunks_;
  std::size_t current_ = 0;
};

/// RAII: release everything a scope allocated from a Scratch.
class ScratchScope {
 public:
  explicit ScratchScope(Scratch& s) : s_(s), m_(s.mark()) {}
  ~ScratchScope() { s_.release(m_); }
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  Scratch& s_;
  Scratch::Mark m_;
};

}  // namespace maxtext
