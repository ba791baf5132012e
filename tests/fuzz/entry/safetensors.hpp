// tests/fuzz/entry/safetensors.hpp: fuzz entry points for safetensors: a single file (read_safetensors) and a sharded
// checkpoint's model.safetensors.index.json (read_safetensors_any) next to a fixed, valid shard.
#pragma once

#include <filesystem>
#include <map>

#include "entry/exercise.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::fuzz {

inline void fuzz_safetensors(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "input.safetensors");
  attempt([&] { touch_tensors(io::read_safetensors(path)); });
}

/// The index is the fuzz input; the shard it may name, model.safetensors (tensors "a" f32 [2, 3] and "b" bf16 [4]),
/// is written once beside it.
inline void fuzz_safetensors_index(const std::uint8_t* data, std::size_t size) {
  static const bool shard_written = [] {
    std::vector<float> a = {1, 2, 3, 4, 5, 6};
    std::vector<std::uint16_t> b = {0x3f80, 0x4000, 0x4040, 0x4080};
    AnyTensor ta, tb;
    ta.dtype = DType::f32;
    ta.shape = {2, 3};
    ta.strides = AnyTensor::dense_strides(ta.shape, ta.dtype);
    ta.data = reinterpret_cast<const std::byte*>(a.data());
    tb.dtype = DType::bf16;
    tb.shape = {4};
    tb.strides = AnyTensor::dense_strides(tb.shape, tb.dtype);
    tb.data = reinterpret_cast<const std::byte*>(b.data());
    io::write_safetensors((temp_dir() / "model.safetensors").string(), {{"a", ta}, {"b", tb}}, {{"format", "pt"}});
    return true;
  }();
  (void)shard_written;
  const std::string path = write_temp(data, size, "model.safetensors.index.json");
  attempt([&] { touch_tensors(io::read_safetensors_any(path)); });
}

}  // namespace maxtext::fuzz
