// io/weights.hpp: open a weights file of any supported format and return its tensors in canonical MaxText naming,
// plus what the file says about the model (a Config, when it carries one) and the naming scheme it used.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/checkpoint.hpp"
#include "maxtext/io/hf_deepseek.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

enum class WeightNaming : std::uint8_t { maxtext, hf };

struct LoadedWeights {
  TensorMap tensors;            ///< canonical MaxText names, unscanned
  WeightNaming naming = WeightNaming::maxtext;
  std::string path;
};

inline bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

/// Read `path` (safetensors file or sharded index) holding MaxText-named parameters, for the model `cfg`.
inline LoadedWeights load_weights(const std::string& path, const Config& cfg) {
  MAXTEXT_CHECK(std::filesystem::exists(path), IoError, "[weights] ", path, ": no such file");
  LoadedWeights w;
  w.path = path;
  if (ends_with(path, ".safetensors") || ends_with(path, ".json")) {
    TensorMap raw = read_safetensors_any(path);
    if ((cfg.is("deepseek") || cfg.is("mixtral")) && looks_like_hf(raw)) {  // HF DeepSeek-V2/V3 / Mixtral naming
      w.tensors = canonicalize_hf_deepseek(raw, cfg);
      w.naming = WeightNaming::hf;
      return w;
    }
    w.tensors = canonicalize_maxtext(raw, cfg);
    return w;
  }
  MAXTEXT_THROW(UnsupportedError, "[weights] ", path, ": unknown weights format (expected .safetensors or a "
                "model.safetensors.index.json)");
}

}  // namespace maxtext::io
