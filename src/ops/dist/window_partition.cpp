// The public per-dimension split of a window operator (include/halox/ops/window_partition.hpp),
// on the geometry the distributed operators use (dist_geometry.hpp: output_starts, halo_for).
#include "ops/dist/dist_geometry.hpp"

#include <halox/error.hpp>
#include <halox/ops/window.hpp>
#include <halox/ops/window_partition.hpp>

#include <string>

namespace halox::ops {

namespace {

constexpr auto bad = errc::invalid_argument;

std::string list(std::vector<index_t> const& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// `starts` are `parts + 1` non-decreasing positions from 0 to `extent`.
void check_starts(char const* what, std::vector<index_t> const& starts, index_t extent) {
  bool ok = starts.size() >= 2 && starts.front() == 0 && starts.back() == extent;
  for (std::size_t i = 1; ok && i < starts.size(); ++i) ok = starts[i - 1] <= starts[i];
  HALOX_REQUIRE(ok, bad,
                std::string("window_partition: ") + what + " " + list(starts) +
                    " are not part starts of extent " + std::to_string(extent) +
                    "; pass parts + 1 non-decreasing positions from 0 to the extent");
}

} // namespace

window_partition_1d window_partition(window_1d const& w, std::vector<index_t> const& in_starts,
                                     std::vector<index_t> const& out_starts, halo_reach reach) {
  HALOX_REQUIRE(w.in_extent >= 1, bad,
                "window_partition: input extent " + std::to_string(w.in_extent) + " must be >= 1");
  // Checks every parameter and names the bad one.
  index_t const out =
      conv_output_extent(w.in_extent, w.kernel, w.stride, w.pad_lo, w.pad_hi, w.dilation);
  detail::win1 const g{w.in_extent, out, w.kernel, w.stride, w.pad_lo, w.pad_hi, w.dilation};
  check_starts("input starts", in_starts, w.in_extent);
  window_partition_1d r;
  r.out_extent = out;
  if (out_starts.empty()) {
    r.out_starts = detail::output_starts(g, in_starts);
  } else {
    HALOX_REQUIRE(out_starts.size() == in_starts.size(), bad,
                  "window_partition: " + std::to_string(out_starts.size()) + " output starts for " +
                      std::to_string(in_starts.size()) +
                      " input starts; pass one per part and the extent for both");
    check_starts("output starts", out_starts, out);
    r.out_starts = out_starts;
  }
  auto const owned = detail::ranges_of(in_starts);
  auto const outs = detail::ranges_of(r.out_starts);
  std::vector<detail::range1> need;
  for (auto const& o : outs) {
    detail::range1 n{};
    if (reach == halo_reach::footprint) {
      n = detail::input_footprint(g, o);
    } else if (!o.empty()) {
      n = {o.lo * g.s - g.pl, (o.hi - 1) * g.s - g.pl + g.span() + 1};
    }
    need.push_back(n);
    r.need_lo.push_back(n.lo);
    r.need_hi.push_back(n.hi);
  }
  detail::halo1 const h = detail::halo_for(owned, need);
  r.halo_lo = h.lo;
  r.halo_hi = h.hi;
  return r;
}

} // namespace halox::ops
