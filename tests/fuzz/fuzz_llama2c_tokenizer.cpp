// tests/fuzz/fuzz_llama2c_tokenizer.cpp: libFuzzer harness for maxtext::fuzz::fuzz_llama2c_tokenizer (tests/fuzz/entry/llama2c.hpp).
#include "entry/llama2c.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_llama2c_tokenizer(data, size);
  return 0;
}
