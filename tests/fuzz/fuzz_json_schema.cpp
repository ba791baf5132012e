// tests/fuzz/fuzz_json_schema.cpp: libFuzzer harness for maxtext::fuzz::fuzz_json_schema (tests/fuzz/entry/grammar.hpp).
#include "entry/grammar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_json_schema(data, size);
  return 0;
}
