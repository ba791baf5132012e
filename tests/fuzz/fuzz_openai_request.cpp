// tests/fuzz/fuzz_openai_request.cpp: libFuzzer harness for maxtext::fuzz::fuzz_openai_request
// (tests/fuzz/entry/server.hpp).
#include "entry/server.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_openai_request(data, size);
  return 0;
}
