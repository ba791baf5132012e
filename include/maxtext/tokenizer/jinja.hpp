// tokenizer/jinja.hpp: the Jinja subset that Hugging Face chat templates use, rendered exactly as npm
// @huggingface/jinja 0.5.11 renders it (the engine transformers.js uses): the same lexer quirks (lstrip_blocks,
// trim_blocks, `{%-`/`-%}` trimming, the `generation` tag), the same runtime types (integers and floats are
// JavaScript numbers; strings print as JavaScript prints them; `==` is JavaScript's loose equality) and the same
// filters, tests and string/dict methods. Values come in and go out as nlohmann::json.
// Constructs the oracle does not know are refused with UnsupportedError naming them and their line:column; syntax
// errors raise ConfigError with line:column; errors while rendering (raise_exception, type errors) raise
// ArgumentError with the line:column of the expression. Recursion, loop iterations and output size are bounded.
// See docs/chat-templates.md for what is supported and how it was checked.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"
#include "maxtext/tokenizer/unicode.hpp"

namespace maxtext::tokenizer::jinja {

/// JSON in and out keeps the key order it was written in (as JavaScript objects do); a nlohmann::json converts
/// implicitly (its keys then come sorted).
using Json = nlohmann::ordered_json;

/// Bounds that keep a hostile template from hanging or exhausting memory.
struct Limits {
  int max_depth = 400;                          ///< nested macro calls / expression nesting
  std::size_t max_output = 64u << 20;           ///< bytes of rendered text
  std::uint64_t max_iterations = 10'000'000;    ///< loop iterations over the whole render
  std::size_t max_range = 1'000'000;            ///< elements one range() may produce
};

namespace detail {

// ---------------------------------------------------------------- UTF-8 and JavaScript string helpers

/// Decodes the code point at s[i]; returns its byte length (invalid bytes decode as U+FFFD, length 1).
inline std::size_t utf8_decode(const std::string& s, std::size_t i, std::uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    cp = 0xFFFD;
    return 1;
  }
  if (len == 1) {
    cp = c;
    return 1;
  }
  cp = c & (0x7Fu >> len);
  for (std::size_t k = 1; k < len; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) {
      cp = 0xFFFD;
      return 1;
    }
    cp = (cp << 6) | (d & 0x3Fu);
  }
  return len;
}

inline void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate: what Node writes out for one
  unicode::append_utf8(out, static_cast<char32_t>(cp));
}

/// JavaScript's whitespace (\s, String.prototype.trim): ASCII blanks, NBSP, the Unicode Zs spaces, LS, PS, BOM.
inline bool is_js_space(std::uint32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

/// Byte length of the whitespace character at s[i], 0 when s[i] is not whitespace (or i is past the end).
inline std::size_t space_at(const std::string& s, std::size_t i) {
  if (i >= s.size()) return 0;
  std::uint32_t cp = 0;
  const std::size_t n = utf8_decode(s, i, cp);
  return is_js_space(cp) ? n : 0;
}

inline std::string trim_start(const std::string& s) {
  std::size_t i = 0;
  while (std::size_t n = space_at(s, i)) i += n;
  return s.substr(i);
}

inline std::string trim_end(const std::string& s) {
  std::size_t end = 0, i = 0;
  while (i < s.size()) {
    const std::size_t n = space_at(s, i);
    if (n) {
      i += n;
    } else {
      std::uint32_t cp = 0;
      i += utf8_decode(s, i, cp);
      end = i;
    }
  }
  return s.substr(0, end);
}

inline std::string trim(const std::string& s) { return trim_end(trim_start(s)); }

/// The code points of s (what JavaScript's Array.from(string) gives), each as a UTF-8 string.
inline std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_decode(s, i, cp);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

/// JavaScript's string length (UTF-16 code units).
inline std::size_t utf16_length(const std::string& s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    i += utf8_decode(s, i, cp);
    n += cp >= 0x10000 ? 2 : 1;
  }
  return n;
}

inline bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Upper/lower case: ASCII letters only (docs/chat-templates.md lists this difference from JavaScript).
inline std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return s;
}
inline std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}

/// JavaScript's Number.prototype.toString() for a double (shortest round-trip digits, JS exponent rules).
inline std::string js_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";
  std::string out;
  if (v < 0) {
    out = "-";
    v = -v;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // d[.ddd]e[+-]XX
  const std::size_t e = sci.find('e');
  std::string digits;
  for (std::size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int k = static_cast<int>(digits.size()), n = exp10 + 1;  // value = 0.digits * 10^n
  if (k <= n && n <= 21) {
    out += digits + std::string(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<std::size_t>(n)) + "." + digits.substr(static_cast<std::size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(static_cast<std::size_t>(-n), '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += (n - 1 >= 0 ? "e+" : "e-") + std::to_string(std::abs(n - 1));
  }
  return out;
}

/// JSON.stringify of a string (escapes quote, backslash and control characters; the rest as is).
inline std::string json_quote(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  char buf[16];
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_decode(s, i, cp);
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (cp < 0x20) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
          out += buf;
        } else if (ensure_ascii && cp >= 0x7F) {
          // Python's ensure_ascii as the oracle does it: each UTF-16 code unit from U+007F up as \uXXXX.
          if (cp >= 0x10000) {
            const std::uint32_t c = cp - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
          }
          out += buf;
        } else {
          out.append(s, i, n);
        }
    }
    i += n;
  }
  return out + "\"";
}

}  // namespace detail

// ---------------------------------------------------------------- runtime values

struct Value;
struct ObjectData;
class Env;
using EnvPtr = std::shared_ptr<Env>;
/// A callable: positional arguments (keyword arguments, when any, as a final kwargs object) and the caller's scope.
using NativeFn = std::function<Value(std::vector<Value>&, const EnvPtr&)>;

/// A runtime value: the oracle's IntegerValue, FloatValue, StringValue, BooleanValue, ArrayValue (tuple),
/// ObjectValue (keyword arguments), NamespaceValue, FunctionValue, NullValue and UndefinedValue. Arrays, objects and
/// namespaces are shared by reference, as JavaScript shares them.
struct Value {
  enum class Kind : std::uint8_t { undefined, null, boolean, integer, floating, string, array, object, ns, function };
  Kind kind = Kind::undefined;
  bool b = false;
  double n = 0;                                   ///< integer and floating (JavaScript numbers)
  std::string s;
  std::shared_ptr<std::vector<Value>> arr;
  std::shared_ptr<ObjectData> obj;                ///< object and ns
  std::shared_ptr<NativeFn> fn;
  bool tuple = false, kwargs = false;

  static Value null() { Value v; v.kind = Kind::null; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::boolean; v.b = x; return v; }
  static Value integer(double x) { Value v; v.kind = Kind::integer; v.n = x; return v; }
  static Value floating(double x) { Value v; v.kind = Kind::floating; v.n = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::string; v.s = std::move(x); return v; }
  static Value array(std::vector<Value> x = {}) {
    Value v;
    v.kind = Kind::array;
    v.arr = std::make_shared<std::vector<Value>>(std::move(x));
    return v;
  }
  static Value object(Kind k = Kind::object);
  static Value function(NativeFn f) {
    Value v;
    v.kind = Kind::function;
    v.fn = std::make_shared<NativeFn>(std::move(f));
    return v;
  }

  bool is(Kind k) const { return kind == k; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::floating; }
  bool is_map() const { return kind == Kind::object || kind == Kind::ns; }
};

/// An insertion-ordered map (JavaScript's Map): set() on an existing key keeps its place.
struct ObjectData {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(const std::string& k) const {
    for (const auto& e : entries) {
      if (e.first == k) return &e.second;
    }
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    for (auto& e : entries) {
      if (e.first == k) {
        e.second = std::move(v);
        return;
      }
    }
    entries.emplace_back(k, std::move(v));
  }
  bool erase(const std::string& k) {
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      if (it->first == k) {
        entries.erase(it);
        return true;
      }
    }
    return false;
  }
};

inline Value Value::object(Kind k) {
  Value v;
  v.kind = k;
  v.obj = std::make_shared<ObjectData>();
  return v;
}

inline const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "UndefinedValue";
    case Value::Kind::null: return "NullValue";
    case Value::Kind::boolean: return "BooleanValue";
    case Value::Kind::integer: return "IntegerValue";
    case Value::Kind::floating: return "FloatValue";
    case Value::Kind::string: return "StringValue";
    case Value::Kind::array: return v.tuple ? "TupleValue" : "ArrayValue";
    case Value::Kind::object: return v.kwargs ? "KeywordArgumentsValue" : "ObjectValue";
    case Value::Kind::ns: return "NamespaceValue";
    case Value::Kind::function: return "FunctionValue";
  }
  return "?";
}

namespace detail {

/// A runtime failure not yet tied to a template position (the evaluator adds line:column).
struct RuntimeFail : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A construct the oracle does not support either way, or this engine refuses (UnsupportedError once located).
struct UnsupportedFail : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void fail(const std::string& m) { throw RuntimeFail(m); }

struct JsonOptions {
  int indent = 0;  ///< 0: no indentation
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_separators = false;
  std::string item_sep, key_sep;
};

/// The oracle's toJSON: Python json.dumps separators, JavaScript number text.
inline std::string to_json(const Value& v, const JsonOptions& o, int depth, bool undefined_to_null) {
  using K = Value::Kind;
  std::string item_sep = ", ", key_sep = ": ";
  if (o.has_separators) {
    item_sep = o.item_sep;
    key_sep = o.key_sep;
  } else if (o.indent) {
    item_sep = ",";
  }
  switch (v.kind) {
    case K::null: return "null";
    case K::undefined: return undefined_to_null ? "null" : "undefined";
    case K::integer:
    case K::floating: return std::isfinite(v.n) ? js_number(v.n) : "null";
    case K::boolean: return v.b ? "true" : "false";
    case K::string: return json_quote(v.s, o.ensure_ascii);
    case K::array:
    case K::object:
    case K::ns: {
      if (v.tuple) fail("Cannot convert to JSON: TupleValue");  // the oracle's toJSON has no case for tuples
      const std::string ind = o.indent ? std::string(static_cast<std::size_t>(o.indent), ' ') : "";
      std::string base = "\n";
      for (int i = 0; i < depth; ++i) base += ind;
      const std::string child = base + ind;
      std::vector<std::string> core;
      if (v.kind == K::array) {
        for (const auto& x : *v.arr) core.push_back(to_json(x, o, depth + 1, undefined_to_null));
        std::string out = "[";
        if (o.indent && !core.empty()) {
          out += child;
          for (std::size_t i = 0; i < core.size(); ++i) out += (i ? item_sep + child : "") + core[i];
          return out + base + "]";
        }
        for (std::size_t i = 0; i < core.size(); ++i) out += (i ? item_sep : "") + core[i];
        return out + "]";
      }
      auto entries = v.obj->entries;
      if (o.sort_keys) {
        // The oracle sorts with localeCompare; code-point order agrees with it for ASCII keys of one case.
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      for (const auto& [k, x] : entries) {
        std::string e = json_quote(k, o.ensure_ascii) + key_sep + to_json(x, o, depth + 1, undefined_to_null);
        core.push_back(o.indent ? child + e : e);
      }
      std::string out = "{";
      for (std::size_t i = 0; i < core.size(); ++i) out += (i ? item_sep : "") + core[i];
      return out + (o.indent && !core.empty() ? base : "") + "}";
    }
    case K::function: fail("Cannot convert to JSON: FunctionValue");
  }
  return "";
}

/// The oracle's RuntimeValue.toString(): how a value prints in `{{ }}` output.
inline std::string display(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::undefined: return "undefined";
    case K::null: return "null";
    case K::boolean: return v.b ? "true" : "false";
    case K::integer: return js_number(v.n);
    case K::floating: {
      if (v.n == 0 && std::signbit(v.n)) return "-0.0";
      if (std::isfinite(v.n) && std::floor(v.n) == v.n && std::fabs(v.n) < 1e21) {
        char buf[400];
        std::snprintf(buf, sizeof(buf), "%.1f", v.n);
        return buf;
      }
      return js_number(v.n);
    }
    case K::string: return v.s;
    case K::array:
    case K::object:
    case K::ns: return to_json(v, JsonOptions{}, 0, false);
    case K::function: throw UnsupportedFail("printing a function (the oracle prints its JavaScript source)");
  }
  return "";
}

/// JavaScript's String(x.value) for the `+`/`~` operators (a float 2.0 gives "2"; an array joins its elements).
inline std::string js_string(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::floating: return js_number(v.n);
    case K::array: {
      std::string out;
      for (std::size_t i = 0; i < v.arr->size(); ++i) out += (i ? "," : "") + display((*v.arr)[i]);
      return out;
    }
    case K::object:
    case K::ns: return "[object Map]";
    default: return display(v);
  }
}

/// The oracle's __bool__ (JavaScript truthiness, but empty arrays and objects are false; namespaces always true).
inline bool truthy(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::undefined:
    case K::null: return false;
    case K::boolean: return v.b;
    case K::integer:
    case K::floating: return v.n != 0 && !std::isnan(v.n);
    case K::string: return !v.s.empty();
    case K::array: return !v.arr->empty();
    case K::object: return !v.obj->entries.empty();
    case K::ns:
    case K::function: return true;
  }
  return false;
}

/// JavaScript's ToNumber for a string.
inline double js_to_number(const std::string& str) {
  const std::string t = trim(str);
  if (t.empty()) return 0;
  if (t == "Infinity" || t == "+Infinity") return std::numeric_limits<double>::infinity();
  if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X' || t[1] == 'o' || t[1] == 'O' || t[1] == 'b' || t[1] == 'B')) {
    const int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
    double r = 0;
    for (std::size_t i = 2; i < t.size(); ++i) {
      const char c = t[i];
      const int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : 99;
      if (d >= base) return std::numeric_limits<double>::quiet_NaN();
      r = r * base + d;
    }
    return r;
  }
  for (char c : t) {
    if (!(is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return std::numeric_limits<double>::quiet_NaN();
  }
  double r = 0;
  const char* b = t.data();
  const char* e = t.data() + t.size();
  if (*b == '+') ++b;
  const auto res = std::from_chars(b, e, r);
  if (res.ec != std::errc() || res.ptr != e) return std::numeric_limits<double>::quiet_NaN();
  return r;
}

/// JavaScript's `a == b` on the values' .value (used by the `==` and `!=` operators).
inline bool loose_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  auto nullish = [](const Value& v) { return v.kind == K::null || v.kind == K::undefined; };
  auto primitive = [](const Value& v) {
    return v.kind == K::boolean || v.is_number() || v.kind == K::string;
  };
  if (nullish(a) || nullish(b)) return nullish(a) && nullish(b);
  if (a.is_number() && b.is_number()) return a.n == b.n;
  if (a.kind == K::string && b.kind == K::string) return a.s == b.s;
  if (a.kind == K::boolean && b.kind == K::boolean) return a.b == b.b;
  if (!primitive(a) && !primitive(b)) {  // objects: identity
    if (a.kind != b.kind) return false;
    if (a.kind == K::array) return a.arr == b.arr;
    if (a.kind == K::function) return a.fn == b.fn;
    return a.obj == b.obj;
  }
  if (a.kind == K::boolean) return loose_equal(Value::integer(a.b ? 1 : 0), b);
  if (b.kind == K::boolean) return loose_equal(a, Value::integer(b.b ? 1 : 0));
  if (a.is_number() && b.kind == K::string) return a.n == js_to_number(b.s);
  if (a.kind == K::string && b.is_number()) return js_to_number(a.s) == b.n;
  // One object, one number or string: the object becomes its primitive string.
  if (a.kind == K::function || b.kind == K::function) throw UnsupportedFail("comparing a function with ==");
  const Value& obj = primitive(a) ? b : a;
  const Value& prim = primitive(a) ? a : b;
  return loose_equal(Value::string(js_string(obj)), prim);
}

/// JavaScript's `a === b` on the values' .value (`in` on arrays, `equalto`).
inline bool strict_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) return a.n == b.n;
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::undefined:
    case K::null: return true;
    case K::boolean: return a.b == b.b;
    case K::string: return a.s == b.s;
    case K::array: return a.arr == b.arr;
    case K::object:
    case K::ns: return a.obj == b.obj;
    case K::function: return a.fn == b.fn;
    default: return false;
  }
}

/// A JavaScript array index ("0", "17"; not "01" or "-1"): such object keys come first, in numeric order.
inline bool is_array_index(const std::string& k) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  for (char c : k) {
    if (!is_digit(c)) return false;
  }
  return std::stoull(k) < 4294967295ull;
}

/// Converts JSON input (messages, tools, extra variables) to runtime values as the oracle's
/// convertToRuntimeValues does: integral numbers are integers, others floats; object keys in JavaScript's order.
/// JSON nested deeper than `max_depth` is refused (a message or tool schema that deep is hostile, and the conversion
/// and every later walk of the value recurse once per level).
inline Value from_json(const Json& j, int max_depth, int depth = 0) {
  if (depth > max_depth) {
    throw ArgumentError("[jinja] the render context nests JSON arrays/objects deeper than " + std::to_string(max_depth) +
                        " levels (Limits::max_depth)");
  }
  switch (j.type()) {
    case Json::value_t::null: return Value::null();
    case Json::value_t::boolean: return Value::boolean(j.get<bool>());
    case Json::value_t::number_integer: return Value::integer(static_cast<double>(j.get<std::int64_t>()));
    case Json::value_t::number_unsigned: return Value::integer(static_cast<double>(j.get<std::uint64_t>()));
    case Json::value_t::number_float: {
      const double d = j.get<double>();
      return std::isfinite(d) && std::floor(d) == d ? Value::integer(d) : Value::floating(d);
    }
    case Json::value_t::string: return Value::string(j.get<std::string>());
    case Json::value_t::array: {
      Value v = Value::array();
      for (const auto& x : j) v.arr->push_back(from_json(x, max_depth, depth + 1));
      return v;
    }
    case Json::value_t::object: {
      Value v = Value::object();
      std::vector<std::pair<unsigned long long, std::string>> indices;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (is_array_index(it.key())) indices.emplace_back(std::stoull(it.key()), it.key());
      }
      std::sort(indices.begin(), indices.end());
      for (const auto& [n, k] : indices) v.obj->set(k, from_json(j.at(k), max_depth, depth + 1));
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!is_array_index(it.key())) v.obj->set(it.key(), from_json(it.value(), max_depth, depth + 1));
      }
      return v;
    }
    default: throw ArgumentError("[jinja] cannot convert binary/discarded JSON to a template value");
  }
}

// ---------------------------------------------------------------- source preprocessing and lexer

/// Template text after the oracle's preprocessing, with each byte's offset in the original source.
struct Source {
  std::string text;
  std::vector<std::size_t> origin;  ///< origin[i] = source offset of text[i]; origin[size] = end
};

/// The oracle's preprocess(): drop one trailing newline, lstrip_blocks, trim_blocks, and remove the transformers
/// `{% generation %}` / `{% endgeneration %}` tags with the whitespace around them (unless the tag has `-`).
inline Source preprocess(const std::string& src) {
  Source s;
  std::size_t len = src.size();
  if (len > 0 && src[len - 1] == '\n') --len;
  // lstrip_blocks: [ \t]* at the start of a line, before {#, {% or {-.
  Source a;
  for (std::size_t i = 0; i < len;) {
    if (i == 0 || src[i - 1] == '\n' || src[i - 1] == '\r') {
      std::size_t j = i;
      while (j < len && (src[j] == ' ' || src[j] == '\t')) ++j;
      if (j + 1 < len && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-')) i = j;
    }
    a.text += src[i];
    a.origin.push_back(i);
    ++i;
  }
  a.origin.push_back(len);
  // trim_blocks: the newline after #}, %} or -}.
  Source b;
  for (std::size_t i = 0; i < a.text.size(); ++i) {
    b.text += a.text[i];
    b.origin.push_back(a.origin[i]);
    if (i + 2 < a.text.size() && (a.text[i] == '#' || a.text[i] == '%' || a.text[i] == '-') && a.text[i + 1] == '}' &&
        a.text[i + 2] == '\n') {
      b.text += '}';
      b.origin.push_back(a.origin[i + 1]);
      i += 2;
    }
  }
  b.origin.push_back(a.origin.back());
  // The generation tag: (\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*).
  const std::string& t = b.text;
  auto tag_at = [&](std::size_t p, bool& lstrip, bool& rstrip) -> std::size_t {  // end of the tag, 0 if none
    if (t.compare(p, 2, "{%") != 0) return 0;
    std::size_t q = p + 2;
    lstrip = q < t.size() && t[q] == '-';
    if (lstrip) ++q;
    while (std::size_t n = space_at(t, q)) q += n;
    if (t.compare(q, 3, "end") == 0 && t.compare(q + 3, 10, "generation") == 0) q += 3;
    if (t.compare(q, 10, "generation") != 0) return 0;
    q += 10;
    while (std::size_t n = space_at(t, q)) q += n;
    rstrip = q < t.size() && t[q] == '-';
    if (rstrip) ++q;
    if (t.compare(q, 2, "%}") != 0) return 0;
    return q + 2;
  };
  std::size_t ws_start = 0;  // start of the whitespace run ending at i (within the unmatched part)
  std::size_t copied = 0;    // t[0, copied) is already in s
  for (std::size_t i = 0; i < t.size();) {
    bool ls = false, rs = false;
    const std::size_t end = t[i] == '{' ? tag_at(i, ls, rs) : 0;
    if (end) {
      for (std::size_t k = copied; k < (ls ? ws_start : i); ++k) {
        s.text += t[k];
        s.origin.push_back(b.origin[k]);
      }
      std::size_t after = end;
      while (std::size_t n = space_at(t, after)) after += n;
      if (!rs) {
        for (std::size_t k = end; k < after; ++k) {
          s.text += t[k];
          s.origin.push_back(b.origin[k]);
        }
      }
      copied = i = ws_start = after;
      continue;
    }
    const std::size_t n = space_at(t, i);
    if (n) {
      i += n;
    } else {
      std::uint32_t cp = 0;
      i += utf8_decode(t, i, cp);
      ws_start = i;
    }
  }
  for (std::size_t k = copied; k < t.size(); ++k) {
    s.text += t[k];
    s.origin.push_back(b.origin[k]);
  }
  s.origin.push_back(b.origin.back());
  return s;
}

enum class Tok : std::uint8_t {
  text, number, string, ident, equals, lparen, rparen, open_stmt, close_stmt, open_expr, close_expr, lbracket,
  rbracket, lbrace, rbrace, comma, dot, colon, pipe, additive, multiplicative, power, comparison, unary, comment
};

inline const char* tok_name(Tok t) {
  static const char* names[] = {"text", "number", "string", "identifier", "'='", "'('", "')'", "'{%'", "'%}'", "'{{'",
                                "'}}'", "'['", "']'", "'{'", "'}'", "','", "'.'", "':'", "'|'", "additive operator",
                                "multiplicative operator", "'**'", "comparison operator", "unary operator", "comment"};
  return names[static_cast<int>(t)];
}

struct Token {
  Tok type;
  std::string value;
  std::size_t pos;  ///< offset in the original source
};

/// "line:column" (1-based; columns count code points) of a source offset.
inline std::string line_col(const std::string& src, std::size_t off) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < off && i < src.size(); ++i) {
    if (src[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(src[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

/// The oracle's tokenize() over preprocessed text.
inline std::vector<Token> tokenize(const Source& S, const std::string& name, const std::string& original) {
  const std::string& src = S.text;
  std::vector<Token> tokens;
  std::size_t cur = 0;
  int curly = 0;
  auto at = [&](std::size_t i) -> char { return i < src.size() ? src[i] : '\0'; };
  auto err = [&](std::size_t p, const std::string& m) -> ConfigError {
    return ConfigError("[jinja] " + name + ":" + line_col(original, S.origin[std::min(p, src.size())]) + ": " + m);
  };
  auto push = [&](Tok t, std::string v, std::size_t p) { tokens.push_back(Token{t, std::move(v), S.origin[p]}); };
  auto strip_trailing = [&] {
    if (!tokens.empty() && tokens.back().type == Tok::text) {
      tokens.back().value = trim_end(tokens.back().value);
      if (tokens.back().value.empty()) tokens.pop_back();
    }
  };
  auto skip_leading = [&] {
    while (std::size_t n = space_at(src, cur)) cur += n;
  };
  auto digits = [&] {
    std::string r;
    while (is_digit(at(cur))) {
      r += src[cur++];
      if (cur >= src.size()) throw err(cur, "unexpected end of template");
    }
    return r;
  };
  auto hex = [&](std::size_t p, std::size_t n, std::uint32_t& v) {
    if (p + n > src.size()) return false;
    v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const char c = src[p + k];
      const int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<std::uint32_t>(d);
    }
    return true;
  };
  while (cur < src.size()) {
    const Tok last = tokens.empty() ? Tok::text : tokens.back().type;
    if (tokens.empty() || last == Tok::close_stmt || last == Tok::close_expr || last == Tok::comment) {
      const std::size_t start = cur;
      while (cur < src.size() && !(src[cur] == '{' && (at(cur + 1) == '%' || at(cur + 1) == '{' || at(cur + 1) == '#'))) ++cur;
      if (cur > start) {
        push(Tok::text, src.substr(start, cur - start), start);
        continue;
      }
    }
    if (src[cur] == '{' && at(cur + 1) == '#') {
      const std::size_t start = cur;
      cur += 2;
      const bool strip_before = at(cur) == '-';
      if (strip_before) ++cur;
      std::string comment;
      while (at(cur) != '#' || at(cur + 1) != '}') {
        if (cur + 2 >= src.size()) throw err(start, "missing end of comment tag '#}'");
        comment += src[cur++];
      }
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_after) comment.pop_back();
      if (strip_before) strip_trailing();
      push(Tok::comment, comment, start);
      cur += 2;
      if (strip_after) skip_leading();
      continue;
    }
    if (src.compare(cur, 3, "{%-") == 0) {
      strip_trailing();
      push(Tok::open_stmt, "{%", cur);
      cur += 3;
      continue;
    }
    if (src.compare(cur, 3, "{{-") == 0) {
      strip_trailing();
      push(Tok::open_expr, "{{", cur);
      curly = 0;
      cur += 3;
      continue;
    }
    skip_leading();  // whitespace inside statements and expressions
    if (src.compare(cur, 3, "-%}") == 0) {
      push(Tok::close_stmt, "%}", cur);
      cur += 3;
      skip_leading();
      continue;
    }
    if (src.compare(cur, 3, "-}}") == 0) {
      push(Tok::close_expr, "}}", cur);
      cur += 3;
      skip_leading();
      continue;
    }
    if (cur >= src.size()) break;
    const char c = src[cur];
    if (c == '-' || c == '+') {
      if (tokens.empty() || last == Tok::text) throw err(cur, std::string("unexpected character '") + c + "'");
      if (!(last == Tok::ident || last == Tok::number || last == Tok::string || last == Tok::rparen || last == Tok::rbracket)) {
        const std::size_t start = cur++;
        std::string num = digits();
        if (!num.empty() && at(cur) == '.' && is_digit(at(cur + 1))) {
          ++cur;
          num += "." + digits();
        }
        push(num.empty() ? Tok::unary : Tok::number, std::string(1, c) + num, start);
        continue;
      }
    }
    static const std::pair<const char*, Tok> table[] = {
        {"{%", Tok::open_stmt}, {"%}", Tok::close_stmt}, {"{{", Tok::open_expr}, {"}}", Tok::close_expr},
        {"(", Tok::lparen}, {")", Tok::rparen}, {"{", Tok::lbrace}, {"}", Tok::rbrace}, {"[", Tok::lbracket},
        {"]", Tok::rbracket}, {",", Tok::comma}, {".", Tok::dot}, {":", Tok::colon}, {"|", Tok::pipe},
        {"<=", Tok::comparison}, {">=", Tok::comparison}, {"==", Tok::comparison}, {"!=", Tok::comparison},
        {"<", Tok::comparison}, {">", Tok::comparison}, {"+", Tok::additive}, {"-", Tok::additive},
        {"~", Tok::additive}, {"**", Tok::power}, {"*", Tok::multiplicative}, {"//", Tok::multiplicative},
        {"/", Tok::multiplicative}, {"%", Tok::multiplicative}, {"=", Tok::equals}};
    bool matched = false;
    for (const auto& [seq, type] : table) {
      if (type == Tok::close_expr && curly > 0) continue;
      const std::size_t l = std::char_traits<char>::length(seq);
      if (src.compare(cur, l, seq) == 0) {
        push(type, seq, cur);
        if (type == Tok::open_expr) curly = 0;
        if (type == Tok::lbrace) ++curly;
        if (type == Tok::rbrace) --curly;
        cur += l;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (c == '\'' || c == '"') {
      const std::size_t start = cur++;
      std::string str;
      while (at(cur) != c) {
        if (cur >= src.size()) throw err(start, "unterminated string literal");
        if (src[cur] == '\\') {
          ++cur;
          if (cur >= src.size()) throw err(start, "unterminated string literal");
          const char e = src[cur++];
          if (e == 'x' || e == 'u') {
            const std::size_t n = e == 'x' ? 2 : 4;
            std::uint32_t v = 0;
            if (!hex(cur, n, v)) throw err(cur - 2, std::string("invalid hexadecimal escape sequence \\") + e);
            cur += n;
            std::uint32_t lo = 0;  // a UTF-16 surrogate pair written as two \u escapes
            if (v >= 0xD800 && v < 0xDC00 && src.compare(cur, 2, "\\u") == 0 && hex(cur + 2, 4, lo) && lo >= 0xDC00 &&
                lo < 0xE000) {
              v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
              cur += 6;
            }
            utf8_append(str, v);
            continue;
          }
          static const std::string from = "ntrbfv'\"\\", to = "\n\t\r\b\f\v'\"\\";
          const std::size_t k = from.find(e);
          if (k == std::string::npos) throw err(cur - 2, std::string("unexpected escaped character '") + e + "'");
          str += to[k];
          continue;
        }
        str += src[cur++];
        if (cur >= src.size()) throw err(start, "unterminated string literal");
      }
      ++cur;
      push(Tok::string, str, start);
      continue;
    }
    if (is_digit(c)) {
      const std::size_t start = cur;
      std::string num = digits();
      if (!(tokens.size() && tokens.back().type == Tok::dot) && at(cur) == '.' && is_digit(at(cur + 1))) {
        ++cur;
        num += "." + digits();
      }
      push(Tok::number, num, start);
      continue;
    }
    if (is_word(c)) {
      const std::size_t start = cur;
      std::string word;
      while (is_word(at(cur))) {
        word += src[cur++];
        if (cur >= src.size()) throw err(cur, "unexpected end of template");
      }
      push(Tok::ident, word, start);
      continue;
    }
    std::uint32_t cp = 0;
    const std::size_t n = utf8_decode(src, cur, cp);
    throw err(cur, "unexpected character '" + src.substr(cur, n) + "'");
  }
  return tokens;
}

// ---------------------------------------------------------------- AST and parser

enum class N : std::uint8_t {
  text, integer, floating, string, ident, array, tuple, object, member, slice, call, kwarg, spread, kwspread, unary,
  binary, filter, test, select, ternary, if_, for_, set, macro, call_block, filter_block, break_, continue_, comment
};

struct Node;
using NodeP = std::unique_ptr<Node>;
struct Node {
  N type;
  std::size_t pos = 0;
  std::string s;                 ///< text, string value, identifier, operator, name
  double num = 0;
  NodeP a, b, c;
  std::vector<NodeP> items;      ///< list/tuple/object (key, value alternating)/arguments/parameters
  std::vector<NodeP> body, alt;
  bool flag = false;             ///< member: computed; test: negated; call_block: has caller parameters
};

class Parser {
 public:
  Parser(const std::vector<Token>& t, const std::string& name, const std::string& src, int max_depth)
      : t_(t), name_(name), src_(src), max_depth_(max_depth) {}

  std::vector<NodeP> program() {
    std::vector<NodeP> out;
    while (cur_ < t_.size()) out.push_back(any());
    return out;
  }

 private:
  const std::vector<Token>& t_;
  const std::string& name_;
  const std::string& src_;
  std::size_t cur_ = 0;
  int depth_ = 0, max_depth_;

  struct Depth {
    Parser& p;
    explicit Depth(Parser& q) : p(q) {
      if (++p.depth_ > p.max_depth_) throw p.error(p.here(), "expressions or blocks nested too deeply");
    }
    ~Depth() { --p.depth_; }
  };

  std::size_t here() const { return cur_ < t_.size() ? t_[cur_].pos : src_.size(); }
  ConfigError error(std::size_t pos, const std::string& m) const {
    return ConfigError("[jinja] " + name_ + ":" + line_col(src_, pos) + ": " + m);
  }
  const Token& peek() const {
    if (cur_ >= t_.size()) throw error(src_.size(), "unexpected end of template");
    return t_[cur_];
  }
  const Token& next() {
    const Token& t = peek();
    ++cur_;
    return t;
  }
  bool is(Tok a) const { return cur_ < t_.size() && t_[cur_].type == a; }
  bool is_ident(const char* n, std::size_t off = 0) const {
    return cur_ + off < t_.size() && t_[cur_ + off].type == Tok::ident && t_[cur_ + off].value == n;
  }
  bool is_stmt(std::initializer_list<const char*> names) const {
    if (!(is(Tok::open_stmt) && cur_ + 1 < t_.size() && t_[cur_ + 1].type == Tok::ident)) return false;
    for (const char* n : names) {
      if (t_[cur_ + 1].value == n) return true;
    }
    return false;
  }
  const Token& expect(Tok type, const char* what) {
    if (cur_ >= t_.size()) throw error(src_.size(), std::string("expected ") + what + ", found the end of the template");
    const Token& t = t_[cur_];
    if (t.type != type) throw error(t.pos, std::string("expected ") + what + ", found " + tok_name(t.type) + describe(t));
    ++cur_;
    return t;
  }
  static std::string describe(const Token& t) {
    return (t.type == Tok::ident || t.type == Tok::number) ? " '" + t.value + "'" : "";
  }
  void expect_ident(const char* n, std::size_t open_pos, const char* opener) {
    if (!is_ident(n)) throw error(here(), std::string("expected {% ") + n + " %} closing the " + opener + " at " + line_col(src_, open_pos));
    ++cur_;
  }
  NodeP node(N type, std::size_t pos) {
    auto n = std::make_unique<Node>();
    n->type = type;
    n->pos = pos;
    return n;
  }
  // Parses statements until one of `names`; reports the opener when the template ends first.
  void block_until(std::vector<NodeP>& out, std::initializer_list<const char*> names, std::size_t open_pos, const char* opener) {
    while (!is_stmt(names)) {
      if (cur_ >= t_.size()) {
        throw error(open_pos, std::string("{% ") + opener + " %} is not closed (expected {% end" + opener + " %})");
      }
      out.push_back(any());
    }
  }

  NodeP any() {
    Depth d(*this);
    const Token& t = peek();
    switch (t.type) {
      case Tok::comment: {
        auto n = node(N::comment, t.pos);
        ++cur_;
        return n;
      }
      case Tok::text: {
        auto n = node(N::text, t.pos);
        n->s = t.value;
        ++cur_;
        return n;
      }
      case Tok::open_stmt: return statement();
      case Tok::open_expr: {
        ++cur_;
        NodeP e = expression();
        expect(Tok::close_expr, "'}}'");
        return e;
      }
      default: throw error(t.pos, std::string("unexpected ") + tok_name(t.type) + describe(t));
    }
  }

  NodeP statement() {
    const std::size_t open = next().pos;
    const Token& kw = peek();
    if (kw.type != Tok::ident) throw error(kw.pos, std::string("expected a statement name after {%, found ") + tok_name(kw.type));
    const std::string name = kw.value;
    ++cur_;
    if (name == "set") return set_statement(open);
    if (name == "if") {
      NodeP n = if_statement(open);
      expect(Tok::open_stmt, "'{%'");
      expect_ident("endif", open, "{% if %}");
      expect(Tok::close_stmt, "'%}'");
      return n;
    }
    if (name == "macro") {
      auto n = node(N::macro, open);
      NodeP nm = primary();
      if (nm->type != N::ident) throw error(nm->pos, "expected a name after {% macro");
      n->s = nm->s;
      args(n->items, true);
      expect(Tok::close_stmt, "'%}'");
      block_until(n->body, {"endmacro"}, open, "macro");
      expect(Tok::open_stmt, "'{%'");
      expect_ident("endmacro", open, "{% macro %}");
      expect(Tok::close_stmt, "'%}'");
      return n;
    }
    if (name == "for") {
      NodeP n = for_statement(open);
      expect(Tok::open_stmt, "'{%'");
      expect_ident("endfor", open, "{% for %}");
      expect(Tok::close_stmt, "'%}'");
      return n;
    }
    if (name == "call") {
      auto n = node(N::call_block, open);
      if (is(Tok::lparen)) {
        n->flag = true;
        args(n->items, true);
      }
      NodeP callee = primary();
      if (callee->type != N::ident) throw error(callee->pos, "expected a macro name after {% call");
      auto call = node(N::call, callee->pos);
      call->a = std::move(callee);
      args(call->items, false);
      n->a = std::move(call);
      expect(Tok::close_stmt, "'%}'");
      block_until(n->body, {"endcall"}, open, "call");
      expect(Tok::open_stmt, "'{%'");
      expect_ident("endcall", open, "{% call %}");
      expect(Tok::close_stmt, "'%}'");
      return n;
    }
    if (name == "break" || name == "continue") {
      expect(Tok::close_stmt, "'%}'");
      return node(name == "break" ? N::break_ : N::continue_, open);
    }
    if (name == "filter") {
      auto n = node(N::filter_block, open);
      NodeP f = primary();
      if (f->type == N::ident && is(Tok::lparen)) f = call_expr(std::move(f));
      n->a = std::move(f);
      expect(Tok::close_stmt, "'%}'");
      block_until(n->body, {"endfilter"}, open, "filter");
      expect(Tok::open_stmt, "'{%'");
      expect_ident("endfilter", open, "{% filter %}");
      expect(Tok::close_stmt, "'%}'");
      return n;
    }
    static const std::set<std::string> known_unsupported = {"include", "extends", "block", "import", "from", "raw",
                                                            "with", "autoescape", "do", "trans", "pluralize"};
    if (known_unsupported.count(name)) {
      throw UnsupportedError("[jinja] " + name_ + ":" + line_col(src_, open) + ": unsupported statement {% " + name +
                             " %} (@huggingface/jinja does not support it either)");
    }
    throw error(kw.pos, "unknown statement {% " + name + " %}");
  }

  NodeP set_statement(std::size_t open) {
    auto n = node(N::set, open);
    n->a = sequence(false);
    if (is(Tok::equals)) {
      ++cur_;
      n->b = sequence(false);
    } else {
      expect(Tok::close_stmt, "'%}' or '='");
      block_until(n->body, {"endset"}, open, "set");
      expect(Tok::open_stmt, "'{%'");
      expect_ident("endset", open, "{% set %}");
    }
    expect(Tok::close_stmt, "'%}'");
    return n;
  }

  NodeP if_statement(std::size_t open) {
    auto n = node(N::if_, open);
    n->a = expression();
    expect(Tok::close_stmt, "'%}'");
    block_until(n->body, {"elif", "else", "endif"}, open, "if");
    if (is_stmt({"elif"})) {
      const std::size_t p = t_[cur_].pos;
      cur_ += 2;
      n->alt.push_back(if_statement(p));
    } else if (is_stmt({"else"})) {
      cur_ += 2;
      expect(Tok::close_stmt, "'%}'");
      block_until(n->alt, {"endif"}, open, "if");
    }
    return n;
  }

  NodeP for_statement(std::size_t open) {
    auto n = node(N::for_, open);
    n->a = sequence(true);
    if (n->a->type != N::ident && n->a->type != N::tuple) throw error(n->a->pos, "expected a name or a tuple of names as the loop variable");
    if (!is_ident("in")) throw error(here(), "expected 'in' after the loop variable");
    ++cur_;
    n->b = expression();
    expect(Tok::close_stmt, "'%}'");
    block_until(n->body, {"endfor", "else"}, open, "for");
    if (is_stmt({"else"})) {
      cur_ += 2;
      expect(Tok::close_stmt, "'%}'");
      block_until(n->alt, {"endfor"}, open, "for");
    }
    return n;
  }

  NodeP sequence(bool primary_only) {
    const std::size_t p = here();
    std::vector<NodeP> xs;
    xs.push_back(primary_only ? primary() : expression());
    if (!is(Tok::comma)) return std::move(xs[0]);
    while (true) {
      ++cur_;
      xs.push_back(primary_only ? primary() : expression());
      if (!is(Tok::comma)) break;
    }
    auto n = node(N::tuple, p);
    n->items = std::move(xs);
    return n;
  }

  NodeP expression() {
    Depth d(*this);
    return if_expression();
  }

  NodeP if_expression() {
    NodeP a = or_expression();
    if (is_ident("if")) {
      const std::size_t p = t_[cur_++].pos;
      NodeP test = or_expression();
      if (is_ident("else")) {
        ++cur_;
        auto n = node(N::ternary, p);
        n->a = std::move(test);
        n->b = std::move(a);
        n->c = if_expression();
        return n;
      }
      auto n = node(N::select, p);
      n->a = std::move(a);
      n->b = std::move(test);
      return n;
    }
    return a;
  }

  NodeP binary(std::string op, std::size_t pos, NodeP l, NodeP r) {
    auto n = node(N::binary, pos);
    n->s = std::move(op);
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  NodeP or_expression() {
    NodeP l = and_expression();
    while (is_ident("or")) {
      const std::size_t p = t_[cur_++].pos;
      l = binary("or", p, std::move(l), and_expression());
    }
    return l;
  }
  NodeP and_expression() {
    NodeP l = not_expression();
    while (is_ident("and")) {
      const std::size_t p = t_[cur_++].pos;
      l = binary("and", p, std::move(l), not_expression());
    }
    return l;
  }
  NodeP not_expression() {
    NodeP r;
    while (is_ident("not")) {
      Depth d(*this);
      const std::size_t p = t_[cur_++].pos;
      auto n = node(N::unary, p);
      n->s = "not";
      n->a = not_expression();
      r = std::move(n);
    }
    return r ? std::move(r) : comparison();
  }
  NodeP comparison() {
    NodeP l = additive();
    while (true) {
      std::string op;
      const std::size_t p = here();
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_ident("in")) {
        op = "in";
        ++cur_;
      } else if (is(Tok::comparison)) {
        op = t_[cur_++].value;
      } else {
        break;
      }
      l = binary(op, p, std::move(l), additive());
    }
    return l;
  }
  NodeP additive() {
    NodeP l = multiplicative();
    while (is(Tok::additive)) {
      const Token& t = t_[cur_++];
      l = binary(t.value, t.pos, std::move(l), multiplicative());
    }
    return l;
  }
  NodeP multiplicative() {
    NodeP l = power();
    while (is(Tok::multiplicative)) {
      const Token& t = t_[cur_++];
      l = binary(t.value, t.pos, std::move(l), power());
    }
    return l;
  }
  NodeP power() {
    NodeP l = test_expression();
    while (is(Tok::power)) {
      const Token& t = t_[cur_++];
      l = binary(t.value, t.pos, std::move(l), test_expression());
    }
    return l;
  }
  NodeP test_expression() {
    NodeP operand = filter_expression();
    while (is_ident("is")) {
      const std::size_t p = t_[cur_++].pos;
      const bool negate = is_ident("not");
      if (negate) ++cur_;
      NodeP test = primary();
      if (test->type != N::ident) throw error(test->pos, "expected a test name after 'is'");
      auto n = node(N::test, p);
      n->a = std::move(operand);
      n->s = test->s;
      n->flag = negate;
      operand = std::move(n);
    }
    return operand;
  }
  NodeP filter_expression() {
    NodeP operand = unary_sign();
    while (is(Tok::pipe)) {
      const std::size_t p = t_[cur_++].pos;
      NodeP f = primary();
      if (f->type != N::ident) throw error(f->pos, "expected a filter name after '|'");
      if (is(Tok::lparen)) f = call_expr(std::move(f));
      auto n = node(N::filter, p);
      n->a = std::move(operand);
      n->b = std::move(f);
      operand = std::move(n);
    }
    return operand;
  }
  NodeP unary_sign() {
    if (cur_ < t_.size() && (t_[cur_].type == Tok::unary || t_[cur_].type == Tok::additive) &&
        (t_[cur_].value == "-" || t_[cur_].value == "+")) {
      Depth d(*this);
      const Token& t = t_[cur_++];
      auto n = node(N::unary, t.pos);
      n->s = t.value;
      n->a = unary_sign();
      return n;
    }
    NodeP m = member(primary());
    if (is(Tok::lparen)) return call_expr(std::move(m));
    return m;
  }
  NodeP call_expr(NodeP callee) {
    Depth d(*this);
    auto n = node(N::call, callee->pos);
    n->a = std::move(callee);
    args(n->items, false);
    NodeP e = member(std::move(n));
    if (is(Tok::lparen)) e = call_expr(std::move(e));
    return e;
  }
  void args(std::vector<NodeP>& out, bool parameters) {
    expect(Tok::lparen, "'('");
    std::set<std::string> names;
    bool saw_kw = false, saw_spread = false;
    while (!is(Tok::rparen)) {
      if (cur_ >= t_.size()) throw error(src_.size(), "expected ')', found the end of the template");
      const bool kw_spread = is(Tok::power);
      const bool pos_spread = is(Tok::multiplicative) && t_[cur_].value == "*";
      const std::size_t p = here();
      if (parameters && (kw_spread || pos_spread)) throw error(p, "argument unpacking is not allowed in parameter declarations");
      if (kw_spread) {
        ++cur_;
        auto n = node(N::kwspread, p);
        n->a = expression();
        out.push_back(std::move(n));
        if (is(Tok::comma)) ++cur_;
        if (!is(Tok::rparen)) throw error(here(), "'**' must be applied to the final argument");
        break;
      }
      NodeP arg;
      if (pos_spread) {
        if (saw_spread) throw error(p, "only one '*' argument unpacking is allowed");
        saw_spread = true;
        ++cur_;
        arg = node(N::spread, p);
        arg->a = expression();
      } else {
        arg = expression();
        if (is(Tok::equals)) {
          ++cur_;
          if (arg->type != N::ident) {
            throw error(arg->pos, parameters ? "expected a name for the parameter" : "expected a name for the keyword argument");
          }
          auto kw = node(N::kwarg, arg->pos);
          kw->s = arg->s;
          kw->a = expression();
          arg = std::move(kw);
        }
        if (parameters) {
          if (arg->type != N::ident && arg->type != N::kwarg) throw error(arg->pos, "expected a name for the parameter");
          if (!names.insert(arg->s).second) throw error(arg->pos, "duplicate parameter name '" + arg->s + "'");
        }
        if (arg->type == N::kwarg) {
          saw_kw = true;
        } else if (saw_kw) {
          throw error(arg->pos, parameters ? "non-default parameter follows a default parameter"
                                           : "positional argument follows keyword argument");
        } else if (saw_spread) {
          throw error(arg->pos, "positional argument follows '*' argument unpacking");
        }
      }
      out.push_back(std::move(arg));
      if (is(Tok::comma)) ++cur_;
    }
    ++cur_;
  }
  NodeP subscript() {
    const std::size_t p = here();
    std::vector<NodeP> parts;
    bool is_slice = false;
    while (!is(Tok::rbracket)) {
      if (cur_ >= t_.size()) throw error(src_.size(), "expected ']', found the end of the template");
      if (is(Tok::colon)) {
        parts.push_back(nullptr);
        ++cur_;
        is_slice = true;
      } else {
        parts.push_back(expression());
        if (is(Tok::colon)) {
          ++cur_;
          is_slice = true;
        }
      }
    }
    if (parts.empty()) throw error(p, "expected an index or a slice inside []");
    if (is_slice) {
      if (parts.size() > 3) throw error(p, "a slice has at most 3 parts");
      auto n = node(N::slice, p);
      n->a = std::move(parts[0]);
      if (parts.size() > 1) n->b = std::move(parts[1]);
      if (parts.size() > 2) n->c = std::move(parts[2]);
      return n;
    }
    return std::move(parts[0]);
  }
  NodeP member(NodeP object) {
    while (is(Tok::dot) || is(Tok::lbracket)) {
      const Token& op = t_[cur_++];
      auto n = node(N::member, op.pos);
      n->flag = op.type == Tok::lbracket;
      if (n->flag) {
        n->b = subscript();
        expect(Tok::rbracket, "']'");
      } else {
        n->b = primary();
        if (n->b->type != N::ident && n->b->type != N::integer) throw error(n->b->pos, "expected a name or an integer after '.'");
      }
      n->a = std::move(object);
      object = std::move(n);
    }
    return object;
  }
  NodeP primary() {
    Depth d(*this);
    const Token& t = next();
    switch (t.type) {
      case Tok::number: {
        auto n = node(t.value.find('.') != std::string::npos ? N::floating : N::integer, t.pos);
        n->num = std::strtod(t.value.c_str(), nullptr);
        return n;
      }
      case Tok::string: {
        auto n = node(N::string, t.pos);
        n->s = t.value;
        while (is(Tok::string)) n->s += t_[cur_++].value;
        return n;
      }
      case Tok::ident: {
        auto n = node(N::ident, t.pos);
        n->s = t.value;
        return n;
      }
      case Tok::lparen: {
        NodeP e = sequence(false);
        expect(Tok::rparen, "')'");
        return e;
      }
      case Tok::lbracket: {
        auto n = node(N::array, t.pos);
        while (!is(Tok::rbracket)) {
          if (cur_ >= t_.size()) throw error(t.pos, "unclosed '['");
          n->items.push_back(expression());
          if (is(Tok::comma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      case Tok::lbrace: {
        auto n = node(N::object, t.pos);
        while (!is(Tok::rbrace)) {
          if (cur_ >= t_.size()) throw error(t.pos, "unclosed '{'");
          n->items.push_back(expression());
          expect(Tok::colon, "':' between key and value");
          n->items.push_back(expression());
          if (is(Tok::comma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      default: throw error(t.pos, std::string("unexpected ") + tok_name(t.type) + describe(t));
    }
  }
};

}  // namespace detail

/// A variable scope (the oracle's Environment).
class Env {
 public:
  explicit Env(EnvPtr parent = nullptr) : parent_(std::move(parent)) {}
  void set(const std::string& k, Value v) { vars_.set(k, std::move(v)); }
  bool has_own(const std::string& k) const { return vars_.find(k) != nullptr; }
  Value lookup(const std::string& k) const {
    for (const Env* e = this; e; e = e->parent_.get()) {
      if (const Value* v = e->vars_.find(k)) return *v;
    }
    return Value{};
  }

 private:
  EnvPtr parent_;
  ObjectData vars_;
};

/// A parsed template; cheap to copy (copies share the parsed tree) and safe to render from several threads at once
/// (each render has its own state).
class Template {
 public:
  /// Parses `source`; `name` appears in error messages. Throws ConfigError (syntax, with line:column) or
  /// UnsupportedError (a statement neither this engine nor @huggingface/jinja supports).
  explicit Template(std::string source, std::string name = "template", Limits limits = {});

  /// Renders with `context` (a JSON object: its keys become variables, as in @huggingface/jinja's render()).
  std::string render(const Json& context) const;

  const std::string& source() const { return src_; }
  const std::string& name() const { return name_; }

 private:
  std::string src_, name_;
  Limits limits_;
  std::shared_ptr<const std::vector<detail::NodeP>> body_;  // shared: copies of a Template share the parsed tree
  friend class Interpreter;
};

namespace detail {
struct BreakSignal {};
struct NestingError {
  bool cycle;
};
struct ContinueSignal {};
}  // namespace detail

/// Evaluates a parsed template (one per render).
class Interpreter {
 public:
  using K = Value::Kind;
  using Node = detail::Node;
  using N = detail::N;

  explicit Interpreter(const Template& t) : t_(t) {}
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  ~Interpreter() { release_namespaces(); }

  std::string run(const Json& context) {
    auto env = std::make_shared<Env>();
    setup_globals(*env);
    MAXTEXT_CHECK(context.is_object() || context.is_null(), ArgumentError, "[jinja] ", t_.name_,
                  ": the render context must be a JSON object, found ", context.type_name());
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) {
        // The oracle declares each context variable once; the globals (true, none, range, ...) cannot be replaced.
        MAXTEXT_CHECK(!env->has_own(it.key()), ArgumentError, "[jinja] ", t_.name_, ": context variable '", it.key(),
                      "' is already declared (a built-in global)");
        env->set(it.key(), detail::from_json(it.value(), t_.limits_.max_depth));
      }
    }
    std::string out;
    try {
      block(*t_.body_, env, out);
    } catch (const detail::BreakSignal&) {
      throw ArgumentError("[jinja] " + t_.name_ + ": {% break %} outside a loop");
    } catch (const detail::ContinueSignal&) {
      throw ArgumentError("[jinja] " + t_.name_ + ": {% continue %} outside a loop");
    }
    return out;
  }

 private:
  const Template& t_;
  int depth_ = 0;
  std::uint64_t iterations_ = 0;
  // Namespaces are the one mutable value, so the one way to build a cycle or an unbounded chain: `{% set ns.a = ns %}`,
  // or `{% set ns.a = namespace(a=ns.a) %}` in a loop, which printing, comparing or freeing would follow past the end
  // of the stack. ns_assign() refuses both. A cycle through a macro's `caller` (a function holding its defining scope)
  // cannot be seen there, so every namespace a render made is emptied when the render ends, which frees it.
  std::vector<std::weak_ptr<ObjectData>> namespaces_;

  void track_namespace(const std::shared_ptr<ObjectData>& ns) {
    if (namespaces_.size() == namespaces_.capacity() && namespaces_.size() >= 64) {
      std::erase_if(namespaces_, [](const std::weak_ptr<ObjectData>& w) { return w.expired(); });
    }
    namespaces_.push_back(ns);
  }
  void release_namespaces() noexcept {
    for (auto& w : namespaces_) {
      if (auto ns = w.lock()) {
        auto entries = std::move(ns->entries);  // freed here, after the namespace itself is already empty
        ns->entries.clear();
      }
    }
    namespaces_.clear();
  }

  // How deep `v` nests arrays, objects and namespaces (a scalar is 0); throws when it contains `target` or nests
  // deeper than `budget`. `seen` keeps a value shared many times from being walked more than once per depth.
  int nesting(const Value& v, const ObjectData* target, int budget, std::map<const void*, int>& seen) const {
    if (v.kind != K::array && !v.is_map()) return 0;
    const void* id = v.kind == K::array ? static_cast<const void*>(v.arr.get()) : static_cast<const void*>(v.obj.get());
    if (v.obj && v.obj.get() == target) throw detail::NestingError{true};
    if (budget <= 0) throw detail::NestingError{false};
    if (auto it = seen.find(id); it != seen.end()) {
      if (it->second > budget) throw detail::NestingError{false};
      return it->second;
    }
    int d = 0;
    if (v.kind == K::array) {
      for (const auto& x : *v.arr) d = std::max(d, nesting(x, target, budget - 1, seen));
    } else {
      for (const auto& e : v.obj->entries) d = std::max(d, nesting(e.second, target, budget - 1, seen));
    }
    seen.emplace(id, d + 1);
    return d + 1;
  }

  void ns_assign(const Node& at, const Value& ns, const std::string& key, const Value& rhs) {
    std::map<const void*, int> seen;
    try {
      (void)nesting(rhs, ns.obj.get(), t_.limits_.max_depth - 1, seen);
    } catch (const detail::NestingError& e) {
      if (e.cycle) located(at, "assigning '" + key + "' would make the namespace contain itself");
      located(at, "assigning '" + key + "' would nest arrays/objects/namespaces deeper than " +
                      std::to_string(t_.limits_.max_depth) + " levels (Limits::max_depth)");
    }
    ns.obj->set(key, rhs);
  }

  [[noreturn]] void located(const Node& n, const std::string& m, bool unsupported = false) const {
    const std::string msg = "[jinja] " + t_.name_ + ":" + detail::line_col(t_.src_, n.pos) + ": " + m;
    if (unsupported) throw UnsupportedError(msg);
    throw ArgumentError(msg);
  }

  void setup_globals(Env& env) {
    env.set("namespace", Value::function([this](std::vector<Value>& args, const EnvPtr&) {
      std::vector<Value> pos = args;
      Value kw;
      if (!pos.empty() && pos.back().kind == K::object && pos.back().kwargs) {
        kw = pos.back();
        pos.pop_back();
      }
      if (pos.size() > 1) detail::fail("namespace expected at most 1 argument, got " + std::to_string(pos.size()));
      Value ns = Value::object(K::ns);
      track_namespace(ns.obj);
      if (pos.size() == 1) {
        const Value& src = pos[0];
        if (src.kind == K::object) {
          for (const auto& [k, v] : src.obj->entries) ns.obj->set(k, v);
        } else if (src.kind == K::array) {
          for (const auto& pair : *src.arr) {
            std::vector<Value> kv;
            if (pair.kind == K::array) kv = *pair.arr;
            if (pair.kind == K::string) {
              for (auto& c : detail::code_points(pair.s)) kv.push_back(Value::string(c));
            }
            if (kv.size() != 2) detail::fail("namespace expected an object or an iterable of [key, value] pairs");
            if (kv[0].kind != K::string) detail::fail("namespace keys must be strings");
            ns.obj->set(kv[0].s, kv[1]);
          }
        } else {
          detail::fail(std::string("'") + kind_name(src) + "' object is not iterable");
        }
      }
      if (kw.obj) {
        for (const auto& [k, v] : kw.obj->entries) ns.obj->set(k, v);
      }
      return ns;
    }));
    env.set("false", Value::boolean(false));
    env.set("true", Value::boolean(true));
    env.set("none", Value::null());
    env.set("raise_exception", Value::function([](std::vector<Value>& args, const EnvPtr&) -> Value {
      throw detail::RuntimeFail("raise_exception: " + (args.empty() ? std::string("undefined") : detail::js_string(args[0])));
    }));
    const std::size_t max_range = t_.limits_.max_range;
    env.set("range", Value::function([max_range](std::vector<Value>& args, const EnvPtr&) {
      std::vector<double> a;
      for (const auto& v : args) {
        if (!v.is_number()) detail::fail(std::string("range() arguments must be numbers, got ") + kind_name(v));
        a.push_back(v.n);
      }
      if (a.empty() || a.size() > 3) detail::fail("range() takes 1 to 3 arguments");
      double start = 0, stop = a[0], step = 1;
      if (a.size() >= 2) {
        start = a[0];
        stop = a[1];
      }
      if (a.size() == 3) step = a[2];
      if (step == 0) detail::fail("range() step must not be zero");
      Value out = Value::array();
      for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (out.arr->size() >= max_range) detail::fail("range() longer than " + std::to_string(max_range) + " elements");
        out.arr->push_back(Value::integer(i));
      }
      return out;
    }));
    env.set("strftime_now", Value::function([](std::vector<Value>& args, const EnvPtr&) {
      if (args.empty() || args[0].kind != K::string) detail::fail("strftime_now() expects a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      static const char* months[] = {"January", "February", "March", "April", "May", "June", "July", "August",
                                     "September", "October", "November", "December"};
      auto pad2 = [](int n) { return (n < 10 ? "0" : "") + std::to_string(n); };
      const std::string& f = args[0].s;
      std::string out;
      for (std::size_t i = 0; i < f.size(); ++i) {
        if (f[i] == '%' && i + 1 < f.size() && std::string("YmdbBHM%").find(f[i + 1]) != std::string::npos) {
          const char c = f[++i];
          if (c == 'Y') out += std::to_string(tm.tm_year + 1900);
          if (c == 'm') out += pad2(tm.tm_mon + 1);
          if (c == 'd') out += pad2(tm.tm_mday);
          if (c == 'b') out += std::string(months[tm.tm_mon]).substr(0, 3);
          if (c == 'B') out += months[tm.tm_mon];
          if (c == 'H') out += pad2(tm.tm_hour);
          if (c == 'M') out += pad2(tm.tm_min);
          if (c == '%') out += '%';
        } else {
          out += f[i];
        }
      }
      return Value::string(out);
    }));
    env.set("True", Value::boolean(true));
    env.set("False", Value::boolean(false));
    env.set("None", Value::null());
  }

  // ------------------------------------------------------------ statements

  void emit(std::string& out, const std::string& s) const {
    if (out.size() + s.size() > t_.limits_.max_output) {
      throw ArgumentError("[jinja] " + t_.name_ + ": rendered output exceeds " + std::to_string(t_.limits_.max_output) + " bytes");
    }
    out += s;
  }

  void block(const std::vector<detail::NodeP>& stmts, const EnvPtr& env, std::string& out) {
    for (const auto& s : stmts) statement(*s, env, out);
  }

  void statement(const Node& n, const EnvPtr& env, std::string& out) {
    switch (n.type) {
      case N::text: emit(out, n.s); return;
      case N::comment: return;
      case N::set: set_stmt(n, env); return;
      case N::if_: block(truthy_of(*n.a, env) ? n.body : n.alt, env, out); return;
      case N::for_: for_stmt(n, env, out); return;
      case N::macro: macro_stmt(n, env); return;
      case N::break_: throw detail::BreakSignal{};
      case N::continue_: throw detail::ContinueSignal{};
      case N::call_block: {
        const Value v = call_block(n, env);
        if (v.kind != K::null && v.kind != K::undefined) emit(out, display_at(n, v));
        return;
      }
      case N::filter_block: {
        std::string inner;
        block(n.body, env, inner);
        const Value v = guarded(n, [&] { return apply_filter(Value::string(inner), *n.a, env); });
        if (v.kind != K::null && v.kind != K::undefined) emit(out, display_at(n, v));
        return;
      }
      default: {
        const Value v = eval(n, env);
        if (v.kind != K::null && v.kind != K::undefined) emit(out, display_at(n, v));
      }
    }
  }

  std::string display_at(const Node& n, const Value& v) {
    return guarded(n, [&] { return detail::display(v); });
  }

  bool truthy_of(const Node& n, const EnvPtr& env) { return detail::truthy(eval(n, env)); }

  void set_stmt(const Node& n, const EnvPtr& env) {
    Value rhs;
    if (n.b) {
      rhs = eval(*n.b, env);
    } else {
      std::string s;
      block(n.body, env, s);
      rhs = Value::string(s);
    }
    const Node& lhs = *n.a;
    if (lhs.type == N::ident) {
      env->set(lhs.s, rhs);
    } else if (lhs.type == N::tuple) {
      if (rhs.kind != K::array) located(n, std::string("cannot unpack non-iterable type in set: ") + kind_name(rhs));
      if (rhs.arr->size() != lhs.items.size()) {
        located(n, std::string("too ") + (lhs.items.size() > rhs.arr->size() ? "few" : "many") + " items to unpack in set");
      }
      for (std::size_t i = 0; i < lhs.items.size(); ++i) {
        if (lhs.items[i]->type != N::ident) located(*lhs.items[i], "cannot unpack to a non-name in set");
        env->set(lhs.items[i]->s, (*rhs.arr)[i]);
      }
    } else if (lhs.type == N::member) {
      const Value obj = eval(*lhs.a, env);
      if (obj.kind != K::ns) located(lhs, "cannot assign an attribute on a non-namespace object");
      if (lhs.b->type != N::ident) located(lhs, "cannot assign to a member with a non-name property");
      ns_assign(lhs, obj, lhs.b->s, rhs);
    } else {
      located(lhs, "invalid left-hand side in {% set %}");
    }
  }

  void for_stmt(const Node& n, const EnvPtr& env, std::string& out) {
    auto scope = std::make_shared<Env>(env);
    const Node* test = nullptr;
    Value iterable;
    if (n.b->type == N::select) {
      iterable = eval(*n.b->a, scope);
      test = n.b->b.get();
    } else {
      iterable = eval(*n.b, scope);
    }
    if (iterable.kind == K::object) {
      Value keys = Value::array();
      for (const auto& e : iterable.obj->entries) keys.arr->push_back(Value::string(e.first));
      iterable = keys;
    } else if (iterable.kind != K::array) {
      located(*n.b, std::string("expected an iterable or object in the for loop, got ") + kind_name(iterable));
    }
    const Node& var = *n.a;
    auto bind = [&](const EnvPtr& s, const Value& item) {
      if (var.type == N::ident) {
        s->set(var.s, item);
        return;
      }
      if (item.kind != K::array) located(var, std::string("cannot unpack non-iterable type: ") + kind_name(item));
      if (item.arr->size() != var.items.size()) {
        located(var, std::string("too ") + (var.items.size() > item.arr->size() ? "few" : "many") + " items to unpack");
      }
      for (std::size_t j = 0; j < var.items.size(); ++j) {
        if (var.items[j]->type != N::ident) located(*var.items[j], "cannot unpack to a non-name");
        s->set(var.items[j]->s, (*item.arr)[j]);
      }
    };
    std::vector<Value> items;
    const std::vector<Value> all = *iterable.arr;  // a copy: the body may modify the list
    for (const auto& item : all) {
      tick(n);
      if (test) {
        auto loop_scope = std::make_shared<Env>(scope);
        bind(loop_scope, item);
        if (!truthy_of(*test, loop_scope)) continue;
      }
      items.push_back(item);
    }
    bool none = true;
    const double len = static_cast<double>(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      tick(n);
      const double d = static_cast<double>(i);
      Value loop = Value::object();
      loop.obj->set("index", Value::integer(d + 1));
      loop.obj->set("index0", Value::integer(d));
      loop.obj->set("revindex", Value::integer(len - d));
      loop.obj->set("revindex0", Value::integer(len - d - 1));
      loop.obj->set("first", Value::boolean(i == 0));
      loop.obj->set("last", Value::boolean(i + 1 == items.size()));
      loop.obj->set("length", Value::integer(len));
      loop.obj->set("previtem", i > 0 ? items[i - 1] : Value{});
      loop.obj->set("nextitem", i + 1 < items.size() ? items[i + 1] : Value{});
      scope->set("loop", loop);
      bind(scope, items[i]);
      std::string body;
      try {
        block(n.body, scope, body);
      } catch (const detail::ContinueSignal&) {
        continue;  // the oracle drops this iteration's partial output
      } catch (const detail::BreakSignal&) {
        break;
      }
      emit(out, body);
      none = false;
    }
    if (none) block(n.alt, scope, out);
  }

  void tick(const Node& n) {
    if (++iterations_ > t_.limits_.max_iterations) {
      located(n, "more than " + std::to_string(t_.limits_.max_iterations) + " loop iterations");
    }
  }

  struct DepthGuard {
    Interpreter& in;
    const Node& n;
    DepthGuard(Interpreter& i, const Node& nd) : in(i), n(nd) {
      if (++in.depth_ > in.t_.limits_.max_depth) in.located(n, "recursion deeper than " + std::to_string(in.t_.limits_.max_depth));
    }
    ~DepthGuard() { --in.depth_; }
  };

  // Names the body reads as `kwargs` / `varargs` (then the macro accepts extra keyword / positional arguments).
  static void special_names(const Node& n, std::set<std::string>& out) {
    if (n.type == N::ident && (n.s == "kwargs" || n.s == "varargs")) out.insert(n.s);
    for (const NodeP* p : {&n.a, &n.b, &n.c}) {
      if (*p) special_names(**p, out);
    }
    for (const auto* v : {&n.items, &n.body, &n.alt}) {
      for (const auto& x : *v) special_names(*x, out);
    }
  }
  using NodeP = detail::NodeP;

  void bind_arguments(const Node& where, const std::string& display_name, const std::vector<NodeP>& params,
                      const std::set<std::string>& special, std::vector<Value> args, const EnvPtr& scope) {
    ObjectData kw;
    if (!args.empty() && args.back().kind == K::object && args.back().kwargs) {
      kw = *args.back().obj;
      args.pop_back();
    }
    std::vector<std::pair<std::string, const Node*>> pending;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Node& p = *params[i];
      const std::string& pname = p.s;
      bool have = i < args.size();
      Value v = have ? args[i] : Value{};
      if (!have) {
        if (const Value* k = kw.find(pname)) {
          v = *k;
          have = true;
          kw.erase(pname);
        }
      }
      if (!have && p.type == N::kwarg) pending.emplace_back(pname, p.a.get());
      scope->set(pname, v);
    }
    if (special.count("kwargs")) {
      Value o = Value::object();
      *o.obj = kw;
      scope->set("kwargs", o);
    } else if (!kw.entries.empty()) {
      located(where, "macro " + display_name + " takes no keyword argument '" + kw.entries[0].first + "'");
    }
    if (special.count("varargs")) {
      Value va = Value::array();
      for (std::size_t i = params.size(); i < args.size(); ++i) va.arr->push_back(args[i]);
      scope->set("varargs", va);
    } else if (args.size() > params.size()) {
      located(where, "macro " + display_name + " takes not more than " + std::to_string(params.size()) + " argument(s)");
    }
    for (const auto& [pname, dflt] : pending) scope->set(pname, eval(*dflt, scope));
  }

  void macro_stmt(const Node& n, const EnvPtr& env) {
    std::set<std::string> special;
    for (const auto& s : n.body) special_names(*s, special);
    for (const auto& p : n.items) special.erase(p->s);
    const Node* node = &n;
    env->set(n.s, Value::function([this, node, special](std::vector<Value>& args, const EnvPtr& caller_env) {
      DepthGuard g(*this, *node);
      auto scope = std::make_shared<Env>(caller_env);
      bind_arguments(*node, "'" + node->s + "'", node->items, special, args, scope);
      std::string out;
      block(node->body, scope, out);
      return Value::string(out);
    }));
  }

  Value call_block(const Node& n, const EnvPtr& env) {
    std::set<std::string> special;
    for (const auto& s : n.body) special_names(*s, special);
    for (const auto& p : n.items) special.erase(p->s);
    const Node* node = &n;
    EnvPtr def_env = env;
    Value caller = Value::function([this, node, special, def_env](std::vector<Value>& args, const EnvPtr&) {
      DepthGuard g(*this, *node);
      auto scope = std::make_shared<Env>(def_env);
      bind_arguments(*node, "None", node->items, special, args, scope);
      std::string out;
      block(node->body, scope, out);
      return Value::string(out);
    });
    const Node& call = *n.a;
    auto args_kw = arguments(call.items, env);
    auto& args = args_kw.first;
    auto& kw = args_kw.second;
    Value kwv = Value::object();
    kwv.kwargs = true;
    *kwv.obj = kw;
    args.push_back(kwv);
    const Value fn = eval(*call.a, env);
    if (fn.kind != K::function) located(call, std::string("cannot call something that is not a function: got ") + kind_name(fn));
    auto scope = std::make_shared<Env>(env);
    scope->set("caller", caller);
    return guarded(call, [&] { return (*fn.fn)(args, scope); });
  }

  // ------------------------------------------------------------ expressions

  template <class F>
  auto guarded(const Node& n, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const detail::RuntimeFail& e) {
      located(n, e.what());
    } catch (const detail::UnsupportedFail& e) {
      located(n, std::string("unsupported: ") + e.what(), true);
    }
  }

  std::pair<std::vector<Value>, ObjectData> arguments(const std::vector<NodeP>& args, const EnvPtr& env) {
    std::vector<Value> pos;
    ObjectData kw;
    for (const auto& a : args) {
      if (a->type == N::spread) {
        const Value v = eval(*a->a, env);
        if (v.kind != K::array) located(*a, std::string("cannot unpack non-iterable type: ") + kind_name(v));
        for (const auto& x : *v.arr) pos.push_back(x);
      } else if (a->type != N::kwarg && a->type != N::kwspread) {
        pos.push_back(eval(*a, env));
      }
    }
    for (const auto& a : args) {
      if (a->type == N::kwarg) {
        if (kw.find(a->s)) located(*a, "got multiple values for keyword argument '" + a->s + "'");
        kw.set(a->s, eval(*a->a, env));
      } else if (a->type == N::kwspread) {
        const Value v = eval(*a->a, env);
        if (v.kind != K::object) located(*a, std::string("argument after ** must be a mapping, not ") + kind_name(v));
        for (const auto& [k, x] : v.obj->entries) {
          if (kw.find(k)) located(*a, "got multiple values for keyword argument '" + k + "'");
          kw.set(k, x);
        }
      }
    }
    return {std::move(pos), std::move(kw)};
  }

 public:
  Value eval(const Node& n, const EnvPtr& env) {
    DepthGuard g(*this, n);
    switch (n.type) {
      case N::text:
      case N::string: return Value::string(n.s);
      case N::integer: return Value::integer(n.num);
      case N::floating: return Value::floating(n.num);
      case N::ident: return env->lookup(n.s);
      case N::array:
      case N::tuple: {
        Value v = Value::array();
        v.tuple = n.type == N::tuple;
        for (const auto& x : n.items) v.arr->push_back(eval(*x, env));
        return v;
      }
      case N::object: {
        Value v = Value::object();
        for (std::size_t i = 0; i + 1 < n.items.size(); i += 2) {
          const Value k = eval(*n.items[i], env);
          if (k.kind != K::string) located(*n.items[i], std::string("object keys must be strings: got ") + kind_name(k));
          v.obj->set(k.s, eval(*n.items[i + 1], env));
        }
        return v;
      }
      case N::member: return member(n, env);
      case N::call: {
        auto args_kw = arguments(n.items, env);
        auto& args = args_kw.first;
        auto& kw = args_kw.second;
        if (!kw.entries.empty()) {
          Value kwv = Value::object();
          kwv.kwargs = true;
          *kwv.obj = std::move(kw);
          args.push_back(kwv);
        }
        const Value fn = eval(*n.a, env);
        if (fn.kind != K::function) {
          located(n, "cannot call something that is not a function: " + callee_name(*n.a) + " is " + kind_name(fn) +
                         (fn.kind == K::undefined ? " (an unknown function or method)" : ""));
        }
        return guarded(n, [&] { return (*fn.fn)(args, env); });
      }
      case N::unary: return unary(n, env);
      case N::binary: return binary(n, env);
      case N::filter: {
        const Value operand = eval(*n.a, env);
        return guarded(*n.b, [&] { return apply_filter(operand, *n.b, env); });
      }
      case N::test: {
        const Value operand = eval(*n.a, env);
        const bool r = guarded(n, [&] { return run_test(n.s, operand, nullptr); });
        return Value::boolean(n.flag ? !r : r);
      }
      case N::select: {
        if (!truthy_of(*n.b, env)) return Value{};
        return eval(*n.a, env);
      }
      case N::ternary: return truthy_of(*n.a, env) ? eval(*n.b, env) : eval(*n.c, env);
      case N::comment: return Value::null();
      default: located(n, "this statement cannot be used as an expression");
    }
  }

 private:
  static std::string callee_name(const Node& n) {
    const std::string path = dotted(n);
    return path.empty() ? "the callee" : "'" + path + "'";
  }
  static std::string dotted(const Node& n) {  // "a.b.c" for names and attribute access, else ""
    if (n.type == N::ident) return n.s;
    if (n.type == N::member && !n.flag && n.b->type == N::ident) {
      const std::string left = dotted(*n.a);
      return left.empty() ? "" : left + "." + n.b->s;
    }
    return "";
  }

  Value member(const Node& n, const EnvPtr& env) {
    const Value obj = eval(*n.a, env);
    if (n.flag && n.b->type == N::slice) return slice(*n.b, obj, env);
    Value prop;
    if (n.flag) {
      prop = eval(*n.b, env);
    } else if (n.b->type == N::integer) {
      prop = Value::integer(n.b->num);
    } else {
      prop = Value::string(n.b->s);
    }
    if (obj.is_map()) {
      if (prop.kind != K::string) located(n, std::string("cannot access a property with a non-string: got ") + kind_name(prop));
      if (const Value* v = obj.obj->find(prop.s)) return *v;
      if (obj.kind == K::object) return object_builtin(obj, prop.s);
      return Value{};
    }
    if (obj.kind == K::array || obj.kind == K::string) {
      if (prop.kind == K::integer) {
        const double len = obj.kind == K::array ? static_cast<double>(obj.arr->size())
                                                : static_cast<double>(detail::utf16_length(obj.s));
        double i = std::trunc(prop.n);
        if (i < 0) i += len;
        if (!(i >= 0 && i < len)) return Value{};
        if (obj.kind == K::array) return (*obj.arr)[static_cast<std::size_t>(i)];
        return Value::string(utf16_char(obj.s, static_cast<std::size_t>(i)));
      }
      if (prop.kind == K::string) return obj.kind == K::array ? array_builtin(obj, prop.s) : string_builtin(obj, prop.s);
      located(n, std::string("cannot access a property with a non-string/non-number: got ") + kind_name(prop));
    }
    if (prop.kind != K::string) located(n, std::string("cannot access a property with a non-string: got ") + kind_name(prop));
    return Value{};  // numbers, booleans, none, undefined and functions have no attributes
  }

  // The character at UTF-16 index i (half of a surrogate pair reads as U+FFFD, as Node writes it).
  static std::string utf16_char(const std::string& s, std::size_t idx) {
    std::size_t u = 0;
    for (std::size_t i = 0; i < s.size();) {
      std::uint32_t cp = 0;
      const std::size_t n = detail::utf8_decode(s, i, cp);
      const std::size_t w = cp >= 0x10000 ? 2 : 1;
      if (idx < u + w) return w == 2 ? std::string("\xEF\xBF\xBD") : s.substr(i, n);
      u += w;
      i += n;
    }
    return "";
  }

  Value slice(const Node& n, const Value& obj, const EnvPtr& env) {
    if (obj.kind != K::array && obj.kind != K::string) located(n, "slice object must be an array or string");
    std::optional<double> part[3];
    const NodeP* nodes[3] = {&n.a, &n.b, &n.c};
    for (int k = 0; k < 3; ++k) {
      if (!*nodes[k]) continue;
      const Value v = eval(**nodes[k], env);
      if (v.kind == K::undefined) continue;
      if (v.kind != K::integer) located(n, "slice bounds must be integers or undefined");
      part[k] = v.n;
    }
    std::vector<Value> cps;
    const std::vector<Value>* src = nullptr;
    if (obj.kind == K::string) {
      for (auto& c : detail::code_points(obj.s)) cps.push_back(Value::string(c));
      src = &cps;
    } else {
      src = obj.arr.get();
    }
    const double len = static_cast<double>(src->size());
    const double step = part[2].value_or(1);
    double start, stop;
    if (step >= 0) {
      start = part[0].value_or(0);
      start = start < 0 ? std::max(len + start, 0.0) : std::min(start, len);
      stop = part[1].value_or(len);
      stop = stop < 0 ? std::max(len + stop, 0.0) : std::min(stop, len);
    } else {
      start = part[0].value_or(len - 1);
      start = start < 0 ? std::max(len + start, -1.0) : std::min(start, len - 1);
      stop = part[1].value_or(-1);
      stop = stop < -1 ? std::max(len + stop, -1.0) : std::min(stop, len - 1);
    }
    const double dir = step > 0 ? 1 : step < 0 ? -1 : 0;
    if (dir == 0) located(n, "slice step cannot be zero");  // the oracle loops forever here
    std::vector<Value> out;
    for (double i = start; dir * i < dir * stop; i += step) out.push_back((*src)[static_cast<std::size_t>(i)]);
    if (obj.kind == K::string) {
      std::string s;
      for (const auto& c : out) s += c.s;
      return Value::string(s);
    }
    return Value::array(std::move(out));
  }

  Value unary(const Node& n, const EnvPtr& env) {
    const Value v = eval(*n.a, env);
    if (n.s == "not") return Value::boolean(!detail::truthy(v));
    const double sign = n.s == "-" ? -1 : 1;
    if (v.is_number() || v.kind == K::boolean) {
      const double x = v.kind == K::boolean ? (v.b ? 1 : 0) : v.n;
      return v.kind == K::floating ? Value::floating(sign * x) : Value::integer(sign * x);
    }
    located(n, "unknown operator '" + n.s + "' for " + kind_name(v));
  }

  Value binary(const Node& n, const EnvPtr& env) {
    const Value l = eval(*n.a, env);
    const std::string& op = n.s;
    if (op == "and") return detail::truthy(l) ? eval(*n.b, env) : l;
    if (op == "or") return detail::truthy(l) ? l : eval(*n.b, env);
    const Value r = eval(*n.b, env);
    Value v = guarded(n, [&] { return binary_values(op, l, r); });
    // Doubling a string or list in a loop would exhaust memory long before the iteration limit.
    const std::size_t size = v.kind == K::string ? v.s.size() : v.kind == K::array ? v.arr->size() : 0;
    if (size > t_.limits_.max_output) {
      located(n, "'" + op + "' result larger than " + std::to_string(t_.limits_.max_output) + (v.kind == K::string ? " bytes" : " elements"));
    }
    return v;
  }

  static Value binary_values(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return Value::boolean(detail::loose_equal(l, r));
    if (op == "!=") return Value::boolean(!detail::loose_equal(l, r));
    if (l.kind == K::undefined || r.kind == K::undefined) {
      if (r.kind == K::undefined && (op == "in" || op == "not in")) return Value::boolean(op == "not in");
      detail::fail("cannot perform operation " + op + " on undefined values");
    }
    if (l.kind == K::null || r.kind == K::null) detail::fail("cannot perform operation " + op + " on null values");
    if (op == "~") return Value::string(detail::js_string(l) + detail::js_string(r));
    const bool lnum = l.is_number() || l.kind == K::boolean, rnum = r.is_number() || r.kind == K::boolean;
    if (op == "**" && lnum && rnum) {
      const double a = l.kind == K::boolean ? (l.b ? 1 : 0) : l.n, b = r.kind == K::boolean ? (r.b ? 1 : 0) : r.n;
      if (a == 0 && b < 0) detail::fail("0.0 cannot be raised to a negative power");
      const double res = std::pow(a, b);
      if (!std::isfinite(res)) detail::fail("exponentiation result is not a finite real number");
      return (l.kind == K::floating || r.kind == K::floating || b < 0) ? Value::floating(res) : Value::integer(res);
    }
    if (l.is_number() && r.is_number()) {
      const double a = l.n, b = r.n;
      const bool fl = l.kind == K::floating || r.kind == K::floating;
      auto num = [fl](double x) { return fl ? Value::floating(x) : Value::integer(x); };
      if (op == "+") return num(a + b);
      if (op == "-") return num(a - b);
      if (op == "*") return num(a * b);
      if (op == "/") return Value::floating(a / b);
      if (op == "//") return num(std::floor(a / b));
      if (op == "%") return num(std::fmod(a, b));
      if (op == "<") return Value::boolean(a < b);
      if (op == ">") return Value::boolean(a > b);
      if (op == ">=") return Value::boolean(a >= b);
      if (op == "<=") return Value::boolean(a <= b);
    } else if (l.kind == K::array && r.kind == K::array) {
      if (op == "+") {
        std::vector<Value> v = *l.arr;
        v.insert(v.end(), r.arr->begin(), r.arr->end());
        return Value::array(std::move(v));
      }
    } else if (r.kind == K::array) {
      bool member = false;
      for (const auto& x : *r.arr) member = member || detail::strict_equal(x, l);
      if (op == "in") return Value::boolean(member);
      if (op == "not in") return Value::boolean(!member);
    }
    if ((l.kind == K::string || r.kind == K::string) && op == "+") {
      return Value::string(detail::js_string(l) + detail::js_string(r));
    }
    if (l.kind == K::string && r.kind == K::string) {
      if (op == "in") return Value::boolean(r.s.find(l.s) != std::string::npos);
      if (op == "not in") return Value::boolean(r.s.find(l.s) == std::string::npos);
    }
    if (l.kind == K::string && r.kind == K::object) {
      if (op == "in") return Value::boolean(r.obj->find(l.s) != nullptr);
      if (op == "not in") return Value::boolean(r.obj->find(l.s) == nullptr);
    }
    detail::fail("unknown operator \"" + op + "\" between " + kind_name(l) + " and " + kind_name(r));
  }

  // ------------------------------------------------------------ builtins: methods, filters, tests

  static Value object_builtin(const Value& obj, const std::string& name) {
    const Value self = obj;
    if (name == "get") {
      return Value::function([self](std::vector<Value>& a, const EnvPtr&) {
        if (a.empty() || a[0].kind != K::string) {
          detail::fail(std::string("object key must be a string: got ") + (a.empty() ? "UndefinedValue" : kind_name(a[0])));
        }
        if (const Value* v = self.obj->find(a[0].s)) return *v;
        return a.size() > 1 ? a[1] : Value::null();
      });
    }
    if (name == "items" || name == "keys" || name == "values") {
      return Value::function([self, name](std::vector<Value>&, const EnvPtr&) { return object_list(self, name); });
    }
    if (name == "dictsort") {
      return Value::function([self](std::vector<Value>& a, const EnvPtr&) { return dictsort(self, a); });
    }
    return Value{};
  }

  static Value object_list(const Value& self, const std::string& what) {
    Value out = Value::array();
    for (const auto& [k, v] : self.obj->entries) {
      if (what == "items") {
        out.arr->push_back(Value::array({Value::string(k), v}));
      } else {
        out.arr->push_back(what == "keys" ? Value::string(k) : v);
      }
    }
    return out;
  }

  static int compare(const Value& a, const Value& b, bool case_sensitive) {
    if (a.kind == K::null && b.kind == K::null) return 0;
    if (a.kind == K::null || b.kind == K::null || a.kind == K::undefined || b.kind == K::undefined) {
      if (a.kind == K::undefined && b.kind == K::undefined) return 0;
      detail::fail(std::string("cannot compare ") + kind_name(a) + " with " + kind_name(b));
    }
    auto numeric = [](const Value& v) { return v.is_number() || v.kind == K::boolean; };
    if (numeric(a) && numeric(b)) {
      const double x = a.kind == K::boolean ? (a.b ? 1 : 0) : a.n, y = b.kind == K::boolean ? (b.b ? 1 : 0) : b.n;
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind != b.kind) detail::fail(std::string("cannot compare different types: ") + kind_name(a) + " and " + kind_name(b));
    if (a.kind != K::string) detail::fail(std::string("cannot compare type: ") + kind_name(a));
    const std::string x = case_sensitive ? a.s : detail::ascii_lower(a.s), y = case_sensitive ? b.s : detail::ascii_lower(b.s);
    // JavaScript compares UTF-16 code units; byte order agrees except between astral and U+E000..U+FFFF characters.
    return x < y ? -1 : x > y ? 1 : 0;
  }

  static void split_kwargs(std::vector<Value>& a, ObjectData& kw) {
    std::vector<Value> pos;
    for (auto& v : a) {
      if (v.kind == K::object && v.kwargs) {
        kw = *v.obj;
      } else {
        pos.push_back(v);
      }
    }
    a = pos;
  }

  static Value dictsort(const Value& self, std::vector<Value> a) {
    ObjectData kw;
    split_kwargs(a, kw);
    auto arg = [&](std::size_t i, const char* k, Value d) {
      if (i < a.size()) return a[i];
      if (const Value* v = kw.find(k)) return *v;
      return d;
    };
    const Value cs = arg(0, "case_sensitive", Value::boolean(false));
    if (cs.kind != K::boolean) detail::fail("case_sensitive must be a boolean");
    const Value by = arg(1, "by", Value::string("key"));
    if (by.kind != K::string) detail::fail("by must be a string");
    if (by.s != "key" && by.s != "value") detail::fail("by must be either 'key' or 'value'");
    const Value rev = arg(2, "reverse", Value::boolean(false));
    if (rev.kind != K::boolean) detail::fail("reverse must be a boolean");
    std::vector<Value> items = *object_list(self, "items").arr;
    const std::size_t idx = by.s == "key" ? 0 : 1;
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const int c = compare((*x.arr)[idx], (*y.arr)[idx], cs.b);
      return rev.b ? c > 0 : c < 0;
    });
    return Value::array(std::move(items));
  }

  static Value array_builtin(const Value& obj, const std::string& name) {
    if (name == "length") return Value::integer(static_cast<double>(obj.arr->size()));
    return Value{};
  }

  static Value string_builtin(const Value& obj, const std::string& name) {
    const std::string s = obj.s;
    auto fn = [](auto f) { return Value::function(f); };
    if (name == "length") return Value::integer(static_cast<double>(detail::utf16_length(s)));
    if (name == "upper") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(detail::ascii_upper(s)); });
    if (name == "lower") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(detail::ascii_lower(s)); });
    if (name == "strip") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(detail::trim(s)); });
    if (name == "lstrip") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(detail::trim_start(s)); });
    if (name == "rstrip") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(detail::trim_end(s)); });
    if (name == "title") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(title(s)); });
    if (name == "capitalize") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(capitalize(s)); });
    if (name == "startswith" || name == "endswith") {
      const bool start = name == "startswith";
      return fn([s, start, name](std::vector<Value>& a, const EnvPtr&) {
        if (a.empty()) detail::fail(name + "() requires at least one argument");
        auto test = [&](const std::string& p) {
          return p.size() <= s.size() && (start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
        };
        if (a[0].kind == K::string) return Value::boolean(test(a[0].s));
        if (a[0].kind == K::array) {
          for (const auto& x : *a[0].arr) {
            if (x.kind != K::string) detail::fail(name + "() tuple elements must be strings");
            if (test(x.s)) return Value::boolean(true);
          }
          return Value::boolean(false);
        }
        detail::fail(name + "() argument must be a string or tuple of strings");
      });
    }
    if (name == "split") return fn([s](std::vector<Value>& a, const EnvPtr&) { return split(s, a); });
    if (name == "replace") return fn([s](std::vector<Value>& a, const EnvPtr&) { return replace(s, a); });
    return Value{};
  }

  // The oracle's titleCase: upper-case each word character that follows a non-word character (the rest unchanged).
  static std::string title(std::string s) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (detail::is_word(s[i]) && (i == 0 || !detail::is_word(s[i - 1])) && s[i] >= 'a' && s[i] <= 'z') s[i] = static_cast<char>(s[i] - 32);
    }
    return s;
  }
  static std::string capitalize(std::string s) {
    if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 32);
    return s;
  }

  static Value split(const std::string& s, const std::vector<Value>& a) {
    const Value sep = a.size() > 0 ? a[0] : Value::null();
    if (sep.kind != K::string && sep.kind != K::null) detail::fail("sep argument must be a string or null");
    const Value maxsplit = a.size() > 1 ? a[1] : Value::integer(-1);
    if (maxsplit.kind != K::integer) detail::fail("maxsplit argument must be a number");
    const double maxn = maxsplit.n;
    std::vector<std::string> parts;
    if (sep.kind == K::null) {
      const std::string text = detail::trim_start(s);
      std::size_t i = 0;
      while (i < text.size()) {
        while (std::size_t n = detail::space_at(text, i)) i += n;
        if (i >= text.size()) break;
        if (maxn != -1 && static_cast<double>(parts.size()) >= maxn) {
          parts.push_back(text.substr(i));
          break;
        }
        const std::size_t start = i;
        while (i < text.size() && !detail::space_at(text, i)) {
          std::uint32_t cp = 0;
          i += detail::utf8_decode(text, i, cp);
        }
        parts.push_back(text.substr(start, i - start));
      }
    } else {
      if (sep.s.empty()) detail::fail("empty separator");
      std::size_t from = 0;
      while (true) {
        const std::size_t k = s.find(sep.s, from);
        if (k == std::string::npos) break;
        parts.push_back(s.substr(from, k - from));
        from = k + sep.s.size();
      }
      parts.push_back(s.substr(from));
      if (maxn != -1 && static_cast<double>(parts.size()) > maxn) {
        const std::size_t keep = maxn < 0 ? 0 : static_cast<std::size_t>(maxn);
        std::string rest;
        for (std::size_t i = keep; i < parts.size(); ++i) rest += (i > keep ? sep.s : "") + parts[i];
        parts.resize(keep);
        parts.push_back(rest);
      }
    }
    Value out = Value::array();
    for (auto& p : parts) out.arr->push_back(Value::string(p));
    return out;
  }

  static Value replace(const std::string& s, const std::vector<Value>& a) {
    if (a.size() < 2) detail::fail("replace() requires at least two arguments");
    if (a[0].kind != K::string || a[1].kind != K::string) detail::fail("replace() arguments must be strings");
    Value count = Value::null();
    if (a.size() > 2) {
      if (a[2].kind == K::object && a[2].kwargs) {
        const Value* c = a[2].obj->find("count");
        count = c ? *c : Value::null();
      } else {
        count = a[2];
      }
    }
    if (count.kind != K::integer && count.kind != K::null) detail::fail("replace() count argument must be a number or null");
    if (count.kind == K::integer && count.n == 0) return Value::string(s);
    double remaining = (count.kind == K::null || count.n < 0) ? std::numeric_limits<double>::infinity() : count.n;
    const std::string& from = a[0].s;
    const std::string& to = a[1].s;
    std::string out;
    if (from.empty()) {  // an insertion before every code point and at the end
      for (const auto& c : detail::code_points(s)) {
        if (remaining > 0) {
          out += to;
          --remaining;
        }
        out += c;
      }
      if (remaining > 0) out += to;
      return Value::string(out);
    }
    std::size_t i = 0;
    while (true) {
      const std::size_t k = remaining > 0 ? s.find(from, i) : std::string::npos;
      if (k == std::string::npos) break;
      out.append(s, i, k - i);
      out += to;
      --remaining;
      i = k + from.size();
    }
    out.append(s, i, std::string::npos);
    return Value::string(out);
  }

  static bool run_test(const std::string& name, const Value& v, const Value* arg) {
    if (name == "boolean") return v.kind == K::boolean;
    if (name == "callable") return v.kind == K::function;
    if (name == "odd" || name == "even") {
      if (v.kind != K::integer) detail::fail("cannot " + name + " on " + kind_name(v));
      const bool odd = std::fmod(v.n, 2) != 0;
      return name == "odd" ? odd : !odd;
    }
    if (name == "false") return v.kind == K::boolean && !v.b;
    if (name == "true") return v.kind == K::boolean && v.b;
    if (name == "none") return v.kind == K::null;
    if (name == "string") return v.kind == K::string;
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == K::integer;
    if (name == "iterable") return v.kind == K::array || v.kind == K::string;
    if (name == "mapping") return v.kind == K::object;
    if (name == "sequence") return v.kind == K::array || v.kind == K::object || v.kind == K::string;
    if (name == "lower") return v.kind == K::string && v.s == detail::ascii_lower(v.s);
    if (name == "upper") return v.kind == K::string && v.s == detail::ascii_upper(v.s);
    if (name == "defined") return v.kind != K::undefined;
    if (name == "undefined") return v.kind == K::undefined;
    if (name == "equalto" || name == "eq") {
      if (!arg) detail::fail("test '" + name + "' needs an argument (which @huggingface/jinja cannot pass after 'is')");
      return detail::strict_equal(v, *arg);
    }
    throw detail::UnsupportedFail("test '" + name + "'");
  }

  static Value attribute_path(const Value& item, const std::string& path) {
    Value v = item;
    std::size_t from = 0;
    while (true) {
      const std::size_t dot = path.find('.', from);
      const std::string part = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
      if (v.is_map()) {
        const Value* x = v.obj->find(part);
        v = x ? *x : Value{};
      } else if (v.kind == K::array) {
        // parseInt: leading digits (after an optional sign and blanks)
        const std::string t = detail::trim_start(part);
        std::size_t k = 0;
        bool neg = false;
        if (k < t.size() && (t[k] == '+' || t[k] == '-')) neg = t[k++] == '-';
        double idx = 0;
        const std::size_t d0 = k;
        while (k < t.size() && detail::is_digit(t[k])) idx = idx * 10 + (t[k++] - '0');
        if (k == d0 || neg || idx >= static_cast<double>(v.arr->size())) return Value{};
        v = (*v.arr)[static_cast<std::size_t>(idx)];
      } else {
        return Value{};
      }
      if (dot == std::string::npos) break;
      from = dot + 1;
    }
    return v;
  }

  static std::string js_parse_int_prefix(const std::string& s, bool float_mode, double& out) {
    // parseInt(s, 10) / parseFloat(s): the longest numeric prefix after leading whitespace; "" when none.
    const std::string t = detail::trim_start(s);
    std::size_t k = 0;
    std::string num;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) num += t[k++];
    if (float_mode && t.compare(k, 8, "Infinity") == 0) {
      out = num == "-" ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      return "Infinity";
    }
    std::size_t digits = 0;
    while (k < t.size() && detail::is_digit(t[k])) {
      num += t[k++];
      ++digits;
    }
    if (float_mode) {
      if (k < t.size() && t[k] == '.') {
        std::string frac = ".";
        std::size_t j = k + 1, fd = 0;
        while (j < t.size() && detail::is_digit(t[j])) {
          frac += t[j++];
          ++fd;
        }
        if (fd || digits) {
          num += frac;
          digits += fd;
          k = j;
        }
      }
      if (digits && k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
        std::string ex = "e";
        std::size_t j = k + 1;
        if (j < t.size() && (t[j] == '+' || t[j] == '-')) ex += t[j++];
        const std::size_t e0 = j;
        while (j < t.size() && detail::is_digit(t[j])) ex += t[j++];
        if (j > e0) num += ex;
      }
    }
    if (!digits) return "";
    out = std::strtod(num.c_str(), nullptr);
    return num;
  }

  Value apply_filter(const Value& v, const Node& f, const EnvPtr& env) {
    if (f.type == N::ident) return filter_plain(v, f.s);
    if (f.type != N::call || f.a->type != N::ident) throw detail::RuntimeFail("unknown filter");
    return filter_call(v, f.a->s, f, env);
  }

  static Value filter_plain(const Value& v, const std::string& name) {
    if (name == "safe") return v;
    if (name == "tojson") return Value::string(detail::to_json(v, detail::JsonOptions{}, 0, true));
    if (v.kind == K::array) {
      const auto& a = *v.arr;
      if (name == "list") return v;
      if (name == "first" || name == "last") {
        // The oracle returns JavaScript's undefined (not UndefinedValue) here, which fails at its first use.
        if (a.empty()) detail::fail("filter '" + name + "' on an empty list");
        return name == "first" ? a.front() : a.back();
      }
      if (name == "length") return Value::integer(static_cast<double>(a.size()));
      if (name == "reverse") return Value::array(std::vector<Value>(a.rbegin(), a.rend()));
      if (name == "sort") {
        std::vector<Value> s = a;
        std::stable_sort(s.begin(), s.end(), [](const Value& x, const Value& y) { return compare(x, y, false) < 0; });
        return Value::array(std::move(s));
      }
      if (name == "join") {
        std::string out;
        for (const auto& x : a) out += join_piece(x);
        return Value::string(out);
      }
      if (name == "string") return Value::string(detail::to_json(v, detail::JsonOptions{}, 0, false));
      if (name == "unique") {
        std::vector<Value> out;
        for (const auto& x : a) {
          bool seen = false;
          for (const auto& y : out) seen = seen || same_value_zero(x, y);
          if (!seen) out.push_back(x);
        }
        return Value::array(std::move(out));
      }
      detail::fail("unknown ArrayValue filter: " + name);
    }
    if (v.kind == K::string) {
      if (name == "length") return Value::integer(static_cast<double>(detail::utf16_length(v.s)));
      if (name == "upper") return Value::string(detail::ascii_upper(v.s));
      if (name == "lower") return Value::string(detail::ascii_lower(v.s));
      if (name == "title") return Value::string(title(v.s));
      if (name == "capitalize") return Value::string(capitalize(v.s));
      if (name == "trim") return Value::string(detail::trim(v.s));
      if (name == "indent") return Value::string(indent(v.s, "    ", false, false));
      if (name == "join" || name == "string") return v;
      if (name == "int" || name == "float") {
        double x = 0;
        const bool ok = !js_parse_int_prefix(v.s, name == "float", x).empty();
        return name == "int" ? Value::integer(ok ? std::trunc(x) : 0) : Value::floating(ok ? x : 0);
      }
      detail::fail("unknown StringValue filter: " + name);
    }
    if (v.is_number()) {
      if (name == "abs") return v.kind == K::integer ? Value::integer(std::fabs(v.n)) : Value::floating(std::fabs(v.n));
      if (name == "int") return Value::integer(std::floor(v.n));
      if (name == "float") return Value::floating(v.n);
      if (name == "string") return Value::string(detail::display(v));
      detail::fail("unknown NumericValue filter: " + name);
    }
    if (v.kind == K::object) {
      if (name == "items") return object_list(v, "items");
      if (name == "length") return Value::integer(static_cast<double>(v.obj->entries.size()));
      const Value b = object_builtin(v, name);
      if (b.kind == K::function) {
        std::vector<Value> none;
        return (*b.fn)(none, nullptr);
      }
      detail::fail("unknown ObjectValue filter: " + name);
    }
    if (v.kind == K::boolean) {
      if (name == "bool") return v;
      if (name == "int") return Value::integer(v.b ? 1 : 0);
      if (name == "float") return Value::floating(v.b ? 1 : 0);
      if (name == "string") return Value::string(v.b ? "true" : "false");
      detail::fail("unknown BooleanValue filter: " + name);
    }
    detail::fail("cannot apply filter \"" + name + "\" to type: " + kind_name(v));
  }

  // Array.prototype.join on the elements' .value: numbers as JavaScript prints them, null/undefined as "".
  static std::string join_piece(const Value& x) {
    if (x.kind == K::null || x.kind == K::undefined) return "";
    return detail::js_string(x);
  }
  static bool same_value_zero(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number() && std::isnan(a.n) && std::isnan(b.n)) return true;
    return detail::strict_equal(a, b);
  }

  static std::string indent(const std::string& s, const std::string& pad, bool first, bool blank) {
    std::string out;
    std::size_t from = 0, line = 0;
    while (true) {
      const std::size_t nl = s.find('\n', from);
      const std::string x = s.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
      out += ((!first && line == 0) || (!blank && x.empty())) ? x : pad + x;
      if (nl == std::string::npos) break;
      out += '\n';
      from = nl + 1;
      ++line;
    }
    return out;
  }

  Value filter_call(const Value& v, const std::string& name, const Node& f, const EnvPtr& env) {
    if (name == "tojson") {
      const ObjectData kw = arguments(f.items, env).second;
      detail::JsonOptions o;
      const Value* ind = kw.find("indent");
      if (ind && ind->kind != K::integer && ind->kind != K::null) detail::fail("if set, indent must be a number");
      if (ind && ind->kind == K::integer) {
        if (ind->n < 0 || ind->n > 64) throw detail::UnsupportedFail("tojson indent outside 0..64");
        o.indent = static_cast<int>(ind->n);
      }
      const Value* ea = kw.find("ensure_ascii");
      if (ea && ea->kind != K::boolean) detail::fail("if set, ensure_ascii must be a boolean");
      o.ensure_ascii = ea && ea->b;
      const Value* sk = kw.find("sort_keys");
      if (sk && sk->kind != K::boolean) detail::fail("if set, sort_keys must be a boolean");
      o.sort_keys = sk && sk->b;
      const Value* sep = kw.find("separators");
      if (sep && sep->kind == K::array) {
        if (sep->arr->size() != 2 || (*sep->arr)[0].kind != K::string || (*sep->arr)[1].kind != K::string) {
          detail::fail("separators must be a tuple of two strings");
        }
        o.has_separators = true;
        o.item_sep = (*sep->arr)[0].s;
        o.key_sep = (*sep->arr)[1].s;
      } else if (sep && sep->kind != K::null) {
        detail::fail("if set, separators must be a tuple of two strings");
      }
      return Value::string(detail::to_json(v, o, 0, true));
    }
    if (name == "join") {
      std::vector<std::string> pieces;
      if (v.kind == K::string) {
        pieces = detail::code_points(v.s);
      } else if (v.kind == K::array) {
        for (const auto& x : *v.arr) pieces.push_back(join_piece(x));
      } else {
        detail::fail("cannot apply filter \"join\" to type: " + std::string(kind_name(v)));
      }
      auto pos_kw = arguments(f.items, env);
      auto& pos = pos_kw.first;
      auto& kw = pos_kw.second;
      Value sep = Value::string("");
      if (!pos.empty()) {
        sep = pos[0];
      } else if (const Value* s = kw.find("separator")) {
        sep = *s;
      }
      if (sep.kind != K::string) detail::fail("separator must be a string");
      std::string out;
      for (std::size_t i = 0; i < pieces.size(); ++i) out += (i ? sep.s : "") + pieces[i];
      return Value::string(out);
    }
    if (name == "int" || name == "float") {
      auto pos_kw = arguments(f.items, env);
      auto& pos = pos_kw.first;
      auto& kw = pos_kw.second;
      const bool is_int = name == "int";
      Value dflt = is_int ? Value::integer(0) : Value::floating(0);
      if (!pos.empty()) {
        dflt = pos[0];
      } else if (const Value* d = kw.find("default")) {
        dflt = *d;
      }
      if (v.kind == K::string) {
        double x = 0;
        if (js_parse_int_prefix(v.s, !is_int, x).empty()) return dflt;
        return is_int ? Value::integer(std::trunc(x)) : Value::floating(x);
      }
      if (v.is_number()) return v;
      if (v.kind == K::boolean) return is_int ? Value::integer(v.b ? 1 : 0) : Value::floating(v.b ? 1 : 0);
      detail::fail("cannot apply filter \"" + name + "\" to type: " + kind_name(v));
    }
    if (name == "default") {
      auto pos_kw = arguments(f.items, env);
      auto& pos = pos_kw.first;
      auto& kw = pos_kw.second;
      const Value dflt = pos.size() > 0 ? pos[0] : Value::string("");
      Value flag = Value::boolean(false);
      if (pos.size() > 1) {
        flag = pos[1];
      } else if (const Value* b = kw.find("boolean")) {
        flag = *b;
      }
      if (flag.kind != K::boolean) detail::fail("`default` filter flag must be a boolean");
      if (v.kind == K::undefined || (flag.b && !detail::truthy(v))) return dflt;
      return v;
    }
    if (v.kind == K::array) {
      if (name == "sort") {
        auto pos_kw = arguments(f.items, env);
        auto& pos = pos_kw.first;
        auto& kw = pos_kw.second;
        auto arg = [&](std::size_t i, const char* k, Value d) {
          if (i < pos.size()) return pos[i];
          if (const Value* x = kw.find(k)) return *x;
          return d;
        };
        const Value rev = arg(0, "reverse", Value::boolean(false));
        if (rev.kind != K::boolean) detail::fail("reverse must be a boolean");
        const Value cs = arg(1, "case_sensitive", Value::boolean(false));
        if (cs.kind != K::boolean) detail::fail("case_sensitive must be a boolean");
        const Value attr = arg(2, "attribute", Value::null());
        if (attr.kind != K::string && attr.kind != K::integer && attr.kind != K::null) {
          detail::fail("attribute must be a string, integer, or null");
        }
        auto key = [&](const Value& item) {
          if (attr.kind == K::null) return item;
          return attribute_path(item, attr.kind == K::integer ? detail::js_number(attr.n) : attr.s);
        };
        std::vector<Value> s = *v.arr;
        std::stable_sort(s.begin(), s.end(), [&](const Value& x, const Value& y) {
          const int c = compare(key(x), key(y), cs.b);
          return rev.b ? c > 0 : c < 0;
        });
        return Value::array(std::move(s));
      }
      if (name == "selectattr" || name == "rejectattr") {
        const bool select = name == "selectattr";
        for (const auto& x : *v.arr) {
          if (!x.is_map()) detail::fail("`" + name + "` can only be applied to array of objects");
        }
        for (const auto& a : f.items) {
          if (a->type != N::string) detail::fail("arguments of `" + name + "` must be strings");
        }
        if (f.items.empty()) detail::fail("`" + name + "` needs an attribute name");
        const std::string attr = f.items[0]->s;
        const std::string test = f.items.size() > 1 ? f.items[1]->s : "";
        const Value arg = f.items.size() > 2 ? Value::string(f.items[2]->s) : Value{};
        std::vector<Value> out;
        for (const auto& x : *v.arr) {
          const Value* a = x.obj->find(attr);
          bool r = false;
          if (a) r = test.empty() ? detail::truthy(*a) : run_test(test, *a, f.items.size() > 2 ? &arg : nullptr);
          if (r == select) out.push_back(x);
        }
        return Value::array(std::move(out));
      }
      if (name == "map") {
        const ObjectData kw = arguments(f.items, env).second;
        const Value* attr = kw.find("attribute");
        if (!attr) throw detail::UnsupportedFail("`map` without attribute= (@huggingface/jinja supports only map(attribute=...))");
        if (attr->kind != K::string) detail::fail("attribute must be a string");
        const Value* dflt = kw.find("default");
        std::vector<Value> out;
        for (const auto& x : *v.arr) {
          if (!x.is_map()) detail::fail("items in map must be an object");
          const Value r = attribute_path(x, attr->s);
          out.push_back(r.kind == K::undefined ? (dflt ? *dflt : Value{}) : r);
        }
        return Value::array(std::move(out));
      }
      detail::fail("unknown ArrayValue filter: " + name);
    }
    if (v.kind == K::string) {
      if (name == "indent") {
        auto pos_kw = arguments(f.items, env);
        auto& pos = pos_kw.first;
        auto& kw = pos_kw.second;
        auto arg = [&](std::size_t i, const char* k, Value d) {
          if (i < pos.size()) return pos[i];
          if (const Value* x = kw.find(k)) return *x;
          return d;
        };
        const Value width = arg(0, "width", Value::integer(4));
        if (width.kind != K::integer) detail::fail("width must be a number");
        if (width.n < 0 || width.n > 1024) throw detail::UnsupportedFail("indent width outside 0..1024");
        const Value first = arg(1, "first", Value::boolean(false)), blank = arg(2, "blank", Value::boolean(false));
        return Value::string(indent(v.s, std::string(static_cast<std::size_t>(width.n), ' '), detail::truthy(first),
                                    detail::truthy(blank)));
      }
      if (name == "replace") {
        auto pos_kw = arguments(f.items, env);
        auto& pos = pos_kw.first;
        auto& kw = pos_kw.second;
        Value kwv = Value::object();
        kwv.kwargs = true;
        *kwv.obj = kw;
        pos.push_back(kwv);
        return replace(v.s, pos);
      }
      detail::fail("unknown StringValue filter: " + name);
    }
    if (v.kind == K::object) {
      const Value b = object_builtin(v, name);
      if (b.kind == K::function) {
        auto pos_kw = arguments(f.items, env);
        auto& pos = pos_kw.first;
        auto& kw = pos_kw.second;
        if (!kw.entries.empty()) {
          Value kwv = Value::object();
          kwv.kwargs = true;
          *kwv.obj = kw;
          pos.push_back(kwv);
        }
        return (*b.fn)(pos, env);
      }
      detail::fail("unknown ObjectValue filter: " + name);
    }
    detail::fail("cannot apply filter \"" + name + "\" to type: " + kind_name(v));
  }
};

// The two entry points of the engine are MAXTEXT_API (core/macros.hpp): in this project's programs they, and with
// them the lexer, parser and interpreter above, are compiled once (maxtext_compiled) instead of in every unit that
// renders a chat template.
#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API Template::Template(std::string source, std::string name, Limits limits)
    : src_(std::move(source)), name_(std::move(name)), limits_(limits) {
  const detail::Source s = detail::preprocess(src_);
  const auto tokens = detail::tokenize(s, name_, src_);
  detail::Parser p(tokens, name_, src_, limits_.max_depth);
  body_ = std::make_shared<const std::vector<detail::NodeP>>(p.program());
}

MAXTEXT_API std::string Template::render(const Json& context) const {
  Interpreter in(*this);
  return in.run(context);
}
#endif

}  // namespace maxtext::tokenizer::jinja
