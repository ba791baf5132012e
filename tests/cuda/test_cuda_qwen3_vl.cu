// tests/models/test_qwen3_vl.cpp (Qwen3-VL's dense and MoE text models from Hugging Face checkpoints, with a picture's
// rows and deepstack at MRoPE's 3-D positions) on the CUDA backend, with the CPU build's fixtures and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_qwen3_vl.cpp"
