// families/deepseek/family.hpp: the DeepSeek family (MaxText's deepseek block: DeepSeek-V2, V2-Lite, V3 / R1, with
// MLA, routed experts and, optionally, Engram layers) as the format-level code sees it (families/families.hpp): its
// config.json types (deepseek_v2, deepseek_v3, and mixtral, whose Hugging Face files it also maps), llama.cpp's
// deepseek2 GGUF files, and its scanned checkpoint tree (two stacks, dense and MoE, split at Engram layers).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/families/deepseek/deepseek.hpp"
#include "maxtext/families/deepseek/gguf.hpp"
#include "maxtext/families/deepseek/import.hpp"
#include "maxtext/families/hooks.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/safetensors.hpp"

namespace maxtext::io {

/// DeepSeek's scanned layout with Engram layers (decoders.py _apply_interleaved_scanned_layers): an Engram layer i
/// stays unscanned as `decoder.{dense,moe}_layers_engram_i.X`; each run of the other layers a..b of a group (global
/// indices, split at the Engram layers) is its own scan, `decoder.{dense,moe}_layers_a_b.X` with b - a + 1 layers on
/// param_scan_axis. Both become the unscanned `decoder.dense_layers_i` / `decoder.moe_layers_(i -
/// first_num_dense_layers)`.
inline bool canonicalize_deepseek_engram_scanned(const std::string& name, const AnyTensor& t, const Config& cfg,
                                                 TensorMap& out) {
  const std::int64_t dense = cfg.first_num_dense_layers, L = cfg.num_decoder_layers;
  for (const bool moe : {false, true}) {
    const std::string group = moe ? "moe_layers" : "dense_layers", head = "decoder." + group + "_";
    if (name.compare(0, head.size(), head) != 0) continue;
    const std::string where = "[checkpoint] " + t.source + ": scanned DeepSeek tensor " + name;
    const std::size_t dot = name.find('.', head.size());
    if (dot == std::string::npos) return false;
    const std::string key = name.substr(head.size(), dot - head.size()), rest = name.substr(dot + 1);
    const auto number = [&](const std::string& d) {
      MAXTEXT_CHECK(!d.empty() && d.size() < 10 && d.find_first_not_of("0123456789") == std::string::npos, ShapeError,
                    where, ": expected ", head, "<i>, ", head, "engram_<i> or ", head, "<a>_<b>");
      return std::stoll(d);
    };
    const auto target = [&](std::int64_t i) {
      MAXTEXT_CHECK(moe ? (i >= dense && i < L) : (i >= 0 && i < dense), ShapeError, where, ": layer ", i, " is not a ",
                    moe ? "MoE" : "dense", " layer (first_num_dense_layers ", dense, ", num_decoder_layers ", L, ")");
      return "decoder." + group + "_" + std::to_string(moe ? i - dense : i) + "." + rest;
    };
    const std::string engram = "engram_";
    if (key.compare(0, engram.size(), engram) == 0) {
      out.add(target(number(key.substr(engram.size()))), t);
      return true;
    }
    const std::size_t us = key.find('_');
    if (us == std::string::npos) return false;  // decoder.<group>_<i>: already unscanned
    const std::int64_t a = number(key.substr(0, us)), b = number(key.substr(us + 1));
    const int axis = static_cast<int>(cfg.param_scan_axis);
    MAXTEXT_CHECK(b >= a && axis >= 0 && axis < t.rank() && t.shape[static_cast<std::size_t>(axis)] == b - a + 1,
                  ShapeError, where, " ", t.describe(), ": expected ", b - a + 1, " layers (", a, " to ", b,
                  ") on axis ", axis, " (param_scan_axis)");
    for (std::int64_t i = a; i <= b; ++i) {
      AnyTensor v = t.select(axis, i - a);
      v.source = t.source + "[layer " + std::to_string(i) + "]";
      out.add(target(i), std::move(v));
    }
    return true;
  }
  return false;
}

}  // namespace maxtext::io

namespace maxtext::families {

using io::TensorMap;

struct DeepSeek {
  static constexpr std::array<std::string_view, 1> blocks{"deepseek"};
  static constexpr std::array<std::string_view, 3> hf_model_types{"deepseek_v2", "deepseek_v3", "mixtral"};
  static constexpr std::array<std::string_view, 1> gguf_architectures{"deepseek2"};

  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    Config c = io::config_from_hf_deepseek(j, where);
    c.derive();
    return c;
  }
  static Config config_from_gguf(const io::GgufFile& g) { return io::config_from_gguf_deepseek(g); }

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    require_gguf_architecture(g, cfg, "deepseek2");
    return io::import_gguf_deepseek(g.tensors, cfg, where);
  }
  /// DeepSeek-V2 / V3 (FP8 included).
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string&, const std::string&) {
    return io::canonicalize_hf_deepseek(raw, cfg);
  }

  static std::vector<std::pair<std::string, std::int64_t>> scanned_groups(const Config& cfg) {
    return {{"dense_layers", cfg.first_num_dense_layers},
            {"moe_layers", cfg.num_decoder_layers - cfg.first_num_dense_layers}};
  }
  static bool unstack_scanned(const std::string& name, const AnyTensor& t, const Config& cfg, TensorMap& out) {
    return !cfg.engram_layers().empty() && io::canonicalize_deepseek_engram_scanned(name, t, cfg, out);
  }
};

}  // namespace maxtext::families
