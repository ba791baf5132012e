// tests/models/test_qwen3_vision.cpp (the vision encoder of Qwen3-Omni / Qwen3.5: per-token rotary table, affine
// LayerNorms, full attention, the mergers' products over consecutive rows) on the CUDA backend, with the CPU build's
// fixtures and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_qwen3_vision.cpp"
