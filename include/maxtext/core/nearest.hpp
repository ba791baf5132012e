// core/nearest.hpp: the nearest valid name to a misspelled one, for refusals that say "did you mean ...?" (config
// keys, command-line options).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace maxtext {

/// Levenshtein distance, an adjacent transposition counting as one edit (optimal string alignment).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> d((n + 1) * (m + 1));
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * (m + 1) + j]; };
  for (std::size_t i = 0; i <= n; ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= m; ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(n, m);
}

/// The name of `names` nearest to `s` by edit_distance, or "" when none is within max(2, |s| / 3) edits (ties: the
/// first in `names`).
template <class Names>
std::string nearest_name(std::string_view s, const Names& names) {
  const std::size_t limit = std::max<std::size_t>(2, s.size() / 3);
  std::string best;
  std::size_t best_d = limit + 1;
  for (const auto& n : names) {
    const std::size_t d = edit_distance(s, n);
    if (d < best_d) {
      best_d = d;
      best = std::string(n);
    }
  }
  return best;
}

}  // namespace maxtext
