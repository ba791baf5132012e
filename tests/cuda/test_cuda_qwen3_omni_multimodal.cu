// tests/models/test_qwen3_omni_multimodal.cpp (Qwen3-Omni's thinker with a clip and a picture: both encoders, the
// merge, MRoPE's 3-D positions, deepstack, generate() and a session) on the CUDA backend, with the CPU build's fixture
// and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_qwen3_omni_multimodal.cpp"
