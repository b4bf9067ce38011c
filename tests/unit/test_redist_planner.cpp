// The redistribution planner against the global tensor, without MPI: every process of a
// virtual plan communicator is planned, the messages are delivered in memory (support/sim.hpp)
// and every owned and halo cell of both sides is compared with what it must hold.
#include "plan/redist_planner.hpp"
#include "support/sim.hpp"

#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <set>

using namespace halox;
using detail::combine_op;
using detail::redist_side;
using detail::schedule;

namespace {

constexpr double sentinel = -1.0;

double value_at(std::vector<index_t> const& g, std::vector<index_t> const& shape) {
  double v = 0;
  for (std::size_t d = 0; d < g.size(); ++d) v = v * static_cast<double>(shape[d]) + g[d];
  return v + 1.0;
}

// Calls f(offset, global index, owned) for every allocated cell of `rank` laid out with `st`.
template <class F>
void for_each_cell(distribution const& dist, int rank, std::vector<index_t> const& st, F&& f) {
  box const a = dist.allocated_box(rank);
  box const o = dist.owned_box(rank);
  if (a.empty()) return;
  int const nd = dist.ndim();
  std::vector<index_t> g(a.lo, a.lo + nd);
  while (true) {
    index_t off = 0;
    bool owned = true;
    for (int d = 0; d < nd; ++d) {
      off += (g[d] - a.lo[d]) * st[d];
      owned = owned && g[d] >= o.lo[d] && g[d] < o.hi[d];
    }
    f(off, g, owned);
    int d = nd - 1;
    while (d >= 0 && ++g[d] == a.hi[d]) {
      g[d] = a.lo[d];
      --d;
    }
    if (d < 0) return;
  }
}

int pick(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

distribution random_distribution(std::mt19937& rng, std::vector<index_t> const& shape) {
  int const nd = static_cast<int>(shape.size());
  std::vector<int> parts(nd);
  std::vector<dim_options> opts(nd);
  int budget = 48; // keep the grid small enough for the brute-force check
  for (int d = 0; d < nd; ++d) {
    parts[d] = std::max(1, std::min(pick(rng, 1, 4), budget));
    budget = std::max(1, budget / parts[d]);
    opts[d].periodic = pick(rng, 0, 2) == 0;
    int const maxw = static_cast<int>(shape[d]);
    opts[d].halo_lo = std::min(pick(rng, 0, 2), maxw);
    opts[d].halo_hi = std::min(pick(rng, 0, 2), maxw);
    if (pick(rng, 0, 2) == 0) {
      std::vector<index_t> s(parts[d], 0); // explicit sizes, some of them empty
      for (index_t i = 0; i < shape[d]; ++i) s[pick(rng, 0, parts[d] - 1)] += 1;
      opts[d].sizes = s;
    }
  }
  return distribution(shape, dtype::float64, parts, opts);
}

// Row-major strides with up to two cells of padding per dimension (what a framework's
// allocator may do); default strides for an empty rank.
std::vector<index_t> random_strides(std::mt19937& rng, distribution const& dist, int rank) {
  auto const shape = dist.local_shape(rank);
  if (dist.empty(rank)) return dist.default_strides(rank);
  std::vector<index_t> st(shape.size());
  index_t acc = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= shape[d] + pick(rng, 0, 2);
  }
  return st;
}

// A redistribution set up on a virtual plan communicator of `n` processes.
struct scenario {
  distribution src, dst;
  int n = 0;
  std::vector<int> src_map, dst_map; // grid rank -> process (empty: identity)
  std::vector<std::vector<index_t>> src_strides, dst_strides;

  int grid_rank(std::vector<int> const& map, int nranks, int proc) const {
    if (map.empty()) return proc < nranks ? proc : -1;
    auto it = std::find(map.begin(), map.end(), proc);
    return it == map.end() ? -1 : static_cast<int>(it - map.begin());
  }
  int src_rank(int p) const { return grid_rank(src_map, src.nranks(), p); }
  int dst_rank(int p) const { return grid_rank(dst_map, dst.nranks(), p); }

  schedule plan(int p) const {
    int const s = src_rank(p), d = dst_rank(p);
    return detail::plan_redistribution(
        redist_side{&src, s, src_map, s >= 0 ? src_strides[s] : std::vector<index_t>{}},
        redist_side{&dst, d, dst_map, d >= 0 ? dst_strides[d] : std::vector<index_t>{}});
  }
};

scenario random_scenario(std::mt19937& rng) {
  int const nd = pick(rng, 1, 5);
  std::vector<index_t> shape(nd);
  for (auto& e : shape) e = pick(rng, 1, nd <= 2 ? 11 : 5);
  scenario sc{random_distribution(rng, shape), random_distribution(rng, shape)};
  int const ps = sc.src.nranks(), pd = sc.dst.nranks();
  sc.n = std::max(ps, pd) + pick(rng, 0, 2);
  if (pick(rng, 0, 3) != 0) {
    // Arbitrary injective placements of both grids in the plan communicator.
    std::vector<int> procs(sc.n);
    std::iota(procs.begin(), procs.end(), 0);
    std::shuffle(procs.begin(), procs.end(), rng);
    sc.src_map.assign(procs.begin(), procs.begin() + ps);
    std::shuffle(procs.begin(), procs.end(), rng);
    sc.dst_map.assign(procs.begin(), procs.begin() + pd);
  }
  for (int r = 0; r < ps; ++r) sc.src_strides.push_back(random_strides(rng, sc.src, r));
  for (int r = 0; r < pd; ++r) sc.dst_strides.push_back(random_strides(rng, sc.dst, r));
  return sc;
}

// Runs src -> dst, then dst -> src on the reversed schedules, checking every cell each time:
// owned cells carry the global value, halo cells are never written.
void check_round_trip(scenario const& sc) {
  std::vector<schedule> fwd(sc.n), rev(sc.n);
  std::vector<std::vector<double>> sbuf(sc.n), dbuf(sc.n);
  std::vector<std::vector<void*>> bufs(sc.n);
  for (int p = 0; p < sc.n; ++p) {
    fwd[p] = sc.plan(p);
    rev[p] = fwd[p].reversed();
    for (auto const& m : fwd[p].sends) ASSERT_EQ(m.regions.size(), 1u) << "one box per peer";
    for (auto const& m : fwd[p].recvs) ASSERT_EQ(m.regions.size(), 1u) << "one box per peer";
    ASSERT_LE(fwd[p].copies.size(), 1u);
    sbuf[p].assign(fwd[p].slots[0].elements, sentinel);
    dbuf[p].assign(fwd[p].slots[1].elements, sentinel);
    if (int const s = sc.src_rank(p); s >= 0)
      for_each_cell(sc.src, s, sc.src_strides[s], [&](index_t off, auto const& g, bool owned) {
        if (owned) sbuf[p][off] = value_at(g, sc.src.shape());
      });
    bufs[p] = {sbuf[p].data(), dbuf[p].data()};
  }
  auto check = [&](distribution const& dist, int p, int r, std::vector<index_t> const& st,
                   std::vector<double> const& buf, char const* what) {
    for_each_cell(dist, r, st, [&](index_t off, auto const& g, bool owned) {
      ASSERT_EQ(buf[off], owned ? value_at(g, dist.shape()) : sentinel)
          << what << " process " << p << " grid rank " << r << " offset " << off << "\n  src "
          << sc.src.str() << "\n  dst " << sc.dst.str();
    });
  };
  halox::test::simulate(fwd, bufs, combine_op::replace);
  for (int p = 0; p < sc.n; ++p)
    if (int const d = sc.dst_rank(p); d >= 0)
      check(sc.dst, p, d, sc.dst_strides[d], dbuf[p], "destination");
  for (int p = 0; p < sc.n; ++p) std::fill(sbuf[p].begin(), sbuf[p].end(), sentinel);
  halox::test::simulate(rev, bufs, combine_op::replace);
  for (int p = 0; p < sc.n; ++p)
    if (int const s = sc.src_rank(p); s >= 0)
      check(sc.src, p, s, sc.src_strides[s], sbuf[p], "source after the round trip");
}

} // namespace

TEST(RedistPlanner, RandomPairsRoundTrip) {
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 300; ++iter) {
    scenario const sc = random_scenario(rng);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    check_round_trip(sc);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(RedistPlanner, SampleToSpatialAndBack) {
  std::vector<index_t> const shape{8, 3, 10, 12};
  scenario sc{distribution(shape, dtype::float64, {4, 1, 1, 1}),
              distribution(shape, dtype::float64, {1, 1, 2, 2},
                           {{}, {}, dim_options::halo(1), dim_options::halo(2, true)})};
  sc.n = 4;
  for (int r = 0; r < 4; ++r) {
    sc.src_strides.push_back(sc.src.default_strides(r));
    sc.dst_strides.push_back(sc.dst.default_strides(r));
  }
  check_round_trip(sc);
  // Every sample block meets every spatial block: 3 peers each way plus the local copy.
  auto const s = sc.plan(1);
  EXPECT_EQ(s.sends.size(), 3u);
  EXPECT_EQ(s.recvs.size(), 3u);
  EXPECT_EQ(s.copies.size(), 1u);
}

TEST(RedistPlanner, SubsetGridsAndBystanders) {
  // Source on processes 0..1, destination on 2..5, process 6 in neither.
  std::vector<index_t> const shape{7, 5};
  scenario sc{distribution(shape, dtype::float64, {2, 1}),
              distribution(shape, dtype::float64, {2, 2}, {{}, dim_options::halo(1)})};
  sc.n = 7;
  sc.src_map = {0, 1};
  sc.dst_map = {2, 3, 4, 5};
  for (int r = 0; r < 2; ++r) sc.src_strides.push_back(sc.src.default_strides(r));
  for (int r = 0; r < 4; ++r) sc.dst_strides.push_back(sc.dst.default_strides(r));
  check_round_trip(sc);
  auto const bystander = sc.plan(6);
  EXPECT_TRUE(bystander.sends.empty() && bystander.recvs.empty() && bystander.copies.empty());
  EXPECT_EQ(bystander.slots.size(), 2u);
  EXPECT_EQ(bystander.slots[0].elements + bystander.slots[1].elements, 0);
}

TEST(RedistPlanner, IdenticalDistributionIsOneLocalCopy) {
  distribution const d({9, 6, 4}, dtype::float32, {3, 2, 1},
                       {dim_options::halo(1), {}, dim_options::halo(2, true)});
  for (int r = 0; r < d.nranks(); ++r) {
    auto const s = detail::plan_redistribution({&d, r, {}, {}}, {&d, r, {}, {}});
    EXPECT_TRUE(s.sends.empty());
    EXPECT_TRUE(s.recvs.empty());
    ASSERT_EQ(s.copies.size(), 1u);
    EXPECT_TRUE(s.copies[0].src.b == s.copies[0].dst.b);
    EXPECT_EQ(s.copies[0].src.b.lo[0], 1) << "the owned block starts at the halo offset";
  }
}

TEST(RedistPlanner, OverlappingPartsBinarySearch) {
  distribution const d({10}, dtype::float32, {5}, {dim_options{0, 0, false, {3, 0, 0, 4, 3}}});
  auto r = detail::overlapping_parts(d, 0, 2, 4); // cells 2..3: part 0 and part 3
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.last, 4);
  r = detail::overlapping_parts(d, 0, 7, 10);
  EXPECT_EQ(r.first, 4);
  EXPECT_EQ(r.last, 5);
  r = detail::overlapping_parts(d, 0, 3, 3);
  EXPECT_GE(r.first, r.last);
}

TEST(RedistPlanner, CostIsPeersNotProcesses) {
  // Two 3-d grids of 2^21 processes each: planning a rank must not walk them.
  std::vector<index_t> const shape{1024, 1024, 1024};
  distribution const a(shape, dtype::float32, {128, 128, 128});
  distribution const b(shape, dtype::float32, {64, 256, 128}, {dim_options::halo(1), {}, {}});
  std::mt19937 rng(7);
  auto const t0 = std::chrono::steady_clock::now();
  std::size_t peers = 0;
  for (int i = 0; i < 200; ++i) {
    int const r = pick(rng, 0, a.nranks() - 1);
    auto const s = detail::plan_redistribution({&a, r, {}, {}}, {&b, r, {}, {}});
    peers += s.sends.size() + s.recvs.size() + s.copies.size();
    EXPECT_LE(s.sends.size() + s.copies.size(), 4u); // 8/16 x 8/4 x 8/8 blocks
  }
  double const secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(peers, 0u);
  EXPECT_LT(secs, 0.5) << "200 plans on a 2M-process grid took " << secs << " s";

  // Brute force over every destination block for one rank: the same peers.
  int const r = 123457;
  auto const s = detail::plan_redistribution({&a, r, {}, {}}, {&b, -1, {}, {}});
  std::set<int> expect, got;
  box const mine = a.owned_box(r);
  for (int q = 0; q < b.nranks(); ++q)
    if (!intersect(mine, b.owned_box(q)).empty()) expect.insert(q);
  for (auto const& m : s.sends) got.insert(m.peer);
  if (!s.copies.empty()) got.insert(r); // the block this rank keeps
  EXPECT_EQ(got, expect);
}

TEST(RedistPlanner, RejectsDifferentShapesOrTypes) {
  distribution const a({4, 6}, dtype::float32, {2, 1});
  distribution const b({4, 7}, dtype::float32, {1, 2});
  distribution const c({4, 6}, dtype::int32, {1, 2});
  try {
    (void)detail::plan_redistribution({&a, 0, {}, {}}, {&b, 0, {}, {}});
    FAIL() << "no error";
  } catch (error const& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(e.message().find("[4x6]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[4x7]"), std::string::npos) << e.message();
  }
  EXPECT_THROW((void)detail::plan_redistribution({&a, 0, {}, {}}, {&c, 0, {}, {}}), error);
}

TEST(RedistPlanner, DistributionEncodingRoundTrip) {
  std::mt19937 rng(99);
  for (int i = 0; i < 50; ++i) {
    std::vector<index_t> shape(pick(rng, 1, 6));
    for (auto& e : shape) e = pick(rng, 1, 9);
    distribution const d = random_distribution(rng, shape);
    auto const enc = detail::encode_distribution(d);
    distribution const back = detail::decode_distribution(enc.data(), enc.size());
    EXPECT_TRUE(back == d) << d.str();
    EXPECT_EQ(back.hash(), d.hash()) << d.str();
  }
  auto enc = detail::encode_distribution(distribution({5}, dtype::float32, {2}));
  EXPECT_THROW((void)detail::decode_distribution(enc.data(), enc.size() - 1), error);
}
