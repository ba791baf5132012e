// io/llama2c.hpp: Andrej Karpathy's llama2.c checkpoints (`run.c` format): the legacy version-0 `.bin` (a 28-byte
// header of seven int32 then float32 arrays, a negative vocab size meaning an untied classifier follows) and the
// version-1 float32 export (magic "ak42", 256-byte header); and the raw contents of its `tokenizer.bin`.
// Tensors come out zero-copy, named as llama.cpp names them (token_embd.weight, blk.i.attn_q.weight, ...), each an
// out-major [out, in] matrix; families/llama2/import.hpp maps them to MaxText names.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// The llama2.c `Config` header.
struct Llama2cHeader {
  std::int64_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  int version = 0;
  std::int64_t head_size() const { return dim / n_heads; }
};

struct Llama2cCheckpoint {
  Llama2cHeader header;
  TensorMap tensors;  ///< llama.cpp names; `output.weight` only when the classifier is not shared
  std::string path;
};

/// True when the file starts like a llama2.c version-1 export (magic "ak42" as little-endian uint32 0x616b3432).
inline bool is_llama2c_v1(const std::byte* p, std::size_t size) {
  if (size < 8) return false;
  std::uint32_t magic = 0;
  std::memcpy(&magic, p, 4);
  return magic == 0x616b3432u;
}

/// Read a llama2.c checkpoint (version 0 or version-1 float32). The file size must equal what the header implies.
inline Llama2cCheckpoint read_llama2c(const std::string& path) {
  auto file = MappedFile::open(path);
  const std::byte* base = file->data();
  const std::size_t size = file->size();
  Llama2cCheckpoint ck;
  ck.path = path;
  Llama2cHeader& h = ck.header;
  std::size_t offset = 0;
  std::int32_t raw[7] = {};
  if (is_llama2c_v1(base, size)) {
    MAXTEXT_CHECK(size >= 256, IoError, "[llama2c] ", path, ": header: expected 256 bytes, file has ", size);
    std::int32_t version = 0;
    std::memcpy(&version, base + 4, 4);
    MAXTEXT_CHECK(version == 1, UnsupportedError, "[llama2c] ", path, ": version: expected 0 (legacy) or 1 (float32), found ",
                  version, " (version 2 is the int8 export)");
    std::memcpy(raw, base + 8, sizeof(raw));
    h.version = 1;
    h.shared_classifier = static_cast<std::uint8_t>(base[8 + sizeof(raw)]) != 0;
    offset = 256;
  } else {
    MAXTEXT_CHECK(size >= 28, IoError, "[llama2c] ", path, ": header: expected 28 bytes, file has ", size);
    std::memcpy(raw, base, sizeof(raw));
    offset = 28;
  }
  h.dim = raw[0];
  h.hidden_dim = raw[1];
  h.n_layers = raw[2];
  h.n_heads = raw[3];
  h.n_kv_heads = raw[4];
  h.vocab_size = raw[5];
  h.seq_len = raw[6];
  if (h.version == 0) {
    h.shared_classifier = h.vocab_size > 0;
    if (h.vocab_size < 0) h.vocab_size = -h.vocab_size;
  }
  auto check_dim = [&](std::int64_t v, const char* name) {
    MAXTEXT_CHECK(v > 0 && v <= (std::int64_t{1} << 24), IoError, "[llama2c] ", path, ": header ", name,
                  ": expected a positive size, found ", v, " (not a llama2.c checkpoint?)");
  };
  check_dim(h.dim, "dim");
  check_dim(h.hidden_dim, "hidden_dim");
  check_dim(h.n_layers, "n_layers");
  check_dim(h.n_heads, "n_heads");
  check_dim(h.n_kv_heads, "n_kv_heads");
  check_dim(h.vocab_size, "vocab_size");
  check_dim(h.seq_len, "seq_len");
  MAXTEXT_CHECK(h.dim % h.n_heads == 0 && h.n_heads % h.n_kv_heads == 0 && h.head_size() % 2 == 0, IoError, "[llama2c] ",
                path, ": header: dim ", h.dim, ", n_heads ", h.n_heads, ", n_kv_heads ", h.n_kv_heads,
                " are inconsistent (dim % n_heads, n_heads % n_kv_heads must be 0 and the head size even)");
  const std::int64_t D = h.dim, F = h.hidden_dim, L = h.n_layers, V = h.vocab_size, Hd = h.head_size();
  const std::int64_t KV = h.n_kv_heads * Hd;
  // float counts, in file order; version 1 puts the norms first and omits the RoPE tables.
  struct Arr {
    const char* name;
    std::vector<std::int64_t> shape;
  };
  std::vector<Arr> arrays;
  if (h.version == 0) {
    arrays = {{"token_embd", {V, D}},   {"attn_norm", {L, D}},   {"attn_q", {L, D, D}},  {"attn_k", {L, KV, D}},
              {"attn_v", {L, KV, D}},   {"attn_output", {L, D, D}}, {"ffn_norm", {L, D}}, {"ffn_gate", {L, F, D}},
              {"ffn_down", {L, D, F}},  {"ffn_up", {L, F, D}},   {"output_norm", {D}},   {"freq_cis_real", {h.seq_len, Hd / 2}},
              {"freq_cis_imag", {h.seq_len, Hd / 2}}};
  } else {
    arrays = {{"attn_norm", {L, D}},     {"ffn_norm", {L, D}},    {"output_norm", {D}},   {"token_embd", {V, D}},
              {"attn_q", {L, D, D}},     {"attn_k", {L, KV, D}},  {"attn_v", {L, KV, D}}, {"attn_output", {L, D, D}},
              {"ffn_gate", {L, F, D}},   {"ffn_down", {L, D, F}}, {"ffn_up", {L, F, D}}};
  }
  if (!h.shared_classifier) arrays.push_back({"output", {V, D}});
  // Saturating sums of products: absurd headers give an absurd (never wrapped) expected size.
  constexpr std::uint64_t cap = std::uint64_t{1} << 60;
  std::uint64_t total = 0;
  for (const auto& a : arrays) {
    std::uint64_t n = 1;
    for (auto d : a.shape) n = n > cap / static_cast<std::uint64_t>(d) ? cap : n * static_cast<std::uint64_t>(d);
    total = std::min(cap, total + n);
  }
  const std::uint64_t expect = offset + total * 4;
  MAXTEXT_CHECK(size == expect, IoError, "[llama2c] ", path, ": file size: the header (dim ", D, ", hidden_dim ", F,
                ", n_layers ", L, ", n_heads ", h.n_heads, ", n_kv_heads ", h.n_kv_heads, ", vocab ", V, ", seq_len ",
                h.seq_len, h.shared_classifier ? ", shared classifier" : ", separate classifier", ") implies ", expect,
                " bytes, found ", size, " (truncated file, or not a llama2.c version-", h.version, " checkpoint?)");
  std::uint64_t pos = offset;
  for (const auto& a : arrays) {
    AnyTensor t;
    t.dtype = DType::f32;
    t.shape = a.shape;
    t.strides = AnyTensor::dense_strides(t.shape, t.dtype);
    t.data = base + pos;
    t.holder = file;
    t.source = path + ": " + a.name;
    pos += static_cast<std::uint64_t>(t.numel()) * 4;
    const std::string n = a.name;
    if (n.rfind("freq_cis", 0) == 0) continue;  // run.c recomputes the RoPE angles; so do we
    if (t.rank() == 3 || (t.rank() == 2 && (n == "attn_norm" || n == "ffn_norm"))) {
      for (std::int64_t l = 0; l < L; ++l) {
        AnyTensor s = t.select(0, l);
        s.source = t.source + "[layer " + std::to_string(l) + "]";
        ck.tensors.add("blk." + std::to_string(l) + "." + n + ".weight", std::move(s));
      }
    } else {
      ck.tensors.add(n + ".weight", std::move(t));
    }
  }
  return ck;
}

/// The contents of a llama2.c `tokenizer.bin`: pieces (bytes as stored: spaces, not U+2581) and scores, in id order.
struct Llama2cVocab {
  std::int32_t max_token_length = 0;
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

/// Read a llama2.c tokenizer.bin: int32 max_token_length, then per token float32 score, int32 length, bytes.
/// The token count is not stored: all records up to the end of the file are read (`expected_vocab` > 0 checks it).
inline Llama2cVocab read_llama2c_tokenizer(const std::string& path, std::int64_t expected_vocab = 0) {
  auto file = MappedFile::open(path);
  const std::byte* p = file->data();
  const std::size_t size = file->size();
  Llama2cVocab v;
  MAXTEXT_CHECK(size >= 4, IoError, "[llama2c] ", path, ": tokenizer header: expected 4 bytes, file has ", size);
  std::memcpy(&v.max_token_length, p, 4);
  MAXTEXT_CHECK(v.max_token_length > 0 && v.max_token_length < (1 << 20), IoError, "[llama2c] ", path,
                ": max_token_length: expected a positive length, found ", v.max_token_length);
  std::size_t pos = 4;
  while (pos < size) {
    const std::size_t id = v.pieces.size();
    MAXTEXT_CHECK(size - pos >= 8, IoError, "[llama2c] ", path, ": token ", id, ": record header needs 8 bytes at offset ",
                  pos, ", only ", size - pos, " remain (truncated file?)");
    float score = 0;
    std::int32_t len = 0;
    std::memcpy(&score, p + pos, 4);
    std::memcpy(&len, p + pos + 4, 4);
    pos += 8;
    MAXTEXT_CHECK(len >= 0 && static_cast<std::size_t>(len) <= size - pos, IoError, "[llama2c] ", path, ": token ", id,
                  ": length ", len, " at offset ", pos - 4, " runs past the end of the file (", size - pos,
                  " bytes remain)");
    MAXTEXT_CHECK(len <= v.max_token_length, IoError, "[llama2c] ", path, ": token ", id, ": length ", len,
                  " exceeds max_token_length ", v.max_token_length);
    v.pieces.emplace_back(reinterpret_cast<const char*>(p + pos), static_cast<std::size_t>(len));
    v.scores.push_back(score);
    pos += static_cast<std::size_t>(len);
  }
  MAXTEXT_CHECK(!v.pieces.empty(), IoError, "[llama2c] ", path, ": no tokens");
  MAXTEXT_CHECK(expected_vocab <= 0 || static_cast<std::int64_t>(v.pieces.size()) == expected_vocab, IoError,
                "[llama2c] ", path, ": expected ", expected_vocab, " tokens (the model's vocab_size), found ", v.pieces.size());
  return v;
}

}  // namespace maxtext::io
