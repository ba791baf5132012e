// testing/reference_check.hpp: compare every activation a reference dump holds (MaxText/JAX, PyTorch, ...) against
// what this library captured for the same input, in forward order, and say where the two first diverge. The engine
// behind `maxtext compare`; usable on its own from C++ (Capture + io::read_tensors + check_against_reference).
//
// Logits get the measures of MaxText's checkpoint-conversion checker (tests/utils/forward_pass_logit_checker.py):
// the KL divergence D_KL(P_reference || Q_ours) = sum_v p_v (log p_v - log q_v) of the softmax distributions at each
// position (its --max_kl_div criterion: every position below the limit), and the top-k agreement per position
// (|top-k ids of ours ∩ top-k ids of the reference| / k, plus whether the argmax agrees).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/io/mapped_file.hpp"
#include "maxtext/io/safetensors.hpp"
#include "maxtext/layers/context.hpp"
#include "maxtext/testing/compare.hpp"

namespace maxtext::testing {

/// Names of a reference dump mapped to this library's names. Text format, one rule a line:
///     their_name   our_name      # comment
///     their_name   -             # ignore this reference tensor
///     prefix_*     -             # one '*' matches any run of characters (first matching pattern wins)
/// Exact rules take precedence over patterns; a reference name matching no rule keeps its own name.
class NameMap {
 public:
  NameMap() = default;

  /// Parse map text; `where` names the source in errors ("[name map] FILE:LINE: ...").
  static NameMap parse(const std::string& text, const std::string& where = "map") {
    NameMap m;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      const auto hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      std::istringstream ls(line);
      std::string theirs, ours, extra;
      if (!(ls >> theirs)) continue;
      MAXTEXT_CHECK(static_cast<bool>(ls >> ours), ArgumentError, "[name map] ", where, ":", n,
                    ": expected 'their_name our_name', found only '", theirs, "'");
      MAXTEXT_CHECK(!(ls >> extra), ArgumentError, "[name map] ", where, ":", n,
                    ": expected two names, found a third: '", extra, "'");
      const auto stars = std::count(theirs.begin(), theirs.end(), '*');
      MAXTEXT_CHECK(stars <= 1, ArgumentError, "[name map] ", where, ":", n, ": at most one '*' per pattern, found '",
                    theirs, "'");
      MAXTEXT_CHECK(ours.find('*') == std::string::npos, ArgumentError, "[name map] ", where, ":", n,
                    ": our name cannot be a pattern: '", ours, "'");
      if (ours == "-") ours.clear();
      if (stars == 1) {
        m.patterns_.emplace_back(theirs, ours);
      } else {
        MAXTEXT_CHECK(m.exact_.emplace(theirs, ours).second, ArgumentError, "[name map] ", where, ":", n, ": '", theirs,
                      "' is mapped twice");
      }
    }
    return m;
  }
  /// Read a map file.
  static NameMap read(const std::string& path) { return parse(io::read_text_file(path), path); }

  void add(std::string theirs, std::string ours) { exact_[std::move(theirs)] = std::move(ours); }
  bool empty() const { return exact_.empty() && patterns_.empty(); }

  /// Our name for a reference name; empty when the map says to ignore it.
  std::string ours(const std::string& theirs) const {
    auto it = exact_.find(theirs);
    if (it != exact_.end()) return it->second;
    for (const auto& [pat, our] : patterns_) {
      const auto star = pat.find('*');
      const std::string pre = pat.substr(0, star), suf = pat.substr(star + 1);
      if (theirs.size() >= pre.size() + suf.size() && theirs.compare(0, pre.size(), pre) == 0 &&
          theirs.compare(theirs.size() - suf.size(), suf.size(), suf) == 0) {
        return our;
      }
    }
    return theirs;
  }

 private:
  std::map<std::string, std::string> exact_;
  std::vector<std::pair<std::string, std::string>> patterns_;
};

/// Our tensor and the reference lined up for comparison, or why they cannot be.
struct Alignment {
  AnyTensor ours, theirs;
  std::string note;  ///< what was adjusted (batch dim, vocab) or the mismatch
  bool ok = false;
};

/// Line up shapes: equal shapes compare as they are; a reference without our leading batch dim of 1, or with an
/// extra leading dim of 1, compares after dropping that dim; logits (`is_logits`) whose vocab sizes differ (padded
/// vocabularies) compare over the smaller vocab, as MaxText's checker does. Anything else is a mismatch.
inline Alignment align(const AnyTensor& ours, const AnyTensor& theirs, bool is_logits = false) {
  Alignment a;
  a.ours = ours;
  a.theirs = theirs;
  auto tail = [](const std::vector<std::int64_t>& s) { return std::vector<std::int64_t>(s.begin() + 1, s.end()); };
  if (ours.shape != theirs.shape) {
    if (ours.rank() == theirs.rank() + 1 && ours.shape[0] == 1 && tail(ours.shape) == theirs.shape) {
      a.ours = ours.select(0, 0);
      a.note = "reference has no batch dim";
    } else if (theirs.rank() == ours.rank() + 1 && theirs.shape[0] == 1 && tail(theirs.shape) == ours.shape) {
      a.theirs = theirs.select(0, 0);
      a.note = "reference has an extra leading dim of 1";
    }
  }
  if (is_logits && a.ours.rank() == a.theirs.rank() && a.ours.rank() >= 1 && a.ours.shape != a.theirs.shape) {
    const int last = a.ours.rank() - 1;
    const auto u = static_cast<std::size_t>(last);
    if (std::equal(a.ours.shape.begin(), a.ours.shape.end() - 1, a.theirs.shape.begin())) {
      const std::int64_t v = std::min(a.ours.shape[u], a.theirs.shape[u]);
      a.note += std::string(a.note.empty() ? "" : "; ") + "vocab " + std::to_string(a.ours.shape[u]) + " (ours) vs " +
                std::to_string(a.theirs.shape[u]) + ": compared the first " + std::to_string(v);
      a.ours = a.ours.narrow(last, 0, v);
      a.theirs = a.theirs.narrow(last, 0, v);
    }
  }
  a.ok = a.ours.shape == a.theirs.shape;
  if (!a.ok) a.note = str("shape mismatch: ours ", ours.shape, ", reference ", theirs.shape);
  return a;
}

/// Per-position logit measures (positions = all leading indices, the last axis is the vocabulary).
struct LogitStats {
  int k = 0;
  std::vector<std::int64_t> position_shape;  ///< shape of the leading axes
  std::vector<double> kl;                    ///< D_KL(P_reference || Q_ours) per position
  std::vector<int> overlap;                  ///< |top-k(ours) ∩ top-k(reference)| per position
  std::vector<bool> top1;                    ///< argmax agrees
  double kl_max = 0, kl_mean = 0;
  std::int64_t kl_argmax = 0;
  double overlap_mean = 0;
  int overlap_min = 0;
  std::int64_t overlap_argmin = 0;
  std::int64_t top1_agree = 0;

  std::vector<std::int64_t> unravel(std::int64_t flat) const {
    std::vector<std::int64_t> idx(position_shape.size());
    for (int d = static_cast<int>(position_shape.size()) - 1; d >= 0; --d) {
      const auto u = static_cast<std::size_t>(d);
      idx[u] = flat % position_shape[u];
      flat /= position_shape[u];
    }
    return idx;
  }
};

namespace detail {
/// Indices of the k largest values (ties: lower index first).
inline std::vector<std::int64_t> top_k_ids(const std::vector<double>& v, int k) {
  std::vector<std::int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto kk = static_cast<std::ptrdiff_t>(std::min<std::size_t>(static_cast<std::size_t>(k), v.size()));
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](std::int64_t a, std::int64_t b) {
    const double x = v[static_cast<std::size_t>(a)], y = v[static_cast<std::size_t>(b)];
    return x > y || (x == y && a < b);
  });
  idx.resize(static_cast<std::size_t>(kk));
  return idx;
}
/// log_softmax in double.
inline std::vector<double> log_softmax(const std::vector<double>& x) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  const double lse = m + std::log(s);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] - lse;
  return out;
}
}  // namespace detail

/// KL divergence and top-k agreement per position of two logit tensors of equal shape [..., V] (any dtypes).
inline LogitStats logit_stats(const AnyTensor& ours, const AnyTensor& theirs, int k = 10) {
  MAXTEXT_CHECK(ours.shape == theirs.shape && ours.rank() >= 1, ShapeError, "[logit_stats] shapes differ: ours ",
                ours.shape, ", reference ", theirs.shape);
  MAXTEXT_CHECK(k >= 1, ArgumentError, "[logit_stats] top-k needs k >= 1, found ", k);
  LogitStats s;
  const std::int64_t V = ours.shape.back();
  s.k = static_cast<int>(std::min<std::int64_t>(k, V));
  s.position_shape.assign(ours.shape.begin(), ours.shape.end() - 1);
  const std::int64_t n = V == 0 ? 0 : ours.numel() / V;
  std::vector<double> a(static_cast<std::size_t>(V)), e(static_cast<std::size_t>(V));
  double kl_sum = 0, ov_sum = 0;
  s.overlap_min = s.k;
  for (std::int64_t p = 0; p < n; ++p) {
    for (std::int64_t v = 0; v < V; ++v) {
      a[static_cast<std::size_t>(v)] = ours.element(p * V + v);
      e[static_cast<std::size_t>(v)] = theirs.element(p * V + v);
    }
    const auto lq = detail::log_softmax(a), lp = detail::log_softmax(e);
    double kl = 0;
    for (std::size_t v = 0; v < lp.size(); ++v) {
      const double pv = std::exp(lp[v]);
      if (pv > 0) kl += pv * (lp[v] - lq[v]);
    }
    if (!std::isnan(kl)) kl = std::max(kl, 0.0);  // rounding can leave a tiny negative for identical distributions
    s.kl.push_back(kl);
    kl_sum += kl;
    if (kl > s.kl_max || p == 0 || (std::isnan(kl) && !std::isnan(s.kl_max))) {  // a NaN position is the worst
      s.kl_max = kl;
      s.kl_argmax = p;
    }
    const auto ta = detail::top_k_ids(a, s.k), te = detail::top_k_ids(e, s.k);
    const std::set<std::int64_t> se(te.begin(), te.end());
    int ov = 0;
    for (auto id : ta) ov += static_cast<int>(se.count(id));
    s.overlap.push_back(ov);
    ov_sum += ov;
    if (ov < s.overlap_min) {
      s.overlap_min = ov;
      s.overlap_argmin = p;
    }
    const bool t1 = !ta.empty() && !te.empty() && ta[0] == te[0];
    s.top1.push_back(t1);
    s.top1_agree += t1 ? 1 : 0;
  }
  if (n > 0) {
    s.kl_mean = kl_sum / static_cast<double>(n);
    s.overlap_mean = ov_sum / static_cast<double>(n);
  }
  return s;
}

struct CheckOptions {
  Tolerance tol{1e-4, 1e-5};           ///< |ours - ref| <= atol + rtol * |ref| per element
  double scaled_tol = 0;               ///< > 0: instead, max |ours - ref| <= scaled_tol * max(1, max |ref|) per tensor
  double max_kl_div = -1;              ///< >= 0: logits pass iff KL < max_kl_div at every position (elementwise ignored)
  int top_k = 10;
  std::set<std::string> logits_names{"logits"};  ///< our names that hold logits
};

/// One reference tensor and its comparison.
struct CheckRow {
  std::string theirs, ours;
  std::vector<std::int64_t> shape;  ///< compared shape
  std::string note;
  bool comparable = false;  ///< shapes lined up
  CompareReport report;
  std::optional<LogitStats> logits;
  bool pass = false;
};

struct CheckResult {
  std::vector<CheckRow> rows;             ///< forward order (the order ours were produced), then reference order
  std::vector<std::string> not_produced;  ///< reference names (-> ours) this run did not capture
  std::vector<std::string> ignored;       ///< reference names the map ignores
  std::int64_t first_failure = -1;        ///< index into rows, or -1
  std::int64_t failures = 0;
  bool pass() const { return failures == 0 && !rows.empty(); }
};

/// The names to request from a Capture for this reference and map.
inline std::vector<std::string> wanted_names(const io::TensorMap& reference, const NameMap& map) {
  std::set<std::string> s;
  for (const auto& [theirs, t] : reference.tensors) {
    const std::string o = map.ours(theirs);
    if (!o.empty()) s.insert(o);
  }
  return {s.begin(), s.end()};
}

/// Compare every reference tensor (through `map`) with the captured one of the same name.
inline CheckResult check_against_reference(const layers::Capture& captured, const io::TensorMap& reference,
                                           const NameMap& map, const CheckOptions& opt = {}) {
  CheckResult res;
  std::map<std::string, std::size_t> rank;
  for (std::size_t i = 0; i < captured.order().size(); ++i) rank.emplace(captured.order()[i], i);
  std::vector<std::pair<std::size_t, CheckRow>> rows;
  std::size_t seq = 0;
  for (const auto& [theirs, ref] : reference.tensors) {
    ++seq;
    const std::string ours = map.ours(theirs);
    if (ours.empty()) {
      res.ignored.push_back(theirs);
      continue;
    }
    if (!captured.has(ours)) {
      res.not_produced.push_back(theirs == ours ? theirs : theirs + " -> " + ours);
      continue;
    }
    CheckRow row;
    row.theirs = theirs;
    row.ours = ours;
    const bool is_logits = opt.logits_names.count(ours) != 0;
    const Alignment al = align(captured.at(ours), ref, is_logits);
    row.note = al.note;
    row.comparable = al.ok;
    row.shape = al.ours.shape;
    if (al.ok) {
      MAXTEXT_CHECK(dtype_block(ref.dtype) == 1, UnsupportedError, "[compare] reference '", theirs, "' is ",
                    dtype_name(ref.dtype), ": quantised references are not supported");
      row.report = opt.scaled_tol > 0 ? compare_scaled(al.ours, al.theirs, opt.scaled_tol) : compare(al.ours, al.theirs, opt.tol);
      row.pass = row.report.ok();
      if (is_logits && al.ours.rank() >= 1 && al.ours.shape.back() > 0) {
        row.logits = logit_stats(al.ours, al.theirs, opt.top_k);
        if (opt.max_kl_div >= 0) {
          bool ok = true;
          for (double kl : row.logits->kl) ok = ok && kl < opt.max_kl_div;  // NaN fails
          row.pass = ok;
        }
      }
    }
    const auto it = rank.find(ours);
    rows.emplace_back(it == rank.end() ? rank.size() + seq : it->second, std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [k, r] : rows) {
    if (!r.pass) {
      ++res.failures;
      if (res.first_failure < 0) res.first_failure = static_cast<std::int64_t>(res.rows.size());
    }
    res.rows.push_back(std::move(r));
  }
  return res;
}

namespace detail {
inline std::string fmt_g(double v, int prec = 3) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*e", prec - 1, v);
  return b;
}
inline std::string fmt_v(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.7g", v);
  return b;
}
inline std::string pad(std::string s, std::size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}
}  // namespace detail

/// The report `maxtext compare` prints: one line per tensor in forward order (name, shape, max abs error, max rel
/// error, worst element: index, ours vs reference, result), the first failure marked, logit measures under the logits,
/// then what was not compared and a summary line.
inline std::string format_report(const CheckResult& r, const CheckOptions& opt) {
  using detail::pad;
  std::ostringstream os;
  std::vector<std::string> names, shapes;
  std::size_t wn = 4, ws = 5;
  for (const auto& row : r.rows) {
    names.push_back(row.theirs == row.ours ? row.ours : row.theirs + " -> " + row.ours);
    shapes.push_back(str(row.shape));
    wn = std::max(wn, names.back().size());
    ws = std::max(ws, shapes.back().size());
  }
  os << "criterion: ";
  if (opt.scaled_tol > 0) {
    os << "max|ours - ref| <= " << opt.scaled_tol << " * max(1, max|ref|) per tensor";
  } else {
    os << "|ours - ref| <= atol + rtol*|ref| per element (rtol " << opt.tol.rtol << ", atol " << opt.tol.atol << ")";
  }
  if (opt.max_kl_div >= 0) os << "; logits: KL < " << opt.max_kl_div << " at every position";
  os << "\n";
  os << pad("#", 4) << pad("name", wn + 2) << pad("shape", ws + 2) << pad("max_abs", 11) << pad("max_rel", 11)
     << pad("worst: index ours vs reference", 46) << "result\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    os << pad(std::to_string(i + 1), 4) << pad(names[i], wn + 2) << pad(shapes[i], ws + 2);
    if (!row.comparable) {
      os << pad("-", 11) << pad("-", 11) << pad(row.note, 46) << "FAIL";
    } else {
      const auto& rep = row.report;
      std::string worst = "-";
      if (rep.worst >= 0) worst = str(rep.unravel(rep.worst)) + " " + detail::fmt_v(rep.worst_actual) + " vs " + detail::fmt_v(rep.worst_expected);
      os << pad(detail::fmt_g(rep.max_abs), 11) << pad(detail::fmt_g(rep.max_rel), 11) << pad(worst, 46)
         << (row.pass ? "ok" : "FAIL");
      if (!row.pass && !(row.logits && opt.max_kl_div >= 0)) os << " (" << rep.outside << "/" << rep.count << " outside)";
    }
    if (static_cast<std::int64_t>(i) == r.first_failure) os << "   <-- first divergence";
    os << "\n";
    if (row.comparable && !row.note.empty()) os << "    note: " << row.note << "\n";
    if (row.logits) {
      const auto& L = *row.logits;
      os << "    KL(reference || ours) per position: max " << detail::fmt_g(L.kl_max) << " at " << str(L.unravel(L.kl_argmax))
         << ", mean " << detail::fmt_g(L.kl_mean);
      if (opt.max_kl_div >= 0) os << " (limit " << opt.max_kl_div << ": " << (row.pass ? "ok" : "FAIL") << ")";
      os << "\n";
      os << "    top-" << L.k << " overlap per position: mean " << detail::fmt_v(L.overlap_mean) << "/" << L.k << ", min "
         << L.overlap_min << "/" << L.k << " at " << str(L.unravel(L.overlap_argmin)) << "; top-1 agrees at " << L.top1_agree
         << "/" << L.overlap.size() << " positions\n";
      os << "    top-" << L.k << " overlap by position:";
      const std::size_t show = std::min<std::size_t>(L.overlap.size(), 64);
      for (std::size_t p = 0; p < show; ++p) os << " " << L.overlap[p];
      if (show < L.overlap.size()) os << " ... (" << L.overlap.size() - show << " more)";
      os << "\n";
    }
  }
  if (!r.not_produced.empty()) {
    os << "not produced by this run (" << r.not_produced.size() << "), not compared:";
    for (const auto& n : r.not_produced) os << " " << n;
    os << "\n";
  }
  if (!r.ignored.empty()) os << "ignored by the name map: " << r.ignored.size() << "\n";
  os << "compared " << r.rows.size() << " tensors: " << r.rows.size() - static_cast<std::size_t>(r.failures) << " passed, "
     << r.failures << " failed";
  if (r.first_failure >= 0) os << "; first divergence: " << r.rows[static_cast<std::size_t>(r.first_failure)].ours;
  if (r.rows.empty()) os << " (no reference name matched a captured activation: check the names or pass --map)";
  os << "\n";
  return os.str();
}

}  // namespace maxtext::testing
