// io/tensor_files.hpp: named tensors from any of the formats reference dumps come in: .npz (np.savez), a directory
// of .npy files, a single .npy, or safetensors (a file or a sharded index). Used by `maxtext compare` and by
// testing/catch2.hpp; the format is chosen by the path.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/npz.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

namespace detail {
inline bool path_ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
}  // namespace detail

/// Read named tensors from `path`:
///  - a directory: every `*.npy` below it, named by its relative path without `.npy` (`a/b.npy` -> `a/b`);
///  - `*.npz`: the archive's arrays (io/npz.hpp);
///  - `*.safetensors` or `*.safetensors.index.json`: the tensors under their stored names;
///  - `*.npy`: one tensor named by the file's stem.
/// Unknown extensions and missing paths raise IoError.
inline TensorMap read_tensors(const std::string& path) {
  namespace fs = std::filesystem;
  MAXTEXT_CHECK(fs::exists(path), IoError, "[tensors] ", path, ": no such file or directory");
  if (fs::is_directory(path)) {
    TensorMap out;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(path)) {
      if (e.is_regular_file() && e.path().extension() == ".npy") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string rel = fs::relative(f, path).generic_string();
      rel.resize(rel.size() - 4);
      out.add(rel, read_npy(f.string()));
    }
    MAXTEXT_CHECK(!out.tensors.empty(), IoError, "[tensors] ", path, ": directory holds no .npy files");
    return out;
  }
  if (detail::path_ends_with(path, ".npz")) return read_npz(path);
  if (detail::path_ends_with(path, ".safetensors") || detail::path_ends_with(path, ".json")) {
    return read_safetensors_any(path);
  }
  if (detail::path_ends_with(path, ".npy")) {
    TensorMap out;
    out.add(fs::path(path).stem().string(), read_npy(path));
    return out;
  }
  MAXTEXT_THROW(IoError, "[tensors] ", path,
                ": unknown format: expected a directory of .npy files, .npz, .npy, .safetensors or a "
                "safetensors index (.json)");
}

/// One tensor from `spec`: `file.npy`, or `FILE:NAME` for a tensor inside an .npz, safetensors file or directory
/// (`dump.npz:decoder.layers_0`). A missing name lists what the file holds.
inline AnyTensor read_tensor(const std::string& spec) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(spec) && detail::path_ends_with(spec, ".npy")) return read_npy(spec);
  const auto colon = spec.rfind(':');
  MAXTEXT_CHECK(colon != std::string::npos && colon > 0, IoError, "[tensors] ", spec,
                ": expected FILE.npy or FILE:NAME (no such .npy file)");
  const std::string file = spec.substr(0, colon), name = spec.substr(colon + 1);
  const TensorMap m = read_tensors(file);
  auto it = m.tensors.find(name);
  if (it == m.tensors.end()) {
    std::string names;
    for (const auto& [k, v] : m.tensors) names += (names.empty() ? "" : ", ") + k;
    MAXTEXT_THROW(IoError, "[tensors] ", file, ": no tensor '", name, "'; it holds: ", names);
  }
  return it->second;
}

/// Write named tensors to `path`, the format chosen as read_tensors does: `.npz` (`compress` deflates),
/// `.safetensors`, or otherwise a directory (created) of `<name>.npy` files (a `/` in a name makes subdirectories).
inline void write_tensors(const std::string& path, const std::map<std::string, AnyTensor>& tensors, bool compress = false) {
  namespace fs = std::filesystem;
  if (detail::path_ends_with(path, ".npz")) {
    NpzWriteOptions o;
    o.compress = compress;
    write_npz(path, tensors, o);
    return;
  }
  if (detail::path_ends_with(path, ".safetensors")) {
    write_safetensors(path, tensors);
    return;
  }
  MAXTEXT_CHECK(!detail::path_ends_with(path, ".npy"), ArgumentError, "[tensors] ", path,
                ": a .npy file holds one tensor: use write_npy");
  fs::create_directories(path);
  for (const auto& [name, t] : tensors) {
    MAXTEXT_CHECK(!name.empty() && name.find("..") == std::string::npos && name[0] != '/', ArgumentError, "[tensors] ",
                  path, ": tensor name '", name, "' cannot be a file name");
    const fs::path f = fs::path(path) / (name + ".npy");
    fs::create_directories(f.parent_path());
    write_npy(f.string(), t);
  }
}

}  // namespace maxtext::io
