// Extreme values on one rank are errors on every rank: a huge part count, an extent near 2^63
// or strides whose offsets overflow, passed by a single rank, make every rank throw
// halox::error (the one with the bad input names the value) instead of crashing or hanging.
#include <halox/error.hpp>
#include <halox/grid.hpp>
#include <halox/tensor_desc.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "support/mpi_helpers.hpp"
#include <climits>
#include <string>
#include <vector>

namespace {

using halox::test::expect_error_everywhere;
using halox::test::world_rank;
using halox::test::world_size;

using namespace halox;

std::string rejected_by(int bad, char const* what) {
  return std::string(what) + ": rank " + std::to_string(bad) +
         " (of this communicator) rejected its input";
}

} // namespace

TEST(ExtremeValuesEverywhere, HugePartCountOnOneRank) {
  int const n = world_size(), bad = n - 1;
  bool const is_bad = world_rank() == bad;
  // 2^31 - 1 processes along dim 0 on one rank only.
  std::vector<int> dims = is_bad ? std::vector<int>{INT_MAX, n} : std::vector<int>{n, 1};
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, dims); }, errc::invalid_argument,
                          is_bad ? "grid 2147483647x" + std::to_string(n) + " has " +
                                       std::to_string(static_cast<long long>(INT_MAX) * n) +
                                       " processes"
                                 : rejected_by(bad, "process_grid"));
  // Products past 64 bits: counted without overflowing.
  std::vector<int> many = is_bad ? std::vector<int>(4, INT_MAX) : std::vector<int>{n, 1, 1, 1};
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, many); }, errc::invalid_argument,
                          is_bad ? "has more than 2^63-1" : rejected_by(bad, "process_grid"));
  // The same through create: the bad rank fails while choosing.
  std::vector<int> fixed = is_bad ? std::vector<int>{INT_MAX, 0} : std::vector<int>{0, 0};
  expect_error_everywhere(
      [&] {
        (void)process_grid::create(MPI_COMM_WORLD, fixed, {16, 16});
      },
      errc::invalid_argument, is_bad ? "multiply to 2147483647" : rejected_by(bad, "process_grid"));
}

TEST(ExtremeValuesEverywhere, HugeExtentOnOneRank) {
  int const n = world_size(), bad = 0;
  bool const is_bad = world_rank() == bad;
  process_grid const grid(MPI_COMM_WORLD, {n, 1});
  index_t const two_62 = index_t{1} << 62;
  std::vector<index_t> shape =
      is_bad ? std::vector<index_t>{two_62, 4} : std::vector<index_t>{8, 4};
  expect_error_everywhere([&] { tensor_desc t(grid, shape, dtype::float32); },
                          errc::invalid_argument,
                          is_bad ? "the shape 4611686018427387904x4 has more than 2^63-1"
                                 : rejected_by(bad, "tensor_desc"));
}

TEST(ExtremeValuesEverywhere, OverflowingStridesOnOneRank) {
  int const n = world_size(), bad = n - 1;
  bool const is_bad = world_rank() == bad;
  process_grid const grid(MPI_COMM_WORLD, {1, n});
  // Every rank owns 4 x (at least 1) cells; the bad rank's row stride puts its last row at
  // 3 * 2^62, past the index limit. Strides are per rank, so only the check says so.
  std::vector<index_t> strides =
      is_bad ? std::vector<index_t>{index_t{1} << 62, 1} : std::vector<index_t>{};
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {4, 2 * static_cast<index_t>(n)}, dtype::float32, {}, strides);
      },
      errc::invalid_argument,
      is_bad ? "stride 4611686018427387904 on dim 0" : rejected_by(bad, "tensor_desc"));
}
