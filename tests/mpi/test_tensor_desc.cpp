// tensor_desc over MPI_COMM_WORLD at every rank count the suite runs (1, 2, 3, 4, 6, 8).
//
// Every test reaches the same collectives on every rank whatever the outcome of its checks:
// only EXPECT_* around collectives, and skips decided from the world size alone.
#include <halox/error.hpp>
#include <halox/tensor_desc.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "support/mpi_helpers.hpp"
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace {

using halox::test::expect_error_everywhere;
using halox::test::world_rank;
using halox::test::world_size;

using halox::box;
using halox::dim_options;
using halox::dtype;
using halox::errc;
using halox::index_t;
using halox::process_grid;
using halox::tensor_desc;
using shape_t = std::vector<index_t>;

// Expects every rank to build the descriptor without an error (one all-reduce, always reached).
void expect_ok_everywhere(std::function<void()> const& f) {
  int ok = 1;
  try {
    f();
  } catch (std::exception const& e) {
    ok = 0;
    ADD_FAILURE() << "unexpected error: " << e.what();
  }
  int ok_total = 0;
  MPI_Allreduce(&ok, &ok_total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(ok_total, world_size()) << "some rank failed";
}

bool contains(box const& b, shape_t const& idx) {
  for (int d = 0; d < b.nd; ++d)
    if (idx[d] < b.lo[d] || idx[d] >= b.hi[d]) return false;
  return true;
}

// Calls f(idx) for every index of the box [lo, hi), row-major.
void for_each_index(shape_t const& lo, shape_t const& hi,
                    std::function<void(shape_t const&)> const& f) {
  int const nd = static_cast<int>(lo.size());
  for (int d = 0; d < nd; ++d)
    if (hi[d] <= lo[d]) return;
  shape_t idx = lo;
  while (true) {
    f(idx);
    int d = nd - 1;
    while (d >= 0 && ++idx[d] == hi[d]) {
      idx[d] = lo[d];
      --d;
    }
    if (d < 0) return;
  }
}

std::uint64_t fnv(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ull; }

// True on every rank iff `h` is the same on every rank.
bool same_everywhere(std::uint64_t h) {
  unsigned long long in[2] = {h, ~h}, out[2] = {0, 0};
  MPI_Allreduce(in, out, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return out[0] == in[0] && out[1] == in[1];
}

// The ownership invariants of one descriptor, checked on every rank:
// - the calling rank's owned box is what every other rank computes for it (allgather);
// - owned boxes are disjoint and cover the tensor; owner() names the box holding the index;
// - every rank computes the same owner map.
void check_ownership(tensor_desc const& t) {
  int const nd = t.ndim(), n = t.grid().size(), me = t.grid().rank();
  EXPECT_EQ(t.owned_box(), t.owned_box(me));

  std::vector<long long> mine(2 * nd), all(static_cast<std::size_t>(2 * nd) * n);
  box const ob = t.owned_box();
  for (int d = 0; d < nd; ++d) {
    mine[d] = ob.lo[d];
    mine[nd + d] = ob.hi[d];
  }
  MPI_Allgather(mine.data(), 2 * nd, MPI_LONG_LONG, all.data(), 2 * nd, MPI_LONG_LONG,
                MPI_COMM_WORLD);
  index_t volume = 0;
  for (int r = 0; r < n; ++r) {
    box const b = t.owned_box(r);
    for (int d = 0; d < nd; ++d) {
      EXPECT_EQ(b.lo[d], all[2 * nd * r + d]) << "rank " << r << " dim " << d;
      EXPECT_EQ(b.hi[d], all[2 * nd * r + nd + d]) << "rank " << r << " dim " << d;
    }
    volume += b.volume();
  }
  index_t total = 1;
  for (index_t e : t.shape()) total *= e;
  EXPECT_EQ(volume, total) << t.dist().str();

  std::uint64_t h = 1469598103934665603ull;
  for_each_index(shape_t(nd, 0), t.shape(), [&](shape_t const& idx) {
    int const o = t.owner(idx);
    h = fnv(h, static_cast<std::uint64_t>(o));
    EXPECT_TRUE(contains(t.owned_box(o), idx)) << "owner " << o << " of " << t.dist().str();
  });
  EXPECT_TRUE(same_everywhere(h)) << "ranks disagree on the owner map of " << t.dist().str();
}

} // namespace

TEST(TensorDesc, OwnershipAgreesAcrossRanks) {
  int const n = world_size();
  check_ownership(tensor_desc(process_grid(MPI_COMM_WORLD, {n}), {13}, dtype::float32));
  check_ownership(
      tensor_desc(process_grid::create(MPI_COMM_WORLD, {0, 0}, {7, 5}), {7, 5}, dtype::float64));
  check_ownership(tensor_desc(process_grid(MPI_COMM_WORLD, {n, 1, 1}), {3, 2, 5}, dtype::int32,
                              {dim_options::halo(1), {}, dim_options::halo(2, true)}));
  check_ownership(tensor_desc(process_grid(MPI_COMM_WORLD, {1, n}), {5, 6}, dtype::uint8));
  check_ownership(tensor_desc(process_grid::create(MPI_COMM_WORLD, {0, 0, 0, 0}, {2, 3, 4, 5}),
                              {2, 3, 4, 5}, dtype::bfloat16));

  // Explicit part sizes with empty parts in the middle: 0, 1, 2, 0, 1, 2, ... (+1 on the last).
  dim_options o;
  for (int i = 0; i < n; ++i) o.sizes.push_back(i % 3 + (i == n - 1 ? 1 : 0));
  index_t extent = 0;
  for (index_t s : o.sizes) extent += s;
  tensor_desc t(process_grid(MPI_COMM_WORLD, {n, 1}), {extent, 3}, dtype::float32, {o, {}});
  check_ownership(t);
  EXPECT_EQ(t.empty(), o.sizes[world_rank()] == 0);
}

TEST(TensorDesc, UnevenBlocks) {
  int const n = world_size();
  index_t const extent = 3 * n + (n + 1) / 2; // never a multiple of n for n > 1
  tensor_desc t(process_grid(MPI_COMM_WORLD, {n}), {extent}, dtype::float32,
                {dim_options{1, 2, false, {}}});
  index_t const q = extent / n, r = extent % n;
  index_t start = 0;
  for (int p = 0; p < n; ++p) {
    index_t const size = q + (p < r ? 1 : 0);
    box const b = t.owned_box(p);
    EXPECT_EQ(b.lo[0], start) << "part " << p;
    EXPECT_EQ(b.hi[0], start + size) << "part " << p;
    start += size;
  }
  index_t const my_size = q + (world_rank() < r ? 1 : 0);
  EXPECT_EQ(t.local_shape(), shape_t{my_size + 3});
  EXPECT_EQ(t.strides(), shape_t{1});
  EXPECT_EQ(t.local_elements(), my_size + 3);
  EXPECT_EQ(t.local_bytes(), static_cast<std::size_t>(my_size + 3) * 4);
}

TEST(TensorDesc, RanksThatOwnNothing) {
  int const n = world_size();
  // The last mini-batch of 3 samples, sample-parallel over n ranks, halo on the feature dim.
  tensor_desc t(process_grid(MPI_COMM_WORLD, {n, 1}), {3, 4}, dtype::float32,
                {dim_options{}, dim_options::halo(1)});
  bool const expect_empty = world_rank() >= 3;
  EXPECT_EQ(t.empty(), expect_empty);
  if (expect_empty) {
    EXPECT_TRUE(t.owned_box().empty());
    EXPECT_EQ(t.local_shape(), (shape_t{0, 0}));
    EXPECT_EQ(t.local_elements(), 0);
    EXPECT_EQ(t.local_bytes(), 0u);
    EXPECT_EQ(t.owned_offset(), (shape_t{0, 0}));
    EXPECT_EQ(t.owned_offset_elements(), 0);
  } else {
    index_t const rows = 3 / n + (world_rank() < 3 % n ? 1 : 0);
    EXPECT_EQ(t.local_shape(), (shape_t{rows, 6}));
    EXPECT_EQ(t.local_elements(), rows * 6);
    EXPECT_EQ(t.owned_offset(), (shape_t{0, 1}));
  }
  int owners = t.empty() ? 0 : 1, total = 0;
  MPI_Allreduce(&owners, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, std::min(n, 3));
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) EXPECT_LT(t.owner({i, j}), 3);
}

TEST(TensorDesc, LocalShapeAndDefaultStrides) {
  int const n = world_size();
  tensor_desc t(process_grid(MPI_COMM_WORLD, {n, 1, 1}), {2 * n + 1, 6, 5}, dtype::float64,
                {dim_options::halo(1), dim_options{2, 0, false, {}}, {}});
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.type(), dtype::float64);
  EXPECT_EQ(t.shape(), (shape_t{2 * n + 1, 6, 5}));
  index_t const rows = world_rank() == 0 ? 3 : 2;
  EXPECT_EQ(t.owned_box().extent(0), rows);
  EXPECT_EQ(t.local_shape(), (shape_t{rows + 2, 8, 5}));
  EXPECT_EQ(t.strides(), (shape_t{40, 5, 1}));
  EXPECT_EQ(t.local_elements(), (rows + 2) * 40);
  EXPECT_EQ(t.local_bytes(), static_cast<std::size_t>((rows + 2) * 40 * 8));
  EXPECT_EQ(t.owned_offset(), (shape_t{1, 2, 0}));
  EXPECT_EQ(t.owned_offset_elements(), 1 * 40 + 2 * 5);
}

TEST(TensorDesc, ExplicitStridesPaddedBuffer) {
  int const n = world_size();
  auto const grid = process_grid(MPI_COMM_WORLD, {n, 1});
  shape_t const shape{2 * n, 10};
  std::vector<dim_options> const halo{dim_options::halo(1), dim_options::halo(1)};
  // Local shape {4, 12}: rows padded to 16, column-major, and gaps in both dimensions.
  struct layout {
    shape_t strides;
    index_t elements;
  };
  for (auto const& l : {layout{{16, 1}, 3 * 16 + 11 + 1}, layout{{1, 4}, 3 + 11 * 4 + 1},
                        layout{{32, 2}, 3 * 32 + 11 * 2 + 1}}) {
    tensor_desc t(grid, shape, dtype::float32, halo, l.strides);
    EXPECT_EQ(t.local_shape(), (shape_t{4, 12}));
    EXPECT_EQ(t.strides(), l.strides);
    EXPECT_EQ(t.local_elements(), l.elements);
    EXPECT_EQ(t.owned_offset_elements(), l.strides[0] + l.strides[1]);
    box const o = t.owned_box();
    EXPECT_EQ(t.local_offset({o.lo[0], o.lo[1]}), t.owned_offset_elements());
  }
  // Strides are per rank and not part of the consistency check: each rank pads differently.
  expect_ok_everywhere([&] {
    tensor_desc t(grid, shape, dtype::float32, halo, {12 + world_rank(), 1});
    EXPECT_EQ(t.local_elements(), 3 * (12 + world_rank()) + 12);
  });
}

TEST(TensorDesc, LocalOffsetCoversTheAllocatedBox) {
  int const n = world_size();
  for (shape_t strides : {shape_t{}, shape_t{1, 5}, shape_t{11, 1}}) {
    // Local shape {3, 10} on every rank: one owned row plus a periodic halo of one each side.
    tensor_desc t(process_grid(MPI_COMM_WORLD, {n, 1}), {n, 7}, dtype::int64,
                  {dim_options::halo(1, true), dim_options{2, 1, false, {}}}, strides);
    if (strides.empty()) strides = {10, 1};
    box const a = t.dist().allocated_box(t.grid().rank());
    shape_t const alo{a.lo[0], a.lo[1]}, ahi{a.hi[0], a.hi[1]};
    EXPECT_EQ(alo, (shape_t{world_rank() - 1, -2}));
    EXPECT_EQ(ahi, (shape_t{world_rank() + 2, 8}));
    index_t largest = 0;
    for_each_index(alo, ahi, [&](shape_t const& idx) {
      index_t const want = (idx[0] - alo[0]) * strides[0] + (idx[1] - alo[1]) * strides[1];
      EXPECT_EQ(t.local_offset(idx), want);
      largest = std::max(largest, want);
    });
    EXPECT_EQ(t.local_elements(), largest + 1);
    EXPECT_EQ(t.local_offset({world_rank(), 0}), t.owned_offset_elements());
    // Outside the allocated box (no periodic wrapping), or the wrong rank of index.
    EXPECT_THROW((void)t.local_offset({alo[0] - 1, 0}), halox::error);
    EXPECT_THROW((void)t.local_offset({alo[0], ahi[1]}), halox::error);
    EXPECT_THROW((void)t.local_offset({alo[0]}), halox::error);
  }
}

TEST(TensorDesc, HaloAsWideAsTheExtentIsAccepted) {
  int const n = world_size();
  expect_ok_everywhere([&] {
    tensor_desc t(process_grid(MPI_COMM_WORLD, {1, n}), {4, 2 * n}, dtype::float32,
                  {dim_options::halo(4), dim_options::halo(1)});
    EXPECT_EQ(t.local_shape()[0], 12);
  });
}

// ---- every bad input raises halox::error on every rank ------------------------------------------

TEST(TensorDescErrors, NegativeHalo) {
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size(), 1}), {16, 4}, dtype::float32,
                      {dim_options{}, dim_options{0, -2, false, {}}});
      },
      errc::invalid_argument, "halo widths (0, -2) on dim 1 must not be negative");
}

TEST(TensorDescErrors, HaloWiderThanExtent) {
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size(), 1}), {16, 8}, dtype::float32,
                      {dim_options{}, dim_options::halo(9)});
      },
      errc::invalid_argument,
      "halo width 9 on dim 1 exceeds the global extent 8; use a width of at most 8 or make the "
      "dimension periodic");
}

TEST(TensorDescErrors, ZeroExtent) {
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size(), 1}), {0, 4}, dtype::float32);
      },
      errc::invalid_argument, "extent 0 on dim 0 must be positive");
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {1, world_size()}), {4, -3}, dtype::int32);
      },
      errc::invalid_argument, "extent -3 on dim 1 must be positive");
}

TEST(TensorDescErrors, RankAboveEight) {
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size(), 1}), shape_t(9, 2),
                      dtype::float32);
      },
      errc::invalid_argument, "tensor rank 9 is not supported; halox handles ranks 1 to 8");
  expect_error_everywhere(
      [] { tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size()}), {}, dtype::float32); },
      errc::invalid_argument, "tensor rank 0 is not supported");
}

TEST(TensorDescErrors, GridRankDiffersFromTensorRank) {
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size(), 1}), {8, 8, 8}, dtype::float32);
      },
      errc::invalid_argument, "the process grid has 2 dimensions but the tensor has 3");
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size(), 1}), {8, 8}, dtype::float32,
                      {dim_options{}});
      },
      errc::invalid_argument, "1 dim_options given for a tensor of rank 2");
}

TEST(TensorDescErrors, StridesSmallerThanTheShape) {
  int const n = world_size();
  auto const grid = process_grid(MPI_COMM_WORLD, {n, 1});
  std::vector<dim_options> const halo{dim_options::halo(1), dim_options::halo(1)};
  // Local shape {4, 12}.
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 10}, dtype::float32, halo, {11, 1});
      },
      errc::invalid_argument,
      "stride 11 on dim 0 is smaller than the 12 elements spanned by the faster dimensions");
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 10}, dtype::float32, halo, {1, 3});
      },
      errc::invalid_argument, "stride 3 on dim 1 is smaller than the 4 elements spanned");
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 10}, dtype::float32, halo, {12, 0});
      },
      errc::invalid_argument, "stride 0 on dim 1 must be at least 1");
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 10}, dtype::float32, halo, {12});
      },
      errc::invalid_argument, "1 strides given for a tensor of rank 2");
}

TEST(TensorDescErrors, UnknownDtype) {
  expect_error_everywhere(
      [] {
        tensor_desc t(process_grid(MPI_COMM_WORLD, {world_size()}), {16}, static_cast<dtype>(42));
      },
      errc::invalid_argument, "unknown dtype value 42");
}

TEST(TensorDescErrors, ExplicitSizesDoNotSumToTheExtent) {
  int const n = world_size();
  dim_options o;
  o.sizes.assign(n, 2);
  expect_error_everywhere(
      [&] { tensor_desc t(process_grid(MPI_COMM_WORLD, {n}), {2 * n + 1}, dtype::float32, {o}); },
      errc::invalid_argument,
      "explicit part sizes on dim 0 sum to " + std::to_string(2 * n) + " but the extent is " +
          std::to_string(2 * n + 1));
}

TEST(TensorDescErrors, RanksPassDifferentDescriptions) {
  int const n = world_size();
  if (n == 1) GTEST_SKIP() << "needs two ranks to disagree";
  int const me = world_rank();
  auto const grid = process_grid(MPI_COMM_WORLD, {n, 1});
  std::string const msg = "tensor_desc: ranks passed different global descriptions";
  // Each rank's input is valid on its own; only rank 0's (or the last rank's) differs.
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {me == 0 ? 2 * n + 1 : 2 * n, 4}, dtype::float32);
      },
      errc::inconsistent_ranks, msg);
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 4}, me == n - 1 ? dtype::int32 : dtype::float32);
      },
      errc::inconsistent_ranks, msg);
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 4}, dtype::float32,
                      {dim_options::halo(me == 1 ? 2 : 1), dim_options{}});
      },
      errc::inconsistent_ranks, msg);
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 4}, dtype::float32,
                      {dim_options::halo(1, me == 0), dim_options{}});
      },
      errc::inconsistent_ranks, msg);
}

TEST(TensorDescErrors, BadInputOnOneRank) {
  int const n = world_size(), me = world_rank();
  auto const grid = process_grid(MPI_COMM_WORLD, {n, 1});
  auto const others = [](int bad) {
    return "tensor_desc: rank " + std::to_string(bad) +
           " (of this communicator) rejected its input";
  };
  // The last rank passes a negative halo; the others name it.
  int const last = n - 1;
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 4}, dtype::float32,
                      {dim_options{me == last ? -1 : 1, 1, false, {}}, dim_options{}});
      },
      errc::invalid_argument, me == last ? "halo widths (-1, 1) on dim 0" : others(last));
  // Rank 0 passes strides that alias (strides are per rank, but still validated collectively).
  expect_error_everywhere(
      [&] {
        tensor_desc t(grid, {2 * n, 4}, dtype::float32, {}, me == 0 ? shape_t{3, 1} : shape_t{});
      },
      errc::invalid_argument, me == 0 ? "stride 3 on dim 0 is smaller than the 4" : others(0));
}
