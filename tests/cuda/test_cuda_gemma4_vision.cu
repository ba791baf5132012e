// tests/models/test_gemma4_vision.cpp (Gemma 4's vision encoder: per-head RMS norms, the rotary on strided head halves,
// the row gathers of the position table, the rectangular grid pooling of backend/cuda/vision.cuh, full attention,
// products) on the CUDA backend, with the CPU build's fixtures and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_gemma4_vision.cpp"
