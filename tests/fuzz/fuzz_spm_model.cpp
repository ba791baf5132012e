// tests/fuzz/fuzz_spm_model.cpp: libFuzzer harness for maxtext::fuzz::fuzz_spm_model (tests/fuzz/entry/tokenizers.hpp).
#include "entry/tokenizers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_spm_model(data, size);
  return 0;
}
