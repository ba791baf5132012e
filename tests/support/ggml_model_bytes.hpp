// Whether a model with runtime-typed weights (Policy<B, ggml_byte, ...>) holds a GGUF file's matrices as the file has
// them: the bytes of its matrices per ggml type, and the file's matrix bytes to compare their sum with. A matrix
// decoded to F32 or widened on the way would show as type 0 / 1 bytes or as a different total.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/layers/params.hpp"

namespace maxtext::test {

/// Bytes of a model's matrices per ggml type (model.visit(counter)), each storage counted once (a tied head viewing
/// the embedding's bytes adds nothing). Reads no matrix data: works for device-resident weights too.
struct GgmlTypeBytes : layers::PathStack {
  std::map<std::uint32_t, std::int64_t> bytes;
  std::set<const void*> seen;
  void add(const Matrix<ggml_byte>& m) {
    if (seen.insert(m.data.data()).second) bytes[m.ggml_type] += m.rows * m.storage_cols();
  }
  void matrix(std::string_view, Matrix<ggml_byte>& m, const layers::KernelSpec&) { add(m); }
  void table(std::string_view, Matrix<ggml_byte>& m, std::int64_t, std::int64_t, const layers::VectorSpec&) { add(m); }
  template <class T>
  void vector(std::string_view, T&, const layers::VectorSpec&) {}
  std::int64_t total() const {
    std::int64_t t = 0;
    for (const auto& [type, b] : bytes) t += b;
    return t;
  }
};

/// The bytes of a GGUF file's matrices: its block tensors and its F32 / F16 / BF16 tensors of two or more dimensions.
inline std::int64_t gguf_matrix_bytes(const std::string& path) {
  const io::GgufFile g = io::read_gguf(path);
  std::int64_t bytes = 0;
  for (const auto& b : g.block_tensors) bytes += static_cast<std::int64_t>(b.bytes);
  for (const auto& [name, t] : g.tensors.tensors) {
    if (t.rank() >= 2) bytes += t.numel() / dtype_block(t.dtype) * static_cast<std::int64_t>(dtype_size(t.dtype));
  }
  return bytes;
}

}  // namespace maxtext::test
