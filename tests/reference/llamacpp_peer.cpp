// tests/reference/llamacpp_peer.cpp: the llama.cpp side of the llama.cpp peer fixtures (run by llamacpp_peer.py).
// Loads a GGUF with libllama on the CPU (one thread, F32 K/V cache, no flash attention, full-size SWA cache),
// decodes the prompt in one batch with logits for every position (teacher forcing), then decodes greedily one token
// at a time. Writes OUT.logits.f32 (raw float32, rows = prompt positions then one row per decoded token, each of
// n_vocab values) and OUT.greedy.txt (the greedy token ids, one per line).
// A model with next-n (MTP) layers (llama_model_n_layer_nextn > 0) also gets OUT.mtp.f32: llama.cpp's MTP graph
// (LLAMA_CONTEXT_TYPE_MTP) over the whole sequence (prompt, then the greedy tokens but the last) in one batch, where
// row i holds token i + 1 at position i + 1 and the main model's h_nextn row of position i (the hidden state after
// the final norm), as llama.cpp's draft-mtp speculative decoding feeds it; its logits predict token i + 2.
//
// Usage: llamacpp_peer MODEL.gguf OUT_PREFIX STEPS TOKEN...
// Build: g++ -O2 -std=c++17 llamacpp_peer.cpp -I$LLAMA/include -I$LLAMA/ggml/include -I$LLAMA/src
//        -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "llama-ext.h"  // llama.cpp's staging API for MTP: llama_set_embeddings_nextn, llama_get_embeddings_nextn_ith
#include "llama.h"

namespace {

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

int fail(const char* what) {
  std::fprintf(stderr, "llamacpp_peer: %s\n", what);
  return 1;
}

/// Decode `tokens` at positions pos0.. in one batch, logits for every position.
bool decode(llama_context* ctx, const std::vector<llama_token>& tokens, int pos0) {
  llama_batch b = llama_batch_init(static_cast<int>(tokens.size()), 0, 1);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    b.token[i] = tokens[i];
    b.pos[i] = pos0 + static_cast<int>(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = static_cast<int>(tokens.size());
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  return rc == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return fail("usage: llamacpp_peer MODEL.gguf OUT_PREFIX STEPS TOKEN...");
  const std::string model_path = argv[1], out = argv[2];
  const int steps = std::atoi(argv[3]);
  std::vector<llama_token> prompt;
  for (int i = 4; i < argc; ++i) prompt.push_back(std::atoi(argv[i]));

  llama_log_set(quiet_log, nullptr);
  // A build with dynamically loaded backends (node-llama-cpp's prebuilt libraries) loads its CPU backend from there.
  if (const char* dir = std::getenv("LLAMACPP_BACKEND_DIR")) ggml_backend_load_all_from_path(dir);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) return fail("cannot load the model");
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const bool mtp = llama_model_n_layer_nextn(model) > 0;
  if (mtp) {  // again, with the next-n layers (skipped by default)
    llama_model_free(model);
    mp.load_mtp = true;
    model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) return fail("cannot load the model with its MTP layers");
  }
  const int n_embd = llama_model_n_embd(model);

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(prompt.size() + steps + 16);
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_seq_max = 1;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.swa_full = true;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return fail("cannot create a context");
  std::vector<float> h;  // h_nextn per position of the sequence (MTP models)
  if (mtp) llama_set_embeddings_nextn(ctx, true, /*masked=*/false);
  auto take_h = [&](int i) {
    const float* e = llama_get_embeddings_nextn_ith(ctx, i);
    if (e != nullptr) h.insert(h.end(), e, e + n_embd);
    return e != nullptr;
  };

  std::vector<float> rows;
  auto take_row = [&](int i) {
    const float* l = llama_get_logits_ith(ctx, i);
    rows.insert(rows.end(), l, l + n_vocab);
    int best = 0;
    for (int v = 1; v < n_vocab; ++v) {
      if (l[v] > l[best]) best = v;
    }
    return best;
  };
  if (!decode(ctx, prompt, 0)) return fail("prompt decode failed");
  int next = 0;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    next = take_row(static_cast<int>(i));
    if (mtp && !take_h(static_cast<int>(i))) return fail("no h_nextn row for the prompt");
  }
  std::vector<int> greedy{next};
  for (int s = 1; s < steps; ++s) {
    if (!decode(ctx, {next}, static_cast<int>(prompt.size()) + s - 1)) return fail("step decode failed");
    next = take_row(0);
    if (mtp && !take_h(0)) return fail("no h_nextn row for a step");
    greedy.push_back(next);
  }
  if (mtp) {
    std::vector<llama_token> seq(prompt.begin(), prompt.end());
    seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
    const int n = static_cast<int>(seq.size()) - 1;  // rows: tokens 1.. with h of positions 0..
    llama_context_params mcp = cp;
    mcp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    llama_context* mctx = llama_init_from_model(model, mcp);
    if (!mctx) return fail("cannot create the MTP context");
    llama_set_embeddings_nextn(mctx, true, /*masked=*/true);
    llama_batch b = llama_batch_init(n, n_embd, 1);
    b.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token) * static_cast<std::size_t>(n)));
    for (int i = 0; i < n; ++i) {
      b.token[i] = seq[static_cast<std::size_t>(i) + 1];
      std::memcpy(b.embd + static_cast<std::size_t>(i) * n_embd, h.data() + static_cast<std::size_t>(i) * n_embd,
                  sizeof(float) * static_cast<std::size_t>(n_embd));
      b.pos[i] = i + 1;
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(mctx, b) != 0) return fail("MTP decode failed");
    std::vector<float> mrows;
    for (int i = 0; i < n; ++i) {
      const float* l = llama_get_logits_ith(mctx, i);
      mrows.insert(mrows.end(), l, l + n_vocab);
    }
    std::free(b.token);
    b.token = nullptr;
    llama_batch_free(b);
    llama_free(mctx);
    FILE* mf = std::fopen((out + ".mtp.f32").c_str(), "wb");
    if (!mf) return fail("cannot write the MTP logits");
    std::fwrite(mrows.data(), sizeof(float), mrows.size(), mf);
    std::fclose(mf);
  }

  FILE* f = std::fopen((out + ".logits.f32").c_str(), "wb");
  if (!f) return fail("cannot write the logits");
  std::fwrite(rows.data(), sizeof(float), rows.size(), f);
  std::fclose(f);
  f = std::fopen((out + ".greedy.txt").c_str(), "w");
  if (!f) return fail("cannot write the greedy tokens");
  for (int t : greedy) std::fprintf(f, "%d\n", t);
  std::fclose(f);
  std::printf("%d %d %d\n", static_cast<int>(prompt.size()), steps, n_vocab);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
