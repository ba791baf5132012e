// tests/models/test_qwen3_next.cpp (qwen3_next layers and models: Gated DeltaNet, gated attention) on the CUDA
// backend: the same fixtures and tolerances as on the CPU, so a pass means the GPU agrees with the CPU within those
// bounds.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_qwen3_next.cpp"
