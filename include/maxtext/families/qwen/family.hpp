// families/qwen/family.hpp: the Qwen family (MaxText's qwen2, qwen3, qwen3_moe and qwen3_custom_moe blocks) as the
// format-level code sees it (families/families.hpp): config.json types qwen2 / qwen3 / qwen3_moe and llama.cpp's
// qwen2 / qwen3 / qwen3moe GGUF files through the Llama-style readers (families/llama2/import.hpp); qwen3_custom_moe
// reads MaxText checkpoints only.
//
// Qwen3-Omni (config.json model_type qwen3_omni_moe, Qwen3OmniMoeForConditionalGeneration): its thinker's text model
// is MaxText's qwen3_moe block with use_mrope (configs/models/qwen3-omni-30b-a3b.yml), read from
// thinker_config.text_config (rope_scaling.mrope_section, interleaved as MaxText's _apply_interleaved_mrope) and the
// thinker.model.* / thinker.lm_head.* tensors; the towers (thinker.audio_tower.*, thinker.visual.*: families/qwen/
// audio.hpp, vision.hpp) and the speech side (talker.*, code2wav.*) are left to their readers.
// Qwen3-VL (model_type qwen3_vl / qwen3_vl_moe): text_config read as qwen3 / qwen3_moe with use_mrope likewise, the
// model.language_model.* and lm_head.weight tensors (the MoE's experts as 3-D tensors); model.visual.* is the vision
// encoder's (families/qwen/vision.hpp).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/families/llama2/family.hpp"
#include "maxtext/families/qwen/qwen2.hpp"
#include "maxtext/families/qwen/qwen3.hpp"
#include "maxtext/families/qwen/qwen3_custom.hpp"
#include "maxtext/io/gguf.hpp"

namespace maxtext::families {

using io::TensorMap;

struct Qwen : LlamaStyle {
  static constexpr std::array<std::string_view, 4> blocks{"qwen2", "qwen3", "qwen3_moe", "qwen3_custom_moe"};
  static constexpr std::array<std::string_view, 6> hf_model_types{"qwen2",          "qwen3",   "qwen3_moe",
                                                                  "qwen3_omni_moe", "qwen3_vl", "qwen3_vl_moe"};
  static constexpr std::array<std::string_view, 3> gguf_architectures{"qwen2", "qwen3", "qwen3moe"};

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    refuse_custom(cfg, where);
    return LlamaStyle::import_gguf(g, cfg, where);
  }
  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    const std::string type = j.value("model_type", std::string());
    if (type == "qwen3_omni_moe") return multimodal_config(j, where, "thinker_config", "qwen3_omni_moe_text", "qwen3_moe");
    if (type == "qwen3_vl") return multimodal_config(j, where, "", "qwen3_vl_text", "qwen3");
    if (type == "qwen3_vl_moe") return multimodal_config(j, where, "", "qwen3_vl_moe_text", "qwen3_moe");
    return LlamaStyle::config_from_hf(j, where);
  }
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where,
                             const std::string& config_json) {
    refuse_custom(cfg, where);
    if (raw.has("thinker.model.embed_tokens.weight")) return omni_import(raw, cfg, where);
    if (raw.has("model.language_model.embed_tokens.weight")) return vl_import(raw, cfg, where);
    return LlamaStyle::import_hf(raw, cfg, where, config_json);
  }
  static TensorMap import_llama2c(const TensorMap& tensors, const Config& cfg, const std::string& where) {
    refuse_custom(cfg, where);
    return LlamaStyle::import_llama2c(tensors, cfg, where);
  }

 private:
  /// The text model of Qwen3-Omni's thinker (thinker_config.text_config) or of Qwen3-VL (text_config), read as
  /// `block` (qwen3 / qwen3_moe), plus MRoPE's sections.
  static Config multimodal_config(const nlohmann::json& j, const std::string& where, const std::string& outer,
                                  const std::string& text_type, const std::string& block) {
    const nlohmann::json* o = &j;
    if (!outer.empty()) {
      MAXTEXT_CHECK(j.contains(outer) && j[outer].is_object(), IoError, "[hf] ", where, ": a ",
                    j.value("model_type", std::string()), " config.json without ", outer);
      o = &j[outer];
    }
    const std::string path = outer.empty() ? "text_config" : outer + ".text_config";
    MAXTEXT_CHECK(o->contains("text_config") && (*o)["text_config"].is_object(), IoError, "[hf] ", where, ": a ",
                  j.value("model_type", std::string()), " config.json without ", path);
    nlohmann::json t = (*o)["text_config"];
    const std::string type = t.value("model_type", text_type);
    MAXTEXT_CHECK(type == text_type, UnsupportedError, "[hf] ", where, ": ", path, ".model_type '", type,
                  "': expected ", text_type);
    // transformers >= 5 spells the experts' count num_local_experts.
    if (!t.contains("num_experts") && t.contains("num_local_experts")) t["num_experts"] = t["num_local_experts"];
    nlohmann::json sections;
    bool interleaved = true;
    // transformers >= 5 re-saves rope_scaling and rope_theta as rope_parameters.
    if (t.contains("rope_parameters") && t["rope_parameters"].is_object() && !t.contains("rope_scaling")) {
      t["rope_scaling"] = t["rope_parameters"];
      if (t["rope_parameters"].contains("rope_theta")) t["rope_theta"] = t["rope_parameters"]["rope_theta"];
      t["rope_scaling"].erase("rope_theta");
      t.erase("rope_parameters");
    }
    if (t.contains("rope_scaling") && t["rope_scaling"].is_object()) {
      const nlohmann::json& rs = t["rope_scaling"];
      if (rs.contains("mrope_section")) sections = rs["mrope_section"];
      interleaved = rs.value("interleaved", rs.value("mrope_interleaved", true));
      // The rest of rope_scaling is the plain rotary's ("default"): read by the Llama-style reader.
      nlohmann::json rest = rs;
      for (const char* k : {"mrope_section", "interleaved", "mrope_interleaved"}) rest.erase(k);
      t["rope_scaling"] = rest;
    }
    MAXTEXT_CHECK(interleaved, UnsupportedError, "[hf] ", where, ": ", path, ".rope_scaling: "
                  "interleaved = false (sectioned MRoPE): MaxText's Qwen3-Omni / Qwen3-VL rotary is the interleaved one");
    MAXTEXT_CHECK(sections.is_array() && sections.size() == 3, IoError, "[hf] ", where, ": ", path,
                  ".rope_scaling.mrope_section: expected three integers, found ", sections.dump());
    std::vector<std::string> sec;
    for (const auto& v : sections) {
      MAXTEXT_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0, IoError, "[hf] ", where, ": ", path,
                    ".rope_scaling.mrope_section: expected integers, found ", sections.dump());
      sec.push_back(std::to_string(v.get<std::int64_t>()));
    }
    t["model_type"] = block;
    Config c = LlamaStyle::config_from_hf(t, where + ": " + path);
    c.use_mrope = true;
    c.set_list("mrope_section", sec, where);
    c.derive();
    return c;
  }
  /// thinker.model.* / thinker.lm_head.weight as a Qwen3MoeForCausalLM's names; the towers and the speech side out.
  static TensorMap omni_import(const TensorMap& raw, const Config& cfg, const std::string& where) {
    TensorMap text;
    for (const auto& [name, t] : raw.tensors) {
      if (name.rfind("thinker.model.", 0) == 0 || name.rfind("thinker.lm_head.", 0) == 0) {
        text.add(name.substr(8), t);
      } else {
        MAXTEXT_CHECK(name.rfind("thinker.audio_tower.", 0) == 0 || name.rfind("thinker.visual.", 0) == 0 ||
                          name.rfind("talker.", 0) == 0 || name.rfind("code2wav.", 0) == 0,
                      IoError, "[hf] ", where, ": unexpected tensor ", name, " in a Qwen3-Omni checkpoint (thinker.model.*, "
                      "thinker.lm_head.*, thinker.audio_tower.*, thinker.visual.*, talker.*, code2wav.*)");
      }
    }
    return io::import_hf_names(text, cfg, !text.has("lm_head.weight"), where);
  }
  /// Qwen3-VL: model.language_model.* / lm_head.weight as a Qwen3ForCausalLM's / Qwen3MoeForCausalLM's names; the
  /// experts' 3-D tensors (mlp.experts.gate_up_proj [E, D, 2F], gate columns first, and down_proj [E, F, D], as the
  /// released checkpoints store them; or transformers 5's [E, 2F, D] and [E, D, F]) as per-expert matrices;
  /// model.visual.* left to the vision encoder's reader.
  static TensorMap vl_import(const TensorMap& raw, const Config& cfg, const std::string& where) {
    TensorMap text;
    const std::string lm = "model.language_model.";
    const std::int64_t E = cfg.num_experts, D = cfg.emb_dim, F = cfg.moe_mlp_dim;
    for (const auto& [name, t] : raw.tensors) {
      if (name.rfind("model.visual.", 0) == 0) continue;
      if (name == "lm_head.weight") {
        text.add(name, t);
        continue;
      }
      MAXTEXT_CHECK(name.rfind(lm, 0) == 0, IoError, "[hf] ", where, ": unexpected tensor ", name,
                    " in a Qwen3-VL checkpoint (model.language_model.*, lm_head.weight, model.visual.*)");
      const std::string rest = "model." + name.substr(lm.size());
      const auto at = rest.find(".mlp.experts.");
      if (at == std::string::npos || !cfg.is("qwen3_moe")) {
        text.add(rest, t);
        continue;
      }
      const std::string prefix = rest.substr(0, at) + ".mlp.experts.", leaf = rest.substr(at + 13);
      MAXTEXT_CHECK(leaf == "gate_up_proj" || leaf == "down_proj", IoError, "[hf] ", where, ": unexpected tensor ", name,
                    " (the experts are gate_up_proj and down_proj)");
      const bool released = leaf == "gate_up_proj" ? t.shape == std::vector<std::int64_t>{E, D, 2 * F}
                                                   : t.shape == std::vector<std::int64_t>{E, F, D};
      const bool v5 = leaf == "gate_up_proj" ? t.shape == std::vector<std::int64_t>{E, 2 * F, D}
                                             : t.shape == std::vector<std::int64_t>{E, D, F};
      MAXTEXT_CHECK(released || v5, ShapeError, "[hf] ", where, ": ", name, ": expected ",
                    leaf == "gate_up_proj" ? std::vector<std::int64_t>{E, D, 2 * F} : std::vector<std::int64_t>{E, F, D},
                    " (or transformers 5's transpose), found ", t.describe());
      for (std::int64_t e = 0; e < E; ++e) {
        const AnyTensor one = t.narrow(0, e, 1).reshaped({t.shape[1], t.shape[2]});
        const std::string to = prefix + std::to_string(e) + ".";
        if (leaf == "gate_up_proj") {  // HF Linear weights [out, in]
          text.add(to + "gate_proj.weight", released ? one.narrow(1, 0, F).permuted({1, 0}) : one.narrow(0, 0, F));
          text.add(to + "up_proj.weight", released ? one.narrow(1, F, F).permuted({1, 0}) : one.narrow(0, F, F));
        } else {
          text.add(to + "down_proj.weight", released ? one.permuted({1, 0}) : one);
        }
      }
    }
    return io::import_hf_names(text, cfg, !text.has("lm_head.weight"), where);
  }
  static void refuse_custom(const Config& cfg, const std::string& where) {
    MAXTEXT_CHECK(!cfg.is("qwen3_custom_moe"), UnsupportedError, "[weights] ", where, ": decoder_block ",
                  cfg.decoder_block,
                  " reads MaxText checkpoints only (no Hugging Face / GGUF / llama2.c importer for it)");
  }
};

}  // namespace maxtext::families
