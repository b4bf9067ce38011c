#include "tune/decision.hpp"

#include <algorithm>
#include <cstdio>

namespace halox::detail {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  std::size_t const n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int pick_fastest(std::vector<candidate_result> const& c) noexcept {
  int best = -1;
  for (int i = 0; i < static_cast<int>(c.size()); ++i) {
    if (c[i].status != candidate_status::measured) continue;
    if (best < 0 || c[i].median < c[best].median ||
        (c[i].median == c[best].median && c[i].b < c[best].b))
      best = i;
  }
  return best;
}

bool budget_used(double elapsed, double budget, int measured_so_far) noexcept {
  return measured_so_far > 0 && elapsed >= budget;
}

std::vector<backend> trial_order(std::vector<backend> available, backend preferred) {
  auto const it = std::find(available.begin(), available.end(), preferred);
  if (it != available.end()) std::rotate(available.begin(), it, it + 1);
  return available;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  else if (s < 1.0)
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

std::string format_candidates(std::vector<candidate_result> c, backend chosen) {
  std::sort(c.begin(), c.end(), [](auto const& a, auto const& b) { return a.b < b.b; });
  std::string out;
  for (auto const& r : c) {
    if (!out.empty()) out += ", ";
    out += to_string(r.b);
    switch (r.status) {
    case candidate_status::measured:
      out += " " + format_seconds(r.median);
      if (r.b == chosen) out += " *";
      break;
    case candidate_status::unavailable: out += " unavailable"; break;
    case candidate_status::skipped: out += " skipped (budget)"; break;
    }
  }
  return out;
}

} // namespace halox::detail
