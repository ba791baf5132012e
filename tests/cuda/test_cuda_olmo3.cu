// tests/models/test_olmo3.cpp (olmo3 layers and models, HF and GGUF import; llama2lti) on the CUDA backend: the same
// fixtures and tolerances as on the CPU, so a pass means the GPU agrees with the CPU within those bounds.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_olmo3.cpp"
