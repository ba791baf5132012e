// tools/cli_common.hpp: argument helpers shared by the maxtext commands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxtext/core/error.hpp"

namespace maxtext::cli {

/// "1,2,3/4,5,6" -> rows of token ids.
inline std::vector<std::vector<std::int32_t>> parse_token_rows(const std::string& s) {
  std::vector<std::vector<std::int32_t>> rows(1);
  std::string cur;
  auto flush = [&]() {
    if (cur.empty()) return;
    std::size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    MAXTEXT_CHECK(pos == cur.size() && v >= 0 && v <= 0x7fffffff, ArgumentError, "--tokens: '", cur,
                  "' is not a token id");
    rows.back().push_back(static_cast<std::int32_t>(v));
    cur.clear();
  };
  for (char c : s) {
    if (c == ',' || c == ' ') {
      flush();
    } else if (c == '/') {
      flush();
      rows.emplace_back();
    } else {
      cur.push_back(c);
    }
  }
  flush();
  for (const auto& r : rows) MAXTEXT_CHECK(!r.empty(), ArgumentError, "--tokens: empty row in '", s, "'");
  return rows;
}

}  // namespace maxtext::cli
