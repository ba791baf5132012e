// tests/fuzz/fuzz_npz.cpp: libFuzzer harness for maxtext::fuzz::fuzz_npz (tests/fuzz/entry/npy.hpp).
#include "entry/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_npz(data, size);
  return 0;
}
