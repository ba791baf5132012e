// tests/fuzz/entry/npy.hpp: fuzz entry points for .npy (parse_npy, in memory) and .npz / ZIP archives (ZipReader in
// memory over every member, then read_npz on the file).
#pragma once

#include "entry/exercise.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/npz.hpp"
#include "maxtext/io/zip.hpp"

namespace maxtext::fuzz {

inline void fuzz_npy(const std::uint8_t* data, std::size_t size) {
  attempt([&] {
    touch_tensor(io::parse_npy(reinterpret_cast<const std::byte*>(data), size, nullptr, "input.npy"));
  });
}

inline void fuzz_npz(const std::uint8_t* data, std::size_t size) {
  attempt([&] {
    const io::ZipReader zip(reinterpret_cast<const std::byte*>(data), size, nullptr, "input.zip");
    for (const auto& e : zip.entries()) {
      attempt([&] {
        const io::ZipBytes b = zip.read(e);
        volatile std::uint32_t sink = b.size ? static_cast<std::uint32_t>(b.data[b.size - 1]) : 0u;
        (void)sink;
      });
    }
  });
  const std::string path = write_temp(data, size, "input.npz");
  attempt([&] { touch_tensors(io::read_npz(path)); });
}

}  // namespace maxtext::fuzz
