// tests/reference/llama_cpp_logits.cpp: llama.cpp's logits for a token sequence, as a NumPy .npy file
// ([tokens, vocab] float32), the oracle for tests/io/test_gguf_quant_models.cpp. Not part of the build: compile it
// against the llama.cpp that node-llama-cpp bundles (built at /work/peers/llama.cpp/build) and run:
//   L=/work/peers/llama.cpp
//   g++ -std=c++17 -O2 tests/reference/llama_cpp_logits.cpp -I$L/include -I$L/ggml/include \
//       -L$L/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o /tmp/llama_cpp_logits
//   /tmp/llama_cpp_logits MODEL.gguf 1,42,300,7 OUT.npy
// One thread, every position's logits, F32 KV cache and no flash attention, so that the only approximations are
// llama.cpp's own matmul arithmetic (for block-quantised weights: activations quantised to Q8_K / Q8_0 blocks).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf ID,ID,... OUT.npy\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> ids;
  for (const char* p = argv[2]; *p;) {
    char* end = nullptr;
    ids.push_back(static_cast<llama_token>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 64;
  cp.n_batch = 64;
  cp.n_ubatch = 64;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_batch batch = llama_batch_init(static_cast<int>(ids.size()), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int>(ids.size());
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  std::vector<float> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* l = llama_get_logits_ith(ctx, static_cast<int>(i));
    out.insert(out.end(), l, l + n_vocab);
  }
  // NumPy .npy v1.0: magic, header length, a dict padded with spaces to a multiple of 64 bytes, then the data.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(ids.size()) + ", " +
                       std::to_string(n_vocab) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  FILE* f = std::fopen(argv[3], "wb");
  if (!f) return 1;
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  std::fwrite(magic, 1, 8, f);
  const unsigned short hl = static_cast<unsigned short>(header.size());
  std::fwrite(&hl, 2, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(out.data(), 4, out.size(), f);
  std::fclose(f);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
