// tokenizer/gguf_bpe.hpp: byte-level BPE vocabularies in GGUF metadata (tokenizer.ggml.model = "gpt2": tokens, token
// types, merges) as HfTokenizer: the vocabulary and merges become the BPE model, control tokens special added tokens and
// user-defined tokens plain added tokens, and tokenizer.ggml.pre picks the pre-tokenizer regular expressions llama.cpp
// applies for that model family (each one splits the pieces further, keeping all text; then byte-level encoding):
//   llama-bpe / llama3 (Llama 3), qwen2, deepseek-v3, gpt-4o (o200k), gpt-2, and "default" (llama.cpp's fallback list).
// BOS is added when tokenizer.ggml.add_bos_token is true (false when absent); EOS likewise with add_eos_token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/tokenizer/hf_tokenizer.hpp"

namespace maxtext::tokenizer {

/// The pre-tokenizer regular expressions for a tokenizer.ggml.pre value (empty when not known).
inline std::vector<std::string> gguf_pre_regexes(const std::string& pre) {
  const std::string contractions = R"((?i:'s|'t|'re|'ve|'m|'ll|'d))";
  const std::string gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
  if (pre == "llama-bpe" || pre == "llama3") {
    return {contractions + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  }
  if (pre == "qwen2") return {contractions + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  if (pre == "deepseek-v3") {
    return {R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
            R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  }
  if (pre == "gpt-4o") {
    const std::string upper = R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])", lower = R"([\p{Ll}\p{Lm}\p{Lo}\p{M}])";
    const std::string tail = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)";
    return {R"([^\r\n\p{L}\p{N}]?)" + upper + "*" + lower + "+" + tail + R"(|[^\r\n\p{L}\p{N}]?)" + upper + "+" + lower + "*" +
            tail + R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  }
  if (pre == "gpt-2" || pre == "gpt2") return {gpt2};
  if (pre == "default" || pre.empty()) return {R"([\p{P}\$\+<=>\^~\|]+)", gpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  return {};
}

/// HfTokenizer for a GGUF file whose tokenizer.ggml.model is "gpt2". MAXTEXT_API: compiled once in this project's
/// programs (core/macros.hpp).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::unique_ptr<HfTokenizer> hf_tokenizer_from_gguf(const io::GgufFile& g) {
  using json = nlohmann::json;
  const std::string model = g.get_string("tokenizer.ggml.model");
  MAXTEXT_CHECK(model == "gpt2", UnsupportedError, "[tokenizer] ", g.path, ": tokenizer.ggml.model '", model,
                "' is not a byte-level BPE vocabulary (gpt2)");
  const std::string pre = g.get_string("tokenizer.ggml.pre", "default");
  const std::vector<std::string> regexes = gguf_pre_regexes(pre);
  MAXTEXT_CHECK(!regexes.empty(), UnsupportedError, "[tokenizer] ", g.path, ": tokenizer.ggml.pre '", pre,
                "' is not supported (supported: llama-bpe, qwen2, deepseek-v3, gpt-4o, gpt-2, default)");
  const io::GgufValue& toks = g.at("tokenizer.ggml.tokens");
  MAXTEXT_CHECK(toks.is_array() && toks.elem == io::GgufType::string, IoError, "[tokenizer] ", g.path,
                ": tokenizer.ggml.tokens must be an array of strings");
  const io::GgufValue* merges = g.find("tokenizer.ggml.merges");
  MAXTEXT_CHECK(merges && merges->is_array() && merges->elem == io::GgufType::string, IoError, "[tokenizer] ", g.path,
                ": a gpt2 vocabulary needs tokenizer.ggml.merges (an array of strings)");
  std::vector<std::int64_t> types;
  if (const io::GgufValue* t = g.find("tokenizer.ggml.token_type")) {
    MAXTEXT_CHECK(t->is_array() && t->elem == io::GgufType::i32 && t->ints.size() == toks.strings.size(), IoError,
                  "[tokenizer] ", g.path, ": tokenizer.ggml.token_type must be an array of i32, one per token");
    types.assign(t->ints.begin(), t->ints.end());
  }
  json vocab = json::object(), added = json::array();
  for (std::size_t i = 0; i < toks.strings.size(); ++i) {
    const std::string& s = toks.strings[i];
    const std::int64_t ty = types.empty() ? 1 : types[i];
    if (ty == 3 || ty == 4 || ty == 2) {  // control, user-defined, unknown
      added.push_back({{"id", i}, {"content", s}, {"special", ty != 4}, {"normalized", false}, {"lstrip", false},
                       {"rstrip", false}, {"single_word", false}});
    } else if (!vocab.contains(s)) {
      vocab[s] = i;
    }
  }
  json split = json::array();
  for (const auto& r : regexes) split.push_back({{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
  split.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  const bool ignore_merges = pre == "llama-bpe" || pre == "llama3" || pre == "gpt-4o";
  json tok = {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", merges->strings}, {"ignore_merges", ignore_merges}}},
              {"added_tokens", std::move(added)},
              {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", std::move(split)}}},
              {"decoder", {{"type", "ByteLevel"}}}};
  const auto n = static_cast<std::int64_t>(toks.strings.size());
  auto id = [&](const char* key) {
    const std::int64_t v = g.get_int(key, -1);
    return v >= 0 && v < n ? v : -1;
  };
  const std::int64_t bos = id("tokenizer.ggml.bos_token_id"), eos = id("tokenizer.ggml.eos_token_id");
  const bool add_bos = g.get_bool("tokenizer.ggml.add_bos_token", false), add_eos = g.get_bool("tokenizer.ggml.add_eos_token", false);
  MAXTEXT_CHECK(!add_bos || bos >= 0, IoError, "[tokenizer] ", g.path, ": add_bos_token is set but there is no BOS");
  MAXTEXT_CHECK(!add_eos || eos >= 0, IoError, "[tokenizer] ", g.path, ": add_eos_token is set but there is no EOS");
  if (add_bos || add_eos) {
    json single = json::array(), specials = json::object();
    if (add_bos) {
      single.push_back({{"SpecialToken", {{"id", "bos"}, {"type_id", 0}}}});
      specials["bos"] = {{"id", "bos"}, {"ids", {bos}}, {"tokens", {toks.strings[static_cast<std::size_t>(bos)]}}};
    }
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos) {
      single.push_back({{"SpecialToken", {{"id", "eos"}, {"type_id", 0}}}});
      specials["eos"] = {{"id", "eos"}, {"ids", {eos}}, {"tokens", {toks.strings[static_cast<std::size_t>(eos)]}}};
    }
    tok["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  }
  json cfg = {{"clean_up_tokenization_spaces", false}};
  if (bos >= 0) cfg["bos_token"] = toks.strings[static_cast<std::size_t>(bos)];
  json gen = json::object();
  json eos_ids = json::array();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (id(key) >= 0) eos_ids.push_back(id(key));
  }
  gen["eos_token_id"] = eos_ids;
  return std::make_unique<HfTokenizer>(tok, cfg, g.path + " (GGUF tokenizer.ggml.*)", gen);
}
#else
std::unique_ptr<HfTokenizer> hf_tokenizer_from_gguf(const io::GgufFile& g);
#endif

}  // namespace maxtext::tokenizer
