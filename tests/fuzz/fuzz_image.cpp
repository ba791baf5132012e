// tests/fuzz/fuzz_image.cpp: libFuzzer harness for maxtext::fuzz::fuzz_image (tests/fuzz/entry/image.hpp).
#include "entry/image.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_image(data, size);
  return 0;
}
