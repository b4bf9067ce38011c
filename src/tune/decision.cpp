#include "tune/decision.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

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

median_interval median_ci(std::vector<double> v, double confidence) {
  median_interval out;
  if (v.empty()) return out;
  std::sort(v.begin(), v.end());
  int const n = static_cast<int>(v.size());
  out.median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  // Largest j (1-based) with P(B <= j - 1) <= alpha / 2 for B ~ binomial(n, 1/2); the interval
  // [x(j), x(n + 1 - j)] then covers the median with probability >= confidence. Terms in log
  // space: 0.5^n underflows for the sample sizes of a long race.
  double const tail = 0.5 * (1.0 - confidence);
  double cdf = 0.0;
  int j = 0; // 0: no such j, the whole range
  for (int k = 0; k < n; ++k) {
    double const logp =
        std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) - n * std::log(2.0);
    cdf += std::exp(logp);
    if (cdf > tail) break;
    j = k + 1; // P(B <= k) <= tail, so j = k + 1 qualifies
  }
  if (j < 1) j = 1;
  if (j > (n + 1) / 2) j = (n + 1) / 2;
  out.lo = v[j - 1];
  out.hi = v[n - j];
  return out;
}

race_verdict judge_race(std::vector<contestant> const& c, int rounds, double elapsed,
                        race_limits const& lim) {
  race_verdict out;
  int const n = static_cast<int>(c.size());
  std::vector<median_interval> iv(c.size());
  for (int i = 0; i < n; ++i) iv[i] = median_ci(c[i].times, lim.confidence);
  auto const faster = [&](int a, int b) {
    return iv[a].median < iv[b].median || (iv[a].median == iv[b].median && c[a].b < c[b].b);
  };
  for (int i = 0; i < n; ++i)
    if (c[i].active && !c[i].times.empty() && (out.leader < 0 || faster(i, out.leader)))
      out.leader = i;
  if (out.leader < 0) {
    out.stop = true;
    return out;
  }
  std::vector<char> active(c.size(), 0);
  for (int i = 0; i < n; ++i) active[i] = c[i].active && !c[i].times.empty();
  if (rounds >= lim.min_rounds) {
    for (int i = 0; i < n; ++i)
      if (active[i] && i != out.leader && separated(iv[out.leader], iv[i])) {
        out.drop.push_back(i);
        active[i] = 0;
      }
    // Successive halving at min_rounds * 2, * 4, ...: the better half goes on.
    int const k = lim.min_rounds > 0 ? rounds / lim.min_rounds : 0;
    bool const checkpoint =
        lim.min_rounds > 0 && rounds % lim.min_rounds == 0 && k >= 2 && (k & (k - 1)) == 0;
    std::vector<int> left;
    for (int i = 0; i < n; ++i)
      if (active[i]) left.push_back(i);
    if (checkpoint && left.size() > 2) {
      std::sort(left.begin(), left.end(), faster);
      std::size_t const keep = std::max<std::size_t>(2, (left.size() + 1) / 2);
      for (std::size_t i = keep; i < left.size(); ++i) {
        out.drop.push_back(left[i]);
        active[left[i]] = 0;
      }
    }
    std::sort(out.drop.begin(), out.drop.end());
  }
  for (int i = 0; i < n; ++i)
    if (i != out.leader && !c[i].times.empty() && (out.runner_up < 0 || faster(i, out.runner_up)))
      out.runner_up = i;
  out.separated = true;
  for (int i = 0; i < n; ++i)
    if (i != out.leader && !c[i].times.empty() && !separated(iv[out.leader], iv[i]))
      out.separated = false;
  int left = 0;
  bool equivalent = true;
  double const m = iv[out.leader].median;
  for (int i = 0; i < n; ++i) {
    left += active[i];
    if (active[i] &&
        (iv[i].lo < m * (1.0 - lim.equivalence) || iv[i].hi > m * (1.0 + lim.equivalence)))
      equivalent = false;
  }
  out.stop = (rounds >= lim.min_rounds && (left <= 1 || equivalent)) || rounds >= lim.max_rounds ||
             (rounds >= 1 && elapsed >= lim.budget);
  return out;
}

bool recheck_switch(double* winner, int nw, double* runner, int nr, double margin,
                    double* medians) noexcept {
  auto const med = [](double* v, int n) {
    if (n <= 0) return 0.0;
    std::sort(v, v + n);
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  medians[0] = med(winner, nw);
  medians[1] = med(runner, nr);
  if (nw <= 0 || nr <= 0) return false;
  return medians[1] < (1.0 - margin) * medians[0];
}

int second_best(std::vector<candidate_result> const& c, backend chosen) noexcept {
  int best = -1;
  for (int i = 0; i < static_cast<int>(c.size()); ++i) {
    if (c[i].status != candidate_status::measured || c[i].b == chosen) continue;
    if (best < 0 || c[i].median < c[best].median ||
        (c[i].median == c[best].median && c[i].b < c[best].b))
      best = i;
  }
  return best;
}

bool intervals_separated(candidate_result const& winner, candidate_result const& runner) noexcept {
  if (winner.rounds <= 0 || runner.rounds <= 0) return true;
  return winner.hi < runner.lo;
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

std::string format_interval(candidate_result const& r) {
  std::string out = format_seconds(r.median);
  if (r.rounds <= 0) return out;
  char buf[96];
  // The interval in the median's unit.
  double const scale = r.median < 1e-3 ? 1e6 : r.median < 1.0 ? 1e3 : 1.0;
  std::snprintf(buf, sizeof buf, " [%.3g, %.3g] x%d", r.lo * scale, r.hi * scale, r.rounds);
  return out + buf;
}

std::string format_candidates(std::vector<candidate_result> c, backend chosen) {
  std::sort(c.begin(), c.end(), [](auto const& a, auto const& b) { return a.b < b.b; });
  std::string out;
  for (auto const& r : c) {
    if (!out.empty()) out += ", ";
    out += to_string(r.b);
    switch (r.status) {
    case candidate_status::measured:
      out += " " + format_interval(r);
      if (r.b == chosen) out += " *";
      break;
    case candidate_status::unavailable: out += " unavailable"; break;
    case candidate_status::skipped: out += " skipped (budget)"; break;
    }
  }
  return out;
}

} // namespace halox::detail
