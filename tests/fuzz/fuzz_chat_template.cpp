// tests/fuzz/fuzz_chat_template.cpp: libFuzzer harness for maxtext::fuzz::fuzz_chat_template (tests/fuzz/entry/chat_template.hpp).
#include "entry/chat_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_chat_template(data, size);
  return 0;
}
