// io/npz.hpp: NumPy .npz archives (np.savez / np.savez_compressed): a ZIP of `<name>.npy` members, read into and
// written from a TensorMap. Stored members are zero-copy views into the mapped file when their data is aligned for
// the dtype (an aligned copy otherwise); deflated members are inflated once. See io/zip.hpp for the container.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/zip.hpp"

namespace maxtext::io {

struct NpzWriteOptions {
  bool compress = false;     ///< deflate members, as np.savez_compressed
  bool force_zip64 = false;  ///< Zip64 records for every member (otherwise only where sizes/offsets need them)
};

/// Read every array of an .npz file; names are the member names without their `.npy` suffix (as np.load gives).
/// A member that is not a `.npy` array, a bad CRC, an unsupported compression method or a truncated file raises
/// IoError naming the file and the member.
inline TensorMap read_npz(const std::string& path) {
  const ZipReader zip = ZipReader::open(path);
  TensorMap out;
  for (const auto& e : zip.entries()) {
    if (!e.name.empty() && e.name.back() == '/') continue;  // a directory entry
    MAXTEXT_CHECK(e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".npy") == 0, IoError, "[npz] ", path,
                  ": member '", e.name, "' is not a .npy array (an .npz holds only <name>.npy members)");
    const ZipBytes b = zip.read(e);
    const std::string name = e.name.substr(0, e.name.size() - 4);
    MAXTEXT_CHECK(!out.has(name), IoError, "[npz] ", path, ": member '", e.name, "' appears twice");
    out.add(name, parse_npy(b.data, b.size, b.holder, path + ":" + name));
  }
  return out;
}

/// Serialise tensors as .npz bytes (member `<name>.npy` per tensor, C order).
inline std::vector<std::byte> npz_bytes(const std::map<std::string, AnyTensor>& tensors, NpzWriteOptions opt = {}) {
  ZipWriter zip(opt.force_zip64);
  for (const auto& [name, t] : tensors) {
    const auto npy = npy_bytes(t);
    zip.add(name + ".npy", npy.data(), npy.size(), opt.compress);
  }
  return zip.finish();
}

/// Write tensors to an .npz file readable by np.load (bf16 arrays load as '<V2'; see io/npy.hpp).
inline void write_npz(const std::string& path, const std::map<std::string, AnyTensor>& tensors, NpzWriteOptions opt = {}) {
  const auto b = npz_bytes(tensors, opt);
  write_file(path, b.data(), b.size());
}

}  // namespace maxtext::io
