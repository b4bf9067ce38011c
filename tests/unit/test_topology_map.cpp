// map_grid / mapping_cost on simulated machines: documented cases where the compact placement
// moves fewer bytes between nodes than row-major order, and random machines where it must never
// move more. The expected costs are counted by hand in the comments (unit weight per face).
#include <halox/error.hpp>
#include <halox/topology.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace halox;

namespace {

// `nodes` nodes of `sockets` sockets of `cores` processes, numbered consecutively.
std::vector<rank_place> uniform_machine(int nodes, int sockets, int cores) {
  std::vector<rank_place> m;
  for (int n = 0; n < nodes; ++n)
    for (int s = 0; s < sockets; ++s)
      for (int c = 0; c < cores; ++c) m.push_back({n, s});
  return m;
}

// Nodes of the given sizes (one socket each), processes numbered consecutively.
std::vector<rank_place> uneven_machine(std::vector<int> const& sizes) {
  std::vector<rank_place> m;
  for (std::size_t n = 0; n < sizes.size(); ++n)
    for (int c = 0; c < sizes[n]; ++c) m.push_back({static_cast<int>(n), 0});
  return m;
}

bool is_permutation_of_n(std::vector<int> p) {
  std::sort(p.begin(), p.end());
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int>(i)) return false;
  return true;
}

void expect_consistent(std::vector<rank_place> const& m, std::vector<int> const& dims,
                       std::vector<double> const& w, std::vector<bool> const& periodic,
                       topology_mapping const& r) {
  ASSERT_TRUE(is_permutation_of_n(r.process_of));
  std::vector<int> id(r.process_of.size());
  std::iota(id.begin(), id.end(), 0);
  auto const before = mapping_cost(m, dims, w, periodic, id);
  auto const after = mapping_cost(m, dims, w, periodic, r.process_of);
  EXPECT_DOUBLE_EQ(r.before.inter_node, before.inter_node);
  EXPECT_DOUBLE_EQ(r.before.inter_socket, before.inter_socket);
  EXPECT_DOUBLE_EQ(r.after.inter_node, after.inter_node);
  EXPECT_DOUBLE_EQ(r.after.inter_socket, after.inter_socket);
  EXPECT_LE(after.inter_node, before.inter_node);
  if (after.inter_node == before.inter_node) {
    EXPECT_LE(after.inter_socket, before.inter_socket);
  }
  if (!r.reordered) {
    EXPECT_EQ(r.process_of, id);
  }
}

} // namespace

// 4 nodes x 2 sockets x 4 cores on a 4x8 grid. Row-major puts one grid row on each node: 3 row
// boundaries x 8 faces = 24 cross nodes, and each row's socket halves meet once: 4 inter-socket.
// 2x4 node boxes cut 8 + 4 = 12 faces between nodes; 2x2 socket boxes cut 2 per node: 8.
TEST(TopologyMap, FourNodesTwoSocketsOnFourByEight) {
  auto const m = uniform_machine(4, 2, 4);
  std::vector<int> const dims{4, 8};
  std::vector<double> const w{1, 1};
  auto const r = map_grid(m, dims, w);
  expect_consistent(m, dims, w, {}, r);
  EXPECT_TRUE(r.reordered);
  EXPECT_EQ(r.nodes, 4);
  EXPECT_EQ(r.sockets, 8);
  EXPECT_EQ(r.before.inter_node, 24);
  EXPECT_EQ(r.before.inter_socket, 4);
  EXPECT_EQ(r.after.inter_node, 12);
  EXPECT_EQ(r.after.inter_socket, 8);
}

// 2 nodes x 6 on 3x4: row-major gives node 0 the first row and half the second: 5 faces cross
// (2 + 2 vertical, 1 horizontal). Two 3x2 halves cut 3.
TEST(TopologyMap, TwoNodesOfSixOnThreeByFour) {
  auto const m = uniform_machine(2, 1, 6);
  std::vector<int> const dims{3, 4};
  std::vector<double> const w{1, 1};
  auto const r = map_grid(m, dims, w);
  expect_consistent(m, dims, w, {}, r);
  EXPECT_TRUE(r.reordered);
  EXPECT_EQ(r.before.inter_node, 5);
  EXPECT_EQ(r.after.inter_node, 3);
}

// Uneven nodes of 5 and 3 on 2x4: row-major gives node 0 row 0 and (1,0): 3 vertical + 1
// horizontal = 4 faces. A 2x2 block plus one cell next to it cuts 3.
TEST(TopologyMap, UnevenFivePlusThreeOnTwoByFour) {
  auto const m = uneven_machine({5, 3});
  std::vector<int> const dims{2, 4};
  std::vector<double> const w{1, 1};
  auto const r = map_grid(m, dims, w);
  expect_consistent(m, dims, w, {}, r);
  EXPECT_TRUE(r.reordered);
  EXPECT_EQ(r.before.inter_node, 4);
  EXPECT_EQ(r.after.inter_node, 3);
}

// Weights follow the tensor: an 8x64 tensor on 2x2 with halo 1 and 4-byte elements has 4x32
// blocks, so a face across dim 0 moves 2 x 32 x 4 = 256 bytes and one across dim 1 2 x 4 x 4 =
// 32. Row-major puts each grid row on a node (2 heavy faces cross: 512); columns cross 2 light
// ones (64).
TEST(TopologyMap, HaloWeightsChooseTheCut) {
  auto const w = halo_face_bytes({8, 64}, {2, 2}, {1, 1}, {1, 1}, 4);
  ASSERT_EQ(w, (std::vector<double>{256, 32}));
  auto const m = uniform_machine(2, 1, 2);
  auto const r = map_grid(m, {2, 2}, w);
  expect_consistent(m, {2, 2}, w, {}, r);
  EXPECT_TRUE(r.reordered);
  EXPECT_EQ(r.before.inter_node, 512);
  EXPECT_EQ(r.after.inter_node, 64);
  EXPECT_EQ(r.process_of, (std::vector<int>{0, 2, 1, 3})); // node 0 holds column 0
}

// A round-robin launch (rank r on node r % 4) puts each grid column on one node, so every one of
// the 4 x 7 = 28 faces along a row crosses nodes. map_grid still finds 2x4 node boxes (12).
TEST(TopologyMap, RoundRobinPlacementIsGathered) {
  std::vector<rank_place> m;
  for (int r = 0; r < 32; ++r) m.push_back({r % 4, 0});
  std::vector<double> const w{1, 1};
  auto const r = map_grid(m, {4, 8}, w);
  expect_consistent(m, {4, 8}, w, {}, r);
  EXPECT_EQ(r.before.inter_node, 28);
  EXPECT_EQ(r.after.inter_node, 12);
}

// Row-major is already best: a periodic ring of 8 on 2 nodes of 4 cuts 2 faces either way, and
// the identity is kept.
TEST(TopologyMap, KeepsRowMajorWhenNotBetter) {
  auto const m = uniform_machine(2, 1, 4);
  auto const r = map_grid(m, {8}, {1}, {true});
  expect_consistent(m, {8}, {1}, {true}, r);
  EXPECT_FALSE(r.reordered);
  EXPECT_EQ(r.before.inter_node, 2);
  EXPECT_EQ(r.after.inter_node, 2);
}

TEST(TopologyMap, PeriodicTwoCountsBothFaces) {
  // Two blocks along a periodic dimension meet twice (directly and across the boundary).
  auto const m = uniform_machine(2, 1, 1);
  auto const c = mapping_cost(m, {2}, {5}, {true}, {0, 1});
  EXPECT_EQ(c.inter_node, 10);
  EXPECT_EQ(mapping_cost(m, {2}, {5}, {}, {0, 1}).inter_node, 5);
}

TEST(TopologyMap, NeverWorseOnRandomMachines) {
  std::mt19937 rng(12345);
  int reordered = 0;
  for (int t = 0; t < 300; ++t) {
    int const nd = 1 + static_cast<int>(rng() % 3);
    std::vector<int> dims(nd);
    int n = 1;
    for (auto& g : dims) {
      g = 1 + static_cast<int>(rng() % 6);
      n *= g;
    }
    // Random node sizes, random sockets, and sometimes a scrambled launch order.
    std::vector<rank_place> m;
    int node = 0;
    while (static_cast<int>(m.size()) < n) {
      int const size = std::min<int>(n - static_cast<int>(m.size()), 1 + rng() % 8);
      int const sockets = 1 + static_cast<int>(rng() % 3);
      for (int c = 0; c < size; ++c) m.push_back({node * 7 + 3, c * sockets / size});
      ++node;
    }
    if (rng() % 3 == 0) std::shuffle(m.begin(), m.end(), rng);
    std::vector<double> w(nd);
    for (auto& x : w) x = static_cast<double>(rng() % 5) * (rng() % 2 ? 1.0 : 0.25);
    std::vector<bool> periodic;
    if (rng() % 2)
      for (int d = 0; d < nd; ++d) periodic.push_back(rng() % 2 == 0);
    auto const r = map_grid(m, dims, w, periodic);
    SCOPED_TRACE("case " + std::to_string(t));
    expect_consistent(m, dims, w, periodic, r);
    if (r.reordered) {
      ++reordered;
      EXPECT_TRUE(r.after.inter_node < r.before.inter_node ||
                  r.after.inter_socket < r.before.inter_socket);
    }
  }
  EXPECT_GT(reordered, 50); // the random cases do exercise the reordering
}

TEST(TopologyMap, ErrorsNameTheValue) {
  auto const m = uniform_machine(2, 1, 2);
  try {
    (void)map_grid(m, {2, 3}, {1, 1});
    FAIL() << "expected halox::error";
  } catch (error const& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("describes 4 processes but grid 2x3 has 6"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)map_grid(m, {2, 2}, {1, -2});
    FAIL() << "expected halox::error";
  } catch (error const& e) {
    EXPECT_NE(std::string(e.what()).find("face_bytes -2"), std::string::npos) << e.what();
  }
  try {
    (void)mapping_cost(m, {2, 2}, {1, 1}, {}, {0, 1, 1, 3});
    FAIL() << "expected halox::error";
  } catch (error const& e) {
    EXPECT_NE(std::string(e.what()).find("not a permutation"), std::string::npos) << e.what();
  }
}

TEST(TopologyMap, ReportLine) {
  topology_report r;
  EXPECT_EQ(r.str(), "topology: not reordered (not requested)");
  r.requested = true;
  r.mapping = map_grid(uniform_machine(2, 1, 6), {3, 4}, {1, 1});
  EXPECT_EQ(r.str(), "topology: 2 node(s), 2 socket(s); reordered; inter-node bytes 5 -> 3, "
                     "inter-socket bytes 0 -> 0");
}
