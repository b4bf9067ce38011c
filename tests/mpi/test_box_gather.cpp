// The public box-gather plan over MPI_COMM_WORLD at every rank count the suite runs: each
// rank's workspace is compared with the global tensor (the serial oracle: every cell's value is
// a function of its global index), with halo cells of the source poisoned so that reading one
// shows. Every rank reaches the same collectives whatever its checks found.
#include <halox/box_gather.hpp>
#include <halox/error.hpp>
#include <halox/grid.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "support/mpi_helpers.hpp"
#include <random>
#include <string>
#include <vector>

using namespace halox;

namespace {

using halox::test::expect_error_everywhere;
using halox::test::world_size;
using need_t = std::vector<std::vector<index_range>>;

constexpr double poison = -1e9;  // halo cells of the source
constexpr double untouched = -3; // workspace cells before the gather

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

// The calling rank's buffer of `t`: owned cells hold their global value, halo cells the poison.
std::vector<double> source(tensor_desc const& t) {
  distribution const& dist = t.dist();
  int const me = t.grid().rank();
  box const a = dist.allocated_box(me);
  std::vector<double> buf(t.local_elements(), poison);
  for_each_index(t.owned_box(), [&](std::vector<index_t> const& g) {
    index_t off = 0;
    for (int d = 0; d < dist.ndim(); ++d) off += (g[d] - a.lo[d]) * t.strides()[d];
    buf[static_cast<std::size_t>(off)] = value_at(g, dist.shape());
  });
  return buf;
}

// Gathers `need` with `o` and checks every workspace cell; `copied(g)` says whether an owned
// cell g is expected in the workspace (own_copy_boxes), the other cells always are.
template <class Copied>
void check(tensor_desc const& t, need_t const& need, box_gather_options const& o, Copied&& copied) {
  box_gather_plan plan(t, need, o);
  auto src = source(t);
  std::vector<double> ws(static_cast<std::size_t>(plan.elements()), untouched);
  EXPECT_EQ(plan.workspace_bytes(), ws.size() * sizeof(double));
  for (int rep = 0; rep < 2; ++rep) // plans are reusable
    plan.execute(tensor_view(t, src), ws.data());
  box const mine = plan.my_box();
  box const own = t.owned_box();
  std::size_t k = 0;
  for_each_index(mine, [&](std::vector<index_t> const& g) {
    bool owned = true;
    for (int d = 0; d < mine.nd; ++d) owned = owned && g[d] >= own.lo[d] && g[d] < own.hi[d];
    double const want = !owned || copied(g) ? value_at(g, t.shape()) : untouched;
    EXPECT_EQ(ws[k], want) << "cell " << k << " of " << plan.describe();
    ++k;
  });
  EXPECT_EQ(k, ws.size());
  for (int d = 0; d < mine.nd && !mine.empty(); ++d) {
    EXPECT_EQ(plan.origin()[d], mine.lo[d]);
    EXPECT_EQ(plan.shape()[d], mine.extent(d));
  }
}

auto const everything = [](std::vector<index_t> const&) { return true; };

box_gather_options with(backend b) {
  box_gather_options o;
  o.method = b;
  return o;
}

} // namespace

TEST(BoxGatherPlan, WholeTensorOnEveryRankIncludingOneThatOwnsNothing) {
  int const n = world_size();
  // The last part owns nothing (when there is more than one) but still needs every cell.
  dim_options o0 = dim_options::halo(1);
  for (int p = 0; p < n; ++p) o0.sizes.push_back(n == 1 ? 7 : (p + 1 < n ? 3 + p : 0));
  index_t total = 0;
  for (index_t s : o0.sizes) total += s;
  process_grid grid(MPI_COMM_WORLD, {n, 1});
  tensor_desc t(grid, {total, 3}, dtype::float64, {o0, dim_options::halo(1)});
  need_t need{std::vector<index_range>(n, index_range{0, total}), {{0, 3}}};
  for (backend b : {backend::mpi_pack, backend::mpi_datatype, backend::alltoallv})
    check(t, need, with(b), everything);
}

TEST(BoxGatherPlan, BlockOfANonAdjacentRank) {
  int const n = world_size();
  process_grid grid(MPI_COMM_WORLD, {n});
  tensor_desc t(grid, {static_cast<index_t>(4 * n + 1)}, dtype::float64, {dim_options::halo(2)});
  need_t need(1);
  for (int p = 0; p < n; ++p) { // part p needs all of part p + 2 and one cell of part p + 3
    int const q = (p + 2) % n;
    index_t const lo = t.dist().part_start(0, q);
    need[0].push_back({lo, std::min<index_t>(lo + t.dist().part_size(0, q) + 1, t.shape()[0])});
  }
  check(t, need, with(backend::mpi_pack), everything);
}

TEST(BoxGatherPlan, RandomBoxesOnATwoDimensionalGrid) {
  int const n = world_size();
  std::vector<int> dims = n % 2 == 0 ? std::vector<int>{n / 2, 2} : std::vector<int>{n, 1};
  process_grid grid(MPI_COMM_WORLD, {dims[0], dims[1], 1});
  std::mt19937 rng(1234); // the same on every rank: the need ranges are global
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<index_t> shape{5 + trial, 4 + 2 * trial, 3};
    tensor_desc t(grid, shape, dtype::float64,
                  {dim_options::halo(1), dim_options::halo(trial % 2), dim_options{}});
    need_t need(3);
    for (int d = 0; d < 3; ++d)
      for (int p = 0; p < t.dist().parts()[d]; ++p) {
        std::uniform_int_distribution<index_t> pos(0, shape[d]);
        index_t const a = pos(rng), b = pos(rng);
        need[d].push_back({std::min(a, b), std::max(a, b)});
      }
    check(t, need, with(backend::mpi_pack), everything);
  }
}

TEST(BoxGatherPlan, OwnCopyBoxesLeaveTheRestOfTheOwnBlockUntouched) {
  int const n = world_size();
  process_grid grid(MPI_COMM_WORLD, {n, 1});
  tensor_desc t(grid, {static_cast<index_t>(3 * n), 4}, dtype::float64);
  need_t need{std::vector<index_range>(n, index_range{0, 3 * n}), {{0, 4}}};
  box_gather_options o = with(backend::mpi_pack);
  box half = t.owned_box(); // only the first column of the own block is copied
  half.hi[1] = 1;
  o.own_copy_boxes = std::vector<box>{half};
  check(t, need, o, [](std::vector<index_t> const& g) { return g[1] < 1; });
}

TEST(BoxGatherPlan, RejectsBadOrInconsistentArgumentsOnEveryRank) {
  int const n = world_size();
  process_grid grid(MPI_COMM_WORLD, {n});
  tensor_desc t(grid, {static_cast<index_t>(2 * n)}, dtype::float64);
  expect_error_everywhere(
      [&] {
        box_gather_plan p(t, {std::vector<index_range>(n, index_range{0, 2 * n + 1})});
      },
      errc::invalid_argument, "leaves the global extent");
  expect_error_everywhere([&] { box_gather_plan p(t, {{}}); }, errc::invalid_argument,
                          "pass one range per part");
  if (n > 1) { // rank 0 alone asks for more: every rank must notice
    need_t need{std::vector<index_range>(n, index_range{0, 1})};
    if (grid.rank() == 0) need[0][1].hi = 2;
    expect_error_everywhere([&] { box_gather_plan p(t, need); }, errc::inconsistent_ranks,
                            "box_gather_plan");
  }
  // A backend for the other memory space, on every rank.
  box_gather_options dev = with(backend::mpi_pack);
  dev.memory = memory_space::device;
  expect_error_everywhere(
      [&] {
        box_gather_plan p(t, {std::vector<index_range>(n, index_range{0, 2})}, dev);
      },
      errc::unsupported, "not available for device memory");
  box_gather_plan plan(t, {std::vector<index_range>(n, index_range{0, 2})},
                       with(backend::mpi_pack));
  auto src = source(t);
  std::vector<double> ws(2);
  tensor_desc other(grid, {static_cast<index_t>(2 * n + 1)}, dtype::float64);
  expect_error_everywhere([&] { plan.start(tensor_view(other, src), ws.data()); },
                          errc::invalid_argument, "source buffer");
  expect_error_everywhere([&] { plan.start(tensor_view(t, src), nullptr); }, errc::invalid_argument,
                          "workspace is a null pointer");
  EXPECT_NE(plan.describe().find("box_gather_plan"), std::string::npos);
}
