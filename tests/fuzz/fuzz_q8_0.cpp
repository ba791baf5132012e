// tests/fuzz/fuzz_q8_0.cpp: libFuzzer harness for maxtext::fuzz::fuzz_q8_0 (tests/fuzz/entry/q8_0.hpp).
#include "entry/q8_0.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_q8_0(data, size);
  return 0;
}
