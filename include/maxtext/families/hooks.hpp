// families/hooks.hpp: what the families' hooks (families/<family>/family.hpp, listed by families/families.hpp)
// share.
#pragma once

#include <string>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/gguf.hpp"

namespace maxtext::families {

/// Refuses a GGUF file whose general.architecture is not `want`, the one llama.cpp's graph for cfg's block reads
/// (a file of another architecture names its tensors and keys otherwise).
inline void require_gguf_architecture(const io::GgufFile& g, const Config& cfg, const std::string& want) {
  const std::string arch = g.get_string("general.architecture");
  MAXTEXT_CHECK(arch == want, UnsupportedError, "[gguf] ", g.path, ": decoder_block ", cfg.decoder_block,
                " reads GGUF architecture ", want, ", found '", arch, "'");
}

}  // namespace maxtext::families
