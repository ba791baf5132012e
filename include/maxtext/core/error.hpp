// core/error.hpp: the exception hierarchy and the validation macro.
// Messages read "[where] what: expected X, found Y". Validation happens once, at config load, weight load and
// layer entry; kernels only use MAXTEXT_DASSERT.
#pragma once

#include <array>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace maxtext {

/// Base of every exception the library throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// Inconsistent or unsupported configuration values (names the keys).
class ConfigError : public Error {
 public:
  using Error::Error;
};
/// A tensor whose shape does not match what a layer or a weight slot expects.
class ShapeError : public Error {
 public:
  using Error::Error;
};
/// A missing, truncated or malformed file, or a tensor of the wrong dtype inside one.
class IoError : public Error {
 public:
  using Error::Error;
};
/// A feature that exists in MaxText but that this library does not implement.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};
/// A failure reported by an accelerator runtime.
class DeviceError : public Error {
 public:
  using Error::Error;
};
/// Bad arguments to a public function (token ids out of range, bad sampling parameters, ...).
class ArgumentError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class T>
void stream_one(std::ostringstream& os, const T& v) {
  os << v;
}
template <class T, std::size_t N>
void stream_one(std::ostringstream& os, const std::array<T, N>& v) {
  os << '[';
  for (std::size_t i = 0; i < N; ++i) os << (i ? "," : "") << v[i];
  os << ']';
}
template <class T>
void stream_one(std::ostringstream& os, const std::vector<T>& v) {
  os << '[';
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << ']';
}
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (stream_one(os, args), ...);
  return os.str();
}
}  // namespace detail

/// Build a message from any streamable pieces (arrays and vectors print as [a,b,c]).
template <class... Args>
std::string str(const Args&... args) {
  return detail::concat(args...);
}

}  // namespace maxtext

/// Throw ErrorType(message pieces...) unless cond holds.
#define MAXTEXT_CHECK(cond, ErrorType, ...)                       \
  do {                                                            \
    if (!(cond)) throw ErrorType(::maxtext::str(__VA_ARGS__));    \
  } while (0)

/// Unconditionally throw ErrorType(message pieces...).
#define MAXTEXT_THROW(ErrorType, ...) throw ErrorType(::maxtext::str(__VA_ARGS__))
