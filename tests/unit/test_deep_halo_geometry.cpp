// Deep-halo geometry (src/plan/deep_halo_geometry): the halo widths and the per-step compute
// regions, checked by hand on small cases and, on random distributions, against a cell-by-cell
// simulation of which cells a star stencil can compute from what the exchange delivered.
#include "plan/deep_halo_geometry.hpp"

#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <string>
#include <vector>

namespace {

using halox::box;
using halox::dim_options;
using halox::distribution;
using halox::dtype;
using halox::errc;
using halox::index_t;
using halox::detail::deep_halo_cells;
using halox::detail::deep_halo_dims;
using halox::detail::deep_halo_region;
using halox::detail::to_local;

void expect_invalid(std::vector<index_t> const& shape, std::vector<int> const& radius, int depth,
                    std::vector<dim_options> const& opts, std::string const& needle) {
  try {
    (void)deep_halo_dims(shape, radius, depth, opts);
    ADD_FAILURE() << "no error; expected \"" << needle << "\"";
  } catch (halox::error const& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(e.message().find(needle), std::string::npos)
        << "expected \"" << needle << "\" in: " << e.message();
  }
}

box box1(index_t lo, index_t hi) {
  box b;
  b.nd = 1;
  b.lo[0] = lo;
  b.hi[0] = hi;
  return b;
}

// A 1-D distribution of `sizes` with a deep halo of depth x radius.
distribution dist1(std::vector<index_t> sizes, int radius, int depth, bool periodic) {
  index_t n = 0;
  for (auto s : sizes) n += s;
  dim_options o;
  o.periodic = periodic;
  o.sizes = sizes;
  auto const parts = static_cast<int>(sizes.size());
  return distribution({n}, dtype::float64, {parts}, deep_halo_dims({n}, {radius}, depth, {o}));
}

} // namespace

TEST(DeepHaloGeometry, HaloWidthsAreDepthTimesRadius) {
  std::vector<dim_options> in(3);
  in[1].periodic = true;
  in[2].sizes = {3, 4};
  auto const out = deep_halo_dims({8, 9, 7}, {1, 2, 0}, 3, in);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].halo_lo, 3);
  EXPECT_EQ(out[0].halo_hi, 3);
  EXPECT_EQ(out[1].halo_lo, 6);
  EXPECT_EQ(out[1].halo_hi, 6);
  EXPECT_TRUE(out[1].periodic);
  EXPECT_EQ(out[2].halo_lo, 0);
  EXPECT_EQ(out[2].sizes, (std::vector<index_t>{3, 4}));
  // Empty options: one per dimension, not periodic.
  auto const plain = deep_halo_dims({8, 8}, {1, 1}, 2, {});
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[1].halo_hi, 2);
  EXPECT_FALSE(plain[1].periodic);
}

TEST(DeepHaloGeometry, BadInputNamesValueAndFix) {
  expect_invalid({8, 8}, {1, 1}, 0, {}, "deep halo depth 0 is invalid");
  expect_invalid({8, 8}, {1, 1}, -3, {}, "must be at least 1");
  expect_invalid({8, 8}, {1, 1, 1}, 2, {}, "stencil radius has 3 entries for a tensor of rank 2");
  expect_invalid({8, 8}, {1, -1}, 2, {}, "stencil radius -1 on dim 1 must not be negative");
  expect_invalid({8, 8}, {1, 1}, 2, std::vector<dim_options>(3),
                 "3 dim_options for a tensor of rank 2");
  expect_invalid({8, 8}, {1, 1}, 2, {dim_options{}, dim_options::halo(1)},
                 "dim_options on dim 1 set halo widths (1, 1)");
  // depth x radius past INT_MAX: the message gives the product and the largest usable depth.
  std::vector<dim_options> per(2);
  per[0].periodic = per[1].periodic = true;
  expect_invalid({8, 8}, {1, 3}, INT_MAX / 2, per,
                 "deep halo depth " + std::to_string(INT_MAX / 2) +
                     " x radius 3 on dim 1 = "
                     "halo width " +
                     std::to_string(index_t{INT_MAX / 2} * 3));
  expect_invalid({8, 8}, {1, 3}, INT_MAX / 2, per,
                 "use a depth of at most " + std::to_string(INT_MAX / 3));
  // Wider than a non-periodic extent (the distribution would reject it); periodic is fine.
  expect_invalid({8, 8}, {2, 1}, 5, {},
                 "halo width 10 exceeds the extent 8 of that non-periodic dimension; use a depth "
                 "of at most 4");
  EXPECT_NO_THROW((void)deep_halo_dims({8, 8}, {2, 1}, 5, per));
}

TEST(DeepHaloGeometry, RegionsShrinkByRadiusPerStep) {
  // Parts [0,4) [4,5) [5,10); radius 1, depth 3, non-periodic.
  auto const d = dist1({4, 1, 5}, 1, 3, false);
  EXPECT_EQ(deep_halo_region(d, 1, {1}, 3, 0), box1(1, 8));
  EXPECT_EQ(deep_halo_region(d, 1, {1}, 3, 1), box1(2, 7));
  EXPECT_EQ(deep_halo_region(d, 1, {1}, 3, 2), box1(3, 6));
  EXPECT_EQ(deep_halo_region(d, 1, {1}, 3, 3), box1(4, 5));
  // The first part does not grow below the domain; its buffer starts at global -3.
  EXPECT_EQ(deep_halo_region(d, 0, {1}, 3, 1), box1(0, 6));
  EXPECT_EQ(to_local(d, 0, deep_halo_region(d, 0, {1}, 3, 1)), box1(3, 9));
  EXPECT_EQ(deep_halo_region(d, 2, {1}, 3, 1), box1(3, 10));
  EXPECT_EQ(to_local(d, 2, deep_halo_region(d, 2, {1}, 3, 3)), box1(3, 8));
  // Cells per cycle: rank 1 computes 5 + 3 + 1 cells for its 3 owned cell-steps.
  EXPECT_EQ(deep_halo_cells(d, 1, {1}, 3), 9);
  // Periodic: the boundary sides grow like interior ones (into the wrapped halo).
  auto const p = dist1({4, 1, 5}, 1, 3, true);
  EXPECT_EQ(deep_halo_region(p, 0, {1}, 3, 1), box1(-2, 6));
  EXPECT_EQ(to_local(p, 0, deep_halo_region(p, 0, {1}, 3, 1)), box1(1, 9));
  EXPECT_EQ(deep_halo_region(p, 2, {1}, 3, 2), box1(4, 11));
}

TEST(DeepHaloGeometry, EmptyRankHasEmptyRegions) {
  auto const d = dist1({4, 0, 6}, 2, 2, false);
  for (int s = 0; s <= 2; ++s) {
    box const b = deep_halo_region(d, 1, {2}, 2, s);
    EXPECT_EQ(b.nd, 1);
    EXPECT_TRUE(b.empty());
    EXPECT_TRUE(to_local(d, 1, b).empty());
  }
  EXPECT_EQ(deep_halo_cells(d, 1, {2}, 2), 0);
  // Its neighbours reach across it: the halo of part 2 (width 4) covers part 0's cells.
  EXPECT_EQ(deep_halo_region(d, 2, {2}, 2, 0), box1(0, 10));
}

TEST(DeepHaloGeometry, StencilWithoutReachAllowsAnyDepth) {
  // No halo at all: every step computes the owned block, counted without a loop over steps.
  auto const dims = deep_halo_dims({10, 6}, {0, 0}, INT_MAX, {});
  EXPECT_EQ(dims[0].halo_lo, 0);
  distribution const d({10, 6}, dtype::float64, {2, 1}, dims);
  EXPECT_EQ(deep_halo_cells(d, 1, {0, 0}, INT_MAX), index_t{30} * INT_MAX);
  EXPECT_EQ(deep_halo_region(d, 1, {0, 0}, INT_MAX, 1), d.owned_box(1));
}

TEST(DeepHaloGeometry, StepOutOfRangeIsAnError) {
  auto const d = dist1({5, 5}, 1, 2, false);
  for (int bad : {-1, 3}) {
    try {
      (void)deep_halo_region(d, 0, {1}, 2, bad);
      ADD_FAILURE() << "step " << bad << " accepted";
    } catch (halox::error const& e) {
      EXPECT_NE(e.message().find("deep halo step " + std::to_string(bad) + " is out of range"),
                std::string::npos)
          << e.message();
    }
  }
  // A distribution whose halos are too narrow for the depth is rejected, not read past.
  distribution const narrow({10}, dtype::float64, {2}, {dim_options::halo(1)});
  EXPECT_THROW((void)deep_halo_region(narrow, 0, {1}, 2, 1), halox::error);
}

namespace {

// Cell-by-cell check of one rank's schedule: after the exchange every allocated cell holds a
// correct value (in-domain halo cells from the exchange, cells beyond a non-periodic boundary
// are boundary values). Step s computes its region with a star stencil of `radius`: every
// cell of it must have all its neighbours still correct, and afterwards only the region and the
// boundary values are correct (the other buffer's cells are stale). The last region must be the
// owned block. (Near a far non-periodic boundary more cells would be computable than the region
// holds; the region need not include them, and the hand-written cases check the exact shrink.)
void simulate(distribution const& dist, int rank, std::vector<int> const& radius, int depth) {
  int const nd = dist.ndim();
  box const a = dist.allocated_box(rank);
  SCOPED_TRACE(dist.str() + " rank " + std::to_string(rank) + " depth " + std::to_string(depth));
  if (a.empty()) {
    for (int s = 0; s <= depth; ++s)
      EXPECT_TRUE(deep_halo_region(dist, rank, radius, depth, s).empty());
    return;
  }
  index_t const cells = a.volume();
  std::vector<index_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * a.extent(d + 1);
  auto coord = [&](index_t i, int d) { return a.lo[d] + (i / stride[d]) % a.extent(d); };
  auto boundary = [&](index_t i) {
    for (int d = 0; d < nd; ++d) {
      index_t const g = coord(i, d);
      if (!dist.options(d).periodic && (g < 0 || g >= dist.shape()[d])) return true;
    }
    return false;
  };
  auto inside = [&](box const& b, index_t i) {
    for (int d = 0; d < nd; ++d)
      if (coord(i, d) < b.lo[d] || coord(i, d) >= b.hi[d]) return false;
    return true;
  };
  std::vector<char> ok(static_cast<std::size_t>(cells), 1), next(ok.size());
  box const r0 = deep_halo_region(dist, rank, radius, depth, 0);
  for (index_t i = 0; i < cells; ++i) EXPECT_EQ(inside(r0, i), !boundary(i)) << "cell " << i;
  for (int s = 1; s <= depth; ++s) {
    box const r = deep_halo_region(dist, rank, radius, depth, s);
    for (index_t i = 0; i < cells; ++i) {
      bool computable = !boundary(i);
      for (int d = 0; d < nd && computable; ++d)
        for (int o = -radius[d]; o <= radius[d] && computable; ++o) {
          index_t const c = coord(i, d) + o;
          computable = c >= a.lo[d] && c < a.hi[d] && ok[i + o * stride[d]];
        }
      if (inside(r, i)) ASSERT_TRUE(computable) << "step " << s << " cell " << i;
      next[i] = inside(r, i) || boundary(i);
    }
    ok.swap(next);
  }
  EXPECT_EQ(deep_halo_region(dist, rank, radius, depth, depth), dist.owned_box(rank));
}

} // namespace

TEST(DeepHaloGeometry, RegionsMatchCellSimulation) {
  std::mt19937 rng(2026);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < 200; ++t) {
    int const nd = uni(1, 3);
    int const depth = uni(1, 4);
    std::vector<index_t> shape(nd);
    std::vector<int> parts(nd), radius(nd);
    std::vector<dim_options> opts(nd);
    for (int d = 0; d < nd; ++d) {
      radius[d] = uni(0, 2);
      opts[d].periodic = uni(0, 1) == 1;
      parts[d] = uni(1, 4);
      // A periodic halo may be wider than the whole extent (it wraps more than once).
      shape[d] = opts[d].periodic ? uni(1, 11) : uni(std::max(1, radius[d] * depth), 11);
      if (uni(0, 1)) { // explicit sizes with thin and empty parts
        std::vector<index_t> sizes(parts[d], 0);
        for (index_t c = 0; c < shape[d]; ++c) ++sizes[uni(0, parts[d] - 1)];
        opts[d].sizes = sizes;
      }
    }
    distribution const dist(shape, dtype::float64, parts,
                            deep_halo_dims(shape, radius, depth, opts));
    for (int r = 0; r < dist.nranks(); ++r) simulate(dist, r, radius, depth);
    if (HasFatalFailure()) return;
  }
}
