// process_grid over MPI_COMM_WORLD at every rank count the suite runs (1, 2, 3, 4, 6, 8).
//
// Every test reaches the same collectives on every rank whatever the outcome of its checks:
// only EXPECT_* around collectives, and skips decided from the world size alone.
#include <halox/error.hpp>
#include <halox/grid.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "support/mpi_helpers.hpp"
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace {

using halox::test::expect_error_everywhere;
using halox::test::world_rank;
using halox::test::world_size;

using halox::errc;
using halox::process_grid;

int product(std::vector<int> const& v) {
  return std::accumulate(v.begin(), v.end(), 1, std::multiplies<int>());
}

// Row-major rank of `c` over the dimensions where `keep` is true.
int kept_index(std::vector<int> const& c, std::vector<int> const& dims,
               std::vector<bool> const& keep) {
  int r = 0;
  for (std::size_t d = 0; d < dims.size(); ++d)
    if (keep[d]) r = r * dims[d] + c[d];
  return r;
}

// A few 4-d factorisations of `n` (NCHW-like grids), each splitting more than one dimension
// when `n` allows.
std::vector<std::vector<int>> grids_4d(int n) {
  std::vector<std::vector<int>> g = {{n, 1, 1, 1}, {1, 1, 1, n}};
  if (n % 2 == 0) g.push_back({n / 2, 2, 1, 1});
  if (n % 4 == 0) g.push_back({1, 2, n / 4, 2});
  if (n % 6 == 0) g.push_back({1, 3, 1, n / 3});
  return g;
}

} // namespace

TEST(ProcessGrid, ExplicitDims) {
  int const n = world_size();
  for (auto const& dims : std::vector<std::vector<int>>{{n}, {n, 1}, {1, n}, {1, n, 1}}) {
    process_grid g(MPI_COMM_WORLD, dims);
    EXPECT_EQ(g.dims(), dims);
    EXPECT_EQ(g.ndim(), static_cast<int>(dims.size()));
    EXPECT_EQ(g.size(), n);
    // The duplicate keeps the caller's rank order.
    EXPECT_EQ(g.rank(), world_rank());
    EXPECT_EQ(g.coords(), g.coords(g.rank()));
  }
}

TEST(ProcessGrid, CoordsRoundTripRowMajor) {
  for (auto const& dims : grids_4d(world_size())) {
    process_grid g(MPI_COMM_WORLD, dims);
    for (int r = 0; r < g.size(); ++r) {
      auto const c = g.coords(r);
      ASSERT_EQ(c.size(), dims.size());
      for (std::size_t d = 0; d < dims.size(); ++d) {
        EXPECT_GE(c[d], 0);
        EXPECT_LT(c[d], dims[d]);
      }
      EXPECT_EQ(g.rank_of(c), r);
      // Last dimension fastest, like MPI_Cart.
      EXPECT_EQ(kept_index(c, dims, {true, true, true, true}), r);
    }
  }
}

TEST(ProcessGrid, CoordsOutOfRangeThrowLocally) {
  process_grid g(MPI_COMM_WORLD, {1, world_size()});
  EXPECT_THROW((void)g.coords(-1), halox::error);
  EXPECT_THROW((void)g.coords(g.size()), halox::error);
  EXPECT_THROW((void)g.rank_of({0, g.size()}), halox::error);
  EXPECT_THROW((void)g.rank_of({1, 0}), halox::error);
  EXPECT_THROW((void)g.rank_of({0}), halox::error);
}

TEST(ProcessGrid, CreateChoosesZeros) {
  int const n = world_size();
  // All free: the product is the communicator size, and every rank chose the same grid.
  auto g = process_grid::create(MPI_COMM_WORLD, {0, 0}, {12, 10}, {1, 1}, {1, 1});
  EXPECT_EQ(g.size(), n);
  EXPECT_EQ(product(g.dims()), n);
  std::vector<int> mine = g.dims(), root = g.dims();
  MPI_Bcast(root.data(), 2, MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, root);

  // Fixed entries are kept.
  auto h = process_grid::create(MPI_COMM_WORLD, {1, 0}, {12, 10});
  EXPECT_EQ(h.dims(), (std::vector<int>{1, n}));

  // NCHW with halos only on H and W: H and W stay whole (no halo traffic), and when the batch
  // divides evenly the grid is sample-parallel.
  auto s = process_grid::create(MPI_COMM_WORLD, {0, 0, 0, 0}, {32, 64, 128, 128}, {0, 0, 1, 1},
                                {0, 0, 1, 1});
  EXPECT_EQ(s.dims()[2], 1);
  EXPECT_EQ(s.dims()[3], 1);
  if (32 % n == 0) EXPECT_EQ(s.dims(), (std::vector<int>{n, 1, 1, 1}));

  // Never more parts than elements when avoidable: 3 elements on dim 0.
  auto t = process_grid::create(MPI_COMM_WORLD, {0, 0}, {3, 64});
  EXPECT_LE(t.dims()[0], 3);
  EXPECT_EQ(product(t.dims()), n);
}

TEST(ProcessGrid, SubCommSizesAndOrder) {
  // Only the grid that splits the most dimensions: 16 splits per grid are slow oversubscribed.
  auto const dims = grids_4d(world_size()).back();
  process_grid g(MPI_COMM_WORLD, dims);
  auto const me = g.coords();
  for (int mask = 0; mask < 16; ++mask) {
    std::vector<bool> keep(4);
    std::vector<int> kept_dims;
    for (int d = 0; d < 4; ++d) {
      keep[d] = (mask >> (3 - d)) & 1;
      kept_dims.push_back(keep[d] ? dims[d] : 1);
    }
    auto const sub = g.sub_comm(keep);
    int const sub_size = sub.size();
    EXPECT_EQ(sub_size, product(kept_dims)) << "mask " << mask;
    EXPECT_EQ(sub.rank(), kept_index(me, dims, keep)) << "mask " << mask;
    // Every member shares our coordinates on the dropped dimensions, and member i sits at
    // row-major position i over the kept ones.
    std::vector<int> all(static_cast<std::size_t>(sub_size) * 4);
    MPI_Allgather(me.data(), 4, MPI_INT, all.data(), 4, MPI_INT, sub.get());
    for (int i = 0; i < sub_size; ++i) {
      std::vector<int> c(all.begin() + 4 * i, all.begin() + 4 * i + 4);
      EXPECT_EQ(kept_index(c, dims, keep), i) << "mask " << mask;
      for (int d = 0; d < 4; ++d)
        if (!keep[d]) EXPECT_EQ(c[d], me[d]) << "mask " << mask << " dim " << d;
    }
  }
}

TEST(ProcessGrid, SubCommBatchNorm) {
  // NCHW batch norm: statistics over N, H and W, one communicator per channel group.
  int const n = world_size();
  std::vector<int> dims =
      n % 2 == 0 ? std::vector<int>{1, 2, 1, n / 2} : std::vector<int>{n, 1, 1, 1};
  process_grid g(MPI_COMM_WORLD, dims);
  auto const sub = g.sub_comm({true, false, true, true});
  EXPECT_EQ(sub.size(), n / dims[1]);
  // Members of one sub-communicator all sit at the same channel coordinate.
  int c = g.coords()[1], cmin = 0, cmax = 0;
  MPI_Allreduce(&c, &cmin, 1, MPI_INT, MPI_MIN, sub.get());
  MPI_Allreduce(&c, &cmax, 1, MPI_INT, MPI_MAX, sub.get());
  EXPECT_EQ(cmin, c);
  EXPECT_EQ(cmax, c);
}

TEST(ProcessGrid, SubCommWrongFlagCountThrows) {
  process_grid g(MPI_COMM_WORLD, {world_size(), 1});
  // Checked before any collective, identically on every rank.
  expect_error_everywhere([&] { (void)g.sub_comm({true}); }, errc::invalid_argument,
                          "sub_comm got 1 flags for a grid of rank 2");
}

TEST(ProcessGrid, DuplicatesTheCommunicator) {
  process_grid g(MPI_COMM_WORLD, {world_size()});
  EXPECT_NE(g.comm(), MPI_COMM_WORLD);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(g.comm(), MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);

  // Copies share the duplicate; a second grid gets its own.
  process_grid copy = g;
  EXPECT_EQ(copy.comm(), g.comm());
  process_grid other(MPI_COMM_WORLD, {world_size()});
  MPI_Comm_compare(other.comm(), g.comm(), &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);

  // The duplicate outlives the grid it was copied from.
  process_grid kept = [] {
    process_grid tmp(MPI_COMM_WORLD, {world_size()});
    return tmp;
  }();
  int sum = 0, one = 1;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, kept.comm());
  EXPECT_EQ(sum, world_size());
}

TEST(ProcessGridErrors, ProductDiffersFromCommSize) {
  int const n = world_size();
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, {n + 1}); }, errc::invalid_argument,
                          "grid " + std::to_string(n + 1) + " has " + std::to_string(n + 1) +
                              " processes but the communicator has " + std::to_string(n));
  expect_error_everywhere(
      [&] {
        process_grid g(MPI_COMM_WORLD, {2, n});
      },
      errc::invalid_argument,
      "grid 2x" + std::to_string(n) + " has " + std::to_string(2 * n) +
          " processes but the communicator has " + std::to_string(n));
}

TEST(ProcessGridErrors, NonPositiveCounts) {
  int const n = world_size();
  expect_error_everywhere(
      [&] {
        process_grid g(MPI_COMM_WORLD, {n, 0});
      },
      errc::invalid_argument, "process count 0 on dim 1 must be positive");
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, {-n}); }, errc::invalid_argument,
                          "process count " + std::to_string(-n) + " on dim 0 must be positive");
  expect_error_everywhere(
      [&] {
        (void)process_grid::create(MPI_COMM_WORLD, {-1, 0}, {4, 4});
      },
      errc::invalid_argument, "process count -1 on dim 0 must be positive");
}

TEST(ProcessGridErrors, RankAboveEight) {
  std::vector<int> dims(9, 1);
  dims[0] = world_size();
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, dims); }, errc::invalid_argument,
                          "grid rank 9 is not supported");
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, {}); }, errc::invalid_argument,
                          "grid rank 0 is not supported");
  expect_error_everywhere(
      [&] {
        (void)process_grid::create(MPI_COMM_WORLD, std::vector<int>(9, 0),
                                   std::vector<halox::index_t>(9, 4));
      },
      errc::invalid_argument, "grid rank 9 is not supported");
}

TEST(ProcessGridErrors, CreateFixedEntriesDoNotDivide) {
  int const n = world_size();
  expect_error_everywhere(
      [&] {
        (void)process_grid::create(MPI_COMM_WORLD, {n + 1, 0}, {16, 16});
      },
      errc::invalid_argument,
      "multiply to " + std::to_string(n + 1) + ", which does not divide the " + std::to_string(n) +
          " processes");
}

TEST(ProcessGridErrors, RanksPassDifferentDims) {
  int const n = world_size();
  if (n == 1) GTEST_SKIP() << "needs two ranks to disagree";
  // Each rank's dims are valid on their own; they just differ.
  std::vector<int> dims = world_rank() == 0 ? std::vector<int>{1, n} : std::vector<int>{n, 1};
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, dims); }, errc::inconsistent_ranks,
                          "process_grid: ranks passed different global descriptions");
}

TEST(ProcessGridErrors, BadInputOnOneRank) {
  int const n = world_size(), bad = n - 1;
  bool const is_bad = world_rank() == bad;
  std::vector<int> dims = is_bad ? std::vector<int>{0} : std::vector<int>{n};
  std::string const others =
      "process_grid: rank " + std::to_string(bad) + " (of this communicator) rejected its input";
  expect_error_everywhere([&] { process_grid g(MPI_COMM_WORLD, dims); }, errc::invalid_argument,
                          is_bad ? "process count 0 on dim 0 must be positive" : others);

  // The same through create: the bad rank fails while choosing, the others in the constructor.
  std::vector<int> fixed = is_bad ? std::vector<int>{n + 1, 0} : std::vector<int>{0, 0};
  expect_error_everywhere(
      [&] {
        (void)process_grid::create(MPI_COMM_WORLD, fixed, {16, 16});
      },
      errc::invalid_argument,
      is_bad ? "which does not divide"
             : "rank " + std::to_string(bad) + " (of this communicator) rejected its input");
}
