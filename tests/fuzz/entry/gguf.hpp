// tests/fuzz/entry/gguf.hpp: fuzz entry point for GGUF files: header, metadata, tensor infos and data (read_gguf),
// the model config it implies (config_from_gguf), its vocabulary (SentencePiece or byte-level BPE) and chat template,
// and, for llama.cpp's mmproj files, the vision readers' header checks and tensor mapping (Gemma 3's, Llama 4's and
// Gemma 4's).
#pragma once

#include "entry/exercise.hpp"
#include "maxtext/families/gemma/vision.hpp"
#include "maxtext/families/gemma4/vision.hpp"
#include "maxtext/families/llama4/vision.hpp"
#include "maxtext/families/model_import.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/tokenizer/chat_template.hpp"
#include "maxtext/tokenizer/gguf_bpe.hpp"
#include "maxtext/tokenizer/spm.hpp"

namespace maxtext::fuzz {

inline void fuzz_gguf(const std::uint8_t* data, std::size_t size) {
  const std::string path = write_temp(data, size, "input.gguf");
  attempt([&] {
    const io::GgufFile g = io::read_gguf(path);
    touch_tensors(g.tensors);
    attempt([&] { (void)io::config_from_gguf(g).validate(); });
    attempt([&] {
      if (g.get_string("tokenizer.ggml.model") == "gpt2") {
        exercise_tokenizer(*tokenizer::hf_tokenizer_from_gguf(g));
      } else {
        exercise_tokenizer(tokenizer::SpmTokenizer::from_gguf(g));
      }
    });
    attempt([&] { (void)tokenizer::chat_template_from_gguf(path); });
    attempt([&] { touch_tensors(io::gemma3_vision_from_mmproj(g).tensors); });
    attempt([&] { touch_tensors(io::llama4_vision_from_mmproj(g).tensors); });
    attempt([&] { touch_tensors(io::gemma4_vision_from_mmproj(g).tensors); });
  });
}

}  // namespace maxtext::fuzz
