#include <halox/distribution.hpp>
#include <halox/error.hpp>
#include <halox/grid.hpp>

#include <gtest/gtest.h>

using namespace halox;

namespace {
// Expects `f` to throw halox::error whose message contains `needle`.
template <class F> void expect_error(F&& f, std::string const& needle) {
  try {
    f();
    ADD_FAILURE() << "expected halox::error containing '" << needle << "'";
  } catch (error const& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), errc::invalid_argument);
  }
}
} // namespace

TEST(Distribution, BalancedBlocksWithRemainder) {
  distribution d({10}, dtype::float32, {4});
  EXPECT_EQ(d.part_size(0, 0), 3);
  EXPECT_EQ(d.part_size(0, 1), 3);
  EXPECT_EQ(d.part_size(0, 2), 2);
  EXPECT_EQ(d.part_size(0, 3), 2);
  EXPECT_EQ(d.part_start(0, 3), 8);
  for (index_t i = 0; i < 10; ++i) {
    int p = d.part_of(0, i);
    EXPECT_GE(i, d.part_start(0, p));
    EXPECT_LT(i, d.part_start(0, p) + d.part_size(0, p));
  }
}

TEST(Distribution, MorePartsThanElementsLeavesEmptyRanks) {
  // The last mini-batch of 3 samples over 8 sample-parallel ranks.
  distribution d({3, 4}, dtype::float64, {8, 1}, {dim_options{}, dim_options::halo(1)});
  int owners = 0;
  for (int r = 0; r < 8; ++r) {
    if (!d.empty(r))
      ++owners;
    else {
      EXPECT_EQ(d.local_shape(r), (std::vector<index_t>{0, 0}));
      EXPECT_TRUE(d.allocated_box(r).empty());
    }
  }
  EXPECT_EQ(owners, 3);
  EXPECT_EQ(d.owner({2, 3}), 2);
}

TEST(Distribution, ExplicitSizesAndEmptyMiddlePart) {
  dim_options o;
  o.sizes = {2, 0, 3};
  distribution d({5}, dtype::int32, {3}, {o});
  EXPECT_TRUE(d.empty(1));
  EXPECT_EQ(d.part_of(0, 2), 2);
  EXPECT_EQ(d.owner({1}), 0);
}

TEST(Distribution, AllocatedBoxAndStrides) {
  dim_options a{1, 2, false, {}};
  distribution d({8, 6}, dtype::float32, {2, 1}, {a, dim_options::halo(1)});
  box b = d.allocated_box(1);
  EXPECT_EQ(b.lo[0], 3);
  EXPECT_EQ(b.hi[0], 10);
  EXPECT_EQ(d.local_shape(1), (std::vector<index_t>{7, 8}));
  EXPECT_EQ(d.default_strides(1), (std::vector<index_t>{8, 1}));
}

TEST(Distribution, RowMajorRankOrder) {
  distribution d({4, 6, 8}, dtype::float32, {2, 3, 2});
  EXPECT_EQ(d.rank_of({1, 2, 1}), 11);
  EXPECT_EQ(d.coords_of(7), (coords_t{1, 0, 1}));
}

TEST(Distribution, HashDistinguishesDescriptions) {
  distribution a({8, 8}, dtype::float32, {2, 2});
  distribution b({8, 8}, dtype::float32, {2, 2}, {dim_options::halo(1), dim_options::halo(1)});
  distribution c({8, 8}, dtype::float64, {2, 2});
  EXPECT_NE(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_EQ(a.hash(), distribution({8, 8}, dtype::float32, {2, 2}).hash());
  EXPECT_TRUE(a == distribution({8, 8}, dtype::float32, {2, 2}));
}

TEST(DistributionErrors, RankTooLarge) {
  expect_error(
      [] {
        distribution({1, 1, 1, 1, 1, 1, 1, 1, 1}, dtype::float32, {1, 1, 1, 1, 1, 1, 1, 1, 1});
      },
      "tensor rank 9 is not supported");
}
TEST(DistributionErrors, ZeroExtent) {
  expect_error([] { distribution({4, 0}, dtype::float32, {1, 1}); }, "extent 0 on dim 1");
}
TEST(DistributionErrors, NegativeHalo) {
  expect_error(
      [] {
        distribution({4}, dtype::float32, {1}, {dim_options{-1, 0, false, {}}});
      },
      "must not be negative");
}
TEST(DistributionErrors, HaloWiderThanExtent) {
  expect_error(
      [] {
        distribution({4, 8}, dtype::float32, {1, 1}, {dim_options{}, dim_options::halo(9)});
      },
      "halo width 9 on dim 1 exceeds the global extent 8");
}
TEST(DistributionErrors, PeriodicHaloMayWrapSeveralTimes) {
  EXPECT_NO_THROW(distribution({4}, dtype::float32, {2}, {dim_options::halo(9, true)}));
}
TEST(DistributionErrors, UnknownDtype) {
  expect_error([] { distribution({4}, static_cast<dtype>(42), {1}); }, "unknown dtype");
}
TEST(DistributionErrors, SizesDoNotSum) {
  dim_options o;
  o.sizes = {2, 1};
  expect_error([&] { distribution({5}, dtype::float32, {2}, {o}); }, "sum to 3");
}
TEST(DistributionErrors, GridRankMismatch) {
  expect_error([] { distribution({4, 4}, dtype::float32, {2}); }, "one process count per tensor");
}
TEST(DistributionErrors, StridesSmallerThanShape) {
  expect_error(
      [] {
        validate_strides({4, 6}, {5, 1});
      },
      "stride 5 on dim 0 is smaller than the 6 elements");
  EXPECT_NO_THROW(validate_strides({4, 6}, {8, 1}));
  EXPECT_NO_THROW(validate_strides({4, 6}, {1, 4}));
  EXPECT_EQ(required_elements({4, 6}, {8, 1}), 30);
}

TEST(ChooseGrid, PrefersSampleParallelWithoutBatchHalo) {
  // NCHW, halos only on H and W: splitting N costs no halo traffic.
  auto g = choose_grid(4, {0, 1, 0, 0}, {32, 64, 128, 128}, {0, 0, 1, 1}, {0, 0, 1, 1});
  EXPECT_EQ(g, (std::vector<int>{4, 1, 1, 1}));
}

TEST(ChooseGrid, SplitsTheLongDimensionOfAFlatDomain) {
  // 1024 x 16 with halos everywhere: cutting across the long side minimises the surface.
  auto g = choose_grid(4, {0, 0}, {1024, 16}, {1, 1}, {1, 1});
  EXPECT_EQ(g, (std::vector<int>{4, 1}));
  // Unsplit dimensions exchange nothing, so small counts favour slabs/pencils; at 64 ranks the
  // cube wins.
  auto cube = choose_grid(64, {0, 0, 0}, {64, 64, 64}, {1, 1, 1}, {1, 1, 1});
  EXPECT_EQ(cube, (std::vector<int>{4, 4, 4}));
}

TEST(ChooseGrid, AvoidsEmptyRanksWhenPossible) {
  auto g = choose_grid(4, {0, 0}, {2, 100}, {0, 1}, {0, 1});
  EXPECT_LE(g[0], 2);
  EXPECT_EQ(g[0] * g[1], 4);
}

TEST(ChooseGrid, KeepsFixedEntries) {
  auto g = choose_grid(12, {0, 3, 0}, {30, 30, 30}, {1, 1, 1}, {1, 1, 1});
  EXPECT_EQ(g[1], 3);
  EXPECT_EQ(g[0] * g[1] * g[2], 12);
  expect_error([] { (void)choose_grid(6, {4, 0}, {8, 8}, {}, {}); }, "does not divide");
  expect_error([] { (void)choose_grid(8, {2, 2}, {8, 8}, {}, {}); }, "has 4 processes");
}
