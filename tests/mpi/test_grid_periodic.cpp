// process_grid::create with periodic flags: every rank gets the grid choose_grid picks for the
// same inputs, and a periodic dimension changes the choice where wrapped halos cross processes.
#include <halox/error.hpp>
#include <halox/grid.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "support/mpi_helpers.hpp"
#include <vector>

namespace {

using halox::test::expect_error_everywhere;
using halox::test::world_size;

using halox::choose_grid;
using halox::errc;
using halox::process_grid;

} // namespace

TEST(ProcessGridPeriodic, CreateFollowsChooseGrid) {
  int const n = world_size();
  std::vector<halox::index_t> const shape{16, 16};
  for (auto const& periodic : {std::vector<bool>{true, false}, std::vector<bool>{false, true},
                               std::vector<bool>{true, true}, std::vector<bool>{}}) {
    auto const g = process_grid::create(MPI_COMM_WORLD, {0, 0}, shape, {1, 1}, {1, 1}, periodic);
    EXPECT_EQ(g.dims(), choose_grid(n, {0, 0}, shape, {1, 1}, {1, 1}, periodic));
  }
  // At 2 ranks the periodic dimension stays whole: its wrapped halo then comes from the rank
  // itself (see the ChooseGrid unit tests for the counts).
  if (n == 2) {
    auto const g =
        process_grid::create(MPI_COMM_WORLD, {0, 0}, shape, {1, 1}, {1, 1}, {true, false});
    EXPECT_EQ(g.dims(), (std::vector<int>{1, 2}));
  }
}

TEST(ProcessGridPeriodic, WrongFlagCountFailsEverywhere) {
  expect_error_everywhere(
      [] {
        (void)process_grid::create(MPI_COMM_WORLD, {0, 0}, {8, 8}, {1, 1}, {1, 1}, {true});
      },
      errc::invalid_argument, "periodic has 1 entries; give one per dimension or none");
}
