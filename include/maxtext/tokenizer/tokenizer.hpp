// tokenizer/tokenizer.hpp: find and open the tokenizer of a model: a Hugging Face tokenizer.json (hf_tokenizer.hpp),
// GGUF metadata, a llama2.c tokenizer.bin, or a SentencePiece .model (through Debian's libsentencepiece when the build defines MAXTEXT_WITH_SENTENCEPIECE and links
// it; the CMake build does so when the library is installed).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/weights.hpp"
#include "maxtext/tokenizer/gguf_bpe.hpp"
#include "maxtext/tokenizer/hf_tokenizer.hpp"
#include "maxtext/tokenizer/spm.hpp"

#if defined(MAXTEXT_WITH_SENTENCEPIECE)
#include <sentencepiece_processor.h>
#endif

namespace maxtext::tokenizer {

#if defined(MAXTEXT_WITH_SENTENCEPIECE)
/// A SentencePiece .model through libsentencepiece (its own normaliser and segmentation).
class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    // libsentencepiece reports most problems in a Status but lets some escape as exceptions (e.g. its trie builder's
    // Darts::Details::Exception for a piece with a NUL byte, found by fuzz_spm_model): both become IoError.
    sentencepiece::util::Status st;
    try {
      st = sp_.Load(path);
    } catch (const std::exception& e) {
      MAXTEXT_THROW(IoError, "[tokenizer] ", path, ": cannot load SentencePiece model: ", e.what());
    }
    MAXTEXT_CHECK(st.ok(), IoError, "[tokenizer] ", path, ": cannot load SentencePiece model: ", st.ToString());
  }
  std::vector<std::int32_t> encode(std::string_view text, std::optional<bool> add_bos = std::nullopt) const override {
    std::vector<int> ids;
    const auto st = sp_.Encode(std::string(text), &ids);
    MAXTEXT_CHECK(st.ok(), ArgumentError, "[tokenizer] SentencePiece encode failed: ", st.ToString());
    std::vector<std::int32_t> out;
    if (add_bos.value_or(true) && sp_.bos_id() >= 0) out.push_back(sp_.bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }
  std::string piece(std::int32_t prev, std::int32_t id) const override {
    MAXTEXT_CHECK(id >= 0 && id < sp_.GetPieceSize(), ArgumentError, "[tokenizer] token id ", id,
                  " outside the vocabulary [0, ", sp_.GetPieceSize(), ")");
    if (sp_.IsControl(id) || sp_.IsUnknown(id) || sp_.IsUnused(id)) return {};
    const std::string& p = sp_.IdToPiece(id);
    if (sp_.IsByte(id)) return std::string(1, static_cast<char>(SpmTokenizer::parse_byte_piece(p)));
    std::string s;
    for (std::size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, "\xe2\x96\x81") == 0) {
        s += ' ';
        i += 3;
      } else {
        s += p[i++];
      }
    }
    if (prev >= 0 && prev == sp_.bos_id() && !s.empty() && s[0] == ' ') s.erase(0, 1);
    return s;
  }
  std::int64_t piece_context(std::int32_t prev) const override { return prev >= 0 && prev == sp_.bos_id(); }
  std::int32_t bos() const override { return sp_.bos_id(); }
  std::int32_t eos() const override { return sp_.eos_id(); }
  std::int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  const sentencepiece::SentencePieceProcessor& processor() const { return sp_; }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};
#endif

/// True when this build can read SentencePiece .model files.
constexpr bool have_sentencepiece() {
#if defined(MAXTEXT_WITH_SENTENCEPIECE)
  return true;
#else
  return false;
#endif
}

/// Open a tokenizer file: a tokenizer.json (or a directory holding one), .gguf (its tokenizer.ggml.* metadata: "llama"
/// SentencePiece or "gpt2" byte-level BPE vocabularies), .model
/// (SentencePiece), anything else as a llama2.c tokenizer.bin (`expected_vocab` > 0 checks its size).
inline std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path, std::int64_t expected_vocab = 0) {
  MAXTEXT_CHECK(std::filesystem::exists(path), IoError, "[tokenizer] ", path, ": no such file");
  if (std::filesystem::is_directory(path)) {
    MAXTEXT_CHECK(std::filesystem::exists(std::filesystem::path(path) / "tokenizer.json"), IoError, "[tokenizer] ", path,
                  ": a directory without tokenizer.json");
    return HfTokenizer::from_file(path);
  }
  if (io::ends_with(path, ".json")) return HfTokenizer::from_file(path);
  if (io::ends_with(path, ".gguf") || io::detail::file_starts_with(path, "GGUF", 4)) {
    const io::GgufFile g = io::read_gguf(path);
    if (g.get_string("tokenizer.ggml.model") == "gpt2") return hf_tokenizer_from_gguf(g);
    return std::make_unique<SpmTokenizer>(SpmTokenizer::from_gguf(g));
  }
  if (io::ends_with(path, ".model")) {
#if defined(MAXTEXT_WITH_SENTENCEPIECE)
    return std::make_unique<SentencePieceTokenizer>(path);
#else
    MAXTEXT_THROW(UnsupportedError, "[tokenizer] ", path,
                  ": SentencePiece .model files need libsentencepiece (build with MAXTEXT_WITH_SENTENCEPIECE)");
#endif
  }
  return std::make_unique<SpmTokenizer>(SpmTokenizer::from_llama2c(path, expected_vocab));
}

/// The tokenizer for a weights file: `tokenizer_path` when given; else the GGUF's own vocabulary; else a file beside
/// the weights: tokenizer.json (Hugging Face), tokenizer.model (SentencePiece), tokenizer.bin or tok<vocab>.bin (llama2.c).
inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& weights_path, const std::string& tokenizer_path = "",
                                                 std::int64_t vocab_size = 0) {
  if (!tokenizer_path.empty()) return open_tokenizer(tokenizer_path, vocab_size);
  MAXTEXT_CHECK(!weights_path.empty(), ArgumentError, "[tokenizer] no tokenizer: give a tokenizer file or GGUF weights");
  const std::string w = io::detail::resolve_weights_path(weights_path);
  if (io::ends_with(w, ".gguf") || io::detail::file_starts_with(w, "GGUF", 4)) return open_tokenizer(w);
  const std::filesystem::path dir = std::filesystem::path(w).parent_path();
  std::vector<std::string> candidates = {"tokenizer.json", "tokenizer.model", "tokenizer.bin"};
  if (vocab_size > 0) candidates.push_back("tok" + std::to_string(vocab_size) + ".bin");
  for (const auto& c : candidates) {
    const auto p = dir / c;
    if (std::filesystem::exists(p)) return open_tokenizer(p.string(), c == "tokenizer.model" || c == "tokenizer.json" ? 0 : vocab_size);
  }
  MAXTEXT_THROW(IoError, "[tokenizer] ", weights_path, ": no tokenizer found (looked for the GGUF vocabulary and for ",
                candidates, " beside it); pass one with --tokenizer");
}

}  // namespace maxtext::tokenizer
