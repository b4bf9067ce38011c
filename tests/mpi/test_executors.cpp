// Every host backend, through the public halo API, against a brute-force oracle on
// MPI_COMM_WORLD at every rank count the suite runs (1, 2, 3, 4, 6, 8).
//
// Geometries are computed from the world size, so every test runs at every count instead of
// skipping. Checks are EXPECT_* only and each test reaches the same collectives on every rank
// whatever its outcome. Each plan runs three times with different values: twice on the same
// buffers (reusing requests and cached datatypes), then on freshly allocated ones, so executors
// that cache address-dependent state (datatypes with absolute addresses) must notice the change.
#include "exec/executor.hpp"

#include <halox/error.hpp>
#include <halox/halo.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace halox;
using idx_t = std::vector<index_t>;

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Near-square 2-D grid of p ranks: {1,3}, {2,2}, {2,3}, {2,4}, ...
std::vector<int> dims2(int p) {
  int a = 1;
  for (int k = 1; k * k <= p; ++k)
    if (p % k == 0) a = k;
  return {a, p / a};
}

// Near-cubic 3-D grid of p ranks: {1,1,3}, {1,2,2}, {1,2,3}, {2,2,2}, ...
std::vector<int> dims3(int p) {
  int a = 1;
  for (int k = 1; k * k * k <= p; ++k)
    if (p % k == 0) a = k;
  auto const r = dims2(p / a);
  return {a, r[0], r[1]};
}

// `mixed`: column-major on even ranks, padded row-major on odd ones, so that sender and receiver
// of a message walk its cells with different loops and only the canonical order can agree.
enum class layout { row_major, padded, column_major, mixed };

struct tensor_spec {
  idx_t shape;
  dtype type = dtype::float64;
  std::vector<dim_options> opts;
  layout lay = layout::row_major;
};

struct geometry {
  std::vector<int> dims;
  std::vector<tensor_spec> tensors;
  bool fill = false; // boundary_fill::constant
};

constexpr double fill_value = 211;
double sentinel(dtype t) { return t == dtype::uint8 ? 250 : -1; }
double pad_marker(dtype t) { return t == dtype::uint8 ? 251 : -7; }

// Strides of `rank`'s buffer: padded rows that differ per rank, or dimension 0 fastest.
idx_t make_strides(distribution const& d, int rank, layout l) {
  if (l == layout::row_major || d.empty(rank)) return {};
  if (l == layout::mixed) l = rank % 2 == 0 ? layout::column_major : layout::padded;
  auto const ls = d.local_shape(rank);
  int const nd = d.ndim();
  idx_t s(nd);
  index_t step = 1;
  for (int k = 0; k < nd; ++k) {
    int const dim = l == layout::padded ? nd - 1 - k : k;
    s[dim] = step;
    step *= ls[dim] + (l == layout::padded ? 1 + (rank + k) % 3 : 0);
  }
  return s;
}

template <class T> void put(void* base, index_t off, double v) {
  T const x = static_cast<T>(v);
  std::memcpy(static_cast<unsigned char*>(base) + off * sizeof(T), &x, sizeof(T));
}

template <class T> double get(void const* base, index_t off) {
  T x;
  std::memcpy(&x, static_cast<unsigned char const*>(base) + off * sizeof(T), sizeof(T));
  return static_cast<double>(x);
}

void store(dtype t, void* base, index_t off, double v) {
  switch (t) {
  case dtype::float64: put<double>(base, off, v); break;
  case dtype::float32: put<float>(base, off, v); break;
  case dtype::int32: put<std::int32_t>(base, off, v); break;
  case dtype::int64: put<std::int64_t>(base, off, v); break;
  case dtype::uint8: put<std::uint8_t>(base, off, v); break;
  default: ADD_FAILURE() << "dtype " << to_string(t) << " is not used by these tests";
  }
}

double load(dtype t, void const* base, index_t off) {
  switch (t) {
  case dtype::float64: return get<double>(base, off);
  case dtype::float32: return get<float>(base, off);
  case dtype::int32: return get<std::int32_t>(base, off);
  case dtype::int64: return get<std::int64_t>(base, off);
  case dtype::uint8: return get<std::uint8_t>(base, off);
  default: return 0;
  }
}

template <class F> void for_each_cell(box const& a, F&& f) {
  if (a.empty()) return;
  idx_t g(a.lo, a.lo + a.nd);
  while (true) {
    f(g);
    int d = a.nd - 1;
    for (; d >= 0; --d) {
      if (++g[d] < a.hi[d]) break;
      g[d] = a.lo[d];
    }
    if (d < 0) return;
  }
}

bool inside(box const& b, idx_t const& g) {
  for (int d = 0; d < b.nd; ++d)
    if (g[d] < b.lo[d] || g[d] >= b.hi[d]) return false;
  return true;
}

index_t linear(idx_t const& g, idx_t const& lo, idx_t const& extent) {
  index_t l = 0;
  for (std::size_t d = 0; d < g.size(); ++d) l = l * extent[d] + (g[d] - lo[d]);
  return l;
}

// Wraps an allocated cell's global index into the tensor; false beyond a non-periodic boundary.
bool wrap(distribution const& d, idx_t const& g, idx_t& w) {
  w = g;
  for (int k = 0; k < d.ndim(); ++k) {
    index_t const n = d.shape()[k];
    if ((g[k] < 0 || g[k] >= n) && !d.options(k).periodic) return false;
    w[k] = ((g[k] % n) + n) % n;
  }
  return true;
}

// Owned value of the cell with global index `w` at iteration `it`.
double owned_value(distribution const& d, idx_t const& w, int it) {
  index_t const m = d.type() == dtype::uint8 ? 200 : 1000000;
  return static_cast<double>(1 + (linear(w, idx_t(w.size(), 0), d.shape()) + 37 * it) % m);
}

// Value rank `r` puts in its halo cell `g` before a reverse exchange: scattered over the range of
// the owned values, so that max and min pick halo copies as often as owned cells.
double halo_value(distribution const& d, int r, idx_t const& g, int it) {
  box const a = d.allocated_box(r);
  idx_t const lo(a.lo, a.lo + a.nd);
  idx_t ext(a.nd);
  index_t cells = 1;
  for (int k = 0; k < a.nd; ++k) {
    ext[k] = a.extent(k);
    cells *= d.shape()[k];
  }
  index_t const h = r * 7919 + linear(g, lo, ext) * 31 + it * 13;
  return static_cast<double>(1 + h % (cells + 37 * it + 1));
}

struct local_tensor {
  tensor_desc desc;
  std::vector<std::uint64_t> mem; // 8-byte aligned storage for any dtype
  void* data() { return mem.data(); }
  distribution const& dist() const { return desc.dist(); }
  dtype type() const { return desc.type(); }
  int rank() const { return desc.grid().rank(); }
};

std::vector<local_tensor> make_tensors(process_grid const& grid, geometry const& geo) {
  std::vector<local_tensor> out;
  for (auto const& t : geo.tensors) {
    distribution const d(t.shape, t.type, geo.dims, t.opts);
    out.push_back(
        {tensor_desc(grid, t.shape, t.type, t.opts, make_strides(d, grid.rank(), t.lay)), {}});
  }
  return out;
}

// Fills the buffer with owned values, `halo` in halo cells and the pad marker in the cells that
// padding skips. Run 2 moves it to a new allocation (made before the old one is freed, so the
// address changes); runs 0 and 1 reuse it, so cached address-dependent state is used as well.
template <class H> void prepare(local_tensor& t, int it, H&& halo) {
  if (t.mem.empty() || it == 2)
    t.mem = std::vector<std::uint64_t>((t.desc.local_bytes() + 7) / 8 + 1);
  for (index_t i = 0; i < t.desc.local_elements(); ++i)
    store(t.type(), t.data(), i, pad_marker(t.type()));
  box const o = t.desc.owned_box();
  for_each_cell(t.dist().allocated_box(t.rank()), [&](idx_t const& g) {
    store(t.type(), t.data(), t.desc.local_offset(g),
          inside(o, g) ? owned_value(t.dist(), g, it) : halo(g));
  });
}

// Compares every element of the buffer with `expect(global index)` (pad marker off the cells);
// one EXPECT per tensor, naming the first mismatch.
template <class E> void check(local_tensor& t, std::string const& what, E&& expect) {
  std::vector<double> want(t.desc.local_elements(), pad_marker(t.type()));
  for_each_cell(t.dist().allocated_box(t.rank()),
                [&](idx_t const& g) { want[t.desc.local_offset(g)] = expect(g); });
  index_t bad = 0;
  std::ostringstream first;
  for (index_t i = 0; i < static_cast<index_t>(want.size()); ++i) {
    double const got = load(t.type(), t.data(), i);
    if (got == want[i]) continue;
    if (bad++ == 0) first << "element " << i << ": got " << got << ", expected " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << " on " << t.dist().str() << ": " << first.str();
}

std::vector<tensor_view> views(std::vector<local_tensor>& ts) {
  std::vector<tensor_view> v;
  for (auto& t : ts) v.emplace_back(t.desc, t.data(), t.mem.size() * 8);
  return v;
}

halo_plan make_plan(std::vector<local_tensor> const& ts, geometry const& geo, backend b) {
  std::vector<tensor_desc> descs;
  for (auto const& t : ts) descs.push_back(t.desc);
  halo_options o;
  o.method = b;
  o.boundary = geo.fill ? boundary_fill::constant : boundary_fill::untouched;
  o.fill_value = fill_value;
  halo_plan plan(descs, o);
  EXPECT_EQ(plan.selected_backend(), b);
  return plan;
}

void forward_once(halo_plan& plan, std::vector<local_tensor>& ts, geometry const& geo, int it) {
  for (auto& t : ts) prepare(t, it, [&](idx_t const&) { return sentinel(t.type()); });
  plan.execute(views(ts));
  for (std::size_t k = 0; k < ts.size(); ++k) {
    auto& t = ts[k];
    box const o = t.desc.owned_box();
    check(t, "forward, tensor " + std::to_string(k) + ", run " + std::to_string(it),
          [&](idx_t const& g) {
            idx_t w;
            if (inside(o, g)) return owned_value(t.dist(), g, it);
            if (!wrap(t.dist(), g, w)) return geo.fill ? fill_value : sentinel(t.type());
            return owned_value(t.dist(), w, it);
          });
  }
}

double combine(reduce_op op, double a, double b) {
  switch (op) {
  case reduce_op::sum: return a + b;
  case reduce_op::max: return std::max(a, b);
  case reduce_op::min: return std::min(a, b);
  }
  return a;
}

// Reverse exchange; the oracle adds every rank's halo copies of each cell (every rank can list
// every rank's allocated box) into a dense copy of the global tensor.
void reverse_once(halo_plan& plan, std::vector<local_tensor>& ts, reduce_op op, int it) {
  for (auto& t : ts)
    prepare(t, it, [&](idx_t const& g) { return halo_value(t.dist(), t.rank(), g, it); });
  plan.execute_reverse(views(ts), op);
  for (std::size_t k = 0; k < ts.size(); ++k) {
    auto& t = ts[k];
    auto const& d = t.dist();
    idx_t const zero(d.ndim(), 0);
    std::vector<double> global;
    box all;
    all.nd = d.ndim();
    for (int i = 0; i < all.nd; ++i) all.hi[i] = d.shape()[i];
    for_each_cell(all, [&](idx_t const& g) { global.push_back(owned_value(d, g, it)); });
    for (int r = 0; r < d.nranks(); ++r) {
      box const o = d.owned_box(r);
      for_each_cell(d.allocated_box(r), [&](idx_t const& g) {
        idx_t w;
        if (inside(o, g) || !wrap(d, g, w)) return;
        double& e = global[linear(w, zero, d.shape())];
        e = combine(op, e, halo_value(d, r, g, it));
      });
    }
    box const o = t.desc.owned_box();
    check(t, "reverse, tensor " + std::to_string(k) + ", run " + std::to_string(it),
          [&](idx_t const& g) {
            return inside(o, g) ? global[linear(g, zero, d.shape())]
                                : halo_value(d, t.rank(), g, it);
          });
  }
}

void run_forward(geometry const& geo, backend b) {
  process_grid const grid(MPI_COMM_WORLD, geo.dims);
  auto ts = make_tensors(grid, geo);
  auto plan = make_plan(ts, geo, b);
  for (int it = 0; it < 3; ++it) forward_once(plan, ts, geo, it);
}

void run_reverse(geometry const& geo, backend b, reduce_op op) {
  process_grid const grid(MPI_COMM_WORLD, geo.dims);
  auto ts = make_tensors(grid, geo);
  auto plan = make_plan(ts, geo, b);
  for (int it = 0; it < 3; ++it) reverse_once(plan, ts, op, it);
}

dim_options asym(int lo, int hi, bool periodic) { return dim_options{lo, hi, periodic, {}}; }

// Part sizes along a dimension of extent 7 with empty parts in the middle: {3,0,...,0,4}.
dim_options holes(int p, int w) {
  dim_options o = dim_options::halo(w);
  o.sizes.assign(p, 0);
  o.sizes[0] = p == 1 ? 7 : 3;
  if (p > 1) o.sizes[p - 1] = 4;
  return o;
}

// -------- geometries (functions of the world size p) --------

geometry corners_2d(int p) {
  return {
      dims2(p), {{{11, 13}, dtype::float64, {dim_options::halo(1), dim_options::halo(2)}}}, true};
}
geometry corners_3d(int p) {
  auto h = dim_options::halo(1);
  return {dims3(p), {{{6, 7, 5}, dtype::float32, {h, h, h}}}, false};
}
geometry periodic_3d(int p) {
  auto h = dim_options::halo(1, true);
  return {dims3(p), {{{6, 6, 6}, dtype::int32, {h, h, h}}}, false};
}
// 7x7 split 4 ways with halo 3 at p = 4: blocks of 2 and 1, so halos reach two or three hops.
geometry multi_hop(int p) {
  index_t const n = std::max(7, 2 * p - 1);
  return {{p, 1}, {{{n, 7}, dtype::float64, {dim_options::halo(3), dim_options::halo(3)}}}, true};
}
geometry multi_hop_periodic_2d(int p) {
  auto const d = dims2(p);
  auto h = dim_options::halo(3, true);
  return {d, {{{2 * d[0] + 1, 2 * d[1] + 1}, dtype::float64, {h, h}}}, false};
}
// More ranks than elements along dim 0 (p >= 2), trailing parts empty.
geometry empty_ranks(int p) {
  index_t const n = std::max(1, p / 2);
  return {
      {p, 1}, {{{n, 6}, dtype::float64, {dim_options::halo(1), dim_options::halo(2, true)}}}, true};
}
geometry empty_ranks_in_middle(int p) {
  return {{p, 1}, {{{7, 4}, dtype::int64, {holes(p, 2), dim_options::halo(1, true)}}}, true};
}
geometry mixed_dtypes(int p) {
  return {dims2(p),
          {{{10, 9}, dtype::float64, {dim_options::halo(1), dim_options::halo(2, true)}},
           {{7, 12}, dtype::int32, {asym(0, 2, false), asym(1, 1, true)}},
           {{8, 8}, dtype::uint8, {dim_options::halo(1, true), dim_options::halo(1, true)}}},
          true};
}
geometry strided(int p) {
  auto const d = dims3(p);
  return {d,
          {{{5, 6, 7},
            dtype::float32,
            {dim_options::halo(1), dim_options::halo(2), dim_options::halo(1, true)},
            layout::padded},
           {{6, 5, 8},
            dtype::float64,
            {dim_options::halo(1, true), dim_options::halo(1), dim_options::halo(2, true)},
            layout::mixed}},
          true};
}

class Executors : public testing::TestWithParam<backend> {};

TEST_P(Executors, Corners2D) { run_forward(corners_2d(world_size()), GetParam()); }
TEST_P(Executors, Corners3D) { run_forward(corners_3d(world_size()), GetParam()); }
TEST_P(Executors, PeriodicCorners3D) { run_forward(periodic_3d(world_size()), GetParam()); }
TEST_P(Executors, Periodic2DWideHalos) {
  auto h = dim_options::halo(2, true);
  run_forward({dims2(world_size()), {{{9, 10}, dtype::int32, {h, h}}}}, GetParam());
}
TEST_P(Executors, PeriodicWrapsMoreThanOnce) {
  int const p = world_size();
  run_forward({{p}, {{{3}, dtype::float64, {dim_options::halo(5, true)}}}}, GetParam());
}
TEST_P(Executors, MultiHop) { run_forward(multi_hop(world_size()), GetParam()); }
TEST_P(Executors, MultiHopPeriodic2D) {
  run_forward(multi_hop_periodic_2d(world_size()), GetParam());
}
TEST_P(Executors, EmptyRankTrailing) { run_forward(empty_ranks(world_size()), GetParam()); }
TEST_P(Executors, EmptyRankInMiddle) {
  run_forward(empty_ranks_in_middle(world_size()), GetParam());
}
TEST_P(Executors, AsymmetricWidths) {
  run_forward(
      {dims2(world_size()), {{{9, 8}, dtype::int64, {asym(2, 0, false), asym(0, 3, true)}}}, true},
      GetParam());
}
TEST_P(Executors, MixedDtypesInOnePlan) { run_forward(mixed_dtypes(world_size()), GetParam()); }
TEST_P(Executors, PaddedAndMixedStrides) { run_forward(strided(world_size()), GetParam()); }

TEST_P(Executors, ReverseSumCorners2D) {
  run_reverse(corners_2d(world_size()), GetParam(), reduce_op::sum);
}
TEST_P(Executors, ReverseMaxPeriodic3D) {
  run_reverse(periodic_3d(world_size()), GetParam(), reduce_op::max);
}
TEST_P(Executors, ReverseSumMultiHop) {
  run_reverse(multi_hop(world_size()), GetParam(), reduce_op::sum);
}
TEST_P(Executors, ReverseSumMultiHopPeriodic2D) {
  run_reverse(multi_hop_periodic_2d(world_size()), GetParam(), reduce_op::sum);
}
TEST_P(Executors, ReverseMinEmptyRankInMiddle) {
  run_reverse(empty_ranks_in_middle(world_size()), GetParam(), reduce_op::min);
}
TEST_P(Executors, ReverseSumStrided) {
  run_reverse(strided(world_size()), GetParam(), reduce_op::sum);
}

// One plan, directions and ops alternating; each executor reuses its buffers for runs 0 and 1
// and sees new ones in run 2.
TEST_P(Executors, ReverseAlternatingWithForward) {
  geometry geo = mixed_dtypes(world_size());
  geo.tensors.pop_back(); // uint8 would overflow under sum
  process_grid const grid(MPI_COMM_WORLD, geo.dims);
  auto ts = make_tensors(grid, geo);
  auto plan = make_plan(ts, geo, GetParam());
  for (int it = 0; it < 3; ++it) {
    forward_once(plan, ts, geo, it);
    reverse_once(plan, ts, it == 1 ? reduce_op::max : reduce_op::sum, it);
  }
}

INSTANTIATE_TEST_SUITE_P(Host, Executors, testing::ValuesIn(host_backends()),
                         [](testing::TestParamInfo<backend> const& i) {
                           return std::string(to_string(i.param));
                         });

// A schedule of one float32 message of `n` elements to the next rank and one from the previous
// one. Only the schedule is built: no buffer of that size exists.
detail::schedule ring_schedule(index_t n) {
  int const p = world_size();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  detail::schedule s;
  detail::slot_layout sl;
  sl.strides = {1};
  sl.elements = n;
  s.slots.push_back(sl);
  detail::region all;
  all.b.nd = 1;
  all.b.hi[0] = n;
  s.sends.push_back({(r + 1) % p, {all}, 0});
  s.recvs.push_back({(r + p - 1) % p, {all}, 0});
  s.finalize();
  return s;
}

detail::exec_config world_config() {
  detail::exec_config cfg;
  cfg.comm = MPI_COMM_WORLD;
  return cfg;
}

// A message of more than INT_MAX bytes cannot be described by the int counts of the MPI calls
// these backends use: each must refuse it with a clear error when it is built, before any
// collective or allocation of that size.
TEST(ExecutorLimits, MessagesAboveIntMaxAreRefused) {
  auto const s = ring_schedule(700'000'000); // 2.8 GB
  for (backend b :
       {backend::mpi_datatype, backend::mpi_neighbor, backend::alltoallv, backend::alltoallw}) {
    if (!detail::backend_available(b, memory_space::host)) continue;
    try {
      auto e = detail::make_executor(b, s, world_config());
      ADD_FAILURE() << to_string(b) << " accepted a message of " << s.sends[0].bytes << " bytes";
    } catch (error const& e) {
      EXPECT_EQ(e.code(), errc::unsupported) << to_string(b) << ": " << e.what();
      EXPECT_NE(e.message().find("exceeds MPI's int count"), std::string::npos) << e.what();
    }
  }
}

// Only rank 0 cannot build its executor: mpi_neighbor creates a graph communicator (collective)
// in its constructor, so every rank must throw rather than wait there for rank 0.
TEST(ExecutorLimits, NeighborRanksAgreeBeforeCreatingTheGraph) {
  if (!detail::backend_available(backend::mpi_neighbor, memory_space::host))
    GTEST_SKIP() << "mpi_neighbor is not built";
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  auto const s = ring_schedule(r == 0 ? 700'000'000 : 16);
  int threw = 0;
  try {
    auto e = detail::make_executor(backend::mpi_neighbor, s, world_config());
  } catch (error const& e) {
    threw = 1;
    if (r == 0) EXPECT_EQ(e.code(), errc::unsupported) << e.what();
  }
  EXPECT_EQ(threw, 1);
}

} // namespace
