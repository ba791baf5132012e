// io/yaml_config.hpp: MaxText-style configuration loading: base.yml defaults (compiled into Config), a YAML file,
// the model file named by `model_name` (configs/models/<name>.yml), then `key=value` overrides, as MaxText's
// pyconfig does; derived values computed, the result validated and every key checked (core/config_keys.hpp).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "maxtext/core/config.hpp"
#include "maxtext/core/config_keys.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext::io {

/// Apply every top-level key of a YAML mapping to `cfg`. Nested mappings are kept verbatim in cfg.extra.
inline void apply_yaml_node(Config& cfg, const YAML::Node& root, const std::string& where) {
  MAXTEXT_CHECK(root.IsMap() || root.IsNull(), ConfigError, "[config] ", where, ": top level must be a mapping");
  for (const auto& kv : root) {  // kv: a (key, value) pair held by value; never bind a reference to it->second
    // A complex key (`? [a, b]`) has no string form: refuse it here rather than let yaml-cpp's conversion escape.
    MAXTEXT_CHECK(kv.first.IsScalar(), ConfigError, "[config] ", where, ": keys must be plain names, found ",
                  YAML::Dump(kv.first));
    const std::string key = kv.first.Scalar();
    const YAML::Node v = kv.second;
    if (key == "base_config") continue;  // our defaults are base.yml
    try {
      if (v.IsNull()) {
        if (!Config::known(key)) cfg.extra[key] = "None";
        continue;  // None keeps the default
      }
      if (v.IsSequence()) {
        StringList items;
        for (const auto& e : v) items.push_back(e.IsScalar() ? e.as<std::string>() : YAML::Dump(e));
        cfg.set_list(key, items, where);
      } else if (v.IsScalar()) {
        cfg.set(key, v.as<std::string>(), where);
      } else {
        MAXTEXT_CHECK(!Config::known(key), ConfigError, "[config] ", where, ": ", key, " must be a scalar or a list");
        cfg.extra[key] = YAML::Dump(v);
      }
    } catch (const ConfigError& e) {
      throw ConfigError(std::string(e.what()) + " (in " + where + ")");
    }
  }
}

/// Apply a YAML file.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void apply_yaml_file(Config& cfg, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    MAXTEXT_THROW(IoError, "[config] ", path, ": cannot open");
  } catch (const YAML::Exception& e) {
    MAXTEXT_THROW(ConfigError, "[config] ", path, ": invalid YAML: ", e.what());
  }
  apply_yaml_node(cfg, root, path);
}
#else
void apply_yaml_file(Config& cfg, const std::string& path);
#endif

/// Apply one command-line override `key=value` (lists as [a,b] or a,b).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API void apply_override(Config& cfg, const std::string& kv) {
  const auto eq = kv.find('=');
  MAXTEXT_CHECK(eq != std::string::npos && eq > 0, ConfigError, "[config] override '", kv, "' must look like key=value");
  const std::string key = maxtext::detail::trim(kv.substr(0, eq)), value = kv.substr(eq + 1);
  if (key == "mlp_activations") {
    StringList l;
    maxtext::detail::parse_value(key, value, l);
    cfg.set_list(key, l, "override");
  } else {
    cfg.set(key, value, "override");
  }
}
#else
void apply_override(Config& cfg, const std::string& kv);
#endif

/// Directories searched for configs/models/<model_name>.yml: $MAXTEXT_CONFIG_DIR, then `extra`, then the source
/// tree / install prefix this header came from (when known at compile time).
inline std::vector<std::string> config_search_dirs(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("MAXTEXT_CONFIG_DIR")) dirs.emplace_back(env);
  dirs.insert(dirs.end(), extra.begin(), extra.end());
#ifdef MAXTEXT_DEFAULT_CONFIG_DIR
  dirs.emplace_back(MAXTEXT_DEFAULT_CONFIG_DIR);
#endif
  return dirs;
}

/// Find configs for a model name: <dir>/models/<name>.yml in the search directories.
inline std::string find_model_config(const std::string& model_name, const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) {
    for (const char* sub : {"models/", "configs/models/", ""}) {
      const std::filesystem::path p = std::filesystem::path(d) / (std::string(sub) + model_name + ".yml");
      if (std::filesystem::is_regular_file(p)) return p.string();
    }
  }
  return {};
}

/// Build a Config the way MaxText does: defaults <- `path` (if not empty) <- models/<model_name>.yml (if model_name is
/// not "default" and such a file exists) <- overrides. Then derive(), validate() and check_config_keys(): a key that is
/// unknown (the nearest known one is named), a refused feature turned on, or a value the library does not honour is
/// refused (docs/config.md).
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                          const std::vector<std::string>& search_dirs = config_search_dirs()) {
  Config cfg;
  if (!path.empty()) apply_yaml_file(cfg, path);
  // model_name may come from the file or from an override.
  std::string model_name = cfg.model_name;
  for (const auto& o : overrides) {
    if (o.rfind("model_name=", 0) == 0) model_name = maxtext::detail::unquote(o.substr(11));
  }
  if (model_name != "default") {
    std::vector<std::string> dirs = search_dirs;
    if (!path.empty()) dirs.push_back(std::filesystem::path(path).parent_path().string());
    const std::string model_file = find_model_config(model_name, dirs);
    if (!model_file.empty() && std::filesystem::path(model_file) != std::filesystem::path(path)) {
      apply_yaml_file(cfg, model_file);
    }
  }
  for (const auto& o : overrides) apply_override(cfg, o);
  cfg.derive();
  cfg.validate();
  check_config_keys(cfg);
  return cfg;
}
#else
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                          const std::vector<std::string>& search_dirs = config_search_dirs());
#endif

}  // namespace maxtext::io
