// tests/models/test_qwen_family.cpp (qwen2 / qwen3_moe layers and models, HF and GGUF import) on the CUDA backend:
// the same fixtures and tolerances as on the CPU, so a pass means the GPU agrees with the CPU within those bounds.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_qwen_family.cpp"
