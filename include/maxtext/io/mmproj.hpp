// io/mmproj.hpp: what every reader of llama.cpp's multimodal projector files ("mmproj" GGUF, as
// convert_hf_to_gguf.py --mmproj writes them) checks and does before its family's own mapping
// (families/gemma/vision.hpp, families/llama4/vision.hpp): the header (a clip file of the expected projector, with a
// vision encoder, GELU, and a processor that normalises to [-1, 1]), and llama.cpp's tensor names turned back into
// the Hugging Face names the family's checkpoint mapping reads, every tensor of the file accounted for.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "maxtext/core/error.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// The file's projector: clip.projector_type, or clip.vision.projector_type where only that is written (llama.cpp's
/// converter writes the vision key for Gemma 4 at de3ff815; its clip.cpp reads the first, then the second); "" when
/// neither is there.
inline std::string mmproj_projector_type(const GgufFile& g) {
  for (const char* key : {"clip.projector_type", "clip.vision.projector_type"}) {
    const GgufValue* v = g.find(key);
    if (v != nullptr && v->type == GgufType::string) return v->s;
  }
  return std::string();
}

/// What a family's mmproj file must say beyond its projector: the image mean and std its processor normalises with
/// (when the file gives them), and whether clip.use_gelu must be set.
struct MmprojExpect {
  double mean = 0.5, std = 0.5;  ///< Gemma 3, Llama 4: [-1, 1]
  bool use_gelu = true;
};

/// Refuses, by key, a file that is not an mmproj of projector `projector` (`family` names the model in messages) with
/// a vision encoder (and GELU, unless `e` says otherwise), or whose image mean / std (when given) are not `e`'s.
inline void check_mmproj_header(const GgufFile& g, std::string_view projector, std::string_view family,
                                const MmprojExpect& e = {}) {
  const std::string& path = g.path;
  MAXTEXT_CHECK(g.get_string("general.architecture") == "clip", UnsupportedError, "[mmproj] ", path,
                ": general.architecture is '", g.get_string("general.architecture"), "', a multimodal projector "
                "file (mmproj) says clip");
  const std::string proj = mmproj_projector_type(g);
  MAXTEXT_CHECK(proj == projector, UnsupportedError, "[mmproj] ", path, ": clip.projector_type '", proj,
                "' is not ", family, "'s (", projector, ")");
  MAXTEXT_CHECK(g.get_bool("clip.has_vision_encoder", false), UnsupportedError, "[mmproj] ", path,
                ": clip.has_vision_encoder is not set: no vision tower in the file");
  MAXTEXT_CHECK(!e.use_gelu || g.get_bool("clip.use_gelu", false), UnsupportedError, "[mmproj] ", path,
                ": clip.use_gelu is not set; ", family, "'s vision tower uses GELU");
  for (const auto& [key, want] : {std::pair{"clip.vision.image_mean", e.mean}, std::pair{"clip.vision.image_std", e.std}}) {
    const GgufValue* v = g.find(key);
    if (v == nullptr) continue;
    bool same = v->is_array() && v->floats.size() == 3;
    for (const double x : v->floats) same = same && x == want;
    MAXTEXT_CHECK(same, UnsupportedError, "[mmproj] ", path, ": ", key, " must be [", want, ", ", want, ", ", want,
                  "] (", family, "'s processor)");
  }
}

/// llama.cpp's names of an mmproj file's tensors turned back into a Hugging Face checkpoint's (views, no copy).
class MmprojRenamer {
 public:
  MmprojRenamer(const GgufFile& g, std::string family) : g_(g), family_(std::move(family)) {}
  /// The file's tensor `from` (required) under the Hugging Face name `to`.
  void take(const std::string& from, const std::string& to) {
    MAXTEXT_CHECK(g_.tensors.has(from), IoError, "[mmproj] ", g_.path, ": missing tensor ", from);
    hf_.add(to, g_.tensors.at(from));
    used_.insert(from);
  }
  /// `from`.weight and `from`.bias as `to`.weight and `to`.bias.
  void pair(const std::string& from, const std::string& to) {
    take(from + ".weight", to + ".weight");
    take(from + ".bias", to + ".bias");
  }
  /// The renamed tensors; refuses a file tensor that was not taken, by name.
  const TensorMap& finish() const {
    for (const auto& [name, t] : g_.tensors.tensors) {
      MAXTEXT_CHECK(used_.count(name) != 0, UnsupportedError, "[mmproj] ", g_.path, ": unexpected tensor ", name, " ",
                    t.describe(), " (", family_, "'s vision tower has no such tensor)");
    }
    return hf_;
  }

 private:
  const GgufFile& g_;
  std::string family_;
  TensorMap hf_;
  std::set<std::string> used_;
};

}  // namespace maxtext::io
