// tests/fuzz/fuzz_audio.cpp: libFuzzer harness for maxtext::fuzz::fuzz_audio (tests/fuzz/entry/audio.hpp).
#include "entry/audio.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  maxtext::fuzz::fuzz_audio(data, size);
  return 0;
}
