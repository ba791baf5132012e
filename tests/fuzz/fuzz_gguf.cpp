// tests/fuzz/fuzz_gguf.cpp: libFuzzer harness for maxtext::fuzz::fuzz_gguf (tests/fuzz/entry/gguf.hpp).
#include "entry/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_gguf(data, size);
  return 0;
}
