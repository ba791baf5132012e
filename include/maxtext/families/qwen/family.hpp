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
#pragma once

#include <array>
#include <string>
#include <string_view>

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
  static constexpr std::array<std::string_view, 4> hf_model_types{"qwen2", "qwen3", "qwen3_moe", "qwen3_omni_moe"};
  static constexpr std::array<std::string_view, 3> gguf_architectures{"qwen2", "qwen3", "qwen3moe"};

  static TensorMap import_gguf(const io::GgufFile& g, const Config& cfg, const std::string& where) {
    refuse_custom(cfg, where);
    return LlamaStyle::import_gguf(g, cfg, where);
  }
  static Config config_from_hf(const nlohmann::json& j, const std::string& where) {
    if (j.value("model_type", std::string()) != "qwen3_omni_moe") return LlamaStyle::config_from_hf(j, where);
    return omni_config(j, where);
  }
  static TensorMap import_hf(const TensorMap& raw, const Config& cfg, const std::string& where,
                             const std::string& config_json) {
    refuse_custom(cfg, where);
    if (raw.has("thinker.model.embed_tokens.weight")) return omni_import(raw, cfg, where);
    return LlamaStyle::import_hf(raw, cfg, where, config_json);
  }
  static TensorMap import_llama2c(const TensorMap& tensors, const Config& cfg, const std::string& where) {
    refuse_custom(cfg, where);
    return LlamaStyle::import_llama2c(tensors, cfg, where);
  }

 private:
  /// Qwen3-Omni's thinker text model: thinker_config.text_config read as qwen3_moe, plus MRoPE's sections.
  static Config omni_config(const nlohmann::json& j, const std::string& where) {
    MAXTEXT_CHECK(j.contains("thinker_config") && j["thinker_config"].is_object() &&
                      j["thinker_config"].contains("text_config") && j["thinker_config"]["text_config"].is_object(),
                  IoError, "[hf] ", where, ": a qwen3_omni_moe config.json without thinker_config.text_config");
    nlohmann::json t = j["thinker_config"]["text_config"];
    const std::string type = t.value("model_type", std::string("qwen3_omni_moe_text"));
    MAXTEXT_CHECK(type == "qwen3_omni_moe_text", UnsupportedError, "[hf] ", where,
                  ": thinker_config.text_config.model_type '", type, "': expected qwen3_omni_moe_text");
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
    MAXTEXT_CHECK(interleaved, UnsupportedError, "[hf] ", where, ": thinker_config.text_config.rope_scaling: "
                  "interleaved = false (sectioned MRoPE): MaxText's Qwen3-Omni rotary is the interleaved one");
    MAXTEXT_CHECK(sections.is_array() && sections.size() == 3, IoError, "[hf] ", where,
                  ": thinker_config.text_config.rope_scaling.mrope_section: expected three integers, found ",
                  sections.dump());
    std::vector<std::string> sec;
    for (const auto& v : sections) {
      MAXTEXT_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0, IoError, "[hf] ", where,
                    ": thinker_config.text_config.rope_scaling.mrope_section: expected integers, found ", sections.dump());
      sec.push_back(std::to_string(v.get<std::int64_t>()));
    }
    t["model_type"] = "qwen3_moe";
    Config c = LlamaStyle::config_from_hf(t, where + ": thinker_config.text_config");
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
  static void refuse_custom(const Config& cfg, const std::string& where) {
    MAXTEXT_CHECK(!cfg.is("qwen3_custom_moe"), UnsupportedError, "[weights] ", where, ": decoder_block ",
                  cfg.decoder_block,
                  " reads MaxText checkpoints only (no Hugging Face / GGUF / llama2.c importer for it)");
  }
};

}  // namespace maxtext::families
