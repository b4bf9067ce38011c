#include "ops/dist/dist_geometry.hpp"

#include "ops/kernels/geometry.hpp"

#include <algorithm>
#include <sstream>

namespace halox::ops::detail {

index_t floor_div(index_t a, index_t b) noexcept {
  index_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

index_t ceil_div(index_t a, index_t b) noexcept {
  index_t q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}

namespace {

// The serial geometry pads 1-2 spatial dimensions at the front to three; undo that.
std::vector<win1> split(window3 const& w) {
  std::vector<win1> r(static_cast<std::size_t>(w.nsp));
  for (int i = 0; i < w.nsp; ++i) {
    int const j = s3 - w.nsp + i;
    r[i] = win1{w.in[j], w.out[j], w.k[j], w.s[j], w.pl[j], w.ph[j], w.d[j]};
  }
  return r;
}

range1 canonical(range1 r) noexcept { return r.empty() ? range1{} : r; }

// First i in [lo, hi) with pred(i) true, for a predicate false...false true...true (hi if none).
template <class P> index_t first_true(index_t lo, index_t hi, P&& pred) {
  while (lo < hi) {
    index_t const mid = lo + (hi - lo) / 2;
    if (pred(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

} // namespace

std::vector<win1> conv_windows(std::vector<index_t> const& in_extent,
                               std::vector<index_t> const& kernel, conv_params const& p) {
  return split(conv_window("dist_conv", in_extent, kernel, p));
}

std::vector<win1> pool_windows(std::vector<index_t> const& in_extent, pool_params const& p) {
  return split(pool_window("dist_pool", in_extent, p));
}

range1 input_footprint(win1 const& w, range1 out) {
  if (out.empty()) return {};
  range1 r{out.lo * w.s - w.pl, (out.hi - 1) * w.s - w.pl + w.span() + 1};
  return canonical(intersect(r, {0, w.in}));
}

range1 output_footprint(win1 const& w, range1 in) {
  if (in.empty()) return {};
  range1 r{ceil_div(in.lo + w.pl - w.span(), w.s), floor_div(in.hi - 1 + w.pl, w.s) + 1};
  return canonical(intersect(r, {0, w.out}));
}

index_t anchor(win1 const& w, index_t o) noexcept {
  return std::clamp(o * w.s - w.pl + w.span() / 2, index_t(0), w.in - 1);
}

std::vector<index_t> output_starts(win1 const& w, std::vector<index_t> const& in_starts) {
  std::vector<index_t> r(in_starts.size());
  for (std::size_t p = 0; p < in_starts.size(); ++p)
    r[p] = first_true(0, w.out, [&](index_t o) { return anchor(w, o) >= in_starts[p]; });
  // The last start is the input extent, which no anchor reaches: every output is assigned.
  return r;
}

halo1 halo_for(std::vector<range1> const& owned, std::vector<range1> const& need) {
  halo1 h;
  for (std::size_t p = 0; p < owned.size(); ++p) {
    if (owned[p].empty() || need[p].empty()) continue;
    h.lo = std::max(h.lo, owned[p].lo - need[p].lo);
    h.hi = std::max(h.hi, need[p].hi - owned[p].hi);
  }
  return h;
}

range1 forward_interior(win1 const& w, range1 out, range1 in) {
  if (out.empty() || in.empty()) return {out.lo, out.lo};
  // Output o reads [o*s - pl, o*s - pl + span] before clipping; the clipped part stays inside
  // `in` when `in` starts at 0 (or ends at the extent) whatever o reads beyond it.
  auto low_ok = [&](index_t o) { return in.lo == 0 || o * w.s - w.pl >= in.lo; };
  auto high_ok = [&](index_t o) { return in.hi == w.in || o * w.s - w.pl + w.span() < in.hi; };
  index_t const lo = first_true(out.lo, out.hi, low_ok);
  index_t const hi = first_true(out.lo, out.hi, [&](index_t o) { return !high_ok(o); });
  return {lo, std::max(lo, hi)};
}

range1 backward_interior(win1 const& w, range1 in, range1 out) {
  if (out.empty() || in.empty()) return {in.lo, in.lo};
  // Input i is read by the outputs [ceil((i + pl - span) / s), floor((i + pl) / s)] before
  // clipping to [0, out); both ends are non-decreasing in i.
  auto low_ok = [&](index_t i) {
    return out.lo == 0 || ceil_div(i + w.pl - w.span(), w.s) >= out.lo;
  };
  auto high_ok = [&](index_t i) { return out.hi == w.out || floor_div(i + w.pl, w.s) < out.hi; };
  index_t const lo = first_true(in.lo, in.hi, low_ok);
  index_t const hi = first_true(in.lo, in.hi, [&](index_t i) { return !high_ok(i); });
  return {lo, std::max(lo, hi)};
}

std::vector<range1> ranges_of(std::vector<index_t> const& starts) {
  std::vector<range1> r;
  for (std::size_t p = 0; p + 1 < starts.size(); ++p) r.push_back({starts[p], starts[p + 1]});
  return r;
}

box make_box(std::vector<range1> const& ranges) {
  box b;
  b.nd = static_cast<int>(ranges.size());
  bool empty = false;
  for (int d = 0; d < b.nd; ++d) {
    b.lo[d] = ranges[d].lo;
    b.hi[d] = ranges[d].hi;
    empty = empty || ranges[d].empty();
  }
  if (empty)
    for (int d = 0; d < b.nd; ++d) b.lo[d] = b.hi[d] = 0;
  return b;
}

std::vector<box> boundary_boxes(box const& outer, box const& inner) {
  if (outer.empty()) return {};
  if (inner.empty()) return {outer};
  std::vector<box> r;
  box core = outer; // shrinks to `inner` one dimension at a time
  for (int d = 0; d < outer.nd; ++d) {
    box below = core, above = core;
    below.hi[d] = inner.lo[d];
    above.lo[d] = inner.hi[d];
    if (!below.empty()) r.push_back(below);
    if (!above.empty()) r.push_back(above);
    core.lo[d] = inner.lo[d];
    core.hi[d] = inner.hi[d];
  }
  return r;
}

std::string box_str(box const& b) {
  std::ostringstream os;
  for (int d = 0; d < b.nd; ++d) os << (d ? " x " : "") << "[" << b.lo[d] << ", " << b.hi[d] << ")";
  return os.str();
}

} // namespace halox::ops::detail
