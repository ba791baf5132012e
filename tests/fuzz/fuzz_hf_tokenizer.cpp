// tests/fuzz/fuzz_hf_tokenizer.cpp: libFuzzer harness for maxtext::fuzz::fuzz_hf_tokenizer (tests/fuzz/entry/tokenizers.hpp).
#include "entry/tokenizers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_hf_tokenizer(data, size);
  return 0;
}
