#include "plan/deep_halo_geometry.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <string>

namespace halox::detail {

namespace {
std::string str(index_t v) { return std::to_string(v); }
} // namespace

std::vector<dim_options> deep_halo_dims(std::vector<index_t> const& shape,
                                        std::vector<int> const& radius, int depth,
                                        std::vector<dim_options> options) {
  auto const nd = static_cast<int>(shape.size());
  HALOX_REQUIRE(depth >= 1, errc::invalid_argument,
                "deep halo depth " + str(depth) +
                    " is invalid: the depth (stencil steps per halo exchange) must be at least 1; "
                    "use 1 for an exchange before every step");
  HALOX_REQUIRE(static_cast<int>(radius.size()) == nd, errc::invalid_argument,
                "stencil radius has " + str(static_cast<index_t>(radius.size())) +
                    " entries for a tensor of rank " + str(nd) +
                    "; give one radius per dimension (0 where the stencil does not reach)");
  HALOX_REQUIRE(options.empty() || static_cast<int>(options.size()) == nd, errc::invalid_argument,
                str(static_cast<index_t>(options.size())) + " dim_options for a tensor of rank " +
                    str(nd) + "; give one per dimension or none");
  options.resize(static_cast<std::size_t>(nd));
  for (int d = 0; d < nd; ++d) {
    auto& o = options[d];
    HALOX_REQUIRE(radius[d] >= 0, errc::invalid_argument,
                  "stencil radius " + str(radius[d]) + " on dim " + str(d) +
                      " must not be negative; use 0 for a dimension the stencil does not reach "
                      "across");
    HALOX_REQUIRE(o.halo_lo == 0 && o.halo_hi == 0, errc::invalid_argument,
                  "dim_options on dim " + str(d) + " set halo widths (" + str(o.halo_lo) + ", " +
                      str(o.halo_hi) +
                      "); a deep halo derives them from depth x radius: leave halo_lo and halo_hi "
                      "at 0");
    // Both factors fit in int, so their product fits in index_t; it must fit in int (the type
    // of halo widths).
    index_t const w = index_t{depth} * radius[d];
    HALOX_REQUIRE(w <= INT_MAX, errc::invalid_argument,
                  "deep halo depth " + str(depth) + " x radius " + str(radius[d]) + " on dim " +
                      str(d) + " = halo width " + str(w) + " exceeds the largest halo width " +
                      str(INT_MAX) + "; use a depth of at most " + str(INT_MAX / radius[d]));
    if (!o.periodic) {
      HALOX_REQUIRE(w <= shape[d] || shape[d] <= 0, errc::invalid_argument,
                    "deep halo depth " + str(depth) + " x radius " + str(radius[d]) + " on dim " +
                        str(d) + " = halo width " + str(w) + " exceeds the extent " +
                        str(shape[d]) + " of that non-periodic dimension; use a depth of at most " +
                        str(std::max<index_t>(1, shape[d] / radius[d])) +
                        " or make the dimension periodic");
    }
    o.halo_lo = o.halo_hi = static_cast<int>(w);
  }
  return options;
}

box deep_halo_region(distribution const& dist, int rank, std::vector<int> const& radius, int depth,
                     int step) {
  int const nd = dist.ndim();
  HALOX_REQUIRE(step >= 0 && step <= depth, errc::invalid_argument,
                "deep halo step " + str(step) + " is out of range: steps run from 1 to the depth " +
                    str(depth) + " (0: the region valid right after the exchange)");
  HALOX_REQUIRE(static_cast<int>(radius.size()) == nd, errc::invalid_argument,
                "stencil radius has " + str(static_cast<index_t>(radius.size())) +
                    " entries for a tensor of rank " + str(nd) + "; give one radius per dimension");
  box b = dist.owned_box(rank);
  if (b.empty()) return b; // a rank owning nothing computes nothing, at every step
  for (int d = 0; d < nd; ++d) {
    auto const& o = dist.options(d);
    index_t const grow = index_t{depth - step} * radius[d];
    HALOX_REQUIRE(index_t{depth} * radius[d] <= std::min(o.halo_lo, o.halo_hi),
                  errc::invalid_argument,
                  "halo widths (" + str(o.halo_lo) + ", " + str(o.halo_hi) + ") on dim " + str(d) +
                      " are narrower than depth " + str(depth) + " x radius " + str(radius[d]) +
                      "; build the distribution from deep_halo_dims");
    b.lo[d] -= grow;
    b.hi[d] += grow;
    if (!o.periodic) {
      b.lo[d] = std::max<index_t>(b.lo[d], 0);
      b.hi[d] = std::min(b.hi[d], dist.shape()[d]);
    }
  }
  return b;
}

index_t deep_halo_cells(distribution const& dist, int rank, std::vector<int> const& radius,
                        int depth) {
  index_t cells = 0;
  // A stencil that reaches nowhere allows any depth (no halo at all): every step computes the
  // owned block, and a loop over a billion steps would be a hang.
  if (std::all_of(radius.begin(), radius.end(), [](int r) { return r == 0; })) {
    index_t const owned = dist.owned_box(rank).volume();
    return __builtin_mul_overflow(owned, index_t{depth}, &cells) ? INT64_MAX : cells;
  }
  // Otherwise the depth is at most the halo width, which the distribution bounded by the extent
  // (non-periodic) or which the local buffer holds (periodic): the loop costs no more than
  // allocating the buffer.
  for (int s = 1; s <= depth; ++s) {
    // Saturates rather than wraps: a count past 2^63 - 1 is not a real buffer anyway.
    if (__builtin_add_overflow(cells, deep_halo_region(dist, rank, radius, depth, s).volume(),
                               &cells))
      return INT64_MAX;
  }
  return cells;
}

} // namespace halox::detail
