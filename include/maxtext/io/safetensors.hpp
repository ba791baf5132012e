// io/safetensors.hpp: read (memory-mapped, zero-copy) and write safetensors files, and the TensorMap they produce.
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, "__metadata__"},
// then the packed data; offsets are relative to the end of the header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/io/mapped_file.hpp"

namespace maxtext::io {

/// Named tensors (and string metadata) from one or more files.
struct TensorMap {
  std::map<std::string, AnyTensor> tensors;
  std::map<std::string, std::string> metadata;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const AnyTensor& at(const std::string& name) const {
    auto it = tensors.find(name);
    MAXTEXT_CHECK(it != tensors.end(), IoError, "[weights] missing tensor '", name, "'");
    return it->second;
  }
  void add(const std::string& name, AnyTensor t) {
    MAXTEXT_CHECK(tensors.emplace(name, std::move(t)).second, IoError, "[weights] duplicate tensor '", name, "'");
  }
};

/// The weight storage that keeps a file's matrices as they are, for AnyModelOptions::weight_type: "float16",
/// "bfloat16" or "q8_0" when every tensor of two or more dimensions (matrices, embedding tables, expert stacks) has
/// that type; "" otherwise (float32 files, the block types that are decoded to float32 at load, files that mix
/// types, as llama.cpp's quantiser does when it keeps a router in F32). Vectors (norm scales, biases) do not count:
/// models store them in the activation type. io::load_weights records it for the file (LoadedWeights).
inline std::string native_weight_type(const TensorMap& t) {
  std::optional<DType> common;
  for (const auto& kv : t.tensors) {
    const AnyTensor& a = kv.second;
    if (a.rank() < 2) continue;
    if (common && *common != a.dtype) return "";
    common = a.dtype;
  }
  if (!common) return "";
  switch (*common) {
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::q8_0: return "q8_0";
    default: return "";
  }
}

namespace detail {
inline DType safetensors_dtype(const std::string& s, const std::string& where) {
  if (s == "F64") return DType::f64;
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16;
  if (s == "F8_E4M3") return DType::f8_e4m3;
  if (s == "I64") return DType::i64;
  if (s == "I32") return DType::i32;
  if (s == "I16") return DType::i16;
  if (s == "I8") return DType::i8;
  if (s == "U8") return DType::u8;
  if (s == "BOOL") return DType::boolean;
  MAXTEXT_THROW(IoError, "[safetensors] ", where, ": unsupported dtype '", s, "'");
}
inline const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f8_e4m3: return "F8_E4M3";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::i16: return "I16";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
    case DType::q8_0: case DType::ggml: break;
  }
  MAXTEXT_THROW(UnsupportedError, "[safetensors] dtype ", dtype_name(t), " cannot be written to safetensors");
}
}  // namespace detail

/// Parse a safetensors file. Tensors are zero-copy views into the mapping, kept alive by their holders.
/// Malformed headers, out-of-range or inconsistent offsets and unknown dtypes raise IoError naming file and tensor.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API TensorMap read_safetensors(const std::string& path) {
  auto file = MappedFile::open(path);
  const std::size_t size = file->size();
  MAXTEXT_CHECK(size >= 8, IoError, "[safetensors] ", path, ": file too short (", size, " bytes) for the header length");
  std::uint64_t hlen = 0;
  std::memcpy(&hlen, file->data(), 8);
  MAXTEXT_CHECK(hlen <= size - 8, IoError, "[safetensors] ", path, ": header length ", hlen, " exceeds the file size ",
                size, " (truncated file?)");
  const char* hp = reinterpret_cast<const char*>(file->data()) + 8;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hp, hp + hlen);
  } catch (const std::exception& e) {
    MAXTEXT_THROW(IoError, "[safetensors] ", path, ": header is not valid JSON: ", e.what());
  }
  MAXTEXT_CHECK(header.is_object(), IoError, "[safetensors] ", path, ": header is not a JSON object");
  const std::byte* base = file->data() + 8 + hlen;
  const std::uint64_t data_size = size - 8 - hlen;
  TensorMap out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      MAXTEXT_CHECK(v.is_object(), IoError, "[safetensors] ", path, ": __metadata__ must be an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        out.metadata[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      }
      continue;
    }
    const std::string where = path + ": " + name;
    MAXTEXT_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), IoError,
                  "[safetensors] ", where, ": entry needs dtype, shape and data_offsets");
    MAXTEXT_CHECK(v["dtype"].is_string() && v["shape"].is_array() && v["data_offsets"].is_array() &&
                      v["data_offsets"].size() == 2,
                  IoError, "[safetensors] ", where, ": malformed entry ", v.dump());
    AnyTensor t;
    t.dtype = detail::safetensors_dtype(v["dtype"].get<std::string>(), where);
    for (const auto& d : v["shape"]) {
      MAXTEXT_CHECK(d.is_number_integer() && d.get<std::int64_t>() >= 0, IoError, "[safetensors] ", where,
                    ": bad shape ", v["shape"].dump());
      t.shape.push_back(d.get<std::int64_t>());
    }
    const std::int64_t n = checked_numel(t.shape, "safetensors", where);
    const auto& off = v["data_offsets"];
    MAXTEXT_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(), IoError, "[safetensors] ", where,
                  ": bad data_offsets ", off.dump());
    const std::uint64_t b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    MAXTEXT_CHECK(b <= e && e <= data_size, IoError, "[safetensors] ", where, ": data_offsets [", b, ", ", e,
                  ") outside the data section of ", data_size, " bytes (truncated file?)");
    const std::uint64_t expect = static_cast<std::uint64_t>(n) * dtype_size(t.dtype);
    MAXTEXT_CHECK(e - b == expect, IoError, "[safetensors] ", where, ": ", dtype_name(t.dtype), " ", t.shape, " needs ",
                  expect, " bytes, data_offsets give ", e - b);
    ranges.emplace_back(b, e);
    t.strides = AnyTensor::dense_strides(t.shape, t.dtype);
    t.data = base + b;
    t.holder = file;
    t.source = where;
    t.ensure_aligned(static_cast<std::size_t>(expect));  // a header length not a multiple of 8 misaligns the data
    out.add(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    MAXTEXT_CHECK(ranges[i].first >= ranges[i - 1].second, IoError, "[safetensors] ", path,
                  ": tensor data ranges overlap at byte ", ranges[i].first);
  }
  return out;
}
#else
TensorMap read_safetensors(const std::string& path);
#endif

/// Write tensors (any layout; written contiguous) and string metadata to a safetensors file.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void write_safetensors(const std::string& path, const std::map<std::string, AnyTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::vector<std::pair<const AnyTensor*, std::uint64_t>> order;
  for (const auto& [name, t] : tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype);
    header[name] = {{"dtype", detail::safetensors_dtype_name(t.dtype)}, {"shape", t.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    order.emplace_back(&t, offset);
    offset += bytes;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // keep the data section 8-byte aligned
  std::vector<std::byte> buf(8 + h.size() + offset);
  const std::uint64_t hl = h.size();
  std::memcpy(buf.data(), &hl, 8);
  std::memcpy(buf.data() + 8, h.data(), h.size());
  std::byte* data = buf.data() + 8 + h.size();
  for (const auto& [t, off] : order) {
    const std::size_t es = dtype_size(t->dtype);
    if (t->is_contiguous()) {
      std::memcpy(data + off, t->data, static_cast<std::size_t>(t->numel()) * es);
      continue;
    }
    // Gather a strided tensor element by element (row-major logical order).
    const std::int64_t n = t->numel();
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t rem = i, so = 0;
      for (int d = t->rank() - 1; d >= 0; --d) {
        const auto u = static_cast<std::size_t>(d);
        so += (rem % t->shape[u]) * t->strides[u];
        rem /= t->shape[u];
      }
      std::memcpy(data + off + static_cast<std::size_t>(i) * es, t->data + static_cast<std::size_t>(so) * es, es);
    }
  }
  write_file(path, buf.data(), buf.size());
}
#else
void write_safetensors(const std::string& path, const std::map<std::string, AnyTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});
#endif

/// Read a sharded checkpoint through its `model.safetensors.index.json` (weight_map: tensor -> shard file), or a
/// single file. Shards are resolved relative to the index; a tensor listed but absent from its shard is an error.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API TensorMap read_safetensors_any(const std::string& path) {
  const bool is_index = path.size() > 5 && path.substr(path.size() - 5) == ".json";
  if (!is_index) return read_safetensors(path);
  nlohmann::json idx;
  try {
    idx = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    MAXTEXT_THROW(IoError, "[safetensors] ", path, ": index is not valid JSON: ", e.what());
  }
  MAXTEXT_CHECK(idx.is_object() && idx.contains("weight_map") && idx["weight_map"].is_object(), IoError,
                "[safetensors] ", path, ": index has no weight_map object");
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  std::map<std::string, TensorMap> shards;
  TensorMap out;
  for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
    MAXTEXT_CHECK(it.value().is_string(), IoError, "[safetensors] ", path, ": weight_map[", it.key(), "] is not a file name");
    const std::string shard = it.value().get<std::string>();
    MAXTEXT_CHECK(shard.find("..") == std::string::npos && (shard.empty() || shard[0] != '/'), IoError,
                  "[safetensors] ", path, ": shard name '", shard, "' must be a plain file name");
    auto sit = shards.find(shard);
    if (sit == shards.end()) sit = shards.emplace(shard, read_safetensors(dir + shard)).first;
    auto tit = sit->second.tensors.find(it.key());
    MAXTEXT_CHECK(tit != sit->second.tensors.end(), IoError, "[safetensors] ", path, ": tensor '", it.key(),
                  "' is mapped to ", shard, " but that shard does not contain it");
    out.add(it.key(), tit->second);
  }
  for (auto& [name, shard] : shards) {
    for (auto& [k, v] : shard.metadata) out.metadata[k] = v;
  }
  return out;
}
#else
TensorMap read_safetensors_any(const std::string& path);
#endif

}  // namespace maxtext::io
