// maxtext/cuda.hpp: the umbrella header for GPU programs: everything maxtext.hpp offers except the CPU backend
// (Eigen / xsimd / OpenMP stay out of nvcc's way), plus the CUDA backend. Include it from a .cu file compiled by
// nvcc with -std=c++20 --expt-relaxed-constexpr (the maxtext::cuda CMake target adds both) and link CUDA::cudart
// and CUDA::cublasLt. Compile the CPU backend, if also wanted, in a separate .cpp translation unit.
//
//   using Model = maxtext::models::Transformer<maxtext::Policy<maxtext::cuda::Backend, maxtext::bf16>,
//                                              maxtext::layers::Gpt3DecoderLayer>;
#pragma once

#include "maxtext/backend/cuda/backend.cuh"
#include "maxtext/backend/reference/backend.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/matrix.hpp"
#include "maxtext/core/policy.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/checkpoint.hpp"
#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/gpt3/gpt3.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/families/load.hpp"
#include "maxtext/families/mistral/mistral.hpp"
#include "maxtext/families/mistral/mixtral.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/io/yaml_config.hpp"
#include "maxtext/layers/attention_mla.hpp"
#include "maxtext/layers/attention_op.hpp"
#include "maxtext/layers/attentions.hpp"
#include "maxtext/layers/decoders.hpp"
#include "maxtext/layers/embeddings.hpp"
#include "maxtext/layers/linears.hpp"
#include "maxtext/layers/moe.hpp"
#include "maxtext/layers/normalizations.hpp"
#include "maxtext/layers/rotary.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/kv_cache.hpp"
#include "maxtext/models/layer_runner.hpp"
#include "maxtext/models/registry.hpp"
#include "maxtext/models/sampling.hpp"
#include "maxtext/models/transformer.hpp"
