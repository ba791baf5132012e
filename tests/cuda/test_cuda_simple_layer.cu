// tests/models/test_simple_layer.cpp (simple / simple_mlp models) on the CUDA backend: the same fixtures and
// tolerances as on the CPU.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_simple_layer.cpp"
