// layers/vision_config.hpp: how the vision towers (families/*/vision.hpp) read their configs and checkpoints: a
// MaxText key of the *_for_vit family from Config::extra, or a config.json field, as a number, refused by name when it
// is not one; and a Hugging Face tensor or Linear mapped to MaxText's name (io::map_vision_tensor / map_vision_linear).
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/config.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/name_mapper.hpp"

namespace maxtext::layers {

/// MaxText key `key` (Config::extra; unset or None: `out` kept) as an integer or a floating-point number into `out`;
/// other text is refused as "[what] key: expected an integer / a number, found '...'".
template <class T>
void vit_number(const Config& c, const char* key, T& out, std::string_view what) {
  static_assert(std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>);
  const auto it = c.extra.find(key);
  if (it == c.extra.end() || it->second == "None") return;
  const std::string text = ::maxtext::detail::trim(it->second);
  try {
    std::size_t used = 0;
    if constexpr (std::is_same_v<T, double>) {
      out = std::stod(text, &used);
    } else {
      out = std::stoll(text, &used);
    }
    MAXTEXT_CHECK(used == text.size() && !text.empty(), ConfigError, "");
  } catch (const std::exception&) {
    throw ConfigError(str("[", what, "] ", key, ": expected ", std::is_same_v<T, double> ? "a number" : "an integer",
                          ", found '", it->second, "'"));
  }
}

/// config.json field `o[key]` (absent or null: `out` kept) as an integer (std::int64_t) or a number (double, float)
/// into `out`; another type is refused as "[where] prefix key: expected an integer / a number, found ...".
template <class T>
void json_number(const nlohmann::json& o, const char* key, T& out, std::string_view where, std::string_view prefix = "") {
  if (!o.is_object() || !o.contains(key) || o[key].is_null()) return;
  if constexpr (std::is_integral_v<T>) {
    MAXTEXT_CHECK(o[key].is_number_integer(), IoError, "[", where, "] ", prefix, key, ": expected an integer, found ",
                  o[key].dump());
  } else {
    MAXTEXT_CHECK(o[key].is_number(), IoError, "[", where, "] ", prefix, key, ": expected a number, found ", o[key].dump());
  }
  out = o[key].get<T>();
}

}  // namespace maxtext::layers

namespace maxtext::io {

/// Hugging Face tensor `from` (shape checked) under MaxText's name `to`, as it is.
inline void map_vision_tensor(detail::NameMapper& m, const std::string& from, const std::string& to,
                              const std::vector<std::int64_t>& shape) {
  if (const AnyTensor* t = m.get(from)) {
    m.shape(*t, shape, from);
    m.put(to, *t, from);
  }
}

/// Hugging Face Linear `from` ([out, in] weight, and the [out] bias when `bias`) as MaxText's DenseGeneral `to`
/// (kernel [in, out], bias).
inline void map_vision_linear(detail::NameMapper& m, const std::string& from, const std::string& to, std::int64_t out,
                              std::int64_t in, bool bias) {
  if (const AnyTensor* t = m.get(from + ".weight")) {
    m.shape(*t, {out, in}, from + ".weight");
    m.put(to + ".kernel", t->permuted({1, 0}), from + ".weight");
  }
  if (bias) map_vision_tensor(m, from + ".bias", to + ".bias", {out});
}

}  // namespace maxtext::io
