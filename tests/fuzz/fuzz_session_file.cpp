// tests/fuzz/fuzz_session_file.cpp: libFuzzer harness for maxtext::fuzz::fuzz_session_file (tests/fuzz/entry/session.hpp).
#include "entry/session.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_session_file(data, size);
  return 0;
}
