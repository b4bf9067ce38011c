// deep_halo_schedule: a 3-D star-stencil Jacobi run for several steps with one exchange every
// `depth` steps must give, bit for bit, the owned cells of the same steps computed serially on
// the whole tensor (the oracle). Uneven and explicit blocks, a block of one cell (thinner than
// the halo), a rank owning nothing (at 3+ ranks along dim 0), one periodic dimension, and cells
// beyond non-periodic boundaries that hold a fixed boundary value.
#include <halox/deep_halo.hpp>
#include <halox/error.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "support/mpi_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using halox::box;
using halox::deep_halo_schedule;
using halox::dim_options;
using halox::errc;
using halox::index_t;
using halox::test::expect_error_everywhere;
using halox::test::world_rank;
using halox::test::world_size;

constexpr double boundary_value = 0.25;

// One Jacobi update of a star stencil: `at(d, o)` is the neighbour `o` cells away along `d`
// (o = 0: the cell). The oracle and the distributed run call this same function, so each cell
// sees the same operations in the same order.
template <class At> double star(At const& at, std::vector<int> const& radius) {
  int total = 0;
  for (int r : radius) total += 2 * r;
  double sum = 0.0;
  for (int d = 0; d < 3; ++d)
    for (int o = 1; o <= radius[d]; ++o) sum += at(d, -o) + at(d, o);
  return 0.5 * at(0, 0) + (total ? 0.5 / total : 0.0) * sum;
}

double initial(index_t i, index_t j, index_t k) {
  return std::sin(0.37 * static_cast<double>(i) + 1.3 * static_cast<double>(j)) +
         0.01 * static_cast<double>(k * k);
}

struct setup {
  std::vector<index_t> shape;
  std::vector<int> grid;
  std::vector<dim_options> dims;
  std::vector<int> radius;
};

// Dim 0 is split into parts [1, 0 (3+ parts), rest balanced]: a block of one cell next to the
// first boundary, and an empty one behind it that deeper halos must reach across.
std::vector<index_t> thin_sizes(index_t n, int parts) {
  std::vector<index_t> s(static_cast<std::size_t>(parts), 0);
  if (parts == 1) return {n};
  s[0] = 1;
  int const first = parts >= 3 ? 2 : 1;
  index_t const rest = n - 1;
  int const k = parts - first;
  for (int p = first; p < parts; ++p) s[p] = rest / k + ((p - first) < rest % k ? 1 : 0);
  return s;
}

setup make_setup(std::vector<int> radius, int periodic_dim) {
  int const p = world_size();
  setup s;
  s.shape = {13, 9, 6};
  s.grid = (p % 2 == 0 && p > 2) ? std::vector<int>{p / 2, 2, 1} : std::vector<int>{p, 1, 1};
  s.dims.resize(3);
  s.dims[0].sizes = thin_sizes(s.shape[0], s.grid[0]);
  s.dims[periodic_dim].periodic = true;
  s.radius = std::move(radius);
  return s;
}

bool outside(setup const& s, index_t const g[3]) {
  for (int d = 0; d < 3; ++d)
    if (!s.dims[d].periodic && (g[d] < 0 || g[d] >= s.shape[d])) return true;
  return false;
}

index_t wrap(index_t g, index_t n) { return ((g % n) + n) % n; }

// The serial oracle: `steps` Jacobi steps on the whole tensor, row-major.
std::vector<double> oracle(setup const& s, int steps) {
  index_t const n0 = s.shape[0], n1 = s.shape[1], n2 = s.shape[2];
  std::vector<double> u(static_cast<std::size_t>(n0 * n1 * n2)), v(u.size());
  for (index_t i = 0; i < n0; ++i)
    for (index_t j = 0; j < n1; ++j)
      for (index_t k = 0; k < n2; ++k) u[(i * n1 + j) * n2 + k] = initial(i, j, k);
  for (int t = 0; t < steps; ++t) {
    for (index_t i = 0; i < n0; ++i)
      for (index_t j = 0; j < n1; ++j)
        for (index_t k = 0; k < n2; ++k) {
          auto at = [&](int d, int o) {
            index_t g[3] = {i, j, k};
            g[d] += o;
            if (outside(s, g)) return boundary_value;
            return u[(wrap(g[0], n0) * n1 + wrap(g[1], n1)) * n2 + wrap(g[2], n2)];
          };
          v[(i * n1 + j) * n2 + k] = star(at, s.radius);
        }
    u.swap(v);
  }
  return u;
}

// The same steps distributed, one exchange every `depth` steps; returns the number of owned
// cells that differ from the oracle in any bit.
index_t run_distributed(setup const& s, int depth, int steps, std::vector<double> const& want) {
  halox::process_grid grid(MPI_COMM_WORLD, s.grid);
  halox::halo_options ho;
  ho.method = halox::backend::mpi_pack;
  deep_halo_schedule sch(grid, s.shape, halox::dtype::float64, s.radius, depth, s.dims, ho);
  auto const& desc = sch.desc();
  EXPECT_EQ(sch.exchange_every(), depth);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(desc.dist().options(d).halo_lo, depth * s.radius[d]);
  box const alloc = desc.dist().allocated_box(grid.rank());
  auto const& st = desc.strides();
  // Halo cells start as NaN in both buffers (a value read before the exchange wrote it, or a
  // stale one, spreads to the result); cells beyond a non-periodic boundary hold the boundary
  // value in both, since the plan leaves them untouched.
  double const nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> a(static_cast<std::size_t>(desc.local_elements()), nan), b(a.size(), nan);
  box const own = desc.owned_box();
  if (!alloc.empty())
    for (index_t i = alloc.lo[0]; i < alloc.hi[0]; ++i)
      for (index_t j = alloc.lo[1]; j < alloc.hi[1]; ++j)
        for (index_t k = alloc.lo[2]; k < alloc.hi[2]; ++k) {
          index_t const g[3] = {i, j, k};
          auto const off = static_cast<std::size_t>(desc.local_offset({i, j, k}));
          bool const owned = i >= own.lo[0] && i < own.hi[0] && j >= own.lo[1] && j < own.hi[1] &&
                             k >= own.lo[2] && k < own.hi[2];
          if (outside(s, g))
            a[off] = b[off] = boundary_value;
          else if (owned)
            a[off] = initial(i, j, k);
        }
  std::vector<double>*cur = &a, *nxt = &b;
  for (int done = 0; done < steps; done += depth) {
    sch.plan().execute(halox::tensor_view(desc, *cur));
    int const m = std::min(depth, steps - done);
    for (int step = depth - m + 1; step <= depth; ++step) {
      box const r = sch.valid_region(step);
      double const* u = cur->data();
      double* v = nxt->data();
      for (index_t i = r.lo[0]; i < r.hi[0]; ++i)
        for (index_t j = r.lo[1]; j < r.hi[1]; ++j)
          for (index_t k = r.lo[2]; k < r.hi[2]; ++k) {
            index_t const c = i * st[0] + j * st[1] + k * st[2];
            auto at = [&](int d, int o) { return u[c + o * st[d]]; };
            v[c] = star(at, s.radius);
          }
      std::swap(cur, nxt);
    }
  }
  index_t bad = 0;
  if (!own.empty())
    for (index_t i = own.lo[0]; i < own.hi[0]; ++i)
      for (index_t j = own.lo[1]; j < own.hi[1]; ++j)
        for (index_t k = own.lo[2]; k < own.hi[2]; ++k) {
          double const got = (*cur)[static_cast<std::size_t>(desc.local_offset({i, j, k}))];
          double const exp = want[static_cast<std::size_t>((i * s.shape[1] + j) * s.shape[2] + k)];
          if (std::memcmp(&got, &exp, sizeof got) != 0) ++bad;
        }
  return bad;
}

void check_all_depths(setup const& s) {
  int const steps = 7; // not a multiple of 2, 3 or 4: the last cycle is a short one
  auto const want = oracle(s, steps);
  for (int depth = 1; depth <= 4; ++depth) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    EXPECT_EQ(run_distributed(s, depth, steps, want), 0) << "on rank " << world_rank();
  }
}

} // namespace

TEST(DeepHalo, SevenPointJacobiMatchesSerialBitForBit) {
  // Radius 1 in every dimension (the 7-point stencil); dim 1 periodic. At depth 2+ the halo of
  // the rank next to the one-cell block reaches past it (and past an empty block at 3+ ranks).
  check_all_depths(make_setup({1, 1, 1}, 1));
}

TEST(DeepHalo, WideStencilPeriodicThinBlockMatchesSerial) {
  // Radius 2 along the split, periodic dim 0 (the one-cell block wraps around), 1 along dim 1,
  // none along dim 2 (no halo there).
  check_all_depths(make_setup({2, 1, 0}, 0));
}

TEST(DeepHalo, RegionsAndCounts) {
  auto const s = make_setup({1, 1, 1}, 1);
  halox::process_grid grid(MPI_COMM_WORLD, s.grid);
  deep_halo_schedule one(grid, s.shape, halox::dtype::float64, s.radius, 1, s.dims);
  deep_halo_schedule four(grid, s.shape, halox::dtype::float64, s.radius, 4, s.dims);
  // A periodic halo wider than the whole extent (12 > 9 along dim 1); built on every rank (the
  // constructor is collective) before the ranks owning nothing return below.
  deep_halo_schedule deep(grid, s.shape, halox::dtype::float64, {0, 1, 0}, 12, s.dims);
  EXPECT_EQ(one.redundant_fraction(), 0.0);
  // Same peers (or more, when the deep halo reaches past a neighbour), wider messages.
  EXPECT_GE(four.messages(), one.messages());
  EXPECT_GE(four.bytes(), one.bytes());
  box const own = four.desc().owned_box();
  EXPECT_EQ(four.valid_region_global(4), own);
  if (own.empty()) {
    EXPECT_EQ(four.cells_computed(), 0);
    EXPECT_TRUE(four.valid_region(1).empty());
    return;
  }
  EXPECT_GT(four.redundant_fraction(), 0.0);
  EXPECT_LT(four.redundant_fraction(), 1.0);
  // Local coordinates: the last step's region starts at the owned offset.
  box const last = four.valid_region(4);
  auto const off = four.desc().owned_offset();
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(last.lo[d], off[d]);
    EXPECT_EQ(last.extent(d), own.extent(d));
    // Periodic dim 1 grows by 3 at step 1 on both sides, in local and global coordinates.
    if (d == 1) {
      EXPECT_EQ(four.valid_region_global(1).lo[1], own.lo[1] - 3);
      EXPECT_EQ(four.valid_region(1).lo[1], off[1] - 3);
    }
  }
  EXPECT_NE(four.describe().find("depth 4, radius 1,1,1"), std::string::npos) << four.describe();
  // The deep schedule's regions still grow by the radius per remaining step, and describe()
  // shortens its list of steps.
  EXPECT_EQ(deep.desc().dist().options(1).halo_lo, 12);
  EXPECT_EQ(deep.valid_region_global(1).lo[1], own.lo[1] - 11);
  EXPECT_EQ(deep.valid_region_global(1).lo[0], own.lo[0]);
  EXPECT_NE(deep.describe().find("... 4 more step(s)"), std::string::npos) << deep.describe();
}

TEST(DeepHalo, BadInputFailsOnEveryRank) {
  auto const s = make_setup({1, 1, 1}, 1);
  halox::process_grid grid(MPI_COMM_WORLD, s.grid);
  auto make = [&](std::vector<int> radius, int depth, std::vector<dim_options> dims) {
    return [=] { deep_halo_schedule x(grid, s.shape, halox::dtype::float64, radius, depth, dims); };
  };
  expect_error_everywhere(make({1, 1, 1}, 0, s.dims), errc::invalid_argument,
                          "deep halo depth 0 is invalid");
  expect_error_everywhere(make({1, 1}, 2, s.dims), errc::invalid_argument,
                          "stencil radius has 2 entries for a tensor of rank 3");
  expect_error_everywhere(make({1, -2, 1}, 2, s.dims), errc::invalid_argument,
                          "stencil radius -2 on dim 1 must not be negative");
  expect_error_everywhere(make({1, 1, 1}, 1 << 30, s.dims), errc::invalid_argument,
                          "exceeds the extent 13 of that non-periodic dimension");
  auto with_halo = s.dims;
  with_halo[2].halo_lo = 1;
  expect_error_everywhere(make({1, 1, 1}, 2, with_halo), errc::invalid_argument,
                          "dim_options on dim 2 set halo widths (1, 0)");
  expect_error_everywhere(make({1, 1, 1}, 7, s.dims), errc::invalid_argument,
                          "use a depth of at most 6");
  if (world_size() > 1) // ranks disagreeing on the depth are told so, by name
    expect_error_everywhere(make({1, 1, 1}, world_rank() == 0 ? 2 : 3, s.dims),
                            errc::inconsistent_ranks, "depth: 2 on rank 0, 3 on rank 1");
}
