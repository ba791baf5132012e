// tests/fuzz/fuzz_npy.cpp: libFuzzer harness for maxtext::fuzz::fuzz_npy (tests/fuzz/entry/npy.hpp).
#include "entry/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_npy(data, size);
  return 0;
}
