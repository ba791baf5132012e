// tests/fuzz/fuzz_llama2c.cpp: libFuzzer harness for maxtext::fuzz::fuzz_llama2c (tests/fuzz/entry/llama2c.hpp).
#include "entry/llama2c.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_llama2c(data, size);
  return 0;
}
