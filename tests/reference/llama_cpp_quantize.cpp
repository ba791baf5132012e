// tests/reference/llama_cpp_quantize.cpp: quantise a GGUF with llama.cpp's own quantiser (llama_model_quantize in
// libllama, the function the llama-quantize tool calls, with llama-quantize's default options), for use while
// llama-quantize itself is not built. Not part of the build:
//   L=/work/peers/llama.cpp
//   g++ -std=c++17 -O2 tests/reference/llama_cpp_quantize.cpp -I$L/include -I$L/ggml/include \
//       -L$L/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o /tmp/llama_cpp_quantize
//   /tmp/llama_cpp_quantize IN-F32.gguf OUT.gguf Q4_K_M      (Q4_K_M, Q5_K_M, Q6_K, Q4_0, IQ4_XS, Q3_K_M, Q2_K)
#include <cstdio>
#include <cstring>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s IN.gguf OUT.gguf TYPE\n", argv[0]);
    return 2;
  }
  struct Named {
    const char* name;
    llama_ftype ftype;
  };
  const Named types[] = {{"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},
                         {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},     {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
                         {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS}, {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
                         {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K}};
  llama_model_quantize_params p = llama_model_quantize_default_params();
  p.nthread = 1;
  bool found = false;
  for (const auto& t : types) {
    if (std::strcmp(t.name, argv[3]) == 0) {
      p.ftype = t.ftype;
      found = true;
    }
  }
  if (!found) {
    std::fprintf(stderr, "unknown type %s\n", argv[3]);
    return 2;
  }
  llama_backend_init();
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  llama_backend_free();
  if (rc != 0) std::fprintf(stderr, "llama_model_quantize failed (%u)\n", rc);
  return rc == 0 ? 0 : 1;
}
