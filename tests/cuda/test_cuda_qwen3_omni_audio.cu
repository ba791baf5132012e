// tests/models/test_qwen3_omni_audio.cpp (Qwen3-Omni's audio encoder: the convolutions as products over gathered
// windows, affine LayerNorms, attention within each chunk's segment, the projector; the files and features on the host)
// on the CUDA backend, with the CPU build's fixtures and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_qwen3_omni_audio.cpp"
