// The GPT-3 model tests (tests/models/test_gpt3_model.cpp) on the CUDA backend: logits against the float64 torch
// model, incremental decoding (split-KV kernel) against the full forward (tiled prefill kernel), packed sequences,
// batched decode, export / reload through device memory.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../models/test_gpt3_model.cpp"
