// tests/fuzz/fuzz_quant_blocks.cpp: libFuzzer harness for maxtext::fuzz::fuzz_quant_blocks
// (tests/fuzz/entry/quant_blocks.hpp).
#include "entry/quant_blocks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_quant_blocks(data, size);
  return 0;
}
