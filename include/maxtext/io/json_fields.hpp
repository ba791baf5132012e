// io/json_fields.hpp: typed reads of a Hugging Face config.json's keys for the importers (io/hf_*.hpp). A missing or
// null key gives the default (or, when required, an IoError); a value of the wrong type is an IoError naming the
// file and the key.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"

namespace maxtext::io::detail {

class JsonFields {
 public:
  /// `where` names the file (and object) in messages, e.g. "config.json: text_config".
  JsonFields(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool present(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  std::int64_t integer(const char* key, std::int64_t dflt, bool required = false) const {
    if (!present(key)) {
      MAXTEXT_CHECK(!required, IoError, "[hf] ", where_, " lacks ", key);
      return dflt;
    }
    MAXTEXT_CHECK(j_[key].is_number_integer(), IoError, "[hf] ", where_, ": ", key, ": expected an integer, found ",
                  j_[key].dump());
    return j_[key].get<std::int64_t>();
  }

  double number(const char* key, double dflt) const {
    if (!present(key)) return dflt;
    MAXTEXT_CHECK(j_[key].is_number(), IoError, "[hf] ", where_, ": ", key, ": expected a number, found ", j_[key].dump());
    return j_[key].get<double>();
  }

  /// With numbers_as_bool, a number is true when nonzero (early Llama 4 configs wrote attn_temperature_tuning: 4).
  bool boolean(const char* key, bool dflt, bool numbers_as_bool = false) const {
    if (!present(key)) return dflt;
    const auto& v = j_[key];
    MAXTEXT_CHECK(v.is_boolean() || (numbers_as_bool && v.is_number()), IoError, "[hf] ", where_, ": ", key,
                  ": expected a boolean, found ", v.dump());
    return v.is_boolean() ? v.get<bool>() : v.get<double>() != 0.0;
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace maxtext::io::detail
