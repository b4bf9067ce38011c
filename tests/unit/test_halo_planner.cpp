#include "plan/halo_planner.hpp"
#include "support/sim.hpp"

#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <random>

using namespace halox;
using detail::combine_op;

namespace {

constexpr double sentinel = -1.0;

double value_at(std::vector<index_t> const& g, std::vector<index_t> const& shape) {
  double v = 0;
  for (std::size_t d = 0; d < g.size(); ++d) v = v * static_cast<double>(shape[d]) + g[d];
  return v + 1.0;
}

index_t wrap(index_t g, index_t n) { return ((g % n) + n) % n; }

// Calls f(local offset, global index) for every allocated cell of `rank`.
template <class F> void for_each_cell(distribution const& dist, int rank, F&& f) {
  box const a = dist.allocated_box(rank);
  if (a.empty()) return;
  auto const st = dist.default_strides(rank);
  int const nd = dist.ndim();
  std::vector<index_t> g(a.lo, a.lo + nd);
  while (true) {
    index_t off = 0;
    for (int d = 0; d < nd; ++d) off += (g[d] - a.lo[d]) * st[d];
    f(off, g);
    int d = nd - 1;
    while (d >= 0 && ++g[d] == a.hi[d]) {
      g[d] = a.lo[d];
      --d;
    }
    if (d < 0) return;
  }
}

bool is_owned(box const& o, std::vector<index_t> const& g) {
  for (int d = 0; d < o.nd; ++d)
    if (g[d] < o.lo[d] || g[d] >= o.hi[d]) return false;
  return true;
}

// Runs the forward exchange of `dist` over all its ranks in memory and checks every halo cell.
void check_forward(distribution const& dist, bool fill) {
  int const n = dist.nranks();
  std::vector<detail::schedule> sch(n);
  std::vector<std::vector<double>> data(n);
  std::vector<std::vector<void*>> bufs(n);
  for (int r = 0; r < n; ++r) {
    sch[r] = detail::plan_halo(dist, r, {}, fill);
    data[r].assign(sch[r].slots[0].elements, sentinel);
    box const o = dist.owned_box(r);
    for_each_cell(dist, r, [&](index_t off, std::vector<index_t> const& g) {
      if (is_owned(o, g)) data[r][off] = value_at(g, dist.shape());
    });
    bufs[r] = {data[r].data()};
  }
  halox::test::simulate(sch, bufs, combine_op::replace, 0.5);
  for (int r = 0; r < n; ++r) {
    for_each_cell(dist, r, [&](index_t off, std::vector<index_t> const& g) {
      std::vector<index_t> w(g.size());
      bool outside = false;
      for (int d = 0; d < dist.ndim(); ++d) {
        bool const out = g[d] < 0 || g[d] >= dist.shape()[d];
        if (out && !dist.options(d).periodic) outside = true;
        w[d] = wrap(g[d], dist.shape()[d]);
      }
      double const expect = outside ? (fill ? 0.5 : sentinel) : value_at(w, dist.shape());
      ASSERT_EQ(data[r][off], expect) << dist.str() << " rank " << r << " offset " << off;
    });
  }
}

// Reverse exchange with sum: each owned cell must end as its own value plus every halo copy of
// it anywhere (brute force over all ranks' allocated cells).
void check_reverse_sum(distribution const& dist) {
  int const n = dist.nranks();
  std::vector<detail::schedule> sch(n);
  std::vector<std::vector<double>> data(n);
  std::vector<std::vector<void*>> bufs(n);
  std::map<std::vector<index_t>, double> expect;
  for (int r = 0; r < n; ++r) {
    sch[r] = detail::plan_halo(dist, r, {}, false).reversed();
    data[r].assign(sch[r].slots[0].elements, 0.0);
    box const o = dist.owned_box(r);
    for_each_cell(dist, r, [&](index_t off, std::vector<index_t> const& g) {
      std::vector<index_t> w(g.size());
      bool outside = false;
      for (int d = 0; d < dist.ndim(); ++d) {
        if ((g[d] < 0 || g[d] >= dist.shape()[d]) && !dist.options(d).periodic) outside = true;
        w[d] = wrap(g[d], dist.shape()[d]);
      }
      double const v = is_owned(o, g) ? value_at(g, dist.shape()) : 1000.0 * (r + 1) + off;
      data[r][off] = v;
      if (!outside) expect[w] += v;
    });
    bufs[r] = {data[r].data()};
  }
  halox::test::simulate(sch, bufs, combine_op::sum);
  for (int r = 0; r < n; ++r) {
    box const o = dist.owned_box(r);
    for_each_cell(dist, r, [&](index_t off, std::vector<index_t> const& g) {
      if (is_owned(o, g)) ASSERT_EQ(data[r][off], expect[g]) << dist.str() << " rank " << r;
    });
  }
}

distribution random_distribution(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int const nd = pick(1, 4);
  std::vector<index_t> shape(nd);
  std::vector<int> parts(nd);
  std::vector<dim_options> opts(nd);
  for (int d = 0; d < nd; ++d) {
    shape[d] = pick(1, nd <= 2 ? 12 : 6);
    parts[d] = pick(1, 4);
    opts[d].periodic = pick(0, 2) == 0;
    int const maxw = opts[d].periodic ? static_cast<int>(shape[d]) + 2 : static_cast<int>(shape[d]);
    opts[d].halo_lo = std::min(pick(0, 3), maxw);
    opts[d].halo_hi = std::min(pick(0, 3), maxw);
    if (pick(0, 3) == 0) {
      // Explicit sizes, some of them empty.
      std::vector<index_t> s(parts[d], 0);
      for (index_t i = 0; i < shape[d]; ++i) s[pick(0, parts[d] - 1)] += 1;
      opts[d].sizes = s;
    }
  }
  return distribution(shape, dtype::float64, parts, opts);
}

} // namespace

TEST(HaloPlanner, FacesEdgesCorners2D) {
  check_forward(
      distribution({8, 9}, dtype::float64, {2, 3}, {dim_options::halo(1), dim_options::halo(2)}),
      true);
}

TEST(HaloPlanner, Periodic3DAllNeighbours) {
  distribution d(
      {6, 6, 6}, dtype::float64, {2, 2, 2},
      {dim_options::halo(1, true), dim_options::halo(1, true), dim_options::halo(1, true)});
  // 26 neighbour regions, merged into messages to the 7 other ranks.
  auto s = detail::plan_halo(d, 0, {}, false);
  std::size_t regions = 0;
  for (auto const& m : s.recvs) regions += m.regions.size();
  EXPECT_EQ(s.recvs.size(), 7u);
  EXPECT_EQ(regions, 26u);
  check_forward(d, false);
}

TEST(HaloPlanner, PeriodicSelfWrapIsLocalCopy) {
  distribution d({5, 4}, dtype::float64, {1, 2},
                 {dim_options::halo(2, true), dim_options::halo(1)});
  auto s = detail::plan_halo(d, 0, {}, false);
  EXPECT_FALSE(s.copies.empty());
  check_forward(d, true);
}

TEST(HaloPlanner, MultiHopHaloWiderThanNeighbourBlock) {
  // 7x7 pooling at the end of ResNet: a 7x7 image split 4 ways per dimension, halo 3.
  distribution d({7, 7}, dtype::float64, {4, 4}, {dim_options::halo(3), dim_options::halo(3)});
  auto s = detail::plan_halo(d, 0, {}, true);
  // Rank (0,0) owns 2x2 and needs cells owned by ranks up to two hops away.
  EXPECT_GE(s.recvs.size(), 5u);
  check_forward(d, true);
}

TEST(HaloPlanner, EmptyRanksSkipped) {
  // Last mini-batch smaller than the number of processes, plus a halo on the spatial dims.
  distribution d({3, 10}, dtype::float64, {4, 2}, {dim_options{}, dim_options::halo(2)});
  for (int r = 0; r < d.nranks(); ++r) {
    auto s = detail::plan_halo(d, r, {}, true);
    if (d.empty(r)) {
      EXPECT_TRUE(s.sends.empty());
      EXPECT_TRUE(s.recvs.empty());
    }
    for (auto const& m : s.sends) EXPECT_FALSE(d.empty(m.peer));
  }
  check_forward(d, true);
  dim_options holes;
  holes.sizes = {3, 0, 0, 4};
  holes.halo_lo = holes.halo_hi = 2;
  check_forward(distribution({7}, dtype::float64, {4}, {holes}), true);
}

TEST(HaloPlanner, AsymmetricWidths) {
  dim_options a{2, 0, false, {}}, b{0, 3, true, {}};
  check_forward(distribution({9, 8}, dtype::float64, {3, 2}, {a, b}), true);
}

TEST(HaloPlanner, PeriodicHaloWrapsMoreThanOnce) {
  check_forward(distribution({3}, dtype::float64, {2}, {dim_options::halo(5, true)}), false);
}

TEST(HaloPlanner, BoundaryUntouchedOrFilled) {
  distribution d({4, 4}, dtype::float64, {2, 2}, {dim_options::halo(1), dim_options::halo(1)});
  EXPECT_TRUE(detail::plan_halo(d, 0, {}, false).fills.empty());
  EXPECT_FALSE(detail::plan_halo(d, 0, {}, true).fills.empty());
  check_forward(d, false);
  check_forward(d, true);
}

TEST(HaloPlanner, ReverseSumMatchesBruteForce) {
  check_reverse_sum(distribution({6, 7}, dtype::float64, {2, 3},
                                 {dim_options::halo(1, true), dim_options::halo(2)}));
  check_reverse_sum(distribution({7, 7}, dtype::float64, {4, 4},
                                 {dim_options::halo(3), dim_options::halo(3, true)}));
}

TEST(HaloPlanner, RandomizedForwardAndReverse) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 300; ++i) {
    auto d = random_distribution(rng);
    SCOPED_TRACE(d.str());
    check_forward(d, i % 2 == 0);
    check_reverse_sum(d);
    if (HasFatalFailure()) return;
  }
}

TEST(HaloPlanner, MillionVirtualRanksInMilliseconds) {
  distribution d({2000, 2000, 2000}, dtype::float32, {100, 100, 100},
                 {dim_options::halo(1, true), dim_options::halo(1), dim_options::halo(1)});
  auto t0 = std::chrono::steady_clock::now();
  for (int r : {0, 12345, 505050, 999999}) {
    auto s = detail::plan_halo(d, r, {}, false);
    EXPECT_LE(s.recvs.size(), 26u);
    EXPECT_EQ(s.recvs.size(), s.sends.size());
  }
  auto s = detail::plan_halo(d, d.rank_of({50, 50, 50}), {}, false);
  EXPECT_EQ(s.recvs.size(), 26u);
  double const ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Not a performance assertion: the bound is 100x what O(P) planning would need to be fast.
  EXPECT_LT(ms, 5000.0);
}
