// bench/bench_args.hpp: the "--name value" options of the bench programs, parsed one way. Each program declares its
// options with where their values go; a missing value, a number that is not one, or an unknown option (named with
// the nearest known one) ends the program with its usage line and exit status 2.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "maxtext/core/nearest.hpp"

namespace maxtext::bench {

class Options {
 public:
  /// `program` prefixes every message; `usage` is the usage line printed after one.
  Options(std::string program, std::string usage) : program_(std::move(program)), usage_(std::move(usage)) {}

  /// --name TEXT
  Options& text(const std::string& name, std::string& out) {
    return add(name, true, [&out](const std::string& v) { out = v; });
  }
  /// --name N (an integer; a bool takes N != 0).
  template <class T>
  Options& number(const std::string& name, T& out) {
    return add(name, true, [this, name, &out](const std::string& v) {
      const long long n = to_number(name, v);
      if constexpr (std::is_same_v<T, bool>) {
        out = n != 0;
      } else {
        out = static_cast<T>(n);
      }
    });
  }
  /// --name N,N,... (integers).
  Options& list(const std::string& name, std::vector<std::int64_t>& out) {
    return add(name, true, [this, name, &out](const std::string& v) {
      out.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) out.push_back(to_number(name, item));
      }
    });
  }
  /// --name (no value): sets `out`.
  Options& flag(const std::string& name, bool& out) {
    return add(name, false, [&out](const std::string&) { out = true; });
  }

  /// Parse argv[first..argc).
  void parse(int argc, char** argv, int first = 1) const {
    for (int i = first; i < argc; ++i) {
      const std::string k = argv[i];
      const Opt* o = find(k);
      if (!o) {
        std::vector<std::string> names;
        for (const auto& x : opts_) names.push_back(x.name);
        const std::string near = nearest_name(k, names);
        fail("unknown option " + k + (near.empty() ? "" : " (did you mean " + near + "?)"));
      }
      if (!o->takes_value) {
        o->set("");
        continue;
      }
      if (i + 1 >= argc) fail(k + " needs a value");
      o->set(argv[++i]);
    }
  }

  /// The message, then the usage line; exit status 2.
  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\nusage: %s\n", program_.c_str(), why.c_str(), usage_.c_str());
    std::exit(2);
  }

 private:
  struct Opt {
    std::string name;
    bool takes_value;
    std::function<void(const std::string&)> set;
  };
  Options& add(const std::string& name, bool takes_value, std::function<void(const std::string&)> set) {
    opts_.push_back({name, takes_value, std::move(set)});
    return *this;
  }
  const Opt* find(const std::string& k) const {
    for (const auto& o : opts_) {
      if (o.name == k) return &o;
    }
    return nullptr;
  }
  long long to_number(const std::string& name, const std::string& v) const {
    std::size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) fail(name + " needs an integer, found '" + v + "'");
    return n;
  }

  std::string program_, usage_;
  std::vector<Opt> opts_;
};

}  // namespace maxtext::bench
