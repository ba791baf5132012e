// tests/layers/test_engram.cpp (the Engram module, and the host-side hashing) on the CUDA backend: the same fixtures
// and tolerances as on the CPU, so a pass means the GPU agrees with the CPU within those bounds.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../layers/test_engram.cpp"
