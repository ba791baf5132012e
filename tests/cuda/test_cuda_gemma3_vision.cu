// tests/models/test_gemma3_vision.cpp (Gemma 3 vision tower: the affine LayerNorm and grid pooling of
// backend/cuda/vision.cuh, attention and products) on the CUDA backend, with the CPU build's fixtures and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_gemma3_vision.cpp"
