// tests/models/test_gemma3_multimodal.cpp (Gemma 3 with pictures: the soft tokens merged into the decoder with the
// bidirectional picture mask of backend/cuda/attention.cuh) on the CUDA backend, with the CPU build's fixture and
// tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_gemma3_multimodal.cpp"
