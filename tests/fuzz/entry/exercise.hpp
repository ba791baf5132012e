// tests/fuzz/entry/exercise.hpp: what the fuzz entry points do with what a reader returns (touch tensor bytes,
// encode/decode with a tokenizer), so that a reader that accepts a bad file is caught where the bytes are used.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/io/convert.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/tokenizer/spm.hpp"

namespace maxtext::fuzz {

/// Reads a spread of elements (first, last and up to 64 between) and, for small float or Q8_0 tensors of rank >= 2,
/// converts the whole tensor to a float matrix as the model loaders do.
inline void touch_tensor(const AnyTensor& t) {
  const std::int64_t n = t.numel();
  if (n <= 0) return;
  double acc = 0;
  const std::int64_t step = std::max<std::int64_t>(1, n / 64);
  for (std::int64_t i = 0; i < n; i += step) acc += t.element(i);
  acc += t.element(n - 1);
  if (t.rank() >= 2 && n <= (1 << 16) && (dtype_is_float(t.dtype) || t.dtype == DType::q8_0)) {
    std::vector<int> perm(static_cast<std::size_t>(t.rank()));
    std::iota(perm.begin(), perm.end(), 0);
    attempt([&] { (void)io::to_matrix<float>(t, perm, t.rank() - 1); });
  }
  volatile double sink = acc;
  (void)sink;
}

inline void touch_tensors(const io::TensorMap& m) {
  for (const auto& [name, t] : m.tensors) touch_tensor(t);
}

/// Encodes a fixed text (ASCII, accents, CJK, emoji, control characters, special-token look-alikes), decodes the ids,
/// decodes the first 256 ids and the last one piece by piece, and asks for ids outside the vocabulary (which must be
/// refused with an error, not read out of bounds).
inline void exercise_tokenizer(const tokenizer::Tokenizer& tok) {
  static const std::string text =
      "Hello, world! It's 2024: 3.14159 apples\tand\n\n  spaces.  H\xc3\xa9llo \xe4\xbd\xa0\xe5\xa5\xbd "
      "\xf0\x9f\x98\x80 <s></s><|endoftext|><unk> \xe2\x96\x81x \x01\x7f end";
  attempt([&] {
    const auto ids = tok.encode(text);
    (void)tok.decode(ids);
    (void)tok.decode(ids, false);
  });
  attempt([&] { (void)tok.encode(text, false); });
  attempt([&] { (void)tok.encode(""); });
  const std::int64_t v = tok.vocab_size();
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < std::min<std::int64_t>(v, 256); ++i) ids.push_back(static_cast<std::int32_t>(i));
  if (v > 0) ids.push_back(static_cast<std::int32_t>(v - 1));
  attempt([&] { (void)tok.decode(ids); });
  std::int32_t prev = -1;
  for (std::int32_t id : ids) {
    attempt([&] { (void)tok.piece(prev, id); });
    (void)tok.id_to_token(id);
    prev = id;
  }
  for (std::int64_t bad : {std::int64_t{-1}, v, v + 1, std::int64_t{0x7fffffff}}) {
    if (bad > 0x7fffffff) continue;
    attempt([&] { (void)tok.decode({static_cast<std::int32_t>(bad)}); });
    attempt([&] { (void)tok.piece(-1, static_cast<std::int32_t>(bad)); });
    (void)tok.id_to_token(static_cast<std::int32_t>(bad));
  }
  (void)tok.eos_ids();
  (void)tok.token_to_id("Hello");
}

}  // namespace maxtext::fuzz
