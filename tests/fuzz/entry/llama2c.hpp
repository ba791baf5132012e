// tests/fuzz/entry/llama2c.hpp: fuzz entry points for llama2.c checkpoints (read_llama2c, config_from_llama2c) and
// llama2.c tokenizer.bin vocabularies (SpmTokenizer::from_llama2c, then encode/decode).
#pragma once

#include "entry/exercise.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/io/llama2c.hpp"
#include "maxtext/tokenizer/spm.hpp"

namespace maxtext::fuzz {

inline void fuzz_llama2c(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "input.bin");
  attempt([&] {
    const io::Llama2cCheckpoint ck = io::read_llama2c(path);
    touch_tensors(ck.tensors);
    attempt([&] { io::config_from_llama2c(ck.header).validate(); });
  });
}

inline void fuzz_llama2c_tokenizer(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "tokenizer.bin");
  attempt([&] { exercise_tokenizer(tokenizer::SpmTokenizer::from_llama2c(path)); });
}

}  // namespace maxtext::fuzz
