// tests/comm/test_tensor_parallel_backends.cpp on the CUDA backend: thread ranks sharing one GPU, their all-reduces
// through host copies, against the same model on one GPU and the torch reference. NCCL: test_cuda_nccl.cu.
#define MAXTEXT_TEST_BACKEND_CUDA 1
#include "../comm/test_tensor_parallel_backends.cpp"
