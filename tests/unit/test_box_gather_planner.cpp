// The box-gather planner against a brute-force oracle, without MPI: every rank of random
// distributions is planned, the messages are delivered in memory (support/sim.hpp) with a
// summing combine, and every cell of every workspace must hold its global value exactly once:
// a cell received twice reads double, a cell never received reads zero, and a halo cell read
// by mistake reads the poison value.
#include "plan/box_gather_planner.hpp"
#include "support/sim.hpp"

#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <random>

using namespace halox;
using detail::need_ranges;
using detail::schedule;

namespace {

constexpr double poison = 1e12; // in halo cells of the source: must never arrive anywhere

int pick(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

double value_at(std::vector<index_t> const& g, std::vector<index_t> const& shape) {
  double v = 0;
  for (std::size_t d = 0; d < g.size(); ++d) v = v * static_cast<double>(shape[d]) + g[d];
  return v + 1.0;
}

// Calls f(global index) for every cell of `b` in row-major order.
template <class F> void for_each_index(box const& b, F&& f) {
  if (b.empty()) return;
  std::vector<index_t> g(b.lo, b.lo + b.nd);
  while (true) {
    f(g);
    int d = b.nd - 1;
    while (d >= 0 && ++g[d] == b.hi[d]) {
      g[d] = b.lo[d];
      --d;
    }
    if (d < 0) return;
  }
}

distribution random_distribution(std::mt19937& rng) {
  int const nd = pick(rng, 1, 3);
  std::vector<index_t> shape(nd);
  std::vector<int> parts(nd);
  std::vector<dim_options> opts(nd);
  for (int d = 0; d < nd; ++d) {
    shape[d] = pick(rng, 1, 9);
    parts[d] = pick(rng, 1, 4);
    opts[d].halo_lo = std::min<int>(pick(rng, 0, 2), static_cast<int>(shape[d]));
    opts[d].halo_hi = std::min<int>(pick(rng, 0, 2), static_cast<int>(shape[d]));
    if (pick(rng, 0, 1) == 0) { // explicit sizes, some of them empty
      std::vector<index_t> s(parts[d], 0);
      for (index_t i = 0; i < shape[d]; ++i) s[pick(rng, 0, parts[d] - 1)] += 1;
      opts[d].sizes = s;
    }
  }
  return distribution(shape, dtype::float64, parts, opts);
}

need_ranges random_need(std::mt19937& rng, distribution const& dist) {
  need_ranges need(dist.ndim());
  for (int d = 0; d < dist.ndim(); ++d)
    for (int p = 0; p < dist.parts()[d]; ++p) {
      int const n = static_cast<int>(dist.shape()[d]);
      int const a = pick(rng, 0, n), b = pick(rng, 0, n);
      need[d].push_back(pick(rng, 0, 5) == 0 ? index_range{} // needs nothing
                                             : index_range{std::min(a, b), std::max(a, b)});
    }
  return need;
}

// Source buffers: owned cells hold their global value, halo cells the poison.
std::vector<std::vector<double>> sources(distribution const& dist) {
  std::vector<std::vector<double>> src(dist.nranks());
  for (int r = 0; r < dist.nranks(); ++r) {
    box const a = dist.allocated_box(r), o = dist.owned_box(r);
    auto const st = dist.default_strides(r);
    src[r].assign(static_cast<std::size_t>(a.volume()), poison);
    for_each_index(o, [&](std::vector<index_t> const& g) {
      index_t off = 0;
      for (int d = 0; d < dist.ndim(); ++d) off += (g[d] - a.lo[d]) * st[d];
      src[r][off] = value_at(g, dist.shape());
    });
  }
  return src;
}

// Runs every rank's schedule; `expected(r, g)` says whether rank r's workspace cell g must be
// filled (otherwise it must stay zero).
template <class Expected> void check_gather(distribution const& dist, need_ranges const& need,
                                            std::vector<std::vector<box>> const* self,
                                            Expected&& expected) {
  int const n = dist.nranks();
  std::vector<schedule> sch;
  for (int r = 0; r < n; ++r)
    sch.push_back(detail::plan_box_gather(dist, r, {}, need, self ? &(*self)[r] : nullptr));
  auto src = sources(dist);
  std::vector<std::vector<double>> ws(n);
  std::vector<std::vector<void*>> bufs(n);
  for (int r = 0; r < n; ++r) {
    box const mine = detail::needed_box(dist, r, need);
    ASSERT_EQ(sch[r].slots[1].elements, mine.volume());
    ws[r].assign(static_cast<std::size_t>(mine.volume()), 0.0);
    bufs[r] = {src[r].data(), ws[r].data()};
  }
  halox::test::simulate(sch, bufs, detail::combine_op::sum);
  for (int r = 0; r < n; ++r) {
    box const mine = detail::needed_box(dist, r, need);
    std::size_t k = 0;
    for_each_index(mine, [&](std::vector<index_t> const& g) {
      double const want = expected(r, g) ? value_at(g, dist.shape()) : 0.0;
      ASSERT_EQ(ws[r][k], want) << "rank " << r << ", cell " << k << " of " << dist.str();
      ++k;
    });
    // One message per peer that owns part of the box, and never one to or from oneself.
    for (auto const& m : sch[r].recvs) EXPECT_NE(m.peer, r);
    for (auto const& m : sch[r].sends) EXPECT_NE(m.peer, r);
  }
}

} // namespace

TEST(BoxGatherPlanner, EveryNeededCellArrivesOnceFromItsOwner) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 300; ++trial) {
    distribution const dist = random_distribution(rng);
    need_ranges const need = random_need(rng, dist);
    SCOPED_TRACE(dist.str());
    check_gather(dist, need, nullptr, [](int, std::vector<index_t> const&) { return true; });
    if (HasFatalFailure()) return;
  }
}

TEST(BoxGatherPlanner, OwnCopyBoxesLimitTheSelfCopy) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    distribution const dist = random_distribution(rng);
    need_ranges const need = random_need(rng, dist);
    // Each rank copies only the lower half (along dimension 0) of its own block.
    std::vector<std::vector<box>> self(dist.nranks());
    for (int r = 0; r < dist.nranks(); ++r) {
      box b = dist.owned_box(r);
      b.hi[0] = b.lo[0] + b.extent(0) / 2;
      self[r].push_back(b);
    }
    check_gather(dist, need, &self, [&](int r, std::vector<index_t> const& g) {
      if (dist.owner(g) != r) return true;
      return g[0] < self[r][0].hi[0];
    });
    if (HasFatalFailure()) return;
  }
}

TEST(BoxGatherPlanner, RankOwningNothingStillReceives) {
  // Four parts along one dimension, the last one empty; it needs cells 2..7 of three owners.
  dim_options o;
  o.sizes = {3, 3, 4, 0};
  distribution const dist({10}, dtype::float64, {4}, {o});
  need_ranges const need{{{0, 0}, {0, 0}, {0, 0}, {2, 8}}};
  schedule const s = detail::plan_box_gather(dist, 3, {}, need);
  ASSERT_EQ(s.recvs.size(), 3u);
  EXPECT_TRUE(s.sends.empty());
  EXPECT_TRUE(s.copies.empty());
  check_gather(dist, need, nullptr, [](int, std::vector<index_t> const&) { return true; });
}

TEST(BoxGatherPlanner, RejectsBadNeedRanges) {
  distribution const dist({8, 4}, dtype::float32, {2, 1}, {});
  auto const rejected = [&](need_ranges const& need) {
    try {
      (void)detail::plan_box_gather(dist, 0, {}, need);
    } catch (error const& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
      return true;
    }
    return false;
  };
  EXPECT_TRUE(rejected({{{0, 4}, {4, 8}}}));            // a dimension missing
  EXPECT_TRUE(rejected({{{0, 4}}, {{0, 4}}}));          // a part missing
  EXPECT_TRUE(rejected({{{0, 4}, {4, 9}}, {{0, 4}}}));  // past the end
  EXPECT_TRUE(rejected({{{-1, 4}, {4, 8}}, {{0, 4}}})); // before the start
  EXPECT_FALSE(rejected({{{3, 3}, {9, 2}}, {{0, 4}}})); // empty ranges anywhere are fine
}
