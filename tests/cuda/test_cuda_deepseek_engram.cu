// tests/models/test_deepseek_engram.cpp (DeepSeek with Engram layers) on the CUDA backend: the same fixtures and
// tolerances as on the CPU, so a pass means the GPU agrees with the CPU within those bounds.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_deepseek_engram.cpp"
