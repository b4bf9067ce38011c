// choose_grid against a brute-force oracle: every factorisation of the process count, each
// costed by counting, cell by cell, the halo cells each rank receives from another process.
#include <halox/distribution.hpp>
#include <halox/error.hpp>
#include <halox/grid.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace halox;

namespace {

struct problem {
  int nprocs = 1;
  std::vector<int> fixed;
  std::vector<index_t> shape;
  std::vector<int> lo, hi;
  std::vector<bool> periodic;

  std::string str() const {
    std::string s = "nprocs=" + std::to_string(nprocs) + " shape=";
    for (std::size_t d = 0; d < shape.size(); ++d)
      s += (d ? " x " : "") + std::to_string(shape[d]) + "(halo " + std::to_string(lo[d]) + "," +
           std::to_string(hi[d]) + (periodic[d] ? " periodic" : "") +
           (fixed[d] ? " fixed " + std::to_string(fixed[d]) : std::string()) + ")";
    return s;
  }
};

struct oracle_cost {
  index_t overfull = 0, busiest = 0, block = 0, total = 0;
};

// Every ordered factorisation of `remaining` over the dimensions from `d` on, keeping fixed
// entries.
void factorisations(int remaining, std::size_t d, std::vector<int>& cur,
                    std::vector<int> const& fixed, std::vector<std::vector<int>>& out) {
  if (d == cur.size()) {
    if (remaining == 1) out.push_back(cur);
    return;
  }
  for (int f = 1; f <= remaining; ++f) {
    if (remaining % f != 0 || (fixed[d] > 0 && f != fixed[d])) continue;
    cur[d] = f;
    factorisations(remaining / f, d + 1, cur, fixed, out);
  }
}

// The definition, literally: for each rank, each cell of its allocated box that exists (after
// wrapping a periodic dimension) and that another rank owns is one cell received. Ownership is
// looked up through `distribution`, independently of choose_grid's per-dimension model.
oracle_cost brute_cost(problem const& pb, std::vector<int> const& dims) {
  int const nd = static_cast<int>(dims.size());
  std::vector<dim_options> opts(nd);
  for (int d = 0; d < nd; ++d) {
    opts[d].halo_lo = pb.lo[d];
    opts[d].halo_hi = pb.hi[d];
    opts[d].periodic = pb.periodic[d];
  }
  distribution const dist(pb.shape, dtype::float32, dims, opts);
  oracle_cost c;
  c.block = 1;
  for (int d = 0; d < nd; ++d) {
    c.overfull += std::max<index_t>(0, dims[d] - pb.shape[d]);
    c.block *= dist.part_size(d, 0); // balanced: the first part is the largest
  }
  // Owning part of every global position, per dimension.
  std::vector<std::vector<int>> part(nd);
  for (int d = 0; d < nd; ++d)
    for (index_t i = 0; i < pb.shape[d]; ++i) part[d].push_back(dist.part_of(d, i));
  for (int r = 0; r < dist.nranks(); ++r) {
    if (dist.empty(r)) continue;
    box const a = dist.allocated_box(r);
    auto const me = dist.coords_of(r);
    std::vector<index_t> x(a.lo, a.lo + nd);
    index_t received = 0;
    for (;;) {
      bool exists = true, mine = true;
      for (int d = 0; d < nd; ++d) {
        index_t const n = pb.shape[d];
        index_t y = x[d];
        if (pb.periodic[d])
          y = ((y % n) + n) % n;
        else if (y < 0 || y >= n)
          exists = false;
        if (exists && part[d][y] != me[d]) mine = false;
      }
      if (exists && !mine) ++received;
      int d = nd - 1;
      while (d >= 0 && ++x[d] == a.hi[d]) x[d] = a.lo[d], --d;
      if (d < 0) break;
    }
    c.busiest = std::max(c.busiest, received);
    c.total += received;
  }
  return c;
}

problem random_problem(std::mt19937& rng) {
  auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  problem pb;
  int const nd = uni(1, 4);
  static int const counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 18, 24};
  pb.nprocs = counts[uni(0, static_cast<int>(std::size(counts)) - 1)];
  int const max_extent = nd <= 2 ? 24 : (nd == 3 ? 10 : 6);
  for (int d = 0; d < nd; ++d) {
    pb.shape.push_back(uni(1, max_extent));
    pb.periodic.push_back(uni(0, 2) == 0);
    // Non-periodic halos are at most the extent (distribution's rule); periodic ones may wrap
    // more than once.
    int const wmax = pb.periodic[d] ? 3 : static_cast<int>(std::min<index_t>(2, pb.shape[d]));
    pb.lo.push_back(uni(0, 3) == 0 ? 0 : uni(0, wmax));
    pb.hi.push_back(uni(0, 3) == 0 ? 0 : uni(0, wmax));
    pb.fixed.push_back(0);
  }
  // Sometimes fix one entry to a divisor of nprocs.
  if (nd > 1 && uni(0, 3) == 0) {
    std::vector<int> divs;
    for (int f = 1; f <= pb.nprocs; ++f)
      if (pb.nprocs % f == 0) divs.push_back(f);
    pb.fixed[uni(0, nd - 1)] = divs[uni(0, static_cast<int>(divs.size()) - 1)];
  }
  return pb;
}

} // namespace

TEST(ChooseGridOracle, MatchesBruteForceOnRandomProblems) {
  std::mt19937 rng(20261201u);
  int checked = 0;
  for (int i = 0; i < 320; ++i) {
    problem const pb = random_problem(rng);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + pb.str());
    auto const chosen = choose_grid(pb.nprocs, pb.fixed, pb.shape, pb.lo, pb.hi, pb.periodic);
    ASSERT_EQ(chosen.size(), pb.shape.size());
    int product = 1;
    for (std::size_t d = 0; d < chosen.size(); ++d) {
      product *= chosen[d];
      if (pb.fixed[d] > 0) EXPECT_EQ(chosen[d], pb.fixed[d]) << "fixed entry on dim " << d;
    }
    EXPECT_EQ(product, pb.nprocs);

    std::vector<std::vector<int>> all;
    std::vector<int> cur(pb.shape.size(), 1);
    factorisations(pb.nprocs, 0, cur, pb.fixed, all);
    ASSERT_FALSE(all.empty());
    // The documented order: fewest overfull parts, then the busiest rank's halo cells, then
    // the largest owned block, then the total over ranks.
    auto key = [](oracle_cost const& c) {
      return std::make_tuple(c.overfull, c.busiest, c.block, c.total);
    };
    oracle_cost best = brute_cost(pb, all[0]);
    for (auto const& g : all) {
      oracle_cost const c = brute_cost(pb, g);
      if (key(c) < key(best)) best = c;
    }
    oracle_cost const got = brute_cost(pb, chosen);
    EXPECT_EQ(got.overfull, best.overfull);
    EXPECT_EQ(got.busiest, best.busiest) << "chosen grid is not the cheapest";
    EXPECT_EQ(got.block, best.block);
    EXPECT_EQ(got.total, best.total);
    ++checked;
  }
  EXPECT_EQ(checked, 320);
}

TEST(ChooseGrid, CountsOnlyHalosThatExist) {
  // 8x64x256x256 NCHW, halo 1 on H and W, samples and channels kept whole, 4 ranks: a 2x2
  // split of H and W receives 128 + 128 + 1 cells per plane on every rank, a 4x1 split 2 x 256
  // on its interior ranks (a model that charged both sides at the global boundary chose 4x1).
  auto const g = choose_grid(4, {1, 1, 0, 0}, {8, 64, 256, 256}, {0, 0, 1, 1}, {0, 0, 1, 1});
  EXPECT_EQ(g, (std::vector<int>{1, 1, 2, 2}));
  // With the batch free, sample-parallel receives nothing at all.
  auto const n = choose_grid(4, {0, 0, 0, 0}, {8, 64, 256, 256}, {0, 0, 1, 1}, {0, 0, 1, 1});
  EXPECT_EQ(n, (std::vector<int>{4, 1, 1, 1}));
}

TEST(ChooseGrid, PeriodicHalosCrossTheBoundary) {
  // 16 x 16, halo 1 everywhere, 2 ranks. Periodic along dim 0 only: splitting dim 0 costs each
  // rank two rows of 16 (one wraps around) = 32; splitting dim 1 costs one column of 16 plus
  // its 2 cells in the wrapped rows = 18, and the wrapped rows themselves come from the rank
  // itself (dim 0 is whole), so dim 1 is split. Periodic along dim 1 only: the mirror image.
  EXPECT_EQ(choose_grid(2, {0, 0}, {16, 16}, {1, 1}, {1, 1}, {true, false}),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(choose_grid(2, {0, 0}, {16, 16}, {1, 1}, {1, 1}, {false, true}),
            (std::vector<int>{2, 1}));
  // A whole periodic dimension wraps onto its own rank: no messages, so splitting the other
  // dimension (halo 0) costs nothing.
  EXPECT_EQ(choose_grid(2, {0, 0}, {64, 16}, {1, 0}, {1, 0}, {true, false}),
            (std::vector<int>{1, 2}));
}

TEST(ChooseGrid, PeriodicFlagsAreValidated) {
  try {
    (void)choose_grid(2, {0, 0}, {4, 4}, {1, 1}, {1, 1}, {true});
    ADD_FAILURE() << "expected halox::error";
  } catch (error const& e) {
    EXPECT_NE(std::string(e.what()).find("periodic has 1 entries"), std::string::npos) << e.what();
  }
}
