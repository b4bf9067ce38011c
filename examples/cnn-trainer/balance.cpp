#include "balance.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace trainer {
namespace {

[[noreturn]] void bad(std::string const& what) {
  throw halox::error(halox::errc::invalid_argument, "halox-train: " + what);
}

} // namespace

void split_by_weight(halox::index_t batch, std::vector<double> const& weight,
                     std::vector<halox::index_t>& n) {
  auto const P = static_cast<halox::index_t>(weight.size());
  n.clear();
  if (P == 0 || batch < P) return;
  n.assign(weight.size(), 0);
  // Ranks whose share would fall below one sample get one; the others share the rest in
  // proportion to their weights (until no share is below one).
  halox::index_t rest = batch;
  double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  for (bool pinned = true; pinned;) {
    pinned = false;
    for (std::size_t r = 0; r < weight.size(); ++r)
      if (n[r] == 0 && static_cast<double>(rest) * weight[r] / total < 1) {
        n[r] = 1;
        --rest;
        total -= weight[r];
        pinned = true;
      }
  }
  thread_local std::vector<std::pair<double, std::size_t>> frac; // reused: no allocation per step
  frac.clear();
  halox::index_t given = 0;
  for (std::size_t r = 0; r < weight.size(); ++r) {
    if (n[r] != 0) continue; // pinned to one
    double const exact = static_cast<double>(rest) * weight[r] / total;
    auto const whole = static_cast<halox::index_t>(std::floor(exact));
    n[r] = whole;
    given += whole;
    frac.emplace_back(exact - static_cast<double>(whole), r);
  }
  // The samples left by rounding down: largest remainders first, ties to the lower rank.
  std::sort(frac.begin(), frac.end(), [](auto const& a, auto const& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (std::size_t i = 0; given < rest; ++i, ++given) ++n[frac[i % frac.size()].second];
}

void balancer::split(halox::index_t batch, std::vector<halox::index_t>& out) const {
  split_by_weight(batch, weight_, out);
}

std::vector<halox::index_t> weighted_blocks(halox::process_grid const& grid, int d,
                                            halox::index_t extent,
                                            std::vector<double> const& weight) {
  if (weight.empty()) return {};
  HALOX_REQUIRE(static_cast<int>(weight.size()) == grid.size(), halox::errc::internal,
                "halox-train: " + std::to_string(weight.size()) + " rank weights for a grid of " +
                    std::to_string(grid.size()) + " ranks");
  std::vector<double> part(static_cast<std::size_t>(grid.dims()[static_cast<std::size_t>(d)]), 0);
  for (int r = 0; r < grid.size(); ++r)
    part[static_cast<std::size_t>(grid.coords(r)[static_cast<std::size_t>(d)])] +=
        weight[static_cast<std::size_t>(r)];
  std::vector<halox::index_t> sizes;
  split_by_weight(extent, part, sizes);
  return sizes;
}

balancer::balancer(std::string const& spec, int ranks) : ranks_(ranks) {
  if (spec == "off") return;
  if (spec == "auto") {
    measured_ = ranks > 1;
    return;
  }
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    double const w = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(w > 0) || !std::isfinite(w))
      bad("--balance " + spec + ": '" + item +
          "' is not a positive number; pass off, auto, or one positive weight per rank "
          "(for example 1,1.5)");
    weight_.push_back(w);
  }
  if (static_cast<int>(weight_.size()) != ranks)
    bad("--balance " + spec + " names " + std::to_string(weight_.size()) + " weights for " +
        std::to_string(ranks) + " ranks; pass one weight per rank, or auto");
}

namespace {

// The median of the `n` values at v[0], v[stride], ... (reorders a copy in `scratch`).
double median(double const* v, std::size_t n, std::size_t stride, std::vector<double>& scratch) {
  scratch.resize(n);
  for (std::size_t i = 0; i < n; ++i) scratch[i] = v[i * stride];
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n / 2),
                   scratch.end());
  return scratch[n / 2];
}

} // namespace

bool balancer::step(std::vector<double> const& busy, std::vector<double> const& split_busy,
                    std::vector<halox::index_t> const& samples) {
  if (!measured_) return false;
  if (skip_ > 0) {
    --skip_;
    return false;
  }
  auto const P = static_cast<std::size_t>(ranks_);
  if (busy_.empty()) // once: the longest window's steps
    busy_.assign(P * static_cast<std::size_t>(max_window), 0.0), split_ = busy_;
  auto const at = static_cast<std::size_t>(seen_) * P;
  halox::index_t batch = 0;
  for (std::size_t r = 0; r < P; ++r) {
    busy_[at + r] = busy[r] - split_busy[r]; // the part that does not follow the samples
    split_[at + r] = split_busy[r];
    batch += samples[r];
  }
  elapsed_ += busy[0];
  ++seen_;
  if (seen_ < max_window && (seen_ < window || elapsed_ < window_s)) return false;
  auto const W = static_cast<std::size_t>(seen_);
  seen_ = 0;
  elapsed_ = 0;
  // Per step (medians over the window: one preempted step does not move samples), rank r is
  // busy fixed[r] + n / speed[r] seconds with n samples. The split that ends every rank's busy
  // time together at T: n[r] = (T - fixed[r]) * speed[r], summing to the batch (a rank that
  // would get less than one sample is weighed as one).
  fixed_.assign(P, 0.0);
  speed_.assign(P, 0.0);
  bool measurable = true;
  double sum_speed = 0, sum_fixed_speed = 0, slowest_now = 0;
  for (std::size_t r = 0; r < P && measurable; ++r) {
    fixed_[r] = std::max(0.0, median(&busy_[r], W, P, scratch_));
    double const t = median(&split_[r], W, P, scratch_);
    measurable = t > 0 && samples[r] > 0;
    speed_[r] = measurable ? static_cast<double>(samples[r]) / t : 0.0;
    sum_speed += speed_[r];
    sum_fixed_speed += fixed_[r] * speed_[r];
    slowest_now = std::max(slowest_now, fixed_[r] + t);
  }
  next_.clear();
  double slowest_then = 0;
  if (measurable) {
    double const T = (static_cast<double>(batch) + sum_fixed_speed) / sum_speed;
    want_.assign(P, 0.0);
    for (std::size_t r = 0; r < P; ++r) want_[r] = std::max(1.0, (T - fixed_[r]) * speed_[r]);
    split_by_weight(batch, want_, next_);
    for (std::size_t r = 0; r < P && !next_.empty(); ++r)
      slowest_then = std::max(slowest_then, fixed_[r] + static_cast<double>(next_[r]) / speed_[r]);
  }
  // What this split measured, for a later proposal to come back to it.
  ++windows_;
  tried* mine = nullptr;
  for (auto& t : tried_)
    if (t.split == samples) mine = &t;
  if (!mine) mine = &tried_.emplace_back(tried{samples, 0, 0});
  mine->slowest = slowest_now;
  mine->window = windows_;
  bool better = !next_.empty() && slowest_then < (1 - min_gain) * slowest_now;
  // A split measured lately is judged by what it measured, not by the prediction: where the
  // time does not quite follow the share (a spatial split's halos, an uneven layer), the
  // predictions alone would send samples back and forth between two splits.
  for (auto const& t : tried_)
    if (better && t.split == next_ && windows_ - t.window <= memory)
      better = t.slowest < (1 - min_gain) * slowest_now;
  // Taken when two windows in a row ask for the same split: a core that was slow for a moment
  // (another process, the launcher) moves nothing.
  bool const change = better && next_ == proposed_;
  if (better) // assign / clear keep the storage: a step allocates nothing here
    proposed_.assign(next_.begin(), next_.end());
  else
    proposed_.clear();
  if (!change) return false;
  std::ostringstream os;
  os.precision(3);
  os << "balance: samples per rank";
  for (auto n : next_) os << ' ' << n;
  os << " (per step, busy";
  for (std::size_t r = 0; r < P; ++r) os << ' ' << 1e3 * (fixed_[r] + samples[r] / speed_[r]);
  os << " ms on";
  for (std::size_t r = 0; r < P; ++r) os << ' ' << samples[r];
  os << " samples, of which";
  for (std::size_t r = 0; r < P; ++r) os << ' ' << 1e3 * fixed_[r];
  os << " ms do not follow the samples; the slowest rank's should fall from " << 1e3 * slowest_now
     << " to " << 1e3 * slowest_then << " ms)";
  reason_ = os.str();
  weight_ = want_;
  skip_ = warm_up;
  proposed_.clear();
  return true;
}

} // namespace trainer
