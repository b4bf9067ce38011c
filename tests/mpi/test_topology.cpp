// Topology-aware process grids with emulated nodes (grid_options::fake_nodes, HALOX_FAKE_NODES):
// the reordered grid's communicator follows the mapping, halo exchanges on it match the oracle,
// and it never moves more bytes between nodes than the caller's order.
//
// Every test reaches the same collectives on every rank whatever the outcome of its checks.
#include <halox/error.hpp>
#include <halox/grid.hpp>
#include <halox/topology.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "oracle.hpp"
#include "support/mpi_helpers.hpp"

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

namespace {

using halox::test::expect_error_everywhere;
using halox::test::world_rank;
using halox::test::world_size;
using namespace halox;

// The caller's rank of every process of `g`, in g.comm() order: must be the mapping.
std::vector<int> world_ranks_in_grid_order(process_grid const& g) {
  int const me = world_rank();
  std::vector<int> out(g.size());
  MPI_Allgather(&me, 1, MPI_INT, out.data(), 1, MPI_INT, g.comm());
  return out;
}

grid_options fake(int nodes) {
  grid_options o;
  o.reorder = topology_reorder::nodes;
  o.fake_nodes = nodes;
  return o;
}

// Runs the halo oracle (forward and reverse) for a float32 tensor on the grid's communicator.
void expect_halo_matches_oracle(process_grid const& g, std::vector<index_t> const& shape,
                                bool periodic) {
  verify::halo_case c;
  c.shape = shape;
  c.dims = g.dims();
  for (std::size_t d = 0; d < shape.size(); ++d)
    c.options.push_back(dim_options::halo(1, periodic));
  c.types = {dtype::float32};
  c.padding = {0};
  auto const r = verify::run_halo_case(c, backend::mpi_pack, g.comm());
  EXPECT_EQ(r.forward.mismatches, 0u) << c.str() << ": " << r.forward.first_error;
  EXPECT_EQ(r.reverse.mismatches, 0u) << c.str() << ": " << r.reverse.first_error;
  EXPECT_GT(r.forward.checked, 0u);
}

} // namespace

// 2 fake nodes on a 2x2 grid over an 8x64 tensor: faces across dim 0 carry 8x as many bytes as
// across dim 1, so each node takes a grid column (processes 0,1 -> positions 0,2).
TEST(TopologyGrid, ReorderedGridFollowsMappingAndMatchesOracle) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  auto o = fake(2);
  o.element_size = 4;
  auto const g = process_grid::create(MPI_COMM_WORLD, {2, 2}, {8, 64}, {1, 1}, {1, 1}, {}, o);
  auto const& t = g.topology();
  EXPECT_TRUE(t.requested);
  EXPECT_TRUE(t.mapping.reordered);
  EXPECT_EQ(t.mapping.nodes, 2);
  EXPECT_EQ(t.mapping.process_of, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(t.mapping.before.inter_node, 512);
  EXPECT_EQ(t.mapping.after.inter_node, 64);
  EXPECT_EQ(world_ranks_in_grid_order(g), t.mapping.process_of);
  EXPECT_EQ(g.coords(), g.coords(g.rank()));
  expect_halo_matches_oracle(g, {8, 64}, false);
  expect_halo_matches_oracle(g, {8, 64}, true);
}

// 8 ranks, 2 fake nodes of 4 on a 2x4 grid over an 8x32 tensor (4x8 blocks): row-major puts a
// grid row on each node, 4 faces across dim 0 of 2 x 8 x 4 = 64 bytes cross (256); 2x2 (or 2x1)
// node boxes cut 2 faces across dim 1 of 2 x 4 x 4 = 32 bytes (64).
TEST(TopologyGrid, EightRanksGetNodeBoxes) {
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  auto o = fake(2);
  o.element_size = 4;
  auto const g = process_grid::create(MPI_COMM_WORLD, {2, 4}, {8, 32}, {1, 1}, {1, 1}, {}, o);
  auto const& m = g.topology().mapping;
  EXPECT_TRUE(m.reordered);
  EXPECT_EQ(m.before.inter_node, 256);
  EXPECT_EQ(m.after.inter_node, 64);
  EXPECT_EQ(world_ranks_in_grid_order(g), m.process_of);
  expect_halo_matches_oracle(g, {8, 32}, false);
  expect_halo_matches_oracle(g, {8, 32}, true);
}

// Every grid the rank count allows, with 2 fake nodes: never more inter-node bytes than the
// caller's order, the communicator follows the mapping, and halos still match the oracle.
TEST(TopologyGrid, NeverWorseThanCallerOrder) {
  int const n = world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 nodes";
  for (auto const& dims : std::vector<std::vector<int>>{{n}, {1, n}, {n, 1}, {0, 0}}) {
    std::vector<index_t> const shape =
        dims.size() == 2 ? std::vector<index_t>{12, 10} : std::vector<index_t>{30};
    std::vector<int> const halo(dims.size(), 1);
    auto const g = process_grid::create(MPI_COMM_WORLD, dims, shape, halo, halo, {}, fake(2));
    auto const& m = g.topology().mapping;
    EXPECT_LE(m.after.inter_node, m.before.inter_node);
    EXPECT_EQ(world_ranks_in_grid_order(g), m.process_of);
    if (!m.reordered) {
      EXPECT_EQ(g.rank(), world_rank());
    }
    expect_halo_matches_oracle(g, shape, false);
  }
}

TEST(TopologyGrid, ExplicitDimsConstructorAndDefaultOff) {
  int const n = world_size();
  process_grid const plain(MPI_COMM_WORLD, {n}, grid_options{});
  EXPECT_FALSE(plain.topology().requested);
  EXPECT_EQ(plain.rank(), world_rank());
  process_grid const g(MPI_COMM_WORLD, {n}, fake(1));
  EXPECT_TRUE(g.topology().requested);
  if (g.topology().mapping.sockets == 1) { // one node, one socket (or unbound): nothing to gain
    EXPECT_FALSE(g.topology().mapping.reordered);
    EXPECT_EQ(g.rank(), world_rank());
  }
  EXPECT_EQ(world_ranks_in_grid_order(g), g.topology().mapping.process_of);
}

TEST(TopologyGrid, RealNodesFromSharedMemory) {
  // On one machine every rank shares memory: one node, so the caller's order is kept.
  grid_options o;
  o.reorder = topology_reorder::nodes;
  if (char const* env = std::getenv("HALOX_FAKE_NODES"); env != nullptr && *env != '\0')
    GTEST_SKIP() << "HALOX_FAKE_NODES is set";
  process_grid const g(MPI_COMM_WORLD, {world_size()}, o);
  EXPECT_EQ(g.topology().mapping.nodes, 1);
  EXPECT_EQ(g.topology().mapping.before.inter_node, 0);
  EXPECT_EQ(g.topology().mapping.after.inter_node, 0);
  EXPECT_EQ(world_ranks_in_grid_order(g), g.topology().mapping.process_of);
}

TEST(TopologyGrid, EnvironmentEmulation) {
  int const n = world_size();
  grid_options o;
  o.reorder = topology_reorder::nodes;
  setenv("HALOX_FAKE_NODES", "abc", 1);
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, {n}, o); }, errc::invalid_argument,
                          "HALOX_FAKE_NODES=\"abc\" is not a whole number in [1, " +
                              std::to_string(n) + "]");
  setenv("HALOX_FAKE_NODES", std::to_string(n + 1).c_str(), 1);
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, {n}, o); }, errc::invalid_argument,
                          "HALOX_FAKE_NODES=\"" + std::to_string(n + 1) + "\"");
  setenv("HALOX_FAKE_NODES", std::to_string(n).c_str(), 1);
  {
    process_grid const g(MPI_COMM_WORLD, {n}, o);
    EXPECT_EQ(g.topology().mapping.nodes, n);
  }
  unsetenv("HALOX_FAKE_NODES");
  o.fake_nodes = -1;
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, {n}, o); }, errc::invalid_argument,
                          "grid_options::fake_nodes -1 is out of range");
  o.fake_nodes = 0;
  o.face_bytes = {1, 2};
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, {n}, o); }, errc::invalid_argument,
                          "grid_options::face_bytes has 2 entries for a grid of rank 1");
}
