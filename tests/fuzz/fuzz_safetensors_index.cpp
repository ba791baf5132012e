// tests/fuzz/fuzz_safetensors_index.cpp: libFuzzer harness for maxtext::fuzz::fuzz_safetensors_index (tests/fuzz/entry/safetensors.hpp).
#include "entry/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_safetensors_index(data, size);
  return 0;
}
