// tests/fuzz/fuzz_safetensors.cpp: libFuzzer harness for maxtext::fuzz::fuzz_safetensors (tests/fuzz/entry/safetensors.hpp).
#include "entry/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_safetensors(data, size);
  return 0;
}
