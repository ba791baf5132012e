// tests/fuzz/entry/tokenizers.hpp: fuzz entry points for Hugging Face tokenizer.json (HfTokenizer::from_file, then
// encode/decode a fixed text) and SentencePiece .model files (through libsentencepiece, when the build has it).
#pragma once

#include "entry/exercise.hpp"
#include "maxtext/tokenizer/hf_tokenizer.hpp"
#include "maxtext/tokenizer/tokenizer.hpp"

namespace maxtext::fuzz {

/// The input is a tokenizer.json; no tokenizer_config.json lies beside it (the name's stem is "input.").
inline void fuzz_hf_tokenizer(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "input.tokenizer.json");
  attempt([&] { exercise_tokenizer(*tokenizer::HfTokenizer::from_file(path)); });
}

/// The input is a SentencePiece .model (a protobuf), opened as open_tokenizer opens one.
inline void fuzz_spm_model(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "input.model");
  attempt([&] { exercise_tokenizer(*tokenizer::open_tokenizer(path)); });
}

}  // namespace maxtext::fuzz
