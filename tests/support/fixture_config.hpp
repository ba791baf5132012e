// tests/support/fixture_config.hpp: read a fixture's meta.json (written by the PyTorch reference scripts): the
// MaxText config keys under "config" become a Config (derived, not validated), other fields are read by the tests.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"

namespace maxtext::test {

inline nlohmann::json read_meta(const std::string& dir) {
  std::ifstream f(dir + "/meta.json");
  MAXTEXT_CHECK(f.good(), IoError, "[test] cannot open ", dir, "/meta.json");
  return nlohmann::json::parse(f);
}

/// Config from meta["config"] (keys as in MaxText's YAML), then derive().
inline Config config_from_meta(const nlohmann::json& meta) {
  Config c;
  for (const auto& [k, v] : meta.at("config").items()) {
    if (v.is_array()) {
      StringList l;
      for (const auto& e : v) l.push_back(e.is_string() ? e.get<std::string>() : e.dump());  // [11, 11, 10]
      c.set_list(k, l, "meta.json");
    } else if (v.is_string()) {
      c.set(k, v.get<std::string>(), "meta.json");
    } else {
      c.set(k, v.dump(), "meta.json");
    }
  }
  c.derive();
  return c;
}

}  // namespace maxtext::test
