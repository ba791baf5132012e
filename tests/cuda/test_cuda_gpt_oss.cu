// tests/models/test_gpt_oss.cpp (gpt_oss layers and models, HF / MXFP4 / GGUF import) on the CUDA backend: the same
// fixtures and tolerances as on the CPU, so a pass means the GPU agrees with the CPU within those bounds (the clamped
// SwiGLU kernel included).
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_gpt_oss.cpp"
