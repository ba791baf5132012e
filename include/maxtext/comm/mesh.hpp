// comm/mesh.hpp: the ranks' layout from MaxText's mesh keys (base.yml: ici_*_parallelism within a slice, dcn_* across
// slices, -1 = fill with what is left, num_slices), as MaxText's maxtext_utils.create_device_mesh reads them, for the
// axes inference uses: tensor (ici_tensor_parallelism and ici_autoregressive_parallelism, as MaxText's inference
// configs use them), expert and pipeline (stage). Tensor ranks vary fastest, so that they share a node.
//
// Axes that split what one inference step computes in ways this library does not (data, fsdp, fsdp_transpose,
// sequence, context, tensor_sequence, diloco) greater than 1 are refused by name, and so is a mesh whose size differs
// from the ranks launched. Expert and pipeline layouts are read and placed, and refused until they are built
// (docs/distributed.md says what runs).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"

namespace maxtext::comm {

struct Mesh {
  int tensor = 1;
  int expert = 1;
  int pipeline = 1;

  int size() const { return tensor * expert * pipeline; }
  /// Rank r's coordinates: tensor fastest, then expert, then pipeline stage.
  struct Coords {
    int tensor = 0, expert = 0, pipeline = 0;
  };
  Coords coords(int r) const { return {r % tensor, (r / tensor) % expert, r / (tensor * expert)}; }
  std::string describe() const {
    return "tensor " + std::to_string(tensor) + " x expert " + std::to_string(expert) + " x pipeline " +
           std::to_string(pipeline);
  }

  /// The mesh `cfg` describes for `ranks` processes. Keys left unset take base.yml's values (ici_fsdp_parallelism and
  /// dcn_data_parallelism -1, num_slices -1 = one slice, every other axis 1).
  static Mesh from_config(const Config& cfg, int ranks) {
    MAXTEXT_CHECK(ranks >= 1, ArgumentError, "[mesh] expected at least one rank, found ", ranks);
    const std::int64_t slices_key = value(cfg, "num_slices", -1);
    const std::int64_t slices = slices_key > 0 ? slices_key : 1;
    MAXTEXT_CHECK(ranks % slices == 0, ConfigError, "[mesh] num_slices = ", slices, " does not divide the ", ranks,
                  " ranks launched");
    for (const char* prefix : {"ici", "dcn"}) {  // an axis set above 1 that inference does not use, by its key
      for (const Axis& a : kAxes) {
        const std::string key = std::string(prefix) + "_" + a.name + "_parallelism";
        const std::int64_t v = value(cfg, key, 1);
        MAXTEXT_CHECK(v <= 1 || a.used, UnsupportedError, "[mesh] ", key, " = ", v, ": ", a.why,
                      " (to split a model over ranks by heads, set ici_tensor_parallelism)");
      }
    }
    const std::vector<std::int64_t> ici = fill("ici", cfg, ranks / slices);
    const std::vector<std::int64_t> dcn = fill("dcn", cfg, slices);
    for (std::size_t i = 0; i < kAxes.size(); ++i) {
      const std::int64_t n = ici[i] * dcn[i];
      MAXTEXT_CHECK(n == 1 || kAxes[i].used, UnsupportedError, "[mesh] ", kAxes[i].name, " parallelism = ", n,
                    " (ici_", kAxes[i].name, "_parallelism x dcn_", kAxes[i].name, "_parallelism): ", kAxes[i].why,
                    " (to split a model over ", ranks, " ranks by heads, set ici_tensor_parallelism=", ranks,
                    "; an axis at -1 takes the ranks the others leave)");
    }
    Mesh m;
    m.tensor = static_cast<int>(axis(ici, dcn, "tensor") * axis(ici, dcn, "autoregressive"));
    m.expert = static_cast<int>(axis(ici, dcn, "expert"));
    m.pipeline = static_cast<int>(axis(ici, dcn, "pipeline"));
    MAXTEXT_CHECK(m.size() == ranks, ConfigError, "[mesh] the mesh (", m.describe(), ") has ", m.size(),
                  " ranks, but ", ranks, (ranks == 1 ? " process runs (launch it with mpirun -n " + std::to_string(m.size()) + ")" : " were launched"));
    return m;
  }

 private:
  struct Axis {
    const char* name;
    bool used;
    const char* why;
  };
  static constexpr const char* kNotInference = "it splits training work; an inference step here is split by tensor, "
                                               "expert and pipeline axes only";
  static inline const std::vector<Axis> kAxes = {
      {"diloco", false, kNotInference},
      {"data", false, "independent replicas: run one program per replica instead"},
      {"fsdp", false, kNotInference},
      {"fsdp_transpose", false, kNotInference},
      {"sequence", false, kNotInference},
      {"context", false, "context parallelism is not implemented"},
      {"context_usp_ulysses", false, "context parallelism is not implemented"},
      {"context_autoregressive", false, "context parallelism is not implemented"},
      {"tensor", true, ""},
      {"tensor_sequence", false, "sequence-split tensor parallelism is not implemented"},
      {"autoregressive", true, ""},
      {"expert", true, ""},
      {"pipeline", true, ""},
  };
  static std::int64_t axis(const std::vector<std::int64_t>& ici, const std::vector<std::int64_t>& dcn, const char* n) {
    for (std::size_t i = 0; i < kAxes.size(); ++i) {
      if (std::string(kAxes[i].name) == n) return ici[i] * dcn[i];
    }
    return 1;
  }

 public:
  /// The integer value of a mesh or pipeline-layout key (kept verbatim in Config::extra): -1 or [1, 65536], or `dflt`
  /// when unset; anything else refused by name.
  static std::int64_t value(const Config& cfg, const std::string& key, std::int64_t dflt) {
    const auto it = cfg.extra.find(key);
    if (it == cfg.extra.end() || it->second.empty() || it->second == "None" || it->second == "null") return dflt;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    MAXTEXT_CHECK(end != nullptr && *end == '\0' && (v == -1 || (v >= 1 && v <= 65536)), ConfigError, "[mesh] ", key,
                  ": expected -1 or an integer in [1, 65536], found '", it->second, "'");
    return v;
  }

 private:
  static std::string unit(const char* prefix, std::int64_t n) {
    const bool ici = std::string(prefix) == "ici";
    return std::string(ici ? " rank" : " slice") + (n == 1 ? "" : "s") + (ici ? " per slice" : "");
  }
  /// For one process that a mesh of more ranks was given to: how to launch them.
  static std::string launch_hint(const char* prefix, std::int64_t total, std::int64_t known) {
    if (std::string(prefix) != "ici" || total != 1) return {};
    return " (launch it with mpirun -n " + std::to_string(known) + ")";
  }
  /// The `prefix` ("ici" / "dcn") values of every axis, the one -1 filled so that their product is `total`.
  static std::vector<std::int64_t> fill(const char* prefix, const Config& cfg, std::int64_t total) {
    std::vector<std::int64_t> v;
    std::int64_t known = 1;
    int auto_axis = -1;
    for (std::size_t i = 0; i < kAxes.size(); ++i) {
      const std::string key = std::string(prefix) + "_" + kAxes[i].name + "_parallelism";
      const std::string name = kAxes[i].name;
      const std::int64_t dflt = (std::string(prefix) == "ici" && name == "fsdp") || (std::string(prefix) == "dcn" && name == "data") ? -1 : 1;
      const std::int64_t x = value(cfg, key, dflt);
      if (x == -1) {
        MAXTEXT_CHECK(auto_axis < 0, ConfigError, "[mesh] ", prefix, "_", kAxes[static_cast<std::size_t>(auto_axis)].name,
                      "_parallelism and ", key, " are both -1 (at most one ", prefix, " axis is filled automatically)");
        auto_axis = static_cast<int>(i);
        v.push_back(1);
      } else {
        known *= x;
        v.push_back(x);
      }
    }
    if (auto_axis >= 0) {
      MAXTEXT_CHECK(total % known == 0, ConfigError, "[mesh] the ", prefix, "_*_parallelism keys set multiply to ",
                    known, ", which does not divide the ", total, unit(prefix, total), " launched (", prefix, "_",
                    kAxes[static_cast<std::size_t>(auto_axis)].name, "_parallelism = -1 takes the rest)",
                    launch_hint(prefix, total, known));
      v[static_cast<std::size_t>(auto_axis)] = total / known;
    } else {
      MAXTEXT_CHECK(known == total, ConfigError, "[mesh] the ", prefix, "_*_parallelism keys multiply to ", known,
                    ", but ", total, unit(prefix, total), " were launched", launch_hint(prefix, total, known));
    }
    return v;
  }
};

}  // namespace maxtext::comm
