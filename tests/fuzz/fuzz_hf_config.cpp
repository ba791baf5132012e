// tests/fuzz/fuzz_hf_config.cpp: libFuzzer harness for maxtext::fuzz::fuzz_hf_config (tests/fuzz/entry/configs.hpp).
#include "entry/configs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_hf_config(data, size);
  return 0;
}
