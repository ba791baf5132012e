// tests/models/test_gemma_family.cpp (gemma / gemma2 / gemma3 layers and models, HF and GGUF import) on the CUDA
// backend: the same fixtures and tolerances as on the CPU, so a pass means the GPU agrees with the CPU within them.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_gemma_family.cpp"
