// tests/models/test_qwen3_5_multimodal.cpp (Qwen3.5 with pictures: the encoder, the merge, MRoPE's per-step 3-D
// rotary tables uploaded to the device, deepstack additions, sessions and generate()) on the CUDA backend, with the
// CPU build's fixture and tolerances.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_qwen3_5_multimodal.cpp"
