// families/families.hpp: the list of model families, and what the format-level code asks of them. Each family's
// folder holds a family.hpp that includes its layers and importers and declares one struct (families::<Family>) of
// hooks; this file includes them all, lists them, and dispatches:
//
//   blocks                      the decoder_block values the family owns (each block of core/decoder_blocks.hpp is
//                               owned by exactly one family: checked at compile time below)
//   hf_model_types,             the config.json model types / GGUF architectures whose configs the family reads, with
//   config_from_hf(j, where)    config_from_hf / config_from_gguf (families/model_import.hpp dispatches by them)
//   gguf_architectures,         (gguf_refused_architectures: architectures it names only to refuse, with the reason)
//   config_from_gguf(g)
//   import_gguf(g, cfg, where)  a weights file's tensors in MaxText naming (families/load.hpp); a family without the
//   import_hf(raw, cfg, where,  hook for a format reads no such file, and load_weights refuses it by name
//             config_json)
//   import_llama2c(t, cfg, where)
//   unstack_scanned(...)        the family's own scanned checkpoint tree (families/checkpoint.hpp); optional
//   scanned_groups(cfg)         the names of its plain scanned stacks, when not `layers`; optional
//   finish_maxtext(out, cfg)    a last step on a canonicalised MaxText checkpoint; optional
//   gguf_mxfp4_experts          true when its GGUF files may hold MXFP4 tensors (gpt-oss's experts); optional
//
// Adding a family: its folder with a family.hpp, one #include and one entry of `All` below (the order of `All` is
// the order in which config.json model types and GGUF architectures are matched), its blocks' lines in
// core/decoder_blocks.hpp and its layer header's #include in models/registry.hpp (which does not include this file,
// so that the block units do not depend on the importers). docs/adding-a-block.md walks through it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/decoder_blocks.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/deepseek/family.hpp"
#include "maxtext/families/deepseek4/family.hpp"
#include "maxtext/families/envy/family.hpp"
#include "maxtext/families/gemma/family.hpp"
#include "maxtext/families/gemma4/family.hpp"
#include "maxtext/families/gpt3/family.hpp"
#include "maxtext/families/gpt_oss/family.hpp"
#include "maxtext/families/llama2/family.hpp"
#include "maxtext/families/llama4/family.hpp"
#include "maxtext/families/mistral/family.hpp"
#include "maxtext/families/olmo3/family.hpp"
#include "maxtext/families/qwen/family.hpp"
#include "maxtext/families/qwen3_next/family.hpp"
#include "maxtext/families/simple/family.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::families {

using io::TensorMap;

template <class... F>
struct List {};

/// Every family, in matching order.
using All = List<DeepSeek, DeepSeek4, Envy, Gemma, Gemma4, Gpt3, GptOss, Llama2, Llama4, Mistral, Olmo3, Qwen,
                 Qwen3Next, Simple>;

/// Calls `fn.template operator()<F>()` for each family F of `All`, in order, until one returns true; whether one did.
template <class Fn>
bool any_family(Fn&& fn) {
  return []<class... F>(List<F...>, Fn& f) { return (f.template operator()<F>() || ...); }(All{}, fn);
}

template <class F>
constexpr bool owns(std::string_view decoder_block) {
  return std::find(F::blocks.begin(), F::blocks.end(), decoder_block) != F::blocks.end();
}

template <class L>
bool names(const L& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

namespace detail {

/// How many families own `decoder_block`.
template <class... F>
constexpr int owners(List<F...>, std::string_view decoder_block) {
  return (0 + ... + (owns<F>(decoder_block) ? 1 : 0));
}

/// Whether every block of the block list is owned by exactly one family, and every block a family names is on it.
constexpr bool blocks_owned_once() {
  bool ok = true;
#define MAXTEXT_OWNED_BLOCK(name, ...) ok = ok && owners(All{}, #name) == 1;
  MAXTEXT_DECODER_BLOCKS(MAXTEXT_OWNED_BLOCK, MAXTEXT_OWNED_BLOCK)
#undef MAXTEXT_OWNED_BLOCK
  return ok;
}

template <class... F>
constexpr std::size_t named_blocks(List<F...>) {
  return (0 + ... + F::blocks.size());
}

constexpr std::size_t listed_blocks() {
  std::size_t n = 0;
#define MAXTEXT_COUNT_BLOCK(name, ...) ++n;
  MAXTEXT_DECODER_BLOCKS(MAXTEXT_COUNT_BLOCK, MAXTEXT_COUNT_BLOCK)
#undef MAXTEXT_COUNT_BLOCK
  return n;
}

/// "a, b, c", for messages.
inline std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

/// The formats a family reads, for messages: "MaxText, Hugging Face and GGUF checkpoints".
template <class F>
std::string formats_read() {
  std::vector<std::string> f{"MaxText"};
  if constexpr (requires { &F::import_hf; }) f.emplace_back("Hugging Face");
  if constexpr (requires { &F::import_gguf; }) f.emplace_back("GGUF");
  if constexpr (requires { &F::import_llama2c; }) f.emplace_back("llama2.c");
  std::string s;
  for (std::size_t i = 0; i < f.size(); ++i) s += (i == 0 ? "" : i + 1 == f.size() ? " and " : ", ") + f[i];
  return s + (f.size() == 1 ? " checkpoints only" : " checkpoints");
}

}  // namespace detail

static_assert(detail::blocks_owned_once() && detail::named_blocks(All{}) == detail::listed_blocks(),
              "each decoder block of core/decoder_blocks.hpp is owned by exactly one family of families::All, and "
              "every block a family names is on that list");

/// Calls `fn.template operator()<F>()` for the family F that owns cfg.decoder_block, and returns what it returns.
template <class R, class Fn>
R with_owner(const Config& cfg, Fn&& fn) {
  R r{};
  const bool found = any_family([&]<class F>() {
    if (!owns<F>(cfg.decoder_block)) return false;
    r = fn.template operator()<F>();
    return true;
  });
  MAXTEXT_CHECK(found, UnsupportedError, "[config] decoder_block '", cfg.decoder_block,
                "' belongs to no model family (families/families.hpp)");
  return r;
}

/// A Config from a Hugging Face config.json, by the family that reads its model_type.
inline Config config_from_hf(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>()
                                                                                   : std::string();
  MAXTEXT_CHECK(!type.empty(), IoError, "[hf] ", where, ": config.json lacks model_type (a string)");
  Config c;
  std::vector<std::string> known;
  const bool read = any_family([&]<class F>() {
    if constexpr (requires { F::hf_model_types; }) {
      known.insert(known.end(), F::hf_model_types.begin(), F::hf_model_types.end());
      if (!names(F::hf_model_types, type)) return false;
      c = F::config_from_hf(j, where);
      return true;
    } else {
      return false;
    }
  });
  MAXTEXT_CHECK(read, UnsupportedError, "[hf] ", where, ": model_type '", type, "' is not supported (supported: ",
                detail::joined(known), ")");
  return c;
}

/// A Config from GGUF metadata, by the family that reads its general.architecture `arch`. An architecture that a
/// family names as one it does not read (gguf_refused_architectures: name and reason) is refused with the reason.
inline Config config_from_gguf(const io::GgufFile& g, const std::string& arch) {
  Config c;
  std::vector<std::string> known;
  const bool read = any_family([&]<class F>() {
    if constexpr (requires { F::gguf_refused_architectures; }) {
      for (const auto& [name, why] : F::gguf_refused_architectures) {
        MAXTEXT_CHECK(name != arch, UnsupportedError, "[gguf] ", g.path, ": general.architecture ", arch, " is ", why);
      }
    }
    if constexpr (requires { F::gguf_architectures; }) {
      known.insert(known.end(), F::gguf_architectures.begin(), F::gguf_architectures.end());
      if (!names(F::gguf_architectures, arch)) return false;
      c = F::config_from_gguf(g);
      return true;
    } else {
      return false;
    }
  });
  MAXTEXT_CHECK(read, UnsupportedError, "[gguf] ", g.path, ": general.architecture '", arch,
                "' is not supported (supported: ", detail::joined(known), ")");
  return c;
}

/// The tensors of a GGUF file in MaxText naming, by the family that owns cfg.decoder_block.
inline TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& path) {
  return with_owner<TensorMap>(cfg, [&]<class F>() -> TensorMap {
    if constexpr (requires { &F::import_gguf; }) {
      return F::import_gguf(g, cfg, "gguf " + path);
    } else {
      MAXTEXT_THROW(UnsupportedError, "[weights] ", path, ": decoder_block ", cfg.decoder_block, " reads ",
                    detail::formats_read<F>(), ", not GGUF files");
    }
  });
}

/// The tensors of Hugging Face safetensors in MaxText naming; `config_json`: the config.json beside them, or "".
inline TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& path,
                           const std::string& config_json) {
  return with_owner<TensorMap>(cfg, [&]<class F>() -> TensorMap {
    if constexpr (requires { &F::import_hf; }) {
      return F::import_hf(raw, cfg, "hf " + path, config_json);
    } else {
      MAXTEXT_THROW(UnsupportedError, "[weights] ", path, ": decoder_block ", cfg.decoder_block, " reads ",
                    detail::formats_read<F>(), ", not Hugging Face files");
    }
  });
}

/// The tensors of a llama2.c checkpoint in MaxText naming.
inline TensorMap import_llama2c(const TensorMap& tensors, const Config& cfg, const std::string& path) {
  return with_owner<TensorMap>(cfg, [&]<class F>() -> TensorMap {
    if constexpr (requires { &F::import_llama2c; }) {
      return F::import_llama2c(tensors, cfg, "llama2c " + path);
    } else {
      MAXTEXT_THROW(UnsupportedError, "[weights] ", path, ": decoder_block ", cfg.decoder_block, " reads ",
                    detail::formats_read<F>(), ", not llama2.c files");
    }
  });
}

/// Whether the family of cfg.decoder_block reads MXFP4 tensors from GGUF files.
inline bool gguf_mxfp4_experts(const Config& cfg) {
  return with_owner<bool>(cfg, [&]<class F>() {  // [&]: no conversion to a function pointer (nvcc)
    if constexpr (requires { F::gguf_mxfp4_experts; }) {
      return F::gguf_mxfp4_experts;
    } else {
      return false;
    }
  });
}

/// The plain scanned stacks of a MaxText checkpoint of cfg's block and how many layers each holds.
inline std::vector<std::pair<std::string, std::int64_t>> scanned_groups(const Config& cfg) {
  using Groups = std::vector<std::pair<std::string, std::int64_t>>;
  return with_owner<Groups>(cfg, [&]<class F>() -> Groups {
    if constexpr (requires { &F::scanned_groups; }) {
      return F::scanned_groups(cfg);
    } else {
      return {{"layers", cfg.num_decoder_layers}};
    }
  });
}

/// Unstacks `name` into `out` when it is one of the family's own scanned tensors.
inline bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
  return with_owner<bool>(cfg, [&]<class F>() {
    if constexpr (requires { &F::unstack_scanned; }) {
      return F::unstack_scanned(name, t, cfg, out);
    } else {
      return false;
    }
  });
}

/// The family's last step on a canonicalised MaxText checkpoint.
inline void finish_maxtext(TensorMap& out, const Config& cfg) {
  (void)with_owner<bool>(cfg, [&]<class F>() {
    if constexpr (requires { &F::finish_maxtext; }) F::finish_maxtext(out, cfg);
    return true;
  });
}

}  // namespace maxtext::families
