// tests/models/test_llama4_vision.cpp (Llama 4's vision model: rotary with a per-row table, the row gather of the
// pixel shuffle, the affine LayerNorm and full attention of backend/cuda/vision.cuh, products) on the CUDA backend,
// with the CPU build's fixtures and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_llama4_vision.cpp"
