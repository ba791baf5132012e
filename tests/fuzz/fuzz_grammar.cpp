// tests/fuzz/fuzz_grammar.cpp: libFuzzer harness for maxtext::fuzz::fuzz_grammar (tests/fuzz/entry/grammar.hpp).
#include "entry/grammar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_grammar(data, size);
  return 0;
}
