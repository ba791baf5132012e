// models/json_schema.hpp: a JSON Schema compiled to a GBNF grammar (models/grammar.hpp), so that constrained output
// is a JSON document the schema accepts (response_format json_schema, tool arguments).
//
//   auto g = models::grammar::grammar_from_json_schema(nlohmann::ordered_json::parse(schema_text));
//   models::grammar::Matcher m(g);
//
// What the grammar enforces:
// - `type` (string, number, integer, boolean, null, object, array, or a list of them), `enum`, `const`;
// - objects: `properties` in the order the schema lists them, `required`, and `additionalProperties` (false: no other
//   key; absent or true: any other members after the listed ones; a schema: other members of that schema);
// - arrays: `items`, `minItems`, `maxItems`; strings: `minLength`, `maxLength` (in code points);
// - integers (`type: integer` alone): `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (JSON numbers, as in
//   draft 6 and later), written out as digit ranges, within the integers the grammar writes (at most 16 digits);
// - `anyOf` and `oneOf` (a value of one of the schemas: oneOf's "exactly one" is not checked, as in llama.cpp),
//   `allOf` with one schema, local `$ref` (`#/$defs/...`, `#/definitions/...`, `#`), recursion included.
// Annotations are read and ignored: title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, and `format` (an annotation in JSON Schema 2020-12 unless a validator opts in).
// Every other keyword (pattern, multipleOf, uniqueItems, prefixItems, not, if/then/else, ...) is
// refused by name with the schema path where it stands, never ignored.
// Whitespace between tokens is at most 20 spaces, tabs or newlines at each place (a model cannot loop on blanks).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/models/grammar.hpp"

namespace maxtext::models::grammar {

namespace detail {

/// A GBNF literal for `text` (UTF-8 kept; quotes, backslashes and controls escaped).
inline std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const nlohmann::ordered_json& root) : root_(root) {}

  std::string run() {
    rules_["ws"] = "[ \\t\\n]{0,20}";
    rules_["char"] = R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))";
    rules_["string"] = "\"\\\"\" char* \"\\\"\"";
    rules_["number"] = R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?)";
    rules_["integer"] = R"("-"? ("0" | [1-9] [0-9]{0,15}))";
    rules_["boolean"] = R"("true" | "false")";
    rules_["null"] = R"("null")";
    rules_["value"] = "object | array | string | number | boolean | null";
    rules_["object"] = R"("{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}")";
    rules_["array"] = R"("[" ws ( value ( ws "," ws value )* )? ws "]")";
    const std::string top = compile(root_, "#", "root");
    if (top != "root") rules_["root"] = top;
    std::string out;
    out += "root ::= " + rules_.at("root") + "\n";
    for (const auto& [name, body] : rules_) {
      if (name != "root") out += name + " ::= " + body + "\n";
    }
    return out;
  }

 private:
  [[noreturn]] static void refuse(const std::string& path, const std::string& what) {
    MAXTEXT_THROW(ArgumentError, "[json_schema] ", path, ": ", what);
  }

  /// A rule name for `hint` not used yet (names: letters, digits, '-').
  std::string fresh(const std::string& hint) {
    std::string base;
    for (const char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      base += ok ? c : '-';
    }
    if (base.empty() || kReserved.count(base) != 0) base = "s-" + base;
    std::string name = base;
    for (int i = 2; rules_.count(name) != 0 || pending_.count(name) != 0; ++i) name = base + "-" + std::to_string(i);
    pending_.insert(name);
    return name;
  }

  /// The rule matching `s` (at schema path `path`); `hint` names a new rule. Returns a rule name or a GBNF expression.
  std::string compile(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    struct Depth {
      int& d;
      explicit Depth(int& v) : d(++v) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxDepth) refuse(path, "schemas nested deeper than " + std::to_string(kMaxDepth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return "value";
      refuse(path, "the schema false accepts no value");
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean, found " + std::string(s.type_name()));
    static const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",
                                                       "$schema",  "$id",         "$comment", "deprecated",
                                                       "readOnly", "writeOnly",   "format",   "$defs",
                                                       "definitions"};
    static const std::set<std::string> kKnown = {"type",     "enum",     "const",    "properties", "required",
                                                 "additionalProperties", "items",    "minItems",   "maxItems",
                                                 "minLength", "maxLength", "anyOf",   "oneOf",      "allOf",
                                                 "$ref",     "minimum",  "maximum",  "exclusiveMinimum",
                                                 "exclusiveMaximum"};
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (kAnnotations.count(k) == 0 && kKnown.count(k) == 0) {
        refuse(path, "keyword '" + k + "' is not supported (the grammar would not enforce it)");
      }
    }
    const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                         s.contains("exclusiveMaximum");
    if (bounded && (!s.contains("type") || s["type"] != "integer" || s.contains("enum") || s.contains("const"))) {
      refuse(path, "minimum, maximum, exclusiveMinimum and exclusiveMaximum are enforced for type integer alone "
                   "(not for numbers, a list of types, or beside enum / const)");
    }
    if (s.contains("$ref")) {
      if (s.size() > 1) {
        for (const auto& [k, v] : s.items()) {
          (void)v;
          if (k != "$ref" && kAnnotations.count(k) == 0) refuse(path, "'$ref' beside '" + k + "' is not supported");
        }
      }
      return ref(s["$ref"], path);
    }
    if (s.contains("const")) return emit(hint, gbnf_literal(s["const"].dump()));
    if (s.contains("enum")) {
      const auto& e = s["enum"];
      if (!e.is_array() || e.empty()) refuse(path + "/enum", "expected a non-empty array");
      std::string body;
      for (const auto& v : e) body += (body.empty() ? "" : " | ") + gbnf_literal(v.dump());
      return emit(hint, body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const auto& alts = s[key];
      if (!alts.is_array() || alts.empty()) refuse(path + "/" + key, "expected a non-empty array of schemas");
      std::string body;
      for (std::size_t i = 0; i < alts.size(); ++i) {
        body += (i ? " | " : "") + compile(alts[i], path + "/" + key + "/" + std::to_string(i), hint + "-" + std::to_string(i));
      }
      return emit(hint, body);
    }
    if (s.contains("allOf")) {
      const auto& a = s["allOf"];
      if (!a.is_array() || a.size() != 1) refuse(path + "/allOf", "only an allOf of one schema is supported");
      return compile(a[0], path + "/allOf/0", hint);
    }
    if (!s.contains("type")) {
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
        return object(s, path, hint);
      }
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return array(s, path, hint);
      if (s.contains("minLength") || s.contains("maxLength")) return string(s, path, hint);
      return "value";
    }
    const auto& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) refuse(path + "/type", "an empty list of types");
      std::string body;
      for (std::size_t i = 0; i < t.size(); ++i) body += (i ? " | " : "") + of_type(s, t[i], path, hint + "-" + std::to_string(i));
      return emit(hint, body);
    }
    return of_type(s, t, path, hint);
  }

  std::string of_type(const nlohmann::ordered_json& s, const nlohmann::ordered_json& t, const std::string& path,
                      const std::string& hint) {
    if (!t.is_string()) refuse(path + "/type", "expected a type name or a list of them");
    const std::string type = t.get<std::string>();
    if (type == "object") return object(s, path, hint);
    if (type == "array") return array(s, path, hint);
    if (type == "string") return string(s, path, hint);
    if (type == "integer" && (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                              s.contains("exclusiveMaximum"))) {
      return integer(s, path, hint);
    }
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
    refuse(path + "/type", "unknown type '" + type + "' (string, number, integer, boolean, null, object, array)");
  }

  static std::int64_t count_of(const nlohmann::ordered_json& s, const char* key, const std::string& path) {
    const auto& v = s[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) refuse(path + "/" + key, "expected an integer >= 0");
    const auto n = v.get<std::int64_t>();
    if (n > kMaxRepeat) refuse(path + "/" + key, "above " + std::to_string(kMaxRepeat) + " (the grammar's bound)");
    return n;
  }

  static std::string repeat(std::int64_t lo, std::int64_t hi) {
    if (hi < 0) return "{" + std::to_string(lo) + ",}";
    return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  /// The largest magnitude the grammar's integers reach (16 digits, as the `integer` rule).
  static constexpr std::int64_t kMaxMagnitude = 9999999999999999;

  /// The integers in [lo, hi] from the schema's bounds (clamped to +-kMaxMagnitude); refused when there is none.
  std::string integer(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    constexpr std::int64_t kOut = kMaxMagnitude + 1;  // a bound beyond the grammar's integers, either side
    // The least (up = true: greatest) integer n with n >= v (n > v when exclusive; up: n <= v, n < v), clamped to
    // [-kOut, kOut]. Integral JSON values are taken exactly (a double holds 53 bits, the grammar's integers 54).
    auto integral = [&](const char* key, bool up, bool exclusive) -> std::int64_t {
      const auto& v = s[key];
      if (!v.is_number()) refuse(path + "/" + key, "expected a number");
      if (v.is_number_unsigned()) {
        const std::uint64_t u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(kOut)) return kOut;
        const auto x = static_cast<std::int64_t>(u);
        return exclusive ? (up ? x - 1 : x + 1) : x;
      }
      if (v.is_number_integer()) {
        const std::int64_t x = std::clamp(v.get<std::int64_t>(), -kOut, kOut);
        return exclusive ? (up ? x - 1 : x + 1) : x;
      }
      const double d = v.get<double>();
      const double r = up ? (exclusive ? std::ceil(d) - 1 : std::floor(d)) : (exclusive ? std::floor(d) + 1 : std::ceil(d));
      return static_cast<std::int64_t>(std::clamp(r, -static_cast<double>(kOut), static_cast<double>(kOut)));
    };
    std::int64_t lo = -kMaxMagnitude, hi = kMaxMagnitude;
    if (s.contains("minimum")) lo = std::max(lo, integral("minimum", false, false));
    if (s.contains("exclusiveMinimum")) lo = std::max(lo, integral("exclusiveMinimum", false, true));
    if (s.contains("maximum")) hi = std::min(hi, integral("maximum", true, false));
    if (s.contains("exclusiveMaximum")) hi = std::min(hi, integral("exclusiveMaximum", true, true));
    if (lo > hi) refuse(path, "no integer the grammar writes (at most 16 digits) lies within the bounds");
    return emit(hint, integer_range(lo, hi));
  }

  /// GBNF for the decimal integers (no leading zeros, "-" for negatives, no "-0") in [lo, hi].
  static std::string integer_range(std::int64_t lo, std::int64_t hi) {
    std::vector<std::string> alts;
    if (lo < 0) {  // "-" then the magnitudes [max(1, -hi), -lo]
      for (const std::string& a : magnitudes(std::max<std::int64_t>(1, -hi), -lo)) alts.push_back("\"-\" (" + a + ")");
    }
    if (hi >= 0) {
      for (const std::string& a : magnitudes(std::max<std::int64_t>(0, lo), hi)) alts.push_back(a);
    }
    std::string body;
    for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + ("(" + a + ")");
    return body;
  }

  /// Alternatives for the numbers [a, b] (0 <= a <= b) written in decimal: one digit-string range per length.
  static std::vector<std::string> magnitudes(std::int64_t a, std::int64_t b) {
    std::vector<std::string> out;
    const std::string A = std::to_string(a), B = std::to_string(b);
    for (std::size_t n = A.size(); n <= B.size(); ++n) {
      const std::string from = n == A.size() ? A : "1" + std::string(n - 1, '0');
      const std::string to = n == B.size() ? B : std::string(n, '9');
      out.push_back(digit_range(from, to));
    }
    return out;
  }

  /// GBNF for the digit strings of one length from `a` to `b` (a <= b, same length), in lexicographic order.
  static std::string digit_range(const std::string& a, const std::string& b) {
    if (a.empty()) return "\"\"";
    const std::size_t rest = a.size() - 1;
    auto any = [&](std::size_t n) { return n == 0 ? std::string() : " [0-9]{" + std::to_string(n) + "}"; };
    auto digits = [](char x, char y) {
      return x == y ? "\"" + std::string(1, x) + "\"" : "[" + std::string(1, x) + "-" + std::string(1, y) + "]";
    };
    if (a[0] == b[0]) {
      return rest == 0 ? digits(a[0], a[0]) : digits(a[0], a[0]) + " (" + digit_range(a.substr(1), b.substr(1)) + ")";
    }
    const bool low_full = a.substr(1) == std::string(rest, '0'), high_full = b.substr(1) == std::string(rest, '9');
    // a[0] with its tail up to 9...9; the digits strictly between with any tail; b[0] with its tail from 0...0. A
    // first or last digit whose tail covers everything joins the middle.
    const char mid_lo = low_full ? a[0] : static_cast<char>(a[0] + 1);
    const char mid_hi = high_full ? b[0] : static_cast<char>(b[0] - 1);
    std::vector<std::string> parts;
    if (!low_full) parts.push_back(digits(a[0], a[0]) + " (" + digit_range(a.substr(1), std::string(rest, '9')) + ")");
    if (mid_lo <= mid_hi) parts.push_back(digits(mid_lo, mid_hi) + any(rest));
    if (!high_full) parts.push_back(digits(b[0], b[0]) + " (" + digit_range(std::string(rest, '0'), b.substr(1)) + ")");
    std::string body;
    for (const std::string& p : parts) body += (body.empty() ? "" : " | ") + p;
    return body;
  }

  std::string string(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    if (!s.contains("minLength") && !s.contains("maxLength")) return "string";
    const std::int64_t lo = s.contains("minLength") ? count_of(s, "minLength", path) : 0;
    const std::int64_t hi = s.contains("maxLength") ? count_of(s, "maxLength", path) : -1;
    if (hi >= 0 && hi < lo) refuse(path, "maxLength below minLength");
    return emit(hint, "\"\\\"\" char" + repeat(lo, hi) + " \"\\\"\"");
  }

  std::string array(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    const std::string item = s.contains("items") ? compile(s["items"], path + "/items", hint + "-item") : "value";
    const std::int64_t lo = s.contains("minItems") ? count_of(s, "minItems", path) : 0;
    const std::int64_t hi = s.contains("maxItems") ? count_of(s, "maxItems", path) : -1;
    if (hi >= 0 && hi < lo) refuse(path, "maxItems below minItems");
    if (hi == 0) return emit(hint, "\"[\" ws \"]\"");
    // [ item (, item){lo-1, hi-1} ], optional as a whole when lo == 0
    const std::string more = "( ws \",\" ws " + item + " )" + repeat(lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    const std::string items = item + " " + more;
    return emit(hint, "\"[\" ws " + (lo == 0 ? "( " + items + " )?" : items) + " ws \"]\"");
  }

  std::string object(const nlohmann::ordered_json& s, const std::string& path, const std::string& hint) {
    std::vector<std::pair<std::string, std::string>> props;  // (key literal, value rule)
    std::vector<bool> required;
    std::set<std::string> req;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse(path + "/required", "expected an array of property names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) refuse(path + "/required", "expected an array of property names");
        req.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) refuse(path + "/properties", "expected an object");
      for (const auto& [k, v] : s["properties"].items()) {
        const std::string value = compile(v, path + "/properties/" + k, hint + "-" + k);
        props.emplace_back(gbnf_literal(nlohmann::ordered_json(k).dump()), value);
        required.push_back(req.erase(k) > 0);
      }
    }
    if (!req.empty()) refuse(path + "/required", "'" + *req.begin() + "' is required but not in properties");
    std::string extra;  // the value rule of other members, or "" for none
    if (!s.contains("additionalProperties") || s["additionalProperties"] == true) {
      extra = "value";
    } else if (s["additionalProperties"] != false) {
      extra = compile(s["additionalProperties"], path + "/additionalProperties", hint + "-extra");
    }
    // Chains over the listed properties, in order: F_i (nothing written yet, at property i) and R_i (something
    // written: a comma comes first). Past the last property, the other members (if any), then "}".
    //   F_i ::= kv_i R_i+1 (required) | kv_i R_i+1 | F_i+1 (optional)
    //   R_i ::= ws "," ws kv_i R_i+1 (required) | ( ws "," ws kv_i )? R_i+1 (optional)
    const std::size_t n = props.size();
    const std::string name = fresh(hint);
    std::vector<std::string> f(n + 1), r(n + 1);
    for (std::size_t i = 0; i <= n; ++i) {
      f[i] = fresh(hint + "-f" + std::to_string(i));
      r[i] = fresh(hint + "-r" + std::to_string(i));
    }
    define(name, "\"{\" ws " + f[0]);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string kv = props[i].first + " ws \":\" ws " + props[i].second;
      if (required[i]) {
        define(f[i], kv + " " + r[i + 1]);
        define(r[i], "ws \",\" ws " + kv + " " + r[i + 1]);
      } else {
        define(f[i], kv + " " + r[i + 1] + " | " + f[i + 1]);
        define(r[i], "( ws \",\" ws " + kv + " )? " + r[i + 1]);
      }
    }
    const std::string close = "ws \"}\"";
    if (extra.empty()) {
      define(f[n], close);
      define(r[n], close);
    } else {
      const std::string kv = "string ws \":\" ws " + extra;
      define(f[n], "( " + kv + " ( ws \",\" ws " + kv + " )* )? " + close);
      define(r[n], "( ws \",\" ws " + kv + " )* " + close);
    }
    return name;
  }

  void define(const std::string& name, const std::string& body) {
    pending_.erase(name);
    rules_[name] = body;
  }

  std::string emit(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    define(name, body);
    return name;
  }

  std::string ref(const nlohmann::ordered_json& r, const std::string& path) {
    if (!r.is_string()) refuse(path + "/$ref", "expected a string");
    const std::string target = r.get<std::string>();
    const auto it = refs_.find(target);
    if (it != refs_.end()) return it->second;
    const nlohmann::ordered_json* node = nullptr;
    std::string hint = "ref";
    if (target == "#") {
      node = &root_;
      hint = "root-ref";
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (target.rfind(p, 0) != 0) continue;
        const std::string key = target.substr(p.size());
        const std::string container = p.substr(2, p.size() - 3);
        if (root_.contains(container) && root_[container].contains(key)) node = &root_[container][key];
        hint = key;
      }
    }
    if (node == nullptr) refuse(path + "/$ref", "'" + target + "' is not a local definition (#/$defs/NAME, #/definitions/NAME or #)");
    // Named before it is compiled, so that a recursive schema refers to its own rule.
    const std::string name = fresh(hint);
    refs_[target] = name;
    const std::string body = compile(*node, target, name + "-body");
    define(name, body);
    return name;
  }

  static inline const std::set<std::string> kReserved = {"root", "ws", "char", "string", "number", "integer",
                                                        "boolean", "null", "value", "object", "array"};
  const nlohmann::ordered_json& root_;
  std::map<std::string, std::string> rules_;
  std::set<std::string> pending_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
  static constexpr int kMaxDepth = 128;
};

}  // namespace detail

/// The GBNF text of a grammar whose sentences are the JSON documents `schema` accepts (see the top of this file);
/// throws ArgumentError naming the keyword and its path for what it does not enforce.
inline std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return detail::SchemaCompiler(schema).run();
}

/// The same, parsed: ready for a Matcher.
inline std::shared_ptr<const Grammar> grammar_from_json_schema(const nlohmann::ordered_json& schema) {
  return std::make_shared<const Grammar>(Grammar::parse(json_schema_to_gbnf(schema)));
}

}  // namespace maxtext::models::grammar
