// The GPT-3 layer tests (tests/layers/test_gpt3.cpp) on the CUDA backend: the same fixtures, the same tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../layers/test_gpt3.cpp"
